//! `shoal mgr`: the manager daemon (`shoal mgr --id x`: Prometheus
//! `/metrics` and the dashboard on `mgr_http_addr`, active or standby as
//! the monitors' manager map says), and `shoal mgr stat|services|fail`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::Value;
use shoal_mon::Command;
use shoal_monclient::replies::MgrMapReply;
use shoal_net::{Incoming, KeyringAuth, Messenger, NetConfig, TcpTransport};
use shoal_types::{EntityName, EntityType};

use super::common::{Ctx, Format, mon_command_as, print, print_typed};

/// `shoal mgr`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct MgrArgs {
    #[command(subcommand)]
    cmd: Option<MgrCmd>,
    /// The manager's name: it runs as `mgr.ID`, whose key must be in the keyring.
    #[arg(long, short = 'i')]
    id: Option<String>,
    /// Serve HTTP here (by default `mgr_http_addr`; port 0: any free port).
    #[arg(long)]
    bind: Option<SocketAddr>,
    /// Once listening, write `{"pid", "addr"}` here (removed on exit).
    #[arg(long)]
    state_file: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
enum MgrCmd {
    /// The manager map: the active manager and the standbys.
    Stat {
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Where the active manager serves: its dashboard and `/metrics`.
    Services {
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Makes a manager give up its role; a standby takes over.
    Fail {
        /// The manager's name (`x` for `mgr.x`).
        name: String,
    },
}

/// Runs `shoal mgr ...`.
pub fn run(a: MgrArgs, ctx: &Ctx) -> anyhow::Result<()> {
    match a.cmd {
        Some(MgrCmd::Stat { format }) => {
            let m: MgrMapReply = mon_command_as(ctx, &Command::MgrStat)?;
            print_typed(format, &m, stat_plain);
            Ok(())
        }
        Some(MgrCmd::Services { format }) => {
            let m: MgrMapReply = mon_command_as(ctx, &Command::MgrStat)?;
            let services = match m.active.as_ref().map(|a| &a.addr) {
                Some(addr) => serde_json::json!({
                    "dashboard": format!("http://{addr}/"),
                    "prometheus": format!("http://{addr}/metrics"),
                }),
                None => serde_json::json!({}),
            };
            print(format, &services, super::common::pretty);
            Ok(())
        }
        Some(MgrCmd::Fail { name }) => {
            let name = name.strip_prefix("mgr.").unwrap_or(&name).to_string();
            let m: MgrMapReply = mon_command_as(ctx, &Command::MgrFail { name })?;
            print_typed(Format::Plain, &m, stat_plain);
            Ok(())
        }
        None => {
            let id = a
                .id
                .or_else(|| (ctx.name.ty() == EntityType::Mgr).then(|| ctx.name.id().to_string()))
                .context("name the manager: shoal mgr --id NAME (it runs as mgr.NAME)")?;
            daemon(&id, a.bind, a.state_file, ctx)
        }
    }
}

fn stat_plain(m: &MgrMapReply) -> String {
    let (active, addr) = match &m.active {
        Some(a) => (a.name.as_str(), a.addr.as_str()),
        None => ("none", "-"),
    };
    let standbys: Vec<&str> = m.standbys.iter().map(|s| s.name.as_str()).collect();
    format!(
        "epoch {}: active {active} at {addr}, standbys: {}\n",
        m.epoch,
        if standbys.is_empty() {
            "none".to_string()
        } else {
            standbys.join(", ")
        }
    )
}

fn daemon(
    id: &str,
    bind: Option<SocketAddr>,
    state_file: Option<std::path::PathBuf>,
    ctx: &Ctx,
) -> anyhow::Result<()> {
    let entity = EntityName::new(EntityType::Mgr, id)?;
    let config = ctx.config_for(&entity)?;
    let o = &config.options;
    let http = match bind {
        Some(b) => b,
        None => o
            .mgr_http_addr
            .parse()
            .with_context(|| format!("mgr_http_addr {:?}", o.mgr_http_addr))?,
    };
    if o.keyring.is_empty() {
        anyhow::bail!("no keyring: set keyring = PATH (with mgr.{id}'s key)");
    }
    let opts = shoal_mgr::MgrOptions {
        name: id.to_string(),
        http,
        beacon_interval: Duration::from_millis(o.mgr_beacon_interval_ms.max(100)),
        period: Duration::from_millis(o.mgr_stats_period_ms.max(200)),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        super::crash::for_front_end(ctx, &format!("mgr.{id}"));
        let monc = super::common::mon_client_as(
            &config,
            entity.clone(),
            std::path::Path::new(&o.keyring),
            Arc::new(|_: Incoming| {}),
        )?;
        let mons = super::common::mon_addrs(&config)?;
        let net = NetConfig::from_options(o);
        let scrub = scrub_hook(mons.clone(), net.clone());
        let mut net = net;
        net.reconnect_attempts = 1;
        let timeout = Duration::from_millis(o.mon_command_timeout_ms) + Duration::from_secs(3);
        // Dashboard users authenticate to the monitors with their own key.
        let login: shoal_mgr::Login = Arc::new(move |name, secret| {
            let mut keyring = shoal_net::Keyring::default();
            keyring.insert(
                name.clone(),
                shoal_net::KeyringEntry {
                    key: secret,
                    caps: Default::default(),
                },
            );
            let auth = Arc::new(KeyringAuth::new(name.clone(), keyring));
            let msgr = Messenger::new(
                name,
                net.clone(),
                Arc::new(TcpTransport),
                auth,
                Arc::new(|_: Incoming| {}),
            );
            shoal_mon::MonClient::new(msgr, mons.clone(), timeout)
        });
        // Images and buckets for the dashboard, read with the manager's
        // own key (its `osd` caps must allow reads).
        let catalog = match shoal_client::ClientOptions::from_loaded(&config, &entity) {
            Ok(copts) => match shoal_client::Client::connect(copts).await {
                Ok(client) => Some(catalog(client)),
                Err(e) => {
                    tracing::warn!("no images or buckets on the dashboard: {e}");
                    None
                }
            },
            Err(e) => {
                tracing::warn!("no images or buckets on the dashboard: {e}");
                None
            }
        };
        let hooks = shoal_mgr::Hooks {
            login,
            catalog,
            scrub: Some(scrub),
        };
        let mgr = shoal_mgr::Mgr::start(opts, monc, hooks).await?;
        super::common::announce(
            &format!("mgr.{id}: dashboard and /metrics on http://{}/", mgr.addr()),
            mgr.addr(),
            state_file.as_deref(),
        )?;
        super::mon::wait_for_signal().await?;
        drop(mgr);
        if let Some(path) = &state_file {
            let _ = std::fs::remove_file(path);
        }
        Ok(())
    })
}

/// Images (and buckets) listed at most per refresh: the dashboard shows
/// a page of them, not a whole large cluster.
const CATALOG_MAX: usize = 500;

/// The dashboard's images and buckets, listed through `client`.
fn catalog(client: shoal_client::Client) -> shoal_mgr::Catalog {
    Arc::new(move || {
        let client = client.clone();
        Box::pin(async move { list_catalog(&client).await.map_err(|e| format!("{e:#}")) })
    })
}

async fn list_catalog(client: &shoal_client::Client) -> anyhow::Result<Value> {
    let map = client.map()?;
    let mut images = Vec::new();
    let mut truncated = false;
    for pool in map.pools().values() {
        let p = client.pool(&pool.name)?;
        // Pools without an image directory hold no images.
        let Ok(entries) = shoal_block::rbd::list(&p).await else {
            continue;
        };
        for e in entries {
            if images.len() >= CATALOG_MAX {
                truncated = true;
                break;
            }
            if let Ok(i) = shoal_block::Image::open_read_only(&p, &e.name).await {
                let info = i.info();
                images.push(serde_json::json!({
                    "pool": pool.name,
                    "name": info.name,
                    "size": info.size,
                    "objects": info.objects,
                    "snapshots": info.snapshot_count,
                    "parent": info.parent,
                    "data_pool": info.data_pool,
                    "created_ms": info.created_ms,
                }));
            }
        }
    }
    let mut buckets = Vec::new();
    if let Ok(p) = client.pool(super::gateway::DEFAULT_POOL) {
        let meta = shoal_gateway::Meta::new(p);
        if let Ok(all) = meta.buckets().await {
            truncated |= all.len() > CATALOG_MAX;
            for b in all.into_iter().take(CATALOG_MAX) {
                buckets.push(serde_json::json!({
                    "name": b.name,
                    "owner": b.owner,
                    "created_ms": b.created_ms,
                    "acl": b.acl,
                    "versioning": b.versioning,
                    "shards": b.shards,
                }));
            }
        }
    }
    Ok(serde_json::json!({ "images": images, "buckets": buckets, "truncated": truncated }))
}

/// How long the dashboard's scrub request waits for its first PG.
const FIRST_PG_TIMEOUT: Duration = Duration::from_secs(30);

/// Scrubs from the dashboard: a client of the cluster as the logged-in
/// user (the OSDs check its caps: a PG command needs `osd` write), the
/// first PG of the OSD scrubbed before answering, the others after.
fn scrub_hook(mons: Vec<SocketAddr>, net: NetConfig) -> shoal_mgr::Scrub {
    Arc::new(move |name, key, osd, deep| {
        let (mons, net) = (mons.clone(), net.clone());
        Box::pin(async move {
            let failed = |e: shoal_client::Error| shoal_mgr::Refusal {
                denied: matches!(e, shoal_client::Error::PermissionDenied(_)),
                message: e.to_string(),
            };
            let mut opts = shoal_client::ClientOptions::new(mons, name, key);
            opts.net = net;
            let client = shoal_client::Client::connect(opts).await.map_err(failed)?;
            let pgs = super::pg::pgs_of(&client, osd);
            let command = if deep { "deep-scrub" } else { "scrub" };
            let timeout = Duration::from_secs(600);
            let Some(first) = pgs.first().copied() else {
                client.shutdown().await;
                return Err(shoal_mgr::Refusal {
                    denied: false,
                    message: format!("osd.{osd} is primary of no PG"),
                });
            };
            // The first answers the request: bounded, as a page waits for it.
            let done = match client.pg_command(first, command, FIRST_PG_TIMEOUT).await {
                Ok(v) => v,
                Err(e) => {
                    client.shutdown().await;
                    return Err(failed(e));
                }
            };
            let rest: Vec<shoal_maps::PgId> = pgs.iter().skip(1).copied().collect();
            let n = pgs.len();
            tokio::spawn(async move {
                for pg in rest {
                    if let Err(e) = client.pg_command(pg, command, timeout).await {
                        tracing::warn!("{command} of pg {pg}: {e}");
                    }
                }
                client.shutdown().await;
            });
            Ok(serde_json::json!({ "osd": osd, "command": command, "pgs": n, "first": done }))
        })
    })
}

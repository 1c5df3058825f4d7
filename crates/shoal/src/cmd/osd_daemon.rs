//! `shoal osd --id N` runs an OSD; `shoal osd mkfs --id N` prepares its
//! data directory (store, key, metadata). The other `shoal osd`
//! subcommands (in `osd.rs`) read and change the OSD map.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use shoal_mon::Command;
use shoal_net::{Keyring, KeyringEntry, NetConfig, Secret};
use shoal_objectstore::block::{MkfsOptions, OpenOptions, StoreIdentity};
use shoal_objectstore::{BlockStore, MemStore, ObjectStore};
use shoal_osd::ctx::PgConfig;
use shoal_osd::daemon::{Osd, OsdOptions};
use shoal_osd::log::LogLimits;
use shoal_types::EntityName;

use super::common::{Ctx, mon_addrs, mon_command_as};
use super::mon::wait_for_signal;
use super::osd::OsdCmd;

/// Run an OSD (`shoal osd --id N`), or read and change the OSD map.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct OsdArgs {
    #[command(subcommand)]
    sub: Option<OsdCmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The OSD's id: 3 for osd.3.
    #[arg(long)]
    id: Option<u32>,
    /// Data directory (default: the osd_data option).
    #[arg(long)]
    data: Option<PathBuf>,
}

/// Which object store an OSD uses.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum StoreKind {
    /// BlockStore: data file plus metadata database, crash-safe.
    Block,
    /// MemStore: in memory, lost when the OSD stops (tests, benchmarks).
    Mem,
}

/// `shoal osd mkfs`.
#[derive(Debug, Args)]
pub struct MkfsArgs {
    /// The OSD's id: 3 for osd.3.
    #[arg(long)]
    id: u32,
    /// Data directory (default: the osd_data option).
    #[arg(long)]
    data: Option<PathBuf>,
    /// The object store.
    #[arg(long, value_enum, default_value = "block")]
    store: StoreKind,
}

const META_FILE: &str = "osd.json";
const STORE_DIR: &str = "store";

fn data_dir(flag: Option<PathBuf>, option: &str, id: u32) -> anyhow::Result<PathBuf> {
    match flag {
        Some(p) => Ok(p),
        None if !option.is_empty() => Ok(PathBuf::from(option.replace("$id", &id.to_string()))),
        None => bail!("no data directory: pass --data DIR or set osd_data"),
    }
}

/// Runs `shoal osd ...`.
pub fn run(args: OsdArgs, ctx: &Ctx) -> anyhow::Result<()> {
    match args.sub {
        Some(OsdCmd::Mkfs(m)) => {
            shoal_config::logging::init(&ctx.config.options.log_level)?;
            mkfs(m, ctx)
        }
        Some(sub) => {
            shoal_config::logging::init(&ctx.config.options.log_level)?;
            super::osd::run(sub, ctx)
        }
        None => {
            let Some(id) = args.run.id else {
                bail!("`shoal osd` needs --id N to run an OSD (or a subcommand; see --help)")
            };
            run_daemon(ctx, id, args.run.data)
        }
    }
}

/// Creates the OSD's data directory: its store, its key (from the
/// monitors, as the caller), and its metadata.
fn mkfs(args: MkfsArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let entity = EntityName::osd(args.id);
    let config = ctx.config_for(&entity)?;
    let dir = data_dir(args.data, &config.options.osd_data, args.id)?;
    if dir.join(META_FILE).exists() {
        bail!("{} already holds an OSD (remove it first)", dir.display());
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let caps = BTreeMap::from([
        ("mon".to_string(), "allow profile osd".to_string()),
        ("osd".to_string(), "allow *".to_string()),
    ]);
    let out: shoal_monclient::replies::AuthReply = mon_command_as(
        ctx,
        &Command::AuthGetOrCreate {
            entity: entity.to_string(),
            caps,
        },
    )?;
    let key = shoal_monclient::replies::AuthKey::of(&out, &entity.to_string())
        .context("the monitors' answer has no key")?;
    let mut ring = Keyring::default();
    ring.insert(
        entity.clone(),
        KeyringEntry {
            key: Secret::from_base64(key).map_err(anyhow::Error::msg)?,
            caps: BTreeMap::new(),
        },
    );
    ring.save(&dir.join("keyring"))?;
    let status: shoal_monclient::replies::StatusReply = mon_command_as(ctx, &Command::Status)?;
    let fsid = Some(status.fsid)
        .filter(|f| !f.is_empty())
        .context("the monitors report no cluster fsid (not bootstrapped yet?)")?;
    if args.store == StoreKind::Block {
        let opts = MkfsOptions {
            data_bytes: config.options.osd_store_bytes,
            preallocate: config.options.osd_store_preallocate,
        };
        let path = dir.join(STORE_DIR);
        shoal_objectstore::tool::mkfs(&path, &opts)?;
        // The store records whose it is, so it is never opened by another OSD
        // or in another cluster.
        let store = BlockStore::open(&path, &OpenOptions::default())?;
        store.set_identity(&StoreIdentity {
            fsid: fsid.clone(),
            osd_id: args.id,
        })?;
    }
    let store = match args.store {
        StoreKind::Block => "block",
        StoreKind::Mem => "mem",
    };
    let meta = OsdMeta {
        id: Some(args.id),
        store: Some(store.to_string()),
        format: Some(1),
        fsid: Some(fsid),
    };
    std::fs::write(
        dir.join(META_FILE),
        format!("{}\n", serde_json::to_string_pretty(&meta)?),
    )?;
    outln!("created {entity} in {} ({store} store)", dir.display());
    Ok(())
}

/// `osd.json`, the data directory's record of whose it is. Every field is
/// optional on reading so that a damaged or old file gets a clear error
/// (directories made before the fsid was recorded have none).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct OsdMeta {
    id: Option<u32>,
    store: Option<String>,
    format: Option<u32>,
    fsid: Option<String>,
}

/// Reads `osd.json`, which must be osd.`id`'s: the first check of a data
/// directory, before its key or its store is trusted.
fn read_osd_json(dir: &Path, id: u32) -> anyhow::Result<OsdMeta> {
    let meta_path = dir.join(META_FILE);
    let text = std::fs::read_to_string(&meta_path).with_context(|| {
        format!(
            "reading {} (make the OSD with `shoal osd mkfs` first)",
            meta_path.display()
        )
    })?;
    let meta: OsdMeta =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", meta_path.display()))?;
    match meta.id {
        Some(have) if have == id => Ok(meta),
        Some(have) => bail!(
            "{} belongs to osd.{have}, not osd.{id}: wrong --id or --data",
            meta_path.display()
        ),
        None => bail!("{}: no OSD id recorded", meta_path.display()),
    }
}

/// Opens the OSD's store; a BlockStore must record the same OSD and cluster
/// as `osd.json`.
fn open_store(
    dir: &Path,
    id: u32,
    meta: &OsdMeta,
    config: &shoal_config::Config,
) -> anyhow::Result<Arc<dyn ObjectStore>> {
    // Directories made before the fsid was recorded open without the check.
    let identity = meta.fsid.as_ref().map(|fsid| StoreIdentity {
        fsid: fsid.clone(),
        osd_id: id,
    });
    Ok(match meta.store.as_deref() {
        Some("block") => Arc::new(BlockStore::open(
            &dir.join(STORE_DIR),
            &OpenOptions {
                identity,
                cache_bytes: config.options.osd_store_cache_bytes,
                ..OpenOptions::default()
            },
        )?),
        Some("mem") => Arc::new(MemStore::new(config.options.osd_store_bytes)),
        other => bail!("{}: unknown store {other:?}", dir.join(META_FILE).display()),
    })
}

/// The CRUSH weight an OSD new to CRUSH asks for (16.16): the option's
/// value, or (negative) its store's size in TiB, as Ceph weighs OSDs; at
/// least the smallest non-zero weight, so that a tiny store still takes
/// data.
fn initial_weight(option: f64, statfs: Option<shoal_objectstore::StatFs>) -> u32 {
    let tib = if option >= 0.0 {
        option
    } else {
        statfs.map_or(1.0, |s| s.total_bytes as f64 / (1u64 << 40) as f64)
    };
    let w = (tib * 65536.0).round();
    if option >= 0.0 && w == 0.0 {
        return 0;
    }
    w.clamp(1.0, f64::from(u32::MAX)) as u32
}

fn run_daemon(ctx: &Ctx, id: u32, data: Option<PathBuf>) -> anyhow::Result<()> {
    let entity = EntityName::osd(id);
    let config = ctx.config_for(&entity)?;
    shoal_config::logging::init(&config.options.log_level)?;
    let o = &config.options;
    let dir = data_dir(data, &o.osd_data, id)?;
    let meta = read_osd_json(&dir, id)?;
    super::crash::install(entity.to_string(), dir.join("crash"), true);
    let ring = Keyring::load(&dir.join("keyring"))?;
    let key = ring
        .get(&entity)
        .with_context(|| format!("{} has no key for {entity}", dir.join("keyring").display()))?
        .key
        .clone();
    let store = open_store(&dir, id, &meta, &config)?;
    let bind: SocketAddr = if o.public_addr.is_empty() {
        "127.0.0.1:0".parse()?
    } else {
        o.public_addr
            .parse()
            .with_context(|| format!("public_addr {:?} is not ip:port", o.public_addr))?
    };
    let host = if o.osd_host.is_empty() {
        std::fs::read_to_string("/etc/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".into())
    } else {
        o.osd_host.clone()
    };
    if o.osd_pg_log_entries_min > o.osd_pg_log_entries_max {
        bail!(
            "osd_pg_log_entries_min ({}) is larger than osd_pg_log_entries_max ({}): a clean PG's log cannot be longer than the longest log",
            o.osd_pg_log_entries_min,
            o.osd_pg_log_entries_max
        );
    }
    let opts = OsdOptions {
        observer: None,
        op_shards: shoal_osd::shards::shards_for(o.osd_op_num_shards),
        id: i32::try_from(id)?,
        key,
        mon_addrs: mon_addrs(&config)?,
        bind,
        host,
        weight: initial_weight(o.osd_crush_initial_weight, store.statfs().ok()),
        net: NetConfig::from_options(o),
        pg: PgConfig {
            log_limits: LogLimits {
                entries_max: o.osd_pg_log_entries_max as usize,
                dups_max: o.osd_pg_log_dups_max as usize,
            },
            log_entries_clean: o.osd_pg_log_entries_min as usize,
            peer_timeout: Duration::from_millis(o.osd_peer_timeout_ms),
            list_max: 1024,
            full_ratio: f64::from(o.osd_full_ratio_pct.min(100)) / 100.0,
            recovery_max_active: o.osd_recovery_max_active.max(1) as usize,
            recovery_batch_objects: o.osd_recovery_batch_objects.max(1) as usize,
            max_backfills: o.osd_max_backfills.max(1) as usize,
            max_scrubs: o.osd_max_scrubs as usize,
            copy_limits: shoal_osd::copy::StepLimits {
                data_bytes_max: o.osd_recovery_max_chunk_bytes.max(1),
                omap_bytes_max: o.osd_recovery_max_omap_chunk_bytes.max(1),
            },
            peering_piece_bytes: shoal_osd::pieces::PIECE_BYTES_MAX,
            ec_read_hedge: Duration::from_millis(o.osd_ec_read_hedge_ms),
            snap_trim_sleep: Duration::from_millis(o.osd_snap_trim_sleep_ms),
        },
        heartbeat_interval: Duration::from_millis(o.osd_heartbeat_interval_ms),
        heartbeat_grace: Duration::from_millis(o.osd_heartbeat_grace_ms),
        beacon_interval: Duration::from_millis(o.osd_beacon_interval_ms),
        stats_interval: Duration::from_millis(o.osd_pg_stats_interval_ms),
        perf_interval: (o.mgr_stats_period_ms > 0)
            .then(|| Duration::from_millis(o.mgr_stats_period_ms)),
        mon_timeout: Duration::from_millis(o.mon_command_timeout_ms) + Duration::from_secs(3),
        scrub_interval: Duration::from_millis(o.osd_scrub_interval_ms),
        deep_scrub_interval: Duration::from_millis(o.osd_deep_scrub_interval_ms),
        stray_check_interval: Duration::from_millis(o.osd_stray_check_interval_ms),
    };
    // Shard 0: the main thread runs the messenger and its share of PGs to
    // completion, as every other shard thread does (shoal_osd::shards).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Long store calls (4 MiB writes, recovery reads) leave the shard's
    // thread for the runtime's blocking pool.
    shoal_net::runtime::offload_to_blocking_pool();
    rt.block_on(async {
        let osd = Osd::start(opts, store, Arc::new(shoal_net::TcpTransport)).await?;
        eprintln!("{entity} running at {}", osd.addr());
        // Crashes of earlier runs go to the monitors.
        let monc = super::common::mon_client_as(
            &config,
            entity.clone(),
            &dir.join("keyring"),
            Arc::new(|_: shoal_net::Incoming| {}),
        )?;
        tokio::spawn(super::crash::post_pending(
            dir.join("crash"),
            false,
            move |r| {
                let monc = monc.clone();
                async move {
                    monc.command(&shoal_mon::Command::CrashPost { report: r })
                        .await
                }
            },
        ));
        super::crash::inject_panic(config.options.debug_inject_panic_ms);
        wait_for_signal().await?;
        tracing::info!("{entity} stopping");
        osd.stop().await;
        anyhow::Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statfs(total_bytes: u64) -> Option<shoal_objectstore::StatFs> {
        Some(shoal_objectstore::StatFs {
            total_bytes,
            ..Default::default()
        })
    }

    #[test]
    fn a_new_osd_weighs_its_capacity_in_tib() {
        assert_eq!(initial_weight(-1.0, statfs(1 << 40)), 0x10000);
        assert_eq!(initial_weight(-1.0, statfs(2 << 40)), 0x20000);
        // 10 GiB: 0.00977 TiB, as Ceph shows it.
        assert_eq!(initial_weight(-1.0, statfs(10 << 30)), 640);
        // Tiny stores still take data; an unknown size counts as 1 TiB.
        assert_eq!(initial_weight(-1.0, statfs(1024)), 1);
        assert_eq!(initial_weight(-1.0, None), 0x10000);
        // Given: as given, 0 included.
        assert_eq!(initial_weight(1.5, statfs(10 << 30)), 0x18000);
        assert_eq!(initial_weight(0.0, statfs(10 << 30)), 0);
    }
}

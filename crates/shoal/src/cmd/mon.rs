//! `shoal mon`: run a monitor, create its data directory, change and show
//! the monitor quorum.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use shoal_mon::{Command, Monitor, MonitorOptions, OsdLiveness, mkfs, parse_mon_host};
use shoal_net::{NetConfig, TcpTransport};
use shoal_types::{EntityName, EntityType};

use super::common::{Ctx, Format, mon_command, mon_command_as, print, print_typed};
use serde::Deserialize;
use shoal_monclient::replies::{EpochReply, StatusReply};

/// Run a monitor (`shoal mon --id a`), or manage the monitor quorum.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct MonCmd {
    #[command(subcommand)]
    sub: Option<MonSub>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The monitor's name: `a` for mon.a.
    #[arg(long)]
    id: Option<String>,
    /// Data directory (default: the mon_data option).
    #[arg(long)]
    data: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum MonSub {
    /// Create a monitor's data directory. The initial monitors come from
    /// mon_host, written as name=ip:port items (a=127.0.0.1:6789,...).
    Mkfs {
        /// The monitor's name: `a` for mon.a.
        #[arg(long)]
        id: String,
        /// Data directory (default: the mon_data option).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Use this keyring (from the first monitor's mkfs) instead of
        /// generating the bootstrap keys.
        #[arg(long)]
        keyring: Option<PathBuf>,
        /// Cluster id to propose at bootstrap (default: a new one).
        #[arg(long)]
        fsid: Option<String>,
    },
    /// Drop the bytes after the last whole record of a stopped monitor's
    /// Raft log: a write torn by a crash. (A monitor refuses to start with
    /// such a tail, since a log cut short by damage looks the same.)
    RepairLog {
        /// The monitor's name: `a` for mon.a.
        #[arg(long)]
        id: String,
        /// Data directory (default: the mon_data option).
        #[arg(long)]
        data: Option<PathBuf>,
    },
    /// Add a monitor (already made with `mkfs` and running) to the quorum.
    Add {
        /// Its name.
        name: String,
        /// Its address, ip:port.
        addr: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Remove a monitor from the quorum.
    Rm {
        /// Its name.
        name: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Show the monitor map and quorum.
    Stat {
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
}

/// Runs `shoal mon`.
pub fn run(cmd: MonCmd, ctx: &Ctx) -> anyhow::Result<()> {
    match cmd.sub {
        None => {
            let Some(id) = cmd.run.id else {
                bail!("`shoal mon` needs --id NAME to run a monitor (or a subcommand; see --help)")
            };
            run_daemon(ctx, &id, cmd.run.data)
        }
        Some(MonSub::Mkfs {
            id,
            data,
            keyring,
            fsid,
        }) => {
            let entity = EntityName::new(EntityType::Mon, id.clone())?;
            let config = ctx.config_for(&entity)?;
            let data = data_dir(data, &config.options.mon_data, &id)?;
            let initial: BTreeMap<String, String> = parse_mon_host(&config.options.mon_host)?
                .into_iter()
                .map(|(name, addr)| {
                    let name = name.context(
                        "mon_host must name each initial monitor for mkfs: a=127.0.0.1:6789,...",
                    )?;
                    Ok((name, addr.to_string()))
                })
                .collect::<anyhow::Result<_>>()?;
            let ring = mkfs(&data, &id, &initial, keyring.as_deref(), fsid)?;
            outln!(
                "created mon.{id} in {}; keyring {}",
                data.display(),
                ring.display()
            );
            Ok(())
        }
        Some(MonSub::RepairLog { id, data }) => {
            let entity = EntityName::new(EntityType::Mon, id.clone())?;
            let config = ctx.config_for(&entity)?;
            let data = data_dir(data, &config.options.mon_data, &id)?;
            let dropped = shoal_mon::MonStore::cut_torn_tail(&data)?;
            outln!("mon.{id}: dropped {dropped} bytes after the last whole log record");
            Ok(())
        }
        Some(MonSub::Add { name, addr, format }) => {
            let out = mon_command(ctx, &Command::MonAdd { name, addr })?;
            print(format, &out, |v| {
                let epoch = EpochReply::deserialize(v).map_or(0, |e| e.epoch);
                format!("added; monmap epoch {epoch}\n")
            });
            Ok(())
        }
        Some(MonSub::Rm { name, format }) => {
            let out = mon_command(ctx, &Command::MonRm { name })?;
            print(format, &out, |v| {
                let epoch = EpochReply::deserialize(v).map_or(0, |e| e.epoch);
                format!("removed; monmap epoch {epoch}\n")
            });
            Ok(())
        }
        Some(MonSub::Stat { format }) => {
            let out: StatusReply = mon_command_as(ctx, &Command::MonStat)?;
            print_typed(format, &out, |v| {
                let names: Vec<String> = v
                    .monmap
                    .mons
                    .iter()
                    .map(|m| format!("{}={}", m.name, m.addr))
                    .collect();
                format!(
                    "e{}: {} mons at {{{}}}, quorum {}, leader {}\n",
                    v.monmap.epoch,
                    names.len(),
                    names.join(","),
                    serde_json::to_string(&v.quorum).unwrap_or_default(),
                    v.leader.as_deref().unwrap_or("?")
                )
            });
            Ok(())
        }
    }
}

/// `shoal quorum_status`.
#[derive(Debug, clap::Args)]
pub struct QuorumArgs {
    /// Output format (plain is the JSON pretty-printed, as Ceph's).
    #[arg(long, value_enum, default_value = "plain")]
    format: Format,
}

/// The quorum as Ceph's `quorum_status` has it: the election epoch, the
/// ranks and names in the quorum, its leader (when the answering monitor
/// knows it leads: else empty) and the monitor map with each rank.
pub fn quorum_status(v: &StatusReply) -> serde_json::Value {
    let ranks: Vec<usize> = v
        .monmap
        .mons
        .iter()
        .enumerate()
        .filter(|(_, m)| v.quorum.contains(&m.name))
        .map(|(i, _)| i)
        .collect();
    let mons: Vec<serde_json::Value> = v
        .monmap
        .mons
        .iter()
        .enumerate()
        .map(|(i, m)| serde_json::json!({"rank": i, "name": m.name, "addr": m.addr}))
        .collect();
    serde_json::json!({
        "election_epoch": v.election_term,
        "quorum": ranks,
        "quorum_names": v.quorum,
        "quorum_leader_name": v.leader.clone().unwrap_or_default(),
        "monmap": {"epoch": v.monmap.epoch, "fsid": v.fsid, "mons": mons},
    })
}

/// Runs `shoal quorum_status`.
pub fn run_quorum_status(a: QuorumArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let out: StatusReply = mon_command_as(ctx, &Command::MonStat)?;
    super::common::print(a.format, &quorum_status(&out), super::common::pretty);
    Ok(())
}

fn data_dir(flag: Option<PathBuf>, option: &str, id: &str) -> anyhow::Result<PathBuf> {
    match flag {
        Some(p) => Ok(p),
        None if !option.is_empty() => Ok(PathBuf::from(option.replace("$id", id))),
        None => bail!("no data directory: pass --data DIR or set mon_data"),
    }
}

fn run_daemon(ctx: &Ctx, id: &str, data: Option<PathBuf>) -> anyhow::Result<()> {
    let entity = EntityName::new(EntityType::Mon, id)?;
    let config = ctx.config_for(&entity)?;
    shoal_config::logging::init(&config.options.log_level)?;
    let o = &config.options;
    let data = data_dir(data, &o.mon_data, id)?;
    super::crash::install(entity.to_string(), data.join("crash"), true);
    let crash_dir = data.join("crash");
    let inject = o.debug_inject_panic_ms;
    let (near, back, full) = (
        o.mon_osd_nearfull_ratio,
        o.mon_osd_backfillfull_ratio,
        o.mon_osd_full_ratio,
    );
    if !(0.0 < near && near <= back && back <= full && full <= 1.0) {
        anyhow::bail!(
            "the full ratios must ascend within (0, 1]: mon_osd_nearfull_ratio {near}, \
             mon_osd_backfillfull_ratio {back}, mon_osd_full_ratio {full}"
        );
    }
    let opts = MonitorOptions {
        data,
        net: NetConfig::from_options(o),
        heartbeat: Duration::from_millis(o.mon_heartbeat_interval_ms),
        election_timeout: Duration::from_millis(o.mon_election_timeout_ms),
        snapshot_every: o.mon_snapshot_every,
        command_timeout: Duration::from_millis(o.mon_command_timeout_ms),
        ticket_ttl: Duration::from_millis(o.auth_ticket_ttl_ms),
        secret_rotation: Duration::from_millis(o.auth_service_secret_rotation_ms),
        failure_domain: o.osd_crush_failure_domain.clone(),
        osdmap_history: o.mon_osdmap_history,
        osdmap_full_interval: o.mon_osdmap_full_interval,
        osd: OsdLiveness {
            min_down_reporters: o.mon_osd_min_down_reporters,
            reporter_subtree_level: o.mon_osd_reporter_subtree_level.clone(),
            beacon_grace: Duration::from_millis(o.mon_osd_report_timeout_ms),
            report_expiry: Duration::from_millis(2 * o.osd_heartbeat_grace_ms),
            down_out_interval: Duration::from_millis(o.mon_osd_down_out_interval_ms),
            batch_window: Duration::from_millis(o.mon_osd_batch_window_ms),
        },
        mgr_beacon_grace: Duration::from_millis(o.mon_mgr_beacon_grace_ms),
        mds_beacon_grace: Duration::from_millis(o.mon_mds_beacon_grace_ms),
        full_ratios: shoal_mon::FullRatios {
            nearfull: o.mon_osd_nearfull_ratio,
            backfillfull: o.mon_osd_backfillfull_ratio,
            full: o.mon_osd_full_ratio,
        },
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mon = Arc::new(Monitor::start(opts, Arc::new(TcpTransport), None).await?);
        eprintln!("mon.{id} running at {:?}", mon.addr());
        // Crashes of earlier runs go in once there is a quorum to take them.
        let poster = Arc::clone(&mon);
        let me = entity.clone();
        tokio::spawn(super::crash::post_pending(crash_dir, false, move |r| {
            let (mon, me) = (Arc::clone(&poster), me.clone());
            async move { mon.command(&me, &Command::CrashPost { report: r }).await }
        }));
        super::crash::inject_panic(inject);
        wait_for_signal().await?;
        tracing::info!("mon.{id} stopping");
        mon.shutdown().await;
        anyhow::Ok(())
    })
}

/// Waits for SIGTERM or SIGINT.
pub async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
    Ok(())
}

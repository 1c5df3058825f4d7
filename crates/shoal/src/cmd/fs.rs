//! `shoal fs` (file systems: new, ls, status, rm, mount) and `shoal mds`
//! (the metadata server daemon, its map, `mds fail`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use shoal_mon::Command;
use shoal_types::{EntityName, EntityType};

use shoal_monclient::replies::{FsMapReply, FsReply};

use super::common::{Ctx, Format, mon_command, mon_command_as, print_typed};

/// `shoal fs`.
#[derive(Debug, Subcommand)]
pub enum FsCmd {
    /// Makes a file system on two pools (they must exist).
    New {
        /// Its name.
        name: String,
        /// The pool of metadata (replicated).
        metadata_pool: String,
        /// The pool of file data.
        data_pool: String,
    },
    /// File systems, their pools and active MDS.
    Ls {
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// The file-system map: every file system, its MDS and its state, and
    /// the standbys.
    Status {
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Forgets a file system (its pools and their objects stay).
    Rm {
        /// Its name.
        name: String,
        /// Confirms.
        #[arg(long = "yes-i-really-mean-it")]
        sure: bool,
    },
    /// Mounts a file system through FUSE and serves it until unmounted
    /// (`umount MOUNTPOINT`) or stopped (SIGTERM, SIGINT).
    Mount {
        /// The file system (by default the first).
        #[arg(long = "fs")]
        fs: Option<String>,
        /// Where.
        mountpoint: PathBuf,
        /// Once mounted, write `{"pid", "mountpoint"}` here (removed on exit).
        #[arg(long)]
        state_file: Option<PathBuf>,
    },
}

/// `shoal mds`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct MdsArgs {
    #[command(subcommand)]
    cmd: Option<MdsCmd>,
    /// The MDS's name: it runs as `mds.ID`, whose key must be in the keyring.
    #[arg(long, short = 'i')]
    id: Option<String>,
    /// Serve clients here (by default `mds_addr`).
    #[arg(long)]
    bind: Option<std::net::SocketAddr>,
    /// Once listening, write `{"pid", "addr"}` here (removed on exit).
    #[arg(long)]
    state_file: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum MdsCmd {
    /// The file-system map.
    Stat {
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Makes an MDS give up its rank: a standby replays the journal and
    /// takes over.
    Fail {
        /// The MDS's name (`a` for `mds.a`).
        name: String,
    },
}

/// Runs `shoal fs ...`.
pub fn run(c: FsCmd, ctx: &Ctx) -> anyhow::Result<()> {
    match c {
        FsCmd::New {
            name,
            metadata_pool,
            data_pool,
        } => {
            let f: FsReply = mon_command_as(
                ctx,
                &Command::FsNew {
                    name,
                    metadata_pool,
                    data_pool,
                },
            )?;
            outln!(
                "new fs {} (id {}) with metadata pool {} and data pool {}",
                f.name,
                f.id,
                f.metadata_pool,
                f.data_pool
            );
            Ok(())
        }
        FsCmd::Ls { format } => {
            let m: FsMapReply = mon_command_as(ctx, &Command::FsLs)?;
            print_typed(format, &m.filesystems, |l| {
                let mut s = String::new();
                for f in l {
                    s += &format!(
                        "name: {}, metadata pool: {}, data pools: [{}]\n",
                        f.name, f.metadata_pool, f.data_pool
                    );
                }
                if s.is_empty() {
                    s = "No filesystems enabled\n".into();
                }
                s
            });
            Ok(())
        }
        FsCmd::Status { format } => {
            let m: FsMapReply = mon_command_as(ctx, &Command::FsLs)?;
            print_typed(format, &m, status_plain);
            Ok(())
        }
        FsCmd::Rm { name, sure } => {
            mon_command(
                ctx,
                &Command::FsRm {
                    name: name.clone(),
                    sure,
                },
            )?;
            outln!("removed file system {name}");
            Ok(())
        }
        FsCmd::Mount {
            fs,
            mountpoint,
            state_file,
        } => mount(ctx, fs, mountpoint, state_file),
    }
}

fn status_plain(m: &FsMapReply) -> String {
    let mut s = format!("fsmap epoch {}\n", m.epoch);
    for f in &m.filesystems {
        s += &format!(
            "{} (id {}): metadata {}, data {}; rank 0: {}\n",
            f.name,
            f.id,
            f.metadata_pool,
            f.data_pool,
            match &f.active {
                Some(a) => format!(
                    "mds.{} at {} ({}, incarnation {})",
                    a.name,
                    a.addr,
                    a.report.as_ref().map_or("unknown", |r| r.state.as_str()),
                    a.incarnation
                ),
                None => "none (no MDS)".to_string(),
            }
        );
    }
    let standbys: Vec<&str> = m.standbys.iter().map(|s| s.name.as_str()).collect();
    s += &format!(
        "standby: {}\n",
        if standbys.is_empty() {
            "none".to_string()
        } else {
            standbys.join(", ")
        }
    );
    s
}

/// Runs `shoal mds ...`.
pub fn run_mds(a: MdsArgs, ctx: &Ctx) -> anyhow::Result<()> {
    match a.cmd {
        Some(MdsCmd::Stat { format }) => {
            let m: FsMapReply = mon_command_as(ctx, &Command::FsLs)?;
            print_typed(format, &m, status_plain);
            Ok(())
        }
        Some(MdsCmd::Fail { name }) => {
            let name = name.strip_prefix("mds.").unwrap_or(&name).to_string();
            let m: FsMapReply = mon_command_as(ctx, &Command::MdsFail { name })?;
            print_typed(Format::Plain, &m, status_plain);
            Ok(())
        }
        None => {
            let id = a
                .id
                .or_else(|| (ctx.name.ty() == EntityType::Mds).then(|| ctx.name.id().to_string()))
                .context("name the MDS: shoal mds --id NAME (it runs as mds.NAME)")?;
            mds_daemon(&id, a.bind, a.state_file, ctx)
        }
    }
}

fn mds_daemon(
    id: &str,
    bind: Option<std::net::SocketAddr>,
    state_file: Option<PathBuf>,
    ctx: &Ctx,
) -> anyhow::Result<()> {
    let entity = EntityName::new(EntityType::Mds, id)?;
    let config = ctx.config_for(&entity)?;
    let o = &config.options;
    let addr = match bind {
        Some(b) => b,
        None => o
            .mds_addr
            .parse()
            .with_context(|| format!("mds_addr {:?}", o.mds_addr))?,
    };
    let opts = shoal_fs::MdsOptions {
        name: id.to_string(),
        addr,
        beacon_interval: Duration::from_millis(o.mds_beacon_interval_ms.max(100)),
        session_timeout: Duration::from_millis(o.mds_session_timeout_ms.max(1000)),
        flush_events: o.mds_journal_flush_events.max(1) as usize,
        dir_frag_max: o.mds_dir_frag_max.max(16) as usize,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        super::crash::for_front_end(ctx, &format!("mds.{id}"));
        let copts = shoal_client::ClientOptions::from_loaded(&config, &entity)
            .with_context(|| format!("the MDS runs as {entity}: its key must be in the keyring"))?;
        let key = copts.key.clone();
        let client = shoal_client::Client::connect(copts).await?;
        let own = shoal_monclient::TicketAuth::new(entity.clone(), key);
        let sf = state_file.clone();
        let name = id.to_string();
        let serving = shoal_fs::run_mds(client.clone(), own, opts, move |addr| {
            if let Err(e) = super::common::announce(
                &format!("mds.{name} serving on {addr}"),
                addr,
                sf.as_deref(),
            ) {
                tracing::warn!("announcing: {e}");
            }
        });
        let r = tokio::select! {
            r = super::mon::wait_for_signal() => r,
            r = serving => r.context("the MDS stopped"),
        };
        if let Some(path) = &state_file {
            let _ = std::fs::remove_file(path);
        }
        client.shutdown().await;
        r
    })
}

fn mount(
    ctx: &Ctx,
    fs: Option<String>,
    mountpoint: PathBuf,
    state_file: Option<PathBuf>,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let opts = shoal_client::ClientOptions::from_loaded(&ctx.config, &ctx.name)?;
    let key = opts.key.clone();
    let client = rt.block_on(async {
        let rados = shoal_client::Client::connect(opts).await?;
        shoal_fs::FsClient::connect(rados, key, fs.as_deref())
            .await
            .map_err(|e| anyhow::anyhow!("{} (errno {})", e.message, e.errno))
    })?;
    let name = client.fs_name().to_string();
    let options = [
        fuser::MountOption::FSName(format!("shoal:{name}")),
        fuser::MountOption::Subtype("shoal".into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::AllowOther,
        fuser::MountOption::Dev,
        fuser::MountOption::Suid,
    ];
    let fuse = shoal_fs::ShoalFuse::new(Arc::clone(&client), rt.handle().clone());
    let notifier = fuse.notifier_slot();
    let mut session = fuser::Session::new(fuse, &mountpoint, &options)
        .with_context(|| format!("mounting on {}", mountpoint.display()))?;
    let _ = notifier.set(session.notifier());
    let mut unmounter = session.unmount_callable();
    let serving = std::thread::spawn(move || session.run());
    if let Some(path) = &state_file {
        let v = serde_json::json!({"pid": std::process::id(), "mountpoint": mountpoint});
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, v.to_string())?;
        std::fs::rename(&tmp, path)?;
    }
    outln!("file system {name} mounted on {}", mountpoint.display());
    rt.block_on(async {
        loop {
            if serving.is_finished() {
                break;
            }
            tokio::select! {
                r = super::mon::wait_for_signal() => {
                    r?;
                    let _ = unmounter.unmount();
                    break;
                }
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
        anyhow::Ok(())
    })?;
    let r = serving.join();
    // Say why the mount ends: the kernel ended the session (an unmount,
    // or an abort), a signal, or an error.
    match &r {
        Ok(Ok(())) => tracing::info!(mountpoint = %mountpoint.display(), "the FUSE session ended"),
        Ok(Err(e)) => {
            tracing::error!(mountpoint = %mountpoint.display(), "the FUSE session failed: {e}")
        }
        Err(_) => tracing::error!(mountpoint = %mountpoint.display(), "the FUSE session panicked"),
    }
    rt.block_on(client.close());
    if let Some(path) = &state_file {
        let _ = std::fs::remove_file(path);
    }
    match r {
        Ok(r) => r.context("serving FUSE"),
        Err(_) => anyhow::bail!("the FUSE session panicked"),
    }
}

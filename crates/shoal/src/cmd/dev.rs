//! `shoal dev up|down|status|logs`: a real local cluster in one command, as
//! Ceph's vstart: separate `shoal mon` and `shoal osd` processes on free
//! loopback ports, with their keys, configuration, data and logs in one
//! directory. `up` on an existing directory restarts the same cluster.

use shoal_monclient::replies::{FsMapReply, MgrMapReply, OsdStatReply, PgStatReply};
use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde_json::Value;
use shoal_config::Config;
use shoal_mon::{Command, PoolSpec};
use shoal_types::EntityName;

use super::common::{Ctx, runtime};
use super::osd_daemon::StoreKind;

/// A local cluster for development and benchmarks.
#[derive(Debug, Subcommand)]
pub enum DevCmd {
    /// Create (or restart) a local cluster and wait until it is healthy.
    ///
    /// Its configuration file is written for one machine: the failure
    /// domain is the OSD, heartbeats and down-out are quicker, and each OSD
    /// runs one op shard (they share the machine's cores). `--set
    /// KEY=VALUE` options go into that file, for every daemon.
    Up(UpArgs),
    /// Stop every daemon of the local cluster.
    Down {
        /// The cluster's directory.
        #[arg(long, default_value = "shoal-dev")]
        dir: PathBuf,
        /// Also delete the directory (keys, data, logs).
        #[arg(long)]
        wipe: bool,
    },
    /// Which daemons run, and the cluster's status.
    Status {
        /// The cluster's directory.
        #[arg(long, default_value = "shoal-dev")]
        dir: PathBuf,
    },
    /// The last lines of the daemons' logs.
    Logs {
        /// The cluster's directory.
        #[arg(long, default_value = "shoal-dev")]
        dir: PathBuf,
        /// Only this daemon (`mon.a`, `osd.0`).
        daemon: Option<String>,
        /// Lines per log.
        #[arg(long, default_value = "40")]
        lines: usize,
    },
}

/// `shoal dev up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// Monitors (1 or 3).
    #[arg(long, default_value = "1")]
    mons: u32,
    /// OSDs.
    #[arg(long, default_value = "3")]
    osds: u32,
    /// The OSDs' object store.
    #[arg(long, value_enum, default_value = "block")]
    store: StoreKind,
    /// Where keys, configuration, data and logs go.
    #[arg(long, default_value = "shoal-dev")]
    dir: PathBuf,
    /// Stay in the foreground; Ctrl-C stops every daemon.
    #[arg(long)]
    foreground: bool,
    /// Size of each OSD's block store data file, bytes.
    #[arg(long, default_value_t = 4u64 << 30)]
    osd_bytes: u64,
    /// Start no S3 gateway.
    #[arg(long)]
    no_gateway: bool,
    /// Start no manager.
    #[arg(long)]
    no_mgr: bool,
    /// Make the file system `shoalfs` (pools `shoalfs.meta` and
    /// `shoalfs.data`) and start its metadata servers `mds.a` (active) and
    /// `mds.b` (standby); `shoal fs mount DIR` mounts it.
    #[arg(long)]
    fs: bool,
}

const CONF: &str = "shoal.conf";
/// The S3 gateway's directory (its user's keys, its address) and name.
const GATEWAY: &str = "gateway";
/// The pool the dev cluster's gateway keeps everything in.
const GATEWAY_POOL: &str = ".shoal.gateway";
const MON_NAMES: [&str; 3] = ["a", "b", "c"];
/// The manager's directory (its keyring, its address) and name.
const MGR: &str = "mgr.x";
/// The dev file system, and its metadata servers.
const DEV_FS: &str = "shoalfs";
const MDS_NAMES: [&str; 2] = ["a", "b"];

/// Runs `shoal dev ...`.
pub fn run(cmd: DevCmd, set: &[String]) -> anyhow::Result<()> {
    match cmd {
        DevCmd::Up(a) => up(a, set),
        DevCmd::Down { dir, wipe } => {
            let stopped = stop_all(&dir)?;
            outln!("stopped {stopped} daemons");
            if wipe {
                std::fs::remove_dir_all(&dir)
                    .with_context(|| format!("removing {}", dir.display()))?;
                outln!("removed {}", dir.display());
            }
            Ok(())
        }
        DevCmd::Status { dir } => status(&dir),
        DevCmd::Logs { dir, daemon, lines } => {
            for (name, _) in daemons(&dir)? {
                if daemon.as_ref().is_none_or(|d| d == &name) {
                    outln!("==> {name} <==");
                    out!("{}", tail(&log_path(&dir, &name), lines));
                }
            }
            Ok(())
        }
    }
}

fn log_path(dir: &Path, name: &str) -> PathBuf {
    dir.join("out").join(format!("{name}.log"))
}

fn pid_path(dir: &Path, name: &str) -> PathBuf {
    dir.join("run").join(format!("{name}.pid"))
}

fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].iter().map(|l| format!("{l}\n")).collect()
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Runs `shoal --conf CONF ARGS...` to completion; its output becomes the error.
fn shoal(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    super::common::run_shoal(&dir.join(CONF), args)
}

/// Starts a daemon in its own process group (Ctrl-C on `dev up` does not
/// reach it unless `--foreground` forwards it), logging to `out/NAME.log`.
fn spawn(dir: &Path, name: &str, args: &[&str]) -> anyhow::Result<Child> {
    super::common::spawn_shoal(
        &dir.join(CONF),
        args,
        &log_path(dir, name),
        &pid_path(dir, name),
    )
}

/// Writes the cluster's configuration: one-machine settings, then the
/// `--set` overrides (replacing a setting of the same name), checked by
/// loading the file back.
fn write_config(dir: &Path, mons: &[(String, SocketAddr)], set: &[String]) -> anyhow::Result<()> {
    let abs = std::fs::canonicalize(dir)?;
    let hosts: Vec<String> = mons.iter().map(|(n, a)| format!("{n}={a}")).collect();
    let quoted = |v: &str| format!("{v:?}");
    // One machine: the failure domain is the OSD, as with Ceph's vstart;
    // every OSD shares the machine's cores, so one op shard each.
    let mut settings: Vec<(String, String)> = vec![
        ("mon_host".into(), quoted(&hosts.join(","))),
        (
            "keyring".into(),
            quoted(&abs.join("keyring").to_string_lossy()),
        ),
        ("osd_crush_failure_domain".into(), quoted("osd")),
        ("mon_osd_reporter_subtree_level".into(), quoted("osd")),
        ("mon_osd_min_down_reporters".into(), "1".into()),
        ("osd_heartbeat_grace_ms".into(), "10000".into()),
        ("mon_osd_down_out_interval_ms".into(), "60000".into()),
        ("osd_op_num_shards".into(), "1".into()),
        (
            "osd_data".into(),
            quoted(&format!("{}/osd.$id", abs.display())),
        ),
        (
            "crash_dir".into(),
            quoted(&abs.join("crash").to_string_lossy()),
        ),
    ];
    for kv in set {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("--set {kv:?}: expected KEY=VALUE"))?;
        let (k, v) = (k.trim().to_string(), v.trim());
        let literal =
            v.parse::<i64>().is_ok() || v.parse::<f64>().is_ok() || v == "true" || v == "false";
        let v = if literal { v.to_string() } else { quoted(v) };
        match settings.iter_mut().find(|(name, _)| *name == k) {
            Some(s) => s.1 = v,
            None => settings.push((k, v)),
        }
    }
    let mut conf = String::from(
        "# Written by `shoal dev up`: a one-machine cluster (see `shoal dev up --help`).\n[global]\n",
    );
    for (k, v) in settings {
        conf.push_str(&format!("{k} = {v}\n"));
    }
    let path = dir.join(CONF);
    std::fs::write(&path, conf)?;
    if let Err(e) = Config::load(Some(&path), &EntityName::osd(0), &[]) {
        let _ = std::fs::remove_file(&path);
        bail!("the --set options make the configuration invalid: {e}");
    }
    Ok(())
}

/// The daemons of the cluster in `dir`, from its configuration and data.
fn daemons(dir: &Path) -> anyhow::Result<Vec<(String, Option<u32>)>> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        bail!(
            "{} holds no dev cluster (run `shoal dev up`)",
            dir.display()
        );
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| {
            n.starts_with("mon.")
                || n.starts_with("osd.")
                || n.starts_with("mds.")
                || n == GATEWAY
                || n == MGR
        })
        .collect();
    names.sort_by_key(|n| (n.starts_with("osd."), n.len(), n.clone()));
    for n in names {
        let pid = std::fs::read_to_string(pid_path(dir, &n))
            .ok()
            .and_then(|p| p.trim().parse().ok());
        out.push((n, pid));
    }
    Ok(out)
}

fn alive(pid: u32) -> bool {
    // A zombie (exited, not yet reaped) counts as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

fn signal(pid: u32, sig: &str) {
    let _ = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// SIGTERM every daemon, SIGKILL what is left after 15 s.
fn stop_all(dir: &Path) -> anyhow::Result<usize> {
    let pids: Vec<(String, u32)> = daemons(dir)?
        .into_iter()
        .filter_map(|(n, p)| p.filter(|p| alive(*p)).map(|p| (n, p)))
        .collect();
    // The gateway, manager and metadata servers first (clients of the
    // others), then the OSDs, so the
    // monitors see them go.
    for (_, pid) in pids
        .iter()
        .filter(|(n, _)| n == GATEWAY || n == MGR || n.starts_with("mds."))
    {
        signal(*pid, "-TERM");
    }
    wait_gone(&pids, GATEWAY, Duration::from_secs(10));
    wait_gone(&pids, MGR, Duration::from_secs(10));
    wait_gone(&pids, "mds.", Duration::from_secs(10));
    for (_, pid) in pids.iter().filter(|(n, _)| n.starts_with("osd.")) {
        signal(*pid, "-TERM");
    }
    wait_gone(&pids, "osd.", Duration::from_secs(15));
    for (_, pid) in pids.iter().filter(|(n, _)| n.starts_with("mon.")) {
        signal(*pid, "-TERM");
    }
    wait_gone(&pids, "", Duration::from_secs(15));
    for (n, pid) in &pids {
        if alive(*pid) {
            eprintln!("{n} (pid {pid}) did not stop; killing it");
            signal(*pid, "-KILL");
        }
        let _ = std::fs::remove_file(pid_path(dir, n));
    }
    Ok(pids.len())
}

fn wait_gone(pids: &[(String, u32)], prefix: &str, max: Duration) {
    let deadline = Instant::now() + max;
    while Instant::now() < deadline && pids.iter().any(|(n, p)| n.starts_with(prefix) && alive(*p))
    {
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn admin_ctx(dir: &Path) -> anyhow::Result<Ctx> {
    let conf = dir.join(CONF);
    let name: EntityName = "client.admin".parse()?;
    let config = Config::load(Some(&conf), &name, &[])?;
    Ok(Ctx {
        conf: Some(conf),
        set: Vec::new(),
        name,
        config,
    })
}

/// Polls `cmd` until `done` holds for its output, failing early when a
/// started daemon has exited.
fn wait_until<T: serde::de::DeserializeOwned + std::fmt::Debug>(
    ctx: &Ctx,
    cmd: &Command,
    what: &str,
    max: Duration,
    started: &mut BTreeMap<String, Child>,
    dir: &Path,
    done: impl Fn(&T) -> bool,
) -> anyhow::Result<T> {
    let rt = runtime()?;
    let client = super::common::mon_client(ctx)?;
    let deadline = Instant::now() + max;
    let mut last;
    loop {
        for (name, child) in started.iter_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                bail!(
                    "{name} exited ({status}) while waiting for {what}; its log:\n{}",
                    tail(&log_path(dir, name), 30)
                );
            }
        }
        let r = rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), client.command_as::<T>(cmd)).await
        });
        match r {
            Ok(Ok(v)) if done(&v) => return Ok(v),
            Ok(Ok(v)) => last = format!("{v:?}"),
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = "timed out".into(),
        }
        if Instant::now() > deadline {
            bail!("no {what} within {max:?} (last: {last})");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn up(a: UpArgs, set: &[String]) -> anyhow::Result<()> {
    let dir = a.dir.clone();
    let fresh = !dir.join(CONF).exists();
    if !fresh && !set.is_empty() {
        bail!(
            "--set applies when `dev up` creates a cluster; {} exists: edit it instead",
            dir.join(CONF).display()
        );
    }
    let mut started: BTreeMap<String, Child> = BTreeMap::new();
    let result = up_inner(&a, fresh, set, &mut started);
    if let Err(e) = result {
        // Leave nothing running.
        for (_, c) in started.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = stop_all(&dir);
        return Err(e);
    }
    let conf = std::fs::canonicalize(dir.join(CONF))?;
    let banner = match a.no_gateway {
        true => None,
        false => gateway_banner(&dir),
    };
    outln!(
        "\nShoal dev cluster is up in {}.\n\n  export SHOAL_CONF={}\n  shoal status\n  \
         echo hello > hello.txt && shoal rados -p rbd put hello hello.txt\n  \
         shoal rados -p rbd get hello -\n  shoal bench -p rbd 5 write\n  \
         shoal dev down --dir {}\n",
        dir.display(),
        conf.display(),
        dir.display()
    );
    if let Some(b) = banner {
        outln!("{b}");
    }
    if !a.no_mgr
        && let Some(b) = mgr_banner(&dir)
    {
        outln!("{b}");
    }
    if a.fs {
        outln!(
            "  File system {DEV_FS} (mds.a active, mds.b standby):\n    \
             mkdir -p /mnt/shoal && shoal fs mount /mnt/shoal &\n"
        );
    }
    if a.foreground {
        let rt = runtime()?;
        rt.block_on(super::mon::wait_for_signal())?;
        outln!("stopping...");
        stop_all(&dir)?;
        for (_, c) in started.iter_mut() {
            let _ = c.wait();
        }
    }
    Ok(())
}

fn up_inner(
    a: &UpArgs,
    fresh: bool,
    set: &[String],
    started: &mut BTreeMap<String, Child>,
) -> anyhow::Result<()> {
    let dir = &a.dir;
    if !(a.mons == 1 || a.mons == 3) {
        bail!("--mons must be 1 or 3");
    }
    if a.osds == 0 {
        bail!("--osds must be at least 1");
    }
    let running: Vec<String> = daemons(dir)
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, p)| p.is_some_and(alive))
        .map(|(n, _)| n)
        .collect();
    if !running.is_empty() {
        bail!(
            "{} already runs {} (use `shoal dev down --dir {}` first)",
            dir.display(),
            running.join(", "),
            dir.display()
        );
    }
    std::fs::create_dir_all(dir.join("out"))?;
    std::fs::create_dir_all(dir.join("run"))?;
    let (mons, osds) = if fresh {
        let mons: Vec<(String, SocketAddr)> = MON_NAMES[..a.mons as usize]
            .iter()
            .map(|n| {
                Ok((
                    n.to_string(),
                    SocketAddr::from(([127, 0, 0, 1], free_port()?)),
                ))
            })
            .collect::<anyhow::Result<_>>()?;
        write_config(dir, &mons, set)?;
        let first = &mons[0].0;
        for (n, _) in &mons {
            let data = dir.join(format!("mon.{n}"));
            let data = data.to_string_lossy();
            let mut args = vec!["mon", "mkfs", "--id", n, "--data", &data];
            let ring = dir.join(format!("mon.{first}")).join("keyring");
            let ring = ring.to_string_lossy().into_owned();
            if n != first {
                args.extend(["--keyring", &ring]);
            }
            shoal(dir, &args)?;
        }
        std::fs::copy(
            dir.join(format!("mon.{first}")).join("keyring"),
            dir.join("keyring"),
        )?;
        let mons: Vec<String> = mons.into_iter().map(|(n, _)| n).collect();
        (mons, (0..a.osds).collect::<Vec<u32>>())
    } else {
        let names: Vec<(String, Option<u32>)> = daemons(dir)?;
        let mons = names
            .iter()
            .filter_map(|(n, _)| n.strip_prefix("mon.").map(str::to_string))
            .collect();
        let osds = names
            .iter()
            .filter_map(|(n, _)| n.strip_prefix("osd.").and_then(|i| i.parse().ok()))
            .collect();
        (mons, osds)
    };
    for m in &mons {
        let data = dir.join(format!("mon.{m}"));
        let data = data.to_string_lossy();
        let child = spawn(
            dir,
            &format!("mon.{m}"),
            &["mon", "--id", m, "--data", &data],
        )?;
        started.insert(format!("mon.{m}"), child);
    }
    let ctx = admin_ctx(dir)?;
    wait_until(
        &ctx,
        &Command::Status,
        "a monitor quorum",
        Duration::from_secs(30),
        started,
        dir,
        |_: &Value| true,
    )?;
    let store = match a.store {
        StoreKind::Block => "block",
        StoreKind::Mem => "mem",
    };
    for id in &osds {
        let name = format!("osd.{id}");
        let ids = id.to_string();
        if fresh {
            let bytes = format!("osd_store_bytes={}", a.osd_bytes);
            shoal(
                dir,
                &[
                    "--set", &bytes, "osd", "mkfs", "--id", &ids, "--store", store,
                ],
            )?;
        }
        let child = spawn(dir, &name, &["osd", "--id", &ids])?;
        started.insert(name, child);
    }
    let n = osds.len() as u64;
    wait_until(
        &ctx,
        &Command::OsdStat,
        "every OSD up",
        Duration::from_secs(60),
        started,
        dir,
        |v: &OsdStatReply| v.num_up_osds == n,
    )?;
    if fresh {
        let size = osds.len().min(3) as u32;
        let cmd = Command::PoolCreate {
            name: "rbd".into(),
            pg_num: 32,
            spec: PoolSpec::Replicated {
                size,
                min_size: size - size / 2,
            },
            set: Vec::new(),
        };
        wait_until(
            &ctx,
            &cmd,
            "the pool rbd",
            Duration::from_secs(30),
            started,
            dir,
            |_: &Value| true,
        )?;
    }
    wait_until(
        &ctx,
        &Command::PgStat,
        "every PG active+clean",
        Duration::from_secs(120),
        started,
        dir,
        PgStatReply::all_active_clean,
    )?;
    if !a.no_gateway {
        start_gateway(dir, fresh, &ctx, started, osds.len().clamp(1, 3) as u32)?;
    }
    if !a.no_mgr {
        start_mgr(dir, started)?;
    }
    if a.fs {
        start_fs(dir, &ctx, started, osds.len().clamp(1, 3) as u32)?;
    }
    // Every daemon started must still run (a map can look healthy for a
    // moment after a daemon of an earlier run stopped).
    std::thread::sleep(Duration::from_millis(500));
    for (name, child) in started.iter_mut() {
        if let Ok(Some(status)) = child.try_wait() {
            bail!(
                "{name} exited ({status}); its log:\n{}",
                tail(&log_path(dir, name), 30)
            );
        }
    }
    Ok(())
}

/// Starts the S3 gateway: on a fresh cluster its pool and a user `dev`
/// first (keys in `gateway/user.json`), on a restart at the address it had
/// (`gateway/addr`); waits until it listens. Its pool has `size` copies,
/// as the rbd pool.
fn start_gateway(
    dir: &Path,
    fresh: bool,
    ctx: &Ctx,
    started: &mut BTreeMap<String, Child>,
    size: u32,
) -> anyhow::Result<()> {
    let gdir = dir.join(GATEWAY);
    if fresh || !gdir.join("addr").exists() {
        std::fs::create_dir_all(&gdir)?;
        let cmd = Command::PoolCreate {
            name: GATEWAY_POOL.into(),
            pg_num: 8,
            spec: PoolSpec::Replicated {
                size,
                min_size: size - size / 2,
            },
            set: Vec::new(),
        };
        wait_until(
            ctx,
            &cmd,
            "the gateway's pool",
            Duration::from_secs(30),
            started,
            dir,
            |_: &Value| true,
        )?;
        let user = shoal(dir, &["gateway", "user", "create", "--uid", "dev"])?;
        std::fs::write(gdir.join("user.json"), user)?;
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        std::fs::write(gdir.join("addr"), addr.to_string())?;
    }
    let addr: SocketAddr = std::fs::read_to_string(gdir.join("addr"))?
        .trim()
        .parse()
        .context("the gateway's address file")?;
    let bind = addr.to_string();
    let child = spawn(dir, GATEWAY, &["gateway", "--bind", &bind])?;
    started.insert(GATEWAY.to_string(), child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(addr).is_err() {
        if Instant::now() > deadline {
            bail!(
                "the gateway did not listen on {addr}; its log:\n{}",
                tail(&log_path(dir, GATEWAY), 30)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Starts the manager `mgr.x` (its key in `mgr.x/keyring`, made on the
/// first start; its HTTP address in `mgr.x/addr`) and waits until it listens.
fn start_mgr(dir: &Path, started: &mut BTreeMap<String, Child>) -> anyhow::Result<()> {
    let mdir = dir.join(MGR);
    let keyring = mdir.join("keyring");
    if !keyring.exists() {
        std::fs::create_dir_all(&mdir)?;
        let section = shoal(
            dir,
            &[
                "auth",
                "get-or-create",
                MGR,
                "mon",
                "allow profile mgr",
                "osd",
                "allow r",
            ],
        )?;
        std::fs::write(&keyring, section)?;
    }
    // Where it served before (the same URL after a restart), else any free
    // port: the manager binds it and says which in its state file.
    let bind = std::fs::read_to_string(mdir.join("addr"))
        .map(|a| a.trim().to_string())
        .unwrap_or_else(|_| "127.0.0.1:0".to_string());
    let state = mdir.join("state.json");
    let _ = std::fs::remove_file(&state);
    let ring = format!("keyring={}", std::fs::canonicalize(&keyring)?.display());
    let state_arg = state.to_string_lossy().into_owned();
    let mut child = spawn(
        dir,
        MGR,
        &[
            "--set",
            &ring,
            "-n",
            MGR,
            "mgr",
            "--id",
            "x",
            "--bind",
            &bind,
            "--state-file",
            &state_arg,
        ],
    )?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let addr = loop {
        if let Some(a) = std::fs::read_to_string(&state)
            .ok()
            .and_then(|t| serde_json::from_str::<super::common::DaemonState>(&t).ok())
            .map(|v| v.addr)
        {
            break a;
        }
        if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() {
            let _ = child.kill();
            bail!(
                "the manager did not listen on {bind}; its log:\n{}",
                tail(&log_path(dir, MGR), 30)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    std::fs::write(mdir.join("addr"), &addr)?;
    started.insert(MGR.to_string(), child);
    // Up once the monitors name it active (it then serves).
    let ctx = admin_ctx(dir)?;
    wait_until(
        &ctx,
        &Command::MgrStat,
        "the manager active",
        Duration::from_secs(30),
        started,
        dir,
        |m: &MgrMapReply| m.is_active("x"),
    )
    .with_context(|| format!("the manager's log:\n{}", tail(&log_path(dir, MGR), 30)))?;
    // Ready means serving: the manager learns it is active from its next
    // beacon's answer, and only then answers a scrape.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !http_ok(&addr, "/metrics") {
        if Instant::now() > deadline {
            bail!(
                "the manager is active but http://{addr}/metrics does not answer; its log:\n{}",
                tail(&log_path(dir, MGR), 30)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Whether `GET path` at `addr` answers 200.
fn http_ok(addr: &str, path: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(sa) = addr.parse::<std::net::SocketAddr>() else {
        return false;
    };
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&sa, Duration::from_secs(2)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

/// Makes the file system (once) and starts its metadata servers; waits
/// until one is active.
fn start_fs(
    dir: &Path,
    ctx: &Ctx,
    started: &mut BTreeMap<String, Child>,
    size: u32,
) -> anyhow::Result<()> {
    let fs: FsMapReply = super::common::mon_command_as(ctx, &Command::FsLs)?;
    let exists = fs.fs(Some(DEV_FS)).is_some();
    if !exists {
        for (pool, pg_num) in [("shoalfs.meta", 8), ("shoalfs.data", 16)] {
            let cmd = Command::PoolCreate {
                name: pool.into(),
                pg_num,
                spec: PoolSpec::Replicated {
                    size,
                    min_size: size - size / 2,
                },
                set: Vec::new(),
            };
            wait_until(
                ctx,
                &cmd,
                pool,
                Duration::from_secs(30),
                started,
                dir,
                |_: &Value| true,
            )?;
        }
        shoal(dir, &["fs", "new", DEV_FS, "shoalfs.meta", "shoalfs.data"])?;
    }
    for id in MDS_NAMES {
        let name = format!("mds.{id}");
        let mdir = dir.join(&name);
        let keyring = mdir.join("keyring");
        if !keyring.exists() {
            std::fs::create_dir_all(&mdir)?;
            let section = shoal(
                dir,
                &[
                    "auth",
                    "get-or-create",
                    &name,
                    "mon",
                    "allow profile mds",
                    "osd",
                    "allow *",
                    "mds",
                    "allow *",
                ],
            )?;
            std::fs::write(&keyring, section)?;
        }
        let ring = format!("keyring={}", std::fs::canonicalize(&keyring)?.display());
        let child = spawn(
            dir,
            &name,
            &["--set", &ring, "-n", &name, "mds", "--id", id],
        )?;
        started.insert(name, child);
    }
    wait_until(
        ctx,
        &Command::FsLs,
        "an active metadata server",
        Duration::from_secs(30),
        started,
        dir,
        |m: &FsMapReply| {
            m.fs(Some(DEV_FS))
                .and_then(|f| f.active.as_ref())
                .and_then(|a| a.report.as_ref())
                .is_some_and(|r| r.state == "active")
        },
    )
    .map(|_| ())
}

/// The dev manager's URL, for `dev up`'s message.
fn mgr_banner(dir: &Path) -> Option<String> {
    let addr = std::fs::read_to_string(dir.join(MGR).join("addr")).ok()?;
    Some(format!(
        "  Manager: dashboard http://{0}/ (log in as client.admin with the key in {1}),\n    \
         Prometheus metrics http://{0}/metrics\n",
        addr.trim(),
        dir.join("keyring").display()
    ))
}

/// The dev gateway's endpoint and user keys, for `dev up`'s message.
fn gateway_banner(dir: &Path) -> Option<String> {
    let addr = std::fs::read_to_string(dir.join(GATEWAY).join("addr")).ok()?;
    let user: shoal_gateway::User =
        serde_json::from_str(&std::fs::read_to_string(dir.join(GATEWAY).join("user.json")).ok()?)
            .ok()?;
    let k = user.keys.first()?;
    Some(format!(
        "  S3 gateway: http://{}/ (user dev)\n    export AWS_ACCESS_KEY_ID={} AWS_SECRET_ACCESS_KEY={}\n    \
         aws --endpoint-url http://{}/ s3 mb s3://mybucket\n",
        addr.trim(),
        k.access_key,
        k.secret_key,
        addr.trim()
    ))
}

fn status(dir: &Path) -> anyhow::Result<()> {
    for (name, pid) in daemons(dir)? {
        let state = match pid {
            Some(p) if alive(p) => format!("running (pid {p})"),
            Some(p) => format!("stopped (was pid {p})"),
            None => "stopped".into(),
        };
        outln!("{name:<8} {state}");
    }
    if dir.join(CONF).exists() {
        outln!(
            "\nexport SHOAL_CONF={}",
            std::fs::canonicalize(dir.join(CONF))?.display()
        );
    }
    Ok(())
}

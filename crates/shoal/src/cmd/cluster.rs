//! `shoal cluster bootstrap|token` and `shoal host join|add-osd|add-mon|rm`:
//! a cluster stood up host by host, as an operator does it. Bootstrap, on
//! the first host, makes the first monitor, the admin key and the
//! configuration (`/etc/shoal/shoal.conf`, `/etc/shoal/keyring`), starts
//! the monitor and prints a join token (the cluster's id, its monitors and
//! the admin key: a secret, to be handled as the admin keyring is). `host
//! join TOKEN` on another host writes the same configuration with the
//! host's own name and address, registers the host in CRUSH under the root
//! and makes and starts an OSD per data directory (one per disk) and, if
//! asked, a monitor. `host add-osd`, `host add-mon` and `host rm` (drains
//! the host's OSDs, stops its daemons, removes them, its monitor and its
//! CRUSH bucket) are one command each. Daemons start as systemd units
//! (`packaging/systemd`: `shoal-mon@ID`, `shoal-osd@ID`, `shoal.target`),
//! or as detached processes where there is no systemd (`--start spawn`,
//! their logs and pid files under the data directory), or not at all
//! (`--start none` prints the commands).
//!
//! The steps are the ordinary commands (`shoal mon mkfs`, `shoal osd
//! create`, `shoal osd mkfs`, `shoal mon add`, ...) run as child processes
//! of this binary, so each step behaves exactly as when typed by hand.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::Value;
use shoal_monclient::replies::{
    AuthKey, AuthReply, OsdCreateReply, OsdTreeReply, PgStatReply, StatusReply,
};

/// How a host's daemons are started.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Start {
    /// `systemctl enable --now shoal-KIND@ID` (the units of
    /// packaging/systemd, installed).
    Systemd,
    /// Detached processes, logging to DATA/log/KIND.ID.log, pid in
    /// DATA/run/KIND.ID.pid (hosts without systemd, containers, tests).
    Spawn,
    /// Print the commands to start them.
    None,
}

/// Where a host keeps its configuration and data, and how it starts daemons.
#[derive(Debug, Args, Clone)]
pub struct HostDirs {
    /// Configuration directory (shoal.conf, keyring).
    #[arg(long, default_value = "/etc/shoal")]
    etc: PathBuf,
    /// Data directory (mon-ID, osd-ID, logs).
    #[arg(long, default_value = "/var/lib/shoal")]
    data: PathBuf,
    /// How daemons start (default: systemd where it runs, else spawn).
    #[arg(long, value_enum)]
    start: Option<Start>,
}

/// `shoal cluster ...`.
#[derive(Debug, Subcommand)]
pub enum ClusterCmd {
    /// Make a new cluster on this host: the first monitor, the admin key
    /// and the configuration; start the monitor; print a join token.
    Bootstrap {
        /// This host's address: the monitor listens on it.
        #[arg(long)]
        mon_ip: String,
        /// The monitor's port.
        #[arg(long, default_value_t = 6789)]
        mon_port: u16,
        /// This host's name (the monitor's name and the CRUSH host;
        /// default: the host name).
        #[arg(long)]
        host: Option<String>,
        #[command(flatten)]
        dirs: HostDirs,
    },
    /// Print the join token of this host's configuration again.
    Token {
        /// Configuration directory.
        #[arg(long, default_value = "/etc/shoal")]
        etc: PathBuf,
    },
}

/// `shoal host ...`.
#[derive(Debug, Subcommand)]
pub enum HostCmd {
    /// Join this host to a cluster: its configuration from TOKEN (`shoal
    /// cluster bootstrap` printed it), the host in CRUSH, an OSD per
    /// `--osd` directory, a monitor with `--mon`.
    Join {
        /// The token.
        token: String,
        /// This host's address (its daemons listen on it).
        #[arg(long)]
        addr: String,
        /// This host's name (default: the host name).
        #[arg(long)]
        host: Option<String>,
        /// A data directory for an OSD (one per disk); may be repeated.
        #[arg(long = "osd")]
        osds: Vec<PathBuf>,
        /// Also run a monitor on this host.
        #[arg(long)]
        mon: bool,
        /// The port of that monitor.
        #[arg(long, default_value_t = 6789)]
        mon_port: u16,
        #[command(flatten)]
        dirs: HostDirs,
    },
    /// Make and start one more OSD on this host, in DIR (a disk's mount).
    AddOsd {
        /// Its data directory.
        dir: PathBuf,
        #[command(flatten)]
        dirs: HostDirs,
    },
    /// Make and start a monitor on this host and add it to the quorum.
    AddMon {
        /// Its port.
        #[arg(long, default_value_t = 6789)]
        mon_port: u16,
        #[command(flatten)]
        dirs: HostDirs,
    },
    /// Remove this host from the cluster: its OSDs drained (marked out
    /// until every PG is active+clean without them), its daemons stopped,
    /// its OSDs, keys, monitor and CRUSH bucket removed.
    Rm {
        /// Wait this long for the drain, seconds.
        #[arg(long, default_value_t = 1800)]
        drain_timeout: u64,
        /// Remove the host's data directories too.
        #[arg(long)]
        purge_data: bool,
        #[command(flatten)]
        dirs: HostDirs,
    },
}

/// The contents of a join token. Fields read as empty when missing, so a
/// damaged token's error names the missing field.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Token {
    /// The cluster id.
    #[serde(default)]
    pub fsid: String,
    /// The monitors (`name=ip:port,...`).
    #[serde(default)]
    pub mon_host: String,
    /// The admin keyring's text.
    #[serde(default)]
    pub keyring: String,
}

const TOKEN_PREFIX: &str = "shoal1.";

impl Token {
    /// The token's text.
    pub fn encode(&self) -> String {
        let v = serde_json::to_string(self).unwrap_or_default();
        format!("{TOKEN_PREFIX}{}", B64.encode(v))
    }

    /// Reads a token's text.
    pub fn decode(s: &str) -> anyhow::Result<Token> {
        let body = s
            .trim()
            .strip_prefix(TOKEN_PREFIX)
            .context("not a Shoal join token (it starts with `shoal1.`)")?;
        let bytes = B64
            .decode(body)
            .context("the join token is damaged (not base64): copy it whole")?;
        let t: Token =
            serde_json::from_slice(&bytes).context("the join token is damaged (not JSON)")?;
        for (k, v) in [
            ("fsid", &t.fsid),
            ("mon_host", &t.mon_host),
            ("keyring", &t.keyring),
        ] {
            anyhow::ensure!(!v.is_empty(), "the join token has no {k}");
        }
        Ok(t)
    }
}

fn admin() -> shoal_types::EntityName {
    shoal_types::EntityName::new(shoal_types::EntityType::Client, "admin")
        .unwrap_or_else(|_| unreachable!("client.admin is a valid name"))
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

fn start_mode(dirs: &HostDirs) -> Start {
    dirs.start
        .unwrap_or(if Path::new("/run/systemd/system").exists() {
            Start::Systemd
        } else {
            Start::Spawn
        })
}

/// A host's configuration: the cluster's monitors and keyring, the host's
/// name and address, the data directories under `data`.
fn write_conf(dirs: &HostDirs, mon_host: &str, host: &str, addr: &str) -> anyhow::Result<()> {
    let q = |p: &Path| format!("{:?}", p.display().to_string());
    let conf = format!(
        "# Written by shoal cluster bootstrap / shoal host join for host {host}.\n\
         [global]\n\
         mon_host = {mon_host:?}\n\
         keyring = {keyring}\n\
         mon_data = {mon_data}\n\
         osd_data = {osd_data}\n\
         osd_host = {host:?}\n\
         public_addr = {public:?}\n\
         osd_crush_failure_domain = \"host\"\n\
         mon_osd_reporter_subtree_level = \"host\"\n",
        keyring = q(&dirs.etc.join("keyring")),
        mon_data = q(&dirs.data.join("mon-$id")),
        osd_data = q(&dirs.data.join("osd-$id")),
        public = format!("{addr}:0"),
    );
    std::fs::create_dir_all(&dirs.etc)
        .with_context(|| format!("creating {}", dirs.etc.display()))?;
    std::fs::create_dir_all(&dirs.data)
        .with_context(|| format!("creating {}", dirs.data.display()))?;
    let path = dirs.etc.join("shoal.conf");
    std::fs::write(&path, conf).with_context(|| format!("writing {}", path.display()))?;
    // Checked by loading it back, as every daemon will.
    shoal_config::Config::load(Some(&path), &admin(), &[])
        .with_context(|| format!("{} does not load", path.display()))?;
    Ok(())
}

/// `shoal --conf ETC/shoal.conf ARGS...`; its output, or its error.
fn shoal(etc: &Path, args: &[&str]) -> anyhow::Result<String> {
    super::common::run_shoal(&etc.join("shoal.conf"), args)
}

fn shoal_json(etc: &Path, args: &[&str]) -> anyhow::Result<Value> {
    let mut a = args.to_vec();
    a.extend(["--format", "json"]);
    let out = shoal(etc, &a)?;
    serde_json::from_str(&out).with_context(|| format!("`shoal {}`: not JSON", args.join(" ")))
}

/// Retries `f` every second until it succeeds or `secs` pass.
fn until<T>(secs: u64, what: &str, mut f: impl FnMut() -> anyhow::Result<T>) -> anyhow::Result<T> {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= end => {
                return Err(e.context(format!("{what}: gave up after {secs} s")));
            }
            Err(_) => std::thread::sleep(Duration::from_secs(1)),
        }
    }
}

fn pid_file(dirs: &HostDirs, kind: &str, id: &str) -> PathBuf {
    dirs.data.join("run").join(format!("{kind}.{id}.pid"))
}

/// Starts daemon KIND.ID as `dirs` says.
fn start(dirs: &HostDirs, kind: &str, id: &str) -> anyhow::Result<()> {
    let conf = dirs.etc.join("shoal.conf");
    match start_mode(dirs) {
        Start::Systemd => {
            let unit = format!("shoal-{kind}@{id}.service");
            let st = std::process::Command::new("systemctl")
                .args(["enable", "--now", &unit])
                .status()
                .context("running systemctl")?;
            if !st.success() {
                bail!(
                    "systemctl enable --now {unit} failed (are packaging/systemd's units installed?)"
                );
            }
            outln!("started {unit}");
        }
        Start::Spawn => {
            let logs = dirs.data.join("log");
            std::fs::create_dir_all(&logs)?;
            std::fs::create_dir_all(dirs.data.join("run"))?;
            let log_path = logs.join(format!("{kind}.{id}.log"));
            let child = super::common::spawn_shoal(
                &conf,
                &[kind, "--id", id],
                &log_path,
                &pid_file(dirs, kind, id),
            )?;
            outln!(
                "started {kind}.{id} (pid {}, log {})",
                child.id(),
                log_path.display()
            );
        }
        Start::None => {
            outln!(
                "start it with: shoal --conf {} {kind} --id {id}",
                conf.display()
            );
        }
    }
    Ok(())
}

/// Stops daemon KIND.ID as `dirs` says (SIGTERM, then 30 s to finish).
fn stop(dirs: &HostDirs, kind: &str, id: &str) -> anyhow::Result<()> {
    match start_mode(dirs) {
        Start::Systemd => {
            let unit = format!("shoal-{kind}@{id}.service");
            let _ = std::process::Command::new("systemctl")
                .args(["disable", "--now", &unit])
                .status();
        }
        Start::Spawn => {
            let path = pid_file(dirs, kind, id);
            let Ok(text) = std::fs::read_to_string(&path) else {
                return Ok(());
            };
            let pid = text.trim().to_string();
            let alive = || Path::new(&format!("/proc/{pid}")).exists();
            let _ = std::process::Command::new("kill").arg(&pid).status();
            let end = Instant::now() + Duration::from_secs(30);
            while alive() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(200));
            }
            if alive() {
                let _ = std::process::Command::new("kill")
                    .args(["-9", &pid])
                    .status();
            }
            let _ = std::fs::remove_file(path);
        }
        Start::None => outln!("stop {kind}.{id} now"),
    }
    Ok(())
}

fn fresh(dirs: &HostDirs) -> anyhow::Result<()> {
    let conf = dirs.etc.join("shoal.conf");
    if conf.exists() {
        bail!(
            "{} exists: this host is already in a cluster (`shoal host rm` first)",
            conf.display()
        );
    }
    Ok(())
}

/// Runs `shoal cluster ...`.
pub fn run_cluster(cmd: ClusterCmd) -> anyhow::Result<()> {
    match cmd {
        ClusterCmd::Bootstrap {
            mon_ip,
            mon_port,
            host,
            dirs,
        } => bootstrap(&mon_ip, mon_port, host.unwrap_or_else(hostname), &dirs),
        ClusterCmd::Token { etc } => {
            outln!("{}", token_of(&etc)?.encode());
            Ok(())
        }
    }
}

fn token_of(etc: &Path) -> anyhow::Result<Token> {
    let mon_host = conf_value(etc, |o| o.mon_host.clone())?;
    let keyring = std::fs::read_to_string(etc.join("keyring"))
        .with_context(|| format!("reading {}", etc.join("keyring").display()))?;
    let status: StatusReply = serde_json::from_value(shoal_json(etc, &["status"])?)?;
    anyhow::ensure!(!status.fsid.is_empty(), "the monitors report no fsid");
    Ok(Token {
        fsid: status.fsid,
        mon_host,
        keyring,
    })
}

fn check_name(host: &str) -> anyhow::Result<()> {
    if host.is_empty()
        || !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        bail!("host name {host:?}: letters, digits, - and _ only");
    }
    Ok(())
}

fn bootstrap(ip: &str, port: u16, host: String, dirs: &HostDirs) -> anyhow::Result<()> {
    check_name(&host)?;
    fresh(dirs)?;
    let addr: std::net::IpAddr = ip
        .parse()
        .with_context(|| format!("--mon-ip {ip:?} is not an IP address"))?;
    let mon_host = format!("{host}={}", std::net::SocketAddr::new(addr, port));
    write_conf(dirs, &mon_host, &host, ip)?;
    let mon_dir = dirs.data.join(format!("mon-{host}"));
    let made = shoal(
        &dirs.etc,
        &[
            "mon",
            "mkfs",
            "--id",
            &host,
            "--data",
            &mon_dir.to_string_lossy(),
        ],
    );
    if let Err(e) = made {
        // Leave nothing half made: the next attempt starts clean.
        let _ = std::fs::remove_file(dirs.etc.join("shoal.conf"));
        return Err(e);
    }
    // The admin keyring holds client.admin only (the monitor's own key
    // stays in its data directory, and out of the join token).
    let all = shoal_net::Keyring::load(&mon_dir.join("keyring"))?;
    let entry = all
        .get(&admin())
        .context("the monitor's keyring has no client.admin")?;
    let mut ring = shoal_net::Keyring::default();
    ring.insert(admin(), entry.clone());
    ring.save(&dirs.etc.join("keyring"))
        .context("writing the admin keyring")?;
    start(dirs, "mon", &host)?;
    if start_mode(dirs) == Start::None {
        outln!("once it runs, `shoal cluster token` prints the join token");
        return Ok(());
    }
    until(120, "the first monitor's quorum", || {
        shoal(&dirs.etc, &["status"])
    })?;
    add_host_bucket(&dirs.etc, &host)?;
    outln!("cluster bootstrapped; monitor {mon_host}");
    outln!("join other hosts with:");
    outln!(
        "  shoal host join {} --addr IP --osd DIR",
        token_of(&dirs.etc)?.encode()
    );
    Ok(())
}

/// Adds host `host` under the CRUSH root, if it is not there yet.
fn add_host_bucket(etc: &Path, host: &str) -> anyhow::Result<()> {
    let tree: OsdTreeReply = serde_json::from_value(shoal_json(etc, &["osd", "tree"])?)?;
    let exists = tree
        .nodes
        .iter()
        .any(|n| n.name == host && n.kind == "host");
    if !exists {
        shoal(etc, &["osd", "crush", "add-bucket", host, "host"])?;
        shoal(etc, &["osd", "crush", "move", host, "root=default"])?;
    }
    Ok(())
}

/// Runs `shoal host ...`.
pub fn run_host(cmd: HostCmd) -> anyhow::Result<()> {
    match cmd {
        HostCmd::Join {
            token,
            addr,
            host,
            osds,
            mon,
            mon_port,
            dirs,
        } => {
            let host = host.unwrap_or_else(hostname);
            check_name(&host)?;
            fresh(&dirs)?;
            let t = Token::decode(&token)?;
            let _: std::net::IpAddr = addr
                .parse()
                .with_context(|| format!("--addr {addr:?} is not an IP address"))?;
            write_conf(&dirs, &t.mon_host, &host, &addr)?;
            std::fs::write(dirs.etc.join("keyring"), &t.keyring)?;
            let status = until(60, "reaching the monitors", || {
                Ok(serde_json::from_value::<StatusReply>(shoal_json(
                    &dirs.etc,
                    &["status"],
                )?)?)
            });
            let status = match status {
                Ok(s) => s,
                Err(e) => {
                    let _ = std::fs::remove_file(dirs.etc.join("shoal.conf"));
                    return Err(e);
                }
            };
            if status.fsid != t.fsid {
                bail!(
                    "the monitors answer for cluster {}, the token is for {}",
                    status.fsid,
                    t.fsid
                );
            }
            add_host_bucket(&dirs.etc, &host)?;
            outln!("host {host} joined cluster {}", t.fsid);
            if mon {
                add_mon(&dirs, mon_port)?;
            }
            for dir in &osds {
                add_osd(&dirs, dir)?;
            }
            Ok(())
        }
        HostCmd::AddOsd { dir, dirs } => add_osd(&dirs, &dir),
        HostCmd::AddMon { mon_port, dirs } => add_mon(&dirs, mon_port),
        HostCmd::Rm {
            drain_timeout,
            purge_data,
            dirs,
        } => remove_host(&dirs, drain_timeout, purge_data),
    }
}

fn conf_value(etc: &Path, f: impl Fn(&shoal_config::Options) -> String) -> anyhow::Result<String> {
    let conf = etc.join("shoal.conf");
    let config = shoal_config::Config::load(Some(&conf), &admin(), &[])
        .with_context(|| format!("loading {} (join a cluster first)", conf.display()))?;
    Ok(f(&config.options))
}

fn add_osd(dirs: &HostDirs, dir: &Path) -> anyhow::Result<()> {
    let dir = std::path::absolute(dir)?;
    let created: OsdCreateReply =
        serde_json::from_value(shoal_json(&dirs.etc, &["osd", "create"])?)
            .context("`shoal osd create` answered no OSD id")?;
    let id = created.osd.to_string();
    shoal(
        &dirs.etc,
        &["osd", "mkfs", "--id", &id, "--data", &dir.to_string_lossy()],
    )?;
    // The daemon finds its data through osd_data: a directory elsewhere
    // is linked from the standard place.
    let standard = dirs.data.join(format!("osd-{id}"));
    if standard != dir {
        if standard.exists() || standard.is_symlink() {
            bail!("{} exists", standard.display());
        }
        std::os::unix::fs::symlink(&dir, &standard)?;
    }
    start(dirs, "osd", &id)?;
    outln!("osd.{id} in {}", dir.display());
    Ok(())
}

fn add_mon(dirs: &HostDirs, port: u16) -> anyhow::Result<()> {
    let host = conf_value(&dirs.etc, |o| o.osd_host.clone())?;
    let public = conf_value(&dirs.etc, |o| o.public_addr.clone())?;
    let ip = public
        .rsplit_once(':')
        .map_or(public.as_str(), |(ip, _)| ip);
    let addr = format!("{ip}:{port}");
    let mon_host = conf_value(&dirs.etc, |o| o.mon_host.clone())?;
    // The monitor's key, made by the monitors, beside the admin key.
    let entity = format!("mon.{host}");
    let got: AuthReply = serde_json::from_value(shoal_json(
        &dirs.etc,
        &["auth", "get-or-create", &entity, "mon", "allow *"],
    )?)?;
    let key = AuthKey::of(&got, &entity)
        .with_context(|| format!("no key for {entity} in the monitors' answer"))?;
    let mut ring = shoal_net::Keyring::load(&dirs.etc.join("keyring"))?;
    let mut add_key = |name: &str, key: &str| -> anyhow::Result<()> {
        ring.insert(
            name.parse()?,
            shoal_net::KeyringEntry {
                key: shoal_net::Secret::from_base64(key).map_err(anyhow::Error::msg)?,
                caps: Default::default(),
            },
        );
        Ok(())
    };
    add_key(&entity, key)?;
    // Monitors authenticate one another: the new one needs every
    // current monitor's key.
    let stat: StatusReply = serde_json::from_value(shoal_json(&dirs.etc, &["mon", "stat"])?)?;
    for m in &stat.monmap.mons {
        let other = format!("mon.{}", m.name);
        let got: AuthReply =
            serde_json::from_value(shoal_json(&dirs.etc, &["auth", "get", &other])?)?;
        let key = AuthKey::of(&got, &other)
            .with_context(|| format!("no key for {other} in the monitors' answer"))?;
        add_key(&other, key)?;
    }
    let tmp = dirs.data.join(format!("mon-{host}.keyring"));
    ring.save(&tmp)?;
    let with_me = format!("{mon_host},{host}={addr}");
    let mon_dir = dirs.data.join(format!("mon-{host}"));
    let made = shoal(
        &dirs.etc,
        &[
            "--set",
            &format!("mon_host={with_me}"),
            "mon",
            "mkfs",
            "--id",
            &host,
            "--data",
            &mon_dir.to_string_lossy(),
            "--keyring",
            &tmp.to_string_lossy(),
        ],
    );
    let _ = std::fs::remove_file(&tmp);
    made?;
    start(dirs, "mon", &host)?;
    if start_mode(dirs) == Start::None {
        outln!("once it runs: shoal mon add {host} {addr}");
        return Ok(());
    }
    until(60, "the new monitor joining", || {
        shoal(&dirs.etc, &["mon", "add", &host, &addr])
    })?;
    // This host's clients may ask the new monitor too.
    let conf = dirs.etc.join("shoal.conf");
    let text = std::fs::read_to_string(&conf)?;
    std::fs::write(
        &conf,
        text.replace(
            &format!("mon_host = {mon_host:?}"),
            &format!("mon_host = {with_me:?}"),
        ),
    )?;
    outln!("mon.{host} at {addr} is in the quorum");
    Ok(())
}

/// This host's OSD ids: the `osd-ID` entries under the data directory.
fn local_osds(dirs: &HostDirs) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(&dirs.data)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("osd-")
                .filter(|id| id.parse::<u32>().is_ok())
                .map(str::to_string)
        })
        .collect();
    ids.sort();
    ids
}

fn remove_host(dirs: &HostDirs, drain_secs: u64, purge: bool) -> anyhow::Result<()> {
    let host = conf_value(&dirs.etc, |o| o.osd_host.clone())?;
    let osds = local_osds(dirs);
    let status: StatusReply = serde_json::from_value(shoal_json(&dirs.etc, &["mon", "stat"])?)?;
    let is_mon = status.monmap.mons.iter().any(|m| m.name == host);
    if !osds.is_empty() {
        let mut args = vec!["osd", "out"];
        args.extend(osds.iter().map(String::as_str));
        shoal(&dirs.etc, &args)?;
        outln!("draining osd.{}", osds.join(", osd."));
        until(drain_secs, "the drain (every PG active+clean)", || {
            let v: PgStatReply = serde_json::from_value(shoal_json(&dirs.etc, &["pg", "stat"])?)?;
            if v.all_active_clean() {
                Ok(())
            } else {
                bail!(
                    "{} of {} PGs active+clean",
                    v.count("active+clean"),
                    v.num_pgs
                )
            }
        })?;
    }
    for id in &osds {
        stop(dirs, "osd", id)?;
        let _ = shoal(&dirs.etc, &["osd", "down", id]);
        until(60, "removing the OSD", || {
            shoal(&dirs.etc, &["osd", "rm", id])
        })?;
        shoal(&dirs.etc, &["osd", "crush", "rm", &format!("osd.{id}")])?;
        let _ = shoal(&dirs.etc, &["auth", "rm", &format!("osd.{id}")]);
        outln!("removed osd.{id}");
    }
    if is_mon {
        shoal(&dirs.etc, &["mon", "rm", &host])?;
        stop(dirs, "mon", &host)?;
        let _ = shoal(&dirs.etc, &["auth", "rm", &format!("mon.{host}")]);
        outln!("removed mon.{host}");
    }
    shoal(&dirs.etc, &["osd", "crush", "rm", &host])?;
    std::fs::remove_file(dirs.etc.join("shoal.conf"))?;
    std::fs::remove_file(dirs.etc.join("keyring"))?;
    if purge {
        for id in &osds {
            let link = dirs.data.join(format!("osd-{id}"));
            if let Ok(target) = std::fs::read_link(&link) {
                let _ = std::fs::remove_dir_all(target);
            }
            let _ = std::fs::remove_file(&link);
            let _ = std::fs::remove_dir_all(&link);
        }
        let _ = std::fs::remove_dir_all(dirs.data.join(format!("mon-{host}")));
    }
    outln!("host {host} removed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_damage_is_named() {
        let t = Token {
            fsid: "f".into(),
            mon_host: "a=10.0.0.1:6789".into(),
            keyring: "[client.admin]\nkey = x\n".into(),
        };
        let s = t.encode();
        assert!(s.starts_with("shoal1."));
        assert_eq!(Token::decode(&s).unwrap(), t);
        assert_eq!(Token::decode(&format!("  {s}\n")).unwrap(), t);
        let e = Token::decode("nonsense").unwrap_err().to_string();
        assert!(e.contains("not a Shoal join token"), "{e}");
        let e = Token::decode(&s[..s.len() - 7]).unwrap_err().to_string();
        assert!(e.contains("damaged"), "{e}");
        let empty = format!("{TOKEN_PREFIX}{}", B64.encode("{\"fsid\":\"f\"}"));
        let e = Token::decode(&empty).unwrap_err().to_string();
        assert!(e.contains("no mon_host"), "{e}");
    }
}

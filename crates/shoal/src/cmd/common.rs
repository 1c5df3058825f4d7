//! What several subcommands share: how to reach the monitors, the output
//! format, a runtime for commands that talk to the cluster.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::ValueEnum;
use serde_json::Value;
use shoal_config::Config;
use shoal_mon::{Command, MonClient, parse_mon_host};
use shoal_net::{Incoming, Keyring, KeyringAuth, Messenger, NetConfig, TcpTransport};
use shoal_types::EntityName;

/// Output format of commands that print cluster state.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Format {
    /// Text for people.
    Plain,
    /// JSON for programs.
    Json,
}

/// The command-line context: where configuration comes from.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// `--conf`.
    pub conf: Option<PathBuf>,
    /// `--set` overrides.
    pub set: Vec<String>,
    /// `--name`.
    pub name: EntityName,
    /// The configuration for `name`.
    pub config: Config,
}

impl Ctx {
    /// The configuration as another entity would read it.
    pub fn config_for(&self, entity: &EntityName) -> anyhow::Result<Config> {
        Ok(Config::load(self.conf.as_deref(), entity, &self.set)?)
    }
}

/// A single-threaded runtime for one command.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Runs `f` on a two-thread runtime with a cluster client made for data
/// tools (thousands of ops in flight), and shuts the client down after.
pub fn with_data_client<T, F, Fut>(ctx: &Ctx, f: F) -> anyhow::Result<T>
where
    F: FnOnce(shoal_client::Client) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    with_data_client_on(ctx, 2, f)
}

/// [`with_data_client`] on `threads` runtime threads (1: a single-threaded
/// runtime, no wake-ups across threads).
pub fn with_data_client_on<T, F, Fut>(ctx: &Ctx, threads: usize, f: F) -> anyhow::Result<T>
where
    F: FnOnce(shoal_client::Client) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let rt = match threads {
        0 | 1 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?,
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build()?,
    };
    rt.block_on(async {
        let mut opts = shoal_client::ClientOptions::from_loaded(&ctx.config, &ctx.name)?;
        opts.max_inflight_ops = opts.max_inflight_ops.max(4096);
        let client = shoal_client::Client::connect(opts).await?;
        let r = f(client.clone()).await;
        client.shutdown().await;
        r
    })
}

/// Monitor addresses from `mon_host`.
pub fn mon_addrs(config: &Config) -> anyhow::Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = parse_mon_host(&config.options.mon_host)?
        .into_iter()
        .map(|(_, a)| a)
        .collect();
    if addrs.is_empty() {
        bail!(
            "no monitors configured: set mon_host in the config file or with --set mon_host=IP:PORT"
        );
    }
    Ok(addrs)
}

/// A monitor client acting as `ctx.name`, with its key from `keyring`.
pub fn mon_client(ctx: &Ctx) -> anyhow::Result<MonClient> {
    mon_client_with(ctx, Arc::new(|_: Incoming| {}))
}

/// A monitor client whose messenger hands incoming messages (subscription
/// updates) to `dispatcher`.
pub fn mon_client_with(
    ctx: &Ctx,
    dispatcher: Arc<dyn shoal_net::Dispatcher>,
) -> anyhow::Result<MonClient> {
    let o = &ctx.config.options;
    if o.keyring.is_empty() {
        bail!("no keyring: set keyring = PATH in the config file or with --set keyring=PATH");
    }
    mon_client_as(
        &ctx.config,
        ctx.name.clone(),
        std::path::Path::new(&o.keyring),
        dispatcher,
    )
}

/// A monitor client acting as `name`, with its key from the keyring file
/// `keyring` (a daemon's own, in its data directory).
pub fn mon_client_as(
    config: &Config,
    name: EntityName,
    keyring: &std::path::Path,
    dispatcher: Arc<dyn shoal_net::Dispatcher>,
) -> anyhow::Result<MonClient> {
    let o = &config.options;
    let keyring = Keyring::load(keyring)?;
    let auth = Arc::new(KeyringAuth::new(name.clone(), keyring));
    let mut net = NetConfig::from_options(o);
    net.reconnect_attempts = 1;
    let msgr = Messenger::new(name, net, Arc::new(TcpTransport), auth, dispatcher);
    // Outlast the monitors' own command timeout, so their "no quorum"
    // answer reaches the user rather than a local timeout.
    let timeout = Duration::from_millis(o.mon_command_timeout_ms) + Duration::from_secs(3);
    Ok(MonClient::new(msgr, mon_addrs(config)?, timeout))
}

/// Reports `metrics()` as `daemon` of `kind` to the monitors (for the
/// manager) every `mgr_stats_period_ms`, until the runtime stops; nothing
/// when the period is 0.
pub fn report_perf<F>(ctx: &Ctx, daemon: String, kind: &str, metrics: F)
where
    F: Fn() -> Vec<shoal_mon::Metric> + Send + 'static,
{
    let every = ctx.config.options.mgr_stats_period_ms;
    if every == 0 {
        return;
    }
    let monc = match mon_client(ctx) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!("performance reports will not be sent: {e}");
            return;
        }
    };
    let kind = kind.to_string();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(every)).await;
            let report = shoal_mon::DaemonReport {
                daemon: daemon.clone(),
                kind: kind.clone(),
                metrics: metrics(),
            };
            if let Err(e) = monc.command(&Command::DaemonReport { report }).await {
                tracing::debug!("performance report: {e}");
            }
        }
    });
}

/// Sends one command to the monitors and returns its output.
pub fn mon_command(ctx: &Ctx, cmd: &Command) -> anyhow::Result<Value> {
    mon_command_as(ctx, cmd)
}

/// Runs a monitor command and decodes its reply into `T`: its typed reply
/// (`shoal_monclient::replies`), or `Value` for a command not typed yet.
pub fn mon_command_as<T: serde::de::DeserializeOwned>(
    ctx: &Ctx,
    cmd: &Command,
) -> anyhow::Result<T> {
    let rt = runtime()?;
    rt.block_on(async {
        let client = mon_client(ctx)?;
        client
            .command_as(cmd)
            .await
            .map_err(|e| anyhow::anyhow!("{:?}: {}", e.code, e.message))
    })
}

/// Prints `v` as JSON, or with `plain` for people.
pub fn print(format: Format, v: &Value, plain: impl FnOnce(&Value) -> String) {
    match format {
        Format::Json => outln!("{v}"),
        Format::Plain => out!("{}", plain(v)),
    }
}

/// Prints a typed reply as its JSON (its documented schema), or with
/// `plain` for people.
pub fn print_typed<T: serde::Serialize>(format: Format, v: &T, plain: impl FnOnce(&T) -> String) {
    match format {
        Format::Json => outln!("{}", serde_json::to_value(v).unwrap_or(Value::Null)),
        Format::Plain => out!("{}", plain(v)),
    }
}

/// Pretty JSON with a trailing newline, the plain form of structured output.
pub fn pretty(v: &Value) -> String {
    format!("{}\n", serde_json::to_string_pretty(v).unwrap_or_default())
}

/// What a daemon writes to its state file once it listens.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct DaemonState {
    /// Its process id.
    pub pid: u32,
    /// The address it listens on.
    pub addr: String,
}

/// A daemon's announcement once it listens: `line` on standard output
/// (how tests and scripts learn the address), and `{"pid", "addr"}` in
/// `state_file` if given (written whole, by rename).
pub fn announce(
    line: &str,
    addr: SocketAddr,
    state_file: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::io::Write;
    {
        let mut out = super::out::Stdout::new();
        writeln!(out, "{line}")?;
        out.flush()?;
    }
    if let Some(path) = state_file {
        let v = DaemonState {
            pid: std::process::id(),
            addr: addr.to_string(),
        };
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_string(&v)?)?;
        std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Runs `shoal --conf CONF ARGS...` (this binary) to completion: its
/// standard output, or its standard error as the error.
pub fn run_shoal(conf: &Path, args: &[&str]) -> anyhow::Result<String> {
    let exe = std::env::current_exe().context("finding the shoal executable")?;
    let out = std::process::Command::new(exe)
        .arg("--conf")
        .arg(conf)
        .args(args)
        .output()?;
    if !out.status.success() {
        bail!(
            "`shoal {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Starts `shoal --conf CONF ARGS...` (a daemon) in its own process group,
/// so a terminal's Ctrl-C does not reach it, appending its output to
/// `log` and writing its pid to `pid`.
pub fn spawn_shoal(
    conf: &Path,
    args: &[&str],
    log: &Path,
    pid: &Path,
) -> anyhow::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("finding the shoal executable")?;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let child = std::process::Command::new(exe)
        .arg("--conf")
        .arg(conf)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting `shoal {}`", args.join(" ")))?;
    std::fs::write(pid, format!("{}\n", child.id()))?;
    Ok(child)
}

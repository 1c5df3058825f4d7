//! The `shoal` executable. `main` parses the command line, loads the
//! configuration, sets up logging and dispatches to one module per
//! subcommand; the real work lives in the library crates.

#![deny(clippy::print_stdout)] // Standard output goes through cmd::out.

/// `print!` for commands: a closed pipe ends the process quietly (`cmd::out`).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cmd::out::print_fmt(format_args!($($arg)*))
    };
}

/// `println!` for commands: a closed pipe ends the process quietly (`cmd::out`).
macro_rules! outln {
    () => {
        $crate::cmd::out::print_fmt(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cmd::out::print_fmt(format_args!("{}\n", format_args!($($arg)*)))
    };
}

mod cmd;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use shoal_config::Config;
use shoal_types::EntityName;

const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("SHOAL_GIT_COMMIT"),
    ")"
);

/// Shoal: a self-healing distributed storage system in the family of Ceph.
///
/// One executable runs the daemons, administers the cluster, moves data and
/// measures it. `--format json` (or `-f json`) may go anywhere on the line. Every command reads the same configuration file (--conf or
/// $SHOAL_CONF), whose options can be overridden with --set.
#[derive(Debug, Parser)]
#[command(name = "shoal", version = VERSION, propagate_version = true, max_term_width = 100)]
struct Cli {
    /// Configuration file (TOML). Defaults to $SHOAL_CONF; without either,
    /// built-in defaults apply.
    #[arg(long, short = 'c', global = true, value_name = "FILE")]
    conf: Option<PathBuf>,

    /// Override one configuration option for this run; may be repeated.
    #[arg(long = "set", global = true, value_name = "KEY=VALUE")]
    set: Vec<String>,

    /// The entity this command acts as: its config sections and key.
    #[arg(
        long = "name",
        short = 'n',
        global = true,
        default_value = "client.admin",
        value_name = "TYPE.ID"
    )]
    as_entity: EntityName,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// A local cluster in one command: `shoal dev up`, `status`, `logs`, `down`.
    #[command(subcommand)]
    Dev(cmd::dev::DevCmd),
    /// Cluster status: health and services.
    Status(cmd::status::StatusArgs),
    /// Health checks (`shoal health detail` lists every affected item).
    Health(cmd::status::HealthArgs),
    /// Daemon crashes the monitors recorded: ls, info, archive, rm.
    Crash {
        #[command(subcommand)]
        cmd: cmd::crash::CrashCmd,
    },
    /// Run a monitor, or manage the monitor quorum.
    Mon(cmd::mon::MonCmd),
    /// Run an OSD, or read and change the OSD map: OSDs, flags, pools, placement.
    Osd(cmd::osd_daemon::OsdArgs),
    /// PG statistics reported by the OSDs (`pg dump`, `pg stat`).
    #[command(subcommand)]
    Pg(cmd::pg::PgCmd),
    /// Space used and available, in total and per pool (`df detail`: with
    /// the pools' quotas).
    Df(cmd::pg::DfArgs),
    /// The upmap balancer the monitors run: status, on, off, eval.
    #[command(subcommand)]
    Balancer(cmd::balancer::BalancerCmd),
    /// The monitors' quorum, its leader and the monitor map (JSON).
    #[command(name = "quorum_status", alias = "quorum-status")]
    QuorumStatus(cmd::mon::QuorumArgs),
    /// Entities, keys and capabilities kept by the monitors.
    #[command(subcommand)]
    Auth(cmd::auth::AuthCmd),
    /// Local effective configuration and central configuration.
    #[command(subcommand)]
    Config(cmd::config::ConfigCmd),
    /// Create and edit keyring files.
    #[command(subcommand)]
    Keyring(cmd::keyring::KeyringCmd),
    /// Measure the cluster (`shoal bench -p POOL SECONDS write|seq|rand|overwrite`) and its parts.
    Bench(cmd::bench::BenchArgs),
    /// Objects of a pool: put, get, xattrs, omap, listing.
    Rados(cmd::rados::RadosArgs),
    /// Block images: create, list, resize, import, export, bench.
    Rbd(cmd::rbd::RbdArgs),
    /// Serve block images over NBD (`shoal nbd serve`).
    Nbd(cmd::nbd::NbdArgs),
    /// The manager (`shoal mgr --id x`: /metrics and the dashboard) and its map.
    Mgr(cmd::mgr::MgrArgs),
    /// File systems: make, list, remove, mount through FUSE.
    #[command(subcommand)]
    Fs(cmd::fs::FsCmd),
    /// The metadata server (`shoal mds --id a`) and `mds fail`.
    Mds(cmd::fs::MdsArgs),
    /// The S3 gateway (`shoal gateway [--bind]`) and its users.
    Gateway(cmd::gateway::GatewayArgs),
    /// Make, check and inspect an OSD's object store.
    #[command(subcommand)]
    Store(cmd::store::StoreCmd),
    /// CRUSH map tools (build, test, compare, import, export).
    #[command(subcommand)]
    Crush(cmd::crush::CrushCmd),
    /// A new cluster on this host (`shoal cluster bootstrap`), and its
    /// join token.
    #[command(subcommand)]
    Cluster(cmd::cluster::ClusterCmd),
    /// This host in a cluster: join it, add an OSD or a monitor, remove it.
    #[command(subcommand)]
    Host(cmd::cluster::HostCmd),
}

/// Moves every `--format VALUE`, `--format=VALUE` and `-f VALUE` (Ceph's
/// short form) to the end of the command line, so it may be written
/// anywhere (`shoal --format json osd dump`, `shoal osd -f json tree`) and
/// still reach the command that prints, where clap knows it. Nothing after
/// a `--` moves. A command that prints nothing still refuses `--format`.
fn format_last(args: Vec<OsString>) -> Vec<OsString> {
    let mut rest = Vec::with_capacity(args.len());
    let mut format = Vec::new();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        if s == "--" {
            rest.push(a);
            rest.extend(it.by_ref());
            break;
        }
        if s == "--format" || s == "-f" {
            format.push(OsString::from("--format"));
            format.extend(it.next());
        } else if s.starts_with("--format=") {
            format.push(a);
        } else {
            rest.push(a);
        }
    }
    rest.extend(format);
    rest
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse_from(format_last(std::env::args_os().collect()));
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shoal: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    // `shoal dev` writes its own configuration (with the `--set`
    // overrides in it, for every daemon); $SHOAL_CONF may name the file of
    // a cluster it is about to create again.
    if let Command::Dev(c) = cli.command {
        return cmd::dev::run(c, &cli.set);
    }
    let config = Config::load(cli.conf.as_deref(), &cli.as_entity, &cli.set)?;
    let ctx = cmd::common::Ctx {
        conf: cli.conf,
        set: cli.set,
        name: cli.as_entity,
        config,
    };
    // Daemons set up logging with their own entity's configuration.
    if !matches!(cli.command, Command::Mon(_) | Command::Osd(_)) {
        shoal_config::logging::init(&ctx.config.options.log_level)?;
    }
    match cli.command {
        Command::Dev(_) => Ok(()),
        Command::Status(a) => cmd::status::run(a, &ctx),
        Command::Health(a) => cmd::status::run_health(a, &ctx),
        Command::Crash { cmd } => cmd::crash::run(cmd, &ctx),
        Command::Mon(c) => cmd::mon::run(c, &ctx),
        Command::Osd(c) => cmd::osd_daemon::run(c, &ctx),
        Command::Pg(c) => cmd::pg::run(c, &ctx),
        Command::Df(a) => cmd::pg::run_df(a, &ctx),
        Command::QuorumStatus(a) => cmd::mon::run_quorum_status(a, &ctx),
        Command::Balancer(c) => cmd::balancer::run(c, &ctx),
        Command::Auth(c) => cmd::auth::run(c, &ctx),
        Command::Config(c) => cmd::config::run(c, &ctx),
        Command::Keyring(c) => cmd::keyring::run(c),
        Command::Bench(c) => cmd::bench::run(c, &ctx),
        Command::Store(c) => cmd::store::run(c),
        Command::Rados(a) => cmd::rados::run(a, &ctx),
        Command::Rbd(a) => cmd::rbd::run(a, &ctx),
        Command::Nbd(a) => cmd::nbd::run(a, &ctx),
        Command::Gateway(a) => cmd::gateway::run(a, &ctx),
        Command::Mgr(a) => cmd::mgr::run(a, &ctx),
        Command::Fs(c) => cmd::fs::run(c, &ctx),
        Command::Mds(a) => cmd::fs::run_mds(a, &ctx),
        Command::Crush(c) => cmd::crush::run(c),
        Command::Cluster(c) => cmd::cluster::run_cluster(c),
        Command::Host(c) => cmd::cluster::run_host(c),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Clap's own consistency checks over every subcommand (duplicate
    /// flags, conflicting short options), which otherwise fire only when
    /// that subcommand is parsed.
    #[test]
    fn the_command_line_is_consistent() {
        super::Cli::command().debug_assert();
    }

    #[test]
    fn format_moves_to_the_end_but_not_past_a_double_dash() {
        let v = |s: &str| -> Vec<std::ffi::OsString> { s.split(' ').map(Into::into).collect() };
        let moved = |s: &str| super::format_last(v(s));
        assert_eq!(
            moved("shoal --format json osd dump"),
            v("shoal osd dump --format json")
        );
        assert_eq!(
            moved("shoal -f json osd tree"),
            v("shoal osd tree --format json")
        );
        assert_eq!(
            moved("shoal osd --format=json pool ls"),
            v("shoal osd pool ls --format=json")
        );
        assert_eq!(moved("shoal pg dump"), v("shoal pg dump"));
        assert_eq!(moved("shoal x -- -f json"), v("shoal x -- -f json"));
    }
}

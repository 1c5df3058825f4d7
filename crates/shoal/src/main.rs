//! The `shoal` executable. `main` parses the command line, loads the
//! configuration, sets up logging and dispatches to one module per
//! subcommand; the real work lives in the library crates.

mod cmd;

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
/// measures it. Every command reads the same configuration file (--conf or
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
        long,
        short = 'n',
        global = true,
        default_value = "client.admin",
        value_name = "TYPE.ID"
    )]
    name: EntityName,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show the effective configuration.
    #[command(subcommand)]
    Config(cmd::config::ConfigCmd),
    /// Create and edit keyring files.
    #[command(subcommand)]
    Keyring(cmd::keyring::KeyringCmd),
    /// Measure the cluster and its parts.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCmd),
    /// CRUSH map tools (build, test, compare, import, export).
    #[command(subcommand)]
    Crush(cmd::crush::CrushCmd),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shoal: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let config = Config::load(cli.conf.as_deref(), &cli.name, &cli.set)?;
    shoal_config::logging::init(&config.options.log_level)?;
    match cli.command {
        Command::Config(c) => cmd::config::run(c, &config),
        Command::Keyring(c) => cmd::keyring::run(c),
        Command::Bench(c) => cmd::bench::run(c, &config),
        Command::Crush(c) => cmd::crush::run(c),
    }
}

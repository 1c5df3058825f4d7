//! The `shoal` executable. `main` parses the command line and dispatches; all
//! real work lives in the library crates.

mod cmd;

use clap::{Parser, Subcommand};

/// Shoal: a self-healing distributed storage system.
#[derive(Debug, Parser)]
#[command(name = "shoal", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// CRUSH map tools (build, test, compare, import, export).
    #[command(subcommand)]
    Crush(cmd::crush::CrushCmd),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crush(c) => cmd::crush::run(c),
    }
}

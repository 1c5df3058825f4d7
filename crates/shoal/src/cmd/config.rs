//! `shoal config`: inspect the configuration.

use clap::Subcommand;
use shoal_config::{Config, Options};

/// Configuration commands.
#[derive(Debug, Subcommand)]
pub enum ConfigCmd {
    /// Print the effective configuration of the entity given by --name, each
    /// option with where its value came from.
    Show,
    /// List every option with its type and meaning.
    Options,
}

/// Runs one `shoal config` subcommand.
pub fn run(cmd: ConfigCmd, config: &Config) -> anyhow::Result<()> {
    match cmd {
        ConfigCmd::Show => print!("{}", config.show()),
        ConfigCmd::Options => {
            for o in Options::SCHEMA {
                println!("{} ({})\n    {}", o.name, o.type_name, o.doc);
            }
        }
    }
    Ok(())
}

//! `shoal config`: the local effective configuration, and the central
//! configuration the monitors keep.

use clap::Subcommand;
use shoal_config::Options;
use shoal_mon::Command;

use shoal_monclient::replies::ConfigGetReply;

use super::common::{Ctx, Format, mon_command, mon_command_as, pretty, print, print_typed};

/// Configuration commands.
#[derive(Debug, Subcommand)]
pub enum ConfigCmd {
    /// Print the effective configuration of the entity given by --name, each
    /// option with where its value came from.
    Show,
    /// List every option with its type and meaning.
    Options,
    /// Set an option centrally for WHO (global, osd, osd.3, ...).
    Set {
        /// global, an entity type or an entity.
        who: String,
        /// The option.
        key: String,
        /// The value.
        value: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Show the central options that apply to WHO.
    Get {
        /// An entity or section.
        who: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Remove a central option.
    Rm {
        /// The section.
        who: String,
        /// The option.
        key: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Every central configuration section.
    Dump {
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
}

/// Runs one `shoal config` subcommand.
pub fn run(cmd: ConfigCmd, ctx: &Ctx) -> anyhow::Result<()> {
    match cmd {
        ConfigCmd::Show => out!("{}", ctx.config.show()),
        ConfigCmd::Options => {
            for o in Options::SCHEMA {
                outln!("{} ({})\n    {}", o.name, o.type_name, o.doc);
            }
        }
        ConfigCmd::Set {
            who,
            key,
            value,
            format,
        } => {
            let v = mon_command(ctx, &Command::ConfigSet { who, key, value })?;
            // Plain: silent on success, as `ceph config set`.
            print(format, &v, |_| String::new());
        }
        ConfigCmd::Get { who, format } => {
            let v: ConfigGetReply = mon_command_as(ctx, &Command::ConfigGet { who })?;
            print_typed(format, &v, |v| {
                let mut out = String::new();
                for (k, e) in v {
                    out.push_str(&format!("{k} = {}  # [{}]\n", e.value, e.section));
                }
                out
            });
        }
        ConfigCmd::Rm { who, key, format } => {
            let v = mon_command(ctx, &Command::ConfigRm { who, key })?;
            print(format, &v, |_| String::new());
        }
        ConfigCmd::Dump { format } => {
            print(format, &mon_command(ctx, &Command::ConfigDump)?, pretty)
        }
    }
    Ok(())
}

//! `shoal auth`: entities, keys and capabilities kept by the monitors,
//! with Ceph's syntax (`shoal auth add client.x mon 'allow r' osd 'allow rw'`).

use std::collections::BTreeMap;

use anyhow::bail;
use clap::Subcommand;
use shoal_mon::Command;
use shoal_monclient::replies::AuthReply;

use super::common::{Ctx, Format, mon_command, mon_command_as, print, print_typed};

/// Auth commands.
#[derive(Debug, Subcommand)]
pub enum AuthCmd {
    /// List every entity with its capabilities.
    #[command(alias = "list")]
    Ls {
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Show one entity as a keyring section (key included).
    Get {
        /// The entity, e.g. client.admin.
        entity: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Create an entity with a new key; fails if it exists.
    Add {
        /// The entity.
        entity: String,
        /// Capabilities as SERVICE CAP pairs: mon 'allow r' osd 'allow rw'.
        caps: Vec<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Print an entity's keyring section, creating the entity if needed.
    GetOrCreate {
        /// The entity.
        entity: String,
        /// Capabilities as SERVICE CAP pairs (used only on creation).
        caps: Vec<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Remove an entity.
    Rm {
        /// The entity.
        entity: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Replace an entity's capabilities.
    Caps {
        /// The entity.
        entity: String,
        /// Capabilities as SERVICE CAP pairs.
        caps: Vec<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
}

fn caps(pairs: Vec<String>) -> anyhow::Result<BTreeMap<String, String>> {
    if pairs.len() % 2 != 0 {
        bail!("capabilities come in pairs: SERVICE 'CAP' (e.g. mon 'allow r')");
    }
    Ok(pairs
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect())
}

/// One entity as a keyring section.
fn keyring_section(v: &AuthReply) -> String {
    let mut out = String::new();
    for (name, e) in v {
        out.push_str(&format!("[{name}]\n\tkey = {}\n", e.key));
        for (svc, cap) in &e.caps {
            out.push_str(&format!("\tcaps {svc} = \"{cap}\"\n"));
        }
    }
    out
}

/// Runs one `shoal auth` subcommand.
pub fn run(cmd: AuthCmd, ctx: &Ctx) -> anyhow::Result<()> {
    match cmd {
        AuthCmd::Ls { format } => {
            let mut shown: AuthReply = mon_command_as(ctx, &Command::AuthLs)?;
            // Keys are secrets: the listing shows capabilities only.
            for e in shown.values_mut() {
                e.key.clear();
            }
            print_typed(format, &shown, |v| {
                let mut out = String::new();
                for (name, e) in v {
                    out.push_str(&format!("{name}\n"));
                    for (svc, cap) in &e.caps {
                        out.push_str(&format!("\tcaps: [{svc}] {cap}\n"));
                    }
                }
                out
            });
        }
        AuthCmd::Get { entity, format } => print_typed(
            format,
            &mon_command_as::<AuthReply>(ctx, &Command::AuthGet { entity })?,
            keyring_section,
        ),
        AuthCmd::Add {
            entity,
            caps: c,
            format,
        } => {
            let v: AuthReply = mon_command_as(
                ctx,
                &Command::AuthAdd {
                    entity,
                    caps: caps(c)?,
                },
            )?;
            print_typed(format, &v, keyring_section);
        }
        AuthCmd::GetOrCreate {
            entity,
            caps: c,
            format,
        } => {
            let v: AuthReply = mon_command_as(
                ctx,
                &Command::AuthGetOrCreate {
                    entity,
                    caps: caps(c)?,
                },
            )?;
            print_typed(format, &v, keyring_section);
        }
        AuthCmd::Rm { entity, format } => {
            let v = mon_command(
                ctx,
                &Command::AuthRm {
                    entity: entity.clone(),
                },
            )?;
            print(format, &v, |_| format!("removed {entity}\n"));
        }
        AuthCmd::Caps {
            entity,
            caps: c,
            format,
        } => {
            let v = mon_command(
                ctx,
                &Command::AuthCaps {
                    entity: entity.clone(),
                    caps: caps(c)?,
                },
            )?;
            print(format, &v, |_| format!("updated caps for {entity}\n"));
        }
    }
    Ok(())
}

//! `shoal keyring`: create keyring files and add keys to them, as Ceph's
//! `ceph-authtool --create-keyring --gen-key -n NAME` does.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Subcommand;
use shoal_net::Keyring;
use shoal_types::EntityName;

/// Keyring commands.
#[derive(Debug, Subcommand)]
pub enum KeyringCmd {
    /// Create a new keyring file with a fresh key for each entity named.
    Create {
        /// The keyring file to create (refuses to overwrite).
        file: PathBuf,
        /// Entities to generate keys for, e.g. client.admin.
        #[arg(long = "entity", short = 'e', required = true, value_name = "TYPE.ID")]
        entities: Vec<EntityName>,
    },
    /// Add a fresh key for an entity to an existing keyring.
    Add {
        /// The keyring file.
        file: PathBuf,
        /// The entity.
        #[arg(long = "entity", short = 'e', value_name = "TYPE.ID")]
        entity: EntityName,
    },
    /// List the entities in a keyring (never the keys).
    List {
        /// The keyring file.
        file: PathBuf,
    },
}

/// Runs one `shoal keyring` subcommand.
pub fn run(cmd: KeyringCmd) -> anyhow::Result<()> {
    match cmd {
        KeyringCmd::Create { file, entities } => {
            if file.exists() {
                bail!("{} already exists; use `shoal keyring add`", file.display());
            }
            let mut k = Keyring::default();
            for e in entities {
                k.add_generated(e);
            }
            k.save(&file)?;
            outln!("created {}", file.display());
        }
        KeyringCmd::Add { file, entity } => {
            let mut k = Keyring::load(&file)?;
            if k.get(&entity).is_some() {
                bail!("{entity} already has a key in {}", file.display());
            }
            k.add_generated(entity.clone());
            k.save(&file).with_context(|| format!("adding {entity}"))?;
            outln!("added {entity} to {}", file.display());
        }
        KeyringCmd::List { file } => {
            for e in Keyring::load(&file)?.entities() {
                outln!("{e}");
            }
        }
    }
    Ok(())
}

//! `shoal mon mkfs`: a monitor's data directory.
//!
//! ```text
//! DATA/mon.json   name, fsid and the initial monitors (name -> address)
//! DATA/keyring    this monitor's key and the bootstrap keys (client.admin, every initial monitor)
//! DATA/raft/      the Raft log, vote and snapshots (MonStore)
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use shoal_net::{Keyring, KeyringEntry};
use shoal_types::{EntityName, EntityType};

use crate::store::write_atomic;
use shoal_monclient::{ErrorCode, MonError};

/// What `mon.json` records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonMeta {
    /// This monitor's name (`a` for `mon.a`).
    pub name: String,
    /// The cluster id proposed at bootstrap.
    pub fsid: String,
    /// The initial monitors, by name.
    pub initial: BTreeMap<String, String>,
}

impl MonMeta {
    /// Reads `DATA/mon.json`.
    pub fn load(data: &Path) -> Result<MonMeta, MonError> {
        let path = data.join("mon.json");
        let bytes = std::fs::read(&path).map_err(|e| {
            MonError::new(
                ErrorCode::NotFound,
                format!("{}: {e} (run `shoal mon mkfs` first)", path.display()),
            )
        })?;
        serde_json::from_slice(&bytes).map_err(|e| {
            MonError::new(
                ErrorCode::InvalidArgument,
                format!("{}: {e}", path.display()),
            )
        })
    }

    /// This monitor's entity name.
    pub fn entity(&self) -> Result<EntityName, MonError> {
        EntityName::new(EntityType::Mon, self.name.clone())
            .map_err(|e| MonError::new(ErrorCode::InvalidArgument, e.to_string()))
    }
}

/// A random fsid in the textual form of a version-4 UUID.
pub fn new_fsid() -> String {
    let mut b = [0u8; 16];
    let secret = shoal_net::Secret::generate();
    b.copy_from_slice(&secret.as_bytes()[..16]);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    )
}

fn io(path: &Path, e: impl std::fmt::Display) -> MonError {
    MonError::new(ErrorCode::Internal, format!("{}: {e}", path.display()))
}

/// Creates a monitor's data directory. Without `keyring`, generates the
/// bootstrap keyring: keys for `client.admin` (all capabilities) and every
/// initial monitor. Returns the path of the keyring written.
pub fn mkfs(
    data: &Path,
    name: &str,
    initial: &BTreeMap<String, String>,
    keyring: Option<&Path>,
    fsid: Option<String>,
) -> Result<PathBuf, MonError> {
    let me = EntityName::new(EntityType::Mon, name)
        .map_err(|e| MonError::new(ErrorCode::InvalidArgument, e.to_string()))?;
    if !initial.contains_key(name) {
        return Err(MonError::new(
            ErrorCode::InvalidArgument,
            format!("mon.{name} is not among the initial monitors in mon_host ({initial:?})"),
        ));
    }
    let meta_path = data.join("mon.json");
    if meta_path.exists() {
        return Err(MonError::new(
            ErrorCode::Exists,
            format!(
                "{} exists: {} is already a monitor",
                meta_path.display(),
                data.display()
            ),
        ));
    }
    std::fs::create_dir_all(data).map_err(|e| io(data, e))?;
    let ring = match keyring {
        Some(path) => Keyring::load(path).map_err(|e| io(path, e))?,
        None => bootstrap_keyring(initial)?,
    };
    if ring.get(&me).is_none() {
        return Err(MonError::new(
            ErrorCode::InvalidArgument,
            format!("the keyring has no key for {me}"),
        ));
    }
    let ring_path = data.join("keyring");
    ring.save(&ring_path).map_err(|e| io(&ring_path, e))?;
    let meta = MonMeta {
        name: name.to_string(),
        fsid: fsid.unwrap_or_else(new_fsid),
        initial: initial.clone(),
    };
    let bytes = serde_json::to_vec_pretty(&meta).map_err(|e| io(&meta_path, e))?;
    write_atomic(&meta_path, &bytes).map_err(|e| io(&meta_path, e))?;
    Ok(ring_path)
}

fn bootstrap_keyring(initial: &BTreeMap<String, String>) -> Result<Keyring, MonError> {
    let mut ring = Keyring::default();
    let all = BTreeMap::from([
        ("mon".to_string(), "allow *".to_string()),
        ("osd".to_string(), "allow *".to_string()),
        ("mds".to_string(), "allow *".to_string()),
    ]);
    let admin: EntityName = "client.admin"
        .parse()
        .map_err(|_| MonError::new(ErrorCode::Internal, "client.admin"))?;
    for name in initial.keys() {
        let mon = EntityName::new(EntityType::Mon, name.clone())
            .map_err(|e| MonError::new(ErrorCode::InvalidArgument, e.to_string()))?;
        ring.add_generated(mon.clone());
        let key = ring.get(&mon).map(|e| e.key.clone());
        if let Some(key) = key {
            ring.insert(
                mon,
                KeyringEntry {
                    key,
                    caps: all.clone(),
                },
            );
        }
    }
    ring.insert(
        admin,
        KeyringEntry {
            key: shoal_net::Secret::generate(),
            caps: all,
        },
    );
    Ok(ring)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mkfs_writes_meta_and_keyring_once() {
        let dir = std::env::temp_dir().join(format!("shoal-mkfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let initial = BTreeMap::from([
            ("a".to_string(), "127.0.0.1:6789".to_string()),
            ("b".to_string(), "127.0.0.1:6790".to_string()),
        ]);
        let ring = mkfs(&dir.join("a"), "a", &initial, None, None).unwrap();
        let k = Keyring::load(&ring).unwrap();
        let names: Vec<String> = k.entities().map(|e| e.to_string()).collect();
        assert_eq!(names, ["mon.a", "mon.b", "client.admin"]);
        let meta = MonMeta::load(&dir.join("a")).unwrap();
        assert_eq!(meta.fsid.len(), 36);
        // Monitor b joins with the same keyring.
        mkfs(
            &dir.join("b"),
            "b",
            &initial,
            Some(&ring),
            Some(meta.fsid.clone()),
        )
        .unwrap();
        assert_eq!(MonMeta::load(&dir.join("b")).unwrap().fsid, meta.fsid);
        let again = mkfs(&dir.join("a"), "a", &initial, None, None).unwrap_err();
        assert_eq!(again.code, ErrorCode::Exists);
        let stranger = mkfs(&dir.join("c"), "c", &initial, None, None).unwrap_err();
        assert!(stranger.message.contains("not among the initial monitors"));
        assert_ne!(new_fsid(), new_fsid());
    }
}

//! The file-system map: which file systems exist (a metadata pool and a
//! data pool each), which `shoal mds` holds each one's rank 0 and which
//! stand by (as Ceph's FSMap). Metadata servers send beacons to the leader;
//! the leader keeps them in memory (soft state, as OSD and manager
//! beacons) and proposes a new map only when the assignment changes: an
//! active MDS fell silent past the grace or was failed by an operator (a
//! standby takes over with a new *incarnation*, which fences the old one
//! out of the journal), a file system has no MDS and one is free, or the
//! set of standbys changed.
//!
//! [`next`] is the pure decision: (map, fresh beacons, failed) → the map to
//! propose, if any.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use shoal_monclient::replies::{ActiveMds, FS_MAP_VERSION, FsMapReply, FsReply, MdsStandby};

/// The file-system map, as the monitors agree on it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsMap {
    /// Bumped by every change.
    pub epoch: u64,
    /// The id the next file system gets.
    pub next_id: u64,
    /// File systems by name.
    pub filesystems: BTreeMap<String, FsInfo>,
    /// Standby metadata servers by name, with their addresses.
    pub standbys: BTreeMap<String, String>,
}

/// One file system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsInfo {
    /// Its id (objects in the metadata pool are named after it).
    pub id: u64,
    /// The pool of inodes, directories and the journal.
    pub metadata_pool: String,
    /// The pool of file data.
    pub data_pool: String,
    /// When it was made (ms since the Unix epoch).
    pub created_ms: u64,
    /// The MDS holding rank 0, if any.
    pub active: Option<MdsEntry>,
}

/// The MDS holding a file system's rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsEntry {
    /// Its name (`a` for `mds.a`).
    pub name: String,
    /// Where it serves clients.
    pub addr: String,
    /// The map epoch that gave it the rank: every holder has a higher one
    /// than the one before, and its journal writes carry it (fencing).
    pub incarnation: u64,
    /// When it got the rank (ms since the Unix epoch, the leader's clock).
    pub since_ms: u64,
    /// The process instance (random at its start): a restarted MDS of the
    /// same name is another instance and gets a new incarnation.
    #[serde(default)]
    pub nonce: u64,
}

impl FsMap {
    /// The map as commands show it.
    pub fn reply(&self) -> FsMapReply {
        FsMapReply {
            version: FS_MAP_VERSION,
            epoch: self.epoch,
            filesystems: self.filesystems.iter().map(|(n, f)| f.reply(n)).collect(),
            standbys: self
                .standbys
                .iter()
                .map(|(n, a)| MdsStandby {
                    name: n.clone(),
                    addr: a.clone(),
                })
                .collect(),
        }
    }

    /// [`FsMap::reply`] as JSON.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.reply()).unwrap_or(Value::Null)
    }

    /// The file system `name` holds, if any, and its MDS.
    pub fn fs_of_mds(&self, name: &str) -> Option<(&String, &FsInfo)> {
        self.filesystems
            .iter()
            .find(|(_, f)| f.active.as_ref().is_some_and(|a| a.name == name))
    }
}

impl FsInfo {
    /// One file system as commands show it.
    pub fn reply(&self, name: &str) -> FsReply {
        FsReply {
            name: name.to_string(),
            id: self.id,
            metadata_pool: self.metadata_pool.clone(),
            data_pool: self.data_pool.clone(),
            created_ms: self.created_ms,
            active: self.active.as_ref().map(|a| ActiveMds {
                name: a.name.clone(),
                addr: a.addr.clone(),
                incarnation: a.incarnation,
                since_ms: a.since_ms,
                report: None,
            }),
        }
    }
}

/// A fresh beacon: the MDS's address and process instance.
pub type Fresh = BTreeMap<String, (String, u64)>;

/// The map the leader should propose, given the metadata servers whose
/// beacons are fresh (name → address, instance) and one an operator
/// failed: `None` when the current map already says the right thing.
///
/// An active MDS keeps its rank while its beacons are fresh; a file system
/// whose MDS is silent or failed (or that has none) gets the first free
/// fresh standby by name, with the new epoch as its incarnation. A failed
/// MDS is left out until its next beacon after the change.
pub fn next(map: &FsMap, fresh: &Fresh, failed: Option<&str>, now_ms: u64) -> Option<FsMap> {
    let keep = |name: &str| fresh.contains_key(name) && failed != Some(name);
    let mut out = map.clone();
    out.epoch = map.epoch + 1;
    // Keep live actives (their address may have moved).
    for fs in out.filesystems.values_mut() {
        fs.active = match fs.active.take() {
            // The same instance keeps its rank; a restarted one (another
            // nonce) takes it again below, with a new incarnation.
            Some(a) if keep(&a.name) && fresh.get(&a.name).is_some_and(|(_, n)| *n == a.nonce) => {
                let addr = fresh
                    .get(&a.name)
                    .map_or(a.addr.clone(), |(ad, _)| ad.clone());
                Some(MdsEntry { addr, ..a })
            }
            _ => None,
        };
    }
    let busy = |m: &FsMap, n: &str| m.fs_of_mds(n).is_some();
    let names: Vec<String> = out.filesystems.keys().cloned().collect();
    for fs_name in names {
        if out.filesystems[&fs_name].active.is_some() {
            continue;
        }
        let pick = fresh
            .iter()
            .find(|(n, _)| keep(n) && !busy(&out, n))
            .map(|(n, a)| (n.clone(), a.clone()));
        if let (Some((name, (addr, nonce))), Some(fs)) = (pick, out.filesystems.get_mut(&fs_name)) {
            fs.active = Some(MdsEntry {
                name,
                addr,
                incarnation: out.epoch,
                since_ms: now_ms,
                nonce,
            });
        }
    }
    out.standbys = fresh
        .iter()
        .filter(|(n, _)| keep(n) && !busy(&out, n))
        .map(|(n, (a, _))| (n.clone(), a.clone()))
        .collect();
    let same = out.filesystems == map.filesystems && out.standbys == map.standbys;
    (!same).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh(names: &[&str]) -> Fresh {
        names
            .iter()
            .map(|n| (n.to_string(), (format!("127.0.0.1:{}", n.len()), 7)))
            .collect()
    }

    fn with_fs() -> FsMap {
        let mut m = FsMap {
            epoch: 3,
            next_id: 2,
            ..FsMap::default()
        };
        m.filesystems.insert(
            "cephfs".into(),
            FsInfo {
                id: 1,
                metadata_pool: "meta".into(),
                data_pool: "data".into(),
                created_ms: 1,
                active: None,
            },
        );
        m
    }

    #[test]
    fn a_file_system_without_mds_gets_the_first_fresh_one() {
        let m = next(&with_fs(), &fresh(&["b", "a"]), None, 9).unwrap();
        let a = m.filesystems["cephfs"].active.clone().unwrap();
        assert_eq!((a.name.as_str(), a.incarnation, a.since_ms), ("a", 4, 9));
        assert_eq!(m.standbys.keys().collect::<Vec<_>>(), ["b"]);
        assert_eq!(m.epoch, 4);
        // Nothing changes while both stay fresh.
        assert_eq!(next(&m, &fresh(&["a", "b"]), None, 10), None);
    }

    #[test]
    fn a_silent_or_failed_active_is_replaced_with_a_higher_incarnation() {
        let m = next(&with_fs(), &fresh(&["a", "b"]), None, 9).unwrap();
        let silent = next(&m, &fresh(&["b"]), None, 20).unwrap();
        let a = silent.filesystems["cephfs"].active.clone().unwrap();
        assert_eq!(a.name, "b");
        assert!(a.incarnation > m.filesystems["cephfs"].active.as_ref().unwrap().incarnation);
        assert!(silent.standbys.is_empty());
        let failed = next(&m, &fresh(&["a", "b"]), Some("a"), 20).unwrap();
        assert_eq!(
            failed.filesystems["cephfs"].active.as_ref().unwrap().name,
            "b"
        );
        assert!(
            !failed.standbys.contains_key("a"),
            "a failed MDS waits for its next beacon"
        );
        // The old active comes back as a standby, not as the active.
        let back = next(&failed, &fresh(&["a", "b"]), None, 30).unwrap();
        assert_eq!(
            back.filesystems["cephfs"].active.as_ref().unwrap().name,
            "b"
        );
        assert!(back.standbys.contains_key("a"));
    }

    #[test]
    fn a_restarted_mds_gets_a_new_incarnation() {
        let m = next(&with_fs(), &fresh(&["a"]), None, 9).unwrap();
        let mut again = fresh(&["a"]);
        again.insert("a".into(), ("127.0.0.1:9".into(), 8));
        let r = next(&m, &again, None, 20).unwrap();
        let a = r.filesystems["cephfs"].active.clone().unwrap();
        assert_eq!((a.name.as_str(), a.nonce), ("a", 8));
        assert!(a.incarnation > m.filesystems["cephfs"].active.as_ref().unwrap().incarnation);
    }

    #[test]
    fn with_no_mds_at_all_the_rank_is_vacant() {
        let m = next(&with_fs(), &fresh(&["a"]), None, 9).unwrap();
        let gone = next(&m, &fresh(&[]), None, 20).unwrap();
        assert_eq!(gone.filesystems["cephfs"].active, None);
        assert_eq!(next(&gone, &fresh(&[]), None, 21), None);
    }
}

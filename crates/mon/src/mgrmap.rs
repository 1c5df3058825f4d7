//! The manager map: which `shoal mgr` is active and which stand by (as
//! Ceph's MgrMap). Managers send beacons to the leader every couple of
//! seconds; the leader keeps them in memory (soft state, as OSD beacons)
//! and proposes a new map only when the choice changes: the active one
//! fell silent past the grace (a standby takes over), one was failed by an
//! operator (`shoal mgr fail`), or the set of standbys changed.
//!
//! [`next`] is the pure decision: (map, fresh beacons, failed) → the map to
//! propose, if any.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use shoal_monclient::replies::{ActiveMgr, MGR_MAP_VERSION, MgrMapReply, MgrStandby};

/// The manager map, as the monitors agree on it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MgrMap {
    /// Bumped by every change.
    pub epoch: u64,
    /// The active manager, if any.
    pub active: Option<MgrEntry>,
    /// Standbys by name, with their addresses.
    pub standbys: BTreeMap<String, String>,
}

/// The active manager.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MgrEntry {
    /// Its name (`x` for `mgr.x`).
    pub name: String,
    /// Where it serves HTTP (`/metrics`, the dashboard).
    pub addr: String,
    /// When it became active (ms since the Unix epoch, the leader's clock).
    pub since_ms: u64,
}

impl MgrMap {
    /// The map as commands show it.
    pub fn reply(&self) -> MgrMapReply {
        MgrMapReply {
            version: MGR_MAP_VERSION,
            epoch: self.epoch,
            active: self.active.as_ref().map(|a| ActiveMgr {
                name: a.name.clone(),
                addr: a.addr.clone(),
                since_ms: a.since_ms,
            }),
            available: self.active.is_some(),
            standbys: self
                .standbys
                .iter()
                .map(|(n, a)| MgrStandby {
                    name: n.clone(),
                    addr: a.clone(),
                })
                .collect(),
        }
    }

    /// [`MgrMap::reply`] as JSON.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.reply()).unwrap_or(Value::Null)
    }
}

/// The map the leader should propose, given the managers whose beacons
/// are fresh (name → address) and a manager an operator failed: `None`
/// when the current map already says the right thing.
///
/// The active manager keeps its role while its beacons are fresh (no
/// flapping between equals); when it is silent or failed, the first fresh
/// standby by name takes over. A failed manager is left out until its next
/// beacon after the change.
pub fn next(
    map: &MgrMap,
    fresh: &BTreeMap<String, String>,
    failed: Option<&str>,
    now_ms: u64,
) -> Option<MgrMap> {
    let keep = |name: &str| fresh.contains_key(name) && failed != Some(name);
    let active = match &map.active {
        Some(a) if keep(&a.name) => {
            let addr = fresh
                .get(&a.name)
                .cloned()
                .unwrap_or_else(|| a.addr.clone());
            Some(MgrEntry { addr, ..a.clone() })
        }
        _ => fresh
            .iter()
            .find(|(n, _)| keep(n))
            .map(|(n, addr)| MgrEntry {
                name: n.clone(),
                addr: addr.clone(),
                since_ms: now_ms,
            }),
    };
    let standbys: BTreeMap<String, String> = fresh
        .iter()
        .filter(|(n, _)| keep(n) && active.as_ref().is_none_or(|a| &a.name != *n))
        .map(|(n, a)| (n.clone(), a.clone()))
        .collect();
    if active == map.active && standbys == map.standbys {
        return None;
    }
    Some(MgrMap {
        epoch: map.epoch + 1,
        active,
        standbys,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh(names: &[&str]) -> BTreeMap<String, String> {
        names
            .iter()
            .map(|n| (n.to_string(), format!("127.0.0.1:{}", 9000 + n.len())))
            .collect()
    }

    #[test]
    fn the_first_manager_becomes_active_and_others_stand_by() {
        let m0 = MgrMap::default();
        let m1 = next(&m0, &fresh(&["b"]), None, 10).expect("a change");
        assert_eq!(m1.epoch, 1);
        assert_eq!(m1.active.as_ref().map(|a| a.name.as_str()), Some("b"));
        assert_eq!(m1.active.as_ref().map(|a| a.since_ms), Some(10));
        // Another arrives: it stands by; the active one stays.
        let m2 = next(&m1, &fresh(&["a", "b"]), None, 20).expect("a change");
        assert_eq!(m2.active.as_ref().map(|a| a.name.as_str()), Some("b"));
        assert_eq!(m2.standbys.keys().collect::<Vec<_>>(), ["a"]);
        // Nothing new: nothing proposed.
        assert_eq!(next(&m2, &fresh(&["a", "b"]), None, 30), None);
    }

    #[test]
    fn a_silent_active_manager_is_replaced_by_a_standby() {
        let m = next(&MgrMap::default(), &fresh(&["a"]), None, 1).expect("change");
        let m = next(&m, &fresh(&["a", "b", "c"]), None, 2).expect("change");
        let m = next(&m, &fresh(&["b", "c"]), None, 3).expect("change");
        assert_eq!(m.active.as_ref().map(|a| a.name.as_str()), Some("b"));
        assert_eq!(m.active.as_ref().map(|a| a.since_ms), Some(3));
        assert_eq!(m.standbys.keys().collect::<Vec<_>>(), ["c"]);
        // The old one comes back: it stands by.
        let m = next(&m, &fresh(&["a", "b", "c"]), None, 4).expect("change");
        assert_eq!(m.active.as_ref().map(|a| a.name.as_str()), Some("b"));
        assert_eq!(m.standbys.len(), 2);
        // Everyone silent: no active manager.
        let m = next(&m, &fresh(&[]), None, 5).expect("change");
        assert!(m.active.is_none() && m.standbys.is_empty());
        assert_eq!(m.to_json()["available"], false);
    }

    #[test]
    fn a_failed_manager_hands_over_and_returns_as_a_standby() {
        let m = next(&MgrMap::default(), &fresh(&["a", "b"]), None, 1).expect("change");
        assert_eq!(m.active.as_ref().map(|a| a.name.as_str()), Some("a"));
        let m = next(&m, &fresh(&["a", "b"]), Some("a"), 2).expect("change");
        assert_eq!(m.active.as_ref().map(|a| a.name.as_str()), Some("b"));
        assert!(m.standbys.is_empty());
        let m = next(&m, &fresh(&["a", "b"]), None, 3).expect("change");
        assert_eq!(m.active.as_ref().map(|a| a.name.as_str()), Some("b"));
        assert_eq!(m.standbys.keys().collect::<Vec<_>>(), ["a"]);
        // Failing a manager that is not there changes nothing.
        assert_eq!(next(&m, &fresh(&["a", "b"]), Some("zz"), 4), None);
    }

    #[test]
    fn a_manager_that_moved_is_followed() {
        let m = next(&MgrMap::default(), &fresh(&["a"]), None, 1).expect("change");
        let mut moved = fresh(&["a"]);
        moved.insert("a".into(), "127.0.0.9:1".into());
        let m2 = next(&m, &moved, None, 2).expect("change");
        assert_eq!(
            m2.active.as_ref().map(|a| a.addr.as_str()),
            Some("127.0.0.9:1")
        );
        assert_eq!(m2.active.as_ref().map(|a| a.since_ms), Some(1));
    }
}

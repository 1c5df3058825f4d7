//! Health with a memory: the checks the leader last recorded, the mutes
//! operators set, and the history of checks raised and cleared (as Ceph's
//! `health mute` and the health history operators read after the fact).
//!
//! The checks themselves are computed from the state on demand
//! (`views::raw_checks`); the leader compares them with what is recorded
//! here every second and, when a check appears, changes severity or goes,
//! proposes a [`crate::state::MonRequest::HealthRecord`] carrying the
//! checks and its clock. Applying it is a pure function of (state,
//! request), as every change of the monitors' state is.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

/// Events the history keeps (the oldest go first).
pub const HISTORY_MAX: usize = 1000;

/// A check as the leader saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckNow {
    /// Its code (`OSD_DOWN`).
    pub code: String,
    /// `HEALTH_WARN` or `HEALTH_ERR`.
    pub severity: String,
    /// Its one-line summary.
    pub summary: String,
}

/// A check in force, as last recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recorded {
    /// `HEALTH_WARN` or `HEALTH_ERR`.
    pub severity: String,
    /// Its latest summary.
    pub summary: String,
    /// When it was raised (ms since the Unix epoch, the leader's clock).
    pub since_ms: u64,
}

/// An operator's mute of one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mute {
    /// When it lapses (none: until unmuted, or the check clears).
    pub until_ms: Option<u64>,
    /// Kept when the check clears (else it goes with the check).
    pub sticky: bool,
}

/// One change of the cluster's health: recorded as `health history`
/// answers it.
pub use shoal_monclient::replies::HealthEvent as Event;

/// Recorded checks, mutes and history.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthState {
    /// The checks in force, by code.
    pub active: BTreeMap<String, Recorded>,
    /// Mutes by code.
    pub mutes: BTreeMap<String, Mute>,
    /// Changes, oldest first, at most `HISTORY_MAX` (1 000).
    pub history: VecDeque<Event>,
}

fn rank(severity: &str) -> u8 {
    match severity {
        "HEALTH_ERR" => 2,
        "HEALTH_WARN" => 1,
        _ => 0,
    }
}

impl HealthState {
    /// Whether `checks` differ from what is recorded in anything the
    /// history keeps (which checks, and their severity).
    pub fn differs(&self, checks: &[CheckNow]) -> bool {
        checks.len() != self.active.len()
            || checks.iter().any(|c| {
                self.active
                    .get(&c.code)
                    .is_none_or(|r| r.severity != c.severity)
            })
    }

    /// Records `checks`, seen at `at_ms`: events for what was raised,
    /// changed severity or cleared; a cleared check's mute goes unless
    /// sticky; lapsed mutes go. Returns how many events it added.
    pub fn record(&mut self, at_ms: u64, checks: &[CheckNow]) -> usize {
        let mut events = Vec::new();
        let now: BTreeMap<&str, &CheckNow> = checks.iter().map(|c| (c.code.as_str(), c)).collect();
        for c in checks {
            let what = match self.active.get(&c.code) {
                None => Some("raised"),
                Some(r) if rank(&c.severity) > rank(&r.severity) => Some("escalated"),
                Some(r) if rank(&c.severity) < rank(&r.severity) => Some("eased"),
                Some(_) => None,
            };
            if let Some(what) = what {
                events.push(Event {
                    at_ms,
                    code: c.code.clone(),
                    what: what.into(),
                    severity: c.severity.clone(),
                    summary: c.summary.clone(),
                });
            }
            let since_ms = self.active.get(&c.code).map_or(at_ms, |r| r.since_ms);
            self.active.insert(
                c.code.clone(),
                Recorded {
                    severity: c.severity.clone(),
                    summary: c.summary.clone(),
                    since_ms,
                },
            );
        }
        let gone: Vec<String> = self
            .active
            .keys()
            .filter(|k| !now.contains_key(k.as_str()))
            .cloned()
            .collect();
        for code in gone {
            if let Some(r) = self.active.remove(&code) {
                events.push(Event {
                    at_ms,
                    code: code.clone(),
                    what: "cleared".into(),
                    severity: r.severity,
                    summary: r.summary,
                });
            }
            if self.mutes.get(&code).is_some_and(|m| !m.sticky) {
                self.mutes.remove(&code);
            }
        }
        self.mutes
            .retain(|_, m| m.until_ms.is_none_or(|u| u > at_ms));
        let n = events.len();
        self.history.extend(events);
        while self.history.len() > HISTORY_MAX {
            self.history.pop_front();
        }
        n
    }

    /// Whether check `code` is muted at `now_ms`.
    pub fn muted(&self, code: &str, now_ms: u64) -> bool {
        self.mutes
            .get(code)
            .is_some_and(|m| m.until_ms.is_none_or(|u| u > now_ms))
    }

    /// The history as `shoal health history` prints it, newest last.
    pub fn history_view(&self) -> shoal_monclient::replies::HealthHistoryReply {
        shoal_monclient::replies::HealthHistoryReply {
            events: self.history.iter().cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(code: &str, severity: &str, summary: &str) -> CheckNow {
        CheckNow {
            code: code.into(),
            severity: severity.into(),
            summary: summary.into(),
        }
    }

    #[test]
    fn checks_raised_changed_and_cleared_make_events() {
        let mut h = HealthState::default();
        let down = check("OSD_DOWN", "HEALTH_WARN", "1 osds down");
        assert!(h.differs(std::slice::from_ref(&down)));
        assert_eq!(h.record(10, std::slice::from_ref(&down)), 1);
        // A new summary alone is no event, and keeps when it was raised.
        let more = check("OSD_DOWN", "HEALTH_WARN", "2 osds down");
        assert!(!h.differs(std::slice::from_ref(&more)));
        assert_eq!(h.record(20, std::slice::from_ref(&more)), 0);
        assert_eq!(h.active["OSD_DOWN"].since_ms, 10);
        assert_eq!(h.active["OSD_DOWN"].summary, "2 osds down");
        let err = check("OSD_DOWN", "HEALTH_ERR", "3 osds down");
        assert!(h.differs(std::slice::from_ref(&err)));
        h.record(30, &[err, check("PG_DEGRADED", "HEALTH_WARN", "x")]);
        h.record(40, &[]);
        let what: Vec<(&str, &str, u64)> = h
            .history
            .iter()
            .map(|e| (e.code.as_str(), e.what.as_str(), e.at_ms))
            .collect();
        assert_eq!(
            what,
            vec![
                ("OSD_DOWN", "raised", 10),
                ("OSD_DOWN", "escalated", 30),
                ("PG_DEGRADED", "raised", 30),
                ("OSD_DOWN", "cleared", 40),
                ("PG_DEGRADED", "cleared", 40),
            ]
        );
        assert!(h.active.is_empty());
    }

    #[test]
    fn mutes_lapse_and_go_with_their_check_unless_sticky() {
        let mut h = HealthState::default();
        let flags = check("OSDMAP_FLAGS", "HEALTH_WARN", "noout flag(s) set");
        let down = check("OSD_DOWN", "HEALTH_WARN", "1 osds down");
        h.record(0, &[flags.clone(), down.clone()]);
        h.mutes.insert(
            "OSDMAP_FLAGS".into(),
            Mute {
                until_ms: None,
                sticky: false,
            },
        );
        h.mutes.insert(
            "OSD_DOWN".into(),
            Mute {
                until_ms: None,
                sticky: true,
            },
        );
        h.mutes.insert(
            "MON_DOWN".into(),
            Mute {
                until_ms: Some(100),
                sticky: true,
            },
        );
        assert!(h.muted("MON_DOWN", 99) && !h.muted("MON_DOWN", 100));
        h.record(150, &[]);
        assert!(!h.mutes.contains_key("OSDMAP_FLAGS"), "went with its check");
        assert!(h.mutes.contains_key("OSD_DOWN"), "sticky");
        assert!(!h.mutes.contains_key("MON_DOWN"), "lapsed");
        assert!(h.muted("OSD_DOWN", 1_000_000));
    }

    #[test]
    fn the_history_is_bounded() {
        let mut h = HealthState::default();
        let c = check("X", "HEALTH_WARN", "x");
        for i in 0..HISTORY_MAX as u64 {
            h.record(2 * i, std::slice::from_ref(&c));
            h.record(2 * i + 1, &[]);
        }
        assert_eq!(h.history.len(), HISTORY_MAX);
        assert_eq!(
            h.history.back().map(|e| e.at_ms),
            Some(2 * HISTORY_MAX as u64 - 1)
        );
    }
}

//! Space health, as Ceph names it: `OSD_NEARFULL`, `OSD_BACKFILLFULL` and
//! `OSD_FULL` from the space each OSD last reported (its store's used
//! share past `mon_osd_nearfull_ratio`, `mon_osd_backfillfull_ratio`,
//! `mon_osd_full_ratio`; each OSD in the highest it passes), and
//! `POOL_NEARFULL` / `POOL_FULL` for the pools whose PGs are on such OSDs
//! (a pool at its quota is `POOL_FULL` too). Every check names the OSD or
//! pool and its use, and clears with the next report once space is freed.
//! Pure: a function of the replicated state and the ratios.

use std::collections::{BTreeMap, BTreeSet};

use shoal_maps::OsdMap;
use shoal_monclient::replies::HealthCheck;

use crate::state::MonState;

/// The ratios of used to total space past which an OSD is nearfull,
/// backfillfull and full (Ceph's defaults: 0.85, 0.90, 0.95).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FullRatios {
    /// `mon_osd_nearfull_ratio`.
    pub nearfull: f64,
    /// `mon_osd_backfillfull_ratio`.
    pub backfillfull: f64,
    /// `mon_osd_full_ratio`.
    pub full: f64,
}

impl Default for FullRatios {
    fn default() -> Self {
        FullRatios {
            nearfull: 0.85,
            backfillfull: 0.90,
            full: 0.95,
        }
    }
}

/// How full one OSD is, by the ratios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Nearfull,
    Backfillfull,
    Full,
}

impl FullRatios {
    fn level(&self, used: f64) -> Option<Level> {
        if used > self.full {
            Some(Level::Full)
        } else if used > self.backfillfull {
            Some(Level::Backfillfull)
        } else if used > self.nearfull {
            Some(Level::Nearfull)
        } else {
            None
        }
    }
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / f64::from(1 << 20))
}

/// The space checks of `state` under `map` (up OSDs that reported space).
pub fn space_health(state: &MonState, map: &OsdMap, ratios: &FullRatios) -> Vec<HealthCheck> {
    let mut osds: BTreeMap<i32, (Level, String)> = BTreeMap::new();
    for (id, s) in &state.osd_statfs {
        if s.total_bytes == 0 || !map.is_up(*id) {
            continue;
        }
        let used = s.used_bytes as f64 / s.total_bytes as f64;
        if let Some(level) = ratios.level(used) {
            let what = format!(
                "{:.1}% used ({} of {})",
                used * 100.0,
                mib(s.used_bytes),
                mib(s.total_bytes)
            );
            osds.insert(*id, (level, what));
        }
    }
    let mut checks = Vec::new();
    for (level, code, word, severity) in [
        (Level::Full, "OSD_FULL", "full", "HEALTH_ERR"),
        (
            Level::Backfillfull,
            "OSD_BACKFILLFULL",
            "backfillfull",
            "HEALTH_WARN",
        ),
        (Level::Nearfull, "OSD_NEARFULL", "nearfull", "HEALTH_WARN"),
    ] {
        let detail: Vec<String> = osds
            .iter()
            .filter(|(_, (l, _))| *l == level)
            .map(|(id, (_, what))| format!("osd.{id} is {word}: {what}"))
            .collect();
        if !detail.is_empty() {
            checks.push(HealthCheck {
                code: code.to_string(),
                severity: severity.to_string(),
                summary: format!("{} {word} osd(s)", detail.len()),
                detail,
            });
        }
    }
    checks.extend(pool_checks(state, map, &osds));
    checks
}

/// POOL_FULL (no space, or at its quota) and POOL_NEARFULL.
fn pool_checks(
    state: &MonState,
    map: &OsdMap,
    osds: &BTreeMap<i32, (Level, String)>,
) -> Vec<HealthCheck> {
    // The OSDs each pool's PGs are on, as their primaries last reported.
    let mut on: BTreeMap<u64, BTreeSet<i32>> = BTreeMap::new();
    for (pgid, e) in &state.pg_stats {
        let Some(pool) = pgid
            .split_once('.')
            .and_then(|(p, _)| p.parse::<u64>().ok())
        else {
            continue;
        };
        on.entry(pool)
            .or_default()
            .extend(e.report.acting.iter().chain(&e.report.up).copied());
    }
    let (mut full, mut near) = (Vec::new(), Vec::new());
    let mut full_pools = BTreeSet::new();
    for (id, p) in map.pools() {
        let worst = on
            .get(id)
            .into_iter()
            .flatten()
            .filter_map(|o| osds.get(o).map(|(l, _)| (*l, *o)))
            .max();
        match worst {
            Some((Level::Full, o)) => {
                full_pools.insert(*id);
                full.push(format!(
                    "pool '{}' is full (no space): osd.{o} is full",
                    p.name
                ));
            }
            Some((_, o)) => {
                let what = osds.get(&o).map_or("", |(_, w)| w.as_str());
                near.push(format!("pool '{}' is nearfull: osd.{o} {what}", p.name));
            }
            None => {}
        }
        if p.full_quota() {
            full_pools.insert(*id);
            full.push(format!(
                "pool '{}' is at its quota (max_bytes {}, max_objects {}; 0: none)",
                p.name, p.quota_max_bytes, p.quota_max_objects
            ));
        }
    }
    let mut checks = Vec::new();
    if !full.is_empty() {
        checks.push(HealthCheck::warn(
            "POOL_FULL",
            format!("{} pool(s) full", full_pools.len()),
            full,
        ));
    }
    if !near.is_empty() {
        checks.push(HealthCheck::warn(
            "POOL_NEARFULL",
            format!("{} pool(s) nearfull", near.len()),
            near,
        ));
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_osd_counts_in_the_highest_level_it_passes() {
        let r = FullRatios::default();
        assert_eq!(r.level(0.5), None);
        assert_eq!(r.level(0.85), None, "at the ratio is not past it");
        assert_eq!(r.level(0.86), Some(Level::Nearfull));
        assert_eq!(r.level(0.91), Some(Level::Backfillfull));
        assert_eq!(r.level(0.955), Some(Level::Full));
    }
}

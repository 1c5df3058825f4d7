//! PG statistics as OSDs report them: each OSD sends, for every PG it is
//! primary of, the PG's state, object count, bytes and log position, with
//! its store's space ([`PgStats`]). The monitors keep the newest report per
//! PG and the space per OSD in the replicated state; `pg dump`, `pg stat`
//! and `df` read them (views_pg.rs).
//!
//! A report never changes the OSD map. Reports carry the OSD-map epoch the
//! reporter had: an older report never replaces a newer one, so a former
//! primary that lags cannot overwrite what the new primary said.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use shoal_maps::{OsdMap, PgId};

use shoal_monclient::{ErrorCode, MonError};

pub use shoal_monclient::{OsdStatfs, PgStatReport};

/// The newest report of one PG, with who sent it and at which epoch.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PgStatEntry {
    /// What the primary reported.
    pub report: PgStatReport,
    /// The reporting OSD.
    pub reporter: i32,
    /// The OSD-map epoch of the reporter when it reported.
    pub epoch: u32,
}

/// A report from one OSD: its space and the PGs it is primary of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgStats {
    /// The reporting OSD.
    pub id: i32,
    /// Its OSD-map epoch.
    pub epoch: u32,
    /// Its store's space.
    pub statfs: OsdStatfs,
    /// The PGs it is primary of.
    pub pgs: Vec<PgStatReport>,
}

/// Most PGs one report may carry: more than any OSD can be primary of
/// (the largest pool has 65536 PGs), small enough to bound the state.
pub const REPORT_PGS_MAX: usize = 1 << 17;

fn invalid(msg: impl Into<String>) -> MonError {
    MonError::new(ErrorCode::InvalidArgument, msg)
}

/// The PG `pgid` names if it exists in `map` (its pool exists and its seed
/// is below the pool's `pg_num`).
fn live_pg(map: &OsdMap, pgid: &PgId) -> bool {
    map.pool(pgid.pool).is_some_and(|p| pgid.seed < p.pg_num)
}

/// Records `r` in `pg_stats` and `osd_statfs`, checked against the current
/// `map`. PGs the map no longer has (a pool just deleted) are ignored; a
/// PG already reported at a newer epoch keeps that report.
pub fn record(
    pg_stats: &mut BTreeMap<String, PgStatEntry>,
    osd_statfs: &mut BTreeMap<i32, OsdStatfs>,
    map: &OsdMap,
    r: &PgStats,
) -> Result<Value, MonError> {
    if !map.exists(r.id) {
        return Err(MonError::new(
            ErrorCode::NotFound,
            format!("osd.{} does not exist", r.id),
        ));
    }
    if r.epoch > map.epoch.0 {
        return Err(invalid(format!(
            "osd.{} reports epoch {} but the newest is {}",
            r.id, r.epoch, map.epoch.0
        )));
    }
    if r.pgs.len() > REPORT_PGS_MAX {
        return Err(invalid(format!(
            "osd.{} reports {} PGs (at most {REPORT_PGS_MAX})",
            r.id,
            r.pgs.len()
        )));
    }
    // Check every id before changing anything: a refused report changes nothing.
    let ids = r
        .pgs
        .iter()
        .map(|p| {
            p.pgid
                .parse::<PgId>()
                .map_err(|_| invalid(format!("bad pg id {:?}", p.pgid)))
        })
        .collect::<Result<Vec<PgId>, MonError>>()?;
    osd_statfs.insert(r.id, r.statfs.clone());
    let (mut accepted, mut ignored) = (0u64, 0u64);
    for (pgid, p) in ids.iter().zip(&r.pgs) {
        let key = pgid.to_string();
        let older = pg_stats.get(&key).is_some_and(|e| e.epoch > r.epoch);
        if !live_pg(map, pgid) || older {
            ignored += 1;
            continue;
        }
        let report = PgStatReport {
            pgid: key.clone(),
            ..p.clone()
        };
        let entry = PgStatEntry {
            report,
            reporter: r.id,
            epoch: r.epoch,
        };
        pg_stats.insert(key, entry);
        accepted += 1;
    }
    Ok(json!({ "osd": r.id, "accepted": accepted, "ignored": ignored }))
}

/// Drops what the map no longer has: PGs of deleted pools (or beyond
/// their pool's `pg_num`) and the space of removed OSDs. A PG reported by
/// an OSD since removed is kept (shown stale) until its new primary
/// reports, as Ceph keeps it.
pub fn prune(
    pg_stats: &mut BTreeMap<String, PgStatEntry>,
    osd_statfs: &mut BTreeMap<i32, OsdStatfs>,
    map: &OsdMap,
) {
    pg_stats.retain(|k, _| k.parse::<PgId>().is_ok_and(|id| live_pg(map, &id)));
    osd_statfs.retain(|id, _| map.exists(*id));
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::osdmap::{Boot, OsdChange, OsdMapState, PoolSpec, initial_crush};

    pub(crate) fn cluster() -> OsdMapState {
        let mut s = OsdMapState::default();
        s.bootstrap([7; 16], initial_crush("osd").unwrap(), 500, 100)
            .unwrap();
        let boots = (0..3)
            .map(|id| Boot {
                id,
                addr: format!("127.0.0.1:{}", 6800 + id),
                host: format!("h{id}"),
                weight: 0x10000,
                nonce: 0,
            })
            .collect();
        s.apply(&OsdChange::Batch {
            boots,
            down: vec![],
            out: vec![],
        })
        .unwrap();
        let spec = PoolSpec::Replicated {
            size: 3,
            min_size: 2,
        };
        for name in ["rbd", "data"] {
            s.apply(&OsdChange::PoolCreate {
                name: name.into(),
                pg_num: 8,
                spec: spec.clone(),
                autoscale_mode: None,
                set: Vec::new(),
            })
            .unwrap();
        }
        s
    }

    fn pg(pgid: &str, state: &str, objects: u64) -> PgStatReport {
        PgStatReport {
            pgid: pgid.into(),
            state: state.into(),
            objects,
            bytes: objects * 100,
            version: "3'7".into(),
            up: vec![0, 1, 2],
            acting: vec![0, 1, 2],
            log_size: 7,
            ..PgStatReport::default()
        }
    }

    fn report(id: i32, epoch: u32, pgs: Vec<PgStatReport>) -> PgStats {
        PgStats {
            id,
            epoch,
            statfs: OsdStatfs {
                total_bytes: 1000,
                used_bytes: 100 * (id as u64 + 1),
                available_bytes: 1000 - 100 * (id as u64 + 1),
            },
            pgs,
        }
    }

    #[test]
    fn newer_epoch_replaces_older_never_the_reverse() {
        let s = cluster();
        let map = s.current().unwrap();
        let e = map.epoch.0;
        let (mut pgs, mut fs) = (BTreeMap::new(), BTreeMap::new());
        let out = record(
            &mut pgs,
            &mut fs,
            map,
            &report(0, e - 1, vec![pg("1.0", "peering", 1)]),
        );
        assert_eq!(out.unwrap()["accepted"], 1);
        // Same PG from osd.1 at a newer epoch: replaces.
        let r = report(1, e, vec![pg("1.0", "active+clean", 2)]);
        record(&mut pgs, &mut fs, map, &r).unwrap();
        assert_eq!(pgs["1.0"].reporter, 1);
        assert_eq!(pgs["1.0"].report.state, "active+clean");
        // osd.0 again at its old epoch: ignored.
        let r = report(0, e - 1, vec![pg("1.0", "peering", 9)]);
        assert_eq!(record(&mut pgs, &mut fs, map, &r).unwrap()["ignored"], 1);
        assert_eq!(pgs["1.0"].report.objects, 2);
        // Equal epoch: the latest wins.
        let r = report(2, e, vec![pg("1.0", "active+degraded", 3)]);
        record(&mut pgs, &mut fs, map, &r).unwrap();
        assert_eq!((pgs["1.0"].reporter, pgs["1.0"].report.objects), (2, 3));
        assert_eq!(fs.len(), 3);
        assert_eq!(fs[&1].used_bytes, 200);
    }

    #[test]
    fn ids_are_canonical_and_bad_reports_change_nothing() {
        let s = cluster();
        let map = s.current().unwrap();
        let e = map.epoch.0;
        let (mut pgs, mut fs) = (BTreeMap::new(), BTreeMap::new());
        // "1.07" is 1.7; pool 9 and seed 8 of an 8-PG pool do not exist.
        let r = report(
            0,
            e,
            vec![
                pg("1.07", "active+clean", 1),
                pg("9.0", "x", 1),
                pg("2.8", "x", 1),
            ],
        );
        let out = record(&mut pgs, &mut fs, map, &r).unwrap();
        assert_eq!(
            (out["accepted"].as_u64(), out["ignored"].as_u64()),
            (Some(1), Some(2))
        );
        assert_eq!(pgs["1.7"].report.pgid, "1.7");
        let bad = [
            report(0, e, vec![pg("1.0", "x", 1), pg("nope", "x", 1)]),
            report(0, e + 1, vec![pg("1.1", "x", 1)]),
            report(7, e, vec![pg("1.1", "x", 1)]),
        ];
        for r in bad {
            assert!(record(&mut pgs, &mut fs, map, &r).is_err(), "{r:?}");
        }
        assert_eq!(pgs.keys().collect::<Vec<_>>(), ["1.7"]);
    }

    #[test]
    fn deleted_pools_and_removed_osds_are_dropped() {
        let mut s = cluster();
        let e = s.epoch();
        let (mut pgs, mut fs) = (BTreeMap::new(), BTreeMap::new());
        let map = s.current().unwrap();
        for (id, pgid) in [(0, "1.0"), (1, "2.1"), (2, "2.2")] {
            let r = report(id, e, vec![pg(pgid, "active+clean", 1)]);
            record(&mut pgs, &mut fs, map, &r).unwrap();
        }
        s.apply(&OsdChange::PoolRm { name: "rbd".into() }).unwrap();
        s.apply(&OsdChange::MarkDown { ids: vec![2] }).unwrap();
        s.apply(&OsdChange::OsdRm { ids: vec![2] }).unwrap();
        prune(&mut pgs, &mut fs, s.current().unwrap());
        // osd.2's report stays (shown stale) until a new primary reports.
        assert_eq!(pgs.keys().collect::<Vec<_>>(), ["2.1", "2.2"]);
        assert_eq!(fs.keys().copied().collect::<Vec<_>>(), [0, 1]);
    }
}

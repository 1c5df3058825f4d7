//! No acknowledged write is missing from its PG's authoritative log: the
//! newest log (by last_update) among every OSD's store — a crashed OSD's
//! as its restart will find it — reaches the write's version, and holds
//! the write itself while the version is within the log.

use std::collections::BTreeMap;

use shoal_maps::PgId;
use shoal_objectstore::ObjectStore;
use shoal_osd::ctx::AckedWrite;
use shoal_osd::log::PgLog;

use crate::invariants::load_log;

/// Checks every acknowledged write against the OSDs' stores as they are.
/// `pg_num(pool)` is the pool's (first, current) PG count: after a split
/// the write is in the log of the PG its object's hash folds to now (the
/// split gave the child the entry), or — the OSDs not split yet — under
/// an earlier count.
pub fn check(
    acks: &[AckedWrite],
    stores: &BTreeMap<i32, &dyn ObjectStore>,
    pg_num: impl Fn(u64) -> (u32, u32),
) -> Result<(), String> {
    let mut auth: BTreeMap<PgId, (i32, PgLog)> = BTreeMap::new();
    for a in acks {
        let a = &AckedWrite {
            pg: holder(a, stores, pg_num(a.pg.pool)),
            ..a.clone()
        };
        let (osd, log) = match auth.entry(a.pg) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let newest = stores
                    .iter()
                    .filter_map(|(id, s)| load_log(*s, a.pg).map(|l| (*id, l)))
                    .max_by_key(|(id, l)| (l.info.last_update, -id));
                match newest {
                    Some(n) => e.insert(n),
                    None => return Err(format!("pg {}: no OSD holds it any more", a.pg)),
                }
            }
        };
        if a.version > log.info.last_update {
            return Err(format!(
                "pg {}: {} (acknowledged by osd.{}) is newer than the authoritative log (osd.{}, up to {}); {}",
                a.pg,
                a.version,
                a.osd,
                osd,
                log.info.last_update,
                who_has(a, stores)
            ));
        }
        if a.version > log.info.log_tail
            && !log
                .entries()
                .any(|e| e.version == a.version && e.reqid.as_ref() == Some(&a.reqid))
        {
            return Err(format!(
                "pg {}: acknowledged {} ({:?}, by osd.{} in the interval from e{}) is missing from the authoritative log (osd.{}, {}..{}); {}",
                a.pg,
                a.version,
                a.reqid,
                a.osd,
                a.interval_start,
                osd,
                log.info.log_tail,
                log.info.last_update,
                who_has(a, stores)
            ));
        }
    }
    Ok(())
}

/// The PG holding `a`'s object now: under the largest count (halving from
/// the current one to the first) whose PG some store holds with a history
/// that reaches the write.
fn holder(
    a: &AckedWrite,
    stores: &BTreeMap<i32, &dyn ObjectStore>,
    (first, now): (u32, u32),
) -> PgId {
    let mut n = now;
    while n > first.max(1) {
        let pg = PgId {
            pool: a.pg.pool,
            seed: shoal_maps::stable_mod(a.hash, n, shoal_maps::pg_mask(n)),
        };
        // A member new to the child may hold it empty before the members
        // that split it have: the holder is the one whose history reaches
        // the write.
        if stores
            .values()
            .any(|s| load_log(*s, pg).is_some_and(|l| l.info.last_update >= a.version))
        {
            return pg;
        }
        n /= 2;
    }
    a.pg
}

/// What each store's log holds at the write's version.
fn who_has(a: &AckedWrite, stores: &BTreeMap<i32, &dyn ObjectStore>) -> String {
    let mut out = Vec::new();
    for (id, s) in stores {
        let Some(l) = load_log(*s, a.pg) else {
            continue;
        };
        let at = l.entries().find(|e| e.version == a.version);
        let what = match at {
            Some(e) if e.reqid.as_ref() == Some(&a.reqid) => "the write".to_string(),
            Some(e) => format!("{:?} by {:?}", e.key, e.reqid),
            None => "nothing".to_string(),
        };
        out.push(format!(
            "osd.{id} (up to {}, les {}) holds {what}",
            l.info.last_update, l.info.last_epoch_started
        ));
    }
    out.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_objectstore::{CrashStore, ObjectKey, Transaction};
    use shoal_osd::log::{LogEntry, LogLimits, LogOp, ReqId, Version};
    use shoal_osd::object::collection;

    const PG: PgId = PgId { pool: 1, seed: 0 };

    fn req(tid: u64) -> ReqId {
        ReqId {
            entity: "client.a".into(),
            inc: 1,
            tid,
        }
    }

    /// A store holding PG 1.0 with writes `tids` at versions 1'1, 1'2, ...
    fn store(tids: &[u64], entries_max: usize) -> CrashStore {
        let s = CrashStore::new(1 << 20);
        let coll = collection(PG);
        let mut log = PgLog::default();
        let mut t = Transaction::new();
        t.create_collection(coll);
        log.persist_info(coll, &mut t);
        for (i, tid) in tids.iter().enumerate() {
            let e = LogEntry {
                version: Version {
                    epoch: 1,
                    v: i as u64 + 1,
                },
                op: LogOp::Modify,
                key: ObjectKey::new(7, format!("o{tid}")),
                reqid: Some(req(*tid)),
                code: 0,
            };
            let limits = LogLimits {
                entries_max,
                dups_max: 100,
            };
            log.append(e, limits, coll, &mut t);
        }
        s.apply_transaction(t).unwrap();
        s
    }

    fn ack(v: u64, tid: u64) -> AckedWrite {
        AckedWrite {
            osd: 0,
            pg: PG,
            hash: 0,
            interval_start: 1,
            version: Version { epoch: 1, v },
            reqid: req(tid),
        }
    }

    fn check_(acks: &[AckedWrite], stores: &BTreeMap<i32, &dyn ObjectStore>) -> Result<(), String> {
        check(acks, stores, |_| (8, 8))
    }

    #[test]
    fn the_newest_log_must_hold_every_acknowledged_write() {
        let full = store(&[10, 11, 12], 100);
        let behind = store(&[10], 100);
        let both: BTreeMap<i32, &dyn ObjectStore> = BTreeMap::from([
            (0, &full as &dyn ObjectStore),
            (1, &behind as &dyn ObjectStore),
        ]);
        let acks = [ack(1, 10), ack(3, 12)];
        assert_eq!(check_(&acks, &both), Ok(()));
        // Only the member that is behind is left: 1'3 is lost.
        let one: BTreeMap<i32, &dyn ObjectStore> =
            BTreeMap::from([(1, &behind as &dyn ObjectStore)]);
        let e = check_(&acks, &one).unwrap_err();
        assert!(e.contains("newer than the authoritative log"), "{e}");
        // The version is there but another write holds it.
        let e = check_(&[ack(2, 99)], &both).unwrap_err();
        assert!(e.contains("missing from the authoritative log"), "{e}");
        // Trimmed entries count as held.
        let trimmed = store(&[10, 11, 12], 1);
        let t: BTreeMap<i32, &dyn ObjectStore> =
            BTreeMap::from([(0, &trimmed as &dyn ObjectStore)]);
        assert_eq!(check_(&acks, &t), Ok(()));
        assert!(check_(&acks, &BTreeMap::new()).is_err());
    }
}

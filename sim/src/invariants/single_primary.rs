//! At most one primary acknowledges writes for a PG in an interval, and it
//! is the acting primary of the map the interval began with; no two
//! acknowledged writes of a PG carry the same version (two primaries
//! handing out versions at once would).

use std::collections::BTreeMap;
use std::sync::PoisonError;

use shoal_maps::PgId;
use shoal_osd::ctx::AckedWrite;
use shoal_osd::log::{ReqId, Version};

use crate::world::MapLog;

/// Checks every acknowledged write so far.
pub fn check(acks: &[AckedWrite], maps: &MapLog) -> Result<(), String> {
    let mut primaries: BTreeMap<(PgId, u32), i32> = BTreeMap::new();
    let mut versions: BTreeMap<(PgId, Version), &ReqId> = BTreeMap::new();
    let maps = maps.lock().unwrap_or_else(PoisonError::into_inner);
    for a in acks {
        let p = *primaries.entry((a.pg, a.interval_start)).or_insert(a.osd);
        if p != a.osd {
            return Err(format!(
                "pg {}: osd.{p} and osd.{} both acknowledged writes in the interval from e{}",
                a.pg, a.osd, a.interval_start
            ));
        }
        let r = *versions.entry((a.pg, a.version)).or_insert(&a.reqid);
        if r != &a.reqid {
            return Err(format!(
                "pg {}: two writes acknowledged as {} ({r:?} and {:?})",
                a.pg, a.version, a.reqid
            ));
        }
        if let Some(map) = maps.get(&a.interval_start) {
            let m = map.pg_to_up_acting(a.pg).map_err(|e| e.to_string())?;
            if m.acting_primary != a.osd {
                return Err(format!(
                    "pg {}: osd.{} acknowledged {} in the interval from e{}, whose acting primary is osd.{}",
                    a.pg, a.osd, a.version, a.interval_start, m.acting_primary
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(osd: i32, interval_start: u32, v: u64, tid: u64) -> AckedWrite {
        AckedWrite {
            osd,
            pg: PgId { pool: 1, seed: 3 },
            hash: 3,
            interval_start,
            version: Version {
                epoch: interval_start,
                v,
            },
            reqid: ReqId {
                entity: "client.a".into(),
                inc: 1,
                tid,
            },
        }
    }

    #[test]
    fn two_primaries_in_an_interval_or_two_writes_at_a_version_fail() {
        let maps = MapLog::default();
        // A new interval may have a new primary.
        let fine = [ack(0, 5, 1, 1), ack(0, 5, 2, 2), ack(1, 9, 3, 3)];
        assert_eq!(check(&fine, &maps), Ok(()));
        let split = [ack(0, 5, 1, 1), ack(1, 5, 2, 2)];
        let e = check(&split, &maps).unwrap_err();
        assert!(e.contains("both acknowledged"), "{e}");
        let same_version = [ack(0, 5, 1, 1), ack(1, 9, 1, 2)];
        let mut other = same_version.clone();
        other[1].version = other[0].version;
        let e = check(&other, &maps).unwrap_err();
        assert!(e.contains("two writes acknowledged"), "{e}");
    }
}

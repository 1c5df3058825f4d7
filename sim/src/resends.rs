//! Resends: an op still unanswered when its PG starts a new interval (as
//! its client's map shows) is sent again after the change. A primary drops
//! the ops of an old interval, so an op left waiting on it would hang until
//! its timeout — as client writes once did through an OSD failure.

use std::sync::Arc;

use shoal_maps::{IntervalKey, OsdMap};

use crate::history::Op;
use crate::workload::{ClientLog, READ_ALL};

/// Checks every op of `history` against the maps its client received.
/// `logs[n]` is client `n`'s log; [`READ_ALL`]'s reads used client 0.
pub fn check(history: &[Op], logs: &[Arc<ClientLog>], pool: u64) -> Result<(), String> {
    let maps: Vec<Vec<(u64, Arc<OsdMap>)>> = logs.iter().map(|l| l.maps()).collect();
    for op in history {
        let n = if op.client == READ_ALL { 0 } else { op.client };
        let Some(maps) = maps.get(n) else { continue };
        if let Some(at_ms) = unresent_change(op, maps, pool) {
            return Err(format!(
                "client.{} op on {} (called at {} ms, sent at {:?} ms, ended at {} ms) was not \
                 sent again after its PG changed interval at {at_ms} ms",
                op.client, op.object, op.call_ms, op.sends_ms, op.end_ms
            ));
        }
    }
    Ok(())
}

/// The first interval change of `op`'s PG, among the `maps` its client
/// received (with when), that came while the op was out and was followed
/// by no send.
fn unresent_change(op: &Op, maps: &[(u64, Arc<OsdMap>)], pool: u64) -> Option<u64> {
    let first_send = *op.sends_ms.first()?;
    let key = |map: &OsdMap| -> Option<IntervalKey> {
        let pg = map.pool(pool)?.object_pg(&op.object, "");
        map.pg_interval_key(pg)
    };
    let mut before = None;
    for (at_ms, map) in maps {
        let now = key(map);
        let changed = before.as_ref().is_some_and(|b| *b != now);
        before = Some(now);
        if changed
            && *at_ms >= first_send
            && *at_ms < op.end_ms
            && !op.sends_ms.iter().any(|s| s >= at_ms)
        {
            return Some(*at_ms);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Kind, Outcome};
    use shoal_crush::{BuildSpec, build_map};
    use shoal_maps::{Incremental, Pool};

    fn cluster() -> OsdMap {
        let crush = build_map(&BuildSpec::hosts(5, 1, None)).unwrap();
        let mut map = OsdMap::new([1; 16], 0, crush).unwrap();
        let mut inc = Incremental::next(&map);
        inc.new_max_osd = Some(5);
        for o in 0..5 {
            inc.new_osds.insert(o);
            inc.new_up.insert(o, format!("127.0.0.1:{}", 6800 + o));
            inc.new_weight.insert(o, shoal_maps::WEIGHT_IN);
        }
        inc.new_pools
            .insert(1, Pool::replicated(1, "rbd", 3, 2, 8, 0));
        map.apply(&inc).unwrap();
        map
    }

    fn op(sends_ms: Vec<u64>, end_ms: u64) -> Op {
        Op {
            client: 0,
            object: "o".into(),
            kind: Kind::Read,
            call_ms: 0,
            end_ms,
            sends_ms,
            outcome: Outcome::Failed("timed out".into()),
        }
    }

    #[test]
    fn an_op_left_waiting_across_an_interval_change_is_flagged() {
        let first = Arc::new(cluster());
        let pg = first.pool(1).unwrap().object_pg("o", "");
        let acting = first.pg_to_up_acting(pg).unwrap().acting;
        let mut next = (*first).clone();
        let mut inc = Incremental::next(&next);
        inc.new_down.insert(acting[1]);
        next.apply(&inc).unwrap();
        let maps = vec![(0, first), (500, Arc::new(next))];
        // Sent once before the change, never again: flagged.
        assert_eq!(unresent_change(&op(vec![10], 15_000), &maps, 1), Some(500));
        // Sent again when the change came: fine.
        assert_eq!(unresent_change(&op(vec![10, 500], 900), &maps, 1), None);
        // Answered before the change: fine.
        assert_eq!(unresent_change(&op(vec![10], 400), &maps, 1), None);
    }

    #[test]
    fn a_map_that_leaves_the_pg_alone_needs_no_resend() {
        let first = Arc::new(cluster());
        let mut next = (*first).clone();
        next.apply(&Incremental::next(&next)).unwrap();
        let maps = vec![(0, first), (500, Arc::new(next))];
        assert_eq!(unresent_change(&op(vec![10], 15_000), &maps, 1), None);
    }
}

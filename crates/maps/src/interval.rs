//! A PG's intervals: the runs of consecutive map epochs in which its up set,
//! acting set, primary and pool size stay the same. Peering must hear from
//! a member of every past interval that may have taken writes — one whose
//! acting set reached `min_size` and whose primary's `up_thru` (in the
//! interval's last map) reached the interval's first epoch, as a primary
//! only goes active once the monitors have recorded that (Ceph's
//! `maybe_went_rw`).
//!
//! [`IntervalHistory`] is fed the maps of consecutive epochs and cuts them
//! into intervals; it is pure, so the monitors (who keep the map history)
//! compute a PG's past intervals on an OSD's request.

use crate::{ITEM_NONE, OsdMap, PgId};

/// One interval of a PG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastInterval {
    /// Its first epoch.
    pub first: u32,
    /// Its last epoch.
    pub last: u32,
    /// The up set.
    pub up: Vec<i32>,
    /// The acting set.
    pub acting: Vec<i32>,
    /// The acting primary (-1 if none).
    pub primary: i32,
    /// Whether the PG may have gone active (and taken writes) in it.
    pub maybe_went_rw: bool,
}

/// What stays equal within a PG's interval: a map that changes any of it
/// starts a new interval, in which the PG peers again and drops the ops it
/// had in flight. OSDs and clients decide by this one definition, so a
/// client resends exactly when a primary may have dropped its op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntervalKey {
    /// The up set.
    pub up: Vec<i32>,
    /// The acting set.
    pub acting: Vec<i32>,
    /// The acting primary (-1 if none).
    pub primary: i32,
    /// The pool's size.
    pub size: u32,
    /// The pool's min_size.
    pub min_size: u32,
}

impl OsdMap {
    /// `pg`'s interval key in this map; `None` when its pool is gone or it
    /// does not map.
    pub fn pg_interval_key(&self, pg: PgId) -> Option<IntervalKey> {
        let pool = self.pool(pg.pool)?;
        let m = self.pg_to_up_acting(pg).ok()?;
        Some(IntervalKey {
            up: m.up,
            acting: m.acting,
            primary: m.acting_primary,
            size: pool.size,
            min_size: pool.min_size,
        })
    }
}

#[derive(Debug)]
struct Open {
    key: IntervalKey,
    /// The pool's `pg_num` (a split starts an interval).
    pg_num: u32,
    first: u32,
    last: u32,
    /// The primary's `up_thru` in the newest map of the interval.
    primary_up_thru: u32,
}

impl Open {
    fn close(self) -> PastInterval {
        let k = self.key;
        let maybe_went_rw = k.primary >= 0
            && k.acting
                .iter()
                .filter(|o| **o >= 0 && **o != ITEM_NONE)
                .count()
                >= k.min_size.max(1) as usize
            && self.primary_up_thru >= self.first;
        PastInterval {
            first: self.first,
            last: self.last,
            up: k.up,
            acting: k.acting,
            primary: k.primary,
            maybe_went_rw,
        }
    }
}

/// Cuts a run of consecutive maps into a PG's intervals.
#[derive(Debug)]
pub struct IntervalHistory {
    pg: PgId,
    open: Option<Open>,
    closed: Vec<PastInterval>,
}

impl IntervalHistory {
    /// An empty history of `pg`.
    pub fn new(pg: PgId) -> IntervalHistory {
        IntervalHistory {
            pg,
            open: None,
            closed: Vec::new(),
        }
    }

    /// Adds the map of the next epoch (epochs must be consecutive).
    pub fn push(&mut self, map: &OsdMap) {
        let epoch = map.epoch.0;
        // Before a split made it, a PG's history is its parent's (Ceph
        // gives the child the parent's past intervals): the PG its seed
        // folds to under the count of that map.
        let pg_num = map.pool(self.pg.pool).map_or(0, |p| p.pg_num);
        let pg = match pg_num {
            n if n > 0 && self.pg.seed >= n => PgId {
                seed: crate::stable_mod(self.pg.seed, n, crate::pg_mask(n)),
                ..self.pg
            },
            _ => self.pg,
        };
        let key = map.pg_interval_key(pg);
        match (&mut self.open, key) {
            (Some(open), Some(key)) if open.key == key && open.pg_num == pg_num => {
                open.last = epoch;
                open.primary_up_thru = map.up_thru(key.primary);
            }
            (open, key) => {
                if let Some(o) = open.take() {
                    self.closed.push(o.close());
                }
                *open = key.map(|key| Open {
                    primary_up_thru: map.up_thru(key.primary),
                    pg_num,
                    key,
                    first: epoch,
                    last: epoch,
                });
            }
        }
    }

    /// Every interval seen, oldest first (the last one still open, ending
    /// at the newest map pushed).
    pub fn finish(mut self) -> Vec<PastInterval> {
        if let Some(o) = self.open.take() {
            self.closed.push(o.close());
        }
        self.closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Incremental, Pool};
    use shoal_crush::{BuildSpec, build_map};

    fn cluster() -> OsdMap {
        let crush = build_map(&BuildSpec::hosts(4, 1, None)).unwrap();
        let mut map = OsdMap::new([1; 16], 0, crush).unwrap();
        let mut inc = Incremental::next(&map);
        inc.new_max_osd = Some(4);
        for o in 0..4 {
            inc.new_osds.insert(o);
            inc.new_up.insert(o, format!("127.0.0.1:{}", 6800 + o));
            inc.new_weight.insert(o, crate::WEIGHT_IN);
        }
        inc.new_pools
            .insert(1, Pool::replicated(1, "rbd", 3, 2, 1, 0));
        map.apply(&inc).unwrap();
        map
    }

    fn step(map: &mut OsdMap, f: impl FnOnce(&mut Incremental)) {
        let mut inc = Incremental::next(map);
        f(&mut inc);
        map.apply(&inc).unwrap();
    }

    #[test]
    fn intervals_cut_where_the_acting_set_changes_and_rw_needs_up_thru() {
        let pg = PgId { pool: 1, seed: 0 };
        let mut map = cluster();
        let mut h = IntervalHistory::new(pg);
        h.push(&map); // e1
        let first = map.pg_to_up_acting(pg).unwrap();
        let p = first.acting_primary;
        step(&mut map, |i| {
            i.new_up_thru.insert(p, 1);
        });
        h.push(&map); // e2: same interval, primary's up_thru reaches it
        let victim = first.acting[1];
        step(&mut map, |i| {
            i.new_down.insert(victim);
        });
        h.push(&map); // e3: new interval, no up_thru yet
        step(&mut map, |_| {});
        h.push(&map); // e4
        let iv = h.finish();
        assert_eq!(iv.len(), 2, "{iv:?}");
        assert_eq!((iv[0].first, iv[0].last), (1, 2));
        assert!(iv[0].maybe_went_rw);
        assert_eq!(iv[0].acting, first.acting);
        assert_eq!((iv[1].first, iv[1].last), (3, 4));
        assert!(!iv[1].acting.contains(&victim));
        // Its primary never had its up_thru recorded: no writes possible.
        assert!(!iv[1].maybe_went_rw);
    }

    /// Before the split that made it, a child's intervals are its
    /// parent's (peering must hear from the members that took its
    /// objects' writes); the split starts one.
    #[test]
    fn a_childs_history_before_its_split_is_its_parents() {
        let child = PgId { pool: 1, seed: 1 };
        let mut map = cluster();
        let parent = map.pg_to_up_acting(PgId { pool: 1, seed: 0 }).unwrap();
        step(&mut map, |i| {
            i.new_up_thru.insert(parent.acting_primary, 2);
        });
        let mut h = IntervalHistory::new(child);
        h.push(&map); // e2: the parent's
        let mut pool = map.pool(1).unwrap().clone();
        pool.pg_num = 2;
        step(&mut map, |i| {
            i.new_pools.insert(1, pool);
        });
        h.push(&map); // e3: split (pgp_num 1: the child sits where the parent does)
        step(&mut map, |_| {});
        h.push(&map); // e4
        let iv = h.finish();
        assert_eq!(iv.len(), 2, "{iv:?}");
        assert_eq!((iv[0].first, iv[0].last), (2, 2));
        assert_eq!(iv[0].acting, parent.acting);
        assert!(iv[0].maybe_went_rw);
        assert_eq!((iv[1].first, iv[1].last), (3, 4));
        assert_eq!(iv[1].acting, parent.acting);
    }

    #[test]
    fn an_interval_below_min_size_took_no_writes() {
        let pg = PgId { pool: 1, seed: 0 };
        let mut map = cluster();
        let m = map.pg_to_up_acting(pg).unwrap();
        step(&mut map, |i| {
            i.new_down.insert(m.acting[1]);
            i.new_down.insert(m.acting[2]);
            i.new_up_thru.insert(m.acting_primary, 2);
        });
        let mut h = IntervalHistory::new(pg);
        h.push(&map);
        let iv = h.finish();
        assert_eq!(iv[0].acting.len(), 1, "{iv:?}");
        assert!(!iv[0].maybe_went_rw);
    }
}

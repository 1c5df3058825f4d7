//! Object -> PG -> raw -> up -> acting -> primary, as Ceph's `OSDMap` does it.

use shoal_crush::{ITEM_NONE, Workspace};

use crate::error::{MapError, Result};
use crate::osdmap::{OsdMap, PRIMARY_AFFINITY_DEFAULT, WEIGHT_OUT};
use crate::pg::PgId;
use crate::pool::Pool;

/// Where one PG lives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PgMapping {
    /// CRUSH's answer after removing OSDs that do not exist.
    pub raw: Vec<i32>,
    /// Raw set with upmaps applied and down OSDs removed (replicated) or
    /// replaced by [`ITEM_NONE`] (erasure coded).
    pub up: Vec<i32>,
    /// Primary of the up set, -1 if none.
    pub up_primary: i32,
    /// The set that serves I/O: `pg_temp` if set, else `up`.
    pub acting: Vec<i32>,
    /// Primary of the acting set, -1 if none.
    pub acting_primary: i32,
}

fn pick_primary(osds: &[i32]) -> i32 {
    osds.iter().copied().find(|o| *o != ITEM_NONE).unwrap_or(-1)
}

impl OsdMap {
    /// The PG of object `name` (in `namespace`, "" for none) in pool `pool`.
    pub fn object_to_pg(&self, pool: u64, name: &str, namespace: &str) -> Result<PgId> {
        let p = self.pool(pool).ok_or(MapError::NoSuchPool(pool))?;
        Ok(p.object_pg(name, namespace))
    }

    /// CRUSH's answer for a PG minus nonexistent OSDs (`_pg_to_raw_osds`).
    pub fn pg_to_raw(&self, pg: PgId) -> Result<Vec<i32>> {
        let pool = self.pool(pg.pool).ok_or(MapError::NoSuchPool(pg.pool))?;
        Ok(self.raw_osds(pool, pg, &self.crush_weights(), &mut Workspace::default()))
    }

    fn raw_osds(&self, pool: &Pool, pg: PgId, weights: &[u32], ws: &mut Workspace) -> Vec<i32> {
        let mut raw = Vec::with_capacity(pool.size as usize);
        let pps = pool.pps(pg.seed);
        self.crush.do_rule_with(
            ws,
            pool.crush_rule,
            pps,
            pool.size as usize,
            weights,
            &mut raw,
        );
        if pool.can_shift_osds() {
            raw.retain(|o| self.exists(*o));
        } else {
            for o in &mut raw {
                if !self.exists(*o) {
                    *o = ITEM_NONE;
                }
            }
        }
        raw
    }

    /// Up and acting sets and their primaries (`pg_to_up_acting_osds`).
    pub fn pg_to_up_acting(&self, pg: PgId) -> Result<PgMapping> {
        let weights = self.crush_weights();
        self.pg_to_up_acting_with(pg, &weights, &mut Workspace::default())
    }

    /// [`OsdMap::pg_to_up_acting`] with a precomputed [`OsdMap::crush_weights`]
    /// vector and a reusable workspace, for mapping many PGs.
    pub fn pg_to_up_acting_with(
        &self,
        pg: PgId,
        weights: &[u32],
        ws: &mut Workspace,
    ) -> Result<PgMapping> {
        let pool = self.pool(pg.pool).ok_or(MapError::NoSuchPool(pg.pool))?;
        if pg.seed >= pool.pg_num {
            return Ok(PgMapping {
                up_primary: -1,
                acting_primary: -1,
                ..PgMapping::default()
            });
        }
        let raw = self.raw_osds(pool, pg, weights, ws);
        let mut upmapped = raw.clone();
        self.apply_upmap(pg, &mut upmapped);
        let mut up: Vec<i32> = if pool.can_shift_osds() {
            upmapped
                .iter()
                .copied()
                .filter(|o| self.is_up(*o))
                .collect()
        } else {
            upmapped
                .iter()
                .map(|o| if self.is_up(*o) { *o } else { ITEM_NONE })
                .collect()
        };
        let mut up_primary = pick_primary(&up);
        self.apply_primary_affinity(pool, pool.pps(pg.seed), &mut up, &mut up_primary);
        let (temp, temp_primary) = self.temp_osds(pool, pg);
        let (acting, acting_primary) = if temp.is_empty() {
            let p = if temp_primary == -1 {
                up_primary
            } else {
                temp_primary
            };
            (up.clone(), p)
        } else {
            (temp, temp_primary)
        };
        Ok(PgMapping {
            raw,
            up,
            up_primary,
            acting,
            acting_primary,
        })
    }

    /// `pg_upmap_items`: replace `from` by `to` unless `to` is already there
    /// or is marked out.
    fn apply_upmap(&self, pg: PgId, raw: &mut [i32]) {
        let Some(items) = self.pg_upmap_items.get(&pg) else {
            return;
        };
        for &(from, to) in items {
            let target_out =
                to != ITEM_NONE && self.osd(to).is_some_and(|o| o.weight == WEIGHT_OUT);
            let mut pos = None;
            let mut present = false;
            for (i, &o) in raw.iter().enumerate() {
                if o == to {
                    present = true;
                    break;
                }
                if o == from && pos.is_none() && !target_out {
                    pos = Some(i);
                }
            }
            if let (false, Some(i)) = (present, pos) {
                raw[i] = to;
            }
        }
    }

    /// Primary affinity: an OSD with affinity a < 1 declines to be primary
    /// for a hashed fraction 1 - a of its PGs.
    fn apply_primary_affinity(&self, pool: &Pool, seed: u32, osds: &mut [i32], primary: &mut i32) {
        let affinity = |o: i32| {
            self.osd(o)
                .map_or(PRIMARY_AFFINITY_DEFAULT, |i| i.primary_affinity)
        };
        if !osds
            .iter()
            .any(|o| *o != ITEM_NONE && affinity(*o) != PRIMARY_AFFINITY_DEFAULT)
        {
            return;
        }
        let mut pos: Option<usize> = None;
        for (i, &o) in osds.iter().enumerate() {
            if o == ITEM_NONE {
                continue;
            }
            let a = affinity(o);
            if a < PRIMARY_AFFINITY_DEFAULT
                && (shoal_crush::hash::hash32_2(seed, o as u32) >> 16) >= a
            {
                pos.get_or_insert(i);
            } else {
                pos = Some(i);
                break;
            }
        }
        let Some(pos) = pos else { return };
        *primary = osds[pos];
        if pool.can_shift_osds() && pos > 0 {
            osds[..=pos].rotate_right(1);
        }
    }

    /// `pg_temp` (minus down OSDs) and `primary_temp` for a PG.
    fn temp_osds(&self, pool: &Pool, pg: PgId) -> (Vec<i32>, i32) {
        let mut temp = Vec::new();
        if let Some(t) = self.pg_temp.get(&pg) {
            for &o in t {
                if self.is_up(o) {
                    temp.push(o);
                } else if !pool.can_shift_osds() {
                    temp.push(ITEM_NONE);
                }
            }
        }
        let primary = match self.primary_temp.get(&pg) {
            Some(p) => *p,
            None => pick_primary(&temp),
        };
        (temp, primary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incremental::Incremental;
    use crate::pool::Pool;
    use shoal_crush::{BuildSpec, build_map};

    /// 4 hosts x 3 OSDs, all up and in, a replicated pool 1 and an EC pool 2.
    fn cluster() -> OsdMap {
        let crush = build_map(&BuildSpec::hosts(4, 3, None)).expect("crush");
        let mut map = OsdMap::new([7; 16], 12, crush).expect("map");
        let mut inc = Incremental::next(&map);
        for o in 0..12 {
            inc.new_osds.insert(o);
            inc.new_up.insert(o, format!("10.0.0.{o}:6800"));
            inc.new_weight.insert(o, crate::WEIGHT_IN);
        }
        inc.new_pools
            .insert(1, Pool::replicated(1, "rep", 3, 2, 64, 0));
        inc.new_pools.insert(2, Pool::erasure(2, "ec", 2, 1, 64, 0));
        map.apply(&inc).expect("apply");
        map
    }

    fn pg(pool: u64, seed: u32) -> PgId {
        PgId { pool, seed }
    }

    #[test]
    fn down_osd_leaves_replicated_up_set_and_holes_ec() {
        let mut map = cluster();
        let before = map.pg_to_up_acting(pg(1, 3)).expect("m");
        let victim = before.up[0];
        let ec_before = map.pg_to_up_acting(pg(2, 3)).expect("m");
        let mut inc = Incremental::next(&map);
        inc.new_down.insert(victim);
        map.apply(&inc).expect("apply");
        let after = map.pg_to_up_acting(pg(1, 3)).expect("m");
        assert_eq!(after.up, before.up[1..].to_vec());
        assert_eq!(after.up_primary, before.up[1]);
        let ec_after = map.pg_to_up_acting(pg(2, 3)).expect("m");
        for (i, o) in ec_before.up.iter().enumerate() {
            let want = if *o == victim { ITEM_NONE } else { *o };
            assert_eq!(ec_after.up[i], want);
        }
    }

    #[test]
    fn pg_temp_overrides_acting_and_primary_temp_primary() {
        let mut map = cluster();
        let up = map.pg_to_up_acting(pg(1, 5)).expect("m").up;
        let mut inc = Incremental::next(&map);
        inc.new_pg_temp.insert(pg(1, 5), vec![11, 10, 9]);
        inc.new_primary_temp.insert(pg(1, 5), 10);
        map.apply(&inc).expect("apply");
        let m = map.pg_to_up_acting(pg(1, 5)).expect("m");
        assert_eq!(m.up, up);
        assert_eq!(m.acting, vec![11, 10, 9]);
        assert_eq!(m.acting_primary, 10);
        let mut inc = Incremental::next(&map);
        inc.new_pg_temp.insert(pg(1, 5), vec![]);
        inc.new_primary_temp.insert(pg(1, 5), -1);
        map.apply(&inc).expect("apply");
        assert_eq!(map.pg_to_up_acting(pg(1, 5)).expect("m").acting, up);
    }

    #[test]
    fn upmap_items_replace_unless_target_out_or_present() {
        let mut map = cluster();
        let up = map.pg_to_up_acting(pg(1, 9)).expect("m").up;
        let spare = (0..12).find(|o| !up.contains(o)).expect("spare");
        let mut inc = Incremental::next(&map);
        inc.new_pg_upmap_items
            .insert(pg(1, 9), vec![(up[1], spare), (up[2], up[0])]);
        map.apply(&inc).expect("apply");
        let m = map.pg_to_up_acting(pg(1, 9)).expect("m");
        assert_eq!(m.up, vec![up[0], spare, up[2]]);
        let mut inc = Incremental::next(&map);
        inc.new_weight.insert(spare, WEIGHT_OUT);
        map.apply(&inc).expect("apply");
        assert_eq!(map.pg_to_up_acting(pg(1, 9)).expect("m").up[1], up[1]);
    }

    #[test]
    fn zero_primary_affinity_never_primary_when_alternatives_exist() {
        let mut map = cluster();
        let mut inc = Incremental::next(&map);
        inc.new_primary_affinity.insert(0, 0);
        map.apply(&inc).expect("apply");
        for seed in 0..64 {
            let m = map.pg_to_up_acting(pg(1, seed)).expect("m");
            assert_ne!(m.up_primary, 0);
            assert_eq!(m.up[0], m.up_primary);
        }
    }

    #[test]
    fn wrong_epoch_and_fsid_are_rejected() {
        let mut map = cluster();
        let mut inc = Incremental::next(&map);
        inc.epoch = shoal_types::Epoch(map.epoch.0 + 2);
        assert!(map.apply(&inc).is_err());
        let mut inc = Incremental::next(&map);
        inc.fsid = [0; 16];
        assert!(map.apply(&inc).is_err());
        let mut inc = Incremental::next(&map);
        inc.new_weight.insert(99, 0);
        let before = map.clone();
        assert!(map.apply(&inc).is_err());
        assert_eq!(map, before);
    }
}

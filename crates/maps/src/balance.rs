//! The upmap balancer's planner: from an OSD map, the `pg_upmap_items`
//! changes that bring each OSD's count of PG copies (over the pools asked
//! for) within a given deviation of its share (its CRUSH weight times its
//! reweight, over the sum of those), as Ceph's `calc_pg_upmaps` does.
//! Each change moves one copy of one PG from the fullest OSD that can give
//! to the emptiest that can take it, keeping the PG's OSDs in distinct
//! failure domains of its rule (hosts, racks, ...), never two copies on
//! one OSD, and never an OSD that is down or out. A pure function of the
//! map: the caller proposes what it returns as one incremental.

use std::collections::{BTreeMap, BTreeSet};

use shoal_crush::{ITEM_NONE, Step};

use crate::error::Result;
use crate::osdmap::OsdMap;
use crate::pg::PgId;

/// The planner's answer: entries to set (the whole new list of a PG's
/// pairs) and entries to remove.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpmapPlan {
    /// PGs whose `pg_upmap_items` become these pairs.
    pub set: BTreeMap<PgId, Vec<(i32, i32)>>,
    /// PGs whose `pg_upmap_items` go.
    pub removed: BTreeSet<PgId>,
}

impl UpmapPlan {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.removed.is_empty()
    }
}

/// Each OSD's count of PG copies over `pools`, its target and the spread,
/// as `balancer eval` reports them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spread {
    /// Copies per OSD that may hold data (up and in).
    pub count: BTreeMap<i32, u64>,
    /// Its share of the copies.
    pub target: BTreeMap<i32, f64>,
}

impl Spread {
    /// The largest |count - target| over the OSDs.
    pub fn max_deviation(&self) -> f64 {
        self.count
            .iter()
            .map(|(o, c)| (*c as f64 - self.target.get(o).copied().unwrap_or(0.0)).abs())
            .fold(0.0, f64::max)
    }
}

/// The parent of every CRUSH item (shadow buckets left out).
fn parents(map: &OsdMap) -> BTreeMap<i32, (i32, u32)> {
    let mut out = BTreeMap::new();
    for b in map.crush().buckets().filter(|b| !b.is_shadow()) {
        for (i, item) in b.items.iter().enumerate() {
            out.insert(*item, (b.id, b.weights.get(i).copied().unwrap_or(0)));
        }
    }
    out
}

/// The failure domain type of a pool's rule (0: the OSD itself).
fn domain_type(map: &OsdMap, rule: u32) -> i32 {
    let Some(rule) = map.crush().rule(rule) else {
        return 0;
    };
    rule.steps
        .iter()
        .filter_map(|s| match s {
            Step::ChooseLeafFirstN { type_id, .. } | Step::ChooseLeafIndep { type_id, .. } => {
                Some(*type_id)
            }
            Step::ChooseFirstN { type_id, .. } | Step::ChooseIndep { type_id, .. } => {
                Some(*type_id)
            }
            _ => None,
        })
        .next()
        .unwrap_or(0)
}

/// The ancestor of `osd` of CRUSH type `ty` (the OSD itself for type 0;
/// none when it has no such ancestor).
fn domain(map: &OsdMap, parents: &BTreeMap<i32, (i32, u32)>, osd: i32, ty: i32) -> Option<i32> {
    if ty == 0 {
        return Some(osd);
    }
    let mut at = osd;
    for _ in 0..64 {
        let (p, _) = *parents.get(&at)?;
        if map.crush().bucket(p).is_some_and(|b| b.type_id == ty) {
            return Some(p);
        }
        at = p;
    }
    None
}

/// The copies of `pools`' PGs on each OSD that may hold data, and each
/// such OSD's share of them.
pub fn spread(map: &OsdMap, pools: &[u64]) -> Result<Spread> {
    let (_, count, target) = state(map, pools)?;
    Ok(Spread { count, target })
}

type Sets = BTreeMap<PgId, (Vec<i32>, i32)>;
type Counts = BTreeMap<i32, u64>;
type Targets = BTreeMap<i32, f64>;

/// Every PG's up set (and its pool's failure domain type), the copies per
/// eligible OSD and each one's target.
fn state(map: &OsdMap, pools: &[u64]) -> Result<(Sets, Counts, Targets)> {
    let parents = parents(map);
    let weights = map.crush_weights();
    let eligible: BTreeMap<i32, f64> = map
        .osds()
        .filter(|(id, o)| o.exists && map.is_up(*id) && o.weight > 0)
        .filter_map(|(id, _)| {
            let (_, crush) = *parents.get(&id)?;
            let reweight = f64::from(weights.get(id as usize).copied().unwrap_or(0)) / 65536.0;
            let w = f64::from(crush) / 65536.0 * reweight;
            (w > 0.0).then_some((id, w))
        })
        .collect();
    let mut sets = Sets::new();
    let mut count: BTreeMap<i32, u64> = eligible.keys().map(|o| (*o, 0)).collect();
    for pool in pools {
        let Some(p) = map.pool(*pool) else {
            continue;
        };
        let ty = domain_type(map, p.crush_rule);
        for seed in 0..p.pg_num {
            let pg = PgId { pool: *pool, seed };
            let up = map.pg_to_up_acting(pg)?.up;
            for o in up.iter().filter(|o| **o != ITEM_NONE) {
                if let Some(c) = count.get_mut(o) {
                    *c += 1;
                }
            }
            sets.insert(pg, (up, ty));
        }
    }
    let total: u64 = count.values().sum();
    let sum_w: f64 = eligible.values().sum();
    let target = eligible
        .iter()
        .map(|(o, w)| (*o, total as f64 * w / sum_w))
        .collect();
    Ok((sets, count, target))
}

/// Up to `max_changes` moves that bring every eligible OSD's copies of
/// `pools`' PGs within `max_deviation` of its target (or as near as the
/// failure domains allow), as changes to `pg_upmap_items`.
pub fn plan_upmaps(
    map: &OsdMap,
    pools: &[u64],
    max_deviation: f64,
    max_changes: usize,
) -> Result<UpmapPlan> {
    let parents = parents(map);
    let (mut sets, mut count, target) = state(map, pools)?;
    let mut items: BTreeMap<PgId, Vec<(i32, i32)>> = map
        .pg_upmap_items()
        .iter()
        .filter(|(pg, _)| pools.contains(&pg.pool))
        .map(|(pg, v)| (*pg, v.clone()))
        .collect();
    let mut changed = BTreeSet::new();
    let dev = |count: &BTreeMap<i32, u64>, o: i32| {
        count.get(&o).copied().unwrap_or(0) as f64 - target.get(&o).copied().unwrap_or(0.0)
    };
    for _ in 0..max_changes {
        let mut by_dev: Vec<i32> = count.keys().copied().collect();
        by_dev.sort_by(|a, b| dev(&count, *b).total_cmp(&dev(&count, *a)));
        let worst = by_dev
            .iter()
            .map(|o| dev(&count, *o).abs())
            .fold(0.0, f64::max);
        if worst <= max_deviation {
            break;
        }
        // The fullest that can give to the emptiest that can take.
        let mut moved = None;
        'search: for from in by_dev.iter().copied() {
            if dev(&count, from) <= 0.0 {
                break;
            }
            for to in by_dev.iter().rev().copied() {
                // A move must narrow the gap between the two.
                if dev(&count, to) >= dev(&count, from) - 1.0 || to == from {
                    break;
                }
                if dev(&count, from) <= max_deviation && dev(&count, to) >= -max_deviation {
                    continue;
                }
                for (pg, (up, ty)) in &sets {
                    let Some(slot) = up.iter().position(|o| *o == from) else {
                        continue;
                    };
                    if up.contains(&to) {
                        continue;
                    }
                    let Some(to_domain) = domain(map, &parents, to, *ty) else {
                        continue;
                    };
                    let clash = up.iter().enumerate().any(|(i, o)| {
                        i != slot
                            && *o != ITEM_NONE
                            && domain(map, &parents, *o, *ty) == Some(to_domain)
                    });
                    if !clash {
                        moved = Some((*pg, slot, from, to));
                        break 'search;
                    }
                }
            }
        }
        let Some((pg, slot, from, to)) = moved else {
            break;
        };
        // The PG's pairs: one that put `from` here now puts `to` (or
        // goes, if `to` is where CRUSH put it); else a new pair.
        let pairs = items.entry(pg).or_default();
        match pairs.iter().position(|(_, t)| *t == from) {
            Some(i) if pairs[i].0 == to => {
                pairs.remove(i);
            }
            Some(i) => pairs[i].1 = to,
            None => pairs.push((from, to)),
        }
        changed.insert(pg);
        if let Some((up, _)) = sets.get_mut(&pg) {
            up[slot] = to;
        }
        if let Some(c) = count.get_mut(&from) {
            *c -= 1;
        }
        *count.entry(to).or_insert(0) += 1;
    }
    let mut plan = UpmapPlan::default();
    for pg in changed {
        match items.get(&pg) {
            Some(pairs) if !pairs.is_empty() => {
                if map.pg_upmap_items().get(&pg) != Some(pairs) {
                    plan.set.insert(pg, pairs.clone());
                }
            }
            _ => {
                if map.pg_upmap_items().contains_key(&pg) {
                    plan.removed.insert(pg);
                }
            }
        }
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Incremental, Pool, WEIGHT_IN};
    use shoal_crush::{BuildSpec, build_map};

    /// `hosts` hosts of `per_host` OSDs, all up and in, pool 1 of `pg_num`
    /// PGs and `size` copies placed across hosts; OSD weights from `weight`.
    fn cluster(
        hosts: usize,
        per_host: usize,
        size: u32,
        pg_num: u32,
        weight: impl Fn(i32) -> u32,
    ) -> OsdMap {
        let mut crush = build_map(&BuildSpec::hosts(hosts as u32, per_host as u32, None)).unwrap();
        let n = (hosts * per_host) as i32;
        for o in 0..n {
            crush.reweight_item(o, weight(o)).unwrap();
        }
        let mut map = OsdMap::new([7; 16], 0, crush).unwrap();
        let mut inc = Incremental::next(&map);
        inc.new_max_osd = Some(n as u32);
        for o in 0..n {
            inc.new_osds.insert(o);
            inc.new_up.insert(o, format!("127.0.0.1:{}", 6800 + o));
            inc.new_weight.insert(o, WEIGHT_IN);
        }
        inc.new_pools
            .insert(1, Pool::replicated(1, "rbd", size, 1, pg_num, 0));
        map.apply(&inc).unwrap();
        map
    }

    fn apply(map: &mut OsdMap, plan: &UpmapPlan) {
        let mut inc = Incremental::next(map);
        inc.new_pg_upmap_items = plan.set.clone();
        inc.old_pg_upmap_items = plan.removed.clone();
        map.apply(&inc).unwrap();
    }

    fn host_of(o: i32, per_host: usize) -> i32 {
        o / per_host as i32
    }

    /// Runs the planner until it has nothing to do; the spread after.
    fn balance(map: &mut OsdMap) -> Spread {
        for _ in 0..100 {
            let plan = plan_upmaps(map, &[1], 1.0, 10).unwrap();
            if plan.is_empty() {
                break;
            }
            apply(map, &plan);
        }
        spread(map, &[1]).unwrap()
    }

    #[test]
    fn equal_osds_end_within_one_pg_and_domains_hold() {
        let mut map = cluster(4, 3, 3, 128, |_| 0x10000);
        let before = spread(&map, &[1]).unwrap();
        // CRUSH alone leaves some OSDs several PGs from their share.
        assert!(before.max_deviation() > 2.0, "{before:?}");
        let after = balance(&mut map);
        assert!(after.max_deviation() <= 1.0 + 1e-9, "{after:?}");
        assert_eq!(after.count.values().sum::<u64>(), 3 * 128);
        for seed in 0..128 {
            let up = map.pg_to_up_acting(PgId { pool: 1, seed }).unwrap().up;
            assert_eq!(up.len(), 3);
            let hosts: BTreeSet<i32> = up.iter().map(|o| host_of(*o, 3)).collect();
            assert_eq!(hosts.len(), 3, "pg 1.{seed:x}: {up:?} shares a host");
        }
    }

    #[test]
    fn unequal_osds_get_shares_by_weight() {
        // Two OSDs per host, one of them twice the other's weight.
        let mut map = cluster(4, 2, 2, 256, |o| if o % 2 == 0 { 0x20000 } else { 0x10000 });
        assert!(spread(&map, &[1]).unwrap().max_deviation() > 2.0);
        let after = balance(&mut map);
        assert!(after.max_deviation() <= 1.0 + 1e-9, "{after:?}");
        let big = after.count[&0] as f64;
        let small = after.count[&1] as f64;
        assert!((big / small - 2.0).abs() < 0.2, "{after:?}");
        for seed in 0..256 {
            let up = map.pg_to_up_acting(PgId { pool: 1, seed }).unwrap().up;
            assert_ne!(
                host_of(up[0], 2),
                host_of(up[1], 2),
                "pg 1.{seed:x}: {up:?}"
            );
        }
    }

    #[test]
    fn down_or_out_osds_take_nothing_and_a_balanced_map_needs_nothing() {
        let mut map = cluster(3, 2, 2, 64, |_| 0x10000);
        let mut inc = Incremental::next(&map);
        inc.new_weight.insert(5, 0);
        map.apply(&inc).unwrap();
        let after = balance(&mut map);
        assert!(!after.count.contains_key(&5));
        for seed in 0..64 {
            let up = map.pg_to_up_acting(PgId { pool: 1, seed }).unwrap().up;
            assert!(!up.contains(&5));
        }
        assert!(plan_upmaps(&map, &[1], 1.0, 10).unwrap().is_empty());
        // Pools not asked for are left alone.
        assert!(plan_upmaps(&map, &[9], 0.0, 10).unwrap().is_empty());
    }
}

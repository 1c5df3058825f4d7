//! Placement-group ids.

use std::fmt;

/// A placement group: pool id and placement seed (`1.6f` in Ceph's notation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PgId {
    /// Pool id.
    pub pool: u64,
    /// Placement seed, below the pool's `pg_num` for an actual PG.
    pub seed: u32,
}

impl fmt::Display for PgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:x}", self.pool, self.seed)
    }
}

impl std::str::FromStr for PgId {
    type Err = crate::MapError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || crate::MapError::Invalid(format!("bad pg id '{s}'"));
        let (p, h) = s.split_once('.').ok_or_else(bad)?;
        Ok(PgId {
            pool: p.parse().map_err(|_| bad())?,
            seed: u32::from_str_radix(h, 16).map_err(|_| bad())?,
        })
    }
}

/// One child of a PG split: its seed, and the objects it takes from its
/// parent — those whose hash's low `bits` bits equal the seed (the store's
/// `SplitCollection` on `bits`, `rem = seed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SplitChild {
    /// The child's seed, in `old_pg_num..new_pg_num`.
    pub seed: u32,
    /// The low bits of an object's hash that name this child.
    pub bits: u32,
}

impl SplitChild {
    /// Whether an object of hash `hash` goes to this child.
    pub fn takes(&self, hash: u32) -> bool {
        let mask = if self.bits >= 32 {
            u32::MAX
        } else {
            (1u32 << self.bits) - 1
        };
        hash & mask == self.seed
    }
}

/// The children PG `parent` splits into when its pool's `pg_num` grows
/// from `old_pg_num` to `new_pg_num` (Ceph's `pg_t::is_split`): every new
/// seed whose fold under the old count is `parent`. An object of the parent
/// moves to child `c` exactly when it maps to `c` under the new count;
/// with [`crate::stable_mod`] that is a test on its hash's low bits — all
/// of `pg_mask(new)`'s, or one fewer when the child has no sibling above
/// it below `new_pg_num` (the objects that would go there fold onto it).
/// Empty when `pg_num` does not grow or `parent` is not a PG of the old
/// count.
pub fn split_children(parent: u32, old_pg_num: u32, new_pg_num: u32) -> Vec<SplitChild> {
    if new_pg_num <= old_pg_num || parent >= old_pg_num {
        return Vec::new();
    }
    let old_mask = crate::pg_mask(old_pg_num);
    let mask = crate::pg_mask(new_pg_num);
    let full = mask.count_ones();
    let half = (mask >> 1) + 1;
    (old_pg_num..new_pg_num)
        .filter(|c| crate::stable_mod(*c, old_pg_num, old_mask) == parent)
        .map(|seed| {
            // No sibling `seed + half` below the count: its objects fold here.
            let folded = seed < half && seed + half >= new_pg_num;
            let bits = if folded { full - 1 } else { full };
            SplitChild { seed, bits }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every object of a parent either stays or moves to exactly the child
    /// whose low-bits test it passes, and that is where the new `pg_num`
    /// maps it — for counts that are powers of two and counts that are not.
    #[test]
    fn split_children_take_exactly_the_objects_the_new_count_maps_to_them() {
        let mut h: u32 = 0x9e37_79b9;
        let hashes: Vec<u32> = (0..4000)
            .map(|_| {
                h ^= h << 13;
                h ^= h >> 17;
                h ^= h << 5;
                h
            })
            .chain([0, 1, u32::MAX, 0x8000_0000])
            .collect();
        for old in 1..=20u32 {
            for new in old + 1..=48 {
                let (om, nm) = (crate::pg_mask(old), crate::pg_mask(new));
                let children: Vec<Vec<SplitChild>> =
                    (0..old).map(|p| split_children(p, old, new)).collect();
                let every: usize = children.iter().map(Vec::len).sum();
                assert_eq!(every as u32, new - old, "{old} → {new}: each new seed once");
                for x in &hashes {
                    let parent = crate::stable_mod(*x, old, om);
                    let now = crate::stable_mod(*x, new, nm);
                    let passes: Vec<u32> = children[parent as usize]
                        .iter()
                        .filter(|c| c.takes(*x))
                        .map(|c| c.seed)
                        .collect();
                    let want = if now == parent { vec![] } else { vec![now] };
                    assert_eq!(passes, want, "{old} → {new}, hash {x:#x} of pg {parent}");
                }
            }
        }
        assert!(split_children(3, 8, 8).is_empty());
        assert!(split_children(9, 8, 16).is_empty());
        assert_eq!(
            split_children(1, 4, 16),
            vec![
                SplitChild { seed: 5, bits: 4 },
                SplitChild { seed: 9, bits: 4 },
                SplitChild { seed: 13, bits: 4 }
            ]
        );
    }

    #[test]
    fn display_and_parse() {
        let pg = PgId {
            pool: 1,
            seed: 0x69,
        };
        assert_eq!(pg.to_string(), "1.69");
        assert_eq!("1.69".parse::<PgId>().ok(), Some(pg));
        assert!("x".parse::<PgId>().is_err());
    }
}

//! The extent allocator: free space as a map of runs of 4 KiB blocks, with dirty-key
//! tracking so only changed runs are persisted.

use std::collections::{BTreeMap, BTreeSet};

/// A run of blocks: `(first block, number of blocks)`.
pub(crate) type Run = (u64, u64);

/// Free runs keyed by first block; adjacent runs are always merged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FreeList {
    runs: BTreeMap<u64, u64>,
    free_blocks: u64,
    /// Keys whose presence or value changed since the last `take_dirty`.
    dirty: BTreeSet<u64>,
}

impl FreeList {
    /// Blocks `[first, first+count)` free.
    #[cfg(test)]
    pub fn with_free(first: u64, count: u64) -> Self {
        let mut f = Self::default();
        if count > 0 {
            f.runs.insert(first, count);
            f.free_blocks = count;
            f.dirty.insert(first);
        }
        f
    }

    /// Rebuild from persisted runs; `None` if they overlap or are empty.
    pub fn from_runs(runs: impl IntoIterator<Item = Run>) -> Option<Self> {
        let mut f = Self::default();
        for (s, n) in runs {
            if n == 0 || !f.free(s, n) {
                return None;
            }
        }
        f.dirty.clear();
        Some(f)
    }

    pub fn free_blocks(&self) -> u64 {
        self.free_blocks
    }

    #[cfg(test)]
    pub fn runs(&self) -> impl Iterator<Item = Run> + '_ {
        self.runs.iter().map(|(s, n)| (*s, *n))
    }

    /// Allocate `count` blocks, first fit, possibly as several runs; `None` (and no
    /// change) if there is not enough free space.
    pub fn allocate(&mut self, count: u64) -> Option<Vec<Run>> {
        if count > self.free_blocks {
            return None;
        }
        let mut out = Vec::new();
        let mut left = count;
        while left > 0 {
            // Prefer a run that holds the rest at once, else take the first one.
            let (&s, &n) = self
                .runs
                .iter()
                .find(|(_, n)| **n >= left)
                .or_else(|| self.runs.iter().next())?;
            let take = n.min(left);
            self.take(s, take);
            out.push((s, take));
            left -= take;
        }
        Some(out)
    }

    /// Mark `[start, start+count)` used; false (and no change) unless it is all free.
    pub fn remove_range(&mut self, start: u64, count: u64) -> bool {
        let Some((&s, &n)) = self.runs.range(..=start).next_back() else {
            return false;
        };
        if start + count > s + n {
            return false;
        }
        self.runs.remove(&s);
        self.dirty.insert(s);
        if start > s {
            self.set(s, start - s);
        }
        if s + n > start + count {
            self.set(start + count, s + n - start - count);
        }
        self.free_blocks -= count;
        true
    }

    fn take(&mut self, s: u64, take: u64) {
        let removed = self.remove_range(s, take);
        debug_assert!(removed);
    }

    fn set(&mut self, s: u64, n: u64) {
        self.runs.insert(s, n);
        self.dirty.insert(s);
    }

    /// Free `[start, start+count)`, merging with neighbours; false (and no change) if any
    /// of it is already free (a double free: the caller's bookkeeping is broken).
    pub fn free(&mut self, start: u64, count: u64) -> bool {
        if count == 0 {
            return true;
        }
        let end = start + count;
        if let Some((&s, &n)) = self.runs.range(..end).next_back() {
            if s + n > start {
                return false;
            }
        }
        let mut s = start;
        let mut n = count;
        if let Some((&ps, &pn)) = self.runs.range(..start).next_back() {
            if ps + pn == start {
                self.runs.remove(&ps);
                self.dirty.insert(ps);
                s = ps;
                n += pn;
            }
        }
        if let Some(&nn) = self.runs.get(&end) {
            self.runs.remove(&end);
            self.dirty.insert(end);
            n += nn;
        }
        self.set(s, n);
        self.free_blocks += count;
        true
    }

    /// Changed keys since the last call: `(first block, Some(count))` to store,
    /// `(first block, None)` to delete.
    pub fn take_dirty(&mut self) -> Vec<(u64, Option<u64>)> {
        let dirty = std::mem::take(&mut self.dirty);
        dirty
            .into_iter()
            .map(|k| (k, self.runs.get(&k).copied()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply_dirty(persisted: &mut BTreeMap<u64, u64>, f: &mut FreeList) {
        for (k, v) in f.take_dirty() {
            match v {
                Some(n) => persisted.insert(k, n),
                None => persisted.remove(&k),
            };
        }
    }

    #[test]
    fn allocate_free_merge_and_persist() {
        let mut f = FreeList::with_free(1, 100);
        let mut persisted = BTreeMap::new();
        let a = f.allocate(10).unwrap();
        let b = f.allocate(20).unwrap();
        assert_eq!(a, vec![(1, 10)]);
        assert_eq!(b, vec![(11, 20)]);
        assert_eq!(f.free_blocks(), 70);
        assert!(f.free(1, 10));
        assert!(!f.free(5, 1), "double free refused");
        apply_dirty(&mut persisted, &mut f);
        assert_eq!(persisted, BTreeMap::from([(1, 10), (31, 70)]));
        // Fragmented allocation spans runs.
        let c = f.allocate(75).unwrap();
        assert_eq!(c, vec![(1, 10), (31, 65)]);
        assert!(f.allocate(6).is_none());
        assert!(f.free(11, 20));
        assert!(f.free(1, 10));
        assert!(f.free(31, 65));
        apply_dirty(&mut persisted, &mut f);
        assert_eq!(persisted, BTreeMap::from([(1, 100)]));
        assert_eq!(
            FreeList::from_runs(persisted)
                .unwrap()
                .runs()
                .collect::<Vec<_>>(),
            vec![(1, 100)]
        );
    }

    #[test]
    fn remove_range_splits() {
        let mut f = FreeList::with_free(0, 10);
        assert!(f.remove_range(3, 2));
        assert!(!f.remove_range(4, 1));
        assert_eq!(f.runs().collect::<Vec<_>>(), vec![(0, 3), (5, 5)]);
        assert_eq!(f.free_blocks(), 8);
        assert!(
            FreeList::from_runs([(0, 5), (4, 2)]).is_none(),
            "overlap refused"
        );
    }

    #[test]
    fn random_against_bitmap() {
        let mut rng = crate::model::Rng::new(7);
        let mut f = FreeList::with_free(0, 512);
        let mut used = vec![false; 512];
        let mut held: Vec<Run> = Vec::new();
        for _ in 0..5000 {
            if rng.one_in(2) && !held.is_empty() {
                let (s, n) = held.swap_remove(rng.below(held.len() as u64) as usize);
                assert!(f.free(s, n));
                (s..s + n).for_each(|b| used[b as usize] = false);
            } else if let Some(runs) = f.allocate(1 + rng.below(40)) {
                for (s, n) in runs {
                    for b in s..s + n {
                        assert!(!used[b as usize], "block {b} handed out twice");
                        used[b as usize] = true;
                    }
                    held.push((s, n));
                }
            }
            assert_eq!(f.free_blocks(), used.iter().filter(|u| !**u).count() as u64);
        }
    }
}

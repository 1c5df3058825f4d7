//! A map kept as a vector sorted by key: the in-memory index holds one per
//! object for its extents and one for its xattrs, and nearly all of them
//! have one to a few entries. A `BTreeMap` allocates a whole leaf node for
//! its first entry (room for 11: ~450 bytes for an extent, ~600 for an
//! xattr); this holds exactly what it has, which halves the index's memory
//! per object (`docs/design/objectstore.md`, Figures). Lookups are binary
//! searches; an insert or removal in the middle moves the entries after
//! it, which stays cheap for the sizes an object's map reaches (at most
//! 1 024 extents of a 4 MiB object written in 4 KiB pieces).

use std::borrow::Borrow;
use std::ops::{Bound, RangeBounds};

/// A sorted map in one vector (see the module's doc).
#[derive(Clone, PartialEq, Eq)]
pub struct VecMap<K, V> {
    entries: Vec<(K, V)>,
}

impl<K, V> Default for VecMap<K, V> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
        }
    }
}

impl<K: std::fmt::Debug, V: std::fmt::Debug> std::fmt::Debug for VecMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.entries.iter().map(|(k, v)| (k, v)))
            .finish()
    }
}

impl<K: Ord, V> VecMap<K, V> {
    /// An empty map (allocates nothing).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty map with room for `n` entries.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            entries: Vec::with_capacity(n),
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Where `key` is (`Ok`) or would go (`Err`).
    fn find<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        self.entries.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| &self.entries[i].1)
    }

    pub fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.find(key).is_ok()
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
                // Grow by one at a time while small (most maps stay at one
                // or two entries), by doubling past that.
                if self.entries.len() < 4 {
                    self.entries.reserve_exact(1);
                }
                self.entries.insert(i, (key, value));
                None
            }
        }
    }

    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        let i = self.find(key).ok()?;
        let (_, v) = self.entries.remove(i);
        if self.entries.is_empty() {
            self.entries = Vec::new();
        }
        Some(v)
    }

    pub fn clear(&mut self) {
        self.entries = Vec::new();
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> + ExactSizeIterator {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + ExactSizeIterator {
        self.entries.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator {
        self.entries.iter().map(|(_, v)| v)
    }

    /// The index range of the entries whose keys are in `range`.
    fn span<Q: Ord + ?Sized, R: RangeBounds<Q>>(&self, range: &R) -> std::ops::Range<usize>
    where
        K: Borrow<Q>,
    {
        let lo = match range.start_bound() {
            Bound::Included(s) => self.entries.partition_point(|(k, _)| k.borrow() < s),
            Bound::Excluded(s) => self.entries.partition_point(|(k, _)| k.borrow() <= s),
            Bound::Unbounded => 0,
        };
        let hi = match range.end_bound() {
            Bound::Included(e) => self.entries.partition_point(|(k, _)| k.borrow() <= e),
            Bound::Excluded(e) => self.entries.partition_point(|(k, _)| k.borrow() < e),
            Bound::Unbounded => self.entries.len(),
        };
        lo..hi.max(lo)
    }

    /// Entries whose keys are in `range`, in key order (an inverted range is empty).
    pub fn range<Q: Ord + ?Sized, R: RangeBounds<Q>>(
        &self,
        range: R,
    ) -> impl DoubleEndedIterator<Item = (&K, &V)>
    where
        K: Borrow<Q>,
    {
        let span = self.span(&range);
        self.entries[span].iter().map(|(k, v)| (k, v))
    }

    /// As [`Self::range`], the values mutable.
    pub fn range_mut<Q: Ord + ?Sized, R: RangeBounds<Q>>(
        &mut self,
        range: R,
    ) -> impl DoubleEndedIterator<Item = (&K, &mut V)>
    where
        K: Borrow<Q>,
    {
        let span = self.span(&range);
        self.entries[span].iter_mut().map(|(k, v)| (&*k, v))
    }

    /// Removes the entries whose keys are in `range`, returning them in order.
    pub fn drain_range<Q: Ord + ?Sized, R: RangeBounds<Q>>(&mut self, range: R) -> Vec<(K, V)>
    where
        K: Borrow<Q>,
    {
        let span = self.span(&range);
        let out = self.entries.drain(span).collect();
        if self.entries.is_empty() {
            self.entries = Vec::new();
        }
        out
    }
}

impl<K: Ord, V> Extend<(K, V)> for VecMap<K, V> {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.insert(k, v);
        }
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for VecMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut entries: Vec<(K, V)> = iter.into_iter().collect();
        // Stable: of equal keys the last one given wins, as in a BTreeMap.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(K, V)> = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            match out.last_mut() {
                Some(last) if last.0 == k => last.1 = v,
                _ => out.push((k, v)),
            }
        }
        out.shrink_to_fit();
        Self { entries: out }
    }
}

impl<K, V> IntoIterator for VecMap<K, V> {
    type Item = (K, V);
    type IntoIter = std::vec::IntoIter<(K, V)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl<'a, K, V> IntoIterator for &'a VecMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = std::iter::Map<std::slice::Iter<'a, (K, V)>, fn(&'a (K, V)) -> (&'a K, &'a V)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(k, v)| (k, v))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A random sequence of inserts, removals and range removals gives the
    /// same contents, lookups and ranges as a `BTreeMap`.
    #[test]
    fn behaves_as_a_btreemap() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut ours: VecMap<u64, u64> = VecMap::new();
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        for step in 0..20_000u64 {
            let k = next() % 64;
            match next() % 5 {
                0 | 1 => assert_eq!(ours.insert(k, step), model.insert(k, step)),
                2 => assert_eq!(ours.remove(&k), model.remove(&k)),
                3 => {
                    let e = k + next() % 8;
                    let gone: Vec<(u64, u64)> = model.range(k..e).map(|(a, b)| (*a, *b)).collect();
                    for (a, _) in &gone {
                        model.remove(a);
                    }
                    assert_eq!(ours.drain_range(k..e), gone);
                }
                _ => {
                    let e = next() % 64;
                    let a: Vec<_> = ours.range(k..=e).collect();
                    let b: Vec<_> = if k <= e {
                        model.range(k..=e).collect()
                    } else {
                        Vec::new()
                    };
                    assert_eq!(a, b);
                    assert_eq!(
                        ours.range(..k).next_back(),
                        model.range(..k).next_back(),
                        "{k}"
                    );
                    assert_eq!(
                        ours.range((Bound::Excluded(k), Bound::Unbounded)).next(),
                        model.range((Bound::Excluded(k), Bound::Unbounded)).next()
                    );
                }
            }
            assert_eq!(ours.get(&k), model.get(&k));
            assert_eq!(ours.len(), model.len());
        }
        assert!(ours.iter().eq(model.iter()));
        let from: VecMap<u64, u64> = [(3, 1), (1, 2), (3, 4)].into_iter().collect();
        assert_eq!(from.iter().collect::<Vec<_>>(), vec![(&1, &2), (&3, &4)]);
    }
}

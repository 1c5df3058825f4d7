//! The extent map of one object: logical block -> (device block, crc32c per block).

use super::alloc::Run;
use crate::vecmap::VecMap;

/// A run of device blocks backing consecutive logical blocks; one crc per block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Extent {
    pub pblock: u64,
    pub crcs: Vec<u32>,
}

impl Extent {
    pub fn len(&self) -> u64 {
        self.crcs.len() as u64
    }
}

/// Extents keyed by first logical block; never overlapping. Unmapped blocks read as zeros.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ExtentMap {
    pub extents: VecMap<u64, Extent>,
}

/// A mapped block found by `lookup`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mapped {
    pub pblock: u64,
    pub crc: u32,
}

impl ExtentMap {
    /// Split the extent containing `lblock` so that one starts exactly there.
    fn split_at(&mut self, lblock: u64) {
        let Some((&start, ext)) = self.extents.range_mut(..lblock).next_back() else {
            return;
        };
        let end = start + ext.len();
        if lblock >= end {
            return;
        }
        let cut = (lblock - start) as usize;
        let tail = Extent {
            pblock: ext.pblock + cut as u64,
            crcs: ext.crcs.split_off(cut),
        };
        self.extents.insert(lblock, tail);
    }

    /// Unmap logical blocks `[start, end)`; returns the device runs released.
    pub fn punch(&mut self, start: u64, end: u64) -> Vec<Run> {
        if start >= end {
            return Vec::new();
        }
        self.split_at(start);
        self.split_at(end);
        self.extents
            .drain_range(start..end)
            .into_iter()
            .map(|(_, e)| (e.pblock, e.len()))
            .collect()
    }

    /// Map `[lblock, lblock + crcs.len())` to device blocks from `pblock`; the range must be
    /// unmapped (punch first).
    pub fn insert(&mut self, lblock: u64, pblock: u64, crcs: Vec<u32>) {
        debug_assert!(
            self.extents
                .range(lblock..lblock + crcs.len() as u64)
                .next()
                .is_none()
        );
        if !crcs.is_empty() {
            self.extents.insert(lblock, Extent { pblock, crcs });
        }
    }

    pub fn lookup(&self, lblock: u64) -> Option<Mapped> {
        let (&start, ext) = self.extents.range(..=lblock).next_back()?;
        let i = usize::try_from(lblock - start).ok()?;
        ext.crcs.get(i).map(|crc| Mapped {
            pblock: ext.pblock + i as u64,
            crc: *crc,
        })
    }

    /// Replace the crc of a mapped block (after an in-place overwrite); false if unmapped.
    pub fn set_crc(&mut self, lblock: u64, crc: u32) -> bool {
        let Some((&start, ext)) = self.extents.range_mut(..=lblock).next_back() else {
            return false;
        };
        match ext.crcs.get_mut((lblock - start) as usize) {
            Some(c) => {
                *c = crc;
                true
            }
            None => false,
        }
    }
}

/// A piece of a logical range: `(first logical block, Some((device block, crcs)) or
/// None for a hole, number of blocks)`.
pub(crate) type Segment<'a> = (u64, Option<(u64, &'a [u32])>, u64);

impl ExtentMap {
    /// Pieces of `[start, end)`: `(lblock, Some((pblock, crcs)) | None for a hole, blocks)`.
    pub fn segments(&self, start: u64, end: u64) -> Vec<Segment<'_>> {
        let mut out = Vec::new();
        let mut at = start;
        let first = self
            .extents
            .range(..=start)
            .next_back()
            .map(|(k, _)| *k)
            .unwrap_or(start);
        for (&ls, ext) in self.extents.range(first..end) {
            let le = ls + ext.len();
            if le <= at {
                continue;
            }
            if ls > at {
                out.push((at, None, ls - at));
                at = ls;
            }
            let stop = le.min(end);
            let off = (at - ls) as usize;
            let n = (stop - at) as usize;
            out.push((
                at,
                Some((ext.pblock + off as u64, &ext.crcs[off..off + n])),
                n as u64,
            ));
            at = stop;
        }
        if at < end {
            out.push((at, None, end - at));
        }
        out
    }

    pub fn allocated_blocks(&self) -> u64 {
        self.extents.values().map(Extent::len).sum()
    }

    /// All device runs (for freeing the whole object or checking it).
    pub fn runs(&self) -> impl Iterator<Item = (u64, Run)> + '_ {
        self.extents.iter().map(|(l, e)| (*l, (e.pblock, e.len())))
    }

    /// True if every block in `[start, end)` is mapped.
    pub fn all_mapped(&self, start: u64, end: u64) -> bool {
        self.segments(start, end)
            .iter()
            .all(|(_, m, _)| m.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn punch_splits_and_returns_runs() {
        let mut m = ExtentMap::default();
        m.insert(0, 100, vec![1, 2, 3, 4, 5, 6, 7, 8]);
        m.insert(10, 200, vec![9, 9]);
        let freed = m.punch(2, 5);
        assert_eq!(freed, vec![(102, 3)]);
        assert_eq!(
            m.lookup(1),
            Some(Mapped {
                pblock: 101,
                crc: 2
            })
        );
        assert_eq!(m.lookup(3), None);
        assert_eq!(
            m.lookup(5),
            Some(Mapped {
                pblock: 105,
                crc: 6
            })
        );
        assert_eq!(m.allocated_blocks(), 7);
        let segs: Vec<_> = m
            .segments(0, 13)
            .into_iter()
            .map(|(l, p, n)| (l, p.map(|(pb, _)| pb), n))
            .collect();
        assert_eq!(
            segs,
            vec![
                (0, Some(100), 2),
                (2, None, 3),
                (5, Some(105), 3),
                (8, None, 2),
                (10, Some(200), 2),
                (12, None, 1)
            ]
        );
        assert_eq!(m.punch(0, 100), vec![(100, 2), (105, 3), (200, 2)]);
        assert!(m.extents.is_empty());
    }

    #[test]
    fn set_crc_and_all_mapped() {
        let mut m = ExtentMap::default();
        m.insert(4, 10, vec![0, 0]);
        assert!(m.set_crc(5, 42));
        assert!(!m.set_crc(6, 1));
        assert_eq!(m.lookup(5).map(|x| x.crc), Some(42));
        assert!(m.all_mapped(4, 6));
        assert!(!m.all_mapped(3, 6));
        let segs = m.segments(5, 6);
        assert_eq!(segs.len(), 1);
        assert_eq!(segs[0].1, Some((11, &[42u32][..])));
    }
}

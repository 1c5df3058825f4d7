//! Bookkeeping of deferred writes: block contents that are committed (or about to be)
//! through the metadata log but not yet written in place. Reads see them through
//! [`Overlay::get`]; the committer writes them in place after their records commit and
//! then retires them with [`Overlay::applied`], which keeps any newer contents staged for
//! the same block by a later, not yet committed transaction.

use std::collections::HashMap;

use bytes::Bytes;

/// Deferred block contents by device block, each tagged with its record's sequence.
#[derive(Debug, Default)]
pub(crate) struct Overlay {
    blocks: HashMap<u64, (u64, Bytes)>,
    next_seq: u64,
}

impl Overlay {
    /// An empty overlay whose next record gets sequence `next_seq` (one past the highest
    /// sequence found in the metadata log at open).
    pub fn starting_at(next_seq: u64) -> Self {
        Self {
            blocks: HashMap::new(),
            next_seq,
        }
    }

    /// Stage new contents for `pblock`; returns the record's sequence number.
    pub fn stage(&mut self, pblock: u64, data: Bytes) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.blocks.insert(pblock, (seq, data));
        seq
    }

    /// The newest staged contents of `pblock`, if any.
    pub fn get(&self, pblock: u64) -> Option<&Bytes> {
        self.blocks.get(&pblock).map(|(_, d)| d)
    }

    /// Record `seq` for `pblock` was written in place: forget it unless a newer record
    /// for the block is staged.
    pub fn applied(&mut self, pblock: u64, seq: u64) {
        if self.blocks.get(&pblock).is_some_and(|(s, _)| *s == seq) {
            self.blocks.remove(&pblock);
        }
    }

    /// Blocks with staged contents.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.blocks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_contents_survive_applying_older() {
        let mut o = Overlay::starting_at(10);
        let a = o.stage(7, Bytes::from_static(b"old"));
        let b = o.stage(7, Bytes::from_static(b"new"));
        let c = o.stage(8, Bytes::from_static(b"other"));
        assert_eq!((a, b, c), (10, 11, 12));
        assert_eq!(o.get(7).map(|d| &d[..]), Some(&b"new"[..]));
        o.applied(7, a);
        assert_eq!(
            o.get(7).map(|d| &d[..]),
            Some(&b"new"[..]),
            "older apply keeps newer contents"
        );
        o.applied(7, b);
        assert!(o.get(7).is_none());
        o.applied(8, c);
        assert_eq!(o.len(), 0);
    }
}

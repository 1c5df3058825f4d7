//! The data cache: recently read 4 KiB device blocks kept in memory, so a
//! read of hot data (a small object read again, an image's busy blocks)
//! costs a copy instead of a device round trip (bluestore's buffer cache).
//! Every read is direct I/O otherwise.
//!
//! A block is cached with the crc32c its extent map gave when it was read,
//! and is served only to a read whose extent map gives the same crc (the
//! block is checked against it again as any block read from the device).
//! Every change of a block's contents on the device is preceded, under the
//! state's write lock, by [`BlockCache::invalidate`] of that block (copy-on-write
//! data to fresh blocks, deferred writes, in-place writes of either), and
//! a read inserts what it read only if no invalidation happened since it
//! planned under the state's lock ([`BlockCache::generation`]): what a read
//! inserts is what the device held for the state it planned from.
//!
//! Only small reads (at most [`FILL_BYTES_MAX`]) fill the cache: a 4 MiB read
//! would push out a thousand hot blocks for data read once; whole pieces of
//! larger reads are still served from it. Eviction is CLOCK: one bit per
//! block, set on a hit, cleared as the hand passes; an unreferenced block
//! under the hand goes.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use bytes::Bytes;

use super::BLOCK;

/// Reads of at most this many bytes put what they read in the cache.
pub(crate) const FILL_BYTES_MAX: usize = 64 * 1024;

struct Entry {
    crc: u32,
    data: Bytes,
    referenced: bool,
    /// Its slot in the ring (a block invalidated and cached again has a
    /// new one; the old slot is dead).
    slot: u64,
}

#[derive(Default)]
struct Inner {
    blocks: HashMap<u64, Entry>,
    /// The CLOCK's ring of (block, slot): a slot whose block was
    /// invalidated (or cached again in another slot) is dead, and goes when
    /// the hand reaches it.
    ring: VecDeque<(u64, u64)>,
    next_slot: u64,
    generation: u64,
    hits: u64,
    fills: u64,
}

/// The cache of one store (see the module's doc).
pub(crate) struct BlockCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

impl Default for BlockCache {
    fn default() -> Self {
        Self::new(0)
    }
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.stats();
        write!(
            f,
            "BlockCache({} of {} blocks)",
            s.blocks, s.capacity_blocks
        )
    }
}

/// What a cache holds, for the store's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Blocks cached now.
    pub blocks: u64,
    /// Its capacity, in blocks.
    pub capacity_blocks: u64,
    /// Blocks reads found in it.
    pub hits: u64,
    /// Blocks reads put in it.
    pub fills: u64,
}

impl BlockCache {
    /// A cache of at most `bytes` (0: none; nothing is kept).
    pub fn new(bytes: u64) -> Self {
        Self {
            capacity: usize::try_from(bytes / BLOCK as u64).unwrap_or(usize::MAX),
            inner: Mutex::new(Inner::default()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while held leaves the maps consistent (no multi-step update
        // is interrupted by anything that panics): go on with them.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The block at device block `pb` if it is cached with checksum `crc`;
    /// marks it used.
    pub fn get(&self, pb: u64, crc: u32) -> Option<Bytes> {
        if !self.enabled() {
            return None;
        }
        let mut inner = self.lock();
        let e = inner.blocks.get_mut(&pb)?;
        if e.crc != crc {
            return None;
        }
        e.referenced = true;
        let data = e.data.clone();
        inner.hits += 1;
        Some(data)
    }

    /// Counts invalidations: a read that planned at another generation
    /// inserts nothing.
    pub fn generation(&self) -> u64 {
        if !self.enabled() {
            return 0;
        }
        self.lock().generation
    }

    /// Device block `pb` is about to change: forget it. Called under the
    /// state's write lock.
    pub fn invalidate(&self, pb: u64) {
        if !self.enabled() {
            return;
        }
        let mut inner = self.lock();
        inner.generation += 1;
        inner.blocks.remove(&pb);
    }

    /// Keeps the blocks a read found (device block, crc, contents), if no
    /// block changed since the read planned at `generation`.
    pub fn insert(&self, generation: u64, blocks: impl IntoIterator<Item = (u64, u32, Bytes)>) {
        if !self.enabled() {
            return;
        }
        let mut inner = self.lock();
        if inner.generation != generation {
            return;
        }
        for (pb, crc, data) in blocks {
            debug_assert_eq!(data.len(), BLOCK);
            if let Some(e) = inner.blocks.get_mut(&pb) {
                // Read again by another reader: the same contents.
                (e.crc, e.data) = (crc, data);
                continue;
            }
            let slot = inner.next_slot;
            inner.next_slot += 1;
            inner.fills += 1;
            let fresh = Entry {
                crc,
                data,
                referenced: false,
                slot,
            };
            inner.blocks.insert(pb, fresh);
            inner.ring.push_back((pb, slot));
            Self::evict(&mut inner, self.capacity);
        }
    }

    /// Moves the hand until the cache fits its capacity and its ring holds
    /// at most twice that (dead slots).
    fn evict(inner: &mut Inner, capacity: usize) {
        loop {
            let over = inner.blocks.len() > capacity;
            if !over && inner.ring.len() <= capacity.saturating_mul(2).max(16) {
                return;
            }
            let Some((pb, slot)) = inner.ring.pop_front() else {
                return;
            };
            let Some(e) = inner.blocks.get_mut(&pb).filter(|e| e.slot == slot) else {
                continue; // a dead slot
            };
            if over && !e.referenced {
                inner.blocks.remove(&pb);
                continue;
            }
            // Used since the hand last passed (its bit cleared), or only dead
            // slots are to go: the block stays.
            e.referenced &= !over;
            inner.ring.push_back((pb, slot));
        }
    }

    pub fn stats(&self) -> CacheStats {
        let inner = self.lock();
        CacheStats {
            blocks: inner.blocks.len() as u64,
            capacity_blocks: self.capacity as u64,
            hits: inner.hits,
            fills: inner.fills,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(b: u8) -> Bytes {
        Bytes::from(vec![b; BLOCK])
    }

    #[test]
    fn a_block_is_served_only_with_its_checksum_and_until_it_changes() {
        let c = BlockCache::new(4 * BLOCK as u64);
        let g = c.generation();
        c.insert(g, [(7, 1, block(1))]);
        assert_eq!(c.get(7, 1), Some(block(1)));
        assert_eq!(c.get(7, 2), None, "another crc: another content");
        c.invalidate(7);
        assert_eq!(c.get(7, 1), None);
        // A read that planned before an invalidation inserts nothing.
        let g = c.generation();
        c.invalidate(9);
        c.insert(g, [(8, 3, block(3))]);
        assert_eq!(c.get(8, 3), None);
        let off = BlockCache::new(0);
        off.insert(off.generation(), [(1, 1, block(1))]);
        assert_eq!(off.get(1, 1), None);
    }

    #[test]
    fn the_clock_keeps_what_is_used_within_the_capacity() {
        let c = BlockCache::new(4 * BLOCK as u64);
        for pb in 0..4 {
            c.insert(c.generation(), [(pb, 0, block(pb as u8))]);
        }
        // Blocks 0 and 1 are used again; 4 and 5 come: 2 and 3 go.
        assert!(c.get(0, 0).is_some() && c.get(1, 0).is_some());
        c.insert(c.generation(), [(4, 0, block(4)), (5, 0, block(5))]);
        assert_eq!(c.stats().blocks, 4);
        for (pb, kept) in [
            (0, true),
            (1, true),
            (2, false),
            (3, false),
            (4, true),
            (5, true),
        ] {
            assert_eq!(c.get(pb, 0).is_some(), kept, "block {pb}");
        }
        // Invalidated slots do not let the ring grow without bound.
        for pb in 100..400 {
            c.insert(c.generation(), [(pb, 0, block(0))]);
            c.invalidate(pb);
        }
        let inner = c.lock();
        assert!(inner.ring.len() <= 16, "{}", inner.ring.len());
        assert!(inner.blocks.len() <= 4);
    }
}

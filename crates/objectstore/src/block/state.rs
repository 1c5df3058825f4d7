//! The in-memory state of a BlockStore (the whole metadata index plus in-flight
//! deferred writes and the live allocator) and the checked read path over it.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use super::alloc::FreeList;
use super::cache::{self, BlockCache};
use super::deferred::Overlay;
use super::device::{AlignedBuf, BufPool, Device};
use super::meta::Onode;
use super::{BLOCK, Counters};
use crate::error::{Error, Result};
use crate::types::{CollectionId, ObjectKey};
use crate::validate::View;

const B: u64 = BLOCK as u64;

pub(crate) type Colls = BTreeMap<CollectionId, BTreeMap<ObjectKey, Onode>>;

/// The in-memory state: the whole metadata index (hot cache) plus what is in flight.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub colls: Colls,
    /// Free space available for allocation now: excludes blocks freed by transactions
    /// that are not durable yet (they may still be referenced by the durable state).
    pub alloc: FreeList,
    /// Deferred block contents not yet written in place: device block -> (seq, data).
    pub overlay: Overlay,
    pub total_blocks: u64,
    /// Blocks of the journal (after the label; never allocated).
    pub journal_blocks: u64,
    /// Bumped (under the write lock) whenever a block can change under a reader that
    /// does not hold the lock: deferred writes applied in place, freed blocks released
    /// for reuse. An unlocked read that fails its checksum retries under the lock if
    /// this moved, and reports corruption only if it did not.
    pub reuse_gen: u64,
    /// Recently read blocks (`cache.rs`); a block is invalidated as its new contents
    /// are staged ([`State::stage`]).
    pub cache: Arc<BlockCache>,
}

impl State {
    /// New contents for device block `pb` (deferred, or copy-on-write data not yet
    /// on the device): readers see them through the overlay, and the cache forgets
    /// the block's old contents. Returns the overlay's sequence.
    pub fn stage(&mut self, pb: u64, data: Bytes) -> u64 {
        self.cache.invalidate(pb);
        self.overlay.stage(pb, data)
    }
}

/// Why an unlocked read failed.
#[derive(Debug)]
pub(crate) enum ReadFailure {
    /// A block failed its crc at this device offset (maybe reused meanwhile).
    Checksum(u64),
    /// Anything else.
    Other(Error),
}

/// A piece of a read's buffer: (offset in the buffer, `Some((first device
/// block, crcs))` or `None` for a hole, blocks).
type Piece = (usize, Option<(u64, Vec<u32>)>, usize);

/// Everything a read needs, taken under the lock so the I/O can run without it.
#[derive(Debug)]
pub(crate) struct ReadPlan {
    /// The buffer's pieces, in order and covering it.
    pieces: Vec<Piece>,
    /// Overlay contents of the blocks read (deferred, or data not yet on the device).
    overlay: std::collections::HashMap<u64, Bytes>,
    /// Blocks the cache holds with the checksums the plan wants.
    cached: std::collections::HashMap<u64, Bytes>,
    cache: Arc<BlockCache>,
    /// The cache's generation when the plan was made (under the state's lock).
    cache_gen: u64,
    use_cache: bool,
    buf_len: usize,
    start: usize,
    len: usize,
    pub reuse_gen: u64,
}

impl ReadPlan {
    /// Plan reading `[off, off+len)` of `on`; `len` is already clamped to the size.
    /// `use_cache`: blocks the data cache holds come from it, and a small read fills
    /// it (otherwise every block comes from the device, or the overlay).
    pub fn new(st: &State, on: &Onode, off: u64, len: u64, use_cache: bool) -> Self {
        let lb0 = off / B;
        let lb1 = (off + len).min(on.size).div_ceil(B).max(lb0);
        let mut plan = ReadPlan {
            pieces: Vec::new(),
            overlay: std::collections::HashMap::new(),
            cached: std::collections::HashMap::new(),
            cache: Arc::clone(&st.cache),
            cache_gen: st.cache.generation(),
            use_cache,
            buf_len: ((lb1 - lb0) * B) as usize,
            start: (off - lb0 * B) as usize,
            len: len as usize,
            reuse_gen: st.reuse_gen,
        };
        for (lb, mapped, n) in on.extents.segments(lb0, lb1) {
            let at = ((lb - lb0) * B) as usize;
            match mapped {
                Some((pb, crcs)) => {
                    for (i, crc) in (0..crcs.len() as u64).zip(crcs) {
                        if let Some(d) = st.overlay.get(pb + i) {
                            plan.overlay.insert(pb + i, d.clone());
                        } else if let Some(d) =
                            use_cache.then(|| st.cache.get(pb + i, *crc)).flatten()
                        {
                            plan.cached.insert(pb + i, d);
                        }
                    }
                    plan.pieces
                        .push((at, Some((pb, crcs.to_vec())), crcs.len()));
                }
                None => plan.pieces.push((at, None, n as usize)),
            }
        }
        plan
    }

    /// Do the I/O and verify every block. Returns the bytes and their crc32c,
    /// folded from the blocks' verified checksums (no second pass over them).
    pub fn execute(
        &self,
        dev: &dyn Device,
        pool: &Arc<BufPool>,
    ) -> std::result::Result<(Bytes, u32), ReadFailure> {
        let mut buf = pool.take(self.buf_len);
        let (start, end) = (self.start, self.start + self.len);
        // Small reads keep what they read from the device (`cache.rs`).
        let fill = self.use_cache && self.cache.enabled() && self.buf_len <= cache::FILL_BYTES_MAX;
        let mut fills = Vec::new();
        let mut crc = 0;
        // Folds block `at..at + BLOCK` of the buffer, of checksum `block_crc`,
        // into the crc of the bytes returned.
        let mut fold = |blk: &[u8], at: usize, block_crc: u32| {
            let (lo, hi) = (at.max(start), (at + BLOCK).min(end));
            if lo >= hi {
            } else if hi - lo == BLOCK {
                crc = super::crc::append_block(crc, block_crc);
            } else {
                let part = &blk[lo - at..hi - at];
                crc = super::crc::append(crc, crc32c::crc32c(part), part.len());
            }
        };
        for (at, mapped, blocks) in &self.pieces {
            let out = &mut buf.as_mut_slice()[*at..*at + blocks * BLOCK];
            let Some((pb, crcs)) = mapped else {
                // A reused buffer holds an earlier read's bytes: a hole is zeros.
                out.fill(0);
                for (i, blk) in out.chunks(BLOCK).enumerate() {
                    fold(blk, at + i * BLOCK, super::crc::zero_block());
                }
                continue;
            };
            let held = |b: u64| self.overlay.get(&b).or_else(|| self.cached.get(&b));
            // A piece the overlay and the cache hold whole costs no device read.
            let from_device = (*pb..*pb + *blocks as u64).any(|b| held(b).is_none());
            if from_device {
                dev.read_at(pb * B, out)
                    .map_err(|e| ReadFailure::Other(Error::io("reading data", e)))?;
            }
            for (i, (blk, want)) in out.chunks_mut(BLOCK).zip(crcs).enumerate() {
                let b = pb + i as u64;
                let overlaid = self.overlay.get(&b);
                if let Some(d) = overlaid.or_else(|| self.cached.get(&b).filter(|_| !from_device)) {
                    blk.copy_from_slice(d);
                }
                if crc32c::crc32c(blk) != *want {
                    return Err(ReadFailure::Checksum(b * B));
                }
                fold(blk, at + i * BLOCK, *want);
                if from_device && overlaid.is_none() && fill {
                    fills.push((b, *want, Bytes::copy_from_slice(blk)));
                }
            }
        }
        if !fills.is_empty() {
            self.cache.insert(self.cache_gen, fills);
        }
        Ok((pool.bytes(buf, self.start, self.len), crc))
    }
}

impl View for Colls {
    fn has_collection(&self, c: &CollectionId) -> bool {
        self.contains_key(c)
    }
    fn has_object(&self, c: &CollectionId, o: &ObjectKey) -> bool {
        self.get(c).is_some_and(|m| m.contains_key(o))
    }
}

/// Read device blocks `[pblock, pblock + crcs.len())` into `out`, patching in deferred
/// contents and verifying every crc.
pub(crate) fn read_blocks(
    st: &State,
    dev: &dyn Device,
    counters: &Counters,
    pblock: u64,
    crcs: &[u32],
    out: &mut [u8],
) -> Result<()> {
    dev.read_at(pblock * B, out)
        .map_err(|e| Error::io("reading data", e))?;
    for (i, (blk, want)) in out.chunks_mut(BLOCK).zip(crcs).enumerate() {
        let pb = pblock + i as u64;
        if let Some(data) = st.overlay.get(pb) {
            blk.copy_from_slice(data);
        }
        if crc32c::crc32c(blk) != *want {
            counters
                .checksum_errors
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(Error::Checksum {
                device_offset: pb * B,
            });
        }
    }
    Ok(())
}

/// Bytes `[off, off+len)` of an object, zeros past its end and in holes. Without
/// padding (the usual read) the result is a view of the I/O buffer: no copy.
pub(crate) fn read_range(
    st: &State,
    dev: &dyn Device,
    counters: &Counters,
    on: &Onode,
    off: u64,
    len: u64,
) -> Result<Bytes> {
    let end = off.saturating_add(len);
    let lb0 = off / B;
    let lb1 = end.min(on.size).div_ceil(B).max(lb0);
    let mut buf = AlignedBuf::new(((lb1 - lb0) * B) as usize);
    for (lb, mapped, n) in on.extents.segments(lb0, lb1) {
        if let Some((pb, crcs)) = mapped {
            let at = ((lb - lb0) * B) as usize;
            read_blocks(
                st,
                dev,
                counters,
                pb,
                crcs,
                &mut buf.as_mut_slice()[at..at + (n * B) as usize],
            )?;
        }
    }
    let start = (off - lb0 * B) as usize;
    let avail = buf.as_slice().len().saturating_sub(start).min(len as usize);
    if avail == len as usize {
        return Ok(buf.into_bytes(start, avail));
    }
    let mut out = vec![0u8; len as usize];
    if avail > 0 {
        out[..avail].copy_from_slice(&buf.as_slice()[start..start + avail]);
    }
    Ok(Bytes::from(out))
}

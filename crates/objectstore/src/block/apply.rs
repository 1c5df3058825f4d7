//! Applying a checked transaction to the in-memory state: data goes to the device
//! (copy-on-write) or to the deferred queue (small overwrites, and small writes to fresh
//! blocks: carried by the journal record, written in place after it), and the metadata
//! changes are collected into one batch for the committer.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use redb::TableHandle;

use super::alloc::Run;
use super::codec::{self, ObjectRecord};
use super::device::{AlignedBuf, Device};
use super::meta::{COLLS, OBJECTS, OMAP, Onode, Table};
pub(crate) use super::state::{Colls, State, read_blocks, read_range};
use super::{BLOCK, Counters};
use crate::error::{Error, Result};
use crate::transaction::{Op, Transaction};
use crate::types::{CollectionId, ObjectKey};

/// Writes up to this size into already allocated blocks are deferred (applied in place
/// after their record commits) instead of copied to new extents.
pub(crate) const DEFERRED_BYTES_MAX: u64 = 32 * 1024;

const B: u64 = BLOCK as u64;

/// A metadata change.
pub(crate) enum KvOp {
    Put(Table, Vec<u8>, Vec<u8>),
    Del(Table, Vec<u8>),
}

impl std::fmt::Debug for KvOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KvOp::Put(t, k, v) => write!(
                f,
                "Put({}, {} key bytes, {} value bytes)",
                t.name(),
                k.len(),
                v.len()
            ),
            KvOp::Del(t, k) => write!(f, "Del({}, {} key bytes)", t.name(), k.len()),
        }
    }
}

/// Everything one transaction hands to the committer.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub kv: Vec<KvOp>,
    pub allocs: Vec<Run>,
    pub frees: Vec<Run>,
    /// (seq, device block, new contents)
    pub deferred: Vec<(u64, u64, Bytes)>,
    /// Copy-on-write data to write to fresh blocks: (first block, whole blocks). The
    /// caller writes it after releasing the state lock; until the committer retires
    /// them, reads take these blocks from the overlay.
    pub data: Vec<(u64, Bytes)>,
    /// Overlay entries of `data`, (block, seq), retired once the data has landed.
    pub landed: Vec<(u64, u64)>,
}

/// Applies one transaction; collects its batch.
pub(crate) struct Applier<'a> {
    pub st: &'a mut State,
    pub dev: &'a dyn Device,
    pub counters: &'a Counters,
    pub batch: Batch,
    dirty_colls: BTreeSet<CollectionId>,
    dirty_objs: BTreeSet<(CollectionId, ObjectKey)>,
    dirty_omap: BTreeSet<(CollectionId, ObjectKey, Bytes)>,
}

fn no_space(needed_blocks: u64, free_blocks: u64) -> Error {
    Error::NoSpace {
        needed_bytes: needed_blocks * B,
        free_bytes: free_blocks * B,
    }
}

/// `Err(NoSpace)` unless the free space covers the most `txn` may allocate.
pub(crate) fn check_space(st: &State, txn: &Transaction) -> Result<()> {
    let need = blocks_needed(&st.colls, txn);
    let free = st.alloc.free_blocks();
    if need > free {
        return Err(no_space(need, free));
    }
    Ok(())
}

/// Upper bound of the blocks `txn` may allocate.
fn blocks_needed(colls: &Colls, txn: &Transaction) -> u64 {
    let ranged: u64 = txn
        .ops()
        .iter()
        .map(|op| match op {
            Op::CloneRange { len, .. } => *len,
            _ => 0,
        })
        .sum();
    let written: u64 = (txn.data_bytes() + ranged).div_ceil(B);
    txn.ops()
        .iter()
        .map(|op| match op {
            Op::Write { data, .. } => data.len() as u64 / B + 2,
            Op::Zero { .. } | Op::Truncate { .. } => 2,
            Op::CloneRange { len, .. } => len / B + 2,
            // Whatever the transaction did before, no object exceeds the largest one
            // now plus everything the transaction writes.
            Op::Clone { coll, .. } => {
                let largest = colls
                    .get(coll)
                    .and_then(|m| m.values().map(|o| o.extents.allocated_blocks()).max())
                    .unwrap_or(0);
                largest + written
            }
            _ => 0,
        })
        .sum()
}

impl<'a> Applier<'a> {
    pub fn new(st: &'a mut State, dev: &'a dyn Device, counters: &'a Counters) -> Self {
        Self {
            st,
            dev,
            counters,
            batch: Batch::default(),
            dirty_colls: BTreeSet::new(),
            dirty_objs: BTreeSet::new(),
            dirty_omap: BTreeSet::new(),
        }
    }

    /// Apply every op (preconditions and space already checked) and finish the batch.
    /// An error leaves the state holding part of the transaction: the caller must poison.
    pub fn apply(mut self, txn: &Transaction) -> Result<Batch> {
        for op in txn.ops() {
            self.op(op)?;
        }
        self.finish();
        Ok(self.batch)
    }

    fn onode(&mut self, c: &CollectionId, o: &ObjectKey) -> Result<&mut Onode> {
        self.dirty_objs.insert((*c, o.clone()));
        let objs = self
            .st
            .colls
            .get_mut(c)
            .ok_or(Error::CollectionNotFound(*c))?;
        Ok(objs.entry(o.clone()).or_default())
    }

    fn take_onode(&mut self, c: &CollectionId, o: &ObjectKey) -> Option<Onode> {
        self.dirty_objs.insert((*c, o.clone()));
        let on = self.st.colls.get_mut(c)?.remove(o)?;
        for k in on.meta.omap.keys() {
            self.dirty_omap.insert((*c, o.clone(), k.clone()));
        }
        Some(on)
    }

    fn put_onode(&mut self, c: &CollectionId, o: &ObjectKey, on: Onode) {
        self.dirty_objs.insert((*c, o.clone()));
        for k in on.meta.omap.keys() {
            self.dirty_omap.insert((*c, o.clone(), k.clone()));
        }
        if let Some(objs) = self.st.colls.get_mut(c) {
            objs.insert(o.clone(), on);
        }
    }

    fn free_onode(&mut self, on: &Onode) {
        self.batch.frees.extend(on.extents.runs().map(|(_, r)| r));
    }

    fn op(&mut self, op: &Op) -> Result<()> {
        let c = op.collection();
        match op {
            Op::CreateCollection(_) => {
                self.st.colls.insert(c, BTreeMap::new());
                self.dirty_colls.insert(c);
            }
            Op::RemoveCollection(_) => {
                let keys: Vec<ObjectKey> = self
                    .st
                    .colls
                    .get(&c)
                    .map(|m| m.keys().cloned().collect())
                    .unwrap_or_default();
                for o in keys {
                    if let Some(on) = self.take_onode(&c, &o) {
                        self.free_onode(&on);
                    }
                }
                self.st.colls.remove(&c);
                self.dirty_colls.insert(c);
            }
            Op::SplitCollection { dst, bits, rem, .. } => {
                // The onodes move; their extents stay where they are.
                let moving: Vec<ObjectKey> = self
                    .st
                    .colls
                    .get(&c)
                    .map(|m| {
                        m.keys()
                            .filter(|k| crate::transaction::split_moves(k.hash, *bits, *rem))
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
                for o in moving {
                    if let Some(on) = self.take_onode(&c, &o) {
                        if let Some(old) = self.take_onode(dst, &o) {
                            self.free_onode(&old);
                        }
                        self.put_onode(dst, &o, on);
                    }
                }
            }
            Op::Touch(_, o) => {
                self.onode(&c, o)?;
            }
            Op::Write {
                oid, offset, data, ..
            } => self.write(&c, oid, *offset, data)?,
            Op::Zero {
                oid, offset, len, ..
            } => self.zero(&c, oid, *offset, *len)?,
            Op::Truncate { oid, size, .. } => self.truncate(&c, oid, *size)?,
            Op::Remove(_, o) => {
                if let Some(on) = self.take_onode(&c, o) {
                    self.free_onode(&on);
                }
            }
            Op::Clone { src, dst, .. } => self.clone_object(&c, src, dst)?,
            Op::CloneRange {
                src,
                dst,
                src_offset,
                len,
                dst_offset,
                ..
            } => {
                let bytes = self.read_object(&c, src, *src_offset, *len)?;
                self.write(&c, dst, *dst_offset, &bytes)?;
            }
            Op::Rename { src, dst, .. } => {
                if src != dst {
                    if let Some(old) = self.take_onode(&c, dst) {
                        self.free_onode(&old);
                    }
                    if let Some(on) = self.take_onode(&c, src) {
                        self.put_onode(&c, dst, on);
                    }
                }
            }
            Op::OmapSetKeys(_, o, kv) => {
                self.mark_omap(&c, o, kv.keys().cloned());
                self.onode(&c, o)?.meta.apply(op);
            }
            Op::OmapRemoveKeys(_, o, keys) => {
                self.mark_omap(&c, o, keys.iter().cloned());
                self.onode(&c, o)?.meta.apply(op);
            }
            Op::OmapRemoveRange {
                oid, start, end, ..
            } => {
                let doomed: Vec<Bytes> = self
                    .onode(&c, oid)?
                    .meta
                    .omap
                    .keys()
                    .filter(|k| *k >= start && *k < end)
                    .cloned()
                    .collect();
                self.mark_omap(&c, oid, doomed);
                self.onode(&c, oid)?.meta.apply(op);
            }
            Op::OmapClear(_, o) => {
                let all: Vec<Bytes> = self.onode(&c, o)?.meta.omap.keys().cloned().collect();
                self.mark_omap(&c, o, all);
                self.onode(&c, o)?.meta.apply(op);
            }
            Op::SetXattrs(_, o, _) | Op::RemoveXattr(_, o, _) | Op::OmapSetHeader(_, o, _) => {
                self.onode(&c, o)?.meta.apply(op);
            }
        }
        Ok(())
    }

    fn mark_omap(
        &mut self,
        c: &CollectionId,
        o: &ObjectKey,
        keys: impl IntoIterator<Item = Bytes>,
    ) {
        for k in keys {
            self.dirty_omap.insert((*c, o.clone(), k));
        }
    }

    fn read_object(
        &mut self,
        c: &CollectionId,
        o: &ObjectKey,
        off: u64,
        len: u64,
    ) -> Result<Bytes> {
        let st = &*self.st;
        let on = st
            .colls
            .get(c)
            .and_then(|m| m.get(o))
            .ok_or_else(|| Error::ObjectNotFound(*c, o.clone()))?;
        read_range(st, self.dev, self.counters, on, off, len)
    }

    /// Current contents of logical block `lb` of an object (zeros if unmapped).
    fn old_block(&self, on: &Onode, lb: u64, out: &mut [u8]) -> Result<()> {
        match on.extents.lookup(lb) {
            Some(m) => read_blocks(self.st, self.dev, self.counters, m.pblock, &[m.crc], out),
            None => {
                out.fill(0);
                Ok(())
            }
        }
    }

    fn write(&mut self, c: &CollectionId, o: &ObjectKey, off: u64, data: &[u8]) -> Result<()> {
        let end = off + data.len() as u64;
        let mut on = std::mem::take(self.onode(c, o)?);
        let r = self.write_onode(&mut on, off, data);
        on.size = on.size.max(end);
        *self.onode(c, o)? = on;
        r
    }

    fn write_onode(&mut self, on: &mut Onode, off: u64, data: &[u8]) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let end = off + data.len() as u64;
        let (lb0, lb1) = (off / B, end.div_ceil(B));
        if data.len() as u64 <= DEFERRED_BYTES_MAX && on.extents.all_mapped(lb0, lb1) {
            return self.write_deferred(on, off, data);
        }
        let n = lb1 - lb0;
        let mut abuf = AlignedBuf::new((n * B) as usize);
        let buf = abuf.as_mut_slice();
        if off % B != 0 {
            self.old_block(on, lb0, &mut buf[..BLOCK])?;
        }
        if end % B != 0 && (lb1 - 1 != lb0 || off % B == 0) {
            let at = buf.len() - BLOCK;
            self.old_block(on, lb1 - 1, &mut buf[at..])?;
        }
        let start = (off - lb0 * B) as usize;
        buf[start..start + data.len()].copy_from_slice(data);
        let crcs: Vec<u32> = buf.chunks(BLOCK).map(crc32c::crc32c).collect();
        let free = self.st.alloc.free_blocks();
        let runs = self.st.alloc.allocate(n).ok_or_else(|| no_space(n, free))?;
        self.batch.allocs.extend(&runs);
        let freed = on.extents.punch(lb0, lb1);
        self.batch.frees.extend(freed);
        // A small write to fresh blocks (a new object, an append) travels in
        // the journal record like an overwrite and is written in place after
        // it: one device sync for its group instead of two (copy-on-write data
        // must be durable before the record that points at it).
        let small = n * B <= DEFERRED_BYTES_MAX;
        let buf = abuf.into_bytes(0, (n * B) as usize);
        let mut lb = lb0;
        for (pb, len) in runs {
            let at = ((lb - lb0) * B) as usize;
            let part = buf.slice(at..at + (len * B) as usize);
            if small {
                self.put_deferred(pb, part);
            } else {
                self.put_data(pb, part);
            }
            let i = (lb - lb0) as usize;
            on.extents
                .insert(lb, pb, crcs[i..i + len as usize].to_vec());
            lb += len;
        }
        let counter = match small {
            true => &self.counters.deferred_writes,
            false => &self.counters.cow_writes,
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Whole blocks of new data for fresh blocks from `pb`: written by the caller once
    /// the state lock is released, read from the overlay until then.
    fn put_data(&mut self, pb: u64, bytes: Bytes) {
        for (i, blk) in (0..bytes.len()).step_by(BLOCK).enumerate() {
            let b = pb + i as u64;
            let seq = self.st.stage(b, bytes.slice(blk..blk + BLOCK));
            self.batch.landed.push((b, seq));
        }
        self.batch.data.push((pb, bytes));
    }

    /// Whole blocks of new data for fresh blocks from `pb`, carried by the journal
    /// record and written in place after it; read from the overlay until then.
    fn put_deferred(&mut self, pb: u64, bytes: Bytes) {
        for (i, blk) in (0..bytes.len()).step_by(BLOCK).enumerate() {
            let b = pb + i as u64;
            let blk = bytes.slice(blk..blk + BLOCK);
            let seq = self.st.stage(b, blk.clone());
            self.batch.deferred.push((seq, b, blk));
        }
    }

    fn write_deferred(&mut self, on: &mut Onode, off: u64, data: &[u8]) -> Result<()> {
        let end = off + data.len() as u64;
        for lb in off / B..end.div_ceil(B) {
            let mut blk = vec![0u8; BLOCK];
            let (bs, be) = (lb * B, lb * B + B);
            let (s, e) = (off.max(bs), end.min(be));
            if (s, e) != (bs, be) {
                // Only a part of the block changes: the rest comes from its current
                // contents. (A whole block is not read: the state lock is held here.)
                self.old_block(on, lb, &mut blk)?;
            }
            blk[(s - bs) as usize..(e - bs) as usize]
                .copy_from_slice(&data[(s - off) as usize..(e - off) as usize]);
            let crc = crc32c::crc32c(&blk);
            let Some(m) = on.extents.lookup(lb) else {
                return Err(Error::Corrupt("deferred write to an unmapped block".into()));
            };
            on.extents.set_crc(lb, crc);
            let blk = Bytes::from(blk);
            let seq = self.st.stage(m.pblock, blk.clone());
            self.batch.deferred.push((seq, m.pblock, blk));
        }
        self.counters
            .deferred_writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Write zeros over `[a, b)` in the blocks that are mapped (holes are zeros already).
    fn zero_partial(&mut self, on: &mut Onode, a: u64, b: u64) -> Result<()> {
        let mut at = a;
        while at < b {
            let stop = b.min((at / B + 1) * B);
            if on.extents.lookup(at / B).is_some() {
                self.write_onode(on, at, &vec![0u8; (stop - at) as usize])?;
            }
            at = stop;
        }
        Ok(())
    }

    fn zero(&mut self, c: &CollectionId, o: &ObjectKey, off: u64, len: u64) -> Result<()> {
        let mut on = std::mem::take(self.onode(c, o)?);
        let r = self.zero_onode(&mut on, off, off + len);
        on.size = on.size.max(off + len);
        *self.onode(c, o)? = on;
        r
    }

    fn zero_onode(&mut self, on: &mut Onode, off: u64, end: u64) -> Result<()> {
        // Bytes past the current size are zero already (tail invariant).
        let zend = end.min(on.size);
        if off >= zend {
            return Ok(());
        }
        let (full0, full1) = (off.div_ceil(B), zend / B);
        if full0 >= full1 {
            return self.zero_partial(on, off, zend);
        }
        let freed = on.extents.punch(full0, full1);
        self.batch.frees.extend(freed);
        self.zero_partial(on, off, full0 * B)?;
        self.zero_partial(on, full1 * B, zend)
    }

    fn truncate(&mut self, c: &CollectionId, o: &ObjectKey, size: u64) -> Result<()> {
        let mut on = std::mem::take(self.onode(c, o)?);
        let mut r = Ok(());
        if size < on.size {
            let keep = size.div_ceil(B);
            let freed = on.extents.punch(keep, u64::MAX);
            self.batch.frees.extend(freed);
            // Keep the tail invariant: bytes past the size in the last block are zero.
            let tail_end = (keep * B).min(on.size);
            r = self.zero_partial(&mut on, size, tail_end);
        }
        on.size = size;
        *self.onode(c, o)? = on;
        r
    }

    fn clone_object(&mut self, c: &CollectionId, src: &ObjectKey, dst: &ObjectKey) -> Result<()> {
        if src == dst {
            return Ok(());
        }
        let Some(s) = self.st.colls.get(c).and_then(|m| m.get(src)).cloned() else {
            return Err(Error::ObjectNotFound(*c, src.clone()));
        };
        if let Some(old) = self.take_onode(c, dst) {
            self.free_onode(&old);
        }
        let mut copy = Onode {
            size: s.size,
            extents: Default::default(),
            meta: s.meta.clone(),
        };
        for (lb, ext) in &s.extents.extents {
            let n = ext.len();
            let mut abuf = AlignedBuf::new((n * B) as usize);
            let buf = abuf.as_mut_slice();
            read_blocks(self.st, self.dev, self.counters, ext.pblock, &ext.crcs, buf)?;
            let free = self.st.alloc.free_blocks();
            let runs = self.st.alloc.allocate(n).ok_or_else(|| no_space(n, free))?;
            self.batch.allocs.extend(&runs);
            let buf = abuf.into_bytes(0, (n * B) as usize);
            let mut at = 0u64;
            for (pb, len) in runs {
                self.put_data(pb, buf.slice((at * B) as usize..((at + len) * B) as usize));
                copy.extents.insert(
                    lb + at,
                    pb,
                    ext.crcs[at as usize..(at + len) as usize].to_vec(),
                );
                at += len;
            }
        }
        self.put_onode(c, dst, copy);
        Ok(())
    }

    /// Turn the dirty sets into metadata puts and deletes.
    fn finish(&mut self) {
        for c in std::mem::take(&mut self.dirty_colls) {
            let k = c.to_bytes().to_vec();
            self.batch.kv.push(match self.st.colls.contains_key(&c) {
                true => KvOp::Put(COLLS, k, Vec::new()),
                false => KvOp::Del(COLLS, k),
            });
        }
        for (c, o) in std::mem::take(&mut self.dirty_objs) {
            let k = codec::object_key(&c, &o);
            self.batch
                .kv
                .push(match self.st.colls.get(&c).and_then(|m| m.get(&o)) {
                    Some(on) => KvOp::Put(
                        OBJECTS,
                        k,
                        ObjectRecord::encode(on.size, &on.extents, &on.meta),
                    ),
                    None => KvOp::Del(OBJECTS, k),
                });
        }
        for (c, o, key) in std::mem::take(&mut self.dirty_omap) {
            let mut k = codec::omap_prefix(&c, &o);
            k.extend_from_slice(&key);
            let v = self
                .st
                .colls
                .get(&c)
                .and_then(|m| m.get(&o))
                .and_then(|on| on.meta.omap.get(&key));
            self.batch.kv.push(match v {
                Some(v) => KvOp::Put(OMAP, k, v.to_vec()),
                None => KvOp::Del(OMAP, k),
            });
        }
    }
}

//! `MemStore`: every object in memory. For tests and memory-backed pools.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::objmeta::ObjMeta;
use crate::store::ObjectStore;
use crate::ticket::CommitTicket;
use crate::transaction::{Op, Transaction};
use crate::types::{CollectionId, Listing, ObjectKey, ObjectStat, StatFs};
use crate::validate::{View, validate};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct MemObject {
    data: Vec<u8>,
    meta: ObjMeta,
}

type Collections = BTreeMap<CollectionId, BTreeMap<ObjectKey, MemObject>>;

impl View for Collections {
    fn has_collection(&self, c: &CollectionId) -> bool {
        self.contains_key(c)
    }
    fn has_object(&self, c: &CollectionId, o: &ObjectKey) -> bool {
        self.get(c).is_some_and(|objs| objs.contains_key(o))
    }
}

/// An object store held entirely in memory; every transaction is durable at once
/// (there is nothing to crash to).
#[derive(Debug, Default)]
pub struct MemStore {
    colls: RwLock<Collections>,
    /// Capacity reported by `statfs`.
    capacity_bytes: u64,
}

impl MemStore {
    /// An empty store reporting `capacity_bytes` in `statfs`.
    pub fn new(capacity_bytes: u64) -> Self {
        Self {
            colls: RwLock::new(BTreeMap::new()),
            capacity_bytes,
        }
    }

    /// A copy of everything in the store, sharing nothing with it.
    pub fn snapshot(&self) -> MemStore {
        Self {
            colls: RwLock::new(self.read_lock().clone()),
            capacity_bytes: self.capacity_bytes,
        }
    }

    fn read_lock(&self) -> RwLockReadGuard<'_, Collections> {
        self.colls.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_lock(&self) -> RwLockWriteGuard<'_, Collections> {
        self.colls.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn with_object<T>(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        f: impl FnOnce(&MemObject) -> T,
    ) -> Result<T> {
        let colls = self.read_lock();
        let objs = colls.get(c).ok_or(Error::CollectionNotFound(*c))?;
        let obj = objs
            .get(o)
            .ok_or_else(|| Error::ObjectNotFound(*c, o.clone()))?;
        Ok(f(obj))
    }
}

fn write_at(data: &mut Vec<u8>, offset: usize, bytes: &[u8]) {
    let end = offset + bytes.len();
    if data.len() < end {
        data.resize(end, 0);
    }
    data[offset..end].copy_from_slice(bytes);
}

/// Bytes `[offset, offset+len)` of `data`, zeros past its end.
fn read_padded(data: &[u8], offset: usize, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    if offset < data.len() {
        let n = (data.len() - offset).min(len);
        out[..n].copy_from_slice(&data[offset..offset + n]);
    }
    out
}

// Offsets were validated against OBJECT_SIZE_MAX (1 TiB), which fits usize on 64-bit.
fn us(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// The end offset an op may grow an object to.
fn op_end(op: &Op) -> u64 {
    match op {
        Op::Write { offset, data, .. } => offset + data.len() as u64,
        Op::Zero { offset, len, .. } => offset + len,
        Op::Truncate { size, .. } => *size,
        Op::CloneRange {
            dst_offset, len, ..
        } => dst_offset + len,
        _ => 0,
    }
}

fn apply_op(colls: &mut Collections, op: &Op) {
    let c = op.collection();
    match op {
        Op::CreateCollection(_) => {
            colls.insert(c, BTreeMap::new());
            return;
        }
        Op::RemoveCollection(_) => {
            colls.remove(&c);
            return;
        }
        _ => {}
    }
    // Validation guarantees the collection exists.
    let Some(objs) = colls.get_mut(&c) else {
        return;
    };
    match op {
        Op::Remove(_, o) => {
            objs.remove(o);
        }
        Op::Clone { src, dst, .. } => {
            if let Some(s) = objs.get(src).cloned() {
                objs.insert(dst.clone(), s);
            }
        }
        Op::Rename { src, dst, .. } => {
            if let Some(s) = objs.remove(src) {
                objs.insert(dst.clone(), s);
            }
        }
        Op::CloneRange {
            src,
            dst,
            src_offset,
            len,
            dst_offset,
            ..
        } => {
            let bytes = objs
                .get(src)
                .map(|s| read_padded(&s.data, us(*src_offset), us(*len)));
            if let Some(bytes) = bytes {
                write_at(
                    &mut objs.entry(dst.clone()).or_default().data,
                    us(*dst_offset),
                    &bytes,
                );
            }
        }
        Op::Write {
            oid, offset, data, ..
        } => {
            write_at(
                &mut objs.entry(oid.clone()).or_default().data,
                us(*offset),
                data,
            );
        }
        Op::Zero {
            oid, offset, len, ..
        } => {
            let obj = objs.entry(oid.clone()).or_default();
            let end = us(*offset + *len);
            if obj.data.len() < end {
                obj.data.resize(end, 0);
            }
            obj.data[us(*offset)..end].fill(0);
        }
        Op::Truncate { oid, size, .. } => {
            objs.entry(oid.clone())
                .or_default()
                .data
                .resize(us(*size), 0);
        }
        Op::Touch(_, o) => {
            objs.entry(o.clone()).or_default();
        }
        Op::SetXattrs(_, o, _)
        | Op::RemoveXattr(_, o, _)
        | Op::OmapSetKeys(_, o, _)
        | Op::OmapRemoveKeys(_, o, _)
        | Op::OmapClear(_, o)
        | Op::OmapSetHeader(_, o, _)
        | Op::OmapRemoveRange { oid: o, .. } => {
            objs.entry(o.clone()).or_default().meta.apply(op);
        }
        Op::CreateCollection(_) | Op::RemoveCollection(_) => {}
    }
}

impl ObjectStore for MemStore {
    fn queue_transaction(&self, txn: Transaction) -> Result<CommitTicket> {
        let mut colls = self.write_lock();
        validate(&*colls, &txn)?;
        // Objects are dense in memory: refuse any op that would grow one past capacity.
        let largest_end = txn.ops().iter().map(op_end).max().unwrap_or(0);
        if largest_end > self.capacity_bytes {
            return Err(Error::NoSpace {
                needed_bytes: largest_end,
                free_bytes: self.capacity_bytes,
            });
        }
        for op in txn.ops() {
            apply_op(&mut colls, op);
        }
        Ok(CommitTicket::done())
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn list_collections(&self) -> Result<Vec<CollectionId>> {
        Ok(self.read_lock().keys().copied().collect())
    }

    fn collection_exists(&self, c: &CollectionId) -> Result<bool> {
        Ok(self.read_lock().contains_key(c))
    }

    fn list_objects(
        &self,
        c: &CollectionId,
        start: Option<&ObjectKey>,
        max: usize,
    ) -> Result<Listing> {
        let colls = self.read_lock();
        let objs = colls.get(c).ok_or(Error::CollectionNotFound(*c))?;
        let lower = start.map_or(Bound::Unbounded, Bound::Included);
        let mut it = objs
            .range::<ObjectKey, _>((lower, Bound::Unbounded))
            .map(|(k, _)| k);
        let objects: Vec<ObjectKey> = it.by_ref().take(max).cloned().collect();
        Ok(Listing {
            objects,
            next: it.next().cloned(),
        })
    }

    fn exists(&self, c: &CollectionId, o: &ObjectKey) -> Result<bool> {
        let colls = self.read_lock();
        Ok(colls
            .get(c)
            .ok_or(Error::CollectionNotFound(*c))?
            .contains_key(o))
    }

    fn stat(&self, c: &CollectionId, o: &ObjectKey) -> Result<ObjectStat> {
        self.with_object(c, o, |obj| ObjectStat {
            size: obj.data.len() as u64,
            allocated_bytes: obj.data.len() as u64,
        })
    }

    fn read(&self, c: &CollectionId, o: &ObjectKey, offset: u64, len: u64) -> Result<Bytes> {
        self.with_object(c, o, |obj| {
            let n = crate::validate::check_read(obj.data.len() as u64, offset, len)?;
            let start = us(offset);
            Ok(Bytes::copy_from_slice(
                &obj.data[start.min(obj.data.len())..][..us(n)],
            ))
        })?
    }

    fn getxattr(&self, c: &CollectionId, o: &ObjectKey, name: &str) -> Result<Option<Bytes>> {
        self.with_object(c, o, |obj| obj.meta.xattrs.get(name).cloned())
    }

    fn getxattrs(&self, c: &CollectionId, o: &ObjectKey) -> Result<BTreeMap<String, Bytes>> {
        self.with_object(c, o, |obj| obj.meta.xattrs.clone())
    }

    fn omap_get_header(&self, c: &CollectionId, o: &ObjectKey) -> Result<Bytes> {
        self.with_object(c, o, |obj| obj.meta.omap_header.clone())
    }

    fn omap_get_values(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        keys: &[Bytes],
    ) -> Result<BTreeMap<Bytes, Bytes>> {
        self.with_object(c, o, |obj| {
            keys.iter()
                .filter_map(|k| obj.meta.omap.get(k).map(|v| (k.clone(), v.clone())))
                .collect()
        })
    }

    fn omap_range(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        max: usize,
    ) -> Result<Vec<(Bytes, Bytes)>> {
        self.with_object(c, o, |obj| obj.meta.range(start, end, max))
    }

    fn statfs(&self) -> Result<StatFs> {
        let colls = self.read_lock();
        let mut fs = StatFs {
            total_bytes: self.capacity_bytes,
            collections: colls.len() as u64,
            ..StatFs::default()
        };
        for obj in colls.values().flat_map(|o| o.values()) {
            fs.objects += 1;
            fs.stored_bytes += obj.data.len() as u64;
        }
        fs.free_bytes = self.capacity_bytes.saturating_sub(fs.stored_bytes);
        Ok(fs)
    }
}

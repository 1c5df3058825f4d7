//! `MemStore`: every object in memory. For tests and memory-backed pools.
//! Object data is a rope of shared buffers (`crate::rope`): a large write
//! keeps the buffer it came in, a read hands out a slice of it. Space
//! figures are kept as changes apply, so `statfs` costs nothing.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::objmeta::ObjMeta;
use crate::rope::Rope;
use crate::store::ObjectStore;
use crate::ticket::CommitTicket;
use crate::transaction::{Op, Transaction};
use crate::types::{CollectionId, Listing, ObjectKey, ObjectStat, StatFs};
use crate::validate::{View, validate};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct MemObject {
    data: Rope,
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
    /// Objects held (kept as transactions apply).
    objects: AtomicU64,
    /// Sum of the objects' sizes (kept as transactions apply).
    stored_bytes: AtomicU64,
}

impl MemStore {
    /// An empty store reporting `capacity_bytes` in `statfs`.
    pub fn new(capacity_bytes: u64) -> Self {
        Self {
            colls: RwLock::new(BTreeMap::new()),
            capacity_bytes,
            objects: AtomicU64::new(0),
            stored_bytes: AtomicU64::new(0),
        }
    }

    /// A copy of everything in the store, sharing nothing with it.
    pub fn snapshot(&self) -> MemStore {
        Self {
            colls: RwLock::new(self.read_lock().clone()),
            capacity_bytes: self.capacity_bytes,
            objects: AtomicU64::new(self.objects.load(Ordering::Relaxed)),
            stored_bytes: AtomicU64::new(self.stored_bytes.load(Ordering::Relaxed)),
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
            // Past the source's end reads as zeros.
            let bytes = objs.get(src).map(|s| {
                let size = s.data.len();
                let from = (*src_offset).min(size);
                let have = s.data.read(from, (*len).min(size - from));
                let mut out = bytes::BytesMut::zeroed(us(*len));
                out[..have.len()].copy_from_slice(&have);
                out.freeze()
            });
            if let Some(bytes) = bytes {
                objs.entry(dst.clone())
                    .or_default()
                    .data
                    .write(*dst_offset, &bytes);
            }
        }
        Op::Write {
            oid, offset, data, ..
        } => {
            objs.entry(oid.clone())
                .or_default()
                .data
                .write(*offset, data);
        }
        Op::Zero {
            oid, offset, len, ..
        } => {
            objs.entry(oid.clone())
                .or_default()
                .data
                .zero(*offset, *len);
        }
        Op::Truncate { oid, size, .. } => {
            objs.entry(oid.clone()).or_default().data.truncate(*size);
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

/// What an op may change the space figures of: the object counts and
/// sizes of its collection before it applies (every object of a removed
/// collection; the source and destination of a rename or clone).
struct Touched {
    objects: u64,
    bytes: u64,
    keys: Vec<(CollectionId, ObjectKey)>,
}

fn touched(colls: &Collections, op: &Op) -> Touched {
    let c = op.collection();
    let keys: Vec<(CollectionId, ObjectKey)> = match op {
        Op::RemoveCollection(_) => colls
            .get(&c)
            .map(|objs| objs.keys().map(|k| (c, k.clone())).collect())
            .unwrap_or_default(),
        Op::CreateCollection(_) => Vec::new(),
        Op::Clone { src, dst, .. } | Op::Rename { src, dst, .. } => {
            vec![(c, src.clone()), (c, dst.clone())]
        }
        Op::CloneRange { dst, .. } => vec![(c, dst.clone())],
        Op::Touch(_, o)
        | Op::Remove(_, o)
        | Op::Write { oid: o, .. }
        | Op::Zero { oid: o, .. }
        | Op::Truncate { oid: o, .. }
        | Op::SetXattrs(_, o, _)
        | Op::RemoveXattr(_, o, _)
        | Op::OmapSetKeys(_, o, _)
        | Op::OmapRemoveKeys(_, o, _)
        | Op::OmapClear(_, o)
        | Op::OmapSetHeader(_, o, _)
        | Op::OmapRemoveRange { oid: o, .. } => vec![(c, o.clone())],
    };
    let (objects, bytes) = sizes(colls, &keys);
    Touched {
        objects,
        bytes,
        keys,
    }
}

/// How many of `keys` exist, and their total size.
fn sizes(colls: &Collections, keys: &[(CollectionId, ObjectKey)]) -> (u64, u64) {
    keys.iter()
        .filter_map(|(c, k)| colls.get(c)?.get(k))
        .fold((0, 0), |(n, b), o| (n + 1, b + o.data.len()))
}

impl MemStore {
    /// Moves the space figures by what one op changed.
    fn account(&self, colls: &Collections, before: Touched) {
        let (objects, bytes) = sizes(colls, &before.keys);
        let moved = |a: &AtomicU64, was: u64, now: u64| {
            if now >= was {
                a.fetch_add(now - was, Ordering::Relaxed);
            } else {
                a.fetch_sub(was - now, Ordering::Relaxed);
            }
        };
        moved(&self.objects, before.objects, objects);
        moved(&self.stored_bytes, before.bytes, bytes);
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
            let touched = touched(&colls, op);
            apply_op(&mut colls, op);
            self.account(&colls, touched);
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
            size: obj.data.len(),
            allocated_bytes: obj.data.len(),
        })
    }

    fn read(&self, c: &CollectionId, o: &ObjectKey, offset: u64, len: u64) -> Result<Bytes> {
        self.with_object(c, o, |obj| {
            let n = crate::validate::check_read(obj.data.len(), offset, len)?;
            Ok(obj.data.read(offset.min(obj.data.len()), n))
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
        let collections = self.read_lock().len() as u64;
        let stored_bytes = self.stored_bytes.load(Ordering::Relaxed);
        Ok(StatFs {
            total_bytes: self.capacity_bytes,
            collections,
            objects: self.objects.load(Ordering::Relaxed),
            stored_bytes,
            free_bytes: self.capacity_bytes.saturating_sub(stored_bytes),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recount(s: &MemStore) -> (u64, u64) {
        let colls = s.read_lock();
        colls
            .values()
            .flat_map(|o| o.values())
            .fold((0, 0), |(n, b), o| (n + 1, b + o.data.len()))
    }

    #[test]
    fn statfs_follows_every_kind_of_change_without_a_walk() {
        let s = MemStore::new(1 << 30);
        let (c, d) = (CollectionId::new(1, 0), CollectionId::new(1, 1));
        let k = |i: u32| ObjectKey::new(i, format!("o{i}"));
        let mut t = Transaction::new();
        t.create_collection(c).create_collection(d);
        for i in 0..6 {
            t.write(c, k(i), u64::from(i) * 100, Bytes::from(vec![1u8; 1000]));
        }
        t.write(d, k(9), 0, Bytes::from(vec![2u8; 70_000]));
        s.apply_transaction(t).expect("apply");
        let step = |f: &dyn Fn(&mut Transaction)| {
            let mut t = Transaction::new();
            f(&mut t);
            t
        };
        let steps = [
            step(&|t| {
                t.truncate(c, k(0), 10);
            }),
            step(&|t| {
                t.zero(c, k(1), 5000, 10);
            }),
            step(&|t| {
                t.clone_object(c, k(2), k(20));
            }),
            step(&|t| {
                t.clone_object(c, k(3), k(2));
            }),
            step(&|t| {
                t.rename(c, k(4), k(40));
            }),
            step(&|t| {
                t.rename(c, k(5), k(40));
            }),
            step(&|t| {
                t.remove(c, k(20));
            }),
            step(&|t| {
                t.touch(c, k(7));
            }),
            step(&|t| {
                t.clone_range(c, k(40), k(8), 0, 50_000, 10);
            }),
            step(&|t| {
                t.remove_collection(d);
            }),
        ];
        for (i, t) in steps.into_iter().enumerate() {
            s.apply_transaction(t).expect("apply");
            let fs = s.statfs().expect("statfs");
            assert_eq!((fs.objects, fs.stored_bytes), recount(&s), "after step {i}");
            assert_eq!(fs.free_bytes, (1 << 30) - fs.stored_bytes);
        }
    }
}

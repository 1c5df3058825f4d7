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

/// How one op moved the store's object count and stored bytes.
#[derive(Debug, Default, Clone, Copy)]
struct Delta {
    objects: i64,
    bytes: i64,
}

impl Delta {
    fn removed(o: &MemObject) -> Delta {
        Delta {
            objects: -1,
            bytes: -(o.data.len() as i64),
        }
    }

    fn add(self, other: Delta) -> Delta {
        Delta {
            objects: self.objects + other.objects,
            bytes: self.bytes + other.bytes,
        }
    }
}

/// The object `o`, created if absent (without cloning its key when present),
/// and whether it was created.
fn object_mut<'a>(
    objs: &'a mut BTreeMap<ObjectKey, MemObject>,
    o: &ObjectKey,
) -> (&'a mut MemObject, bool) {
    let created = !objs.contains_key(o);
    if created {
        objs.insert(o.clone(), MemObject::default());
    }
    match objs.get_mut(o) {
        Some(obj) => (obj, created),
        // Inserted just above.
        None => unreachable!("object {o} vanished"),
    }
}

/// Applies `f` to object `o` (created if absent) and says how the figures moved.
fn change(
    objs: &mut BTreeMap<ObjectKey, MemObject>,
    o: &ObjectKey,
    f: impl FnOnce(&mut MemObject),
) -> Delta {
    let (obj, created) = object_mut(objs, o);
    let before = obj.data.len();
    f(obj);
    Delta {
        objects: i64::from(created),
        bytes: obj.data.len() as i64 - before as i64,
    }
}

fn apply_op(colls: &mut Collections, op: &Op) -> Delta {
    let c = op.collection();
    match op {
        Op::CreateCollection(_) => {
            colls.insert(c, BTreeMap::new());
            return Delta::default();
        }
        Op::SplitCollection { dst, bits, rem, .. } => {
            let moving: Vec<ObjectKey> = colls
                .get(&c)
                .map(|objs| {
                    objs.keys()
                        .filter(|k| crate::transaction::split_moves(k.hash, *bits, *rem))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            let mut delta = Delta::default();
            for k in moving {
                let Some(obj) = colls.get_mut(&c).and_then(|objs| objs.remove(&k)) else {
                    continue;
                };
                delta = delta.add(Delta::removed(&obj));
                if let Some(to) = colls.get_mut(dst) {
                    delta = delta.add(replace(to, &k, obj));
                }
            }
            return delta;
        }
        Op::RemoveCollection(_) => {
            return colls
                .remove(&c)
                .map(|objs| {
                    objs.values()
                        .map(Delta::removed)
                        .fold(Delta::default(), Delta::add)
                })
                .unwrap_or_default();
        }
        _ => {}
    }
    // Validation guarantees the collection exists.
    let Some(objs) = colls.get_mut(&c) else {
        return Delta::default();
    };
    match op {
        Op::Remove(_, o) => objs
            .remove(o)
            .map(|o| Delta::removed(&o))
            .unwrap_or_default(),
        Op::Clone { src, dst, .. } => match objs.get(src).cloned() {
            Some(s) => replace(objs, dst, s),
            None => Delta::default(),
        },
        Op::Rename { src, dst, .. } => match objs.remove(src) {
            Some(s) => Delta::removed(&s).add(replace(objs, dst, s)),
            None => Delta::default(),
        },
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
            match bytes {
                Some(bytes) => change(objs, dst, |d| d.data.write(*dst_offset, &bytes)),
                None => Delta::default(),
            }
        }
        Op::Write {
            oid, offset, data, ..
        } => change(objs, oid, |o| o.data.write(*offset, data)),
        Op::Zero {
            oid, offset, len, ..
        } => change(objs, oid, |o| o.data.zero(*offset, *len)),
        Op::Truncate { oid, size, .. } => change(objs, oid, |o| o.data.truncate(*size)),
        Op::Touch(_, o) => change(objs, o, |_| {}),
        Op::SetXattrs(_, o, _)
        | Op::RemoveXattr(_, o, _)
        | Op::OmapSetKeys(_, o, _)
        | Op::OmapRemoveKeys(_, o, _)
        | Op::OmapClear(_, o)
        | Op::OmapSetHeader(_, o, _)
        | Op::OmapRemoveRange { oid: o, .. } => change(objs, o, |obj| {
            obj.meta.apply(op);
        }),
        Op::CreateCollection(_) | Op::RemoveCollection(_) | Op::SplitCollection { .. } => {
            Delta::default()
        }
    }
}

/// Puts `obj` at `dst`, replacing what was there.
fn replace(objs: &mut BTreeMap<ObjectKey, MemObject>, dst: &ObjectKey, obj: MemObject) -> Delta {
    let added = Delta {
        objects: 1,
        bytes: obj.data.len() as i64,
    };
    match objs.insert(dst.clone(), obj) {
        Some(old) => added.add(Delta::removed(&old)),
        None => added,
    }
}

impl MemStore {
    /// Moves the space figures by what one op changed.
    fn account(&self, d: Delta) {
        let moved = |a: &AtomicU64, by: i64| {
            if by >= 0 {
                a.fetch_add(by.unsigned_abs(), Ordering::Relaxed);
            } else {
                a.fetch_sub(by.unsigned_abs(), Ordering::Relaxed);
            }
        };
        moved(&self.objects, d.objects);
        moved(&self.stored_bytes, d.bytes);
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
            let delta = apply_op(&mut colls, op);
            self.account(delta);
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

    fn allocated(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        offset: u64,
        len: u64,
    ) -> Result<Vec<(u64, u64)>> {
        self.with_object(c, o, |obj| {
            let end = offset.saturating_add(len).min(obj.data.len());
            obj.data.allocated(offset, end)
        })
    }

    fn getxattrs(&self, c: &CollectionId, o: &ObjectKey) -> Result<BTreeMap<String, Bytes>> {
        self.with_object(c, o, |obj| {
            obj.meta
                .xattrs
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
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

//! Rollback of an erasure-coded shard's changes (Ceph's EC rollback info).
//!
//! A change that reaches fewer than `k` shards cannot be decoded, and the
//! shards that have it must return to the version before it; so must
//! every shard when peering picks an older log. A shard therefore keeps,
//! for each change it applies and until the primary says every member has
//! it ("rolled forward"), what the change overwrote: a hidden *stash*
//! object per (version, object), made in the change's own transaction from
//! the shard's state just before it:
//!
//! - the object did not exist: an empty stash (rollback removes it);
//! - the change removes or replaces the object: the object itself, renamed
//!   to the stash (rollback renames it back) — no data is copied;
//! - otherwise: the bytes of the shard the change overwrites or cuts
//!   (cloned at the same offsets), the old length, every xattr, and the
//!   checksums of the chunks those bytes belong to.
//!
//! The record (xattr [`RECORD_XATTR`] of the stash) says which. Stashes are
//! named `\0rb.` + version + the object's hash and name, so they are
//! hidden from listings and scrub, and list in version order.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use bytes::Bytes;
use shoal_objectstore::{
    CollectionId, Error as StoreError, ObjectKey, ObjectStore, Op, Transaction,
};

use super::crc_key;
use crate::log::Version;

/// Name prefix of stash objects.
pub const STASH_PREFIX: &[u8] = b"\0rb.";
/// The stash's record xattr.
pub const RECORD_XATTR: &str = "_rb";
const RECORD_FORMAT: u8 = 1;

/// The stash of the change `version` to `key`.
pub fn stash_key(version: Version, key: &ObjectKey) -> ObjectKey {
    let mut tag = [0u8; 12];
    tag[..4].copy_from_slice(&version.epoch.to_be_bytes());
    tag[4..].copy_from_slice(&version.v.to_be_bytes());
    crate::object::hidden_key(STASH_PREFIX, &tag, key)
}

/// The version a stash key belongs to (`None`: not a stash).
pub fn stash_version(key: &ObjectKey) -> Option<Version> {
    let rest = key.name.strip_prefix(STASH_PREFIX)?;
    if key.hash != 0 || rest.len() < 16 {
        return None;
    }
    let epoch = u32::from_be_bytes(rest[..4].try_into().ok()?);
    let v = u64::from_be_bytes(rest[4..12].try_into().ok()?);
    Some(Version { epoch, v })
}

/// The object a stash key keeps the change of (`None`: not a stash).
pub fn stashed_key(stash: &ObjectKey) -> Option<ObjectKey> {
    let rest = stash.name.strip_prefix(STASH_PREFIX)?.get(12..)?;
    let hash = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?);
    Some(ObjectKey {
        hash,
        name: rest.get(4..)?.to_vec(),
        snap: stash.snap,
    })
}

/// The object `op` changes (a clone's destination; `None` for ops on
/// collections).
pub fn changed_key(op: &Op) -> Option<&ObjectKey> {
    match op {
        Op::Touch(_, o)
        | Op::Remove(_, o)
        | Op::SetXattrs(_, o, _)
        | Op::RemoveXattr(_, o, _)
        | Op::OmapSetKeys(_, o, _)
        | Op::OmapRemoveKeys(_, o, _)
        | Op::OmapClear(_, o)
        | Op::OmapSetHeader(_, o, _) => Some(o),
        Op::Write { oid, .. }
        | Op::Zero { oid, .. }
        | Op::Truncate { oid, .. }
        | Op::OmapRemoveRange { oid, .. } => Some(oid),
        Op::Clone { dst, .. } | Op::CloneRange { dst, .. } | Op::Rename { dst, .. } => Some(dst),
        _ => None,
    }
}

/// Every stash in `coll`, by version.
pub fn list_stashes(
    store: &dyn ObjectStore,
    coll: CollectionId,
) -> shoal_objectstore::Result<BTreeMap<Version, Vec<ObjectKey>>> {
    let mut out: BTreeMap<Version, Vec<ObjectKey>> = BTreeMap::new();
    let mut cursor = Some(ObjectKey::new(0, STASH_PREFIX.to_vec()));
    while let Some(c) = cursor {
        let page = store.list_objects(&coll, Some(&c), 256)?;
        let mut done = false;
        for k in page.objects {
            match stash_version(&k) {
                Some(v) => out.entry(v).or_default().push(k),
                None if k.hash == 0 && k.name.as_slice() < STASH_PREFIX => {}
                None => {
                    done = true;
                    break;
                }
            }
        }
        cursor = page.next.filter(|_| !done);
    }
    Ok(out)
}

/// What a stash holds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    /// The object existed before the change.
    existed: bool,
    /// The stash is the old object itself.
    whole: bool,
    /// The shard's old length.
    old_len: u64,
    /// Shard byte ranges the stash holds (at their own offsets).
    ranges: Vec<(u64, u64)>,
    /// Stripe runs whose chunk checksums the stash holds in its omap
    /// (the last run may end at `u64::MAX`: every stripe past its start).
    stripes: Vec<(u64, u64)>,
}

impl Record {
    fn encode(&self) -> Bytes {
        let mut v = vec![RECORD_FORMAT, u8::from(self.existed), u8::from(self.whole)];
        v.extend_from_slice(&self.old_len.to_le_bytes());
        for list in [&self.ranges, &self.stripes] {
            v.extend_from_slice(&(list.len() as u32).to_le_bytes());
            for (a, b) in list {
                v.extend_from_slice(&a.to_le_bytes());
                v.extend_from_slice(&b.to_le_bytes());
            }
        }
        Bytes::from(v)
    }

    fn decode(b: &[u8]) -> Result<Record, String> {
        let bad = || format!("rollback record of {} bytes is damaged", b.len());
        let &[format, existed, whole, ..] = b else {
            return Err(bad());
        };
        if format != RECORD_FORMAT {
            return Err(format!(
                "rollback record format {format} is not {RECORD_FORMAT}"
            ));
        }
        let u64_at = |at: usize| {
            b.get(at..at + 8)
                .and_then(|s| s.try_into().ok())
                .map(u64::from_le_bytes)
        };
        let old_len = u64_at(3).ok_or_else(bad)?;
        let mut at = 11;
        let mut lists = [Vec::new(), Vec::new()];
        for list in &mut lists {
            let n = b
                .get(at..at + 4)
                .and_then(|s| s.try_into().ok())
                .map(u32::from_le_bytes)
                .ok_or_else(bad)? as usize;
            at += 4;
            if n > b.len() / 16 {
                return Err(bad());
            }
            for _ in 0..n {
                let pair = u64_at(at).zip(u64_at(at + 8)).ok_or_else(bad)?;
                list.push(pair);
                at += 16;
            }
        }
        if at != b.len() {
            return Err(bad());
        }
        let [ranges, stripes] = lists;
        Ok(Record {
            existed: existed != 0,
            whole: whole != 0,
            old_len,
            ranges,
            stripes,
        })
    }
}

/// Sorted, merged `[start, end)` ranges.
fn merge(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.retain(|(a, b)| a < b);
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

fn omap_in(
    store: &dyn ObjectStore,
    coll: &CollectionId,
    key: &ObjectKey,
    (a, b): (u64, u64),
) -> shoal_objectstore::Result<Vec<(Bytes, Bytes)>> {
    let (start, end) = (crc_key(a), crc_key(b));
    let end = if b == u64::MAX {
        Bound::Unbounded
    } else {
        Bound::Excluded(&end[..])
    };
    store.omap_range(coll, key, Bound::Included(&start[..]), end, usize::MAX)
}

/// Makes change `version` to `key` on this shard undoable: returns `txn`
/// with the stash's making put first (`unit`: the stripe unit, the bytes
/// of one chunk).
pub fn stash(
    store: &dyn ObjectStore,
    coll: CollectionId,
    key: &ObjectKey,
    version: Version,
    unit: u64,
    txn: Transaction,
) -> shoal_objectstore::Result<Transaction> {
    let s = stash_key(version, key);
    let mut out = Transaction::new();
    let existed = store.exists(&coll, key)?;
    let on_key = |op: &Op| changed_key(op) == Some(key);
    let mut removes = txn
        .ops()
        .iter()
        .filter(|op| on_key(op))
        .take_while(|op| matches!(op, Op::Remove(..)))
        .count();
    // A snapshot's clone of the object is made from it within the change:
    // a removal then keeps a copy, the object staying for the clone.
    let read_within = txn
        .ops()
        .iter()
        .any(|op| matches!(op, Op::Clone { src, .. } | Op::CloneRange { src, .. } if src == key));
    let record = if !existed {
        out.touch(coll, s.clone());
        Record {
            existed: false,
            whole: false,
            old_len: 0,
            ranges: Vec::new(),
            stripes: Vec::new(),
        }
    } else if removes > 0 {
        // The change removes (or replaces) the object: keep it whole.
        if read_within {
            out.clone_object(coll, key.clone(), s.clone());
            removes = 0;
        } else {
            out.rename(coll, key.clone(), s.clone());
        }
        Record {
            existed: true,
            whole: true,
            old_len: 0,
            ranges: Vec::new(),
            stripes: Vec::new(),
        }
    } else {
        let old_len = store.stat(&coll, key)?.size;
        let mut ranges = Vec::new();
        for op in txn.ops().iter().filter(|op| on_key(op)) {
            match op {
                Op::Write { offset, data, .. } => {
                    ranges.push((*offset, offset.saturating_add(data.len() as u64)));
                }
                Op::Zero { offset, len, .. } => ranges.push((*offset, offset.saturating_add(*len))),
                Op::Truncate { size, .. } => ranges.push((*size, old_len)),
                _ => {}
            }
        }
        let ranges: Vec<(u64, u64)> = merge(
            ranges
                .into_iter()
                .map(|(a, b)| (a.min(old_len), b.min(old_len)))
                .collect(),
        );
        let unit = unit.max(1);
        let mut stripes: Vec<(u64, u64)> = ranges
            .iter()
            .map(|(a, b)| (a / unit, b.div_ceil(unit)))
            .collect();
        stripes.push((old_len / unit, u64::MAX));
        let stripes = merge(stripes);
        out.touch(coll, s.clone());
        for (a, b) in &ranges {
            out.clone_range(coll, key.clone(), s.clone(), *a, b - a, *a);
        }
        let mut crcs = BTreeMap::new();
        for run in &stripes {
            crcs.extend(omap_in(store, &coll, key, *run)?);
        }
        if !crcs.is_empty() {
            out.omap_set_keys(coll, s.clone(), crcs);
        }
        let xattrs = store.getxattrs(&coll, key)?;
        if !xattrs.is_empty() {
            out.set_xattrs(coll, s.clone(), xattrs);
        }
        Record {
            existed: true,
            whole: false,
            old_len,
            ranges,
            stripes,
        }
    };
    out.set_xattr(coll, s, RECORD_XATTR, record.encode());
    let mut skipped = 0;
    for op in txn.ops() {
        if record.whole && skipped < removes && on_key(op) {
            skipped += 1;
            continue;
        }
        out.push(op.clone());
    }
    Ok(out)
}

/// The shard's view of an object while a run of rollbacks is planned:
/// whether it exists and which xattrs it has, after the rollbacks so far.
#[derive(Debug, Clone)]
pub struct Undoing {
    exists: bool,
    xattrs: BTreeSet<String>,
}

impl Undoing {
    /// The object as the store has it now.
    pub fn now(
        store: &dyn ObjectStore,
        coll: &CollectionId,
        key: &ObjectKey,
    ) -> shoal_objectstore::Result<Undoing> {
        let exists = store.exists(coll, key)?;
        let xattrs = if exists {
            store.getxattrs(coll, key)?.into_keys().collect()
        } else {
            BTreeSet::new()
        };
        Ok(Undoing { exists, xattrs })
    }
}

/// Why a change cannot be rolled back here.
#[derive(Debug, thiserror::Error)]
pub enum RollbackError {
    /// No stash: the change was rolled forward (or never stashed).
    #[error("no rollback kept for the change")]
    NoStash,
    /// The store failed, or the stash is damaged.
    #[error("{0}")]
    Store(String),
}

impl From<StoreError> for RollbackError {
    fn from(e: StoreError) -> Self {
        RollbackError::Store(e.to_string())
    }
}

/// Appends to `txn` what undoes change `version` to `key` on this shard
/// (the newest change not yet undone), and consumes its stash; `state`
/// follows the object.
pub fn undo(
    store: &dyn ObjectStore,
    coll: CollectionId,
    key: &ObjectKey,
    version: Version,
    state: &mut Undoing,
    txn: &mut Transaction,
) -> Result<(), RollbackError> {
    let s = stash_key(version, key);
    if !store.exists(&coll, &s)? {
        return Err(RollbackError::NoStash);
    }
    let raw = store
        .getxattr(&coll, &s, RECORD_XATTR)?
        .ok_or(RollbackError::NoStash)?;
    let r = Record::decode(&raw).map_err(RollbackError::Store)?;
    let mut old_xattrs = store.getxattrs(&coll, &s)?;
    old_xattrs.remove(RECORD_XATTR);
    if !r.existed {
        if state.exists {
            txn.remove(coll, key.clone());
        }
        txn.remove(coll, s);
        *state = Undoing {
            exists: false,
            xattrs: BTreeSet::new(),
        };
        return Ok(());
    }
    if r.whole {
        if state.exists {
            txn.remove(coll, key.clone());
        }
        txn.rename(coll, s, key.clone());
        txn.remove_xattr(coll, key.clone(), RECORD_XATTR);
        *state = Undoing {
            exists: true,
            xattrs: old_xattrs.into_keys().collect(),
        };
        return Ok(());
    }
    txn.touch(coll, key.clone());
    for (a, b) in &r.ranges {
        txn.clone_range(coll, s.clone(), key.clone(), *a, b - a, *a);
    }
    txn.truncate(coll, key.clone(), r.old_len);
    for (a, b) in &r.stripes {
        txn.omap_remove_range(coll, key.clone(), crc_key(*a), crc_key(*b));
    }
    let mut crcs = BTreeMap::new();
    for run in &r.stripes {
        crcs.extend(omap_in(store, &coll, &s, *run)?);
    }
    if !crcs.is_empty() {
        txn.omap_set_keys(coll, key.clone(), crcs);
    }
    let names: BTreeSet<String> = old_xattrs.keys().cloned().collect();
    if state.exists {
        for gone in state.xattrs.difference(&names) {
            txn.remove_xattr(coll, key.clone(), gone.clone());
        }
    }
    if !old_xattrs.is_empty() {
        txn.set_xattrs(coll, key.clone(), old_xattrs);
    }
    txn.remove(coll, s);
    *state = Undoing {
        exists: true,
        xattrs: names,
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.
    use super::*;
    use shoal_objectstore::MemStore;

    type Dump = BTreeMap<ObjectKey, (Bytes, BTreeMap<String, Bytes>, Vec<(Bytes, Bytes)>)>;

    fn dump(store: &MemStore, c: CollectionId) -> Dump {
        let listing = store.list_objects(&c, None, 1000).unwrap();
        listing
            .objects
            .into_iter()
            .map(|k| {
                let data = store.read(&c, &k, 0, 1 << 20).unwrap();
                let x = store.getxattrs(&c, &k).unwrap();
                let omap = store
                    .omap_range(&c, &k, Bound::Unbounded, Bound::Unbounded, 1000)
                    .unwrap();
                (k, (data, x, omap))
            })
            .collect()
    }

    /// A shard's change that clones the head for a snapshot (and then
    /// overwrites or removes it, keeping the snapset in a snapdir) is
    /// undone exactly: the clone and snapdir go, the head comes back.
    #[test]
    fn a_snapshot_clone_and_its_snapdir_are_undone_with_the_head() {
        let store = MemStore::new(1 << 26);
        let c = CollectionId::shard(1, 0, 0);
        let head = ObjectKey::new(7, "obj");
        let clone = head.clone_for(4);
        let snapdir = head.clone_for(crate::object::SNAPDIR);
        let mut t = Transaction::new();
        t.create_collection(c);
        t.write(c, head.clone(), 0, Bytes::from_static(b"chunk bytes"));
        t.set_xattr(c, head.clone(), "_size", Bytes::from_static(b"22"));
        t.set_xattr(c, head.clone(), "ss", Bytes::from_static(b"old snapset"));
        t.omap_set_keys(
            c,
            head.clone(),
            BTreeMap::from([(crc_key(0), Bytes::from_static(b"crc0"))]),
        );
        store.apply_transaction(t).unwrap();
        let before = dump(&store, c);
        let changes = [
            // The first write after the snapshot: the head is cloned,
            // then overwritten.
            vec![
                Op::Clone {
                    coll: c,
                    src: head.clone(),
                    dst: clone.clone(),
                },
                Op::RemoveXattr(c, clone.clone(), "ss".into()),
                Op::Write {
                    coll: c,
                    oid: head.clone(),
                    offset: 2,
                    data: Bytes::from_static(b"NEW"),
                },
                Op::SetXattrs(
                    c,
                    head.clone(),
                    BTreeMap::from([("ss".to_string(), Bytes::from_static(b"new"))]),
                ),
            ],
            // The head removed under the snapshot: its snapset moves to
            // a snapdir.
            vec![
                Op::Clone {
                    coll: c,
                    src: head.clone(),
                    dst: clone.clone(),
                },
                Op::RemoveXattr(c, clone.clone(), "ss".into()),
                Op::Touch(c, snapdir.clone()),
                Op::SetXattrs(
                    c,
                    snapdir.clone(),
                    BTreeMap::from([("ss".to_string(), Bytes::from_static(b"new"))]),
                ),
                Op::Remove(c, head.clone()),
            ],
        ];
        for (i, ops) in changes.into_iter().enumerate() {
            let version = Version {
                epoch: 2,
                v: 10 + i as u64,
            };
            let mut txn = Transaction::new();
            for op in ops {
                txn.push(op);
            }
            for k in [&head, &clone, &snapdir] {
                txn = stash(&store, c, k, version, 4096, txn).unwrap();
            }
            store.apply_transaction(txn).unwrap();
            assert!(store.exists(&c, &clone).unwrap(), "change {i}: no clone");
            assert_eq!(
                store.read(&c, &clone, 0, 100).unwrap(),
                Bytes::from_static(b"chunk bytes")
            );
            let mut undo_txn = Transaction::new();
            for k in [&head, &clone, &snapdir] {
                let mut state = Undoing::now(&store, &c, k).unwrap();
                undo(&store, c, k, version, &mut state, &mut undo_txn).unwrap();
            }
            store.apply_transaction(undo_txn).unwrap();
            assert_eq!(dump(&store, c), before, "change {i} was not undone exactly");
        }
    }
}

//! Execution tests against a [`MemStore`]: each op's transaction is applied
//! when it succeeds, and the store is compared before and after when it fails.

mod attrs;
mod data;
mod limits;
mod model;
mod snaps;

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;
use shoal_objectstore::types::OBJECT_SIZE_MAX;
use shoal_objectstore::{
    CollectionId, CommitTicket, Listing, MemStore, ObjectKey, ObjectStat, ObjectStore, Op, StatFs,
    Transaction,
};
use shoal_proto::{CmpOp, OpCode, OsdErrorCode, OsdSubOp};

use super::*;
use crate::object::{META_XATTR, ObjectMeta};

pub(super) struct Env {
    pub store: MemStore,
    pub coll: CollectionId,
    pub key: ObjectKey,
    pub version: u64,
    /// The snapshot context of the next ops: seq and snaps.
    pub snapc: (u64, Vec<u64>),
    /// Read at this snapshot (0: the head).
    pub read_snap: u64,
    /// The pool's removed snapshots.
    pub removed: Vec<(u64, u64)>,
}

pub(super) fn env() -> Env {
    let store = MemStore::new(1 << 30);
    let coll = CollectionId::new(1, 0);
    let mut t = Transaction::new();
    t.create_collection(coll);
    store.apply_transaction(t).unwrap();
    Env {
        store,
        coll,
        key: ObjectKey::new(5, "obj"),
        version: 0,
        snapc: (0, Vec::new()),
        read_snap: 0,
        removed: Vec::new(),
    }
}

pub(super) fn sub(code: OpCode) -> (OsdSubOp, Vec<u8>) {
    (OsdSubOp::new(code), Vec::new())
}

pub(super) fn with_data(code: OpCode, d: &[u8]) -> (OsdSubOp, Vec<u8>) {
    let mut o = OsdSubOp::new(code);
    o.data_len = d.len() as u64;
    (o, d.to_vec())
}

fn named(code: OpCode, name: &str, d: &[u8]) -> (OsdSubOp, Vec<u8>) {
    let mut s = with_data(code, d);
    s.0.name = name.into();
    s
}

fn cmp(name: &str, op: CmpOp, d: &[u8]) -> (OsdSubOp, Vec<u8>) {
    let mut s = named(OpCode::CmpXattr, name, d);
    s.0.cmp = op as u32;
    s
}

fn at(code: OpCode, offset: u64, length: u64) -> (OsdSubOp, Vec<u8>) {
    let mut s = sub(code);
    s.0.offset = offset;
    s.0.length = length;
    s
}

fn omap_set(pairs: &[(&str, &str)]) -> (OsdSubOp, Vec<u8>) {
    let mut s = sub(OpCode::OmapSetVals);
    for (k, v) in pairs {
        s.0.keys.push(k.as_bytes().to_vec());
        s.0.values.push(v.as_bytes().to_vec());
    }
    s
}

/// Everything stored of one object, to compare before and after.
#[derive(Debug, PartialEq)]
pub(super) struct Snapshot {
    pub data: Bytes,
    pub xattrs: BTreeMap<String, Bytes>,
    pub header: Bytes,
    pub omap: Vec<(Bytes, Bytes)>,
}

impl Env {
    /// Runs the op and, when it succeeds, applies its transaction.
    pub fn run(&mut self, ops: Vec<(OsdSubOp, Vec<u8>)>) -> Result<ExecOutcome, ExecError> {
        self.version += 1;
        let data: Vec<u8> = ops.iter().flat_map(|(_, d)| d.clone()).collect();
        let ops: Vec<OsdSubOp> = ops.into_iter().map(|(o, _)| o).collect();
        let out = execute(ExecInput {
            store: &self.store,
            coll: self.coll,
            key: self.key.clone(),
            ops: &ops,
            data: Bytes::from(data),
            new_version: self.version,
            mtime_ms: 1000 + self.version,
            snaps: Snaps {
                seq: self.snapc.0,
                snaps: &self.snapc.1,
                read: self.read_snap,
                removed: &self.removed,
            },
        })?;
        check_shape(&out, ops.len());
        self.store.apply_transaction(out.txn.clone()).unwrap();
        Ok(out)
    }

    pub fn read(&mut self) -> Result<Bytes, ExecError> {
        let out = self.run(vec![sub(OpCode::Read)])?;
        Ok(out.data.into_iter().next().unwrap_or_default())
    }

    pub fn code(&mut self, ops: Vec<(OsdSubOp, Vec<u8>)>) -> OsdErrorCode {
        self.run(ops).map_or_else(|e| e.code, |_| OsdErrorCode::Ok)
    }

    pub fn snapshot(&self) -> Option<Snapshot> {
        let (s, c, k) = (&self.store, &self.coll, &self.key);
        if !s.exists(c, k).unwrap() {
            return None;
        }
        let size = s.stat(c, k).unwrap().size;
        Some(Snapshot {
            data: s.read(c, k, 0, size).unwrap(),
            xattrs: s.getxattrs(c, k).unwrap(),
            header: s.omap_get_header(c, k).unwrap(),
            omap: s
                .omap_range(c, k, Bound::Unbounded, Bound::Unbounded, usize::MAX)
                .unwrap(),
        })
    }

    pub fn meta(&self) -> Option<ObjectMeta> {
        let m = self
            .store
            .getxattr(&self.coll, &self.key, META_XATTR)
            .ok()??;
        ObjectMeta::decode(&m)
    }
}

/// Invariants of every outcome the PG relies on.
fn check_shape(out: &ExecOutcome, n: usize) {
    assert_eq!(out.results.len(), n);
    let claimed: u64 = out.results.iter().map(|r| r.data_len).sum();
    let sent: u64 = out.data.iter().map(|b| b.len() as u64).sum();
    assert_eq!(claimed, sent);
    if !out.mutates {
        assert!(out.txn.is_empty());
    } else if out.version == 0 {
        assert!(matches!(out.txn.ops().last(), Some(Op::Remove(..))));
    } else {
        assert!(
            matches!(out.txn.ops().last(), Some(Op::SetXattrs(_, _, a)) if a.contains_key(META_XATTR))
        );
    }
}

fn delta(objects: i64, bytes: i64) -> StatDelta {
    StatDelta { objects, bytes }
}

fn remove_txn(e: &Env) -> Transaction {
    let mut t = Transaction::new();
    t.remove(e.coll, e.key.clone());
    t
}

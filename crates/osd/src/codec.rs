//! Store transactions on the wire: the primary sends a PG's transaction to
//! its replicas as [`TxnOp`]s, write payloads in the frame's data part
//! (sliced, never copied). Every op stays in the PG's own collection: a
//! received op naming another collection cannot be expressed.

use std::collections::BTreeMap;

use bytes::Bytes;
use shoal_objectstore::{CollectionId, ObjectKey, Op, Transaction};
use shoal_proto::TxnOp;

const TOUCH: u32 = 1;
const WRITE: u32 = 2;
const ZERO: u32 = 3;
const TRUNCATE: u32 = 4;
const REMOVE: u32 = 5;
const CLONE: u32 = 6;
const SET_XATTRS: u32 = 7;
const RM_XATTR: u32 = 8;
const OMAP_SET: u32 = 9;
const OMAP_RM: u32 = 10;
const OMAP_RM_RANGE: u32 = 11;
const OMAP_CLEAR: u32 = 12;
const OMAP_HEADER: u32 = 13;
const RENAME: u32 = 14;
const CREATE_COLLECTION: u32 = 15;

/// Why a transaction cannot be sent or a received one cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("replicated transaction: {0}")]
pub struct CodecError(pub String);

/// An object key as wire fields (hash, name, snapshot: 0 for the head).
fn obj(k: &ObjectKey) -> (u32, Vec<u8>, u64) {
    let snap = if k.snap == ObjectKey::HEAD { 0 } else { k.snap };
    (k.hash, k.name.clone(), snap)
}

/// Inverse of [`obj`].
fn key(hash: u32, name: &[u8], snap: u64) -> ObjectKey {
    ObjectKey {
        hash,
        name: name.to_vec(),
        snap: if snap == 0 { ObjectKey::HEAD } else { snap },
    }
}

/// Encodes `txn` (all in collection `coll`) as wire ops and a data part.
pub fn encode(
    coll: CollectionId,
    txn: &Transaction,
) -> Result<(Vec<TxnOp>, Vec<Bytes>), CodecError> {
    let mut ops = Vec::with_capacity(txn.ops().len());
    let mut data = Vec::new();
    for op in txn.ops() {
        if op.collection() != coll {
            return Err(CodecError("an op outside the PG's collection".into()));
        }
        let mut w = TxnOp::default();
        let set_obj = |w: &mut TxnOp, k: &ObjectKey| {
            (w.hash, w.name, w.snap) = obj(k);
        };
        match op {
            Op::CreateCollection(_) => w.kind = CREATE_COLLECTION,
            Op::Touch(_, k) => {
                w.kind = TOUCH;
                set_obj(&mut w, k);
            }
            Op::Write {
                oid,
                offset,
                data: d,
                ..
            } => {
                w.kind = WRITE;
                set_obj(&mut w, oid);
                w.offset = *offset;
                w.data_len = d.len() as u64;
                data.push(d.clone());
            }
            Op::Zero {
                oid, offset, len, ..
            } => {
                w.kind = ZERO;
                set_obj(&mut w, oid);
                w.offset = *offset;
                w.length = *len;
            }
            Op::Truncate { oid, size, .. } => {
                w.kind = TRUNCATE;
                set_obj(&mut w, oid);
                w.offset = *size;
            }
            Op::Remove(_, k) => {
                w.kind = REMOVE;
                set_obj(&mut w, k);
            }
            Op::Clone { src, dst, .. } | Op::Rename { src, dst, .. } => {
                w.kind = if matches!(op, Op::Clone { .. }) {
                    CLONE
                } else {
                    RENAME
                };
                set_obj(&mut w, src);
                (w.dst_hash, w.dst_name, w.dst_snap) = obj(dst);
            }
            Op::SetXattrs(_, k, attrs) => {
                w.kind = SET_XATTRS;
                set_obj(&mut w, k);
                for (n, v) in attrs {
                    w.attrs.push(n.clone());
                    w.values.push(v.to_vec());
                }
            }
            Op::RemoveXattr(_, k, n) => {
                w.kind = RM_XATTR;
                set_obj(&mut w, k);
                w.attrs.push(n.clone());
            }
            Op::OmapSetKeys(_, k, kv) => {
                w.kind = OMAP_SET;
                set_obj(&mut w, k);
                for (key, v) in kv {
                    w.keys.push(key.to_vec());
                    w.values.push(v.to_vec());
                }
            }
            Op::OmapRemoveKeys(_, k, keys) => {
                w.kind = OMAP_RM;
                set_obj(&mut w, k);
                w.keys = keys.iter().map(|k| k.to_vec()).collect();
            }
            Op::OmapRemoveRange {
                oid, start, end, ..
            } => {
                w.kind = OMAP_RM_RANGE;
                set_obj(&mut w, oid);
                w.keys = vec![start.to_vec(), end.to_vec()];
            }
            Op::OmapClear(_, k) => {
                w.kind = OMAP_CLEAR;
                set_obj(&mut w, k);
            }
            Op::OmapSetHeader(_, k, h) => {
                w.kind = OMAP_HEADER;
                set_obj(&mut w, k);
                w.values.push(h.to_vec());
            }
            other => {
                return Err(CodecError(format!("cannot replicate {other:?}")));
            }
        }
        ops.push(w);
    }
    Ok((ops, data))
}

/// Decodes wire ops and their data part into a transaction in `coll`.
pub fn decode(coll: CollectionId, ops: &[TxnOp], data: &Bytes) -> Result<Transaction, CodecError> {
    let mut txn = Transaction::new();
    let mut at = 0usize;
    let bad = |why: &str| CodecError(why.to_string());
    for w in ops {
        let k = key(w.hash, &w.name, w.snap);
        match w.kind {
            CREATE_COLLECTION => txn.create_collection(coll),
            TOUCH => txn.touch(coll, k),
            WRITE => {
                let n = usize::try_from(w.data_len).map_err(|_| bad("data length"))?;
                let end = at.checked_add(n).filter(|e| *e <= data.len());
                let end = end.ok_or_else(|| bad("data part shorter than its ops"))?;
                let d = data.slice(at..end);
                at = end;
                txn.write(coll, k, w.offset, d)
            }
            ZERO => txn.zero(coll, k, w.offset, w.length),
            TRUNCATE => txn.truncate(coll, k, w.offset),
            REMOVE => txn.remove(coll, k),
            CLONE => txn.clone_object(coll, k, key(w.dst_hash, &w.dst_name, w.dst_snap)),
            RENAME => txn.rename(coll, k, key(w.dst_hash, &w.dst_name, w.dst_snap)),
            SET_XATTRS => {
                if w.attrs.len() != w.values.len() {
                    return Err(bad("xattr names and values differ in number"));
                }
                let attrs: BTreeMap<String, Bytes> = w
                    .attrs
                    .iter()
                    .cloned()
                    .zip(w.values.iter().map(|v| Bytes::from(v.clone())))
                    .collect();
                txn.set_xattrs(coll, k, attrs)
            }
            RM_XATTR => {
                let n = w.attrs.first().ok_or_else(|| bad("xattr name missing"))?;
                txn.remove_xattr(coll, k, n.clone())
            }
            OMAP_SET => {
                if w.keys.len() != w.values.len() {
                    return Err(bad("omap keys and values differ in number"));
                }
                let kv: BTreeMap<Bytes, Bytes> = w
                    .keys
                    .iter()
                    .map(|k| Bytes::from(k.clone()))
                    .zip(w.values.iter().map(|v| Bytes::from(v.clone())))
                    .collect();
                txn.omap_set_keys(coll, k, kv)
            }
            OMAP_RM => {
                let keys = w.keys.iter().map(|k| Bytes::from(k.clone())).collect();
                txn.omap_remove_keys(coll, k, keys)
            }
            OMAP_RM_RANGE => {
                let [start, end] = w.keys.as_slice() else {
                    return Err(bad("omap range needs two keys"));
                };
                txn.omap_remove_range(
                    coll,
                    k,
                    Bytes::from(start.clone()),
                    Bytes::from(end.clone()),
                )
            }
            OMAP_CLEAR => txn.omap_clear(coll, k),
            OMAP_HEADER => {
                let h = w.values.first().ok_or_else(|| bad("omap header missing"))?;
                txn.omap_set_header(coll, k, Bytes::from(h.clone()))
            }
            other => return Err(CodecError(format!("unknown store op {other}"))),
        };
    }
    if at != data.len() {
        return Err(bad("data part longer than its ops"));
    }
    Ok(txn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_kind_round_trips() {
        let c = CollectionId::new(2, 5);
        let a = ObjectKey::new(1, "a");
        let b = ObjectKey::new(2, "b").clone_for(4);
        let mut t = Transaction::new();
        t.create_collection(c)
            .touch(c, a.clone())
            .write(c, a.clone(), 10, Bytes::from_static(b"hello"))
            .zero(c, a.clone(), 1, 2)
            .truncate(c, a.clone(), 7)
            .clone_object(c, a.clone(), b.clone())
            .set_xattrs(
                c,
                a.clone(),
                BTreeMap::from([("u.x".to_string(), Bytes::from_static(b"1"))]),
            )
            .remove_xattr(c, a.clone(), "u.y".to_string())
            .omap_set_keys(
                c,
                a.clone(),
                BTreeMap::from([(Bytes::from_static(b"k"), Bytes::from_static(b"v"))]),
            )
            .omap_remove_keys(c, a.clone(), vec![Bytes::from_static(b"k")])
            .omap_remove_range(
                c,
                a.clone(),
                Bytes::from_static(b"a"),
                Bytes::from_static(b"z"),
            )
            .omap_set_header(c, a.clone(), Bytes::from_static(b"h"))
            .omap_clear(c, b.clone())
            .write(c, b.clone(), 0, Bytes::from_static(b"world"))
            .rename(c, b.clone(), ObjectKey::new(3, "c"))
            .remove(c, a);
        let (ops, data) = encode(c, &t).unwrap();
        let joined: Vec<u8> = data.iter().flat_map(|d| d.iter().copied()).collect();
        let back = decode(c, &ops, &Bytes::from(joined)).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn inconsistent_input_is_refused() {
        let c = CollectionId::new(2, 5);
        let mut t = Transaction::new();
        t.write(c, ObjectKey::new(1, "a"), 0, Bytes::from_static(b"abc"));
        let (ops, _) = encode(c, &t).unwrap();
        assert!(decode(c, &ops, &Bytes::from_static(b"ab")).is_err());
        assert!(decode(c, &ops, &Bytes::from_static(b"abcd")).is_err());
        let bad = TxnOp {
            kind: 999,
            ..TxnOp::default()
        };
        assert!(decode(c, &[bad], &Bytes::new()).is_err());
        let other = CollectionId::new(3, 0);
        let mut t = Transaction::new();
        t.touch(other, ObjectKey::new(1, "a"));
        assert!(encode(c, &t).is_err());
    }
}

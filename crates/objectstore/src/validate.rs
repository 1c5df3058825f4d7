//! Precondition checks shared by every backend, run before a transaction touches state,
//! so a transaction either applies whole or is refused with no effect.

use std::collections::{HashMap, HashSet};

use crate::error::{Error, Result};
use crate::transaction::{Op, Transaction};
use crate::types::{
    CollectionId, OBJECT_NAME_BYTES_MAX, OBJECT_SIZE_MAX, ObjectKey, TRANSACTION_DATA_BYTES_MAX,
    TRANSACTION_OPS_MAX,
};

/// Read-only view of the committed state that validation needs.
pub(crate) trait View {
    fn has_collection(&self, c: &CollectionId) -> bool;
    fn has_object(&self, c: &CollectionId, o: &ObjectKey) -> bool;
}

/// Existence as it evolves through the transaction.
struct Overlay<'a, V: View> {
    view: &'a V,
    colls: HashMap<CollectionId, bool>,
    /// Collections removed earlier in this transaction: their old objects are gone.
    reset: HashSet<CollectionId>,
    objs: HashMap<(CollectionId, ObjectKey), bool>,
    /// Collections a split touched earlier in this transaction.
    split: HashSet<CollectionId>,
}

impl<V: View> Overlay<'_, V> {
    fn coll(&self, c: &CollectionId) -> bool {
        self.colls
            .get(c)
            .copied()
            .unwrap_or_else(|| self.view.has_collection(c))
    }

    fn obj(&self, c: &CollectionId, o: &ObjectKey) -> bool {
        if let Some(e) = self.objs.get(&(*c, o.clone())) {
            return *e;
        }
        !self.reset.contains(c) && self.view.has_object(c, o)
    }

    fn need_coll(&self, c: &CollectionId) -> Result<()> {
        if self.coll(c) {
            Ok(())
        } else {
            Err(Error::CollectionNotFound(*c))
        }
    }

    fn need_obj(&self, c: &CollectionId, o: &ObjectKey) -> Result<()> {
        if self.obj(c, o) {
            Ok(())
        } else {
            Err(Error::ObjectNotFound(*c, o.clone()))
        }
    }

    fn set(&mut self, c: &CollectionId, o: &ObjectKey, exists: bool) {
        self.objs.insert((*c, o.clone()), exists);
    }
}

fn check_name(o: &ObjectKey) -> Result<()> {
    if o.name.len() > OBJECT_NAME_BYTES_MAX {
        return Err(Error::InvalidArgument(format!(
            "object name of {} bytes",
            o.name.len()
        )));
    }
    Ok(())
}

/// A read of `len` bytes clamped to the object must fit `READ_BYTES_MAX`.
pub(crate) fn check_read(size: u64, offset: u64, len: u64) -> Result<u64> {
    let n = len.min(size.saturating_sub(offset));
    if n > crate::types::READ_BYTES_MAX {
        return Err(Error::InvalidArgument(format!(
            "read of {n} bytes exceeds the limit {}",
            crate::types::READ_BYTES_MAX
        )));
    }
    Ok(n)
}

/// `offset + len` must stay within `OBJECT_SIZE_MAX`.
pub(crate) fn check_extent(offset: u64, len: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= OBJECT_SIZE_MAX => Ok(()),
        _ => Err(Error::InvalidArgument(format!(
            "extent {offset}+{len} exceeds the object size limit {OBJECT_SIZE_MAX}"
        ))),
    }
}

/// Check every precondition of `txn` against `view`.
pub(crate) fn validate(view: &impl View, txn: &Transaction) -> Result<()> {
    // Clone ranges are copied through memory: they count as payload.
    let ranged: u64 = txn
        .ops()
        .iter()
        .map(|op| match op {
            Op::CloneRange { len, .. } => *len,
            _ => 0,
        })
        .fold(0u64, u64::saturating_add);
    let payload = txn.data_bytes().saturating_add(ranged);
    if txn.ops().len() > TRANSACTION_OPS_MAX || payload > TRANSACTION_DATA_BYTES_MAX {
        return Err(Error::InvalidArgument(format!(
            "transaction of {} ops and {payload} data bytes exceeds the limits ({TRANSACTION_OPS_MAX} ops, {TRANSACTION_DATA_BYTES_MAX} bytes)",
            txn.ops().len()
        )));
    }
    let mut ov = Overlay {
        view,
        colls: HashMap::new(),
        reset: HashSet::new(),
        objs: HashMap::new(),
        split: HashSet::new(),
    };
    for op in txn.ops() {
        let c = op.collection();
        if ov.split.contains(&c) && !matches!(op, Op::SplitCollection { .. }) {
            return Err(Error::InvalidArgument(format!(
                "an op on {c} after a split of it in the same transaction"
            )));
        }
        match op {
            Op::CreateCollection(_) => {
                if ov.coll(&c) {
                    return Err(Error::CollectionExists(c));
                }
                ov.colls.insert(c, true);
            }
            Op::RemoveCollection(_) => {
                ov.need_coll(&c)?;
                ov.colls.insert(c, false);
                ov.reset.insert(c);
                ov.objs.retain(|(cc, _), _| *cc != c);
            }
            Op::SplitCollection { dst, bits, rem, .. } => {
                ov.need_coll(&c)?;
                ov.need_coll(dst)?;
                if *dst == c || *bits > 32 || (*bits < 32 && u64::from(*rem) >> *bits != 0) {
                    return Err(Error::InvalidArgument(format!(
                        "split of {c} into {dst} on {bits} bits = {rem}"
                    )));
                }
                // Which objects move depends on the state, not only on
                // this transaction: after a split only further splits may
                // touch either collection in the same transaction (a PG
                // split writes its logs first, then moves the objects), so
                // existence is not tracked past it.
                ov.split.insert(c);
                ov.split.insert(*dst);
            }
            Op::Remove(_, o) => {
                ov.need_coll(&c)?;
                ov.need_obj(&c, o)?;
                ov.set(&c, o, false);
            }
            Op::Clone { src, dst, .. } | Op::CloneRange { src, dst, .. } => {
                ov.need_coll(&c)?;
                check_name(dst)?;
                ov.need_obj(&c, src)?;
                if let Op::CloneRange {
                    src_offset,
                    len,
                    dst_offset,
                    ..
                } = op
                {
                    check_extent(*src_offset, *len)?;
                    check_extent(*dst_offset, *len)?;
                }
                ov.set(&c, dst, true);
            }
            Op::Rename { src, dst, .. } => {
                ov.need_coll(&c)?;
                check_name(dst)?;
                ov.need_obj(&c, src)?;
                ov.set(&c, src, false);
                ov.set(&c, dst, true);
            }
            Op::Touch(_, o)
            | Op::SetXattrs(_, o, _)
            | Op::RemoveXattr(_, o, _)
            | Op::OmapSetKeys(_, o, _)
            | Op::OmapRemoveKeys(_, o, _)
            | Op::OmapClear(_, o)
            | Op::OmapSetHeader(_, o, _)
            | Op::OmapRemoveRange { oid: o, .. } => {
                ov.need_coll(&c)?;
                check_name(o)?;
                ov.set(&c, o, true);
            }
            Op::Write {
                oid, offset, data, ..
            } => {
                ov.need_coll(&c)?;
                check_name(oid)?;
                check_extent(*offset, data.len() as u64)?;
                ov.set(&c, oid, true);
            }
            Op::Zero {
                oid, offset, len, ..
            } => {
                ov.need_coll(&c)?;
                check_name(oid)?;
                check_extent(*offset, *len)?;
                ov.set(&c, oid, true);
            }
            Op::Truncate { oid, size, .. } => {
                ov.need_coll(&c)?;
                check_name(oid)?;
                check_extent(*size, 0)?;
                ov.set(&c, oid, true);
            }
        }
    }
    Ok(())
}

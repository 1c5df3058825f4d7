//! `Transaction`: an ordered list of operations applied atomically.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::types::{CollectionId, ObjectKey};

/// One operation of a [`Transaction`]. See [`crate::ObjectStore`] for the laws.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// Create an empty collection; it must not exist.
    CreateCollection(CollectionId),
    /// Remove a collection and every object in it; it must exist.
    RemoveCollection(CollectionId),
    /// Move every object of `coll` whose hash's low `bits` bits equal
    /// `rem` into `dst` (a PG split: the child's objects leave the parent
    /// in place, no data copied), replacing an object of the same key
    /// there. Both collections must exist and differ; `rem` must fit in
    /// `bits` (at most 32). Later ops of the same transaction may touch
    /// either collection only if they are splits too.
    SplitCollection {
        /// The parent: the collection the objects leave.
        coll: CollectionId,
        /// The child they go to.
        dst: CollectionId,
        /// How many low bits of the hash are compared.
        bits: u32,
        /// Their value for the objects that move.
        rem: u32,
    },
    /// Create the object if absent; no other effect.
    Touch(CollectionId, ObjectKey),
    /// Write `data` at `offset`, extending the object if needed (a gap reads as zeros).
    Write {
        /// Collection.
        coll: CollectionId,
        /// Object.
        oid: ObjectKey,
        /// Byte offset.
        offset: u64,
        /// Bytes to write.
        data: Bytes,
    },
    /// Make `len` bytes at `offset` read as zeros, extending the object if needed.
    Zero {
        /// Collection.
        coll: CollectionId,
        /// Object.
        oid: ObjectKey,
        /// Byte offset.
        offset: u64,
        /// Length in bytes.
        len: u64,
    },
    /// Set the object's size; growing reads as zeros.
    Truncate {
        /// Collection.
        coll: CollectionId,
        /// Object.
        oid: ObjectKey,
        /// New size in bytes.
        size: u64,
    },
    /// Remove the object (data, xattrs, omap); it must exist.
    Remove(CollectionId, ObjectKey),
    /// Replace `dst` with a copy of `src` (data, xattrs, omap header and omap).
    Clone {
        /// Collection of both objects.
        coll: CollectionId,
        /// Source; must exist.
        src: ObjectKey,
        /// Destination; replaced.
        dst: ObjectKey,
    },
    /// Copy `len` bytes of `src` at `src_offset` into `dst` at `dst_offset` (bytes past
    /// the end of `src` copy as zeros). Only data is copied.
    CloneRange {
        /// Collection of both objects.
        coll: CollectionId,
        /// Source; must exist.
        src: ObjectKey,
        /// Destination; created if absent.
        dst: ObjectKey,
        /// Offset in `src`.
        src_offset: u64,
        /// Length in bytes.
        len: u64,
        /// Offset in `dst`.
        dst_offset: u64,
    },
    /// Set xattrs (insert or replace each).
    SetXattrs(CollectionId, ObjectKey, BTreeMap<String, Bytes>),
    /// Remove one xattr (absent is not an error).
    RemoveXattr(CollectionId, ObjectKey, String),
    /// Insert or replace omap entries.
    OmapSetKeys(CollectionId, ObjectKey, BTreeMap<Bytes, Bytes>),
    /// Remove omap keys (absent keys are ignored).
    OmapRemoveKeys(CollectionId, ObjectKey, Vec<Bytes>),
    /// Remove omap keys in `[start, end)`.
    OmapRemoveRange {
        /// Collection.
        coll: CollectionId,
        /// Object.
        oid: ObjectKey,
        /// First key removed.
        start: Bytes,
        /// First key kept (exclusive end).
        end: Bytes,
    },
    /// Remove every omap entry and the omap header.
    OmapClear(CollectionId, ObjectKey),
    /// Set the omap header.
    OmapSetHeader(CollectionId, ObjectKey, Bytes),
    /// Move `src` to `dst` in the same collection, replacing `dst`; `src` must exist.
    Rename {
        /// Collection of both objects.
        coll: CollectionId,
        /// Source; must exist, gone afterwards.
        src: ObjectKey,
        /// Destination; replaced.
        dst: ObjectKey,
    },
}

impl Op {
    /// The collection the op works in.
    pub fn collection(&self) -> CollectionId {
        match self {
            Op::CreateCollection(c)
            | Op::RemoveCollection(c)
            | Op::Touch(c, _)
            | Op::Remove(c, _)
            | Op::SetXattrs(c, _, _)
            | Op::RemoveXattr(c, _, _)
            | Op::OmapSetKeys(c, _, _)
            | Op::OmapRemoveKeys(c, _, _)
            | Op::OmapClear(c, _)
            | Op::OmapSetHeader(c, _, _) => *c,
            Op::Write { coll, .. }
            | Op::Zero { coll, .. }
            | Op::Truncate { coll, .. }
            | Op::Clone { coll, .. }
            | Op::CloneRange { coll, .. }
            | Op::OmapRemoveRange { coll, .. }
            | Op::Rename { coll, .. }
            | Op::SplitCollection { coll, .. } => *coll,
        }
    }
}

/// An ordered list of [`Op`]s applied all-or-nothing. Build with the methods below.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transaction {
    ops: Vec<Op>,
}

impl Transaction {
    /// An empty transaction.
    pub fn new() -> Self {
        Self::default()
    }

    /// The operations in order.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// True if there are no operations.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Bytes of data payload carried (for in-flight limits).
    pub fn data_bytes(&self) -> u64 {
        self.ops
            .iter()
            .map(|op| match op {
                Op::Write { data, .. } => data.len() as u64,
                _ => 0,
            })
            .sum()
    }

    /// Append any op.
    pub fn push(&mut self, op: Op) -> &mut Self {
        self.ops.push(op);
        self
    }

    /// Append every op of `other`, after ours.
    pub fn append(&mut self, other: Transaction) -> &mut Self {
        self.ops.extend(other.ops);
        self
    }

    /// See [`Op::CreateCollection`].
    pub fn create_collection(&mut self, c: CollectionId) -> &mut Self {
        self.push(Op::CreateCollection(c))
    }

    /// See [`Op::RemoveCollection`].
    pub fn remove_collection(&mut self, c: CollectionId) -> &mut Self {
        self.push(Op::RemoveCollection(c))
    }

    /// See [`Op::SplitCollection`].
    pub fn split_collection(
        &mut self,
        coll: CollectionId,
        dst: CollectionId,
        bits: u32,
        rem: u32,
    ) -> &mut Self {
        self.push(Op::SplitCollection {
            coll,
            dst,
            bits,
            rem,
        })
    }

    /// See [`Op::Touch`].
    pub fn touch(&mut self, c: CollectionId, o: ObjectKey) -> &mut Self {
        self.push(Op::Touch(c, o))
    }

    /// See [`Op::Write`].
    pub fn write(
        &mut self,
        coll: CollectionId,
        oid: ObjectKey,
        offset: u64,
        data: Bytes,
    ) -> &mut Self {
        self.push(Op::Write {
            coll,
            oid,
            offset,
            data,
        })
    }

    /// See [`Op::Zero`].
    pub fn zero(&mut self, coll: CollectionId, oid: ObjectKey, offset: u64, len: u64) -> &mut Self {
        self.push(Op::Zero {
            coll,
            oid,
            offset,
            len,
        })
    }

    /// See [`Op::Truncate`].
    pub fn truncate(&mut self, coll: CollectionId, oid: ObjectKey, size: u64) -> &mut Self {
        self.push(Op::Truncate { coll, oid, size })
    }

    /// See [`Op::Remove`].
    pub fn remove(&mut self, c: CollectionId, o: ObjectKey) -> &mut Self {
        self.push(Op::Remove(c, o))
    }

    /// See [`Op::Clone`].
    pub fn clone_object(
        &mut self,
        coll: CollectionId,
        src: ObjectKey,
        dst: ObjectKey,
    ) -> &mut Self {
        self.push(Op::Clone { coll, src, dst })
    }

    /// See [`Op::CloneRange`].
    pub fn clone_range(
        &mut self,
        coll: CollectionId,
        src: ObjectKey,
        dst: ObjectKey,
        src_offset: u64,
        len: u64,
        dst_offset: u64,
    ) -> &mut Self {
        self.push(Op::CloneRange {
            coll,
            src,
            dst,
            src_offset,
            len,
            dst_offset,
        })
    }

    /// See [`Op::SetXattrs`].
    pub fn set_xattr(
        &mut self,
        c: CollectionId,
        o: ObjectKey,
        name: impl Into<String>,
        v: Bytes,
    ) -> &mut Self {
        self.push(Op::SetXattrs(c, o, BTreeMap::from([(name.into(), v)])))
    }

    /// See [`Op::SetXattrs`].
    pub fn set_xattrs(
        &mut self,
        c: CollectionId,
        o: ObjectKey,
        attrs: BTreeMap<String, Bytes>,
    ) -> &mut Self {
        self.push(Op::SetXattrs(c, o, attrs))
    }

    /// See [`Op::RemoveXattr`].
    pub fn remove_xattr(
        &mut self,
        c: CollectionId,
        o: ObjectKey,
        name: impl Into<String>,
    ) -> &mut Self {
        self.push(Op::RemoveXattr(c, o, name.into()))
    }

    /// See [`Op::OmapSetKeys`].
    pub fn omap_set_keys(
        &mut self,
        c: CollectionId,
        o: ObjectKey,
        kv: BTreeMap<Bytes, Bytes>,
    ) -> &mut Self {
        self.push(Op::OmapSetKeys(c, o, kv))
    }

    /// See [`Op::OmapRemoveKeys`].
    pub fn omap_remove_keys(
        &mut self,
        c: CollectionId,
        o: ObjectKey,
        keys: Vec<Bytes>,
    ) -> &mut Self {
        self.push(Op::OmapRemoveKeys(c, o, keys))
    }

    /// See [`Op::OmapRemoveRange`].
    pub fn omap_remove_range(
        &mut self,
        coll: CollectionId,
        oid: ObjectKey,
        start: Bytes,
        end: Bytes,
    ) -> &mut Self {
        self.push(Op::OmapRemoveRange {
            coll,
            oid,
            start,
            end,
        })
    }

    /// See [`Op::OmapClear`].
    pub fn omap_clear(&mut self, c: CollectionId, o: ObjectKey) -> &mut Self {
        self.push(Op::OmapClear(c, o))
    }

    /// See [`Op::OmapSetHeader`].
    pub fn omap_set_header(&mut self, c: CollectionId, o: ObjectKey, h: Bytes) -> &mut Self {
        self.push(Op::OmapSetHeader(c, o, h))
    }

    /// See [`Op::Rename`].
    pub fn rename(&mut self, coll: CollectionId, src: ObjectKey, dst: ObjectKey) -> &mut Self {
        self.push(Op::Rename { coll, src, dst })
    }
}

/// Whether an object of hash `hash` moves in a split on (`bits`, `rem`):
/// its low `bits` bits equal `rem` (see [`Op::SplitCollection`]).
pub fn split_moves(hash: u32, bits: u32, rem: u32) -> bool {
    let mask = if bits >= 32 {
        u32::MAX
    } else {
        (1u32 << bits) - 1
    };
    hash & mask == rem
}

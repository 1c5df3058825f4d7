//! The non-data part of an object (xattrs, omap header, omap), shared by the backends'
//! in-memory state, and the op semantics on it.

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;

use crate::transaction::Op;
use crate::vecmap::VecMap;

/// Xattrs and omap of one object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ObjMeta {
    pub xattrs: VecMap<String, Bytes>,
    pub omap_header: Bytes,
    pub omap: BTreeMap<Bytes, Bytes>,
}

impl ObjMeta {
    /// Apply a metadata-only op; returns false if `op` is not one.
    pub fn apply(&mut self, op: &Op) -> bool {
        match op {
            Op::SetXattrs(_, _, attrs) => {
                for (k, v) in attrs {
                    self.xattrs.insert(k.clone(), v.clone());
                }
            }
            Op::RemoveXattr(_, _, name) => {
                self.xattrs.remove(name);
            }
            Op::OmapSetKeys(_, _, kv) => {
                for (k, v) in kv {
                    self.omap.insert(k.clone(), v.clone());
                }
            }
            Op::OmapRemoveKeys(_, _, keys) => {
                for k in keys {
                    self.omap.remove(k);
                }
            }
            Op::OmapRemoveRange { start, end, .. } => {
                if start < end {
                    let doomed: Vec<Bytes> = self
                        .omap
                        .range::<Bytes, _>((Bound::Included(start), Bound::Excluded(end)))
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in doomed {
                        self.omap.remove(&k);
                    }
                }
            }
            Op::OmapClear(_, _) => {
                self.omap.clear();
                self.omap_header = Bytes::new();
            }
            Op::OmapSetHeader(_, _, h) => self.omap_header = h.clone(),
            _ => return false,
        }
        true
    }

    /// Omap entries in `(start, end)`, at most `max`.
    pub fn range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, max: usize) -> Vec<(Bytes, Bytes)> {
        if bounds_empty(start, end) {
            return Vec::new();
        }
        self.omap
            .range::<[u8], _>((start, end))
            .take(max)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// `BTreeMap::range` panics on inverted bounds; treat them as empty.
pub(crate) fn bounds_empty(start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    match (start, end) {
        (Bound::Included(s), Bound::Included(e)) => s > e,
        (Bound::Included(s), Bound::Excluded(e))
        | (Bound::Excluded(s), Bound::Included(e))
        | (Bound::Excluded(s), Bound::Excluded(e)) => s >= e,
        _ => false,
    }
}

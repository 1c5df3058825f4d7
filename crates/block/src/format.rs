//! What an image is on the cluster: the names of its objects, the header's
//! fields as omap entries, the object map's states, and how a byte range
//! of the image falls on its data objects. Pure functions only: nothing
//! here talks to the cluster.
//!
//! In the image's pool (replicated, it holds omap):
//! - `rbd_directory`: omap `name_<name>` → id and `id_<id>` → name;
//! - `rbd_id.<name>`: the image's id as its data;
//! - `rbd_header.<id>`: omap `size`, `order`, `features`, `data_pool`,
//!   `create_timestamp` (integers little-endian); xattr `lock.exclusive`
//!   names the writer holding the lock;
//! - `rbd_object_map.<id>`: one byte per data object, [`OBJECT_EXISTS`]
//!   where the object may exist, [`OBJECT_NONEXISTENT`] where it does not.
//!
//! In the data pool (the same pool, or `--data-pool`, which may be
//! erasure-coded): `rbd_data.<id>.<object number, 16 hex digits>`, each
//! `1 << order` bytes of the image at most; an absent object, or bytes
//! past an object's end, read as zeros.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::error::{Error, Result};

/// The pool's image directory.
pub const DIRECTORY: &str = "rbd_directory";
/// Smallest object order (4 KiB objects).
pub const ORDER_MIN: u8 = 12;
/// Largest object order (32 MiB objects).
pub const ORDER_MAX: u8 = 25;
/// The default object order (4 MiB objects, as Ceph's).
pub const ORDER_DEFAULT: u8 = 22;
/// Longest image name, bytes.
pub const NAME_MAX: usize = 250;
/// Largest image size: 2^64 bytes cut to what object numbers and offsets
/// can address without overflow (as Ceph, a bound no disk reaches).
pub const SIZE_MAX: u64 = 1 << 60;

/// Feature bits, numbered as Ceph's so that an operator reads them alike.
pub mod features {
    /// Clones of snapshots.
    pub const LAYERING: u64 = 1;
    /// One writer at a time.
    pub const EXCLUSIVE_LOCK: u64 = 4;
    /// A map of which data objects exist (needs the exclusive lock).
    pub const OBJECT_MAP: u64 = 8;
    /// The data objects live in another pool.
    pub const DATA_POOL: u64 = 128;
    /// What a new image gets unless told otherwise.
    pub const DEFAULT: u64 = LAYERING | EXCLUSIVE_LOCK | OBJECT_MAP;
    /// Every feature this library knows.
    pub const KNOWN: u64 = LAYERING | EXCLUSIVE_LOCK | OBJECT_MAP | DATA_POOL;

    /// The names of the features in `bits`, as `rbd info` prints them.
    pub fn names(bits: u64) -> Vec<&'static str> {
        [
            (LAYERING, "layering"),
            (EXCLUSIVE_LOCK, "exclusive-lock"),
            (OBJECT_MAP, "object-map"),
            (DATA_POOL, "data-pool"),
        ]
        .into_iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|(_, n)| n)
        .collect()
    }

    /// The bit of a feature named as `rbd` names it.
    pub fn parse(name: &str) -> Option<u64> {
        Some(match name {
            "layering" => LAYERING,
            "exclusive-lock" => EXCLUSIVE_LOCK,
            "object-map" => OBJECT_MAP,
            _ => return None,
        })
    }
}

/// Object map state: the data object does not exist.
pub const OBJECT_NONEXISTENT: u8 = 0;
/// Object map state: the data object may exist.
pub const OBJECT_EXISTS: u8 = 1;

/// The xattr of the header naming the exclusive lock's owner.
pub const LOCK_XATTR: &str = "lock.exclusive";

/// The object holding image `name`'s id.
pub fn id_object(name: &str) -> String {
    format!("rbd_id.{name}")
}

/// Image `id`'s header object.
pub fn header_object(id: &str) -> String {
    format!("rbd_header.{id}")
}

/// Image `id`'s object map.
pub fn object_map_object(id: &str) -> String {
    format!("rbd_object_map.{id}")
}

/// The prefix of image `id`'s data objects.
pub fn data_prefix(id: &str) -> String {
    format!("rbd_data.{id}.")
}

/// Data object `objno` of image `id`.
pub fn data_object(id: &str, objno: u64) -> String {
    format!("rbd_data.{id}.{objno:016x}")
}

/// Checks an image name: 1 to [`NAME_MAX`] bytes, none of `/`, `@` or a
/// control character (they separate pool, image and snapshot in specs).
pub fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > NAME_MAX {
        return Err(Error::InvalidArgument(format!(
            "an image name has 1 to {NAME_MAX} bytes, not {}",
            name.len()
        )));
    }
    if let Some(c) = name
        .chars()
        .find(|c| matches!(c, '/' | '@') || c.is_control())
    {
        return Err(Error::InvalidArgument(format!(
            "image name {name:?} contains {c:?}"
        )));
    }
    Ok(())
}

/// An image's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Bytes.
    pub size: u64,
    /// Objects hold `1 << order` bytes.
    pub order: u8,
    /// [`features`] bits.
    pub features: u64,
    /// The pool of the data objects (`None`: the header's pool).
    pub data_pool: Option<u64>,
    /// Creation time, ms since the Unix epoch.
    pub created_ms: u64,
    /// The image's snapshots, oldest first.
    pub snapshots: Vec<SnapInfo>,
    /// The snapshot this image was cloned from, until it is flattened.
    pub parent: Option<ParentSpec>,
}

/// A clone's parent: a protected snapshot of another image. Reads of the
/// clone's objects that do not exist fall through to it within `overlap`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ParentSpec {
    /// The parent image's pool.
    pub pool: u64,
    /// The parent image's id.
    pub image_id: String,
    /// The parent's snapshot.
    pub snap_id: u64,
    /// Bytes of the clone that may fall through to the parent: the
    /// snapshot's size when cloned, lowered by every shrink.
    pub overlap: u64,
}

/// The object of a pool listing every clone of its images' snapshots.
pub const CHILDREN: &str = "rbd_children";

/// The [`CHILDREN`] omap key prefix of the clones of `image_id`'s snapshot `snap_id`.
pub fn children_prefix(image_id: &str, snap_id: u64) -> String {
    format!("{image_id}_{snap_id:016x}_")
}

/// The [`CHILDREN`] omap key recording clone `child_id` (in pool `child_pool`) of `parent`.
pub fn child_key(parent: &ParentSpec, child_pool: u64, child_id: &str) -> String {
    format!(
        "{}{child_pool}_{child_id}",
        children_prefix(&parent.image_id, parent.snap_id)
    )
}

/// One snapshot of an image, kept in the header's omap as JSON under
/// [`snap_key`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SnapInfo {
    /// Its id: a self-managed snapshot of the data pool.
    pub id: u64,
    /// Its name.
    pub name: String,
    /// The image's size when it was taken.
    pub size: u64,
    /// Clones may be made of it; it may not be removed.
    pub protected: bool,
    /// When it was taken, ms since the Unix epoch.
    pub created_ms: u64,
    /// A clone's parent as it was when the snapshot was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentSpec>,
}

/// The header's omap key of snapshot `id`.
pub fn snap_key(id: u64) -> String {
    format!("snapshot_{id:016x}")
}

impl Header {
    /// The snapshot context the image's writes carry: the newest snapshot
    /// id and every live one, newest first.
    pub fn snap_context(&self) -> (u64, Vec<u64>) {
        let mut ids: Vec<u64> = self.snapshots.iter().map(|s| s.id).collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        (ids.first().copied().unwrap_or(0), ids)
    }

    /// Whether the image or one of its snapshots reads through to snapshot
    /// `p` of a parent.
    pub fn refers_to(&self, p: &ParentSpec) -> bool {
        let same = |q: &Option<ParentSpec>| {
            q.as_ref().is_some_and(|q| {
                (q.pool, &q.image_id, q.snap_id) == (p.pool, &p.image_id, p.snap_id)
            })
        };
        same(&self.parent) || self.snapshots.iter().any(|s| same(&s.parent))
    }

    /// The snapshot named `name`.
    pub fn snapshot(&self, name: &str) -> Option<&SnapInfo> {
        self.snapshots.iter().find(|s| s.name == name)
    }

    /// Bytes per data object.
    pub fn object_size(&self) -> u64 {
        1 << self.order
    }

    /// Data objects the image spans.
    pub fn object_count(&self) -> u64 {
        object_count(self.size, self.order)
    }

    /// The header as omap entries.
    pub fn to_omap(&self) -> Vec<(&'static str, Vec<u8>)> {
        let mut v = vec![
            ("size", self.size.to_le_bytes().to_vec()),
            ("order", vec![self.order]),
            ("features", self.features.to_le_bytes().to_vec()),
            ("create_timestamp", self.created_ms.to_le_bytes().to_vec()),
        ];
        if let Some(p) = self.data_pool {
            v.push(("data_pool", p.to_le_bytes().to_vec()));
        }
        if let Some(p) = &self.parent {
            v.push(("parent", parent_value(p)));
        }
        v
    }

    /// The header from its omap entries; `what` names the image in errors.
    pub fn from_omap(what: &str, omap: &BTreeMap<Bytes, Bytes>) -> Result<Header> {
        let get = |k: &str| omap.get(k.as_bytes());
        let corrupt = |why: String| Error::Corrupt {
            image: what.to_string(),
            why,
        };
        let u64_of = |k: &str| -> Result<Option<u64>> {
            match get(k) {
                None => Ok(None),
                Some(v) => <[u8; 8]>::try_from(&v[..])
                    .map(|b| Some(u64::from_le_bytes(b)))
                    .map_err(|_| corrupt(format!("header field {k} has {} bytes, not 8", v.len()))),
            }
        };
        let size = u64_of("size")?.ok_or_else(|| corrupt("the header has no size".into()))?;
        let order = match get("order").map(|v| &v[..]) {
            Some([o]) if (ORDER_MIN..=ORDER_MAX).contains(o) => *o,
            Some(v) => return Err(corrupt(format!("bad object order {v:?}"))),
            None => return Err(corrupt("the header has no object order".into())),
        };
        if size > SIZE_MAX {
            return Err(corrupt(format!("size {size} is beyond {SIZE_MAX}")));
        }
        let mut snapshots = Vec::new();
        for (k, v) in omap.range(Bytes::from_static(b"snapshot_")..) {
            if !k.starts_with(b"snapshot_") {
                break;
            }
            let s: SnapInfo = serde_json::from_slice(v).map_err(|e| {
                corrupt(format!(
                    "snapshot record {}: {e}",
                    String::from_utf8_lossy(k)
                ))
            })?;
            snapshots.push(s);
        }
        snapshots.sort_by_key(|s| s.id);
        let parent = match get("parent") {
            None => None,
            Some(v) => Some(
                serde_json::from_slice(v).map_err(|e| corrupt(format!("parent record: {e}")))?,
            ),
        };
        Ok(Header {
            parent,
            size,
            order,
            features: u64_of("features")?.unwrap_or(0),
            data_pool: u64_of("data_pool")?,
            created_ms: u64_of("create_timestamp")?.unwrap_or(0),
            snapshots,
        })
    }
}

/// The header's `parent` omap value.
pub fn parent_value(p: &ParentSpec) -> Vec<u8> {
    serde_json::to_vec(p).unwrap_or_default()
}

/// Data objects an image of `size` bytes spans with objects of order `order`.
pub fn object_count(size: u64, order: u8) -> u64 {
    size.div_ceil(1 << order)
}

/// A piece of an image's byte range on one data object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectExtent {
    /// The data object.
    pub objno: u64,
    /// Offset within the object.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    /// Offset of the piece within the range.
    pub buf_offset: u64,
}

/// How `[offset, offset + len)` of an image falls on its data objects of
/// order `order`, in image order.
pub fn object_extents(offset: u64, len: u64, order: u8) -> Vec<ObjectExtent> {
    let object_size = 1u64 << order;
    let mut out = Vec::new();
    let mut at = offset;
    let end = offset.saturating_add(len);
    while at < end {
        let objno = at >> order;
        let off = at & (object_size - 1);
        let n = (object_size - off).min(end - at);
        out.push(ObjectExtent {
            objno,
            offset: off,
            len: n,
            buf_offset: at - offset,
        });
        at += n;
    }
    out
}

/// Checks that `[offset, offset + len)` lies within an image of `size` bytes.
pub fn check_range(image: &str, size: u64, offset: u64, len: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::OutOfRange {
            image: image.to_string(),
            offset,
            len,
            size,
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn extents_cut_at_object_boundaries_and_cover_the_range() {
        let e = object_extents(4000, 10_000, 12);
        assert_eq!(
            e,
            vec![
                ObjectExtent {
                    objno: 0,
                    offset: 4000,
                    len: 96,
                    buf_offset: 0
                },
                ObjectExtent {
                    objno: 1,
                    offset: 0,
                    len: 4096,
                    buf_offset: 96
                },
                ObjectExtent {
                    objno: 2,
                    offset: 0,
                    len: 4096,
                    buf_offset: 4192
                },
                ObjectExtent {
                    objno: 3,
                    offset: 0,
                    len: 1712,
                    buf_offset: 8288
                },
            ]
        );
        assert!(object_extents(5, 0, 12).is_empty());
        assert_eq!(object_count(0, 22), 0);
        assert_eq!(object_count(1, 22), 1);
        assert_eq!(object_count(4 << 20, 22), 1);
        assert_eq!(object_count((4 << 20) + 1, 22), 2);
    }

    #[test]
    fn a_header_round_trips_and_a_damaged_one_is_named() {
        let h = Header {
            size: 10 << 30,
            order: 22,
            features: features::DEFAULT | features::DATA_POOL,
            data_pool: Some(7),
            created_ms: 1234,
            snapshots: Vec::new(),
            parent: Some(ParentSpec {
                pool: 3,
                image_id: "abc".into(),
                snap_id: 9,
                overlap: 1 << 20,
            }),
        };
        let omap: BTreeMap<Bytes, Bytes> = h
            .to_omap()
            .into_iter()
            .map(|(k, v)| (Bytes::from(k), Bytes::from(v)))
            .collect();
        assert_eq!(Header::from_omap("img", &omap).unwrap(), h);
        let mut bad = omap.clone();
        bad.insert(Bytes::from("size"), Bytes::from_static(b"abc"));
        let e = Header::from_omap("img", &bad).unwrap_err().to_string();
        assert!(e.contains("img") && e.contains("size"), "{e}");
        let mut bad = omap.clone();
        bad.insert(Bytes::from("order"), Bytes::from_static(&[40]));
        assert!(Header::from_omap("img", &bad).is_err());
        let mut bad = omap;
        bad.insert(Bytes::from("parent"), Bytes::from_static(b"{\"pool\":1}"));
        let e = Header::from_omap("img", &bad).unwrap_err().to_string();
        assert!(e.contains("parent"), "{e}");
        assert!(Header::from_omap("img", &BTreeMap::new()).is_err());
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("disk-1").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("a/b").is_err());
        assert!(check_name("a@s").is_err());
        assert!(check_name(&"x".repeat(NAME_MAX + 1)).is_err());
        assert!(check_range("i", 100, 90, 10).is_ok());
        assert!(check_range("i", 100, 90, 11).is_err());
        assert!(check_range("i", 100, u64::MAX, 2).is_err());
    }
}

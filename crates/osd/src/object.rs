//! How client objects sit in the object store: the store key of an object,
//! the PG's collection, the PG's own metadata object, and the xattr names
//! that keep user xattrs apart from the OSD's own object metadata.
//!
//! - Store name: the object name, or `namespace \0 name` in a namespace.
//!   Names and namespaces may not contain NUL, so the two forms never meet,
//!   and names starting with NUL are the OSD's own (the PG meta object).
//! - Store hash: the pool's object hash (`Pool::hash_key`), so a PG's
//!   objects list in the same order on every replica.
//! - Xattrs: user xattr `k` is stored as `u.k`; the object metadata (version
//!   and mtime) is the xattr [`META_XATTR`].

use bytes::Bytes;
use shoal_maps::{PgId, Pool};
use shoal_objectstore::{CollectionId, ObjectKey};

/// Longest object name accepted, in bytes.
pub const NAME_BYTES_MAX: usize = 2048;
/// Longest namespace accepted, in bytes.
pub const NSPACE_BYTES_MAX: usize = 256;
/// Prefix of stored user xattr names.
pub const USER_XATTR_PREFIX: &str = "u.";
/// The stored xattr holding an object's [`ObjectMeta`].
pub const META_XATTR: &str = "s.meta";
/// Store name of each PG's metadata object (PG info and log in its omap).
pub const PG_META_NAME: &[u8] = b"\0pgmeta";

/// The collection holding PG `pg`.
pub fn collection(pg: PgId) -> CollectionId {
    CollectionId::new(pg.pool, pg.seed)
}

/// Removes every collection of `pg` the store holds — the PG's, or (erasure
/// coded) each of its shards' — in one transaction: a deleted pool's PG,
/// or a stray copy.
pub fn remove_pg_collections(
    store: &dyn shoal_objectstore::ObjectStore,
    pg: PgId,
) -> shoal_objectstore::Result<()> {
    let mut t = shoal_objectstore::Transaction::new();
    for c in store.list_collections()? {
        if c.pool == pg.pool && c.seed == pg.seed {
            t.remove_collection(c);
        }
    }
    store.apply_transaction(t)
}

/// An object of the OSD's own that stands for client object `key` (a
/// half-made copy, a rollback stash): hash 0 and a name led by `prefix`
/// (which starts with NUL, so listings and scrub pass it over), then
/// `tag`, then `key`'s hash and name.
pub fn hidden_key(prefix: &[u8], tag: &[u8], key: &ObjectKey) -> ObjectKey {
    let mut name = Vec::with_capacity(prefix.len() + tag.len() + 4 + key.name.len());
    name.extend_from_slice(prefix);
    name.extend_from_slice(tag);
    name.extend_from_slice(&key.hash.to_be_bytes());
    name.extend_from_slice(&key.name);
    ObjectKey {
        hash: 0,
        name,
        snap: key.snap,
    }
}

/// An object key's snapshot as the peer messages carry it: 0 for the head,
/// else the snapshot its clone is for.
pub fn wire_snap(key: &ObjectKey) -> u64 {
    if key.snap == ObjectKey::HEAD {
        0
    } else {
        key.snap
    }
}

/// The store key a peer message names by hash, name and snapshot (0: the head).
pub fn wire_key(hash: u32, name: &[u8], snap: u64) -> ObjectKey {
    ObjectKey {
        hash,
        name: name.to_vec(),
        snap: if snap == 0 { ObjectKey::HEAD } else { snap },
    }
}

/// The PG's metadata object.
pub fn pg_meta_key() -> ObjectKey {
    ObjectKey::new(0, PG_META_NAME.to_vec())
}

/// Why an object name cannot be stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Empty name.
    #[error("object names may not be empty")]
    Empty,
    /// Longer than [`NAME_BYTES_MAX`] or [`NSPACE_BYTES_MAX`].
    #[error("object name or namespace too long ({0} bytes)")]
    TooLong(usize),
    /// Contains a NUL byte.
    #[error("object names and namespaces may not contain NUL")]
    Nul,
}

/// The store key of object `name` in namespace `nspace` of `pool`.
pub fn object_key(pool: &Pool, nspace: &str, name: &str) -> Result<ObjectKey, NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > NAME_BYTES_MAX {
        return Err(NameError::TooLong(name.len()));
    }
    if nspace.len() > NSPACE_BYTES_MAX {
        return Err(NameError::TooLong(nspace.len()));
    }
    if name.contains('\0') || nspace.contains('\0') {
        return Err(NameError::Nul);
    }
    let hash = pool.hash_key(name, nspace);
    let stored = if nspace.is_empty() {
        name.as_bytes().to_vec()
    } else {
        let mut v = Vec::with_capacity(nspace.len() + 1 + name.len());
        v.extend_from_slice(nspace.as_bytes());
        v.push(0);
        v.extend_from_slice(name.as_bytes());
        v
    };
    Ok(ObjectKey::new(hash, stored))
}

/// The (namespace, name) of a stored client object; `None` for the OSD's
/// own objects and for names that are not UTF-8.
pub fn split_key(key: &ObjectKey) -> Option<(String, String)> {
    let b = key.name.as_slice();
    if b.first() == Some(&0) || b.is_empty() {
        return None;
    }
    let s = std::str::from_utf8(b).ok()?;
    Some(match s.split_once('\0') {
        Some((ns, name)) => (ns.to_string(), name.to_string()),
        None => (String::new(), s.to_string()),
    })
}

/// The stored xattr holding an object's [`SnapSet`] (on the head, or on
/// its snapdir once the head is removed while clones remain).
pub const SNAPSET_XATTR: &str = "s.snapset";
/// The snapshot id of an object's snapdir key (Ceph's `CEPH_SNAPDIR`):
/// it keeps the snapset of a removed head whose clones remain.
pub const SNAPDIR: u64 = u64::MAX - 1;
/// Most clones one object keeps.
pub const CLONES_MAX: usize = 4096;
/// Most snapshots one snapshot context names.
pub const SNAPC_SNAPS_MAX: usize = 4096;

/// One clone of an object: the snapshots it stands for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CloneInfo {
    /// Its id (the newest snapshot it stands for; its store key's `snap`).
    pub id: u64,
    /// The snapshots it stands for, newest first.
    pub snaps: Vec<u64>,
    /// Its size.
    pub size: u64,
}

/// An object's snapshots: the newest snapshot sequence a write carried,
/// and its clones, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnapSet {
    /// The `snap_seq` of the newest write's snapshot context.
    pub seq: u64,
    /// Clones, by id ascending.
    pub clones: Vec<CloneInfo>,
}

impl SnapSet {
    /// Stored form: version 1, seq, then per clone id, size and snaps.
    pub fn encode(&self) -> Bytes {
        let mut b = Vec::with_capacity(16 + self.clones.len() * 32);
        b.push(1u8);
        b.extend_from_slice(&self.seq.to_le_bytes());
        b.extend_from_slice(&(self.clones.len() as u32).to_le_bytes());
        for c in &self.clones {
            b.extend_from_slice(&c.id.to_le_bytes());
            b.extend_from_slice(&c.size.to_le_bytes());
            b.extend_from_slice(&(c.snaps.len() as u32).to_le_bytes());
            for s in &c.snaps {
                b.extend_from_slice(&s.to_le_bytes());
            }
        }
        Bytes::from(b)
    }

    /// Decodes the stored form; `None` if it is damaged.
    pub fn decode(b: &[u8]) -> Option<SnapSet> {
        let mut at = 0usize;
        let mut take = |n: usize| -> Option<&[u8]> {
            let s = b.get(at..at.checked_add(n)?)?;
            at += n;
            Some(s)
        };
        let u64_ = |s: &[u8]| s.try_into().ok().map(u64::from_le_bytes);
        let u32_ = |s: &[u8]| s.try_into().ok().map(u32::from_le_bytes);
        if take(1)? != [1] {
            return None;
        }
        let seq = u64_(take(8)?)?;
        let n = u32_(take(4)?)? as usize;
        if n > CLONES_MAX {
            return None;
        }
        let mut clones = Vec::with_capacity(n);
        for _ in 0..n {
            let id = u64_(take(8)?)?;
            let size = u64_(take(8)?)?;
            let k = u32_(take(4)?)? as usize;
            if k > SNAPC_SNAPS_MAX {
                return None;
            }
            let mut snaps = Vec::with_capacity(k);
            for _ in 0..k {
                snaps.push(u64_(take(8)?)?);
            }
            clones.push(CloneInfo { id, snaps, size });
        }
        (at == b.len()).then_some(SnapSet { seq, clones })
    }

    /// Which store key holds the object as it was at snapshot `snap`:
    /// the head if no write since carried it, else the clone standing for
    /// it; `None` if the object did not exist then.
    pub fn resolve(&self, snap: u64) -> Option<u64> {
        if snap > self.seq {
            return Some(ObjectKey::HEAD);
        }
        self.clones
            .iter()
            .find(|c| c.id >= snap)
            .filter(|c| c.snaps.contains(&snap))
            .map(|c| c.id)
    }
}

/// The OSD's metadata of one object, kept in the xattr [`META_XATTR`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ObjectMeta {
    /// The object's version: the PG log version `v` of its last change.
    pub version: u64,
    /// Last modification, ms since the Unix epoch.
    pub mtime_ms: u64,
}

impl ObjectMeta {
    const LEN: usize = 17;
    const FORMAT: u8 = 1;

    /// Fixed-width encoding: format byte, version, mtime (little endian).
    pub fn encode(&self) -> Bytes {
        let mut v = Vec::with_capacity(Self::LEN);
        v.push(Self::FORMAT);
        v.extend_from_slice(&self.version.to_le_bytes());
        v.extend_from_slice(&self.mtime_ms.to_le_bytes());
        Bytes::from(v)
    }

    /// Decodes [`ObjectMeta::encode`]'s output; `None` if malformed.
    pub fn decode(b: &[u8]) -> Option<ObjectMeta> {
        if b.len() != Self::LEN || b[0] != Self::FORMAT {
            return None;
        }
        let version = u64::from_le_bytes(b[1..9].try_into().ok()?);
        let mtime_ms = u64::from_le_bytes(b[9..17].try_into().ok()?);
        Some(ObjectMeta { version, mtime_ms })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> Pool {
        Pool::replicated(1, "rbd", 3, 2, 8, 0)
    }

    #[test]
    fn names_and_namespaces_round_trip_and_never_collide() {
        let p = pool();
        let a = object_key(&p, "", "a\u{1}b").unwrap();
        let b = object_key(&p, "a", "b").unwrap();
        assert_ne!(a.name, b.name);
        assert_eq!(split_key(&a), Some((String::new(), "a\u{1}b".into())));
        assert_eq!(split_key(&b), Some(("a".into(), "b".into())));
        assert_eq!(split_key(&pg_meta_key()), None);
        assert_eq!(a.hash, p.hash_key("a\u{1}b", ""));
    }

    #[test]
    fn bad_names_are_refused() {
        let p = pool();
        assert_eq!(object_key(&p, "", ""), Err(NameError::Empty));
        assert_eq!(object_key(&p, "", "a\0b"), Err(NameError::Nul));
        assert_eq!(object_key(&p, "x\0", "b"), Err(NameError::Nul));
        let long = "x".repeat(NAME_BYTES_MAX + 1);
        assert!(matches!(
            object_key(&p, "", &long),
            Err(NameError::TooLong(_))
        ));
    }

    #[test]
    fn meta_round_trips_and_rejects_garbage() {
        let m = ObjectMeta {
            version: 7,
            mtime_ms: 1234,
        };
        assert_eq!(ObjectMeta::decode(&m.encode()), Some(m));
        assert_eq!(ObjectMeta::decode(&[1, 2, 3]), None);
        let mut bad = m.encode().to_vec();
        bad[0] = 9;
        assert_eq!(ObjectMeta::decode(&bad), None);
    }
}

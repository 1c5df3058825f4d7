//! Identifiers and small value types of the object store.

use std::fmt;

/// Longest object name accepted, in bytes.
pub const OBJECT_NAME_BYTES_MAX: usize = 4096;
/// Most operations in one transaction.
pub const TRANSACTION_OPS_MAX: usize = 1 << 16;
/// Most data payload in one transaction, in bytes (256 MiB).
pub const TRANSACTION_DATA_BYTES_MAX: u64 = 256 << 20;
/// Longest read, in bytes (256 MiB): a longer one is refused rather than allocated.
pub const READ_BYTES_MAX: u64 = 256 << 20;
/// Largest object size accepted, in bytes (1 TiB).
pub const OBJECT_SIZE_MAX: u64 = 1 << 40;

/// A collection: the objects of one placement group, or of one shard of an
/// erasure-coded placement group.
///
/// Identified by its pool, the PG seed inside that pool and the shard
/// ([`CollectionId::NO_SHARD`] for a replicated PG, whose copies are
/// alike). Ordered by pool, then seed, then shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CollectionId {
    /// The pool the PG belongs to.
    pub pool: u64,
    /// The PG seed (placement seed) inside the pool.
    pub seed: u32,
    /// The shard of an erasure-coded PG this collection holds (its position
    /// in the acting set), or [`CollectionId::NO_SHARD`].
    pub shard: u8,
}

/// Bytes of [`CollectionId::to_bytes`].
pub const COLLECTION_ID_BYTES: usize = 13;

impl CollectionId {
    /// The shard of a replicated PG: every copy is the whole PG.
    pub const NO_SHARD: u8 = u8::MAX;

    /// The collection of replicated PG `pool.seed`.
    pub const fn new(pool: u64, seed: u32) -> Self {
        Self {
            pool,
            seed,
            shard: Self::NO_SHARD,
        }
    }

    /// The collection of shard `shard` of erasure-coded PG `pool.seed`.
    pub const fn shard(pool: u64, seed: u32, shard: u8) -> Self {
        Self { pool, seed, shard }
    }

    /// Fixed-width big-endian encoding (13 bytes: pool, seed, shard) whose
    /// byte order equals `Ord`.
    pub fn to_bytes(&self) -> [u8; COLLECTION_ID_BYTES] {
        let mut out = [0u8; COLLECTION_ID_BYTES];
        out[..8].copy_from_slice(&self.pool.to_be_bytes());
        out[8..12].copy_from_slice(&self.seed.to_be_bytes());
        out[12] = self.shard;
        out
    }

    /// Inverse of [`CollectionId::to_bytes`] (reads its first 13 bytes).
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let pool = u64::from_be_bytes(b.get(..8)?.try_into().ok()?);
        let seed = u32::from_be_bytes(b.get(8..12)?.try_into().ok()?);
        let shard = *b.get(12)?;
        Some(Self { pool, seed, shard })
    }
}

impl fmt::Display for CollectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:x}", self.pool, self.seed)?;
        if self.shard != Self::NO_SHARD {
            write!(f, "s{}", self.shard)?;
        }
        Ok(())
    }
}

/// An object inside a collection: a 32-bit placement hash, a name and a
/// snapshot id ([`ObjectKey::HEAD`] for the object itself; a clone made for
/// a snapshot carries that snapshot's id).
///
/// Ordered by hash, then name, then snapshot: listing a collection in this
/// order is the "stable hash order" of the contract, a PG split is a
/// contiguous hash range, and an object's clones sit just before it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// Placement hash of the name (the OSD supplies it; the store never computes it).
    pub hash: u32,
    /// The object name, arbitrary bytes.
    pub name: Vec<u8>,
    /// The snapshot this is a clone for, or [`ObjectKey::HEAD`].
    pub snap: u64,
}

impl ObjectKey {
    /// The snapshot id of an object itself (not a clone): after every
    /// snapshot id, as Ceph's `CEPH_NOSNAP`.
    pub const HEAD: u64 = u64::MAX;

    /// The key of object `name` itself (not a clone) with hash `hash`.
    pub fn new(hash: u32, name: impl Into<Vec<u8>>) -> Self {
        Self {
            hash,
            name: name.into(),
            snap: Self::HEAD,
        }
    }

    /// The key of the clone of `self` for snapshot `snap`.
    pub fn clone_for(&self, snap: u64) -> Self {
        Self {
            hash: self.hash,
            name: self.name.clone(),
            snap,
        }
    }

    /// Encoding whose byte order equals `Ord`: the hash (4 bytes,
    /// big-endian), the name with every 0x00 written as 0x00 0xFF and ended
    /// by 0x00 0x00, then the snapshot id (8 bytes, big-endian).
    pub fn to_bytes(&self) -> Vec<u8> {
        let zeros = self.name.iter().filter(|b| **b == 0).count();
        let mut out = Vec::with_capacity(4 + self.name.len() + zeros + 2 + 8);
        out.extend_from_slice(&self.hash.to_be_bytes());
        for b in &self.name {
            out.push(*b);
            if *b == 0 {
                out.push(0xff);
            }
        }
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&self.snap.to_be_bytes());
        out
    }

    /// Inverse of [`ObjectKey::to_bytes`]: the key and the bytes after it,
    /// or `None` if `b` does not start with a whole, well-formed key.
    pub fn from_bytes_prefix(b: &[u8]) -> Option<(Self, &[u8])> {
        let hash = u32::from_be_bytes(b.get(..4)?.try_into().ok()?);
        let mut name = Vec::new();
        let mut i = 4;
        loop {
            match (*b.get(i)?, b.get(i + 1).copied()) {
                (0, Some(0)) => break,
                (0, Some(0xff)) => {
                    name.push(0);
                    i += 2;
                }
                (0, _) => return None,
                (c, _) => {
                    name.push(c);
                    i += 1;
                }
            }
            if name.len() > OBJECT_NAME_BYTES_MAX {
                return None;
            }
        }
        let rest = b.get(i + 2..)?;
        let snap = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
        Some((Self { hash, name, snap }, &rest[8..]))
    }

    /// Inverse of [`ObjectKey::to_bytes`]: `None` unless `b` is exactly one key.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        match Self::from_bytes_prefix(b)? {
            (k, []) => Some(k),
            _ => None,
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:08x}:{}",
            self.hash,
            String::from_utf8_lossy(&self.name)
        )?;
        if self.snap != Self::HEAD {
            write!(f, "@{}", self.snap)?;
        }
        Ok(())
    }
}

/// What `stat` reports about an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectStat {
    /// Logical size in bytes.
    pub size: u64,
    /// Bytes of device space allocated to the object's data.
    pub allocated_bytes: u64,
}

/// Store-wide space figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatFs {
    /// Capacity of the data device.
    pub total_bytes: u64,
    /// Space not allocated to any object.
    pub free_bytes: u64,
    /// Sum of the logical sizes of all objects.
    pub stored_bytes: u64,
    /// Number of objects.
    pub objects: u64,
    /// Number of collections.
    pub collections: u64,
}

/// One page of a collection listing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Listing {
    /// Objects in stable hash order.
    pub objects: Vec<ObjectKey>,
    /// Cursor for the next page (pass as `start`), `None` when the listing is complete.
    pub next: Option<ObjectKey>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Vec<ObjectKey> {
        let names: [&[u8]; 8] = [
            b"", b"a", b"a\0", b"a\0\xff", b"a\xff", b"ab", b"\0", b"\0\0",
        ];
        let mut out = Vec::new();
        for hash in [0, 7, u32::MAX] {
            for name in names {
                for snap in [0, 1, 1 << 40, ObjectKey::HEAD] {
                    out.push(ObjectKey {
                        hash,
                        name: name.to_vec(),
                        snap,
                    });
                }
            }
        }
        out
    }

    #[test]
    fn object_keys_round_trip_and_their_bytes_sort_as_the_keys_do() {
        let keys = keys();
        for a in &keys {
            assert_eq!(ObjectKey::from_bytes(&a.to_bytes()).as_ref(), Some(a));
            for b in &keys {
                assert_eq!(a.cmp(b), a.to_bytes().cmp(&b.to_bytes()), "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn a_key_followed_by_more_bytes_is_told_apart_and_damaged_keys_are_refused() {
        let k = ObjectKey::new(9, &b"x\0y"[..]).clone_for(3);
        let mut b = k.to_bytes();
        b.extend_from_slice(b"omap-key");
        assert_eq!(
            ObjectKey::from_bytes_prefix(&b),
            Some((k.clone(), &b"omap-key"[..]))
        );
        assert_eq!(ObjectKey::from_bytes(&b), None);
        let whole = k.to_bytes();
        for cut in 0..whole.len() {
            assert_eq!(ObjectKey::from_bytes(&whole[..cut]), None, "cut at {cut}");
        }
        // A lone 0x00 not followed by 0xff or 0x00 is no encoding of ours.
        assert_eq!(ObjectKey::from_bytes(&[0, 0, 0, 1, b'a', 0, 7, 0, 0]), None);
    }

    #[test]
    fn collections_carry_their_shard_and_sort_by_pool_seed_shard() {
        let all = [
            CollectionId::new(1, 2),
            CollectionId::shard(1, 2, 0),
            CollectionId::shard(1, 2, 3),
            CollectionId::new(1, 3),
            CollectionId::new(2, 0),
        ];
        for a in &all {
            assert_eq!(CollectionId::from_bytes(&a.to_bytes()), Some(*a));
            for b in &all {
                assert_eq!(a.cmp(b), a.to_bytes().cmp(&b.to_bytes()));
            }
        }
        assert_eq!(CollectionId::new(1, 2).to_string(), "1.2");
        assert_eq!(CollectionId::shard(1, 0x2a, 3).to_string(), "1.2as3");
        assert_eq!(CollectionId::from_bytes(&[0; 12]), None);
    }
}

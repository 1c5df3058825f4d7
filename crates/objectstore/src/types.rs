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

/// A collection: the objects of one placement group.
///
/// Identified by its pool and the PG seed inside that pool. Ordered by pool, then seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CollectionId {
    /// The pool the PG belongs to.
    pub pool: u64,
    /// The PG seed (placement seed) inside the pool.
    pub seed: u32,
}

impl CollectionId {
    /// A collection for PG `pool.seed`.
    pub fn new(pool: u64, seed: u32) -> Self {
        Self { pool, seed }
    }

    /// Fixed-width big-endian encoding (12 bytes) whose byte order equals `Ord`.
    pub fn to_bytes(&self) -> [u8; 12] {
        let mut out = [0u8; 12];
        out[..8].copy_from_slice(&self.pool.to_be_bytes());
        out[8..].copy_from_slice(&self.seed.to_be_bytes());
        out
    }

    /// Inverse of [`CollectionId::to_bytes`].
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let pool = u64::from_be_bytes(b.get(..8)?.try_into().ok()?);
        let seed = u32::from_be_bytes(b.get(8..12)?.try_into().ok()?);
        Some(Self { pool, seed })
    }
}

impl fmt::Display for CollectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:x}", self.pool, self.seed)
    }
}

/// An object inside a collection: a 32-bit placement hash and a name.
///
/// Ordered by hash, then name: listing a collection in this order is the "stable hash
/// order" of the contract, and a PG split is a contiguous hash range.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// Placement hash of the name (the OSD supplies it; the store never computes it).
    pub hash: u32,
    /// The object name, arbitrary bytes.
    pub name: Vec<u8>,
}

impl ObjectKey {
    /// An object key from its hash and name.
    pub fn new(hash: u32, name: impl Into<Vec<u8>>) -> Self {
        Self {
            hash,
            name: name.into(),
        }
    }

    /// Encoding (4-byte big-endian hash, then the name) whose byte order equals `Ord`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.name.len());
        out.extend_from_slice(&self.hash.to_be_bytes());
        out.extend_from_slice(&self.name);
        out
    }

    /// Inverse of [`ObjectKey::to_bytes`].
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let hash = u32::from_be_bytes(b.get(..4)?.try_into().ok()?);
        Some(Self {
            hash,
            name: b.get(4..)?.to_vec(),
        })
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:08x}:{}",
            self.hash,
            String::from_utf8_lossy(&self.name)
        )
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

//! The `ObjectStore` contract.

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;

use crate::error::Result;
use crate::ticket::CommitTicket;
use crate::transaction::Transaction;
use crate::types::{CollectionId, Listing, ObjectKey, ObjectStat, StatFs};

/// Where an OSD keeps its objects. Implemented by [`crate::MemStore`] and
/// [`crate::BlockStore`]; [`crate::testsuite`] checks every law below against each.
///
/// # Laws
///
/// 1. **Atomic.** A transaction applies whole or not at all. `queue_transaction` checks
///    every precondition first; if one fails it returns the error and nothing changed.
///    Preconditions: every op's collection exists (after the earlier ops of the same
///    transaction); `CreateCollection` needs the collection absent; `Remove` and the
///    source of `Clone`, `CloneRange` and `Rename` need the object present;
///    `SplitCollection` needs both collections, distinct, and after it only further
///    splits may touch either in the same transaction; offsets and
///    lengths stay within [`crate::types::OBJECT_SIZE_MAX`]; names within
///    [`crate::types::OBJECT_NAME_BYTES_MAX`]; the transaction within
///    [`crate::types::TRANSACTION_OPS_MAX`] and [`crate::types::TRANSACTION_DATA_BYTES_MAX`].
///    Every other op on an object creates it
///    when absent (an empty object: size 0, no xattrs, empty omap and header).
/// 2. **Ordered.** Transactions take effect in the order `queue_transaction` returned;
///    ops inside a transaction in list order, each seeing the effect of the previous.
/// 3. **Read your queue.** Once `queue_transaction` returns `Ok`, every read from any
///    thread sees the transaction (and all earlier ones).
/// 4. **Durable on completion.** When the [`CommitTicket`] resolves `Ok`, the transaction
///    and every earlier one survive a crash or power loss. After a crash the store
///    holds exactly the effects of a prefix of the queued transactions that contains
///    every transaction whose ticket resolved `Ok`.
/// 5. **Data.** An object is a byte string of `size` bytes; bytes never written read as
///    zeros (holes, `Zero`, growth by `Truncate` or by a write past the end). `read`
///    returns `min(len, size - offset)` bytes, empty at or past the end; a read of more than
///    [`crate::types::READ_BYTES_MAX`] bytes is refused with `InvalidArgument`.
/// 6. **Checked.** A read never returns bytes that differ from those written: a
///    corrupted block is reported as [`crate::Error::Checksum`].
/// 7. **Listing.** `list_objects` returns objects ordered by ([`ObjectKey::hash`],
///    name), starting at the cursor inclusive; listing page by page with the returned
///    cursor visits each object present throughout exactly once.
/// 8. **Poison.** After a write or sync of the medium fails, every later
///    `queue_transaction` returns [`crate::Error::Poisoned`]; pending tickets resolve with
///    that error; a failed sync is never retried. Reads keep working.
/// 9. **Copies.** `Clone` and `Rename` replace the destination whole; clones share no
///    state with their source afterwards (writing one never changes the other).
/// 10. **Allocation.** `allocated` reports every range that holds data; whole
///     4 KiB blocks never written, zeroed or cut off are not reported (the
///     conformance suite checks both, against the model too).
pub trait ObjectStore: Send + Sync + std::fmt::Debug {
    /// Check and apply `txn` (visible to reads at once) and queue it for durability.
    /// May block briefly: when too many transactions await durability it waits for room
    /// (a bounded queue), and it performs copy-on-write data writes itself.
    fn queue_transaction(&self, txn: Transaction) -> Result<CommitTicket>;

    /// Queue `txn` and wait until it is durable.
    fn apply_transaction(&self, txn: Transaction) -> Result<()> {
        self.queue_transaction(txn)?.wait()
    }

    /// Wait until every transaction queued so far is durable.
    fn flush(&self) -> Result<()>;

    /// All collections, in order.
    fn list_collections(&self) -> Result<Vec<CollectionId>>;

    /// Whether the collection exists.
    fn collection_exists(&self, c: &CollectionId) -> Result<bool>;

    /// Up to `max` objects of `c` from `start` (inclusive) in stable hash order.
    fn list_objects(
        &self,
        c: &CollectionId,
        start: Option<&ObjectKey>,
        max: usize,
    ) -> Result<Listing>;

    /// Whether the object exists (`Err` if the collection does not).
    fn exists(&self, c: &CollectionId, o: &ObjectKey) -> Result<bool>;

    /// Size of the object.
    fn stat(&self, c: &CollectionId, o: &ObjectKey) -> Result<ObjectStat>;

    /// Up to `len` bytes from `offset`.
    fn read(&self, c: &CollectionId, o: &ObjectKey, offset: u64, len: u64) -> Result<Bytes>;

    /// [`ObjectStore::read`], with the crc32c of the bytes returned when the
    /// store has it without another pass over them (BlockStore folds the
    /// per-block checksums its read verified), so a reply can carry it as
    /// its frame checksum; `None` when it has not.
    fn read_with_crc(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        offset: u64,
        len: u64,
    ) -> Result<(Bytes, Option<u32>)> {
        Ok((self.read(c, o, offset, len)?, None))
    }

    /// [`ObjectStore::read`] from the media itself, never from a cache of
    /// recently read data: a deep scrub checks what the device holds.
    fn read_from_media(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        offset: u64,
        len: u64,
    ) -> Result<Bytes> {
        self.read(c, o, offset, len)
    }

    /// One xattr.
    fn getxattr(&self, c: &CollectionId, o: &ObjectKey, name: &str) -> Result<Option<Bytes>>;

    /// All xattrs.
    fn getxattrs(&self, c: &CollectionId, o: &ObjectKey) -> Result<BTreeMap<String, Bytes>>;

    /// The omap header (empty if never set).
    fn omap_get_header(&self, c: &CollectionId, o: &ObjectKey) -> Result<Bytes>;

    /// The values of those `keys` that are present.
    fn omap_get_values(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        keys: &[Bytes],
    ) -> Result<BTreeMap<Bytes, Bytes>>;

    /// Up to `max` omap entries with keys in `(start, end)`, in key order. Iterate by
    /// passing `Bound::Excluded(last key)` as the next `start`.
    fn omap_range(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        max: usize,
    ) -> Result<Vec<(Bytes, Bytes)>>;

    /// Store-wide space figures.
    fn statfs(&self) -> Result<StatFs>;

    /// Capacity and free space only (`total_bytes` and `free_bytes`; the counts may be
    /// left at 0): what a fullness check needs, at a cost that does not grow with the
    /// number of objects. This default gives the whole [`statfs`](Self::statfs).
    fn space(&self) -> Result<StatFs> {
        self.statfs()
    }

    /// The allocated ranges of `[offset, offset + len)`, clipped to the object's
    /// size, as `(offset, length)` in order and never touching: what lies outside
    /// them reads as zeros. A store may count zeros as allocated (this default
    /// counts everything), never data as unallocated.
    fn allocated(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        offset: u64,
        len: u64,
    ) -> Result<Vec<(u64, u64)>> {
        let size = self.stat(c, o)?.size;
        let end = offset.saturating_add(len).min(size);
        Ok(if end > offset {
            vec![(offset, end - offset)]
        } else {
            Vec::new()
        })
    }
}

/// A shared store is a store (a test can keep a handle while the code
/// under test owns another).
impl<S: ObjectStore + ?Sized> ObjectStore for std::sync::Arc<S> {
    fn queue_transaction(&self, txn: Transaction) -> Result<CommitTicket> {
        (**self).queue_transaction(txn)
    }
    fn apply_transaction(&self, txn: Transaction) -> Result<()> {
        (**self).apply_transaction(txn)
    }
    fn flush(&self) -> Result<()> {
        (**self).flush()
    }
    fn list_collections(&self) -> Result<Vec<CollectionId>> {
        (**self).list_collections()
    }
    fn collection_exists(&self, c: &CollectionId) -> Result<bool> {
        (**self).collection_exists(c)
    }
    fn list_objects(
        &self,
        c: &CollectionId,
        start: Option<&ObjectKey>,
        max: usize,
    ) -> Result<Listing> {
        (**self).list_objects(c, start, max)
    }
    fn exists(&self, c: &CollectionId, o: &ObjectKey) -> Result<bool> {
        (**self).exists(c, o)
    }
    fn stat(&self, c: &CollectionId, o: &ObjectKey) -> Result<ObjectStat> {
        (**self).stat(c, o)
    }
    fn read(&self, c: &CollectionId, o: &ObjectKey, offset: u64, len: u64) -> Result<Bytes> {
        (**self).read(c, o, offset, len)
    }
    fn read_with_crc(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        offset: u64,
        len: u64,
    ) -> Result<(Bytes, Option<u32>)> {
        (**self).read_with_crc(c, o, offset, len)
    }
    fn read_from_media(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        offset: u64,
        len: u64,
    ) -> Result<Bytes> {
        (**self).read_from_media(c, o, offset, len)
    }
    fn getxattr(&self, c: &CollectionId, o: &ObjectKey, name: &str) -> Result<Option<Bytes>> {
        (**self).getxattr(c, o, name)
    }
    fn getxattrs(&self, c: &CollectionId, o: &ObjectKey) -> Result<BTreeMap<String, Bytes>> {
        (**self).getxattrs(c, o)
    }
    fn omap_get_header(&self, c: &CollectionId, o: &ObjectKey) -> Result<Bytes> {
        (**self).omap_get_header(c, o)
    }
    fn omap_get_values(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        keys: &[Bytes],
    ) -> Result<BTreeMap<Bytes, Bytes>> {
        (**self).omap_get_values(c, o, keys)
    }
    fn omap_range(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        max: usize,
    ) -> Result<Vec<(Bytes, Bytes)>> {
        (**self).omap_range(c, o, start, end, max)
    }
    fn statfs(&self) -> Result<StatFs> {
        (**self).statfs()
    }
    fn space(&self) -> Result<StatFs> {
        (**self).space()
    }
    fn allocated(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        offset: u64,
        len: u64,
    ) -> Result<Vec<(u64, u64)>> {
        (**self).allocated(c, o, offset, len)
    }
}

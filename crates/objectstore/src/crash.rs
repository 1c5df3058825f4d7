//! `CrashStore`: an in-memory store that loses what the contract allows a
//! crash to lose, for the deterministic simulation.
//!
//! Transactions apply to a live image at once (reads see them, law 3) but
//! become durable only when [`CrashStore::commit`] runs (the simulation's
//! group commit), which resolves their tickets. [`CrashStore::crash`] keeps
//! the durable image plus a prefix of the transactions still waiting, as
//! law 4 allows, and returns the store a restarted OSD finds; the crashed
//! store refuses every later transaction, so a task of the dead daemon that
//! still runs cannot change what the restarted one reads.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::memstore::MemStore;
use crate::store::ObjectStore;
use crate::ticket::CommitTicket;
use crate::transaction::Transaction;
use crate::types::{CollectionId, Listing, ObjectKey, ObjectStat, StatFs};

#[derive(Debug)]
struct Durability {
    durable: MemStore,
    pending: VecDeque<(Transaction, CommitTicket)>,
    crashed: bool,
}

/// A [`MemStore`] whose transactions are durable only once committed.
#[derive(Debug)]
pub struct CrashStore {
    live: MemStore,
    state: Mutex<Durability>,
}

impl CrashStore {
    /// An empty store reporting `capacity_bytes`.
    pub fn new(capacity_bytes: u64) -> Self {
        Self::from_image(MemStore::new(capacity_bytes))
    }

    fn from_image(image: MemStore) -> Self {
        Self {
            live: image.snapshot(),
            state: Mutex::new(Durability {
                durable: image,
                pending: VecDeque::new(),
                crashed: false,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Durability> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Transactions applied but not yet durable.
    pub fn pending(&self) -> usize {
        self.lock().pending.len()
    }

    /// Makes every queued transaction durable and resolves its ticket.
    pub fn commit(&self) {
        let tickets: Vec<CommitTicket> = {
            let mut st = self.lock();
            let Durability {
                durable, pending, ..
            } = &mut *st;
            pending
                .drain(..)
                .map(|(txn, ticket)| {
                    // It applied to the live image in this order, so it
                    // applies to the durable one.
                    let _ = durable.queue_transaction(txn);
                    ticket
                })
                .collect()
        };
        // Outside the lock: a callback may read the store.
        for t in tickets {
            t.complete(Ok(()));
        }
    }

    /// Crashes: this store refuses every later transaction and never
    /// resolves the tickets still waiting. Returns what a restart finds:
    /// the durable image plus the first `keep` of the waiting transactions
    /// (fewer if fewer wait).
    pub fn crash(&self, keep: usize) -> CrashStore {
        let mut st = self.lock();
        st.crashed = true;
        let image = st.durable.snapshot();
        for (txn, _) in st.pending.iter().take(keep) {
            let _ = image.queue_transaction(txn.clone());
        }
        st.pending.clear();
        CrashStore::from_image(image)
    }
}

impl ObjectStore for CrashStore {
    fn queue_transaction(&self, txn: Transaction) -> Result<CommitTicket> {
        let mut st = self.lock();
        if st.crashed {
            return Err(Error::Poisoned("the store crashed".into()));
        }
        self.live.queue_transaction(txn.clone())?;
        let ticket = CommitTicket::default();
        st.pending.push_back((txn, ticket.clone()));
        Ok(ticket)
    }

    fn apply_transaction(&self, txn: Transaction) -> Result<()> {
        let ticket = self.queue_transaction(txn)?;
        self.commit();
        ticket.wait()
    }

    fn flush(&self) -> Result<()> {
        if self.lock().crashed {
            return Err(Error::Poisoned("the store crashed".into()));
        }
        self.commit();
        Ok(())
    }

    fn list_collections(&self) -> Result<Vec<CollectionId>> {
        self.live.list_collections()
    }

    fn collection_exists(&self, c: &CollectionId) -> Result<bool> {
        self.live.collection_exists(c)
    }

    fn list_objects(
        &self,
        c: &CollectionId,
        start: Option<&ObjectKey>,
        max: usize,
    ) -> Result<Listing> {
        self.live.list_objects(c, start, max)
    }

    fn exists(&self, c: &CollectionId, o: &ObjectKey) -> Result<bool> {
        self.live.exists(c, o)
    }

    fn stat(&self, c: &CollectionId, o: &ObjectKey) -> Result<ObjectStat> {
        self.live.stat(c, o)
    }

    fn read(&self, c: &CollectionId, o: &ObjectKey, offset: u64, len: u64) -> Result<Bytes> {
        self.live.read(c, o, offset, len)
    }

    fn read_with_crc(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        offset: u64,
        len: u64,
    ) -> Result<(Bytes, Option<u32>)> {
        self.live.read_with_crc(c, o, offset, len)
    }

    fn getxattr(&self, c: &CollectionId, o: &ObjectKey, name: &str) -> Result<Option<Bytes>> {
        self.live.getxattr(c, o, name)
    }

    fn getxattrs(&self, c: &CollectionId, o: &ObjectKey) -> Result<BTreeMap<String, Bytes>> {
        self.live.getxattrs(c, o)
    }

    fn omap_get_header(&self, c: &CollectionId, o: &ObjectKey) -> Result<Bytes> {
        self.live.omap_get_header(c, o)
    }

    fn omap_get_values(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        keys: &[Bytes],
    ) -> Result<BTreeMap<Bytes, Bytes>> {
        self.live.omap_get_values(c, o, keys)
    }

    fn omap_range(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        max: usize,
    ) -> Result<Vec<(Bytes, Bytes)>> {
        self.live.omap_range(c, o, start, end, max)
    }

    fn statfs(&self) -> Result<StatFs> {
        self.live.statfs()
    }

    fn space(&self) -> Result<StatFs> {
        self.live.space()
    }

    fn allocated(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        offset: u64,
        len: u64,
    ) -> Result<Vec<(u64, u64)>> {
        self.live.allocated(c, o, offset, len)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const C: CollectionId = CollectionId::new(1, 0);

    fn put(s: &CrashStore, name: &str) -> CommitTicket {
        let mut t = Transaction::new();
        t.write(C, ObjectKey::new(1, name), 0, Bytes::from_static(b"x"));
        s.queue_transaction(t).unwrap()
    }

    #[test]
    fn a_crash_keeps_the_durable_image_and_a_prefix_of_the_queue() {
        let s = CrashStore::new(1 << 20);
        let mut t = Transaction::new();
        t.create_collection(C);
        s.apply_transaction(t).unwrap();
        let a = put(&s, "a");
        s.commit();
        assert!(a.is_done());
        let b = put(&s, "b");
        let _c = put(&s, "c");
        assert!(!b.is_done());
        assert!(
            s.exists(&C, &ObjectKey::new(1, "c")).unwrap(),
            "reads see the queue"
        );
        let restarted = s.crash(1);
        assert!(!b.is_done(), "a crashed store resolves nothing");
        assert!(matches!(
            s.queue_transaction(Transaction::new()),
            Err(Error::Poisoned(_))
        ));
        let names: Vec<String> = restarted
            .list_objects(&C, None, 10)
            .unwrap()
            .objects
            .iter()
            .map(|k| String::from_utf8_lossy(&k.name).into_owned())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(restarted.pending(), 0);
    }
}

//! The committer thread: group commit. It takes every queued batch, makes their data
//! durable with one device sync, writes all their metadata in one redb transaction with
//! one fsync, answers the group's writers, and hands the deferred writes and freed space
//! to the applier thread (`applier.rs`), which puts them in place while the next group
//! commits.

use std::sync::Arc;

use redb::Durability;

use super::Shared;
use super::alloc::FreeList;
use super::applier::{Applied, Applier};
use super::apply::{Batch, KvOp};
use super::meta::{DEFERRED, FREE, me};
use crate::error::{Error, Result};
use crate::ticket::CommitTicket;

/// Deferred records applied in place are deleted from the log by the first commit that
/// syncs the data device anyway, or once this many are waiting.
const APPLIED_RETIRE_AT: usize = 256;

/// A batch waiting for the committer, with the ticket to resolve.
#[derive(Debug)]
pub(crate) struct Queued {
    pub batch: Batch,
    pub ticket: CommitTicket,
    /// Holds an in-flight place (see `Shared::reserve`); flush markers do not.
    pub reserved: bool,
}

/// Committer-owned state.
pub(crate) struct Committer {
    pub shared: Arc<Shared>,
    /// Mirror of the persisted free list (the live allocator runs ahead of it).
    pub durable_free: FreeList,
    /// Writes deferred records in place; those that landed are deleted by a later
    /// commit that first syncs the data device (so the in-place writes are durable
    /// before their records go).
    pub applier: Applier,
}

impl Committer {
    pub fn run(mut self) {
        loop {
            let (group, shutdown) = self.shared.take_queued();
            if group.is_empty() && shutdown {
                self.applier.drain();
                if self.applier.landed_len() > 0 && self.shared.poison_reason().is_none() {
                    // Leave no replay work behind on a clean shutdown.
                    if let Err(e) = self.commit(&[]) {
                        self.shared.poison(&e);
                    }
                }
                return;
            }
            let reserved = group.iter().filter(|q| q.reserved).count() as u64;
            self.commit_group(group);
            self.shared.release(reserved);
        }
    }

    fn commit_group(&mut self, group: Vec<Queued>) {
        if let Some(reason) = self.shared.poison_reason() {
            for q in group {
                q.ticket.complete(Err(reason.clone()));
            }
            return;
        }
        match self.commit(&group) {
            Ok(()) => {
                // Durable now: the writers go on while the deferred writes go in
                // place (reads see them in the overlay until they have).
                let mut applied = Applied::default();
                for q in group {
                    q.ticket.complete(Ok(()));
                    let Batch {
                        deferred, frees, ..
                    } = q.batch;
                    applied.deferred.extend(deferred);
                    applied.frees.extend(frees);
                }
                self.applier.send(applied);
            }
            Err(e) => {
                let reason = self.shared.poison(&e);
                for q in group {
                    q.ticket.complete(Err(reason.clone()));
                }
            }
        }
    }

    fn commit(&mut self, group: &[Queued]) -> Result<()> {
        // Data first: once the metadata commits it may point at these blocks. A group of
        // only deferred writes and metadata wrote no data yet, so it skips the device
        // sync; the records applied in place since wait for the next synced commit.
        let wrote_data = group.iter().any(|q| !q.batch.allocs.is_empty());
        let retire = group.is_empty() || self.applier.landed_len() >= APPLIED_RETIRE_AT;
        let sync_data = wrote_data || retire;
        // Taken before the sync: what has landed by now is durable after it.
        let retired = if sync_data {
            self.applier.take_landed()
        } else {
            Vec::new()
        };
        let outcome = self.commit_retiring(group, sync_data, &retired);
        if outcome.is_err() {
            self.applier.put_back(retired);
        }
        outcome
    }

    fn commit_retiring(
        &mut self,
        group: &[Queued],
        sync_data: bool,
        retired: &[u64],
    ) -> Result<()> {
        let sh = &self.shared;
        if sync_data {
            sh.dev
                .sync()
                .map_err(|e| Error::io("syncing the data device", e))?;
        }
        let mut wtx = sh.db.begin_write().map_err(me("begin write"))?;
        wtx.set_durability(Durability::Immediate);
        {
            for q in group {
                let b = &q.batch;
                for kv in &b.kv {
                    match kv {
                        KvOp::Put(t, k, v) => {
                            wtx.open_table(*t)
                                .map_err(me("open table"))?
                                .insert(&k[..], &v[..])
                                .map_err(me("put"))?;
                        }
                        KvOp::Del(t, k) => {
                            wtx.open_table(*t)
                                .map_err(me("open table"))?
                                .remove(&k[..])
                                .map_err(me("delete"))?;
                        }
                    }
                }
                let mut deferred = wtx.open_table(DEFERRED).map_err(me("open deferred"))?;
                for (seq, pb, data) in &b.deferred {
                    let rec = super::codec::encode_deferred(*pb, data);
                    deferred
                        .insert(&seq.to_be_bytes()[..], &rec[..])
                        .map_err(me("put deferred"))?;
                }
                for &(s, n) in &b.allocs {
                    if !self.durable_free.remove_range(s, n) {
                        return Err(Error::Corrupt(format!(
                            "allocated run {s}+{n} is not free in the persisted free list"
                        )));
                    }
                }
                for &(s, n) in &b.frees {
                    if !self.durable_free.free(s, n) {
                        return Err(Error::Corrupt(format!("double free of run {s}+{n}")));
                    }
                }
            }
            let mut deferred = wtx.open_table(DEFERRED).map_err(me("open deferred"))?;
            for seq in retired {
                deferred
                    .remove(&seq.to_be_bytes()[..])
                    .map_err(me("delete deferred"))?;
            }
            let mut free = wtx.open_table(FREE).map_err(me("open free"))?;
            for (k, v) in self.durable_free.take_dirty() {
                let k = k.to_be_bytes();
                match v {
                    Some(n) => free.insert(&k[..], &n.to_be_bytes()[..]).map(|_| ()),
                    None => free.remove(&k[..]).map(|_| ()),
                }
                .map_err(me("put free"))?;
            }
        }
        wtx.commit().map_err(me("commit"))?;
        sh.counters
            .group_commits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

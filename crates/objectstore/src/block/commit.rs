//! The committer thread: group commit. It takes every queued batch, makes their data
//! durable with one device sync, writes all their metadata in one redb transaction with
//! one fsync, then applies deferred writes in place and releases freed space.

use std::sync::Arc;

use redb::Durability;

use super::alloc::FreeList;
use super::apply::{Batch, KvOp};
use super::meta::{DEFERRED, FREE, me};
use super::{BLOCK, Shared};
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
    /// Deferred records written in place; deleted by a later commit that first syncs the
    /// data device (so the in-place writes are durable before their records go).
    pub applied: Vec<u64>,
}

impl Committer {
    pub fn run(mut self) {
        loop {
            let (group, shutdown) = self.shared.take_queued();
            if group.is_empty() && shutdown {
                if !self.applied.is_empty() && self.shared.poison_reason().is_none() {
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
                self.after_commit(&group);
                for q in group {
                    q.ticket.complete(Ok(()));
                }
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
        let sh = &self.shared;
        // Data first: once the metadata commits it may point at these blocks. A group of
        // only deferred writes and metadata wrote no data yet, so it skips the device
        // sync; the records applied in place since wait for the next synced commit.
        let wrote_data = group.iter().any(|q| !q.batch.allocs.is_empty());
        let retire = group.is_empty() || self.applied.len() >= APPLIED_RETIRE_AT;
        let sync_data = wrote_data || retire;
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
            let retired: &[u64] = if sync_data { &self.applied } else { &[] };
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
        if sync_data {
            self.applied.clear();
        }
        sh.counters
            .group_commits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Deferred writes go in place now that their records are durable; only then may the
    /// space freed by the group be handed out again.
    fn after_commit(&mut self, group: &[Queued]) {
        let mut st = self.shared.write_state();
        st.reuse_gen += 1;
        for q in group {
            for (seq, pb, data) in &q.batch.deferred {
                if let Err(e) = self.shared.dev.write_at(pb * BLOCK as u64, data) {
                    // The record and the overlay stay; the next open replays the record.
                    self.shared
                        .poison(&Error::io("applying a deferred write", e));
                    continue;
                }
                st.overlay.applied(*pb, *seq);
                self.applied.push(*seq);
            }
        }
        for q in group {
            for &(s, n) in &q.batch.frees {
                if !st.alloc.free(s, n) {
                    drop(st);
                    self.shared
                        .poison(&Error::Corrupt(format!("double free of run {s}+{n}")));
                    return;
                }
            }
        }
    }
}

//! The applier thread: writes the deferred writes of committed groups in
//! place, while the committer goes on with the next group. A group's
//! writes go out in parallel (a block written twice in one group only
//! once, with its newest contents); groups are applied one after another,
//! so a block's writes land in commit order. Only when a group's writes
//! have all landed are its blocks dropped from the overlay (reads see them
//! there until then), its freed space handed back to the allocator, and its
//! records offered to the committer for retirement (which syncs the data
//! device before it deletes them).

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use bytes::Bytes;

use super::{BLOCK, Shared};
use crate::error::{Error, Result};

/// Groups the committer may run ahead of the applier.
const GROUPS_AHEAD_MAX: usize = 4;
/// Threads writing one group's blocks at once.
const WRITERS_MAX: usize = 8;

/// What the applier does for one committed group.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    /// (record sequence, device block, contents), in commit order.
    pub deferred: Vec<(u64, u64, Bytes)>,
    /// Runs freed by the group.
    pub frees: Vec<(u64, u64)>,
}

/// The committer's handle on the applier.
pub(crate) struct Applier {
    tx: Option<SyncSender<Applied>>,
    thread: Option<JoinHandle<()>>,
    /// Records written in place and not yet retired.
    landed: Arc<Mutex<Vec<u64>>>,
}

impl Applier {
    /// Starts the applier thread.
    pub(crate) fn start(shared: Arc<Shared>) -> Result<Applier> {
        let (tx, rx) = sync_channel(GROUPS_AHEAD_MAX);
        let landed = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let landed = Arc::clone(&landed);
            std::thread::Builder::new()
                .name("blockstore-apply".into())
                .spawn(move || run(&shared, &rx, &landed))
                .map_err(|e| Error::io("starting the apply thread", e))?
        };
        Ok(Applier {
            tx: Some(tx),
            thread: Some(thread),
            landed,
        })
    }

    /// Hands a committed group over (waits while the applier is
    /// `GROUPS_AHEAD_MAX` groups behind).
    pub(crate) fn send(&self, group: Applied) {
        if let Some(tx) = &self.tx {
            // The thread only ends when the sender is dropped.
            let _ = tx.send(group);
        }
    }

    /// How many records have landed and wait for retirement.
    pub(crate) fn landed_len(&self) -> usize {
        self.landed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Takes the records that have landed in place (the caller syncs the
    /// data device before it deletes them).
    pub(crate) fn take_landed(&self) -> Vec<u64> {
        std::mem::take(&mut *self.landed.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Puts back records the caller could not retire.
    pub(crate) fn put_back(&self, mut seqs: Vec<u64>) {
        let mut landed = self.landed.lock().unwrap_or_else(PoisonError::into_inner);
        seqs.append(&mut landed);
        *landed = seqs;
    }

    /// Waits until every group handed over has been applied.
    pub(crate) fn drain(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Applier {
    fn drop(&mut self) {
        self.drain();
    }
}

fn run(shared: &Shared, rx: &Receiver<Applied>, landed: &Mutex<Vec<u64>>) {
    while let Ok(group) = rx.recv() {
        if shared.poison_reason().is_some() {
            // Nothing more goes to the device; the records replay at the next open.
            continue;
        }
        if let Err(e) = write_in_place(shared, &group.deferred) {
            shared.poison(&e);
            continue;
        }
        let mut st = shared.write_state();
        st.reuse_gen += 1;
        for (seq, pb, _) in &group.deferred {
            st.overlay.applied(*pb, *seq);
        }
        for &(s, n) in &group.frees {
            if !st.alloc.free(s, n) {
                drop(st);
                shared.poison(&Error::Corrupt(format!("double free of run {s}+{n}")));
                break;
            }
        }
        landed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(group.deferred.iter().map(|(seq, _, _)| *seq));
    }
}

/// Writes the newest contents of each block of `deferred`, several at once.
fn write_in_place(shared: &Shared, deferred: &[(u64, u64, Bytes)]) -> Result<()> {
    // Later records of a block supersede earlier ones of the same group.
    let newest: BTreeMap<u64, &Bytes> = deferred.iter().map(|(_, pb, d)| (*pb, d)).collect();
    let blocks: Vec<(u64, &Bytes)> = newest.into_iter().collect();
    if blocks.len() <= 1 {
        for (pb, data) in blocks {
            write_block(shared, pb, data)?;
        }
        return Ok(());
    }
    let per = blocks.len().div_ceil(WRITERS_MAX);
    std::thread::scope(|s| {
        let writers: Vec<_> = blocks
            .chunks(per)
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .try_for_each(|(pb, data)| write_block(shared, *pb, data))
                })
            })
            .collect();
        // The scope joins every writer; the first error is the group's.
        writers.into_iter().try_for_each(|w| {
            w.join()
                .unwrap_or_else(|_| Err(Error::Corrupt("a writer panicked".into())))
        })
    })
}

fn write_block(shared: &Shared, pb: u64, data: &[u8]) -> Result<()> {
    shared
        .dev
        .write_at(pb * BLOCK as u64, data)
        .map_err(|e| Error::io("applying a deferred write", e))
}

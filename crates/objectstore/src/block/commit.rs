//! The committer thread: group commit through the journal (see `journal.rs`).
//!
//! It takes every queued batch and appends them as one journal record, made durable by one
//! device sync (preceded by another when the batches wrote copy-on-write data, which must
//! be durable before a record pointing at it is); then it acknowledges them.
//! Afterwards, off the writers' path: their metadata goes into redb in a commit that does
//! not sync, their deferred blocks are written in place by a pool of I/O threads (one
//! wave at a time, so two writes of one block never race), and space they freed is handed
//! out again once no earlier in-place write can land on it. A checkpoint (when the journal
//! is full, when the store has been idle a moment, at shutdown) waits for the in-place
//! writes, syncs the device and commits redb durably, after which the journal's region is
//! reused from its start.
//!
//! A batch too large for the journal takes the direct path: a checkpoint, then its data
//! synced and its metadata (deferred blocks as records of the `deferred` table) committed
//! durably in redb, then its deferred blocks written in place.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use redb::Durability;

use super::alloc::FreeList;
use super::apply::Batch;
use super::device::Device;
use super::journal::{self, KEY_APPLIED, KEY_THROUGH, Position};
use super::meta::{DEFERRED, me};
use super::{BLOCK, Shared};
use crate::error::{Error, Result};
use crate::ticket::CommitTicket;

/// Deferred records of the direct path applied in place are deleted from the table by
/// the next checkpoint (which syncs the device first), or once this many are waiting.
const APPLIED_RETIRE_AT: usize = 256;

/// Threads writing deferred blocks in place (the queue depth the device sees).
const IO_THREADS: usize = 8;

/// A checkpoint runs once no batch has come for this long.
const IDLE_CHECKPOINT: Duration = Duration::from_millis(20);

/// While in-place writes are in flight the committer looks at them this often.
const POLL: Duration = Duration::from_millis(1);

/// A batch waiting for the committer, with the ticket to resolve.
#[derive(Debug)]
pub(crate) struct Queued {
    pub batch: Batch,
    pub ticket: CommitTicket,
    /// Holds an in-flight place (see `Shared::reserve`); flush markers do not.
    pub reserved: bool,
    /// Its copy-on-write data has landed (or it has none): it may be committed.
    pub ready: bool,
    /// Queue-wide identity, to mark it ready.
    pub id: u64,
}

impl Queued {
    fn is_marker(&self) -> bool {
        let b = &self.batch;
        b.kv.is_empty() && b.allocs.is_empty() && b.frees.is_empty() && b.deferred.is_empty()
    }
}

/// How a run of a group's batches is made durable.
enum Unit {
    /// One journal record with this payload (empty: flush markers only).
    Journal(Vec<u8>, Vec<Queued>),
    /// Too large for the journal.
    Direct(Queued),
}

/// Committer-owned state.
pub(crate) struct Committer {
    shared: Arc<Shared>,
    /// Mirror of redb's free list (the live allocator runs ahead of it).
    durable_free: FreeList,
    /// Direct-path deferred records written in place, to delete after the next sync.
    applied: Vec<u64>,
    journal: Position,
    /// Bytes of the journal region used since the last checkpoint.
    head: u64,
    next_seq: u64,
    /// Largest record payload.
    record_max: usize,
    /// Journaled deferred blocks not yet handed to the I/O threads: block -> (seq, data).
    pending: BTreeMap<u64, (u64, Bytes)>,
    /// The wave the I/O threads are writing: (block, seq).
    wave: Vec<(u64, u64)>,
    io: InPlace,
    last_group: Instant,
}

impl Committer {
    pub fn new(
        shared: Arc<Shared>,
        durable_free: FreeList,
        journal: Position,
        next_seq: u64,
    ) -> Result<Self> {
        let io = InPlace::start(shared.dev.clone())?;
        Ok(Self {
            shared,
            durable_free,
            applied: Vec::new(),
            record_max: (journal.bytes() / 2).saturating_sub(BLOCK as u64) as usize,
            journal,
            head: 0,
            next_seq,
            pending: BTreeMap::new(),
            wave: Vec::new(),
            io,
            last_group: Instant::now(),
        })
    }

    pub fn run(mut self) {
        loop {
            let busy = !self.wave.is_empty() || !self.pending.is_empty();
            let unsaved = self.next_seq - 1 > self.journal.through || !self.applied.is_empty();
            let wait = if busy {
                Some(POLL)
            } else if unsaved {
                Some(IDLE_CHECKPOINT)
            } else {
                None
            };
            let (group, shutdown) = self.shared.take_queued(wait);
            if !group.is_empty() {
                self.last_group = Instant::now();
                let reserved = group.iter().filter(|q| q.reserved).count() as u64;
                self.commit_group(group);
                self.shared.release(reserved);
            }
            let step = if shutdown && self.shared.poison_reason().is_none() {
                // Leave nothing to replay behind on a clean shutdown.
                self.checkpoint()
            } else if self.last_group.elapsed() >= IDLE_CHECKPOINT
                && self.shared.poison_reason().is_none()
            {
                self.pump().and_then(|()| {
                    if self.wave.is_empty() && self.pending.is_empty() {
                        self.checkpoint()
                    } else {
                        Ok(())
                    }
                })
            } else {
                self.pump()
            };
            if let Err(e) = step {
                self.shared.poison(&e);
            }
            if shutdown && self.shared.queue_is_empty() {
                self.io.stop();
                return;
            }
        }
    }

    fn commit_group(&mut self, group: Vec<Queued>) {
        if group.iter().any(|q| !q.batch.landed.is_empty()) {
            // Their copy-on-write data is on the device now: reads may go there.
            let mut st = self.shared.write_state();
            for (pb, s) in group.iter().flat_map(|q| &q.batch.landed) {
                st.overlay.applied(*pb, *s);
            }
        }
        if let Some(reason) = self.shared.poison_reason() {
            for q in group {
                q.ticket.complete(Err(reason.clone()));
            }
            return;
        }
        let mut units = match self.plan(group) {
            Ok(u) => u.into_iter(),
            Err((e, group)) => {
                let reason = self.shared.poison(&e);
                for q in group {
                    q.ticket.complete(Err(reason.clone()));
                }
                return;
            }
        };
        while let Some(unit) = units.next() {
            let outcome = match &unit {
                Unit::Journal(payload, members) => self.journal_unit(payload, members),
                Unit::Direct(q) => self.direct(q),
            };
            if let Err(e) = outcome {
                let reason = self.shared.poison(&e);
                for u in std::iter::once(unit).chain(units) {
                    match u {
                        Unit::Journal(_, members) => {
                            for q in members {
                                q.ticket.complete(Err(reason.clone()));
                            }
                        }
                        Unit::Direct(q) => q.ticket.complete(Err(reason.clone())),
                    }
                }
                return;
            }
        }
    }

    /// Split a group into journal records of at most `record_max` bytes and direct
    /// batches, in queue order.
    #[allow(clippy::result_large_err)]
    fn plan(&self, group: Vec<Queued>) -> std::result::Result<Vec<Unit>, (Error, Vec<Queued>)> {
        let mut units = Vec::new();
        let mut payload = Vec::new();
        let mut members = Vec::new();
        let mut rest = group.into_iter();
        while let Some(q) = rest.next() {
            if q.is_marker() {
                members.push(q);
                continue;
            }
            // Encoded in place at the payload's end (no copy of its data); moved to a
            // record of its own when it does not fit.
            let start = payload.len();
            if let Err(e) = journal::encode_batch(&mut payload, &q.batch) {
                let mut all: Vec<Queued> = members;
                all.push(q);
                all.extend(rest);
                for u in units {
                    match u {
                        Unit::Journal(_, m) => all.extend(m),
                        Unit::Direct(q) => all.push(q),
                    }
                }
                return Err((e, all));
            }
            let encoded = payload.len() - start;
            if encoded > self.record_max {
                payload.truncate(start);
                if !members.is_empty() {
                    units.push(Unit::Journal(
                        std::mem::take(&mut payload),
                        std::mem::take(&mut members),
                    ));
                }
                units.push(Unit::Direct(q));
                continue;
            }
            if payload.len() > self.record_max {
                let tail = payload.split_off(start);
                units.push(Unit::Journal(
                    std::mem::replace(&mut payload, tail),
                    std::mem::take(&mut members),
                ));
            }
            members.push(q);
        }
        if !members.is_empty() {
            units.push(Unit::Journal(payload, members));
        }
        Ok(units)
    }

    /// Append one record, sync, acknowledge; then the metadata to redb and the deferred
    /// blocks towards their places.
    fn journal_unit(&mut self, payload: &[u8], members: &[Queued]) -> Result<()> {
        if payload.is_empty() {
            // Flush markers only: everything queued before them is durable already.
            for q in members {
                q.ticket.complete(Ok(()));
            }
            return Ok(());
        }
        let len = journal::record_bytes(payload.len());
        if self.head + len > self.journal.bytes() {
            self.checkpoint()?;
        }
        let seq = self.next_seq;
        let rec = journal::seal(seq, payload);
        let sh = self.shared.clone();
        if members.iter().any(|q| !q.batch.landed.is_empty()) {
            // Copy-on-write data must be durable before a record that points at it can
            // be: a device may keep the record and lose the data if both wait for one
            // sync. (Groups of small overwrites carry their data in the record and sync
            // once.)
            sh.dev
                .sync()
                .map_err(|e| Error::io("syncing the data device", e))?;
        }
        sh.dev
            .write_at(BLOCK as u64 + self.head, rec.as_slice())
            .map_err(|e| Error::io("writing the journal", e))?;
        sh.dev
            .sync()
            .map_err(|e| Error::io("syncing the data device", e))?;
        self.head += len;
        self.next_seq += 1;
        sh.counters
            .group_commits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        for q in members {
            for (s, pb, data) in &q.batch.deferred {
                self.pending.insert(*pb, (*s, data.clone()));
            }
        }
        if members.iter().any(|q| !q.batch.frees.is_empty()) {
            // Freed space is handed out again before the writers hear back (a writer
            // that waited for a delete may count on its space). A freed block may still
            // have an in-place write on its way: it is reused only after that landed.
            self.drain()?;
            self.release_frees(members)?;
        }
        for q in members {
            q.ticket.complete(Ok(()));
        }
        // Durable and acknowledged: the rest only moves it to its final places.
        let mut wtx = sh.db.begin_write().map_err(me("begin write"))?;
        wtx.set_durability(Durability::None);
        for q in members {
            journal::write_meta(&wtx, &q.batch, &mut self.durable_free)?;
        }
        journal::write_free(&wtx, &mut self.durable_free)?;
        journal::put_seq(&wtx, KEY_APPLIED, seq)?;
        wtx.commit().map_err(me("commit"))?;
        self.pump()
    }

    /// A batch too large for the journal: straight into redb, durably.
    fn direct(&mut self, q: &Queued) -> Result<()> {
        self.checkpoint()?;
        let sh = &self.shared;
        let b = &q.batch;
        sh.dev
            .sync()
            .map_err(|e| Error::io("syncing the data device", e))?;
        let mut wtx = sh.db.begin_write().map_err(me("begin write"))?;
        wtx.set_durability(Durability::Immediate);
        journal::write_meta(&wtx, b, &mut self.durable_free)?;
        {
            let mut deferred = wtx.open_table(DEFERRED).map_err(me("open deferred"))?;
            for (seq, pb, data) in &b.deferred {
                let rec = super::codec::encode_deferred(*pb, data);
                deferred
                    .insert(&seq.to_be_bytes()[..], &rec[..])
                    .map_err(me("put deferred"))?;
            }
        }
        journal::write_free(&wtx, &mut self.durable_free)?;
        wtx.commit().map_err(me("commit"))?;
        sh.counters
            .group_commits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        q.ticket.complete(Ok(()));
        {
            let mut st = sh.write_state();
            st.reuse_gen += 1;
            for (seq, pb, data) in &b.deferred {
                // The record stays on failure; the next open replays it.
                sh.dev
                    .write_at(pb * BLOCK as u64, data)
                    .map_err(|e| Error::io("applying a deferred write", e))?;
                st.overlay.applied(*pb, *seq);
                self.applied.push(*seq);
            }
        }
        self.release_frees(std::slice::from_ref(q))?;
        if self.applied.len() >= APPLIED_RETIRE_AT {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// Space freed by durable batches may be handed out again.
    fn release_frees(&self, members: &[Queued]) -> Result<()> {
        let mut st = self.shared.write_state();
        st.reuse_gen += 1;
        for q in members {
            for &(s, n) in &q.batch.frees {
                if !st.alloc.free(s, n) {
                    return Err(Error::Corrupt(format!("double free of run {s}+{n}")));
                }
            }
        }
        Ok(())
    }

    /// Collect a finished wave; start the next one from what is pending. Never waits:
    /// while the writers hold the state lock it leaves both for the next call.
    fn pump(&mut self) -> Result<()> {
        self.pump_with(false)
    }

    fn pump_with(&mut self, block: bool) -> Result<()> {
        let wave_done = !self.wave.is_empty() && !self.io.busy();
        if !wave_done && (!self.wave.is_empty() || self.pending.is_empty()) {
            return Ok(());
        }
        if wave_done {
            self.io.wait_idle()?;
        }
        let mut st = if block {
            self.shared.write_state()
        } else {
            match self.shared.try_write_state() {
                Some(st) => st,
                None => return Ok(()),
            }
        };
        if wave_done {
            for (pb, s) in self.wave.drain(..) {
                st.overlay.applied(pb, s);
            }
        }
        if !self.wave.is_empty() {
            return Ok(());
        }
        if self.pending.is_empty() {
            return Ok(());
        }
        // Readers that planned before now and read a block the wave rewrites retry under
        // the lock instead of reporting a checksum error.
        st.reuse_gen += 1;
        drop(st);
        let jobs: Vec<(u64, u64, Bytes)> = std::mem::take(&mut self.pending)
            .into_iter()
            .map(|(pb, (s, d))| (pb, s, d))
            .collect();
        self.wave = jobs.iter().map(|(pb, s, _)| (*pb, *s)).collect();
        self.io
            .submit(jobs.into_iter().map(|(pb, _, d)| (pb, d)).collect());
        Ok(())
    }

    fn finish_wave(&mut self) -> Result<()> {
        self.io.wait_idle()?;
        let mut st = self.shared.write_state();
        for (pb, s) in self.wave.drain(..) {
            st.overlay.applied(pb, s);
        }
        Ok(())
    }

    /// Every deferred block journaled so far is written in place.
    fn drain(&mut self) -> Result<()> {
        if !self.wave.is_empty() {
            self.finish_wave()?;
        }
        self.pump_with(true)?;
        if !self.wave.is_empty() {
            self.finish_wave()?;
        }
        Ok(())
    }

    /// Make redb and the in-place blocks hold every record; the journal starts over.
    fn checkpoint(&mut self) -> Result<()> {
        self.drain()?;
        let last = self.next_seq - 1;
        if last == self.journal.through && self.applied.is_empty() {
            self.head = 0;
            return Ok(());
        }
        let sh = &self.shared;
        sh.dev
            .sync()
            .map_err(|e| Error::io("syncing the data device", e))?;
        let mut wtx = sh.db.begin_write().map_err(me("begin checkpoint"))?;
        wtx.set_durability(Durability::Immediate);
        {
            let mut deferred = wtx.open_table(DEFERRED).map_err(me("open deferred"))?;
            for seq in &self.applied {
                deferred
                    .remove(&seq.to_be_bytes()[..])
                    .map_err(me("delete deferred"))?;
            }
        }
        journal::put_seq(&wtx, KEY_APPLIED, last)?;
        journal::put_seq(&wtx, KEY_THROUGH, last)?;
        wtx.commit().map_err(me("commit checkpoint"))?;
        self.applied.clear();
        self.journal.through = last;
        self.journal.applied = last;
        self.head = 0;
        Ok(())
    }
}

/// The threads that write deferred blocks in place.
struct InPlace {
    pool: Arc<Pool>,
    threads: Vec<JoinHandle<()>>,
}

struct Pool {
    dev: Arc<dyn Device>,
    state: Mutex<PoolState>,
    work: Condvar,
    idle: Condvar,
}

#[derive(Default)]
struct PoolState {
    jobs: Vec<(u64, Bytes)>,
    /// Jobs submitted and not yet finished.
    outstanding: usize,
    error: Option<String>,
    stop: bool,
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn work(&self) {
        loop {
            let (pb, data) = {
                let mut st = self.lock();
                loop {
                    if let Some(job) = st.jobs.pop() {
                        break job;
                    }
                    if st.stop {
                        return;
                    }
                    st = self.work.wait(st).unwrap_or_else(PoisonError::into_inner);
                }
            };
            let r = self.dev.write_at(pb * BLOCK as u64, &data);
            let mut st = self.lock();
            if let Err(e) = r {
                st.error
                    .get_or_insert_with(|| format!("writing block {pb} in place: {e}"));
            }
            st.outstanding -= 1;
            if st.outstanding == 0 {
                self.idle.notify_all();
            }
        }
    }
}

impl InPlace {
    fn start(dev: Arc<dyn Device>) -> Result<Self> {
        let pool = Arc::new(Pool {
            dev,
            state: Mutex::new(PoolState::default()),
            work: Condvar::new(),
            idle: Condvar::new(),
        });
        let mut threads = Vec::new();
        for i in 0..IO_THREADS {
            let p = pool.clone();
            let h = std::thread::Builder::new()
                .name(format!("blockstore-io{i}"))
                .spawn(move || p.work())
                .map_err(|e| Error::io("starting the in-place writers", e))?;
            threads.push(h);
        }
        Ok(Self { pool, threads })
    }

    fn submit(&self, jobs: Vec<(u64, Bytes)>) {
        let mut st = self.pool.lock();
        st.outstanding += jobs.len();
        st.jobs.extend(jobs);
        self.pool.work.notify_all();
    }

    fn busy(&self) -> bool {
        self.pool.lock().outstanding > 0
    }

    /// Wait for every submitted write; the first failure among them, if any.
    fn wait_idle(&self) -> Result<()> {
        let mut st = self.pool.lock();
        while st.outstanding > 0 {
            st = self
                .pool
                .idle
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
        }
        match st.error.take() {
            Some(e) => Err(Error::io(
                "applying deferred writes",
                std::io::Error::other(e),
            )),
            None => Ok(()),
        }
    }

    fn stop(&mut self) {
        self.pool.lock().stop = true;
        self.pool.work.notify_all();
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}

impl Drop for InPlace {
    fn drop(&mut self) {
        self.stop();
    }
}

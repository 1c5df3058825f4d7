//! The committer thread: group commit through the journal (see `journal.rs`), and the
//! write-back thread behind it.
//!
//! The committer takes every queued batch and appends them as one journal record, made
//! durable by one device sync (preceded by another when the batches wrote copy-on-write
//! data, which must be durable before a record pointing at it is); then it acknowledges
//! them. That is all a write waits for. The record's metadata changes are merged into an
//! in-memory map of what redb lacks (a key written by many records is written back once),
//! its deferred blocks into a map of what is not yet in place (a block overwritten many
//! times goes in place once), and the free-list mirror takes its allocations and frees.
//!
//! A checkpoint hands those maps, as they stand after some record, to the write-back
//! thread and starts new ones; it runs once a quarter of the journal has filled since the
//! last, when the store has been idle a moment, and at shutdown. The write-back thread
//! writes the blocks in place (several at once, adjacent ones merged), syncs the device,
//! commits the metadata to redb durably with the journal's new tail, and retires the
//! blocks from the overlay; the committer goes on appending records meanwhile, and waits
//! for it only when the journal has no room. Space a record frees is handed out again
//! once the record is durable, after the running write-back if that writes to it.
//!
//! A batch too large for the journal takes the direct path: a checkpoint, then its data
//! synced and its metadata (deferred blocks as records of the `deferred` table) committed
//! durably in redb, then its deferred blocks written in place.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use redb::Durability;

use super::alloc::FreeList;
use super::apply::{Batch, KvOp};
use super::device::{AlignedBuf, Device};
use super::journal::{self, KEY_APPLIED, KEY_TAIL, KEY_THROUGH, Position};
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

/// While a write-back runs the committer looks at it this often.
const POLL: Duration = Duration::from_millis(1);

/// A checkpoint starts once records since the last one take this share of the journal.
const CHECKPOINT_SHARE: u64 = 4;

/// How long after acknowledging a group the committer waits for its writers to queue
/// their next transactions, so they join the next record rather than the one after.
const GATHER: Duration = Duration::from_micros(200);

/// Most adjacent blocks merged into one in-place write.
const MERGE_BLOCKS: usize = 64;

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
    /// Mirror of redb's free list as of the last record journaled (the live allocator
    /// runs ahead of it); its changed runs go to each checkpoint.
    durable_free: FreeList,
    /// Direct-path deferred records written in place, to delete at the next checkpoint.
    applied: Vec<u64>,
    /// Bytes of the journal's region.
    region: u64,
    /// Records not yet covered by a finished checkpoint: (seq, offset, bytes), oldest
    /// first.
    ring: VecDeque<(u64, u64, u64)>,
    /// Offset in the region for the next record (it wraps to 0 when it does not fit).
    head: u64,
    next_seq: u64,
    /// Largest record payload.
    record_max: usize,
    /// The last record a checkpoint was started after.
    frozen_through: u64,
    /// Bytes of the records after `frozen_through`.
    unfrozen_bytes: u64,
    /// Metadata changes of the records after `frozen_through`, merged: (table id, key)
    /// -> new value, or `None` to delete.
    /// (A hash map: keys share long prefixes, which made a B-tree's comparisons the
    /// committer's largest cost; the write-back thread sorts them.)
    dirty: HashMap<(u8, Vec<u8>), Option<Vec<u8>>>,
    /// Deferred blocks of the records after `frozen_through`: block -> (seq, data).
    pending: BTreeMap<u64, (u64, Bytes)>,
    writeback: WriteBack,
    last_group: Instant,
    /// Transactions the last group acknowledged, and when.
    acked: usize,
    acked_at: Instant,
    /// The last wait for them ran out before they all came: the next group does not
    /// wait (writers that do not come straight back, as an OSD's, pay it at most every
    /// other group).
    gather_missed: bool,
    /// The last record's buffer, kept for the next (up to [`RECORD_BUF_KEPT`] bytes).
    record_buf: AlignedBuf,
}

/// A record buffer up to this size is kept for the next record.
const RECORD_BUF_KEPT: usize = 1 << 20;

impl Committer {
    pub fn new(
        shared: Arc<Shared>,
        durable_free: FreeList,
        journal: Position,
        next_seq: u64,
    ) -> Result<Self> {
        let writeback = WriteBack::start(shared.clone())?;
        Ok(Self {
            shared,
            durable_free,
            applied: Vec::new(),
            record_max: (journal.bytes() / 2).saturating_sub(BLOCK as u64) as usize,
            head: journal.tail,
            region: journal.bytes(),
            ring: VecDeque::new(),
            next_seq,
            frozen_through: next_seq - 1,
            unfrozen_bytes: 0,
            dirty: HashMap::new(),
            pending: BTreeMap::new(),
            writeback,
            last_group: Instant::now(),
            acked: 0,
            acked_at: Instant::now(),
            gather_missed: false,
            record_buf: AlignedBuf::new(0),
        })
    }

    pub fn run(mut self) {
        loop {
            let unsaved = self.next_seq - 1 > self.frozen_through || !self.applied.is_empty();
            let wait = if self.writeback.running.is_some() {
                Some(POLL)
            } else if unsaved {
                Some(IDLE_CHECKPOINT)
            } else {
                None
            };
            let gather = (self.acked > 1 && !self.gather_missed)
                .then(|| (self.acked, self.acked_at + GATHER));
            let (group, shutdown) = self.shared.take_queued(wait, gather);
            self.gather_missed =
                gather.is_some_and(|(want, _)| group.iter().filter(|q| q.reserved).count() < want);
            if !group.is_empty() {
                self.last_group = Instant::now();
                let reserved = group.iter().filter(|q| q.reserved).count() as u64;
                self.acked = reserved as usize;
                self.commit_group(group);
                self.acked_at = Instant::now();
                self.shared.release(reserved);
            }
            let step = if shutdown && self.shared.poison_reason().is_none() {
                // Leave nothing to replay behind on a clean shutdown.
                self.checkpoint()
            } else if self.shared.poison_reason().is_some() {
                // Only to stop looking at a write-back that has ended.
                let _ = self.poll_writeback();
                Ok(())
            } else {
                self.poll_writeback().and_then(|()| {
                    let idle = self.last_group.elapsed() >= IDLE_CHECKPOINT;
                    if idle || self.unfrozen_bytes >= self.region / CHECKPOINT_SHARE {
                        self.start_checkpoint(false)
                    } else {
                        Ok(())
                    }
                })
            };
            if let Err(e) = step {
                self.shared.poison(&e);
            }
            if shutdown && self.shared.queue_is_empty() {
                // A write-back still running finishes before the thread is joined.
                let _ = self.wait_writeback();
                self.writeback.stop();
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
        while let Some(mut unit) = units.next() {
            let outcome = match &mut unit {
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

    /// Append one record, sync, acknowledge; the metadata and deferred blocks wait for
    /// the next checkpoint.
    fn journal_unit(&mut self, payload: &[u8], members: &mut [Queued]) -> Result<()> {
        if payload.is_empty() {
            // Flush markers only: everything queued before them is durable already.
            for q in members.iter() {
                q.ticket.complete(Ok(()));
            }
            return Ok(());
        }
        let len = journal::record_bytes(payload.len());
        let off = self.place(len)?;
        let seq = self.next_seq;
        journal::seal_into(&mut self.record_buf, seq, payload);
        let rec = &self.record_buf;
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
            .write_at(BLOCK as u64 + off, rec.as_slice())
            .map_err(|e| Error::io("writing the journal", e))?;
        if self.record_buf.capacity() > RECORD_BUF_KEPT {
            self.record_buf = AlignedBuf::new(0);
        }
        sh.dev
            .sync()
            .map_err(|e| Error::io("syncing the data device", e))?;
        self.ring.push_back((seq, off, len));
        self.head = off + len;
        self.next_seq += 1;
        self.unfrozen_bytes += len;
        sh.counters
            .group_commits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut frees = false;
        for q in members.iter_mut() {
            self.absorb(&mut q.batch)?;
            frees |= !q.batch.frees.is_empty();
        }
        if frees {
            // Freed space is handed out again before the writers hear back (a writer
            // that waited for a delete may count on its space), but never while a
            // write-back may still put older contents on it.
            self.cancel_freed(members)?;
            self.release_frees(members)?;
        }
        for q in members.iter() {
            q.ticket.complete(Ok(()));
        }
        Ok(())
    }

    /// Where a record of `len` bytes goes: at the head, or at the region's start when it
    /// does not fit before the end; waits for checkpoints while the journal is full.
    fn place(&mut self, len: u64) -> Result<u64> {
        loop {
            let end = self.region;
            let spot = match self.ring.front() {
                None if self.head + len <= end => Some(self.head),
                None => Some(0),
                Some(&(_, tail, _)) if tail < self.head => {
                    if self.head + len <= end {
                        Some(self.head)
                    } else if len <= tail {
                        Some(0)
                    } else {
                        None
                    }
                }
                Some(&(_, tail, _)) => (self.head + len <= tail).then_some(self.head),
            };
            if let Some(off) = spot {
                return Ok(off);
            }
            if self.writeback.running.is_none() {
                self.start_checkpoint(false)?;
            }
            self.wait_writeback()?;
        }
    }

    /// Take a journaled batch's changes into the maps the next checkpoint writes back.
    fn absorb(&mut self, b: &mut Batch) -> Result<()> {
        for kv in std::mem::take(&mut b.kv) {
            let (t, k, v) = match kv {
                KvOp::Put(t, k, v) => (t, k, Some(v)),
                KvOp::Del(t, k) => (t, k, None),
            };
            let id = journal::table_id(&t).ok_or_else(|| {
                Error::Corrupt("a metadata change to a table the journal does not carry".into())
            })?;
            self.dirty.insert((id, k), v);
        }
        journal::apply_runs(b, &mut self.durable_free)?;
        for (s, pb, data) in std::mem::take(&mut b.deferred) {
            self.pending.insert(pb, (s, data));
        }
        Ok(())
    }

    /// Deferred blocks waiting to go in place inside space the members freed are
    /// dropped (nothing refers to them now); if the running write-back writes there,
    /// it finishes first.
    fn cancel_freed(&mut self, members: &[Queued]) -> Result<()> {
        let runs: Vec<(u64, u64)> = members
            .iter()
            .flat_map(|q| q.batch.frees.iter().copied())
            .collect();
        let mut gone = Vec::new();
        for &(s, n) in &runs {
            gone.extend(
                self.pending
                    .range(s..s.saturating_add(n))
                    .map(|(pb, (seq, _))| (*pb, *seq)),
            );
        }
        if !gone.is_empty() {
            let mut st = self.shared.write_state();
            for (pb, seq) in gone {
                self.pending.remove(&pb);
                st.overlay.applied(pb, seq);
            }
        }
        let busy = self.writeback.running.as_ref().is_some_and(|r| {
            runs.iter().any(|&(s, n)| {
                let i = r.blocks.partition_point(|b| *b < s);
                r.blocks.get(i).is_some_and(|b| *b < s.saturating_add(n))
            })
        });
        if busy {
            self.wait_writeback()?;
        }
        Ok(())
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

    /// Start a checkpoint of every record so far, unless one is running or there is
    /// nothing to write back. `all`: the journal is empty once it is done, so the next
    /// record may go to the region's start.
    fn start_checkpoint(&mut self, all: bool) -> Result<()> {
        if self.writeback.running.is_some() {
            return Ok(());
        }
        let last = self.next_seq - 1;
        if last == self.frozen_through && self.applied.is_empty() {
            return Ok(());
        }
        if all {
            self.head = 0;
        }
        let mut blocks: Vec<(u64, u64, Bytes)> = std::mem::take(&mut self.pending)
            .into_iter()
            .map(|(pb, (s, d))| (pb, s, d))
            .collect();
        blocks.sort_unstable_by_key(|b| b.0);
        let job = Job {
            last,
            tail: self.head,
            kv: std::mem::take(&mut self.dirty),
            free: self.durable_free.take_dirty(),
            retire: std::mem::take(&mut self.applied),
            blocks,
        };
        self.frozen_through = last;
        self.unfrozen_bytes = 0;
        self.writeback.submit(job);
        Ok(())
    }

    /// Take the running write-back's outcome if it has finished.
    fn poll_writeback(&mut self) -> Result<()> {
        match self.writeback.try_done() {
            Some(done) => self.finished(done),
            None => Ok(()),
        }
    }

    /// Wait for the running write-back, if any.
    fn wait_writeback(&mut self) -> Result<()> {
        match self.writeback.wait_done() {
            Some(done) => self.finished(done),
            None => Ok(()),
        }
    }

    fn finished(&mut self, (last, outcome): (u64, Result<()>)) -> Result<()> {
        outcome?;
        self.shared
            .counters
            .checkpoints
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        while self.ring.front().is_some_and(|r| r.0 <= last) {
            self.ring.pop_front();
        }
        Ok(())
    }

    /// Make redb and the in-place blocks hold every record; the journal starts over.
    fn checkpoint(&mut self) -> Result<()> {
        self.wait_writeback()?;
        self.start_checkpoint(true)?;
        self.wait_writeback()
    }
}

/// What one checkpoint writes back: everything of the records up to `last`.
struct Job {
    last: u64,
    /// Where replay starts once it is done.
    tail: u64,
    kv: HashMap<(u8, Vec<u8>), Option<Vec<u8>>>,
    free: Vec<(u64, Option<u64>)>,
    /// Records of the `deferred` table already written in place, to delete.
    retire: Vec<u64>,
    /// (block, seq, contents), by block.
    blocks: Vec<(u64, u64, Bytes)>,
}

/// The write-back running now, as the committer sees it.
struct Running {
    /// The blocks it writes in place, sorted.
    blocks: Vec<u64>,
}

/// The write-back thread.
struct WriteBack {
    jobs: Option<Sender<Job>>,
    done: Receiver<(u64, Result<()>)>,
    running: Option<Running>,
    thread: Option<JoinHandle<()>>,
}

impl WriteBack {
    fn start(shared: Arc<Shared>) -> Result<Self> {
        let (jobs, rx) = std::sync::mpsc::channel::<Job>();
        let (tx, done) = std::sync::mpsc::channel();
        let io = InPlace::start(shared.dev.clone())?;
        let thread = std::thread::Builder::new()
            .name("blockstore-wb".into())
            .spawn(move || {
                let mut io = io;
                while let Ok(job) = rx.recv() {
                    let outcome = write_back(&shared, &io, &job);
                    if tx.send((job.last, outcome)).is_err() {
                        break;
                    }
                }
                io.stop();
            })
            .map_err(|e| Error::io("starting the write-back thread", e))?;
        Ok(Self {
            jobs: Some(jobs),
            done,
            running: None,
            thread: Some(thread),
        })
    }

    fn submit(&mut self, job: Job) {
        self.running = Some(Running {
            blocks: job.blocks.iter().map(|b| b.0).collect(),
        });
        // If the thread is gone, its end of `done` is too: waiting reports it.
        if let Some(tx) = &self.jobs {
            let _ = tx.send(job);
        }
    }

    fn try_done(&mut self) -> Option<(u64, Result<()>)> {
        self.running.as_ref()?;
        match self.done.try_recv() {
            Ok(d) => {
                self.running = None;
                Some(d)
            }
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => {
                self.running = None;
                Some((0, Err(stopped())))
            }
        }
    }

    fn wait_done(&mut self) -> Option<(u64, Result<()>)> {
        self.running.as_ref()?;
        self.running = None;
        Some(self.done.recv().unwrap_or_else(|_| (0, Err(stopped()))))
    }

    fn stop(&mut self) {
        self.jobs = None;
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
    }
}

impl Drop for WriteBack {
    fn drop(&mut self) {
        self.stop();
    }
}

fn stopped() -> Error {
    Error::io(
        "waiting for a checkpoint",
        std::io::Error::other("the write-back thread has stopped"),
    )
}

/// Write one checkpoint back: its blocks in place, a sync, then its metadata and the
/// journal's new position to redb in one durable transaction.
fn write_back(shared: &Shared, io: &InPlace, job: &Job) -> Result<()> {
    if !job.blocks.is_empty() {
        // Readers that planned before now and read a block this rewrites retry under
        // the lock instead of reporting a checksum error.
        shared.write_state().reuse_gen += 1;
        io.submit(merge_runs(&job.blocks));
        io.wait_idle()?;
        let mut st = shared.write_state();
        for (pb, s, _) in &job.blocks {
            st.overlay.applied(*pb, *s);
        }
    }
    shared
        .dev
        .sync()
        .map_err(|e| Error::io("syncing the data device", e))?;
    let mut wtx = shared.db.begin_write().map_err(me("begin checkpoint"))?;
    wtx.set_durability(Durability::Immediate);
    // In key order: redb's inserts then walk its B-trees in order.
    let mut sorted: Vec<_> = job.kv.iter().collect();
    sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut kv = sorted.into_iter().peekable();
    while let Some(((id, _), _)) = kv.peek() {
        let id = *id;
        let table = journal::table_of(id)
            .ok_or_else(|| Error::Corrupt(format!("metadata change to table {id}")))?;
        let mut t = wtx.open_table(table).map_err(me("open table"))?;
        while let Some(((_, k), v)) = kv.next_if(|((i, _), _)| *i == id) {
            match v {
                Some(v) => t.insert(&k[..], &v[..]).map(|_| ()),
                None => t.remove(&k[..]).map(|_| ()),
            }
            .map_err(me("write back metadata"))?;
        }
    }
    if !job.retire.is_empty() {
        let mut deferred = wtx.open_table(DEFERRED).map_err(me("open deferred"))?;
        for seq in &job.retire {
            deferred
                .remove(&seq.to_be_bytes()[..])
                .map_err(me("delete deferred"))?;
        }
    }
    journal::write_free_runs(&wtx, &job.free)?;
    journal::put_seq(&wtx, KEY_APPLIED, job.last)?;
    journal::put_seq(&wtx, KEY_THROUGH, job.last)?;
    journal::put_seq(&wtx, KEY_TAIL, job.tail)?;
    wtx.commit().map_err(me("commit checkpoint"))
}

/// In-place writes for blocks sorted by number: runs of adjacent blocks (up to
/// [`MERGE_BLOCKS`]) become one write.
fn merge_runs(blocks: &[(u64, u64, Bytes)]) -> Vec<(u64, Bytes)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < blocks.len() {
        let mut j = i + 1;
        while j < blocks.len() && j - i < MERGE_BLOCKS && blocks[j].0 == blocks[j - 1].0 + 1 {
            j += 1;
        }
        if j - i == 1 {
            out.push((blocks[i].0, blocks[i].2.clone()));
        } else {
            let mut buf = AlignedBuf::new((j - i) * BLOCK);
            for (n, (_, _, d)) in blocks[i..j].iter().enumerate() {
                buf.as_mut_slice()[n * BLOCK..(n + 1) * BLOCK].copy_from_slice(d);
            }
            out.push((blocks[i].0, buf.into_bytes(0, (j - i) * BLOCK)));
        }
        i = j;
    }
    out
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

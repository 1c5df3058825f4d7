//! Crash-safe storage of the Raft log, the vote and snapshots, plus the
//! in-memory state machine they rebuild.
//!
//! Layout of `DATA/raft/`:
//! - `log`: an append-only file of records `len u32 | crc32c u32 | JSON op`,
//!   each op being an append of one entry, a truncation (conflicting
//!   suffix) or a purge (prefix covered by a snapshot). Every call that
//!   changes the log ends with one fsync. On open the file is replayed. Bytes
//!   after the last whole record make the open fail, naming the file, and
//!   leave it as it was: a write torn by a crash and a file cut short by
//!   damage look the same, and dropping acknowledged entries would break
//!   Raft's promise, so only an operator drops them
//!   ([`MonStore::cut_torn_tail`], `shoal mon repair-log`). When dead records
//!   dominate, the file is rewritten (write temporary, fsync, rename, fsync
//!   the directory).
//! - `vote` and `snapshot`: JSON, replaced atomically the same way.
//!
//! The state machine lives in memory and is rebuilt on start from the last
//! snapshot plus the log after it; the log is only purged up to a snapshot.

// openraft's trait methods fix the error type; our helpers return the same.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Cursor, Read, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use openraft::storage::{LogState, RaftLogReader, RaftSnapshotBuilder, RaftStorage, Snapshot};
use openraft::{
    AnyError, EntryPayload, OptionalSend, SnapshotMeta, StorageIOError, StoredMembership, Vote,
};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::state::{MonResponse, MonState};
use crate::types::{Entry, LogId, StorageError, TypeConfig};

type Membership = StoredMembership<u64, openraft::BasicNode>;
type Meta = SnapshotMeta<u64, openraft::BasicNode>;

#[derive(Serialize, Deserialize)]
enum LogOp {
    Append(Entry),
    Truncate(u64),
    Purge(LogId),
}

#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: Meta,
    state: MonState,
}

struct Inner {
    dir: PathBuf,
    log_file: File,
    records: usize,
    log: BTreeMap<u64, Entry>,
    last_purged: Option<LogId>,
    vote: Option<Vote<u64>>,
    last_applied: Option<LogId>,
    membership: Membership,
    snapshot: Option<StoredSnapshot>,
    snapshots_built: u64,
}

/// The monitor's Raft storage. Clones share it.
#[derive(Clone)]
pub struct MonStore {
    inner: Arc<Mutex<Inner>>,
    state: Arc<RwLock<MonState>>,
    /// The state's version after each apply, for subscription pushes.
    applied: Arc<tokio::sync::watch::Sender<u64>>,
}

impl std::fmt::Debug for MonStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MonStore")
    }
}

fn io_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write(AnyError::error(e.to_string())).into()
}

fn read_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::read(AnyError::error(e.to_string())).into()
}

/// Writes `bytes` to `path` atomically and durably.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    sync_dir(path)
}

fn sync_dir(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) => File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

/// `path` parsed as JSON, `None` when it does not exist; an error naming the
/// file when it cannot be read or is not `what`.
fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    what: &str,
) -> Result<Option<T>, StorageError> {
    match std::fs::read(path) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| read_err(format!("{}: not {what} ({e})", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(read_err(format!("{}: {e}", path.display()))),
    }
}

/// The whole log file (empty when it does not exist).
fn read_log(path: &Path) -> Result<Vec<u8>, StorageError> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut f) => {
            f.read_to_end(&mut bytes)
                .map_err(|e| read_err(format!("{}: {e}", path.display())))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(read_err(format!("{}: {e}", path.display()))),
    }
    Ok(bytes)
}

fn encode_record(op: &LogOp) -> Result<Vec<u8>, StorageError> {
    let body = serde_json::to_vec(op).map_err(io_err)?;
    let mut rec = Vec::with_capacity(body.len() + 8);
    rec.extend_from_slice(&(body.len() as u32).to_le_bytes());
    rec.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    rec.extend_from_slice(&body);
    Ok(rec)
}

/// Splits whole, intact records off `bytes`; returns them and the length of
/// the valid prefix.
fn decode_records(bytes: &[u8]) -> (Vec<LogOp>, usize) {
    let mut ops = Vec::new();
    let mut at = 0;
    while let Some(head) = bytes.get(at..at + 8) {
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        let Some(body) = bytes.get(at + 8..at + 8 + len) else {
            break;
        };
        if crc32c::crc32c(body) != crc {
            break;
        }
        let Ok(op) = serde_json::from_slice(body) else {
            break;
        };
        ops.push(op);
        at += 8 + len;
    }
    (ops, at)
}

impl MonStore {
    /// Opens (or creates) the storage under `dir/raft`, replaying the log.
    /// A vote or snapshot that does not parse, or a log with bytes after its
    /// last whole record, is an error naming the file; nothing is changed.
    pub fn open(dir: &Path) -> Result<MonStore, StorageError> {
        let dir = dir.join("raft");
        std::fs::create_dir_all(&dir).map_err(io_err)?;
        let vote = read_json(&dir.join("vote"), "a Raft vote")?;
        let snapshot: Option<StoredSnapshot> =
            read_json(&dir.join("snapshot"), "a monitor snapshot")?;
        let path = dir.join("log");
        let bytes = read_log(&path)?;
        let (ops, valid) = decode_records(&bytes);
        if valid < bytes.len() {
            return Err(read_err(format!(
                "{}: {} bytes after the last whole record (at offset {valid}) do not \
                 form a record: the log was cut short or damaged, or a write was torn \
                 by a crash; the monitor left it as it is. If this monitor crashed \
                 while writing, `shoal mon repair-log` drops the tail; otherwise \
                 rebuild this monitor from its peers",
                path.display(),
                bytes.len() - valid
            )));
        }
        let log_file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io_err)?;
        let (state, last_applied, membership) = match &snapshot {
            Some(s) => (
                s.state.clone(),
                s.meta.last_log_id,
                s.meta.last_membership.clone(),
            ),
            None => (MonState::default(), None, Membership::default()),
        };
        let mut inner = Inner {
            dir,
            log_file,
            records: ops.len(),
            log: BTreeMap::new(),
            last_purged: None,
            vote,
            last_applied,
            membership,
            snapshot,
            snapshots_built: 0,
        };
        for op in ops {
            inner.replay(op);
        }
        let version = state.version;
        Ok(MonStore {
            inner: Arc::new(Mutex::new(inner)),
            state: Arc::new(RwLock::new(state)),
            applied: Arc::new(tokio::sync::watch::channel(version).0),
        })
    }

    /// Drops the bytes after the last whole record of `dir/raft/log` (a write
    /// torn by a crash), for an operator who knows that is what they are.
    /// Returns how many bytes were dropped.
    pub fn cut_torn_tail(dir: &Path) -> Result<u64, StorageError> {
        let path = dir.join("raft").join("log");
        let bytes = read_log(&path)?;
        let (_, valid) = decode_records(&bytes);
        if valid == bytes.len() {
            return Ok(0);
        }
        let f = OpenOptions::new().write(true).open(&path).map_err(io_err)?;
        f.set_len(valid as u64).map_err(io_err)?;
        f.sync_all().map_err(io_err)?;
        tracing::warn!(
            dropped = bytes.len() - valid,
            "cut a torn tail off the monitor log"
        );
        Ok((bytes.len() - valid) as u64)
    }

    /// The replicated state, for reading.
    pub fn state(&self) -> Arc<RwLock<MonState>> {
        Arc::clone(&self.state)
    }

    /// Follows the state's version as entries are applied.
    pub fn watch_applied(&self) -> tokio::sync::watch::Receiver<u64> {
        self.applied.subscribe()
    }

    /// Whether this store has never taken part in a cluster.
    pub async fn is_fresh(&self) -> bool {
        let i = self.inner.lock().await;
        i.vote.is_none() && i.log.is_empty() && i.snapshot.is_none() && i.last_purged.is_none()
    }
}

impl Inner {
    fn replay(&mut self, op: LogOp) {
        match op {
            LogOp::Append(e) => {
                self.log.insert(e.log_id.index, e);
            }
            LogOp::Truncate(from) => {
                self.log.split_off(&from);
            }
            LogOp::Purge(id) => {
                self.log = self.log.split_off(&(id.index + 1));
                self.last_purged = Some(id);
            }
        }
    }

    /// Appends records for `ops`, applies them, and syncs once.
    fn write_ops(&mut self, ops: Vec<LogOp>) -> Result<(), StorageError> {
        let mut buf = Vec::new();
        for op in &ops {
            buf.extend_from_slice(&encode_record(op)?);
        }
        self.log_file.write_all(&buf).map_err(io_err)?;
        self.log_file.sync_data().map_err(io_err)?;
        self.records += ops.len();
        for op in ops {
            self.replay(op);
        }
        if self.records > 2 * self.log.len() + 1024 {
            self.compact()?;
        }
        Ok(())
    }

    /// Rewrites the log file with only the live entries.
    fn compact(&mut self) -> Result<(), StorageError> {
        let path = self.dir.join("log");
        let tmp = self.dir.join("log.tmp");
        let mut buf = Vec::new();
        if let Some(p) = self.last_purged {
            buf.extend_from_slice(&encode_record(&LogOp::Purge(p))?);
        }
        for e in self.log.values() {
            buf.extend_from_slice(&encode_record(&LogOp::Append(e.clone()))?);
        }
        let mut f = File::create(&tmp).map_err(io_err)?;
        f.write_all(&buf).map_err(io_err)?;
        f.sync_all().map_err(io_err)?;
        std::fs::rename(&tmp, &path).map_err(io_err)?;
        sync_dir(&path).map_err(io_err)?;
        self.log_file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(io_err)?;
        self.records = self.log.len() + usize::from(self.last_purged.is_some());
        Ok(())
    }

    fn save_snapshot(&mut self, snap: StoredSnapshot) -> Result<Vec<u8>, StorageError> {
        let bytes = serde_json::to_vec(&snap).map_err(io_err)?;
        write_atomic(&self.dir.join("snapshot"), &bytes).map_err(io_err)?;
        let data = serde_json::to_vec(&snap.state).map_err(io_err)?;
        self.snapshot = Some(snap);
        Ok(data)
    }
}

impl RaftLogReader<TypeConfig> for MonStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + std::fmt::Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let i = self.inner.lock().await;
        Ok(i.log.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftSnapshotBuilder<TypeConfig> for MonStore {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let mut i = self.inner.lock().await;
        let state = self.state.read().map_err(read_err)?.clone();
        i.snapshots_built += 1;
        let meta = Meta {
            last_log_id: i.last_applied,
            last_membership: i.membership.clone(),
            snapshot_id: format!(
                "{}-{}",
                i.last_applied.map(|l| l.index).unwrap_or(0),
                i.snapshots_built
            ),
        };
        let data = i.save_snapshot(StoredSnapshot {
            meta: meta.clone(),
            state,
        })?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStorage<TypeConfig> for MonStore {
    type LogReader = MonStore;
    type SnapshotBuilder = MonStore;

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError> {
        let mut i = self.inner.lock().await;
        let bytes = serde_json::to_vec(vote).map_err(io_err)?;
        write_atomic(&i.dir.join("vote"), &bytes).map_err(io_err)?;
        i.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError> {
        Ok(self.inner.lock().await.vote)
    }

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let i = self.inner.lock().await;
        let last = i
            .log
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(i.last_purged);
        Ok(LogState {
            last_purged_log_id: i.last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn append_to_log<I>(&mut self, entries: I) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
    {
        let ops: Vec<LogOp> = entries.into_iter().map(LogOp::Append).collect();
        self.inner.lock().await.write_ops(ops)
    }

    async fn delete_conflict_logs_since(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.inner
            .lock()
            .await
            .write_ops(vec![LogOp::Truncate(log_id.index)])
    }

    async fn purge_logs_upto(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.inner
            .lock()
            .await
            .write_ops(vec![LogOp::Purge(log_id)])
    }

    async fn last_applied_state(&mut self) -> Result<(Option<LogId>, Membership), StorageError> {
        let i = self.inner.lock().await;
        Ok((i.last_applied, i.membership.clone()))
    }

    async fn apply_to_state_machine(
        &mut self,
        entries: &[Entry],
    ) -> Result<Vec<MonResponse>, StorageError> {
        let mut i = self.inner.lock().await;
        let mut state = self.state.write().map_err(io_err)?;
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            i.last_applied = Some(e.log_id);
            match &e.payload {
                EntryPayload::Blank => out.push(MonResponse::Ok(serde_json::Value::Null)),
                EntryPayload::Normal(req) => out.push(state.apply(req)),
                EntryPayload::Membership(m) => {
                    i.membership = StoredMembership::new(Some(e.log_id), m.clone());
                    out.push(MonResponse::Ok(serde_json::Value::Null));
                }
            }
        }
        self.applied.send_replace(state.version);
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let new_state: MonState = serde_json::from_slice(snapshot.get_ref()).map_err(read_err)?;
        let mut i = self.inner.lock().await;
        i.save_snapshot(StoredSnapshot {
            meta: meta.clone(),
            state: new_state.clone(),
        })?;
        i.last_applied = meta.last_log_id;
        i.membership = meta.last_membership.clone();
        let version = new_state.version;
        *self.state.write().map_err(io_err)? = new_state;
        self.applied.send_replace(version);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let i = self.inner.lock().await;
        let Some(s) = &i.snapshot else {
            return Ok(None);
        };
        let data = serde_json::to_vec(&s.state).map_err(read_err)?;
        Ok(Some(Snapshot {
            meta: s.meta.clone(),
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::MonRequest;
    use openraft::{CommittedLeaderId, EntryPayload};
    use std::sync::atomic::{AtomicU32, Ordering};

    fn scratch() -> PathBuf {
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "shoal-monstore-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn passes_openraft_storage_suite() {
        openraft::testing::Suite::test_all(|| async { MonStore::open(&scratch()).unwrap() })
            .unwrap();
    }

    fn entry(term: u64, index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 0), index),
            payload: EntryPayload::Normal(MonRequest::AuthRm {
                entity: format!("client.{index}"),
            }),
        }
    }

    async fn indexes(s: &mut MonStore) -> Vec<u64> {
        s.try_get_log_entries(..)
            .await
            .unwrap()
            .iter()
            .map(|e| e.log_id.index)
            .collect()
    }

    #[tokio::test]
    async fn survives_reopen_and_cuts_a_torn_tail() {
        let dir = scratch();
        let mut s = MonStore::open(&dir).unwrap();
        assert!(s.is_fresh().await);
        s.append_to_log((1..=10).map(|i| entry(1, i)))
            .await
            .unwrap();
        s.delete_conflict_logs_since(LogId::new(CommittedLeaderId::new(1, 0), 8))
            .await
            .unwrap();
        s.append_to_log([entry(2, 8)]).await.unwrap();
        s.purge_logs_upto(LogId::new(CommittedLeaderId::new(1, 0), 3))
            .await
            .unwrap();
        let vote = Vote::new(2, 7);
        s.save_vote(&vote).await.unwrap();
        drop(s);
        let mut s = MonStore::open(&dir).unwrap();
        assert!(!s.is_fresh().await);
        assert_eq!(indexes(&mut s).await, vec![4, 5, 6, 7, 8]);
        assert_eq!(s.read_vote().await.unwrap(), Some(vote));
        let st = s.get_log_state().await.unwrap();
        assert_eq!(st.last_purged_log_id.map(|l| l.index), Some(3));
        assert_eq!(st.last_log_id.map(|l| l.leader_id.term), Some(2));
        drop(s);
        // A crash mid-append leaves half a record: the open refuses and
        // changes nothing; the operator's repair cuts it off, the rest stays.
        let log = dir.join("raft/log");
        let mut f = OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(&[200, 0, 0, 0, 1, 2, 3]).unwrap();
        drop(f);
        let torn = std::fs::read(&log).unwrap();
        let e = MonStore::open(&dir).unwrap_err().to_string();
        assert!(e.contains("raft/log") && e.contains("7 bytes after"), "{e}");
        assert_eq!(std::fs::read(&log).unwrap(), torn);
        assert_eq!(MonStore::cut_torn_tail(&dir).unwrap(), 7);
        let mut s = MonStore::open(&dir).unwrap();
        assert_eq!(indexes(&mut s).await, vec![4, 5, 6, 7, 8]);
        assert_eq!(
            std::fs::metadata(&log).unwrap().len(),
            torn.len() as u64 - 7
        );
        // And appends continue after the cut.
        s.append_to_log([entry(2, 9)]).await.unwrap();
        drop(s);
        let mut s = MonStore::open(&dir).unwrap();
        assert_eq!(indexes(&mut s).await, vec![4, 5, 6, 7, 8, 9]);
    }

    #[tokio::test]
    async fn compaction_keeps_the_live_log() {
        let dir = scratch();
        let mut s = MonStore::open(&dir).unwrap();
        for i in 1..=3000u64 {
            s.append_to_log([entry(1, i)]).await.unwrap();
            if i % 100 == 0 {
                s.purge_logs_upto(LogId::new(CommittedLeaderId::new(1, 0), i - 50))
                    .await
                    .unwrap();
            }
        }
        let records = s.inner.lock().await.records;
        assert!(
            records < 1200,
            "log file was never compacted ({records} records)"
        );
        drop(s);
        let mut s = MonStore::open(&dir).unwrap();
        assert_eq!(indexes(&mut s).await, (2951..=3000).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn snapshots_rebuild_the_state_machine() {
        let dir = scratch();
        let mut s = MonStore::open(&dir).unwrap();
        let boot = Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 0), 1),
            payload: EntryPayload::Normal(MonRequest::Bootstrap {
                fsid: "00000000-0000-0000-0000-000000000abc".into(),
                failure_domain: "osd".into(),
                history: 500,
                full_interval: 100,
                mons: Default::default(),
                auth: Default::default(),
            }),
        };
        s.append_to_log([boot.clone()]).await.unwrap();
        s.apply_to_state_machine(&[boot]).await.unwrap();
        let snap = s.build_snapshot().await.unwrap();
        assert_eq!(snap.meta.last_log_id.map(|l| l.index), Some(1));
        drop(s);
        let mut s = MonStore::open(&dir).unwrap();
        assert_eq!(
            s.state().read().unwrap().fsid,
            "00000000-0000-0000-0000-000000000abc"
        );
        assert_eq!(s.state().read().unwrap().osdmap.epoch(), 1);
        let (applied, _) = s.last_applied_state().await.unwrap();
        assert_eq!(applied.map(|l| l.index), Some(1));
        // Installing a snapshot from a leader replaces the state.
        let other = MonState {
            fsid: "xyz".into(),
            ..MonState::default()
        };
        let data = serde_json::to_vec(&other).unwrap();
        let mut meta = snap.meta.clone();
        meta.last_log_id = Some(LogId::new(CommittedLeaderId::new(3, 0), 40));
        s.install_snapshot(&meta, Box::new(Cursor::new(data)))
            .await
            .unwrap();
        assert_eq!(s.state().read().unwrap().fsid, "xyz");
        drop(s);
        let s = MonStore::open(&dir).unwrap();
        assert_eq!(s.state().read().unwrap().fsid, "xyz");
    }
}

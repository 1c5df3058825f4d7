//! The PG log: every change to a PG's objects, in version order, written in
//! the same store transaction as the change itself. It is what peering
//! compares between replicas, what recovery replays, and (with the request
//! ids of trimmed entries kept as "dups") what makes a resent op apply at
//! most once.
//!
//! Persistent layout, in the omap of the PG's meta object:
//! `info` → [`PgInfoData`], `log.<epoch BE><v BE>` → [`LogEntry`],
//! `dup.<epoch BE><v BE>` → [`Dup`]. Every encoding starts with a format byte.

use std::collections::{BTreeMap, HashMap, VecDeque};

use bytes::Bytes;
use shoal_objectstore::{CollectionId, ObjectKey, Transaction};

use crate::object::pg_meta_key;

/// A PG version: the map epoch the change was made in, and a counter that
/// grows by one per change within the PG. Ordered by (epoch, v).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Version {
    /// Epoch of the primary's map when it ordered the change.
    pub epoch: u32,
    /// Per-PG sequence number.
    pub v: u64,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}'{}", self.epoch, self.v)
    }
}

impl Version {
    fn key_suffix(&self) -> [u8; 12] {
        let mut k = [0u8; 12];
        k[..4].copy_from_slice(&self.epoch.to_be_bytes());
        k[4..].copy_from_slice(&self.v.to_be_bytes());
        k
    }
}

/// Who sent an op, and its id: an op resent with the same request id is
/// applied at most once.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReqId {
    /// The sender's entity name (`client.admin`).
    pub entity: String,
    /// The sender instance.
    pub inc: u64,
    /// The sender's op id.
    pub tid: u64,
}

/// What a logged change did to its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogOp {
    /// The object was created or changed.
    Modify,
    /// The object was removed.
    Delete,
}

/// One change to one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// The change's version.
    pub version: Version,
    /// What it did.
    pub op: LogOp,
    /// The object.
    pub key: ObjectKey,
    /// The request that made it, when a client did.
    pub reqid: Option<ReqId>,
    /// The result code returned to the client.
    pub code: u32,
}

/// A request id kept after its log entry was trimmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dup {
    /// The version of the change.
    pub version: Version,
    /// The request.
    pub reqid: ReqId,
    /// The result code returned.
    pub code: u32,
}

/// What a PG member knows about its copy, persisted with every change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PgInfoData {
    /// Newest change applied.
    pub last_update: Version,
    /// Oldest change still in the log minus one: the log covers `(log_tail, last_update]`.
    pub log_tail: Version,
    /// Epoch in which the PG last went active with this member.
    pub last_epoch_started: u32,
    /// Objects in the PG.
    pub objects: u64,
    /// Logical bytes of those objects.
    pub bytes: u64,
}

/// Version of the PG log's records (2: object keys carry their snapshot id).
pub(crate) const FORMAT: u8 = 2;

/// Why a persisted or received log record could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed PG log record: {0}")]
pub struct LogDecodeError(pub &'static str);

pub(crate) struct Reader<'a>(pub(crate) &'a [u8]);

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], LogDecodeError> {
        if self.0.len() < n {
            return Err(LogDecodeError("truncated"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, LogDecodeError> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u32(&mut self) -> Result<u32, LogDecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, LogDecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], LogDecodeError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub(crate) fn version(&mut self) -> Result<Version, LogDecodeError> {
        Ok(Version {
            epoch: self.u32()?,
            v: self.u64()?,
        })
    }
    pub(crate) fn done(&self) -> Result<(), LogDecodeError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(LogDecodeError("trailing bytes"))
        }
    }
}

pub(crate) fn put_version(out: &mut Vec<u8>, v: Version) {
    out.extend_from_slice(&v.epoch.to_le_bytes());
    out.extend_from_slice(&v.v.to_le_bytes());
}

pub(crate) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn put_reqid(out: &mut Vec<u8>, r: &ReqId) {
    put_bytes(out, r.entity.as_bytes());
    out.extend_from_slice(&r.inc.to_le_bytes());
    out.extend_from_slice(&r.tid.to_le_bytes());
}

fn get_reqid(r: &mut Reader<'_>) -> Result<ReqId, LogDecodeError> {
    let entity = std::str::from_utf8(r.bytes()?)
        .map_err(|_| LogDecodeError("entity name is not UTF-8"))?
        .to_string();
    Ok(ReqId {
        entity,
        inc: r.u64()?,
        tid: r.u64()?,
    })
}

impl LogEntry {
    /// Versioned binary encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48 + self.key.name.len());
        out.push(FORMAT);
        put_version(&mut out, self.version);
        out.push(match self.op {
            LogOp::Modify => 1,
            LogOp::Delete => 2,
        });
        out.extend_from_slice(&self.key.hash.to_le_bytes());
        put_bytes(&mut out, &self.key.name);
        out.extend_from_slice(&self.key.snap.to_le_bytes());
        out.extend_from_slice(&self.code.to_le_bytes());
        match &self.reqid {
            None => out.push(0),
            Some(r) => {
                out.push(1);
                put_reqid(&mut out, r);
            }
        }
        out
    }

    /// Decodes [`LogEntry::encode`]'s output.
    pub fn decode(b: &[u8]) -> Result<LogEntry, LogDecodeError> {
        let mut r = Reader(b);
        if r.u8()? != FORMAT {
            return Err(LogDecodeError("unknown format"));
        }
        let version = r.version()?;
        let op = match r.u8()? {
            1 => LogOp::Modify,
            2 => LogOp::Delete,
            _ => return Err(LogDecodeError("unknown op")),
        };
        let hash = r.u32()?;
        let name = r.bytes()?.to_vec();
        let snap = r.u64()?;
        let code = r.u32()?;
        let reqid = match r.u8()? {
            0 => None,
            1 => Some(get_reqid(&mut r)?),
            _ => return Err(LogDecodeError("bad request id tag")),
        };
        r.done()?;
        Ok(LogEntry {
            version,
            op,
            key: ObjectKey { hash, name, snap },
            reqid,
            code,
        })
    }
}

impl Dup {
    /// The persisted and wire form.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![FORMAT];
        put_version(&mut out, self.version);
        put_reqid(&mut out, &self.reqid);
        out.extend_from_slice(&self.code.to_le_bytes());
        out
    }

    /// Decodes [`Dup::encode`]'s form.
    pub fn decode(b: &[u8]) -> Result<Dup, LogDecodeError> {
        let mut r = Reader(b);
        if r.u8()? != FORMAT {
            return Err(LogDecodeError("unknown format"));
        }
        let version = r.version()?;
        let reqid = get_reqid(&mut r)?;
        let code = r.u32()?;
        r.done()?;
        Ok(Dup {
            version,
            reqid,
            code,
        })
    }
}

impl PgInfoData {
    /// Versioned binary encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![FORMAT];
        put_version(&mut out, self.last_update);
        put_version(&mut out, self.log_tail);
        out.extend_from_slice(&self.last_epoch_started.to_le_bytes());
        out.extend_from_slice(&self.objects.to_le_bytes());
        out.extend_from_slice(&self.bytes.to_le_bytes());
        out
    }

    /// Decodes [`PgInfoData::encode`]'s output.
    pub fn decode(b: &[u8]) -> Result<PgInfoData, LogDecodeError> {
        let mut r = Reader(b);
        if r.u8()? != FORMAT {
            return Err(LogDecodeError("unknown format"));
        }
        let info = PgInfoData {
            last_update: r.version()?,
            log_tail: r.version()?,
            last_epoch_started: r.u32()?,
            objects: r.u64()?,
            bytes: r.u64()?,
        };
        r.done()?;
        Ok(info)
    }
}

/// Omap key of the PG info.
pub const INFO_KEY: &[u8] = b"info";
const LOG_PREFIX: &[u8] = b"log.";
const DUP_PREFIX: &[u8] = b"dup.";

fn key(prefix: &[u8], v: Version) -> Bytes {
    let mut k = prefix.to_vec();
    k.extend_from_slice(&v.key_suffix());
    Bytes::from(k)
}

/// A PG's log in memory, with the index of request ids (log and dups).
///
/// On disk (the PG meta object's omap) the log is one `log.<version>` key
/// per entry and the info under `info`. A trimmed entry that carries a
/// request id stays where it is, under its `log.` key, and reads as a dup
/// because its version is at or below `log_tail`: trimming writes nothing
/// and the oldest dup's removal is one key, so a write changes three keys
/// (its entry, the info, the dropped dup) rather than five. Dups received
/// from another member (`replace`) and those of logs written before this
/// layout are `dup.<version>` keys; both read back the same.
#[derive(Debug, Clone, Default)]
pub struct PgLog {
    /// Persisted PG info (last_update, log_tail, stats).
    pub info: PgInfoData,
    entries: VecDeque<LogEntry>,
    dups: VecDeque<StoredDup>,
    reqids: HashMap<ReqId, (Version, u32)>,
}

/// A dup and the omap key it is stored under.
#[derive(Debug, Clone)]
struct StoredDup {
    dup: Dup,
    /// `LOG_PREFIX` (a trimmed entry kept in place) or `DUP_PREFIX`.
    prefix: &'static [u8],
}

impl StoredDup {
    fn key(&self) -> Bytes {
        key(self.prefix, self.dup.version)
    }
}

/// Most entries one change trims beyond its own: a log whose limit
/// dropped (its PG went clean) shortens over a few dozen changes.
pub const TRIM_STEP: usize = 64;

/// How many entries and dups a log keeps.
#[derive(Debug, Clone, Copy)]
pub struct LogLimits {
    /// Log entries kept.
    pub entries_max: usize,
    /// Request ids of trimmed entries kept.
    pub dups_max: usize,
}

impl Default for LogLimits {
    fn default() -> Self {
        LogLimits {
            entries_max: 3000,
            dups_max: 3000,
        }
    }
}

impl PgLog {
    /// The (last epoch started, last update) of the copy in `coll`, from
    /// its info alone (`None`: none readable).
    pub fn load_info(
        store: &dyn shoal_objectstore::ObjectStore,
        coll: CollectionId,
    ) -> Option<(u32, Version)> {
        let raw = store
            .omap_get_values(&coll, &pg_meta_key(), &[Bytes::from_static(INFO_KEY)])
            .ok()?;
        let info = PgInfoData::decode(raw.get(INFO_KEY)?).ok()?;
        Some((info.last_epoch_started, info.last_update))
    }

    /// Rebuilds the log from the PG meta object's omap entries.
    pub fn load(omap: &BTreeMap<Bytes, Bytes>) -> Result<PgLog, LogDecodeError> {
        let mut log = PgLog::default();
        if let Some(info) = omap.get(INFO_KEY) {
            log.info = PgInfoData::decode(info)?;
        }
        // Keys sort `dup.` before `log.`, and every `dup.` key is older
        // than the trimmed entries kept in place: dups load oldest first.
        for (k, v) in omap {
            if k.starts_with(LOG_PREFIX) {
                let e = LogEntry::decode(v)?;
                if e.version > log.info.log_tail {
                    log.push_entry(e);
                } else if let Some(reqid) = e.reqid {
                    log.push_dup(
                        Dup {
                            version: e.version,
                            reqid,
                            code: e.code,
                        },
                        LOG_PREFIX,
                    );
                }
            } else if k.starts_with(DUP_PREFIX) {
                log.push_dup(Dup::decode(v)?, DUP_PREFIX);
            }
        }
        Ok(log)
    }

    fn push_dup(&mut self, dup: Dup, prefix: &'static [u8]) {
        self.reqids
            .insert(dup.reqid.clone(), (dup.version, dup.code));
        self.dups.push_back(StoredDup { dup, prefix });
    }

    fn push_entry(&mut self, e: LogEntry) {
        if let Some(r) = &e.reqid {
            self.reqids.insert(r.clone(), (e.version, e.code));
        }
        self.entries.push_back(e);
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> impl DoubleEndedIterator<Item = &LogEntry> + ExactSizeIterator {
        self.entries.iter()
    }

    /// The entries newer than `v`, oldest first.
    pub fn entries_after(&self, v: Version) -> impl Iterator<Item = &LogEntry> {
        self.entries.iter().filter(move |e| e.version > v)
    }

    /// The version and result of the change made by `reqid`, if still known.
    pub fn lookup(&self, reqid: &ReqId) -> Option<(Version, u32)> {
        self.reqids.get(reqid).copied()
    }

    /// The next version for a change ordered in `epoch`.
    pub fn next_version(&self, epoch: u32) -> Version {
        Version {
            epoch: epoch.max(self.info.last_update.epoch),
            v: self.info.last_update.v + 1,
        }
    }

    /// Appends `e` (newer than every entry), trims towards `limits` (at most
    /// [`TRIM_STEP`] entries beyond one), and adds the omap updates that
    /// persist it all to `txn`, in the PG's collection `coll`.
    pub fn append(
        &mut self,
        e: LogEntry,
        limits: LogLimits,
        coll: CollectionId,
        txn: &mut Transaction,
    ) {
        let mut set = BTreeMap::new();
        let mut rm = Vec::new();
        set.insert(key(LOG_PREFIX, e.version), Bytes::from(e.encode()));
        self.info.last_update = e.version;
        self.push_entry(e);
        // A log shortened (its PG went clean) is trimmed a step per change,
        // not all at once in one change's transaction.
        let mut trim = self
            .entries
            .len()
            .saturating_sub(limits.entries_max.max(1))
            .min(TRIM_STEP);
        while trim > 0 {
            trim -= 1;
            let Some(old) = self.entries.pop_front() else {
                break;
            };
            self.info.log_tail = old.version;
            match old.reqid {
                // Kept in place: below the tail it reads as a dup.
                Some(reqid) => self.push_dup(
                    Dup {
                        version: old.version,
                        reqid,
                        code: old.code,
                    },
                    LOG_PREFIX,
                ),
                None => rm.push(key(LOG_PREFIX, old.version)),
            }
        }
        while self.dups.len() > limits.dups_max {
            let Some(d) = self.dups.pop_front() else {
                break;
            };
            rm.push(d.key());
            if self
                .reqids
                .get(&d.dup.reqid)
                .is_some_and(|(v, _)| *v == d.dup.version)
            {
                self.reqids.remove(&d.dup.reqid);
            }
        }
        set.insert(
            Bytes::from_static(INFO_KEY),
            Bytes::from(self.info.encode()),
        );
        let meta = pg_meta_key();
        if !rm.is_empty() {
            txn.omap_remove_keys(coll, meta.clone(), rm);
        }
        txn.omap_set_keys(coll, meta, set);
    }

    /// The dups, oldest first.
    pub fn dups(&self) -> impl Iterator<Item = &Dup> {
        self.dups.iter().map(|d| &d.dup)
    }

    /// Replaces this log with `entries` and `dups` from an authoritative
    /// member, and persists it. The dups merge with ours (both name old
    /// requests that were applied), the newest `dups_max` kept.
    ///
    /// Only what differs is written: a member whose log already is the
    /// authoritative one (every activation after the first of a recovery)
    /// writes its info alone, not thousands of entries again.
    pub fn replace(
        &mut self,
        info: PgInfoData,
        entries: Vec<LogEntry>,
        dups: Vec<Dup>,
        limits: LogLimits,
        coll: CollectionId,
        txn: &mut Transaction,
    ) {
        let meta = pg_meta_key();
        // What is stored now, by key: an entry's or a dup's encoding, or
        // `None` for a trimmed entry kept in place as a dup (its stored
        // value is the entry's encoding, which we no longer hold).
        let mut stored: HashMap<Bytes, Option<Vec<u8>>> = self
            .entries
            .iter()
            .map(|e| (key(LOG_PREFIX, e.version), Some(e.encode())))
            .chain(self.dups.iter().map(|d| {
                let value = (d.prefix == DUP_PREFIX).then(|| d.dup.encode());
                (d.key(), value)
            }))
            .collect();
        let mut merged: BTreeMap<Version, Dup> = std::mem::take(&mut self.dups)
            .into_iter()
            .map(|d| d.dup)
            .chain(dups)
            .map(|d| (d.version, d))
            .collect();
        while merged.len() > limits.dups_max {
            merged.pop_first();
        }
        self.entries.clear();
        self.reqids.clear();
        let mut set = BTreeMap::new();
        for d in merged.into_values() {
            set.insert(key(DUP_PREFIX, d.version), Bytes::from(d.encode()));
            self.push_dup(d, DUP_PREFIX);
        }
        for e in entries {
            debug_assert!(
                e.version > info.log_tail,
                "a log covers (log_tail, last_update]"
            );
            set.insert(key(LOG_PREFIX, e.version), Bytes::from(e.encode()));
            self.push_entry(e);
        }
        self.info = info;
        // Unchanged keys stay as they are; keys no longer in the log go.
        set.retain(|k, v| match stored.remove(k) {
            Some(Some(old)) => old != v.as_ref(),
            _ => true,
        });
        if !stored.is_empty() {
            let mut gone: Vec<Bytes> = stored.into_keys().collect();
            gone.sort();
            txn.omap_remove_keys(coll, meta.clone(), gone);
        }
        set.insert(
            Bytes::from_static(INFO_KEY),
            Bytes::from(self.info.encode()),
        );
        txn.omap_set_keys(coll, meta, set);
    }

    /// Adds the omap update persisting the info alone.
    pub fn persist_info(&self, coll: CollectionId, txn: &mut Transaction) {
        let mut set = BTreeMap::new();
        set.insert(
            Bytes::from_static(INFO_KEY),
            Bytes::from(self.info.encode()),
        );
        txn.omap_set_keys(coll, pg_meta_key(), set);
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the log has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_objectstore::{MemStore, ObjectStore};
    use std::ops::Bound;

    fn entry(v: u64, tid: u64) -> LogEntry {
        LogEntry {
            version: Version { epoch: 3, v },
            op: if v & 1 == 0 {
                LogOp::Modify
            } else {
                LogOp::Delete
            },
            key: ObjectKey::new(v as u32, format!("obj{v}")),
            reqid: Some(id(tid)),
            code: 0,
        }
    }

    /// client.admin's request `tid`.
    fn id(tid: u64) -> ReqId {
        ReqId {
            entity: "client.admin".into(),
            inc: 9,
            tid,
        }
    }

    fn omap(store: &MemStore, c: CollectionId) -> BTreeMap<Bytes, Bytes> {
        store
            .omap_range(
                &c,
                &pg_meta_key(),
                Bound::Unbounded,
                Bound::Unbounded,
                1 << 20,
            )
            .unwrap()
            .into_iter()
            .collect()
    }

    #[test]
    fn encodings_round_trip_and_garbage_is_an_error() {
        let e = entry(4, 7);
        assert_eq!(LogEntry::decode(&e.encode()).unwrap(), e);
        let info = PgInfoData {
            last_update: Version { epoch: 5, v: 9 },
            log_tail: Version { epoch: 1, v: 2 },
            last_epoch_started: 4,
            objects: 3,
            bytes: 1000,
        };
        assert_eq!(PgInfoData::decode(&info.encode()).unwrap(), info);
        let enc = e.encode();
        for n in 0..enc.len() {
            assert!(LogEntry::decode(&enc[..n]).is_err());
        }
        let mut extra = enc.clone();
        extra.push(0);
        assert!(LogEntry::decode(&extra).is_err());
    }

    #[test]
    fn appended_entries_persist_trim_into_dups_and_reload_identically() {
        let store = MemStore::new(1 << 30);
        let c = CollectionId::new(1, 0);
        let mut t = Transaction::new();
        t.create_collection(c);
        store.apply_transaction(t).unwrap();
        let limits = LogLimits {
            entries_max: 4,
            dups_max: 3,
        };
        let mut log = PgLog::default();
        for v in 1..=10 {
            let mut t = Transaction::new();
            log.append(entry(v, 100 + v), limits, c, &mut t);
            store.apply_transaction(t).unwrap();
        }
        assert_eq!(log.len(), 4);
        assert_eq!(log.info.last_update, Version { epoch: 3, v: 10 });
        assert_eq!(log.info.log_tail, Version { epoch: 3, v: 6 });
        // In the log, in the dups, and forgotten.
        assert_eq!(log.lookup(&id(110)).unwrap().0.v, 10);
        assert_eq!(log.lookup(&id(104)).unwrap().0.v, 4);
        assert_eq!(log.lookup(&id(103)), None);
        let reloaded = PgLog::load(&omap(&store, c)).unwrap();
        assert_eq!(reloaded.info, log.info);
        assert_eq!(
            reloaded.entries().collect::<Vec<_>>(),
            log.entries().collect::<Vec<_>>()
        );
        assert_eq!(reloaded.lookup(&id(104)), log.lookup(&id(104)));
        assert_eq!(reloaded.lookup(&id(103)), None);
        assert_eq!(log.entries_after(Version { epoch: 3, v: 8 }).count(), 2);
        assert_eq!(log.next_version(2), Version { epoch: 3, v: 11 });
        assert_eq!(log.next_version(7), Version { epoch: 7, v: 11 });
    }

    #[test]
    fn a_shortened_limit_trims_a_step_per_change_and_keeps_every_request_id() {
        let store = MemStore::new(1 << 30);
        let c = CollectionId::new(1, 0);
        let mut t = Transaction::new();
        t.create_collection(c);
        store.apply_transaction(t).unwrap();
        let long = LogLimits {
            entries_max: 1000,
            dups_max: 1000,
        };
        let short = LogLimits {
            entries_max: 10,
            ..long
        };
        let mut log = PgLog::default();
        let n = 2 * TRIM_STEP as u64 + 50;
        for v in 1..=n {
            let mut t = Transaction::new();
            log.append(entry(v, v), long, c, &mut t);
            store.apply_transaction(t).unwrap();
        }
        assert_eq!(log.len() as u64, n);
        // The PG went clean: each change trims at most a step beyond one.
        let mut v = n;
        let mut lens = Vec::new();
        while log.len() > 10 {
            v += 1;
            let mut t = Transaction::new();
            log.append(entry(v, v), short, c, &mut t);
            store.apply_transaction(t).unwrap();
            lens.push(log.len());
        }
        assert_eq!(
            lens,
            vec![
                n as usize + 1 - TRIM_STEP,
                n as usize + 2 - 2 * TRIM_STEP,
                10
            ]
        );
        // Trimmed entries became dups: every request is still known, and so
        // after a reload.
        let reloaded = PgLog::load(&omap(&store, c)).unwrap();
        for r in 1..=v {
            assert_eq!(log.lookup(&id(r)).map(|x| x.0.v), Some(r), "{r}");
            assert_eq!(reloaded.lookup(&id(r)), log.lookup(&id(r)));
        }
        assert_eq!(reloaded.len(), 10);
        assert_eq!(reloaded.info, log.info);
    }

    /// The omap changes `append` adds: (keys set, keys removed).
    fn changes(t: &Transaction) -> (Vec<Bytes>, Vec<Bytes>) {
        let (mut set, mut rm) = (Vec::new(), Vec::new());
        for op in t.ops() {
            match op {
                shoal_objectstore::Op::OmapSetKeys(_, _, kv) => set.extend(kv.keys().cloned()),
                shoal_objectstore::Op::OmapRemoveKeys(_, _, keys) => {
                    rm.extend(keys.iter().cloned())
                }
                _ => {}
            }
        }
        (set, rm)
    }

    #[test]
    fn a_trimmed_entry_stays_in_place_as_a_dup_and_a_write_changes_three_keys() {
        let c = CollectionId::new(1, 0);
        let limits = LogLimits {
            entries_max: 4,
            dups_max: 3,
        };
        let mut log = PgLog::default();
        for v in 1..=7 {
            log.append(entry(v, 100 + v), limits, c, &mut Transaction::new());
        }
        // Full: 4 entries, 3 dups. The next write sets its entry and the
        // info and removes the oldest dup's key, which is its log key.
        let mut t = Transaction::new();
        log.append(entry(8, 108), limits, c, &mut t);
        let (set, rm) = changes(&t);
        assert_eq!(
            set,
            vec![
                Bytes::from_static(INFO_KEY),
                key(LOG_PREFIX, Version { epoch: 3, v: 8 })
            ]
        );
        assert_eq!(rm, vec![key(LOG_PREFIX, Version { epoch: 3, v: 1 })]);
        // An entry without a request id has nothing to keep: trimmed, its
        // key goes and no dup is dropped for it.
        let mut anon = entry(9, 0);
        anon.reqid = None;
        log.append(anon, limits, c, &mut Transaction::new());
        for v in 10..=12 {
            log.append(entry(v, 100 + v), limits, c, &mut Transaction::new());
        }
        // Appends entry `v`: the keys it removed and the dups after it.
        let mut append = |v: u64| {
            let mut t = Transaction::new();
            log.append(entry(v, 100 + v), limits, c, &mut t);
            let dups: Vec<u64> = log.dups().map(|d| d.version.v).collect();
            (changes(&t).1, dups)
        };
        let at = |v| key(LOG_PREFIX, Version { epoch: 3, v });
        assert_eq!(append(13), (vec![at(9)], vec![6, 7, 8]));
        assert_eq!(append(14), (vec![at(6)], vec![7, 8, 10]));
    }

    #[test]
    fn a_log_written_with_dup_keys_loads_and_trims_them() {
        // The layout before trimmed entries were kept in place: entries
        // 5..=8 under `log.`, the request ids of 2..=4 under `dup.`.
        let store = MemStore::new(1 << 30);
        let c = CollectionId::new(1, 0);
        let mut t = Transaction::new();
        t.create_collection(c);
        let mut keys = BTreeMap::new();
        let info = PgInfoData {
            last_update: Version { epoch: 3, v: 8 },
            log_tail: Version { epoch: 3, v: 4 },
            ..PgInfoData::default()
        };
        keys.insert(Bytes::from_static(INFO_KEY), Bytes::from(info.encode()));
        for v in 2..=4 {
            let e = entry(v, 100 + v);
            let d = Dup {
                version: e.version,
                reqid: e.reqid.clone().unwrap(),
                code: 0,
            };
            keys.insert(key(DUP_PREFIX, e.version), Bytes::from(d.encode()));
        }
        for v in 5..=8 {
            let e = entry(v, 100 + v);
            keys.insert(key(LOG_PREFIX, e.version), Bytes::from(e.encode()));
        }
        t.omap_set_keys(c, pg_meta_key(), keys);
        store.apply_transaction(t).unwrap();
        let mut log = PgLog::load(&omap(&store, c)).unwrap();
        assert_eq!(log.len(), 4);
        assert_eq!(
            log.dups().map(|d| d.version.v).collect::<Vec<_>>(),
            vec![2, 3, 4]
        );
        let limits = LogLimits {
            entries_max: 4,
            dups_max: 3,
        };
        // Two writes: entries 5 and 6 stay in place as dups; the old dup
        // keys of 2 and 3 go.
        for v in 9..=10 {
            let mut t = Transaction::new();
            log.append(entry(v, 100 + v), limits, c, &mut t);
            store.apply_transaction(t).unwrap();
        }
        let on_disk = omap(&store, c);
        assert!(!on_disk.contains_key(&key(DUP_PREFIX, Version { epoch: 3, v: 3 })));
        assert!(on_disk.contains_key(&key(DUP_PREFIX, Version { epoch: 3, v: 4 })));
        let reloaded = PgLog::load(&on_disk).unwrap();
        assert_eq!(
            reloaded.dups().map(|d| d.version.v).collect::<Vec<_>>(),
            vec![4, 5, 6]
        );
        assert_eq!(
            reloaded.entries().map(|e| e.version.v).collect::<Vec<_>>(),
            vec![7, 8, 9, 10]
        );
        assert!(reloaded.lookup(&id(104)).is_some() && reloaded.lookup(&id(105)).is_some());
        assert!(reloaded.lookup(&id(103)).is_none());
        assert_eq!(on_disk.len(), 1 + 1 + 2 + 4);
    }

    #[test]
    fn replacing_a_log_with_itself_writes_its_info_alone() {
        let store = MemStore::new(1 << 30);
        let c = CollectionId::new(1, 0);
        let mut t = Transaction::new();
        t.create_collection(c);
        let limits = LogLimits {
            entries_max: 4,
            dups_max: 3,
        };
        let mut log = PgLog::default();
        for v in 1..=9 {
            log.append(entry(v, 100 + v), limits, c, &mut t);
        }
        store.apply_transaction(t).unwrap();
        let same = |log: &PgLog| {
            let entries: Vec<LogEntry> = log.entries().cloned().collect();
            let dups: Vec<Dup> = log.dups().cloned().collect();
            (log.info, entries, dups)
        };
        // The first replace moves the dups kept in place (under their
        // entries' keys) to dup keys; nothing else changes.
        let (info, entries, dups) = same(&log);
        let mut t = Transaction::new();
        log.replace(info, entries.clone(), dups.clone(), limits, c, &mut t);
        let (set, rm) = changes(&t);
        let at = |p, v| key(p, Version { epoch: 3, v });
        assert_eq!(
            rm,
            vec![at(LOG_PREFIX, 3), at(LOG_PREFIX, 4), at(LOG_PREFIX, 5)]
        );
        assert_eq!(
            set,
            vec![
                at(DUP_PREFIX, 3),
                at(DUP_PREFIX, 4),
                at(DUP_PREFIX, 5),
                Bytes::from_static(INFO_KEY),
            ]
        );
        store.apply_transaction(t).unwrap();
        // Again: the info alone.
        let mut t = Transaction::new();
        log.replace(info, entries.clone(), dups.clone(), limits, c, &mut t);
        let (set, rm) = changes(&t);
        assert_eq!((set, rm), (vec![Bytes::from_static(INFO_KEY)], vec![]));
        store.apply_transaction(t).unwrap();
        let reloaded = PgLog::load(&omap(&store, c)).unwrap();
        assert_eq!(reloaded.entries().cloned().collect::<Vec<_>>(), entries);
        assert_eq!(reloaded.dups().cloned().collect::<Vec<_>>(), dups);
        // One entry differs (a divergent change replaced): that key alone.
        let mut changed = entries.clone();
        changed[3].code = 5;
        let mut t = Transaction::new();
        log.replace(info, changed.clone(), dups, limits, c, &mut t);
        let (set, rm) = changes(&t);
        assert_eq!(rm, Vec::<Bytes>::new());
        assert_eq!(set, vec![Bytes::from_static(INFO_KEY), at(LOG_PREFIX, 9)]);
        store.apply_transaction(t).unwrap();
        let reloaded = PgLog::load(&omap(&store, c)).unwrap();
        assert_eq!(reloaded.entries().cloned().collect::<Vec<_>>(), changed);
    }

    #[test]
    fn replace_swaps_the_log_and_merges_dups() {
        let store = MemStore::new(1 << 30);
        let c = CollectionId::new(1, 0);
        let mut t = Transaction::new();
        t.create_collection(c);
        store.apply_transaction(t).unwrap();
        let limits = LogLimits {
            entries_max: 2,
            dups_max: 10,
        };
        let mut log = PgLog::default();
        let mut t = Transaction::new();
        for v in 1..=3 {
            log.append(entry(v, v), limits, c, &mut t);
        }
        store.apply_transaction(t).unwrap();
        let auth = vec![entry(2, 50), entry(3, 51), entry(4, 52)];
        let info = PgInfoData {
            last_update: Version { epoch: 3, v: 4 },
            log_tail: Version { epoch: 3, v: 1 },
            ..PgInfoData::default()
        };
        // The authoritative member trimmed a request we never saw.
        let theirs = Dup {
            version: Version { epoch: 2, v: 0 },
            reqid: id(40),
            code: 0,
        };
        let mut t = Transaction::new();
        log.replace(info, auth.clone(), vec![theirs], limits, c, &mut t);
        store.apply_transaction(t).unwrap();
        let reloaded = PgLog::load(&omap(&store, c)).unwrap();
        assert_eq!(reloaded.entries().cloned().collect::<Vec<_>>(), auth);
        assert_eq!(reloaded.info, info);
        // Our dup of the trimmed entry 1 survives, theirs is added; entry
        // 2's old request id does not survive.
        assert!(reloaded.lookup(&id(1)).is_some());
        assert!(reloaded.lookup(&id(40)).is_some());
        assert!(reloaded.lookup(&id(2)).is_none());
        assert!(reloaded.lookup(&id(52)).is_some());
        assert_eq!(reloaded.dups().count(), 2);
        // At most dups_max are kept, the newest.
        let small = LogLimits {
            entries_max: 2,
            dups_max: 1,
        };
        let mut again = reloaded;
        let mut t = Transaction::new();
        again.replace(info, auth.clone(), Vec::new(), small, c, &mut t);
        store.apply_transaction(t).unwrap();
        let reloaded = PgLog::load(&omap(&store, c)).unwrap();
        assert_eq!(reloaded.dups().count(), 1);
        assert!(reloaded.lookup(&id(1)).is_some() && reloaded.lookup(&id(40)).is_none());
    }
}

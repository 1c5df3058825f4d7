//! `BlockStore`: the default on-disk object store.
//!
//! Data lives on one device (a preallocated file or a block device) in 4 KiB blocks
//! handed out by an extent allocator; block 0 holds a label. Metadata (collections,
//! object records with extent maps and per-block crc32c, xattrs, omap, free list,
//! deferred writes) lives in redb, and all of it is also held in memory: redb is the
//! durable log and cold index, never consulted on the read path.
//!
//! Write path (caller's thread, under the state lock): check the transaction, then large
//! or unallocated writes go copy-on-write to fresh blocks on the device, and small
//! overwrites of allocated blocks become deferred writes (their new contents visible to
//! reads through an overlay). The metadata changes form one batch, queued to the
//! committer. Durability (committer thread, `commit.rs`): every queued batch goes into
//! one record of the write-ahead journal, a ring at the start of the data device
//! (`journal.rs`), and one device sync makes the record and the batches' copy-on-write
//! data durable (group commit); that is all a write waits for. Metadata changes and
//! deferred blocks then wait in memory, merged, until a checkpoint on the write-back
//! thread writes the blocks in place, syncs, and commits the metadata to redb durably,
//! after which the records' space in the ring is reused. Blocks freed by a transaction
//! are reused only after it is durable and no earlier in-place write can
//! land on them, so the durable state never points at overwritten data.

mod alloc;
mod apply;
mod cache;
pub use cache::CacheStats;
mod codec;
mod commit;
mod crc;
mod deferred;
pub mod device;
mod extent;
pub mod fault;
pub mod fsck;
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod guard;
mod journal;
mod meta;
mod staged;
mod state;
mod store;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;

use self::alloc::FreeList;
use self::apply::State;
use self::commit::{Committer, Queued};
use self::device::{Device, FileDevice, MetaOnDevice};
pub use self::guard::LOCK_FILE;
use self::guard::{StoreFiles, StoreLock, catch_panic, panicked};
pub(crate) use self::meta::FORMAT_VERSION;
pub use self::meta::StoreIdentity;
pub(crate) use self::meta::read_format;
use self::meta::{ALL_TABLES, DEFERRED, FREE, OBJECTS, Onode, SUPER, me};
use self::staged::{Staged, StagedHandle};
use crate::error::{Error, Result};
use crate::types::{CollectionId, ObjectKey};

/// Size of a data block: the unit of allocation and of checksumming.
pub const BLOCK: usize = 4096;

/// Name of the data file inside a store directory (may be a symlink to a block device).
pub const DATA_FILE: &str = "block";
/// Name of the metadata file inside a store directory.
pub const META_FILE: &str = "meta.redb";

const LABEL_MAGIC: &[u8; 16] = b"SHOAL BLOCKSTORE";

/// Most transactions queued but not yet durable; `queue_transaction` waits beyond it.
const INFLIGHT_MAX: u64 = 1024;

/// Event counters of a running store.
#[derive(Debug, Default)]
pub struct Counters {
    /// Blocks whose crc32c did not match on read.
    pub checksum_errors: AtomicU64,
    /// Writes that went copy-on-write to new blocks.
    pub cow_writes: AtomicU64,
    /// Writes deferred through the metadata log.
    pub deferred_writes: AtomicU64,
    /// Metadata commits (each covering one or more transactions).
    pub group_commits: AtomicU64,
    /// Checkpoints finished (journal records written back to their places and redb).
    pub checkpoints: AtomicU64,
    /// Transactions queued.
    pub transactions: AtomicU64,
    /// Unlocked reads redone under the lock because blocks changed during their I/O.
    pub read_retries: AtomicU64,
}

/// Options of [`BlockStore::mkfs`].
#[derive(Debug, Clone)]
pub struct MkfsOptions {
    /// Size of the data file to create, in bytes (ignored for an existing block device).
    pub data_bytes: u64,
    /// Reserve the data file's space at mkfs (otherwise it stays sparse).
    pub preallocate: bool,
}

impl Default for MkfsOptions {
    fn default() -> Self {
        Self {
            data_bytes: 1 << 30,
            preallocate: false,
        }
    }
}

/// Options of [`BlockStore::open`].
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Try `O_DIRECT` for the data device.
    pub direct_io: bool,
    /// The owner the store must record (an OSD opening its own store); `None` accepts
    /// any store.
    pub identity: Option<StoreIdentity>,
    /// The most recently read data kept in memory, in bytes (0: none; see
    /// `cache.rs`).
    pub cache_bytes: u64,
}

/// [`OpenOptions::cache_bytes`]'s default.
pub const CACHE_BYTES_DEFAULT: u64 = 128 << 20;

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            direct_io: true,
            identity: None,
            cache_bytes: CACHE_BYTES_DEFAULT,
        }
    }
}

pub(crate) struct Shared {
    state: RwLock<State>,
    queue: Mutex<(Vec<Queued>, bool)>,
    queued: Condvar,
    /// The committer waits on `queued` (read and written under `queue`'s lock): a
    /// writer wakes it only then, sparing a futex call per transaction while it works.
    committer_waits: AtomicBool,
    poisoned: Mutex<Option<String>>,
    /// Transactions queued or being committed (bounded by `INFLIGHT_MAX`).
    inflight: Mutex<u64>,
    room: Condvar,
    /// Identity of the next queued batch.
    next_id: AtomicU64,
    pub(crate) dev: Arc<dyn Device>,
    pub(crate) db: redb::Database,
    pub(crate) counters: Counters,
    identity: Mutex<Option<StoreIdentity>>,
    /// Buffers of large reads, reused.
    pub(crate) read_bufs: Arc<device::BufPool>,
}

impl Shared {
    pub(crate) fn read_state(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn write_state(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn poison_reason(&self) -> Option<String> {
        self.poisoned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Record the first fatal error; returns the reason in force.
    pub(crate) fn poison(&self, e: &Error) -> String {
        let mut p = self.poisoned.lock().unwrap_or_else(PoisonError::into_inner);
        if p.is_none() {
            tracing::error!(error = %e, "object store poisoned: refusing further writes");
            *p = Some(e.to_string());
        }
        p.clone().unwrap_or_default()
    }

    /// Backpressure: wait until fewer than `INFLIGHT_MAX` transactions await their
    /// commit, then reserve a place (released by the committer or by `release`).
    fn reserve(&self) {
        let mut n = self.inflight.lock().unwrap_or_else(PoisonError::into_inner);
        while *n >= INFLIGHT_MAX && self.poison_reason().is_none() {
            n = self
                .room
                .wait_timeout(n, std::time::Duration::from_millis(100))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *n += 1;
    }

    pub(crate) fn release(&self, count: u64) {
        if count > 0 {
            let mut n = self.inflight.lock().unwrap_or_else(PoisonError::into_inner);
            *n = n.saturating_sub(count);
            self.room.notify_all();
        }
    }

    /// Queue a batch; returns its identity (for `mark_ready`).
    fn enqueue(&self, mut q: Queued) -> u64 {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        q.id = id;
        let ready = q.ready;
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        queue.0.push(q);
        let waits = self.committer_waits.load(Ordering::Relaxed);
        drop(queue);
        if ready && waits {
            self.queued.notify_one();
        }
        id
    }

    /// The data of queued batch `id` has landed: the committer may take it.
    fn mark_ready(&self, id: u64) {
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(e) = q.0.iter_mut().find(|e| e.id == id) {
            e.ready = true;
        }
        let waits = self.committer_waits.load(Ordering::Relaxed);
        drop(q);
        if waits {
            self.queued.notify_one();
        }
    }

    /// Wait for queued batches (or shutdown, or `wait` to pass); returns the ready ones
    /// and the shutdown flag. `gather`: once some are ready, wait on until this many are
    /// (the writers the last group acknowledged, coming back) or the instant passes.
    pub(crate) fn take_queued(
        &self,
        wait: Option<std::time::Duration>,
        gather: Option<(usize, std::time::Instant)>,
    ) -> (Vec<Queued>, bool) {
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let idle = |q: &(Vec<Queued>, bool)| !q.0.first().is_some_and(|e| e.ready) && !q.1;
        // Waits on `queued`, flagged so writers know to wake us.
        let wait_for = |q, d: Option<std::time::Duration>| {
            self.committer_waits.store(true, Ordering::Relaxed);
            let q = match d {
                None => self.queued.wait(q).unwrap_or_else(PoisonError::into_inner),
                Some(d) => {
                    self.queued
                        .wait_timeout(q, d)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
            self.committer_waits.store(false, Ordering::Relaxed);
            q
        };
        match wait {
            None => {
                while idle(&q) {
                    q = wait_for(q, None);
                }
            }
            Some(d) if idle(&q) => q = wait_for(q, Some(d)),
            Some(_) => {}
        }
        if let Some((want, until)) = gather {
            while !idle(&q) && q.0.iter().take_while(|e| e.ready).count() < want {
                let now = std::time::Instant::now();
                if now >= until {
                    break;
                }
                q = wait_for(q, Some(until - now));
            }
        }
        // Only the ready prefix: commit order is queue order.
        let n = q.0.iter().position(|e| !e.ready).unwrap_or(q.0.len());
        (q.0.drain(..n).collect(), q.1)
    }

    /// Nothing is queued.
    pub(crate) fn queue_is_empty(&self) -> bool {
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0
            .is_empty()
    }
}

/// The on-disk object store. See the module docs for the design.
pub struct BlockStore {
    shared: Arc<Shared>,
    committer: Option<JoinHandle<()>>,
    direct_io: bool,
    /// Held for the store's life (dropped after the committer has stopped).
    _lock: Option<StoreLock>,
}

impl std::fmt::Debug for BlockStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockStore")
            .field("direct_io", &self.direct_io)
            .finish()
    }
}

fn label(total_blocks: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK];
    b[..16].copy_from_slice(LABEL_MAGIC);
    b[16..24].copy_from_slice(&FORMAT_VERSION.to_be_bytes());
    b[24..32].copy_from_slice(&total_blocks.to_be_bytes());
    let crc = crc32c::crc32c(&b[..32]);
    b[32..36].copy_from_slice(&crc.to_be_bytes());
    b
}

/// The data device must be labelled for the same number of blocks as the metadata
/// records, and be at least that long. Returns the label's format version.
pub(crate) fn check_label(dev: &dyn Device, total_blocks: u64) -> Result<u64> {
    let len = dev
        .len()
        .map_err(|e| Error::io("sizing the data device", e))?;
    let label = guard::check_data_device(dev, len).map_err(Error::NotFormatted)?;
    if label.total_blocks != total_blocks {
        return Err(Error::NotFormatted(format!(
            "the data file's label records {} blocks, the metadata {total_blocks}: \
             they belong to different stores",
            label.total_blocks
        )));
    }
    Ok(label.version)
}

/// redb's page cache. The whole index lives in memory and reads never go to redb; only
/// checkpoints (and the load at open) read its pages, and the metadata file is read
/// through the kernel's page cache. redb's default (1 GiB) would keep every page the
/// open loaded resident for the store's life.
const REDB_CACHE_BYTES: usize = 32 << 20;

fn open_db_on(meta: Arc<dyn Device>) -> Result<redb::Database> {
    redb::Builder::new()
        .set_cache_size(REDB_CACHE_BYTES)
        .create_with_backend(MetaOnDevice(meta))
        .map_err(me("open metadata"))
}

/// Open redb on `meta` with every write staged in memory (see `staged.rs`).
fn open_db_staged(meta: Arc<dyn Device>) -> Result<(redb::Database, StagedHandle)> {
    let (backend, handle) =
        Staged::new(meta).map_err(|e| Error::io("sizing the metadata file", e))?;
    let db = redb::Builder::new()
        .set_cache_size(REDB_CACHE_BYTES)
        .create_with_backend(backend)
        .map_err(me("opening the metadata"))?;
    Ok((db, handle))
}

/// Open redb on the metadata file for reading only: nothing redb writes (recovery flag,
/// repair after a crash) reaches the file.
pub(crate) fn open_db_read_only(meta: &Path) -> Result<redb::Database> {
    let dev = FileDevice::open_read_only(meta)
        .map_err(|e| Error::damaged(meta, format!("cannot open the metadata file: {e}")))?;
    catch_panic(|| open_db_staged(Arc::new(dev)).map(|(db, _)| db))
        .map_err(|p| panicked(meta, p))?
        .map_err(Error::in_file(meta))
}

/// Names of the two devices, for errors.
#[derive(Debug, Clone)]
struct Names {
    data: PathBuf,
    meta: PathBuf,
}

impl BlockStore {
    /// Format a store directory: `PATH/block` (data) and `PATH/meta.redb` (metadata).
    pub fn mkfs(path: &Path, opts: &MkfsOptions) -> Result<()> {
        std::fs::create_dir_all(path).map_err(|e| Error::io("creating the store directory", e))?;
        let _lock = StoreLock::acquire(path, true)?;
        let data = path.join(DATA_FILE);
        let meta = path.join(META_FILE);
        if meta.exists() {
            return Err(Error::InvalidArgument(format!(
                "{} exists; refusing to format over it",
                meta.display()
            )));
        }
        FileDevice::create(&data, opts.data_bytes, opts.preallocate)
            .map_err(|e| Error::io("creating the data file", e))?;
        let dev =
            FileDevice::open(&data, false).map_err(|e| Error::io("opening the data file", e))?;
        let db = redb::Database::create(&meta).map_err(me("create metadata"))?;
        Self::mkfs_with(&dev, &db)?;
        // The new directory entries must be durable too.
        std::fs::File::open(path)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io("syncing the store directory", e))
    }

    /// Format on given devices (tests and tools).
    pub fn mkfs_on(data: Arc<dyn Device>, meta: Arc<dyn Device>) -> Result<()> {
        let db = open_db_on(meta)?;
        Self::mkfs_with(&*data, &db)
    }

    fn mkfs_with(dev: &dyn Device, db: &redb::Database) -> Result<()> {
        let len = dev
            .len()
            .map_err(|e| Error::io("sizing the data device", e))?;
        let total_blocks = len / BLOCK as u64;
        let journal_blocks = journal::blocks_for(total_blocks);
        if total_blocks < 2 + journal_blocks || journal_blocks < 1 {
            return Err(Error::InvalidArgument(format!(
                "data device of {len} bytes is too small"
            )));
        }
        dev.write_at(0, &label(total_blocks))
            .map_err(|e| Error::io("writing the label", e))?;
        dev.sync().map_err(|e| Error::io("syncing the label", e))?;
        let mut w = db.begin_write().map_err(me("begin mkfs"))?;
        w.set_durability(redb::Durability::Immediate);
        for t in ALL_TABLES {
            w.open_table(t).map_err(me("create table"))?;
        }
        {
            let mut s = w.open_table(SUPER).map_err(me("open super"))?;
            s.insert(&b"format"[..], &FORMAT_VERSION.to_be_bytes()[..])
                .map_err(me("write super"))?;
            s.insert(&b"total_blocks"[..], &total_blocks.to_be_bytes()[..])
                .map_err(me("write super"))?;
            for (k, v) in [
                (journal::KEY_BLOCKS, journal_blocks),
                (journal::KEY_THROUGH, 0),
                (journal::KEY_APPLIED, 0),
            ] {
                s.insert(k.as_bytes(), &v.to_be_bytes()[..])
                    .map_err(me("write super"))?;
            }
            let mut f = w.open_table(FREE).map_err(me("open free"))?;
            let first = 1 + journal_blocks;
            f.insert(
                &first.to_be_bytes()[..],
                &(total_blocks - first).to_be_bytes()[..],
            )
            .map_err(me("write free"))?;
        }
        w.commit().map_err(me("commit mkfs"))
    }

    /// Open a formatted store directory. Everything is checked before anything is
    /// written: a missing, short, damaged or foreign file gives [`Error::Damaged`] naming
    /// it and is left as it was; a store another process holds gives [`Error::Locked`].
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<Self> {
        let lock = StoreLock::acquire(path, true)?;
        let files = StoreFiles::of(path);
        files.check()?;
        let dev = FileDevice::open(&files.data, opts.direct_io)
            .map_err(|e| Error::damaged(&files.data, format!("cannot open it: {e}")))?;
        let meta = FileDevice::open(&files.meta, false)
            .map_err(|e| Error::damaged(&files.meta, format!("cannot open it: {e}")))?;
        let direct = dev.is_direct();
        let names = Names {
            data: files.data,
            meta: files.meta,
        };
        let mut s = Self::open_checked(Arc::new(dev), Arc::new(meta), opts, &names)?;
        s.direct_io = direct;
        s._lock = Some(lock);
        Ok(s)
    }

    /// Open a store on given devices (tests and tools).
    pub fn open_on(data: Arc<dyn Device>, meta: Arc<dyn Device>) -> Result<Self> {
        let names = Names {
            data: PathBuf::from("data device"),
            meta: PathBuf::from("metadata device"),
        };
        Self::open_checked(data, meta, &OpenOptions::default(), &names)
    }

    /// Open with metadata writes staged, check everything, and only then let redb's
    /// writes reach the file. A panic of redb on a damaged file is caught here.
    fn open_checked(
        dev: Arc<dyn Device>,
        meta: Arc<dyn Device>,
        opts: &OpenOptions,
        names: &Names,
    ) -> Result<Self> {
        let (db, handle, replayed, loaded) = catch_panic(|| {
            let (db, handle) = open_db_staged(meta).map_err(Error::in_file(&names.meta))?;
            // The journal's records go into redb first (staged: nothing reaches the file
            // until every check below has passed).
            let replayed =
                journal::replay(&*dev, &db, &names.data).map_err(Error::in_file(&names.meta))?;
            // A store of an older format is converted once its journal is replayed.
            if meta::upgrade(&db).map_err(Error::in_file(&names.meta))? {
                tracing::info!(
                    format = FORMAT_VERSION,
                    "object store: converted to this build's format"
                );
            }
            let loaded = meta::load(&db).map_err(Error::in_file(&names.meta))?;
            Ok::<_, Error>((db, handle, replayed, loaded))
        })
        .map_err(|p| panicked(&names.meta, p))??;
        if let Some(want) = &opts.identity {
            match &loaded.identity {
                Some(have) if have == want => {}
                Some(have) => {
                    return Err(Error::damaged(
                        &names.meta,
                        format!("this store belongs to {have}, not to {want}"),
                    ));
                }
                None => {
                    return Err(Error::damaged(
                        &names.meta,
                        format!("this store records no owner; {want} expects its own store"),
                    ));
                }
            }
        }
        let dev_bytes = dev
            .len()
            .map_err(|e| Error::damaged(&names.data, format!("cannot size it: {e}")))?;
        if dev_bytes / (BLOCK as u64) < loaded.total_blocks {
            return Err(Error::damaged(
                &names.data,
                format!(
                    "the data file is {dev_bytes} bytes, the metadata records {} blocks of {BLOCK}",
                    loaded.total_blocks
                ),
            ));
        }
        let label_version =
            check_label(&*dev, loaded.total_blocks).map_err(Error::in_file(&names.data))?;
        // The replayed deferred blocks go in place and are durable before the metadata
        // that retires their records does.
        if !replayed.blocks.is_empty() {
            for (pb, data) in &replayed.blocks {
                dev.write_at(pb * BLOCK as u64, data)
                    .map_err(|e| Error::io("replaying the journal's deferred writes", e))?;
            }
            dev.sync()
                .map_err(|e| Error::io("syncing the journal's deferred writes", e))?;
        }
        if replayed.records > 0 {
            tracing::info!(records = replayed.records, "object store: journal replayed");
        }
        handle
            .commit()
            .map_err(|e| Error::io("writing the metadata staged at open", e))?;
        if label_version < FORMAT_VERSION {
            // After the format record: a crash between the two leaves a store this build
            // opens (and converts the label of) again.
            dev.write_at(0, &label(loaded.total_blocks))
                .map_err(|e| Error::io("writing the converted label", e))?;
            dev.sync()
                .map_err(|e| Error::io("syncing the converted label", e))?;
        }
        Self::start(dev, db, loaded, replayed.next_seq, opts.cache_bytes)
    }

    fn start(
        dev: Arc<dyn Device>,
        db: redb::Database,
        loaded: meta::Loaded,
        next_seq: u64,
        cache_bytes: u64,
    ) -> Result<Self> {
        replay_deferred(&*dev, &db, &loaded.deferred)?;
        let free = FreeList::from_runs(loaded.free.iter().copied())
            .ok_or_else(|| Error::Corrupt("persisted free list overlaps itself".into()))?;
        let next_deferred = loaded.deferred.iter().map(|d| d.0 + 1).max().unwrap_or(0);
        let state = State {
            colls: loaded.colls,
            alloc: free.clone(),
            overlay: deferred::Overlay::starting_at(next_deferred),
            reuse_gen: 0,
            total_blocks: loaded.total_blocks,
            journal_blocks: loaded.journal.blocks,
            cache: Arc::new(cache::BlockCache::new(cache_bytes)),
        };
        let shared = Arc::new(Shared {
            state: RwLock::new(state),
            queue: Mutex::new((Vec::new(), false)),
            queued: Condvar::new(),
            committer_waits: AtomicBool::new(false),
            poisoned: Mutex::new(None),
            inflight: Mutex::new(0),
            room: Condvar::new(),
            next_id: AtomicU64::new(0),
            dev,
            db,
            counters: Counters::default(),
            identity: Mutex::new(loaded.identity),
            read_bufs: Arc::default(),
        });
        let committer = Committer::new(shared.clone(), free, loaded.journal, next_seq)?;
        let handle = std::thread::Builder::new()
            .name("blockstore-commit".into())
            .spawn(move || committer.run())
            .map_err(|e| Error::io("starting the commit thread", e))?;
        Ok(Self {
            shared,
            committer: Some(handle),
            direct_io: false,
            _lock: None,
        })
    }

    /// What the data cache holds and has served.
    pub fn cache_stats(&self) -> CacheStats {
        self.shared.read_state().cache.stats()
    }

    /// The owner the store records, if any.
    pub fn identity(&self) -> Option<StoreIdentity> {
        self.shared
            .identity
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Record the store's owner (once, by `shoal osd mkfs`). Refuses to change an owner
    /// already recorded.
    pub fn set_identity(&self, id: &StoreIdentity) -> Result<()> {
        let mut have = self
            .shared
            .identity
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match &*have {
            Some(h) if h == id => Ok(()),
            Some(h) => Err(Error::InvalidArgument(format!(
                "the store already belongs to {h}"
            ))),
            None => {
                meta::write_identity(&self.shared.db, id)?;
                *have = Some(id.clone());
                Ok(())
            }
        }
    }

    /// Event counters.
    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Whether data I/O bypasses the page cache.
    pub fn direct_io(&self) -> bool {
        self.direct_io
    }

    /// The poison reason, if a write or sync failed.
    pub fn poisoned(&self) -> Option<String> {
        self.shared.poison_reason()
    }

    fn with_onode<T>(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        f: impl FnOnce(&State, &Onode) -> Result<T>,
    ) -> Result<T> {
        let st = self.shared.read_state();
        let objs = st.colls.get(c).ok_or(Error::CollectionNotFound(*c))?;
        let on = objs
            .get(o)
            .ok_or_else(|| Error::ObjectNotFound(*c, o.clone()))?;
        f(&st, on)
    }
}

/// Sum of the logical sizes of all objects, from the metadata.
pub(crate) fn stored_bytes(db: &redb::Database) -> Result<u64> {
    use redb::ReadableTable;
    let txn = db.begin_read().map_err(me("begin read"))?;
    let mut sum = 0u64;
    for row in txn
        .open_table(OBJECTS)
        .map_err(me("open objects"))?
        .iter()
        .map_err(me("scan objects"))?
    {
        let (_, v) = row.map_err(me("scan objects"))?;
        sum = sum.saturating_add(codec::ObjectRecord::decode(v.value())?.size);
    }
    Ok(sum)
}

/// Check a store on given devices (tests).
pub fn fsck_on(
    data: Arc<dyn Device>,
    meta: Arc<dyn Device>,
    deep: bool,
) -> Result<fsck::FsckReport> {
    let names = PathBuf::from("metadata device");
    catch_panic(|| {
        let (db, _) = open_db_staged(meta)?;
        fsck::fsck(&*data, Path::new("data device"), &db, deep)
    })
    .map_err(|p| panicked(&names, p))?
}

/// Write every deferred record in place (idempotent), sync, then drop the records.
fn replay_deferred(
    dev: &dyn Device,
    db: &redb::Database,
    deferred: &[(u64, u64, Vec<u8>)],
) -> Result<()> {
    if deferred.is_empty() {
        return Ok(());
    }
    for (_, pb, data) in deferred {
        dev.write_at(pb * BLOCK as u64, data)
            .map_err(|e| Error::io("replaying a deferred write", e))?;
    }
    dev.sync()
        .map_err(|e| Error::io("syncing replayed writes", e))?;
    let mut w = db.begin_write().map_err(me("begin replay"))?;
    w.set_durability(redb::Durability::Immediate);
    {
        let mut t = w.open_table(DEFERRED).map_err(me("open deferred"))?;
        for (seq, _, _) in deferred {
            t.remove(&seq.to_be_bytes()[..])
                .map_err(me("delete deferred"))?;
        }
    }
    w.commit().map_err(me("commit replay"))
}

impl Drop for BlockStore {
    fn drop(&mut self) {
        self.shared
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .1 = true;
        self.shared.queued.notify_all();
        if let Some(h) = self.committer.take() {
            let _ = h.join();
        }
    }
}

/// The directory paths of a store.
pub fn store_paths(path: &Path) -> (PathBuf, PathBuf) {
    (path.join(DATA_FILE), path.join(META_FILE))
}

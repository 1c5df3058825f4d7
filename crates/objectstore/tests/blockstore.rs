//! The conformance suite and BlockStore-specific behaviour on real files.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use shoal_objectstore::block::MkfsOptions;
use shoal_objectstore::block::fault::{FaultController, MemDevice};
use shoal_objectstore::block::{self, OpenOptions};
use shoal_objectstore::model::Model;
use shoal_objectstore::{
    BlockStore, CollectionId, Error, ObjectKey, ObjectStore, Transaction, testsuite, tool,
};

/// A fresh directory under the target tmp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!("shoal-os-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn new_store(dir: &TempDir, mb: u64) -> BlockStore {
    BlockStore::mkfs(
        &dir.0,
        &MkfsOptions {
            data_bytes: mb << 20,
            ..Default::default()
        },
    )
    .unwrap();
    BlockStore::open(&dir.0, &OpenOptions::default()).unwrap()
}

#[test]
fn blockstore_conforms() {
    let mut dirs = Vec::new();
    testsuite::run_all(&mut || {
        let d = TempDir::new("conf");
        let s = new_store(&d, 64);
        dirs.push(d);
        Box::new(s) as Box<dyn ObjectStore>
    });
}

#[test]
fn model_check_survives_reopen_and_fsck_is_clean() {
    let d = TempDir::new("reopen");
    let mut model = Model::default();
    let mut g = shoal_objectstore::model::TxnGen::new(99);
    for round in 0..4 {
        let s = BlockStore::open(&d.0, &OpenOptions::default()).or_else(|_| {
            BlockStore::mkfs(
                &d.0,
                &MkfsOptions {
                    data_bytes: 64 << 20,
                    ..Default::default()
                },
            )?;
            BlockStore::open(&d.0, &OpenOptions::default())
        });
        let s = s.unwrap();
        testsuite::assert_matches_model(&s, &model, &format!("after reopen {round}"));
        for _ in 0..150 {
            let t = g.txn();
            let ok = model.apply(&t);
            assert_eq!(s.queue_transaction(t).is_ok(), ok);
        }
        s.flush().unwrap();
        testsuite::assert_matches_model(&s, &model, &format!("round {round}"));
        drop(s);
        let report = tool::fsck(&d.0, true).unwrap();
        assert!(report.is_clean(), "{report}");
    }
    let st = tool::stat(&d.0).unwrap();
    assert!(st.objects > 0);
    println!("{st}");
}

#[test]
fn corrupted_block_is_an_error_never_data() {
    let d = TempDir::new("crc");
    let c = CollectionId::new(1, 1);
    let o = ObjectKey::new(5, "victim");
    {
        let s = new_store(&d, 16);
        let mut t = Transaction::new();
        t.create_collection(c)
            .write(c, o.clone(), 0, Bytes::from(vec![0xabu8; 12 * 4096]));
        s.apply_transaction(t).unwrap();
    }
    // (12 blocks: copy-on-write, not carried by the journal, so the data is
    // on the device once.) Flip one byte in the second data block: find it
    // by content.
    let data_path = d.0.join(block::DATA_FILE);
    let mut img = std::fs::read(&data_path).unwrap();
    let pos = img
        .windows(4096)
        .position(|w| w.iter().all(|b| *b == 0xab))
        .unwrap()
        + 4096
        + 100;
    img[pos] ^= 0xff;
    std::fs::write(&data_path, &img).unwrap();
    let report = tool::fsck(&d.0, true).unwrap();
    assert_eq!(report.errors.len(), 1, "{report}");
    assert!(
        tool::fsck(&d.0, false).unwrap().is_clean(),
        "shallow fsck does not read data"
    );
    let s = BlockStore::open(&d.0, &OpenOptions::default()).unwrap();
    assert!(matches!(
        s.read(&c, &o, 4096, 10),
        Err(Error::Checksum { .. })
    ));
    assert!(matches!(
        s.read(&c, &o, 0, u64::MAX),
        Err(Error::Checksum { .. })
    ));
    assert_eq!(
        s.read(&c, &o, 0, 4096).unwrap(),
        Bytes::from(vec![0xabu8; 4096]),
        "good blocks still read"
    );
    assert_eq!(
        s.counters()
            .checksum_errors
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
}

#[test]
fn small_overwrites_are_deferred_and_large_writes_cow() {
    let d = TempDir::new("defer");
    let s = new_store(&d, 16);
    let c = CollectionId::new(1, 1);
    let o = ObjectKey::new(5, "obj");
    let mut t = Transaction::new();
    t.create_collection(c)
        .write(c, o.clone(), 0, Bytes::from(vec![1u8; 256 * 1024]));
    s.apply_transaction(t).unwrap();
    let before = s.statfs().unwrap().free_bytes;
    let mut t = Transaction::new();
    t.write(c, o.clone(), 5000, Bytes::from_static(b"small"));
    s.apply_transaction(t).unwrap();
    let counters = s.counters();
    assert_eq!(
        counters
            .deferred_writes
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert_eq!(
        s.statfs().unwrap().free_bytes,
        before,
        "deferred writes allocate nothing"
    );
    assert_eq!(
        s.read(&c, &o, 4999, 7).unwrap(),
        Bytes::from_static(b"\x01small\x01")
    );
    drop(s);
    let s = BlockStore::open(&d.0, &OpenOptions::default()).unwrap();
    assert_eq!(
        s.read(&c, &o, 4999, 7).unwrap(),
        Bytes::from_static(b"\x01small\x01")
    );
}

#[test]
fn group_commit_shares_syncs() {
    let d = TempDir::new("group");
    let s = Arc::new(new_store(&d, 32));
    let c = CollectionId::new(2, 0);
    let mut t = Transaction::new();
    t.create_collection(c);
    s.apply_transaction(t).unwrap();
    let before = s
        .counters()
        .group_commits
        .load(std::sync::atomic::Ordering::Relaxed);
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let s = s.clone();
            std::thread::spawn(move || {
                for j in 0..25 {
                    let mut t = Transaction::new();
                    t.write(
                        c,
                        ObjectKey::new(i, format!("o{i}-{j}")),
                        0,
                        Bytes::from(vec![i as u8; 100]),
                    );
                    s.apply_transaction(t).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let commits = s
        .counters()
        .group_commits
        .load(std::sync::atomic::Ordering::Relaxed)
        - before;
    println!("200 transactions from 8 threads took {commits} commits");
    assert!(
        commits < 200,
        "concurrent transactions must share commits ({commits})"
    );
}

#[test]
fn failed_sync_poisons_and_is_not_retried() {
    let ctl = FaultController::new(0, 1);
    let data = MemDevice::new(vec![0u8; 4 << 20], ctl.clone());
    let meta = MemDevice::new(Vec::new(), ctl.clone());
    BlockStore::mkfs_on(data.clone(), meta.clone()).unwrap();
    let s = BlockStore::open_on(data.clone(), meta.clone()).unwrap();
    let c = CollectionId::new(1, 0);
    let mut t = Transaction::new();
    t.create_collection(c);
    s.apply_transaction(t).unwrap();
    ctl.stop();
    let mut t = Transaction::new();
    t.touch(c, ObjectKey::new(1, "x"));
    let ticket = s.queue_transaction(t).unwrap();
    assert!(matches!(ticket.wait(), Err(Error::Poisoned(_))));
    let mut t = Transaction::new();
    t.touch(c, ObjectKey::new(1, "y"));
    let err = s.queue_transaction(t).unwrap_err();
    assert!(matches!(err, Error::Poisoned(_)), "{err}");
    assert!(err.to_string().contains("poisoned"));
    assert!(s.list_collections().is_ok(), "reads still work");
}

#[test]
fn mkfs_refuses_existing_store_and_stat_reports() {
    let d = TempDir::new("mkfs");
    let st = tool::mkfs(
        &d.0,
        &MkfsOptions {
            data_bytes: 8 << 20,
            ..Default::default()
        },
    )
    .unwrap();
    // All but the label and the journal (1/32 of the device).
    assert_eq!(st.capacity_bytes, (8 << 20) - 4096 - (8 << 20) / 32);
    assert_eq!(st.free_bytes, st.capacity_bytes);
    assert!(
        tool::mkfs(
            &d.0,
            &MkfsOptions {
                data_bytes: 8 << 20,
                ..Default::default()
            }
        )
        .is_err()
    );
    assert!(tool::fsck(&d.0, true).unwrap().is_clean());
    assert!(matches!(
        tool::stat(&d.0.join("nope")),
        Err(Error::Damaged { .. })
    ));
}

#[test]
fn model_check_many_seeds_on_memdevice() {
    let seeds: u64 = std::env::var("SHOAL_MODEL_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    for seed in 0..seeds {
        let ctl = FaultController::new(0, seed);
        let data = MemDevice::new(vec![0u8; 16 << 20], ctl.clone());
        let meta = MemDevice::new(Vec::new(), ctl.clone());
        BlockStore::mkfs_on(data.clone(), meta.clone()).unwrap();
        let s = BlockStore::open_on(data, meta).unwrap();
        let mut g = shoal_objectstore::model::TxnGen::new(seed);
        g.write_bytes_max = 96 * 1024;
        g.offset_max = 64 * 1024;
        let mut model = Model::default();
        for i in 0..120 {
            let t = g.txn();
            let ok = model.apply(&t);
            assert_eq!(
                s.queue_transaction(t.clone()).is_ok(),
                ok,
                "seed {seed} txn {i}"
            );
            if let Err(e) = testsuite::compare_with_model(&s, &model) {
                panic!("seed {seed} txn {i}: {e}\n{t:#?}");
            }
        }
    }
}

#[test]
fn no_space_refuses_whole_transaction_without_poison() {
    let d = TempDir::new("full");
    BlockStore::mkfs(
        &d.0,
        &MkfsOptions {
            data_bytes: 1 << 20,
            ..Default::default()
        },
    )
    .unwrap();
    let s = BlockStore::open(&d.0, &OpenOptions::default()).unwrap();
    println!("direct I/O on {}: {}", d.0.display(), s.direct_io());
    let c = CollectionId::new(1, 1);
    let mut t = Transaction::new();
    t.create_collection(c).write(
        c,
        ObjectKey::new(1, "a"),
        0,
        Bytes::from(vec![1u8; 512 * 1024]),
    );
    s.apply_transaction(t).unwrap();
    let mut t = Transaction::new();
    t.touch(c, ObjectKey::new(1, "b")).write(
        c,
        ObjectKey::new(1, "c"),
        0,
        Bytes::from(vec![2u8; 600 * 1024]),
    );
    assert!(matches!(s.queue_transaction(t), Err(Error::NoSpace { .. })));
    assert!(!s.exists(&c, &ObjectKey::new(1, "b")).unwrap());
    assert!(s.poisoned().is_none());
    let mut t = Transaction::new();
    t.remove(c, ObjectKey::new(1, "a"));
    s.apply_transaction(t).unwrap();
    // Space freed by a durable transaction is reusable.
    let mut t = Transaction::new();
    t.write(
        c,
        ObjectKey::new(1, "c"),
        0,
        Bytes::from(vec![2u8; 900 * 1024]),
    );
    s.apply_transaction(t).unwrap();
    drop(s);
    assert!(tool::fsck(&d.0, true).unwrap().is_clean());
}

#[test]
fn works_on_tmpfs_with_or_without_direct_io() {
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        return;
    }
    let d = TempDir(shm.join(format!("shoal-os-shm-{}", std::process::id())));
    let s = new_store(&d, 4);
    // tmpfs refused O_DIRECT before Linux 6.6 (the store then falls back to buffered
    // I/O); newer kernels accept it. Either way the store must work.
    println!("direct I/O on tmpfs: {}", s.direct_io());
    let c = CollectionId::new(1, 1);
    let mut t = Transaction::new();
    t.create_collection(c)
        .write(c, ObjectKey::new(1, "a"), 3, Bytes::from_static(b"abc"));
    s.apply_transaction(t).unwrap();
    assert_eq!(
        s.read(&c, &ObjectKey::new(1, "a"), 0, 6).unwrap(),
        Bytes::from_static(b"\0\0\0abc")
    );
}

#[test]
fn queueing_far_ahead_of_commits_waits_instead_of_growing() {
    let d = TempDir::new("backpressure");
    let s = new_store(&d, 16);
    let c = CollectionId::new(1, 1);
    let mut t = Transaction::new();
    t.create_collection(c);
    s.apply_transaction(t).unwrap();
    // More than the in-flight bound (1024), queued from one thread without waiting.
    let tickets: Vec<_> = (0..3000u32)
        .map(|i| {
            let mut t = Transaction::new();
            t.set_xattr(
                c,
                ObjectKey::new(i % 7, "x"),
                "n",
                Bytes::from(i.to_be_bytes().to_vec()),
            );
            s.queue_transaction(t).unwrap()
        })
        .collect();
    for t in tickets {
        t.wait().unwrap();
    }
    assert_eq!(
        s.getxattr(&c, &ObjectKey::new(2999 % 7, "x"), "n").unwrap(),
        Some(Bytes::from(2999u32.to_be_bytes().to_vec()))
    );
}

#[test]
fn hostile_metadata_is_reported_never_a_panic() {
    use redb::TableDefinition;
    const OBJECTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("objects");
    const FREE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("free");
    let d = TempDir::new("hostile");
    let c = CollectionId::new(1, 1);
    {
        let s = new_store(&d, 4);
        let mut t = Transaction::new();
        t.create_collection(c)
            .write(c, ObjectKey::new(1, "a"), 0, Bytes::from(vec![7u8; 10_000]));
        s.apply_transaction(t).unwrap();
    }
    let meta = d.0.join(block::META_FILE);
    let mut key = c.to_bytes().to_vec();
    key.extend_from_slice(&ObjectKey::new(1, "a").to_bytes());
    let good: Vec<u8> = {
        let db = redb::Database::open(&meta).unwrap();
        let r = db.begin_read().unwrap();
        let t = r.open_table(OBJECTS).unwrap();
        t.get(&key[..]).unwrap().unwrap().value().to_vec()
    };
    let mut rng = shoal_objectstore::model::Rng::new(3);
    for round in 0..60 {
        let mut bad = good.clone();
        // Random corruption, biased to the size and the first extent's fields.
        for _ in 0..1 + rng.below(3) {
            let i = if rng.one_in(2) {
                1 + rng.below(40) as usize
            } else {
                rng.below(bad.len() as u64) as usize
            };
            if i < bad.len() {
                bad[i] = rng.next_u64() as u8;
            }
        }
        {
            let db = redb::Database::open(&meta).unwrap();
            let w = db.begin_write().unwrap();
            w.open_table(OBJECTS)
                .unwrap()
                .insert(&key[..], &bad[..])
                .unwrap();
            if round % 10 == 0 {
                let k = (u64::MAX - 3).to_be_bytes();
                w.open_table(FREE)
                    .unwrap()
                    .insert(&k[..], &u64::MAX.to_be_bytes()[..])
                    .unwrap();
            }
            w.commit().unwrap();
        }
        // Either outcome is fine; a panic is not.
        let report = tool::fsck(&d.0, true).unwrap();
        let _ = tool::stat(&d.0);
        if let Ok(s) = BlockStore::open(&d.0, &OpenOptions::default()) {
            let _ = s.read(&c, &ObjectKey::new(1, "a"), 0, u64::MAX);
        }
        if bad != good {
            let _ = report.is_clean();
        }
        let db = redb::Database::open(&meta).unwrap();
        let w = db.begin_write().unwrap();
        w.open_table(OBJECTS)
            .unwrap()
            .insert(&key[..], &good[..])
            .unwrap();
        w.open_table(FREE)
            .unwrap()
            .remove(&(u64::MAX - 3).to_be_bytes()[..])
            .unwrap();
        w.commit().unwrap();
    }
    assert!(tool::fsck(&d.0, true).unwrap().is_clean());
}

#[test]
fn concurrent_writers_and_readers_match_their_models_after_reopen() {
    let d = TempDir::new("concurrent");
    let s = Arc::new(new_store(&d, 128));
    let writers: Vec<_> = (0..4u64)
        .map(|w| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut g = shoal_objectstore::model::TxnGen::new(1000 + w);
                g.pool = 10 + w;
                let mut model = Model::default();
                let mut tickets = Vec::new();
                for i in 0..150 {
                    let t = g.txn();
                    let ok = model.apply(&t);
                    match s.queue_transaction(t) {
                        Ok(ticket) => {
                            assert!(ok, "writer {w} txn {i}");
                            tickets.push(ticket);
                        }
                        Err(e) => assert!(!ok, "writer {w} txn {i}: {e}"),
                    }
                    if i % 10 == 0 {
                        let r = testsuite::compare_pools_with_model(&*s, &model, |p| p == 10 + w);
                        assert!(r.is_ok(), "writer {w} txn {i}: {r:?}");
                    }
                }
                for t in tickets {
                    t.wait().unwrap();
                }
                model
            })
        })
        .collect();
    let models: Vec<Model> = writers.into_iter().map(|h| h.join().unwrap()).collect();
    let objects: usize = models
        .iter()
        .flat_map(|m| m.colls.values())
        .map(|o| o.len())
        .sum();
    assert!(
        objects >= 8,
        "the writers built something ({objects} objects)"
    );
    drop(Arc::try_unwrap(s).unwrap());
    assert!(tool::fsck(&d.0, true).unwrap().is_clean());
    let s = BlockStore::open(&d.0, &OpenOptions::default()).unwrap();
    for (w, m) in models.iter().enumerate() {
        let r = testsuite::compare_pools_with_model(&s, m, |p| p == 10 + w as u64);
        assert!(r.is_ok(), "writer {w} after reopen: {r:?}");
    }
}

#[test]
fn unlocked_reads_race_block_reuse_without_false_checksum_errors() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let d = TempDir::new("race");
    let s = Arc::new(new_store(&d, 32));
    let c = CollectionId::new(3, 3);
    let mut t = Transaction::new();
    t.create_collection(c);
    s.apply_transaction(t).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let reads_done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let obj = |i: u64| ObjectKey::new(i as u32, format!("r{i}"));
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let (s, stop, writes) = (s.clone(), stop.clone(), writes.clone());
            std::thread::spawn(move || {
                let mut rng = shoal_objectstore::model::Rng::new(w);
                while !stop.load(Ordering::Relaxed) {
                    let o = obj(w * 4 + rng.below(4));
                    let v = rng.next_u64() as u8;
                    let mut t = Transaction::new();
                    match rng.below(3) {
                        // Whole object, copy-on-write: frees the old blocks.
                        0 => t.write(c, o, 0, Bytes::from(vec![v; 16 * 4096])),
                        // One block: deferred when allocated.
                        1 => t.write(c, o, rng.below(16) * 4096, Bytes::from(vec![v; 4096])),
                        _ => t.truncate(c, o.clone(), 0).remove(c, o),
                    };
                    s.apply_transaction(t).unwrap();
                    writes.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2u64)
        .map(|r| {
            let (s, stop, done) = (s.clone(), stop.clone(), reads_done.clone());
            std::thread::spawn(move || {
                let mut rng = shoal_objectstore::model::Rng::new(100 + r);
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    match s.read(&c, &obj(rng.below(8)), 0, u64::MAX) {
                        Ok(data) => {
                            for blk in data.chunks(4096) {
                                assert!(
                                    blk.iter().all(|b| *b == blk[0]),
                                    "a block mixes two writes"
                                );
                            }
                            reads += 1;
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(Error::ObjectNotFound(..)) => {}
                        Err(e) => panic!("read failed: {e}"),
                    }
                }
                reads
            })
        })
        .collect();
    // Run for an amount of work, not of time: a loaded machine only makes
    // the test slower. The deadline only guards against a hang.
    const WORK: u64 = 2000;
    let hang_guard = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while reads_done.load(Ordering::Relaxed) < WORK || writes.load(Ordering::Relaxed) < WORK {
        assert!(
            std::time::Instant::now() < hang_guard,
            "no progress: {} reads, {} writes",
            reads_done.load(Ordering::Relaxed),
            writes.load(Ordering::Relaxed)
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(reads >= WORK);
    assert_eq!(s.counters().checksum_errors.load(Ordering::Relaxed), 0);
    println!(
        "{reads} reads, {} redone under the lock after a block changed",
        s.counters().read_retries.load(Ordering::Relaxed)
    );
}

/// A device that holds the first read after `stall` is set, or the first write
/// of at least `write_min` bytes after `stall_write` is set, until the test
/// releases it (to hold an I/O open across commits). Later I/O passes, so
/// nothing else can wait on the held one.
#[derive(Debug)]
struct Stalling {
    inner: Arc<MemDevice>,
    stall: std::sync::atomic::AtomicBool,
    stall_write: std::sync::atomic::AtomicBool,
    write_min: usize,
    /// (an I/O is held, the test released it)
    held: std::sync::Mutex<(bool, bool)>,
    changed: std::sync::Condvar,
}

impl Stalling {
    fn new(inner: Arc<MemDevice>, write_min: usize) -> Self {
        Stalling {
            inner,
            stall: false.into(),
            stall_write: false.into(),
            write_min,
            held: Default::default(),
            changed: Default::default(),
        }
    }

    /// Waits until an I/O is held.
    fn wait_held(&self) {
        let g = self.held.lock().unwrap();
        drop(self.changed.wait_while(g, |(held, _)| !*held).unwrap());
    }

    fn release(&self) {
        self.held.lock().unwrap().1 = true;
        self.changed.notify_all();
    }

    /// Holds the calling I/O until the test releases it.
    fn hold(&self) {
        let mut g = self.held.lock().unwrap();
        g.0 = true;
        self.changed.notify_all();
        drop(
            self.changed
                .wait_while(g, |(_, released)| !*released)
                .unwrap(),
        );
    }
}

impl block::device::Device for Stalling {
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        if self.stall.swap(false, std::sync::atomic::Ordering::SeqCst) {
            self.hold();
        }
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        if buf.len() >= self.write_min
            && self
                .stall_write
                .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            self.hold();
        }
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> std::io::Result<()> {
        self.inner.sync()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
}

#[test]
fn read_racing_block_reuse_is_redone_not_reported_as_corruption() {
    use std::sync::atomic::Ordering;
    let ctl = FaultController::new(0, 0);
    let data = Arc::new(Stalling::new(
        MemDevice::new(vec![0u8; 4 << 20], ctl.clone()),
        usize::MAX,
    ));
    let meta = MemDevice::new(Vec::new(), ctl);
    BlockStore::mkfs_on(data.clone(), meta.clone()).unwrap();
    let s = Arc::new(BlockStore::open_on(data.clone(), meta).unwrap());
    let (c, a, b) = (
        CollectionId::new(1, 1),
        ObjectKey::new(1, "a"),
        ObjectKey::new(2, "b"),
    );
    let mut t = Transaction::new();
    // Copy-on-write sizes (above the 32 KiB the journal carries).
    const LEN: usize = 40 * 1024;
    t.create_collection(c)
        .write(c, a.clone(), 0, Bytes::from(vec![1u8; LEN]));
    s.apply_transaction(t).unwrap();
    data.stall.store(true, Ordering::SeqCst);
    let reader = {
        let (s, c, a) = (s.clone(), c, a.clone());
        std::thread::spawn(move || s.read(&c, &a, 0, LEN as u64))
    };
    data.wait_held();
    // While the read is held: free a's blocks, make that durable, reuse them for b.
    let mut t = Transaction::new();
    t.remove(c, a.clone());
    s.apply_transaction(t).unwrap();
    let mut t = Transaction::new();
    t.write(c, b.clone(), 0, Bytes::from(vec![2u8; LEN]));
    s.apply_transaction(t).unwrap();
    data.release();
    let got = reader.join().unwrap();
    assert!(matches!(got, Err(Error::ObjectNotFound(..))), "{got:?}");
    assert_eq!(s.counters().checksum_errors.load(Ordering::Relaxed), 0);
    assert_eq!(s.counters().read_retries.load(Ordering::Relaxed), 1);
    assert_eq!(
        s.read(&c, &b, 0, LEN as u64).unwrap(),
        Bytes::from(vec![2u8; LEN])
    );
}

/// A store on fault-injecting memory devices of `mb` MiB.
fn mem_store(
    mb: usize,
) -> (
    Arc<FaultController>,
    Arc<MemDevice>,
    Arc<MemDevice>,
    BlockStore,
) {
    let ctl = FaultController::new(0, 0);
    let data = MemDevice::new(vec![0u8; mb << 20], ctl.clone());
    let meta = MemDevice::new(Vec::new(), ctl.clone());
    BlockStore::mkfs_on(data.clone(), meta.clone()).unwrap();
    let s = BlockStore::open_on(data.clone(), meta.clone()).unwrap();
    (ctl, data, meta, s)
}

/// What a machine that lost power now would find: the durable images plus some of the
/// unsynced writes.
fn power_loss(data: &MemDevice, meta: &MemDevice, seed: u64) -> (Arc<MemDevice>, Arc<MemDevice>) {
    let mut rng = shoal_objectstore::model::Rng::new(seed);
    let ctl = FaultController::new(0, 0);
    (
        MemDevice::new(data.crash_image(&mut rng), ctl.clone()),
        MemDevice::new(meta.crash_image(&mut rng), ctl),
    )
}

/// Cuts the power under a running writer: the devices stop, the writer ends on
/// its first error, and the images a restart would find hold a consistent
/// store with journal records still to replay.
fn lose_power_mid_stream(
    ctl: &FaultController,
    writer: std::thread::JoinHandle<()>,
    s: Arc<BlockStore>,
    data: &MemDevice,
    meta: &MemDevice,
    seed: u64,
) -> (Arc<MemDevice>, Arc<MemDevice>) {
    ctl.stop();
    writer.join().unwrap();
    let (data2, meta2) = power_loss(data, meta, seed);
    drop(s);
    let report = block::fsck_on(data2.clone(), meta2.clone(), true).unwrap();
    assert!(report.is_clean(), "{report}");
    assert!(report.journal_records > 0, "{report}");
    (data2, meta2)
}

#[test]
fn small_new_objects_travel_in_the_journal_and_survive_power_loss() {
    use std::sync::atomic::Ordering::SeqCst;
    let (ctl, data, meta, s) = mem_store(64);
    let c = CollectionId::new(1, 0);
    let mut t = Transaction::new();
    t.create_collection(c);
    s.apply_transaction(t).unwrap();
    // New objects of 4 KiB up to 32 KiB, some ending inside a block: their
    // data goes in the group's journal record (one device sync), not
    // copy-on-write ahead of it.
    let size = |n: u32| 4096 * (1 + n as usize % 8) - (n as usize % 3) * 1000;
    let s = Arc::new(s);
    let acked = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let writer = {
        let (s, acked) = (s.clone(), acked.clone());
        std::thread::spawn(move || {
            for n in 1u32.. {
                let mut t = Transaction::new();
                t.write(
                    c,
                    ObjectKey::new(n, "new"),
                    0,
                    Bytes::from(vec![(n % 251) as u8 + 1; size(n)]),
                );
                if s.apply_transaction(t).is_err() {
                    return;
                }
                acked.store(n, SeqCst);
            }
        })
    };
    while acked.load(SeqCst) < 100 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(s.counters().cow_writes.load(SeqCst), 0);
    assert!(s.counters().deferred_writes.load(SeqCst) >= 100);
    let (data2, meta2) = lose_power_mid_stream(&ctl, writer, s, &data, &meta, 5);
    let s = BlockStore::open_on(data2.clone(), meta2.clone()).unwrap();
    for n in 1..=acked.load(SeqCst) {
        let got = s
            .read(&c, &ObjectKey::new(n, "new"), 0, 1 << 20)
            .unwrap_or_else(|e| panic!("object {n}: {e}"));
        assert_eq!(got.len(), size(n), "object {n}");
        assert!(got.iter().all(|b| *b == (n % 251) as u8 + 1), "object {n}");
    }
    drop(s);
    let report = block::fsck_on(data2, meta2, true).unwrap();
    assert!(report.is_clean(), "{report}");
}

#[test]
fn acknowledged_small_overwrites_survive_power_loss_through_the_journal() {
    let (ctl, data, meta, s) = mem_store(64);
    let c = CollectionId::new(1, 0);
    let mut t = Transaction::new();
    t.create_collection(c);
    for i in 0..8u32 {
        t.write(
            c,
            ObjectKey::new(i, "obj"),
            0,
            Bytes::from(vec![0u8; 64 << 10]),
        );
    }
    s.apply_transaction(t).unwrap();
    // A writer overwrites single blocks (deferred writes, carried by the journal) until
    // the power goes; every acknowledged overwrite must be there after the restart.
    let s = Arc::new(s);
    let acked = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
    let attempt = Arc::new(std::sync::Mutex::new(None));
    let acked_count = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let writer = {
        let (s, acked, attempt, count) = (
            s.clone(),
            acked.clone(),
            attempt.clone(),
            acked_count.clone(),
        );
        std::thread::spawn(move || {
            for n in 1u32.. {
                let (obj, block) = (n % 8, (n / 8) % 16);
                let fill = (n % 251) as u8 + 1;
                *attempt.lock().unwrap() = Some((obj, block, fill));
                let mut t = Transaction::new();
                t.write(
                    c,
                    ObjectKey::new(obj, "obj"),
                    u64::from(block) * 4096,
                    Bytes::from(vec![fill; 4096]),
                );
                if s.apply_transaction(t).is_err() {
                    return;
                }
                acked.lock().unwrap().insert((obj, block), fill);
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        })
    };
    while acked_count.load(std::sync::atomic::Ordering::SeqCst) < 100 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // The writer is mid-stream: no idle checkpoint has emptied the journal.
    let (data2, meta2) = lose_power_mid_stream(&ctl, writer, s, &data, &meta, 7);
    let s = BlockStore::open_on(data2.clone(), meta2.clone()).unwrap();
    // The one overwrite in flight at the power loss may have reached the journal whole.
    let in_flight = attempt.lock().unwrap().unwrap();
    for ((obj, block), fill) in acked.lock().unwrap().iter() {
        let got = s
            .read(
                &c,
                &ObjectKey::new(*obj, "obj"),
                u64::from(*block) * 4096,
                4096,
            )
            .unwrap();
        let ok = |f: u8| got.iter().all(|b| *b == f);
        let newer = (in_flight.0, in_flight.1) == (*obj, *block) && ok(in_flight.2);
        assert!(
            ok(*fill) || newer,
            "obj {obj} block {block}: wanted {fill}, got {}",
            got[0]
        );
    }
    drop(s);
    let report = block::fsck_on(data2, meta2, true).unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(
        report.journal_records, 0,
        "the open replayed and checkpointed"
    );
}

#[test]
fn a_transaction_too_large_for_the_journal_commits_directly_and_its_deferred_blocks_never_land_on_reused_space()
 {
    // 4 MiB device: a 128 KiB journal, records of at most 60 KiB.
    let (ctl, data, meta, s) = mem_store(4);
    let c = CollectionId::new(1, 0);
    let (a, b, big) = (
        ObjectKey::new(1, "a"),
        ObjectKey::new(2, "b"),
        ObjectKey::new(3, "big"),
    );
    let mut t = Transaction::new();
    t.create_collection(c)
        .write(c, a.clone(), 0, Bytes::from(vec![1u8; 8192]));
    s.apply_transaction(t).unwrap();
    // One transaction: a deferred overwrite of a's blocks and 256 KiB of omap.
    let mut t = Transaction::new();
    t.write(c, a.clone(), 0, Bytes::from(vec![2u8; 8192]));
    let omap: std::collections::BTreeMap<Bytes, Bytes> = (0..256u32)
        .map(|i| {
            (
                Bytes::from(format!("key{i:05}")),
                Bytes::from(vec![i as u8; 1024]),
            )
        })
        .collect();
    t.touch(c, big.clone())
        .omap_set_keys(c, big.clone(), omap.clone());
    s.apply_transaction(t).unwrap();
    // a's blocks are freed, then (first fit) reused by b.
    let mut t = Transaction::new();
    t.remove(c, a.clone());
    s.apply_transaction(t).unwrap();
    let mut t = Transaction::new();
    t.write(c, b.clone(), 0, Bytes::from(vec![3u8; 8192]));
    s.apply_transaction(t).unwrap();
    ctl.stop();
    let (data2, meta2) = power_loss(&data, &meta, 11);
    drop(s);
    let report = block::fsck_on(data2.clone(), meta2.clone(), true).unwrap();
    assert!(report.is_clean(), "{report}");
    let s = BlockStore::open_on(data2.clone(), meta2.clone()).unwrap();
    assert!(!s.exists(&c, &a).unwrap());
    assert_eq!(
        s.read(&c, &b, 0, 8192).unwrap(),
        Bytes::from(vec![3u8; 8192])
    );
    let keys: Vec<Bytes> = omap.keys().cloned().collect();
    assert_eq!(s.omap_get_values(&c, &big, &keys).unwrap(), omap);
    drop(s);
    assert!(block::fsck_on(data2, meta2, true).unwrap().is_clean());
}

#[test]
fn a_large_write_reaching_the_device_holds_up_neither_other_writers_nor_readers() {
    use std::time::Duration;
    let ctl = FaultController::new(0, 0);
    let data = Arc::new(Stalling::new(
        MemDevice::new(vec![0u8; 16 << 20], ctl.clone()),
        1 << 20,
    ));
    let meta = MemDevice::new(Vec::new(), ctl);
    BlockStore::mkfs_on(data.clone(), meta.clone()).unwrap();
    let s = Arc::new(BlockStore::open_on(data.clone(), meta).unwrap());
    let c = CollectionId::new(1, 0);
    let (big, small) = (ObjectKey::new(1, "big"), ObjectKey::new(2, "small"));
    let mut t = Transaction::new();
    t.create_collection(c)
        .write(c, small.clone(), 0, Bytes::from(vec![1u8; 4096]));
    s.apply_transaction(t).unwrap();
    data.stall_write
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let writer = {
        let (s, big) = (s.clone(), big.clone());
        std::thread::spawn(move || {
            let mut t = Transaction::new();
            t.write(c, big, 0, Bytes::from(vec![7u8; 1 << 20]));
            s.apply_transaction(t)
        })
    };
    data.wait_held();
    // The big write's data is on its way to the device (held there). Another writer
    // and readers must not wait for it.
    let (tx, rx) = std::sync::mpsc::channel();
    let other = {
        let (s, big, small) = (s.clone(), big.clone(), small.clone());
        std::thread::spawn(move || {
            let mut t = Transaction::new();
            t.write(c, small.clone(), 0, Bytes::from(vec![2u8; 4096]));
            let ticket = s.queue_transaction(t).unwrap();
            let read_big = s.read(&c, &big, 0, 1 << 20).unwrap();
            let read_small = s.read(&c, &small, 0, 4096).unwrap();
            tx.send((read_big, read_small)).unwrap();
            ticket
        })
    };
    let got = rx.recv_timeout(Duration::from_secs(20));
    data.release();
    let (read_big, read_small) = got.expect("a writer or reader waited for another's data I/O");
    assert_eq!(
        read_big,
        Bytes::from(vec![7u8; 1 << 20]),
        "reads see the new data"
    );
    assert_eq!(read_small, Bytes::from(vec![2u8; 4096]));
    writer.join().unwrap().unwrap();
    other.join().unwrap().wait().unwrap();
    assert_eq!(
        s.read(&c, &big, 0, 1 << 20).unwrap(),
        Bytes::from(vec![7u8; 1 << 20])
    );
}

#[test]
fn large_reads_zero_holes_in_reused_buffers_and_carry_the_crc_of_what_they_return() {
    let d = TempDir::new("readbuf");
    let s = new_store(&d, 64);
    let c = CollectionId::new(1, 1);
    let (full, sparse) = (ObjectKey::new(1, "full"), ObjectKey::new(1, "sparse"));
    let pattern: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8 | 1).collect();
    let mut t = Transaction::new();
    t.create_collection(c)
        .write(c, full.clone(), 0, Bytes::from(pattern.clone()))
        .write(c, sparse.clone(), 0, Bytes::from(vec![7u8; 4096]))
        .write(c, sparse.clone(), 200 << 10, Bytes::from(vec![8u8; 4096]))
        .write(
            c,
            sparse.clone(),
            (300 << 10) + 50,
            Bytes::from(vec![9u8; 100]),
        );
    s.apply_transaction(t).unwrap();
    // A small overwrite of the full object: deferred, read through the overlay.
    let mut t = Transaction::new();
    t.write(c, full.clone(), 5000, Bytes::from_static(b"small"));
    s.apply_transaction(t).unwrap();
    let mut want_full = pattern.clone();
    want_full[5000..5005].copy_from_slice(b"small");
    let mut want_sparse = vec![0u8; (300 << 10) + 150];
    want_sparse[..4096].fill(7);
    want_sparse[200 << 10..(200 << 10) + 4096].fill(8);
    want_sparse[(300 << 10) + 50..].fill(9);

    // The buffer of this read, dropped, serves the next read (the pool's
    // own test shows the reuse).
    let (b, crc) = s.read_with_crc(&c, &full, 0, 1 << 20).unwrap();
    assert_eq!(&b[..], &want_full[..]);
    assert_eq!(crc, Some(crc32c::crc32c(&want_full)));
    drop(b);
    // The same buffer, full of the pattern, now holds the sparse object:
    // its holes read as zeros.
    let (b, crc) = s.read_with_crc(&c, &sparse, 0, 1 << 20).unwrap();
    assert_eq!(&b[..], &want_sparse[..]);
    assert_eq!(crc, Some(crc32c::crc32c(&want_sparse)));
    drop(b);
    // Ranges starting and ending inside blocks, holes, the deferred block.
    for (o, want) in [(&full, &want_full), (&sparse, &want_sparse)] {
        for (off, len) in [
            (1, 70_000),
            (4095, 4098),
            (4096, 65_536),
            (4999, 7),
            (100 << 10, 110 << 10),
            (0, 1 << 21),
        ] {
            let (b, crc) = s.read_with_crc(&c, o, off, len).unwrap();
            let end = (off + len).min(want.len() as u64) as usize;
            let want = &want[(off as usize).min(end)..end];
            assert_eq!(&b[..], want, "{o:?} {off}+{len}");
            assert_eq!(crc, Some(crc32c::crc32c(want)), "{o:?} {off}+{len}");
            assert_eq!(s.read(&c, o, off, len).unwrap(), b);
        }
    }
}

/// The data cache serves blocks read again and never a block's old
/// contents: after every kind of change (a deferred overwrite, a rewrite
/// to fresh blocks, a removal and a new object on the freed blocks, a
/// truncation, a zeroed range), a read gives what was last acknowledged,
/// alone and with readers racing the changes; a store without a cache
/// serves every read from the device.
#[test]
fn the_data_cache_serves_hot_blocks_and_never_stale_ones() {
    let d = TempDir::new("cache");
    let s = Arc::new(new_store(&d, 32));
    let c = CollectionId::new(4, 1);
    let mut t = Transaction::new();
    t.create_collection(c);
    s.apply_transaction(t).unwrap();
    let obj = |i: u64| ObjectKey::new(i as u32, format!("c{i}"));
    let mut want: Vec<Vec<u8>> = vec![Vec::new(); 8];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for step in 0..1500u64 {
        let i = next() % 8;
        let o = obj(i);
        let mut t = Transaction::new();
        let w = &mut want[i as usize];
        let fill =
            |len: usize| -> Vec<u8> { (0..len).map(|b| (step + b as u64 / 4096) as u8).collect() };
        match next() % 6 {
            // A small overwrite (deferred when its blocks are mapped).
            0 | 1 => {
                let off = (next() % 16) as usize * 1024;
                let data = fill(3000);
                t.write(c, o.clone(), off as u64, Bytes::from(data.clone()));
                if w.len() < off + data.len() {
                    w.resize(off + data.len(), 0);
                }
                w[off..off + data.len()].copy_from_slice(&data);
            }
            // A rewrite past the deferred size: fresh blocks.
            2 => {
                let data = fill(48 * 1024);
                t.write(c, o.clone(), 0, Bytes::from(data.clone()));
                if w.len() < data.len() {
                    w.resize(data.len(), 0);
                }
                w[..data.len()].copy_from_slice(&data);
            }
            // Gone, then made again on whatever blocks are free.
            3 => {
                if !w.is_empty() {
                    t.remove(c, o.clone());
                }
                let data = fill(8192);
                t.write(c, o.clone(), 0, Bytes::from(data.clone()));
                *w = data;
            }
            4 => {
                let size = (next() % 40_000) as usize;
                t.truncate(c, o.clone(), size as u64);
                w.resize(size, 0);
            }
            _ => {
                let (off, len) = ((next() % 30_000) as usize, (next() % 9000) as usize);
                t.zero(c, o.clone(), off as u64, len as u64);
                if w.len() < off + len {
                    w.resize(off + len, 0);
                }
                w[off..off + len].fill(0);
            }
        }
        s.apply_transaction(t).unwrap();
        // Read twice: from the device (or the overlay), then from the cache.
        for _ in 0..2 {
            let j = next() % 8;
            let w = &want[j as usize];
            if w.is_empty() {
                continue;
            }
            let off = (next() as usize) % w.len();
            let len = ((next() % 20_000) as usize).min(w.len() - off);
            let got = s.read(&c, &obj(j), off as u64, len as u64).unwrap();
            assert!(
                got[..] == w[off..off + len],
                "step {step}: object {j} [{off}, +{len})"
            );
        }
    }
    let stats = s.cache_stats();
    assert!(stats.hits > 500 && stats.fills > 500, "{stats:?}");

    // Readers racing a writer: every read is some acknowledged version of
    // the object, whole (each version's bytes are one value).
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (s, stop) = (s.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let got = s.read(&c, &obj(100), 0, 16384).unwrap();
                    assert!(got.iter().all(|b| *b == got[0]), "a torn or stale read");
                    n += 1;
                }
                n
            })
        })
        .collect();
    for v in 0..400u32 {
        let mut t = Transaction::new();
        let len = if v % 3 == 0 { 40_960 } else { 16384 };
        t.write(c, obj(100), 0, Bytes::from(vec![v as u8; len]));
        if v % 3 == 0 {
            t.truncate(c, obj(100), 16384);
        }
        s.apply_transaction(t).unwrap();
        let got = s.read(&c, &obj(100), 0, 16384).unwrap();
        assert!(got.iter().all(|b| *b == v as u8), "version {v}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads: u64 = readers.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(reads > 0);
    drop(Arc::try_unwrap(s).unwrap());

    // Without a cache nothing is kept.
    let s = BlockStore::open(
        &d.0,
        &OpenOptions {
            cache_bytes: 0,
            ..OpenOptions::default()
        },
    )
    .unwrap();
    for _ in 0..3 {
        s.read(&c, &obj(100), 0, 4096).unwrap();
    }
    assert_eq!(s.cache_stats().hits, 0);
    assert_eq!(s.cache_stats().blocks, 0);
}

/// A block rotting on the device while the cache holds it: reads are
/// served the good copy, but a read from the media (a deep scrub's) finds
/// the damage.
#[test]
fn a_read_from_the_media_finds_damage_the_cache_would_hide() {
    use std::os::unix::fs::FileExt;
    let d = TempDir::new("cachecrc");
    let c = CollectionId::new(1, 1);
    let o = ObjectKey::new(5, "victim");
    let s = new_store(&d, 16);
    let mut t = Transaction::new();
    t.create_collection(c)
        .write(c, o.clone(), 0, Bytes::from(vec![0xcdu8; 12 * 4096]));
    s.apply_transaction(t).unwrap();
    assert_eq!(s.read(&c, &o, 4096, 4096).unwrap(), vec![0xcdu8; 4096]);
    let data_path = d.0.join(block::DATA_FILE);
    let img = std::fs::read(&data_path).unwrap();
    let pos = img
        .windows(4096)
        .position(|w| w.iter().all(|b| *b == 0xcd))
        .unwrap()
        + 4096
        + 100;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&data_path)
        .unwrap();
    f.write_at(&[0x00], pos as u64).unwrap();
    f.sync_all().unwrap();
    assert_eq!(
        s.read(&c, &o, 4096, 4096).unwrap(),
        vec![0xcdu8; 4096],
        "the cached copy"
    );
    assert!(matches!(
        s.read_from_media(&c, &o, 0, 12 * 4096),
        Err(Error::Checksum { .. })
    ));
}

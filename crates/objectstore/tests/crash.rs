//! Crash consistency. Two harnesses, both checking the same property: after a crash and
//! reopen, fsck (deep) is clean and the store equals the reference model after some
//! prefix of the transactions that contains every one acknowledged as durable.
//!
//! * `torn_write_crashes`: in process, on fault-injecting devices that tear the Nth write
//!   (data and metadata writes counted together) and then fail everything; the crash
//!   image is the durable image plus a random subset of the unsynced writes.
//! * `sigkill_crashes`: a child process (this test binary re-executed) runs transactions
//!   on real files with direct I/O and is killed with SIGKILL at a random moment.
//!
//! Iterations: `SHOAL_CRASH_ITERATIONS` (default 200 each).

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use shoal_objectstore::block::fault::{FaultController, MemDevice};
use shoal_objectstore::block::{self, MkfsOptions, OpenOptions};
use shoal_objectstore::model::{Model, Rng, TxnGen};
use shoal_objectstore::{BlockStore, CommitTicket, Error, ObjectStore, testsuite, tool};

fn iterations() -> u64 {
    std::env::var("SHOAL_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

/// Each harness runs as two tests over halves of the iterations, so each test stays
/// short in debug builds and the two halves run in parallel.
fn half(second: bool) -> std::ops::Range<u64> {
    let n = iterations();
    if second { n / 2..n } else { 0..n / 2 }
}

/// Smaller writes than the default generator, so a run commits many transactions.
fn generator(seed: u64) -> TxnGen {
    let mut g = TxnGen::new(seed);
    g.write_bytes_max = 96 * 1024;
    g.offset_max = 64 * 1024;
    g
}

/// Find a prefix (at least `acked` accepted transactions long) the store equals.
fn check_prefix(store: &dyn ObjectStore, seed: u64, acked: u64, queued: u64, ctx: &str) {
    let mut g = generator(seed);
    let mut model = Model::default();
    let mut accepted = 0;
    while accepted < acked {
        if model.apply(&g.txn()) {
            accepted += 1;
        }
    }
    loop {
        let last_err = match testsuite::compare_with_model(store, &model) {
            Ok(()) => return,
            Err(e) => e,
        };
        if accepted >= queued {
            panic!(
                "{ctx}: store matches no prefix in [{acked}, {queued}] accepted transactions; last difference: {last_err}"
            );
        }
        while !model.apply(&g.txn()) {}
        accepted += 1;
    }
}

/// Keep up to `WINDOW` transactions in flight so group commit and deferred writes
/// overlap; returns (accepted, acked) when the store fails or `max` are accepted.
const WINDOW: usize = 4;

fn drive(store: &dyn ObjectStore, seed: u64, max: u64, mut on_ack: impl FnMut(u64)) -> (u64, u64) {
    let mut g = generator(seed);
    let mut model = Model::default();
    let mut inflight: VecDeque<(u64, CommitTicket)> = VecDeque::new();
    let (mut accepted, mut acked) = (0u64, 0u64);
    let mut failed = false;
    while accepted < max && !failed {
        let t = g.txn();
        let want = model.apply(&t);
        match store.queue_transaction(t) {
            Ok(ticket) => {
                assert!(want, "store accepted a transaction the model refuses");
                accepted += 1;
                inflight.push_back((accepted, ticket));
            }
            Err(e @ (Error::Poisoned(_) | Error::Io { .. } | Error::Meta { .. })) => {
                let _ = e;
                failed = true;
            }
            Err(e) => assert!(!want, "store refused ({e}) a transaction the model accepts"),
        }
        while inflight.len() >= WINDOW || (failed && !inflight.is_empty()) {
            let Some((n, ticket)) = inflight.pop_front() else {
                break;
            };
            match ticket.wait() {
                Ok(()) => {
                    acked = n;
                    on_ack(n);
                }
                Err(_) => failed = true,
            }
        }
    }
    for (n, ticket) in inflight {
        if ticket.wait().is_ok() {
            acked = n;
            on_ack(n);
        }
    }
    (accepted, acked)
}

#[test]
fn torn_write_crashes_first_half() {
    torn_write_crashes(half(false));
}

#[test]
fn torn_write_crashes_second_half() {
    torn_write_crashes(half(true));
}

fn torn_write_crashes(range: std::ops::Range<u64>) {
    let started = Instant::now();
    let count = range.end - range.start;
    // One formatted image pair, copied for every iteration.
    let fresh = {
        let ctl = FaultController::new(0, 0);
        let data = MemDevice::new(vec![0u8; 4 << 20], ctl.clone());
        let meta = MemDevice::new(Vec::new(), ctl);
        BlockStore::mkfs_on(data.clone(), meta.clone()).unwrap();
        (data.live_image(), meta.live_image())
    };
    let (mut fired, mut total_writes, mut replays, mut after_checkpoint) = (0, 0, 0, 0);
    for i in range {
        let seed = 0xC0FFEE ^ (i * 7919);
        let mut rng = Rng::new(seed);
        let ctl = FaultController::new(1 + rng.below(250), seed);
        let data = MemDevice::new(fresh.0.clone(), ctl.clone());
        let meta = MemDevice::new(fresh.1.clone(), ctl.clone());
        let (accepted, acked) = match BlockStore::open_on(data.clone(), meta.clone()) {
            Ok(store) => {
                let r = drive(&store, seed, 60, |_| {});
                let c = &store.counters().checkpoints;
                after_checkpoint += u64::from(c.load(std::sync::atomic::Ordering::Relaxed) > 0);
                r
            }
            Err(_) => (0, 0),
        };
        fired += u64::from(ctl.stopped());
        total_writes += ctl.writes();
        // The crash: a fresh machine sees the durable image plus some unsynced writes.
        let ctl2 = FaultController::new(0, 0);
        let data2 = MemDevice::new(data.crash_image(&mut rng), ctl2.clone());
        let meta2 = MemDevice::new(meta.crash_image(&mut rng), ctl2.clone());
        let ctx = format!("iteration {i} (seed {seed:#x}, accepted {accepted}, acked {acked})");
        let report = block::fsck_on(data2.clone(), meta2.clone(), true)
            .unwrap_or_else(|e| panic!("{ctx}: fsck: {e}"));
        assert!(report.is_clean(), "{ctx}: fsck before reopen:\n{report}");
        replays += u64::from(report.deferred_records > 0);
        let store = BlockStore::open_on(data2.clone(), meta2.clone())
            .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
        check_prefix(&store, seed, acked, accepted, &ctx);
        drop(store);
        // Deep fsck ran on the crash image; after replay the cross-references must hold.
        let report = block::fsck_on(data2, meta2, false).unwrap();
        assert!(report.is_clean(), "{ctx}: fsck after reopen:\n{report}");
    }
    println!(
        "{count} torn-write crash iterations ({fired} tore a write, {after_checkpoint} after a \
         checkpoint had finished, {replays} replayed deferred writes, {total_writes} writes) in {:?}",
        started.elapsed()
    );
    // The journal is small (32 blocks): most runs go through checkpoints before the
    // crash, which then lands among later records and the write-back's writes.
    assert!(
        after_checkpoint * 2 > count,
        "only {after_checkpoint} of {count} runs reached a checkpoint"
    );
}

const CHILD_ENV: &str = "SHOAL_OBJECTSTORE_CRASH_CHILD";

/// The child side of `sigkill_crashes`: runs until killed. A no-op in a normal test run.
#[test]
fn sigkill_child() {
    let Ok(arg) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (dir, seed) = arg.split_once(':').unwrap();
    let store = BlockStore::open(Path::new(dir), &OpenOptions::default()).unwrap();
    let stdout = std::io::stdout();
    drive(&store, seed.parse().unwrap(), u64::MAX, |n| {
        let mut out = stdout.lock();
        writeln!(out, "acked {n}").unwrap();
        out.flush().unwrap();
    });
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn sigkill_crashes_first_half() {
    sigkill_crashes(half(false), "a");
}

#[test]
fn sigkill_crashes_second_half() {
    sigkill_crashes(half(true), "b");
}

fn sigkill_crashes(range: std::ops::Range<u64>, tag: &str) {
    let started = Instant::now();
    let count = range.end - range.start;
    let exe = std::env::current_exe().unwrap();
    let dir =
        TempDir(std::env::temp_dir().join(format!("shoal-os-kill-{}-{tag}", std::process::id())));
    let mut max_acked = 0;
    for i in range {
        let seed = 0x5151 ^ (i * 104_729);
        let mut rng = Rng::new(seed);
        let _ = std::fs::remove_dir_all(&dir.0);
        BlockStore::mkfs(
            &dir.0,
            &MkfsOptions {
                data_bytes: 32 << 20,
                ..Default::default()
            },
        )
        .unwrap();
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "sigkill_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, format!("{}:{seed}", dir.0.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(2 + rng.below(80)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let mut acked = 0;
        for line in BufReader::new(child.stdout.take().unwrap()).lines() {
            if let Some(n) = line.unwrap().strip_prefix("acked ") {
                acked = n.parse().unwrap();
            }
        }
        max_acked = max_acked.max(acked);
        let ctx = format!("kill iteration {i} (seed {seed:#x}, acked {acked})");
        let report = tool::fsck(&dir.0, true).unwrap_or_else(|e| panic!("{ctx}: fsck: {e}"));
        assert!(report.is_clean(), "{ctx}: fsck:\n{report}");
        let store = BlockStore::open(&dir.0, &OpenOptions::default())
            .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
        // At most WINDOW transactions were in flight past the last acknowledgement.
        check_prefix(&store, seed, acked, acked + WINDOW as u64 + 1, &ctx);
    }
    println!(
        "{count} SIGKILL iterations in {:?}; most acked in one run: {max_acked}",
        started.elapsed()
    );
}

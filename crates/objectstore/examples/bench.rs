//! Figures for BlockStore next to MemStore from the same run (a benchmark, not a test):
//!
//! `cargo run --release -p shoal-objectstore --example bench -- [DIR] [--overwrites SECONDS]
//! [--objects N [--max-open-secs S] [--max-bytes-per-object B]]`
//!
//! DIR (default: the system temp dir) should be on the disk an OSD would use. With
//! `--overwrites`, only the 16-writer durable 4 KiB overwrite row runs, on BlockStore, for
//! that long, and the process's CPU per overwrite is printed beside the rate (the row to
//! profile the commit path with). With `--objects`, a store gets N objects (4 KiB of data
//! and a 256-byte xattr each, as an RBD data object with its object info), is closed,
//! and the open is timed, with the memory it takes (the process's resident set before
//! and after).

#![allow(clippy::unwrap_used)] // A benchmark: failing loudly is fine.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use shoal_objectstore::block::{MkfsOptions, OpenOptions};
use shoal_objectstore::{BlockStore, CollectionId, MemStore, ObjectKey, ObjectStore, Transaction};

const C: CollectionId = CollectionId::new(1, 0);
const OBJECTS: u32 = 64;
const OBJECT_BYTES: usize = 1 << 20;

fn key(i: u32) -> ObjectKey {
    ObjectKey::new(i.wrapping_mul(2_654_435_761), format!("bench-{i}"))
}

fn fill(s: &dyn ObjectStore) -> f64 {
    let mut t = Transaction::new();
    t.create_collection(C);
    s.apply_transaction(t).unwrap();
    let start = Instant::now();
    let tickets: Vec<_> = (0..OBJECTS)
        .map(|i| {
            let mut t = Transaction::new();
            t.write(C, key(i), 0, Bytes::from(vec![i as u8; OBJECT_BYTES]));
            s.queue_transaction(t).unwrap()
        })
        .collect();
    for t in tickets {
        t.wait().unwrap();
    }
    (OBJECTS as usize * OBJECT_BYTES) as f64 / start.elapsed().as_secs_f64() / 1e6
}

/// One durable 4 KiB overwrite of writer `th` at a place drawn from `x`.
fn overwrite_one(s: &dyn ObjectStore, th: u32, x: &mut u64) {
    *x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let obj = (*x >> 33) as u32 % OBJECTS;
    let off = ((*x >> 13) % (OBJECT_BYTES as u64 / 4096)) * 4096;
    let mut t = Transaction::new();
    t.write(C, key(obj), off, Bytes::from(vec![th as u8; 4096]));
    s.apply_transaction(t).unwrap();
}

/// `threads` writers, each doing `per_thread` durable 4 KiB overwrites; returns ops/s.
fn overwrites(s: Arc<dyn ObjectStore>, threads: u32, per_thread: u32) -> f64 {
    let start = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|th| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut x = u64::from(th) + 1;
                for _ in 0..per_thread {
                    overwrite_one(&*s, th, &mut x);
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    (threads * per_thread) as f64 / start.elapsed().as_secs_f64()
}

/// `threads` writers, each writing `per_thread` new 1 MiB objects durably (copy-on-write
/// data, as a PG's full-object writes); returns MB/s.
fn new_objects(s: Arc<dyn ObjectStore>, threads: u32, per_thread: u32) -> f64 {
    let start = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|th| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    let o = ObjectKey::new(1_000_000 + th * per_thread + i, "new");
                    let mut t = Transaction::new();
                    t.write(C, o.clone(), 0, Bytes::from(vec![th as u8; 1 << 20]));
                    s.apply_transaction(t).unwrap();
                    let mut t = Transaction::new();
                    t.remove(C, o);
                    s.queue_transaction(t).unwrap();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    f64::from(threads * per_thread) * 1.048_576 / start.elapsed().as_secs_f64()
}

fn reads(s: &dyn ObjectStore, n: u32, len: u64) -> f64 {
    let start = Instant::now();
    let mut x = 7u64;
    for _ in 0..n {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let obj = (x >> 33) as u32 % OBJECTS;
        let off = ((x >> 13) % (OBJECT_BYTES as u64 / len.max(1))) * len;
        assert_eq!(s.read(&C, &key(obj), off, len).unwrap().len() as u64, len);
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn run(name: &str, s: Arc<dyn ObjectStore>) {
    let fill_mb = fill(&*s);
    let one = overwrites(s.clone(), 1, 300);
    let eight = overwrites(s.clone(), 8, 150);
    let sixteen = overwrites(s.clone(), 16, 300);
    let new4 = new_objects(s.clone(), 4, 32);
    let r4k = reads(&*s, 20_000, 4096);
    let r1m = reads(&*s, 200, 1 << 20) * 1.048_576;
    println!(
        "{name:<10} fill 64x1MiB: {fill_mb:>7.0} MB/s | 4KiB overwrite, 1 thread: {one:>7.0}/s, 8 threads: {eight:>7.0}/s, 16 threads: {sixteen:>7.0}/s | new 1MiB objects, 4 threads: {new4:>5.0} MB/s | read 4KiB: {r4k:>8.0}/s, 1MiB: {r1m:>6.0} MB/s"
    );
}

/// CPU seconds (user and system) this process has used, from `/proc/self/stat`.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields 14 and 15 of the line; 12 and 13 after the command's closing parenthesis.
    (ticks(11) + ticks(12)) / 100.0
}

/// 16 writers of durable 4 KiB overwrites for `seconds`: ops/s and CPU µs per op.
fn overwrites_for(s: Arc<dyn ObjectStore>, seconds: f64) -> (f64, f64) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (start, cpu0) = (Instant::now(), cpu_seconds());
    let hs: Vec<_> = (0..16u32)
        .map(|th| {
            let (s, stop, done) = (s.clone(), stop.clone(), done.clone());
            std::thread::spawn(move || {
                let mut x = u64::from(th) + 1;
                while !stop.load(Ordering::Relaxed) {
                    overwrite_one(&*s, th, &mut x);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    let (secs, cpu) = (start.elapsed().as_secs_f64(), cpu_seconds() - cpu0);
    let n = done.load(Ordering::Relaxed) as f64;
    (n / secs, cpu / n * 1e6)
}

/// The process's resident set, in bytes.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// The most an open may take, in seconds and resident bytes per object
/// (`bench/store-open.sh` states them; over either, the run fails).
#[derive(Debug, Clone, Copy)]
struct OpenLimits {
    secs: Option<f64>,
    bytes_per_object: Option<u64>,
}

/// Make a store of `n` objects, close it, and time its open.
fn open_objects(dir: &std::path::Path, n: u32, limits: OpenLimits) {
    let data_bytes = (u64::from(n) * 4096 * 2).max(1 << 30);
    BlockStore::mkfs(
        dir,
        &MkfsOptions {
            data_bytes,
            ..Default::default()
        },
    )
    .unwrap();
    let s = BlockStore::open(dir, &OpenOptions::default()).unwrap();
    let mut t = Transaction::new();
    t.create_collection(C);
    s.apply_transaction(t).unwrap();
    let start = Instant::now();
    let mut tickets = Vec::new();
    for chunk in 0..n.div_ceil(1000) {
        let mut t = Transaction::new();
        for i in chunk * 1000..(chunk * 1000 + 1000).min(n) {
            let k = ObjectKey::new(
                i.wrapping_mul(2_654_435_761),
                format!("rbd_data.1234.{i:016x}"),
            );
            t.write(C, k.clone(), 0, Bytes::from(vec![i as u8; 4096]));
            t.set_xattr(C, k, "_", Bytes::from(vec![7u8; 256]));
        }
        tickets.push(s.queue_transaction(t).unwrap());
        if tickets.len() >= 16 {
            for t in tickets.drain(..) {
                t.wait().unwrap();
            }
        }
    }
    for t in tickets {
        t.wait().unwrap();
    }
    let made = start.elapsed();
    drop(s);
    let meta = std::fs::metadata(dir.join("meta.redb"))
        .map(|m| m.len())
        .unwrap_or(0);
    println!(
        "{n} objects made in {:.1} s; metadata file {} MiB",
        made.as_secs_f64(),
        meta >> 20
    );
    // The open is measured in a fresh process: this one's allocator keeps what the
    // store just freed and would lend it to the next open.
    let me = std::env::current_exe().unwrap();
    let mut cmd = std::process::Command::new(me);
    cmd.arg("--open").arg(dir).arg(n.to_string());
    if let Some(s) = limits.secs {
        cmd.arg("--max-open-secs").arg(s.to_string());
    }
    if let Some(b) = limits.bytes_per_object {
        cmd.arg("--max-bytes-per-object").arg(b.to_string());
    }
    let ok = cmd.status().unwrap().success();
    if !ok {
        let _ = std::fs::remove_dir_all(dir);
        std::process::exit(1);
    }
}

/// Open the store at `dir` (holding `n` objects) and report the time and memory;
/// false if either is over its limit.
fn open_only(dir: &std::path::Path, n: u64, limits: OpenLimits) -> bool {
    let before = rss_bytes();
    let start = Instant::now();
    let s = BlockStore::open(dir, &OpenOptions::default()).unwrap();
    let took = start.elapsed();
    let after = rss_bytes();
    println!(
        "open in {:.2} s; {} MiB resident for the open store ({} bytes per object)",
        took.as_secs_f64(),
        after.saturating_sub(before) >> 20,
        after.saturating_sub(before) / n.max(1)
    );
    drop(s);
    let mut ok = true;
    if let Some(max) = limits.secs.filter(|m| took.as_secs_f64() > *m) {
        println!(
            "FAIL: the open took {:.2} s, over {max} s",
            took.as_secs_f64()
        );
        ok = false;
    }
    let per_object = after.saturating_sub(before) / n.max(1);
    if let Some(max) = limits.bytes_per_object.filter(|m| per_object > *m) {
        println!("FAIL: {per_object} bytes per object resident, over {max}");
        ok = false;
    }
    ok
}

fn usage(why: &str) -> ! {
    eprintln!(
        "bench: {why}\nusage: bench [DIR] [--overwrites SECONDS] [--objects N [--max-open-secs S] [--max-bytes-per-object B]]"
    );
    std::process::exit(2)
}

/// The value after `flag`, if the flag is given; a missing or unparsable value is an
/// error, never a default.
fn flag_value<T: std::str::FromStr>(args: &[String], flag: &str) -> Option<T> {
    let i = args.iter().position(|a| a == flag)?;
    match args.get(i + 1).map(|v| v.parse::<T>()) {
        Some(Ok(v)) => Some(v),
        _ => usage(&format!("{flag} takes a number")),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let only: Option<f64> = flag_value(&args, "--overwrites");
    let limits = OpenLimits {
        secs: flag_value(&args, "--max-open-secs"),
        bytes_per_object: flag_value(&args, "--max-bytes-per-object"),
    };
    let base = args
        .iter()
        .find(|a| !a.starts_with("--") && a.parse::<f64>().is_err())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    if let Some(i) = args.iter().position(|a| a == "--open") {
        let (Some(dir), Some(n)) = (
            args.get(i + 1),
            args.get(i + 2).and_then(|v| v.parse().ok()),
        ) else {
            usage("--open takes a store directory and its object count");
        };
        if !open_only(std::path::Path::new(dir), n, limits) {
            std::process::exit(1);
        }
        return;
    }
    let dir = base.join(format!("shoal-objectstore-bench-{}", std::process::id()));
    if let Some(n) = flag_value::<u32>(&args, "--objects") {
        open_objects(&dir, n, limits);
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    BlockStore::mkfs(
        &dir,
        &MkfsOptions {
            data_bytes: 1 << 30,
            ..Default::default()
        },
    )
    .unwrap();
    let bs = Arc::new(BlockStore::open(&dir, &OpenOptions::default()).unwrap());
    println!(
        "BlockStore in {} (direct I/O: {})",
        dir.display(),
        bs.direct_io()
    );
    if let Some(seconds) = only {
        fill(&*bs);
        let (rate, cpu) = overwrites_for(bs.clone(), seconds);
        println!(
            "BlockStore 4KiB overwrite, 16 threads, {seconds} s: {rate:.0}/s, {cpu:.1} µs CPU/op"
        );
    } else {
        run("MemStore", Arc::new(MemStore::new(1 << 30)));
        run("BlockStore", bs.clone());
    }
    let c = bs.counters();
    println!(
        "BlockStore: {} transactions in {} commits; {} deferred writes, {} copy-on-write writes",
        c.transactions.load(Ordering::Relaxed),
        c.group_commits.load(Ordering::Relaxed),
        c.deferred_writes.load(Ordering::Relaxed),
        c.cow_writes.load(Ordering::Relaxed)
    );
    drop(bs);
    let _ = std::fs::remove_dir_all(&dir);
}

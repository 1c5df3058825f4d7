//! Self-healing with real processes: one monitor and five BlockStore OSDs,
//! pool size 3 / min_size 2, a writer that records every acknowledged
//! write. Meanwhile an OSD is SIGKILLed mid-write and restarted, another is
//! SIGKILLed and marked out, and a new OSD joins. At the end every PG is
//! active+clean, every acknowledged write reads back, deep scrub finds
//! nothing, and every object has three identical copies on its acting set.
//! No write fails, and none waits longer than the heartbeat grace plus a
//! few seconds.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Dev, start_osd};
use shoal_client::{Client, ClientOptions};

const OBJECTS: u64 = 200;

fn body(i: u64, generation: u64) -> Bytes {
    let len = 1000 + (i * 7919 % 60_000) as usize;
    let mut v = format!("object {i} generation {generation};").into_bytes();
    v.resize(len, (i ^ generation) as u8);
    Bytes::from(v)
}

fn wait_active_clean(d: &Dev, max: Duration) {
    let deadline = Instant::now() + max;
    while !d.all_active_clean() {
        if Instant::now() >= deadline {
            // Which PGs are stuck, and where their peering and recovery are.
            let dump = d.ok(&["pg", "dump"]);
            let stuck: Vec<String> = dump
                .lines()
                .filter(|l| l.contains('.') && !l.contains("active+clean"))
                .filter_map(|l| l.split_whitespace().next())
                .filter(|id| id.contains('.'))
                .take(3)
                .map(|id| d.ok(&["pg", "query", id]))
                .collect();
            panic!(
                "PGs not active+clean: {}\n{dump}\n{}",
                d.ok(&["pg", "stat"]),
                stuck.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// What the writer knows of each object: the last acknowledged generation,
/// and one sent but not acknowledged (it may or may not have applied).
type Ledger = Arc<Mutex<BTreeMap<u64, (u64, Option<u64>)>>>;

/// Every write's latency, and the failures with why.
#[derive(Default)]
struct Latencies {
    slowest: Duration,
    slowest_op: String,
    count: u64,
    failures: Vec<String>,
}

type Record = Arc<Mutex<Latencies>>;

async fn writer(client: Client, ledger: Ledger, record: Record, stop: Arc<AtomicBool>) {
    let pool = client.pool("rbd").unwrap();
    let mut generation = 0u64;
    let done = |i: u64, generation: u64, r: Result<(), shoal_client::Error>, took: Duration| {
        let mut rec = record.lock().unwrap();
        rec.count += 1;
        if took > rec.slowest {
            rec.slowest = took;
            rec.slowest_op = format!("o{i} generation {generation}");
        }
        match r {
            Ok(()) => {
                ledger.lock().unwrap().insert(i, (generation, None));
            }
            Err(e) => rec
                .failures
                .push(format!("o{i} generation {generation} after {took:?}: {e}")),
        }
    };
    while !stop.load(Ordering::Relaxed) {
        generation += 1;
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..OBJECTS {
            ledger.lock().unwrap().entry(i).or_insert((0, None)).1 = Some(generation);
            let pool = pool.clone();
            tasks.spawn(async move {
                let start = Instant::now();
                let r = pool.write_full(&format!("o{i}"), body(i, generation)).await;
                (i, r, start.elapsed())
            });
            while tasks.len() >= 16 {
                let (i, r, took) = tasks.join_next().await.unwrap().unwrap();
                done(i, generation, r, took);
            }
        }
        while let Some(r) = tasks.join_next().await {
            let (i, r, took) = r.unwrap();
            done(i, generation, r, took);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_kills_outs_and_a_new_osd() {
    let d = Dev::new("faults");
    // Two op shards per OSD: PGs on a thread of their own die with a SIGKILL too.
    d.ok(&[
        "--set",
        "osd_op_num_shards=2",
        "dev",
        "up",
        "--dir",
        d.dir(),
        "--osds",
        "5",
        "--store",
        "block",
        "--osd-bytes",
        "1000000000",
        // Every object the stores hold is the workload's.
        "--no-gateway",
    ]);
    let name = "client.admin".parse().unwrap();
    let mut o = ClientOptions::from_config(Some(&d.0.join("shoal.conf")), &name, &[]).unwrap();
    o.op_timeout = Duration::from_secs(90);
    let client = Client::connect(o).await.unwrap();
    let ledger: Ledger = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let record = Record::default();
    let w = tokio::spawn(writer(
        client.clone(),
        ledger.clone(),
        record.clone(),
        stop.clone(),
    ));
    let pause = |s: u64| tokio::time::sleep(Duration::from_secs(s));
    pause(3).await;
    // An OSD dies mid-write and comes back.
    d.kill9("osd.1");
    pause(4).await;
    start_osd(&d, 1);
    pause(4).await;
    // Another dies and is marked out: its PGs move to the others.
    d.kill9("osd.3");
    d.ok(&["osd", "out", "3"]);
    pause(4).await;
    // A new OSD joins.
    d.ok(&["osd", "mkfs", "--id", "5", "--store", "block"]);
    start_osd(&d, 5);
    pause(5).await;
    stop.store(true, Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(120), w)
        .await
        .unwrap()
        .unwrap();
    // No write fails, and none waits longer than failure detection (the
    // dev cluster's heartbeat grace, 10 s, though a SIGKILL is reported at
    // once) plus peering: a write in flight when a member of its PG dies
    // is answered or resent as soon as the PG's next interval begins.
    {
        let rec = record.lock().unwrap();
        assert!(
            rec.failures.is_empty(),
            "{} of {} writes failed: {:?}",
            rec.failures.len(),
            rec.count,
            rec.failures
        );
        assert!(
            rec.slowest < Duration::from_secs(15),
            "the slowest of {} writes ({}) took {:?}",
            rec.count,
            rec.slowest_op,
            rec.slowest
        );
        eprintln!(
            "{} writes, the slowest ({}) in {:?}",
            rec.count, rec.slowest_op, rec.slowest
        );
    }
    tokio::task::block_in_place(|| wait_active_clean(&d, Duration::from_secs(180)));

    // Every acknowledged write is there (or a later one sent meanwhile).
    let pool = client.pool("rbd").unwrap();
    let ledger = ledger.lock().unwrap().clone();
    assert_eq!(ledger.len() as u64, OBJECTS);
    for (i, (acked, pending)) in &ledger {
        assert!(*acked > 0, "o{i} never acknowledged");
        let got = pool.read(&format!("o{i}"), 0, 0).await.unwrap();
        let ok = got == body(*i, *acked) || pending.is_some_and(|g| got == body(*i, g));
        assert!(ok, "o{i}: acknowledged generation {acked} lost");
    }
    // Deep scrub of every PG finds nothing.
    let map = client.map().unwrap();
    let rbd = map.pool_by_name("rbd").unwrap();
    for seed in 0..rbd.pg_num {
        let pg = format!("{}.{seed:x}", rbd.id);
        let v = tokio::task::block_in_place(|| d.json(&["pg", "deep-scrub", &pg]));
        assert_eq!(v["errors"], 0, "pg {pg}: {v}");
    }
    let acting: BTreeMap<String, Vec<i64>> = {
        let dump = tokio::task::block_in_place(|| d.json(&["pg", "dump"]));
        dump["pg_stats"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let a = p["acting"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_i64().unwrap());
                (p["pgid"].as_str().unwrap().to_string(), a.collect())
            })
            .collect()
    };
    client.shutdown().await;
    tokio::task::block_in_place(|| d.ok(&["dev", "down", "--dir", d.dir()]));
    // Three identical copies of every object, on its acting set.
    let mut lists: BTreeMap<i64, BTreeMap<String, String>> = BTreeMap::new();
    for id in [0i64, 1, 2, 4, 5] {
        let store = d.0.join(format!("osd.{id}/store"));
        let out = d.ok(&["store", "ls", store.to_str().unwrap()]);
        let entries = out
            .lines()
            .map(|l| {
                let mut parts = l.splitn(3, ' ');
                let pg = parts.next().unwrap().to_string();
                let name = parts.next().unwrap().to_string();
                (format!("{pg} {name}"), parts.next().unwrap().to_string())
            })
            .collect();
        lists.insert(id, entries);
    }
    let mut objects = BTreeSet::new();
    for (pg, members) in &acting {
        assert_eq!(members.len(), 3, "pg {pg} acting {members:?}");
        let first = &lists[&members[0]];
        let mine: BTreeMap<&String, &String> = first
            .iter()
            .filter(|(k, _)| k.starts_with(&format!("{pg} ")))
            .collect();
        for m in &members[1..] {
            let theirs: BTreeMap<&String, &String> = lists[m]
                .iter()
                .filter(|(k, _)| k.starts_with(&format!("{pg} ")))
                .collect();
            assert_eq!(
                mine, theirs,
                "pg {pg}: osd.{} and osd.{m} differ",
                members[0]
            );
        }
        objects.extend(mine.keys().map(|k| k.to_string()));
    }
    assert_eq!(
        objects.len() as u64,
        OBJECTS,
        "every object on its acting set"
    );
}

//! An erasure-coded pool with real processes: one monitor and five
//! BlockStore OSDs, a 3+1 pool taking partial overwrites. A writer
//! overwrites slices of each object (each crossing stripe boundaries, so
//! every write is a read-modify-write) and records what was acknowledged.
//! Meanwhile an OSD is SIGKILLed mid-write and restarted, twice (its
//! shards' missed changes are rebuilt by decoding, changes that reached
//! fewer than k shards are rolled back), then one is SIGKILLed and marked
//! out, and a new OSD joins (shards move to other positions: members are
//! backfilled into their new positions while the shards they held serve
//! recovery as strays). At the end every PG is active+clean, every
//! acknowledged slice reads back, and deep scrub (chunk checksums on every
//! shard, coding chunks recomputed) finds nothing.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Dev, start_osd};
use shoal_client::{Client, ClientOptions};

const OBJECTS: u64 = 24;
const SLOTS: u64 = 8;
/// Bytes of one slice: not a multiple of the 12 KiB stripe, so slices
/// start and end inside stripes.
const SLOT: u64 = 5000;

fn slice(i: u64, slot: u64, generation: u64) -> Bytes {
    let mut v = format!("o{i} slot {slot} generation {generation};").into_bytes();
    v.resize(SLOT as usize, (i * 31 + slot * 7 + generation) as u8);
    Bytes::from(v)
}

fn wait_active_clean(d: &Dev, max: Duration) {
    let deadline = Instant::now() + max;
    while !d.all_active_clean() {
        assert!(
            Instant::now() < deadline,
            "PGs not active+clean: {}\n{}",
            d.ok(&["pg", "stat"]),
            d.ok(&["pg", "dump"])
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Per (object, slot): the last acknowledged generation and one sent but
/// not acknowledged (it may or may not have applied).
type Ledger = Arc<Mutex<BTreeMap<(u64, u64), (u64, Option<u64>)>>>;

async fn writer(
    client: Client,
    ledger: Ledger,
    failures: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
) {
    let pool = client.pool("ec").unwrap();
    let mut generation = 0u64;
    while !stop.load(Ordering::Relaxed) {
        generation += 1;
        let slot = generation % SLOTS;
        let done = |i: u64, r: Result<(), shoal_client::Error>| match r {
            Ok(()) => {
                ledger.lock().unwrap().insert((i, slot), (generation, None));
            }
            Err(e) => failures
                .lock()
                .unwrap()
                .push(format!("o{i} slot {slot}: {e}")),
        };
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..OBJECTS {
            ledger
                .lock()
                .unwrap()
                .entry((i, slot))
                .or_insert((0, None))
                .1 = Some(generation);
            let pool = pool.clone();
            tasks.spawn(async move {
                let r = pool
                    .write(&format!("o{i}"), slot * SLOT, slice(i, slot, generation))
                    .await;
                (i, r)
            });
            while tasks.len() >= 8 {
                let (i, r) = tasks.join_next().await.unwrap().unwrap();
                done(i, r);
            }
        }
        while let Some(r) = tasks.join_next().await {
            let (i, r) = r.unwrap();
            done(i, r);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasure_coded_overwrites_survive_sigkilled_osds() {
    let d = Dev::new("ec-faults");
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
    ]);
    d.ok(&[
        "osd",
        "erasure-code-profile",
        "set",
        "three-one",
        "k=3",
        "m=1",
        "crush-failure-domain=osd",
    ]);
    d.ok(&["osd", "pool", "create", "ec", "16", "erasure", "three-one"]);
    d.ok(&["osd", "pool", "set", "ec", "allow_ec_overwrites", "true"]);
    tokio::task::block_in_place(|| wait_active_clean(&d, Duration::from_secs(60)));
    let name = "client.admin".parse().unwrap();
    let mut o = ClientOptions::from_config(Some(&d.0.join("shoal.conf")), &name, &[]).unwrap();
    o.op_timeout = Duration::from_secs(120);
    let client = Client::connect(o).await.unwrap();
    let pool = client.pool("ec").unwrap();
    // Every object starts as generation 0 of each slot.
    for i in 0..OBJECTS {
        let mut whole = Vec::new();
        for slot in 0..SLOTS {
            whole.extend_from_slice(&slice(i, slot, 0));
        }
        pool.write_full(&format!("o{i}"), whole).await.unwrap();
    }
    let ledger: Ledger = Arc::default();
    for i in 0..OBJECTS {
        for slot in 0..SLOTS {
            ledger.lock().unwrap().insert((i, slot), (0, None));
        }
    }
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let w = tokio::spawn(writer(
        client.clone(),
        ledger.clone(),
        failures.clone(),
        stop.clone(),
    ));
    let pause = |s: u64| tokio::time::sleep(Duration::from_secs(s));
    pause(3).await;
    // An OSD dies mid-write and comes back (its PGs wait below min_size).
    d.kill9("osd.1");
    pause(3).await;
    start_osd(&d, 1);
    pause(5).await;
    // Another dies mid-write and comes back.
    d.kill9("osd.3");
    pause(3).await;
    start_osd(&d, 3);
    pause(5).await;
    // Another dies and is marked out: its shards move to the others.
    d.kill9("osd.2");
    d.ok(&["osd", "out", "2"]);
    pause(5).await;
    // A new OSD joins: shards move to it.
    d.ok(&["osd", "mkfs", "--id", "5", "--store", "block"]);
    start_osd(&d, 5);
    pause(6).await;
    stop.store(true, Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(240), w)
        .await
        .unwrap()
        .unwrap();
    {
        let f = failures.lock().unwrap();
        assert!(
            f.is_empty(),
            "{} writes failed: {:?}",
            f.len(),
            &f[..f.len().min(5)]
        );
    }
    tokio::task::block_in_place(|| wait_active_clean(&d, Duration::from_secs(240)));

    // Every acknowledged slice is there (or a later one sent meanwhile).
    let ledger = ledger.lock().unwrap().clone();
    let mut acked = 0;
    for i in 0..OBJECTS {
        let got = pool.read(&format!("o{i}"), 0, 0).await.unwrap();
        assert_eq!(got.len() as u64, SLOTS * SLOT, "o{i}");
        for slot in 0..SLOTS {
            let (a, pending) = ledger[&(i, slot)];
            acked += a;
            let have = got.slice((slot * SLOT) as usize..((slot + 1) * SLOT) as usize);
            let ok =
                have == slice(i, slot, a) || pending.is_some_and(|g| have == slice(i, slot, g));
            assert!(ok, "o{i} slot {slot}: acknowledged generation {a} lost");
        }
    }
    assert!(acked > 0, "no overwrite was acknowledged");
    // Deep scrub of every PG finds nothing: every chunk matches its
    // checksum, every object's coding chunks match its data.
    let map = client.map().unwrap();
    let ec = map.pool_by_name("ec").unwrap();
    for seed in 0..ec.pg_num {
        let pg = format!("{}.{seed:x}", ec.id);
        let v = tokio::task::block_in_place(|| d.json(&["pg", "deep-scrub", &pg]));
        assert_eq!(v["errors"], 0, "pg {pg}: {v}");
    }
    client.shutdown().await;
}

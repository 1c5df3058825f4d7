//! Big objects and big metadata heal, with real processes and BlockStores
//! (issue 14, point 5): on a 4-OSD dev cluster, an object with a large omap
//! (the issue's 30 values of 60 KB, set with `shoal rados setomapvals`),
//! an object with many omap keys, a large object and many small ones; a
//! replica is SIGKILLed and marked out; every PG gets active+clean (no
//! object is too big to copy), health shows no stalled recovery, deep
//! scrub finds nothing, every object reads back, and each PG's acting set
//! holds three identical copies.
//!
//! CI runs a sample (100 000 omap keys, a 16 MiB object, 2 000 small
//! objects); the issue's full size (1 000 000 omap keys of about 100 MB, a
//! 64 MiB object, 10 000 small objects) is the ignored test
//! `big_objects_heal_full_size` (`cargo test -p shoal --test heal --
//! --ignored`).

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::Dev;
use shoal_client::{Client, ClientOptions, Pool};

/// What one run writes.
struct Size {
    omap_keys: u64,
    big_bytes: usize,
    small: u64,
    osd_bytes: &'static str,
    clean_within: Duration,
}

fn omap_key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

/// About 100 bytes an entry with its key.
fn omap_value(i: u64) -> Vec<u8> {
    let mut v = format!("value of {i};").into_bytes();
    v.resize(89, b'a' + (i % 26) as u8);
    v
}

fn big_body(len: usize) -> Bytes {
    (0..len)
        .map(|i| (i % 251) as u8 ^ (i >> 20) as u8)
        .collect()
}

fn small_body(i: u64) -> Bytes {
    let mut v = format!("small {i};").into_bytes();
    v.resize(1000 + (i % 3000) as usize, i as u8);
    Bytes::from(v)
}

/// Waits for every PG to be active+clean; a recovery that stalls on the
/// way must say so in health (it fails the test at once).
fn wait_active_clean(d: &Dev, max: Duration) {
    let deadline = Instant::now() + max;
    while !d.all_active_clean() {
        let health = d.json(&["health", "detail"]);
        let stalled = health["checks"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["code"] == "PG_RECOVERY_STALLED");
        if let Some(s) = stalled {
            // A step may fail once (a peer restarting); a stall that lasts
            // is a failure.
            let lasting = s["detail"].to_string().contains(" failed tries in ")
                && !s["detail"].to_string().contains("(1 failed tries");
            assert!(!lasting, "recovery stalled: {s}");
        }
        assert!(
            Instant::now() < deadline,
            "PGs not active+clean within {max:?}: {}\n{}",
            d.ok(&["pg", "stat"]),
            d.ok(&["health", "detail"])
        );
        std::thread::sleep(Duration::from_millis(1000));
    }
}

async fn write_omap(pool: &Pool, oid: &str, keys: u64) {
    let mut tasks = tokio::task::JoinSet::new();
    let batch = 2500;
    for start in (0..keys).step_by(batch) {
        let entries: Vec<(Vec<u8>, Vec<u8>)> = (start..keys.min(start + batch as u64))
            .map(|i| (omap_key(i), omap_value(i)))
            .collect();
        let (pool, oid) = (pool.clone(), oid.to_string());
        tasks.spawn(async move { pool.omap_set(&oid, &entries).await });
        while tasks.len() >= 4 {
            tasks.join_next().await.unwrap().unwrap().unwrap();
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap().unwrap();
    }
}

async fn write_big(pool: &Pool, oid: &str, body: &Bytes) {
    let chunk = 4 << 20;
    for off in (0..body.len()).step_by(chunk) {
        let part = body.slice(off..body.len().min(off + chunk));
        pool.write(oid, off as u64, part).await.unwrap();
    }
}

async fn write_small(pool: &Pool, n: u64) {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let pool = pool.clone();
        tasks.spawn(async move { pool.write_full(&format!("small{i}"), small_body(i)).await });
        while tasks.len() >= 16 {
            tasks.join_next().await.unwrap().unwrap().unwrap();
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap().unwrap();
    }
}

/// Every omap entry of `oid`, page by page (`page` entries: each reply
/// within a frame), checked against `want(i)`.
async fn check_omap(
    pool: &Pool,
    oid: &str,
    page: u32,
    keys: u64,
    want: impl Fn(u64) -> (Vec<u8>, Vec<u8>),
) {
    let mut after = Vec::new();
    let mut seen = 0u64;
    loop {
        let got = pool.omap_get_vals(oid, &after, b"", page).await.unwrap();
        for (k, v) in &got.entries {
            let (wk, wv) = want(seen);
            assert_eq!(k.as_ref(), wk.as_slice(), "{oid}: key {seen}");
            assert!(v.as_ref() == wv.as_slice(), "{oid}: value {seen}");
            seen += 1;
        }
        match got.entries.last() {
            Some((k, _)) if got.more => after = k.to_vec(),
            _ => break,
        }
    }
    assert_eq!(seen, keys, "{oid}: omap keys");
}

fn issue_entry(i: u64) -> (Vec<u8>, Vec<u8>) {
    let value = vec![b'a' + i as u8; 60_000];
    (format!("v{i:02}").into_bytes(), value)
}

/// `store ls` of each OSD, by `pg name` → `size data_crc meta_crc`.
fn store_lists(d: &Dev, osds: &[i64]) -> BTreeMap<i64, BTreeMap<String, String>> {
    let mut lists = BTreeMap::new();
    for id in osds {
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
        lists.insert(*id, entries);
    }
    lists
}

async fn run(tag: &str, size: Size) {
    let d = Dev::new(tag);
    tokio::task::block_in_place(|| {
        d.ok(&[
            "dev",
            "up",
            "--dir",
            d.dir(),
            "--osds",
            "4",
            "--store",
            "block",
            "--osd-bytes",
            size.osd_bytes,
            // Every object the stores hold is the test's.
            "--no-gateway",
        ])
    });
    let name = "client.admin".parse().unwrap();
    let mut o = ClientOptions::from_config(Some(&d.0.join("shoal.conf")), &name, &[]).unwrap();
    o.op_timeout = Duration::from_secs(120);
    let client = Client::connect(o).await.unwrap();
    let pool = client.pool("rbd").unwrap();
    // The issue's object: 30 omap values of 60 KB (1.8 MB), set from the
    // command line.
    let mut lines = Vec::new();
    for i in 0..30 {
        let (k, v) = issue_entry(i);
        lines.extend_from_slice(&k);
        lines.push(b'\t');
        lines.extend_from_slice(&v);
        lines.push(b'\n');
    }
    let file = d.0.join("omap.tsv");
    std::fs::write(&file, lines).unwrap();
    let out = tokio::task::block_in_place(|| {
        d.ok(&[
            "rados",
            "-p",
            "rbd",
            "setomapvals",
            "issue",
            file.to_str().unwrap(),
        ])
    });
    assert!(out.contains("30 omap values set"), "{out}");
    write_omap(&pool, "omap", size.omap_keys).await;
    let big = big_body(size.big_bytes);
    write_big(&pool, "big", &big).await;
    write_small(&pool, size.small).await;
    // A replica of the omap object is killed and marked out.
    let m = tokio::task::block_in_place(|| d.json(&["osd", "map", "rbd", "omap"]));
    let victim = m["acting"][1].as_i64().unwrap();
    d.kill9(&format!("osd.{victim}"));
    tokio::task::block_in_place(|| d.ok(&["osd", "out", &victim.to_string()]));
    let started = Instant::now();
    tokio::task::block_in_place(|| wait_active_clean(&d, size.clean_within));
    eprintln!(
        "{tag}: active+clean {:.1} s after osd.{victim} was killed and marked out",
        started.elapsed().as_secs_f64()
    );
    // Everything reads back.
    let entry = |i| (omap_key(i), omap_value(i));
    check_omap(&pool, "omap", 4000, size.omap_keys, entry).await;
    check_omap(&pool, "issue", 8, 30, issue_entry).await;
    assert!(
        pool.read("big", 0, 0).await.unwrap() == big,
        "big reads intact"
    );
    for i in (0..size.small).step_by(97) {
        let got = pool.read(&format!("small{i}"), 0, 0).await.unwrap();
        assert_eq!(got, small_body(i), "small{i}");
    }
    // Deep scrub of every PG finds nothing.
    let map = client.map().unwrap();
    let rbd = map.pool_by_name("rbd").unwrap();
    for seed in 0..rbd.pg_num {
        let pg = format!("{}.{seed:x}", rbd.id);
        let v = tokio::task::block_in_place(|| d.json(&["pg", "deep-scrub", &pg]));
        assert_eq!(v["errors"], 0, "pg {pg}: {v}");
    }
    let dump = tokio::task::block_in_place(|| d.json(&["pg", "dump"]));
    let acting: BTreeMap<String, Vec<i64>> = dump["pg_stats"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let a = p["acting"].as_array().unwrap().iter();
            let a = a.map(|x| x.as_i64().unwrap()).collect();
            (p["pgid"].as_str().unwrap().to_string(), a)
        })
        .collect();
    client.shutdown().await;
    tokio::task::block_in_place(|| d.ok(&["dev", "down", "--dir", d.dir()]));
    // Three identical copies of every object on its acting set, and no
    // half-made copy anywhere.
    let live: Vec<i64> = (0..4).filter(|o| *o != victim).collect();
    let lists = tokio::task::block_in_place(|| store_lists(&d, &live));
    let mut objects = 0u64;
    for (pg, members) in &acting {
        assert_eq!(members.len(), 3, "pg {pg} acting {members:?}");
        assert!(!members.contains(&victim), "pg {pg} acting {members:?}");
        let of = |m: &i64| -> BTreeMap<&String, &String> {
            lists[m]
                .iter()
                .filter(|(k, _)| k.starts_with(&format!("{pg} ")))
                .collect()
        };
        let first = of(&members[0]);
        for m in &members[1..] {
            assert_eq!(
                first,
                of(m),
                "pg {pg}: osd.{} and osd.{m} differ",
                members[0]
            );
        }
        objects += first.len() as u64;
    }
    assert_eq!(objects, size.small + 3, "every object on its acting set");
    for (id, list) in &lists {
        assert!(
            !list.keys().any(|k| k.contains("tmp.")),
            "osd.{id} keeps a temporary copy"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_objects_and_big_omaps_heal_after_a_replica_is_killed_and_marked_out() {
    run(
        "heal",
        Size {
            omap_keys: 100_000,
            big_bytes: 16 << 20,
            small: 2_000,
            osd_bytes: "1073741824",
            clean_within: Duration::from_secs(300),
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the issue's full size: several minutes in a debug build"]
async fn big_objects_heal_full_size() {
    run(
        "heal-full",
        Size {
            omap_keys: 1_000_000,
            big_bytes: 64 << 20,
            small: 10_000,
            osd_bytes: "4294967296",
            clean_within: Duration::from_secs(900),
        },
    )
    .await;
}

//! Scrub with real processes and BlockStores: a bit flipped in one
//! replica's on-disk data block is found by `shoal pg deep-scrub` (the
//! store's checksum refuses the block), reported in `shoal health detail`
//! with the object's name, and `shoal pg repair` copies the authoritative
//! copy back; a second deep scrub is clean and the object reads intact.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;

use common::Dev;

/// 256 KiB that occur nowhere else in a store.
fn pattern() -> Vec<u8> {
    let mut v = Vec::with_capacity(256 << 10);
    let mut i = 0u32;
    while v.len() < 256 << 10 {
        v.extend_from_slice(format!("shoal-scrub-test-{i:08}|").as_bytes());
        i += 1;
    }
    v.truncate(256 << 10);
    v
}

/// Flips one bit of the first copy of `needle` in `file`; false if absent.
fn flip_bit_in(file: &PathBuf, needle: &[u8]) -> bool {
    let mut data = std::fs::read(file).unwrap();
    let probe = &needle[..64];
    let Some(at) = data.windows(probe.len()).position(|w| w == probe) else {
        return false;
    };
    data[at + 1000] ^= 0x10;
    std::fs::write(file, data).unwrap();
    true
}

fn health_detail(d: &Dev) -> Value {
    d.json(&["health", "detail"])
}

#[test]
fn deep_scrub_finds_a_flipped_bit_and_repair_fixes_it() {
    let d = Dev::new("scrub");
    d.ok(&[
        "dev",
        "up",
        "--dir",
        d.dir(),
        "--osds",
        "3",
        "--store",
        "block",
        "--osd-bytes",
        "134217728",
    ]);
    let body = pattern();
    let file = d.0.join("victim.bin");
    std::fs::write(&file, &body).unwrap();
    d.ok(&[
        "rados",
        "-p",
        "rbd",
        "put",
        "victim",
        file.to_str().unwrap(),
    ]);
    let m = d.json(&["osd", "map", "rbd", "victim"]);
    let pgid = m["pgid"].as_str().unwrap().to_string();
    // Corrupt the copy of a replica (not the primary), with every daemon stopped.
    let victim_osd = m["acting"][1].as_i64().unwrap();
    d.ok(&["dev", "down", "--dir", d.dir()]);
    let block = d.0.join(format!("osd.{victim_osd}/store/block"));
    assert!(
        flip_bit_in(&block, &body),
        "the object's data is in {}",
        block.display()
    );
    d.ok(&["dev", "up", "--dir", d.dir()]);
    // Deep scrub finds it, naming the replica and the object.
    let v = d.json(&["pg", "deep-scrub", &pgid]);
    assert_eq!(v["errors"], 1, "{v}");
    assert_eq!(v["inconsistent"][0]["object"], "victim", "{v}");
    assert_eq!(
        v["inconsistent"][0]["bad"],
        serde_json::json!([victim_osd]),
        "{v}"
    );
    // Health reports it once the primary's statistics reach the monitors.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let h = health_detail(&d);
        let text = h.to_string();
        if h["status"] == "HEALTH_ERR" && text.contains("victim") && text.contains("PG_DAMAGED") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "health never reported the damage: {h}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // Repair copies the good copy over the bad one.
    let v = d.json(&["pg", "repair", &pgid]);
    assert_eq!(v["repaired"], 1, "{v}");
    let v = d.json(&["pg", "deep-scrub", &pgid]);
    assert_eq!(v["errors"], 0, "{v}");
    let out = d.run(&["rados", "-p", "rbd", "get", "victim", "-"]);
    assert!(out.stdout == body, "the object reads intact");
    let q = d.json(&["pg", "query", &pgid]);
    assert_eq!(q["pgid"], pgid.as_str());
    assert!(
        q["scrub"]["last_deep_scrub_ms"].as_u64().unwrap() > 0,
        "{q}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while health_detail(&d)["status"] == "HEALTH_ERR" {
        assert!(
            Instant::now() < deadline,
            "health stayed in error after the repair"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

//! OSDs filling up, as an operator meets it: three 320 MiB BlockStore
//! OSDs filled with 4 MiB `shoal rados put`s. Health escalates through
//! OSD_NEARFULL and OSD_BACKFILLFULL (with POOL_NEARFULL) to OSD_FULL
//! (HEALTH_ERR, with POOL_FULL), each naming the OSD or pool and its use,
//! in `health detail`, `status` and the manager's `/metrics`; the write
//! past the full ratio is refused with an error that says so, and every
//! acknowledged object reads back intact. Deleting frees the space: every
//! check clears and writes resume within a minute.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{Dev, http_get, until};
use serde_json::Value;

const SPACE: [&str; 5] = [
    "OSD_NEARFULL",
    "OSD_BACKFILLFULL",
    "OSD_FULL",
    "POOL_NEARFULL",
    "POOL_FULL",
];

fn checks(d: &Dev) -> Vec<Value> {
    d.json(&["health", "detail"])["checks"]
        .as_array()
        .unwrap()
        .clone()
}

fn codes(d: &Dev) -> BTreeSet<String> {
    checks(d)
        .iter()
        .map(|c| c["code"].as_str().unwrap().to_string())
        .collect()
}

/// A 4 MiB object's bytes, different for each `i`.
fn object(i: u32) -> Vec<u8> {
    let mut b: Vec<u8> = (0..4u32 << 20)
        .map(|j| (j.wrapping_mul(31) ^ i) as u8)
        .collect();
    b[..4].copy_from_slice(&i.to_le_bytes());
    b
}

#[test]
fn full_osds_are_reported_refuse_writes_and_clear_when_freed() {
    let d = Dev::new("full");
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
        "335544320",
        "--no-gateway",
        "--set",
        "osd_pg_stats_interval_ms=300",
        "--set",
        "mgr_stats_period_ms=500",
    ]);
    until("HEALTH_OK", 60, || {
        d.json(&["health"])["status"] == "HEALTH_OK"
    });
    let file = d.0.join("obj");
    let path = file.to_str().unwrap();

    // Fill until refused, noting every space check seen on the way.
    let mut seen = BTreeSet::new();
    let mut acked = 0u32;
    let refusal = loop {
        assert!(acked < 120, "{acked} objects of 4 MiB on 320 MiB OSDs");
        std::fs::write(&file, object(acked)).unwrap();
        let out = d.run(&["rados", "-p", "rbd", "put", &format!("o{acked}"), path]);
        if !out.status.success() {
            break String::from_utf8_lossy(&out.stderr).into_owned();
        }
        acked += 1;
        let now = codes(&d);
        if now.iter().any(|c| SPACE.contains(&c.as_str())) {
            // Near the top: give each report time to land, so that no
            // level is passed between two looks.
            std::thread::sleep(Duration::from_millis(700));
            seen.extend(codes(&d));
        }
        seen.extend(now);
    };
    eprintln!("{acked} objects acknowledged; refused with: {refusal}");
    assert!(
        refusal.contains("no space") && refusal.contains("is full"),
        "{refusal}"
    );
    assert!(acked >= 60, "refused after only {acked} objects");
    until("OSD_FULL", 30, || codes(&d).contains("OSD_FULL"));
    seen.extend(codes(&d));
    for code in SPACE {
        assert!(seen.contains(code), "{code} never raised: saw {seen:?}");
    }

    // What the operator sees.
    let health = d.json(&["health", "detail"]);
    assert_eq!(health["status"], "HEALTH_ERR", "{health}");
    let full = checks(&d)
        .into_iter()
        .find(|c| c["code"] == "OSD_FULL")
        .unwrap();
    let detail = full["detail"][0].as_str().unwrap();
    assert!(
        detail.starts_with("osd.") && detail.contains("is full: ") && detail.contains("% used"),
        "{full}"
    );
    let pool = checks(&d)
        .into_iter()
        .find(|c| c["code"] == "POOL_FULL")
        .unwrap();
    assert!(
        pool["detail"][0]
            .as_str()
            .unwrap()
            .starts_with("pool 'rbd' is full (no space)"),
        "{pool}"
    );
    let text = d.ok(&["health", "detail"]);
    assert!(text.contains("[ERR] OSD_FULL"), "{text}");
    let status = d.ok(&["status"]);
    assert!(status.contains("full osd(s)"), "{status}");
    let mgr = d.addr_of("mgr.x");
    until("OSD_FULL in /metrics", 30, || {
        http_get(&mgr, "/metrics")
            .2
            .lines()
            .any(|l| l.starts_with("shoal_health_check{") && l.contains("code=\"OSD_FULL\""))
    });

    // Every acknowledged object is there, whole.
    let back = d.0.join("back");
    for i in 0..acked {
        d.ok(&[
            "rados",
            "-p",
            "rbd",
            "get",
            &format!("o{i}"),
            back.to_str().unwrap(),
        ]);
        assert!(std::fs::read(&back).unwrap() == object(i), "o{i} differs");
    }

    // Freed: the checks clear and writes resume within a minute.
    for i in 0..acked / 2 {
        d.ok(&["rados", "-p", "rbd", "rm", &format!("o{i}")]);
    }
    let freed = Instant::now();
    until("the space checks cleared", 60, || {
        codes(&d).iter().all(|c| !SPACE.contains(&c.as_str()))
    });
    std::fs::write(&file, object(1000)).unwrap();
    until("a write after freeing", 60, || {
        d.run(&["rados", "-p", "rbd", "put", "after", path])
            .status
            .success()
    });
    eprintln!("writes resumed {:?} after the deletes", freed.elapsed());
    assert!(freed.elapsed() < Duration::from_secs(60));
    until("HEALTH_OK", 60, || {
        d.json(&["health"])["status"] == "HEALTH_OK"
    });
    until("no OSD_FULL in /metrics", 30, || {
        !http_get(&mgr, "/metrics").2.contains("code=\"OSD_FULL\"")
    });
}

//! Pool quotas as an operator meets them (Ceph's `osd pool set-quota`):
//! a pool at its object or byte quota refuses writes that add to it with
//! an error that says so, takes deletes, warns POOL_FULL, and writes again
//! once under it; the quota and its state show in `get-quota`, `df` and
//! the manager's `/metrics`.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

mod common;

use common::{Dev, http_get, until};

fn pool_full(d: &Dev) -> bool {
    d.json(&["health"])["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["code"] == "POOL_FULL")
}

#[test]
fn a_pool_at_its_quota_refuses_writes_and_takes_deletes() {
    let d = Dev::new("quota");
    d.up_mem(&[
        "--no-gateway",
        "--set",
        "osd_pg_stats_interval_ms=500",
        "--set",
        "mgr_stats_period_ms=500",
    ]);
    let file = d.0.join("4k");
    std::fs::write(&file, vec![7u8; 4096]).unwrap();
    let file = file.to_str().unwrap();

    // Bad quotas are refused.
    for bad in [["max_objects", "many"], ["max_bytes", "10Q"]] {
        let out = d.run(&["osd", "pool", "set-quota", "rbd", bad[0], bad[1]]);
        assert!(!out.status.success(), "{bad:?} accepted");
    }
    let out = d.run(&["osd", "pool", "set-quota", "nopool", "max_objects", "1"]);
    assert!(!out.status.success());

    d.ok(&["osd", "pool", "set-quota", "rbd", "max_objects", "5"]);
    let q = d.json(&["osd", "pool", "get-quota", "rbd"]);
    assert_eq!(q["quota_max_objects"], 5, "{q}");
    assert_eq!(q["quota_max_bytes"], 0, "{q}");
    for i in 0..5 {
        d.ok(&["rados", "-p", "rbd", "put", &format!("o{i}"), file]);
    }
    until("POOL_FULL", 30, || pool_full(&d));
    assert_eq!(d.json(&["osd", "pool", "get-quota", "rbd"])["full"], true);
    // A write that adds is refused, saying why; an overwrite too.
    for name in ["o5", "o0"] {
        let out = d.run(&["rados", "-p", "rbd", "put", name, file]);
        assert!(!out.status.success(), "{name} written past the quota");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("quota"), "{err}");
    }
    // Reads and deletes pass.
    d.ok(&["rados", "-p", "rbd", "stat", "o1"]);
    d.ok(&["rados", "-p", "rbd", "rm", "o1"]);
    until("back under the quota", 30, || !pool_full(&d));
    d.ok(&["rados", "-p", "rbd", "put", "o5", file]);

    // Shown in df and in the manager's metrics.
    let df = d.json(&["df"]);
    let rbd = df["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "rbd")
        .unwrap();
    assert_eq!(rbd["quota"]["max_objects"], 5, "{rbd}");
    let mgr = d.addr_of("mgr.x");
    until("the quota in /metrics", 30, || {
        http_get(&mgr, "/metrics")
            .2
            .lines()
            .any(|l| l.starts_with("shoal_pool_quota_objects{pool=\"rbd\"") && l.ends_with(" 5"))
    });

    // A byte quota: 5 objects of 4 KiB are over 16 KiB.
    d.ok(&["osd", "pool", "set-quota", "rbd", "max_objects", "0"]);
    d.ok(&["osd", "pool", "set-quota", "rbd", "max_bytes", "16K"]);
    assert_eq!(
        d.json(&["osd", "pool", "get-quota", "rbd"])["quota_max_bytes"],
        16384
    );
    until("POOL_FULL by bytes", 30, || pool_full(&d));
    let out = d.run(&["rados", "-p", "rbd", "put", "o6", file]);
    assert!(!out.status.success());
    // No quota: writes again.
    d.ok(&["osd", "pool", "set-quota", "rbd", "max_bytes", "0"]);
    until("no quota, not full", 30, || !pool_full(&d));
    d.ok(&["rados", "-p", "rbd", "put", "o6", file]);
}

//! PG split online, as an operator does it: `osd pool set NAME pg_num N`
//! on a replicated and an erasure-coded pool while clients write and read
//! them (`shoal bench history`: every acknowledged write remembered, every
//! read checked against it). Each OSD splits its copies in place; the
//! leader then moves `pgp_num` after `pg_num` step by step, and the
//! children move to their own OSDs. No client op fails, the history holds,
//! every object reads back and the counts add up.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use common::{Dev, SHOAL, with_test_sets};

/// Each pool's (pg_num, pgp_num).
fn counts(d: &Dev) -> BTreeMap<String, (u64, u64)> {
    let v = d.json(&["osd", "pool", "ls", "detail"]);
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let n = |k: &str| p[k].as_u64().unwrap();
            (
                p["name"].as_str().unwrap().to_string(),
                (n("pg_num"), n("pgp_num")),
            )
        })
        .collect()
}

/// The objects the primaries report for `pool`'s PGs, and how many PGs.
fn reported(d: &Dev, pool: &str) -> (u64, usize) {
    let v = d.json(&["pg", "ls-by-pool", pool]);
    let rows = v["pg_stats"].as_array().unwrap();
    let objects = rows.iter().map(|r| r["objects"].as_u64().unwrap()).sum();
    (objects, rows.len())
}

/// Three OSDs on block stores reporting every half second, with `more`
/// arguments for `dev up`; the balancer off (the moves are the split's).
fn up3(d: &Dev, more: &[&str]) {
    let mut args = vec![
        "dev",
        "up",
        "--dir",
        d.dir(),
        "--osds",
        "3",
        "--store",
        "block",
        "--no-gateway",
        "--set",
        "osd_pg_stats_interval_ms=500",
        "--set",
        "mgr_stats_period_ms=500",
    ];
    args.extend_from_slice(more);
    d.ok(&args);
    d.ok(&["balancer", "off"]);
}

#[test]
fn replicated_and_erasure_coded_pools_split_under_load_and_their_placement_follows() {
    let d = Dev::new("split");
    up3(&d, &[]);
    // Steps of a quarter of the PGs, so the test moves in a few.
    d.ok(&[
        "config",
        "set",
        "global",
        "mon_target_max_misplaced_ratio",
        "0.25",
    ]);
    d.ok(&[
        "osd",
        "erasure-code-profile",
        "set",
        "p21",
        "k=2",
        "m=1",
        "crush-failure-domain=osd",
    ]);
    d.ok(&["osd", "pool", "create", "r", "8"]);
    d.ok(&["osd", "pool", "create", "e", "8", "erasure", "p21"]);
    // Objects written before, read back after.
    let file = d.0.join("obj");
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&file, &data).unwrap();
    for pool in ["r", "e"] {
        for i in 0..12 {
            let name = format!("before{i}");
            d.ok(&["rados", "-p", pool, "put", &name, file.to_str().unwrap()]);
        }
    }
    // Clients on both pools throughout.
    let benches: Vec<_> = ["r", "e"]
        .iter()
        .map(|pool| {
            let args = ["bench", "-p", pool, "history", "30", "--objects", "64"];
            Command::new(SHOAL)
                .args(with_test_sets(&args))
                .env("SHOAL_CONF", d.0.join("shoal.conf"))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_secs(6));
    d.ok(&["osd", "pool", "set", "r", "pg_num", "32"]);
    d.ok(&["osd", "pool", "set", "e", "pg_num", "32"]);
    let now = counts(&d);
    assert_eq!(now["r"].0, 32, "{now:?}");
    assert_eq!(now["e"].0, 32, "{now:?}");
    // pgp_num follows in steps; the children settle on their own OSDs.
    d.until("pgp_num at 32 and every PG clean", 180, || {
        let c = counts(&d);
        c["r"] == (32, 32) && c["e"] == (32, 32) && d.all_active_clean()
    });
    for (pool, b) in ["r", "e"].iter().zip(benches) {
        let out = b.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "history on {pool}: {text}");
        assert!(
            text.contains("writes acknowledged, 0 failed") && text.contains("reads, 0 failed"),
            "history on {pool}: {text}"
        );
    }
    let back = d.0.join("back");
    for pool in ["r", "e"] {
        for i in 0..12 {
            let name = format!("before{i}");
            d.ok(&["rados", "-p", pool, "get", &name, back.to_str().unwrap()]);
            assert!(std::fs::read(&back).unwrap() == data, "{pool}/{name}");
        }
        // The PGs' counts, split between parents and children, add up
        // to what the pool lists.
        let listed = d.ok(&["rados", "-p", pool, "ls"]).lines().count() as u64;
        let (objects, pgs) = reported(&d, pool);
        assert_eq!(pgs, 32, "{pool}");
        assert_eq!(
            objects, listed,
            "{pool}: the PGs' objects against the listing"
        );
    }
    // Merging is not there yet: said so, nothing changes.
    let out = d.run(&["osd", "pool", "set", "r", "pg_num", "16"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("merging PGs is not supported"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = d.run(&["osd", "pool", "set", "r", "pgp_num", "40"]);
    assert!(!out.status.success());
    assert_eq!(counts(&d)["r"], (32, 32));
}

/// An OSD down while its pool splits (block stores, where its copies
/// wait as they were) splits them when it starts again, from the count it
/// recorded, and the PGs come clean with every object.
#[test]
fn an_osd_down_during_a_split_splits_its_copies_when_it_returns() {
    let d = Dev::new("split-restart");
    up3(&d, &[]);
    d.ok(&["osd", "pool", "create", "r", "4"]);
    let file = d.0.join("obj");
    let data: Vec<u8> = (0..70_000u32).map(|i| (i * 13 % 241) as u8).collect();
    std::fs::write(&file, &data).unwrap();
    for i in 0..24 {
        let name = format!("o{i}");
        d.ok(&["rados", "-p", "r", "put", &name, file.to_str().unwrap()]);
    }
    d.until("the cluster clean after the writes", 90, || {
        d.all_active_clean()
    });
    d.kill9("osd.2");
    d.ok(&["osd", "down", "2"]);
    d.ok(&["osd", "pool", "set", "r", "pg_num", "16"]);
    // Written while osd.2 is away: it must catch up on them, in children.
    for i in 24..32 {
        let name = format!("o{i}");
        d.ok(&["rados", "-p", "r", "put", &name, file.to_str().unwrap()]);
    }
    common::start_osd(&d, 2);
    d.until(
        "every PG clean with osd.2 back and pgp_num at 16",
        180,
        || counts(&d)["r"] == (16, 16) && d.all_active_clean(),
    );
    let back = d.0.join("back");
    for i in 0..32 {
        let name = format!("o{i}");
        d.ok(&["rados", "-p", "r", "get", &name, back.to_str().unwrap()]);
        assert!(std::fs::read(&back).unwrap() == data, "{name}");
    }
    let (objects, pgs) = reported(&d, "r");
    assert_eq!((objects, pgs), (32, 16));
    // osd.2's log says it split what it held.
    let log = std::fs::read_to_string(d.0.join("out/osd.2.log")).unwrap();
    assert!(
        log.contains("split: the children's objects moved") && log.contains("old=4 new=16"),
        "osd.2 split nothing after its restart"
    );
}

/// The PG states seen, by name, from `pg stat`.
fn pg_states(d: &Dev) -> Vec<String> {
    let v = d.json(&["pg", "stat"]);
    v["num_pg_by_state"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect()
}

/// The autoscaler, on by default: a pool made with 8 PGs grows to 32 as
/// clients fill it (its share of the raw space calls for 3× more), while
/// `bench history` checks every op and no PG is ever undersized, down or
/// incomplete; placement follows in steps. Setting `pg_num` by hand turns the pool's mode off;
/// a pool in `warn` mode gets POOL_TOO_FEW_PGS instead of a split.
#[test]
fn a_pool_grows_from_8_pgs_as_it_is_filled_and_stays_clean() {
    let d = Dev::new("autoscale");
    // 320 MiB OSDs, so tens of MiB are a share of the space worth PGs.
    up3(&d, &["--osd-bytes", "335544320"]);
    for (k, v) in [
        ("mon_pg_autoscale_interval_ms", "1000"),
        ("mon_target_max_misplaced_ratio", "0.25"),
    ] {
        d.ok(&["config", "set", "global", k, v]);
    }
    d.ok(&["osd", "pool", "create", "g", "8"]);
    let mode = d.json(&["osd", "pool", "get", "g", "pg_autoscale_mode"]);
    assert_eq!(mode["pg_autoscale_mode"], "on", "{mode}");
    let status = |d: &Dev| -> serde_json::Value {
        let v = d.json(&["osd", "pool", "autoscale-status"]);
        v.as_array()
            .unwrap()
            .iter()
            .find(|p| p["pool_name"] == "g")
            .cloned()
            .unwrap()
    };
    let empty = status(&d);
    assert_eq!(
        (&empty["pg_num_ideal"], &empty["would_adjust"]),
        (&serde_json::json!(8), &serde_json::json!(false)),
        "{empty}"
    );

    let history = Command::new(SHOAL)
        .args(with_test_sets(&[
            "bench",
            "-p",
            "g",
            "history",
            "40",
            "--objects",
            "64",
        ]))
        .env("SHOAL_CONF", d.0.join("shoal.conf"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // 24 objects of 4 MiB: 96 MiB stored, 288 MiB of the 960 raw, a
    // share of 0.3: 0.3 × 100 PGs an OSD × 3 OSDs / 3 copies = 30 → 32.
    let file = d.0.join("obj");
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 253) as u8).collect();
    std::fs::write(&file, &data).unwrap();
    for i in 0..24 {
        let name = format!("big{i}");
        d.ok(&["rados", "-p", "g", "put", &name, file.to_str().unwrap()]);
    }
    let mut seen = std::collections::BTreeSet::new();
    d.until(
        "pool g grown to 32 PGs, placed, every PG clean",
        180,
        || {
            seen.extend(pg_states(&d));
            counts(&d)["g"] == (32, 32) && d.all_active_clean()
        },
    );
    let bad: Vec<&String> = seen
        .iter()
        .filter(|s| {
            // (`stale` and `unknown` show for a moment while the
            // children's first reports come in; `recovering+degraded` for
            // a moment under load, when a write in flight crosses the
            // interval change and a member takes it from the primary's
            // log, as in Ceph. No copy is ever missing from an acting set,
            // and no PG stops.)
            ["undersized", "incomplete", "down", "inconsistent", "peered"]
                .iter()
                .any(|w| s.split('+').any(|p| p == *w))
        })
        .collect();
    assert!(bad.is_empty(), "PG states while growing: {seen:?}");
    let out = history.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "history: {text}");
    assert!(
        text.contains("writes acknowledged, 0 failed") && text.contains("reads, 0 failed"),
        "history: {text}"
    );
    let grown = status(&d);
    assert_eq!(grown["pg_num_target"], 32, "{grown}");
    assert_eq!(grown["would_adjust"], false, "{grown}");
    assert_eq!(grown["pg_autoscale_mode"], "on", "{grown}");
    let back = d.0.join("back");
    for i in [0, 11, 23] {
        let name = format!("big{i}");
        d.ok(&["rados", "-p", "g", "get", &name, back.to_str().unwrap()]);
        assert!(std::fs::read(&back).unwrap() == data, "{name}");
    }
    // The leader's log says what it grew.
    let logs: String = std::fs::read_dir(d.0.join("out"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("mon."))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    assert!(
        logs.contains("autoscaler: growing"),
        "no monitor's log says it grew g"
    );

    // pg_num set by hand: the operator's count, the autoscaler off.
    d.ok(&["osd", "pool", "set", "g", "pg_num", "64"]);
    let mode = d.json(&["osd", "pool", "get", "g", "pg_autoscale_mode"]);
    assert_eq!(mode["pg_autoscale_mode"], "off", "{mode}");
    let detail = d.ok(&["osd", "pool", "ls", "detail"]);
    assert!(detail.contains("autoscale_mode off"), "{detail}");

    // warn, as the default for new pools: a health check, no split.
    d.ok(&[
        "config",
        "set",
        "global",
        "osd_pool_default_pg_autoscale_mode",
        "warn",
    ]);
    d.ok(&["osd", "pool", "create", "w", "2"]);
    d.until("POOL_TOO_FEW_PGS for pool w", 60, || {
        d.json(&["health", "detail"])["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| {
                c["code"] == "POOL_TOO_FEW_PGS"
                    && c["detail"][0] == "Pool w has 2 placement groups, should have 8"
            })
    });
    assert_eq!(counts(&d)["w"], (2, 2));
    let out = d.run(&["osd", "pool", "set", "w", "pg_autoscale_mode", "sometimes"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("on, warn or off"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // What the operator says at creation, in the same map change: a
    // pg_num_min above the count is grown to (mode on, over the warn
    // default); a bulk pool with a ratio and a bound shows them.
    d.ok(&[
        "osd",
        "pool",
        "create",
        "m",
        "8",
        "--autoscale-mode",
        "on",
        "--pg-num-min",
        "16",
    ]);
    d.ok(&[
        "osd",
        "pool",
        "create",
        "bk",
        "4",
        "--bulk",
        "--autoscale-mode",
        "off",
        "--target-size-ratio",
        "0.5",
        "--pg-num-max",
        "64",
        "--target-size-bytes",
        "1G",
    ]);
    let bk = d.json(&["osd", "pool", "get", "bk"]);
    assert_eq!(
        (
            &bk["bulk"],
            &bk["pg_num_max"],
            &bk["target_size_ratio"],
            &bk["target_size_bytes"]
        ),
        (
            &serde_json::json!(true),
            &serde_json::json!(64),
            &serde_json::json!(0.5),
            &serde_json::json!(1u64 << 30)
        ),
        "{bk}"
    );
    let detail = d.ok(&["osd", "pool", "ls", "detail"]);
    assert!(
        detail.contains("autoscale_mode off bulk pg_num_max 64 target_size_bytes 1073741824 target_size_ratio 0.5"),
        "{detail}"
    );
    let v = d.json(&["osd", "pool", "autoscale-status"]);
    let a = v
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pool_name"] == "bk")
        .cloned()
        .unwrap();
    assert_eq!(
        (&a["bulk"], &a["pg_num_max"]),
        (&serde_json::json!(true), &serde_json::json!(64)),
        "{a}"
    );
    assert!(a["pg_num_ideal"].as_u64().unwrap() <= 64, "{a}");
    assert_eq!(counts(&d)["bk"], (4, 4), "mode off: left alone");
    d.until("pool m grown to its pg_num_min", 120, || {
        counts(&d)["m"].0 == 16
    });
    // Bounds that would need a merge, or contradict each other, are refused.
    for (key, value, why) in [
        ("pg_num_max", "2", "merging"),
        ("pg_num", "128", "pg_num_max 64"),
        ("pg_num_min", "65", "pg_num_min must be"),
    ] {
        let out = d.run(&["osd", "pool", "set", "bk", key, value]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(why),
            "{key} {value}: {err}"
        );
    }
    let out = d.run(&["osd", "pool", "create", "x", "8", "--pg-num-max", "4"]);
    assert!(!out.status.success());
    assert!(
        d.json(&["osd", "pool", "ls"])
            .to_string()
            .find("\"x\"")
            .is_none()
    );
}

/// Past `mon_osdmap_history` epochs the monitors keep the full map at or
/// before the oldest kept epoch and every incremental after it. They used
/// to cut the incrementals at the oldest epoch, leaving a gap after that
/// full map: a new PG (whose past intervals start at the oldest kept map)
/// then peered until the window moved, minutes under churn (the hour soak
/// found it: its filler pool's puts timed out, writes stalled for minutes).
/// Here the history is 20 epochs with a full map every 10, the map is
/// churned far past it, and pools made at several epochs go active+clean
/// at once, as does every PG after an OSD is marked down.
#[test]
fn pgs_peer_at_once_with_the_map_history_trimmed() {
    let d = Dev::new("history");
    up3(
        &d,
        &[
            "--set",
            "mon_osdmap_history=20",
            "--set",
            "mon_osdmap_full_interval=10",
        ],
    );
    // One new epoch each: noout set, unset, set...
    let on = std::cell::Cell::new(false);
    let flip = |n: usize| {
        for _ in 0..n {
            on.set(!on.get());
            d.ok(&["osd", if on.get() { "set" } else { "unset" }, "noout"]);
        }
    };
    let clean = |pool: &str| {
        let v = d.json(&["pg", "ls-by-pool", pool]);
        let rows = v["pg_stats"].as_array().unwrap().clone();
        !rows.is_empty() && rows.iter().all(|r| r["state"] == "active+clean")
    };
    flip(44);
    for (n, shift) in [(0, 3), (1, 4), (2, 7)] {
        let pool = format!("h{n}");
        d.ok(&[
            "osd",
            "pool",
            "create",
            &pool,
            "4",
            "--size",
            "2",
            "--autoscale-mode",
            "off",
        ]);
        d.until(&format!("{pool} active+clean"), 30, || clean(&pool));
        // Another alignment of the history's window for the next pool.
        flip(shift);
    }
    let epoch = d.json(&["osd", "stat"])["epoch"].as_u64().unwrap();
    assert!(epoch > 60, "the map churned past its history: e{epoch}");
    // Every PG peers again once an OSD is marked down (it comes back up
    // by itself), from activations that fall anywhere in the window.
    d.ok(&["osd", "down", "1"]);
    d.until(
        "every pool active+clean after osd.1 was marked down",
        60,
        || ["h0", "h1", "h2"].iter().all(|p| clean(p)),
    );
}

//! Copies left behind: an OSD that leaves a PG's up and acting sets (marked
//! out, or moved off by an upmap) keeps its copy while the new member fills
//! from it, then removes it once the PG is clean without it — the space
//! comes back, as it does in Ceph. Before this, every move leaked the
//! moved PG's bytes on the OSD it left.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

mod common;

use std::collections::BTreeMap;

use common::{Dev, start_osd};

/// KiB each OSD's store holds, from `osd df`.
fn used(d: &Dev) -> BTreeMap<i64, u64> {
    let df = d.json(&["osd", "df"]);
    df["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_i64().unwrap(), n["kb_used"].as_u64().unwrap()))
        .collect()
}

/// A memory-store cluster of four OSDs that report every half second and
/// whose strays ask their primaries as often.
fn up4(d: &Dev) {
    up4_on(d, "mem", 500);
}

/// Four OSDs on `store`, reporting every half second, whose strays ask
/// their primaries every `stray_ms`; the balancer off (the moves are the
/// test's own).
fn up4_on(d: &Dev, store: &str, stray_ms: u64) {
    let stray = format!("osd_stray_check_interval_ms={stray_ms}");
    d.ok(&[
        "dev",
        "up",
        "--dir",
        d.dir(),
        "--osds",
        "4",
        "--store",
        store,
        "--no-gateway",
        "--set",
        "osd_pg_stats_interval_ms=500",
        "--set",
        "mgr_stats_period_ms=500",
        "--set",
        &stray,
    ]);
    d.ok(&["balancer", "off"]);
}

/// Writes `n` objects of 256 KiB into `pool`.
fn fill(d: &Dev, pool: &str, n: usize) {
    let file = d.0.join("256k");
    std::fs::write(&file, vec![7u8; 256 << 10]).unwrap();
    for i in 0..n {
        let name = format!("o{i}");
        d.ok(&["rados", "-p", pool, "put", &name, file.to_str().unwrap()]);
    }
}

/// Every object of `pool` reads back whole.
fn check(d: &Dev, pool: &str, n: usize) {
    let out = d.0.join("back");
    for i in 0..n {
        let name = format!("o{i}");
        d.ok(&["rados", "-p", pool, "get", &name, out.to_str().unwrap()]);
        let back = std::fs::read(&out).unwrap();
        assert!(
            back.len() == 256 << 10 && back.iter().all(|b| *b == 7),
            "{name}"
        );
    }
}

/// Waits until every PG is active+clean and the OSDs' reported use has
/// settled (two reports a second apart agree within 1 %), and returns it.
fn settled(d: &Dev, what: &str) -> BTreeMap<i64, u64> {
    let mut last = BTreeMap::new();
    let mut out = BTreeMap::new();
    d.until(what, 90, || {
        if !d.all_active_clean() {
            return false;
        }
        let now = used(d);
        let same = now.len() == last.len()
            && now.iter().all(|(id, kb)| {
                let before = last.get(id).copied().unwrap_or(0) as f64;
                (*kb as f64 - before).abs() <= before * 0.01 + 64.0
            });
        std::thread::sleep(std::time::Duration::from_millis(700));
        last = now.clone();
        out = now;
        same
    });
    out
}

#[test]
fn an_osd_marked_out_gives_its_space_back_and_takes_only_its_share_when_in_again() {
    let d = Dev::new("strays");
    up4(&d);
    fill(&d, "rbd", 40);
    let start = settled(&d, "the cluster clean after the writes");
    let total: u64 = start.values().sum();
    // 40 × 256 KiB × 3 copies, spread over the four OSDs.
    assert!(total >= 40 * 256 * 3, "{start:?}");
    assert!(start[&3] >= total / 8, "osd.3 holds its share: {start:?}");

    // Out: its PGs move to the other three, then its copies go.
    d.ok(&["osd", "out", "3"]);
    d.until("osd.3 empty once its PGs are clean elsewhere", 120, || {
        d.all_active_clean() && used(&d)[&3] < start[&3] / 20
    });
    let out = settled(&d, "the cluster clean with osd.3 out");
    let total_out: u64 = out.values().sum();
    assert!(
        total_out.abs_diff(total) < total / 10,
        "as many copies as before, no more: {start:?} → {out:?}"
    );
    check(&d, "rbd", 40);

    // In again: its PGs come back and the OSDs that held them meanwhile
    // give that space back, so the total is what it was.
    d.ok(&["osd", "in", "3"]);
    d.until(
        "the temporary copies gone after osd.3 is in again",
        120,
        || {
            if !d.all_active_clean() {
                return false;
            }
            let now = used(&d);
            now.values().sum::<u64>().abs_diff(total) < total / 10 && now[&3] >= start[&3] / 2
        },
    );
    check(&d, "rbd", 40);

    // An upmap moves one PG's copy off one OSD: that OSD's use drops by
    // about the PG's bytes once the new holder is filled.
    let before = settled(&d, "the cluster clean again");
    let dump = d.json(&["pg", "dump"]);
    let pg = dump["pg_stats"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["pgid"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{}.", pool_id(&d, "rbd")))
        })
        .max_by_key(|p| p["bytes"].as_u64().unwrap())
        .unwrap()
        .clone();
    let bytes = pg["bytes"].as_u64().unwrap();
    assert!(bytes > 0, "{pg}");
    let up: Vec<i64> = pg["up"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_i64().unwrap())
        .collect();
    let from = up[1];
    let to = (0..4).find(|o| !up.contains(o)).unwrap();
    let pgid = pg["pgid"].as_str().unwrap().to_string();
    d.ok(&[
        "osd",
        "pg-upmap-items",
        &pgid,
        &from.to_string(),
        &to.to_string(),
    ]);
    d.until("the moved copy gone from its old OSD", 120, || {
        d.all_active_clean() && used(&d)[&from] + bytes / 1024 / 2 < before[&from]
    });
    check(&d, "rbd", 40);
}

/// The id of pool `name`.
fn pool_id(d: &Dev, name: &str) -> u64 {
    d.json(&["osd", "pool", "get", name])["id"]
        .as_u64()
        .unwrap()
}

#[test]
fn an_erasure_coded_pgs_shards_leave_an_osd_marked_out() {
    let d = Dev::new("strays-ec");
    up4(&d);
    d.ok(&[
        "osd",
        "erasure-code-profile",
        "set",
        "p21",
        "k=2",
        "m=1",
        "crush-failure-domain=osd",
    ]);
    d.ok(&["osd", "pool", "create", "ec", "8", "erasure", "p21"]);
    fill(&d, "ec", 24);
    let start = settled(&d, "the cluster clean after the writes");
    assert!(start[&2] > 0, "{start:?}");
    d.ok(&["osd", "out", "2"]);
    d.until(
        "osd.2's shards gone once the PGs are clean elsewhere",
        120,
        || d.all_active_clean() && used(&d)[&2] < start[&2] / 10,
    );
    check(&d, "ec", 24);
}

#[test]
fn an_osd_restarted_with_stray_copies_on_its_block_store_removes_them() {
    let d = Dev::new("strays-restart");
    // Block stores; strays ask only once an hour until osd.3 restarts.
    up4_on(&d, "block", 3_600_000);
    let base = settled(&d, "the empty cluster clean");
    fill(&d, "rbd", 24);
    let start = settled(&d, "the cluster clean after the writes");
    let data3 = start[&3].saturating_sub(base[&3]);
    assert!(data3 >= 1024, "osd.3 holds its share: {base:?} → {start:?}");
    d.ok(&["osd", "out", "3"]);
    let out = settled(&d, "the cluster clean with osd.3 out");
    assert!(
        out[&3] + data3 / 2 > start[&3],
        "the copies stay until osd.3 asks: {start:?} → {out:?}"
    );
    // Restarted with a shorter interval, it finds its strays in its store
    // and removes them; the block store's space comes back.
    let conf = d.0.join("shoal.conf");
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text.push_str("\n[osd.3]\nosd_stray_check_interval_ms = 500\nlog_level = \"info,osd=debug\"\n");
    std::fs::write(&conf, text).unwrap();
    d.kill9("osd.3");
    start_osd(&d, 3);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let now = used(&d);
        if d.all_active_clean() && now[&3] < base[&3] + data3 / 10 {
            break;
        }
        if std::time::Instant::now() > deadline {
            // What the stray and its primaries said of the copies.
            let log = std::fs::read_to_string(d.0.join("out/osd.3.log")).unwrap_or_default();
            let said: Vec<&str> = log.lines().filter(|l| l.contains("stray")).collect();
            let said = said[said.len().saturating_sub(40)..].join("\n");
            panic!(
                "osd.3's stray copies not gone 120 s after its restart: {base:?} → {now:?}\n\
                 osd.3 on its strays:\n{said}\nthe daemons' logs:\n{}",
                d.logs(40)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    check(&d, "rbd", 24);
}

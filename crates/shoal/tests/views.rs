//! The commands an operator types first, against a running cluster, with
//! Ceph's columns and `--format json`: `osd df` and `osd df tree` (use,
//! PGs, VAR and the spread's standard deviation), `osd crush tree`,
//! `osd lspools`, `osd pool ls detail`, `osd pool stats`, `osd pool
//! autoscale-status`, `df detail`,
//! `quorum_status`, `osd perf`, `pg ls-by-osd` and `pg ls-by-pool`; each checked against
//! what the cluster holds (`pg dump`, `osd tree`, `mon stat`).

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

mod common;

use common::{Dev, until};
use serde_json::Value;

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap()
}

/// A memory-store cluster of four OSDs whose PG statistics arrive twice
/// a second.
fn up4(d: &Dev) {
    d.ok(&[
        "dev",
        "up",
        "--dir",
        d.dir(),
        "--osds",
        "4",
        "--store",
        "mem",
        "--no-gateway",
        "--set",
        "osd_pg_stats_interval_ms=500",
        "--set",
        "mgr_stats_period_ms=500",
    ]);
}

/// Whether every PG is active+clean.
fn clean(d: &Dev) -> bool {
    let s = d.json(&["pg", "stat"]);
    s["num_pg_by_state"].as_array().unwrap().len() == 1
        && s["num_pg_by_state"][0]["name"] == "active+clean"
}

#[test]
fn the_operators_first_commands_answer_from_the_cluster() {
    let d = Dev::new("views");
    up4(&d);
    // The placement checked below is CRUSH's (and the upmaps set here).
    d.ok(&["balancer", "off"]);
    let file = d.0.join("64k");
    std::fs::write(&file, vec![5u8; 65536]).unwrap();
    for i in 0..24 {
        d.ok(&[
            "rados",
            "-p",
            "rbd",
            "put",
            &format!("o{i}"),
            file.to_str().unwrap(),
        ]);
    }
    let dump = d.json(&["pg", "dump"]);
    let pgs = dump["pg_stats"].as_array().unwrap().clone();
    let rbd = d.json(&["osd", "pool", "get", "rbd"]);
    let rbd_id = rbd["id"].as_u64().unwrap();

    // osd df: every OSD reported its size, its PGs are those whose up set
    // holds it, VAR is its utilization over the mean.
    until("every OSD's space in osd df", 30, || {
        let df = d.json(&["osd", "df"]);
        let nodes = df["nodes"].as_array().unwrap();
        nodes.len() == 4 && nodes.iter().all(|n| n["kb"].as_u64().unwrap() > 0)
    });
    let df = d.json(&["osd", "df"]);
    let s = &df["summary"];
    let avg = f(&s["average_utilization"]);
    assert!(avg > 0.0, "{df}");
    let mut vars = Vec::new();
    for n in df["nodes"].as_array().unwrap() {
        let id = n["id"].as_i64().unwrap();
        let holding = pgs
            .iter()
            .filter(|p| {
                p["up"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|o| o.as_i64() == Some(id))
            })
            .count() as u64;
        assert_eq!(n["pgs"].as_u64().unwrap(), holding, "osd.{id}: {n}");
        assert!(
            (f(&n["var"]) - f(&n["utilization"]) / avg).abs() < 1e-6,
            "{n}"
        );
        assert_eq!(n["status"], "up");
        vars.push(f(&n["var"]));
    }
    let total: u64 = df["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["kb"].as_u64().unwrap())
        .sum();
    assert_eq!(s["total_kb"].as_u64().unwrap(), total, "{df}");
    let (min, max) = (f(&s["min_var"]), f(&s["max_var"]));
    assert!(vars.iter().all(|v| (min..=max).contains(v)), "{df}");
    assert!(min <= 1.0 + 1e-9 && max >= 1.0 - 1e-9, "{df}");
    assert!(f(&s["stddev"]) >= 0.0 && s["dev"] == s["stddev"], "{df}");
    let plain = d.ok(&["osd", "df"]);
    assert!(
        plain.contains("%USE") && plain.contains("VAR") && plain.contains("PGS"),
        "{plain}"
    );
    assert!(
        plain.contains("TOTAL") && plain.contains("MIN/MAX VAR:"),
        "{plain}"
    );
    assert!(plain.contains("STDDEV:"), "{plain}");

    // osd df tree: the root sums every OSD.
    let tree = d.json(&["osd", "df", "tree"]);
    let root = &tree["nodes"][0];
    assert_eq!(root["type"], "root", "{tree}");
    assert_eq!(root["kb"].as_u64().unwrap(), total, "{tree}");
    assert!(d.ok(&["osd", "df", "tree"]).contains("root default"));

    // osd crush tree: the hierarchy and weights, no states.
    let crush = d.ok(&["osd", "crush", "tree"]);
    assert!(
        crush.contains("root default") && crush.contains("osd.2"),
        "{crush}"
    );
    assert!(!crush.contains(" up"), "{crush}");
    let crush = d.json(&["osd", "crush", "tree"]);
    assert_eq!(
        crush["nodes"].as_array().unwrap().len(),
        d.json(&["osd", "tree"])["nodes"].as_array().unwrap().len()
    );

    // Pools.
    assert!(d.ok(&["osd", "lspools"]).contains(&format!("{rbd_id} rbd")));
    assert_eq!(d.json(&["osd", "lspools"])[0]["poolname"], "rbd");
    let detail = d.ok(&["osd", "pool", "ls", "detail"]);
    assert!(
        detail.contains(&format!("pool {rbd_id} 'rbd' replicated size")),
        "{detail}"
    );
    d.ok(&["osd", "pool", "set-quota", "rbd", "max_objects", "1000"]);
    let df_detail = d.ok(&["df", "detail"]);
    assert!(df_detail.contains("QUOTA OBJECTS"), "{df_detail}");
    let rbd_row = df_detail.lines().find(|l| l.starts_with("rbd ")).unwrap();
    assert!(
        rbd_row.contains(" 1000 ") && rbd_row.ends_with("N/A"),
        "{rbd_row}"
    );
    assert!(!d.ok(&["df"]).contains("QUOTA"));

    // osd pool autoscale-status: rbd's share of the raw space and the PG
    // count it calls for.
    // The ratio is the pool's stored bytes times its raw rate over the raw
    // capacity, as `df` has them; the OSDs' statistics may move between the
    // two commands, so compare a pair taken while `df` held still.
    let mut auto = serde_json::Value::Null;
    d.until(
        "autoscale-status and df agree on the pool's bytes",
        30,
        || {
            let before = d.json(&["df"]);
            auto = d.json(&["osd", "pool", "autoscale-status"]);
            let df = d.json(&["df"]);
            let stored = df["pools"][0]["stats"]["stored"].as_f64().unwrap();
            let want = stored * 3.0 / df["stats"]["total_bytes"].as_f64().unwrap();
            before["pools"] == df["pools"]
                && auto[0]["raw_capacity"] == df["stats"]["total_bytes"]
                && (f(&auto[0]["capacity_ratio"]) - want).abs() < 1e-9
        },
    );
    let a = &auto[0];
    assert_eq!(a["pool_name"], "rbd", "{auto}");
    assert_eq!(a["pg_num_target"], rbd["pg_num"], "{auto}");
    assert_eq!(a["raw_used_rate"], 3.0, "{auto}");
    // At least the floor (mon_pg_autoscale_pg_num_min, 8); on by default.
    assert!(a["pg_num_ideal"].as_u64().unwrap() >= 8, "{auto}");
    assert_eq!(a["pg_autoscale_mode"], "on", "{auto}");
    assert!(
        d.ok(&["osd", "pool", "autoscale-status"])
            .contains("NEW PG_NUM")
    );

    // quorum_status: the quorum as `mon stat` has it.
    let q = d.json(&["quorum_status"]);
    let stat = d.json(&["mon", "stat"]);
    assert_eq!(q["quorum_names"], stat["quorum"], "{q}");
    assert_eq!(q["monmap"]["fsid"], stat["fsid"], "{q}");
    assert_eq!(
        q["quorum"].as_array().unwrap().len(),
        stat["quorum"].as_array().unwrap().len()
    );
    assert!(q["election_epoch"].as_u64().unwrap() >= 1, "{q}");
    assert!(d.ok(&["quorum_status"]).contains("\"quorum_names\""));

    // osd perf: every OSD, with the writes it led and applied.
    until("osd perf counts the writes", 30, || {
        let p = d.json(&["osd", "perf"]);
        let infos = p["osdstats"]["osd_perf_infos"].as_array().unwrap().clone();
        let sum = |k: &str| -> u64 {
            infos
                .iter()
                .map(|i| i["perf_stats"][k].as_u64().unwrap())
                .sum()
        };
        infos.len() == 4 && sum("commits") >= 24 && sum("applies") >= 48
    });
    let p = d.json(&["osd", "perf"]);
    for i in p["osdstats"]["osd_perf_infos"].as_array().unwrap() {
        let s = &i["perf_stats"];
        if s["commits"].as_u64().unwrap() > 0 {
            assert!(s["commitlatency_ns"].as_u64().unwrap() > 0, "{i}");
        }
    }
    assert!(d.ok(&["osd", "perf"]).contains("commit_latency(ms)"));

    // pg ls-by-osd and ls-by-pool.
    let by_osd = d.json(&["pg", "ls-by-osd", "osd.1"]);
    let listed = by_osd["pg_stats"].as_array().unwrap();
    let want = pgs
        .iter()
        .filter(|p| {
            ["up", "acting"].iter().any(|k| {
                p[k].as_array()
                    .unwrap()
                    .iter()
                    .any(|o| o.as_i64() == Some(1))
            })
        })
        .count();
    assert_eq!(listed.len(), want, "{by_osd}");
    assert!(!listed.is_empty());
    let by_pool = d.json(&["pg", "ls-by-pool", "rbd"]);
    let listed = by_pool["pg_stats"].as_array().unwrap();
    assert_eq!(
        listed.len() as u64,
        rbd["pg_num"].as_u64().unwrap(),
        "{by_pool}"
    );
    let prefix = format!("{rbd_id}.");
    assert!(
        listed
            .iter()
            .all(|p| p["pgid"].as_str().unwrap().starts_with(&prefix))
    );
    assert!(d.ok(&["pg", "ls-by-pool", "rbd"]).contains("PG_STAT"));
    let out = d.run(&["pg", "ls-by-pool", "nosuchpool"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nosuchpool"));
    let out = d.run(&["pg", "ls-by-osd", "osd.x"]);
    assert!(!out.status.success());

    // osd pool stats: a writer's I/O shows on its pool, while it writes.
    let idle = d.json(&["osd", "pool", "stats"]);
    assert_eq!(idle[0]["pool_name"], "rbd", "{idle}");
    std::thread::scope(|s| {
        let writer = s.spawn(|| d.ok(&["bench", "-p", "rbd", "6", "write"]));
        std::thread::sleep(std::time::Duration::from_secs(2));
        let busy = d.json(&["osd", "pool", "stats", "rbd"]);
        let io = &busy[0]["client_io_rate"];
        assert!(io["write_op_per_sec"].as_u64().unwrap_or(0) > 0, "{busy}");
        assert!(io["write_bytes_sec"].as_u64().unwrap_or(0) > 0, "{busy}");
        let plain = d.ok(&["osd", "pool", "stats", "rbd"]);
        assert!(
            plain.contains("pool rbd id") && plain.contains("client io"),
            "{plain}"
        );
        writer.join().unwrap();
    });
    let out = d.run(&["osd", "pool", "stats", "nosuchpool"]);
    assert!(!out.status.success());

    // pg-upmap-items: a PG's copy moves to the OSD named, the cluster
    // settles clean, and removing the entry gives CRUSH's placement back.
    let pg = &pgs[0];
    let pgid = pg["pgid"].as_str().unwrap();
    let up: Vec<i64> = pg["up"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_i64().unwrap())
        .collect();
    let from = up[1];
    let to = (0..4).find(|o| !up.contains(o)).unwrap();
    let up_of = || -> Vec<i64> {
        let dump = d.json(&["pg", "dump"]);
        let p = dump["pg_stats"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pgid"] == pgid)
            .unwrap()
            .clone();
        p["up"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_i64().unwrap())
            .collect()
    };
    for bad in [
        vec![pgid.to_string(), from.to_string(), from.to_string()],
        vec![pgid.to_string(), from.to_string()],
        vec![pgid.to_string(), from.to_string(), "99".into()],
        vec![format!("{rbd_id}.ffff"), from.to_string(), to.to_string()],
    ] {
        let mut args = vec!["osd", "pg-upmap-items"];
        args.extend(bad.iter().map(String::as_str));
        assert!(!d.run(&args).status.success(), "{bad:?} accepted");
    }
    d.ok(&[
        "osd",
        "pg-upmap-items",
        pgid,
        &from.to_string(),
        &format!("osd.{to}"),
    ]);
    let mut want = up.clone();
    want[1] = to;
    until("the PG's up set follows the upmap", 30, || up_of() == want);
    until("the cluster clean again", 60, || clean(&d));
    let dumped = d.json(&["osd", "dump"]);
    assert_eq!(dumped["pg_upmap_items"][0]["pgid"], pgid, "{dumped}");
    assert_eq!(dumped["pg_upmap_items"][0]["mappings"][0]["to"], to);
    d.ok(&["rados", "-p", "rbd", "stat", "o3"]);
    d.ok(&["osd", "rm-pg-upmap-items", pgid]);
    until("CRUSH's placement back", 30, || up_of() == up);
    assert!(!d.run(&["osd", "rm-pg-upmap-items", pgid]).status.success());
    until("the cluster clean at the end", 60, || clean(&d));
}

#[test]
fn the_balancer_brings_every_osd_within_one_pg_of_its_share() {
    let d = Dev::new("balancer");
    up4(&d);
    let file = d.0.join("16k");
    std::fs::write(&file, vec![3u8; 16384]).unwrap();
    for i in 0..32 {
        d.ok(&[
            "rados",
            "-p",
            "rbd",
            "put",
            &format!("b{i}"),
            file.to_str().unwrap(),
        ]);
    }
    // On by default, its first round an interval (a minute) after the
    // leader took the lead: until then CRUSH alone leaves this pool's 96
    // copies uneven.
    let before = d.json(&["balancer", "status"]);
    assert_eq!(before["active"], true, "{before}");
    assert!(f(&before["max_deviation"]) > 1.0, "{before}");
    let copies: u64 = before["osds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["pgs"].as_u64().unwrap())
        .sum();
    let eval = d.ok(&["balancer", "eval"]);
    assert!(eval.contains("current cluster score"), "{eval}");

    d.ok(&["balancer", "off"]);
    assert_eq!(d.json(&["balancer", "status"])["active"], false);
    d.ok(&["config", "set", "mon", "mon_balancer_interval_ms", "500"]);
    assert!(d.ok(&["balancer", "on"]).contains("balancer on"));
    until("every OSD within one PG of its share, clean", 90, || {
        f(&d.json(&["balancer", "status"])["max_deviation"]) <= 1.0 && clean(&d)
    });
    let after = d.json(&["balancer", "status"]);
    assert!(after["pg_upmap_items"].as_u64().unwrap() > 0, "{after}");
    let now: u64 = after["osds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["pgs"].as_u64().unwrap())
        .sum();
    assert_eq!(now, copies, "{after}");
    // No PG has two copies on one OSD, and the data is whole.
    for p in d.json(&["pg", "dump"])["pg_stats"].as_array().unwrap() {
        let up: Vec<i64> = p["up"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_i64().unwrap())
            .collect();
        let mut distinct = up.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), up.len(), "{p}");
        assert_eq!(up.len(), 3, "{p}");
    }
    let back = d.0.join("back");
    for i in 0..32 {
        d.ok(&[
            "rados",
            "-p",
            "rbd",
            "get",
            &format!("b{i}"),
            back.to_str().unwrap(),
        ]);
        assert_eq!(std::fs::read(&back).unwrap(), vec![3u8; 16384]);
    }
    d.ok(&["balancer", "off"]);
    assert_eq!(d.json(&["balancer", "status"])["active"], false);
}

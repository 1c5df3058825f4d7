//! `shoal dev` and `shoal bench` with real processes: a MemStore dev
//! cluster; `bench write --no-cleanup`, `seq`, `rand` (JSON and SVG), then
//! `bench cleanup` leaves nothing behind; a daemon that cannot start makes
//! `dev up` fail with its log and leaves nothing running.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

mod common;

use common::Dev;

#[test]
fn bench_write_seq_rand_and_cleanup() {
    let d = Dev::new("bench");
    d.ok(&[
        "dev",
        "up",
        "--dir",
        d.dir(),
        "--store",
        "mem",
        "--osds",
        "3",
    ]);
    let out = d.ok(&[
        "bench",
        "-p",
        "rbd",
        "3",
        "write",
        "-b",
        "64K",
        "-t",
        "8",
        "--no-cleanup",
    ]);
    assert!(out.contains("sec Cur ops"), "{out}");
    assert!(out.contains("Average IOPS:"), "{out}");
    for mode in ["seq", "rand"] {
        let plot = d.0.join(format!("{mode}.svg"));
        let out = d.ok(&[
            "bench",
            "-p",
            "rbd",
            "2",
            mode,
            "--format",
            "json",
            "--plot",
            plot.to_str().unwrap(),
        ]);
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["mode"], mode);
        assert!(v["ops"].as_u64().unwrap() > 0, "{v}");
        assert_eq!(v["object_size"], 65536);
        assert!(v["latency_p99_s"].as_f64().unwrap() >= v["latency_p50_s"].as_f64().unwrap());
        let svg = std::fs::read_to_string(&plot).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("polyline"));
    }
    let listed = d.ok(&["rados", "-p", "rbd", "ls"]);
    assert!(listed.lines().count() > 1, "{listed}");
    d.ok(&["bench", "cleanup", "-p", "rbd"]);
    assert_eq!(d.ok(&["rados", "-p", "rbd", "ls"]), "");
    // Without an earlier write there is nothing to read, and the error says so.
    let out = d.run(&["bench", "-p", "rbd", "1", "seq"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("write --no-cleanup"));
}

#[test]
fn a_daemon_that_fails_to_start_fails_up_and_leaves_nothing_running() {
    let d = Dev::new("fail");
    d.ok(&[
        "dev",
        "up",
        "--dir",
        d.dir(),
        "--store",
        "mem",
        "--osds",
        "2",
    ]);
    d.ok(&["dev", "down", "--dir", d.dir()]);
    // osd.1's metadata names a store it cannot open.
    std::fs::write(
        d.0.join("osd.1/osd.json"),
        "{\"id\": 1, \"store\": \"floppy\"}",
    )
    .unwrap();
    let out = d.run(&["dev", "up", "--dir", d.dir()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("osd.1 exited"), "{err}");
    assert!(err.contains("floppy"), "the daemon's log is shown: {err}");
    let status = d.ok(&["dev", "status", "--dir", d.dir()]);
    assert!(!status.contains("running"), "{status}");
    // Up with wrong arguments starts nothing at all.
    let out = d.run(&["dev", "up", "--dir", d.dir(), "--mons", "2"]);
    assert!(!out.status.success());
}

#[test]
fn foreground_up_stops_every_daemon_on_ctrl_c() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let d = Dev::new("foreground");
    let mut up = Command::new(common::SHOAL)
        .args([
            "dev",
            "up",
            "--dir",
            d.dir(),
            "--store",
            "mem",
            "--osds",
            "1",
            "--foreground",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Keep reading to the end, so `up` never writes to a closed pipe.
    let mut lines = BufReader::new(up.stdout.take().unwrap()).lines();
    let mut ready = false;
    for line in lines.by_ref() {
        if line.unwrap().contains("dev cluster is up") {
            ready = true;
            break;
        }
    }
    assert!(ready, "dev up --foreground never said it was up");
    // A monitor, the OSD, the S3 gateway and the manager.
    let status = d.ok(&["dev", "status", "--dir", d.dir()]);
    assert_eq!(status.matches("running").count(), 4, "{status}");
    assert!(status.contains("gateway  running"), "{status}");
    assert!(status.contains("mgr.x    running"), "{status}");
    let pid = up.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let code = up.wait().unwrap();
    assert!(rest.iter().any(|l| l.contains("stopping")), "{rest:?}");
    assert!(code.success(), "{code}");
    let status = d.ok(&["dev", "status", "--dir", d.dir()]);
    assert!(!status.contains("running"), "{status}");
}

//! The manager as an operator meets it on a `shoal dev` cluster: one
//! active and a standby chosen by the monitors; the standby answers
//! `/metrics` with 503 and sends browsers to the active one; a SIGKILLed
//! active manager is replaced within the beacon grace (the time is
//! measured and printed); `shoal mgr fail` hands over; with none left the
//! cluster warns MGR_DOWN. `/metrics` counts what a load did: OSD ops by
//! kind and pool with latency histograms, the gateway's requests by S3
//! operation and status, the NBD server's commands.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::time::{Duration, Instant};

mod common;

use common::{Background, Dev, http_get as get, until};
use serde_json::Value;

/// The value of the sample `name{labels}` (labels as written, in order).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The sum of every sample of `name` whose labels contain all of `with`.
fn sum(text: &str, name: &str, with: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| with.iter().all(|w| l.contains(w)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn mgr_stat(d: &Dev) -> Value {
    d.json(&["mgr", "stat"])
}

fn active(d: &Dev) -> Option<String> {
    mgr_stat(d)["active"]["name"].as_str().map(str::to_string)
}

/// Starts manager `name` with its own key (made here) on a free port.
fn start_mgr(d: &Dev, name: &str) -> Background {
    let ring = d.0.join(format!("mgr.{name}.keyring"));
    let entity = format!("mgr.{name}");
    let section = d.ok(&["auth", "get-or-create", &entity, "mon", "allow profile mgr"]);
    std::fs::write(&ring, section).unwrap();
    let set = format!("keyring={}", ring.display());
    Background::start(
        d,
        &["--set", &set, "-n", &entity, "mgr", "--bind", "127.0.0.1:0"],
        "http",
    )
}

fn lists_check(d: &Dev, code: &str) -> bool {
    d.json(&["health"])["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["code"] == code)
}

#[test]
fn a_standby_manager_takes_over_and_metrics_count_the_load() {
    let d = Dev::new("mgr");
    d.up_mem(&[
        "--set",
        "mgr_beacon_interval_ms=300",
        "--set",
        "mon_mgr_beacon_grace_ms=2000",
        "--set",
        "mgr_stats_period_ms=500",
    ]);
    let x_addr = d.addr_of("mgr.x");
    // `dev up` said the manager is ready: its first scrape is answered.
    let (code, _, body) = get(&x_addr, "/metrics");
    assert_eq!(code, 200, "/metrics right after dev up: {body}");
    assert!(body.contains("shoal_health_status"), "{body}");
    assert_eq!(active(&d).as_deref(), Some("x"));
    let status = d.ok(&["status"]);
    assert!(status.contains("mgr: x(active)"), "{status}");
    let services = d.json(&["mgr", "services"]);
    assert_eq!(services["prometheus"], format!("http://{x_addr}/metrics"));

    // A second manager stands by.
    let y = start_mgr(&d, "y");
    until("mgr.y standing by", 30, || {
        mgr_stat(&d)["standbys"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "y")
    });
    let (code, _, body) = get(&y.addr, "/metrics");
    assert_eq!(code, 503, "a standby's /metrics: {body}");
    assert!(body.contains(&x_addr), "names the active one: {body}");
    let (code, head, _) = get(&y.addr, "/");
    assert_eq!(code, 307, "{head}");
    assert!(
        head.contains(&format!("location: http://{x_addr}/")),
        "{head}"
    );
    until("metrics from the active manager", 30, || {
        get(&x_addr, "/metrics").0 == 200
    });

    // Load: 4 MiB writes, then reads of them, through the rbd pool; S3
    // requests through the gateway; NBD requests through an NBD server.
    let w = d.json(&["bench", "-p", "rbd", "2", "write", "--no-cleanup"]);
    let r = d.json(&["bench", "-p", "rbd", "1", "seq"]);
    let (writes, reads) = (w["ops"].as_f64().unwrap(), r["ops"].as_f64().unwrap());
    assert!(writes > 0.0 && reads > 0.0, "{w} {r}");
    let gw = d.addr_of("gateway");
    // An anonymous GET of a missing bucket: a 404 by S3 operation.
    let (code, _, _) = get(&gw, "/no-such-bucket/key");
    assert_eq!(code, 404);
    d.ok(&["rbd", "create", "rbd/disk", "--size", "4M"]);
    let nbd = Background::start(&d, &["nbd", "serve", "--bind", "127.0.0.1:0"], "nbd");
    if std::process::Command::new("qemu-io")
        .arg("--version")
        .output()
        .is_ok()
    {
        let uri = format!("nbd://{}/rbd/disk", nbd.addr);
        let out = std::process::Command::new("qemu-io")
            .args([
                "-f",
                "raw",
                "-c",
                "write -P 7 0 64k",
                "-c",
                "read -P 7 0 64k",
                &uri,
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }

    let mut text = String::new();
    until("the load in /metrics", 30, || {
        text = get(&x_addr, "/metrics").2;
        sum(&text, "shoal_osd_ops_total", &["kind=\"write\""]) >= writes
            && sum(&text, "shoal_osd_ops_total", &["kind=\"read\""]) >= reads
            && sum(&text, "shoal_gateway_requests_total", &["status=\"404\""]) >= 1.0
            && sum(
                &text,
                "shoal_osd_op_latency_seconds_count",
                &["kind=\"write\""],
            ) >= writes
            // Once the primaries reported their PGs' statistics.
            && sum(&text, "shoal_pool_stored_bytes", &["pool=\"rbd\""]) > 0.0
    });
    // Replicated sub-ops: each write goes to two replicas.
    assert!(sum(&text, "shoal_osd_ops_total", &["kind=\"subop\""]) >= 2.0 * writes);
    // Bytes: 4 MiB per write, counted once on each primary.
    let wbytes = sum(&text, "shoal_osd_op_bytes_total", &["kind=\"write\""]);
    assert!(wbytes >= writes * 4.0 * 1048576.0, "{wbytes}");
    // By pool: the rbd pool's writes.
    let rbd_id = d.json(&["osd", "pool", "get", "rbd"])["id"].to_string();
    let pool_writes = sum(
        &text,
        "shoal_osd_pool_ops_total",
        &[&format!("pool=\"{rbd_id}\""), "kind=\"write\""],
    );
    assert!(pool_writes >= writes, "{pool_writes} < {writes}");
    // Histograms are cumulative and end with +Inf = count.
    let inf = sum(
        &text,
        "shoal_osd_op_latency_seconds_bucket",
        &["kind=\"write\"", "le=\"+Inf\""],
    );
    let count = sum(
        &text,
        "shoal_osd_op_latency_seconds_count",
        &["kind=\"write\""],
    );
    assert_eq!(inf, count);
    assert_eq!(sample(&text, "shoal_health_status"), Some(0.0), "{text}");
    assert_eq!(sum(&text, "shoal_osd_up", &[]), 3.0);
    assert_eq!(
        sum(&text, "shoal_pg_states", &["state=\"active+clean\""]),
        sum(&text, "shoal_pg_total", &[])
    );
    assert_eq!(sample(&text, "shoal_mon_quorum_size"), Some(1.0));
    assert!(sum(&text, "shoal_gateway_request_latency_seconds_count", &[]) >= 1.0);
    if text.contains("shoal_nbd_ops_total") {
        assert!(
            sum(&text, "shoal_nbd_ops_total", &["kind=\"write\""]) >= 1.0,
            "{text}"
        );
        assert!(sum(&text, "shoal_nbd_op_bytes_total", &["kind=\"read\""]) >= 65536.0);
    }
    drop(nbd);

    // The active manager SIGKILLed: the standby takes over within the grace.
    let t0 = Instant::now();
    d.kill9("mgr.x");
    until("mgr.y active", 20, || active(&d).as_deref() == Some("y"));
    let took = t0.elapsed();
    println!("mgr failover: mgr.y active {took:?} after mgr.x was SIGKILLed (grace 2 s)");
    assert!(took < Duration::from_secs(10), "failover took {took:?}");
    until("metrics from the new active manager", 20, || {
        get(&y.addr, "/metrics").0 == 200
    });
    assert!(!lists_check(&d, "MGR_DOWN"));

    // `mgr fail` hands over to a standby; the failed one stands by again.
    let z = start_mgr(&d, "z");
    until("mgr.z standing by", 30, || {
        mgr_stat(&d)["standbys"].to_string().contains("\"z\"")
    });
    d.ok(&["mgr", "fail", "y"]);
    until("mgr.z active", 10, || active(&d).as_deref() == Some("z"));
    until("mgr.y back as a standby", 10, || {
        mgr_stat(&d)["standbys"].to_string().contains("\"y\"")
    });
    let out = d.run(&["mgr", "fail", "nobody"]);
    assert!(!out.status.success());

    // No manager left: MGR_DOWN.
    drop(y);
    drop(z);
    until("MGR_DOWN", 20, || lists_check(&d, "MGR_DOWN"));
    assert!(d.ok(&["status"]).contains("mgr: no daemons active"));
}

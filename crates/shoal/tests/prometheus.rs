//! Debian's Prometheus scrapes the manager of a `shoal dev` cluster under
//! load, and PromQL answers what the load did: the writes and reads a
//! benchmark made, their latency quantile, the objects it left in the
//! pool, the OSDs up, the health, a gateway request by status.
//!
//! Prometheus comes from Debian (`prometheus`; `.ci/run` installs it and
//! sets `SHOAL_REQUIRE_TOOLS=1`, so CI fails rather than skips without it).

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::process::{Command, Stdio};

mod common;

use common::{Dev, http_get, until};
use serde_json::Value;

/// Prometheus, stopped (and its data removed with the cluster's) on drop.
struct Prometheus {
    child: std::process::Child,
    addr: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn prometheus_present() -> bool {
    let ok = Command::new("prometheus")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        let m = "missing prometheus: apt-get install prometheus";
        assert!(std::env::var_os("SHOAL_REQUIRE_TOOLS").is_none(), "{m}");
        eprintln!("skipped: {m}");
    }
    ok
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts Prometheus scraping `target` every second.
fn start_prometheus(d: &Dev, target: &str) -> Prometheus {
    let dir = d.0.join("prometheus");
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("prometheus.yml");
    std::fs::write(
        &conf,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: shoal\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", conf.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    Prometheus { child, addr }
}

/// `s` percent-encoded for a query string.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A PromQL instant query's scalar answer (the first sample), if any.
fn query(p: &Prometheus, q: &str) -> Option<f64> {
    let (code, _, body) = http_get(&p.addr, &format!("/api/v1/query?query={}", encode(q)));
    if code != 200 {
        return None;
    }
    let v: Value = serde_json::from_str(&body).ok()?;
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

#[test]
fn prometheus_scrapes_the_manager_and_promql_answers_what_the_load_did() {
    if !prometheus_present() {
        return;
    }
    let d = Dev::new("prometheus");
    d.up_mem(&["--set", "mgr_stats_period_ms=1000"]);
    let mgr = d.addr_of("mgr.x");
    let p = start_prometheus(&d, &mgr);
    until("Prometheus scraping the manager", 60, || {
        query(&p, "up{job=\"shoal\"}") == Some(1.0)
            && query(&p, "count(shoal_osd_ops_total)").is_some()
    });

    // The load: 4 MiB writes left in the pool, reads of them, and one
    // S3 request that fails with 404.
    let w = d.json(&["bench", "-p", "rbd", "3", "write", "--no-cleanup"]);
    let r = d.json(&["bench", "-p", "rbd", "1", "seq"]);
    let (writes, reads) = (w["ops"].as_f64().unwrap(), r["ops"].as_f64().unwrap());
    assert_eq!(http_get(&d.addr_of("gateway"), "/missing-bucket").0, 404);
    // Once the primaries reported their PGs' statistics.
    let rbd_objects = || {
        d.json(&["df"])["pools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "rbd")
            .unwrap()["stats"]["objects"]
            .as_f64()
            .unwrap()
    };
    until("the objects in df", 30, || rbd_objects() >= writes);
    let objects = rbd_objects();

    until("the load in Prometheus", 60, || {
        query(&p, "sum(shoal_osd_ops_total{kind=\"write\"})").is_some_and(|v| v >= writes)
            && query(&p, "sum(shoal_osd_ops_total{kind=\"read\"})").is_some_and(|v| v >= reads)
            && query(&p, "sum(shoal_pool_objects{pool=\"rbd\"})") == Some(objects)
            && query(&p, "sum(shoal_gateway_requests_total{status=\"404\"})")
                .is_some_and(|v| v >= 1.0)
    });
    // Every byte written by the benchmark reached a primary.
    let bytes = query(&p, "sum(shoal_osd_op_bytes_total{kind=\"write\"})").unwrap();
    assert!(bytes >= writes * 4194304.0, "{bytes}");
    // Rates over the load are positive.
    let rate = query(&p, "sum(rate(shoal_osd_ops_total{kind=\"write\"}[1m]))").unwrap();
    assert!(rate > 0.0, "write rate {rate}");
    // The 99th percentile of the OSDs' write latency, from the histograms:
    // a real duration no longer than the slowest client write.
    let p99 = query(
        &p,
        "histogram_quantile(0.99, sum by (le) (rate(shoal_osd_op_latency_seconds_bucket{kind=\"write\"}[1m])))",
    )
    .unwrap();
    let slowest = w["latency_max_s"].as_f64().unwrap();
    assert!(p99 > 0.0 && p99.is_finite(), "p99 {p99}");
    // A quantile lands in a bucket: it is at most the bucket bound above
    // the slowest write.
    let bound = shoal_mon::LATENCY_BOUNDS_S
        .iter()
        .copied()
        .find(|b| *b >= slowest)
        .unwrap_or(f64::INFINITY);
    assert!(
        p99 <= bound,
        "p99 {p99} above {bound} (slowest write {slowest})"
    );
    println!("PromQL: {writes} writes, {reads} reads, write p99 {p99:.4} s, rate {rate:.1}/s");
    assert_eq!(query(&p, "count(shoal_osd_up == 1)"), Some(3.0));
    assert_eq!(query(&p, "shoal_health_status"), Some(0.0));
    assert_eq!(query(&p, "shoal_mon_quorum_size"), Some(1.0));
    assert_eq!(
        query(
            &p,
            "sum(shoal_pg_states{state=\"active+clean\"}) == sum(shoal_pg_total)"
        ),
        query(&p, "sum(shoal_pg_total)")
    );

    // An OSD stopped: PromQL sees it down and the health warn.
    d.kill9("osd.2");
    d.ok(&["osd", "down", "2"]);
    until("osd.2 down in Prometheus", 60, || {
        query(&p, "shoal_osd_up{osd=\"2\"}") == Some(0.0)
            && query(&p, "shoal_health_status") == Some(1.0)
            && query(&p, "shoal_health_check{code=\"OSD_DOWN\"}") == Some(1.0)
    });
}

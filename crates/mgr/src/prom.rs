//! Prometheus' text exposition format (version 0.0.4), from a
//! [`Snapshot`]: the cluster's state as the monitors show it (health,
//! quorum, OSDs, PGs, pools) and every daemon's newest report. Samples of
//! one family are written together under one `# HELP` and `# TYPE`, names
//! and units as Prometheus' conventions ask (`_total` counters, seconds,
//! bytes). A pure function: the same snapshot renders the same text.

use std::collections::BTreeMap;
use std::fmt::Write;

use shoal_monclient::{LATENCY_BOUNDS_S, MetricValue};

use crate::gather::Snapshot;

/// A metric family: its help, type and sample lines.
#[derive(Default)]
struct Family {
    help: String,
    kind: &'static str,
    lines: Vec<String>,
}

/// Families by name, written in name order.
#[derive(Default)]
struct Out {
    families: BTreeMap<String, Family>,
}

/// `{a="x",b="y"}` with Prometheus' escapes (or nothing for no labels).
fn labels(pairs: &[(&str, &str)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let mut s = String::from("{");
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{}=\"", sanitize(k));
        for c in v.chars() {
            match c {
                '\\' => s.push_str("\\\\"),
                '"' => s.push_str("\\\""),
                '\n' => s.push_str("\\n"),
                c => s.push(c),
            }
        }
        s.push('"');
    }
    s.push('}');
    s
}

/// A metric or label name as Prometheus accepts it: `[a-zA-Z_][a-zA-Z0-9_]*`.
fn sanitize(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

/// A float as Prometheus writes it.
fn num(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else if v.is_nan() {
        "NaN".to_string()
    } else {
        format!("{v}")
    }
}

impl Out {
    fn family(&mut self, name: &str, help: &str, kind: &'static str) -> &mut Family {
        let f = self.families.entry(name.to_string()).or_default();
        if f.kind.is_empty() {
            f.kind = kind;
            f.help = help.replace('\\', "\\\\").replace('\n', "\\n");
        }
        f
    }

    fn sample(&mut self, name: &str, help: &str, kind: &'static str, l: &[(&str, &str)], v: f64) {
        let line = format!("{name}{} {}", labels(l), num(v));
        self.family(name, help, kind).lines.push(line);
    }

    fn gauge(&mut self, name: &str, help: &str, l: &[(&str, &str)], v: f64) {
        self.sample(name, help, "gauge", l, v);
    }

    fn counter(&mut self, name: &str, help: &str, l: &[(&str, &str)], v: f64) {
        self.sample(name, help, "counter", l, v);
    }

    /// A histogram from per-bucket counts (not cumulative) for
    /// [`LATENCY_BOUNDS_S`] then `+Inf`, and the sum in seconds.
    fn histogram(&mut self, name: &str, help: &str, l: &[(&str, &str)], counts: &[u64], sum: f64) {
        let f = self.family(name, help, "histogram");
        let mut cumulative = 0u64;
        let bounds = LATENCY_BOUNDS_S.iter().copied().chain([f64::INFINITY]);
        for (le, c) in bounds.zip(counts) {
            cumulative = cumulative.saturating_add(*c);
            let le = num(le);
            let mut with_le: Vec<(&str, &str)> = l.to_vec();
            with_le.push(("le", &le));
            f.lines
                .push(format!("{name}_bucket{} {cumulative}", labels(&with_le)));
        }
        f.lines
            .push(format!("{name}_sum{} {}", labels(l), num(sum)));
        f.lines
            .push(format!("{name}_count{} {cumulative}", labels(l)));
    }

    fn finish(self) -> String {
        let mut s = String::new();
        for (name, f) in self.families {
            let _ = writeln!(s, "# HELP {name} {}", f.help);
            let _ = writeln!(s, "# TYPE {name} {}", f.kind);
            for l in f.lines {
                s.push_str(&l);
                s.push('\n');
            }
        }
        s
    }
}

/// Renders the snapshot as Prometheus text.
pub fn render(snap: &Snapshot) -> String {
    let mut o = Out::default();
    cluster(&mut o, snap);
    daemons(&mut o, snap);
    o.finish()
}

/// What the monitors' views say.
fn cluster(o: &mut Out, snap: &Snapshot) {
    let st = &snap.status;
    let level = match st.health.status.as_str() {
        "HEALTH_OK" => 0.0,
        "HEALTH_WARN" => 1.0,
        _ => 2.0,
    };
    o.gauge(
        "shoal_health_status",
        "Cluster health: 0 OK, 1 WARN, 2 ERR.",
        &[],
        level,
    );
    for c in &st.health.checks {
        o.gauge(
            "shoal_health_check",
            "A health check in force (muted ones apart), by code and severity.",
            &[("code", c.code.as_str()), ("severity", c.severity.as_str())],
            1.0,
        );
    }
    // Monitors.
    let mut in_quorum = 0.0;
    for m in &st.monmap.mons {
        let q = if m.in_quorum { 1.0 } else { 0.0 };
        in_quorum += q;
        o.gauge(
            "shoal_mon_quorum_status",
            "Whether a monitor is in the quorum (1) or not (0).",
            &[("mon", m.name.as_str())],
            q,
        );
    }
    o.gauge(
        "shoal_mon_quorum_size",
        "Monitors in the quorum.",
        &[],
        in_quorum,
    );
    o.counter(
        "shoal_mon_elections_total",
        "Elections held since the cluster began (the leader's Raft term).",
        &[],
        st.election_term as f64,
    );
    if let Some(leader) = &st.leader {
        o.gauge(
            "shoal_mon_leader",
            "The monitor that leads the quorum (1).",
            &[("mon", leader.as_str())],
            1.0,
        );
    }
    // Managers.
    if let Some(a) = &st.mgrmap.active {
        o.gauge(
            "shoal_mgr_status",
            "Managers: 1 active, 0 standby.",
            &[("mgr", a.name.as_str())],
            1.0,
        );
    }
    for s in &st.mgrmap.standbys {
        o.gauge(
            "shoal_mgr_status",
            "Managers: 1 active, 0 standby.",
            &[("mgr", s.name.as_str())],
            0.0,
        );
    }
    // OSDs.
    let osdmap = st.osdmap.clone().unwrap_or_default();
    o.gauge(
        "shoal_osdmap_epoch",
        "The OSD map's epoch.",
        &[],
        f64::from(osdmap.epoch),
    );
    let flag = |x: bool| if x { 1.0 } else { 0.0 };
    for n in snap.tree.osds() {
        let Some(osd) = &n.osd else { continue };
        let id = n.id.to_string();
        let l = [("osd", id.as_str())];
        o.gauge("shoal_osd_up", "Whether an OSD is up.", &l, flag(osd.up));
        o.gauge("shoal_osd_in", "Whether an OSD is in.", &l, flag(osd.is_in));
        o.gauge(
            "shoal_osd_weight",
            "An OSD's CRUSH weight.",
            &l,
            n.crush_weight,
        );
        o.gauge(
            "shoal_osd_reweight",
            "An OSD's reweight (0 when out).",
            &l,
            osd.reweight,
        );
        if let (Some(total), Some(used)) = (n.total_bytes, n.used_bytes) {
            o.gauge(
                "shoal_osd_stat_bytes",
                "An OSD store's size, as it last reported.",
                &l,
                total as f64,
            );
            o.gauge(
                "shoal_osd_stat_bytes_used",
                "Bytes used in an OSD's store, as it last reported.",
                &l,
                used as f64,
            );
        }
    }
    // PGs and objects.
    let pg = st.pgmap.clone().unwrap_or_default();
    o.gauge(
        "shoal_pg_total",
        "PGs in every pool.",
        &[],
        pg.num_pgs as f64,
    );
    for s in &pg.num_pg_by_state {
        o.gauge(
            "shoal_pg_states",
            "PGs in each state (as reported: active+clean, active+degraded, ...).",
            &[("state", s.name.as_str())],
            s.num as f64,
        );
    }
    o.gauge(
        "shoal_objects",
        "Objects stored (each counted once).",
        &[],
        pg.num_objects as f64,
    );
    o.gauge(
        "shoal_object_copies",
        "Object copies the pools' redundancy calls for.",
        &[],
        pg.num_object_copies as f64,
    );
    o.gauge(
        "shoal_objects_degraded",
        "Object copies missing (degraded).",
        &[],
        pg.num_objects_degraded as f64,
    );
    o.gauge(
        "shoal_objects_misplaced",
        "Object copies on the wrong OSD (misplaced).",
        &[],
        pg.num_objects_misplaced as f64,
    );
    o.gauge(
        "shoal_recovery_objects_left",
        "Objects recovery and backfill have still to copy.",
        &[],
        pg.recovery_objects_left as f64,
    );
    o.gauge(
        "shoal_recovery_objects_per_second",
        "Objects recovered or backfilled per second, as the primaries measure it.",
        &[],
        pg.recovery_objects_per_s as f64,
    );
    // Space.
    let df = &snap.df;
    o.gauge(
        "shoal_cluster_total_bytes",
        "Raw space of every OSD's store.",
        &[],
        df.stats.total_bytes as f64,
    );
    o.gauge(
        "shoal_cluster_used_bytes",
        "Raw space used.",
        &[],
        df.stats.total_used_raw_bytes as f64,
    );
    o.gauge(
        "shoal_cluster_available_bytes",
        "Raw space available.",
        &[],
        df.stats.total_avail_bytes as f64,
    );
    for p in &df.pools {
        let id = p.id.to_string();
        let l = [("pool", p.name.as_str()), ("pool_id", id.as_str())];
        let s = &p.stats;
        o.gauge(
            "shoal_pool_stored_bytes",
            "Bytes stored in a pool (before redundancy).",
            &l,
            s.stored as f64,
        );
        o.gauge(
            "shoal_pool_used_bytes",
            "Raw bytes a pool takes (with redundancy).",
            &l,
            s.bytes_used as f64,
        );
        o.gauge(
            "shoal_pool_objects",
            "Objects in a pool.",
            &l,
            s.objects as f64,
        );
        o.gauge(
            "shoal_pool_max_avail_bytes",
            "Bytes a pool can still store.",
            &l,
            s.max_avail as f64,
        );
        o.gauge(
            "shoal_pool_percent_used",
            "The fraction of a pool's possible space used (0 to 1).",
            &l,
            s.percent_used,
        );
        let q = p.quota.max_bytes;
        if q > 0 {
            o.gauge(
                "shoal_pool_quota_bytes",
                "A pool's quota in bytes (absent: none).",
                &l,
                q as f64,
            );
        }
        let q = p.quota.max_objects;
        if q > 0 {
            o.gauge(
                "shoal_pool_quota_objects",
                "A pool's quota in objects (absent: none).",
                &l,
                q as f64,
            );
        }
    }
}

/// Every daemon's report, its metrics prefixed `shoal_<kind>_` and
/// labelled with the daemon.
fn daemons(o: &mut Out, snap: &Snapshot) {
    for (age_ms, r) in &snap.reports {
        let kind = sanitize(&r.kind);
        o.gauge(
            "shoal_daemon_report_age_seconds",
            "Age of a daemon's newest performance report.",
            &[("daemon", &r.daemon), ("kind", &kind)],
            *age_ms as f64 / 1000.0,
        );
        for m in &r.metrics {
            let name = format!("shoal_{kind}_{}", sanitize(&m.name));
            let mut l: Vec<(&str, &str)> = vec![("daemon", r.daemon.as_str())];
            l.extend(
                m.labels
                    .iter()
                    .filter(|(k, _)| k != "daemon" && k != "le")
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            );
            match &m.value {
                MetricValue::Counter(v) => o.counter(&name, &m.help, &l, *v as f64),
                MetricValue::Gauge(v) => o.gauge(&name, &m.help, &l, *v as f64),
                MetricValue::Histogram { counts, sum_ns } => {
                    if counts.len() == LATENCY_BOUNDS_S.len() + 1 {
                        o.histogram(&name, &m.help, &l, counts, *sum_ns as f64 / 1e9);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::Value;
    use serde_json::json;
    use shoal_monclient::replies::StatusReply;
    use shoal_monclient::{DaemonReport, Histogram, Metric};
    use std::time::Duration;

    /// A whole `status` reply of an empty cluster, with the top-level
    /// fields of `over` in place of its own.
    pub(crate) fn status_with(over: Value) -> StatusReply {
        let mut base = json!({
            "fsid": "f", "election_term": 1, "quorum": ["a"], "leader": "a",
            "state_version": 1, "osdmap": null, "pgmap": null,
            "health": { "status": "HEALTH_OK", "checks": [], "muted": [] },
            "mgrmap": { "epoch": 0, "available": false, "active": null, "standbys": [] },
            "monmap": { "epoch": 1, "mons": [] },
            "auth": { "entities": 1, "service_secret": 1 },
        });
        if let (Some(b), Some(o)) = (base.as_object_mut(), over.as_object()) {
            for (k, v) in o {
                b.insert(k.clone(), v.clone());
            }
        }
        serde_json::from_value(base).unwrap()
    }

    fn snapshot() -> Snapshot {
        let h = Histogram::default();
        h.observe(Duration::from_micros(80));
        h.observe(Duration::from_millis(2));
        Snapshot {
            at_ms: 1,
            status: status_with(json!({
                "health": { "status": "HEALTH_WARN", "checks": [
                    { "code": "OSD_DOWN", "severity": "HEALTH_WARN", "summary": "1 osds down",
                      "detail": ["osd.1 is down"] }
                ], "muted": [] },
                "monmap": { "epoch": 1, "mons": [
                    { "name": "a", "addr": "127.0.0.1:1", "in_quorum": true },
                    { "name": "b", "addr": "127.0.0.1:2", "in_quorum": false }
                ] },
                "leader": "a",
                "election_term": 3,
                "mgrmap": { "epoch": 2, "available": true,
                            "active": { "name": "x", "addr": "127.0.0.1:3", "since_ms": 1 },
                            "standbys": [{ "name": "y", "addr": "127.0.0.1:4" }] },
                "osdmap": { "epoch": 12, "num_osds": 2, "num_up_osds": 1, "num_in_osds": 2,
                            "flags": [], "num_pools": 1, "num_pgs": 8 },
                "pgmap": {
                    "epoch": 12, "num_pgs": 8, "num_bytes": 5,
                    "raw_bytes": 200, "raw_bytes_used": 20, "raw_bytes_avail": 180,
                    "num_pg_by_state": [
                        { "name": "active+clean", "num": 6 },
                        { "name": "active+undersized+degraded", "num": 2 }
                    ],
                    "num_objects": 10, "num_object_copies": 30,
                    "num_objects_degraded": 4, "num_objects_misplaced": 0,
                    "recovery_objects_left": 4, "recovery_objects_per_s": 2
                }
            })),
            tree: serde_json::from_value(json!({ "epoch": 12, "stray": [], "nodes": [
                { "id": -1, "name": "default", "type": "root", "crush_weight": 2.0, "depth": 0 },
                { "id": 0, "name": "osd.0", "type": "osd", "depth": 1, "crush_weight": 1.0,
                  "osd": 0, "up": true, "in": true, "reweight": 1.0, "primary_affinity": 1.0,
                  "addr": null, "total_bytes": 100, "used_bytes": 10 },
                { "id": 1, "name": "osd.1", "type": "osd", "depth": 1, "crush_weight": 1.0,
                  "osd": 1, "up": false, "in": true, "reweight": 1.0, "primary_affinity": 1.0,
                  "addr": null }
            ] }))
            .unwrap(),
            df: serde_json::from_value(json!({
                "epoch": 12,
                "stats": { "total_bytes": 200, "total_used_raw_bytes": 20,
                           "total_avail_bytes": 180, "total_used_raw_ratio": 0.1,
                           "num_osds": 2 },
                "pools": [ { "name": "rbd \"x\"", "id": 1, "pg_num": 8,
                    "quota": { "max_bytes": 0, "max_objects": 0, "full": false },
                    "stats": { "stored": 5, "bytes_used": 15, "objects": 2, "max_avail": 60,
                               "percent_used": 0.2 } } ] }))
            .unwrap(),
            reports: vec![(
                1500,
                DaemonReport {
                    daemon: "osd.0".into(),
                    kind: "osd".into(),
                    metrics: vec![
                        Metric::counter("ops_total", "Requests.", &[("kind", "read")], 7),
                        Metric::histogram(
                            "op_latency_seconds",
                            "Latency.",
                            &[("kind", "read")],
                            &h,
                        ),
                    ],
                },
            )],
        }
    }

    #[test]
    fn the_cluster_and_the_reports_render_as_prometheus_text() {
        let text = render(&snapshot());
        let has = |l: &str| assert!(text.lines().any(|x| x == l), "{l:?} missing in\n{text}");
        has("# TYPE shoal_health_status gauge");
        has("shoal_health_status 1");
        has("shoal_health_check{code=\"OSD_DOWN\",severity=\"HEALTH_WARN\"} 1");
        has("shoal_mon_quorum_status{mon=\"b\"} 0");
        has("shoal_mon_quorum_size 1");
        has("# TYPE shoal_mon_elections_total counter");
        has("shoal_mon_elections_total 3");
        has("shoal_mgr_status{mgr=\"x\"} 1");
        has("shoal_mgr_status{mgr=\"y\"} 0");
        has("shoal_osd_up{osd=\"1\"} 0");
        has("shoal_osd_stat_bytes_used{osd=\"0\"} 10");
        has("shoal_pg_states{state=\"active+undersized+degraded\"} 2");
        has("shoal_objects_degraded 4");
        has("shoal_pool_stored_bytes{pool=\"rbd \\\"x\\\"\",pool_id=\"1\"} 5");
        has("shoal_pool_percent_used{pool=\"rbd \\\"x\\\"\",pool_id=\"1\"} 0.2");
        has("# TYPE shoal_osd_ops_total counter");
        has("shoal_osd_ops_total{daemon=\"osd.0\",kind=\"read\"} 7");
        has("# TYPE shoal_osd_op_latency_seconds histogram");
        has("shoal_osd_op_latency_seconds_bucket{daemon=\"osd.0\",kind=\"read\",le=\"0.00005\"} 0");
        has("shoal_osd_op_latency_seconds_bucket{daemon=\"osd.0\",kind=\"read\",le=\"0.0001\"} 1");
        has("shoal_osd_op_latency_seconds_bucket{daemon=\"osd.0\",kind=\"read\",le=\"0.0025\"} 2");
        has("shoal_osd_op_latency_seconds_bucket{daemon=\"osd.0\",kind=\"read\",le=\"+Inf\"} 2");
        has("shoal_osd_op_latency_seconds_count{daemon=\"osd.0\",kind=\"read\"} 2");
        has("shoal_osd_op_latency_seconds_sum{daemon=\"osd.0\",kind=\"read\"} 0.00208");
        has("shoal_daemon_report_age_seconds{daemon=\"osd.0\",kind=\"osd\"} 1.5");
        // Each family's samples come together, under one HELP and TYPE.
        let types = text
            .lines()
            .filter(|l| l.starts_with("# TYPE shoal_osd_up "))
            .count();
        assert_eq!(types, 1);
        let mut seen = std::collections::BTreeSet::new();
        let mut current = String::new();
        for l in text.lines() {
            if let Some(rest) = l.strip_prefix("# TYPE ") {
                current = rest.split(' ').next().unwrap_or("").to_string();
                assert!(seen.insert(current.clone()), "{current} twice");
            } else if !l.starts_with('#') {
                assert!(l.starts_with(&current), "{l} outside its family {current}");
            }
        }
    }

    #[test]
    fn names_and_labels_from_reports_are_made_safe() {
        assert_eq!(sanitize("op latency"), "op_latency");
        assert_eq!(sanitize("9x"), "_9x");
        assert_eq!(labels(&[("a", "x\\y\nz")]), "{a=\"x\\\\y\\nz\"}");
        let mut s = snapshot();
        s.reports[0].1.kind = "os-d".into();
        s.reports[0].1.metrics[0]
            .labels
            .push(("le".into(), "bad".into()));
        let text = render(&s);
        assert!(text.contains("shoal_os_d_ops_total{daemon=\"osd.0\",kind=\"read\"} 7"));
        // A histogram of the wrong shape is left out rather than garbled.
        s.reports[0].1.metrics[1].value = MetricValue::Histogram {
            counts: vec![1],
            sum_ns: 1,
        };
        assert!(!render(&s).contains("op_latency_seconds_bucket"));
    }
}

//! The OSD views an operator types first, as Ceph's tools print them:
//! `osd df` (and `osd df tree`: each OSD's size, use, PGs and its
//! utilization's variance from the mean, with the spread's standard
//! deviation), `osd crush tree` (the hierarchy without the OSDs' states)
//! and `osd perf` (each OSD's mean commit and apply latency). Each is made
//! from the monitors' typed replies (`osd tree`, `pg dump`, `daemon
//! reports`) by a pure function, printed plain or as JSON in Ceph's field
//! names.

use std::collections::BTreeMap;

use serde::Serialize;
use shoal_monclient::replies::{DaemonReportsReply, OsdTreeReply, PgDumpReply, TreeNode};
use shoal_monclient::{MetricValue, replies::OsdEntry};

use super::units::human_bytes;

/// One row of `osd df`: an OSD, or (in the tree) a bucket.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DfNode {
    /// The CRUSH id (negative: a bucket).
    pub id: i32,
    /// Its device class (OSDs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_class: Option<String>,
    /// `osd.3`, `host1`, ...
    pub name: String,
    /// `osd`, `host`, `root`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// Its CRUSH weight.
    pub crush_weight: f64,
    /// Levels below its root (the tree).
    pub depth: u64,
    /// Its reweight (OSDs; 0 when out).
    pub reweight: f64,
    /// Size, KiB.
    pub kb: u64,
    /// Used, KiB.
    pub kb_used: u64,
    /// Available, KiB.
    pub kb_avail: u64,
    /// Used over size, percent.
    pub utilization: f64,
    /// Its utilization over the cluster's mean (0: no size reported).
    pub var: f64,
    /// PGs whose up set holds it (OSDs).
    pub pgs: u64,
    /// `up`, `down` (OSDs; buckets: empty).
    pub status: String,
}

/// The spread of `osd df`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DfSummary {
    /// Size over every OSD that reported, KiB.
    pub total_kb: u64,
    /// Used, KiB.
    pub total_kb_used: u64,
    /// Available, KiB.
    pub total_kb_avail: u64,
    /// Used over size, percent.
    pub average_utilization: f64,
    /// The lowest VAR of an OSD that reported.
    pub min_var: f64,
    /// The highest.
    pub max_var: f64,
    /// The standard deviation of the OSDs' utilizations, percent points
    /// (Ceph's name).
    pub dev: f64,
    /// The same, by its full name.
    pub stddev: f64,
}

/// `osd df` (or `osd df tree`) as Ceph's JSON has it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OsdDf {
    /// Rows: the OSDs by id, or the tree depth first.
    pub nodes: Vec<DfNode>,
    /// OSDs in no CRUSH bucket (the tree).
    pub stray: Vec<DfNode>,
    /// The spread.
    pub summary: DfSummary,
}

fn percent(used: u64, size: u64) -> f64 {
    if size == 0 {
        0.0
    } else {
        used as f64 * 100.0 / size as f64
    }
}

/// PGs per OSD: those whose up set holds it.
fn pgs_by_osd(pgs: &PgDumpReply) -> BTreeMap<i32, u64> {
    let mut n = BTreeMap::new();
    for p in &pgs.pg_stats {
        for o in &p.up {
            *n.entry(*o).or_insert(0) += 1;
        }
    }
    n
}

fn osd_node(
    id: i32,
    name: String,
    entry: Option<&OsdEntry>,
    space: (u64, u64),
    pgs: u64,
) -> DfNode {
    let (size, used) = space;
    DfNode {
        id,
        device_class: None,
        name,
        kind: "osd".into(),
        crush_weight: 0.0,
        depth: 0,
        reweight: entry.map_or(0.0, |e| if e.is_in { e.reweight } else { 0.0 }),
        kb: size / 1024,
        kb_used: used / 1024,
        kb_avail: size.saturating_sub(used) / 1024,
        utilization: percent(used, size),
        var: 0.0,
        pgs,
        status: match entry {
            Some(e) if e.up => "up".into(),
            Some(_) => "down".into(),
            None => "destroyed".into(),
        },
    }
}

fn from_tree(n: &TreeNode, pgs: &BTreeMap<i32, u64>) -> DfNode {
    let space = (n.total_bytes.unwrap_or(0), n.used_bytes.unwrap_or(0));
    let mut d = osd_node(
        n.id,
        n.name.clone(),
        n.osd.as_ref(),
        space,
        pgs.get(&n.id).copied().unwrap_or(0),
    );
    d.kind = n.kind.clone();
    d.device_class = n.class.clone();
    d.crush_weight = n.crush_weight;
    d.depth = n.depth;
    d
}

/// `osd df` from the tree and the PGs: the OSDs by id (with `tree`: the
/// hierarchy depth first, each bucket summing the OSDs below it), each
/// with its VAR; the summary's spread is over the OSDs that reported
/// their size.
pub fn osd_df(tree: &OsdTreeReply, pgs: &PgDumpReply, as_tree: bool) -> OsdDf {
    let by_osd = pgs_by_osd(pgs);
    let mut osds: Vec<DfNode> = tree.osds().map(|n| from_tree(n, &by_osd)).collect();
    let stray: Vec<DfNode> = tree
        .stray
        .iter()
        .map(|o| {
            let pgs = by_osd.get(&o.osd).copied().unwrap_or(0);
            osd_node(o.osd, format!("osd.{}", o.osd), Some(o), (0, 0), pgs)
        })
        .collect();
    osds.sort_by_key(|n| n.id);
    osds.dedup_by_key(|n| n.id);
    let reported: Vec<&DfNode> = osds.iter().filter(|n| n.kb > 0).collect();
    let total_kb: u64 = reported.iter().map(|n| n.kb).sum();
    let total_kb_used: u64 = reported.iter().map(|n| n.kb_used).sum();
    // The mean from the bytes themselves (KiB sums would round it).
    let mut seen = std::collections::BTreeSet::new();
    let (size_b, used_b) = tree
        .osds()
        .filter(|n| n.total_bytes.unwrap_or(0) > 0 && seen.insert(n.id))
        .fold((0u64, 0u64), |(s, u), n| {
            (
                s + n.total_bytes.unwrap_or(0),
                u + n.used_bytes.unwrap_or(0),
            )
        });
    let avg = percent(used_b, size_b);
    let var = |u: f64| if avg > 0.0 { u / avg } else { 0.0 };
    let vars: Vec<f64> = reported.iter().map(|n| var(n.utilization)).collect();
    let dev = if reported.is_empty() {
        0.0
    } else {
        let sq: f64 = reported.iter().map(|n| (n.utilization - avg).powi(2)).sum();
        (sq / reported.len() as f64).sqrt()
    };
    let summary = DfSummary {
        total_kb,
        total_kb_used,
        total_kb_avail: total_kb.saturating_sub(total_kb_used),
        average_utilization: avg,
        min_var: vars.iter().copied().reduce(f64::min).unwrap_or(0.0),
        max_var: vars.iter().copied().reduce(f64::max).unwrap_or(0.0),
        dev,
        stddev: dev,
    };
    let with_var = |mut n: DfNode| {
        if n.kb > 0 {
            n.var = var(n.utilization);
        }
        n
    };
    let nodes = if as_tree {
        // Buckets sum the OSDs below them: those after it, deeper, until
        // the next node at its depth or above.
        let mut rows: Vec<DfNode> = tree.nodes.iter().map(|n| from_tree(n, &by_osd)).collect();
        for i in 0..rows.len() {
            if rows[i].kind == "osd" {
                continue;
            }
            let depth = rows[i].depth;
            let (mut kb, mut used) = (0, 0);
            for r in rows[i + 1..].iter().take_while(|r| r.depth > depth) {
                if r.kind == "osd" {
                    kb += r.kb;
                    used += r.kb_used;
                }
            }
            let b = &mut rows[i];
            b.kb = kb;
            b.kb_used = used;
            b.kb_avail = kb.saturating_sub(used);
            b.utilization = percent(used, kb);
            b.reweight = 0.0;
            b.pgs = 0;
            b.status = String::new();
        }
        rows.into_iter().map(with_var).collect()
    } else {
        osds.into_iter().map(with_var).collect()
    };
    OsdDf {
        nodes,
        stray: stray.into_iter().map(with_var).collect(),
        summary,
    }
}

fn kib(kb: u64) -> String {
    human_bytes(kb.saturating_mul(1024))
}

/// `osd df` for people, as Ceph prints it (without the DATA, OMAP and
/// META columns, which the stores do not tell apart).
pub fn osd_df_plain(d: &OsdDf, as_tree: bool) -> String {
    let mut out = format!(
        "{:>4} {:>6} {:>8} {:>8} {:>9} {:>9} {:>9} {:>6} {:>5} {:>4}  {:<6}{}\n",
        "ID",
        "CLASS",
        "WEIGHT",
        "REWEIGHT",
        "SIZE",
        "RAW USE",
        "AVAIL",
        "%USE",
        "VAR",
        "PGS",
        "STATUS",
        if as_tree { "  TYPE NAME" } else { "" }
    );
    let row = |n: &DfNode| {
        let osd = n.kind == "osd";
        let name = if as_tree {
            format!("  {}{} {}", "    ".repeat(n.depth as usize), n.kind, n.name)
        } else {
            String::new()
        };
        format!(
            "{:>4} {:>6} {:>8.5} {:>8} {:>9} {:>9} {:>9} {:>6.2} {:>5.2} {:>4}  {:<6}{}\n",
            n.id,
            n.device_class.as_deref().unwrap_or(""),
            n.crush_weight,
            if osd {
                format!("{:.5}", n.reweight)
            } else {
                "-".into()
            },
            kib(n.kb),
            kib(n.kb_used),
            kib(n.kb_avail),
            n.utilization,
            n.var,
            if osd {
                n.pgs.to_string()
            } else {
                String::new()
            },
            n.status,
            name
        )
    };
    for n in d.nodes.iter().chain(&d.stray) {
        out.push_str(&row(n));
    }
    let s = &d.summary;
    out.push_str(&format!(
        "{:>38} {:>9} {:>9} {:>9} {:>6.2}\n",
        "TOTAL",
        kib(s.total_kb),
        kib(s.total_kb_used),
        kib(s.total_kb_avail),
        s.average_utilization
    ));
    out.push_str(&format!(
        "MIN/MAX VAR: {:.2}/{:.2}  STDDEV: {:.2}\n",
        s.min_var, s.max_var, s.dev
    ));
    out
}

/// `osd crush tree`: the hierarchy, without the OSDs' states.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CrushTree {
    /// Buckets and OSDs, each after its parent.
    pub nodes: Vec<CrushNode>,
    /// OSDs in no bucket.
    pub stray: Vec<CrushNode>,
}

/// One node of [`CrushTree`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CrushNode {
    /// The CRUSH id.
    pub id: i32,
    /// Its name.
    pub name: String,
    /// Its type.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its device class (OSDs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_class: Option<String>,
    /// Its CRUSH weight.
    pub crush_weight: f64,
    /// Levels below its root.
    pub depth: u64,
}

/// The CRUSH view of `tree`.
pub fn crush_tree(tree: &OsdTreeReply) -> CrushTree {
    let node = |n: &TreeNode| CrushNode {
        id: n.id,
        name: n.name.clone(),
        kind: n.kind.clone(),
        device_class: n.class.clone(),
        crush_weight: n.crush_weight,
        depth: n.depth,
    };
    CrushTree {
        nodes: tree.nodes.iter().map(node).collect(),
        stray: tree
            .stray
            .iter()
            .map(|o| CrushNode {
                id: o.osd,
                name: format!("osd.{}", o.osd),
                kind: "osd".into(),
                device_class: None,
                crush_weight: 0.0,
                depth: 0,
            })
            .collect(),
    }
}

/// `osd crush tree` for people.
pub fn crush_tree_plain(t: &CrushTree) -> String {
    let mut out = format!("{:>4} {:>6} {:>9}  TYPE NAME\n", "ID", "CLASS", "WEIGHT");
    for n in &t.nodes {
        out.push_str(&format!(
            "{:>4} {:>6} {:>9.5}  {}{} {}\n",
            n.id,
            n.device_class.as_deref().unwrap_or(""),
            n.crush_weight,
            "    ".repeat(n.depth as usize),
            n.kind,
            n.name
        ));
    }
    for n in &t.stray {
        out.push_str(&format!(
            "{:>4} {:>6} {:>9.5}  {} (not in CRUSH)\n",
            n.id, "", n.crush_weight, n.name
        ));
    }
    out
}

/// `osd perf` as Ceph's JSON has it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OsdPerf {
    /// The OSDs'.
    pub osdstats: OsdPerfStats,
}

/// The list of [`OsdPerf`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OsdPerfStats {
    /// One per OSD that reported, by id.
    pub osd_perf_infos: Vec<OsdPerfInfo>,
}

/// One OSD of [`OsdPerf`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OsdPerfInfo {
    /// The OSD.
    pub id: i32,
    /// Its latencies.
    pub perf_stats: PerfStats,
}

/// An OSD's mean latencies since it started: commit, of the client writes
/// it led (from arrival to the reply, once every copy is durable); apply,
/// of the changes it applied as a replica.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PerfStats {
    /// Commit latency, ms (rounded down, as Ceph prints it).
    pub commit_latency_ms: u64,
    /// Apply latency, ms.
    pub apply_latency_ms: u64,
    /// Commit latency, ns.
    pub commitlatency_ns: u64,
    /// Apply latency, ns.
    pub applylatency_ns: u64,
    /// Client writes measured.
    pub commits: u64,
    /// Replica changes measured.
    pub applies: u64,
}

/// The mean of the `op_latency_seconds` histogram of `kind` in `metrics`,
/// ns, and its count.
fn mean_latency(metrics: &[shoal_monclient::Metric], kind: &str) -> (u64, u64) {
    for m in metrics {
        let is_kind = m.labels.iter().any(|(k, v)| k == "kind" && v == kind);
        if m.name != "op_latency_seconds" || !is_kind {
            continue;
        }
        if let MetricValue::Histogram { counts, sum_ns } = &m.value {
            let n: u64 = counts.iter().sum();
            return (sum_ns.checked_div(n).unwrap_or(0), n);
        }
    }
    (0, 0)
}

/// `osd perf` from the OSDs' newest reports.
pub fn osd_perf(reports: &DaemonReportsReply) -> OsdPerf {
    let mut infos: Vec<OsdPerfInfo> = reports
        .reports
        .iter()
        .filter(|r| r.report.kind == "osd")
        .filter_map(|r| {
            let id = r.report.daemon.strip_prefix("osd.")?.parse().ok()?;
            let (commit, commits) = mean_latency(&r.report.metrics, "write");
            let (apply, applies) = mean_latency(&r.report.metrics, "subop");
            Some(OsdPerfInfo {
                id,
                perf_stats: PerfStats {
                    commit_latency_ms: commit / 1_000_000,
                    apply_latency_ms: apply / 1_000_000,
                    commitlatency_ns: commit,
                    applylatency_ns: apply,
                    commits,
                    applies,
                },
            })
        })
        .collect();
    infos.sort_by_key(|i| i.id);
    infos.dedup_by_key(|i| i.id);
    OsdPerf {
        osdstats: OsdPerfStats {
            osd_perf_infos: infos,
        },
    }
}

/// `osd perf` for people.
pub fn osd_perf_plain(p: &OsdPerf) -> String {
    let mut out = format!(
        "{:>3}  {:>18}  {:>17}\n",
        "osd", "commit_latency(ms)", "apply_latency(ms)"
    );
    for i in &p.osdstats.osd_perf_infos {
        out.push_str(&format!(
            "{:>3}  {:>18}  {:>17}\n",
            i.id, i.perf_stats.commit_latency_ms, i.perf_stats.apply_latency_ms
        ));
    }
    out
}

/// One pool of `osd pool stats`, in Ceph's field names.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolStats {
    /// Its name.
    pub pool_name: String,
    /// Its id.
    pub pool_id: u64,
    /// Its client I/O per second, summed over the OSDs (empty when none).
    pub client_io_rate: BTreeMap<String, u64>,
}

/// `osd pool stats` from the pools and their rates (`shoal_mgr`'s, from
/// the OSDs' consecutive reports): every pool, in id order.
pub fn pool_stats(
    pools: &[shoal_monclient::replies::PoolReply],
    rates: &BTreeMap<u64, shoal_mgr::gather::Io>,
) -> Vec<PoolStats> {
    let mut out: Vec<PoolStats> = pools
        .iter()
        .map(|p| {
            let mut io = BTreeMap::new();
            if let Some(r) = rates.get(&p.id) {
                for (k, v) in [
                    ("read_bytes_sec", r.read_bytes),
                    ("write_bytes_sec", r.write_bytes),
                    ("read_op_per_sec", r.read_ops),
                    ("write_op_per_sec", r.write_ops),
                ] {
                    let v = v.round() as u64;
                    if v > 0 {
                        io.insert(k.to_string(), v);
                    }
                }
            }
            PoolStats {
                pool_name: p.name.clone(),
                pool_id: p.id,
                client_io_rate: io,
            }
        })
        .collect();
    out.sort_by_key(|p| p.pool_id);
    out
}

/// `osd pool stats` for people, as Ceph prints it.
pub fn pool_stats_plain(pools: &[PoolStats]) -> String {
    let mut out = String::new();
    for p in pools {
        out.push_str(&format!("pool {} id {}\n", p.pool_name, p.pool_id));
        let io = &p.client_io_rate;
        if io.is_empty() {
            out.push_str("  nothing is going on\n\n");
            continue;
        }
        let get = |k: &str| io.get(k).copied().unwrap_or(0);
        let mut parts = Vec::new();
        for (k, what) in [("read_bytes_sec", "rd"), ("write_bytes_sec", "wr")] {
            if get(k) > 0 {
                parts.push(format!("{}/s {what}", human_bytes(get(k))));
            }
        }
        for (k, what) in [("read_op_per_sec", "rd"), ("write_op_per_sec", "wr")] {
            if get(k) > 0 {
                parts.push(format!("{} op/s {what}", get(k)));
            }
        }
        out.push_str(&format!("  client io {}\n\n", parts.join(", ")));
    }
    out
}

/// `osd pool autoscale-status` for people: each pool's size, rate, raw
/// capacity, share, PG count, the count it calls for where it is off by
/// the threshold, and its mode.
pub fn autoscale_plain(v: &shoal_monclient::replies::AutoscaleStatusReply) -> String {
    let width = v
        .pools
        .iter()
        .map(|p| p.pool_name.len())
        .max()
        .unwrap_or(0)
        .max(4);
    // Ceph's columns: TARGET SIZE, TARGET RATIO and EFFECTIVE RATIO are
    // blank where the operator said nothing.
    let mut out = format!(
        "{:<width$} {:>10} {:>11} {:>5} {:>12} {:>7} {:>12} {:>15} {:>7} {:>11}  {:<9}  {}\n",
        "POOL",
        "SIZE",
        "TARGET SIZE",
        "RATE",
        "RAW CAPACITY",
        "RATIO",
        "TARGET RATIO",
        "EFFECTIVE RATIO",
        "PG_NUM",
        "NEW PG_NUM",
        "AUTOSCALE",
        "BULK"
    );
    let blank_zero = |x: f64| {
        if x == 0.0 {
            String::new()
        } else {
            format!("{x:.4}")
        }
    };
    for p in &v.pools {
        out.push_str(&format!(
            "{:<width$} {:>10} {:>11} {:>5.1} {:>12} {:>7.4} {:>12} {:>15} {:>7} {:>11}  {:<9}  {}\n",
            p.pool_name,
            human_bytes(p.logical_used),
            if p.target_bytes == 0 {
                String::new()
            } else {
                human_bytes(p.target_bytes)
            },
            p.raw_used_rate,
            human_bytes(p.raw_capacity),
            p.capacity_ratio,
            blank_zero(p.target_ratio),
            blank_zero(p.effective_target_ratio),
            p.pg_num_target,
            if p.would_adjust {
                p.pg_num_ideal.to_string()
            } else {
                String::new()
            },
            p.pg_autoscale_mode,
            p.bulk,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tree() -> OsdTreeReply {
        let osd = |id: i32, depth: u64, total: u64, used: u64| {
            json!({"id": id, "name": format!("osd.{id}"), "type": "osd", "crush_weight": 0.01,
                   "depth": depth, "class": "hdd", "osd": id, "up": id != 2, "in": true,
                   "reweight": 1.0, "primary_affinity": 1.0, "addr": null,
                   "total_bytes": total, "used_bytes": used})
        };
        serde_json::from_value(json!({
            "epoch": 9,
            "nodes": [
                {"id": -1, "name": "default", "type": "root", "crush_weight": 0.03, "depth": 0},
                {"id": -2, "name": "h1", "type": "host", "crush_weight": 0.02, "depth": 1},
                osd(0, 2, 100 << 20, 10 << 20),
                osd(1, 2, 100 << 20, 30 << 20),
                {"id": -3, "name": "h2", "type": "host", "crush_weight": 0.01, "depth": 1},
                osd(2, 2, 200 << 20, 40 << 20),
            ],
            "stray": [],
        }))
        .unwrap()
    }

    fn pgs() -> PgDumpReply {
        let pg = |id: &str, up: [i32; 2]| {
            json!({"pgid": id, "state": "active+clean", "objects": 0, "bytes": 0,
                   "version": "0'0", "log_size": 0, "up": up, "acting": up,
                   "up_primary": up[0], "acting_primary": up[0], "reporter": null,
                   "reported_epoch": null})
        };
        serde_json::from_value(json!({
            "epoch": 9,
            "pg_stats": [pg("1.0", [0, 2]), pg("1.1", [1, 2]), pg("1.2", [0, 1])],
            "osd_stats": [],
        }))
        .unwrap()
    }

    #[test]
    fn osd_df_has_each_osds_share_and_the_spread() {
        let d = osd_df(&tree(), &pgs(), false);
        let ids: Vec<i32> = d.nodes.iter().map(|n| n.id).collect();
        assert_eq!(ids, [0, 1, 2]);
        // 80 MiB of 400: 20 %; OSDs at 10 %, 30 %, 20 %.
        let s = &d.summary;
        assert_eq!(s.total_kb, 400 << 10);
        assert_eq!(s.total_kb_used, 80 << 10);
        assert!((s.average_utilization - 20.0).abs() < 1e-9);
        let var: Vec<f64> = d.nodes.iter().map(|n| n.var).collect();
        assert!(
            (var[0] - 0.5).abs() < 1e-9 && (var[1] - 1.5).abs() < 1e-9,
            "{var:?}"
        );
        assert!((s.min_var - 0.5).abs() < 1e-9 && (s.max_var - 1.5).abs() < 1e-9);
        // sqrt(((10-20)^2 + (30-20)^2 + 0) / 3)
        assert!((s.dev - (200.0f64 / 3.0).sqrt()).abs() < 1e-9, "{}", s.dev);
        let pgs: Vec<u64> = d.nodes.iter().map(|n| n.pgs).collect();
        assert_eq!(pgs, [2, 2, 2]);
        assert_eq!(d.nodes[2].status, "down");
        let text = osd_df_plain(&d, false);
        assert!(
            text.contains("MIN/MAX VAR: 0.50/1.50  STDDEV: 8.16"),
            "{text}"
        );
        assert!(text.contains("TOTAL"), "{text}");
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["nodes"][1]["var"], json!(1.5));
        assert!(v["summary"]["stddev"].as_f64().unwrap() > 8.0);
    }

    #[test]
    fn osd_df_tree_sums_buckets() {
        let d = osd_df(&tree(), &pgs(), true);
        let names: Vec<&str> = d.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["default", "h1", "osd.0", "osd.1", "h2", "osd.2"]);
        assert_eq!(d.nodes[0].kb, 400 << 10);
        assert_eq!(d.nodes[1].kb_used, 40 << 10);
        assert!((d.nodes[1].utilization - 20.0).abs() < 1e-9);
        assert_eq!(d.nodes[4].kb, 200 << 10);
        let text = osd_df_plain(&d, true);
        assert!(text.contains("host h2"), "{text}");
        let t = crush_tree_plain(&crush_tree(&tree()));
        assert!(t.contains("        osd osd.2"), "{t}");
        assert!(!t.contains("up"), "{t}");
    }

    #[test]
    fn osd_perf_takes_each_osds_mean_latencies() {
        let hist = |kind: &str, counts: Vec<u64>, sum_ns: u64| {
            json!({"name": "op_latency_seconds", "help": "", "labels": [["kind", kind]],
                   "value": {"histogram": {"counts": counts, "sum_ns": sum_ns}}})
        };
        let r: DaemonReportsReply = serde_json::from_value(json!({"reports": [
            {"age_ms": 5, "report": {"daemon": "osd.1", "kind": "osd", "metrics": [
                hist("write", vec![2, 2], 12_000_000), hist("subop", vec![4], 2_000_000)]}},
            {"age_ms": 5, "report": {"daemon": "osd.0", "kind": "osd", "metrics": []}},
            {"age_ms": 5, "report": {"daemon": "client.gw", "kind": "gateway", "metrics": []}},
        ]}))
        .unwrap();
        let p = osd_perf(&r);
        let ids: Vec<i32> = p.osdstats.osd_perf_infos.iter().map(|i| i.id).collect();
        assert_eq!(ids, [0, 1]);
        let s = &p.osdstats.osd_perf_infos[1].perf_stats;
        assert_eq!(
            (s.commitlatency_ns, s.commit_latency_ms, s.commits),
            (3_000_000, 3, 4)
        );
        assert_eq!((s.applylatency_ns, s.apply_latency_ms), (500_000, 0));
        assert!(osd_perf_plain(&p).contains("  1                   3                  0"));
    }

    #[test]
    fn autoscale_status_prints_the_new_count_only_where_it_would_change() {
        let v: shoal_monclient::replies::AutoscaleStatusReply = serde_json::from_value(json!({
            "version": 1, "target_pg_per_osd": 100, "threshold": 3.0, "osds_in": 10,
            "pools": [
                {"pool_name": "big", "pool_id": 1, "logical_used": 1u64 << 38,
                 "raw_used_rate": 3.0, "raw_capacity": 1u64 << 40, "capacity_ratio": 0.75,
                 "pg_num_target": 32, "pg_num_ideal": 256, "pg_autoscale_mode": "on",
                 "would_adjust": true, "target_bytes": 1u64 << 40, "target_ratio": 0.2,
                 "effective_target_ratio": 0.2, "final_ratio": 0.75, "bulk": true},
                {"pool_name": "quiet", "pool_id": 2, "logical_used": 0,
                 "raw_used_rate": 3.0, "raw_capacity": 1u64 << 40, "capacity_ratio": 0.0,
                 "pg_num_target": 8, "pg_num_ideal": 8, "pg_autoscale_mode": "warn",
                 "would_adjust": false},
            ],
        }))
        .unwrap();
        let text = autoscale_plain(&v);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("NEW PG_NUM") && lines[0].ends_with("AUTOSCALE  BULK"));
        assert!(
            lines[1].starts_with("big") && lines[1].contains(" 256 "),
            "{text}"
        );
        assert!(lines[1].ends_with("on         true"), "{text}");
        assert!(
            lines[1].contains(" 1 TiB ") && lines[1].contains(" 0.2000 "),
            "{text}"
        );
        assert!(
            lines[2].starts_with("quiet") && lines[2].ends_with("warn       false"),
            "{text}"
        );
        // No new count: the PG count is the last word before the mode.
        let words: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(words[words.len() - 3..], ["8", "warn", "false"], "{text}");
    }

    #[test]
    fn pool_stats_sum_rates_by_pool() {
        let pool = |id: u64, name: &str| -> shoal_monclient::replies::PoolReply {
            serde_json::from_value(json!({"id": id, "name": name, "type": "replicated",
                "size": 3, "min_size": 2, "k": null, "m": null, "pg_num": 8, "pgp_num": 8,
                "crush_rule": "r", "erasure_code_profile": null, "stripe_width": 0,
                "snap_seq": 0, "removed_snaps": [], "allow_ec_overwrites": null,
                "quota_max_bytes": 0, "quota_max_objects": 0, "full_quota": false,
                "pg_autoscale_mode": "on"}))
            .unwrap()
        };
        let rates = BTreeMap::from([(
            2,
            shoal_mgr::gather::Io {
                read_ops: 0.2,
                write_ops: 12.4,
                read_bytes: 0.0,
                write_bytes: 3.0 * 1048576.0,
            },
        )]);
        let s = pool_stats(&[pool(2, "b"), pool(1, "a")], &rates);
        assert_eq!(s[0].pool_name, "a");
        assert!(s[0].client_io_rate.is_empty());
        assert_eq!(s[1].client_io_rate["write_op_per_sec"], 12);
        assert!(!s[1].client_io_rate.contains_key("read_op_per_sec"));
        let text = pool_stats_plain(&s);
        assert!(
            text.contains("pool a id 1\n  nothing is going on"),
            "{text}"
        );
        assert!(
            text.contains("  client io 3 MiB/s wr, 12 op/s wr"),
            "{text}"
        );
    }
}

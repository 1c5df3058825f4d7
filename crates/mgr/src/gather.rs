//! What the active manager gathers every stats period: the monitors'
//! views (status, OSD tree, `df`) and the daemons' newest reports, in one
//! [`Snapshot`]; and from consecutive snapshots, the cluster's and each
//! pool's I/O rates, kept for the last hour ([`History`]) for the
//! dashboard. Nothing here is on a data path: the daemons' counters
//! travel with their periodic reports.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;
use shoal_monclient::replies::{DaemonReportsReply, DfReply, OsdTreeReply, StatusReply};
use shoal_monclient::{Command, DaemonReport, MetricValue, MonClient, MonError};

/// The cluster at one moment, as the manager serves it.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// When it was gathered (ms since the Unix epoch).
    pub at_ms: u64,
    /// `shoal status`.
    pub status: StatusReply,
    /// `shoal osd tree` (with each OSD's space).
    pub tree: OsdTreeReply,
    /// `shoal df`.
    pub df: DfReply,
    /// Every daemon's newest report, with its age in ms.
    pub reports: Vec<(u64, DaemonReport)>,
}

/// Asks the monitors for everything a snapshot holds.
pub async fn gather(monc: &MonClient) -> Result<Snapshot, MonError> {
    let status = monc.command_as(&Command::Status).await?;
    let tree = monc.command_as(&Command::OsdTree).await?;
    let df = monc.command_as(&Command::Df).await?;
    let reports: DaemonReportsReply = monc.command_as(&Command::DaemonReports).await?;
    let reports = reports
        .reports
        .into_iter()
        .map(|r| (r.age_ms, r.report))
        .collect();
    Ok(Snapshot {
        at_ms: shoal_net::now_ms(),
        status,
        tree,
        df,
        reports,
    })
}

/// Client I/O per second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Io {
    /// Read ops per second.
    pub read_ops: f64,
    /// Write ops per second.
    pub write_ops: f64,
    /// Bytes read per second.
    pub read_bytes: f64,
    /// Bytes written per second.
    pub write_bytes: f64,
}

/// One point of the history.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Point {
    /// When (ms since the Unix epoch).
    pub at_ms: u64,
    /// The cluster's client I/O.
    #[serde(flatten)]
    pub io: Io,
    /// Object copies degraded.
    pub degraded: u64,
    /// Object copies misplaced.
    pub misplaced: u64,
    /// Objects recovery has left.
    pub recovery_left: u64,
}

/// An hour of points at most.
pub const HISTORY_SECS: u64 = 3600;

/// The last hour of the cluster's I/O, and each pool's latest rates.
#[derive(Debug, Default)]
pub struct History {
    /// Points, oldest first.
    pub points: VecDeque<Point>,
    /// The latest rates by pool id.
    pub pools: BTreeMap<u64, Io>,
    /// Per daemon: when its newest report was made, its counters then, and
    /// the rates between its two newest reports.
    daemons: BTreeMap<String, DaemonRates>,
    /// Snapshots seen.
    seen: u64,
}

/// What a daemon's two newest reports say.
#[derive(Debug, Default, Clone)]
struct DaemonRates {
    /// When its newest report reached the monitors (ms since the epoch).
    at_ms: u64,
    /// Its counters then, by key (`io:read_ops`, `pool:3:write_bytes`).
    values: BTreeMap<String, u64>,
    /// Per second between its two newest reports, by key.
    rates: BTreeMap<String, f64>,
}

/// The client I/O counters of one OSD report: `io:read_ops`, ...,
/// `pool:<id>:write_bytes`.
fn io_counters(r: &DaemonReport) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for m in &r.metrics {
        let MetricValue::Counter(v) = m.value else {
            continue;
        };
        let label = |k: &str| {
            m.labels
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
        };
        let what = match m.name.as_str() {
            "ops_total" => "ops",
            "op_bytes_total" => "bytes",
            "pool_ops_total" => "ops",
            "pool_bytes_total" => "bytes",
            _ => continue,
        };
        let Some(kind) = label("kind").filter(|k| *k == "read" || *k == "write") else {
            continue;
        };
        let key = match label("pool") {
            Some(p) if m.name.starts_with("pool_") => format!("pool:{p}:{kind}_{what}"),
            None if !m.name.starts_with("pool_") => format!("io:{kind}_{what}"),
            _ => continue,
        };
        out.push((key, v));
    }
    out
}

fn add(io: &mut Io, what: &str, per_s: f64) {
    match what {
        "read_ops" => io.read_ops += per_s,
        "write_ops" => io.write_ops += per_s,
        "read_bytes" => io.read_bytes += per_s,
        "write_bytes" => io.write_bytes += per_s,
        _ => {}
    }
}

impl History {
    /// Whether every OSD seen has rates: two reports of its own since the
    /// history began (what `osd pool stats` waits for).
    pub fn every_osd_rated(&self) -> bool {
        !self.daemons.is_empty() && self.daemons.values().all(|d| !d.rates.is_empty())
    }

    /// Adds a snapshot. Rates come from each daemon's own consecutive
    /// reports and the times they were made (a snapshot that finds the
    /// same report as the last one keeps its rates, rather than reading
    /// a pause); a counter that went back (its daemon restarted) counts
    /// from zero.
    pub fn push(&mut self, snap: &Snapshot) {
        let mut live = BTreeMap::new();
        for (age_ms, r) in snap.reports.iter().filter(|(_, r)| r.kind == "osd") {
            let at_ms = snap.at_ms.saturating_sub(*age_ms);
            let values: BTreeMap<String, u64> = io_counters(r).into_iter().collect();
            let prev = self.daemons.remove(&r.daemon);
            let next = match prev {
                // The same report as before (clocks in ms, the age rounded).
                Some(p) if at_ms <= p.at_ms + 50 => p,
                Some(p) => {
                    let dt = at_ms.saturating_sub(p.at_ms) as f64 / 1000.0;
                    let rates = values
                        .iter()
                        .map(|(k, v)| {
                            let delta = match p.values.get(k) {
                                Some(b) if v >= b => v - b,
                                Some(_) => *v,
                                None => *v,
                            };
                            (k.clone(), delta as f64 / dt)
                        })
                        .collect();
                    DaemonRates {
                        at_ms,
                        values,
                        rates,
                    }
                }
                None => DaemonRates {
                    at_ms,
                    values,
                    rates: BTreeMap::new(),
                },
            };
            live.insert(r.daemon.clone(), next);
        }
        // Daemons that no longer report are gone from the sums.
        self.daemons = live;
        self.seen += 1;
        if self.seen < 2 {
            return;
        }
        let mut io = Io::default();
        let mut pools: BTreeMap<u64, Io> = BTreeMap::new();
        for d in self.daemons.values() {
            for (key, per_s) in &d.rates {
                if let Some(what) = key.strip_prefix("io:") {
                    add(&mut io, what, *per_s);
                } else if let Some(rest) = key.strip_prefix("pool:")
                    && let Some((pool, what)) = rest.split_once(':')
                    && let Ok(pool) = pool.parse::<u64>()
                {
                    add(pools.entry(pool).or_default(), what, *per_s);
                }
            }
        }
        self.pools = pools;
        let pg = snap.status.pgmap.clone().unwrap_or_default();
        self.points.push_back(Point {
            at_ms: snap.at_ms,
            io,
            degraded: pg.num_objects_degraded,
            misplaced: pg.num_objects_misplaced,
            recovery_left: pg.recovery_objects_left,
        });
        let oldest = snap.at_ms.saturating_sub(HISTORY_SECS * 1000);
        while self.points.front().is_some_and(|p| p.at_ms < oldest) {
            self.points.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use shoal_monclient::Metric;

    /// A report `age_ms` old when gathered.
    fn report(daemon: &str, age_ms: u64, reads: u64, pool_writes: u64) -> (u64, DaemonReport) {
        (
            age_ms,
            DaemonReport {
                daemon: daemon.into(),
                kind: "osd".into(),
                metrics: vec![
                    Metric::counter("ops_total", "", &[("kind", "read")], reads),
                    Metric::counter("ops_total", "", &[("kind", "subop")], 99),
                    Metric::counter(
                        "pool_ops_total",
                        "",
                        &[("pool", "3"), ("kind", "write")],
                        pool_writes,
                    ),
                    Metric::counter(
                        "pool_bytes_total",
                        "",
                        &[("pool", "3"), ("kind", "write")],
                        pool_writes * 4096,
                    ),
                ],
            },
        )
    }

    fn snap(at_ms: u64, reports: Vec<(u64, DaemonReport)>) -> Snapshot {
        Snapshot {
            at_ms,
            status: crate::prom::tests::status_with(json!({ "pgmap": {
                "epoch": 1, "num_pgs": 1, "num_pg_by_state": [], "num_objects": 0, "num_bytes": 0,
                "num_object_copies": 0, "num_objects_degraded": 5, "num_objects_misplaced": 0,
                "raw_bytes": 0, "raw_bytes_used": 0, "raw_bytes_avail": 0,
                "recovery_objects_left": 0, "recovery_objects_per_s": 0 } })),
            reports,
            ..Snapshot::default()
        }
    }

    #[test]
    fn rates_come_from_each_daemons_consecutive_reports() {
        let mut h = History::default();
        h.push(&snap(
            10_000,
            vec![report("osd.0", 0, 100, 10), report("osd.1", 0, 0, 0)],
        ));
        assert!(h.points.is_empty(), "no rate from one snapshot");
        h.push(&snap(
            15_000,
            vec![report("osd.0", 0, 600, 60), report("osd.1", 0, 500, 0)],
        ));
        let p = h.points.back().copied().unwrap_or_default();
        assert_eq!(p.io.read_ops, 200.0); // (500 + 500) / 5 s
        assert_eq!(p.degraded, 5);
        let pool = h.pools.get(&3).copied().unwrap_or_default();
        assert_eq!(pool.write_ops, 10.0);
        assert_eq!(pool.write_bytes, 10.0 * 4096.0);
        // Gathered again before either daemon reported anew: the same
        // reports, now older. The rates stay; no pause is read.
        h.push(&snap(
            16_000,
            vec![
                report("osd.0", 1000, 600, 60),
                report("osd.1", 1000, 500, 0),
            ],
        ));
        assert_eq!(h.points.back().map(|p| p.io.read_ops), Some(200.0));
        // osd.1 restarted: its counter starts again from zero; osd.0 idle.
        h.push(&snap(
            20_000,
            vec![report("osd.0", 0, 600, 60), report("osd.1", 0, 50, 0)],
        ));
        assert_eq!(h.points.back().map(|p| p.io.read_ops), Some(10.0));
        // A daemon that stops reporting leaves the sums.
        h.push(&snap(25_000, vec![report("osd.0", 0, 600, 60)]));
        assert_eq!(h.points.back().map(|p| p.io.read_ops), Some(0.0));
        // An hour after the fourth point, the first four are gone.
        h.push(&snap(20_000 + HISTORY_SECS * 1000 + 1, vec![]));
        assert_eq!(h.points.len(), 2);
    }
}

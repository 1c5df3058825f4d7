//! Performance counters as daemons keep them and report them: lock-free
//! counters and latency histograms a data path bumps with one relaxed
//! atomic add, and the [`DaemonReport`] each daemon sends every few seconds
//! (through the monitors' leader, in memory) for the manager to turn into
//! Prometheus metrics. Names follow Prometheus' conventions without the
//! `shoal_<kind>_` prefix the manager adds (`op_latency_seconds`,
//! `ops_total`); values are integers in base units (latency sums in
//! nanoseconds, which the manager renders as seconds).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Upper bounds of the latency histograms' buckets, in seconds (the last,
/// `+Inf`, is implied): 50 µs to 10 s, about three per decade.
pub const LATENCY_BOUNDS_S: [f64; 16] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 10.0,
];

const BUCKETS: usize = LATENCY_BOUNDS_S.len() + 1;

/// The same bounds in nanoseconds, for the data path's comparison.
const BOUNDS_NS: [u64; 16] = [
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    10_000_000_000,
];

/// A latency histogram: a count per bucket and the sum, each an atomic.
#[derive(Debug)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_ns: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let i = BOUNDS_NS.partition_point(|b| *b < ns);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The histogram's value now: per-bucket counts (not cumulative) and
    /// the sum.
    pub fn value(&self) -> MetricValue {
        MetricValue::Histogram {
            counts: self
                .counts
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
        }
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

/// A metric's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricValue {
    /// Only ever grows (a `_total`).
    Counter(u64),
    /// Goes up and down.
    Gauge(i64),
    /// Per-bucket counts for [`LATENCY_BOUNDS_S`] then `+Inf` (not
    /// cumulative), and the sum in nanoseconds.
    Histogram {
        /// Observations per bucket.
        counts: Vec<u64>,
        /// Their sum, ns.
        sum_ns: u64,
    },
}

/// One metric of a daemon, with its labels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metric {
    /// Its name without the `shoal_<kind>_` prefix (`ops_total`).
    pub name: String,
    /// One line saying what it counts.
    pub help: String,
    /// Labels besides the daemon's own (`kind="read"`).
    #[serde(default)]
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: MetricValue,
}

impl Metric {
    /// A counter.
    pub fn counter(name: &str, help: &str, labels: &[(&str, &str)], v: u64) -> Metric {
        Metric::new(name, help, labels, MetricValue::Counter(v))
    }

    /// A gauge.
    pub fn gauge(name: &str, help: &str, labels: &[(&str, &str)], v: i64) -> Metric {
        Metric::new(name, help, labels, MetricValue::Gauge(v))
    }

    /// A histogram's value now.
    pub fn histogram(name: &str, help: &str, labels: &[(&str, &str)], h: &Histogram) -> Metric {
        Metric::new(name, help, labels, h.value())
    }

    fn new(name: &str, help: &str, labels: &[(&str, &str)], value: MetricValue) -> Metric {
        Metric {
            name: name.to_string(),
            help: help.to_string(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value,
        }
    }
}

/// What one daemon reports: who it is, of which kind, and its metrics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonReport {
    /// The daemon (`osd.3`, `client.gateway`).
    pub daemon: String,
    /// Its kind, the metrics' prefix: `osd`, `gateway`, `nbd`, `mds`.
    pub kind: String,
    /// Its metrics.
    pub metrics: Vec<Metric>,
}

/// Most metrics one report may carry (a gateway's per-operation, per-status
/// counters are the largest: a few hundred).
pub const REPORT_METRICS_MAX: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(10)); // <= 50 µs
        h.observe(Duration::from_micros(50)); // == bound: that bucket
        h.observe(Duration::from_micros(51)); // next
        h.observe(Duration::from_millis(3)); // <= 5 ms
        h.observe(Duration::from_secs(60)); // +Inf
        let MetricValue::Histogram { counts, sum_ns } = h.value() else {
            panic!("a histogram");
        };
        assert_eq!(counts.len(), LATENCY_BOUNDS_S.len() + 1);
        assert_eq!(counts[0], 2);
        assert_eq!(counts[1], 1);
        assert_eq!(counts[6], 1);
        assert_eq!(counts[BUCKETS - 1], 1);
        assert_eq!(h.count(), 5);
        assert_eq!(
            sum_ns,
            10_000 + 50_000 + 51_000 + 3_000_000 + 60_000_000_000
        );
        for (s, ns) in LATENCY_BOUNDS_S.iter().zip(BOUNDS_NS) {
            assert_eq!((s * 1e9).round() as u64, ns);
        }
    }

    #[test]
    fn reports_travel_as_json() {
        let h = Histogram::default();
        h.observe(Duration::from_millis(1));
        let r = DaemonReport {
            daemon: "osd.1".into(),
            kind: "osd".into(),
            metrics: vec![
                Metric::counter("ops_total", "Ops.", &[("kind", "read")], 7),
                Metric::gauge("pgs", "PGs.", &[], -1),
                Metric::histogram("op_latency_seconds", "Latency.", &[("kind", "read")], &h),
            ],
        };
        let back: DaemonReport =
            serde_json::from_str(&serde_json::to_string(&r).expect("encodes")).expect("decodes");
        assert_eq!(back, r);
    }
}

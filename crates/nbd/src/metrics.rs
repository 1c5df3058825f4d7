//! The NBD server's request counters for the manager: requests, bytes and
//! latency by NBD command, reported as `shoal_nbd_*`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use shoal_monclient::{Histogram, Metric};

use crate::proto::cmd;

/// The commands counted, by their metric label.
const KINDS: [(u16, &str); 7] = [
    (cmd::READ, "read"),
    (cmd::WRITE, "write"),
    (cmd::FLUSH, "flush"),
    (cmd::TRIM, "trim"),
    (cmd::CACHE, "cache"),
    (cmd::WRITE_ZEROES, "write_zeroes"),
    (cmd::BLOCK_STATUS, "block_status"),
];

#[derive(Debug, Default)]
struct Kind {
    ops: AtomicU64,
    bytes: AtomicU64,
    latency: Histogram,
}

/// Counters of one NBD server.
#[derive(Debug, Default)]
pub struct Metrics {
    kinds: [Kind; KINDS.len()],
    connections: AtomicU64,
}

impl Metrics {
    /// Counts one request of `command` covering `len` bytes.
    pub fn record(&self, command: u16, len: u32, took: Duration) {
        let Some(i) = KINDS.iter().position(|(c, _)| *c == command) else {
            return;
        };
        let k = &self.kinds[i];
        k.ops.fetch_add(1, Ordering::Relaxed);
        if command == cmd::READ || command == cmd::WRITE {
            k.bytes.fetch_add(u64::from(len), Ordering::Relaxed);
        }
        k.latency.observe(took);
    }

    /// Counts a client connection.
    pub fn connected(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters as metrics.
    pub fn metrics(&self) -> Vec<Metric> {
        let mut out = vec![Metric::counter(
            "connections_total",
            "Client connections accepted.",
            &[],
            self.connections.load(Ordering::Relaxed),
        )];
        for ((_, name), k) in KINDS.iter().zip(&self.kinds) {
            let l = [("kind", *name)];
            out.push(Metric::counter(
                "ops_total",
                "NBD requests answered, by command.",
                &l,
                k.ops.load(Ordering::Relaxed),
            ));
            out.push(Metric::counter(
                "op_bytes_total",
                "Bytes read or written by NBD requests.",
                &l,
                k.bytes.load(Ordering::Relaxed),
            ));
            out.push(Metric::histogram(
                "op_latency_seconds",
                "Time from an NBD request's arrival to its reply, by command.",
                &l,
                &k.latency,
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_monclient::MetricValue;

    #[test]
    fn requests_are_counted_by_command() {
        let m = Metrics::default();
        m.record(cmd::WRITE, 4096, Duration::from_micros(300));
        m.record(cmd::FLUSH, 0, Duration::from_millis(1));
        m.record(999, 1, Duration::from_millis(1)); // unknown: not counted
        let all = m.metrics();
        let find = |name: &str, kind: &str| {
            all.iter()
                .find(|x| x.name == name && x.labels.contains(&("kind".into(), kind.into())))
                .map(|x| x.value.clone())
        };
        assert_eq!(find("ops_total", "write"), Some(MetricValue::Counter(1)));
        assert_eq!(
            find("op_bytes_total", "write"),
            Some(MetricValue::Counter(4096))
        );
        assert_eq!(find("ops_total", "flush"), Some(MetricValue::Counter(1)));
        assert_eq!(find("ops_total", "read"), Some(MetricValue::Counter(0)));
    }
}

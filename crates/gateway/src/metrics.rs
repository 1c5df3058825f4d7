//! The gateway's request counters for the manager: requests by S3
//! operation (as s3s names it: `PutObject`, `GetObject`, ...) and HTTP
//! status, and latency by operation, reported as `shoal_gateway_*`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal_monclient::{Histogram, Metric};

tokio::task_local! {
    /// The operation of the request this task serves, once s3s knows it.
    pub(crate) static OPERATION: std::cell::RefCell<Option<String>>;
}

/// Records the current request's operation (called from s3s's access step).
pub(crate) fn set_operation(name: &str) {
    let _ = OPERATION.try_with(|op| *op.borrow_mut() = Some(name.to_string()));
}

/// Counters of one gateway.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<HashMap<(String, u16), u64>>,
    latency: Mutex<HashMap<String, Arc<Histogram>>>,
}

impl Metrics {
    /// Counts one answered request.
    pub fn record(&self, operation: &str, status: u16, took: Duration) {
        let key = (operation.to_string(), status);
        *self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_default() += 1;
        let h = {
            let mut l = self.latency.lock().unwrap_or_else(|e| e.into_inner());
            match l.get(operation) {
                Some(h) => Arc::clone(h),
                None => Arc::clone(l.entry(operation.to_string()).or_default()),
            }
        };
        h.observe(took);
    }

    /// The counters as metrics.
    pub fn metrics(&self) -> Vec<Metric> {
        let mut out = Vec::new();
        let requests: Vec<((String, u16), u64)> = self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        for ((op, status), n) in requests {
            let status = status.to_string();
            out.push(Metric::counter(
                "requests_total",
                "S3 requests answered, by operation and HTTP status.",
                &[("operation", &op), ("status", &status)],
                n,
            ));
        }
        let latency: Vec<(String, Arc<Histogram>)> = self
            .latency
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), Arc::clone(v)))
            .collect();
        for (op, h) in latency {
            out.push(Metric::histogram(
                "request_latency_seconds",
                "Time from a request's arrival to its response's head, by operation.",
                &[("operation", &op)],
                &h,
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
    fn requests_are_counted_by_operation_and_status() {
        let m = Metrics::default();
        m.record("PutObject", 200, Duration::from_millis(1));
        m.record("PutObject", 200, Duration::from_millis(2));
        m.record("GetObject", 404, Duration::from_millis(1));
        let all = m.metrics();
        let count = |op: &str, st: &str| {
            all.iter()
                .find(|x| {
                    x.name == "requests_total"
                        && x.labels.contains(&("operation".into(), op.into()))
                        && x.labels.contains(&("status".into(), st.into()))
                })
                .map(|x| x.value.clone())
        };
        assert_eq!(count("PutObject", "200"), Some(MetricValue::Counter(2)));
        assert_eq!(count("GetObject", "404"), Some(MetricValue::Counter(1)));
        assert_eq!(count("GetObject", "200"), None);
        assert_eq!(
            all.iter()
                .filter(|x| x.name == "request_latency_seconds")
                .count(),
            2
        );
    }
}

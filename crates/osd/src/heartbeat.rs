//! Liveness: heartbeats to every OSD this one shares a PG with, failure
//! reports to the monitors when a peer stays silent past the grace period
//! (at once when its process is gone: the connection is refused), the
//! periodic PG statistics report, and the full-store watch.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use shoal_monclient::{Command, OsdStatfs, PgStatReport};
use shoal_net::NetError;
use shoal_proto::Ping;

use crate::daemon::Inner;

/// What one heartbeat to a peer found.
enum Beat {
    Alive,
    Silent,
    /// The peer's address refused the connection: its process is gone.
    Gone,
}

impl Inner {
    pub(crate) async fn heartbeats(self: Arc<Self>) {
        let mut last_ok: BTreeMap<i32, Instant> = BTreeMap::new();
        let mut reported: BTreeMap<i32, Instant> = BTreeMap::new();
        let grace = self.opts.heartbeat_grace;
        loop {
            tokio::time::sleep(self.opts.heartbeat_interval).await;
            let Some(map) = self.current_map() else {
                continue;
            };
            let peers: Vec<i32> = self
                .peers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .copied()
                .filter(|p| map.is_up(*p))
                .collect();
            last_ok.retain(|p, _| peers.contains(p));
            let mut checks = Vec::new();
            for p in peers {
                let me = Arc::clone(&self);
                let map = Arc::clone(&map);
                // Bounded as a whole: a peer cut off by the network neither
                // answers nor refuses, and a connect to it would hang for
                // the connect timeout, holding up every other peer's check.
                checks.push(tokio::spawn(async move {
                    let beat = tokio::time::timeout(grace, me.beat(&map, p, grace)).await;
                    (p, beat.unwrap_or(Beat::Silent))
                }));
            }
            let started = Instant::now();
            for c in checks {
                let Ok((p, beat)) = c.await else { continue };
                // Silence counts until the check gave up on the peer.
                let now = Instant::now();
                let first = *last_ok.entry(p).or_insert(started);
                let immediate = match beat {
                    Beat::Alive => {
                        last_ok.insert(p, now);
                        reported.remove(&p);
                        continue;
                    }
                    Beat::Gone => true,
                    Beat::Silent => false,
                };
                let overdue = now.duration_since(first) > grace;
                let recent = reported
                    .get(&p)
                    .is_some_and(|t| now.duration_since(*t) < grace / 2);
                if (immediate || overdue) && !recent {
                    reported.insert(p, now);
                    self.report_failure(p, immediate).await;
                }
            }
        }
    }

    /// A connection to OSD `osd` ended. A peer whose process died resets its
    /// connections at once: probe it now (a refused connection is reported
    /// immediately) rather than at the next heartbeat, so peering stops
    /// waiting on it within moments of its death.
    pub(crate) fn peer_connection_closed(self: Arc<Self>, osd: i32, reason: &str) {
        if reason.contains("closed locally") || osd == self.opts.id {
            return;
        }
        let Some(map) = self.current_map() else {
            return;
        };
        if !map.is_up(osd) {
            return;
        }
        tokio::spawn(async move {
            if let Beat::Gone = self.beat(&map, osd, self.opts.heartbeat_grace).await {
                self.report_failure(osd, true).await;
            }
        });
    }

    async fn beat(&self, map: &shoal_maps::OsdMap, osd: i32, grace: Duration) -> Beat {
        let ping = Ping {
            seq: 0,
            echo: false,
        };
        // A second attempt only when the first connection broke (a peer that
        // died resets it): dial again at once, so a process that is gone is
        // reported now, not a beat later.
        for attempt in 0..2 {
            let conn = match self.ctx.peer_once(map, osd).await {
                Ok(c) => c,
                Err(e) if e.contains("refused") => return Beat::Gone,
                Err(_) => return Beat::Silent,
            };
            match conn
                .request_with_timeout(ping.clone(), Bytes::new(), grace)
                .await
            {
                Ok(_) => return Beat::Alive,
                Err(NetError::Connect { reason, .. }) if reason.contains("refused") => {
                    return Beat::Gone;
                }
                Err(NetError::Timeout { .. }) => return Beat::Silent,
                Err(_) if attempt == 0 => continue,
                Err(_) => return Beat::Silent,
            }
        }
        Beat::Silent
    }

    async fn report_failure(&self, target: i32, immediate: bool) {
        tracing::info!(
            osd = self.opts.id,
            target,
            immediate,
            "reporting a failed peer"
        );
        let cmd = Command::OsdFailure {
            target,
            reporter: self.opts.id,
            immediate,
        };
        if let Err(e) = self.monc.command(&cmd).await {
            tracing::warn!("failure report for osd.{target}: {e}");
        }
    }

    /// Keeps `ctx.full` current: above the full ratio the OSD refuses
    /// writes before its store runs out (a replica out of space would
    /// leave the PG's copies different).
    pub(crate) async fn watch_space(self: Arc<Self>) {
        loop {
            let store = Arc::clone(&self.ctx.store);
            self.ctx
                .written_since_check
                .store(0, std::sync::atomic::Ordering::Relaxed);
            if let Ok(Ok(s)) = shoal_net::runtime::offload(move || store.space()).await {
                let used = s.total_bytes.saturating_sub(s.free_bytes) as f64;
                let full = used > s.total_bytes as f64 * self.ctx.cfg.full_ratio;
                let was = self
                    .ctx
                    .full
                    .swap(full, std::sync::atomic::Ordering::Relaxed);
                if full != was {
                    tracing::warn!(osd = self.opts.id, full, "store fullness changed");
                }
            }
            let _ =
                tokio::time::timeout(Duration::from_secs(1), self.ctx.space_check.notified()).await;
        }
    }

    /// Reports the performance counters for the manager, every `every`.
    pub(crate) async fn report_perf(self: Arc<Self>, every: Duration) {
        use shoal_monclient::Metric;
        use std::sync::atomic::Ordering::Relaxed;
        loop {
            tokio::time::sleep(every).await;
            let c = &self.ctx.counters;
            let mut metrics = c.perf.metrics();
            metrics.push(Metric::counter(
                "refused_total",
                "Requests refused: malformed, unauthorized or for a PG not here.",
                &[],
                c.refused.load(Relaxed),
            ));
            metrics.push(Metric::counter(
                "recovered_objects_total",
                "Objects this OSD pushed or pulled to recover or backfill them.",
                &[],
                c.recovered.load(Relaxed),
            ));
            metrics.push(Metric::gauge(
                "pgs",
                "PGs this OSD holds a copy of.",
                &[],
                i64::try_from(self.pg_count()).unwrap_or(i64::MAX),
            ));
            let report = shoal_monclient::DaemonReport {
                daemon: format!("osd.{}", self.opts.id),
                kind: "osd".into(),
                metrics,
            };
            if let Err(e) = self.monc.command(&Command::DaemonReport { report }).await {
                tracing::debug!("performance report: {e}");
            }
        }
    }

    /// Reports the statistics of the PGs we are primary of, and the store's space.
    pub(crate) async fn report_stats(self: Arc<Self>) {
        loop {
            // At the interval, or soon after a PG changes state (debounced).
            let changed = self.ctx.stats_changed.notified();
            tokio::select! {
                biased;
                _ = tokio::time::sleep(self.opts.stats_interval) => {}
                _ = changed => tokio::time::sleep(Duration::from_millis(200)).await,
            }
            let Some(map) = self.current_map() else {
                continue;
            };
            let store = Arc::clone(&self.ctx.store);
            let statfs = match shoal_net::runtime::offload(move || store.space()).await {
                Ok(Ok(s)) => OsdStatfs {
                    total_bytes: s.total_bytes,
                    used_bytes: s.total_bytes.saturating_sub(s.free_bytes),
                    available_bytes: s.free_bytes,
                },
                _ => OsdStatfs::default(),
            };
            let pgs: Vec<PgStatReport> = self
                .pg_stats()
                .await
                .into_iter()
                .map(|s| PgStatReport {
                    pgid: s.pgid.to_string(),
                    state: s.state,
                    objects: s.objects,
                    bytes: s.bytes,
                    version: s.version.to_string(),
                    up: s.up,
                    acting: s.acting,
                    log_size: s.log_size,
                    inconsistent: s.inconsistent,
                    recovery_left: s.recovery_left,
                    recovery_per_s: s.recovery_per_s,
                    degraded: s.degraded,
                    misplaced: s.misplaced,
                    recovery_stalled: s.recovery_stalled,
                })
                .collect();
            let cmd = Command::OsdPgStats {
                id: self.opts.id,
                epoch: map.epoch.0,
                statfs,
                pgs,
            };
            if let Err(e) = self.monc.command(&cmd).await {
                tracing::debug!("pg stats report: {e}");
            }
        }
    }
}

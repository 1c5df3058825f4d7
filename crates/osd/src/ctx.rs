//! What every PG of one OSD shares: its id, store, messenger, settings and
//! counters, and how to reach a peer OSD.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use shoal_maps::OsdMap;
use shoal_net::{Connection, Messenger};
use shoal_objectstore::ObjectStore;

use crate::log::LogLimits;

/// PG settings taken from the configuration.
#[derive(Debug, Clone)]
pub struct PgConfig {
    /// PG log length and dups kept (the length while the PG is not clean).
    pub log_limits: LogLimits,
    /// Log entries a clean PG keeps (Ceph's `osd_min_pg_log_entries`; at
    /// most `log_limits.entries_max`).
    pub log_entries_clean: usize,
    /// How long to wait for a peer's answer (replication, peering, recovery).
    pub peer_timeout: Duration,
    /// Most object names one listing page returns.
    pub list_max: u32,
    /// Above this fraction of its store used, the OSD refuses writes.
    pub full_ratio: f64,
    /// Objects recovered at once, per PG and per OSD (Ceph's
    /// `osd_recovery_max_active`).
    pub recovery_max_active: usize,
    /// Most whole objects one recovery message pushes to a member
    /// (`osd_recovery_batch_objects`; 1: each on its own).
    pub recovery_batch_objects: usize,
    /// PGs of one OSD backfilling at once (Ceph's `osd_max_backfills`).
    pub max_backfills: usize,
    /// Scheduled scrubs one OSD runs at once as primary (Ceph's
    /// `osd_max_scrubs`; 0: none are scheduled).
    pub max_scrubs: usize,
    /// How much one step of an object copy (recovery, backfill, repair)
    /// may carry.
    pub copy_limits: crate::copy::StepLimits,
    /// Bytes of log, dups and missing-set records per piece of a peering
    /// answer or activation.
    pub peering_piece_bytes: usize,
    /// An erasure-coded read asks one more shard when none of those it
    /// asked answered for this long (zero: never).
    pub ec_read_hedge: Duration,
    /// The pause between two objects' snapshot trims, per PG (Ceph's
    /// `osd_snap_trim_sleep`).
    pub snap_trim_sleep: Duration,
}

impl Default for PgConfig {
    fn default() -> Self {
        PgConfig {
            log_limits: LogLimits::default(),
            log_entries_clean: 250,
            peer_timeout: Duration::from_secs(30),
            list_max: 1024,
            full_ratio: 0.95,
            recovery_max_active: 3,
            recovery_batch_objects: 64,
            max_backfills: 1,
            max_scrubs: 1,
            copy_limits: crate::copy::StepLimits::default(),
            peering_piece_bytes: crate::pieces::PIECE_BYTES_MAX,
            ec_read_hedge: Duration::from_millis(50),
            snap_trim_sleep: Duration::ZERO,
        }
    }
}

/// Counters of one OSD (monotonic).
#[derive(Debug, Default)]
pub struct OsdCounters {
    /// Client ops answered.
    pub ops: AtomicU64,
    /// Client ops that changed an object.
    pub write_ops: AtomicU64,
    /// Bytes written by clients.
    pub write_bytes: AtomicU64,
    /// Bytes read by clients.
    pub read_bytes: AtomicU64,
    /// Replicated transactions applied as a replica.
    pub rep_ops: AtomicU64,
    /// Objects pushed or pulled by recovery.
    pub recovered: AtomicU64,
    /// Requests refused (malformed, unauthorized, wrong PG).
    pub refused: AtomicU64,
    /// Ops, bytes and latency by kind, for the manager.
    pub perf: OsdPerf,
}

impl OsdCounters {
    /// Adds `n` to `c`.
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// One kind of request an OSD serves: how many, their bytes (in and out)
/// and latency from arrival to reply. Bumped with relaxed atomic adds.
#[derive(Debug, Default)]
pub struct OpStats {
    /// Requests answered.
    pub ops: AtomicU64,
    /// Of which answered with an error.
    pub errors: AtomicU64,
    /// Data bytes received and sent.
    pub bytes: AtomicU64,
    /// Arrival to reply.
    pub latency: shoal_monclient::Histogram,
}

impl shoal_net::ReplyHook for OpStats {
    fn replied(&self, started: std::time::Instant, data_bytes: usize, error: bool) {
        self.latency.observe(started.elapsed());
        OsdCounters::add(&self.ops, 1);
        OsdCounters::add(&self.bytes, data_bytes as u64);
        if error {
            OsdCounters::add(&self.errors, 1);
        }
    }
}

/// An OSD's requests by kind, as `shoal_osd_op_*` metrics label them.
#[derive(Debug, Default)]
pub struct OsdPerf {
    /// Client ops that change nothing.
    pub read: Arc<OpStats>,
    /// Client ops that change an object.
    pub write: Arc<OpStats>,
    /// Sub-ops from a primary: replicated transactions, shard reads.
    pub subop: Arc<OpStats>,
    /// Objects pushed to or pulled from this OSD by recovery and backfill.
    pub recovery: Arc<OpStats>,
    /// Client ops by pool.
    pools: std::sync::RwLock<std::collections::HashMap<u64, Arc<PoolIo>>>,
}

/// Client ops of one pool on one OSD.
#[derive(Debug, Default)]
pub struct PoolIo {
    read_ops: AtomicU64,
    read_bytes: AtomicU64,
    write_ops: AtomicU64,
    write_bytes: AtomicU64,
}

/// Counts a client op in its kind and its pool when it is answered.
#[derive(Debug)]
pub struct ClientOpHook {
    kind: Arc<OpStats>,
    pool: Arc<PoolIo>,
    write: bool,
}

impl shoal_net::ReplyHook for ClientOpHook {
    fn replied(&self, started: std::time::Instant, data_bytes: usize, error: bool) {
        self.kind.replied(started, data_bytes, error);
        if self.write {
            OsdCounters::add(&self.pool.write_ops, 1);
        } else {
            OsdCounters::add(&self.pool.read_ops, 1);
            OsdCounters::add(&self.pool.read_bytes, data_bytes as u64);
        }
    }
}

impl OsdPerf {
    /// Each kind with its label.
    pub fn kinds(&self) -> [(&'static str, &Arc<OpStats>); 4] {
        [
            ("read", &self.read),
            ("write", &self.write),
            ("subop", &self.subop),
            ("recovery", &self.recovery),
        ]
    }

    /// The hook of a client op of `pool` carrying `in_bytes` of data.
    pub fn client_op(&self, pool: u64, write: bool, in_bytes: usize) -> ClientOpHook {
        let io = self
            .pools
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&pool)
            .cloned();
        let io = io.unwrap_or_else(|| {
            let mut pools = self.pools.write().unwrap_or_else(|e| e.into_inner());
            Arc::clone(pools.entry(pool).or_default())
        });
        let kind = if write { &self.write } else { &self.read };
        OsdCounters::add(&kind.bytes, in_bytes as u64);
        if write {
            OsdCounters::add(&io.write_bytes, in_bytes as u64);
        }
        ClientOpHook {
            kind: Arc::clone(kind),
            pool: io,
            write,
        }
    }

    /// Forgets the counters of pools no longer in the map.
    pub fn retain_pools(&self, live: impl Fn(u64) -> bool) {
        self.pools
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p, _| live(*p));
    }

    /// The metrics of every kind and pool.
    pub fn metrics(&self) -> Vec<shoal_monclient::Metric> {
        use shoal_monclient::Metric;
        let mut out = Vec::new();
        let pools: Vec<(u64, Arc<PoolIo>)> = self
            .pools
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(p, io)| (*p, Arc::clone(io)))
            .collect();
        for (pool, io) in pools {
            let pool = pool.to_string();
            for (kind, ops, bytes) in [
                ("read", &io.read_ops, &io.read_bytes),
                ("write", &io.write_ops, &io.write_bytes),
            ] {
                let l = [("pool", pool.as_str()), ("kind", kind)];
                out.push(Metric::counter(
                    "pool_ops_total",
                    "Client ops answered, by pool (id) and kind.",
                    &l,
                    ops.load(Ordering::Relaxed),
                ));
                out.push(Metric::counter(
                    "pool_bytes_total",
                    "Client data bytes read or written, by pool (id) and kind.",
                    &l,
                    bytes.load(Ordering::Relaxed),
                ));
            }
        }
        for (kind, s) in self.kinds() {
            let l = [("kind", kind)];
            let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
            out.push(Metric::counter(
                "ops_total",
                "Requests answered, by kind.",
                &l,
                load(&s.ops),
            ));
            out.push(Metric::counter(
                "op_errors_total",
                "Requests answered with an error, by kind.",
                &l,
                load(&s.errors),
            ));
            out.push(Metric::counter(
                "op_bytes_total",
                "Data bytes received and sent by requests, by kind.",
                &l,
                load(&s.bytes),
            ));
            out.push(Metric::histogram(
                "op_latency_seconds",
                "Time from a request's arrival to its reply, by kind.",
                &l,
                &s.latency,
            ));
        }
        out
    }
}

/// A change the primary acknowledged to its client: durable on every
/// member of the acting set (and every backfill target).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckedWrite {
    /// The primary.
    pub osd: i32,
    /// The PG.
    pub pg: shoal_maps::PgId,
    /// The hash of the object changed (after a split, the PG holding it
    /// is the one its hash folds to under the pool's new count).
    pub hash: u32,
    /// The epoch the primary's interval began.
    pub interval_start: u32,
    /// The change's version.
    pub version: crate::log::Version,
    /// The client's request.
    pub reqid: crate::log::ReqId,
}

/// What a harness may watch an OSD do: the deterministic simulation's
/// invariant checkers. Calls are made from the PG's actor, so they must be
/// quick and must not block.
pub trait Observer: Send + Sync + std::fmt::Debug {
    /// A primary acknowledged a client's change (or, again, a resent one
    /// it found in its log).
    fn write_acked(&self, w: &AckedWrite);
}

/// Shared by every PG of an OSD.
#[derive(Debug)]
pub struct OsdCtx {
    /// This OSD's id.
    pub whoami: i32,
    /// The object store.
    pub store: Arc<dyn ObjectStore>,
    /// The messenger (to reach peers).
    pub msgr: Messenger,
    /// PG settings.
    pub cfg: PgConfig,
    /// Counters.
    pub counters: Arc<OsdCounters>,
    /// The store is fuller than `cfg.full_ratio`: writes are refused.
    pub full: Arc<std::sync::atomic::AtomicBool>,
    /// A PG changed state: report the statistics now, not at the next interval.
    pub stats_changed: tokio::sync::Notify,
    /// Recovery slots of this OSD (`cfg.recovery_max_active`).
    pub recovery_slots: Arc<tokio::sync::Semaphore>,
    /// Backfill reservations of this OSD (`cfg.max_backfills`).
    pub backfill_slots: Arc<tokio::sync::Semaphore>,
    /// Scheduled scrubs of this OSD's PGs (`cfg.max_scrubs`): a PG takes
    /// one before its scrub tick and keeps it while the scrub runs.
    pub scrub_slots: Arc<tokio::sync::Semaphore>,
    /// The monitors (past intervals, `up_thru`).
    pub monc: shoal_monclient::MonClient,
    /// Bytes written since the store's space was last checked.
    pub written_since_check: AtomicU64,
    /// Check the store's space now (set after `SPACE_CHECK_BYTES` written).
    pub space_check: tokio::sync::Notify,
    /// Who watches (simulation only).
    pub observer: Option<Arc<dyn Observer>>,
    /// The newest `up_thru` asked of the monitors and not refused.
    pub up_thru_asked: std::sync::Mutex<u32>,
}

/// Bytes written between two checks of the store's space, beside the
/// periodic check: a burst of writes cannot run far past the full ratio.
pub const SPACE_CHECK_BYTES: u64 = 4 << 20;

impl OsdCtx {
    /// Counts `n` bytes written; past [`SPACE_CHECK_BYTES`], asks for a
    /// space check.
    pub fn note_written(&self, n: u64) {
        let before = self.written_since_check.fetch_add(n, Ordering::Relaxed);
        if before < SPACE_CHECK_BYTES && before + n >= SPACE_CHECK_BYTES {
            self.space_check.notify_one();
        }
    }

    /// Asks the monitors (once per epoch, in the background) to record
    /// that this OSD was up through `epoch`; a refused or failed request
    /// may be asked again.
    pub fn want_up_thru(self: &Arc<Self>, epoch: u32) {
        {
            let mut asked = self.up_thru_asked.lock().unwrap_or_else(|p| p.into_inner());
            if *asked >= epoch {
                return;
            }
            *asked = epoch;
        }
        let ctx = Arc::clone(self);
        tokio::spawn(async move {
            let cmd = shoal_monclient::Command::OsdAlive {
                id: ctx.whoami,
                up_thru: epoch,
            };
            if let Err(e) = ctx.monc.command(&cmd).await {
                tracing::debug!(epoch, "up_thru request failed: {e}");
                let mut asked = ctx.up_thru_asked.lock().unwrap_or_else(|p| p.into_inner());
                if *asked == epoch {
                    *asked = 0;
                }
            }
        });
    }

    /// A connection to OSD `osd` at its address in `map`.
    pub async fn peer(&self, map: &OsdMap, osd: i32) -> Result<Connection, String> {
        self.connect_to(map, osd, false).await
    }

    /// [`OsdCtx::peer`] with a single connection attempt: for liveness
    /// probes, where a refused connection is the answer (the process is
    /// gone), not a reason to retry with backoff.
    pub async fn peer_once(&self, map: &OsdMap, osd: i32) -> Result<Connection, String> {
        self.connect_to(map, osd, true).await
    }

    async fn connect_to(&self, map: &OsdMap, osd: i32, once: bool) -> Result<Connection, String> {
        let addr = peer_addr(map, osd)?;
        let connect = async {
            if once {
                self.msgr.connect_once(addr).await
            } else {
                self.msgr.connect(addr).await
            }
        };
        match tokio::time::timeout(self.cfg.peer_timeout, connect).await {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) => Err(format!("osd.{osd}: {e}")),
            Err(_) => Err(format!("osd.{osd}: connect timed out")),
        }
    }
}

/// Where OSD `osd` listens, from `map`.
fn peer_addr(map: &OsdMap, osd: i32) -> Result<SocketAddr, String> {
    let addr = map
        .osd(osd)
        .and_then(|i| i.addr.clone())
        .ok_or_else(|| format!("osd.{osd} has no address in epoch {}", map.epoch.0))?;
    addr.parse()
        .map_err(|_| format!("osd.{osd} has a bad address {addr:?}"))
}

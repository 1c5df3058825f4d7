//! Deterministic simulation of a Shoal cluster.
//!
//! One seed drives everything: three monitors, OSDs on [`CrashStore`]s and
//! several clients run in one thread on a tokio runtime whose clock is
//! virtual, over [`SimNet`] (latency, partitions, kills), with the
//! daemons' own randomness seeded (`shoal_net::runtime`, and tokio's own
//! with `--cfg tokio_unstable`, set in `.cargo/config.toml`). A nemesis
//! crashes and restarts OSDs (each restart finds what a crash may leave:
//! the durable image plus a prefix of what was queued) and monitors (one at
//! a time, so a quorum remains), partitions links,
//! slows them (messages on different connections overtake one another)
//! and marks OSDs out and in, while the clients write and read a few
//! objects. After every fault the invariant checkers (`invariants/`) run;
//! at the end the faults stop, the cluster must reach active+clean, every
//! object is read back, and the history checker ([`history`]) decides
//! whether each object's reads and writes are linearizable, and the
//! resend check ([`resends`]) that no op was left waiting on a PG interval
//! that had ended. The trace's
//! digest shows a seed replays exactly.
//!
//! Nothing depends on this crate: it only reads the daemons' public APIs
//! (and the OSD's [`shoal_osd::ctx::Observer`] hook).
//!
//! [`CrashStore`]: shoal_objectstore::CrashStore
//! [`SimNet`]: shoal_testkit::simnet::SimNet

#![allow(clippy::unwrap_used)] // A failed set-up is a failed run, with its seed.

pub mod history;
pub mod invariants;
pub mod nemesis;
pub mod resends;
pub mod snapshots;
pub mod trace;
pub mod workload;
pub mod world;

use std::time::Duration;

pub use trace::Trace;

/// The shape of a run.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Monitors (1 or 3).
    pub mons: usize,
    /// OSDs (at least 5).
    pub osds: i32,
    /// Clients writing and reading.
    pub clients: usize,
    /// PGs of the pool (size 3, min_size 2).
    pub pg_num: u32,
    /// Objects the clients share.
    pub objects: usize,
    /// How long the nemesis works (virtual time).
    pub faults: Duration,
    /// How long the cluster has to reach active+clean afterwards.
    pub liveness: Duration,
    /// PG log entries kept (small, so members fall behind the log and are
    /// backfilled).
    pub log_entries: usize,
    /// PG log entries a clean PG keeps (fewer still: a member that misses
    /// changes after a clean spell is more often backfilled).
    pub log_entries_clean: usize,
    /// Print the trace as it happens.
    pub verbose: bool,
    /// The pool is erasure coded with this `k` and `m` (failure domain:
    /// the OSD) instead of replicated (size 3, min_size 2).
    pub erasure: Option<(u32, u32)>,
    /// One more client takes, uses, removes and reads snapshots
    /// ([`snapshots`]), on the pool whichever its kind.
    pub snapshots: bool,
    /// The nemesis also grows the clients' pool's `pg_num` (PGs split
    /// while the faults go on; the leader moves `pgp_num` after them).
    pub splits: bool,
    /// The nemesis also black-holes links, one way or both (what crosses
    /// is held silently on connections that stay open, until the network
    /// heals), as `deploy/faults.sh` does with real hosts.
    pub black_holes: bool,
}

impl SimConfig {
    /// What CI runs for each seed.
    pub fn quick() -> SimConfig {
        SimConfig {
            mons: 3,
            osds: 5,
            clients: 3,
            pg_num: 8,
            objects: 12,
            faults: Duration::from_secs(20),
            liveness: Duration::from_secs(300),
            log_entries: 40,
            log_entries_clean: 10,
            verbose: false,
            erasure: None,
            snapshots: false,
            splits: false,
            black_holes: false,
        }
    }

    /// [`SimConfig::quick`] with black holes among the faults.
    pub fn quick_black_holes() -> SimConfig {
        SimConfig {
            black_holes: true,
            ..SimConfig::quick()
        }
    }

    /// [`SimConfig::quick`] with PG splits among the faults.
    pub fn quick_splits() -> SimConfig {
        SimConfig {
            splits: true,
            ..SimConfig::quick()
        }
    }

    /// [`SimConfig::quick`] with the snapshot client.
    pub fn quick_snapshots() -> SimConfig {
        SimConfig {
            snapshots: true,
            ..SimConfig::quick()
        }
    }

    /// [`SimConfig::quick`] with an erasure-coded pool of `k + m` chunks.
    pub fn quick_erasure(k: u32, m: u32) -> SimConfig {
        SimConfig {
            erasure: Some((k, m)),
            ..SimConfig::quick()
        }
    }
}

/// A run that held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// The trace's digest: equal for two runs of the seed.
    pub digest: u64,
    /// Faults injected.
    pub faults: usize,
    /// Client ops (answered, failed).
    pub ops: (usize, usize),
    /// Writes primaries acknowledged.
    pub acked: usize,
    /// Virtual time the run took, ms.
    pub virtual_ms: u64,
    /// The words of the PG states seen during the faults.
    pub states: std::collections::BTreeSet<String>,
    /// Black holes the nemesis made.
    pub black_holes: usize,
    /// The clients' pool's (pg_num, pgp_num) at the end (splits move them).
    pub pg_num: (u32, u32),
    /// The snapshot client's snapshots taken and removed, and reads at
    /// snapshots checked.
    pub snapshots: (usize, usize, usize),
}

/// A run that broke an invariant, lost or reordered data, or never healed.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The seed (replay it with `shoal-sim --seed`).
    pub seed: u64,
    /// What broke.
    pub why: String,
    /// The trace's last lines.
    pub trace: Vec<String>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "seed {}: {}", self.seed, self.why)?;
        writeln!(f, "last trace lines:")?;
        for l in &self.trace {
            writeln!(f, "  {l}")?;
        }
        write!(
            f,
            "replay: cargo run -p shoal-sim -- --seed {} --verbose",
            self.seed
        )
    }
}

/// Runs seed `seed` on a fresh single-threaded runtime with a paused clock.
pub fn run(seed: u64, cfg: &SimConfig) -> Result<Report, Failure> {
    let mut b = tokio::runtime::Builder::new_current_thread();
    b.enable_time().start_paused(true);
    // Which branch of a `select!` goes first when several are ready
    // (openraft's among them) comes from the runtime's generator.
    #[cfg(tokio_unstable)]
    b.rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()));
    let rt = b.build().map_err(|e| Failure {
        seed,
        why: format!("runtime: {e}"),
        trace: Vec::new(),
    })?;
    let out = rt.block_on(world::simulate(seed, cfg.clone()));
    // Tasks of crashed daemons may still wait on a network that is gone.
    rt.shutdown_background();
    out
}

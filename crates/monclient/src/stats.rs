//! What daemons report to the monitors: OSDs their PGs and their space,
//! any daemon its crashes.

use serde::{Deserialize, Serialize};

/// The space of an OSD's object store.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct OsdStatfs {
    /// Capacity.
    pub total_bytes: u64,
    /// Used, data and metadata.
    pub used_bytes: u64,
    /// Still free for data.
    pub available_bytes: u64,
}

/// One PG as its primary reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PgStatReport {
    /// The PG, as [`shoal_maps::PgId`] prints it (`1.6`).
    pub pgid: String,
    /// Ceph-style state: `active+clean`, `peering`, `active+degraded`, ...
    pub state: String,
    /// Objects in the PG.
    pub objects: u64,
    /// Logical bytes of the PG's objects (one copy).
    pub bytes: u64,
    /// Newest PG log version, `epoch'v` (`12'345`).
    pub version: String,
    /// Up set.
    pub up: Vec<i32>,
    /// Acting set.
    pub acting: Vec<i32>,
    /// Entries in the PG log.
    pub log_size: u64,
    /// Objects the last scrub found inconsistent (and repair could not fix).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inconsistent: Vec<String>,
    /// Object copies recovery still has to make.
    #[serde(default)]
    pub recovery_left: u64,
    /// Object copies recovery makes per second.
    #[serde(default)]
    pub recovery_per_s: u64,
    /// Object copies missing (absent acting members, and copies members
    /// still lack).
    #[serde(default)]
    pub degraded: u64,
    /// Copies backfill targets lack while an acting member outside the up
    /// set holds them (misplaced, not degraded).
    #[serde(default)]
    pub misplaced: u64,
    /// Objects whose recovery keeps failing, each with why (the
    /// `PG_RECOVERY_STALLED` health check).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recovery_stalled: Vec<String>,
}

/// A daemon's crash, as it recorded it when it panicked and posts it to
/// the monitors (`shoal crash ls|info`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashReport {
    /// Its id: the time and a random suffix (`2026-11-26T11:50:01.123Z_9f2c...`).
    pub crash_id: String,
    /// When (ms since the Unix epoch).
    pub timestamp_ms: u64,
    /// Who crashed (`osd.2`).
    pub entity_name: String,
    /// The daemon's version.
    pub version: String,
    /// The panic's message and where it happened.
    pub message: String,
    /// The top of the backtrace, a frame a line.
    pub backtrace: Vec<String>,
    /// Seen by an operator (`shoal crash archive`): no longer a health warning.
    #[serde(default)]
    pub archived: bool,
}

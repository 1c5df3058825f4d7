//! Typed replies of monitor commands: each structure is defined once, here,
//! serialized by the monitors with serde and decoded by whoever asked
//! ([`MonClient::command_as`](crate::MonClient::command_as)), so a renamed
//! or missing field is an error where it is read, never a silent default.
//! `--format json` prints these structures; their schemas, with a version
//! each, are in `docs/mon-replies.md`. Commands not listed here still answer
//! untyped JSON (issue 46 moves them over one by one).

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{ErrorCode, MonError};

/// Decodes the reply `v` of command `what` into its type (`what` is only
/// formatted when the reply does not decode).
pub fn decode<T: DeserializeOwned>(what: impl std::fmt::Display, v: Value) -> Result<T, MonError> {
    serde_json::from_value(v).map_err(|e| {
        MonError::new(
            ErrorCode::Internal,
            format!("the monitor's answer to {what} does not parse: {e}"),
        )
    })
}

/// The version of the `fs-map` schema this build writes and reads.
pub const FS_MAP_VERSION: u32 = 1;

/// `fs ls`, and what an MDS beacon is answered with: the file-system map
/// (schema `fs-map`, version [`FS_MAP_VERSION`]). A reply of a later
/// version does not decode: a reader never guesses at what it does not
/// know (the fencing token among it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsMapReply {
    /// The schema's version (absent from monitors older than the field:
    /// version 1).
    #[serde(
        default = "v1",
        deserialize_with = "known_version::<FS_MAP_VERSION, _>"
    )]
    pub version: u32,
    /// Bumped by every change.
    pub epoch: u64,
    /// File systems, by name.
    pub filesystems: Vec<FsReply>,
    /// Metadata servers standing by.
    pub standbys: Vec<MdsStandby>,
}

/// One file system of [`FsMapReply`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsReply {
    /// Its name.
    pub name: String,
    /// Its id (objects in the metadata pool are named after it).
    pub id: u64,
    /// The pool of inodes, directories and the journal.
    pub metadata_pool: String,
    /// The pool of file data.
    pub data_pool: String,
    /// When it was made (ms since the Unix epoch).
    pub created_ms: u64,
    /// The MDS holding rank 0, if any.
    pub active: Option<ActiveMds>,
}

/// The MDS holding a file system's rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveMds {
    /// Its name (`a` for `mds.a`).
    pub name: String,
    /// Where it serves clients.
    pub addr: String,
    /// The map epoch that gave it the rank: the fencing token its journal
    /// writes carry. Required: a map without it does not decode.
    pub incarnation: u64,
    /// When it got the rank (ms since the Unix epoch, the leader's clock).
    pub since_ms: u64,
    /// What its last beacon said, as the answering monitor saw it (`fs ls`
    /// only; absent from a beacon's answer and when no beacon is known).
    #[serde(default)]
    pub report: Option<MdsReport>,
}

/// The last beacon of an MDS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsReport {
    /// The state it reported (`active`, `replay`, `standby`...).
    pub state: String,
    /// How long ago it came (ms).
    pub beacon_age_ms: u64,
}

/// A metadata server standing by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsStandby {
    /// Its name.
    pub name: String,
    /// Where it serves clients.
    pub addr: String,
}

/// The version of the `mgr-map` schema this build writes and reads.
pub const MGR_MAP_VERSION: u32 = 1;

/// `mgr stat`, `mgr fail` and a manager beacon's answer: which manager is
/// active and which stand by (schema `mgr-map`, version
/// [`MGR_MAP_VERSION`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MgrMapReply {
    /// The schema's version.
    #[serde(
        default = "v1",
        deserialize_with = "known_version::<MGR_MAP_VERSION, _>"
    )]
    pub version: u32,
    /// Bumped by every change.
    pub epoch: u64,
    /// The active manager, if any.
    pub active: Option<ActiveMgr>,
    /// Whether one is active (Ceph's `available`).
    pub available: bool,
    /// Managers standing by.
    pub standbys: Vec<MgrStandby>,
}

/// The active manager of [`MgrMapReply`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveMgr {
    /// Its name (`x` for `mgr.x`).
    pub name: String,
    /// Where it serves HTTP (`/metrics`, the dashboard).
    pub addr: String,
    /// When it became active (ms since the Unix epoch, the leader's clock).
    pub since_ms: u64,
}

/// A manager standing by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MgrStandby {
    /// Its name.
    pub name: String,
    /// Where it serves HTTP.
    pub addr: String,
}

impl Default for MgrMapReply {
    fn default() -> Self {
        MgrMapReply {
            version: MGR_MAP_VERSION,
            epoch: 0,
            active: None,
            available: false,
            standbys: Vec::new(),
        }
    }
}

impl MgrMapReply {
    /// Whether manager `name` is the active one.
    pub fn is_active(&self, name: &str) -> bool {
        self.active.as_ref().is_some_and(|a| a.name == name)
    }
}

/// The version of the `df` schema this build writes and reads.
pub const DF_VERSION: u32 = 1;

/// `df`: the cluster's raw space and each pool's use (schema `df`, version
/// [`DF_VERSION`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DfReply {
    /// The schema's version.
    #[serde(default = "v1", deserialize_with = "known_version::<DF_VERSION, _>")]
    pub version: u32,
    /// The OSD map epoch the pools are from.
    pub epoch: u32,
    /// Raw space over every OSD that reported.
    pub stats: DfStats,
    /// Every pool.
    pub pools: Vec<PoolDf>,
}

/// The raw space of [`DfReply`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DfStats {
    /// Bytes of every OSD's store.
    pub total_bytes: u64,
    /// Bytes available.
    pub total_avail_bytes: u64,
    /// Bytes used (with redundancy).
    pub total_used_raw_bytes: u64,
    /// Used over total (0 to 1).
    pub total_used_raw_ratio: f64,
    /// OSDs whose space is counted.
    pub num_osds: u64,
}

/// One pool of [`DfReply`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolDf {
    /// Its name.
    pub name: String,
    /// Its id.
    pub id: u64,
    /// Its placement groups.
    pub pg_num: u32,
    /// Its quota.
    pub quota: PoolQuota,
    /// What it holds.
    pub stats: PoolUsage,
}

/// A pool's quota (0: none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolQuota {
    /// Bytes it may store.
    pub max_bytes: u64,
    /// Objects it may hold.
    pub max_objects: u64,
    /// Whether it is full by its quota (writes refused).
    pub full: bool,
}

/// What a pool holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolUsage {
    /// Bytes stored (before redundancy).
    pub stored: u64,
    /// Objects.
    pub objects: u64,
    /// Raw bytes taken (with redundancy).
    pub bytes_used: u64,
    /// The fraction of its possible space used (0 to 1).
    pub percent_used: f64,
    /// Bytes it can still store, as the fullest OSD allows.
    pub max_avail: u64,
}

impl Default for DfReply {
    fn default() -> Self {
        DfReply {
            version: DF_VERSION,
            epoch: 0,
            stats: DfStats::default(),
            pools: Vec::new(),
        }
    }
}

impl DfReply {
    /// Objects over every pool.
    pub fn objects(&self) -> u64 {
        self.pools.iter().map(|p| p.stats.objects).sum()
    }
}

impl Default for FsMapReply {
    fn default() -> Self {
        FsMapReply {
            version: FS_MAP_VERSION,
            epoch: 0,
            filesystems: Vec::new(),
            standbys: Vec::new(),
        }
    }
}

/// The version of the `pg-stat` schema this build writes and reads.
pub const PG_STAT_VERSION: u32 = 1;

/// `pg stat`, and the `pgmap` of `status`: the PGs by state and what they
/// hold (schema `pg-stat`, version [`PG_STAT_VERSION`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgStatReply {
    /// The schema's version.
    #[serde(
        default = "v1",
        deserialize_with = "known_version::<PG_STAT_VERSION, _>"
    )]
    pub version: u32,
    /// The OSD map epoch the PGs are from.
    pub epoch: u32,
    /// Every PG of every pool.
    pub num_pgs: u64,
    /// How many PGs are in each state, the most common first.
    pub num_pg_by_state: Vec<PgStateCount>,
    /// Objects, as the primaries last reported.
    pub num_objects: u64,
    /// Bytes stored (before redundancy).
    pub num_bytes: u64,
    /// Object copies the pools want (objects times their sizes).
    pub num_object_copies: u64,
    /// Copies missing.
    pub num_objects_degraded: u64,
    /// Copies in the wrong place.
    pub num_objects_misplaced: u64,
    /// Raw bytes of every OSD's store.
    pub raw_bytes: u64,
    /// Raw bytes used.
    pub raw_bytes_used: u64,
    /// Raw bytes available.
    pub raw_bytes_avail: u64,
    /// Object copies recovery has still to make.
    pub recovery_objects_left: u64,
    /// Object copies made per second lately.
    pub recovery_objects_per_s: u64,
}

/// One state of [`PgStatReply`] and its count.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgStateCount {
    /// The state (`active+clean`, `peering`, ...).
    pub name: String,
    /// PGs in it.
    pub num: u64,
}

impl Default for PgStatReply {
    fn default() -> Self {
        PgStatReply {
            version: PG_STAT_VERSION,
            epoch: 0,
            num_pgs: 0,
            num_pg_by_state: Vec::new(),
            num_objects: 0,
            num_bytes: 0,
            num_object_copies: 0,
            num_objects_degraded: 0,
            num_objects_misplaced: 0,
            raw_bytes: 0,
            raw_bytes_used: 0,
            raw_bytes_avail: 0,
            recovery_objects_left: 0,
            recovery_objects_per_s: 0,
        }
    }
}

impl Default for OsdStatReply {
    fn default() -> Self {
        OsdStatReply {
            version: OSD_STAT_VERSION,
            epoch: 0,
            num_osds: 0,
            num_up_osds: 0,
            num_in_osds: 0,
            flags: Vec::new(),
            num_pools: 0,
            num_pgs: 0,
        }
    }
}

impl PgStatReply {
    /// PGs in exactly `state`.
    pub fn count(&self, state: &str) -> u64 {
        self.num_pg_by_state
            .iter()
            .filter(|s| s.name == state)
            .map(|s| s.num)
            .sum()
    }

    /// Every PG is active+clean (and there is at least one).
    pub fn all_active_clean(&self) -> bool {
        self.num_pgs > 0 && self.count("active+clean") == self.num_pgs
    }
}

/// The version of the `balancer-status` schema this build writes and reads.
pub const BALANCER_STATUS_VERSION: u32 = 1;

/// `balancer status`: the balancer's settings, the `pg_upmap_items` in the
/// map and the spread of PG copies (schema `balancer-status`, version
/// [`BALANCER_STATUS_VERSION`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BalancerStatusReply {
    /// The schema's version.
    #[serde(
        default = "v1",
        deserialize_with = "known_version::<BALANCER_STATUS_VERSION, _>"
    )]
    pub version: u32,
    /// Whether the leader balances (`mon_balancer_active`).
    pub active: bool,
    /// `upmap`.
    pub mode: String,
    /// How often it looks, ms.
    pub interval_ms: u64,
    /// The deviation it stops at, PG copies.
    pub max_deviation_allowed: u32,
    /// Moves a round at most.
    pub max_moves: u32,
    /// PGs with `pg_upmap_items` in the map.
    pub pg_upmap_items: u64,
    /// Each up and in OSD's copies beside its share.
    pub osds: Vec<BalancerOsd>,
    /// The largest |copies - share|.
    pub max_deviation: f64,
    /// The standard deviation of copies from shares.
    pub stddev: f64,
}

/// One OSD of [`BalancerStatusReply`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BalancerOsd {
    /// Its id.
    pub osd: i32,
    /// PG copies it holds (up sets).
    pub pgs: u64,
    /// Its share.
    pub target: f64,
}

/// The version of the `autoscale-status` schema this build writes and
/// reads.
pub const AUTOSCALE_STATUS_VERSION: u32 = 1;

/// `osd pool autoscale-status`: each pool's share of the raw space and the
/// PG count it calls for (schema `autoscale-status`, version
/// [`AUTOSCALE_STATUS_VERSION`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AutoscaleStatusReply {
    /// The schema's version.
    #[serde(
        default = "v1",
        deserialize_with = "known_version::<AUTOSCALE_STATUS_VERSION, _>"
    )]
    pub version: u32,
    /// `mon_target_pg_per_osd` (central).
    pub target_pg_per_osd: u32,
    /// The factor a pool must be off by (`mon_pg_autoscale_threshold`).
    pub threshold: f64,
    /// Up and in OSDs the PG budget is counted over.
    pub osds_in: u64,
    /// Each pool, by id.
    pub pools: Vec<PoolAutoscale>,
}

/// One pool of [`AutoscaleStatusReply`], in Ceph's field names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolAutoscale {
    /// The pool.
    pub pool_name: String,
    /// Its id.
    pub pool_id: u64,
    /// Bytes stored (before redundancy).
    pub logical_used: u64,
    /// Raw bytes per stored byte: its size, or (k + m) / k.
    pub raw_used_rate: f64,
    /// Raw bytes over every OSD.
    pub raw_capacity: u64,
    /// Its share of the raw capacity (stored × rate / capacity).
    pub capacity_ratio: f64,
    /// Its PGs now (or the count placement is moving to).
    pub pg_num_target: u32,
    /// The PGs its share calls for: its share of `mon_target_pg_per_osd`
    /// × OSDs, over its rate, to the nearest power of two, at least
    /// `mon_pg_autoscale_pg_num_min`.
    pub pg_num_ideal: u32,
    /// Its `pg_autoscale_mode`: `on`, `warn` or `off`.
    pub pg_autoscale_mode: String,
    /// Whether the ideal is off from `pg_num` by the threshold or more,
    /// or `pg_num` is outside the pool's `pg_num_min`..`pg_num_max`.
    pub would_adjust: bool,
    /// Bytes the operator expects it to hold (`target_size_bytes`; 0:
    /// none).
    #[serde(default)]
    pub target_bytes: u64,
    /// Its `target_size_ratio` as set (0: none).
    #[serde(default)]
    pub target_ratio: f64,
    /// Its share from that ratio: the ratio over every pool's, times the
    /// capacity the pools without one leave.
    #[serde(default)]
    pub effective_target_ratio: f64,
    /// The share its PG count is computed from: the largest of its
    /// capacity ratio, its target bytes' share, its effective target
    /// ratio, and (a bulk pool) an even share of what the others leave.
    #[serde(default)]
    pub final_ratio: f64,
    /// Whether it is bulk.
    #[serde(default)]
    pub bulk: bool,
    /// Its `pg_num_min` (0: the central minimum).
    #[serde(default)]
    pub pg_num_min: u32,
    /// Its `pg_num_max` (0: no bound).
    #[serde(default)]
    pub pg_num_max: u32,
}

/// The version of the `osd-stat` schema this build writes and reads.
pub const OSD_STAT_VERSION: u32 = 1;

/// `osd stat`, and the `osdmap` of `status`: the OSDs' counts (schema
/// `osd-stat`, version [`OSD_STAT_VERSION`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdStatReply {
    /// The schema's version.
    #[serde(
        default = "v1",
        deserialize_with = "known_version::<OSD_STAT_VERSION, _>"
    )]
    pub version: u32,
    /// The OSD map epoch.
    pub epoch: u32,
    /// OSDs that exist.
    pub num_osds: u64,
    /// Of them, up.
    pub num_up_osds: u64,
    /// Of them, in (weight above 0).
    pub num_in_osds: u64,
    /// Cluster flags set (`noout`, ...).
    pub flags: Vec<String>,
    /// Pools.
    pub num_pools: u64,
    /// PGs over every pool.
    pub num_pgs: u64,
}

/// The version of the `health` schema this build writes and reads.
pub const HEALTH_VERSION: u32 = 1;

/// `health` and `health detail`, and the `health` of `status`: the
/// cluster's status from the checks in force, those checks, and the muted
/// ones apart (schema `health`, version [`HEALTH_VERSION`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthReply {
    /// The schema's version.
    #[serde(
        default = "v1",
        deserialize_with = "known_version::<HEALTH_VERSION, _>"
    )]
    pub version: u32,
    /// `HEALTH_OK`, `HEALTH_WARN` or `HEALTH_ERR`: the worst check in force.
    pub status: String,
    /// The checks in force (not muted).
    pub checks: Vec<HealthCheck>,
    /// The checks raised but muted.
    pub muted: Vec<MutedCheck>,
}

/// One health check, named as Ceph names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthCheck {
    /// Its code (`OSD_DOWN`, `PG_DEGRADED`, ...).
    pub code: String,
    /// `HEALTH_WARN` or `HEALTH_ERR`.
    pub severity: String,
    /// One line.
    pub summary: String,
    /// The items affected, a line each (bounded; the last may say how many
    /// more).
    pub detail: Vec<String>,
}

impl HealthCheck {
    /// A `HEALTH_WARN` check.
    pub fn warn(code: &str, summary: impl Into<String>, detail: Vec<String>) -> Self {
        HealthCheck {
            code: code.to_string(),
            severity: "HEALTH_WARN".to_string(),
            summary: summary.into(),
            detail,
        }
    }

    /// The same check as `HEALTH_ERR`.
    pub fn error(mut self) -> Self {
        self.severity = "HEALTH_ERR".to_string();
        self
    }
}

/// A check raised but muted, with its mute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MutedCheck {
    /// The check.
    #[serde(flatten)]
    pub check: HealthCheck,
    /// When the mute ends (ms since the Unix epoch; null: when the check
    /// clears, or never if sticky).
    pub muted_until_ms: Option<u64>,
    /// Whether the mute outlives the check.
    pub sticky: bool,
}

impl Default for HealthReply {
    /// Nothing known yet (an empty status, no checks).
    fn default() -> Self {
        HealthReply {
            version: HEALTH_VERSION,
            status: String::new(),
            checks: Vec::new(),
            muted: Vec::new(),
        }
    }
}

impl Default for StatusReply {
    /// Nothing known yet.
    fn default() -> Self {
        StatusReply {
            version: STATUS_VERSION,
            fsid: String::new(),
            health: HealthReply::default(),
            election_term: 0,
            mgrmap: MgrMapReply::default(),
            monmap: MonMapSummary::default(),
            quorum: Vec::new(),
            leader: None,
            state_version: 0,
            osdmap: None,
            pgmap: None,
            auth: AuthSummary::default(),
        }
    }
}

impl HealthReply {
    /// The check `code` in force, if it is.
    pub fn check(&self, code: &str) -> Option<&HealthCheck> {
        self.checks.iter().find(|c| c.code == code)
    }
}

/// The version of the `status` schema this build writes and reads.
pub const STATUS_VERSION: u32 = 1;

/// `status` (and `mon stat`): the cluster at a glance (schema `status`,
/// version [`STATUS_VERSION`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReply {
    /// The schema's version.
    #[serde(
        default = "v1",
        deserialize_with = "known_version::<STATUS_VERSION, _>"
    )]
    pub version: u32,
    /// The cluster's id.
    pub fsid: String,
    /// Its health.
    pub health: HealthReply,
    /// Elections held (the leader's Raft term).
    pub election_term: u64,
    /// The manager map.
    pub mgrmap: MgrMapReply,
    /// The monitors.
    pub monmap: MonMapSummary,
    /// Names of the monitors in the quorum.
    pub quorum: Vec<String>,
    /// The answering monitor's name when it leads (as seen by it).
    pub leader: Option<String>,
    /// How many changes the monitors' state has applied.
    pub state_version: u64,
    /// The OSDs (null before the first OSD map).
    pub osdmap: Option<OsdStatReply>,
    /// The PGs (null before the first OSD map).
    pub pgmap: Option<PgStatReply>,
    /// The auth database.
    pub auth: AuthSummary,
}

/// The monitors of [`StatusReply`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonMapSummary {
    /// The monitor map's epoch.
    pub epoch: u64,
    /// Every monitor.
    pub mons: Vec<MonSummary>,
}

/// One monitor of [`MonMapSummary`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonSummary {
    /// Its name.
    pub name: String,
    /// Where it listens.
    pub addr: String,
    /// Whether it is in the quorum.
    pub in_quorum: bool,
}

/// The auth database of [`StatusReply`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthSummary {
    /// Entities with keys.
    pub entities: u64,
    /// The newest service secret's id.
    pub service_secret: Option<u64>,
}

/// The version of the `osd-tree` schema this build writes and reads.
pub const OSD_TREE_VERSION: u32 = 1;

/// `osd tree`: the CRUSH hierarchy from each root, depth first, then the
/// OSDs in no bucket (schema `osd-tree`, version [`OSD_TREE_VERSION`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OsdTreeReply {
    /// The schema's version.
    #[serde(
        default = "v1",
        deserialize_with = "known_version::<OSD_TREE_VERSION, _>"
    )]
    pub version: u32,
    /// The OSD map's epoch.
    pub epoch: u32,
    /// Buckets and OSDs, each after its parent.
    pub nodes: Vec<TreeNode>,
    /// OSDs that exist in no bucket.
    pub stray: Vec<OsdEntry>,
}

/// A bucket or an OSD of [`OsdTreeReply`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TreeNode {
    /// The CRUSH id (negative: a bucket; else the OSD's id).
    pub id: i32,
    /// `default`, `host1`, `osd.3`, ...
    pub name: String,
    /// The CRUSH type (`root`, `host`, ..., `osd`).
    #[serde(rename = "type")]
    pub kind: String,
    /// Its CRUSH weight (1.0 per TiB by convention).
    pub crush_weight: f64,
    /// Levels below its root.
    pub depth: u64,
    /// The device class (OSDs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// The OSD's state (OSDs only).
    #[serde(flatten)]
    pub osd: Option<OsdEntry>,
    /// The OSD store's size and use, as it last reported (OSDs that did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<u64>,
    /// Bytes used of `total_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
}

/// One OSD's state in the OSD map.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OsdEntry {
    /// Its id.
    pub osd: i32,
    /// Whether it is up.
    pub up: bool,
    /// Whether it is in (reweight above 0).
    #[serde(rename = "in")]
    pub is_in: bool,
    /// Its reweight (0 to 1).
    pub reweight: f64,
    /// Its primary affinity (0 to 1).
    pub primary_affinity: f64,
    /// Where it serves, once it booted.
    pub addr: Option<String>,
}

impl Default for OsdTreeReply {
    fn default() -> Self {
        OsdTreeReply {
            version: OSD_TREE_VERSION,
            epoch: 0,
            nodes: Vec::new(),
            stray: Vec::new(),
        }
    }
}

impl OsdTreeReply {
    /// The OSD nodes.
    pub fn osds(&self) -> impl Iterator<Item = &TreeNode> {
        self.nodes.iter().filter(|n| n.kind == "osd")
    }
}

/// The version of the `pg-dump` schema this build writes and reads.
pub const PG_DUMP_VERSION: u32 = 1;

/// `pg dump`: every PG as its primary last reported it, and every OSD's
/// space (schema `pg-dump`, version [`PG_DUMP_VERSION`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgDumpReply {
    /// The schema's version.
    #[serde(
        default = "v1",
        deserialize_with = "known_version::<PG_DUMP_VERSION, _>"
    )]
    pub version: u32,
    /// The OSD map epoch the PGs map by.
    pub epoch: u32,
    /// Every PG of every pool.
    pub pg_stats: Vec<PgDumpEntry>,
    /// Every OSD that reported its space.
    pub osd_stats: Vec<OsdSpace>,
}

/// One PG of [`PgDumpReply`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgDumpEntry {
    /// `1.a`.
    pub pgid: String,
    /// Its state (`unknown` until a primary reports it).
    pub state: String,
    /// Objects.
    pub objects: u64,
    /// Bytes stored.
    pub bytes: u64,
    /// Its last change, `epoch'v`.
    pub version: String,
    /// Entries in its log.
    pub log_size: u64,
    /// Its up set.
    pub up: Vec<i32>,
    /// Its acting set.
    pub acting: Vec<i32>,
    /// The up set's primary.
    pub up_primary: i32,
    /// The acting set's primary.
    pub acting_primary: i32,
    /// The OSD whose report this is (null: none yet).
    pub reporter: Option<i32>,
    /// The reporter's map epoch then.
    pub reported_epoch: Option<u32>,
}

/// One OSD's space of [`PgDumpReply`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdSpace {
    /// Its id.
    pub osd: i32,
    /// Whether it is up.
    pub up: bool,
    /// Its store's size.
    pub total_bytes: u64,
    /// Bytes used.
    pub used_bytes: u64,
    /// Bytes available.
    pub available_bytes: u64,
}

/// The version of the `pool` schema this build writes and reads.
pub const POOL_VERSION: u32 = 1;

/// A pool, as `osd pool get NAME` answers it and `osd pool ls` and
/// `osd dump` list them (schema `pool`, version [`POOL_VERSION`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolReply {
    /// The schema's version.
    #[serde(default = "v1", deserialize_with = "known_version::<POOL_VERSION, _>")]
    pub version: u32,
    /// Its id.
    pub id: u64,
    /// Its name.
    pub name: String,
    /// `replicated` or `erasure`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Copies (replicated) or chunks, k + m (erasure).
    pub size: u32,
    /// Copies or chunks below which its PGs stop taking writes.
    pub min_size: u32,
    /// Data chunks (erasure only).
    pub k: Option<u32>,
    /// Coding chunks (erasure only).
    pub m: Option<u32>,
    /// Its placement groups.
    pub pg_num: u32,
    /// PGs used for placement.
    pub pgp_num: u32,
    /// Its CRUSH rule's name.
    pub crush_rule: String,
    /// Its erasure-code profile (erasure only).
    pub erasure_code_profile: Option<String>,
    /// Bytes of a stripe (erasure: k chunks).
    pub stripe_width: u32,
    /// The newest snapshot id.
    pub snap_seq: u64,
    /// Removed snapshot ids, as (first, count) runs.
    pub removed_snaps: Vec<(u64, u64)>,
    /// Whether partial overwrites are allowed (erasure only).
    pub allow_ec_overwrites: Option<bool>,
    /// Its byte quota (0: none).
    pub quota_max_bytes: u64,
    /// Its object quota (0: none).
    pub quota_max_objects: u64,
    /// Whether it is at its quota (writes refused).
    pub full_quota: bool,
    /// What the autoscaler does with its `pg_num`: `on`, `warn` or `off`.
    pub pg_autoscale_mode: String,
    /// Whether it is expected to hold much of the data (the autoscaler
    /// sizes it for an even share from the start).
    #[serde(default)]
    pub bulk: bool,
    /// The fewest PGs the autoscaler leaves it (0: the central minimum).
    #[serde(default)]
    pub pg_num_min: u32,
    /// The most PGs the autoscaler gives it (0: no bound).
    #[serde(default)]
    pub pg_num_max: u32,
    /// Bytes it is expected to hold (0: none said).
    #[serde(default)]
    pub target_size_bytes: u64,
    /// Its expected share of the capacity, relative to other pools' (0:
    /// none said).
    #[serde(default)]
    pub target_size_ratio: f64,
}

/// The version of the `osd-map` schema this build writes and reads.
pub const OSD_MAP_VERSION: u32 = 1;

/// `osd map POOL OBJECT`: where an object goes (schema `osd-map`, version
/// [`OSD_MAP_VERSION`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdMapReply {
    /// The schema's version.
    #[serde(
        default = "v1",
        deserialize_with = "known_version::<OSD_MAP_VERSION, _>"
    )]
    pub version: u32,
    /// The OSD map's epoch.
    pub epoch: u32,
    /// The pool's name.
    pub pool: String,
    /// Its id.
    pub pool_id: u64,
    /// The object's name.
    pub objname: String,
    /// Its namespace.
    pub namespace: String,
    /// The object's hash as a PG id before folding to `pg_num`.
    pub raw_pgid: String,
    /// Its PG.
    pub pgid: String,
    /// The PG's up set.
    pub up: Vec<i32>,
    /// Its primary.
    pub up_primary: i32,
    /// The PG's acting set.
    pub acting: Vec<i32>,
    /// Its primary.
    pub acting_primary: i32,
}

/// `auth get`, `auth add` and `auth get-or-create`: entity name → its key
/// and capabilities (`auth ls` too, where the CLI hides the keys).
pub type AuthReply = BTreeMap<String, AuthKey>;

/// One entity of an [`AuthReply`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthKey {
    /// Its secret key, base64 (absent where a listing hides it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// Capabilities by service: `mon` → `allow r`.
    pub caps: BTreeMap<String, String>,
}

impl AuthKey {
    /// The key of `entity` in `reply`, if it is there.
    pub fn of<'a>(reply: &'a AuthReply, entity: &str) -> Option<&'a str> {
        reply
            .get(entity)
            .map(|e| e.key.as_str())
            .filter(|k| !k.is_empty())
    }
}

/// `health history`: checks raised and cleared, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthHistoryReply {
    /// The events.
    pub events: Vec<HealthEvent>,
}

/// One event of [`HealthHistoryReply`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthEvent {
    /// When (ms since the Unix epoch, the leader's clock).
    pub at_ms: u64,
    /// The check.
    pub code: String,
    /// `raised`, `cleared`, or `escalated`/`eased` (severity changed).
    pub what: String,
    /// Its severity then.
    pub severity: String,
    /// Its summary then.
    pub summary: String,
}

/// `crash ls`: every crash report the monitors keep.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashLsReply {
    /// The reports, by id.
    pub crashes: Vec<crate::CrashReport>,
}

/// `daemon reports` (the manager's source): each daemon's newest report
/// and its age.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonReportsReply {
    /// The reports younger than the monitors keep.
    pub reports: Vec<AgedReport>,
}

/// One report of [`DaemonReportsReply`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgedReport {
    /// How long ago the monitor received it.
    pub age_ms: u64,
    /// The report.
    pub report: crate::DaemonReport,
}

/// `config get WHO`: option → its value and the section it comes from.
pub type ConfigGetReply = BTreeMap<String, ConfigValue>;

/// One option of [`ConfigGetReply`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigValue {
    /// Its value.
    pub value: String,
    /// `global`, `osd`, `osd.3`...: the most specific section setting it.
    pub section: String,
}

/// The part every map-changing command's answer shares: the epoch of the
/// map it made (`osd out`, `osd pool create`, `mon add`...; the rest of
/// each answer is the command's own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochReply {
    /// The new map's epoch.
    pub epoch: u64,
}

/// `osd create`: the id given to the new OSD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdCreateReply {
    /// The new OSD's id.
    pub osd: i32,
    /// The OSD map's epoch then.
    pub epoch: u64,
}

/// The version of a reply without the field (from monitors older than it).
fn v1() -> u32 {
    1
}

/// A reply's schema version, refused when later than `MAX` (this build's):
/// a reader never guesses at fields it does not know.
fn known_version<'de, const MAX: u32, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = u32::deserialize(d)?;
    if v > MAX {
        return Err(serde::de::Error::custom(format!(
            "reply schema version {v} is newer than this build's {MAX}: upgrade it"
        )));
    }
    Ok(v)
}

impl FsMapReply {
    /// The file system `name` (`None`: the first), if any.
    pub fn fs(&self, name: Option<&str>) -> Option<&FsReply> {
        match name {
            Some(n) => self.filesystems.iter().find(|f| f.name == n),
            None => self.filesystems.first(),
        }
    }

    /// The file system whose rank MDS `name` holds, if any.
    pub fn fs_of_mds(&self, name: &str) -> Option<&FsReply> {
        self.filesystems
            .iter()
            .find(|f| f.active.as_ref().is_some_and(|a| a.name == name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_fs_map_decodes_a_later_version_and_a_missing_incarnation_are_errors() {
        let v = json!({
            "version": 1,
            "epoch": 3,
            "filesystems": [{
                "name": "fs", "id": 2, "metadata_pool": "m", "data_pool": "d",
                "created_ms": 1,
                "active": { "name": "a", "addr": "127.0.0.1:1", "incarnation": 7,
                            "since_ms": 5, "report": null }
            }],
            "standbys": [{ "name": "b", "addr": "127.0.0.1:2" }]
        });
        let m: FsMapReply = decode("fs ls", v.clone()).unwrap();
        assert_eq!(m.fs(None).map(|f| f.id), Some(2));
        assert_eq!(m.fs(Some("other")), None);
        assert_eq!(
            m.fs_of_mds("a")
                .and_then(|f| f.active.as_ref())
                .map(|a| a.incarnation),
            Some(7)
        );
        assert_eq!(m.fs_of_mds("b"), None);
        // What the monitors print is what they were sent.
        assert_eq!(serde_json::to_value(&m).unwrap(), v);

        // A monitor older than the version field: version 1.
        let mut old = v.clone();
        old.as_object_mut().unwrap().remove("version");
        assert_eq!(decode::<FsMapReply>("fs ls", old).unwrap(), m);
        // A later version is refused, not guessed at.
        let mut newer = v.clone();
        newer["version"] = json!(2);
        let e = decode::<FsMapReply>("fs ls", newer).unwrap_err();
        assert!(e.message.contains("version 2"), "{}", e.message);

        let mut bad = v;
        bad["filesystems"][0]["active"]
            .as_object_mut()
            .unwrap()
            .remove("incarnation");
        let e = decode::<FsMapReply>("fs ls", bad).unwrap_err();
        assert!(e.message.contains("incarnation"), "{}", e.message);
    }

    #[test]
    fn the_mgr_map_decodes_and_prints_as_it_came() {
        let v = json!({
            "version": 1, "epoch": 4, "available": true,
            "active": { "name": "x", "addr": "127.0.0.1:7000", "since_ms": 9 },
            "standbys": [{ "name": "y", "addr": "127.0.0.1:7001" }]
        });
        let m: MgrMapReply = decode("mgr stat", v.clone()).unwrap();
        assert!(m.is_active("x") && !m.is_active("y"));
        assert_eq!(serde_json::to_value(&m).unwrap(), v);
        assert!(!MgrMapReply::default().is_active("x"));
    }

    #[test]
    fn df_decodes_and_prints_as_it_came() {
        let v = json!({
            "version": 1,
            "epoch": 9,
            "stats": { "total_bytes": 100, "total_avail_bytes": 60, "total_used_raw_bytes": 40,
                       "total_used_raw_ratio": 0.4, "num_osds": 3 },
            "pools": [
                { "name": "rbd", "id": 1, "pg_num": 8,
                  "quota": { "max_bytes": 0, "max_objects": 10, "full": false },
                  "stats": { "stored": 10, "objects": 2, "bytes_used": 30,
                             "percent_used": 0.25, "max_avail": 20 } },
                { "name": "fs", "id": 2, "pg_num": 8,
                  "quota": { "max_bytes": 0, "max_objects": 0, "full": false },
                  "stats": { "stored": 1, "objects": 5, "bytes_used": 3,
                             "percent_used": 0.0, "max_avail": 20 } }
            ]
        });
        let df: DfReply = decode("df", v.clone()).unwrap();
        assert_eq!((df.stats.total_bytes, df.objects()), (100, 7));
        assert_eq!(df.pools[0].quota.max_objects, 10);
        assert_eq!(serde_json::to_value(&df).unwrap(), v);
        let mut newer = v;
        newer["version"] = json!(2);
        assert!(decode::<DfReply>("df", newer).is_err());
    }
}

//! The monitors: a Raft quorum (openraft) that is the single source of
//! truth for the monitor map, auth entities and central configuration (and,
//! as the placement crates land, the OSD map and pools).
//!
//! The replicated state machine ([`MonState`]) is a pure function of the
//! committed requests; its log, vote and snapshots are stored crash-safely
//! under the data directory ([`MonStore`]). Raft RPCs and client commands
//! travel over the messenger ([`MonNetwork`], [`Monitor`], [`MonClient`]).
//! This crate depends on the messenger and the configuration schema, never
//! on the OSD or the client library.

mod autoscale;
mod fsmap;
#[doc(hidden)]
pub mod fuzzing;
mod health;
mod mgrmap;
mod mkfs;
mod network;
mod osdmap;
mod pgstats;
mod service;
mod state;
mod store;
mod types;
mod views;
mod views_pg;
mod views_space;

pub use fsmap::{FsInfo, FsMap, MdsEntry};
pub use health::{CheckNow, HealthState};
pub use mgrmap::{MgrEntry, MgrMap};
pub use mkfs::{MonMeta, mkfs, new_fsid};
pub use network::{MonNetwork, PeerContact};
pub use osdmap::{Boot, OsdChange, OsdMapState, failure_domains, initial_crush};
pub use pgstats::{PgStatEntry, PgStats};
pub use service::{Monitor, MonitorOptions, OsdLiveness};
pub use shoal_monclient::{
    Command, CrashReport, DaemonReport, ErrorCode, LATENCY_BOUNDS_S, Metric, MonCaps, MonClient,
    MonError, OsdCaps, OsdMapUpdate, OsdStatfs, PgStatReport, PoolSpec, Subscription, TicketAuth,
    UpdateSink, apply_osdmap_update, apply_osdmap_update_each, parse_mon_caps, parse_mon_host,
};
pub use state::{AuthEntry, MonInfo, MonRequest, MonResponse, MonState, node_id};
pub use store::MonStore;
pub use types::{MonRaft, TypeConfig};
pub use views_space::FullRatios;

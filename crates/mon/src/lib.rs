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

mod client;
mod command;
mod error;
mod hunt;
mod mkfs;
mod network;
mod osdmap;
mod pgstats;
mod service;
mod state;
mod store;
mod ticket_auth;
mod types;
mod views;
mod views_pg;

pub use client::{MonClient, Subscription, UpdateSink};
pub use command::{Command, MonCaps, OsdCaps, parse_mon_caps, parse_mon_host};
pub use error::{ErrorCode, MonError};
pub use mkfs::{MonMeta, mkfs, new_fsid};
pub use network::{MonNetwork, PeerContact};
pub use osdmap::{Boot, OsdChange, OsdMapState, PoolSpec, failure_domains, initial_crush};
pub use pgstats::{OsdStatfs, PgStatEntry, PgStatReport, PgStats};
pub use service::{Monitor, MonitorOptions, OsdLiveness};
pub use state::{AuthEntry, MonInfo, MonRequest, MonResponse, MonState, node_id};
pub use store::MonStore;
pub use ticket_auth::TicketAuth;
pub use types::{MonRaft, TypeConfig};
pub use views::apply_osdmap_update;

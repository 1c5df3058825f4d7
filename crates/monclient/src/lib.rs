//! The monitors' client side: everything a daemon, a tool or a front end
//! needs to talk to the monitors, and nothing of the monitors themselves
//! (no Raft, no monitor store). It owns the [`MonClient`] (a session with
//! one monitor of the quorum, hunting on failure, commands, tickets and
//! map subscriptions that survive a monitor failover), the monitor
//! [`Command`]s with their wire errors, the capability grammar ([`MonCaps`],
//! [`OsdCaps`]), [`TicketAuth`] (the authentication provider of everything
//! that talks to OSDs), and the data types commands carry (pool specs, PG
//! statistics, performance reports) and the typed
//! [`replies`] of its commands. `shoal-mon` builds on it and re-exports it.

mod client;
mod command;
mod error;
mod hunt;
mod perf;
pub mod replies;
mod stats;
mod ticket_auth;
mod update;

pub use client::{MonClient, Subscription, UpdateSink};
pub use command::{Command, MonCaps, OsdCaps, PoolSpec, parse_mon_caps, parse_mon_host};
pub use error::{ErrorCode, MonError};
pub use perf::{
    DaemonReport, Histogram, LATENCY_BOUNDS_S, Metric, MetricValue, REPORT_METRICS_MAX,
};
pub use stats::{CrashReport, OsdStatfs, PgStatReport};
pub use ticket_auth::TicketAuth;
pub use update::{OsdMapUpdate, apply_osdmap_update, apply_osdmap_update_each};

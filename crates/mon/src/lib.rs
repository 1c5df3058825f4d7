//! The monitors: a Raft quorum (openraft) that is the single source of
//! truth for the monitor map, auth entities and central configuration (and,
//! as the placement crates land, the OSD map and pools).
//!
//! The replicated state machine ([`MonState`]) is a pure function of the
//! committed requests; its log, vote and snapshots are stored crash-safely
//! under the data directory ([`MonStore`]). Raft RPCs and client commands
//! travel over the messenger. This crate depends on the messenger and the
//! configuration schema, never on the OSD or the client library.

mod error;
mod state;
mod store;
mod types;

pub use error::{ErrorCode, MonError};
pub use state::{AuthEntry, MonInfo, MonRequest, MonResponse, MonState, node_id};
pub use store::MonStore;
pub use types::{MonRaft, TypeConfig};

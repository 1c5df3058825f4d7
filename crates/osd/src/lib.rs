//! The OSD: it stores the objects of the placement groups the cluster map
//! gives it, in one [`shoal_objectstore::ObjectStore`]. For each PG it keeps a
//! log of changes written in the same store transaction as the data, orders
//! the PG's ops, replicates each change to the rest of the acting set, and
//! answers the client once every acting replica has it durable. It boots
//! into the map through the monitors, follows the map, heartbeats its peers
//! and reports their failures.
//!
//! Protocol logic is kept apart from I/O: op execution ([`exec`]) is a
//! function of the object's stored state and the requested sub-operations;
//! the PG log and peering decisions are pure data structures; the daemon
//! feeds them network and store events. This crate depends on the
//! monitors' client side, never on the client library.

pub mod codec;
pub mod copy;
pub mod ctx;
pub mod daemon;
pub mod ec;
pub mod exec;
#[doc(hidden)]
pub mod fuzzing;
pub mod log;
pub mod missing;
pub mod object;
pub mod pg;
pub mod pieces;
pub mod recovery;
pub mod scrub;
pub mod shards;
pub mod split;
pub mod watch;

mod heartbeat;

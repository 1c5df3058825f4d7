//! The client library: it places objects with the cluster map and talks
//! straight to the primary OSD of each object's PG, as librados does.
//!
//! A [`Client`] authenticates to the monitors, holds a ticket for the OSDs
//! (renewed before it expires) and follows the OSD map. Each operation goes
//! to its PG's primary carrying the map epoch and a request id (the
//! client's `client_inc` and a tid); the client resends it when the PG
//! moves, the primary asks for a newer map, or the connection is lost, and
//! the OSD's PG log makes a resend apply at most once. Operations in flight
//! are bounded in number and bytes; each has a timeout.
//!
//! # Example
//!
//! ```no_run
//! use shoal_client::{Client, Op};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // mon_host and keyring come from the configuration file ($SHOAL_CONF).
//! let client = Client::connect_config(None, "client.admin").await?;
//! let pool = client.pool("rbd")?;
//! pool.write_full("greeting", &b"hello"[..]).await?;
//! assert_eq!(&pool.read("greeting", 0, 0).await?[..], b"hello");
//!
//! // A compound op: applied only if the guard holds.
//! let op = Op::new()
//!     .cmpxattr("owner", shoal_proto::CmpOp::Eq, &b""[..])
//!     .setxattr("owner", &b"me"[..])
//!     .append(&b", world"[..]);
//! pool.operate("greeting", op).await?;
//! # Ok(()) }
//! ```
//!
//! This crate depends on the messenger and the monitors' client side,
//! never on the OSD.

mod client;
mod error;
mod op;
mod pg_command;
mod pool;
mod watch;

pub mod blocking;

pub use client::{Client, ClientOptions, OpObserver, OpOptions, SnapContext};
pub use error::{Error, OpError, Result};
pub use op::{ObjectStat, OmapPage, Op, OpResult};
pub use pool::{ListCursor, ObjectEntry, Pool};
pub use shoal_proto::{CmpOp, WatcherInfo};
pub use watch::{NotifyEvent, NotifyResult, Watch, WatchHealth};

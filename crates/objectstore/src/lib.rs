//! The OSD's object store: the [`ObjectStore`] contract (collections of objects with
//! data, xattrs and omap, changed by atomic, ordered, durable [`Transaction`]s),
//! [`MemStore`] (in memory), [`CrashStore`] (in memory, losing on a simulated crash what
//! the contract allows) and [`BlockStore`] (the default on disk: a data device with
//! an extent allocator and per-block crc32c, metadata in redb).
//!
//! This crate must not depend on the network, the OSD or any async runtime: durability
//! is signalled by a [`CommitTicket`] that any runtime can wait on or hook.

pub mod block;
mod crash;
pub mod error;
pub mod model;
pub mod testsuite;
pub mod tool;
pub mod types;

mod memstore;
mod objmeta;
mod rope;
mod store;
mod ticket;
mod transaction;
mod validate;
mod vecmap;

pub use block::BlockStore;
pub use crash::CrashStore;
pub use error::{Error, Result};
pub use memstore::MemStore;
pub use store::ObjectStore;
pub use ticket::CommitTicket;
pub use transaction::{Op, Transaction};
pub use types::{COLLECTION_ID_BYTES, CollectionId, Listing, ObjectKey, ObjectStat, StatFs};

//! Identifiers and newtypes shared by every Shoal crate: entity names
//! (`mon.a`, `osd.3`, `client.admin`), epochs, OSD, pool and PG ids.
//!
//! This crate owns only plain values and their parsing. It does no I/O, has no
//! async code and depends on nothing of Shoal's, so every other crate can use it.

mod entity;
mod ids;

pub use entity::{EntityName, EntityType, ParseEntityError};
pub use ids::{Epoch, OsdId, PoolId};

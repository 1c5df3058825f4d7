//! The file system: `shoal mds` (the metadata server) and `shoal fs
//! mount` (the FUSE client), as CephFS.
//!
//! Metadata lives in the cluster: inodes in inode-table objects and
//! directories in the omap of directory objects of the file system's
//! metadata pool ([`types`]), every change first appended to a journal
//! there ([`journal`]) and later written into those objects ([`store`]).
//! One MDS per file system is active, chosen by the monitors' file-system
//! map; standbys take over when it falls silent, replaying the journal,
//! and clients reconnect and send again what was not answered ([`mds`],
//! [`client`]). File data is striped into objects of the data pool that
//! clients read and write directly. Capabilities ([`msg`]) let a client
//! create files and change their attributes without waiting for the MDS
//! while nobody else uses them; `fsync` waits until all of it is durable.
//! [`fuse`] turns the kernel's FUSE requests into all this.

pub mod client;
pub mod fuse;
pub mod journal;
pub mod mds;
pub mod msg;
pub mod store;
pub mod types;

pub use client::FsClient;
pub use fuse::ShoalFuse;
pub use mds::{MdsError, MdsOptions, run as run_mds};

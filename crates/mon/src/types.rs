//! The openraft type configuration of the monitors.

use std::io::Cursor;

use crate::state::{MonRequest, MonResponse};

openraft::declare_raft_types!(
    /// Raft types for the monitor quorum: requests are [`MonRequest`],
    /// responses [`MonResponse`], node ids the hash of a monitor's name,
    /// nodes carry the monitor's address.
    pub TypeConfig:
        D = MonRequest,
        R = MonResponse,
        NodeId = u64,
        Node = openraft::BasicNode,
        SnapshotData = Cursor<Vec<u8>>,
);

/// The Raft handle of a monitor.
pub type MonRaft = openraft::Raft<TypeConfig>;
/// A log entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// A log id.
pub type LogId = openraft::LogId<u64>;
/// A storage error.
pub type StorageError = openraft::StorageError<u64>;

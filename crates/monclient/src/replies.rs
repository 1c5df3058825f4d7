//! Typed replies of monitor commands: each structure is defined once, here,
//! serialized by the monitors with serde and decoded by whoever asked
//! ([`MonClient::command_as`](crate::MonClient::command_as)), so a renamed
//! or missing field is an error where it is read, never a silent default.
//! `--format json` prints these structures; their schemas, with a version
//! each, are in `docs/mon-replies.md`. Commands not listed here still answer
//! untyped JSON (issue 46 moves them over one by one).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{ErrorCode, MonError};

/// Decodes the reply `v` of command `what` into its type.
pub fn decode<T: DeserializeOwned>(what: &str, v: Value) -> Result<T, MonError> {
    serde_json::from_value(v).map_err(|e| {
        MonError::new(
            ErrorCode::Internal,
            format!("the monitor's answer to {what} does not parse: {e}"),
        )
    })
}

/// `fs ls`, and what an MDS beacon is answered with: the file-system map
/// (schema `fs-map`, version 1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsMapReply {
    /// Bumped by every change.
    pub epoch: u64,
    /// File systems, by name.
    pub filesystems: Vec<FsReply>,
    /// Metadata servers standing by.
    pub standbys: Vec<MdsStandby>,
}

/// One file system of [`FsMapReply`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsReply {
    /// Its name.
    pub name: String,
    /// Its id (objects in the metadata pool are named after it).
    pub id: u64,
    /// The pool of inodes, directories and the journal.
    pub metadata_pool: String,
    /// The pool of file data.
    pub data_pool: String,
    /// When it was made (ms since the Unix epoch).
    pub created_ms: u64,
    /// The MDS holding rank 0, if any.
    pub active: Option<ActiveMds>,
}

/// The MDS holding a file system's rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveMds {
    /// Its name (`a` for `mds.a`).
    pub name: String,
    /// Where it serves clients.
    pub addr: String,
    /// The map epoch that gave it the rank: the fencing token its journal
    /// writes carry. Required: a map without it does not decode.
    pub incarnation: u64,
    /// When it got the rank (ms since the Unix epoch, the leader's clock).
    pub since_ms: u64,
    /// What its last beacon said, as the answering monitor saw it (`fs ls`
    /// only; absent from a beacon's answer and when no beacon is known).
    #[serde(default)]
    pub report: Option<MdsReport>,
}

/// The last beacon of an MDS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsReport {
    /// The state it reported (`active`, `replay`, `standby`...).
    pub state: String,
    /// How long ago it came (ms).
    pub beacon_age_ms: u64,
}

/// A metadata server standing by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsStandby {
    /// Its name.
    pub name: String,
    /// Where it serves clients.
    pub addr: String,
}

impl FsMapReply {
    /// The file system `name` (`None`: the first), if any.
    pub fn fs(&self, name: Option<&str>) -> Option<&FsReply> {
        match name {
            Some(n) => self.filesystems.iter().find(|f| f.name == n),
            None => self.filesystems.first(),
        }
    }

    /// The file system whose rank MDS `name` holds, if any.
    pub fn fs_of_mds(&self, name: &str) -> Option<&FsReply> {
        self.filesystems
            .iter()
            .find(|f| f.active.as_ref().is_some_and(|a| a.name == name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_fs_map_decodes_and_a_missing_incarnation_is_an_error() {
        let v = json!({
            "epoch": 3,
            "filesystems": [{
                "name": "fs", "id": 2, "metadata_pool": "m", "data_pool": "d",
                "created_ms": 1,
                "active": { "name": "a", "addr": "127.0.0.1:1", "incarnation": 7,
                            "since_ms": 5, "report": null }
            }],
            "standbys": [{ "name": "b", "addr": "127.0.0.1:2" }]
        });
        let m: FsMapReply = decode("fs ls", v.clone()).unwrap();
        assert_eq!(m.fs(None).map(|f| f.id), Some(2));
        assert_eq!(m.fs(Some("other")), None);
        assert_eq!(
            m.fs_of_mds("a")
                .and_then(|f| f.active.as_ref())
                .map(|a| a.incarnation),
            Some(7)
        );
        assert_eq!(m.fs_of_mds("b"), None);
        // What the monitors print is what they were sent.
        assert_eq!(serde_json::to_value(&m).unwrap(), v);

        let mut bad = v;
        bad["filesystems"][0]["active"]
            .as_object_mut()
            .unwrap()
            .remove("incarnation");
        let e = decode::<FsMapReply>("fs ls", bad).unwrap_err();
        assert!(e.message.contains("incarnation"), "{}", e.message);
    }
}

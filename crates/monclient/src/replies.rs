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

/// The version of the `fs-map` schema this build writes and reads.
pub const FS_MAP_VERSION: u32 = 1;

/// `fs ls`, and what an MDS beacon is answered with: the file-system map
/// (schema `fs-map`, version [`FS_MAP_VERSION`]). A reply of a later
/// version does not decode: a reader never guesses at what it does not
/// know (the fencing token among it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsMapReply {
    /// The schema's version (absent from monitors older than the field:
    /// version 1).
    #[serde(default = "fs_map_v1", deserialize_with = "known_fs_map_version")]
    pub version: u32,
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

impl Default for FsMapReply {
    fn default() -> Self {
        FsMapReply {
            version: FS_MAP_VERSION,
            epoch: 0,
            filesystems: Vec::new(),
            standbys: Vec::new(),
        }
    }
}

fn fs_map_v1() -> u32 {
    1
}

fn known_fs_map_version<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = u32::deserialize(d)?;
    if v > FS_MAP_VERSION {
        return Err(serde::de::Error::custom(format!(
            "fs-map version {v} is newer than this build's {FS_MAP_VERSION}: upgrade it"
        )));
    }
    Ok(v)
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
    fn the_fs_map_decodes_a_later_version_and_a_missing_incarnation_are_errors() {
        let v = json!({
            "version": 1,
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

        // A monitor older than the version field: version 1.
        let mut old = v.clone();
        old.as_object_mut().unwrap().remove("version");
        assert_eq!(decode::<FsMapReply>("fs ls", old).unwrap(), m);
        // A later version is refused, not guessed at.
        let mut newer = v.clone();
        newer["version"] = json!(2);
        let e = decode::<FsMapReply>("fs ls", newer).unwrap_err();
        assert!(e.message.contains("version 2"), "{}", e.message);

        let mut bad = v;
        bad["filesystems"][0]["active"]
            .as_object_mut()
            .unwrap()
            .remove("incarnation");
        let e = decode::<FsMapReply>("fs ls", bad).unwrap_err();
        assert!(e.message.contains("incarnation"), "{}", e.message);
    }
}

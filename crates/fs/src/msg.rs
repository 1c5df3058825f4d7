//! What clients and the MDS say to each other: JSON bodies of the
//! `MdsRequest`, `MdsReply` and `MdsPush` frames.
//!
//! A client's requests on its one connection are handled in the order
//! sent; that is what lets it send some (creates and attribute changes on
//! what it holds capabilities for) without waiting, and answer a revoke
//! only after them.

use serde::{Deserialize, Serialize};

use crate::types::{Dentry, Inode, Kind};

/// Capability: the client may change the inode's attributes and size
/// itself and tell the MDS later (it made the file, nobody else uses it).
pub const CAP_EXCL: u32 = 1;
/// Capability (a directory): the client may create entries in it without
/// waiting for the MDS (it alone uses the directory).
pub const CAP_CREATE: u32 = 2;

/// A client's request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The session (0 only for [`Op::SessionOpen`]).
    pub session: u64,
    /// The client's id of the request: a resend carries the same.
    pub tid: u64,
    /// The client's oldest request not yet answered (Ceph's
    /// `oldest_client_tid`): every lower tid's answer has arrived, so the
    /// MDS may forget the answers it keeps for resends below it. 0 (an
    /// older client): keep them until the session ends.
    #[serde(default)]
    pub oldest_tid: u64,
    /// The caller's user and group.
    pub uid: u32,
    /// The caller's group.
    pub gid: u32,
    /// What to do.
    pub op: Op,
}

/// Attributes to set; what is `None` stays.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAttr {
    /// Permission bits.
    pub perm: Option<u32>,
    /// Owner.
    pub uid: Option<u32>,
    /// Group.
    pub gid: Option<u32>,
    /// Size (truncate or extend).
    pub size: Option<u64>,
    /// Access time, ns.
    pub atime: Option<i64>,
    /// Modification time, ns.
    pub mtime: Option<i64>,
    /// Change time, ns (else now when anything changes).
    pub ctime: Option<i64>,
}

/// The operations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Opens a session; `reclaim` is the client's session before an MDS
    /// failover (its capabilities and open files come back), `open` the
    /// inodes it has open.
    SessionOpen {
        /// Who (for `session ls`).
        client: String,
        /// The session it had, if any.
        reclaim: u64,
        /// Inodes it has open, each once per open.
        open: Vec<u64>,
        /// Capabilities it holds (after a failover: the new MDS knows
        /// none, and nobody else can have been granted them).
        #[serde(default)]
        caps: Vec<(u64, u32)>,
    },
    /// Keeps the session alive.
    Renew,
    /// Ends the session: every capability and open file goes.
    SessionClose,
    /// The inode `name` in `parent` names.
    Lookup {
        /// Directory.
        parent: u64,
        /// Name.
        name: String,
    },
    /// An inode's attributes.
    Getattr {
        /// Inode.
        ino: u64,
    },
    /// Changes attributes (truncate included).
    Setattr {
        /// Inode.
        ino: u64,
        /// What to set.
        set: SetAttr,
    },
    /// Makes a file, directory, symlink, fifo, device or socket.
    Make {
        /// Directory.
        parent: u64,
        /// Name.
        name: String,
        /// What.
        kind: Kind,
        /// Permission bits (umask applied).
        perm: u32,
        /// Device number.
        rdev: u32,
        /// A symlink's target.
        target: Option<String>,
        /// The number, when the client made the inode itself from its
        /// preallocated range (an asynchronous create).
        ino: Option<u64>,
        /// Times, when the client made the inode itself.
        time: Option<i64>,
    },
    /// A new name for an inode (hard link).
    Link {
        /// Inode.
        ino: u64,
        /// New directory.
        parent: u64,
        /// New name.
        name: String,
    },
    /// Removes a name (`rmdir`: `dir`).
    Unlink {
        /// Directory.
        parent: u64,
        /// Name.
        name: String,
        /// rmdir, not unlink.
        dir: bool,
    },
    /// Renames, replacing a target unless `noreplace`; `exchange` swaps.
    Rename {
        /// From directory.
        parent: u64,
        /// From name.
        name: String,
        /// To directory.
        newparent: u64,
        /// To name.
        newname: String,
        /// RENAME_NOREPLACE.
        noreplace: bool,
        /// RENAME_EXCHANGE.
        exchange: bool,
    },
    /// Entries of a directory after `after`, with their inodes.
    Readdir {
        /// Directory.
        ino: u64,
        /// Start after this name ("" for the first).
        after: String,
        /// At most.
        max: u32,
    },
    /// Sets an extended attribute (`flags`: XATTR_CREATE, XATTR_REPLACE).
    SetXattr {
        /// Inode.
        ino: u64,
        /// Name.
        name: String,
        /// Value.
        value: Vec<u8>,
        /// Flags.
        flags: i32,
    },
    /// Removes an extended attribute.
    RmXattr {
        /// Inode.
        ino: u64,
        /// Name.
        name: String,
    },
    /// Opens a file (for writing: `write`); the answer has fresh
    /// attributes and the capabilities granted.
    Open {
        /// Inode.
        ino: u64,
        /// Opened for writing.
        write: bool,
    },
    /// A file is closed (every open of this client).
    Release {
        /// Inode.
        ino: u64,
    },
    /// Attributes the client changed under [`CAP_EXCL`] or by writing data
    /// (size and mtime only grow this way, never shrink).
    Flush {
        /// Inode.
        ino: u64,
        /// What changed.
        set: SetAttr,
    },
    /// The client gave up the capabilities revoked (sent after everything
    /// it did under them).
    CapAck {
        /// Inode.
        ino: u64,
    },
    /// Hands the client a range of inode numbers for asynchronous creates.
    AllocInos {
        /// How many.
        count: u64,
    },
    /// Answered once everything the session asked before is durable.
    Sync,
}

/// An error: an errno and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Errno {
    /// The errno (ENOENT...).
    pub errno: i32,
    /// Why, for logs.
    pub message: String,
}

impl Errno {
    /// An error.
    pub fn new(errno: i32, message: impl Into<String>) -> Errno {
        Errno {
            errno,
            message: message.into(),
        }
    }
}

/// A successful answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "out", rename_all = "snake_case")]
pub enum Out {
    /// A session is open.
    Session {
        /// Its id.
        id: u64,
        /// It ends when silent this long (ms).
        timeout_ms: u64,
        /// The MDS's incarnation.
        incarnation: u64,
    },
    /// An inode and the capabilities the client holds on it (and on the
    /// directory the request was in, if any).
    Inode {
        /// The inode.
        inode: Inode,
        /// CAP_* bits.
        caps: u32,
        /// CAP_* bits on the directory.
        #[serde(default)]
        dir_caps: u32,
    },
    /// Directory entries.
    Entries {
        /// Name, entry.
        entries: Vec<(String, Dentry)>,
        /// More follow.
        more: bool,
    },
    /// A range of inode numbers.
    Inos {
        /// The first.
        start: u64,
        /// How many.
        count: u64,
    },
    /// Done, nothing to say.
    Done,
    /// Done; these inodes changed (an unlink's or a rename's: link counts
    /// and change times) and these are gone.
    Changed {
        /// Their new state.
        inodes: Vec<Inode>,
        /// Forgotten inodes.
        gone: Vec<u64>,
    },
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// The request's tid.
    pub tid: u64,
    /// The outcome.
    pub result: Result<Out, Errno>,
}

/// What an MDS sends unasked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "push", rename_all = "snake_case")]
pub enum Push {
    /// Give up the capabilities on `ino` (flush what they cover, then
    /// [`Op::CapAck`]).
    Revoke {
        /// Inode.
        ino: u64,
    },
    /// The inode changed elsewhere: drop what is cached of it.
    Invalidate {
        /// Inode.
        ino: u64,
        /// A directory entry of it that changed (`name` in `ino`).
        name: Option<String>,
    },
}

/// Encodes a body.
pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

/// Decodes a body, refusing what does not parse.
pub fn decode<'a, T: Deserialize<'a>>(b: &'a [u8]) -> Result<T, Errno> {
    serde_json::from_slice(b).map_err(|e| Errno::new(libc::EINVAL, format!("malformed body: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_garbage_is_refused() {
        let r = Request {
            session: 4,
            tid: 9,
            oldest_tid: 7,
            uid: 1000,
            gid: 1000,
            op: Op::Make {
                parent: 1,
                name: "a".into(),
                kind: Kind::File,
                perm: 0o644,
                rdev: 0,
                target: None,
                ino: Some(0x2000),
                time: Some(5),
            },
        };
        assert_eq!(decode::<Request>(&encode(&r)).unwrap(), r);
        assert_eq!(
            decode::<Request>(b"{\"session\":").unwrap_err().errno,
            libc::EINVAL
        );
        assert!(decode::<Reply>(&[0xff, 0x00]).is_err());
        // A client from before `oldest_tid` is still understood.
        let old = br#"{"session":4,"tid":9,"uid":0,"gid":0,"op":{"op":"sync"}}"#;
        assert_eq!(decode::<Request>(old).unwrap().oldest_tid, 0);
    }
}

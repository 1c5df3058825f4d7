//! OSD messages (types 200-299): client object operations, replication of
//! store transactions between the OSDs of a PG's acting set, peering and
//! recovery between them, and object listing.
//!
//! Payloads (data written, data read, objects pushed) travel in the frame's
//! data part, never in the control part: each sub-operation says how many
//! bytes of the data part are its own (`data_len`), in sub-operation order.

/// A compound operation on one object, sent by a client to the primary OSD
/// of the object's PG. The sub-operations apply atomically, in order: if one
/// fails, nothing of the compound op is applied.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OsdOp {
    /// Pool id.
    #[prost(uint64, tag = "1")]
    pub pool: u64,
    /// The PG (its seed) the client mapped the object to.
    #[prost(uint32, tag = "2")]
    pub pg_seed: u32,
    /// Object name.
    #[prost(string, tag = "3")]
    pub oid: String,
    /// Object namespace within the pool (empty: the default namespace).
    #[prost(string, tag = "4")]
    pub nspace: String,
    /// The OSD map epoch the client placed the op with.
    #[prost(uint32, tag = "5")]
    pub epoch: u32,
    /// The client instance; with the sender's entity name and `tid` it
    /// forms the request id that makes a resent op apply at most once.
    #[prost(uint64, tag = "6")]
    pub client_inc: u64,
    /// The client's id for this op, the same on every resend.
    #[prost(uint64, tag = "7")]
    pub tid: u64,
    /// `OsdOp::FLAG_*` bits.
    #[prost(uint32, tag = "8")]
    pub flags: u32,
    /// The sub-operations, applied in order.
    #[prost(message, repeated, tag = "9")]
    pub ops: Vec<OsdSubOp>,
    /// Snapshot context of a write: the newest snapshot id the writer knows
    /// (0: none)...
    #[prost(uint64, tag = "10")]
    pub snap_seq: u64,
    /// ...and the object's live snapshots, newest first: the first write
    /// after a snapshot keeps what the object held as a clone for them.
    #[prost(uint64, repeated, tag = "11")]
    pub snaps: Vec<u64>,
    /// Read the object as it was at this snapshot (0: as it is now).
    #[prost(uint64, tag = "12")]
    pub snap_id: u64,
}

impl OsdOp {
    /// The op is a resend of one sent before (a hint; dedup is by request id).
    pub const FLAG_RESEND: u32 = 1;
    /// A change that may go through on a full OSD (as Ceph's
    /// FULL_TRY): the metadata server's journal and a gateway's deletes,
    /// which must work for anyone to free space; the store's own space
    /// check still applies.
    pub const FLAG_FULL_TRY: u32 = 2;
}

/// One sub-operation of an [`OsdOp`]. Which fields count depends on `code`
/// (an [`OpCode`]); the others are left at their defaults.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OsdSubOp {
    /// An [`OpCode`].
    #[prost(uint32, tag = "1")]
    pub code: u32,
    /// Byte offset (read, write, zero) or new size (truncate).
    #[prost(uint64, tag = "2")]
    pub offset: u64,
    /// Length in bytes (read, zero).
    #[prost(uint64, tag = "3")]
    pub length: u64,
    /// Xattr name.
    #[prost(string, tag = "4")]
    pub name: String,
    /// Bytes of the request's data part that belong to this sub-operation.
    #[prost(uint64, tag = "5")]
    pub data_len: u64,
    /// Omap keys (get by keys, remove keys, set: paired with `values`).
    #[prost(bytes = "vec", repeated, tag = "6")]
    pub keys: Vec<Vec<u8>>,
    /// Omap values for `OmapSetVals`, one per key.
    #[prost(bytes = "vec", repeated, tag = "7")]
    pub values: Vec<Vec<u8>>,
    /// Omap listing: start after this key (empty: from the first).
    #[prost(bytes = "vec", tag = "8")]
    pub start_after: Vec<u8>,
    /// Omap listing: only keys with this prefix.
    #[prost(bytes = "vec", tag = "9")]
    pub prefix: Vec<u8>,
    /// Omap listing: at most this many entries (0: the OSD's limit).
    #[prost(uint32, tag = "10")]
    pub max: u32,
    /// `CmpXattr`: a [`CmpOp`].
    #[prost(uint32, tag = "11")]
    pub cmp: u32,
    /// `AssertVersion`: the object version expected.
    #[prost(uint64, tag = "12")]
    pub version: u64,
    /// `Create`: [`OsdSubOp::CREATE_EXCLUSIVE`].
    #[prost(uint32, tag = "13")]
    pub flags: u32,
}

impl OsdSubOp {
    /// `Create` fails with `Exists` when the object exists.
    pub const CREATE_EXCLUSIVE: u32 = 1;
    /// `SparseRead` returns the extents without their data.
    pub const EXTENTS_ONLY: u32 = 1;

    /// A sub-operation with `code` and every other field at its default.
    pub fn new(code: OpCode) -> OsdSubOp {
        OsdSubOp {
            code: code as u32,
            ..OsdSubOp::default()
        }
    }
}

/// What a sub-operation does. Stable on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
#[non_exhaustive]
pub enum OpCode {
    /// Create the object (`flags`: exclusive).
    Create = 1,
    /// Write the data part at `offset`.
    Write = 2,
    /// Replace the whole object's data with the data part.
    WriteFull = 3,
    /// Write the data part at the object's end.
    Append = 4,
    /// Read `length` bytes at `offset` (length 0: to the end).
    Read = 5,
    /// Size, mtime and version.
    Stat = 6,
    /// Set the size to `offset`.
    Truncate = 7,
    /// Zero `length` bytes at `offset`.
    Zero = 8,
    /// Remove the object.
    Remove = 9,
    /// One xattr (`name`), returned in the data part.
    GetXattr = 10,
    /// Every xattr: names in `names`, values in `values`.
    GetXattrs = 11,
    /// Set xattr `name` to the data part.
    SetXattr = 12,
    /// Remove xattr `name`.
    RmXattr = 13,
    /// Guard: compare xattr `name` with the data part by `cmp`.
    CmpXattr = 14,
    /// Omap entries after `start_after` with `prefix`, at most `max`.
    OmapGetVals = 15,
    /// Omap keys after `start_after` with `prefix`, at most `max`.
    OmapGetKeys = 16,
    /// The omap values of `keys` that exist.
    OmapGetValsByKeys = 17,
    /// Set omap `keys` to `values`.
    OmapSetVals = 18,
    /// Remove omap `keys`.
    OmapRmKeys = 19,
    /// Remove every omap entry and the header.
    OmapClear = 20,
    /// The omap header, in the data part.
    OmapGetHeader = 21,
    /// Set the omap header to the data part.
    OmapSetHeader = 22,
    /// Guard: the object exists.
    AssertExists = 23,
    /// Guard: the object's version is `version`.
    AssertVersion = 24,
    /// The allocated extents of `length` bytes at `offset` (0: to the end)
    /// in the result's `extents`, and their data in the data part (none
    /// with [`OsdSubOp::EXTENTS_ONLY`]); what no extent covers reads as zeros.
    SparseRead = 25,
}

impl OpCode {
    /// The code for a wire value.
    pub fn from_u32(v: u32) -> Option<OpCode> {
        use OpCode::*;
        Some(match v {
            1 => Create,
            2 => Write,
            3 => WriteFull,
            4 => Append,
            5 => Read,
            6 => Stat,
            7 => Truncate,
            8 => Zero,
            9 => Remove,
            10 => GetXattr,
            11 => GetXattrs,
            12 => SetXattr,
            13 => RmXattr,
            14 => CmpXattr,
            15 => OmapGetVals,
            16 => OmapGetKeys,
            17 => OmapGetValsByKeys,
            18 => OmapSetVals,
            19 => OmapRmKeys,
            20 => OmapClear,
            21 => OmapGetHeader,
            22 => OmapSetHeader,
            23 => AssertExists,
            24 => AssertVersion,
            25 => SparseRead,
            _ => return None,
        })
    }

    /// Whether the sub-operation changes the object.
    pub fn is_write(self) -> bool {
        use OpCode::*;
        matches!(
            self,
            Create
                | Write
                | WriteFull
                | Append
                | Truncate
                | Zero
                | Remove
                | SetXattr
                | RmXattr
                | OmapSetVals
                | OmapRmKeys
                | OmapClear
                | OmapSetHeader
        )
    }

    /// Whether the sub-operation reads or changes the object's omap.
    pub fn is_omap(self) -> bool {
        use OpCode::*;
        matches!(
            self,
            OmapGetVals
                | OmapGetKeys
                | OmapGetValsByKeys
                | OmapSetVals
                | OmapRmKeys
                | OmapClear
                | OmapGetHeader
                | OmapSetHeader
        )
    }
}

/// How `CmpXattr` compares the stored value (left) with the given one.
/// Values compare as byte strings; an absent xattr compares as empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum CmpOp {
    /// Equal.
    Eq = 1,
    /// Not equal.
    Ne = 2,
    /// Greater than.
    Gt = 3,
    /// Greater than or equal.
    Gte = 4,
    /// Less than.
    Lt = 5,
    /// Less than or equal.
    Lte = 6,
}

impl CmpOp {
    /// The comparison for a wire value.
    pub fn from_u32(v: u32) -> Option<CmpOp> {
        Some(match v {
            1 => CmpOp::Eq,
            2 => CmpOp::Ne,
            3 => CmpOp::Gt,
            4 => CmpOp::Gte,
            5 => CmpOp::Lt,
            6 => CmpOp::Lte,
            _ => return None,
        })
    }
}

/// The primary's answer to an [`OsdOp`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct OsdOpReply {
    /// 0 on success, else an [`OsdErrorCode`].
    #[prost(uint32, tag = "1")]
    pub code: u32,
    /// Human-readable error message.
    #[prost(string, tag = "2")]
    pub message: String,
    /// The OSD's map epoch; with `StaleEpoch` or `WrongPrimary` the client
    /// waits for at least this epoch and resends.
    #[prost(uint32, tag = "3")]
    pub epoch: u32,
    /// The object's version after the op (its PG log version for writes).
    #[prost(uint64, tag = "4")]
    pub version: u64,
    /// Per sub-operation results (up to and including a failed one).
    #[prost(message, repeated, tag = "5")]
    pub results: Vec<OsdSubOpResult>,
    /// The index of the sub-operation that failed, when `code` is not 0.
    #[prost(uint32, tag = "6")]
    pub failed_op: u32,
    /// The op was a resend already applied: this is the original result.
    #[prost(bool, tag = "7")]
    pub replayed: bool,
}

/// The result of one sub-operation. Data read travels in the reply's data
/// part, `data_len` bytes per sub-operation in order.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OsdSubOpResult {
    /// 0 or an [`OsdErrorCode`].
    #[prost(uint32, tag = "1")]
    pub code: u32,
    /// Bytes of the reply's data part that belong to this result.
    #[prost(uint64, tag = "2")]
    pub data_len: u64,
    /// `Stat`: the size.
    #[prost(uint64, tag = "3")]
    pub size: u64,
    /// `Stat`: the last modification, ms since the Unix epoch.
    #[prost(uint64, tag = "4")]
    pub mtime_ms: u64,
    /// Omap keys listed or read.
    #[prost(bytes = "vec", repeated, tag = "5")]
    pub keys: Vec<Vec<u8>>,
    /// Omap values (paired with `keys`) or xattr values (with `names`).
    #[prost(bytes = "vec", repeated, tag = "6")]
    pub values: Vec<Vec<u8>>,
    /// Omap listing: more entries follow.
    #[prost(bool, tag = "7")]
    pub more: bool,
    /// `GetXattrs`: the names.
    #[prost(string, repeated, tag = "8")]
    pub names: Vec<String>,
    /// `Stat`: the object's version.
    #[prost(uint64, tag = "9")]
    pub version: u64,
    /// `SparseRead`: the allocated extents, as (offset, length) pairs flattened.
    #[prost(uint64, repeated, tag = "10")]
    pub extents: Vec<u64>,
}

/// Why an OSD refused or failed an op. Stable on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
#[non_exhaustive]
pub enum OsdErrorCode {
    /// Success.
    Ok = 0,
    /// The object (or xattr, omap key) does not exist.
    NotFound = 1,
    /// Exclusive create of an existing object.
    Exists = 2,
    /// The OSD is out of space.
    NoSpace = 3,
    /// The caller's capabilities do not allow the op.
    PermissionDenied = 4,
    /// A field is out of range or the op is not well formed.
    InvalidArgument = 5,
    /// A `CmpXattr` guard did not hold.
    CompareFailed = 6,
    /// An `AssertVersion` guard did not hold.
    VersionMismatch = 7,
    /// The op was placed with an epoch older than the PG's current interval:
    /// get the map at `epoch` and resend.
    StaleEpoch = 8,
    /// This OSD is not the primary of the PG in its map: get the map at
    /// `epoch` and resend.
    WrongPrimary = 9,
    /// The PG cannot serve the op now (peering, below min_size); retry.
    Again = 10,
    /// The store failed to read or write (a checksum mismatch, a failed device).
    Io = 11,
    /// The op or its data is larger than the OSD accepts.
    TooLarge = 12,
    /// The pool does not exist in the OSD's map.
    NoPool = 13,
    /// The OSD is shutting down; resend (to the next primary).
    ShuttingDown = 14,
    /// An internal error.
    Internal = 15,
    /// No such xattr.
    NoData = 16,
    /// The pool does not offer the op (omap on an erasure-coded pool).
    NotSupported = 17,
}

impl OsdErrorCode {
    /// The code for a wire value; unknown values map to `Internal`.
    pub fn from_u32(v: u32) -> OsdErrorCode {
        use OsdErrorCode::*;
        match v {
            0 => Ok,
            1 => NotFound,
            2 => Exists,
            3 => NoSpace,
            4 => PermissionDenied,
            5 => InvalidArgument,
            6 => CompareFailed,
            7 => VersionMismatch,
            8 => StaleEpoch,
            9 => WrongPrimary,
            10 => Again,
            11 => Io,
            12 => TooLarge,
            13 => NoPool,
            14 => ShuttingDown,
            16 => NoData,
            17 => NotSupported,
            _ => Internal,
        }
    }
}

/// The primary sends a PG's store transaction to a replica of its acting
/// set; the replica applies it atomically (data and PG log entry together)
/// and answers with [`RepOpReply`] once it is durable.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RepOp {
    /// Pool id.
    #[prost(uint64, tag = "1")]
    pub pool: u64,
    /// PG seed.
    #[prost(uint32, tag = "2")]
    pub pg_seed: u32,
    /// The primary's map epoch.
    #[prost(uint32, tag = "3")]
    pub epoch: u32,
    /// The first epoch of the primary's current interval for the PG.
    #[prost(uint32, tag = "4")]
    pub interval_start: u32,
    /// The PG log entry of the op (encoded by the OSD).
    #[prost(bytes = "vec", tag = "5")]
    pub log_entry: Vec<u8>,
    /// The transaction without the PG log's own updates (the replica
    /// logs `log_entry` itself); write payloads are in the data part.
    #[prost(message, repeated, tag = "6")]
    pub txn: Vec<TxnOp>,
    /// Change in the PG's object count.
    #[prost(int64, tag = "7")]
    pub objects_delta: i64,
    /// Change in the PG's logical bytes.
    #[prost(int64, tag = "8")]
    pub bytes_delta: i64,
    /// Erasure coding: every member has the changes up to this version
    /// (epoch, v) durable, so none of them will be rolled back and each
    /// shard drops their rollback stashes (0, 0: none yet).
    #[prost(uint32, tag = "9")]
    pub roll_forward_epoch: u32,
    /// See `roll_forward_epoch`.
    #[prost(uint64, tag = "10")]
    pub roll_forward_v: u64,
    /// Erasure coding: the shard this part of the change is for; a member
    /// holding another shard refuses it.
    #[prost(uint32, optional, tag = "11")]
    pub ec_shard: Option<u32>,
}

/// One store operation of a replicated transaction. `kind` numbers follow
/// the object store's operations; which fields count depends on it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnOp {
    /// The store operation.
    #[prost(uint32, tag = "1")]
    pub kind: u32,
    /// Object hash.
    #[prost(uint32, tag = "2")]
    pub hash: u32,
    /// Object name (store key).
    #[prost(bytes = "vec", tag = "3")]
    pub name: Vec<u8>,
    /// Offset, or new size.
    #[prost(uint64, tag = "4")]
    pub offset: u64,
    /// Length.
    #[prost(uint64, tag = "5")]
    pub length: u64,
    /// Bytes of the data part that belong to this op.
    #[prost(uint64, tag = "6")]
    pub data_len: u64,
    /// Xattr names (paired with `values` to set, alone to remove).
    #[prost(string, repeated, tag = "7")]
    pub attrs: Vec<String>,
    /// Omap keys.
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub keys: Vec<Vec<u8>>,
    /// Values paired with `keys` or `attrs`.
    #[prost(bytes = "vec", repeated, tag = "9")]
    pub values: Vec<Vec<u8>>,
    /// A second object (clone, rename destination): hash.
    #[prost(uint32, tag = "10")]
    pub dst_hash: u32,
    /// A second object: name.
    #[prost(bytes = "vec", tag = "11")]
    pub dst_name: Vec<u8>,
    /// The object's snapshot id; 0 for the object itself (snapshot ids
    /// start at 1, as Ceph's do).
    #[prost(uint64, tag = "12")]
    pub snap: u64,
    /// The destination's snapshot id (clone, rename); 0 for the object itself.
    #[prost(uint64, tag = "13")]
    pub dst_snap: u64,
}

/// A replica's answer to a [`RepOp`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct RepOpReply {
    /// 0 once durable, else an [`OsdErrorCode`].
    #[prost(uint32, tag = "1")]
    pub code: u32,
    /// Human-readable error message.
    #[prost(string, tag = "2")]
    pub message: String,
    /// The replica's map epoch.
    #[prost(uint32, tag = "3")]
    pub epoch: u32,
}

/// Peering: the primary asks a member for its PG info and its log entries
/// after `since` (encoded version).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PgQuery {
    /// Pool id.
    #[prost(uint64, tag = "1")]
    pub pool: u64,
    /// PG seed.
    #[prost(uint32, tag = "2")]
    pub pg_seed: u32,
    /// The primary's map epoch.
    #[prost(uint32, tag = "3")]
    pub epoch: u32,
    /// The first epoch of the primary's interval.
    #[prost(uint32, tag = "4")]
    pub interval_start: u32,
    /// Which piece of the answer to send (0: the first); see [`PgInfo::more`].
    #[prost(uint32, tag = "5")]
    pub piece: u32,
}

/// A member's answer to [`PgQuery`] (or a primary's activation message to
/// its replicas, with `activate` set): the PG info and log, encoded by the OSD.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PgInfo {
    /// Pool id.
    #[prost(uint64, tag = "1")]
    pub pool: u64,
    /// PG seed.
    #[prost(uint32, tag = "2")]
    pub pg_seed: u32,
    /// The sender's map epoch.
    #[prost(uint32, tag = "3")]
    pub epoch: u32,
    /// The PG info (encoded by the OSD); empty when the sender has no copy.
    #[prost(bytes = "vec", tag = "4")]
    pub info: Vec<u8>,
    /// PG log entries (each encoded by the OSD), oldest first.
    #[prost(bytes = "vec", repeated, tag = "5")]
    pub log: Vec<Vec<u8>>,
    /// Sent by the primary: the PG is active in this interval.
    #[prost(bool, tag = "6")]
    pub activate: bool,
    /// The first epoch of the interval.
    #[prost(uint32, tag = "7")]
    pub interval_start: u32,
    /// The member's missing set (each record encoded by the OSD): in an
    /// answer, what the sender lacks; in an activation, what the receiver
    /// lacks once it holds the authoritative log.
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub missing: Vec<Vec<u8>>,
    /// Activation: the receiver's copy is too old for the log to bring it
    /// up to date; it empties its copy first and is backfilled.
    #[prost(bool, tag = "9")]
    pub backfill: bool,
    /// The request ids of trimmed entries (dups, each encoded by the OSD),
    /// oldest first: they travel with the log, so a member that takes the
    /// log still knows which old requests were applied.
    #[prost(bytes = "vec", repeated, tag = "10")]
    pub dups: Vec<Vec<u8>>,
    /// More pieces follow: a long log, many dups or a large missing set go
    /// in pieces of bounded size, records in order (log, dups, missing),
    /// each piece carrying `info`. A query asks for the next piece; an
    /// activation's receiver acknowledges each piece and applies the
    /// whole once the last arrives.
    #[prost(bool, tag = "11")]
    pub more: bool,
    /// This piece's number (0: the first).
    #[prost(uint32, tag = "12")]
    pub piece: u32,
    /// Of an erasure-coded PG: the shard the member holds (255 for a
    /// replicated PG's whole copy), so recovery can read it from a member
    /// of an earlier interval.
    #[prost(uint32, tag = "13")]
    pub shard: u32,
    /// Erasure coding, in a query's answer: the member can roll back
    /// every change of its log newer than this version (epoch, v); absent
    /// (`has_rollback_floor` false), none.
    #[prost(bool, tag = "14")]
    pub has_rollback_floor: bool,
    /// See `has_rollback_floor`.
    #[prost(uint32, tag = "15")]
    pub rollback_floor_epoch: u32,
    /// See `has_rollback_floor`.
    #[prost(uint64, tag = "16")]
    pub rollback_floor_v: u64,
    /// Erasure coding, in a query's answer: other shards of the PG the
    /// member still holds from positions it left (strays), which may serve
    /// recovery.
    #[prost(message, repeated, tag = "17")]
    pub strays: Vec<StrayShard>,
    /// Erasure coding, in an activation: every member is complete, so
    /// strays are no longer needed and are removed.
    #[prost(bool, tag = "18")]
    pub purge_strays: bool,
}

/// A shard of an erasure-coded PG that a member holds from a position it
/// left: what it held when it left.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StrayShard {
    /// The shard.
    #[prost(uint32, tag = "1")]
    pub shard: u32,
    /// Its PG info (encoded by the OSD).
    #[prost(bytes = "vec", tag = "2")]
    pub info: Vec<u8>,
    /// Its missing set (encoded by the OSD).
    #[prost(bytes = "vec", repeated, tag = "3")]
    pub missing: Vec<Vec<u8>>,
}

/// How far a copy of one object has got (Ceph's ObjectRecoveryProgress).
/// A copy is a sequence of steps; each moves the data after
/// `data_recovered_to` and the omap entries after `omap_recovered_to`, a
/// bounded amount of each, and the first one the xattrs and omap header.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CopyProgress {
    /// Nothing is copied yet: the next step carries the xattrs and the omap
    /// header, and the receiver starts a new temporary copy.
    #[prost(bool, tag = "1")]
    pub first: bool,
    /// Data bytes copied, from offset 0.
    #[prost(uint64, tag = "2")]
    pub data_recovered_to: u64,
    /// Every data byte is copied.
    #[prost(bool, tag = "3")]
    pub data_complete: bool,
    /// The last omap key copied (when `omap_started`).
    #[prost(bytes = "vec", tag = "4")]
    pub omap_recovered_to: Vec<u8>,
    /// Some omap entry is copied: `omap_recovered_to` is set.
    #[prost(bool, tag = "5")]
    pub omap_started: bool,
    /// Every omap entry is copied.
    #[prost(bool, tag = "6")]
    pub omap_complete: bool,
}

/// Recovery: one step of a copy of an object (or its absence) pushed to a
/// member that lacks its newest version. The step's data (bytes
/// `before.data_recovered_to` up to `after.data_recovered_to`) is the data
/// part. Without `before` and `after` the push is the whole object.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PgPush {
    /// Pool id.
    #[prost(uint64, tag = "1")]
    pub pool: u64,
    /// PG seed.
    #[prost(uint32, tag = "2")]
    pub pg_seed: u32,
    /// The sender's map epoch.
    #[prost(uint32, tag = "3")]
    pub epoch: u32,
    /// Object hash.
    #[prost(uint32, tag = "4")]
    pub hash: u32,
    /// Object name (store key).
    #[prost(bytes = "vec", tag = "5")]
    pub name: Vec<u8>,
    /// Whether the object exists (false: remove it).
    #[prost(bool, tag = "6")]
    pub exists: bool,
    /// Xattr names (store names).
    #[prost(string, repeated, tag = "7")]
    pub attrs: Vec<String>,
    /// Xattr values.
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub attr_values: Vec<Vec<u8>>,
    /// Omap header.
    #[prost(bytes = "vec", tag = "9")]
    pub omap_header: Vec<u8>,
    /// Omap keys.
    #[prost(bytes = "vec", repeated, tag = "10")]
    pub omap_keys: Vec<Vec<u8>>,
    /// Omap values.
    #[prost(bytes = "vec", repeated, tag = "11")]
    pub omap_values: Vec<Vec<u8>>,
    /// Where the copy was before this step (unset: nothing copied).
    #[prost(message, optional, tag = "12")]
    pub before: Option<CopyProgress>,
    /// Where it is after this step (unset: complete). The copy is complete
    /// when both its data and its omap are.
    #[prost(message, optional, tag = "13")]
    pub after: Option<CopyProgress>,
    /// The object's size at the source.
    #[prost(uint64, tag = "14")]
    pub object_size: u64,
    /// The object's snapshot (0: the head; else the clone for that snapshot).
    #[prost(uint64, tag = "15")]
    pub snap: u64,
}

/// Recovery: several whole objects (or their absence) pushed to a member in
/// one message, installed in one transaction and acknowledged once (a
/// [`RepOpReply`]). Each entry is a [`PgPush`] of a copy in one step; the
/// data part is their data one after the other, `data_lengths[i]` bytes
/// for entry `i`. The primary batches small objects this way when
/// recovering a replicated pool without snapshots.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PgPushBatch {
    /// Pool id.
    #[prost(uint64, tag = "1")]
    pub pool: u64,
    /// PG seed.
    #[prost(uint32, tag = "2")]
    pub pg_seed: u32,
    /// The sender's map epoch.
    #[prost(uint32, tag = "3")]
    pub epoch: u32,
    /// The objects, each a copy in one step (their own pool, seed and
    /// epoch are not read).
    #[prost(message, repeated, tag = "4")]
    pub objects: Vec<PgPush>,
    /// Bytes of the data part that belong to each object, in order.
    #[prost(uint64, repeated, tag = "5")]
    pub data_lengths: Vec<u64>,
}

/// A stray — an OSD that holds a copy of a PG while in neither its up
/// nor its acting set (left behind by a move: an OSD marked out, an upmap,
/// a balancer step) — asks the PG's acting primary whether the copy may
/// go. The primary answers with a [`RepOpReply`]: code 0 when the PG is
/// active and clean with the sender in none of its sets (the copy serves
/// nothing any more), else why not (`Again`: not clean yet; `WrongPrimary`;
/// `InvalidArgument`: the sender is a member). The stray deletes only if it
/// is still a stray of the same primary when the answer comes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PgStray {
    /// Pool id.
    #[prost(uint64, tag = "1")]
    pub pool: u64,
    /// PG seed.
    #[prost(uint32, tag = "2")]
    pub pg_seed: u32,
    /// The stray's map epoch.
    #[prost(uint32, tag = "3")]
    pub epoch: u32,
    /// The newest change of the stray's copy (its log's last update), for
    /// the primary's log line.
    #[prost(string, tag = "4")]
    pub last_update: String,
    /// The asker is a member of the PG (erasure coding) that still holds
    /// the shards of positions it left, and asks to drop those alone; the
    /// primary agrees on the same condition, with the asker in its sets.
    #[prost(bool, tag = "5")]
    pub member: bool,
}

/// Recovery: the primary asks a member for the next step of a copy of one
/// object; the answer is a [`PgPush`] (with `exists` false when the member
/// has none), its `before` equal to `progress`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PgPull {
    /// Pool id.
    #[prost(uint64, tag = "1")]
    pub pool: u64,
    /// PG seed.
    #[prost(uint32, tag = "2")]
    pub pg_seed: u32,
    /// The sender's map epoch.
    #[prost(uint32, tag = "3")]
    pub epoch: u32,
    /// Object hash.
    #[prost(uint32, tag = "4")]
    pub hash: u32,
    /// Object name (store key).
    #[prost(bytes = "vec", tag = "5")]
    pub name: Vec<u8>,
    /// Where the copy is (unset: nothing copied yet).
    #[prost(message, optional, tag = "6")]
    pub progress: Option<CopyProgress>,
    /// Most data bytes the step may carry (0: the sender's own limit);
    /// the sender never exceeds its own limit either.
    #[prost(uint64, tag = "7")]
    pub data_bytes_max: u64,
    /// Most bytes of xattrs, omap header and omap entries the step may
    /// carry (0: the sender's own limit).
    #[prost(uint64, tag = "8")]
    pub omap_bytes_max: u64,
    /// The object's snapshot (0: the head).
    #[prost(uint64, tag = "9")]
    pub snap: u64,
}

/// Lists the objects of one PG, in the store's hash order, from a cursor.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PgList {
    /// Pool id.
    #[prost(uint64, tag = "1")]
    pub pool: u64,
    /// PG seed.
    #[prost(uint32, tag = "2")]
    pub pg_seed: u32,
    /// The client's map epoch.
    #[prost(uint32, tag = "3")]
    pub epoch: u32,
    /// Resume at this object hash (with `cursor_name`); ignored unless `has_cursor`.
    #[prost(uint32, tag = "4")]
    pub cursor_hash: u32,
    /// Resume at this object (store key), inclusive.
    #[prost(bytes = "vec", tag = "5")]
    pub cursor_name: Vec<u8>,
    /// Whether the cursor is set.
    #[prost(bool, tag = "6")]
    pub has_cursor: bool,
    /// At most this many names.
    #[prost(uint32, tag = "7")]
    pub max: u32,
    /// Resume at this snapshot of the cursor object (0: its head).
    #[prost(uint64, tag = "8")]
    pub cursor_snap: u64,
}

/// The answer to a [`PgList`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct PgListReply {
    /// 0 or an [`OsdErrorCode`].
    #[prost(uint32, tag = "1")]
    pub code: u32,
    /// Human-readable error message.
    #[prost(string, tag = "2")]
    pub message: String,
    /// The OSD's map epoch.
    #[prost(uint32, tag = "3")]
    pub epoch: u32,
    /// Objects: names.
    #[prost(string, repeated, tag = "4")]
    pub names: Vec<String>,
    /// Objects: namespaces, paired with `names`.
    #[prost(string, repeated, tag = "5")]
    pub nspaces: Vec<String>,
    /// Where the next page starts; unset when the PG is done.
    #[prost(bool, tag = "6")]
    pub more: bool,
    /// Next cursor: hash.
    #[prost(uint32, tag = "7")]
    pub next_hash: u32,
    /// Next cursor: store key.
    #[prost(bytes = "vec", tag = "8")]
    pub next_name: Vec<u8>,
    /// Objects: snapshots, paired with `names` (peers only: a client's
    /// listing shows heads alone; 0 is the head).
    #[prost(uint64, repeated, tag = "9")]
    pub snaps: Vec<u64>,
    /// Next cursor: snapshot.
    #[prost(uint64, tag = "10")]
    pub next_snap: u64,
}

/// Scrub: the primary asks a member for the summaries of its objects in
/// `[start, end]` (store keys, inclusive; `has_end` false: to the last).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PgScrub {
    /// Pool id.
    #[prost(uint64, tag = "1")]
    pub pool: u64,
    /// PG seed.
    #[prost(uint32, tag = "2")]
    pub pg_seed: u32,
    /// The sender's map epoch.
    #[prost(uint32, tag = "3")]
    pub epoch: u32,
    /// Read every object's data and checksum it (deep scrub).
    #[prost(bool, tag = "4")]
    pub deep: bool,
    /// First object: hash.
    #[prost(uint32, tag = "5")]
    pub start_hash: u32,
    /// First object: store key.
    #[prost(bytes = "vec", tag = "6")]
    pub start_name: Vec<u8>,
    /// Whether `start_*` is set (else from the first object).
    #[prost(bool, tag = "7")]
    pub has_start: bool,
    /// Last object: hash.
    #[prost(uint32, tag = "8")]
    pub end_hash: u32,
    /// Last object: store key.
    #[prost(bytes = "vec", tag = "9")]
    pub end_name: Vec<u8>,
    /// Whether `end_*` is set (else to the last object).
    #[prost(bool, tag = "10")]
    pub has_end: bool,
    /// First object: snapshot (0: the head).
    #[prost(uint64, tag = "11")]
    pub start_snap: u64,
    /// Last object: snapshot (0: the head).
    #[prost(uint64, tag = "12")]
    pub end_snap: u64,
}

/// One object as scrub sees it on one member.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ScrubObject {
    /// Store hash.
    #[prost(uint32, tag = "1")]
    pub hash: u32,
    /// Store key.
    #[prost(bytes = "vec", tag = "2")]
    pub name: Vec<u8>,
    /// Size.
    #[prost(uint64, tag = "3")]
    pub size: u64,
    /// crc32c of the data (deep scrub only).
    #[prost(uint32, tag = "4")]
    pub data_crc: u32,
    /// crc32c of the xattrs, omap header and omap.
    #[prost(uint32, tag = "5")]
    pub meta_crc: u32,
    /// Why the object could not be read (a checksum mismatch), if it could not.
    #[prost(string, tag = "6")]
    pub error: String,
    /// Snapshot (0: the head).
    #[prost(uint64, tag = "7")]
    pub snap: u64,
}

/// Erasure coding: the primary asks a member for its shard's chunks of
/// stripes `stripe_start..stripe_end` of one object; the answer is an
/// [`EcReadReply`] whose data part is those chunks end to end, each
/// checked against its checksum first.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EcRead {
    /// Pool id.
    #[prost(uint64, tag = "1")]
    pub pool: u64,
    /// PG seed.
    #[prost(uint32, tag = "2")]
    pub pg_seed: u32,
    /// The sender's map epoch.
    #[prost(uint32, tag = "3")]
    pub epoch: u32,
    /// The shard asked for (the member's position in the acting set).
    #[prost(uint32, tag = "4")]
    pub shard: u32,
    /// Object hash.
    #[prost(uint32, tag = "5")]
    pub hash: u32,
    /// Object name (store key).
    #[prost(bytes = "vec", tag = "6")]
    pub name: Vec<u8>,
    /// First stripe.
    #[prost(uint64, tag = "7")]
    pub stripe_start: u64,
    /// One past the last stripe (past the object's end: up to its end).
    #[prost(uint64, tag = "8")]
    pub stripe_end: u64,
    /// Send the object's xattrs too (recovery rebuilds whole shards).
    #[prost(bool, tag = "9")]
    pub want_attrs: bool,
    /// The object's snapshot (0: the head).
    #[prost(uint64, tag = "10")]
    pub snap: u64,
}

/// The answer to an [`EcRead`]: `code` 0 with the chunks as the data
/// part, `NotFound` when the shard holds no such object, `Io` when a
/// chunk fails its checksum (the primary decodes around it).
#[derive(Clone, PartialEq, prost::Message)]
pub struct EcReadReply {
    /// [`OsdErrorCode`].
    #[prost(uint32, tag = "1")]
    pub code: u32,
    /// Why, when not 0.
    #[prost(string, tag = "2")]
    pub message: String,
    /// The member's map epoch.
    #[prost(uint32, tag = "3")]
    pub epoch: u32,
    /// The object's logical size as the shard records it.
    #[prost(uint64, tag = "4")]
    pub object_size: u64,
    /// Xattr names (store names), when asked for.
    #[prost(string, repeated, tag = "5")]
    pub attrs: Vec<String>,
    /// Xattr values.
    #[prost(bytes = "vec", repeated, tag = "6")]
    pub attr_values: Vec<Vec<u8>>,
}

/// A member's answer to [`PgScrub`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct PgScrubMap {
    /// 0 or an [`OsdErrorCode`].
    #[prost(uint32, tag = "1")]
    pub code: u32,
    /// Human-readable error message.
    #[prost(string, tag = "2")]
    pub message: String,
    /// The objects in the range, in store order.
    #[prost(message, repeated, tag = "3")]
    pub objects: Vec<ScrubObject>,
}

/// An administrative command for one PG, sent to its primary
/// (`scrub`, `deep-scrub`, `repair`, `query`). The caller needs `osd`
/// capabilities `allow *`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PgCommand {
    /// Pool id.
    #[prost(uint64, tag = "1")]
    pub pool: u64,
    /// PG seed.
    #[prost(uint32, tag = "2")]
    pub pg_seed: u32,
    /// The sender's map epoch.
    #[prost(uint32, tag = "3")]
    pub epoch: u32,
    /// The command.
    #[prost(string, tag = "4")]
    pub command: String,
}

/// The answer to a [`PgCommand`]: JSON output or an error.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PgCommandReply {
    /// 0 or an [`OsdErrorCode`].
    #[prost(uint32, tag = "1")]
    pub code: u32,
    /// Human-readable error message.
    #[prost(string, tag = "2")]
    pub message: String,
    /// The OSD's map epoch.
    #[prost(uint32, tag = "3")]
    pub epoch: u32,
    /// JSON output.
    #[prost(string, tag = "4")]
    pub output: String,
}

/// Watch requests on one object, sent by a client to the primary of the
/// object's PG: register, renew or drop a watch, or list the watchers.
/// Watches live in the primary's memory; the client renews its watch every
/// few seconds and registers it again with a new primary, so a watch
/// follows the PG and a watcher that stops renewing is dropped after
/// `timeout_ms`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OsdWatch {
    /// Pool id.
    #[prost(uint64, tag = "1")]
    pub pool: u64,
    /// The PG (its seed) the client mapped the object to.
    #[prost(uint32, tag = "2")]
    pub pg_seed: u32,
    /// Object name.
    #[prost(string, tag = "3")]
    pub oid: String,
    /// Object namespace.
    #[prost(string, tag = "4")]
    pub nspace: String,
    /// The client's map epoch.
    #[prost(uint32, tag = "5")]
    pub epoch: u32,
    /// The client instance.
    #[prost(uint64, tag = "6")]
    pub client_inc: u64,
    /// The watch's id, chosen by the client.
    #[prost(uint64, tag = "7")]
    pub cookie: u64,
    /// An `OsdWatch::OP_*`.
    #[prost(uint32, tag = "8")]
    pub op: u32,
    /// Drop the watch when not renewed for this long (0: the OSD's default).
    #[prost(uint32, tag = "9")]
    pub timeout_ms: u32,
}

impl OsdWatch {
    /// Register (or renew) the watch on this connection.
    pub const OP_WATCH: u32 = 1;
    /// Drop the watch.
    pub const OP_UNWATCH: u32 = 2;
    /// Renew the watch: `NotFound` if the OSD does not have it (register again).
    pub const OP_PING: u32 = 3;
    /// List the object's watchers.
    pub const OP_LIST: u32 = 4;
}

/// One watcher of an object.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct WatcherInfo {
    /// The watching client's entity name.
    #[prost(string, tag = "1")]
    pub entity: String,
    /// Its client instance.
    #[prost(uint64, tag = "2")]
    pub client_inc: u64,
    /// The watch's cookie.
    #[prost(uint64, tag = "3")]
    pub cookie: u64,
    /// The client's address as the OSD sees it.
    #[prost(string, tag = "4")]
    pub addr: String,
}

/// The answer to an [`OsdWatch`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct OsdWatchReply {
    /// 0 or an [`OsdErrorCode`].
    #[prost(uint32, tag = "1")]
    pub code: u32,
    /// For people.
    #[prost(string, tag = "2")]
    pub message: String,
    /// The OSD's map epoch.
    #[prost(uint32, tag = "3")]
    pub epoch: u32,
    /// `OP_LIST`: the watchers.
    #[prost(message, repeated, tag = "4")]
    pub watchers: Vec<WatcherInfo>,
}

/// A notify: the primary sends the data part to every watcher of the
/// object and answers once each has acknowledged or `timeout_ms` passed.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OsdNotify {
    /// Pool id.
    #[prost(uint64, tag = "1")]
    pub pool: u64,
    /// The PG (its seed) the client mapped the object to.
    #[prost(uint32, tag = "2")]
    pub pg_seed: u32,
    /// Object name.
    #[prost(string, tag = "3")]
    pub oid: String,
    /// Object namespace.
    #[prost(string, tag = "4")]
    pub nspace: String,
    /// The client's map epoch.
    #[prost(uint32, tag = "5")]
    pub epoch: u32,
    /// How long to wait for the watchers' acknowledgements.
    #[prost(uint32, tag = "6")]
    pub timeout_ms: u32,
}

/// The answer to an [`OsdNotify`]: who acknowledged (their replies in the
/// data part, `reply_len` bytes each, in order) and who did not in time.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OsdNotifyReply {
    /// 0 or an [`OsdErrorCode`].
    #[prost(uint32, tag = "1")]
    pub code: u32,
    /// For people.
    #[prost(string, tag = "2")]
    pub message: String,
    /// The OSD's map epoch.
    #[prost(uint32, tag = "3")]
    pub epoch: u32,
    /// The watchers that acknowledged.
    #[prost(message, repeated, tag = "4")]
    pub acked: Vec<WatcherInfo>,
    /// Bytes of each acknowledgement's reply, in `acked` order.
    #[prost(uint64, repeated, tag = "5")]
    pub reply_len: Vec<u64>,
    /// The watchers that did not acknowledge in time.
    #[prost(message, repeated, tag = "6")]
    pub missed: Vec<WatcherInfo>,
}

/// A notify delivered by the primary to one watcher (on the connection
/// the watch was registered on); the data part is the notifier's payload.
/// The watcher answers with a [`WatchNotifyAck`] whose data part is its reply.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchNotify {
    /// Pool id.
    #[prost(uint64, tag = "1")]
    pub pool: u64,
    /// Object name.
    #[prost(string, tag = "2")]
    pub oid: String,
    /// Object namespace.
    #[prost(string, tag = "3")]
    pub nspace: String,
    /// The watch's cookie.
    #[prost(uint64, tag = "4")]
    pub cookie: u64,
    /// This notify's id at the OSD.
    #[prost(uint64, tag = "5")]
    pub notify_id: u64,
    /// The notifier's entity name.
    #[prost(string, tag = "6")]
    pub notifier: String,
}

/// A watcher's acknowledgement of a [`WatchNotify`]; its data part is the reply.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchNotifyAck {
    /// The watch's cookie.
    #[prost(uint64, tag = "1")]
    pub cookie: u64,
    /// The notify's id.
    #[prost(uint64, tag = "2")]
    pub notify_id: u64,
}

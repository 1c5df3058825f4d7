//! Op execution: turns a client's compound op on one object into the store
//! transaction that applies it and the per-sub-operation results.
//!
//! Sub-operations run in order against the object's state as the op leaves
//! it so far: existence, size and xattrs follow the op's own changes (a
//! `CmpXattr` after a `SetXattr` sees the new value; a `Read` or an omap read
//! after a `Remove` gets `NotFound`). Data and omap reads see the object as
//! it was stored before the op: the op's own data and omap changes are only
//! buffered into the transaction (a `Read` after a `Write` in the same op
//! returns the old bytes, clipped to the stored size; an object the op
//! removed and recreated, or created, reads as empty).
//!
//! A failing sub-operation fails the whole op with its index: the caller
//! discards the transaction, which is how a failed guard applies nothing.
//! Execution only reads the store.
//!
//! Departures from Ceph, kept so that every successful changing op leaves
//! the object existing (its last store op then records the object's
//! [`ObjectMeta`]) or ends in a store `Remove` (the PG logs a delete):
//! `Truncate` of an absent object creates it, `Zero` of an absent object is
//! `NotFound` (Ceph makes both no-ops), and `RmXattr` of an absent xattr is
//! `NoData` (`ENODATA`).

mod data;
mod omap;
mod xattr;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use bytes::Bytes;
use shoal_objectstore::types::{OBJECT_SIZE_MAX, TRANSACTION_DATA_BYTES_MAX};
use shoal_objectstore::{CollectionId, ObjectKey, ObjectStore, Transaction};
use shoal_proto::{CmpOp, OpCode, OsdErrorCode, OsdSubOp, OsdSubOpResult};

use crate::object::{
    CLONES_MAX, CloneInfo, META_XATTR, ObjectMeta, SNAPC_SNAPS_MAX, SNAPDIR, SNAPSET_XATTR, SnapSet,
};

/// Most sub-operations in one op.
pub const SUB_OPS_MAX: usize = 64;
/// Most omap keys named by one op (all its sub-operations together).
pub const OMAP_KEYS_MAX: usize = 10_000;
/// Omap entries a listing returns when the op asks for 0.
pub const OMAP_LIST_DEFAULT: u32 = 1000;
/// Most omap entries one listing returns.
pub const OMAP_LIST_MAX: u32 = 10_000;
/// Longest xattr name, bytes (without the stored prefix).
pub const XATTR_NAME_MAX: usize = 256;
/// Most payload bytes in one op: what one store transaction accepts.
pub const OP_DATA_BYTES_MAX: u64 = TRANSACTION_DATA_BYTES_MAX;

/// What [`execute`] needs.
pub struct ExecInput<'a> {
    /// The store (only read here).
    pub store: &'a dyn ObjectStore,
    /// The PG's collection.
    pub coll: CollectionId,
    /// The object.
    pub key: ObjectKey,
    /// The sub-operations, in order.
    pub ops: &'a [OsdSubOp],
    /// The request's data part: each sub-operation's `data_len` bytes, in order.
    pub data: Bytes,
    /// The version recorded if the op changes the object.
    pub new_version: u64,
    /// The modification time recorded if the op changes the object.
    pub mtime_ms: u64,
    /// The write's snapshot context (the first write after a snapshot
    /// clones the object for it) and the pool's removed snapshots.
    pub snaps: Snaps<'a>,
}

/// A write's snapshot context and a read's snapshot, with the pool's
/// removed snapshots.
#[derive(Debug, Clone, Copy, Default)]
pub struct Snaps<'a> {
    /// The newest snapshot id the writer knows (0: none).
    pub seq: u64,
    /// The live snapshots, newest first.
    pub snaps: &'a [u64],
    /// Read at this snapshot (0: the head).
    pub read: u64,
    /// The pool's removed snapshots, as `(first, count)` runs.
    pub removed: &'a [(u64, u64)],
}

impl Snaps<'_> {
    fn removed(&self, snap: u64) -> bool {
        self.removed
            .iter()
            .any(|(first, n)| snap >= *first && snap - first < *n)
    }
}

impl std::fmt::Debug for ExecInput<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ExecInput({} ops on {})", self.ops.len(), self.key)
    }
}

/// What an op does.
#[derive(Debug)]
pub struct ExecOutcome {
    /// The store changes: empty for a read-only op; for a changing op that
    /// leaves the object existing it ends by recording [`ObjectMeta`] in
    /// [`META_XATTR`]; for one that leaves it absent it ends with `Remove`.
    pub txn: Transaction,
    /// Whether the op has a changing sub-operation ([`OpCode::is_write`]).
    pub mutates: bool,
    /// One result per sub-operation.
    pub results: Vec<OsdSubOpResult>,
    /// Reply data chunks: concatenated, the reply's data part; each
    /// result's `data_len` is its share, in order.
    pub data: Vec<Bytes>,
    /// The crc32c of `data` concatenated, when the store gave it with its
    /// read (one data chunk, read from BlockStore): the reply's frame
    /// checksum without another pass over the data.
    pub data_crc: Option<u32>,
    /// The object's version after the op: the new version if the op
    /// changes an object that still exists, else the stored one (0 if absent).
    pub version: u64,
    /// Change of the PG's statistics.
    pub delta: StatDelta,
}

/// Change in a PG's object count and logical bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatDelta {
    /// Objects: +1 when an absent object ends existing, -1 the other way.
    pub objects: i64,
    /// Logical bytes: size after the op minus size before (absent: 0).
    pub bytes: i64,
}

/// Why an op failed, and which sub-operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("op {failed_op}: {message}")]
pub struct ExecError {
    /// Wire code.
    pub code: OsdErrorCode,
    /// Index of the failing sub-operation.
    pub failed_op: u32,
    /// For people.
    pub message: String,
}

fn err(code: OsdErrorCode, i: usize, message: impl Into<String>) -> ExecError {
    ExecError {
        code,
        failed_op: u32::try_from(i).unwrap_or(u32::MAX),
        message: message.into(),
    }
}

/// Whether any sub-operation changes the object.
pub fn is_mutating(ops: &[OsdSubOp]) -> bool {
    ops.iter()
        .any(|o| OpCode::from_u32(o.code).is_some_and(OpCode::is_write))
}

/// Checks an op's shape before any store access: at least one and at most
/// [`SUB_OPS_MAX`] sub-operations, known op codes and comparisons, xattr
/// names of 1 to [`XATTR_NAME_MAX`] bytes, omap keys paired with values,
/// at most [`OMAP_KEYS_MAX`] omap keys and [`OP_DATA_BYTES_MAX`] payload
/// bytes, and the sub-operations' `data_len` adding up to `data_len`.
pub fn validate(ops: &[OsdSubOp], data_len: usize) -> Result<(), ExecError> {
    use OsdErrorCode::{InvalidArgument as Inval, TooLarge};
    if ops.is_empty() {
        return Err(err(Inval, 0, "an op needs at least one sub-operation"));
    }
    if ops.len() > SUB_OPS_MAX {
        let m = format!("{} sub-operations, at most {SUB_OPS_MAX}", ops.len());
        return Err(err(TooLarge, SUB_OPS_MAX, m));
    }
    let mut total: u64 = 0;
    let mut keys: usize = 0;
    for (i, o) in ops.iter().enumerate() {
        let Some(code) = OpCode::from_u32(o.code) else {
            return Err(err(Inval, i, format!("unknown op code {}", o.code)));
        };
        total = total
            .checked_add(o.data_len)
            .ok_or_else(|| err(Inval, i, "data lengths overflow"))?;
        if total > OP_DATA_BYTES_MAX {
            let m = format!("more than {OP_DATA_BYTES_MAX} payload bytes");
            return Err(err(TooLarge, i, m));
        }
        keys = keys.saturating_add(o.keys.len());
        if keys > OMAP_KEYS_MAX {
            return Err(err(
                TooLarge,
                i,
                format!("more than {OMAP_KEYS_MAX} omap keys"),
            ));
        }
        if code == OpCode::OmapSetVals && o.keys.len() != o.values.len() {
            return Err(err(Inval, i, "omap keys and values differ in number"));
        }
        let needs_name = matches!(
            code,
            OpCode::GetXattr | OpCode::SetXattr | OpCode::RmXattr | OpCode::CmpXattr
        );
        if needs_name && (o.name.is_empty() || o.name.len() > XATTR_NAME_MAX) {
            let m = format!("xattr names are 1 to {XATTR_NAME_MAX} bytes");
            return Err(err(Inval, i, m));
        }
        if code == OpCode::CmpXattr && CmpOp::from_u32(o.cmp).is_none() {
            return Err(err(Inval, i, format!("unknown comparison {}", o.cmp)));
        }
    }
    if total != data_len as u64 {
        let m = format!("sub-operations claim {total} data bytes, the request has {data_len}");
        return Err(err(Inval, 0, m));
    }
    Ok(())
}

/// Checks a snapshot context: at most [`SNAPC_SNAPS_MAX`] snapshots,
/// newest first without repeats, none newer than `seq`; a read at a
/// snapshot changes nothing.
pub fn validate_snaps(ops: &[OsdSubOp], s: &Snaps<'_>) -> Result<(), ExecError> {
    use OsdErrorCode::InvalidArgument as Inval;
    if s.snaps.len() > SNAPC_SNAPS_MAX {
        let m = format!("a snapshot context names at most {SNAPC_SNAPS_MAX} snapshots");
        return Err(err(Inval, 0, m));
    }
    if s.snaps.first().is_some_and(|n| *n > s.seq) || s.snaps.windows(2).any(|w| w[0] <= w[1]) {
        let m = "a snapshot context lists its snapshots newest first, none past its seq";
        return Err(err(Inval, 0, m));
    }
    if s.read != 0 && is_mutating(ops) {
        return Err(err(
            Inval,
            0,
            "a snapshot is read-only: write to the object itself",
        ));
    }
    Ok(())
}

/// The wire code of a store error: missing object or collection →
/// `NotFound`; no space → `NoSpace`; a refused argument → `InvalidArgument`;
/// a failed medium (checksum, I/O, metadata, corruption, poisoned store) →
/// `Io`; anything else → `Internal`.
pub fn store_error_code(e: &shoal_objectstore::Error) -> OsdErrorCode {
    use shoal_objectstore::Error as E;
    match e {
        E::ObjectNotFound(..) | E::CollectionNotFound(_) => OsdErrorCode::NotFound,
        E::NoSpace { .. } => OsdErrorCode::NoSpace,
        E::InvalidArgument(_) => OsdErrorCode::InvalidArgument,
        E::Checksum { .. } | E::Io { .. } | E::Meta { .. } | E::Corrupt(_) | E::Poisoned(_) => {
            OsdErrorCode::Io
        }
        _ => OsdErrorCode::Internal,
    }
}

/// The object as the op has left it so far.
#[derive(Debug)]
struct State {
    /// The object existed before the op.
    existed: bool,
    /// Its stored size before the op (0 if absent).
    initial_size: u64,
    /// It exists now.
    exists: bool,
    /// Its size now.
    size: u64,
    /// Removed by this op: what was stored (data, xattrs, omap) is gone.
    removed: bool,
    /// Stored xattr names changed by this op (`None`: removed).
    xattrs: BTreeMap<String, Option<Bytes>>,
    /// The stored metadata (default once removed).
    meta: ObjectMeta,
    /// The object's snapshots (from the head, or its snapdir).
    snapset: SnapSet,
    /// The snapset changed (a clone, a newer seq).
    snapset_dirty: bool,
    /// The head was absent and a snapdir held the snapset.
    snapdir_existed: bool,
    /// A clone was made (counted as an object of its size).
    cloned: Option<u64>,
}

impl State {
    fn load(input: &ExecInput<'_>) -> Result<State, ExecError> {
        let (store, c, k) = (input.store, &input.coll, &input.key);
        let fail = |e: shoal_objectstore::Error| err(store_error_code(&e), 0, e.to_string());
        let existed = store.exists(c, k).map_err(fail)?;
        let decode_snapset = |k: &ObjectKey| -> Result<Option<SnapSet>, ExecError> {
            match store.getxattr(c, k, SNAPSET_XATTR).map_err(fail)? {
                None => Ok(None),
                Some(b) => SnapSet::decode(&b).map(Some).ok_or_else(|| {
                    err(
                        OsdErrorCode::Io,
                        0,
                        format!("the snapset of {k} is damaged"),
                    )
                }),
            }
        };
        let snapdir = k.clone_for(SNAPDIR);
        let (snapset, snapdir_existed) = if existed {
            (decode_snapset(k)?.unwrap_or_default(), false)
        } else if store.exists(c, &snapdir).map_err(fail)? {
            (decode_snapset(&snapdir)?.unwrap_or_default(), true)
        } else {
            (SnapSet::default(), false)
        };
        let (size, meta) = if existed {
            let size = store.stat(c, k).map_err(fail)?.size;
            let meta = store
                .getxattr(c, k, META_XATTR)
                .map_err(fail)?
                .and_then(|b| ObjectMeta::decode(&b))
                .unwrap_or_default();
            (size, meta)
        } else {
            (0, ObjectMeta::default())
        };
        Ok(State {
            existed,
            initial_size: size,
            exists: existed,
            size,
            removed: false,
            xattrs: BTreeMap::new(),
            meta,
            snapset,
            snapset_dirty: false,
            snapdir_existed,
            cloned: None,
        })
    }
}

/// One execution in progress.
struct Exec<'a> {
    input: &'a ExecInput<'a>,
    st: State,
    txn: Transaction,
    results: Vec<OsdSubOpResult>,
    out: Vec<Bytes>,
    /// A chunk of `out` whose crc32c the store gave: (its index, crc).
    out_crc: Option<(usize, u32)>,
}

/// The store key holding `input.key` as it was at snapshot
/// `input.snaps.read`: the head, or the clone standing for it (a key
/// nothing has when the object did not exist then).
pub fn at_snapshot(input: &ExecInput<'_>) -> Result<ObjectKey, ExecError> {
    let head = State::load(input)?;
    Ok(match head.snapset.resolve(input.snaps.read) {
        Some(ObjectKey::HEAD) => input.key.clone(),
        Some(id) => input.key.clone_for(id),
        None => input.key.clone_for(input.snaps.read),
    })
}

/// Runs `input.ops` against the object; see the module doc.
pub fn execute(input: ExecInput<'_>) -> Result<ExecOutcome, ExecError> {
    validate(input.ops, input.data.len())?;
    validate_snaps(input.ops, &input.snaps)?;
    if input.snaps.read != 0 {
        let key = at_snapshot(&input)?;
        let at = ExecInput {
            key,
            snaps: Snaps::default(),
            ..input
        };
        return execute(at);
    }
    let mut x = Exec {
        input: &input,
        st: State::load(&input)?,
        txn: Transaction::new(),
        results: Vec::with_capacity(input.ops.len()),
        out: Vec::new(),
        out_crc: None,
    };
    if is_mutating(input.ops) {
        x.clone_for_snapshots()?;
    }
    let mut at = 0usize;
    for (i, op) in input.ops.iter().enumerate() {
        // validate() checked that the lengths add up to the data part; a
        // payload is sliced for every sub-operation, used or not, so that the
        // next one starts at its own bytes.
        let end = usize::try_from(op.data_len)
            .ok()
            .and_then(|n| at.checked_add(n))
            .filter(|end| *end <= input.data.len())
            .ok_or_else(|| err(OsdErrorCode::InvalidArgument, i, "data part too short"))?;
        let payload = input.data.slice(at..end);
        at = end;
        x.step(i, op, payload)?;
    }
    Ok(x.finish())
}

impl Exec<'_> {
    fn step(&mut self, i: usize, op: &OsdSubOp, payload: Bytes) -> Result<(), ExecError> {
        let Some(code) = OpCode::from_u32(op.code) else {
            return Err(err(OsdErrorCode::InvalidArgument, i, "unknown op code"));
        };
        match code {
            OpCode::Create => self.create_op(i, op),
            OpCode::Write | OpCode::WriteFull | OpCode::Append => self.write(i, code, op, payload),
            OpCode::Truncate => self.truncate(i, op),
            OpCode::Zero => self.zero(i, op),
            OpCode::Remove => self.remove(i),
            OpCode::Read => self.read(i, op),
            OpCode::SparseRead => self.sparse_read(i, op),
            OpCode::Stat => self.stat(i),
            OpCode::AssertExists => self.need_exists(i).map(|()| self.ok()),
            OpCode::AssertVersion => self.assert_version(i, op),
            OpCode::GetXattr => self.get_xattr(i, op),
            OpCode::GetXattrs => self.get_xattrs(i),
            OpCode::SetXattr => self.set_xattr(op, payload),
            OpCode::RmXattr => self.rm_xattr(i, op),
            OpCode::CmpXattr => self.cmp_xattr(i, op, &payload),
            OpCode::OmapGetVals => self.omap_list(i, op, true),
            OpCode::OmapGetKeys => self.omap_list(i, op, false),
            OpCode::OmapGetValsByKeys => self.omap_get_by_keys(i, op),
            OpCode::OmapGetHeader => self.omap_get_header(i),
            OpCode::OmapSetVals => self.omap_set(op),
            OpCode::OmapRmKeys => self.omap_rm(i, op),
            OpCode::OmapClear => self.omap_clear(i),
            OpCode::OmapSetHeader => self.omap_set_header(payload),
            _ => Err(err(OsdErrorCode::InvalidArgument, i, "unsupported op code")),
        }
    }

    fn finish(mut self) -> ExecOutcome {
        let input = self.input;
        let mutates = is_mutating(input.ops);
        let st = &self.st;
        let version = match (st.exists, mutates) {
            (false, _) => 0,
            (true, true) => input.new_version,
            (true, false) => st.meta.version,
        };
        if mutates {
            self.persist_snapset();
        }
        let st = &self.st;
        if mutates && st.exists {
            let meta = ObjectMeta {
                version: input.new_version,
                mtime_ms: input.mtime_ms,
            };
            let attrs = BTreeMap::from([(META_XATTR.to_string(), meta.encode())]);
            self.txn.set_xattrs(input.coll, input.key.clone(), attrs);
        }
        let size_now = if st.exists { st.size } else { 0 };
        let size_before = if st.existed { st.initial_size } else { 0 };
        // A clone counts as an object of the PG, as in Ceph's statistics.
        let clone = st.cloned.map_or((0, 0), |size| (1, signed(size)));
        let delta = StatDelta {
            objects: i64::from(st.exists) - i64::from(st.existed) + clone.0,
            bytes: signed(size_now)
                .saturating_sub(signed(size_before))
                .saturating_add(clone.1),
        };
        ExecOutcome {
            txn: self.txn,
            mutates,
            results: self.results,
            data_crc: known_crc(&self.out, self.out_crc),
            data: self.out,
            version,
            delta,
        }
    }

    /// The first write after a snapshot keeps the object as it was: a
    /// clone for the snapshots since the last write's context that the pool
    /// has not removed. The context's seq becomes the object's.
    fn clone_for_snapshots(&mut self) -> Result<(), ExecError> {
        let s = self.input.snaps;
        if s.seq <= self.st.snapset.seq {
            return Ok(());
        }
        let covered: Vec<u64> = s
            .snaps
            .iter()
            .copied()
            .filter(|n| *n > self.st.snapset.seq && !s.removed(*n))
            .collect();
        if self.st.existed
            && let Some(&id) = covered.first()
        {
            if self.st.snapset.clones.len() >= CLONES_MAX {
                let m = format!("the object has {CLONES_MAX} clones: remove snapshots first");
                return Err(err(OsdErrorCode::TooLarge, 0, m));
            }
            let clone = self.input.key.clone_for(id);
            self.txn.clone_object(self.c(), self.k(), clone.clone());
            self.txn.remove_xattr(self.c(), clone, SNAPSET_XATTR);
            self.st.snapset.clones.push(CloneInfo {
                id,
                snaps: covered,
                size: self.st.initial_size,
            });
            self.st.cloned = Some(self.st.initial_size);
        }
        self.st.snapset.seq = s.seq;
        self.st.snapset_dirty = true;
        Ok(())
    }

    /// Keeps the snapset with the object: on the head while it exists,
    /// else on its snapdir while clones remain. Runs before the op's last
    /// store change (the head's metadata, or its removal).
    fn persist_snapset(&mut self) {
        let st = &self.st;
        let (c, head) = (self.input.coll, self.input.key.clone());
        let snapdir = head.clone_for(SNAPDIR);
        let keep = st.snapset.seq > 0 || !st.snapset.clones.is_empty();
        if st.exists {
            if keep && (st.snapset_dirty || st.snapdir_existed || st.removed) {
                self.txn
                    .set_xattr(c, head, SNAPSET_XATTR, st.snapset.encode());
            }
            if st.snapdir_existed {
                self.txn.remove(c, snapdir);
            }
            return;
        }
        // The head is gone (or never was): its last store op, if any, is
        // its removal, which must stay last.
        let mut tail = Vec::new();
        if !st.snapset.clones.is_empty() && (st.removed || st.snapset_dirty) {
            if !st.snapdir_existed {
                tail.push(shoal_objectstore::Op::Touch(c, snapdir.clone()));
            }
            tail.push(shoal_objectstore::Op::SetXattrs(
                c,
                snapdir,
                BTreeMap::from([(SNAPSET_XATTR.to_string(), st.snapset.encode())]),
            ));
        } else if st.snapset.clones.is_empty() && st.snapdir_existed {
            tail.push(shoal_objectstore::Op::Remove(c, snapdir));
        }
        if tail.is_empty() {
            return;
        }
        let ops = self.txn.ops().to_vec();
        let mut t = Transaction::new();
        let last_is_remove = ops.last().is_some_and(
            |o| matches!(o, shoal_objectstore::Op::Remove(_, oid) if *oid == self.input.key),
        );
        let (body, last) = match last_is_remove {
            true => (&ops[..ops.len() - 1], ops.last()),
            false => (&ops[..], None),
        };
        for o in body {
            t.push(o.clone());
        }
        for o in tail {
            t.push(o);
        }
        if let Some(o) = last {
            t.push(o.clone());
        }
        self.txn = t;
    }

    fn store_err(&self, i: usize, e: shoal_objectstore::Error) -> ExecError {
        err(store_error_code(&e), i, e.to_string())
    }

    fn need_exists(&self, i: usize) -> Result<(), ExecError> {
        if self.st.exists {
            Ok(())
        } else {
            Err(err(OsdErrorCode::NotFound, i, "no such object"))
        }
    }

    /// What was stored before the op is still there to read.
    fn stored(&self) -> bool {
        self.st.existed && !self.st.removed
    }

    fn c(&self) -> CollectionId {
        self.input.coll
    }

    fn k(&self) -> ObjectKey {
        self.input.key.clone()
    }

    /// Makes the object exist (the store creates it on `Touch`).
    fn create(&mut self) {
        if !self.st.exists {
            self.st.exists = true;
            self.st.size = 0;
            self.txn.touch(self.c(), self.k());
        }
    }

    fn ok(&mut self) {
        self.results.push(OsdSubOpResult::default());
    }

    fn ok_data(&mut self, b: Bytes) {
        self.ok_data_with_crc(b, None);
    }

    /// [`Exec::ok_data`] with the chunk's crc32c when the store gave it.
    fn ok_data_with_crc(&mut self, b: Bytes, crc: Option<u32>) {
        if let Some(c) = crc {
            self.out_crc = Some((self.out.len(), c));
        }
        self.results.push(OsdSubOpResult {
            data_len: b.len() as u64,
            ..OsdSubOpResult::default()
        });
        self.out.push(b);
    }
}

/// The crc32c of `out` concatenated when it needs no pass over the data:
/// no data at all, or one chunk with data whose crc the store gave
/// (folding several would cost more than the pass it saves).
fn known_crc(out: &[Bytes], given: Option<(usize, u32)>) -> Option<u32> {
    let mut with_data = out.iter().enumerate().filter(|(_, b)| !b.is_empty());
    match (with_data.next(), with_data.next(), given) {
        (None, _, _) => Some(0),
        (Some((i, _)), None, Some((j, c))) if i == j => Some(c),
        _ => None,
    }
}

/// The end of an extent: overflow is `InvalidArgument`, past
/// [`OBJECT_SIZE_MAX`] is `TooLarge`.
fn extent_end(i: usize, offset: u64, len: u64) -> Result<u64, ExecError> {
    let end = offset.checked_add(len).ok_or_else(|| {
        err(
            OsdErrorCode::InvalidArgument,
            i,
            "offset + length overflows",
        )
    })?;
    if end > OBJECT_SIZE_MAX {
        let m = format!("objects are at most {OBJECT_SIZE_MAX} bytes");
        return Err(err(OsdErrorCode::TooLarge, i, m));
    }
    Ok(end)
}

/// Sizes are at most [`OBJECT_SIZE_MAX`], far below `i64::MAX`.
fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

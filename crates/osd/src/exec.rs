//! Op execution: turns a client's compound op on one object into the store
//! transaction that applies it and the per-sub-operation results.
//!
//! Sub-operations run in order against the object's state as the op leaves
//! it so far: existence, size and xattrs follow the op's own changes (a
//! `CmpXattr` after a `SetXattr` sees the new value; a `Read` after a
//! `Remove` finds nothing), while data and omap reads see the object as it
//! was before the op. A failing sub-operation fails the whole op: the
//! caller applies nothing, which is how a failed guard applies nothing.

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;
use shoal_objectstore::types::{OBJECT_SIZE_MAX, READ_BYTES_MAX};
use shoal_objectstore::{CollectionId, ObjectKey, ObjectStore, Transaction};
use shoal_proto::{CmpOp, OpCode, OsdErrorCode, OsdSubOp, OsdSubOpResult};

use crate::object::{META_XATTR, ObjectMeta, USER_XATTR_PREFIX};

/// Most sub-operations in one op.
pub const SUB_OPS_MAX: usize = 64;
/// Most omap keys named by one op.
pub const OMAP_KEYS_MAX: usize = 10_000;
/// Omap entries a listing returns when the op asks for 0.
pub const OMAP_LIST_DEFAULT: u32 = 1000;
/// Most omap entries one listing returns.
pub const OMAP_LIST_MAX: u32 = 10_000;
/// Longest xattr name, bytes.
pub const XATTR_NAME_MAX: usize = 256;

/// What [`execute`] needs.
pub struct ExecInput<'a> {
    /// The store (read only here).
    pub store: &'a dyn ObjectStore,
    /// The PG's collection.
    pub coll: CollectionId,
    /// The object.
    pub key: ObjectKey,
    /// The sub-operations.
    pub ops: &'a [OsdSubOp],
    /// The request's data part.
    pub data: Bytes,
    /// The version recorded if the op changes the object.
    pub new_version: u64,
    /// The modification time recorded if the op changes the object.
    pub mtime_ms: u64,
}

impl std::fmt::Debug for ExecInput<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ExecInput({} ops on {})", self.ops.len(), self.key)
    }
}

/// What an op does.
#[derive(Debug)]
pub struct ExecOutcome {
    /// The store changes (empty for a read-only op).
    pub txn: Transaction,
    /// Whether the op has a changing sub-operation.
    pub mutates: bool,
    /// One result per sub-operation.
    pub results: Vec<OsdSubOpResult>,
    /// Reply data: concatenated, the reply's data part.
    pub data: Vec<Bytes>,
    /// The object's version after the op (0 if absent).
    pub version: u64,
    /// Change of the PG's statistics.
    pub delta: StatDelta,
}

/// Change in a PG's object count and logical bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatDelta {
    /// Objects.
    pub objects: i64,
    /// Bytes.
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

/// Checks an op's shape before any store access.
pub fn validate(ops: &[OsdSubOp], data_len: usize) -> Result<(), ExecError> {
    use OsdErrorCode::InvalidArgument as Inval;
    if ops.is_empty() {
        return Err(err(Inval, 0, "an op needs at least one sub-operation"));
    }
    if ops.len() > SUB_OPS_MAX {
        return Err(err(
            Inval,
            SUB_OPS_MAX,
            format!("more than {SUB_OPS_MAX} sub-operations"),
        ));
    }
    let mut total: u64 = 0;
    for (i, o) in ops.iter().enumerate() {
        let Some(code) = OpCode::from_u32(o.code) else {
            return Err(err(Inval, i, format!("unknown op code {}", o.code)));
        };
        total = total
            .checked_add(o.data_len)
            .ok_or_else(|| err(Inval, i, "data lengths overflow"))?;
        if o.keys.len() > OMAP_KEYS_MAX {
            return Err(err(
                Inval,
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
            return Err(err(Inval, i, "xattr names are 1 to 256 bytes"));
        }
        if code == OpCode::CmpXattr && CmpOp::from_u32(o.cmp).is_none() {
            return Err(err(Inval, i, format!("unknown comparison {}", o.cmp)));
        }
    }
    if total != data_len as u64 {
        return Err(err(
            Inval,
            0,
            format!("sub-operations claim {total} data bytes, the request has {data_len}"),
        ));
    }
    Ok(())
}

/// The wire code of a store error.
pub fn store_error_code(e: &shoal_objectstore::Error) -> OsdErrorCode {
    use shoal_objectstore::Error as E;
    match e {
        E::ObjectNotFound(..) | E::CollectionNotFound(_) => OsdErrorCode::NotFound,
        E::NoSpace { .. } => OsdErrorCode::NoSpace,
        E::InvalidArgument(_) => OsdErrorCode::InvalidArgument,
        _ => OsdErrorCode::Io,
    }
}

/// The object as the op has left it so far.
struct State {
    existed: bool,
    initial_size: u64,
    exists: bool,
    size: u64,
    /// Removed by this op: stored data, xattrs and omap are gone.
    removed: bool,
    /// Xattr values changed by this op (`None`: removed).
    xattrs: BTreeMap<String, Option<Bytes>>,
    meta: ObjectMeta,
}

struct Exec<'a> {
    input: &'a ExecInput<'a>,
    st: State,
    txn: Transaction,
    results: Vec<OsdSubOpResult>,
    out: Vec<Bytes>,
    at: usize,
}

/// Runs `input.ops` against the object; see the module doc.
pub fn execute(input: ExecInput<'_>) -> Result<ExecOutcome, ExecError> {
    validate(input.ops, input.data.len())?;
    let store = input.store;
    let (c, k) = (&input.coll, &input.key);
    let existed = store
        .exists(c, k)
        .map_err(|e| err(store_error_code(&e), 0, e.to_string()))?;
    let (size, meta) = if existed {
        let size = store
            .stat(c, k)
            .map_err(|e| err(store_error_code(&e), 0, e.to_string()))?
            .size;
        let meta = store
            .getxattr(c, k, META_XATTR)
            .map_err(|e| err(store_error_code(&e), 0, e.to_string()))?
            .and_then(|b| ObjectMeta::decode(&b))
            .unwrap_or_default();
        (size, meta)
    } else {
        (0, ObjectMeta::default())
    };
    let mut x = Exec {
        input: &input,
        st: State {
            existed,
            initial_size: size,
            exists: existed,
            size,
            removed: false,
            xattrs: BTreeMap::new(),
            meta,
        },
        txn: Transaction::new(),
        results: Vec::with_capacity(input.ops.len()),
        out: Vec::new(),
        at: 0,
    };
    for (i, op) in input.ops.iter().enumerate() {
        x.step(i, op)?;
    }
    let mutates = is_mutating(input.ops);
    let st = &x.st;
    let version = if mutates && st.exists {
        input.new_version
    } else if st.exists {
        st.meta.version
    } else {
        0
    };
    if mutates && st.exists {
        let meta = ObjectMeta {
            version: input.new_version,
            mtime_ms: input.mtime_ms,
        };
        x.txn.set_xattrs(
            input.coll,
            input.key.clone(),
            BTreeMap::from([(META_XATTR.to_string(), meta.encode())]),
        );
    }
    let delta = StatDelta {
        objects: i64::from(st.exists) - i64::from(st.existed),
        bytes: (if st.exists { st.size } else { 0 }) as i64
            - (if st.existed { st.initial_size } else { 0 }) as i64,
    };
    Ok(ExecOutcome {
        txn: x.txn,
        mutates,
        results: x.results,
        data: x.out,
        version,
        delta,
    })
}

impl Exec<'_> {
    fn payload(&mut self, op: &OsdSubOp) -> Bytes {
        // validate() checked that the lengths add up to the data part.
        let n = usize::try_from(op.data_len).unwrap_or(0);
        let end = (self.at + n).min(self.input.data.len());
        let b = self.input.data.slice(self.at..end);
        self.at = end;
        b
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

    /// Stored data and omap are readable (the object existed and was not removed).
    fn stored(&self) -> bool {
        self.st.existed && !self.st.removed
    }

    fn c(&self) -> CollectionId {
        self.input.coll
    }

    fn k(&self) -> ObjectKey {
        self.input.key.clone()
    }

    fn ok(&mut self) {
        self.results.push(OsdSubOpResult::default());
    }

    fn ok_data(&mut self, b: Bytes) {
        self.results.push(OsdSubOpResult {
            data_len: b.len() as u64,
            ..OsdSubOpResult::default()
        });
        self.out.push(b);
    }

    fn end_of(&self, i: usize, off: u64, len: u64) -> Result<u64, ExecError> {
        let end = off.checked_add(len).ok_or_else(|| {
            err(
                OsdErrorCode::InvalidArgument,
                i,
                "offset + length overflows",
            )
        })?;
        if end > OBJECT_SIZE_MAX {
            return Err(err(
                OsdErrorCode::TooLarge,
                i,
                format!("objects are at most {OBJECT_SIZE_MAX} bytes"),
            ));
        }
        Ok(end)
    }

    fn create(&mut self) {
        if !self.st.exists {
            self.st.exists = true;
            self.st.size = 0;
            self.txn.touch(self.c(), self.k());
        }
    }

    fn xattr(&self, i: usize, name: &str) -> Result<Option<Bytes>, ExecError> {
        let stored = format!("{USER_XATTR_PREFIX}{name}");
        if let Some(v) = self.st.xattrs.get(&stored) {
            return Ok(v.clone());
        }
        if !self.stored() {
            return Ok(None);
        }
        self.input
            .store
            .getxattr(&self.input.coll, &self.input.key, &stored)
            .map_err(|e| self.store_err(i, e))
    }

    fn step(&mut self, i: usize, op: &OsdSubOp) -> Result<(), ExecError> {
        let Some(code) = OpCode::from_u32(op.code) else {
            return Err(err(OsdErrorCode::InvalidArgument, i, "unknown op code"));
        };
        match code {
            OpCode::Create => {
                if self.st.exists && op.flags & OsdSubOp::CREATE_EXCLUSIVE != 0 {
                    return Err(err(OsdErrorCode::Exists, i, "the object exists"));
                }
                self.create();
                self.ok();
            }
            OpCode::Write | OpCode::WriteFull | OpCode::Append => {
                let d = self.payload(op);
                let off = match code {
                    OpCode::Write => op.offset,
                    OpCode::Append => self.st.size,
                    _ => 0,
                };
                let end = self.end_of(i, off, d.len() as u64)?;
                self.create();
                if code == OpCode::WriteFull {
                    self.txn.truncate(self.c(), self.k(), 0);
                    self.st.size = 0;
                }
                if !d.is_empty() {
                    self.txn.write(self.c(), self.k(), off, d);
                }
                self.st.size = self.st.size.max(end);
                self.ok();
            }
            OpCode::Truncate => {
                self.end_of(i, op.offset, 0)?;
                self.create();
                self.txn.truncate(self.c(), self.k(), op.offset);
                self.st.size = op.offset;
                self.ok();
            }
            OpCode::Zero => {
                self.need_exists(i)?;
                let end = self.end_of(i, op.offset, op.length)?.min(self.st.size);
                if end > op.offset {
                    self.txn
                        .zero(self.c(), self.k(), op.offset, end - op.offset);
                }
                self.ok();
            }
            OpCode::Remove => {
                self.need_exists(i)?;
                self.txn.remove(self.c(), self.k());
                self.st.exists = false;
                self.st.removed = true;
                self.st.size = 0;
                self.st.xattrs.clear();
                self.ok();
            }
            OpCode::Read => self.read(i, op)?,
            OpCode::Stat => {
                self.need_exists(i)?;
                self.results.push(OsdSubOpResult {
                    size: self.st.size,
                    mtime_ms: self.st.meta.mtime_ms,
                    version: self.st.meta.version,
                    ..OsdSubOpResult::default()
                });
            }
            OpCode::AssertExists => {
                self.need_exists(i)?;
                self.ok();
            }
            OpCode::AssertVersion => {
                self.need_exists(i)?;
                if self.st.meta.version != op.version {
                    return Err(err(
                        OsdErrorCode::VersionMismatch,
                        i,
                        format!("version is {}, not {}", self.st.meta.version, op.version),
                    ));
                }
                self.ok();
            }
            OpCode::GetXattr
            | OpCode::GetXattrs
            | OpCode::SetXattr
            | OpCode::RmXattr
            | OpCode::CmpXattr => self.xattr_op(i, code, op)?,
            _ => self.omap_op(i, code, op)?,
        }
        Ok(())
    }

    fn read(&mut self, i: usize, op: &OsdSubOp) -> Result<(), ExecError> {
        self.need_exists(i)?;
        if !self.stored() {
            // Created by this op: nothing stored to read yet.
            self.ok_data(Bytes::new());
            return Ok(());
        }
        let size = self.st.initial_size;
        let off = op.offset.min(size);
        let len = if op.length == 0 {
            size - off
        } else {
            op.length.min(size - off)
        };
        if len > READ_BYTES_MAX {
            return Err(err(
                OsdErrorCode::TooLarge,
                i,
                format!("reads are at most {READ_BYTES_MAX} bytes; read in ranges"),
            ));
        }
        let b = self
            .input
            .store
            .read(&self.input.coll, &self.input.key, off, len)
            .map_err(|e| self.store_err(i, e))?;
        self.ok_data(b);
        Ok(())
    }

    fn xattr_op(&mut self, i: usize, code: OpCode, op: &OsdSubOp) -> Result<(), ExecError> {
        let stored = format!("{USER_XATTR_PREFIX}{}", op.name);
        match code {
            OpCode::GetXattr => {
                self.need_exists(i)?;
                let v = self
                    .xattr(i, &op.name)?
                    .ok_or_else(|| err(OsdErrorCode::NoData, i, format!("no xattr {}", op.name)))?;
                self.ok_data(v);
            }
            OpCode::GetXattrs => {
                self.need_exists(i)?;
                let mut all: BTreeMap<String, Bytes> = BTreeMap::new();
                if self.stored() {
                    let stored_all = self
                        .input
                        .store
                        .getxattrs(&self.input.coll, &self.input.key)
                        .map_err(|e| self.store_err(i, e))?;
                    all.extend(stored_all);
                }
                for (k, v) in &self.st.xattrs {
                    match v {
                        Some(v) => all.insert(k.clone(), v.clone()),
                        None => all.remove(k),
                    };
                }
                let mut r = OsdSubOpResult::default();
                for (k, v) in all {
                    if let Some(name) = k.strip_prefix(USER_XATTR_PREFIX) {
                        r.names.push(name.to_string());
                        r.values.push(v.to_vec());
                    }
                }
                self.results.push(r);
            }
            OpCode::SetXattr => {
                let d = self.payload(op);
                self.create();
                self.txn.set_xattrs(
                    self.c(),
                    self.k(),
                    BTreeMap::from([(stored.clone(), d.clone())]),
                );
                self.st.xattrs.insert(stored, Some(d));
                self.ok();
            }
            OpCode::RmXattr => {
                self.need_exists(i)?;
                if self.xattr(i, &op.name)?.is_none() {
                    return Err(err(
                        OsdErrorCode::NoData,
                        i,
                        format!("no xattr {}", op.name),
                    ));
                }
                self.txn.remove_xattr(self.c(), self.k(), stored.clone());
                self.st.xattrs.insert(stored, None);
                self.ok();
            }
            _ => {
                let given = self.payload(op);
                self.need_exists(i)?;
                let have = self.xattr(i, &op.name)?.unwrap_or_default();
                let holds = match CmpOp::from_u32(op.cmp) {
                    Some(CmpOp::Eq) => have == given,
                    Some(CmpOp::Ne) => have != given,
                    Some(CmpOp::Gt) => have > given,
                    Some(CmpOp::Gte) => have >= given,
                    Some(CmpOp::Lt) => have < given,
                    Some(CmpOp::Lte) => have <= given,
                    None => return Err(err(OsdErrorCode::InvalidArgument, i, "bad comparison")),
                };
                if !holds {
                    return Err(err(
                        OsdErrorCode::CompareFailed,
                        i,
                        format!("xattr {} comparison failed", op.name),
                    ));
                }
                self.ok();
            }
        }
        Ok(())
    }

    fn omap_op(&mut self, i: usize, code: OpCode, op: &OsdSubOp) -> Result<(), ExecError> {
        let keys = || op.keys.iter().map(|k| Bytes::from(k.clone()));
        match code {
            OpCode::OmapGetVals | OpCode::OmapGetKeys => {
                self.need_exists(i)?;
                let r = self.omap_list(i, op, code == OpCode::OmapGetVals)?;
                self.results.push(r);
            }
            OpCode::OmapGetValsByKeys => {
                self.need_exists(i)?;
                let mut r = OsdSubOpResult::default();
                if self.stored() {
                    let want: Vec<Bytes> = keys().collect();
                    let got = self
                        .input
                        .store
                        .omap_get_values(&self.input.coll, &self.input.key, &want)
                        .map_err(|e| self.store_err(i, e))?;
                    for (k, v) in got {
                        r.keys.push(k.to_vec());
                        r.values.push(v.to_vec());
                    }
                }
                self.results.push(r);
            }
            OpCode::OmapGetHeader => {
                self.need_exists(i)?;
                let h = if self.stored() {
                    self.input
                        .store
                        .omap_get_header(&self.input.coll, &self.input.key)
                        .map_err(|e| self.store_err(i, e))?
                } else {
                    Bytes::new()
                };
                self.ok_data(h);
            }
            OpCode::OmapSetVals => {
                self.create();
                let kv = keys()
                    .zip(op.values.iter().map(|v| Bytes::from(v.clone())))
                    .collect();
                self.txn.omap_set_keys(self.c(), self.k(), kv);
                self.ok();
            }
            OpCode::OmapRmKeys => {
                self.need_exists(i)?;
                self.txn
                    .omap_remove_keys(self.c(), self.k(), keys().collect());
                self.ok();
            }
            OpCode::OmapClear => {
                self.need_exists(i)?;
                self.txn.omap_clear(self.c(), self.k());
                self.ok();
            }
            OpCode::OmapSetHeader => {
                let d = self.payload(op);
                self.create();
                self.txn.omap_set_header(self.c(), self.k(), d);
                self.ok();
            }
            _ => return Err(err(OsdErrorCode::InvalidArgument, i, "unsupported op")),
        }
        Ok(())
    }

    fn omap_list(
        &self,
        i: usize,
        op: &OsdSubOp,
        values: bool,
    ) -> Result<OsdSubOpResult, ExecError> {
        let mut r = OsdSubOpResult::default();
        if !self.stored() {
            return Ok(r);
        }
        let max = match op.max {
            0 => OMAP_LIST_DEFAULT,
            m => m.min(OMAP_LIST_MAX),
        } as usize;
        let prefix = op.prefix.as_slice();
        let after = op.start_after.as_slice();
        let start = if !after.is_empty() && after >= prefix {
            Bound::Excluded(after)
        } else {
            Bound::Included(prefix)
        };
        // One more than asked tells whether more follow.
        let page = self
            .input
            .store
            .omap_range(
                &self.input.coll,
                &self.input.key,
                start,
                Bound::Unbounded,
                max + 1,
            )
            .map_err(|e| self.store_err(i, e))?;
        for (k, v) in page {
            if !k.starts_with(prefix) {
                break;
            }
            if r.keys.len() == max {
                r.more = true;
                break;
            }
            r.keys.push(k.to_vec());
            if values {
                r.values.push(v.to_vec());
            }
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_objectstore::MemStore;

    struct Env {
        store: MemStore,
        coll: CollectionId,
        key: ObjectKey,
        version: u64,
    }

    fn env() -> Env {
        let store = MemStore::new(1 << 30);
        let coll = CollectionId::new(1, 0);
        let mut t = Transaction::new();
        t.create_collection(coll);
        store.apply_transaction(t).unwrap();
        Env {
            store,
            coll,
            key: ObjectKey::new(5, "obj"),
            version: 0,
        }
    }

    fn sub(code: OpCode) -> OsdSubOp {
        OsdSubOp::new(code)
    }

    fn with_data(code: OpCode, d: &[u8]) -> (OsdSubOp, Vec<u8>) {
        let mut o = sub(code);
        o.data_len = d.len() as u64;
        (o, d.to_vec())
    }

    impl Env {
        /// Runs the op and, when it succeeds, applies its transaction.
        fn run(&mut self, ops: Vec<(OsdSubOp, Vec<u8>)>) -> Result<ExecOutcome, ExecError> {
            self.version += 1;
            let data: Vec<u8> = ops.iter().flat_map(|(_, d)| d.clone()).collect();
            let ops: Vec<OsdSubOp> = ops.into_iter().map(|(o, _)| o).collect();
            let out = execute(ExecInput {
                store: &self.store,
                coll: self.coll,
                key: self.key.clone(),
                ops: &ops,
                data: Bytes::from(data),
                new_version: self.version,
                mtime_ms: 1000 + self.version,
            })?;
            self.store.apply_transaction(out.txn.clone()).unwrap();
            Ok(out)
        }

        fn read(&mut self) -> Result<Bytes, ExecError> {
            let out = self.run(vec![(sub(OpCode::Read), vec![])])?;
            Ok(out.data.into_iter().next().unwrap_or_default())
        }

        fn code(&mut self, ops: Vec<(OsdSubOp, Vec<u8>)>) -> OsdErrorCode {
            self.run(ops)
                .map(|_| OsdErrorCode::Ok)
                .unwrap_or_else(|e| e.code)
        }
    }

    #[test]
    fn data_ops_follow_ceph_semantics() {
        let mut e = env();
        assert_eq!(e.read().unwrap_err().code, OsdErrorCode::NotFound);
        let out = e
            .run(vec![with_data(OpCode::WriteFull, b"hello world")])
            .unwrap();
        assert_eq!(
            out.delta,
            StatDelta {
                objects: 1,
                bytes: 11
            }
        );
        assert!(out.mutates);
        assert_eq!(e.read().unwrap(), Bytes::from_static(b"hello world"));
        let mut w = with_data(OpCode::Write, b"W");
        w.0.offset = 20;
        e.run(vec![w]).unwrap();
        assert_eq!(e.read().unwrap().len(), 21);
        e.run(vec![with_data(OpCode::Append, b"!")]).unwrap();
        let mut z = sub(OpCode::Zero);
        z.offset = 0;
        z.length = 1000;
        e.run(vec![(z, vec![])]).unwrap();
        let data = e.read().unwrap();
        assert_eq!(data.len(), 22, "zero does not extend");
        assert!(data.iter().all(|b| *b == 0));
        let mut t = sub(OpCode::Truncate);
        t.offset = 3;
        let out = e.run(vec![(t, vec![])]).unwrap();
        assert_eq!(out.delta.bytes, 3 - 22);
        let mut r = sub(OpCode::Read);
        r.offset = 1;
        r.length = 100;
        let out = e.run(vec![(r, vec![])]).unwrap();
        assert_eq!(out.data[0].len(), 2);
        assert!(!out.mutates);
        let out = e.run(vec![(sub(OpCode::Stat), vec![])]).unwrap();
        assert_eq!(out.results[0].size, 3);
        assert_eq!(
            out.results[0].version,
            e.version - 2,
            "stat shows the last change"
        );
        let out = e.run(vec![(sub(OpCode::Remove), vec![])]).unwrap();
        assert_eq!(
            out.delta,
            StatDelta {
                objects: -1,
                bytes: -3
            }
        );
        assert_eq!(
            e.code(vec![(sub(OpCode::Remove), vec![])]),
            OsdErrorCode::NotFound
        );
        assert_eq!(
            e.code(vec![(sub(OpCode::Stat), vec![])]),
            OsdErrorCode::NotFound
        );
    }

    #[test]
    fn create_exclusive_and_guards() {
        let mut e = env();
        let mut excl = sub(OpCode::Create);
        excl.flags = OsdSubOp::CREATE_EXCLUSIVE;
        e.run(vec![(excl.clone(), vec![])]).unwrap();
        assert_eq!(e.code(vec![(excl, vec![])]), OsdErrorCode::Exists);
        e.run(vec![(sub(OpCode::Create), vec![])]).unwrap();
        e.run(vec![(sub(OpCode::AssertExists), vec![])]).unwrap();
        let v = e.run(vec![(sub(OpCode::Stat), vec![])]).unwrap().results[0].version;
        let mut av = sub(OpCode::AssertVersion);
        av.version = v;
        e.run(vec![(av.clone(), vec![])]).unwrap();
        av.version = v + 100;
        assert_eq!(e.code(vec![(av, vec![])]), OsdErrorCode::VersionMismatch);
    }

    #[test]
    fn a_failed_guard_applies_nothing() {
        let mut e = env();
        let mut set = with_data(OpCode::SetXattr, b"1");
        set.0.name = "gen".into();
        e.run(vec![with_data(OpCode::WriteFull, b"v1"), set])
            .unwrap();
        let mut cmp = with_data(OpCode::CmpXattr, b"2");
        cmp.0.name = "gen".into();
        cmp.0.cmp = CmpOp::Eq as u32;
        let mut kv = sub(OpCode::OmapSetVals);
        kv.keys = vec![b"k".to_vec()];
        kv.values = vec![b"v".to_vec()];
        let r = e.run(vec![
            with_data(OpCode::WriteFull, b"v2"),
            cmp.clone(),
            (kv.clone(), vec![]),
        ]);
        let err = r.unwrap_err();
        assert_eq!((err.code, err.failed_op), (OsdErrorCode::CompareFailed, 1));
        assert_eq!(e.read().unwrap(), Bytes::from_static(b"v1"));
        // The guard holds: everything applies.
        cmp.1 = b"1".to_vec();
        e.run(vec![cmp, with_data(OpCode::WriteFull, b"v2"), (kv, vec![])])
            .unwrap();
        assert_eq!(e.read().unwrap(), Bytes::from_static(b"v2"));
        for (c, want) in [(CmpOp::Gt, b"0"), (CmpOp::Lte, b"1"), (CmpOp::Ne, b"x")] {
            let mut g = with_data(OpCode::CmpXattr, want);
            g.0.name = "gen".into();
            g.0.cmp = c as u32;
            e.run(vec![g]).unwrap();
        }
    }

    #[test]
    fn xattrs_follow_the_op_and_hide_the_osd_metadata() {
        let mut e = env();
        let mut a = with_data(OpCode::SetXattr, b"A");
        a.0.name = "a".into();
        let mut b = with_data(OpCode::SetXattr, b"B");
        b.0.name = "b".into();
        let mut cmp = with_data(OpCode::CmpXattr, b"B");
        cmp.0.name = "b".into();
        cmp.0.cmp = CmpOp::Eq as u32;
        e.run(vec![a, b, cmp]).unwrap();
        let out = e.run(vec![(sub(OpCode::GetXattrs), vec![])]).unwrap();
        assert_eq!(out.results[0].names, vec!["a", "b"]);
        let mut rm = sub(OpCode::RmXattr);
        rm.name = "a".into();
        let mut get = sub(OpCode::GetXattr);
        get.name = "a".into();
        let r = e.run(vec![(rm.clone(), vec![]), (get.clone(), vec![])]);
        assert_eq!(
            r.unwrap_err().code,
            OsdErrorCode::NoData,
            "get after rm in one op"
        );
        e.run(vec![(rm.clone(), vec![])]).unwrap();
        assert_eq!(e.code(vec![(rm, vec![])]), OsdErrorCode::NoData);
        get.name = "b".into();
        let out = e.run(vec![(get, vec![])]).unwrap();
        assert_eq!(out.data[0], Bytes::from_static(b"B"));
    }

    #[test]
    fn omap_listing_pages_with_prefix_and_more() {
        let mut e = env();
        let mut set = sub(OpCode::OmapSetVals);
        for k in ["a1", "a2", "a3", "b1", "b2"] {
            set.keys.push(k.as_bytes().to_vec());
            set.values.push(format!("v{k}").into_bytes());
        }
        let (h, hd) = with_data(OpCode::OmapSetHeader, b"hdr");
        e.run(vec![(set, vec![]), (h, hd)]).unwrap();
        let mut list = sub(OpCode::OmapGetVals);
        list.prefix = b"a".to_vec();
        list.max = 2;
        let r = e
            .run(vec![(list.clone(), vec![])])
            .unwrap()
            .results
            .remove(0);
        assert_eq!(r.keys, vec![b"a1".to_vec(), b"a2".to_vec()]);
        assert_eq!(r.values[1], b"va2".to_vec());
        assert!(r.more);
        list.start_after = b"a2".to_vec();
        let r = e.run(vec![(list, vec![])]).unwrap().results.remove(0);
        assert_eq!(r.keys, vec![b"a3".to_vec()]);
        assert!(!r.more);
        let mut keys = sub(OpCode::OmapGetKeys);
        keys.start_after = b"a3".to_vec();
        let r = e.run(vec![(keys, vec![])]).unwrap().results.remove(0);
        assert_eq!(r.keys, vec![b"b1".to_vec(), b"b2".to_vec()]);
        assert!(r.values.is_empty());
        let mut by = sub(OpCode::OmapGetValsByKeys);
        by.keys = vec![b"b2".to_vec(), b"zz".to_vec()];
        let r = e.run(vec![(by, vec![])]).unwrap().results.remove(0);
        assert_eq!(r.keys, vec![b"b2".to_vec()]);
        let mut rm = sub(OpCode::OmapRmKeys);
        rm.keys = vec![b"a1".to_vec()];
        e.run(vec![(rm, vec![])]).unwrap();
        let out = e.run(vec![(sub(OpCode::OmapGetHeader), vec![])]).unwrap();
        assert_eq!(out.data[0], Bytes::from_static(b"hdr"));
        e.run(vec![(sub(OpCode::OmapClear), vec![])]).unwrap();
        let r = e
            .run(vec![(sub(OpCode::OmapGetKeys), vec![])])
            .unwrap()
            .results
            .remove(0);
        assert!(r.keys.is_empty());
    }

    #[test]
    fn malformed_ops_are_refused_before_the_store_is_read() {
        let bad_len = OsdSubOp {
            data_len: 10,
            ..sub(OpCode::Write)
        };
        assert_eq!(
            validate(&[bad_len], 3).unwrap_err().code,
            OsdErrorCode::InvalidArgument
        );
        let unknown = OsdSubOp {
            code: 999,
            ..OsdSubOp::default()
        };
        assert_eq!(
            validate(&[unknown], 0).unwrap_err().code,
            OsdErrorCode::InvalidArgument
        );
        assert!(validate(&[], 0).is_err());
        let unpaired = OsdSubOp {
            keys: vec![b"k".to_vec()],
            ..sub(OpCode::OmapSetVals)
        };
        assert!(validate(&[unpaired], 0).is_err());
        let noname = sub(OpCode::GetXattr);
        assert!(validate(&[noname], 0).is_err());
        let mut e = env();
        let mut far = with_data(OpCode::Write, b"x");
        far.0.offset = u64::MAX;
        assert_eq!(e.code(vec![far]), OsdErrorCode::InvalidArgument);
        let mut huge = sub(OpCode::Truncate);
        huge.offset = OBJECT_SIZE_MAX + 1;
        assert_eq!(e.code(vec![(huge, vec![])]), OsdErrorCode::TooLarge);
    }

    #[test]
    fn remove_then_write_in_one_op_recreates() {
        let mut e = env();
        e.run(vec![with_data(OpCode::WriteFull, b"old data")])
            .unwrap();
        let out = e
            .run(vec![
                (sub(OpCode::Remove), vec![]),
                (sub(OpCode::Read), vec![]),
            ])
            .unwrap_err();
        assert_eq!(out.code, OsdErrorCode::NotFound);
        let out = e
            .run(vec![
                (sub(OpCode::Remove), vec![]),
                with_data(OpCode::Append, b"new"),
            ])
            .unwrap();
        assert_eq!(
            out.delta,
            StatDelta {
                objects: 0,
                bytes: 3 - 8
            }
        );
        assert_eq!(e.read().unwrap(), Bytes::from_static(b"new"));
    }
}

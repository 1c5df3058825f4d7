//! Sub-operations on the object itself and its data: create, write, append,
//! truncate, zero, remove, read, stat and the existence and version guards.

use bytes::Bytes;
use shoal_objectstore::types::READ_BYTES_MAX;
use shoal_proto::{OpCode, OsdErrorCode, OsdSubOp, OsdSubOpResult};

use super::{Exec, ExecError, err, extent_end};
use crate::object::ObjectMeta;

impl Exec<'_> {
    pub(super) fn create_op(&mut self, i: usize, op: &OsdSubOp) -> Result<(), ExecError> {
        if self.st.exists && op.flags & OsdSubOp::CREATE_EXCLUSIVE != 0 {
            return Err(err(OsdErrorCode::Exists, i, "the object exists"));
        }
        self.create();
        self.ok();
        Ok(())
    }

    /// `Write` at `offset`, `WriteFull` (the payload replaces the data) or
    /// `Append` (at the size the op has left so far). Each creates the
    /// object; an empty payload extends nothing (as Ceph's).
    pub(super) fn write(
        &mut self,
        i: usize,
        code: OpCode,
        op: &OsdSubOp,
        d: Bytes,
    ) -> Result<(), ExecError> {
        let offset = match code {
            OpCode::Write => op.offset,
            OpCode::Append => self.st.size,
            _ => 0,
        };
        let end = extent_end(i, offset, d.len() as u64)?;
        self.create();
        if code == OpCode::WriteFull && self.st.size > 0 {
            self.txn.truncate(self.c(), self.k(), 0);
            self.st.size = 0;
        }
        if !d.is_empty() {
            self.txn.write(self.c(), self.k(), offset, d);
            self.st.size = self.st.size.max(end);
        }
        self.ok();
        Ok(())
    }

    /// Sets the size to `offset` (growing reads as zeros); creates the object.
    pub(super) fn truncate(&mut self, i: usize, op: &OsdSubOp) -> Result<(), ExecError> {
        let size = extent_end(i, op.offset, 0)?;
        self.create();
        if size != self.st.size {
            self.txn.truncate(self.c(), self.k(), size);
            self.st.size = size;
        }
        self.ok();
        Ok(())
    }

    /// Zeroes `length` bytes at `offset`, clipped to the size: never extends.
    pub(super) fn zero(&mut self, i: usize, op: &OsdSubOp) -> Result<(), ExecError> {
        self.need_exists(i)?;
        let end = extent_end(i, op.offset, op.length)?.min(self.st.size);
        if end > op.offset {
            self.txn
                .zero(self.c(), self.k(), op.offset, end - op.offset);
        }
        self.ok();
        Ok(())
    }

    pub(super) fn remove(&mut self, i: usize) -> Result<(), ExecError> {
        self.need_exists(i)?;
        self.txn.remove(self.c(), self.k());
        let st = &mut self.st;
        st.exists = false;
        st.removed = true;
        st.size = 0;
        st.xattrs.clear();
        st.meta = ObjectMeta::default();
        self.ok();
        Ok(())
    }

    /// The stored range a read or sparse read covers: `length` bytes at
    /// `offset` (0: to the end), clipped to the size stored before the op;
    /// `None` when nothing is stored (the op created the object).
    fn stored_range(&self, i: usize, op: &OsdSubOp) -> Result<Option<(u64, u64)>, ExecError> {
        self.need_exists(i)?;
        op.offset.checked_add(op.length).ok_or_else(|| {
            err(
                OsdErrorCode::InvalidArgument,
                i,
                "offset + length overflows",
            )
        })?;
        if !self.stored() {
            return Ok(None);
        }
        let size = self.st.initial_size;
        let offset = op.offset.min(size);
        let rest = size - offset;
        let len = match op.length {
            0 => rest,
            n => n.min(rest),
        };
        Ok(Some((offset, len)))
    }

    /// `length` bytes at `offset` (0: to the end) of the data stored before
    /// the op, clipped to its size.
    pub(super) fn read(&mut self, i: usize, op: &OsdSubOp) -> Result<(), ExecError> {
        let Some((offset, len)) = self.stored_range(i, op)? else {
            // Created (or recreated) by this op: nothing stored to read.
            self.ok_data(Bytes::new());
            return Ok(());
        };
        if len > READ_BYTES_MAX {
            let m = format!("reads are at most {READ_BYTES_MAX} bytes; read in ranges");
            return Err(err(OsdErrorCode::TooLarge, i, m));
        }
        let (b, crc) = self
            .input
            .store
            .read_with_crc(&self.input.coll, &self.input.key, offset, len)
            .map_err(|e| self.store_err(i, e))?;
        self.ok_data_with_crc(b, crc);
        Ok(())
    }

    /// The allocated extents of `length` bytes at `offset` (0: to the end)
    /// of the data stored before the op, and their data unless the op asks
    /// for the extents only.
    pub(super) fn sparse_read(&mut self, i: usize, op: &OsdSubOp) -> Result<(), ExecError> {
        let Some((offset, len)) = self.stored_range(i, op)? else {
            self.ok_data(Bytes::new());
            return Ok(());
        };
        let with_data = op.flags & OsdSubOp::EXTENTS_ONLY == 0;
        if with_data && len > READ_BYTES_MAX {
            let m = format!("reads are at most {READ_BYTES_MAX} bytes; read in ranges");
            return Err(err(OsdErrorCode::TooLarge, i, m));
        }
        let (store, c, k) = (self.input.store, &self.input.coll, &self.input.key);
        let extents = store
            .allocated(c, k, offset, len)
            .map_err(|e| self.store_err(i, e))?;
        let mut data = Vec::new();
        if with_data {
            for (at, n) in &extents {
                data.push(
                    store
                        .read(c, k, *at, *n)
                        .map_err(|e| self.store_err(i, e))?,
                );
            }
        }
        let data = match data.len() {
            0 => Bytes::new(),
            1 => data.remove(0),
            _ => {
                let mut b = bytes::BytesMut::with_capacity(data.iter().map(Bytes::len).sum());
                for d in &data {
                    b.extend_from_slice(d);
                }
                b.freeze()
            }
        };
        self.results.push(OsdSubOpResult {
            data_len: data.len() as u64,
            extents: extents.iter().flat_map(|(o, n)| [*o, *n]).collect(),
            ..OsdSubOpResult::default()
        });
        self.out.push(data);
        Ok(())
    }

    /// Size as the op has left it; version and mtime as stored before the op.
    pub(super) fn stat(&mut self, i: usize) -> Result<(), ExecError> {
        self.need_exists(i)?;
        self.results.push(OsdSubOpResult {
            size: self.st.size,
            mtime_ms: self.st.meta.mtime_ms,
            version: self.st.meta.version,
            ..OsdSubOpResult::default()
        });
        Ok(())
    }

    pub(super) fn assert_version(&mut self, i: usize, op: &OsdSubOp) -> Result<(), ExecError> {
        self.need_exists(i)?;
        let have = self.st.meta.version;
        if have != op.version {
            let m = format!("version is {have}, not {}", op.version);
            return Err(err(OsdErrorCode::VersionMismatch, i, m));
        }
        self.ok();
        Ok(())
    }
}

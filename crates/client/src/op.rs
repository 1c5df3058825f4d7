//! [`Op`]: a compound operation on one object, built sub-operation by
//! sub-operation and applied atomically by the object's primary OSD; and
//! [`OpResult`], its per-sub-operation results.

use std::collections::BTreeMap;

use bytes::Bytes;
use shoal_proto::{CmpOp, OpCode, OsdOpReply, OsdSubOp, OsdSubOpResult};

use crate::error::{Error, Result};

/// A compound operation: its sub-operations apply in order, all or none.
#[derive(Debug, Clone, Default)]
pub struct Op {
    pub(crate) subs: Vec<OsdSubOp>,
    pub(crate) data: Vec<Bytes>,
}

/// Size, modification time and version of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectStat {
    /// Bytes.
    pub size: u64,
    /// Last change, ms since the Unix epoch.
    pub mtime_ms: u64,
    /// The object's version (changes with every write).
    pub version: u64,
}

/// A page of omap entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OmapPage {
    /// Keys and values (values empty when only keys were asked for).
    pub entries: Vec<(Bytes, Bytes)>,
    /// More entries follow the last one.
    pub more: bool,
}

impl Op {
    /// An empty compound operation.
    pub fn new() -> Op {
        Op::default()
    }

    fn push(mut self, sub: OsdSubOp, data: Bytes) -> Op {
        let sub = OsdSubOp {
            data_len: data.len() as u64,
            ..sub
        };
        self.subs.push(sub);
        self.data.push(data);
        self
    }

    fn code(code: OpCode) -> OsdSubOp {
        OsdSubOp::new(code)
    }

    /// Whether any sub-operation changes the object.
    pub fn is_write(&self) -> bool {
        self.subs
            .iter()
            .any(|s| OpCode::from_u32(s.code).is_some_and(OpCode::is_write))
    }

    /// Bytes of payload the op carries.
    pub fn data_len(&self) -> usize {
        self.data.iter().map(Bytes::len).sum()
    }

    /// Bytes the reply is expected to carry: the lengths of the ranged
    /// reads (a read to the end counts nothing: its size is unknown).
    pub(crate) fn reply_len_hint(&self) -> usize {
        self.subs
            .iter()
            .filter(|s| s.code == OpCode::Read as u32 || s.code == OpCode::SparseRead as u32)
            .map(|s| usize::try_from(s.length).unwrap_or(usize::MAX))
            .fold(0, usize::saturating_add)
    }

    /// Number of sub-operations.
    pub fn len(&self) -> usize {
        self.subs.len()
    }

    /// Whether the op has no sub-operation.
    pub fn is_empty(&self) -> bool {
        self.subs.is_empty()
    }

    /// Create the object; with `exclusive`, fail if it exists.
    pub fn create(self, exclusive: bool) -> Op {
        let mut s = Op::code(OpCode::Create);
        if exclusive {
            s.flags = OsdSubOp::CREATE_EXCLUSIVE;
        }
        self.push(s, Bytes::new())
    }

    /// Write `data` at `offset`.
    pub fn write(self, offset: u64, data: impl Into<Bytes>) -> Op {
        let s = OsdSubOp {
            offset,
            ..Op::code(OpCode::Write)
        };
        self.push(s, data.into())
    }

    /// Replace the object's data with `data`.
    pub fn write_full(self, data: impl Into<Bytes>) -> Op {
        self.push(Op::code(OpCode::WriteFull), data.into())
    }

    /// Append `data`.
    pub fn append(self, data: impl Into<Bytes>) -> Op {
        self.push(Op::code(OpCode::Append), data.into())
    }

    /// Read `len` bytes at `offset` (`len` 0: to the end).
    pub fn read(self, offset: u64, len: u64) -> Op {
        let s = OsdSubOp {
            offset,
            length: len,
            ..Op::code(OpCode::Read)
        };
        self.push(s, Bytes::new())
    }

    /// The allocated extents of `len` bytes at `offset` (`len` 0: to the
    /// end) and their data: [`OpResult::extents`] and [`OpResult::data`].
    pub fn sparse_read(self, offset: u64, len: u64) -> Op {
        let s = OsdSubOp {
            offset,
            length: len,
            ..Op::code(OpCode::SparseRead)
        };
        self.push(s, Bytes::new())
    }

    /// The allocated extents of `len` bytes at `offset`, without their data.
    pub fn allocated(self, offset: u64, len: u64) -> Op {
        let s = OsdSubOp {
            offset,
            length: len,
            flags: OsdSubOp::EXTENTS_ONLY,
            ..Op::code(OpCode::SparseRead)
        };
        self.push(s, Bytes::new())
    }

    /// Size, mtime and version.
    pub fn stat(self) -> Op {
        self.push(Op::code(OpCode::Stat), Bytes::new())
    }

    /// Set the size.
    pub fn truncate(self, size: u64) -> Op {
        let s = OsdSubOp {
            offset: size,
            ..Op::code(OpCode::Truncate)
        };
        self.push(s, Bytes::new())
    }

    /// Zero `len` bytes at `offset` (never past the end).
    pub fn zero(self, offset: u64, len: u64) -> Op {
        let s = OsdSubOp {
            offset,
            length: len,
            ..Op::code(OpCode::Zero)
        };
        self.push(s, Bytes::new())
    }

    /// Remove the object.
    pub fn remove(self) -> Op {
        self.push(Op::code(OpCode::Remove), Bytes::new())
    }

    fn named(code: OpCode, name: &str) -> OsdSubOp {
        OsdSubOp {
            name: name.to_string(),
            ..Op::code(code)
        }
    }

    /// Read xattr `name`.
    pub fn getxattr(self, name: &str) -> Op {
        self.push(Op::named(OpCode::GetXattr, name), Bytes::new())
    }

    /// Read every xattr.
    pub fn getxattrs(self) -> Op {
        self.push(Op::code(OpCode::GetXattrs), Bytes::new())
    }

    /// Set xattr `name`.
    pub fn setxattr(self, name: &str, value: impl Into<Bytes>) -> Op {
        self.push(Op::named(OpCode::SetXattr, name), value.into())
    }

    /// Remove xattr `name`.
    pub fn rmxattr(self, name: &str) -> Op {
        self.push(Op::named(OpCode::RmXattr, name), Bytes::new())
    }

    /// Guard: xattr `name` compares to `value` by `cmp` (absent = empty).
    pub fn cmpxattr(self, name: &str, cmp: CmpOp, value: impl Into<Bytes>) -> Op {
        let s = OsdSubOp {
            cmp: cmp as u32,
            ..Op::named(OpCode::CmpXattr, name)
        };
        self.push(s, value.into())
    }

    /// Omap entries after `start_after` whose keys start with `prefix`, at most `max` (0: the OSD's default).
    pub fn omap_get_vals(self, start_after: &[u8], prefix: &[u8], max: u32) -> Op {
        let s = OsdSubOp {
            start_after: start_after.to_vec(),
            prefix: prefix.to_vec(),
            max,
            ..Op::code(OpCode::OmapGetVals)
        };
        self.push(s, Bytes::new())
    }

    /// Omap keys after `start_after` starting with `prefix`, at most `max`.
    pub fn omap_get_keys(self, start_after: &[u8], prefix: &[u8], max: u32) -> Op {
        let s = OsdSubOp {
            start_after: start_after.to_vec(),
            prefix: prefix.to_vec(),
            max,
            ..Op::code(OpCode::OmapGetKeys)
        };
        self.push(s, Bytes::new())
    }

    /// The values of those `keys` that exist.
    pub fn omap_get_vals_by_keys<K: AsRef<[u8]>>(self, keys: &[K]) -> Op {
        let s = OsdSubOp {
            keys: keys.iter().map(|k| k.as_ref().to_vec()).collect(),
            ..Op::code(OpCode::OmapGetValsByKeys)
        };
        self.push(s, Bytes::new())
    }

    /// Set omap entries.
    pub fn omap_set<K: AsRef<[u8]>, V: AsRef<[u8]>>(self, entries: &[(K, V)]) -> Op {
        let s = OsdSubOp {
            keys: entries.iter().map(|(k, _)| k.as_ref().to_vec()).collect(),
            values: entries.iter().map(|(_, v)| v.as_ref().to_vec()).collect(),
            ..Op::code(OpCode::OmapSetVals)
        };
        self.push(s, Bytes::new())
    }

    /// Remove omap keys.
    pub fn omap_rm_keys<K: AsRef<[u8]>>(self, keys: &[K]) -> Op {
        let s = OsdSubOp {
            keys: keys.iter().map(|k| k.as_ref().to_vec()).collect(),
            ..Op::code(OpCode::OmapRmKeys)
        };
        self.push(s, Bytes::new())
    }

    /// Remove every omap entry and the header.
    pub fn omap_clear(self) -> Op {
        self.push(Op::code(OpCode::OmapClear), Bytes::new())
    }

    /// Read the omap header.
    pub fn omap_get_header(self) -> Op {
        self.push(Op::code(OpCode::OmapGetHeader), Bytes::new())
    }

    /// Set the omap header.
    pub fn omap_set_header(self, header: impl Into<Bytes>) -> Op {
        self.push(Op::code(OpCode::OmapSetHeader), header.into())
    }

    /// Guard: the object exists.
    pub fn assert_exists(self) -> Op {
        self.push(Op::code(OpCode::AssertExists), Bytes::new())
    }

    /// Guard: the object's version is `version`.
    pub fn assert_version(self, version: u64) -> Op {
        let s = OsdSubOp {
            version,
            ..Op::code(OpCode::AssertVersion)
        };
        self.push(s, Bytes::new())
    }
}

/// The results of a compound operation, by sub-operation index.
#[derive(Debug, Clone)]
pub struct OpResult {
    results: Vec<OsdSubOpResult>,
    data: Vec<Bytes>,
    /// The object's version after the op.
    pub version: u64,
    /// The op had been applied before (a resend): only its outcome is known.
    pub replayed: bool,
}

impl OpResult {
    /// Splits the reply's data part by sub-operation.
    pub(crate) fn from_reply(reply: OsdOpReply, data: Bytes) -> Result<OpResult> {
        let mut at = 0usize;
        let mut parts = Vec::with_capacity(reply.results.len());
        for r in &reply.results {
            let n = usize::try_from(r.data_len).unwrap_or(usize::MAX);
            let end = at
                .checked_add(n)
                .filter(|e| *e <= data.len())
                .ok_or_else(|| Error::Protocol("reply data shorter than its results".into()))?;
            parts.push(data.slice(at..end));
            at = end;
        }
        Ok(OpResult {
            results: reply.results,
            data: parts,
            version: reply.version,
            replayed: reply.replayed,
        })
    }

    fn get(&self, i: usize) -> Result<&OsdSubOpResult> {
        self.results.get(i).ok_or_else(|| {
            Error::Protocol(format!(
                "no result for sub-operation {i} (replayed: {})",
                self.replayed
            ))
        })
    }

    /// The data a sub-operation returned (read, getxattr, omap header).
    pub fn data(&self, i: usize) -> Result<Bytes> {
        self.get(i)?;
        Ok(self.data.get(i).cloned().unwrap_or_default())
    }

    /// A sparse read's extents, `(offset, length)` in order; its data
    /// ([`OpResult::data`]) is theirs, concatenated.
    pub fn extents(&self, i: usize) -> Result<Vec<(u64, u64)>> {
        let r = self.get(i)?;
        if r.extents.len() % 2 != 0 {
            return Err(Error::Protocol("an odd number of extent fields".into()));
        }
        let ext: Vec<(u64, u64)> = r.extents.chunks(2).map(|p| (p[0], p[1])).collect();
        Ok(ext)
    }

    /// A `stat` result.
    pub fn stat(&self, i: usize) -> Result<ObjectStat> {
        let r = self.get(i)?;
        Ok(ObjectStat {
            size: r.size,
            mtime_ms: r.mtime_ms,
            version: r.version,
        })
    }

    /// An omap listing or lookup result.
    pub fn omap(&self, i: usize) -> Result<OmapPage> {
        let r = self.get(i)?;
        let entries = r
            .keys
            .iter()
            .enumerate()
            .map(|(j, k)| {
                let v = r.values.get(j).cloned().unwrap_or_default();
                (Bytes::from(k.clone()), Bytes::from(v))
            })
            .collect();
        Ok(OmapPage {
            entries,
            more: r.more,
        })
    }

    /// A `getxattrs` result.
    pub fn xattrs(&self, i: usize) -> Result<BTreeMap<String, Bytes>> {
        let r = self.get(i)?;
        Ok(r.names
            .iter()
            .cloned()
            .zip(r.values.iter().map(|v| Bytes::from(v.clone())))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_line_up_with_sub_operations() {
        let op = Op::new()
            .write(3, &b"abc"[..])
            .setxattr("k", &b"vv"[..])
            .read(0, 0);
        assert_eq!(op.len(), 3);
        assert!(op.is_write());
        assert_eq!(op.data_len(), 5);
        assert_eq!(op.subs[0].data_len, 3);
        assert_eq!(op.subs[1].data_len, 2);
        assert_eq!(op.subs[2].data_len, 0);
        assert!(!Op::new().read(0, 1).stat().is_write());
    }

    #[test]
    fn reply_data_is_split_by_result_and_bad_lengths_are_errors() {
        let reply = OsdOpReply {
            results: vec![
                OsdSubOpResult {
                    data_len: 2,
                    ..Default::default()
                },
                OsdSubOpResult {
                    size: 9,
                    ..Default::default()
                },
                OsdSubOpResult {
                    data_len: 3,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let r = OpResult::from_reply(reply.clone(), Bytes::from_static(b"hixyz")).unwrap();
        assert_eq!(r.data(0).unwrap(), Bytes::from_static(b"hi"));
        assert_eq!(r.stat(1).unwrap().size, 9);
        assert_eq!(r.data(2).unwrap(), Bytes::from_static(b"xyz"));
        assert!(r.data(3).is_err());
        assert!(OpResult::from_reply(reply, Bytes::from_static(b"hix")).is_err());
    }
}

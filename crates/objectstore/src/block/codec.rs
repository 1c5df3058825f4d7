//! Byte formats of the metadata records and keys. Every record starts with a format
//! version; decoding checks bounds before it parses (hostile or torn bytes give `Err`).

use bytes::Bytes;

use super::extent::{Extent, ExtentMap};
use crate::error::{Error, Result};
use crate::objmeta::ObjMeta;
use crate::types::{COLLECTION_ID_BYTES, CollectionId, ObjectKey};
use crate::vecmap::VecMap;

pub(crate) const RECORD_VERSION: u8 = 1;

/// The persisted part of an object other than its omap entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ObjectRecord {
    pub size: u64,
    pub extents: ExtentMap,
    pub xattrs: VecMap<String, Bytes>,
    pub omap_header: Bytes,
}

/// A bounds-checked reader of big-endian fields; every short read is corruption of
/// `what`.
pub(crate) struct Reader<'a> {
    b: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(b: &'a [u8], what: &'static str) -> Self {
        Self { b, what }
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.b.is_empty()
    }
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.b.len() < n {
            return Err(Error::Corrupt(format!("{} truncated", self.what)));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        let mut a = [0u8; 2];
        a.copy_from_slice(self.take(2)?);
        Ok(u16::from_be_bytes(a))
    }
    pub(crate) fn u32(&mut self) -> Result<u32> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_be_bytes(a))
    }
    pub(crate) fn u64(&mut self) -> Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(a))
    }
    pub(crate) fn bytes32(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub(crate) fn count(&mut self, min_item_bytes: usize) -> Result<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_item_bytes) > self.b.len() {
            return Err(Error::Corrupt(format!(
                "{} count {n} exceeds record",
                self.what
            )));
        }
        Ok(n)
    }
    fn end(&self) -> Result<()> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(Error::Corrupt(format!("{} has trailing bytes", self.what)))
        }
    }
}

impl ObjectRecord {
    #[cfg(test)]
    pub fn from_parts(size: u64, extents: &ExtentMap, meta: &ObjMeta) -> Self {
        Self {
            size,
            extents: extents.clone(),
            xattrs: meta.xattrs.clone(),
            omap_header: meta.omap_header.clone(),
        }
    }

    pub fn encode(size: u64, extents: &ExtentMap, meta: &ObjMeta) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + extents.extents.len() * 24);
        out.push(RECORD_VERSION);
        out.extend_from_slice(&size.to_be_bytes());
        out.extend_from_slice(&(extents.extents.len() as u32).to_be_bytes());
        for (l, e) in &extents.extents {
            out.extend_from_slice(&l.to_be_bytes());
            out.extend_from_slice(&e.pblock.to_be_bytes());
            out.extend_from_slice(&(e.crcs.len() as u32).to_be_bytes());
            for c in &e.crcs {
                out.extend_from_slice(&c.to_be_bytes());
            }
        }
        out.extend_from_slice(&(meta.xattrs.len() as u32).to_be_bytes());
        for (k, v) in &meta.xattrs {
            out.extend_from_slice(&(k.len() as u32).to_be_bytes());
            out.extend_from_slice(k.as_bytes());
            out.extend_from_slice(&(v.len() as u32).to_be_bytes());
            out.extend_from_slice(v);
        }
        out.extend_from_slice(&(meta.omap_header.len() as u32).to_be_bytes());
        out.extend_from_slice(&meta.omap_header);
        out
    }

    pub fn decode(b: &[u8]) -> Result<Self> {
        let mut r = Reader {
            b,
            what: "object record",
        };
        let v = r.u8()?;
        if v != RECORD_VERSION {
            return Err(Error::Corrupt(format!("object record version {v}")));
        }
        let size = r.u64()?;
        let n = r.count(20)?;
        let mut extents = ExtentMap {
            extents: VecMap::with_capacity(n),
        };
        for _ in 0..n {
            let l = r.u64()?;
            let pblock = r.u64()?;
            let n = r.count(4)?;
            let crcs = (0..n).map(|_| r.u32()).collect::<Result<Vec<_>>>()?;
            if n == 0 || extents.extents.insert(l, Extent { pblock, crcs }).is_some() {
                return Err(Error::Corrupt("bad extent in object record".into()));
            }
        }
        let n = r.count(8)?;
        let mut xattrs = VecMap::with_capacity(n);
        for _ in 0..n {
            let k = String::from_utf8(r.bytes32()?.to_vec())
                .map_err(|_| Error::Corrupt("xattr name is not UTF-8".into()))?;
            xattrs.insert(k, Bytes::copy_from_slice(r.bytes32()?));
        }
        let omap_header = Bytes::copy_from_slice(r.bytes32()?);
        r.end()?;
        Ok(Self {
            size,
            extents,
            xattrs,
            omap_header,
        })
    }
}

impl ObjectRecord {
    /// Bounds a decoded record must respect before any arithmetic on it: size within the
    /// object limit, extents inside the object's size and inside the device's usable
    /// blocks `[1, total_blocks)`.
    pub fn check(&self, total_blocks: u64) -> Result<()> {
        if self.size > crate::types::OBJECT_SIZE_MAX {
            return Err(Error::Corrupt(format!(
                "object size {} over the limit",
                self.size
            )));
        }
        let size_blocks = self.size.div_ceil(super::BLOCK as u64);
        let mut prev_end = 0;
        for (lb, (pb, n)) in self.extents.runs() {
            if lb < prev_end {
                return Err(Error::Corrupt(format!("extents overlap at block {lb}")));
            }
            prev_end = lb.saturating_add(n);
            if lb.checked_add(n).is_none_or(|e| e > size_blocks) {
                return Err(Error::Corrupt(format!(
                    "extent at block {lb} lies past the size {}",
                    self.size
                )));
            }
            if pb < 1 || pb.checked_add(n).is_none_or(|e| e > total_blocks) {
                return Err(Error::Corrupt(format!(
                    "extent {pb}+{n} outside the device"
                )));
            }
        }
        Ok(())
    }
}

/// Key of an object record: collection, then the object key (hash, name, snapshot).
pub(crate) fn object_key(c: &CollectionId, o: &ObjectKey) -> Vec<u8> {
    let mut k = c.to_bytes().to_vec();
    k.extend_from_slice(&o.to_bytes());
    k
}

pub(crate) fn parse_object_key(k: &[u8]) -> Result<(CollectionId, ObjectKey)> {
    let bad = || Error::Corrupt("bad object key".into());
    let c = CollectionId::from_bytes(k).ok_or_else(bad)?;
    let o = ObjectKey::from_bytes(k.get(COLLECTION_ID_BYTES..).ok_or_else(bad)?).ok_or_else(bad)?;
    Ok((c, o))
}

/// Prefix of every omap key of one object (the name is length-prefixed so no object's
/// prefix is a prefix of another's; the snapshot id follows it).
pub(crate) fn omap_prefix(c: &CollectionId, o: &ObjectKey) -> Vec<u8> {
    let mut k = c.to_bytes().to_vec();
    k.extend_from_slice(&o.hash.to_be_bytes());
    k.extend_from_slice(&(o.name.len() as u16).to_be_bytes());
    k.extend_from_slice(&o.name);
    k.extend_from_slice(&o.snap.to_be_bytes());
    k
}

pub(crate) fn parse_omap_key(k: &[u8]) -> Result<(CollectionId, ObjectKey, &[u8])> {
    let mut r = Reader {
        b: k,
        what: "omap key",
    };
    let c = CollectionId::from_bytes(r.take(COLLECTION_ID_BYTES)?)
        .ok_or_else(|| Error::Corrupt("bad omap key".into()))?;
    let hash = r.u32()?;
    let n = r.u16()? as usize;
    let name = r.take(n)?.to_vec();
    let snap = r.u64()?;
    Ok((c, ObjectKey { hash, name, snap }, r.b))
}

/// A deferred write record: the device block and its new 4 KiB contents.
pub(crate) fn encode_deferred(pblock: u64, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(9 + data.len());
    v.push(RECORD_VERSION);
    v.extend_from_slice(&pblock.to_be_bytes());
    v.extend_from_slice(data);
    v
}

pub(crate) fn decode_deferred(b: &[u8]) -> Result<(u64, &[u8])> {
    let mut r = Reader {
        b,
        what: "deferred record",
    };
    if r.u8()? != RECORD_VERSION {
        return Err(Error::Corrupt("deferred record version".into()));
    }
    let pblock = r.u64()?;
    let data = r.take(super::BLOCK)?;
    r.end()?;
    Ok((pblock, data))
}

pub(crate) fn u64_value(b: &[u8], what: &str) -> Result<u64> {
    let a: [u8; 8] = b
        .try_into()
        .map_err(|_| Error::Corrupt(format!("{what}: bad u64 value")))?;
    Ok(u64::from_be_bytes(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trip_and_hostile_bytes() {
        let mut ext = ExtentMap::default();
        ext.insert(0, 9, vec![1, 2]);
        ext.insert(7, 90, vec![3]);
        let mut meta = ObjMeta::default();
        meta.xattrs.insert("a".into(), Bytes::from_static(b"b"));
        meta.omap_header = Bytes::from_static(b"h");
        let enc = ObjectRecord::encode(12345, &ext, &meta);
        let dec = ObjectRecord::decode(&enc).unwrap();
        assert_eq!(dec, ObjectRecord::from_parts(12345, &ext, &meta));
        for cut in 0..enc.len() {
            assert!(
                ObjectRecord::decode(&enc[..cut]).is_err(),
                "truncation at {cut} accepted"
            );
        }
        let mut rng = crate::model::Rng::new(1);
        for _ in 0..2000 {
            let mut b = enc.clone();
            let i = rng.below(b.len() as u64) as usize;
            b[i] ^= 1 + rng.below(255) as u8;
            let _ = ObjectRecord::decode(&b); // must not panic
        }
    }

    #[test]
    fn keys_round_trip() {
        let c = CollectionId::new(5, 6);
        let o = ObjectKey::new(7, "x/y");
        assert_eq!(
            parse_object_key(&object_key(&c, &o)).unwrap(),
            (c, o.clone())
        );
        let mut k = omap_prefix(&c, &o);
        k.extend_from_slice(b"key");
        let (c2, o2, rest) = parse_omap_key(&k).unwrap();
        assert_eq!((c2, o2, rest), (c, o, &b"key"[..]));
    }
}

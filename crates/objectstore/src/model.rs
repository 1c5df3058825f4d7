//! A deliberately naive reference model of the contract (plain `BTreeMap`s, whole-state
//! copy per transaction), and a seeded generator of random transactions. Used by the
//! conformance suite and the crash harness.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::transaction::{Op, Transaction};
use crate::types::{CollectionId, OBJECT_SIZE_MAX, ObjectKey};

/// One object of the model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelObject {
    /// Data bytes.
    pub data: Vec<u8>,
    /// Xattrs.
    pub xattrs: BTreeMap<String, Bytes>,
    /// Omap header.
    pub omap_header: Bytes,
    /// Omap.
    pub omap: BTreeMap<Bytes, Bytes>,
}

/// The reference state: collections of objects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Model {
    /// Everything.
    pub colls: BTreeMap<CollectionId, BTreeMap<ObjectKey, ModelObject>>,
}

fn put(data: &mut Vec<u8>, off: u64, bytes: &[u8]) {
    let off = off as usize;
    if data.len() < off + bytes.len() {
        data.resize(off + bytes.len(), 0);
    }
    data[off..off + bytes.len()].copy_from_slice(bytes);
}

impl Model {
    /// Apply `txn` all-or-nothing; `false` (and no change) if a precondition fails.
    pub fn apply(&mut self, txn: &Transaction) -> bool {
        let mut next = self.clone();
        // After a split only further splits may touch its collections.
        let mut split = std::collections::BTreeSet::new();
        for op in txn.ops() {
            let c = op.collection();
            if split.contains(&c) && !matches!(op, Op::SplitCollection { .. }) {
                return false;
            }
            if !next.apply_op(op) {
                return false;
            }
            if let Op::SplitCollection { dst, .. } = op {
                split.extend([c, *dst]);
            }
        }
        *self = next;
        true
    }

    fn apply_op(&mut self, op: &Op) -> bool {
        let c = op.collection();
        match op {
            Op::CreateCollection(_) => return self.colls.insert(c, BTreeMap::new()).is_none(),
            Op::RemoveCollection(_) => return self.colls.remove(&c).is_some(),
            Op::SplitCollection { dst, bits, rem, .. } => {
                if *dst == c || *bits > 32 || (*bits < 32 && u64::from(*rem) >> *bits != 0) {
                    return false;
                }
                let (Some(mut from), Some(mut to)) =
                    (self.colls.remove(&c), self.colls.remove(dst))
                else {
                    return false;
                };
                let moving: Vec<ObjectKey> = from
                    .keys()
                    .filter(|k| crate::transaction::split_moves(k.hash, *bits, *rem))
                    .cloned()
                    .collect();
                for k in moving {
                    if let Some(o) = from.remove(&k) {
                        to.insert(k, o);
                    }
                }
                self.colls.insert(c, from);
                self.colls.insert(*dst, to);
                return true;
            }
            _ => {}
        }
        let Some(objs) = self.colls.get_mut(&c) else {
            return false;
        };
        let fits = |off: u64, len: u64| off.checked_add(len).is_some_and(|e| e <= OBJECT_SIZE_MAX);
        match op {
            Op::Remove(_, o) => return objs.remove(o).is_some(),
            Op::Clone { src, dst, .. } => {
                let Some(s) = objs.get(src).cloned() else {
                    return false;
                };
                objs.insert(dst.clone(), s);
            }
            Op::Rename { src, dst, .. } => {
                let Some(s) = objs.remove(src) else {
                    return false;
                };
                objs.insert(dst.clone(), s);
            }
            Op::CloneRange {
                src,
                dst,
                src_offset,
                len,
                dst_offset,
                ..
            } => {
                if !fits(*src_offset, *len) || !fits(*dst_offset, *len) {
                    return false;
                }
                let Some(s) = objs.get(src) else { return false };
                let mut bytes = vec![0u8; *len as usize];
                for (i, b) in bytes.iter_mut().enumerate() {
                    *b = s.data.get(*src_offset as usize + i).copied().unwrap_or(0);
                }
                put(
                    &mut objs.entry(dst.clone()).or_default().data,
                    *dst_offset,
                    &bytes,
                );
            }
            Op::Write {
                oid, offset, data, ..
            } => {
                if !fits(*offset, data.len() as u64) {
                    return false;
                }
                put(
                    &mut objs.entry(oid.clone()).or_default().data,
                    *offset,
                    data,
                );
            }
            Op::Zero {
                oid, offset, len, ..
            } => {
                if !fits(*offset, *len) {
                    return false;
                }
                put(
                    &mut objs.entry(oid.clone()).or_default().data,
                    *offset,
                    &vec![0u8; *len as usize],
                );
            }
            Op::Truncate { oid, size, .. } => {
                if *size > OBJECT_SIZE_MAX {
                    return false;
                }
                objs.entry(oid.clone())
                    .or_default()
                    .data
                    .resize(*size as usize, 0);
            }
            Op::Touch(_, o) => {
                objs.entry(o.clone()).or_default();
            }
            Op::SetXattrs(_, o, a) => objs.entry(o.clone()).or_default().xattrs.extend(a.clone()),
            Op::RemoveXattr(_, o, n) => {
                objs.entry(o.clone()).or_default().xattrs.remove(n);
            }
            Op::OmapSetKeys(_, o, kv) => objs.entry(o.clone()).or_default().omap.extend(kv.clone()),
            Op::OmapRemoveKeys(_, o, keys) => {
                let obj = objs.entry(o.clone()).or_default();
                for k in keys {
                    obj.omap.remove(k);
                }
            }
            Op::OmapRemoveRange {
                oid, start, end, ..
            } => {
                objs.entry(oid.clone())
                    .or_default()
                    .omap
                    .retain(|k, _| !(k >= start && k < end));
            }
            Op::OmapClear(_, o) => {
                let obj = objs.entry(o.clone()).or_default();
                obj.omap.clear();
                obj.omap_header = Bytes::new();
            }
            Op::OmapSetHeader(_, o, h) => {
                objs.entry(o.clone()).or_default().omap_header = h.clone()
            }
            Op::CreateCollection(_) | Op::RemoveCollection(_) | Op::SplitCollection { .. } => {}
        }
        true
    }
}

/// A small deterministic PRNG (SplitMix64): tests must be reproducible from a seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `1/n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

/// Generates random transactions over a small name space so that ops collide.
#[derive(Debug, Clone)]
pub struct TxnGen {
    rng: Rng,
    /// Largest write, in bytes (writes above 64 KiB exercise copy-on-write paths).
    pub write_bytes_max: u64,
    /// Objects are placed below this offset (plus the write length).
    pub offset_max: u64,
    /// Transactions touch collections `pool.0` and `pool.7` (default pool 1).
    pub pool: u64,
}

impl TxnGen {
    /// A generator from `seed` with default sizes.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Rng::new(seed),
            write_bytes_max: 160 * 1024,
            offset_max: 96 * 1024,
            pool: 1,
        }
    }

    fn coll(&mut self) -> CollectionId {
        CollectionId::new(self.pool, [0, 7][self.rng.below(2) as usize])
    }

    fn obj(&mut self) -> ObjectKey {
        let i = self.rng.below(6);
        // Two names share a hash, so ordering by name within a hash is exercised.
        ObjectKey::new(
            [0x10, 0x10, 0x8000_0000, 3, 0xffff_ffff, 42][i as usize],
            format!("obj{i}"),
        )
    }

    fn bytes(&mut self, len: u64) -> Bytes {
        let seed = self.rng.next_u64();
        let mut r = Rng::new(seed);
        // Runs of repeated bytes: easy to read in a failing diff.
        let mut v = Vec::with_capacity(len as usize);
        while (v.len() as u64) < len {
            let b = r.next_u64() as u8;
            let run = 1 + r.below(512) as usize;
            v.extend(std::iter::repeat_n(b, run.min(len as usize - v.len())));
        }
        Bytes::from(v)
    }

    fn small(&mut self) -> Bytes {
        let n = self.rng.below(24);
        self.bytes(n)
    }

    fn len(&mut self) -> u64 {
        match self.rng.below(4) {
            0 => self.rng.below(self.write_bytes_max + 1),
            1 => 4096 * (1 + self.rng.below(4)),
            _ => self.rng.below(9000),
        }
    }

    fn op(&mut self) -> Op {
        let c = self.coll();
        let o = self.obj();
        match self.rng.below(20) {
            0 => Op::CreateCollection(c),
            1 if self.rng.one_in(4) => Op::RemoveCollection(c),
            2 => Op::Touch(c, o),
            3..=6 => {
                let offset = self.rng.below(self.offset_max);
                let len = self.len();
                Op::Write {
                    coll: c,
                    oid: o,
                    offset,
                    data: self.bytes(len),
                }
            }
            7 => Op::Zero {
                coll: c,
                oid: o,
                offset: self.rng.below(self.offset_max),
                len: self.len(),
            },
            8 => Op::Truncate {
                coll: c,
                oid: o,
                size: self.rng.below(self.offset_max + 8192),
            },
            9 => Op::Remove(c, o),
            10 => Op::Clone {
                coll: c,
                src: o,
                dst: self.obj(),
            },
            11 => Op::CloneRange {
                coll: c,
                src: o,
                dst: self.obj(),
                src_offset: self.rng.below(self.offset_max),
                len: self.len(),
                dst_offset: self.rng.below(self.offset_max),
            },
            12 => {
                let n = format!("x{}", self.rng.below(4));
                Op::SetXattrs(c, o, BTreeMap::from([(n, self.small())]))
            }
            13 => Op::RemoveXattr(c, o, format!("x{}", self.rng.below(4))),
            14 => {
                let mut kv = BTreeMap::new();
                for _ in 0..1 + self.rng.below(4) {
                    kv.insert(
                        Bytes::from(format!("k{:02}", self.rng.below(20))),
                        self.small(),
                    );
                }
                Op::OmapSetKeys(c, o, kv)
            }
            15 => Op::OmapRemoveKeys(
                c,
                o,
                vec![Bytes::from(format!("k{:02}", self.rng.below(20)))],
            ),
            16 => {
                let a = self.rng.below(20);
                let b = self.rng.below(20);
                Op::OmapRemoveRange {
                    coll: c,
                    oid: o,
                    start: Bytes::from(format!("k{:02}", a.min(b))),
                    end: Bytes::from(format!("k{:02}", a.max(b))),
                }
            }
            17 if self.rng.one_in(3) => Op::OmapClear(c, o),
            17 => Op::OmapSetHeader(c, o, self.small()),
            18 => Op::Rename {
                coll: c,
                src: o,
                dst: self.obj(),
            },
            19 if self.rng.one_in(3) => {
                let bits = self.rng.below(6) as u32;
                Op::SplitCollection {
                    coll: c,
                    dst: self.coll(),
                    bits,
                    rem: self.rng.below(1 << bits) as u32,
                }
            }
            _ => {
                let offset = self.rng.below(self.offset_max);
                let n = 1 + self.rng.below(3000);
                Op::Write {
                    coll: c,
                    oid: o,
                    offset,
                    data: self.bytes(n),
                }
            }
        }
    }

    /// A random transaction of 1 to 4 ops (some will fail their preconditions).
    pub fn txn(&mut self) -> Transaction {
        let mut t = Transaction::new();
        for _ in 0..1 + self.rng.below(4) {
            t.push(self.op());
        }
        t
    }
}

//! Planning a change to one object of an EC pool: which stripes must be
//! read first (the partial stripes a write touches that hold old data)
//! and, given them, what each shard writes. Stripes a change covers whole
//! are never read, and stripes it does not touch are never rewritten:
//! a partial overwrite is read-modify-write of the touched stripes only.
//!
//! The logical ops are the object store's data ops (a write or zero past
//! the end extends the object; a truncate sets the size), applied in
//! order. The bytes of the last stripe past the object's size are kept
//! zero in every shard, so growing an object never rewrites old stripes:
//! zero data codes to zero parity.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use crate::{Codec, EcError, StripeLayout, chunk_crcs};

/// One data change to an object, as the object store defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataOp {
    /// Create the object if absent.
    Touch,
    /// Write bytes at an offset, extending the object if needed.
    Write {
        /// Logical offset.
        offset: u64,
        /// The bytes.
        data: bytes::Bytes,
    },
    /// Make a range read as zeros, extending the object if needed.
    Zero {
        /// Logical offset.
        offset: u64,
        /// Length.
        len: u64,
    },
    /// Set the object's size.
    Truncate(u64),
    /// Remove the object (later ops create it anew).
    Remove,
}

/// What the shards of one object do for a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardUpdate {
    /// Remove every shard's object first (the change began with a remove).
    pub remove_first: bool,
    /// Whether the object exists afterwards.
    pub exists: bool,
    /// The logical size afterwards.
    pub size: u64,
    /// Cut every shard to this length before the writes (the change
    /// shrank the object, perhaps to grow it again after): stripes past
    /// it must not keep old bytes.
    pub cut_to: Option<u64>,
    /// Each shard's length afterwards (whole stripes): extend with zeros
    /// or cut to it after the writes.
    pub shard_len: u64,
    /// Runs of rewritten stripes: the stripes and, for each of the
    /// `k + m` shards, its bytes for them (written at
    /// [`StripeLayout::shard_bytes`] of the run).
    pub writes: Vec<(Range<u64>, Vec<Vec<u8>>)>,
    /// The checksum of each rewritten chunk: stripe → one crc per shard.
    pub crcs: BTreeMap<u64, Vec<u32>>,
}

/// The state of a plan in progress.
struct Work<'a> {
    width: usize,
    /// Old bytes past this logical offset read as zero (a truncate or a
    /// remove came first).
    old_valid: u64,
    size: u64,
    exists: bool,
    remove_first: bool,
    dirty: BTreeMap<u64, Vec<u8>>,
    old: &'a dyn Fn(u64) -> Option<&'a [u8]>,
    needed: BTreeSet<u64>,
}

impl Work<'_> {
    /// The stripe's current bytes, loaded into the dirty set.
    fn stripe(&mut self, s: u64) -> Result<&mut Vec<u8>, EcError> {
        if !self.dirty.contains_key(&s) {
            let start = s * self.width as u64;
            let mut buf = vec![0u8; self.width];
            if start < self.old_valid {
                self.needed.insert(s);
                if let Some(old) = (self.old)(s) {
                    if old.len() != self.width {
                        return Err(EcError::Shape(format!(
                            "stripe {s} read back {} bytes, not {}",
                            old.len(),
                            self.width
                        )));
                    }
                    let keep = ((self.old_valid - start) as usize).min(self.width);
                    buf[..keep].copy_from_slice(&old[..keep]);
                }
            }
            self.dirty.insert(s, buf);
        }
        self.dirty
            .get_mut(&s)
            .ok_or_else(|| EcError::Shape(format!("stripe {s} vanished")))
    }

    /// Puts `bytes` (or zeros, when `None`) at `offset..offset+len`.
    fn fill(&mut self, offset: u64, len: u64, bytes: Option<&[u8]>) -> Result<(), EcError> {
        let w = self.width as u64;
        let mut pos = offset;
        let end = offset
            .checked_add(len)
            .ok_or_else(|| EcError::Shape("range past 2^64".into()))?;
        while pos < end {
            let s = pos / w;
            let within = (pos % w) as usize;
            let n = ((w - pos % w).min(end - pos)) as usize;
            let whole = within == 0 && n == self.width;
            // A stripe covered whole needs no old bytes.
            if whole && !self.dirty.contains_key(&s) {
                self.dirty.insert(s, vec![0u8; self.width]);
            }
            let buf = self.stripe(s)?;
            match bytes {
                Some(b) => {
                    let from = (pos - offset) as usize;
                    buf[within..within + n].copy_from_slice(&b[from..from + n]);
                }
                None => buf[within..within + n].fill(0),
            }
            pos += n as u64;
        }
        Ok(())
    }

    fn truncate(&mut self, to: u64) -> Result<(), EcError> {
        if to < self.size {
            let w = self.width as u64;
            self.dirty.retain(|s, _| s * w < to);
            if to % w != 0 {
                let within = (to % w) as usize;
                self.stripe(to / w)?[within..].fill(0);
            }
            self.old_valid = self.old_valid.min(to);
        }
        self.size = to;
        Ok(())
    }

    fn apply(&mut self, op: &DataOp) -> Result<(), EcError> {
        match op {
            DataOp::Touch => self.exists = true,
            DataOp::Write { offset, data } => {
                self.exists = true;
                let len = data.len() as u64;
                self.fill(*offset, len, Some(data))?;
                self.size = self.size.max(offset.saturating_add(len));
            }
            DataOp::Zero { offset, len } => {
                self.exists = true;
                // Zeros past the end need no stripe rewritten: they are
                // zero already. Within the object, they do.
                let inside = (*len).min(self.size.saturating_sub(*offset));
                if inside > 0 {
                    self.fill(*offset, inside, None)?;
                }
                self.size = self.size.max(offset.saturating_add(*len));
            }
            DataOp::Truncate(to) => {
                self.exists = true;
                self.truncate(*to)?;
            }
            DataOp::Remove => {
                self.dirty.clear();
                self.old_valid = 0;
                self.size = 0;
                self.exists = false;
                self.remove_first = true;
            }
        }
        Ok(())
    }
}

fn run<'a>(
    layout: StripeLayout,
    old_size: Option<u64>,
    ops: &[DataOp],
    old: &'a dyn Fn(u64) -> Option<&'a [u8]>,
) -> Result<Work<'a>, EcError> {
    let mut w = Work {
        width: layout.width() as usize,
        old_valid: old_size.unwrap_or(0),
        size: old_size.unwrap_or(0),
        exists: old_size.is_some(),
        remove_first: false,
        dirty: BTreeMap::new(),
        old,
        needed: BTreeSet::new(),
    };
    if w.width == 0 {
        return Err(EcError::Shape("a stripe of 0 bytes".into()));
    }
    for op in ops {
        w.apply(op)?;
    }
    Ok(w)
}

/// The stripes whose old bytes `ops` need, for an object of `old_size`
/// bytes (`None`: absent): those partially rewritten that hold data.
pub fn stripes_to_read(
    layout: StripeLayout,
    old_size: Option<u64>,
    ops: &[DataOp],
) -> Result<BTreeSet<u64>, EcError> {
    let none = |_| None;
    Ok(run(layout, old_size, ops, &none)?.needed)
}

/// What each shard writes for `ops`, given the old bytes of the stripes
/// [`stripes_to_read`] named (`old`: stripe → its `k × unit` bytes).
pub fn plan(
    codec: &Codec,
    old_size: Option<u64>,
    ops: &[DataOp],
    old: &BTreeMap<u64, Vec<u8>>,
) -> Result<ShardUpdate, EcError> {
    plan_with(codec, old_size, ops, &|s| old.get(&s).map(Vec::as_slice))
}

/// [`plan`] with the old stripes looked up by `old` (stripe → its bytes).
pub fn plan_with<'a>(
    codec: &Codec,
    old_size: Option<u64>,
    ops: &[DataOp],
    old: &'a dyn Fn(u64) -> Option<&'a [u8]>,
) -> Result<ShardUpdate, EcError> {
    let layout = codec.layout();
    let w = run(layout, old_size, ops, old)?;
    if let Some(s) = w.needed.iter().find(|s| old(**s).is_none()) {
        return Err(EcError::Shape(format!(
            "stripe {s} was needed and not read"
        )));
    }
    // Stripes past the new end are dropped (a truncate shortens shards).
    let last = w.size.div_ceil(layout.width());
    let mut writes = Vec::new();
    let mut crcs = BTreeMap::new();
    let mut run_start = None;
    let mut buf = Vec::new();
    let stripes: Vec<(u64, Vec<u8>)> = w.dirty.into_iter().filter(|(s, _)| *s < last).collect();
    let mut flush = |start: u64, end: u64, buf: &mut Vec<u8>| -> Result<(), EcError> {
        let shards = codec.encode(buf)?;
        for (i, s) in (start..end).enumerate() {
            let unit = layout.unit as usize;
            let per: Vec<u32> = shards
                .iter()
                .map(|sh| chunk_crcs(&sh[i * unit..(i + 1) * unit], layout.unit)[0])
                .collect();
            crcs.insert(s, per);
        }
        writes.push((start..end, shards));
        buf.clear();
        Ok(())
    };
    let mut prev = None;
    for (s, bytes) in stripes {
        if prev.is_some_and(|p: u64| p + 1 != s)
            && let (Some(start), Some(p)) = (run_start, prev)
        {
            flush(start, p + 1, &mut buf)?;
            run_start = None;
        }
        run_start.get_or_insert(s);
        buf.extend_from_slice(&bytes);
        prev = Some(s);
    }
    if let (Some(start), Some(p)) = (run_start, prev) {
        flush(start, p + 1, &mut buf)?;
    }
    let cut_to = (!w.remove_first && old_size.is_some_and(|o| w.old_valid < o))
        .then(|| layout.shard_len(w.old_valid));
    Ok(ShardUpdate {
        remove_first: w.remove_first,
        exists: w.exists,
        size: w.size,
        cut_to,
        shard_len: layout.shard_len(w.size),
        writes,
        crcs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An object as shards: what the OSDs would hold.
    #[derive(Debug, Default, Clone)]
    struct Shards {
        exists: bool,
        size: u64,
        bytes: Vec<Vec<u8>>,
    }

    impl Shards {
        fn stripe(&self, l: StripeLayout, s: u64) -> Vec<u8> {
            let c = Codec::new(l).unwrap();
            let r = l.shard_bytes(&(s..s + 1));
            let part = self
                .bytes
                .iter()
                .map(|b| Some(b[r.start as usize..r.end as usize].to_vec()))
                .collect();
            c.decode(part).unwrap()
        }

        fn apply(&mut self, l: StripeLayout, u: &ShardUpdate) {
            if u.remove_first {
                self.bytes = vec![Vec::new(); l.shards()];
            }
            self.bytes.resize(l.shards(), Vec::new());
            if let Some(cut) = u.cut_to {
                for b in &mut self.bytes {
                    b.truncate(cut as usize);
                }
            }
            for (stripes, parts) in &u.writes {
                let r = l.shard_bytes(stripes);
                for (b, p) in self.bytes.iter_mut().zip(parts) {
                    if b.len() < r.end as usize {
                        b.resize(r.end as usize, 0);
                    }
                    b[r.start as usize..r.end as usize].copy_from_slice(p);
                }
            }
            for b in &mut self.bytes {
                b.resize(u.shard_len as usize, 0);
            }
            self.exists = u.exists;
            self.size = u.size;
        }

        fn logical(&self, l: StripeLayout) -> Vec<u8> {
            let c = Codec::new(l).unwrap();
            let mut d = c
                .decode(self.bytes.iter().cloned().map(Some).collect())
                .unwrap();
            d.truncate(self.size as usize);
            d
        }
    }

    /// The object store's meaning of the ops, on a plain buffer.
    fn model(obj: &mut Option<Vec<u8>>, op: &DataOp) {
        match op {
            DataOp::Touch => {
                obj.get_or_insert_with(Vec::new);
            }
            DataOp::Write { offset, data } => {
                let o = obj.get_or_insert_with(Vec::new);
                let end = *offset as usize + data.len();
                if o.len() < end {
                    o.resize(end, 0);
                }
                o[*offset as usize..end].copy_from_slice(data);
            }
            DataOp::Zero { offset, len } => {
                let o = obj.get_or_insert_with(Vec::new);
                let end = (*offset + *len) as usize;
                if o.len() < end {
                    o.resize(end, 0);
                }
                o[*offset as usize..end].fill(0);
            }
            DataOp::Truncate(to) => obj.get_or_insert_with(Vec::new).resize(*to as usize, 0),
            DataOp::Remove => *obj = None,
        }
    }

    fn step(l: StripeLayout, shards: &mut Shards, ops: &[DataOp]) -> BTreeSet<u64> {
        let c = Codec::new(l).unwrap();
        let old_size = shards.exists.then_some(shards.size);
        let need = stripes_to_read(l, old_size, ops).unwrap();
        let old = need.iter().map(|s| (*s, shards.stripe(l, *s))).collect();
        let u = plan(&c, old_size, ops, &old).unwrap();
        // Every chunk written carries its checksum.
        for (stripes, parts) in &u.writes {
            for (i, s) in stripes.clone().enumerate() {
                let unit = l.unit as usize;
                let want: Vec<u32> = parts
                    .iter()
                    .map(|p| crc32c::crc32c(&p[i * unit..(i + 1) * unit]))
                    .collect();
                assert_eq!(u.crcs[&s], want);
            }
        }
        shards.apply(l, &u);
        need
    }

    #[test]
    fn only_partial_stripes_with_old_data_are_read() {
        let l = StripeLayout::new(2, 1, 4);
        let mut sh = Shards::default();
        // A new object: nothing to read.
        let w = |offset, n: usize| DataOp::Write {
            offset,
            data: vec![7; n].into(),
        };
        assert!(step(l, &mut sh, &[w(0, 20)]).is_empty());
        assert_eq!(sh.size, 20);
        assert_eq!(sh.bytes[0].len(), 12); // three stripes of 8
        // An aligned overwrite of whole stripes reads nothing.
        assert!(step(l, &mut sh, &[w(8, 8)]).is_empty());
        // A 1-byte overwrite reads its one stripe.
        assert_eq!(step(l, &mut sh, &[w(9, 1)]), BTreeSet::from([1]));
        // Spanning two partial stripes reads both, not the ones between.
        assert_eq!(step(l, &mut sh, &[w(3, 11)]), BTreeSet::from([0, 1]));
        // An append at the end reads the last partial stripe only.
        assert_eq!(step(l, &mut sh, &[w(20, 6)]), BTreeSet::from([2]));
        // Growing by truncate rewrites nothing; shrinking rewrites the
        // stripe it cuts.
        let before = sh.bytes.clone();
        assert!(step(l, &mut sh, &[DataOp::Truncate(100)]).is_empty());
        assert_eq!(sh.bytes[0][..before[0].len()], before[0][..]);
        assert_eq!(
            step(l, &mut sh, &[DataOp::Truncate(5)]),
            BTreeSet::from([0])
        );
        assert_eq!(sh.logical(l), vec![7; 5]);
        // Write-full (remove, then write) reads nothing.
        assert!(step(l, &mut sh, &[DataOp::Remove, w(0, 3)]).is_empty());
        assert_eq!(sh.logical(l), vec![7; 3]);
        assert!(
            plan(
                &Codec::new(l).unwrap(),
                Some(3),
                &[w(1, 1)],
                &BTreeMap::new()
            )
            .is_err()
        );
    }

    fn op() -> impl Strategy<Value = DataOp> {
        prop_oneof![
            Just(DataOp::Touch),
            (0u64..200, proptest::collection::vec(any::<u8>(), 0..90)).prop_map(
                |(offset, data)| DataOp::Write {
                    offset,
                    data: data.into()
                }
            ),
            (0u64..200, 0u64..90).prop_map(|(offset, len)| DataOp::Zero { offset, len }),
            (0u64..220).prop_map(DataOp::Truncate),
            Just(DataOp::Remove),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// Any sequence of changes, planned against the shards, leaves
        /// shards that decode to what the store's model holds.
        #[test]
        fn shards_follow_the_store_model(
            k in 2u32..5,
            m in 1u32..3,
            changes in proptest::collection::vec(proptest::collection::vec(op(), 1..4), 1..8),
        ) {
            let l = StripeLayout::new(k, m, 8);
            let mut sh = Shards::default();
            let mut want: Option<Vec<u8>> = None;
            for ops in &changes {
                step(l, &mut sh, ops);
                for o in ops {
                    model(&mut want, o);
                }
                prop_assert_eq!(sh.exists, want.is_some());
                if let Some(w) = &want {
                    prop_assert_eq!(&sh.logical(l), w);
                    prop_assert_eq!(sh.bytes[0].len() as u64, l.shard_len(w.len() as u64));
                }
                // Parity holds everywhere, also past the end.
                prop_assert!(Codec::new(l).unwrap().verify(&sh.bytes).unwrap());
            }
        }
    }
}

//! An object's data in memory as a rope: non-overlapping parts, each a
//! shared immutable buffer (`Bytes`), over a logical size; what no part
//! covers reads as zeros. A write keeps the buffer it was given (the
//! network's receive buffer for a large write) instead of copying it, and a
//! read inside one part hands out a slice of it, so MemStore moves data
//! without copying it on either side. Small writes are copied into a buffer
//! of their own, so a 4 KiB write does not keep a larger receive buffer
//! alive, and an object cut into more than [`PARTS_MAX`] parts is joined
//! into one.

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};

/// Writes shorter than this are copied into a buffer of their own.
const COPY_BELOW_BYTES: usize = 64 << 10;
/// An object with more parts than this is joined into one part.
const PARTS_MAX: usize = 256;

/// An object's data.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rope {
    size: u64,
    /// Offset → part; parts never overlap and never reach past `size`.
    parts: BTreeMap<u64, Bytes>,
}

impl Rope {
    /// The logical size.
    pub(crate) fn len(&self) -> u64 {
        self.size
    }

    /// Writes `data` at `offset`, growing the object to cover it.
    pub(crate) fn write(&mut self, offset: u64, data: &Bytes) {
        let end = offset + data.len() as u64;
        self.punch(offset, end);
        if !data.is_empty() {
            let part = if data.len() < COPY_BELOW_BYTES {
                Bytes::copy_from_slice(data)
            } else {
                data.clone()
            };
            self.parts.insert(offset, part);
        }
        self.size = self.size.max(end);
        if self.parts.len() > PARTS_MAX {
            let whole = self.read(0, self.size);
            self.parts.clear();
            self.parts.insert(0, whole);
        }
    }

    /// Zeros `[offset, offset + len)`, growing the object to cover it.
    pub(crate) fn zero(&mut self, offset: u64, len: u64) {
        self.punch(offset, offset + len);
        self.size = self.size.max(offset + len);
    }

    /// Sets the size: data past it is dropped, a larger size reads zeros.
    pub(crate) fn truncate(&mut self, size: u64) {
        self.punch(size, u64::MAX);
        self.size = size;
    }

    /// `[offset, offset + len)` (the caller keeps it within the size): a
    /// slice of one part when one part holds it all, else a new buffer.
    pub(crate) fn read(&self, offset: u64, len: u64) -> Bytes {
        if len == 0 {
            return Bytes::new();
        }
        let end = offset + len;
        if let Some((&at, part)) = self.parts.range(..=offset).next_back()
            && at + part.len() as u64 >= end
        {
            return part.slice(usize_of(offset - at)..usize_of(end - at));
        }
        let mut out = BytesMut::zeroed(usize_of(len));
        for (at, part) in self.overlapping(offset, end) {
            let from = offset.max(at);
            let to = end.min(at + part.len() as u64);
            out[usize_of(from - offset)..usize_of(to - offset)]
                .copy_from_slice(&part[usize_of(from - at)..usize_of(to - at)]);
        }
        out.freeze()
    }

    /// The ranges of `[start, end)` that parts hold, joined where they touch.
    pub(crate) fn allocated(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        if start >= end {
            return out;
        }
        for (at, part) in self.overlapping(start, end) {
            let from = at.max(start);
            let to = (at + part.len() as u64).min(end);
            match out.last_mut() {
                Some((o, l)) if *o + *l == from => *l += to - from,
                _ => out.push((from, to - from)),
            }
        }
        out
    }

    /// The parts that overlap `[start, end)`, by offset.
    fn overlapping(&self, start: u64, end: u64) -> Vec<(u64, Bytes)> {
        let mut found: Vec<(u64, Bytes)> = self
            .parts
            .range(..end)
            .rev()
            .take_while(|(at, part)| **at + part.len() as u64 > start)
            .map(|(at, part)| (*at, part.clone()))
            .collect();
        found.reverse();
        found
    }

    /// Removes the data in `[start, end)`, keeping what parts hold outside it.
    fn punch(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        for (at, part) in self.overlapping(start, end) {
            self.parts.remove(&at);
            let part_end = at + part.len() as u64;
            if at < start {
                self.parts.insert(at, part.slice(..usize_of(start - at)));
            }
            if part_end > end {
                self.parts.insert(end, part.slice(usize_of(end - at)..));
            }
        }
    }
}

/// Two ropes are equal when they read the same, however they are cut.
impl PartialEq for Rope {
    fn eq(&self, other: &Self) -> bool {
        self.size == other.size && self.read(0, self.size) == other.read(0, other.size)
    }
}

impl Eq for Rope {}

// Offsets were validated against OBJECT_SIZE_MAX (1 TiB), which fits usize on 64-bit.
fn usize_of(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain byte vector doing the same operations: what a rope must read as.
    #[derive(Default)]
    struct Model(Vec<u8>);

    impl Model {
        fn write(&mut self, offset: u64, data: &[u8]) {
            let end = offset as usize + data.len();
            if self.0.len() < end {
                self.0.resize(end, 0);
            }
            self.0[offset as usize..end].copy_from_slice(data);
        }
        fn zero(&mut self, offset: u64, len: u64) {
            let end = (offset + len) as usize;
            if self.0.len() < end {
                self.0.resize(end, 0);
            }
            self.0[offset as usize..end].fill(0);
        }
    }

    fn rng(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    #[test]
    fn random_writes_zeros_and_truncates_read_as_a_flat_buffer_does() {
        for round in 1..=40u64 {
            let mut seed = round * 0x9e37_79b9;
            let (mut rope, mut model) = (Rope::default(), Model::default());
            for step in 0..300 {
                let offset = rng(&mut seed) % 300_000;
                match rng(&mut seed) % 10 {
                    0 => {
                        let size = rng(&mut seed) % 320_000;
                        rope.truncate(size);
                        model.0.resize(size as usize, 0);
                    }
                    1 => {
                        let len = rng(&mut seed) % 100_000;
                        rope.zero(offset, len);
                        model.zero(offset, len);
                    }
                    _ => {
                        // Small (copied) and large (kept) writes.
                        let len = if step % 3 == 0 {
                            70_000
                        } else {
                            rng(&mut seed) % 9_000
                        };
                        let data: Vec<u8> = (0..len).map(|i| (i + step) as u8).collect();
                        rope.write(offset, &Bytes::from(data.clone()));
                        model.write(offset, &data);
                    }
                }
                assert_eq!(
                    rope.len(),
                    model.0.len() as u64,
                    "round {round} step {step}"
                );
                let a = rng(&mut seed) % (rope.len() + 1);
                let n = rng(&mut seed) % (rope.len() - a + 1);
                assert_eq!(
                    &rope.read(a, n)[..],
                    &model.0[a as usize..(a + n) as usize],
                    "round {round} step {step}"
                );
                assert!(rope.parts.len() <= PARTS_MAX);
                assert!(
                    rope.parts
                        .iter()
                        .all(|(at, p)| !p.is_empty() && at + p.len() as u64 <= rope.len())
                );
            }
            assert_eq!(&rope.read(0, rope.len())[..], &model.0[..]);
        }
    }

    #[test]
    fn a_large_write_is_kept_and_read_back_without_a_copy() {
        let data = Bytes::from(vec![7u8; 1 << 20]);
        let mut rope = Rope::default();
        rope.write(4096, &data);
        let back = rope.read(4096 + 10, 1000);
        assert_eq!(back.as_ptr(), data[10..].as_ptr());
        // A small write is copied: it does not point into the caller's buffer.
        let small = Bytes::from(vec![1u8; 100]);
        rope.write(0, &small);
        assert_ne!(rope.read(0, 100).as_ptr(), small.as_ptr());
    }

    #[test]
    fn ropes_are_equal_when_they_read_the_same() {
        let mut a = Rope::default();
        a.write(0, &Bytes::from(vec![1u8; 10]));
        let mut b = Rope::default();
        b.write(0, &Bytes::from(vec![1u8; 5]));
        b.write(5, &Bytes::from(vec![1u8; 5]));
        assert_eq!(a, b);
        b.zero(9, 1);
        assert_ne!(a, b);
    }
}

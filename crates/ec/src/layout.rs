//! Where an object's bytes live in an EC pool: stripes of `k` chunks of
//! `unit` bytes, chunk `i` of each stripe in shard `i`.

use std::ops::Range;

/// The stripe geometry of an EC pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripeLayout {
    /// Data chunks per stripe.
    pub k: u32,
    /// Coding chunks per stripe.
    pub m: u32,
    /// Bytes of one chunk (the profile's `stripe_unit`).
    pub unit: u32,
}

impl StripeLayout {
    /// The layout of `k + m` chunks of `unit` bytes.
    pub fn new(k: u32, m: u32, unit: u32) -> Self {
        StripeLayout { k, m, unit }
    }

    /// Bytes of object data in one stripe: `k × unit`.
    pub fn width(&self) -> u64 {
        u64::from(self.k) * u64::from(self.unit)
    }

    /// Shards of a PG: `k + m`.
    pub fn shards(&self) -> usize {
        (self.k + self.m) as usize
    }

    /// The stripes a logical byte range touches (empty for an empty range).
    pub fn stripes(&self, offset: u64, len: u64) -> Range<u64> {
        if len == 0 || self.width() == 0 {
            return 0..0;
        }
        let w = self.width();
        let end = offset.saturating_add(len);
        offset / w..end.div_ceil(w)
    }

    /// The logical bytes of a range of stripes.
    pub fn logical_bytes(&self, stripes: &Range<u64>) -> Range<u64> {
        let w = self.width();
        stripes.start.saturating_mul(w)..stripes.end.saturating_mul(w)
    }

    /// The bytes of a range of stripes within every shard.
    pub fn shard_bytes(&self, stripes: &Range<u64>) -> Range<u64> {
        let u = u64::from(self.unit);
        stripes.start.saturating_mul(u)..stripes.end.saturating_mul(u)
    }

    /// How long each shard of an object of `size` logical bytes is: whole
    /// stripes, the last padded with zeros.
    pub fn shard_len(&self, size: u64) -> u64 {
        if self.width() == 0 {
            return 0;
        }
        size.div_ceil(self.width()) * u64::from(self.unit)
    }

    /// Whether a range starts and ends on stripe boundaries.
    pub fn is_aligned(&self, offset: u64, len: u64) -> bool {
        let w = self.width();
        w != 0 && offset % w == 0 && len % w == 0
    }

    /// The data shard and the offset within it that hold logical byte `offset`.
    pub fn locate(&self, offset: u64) -> (usize, u64) {
        let (w, u) = (self.width(), u64::from(self.unit));
        if w == 0 {
            return (0, 0);
        }
        let stripe = offset / w;
        let within = offset % w;
        ((within / u) as usize, stripe * u + within % u)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_map_to_whole_stripes_and_the_same_bytes_of_every_shard() {
        let l = StripeLayout::new(3, 1, 4096);
        assert_eq!(l.width(), 12288);
        assert_eq!(l.stripes(0, 0), 0..0);
        assert_eq!(l.stripes(0, 1), 0..1);
        assert_eq!(l.stripes(12287, 1), 0..1);
        assert_eq!(l.stripes(12287, 2), 0..2);
        assert_eq!(l.stripes(12288, 12288), 1..2);
        assert_eq!(
            l.stripes(u64::MAX - 1, 1),
            (u64::MAX - 1) / 12288..u64::MAX / 12288 + 1
        );
        assert_eq!(l.logical_bytes(&(1..3)), 12288..36864);
        assert_eq!(l.shard_bytes(&(1..3)), 4096..12288);
        assert_eq!(l.shard_len(0), 0);
        assert_eq!(l.shard_len(1), 4096);
        assert_eq!(l.shard_len(12288), 4096);
        assert_eq!(l.shard_len(12289), 8192);
        assert!(l.is_aligned(12288, 24576));
        assert!(!l.is_aligned(4096, 12288));
        assert_eq!(l.locate(0), (0, 0));
        assert_eq!(l.locate(4097), (1, 1));
        assert_eq!(l.locate(12288 + 8192 + 5), (2, 4096 + 5));
    }
}

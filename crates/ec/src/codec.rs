//! The Reed–Solomon codec over GF(2^8): a stripe's `k` data chunks give
//! its `m` coding chunks, and any `k` chunks of a stripe give back the
//! rest. Work is done on whole shards at once (chunk `i` of many stripes
//! laid end to end): the code is the same byte by byte, so one call codes
//! every stripe of a write.

use reed_solomon_erasure::galois_8::ReedSolomon;

use crate::{EcError, StripeLayout};

/// The codec of one layout.
#[derive(Debug)]
pub struct Codec {
    layout: StripeLayout,
    rs: ReedSolomon,
}

fn shape(msg: impl Into<String>) -> EcError {
    EcError::Shape(msg.into())
}

/// The checksum (crc32c) of each `unit`-byte chunk of a shard, in order;
/// a short last chunk is checksummed as it is.
pub fn chunk_crcs(shard: &[u8], unit: u32) -> Vec<u32> {
    shard
        .chunks(unit.max(1) as usize)
        .map(crc32c::crc32c)
        .collect()
}

impl Codec {
    /// The codec of `layout`.
    pub fn new(layout: StripeLayout) -> Result<Self, EcError> {
        if layout.unit == 0 {
            return Err(shape("a chunk must hold at least one byte"));
        }
        let rs = ReedSolomon::new(layout.k as usize, layout.m as usize)
            .map_err(|e| shape(format!("k={} m={}: {e:?}", layout.k, layout.m)))?;
        Ok(Codec { layout, rs })
    }

    /// Its layout.
    pub fn layout(&self) -> StripeLayout {
        self.layout
    }

    /// Cuts whole stripes of object data into the `k + m` shards' bytes:
    /// `data` must be a whole number of stripes (pad the last with zeros).
    pub fn encode(&self, data: &[u8]) -> Result<Vec<Vec<u8>>, EcError> {
        let width = self.layout.width() as usize;
        if data.len() % width != 0 {
            return Err(shape(format!(
                "{} bytes are not whole stripes of {width}",
                data.len()
            )));
        }
        let (k, unit) = (self.layout.k as usize, self.layout.unit as usize);
        let per_shard = data.len() / k;
        let mut shards = vec![vec![0u8; per_shard]; self.layout.shards()];
        for (s, stripe) in data.chunks_exact(width).enumerate() {
            for (i, chunk) in stripe.chunks_exact(unit).enumerate() {
                shards[i][s * unit..(s + 1) * unit].copy_from_slice(chunk);
            }
        }
        if per_shard > 0 {
            self.rs
                .encode(&mut shards)
                .map_err(|e| shape(format!("{e:?}")))?;
        }
        Ok(shards)
    }

    fn check<T: AsRef<[u8]>>(&self, shards: &[Option<T>]) -> Result<usize, EcError> {
        if shards.len() != self.layout.shards() {
            return Err(shape(format!(
                "{} shards given, the layout has {}",
                shards.len(),
                self.layout.shards()
            )));
        }
        let mut lens = shards.iter().flatten().map(|s| s.as_ref().len());
        let len = lens.next().unwrap_or(0);
        if lens.any(|l| l != len) || len % self.layout.unit as usize != 0 {
            return Err(shape("shards of unequal or partial-chunk length"));
        }
        let have = shards.iter().filter(|s| s.is_some()).count();
        if have < self.layout.k as usize {
            return Err(EcError::TooFewShards {
                have,
                k: self.layout.k as usize,
            });
        }
        Ok(len)
    }

    /// Rebuilds every missing shard (data and coding) from any `k` present.
    pub fn rebuild(&self, shards: &mut [Option<Vec<u8>>]) -> Result<(), EcError> {
        if self.check(shards)? == 0 {
            for s in shards.iter_mut() {
                s.get_or_insert_with(Vec::new);
            }
            return Ok(());
        }
        self.rs
            .reconstruct(shards)
            .map_err(|e| shape(format!("{e:?}")))
    }

    /// The object data the shards hold: missing data shards are rebuilt
    /// from any `k` present, then the stripes are laid end to end. With
    /// every data shard present the shards are only read (one copy, into
    /// the result).
    pub fn decode<T: AsRef<[u8]>>(&self, shards: Vec<Option<T>>) -> Result<Vec<u8>, EcError> {
        let len = self.check(&shards)?;
        let k = self.layout.k as usize;
        if len > 0 && shards[..k].iter().any(Option::is_none) {
            let mut owned: Vec<Option<Vec<u8>>> = shards
                .into_iter()
                .map(|s| s.map(|b| b.as_ref().to_vec()))
                .collect();
            self.rs
                .reconstruct_data(&mut owned)
                .map_err(|e| shape(format!("{e:?}")))?;
            return Ok(self.interleave(&owned, len));
        }
        Ok(self.interleave(&shards, len))
    }

    /// The data shards' chunks (`len` bytes each) laid out stripe by stripe.
    fn interleave<T: AsRef<[u8]>>(&self, shards: &[Option<T>], len: usize) -> Vec<u8> {
        let k = self.layout.k as usize;
        let unit = self.layout.unit as usize;
        let mut out = vec![0u8; len * k];
        let width = unit * k;
        for (i, shard) in shards.iter().take(k).enumerate() {
            let shard = shard.as_ref().map_or(&[][..], AsRef::as_ref);
            for (s, chunk) in shard.chunks_exact(unit).enumerate() {
                out[s * width + i * unit..s * width + (i + 1) * unit].copy_from_slice(chunk);
            }
        }
        out
    }

    /// Whether the coding shards agree with the data shards (deep scrub).
    pub fn verify(&self, shards: &[Vec<u8>]) -> Result<bool, EcError> {
        let opt: Vec<Option<Vec<u8>>> = shards.iter().cloned().map(Some).collect();
        if self.check(&opt)? == 0 {
            return Ok(true);
        }
        self.rs.verify(shards).map_err(|e| shape(format!("{e:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn data(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn shards_hold_chunk_i_of_every_stripe_and_decode_back() {
        let l = StripeLayout::new(2, 1, 4);
        let c = Codec::new(l).unwrap();
        let d = b"aaaabbbbccccdddd".to_vec();
        let s = c.encode(&d).unwrap();
        assert_eq!(s[0], b"aaaacccc");
        assert_eq!(s[1], b"bbbbdddd");
        assert_eq!(s[2].len(), 8);
        assert!(c.verify(&s).unwrap());
        assert_eq!(c.decode(s.iter().cloned().map(Some).collect()).unwrap(), d);
        // Either data shard comes back from the other and the coding shard.
        assert_eq!(
            c.decode(vec![None, Some(s[1].clone()), Some(s[2].clone())])
                .unwrap(),
            d
        );
        assert_eq!(
            c.decode(vec![Some(s[0].clone()), None, Some(s[2].clone())])
                .unwrap(),
            d
        );
        assert_eq!(
            chunk_crcs(&s[0], 4),
            vec![crc32c::crc32c(b"aaaa"), crc32c::crc32c(b"cccc")]
        );
    }

    #[test]
    fn misshapen_input_is_an_error_not_a_panic() {
        let c = Codec::new(StripeLayout::new(3, 2, 8)).unwrap();
        assert!(matches!(c.encode(&[0; 23]), Err(EcError::Shape(_))));
        let ok = c.encode(&[7; 48]).unwrap();
        let mut s: Vec<_> = ok.iter().cloned().map(Some).collect();
        s[0] = None;
        s[1] = None;
        s[2] = None;
        assert_eq!(
            c.decode(s.clone()),
            Err(EcError::TooFewShards { have: 2, k: 3 })
        );
        let mut short: Vec<_> = ok.iter().cloned().map(Some).collect();
        if let Some(v) = short[4].as_mut() {
            v.pop();
        }
        assert!(matches!(c.decode(short), Err(EcError::Shape(_))));
        assert!(matches!(
            c.decode(vec![None::<Vec<u8>>; 4]),
            Err(EcError::Shape(_))
        ));
        assert!(Codec::new(StripeLayout::new(2, 1, 0)).is_err());
        // Empty objects code to empty shards.
        let empty = c.encode(&[]).unwrap();
        assert!(empty.iter().all(Vec::is_empty));
        let mut e: Vec<_> = vec![None, Some(vec![]), Some(vec![]), Some(vec![]), None];
        c.rebuild(&mut e).unwrap();
        assert!(e.iter().all(|s| s.as_deref() == Some(&[][..])));
        assert_eq!(c.decode(e).unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn a_flipped_bit_fails_verification() {
        let c = Codec::new(StripeLayout::new(4, 2, 16)).unwrap();
        let mut s = c.encode(&data(64 * 3, 1)).unwrap();
        assert!(c.verify(&s).unwrap());
        s[2][17] ^= 0x10;
        assert!(!c.verify(&s).unwrap());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Any m shards may be lost: the data decodes and every shard is
        /// rebuilt byte for byte.
        #[test]
        fn any_m_lost_shards_come_back(
            k in 2u32..9,
            m in 1u32..4,
            stripes in 0usize..5,
            seed in any::<u8>(),
            lost in proptest::collection::vec(any::<proptest::sample::Index>(), 0..4),
        ) {
            let l = StripeLayout::new(k, m, 64);
            let c = Codec::new(l).unwrap();
            let d = data(l.width() as usize * stripes, seed);
            let full = c.encode(&d).unwrap();
            let mut s: Vec<_> = full.iter().cloned().map(Some).collect();
            for i in lost.iter().take(m as usize) {
                s[i.index(l.shards())] = None;
            }
            prop_assert_eq!(c.decode(s.clone()).unwrap(), d);
            c.rebuild(&mut s).unwrap();
            let back: Vec<Vec<u8>> = s.into_iter().flatten().collect();
            prop_assert_eq!(back, full);
        }
    }
}

//! Per-bucket choice functions: given input `x` and replica rank `r`, pick
//! one item of a bucket. Straw2 is the one that matters; uniform and list are
//! here because Ceph maps may still contain them and because the legacy
//! local-fallback search uses the uniform permutation on any bucket.

use crate::hash::{hash32_3, hash32_4};
use crate::ln::crush_ln;
use crate::map::{Bucket, BucketAlg};

/// Picks an item of a non-empty bucket (`crush_bucket_choose`).
#[inline]
pub(crate) fn bucket_choose(b: &Bucket, x: u32, r: i32) -> i32 {
    match b.alg {
        BucketAlg::Straw2 => straw2_choose(b, x, r),
        BucketAlg::List => list_choose(b, x, r),
        BucketAlg::Uniform => perm_choose(b, x, r),
    }
}

/// Straw2: every item draws `ln(u) / weight` and the largest draw wins, which
/// makes each item's chance proportional to its weight and moves data only
/// to or from an item whose weight changed.
#[inline]
fn straw2_choose(b: &Bucket, x: u32, r: i32) -> i32 {
    let mut high = 0usize;
    let mut high_draw = 0i64;
    let mut div = Divider::default();
    for (i, (&item, &w)) in b.items.iter().zip(&b.weights).enumerate() {
        let draw = if w != 0 {
            let u = hash32_3(x, item as u32, r as u32) & 0xffff;
            // ln(u) - 2^48 is in [-2^48, 0]; C divides it by w rounding
            // toward zero, which is the negated unsigned quotient.
            let neg_ln = 0x1_0000_0000_0000u64 - crush_ln(u);
            -(div.divide(neg_ln, w) as i64)
        } else {
            i64::MIN
        };
        if i == 0 || draw > high_draw {
            high = i;
            high_draw = draw;
        }
    }
    b.items.get(high).copied().unwrap_or(0)
}

/// Exact `n / w` for `n <= 2^48`, replacing the division by a multiply once
/// the same weight comes up twice in a row (buckets of equal items).
///
/// With `l = ceil(log2 w)` and `m = floor(2^(49 + l) / w) + 1`, Granlund and
/// Montgomery's bound gives `floor(n / w) = floor(n·m / 2^(49 + l))` for every
/// `n < 2^49`, so the result is bit-identical to the division.
#[derive(Default)]
struct Divider {
    last: u32,
    magic: Option<(u128, u32)>,
}

impl Divider {
    #[inline]
    fn divide(&mut self, n: u64, w: u32) -> u64 {
        if w != self.last {
            self.last = w;
            self.magic = None;
            return n / u64::from(w);
        }
        let (m, s) = *self.magic.get_or_insert_with(|| magic(w));
        ((u128::from(n) * m) >> s) as u64
    }
}

fn magic(w: u32) -> (u128, u32) {
    let l = 32 - (w - 1).leading_zeros();
    let s = 49 + l;
    ((1u128 << s) / u128::from(w) + 1, s)
}

fn list_choose(b: &Bucket, x: u32, r: i32) -> i32 {
    // sum_weights[i] in Ceph is the prefix sum of weights[0..=i].
    let mut sum = b.weight();
    for i in (0..b.items.len()).rev() {
        let item = b.items[i];
        let mut w = u64::from(hash32_4(x, item as u32, r as u32, b.id as u32) & 0xffff);
        w = (w * u64::from(sum)) >> 16;
        if w < u64::from(b.weights[i]) {
            return item;
        }
        sum = sum.wrapping_sub(b.weights[i]);
    }
    b.items.first().copied().unwrap_or(0)
}

/// A hashed permutation of the bucket's items; returns position `r mod size`.
pub(crate) fn perm_choose(b: &Bucket, x: u32, r: i32) -> i32 {
    let size = b.items.len() as u32;
    if size == 0 {
        return 0;
    }
    let pr = (r as u32) % size;
    let mut perm: Vec<u32> = (0..size).collect();
    for p in 0..=pr {
        if p + 1 < size {
            let i = hash32_3(x, b.id as u32, p) % (size - p);
            if i != 0 {
                perm.swap(p as usize, (p + i) as usize);
            }
        }
    }
    b.items[perm[pr as usize] as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn straw2(items: Vec<i32>, weights: Vec<u32>) -> Bucket {
        Bucket {
            id: -1,
            name: "b".into(),
            type_id: 1,
            alg: BucketAlg::Straw2,
            hash: 0,
            items,
            weights,
            class: None,
        }
    }

    #[test]
    fn zero_weight_item_is_never_chosen_unless_all_zero() {
        let b = straw2(vec![0, 1, 2], vec![0x10000, 0, 0x10000]);
        for x in 0..1000 {
            assert_ne!(bucket_choose(&b, x, 0), 1);
        }
        let z = straw2(vec![7, 8], vec![0, 0]);
        assert_eq!(bucket_choose(&z, 5, 0), 7);
    }

    #[test]
    fn straw2_follows_weights() {
        let b = straw2(vec![0, 1], vec![0x10000, 0x30000]);
        let ones = (0..40_000)
            .filter(|x| bucket_choose(&b, *x, 0) == 1)
            .count();
        assert!((29_000..31_000).contains(&ones), "{ones}");
    }

    #[test]
    fn reciprocal_division_is_exact() {
        let mut seed = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut ws: Vec<u32> = vec![
            1,
            2,
            3,
            7,
            0x8000,
            0xffff,
            0x10000,
            0x10001,
            0x2_8000,
            u32::MAX,
        ];
        ws.extend((0..200).map(|_| (next() as u32).max(1)));
        ws.extend((0..200).map(|_| ((next() as u32) >> 12).max(1)));
        for w in ws {
            let (m, s) = magic(w);
            let mut ns = vec![
                0u64,
                1,
                1 << 48,
                (1 << 48) - 1,
                u64::from(w),
                u64::from(w) - 1,
            ];
            ns.extend((0..2000).map(|_| next() % ((1 << 48) + 1)));
            let k = (1u64 << 48) / u64::from(w);
            ns.extend([k * u64::from(w), (k * u64::from(w)).saturating_sub(1)]);
            for n in ns {
                assert_eq!(
                    ((u128::from(n) * m) >> s) as u64,
                    n / u64::from(w),
                    "n {n} w {w}"
                );
            }
        }
    }

    #[test]
    fn perm_is_a_permutation() {
        let mut b = straw2(vec![10, 11, 12, 13, 14], vec![1; 5]);
        b.alg = BucketAlg::Uniform;
        for x in 0..50 {
            let mut seen: Vec<i32> = (0..5).map(|r| perm_choose(&b, x, r)).collect();
            seen.sort_unstable();
            assert_eq!(seen, vec![10, 11, 12, 13, 14]);
        }
    }
}

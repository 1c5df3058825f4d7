//! Ceph's integer approximation of `2^44 · log2(x + 1)` used by straw2.

use crate::ln_table::{LL, RH_LH};

/// `crush_ln(xin)`: 2^44 · log2(xin + 1) in fixed point, for `xin` in
/// `0..=0xffff`, computed exactly as Ceph does (table lookups, 64-bit
/// integer arithmetic, wrapping where C's unsigned arithmetic wraps).
#[inline]
pub fn crush_ln(xin: u32) -> u64 {
    let mut x = (xin & 0xffff) + 1;
    // Normalise so that bit 15 or bit 16 is set (x is 1..=0x10000), counting
    // the shifts: Ceph loops; the leading-zero count gives the same shift.
    let shift = x.leading_zeros().saturating_sub(16);
    x <<= shift;
    let iexpon = 15 - u64::from(shift);
    let index1 = ((x >> 8) << 1) as usize;
    // RH ≈ 2^56 / index1, LH ≈ 2^48 · log2(index1 / 256).
    let rh = RH_LH[index1 - 256] as u64;
    let lh = RH_LH[index1 + 1 - 256] as u64;
    // RH · x ≈ 2^48 · (2^15 + xf) with xf < 2^8.
    let xl64 = u64::from(x).wrapping_mul(rh) >> 48;
    let index2 = (xl64 as u32 & 0xff) as usize;
    let ll = LL[index2] as u64;
    let lh = lh.wrapping_add(ll) >> (48 - 12 - 32);
    (iexpon << (12 + 32)).wrapping_add(lh)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The tables are Ceph's values (see ln_table.rs). These tests re-derive each
    // entry from the formula in crush_ln_table.h so that a transcription error
    // cannot go unnoticed, and pin down where Ceph's table is not the formula.
    #[test]
    fn rh_is_rounded_up_reciprocal() {
        for k in 0..=128u128 {
            let num: u128 = 1 << 55;
            let want = num.div_ceil(128 + k);
            assert_eq!(RH_LH[2 * k as usize] as u128, want, "RH[{k}]");
        }
    }

    #[test]
    fn lh_is_log2_except_the_capped_last_entry() {
        for k in 0..128 {
            let want = 2f64.powi(48) * (1.0 + f64::from(k) / 128.0).log2();
            let got = RH_LH[2 * k as usize + 1] as f64;
            assert!((got - want).abs() <= 1.0, "LH[{k}] {got} vs {want}");
        }
        // log2(2) · 2^48 would be 2^48; Ceph stores 0xffff_0000_0000.
        assert_eq!(RH_LH[257], 0xffff_0000_0000);
    }

    /// Entries of LL that follow neither the formula nor the common offset.
    const LL_IRREGULAR: [usize; 44] = [
        0, 1, 56, 127, 134, 181, 184, 188, 193, 198, 199, 200, 203, 207, 210, 212, 216, 222, 225,
        227, 228, 229, 231, 233, 235, 236, 237, 238, 239, 240, 241, 243, 244, 245, 246, 247, 248,
        249, 250, 251, 252, 253, 254, 255,
    ];

    #[test]
    fn ll_is_offset_log2_with_known_irregular_entries() {
        // Most entries are 2^48·log2(1 + k/2^15) + 5_493_489_663.5 ± 0.5: the
        // generator added a constant. The listed ones differ; straw2 output
        // depends on them, so they stay exactly as Ceph ships them.
        let mut irregular = Vec::new();
        for (k, &v) in LL.iter().enumerate() {
            let f = 2f64.powi(48) * (1.0 + k as f64 / 32768.0).log2();
            let d = v as f64 - f - 5_493_489_663.5;
            if d.abs() > 0.5 {
                irregular.push(k);
            }
        }
        assert_eq!(irregular, LL_IRREGULAR);
        assert_eq!(LL[0], 0);
        assert_eq!(LL[1], 0x2_e2a6_0a00);
    }

    #[test]
    fn ln_endpoints_and_accuracy() {
        assert_eq!(crush_ln(0), 0);
        assert_eq!(crush_ln(0xffff), 0xffff_f000_0000);
        // Not monotone (the irregular LL entries see to that), but close to
        // 2^44·log2(u + 1) everywhere.
        for u in 0..=0xffffu32 {
            let want = 2f64.powi(44) * f64::from(u + 1).log2();
            // straw2 relies on this bound (its draws are never positive).
            assert!(crush_ln(u) <= 1 << 48);
            let got = crush_ln(u) as f64;
            assert!((got - want).abs() < 2f64.powi(44) * 0.001, "crush_ln({u})");
        }
    }
}

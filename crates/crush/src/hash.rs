//! Robert Jenkins' 32-bit mixing hash as CRUSH uses it (`rjenkins1`).
//!
//! Every placement decision goes through these functions, so they must equal
//! Ceph's `crush_hash32_*` bit for bit, including the seeds and the order in
//! which the inputs are mixed.

/// The only hash CRUSH defines (`hash 0` in the text format).
pub const HASH_RJENKINS1: u8 = 0;

const SEED: u32 = 1_315_423_911;
const X0: u32 = 231_232;
const Y0: u32 = 1232;

#[inline(always)]
fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*b).wrapping_sub(*c) ^ (*c >> 13);
    *b = b.wrapping_sub(*c).wrapping_sub(*a) ^ (*a << 8);
    *c = c.wrapping_sub(*a).wrapping_sub(*b) ^ (*b >> 13);
    *a = a.wrapping_sub(*b).wrapping_sub(*c) ^ (*c >> 12);
    *b = b.wrapping_sub(*c).wrapping_sub(*a) ^ (*a << 16);
    *c = c.wrapping_sub(*a).wrapping_sub(*b) ^ (*b >> 5);
    *a = a.wrapping_sub(*b).wrapping_sub(*c) ^ (*c >> 3);
    *b = b.wrapping_sub(*c).wrapping_sub(*a) ^ (*a << 10);
    *c = c.wrapping_sub(*a).wrapping_sub(*b) ^ (*b >> 15);
}

/// `crush_hash32(RJENKINS1, a)`.
pub fn hash32(a: u32) -> u32 {
    let mut a = a;
    let mut hash = SEED ^ a;
    let mut b = a;
    let (mut x, mut y) = (X0, Y0);
    mix(&mut b, &mut x, &mut hash);
    mix(&mut y, &mut a, &mut hash);
    hash
}

/// `crush_hash32_2(RJENKINS1, a, b)`.
#[inline]
pub fn hash32_2(a: u32, b: u32) -> u32 {
    let (mut a, mut b) = (a, b);
    let mut hash = SEED ^ a ^ b;
    let (mut x, mut y) = (X0, Y0);
    mix(&mut a, &mut b, &mut hash);
    mix(&mut x, &mut a, &mut hash);
    mix(&mut b, &mut y, &mut hash);
    hash
}

/// `crush_hash32_3(RJENKINS1, a, b, c)`.
#[inline]
pub fn hash32_3(a: u32, b: u32, c: u32) -> u32 {
    let (mut a, mut b, mut c) = (a, b, c);
    let mut hash = SEED ^ a ^ b ^ c;
    let (mut x, mut y) = (X0, Y0);
    mix(&mut a, &mut b, &mut hash);
    mix(&mut c, &mut x, &mut hash);
    mix(&mut y, &mut a, &mut hash);
    mix(&mut b, &mut x, &mut hash);
    mix(&mut y, &mut c, &mut hash);
    hash
}

/// `crush_hash32_4(RJENKINS1, a, b, c, d)` (used by list buckets).
pub fn hash32_4(a: u32, b: u32, c: u32, d: u32) -> u32 {
    let (mut a, mut b, mut c, mut d) = (a, b, c, d);
    let mut hash = SEED ^ a ^ b ^ c ^ d;
    let (mut x, mut y) = (X0, Y0);
    mix(&mut a, &mut b, &mut hash);
    mix(&mut c, &mut d, &mut hash);
    mix(&mut a, &mut x, &mut hash);
    mix(&mut y, &mut b, &mut hash);
    mix(&mut c, &mut x, &mut hash);
    mix(&mut y, &mut d, &mut hash);
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    // Reference values from Ceph's own crush_hash32_* (libceph-common, called
    // through ctypes by tests/fixtures/regen.sh).
    #[test]
    fn matches_ceph() {
        assert_eq!(hash32(0), 0x17c4_a80b);
        assert_eq!(hash32(12345), 0xcdac_21d6);
        assert_eq!(hash32_2(0, 0), 0x19ad_4ce9);
        assert_eq!(hash32_2(123, 4_294_967_294), 0xd1f4_bb61);
        assert_eq!(hash32_3(1, 2, 3), 0x735a_d42b);
        assert_eq!(hash32_3(u32::MAX, 4_294_967_291, 77), 0xfe39_343b);
        assert_eq!(hash32_4(1, 2, 3, 4), 0x696d_1f16);
    }
}

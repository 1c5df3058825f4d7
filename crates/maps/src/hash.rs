//! Object-name hashing and the stable modulo that turns a hash into a PG.
//! Both are persistent formats: changing them moves every object.

/// Ceph's `ceph_str_hash_rjenkins`: Bob Jenkins' lookup2 hash of the bytes.
pub fn str_hash_rjenkins(data: &[u8]) -> u32 {
    let mut a: u32 = 0x9e37_79b9;
    let mut b: u32 = a;
    let mut c: u32 = 0;
    let word = |k: &[u8]| u32::from_le_bytes([k[0], k[1], k[2], k[3]]);
    let mut chunks = data.chunks_exact(12);
    for k in &mut chunks {
        a = a.wrapping_add(word(&k[0..4]));
        b = b.wrapping_add(word(&k[4..8]));
        c = c.wrapping_add(word(&k[8..12]));
        mix(&mut a, &mut b, &mut c);
    }
    let rest = chunks.remainder();
    c = c.wrapping_add(data.len() as u32);
    // The tail fills a, then b, then c's upper three bytes (c's low byte holds
    // the length).
    for (i, &byte) in rest.iter().enumerate() {
        let v = u32::from(byte);
        match i {
            0..=3 => a = a.wrapping_add(v << (8 * i)),
            4..=7 => b = b.wrapping_add(v << (8 * (i - 4))),
            _ => c = c.wrapping_add(v << (8 * (i - 7))),
        }
    }
    mix(&mut a, &mut b, &mut c);
    c
}

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

/// Number of significant bits of `v` (Ceph's `cbits`).
pub fn cbits(v: u32) -> u32 {
    32 - v.leading_zeros()
}

/// The mask Ceph keeps beside `pg_num`: the smallest `2^n - 1 >= pg_num - 1`.
pub fn pg_mask(pg_num: u32) -> u32 {
    let bits = cbits(pg_num.saturating_sub(1));
    if bits >= 32 {
        u32::MAX
    } else {
        (1u32 << bits) - 1
    }
}

/// Ceph's `ceph_stable_mod`: like `x % b`, but when `b` grows by one only
/// one bucket's worth of inputs changes result.
pub fn stable_mod(x: u32, b: u32, bmask: u32) -> u32 {
    if x & bmask < b {
        x & bmask
    } else {
        x & (bmask >> 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Reference values from Ceph's ceph_str_hash_rjenkins (libceph-common).
    #[test]
    fn matches_ceph() {
        let cases: [(&[u8], u32); 8] = [
            (b"", 0xbd49_d10d),
            (b"a", 0x29ee_c818),
            (b"foo", 0x7fc1_f406),
            (b"obj-0", 0x7fdb_d869),
            (b"rbd_data.1f2e3d.0000000000000000", 0x0ff1_e4c4),
            (b"hello world!", 0x1ecc_b293),
            (b"abcdefghijklmnopqrstuvwxyz0123456789", 0x92c9_83c7),
            (b"ns\x1fkey", 0x5aff_ea4e),
        ];
        for (s, h) in cases {
            assert_eq!(str_hash_rjenkins(s), h, "{s:?}");
        }
    }

    #[test]
    fn stable_mod_and_masks() {
        assert_eq!(pg_mask(192), 255);
        assert_eq!(pg_mask(256), 255);
        assert_eq!(pg_mask(1), 0);
        assert_eq!(stable_mod(0x7fdb_d869, 192, 255), 0x69);
        assert_eq!(stable_mod(0xff, 192, 255), 0x7f);
        for x in 0..10_000 {
            assert!(stable_mod(x, 192, 255) < 192);
        }
    }
}

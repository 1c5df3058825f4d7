//! The crc32c of a read, folded from the per-block checksums the read has
//! just verified instead of a second pass over its bytes.
//!
//! For crc32c (as for any CRC with the usual initial value and final xor),
//! `crc(A ‖ B) = shift_|B|(crc(A)) ⊕ crc(B)`, where `shift_n` is linear over
//! GF(2): the crc of `A` followed by `n` zero bytes, without `A`'s own
//! pre/post-conditioning. For whole 4 KiB blocks `shift` is one fixed
//! 32×32 bit matrix, kept here as four 256-entry tables (one lookup per byte
//! of the crc); other lengths (at most the two partial blocks at a read's
//! ends) use the crate's general combine.

use std::sync::OnceLock;

use super::BLOCK;

/// `shift_BLOCK` as byte tables: `T[k][b]` is the shift of `b << 8k`.
fn tables() -> &'static [[u32; 256]; 4] {
    static T: OnceLock<[[u32; 256]; 4]> = OnceLock::new();
    T.get_or_init(|| {
        // The matrix's columns: the shift of each single bit (the general
        // combine with an empty second part is exactly the shift).
        let col: Vec<u32> = (0..32)
            .map(|i| crc32c::crc32c_combine(1 << i, 0, BLOCK))
            .collect();
        let mut t = [[0u32; 256]; 4];
        for (k, table) in t.iter_mut().enumerate() {
            for (b, slot) in table.iter_mut().enumerate() {
                *slot = (0..8)
                    .filter(|j| b & (1 << j) != 0)
                    .fold(0, |acc, j| acc ^ col[8 * k + j]);
            }
        }
        t
    })
}

/// The crc32c of `A ‖ B` from `crc(A)` and the crc of the 4 KiB block `B`.
pub(crate) fn append_block(crc: u32, block_crc: u32) -> u32 {
    let t = tables();
    let b = crc.to_le_bytes();
    t[0][b[0] as usize]
        ^ t[1][b[1] as usize]
        ^ t[2][b[2] as usize]
        ^ t[3][b[3] as usize]
        ^ block_crc
}

/// The crc32c of `A ‖ B` from `crc(A)`, `crc(B)` and `B`'s length.
pub(crate) fn append(crc: u32, piece_crc: u32, len: usize) -> u32 {
    if len == BLOCK {
        append_block(crc, piece_crc)
    } else {
        crc32c::crc32c_combine(crc, piece_crc, len)
    }
}

/// The crc32c of a block of zeros (a hole reads as one).
pub(crate) fn zero_block() -> u32 {
    static Z: OnceLock<u32> = OnceLock::new();
    *Z.get_or_init(|| crc32c::crc32c(&[0u8; BLOCK]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folded_block_crcs_equal_the_crc_of_the_whole() {
        let data: Vec<u8> = (0..BLOCK * 9 + 1000)
            .map(|i| (i * 31 % 251) as u8 ^ (i >> 12) as u8)
            .collect();
        for (start, end) in [
            (0, BLOCK * 9),
            (0, data.len()),
            (123, BLOCK * 4),
            (BLOCK, BLOCK * 2),
            (5, 6),
        ] {
            let mut crc = 0;
            let mut at = start;
            while at < end {
                let stop = ((at / BLOCK + 1) * BLOCK).min(end);
                let piece = &data[at..stop];
                crc = append(crc, crc32c::crc32c(piece), piece.len());
                at = stop;
            }
            assert_eq!(crc, crc32c::crc32c(&data[start..end]), "{start}..{end}");
        }
        assert_eq!(zero_block(), crc32c::crc32c(&vec![0u8; BLOCK]));
        assert_eq!(append_block(0, zero_block()), zero_block());
    }
}

//! Decimal weights <-> 16.16 fixed point, exactly as Ceph converts them, but
//! in integer arithmetic.
//!
//! Ceph reads a weight with `strtof` (round to nearest `f32`) and multiplies
//! by 0x10000, truncating; it prints `(float)w / 0x10000` with `%.3f`
//! (round half to even on the exact binary value). Both are reproduced here
//! without floating point so the result cannot depend on the platform.

/// Parses a non-negative decimal such as `1.000`, `0.5` or `12` into 16.16.
/// None if it is not a plain decimal or is too large.
pub fn parse_weight(s: &str) -> Option<u32> {
    let (int_part, frac_part) = match s.split_once('.') {
        Some((i, f)) => (i, f),
        None => (s, ""),
    };
    let int_part = int_part.strip_prefix('+').unwrap_or(int_part);
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    if !int_part
        .bytes()
        .chain(frac_part.bytes())
        .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    // Keep 30 significant digits at most: far beyond f32's precision.
    let digits: String = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    let mut scale = frac_part.len() as i32;
    let mut mant: u128 = 0;
    for (i, b) in digits.bytes().enumerate() {
        if i >= 30 {
            scale -= 1;
            continue;
        }
        mant = mant * 10 + u128::from(b - b'0');
    }
    if mant == 0 {
        return Some(0);
    }
    if !(0..=30).contains(&scale) || int_part.trim_start_matches('0').len() > 8 {
        return None;
    }
    // value = mant / 10^scale. Round to a 24-bit significand m·2^e (nearest,
    // ties to even) as strtof does, then w = trunc(m·2^(e+16)).
    let den = 10u128.pow(scale as u32);
    let mut shift: i32 = 0; // value·2^shift in [2^23, 2^24)
    while scaled_floor(mant, den, shift) >= 1 << 24 {
        shift -= 1;
    }
    while scaled_floor(mant, den, shift) < 1 << 23 {
        shift += 1;
    }
    let (q, rem_num, rem_den) = scaled_div(mant, den, shift);
    let twice = rem_num * 2;
    let mut m = q;
    if twice > rem_den || (twice == rem_den && q & 1 == 1) {
        m += 1;
    }
    let e = 16 - shift; // w = m · 2^e
    let w: u128 = if e >= 0 { m << e } else { m >> (-e) };
    u32::try_from(w).ok()
}

fn scaled_floor(mant: u128, den: u128, shift: i32) -> u128 {
    scaled_div(mant, den, shift).0
}

/// (floor(mant·2^shift / den), remainder numerator, denominator).
fn scaled_div(mant: u128, den: u128, shift: i32) -> (u128, u128, u128) {
    let (num, den) = if shift >= 0 {
        (mant << shift, den)
    } else {
        (mant, den << (-shift))
    };
    (num / den, num % den, den)
}

/// Formats 16.16 as Ceph's `%.3f` of `(float)w / 0x10000`.
pub fn format_weight(w: u32) -> String {
    // (float)w keeps 24 significant bits, rounding to nearest even.
    let bits = 32 - w.leading_zeros();
    let wf: u64 = if bits > 24 {
        let drop = bits - 24;
        let q = u64::from(w >> drop);
        let rem = u64::from(w) & ((1u64 << drop) - 1);
        let half = 1u64 << (drop - 1);
        let q = if rem > half || (rem == half && q & 1 == 1) {
            q + 1
        } else {
            q
        };
        q << drop
    } else {
        u64::from(w)
    };
    // wf / 65536 to three decimals, ties to even.
    let num = wf * 1000;
    let mut milli = num >> 16;
    let rem = num & 0xffff;
    if rem > 0x8000 || (rem == 0x8000 && milli & 1 == 1) {
        milli += 1;
    }
    format!("{}.{:03}", milli / 1000, milli % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_matches_strtof_times_65536() {
        for (s, w) in [
            ("1.000", 0x10000),
            ("0.5", 0x8000),
            ("0", 0),
            ("0.000", 0),
            ("2", 0x20000),
            ("0.100", 6553),
            ("0.300", 19660),
            ("3.640", 238551),
            ("100.001", 6553665),
        ] {
            assert_eq!(parse_weight(s), Some(w), "{s}");
        }
        assert_eq!(parse_weight("abc"), None);
        assert_eq!(parse_weight("-1"), None);
    }

    #[test]
    fn parse_agrees_with_f32_everywhere_we_try() {
        // The f32 path is what Ceph does; here it checks the integer path.
        for i in 0..200_000u32 {
            let s = format!("{}.{:03}", i / 1000, i % 1000);
            let f: f32 = s.parse().unwrap_or(0.0);
            let want = (f * 65536.0) as u32;
            assert_eq!(parse_weight(&s), Some(want), "{s}");
        }
    }

    #[test]
    fn format_matches_printf() {
        for w in (0..5_000_000u32)
            .step_by(997)
            .chain([0x10000, 0x8000, 0x2345_6789, u32::MAX])
        {
            let f = w as f32 / 65536.0;
            assert_eq!(format_weight(w), format!("{f:.3}"), "{w}");
        }
    }
}

//! The command line's one definition of each unit helper: sizes as people
//! type them (`4K`, `10G`, `512MiB`), bytes as Ceph prints them
//! (`1.2 KiB`), and the percentile every benchmark reports.

use anyhow::Context;

/// Parses a size as `rbd` and `rados` take them: a number with `K`, `M`,
/// `G` or `T` (binary multiples, optionally followed by `iB` or `B`), or
/// a plain number, counted in `default_unit` bytes (`B` after a plain
/// number means bytes).
pub fn parse_size(s: &str, default_unit: u64) -> anyhow::Result<u64> {
    let t = s.trim();
    // `B` after a number is bytes; after a unit (`MB`, `MiB`) it is that unit.
    let (t, bytes) = match t.strip_suffix("iB") {
        Some(u) => (u, None),
        None => match t.strip_suffix('B') {
            Some(u) => (u, Some(1)),
            None => (t, None),
        },
    };
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        Some('T' | 't') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, bytes.unwrap_or(default_unit)),
    };
    let n: u64 = num
        .trim()
        .parse()
        .with_context(|| format!("bad size {s:?}: a number with K, M, G or T"))?;
    n.checked_mul(mult)
        .with_context(|| format!("size {s:?} is too large"))
}

/// Bytes as Ceph prints them: `0 B`, `1.2 KiB`, `30 MiB`, `300 GiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 || v >= 10.0 || v.fract() == 0.0 {
        format!("{} {}", v.round() as u64, UNITS[unit])
    } else {
        let s = format!("{v:.1}");
        format!("{} {}", s.trim_end_matches(".0"), UNITS[unit])
    }
}

/// The `q` quantile (0 ≤ q ≤ 1) of `sorted` (ascending) by the
/// nearest-rank definition: the smallest sample with at least a share `q`
/// of the samples at or below it, the sample of rank ⌈q·n⌉. `q` = 0.5 is
/// the median of an odd count, `q` = 1 the largest; no samples give 0.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Sorts `samples` for [`percentile`] (NaNs last).
pub fn sorted(mut samples: Vec<f64>) -> Vec<f64> {
    samples.sort_by(f64::total_cmp);
    samples
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_rbd_and_rados_take_them() {
        assert_eq!(parse_size("4096", 1).unwrap(), 4096);
        assert_eq!(parse_size("10", 1 << 20).unwrap(), 10 << 20);
        assert_eq!(parse_size("10B", 1 << 20).unwrap(), 10);
        assert_eq!(parse_size("10G", 1 << 20).unwrap(), 10 << 30);
        assert_eq!(parse_size("512m", 1).unwrap(), 512 << 20);
        assert_eq!(parse_size("4KiB", 1).unwrap(), 4096);
        assert_eq!(parse_size("4MB", 1).unwrap(), 4 << 20);
        assert_eq!(parse_size("1T", 1).unwrap(), 1 << 40);
        assert_eq!(
            parse_size("512B", 1 << 20).unwrap(),
            512,
            "B after a number: bytes"
        );
        assert_eq!(parse_size("1MB", 1).unwrap(), 1 << 20);
        assert!(parse_size("B", 1).is_err());
        assert!(
            parse_size("lots", 1)
                .unwrap_err()
                .to_string()
                .contains("bad size")
        );
        assert!(parse_size("", 1).is_err());
        assert!(parse_size("-1K", 1).is_err());
        let big = parse_size("99999999999T", 1).unwrap_err().to_string();
        assert!(big.contains("too large"), "{big}");
    }

    #[test]
    fn bytes_read_as_ceph_prints_them() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1024), "1 KiB");
        assert_eq!(human_bytes(1229), "1.2 KiB");
        assert_eq!(human_bytes(30 << 20), "30 MiB");
        assert_eq!(human_bytes(300 << 30), "300 GiB");
        assert_eq!(human_bytes(u64::MAX), "16 EiB");
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 0.999), 100.0);
        assert_eq!(percentile(&v, 1.0), 100.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0], 0.5), 2.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
        assert_eq!(sorted(vec![3.0, 1.0, 2.0]), vec![1.0, 2.0, 3.0]);
    }
}

//! Encode and decode throughput of the Reed–Solomon candidates for erasure
//! coded pools (issue 16, point 2), one core, beside memcpy of the same
//! bytes in the same run.
//!
//! `cargo run --release` (in this directory). For each profile k+m and chunk
//! size: encode = k data chunks in, m parity chunks out; decode = the first
//! min(k, m) data chunks lost, rebuilt from the rest and the parity. GB/s
//! counts the k data chunks' bytes (the object bytes a write or a degraded
//! read moves), as Ceph's benchmarks do.

use std::hint::black_box;
use std::time::{Duration, Instant};

const PROFILES: [(usize, usize); 4] = [(2, 1), (3, 1), (4, 2), (8, 3)];
const CHUNKS: [usize; 4] = [4 << 10, 64 << 10, 256 << 10, 1 << 20];
const RUN: Duration = Duration::from_millis(300);

/// Runs `f` for about [`RUN`]; returns GB/s of `bytes` per call.
fn rate(bytes: usize, mut f: impl FnMut()) -> f64 {
    f();
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < RUN {
        f();
        n += 1;
    }
    (bytes as f64 * n as f64) / start.elapsed().as_secs_f64() / 1e9
}

fn data(k: usize, chunk: usize) -> Vec<Vec<u8>> {
    let mut x = 0x9E37_79B9u32;
    (0..k)
        .map(|_| {
            (0..chunk)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect()
        })
        .collect()
}

fn simd(k: usize, m: usize, d: &[Vec<u8>]) -> (f64, f64) {
    use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};
    let chunk = d[0].len();
    let mut enc = ReedSolomonEncoder::new(k, m, chunk).expect("encoder");
    let e = rate(k * chunk, || {
        for s in d {
            enc.add_original_shard(s).expect("add");
        }
        let r = enc.encode().expect("encode");
        black_box(r.recovery_iter().count());
    });
    for s in d {
        enc.add_original_shard(s).expect("add");
    }
    let parity: Vec<Vec<u8>> = enc
        .encode()
        .expect("encode")
        .recovery_iter()
        .map(<[u8]>::to_vec)
        .collect();
    let lost = k.min(m);
    let mut dec = ReedSolomonDecoder::new(k, m, chunk).expect("decoder");
    let dd = rate(k * chunk, || {
        for (i, s) in d.iter().enumerate().skip(lost) {
            dec.add_original_shard(i, s).expect("add");
        }
        for (i, p) in parity.iter().enumerate().take(lost) {
            dec.add_recovery_shard(i, p).expect("add");
        }
        let r = dec.decode().expect("decode");
        black_box(r.restored_original_iter().count());
    });
    // The rebuilt chunks are the lost ones.
    for (i, s) in d.iter().enumerate().skip(lost) {
        dec.add_original_shard(i, s).expect("add");
    }
    for (i, p) in parity.iter().enumerate().take(lost) {
        dec.add_recovery_shard(i, p).expect("add");
    }
    let r = dec.decode().expect("decode");
    for (i, s) in r.restored_original_iter() {
        assert_eq!(s, &d[i][..], "reed-solomon-simd rebuilt chunk {i} wrong");
    }
    (e, dd)
}

fn erasure(k: usize, m: usize, d: &[Vec<u8>]) -> (f64, f64) {
    use reed_solomon_erasure::galois_8::ReedSolomon;
    let chunk = d[0].len();
    let rs = ReedSolomon::new(k, m).expect("codec");
    let mut shards: Vec<Vec<u8>> = d.to_vec();
    shards.extend((0..m).map(|_| vec![0u8; chunk]));
    let e = rate(k * chunk, || {
        rs.encode(&mut shards).expect("encode");
        black_box(&shards);
    });
    let lost = k.min(m);
    let mut opt: Vec<Option<Vec<u8>>> = shards.iter().cloned().map(Some).collect();
    let dd = rate(k * chunk, || {
        for o in opt.iter_mut().take(lost) {
            *o = None;
        }
        rs.reconstruct_data(&mut opt).expect("decode");
        black_box(&opt);
    });
    for (i, o) in opt.iter().enumerate().take(k) {
        assert_eq!(
            o.as_deref(),
            Some(&d[i][..]),
            "reed-solomon-erasure rebuilt chunk {i} wrong"
        );
    }
    (e, dd)
}

fn main() {
    println!(
        "| k+m | chunk | memcpy GB/s | reed-solomon-simd encode / decode GB/s | reed-solomon-erasure (simd-accel) encode / decode GB/s |"
    );
    println!("|---|---|---|---|---|");
    for (k, m) in PROFILES {
        for chunk in CHUNKS {
            let d = data(k, chunk);
            let mut out = vec![vec![0u8; chunk]; k];
            let copy = rate(k * chunk, || {
                for (o, s) in out.iter_mut().zip(&d) {
                    o.copy_from_slice(s);
                }
                black_box(&out);
            });
            let (se, sd) = simd(k, m, &d);
            let (ee, ed) = erasure(k, m, &d);
            println!(
                "| {k}+{m} | {} KiB | {copy:.1} | {se:.2} / {sd:.2} | {ee:.2} / {ed:.2} |",
                chunk >> 10
            );
        }
    }
}

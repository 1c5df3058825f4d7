//! `shoal-sim`: run or replay simulation seeds.
//!
//! ```text
//! shoal-sim --seed 42 --verbose     # replay one seed, printing its trace
//! shoal-sim --seeds 0..1000         # a range; stops at the first failure
//! shoal-sim --seeds 0..100 --erasure 2+1   # with an erasure-coded pool
//! shoal-sim --seeds 0..100 --snapshots     # with the snapshot client
//! shoal-sim --seeds 0..100 --splits        # PGs split among the faults
//! shoal-sim --seeds 0..100 --black-holes   # links that drop silently, one way or both
//! ```

use std::process::ExitCode;

use shoal_sim::{SimConfig, run};

fn usage() -> ExitCode {
    eprintln!(
        "usage: shoal-sim (--seed N | --seeds A..B) [--verbose] [--faults-secs S] [--erasure K+M] [--snapshots] [--splits] [--black-holes] [--log-entries N] [--log-entries-clean N]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    // The daemons' own log lines, for a seed being replayed:
    // `SHOAL_SIM_LOG=osd=debug shoal-sim --seed N`.
    if let Ok(spec) = std::env::var("SHOAL_SIM_LOG")
        && let Err(e) = shoal_config::logging::init(&spec)
    {
        eprintln!("SHOAL_SIM_LOG: {e}");
        return ExitCode::FAILURE;
    }
    let mut cfg = SimConfig::quick();
    let mut seeds: Option<(u64, u64)> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seed" => match args.next().and_then(|s| s.parse::<u64>().ok()) {
                Some(s) => seeds = Some((s, s + 1)),
                None => return usage(),
            },
            "--seeds" => {
                let range = args.next().unwrap_or_default();
                let parsed = range
                    .split_once("..")
                    .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)));
                match parsed {
                    Some(r) => seeds = Some(r),
                    None => return usage(),
                }
            }
            "--faults-secs" => match args.next().and_then(|s| s.parse::<u64>().ok()) {
                Some(s) => cfg.faults = std::time::Duration::from_secs(s),
                None => return usage(),
            },
            "--log-entries" => match args.next().and_then(|s| s.parse::<usize>().ok()) {
                Some(n) => cfg.log_entries = n,
                None => return usage(),
            },
            "--log-entries-clean" => match args.next().and_then(|s| s.parse::<usize>().ok()) {
                Some(n) => cfg.log_entries_clean = n,
                None => return usage(),
            },
            "--verbose" => cfg.verbose = true,
            "--snapshots" => cfg.snapshots = true,
            "--splits" => cfg.splits = true,
            "--black-holes" => cfg.black_holes = true,
            "--erasure" => {
                let km = args.next().unwrap_or_default();
                match km
                    .split_once('+')
                    .and_then(|(k, m)| Some((k.parse().ok()?, m.parse().ok()?)))
                {
                    Some(km) => cfg.erasure = Some(km),
                    None => return usage(),
                }
            }
            _ => return usage(),
        }
    }
    if let Ok(spec) = std::env::var("SHOAL_SIM_LOG") {
        if let Err(e) = shoal_config::logging::init(&spec) {
            eprintln!("SHOAL_SIM_LOG: {e}");
            return ExitCode::from(2);
        }
    }
    let Some((from, to)) = seeds else {
        return usage();
    };
    for seed in from..to {
        let started = std::time::Instant::now();
        match run(seed, &cfg) {
            Ok(r) => println!(
                "seed {seed}: ok in {:.1} s ({} faults, {} ops answered, {} failed, {} writes acknowledged, {:.1} s virtual, digest {:016x}; states {}; snapshots {:?})",
                started.elapsed().as_secs_f64(),
                r.faults,
                r.ops.0,
                r.ops.1,
                r.acked,
                r.virtual_ms as f64 / 1000.0,
                r.digest,
                r.states.iter().cloned().collect::<Vec<_>>().join(","),
                r.snapshots
            ),
            Err(f) => {
                eprintln!("{f}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

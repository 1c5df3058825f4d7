//! The deterministic simulation in CI: 350 seeds (in seven tests, so
//! nextest spreads them over the cores; seeds 350-499 ran here too until
//! CI's time neared its bound, and pass: `shoal-sim --seeds 350..500`),
//! seeds 0-49 with an erasure-coded 2+1 and 3+1 pool, seeds 0-29 with the
//! snapshot client (19 of it on a 2+1 pool), seeds 0-15 with PG splits
//! among the faults (8 of them on a 2+1 pool), 24 with black holes
//! (links that drop silently, 8 on a 2+1 pool), and the same seed twice
//! giving the same trace. `SHOAL_SIM_SEEDS=N cargo test -p shoal-sim --release --test seeds
//! -- --ignored` runs N more seeds (thousands behind the flag); a failing
//! seed replays with `cargo run -p shoal-sim -- --seed S --verbose`.

use shoal_sim::{SimConfig, run};

use std::collections::BTreeSet;

/// Seeds `from..from + 50`; panics with the first failure's replay line.
/// Returns the words of the PG states their primaries reported.
fn fifty(from: u64) -> BTreeSet<String> {
    let cfg = SimConfig::quick();
    let mut states = BTreeSet::new();
    for seed in from..from + 50 {
        match run(seed, &cfg) {
            Ok(r) => states.extend(r.states),
            Err(f) => panic!("{f}"),
        }
    }
    states
}

/// The nemesis drives PGs through the states of failure handling, not
/// only the happy path (the seeds are fixed, so this is deterministic).
fn assert_seen(states: &BTreeSet<String>, want: &[&str]) {
    let missing: Vec<&&str> = want.iter().filter(|w| !states.contains(**w)).collect();
    assert!(
        missing.is_empty(),
        "never seen: {missing:?} (seen {states:?})"
    );
}

#[test]
fn seeds_0_to_49() {
    let states = fifty(0);
    assert_seen(
        &states,
        &[
            "active",
            "clean",
            "peering",
            "activating",
            "degraded",
            "undersized",
            "peered",
            "remapped",
            "recovering",
            "backfilling",
            "down",
        ],
    );
}

/// `incomplete` (an interval's members are up in the map but none answers)
/// needs a member unreachable yet not marked down while its PG peers. Since
/// a killed OSD is reported the moment its connections reset, only a
/// partition makes that window, and seeds 0-49 no longer hit it; this seed
/// does (found by `shoal-sim --seeds 500..3000`; the seed moves when the
/// order of messages changes, as it did when past intervals got their own
/// message, when the peer messages got snapshot ids, and when a primary
/// began activating its members at once, when strays began asking to
/// remove their copies, and when the OSD began routing by the map its PGs
/// were handed: 1701, 1807, 2308, then 2306 before).
#[test]
fn a_seed_that_drives_a_pg_incomplete() {
    let r = run(2398, &SimConfig::quick()).unwrap_or_else(|f| panic!("{f}"));
    assert_seen(&r.states, &["incomplete", "peering", "active"]);
}

/// `backfill_wait` (a backfill held for a reservation) needs two backfills
/// at once on one OSD; seeds 0-49 stopped reaching it when the monitor
/// began recording health changes through Raft (the order of messages
/// moved), seeds 67, 72 and 75 do.
#[test]
fn seeds_50_to_99() {
    assert_seen(&fifty(50), &["backfill_wait", "backfilling", "remapped"]);
}

#[test]
fn seeds_100_to_149() {
    fifty(100);
}

#[test]
fn seeds_150_to_199() {
    fifty(150);
}

#[test]
fn seeds_200_to_249() {
    fifty(200);
}

#[test]
fn seeds_250_to_299() {
    fifty(250);
}

#[test]
fn seeds_300_to_349() {
    fifty(300);
}

/// Erasure-coded pools on five OSDs, seeds 0-49 of each profile: they
/// guard peering with k shards, recovery and backfill by decoding,
/// changes fewer than k shards hold rolled back from each shard's stash
/// (on members of past intervals too), members moved to another position
/// backfilled into it while the shard they held, settled to the shared
/// history, serves recovery as a stray. Seeds 0-999 of both profiles
/// pass (`shoal-sim --seeds 0..1000 --erasure 2+1`); the ones below once
/// failed beyond this range.
fn erasure_seeds(k: u32, m: u32, extra: &[u64]) -> BTreeSet<String> {
    let cfg = SimConfig::quick_erasure(k, m);
    let mut states = BTreeSet::new();
    for seed in (0..50).chain(extra.iter().copied()) {
        match run(seed, &cfg) {
            Ok(r) => states.extend(r.states),
            Err(f) => panic!("erasure {k}+{m}: {f}"),
        }
    }
    states
}

/// The snapshot client beside the others, seeds 0-29: snapshots taken,
/// written under, removed (and trimmed) and read while the nemesis works,
/// and every object read at every kept snapshot once clean. Seeds 0-599
/// pass (`shoal-sim --seeds 0..600 --snapshots`); seed 1 found that a
/// head recovered before its clones could leave a member without them.
#[test]
fn snapshot_seeds() {
    let cfg = SimConfig::quick_snapshots();
    let mut states = BTreeSet::new();
    let (mut taken, mut removed, mut reads) = (0, 0, 0);
    for seed in 0..30 {
        match run(seed, &cfg) {
            Ok(r) => {
                states.extend(r.states);
                taken += r.snapshots.0;
                removed += r.snapshots.1;
                reads += r.snapshots.2;
            }
            Err(f) => panic!("snapshots: {f}"),
        }
    }
    assert!(
        taken > 500 && removed > 400 && reads > 2000,
        "{taken} snapshots taken, {removed} removed, {reads} reads at snapshots"
    );
    assert_seen(&states, &["snaptrim", "degraded", "peering"]);
}

/// The snapshot client on an erasure-coded 2+1 pool, seeds 0-15 and three
/// that found bugs:
/// every shard clones its chunks, reads at snapshots decode clones,
/// rollbacks undo clones and snapdirs, recovery rebuilds a head's clones
/// before the head, trims run on every shard. Seeds 0-599 of 2+1 and 3+1
/// pass (`shoal-sim --seeds 0..600 --erasure 2+1 --snapshots`); seed 95
/// found that a head's family cannot be listed where its only sources are
/// strays (it is now read from the authoritative snapset), and later that
/// a backfill listed the PG's objects on a member that was itself being
/// backfilled (copying nothing, then removing the strays that held the
/// data); 420 that a read
/// of k shards lost a source passed over while its shard was read; 251
/// that a stray's stale copy of a trimmed clone kept a backfill from ever
/// finishing.
#[test]
fn erasure_snapshot_seeds() {
    let cfg = SimConfig {
        snapshots: true,
        ..SimConfig::quick_erasure(2, 1)
    };
    let mut states = BTreeSet::new();
    let (mut taken, mut reads) = (0, 0);
    for seed in (0..16).chain([95, 251, 420]) {
        match run(seed, &cfg) {
            Ok(r) => {
                states.extend(r.states);
                taken += r.snapshots.0;
                reads += r.snapshots.2;
            }
            Err(f) => panic!("erasure snapshots: {f}"),
        }
    }
    assert!(
        taken > 200 && reads > 600,
        "{taken} snapshots taken, {reads} reads at snapshots"
    );
    assert_seen(&states, &["snaptrim", "degraded", "recovering"]);
    // 3+1 seed 387: the monitors marked out an OSD in the batch that
    // booted it (it had been marked in by hand while still down), leaving
    // it up and out for good, and a PG with no place for its fourth shard.
    let cfg = SimConfig {
        snapshots: true,
        ..SimConfig::quick_erasure(3, 1)
    };
    if let Err(f) = run(387, &cfg) {
        panic!("erasure 3+1 snapshots: {f}");
    }
}

/// 3+1 seeds that found bugs past seed 49: a moved member's shard kept a
/// divergent change and served nothing (582, 998); a member backfilled
/// into the position whose shard it held as a stray wiped the only copy of
/// that shard's chunks of an object (955).
const ERASURE_3_1_FOUND_BUGS: &[u64] = &[582, 955, 998];

#[test]
fn erasure_2_1_seeds() {
    let states = erasure_seeds(2, 1, &[]);
    assert_seen(
        &states,
        &["active", "clean", "peered", "recovering", "degraded"],
    );
}

#[test]
fn erasure_3_1_seeds() {
    let states = erasure_seeds(3, 1, ERASURE_3_1_FOUND_BUGS);
    assert_seen(
        &states,
        &[
            "active",
            "clean",
            "peered",
            "recovering",
            "degraded",
            "backfilling",
        ],
    );
}

/// Seeds beyond the CI range that once failed, kept so their bugs stay
/// fixed: 5200 and 11705 left objects unfound while an OSD outside the
/// PG's intervals held complete copies (fixed by the wide unfound search);
/// in 9430 a restarted OSD's monitor client dropped the map pushed before
/// its subscription's reply and sat on an older map for good.
const FOUND_BUGS: &[u64] = &[5200, 9430, 11705];

#[test]
fn seeds_that_found_bugs() {
    let cfg = SimConfig::quick();
    for &seed in FOUND_BUGS {
        if let Err(f) = run(seed, &cfg) {
            panic!("{f}");
        }
    }
}

#[test]
fn a_seed_replays_exactly() {
    let cfg = SimConfig::quick();
    let a = run(7, &cfg).unwrap_or_else(|f| panic!("{f}"));
    let b = run(7, &cfg).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(a, b, "seed 7 ran twice differently");
    assert!(a.faults > 5 && a.acked > 50 && a.ops.0 > 100, "{a:?}");
    let c = run(8, &cfg).unwrap_or_else(|f| panic!("{f}"));
    assert_ne!(a.digest, c.digest, "another seed, another run");
}

#[test]
#[ignore = "thousands of seeds: run with SHOAL_SIM_SEEDS=N (release build advised)"]
fn many_seeds() {
    let n: u64 = std::env::var("SHOAL_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5000);
    let cfg = SimConfig::quick();
    for seed in 1_000_000..1_000_000 + n {
        if let Err(f) = run(seed, &cfg) {
            panic!("{f}");
        }
    }
}

/// PGs split among the faults (`shoal-sim --splits`): the nemesis doubles
/// the clients' pool's `pg_num` now and then, the OSDs split their copies
/// as they follow the maps (crashed ones when they restart), the leader
/// moves `pgp_num` after it, and every invariant holds — acknowledged
/// writes in the log of the PG holding their object, copies alike once
/// clean, every read the newest acknowledged write.
#[test]
fn split_seeds() {
    let mut grown = 0;
    let erasure = SimConfig {
        splits: true,
        ..SimConfig::quick_erasure(2, 1)
    };
    for (cfg, seeds) in [
        // Seed 101: a read answered by the parent after the split's map
        // reached its client, which did not send it again (the client now
        // resends a PG's ops when its pool's pg_num changes).
        (
            SimConfig::quick_splits(),
            (0..16).chain([101]).collect::<Vec<u64>>(),
        ),
        // Seeds 20 and 26: a member moved to another position, then down
        // through the next split, came back with a copy that never split
        // (its new position's collection had no recorded pg_num), and its
        // stale log named an object of the child. Seed 27: a shard
        // restarted after a split kept the rollback stashes the split
        // moved to the children in its memory (reloaded only once its
        // first map said it was erasure coded), and every activation then
        // removed one that was gone: refused, the PG peered for ever.
        (erasure, (0..8).chain([20, 26, 27]).collect()),
    ] {
        for seed in seeds {
            match run(seed, &cfg) {
                Ok(r) => {
                    assert_eq!(r.pg_num.0, r.pg_num.1, "seed {seed}: pgp_num follows");
                    grown += usize::from(r.pg_num.0 > cfg.pg_num);
                }
                Err(f) => panic!("splits: {f}"),
            }
        }
    }
    assert!(grown >= 12, "only {grown} of 28 runs split their pool");
}

/// Links that drop what crosses silently (`shoal-sim --black-holes`), one
/// way or both, with the connections left open, as a real switch or
/// firewall does (where the older partitions reset connections): what is
/// written waits and arrives when the network heals; connecting times
/// out. Replicated and 2+1 EC pools; every invariant holds.
#[test]
fn black_hole_seeds() {
    let mut holes = 0;
    for (cfg, seeds) in [
        (SimConfig::quick_black_holes(), 0..16u64),
        (
            SimConfig {
                black_holes: true,
                ..SimConfig::quick_erasure(2, 1)
            },
            200..208,
        ),
    ] {
        for seed in seeds {
            match run(seed, &cfg) {
                Ok(r) => holes += r.black_holes,
                Err(f) => panic!("black holes: {f}"),
            }
        }
    }
    assert!(holes >= 24, "only {holes} black holes in 24 runs");
}

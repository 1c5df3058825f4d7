//! Properties of the cluster map: incrementals compose, encodings round-trip,
//! and decoding arbitrary bytes returns an error instead of panicking.

use proptest::prelude::*;
use shoal_crush::{BuildSpec, build_map};
use shoal_maps::{Incremental, OsdMap, PgId, Pool, WEIGHT_IN};

#[derive(Debug, Clone)]
enum Change {
    Boot(i32),
    Down(i32),
    Weight(i32, u32),
    Affinity(i32, u32),
    PgTemp(u32, Vec<i32>),
    Upmap(u32, i32, i32),
    DropUpmap(u32),
    Pool(u64, u32),
    DeletePool(u64),
    Flags(u32),
    UpThru(i32, u32),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        (0..12i32).prop_map(Change::Boot),
        (0..12i32).prop_map(Change::Down),
        (
            0..12i32,
            prop_oneof![Just(0u32), Just(WEIGHT_IN), 0..=WEIGHT_IN]
        )
            .prop_map(|(o, w)| Change::Weight(o, w)),
        (0..12i32, 0..=WEIGHT_IN).prop_map(|(o, a)| Change::Affinity(o, a)),
        (0..32u32, proptest::collection::vec(0..12i32, 0..4))
            .prop_map(|(s, v)| Change::PgTemp(s, v)),
        (0..32u32, 0..12i32, 0..12i32).prop_map(|(s, a, b)| Change::Upmap(s, a, b)),
        (0..32u32).prop_map(Change::DropUpmap),
        (2..5u64, 1..64u32).prop_map(|(p, n)| Change::Pool(p, n)),
        (2..5u64).prop_map(Change::DeletePool),
        (0..4u32).prop_map(|b| Change::Flags(b << 9)),
        (0..12i32, 1..1000u32).prop_map(|(o, e)| Change::UpThru(o, e)),
    ]
}

fn base() -> OsdMap {
    let crush = build_map(&BuildSpec::hosts(4, 3, Some(2))).expect("crush");
    let mut map = OsdMap::new([3; 16], 0, crush).expect("map");
    let mut inc = Incremental::next(&map);
    inc.new_max_osd = Some(12);
    for o in 0..12 {
        inc.new_osds.insert(o);
    }
    inc.new_pools
        .insert(1, Pool::replicated(1, "rbd", 3, 2, 32, 0));
    map.apply(&inc).expect("apply");
    map
}

/// Pools 2 and 4 are erasure coded (with a profile and a stripe unit of
/// their own), the rest replicated.
fn pool(p: u64, n: u32) -> Pool {
    if p % 2 == 0 {
        let mut pool = Pool::erasure(p, &format!("p{p}"), 2, 1, n, 0);
        pool.stripe_width = 2 * 65536;
        pool.ec_profile = format!("profile{p}");
        pool.flags |= shoal_maps::FLAG_EC_OVERWRITES;
        pool
    } else {
        Pool::replicated(p, &format!("p{p}"), 2, 1, n, 0)
    }
}

fn add(inc: &mut Incremental, c: &Change) {
    let pg = |s: u32| PgId { pool: 1, seed: s };
    match c {
        Change::Boot(o) => {
            inc.new_down.remove(o);
            inc.new_up.insert(*o, format!("10.1.0.{o}:6800"));
        }
        Change::Down(o) => {
            inc.new_up.remove(o);
            inc.new_down.insert(*o);
        }
        Change::Weight(o, w) => {
            inc.new_weight.insert(*o, *w);
        }
        Change::Affinity(o, a) => {
            inc.new_primary_affinity.insert(*o, *a);
        }
        Change::PgTemp(s, v) => {
            inc.new_pg_temp.insert(pg(*s), v.clone());
        }
        Change::Upmap(s, a, b) => {
            inc.old_pg_upmap_items.remove(&pg(*s));
            inc.new_pg_upmap_items.insert(pg(*s), vec![(*a, *b)]);
        }
        Change::DropUpmap(s) => {
            inc.new_pg_upmap_items.remove(&pg(*s));
            inc.old_pg_upmap_items.insert(pg(*s));
        }
        Change::Pool(p, n) => {
            inc.old_pools.remove(p);
            inc.new_pools.insert(*p, pool(*p, *n));
        }
        Change::DeletePool(p) => {
            inc.new_pools.remove(p);
            inc.old_pools.insert(*p);
        }
        Change::Flags(f) => inc.new_flags = Some(*f),
        Change::UpThru(o, e) => {
            inc.new_up_thru.insert(*o, *e);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Applying the changes one epoch at a time gives the same map (up to the
    /// epoch number) as applying them all in one incremental.
    #[test]
    fn incrementals_compose(changes in proptest::collection::vec(change(), 1..30)) {
        let mut stepwise = base();
        let mut direct = base();
        let mut all = Incremental::next(&direct);
        for c in &changes {
            let mut inc = Incremental::next(&stepwise);
            add(&mut inc, c);
            let wire = inc.encode();
            let inc = Incremental::decode(&wire).expect("round trip");
            stepwise.apply(&inc).expect("step");
            add(&mut all, c);
        }
        direct.apply(&all).expect("direct");
        direct.epoch = stepwise.epoch;
        prop_assert_eq!(&stepwise, &direct);
        let back = OsdMap::decode(&stepwise.encode()).expect("decode");
        prop_assert_eq!(&back, &stepwise);
        for seed in 0..32 {
            let pg = PgId { pool: 1, seed };
            prop_assert_eq!(back.pg_to_up_acting(pg).expect("m"), stepwise.pg_to_up_acting(pg).expect("m"));
        }
    }

    /// Random bytes never panic the decoders.
    #[test]
    fn random_bytes_do_not_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = OsdMap::decode(&bytes);
        let _ = Incremental::decode(&bytes);
        let _ = shoal_crush::CrushMap::decode(&bytes);
    }

    /// Corrupting a valid encoding (flip, truncate) never panics either.
    #[test]
    fn mutated_encodings_do_not_panic(pos in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<prop::sample::Index>()) {
        let good = base().encode();
        let mut bad = good.clone();
        let i = pos.index(bad.len());
        bad[i] = byte;
        // Whatever still decodes is a valid map; decoding must not panic.
        // (Mapping a hostile map can be valid but arbitrarily slow: huge
        // max_osd or retry tunables; the decoders' limits are tested here.)
        let _ = OsdMap::decode(&bad);
        let _ = OsdMap::decode(&good[..cut.index(good.len())]);
    }
}

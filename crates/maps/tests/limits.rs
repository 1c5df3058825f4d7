//! The cluster map's limits: `max_osd`, a pool's size and `pg_num`, and the
//! nested CRUSH map's, each refused with a typed error by the constructor,
//! `apply` and both decoders; a map at the limits decodes and maps within
//! the CRUSH step bound.

use shoal_crush::{BuildSpec, CrushError, MAX_CHOOSE_TRIES, Workspace, build_map};
use shoal_maps::{
    Incremental, MAX_OSD_LIMIT, MAX_PG_NUM, MAX_POOL_SIZE, MapError, OsdMap, PgId, Pool,
};

fn limit(e: MapError) -> &'static str {
    match e {
        MapError::Limit { what, value, max } => {
            assert!(value > max, "{what}: {value} <= {max}");
            what
        }
        MapError::Crush(CrushError::Limit { what, .. }) => what,
        other => panic!("expected a limit error, got {other:?}"),
    }
}

fn empty() -> OsdMap {
    let crush = build_map(&BuildSpec::hosts(4, 3, None)).expect("crush");
    OsdMap::new([5; 16], 0, crush).expect("map")
}

/// Applies `inc` to a copy of `map` and also round-trips it through the
/// decoder; both must refuse it with the same limit.
fn refused(map: &OsdMap, inc: &Incremental) -> &'static str {
    let applied = limit(map.clone().apply(inc).expect_err("apply refuses"));
    let decoded = limit(Incremental::decode(&inc.encode()).expect_err("decode refuses"));
    assert_eq!(applied, decoded);
    applied
}

#[test]
fn max_osd_above_the_limit_is_refused_everywhere() {
    let crush = build_map(&BuildSpec::hosts(1, 1, None)).expect("crush");
    assert_eq!(
        limit(OsdMap::new([0; 16], MAX_OSD_LIMIT + 1, crush).expect_err("new")),
        "max_osd"
    );
    let map = empty();
    let mut inc = Incremental::next(&map);
    inc.new_max_osd = Some(MAX_OSD_LIMIT + 1);
    assert_eq!(refused(&map, &inc), "max_osd");

    // A full map at the limit decodes; one more OSD entry does not.
    inc.new_max_osd = Some(MAX_OSD_LIMIT);
    let mut full = map.clone();
    full.apply(&inc).expect("at the limit");
    let bytes = full.encode();
    assert_eq!(OsdMap::decode(&bytes).expect("decodes"), full);
    // Header: magic (4), version (1), fsid (16), epoch (4), then the count.
    let mut more = bytes[..25].to_vec();
    more.extend_from_slice(&(MAX_OSD_LIMIT + 1).to_le_bytes());
    more.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    more.extend_from_slice(&bytes[29..]);
    assert_eq!(
        limit(OsdMap::decode(&more).expect_err("refused")),
        "max_osd"
    );
}

#[test]
fn pools_above_the_limits_are_refused() {
    let map = empty();
    for (pool, what) in [
        (
            Pool::replicated(1, "big", 3, 2, MAX_PG_NUM + 1, 0),
            "pg_num",
        ),
        (
            Pool::replicated(1, "wide", MAX_POOL_SIZE + 1, 2, 8, 0),
            "pool size",
        ),
    ] {
        let mut inc = Incremental::next(&map);
        inc.new_pools.insert(1, pool);
        assert_eq!(refused(&map, &inc), what);
    }
}

#[test]
fn a_nested_crush_map_above_its_limits_keeps_the_crush_error() {
    let mut map = empty();
    let mut crush = map.crush().clone();
    crush.tunables.choose_total_tries = MAX_CHOOSE_TRIES + 1;
    let mut inc = Incremental::next(&map);
    inc.new_crush = Some(crush);
    assert_eq!(
        limit(Incremental::decode(&inc.encode()).expect_err("refused")),
        "choose_total_tries"
    );
    // A whole map carrying it (apply does not re-check a map it was given
    // already built) is refused by the decoder.
    map.apply(&inc).expect("apply takes a built map");
    assert_eq!(
        limit(OsdMap::decode(&map.encode()).expect_err("refused")),
        "choose_total_tries"
    );
}

#[test]
fn a_map_at_the_limits_maps_within_the_step_bound() {
    let mut map = empty();
    let mut inc = Incremental::next(&map);
    inc.new_max_osd = Some(12);
    for o in 0..12 {
        inc.new_osds.insert(o);
        inc.new_weight.insert(o, shoal_maps::WEIGHT_IN);
    }
    inc.new_pools.insert(
        1,
        Pool::replicated(1, "edge", MAX_POOL_SIZE, 1, MAX_PG_NUM, 0),
    );
    map.apply(&inc).expect("at the limits");
    let map = OsdMap::decode(&map.encode()).expect("decodes");
    let weights = map.crush_weights();
    let mut ws = Workspace::default();
    let bound = map.crush().max_steps(0, MAX_POOL_SIZE as usize);
    for seed in [0, 1, MAX_PG_NUM / 2, MAX_PG_NUM - 1] {
        let m = map
            .pg_to_up_acting_with(PgId { pool: 1, seed }, &weights, &mut ws)
            .expect("maps");
        // Twelve OSDs cannot fill 64 places: every try was spent.
        assert_eq!(m.raw.len(), 4, "one OSD per host: {:?}", m.raw);
        assert!(
            ws.steps() > 0 && ws.steps() <= bound,
            "{} > {bound}",
            ws.steps()
        );
    }
}

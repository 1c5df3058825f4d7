//! The limits that keep mapping bounded: a map with any of them exceeded is
//! refused by every decoder with `CrushError::Limit`, and a map at the
//! limits maps within `CrushMap::max_steps` bucket choices.

use shoal_crush::text::parse;
use shoal_crush::{
    CrushError, CrushMap, MAX_BUCKET_ITEMS, MAX_CHOOSE_TRIES, MAX_DEPTH, MAX_DEVICES,
    MAX_LOCAL_TRIES, MAX_REPLICAS, MAX_RULE_STEPS, Tunables, Workspace,
};

fn limit_of(r: Result<CrushMap, CrushError>) -> &'static str {
    match r {
        Err(CrushError::Limit { what, value, max }) => {
            assert!(value > max, "{what}: {value} <= {max}");
            what
        }
        other => panic!("expected a limit error, got {other:?}"),
    }
}

/// A text map: `devices` OSDs in one straw2 root, the given tunables and
/// one rule with `steps`.
fn text_map(devices: usize, tunables: &str, steps: &str) -> String {
    let mut t = String::from(tunables);
    for d in 0..devices {
        t.push_str(&format!("device {d} osd.{d}\n"));
    }
    t.push_str("type 0 osd\ntype 1 root\nroot r {\n id -1\n alg straw2\n hash 0\n");
    for d in 0..devices {
        t.push_str(&format!(" item osd.{d} weight 1.0\n"));
    }
    t.push_str("}\nrule x {\n id 0\n type replicated\n step take r\n");
    t.push_str(steps);
    t.push_str(" step emit\n}\n");
    t
}

const CHOOSE: &str = " step choose firstn 0 type osd\n";

#[test]
fn text_maps_above_each_limit_are_refused() {
    let over = |name: &str, v: u32| format!("tunable {name} {}\n", v + 1);
    let cases = [
        (
            text_map(3, &over("choose_total_tries", MAX_CHOOSE_TRIES), CHOOSE),
            "choose_total_tries",
        ),
        (
            text_map(3, &over("choose_local_tries", MAX_LOCAL_TRIES), CHOOSE),
            "choose_local_tries",
        ),
        (
            text_map(
                3,
                &over("choose_local_fallback_tries", MAX_LOCAL_TRIES),
                CHOOSE,
            ),
            "choose_local_fallback_tries",
        ),
        (
            text_map(
                3,
                "",
                &format!(" step set_choose_tries {}\n{CHOOSE}", MAX_CHOOSE_TRIES + 1),
            ),
            "set_choose_tries",
        ),
        (
            text_map(
                3,
                "",
                &format!(
                    " step set_chooseleaf_tries {}\n{CHOOSE}",
                    MAX_CHOOSE_TRIES + 1
                ),
            ),
            "set_chooseleaf_tries",
        ),
        (
            text_map(
                3,
                "",
                &format!(
                    " step set_choose_local_tries {}\n{CHOOSE}",
                    MAX_LOCAL_TRIES + 1
                ),
            ),
            "set_choose_local_tries",
        ),
        (
            text_map(
                3,
                "",
                &format!(" step choose firstn {} type osd\n", MAX_REPLICAS + 1),
            ),
            "choose step n",
        ),
        (
            text_map(
                3,
                "",
                &format!(" step choose indep -{} type osd\n", MAX_REPLICAS + 1),
            ),
            "choose step n",
        ),
        (
            text_map(3, "", &" step noop\n".repeat(MAX_RULE_STEPS)),
            "rule steps",
        ),
        (text_map(MAX_BUCKET_ITEMS + 1, "", CHOOSE), "bucket size"),
        (
            format!("device {MAX_DEVICES} osd.big\n{}", text_map(1, "", CHOOSE)),
            "device id",
        ),
    ];
    for (text, what) in cases {
        assert_eq!(limit_of(parse(&text)), what, "{what}");
    }
}

#[test]
fn a_hierarchy_deeper_than_the_limit_is_refused() {
    let mut t = String::from("device 0 osd.0\ntype 0 osd\ntype 1 host\n");
    t.push_str("host b0 {\n alg straw2\n item osd.0\n}\n");
    for i in 1..=MAX_DEPTH {
        t.push_str(&format!(
            "host b{i} {{\n alg straw2\n item b{}\n}}\n",
            i - 1
        ));
    }
    assert_eq!(limit_of(parse(&t)), "bucket hierarchy depth");
}

#[test]
fn shoal_binary_maps_above_the_limits_are_refused() {
    let ok = parse(&text_map(3, "", CHOOSE)).expect("map");
    for (set, what) in [
        (
            (|t: &mut Tunables| t.choose_total_tries = MAX_CHOOSE_TRIES + 1) as fn(&mut Tunables),
            "choose_total_tries",
        ),
        (
            |t: &mut Tunables| t.choose_local_tries = MAX_LOCAL_TRIES + 1,
            "choose_local_tries",
        ),
        (
            |t: &mut Tunables| t.choose_local_fallback_tries = u32::MAX,
            "choose_local_fallback_tries",
        ),
    ] {
        let mut m = ok.clone();
        set(&mut m.tunables);
        assert_eq!(limit_of(CrushMap::decode(&m.encode())), what);
    }
    // The same tunables at the limit decode.
    let mut m = ok.clone();
    m.tunables.choose_total_tries = MAX_CHOOSE_TRIES;
    m.tunables.choose_local_tries = MAX_LOCAL_TRIES;
    m.tunables.choose_local_fallback_tries = MAX_LOCAL_TRIES;
    assert_eq!(CrushMap::decode(&m.encode()).ok(), Some(m));
}

/// A Ceph binary map (`CrushWrapper::encode`) of one straw2 root holding
/// `size` devices, no rules, with the given total tries.
fn ceph_binary(size: u32, choose_total_tries: u32) -> Vec<u8> {
    let mut b = Vec::new();
    let u32_ = |b: &mut Vec<u8>, v: u32| b.extend_from_slice(&v.to_le_bytes());
    u32_(&mut b, 0x0001_0000);
    u32_(&mut b, 1); // max_buckets
    u32_(&mut b, 0); // max_rules
    u32_(&mut b, size); // max_devices
    u32_(&mut b, 5); // bucket slot: alg straw2
    b.extend_from_slice(&(-1i32).to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes()); // type
    b.extend_from_slice(&[5, 0]); // alg, hash
    u32_(&mut b, size.wrapping_mul(0x10000)); // weight
    u32_(&mut b, size);
    for i in 0..size {
        u32_(&mut b, i);
    }
    for _ in 0..size {
        u32_(&mut b, 0x10000);
    }
    for _ in 0..3 {
        u32_(&mut b, 0); // type, item and rule name maps
    }
    for v in [0, 0, choose_total_tries, 1] {
        u32_(&mut b, v);
    }
    b.extend_from_slice(&[1, 1]); // vary_r, straw_calc_version
    u32_(&mut b, 54); // allowed_bucket_algs
    b.push(1); // chooseleaf_stable
    for _ in 0..4 {
        u32_(&mut b, 0); // class map, class names, class buckets, choose_args
    }
    b
}

#[test]
fn ceph_binary_maps_above_the_limits_are_refused() {
    let decode = shoal_crush::ceph_binary::decode;
    let ok = decode(&ceph_binary(4, MAX_CHOOSE_TRIES)).expect("at the limit");
    assert_eq!(ok.tunables.choose_total_tries, MAX_CHOOSE_TRIES);
    assert_eq!(
        limit_of(decode(&ceph_binary(4, MAX_CHOOSE_TRIES + 1))),
        "choose_total_tries"
    );
    assert_eq!(
        limit_of(decode(&ceph_binary(MAX_BUCKET_ITEMS as u32 + 1, 50))),
        "bucket size"
    );
}

/// Maps `x` with every device out (every attempt fails: the most work a
/// rule can do) and returns the bucket choices made, after checking them
/// against the map's bound.
fn steps_all_out(map: &CrushMap, result_max: usize, x: u32) -> u64 {
    let mut ws = Workspace::default();
    let mut out = Vec::new();
    let weights = vec![0u32; map.max_devices() as usize];
    map.do_rule_with(&mut ws, 0, x, result_max, &weights, &mut out);
    assert!(out.iter().all(|o| *o == shoal_crush::ITEM_NONE), "{out:?}");
    let bound = map.max_steps(0, result_max);
    assert!(ws.steps() <= bound, "{} steps, bound {bound}", ws.steps());
    ws.steps()
}

#[test]
fn a_full_size_bucket_maps_in_the_counted_steps() {
    let map = parse(&text_map(
        MAX_BUCKET_ITEMS,
        "tunable choose_local_tries 0\ntunable choose_local_fallback_tries 0\n\
         tunable choose_total_tries 50\n",
        CHOOSE,
    ))
    .expect("map at the limit");
    // Optimal tunables: three replicas, each tried choose_total_tries + 1
    // times, one bucket choice (a pass over the 8192 items) per try. (With
    // legacy local fallback, each try may retry once per item: the bound's
    // size term.)
    assert_eq!(steps_all_out(&map, 3, 7), 3 * 51);
}

#[test]
fn tunables_and_steps_at_the_limits_map_within_the_bound() {
    let tunables = format!(
        "tunable choose_total_tries {MAX_CHOOSE_TRIES}\n\
         tunable choose_local_tries {MAX_LOCAL_TRIES}\n\
         tunable choose_local_fallback_tries {MAX_LOCAL_TRIES}\n"
    );
    let mut steps = format!(
        " step set_choose_tries {MAX_CHOOSE_TRIES}\n step set_chooseleaf_tries {MAX_CHOOSE_TRIES}\n"
    );
    steps.push_str(&format!(
        " step chooseleaf firstn {MAX_REPLICAS} type osd\n"
    ));
    steps.push_str(&format!(" step choose indep -{MAX_REPLICAS} type osd\n"));
    let map = parse(&text_map(16, &tunables, &steps)).expect("map at the limits");
    for x in 0..4 {
        let s = steps_all_out(&map, MAX_REPLICAS as usize, x);
        assert!(s > 0);
    }
}

#[test]
fn the_deepest_hierarchy_maps_within_the_bound() {
    let mut t = String::from("device 0 osd.0\ndevice 1 osd.1\ntype 0 osd\ntype 1 host\n");
    t.push_str("host b0 {\n id -1\n alg straw2\n item osd.0\n item osd.1\n}\n");
    for i in 1..MAX_DEPTH {
        t.push_str(&format!(
            "host b{i} {{\n id -{}\n alg straw2\n item b{}\n}}\n",
            i + 1,
            i - 1
        ));
    }
    let top = MAX_DEPTH - 1;
    t.push_str(&format!(
        "rule x {{\n id 0\n type replicated\n step take b{top}\n step chooseleaf firstn 0 type host\n step emit\n}}\n"
    ));
    let map = parse(&t).expect("map at the depth limit");
    // Every try descends through all MAX_DEPTH buckets: the depth counts.
    assert!(steps_all_out(&map, 3, 1) >= MAX_DEPTH as u64);
}

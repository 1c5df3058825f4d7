//! Hostile input: the text parser and the binary decoder return errors, never
//! panic, overflow the stack or loop forever.

use proptest::prelude::*;
use shoal_crush::CrushMap;
use shoal_crush::text::parse;

const HEAD: &str = "device 0 osd.0\ntype 0 osd\ntype 1 host\n";

#[test]
fn mutual_inclusion_is_an_error() {
    let t =
        format!("{HEAD}host a {{\n alg straw2\n item b\n}}\nhost b {{\n alg straw2\n item a\n}}\n");
    assert!(parse(&t).is_err());
}

#[test]
fn very_deep_hierarchy_is_an_error_not_a_stack_overflow() {
    let mut t = format!("{HEAD}host b0 {{\n alg straw2\n item osd.0\n}}\n");
    for i in 1..500 {
        t.push_str(&format!(
            "host b{i} {{\n alg straw2\n item b{}\n}}\n",
            i - 1
        ));
    }
    t.push_str("rule r {\n id 0\n type replicated\n step take b499\n step chooseleaf firstn 0 type host\n step emit\n}\n");
    assert!(matches!(
        parse(&t),
        Err(shoal_crush::CrushError::Limit { .. })
    ));
}

#[test]
fn undefined_names_and_bad_numbers_are_errors() {
    for bad in [
        "device x osd.0",
        "type 1",
        "host h { alg straw2 item nothing }",
        "tunable nonsense 1",
        "rule r { id 0 type replicated step take nowhere step emit }",
        "host h { alg straw2 item osd.0 weight -1 }",
        "host h { alg tree }",
        "choose_args 0 { }",
    ] {
        assert!(parse(&format!("{HEAD}{bad}\n")).is_err(), "{bad}");
    }
}

fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "device",
            "type",
            "host",
            "root",
            "rule",
            "id",
            "alg",
            "straw2",
            "uniform",
            "list",
            "hash",
            "item",
            "weight",
            "pos",
            "class",
            "step",
            "take",
            "choose",
            "chooseleaf",
            "firstn",
            "indep",
            "emit",
            "tunable",
            "min_size",
            "max_size",
            "{",
            "}",
            "osd.0",
            "h",
            "ssd",
            "0",
            "-1",
            "1.5",
            "replicated",
            "erasure",
            "\n",
            "#",
        ])
        .prop_map(str::to_string),
        any::<i32>().prop_map(|i| i.to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn token_soup_never_panics(toks in proptest::collection::vec(token(), 0..80)) {
        let text = format!("{HEAD}{}", toks.join(" "));
        if let Ok(map) = parse(&text) {
            // Whatever parses can be mapped, printed and encoded.
            let w = shoal_crush::tester::default_weights(&map);
            let mut ws = shoal_crush::Workspace::default();
            let mut out = Vec::new();
            for r in map.rules().map(|r| r.id).collect::<Vec<_>>() {
                for x in 0..16 {
                    map.do_rule_with(&mut ws, r, x, 3, &w, &mut out);
                    prop_assert!(ws.steps() <= map.max_steps(r, 3));
                }
            }
            let _ = shoal_crush::text::print(&map);
            prop_assert_eq!(CrushMap::decode(&map.encode()).ok(), Some(map));
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = CrushMap::decode(&bytes);
        let mut framed = b"SCRM\x01".to_vec();
        framed.extend_from_slice(&bytes);
        let _ = CrushMap::decode(&framed);
        let _ = parse(&String::from_utf8_lossy(&bytes));
        let _ = shoal_crush::ceph_binary::decode(&bytes);
        let mut ceph = shoal_crush::ceph_binary::CEPH_CRUSH_MAGIC.to_vec();
        ceph.extend_from_slice(&bytes);
        let _ = shoal_crush::ceph_binary::decode(&ceph);
    }
}

//! Bit-exact agreement with Ceph: every mapping crushtool printed for the
//! fixture maps (see fixtures/regen.sh) must come out the same here.

use std::fs;
use std::path::{Path, PathBuf};

use shoal_crush::tester::{default_weights, format_mapping};
use shoal_crush::text::{parse, parse_weight, print};
use shoal_crush::{CrushMap, Workspace};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn load(name: &str) -> CrushMap {
    let p = dir().join(format!("maps/{name}.txt"));
    let text = fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

struct Case {
    name: String,
    map: String,
    rule: u32,
    num_rep: usize,
    min_x: i64,
    max_x: i64,
    reweights: Vec<(usize, u32)>,
}

fn cases() -> Vec<Case> {
    let text = fs::read_to_string(dir().join("cases.txt")).expect("cases.txt");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let reweights = if f[6] == "-" {
                Vec::new()
            } else {
                f[6].split(',')
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').expect("k=v");
                        (k.parse().expect("device"), parse_weight(v).expect("weight"))
                    })
                    .collect()
            };
            Case {
                name: f[0].into(),
                map: f[1].into(),
                rule: f[2].parse().expect("rule"),
                num_rep: f[3].parse().expect("num_rep"),
                min_x: f[4].parse().expect("min_x"),
                max_x: f[5].parse().expect("max_x"),
                reweights,
            }
        })
        .collect()
}

#[test]
fn every_crushtool_mapping_matches() {
    let mut total = 0;
    for c in cases() {
        let map = load(&c.map);
        let mut weights = default_weights(&map);
        for (d, w) in &c.reweights {
            weights[*d] = *w;
        }
        let expected =
            fs::read_to_string(dir().join(format!("mappings/{}.txt", c.name))).expect("mappings");
        let lines: Vec<&str> = expected.lines().collect();
        assert_eq!(lines.len() as i64, c.max_x - c.min_x + 1, "{}", c.name);
        let mut ws = Workspace::default();
        let mut out = Vec::new();
        let mut bad = Vec::new();
        for (x, want) in (c.min_x..=c.max_x).zip(&lines) {
            map.do_rule_with(&mut ws, c.rule, x as u32, c.num_rep, &weights, &mut out);
            let got = format_mapping(c.rule, x, &out);
            let want = format!("CRUSH rule {} x {x} {want}", c.rule);
            if got != want {
                bad.push(format!("{got}  (ceph: {want})"));
            }
        }
        assert!(
            bad.is_empty(),
            "{}: {} mismatches, first: {:?}",
            c.name,
            bad.len(),
            &bad[..bad.len().min(5)]
        );
        total += lines.len();
    }
    assert!(total >= 200_000, "{total}");
}

#[test]
fn export_matches_crushtool_decompile() {
    for name in [
        "flat",
        "hosts",
        "hosts_rw",
        "racks",
        "racks_legacy",
        "ec",
        "classes",
        "big1000",
    ] {
        let map = load(name);
        let want = fs::read_to_string(dir().join(format!("maps/{name}.decompiled.txt")))
            .expect("decompiled");
        let got = print(&map);
        if got != want {
            let first = got.lines().zip(want.lines()).position(|(a, b)| a != b);
            panic!(
                "{name}: export differs from crushtool -d at line {first:?}\n--- got\n{got}\n--- want\n{want}"
            );
        }
        // And the decompiled text compiles back to the same map.
        let again = parse(&want).expect("reparse");
        assert_eq!(print(&again), want, "{name}");
    }
}

#[test]
fn binary_encoding_round_trips_fixture_maps() {
    for name in ["flat", "hosts", "racks", "ec", "classes", "big1000"] {
        let map = load(name);
        let back = CrushMap::decode(&map.encode()).expect("decode");
        assert_eq!(back, map, "{name}");
    }
}

/// `crushtool --reweight-item` changes the CRUSH weight of an item and of its
/// ancestors, shadow (device-class) buckets included; `reweight_item` must
/// produce the same map and therefore the same mappings.
#[test]
fn reweight_item_matches_crushtool() {
    for (base, changes, target, cases) in [
        (
            "hosts",
            vec![(3, "2.5"), (8, "0")],
            "hosts_rw",
            vec![("hosts_rw_r0_n3", 0)],
        ),
        (
            "classes",
            vec![(2, "3.0"), (13, "0.75")],
            "classes_rw",
            vec![("classes_rw_r0_n3", 0), ("classes_rw_r1_n3", 1)],
        ),
    ] {
        let mut map = load(base);
        for (item, w) in changes {
            map.reweight_item(item, parse_weight(w).expect("weight"))
                .expect("reweight");
        }
        let want = fs::read_to_string(dir().join(format!("maps/{target}.decompiled.txt")))
            .expect("decompiled");
        assert_eq!(print(&map), want, "{target}");
        let weights = default_weights(&map);
        for (case, rule) in cases {
            let expected =
                fs::read_to_string(dir().join(format!("mappings/{case}.txt"))).expect("mappings");
            for (x, line) in expected.lines().enumerate() {
                let got = map.do_rule(rule, x as u32, 3, &weights);
                assert_eq!(
                    format_mapping(rule, x as i64, &got),
                    format!("CRUSH rule {rule} x {x} {line}"),
                    "{case}"
                );
            }
        }
    }
}

/// Ceph's binary map (what `crushtool -c` wrote) reads back as the same map:
/// it prints as `crushtool -d` printed it and maps like the text form.
#[test]
fn ceph_binary_maps_read_back() {
    for name in [
        "flat",
        "hosts",
        "hosts_rw",
        "racks",
        "racks_legacy",
        "ec",
        "classes",
        "classes_rw",
        "big1000",
    ] {
        let bin = fs::read(dir().join(format!("maps/{name}.bin"))).expect("bin");
        let map = shoal_crush::ceph_binary::decode(&bin).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want =
            fs::read_to_string(dir().join(format!("maps/{name}.decompiled.txt"))).expect("txt");
        assert_eq!(print(&map), want, "{name}");
        let text = load(name);
        let (wa, wb) = (default_weights(&map), default_weights(&text));
        for rule in text.rules().map(|r| r.id) {
            for x in 0..500 {
                assert_eq!(
                    map.do_rule(rule, x, 4, &wa),
                    text.do_rule(rule, x, 4, &wb),
                    "{name} {rule} {x}"
                );
            }
        }
        // Truncations are errors, not panics.
        for cut in (0..bin.len()).step_by(7) {
            let _ = shoal_crush::ceph_binary::decode(&bin[..cut]);
        }
    }
}

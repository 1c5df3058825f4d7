//! Printer for Ceph's CRUSH text format, line for line as `crushtool -d`.

use std::collections::BTreeSet;
use std::fmt::Write;

use super::weight::format_weight;
use crate::map::{BucketAlg, CrushMap, RULE_ERASURE, RULE_REPLICATED, Step, Tunables};

/// Prints `map` as `crushtool -d` would.
pub fn print(map: &CrushMap) -> String {
    let mut out = String::from("# begin crush map\n");
    print_tunables(map, &mut out);
    out.push_str("\n# devices\n");
    for d in map.devices().filter(|d| d.id < map.max_devices()) {
        let _ = write!(out, "device {} {}", d.id, d.name);
        if let Some(c) = &d.class {
            let _ = write!(out, " class {c}");
        }
        out.push('\n');
    }
    out.push_str("\n# types\n");
    if !map.types().contains_key(&0) {
        out.push_str("type 0 osd\n");
    }
    for (id, name) in map.types().iter().filter(|(id, _)| **id >= 0) {
        let _ = writeln!(out, "type {id} {name}");
    }
    out.push_str("\n# buckets\n");
    let mut done = BTreeSet::new();
    for i in 0..map.max_buckets() {
        print_bucket_tree(map, -1 - i as i32, &mut done, &mut out);
    }
    out.push_str("\n# rules\n");
    for r in map.rules() {
        print_rule(map, r, &mut out);
    }
    out.push_str("\n# end crush map\n");
    out
}

fn print_tunables(map: &CrushMap, out: &mut String) {
    let t = &map.tunables;
    let l = Tunables::legacy();
    let rows = [
        (
            "choose_local_tries",
            t.choose_local_tries,
            l.choose_local_tries,
        ),
        (
            "choose_local_fallback_tries",
            t.choose_local_fallback_tries,
            l.choose_local_fallback_tries,
        ),
        (
            "choose_total_tries",
            t.choose_total_tries,
            l.choose_total_tries,
        ),
        (
            "chooseleaf_descend_once",
            t.chooseleaf_descend_once,
            l.chooseleaf_descend_once,
        ),
        (
            "chooseleaf_vary_r",
            t.chooseleaf_vary_r,
            l.chooseleaf_vary_r,
        ),
        (
            "chooseleaf_stable",
            t.chooseleaf_stable,
            l.chooseleaf_stable,
        ),
        (
            "straw_calc_version",
            t.straw_calc_version,
            l.straw_calc_version,
        ),
        (
            "allowed_bucket_algs",
            t.allowed_bucket_algs,
            l.allowed_bucket_algs,
        ),
    ];
    for (name, v, legacy) in rows {
        if v != legacy {
            let _ = writeln!(out, "tunable {name} {v}");
        }
    }
}

/// Children first, each bucket once (Ceph's depth-first `decompile_bucket`).
fn print_bucket_tree(map: &CrushMap, id: i32, done: &mut BTreeSet<i32>, out: &mut String) {
    let Some(b) = map.bucket(id) else { return };
    if !done.insert(id) {
        return;
    }
    for &item in &b.items {
        if item < 0 {
            print_bucket_tree(map, item, done, out);
        }
    }
    if b.is_shadow() || b.name.contains('~') {
        return;
    }
    let type_name = map
        .types()
        .get(&b.type_id)
        .cloned()
        .unwrap_or_else(|| format!("type{}", b.type_id));
    let _ = writeln!(out, "{type_name} {} {{", b.name);
    let _ = writeln!(out, "\tid {id}\t\t# do not change unnecessarily");
    if let Some(per) = map.class_buckets().get(&id) {
        for (c, shadow) in per {
            let cname = map.classes().get(c).map_or("?", String::as_str);
            let _ = writeln!(
                out,
                "\tid {shadow} class {cname}\t\t# do not change unnecessarily"
            );
        }
    }
    let _ = writeln!(out, "\t# weight {}", format_weight(b.weight()));
    let _ = write!(out, "\talg {}", b.alg.name());
    let dopos = match b.alg {
        BucketAlg::Uniform => {
            let _ = write!(
                out,
                "\t# do not change bucket size ({}) unnecessarily",
                b.items.len()
            );
            true
        }
        BucketAlg::List => {
            out.push_str("\t# add new items at the end; do not change order unnecessarily");
            false
        }
        BucketAlg::Straw2 => false,
    };
    out.push('\n');
    let _ = writeln!(out, "\thash {}\t# rjenkins1", b.hash);
    for (j, (&item, &w)) in b.items.iter().zip(&b.weights).enumerate() {
        let name = item_name(map, item);
        let _ = write!(out, "\titem {name} weight {}", format_weight(w));
        if dopos {
            let _ = write!(out, " pos {j}");
        }
        out.push('\n');
    }
    out.push_str("}\n");
}

fn item_name(map: &CrushMap, id: i32) -> String {
    match map.item_name(id) {
        Some(n) => n.to_string(),
        None if id >= 0 => format!("device{id}"),
        None => format!("bucket{}", -1 - i64::from(id)),
    }
}

fn print_rule(map: &CrushMap, r: &crate::map::Rule, out: &mut String) {
    let _ = writeln!(out, "rule {} {{", r.name);
    let _ = writeln!(out, "\tid {}", r.id);
    match r.rule_type {
        RULE_REPLICATED => out.push_str("\ttype replicated\n"),
        RULE_ERASURE => out.push_str("\ttype erasure\n"),
        t => {
            let _ = writeln!(out, "\ttype {t}");
        }
    }
    let _ = writeln!(out, "\tmin_size {}", r.min_size);
    let _ = writeln!(out, "\tmax_size {}", r.max_size);
    let type_name = |t: i32| {
        map.types().get(&t).cloned().unwrap_or_else(|| {
            if t == 0 {
                "device".into()
            } else {
                format!("type{t}")
            }
        })
    };
    for s in &r.steps {
        let line = match *s {
            Step::Noop => "step noop".to_string(),
            Step::Emit => "step emit".to_string(),
            Step::Take(item) => match map.split_id_class(item) {
                Some((orig, c)) => {
                    let cname = map.classes().get(&c).map_or("?", String::as_str);
                    format!("step take {} class {cname}", item_name(map, orig))
                }
                None => format!("step take {}", item_name(map, item)),
            },
            Step::ChooseFirstN { n, type_id } => {
                format!("step choose firstn {n} type {}", type_name(type_id))
            }
            Step::ChooseIndep { n, type_id } => {
                format!("step choose indep {n} type {}", type_name(type_id))
            }
            Step::ChooseLeafFirstN { n, type_id } => {
                format!("step chooseleaf firstn {n} type {}", type_name(type_id))
            }
            Step::ChooseLeafIndep { n, type_id } => {
                format!("step chooseleaf indep {n} type {}", type_name(type_id))
            }
            Step::SetChooseTries(v) => format!("step set_choose_tries {v}"),
            Step::SetChooseLeafTries(v) => format!("step set_chooseleaf_tries {v}"),
            Step::SetChooseLocalTries(v) => format!("step set_choose_local_tries {v}"),
            Step::SetChooseLocalFallbackTries(v) => {
                format!("step set_choose_local_fallback_tries {v}")
            }
            Step::SetChooseLeafVaryR(v) => format!("step set_chooseleaf_vary_r {v}"),
            Step::SetChooseLeafStable(v) => format!("step set_chooseleaf_stable {v}"),
        };
        let _ = writeln!(out, "\t{line}");
    }
    out.push_str("}\n");
}

//! The pure half of `crushtool --test`: running inputs through rules,
//! counting placements and comparing maps. Formatting lives in the binary.

use std::collections::BTreeMap;

use crate::map::{CrushMap, ITEM_NONE, Step, WEIGHT_ONE};
use crate::mapper::Workspace;

/// crushtool's default reweight vector: 1.0 for every device some bucket
/// holds, 0 for the rest, indexed by device id up to `max_devices`.
pub fn default_weights(map: &CrushMap) -> Vec<u32> {
    let mut w = vec![0u32; map.max_devices().max(0) as usize];
    for b in map.buckets() {
        for &i in &b.items {
            if let Some(slot) = usize::try_from(i).ok().and_then(|i| w.get_mut(i)) {
                *slot = WEIGHT_ONE;
            }
        }
    }
    w
}

/// One line of `--show-mappings`: `CRUSH rule 0 x 42 [3,7,11]`.
pub fn format_mapping(rule: u32, x: i64, out: &[i32]) -> String {
    let items: Vec<String> = out.iter().map(i32::to_string).collect();
    format!("CRUSH rule {rule} x {x} [{}]", items.join(","))
}

/// Per-rule counts of a test run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Utilization {
    /// Rule id.
    pub rule: u32,
    /// Replicas asked for.
    pub num_rep: usize,
    /// Result size -> number of inputs that got it.
    pub sizes: BTreeMap<usize, u64>,
    /// Placements per device id.
    pub per_device: Vec<u64>,
    /// Number of inputs.
    pub inputs: u64,
}

/// Maps every x in `xs` through `rule`, calling `each` with each result, and
/// returns the counts. `x` is passed to CRUSH as is (crushtool without `--pool-id`).
pub fn run(
    map: &CrushMap,
    rule: u32,
    num_rep: usize,
    xs: std::ops::RangeInclusive<i64>,
    weights: &[u32],
    mut each: impl FnMut(i64, &[i32]),
) -> Utilization {
    let mut u = Utilization {
        rule,
        num_rep,
        per_device: vec![0; map.max_devices().max(0) as usize],
        ..Utilization::default()
    };
    let mut ws = Workspace::default();
    let mut out = Vec::with_capacity(num_rep);
    for x in xs {
        map.do_rule_with(&mut ws, rule, x as u32, num_rep, weights, &mut out);
        each(x, &out);
        u.inputs += 1;
        *u.sizes.entry(out.len()).or_default() += 1;
        for &d in &out {
            if d != ITEM_NONE {
                if let Some(c) = usize::try_from(d)
                    .ok()
                    .and_then(|d| u.per_device.get_mut(d))
                {
                    *c += 1;
                }
            }
        }
    }
    u
}

/// crushtool's `get_maximum_affected_by_rule`: an upper bound on distinct
/// results, from the number of buckets of each type the rule chooses.
pub fn max_affected_by_rule(map: &CrushMap, rule: u32) -> usize {
    let Some(r) = map.rule(rule) else { return 0 };
    let mut wanted: BTreeMap<i32, i32> = BTreeMap::new();
    let mut types = Vec::new();
    for s in &r.steps {
        let (n, t) = match *s {
            Step::ChooseFirstN { n, type_id }
            | Step::ChooseIndep { n, type_id }
            | Step::ChooseLeafFirstN { n, type_id }
            | Step::ChooseLeafIndep { n, type_id } => (n, type_id),
            Step::SetChooseTries(v)
            | Step::SetChooseLeafTries(v)
            | Step::SetChooseLocalTries(v)
            | Step::SetChooseLocalFallbackTries(v)
            | Step::SetChooseLeafVaryR(v)
            | Step::SetChooseLeafStable(v) => (v, 0),
            Step::Noop | Step::Take(_) | Step::Emit => continue,
        };
        types.push(t);
        wanted.insert(t, n);
    }
    let mut have: BTreeMap<i32, usize> = BTreeMap::new();
    for t in &types {
        have.insert(*t, map.buckets().filter(|b| b.type_id == *t).count());
    }
    for t in &types {
        let w = wanted.get(t).copied().unwrap_or(0);
        if let Some(h) = have.get_mut(t) {
            if w > 0 && (w as usize) < *h {
                *h = w as usize;
            }
        }
    }
    let mut max = map.max_buckets().max(map.max_devices().max(0) as usize);
    for t in &types {
        let h = have.get(t).copied().unwrap_or(0);
        if h > 0 && h < max {
            max = h;
        }
    }
    max
}

/// How much placement differs between two maps over the same inputs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Movement {
    /// Inputs compared.
    pub inputs: u64,
    /// Inputs whose result changed at all.
    pub changed_inputs: u64,
    /// Replica placements total (sum of result sizes under `a`).
    pub placements: u64,
    /// Placements of `a` whose device is not in `b`'s result for that input.
    pub moved_placements: u64,
}

/// Compares rule `rule` of two maps for every x in `xs`.
pub fn compare(
    a: (&CrushMap, &[u32]),
    b: (&CrushMap, &[u32]),
    rule: u32,
    num_rep: usize,
    xs: std::ops::RangeInclusive<i64>,
) -> Movement {
    let mut m = Movement::default();
    let (mut wa, mut wb) = (Workspace::default(), Workspace::default());
    let (mut oa, mut ob) = (Vec::new(), Vec::new());
    for x in xs {
        a.0.do_rule_with(&mut wa, rule, x as u32, num_rep, a.1, &mut oa);
        b.0.do_rule_with(&mut wb, rule, x as u32, num_rep, b.1, &mut ob);
        m.inputs += 1;
        if oa != ob {
            m.changed_inputs += 1;
        }
        for d in oa.iter().filter(|d| **d != ITEM_NONE) {
            m.placements += 1;
            if !ob.contains(d) {
                m.moved_placements += 1;
            }
        }
    }
    m
}

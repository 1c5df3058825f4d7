//! The rule engine: `crush_do_rule` and its two choose loops, firstn and indep.
//!
//! This follows Ceph's `mapper.c` decision for decision (retry counters, the
//! `r` values fed to the hash, collision and rejection order), because any
//! difference changes some mappings.

use std::cell::Cell;

use crate::hash::hash32_2;
use crate::map::{CrushMap, Step};

/// Scratch space for [`CrushMap::do_rule_with`]; reuse it to avoid allocation.
#[derive(Debug, Default, Clone)]
pub struct Workspace {
    a: Vec<i32>,
    b: Vec<i32>,
    c: Vec<i32>,
    steps: u64,
}

impl Workspace {
    /// Bucket choices the last [`CrushMap::do_rule_with`] made with this
    /// workspace: the measure [`CrushMap::max_steps`] bounds.
    pub fn steps(&self) -> u64 {
        self.steps
    }
}

/// Parameters fixed for one choose step.
pub(crate) struct Choose<'a> {
    pub(crate) map: &'a CrushMap,
    pub(crate) weights: &'a [u32],
    pub(crate) x: u32,
    pub(crate) local_retries: u32,
    pub(crate) local_fallback_retries: u32,
    pub(crate) vary_r: u32,
    pub(crate) stable: bool,
    /// Bucket choices made so far (see [`Workspace::steps`]).
    pub(crate) steps: Cell<u64>,
}

impl CrushMap {
    /// Maps input `x` through rule `rule` into at most `result_max` items,
    /// with per-device reweights `weights` (16.16; missing entries are out).
    /// Returns an empty vector for a missing rule, as Ceph does.
    pub fn do_rule(&self, rule: u32, x: u32, result_max: usize, weights: &[u32]) -> Vec<i32> {
        let mut ws = Workspace::default();
        let mut out = Vec::with_capacity(result_max);
        self.do_rule_with(&mut ws, rule, x, result_max, weights, &mut out);
        out
    }

    /// [`CrushMap::do_rule`] writing into `out` and reusing `ws`.
    pub fn do_rule_with(
        &self,
        ws: &mut Workspace,
        rule: u32,
        x: u32,
        result_max: usize,
        weights: &[u32],
        out: &mut Vec<i32>,
    ) {
        out.clear();
        ws.steps = 0;
        let Some(rule) = self.rules.get(&rule) else {
            return;
        };
        for v in [&mut ws.a, &mut ws.b, &mut ws.c] {
            if v.len() != result_max {
                v.clear();
                v.resize(result_max, 0);
            }
        }
        let mut knobs = RuleKnobs::new(self);
        // w: working set, o: next working set, c: leaves found by chooseleaf.
        let (w, o, c) = (&mut ws.a, &mut ws.b, &mut ws.c);
        let mut wsize = 0usize;
        for step in &rule.steps {
            match *step {
                Step::Take(item) => {
                    let ok = (item >= 0 && item < self.max_devices) || self.bucket(item).is_some();
                    if ok && result_max > 0 {
                        w[0] = item;
                        wsize = 1;
                    }
                }
                Step::ChooseFirstN { .. }
                | Step::ChooseIndep { .. }
                | Step::ChooseLeafFirstN { .. }
                | Step::ChooseLeafIndep { .. } => {
                    if wsize == 0 {
                        continue;
                    }
                    let ch = knobs.choose(self, weights, x);
                    let osize = ch.step(step, &knobs, &w[..wsize], o, c, result_max);
                    ws.steps = ws.steps.saturating_add(ch.steps.get());
                    std::mem::swap(w, o);
                    wsize = osize;
                }
                Step::Emit => {
                    let room = result_max.saturating_sub(out.len());
                    out.extend(w.iter().take(wsize.min(room)));
                    wsize = 0;
                }
                _ => knobs.set(step),
            }
        }
    }
}

/// The retry knobs in force while a rule runs: the map's tunables, as
/// overridden by the rule's `set_*` steps so far.
struct RuleKnobs {
    choose_tries: u32,
    choose_leaf_tries: u32,
    local_retries: u32,
    local_fallback: u32,
    vary_r: u32,
    stable: u32,
    descend_once: bool,
}

impl RuleKnobs {
    fn new(map: &CrushMap) -> Self {
        let t = &map.tunables;
        RuleKnobs {
            // Ceph's tunable counts retries; one more is the number of tries.
            choose_tries: t.choose_total_tries.saturating_add(1),
            choose_leaf_tries: 0,
            local_retries: t.choose_local_tries,
            local_fallback: t.choose_local_fallback_tries,
            vary_r: t.chooseleaf_vary_r,
            stable: t.chooseleaf_stable,
            descend_once: t.chooseleaf_descend_once != 0,
        }
    }

    /// Applies a `set_*` step; out-of-range values are ignored, as in Ceph.
    fn set(&mut self, step: &Step) {
        match *step {
            Step::SetChooseTries(v) if v > 0 => self.choose_tries = v as u32,
            Step::SetChooseLeafTries(v) if v > 0 => self.choose_leaf_tries = v as u32,
            Step::SetChooseLocalTries(v) if v >= 0 => self.local_retries = v as u32,
            Step::SetChooseLocalFallbackTries(v) if v >= 0 => self.local_fallback = v as u32,
            Step::SetChooseLeafVaryR(v) if v >= 0 => self.vary_r = v as u32,
            Step::SetChooseLeafStable(v) if v >= 0 => self.stable = v as u32,
            _ => {}
        }
    }

    /// (tries, recurse_tries) for a choose step.
    fn tries(&self, firstn: bool) -> (u32, u32) {
        let recurse = if self.choose_leaf_tries > 0 {
            self.choose_leaf_tries
        } else if !firstn || self.descend_once {
            // indep always recurses once; firstn once with descend_once.
            1
        } else {
            self.choose_tries
        };
        (self.choose_tries, recurse)
    }

    fn choose<'a>(&self, map: &'a CrushMap, weights: &'a [u32], x: u32) -> Choose<'a> {
        Choose {
            map,
            weights,
            x,
            local_retries: self.local_retries,
            local_fallback_retries: self.local_fallback,
            vary_r: self.vary_r,
            stable: self.stable != 0,
            steps: Cell::new(0),
        }
    }
}

impl Choose<'_> {
    /// Runs one choose/chooseleaf step from every bucket of the working set
    /// `w` into `o` (leaves into `c`, then copied to `o`). Returns the new size.
    fn step(
        &self,
        step: &Step,
        knobs: &RuleKnobs,
        w: &[i32],
        o: &mut [i32],
        c: &mut [i32],
        result_max: usize,
    ) -> usize {
        let (n, type_id, firstn, leaf) = match *step {
            Step::ChooseFirstN { n, type_id } => (n, type_id, true, false),
            Step::ChooseIndep { n, type_id } => (n, type_id, false, false),
            Step::ChooseLeafFirstN { n, type_id } => (n, type_id, true, true),
            Step::ChooseLeafIndep { n, type_id } => (n, type_id, false, true),
            _ => return 0,
        };
        let tries = knobs.tries(firstn);
        let mut osize = 0usize;
        for &wi in w {
            // n <= 0 means "result_max + n", as Ceph's CRUSH_N_MINUS.
            let numrep = i64::from(n) + if n <= 0 { result_max as i64 } else { 0 };
            let Some(bucket) = self.map.bucket(wi).filter(|_| numrep > 0) else {
                continue;
            };
            let numrep = numrep as usize;
            let room = result_max - osize;
            let (out, out2) = (&mut o[osize..], Some(&mut c[osize..]));
            if firstn {
                osize += self.firstn(bucket, numrep, type_id, out, 0, room, tries, leaf, out2, 0);
            } else {
                let out_size = numrep.min(room);
                self.indep(
                    bucket, out_size, numrep, type_id, out, 0, tries, leaf, out2, 0,
                );
                osize += out_size;
            }
        }
        if leaf {
            o[..osize].copy_from_slice(&c[..osize]);
        }
        osize
    }
}

/// Ceph's `is_out`: a partially reweighted device is out for a hashed
/// fraction of inputs.
#[inline]
pub(crate) fn is_out(weights: &[u32], item: i32, x: u32) -> bool {
    let Some(&w) = weights.get(item as usize) else {
        return true;
    };
    if w >= 0x1_0000 {
        return false;
    }
    if w == 0 {
        return true;
    }
    (hash32_2(x, item as u32) & 0xffff) >= w
}

impl Choose<'_> {
    /// Counts one bucket choice.
    #[inline]
    pub(crate) fn count_step(&self) {
        self.steps.set(self.steps.get().saturating_add(1));
    }

    /// The type of an item: 0 for devices; None for a dangling bucket id.
    #[inline]
    pub(crate) fn item_type(&self, item: i32) -> Option<i32> {
        if item >= 0 {
            Some(0)
        } else {
            self.map.bucket(item).map(|b| b.type_id)
        }
    }
}

//! The rule engine: `crush_do_rule` and its two choose loops, firstn and indep.
//!
//! This follows Ceph's `mapper.c` decision for decision (retry counters, the
//! `r` values fed to the hash, collision and rejection order), because any
//! difference changes some mappings.

use crate::hash::hash32_2;
use crate::map::{CrushMap, Step};

/// Scratch space for [`CrushMap::do_rule_with`]; reuse it to avoid allocation.
#[derive(Debug, Default, Clone)]
pub struct Workspace {
    a: Vec<i32>,
    b: Vec<i32>,
    c: Vec<i32>,
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
        let Some(rule) = self.rules.get(&rule) else {
            return;
        };
        for v in [&mut ws.a, &mut ws.b, &mut ws.c] {
            if v.len() != result_max {
                v.clear();
                v.resize(result_max, 0);
            }
        }
        let t = &self.tunables;
        let mut choose_tries = t.choose_total_tries.saturating_add(1);
        let mut choose_leaf_tries = 0u32;
        let mut local_retries = t.choose_local_tries;
        let mut local_fallback = t.choose_local_fallback_tries;
        let mut vary_r = t.chooseleaf_vary_r;
        let mut stable = t.chooseleaf_stable;
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
                Step::SetChooseTries(v) if v > 0 => choose_tries = v as u32,
                Step::SetChooseLeafTries(v) if v > 0 => choose_leaf_tries = v as u32,
                Step::SetChooseLocalTries(v) if v >= 0 => local_retries = v as u32,
                Step::SetChooseLocalFallbackTries(v) if v >= 0 => local_fallback = v as u32,
                Step::SetChooseLeafVaryR(v) if v >= 0 => vary_r = v as u32,
                Step::SetChooseLeafStable(v) if v >= 0 => stable = v as u32,
                Step::ChooseFirstN { n, type_id }
                | Step::ChooseIndep { n, type_id }
                | Step::ChooseLeafFirstN { n, type_id }
                | Step::ChooseLeafIndep { n, type_id } => {
                    if wsize == 0 {
                        continue;
                    }
                    let firstn = matches!(
                        step,
                        Step::ChooseFirstN { .. } | Step::ChooseLeafFirstN { .. }
                    );
                    let leaf = matches!(
                        step,
                        Step::ChooseLeafFirstN { .. } | Step::ChooseLeafIndep { .. }
                    );
                    let recurse_tries = if choose_leaf_tries > 0 {
                        choose_leaf_tries
                    } else if !firstn || t.chooseleaf_descend_once != 0 {
                        // indep always recurses once; firstn once with descend_once.
                        1
                    } else {
                        choose_tries
                    };
                    let ch = Choose {
                        map: self,
                        weights,
                        x,
                        local_retries,
                        local_fallback_retries: local_fallback,
                        vary_r,
                        stable: stable != 0,
                    };
                    let mut osize = 0usize;
                    for &wi in w.iter().take(wsize) {
                        let mut numrep = i64::from(n);
                        if numrep <= 0 {
                            numrep += result_max as i64;
                            if numrep <= 0 {
                                continue;
                            }
                        }
                        let numrep = numrep as usize;
                        let Some(bucket) = self.bucket(wi) else {
                            continue;
                        };
                        let room = result_max - osize;
                        if firstn {
                            let tries = (choose_tries, recurse_tries);
                            let got = ch.firstn(
                                bucket,
                                numrep,
                                type_id,
                                &mut o[osize..],
                                0,
                                room,
                                tries,
                                leaf,
                                Some(&mut c[osize..]),
                                0,
                            );
                            osize += got;
                        } else {
                            let out_size = numrep.min(room);
                            let tries = (choose_tries, recurse_tries);
                            ch.indep(
                                bucket,
                                out_size,
                                numrep,
                                type_id,
                                &mut o[osize..],
                                0,
                                tries,
                                leaf,
                                Some(&mut c[osize..]),
                                0,
                            );
                            osize += out_size;
                        }
                    }
                    if leaf {
                        o[..osize].copy_from_slice(&c[..osize]);
                    }
                    std::mem::swap(w, o);
                    wsize = osize;
                }
                Step::Emit => {
                    for &item in w.iter().take(wsize) {
                        if out.len() >= result_max {
                            break;
                        }
                        out.push(item);
                    }
                    wsize = 0;
                }
                _ => {}
            }
        }
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

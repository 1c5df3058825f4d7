//! The limits every CRUSH map keeps, and the work one mapping may cost.
//!
//! CRUSH's loops are bounded only by numbers the map itself carries: the
//! retry tunables, the `n` of each choose step, the size of each bucket, the
//! depth of the hierarchy. Ceph trusts them; a map that decodes here must
//! also map in bounded time, so [`CrushMap::finalize`] (which every decoder,
//! the text compiler and every edit end with) refuses a map with any of them
//! above the constants below, with [`CrushError::Limit`]. Every real map sits
//! far below them: Ceph's profiles use 50 tries (EC rules set 100), at most
//! 5 local tries, a dozen bucket types, and pools of at most a few dozen.
//!
//! [`CrushMap::max_steps`] gives, for one rule and result size, an upper
//! bound on the bucket choices (each one pass over at most
//! [`MAX_BUCKET_ITEMS`] items) a single `do_rule` can make with this map;
//! [`crate::Workspace::steps`] counts the ones a call made, and the tests
//! and the `map_decode` fuzz target check the count never exceeds the bound.

use crate::error::{CrushError, Result};
use crate::map::{CrushMap, Step};

/// Most items one bucket may hold (Ceph's hosts hold tens, roots hundreds).
pub const MAX_BUCKET_ITEMS: usize = 8192;
/// Most bucket slots (`max_buckets`, shadow buckets included).
pub const MAX_BUCKETS: usize = 1 << 18;
/// Deepest bucket hierarchy, in buckets from a root to a device's parent
/// (Ceph's default type list has 11 bucket types).
pub const MAX_DEPTH: usize = 64;
/// Device ids must be below this (Ceph's `mon_max_osd` defaults to 10000).
pub const MAX_DEVICES: i32 = 1 << 16;
/// Largest `choose_total_tries` tunable, `set_choose_tries` and
/// `set_chooseleaf_tries` step (Ceph's optimal profile: 50; its EC rules: 100).
pub const MAX_CHOOSE_TRIES: u32 = 250;
/// Largest `choose_local_tries` and `choose_local_fallback_tries`, tunable
/// or rule step (Ceph's legacy profile: 2 and 5; later ones: 0).
pub const MAX_LOCAL_TRIES: u32 = 16;
/// Most steps in one rule.
pub const MAX_RULE_STEPS: usize = 32;
/// Largest `n` (in absolute value) of a choose step: the replicas or chunks
/// it asks for, or how many fewer than the pool size.
pub const MAX_REPLICAS: i32 = 64;

fn limit(what: &'static str, value: impl Into<i64>, max: impl Into<i64>) -> CrushError {
    let clamp = |v: i64| u64::try_from(v).unwrap_or(0);
    CrushError::Limit {
        what,
        value: clamp(value.into()),
        max: clamp(max.into()),
    }
}

fn at_most(what: &'static str, value: u32, max: u32) -> Result<()> {
    if value > max {
        return Err(limit(what, value, max));
    }
    Ok(())
}

/// A `set_*` step value above `max` (negative values are ignored by the
/// mapper, so only the upper end matters).
fn step_at_most(what: &'static str, value: i32, max: u32) -> Result<()> {
    if i64::from(value) > i64::from(max) {
        return Err(limit(what, value, max));
    }
    Ok(())
}

impl CrushMap {
    /// Refuses a map whose numbers would let one mapping run unbounded:
    /// tunables, rule steps, bucket sizes and device ids above the limits of
    /// this module. The hierarchy's depth is checked with its acyclicity.
    pub(crate) fn check_limits(&self) -> Result<()> {
        let t = &self.tunables;
        at_most("choose_total_tries", t.choose_total_tries, MAX_CHOOSE_TRIES)?;
        at_most("choose_local_tries", t.choose_local_tries, MAX_LOCAL_TRIES)?;
        at_most(
            "choose_local_fallback_tries",
            t.choose_local_fallback_tries,
            MAX_LOCAL_TRIES,
        )?;
        if self.max_devices > MAX_DEVICES {
            return Err(limit("device id", self.max_devices - 1, MAX_DEVICES - 1));
        }
        for b in self.buckets() {
            if b.items.len() > MAX_BUCKET_ITEMS {
                return Err(too_many_items(b.items.len()));
            }
        }
        for r in self.rules.values() {
            check_rule(&r.steps)?;
        }
        Ok(())
    }

    /// An upper bound on the bucket choices one [`CrushMap::do_rule`] of
    /// `rule` with `result_max` makes on this map, whatever the input and the
    /// reweights (0 for a missing rule). With `T` tries, `Tr` recursive
    /// tries (the larger of the two), `F` local failures a descent may take
    /// (`choose_local_tries`, or bucket size + `choose_local_fallback_tries`
    /// when the latter is set), `D` the hierarchy's depth, `N` a step's
    /// replicas and `R = result_max`, each choose step costs at most
    /// `R·N·(T+F+1)·D·(1 + (Tr+F+1))` (firstn, chooseleaf) or
    /// `R·T·N·D·(1 + Tr)` (indep). Every factor is capped by the limits.
    pub fn max_steps(&self, rule: u32, result_max: usize) -> u64 {
        let Some(rule) = self.rules.get(&rule) else {
            return 0;
        };
        let t = &self.tunables;
        let mut tries = u64::from(t.choose_total_tries) + 1;
        let mut leaf_tries = 1u64;
        let mut local = u64::from(t.choose_local_tries);
        let mut fallback = u64::from(t.choose_local_fallback_tries);
        for s in &rule.steps {
            let pos = |v: i32| u64::try_from(v).unwrap_or(0);
            match *s {
                Step::SetChooseTries(v) => tries = tries.max(pos(v)),
                Step::SetChooseLeafTries(v) => leaf_tries = leaf_tries.max(pos(v)),
                Step::SetChooseLocalTries(v) => local = local.max(pos(v)),
                Step::SetChooseLocalFallbackTries(v) => fallback = fallback.max(pos(v)),
                _ => {}
            }
        }
        let rec_tries = tries.max(leaf_tries);
        let size = self.buckets().map(|b| b.items.len()).max().unwrap_or(0) as u64;
        let depth = self.height().max(1);
        // Failures one descent may take locally before it gives up (+1 for the last).
        let local_failures = if fallback > 0 {
            local.max(size + fallback)
        } else {
            local
        } + 1;
        let r = result_max.max(1) as u64;
        let mut total = 0u64;
        for s in &rule.steps {
            let (n, firstn, leaf) = match *s {
                Step::ChooseFirstN { n, .. } => (n, true, false),
                Step::ChooseLeafFirstN { n, .. } => (n, true, true),
                Step::ChooseIndep { n, .. } => (n, false, false),
                Step::ChooseLeafIndep { n, .. } => (n, false, true),
                _ => continue,
            };
            let numrep = if n > 0 {
                n as u64
            } else {
                (r as i64 + i64::from(n)).max(0) as u64
            };
            let per_item = if firstn {
                let attempts = tries + local_failures;
                let recursion = if leaf {
                    (rec_tries + local_failures).saturating_mul(depth)
                } else {
                    0
                };
                numrep
                    .saturating_mul(attempts)
                    .saturating_mul(depth.saturating_add(recursion))
            } else {
                let recursion = if leaf {
                    rec_tries.saturating_mul(depth)
                } else {
                    0
                };
                tries
                    .saturating_mul(numrep.min(r))
                    .saturating_mul(depth.saturating_add(recursion))
            };
            total = total.saturating_add(r.saturating_mul(per_item));
        }
        total
    }

    /// Buckets on the longest path from a root down to a device's parent.
    fn height(&self) -> u64 {
        let mut memo = vec![0u64; self.buckets.len()];
        self.buckets()
            .map(|b| self.height_of(b.id, &mut memo, 0))
            .max()
            .unwrap_or(0)
    }

    fn height_of(&self, id: i32, memo: &mut [u64], depth: usize) -> u64 {
        let idx = (-1 - i64::from(id)) as usize;
        match memo.get(idx) {
            Some(&h) if h > 0 => return h,
            None => return 0,
            _ => {}
        }
        // A finalized map is acyclic and at most MAX_DEPTH deep; the guard
        // keeps a map built by hand and never finalized from recursing forever.
        if depth > MAX_DEPTH {
            return 1;
        }
        let children: Vec<i32> = self
            .bucket(id)
            .map(|b| b.items.iter().copied().filter(|i| *i < 0).collect())
            .unwrap_or_default();
        let h = 1 + children
            .into_iter()
            .map(|c| self.height_of(c, memo, depth + 1))
            .max()
            .unwrap_or(0);
        memo[idx] = h;
        h
    }
}

/// The error for a bucket of `n` items.
pub(crate) fn too_many_items(n: usize) -> CrushError {
    limit(
        "bucket size",
        i64::try_from(n).unwrap_or(i64::MAX),
        MAX_BUCKET_ITEMS as i64,
    )
}

fn check_rule(steps: &[Step]) -> Result<()> {
    if steps.len() > MAX_RULE_STEPS {
        return Err(limit(
            "rule steps",
            steps.len() as i64,
            MAX_RULE_STEPS as i64,
        ));
    }
    for s in steps {
        match *s {
            Step::ChooseFirstN { n, .. }
            | Step::ChooseIndep { n, .. }
            | Step::ChooseLeafFirstN { n, .. }
            | Step::ChooseLeafIndep { n, .. }
                if n.unsigned_abs() > MAX_REPLICAS.unsigned_abs() =>
            {
                return Err(limit("choose step n", n.unsigned_abs(), MAX_REPLICAS));
            }
            Step::SetChooseTries(v) => step_at_most("set_choose_tries", v, MAX_CHOOSE_TRIES)?,
            Step::SetChooseLeafTries(v) => {
                step_at_most("set_chooseleaf_tries", v, MAX_CHOOSE_TRIES)?;
            }
            Step::SetChooseLocalTries(v) => {
                step_at_most("set_choose_local_tries", v, MAX_LOCAL_TRIES)?;
            }
            Step::SetChooseLocalFallbackTries(v) => {
                step_at_most("set_choose_local_fallback_tries", v, MAX_LOCAL_TRIES)?;
            }
            _ => {}
        }
    }
    Ok(())
}

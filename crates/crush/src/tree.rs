//! Walks over the bucket hierarchy: validation (acyclic, bounded depth),
//! roots, and CRUSH weight changes that propagate to the roots.

use std::collections::BTreeSet;

use crate::error::{CrushError, Result};
use crate::limits::MAX_DEPTH;
use crate::map::CrushMap;

fn too_deep(depth: usize) -> CrushError {
    CrushError::Limit {
        what: "bucket hierarchy depth",
        value: depth as u64,
        max: MAX_DEPTH as u64,
    }
}

impl CrushMap {
    /// Fails on a cycle or on a hierarchy deeper than [`MAX_DEPTH`], so that
    /// the recursive walks (shadow trees, printing) stay shallow. Iterative:
    /// hostile maps cannot overflow the stack here.
    pub(crate) fn check_acyclic(&self) -> Result<()> {
        // depth[i]: 0 = unvisited, u32::MAX = on the stack, else height + 1.
        let mut depth = vec![0u32; self.buckets.len()];
        let idx = |id: i32| (-1 - i64::from(id)) as usize;
        for b in self.buckets() {
            if depth[idx(b.id)] != 0 {
                continue;
            }
            let mut stack: Vec<(i32, usize)> = vec![(b.id, 0)];
            depth[idx(b.id)] = u32::MAX;
            while let Some(&mut (id, ref mut next)) = stack.last_mut() {
                let items = self.bucket(id).map_or(&[][..], |b| b.items.as_slice());
                if let Some(&child) = items.get(*next) {
                    *next += 1;
                    if child >= 0 || self.bucket(child).is_none() {
                        continue;
                    }
                    match depth[idx(child)] {
                        u32::MAX => {
                            return Err(CrushError::Invalid("bucket hierarchy has a cycle".into()));
                        }
                        0 => {
                            if stack.len() >= MAX_DEPTH {
                                return Err(too_deep(stack.len() + 1));
                            }
                            depth[idx(child)] = u32::MAX;
                            stack.push((child, 0));
                        }
                        _ => {}
                    }
                } else {
                    let h = items
                        .iter()
                        .filter(|c| **c < 0)
                        .filter_map(|c| depth.get(idx(*c)).copied())
                        .filter(|d| *d != u32::MAX)
                        .max()
                        .unwrap_or(0);
                    if h as usize >= MAX_DEPTH {
                        return Err(too_deep(h as usize + 1));
                    }
                    depth[idx(id)] = h + 1;
                    stack.pop();
                }
            }
        }
        Ok(())
    }

    /// Buckets that no other bucket holds, excluding shadow buckets, ascending.
    pub fn roots(&self) -> Vec<i32> {
        let held: BTreeSet<i32> = self
            .buckets()
            .flat_map(|b| b.items.iter().copied())
            .collect();
        let mut r: Vec<i32> = self
            .buckets()
            .filter(|b| !b.is_shadow() && !held.contains(&b.id))
            .map(|b| b.id)
            .collect();
        r.sort_unstable();
        r
    }

    /// Sets the CRUSH weight of `item` in every bucket that holds it and
    /// propagates the change up through the ancestors (`--reweight-item`).
    pub fn reweight_item(&mut self, item: i32, weight: u32) -> Result<()> {
        // Shadow buckets hold the same devices; Ceph adjusts them too, and
        // their parents are shadow buckets, so the walk up stays in the tree.
        let parents: Vec<i32> = self
            .buckets()
            .filter(|b| b.items.contains(&item))
            .map(|b| b.id)
            .collect();
        if parents.is_empty() {
            return Err(CrushError::Invalid(format!("item {item} is in no bucket")));
        }
        for p in parents {
            let new_weight = match self.bucket_mut(p) {
                Some(b) => {
                    for (i, w) in b.items.iter().zip(b.weights.iter_mut()) {
                        if *i == item {
                            *w = weight;
                        }
                    }
                    b.weight()
                }
                None => continue,
            };
            self.reweight_item(p, new_weight).ok();
        }
        Ok(())
    }
}

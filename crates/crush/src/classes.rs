//! Device-class shadow trees, built the way Ceph's `populate_classes` does.
//!
//! `step take default class ssd` does not filter at mapping time: Ceph clones
//! every non-shadow tree once per class, keeping only that class's devices,
//! and the rule takes the clone (`default~ssd`). The clones' ids take part in
//! the straw2 hash, so the ids, the item order and the weights here must be
//! what Ceph would produce for the same map.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{CrushError, Result};
use crate::map::{Bucket, CrushMap};

impl CrushMap {
    /// Removes every shadow bucket and rebuilds them, reusing the shadow ids
    /// in `keep` (original id -> class id -> shadow id) where given, and
    /// otherwise the first free negative ids, as Ceph allocates them.
    pub fn populate_classes(&mut self, keep: &BTreeMap<i32, BTreeMap<i32, i32>>) -> Result<()> {
        self.check_acyclic()?;
        for slot in &mut self.buckets {
            if slot.as_ref().is_some_and(Bucket::is_shadow) {
                *slot = None;
            }
        }
        self.class_bucket.clear();
        let used: BTreeSet<i32> = keep.values().flat_map(|m| m.values().copied()).collect();
        let classes: Vec<i32> = self.classes.keys().copied().collect();
        for root in self.roots() {
            for &class in &classes {
                self.clone_for_class(root, class, keep, &used, 0)?;
            }
        }
        Ok(())
    }

    fn clone_for_class(
        &mut self,
        original: i32,
        class: i32,
        keep: &BTreeMap<i32, BTreeMap<i32, i32>>,
        used: &BTreeSet<i32>,
        depth: usize,
    ) -> Result<i32> {
        if depth > crate::limits::MAX_DEPTH {
            return Err(CrushError::Invalid("bucket hierarchy has a cycle".into()));
        }
        let class_name = self
            .classes
            .get(&class)
            .cloned()
            .ok_or_else(|| CrushError::Invalid(format!("no class {class}")))?;
        let orig = self
            .bucket(original)
            .cloned()
            .ok_or_else(|| CrushError::Invalid(format!("no bucket {original}")))?;
        let copy_name = format!("{}~{}", orig.name, class_name);
        if let Some(b) = self.buckets().find(|b| b.name == copy_name) {
            return Ok(b.id);
        }
        let mut items = Vec::new();
        let mut weights = Vec::new();
        for (&item, &w) in orig.items.iter().zip(&orig.weights) {
            if item >= 0 {
                let dev_class = self.device(item).and_then(|d| d.class.as_deref());
                if dev_class == Some(class_name.as_str()) {
                    items.push(item);
                    weights.push(w);
                }
            } else {
                let child = self.clone_for_class(item, class, keep, used, depth + 1)?;
                let cw = self.bucket(child).map_or(0, Bucket::weight);
                items.push(child);
                weights.push(cw);
            }
        }
        let id = match keep.get(&original).and_then(|m| m.get(&class)) {
            Some(id) => *id,
            None => self.free_shadow_id(used),
        };
        self.add_bucket(Bucket {
            id,
            name: copy_name,
            type_id: orig.type_id,
            alg: orig.alg,
            hash: orig.hash,
            items,
            weights,
            class: Some(class),
        })?;
        self.class_bucket
            .entry(original)
            .or_default()
            .insert(class, id);
        Ok(id)
    }

    fn free_shadow_id(&self, used: &BTreeSet<i32>) -> i32 {
        let mut id = -1i32;
        while self.bucket(id).is_some() || used.contains(&id) {
            id -= 1;
        }
        id
    }

    /// The shadow bucket of `bucket` for class `class_name`.
    pub fn class_shadow(&self, bucket: i32, class_name: &str) -> Option<i32> {
        let c = self.class_id(class_name)?;
        self.class_bucket.get(&bucket)?.get(&c).copied()
    }
}

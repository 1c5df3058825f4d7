//! Editing a map in place, as the monitors do for `osd crush` commands and
//! when an OSD boots: named buckets, create-or-move of a device to a
//! location, moving and removing items. Every edit keeps bucket weights
//! equal to the sum of their items up to the roots, and rebuilds the
//! device-class shadow trees when the map has classes.

use std::collections::BTreeSet;

use crate::error::{CrushError, Result};
use crate::map::{Bucket, BucketAlg, CrushMap};

fn invalid(msg: String) -> CrushError {
    CrushError::Invalid(msg)
}

impl CrushMap {
    /// The lowest unused bucket id (-1, -2, ...).
    fn free_bucket_id(&self) -> i32 {
        let used: BTreeSet<i32> = self.buckets().map(|b| b.id).collect();
        (1..)
            .map(|n: i32| -n)
            .find(|id| !used.contains(id))
            .unwrap_or(i32::MIN)
    }

    /// The non-shadow bucket holding `item`, if any.
    pub fn parent_of(&self, item: i32) -> Option<i32> {
        self.buckets()
            .find(|b| !b.is_shadow() && b.items.contains(&item))
            .map(|b| b.id)
    }

    /// Adds an empty straw2 bucket `name` of type `type_name`, under the
    /// bucket `parent` or as a new root. Returns its id.
    pub fn add_named_bucket(
        &mut self,
        name: &str,
        type_name: &str,
        parent: Option<&str>,
    ) -> Result<i32> {
        if self.item_id(name).is_some() {
            return Err(invalid(format!("item {name} already exists")));
        }
        let type_id = self
            .type_id(type_name)
            .ok_or_else(|| invalid(format!("unknown bucket type {type_name}")))?;
        if type_id == 0 {
            return Err(invalid(format!(
                "{type_name} is the device type, not a bucket type"
            )));
        }
        let parent_id = match parent {
            Some(p) => Some(self.bucket_named(p)?),
            None => None,
        };
        let id = self.free_bucket_id();
        self.add_bucket(Bucket {
            id,
            name: name.to_string(),
            type_id,
            alg: BucketAlg::Straw2,
            hash: 0,
            items: Vec::new(),
            weights: Vec::new(),
            class: None,
        })?;
        if let Some(p) = parent_id {
            self.link(id, 0, p)?;
        }
        self.refresh()?;
        Ok(id)
    }

    fn bucket_named(&self, name: &str) -> Result<i32> {
        match self.item_id(name) {
            Some(id) if id < 0 => Ok(id),
            Some(_) => Err(invalid(format!("{name} is a device, not a bucket"))),
            None => Err(invalid(format!("no bucket named {name}"))),
        }
    }

    /// Appends `item` with `weight` to bucket `parent` and updates the
    /// ancestors' weights.
    fn link(&mut self, item: i32, weight: u32, parent: i32) -> Result<()> {
        let total = {
            let b = self
                .bucket_mut(parent)
                .ok_or_else(|| invalid(format!("no bucket {parent}")))?;
            b.items.push(item);
            b.weights.push(weight);
            b.weight()
        };
        if self.parent_of(parent).is_some() {
            self.reweight_item(parent, total)?;
        }
        Ok(())
    }

    /// Takes `item` out of every non-shadow bucket, updating weights.
    fn unlink(&mut self, item: i32) -> Result<()> {
        while let Some(p) = self.parent_of(item) {
            let total = {
                let b = self
                    .bucket_mut(p)
                    .ok_or_else(|| invalid(format!("no bucket {p}")))?;
                if let Some(i) = b.items.iter().position(|x| *x == item) {
                    b.items.remove(i);
                    b.weights.remove(i);
                }
                b.weight()
            };
            if self.parent_of(p).is_some() {
                self.reweight_item(p, total)?;
            }
        }
        Ok(())
    }

    /// Places device `id` (named `osd.ID`) with CRUSH `weight` at
    /// `location`, a list of (type, bucket name) from the leaf side up to a
    /// root that must exist (e.g. `[("host", "node1"), ("root", "default")]`).
    /// Missing buckets on the way are created. A device already at that
    /// location is left as it is (its weight too); one elsewhere is moved,
    /// keeping its weight. Returns whether the map changed.
    pub fn create_or_move_device(
        &mut self,
        id: i32,
        weight: u32,
        location: &[(&str, &str)],
    ) -> Result<bool> {
        let Some(((_, leaf_parent), _)) = location.split_first() else {
            return Err(invalid("empty CRUSH location".into()));
        };
        let name = format!("osd.{id}");
        if self.device(id).is_none() {
            self.add_device(id, &name, None)?;
        }
        let current = self.parent_of(id);
        if let Some(p) = current {
            if self.item_name(p) == Some(*leaf_parent) {
                return Ok(false);
            }
        }
        self.ensure_location(location)?;
        let target = self.bucket_named(leaf_parent)?;
        let keep = current.and_then(|p| {
            let b = self.bucket(p)?;
            let i = b.items.iter().position(|x| *x == id)?;
            b.weights.get(i).copied()
        });
        self.unlink(id)?;
        self.link(id, keep.unwrap_or(weight), target)?;
        self.refresh()?;
        Ok(true)
    }

    /// Creates the buckets of `location` that do not exist, each under the
    /// next; the last one must already exist.
    fn ensure_location(&mut self, location: &[(&str, &str)]) -> Result<()> {
        let Some((&(_, root), below)) = location.split_last() else {
            return Ok(());
        };
        self.bucket_named(root)?;
        let mut parent = root;
        for (ty, name) in below.iter().rev() {
            if self.item_id(name).is_none() {
                self.add_named_bucket(name, ty, Some(parent))?;
            }
            parent = name;
        }
        Ok(())
    }

    /// Moves the bucket `name` under the bucket `parent`.
    pub fn move_bucket(&mut self, name: &str, parent: &str) -> Result<()> {
        let id = self.bucket_named(name)?;
        let to = self.bucket_named(parent)?;
        if id == to || self.is_below(to, id) {
            return Err(invalid(format!(
                "moving {name} under {parent} would make a cycle"
            )));
        }
        let weight = self.bucket(id).map_or(0, Bucket::weight);
        self.unlink(id)?;
        self.link(id, weight, to)?;
        self.refresh()
    }

    fn is_below(&self, item: i32, ancestor: i32) -> bool {
        let mut cur = self.parent_of(item);
        while let Some(p) = cur {
            if p == ancestor {
                return true;
            }
            cur = self.parent_of(p);
        }
        false
    }

    /// Removes `name`: a device from every bucket (and the map), or an
    /// empty bucket.
    pub fn remove_item(&mut self, name: &str) -> Result<()> {
        let id = self
            .item_id(name)
            .ok_or_else(|| invalid(format!("no item named {name}")))?;
        if id < 0 && self.bucket(id).is_some_and(|b| !b.items.is_empty()) {
            return Err(invalid(format!("bucket {name} is not empty")));
        }
        self.unlink(id)?;
        if id >= 0 {
            self.devices.remove(&id);
        } else if let Some(slot) = self.buckets.get_mut((-1 - i64::from(id)) as usize) {
            *slot = None;
        }
        self.refresh()
    }

    /// Sets the CRUSH weight of the item `name` (`osd crush reweight`).
    pub fn reweight_named(&mut self, name: &str, weight: u32) -> Result<()> {
        let id = self
            .item_id(name)
            .ok_or_else(|| invalid(format!("no item named {name}")))?;
        self.reweight_item(id, weight)?;
        self.refresh()
    }

    /// Rebuilds class shadow trees and checks the map after an edit.
    fn refresh(&mut self) -> Result<()> {
        if !self.classes.is_empty() {
            let keep = self.class_bucket.clone();
            self.populate_classes(&keep)?;
        }
        self.finalize()
    }
}

#[cfg(test)]
mod tests {
    use crate::map::WEIGHT_ONE;

    fn base() -> crate::CrushMap {
        crate::text::parse(
            "type 0 osd\ntype 1 host\ntype 2 rack\ntype 3 root\n\
             root default {\n\tid -1\n\talg straw2\n\thash 0\n}\n\
             rule replicated_rule {\n\tid 0\n\ttype replicated\n\tstep take default\n\
             \tstep chooseleaf firstn 0 type host\n\tstep emit\n}\n",
        )
        .unwrap()
    }

    fn weight(m: &crate::CrushMap, name: &str) -> u32 {
        m.bucket(m.item_id(name).unwrap()).unwrap().weight()
    }

    #[test]
    fn create_or_move_builds_the_location_and_weights() {
        let mut m = base();
        let loc = |h: &'static str| vec![("host", h), ("root", "default")];
        assert!(m.create_or_move_device(0, WEIGHT_ONE, &loc("a")).unwrap());
        assert!(
            m.create_or_move_device(1, 2 * WEIGHT_ONE, &loc("a"))
                .unwrap()
        );
        assert!(m.create_or_move_device(2, WEIGHT_ONE, &loc("b")).unwrap());
        assert_eq!(weight(&m, "a"), 3 * WEIGHT_ONE);
        assert_eq!(weight(&m, "default"), 4 * WEIGHT_ONE);
        // Already there: nothing changes, weight kept.
        assert!(
            !m.create_or_move_device(1, 9 * WEIGHT_ONE, &loc("a"))
                .unwrap()
        );
        // Moving keeps the device's weight.
        assert!(
            m.create_or_move_device(1, 9 * WEIGHT_ONE, &loc("b"))
                .unwrap()
        );
        assert_eq!(weight(&m, "a"), WEIGHT_ONE);
        assert_eq!(weight(&m, "b"), 3 * WEIGHT_ONE);
        assert_eq!(weight(&m, "default"), 4 * WEIGHT_ONE);
        // Placement uses the new hosts.
        let w = vec![0x10000u32; 3];
        let out = m.do_rule(0, 7, 2, &w);
        assert_eq!(out.len(), 2);
        assert!(
            m.create_or_move_device(3, WEIGHT_ONE, &[("host", "c"), ("root", "nowhere")])
                .is_err()
        );
    }

    #[test]
    fn buckets_move_reweight_and_remove() {
        let mut m = base();
        m.add_named_bucket("rack1", "rack", Some("default"))
            .unwrap();
        m.create_or_move_device(0, WEIGHT_ONE, &[("host", "h1"), ("root", "default")])
            .unwrap();
        m.move_bucket("h1", "rack1").unwrap();
        assert_eq!(weight(&m, "rack1"), WEIGHT_ONE);
        assert_eq!(weight(&m, "default"), WEIGHT_ONE);
        assert!(m.move_bucket("rack1", "h1").is_err(), "cycle accepted");
        m.reweight_named("osd.0", 3 * WEIGHT_ONE).unwrap();
        assert_eq!(weight(&m, "default"), 3 * WEIGHT_ONE);
        assert!(m.remove_item("h1").is_err(), "non-empty bucket removed");
        m.remove_item("osd.0").unwrap();
        assert_eq!(weight(&m, "default"), 0);
        m.remove_item("h1").unwrap();
        assert!(m.item_id("h1").is_none());
        assert!(m.add_named_bucket("rack1", "rack", None).is_err());
        assert!(m.add_named_bucket("x", "osd", None).is_err());
        assert!(m.add_named_bucket("x", "planet", None).is_err());
    }
}

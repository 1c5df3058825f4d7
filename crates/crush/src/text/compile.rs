//! The semantic pass of the text compiler: names to ids, automatic bucket
//! ids, default item weights, shadow trees before the first rule, exactly in
//! the order `CrushCompiler::parse_crush` does them.

use std::collections::{BTreeMap, BTreeSet};

use super::parse::{BucketDecl, Decl, RuleDecl, StepDecl, err};
use crate::error::{CrushError, Result};
use crate::map::{Bucket, BucketAlg, CrushMap, Rule, Step, Tunables, WEIGHT_ONE};

/// The semantic pass, in file order, as `CrushCompiler::parse_crush`.
#[derive(Default)]
pub(super) struct Compiler {
    map: CrushMap,
    /// Every item name -> id.
    item_id: BTreeMap<String, i32>,
    /// Ids taken by buckets (explicit ones are reserved up front).
    used_ids: BTreeSet<i32>,
    /// Weight of each bucket defined so far (default weight when used as an item).
    bucket_weight: BTreeMap<i32, u32>,
    /// Shadow ids given in the text: original id -> class id -> shadow id.
    class_ids: BTreeMap<i32, BTreeMap<i32, i32>>,
    saw_rule: bool,
}

impl Compiler {
    pub(super) fn run(mut self, decls: Vec<Decl<'_>>) -> Result<CrushMap> {
        self.map.tunables = Tunables::legacy();
        for d in &decls {
            if let Decl::Bucket(b) = d {
                if let Some(id) = b.id {
                    self.used_ids.insert(id);
                }
            }
        }
        for d in decls {
            match d {
                Decl::Tunable(name, v, line) => self.tunable(name, v, line)?,
                Decl::Device(id, name, class) => {
                    if self.item_id.insert(name.to_string(), id).is_some() {
                        return Err(CrushError::Invalid(format!("item {name} defined twice")));
                    }
                    self.map.add_device(id, name, class)?;
                }
                Decl::Type(id, name) => self.map.add_type(id, name),
                Decl::Bucket(b) => {
                    if self.saw_rule {
                        return err(b.line, "buckets must be defined before rules");
                    }
                    self.bucket(b)?;
                }
                Decl::Rule(r) => {
                    if !self.saw_rule {
                        self.saw_rule = true;
                        self.map.populate_classes(&self.class_ids)?;
                    }
                    self.rule(r)?;
                }
            }
        }
        self.map.finalize()?;
        Ok(self.map)
    }

    fn tunable(&mut self, name: &str, v: i32, line: usize) -> Result<()> {
        let v = v as u32;
        let t = &mut self.map.tunables;
        match name {
            "choose_local_tries" => t.choose_local_tries = v,
            "choose_local_fallback_tries" => t.choose_local_fallback_tries = v,
            "choose_total_tries" => t.choose_total_tries = v,
            "chooseleaf_descend_once" => t.chooseleaf_descend_once = v,
            "chooseleaf_vary_r" => t.chooseleaf_vary_r = v,
            "chooseleaf_stable" => t.chooseleaf_stable = v,
            "straw_calc_version" => t.straw_calc_version = v,
            "allowed_bucket_algs" => t.allowed_bucket_algs = v,
            _ => return err(line, format!("tunable {name} not recognized")),
        }
        Ok(())
    }

    fn bucket(&mut self, b: BucketDecl<'_>) -> Result<()> {
        let Some(type_id) = self.map.type_id(b.type_name) else {
            return err(
                b.line,
                format!("bucket type '{}' is not defined", b.type_name),
            );
        };
        if self.item_id.contains_key(b.name) {
            return err(
                b.line,
                format!("bucket or device '{}' is already defined", b.name),
            );
        }
        let Some(alg) = b.alg else {
            return err(b.line, format!("bucket {} has no alg", b.name));
        };
        let (items, weights) = self.bucket_items(&b, alg)?;
        let id = match b.id {
            Some(id) => id,
            None => {
                let mut id = -1;
                while self.used_ids.contains(&id) {
                    id -= 1;
                }
                id
            }
        };
        self.used_ids.insert(id);
        for (class, shadow) in &b.class_ids {
            let cid = self.map.class_id_or_create(class);
            if self
                .class_ids
                .entry(id)
                .or_default()
                .insert(cid, *shadow)
                .is_some()
            {
                return err(
                    b.line,
                    format!("duplicate device class {class} for bucket {}", b.name),
                );
            }
        }
        let bucket = Bucket {
            id,
            name: b.name.to_string(),
            type_id,
            alg,
            hash: b.hash,
            items,
            weights,
            class: None,
        };
        self.bucket_weight.insert(id, bucket.weight());
        self.item_id.insert(b.name.to_string(), id);
        self.map.add_bucket(bucket)
    }

    fn bucket_items(&self, b: &BucketDecl<'_>, alg: BucketAlg) -> Result<(Vec<i32>, Vec<u32>)> {
        let mut used = BTreeSet::new();
        for it in &b.items {
            if let Some(p) = it.pos {
                if !used.insert(p) {
                    return err(
                        it.line,
                        format!("item '{}' has an occupied pos {p}", it.name),
                    );
                }
            }
        }
        let size = b
            .items
            .len()
            .max(used.last().map_or(0, |p| (*p).max(0) as usize));
        let mut slots: Vec<Option<(i32, u32)>> = vec![None; size];
        let mut cur = 0i32;
        let mut uniform: Option<u32> = None;
        for it in &b.items {
            let Some(&id) = self.item_id.get(it.name) else {
                return err(
                    it.line,
                    format!("item '{}' in bucket '{}' is not defined", it.name, b.name),
                );
            };
            let w = it
                .weight
                .unwrap_or_else(|| self.bucket_weight.get(&id).copied().unwrap_or(WEIGHT_ONE));
            if alg == BucketAlg::Uniform && *uniform.get_or_insert(w) != w {
                return err(
                    it.line,
                    "uniform bucket items must all have identical weights",
                );
            }
            let pos = match it.pos {
                Some(p) => p,
                None => {
                    while used.contains(&cur) {
                        cur += 1;
                    }
                    cur += 1;
                    cur - 1
                }
            };
            match usize::try_from(pos).ok().and_then(|p| slots.get_mut(p)) {
                Some(slot) => *slot = Some((id, w)),
                None => {
                    return err(
                        it.line,
                        format!("item '{}' pos {pos} out of range", it.name),
                    );
                }
            }
        }
        let (items, weights) = slots.into_iter().map(|s| s.unwrap_or((0, 0))).unzip();
        Ok((items, weights))
    }

    fn rule(&mut self, r: RuleDecl<'_>) -> Result<()> {
        let mut steps = Vec::with_capacity(r.steps.len());
        for (s, line) in r.steps {
            steps.push(match s {
                StepDecl::Plain(p) => p,
                StepDecl::Take(item, class) => Step::Take(self.take_item(item, class, line)?),
                StepDecl::Choose {
                    leaf,
                    firstn,
                    n,
                    type_name,
                } => {
                    let Some(type_id) = self.map.type_id(type_name) else {
                        return err(line, format!("type '{type_name}' not defined"));
                    };
                    match (leaf, firstn) {
                        (false, true) => Step::ChooseFirstN { n, type_id },
                        (false, false) => Step::ChooseIndep { n, type_id },
                        (true, true) => Step::ChooseLeafFirstN { n, type_id },
                        (true, false) => Step::ChooseLeafIndep { n, type_id },
                    }
                }
            });
        }
        let rule = Rule {
            id: r.id as u32,
            name: r.name.unwrap_or_default().to_string(),
            rule_type: r.rule_type,
            min_size: r.min_size,
            max_size: r.max_size,
            steps,
        };
        self.map
            .add_rule(rule)
            .or_else(|e| err(r.line, e.to_string()))
    }

    fn take_item(&self, item: &str, class: Option<&str>, line: usize) -> Result<i32> {
        let Some(&id) = self.item_id.get(item) else {
            return err(line, format!("item '{item}' not defined"));
        };
        let Some(class) = class else {
            return Ok(id);
        };
        match self.map.class_shadow(id, class) {
            Some(s) => Ok(s),
            None => err(
                line,
                format!("step take {item} has no bucket for class {class}"),
            ),
        }
    }
}

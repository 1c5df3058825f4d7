//! The CRUSH map model: devices, types, buckets, rules, tunables, classes.

use std::collections::BTreeMap;

use crate::error::{CrushError, Result};
use crate::limits::{MAX_BUCKETS, too_many_items};

/// Placeholder Ceph puts in a result position it could not fill (indep rules).
pub const ITEM_NONE: i32 = 0x7fff_ffff;
/// A device weight (or reweight) of 1.0 in 16.16 fixed point.
pub const WEIGHT_ONE: u32 = 0x1_0000;

/// Rule type of replicated pools (`CEPH_PG_TYPE_REPLICATED`).
pub const RULE_REPLICATED: u8 = 1;
/// Rule type of erasure-coded pools (`CEPH_PG_TYPE_ERASURE`).
pub const RULE_ERASURE: u8 = 3;

/// How a bucket picks one of its items.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BucketAlg {
    /// All items equal; a hashed permutation.
    Uniform,
    /// Items tried from the newest; cheap to append.
    List,
    /// Exponential-draw ("straw2"): the default, moves data optimally.
    Straw2,
}

impl BucketAlg {
    /// Ceph's numeric algorithm id.
    pub fn id(self) -> u8 {
        match self {
            BucketAlg::Uniform => 1,
            BucketAlg::List => 2,
            BucketAlg::Straw2 => 5,
        }
    }

    /// The algorithm with Ceph's numeric id, if we implement it.
    pub fn from_id(id: u8) -> Option<Self> {
        match id {
            1 => Some(BucketAlg::Uniform),
            2 => Some(BucketAlg::List),
            5 => Some(BucketAlg::Straw2),
            _ => None,
        }
    }

    /// The name used by the text format.
    pub fn name(self) -> &'static str {
        match self {
            BucketAlg::Uniform => "uniform",
            BucketAlg::List => "list",
            BucketAlg::Straw2 => "straw2",
        }
    }
}

/// The map-wide knobs of the mapping algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tunables {
    /// Local retries after a collision (legacy: 2).
    pub choose_local_tries: u32,
    /// Local exhaustive-search retries (legacy: 5).
    pub choose_local_fallback_tries: u32,
    /// Total attempts, stored as Ceph stores it (one less than tried).
    pub choose_total_tries: u32,
    /// Recursive chooseleaf tries only once.
    pub chooseleaf_descend_once: u32,
    /// Pass the parent's r into chooseleaf recursion (shifted by value - 1).
    pub chooseleaf_vary_r: u32,
    /// Chooseleaf recursion starts from replica 0 for every replica.
    pub chooseleaf_stable: u32,
    /// Straw (v1) weight calculation version; kept for the text format.
    pub straw_calc_version: u32,
    /// Bitmask of allowed bucket algorithms; kept for the text format.
    pub allowed_bucket_algs: u32,
}

impl Tunables {
    /// Ceph's "legacy" (argonaut) profile: what a text map without tunables means.
    pub fn legacy() -> Self {
        Tunables {
            choose_local_tries: 2,
            choose_local_fallback_tries: 5,
            choose_total_tries: 19,
            chooseleaf_descend_once: 0,
            chooseleaf_vary_r: 0,
            chooseleaf_stable: 0,
            straw_calc_version: 0,
            allowed_bucket_algs: 22,
        }
    }

    /// Ceph's "jewel"/"optimal" profile, the default for new maps.
    pub fn optimal() -> Self {
        Tunables {
            choose_local_tries: 0,
            choose_local_fallback_tries: 0,
            choose_total_tries: 50,
            chooseleaf_descend_once: 1,
            chooseleaf_vary_r: 1,
            chooseleaf_stable: 1,
            straw_calc_version: 1,
            allowed_bucket_algs: 54,
        }
    }
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables::optimal()
    }
}

/// A leaf of the hierarchy (an OSD).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// Non-negative id (`osd.N` has id N).
    pub id: i32,
    /// Name, normally `osd.N`.
    pub name: String,
    /// Device class (`hdd`, `ssd`, ...), if any.
    pub class: Option<String>,
}

/// An interior node of the hierarchy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// Negative id.
    pub id: i32,
    /// Name; shadow buckets are named `NAME~CLASS`.
    pub name: String,
    /// Type id (host, rack, ...).
    pub type_id: i32,
    /// Selection algorithm.
    pub alg: BucketAlg,
    /// Hash id (0 = rjenkins1).
    pub hash: u8,
    /// Children: device ids (>= 0) or bucket ids (< 0), in order.
    pub items: Vec<i32>,
    /// 16.16 weight of each item.
    pub weights: Vec<u32>,
    /// For a shadow bucket, the class id it filters on.
    pub class: Option<i32>,
}

impl Bucket {
    /// Sum of item weights, wrapping as Ceph's `__u32` does.
    pub fn weight(&self) -> u32 {
        self.weights.iter().fold(0u32, |a, w| a.wrapping_add(*w))
    }

    /// True for the per-class copies Ceph builds (`host~ssd`).
    pub fn is_shadow(&self) -> bool {
        self.class.is_some()
    }
}

/// One step of a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Does nothing.
    Noop,
    /// Start from this item (a bucket, possibly a class shadow bucket).
    Take(i32),
    /// Append the working set to the result.
    Emit,
    /// Choose `n` distinct items of `type_id`, depth first.
    ChooseFirstN { n: i32, type_id: i32 },
    /// Choose `n` items of `type_id`, positionally stable.
    ChooseIndep { n: i32, type_id: i32 },
    /// Choose `n` items of `type_id`, then one device under each.
    ChooseLeafFirstN { n: i32, type_id: i32 },
    /// Indep variant of chooseleaf.
    ChooseLeafIndep { n: i32, type_id: i32 },
    /// Override choose_total_tries (+1) for this rule.
    SetChooseTries(i32),
    /// Override the chooseleaf recursion tries.
    SetChooseLeafTries(i32),
    /// Override choose_local_tries.
    SetChooseLocalTries(i32),
    /// Override choose_local_fallback_tries.
    SetChooseLocalFallbackTries(i32),
    /// Override chooseleaf_vary_r.
    SetChooseLeafVaryR(i32),
    /// Override chooseleaf_stable.
    SetChooseLeafStable(i32),
}

/// A placement rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Rule id (Ceph's rule number and ruleset).
    pub id: u32,
    /// Name.
    pub name: String,
    /// [`RULE_REPLICATED`] or [`RULE_ERASURE`] (other values are kept).
    pub rule_type: u8,
    /// Smallest pool size the rule is meant for.
    pub min_size: i32,
    /// Largest pool size the rule is meant for.
    pub max_size: i32,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

/// A whole CRUSH map. Build it with the `add_*` methods and call
/// [`CrushMap::finalize`] (the parsers and decoders do) before mapping.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrushMap {
    /// Algorithm knobs.
    pub tunables: Tunables,
    pub(crate) devices: BTreeMap<i32, Device>,
    pub(crate) types: BTreeMap<i32, String>,
    /// Index `-1 - id`.
    pub(crate) buckets: Vec<Option<Bucket>>,
    pub(crate) rules: BTreeMap<u32, Rule>,
    pub(crate) classes: BTreeMap<i32, String>,
    /// Original bucket id -> class id -> shadow bucket id.
    pub(crate) class_bucket: BTreeMap<i32, BTreeMap<i32, i32>>,
    pub(crate) max_devices: i32,
}

impl CrushMap {
    /// An empty map with the given tunables.
    pub fn new(tunables: Tunables) -> Self {
        CrushMap {
            tunables,
            ..CrushMap::default()
        }
    }

    /// Adds (or renames) a device; the class is registered as needed.
    pub fn add_device(&mut self, id: i32, name: &str, class: Option<&str>) -> Result<()> {
        if id < 0 {
            return Err(CrushError::Invalid(format!("device id {id} is negative")));
        }
        if let Some(c) = class {
            self.class_id_or_create(c);
        }
        let dev = Device {
            id,
            name: name.to_string(),
            class: class.map(str::to_string),
        };
        self.devices.insert(id, dev);
        Ok(())
    }

    /// Names a bucket type.
    pub fn add_type(&mut self, id: i32, name: &str) {
        self.types.insert(id, name.to_string());
    }

    /// Adds a bucket; its id must be negative and unused.
    pub fn add_bucket(&mut self, bucket: Bucket) -> Result<()> {
        if bucket.id >= 0 {
            return Err(CrushError::Invalid(format!(
                "bucket id {} is not negative",
                bucket.id
            )));
        }
        if bucket.items.len() != bucket.weights.len() {
            return Err(CrushError::Invalid(format!(
                "bucket {} items/weights",
                bucket.id
            )));
        }
        if bucket.items.len() > crate::limits::MAX_BUCKET_ITEMS {
            return Err(too_many_items(bucket.items.len()));
        }
        let idx = (-1 - i64::from(bucket.id)) as usize;
        if idx >= MAX_BUCKETS {
            return Err(CrushError::Invalid(format!(
                "bucket id {} too small",
                bucket.id
            )));
        }
        if self.buckets.len() <= idx {
            self.buckets.resize(idx + 1, None);
        }
        if self.buckets[idx].is_some() {
            return Err(CrushError::Invalid(format!(
                "duplicate bucket id {}",
                bucket.id
            )));
        }
        self.buckets[idx] = Some(bucket);
        Ok(())
    }

    /// Adds a rule; its id must be unused.
    pub fn add_rule(&mut self, rule: Rule) -> Result<()> {
        if self.rules.contains_key(&rule.id) {
            return Err(CrushError::Invalid(format!(
                "rule {} already exists",
                rule.id
            )));
        }
        self.rules.insert(rule.id, rule);
        Ok(())
    }

    /// Removes a rule, returning it.
    pub fn remove_rule(&mut self, id: u32) -> Option<Rule> {
        self.rules.remove(&id)
    }

    /// Looks a bucket up by id.
    #[inline]
    pub fn bucket(&self, id: i32) -> Option<&Bucket> {
        if id >= 0 {
            return None;
        }
        self.buckets.get((-1 - i64::from(id)) as usize)?.as_ref()
    }

    pub(crate) fn bucket_mut(&mut self, id: i32) -> Option<&mut Bucket> {
        if id >= 0 {
            return None;
        }
        self.buckets
            .get_mut((-1 - i64::from(id)) as usize)?
            .as_mut()
    }

    /// All buckets (shadow ones included), by ascending index (-1, -2, ...).
    pub fn buckets(&self) -> impl Iterator<Item = &Bucket> {
        self.buckets.iter().flatten()
    }

    /// Number of bucket slots (Ceph's `max_buckets`).
    pub fn max_buckets(&self) -> usize {
        self.buckets.len()
    }

    /// One more than the largest device id (Ceph's `max_devices`).
    pub fn max_devices(&self) -> i32 {
        self.max_devices
    }

    /// Devices by id.
    pub fn devices(&self) -> impl Iterator<Item = &Device> {
        self.devices.values()
    }

    /// A device by id.
    pub fn device(&self, id: i32) -> Option<&Device> {
        self.devices.get(&id)
    }

    /// Type names by id.
    pub fn types(&self) -> &BTreeMap<i32, String> {
        &self.types
    }

    /// The id of the type with this name.
    pub fn type_id(&self, name: &str) -> Option<i32> {
        self.types
            .iter()
            .find(|(_, n)| n.as_str() == name)
            .map(|(i, _)| *i)
    }

    /// Rules by id.
    pub fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.rules.values()
    }

    /// A rule by id.
    pub fn rule(&self, id: u32) -> Option<&Rule> {
        self.rules.get(&id)
    }

    /// Device classes by id.
    pub fn classes(&self) -> &BTreeMap<i32, String> {
        &self.classes
    }

    /// Shadow bucket ids: original bucket id -> class id -> shadow id.
    pub fn class_buckets(&self) -> &BTreeMap<i32, BTreeMap<i32, i32>> {
        &self.class_bucket
    }

    /// The id of the class with this name.
    pub fn class_id(&self, name: &str) -> Option<i32> {
        self.classes
            .iter()
            .find(|(_, n)| n.as_str() == name)
            .map(|(i, _)| *i)
    }

    /// Ceph's `get_or_create_class_id`: classes are numbered in order of
    /// first appearance, which fixes the order shadow trees are built in.
    pub(crate) fn class_id_or_create(&mut self, name: &str) -> i32 {
        if let Some(id) = self.class_id(name) {
            return id;
        }
        let id = self.classes.keys().next_back().map_or(0, |m| m + 1);
        self.classes.insert(id, name.to_string());
        id
    }

    /// The id of the item (device or bucket) with this name.
    pub fn item_id(&self, name: &str) -> Option<i32> {
        if let Some(d) = self.devices.values().find(|d| d.name == name) {
            return Some(d.id);
        }
        self.buckets().find(|b| b.name == name).map(|b| b.id)
    }

    /// The name of an item (device or bucket).
    pub fn item_name(&self, id: i32) -> Option<&str> {
        if id >= 0 {
            self.devices.get(&id).map(|d| d.name.as_str())
        } else {
            self.bucket(id).map(|b| b.name.as_str())
        }
    }

    /// For a shadow bucket id, the original bucket and the class id.
    pub fn split_id_class(&self, id: i32) -> Option<(i32, i32)> {
        self.class_bucket.iter().find_map(|(orig, per)| {
            per.iter()
                .find(|(_, s)| **s == id)
                .map(|(c, _)| (*orig, *c))
        })
    }

    /// Checks references, acyclicity and the limits that keep mapping
    /// bounded ([`crate::limits`]), and computes `max_devices`.
    pub fn finalize(&mut self) -> Result<()> {
        let mut max_dev = self.devices.keys().next_back().map_or(0, |m| m + 1);
        for b in self.buckets() {
            for &item in &b.items {
                if item >= 0 {
                    max_dev = max_dev.max(item.saturating_add(1));
                } else if self.bucket(item).is_none() {
                    return Err(CrushError::Invalid(format!(
                        "bucket {} holds missing bucket {item}",
                        b.name
                    )));
                }
            }
        }
        self.max_devices = max_dev;
        self.check_acyclic()?;
        self.check_limits()
    }
}

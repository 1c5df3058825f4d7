//! Shoal's binary encoding of a CRUSH map (carried inside the cluster map).
//!
//! Layout, all little-endian: magic `SCRM`, format version (u8, now 1), the
//! eight tunables (u32), then length-prefixed lists of devices, types,
//! buckets (shadow buckets included, with their class), rules, classes and
//! the class -> shadow-bucket table. Decoding checks every count against the
//! input left and validates the result, so hostile bytes give an error; a
//! map above the limits of [`crate::limits`] (tunables, rule steps, bucket
//! size, device ids, depth) is refused with [`CrushError::Limit`], so any
//! map that decodes maps in bounded time.

use std::collections::BTreeMap;

use crate::codec::{Reader, Writer};
use crate::error::{CrushError, Result};
use crate::map::{Bucket, BucketAlg, CrushMap, Rule, Step, Tunables};

const MAGIC: &[u8; 4] = b"SCRM";
const VERSION: u8 = 1;

fn step_code(s: &Step) -> (u8, i32, i32) {
    match *s {
        Step::Noop => (0, 0, 0),
        Step::Take(i) => (1, i, 0),
        Step::ChooseFirstN { n, type_id } => (2, n, type_id),
        Step::ChooseIndep { n, type_id } => (3, n, type_id),
        Step::Emit => (4, 0, 0),
        Step::ChooseLeafFirstN { n, type_id } => (6, n, type_id),
        Step::ChooseLeafIndep { n, type_id } => (7, n, type_id),
        Step::SetChooseTries(v) => (8, v, 0),
        Step::SetChooseLeafTries(v) => (9, v, 0),
        Step::SetChooseLocalTries(v) => (10, v, 0),
        Step::SetChooseLocalFallbackTries(v) => (11, v, 0),
        Step::SetChooseLeafVaryR(v) => (12, v, 0),
        Step::SetChooseLeafStable(v) => (13, v, 0),
    }
}

fn step_from(op: u8, a: i32, b: i32) -> Result<Step> {
    Ok(match op {
        0 => Step::Noop,
        1 => Step::Take(a),
        2 => Step::ChooseFirstN { n: a, type_id: b },
        3 => Step::ChooseIndep { n: a, type_id: b },
        4 => Step::Emit,
        6 => Step::ChooseLeafFirstN { n: a, type_id: b },
        7 => Step::ChooseLeafIndep { n: a, type_id: b },
        8 => Step::SetChooseTries(a),
        9 => Step::SetChooseLeafTries(a),
        10 => Step::SetChooseLocalTries(a),
        11 => Step::SetChooseLocalFallbackTries(a),
        12 => Step::SetChooseLeafVaryR(a),
        13 => Step::SetChooseLeafStable(a),
        _ => return Err(CrushError::Decode(format!("unknown rule op {op}"))),
    })
}

impl CrushMap {
    /// Encodes the map in Shoal's versioned binary form.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        for b in MAGIC {
            w.u8(*b);
        }
        w.u8(VERSION);
        let t = &self.tunables;
        for v in [
            t.choose_local_tries,
            t.choose_local_fallback_tries,
            t.choose_total_tries,
            t.chooseleaf_descend_once,
            t.chooseleaf_vary_r,
            t.chooseleaf_stable,
            t.straw_calc_version,
            t.allowed_bucket_algs,
        ] {
            w.u32(v);
        }
        w.len(self.devices.len());
        for d in self.devices.values() {
            w.i32(d.id);
            w.str(&d.name);
            w.str(d.class.as_deref().unwrap_or(""));
        }
        w.len(self.types.len());
        for (id, name) in &self.types {
            w.i32(*id);
            w.str(name);
        }
        self.put_buckets(&mut w);
        self.put_rules(&mut w);
        w.len(self.classes.len());
        for (id, name) in &self.classes {
            w.i32(*id);
            w.str(name);
        }
        let cb: Vec<(i32, i32, i32)> = self
            .class_bucket
            .iter()
            .flat_map(|(o, m)| m.iter().map(move |(c, s)| (*o, *c, *s)))
            .collect();
        w.len(cb.len());
        for (o, c, s) in cb {
            w.i32(o);
            w.i32(c);
            w.i32(s);
        }
        w.finish()
    }

    fn put_buckets(&self, w: &mut Writer) {
        let buckets: Vec<&Bucket> = self.buckets().collect();
        w.len(buckets.len());
        for b in buckets {
            w.i32(b.id);
            w.str(&b.name);
            w.i32(b.type_id);
            w.u8(b.alg.id());
            w.u8(b.hash);
            w.i32(b.class.unwrap_or(-1));
            w.len(b.items.len());
            for (i, wt) in b.items.iter().zip(&b.weights) {
                w.i32(*i);
                w.u32(*wt);
            }
        }
    }

    fn put_rules(&self, w: &mut Writer) {
        w.len(self.rules.len());
        for r in self.rules.values() {
            w.u32(r.id);
            w.str(&r.name);
            w.u8(r.rule_type);
            w.i32(r.min_size);
            w.i32(r.max_size);
            w.len(r.steps.len());
            for s in &r.steps {
                let (op, a, b) = step_code(s);
                w.u8(op);
                w.i32(a);
                w.i32(b);
            }
        }
    }

    /// Decodes [`CrushMap::encode`] output; any malformed input is an error.
    pub fn decode(buf: &[u8]) -> Result<CrushMap> {
        let mut r = Reader::new(buf);
        let mut magic = [0u8; 4];
        for m in &mut magic {
            *m = r.u8()?;
        }
        if &magic != MAGIC {
            return Err(CrushError::Decode("not a Shoal CRUSH map".into()));
        }
        let v = r.u8()?;
        if v != VERSION {
            return Err(CrushError::Decode(format!("unsupported version {v}")));
        }
        let mut map = CrushMap::new(decode_tunables(&mut r)?);
        for _ in 0..r.count(12)? {
            let id = r.i32()?;
            let name = r.str()?;
            let class = r.str()?;
            map.add_device(id, &name, (!class.is_empty()).then_some(class.as_str()))?;
        }
        for _ in 0..r.count(8)? {
            let id = r.i32()?;
            let name = r.str()?;
            map.add_type(id, &name);
        }
        for _ in 0..r.count(22)? {
            map.add_bucket(decode_bucket(&mut r)?)?;
        }
        for _ in 0..r.count(21)? {
            map.add_rule(decode_rule(&mut r)?)?;
        }
        map.classes.clear();
        for _ in 0..r.count(8)? {
            let id = r.i32()?;
            map.classes.insert(id, r.str()?);
        }
        let mut cb: BTreeMap<i32, BTreeMap<i32, i32>> = BTreeMap::new();
        for _ in 0..r.count(12)? {
            let (o, c, s) = (r.i32()?, r.i32()?, r.i32()?);
            cb.entry(o).or_default().insert(c, s);
        }
        map.class_bucket = cb;
        if r.remaining() != 0 {
            return Err(CrushError::Decode("trailing bytes".into()));
        }
        map.finalize()?;
        Ok(map)
    }
}

fn decode_tunables(r: &mut Reader<'_>) -> Result<Tunables> {
    Ok(Tunables {
        choose_local_tries: r.u32()?,
        choose_local_fallback_tries: r.u32()?,
        choose_total_tries: r.u32()?,
        chooseleaf_descend_once: r.u32()?,
        chooseleaf_vary_r: r.u32()?,
        chooseleaf_stable: r.u32()?,
        straw_calc_version: r.u32()?,
        allowed_bucket_algs: r.u32()?,
    })
}

fn decode_bucket(r: &mut Reader<'_>) -> Result<Bucket> {
    let id = r.i32()?;
    let name = r.str()?;
    let type_id = r.i32()?;
    let alg = r.u8()?;
    let alg =
        BucketAlg::from_id(alg).ok_or_else(|| CrushError::Decode(format!("bucket alg {alg}")))?;
    let hash = r.u8()?;
    let class = r.i32()?;
    let n = r.count(8)?;
    let mut items = Vec::with_capacity(n);
    let mut weights = Vec::with_capacity(n);
    for _ in 0..n {
        items.push(r.i32()?);
        weights.push(r.u32()?);
    }
    let class = (class >= 0).then_some(class);
    Ok(Bucket {
        id,
        name,
        type_id,
        alg,
        hash,
        items,
        weights,
        class,
    })
}

fn decode_rule(r: &mut Reader<'_>) -> Result<Rule> {
    let id = r.u32()?;
    let name = r.str()?;
    let rule_type = r.u8()?;
    let min_size = r.i32()?;
    let max_size = r.i32()?;
    let n = r.count(9)?;
    let mut steps = Vec::with_capacity(n);
    for _ in 0..n {
        let (op, a, b) = (r.u8()?, r.i32()?, r.i32()?);
        steps.push(step_from(op, a, b)?);
    }
    Ok(Rule {
        id,
        name,
        rule_type,
        min_size,
        max_size,
        steps,
    })
}

//! Reader for Ceph's binary CRUSH map (what `crushtool -c` writes and
//! `ceph osd getcrushmap` returns), so operators can bring a map as is.
//!
//! Layout (`CrushWrapper::encode`): magic 0x00010000, max_buckets,
//! max_rules, max_devices; each bucket slot (alg, then id, type u16, alg u8,
//! hash u8, weight, size, items, per-algorithm weights); each rule slot; the
//! type, item and rule name maps; the tunables; device classes and the shadow
//! table. Only what placement needs is kept; straw (v1) and tree buckets and
//! weight sets (choose_args) are refused rather than mapped differently.
//! Maps above Shoal's limits ([`crate::limits`]: tries tunables, bucket
//! size, rule steps, device ids, depth), which Ceph would accept, are
//! refused with [`CrushError::Limit`].

use std::collections::BTreeMap;

use crate::codec::Reader;
use crate::error::{CrushError, Result};
use crate::limits::MAX_BUCKETS;
use crate::map::{Bucket, BucketAlg, CrushMap, Rule, Step, Tunables};

/// First four bytes of a Ceph binary CRUSH map (`CRUSH_MAGIC`, little-endian).
pub const CEPH_CRUSH_MAGIC: [u8; 4] = [0x00, 0x00, 0x01, 0x00];

fn bad(msg: impl Into<String>) -> CrushError {
    CrushError::Decode(msg.into())
}

/// Decodes a Ceph binary CRUSH map.
pub fn decode(buf: &[u8]) -> Result<CrushMap> {
    let mut r = Reader::new(buf);
    if r.u32()? != u32::from_le_bytes(CEPH_CRUSH_MAGIC) {
        return Err(bad("not a Ceph CRUSH map (bad magic)"));
    }
    let max_buckets = r.i32()?;
    let max_rules = r.u32()?;
    let _max_devices = r.i32()?;
    if max_buckets < 0 || max_buckets as usize > MAX_BUCKETS {
        return Err(bad(format!("max_buckets {max_buckets}")));
    }
    let mut buckets = Vec::new();
    for _ in 0..max_buckets {
        if let Some(b) = bucket(&mut r)? {
            buckets.push(b);
        }
    }
    let mut rules = Vec::new();
    for id in 0..max_rules {
        if r.remaining() < 4 {
            return Err(bad("truncated rules"));
        }
        if r.u32()? != 0 {
            rules.push(rule(&mut r, id)?);
        }
    }
    let types = string_map(&mut r)?;
    let names = string_map(&mut r)?;
    let rule_names = string_map(&mut r)?;
    let tunables = tunables(&mut r)?;
    let (class_of, class_names, class_bucket) = classes(&mut r)?;
    if r.remaining() >= 4 && r.u32()? != 0 {
        return Err(bad("weight sets (choose_args) are not supported"));
    }
    assemble(Parts {
        tunables,
        buckets,
        rules,
        types,
        names,
        rule_names,
        class_of,
        class_names,
        class_bucket,
    })
}

fn bucket(r: &mut Reader<'_>) -> Result<Option<Bucket>> {
    let alg = r.u32()?;
    if alg == 0 {
        return Ok(None);
    }
    let id = r.i32()?;
    let type_id = i32::from(r.u16()?);
    let alg2 = r.u8()?;
    let hash = r.u8()?;
    let _weight = r.u32()?;
    let size = r.count(4)?;
    let items = (0..size).map(|_| r.i32()).collect::<Result<Vec<_>>>()?;
    let weights = match alg2 {
        1 => vec![r.u32()?; size],
        2 => {
            let mut w = Vec::with_capacity(size);
            for _ in 0..size {
                w.push(r.u32()?);
                let _sum = r.u32()?;
            }
            w
        }
        5 => (0..size).map(|_| r.u32()).collect::<Result<Vec<_>>>()?,
        3 => return Err(bad(format!("bucket {id}: tree buckets are not supported"))),
        4 => {
            return Err(bad(format!(
                "bucket {id}: straw (v1) buckets are not supported; use straw2"
            )));
        }
        a => return Err(bad(format!("bucket {id}: unknown algorithm {a}"))),
    };
    let alg =
        BucketAlg::from_id(alg2).ok_or_else(|| bad(format!("bucket {id}: algorithm {alg2}")))?;
    Ok(Some(Bucket {
        id,
        name: String::new(),
        type_id,
        alg,
        hash,
        items,
        weights,
        class: None,
    }))
}

fn rule(r: &mut Reader<'_>, id: u32) -> Result<Rule> {
    let len = r.count(12)?;
    let _ruleset = r.u8()?;
    let rule_type = r.u8()?;
    let min_size = i32::from(r.u8()?);
    let max_size = i32::from(r.u8()?);
    let mut steps = Vec::with_capacity(len);
    for _ in 0..len {
        let (op, a, b) = (r.u32()?, r.i32()?, r.i32()?);
        steps.push(match op {
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
            _ => return Err(bad(format!("rule {id}: unsupported op {op}"))),
        });
    }
    Ok(Rule {
        id,
        name: String::new(),
        rule_type,
        min_size,
        max_size,
        steps,
    })
}

/// A `map<int32, string>`; keys were once written as 64-bit, which shows as
/// a zero length (Ceph's `decode_32_or_64_string_map`).
fn string_map(r: &mut Reader<'_>) -> Result<BTreeMap<i32, String>> {
    let mut m = BTreeMap::new();
    for _ in 0..r.count(8)? {
        let k = r.i32()?;
        let mut len = r.u32()?;
        if len == 0 {
            len = r.u32()?;
        }
        let mut bytes = Vec::new();
        for _ in 0..len {
            bytes.push(r.u8()?);
        }
        m.insert(
            k,
            String::from_utf8(bytes).map_err(|_| bad("name is not UTF-8"))?,
        );
    }
    Ok(m)
}

fn tunables(r: &mut Reader<'_>) -> Result<Tunables> {
    let mut t = Tunables::legacy();
    if r.remaining() == 0 {
        return Ok(t);
    }
    t.choose_local_tries = r.u32()?;
    t.choose_local_fallback_tries = r.u32()?;
    t.choose_total_tries = r.u32()?;
    if r.remaining() > 0 {
        t.chooseleaf_descend_once = r.u32()?;
    }
    if r.remaining() > 0 {
        t.chooseleaf_vary_r = u32::from(r.u8()?);
    }
    if r.remaining() > 0 {
        t.straw_calc_version = u32::from(r.u8()?);
    }
    if r.remaining() > 0 {
        t.allowed_bucket_algs = r.u32()?;
    }
    if r.remaining() > 0 {
        t.chooseleaf_stable = u32::from(r.u8()?);
    }
    Ok(t)
}

type Classes = (
    BTreeMap<i32, i32>,
    BTreeMap<i32, String>,
    BTreeMap<i32, BTreeMap<i32, i32>>,
);

fn classes(r: &mut Reader<'_>) -> Result<Classes> {
    let mut class_of = BTreeMap::new();
    let mut names = BTreeMap::new();
    let mut table: BTreeMap<i32, BTreeMap<i32, i32>> = BTreeMap::new();
    if r.remaining() == 0 {
        return Ok((class_of, names, table));
    }
    for _ in 0..r.count(8)? {
        let k = r.i32()?;
        class_of.insert(k, r.i32()?);
    }
    names = string_map(r)?;
    for _ in 0..r.count(8)? {
        let orig = r.i32()?;
        let inner = table.entry(orig).or_default();
        for _ in 0..r.count(8)? {
            let c = r.i32()?;
            inner.insert(c, r.i32()?);
        }
    }
    Ok((class_of, names, table))
}

struct Parts {
    tunables: Tunables,
    buckets: Vec<Bucket>,
    rules: Vec<Rule>,
    types: BTreeMap<i32, String>,
    names: BTreeMap<i32, String>,
    rule_names: BTreeMap<i32, String>,
    class_of: BTreeMap<i32, i32>,
    class_names: BTreeMap<i32, String>,
    class_bucket: BTreeMap<i32, BTreeMap<i32, i32>>,
}

fn assemble(p: Parts) -> Result<CrushMap> {
    let mut map = CrushMap::new(p.tunables);
    for (id, name) in &p.types {
        map.add_type(*id, name);
    }
    map.classes = p.class_names.clone();
    for (id, name) in p.names.range(0..) {
        let class = p.class_of.get(id).and_then(|c| p.class_names.get(c));
        map.add_device(*id, name, class.map(String::as_str))?;
    }
    let shadows: BTreeMap<i32, i32> = p
        .class_bucket
        .values()
        .flat_map(|m| m.iter().map(|(c, s)| (*s, *c)))
        .collect();
    for mut b in p.buckets {
        b.name = p
            .names
            .get(&b.id)
            .cloned()
            .unwrap_or_else(|| format!("bucket{}", -1 - i64::from(b.id)));
        b.class = shadows.get(&b.id).copied();
        map.add_bucket(b)?;
    }
    for mut r in p.rules {
        r.name = p
            .rule_names
            .get(&(r.id as i32))
            .cloned()
            .unwrap_or_default();
        map.add_rule(r)?;
    }
    map.class_bucket = p.class_bucket;
    map.finalize()?;
    Ok(map)
}

//! Generated hierarchies, laid out as `crushtool --build` lays them out, so
//! a map built here is the same map crushtool builds from the same layers.

use crate::error::{CrushError, Result};
use crate::map::{Bucket, BucketAlg, CrushMap, RULE_REPLICATED, Rule, Step, Tunables, WEIGHT_ONE};

/// `crushtool --build --num_osds N <name> straw2 <size> ...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildSpec {
    /// Number of OSDs (devices `osd.0` ... `osd.N-1`).
    pub num_osds: u32,
    /// Layers from the bottom up: (type name, items per bucket; 0 = all in one).
    pub layers: Vec<(String, u32)>,
    /// 16.16 CRUSH weight of every OSD.
    pub osd_weight: u32,
}

impl BuildSpec {
    /// Hosts of `osds_per_host` OSDs, optionally grouped into `racks`, under one root.
    pub fn hosts(hosts: u32, osds_per_host: u32, racks: Option<u32>) -> Self {
        let mut layers = vec![("host".to_string(), osds_per_host)];
        if let Some(r) = racks.filter(|r| *r > 0) {
            layers.push(("rack".to_string(), hosts.div_ceil(r)));
        }
        layers.push(("root".to_string(), 0));
        BuildSpec {
            num_osds: hosts.saturating_mul(osds_per_host),
            layers,
            osd_weight: WEIGHT_ONE,
        }
    }
}

/// Builds the map: optimal tunables, straw2 buckets, and rule 0
/// `replicated_rule` choosing leaves across the lowest layer's type.
pub fn build_map(spec: &BuildSpec) -> Result<CrushMap> {
    if spec.layers.is_empty() || spec.num_osds == 0 || spec.num_osds > 1 << 20 {
        return Err(CrushError::Invalid(
            "need at least one layer and one OSD".into(),
        ));
    }
    let mut map = CrushMap::new(Tunables::optimal());
    map.add_type(0, "osd");
    let mut lower: Vec<(i32, u32)> = Vec::new();
    for i in 0..spec.num_osds as i32 {
        map.add_device(i, &format!("osd.{i}"), None)?;
        lower.push((i, spec.osd_weight));
    }
    let mut next_id = -1;
    for (t, (name, size)) in spec.layers.iter().enumerate() {
        let type_id = t as i32 + 1;
        map.add_type(type_id, name);
        let per = if *size == 0 {
            lower.len()
        } else {
            *size as usize
        };
        let mut upper = Vec::new();
        for (j, chunk) in lower.chunks(per.max(1)).enumerate() {
            let bname = if *size == 0 {
                name.clone()
            } else {
                format!("{name}{j}")
            };
            let b = Bucket {
                id: next_id,
                name: bname,
                type_id,
                alg: BucketAlg::Straw2,
                hash: 0,
                items: chunk.iter().map(|c| c.0).collect(),
                weights: chunk.iter().map(|c| c.1).collect(),
                class: None,
            };
            upper.push((next_id, b.weight()));
            map.add_bucket(b)?;
            next_id -= 1;
        }
        lower = upper;
    }
    let root = lower.first().map_or(-1, |r| r.0);
    map.add_rule(Rule {
        id: 0,
        name: "replicated_rule".into(),
        rule_type: RULE_REPLICATED,
        min_size: 1,
        max_size: 10,
        steps: vec![
            Step::Take(root),
            Step::ChooseLeafFirstN { n: 0, type_id: 1 },
            Step::Emit,
        ],
    })?;
    map.finalize()?;
    Ok(map)
}

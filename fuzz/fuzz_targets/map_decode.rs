//! Feeds arbitrary bytes to every placement decoder: Shoal's OSD map,
//! incremental and CRUSH encodings, Ceph's binary CRUSH format and Ceph's
//! CRUSH text format. None may panic or allocate without bound; every map
//! that decodes is mapped over a handful of inputs, result sizes and
//! reweights, and no mapping may take more bucket choices than the map's
//! bound (`CrushMap::max_steps`), which the decoders' limits keep finite.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_crush::{CrushMap, Workspace};
use shoal_maps::{Incremental, OsdMap, PgId};

/// Inputs per rule: enough to take different paths, few enough to stay fast.
const INPUTS: [u32; 4] = [0, 1, 42, 0xdead_beef];

fn map_crush(map: &CrushMap) {
    let all_in = shoal_crush::tester::default_weights(map);
    // Every other device out, and one partially: rejections and retries.
    let mixed: Vec<u32> = (0..all_in.len())
        .map(|i| [0x10000, 0, 0x8000][i % 3])
        .collect();
    let mut ws = Workspace::default();
    let mut out = Vec::new();
    for rule in map.rules().map(|r| r.id).collect::<Vec<_>>() {
        for result_max in [1, 3, 6] {
            let bound = map.max_steps(rule, result_max);
            for weights in [&all_in, &mixed] {
                for x in INPUTS {
                    map.do_rule_with(&mut ws, rule, x, result_max, weights, &mut out);
                    assert!(out.len() <= result_max);
                    assert!(ws.steps() <= bound, "{} steps > bound {bound}", ws.steps());
                }
            }
        }
    }
}

fn map_osdmap(map: &OsdMap) {
    map_crush(map.crush());
    let weights = map.crush_weights();
    let mut ws = Workspace::default();
    for pool in map.pools().values() {
        let seeds = [0, 1, pool.pg_num / 2, pool.pg_num.saturating_sub(1)];
        for seed in seeds {
            let _ = map.pg_to_up_acting_with(PgId { pool: pool.id, seed }, &weights, &mut ws);
            let bound = map.crush().max_steps(pool.crush_rule, pool.size as usize);
            assert!(ws.steps() <= bound);
        }
        let _ = map.pg_to_up_acting(pool.object_pg("obj", ""));
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&which, bytes)) = input.split_first() else {
        return;
    };
    match which % 5 {
        0 => {
            if let Ok(map) = OsdMap::decode(bytes) {
                map_osdmap(&map);
            }
        }
        1 => {
            if let Ok(inc) = Incremental::decode(bytes) {
                if let Some(crush) = &inc.new_crush {
                    map_crush(crush);
                }
            }
        }
        2 => {
            if let Ok(map) = CrushMap::decode(bytes) {
                map_crush(&map);
            }
        }
        3 => {
            if let Ok(map) = shoal_crush::ceph_binary::decode(bytes) {
                map_crush(&map);
            }
        }
        _ => {
            if let Ok(text) = std::str::from_utf8(bytes) {
                if let Ok(map) = shoal_crush::text::parse(text) {
                    map_crush(&map);
                }
            }
        }
    }
});

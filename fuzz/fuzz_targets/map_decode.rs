//! Feeds arbitrary bytes to every placement decoder: Shoal's OSD map,
//! incremental and CRUSH encodings, Ceph's binary CRUSH format and Ceph's
//! CRUSH text format. None may panic or allocate without bound; a map that
//! decodes must map a few inputs without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&which, bytes)) = input.split_first() else { return };
    match which % 5 {
        0 => {
            if let Ok(map) = shoal_maps::OsdMap::decode(bytes) {
                for pool in map.pools().values() {
                    let pg = pool.object_pg("obj", "");
                    let _ = map.pg_to_up_acting(pg);
                }
            }
        }
        1 => {
            let _ = shoal_maps::Incremental::decode(bytes);
        }
        2 => {
            if let Ok(map) = shoal_crush::CrushMap::decode(bytes) {
                for rule in map.rules().map(|r| r.id).collect::<Vec<_>>() {
                    let _ = map.do_rule(rule, 42, 3, &[0x10000; 16]);
                }
            }
        }
        3 => {
            let _ = shoal_crush::ceph_binary::decode(bytes);
        }
        _ => {
            if let Ok(text) = std::str::from_utf8(bytes) {
                let _ = shoal_crush::text::parse(text);
            }
        }
    }
});

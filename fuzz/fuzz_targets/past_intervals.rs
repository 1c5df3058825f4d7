//! The past-intervals encoding (what the monitors answer a peering PG):
//! any bytes decode to an error or to intervals that re-encode and decode
//! to themselves.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    if let Ok(p) = shoal_maps::PastIntervals::decode(bytes) {
        let back = shoal_maps::PastIntervals::decode(&p.encode());
        assert!(back.as_ref() == Ok(&p), "past intervals do not round-trip");
    }
});

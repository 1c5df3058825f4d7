//! What the block store reads back from its disk: journal record
//! payloads, object records (then checked as the store checks them),
//! deferred-write records, collection ids and object keys. A damaged disk
//! may hold any bytes: each decoder answers an error, never panics or
//! allocates without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    if let Some((&which, bytes)) = input.split_first() {
        shoal_objectstore::block::fuzzing::decode(which, bytes);
    }
});

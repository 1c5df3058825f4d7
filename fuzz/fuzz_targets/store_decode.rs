//! What the block store and the OSD read back from a disk: the block
//! store's journal record payloads, object records (then checked as the
//! store checks them) and deferred-write records; the OSD's PG log
//! entries, dups, PG info, missing sets, snapshot sets, object metadata,
//! scrub records and trimmed-snapshot runs; collection ids and object
//! keys. A damaged disk may hold any bytes: each decoder answers an error,
//! never panics or allocates without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&which, bytes)) = input.split_first() else {
        return;
    };
    match which % 4 {
        0 => shoal_objectstore::block::fuzzing::decode(which / 4, bytes),
        1 | 2 => shoal_osd::fuzzing::decode(which / 4, bytes),
        _ => {
            let _ = shoal_objectstore::CollectionId::from_bytes(bytes);
            let _ = shoal_objectstore::ObjectKey::from_bytes(bytes);
            let _ = shoal_objectstore::ObjectKey::from_bytes_prefix(bytes);
        }
    }
});

//! What an OSD reads back from its store: PG log entries, dups, PG info,
//! missing sets, snapshot sets, object metadata, scrub records and
//! trimmed-snapshot runs. Each decoder answers an error (or a default),
//! never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    if let Some((&which, bytes)) = input.split_first() {
        shoal_osd::fuzzing::decode(which, bytes);
    }
});

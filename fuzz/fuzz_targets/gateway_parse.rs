//! What the S3 gateway parses itself, beyond s3s: bucket policies (parsed,
//! then evaluated), SigV4 Authorization headers, continuation tokens,
//! retention dates and version-index keys. None may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    if let Some((&which, bytes)) = input.split_first() {
        shoal_gateway::fuzzing::parse(which, bytes);
    }
});

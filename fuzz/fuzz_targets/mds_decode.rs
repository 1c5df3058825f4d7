//! The file system's wire and journal: MDS requests, replies and pushes
//! as clients and servers send them, and the MDS journal's records as
//! read back from RADOS (a torn or damaged tail). None may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_fs::{journal, msg};

fuzz_target!(|input: &[u8]| {
    let Some((&which, bytes)) = input.split_first() else {
        return;
    };
    if which % 2 == 0 {
        let _ = msg::decode::<msg::Request>(bytes);
        let _ = msg::decode::<msg::Reply>(bytes);
        let _ = msg::decode::<msg::Push>(bytes);
    } else {
        let (events, _) = journal::decode_records(bytes);
        // What decodes re-encodes and decodes to the same events.
        if !events.is_empty() {
            let (again, err) = journal::decode_records(&journal::encode_record(&events));
            assert!(err.is_none() && again.len() == events.len());
        }
    }
});

//! The front ends' own parsing of what clients send: the NBD protocol's
//! requests and handshake options (NBD_OPT_INFO/GO, meta-context
//! queries); the file system's MDS messages (requests, replies, pushes)
//! and journal records; the S3 gateway's bucket policies (parsed and
//! evaluated), SigV4 Authorization headers, continuation tokens, dates
//! and version-index keys. None may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&which, bytes)) = input.split_first() else {
        return;
    };
    match which % 8 {
        0 => {
            let mut req = [0u8; shoal_nbd::proto::REQUEST_BYTES];
            let n = bytes.len().min(req.len());
            req[..n].copy_from_slice(&bytes[..n]);
            if let Ok(r) = shoal_nbd::proto::parse_request(&req) {
                assert!(shoal_nbd::proto::encode_request(&r) == req);
            }
        }
        1 => {
            let _ = shoal_nbd::proto::parse_info_request(bytes);
        }
        2 => {
            let _ = shoal_nbd::proto::parse_meta_request(bytes);
        }
        3 => {
            let _ = shoal_fs::msg::decode::<shoal_fs::msg::Request>(bytes);
            let _ = shoal_fs::msg::decode::<shoal_fs::msg::Reply>(bytes);
            let _ = shoal_fs::msg::decode::<shoal_fs::msg::Push>(bytes);
        }
        4 => {
            let _ = shoal_fs::journal::decode_records(bytes);
        }
        _ => shoal_gateway::fuzzing::parse(which / 8, bytes),
    }
});

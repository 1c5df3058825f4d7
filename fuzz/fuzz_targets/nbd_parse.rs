//! The NBD protocol as a client sends it: transmission requests (a request
//! that parses re-encodes to the same bytes) and the handshake's option
//! data (NBD_OPT_INFO/GO and meta-context queries). None may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_nbd::proto;

fuzz_target!(|input: &[u8]| {
    let Some((&which, bytes)) = input.split_first() else {
        return;
    };
    match which % 3 {
        0 => {
            let mut req = [0u8; proto::REQUEST_BYTES];
            let n = bytes.len().min(req.len());
            req[..n].copy_from_slice(&bytes[..n]);
            if let Ok(r) = proto::parse_request(&req) {
                assert!(proto::encode_request(&r) == req);
            }
        }
        1 => {
            let _ = proto::parse_info_request(bytes);
        }
        _ => {
            let _ = proto::parse_meta_request(bytes);
        }
    }
});

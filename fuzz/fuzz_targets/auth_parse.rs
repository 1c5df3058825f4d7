//! Credentials and capabilities as daemons and operators hand them over:
//! tickets (parsed, then opened against a service's secrets as an OSD
//! does), keyring files, base64 keys, OSD and monitor capabilities,
//! `mon_host`, and erasure-code profile words. None may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_net::{Secret, ServiceSecrets, Ticket};
use shoal_types::EntityType;

fuzz_target!(|input: &[u8]| {
    let Some((&which, bytes)) = input.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(bytes);
    match which % 7 {
        0 => {
            let _ = Ticket::parse(bytes);
            let mut secrets = ServiceSecrets::default();
            secrets.insert(1, Secret::from_mac(&[7; 32]));
            let _ = secrets.open(bytes, EntityType::Osd, 1_000);
        }
        1 => {
            let _ = shoal_net::Keyring::parse(&text, "fuzz");
        }
        2 => {
            let _ = Secret::decode_base64(&text);
        }
        3 => {
            let _ = shoal_monclient::OsdCaps::parse(&text);
        }
        4 => {
            let _ = shoal_monclient::parse_mon_caps(&text);
        }
        5 => {
            let _ = shoal_monclient::parse_mon_host(&text);
        }
        _ => {
            let _ = shoal_ec::EcProfile::parse_words(&text);
        }
    }
});

//! An object's checksum from its multipart upload's part checksums, as S3
//! defines it: COMPOSITE — the algorithm's digest of the parts' raw digests
//! laid end to end, base64, then `-<parts>` (SHA-1, SHA-256, CRC32,
//! CRC32C); FULL_OBJECT — the CRC of the whole object, got by combining the
//! parts' CRCs with their lengths, no data read again (CRC32, CRC32C,
//! CRC64NVME).

use base64::Engine;
use s3s::crypto::{Crc32, Crc32c, Sha1, Sha256};

/// The checksum types.
pub const COMPOSITE: &str = "COMPOSITE";
/// See the module doc.
pub const FULL_OBJECT: &str = "FULL_OBJECT";

/// The type an upload of `alg` (lower case: crc32, crc32c, crc64nvme,
/// sha1, sha256) gets when it names none, and whether `kind` is allowed.
pub fn resolve_type(alg: &str, kind: Option<&str>) -> Result<&'static str, String> {
    let crc = matches!(alg, "crc32" | "crc32c" | "crc64nvme");
    match kind {
        None if alg == "crc64nvme" => Ok(FULL_OBJECT),
        None => Ok(COMPOSITE),
        Some(COMPOSITE) if alg != "crc64nvme" => Ok(COMPOSITE),
        Some(FULL_OBJECT) if crc => Ok(FULL_OBJECT),
        Some(k) => Err(format!(
            "checksum type {k} with algorithm {}",
            alg.to_uppercase()
        )),
    }
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn unb64(s: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .ok()
}

/// The object's checksum from `(part checksum, part bytes)` in order;
/// `None` when a part's checksum does not decode.
pub fn combine(alg: &str, kind: &str, parts: &[(String, u64)]) -> Option<String> {
    if kind == FULL_OBJECT {
        let (algorithm, width) = match alg {
            "crc32" => (crc_fast::CrcAlgorithm::Crc32IsoHdlc, 4),
            "crc32c" => (crc_fast::CrcAlgorithm::Crc32Iscsi, 4),
            "crc64nvme" => (crc_fast::CrcAlgorithm::Crc64Nvme, 8),
            _ => return None,
        };
        let mut acc: Option<u64> = None;
        for (sum, len) in parts {
            let raw = unb64(sum).filter(|r| r.len() == width)?;
            let v = raw.iter().fold(0u64, |a, b| (a << 8) | u64::from(*b));
            acc = Some(match acc {
                None => v,
                Some(a) => crc_fast::checksum_combine(algorithm, a, v, *len),
            });
        }
        let v = acc?;
        return Some(b64(&v.to_be_bytes()[8 - width..]));
    }
    let mut raw = Vec::new();
    for (sum, _) in parts {
        raw.extend(unb64(sum)?);
    }
    let digest = match alg {
        "sha256" => digest::<Sha256>(&raw),
        "sha1" => digest::<Sha1>(&raw),
        "crc32" => digest::<Crc32>(&raw),
        "crc32c" => digest::<Crc32c>(&raw),
        _ => return None,
    };
    Some(format!("{}-{}", b64(&digest), parts.len()))
}

fn digest<H: s3s::crypto::Checksum>(data: &[u8]) -> Vec<u8> {
    let mut h = H::new();
    h.update(data);
    h.finalize().as_ref().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum<H: s3s::crypto::Checksum>(data: &[u8]) -> String {
        b64(&digest::<H>(data))
    }

    #[test]
    fn full_object_crcs_equal_the_whole_objects() {
        let (a, b, c) = (vec![b'A'; 5000], vec![b'B'; 777], vec![b'C'; 1]);
        let whole = [a.clone(), b.clone(), c.clone()].concat();
        let parts = |f: fn(&[u8]) -> String| {
            vec![
                (f(&a), a.len() as u64),
                (f(&b), b.len() as u64),
                (f(&c), c.len() as u64),
            ]
        };
        assert_eq!(
            combine("crc32", FULL_OBJECT, &parts(sum::<Crc32>)),
            Some(sum::<Crc32>(&whole))
        );
        assert_eq!(
            combine("crc32c", FULL_OBJECT, &parts(sum::<Crc32c>)),
            Some(sum::<Crc32c>(&whole))
        );
        assert_eq!(
            combine(
                "crc64nvme",
                FULL_OBJECT,
                &parts(sum::<s3s::crypto::Crc64Nvme>)
            ),
            Some(sum::<s3s::crypto::Crc64Nvme>(&whole))
        );
    }

    #[test]
    fn composite_is_the_digest_of_the_digests() {
        // ceph/s3-tests' figures: one part of 1 024 'A's.
        let part = sum::<Sha256>(&[b'A'; 1024]);
        assert_eq!(part, "arcu6553sHVAiX4MjW0j7I7vD4w6R+Gz9Ok0Q9lTa+0=");
        assert_eq!(
            combine("sha256", COMPOSITE, &[(part, 1024)]).as_deref(),
            Some("Ok6Cs5b96ux6+MWQkJO7UBT5sKPBeXBLwvj/hK89smg=-1")
        );
        assert_eq!(combine("sha256", COMPOSITE, &[("%%".into(), 1)]), None);
        assert_eq!(resolve_type("crc64nvme", None), Ok(FULL_OBJECT));
        assert_eq!(resolve_type("sha1", None), Ok(COMPOSITE));
        assert!(resolve_type("sha1", Some(FULL_OBJECT)).is_err());
        assert!(resolve_type("crc64nvme", Some(COMPOSITE)).is_err());
    }
}

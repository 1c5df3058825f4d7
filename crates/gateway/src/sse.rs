//! Server-side encryption: what SSE-C and SSE-S3 ask for, and how an
//! encrypted object's bytes sit in the pool.
//!
//! Every encrypted object has a 256-bit data key. Under SSE-S3 it is
//! random, kept in the object's entry wrapped (AES-256-GCM) by the
//! gateways' master key, which the monitors keep (the key of the auth
//! entity [`MASTER_ENTITY`]). Under SSE-C it is derived from the key the
//! client sends with each request and a random salt kept in the entry;
//! only the client key's MD5 is kept, to tell a wrong key from damage.
//!
//! Each run of stripes (a PUT's data, one multipart part) is sealed with
//! its own key, HMAC-SHA256(data key, the run's prefix), in chunks of
//! [`CHUNK`] bytes of plaintext, each AES-256-GCM with its 16-byte tag
//! after it and its number in the run as nonce. Offsets in an entry stay
//! those of the plaintext: a stripe of [`STRIPE`] plaintext bytes is
//! stored as [`sealed_len`] of it, and a range read fetches the chunks
//! that hold the range, opens them (a changed byte fails the tag) and
//! keeps the bytes asked for.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hyper::http::HeaderMap;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use s3s::{S3Result, s3_error};
use serde::{Deserialize, Serialize};

use crate::meta::STRIPE;

/// Plaintext bytes per sealed chunk.
pub const CHUNK: usize = 4096;
/// The tag after each chunk.
pub const TAG: usize = 16;
const SEALED: usize = CHUNK + TAG;
const CHUNKS_PER_STRIPE: u64 = STRIPE / CHUNK as u64;

/// SSE-S3's algorithm, as requests and bucket configurations name it.
pub const AES256: &str = "AES256";

/// The auth entity whose key, kept by the monitors, wraps SSE-S3 data
/// keys. Removing it makes every SSE-S3 object unreadable.
pub const MASTER_ENTITY: &str = "client.gateway-sse-s3";

/// How an object's data is encrypted, kept in its entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Sse {
    /// SSE-S3: the data key, wrapped by the master key (base64 of nonce,
    /// sealed key and tag).
    S3 {
        /// The wrapped data key.
        wrapped: String,
    },
    /// SSE-C: the client's key's MD5 (base64) and the salt (base64) its
    /// data key is derived with.
    Customer {
        /// MD5 of the client's key.
        key_md5: String,
        /// The salt.
        salt: String,
    },
}

/// What a request asks for, from its headers.
#[derive(Clone, PartialEq, Eq)]
pub enum Asked {
    /// Nothing about encryption.
    Nothing,
    /// `x-amz-server-side-encryption: AES256`.
    S3,
    /// An SSE-C key (checked against its MD5).
    Customer {
        /// The key.
        key: [u8; 32],
        /// Its MD5, base64.
        key_md5: String,
    },
}

impl std::fmt::Debug for Asked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Asked::Nothing => f.write_str("Nothing"),
            Asked::S3 => f.write_str("S3"),
            Asked::Customer { key_md5, .. } => write!(f, "Customer({key_md5})"),
        }
    }
}

/// The headers of SSE-C for an object (`x-amz-server-side-encryption-
/// customer-…`) or for a copy's source (`x-amz-copy-source-server-side-
/// encryption-customer-…`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// The object written or read.
    Object,
    /// A copy's source.
    CopySource,
}

impl Which {
    fn prefix(self) -> &'static str {
        match self {
            Which::Object => "x-amz-server-side-encryption",
            Which::CopySource => "x-amz-copy-source-server-side-encryption",
        }
    }
}

/// The encryption `headers` ask for (`which` object's), refused as AWS
/// refuses it when malformed or contradictory: InvalidArgument for an
/// unknown algorithm, SSE-KMS (not offered), SSE-C and SSE-S3 at once, a
/// key that is not 256 bits or does not match its MD5, or a key without
/// its algorithm or MD5.
pub fn asked(headers: &HeaderMap, which: Which) -> S3Result<Asked> {
    let p = which.prefix();
    let get = |suffix: &str| {
        headers
            .get(format!("{p}{suffix}"))
            .map(|v| v.to_str().unwrap_or("\u{0}").trim().to_string())
    };
    let algorithm = get("-customer-algorithm");
    let key = get("-customer-key");
    let key_md5 = get("-customer-key-md5");
    let s3 = if which == Which::Object {
        get("")
    } else {
        None
    };
    // Every other header of the family asks for what is not offered
    // (SSE-KMS's key id and context, S3 bucket keys): refused, never
    // stored as if honoured.
    let known = [
        "",
        "-customer-algorithm",
        "-customer-key",
        "-customer-key-md5",
    ];
    for name in headers.keys().map(|n| n.as_str()) {
        let Some(rest) = name.strip_prefix(p) else {
            continue;
        };
        if known.contains(&rest) {
            continue;
        }
        if rest == "-aws-kms-key-id" || rest == "-context" {
            return Err(s3_error!(
                InvalidArgument,
                "SSE-KMS is not offered: no KMS is configured (use SSE-S3 or SSE-C)"
            ));
        }
        return Err(s3_error!(
            InvalidArgument,
            "{name} is not supported: nothing stored"
        ));
    }
    if algorithm.is_none() && key.is_none() && key_md5.is_none() {
        return match s3.as_deref() {
            None => Ok(Asked::Nothing),
            Some(AES256) => Ok(Asked::S3),
            Some("aws:kms") | Some("aws:kms:dsse") => Err(s3_error!(
                InvalidArgument,
                "SSE-KMS is not offered: no KMS is configured (use SSE-S3 or SSE-C)"
            )),
            Some(other) => Err(s3_error!(
                InvalidArgument,
                "the encryption method {other:?} is not valid: AES256"
            )),
        };
    }
    if s3.is_some() {
        return Err(s3_error!(
            InvalidArgument,
            "server-side encryption with customer keys and with the gateway's keys at once"
        ));
    }
    match algorithm.as_deref() {
        Some(AES256) => {}
        Some(other) => {
            return Err(s3_error!(
                InvalidArgument,
                "the customer key's algorithm {other:?} is not valid: AES256"
            ));
        }
        None => {
            return Err(s3_error!(
                InvalidArgument,
                "a customer key without {p}-customer-algorithm"
            ));
        }
    }
    let Some(key) = key else {
        return Err(s3_error!(
            InvalidArgument,
            "{p}-customer-algorithm without {p}-customer-key"
        ));
    };
    let Some(key_md5) = key_md5 else {
        return Err(s3_error!(
            InvalidArgument,
            "{p}-customer-key without {p}-customer-key-md5"
        ));
    };
    let key: [u8; 32] = B64
        .decode(&key)
        .ok()
        .and_then(|k| k.try_into().ok())
        .ok_or_else(|| {
            s3_error!(
                InvalidArgument,
                "the customer key must be 256 bits, base64-encoded"
            )
        })?;
    let md5 = {
        use md5::Digest;
        B64.encode(md5::Md5::digest(key))
    };
    if md5 != key_md5 {
        return Err(s3_error!(
            InvalidArgument,
            "the customer key's MD5 does not match {p}-customer-key-md5"
        ));
    }
    Ok(Asked::Customer { key, key_md5 })
}

/// A key of 256 bits, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Key([u8; 32]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

/// Why sealed data or a wrapped key does not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A tag did not match: the data was changed, or the key is wrong.
    #[error("{0}: its authentication tag does not match (damaged, or another key)")]
    Tag(String),
    /// A record that cannot be what was written.
    #[error("{0}")]
    Malformed(String),
    /// The OS gave no random bytes.
    #[error("no random bytes for a key: {0}")]
    Random(String),
}

fn hmac(key: &[u8], what: &[u8]) -> [u8; 32] {
    use hmac::Mac;
    let mut m = <hmac::Hmac<sha2::Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
    m.update(what);
    m.finalize().into_bytes().into()
}

fn aead(key: &[u8; 32]) -> LessSafeKey {
    LessSafeKey::new(
        UnboundKey::new(&AES_256_GCM, key)
            .unwrap_or_else(|_| unreachable!("AES-256 takes a 32-byte key")),
    )
}

fn nonce(n: u64) -> Nonce {
    let mut b = [0u8; 12];
    b[4..].copy_from_slice(&n.to_be_bytes());
    Nonce::assume_unique_for_key(b)
}

/// Bytes from the OS's generator (without it no key is made).
fn random<const N: usize>() -> Result<[u8; N], SseError> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| SseError::Random(e.to_string()))?;
    Ok(b)
}

impl Key {
    /// A key from 32 bytes.
    pub fn from_bytes(b: [u8; 32]) -> Key {
        Key(b)
    }

    /// The master key from the monitors' record of [`MASTER_ENTITY`] (its
    /// key, base64).
    pub fn master(secret_b64: &str) -> Result<Key, SseError> {
        let secret = B64
            .decode(secret_b64.trim())
            .map_err(|e| SseError::Malformed(format!("the master entity's key: {e}")))?;
        Ok(Key(hmac(&secret, b"shoal gateway SSE-S3 master key v1")))
    }

    /// A new data key and its [`Sse::S3`] record, wrapped by `self` (the
    /// master key).
    pub fn new_s3(&self) -> Result<(Key, Sse), SseError> {
        let data: [u8; 32] = random()?;
        let n: [u8; 12] = random()?;
        let mut sealed = data.to_vec();
        let tag = aead(&self.0)
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(n), Aad::empty(), &mut sealed)
            .unwrap_or_else(|_| unreachable!("32 bytes are within AES-GCM's limit"));
        let mut out = n.to_vec();
        out.extend_from_slice(&sealed);
        out.extend_from_slice(tag.as_ref());
        Ok((
            Key(data),
            Sse::S3 {
                wrapped: B64.encode(out),
            },
        ))
    }

    /// The data key `wrapped` holds, unwrapped by `self` (the master key).
    pub fn unwrap_s3(&self, wrapped: &str) -> Result<Key, SseError> {
        let mut b = B64
            .decode(wrapped)
            .map_err(|e| SseError::Malformed(format!("a wrapped data key: {e}")))?;
        if b.len() != 12 + 32 + TAG {
            return Err(SseError::Malformed(format!(
                "a wrapped data key of {} bytes, not {}",
                b.len(),
                12 + 32 + TAG
            )));
        }
        let n: [u8; 12] = b[..12].try_into().unwrap_or_default();
        let plain = aead(&self.0)
            .open_in_place(Nonce::assume_unique_for_key(n), Aad::empty(), &mut b[12..])
            .map_err(|_| SseError::Tag("the object's wrapped data key".into()))?;
        let k: [u8; 32] = plain
            .try_into()
            .map_err(|_| SseError::Malformed("a data key not of 32 bytes".into()))?;
        Ok(Key(k))
    }

    /// A new [`Sse::Customer`] record for the client key `self` (whose
    /// MD5 is `key_md5`) and the data key it gives.
    pub fn new_customer(&self, key_md5: &str) -> Result<(Key, Sse), SseError> {
        let salt: [u8; 16] = random()?;
        let sse = Sse::Customer {
            key_md5: key_md5.to_string(),
            salt: B64.encode(salt),
        };
        Ok((Key(hmac(&self.0, &salt)), sse))
    }

    /// The data key of an SSE-C object whose salt is `salt`, `self` being
    /// the client's key.
    pub fn customer_data_key(&self, salt: &str) -> Result<Key, SseError> {
        let salt = B64
            .decode(salt)
            .map_err(|e| SseError::Malformed(format!("an SSE-C salt: {e}")))?;
        Ok(Key(hmac(&self.0, &salt)))
    }

    fn run(&self, prefix: &str) -> LessSafeKey {
        aead(&hmac(&self.0, prefix.as_bytes()))
    }

    /// Stripe `stripe` of the run `prefix` sealed (`self` the data key).
    pub fn seal(&self, prefix: &str, stripe: u64, plain: &[u8]) -> Vec<u8> {
        let key = self.run(prefix);
        let mut out = Vec::with_capacity(sealed_len(plain.len() as u64) as usize);
        for (i, c) in plain.chunks(CHUNK).enumerate() {
            let at = out.len();
            out.extend_from_slice(c);
            let tag = key
                .seal_in_place_separate_tag(
                    nonce(stripe * CHUNKS_PER_STRIPE + i as u64),
                    Aad::empty(),
                    &mut out[at..],
                )
                .unwrap_or_else(|_| unreachable!("a 4 KiB chunk is within AES-GCM's limit"));
            out.extend_from_slice(tag.as_ref());
        }
        out
    }

    /// Plaintext bytes `[off, off + len)` of stripe `stripe` of the run
    /// `prefix`, from `sealed`: the chunks from the one holding `off` on,
    /// as read from where [`sealed_range`] says.
    pub fn open(
        &self,
        prefix: &str,
        stripe: u64,
        off: u64,
        len: u64,
        sealed: &[u8],
    ) -> Result<Vec<u8>, SseError> {
        let key = self.run(prefix);
        let first = off / CHUNK as u64;
        // One copy of what was read, each chunk opened in place and its
        // plaintext moved down over the tags before it.
        let mut out = sealed.to_vec();
        let mut plain_len = 0;
        for (i, at) in (0..sealed.len()).step_by(SEALED).enumerate() {
            let end = (at + SEALED).min(sealed.len());
            if end - at <= TAG {
                return Err(SseError::Malformed(format!(
                    "{prefix}.{stripe}: a sealed chunk of {} bytes",
                    end - at
                )));
            }
            let n = nonce(stripe * CHUNKS_PER_STRIPE + first + i as u64);
            let opened = key
                .open_in_place(n, Aad::empty(), &mut out[at..end])
                .map_err(|_| SseError::Tag(format!("{prefix}.{stripe}")))?
                .len();
            out.copy_within(at..at + opened, plain_len);
            plain_len += opened;
        }
        out.truncate(plain_len);
        let skip = (off - first * CHUNK as u64) as usize;
        let end = skip + len as usize;
        if out.len() < end {
            return Err(SseError::Malformed(format!(
                "{prefix}.{stripe}: {} bytes where {end} were written",
                out.len()
            )));
        }
        out.truncate(end);
        out.drain(..skip);
        Ok(out)
    }
}

/// Stored bytes of `plain` plaintext bytes sealed.
pub fn sealed_len(plain: u64) -> u64 {
    plain + plain.div_ceil(CHUNK as u64) * TAG as u64
}

/// Where in a sealed stripe the plaintext `[off, off + len)` sits: the
/// offset and length to read (the whole chunks holding it).
pub fn sealed_range(off: u64, len: u64) -> (u64, u64) {
    let first = off / CHUNK as u64;
    let end = (off + len).div_ceil(CHUNK as u64);
    (first * SEALED as u64, (end - first) * SEALED as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                hyper::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    const KEY: &str = "pO3upElrwuEXSoFwCfnZPdSsmt/xWeFa0N9KgDijwVs=";
    const MD5: &str = "DWygnHRtgiJ77HCm+1rvHw==";

    fn code(pairs: &[(&str, &str)]) -> String {
        match asked(&headers(pairs), Which::Object) {
            Ok(a) => format!("{a:?}"),
            Err(e) => e.code().as_str().to_string(),
        }
    }

    #[test]
    fn headers_are_read_as_aws_reads_them() {
        let alg = ("x-amz-server-side-encryption-customer-algorithm", "AES256");
        let key = ("x-amz-server-side-encryption-customer-key", KEY);
        let md5 = ("x-amz-server-side-encryption-customer-key-md5", MD5);
        assert_eq!(code(&[]), "Nothing");
        assert_eq!(code(&[("x-amz-server-side-encryption", "AES256")]), "S3");
        assert_eq!(code(&[alg, key, md5]), format!("Customer({MD5})"));
        for bad in [
            vec![("x-amz-server-side-encryption", "aws:kms")],
            vec![("x-amz-server-side-encryption", "aes:kms")],
            vec![
                ("x-amz-server-side-encryption", "AES256"),
                ("x-amz-server-side-encryption-aws-kms-key-id", "k"),
            ],
            vec![("x-amz-server-side-encryption", "AES256"), alg, key, md5],
            vec![key, md5],
            vec![alg, key],
            vec![alg],
            vec![
                ("x-amz-server-side-encryption-customer-algorithm", "AES192"),
                key,
                md5,
            ],
            vec![
                alg,
                key,
                (
                    "x-amz-server-side-encryption-customer-key-md5",
                    "AAAAAAAAAAAAAAAAAAAAAA==",
                ),
            ],
            vec![
                alg,
                ("x-amz-server-side-encryption-customer-key", "c2hvcnQ="),
                md5,
            ],
        ] {
            assert_eq!(code(&bad), "InvalidArgument", "{bad:?}");
        }
        let copy = headers(&[
            (
                "x-amz-copy-source-server-side-encryption-customer-algorithm",
                "AES256",
            ),
            ("x-amz-copy-source-server-side-encryption-customer-key", KEY),
            (
                "x-amz-copy-source-server-side-encryption-customer-key-md5",
                MD5,
            ),
        ]);
        assert!(matches!(
            asked(&copy, Which::CopySource),
            Ok(Asked::Customer { .. })
        ));
        assert_eq!(asked(&copy, Which::Object).ok(), Some(Asked::Nothing));
    }

    #[test]
    fn a_stripe_opens_whole_and_in_ranges_and_not_when_changed() {
        let k = Key::from_bytes([7; 32]);
        let plain: Vec<u8> = (0..3 * CHUNK + 100).map(|i| (i % 251) as u8).collect();
        let sealed = k.seal("data.b.run", 2, &plain);
        assert_eq!(sealed.len() as u64, sealed_len(plain.len() as u64));
        assert!(
            !sealed
                .windows(64)
                .any(|w| plain.windows(64).any(|p| p == w))
        );
        for (off, len) in [
            (0, plain.len()),
            (1, 10),
            (4095, 2),
            (4096, 4096),
            (8000, 4388),
        ] {
            let (at, n) = sealed_range(off as u64, len as u64);
            let end = ((at + n) as usize).min(sealed.len());
            let got = k
                .open(
                    "data.b.run",
                    2,
                    off as u64,
                    len as u64,
                    &sealed[at as usize..end],
                )
                .unwrap();
            assert_eq!(got, &plain[off..off + len], "{off}+{len}");
        }
        // Another stripe's place, another run, another key, a changed byte.
        assert!(k.open("data.b.run", 3, 0, 10, &sealed).is_err());
        assert!(k.open("data.b.other", 2, 0, 10, &sealed).is_err());
        assert!(
            Key::from_bytes([8; 32])
                .open("data.b.run", 2, 0, 10, &sealed)
                .is_err()
        );
        let mut bad = sealed.clone();
        bad[5000] ^= 1;
        assert!(matches!(
            k.open("data.b.run", 2, 4096, 10, &bad[SEALED..]),
            Err(SseError::Tag(_))
        ));
        // Cut short: fewer bytes than the range.
        assert!(k.open("data.b.run", 2, 0, 5000, &sealed[..SEALED]).is_err());
    }

    #[test]
    fn data_keys_wrap_and_derive() {
        let master = Key::master(&B64.encode([1u8; 32])).unwrap();
        let (data, sse) = master.new_s3().unwrap();
        let Sse::S3 { wrapped } = &sse else { panic!() };
        assert_eq!(master.unwrap_s3(wrapped).unwrap(), data);
        let other = Key::master(&B64.encode([2u8; 32])).unwrap();
        assert!(matches!(other.unwrap_s3(wrapped), Err(SseError::Tag(_))));
        assert!(master.unwrap_s3("AAAA").is_err());
        assert!(master.unwrap_s3("not base64!").is_err());
        // Two objects never share a data key.
        assert_ne!(master.new_s3().unwrap().0, data);
        let client = Key::from_bytes([3; 32]);
        let (d1, s1) = client.new_customer(MD5).unwrap();
        let Sse::Customer { salt, .. } = &s1 else {
            panic!()
        };
        assert_eq!(client.customer_data_key(salt).unwrap(), d1);
        assert_ne!(client.new_customer(MD5).unwrap().0, d1);
    }
}

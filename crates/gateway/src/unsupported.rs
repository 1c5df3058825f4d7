//! What the gateway refuses rather than pretends: a request header that
//! asks for a behaviour the gateway does not have (storage classes other
//! than STANDARD, website redirects, MFA, bucket ownership controls, a
//! copy source's expected owner), or encryption headers on an operation
//! they do not apply to, is answered with `NotImplemented` — or the error
//! AWS documents for the case — before anything is stored. (Tags are
//! kept: `tags.rs`; policies and public access blocks: `policy.rs`;
//! object lock: `lock.rs`; encryption: `sse.rs`.) The bucket subresources
//! the gateway lacks (lifecycle, replication, website, logging,
//! requester-pays, CORS, notifications) are the S3 trait's operations it
//! does not implement, which s3s answers with `NotImplemented`.

use hyper::http::HeaderMap;
use s3s::{S3Result, s3_error};

/// Operations that take encryption headers (`sse.rs` reads them).
const ENCRYPTED: [&str; 9] = [
    "PutObject",
    "GetObject",
    "HeadObject",
    "GetObjectAttributes",
    "CopyObject",
    "CreateMultipartUpload",
    "UploadPart",
    "UploadPartCopy",
    "CompleteMultipartUpload",
];

/// Refuses `op` when its headers ask for what the gateway does not do.
pub fn check(op: &str, headers: &HeaderMap) -> S3Result<()> {
    for (name, value) in headers {
        let n = name.as_str();
        let v = value.to_str().unwrap_or("").trim();
        let sse = n.starts_with("x-amz-server-side-encryption")
            || n.starts_with("x-amz-copy-source-server-side-encryption");
        if sse && !ENCRYPTED.contains(&op) {
            return Err(s3_error!(
                InvalidArgument,
                "{n} does not apply to {op}: nothing done"
            ));
        }
        match n {
            "x-amz-storage-class" if v != "STANDARD" => {
                return Err(s3_error!(
                    InvalidStorageClass,
                    "the storage class {v:?} is not offered: only STANDARD"
                ));
            }
            "x-amz-website-redirect-location" => {
                return Err(s3_error!(
                    NotImplemented,
                    "static websites (x-amz-website-redirect-location) are not supported"
                ));
            }
            "x-amz-mfa" => {
                return Err(s3_error!(NotImplemented, "MFA delete is not supported"));
            }
            "x-amz-object-ownership" if v != "ObjectWriter" => {
                return Err(s3_error!(
                    NotImplemented,
                    "object ownership {v:?} is not supported: objects belong to their writer (ObjectWriter)"
                ));
            }
            // (x-amz-expected-bucket-owner is checked with the bucket.)
            "x-amz-source-expected-bucket-owner" => {
                return Err(s3_error!(
                    NotImplemented,
                    "{n} is not supported: the copy source's owner is not checked"
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, hyper::http::HeaderValue::from_static(v));
        }
        h
    }

    fn code(op: &str, pairs: &[(&'static str, &'static str)]) -> Option<String> {
        check(op, &with(pairs))
            .err()
            .map(|e| e.code().as_str().to_string())
    }

    #[test]
    fn plain_requests_pass() {
        assert_eq!(code("PutObject", &[]), None);
        assert_eq!(
            code(
                "PutObject",
                &[
                    ("x-amz-storage-class", "STANDARD"),
                    ("x-amz-acl", "public-read"),
                    ("x-amz-object-lock-legal-hold", "OFF"),
                    ("x-amz-request-payer", "requester"),
                    ("content-type", "text/plain"),
                ]
            ),
            None
        );
        assert_eq!(
            code(
                "CreateBucket",
                &[("x-amz-bucket-object-lock-enabled", "false")]
            ),
            None
        );
    }

    #[test]
    fn what_is_not_given_is_refused() {
        // Encryption headers are the encrypting operations' to read
        // (`sse.rs`), and refused elsewhere.
        let ssec = [
            ("x-amz-server-side-encryption-customer-algorithm", "AES256"),
            ("x-amz-server-side-encryption-customer-key", "a2V5"),
            ("x-amz-server-side-encryption-customer-key-md5", "bWQ1"),
        ];
        assert_eq!(code("PutObject", &ssec), None);
        assert_eq!(code("GetObject", &ssec), None);
        assert_eq!(
            code("PutObjectTagging", &ssec).as_deref(),
            Some("InvalidArgument")
        );
        for h in [
            ("x-amz-website-redirect-location", "/x"),
            ("x-amz-mfa", "123 456"),
            ("x-amz-object-ownership", "BucketOwnerEnforced"),
            ("x-amz-source-expected-bucket-owner", "123456789012"),
        ] {
            assert_eq!(
                code("PutObject", &[h]).as_deref(),
                Some("NotImplemented"),
                "{h:?}"
            );
        }
        assert_eq!(
            code("PutObject", &[("x-amz-storage-class", "GLACIER")]).as_deref(),
            Some("InvalidStorageClass")
        );
        // Grants are taken (`acl.rs`).
        let grant = [("x-amz-grant-read", "id=someone")];
        assert_eq!(code("PutObject", &grant), None);
        assert_eq!(code("CreateBucket", &grant), None);
    }
}

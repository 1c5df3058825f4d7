//! Object and bucket tags: the tag sets clients give (in a `Tagging`
//! document or the `x-amz-tagging` header), checked against AWS's limits
//! before anything is stored, and kept in the object's entry or the
//! bucket's record as a map of key to value.
//!
//! AWS's rules: at most 10 tags on an object and 50 on a bucket; a key of
//! 1 to 128 characters, a value of at most 256; no key twice; no key
//! beginning with `aws:` (AWS's own). A set breaking one is refused with
//! `InvalidTag`; a header that is not URL query parameters with
//! `InvalidArgument`.

use std::collections::BTreeMap;

use s3s::dto::Tag;
use s3s::{S3Result, s3_error};

/// A tag set: key → value.
pub type Tags = BTreeMap<String, String>;

/// Tags an object may carry at most.
pub const OBJECT_TAGS_MAX: usize = 10;
/// Tags a bucket may carry at most.
pub const BUCKET_TAGS_MAX: usize = 50;
/// A key's characters at most.
pub const KEY_CHARS_MAX: usize = 128;
/// A value's characters at most.
pub const VALUE_CHARS_MAX: usize = 256;

/// What a tag set is for: the limit on its size differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// An object (or one version of it).
    Object,
    /// A bucket.
    Bucket,
}

impl Scope {
    fn max(self) -> usize {
        match self {
            Scope::Object => OBJECT_TAGS_MAX,
            Scope::Bucket => BUCKET_TAGS_MAX,
        }
    }
}

/// The tag set of a `Tagging` document, if it keeps AWS's rules.
pub fn from_set(set: &[Tag], scope: Scope) -> S3Result<Tags> {
    let pairs = set.iter().map(|t| {
        (
            t.key.clone().unwrap_or_default(),
            t.value.clone().unwrap_or_default(),
        )
    });
    collect(pairs, scope)
}

/// The tag set of an `x-amz-tagging` header (`k1=v1&k2=v2`, URL-encoded),
/// if well formed and within AWS's rules. An empty header is no tags.
pub fn from_header(v: &str, scope: Scope) -> S3Result<Tags> {
    let bad = || {
        s3_error!(
            InvalidArgument,
            "the x-amz-tagging header must be URL query parameters (key=value&...), URL-encoded UTF-8"
        )
    };
    let mut pairs = Vec::new();
    for part in v.split('&').filter(|p| !p.is_empty()) {
        let (k, val) = part.split_once('=').unwrap_or((part, ""));
        pairs.push((
            percent_decode(k).ok_or_else(bad)?,
            percent_decode(val).ok_or_else(bad)?,
        ));
    }
    collect(pairs.into_iter(), scope)
}

/// A `Tagging` document's tag set of `tags`.
pub fn to_set(tags: &Tags) -> Vec<Tag> {
    tags.iter()
        .map(|(k, v)| Tag {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect()
}

fn collect(pairs: impl Iterator<Item = (String, String)>, scope: Scope) -> S3Result<Tags> {
    let mut tags = Tags::new();
    for (k, v) in pairs {
        check_one(&k, &v)?;
        if tags.insert(k.clone(), v).is_some() {
            return Err(s3_error!(
                InvalidTag,
                "Cannot provide multiple Tags with the same key: {k:?}"
            ));
        }
        if tags.len() > scope.max() {
            return Err(s3_error!(
                InvalidTag,
                "at most {} tags are allowed on {}",
                scope.max(),
                match scope {
                    Scope::Object => "an object",
                    Scope::Bucket => "a bucket",
                }
            ));
        }
    }
    Ok(tags)
}

fn check_one(k: &str, v: &str) -> S3Result<()> {
    let key_chars = k.chars().count();
    if key_chars == 0 || key_chars > KEY_CHARS_MAX {
        return Err(s3_error!(
            InvalidTag,
            "a tag key is 1 to {KEY_CHARS_MAX} characters, not {key_chars}"
        ));
    }
    let value_chars = v.chars().count();
    if value_chars > VALUE_CHARS_MAX {
        return Err(s3_error!(
            InvalidTag,
            "a tag value is at most {VALUE_CHARS_MAX} characters, not {value_chars}"
        ));
    }
    // Bytes, not a str slice: a key whose fourth byte is inside a
    // character (`p[é…`) must not panic the request.
    if k.as_bytes()
        .get(..4)
        .is_some_and(|p| p.eq_ignore_ascii_case(b"aws:"))
    {
        return Err(s3_error!(
            InvalidTag,
            "Your TagKey cannot be prefixed with aws: ({k:?})"
        ));
    }
    Ok(())
}

/// `s` with `%XX` escapes and `+` (a space) decoded; `None` if an escape
/// is cut short or the bytes are not UTF-8.
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = b.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::S3ErrorCode;

    fn code<T: std::fmt::Debug>(r: S3Result<T>) -> S3ErrorCode {
        r.expect_err("refused").code().clone()
    }

    fn set(pairs: &[(&str, &str)]) -> Vec<Tag> {
        pairs
            .iter()
            .map(|(k, v)| Tag {
                key: Some(k.to_string()),
                value: Some(v.to_string()),
            })
            .collect()
    }

    #[test]
    fn a_header_is_url_query_parameters() {
        let t = from_header("team=a%20b&empty=&bare&sp+ace=x%2By", Scope::Object).expect("parsed");
        let want: Tags = [
            ("team", "a b"),
            ("empty", ""),
            ("bare", ""),
            ("sp ace", "x+y"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(t, want);
        assert!(from_header("", Scope::Object).expect("none").is_empty());
        assert_eq!(
            code(from_header("a=%zz", Scope::Object)),
            S3ErrorCode::InvalidArgument
        );
        assert_eq!(
            code(from_header("a=%4", Scope::Object)),
            S3ErrorCode::InvalidArgument
        );
        assert_eq!(
            code(from_header("a=%ff", Scope::Object)),
            S3ErrorCode::InvalidArgument
        );
        assert_eq!(
            code(from_header("a=1&a=2", Scope::Object)),
            S3ErrorCode::InvalidTag
        );
        // A key whose fourth byte falls inside a character (found by the
        // fuzzer: it panicked the request), and the reserved prefix in
        // any case.
        let t = from_header("p%5B%E2%82%AC=1", Scope::Object).expect("parsed");
        assert_eq!(t.get("p[\u{20ac}").map(String::as_str), Some("1"));
        assert_eq!(
            code(from_header("AwS%3Ax=1", Scope::Object)),
            S3ErrorCode::InvalidTag
        );
    }

    #[test]
    fn aws_limits_hold_for_objects_and_buckets() {
        let many = |n: usize| -> Vec<Tag> {
            (0..n)
                .map(|i| Tag {
                    key: Some(format!("k{i}")),
                    value: Some("v".into()),
                })
                .collect()
        };
        assert_eq!(from_set(&many(10), Scope::Object).expect("10").len(), 10);
        assert_eq!(
            code(from_set(&many(11), Scope::Object)),
            S3ErrorCode::InvalidTag
        );
        assert_eq!(from_set(&many(50), Scope::Bucket).expect("50").len(), 50);
        assert_eq!(
            code(from_set(&many(51), Scope::Bucket)),
            S3ErrorCode::InvalidTag
        );
        // Characters, not bytes: 128 two-byte characters are a valid key.
        let k128 = "é".repeat(128);
        let v256 = "v".repeat(256);
        assert!(from_set(&set(&[(&k128, &v256)]), Scope::Object).is_ok());
        let k129 = "k".repeat(129);
        let v257 = "v".repeat(257);
        for bad in [
            set(&[(&k129, "v")]),
            set(&[("k", &v257)]),
            set(&[("", "v")]),
            set(&[("aws:created", "v")]),
            set(&[("AWS:x", "v")]),
            set(&[("k", "1"), ("k", "2")]),
        ] {
            assert_eq!(
                code(from_set(&bad, Scope::Object)),
                S3ErrorCode::InvalidTag,
                "{bad:?}"
            );
        }
        let tags = from_set(&set(&[("b", "2"), ("a", "1")]), Scope::Object).expect("ok");
        assert_eq!(
            from_set(&to_set(&tags), Scope::Object).expect("again"),
            tags
        );
    }
}

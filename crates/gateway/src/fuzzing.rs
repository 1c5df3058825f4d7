//! Entry points for the fuzzers (`fuzz/`, target `gateway_parse`): what
//! the gateway parses itself, beyond s3s — bucket policies (parsed, then
//! evaluated against a request the input names), the SigV4
//! `Authorization` header, continuation tokens, retention dates, the
//! version index's omap keys read back from the store, an object's index
//! entry read back (its manifest of parts, then the pieces of a range of
//! it), a sealed (SSE) stripe opened, and `x-amz-tagging` headers. Each
//! must answer an error, never panic or hang. Not an API.

use std::collections::BTreeMap;

/// Parses `bytes` as the input kind `which` picks; the result is dropped.
pub fn parse(which: u8, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    match which % 8 {
        0 => {
            // The policy, then a request made of its first line's words.
            let (doc, req) = text.split_once('\n').unwrap_or((&text, ""));
            if let Ok(p) = crate::policy::Policy::parse(doc, "b") {
                let mut words = req.split(' ');
                let action = words.next().unwrap_or("s3:GetObject");
                let key = words.next().unwrap_or("k");
                let context: BTreeMap<String, String> = words
                    .filter_map(|w| w.split_once('='))
                    .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
                    .collect();
                let r = crate::policy::Request {
                    user: words_user(req),
                    action,
                    resource: format!("arn:aws:s3:::b/{key}"),
                    context,
                };
                let _ = p.evaluate(&r);
                let _ = (p.needs_object_tags(), p.is_public());
            }
        }
        1 => {
            let _ = crate::region::Authorization::parse(&text);
        }
        2 => {
            let _ = crate::s3::decode_token(&text);
        }
        3 => {
            let _ = crate::s3::parse_date(&text);
        }
        4 => {
            let _ = crate::versions::parse_record(bytes);
        }
        5 => {
            // "START END" on the first line, the entry's JSON after it.
            let (range, doc) = text.split_once('\n').unwrap_or(("0 0", &text));
            let mut nums = range.split(' ').map(|n| n.parse::<u64>().unwrap_or(0));
            let (start, end) = (nums.next().unwrap_or(0), nums.next().unwrap_or(0));
            if let Ok(e) = crate::meta::decode::<crate::meta::Entry>("fuzz", doc.as_bytes()) {
                // A range wider than a few stripes is cut to them: the
                // pieces of a real GET are read one by one as they stream.
                let end = end.min(start.saturating_add(8 * crate::meta::STRIPE));
                let _ = crate::meta::Meta::pieces(&e, start, end);
            }
        }
        6 => {
            // A data key, where to read, then what the store gave back.
            if bytes.len() >= 48 {
                let (k, rest) = bytes.split_at(32);
                let (at, sealed) = rest.split_at(16);
                let key = crate::sse::Key::from_bytes(k.try_into().unwrap_or([0; 32]));
                let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
                let (off, len) = (
                    word(&at[..8]) % crate::meta::STRIPE,
                    word(&at[8..]) % (1 << 16),
                );
                let _ = crate::sse::sealed_range(off, len);
                let _ = key.open("data.b.t", 3, off, len, sealed);
            }
        }
        _ => {
            for scope in [crate::tags::Scope::Object, crate::tags::Scope::Bucket] {
                let _ = crate::tags::from_header(&text, scope);
            }
        }
    }
}

/// An anonymous request when the line says so.
fn words_user(req: &str) -> Option<&'static str> {
    (!req.contains("anonymous")).then_some("u1")
}

#[cfg(test)]
mod tests {
    /// The inputs kept in the fuzzer's corpus (`fuzz/corpus/gateway_parse`; the
    /// crashes it found among them, once fixed) that reach this crate run
    /// here too.
    #[test]
    fn the_fuzz_corpus_runs_clean() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/corpus/gateway_parse");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let input = std::fs::read(e.path()).unwrap_or_default();
            let Some((&which, bytes)) = input.split_first() else {
                continue;
            };
            super::parse(which, bytes);
            n += 1;
        }
        assert!(n > 0, "no corpus for this crate in {}", dir.display());
    }
}

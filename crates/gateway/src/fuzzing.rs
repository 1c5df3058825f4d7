//! Entry points for the fuzzers (`fuzz/`, target `gateway_parse`): what
//! the gateway parses itself, beyond s3s — bucket policies (parsed, then
//! evaluated against a request the input names), the SigV4
//! `Authorization` header, continuation tokens, retention dates, and the
//! version index's omap keys read back from the store. Each must answer
//! an error, never panic. Not an API.

use std::collections::BTreeMap;

/// Parses `bytes` as the input kind `which` picks; the result is dropped.
pub fn parse(which: u8, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    match which % 5 {
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
        _ => {
            let _ = crate::versions::parse_record(bytes);
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

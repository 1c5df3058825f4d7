//! The region a SigV4 request is signed for.
//!
//! Like radosgw, the gateway accepts a request signed for any region —
//! s3cmd's default configuration signs for `US` — unless
//! `gateway_region` names the one to enforce; then a request signed for
//! another is answered as AWS answers it: 400
//! `AuthorizationHeaderMalformed`, naming the expected region (clients
//! such as s3cmd read it and sign again).
//!
//! s3s refuses a region that is not `[a-z0-9-]+` (after checking the
//! signature), so a header-signed request for such a region (`US`) is
//! checked here, with the user's secret, and signed again for the same
//! region in lower case (`us`) before s3s sees it: s3s then checks the
//! new signature, and nothing else of the request changes. A request
//! whose payload is signed chunk by chunk (`STREAMING-...`) cannot be
//! signed again (each chunk's signature names the region): it is refused
//! with a message saying so.

use hmac::{Hmac, Mac};
use hyper::http::{HeaderValue, Request, header::AUTHORIZATION};
use sha2::{Digest, Sha256};

const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// A SigV4 `Authorization` header's parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    /// The access key.
    pub access_key: String,
    /// The credential scope's date (`YYYYMMDD`).
    pub date: String,
    /// The region the request is signed for, as the client wrote it.
    pub region: String,
    /// The service (`s3`).
    pub service: String,
    /// The signed headers' names, `;`-separated, as given.
    pub signed_headers: String,
    /// The signature (hex).
    pub signature: String,
}

impl Authorization {
    /// Parses `AWS4-HMAC-SHA256 Credential=AK/DATE/REGION/SERVICE/aws4_request,
    /// SignedHeaders=..., Signature=...`; `None` for anything else.
    pub fn parse(header: &str) -> Option<Authorization> {
        let rest = header.strip_prefix(ALGORITHM)?.trim_start();
        let (mut cred, mut signed, mut sig) = (None, None, None);
        for part in rest.split(',') {
            let (k, v) = part.trim().split_once('=')?;
            match k {
                "Credential" => cred = Some(v),
                "SignedHeaders" => signed = Some(v),
                "Signature" => sig = Some(v),
                _ => return None,
            }
        }
        let mut scope = cred?.rsplitn(5, '/');
        let terminator = scope.next()?;
        let service = scope.next()?;
        let region = scope.next()?;
        let date = scope.next()?;
        let access_key = scope.next()?;
        if terminator != "aws4_request" {
            return None;
        }
        Some(Authorization {
            access_key: access_key.to_string(),
            date: date.to_string(),
            region: region.to_string(),
            service: service.to_string(),
            signed_headers: signed?.to_string(),
            signature: sig?.to_string(),
        })
    }

    /// The header naming `region` and `signature` instead.
    fn with(&self, region: &str, signature: &str) -> String {
        format!(
            "{ALGORITHM} Credential={}/{}/{region}/{}/aws4_request, SignedHeaders={}, Signature={signature}",
            self.access_key, self.date, self.service, self.signed_headers
        )
    }
}

/// Whether s3s takes `region` as it is (`[a-z0-9-]+`).
pub fn s3s_takes(region: &str) -> bool {
    !region.is_empty()
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The region s3s is shown instead of one it would refuse: lower case,
/// anything else but digits and `-` as `-`.
pub fn takeable(region: &str) -> String {
    let r: String = region
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-') => c,
            _ => '-',
        })
        .collect();
    if r.is_empty() { "-".to_string() } else { r }
}

/// The region a request's signature names: its `Authorization` header's,
/// or a presigned URL's `X-Amz-Credential`.
pub fn signed_region<B>(req: &Request<B>) -> Option<String> {
    if let Some(a) = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(Authorization::parse)
    {
        return Some(a.region);
    }
    let cred = req
        .uri()
        .query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix("X-Amz-Credential="))?;
    let cred = percent_decode(cred)?;
    cred.rsplit('/').nth(2).map(str::to_string)
}

/// Why a request could not be signed again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resign {
    /// The signature does not match the request.
    Mismatch,
    /// The request lacks what its signature needs (a date, a payload hash).
    Malformed(String),
    /// Its payload is signed chunk by chunk.
    Streaming,
}

/// Checks `req`'s signature (for the region its header names) with
/// `secret`, and signs it again for [`takeable`] of that region.
pub fn resign<B>(req: &mut Request<B>, auth: &Authorization, secret: &str) -> Result<(), Resign> {
    let (when, canonicals) = canonical_requests(req, auth)?;
    let given = auth.signature.to_ascii_lowercase();
    let Some(canonical) = canonicals
        .iter()
        .find(|c| sign(auth, secret, &auth.region, &when, c) == given)
    else {
        return Err(Resign::Mismatch);
    };
    let region = takeable(&auth.region);
    let value = auth.with(&region, &sign(auth, secret, &region, &when, canonical));
    let value = HeaderValue::from_str(&value)
        .map_err(|_| Resign::Malformed("the authorization header".into()))?;
    req.headers_mut().insert(AUTHORIZATION, value);
    Ok(())
}

/// The request's date and its canonical request (SigV4's), with the path
/// encoded once as AWS says and, failing that, as sent (clients differ;
/// s3s tries both too).
fn canonical_requests<B>(
    req: &Request<B>,
    auth: &Authorization,
) -> Result<(String, [String; 2]), Resign> {
    let payload = header(req, "x-amz-content-sha256")
        .ok_or_else(|| Resign::Malformed("no x-amz-content-sha256 header".into()))?;
    if payload.starts_with("STREAMING-") {
        return Err(Resign::Streaming);
    }
    let when = header(req, "x-amz-date")
        .ok_or_else(|| Resign::Malformed("no x-amz-date header".into()))?;
    let mut headers = String::new();
    for n in auth.signed_headers.split(';') {
        let values: Vec<String> = req
            .headers()
            .get_all(n)
            .iter()
            .map(|v| collapse(&String::from_utf8_lossy(v.as_bytes())))
            .collect();
        if values.is_empty() {
            return Err(Resign::Malformed(format!("signed header {n} is missing")));
        }
        headers.push_str(&format!("{n}:{}\n", values.join(",")));
    }
    let query = canonical_query(req.uri().query().unwrap_or(""))
        .ok_or_else(|| Resign::Malformed("the query is not well encoded".into()))?;
    let raw = req.uri().path();
    let decoded = percent_decode(raw)
        .ok_or_else(|| Resign::Malformed("the path is not well encoded".into()))?;
    let method = req.method().as_str();
    let canonical = |path: &str| {
        format!(
            "{method}\n{path}\n{query}\n{headers}\n{}\n{payload}",
            auth.signed_headers
        )
    };
    Ok((
        when,
        [canonical(&uri_encode(&decoded, false)), canonical(raw)],
    ))
}

/// The signature of `canonical` at `when` for `region` with `secret`.
fn sign(auth: &Authorization, secret: &str, region: &str, when: &str, canonical: &str) -> String {
    let scope = format!("{}/{region}/{}/aws4_request", auth.date, auth.service);
    let to_sign = format!(
        "{ALGORITHM}\n{when}\n{scope}\n{}",
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let mut key = hmac(format!("AWS4{secret}").as_bytes(), auth.date.as_bytes());
    for part in [region, auth.service.as_str(), "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    hex(&hmac(&key, to_sign.as_bytes()))
}

fn header<B>(req: &Request<B>, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_string())
}

/// A header value as SigV4 signs it: trimmed, runs of spaces as one.
fn collapse(v: &str) -> String {
    v.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The query's parameters decoded, encoded again as SigV4 wants and sorted.
fn canonical_query(q: &str) -> Option<String> {
    let mut pairs = Vec::new();
    for kv in q.split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let k = percent_decode(&k.replace('+', " "))?;
        let v = percent_decode(&v.replace('+', " "))?;
        pairs.push((uri_encode(&k, true), uri_encode(&v, true)));
    }
    pairs.sort();
    Some(
        pairs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&"),
    )
}

/// SigV4's encoding: unreserved characters as they are, `/` too unless
/// `slash`, everything else `%XX`.
fn uri_encode(s: &str, slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char);
            }
            b'/' if !slash => out.push('/'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `%XX` sequences decoded; `None` when one is broken or the result is
/// not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(h, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes a key of any length.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The XML body of AWS's answer to a request signed for another region.
pub fn wrong_region_xml(got: &str, want: &str, request_id: &str) -> String {
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('\'', "&apos;")
            .replace('"', "&quot;")
    };
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AuthorizationHeaderMalformed</Code>\
         <Message>The authorization header is malformed; the region '{}' is wrong; expecting '{}'</Message>\
         <Region>{}</Region><RequestId>{request_id}</RequestId></Error>",
        esc(got),
        esc(want),
        esc(want)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's documented example (GET /test.txt with a Range header,
    /// "Examples: Signature Calculations in AWS Signature Version 4").
    fn example(region: &str, signature: &str) -> Request<()> {
        let auth = format!(
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/{region}/s3/aws4_request,\
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature={signature}"
        );
        Request::get("/test.txt")
            .header("host", "examplebucket.s3.amazonaws.com")
            .header("range", "bytes=0-9")
            .header(
                "x-amz-content-sha256",
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            )
            .header("x-amz-date", "20130524T000000Z")
            .header("authorization", auth)
            .body(())
            .unwrap()
    }

    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

    #[test]
    fn parses_the_header() {
        let r = example("us-east-1", "abc");
        let a = Authorization::parse(r.headers()["authorization"].to_str().unwrap()).unwrap();
        assert_eq!(a.access_key, "AKIAIOSFODNN7EXAMPLE");
        assert_eq!(a.region, "us-east-1");
        assert_eq!(
            a.signed_headers,
            "host;range;x-amz-content-sha256;x-amz-date"
        );
        assert_eq!(signed_region(&r).as_deref(), Some("us-east-1"));
        assert_eq!(Authorization::parse("AWS AK:sig"), None);
    }

    fn auth_of(r: &Request<()>) -> Authorization {
        Authorization::parse(r.headers()["authorization"].to_str().unwrap()).unwrap()
    }

    #[test]
    fn checks_and_resigns_as_aws_signs() {
        // The documented signature for us-east-1: checking it with the
        // same code that signs proves the canonical request is AWS's.
        let aws = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
        let mut r = example("us-east-1", aws);
        let a = auth_of(&r);
        resign(&mut r, &a, SECRET).unwrap();
        assert_eq!(auth_of(&r).signature, aws, "same region, same signature");

        let mut wrong = example("us-east-1", &"0".repeat(64));
        let w = auth_of(&wrong);
        assert_eq!(resign(&mut wrong, &w, SECRET), Err(Resign::Mismatch));
        let mut other_secret = example("us-east-1", aws);
        assert_eq!(resign(&mut other_secret, &a, "x"), Err(Resign::Mismatch));
    }

    #[test]
    fn a_region_s3s_refuses_is_signed_again_in_lower_case() {
        // Signed for "US" as s3cmd signs.
        let unsigned = example("US", "0");
        let u = auth_of(&unsigned);
        let (when, c) = canonical_requests(&unsigned, &u).unwrap();
        let us = sign(&u, SECRET, "US", &when, &c[0]);
        let mut r = example("US", &us);
        let a = auth_of(&r);
        resign(&mut r, &a, SECRET).unwrap();
        let b = auth_of(&r);
        assert_eq!(b.region, "us");
        assert_eq!(b.signature, sign(&b, SECRET, "us", &when, &c[0]));
        assert_ne!(b.signature, us);
        // A wrong signature for "US" is not signed again.
        let mut bad = example("US", &"1".repeat(64));
        let x = auth_of(&bad);
        assert_eq!(resign(&mut bad, &x, SECRET), Err(Resign::Mismatch));
        assert!(!s3s_takes("US") && s3s_takes("us-east-1") && !s3s_takes(""));
        assert_eq!(takeable("US"), "us");
        assert_eq!(takeable("eu_west.1"), "eu-west-1");
    }

    #[test]
    fn streaming_and_missing_headers_are_refused() {
        let mut r = example("US", "0");
        r.headers_mut().insert(
            "x-amz-content-sha256",
            HeaderValue::from_static("STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
        );
        let a = Authorization::parse(r.headers()["authorization"].to_str().unwrap()).unwrap();
        assert_eq!(resign(&mut r, &a, SECRET), Err(Resign::Streaming));
        r.headers_mut().remove("x-amz-content-sha256");
        assert!(matches!(
            resign(&mut r, &a, SECRET),
            Err(Resign::Malformed(_))
        ));
    }

    #[test]
    fn query_and_path_are_encoded_as_sigv4_wants() {
        assert_eq!(
            canonical_query("prefix=a%2Fb&delimiter=%2F&acl"),
            Some("acl=&delimiter=%2F&prefix=a%2Fb".into())
        );
        assert_eq!(uri_encode("/bucket/a b+c", false), "/bucket/a%20b%2Bc");
        assert_eq!(percent_decode("%zz"), None);
        assert!(wrong_region_xml("US", "us-east-1", "X").contains("<Region>us-east-1</Region>"));
    }
}

//! The S3 gateway: a stateless daemon that answers the S3 API (through
//! s3s, which parses and signs requests) with users, buckets, bucket
//! indexes and object data kept in the cluster (`meta`), so that any number
//! of gateways serve the same buckets. `serve` runs it on a listener.

pub mod acl;
pub mod cache;
pub mod checksum;
#[doc(hidden)]
pub mod fuzzing;
pub mod lock;
pub mod meta;
pub mod metrics;
pub mod policy;
pub mod region;
pub mod s3;
pub mod sse;
pub mod tags;
pub mod unsupported;
pub mod versions;

use std::net::SocketAddr;
use std::sync::Arc;

use s3s::auth::{S3Auth, SecretKey};
use s3s::service::S3ServiceBuilder;
use s3s::{S3Result, s3_error};

pub use meta::{Meta, MetaError, User};
pub use s3::Gateway;

/// Secrets from the users' records in the cluster.
#[derive(Debug, Clone)]
struct ClusterAuth {
    meta: Meta,
}

#[async_trait::async_trait]
impl S3Auth for ClusterAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        secret_of(&self.meta, access_key).await.map(SecretKey::from)
    }
}

/// The secret of `access_key`, from its user's record.
async fn secret_of(meta: &Meta, access_key: &str) -> S3Result<String> {
    let user = meta
        .user_by_key(access_key)
        .await
        .map_err(|e| s3_error!(InternalError, "{e}"))?
        .ok_or_else(|| s3_error!(InvalidAccessKeyId))?;
    user.keys
        .iter()
        .find(|k| k.access_key == access_key)
        .map(|k| k.secret_key.clone())
        .ok_or_else(|| s3_error!(InvalidAccessKeyId))
}

/// Every request passes s3s's access step: what the gateway does not do is
/// refused there, and the bucket's policy, if it has one, is evaluated:
/// an explicit Deny refuses the request, an Allow is marked on it for the
/// operation ([`s3::PolicyAllows`]); otherwise the operations decide from
/// the signer and the bucket's owner and canned ACLs.
#[derive(Debug, Clone)]
struct OpsDecide {
    meta: Meta,
}

#[async_trait::async_trait]
impl s3s::access::S3Access for OpsDecide {
    async fn check(&self, cx: &mut s3s::access::S3AccessContext<'_>) -> S3Result<()> {
        let op = cx.s3_op().name().to_string();
        let op = op.as_str();
        metrics::set_operation(op);
        // The two that carry data check for themselves, once they can
        // drain the body they refuse (the connection stays in step).
        if !matches!(op, "PutObject" | "UploadPart") {
            unsupported::check(op, cx.headers())?;
        }
        let (bucket, key) = match cx.s3_path() {
            s3s::path::S3Path::Root => return Ok(()),
            s3s::path::S3Path::Bucket { bucket } => (bucket.to_string(), None),
            s3s::path::S3Path::Object { bucket, key } => {
                (bucket.to_string(), Some(key.to_string()))
            }
        };
        let internal = |e: meta::MetaError| s3_error!(InternalError, "{e}");
        // (A missing bucket is the operation's to answer.)
        let Some(b) = self.meta.bucket(&bucket).await.map_err(internal)? else {
            return Ok(());
        };
        if b.policy.is_empty() {
            return Ok(());
        }
        let user = match cx.credentials() {
            Some(c) => self
                .meta
                .user_by_key(&c.access_key)
                .await
                .map_err(internal)?,
            None => None,
        };
        let vid = s3::query_pairs(cx.uri().query().unwrap_or(""))
            .into_iter()
            .find(|(k, _)| k == "versionId")
            .map(|(_, v)| v);
        let action = policy::action_of(op, vid.is_some());
        let origin = cx.extensions_mut().get::<s3::Origin>().copied();
        let ctx = s3::policy_context(cx.uri(), cx.headers(), origin.as_ref(), user.as_ref());
        let decision = s3::decide(
            &self.meta,
            &b,
            user.as_ref(),
            &action,
            key.as_deref(),
            vid.as_deref(),
            ctx,
        )
        .await?;
        let owner = user.as_ref().is_some_and(|u| u.uid == b.owner);
        match decision {
            // The owner may always mend the policy that locks it out.
            policy::Decision::Deny if !(owner && op.ends_with("BucketPolicy")) => Err(s3_error!(
                AccessDenied,
                "a bucket policy denies {action} on {}",
                b.name
            )),
            policy::Decision::Allow => {
                cx.extensions_mut().insert(s3::PolicyAllows { bucket, key });
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// Serves the S3 API over `meta`'s records on `listener` until the task
/// is dropped: HTTP/1.1 with keep-alive (HTTPS with `tls`), one task per
/// connection.
pub async fn serve(
    listener: tokio::net::TcpListener,
    meta: Meta,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> std::io::Result<()> {
    serve_counted(
        listener,
        meta,
        tls,
        Arc::new(metrics::Metrics::default()),
        Options::default(),
    )
    .await
}

/// How a gateway serves, beyond where.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Only requests signed for this region are taken (none: any).
    pub region: Option<String>,
    /// SSE-C requests are taken over plain HTTP (AWS refuses them: the
    /// key would cross the network in the clear); for tests on loopback.
    pub sse_c_over_http: bool,
}

/// [`serve`], counting every request in `counters` (for the manager),
/// as `opts` say.
pub async fn serve_counted(
    listener: tokio::net::TcpListener,
    meta: Meta,
    tls: Option<tokio_rustls::TlsAcceptor>,
    counters: Arc<metrics::Metrics>,
    opts: Options,
) -> std::io::Result<()> {
    let mut b = S3ServiceBuilder::new(Gateway::new(meta.clone(), opts.sse_c_over_http));
    let signing = Arc::new(Signing {
        meta: meta.clone(),
        region: opts.region,
    });
    b.set_access(OpsDecide { meta: meta.clone() });
    b.set_auth(ClusterAuth { meta });
    b.set_validation(BucketNames);
    let service = Arc::new(b.build());
    loop {
        let (stream, peer) = listener.accept().await?;
        // A reply's head and body go out at once, not 40 ms apart (Nagle
        // waiting on the client's delayed ACK).
        let _ = stream.set_nodelay(true);
        let service = s3s::service::S3Service::clone(&service);
        let tls = tls.clone();
        let counters = Arc::clone(&counters);
        let signing = Arc::clone(&signing);
        tokio::spawn(async move {
            let origin = |tls| s3::Origin { peer, tls };
            let r = match tls {
                None => serve_conn(stream, service, counters, signing, origin(false)).await,
                Some(t) => match t.accept(stream).await {
                    Ok(s) => serve_conn(s, service, counters, signing, origin(true)).await,
                    Err(e) => Err(e.to_string()),
                },
            };
            if let Err(e) = r {
                tracing::debug!(%peer, "connection ended: {e}");
            }
        });
    }
}

async fn serve_conn<IO>(
    io: IO,
    service: s3s::service::S3Service,
    counters: Arc<metrics::Metrics>,
    signing: Arc<Signing>,
    origin: s3::Origin,
) -> Result<(), String>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service =
        hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(origin);
            let service = service.clone();
            let counters = Arc::clone(&counters);
            let signing = Arc::clone(&signing);
            let started = std::time::Instant::now();
            let op = std::cell::RefCell::new(None);
            metrics::OPERATION.scope(op, async move {
                let resp = answer(service, req, &signing).await;
                let status = match &resp {
                    Ok(r) => r.status().as_u16(),
                    Err(_) => 500,
                };
                let op = metrics::OPERATION
                    .try_with(|o| o.borrow().clone())
                    .ok()
                    .flatten();
                counters.record(
                    op.as_deref().unwrap_or("Unknown"),
                    status,
                    started.elapsed(),
                );
                resp
            })
        });
    hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(hyper_util::rt::TokioIo::new(io), service)
        .await
        .map_err(|e| e.to_string())
}

/// One request's answer from s3s, with the gateway's own touches.
async fn answer(
    service: s3s::service::S3Service,
    mut req: hyper::Request<hyper::body::Incoming>,
    signing: &Signing,
) -> Result<hyper::Response<s3s::Body>, s3s::HttpError> {
    let id = meta::random_hex(8).to_uppercase();
    let refused = match bad_presign_expiry(req.uri().query()) {
        Some(e) => Some(Refusal::S3(e)),
        None => signing.check(&mut req).await.err(),
    };
    if let Some(r) = refused {
        let resp = match r {
            Refusal::WrongRegion { got, want } => {
                let body = region::wrong_region_xml(&got, &want, &id);
                let mut resp = hyper::Response::new(s3s::Body::from(body));
                *resp.status_mut() = hyper::http::StatusCode::BAD_REQUEST;
                resp.headers_mut().insert(
                    hyper::http::header::CONTENT_TYPE,
                    hyper::http::HeaderValue::from_static("application/xml"),
                );
                resp
            }
            Refusal::S3(e) => e.to_http_response().map_err(|e| {
                s3s::HttpError::new(Box::new(std::io::Error::other(format!("{e:?}"))))
            })?,
        };
        // The body was not read: the connection cannot be reused.
        let mut resp = with_request_id(resp, &id);
        resp.headers_mut().insert(
            hyper::http::header::CONNECTION,
            hyper::http::HeaderValue::from_static("close"),
        );
        return Ok(resp);
    }
    let attributes = req.method() == hyper::Method::GET
        && req.uri().query().is_some_and(|q| {
            q.split('&')
                .any(|kv| kv == "attributes" || kv == "attributes=")
        });
    let waits = waits_for_continue(req.headers());
    let mut resp = service.call(req.map(s3s::Body::from)).await?;
    if attributes {
        resp = unquoted_etag(resp);
    }
    if waits && !resp.status().is_success() {
        // Refused before its body was asked for: the client may or
        // may not send it now, so the connection cannot be read
        // in step again. Say it closes, so that no client reuses
        // it (botocore, reusing one the server then closes, takes
        // the stale early answer for the next request's).
        resp.headers_mut().insert(
            hyper::http::header::CONNECTION,
            hyper::http::HeaderValue::from_static("close"),
        );
    }
    Ok(with_request_id(resp, &id))
}

/// The region requests are signed for, checked before s3s sees them
/// (`region.rs`): one to enforce, or any, signed again where s3s would
/// refuse the region's spelling.
#[derive(Debug)]
struct Signing {
    meta: Meta,
    region: Option<String>,
}

/// Why a request is answered before s3s sees it.
#[derive(Debug)]
enum Refusal {
    S3(s3s::S3Error),
    /// Signed for `got` where the gateway enforces `want`.
    WrongRegion {
        got: String,
        want: String,
    },
}

impl From<s3s::S3Error> for Refusal {
    fn from(e: s3s::S3Error) -> Self {
        Refusal::S3(e)
    }
}

impl Signing {
    async fn check<B>(&self, req: &mut hyper::Request<B>) -> Result<(), Refusal> {
        let Some(got) = region::signed_region(req) else {
            return Ok(());
        };
        if let Some(want) = &self.region
            && &got != want
        {
            return Err(Refusal::WrongRegion {
                got,
                want: want.clone(),
            });
        }
        if region::s3s_takes(&got) {
            return Ok(());
        }
        let Some(auth) = req
            .headers()
            .get(hyper::http::header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(region::Authorization::parse)
        else {
            return Err(Refusal::S3(s3_error!(
                AuthorizationQueryParametersError,
                "a presigned URL's region must be lower-case letters, digits and '-', not {got:?}"
            )));
        };
        let secret = secret_of(&self.meta, &auth.access_key).await?;
        region::resign(req, &auth, &secret).map_err(|e| {
            Refusal::S3(match e {
                region::Resign::Mismatch => s3_error!(SignatureDoesNotMatch),
                region::Resign::Malformed(m) => s3_error!(AccessDenied, "{m}"),
                region::Resign::Streaming => s3_error!(
                    NotImplemented,
                    "a streaming (chunk-signed) upload signed for region {got:?}: \
                     sign for a region of lower-case letters, digits and '-'"
                ),
            })
        })
    }
}

/// Whether a request carries a body its client sends only on `100 Continue`.
fn waits_for_continue(h: &hyper::http::HeaderMap) -> bool {
    let expects = h
        .get(hyper::http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let empty = h
        .get(hyper::http::header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() == b"0");
    expects && !empty
}

/// Names the request in its answer, as S3 does: the `x-amz-request-id`
/// (and `x-amz-id-2`) header, and an error's `<RequestId>`.
fn with_request_id(mut resp: s3s::HttpResponse, id: &str) -> s3s::HttpResponse {
    use hyper::http::{HeaderValue, header::CONTENT_LENGTH};
    if let Ok(v) = HeaderValue::from_str(id) {
        resp.headers_mut().insert("x-amz-request-id", v.clone());
        resp.headers_mut().insert("x-amz-id-2", v);
    }
    if resp.status().as_u16() < 300 {
        return resp;
    }
    let Some(body) = resp.body().bytes() else {
        return resp;
    };
    let close = b"</Error>";
    let at = body.windows(close.len()).rposition(|w| w == close);
    let has = body.windows(11).any(|w| w == b"<RequestId>");
    if let (Some(at), false) = (at, has) {
        let mut out = Vec::with_capacity(body.len() + 64);
        out.extend_from_slice(&body[..at]);
        out.extend_from_slice(format!("<RequestId>{id}</RequestId>").as_bytes());
        out.extend_from_slice(&body[at..]);
        if resp.headers().contains_key(CONTENT_LENGTH) {
            resp.headers_mut()
                .insert(CONTENT_LENGTH, HeaderValue::from(out.len()));
        }
        *resp.body_mut() = s3s::Body::from(out);
    }
    resp
}

/// Where `shoal gateway` listens unless told otherwise.
pub fn default_bind() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7480))
}

/// GetObjectAttributes answers its ETag without quotes (as AWS does; s3s
/// writes every XML ETag quoted).
fn unquoted_etag(mut resp: s3s::HttpResponse) -> s3s::HttpResponse {
    use hyper::http::{HeaderValue, header::CONTENT_LENGTH};
    if !resp.status().is_success() {
        return resp;
    }
    let Some(body) = resp.body().bytes() else {
        return resp;
    };
    let Ok(text) = std::str::from_utf8(&body) else {
        return resp;
    };
    let (open, close) = ("<ETag>\"", "\"</ETag>");
    let (Some(a), Some(b)) = (text.find(open), text.find(close)) else {
        return resp;
    };
    if b < a {
        return resp;
    }
    let out = format!(
        "{}<ETag>{}</ETag>{}",
        &text[..a],
        &text[a + open.len()..b],
        &text[b + close.len()..]
    );
    if resp.headers().contains_key(CONTENT_LENGTH) {
        resp.headers_mut()
            .insert(CONTENT_LENGTH, HeaderValue::from(out.len()));
    }
    *resp.body_mut() = s3s::Body::from(out);
    resp
}

/// A presigned URL lives at most seven days (AWS's limit); a negative or
/// longer `X-Amz-Expires` is refused as AWS refuses it.
fn bad_presign_expiry(query: Option<&str>) -> Option<s3s::S3Error> {
    let v = query?
        .split('&')
        .find_map(|kv| kv.strip_prefix("X-Amz-Expires="))?;
    match v.parse::<i64>() {
        Ok(n) if (1..=604_800).contains(&n) => None,
        _ => Some(s3_error!(
            AccessDenied,
            "X-Amz-Expires must be 1 to 604800 seconds (seven days), not {v}"
        )),
    }
}

/// Bucket names as AWS allows them: 3-63 of lower-case letters, digits,
/// dots and hyphens, beginning and ending with a letter or digit, no two
/// dots or a dot beside a hyphen, not an IP address.
#[derive(Debug, Clone, Copy)]
struct BucketNames;

impl s3s::validation::NameValidation for BucketNames {
    fn validate_bucket_name(&self, name: &str) -> bool {
        valid_bucket_name(name)
    }
}

/// Whether `name` is a bucket name AWS allows: 3-63 of lower-case letters,
/// digits, dots and hyphens, beginning and ending with a letter or digit,
/// no two dots or a dot beside a hyphen, not an IP address.
pub fn valid_bucket_name(name: &str) -> bool {
    let b = name.as_bytes();
    let edge = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    (3..=63).contains(&b.len())
        && b.iter().all(|&c| edge(c) || c == b'.' || c == b'-')
        && b.first().is_some_and(|&c| edge(c))
        && b.last().is_some_and(|&c| edge(c))
        && !name.contains("..")
        && !name.contains(".-")
        && !name.contains("-.")
        && name.parse::<std::net::Ipv4Addr>().is_err()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names_and_presign_expiry() {
        for ok in ["abc", "my-bucket.2", "a1b"] {
            assert!(valid_bucket_name(ok), "{ok}");
        }
        for bad in [
            "ab",
            "Abc",
            "foo-.bar",
            "foo.-bar",
            "a..b",
            "-ab",
            "ab-",
            "192.168.5.4",
            "a_b",
        ] {
            assert!(!valid_bucket_name(bad), "{bad}");
        }
        assert!(bad_presign_expiry(Some("X-Amz-Expires=300&X-Amz-Date=x")).is_none());
        assert!(bad_presign_expiry(Some("a=b")).is_none());
        assert!(bad_presign_expiry(None).is_none());
        for q in [
            "X-Amz-Expires=-1",
            "X-Amz-Expires=609901",
            "X-Amz-Expires=zz",
        ] {
            assert!(bad_presign_expiry(Some(q)).is_some(), "{q}");
        }
    }
}

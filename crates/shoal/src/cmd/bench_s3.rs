//! `shoal bench s3`: an S3 load generator (BENCHMARKS.md's S1) that
//! measures the gateway rather than the client: PUTs, then GETs, then
//! DELETEs of `--count` objects of `--size` bytes with `--threads`
//! requests in flight, each on its own keep-alive connection, signed with
//! SigV4 (unsigned payload); objects of `--multipart-threshold` or more go
//! up in parts. It runs against any S3 endpoint — `shoal gateway` or
//! radosgw — so both are measured by the same client in the same run.
//! Each phase reports operations and bytes per second, latency
//! percentiles, the client's CPU and, given its pid, the gateway's.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::client::conn::http1::SendRequest;
use tokio::net::TcpStream;

use super::bench_rados::{cpu_seconds_of, parse_size};
use super::common::Format;

/// Options of `shoal bench s3`.
#[derive(Debug, Args)]
pub struct S3BenchArgs {
    /// The endpoint, http://HOST:PORT (default: the gateway of `--dev`).
    #[arg(long)]
    endpoint: Option<String>,
    /// A `shoal dev` cluster's directory: its gateway's endpoint, user and
    /// pid (for the gateway's CPU per operation).
    #[arg(long)]
    dev: Option<PathBuf>,
    /// Access key (default: $AWS_ACCESS_KEY_ID, or the dev user's).
    #[arg(long, env = "AWS_ACCESS_KEY_ID", hide_env_values = true)]
    access_key: Option<String>,
    /// Secret key (default: $AWS_SECRET_ACCESS_KEY, or the dev user's).
    #[arg(long, env = "AWS_SECRET_ACCESS_KEY", hide_env_values = true)]
    secret_key: Option<String>,
    /// Object size: 4K, 4M, 64M, ...
    #[arg(long, default_value = "4K")]
    size: String,
    /// Objects written, read and deleted.
    #[arg(long, default_value_t = 2000)]
    count: u64,
    /// Requests in flight (one connection each).
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Objects this large or larger go up as multipart uploads.
    #[arg(long, default_value = "16M")]
    multipart_threshold: String,
    /// Part size of multipart uploads.
    #[arg(long, default_value = "8M")]
    part_size: String,
    /// The bucket (created if missing, removed at the end).
    #[arg(long, default_value = "shoal-bench-s3")]
    bucket: String,
    /// The region the signatures name.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// The gateway's pid, for its CPU per operation.
    #[arg(long)]
    gateway_pid: Option<u32>,
    /// Output format.
    #[arg(long, value_enum, default_value = "plain")]
    format: Format,
}

/// Where and as whom requests go.
#[derive(Debug, Clone)]
struct Target {
    host: String,
    access_key: String,
    secret_key: String,
    region: String,
}

/// Runs `shoal bench s3`.
pub fn run(a: S3BenchArgs) -> anyhow::Result<()> {
    let (mut endpoint, mut keys, mut pid) = (a.endpoint.clone(), None, a.gateway_pid);
    if let Some(dir) = &a.dev {
        let addr = std::fs::read_to_string(dir.join("gateway/addr")).with_context(|| {
            format!(
                "{}: no gateway address (is it a dev cluster?)",
                dir.display()
            )
        })?;
        endpoint.get_or_insert(format!("http://{}", addr.trim()));
        let user: shoal_gateway::User = serde_json::from_slice(
            &std::fs::read(dir.join("gateway/user.json")).context("the dev user's keys")?,
        )
        .context("the dev user's keys")?;
        keys = user
            .keys
            .into_iter()
            .next()
            .map(|k| (k.access_key, k.secret_key));
        if pid.is_none() {
            pid = std::fs::read_to_string(dir.join("run/gateway.pid"))
                .ok()
                .and_then(|p| p.trim().parse().ok());
        }
    }
    let endpoint = endpoint.context("give --endpoint or --dev")?;
    let host = endpoint
        .strip_prefix("http://")
        .with_context(|| format!("{endpoint}: only http:// endpoints"))?
        .trim_end_matches('/')
        .to_string();
    let (access_key, secret_key) = match (a.access_key.clone(), a.secret_key.clone(), keys) {
        (Some(k), Some(s), _) => (k, s),
        (_, _, Some(ks)) => ks,
        _ => bail!("give --access-key and --secret-key (or --dev)"),
    };
    let target = Arc::new(Target {
        host,
        access_key,
        secret_key,
        region: a.region.clone(),
    });
    let size = parse_size(&a.size)?;
    let threshold = parse_size(&a.multipart_threshold)?;
    let part = parse_size(&a.part_size)?.max(5 << 20);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(bench(a, target, size, threshold, part, pid))
}

/// One phase's figures.
#[derive(Debug, Clone)]
struct Phase {
    op: &'static str,
    ops: u64,
    seconds: f64,
    ops_per_s: f64,
    mb_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    client_cpu_us_per_op: f64,
    gateway_cpu_us_per_op: Option<f64>,
}

async fn bench(
    a: S3BenchArgs,
    t: Arc<Target>,
    size: usize,
    threshold: usize,
    part: usize,
    pid: Option<u32>,
) -> anyhow::Result<()> {
    let mut c = connect(&t.host).await?;
    let r = send(
        &mut c,
        &t,
        "PUT",
        &format!("/{}", a.bucket),
        "",
        Bytes::new(),
    )
    .await?;
    if !(r.0.is_success() || r.1.contains("BucketAlreadyOwnedByYou")) {
        bail!("creating bucket {}: {} {}", a.bucket, r.0, r.1);
    }
    let data = Bytes::from((0..size).map(|i| (i * 7 + 13) as u8).collect::<Vec<u8>>());
    let mut phases = Vec::new();
    for op in ["PUT", "GET", "DELETE"] {
        let gw0 = pid.map(|p| cpu_seconds_of(&p.to_string()));
        let cpu0 = cpu_seconds_of("self");
        let started = Instant::now();
        let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut tasks = Vec::new();
        for _ in 0..a.threads.max(1) {
            let (t, next, data, bucket, count) = (
                t.clone(),
                next.clone(),
                data.clone(),
                a.bucket.clone(),
                a.count,
            );
            tasks.push(tokio::spawn(async move {
                let mut conn = connect(&t.host).await?;
                let mut lats = Vec::new();
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= count {
                        return anyhow::Ok(lats);
                    }
                    let path = format!("/{bucket}/obj-{i:08}");
                    let t0 = Instant::now();
                    match op {
                        "PUT" if data.len() >= threshold => {
                            multipart(&mut conn, &t, &path, &data, part).await?
                        }
                        "PUT" => expect(
                            send(&mut conn, &t, op, &path, "", data.clone()).await?,
                            &path,
                        )?,
                        "GET" => {
                            let n = get(&mut conn, &t, &path).await?;
                            if n != data.len() as u64 {
                                bail!("GET {path}: {n} bytes, not {}", data.len());
                            }
                        }
                        _ => expect(
                            send(&mut conn, &t, op, &path, "", Bytes::new()).await?,
                            &path,
                        )?,
                    }
                    lats.push(t0.elapsed().as_secs_f64());
                }
            }));
        }
        let mut lats = Vec::new();
        for task in tasks {
            lats.extend(task.await??);
        }
        let seconds = started.elapsed().as_secs_f64();
        let n = lats.len() as u64;
        lats.sort_by(f64::total_cmp);
        let pct = |q: f64| super::units::percentile(&lats, q) * 1e3;
        let per_op = |s: f64| s / n.max(1) as f64 * 1e6;
        let moved = if op == "DELETE" {
            0.0
        } else {
            (n as f64) * size as f64
        };
        phases.push(Phase {
            op,
            ops: n,
            seconds,
            ops_per_s: n as f64 / seconds,
            mb_per_s: moved / seconds / 1e6,
            p50_ms: pct(0.50),
            p99_ms: pct(0.99),
            client_cpu_us_per_op: per_op(cpu_seconds_of("self") - cpu0),
            gateway_cpu_us_per_op: pid
                .zip(gw0)
                .map(|(p, g0)| per_op(cpu_seconds_of(&p.to_string()) - g0)),
        });
    }
    let r = send(
        &mut c,
        &t,
        "DELETE",
        &format!("/{}", a.bucket),
        "",
        Bytes::new(),
    )
    .await?;
    if !r.0.is_success() {
        eprintln!("removing bucket {}: {} {}", a.bucket, r.0, r.1);
    }
    match a.format {
        Format::Json => {
            let rows: Vec<serde_json::Value> = phases
                .iter()
                .map(|p| {
                    serde_json::json!({
                        "op": p.op, "ops": p.ops, "seconds": p.seconds,
                        "ops_per_s": p.ops_per_s, "mb_per_s": p.mb_per_s,
                        "p50_ms": p.p50_ms, "p99_ms": p.p99_ms,
                        "client_cpu_us_per_op": p.client_cpu_us_per_op,
                        "gateway_cpu_us_per_op": p.gateway_cpu_us_per_op,
                    })
                })
                .collect();
            outln!("{}", serde_json::to_string_pretty(&rows)?);
        }
        Format::Plain => {
            outln!(
                "S3 {} objects of {} bytes, {} in flight, http://{}",
                a.count,
                size,
                a.threads,
                t.host
            );
            outln!(
                "{:<7} {:>9} {:>10} {:>9} {:>9} {:>9} {:>14} {:>15}",
                "op",
                "ops/s",
                "MB/s",
                "p50 ms",
                "p99 ms",
                "seconds",
                "client us/op",
                "gateway us/op"
            );
            for p in &phases {
                outln!(
                    "{:<7} {:>9.0} {:>10.1} {:>9.2} {:>9.2} {:>9.2} {:>14.0} {:>15}",
                    p.op,
                    p.ops_per_s,
                    p.mb_per_s,
                    p.p50_ms,
                    p.p99_ms,
                    p.seconds,
                    p.client_cpu_us_per_op,
                    p.gateway_cpu_us_per_op
                        .map_or("-".into(), |g| format!("{g:.0}"))
                );
            }
        }
    }
    Ok(())
}

type Conn = SendRequest<Full<Bytes>>;

async fn connect(host: &str) -> anyhow::Result<Conn> {
    let s = TcpStream::connect(host)
        .await
        .with_context(|| format!("connecting to {host}"))?;
    s.set_nodelay(true)?;
    let (send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(s)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}

fn expect(r: (hyper::StatusCode, String), what: &str) -> anyhow::Result<()> {
    if r.0.is_success() {
        Ok(())
    } else {
        bail!("{what}: {} {}", r.0, r.1)
    }
}

/// Sends a signed request; its status and body (as text).
async fn send(
    c: &mut Conn,
    t: &Target,
    method: &str,
    path: &str,
    query: &str,
    body: Bytes,
) -> anyhow::Result<(hyper::StatusCode, String)> {
    let resp = c
        .send_request(signed(t, method, path, query, body)?)
        .await?;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// A GET whose body is counted, not kept.
async fn get(c: &mut Conn, t: &Target, path: &str) -> anyhow::Result<u64> {
    let resp = c
        .send_request(signed(t, "GET", path, "", Bytes::new())?)
        .await?;
    let status = resp.status();
    let mut body = resp.into_body();
    let mut n = 0u64;
    while let Some(f) = body.frame().await {
        if let Ok(d) = f?.into_data() {
            n += d.len() as u64;
        }
    }
    if !status.is_success() {
        bail!("GET {path}: {status}");
    }
    Ok(n)
}

/// Uploads `data` to `path` in parts of `part` bytes.
async fn multipart(
    c: &mut Conn,
    t: &Target,
    path: &str,
    data: &Bytes,
    part: usize,
) -> anyhow::Result<()> {
    let r = send(c, t, "POST", path, "uploads=", Bytes::new()).await?;
    expect(r.clone(), path)?;
    let id = between(&r.1, "<UploadId>", "</UploadId>")
        .with_context(|| format!("{path}: no UploadId in {}", r.1))?;
    let mut xml = String::from("<CompleteMultipartUpload>");
    for (i, chunk) in data.chunks(part).enumerate() {
        let n = i + 1;
        let q = format!("partNumber={n}&uploadId={id}");
        let start = i * part;
        let req = signed(t, "PUT", path, &q, data.slice(start..start + chunk.len()))?;
        let resp = c.send_request(req).await?;
        let status = resp.status();
        let etag = resp
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let _ = resp.into_body().collect().await?;
        if !status.is_success() {
            bail!("{path} part {n}: {status}");
        }
        xml.push_str(&format!(
            "<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag></Part>"
        ));
    }
    xml.push_str("</CompleteMultipartUpload>");
    let r = send(
        c,
        t,
        "POST",
        path,
        &format!("uploadId={id}"),
        Bytes::from(xml),
    )
    .await?;
    if r.1.contains("<Error>") {
        bail!("{path}: completing: {}", r.1);
    }
    expect(r, path)
}

fn between(s: &str, a: &str, b: &str) -> Option<String> {
    let from = s.find(a)? + a.len();
    let to = from + s[from..].find(b)?;
    Some(s[from..to].to_string())
}

/// A request signed with AWS Signature Version 4 (header form, unsigned
/// payload). `query` is already canonical: sorted, encoded, `k=v&...`.
fn signed(
    t: &Target,
    method: &str,
    path: &str,
    query: &str,
    body: Bytes,
) -> anyhow::Result<Request<Full<Bytes>>> {
    use sha2::Digest;
    let now = time_now();
    let date = &now[..8];
    let payload = "UNSIGNED-PAYLOAD";
    let canonical = format!(
        "{method}\n{path}\n{query}\nhost:{}\nx-amz-content-sha256:{payload}\nx-amz-date:{now}\n\nhost;x-amz-content-sha256;x-amz-date\n{payload}",
        t.host
    );
    let scope = format!("{date}/{}/s3/aws4_request", t.region);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{now}\n{scope}\n{}",
        hex(&sha2::Sha256::digest(canonical.as_bytes()))
    );
    let mut key = hmac(format!("AWS4{}", t.secret_key).as_bytes(), date.as_bytes());
    for part in [t.region.as_str(), "s3", "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    let signature = hex(&hmac(&key, to_sign.as_bytes()));
    let uri = match query {
        "" => path.to_string(),
        q => format!("{path}?{q}"),
    };
    Ok(Request::builder()
        .method(method)
        .uri(uri)
        .header("host", &t.host)
        .header("x-amz-date", &now)
        .header("x-amz-content-sha256", payload)
        .header(
            "authorization",
            format!(
                "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={signature}",
                t.access_key
            ),
        )
        .header("content-length", body.len())
        .body(Full::new(body))?)
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    use hmac::Mac;
    // An HMAC takes a key of any length: new_from_slice cannot fail.
    let Ok(mut m) = hmac::Hmac::<sha2::Sha256>::new_from_slice(key) else {
        return Vec::new();
    };
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The time now as SigV4 writes it: `YYYYMMDDTHHMMSSZ`.
fn time_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    let (y, m, d, hh, mm, ss) = super::rados::civil(secs);
    format!("{y:04}{m:02}{d:02}T{hh:02}{mm:02}{ss:02}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigv4_dates() {
        let t = time_now();
        assert_eq!(t.len(), 16);
        assert_eq!(&t[8..9], "T");
        assert!(t.starts_with("20"));
        assert_eq!(
            between("<a><UploadId>x1</UploadId>", "<UploadId>", "</UploadId>").as_deref(),
            Some("x1")
        );
    }
}

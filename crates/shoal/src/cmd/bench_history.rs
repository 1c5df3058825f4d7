//! `shoal bench history -p POOL SECONDS`: a workload that keeps the
//! history of what the cluster acknowledged and checks every read against
//! it, for fault tests (hosts killed, cut off, restarted) where the
//! question is not how fast but whether anything acknowledged was lost.
//!
//! Workers each own a disjoint set of objects and, one op at a time per
//! worker, write an object's next version in full or read one back. Every
//! version's bytes are derived from (object, version), so a read tells
//! exactly which version it returned and whether its bytes are whole. The
//! rules ([`History`], pure): a read returns at least the newest
//! acknowledged version of its object and at least what an earlier read
//! returned (no acknowledged write lost, nothing goes back in time), at
//! most the newest version attempted (nothing invented), with intact
//! bytes; an object with an acknowledged version is never missing. A
//! write that failed (timed out, say) may or may not have happened, so
//! either answer is allowed for it. After the run every object is read
//! once more under the same rules. The report adds what a client felt:
//! write latency percentiles, the longest time with no op succeeding, and
//! the longest run of failures.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use bytes::Bytes;
use clap::Args;

use super::common::Format;
use super::units::percentile;

/// Options of `shoal bench history`.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// How long the workload runs, seconds (then the final check).
    pub seconds: u64,
    /// Objects written and read.
    #[arg(long, default_value_t = 64)]
    objects: usize,
    /// Workers (each with its own objects, one op at a time).
    #[arg(short = 't', long = "workers", default_value_t = 8)]
    workers: usize,
    /// Bytes per object version.
    #[arg(short = 'b', long = "block-size", default_value_t = 4096)]
    size: usize,
    /// Name prefix of the objects.
    #[arg(long, default_value = "history")]
    prefix: String,
    /// How long the final check may retry a read that fails (the cluster
    /// may still be healing when the run ends), seconds.
    #[arg(long, default_value_t = 120)]
    settle: u64,
    /// End the run early once this file exists (for a fault of unknown
    /// length: a rolling restart).
    #[arg(long)]
    stop_file: Option<std::path::PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "plain")]
    format: Format,
}

/// The bytes of `version` of object `name`: a header naming both, then
/// filler that depends on them, so any mix-up or damage shows.
pub fn payload(name: &str, version: u64, size: usize) -> Vec<u8> {
    let mut out = format!("shoal-history {name} {version}\n").into_bytes();
    let keep = size.max(out.len());
    let mut x = fnv(name.as_bytes()) ^ version.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    while out.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(keep);
    out
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, c| {
        (h ^ u64::from(*c)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The version a read's bytes hold, or why they are not a version of
/// `name` at all.
pub fn decode(name: &str, data: &[u8], size: usize) -> Result<u64, String> {
    let header_end = data.iter().position(|b| *b == b'\n').unwrap_or(data.len());
    let header = std::str::from_utf8(&data[..header_end]).map_err(|_| "no header".to_string())?;
    let mut words = header.split(' ');
    let (Some("shoal-history"), Some(n), Some(v), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(format!("bad header {header:?}"));
    };
    if n != name {
        return Err(format!("holds object {n}'s bytes"));
    }
    let version: u64 = v.parse().map_err(|_| format!("bad version {v:?}"))?;
    if data != payload(name, version, size).as_slice() {
        return Err(format!(
            "version {version}'s bytes are damaged ({} bytes)",
            data.len()
        ));
    }
    Ok(version)
}

/// What is known of one object.
#[derive(Debug, Default, Clone)]
struct Object {
    /// The newest version acknowledged.
    acked: u64,
    /// The newest version attempted (acknowledged or not).
    attempted: u64,
    /// The newest version a read returned.
    seen: u64,
}

/// The history of acknowledged writes and the reads checked against it
/// (pure: ops are fed in the order they completed, and an object's ops
/// never overlap, as one worker owns it).
#[derive(Debug, Default)]
pub struct History {
    objects: BTreeMap<String, Object>,
    /// Every rule broken, in words.
    pub violations: Vec<String>,
}

/// What a read found.
#[derive(Debug)]
pub enum ReadResult {
    /// The object's bytes.
    Data(Bytes),
    /// The object does not exist.
    Missing,
}

impl History {
    /// The version to write next to `name` (recorded as attempted).
    pub fn next_version(&mut self, name: &str) -> u64 {
        let o = self.objects.entry(name.to_string()).or_default();
        o.attempted += 1;
        o.attempted
    }

    /// A write of `version` was acknowledged.
    pub fn acked(&mut self, name: &str, version: u64) {
        let o = self.objects.entry(name.to_string()).or_default();
        o.acked = o.acked.max(version);
    }

    /// A read of `name` returned `result`; checks it.
    pub fn read(&mut self, name: &str, result: &ReadResult, size: usize) {
        let o = self.objects.entry(name.to_string()).or_default();
        let floor = o.acked.max(o.seen);
        let version = match result {
            ReadResult::Missing if floor == 0 => return,
            ReadResult::Missing => {
                self.violations.push(format!(
                    "{name}: missing, but version {} was acknowledged{}",
                    o.acked,
                    if o.seen > o.acked {
                        format!(" and {} read", o.seen)
                    } else {
                        String::new()
                    }
                ));
                return;
            }
            ReadResult::Data(d) => match decode(name, d, size) {
                Ok(v) => v,
                Err(e) => {
                    self.violations.push(format!("{name}: {e}"));
                    return;
                }
            },
        };
        if version < o.acked {
            self.violations.push(format!(
                "{name}: read version {version}, but {} was acknowledged (a lost write)",
                o.acked
            ));
        } else if version < o.seen {
            self.violations.push(format!(
                "{name}: read version {version} after an earlier read returned {}",
                o.seen
            ));
        } else if version > o.attempted {
            self.violations.push(format!(
                "{name}: read version {version}, never written (newest attempted {})",
                o.attempted
            ));
        }
        o.seen = o.seen.max(version);
    }

    /// Objects with at least one version acknowledged.
    pub fn acked_objects(&self) -> usize {
        self.objects.values().filter(|o| o.acked > 0).count()
    }
}

/// When ops succeeded and failed, for the client's view of an outage.
#[derive(Debug)]
struct Timeline {
    start: Instant,
    last_ok: Instant,
    /// When the current run of failures began (no success since).
    failing_since: Option<Instant>,
    max_stall: Duration,
    max_error_span: Duration,
    write_latency: Vec<f64>,
    /// Writes acknowledged in each second of the run.
    acks_per_s: Vec<u64>,
    acked_writes: u64,
    failed_writes: u64,
    reads: u64,
    failed_reads: u64,
    errors: BTreeMap<String, u64>,
}

impl Timeline {
    fn new() -> Timeline {
        let now = Instant::now();
        Timeline {
            start: now,
            last_ok: now,
            failing_since: None,
            max_stall: Duration::ZERO,
            max_error_span: Duration::ZERO,
            write_latency: Vec::new(),
            acks_per_s: Vec::new(),
            acked_writes: 0,
            failed_writes: 0,
            reads: 0,
            failed_reads: 0,
            errors: BTreeMap::new(),
        }
    }

    fn ok(&mut self) {
        let now = Instant::now();
        self.max_stall = self.max_stall.max(now - self.last_ok);
        self.last_ok = now;
        if let Some(since) = self.failing_since.take() {
            self.max_error_span = self.max_error_span.max(now - since);
        }
    }

    fn failed(&mut self, e: &str) {
        self.failing_since.get_or_insert_with(Instant::now);
        // Group errors by their text without numbers (latencies, ids).
        let key: String = e
            .chars()
            .filter(|c| !c.is_ascii_digit())
            .take(160)
            .collect();
        *self.errors.entry(key).or_insert(0) += 1;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

async fn read_object(pool: &shoal_client::Pool, name: &str) -> Result<ReadResult, String> {
    match pool.read(name, 0, 0).await {
        Ok(d) => Ok(ReadResult::Data(d)),
        Err(shoal_client::Error::NotFound(_)) => Ok(ReadResult::Missing),
        Err(e) => Err(e.to_string()),
    }
}

/// What the workers share.
struct Run {
    size: usize,
    end: Instant,
    /// The stop file appeared: end now.
    end_now: std::sync::atomic::AtomicBool,
    history: Mutex<History>,
    timeline: Mutex<Timeline>,
}

/// One worker: its objects, until the run ends.
async fn worker(pool: shoal_client::Pool, names: Vec<String>, seed: u64, run: Arc<Run>) {
    let (size, end) = (run.size, run.end);
    let (history, timeline, end_now) = (&run.history, &run.timeline, &run.end_now);
    let mut rng = Rng(seed | 1);
    while Instant::now() < end
        && !names.is_empty()
        && !end_now.load(std::sync::atomic::Ordering::Relaxed)
    {
        let name = &names[rng.below(names.len())];
        if rng.below(3) == 0 {
            let r = read_object(&pool, name).await;
            let mut t = lock(timeline);
            t.reads += 1;
            match r {
                Ok(r) => {
                    t.ok();
                    drop(t);
                    lock(history).read(name, &r, size);
                }
                Err(e) => {
                    t.failed_reads += 1;
                    t.failed(&format!("read: {e}"));
                }
            }
            continue;
        }
        let version = lock(history).next_version(name);
        let data = Bytes::from(payload(name, version, size));
        let started = Instant::now();
        let r = pool.write_full(name, data).await;
        let mut t = lock(timeline);
        t.write_latency.push(started.elapsed().as_secs_f64());
        match r {
            Ok(()) => {
                t.acked_writes += 1;
                let sec = t.start.elapsed().as_secs() as usize;
                if t.acks_per_s.len() <= sec {
                    t.acks_per_s.resize(sec + 1, 0);
                }
                t.acks_per_s[sec] += 1;
                t.ok();
                drop(t);
                lock(history).acked(name, version);
            }
            Err(e) => {
                t.failed_writes += 1;
                t.failed(&format!("write: {e}"));
            }
        }
    }
}

/// Runs `shoal bench history`.
pub fn run(pool: &str, a: HistoryArgs, ctx: &super::common::Ctx) -> anyhow::Result<()> {
    if a.objects == 0 || a.workers == 0 || a.size < 64 {
        bail!("--objects and --workers must be positive and -b at least 64");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let report = rt.block_on(async {
        let opts = shoal_client::ClientOptions::from_loaded(&ctx.config, &ctx.name)?;
        let client = shoal_client::Client::connect(opts).await?;
        let pool_h = client.pool_latest(pool).await?;
        let names: Vec<String> = (0..a.objects)
            .map(|i| format!("{}.{i}", a.prefix))
            .collect();
        // A fresh start: objects of an earlier run by this name go first
        // (their versions would look invented to this run's history).
        for name in &names {
            match pool_h.remove(name).await {
                Ok(()) | Err(shoal_client::Error::NotFound(_)) => {}
                Err(e) => bail!("removing {name} of an earlier run: {e}"),
            }
        }
        let run = Arc::new(Run {
            size: a.size,
            end: Instant::now() + Duration::from_secs(a.seconds),
            end_now: std::sync::atomic::AtomicBool::new(false),
            history: Mutex::new(History::default()),
            timeline: Mutex::new(Timeline::new()),
        });
        let mut tasks = Vec::new();
        for w in 0..a.workers {
            let mine: Vec<String> = names
                .iter()
                .enumerate()
                .filter(|(i, _)| i % a.workers == w)
                .map(|(_, n)| n.clone())
                .collect();
            tasks.push(tokio::spawn(worker(
                pool_h.clone(),
                mine,
                0x5eed_0000 + w as u64 * 7919,
                run.clone(),
            )));
        }
        if let Some(stop) = a.stop_file.clone() {
            let run = run.clone();
            tokio::spawn(async move {
                while !stop.exists() {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                run.end_now
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            });
        }
        for t in tasks {
            t.await?;
        }
        let ran = lock(&run.timeline).start.elapsed();
        // The final check: every object once more, retrying failures
        // while the cluster heals.
        let settle_end = Instant::now() + Duration::from_secs(a.settle);
        let mut unread = Vec::new();
        for name in &names {
            loop {
                match read_object(&pool_h, name).await {
                    Ok(r) => {
                        lock(&run.history).read(name, &r, a.size);
                        break;
                    }
                    Err(e) if Instant::now() >= settle_end => {
                        unread.push(format!("{name}: {e}"));
                        break;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                }
            }
        }
        client.shutdown().await;
        let h = lock(&run.history);
        let t = lock(&run.timeline);
        let mut lat = t.write_latency.clone();
        lat.sort_by(f64::total_cmp);
        let max_error_span = match t.failing_since {
            // Failing until the end: the span lasts to the end of the run.
            Some(since) => t.max_error_span.max(since.elapsed().min(ran)),
            None => t.max_error_span,
        };
        anyhow::Ok(HistoryReport {
            seconds: ran.as_secs_f64(),
            objects: names.len() as u64,
            objects_acked: h.acked_objects() as u64,
            acked_writes: t.acked_writes,
            failed_writes: t.failed_writes,
            reads: t.reads,
            failed_reads: t.failed_reads,
            write_latency_s: Latency {
                p50: percentile(&lat, 0.5),
                p99: percentile(&lat, 0.99),
                max: lat.last().copied().unwrap_or(0.0),
            },
            acks_per_s: t.acks_per_s.clone(),
            max_stall_s: t.max_stall.max(t.last_ok.elapsed().min(ran)).as_secs_f64(),
            max_error_span_s: max_error_span.as_secs_f64(),
            errors: t
                .errors
                .iter()
                .map(|(k, n)| ErrorCount {
                    error: k.clone(),
                    count: *n,
                })
                .collect(),
            violations: h.violations.clone(),
            unread_at_end: unread,
        })
    })?;
    match a.format {
        Format::Json => outln!("{}", serde_json::to_string(&report)?),
        Format::Plain => {
            outln!(
                "{:.3} s: {} writes acknowledged, {} failed; {} reads, {} failed",
                report.seconds,
                report.acked_writes,
                report.failed_writes,
                report.reads,
                report.failed_reads
            );
            outln!(
                "write latency p50 {:.3} s, p99 {:.3} s, max {:.3} s; longest stall {:.3} s, longest run of errors {:.3} s",
                report.write_latency_s.p50,
                report.write_latency_s.p99,
                report.write_latency_s.max,
                report.max_stall_s,
                report.max_error_span_s
            );
            for e in &report.errors {
                outln!("  {} x {}", e.count, e.error);
            }
            for v in &report.violations {
                outln!("VIOLATION {v}");
            }
            for v in &report.unread_at_end {
                outln!("UNREAD {v}");
            }
        }
    }
    let bad = report.violations.len();
    let unread = report.unread_at_end.len();
    if bad > 0 || unread > 0 {
        bail!("the history check failed: {bad} violations, {unread} objects unreadable at the end");
    }
    Ok(())
}

/// What `bench history` prints (`--format json`: this, as JSON).
#[derive(Debug, Clone, serde::Serialize)]
struct HistoryReport {
    seconds: f64,
    objects: u64,
    objects_acked: u64,
    acked_writes: u64,
    failed_writes: u64,
    reads: u64,
    failed_reads: u64,
    write_latency_s: Latency,
    /// Acknowledged writes in each second of the run.
    acks_per_s: Vec<u64>,
    max_stall_s: f64,
    max_error_span_s: f64,
    errors: Vec<ErrorCount>,
    /// Reads that saw what no acknowledged or in-flight write could leave.
    violations: Vec<String>,
    unread_at_end: Vec<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
struct Latency {
    p50: f64,
    p99: f64,
    max: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
struct ErrorCount {
    error: String,
    count: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(name: &str, v: u64) -> ReadResult {
        ReadResult::Data(Bytes::from(payload(name, v, 256)))
    }

    #[test]
    fn payloads_decode_to_their_version_and_damage_shows() {
        let p = payload("o.1", 7, 256);
        assert_eq!(p.len(), 256);
        assert_eq!(decode("o.1", &p, 256), Ok(7));
        assert!(decode("o.2", &p, 256).unwrap_err().contains("object o.1"));
        let mut bad = p.clone();
        bad[200] ^= 1;
        assert!(decode("o.1", &bad, 256).unwrap_err().contains("damaged"));
        assert!(
            decode("o.1", &p[..100], 256)
                .unwrap_err()
                .contains("damaged")
        );
        assert!(
            decode("o.1", b"garbage", 256)
                .unwrap_err()
                .contains("bad header")
        );
    }

    #[test]
    fn reads_of_acknowledged_or_newer_versions_pass() {
        let mut h = History::default();
        h.read("a", &ReadResult::Missing, 256);
        let v1 = h.next_version("a");
        h.acked("a", v1);
        h.read("a", &data("a", 1), 256);
        // A failed write may have happened or not.
        let _v2 = h.next_version("a");
        h.read("a", &data("a", 1), 256);
        h.read("a", &data("a", 2), 256);
        assert!(h.violations.is_empty(), "{:?}", h.violations);
        assert_eq!(h.acked_objects(), 1);
    }

    #[test]
    fn a_lost_write_a_step_back_an_invented_version_and_a_missing_object_are_caught() {
        let mut h = History::default();
        for _ in 0..3 {
            let v = h.next_version("a");
            h.acked("a", v);
        }
        h.read("a", &data("a", 2), 256);
        assert!(h.violations[0].contains("lost write"), "{:?}", h.violations);
        h.read("a", &ReadResult::Missing, 256);
        assert!(h.violations[1].contains("missing"), "{:?}", h.violations);
        h.read("a", &data("a", 9), 256);
        assert!(
            h.violations[2].contains("never written"),
            "{:?}",
            h.violations
        );
        let mut h = History::default();
        h.next_version("b");
        h.next_version("b");
        h.read("b", &data("b", 2), 256);
        h.read("b", &data("b", 1), 256);
        assert!(
            h.violations[0].contains("earlier read"),
            "{:?}",
            h.violations
        );
    }
}

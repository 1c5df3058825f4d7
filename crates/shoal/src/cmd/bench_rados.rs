//! `shoal bench -p POOL SECONDS write|seq|rand`: object throughput and
//! latency through the client library, modelled on `rados bench`: a line per
//! second, then a summary (bandwidth and IOPS avg/stddev/max/min, latency
//! avg/p50/p99/p999/max, client CPU per op). `write --no-cleanup` leaves its
//! objects and a metadata object for `seq` and `rand` to read.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::{Args, ValueEnum};

use super::common::Format;
use super::units::percentile;

/// What a benchmark run does.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Mode {
    /// Write new objects.
    Write,
    /// Read the objects of the last `write --no-cleanup` in order.
    Seq,
    /// Read them in random order.
    Rand,
    /// Overwrite `-b` bytes at random offsets (multiples of `-b`) inside
    /// them, as `rbd bench --io-type write --io-pattern rand` does to an
    /// image's objects.
    Overwrite,
}

/// Options of `shoal bench -p POOL SECONDS MODE`.
#[derive(Debug, Args)]
pub struct RadosBenchArgs {
    /// The pool (before or after the other words).
    #[arg(short = 'p', long, global = true)]
    pub pool: Option<String>,
    /// How long to run, seconds.
    pub seconds: Option<u64>,
    /// write, seq, rand or overwrite.
    #[arg(value_enum)]
    pub mode: Option<Mode>,
    /// Object size for write, write size for overwrite, bytes (K, M suffixes).
    #[arg(short = 'b', long = "block-size", default_value = "4M")]
    pub block_size: String,
    /// Ops in flight.
    #[arg(short = 't', long = "concurrent-ios", default_value_t = 16)]
    pub concurrency: usize,
    /// Keep the written objects (for seq and rand).
    #[arg(long)]
    pub no_cleanup: bool,
    /// Name prefix of the objects (default: per host and process).
    #[arg(long)]
    pub run_name: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "plain")]
    pub format: Format,
    /// Draw bandwidth and latency over time into this SVG file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Write: stop after this many objects (as rados bench's --max-objects).
    #[arg(long)]
    pub max_objects: Option<u64>,
}

/// The object operations a benchmark needs.
pub trait BenchIo: Clone + Send + Sync + 'static {
    /// Writes a whole object.
    fn put(&self, name: String, data: Bytes) -> impl Future<Output = anyhow::Result<()>> + Send;
    /// Reads a whole object.
    fn get(&self, name: String) -> impl Future<Output = anyhow::Result<Bytes>> + Send;
    /// Writes `data` at `offset` inside an object.
    fn write_at(
        &self,
        name: String,
        offset: u64,
        data: Bytes,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;
    /// Removes an object (absent is fine).
    fn remove(&self, name: String) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// Name of the object recording the last write run.
pub const METADATA_OBJECT: &str = "benchmark_last_metadata";

/// The default run name: per host and process, as rados bench.
pub fn default_run_name() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    format!("benchmark_data_{host}_{}", std::process::id())
}

fn object_name(run: &str, i: u64) -> String {
    format!("{run}_object{i}")
}

/// Parses `4M`, `4096`, `64K` (bytes).
pub fn parse_size(s: &str) -> anyhow::Result<usize> {
    let n = super::units::parse_size(s, 1)?;
    usize::try_from(n).with_context(|| format!("size {s:?} is too large"))
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    done_s: f64,
    lat_s: f64,
    bytes: u64,
}

#[derive(Default)]
struct Shared {
    samples: Mutex<Vec<Sample>>,
    started: AtomicU64,
    finished: AtomicU64,
    failed: AtomicU64,
    stop: AtomicBool,
    first_error: Mutex<Option<String>>,
}

/// A benchmark's results.
#[derive(Debug, Clone)]
pub struct Report {
    /// Mode.
    pub mode: Mode,
    /// Seconds it ran.
    pub elapsed_s: f64,
    /// Ops completed.
    pub ops: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Object size.
    pub size: usize,
    /// Ops in flight.
    pub concurrency: usize,
    /// Per-second bandwidth, MB/s.
    pub bw_per_s: Vec<f64>,
    /// Per-second IOPS.
    pub iops_per_s: Vec<f64>,
    /// Per-second average latency, s.
    pub lat_per_s: Vec<f64>,
    /// Sorted latencies, s.
    pub lats: Vec<f64>,
    /// Client CPU seconds used.
    pub cpu_s: f64,
}

/// A run's figures, as `--format json` prints them (`rados bench`'s
/// names where it has them).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    /// `write`, `seq` or `rand`.
    pub mode: String,
    /// Seconds it ran.
    pub seconds: f64,
    /// Object size, bytes.
    pub object_size: usize,
    /// Ops in flight.
    pub concurrency: usize,
    /// Ops completed.
    pub ops: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Average bandwidth over the run, MB/s.
    pub bandwidth_mb_s: f64,
    /// Standard deviation of the per-second bandwidth.
    pub bandwidth_sd: f64,
    /// Mean of the per-second bandwidth.
    pub bandwidth_avg_per_s: f64,
    /// Highest per-second bandwidth.
    pub bandwidth_max: f64,
    /// Lowest per-second bandwidth.
    pub bandwidth_min: f64,
    /// Ops per second over the run.
    pub iops: f64,
    /// Mean of the per-second IOPS.
    pub iops_avg_per_s: f64,
    /// Standard deviation of the per-second IOPS.
    pub iops_sd: f64,
    /// Highest per-second IOPS.
    pub iops_max: f64,
    /// Lowest per-second IOPS.
    pub iops_min: f64,
    /// Mean latency, s.
    pub latency_avg_s: f64,
    /// Median latency, s.
    pub latency_p50_s: f64,
    /// 99th percentile latency, s.
    pub latency_p99_s: f64,
    /// 99.9th percentile latency, s.
    pub latency_p999_s: f64,
    /// Highest latency, s.
    pub latency_max_s: f64,
    /// Client CPU seconds used.
    pub client_cpu_s: f64,
    /// Client CPU per op, µs.
    pub client_cpu_us_per_op: f64,
}

fn cpu_seconds() -> f64 {
    cpu_seconds_of("self")
}

/// CPU seconds (user + system) process `pid` (or `self`) has used.
pub fn cpu_seconds_of(pid: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
    (ticks(11) + ticks(12)) / 100.0
}

/// One benchmark run's parameters.
#[derive(Debug, Clone)]
pub struct BenchSpec {
    /// What to do.
    pub mode: Mode,
    /// How long, at most.
    pub seconds: u64,
    /// Object size (write).
    pub size: usize,
    /// Ops in flight.
    pub concurrency: usize,
    /// Object name prefix (write).
    pub run: String,
    /// Print per-second lines.
    pub plain: bool,
    /// Write at most this many objects.
    pub max_objects: Option<u64>,
}

/// Runs one benchmark against `io`.
pub async fn run_bench<B: BenchIo>(io: B, spec: &BenchSpec) -> anyhow::Result<Report> {
    let BenchSpec {
        mode,
        seconds,
        size,
        concurrency,
        ref run,
        plain,
        max_objects,
    } = *spec;
    // Overwrites land in objects of `object_size` bytes.
    let (objects, size, run, object_size) = match mode {
        Mode::Write => (max_objects.unwrap_or(u64::MAX), size, run.to_string(), 0),
        Mode::Seq | Mode::Rand | Mode::Overwrite => {
            let (n, written, run) = read_metadata(&io).await?;
            if n == 0 {
                bail!("the last write run left no objects");
            }
            match mode {
                Mode::Overwrite if size > written => {
                    bail!("-b {size} is larger than the objects written ({written} bytes)")
                }
                Mode::Overwrite => (n, size, run, written as u64),
                _ => (n, written, run, 0),
            }
        }
    };
    let slots = (object_size / size.max(1) as u64).max(1);
    let run = run.as_str();
    let shared = Arc::new(Shared::default());
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let payload = Bytes::from(vec![0x5au8; size]);
    let cpu0 = cpu_seconds();
    if plain {
        outln!(
            "{} for up to {seconds} seconds, {size} byte objects, {concurrency} in flight",
            match mode {
                Mode::Write => "writing",
                Mode::Seq => "reading in order",
                Mode::Rand => "reading at random",
                Mode::Overwrite => "overwriting at random",
            }
        );
        outln!("  sec Cur ops   started  finished  avg MB/s  cur MB/s last lat(s)  avg lat(s)");
    }
    let mut workers = Vec::new();
    for w in 0..concurrency {
        let io = io.clone();
        let shared = Arc::clone(&shared);
        let next = Arc::clone(&next);
        let payload = payload.clone();
        let run = run.to_string();
        workers.push(tokio::spawn(async move {
            let mut rng = (w as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            while Instant::now() < deadline && !shared.stop.load(Ordering::Relaxed) {
                let mut random = || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                let i = match mode {
                    Mode::Write | Mode::Seq => next.fetch_add(1, Ordering::Relaxed),
                    Mode::Rand | Mode::Overwrite => random() % objects.max(1),
                };
                let offset = (random() % slots) * payload.len() as u64;
                if i >= objects {
                    break;
                }
                shared.started.fetch_add(1, Ordering::Relaxed);
                let t0 = Instant::now();
                let name = object_name(&run, i);
                let r = match mode {
                    Mode::Write => io.put(name, payload.clone()).await.map(|_| payload.len()),
                    Mode::Seq | Mode::Rand => io.get(name).await.map(|b| b.len()),
                    Mode::Overwrite => io
                        .write_at(name, offset, payload.clone())
                        .await
                        .map(|_| payload.len()),
                };
                match r {
                    Ok(n) => {
                        let s = Sample {
                            done_s: start.elapsed().as_secs_f64(),
                            lat_s: t0.elapsed().as_secs_f64(),
                            bytes: n as u64,
                        };
                        shared
                            .samples
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(s);
                        shared.finished.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        shared.failed.fetch_add(1, Ordering::Relaxed);
                        let mut first =
                            shared.first_error.lock().unwrap_or_else(|p| p.into_inner());
                        first.get_or_insert_with(|| e.to_string());
                        shared.stop.store(true, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    let ticker = {
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let mut sec = 0u64;
            loop {
                tokio::time::sleep_until((start + Duration::from_secs(sec + 1)).into()).await;
                sec += 1;
                if plain {
                    print_second(&shared, sec, start);
                }
            }
        })
    };
    for w in workers {
        let _ = w.await;
    }
    ticker.abort();
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    if let Some(e) = shared
        .first_error
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
    {
        bail!(
            "{} ops failed; the first: {e}",
            shared.failed.load(Ordering::Relaxed)
        );
    }
    let samples = std::mem::take(&mut *shared.samples.lock().unwrap_or_else(|p| p.into_inner()));
    let written = next.load(Ordering::Relaxed).min(samples.len() as u64);
    if mode == Mode::Write {
        let meta = serde_json::to_value(BenchMeta {
            run_name: run.to_string(),
            objects: written,
            size: size as u64,
        })?;
        io.put(METADATA_OBJECT.into(), Bytes::from(meta.to_string()))
            .await?;
    }
    Ok(report(mode, elapsed, size, concurrency, samples, cpu))
}

fn print_second(shared: &Shared, sec: u64, start: Instant) {
    let samples = shared.samples.lock().unwrap_or_else(|p| p.into_inner());
    let lo = (sec - 1) as f64;
    let this: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.done_s >= lo && s.done_s < lo + 1.0)
        .collect();
    let total_bytes: u64 = samples.iter().map(|s| s.bytes).sum();
    let cur_bytes: u64 = this.iter().map(|s| s.bytes).sum();
    let avg_lat = if samples.is_empty() {
        0.0
    } else {
        samples.iter().map(|s| s.lat_s).sum::<f64>() / samples.len() as f64
    };
    let last_lat = samples.last().map_or(0.0, |s| s.lat_s);
    let started = shared.started.load(Ordering::Relaxed);
    let finished = shared.finished.load(Ordering::Relaxed);
    let el = start.elapsed().as_secs_f64().max(1e-9);
    outln!(
        "{sec:>5} {:>7} {started:>9} {finished:>9} {:>9.3} {:>9.3} {last_lat:>11.6} {avg_lat:>11.6}",
        started - finished,
        total_bytes as f64 / el / 1e6,
        cur_bytes as f64 / 1e6,
    );
    super::out::flush();
}

fn report(
    mode: Mode,
    elapsed: f64,
    size: usize,
    concurrency: usize,
    samples: Vec<Sample>,
    cpu_s: f64,
) -> Report {
    let secs = elapsed.ceil().max(1.0) as usize;
    let mut bw = vec![0.0; secs];
    let mut iops = vec![0.0; secs];
    let mut lat_sum = vec![0.0; secs];
    for s in &samples {
        let i = (s.done_s as usize).min(secs - 1);
        bw[i] += s.bytes as f64 / 1e6;
        iops[i] += 1.0;
        lat_sum[i] += s.lat_s;
    }
    let lat_per_s = lat_sum
        .iter()
        .zip(&iops)
        .map(|(l, n)| if *n > 0.0 { l / n } else { 0.0 })
        .collect();
    let mut lats: Vec<f64> = samples.iter().map(|s| s.lat_s).collect();
    lats.sort_by(|a, b| a.total_cmp(b));
    Report {
        mode,
        elapsed_s: elapsed,
        ops: samples.len() as u64,
        bytes: samples.iter().map(|s| s.bytes).sum(),
        size,
        concurrency,
        bw_per_s: bw,
        iops_per_s: iops,
        lat_per_s,
        lats,
        cpu_s,
    }
}

/// The object count, object size and run name of the last write run.
pub async fn read_metadata<B: BenchIo>(io: &B) -> anyhow::Result<(u64, usize, String)> {
    let text = io.get(METADATA_OBJECT.into()).await.context(
        "no benchmark data to read: run `shoal bench -p POOL SECONDS write --no-cleanup` first",
    )?;
    let m: BenchMeta = serde_json::from_slice(&text).context("bad benchmark metadata")?;
    Ok((m.objects, m.size as usize, m.run_name))
}

/// What a write run left for later read runs (`--no-cleanup`), in the
/// pool's metadata object.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct BenchMeta {
    run_name: String,
    objects: u64,
    size: u64,
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let m = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64;
    (m, var.sqrt())
}

impl Report {
    /// The run's figures.
    pub fn summary(&self) -> Summary {
        let (bw_avg, bw_sd) = mean_sd(&self.bw_per_s);
        let (io_avg, io_sd) = mean_sd(&self.iops_per_s);
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let min = |v: &[f64]| {
            if v.is_empty() {
                0.0
            } else {
                v.iter().copied().fold(f64::INFINITY, f64::min)
            }
        };
        let lat_avg = if self.lats.is_empty() {
            0.0
        } else {
            self.lats.iter().sum::<f64>() / self.lats.len() as f64
        };
        Summary {
            mode: format!("{:?}", self.mode).to_lowercase(),
            seconds: self.elapsed_s,
            object_size: self.size,
            concurrency: self.concurrency,
            ops: self.ops,
            bytes: self.bytes,
            bandwidth_mb_s: self.bytes as f64 / self.elapsed_s.max(1e-9) / 1e6,
            bandwidth_sd: bw_sd,
            bandwidth_avg_per_s: bw_avg,
            bandwidth_max: max(&self.bw_per_s),
            bandwidth_min: min(&self.bw_per_s),
            iops: self.ops as f64 / self.elapsed_s.max(1e-9),
            iops_avg_per_s: io_avg,
            iops_sd: io_sd,
            iops_max: max(&self.iops_per_s),
            iops_min: min(&self.iops_per_s),
            latency_avg_s: lat_avg,
            latency_p50_s: percentile(&self.lats, 0.5),
            latency_p99_s: percentile(&self.lats, 0.99),
            latency_p999_s: percentile(&self.lats, 0.999),
            latency_max_s: self.lats.last().copied().unwrap_or(0.0),
            client_cpu_s: self.cpu_s,
            client_cpu_us_per_op: self.cpu_s * 1e6 / self.ops.max(1) as f64,
        }
    }

    /// The summary for people, as rados bench prints it.
    pub fn plain(&self) -> String {
        let j = self.summary();
        format!(
            "Total time run:         {:.3}\n\
             Total ops:              {}\n\
             Object size:            {}\n\
             Bandwidth (MB/sec):     {:.3}\n\
             Stddev Bandwidth:       {:.3}\n\
             Max bandwidth (MB/sec): {:.3}\n\
             Min bandwidth (MB/sec): {:.3}\n\
             Average IOPS:           {:.0}\n\
             Stddev IOPS:            {:.2}\n\
             Max IOPS:               {:.0}\n\
             Min IOPS:               {:.0}\n\
             Average Latency(s):     {:.6}\n\
             p50 Latency(s):         {:.6}\n\
             p99 Latency(s):         {:.6}\n\
             p99.9 Latency(s):       {:.6}\n\
             Max latency(s):         {:.6}\n\
             Client CPU per op (us): {:.1}\n",
            self.elapsed_s,
            self.ops,
            self.size,
            j.bandwidth_mb_s,
            j.bandwidth_sd,
            j.bandwidth_max,
            j.bandwidth_min,
            j.iops,
            j.iops_sd,
            j.iops_max,
            j.iops_min,
            j.latency_avg_s,
            j.latency_p50_s,
            j.latency_p99_s,
            j.latency_p999_s,
            j.latency_max_s,
            j.client_cpu_us_per_op,
        )
    }

    /// Bandwidth (MB/s) and average latency (ms) per second as an SVG chart.
    pub fn svg(&self) -> String {
        let (w, h, pad) = (800.0, 400.0, 50.0);
        let n = self.bw_per_s.len().max(2) as f64;
        let bw_max = self.bw_per_s.iter().copied().fold(1e-9, f64::max);
        let lat_max = self.lat_per_s.iter().copied().fold(1e-9, f64::max);
        let line = |v: &[f64], max: f64| -> String {
            v.iter()
                .enumerate()
                .map(|(i, y)| {
                    let x = pad + (w - 2.0 * pad) * i as f64 / (n - 1.0);
                    let y = h - pad - (h - 2.0 * pad) * y / max;
                    format!("{x:.1},{y:.1}")
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"{pad}\" y=\"20\" font-family=\"sans-serif\" font-size=\"14\">\
             shoal bench {:?}: bandwidth (blue, max {bw_max:.1} MB/s) and latency (red, max {:.2} ms) per second</text>\n\
             <line x1=\"{pad}\" y1=\"{y0}\" x2=\"{x1}\" y2=\"{y0}\" stroke=\"black\"/>\n\
             <line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{y0}\" stroke=\"black\"/>\n\
             <polyline fill=\"none\" stroke=\"blue\" stroke-width=\"2\" points=\"{}\"/>\n\
             <polyline fill=\"none\" stroke=\"red\" stroke-width=\"2\" points=\"{}\"/>\n\
             </svg>\n",
            self.mode,
            lat_max * 1e3,
            line(&self.bw_per_s, bw_max),
            line(&self.lat_per_s, lat_max),
            y0 = h - pad,
            x1 = w - pad,
        )
    }
}

/// Removes the objects of a write run (and the metadata object).
pub async fn cleanup<B: BenchIo>(io: &B, run: &str, objects: u64) -> anyhow::Result<u64> {
    let mut removed = 0;
    for i in 0..objects {
        io.remove(object_name(run, i)).await?;
        removed += 1;
    }
    io.remove(METADATA_OBJECT.into()).await?;
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4M").unwrap(), 4 << 20);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64k").unwrap(), 65536);
        assert!(parse_size("x").is_err());
    }

    #[test]
    fn summary_statistics() {
        let samples: Vec<Sample> = (0..100)
            .map(|i| Sample {
                done_s: i as f64 / 50.0,
                lat_s: (i + 1) as f64 / 1000.0,
                bytes: 1_000_000,
            })
            .collect();
        let r = report(Mode::Write, 2.0, 1_000_000, 4, samples, 0.5);
        assert_eq!(r.bw_per_s, vec![50.0, 50.0]);
        let j = r.summary();
        assert_eq!(j.ops, 100);
        assert!((j.bandwidth_mb_s - 50.0).abs() < 1e-9);
        assert!((j.latency_max_s - 0.1).abs() < 1e-9);
        assert!((j.latency_p50_s - 0.050).abs() < 0.002);
        assert!((j.client_cpu_us_per_op - 5000.0).abs() < 1e-6);
        assert!(r.svg().contains("<polyline"));
        assert!(r.plain().contains("Average IOPS:           50"));
    }
}

/// [`BenchIo`] over a pool of the client library.
#[derive(Debug, Clone)]
pub struct PoolIo(pub shoal_client::Pool);

impl BenchIo for PoolIo {
    fn put(&self, name: String, data: Bytes) -> impl Future<Output = anyhow::Result<()>> + Send {
        let p = self.0.clone();
        async move { Ok(p.write_full(&name, data).await?) }
    }

    fn get(&self, name: String) -> impl Future<Output = anyhow::Result<Bytes>> + Send {
        let p = self.0.clone();
        async move { Ok(p.read(&name, 0, 0).await?) }
    }

    fn write_at(
        &self,
        name: String,
        offset: u64,
        data: Bytes,
    ) -> impl Future<Output = anyhow::Result<()>> + Send {
        let p = self.0.clone();
        async move { Ok(p.write(&name, offset, data).await?) }
    }

    fn remove(&self, name: String) -> impl Future<Output = anyhow::Result<()>> + Send {
        let p = self.0.clone();
        async move {
            match p.remove(&name).await {
                Ok(()) | Err(shoal_client::Error::NotFound(_)) => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
    }
}

fn multi_thread_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

async fn connect(
    ctx: &super::common::Ctx,
    pool: &str,
) -> anyhow::Result<(shoal_client::Client, PoolIo)> {
    let mut opts = shoal_client::ClientOptions::from_loaded(&ctx.config, &ctx.name)?;
    opts.max_inflight_ops = opts.max_inflight_ops.max(4096);
    let client = shoal_client::Client::connect(opts).await?;
    let pool = client.pool_latest(pool).await?;
    Ok((client, PoolIo(pool)))
}

/// Runs `shoal bench -p POOL SECONDS MODE`.
pub fn run(a: RadosBenchArgs, ctx: &super::common::Ctx) -> anyhow::Result<()> {
    let (Some(pool), Some(seconds), Some(mode)) = (a.pool.clone(), a.seconds, a.mode) else {
        bail!(
            "usage: shoal bench -p POOL SECONDS write|seq|rand|overwrite [-b SIZE] [-t N] (or a subcommand: see --help)"
        );
    };
    let size = parse_size(&a.block_size)?;
    if size == 0 || a.concurrency == 0 {
        bail!("-b and -t must be positive");
    }
    let run_name = a.run_name.clone().unwrap_or_else(default_run_name);
    let plain = a.format == Format::Plain;
    let rt = multi_thread_runtime()?;
    let report = rt.block_on(async {
        let (client, io) = connect(ctx, &pool).await?;
        let spec = BenchSpec {
            mode,
            seconds,
            size,
            concurrency: a.concurrency,
            run: run_name.clone(),
            plain,
            max_objects: a.max_objects,
        };
        let report = run_bench(io.clone(), &spec).await?;
        if mode == Mode::Write && !a.no_cleanup {
            let removed = cleanup(&io, &run_name, report.ops).await?;
            if plain {
                outln!("Cleaned up {removed} objects");
            }
        }
        client.shutdown().await;
        anyhow::Ok(report)
    })?;
    match a.format {
        Format::Plain => out!("{}", report.plain()),
        Format::Json => outln!("{}", serde_json::to_string(&report.summary())?),
    }
    if let Some(path) = &a.plot {
        std::fs::write(path, report.svg())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Runs `shoal bench cleanup -p POOL`.
pub fn run_cleanup(pool: &str, ctx: &super::common::Ctx) -> anyhow::Result<()> {
    let rt = multi_thread_runtime()?;
    rt.block_on(async {
        let (client, io) = connect(ctx, pool).await?;
        let (objects, _, run) = read_metadata(&io).await?;
        let removed = cleanup(&io, &run, objects).await?;
        outln!("removed {removed} objects of {run}");
        client.shutdown().await;
        anyhow::Ok(())
    })
}

//! `shoal bench`: benchmarks. `shoal bench net` measures the messenger over
//! loopback beside raw tokio TCP doing the same exchange in the same run.
//!
//! Server and client each run on their own single-threaded runtime on their
//! own OS thread, as two single-threaded processes would, for both the
//! baseline and the messenger. CPU time is the whole process's (both sides),
//! read from /proc/self/stat.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use clap::{Args, Subcommand};

use super::common::Format;
use shoal_config::Config;
use shoal_net::{Incoming, Keyring, KeyringAuth, Messenger, NetConfig, TcpTransport};
use shoal_proto::Ping;
use shoal_types::EntityName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// `shoal bench -p POOL SECONDS write|seq|rand`, or a named benchmark.
/// `-p` may come before or after `cleanup` (`rados bench` users type
/// `-p POOL` first), so subcommand names are recognised after options.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    sub: Option<BenchCmd>,
    #[command(flatten)]
    rados: super::bench_rados::RadosBenchArgs,
}

/// Benchmarks.
#[derive(Debug, Subcommand)]
pub enum BenchCmd {
    /// Remove the objects a `write --no-cleanup` run left (`-p POOL`
    /// before or after `cleanup`).
    Cleanup,
    /// The messenger over loopback beside raw TCP: 4 KiB request/response at
    /// queue depth 1 (latency), 4 KiB requests at queue depth 64 (ops/s,
    /// CPU per op), 4 MiB messages with 16 in flight (bandwidth).
    Net(NetArgs),
    /// The monitors: committed changes per second, latency of one change,
    /// and the time for a change to reach many subscribers.
    Mon(super::bench_mon::MonBenchArgs),
    /// An S3 endpoint (`shoal gateway` or radosgw): PUT, GET and DELETE of
    /// many objects with requests in flight, multipart for large ones.
    S3(super::bench_s3::S3BenchArgs),
    /// A fault workload (`-p POOL history SECONDS`): every acknowledged
    /// write remembered, every read checked against that history (no
    /// acknowledged write lost, no step back, nothing damaged), and the
    /// outage a client felt.
    History(super::bench_history::HistoryArgs),
    /// The performance counters the data paths keep for the manager: the
    /// CPU one OSD op, S3 request and NBD request spends on them (for the
    /// manager's cost beside the CPU of an op, `bench/mgr-cost.sh`).
    Counters {
        /// Operations measured per path.
        #[arg(long, default_value_t = 2_000_000)]
        ops: u64,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: super::common::Format,
    },
}

/// Options of `shoal bench net`.
#[derive(Debug, Args)]
pub struct NetArgs {
    /// Seconds each measurement runs.
    #[arg(long, default_value_t = 2)]
    seconds: u64,
    /// Which measurements to run: any of a, b, c.
    #[arg(long, default_value = "abc")]
    only: String,
    /// Rounds; each figure is the median over the rounds.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Output format.
    #[arg(long, value_enum, default_value = "plain")]
    format: Format,
}

/// Runs `shoal bench`.
pub fn run(args: BenchArgs, ctx: &super::common::Ctx) -> anyhow::Result<()> {
    let pool = args.rados.pool.as_deref();
    match (args.sub, pool) {
        (Some(BenchCmd::Cleanup), Some(pool)) => super::bench_rados::run_cleanup(pool, ctx),
        (Some(BenchCmd::Cleanup), None) => {
            anyhow::bail!("which pool? shoal bench -p POOL cleanup")
        }
        (Some(BenchCmd::History(h)), Some(pool)) => super::bench_history::run(pool, h, ctx),
        (Some(BenchCmd::History(_)), None) => {
            anyhow::bail!("which pool? shoal bench -p POOL history SECONDS")
        }
        (Some(_), Some(pool)) => {
            anyhow::bail!("-p {pool}: only object benchmarks and cleanup take a pool")
        }
        (Some(BenchCmd::Net(a)), None) => bench_net(a, &ctx.config),
        (Some(BenchCmd::Mon(a)), None) => super::bench_mon::run(a),
        (Some(BenchCmd::S3(a)), None) => super::bench_s3::run(a),
        (Some(BenchCmd::Counters { ops, format }), None) => bench_counters(ops, format),
        (None, _) => super::bench_rados::run(args.rados, ctx),
    }
}

const SMALL: usize = 4096;
const LARGE: usize = 4 << 20;

#[derive(Debug, Default, Clone, Copy)]
struct Figures {
    p50_us: f64,
    p99_us: f64,
    ops_per_s: f64,
    cpu_us_per_op: f64,
    gb_per_s: f64,
}

fn bench_net(a: NetArgs, config: &Config) -> anyhow::Result<()> {
    let dur = Duration::from_secs(a.seconds.max(1));
    let mut net = NetConfig::from_options(&config.options);
    net.request_timeout = Duration::from_secs(60);
    // The machine is shared and noisy: alternate baseline and messenger
    // and report the median of the rounds for each figure.
    let mut raw_rounds = Vec::new();
    let mut msg_rounds = Vec::new();
    for round in 1..=a.rounds.max(1) {
        eprintln!(
            "round {round}/{}: (a) 4 KiB QD1, (b) 4 KiB QD64, (c) 4 MiB x16 ...",
            a.rounds
        );
        let mut raw = [Figures::default(); 3];
        let mut msg = [Figures::default(); 3];
        if a.only.contains('a') {
            (raw[0].p50_us, raw[0].p99_us) = percentiles(raw_pingpong(dur)?);
            (msg[0].p50_us, msg[0].p99_us) = percentiles(msgr_qd1(dur, &net)?);
        }
        if a.only.contains('b') {
            raw[1] = measure_ops(|| raw_pipelined(SMALL, 64, dur))?;
            msg[1] = measure_ops(|| msgr_pipelined(SMALL, 64, dur, &net))?;
        }
        if a.only.contains('c') {
            raw[2] = measure_ops(|| raw_pipelined(LARGE, 16, dur))?;
            msg[2] = measure_ops(|| msgr_pipelined(LARGE, 16, dur, &net))?;
        }
        for f in [&mut raw[2], &mut msg[2]] {
            f.gb_per_s = f.ops_per_s * LARGE as f64 / 1e9;
        }
        raw_rounds.push(raw);
        msg_rounds.push(msg);
    }
    let (raw, msg) = (median(&raw_rounds), median(&msg_rounds));
    match a.format {
        Format::Json => print_json(&raw, &msg, a.seconds, a.rounds),
        Format::Plain => print_plain(&raw, &msg, a.seconds, a.rounds),
    }
    Ok(())
}

/// The median of each figure over the rounds.
fn median(rounds: &[[Figures; 3]]) -> [Figures; 3] {
    let pick = |f: &dyn Fn(&[Figures; 3]) -> f64| {
        let mut v: Vec<f64> = rounds.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let mut out = [Figures::default(); 3];
    for (i, o) in out.iter_mut().enumerate() {
        *o = Figures {
            p50_us: pick(&|r| r[i].p50_us),
            p99_us: pick(&|r| r[i].p99_us),
            ops_per_s: pick(&|r| r[i].ops_per_s),
            cpu_us_per_op: pick(&|r| r[i].cpu_us_per_op),
            gb_per_s: pick(&|r| r[i].gb_per_s),
        };
    }
    out
}

fn print_plain(raw: &[Figures; 3], msg: &[Figures; 3], seconds: u64, rounds: u32) {
    outln!(
        "shoal bench net: median of {rounds} rounds of {seconds} s, 127.0.0.1, one thread per side"
    );
    outln!(
        "{:<44} {:>12} {:>12} {:>8}",
        "measurement",
        "raw TCP",
        "messenger",
        "ratio"
    );
    let row = |name: &str, r: f64, m: f64| {
        outln!("{name:<44} {r:>12.2} {m:>12.2} {:>7.2}x", m / r);
    };
    row(
        "(a) 4 KiB req/resp QD1, p50 latency (us)",
        raw[0].p50_us,
        msg[0].p50_us,
    );
    row(
        "(a) 4 KiB req/resp QD1, p99 latency (us)",
        raw[0].p99_us,
        msg[0].p99_us,
    );
    row(
        "(b) 4 KiB requests QD64, ops/s",
        raw[1].ops_per_s,
        msg[1].ops_per_s,
    );
    row(
        "(b) 4 KiB requests QD64, CPU us/op (both)",
        raw[1].cpu_us_per_op,
        msg[1].cpu_us_per_op,
    );
    row(
        "(c) 4 MiB messages, 16 in flight, GB/s",
        raw[2].gb_per_s,
        msg[2].gb_per_s,
    );
}

fn print_json(raw: &[Figures; 3], msg: &[Figures; 3], seconds: u64, rounds: u32) {
    let side = |f: &[Figures; 3]| {
        serde_json::json!({
            "qd1_4k_p50_us": f[0].p50_us,
            "qd1_4k_p99_us": f[0].p99_us,
            "qd64_4k_ops_per_s": f[1].ops_per_s,
            "qd64_4k_cpu_us_per_op": f[1].cpu_us_per_op,
            "inflight16_4m_gb_per_s": f[2].gb_per_s,
        })
    };
    let v = serde_json::json!({
        "seconds": seconds,
        "rounds": rounds,
        "raw_tcp": side(raw),
        "messenger": side(msg),
    });
    outln!("{v}");
}

fn percentiles(lat: Vec<Duration>) -> (f64, f64) {
    use super::units::{percentile, sorted};
    let us = sorted(lat.iter().map(|d| d.as_secs_f64() * 1e6).collect());
    (percentile(&us, 0.50), percentile(&us, 0.99))
}

/// Process CPU time (user + system) so far.
fn cpu_time() -> Duration {
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the command name, which may contain spaces.
            let rest = s.rsplit_once(')')?.1.split_whitespace().collect::<Vec<_>>();
            let utime: u64 = rest.get(11)?.parse().ok()?;
            let stime: u64 = rest.get(12)?.parse().ok()?;
            Some(utime + stime)
        })
        .unwrap_or(0);
    // Linux reports in USER_HZ, which is 100 on every mainstream platform.
    Duration::from_millis(ticks * 10)
}

fn measure_ops(f: impl FnOnce() -> anyhow::Result<(u64, Duration)>) -> anyhow::Result<Figures> {
    let cpu0 = cpu_time();
    let (ops, elapsed) = f()?;
    let cpu = cpu_time().saturating_sub(cpu0);
    Ok(Figures {
        ops_per_s: ops as f64 / elapsed.as_secs_f64(),
        cpu_us_per_op: cpu.as_secs_f64() * 1e6 / ops.max(1) as f64,
        ..Figures::default()
    })
}

type ServerFuture = std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>>>>;
/// A benchmark server: reports its address, serves until told to stop.
type ServerFn = Box<
    dyn FnOnce(
            std::sync::mpsc::Sender<SocketAddr>,
            tokio::sync::oneshot::Receiver<()>,
        ) -> ServerFuture
        + Send,
>;

/// Runs `server` on one thread and `client` on another, each on its own
/// single-threaded runtime; the server hands its address to the client.
fn two_sides<C, CF, R>(server: ServerFn, client: C) -> anyhow::Result<R>
where
    C: FnOnce(SocketAddr) -> CF,
    CF: std::future::Future<Output = anyhow::Result<R>>,
{
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let srv = std::thread::spawn(move || -> anyhow::Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(server(addr_tx, stop_rx))
    });
    let addr = addr_rx.recv().context("benchmark server failed to start")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(client(addr));
    let _ = stop_tx.send(());
    srv.join()
        .map_err(|_| anyhow::anyhow!("benchmark server thread panicked"))??;
    result
}

/// A raw TCP server answering each `req`-byte request with `resp` bytes.
fn raw_server(req: usize, resp: usize) -> ServerFn {
    Box::new(move |addr_tx, stop| {
        Box::pin(async move {
            let l = TcpListener::bind("127.0.0.1:0").await?;
            addr_tx.send(l.local_addr()?)?;
            let (mut s, _) = l.accept().await?;
            s.set_nodelay(true)?;
            let mut inbuf = vec![0u8; req];
            let out = vec![1u8; resp];
            let serve = async {
                while s.read_exact(&mut inbuf).await.is_ok() {
                    if s.write_all(&out).await.is_err() {
                        break;
                    }
                }
            };
            tokio::select! { _ = serve => {}, _ = stop => {} }
            Ok(())
        })
    })
}

fn raw_pingpong(dur: Duration) -> anyhow::Result<Vec<Duration>> {
    two_sides(raw_server(SMALL, SMALL), |addr| async move {
        let mut s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        let out = vec![2u8; SMALL];
        let mut inbuf = vec![0u8; SMALL];
        let mut lat = Vec::new();
        let end = Instant::now() + dur;
        while Instant::now() < end {
            let t = Instant::now();
            s.write_all(&out).await?;
            s.read_exact(&mut inbuf).await?;
            lat.push(t.elapsed());
        }
        Ok(lat)
    })
}

/// Raw TCP with `inflight` requests of `size` bytes outstanding, each
/// acknowledged with 8 bytes. Returns (requests completed, elapsed).
fn raw_pipelined(size: usize, inflight: usize, dur: Duration) -> anyhow::Result<(u64, Duration)> {
    two_sides(raw_server(size, 8), move |addr| async move {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        let (mut r, mut w) = s.into_split();
        let window = Arc::new(Semaphore::new(inflight));
        let end = Instant::now() + dur;
        let start = Instant::now();
        let win = Arc::clone(&window);
        let writer = tokio::spawn(async move {
            let out = vec![3u8; size];
            while Instant::now() < end {
                let Ok(p) = win.acquire().await else { break };
                p.forget();
                if w.write_all(&out).await.is_err() {
                    break;
                }
            }
            w
        });
        let mut ack = [0u8; 8];
        let mut done = 0u64;
        while Instant::now() < end {
            r.read_exact(&mut ack).await?;
            done += 1;
            window.add_permits(1);
        }
        let elapsed = start.elapsed();
        window.close();
        drop(writer.await?);
        Ok((done, elapsed))
    })
}

fn bench_keys() -> (EntityName, EntityName, Keyring) {
    let server = EntityName::osd(0);
    let client: EntityName = "client.bench"
        .parse()
        .unwrap_or_else(|_| EntityName::osd(1));
    let mut k = Keyring::default();
    k.add_generated(server.clone());
    k.add_generated(client.clone());
    (server, client, k)
}

/// A messenger server (Ping is answered by the messenger itself).
fn msgr_server(name: EntityName, keys: Keyring, net: NetConfig) -> ServerFn {
    Box::new(move |addr_tx, stop| {
        Box::pin(async move {
            let auth = Arc::new(KeyringAuth::new(name.clone(), keys));
            let m = Messenger::new(
                name,
                net,
                Arc::new(TcpTransport),
                auth,
                Arc::new(|_: Incoming| {}),
            );
            addr_tx.send(m.bind("127.0.0.1:0".parse()?).await?)?;
            let _ = stop.await;
            m.shutdown().await;
            Ok(())
        })
    })
}

fn msgr_client(name: EntityName, keys: Keyring, net: NetConfig) -> Messenger {
    let auth = Arc::new(KeyringAuth::new(name.clone(), keys));
    Messenger::new(
        name,
        net,
        Arc::new(TcpTransport),
        auth,
        Arc::new(|_: Incoming| {}),
    )
}

fn msgr_qd1(dur: Duration, net: &NetConfig) -> anyhow::Result<Vec<Duration>> {
    let (s, c, k) = bench_keys();
    let cnet = net.clone();
    two_sides(
        msgr_server(s, k.clone(), net.clone()),
        move |addr| async move {
            let m = msgr_client(c, k, cnet);
            let conn = m.connect(addr).await?;
            let data = Bytes::from(vec![2u8; SMALL]);
            let mut lat = Vec::new();
            let end = Instant::now() + dur;
            let mut seq = 0;
            while Instant::now() < end {
                let t = Instant::now();
                let r = conn.request(Ping { seq, echo: true }, data.clone()).await?;
                anyhow::ensure!(r.data.len() == SMALL, "short echo");
                lat.push(t.elapsed());
                seq += 1;
            }
            m.shutdown().await;
            Ok(lat)
        },
    )
}

fn msgr_pipelined(
    size: usize,
    inflight: usize,
    dur: Duration,
    net: &NetConfig,
) -> anyhow::Result<(u64, Duration)> {
    let (s, c, k) = bench_keys();
    let cnet = net.clone();
    two_sides(
        msgr_server(s, k.clone(), net.clone()),
        move |addr| async move {
            let m = msgr_client(c, k, cnet);
            let conn = m.connect(addr).await?;
            let data = Bytes::from(vec![3u8; size]);
            let start = Instant::now();
            let end = start + dur;
            let mut workers = Vec::new();
            for _ in 0..inflight {
                let conn = conn.clone();
                let data = data.clone();
                workers.push(tokio::spawn(async move {
                    let mut done = 0u64;
                    while Instant::now() < end {
                        conn.request(
                            Ping {
                                seq: done,
                                echo: false,
                            },
                            data.clone(),
                        )
                        .await?;
                        done += 1;
                    }
                    anyhow::Ok(done)
                }));
            }
            let mut total = 0;
            for w in workers {
                total += w.await??;
            }
            let elapsed = start.elapsed();
            m.shutdown().await;
            Ok((total, elapsed))
        },
    )
}

/// What `shoal bench counters` measured: ns of CPU per op.
#[derive(Debug, serde::Serialize)]
struct CounterCosts {
    ops: u64,
    osd_client_op_ns: f64,
    osd_subop_ns: f64,
    gateway_request_ns: f64,
    nbd_request_ns: f64,
}

/// `shoal bench counters`: ns of CPU per op spent on performance counters,
/// on one thread, through the same calls the data paths make: an OSD
/// client op (its kind and pool counters, the reply hook with its latency
/// histogram), an S3 request (by operation and status), an NBD request.
fn bench_counters(ops: u64, format: super::common::Format) -> anyhow::Result<()> {
    use shoal_net::ReplyHook;
    use std::time::Instant;
    let ops = ops.max(1);
    let per_op = |f: &mut dyn FnMut(u64)| {
        let t = Instant::now();
        for i in 0..ops {
            f(i);
        }
        t.elapsed().as_nanos() as f64 / ops as f64
    };
    let perf = shoal_osd::ctx::OsdPerf::default();
    let osd = per_op(&mut |i| {
        let started = Instant::now();
        let hook = std::sync::Arc::new(perf.client_op(i % 4, i % 2 == 0, 4096));
        let hook: std::sync::Arc<dyn ReplyHook> = hook;
        hook.replied(started, 0, false);
    });
    let subop = per_op(&mut |_| {
        let started = Instant::now();
        let hook: std::sync::Arc<dyn ReplyHook> = std::sync::Arc::clone(&perf.subop) as _;
        hook.replied(started, 0, false);
    });
    let gw = shoal_gateway::metrics::Metrics::default();
    let s3 = per_op(&mut |i| {
        let started = Instant::now();
        let op = if i % 2 == 0 { "PutObject" } else { "GetObject" };
        gw.record(op, 200, started.elapsed());
    });
    let nbd_m = shoal_nbd::metrics::Metrics::default();
    let nbd = per_op(&mut |i| {
        let started = Instant::now();
        nbd_m.record((i % 2) as u16, 4096, started.elapsed());
    });
    let v = CounterCosts {
        ops,
        osd_client_op_ns: osd,
        osd_subop_ns: subop,
        gateway_request_ns: s3,
        nbd_request_ns: nbd,
    };
    super::common::print_typed(format, &v, |v| {
        format!(
            "performance counters, ns of CPU per op ({} ops each, one thread):\n  \
             OSD client op  {:>7.1}\n  OSD sub-op     {:>7.1}\n  S3 request     {:>7.1}\n  \
             NBD request    {:>7.1}\n",
            v.ops, v.osd_client_op_ns, v.osd_subop_ns, v.gateway_request_ns, v.nbd_request_ns
        )
    });
    Ok(())
}

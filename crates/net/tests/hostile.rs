//! A messenger under hostile load, over loopback TCP: authenticated clients
//! that send large echo pings and never read the replies, and a crowd of
//! sockets that connect and say nothing, beside one well-behaved client.
//!
//! The CI test asserts what the daemon may hold (process memory and the
//! pings the hostile clients got in) and that the well-behaved client
//! completes its requests. The throughput comparison is timing, so it is an
//! `#[ignore]`d benchmark, run by hand and recorded in docs/benchmarks.md:
//!
//! ```text
//! cargo test --release -p shoal-net --test hostile -- --ignored --nocapture
//! ```
//!
//! This file holds its own test binary so the process's memory is the
//! messenger's alone, not that of tests running beside it.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_net::{
    Connection, Dispatcher, Incoming, Keyring, KeyringAuth, Messenger, NetConfig, Stream,
    TcpTransport, Transport,
};
use shoal_proto::{Message, Ping, Pong};
use shoal_types::EntityName;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::task::JoinHandle;

type BoxFuture<'a, T> = Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

const HOSTILE_CLIENTS: usize = 4;
const SILENT_SOCKETS: usize = 1000;
const PING_BYTES: usize = 4 << 20;
const SERVER_INFLIGHT_BYTES: u64 = 8 << 20;
const CLIENT_INFLIGHT_BYTES: u64 = 16 << 20;
const HANDSHAKES_MAX: u32 = 64;
const CONNECTIONS_MAX: u32 = 256;
/// The well-behaved client's request size.
const REQUEST_BYTES: usize = 64 * 1024;

fn server_name() -> EntityName {
    "mon.a".parse().unwrap()
}

fn good_name() -> EntityName {
    "client.good".parse().unwrap()
}

fn hostile_name(i: usize) -> EntityName {
    format!("client.hostile{i}").parse().unwrap()
}

/// One keyring for every entity of the process.
fn keyring() -> Keyring {
    static KEYS: std::sync::OnceLock<Keyring> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        let mut k = Keyring::default();
        k.add_generated(server_name());
        k.add_generated(good_name());
        for i in 0..HOSTILE_CLIENTS {
            k.add_generated(hostile_name(i));
        }
        k
    })
    .clone()
}

fn server_config() -> NetConfig {
    NetConfig {
        inflight_bytes_max: SERVER_INFLIGHT_BYTES,
        handshakes_max: HANDSHAKES_MAX,
        connections_max: CONNECTIONS_MAX,
        // Silent sockets stay in their handshake for the whole test: the
        // cap, not the timeout, is what is under test.
        handshake_timeout: Duration::from_secs(600),
        request_timeout: Duration::from_secs(60),
        ..NetConfig::default()
    }
}

fn client_config() -> NetConfig {
    NetConfig {
        inflight_bytes_max: CLIENT_INFLIGHT_BYTES,
        request_timeout: Duration::from_secs(60),
        ..NetConfig::default()
    }
}

/// Echoes every `Pong` request with its data.
fn echo_dispatcher() -> Arc<dyn Dispatcher> {
    Arc::new(|inc: Incoming| {
        if let (Message::Pong(p), Some(r)) = (inc.msg, inc.responder) {
            tokio::spawn(async move {
                let _ = r.reply(Pong { seq: p.seq }, inc.data).await;
            });
        }
    })
}

fn messenger(name: EntityName, cfg: NetConfig, t: Arc<dyn Transport>) -> Messenger {
    let auth = Arc::new(KeyringAuth::new(name.clone(), keyring()));
    Messenger::new(name, cfg, t, auth, Arc::new(|_: Incoming| {}))
}

/// Stops every stream it made from reading while closed, and wakes them
/// when opened again: a client that never reads its replies.
#[derive(Default)]
struct Gate {
    closed: AtomicBool,
    waiting: Mutex<Vec<Waker>>,
}

impl Gate {
    fn set_closed(&self, closed: bool) {
        self.closed.store(closed, Ordering::SeqCst);
        if !closed {
            self.waiting.lock().unwrap().drain(..).for_each(Waker::wake);
        }
    }
}

struct GatedRead {
    inner: Box<dyn AsyncRead + Unpin + Send>,
    gate: Arc<Gate>,
}

impl AsyncRead for GatedRead {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.gate.closed.load(Ordering::SeqCst) {
            self.gate.waiting.lock().unwrap().push(cx.waker().clone());
            // Opened between the check and the push: do not sleep forever.
            if self.gate.closed.load(Ordering::SeqCst) {
                return Poll::Pending;
            }
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

/// TCP whose streams read only while the gate is open.
struct GatedTcp(Arc<Gate>);

impl Transport for GatedTcp {
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<Stream>> {
        Box::pin(async move {
            let s = TcpTransport.connect(addr).await?;
            Ok(Stream {
                read: Box::new(GatedRead {
                    inner: s.read,
                    gate: Arc::clone(&self.0),
                }),
                write: s.write,
                peer_addr: s.peer_addr,
            })
        })
    }
    fn bind(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<shoal_net::BoxListener>> {
        TcpTransport.bind(addr)
    }
}

/// The server and its well-behaved client.
struct Bench {
    server: Messenger,
    addr: SocketAddr,
    good: Messenger,
    good_conn: Connection,
}

impl Bench {
    async fn start() -> Bench {
        let server = Messenger::new(
            server_name(),
            server_config(),
            Arc::new(TcpTransport),
            Arc::new(KeyringAuth::new(server_name(), keyring())),
            echo_dispatcher(),
        );
        let addr = server.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let good = messenger(good_name(), client_config(), Arc::new(TcpTransport));
        let good_conn = good.connect(addr).await.unwrap();
        Bench {
            server,
            addr,
            good,
            good_conn,
        }
    }

    /// One request of `REQUEST_BYTES`, echoed.
    async fn request(&self, seq: u64, data: &Bytes) {
        let r = self.good_conn.request(Pong { seq }, data.clone()).await;
        let r = r.unwrap();
        assert_eq!(r.msg, Message::Pong(Pong { seq }));
        assert_eq!(r.data.len(), data.len());
    }

    async fn stop(self) {
        self.good.shutdown().await;
        self.server.shutdown().await;
    }
}

/// Clients that ping with `PING_BYTES` of echo and never read, and the
/// sockets that connect and stay silent.
struct Attack {
    gate: Arc<Gate>,
    hostiles: Vec<Messenger>,
    senders: Vec<JoinHandle<()>>,
    /// Pings the hostile clients got queued (each one left or will leave).
    pings_sent: Arc<AtomicU64>,
    silent: Vec<tokio::net::TcpStream>,
}

impl Attack {
    async fn start(addr: SocketAddr, silent: usize) -> Attack {
        let gate = Arc::new(Gate::default());
        let pings_sent = Arc::new(AtomicU64::new(0));
        let data = Bytes::from(vec![0x5a; PING_BYTES]);
        let mut hostiles = Vec::new();
        let mut senders = Vec::new();
        for i in 0..HOSTILE_CLIENTS {
            let t = Arc::new(GatedTcp(Arc::clone(&gate)));
            let m = messenger(hostile_name(i), client_config(), t);
            let conn = m.connect(addr).await.unwrap();
            hostiles.push(m);
            let (data, sent) = (data.clone(), Arc::clone(&pings_sent));
            senders.push(tokio::spawn(async move {
                for seq in 0.. {
                    let ping = Ping { seq, echo: true };
                    // The reply is never awaited: dropping it forgets the
                    // request, the pong is still sent.
                    if conn.submit(ping, data.clone()).await.is_err() {
                        return;
                    }
                    sent.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
        // Every hostile client has finished its handshake: from now on they
        // read nothing.
        gate.set_closed(true);
        let mut socks = Vec::with_capacity(silent);
        for _ in 0..silent {
            socks.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        Attack {
            gate,
            hostiles,
            senders,
            pings_sent,
            silent: socks,
        }
    }

    async fn stop(self) {
        for s in &self.senders {
            s.abort();
        }
        drop(self.silent);
        // Reading again lets both sides drain, so shutdown is quick.
        self.gate.set_closed(false);
        for m in self.hostiles {
            m.shutdown().await;
        }
    }
}

/// Waits until `cond` holds (polled). The deadline is a hang guard, far
/// above any wait the test expects, not a timing bound.
async fn wait_until(mut cond: impl FnMut() -> bool) {
    let waiting = async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .is_err()
    {
        panic!("condition not reached in 60 s");
    }
}

/// A `/proc/self/status` figure, in bytes.
fn proc_status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib * 1024
}

/// The largest TCP send and receive buffers the kernel may give a socket.
fn tcp_buffers_max_bytes() -> u64 {
    let max_of = |path: &str| -> u64 {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.split_whitespace().last()?.parse().ok())
            .unwrap_or(64 << 20)
    };
    let wmem = max_of("/proc/sys/net/ipv4/tcp_wmem").max(max_of("/proc/sys/net/core/wmem_max"));
    let rmem = max_of("/proc/sys/net/ipv4/tcp_rmem").max(max_of("/proc/sys/net/core/rmem_max"));
    wmem + rmem
}

/// How many silent sockets the fd limit allows: each takes one descriptor
/// here and, until refused, one in the server.
fn silent_sockets() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let soft = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3)?.parse::<usize>().ok())
        .unwrap_or(1024);
    let room = soft.saturating_sub(256 + HANDSHAKES_MAX as usize);
    if room < SILENT_SOCKETS {
        eprintln!("fd soft limit {soft}: running {room} silent sockets, not {SILENT_SOCKETS}");
    }
    room.min(SILENT_SOCKETS)
}

/// Waits until the listener holds `HANDSHAKES_MAX` silent sockets in their
/// handshake and has refused the rest (beyond the `refused_before` of
/// earlier rounds), and every hostile connection has filled the server's
/// send budget.
async fn wait_for_siege(server: &Messenger, silent: usize, refused_before: u64) {
    let refused = refused_before + silent.saturating_sub(HANDSHAKES_MAX as usize) as u64;
    let in_handshake = silent.min(HANDSHAKES_MAX as usize) as u64;
    wait_until(|| {
        let s = server.stats();
        s.connections_refused == refused && s.handshakes_in_progress == in_handshake
    })
    .await;
    wait_until(|| {
        let full: Vec<Connection> = server
            .connections()
            .into_iter()
            .filter(|c| c.peer().name.to_string().starts_with("client.hostile"))
            .filter(|c| c.queued_bytes() + PING_BYTES as u64 > SERVER_INFLIGHT_BYTES)
            .collect();
        full.len() == HOSTILE_CLIENTS
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_pingers_and_silent_sockets_are_bounded_and_a_good_client_is_served() {
    const REQUESTS: u64 = 200;
    let bench = Bench::start().await;
    let data = Bytes::from(vec![7u8; REQUEST_BYTES]);
    for seq in 0..20 {
        bench.request(seq, &data).await;
    }
    let rss_before = proc_status_bytes("VmRSS:");
    let silent = silent_sockets();
    let attack = Attack::start(bench.addr, silent).await;
    wait_for_siege(&bench.server, silent, 0).await;

    // The well-behaved client is served while the siege holds.
    for seq in 0..REQUESTS {
        bench.request(seq, &data).await;
    }
    let stats = bench.server.stats();
    assert_eq!(
        stats.connections,
        1 + HOSTILE_CLIENTS,
        "silent sockets never became connections"
    );
    assert_eq!(stats.handshakes_in_progress, u64::from(HANDSHAKES_MAX));

    // What the hostile clients got in: each ping is in its own send budget,
    // a kernel buffer, the server's receive buffer or reader, or (as its
    // pong) the server's send budget or a kernel buffer on the way back.
    // Without the bound the server reads pings as fast as they come.
    let per_client = CLIENT_INFLIGHT_BYTES + SERVER_INFLIGHT_BYTES + 2 * tcp_buffers_max_bytes();
    let pings_max = HOSTILE_CLIENTS as u64 * (per_client / PING_BYTES as u64 + 3);
    let pings = attack.pings_sent.load(Ordering::SeqCst);
    assert!(
        pings <= pings_max,
        "{pings} pings got in, at most {pings_max} fit"
    );
    for c in bench.server.connections() {
        assert!(c.queued_bytes() <= SERVER_INFLIGHT_BYTES);
    }

    // Memory: the stated bound is, per hostile client, the server's send
    // budget plus two pings (one in the receive buffer, one whose pong waits
    // for the budget) plus the client's own ping data (one shared copy), and
    // 48 MiB for everything else (silent sockets, allocator slack, runtime).
    let bound =
        HOSTILE_CLIENTS as u64 * (SERVER_INFLIGHT_BYTES + 3 * PING_BYTES as u64) + (48 << 20);
    let peak = proc_status_bytes("VmHWM:");
    let grown = peak.saturating_sub(rss_before);
    eprintln!(
        "silent sockets {silent}, refused {}, pings in {pings} (max {pings_max}), \
         peak RSS grew {} MiB (bound {} MiB)",
        stats.connections_refused,
        grown >> 20,
        bound >> 20
    );
    assert!(
        grown <= bound,
        "peak RSS grew {grown} bytes under attack, bound {bound}"
    );
    attack.stop().await;
    bench.stop().await;
}

/// Requests the well-behaved client completes in `window`, 4 in flight.
async fn throughput(bench: &Bench, window: Duration) -> u64 {
    let data = Bytes::from(vec![7u8; REQUEST_BYTES]);
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + window;
    let mut workers = Vec::new();
    for w in 0..4u64 {
        let (conn, data, done) = (bench.good_conn.clone(), data.clone(), Arc::clone(&done));
        workers.push(tokio::spawn(async move {
            let mut seq = w << 32;
            while Instant::now() < until {
                conn.request(Pong { seq }, data.clone()).await.unwrap();
                done.fetch_add(1, Ordering::Relaxed);
                seq += 1;
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    done.load(Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: timing on a shared machine; run by hand, see docs/benchmarks.md"]
async fn bench_good_client_throughput_under_attack() {
    const ROUNDS: usize = 3;
    let window = Duration::from_secs(3);
    let bench = Bench::start().await;
    let (mut quiet, mut sieged) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        quiet.push(throughput(&bench, window).await);
        let silent = silent_sockets();
        let refused_before = bench.server.stats().connections_refused;
        let attack = Attack::start(bench.addr, silent).await;
        wait_for_siege(&bench.server, silent, refused_before).await;
        sieged.push(throughput(&bench, window).await);
        attack.stop().await;
        // The next quiet round starts once the attack is gone.
        wait_until(|| {
            let s = bench.server.stats();
            s.connections == 1 && s.handshakes_in_progress == 0
        })
        .await;
    }
    quiet.sort_unstable();
    sieged.sort_unstable();
    let (q, s) = (quiet[ROUNDS / 2], sieged[ROUNDS / 2]);
    let per_s = |n: u64| n as f64 / window.as_secs_f64();
    println!(
        "good client, 64 KiB echo requests, 4 in flight, median of {ROUNDS} rounds of {window:?}"
    );
    println!("  alone:        {:>8.0} req/s  {quiet:?}", per_s(q));
    println!(
        "  under attack: {:>8.0} req/s  {sieged:?}  ({HOSTILE_CLIENTS} hostile pingers, {} silent sockets)",
        per_s(s),
        silent_sockets()
    );
    println!("  ratio:        {:.2}", s as f64 / q as f64);
    bench.stop().await;
    assert!(
        s * 10 >= q * 8,
        "under attack {s} requests, alone {q}: below 80 %"
    );
}

/// One task answers every request in arrival order, as a PG does: a reply
/// to a peer that reads nothing must not hold up the replies to others.
/// `Responder::reply` returns at once; a reply waiting for the slow peer's
/// send budget waits in a task of its own, bounded by that peer's dispatch
/// slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_task_answering_in_order_serves_a_good_client_while_a_peer_reads_nothing() {
    const HOSTILE_REQUESTS: u64 = 16;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Incoming>();
    let ordered: Arc<dyn Dispatcher> = Arc::new(move |inc: Incoming| {
        let _ = tx.send(inc);
    });
    let answered = Arc::new(AtomicU64::new(0));
    let count = Arc::clone(&answered);
    let answering = tokio::spawn(async move {
        while let Some(inc) = rx.recv().await {
            if let (Message::Pong(p), Some(r)) = (inc.msg, inc.responder) {
                let _ = r.reply(Pong { seq: p.seq }, inc.data).await;
                count.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    let server = Messenger::new(
        server_name(),
        server_config(),
        Arc::new(TcpTransport),
        Arc::new(KeyringAuth::new(server_name(), keyring())),
        ordered,
    );
    let addr = server.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();

    // The slow peer: 16 echo requests of 4 MiB, far more than its socket
    // buffers and the server's 8 MiB send budget hold, and it reads nothing.
    let gate = Arc::new(Gate::default());
    let slow = messenger(
        hostile_name(0),
        client_config(),
        Arc::new(GatedTcp(gate.clone())),
    );
    let slow_conn = slow.connect(addr).await.unwrap();
    gate.set_closed(true);
    let data = Bytes::from(vec![0x5a; PING_BYTES]);
    let mut slow_requests = Vec::new();
    for seq in 0..HOSTILE_REQUESTS {
        let pending = slow_conn.submit(Pong { seq }, data.clone()).await.unwrap();
        slow_requests.push(pending);
    }
    // The server has taken them in and its budget toward the slow peer is spent.
    wait_until(|| answered.load(Ordering::SeqCst) >= 3).await;
    wait_until(|| {
        server
            .connections()
            .iter()
            .any(|c| c.queued_bytes() + PING_BYTES as u64 > SERVER_INFLIGHT_BYTES)
    })
    .await;

    // The good client is answered by the same task meanwhile.
    let good = messenger(good_name(), client_config(), Arc::new(TcpTransport));
    let good_conn = good.connect(addr).await.unwrap();
    let small = Bytes::from(vec![1u8; 4096]);
    for seq in 1000..1050 {
        let r = good_conn
            .request(Pong { seq }, small.clone())
            .await
            .unwrap();
        assert_eq!(r.msg, Message::Pong(Pong { seq }));
    }
    for c in server.connections() {
        assert!(c.queued_bytes() <= SERVER_INFLIGHT_BYTES);
    }

    // Once it reads again the slow peer gets every reply.
    gate.set_closed(false);
    for (seq, p) in slow_requests.into_iter().enumerate() {
        let r = p.wait(Duration::from_secs(60)).await.unwrap();
        assert_eq!(r.msg, Message::Pong(Pong { seq: seq as u64 }));
        assert_eq!(r.data.len(), PING_BYTES);
    }
    slow.shutdown().await;
    good.shutdown().await;
    server.shutdown().await;
    answering.abort();
}

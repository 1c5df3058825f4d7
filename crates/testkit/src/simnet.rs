//! [`SimNet`]: a network for the deterministic simulation, with faults.
//!
//! Every node (a monitor, an OSD, a client) gets its own [`SimHost`]
//! handle, a [`Transport`]. Streams are in-order byte pipes whose chunks
//! arrive after a latency drawn from the seeded [`SimRng`] (so messages on
//! different connections overtake each other), under tokio's clock (virtual
//! when paused). The simulation can
//!
//! - **partition** two nodes: their streams break, and connecting hangs for
//!   a while and then times out, as to an unreachable host;
//! - **black-hole** one direction between two nodes (or both, as two):
//!   what is written that way is held silently — no error, no reset, the
//!   connection stays open, as when a switch drops packets and TCP keeps
//!   retransmitting — and arrives, in order, once the network heals;
//!   connecting between them hangs and then times out;
//! - **slow** a link: its chunks take a latency from a wider range;
//! - **kill** a node: its streams break, its listeners close, connecting to
//!   it is refused (the host is up, the process is gone), and the killed
//!   incarnation's handle can do nothing more (its tasks hang, as a dead
//!   process's would).
//!
//! Everything is driven from one thread, so the order of events — and of
//! draws from the generator — is the same for the same seed.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use shoal_net::{BoxListener, Stream, Transport};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A small deterministic generator (SplitMix64): the simulation's only
/// source of randomness.
#[derive(Debug, Clone)]
pub struct SimRng(u64);

impl SimRng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SimRng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi]` (`lo` if the range is empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next_u64() % den.max(1) < num
    }

    /// One element of `items` (None if empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            return None;
        }
        let i = self.range(0, items.len() as u64 - 1) as usize;
        items.get(i)
    }
}

/// Latency of a link, in milliseconds (inclusive range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latency {
    /// Shortest.
    pub min_ms: u64,
    /// Longest.
    pub max_ms: u64,
}

/// One direction of a stream.
#[derive(Debug, Default)]
struct Pipe {
    chunks: VecDeque<(Instant, Bytes)>,
    /// When the last chunk arrives: later chunks never arrive before it.
    last: Option<Instant>,
    /// The writer shut down: EOF once the chunks are read.
    eof: bool,
    /// The link broke.
    broken: bool,
    /// Its direction is black-holed: nothing is delivered (what is written
    /// waits) until the network heals.
    held: bool,
    reader: Option<Waker>,
}

#[derive(Debug)]
struct Link {
    a: String,
    b: String,
    /// a → b, b → a.
    pipes: [Mutex<Pipe>; 2],
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Link {
    fn breaks(&self) {
        for p in &self.pipes {
            let mut p = lock(p);
            p.broken = true;
            if let Some(w) = p.reader.take() {
                w.wake();
            }
        }
    }
}

#[derive(Debug)]
struct Listening {
    node: String,
    incarnation: u64,
    backlog: mpsc::UnboundedSender<Stream>,
}

#[derive(Debug)]
struct NetState {
    rng: SimRng,
    latency: Latency,
    slow: BTreeMap<(String, String), Latency>,
    partitions: BTreeSet<(String, String)>,
    /// Black-holed directions: (from, to).
    holes: BTreeSet<(String, String)>,
    /// Current incarnation of each node (a kill starts the next).
    incarnations: BTreeMap<String, u64>,
    listeners: BTreeMap<SocketAddr, Listening>,
    links: Vec<Weak<Link>>,
    next_port: u16,
    /// Bytes carried, and streams broken by faults.
    bytes: u64,
    broken: u64,
}

fn pair(a: &str, b: &str) -> (String, String) {
    if a <= b {
        (a.to_string(), b.to_string())
    } else {
        (b.to_string(), a.to_string())
    }
}

/// The simulated network. Cloning shares it.
#[derive(Debug, Clone)]
pub struct SimNet {
    state: Arc<Mutex<NetState>>,
}

impl SimNet {
    /// A network whose latencies come from `seed`, each in `latency`.
    pub fn new(seed: u64, latency: Latency) -> SimNet {
        SimNet {
            state: Arc::new(Mutex::new(NetState {
                rng: SimRng::new(seed),
                latency,
                slow: BTreeMap::new(),
                partitions: BTreeSet::new(),
                holes: BTreeSet::new(),
                incarnations: BTreeMap::new(),
                listeners: BTreeMap::new(),
                links: Vec::new(),
                next_port: 0,
                bytes: 0,
                broken: 0,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, NetState> {
        lock(&self.state)
    }

    /// The transport of `node`'s current incarnation.
    pub fn host(&self, node: &str) -> Arc<SimHost> {
        let incarnation = *self
            .lock()
            .incarnations
            .entry(node.to_string())
            .or_insert(0);
        Arc::new(SimHost {
            net: self.clone(),
            node: node.to_string(),
            incarnation,
        })
    }

    /// Cuts `a` off from `b` (both ways): their streams break and new
    /// connections time out, until [`SimNet::heal`].
    pub fn partition(&self, a: &str, b: &str) {
        let mut st = self.lock();
        st.partitions.insert(pair(a, b));
        Self::break_links(&mut st, |l| pair(&l.a, &l.b) == pair(a, b));
    }

    /// Black-holes the direction from `from` to `to`: what either writes
    /// that way is held without a word, on connections that stay open,
    /// and new connections between them time out, until
    /// [`SimNet::heal`].
    pub fn black_hole(&self, from: &str, to: &str) {
        let mut st = self.lock();
        st.holes.insert((from.to_string(), to.to_string()));
        st.links.retain(|w| w.strong_count() > 0);
        for l in st.links.iter().filter_map(Weak::upgrade) {
            for (i, (src, dst)) in [(&l.a, &l.b), (&l.b, &l.a)].into_iter().enumerate() {
                if src == from && dst == to {
                    lock(&l.pipes[i]).held = true;
                }
            }
        }
    }

    /// Ends every partition, black hole and slow link; what black holes
    /// held arrives (after a latency, in order).
    pub fn heal(&self) {
        let mut st = self.lock();
        st.partitions.clear();
        st.slow.clear();
        st.holes.clear();
        st.links.retain(|w| w.strong_count() > 0);
        let links: Vec<Arc<Link>> = st.links.iter().filter_map(Weak::upgrade).collect();
        for l in links {
            for p in &l.pipes {
                let mut p = lock(p);
                if !p.held {
                    continue;
                }
                p.held = false;
                // Retransmitted now: each chunk arrives a latency from
                // now at the earliest, still in order.
                let l = st.latency;
                let at = Instant::now() + Duration::from_millis(st.rng.range(l.min_ms, l.max_ms));
                for c in p.chunks.iter_mut() {
                    c.0 = c.0.max(at);
                }
                if let Some(last) = p.last.as_mut() {
                    *last = (*last).max(at);
                }
                if let Some(w) = p.reader.take() {
                    w.wake();
                }
            }
        }
    }

    /// The black-holed directions in force.
    pub fn black_holes(&self) -> Vec<(String, String)> {
        self.lock().holes.iter().cloned().collect()
    }

    /// Chunks between `a` and `b` take a latency in `latency`.
    pub fn slow(&self, a: &str, b: &str, latency: Latency) {
        self.lock().slow.insert(pair(a, b), latency);
    }

    /// The partitions in force.
    pub fn partitions(&self) -> Vec<(String, String)> {
        self.lock().partitions.iter().cloned().collect()
    }

    /// Kills `node`'s current incarnation (see the module doc).
    pub fn kill(&self, node: &str) {
        let mut st = self.lock();
        *st.incarnations.entry(node.to_string()).or_insert(0) += 1;
        st.listeners.retain(|_, l| l.node != node);
        Self::break_links(&mut st, |l| l.a == node || l.b == node);
    }

    /// Bytes carried so far, and streams broken by faults.
    pub fn counters(&self) -> (u64, u64) {
        let st = self.lock();
        (st.bytes, st.broken)
    }

    fn break_links(st: &mut NetState, which: impl Fn(&Link) -> bool) {
        st.links.retain(|w| w.strong_count() > 0);
        let mut broken = 0;
        for l in st.links.iter().filter_map(Weak::upgrade) {
            if which(&l) {
                l.breaks();
                broken += 1;
            }
        }
        st.broken += broken;
    }

    /// The latency of one chunk from `from` to `to`.
    fn delay(&self, from: &str, to: &str) -> Duration {
        let mut st = self.lock();
        let l = st.slow.get(&pair(from, to)).copied().unwrap_or(st.latency);
        Duration::from_millis(st.rng.range(l.min_ms, l.max_ms))
    }

    fn alive(&self, node: &str, incarnation: u64) -> bool {
        self.lock().incarnations.get(node).copied().unwrap_or(0) == incarnation
    }
}

/// One node's view of the [`SimNet`].
#[derive(Debug)]
pub struct SimHost {
    net: SimNet,
    node: String,
    incarnation: u64,
}

enum Reach {
    /// The listening node, its incarnation, its backlog.
    Ok(String, u64, mpsc::UnboundedSender<Stream>),
    Refused,
    Unreachable(Duration),
}

impl SimHost {
    fn reach(&self, addr: SocketAddr) -> Reach {
        let mut st = self.net.lock();
        let Some(l) = st.listeners.get(&addr) else {
            return Reach::Refused;
        };
        let (to, inc, backlog) = (l.node.clone(), l.incarnation, l.backlog.clone());
        let holed = st.holes.contains(&(self.node.clone(), to.clone()))
            || st.holes.contains(&(to.clone(), self.node.clone()));
        if st.partitions.contains(&pair(&self.node, &to)) || holed {
            return Reach::Unreachable(Duration::from_millis(st.rng.range(200, 1500)));
        }
        Reach::Ok(to, inc, backlog)
    }

    fn stream(&self, link: &Arc<Link>, forward: bool, peer_addr: SocketAddr) -> Stream {
        let (out, inn) = if forward { (0, 1) } else { (1, 0) };
        let (me, them) = if forward {
            (&link.a, &link.b)
        } else {
            (&link.b, &link.a)
        };
        Stream {
            read: Box::new(SimRead {
                link: Arc::clone(link),
                pipe: inn,
                chunk: Bytes::new(),
                sleep: None,
            }),
            write: Box::new(SimWrite {
                link: Arc::clone(link),
                pipe: out,
                net: self.net.clone(),
                from: me.clone(),
                to: them.clone(),
            }),
            peer_addr,
        }
    }
}

impl Transport for SimHost {
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<Stream>> {
        Box::pin(async move {
            if !self.net.alive(&self.node, self.incarnation) {
                return std::future::pending().await;
            }
            let (to, their_inc, backlog) = match self.reach(addr) {
                Reach::Ok(to, inc, b) => (to, inc, b),
                Reach::Refused => {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionRefused,
                        "connection refused",
                    ));
                }
                Reach::Unreachable(after) => {
                    tokio::time::sleep(after).await;
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "host unreachable"));
                }
            };
            // The handshake's round trip; a node killed meanwhile connects
            // nowhere (its kernel would have closed the socket).
            tokio::time::sleep(self.net.delay(&self.node, &to)).await;
            if !self.net.alive(&self.node, self.incarnation) {
                return std::future::pending().await;
            }
            let link = Arc::new(Link {
                a: self.node.clone(),
                b: to,
                pipes: [Mutex::default(), Mutex::default()],
            });
            let local = {
                let mut st = self.net.lock();
                // The listener killed (or replaced) meanwhile resets.
                let same = st
                    .listeners
                    .get(&addr)
                    .is_some_and(|l| l.incarnation == their_inc);
                if st.partitions.contains(&pair(&link.a, &link.b)) || !same {
                    return Err(io::Error::new(io::ErrorKind::ConnectionReset, "reset"));
                }
                let holed = st.holes.contains(&(link.a.clone(), link.b.clone()))
                    || st.holes.contains(&(link.b.clone(), link.a.clone()));
                if holed {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "host unreachable"));
                }
                st.links.push(Arc::downgrade(&link));
                st.next_port = st.next_port.wrapping_add(1);
                SocketAddr::new(
                    IpAddr::V4(Ipv4Addr::new(10, 9, 0, 1)),
                    20_000 + st.next_port % 40_000,
                )
            };
            let server = self.stream(&link, false, local);
            backlog
                .send(server)
                .map_err(|_| io::Error::new(io::ErrorKind::ConnectionRefused, "refused"))?;
            Ok(self.stream(&link, true, addr))
        })
    }

    fn bind(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<BoxListener>> {
        Box::pin(async move {
            let (tx, rx) = mpsc::unbounded_channel();
            let mut st = self.net.lock();
            if st.listeners.contains_key(&addr) {
                return Err(io::Error::new(io::ErrorKind::AddrInUse, "address in use"));
            }
            st.listeners.insert(
                addr,
                Listening {
                    node: self.node.clone(),
                    incarnation: self.incarnation,
                    backlog: tx,
                },
            );
            Ok(Box::new(SimListener {
                addr,
                rx,
                net: self.net.clone(),
                incarnation: self.incarnation,
            }) as BoxListener)
        })
    }
}

struct SimListener {
    addr: SocketAddr,
    rx: mpsc::UnboundedReceiver<Stream>,
    net: SimNet,
    incarnation: u64,
}

impl Drop for SimListener {
    fn drop(&mut self) {
        let mut st = self.net.lock();
        if st
            .listeners
            .get(&self.addr)
            .is_some_and(|l| l.incarnation == self.incarnation)
        {
            st.listeners.remove(&self.addr);
        }
    }
}

impl shoal_net::Listener for SimListener {
    fn local_addr(&self) -> SocketAddr {
        self.addr
    }
    fn accept(&mut self) -> BoxFuture<'_, io::Result<Stream>> {
        Box::pin(async move {
            match self.rx.recv().await {
                Some(s) => Ok(s),
                // Killed: a dead process accepts nothing, and does not spin.
                None => std::future::pending().await,
            }
        })
    }
}

struct SimWrite {
    link: Arc<Link>,
    pipe: usize,
    net: SimNet,
    from: String,
    to: String,
}

impl AsyncWrite for SimWrite {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let delay = self.net.delay(&self.from, &self.to);
        let mut p = lock(&self.link.pipes[self.pipe]);
        if p.broken {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "link broken",
            )));
        }
        let at = (Instant::now() + delay).max(p.last.unwrap_or_else(Instant::now));
        p.last = Some(at);
        p.chunks.push_back((at, Bytes::copy_from_slice(buf)));
        if let Some(w) = p.reader.take() {
            w.wake();
        }
        drop(p);
        self.net.lock().bytes += buf.len() as u64;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut p = lock(&self.link.pipes[self.pipe]);
        p.eof = true;
        if let Some(w) = p.reader.take() {
            w.wake();
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for SimWrite {
    fn drop(&mut self) {
        let mut p = lock(&self.link.pipes[self.pipe]);
        p.eof = true;
        if let Some(w) = p.reader.take() {
            w.wake();
        }
    }
}

struct SimRead {
    link: Arc<Link>,
    pipe: usize,
    /// What is left of the chunk being read.
    chunk: Bytes,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl AsyncRead for SimRead {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.chunk.is_empty() {
                let n = self.chunk.len().min(buf.remaining());
                let part = self.chunk.split_to(n);
                buf.put_slice(&part);
                return Poll::Ready(Ok(()));
            }
            let link = Arc::clone(&self.link);
            let mut p = lock(&link.pipes[self.pipe]);
            if p.broken {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    "link broken",
                )));
            }
            if p.held {
                // Nothing crosses a black hole; heal wakes the reader.
                p.reader = Some(cx.waker().clone());
                return Poll::Pending;
            }
            let Some((at, _)) = p.chunks.front() else {
                if p.eof {
                    return Poll::Ready(Ok(()));
                }
                p.reader = Some(cx.waker().clone());
                return Poll::Pending;
            };
            let at = *at;
            if at > Instant::now() {
                // Wake when it arrives, or when the link breaks.
                p.reader = Some(cx.waker().clone());
                drop(p);
                let sleep = self
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
                if sleep.deadline() != at {
                    sleep.as_mut().reset(at);
                }
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                continue;
            }
            if let Some((_, bytes)) = p.chunks.pop_front() {
                drop(p);
                self.chunk = bytes;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
    }

    /// A black hole holds what crosses it without an error, on a
    /// connection that stays open, delivers it in order once healed, and
    /// makes new connections time out meanwhile; the other way still
    /// flows when only one way is holed.
    #[tokio::test(start_paused = true)]
    async fn a_black_hole_holds_silently_and_delivers_on_heal() {
        let net = SimNet::new(
            7,
            Latency {
                min_ms: 1,
                max_ms: 5,
            },
        );
        let (a, b) = (net.host("a"), net.host("b"));
        let mut listener = b.bind(addr(1)).await.unwrap();
        let mut to_b = a.connect(addr(1)).await.unwrap();
        let mut at_b = listener.accept().await.unwrap();

        net.black_hole("a", "b");
        to_b.write.write_all(b"held").await.unwrap();
        let mut buf = [0u8; 4];
        let r = tokio::time::timeout(Duration::from_secs(30), at_b.read.read_exact(&mut buf)).await;
        assert!(r.is_err(), "nothing crosses the hole, and no error either");
        // b → a still flows.
        at_b.write.write_all(b"back").await.unwrap();
        to_b.read.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"back");
        // Connecting across it times out.
        let e = a.connect(addr(1)).await.err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(net.black_holes(), vec![("a".to_string(), "b".to_string())]);

        net.heal();
        to_b.write.write_all(b"more").await.unwrap();
        let mut all = [0u8; 8];
        at_b.read.read_exact(&mut all).await.unwrap();
        assert_eq!(&all, b"heldmore");
        assert!(net.black_holes().is_empty());
    }
}

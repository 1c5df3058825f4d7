//! The [`Messenger`]: one per daemon or client. It listens, accepts and
//! authenticates connections, opens (and re-opens, with backoff) connections
//! to peers by address, keeps at most one connection per peer address, and
//! shuts everything down cleanly. Each listener admits at most
//! `connections_max` accepted connections, `handshakes_max` of them in their
//! handshake; sockets past either limit are closed at once.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use bytes::BytesMut;
use shoal_proto::RejectCode;
use shoal_types::EntityName;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::admission::{Admission, Admitted, ListenerLoad};
use crate::auth::AuthProvider;
use crate::config::NetConfig;
use crate::conn::{self, Connection, Dispatcher, PeerInfo};
use crate::error::{HandshakeError, NetError};
use crate::handshake::{self, Established};
use crate::secure::{SecureReader, SecureWriter};
use crate::transport::{BoxListener, Stream, Transport};

/// How long shutdown waits for connections to flush before aborting them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Counters for tests, health and `shoal status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MessengerStats {
    /// Established connections, both directions.
    pub connections: usize,
    /// Accepted sockets still in their handshake.
    pub handshakes_in_progress: u64,
    /// Incoming handshakes that failed (any reason).
    pub handshake_failures: u64,
    /// Incoming connections that completed their handshake.
    pub connections_accepted: u64,
    /// Accepted sockets closed at once because a listener was at its
    /// `connections_max` or `handshakes_max`.
    pub connections_refused: u64,
}

type PeerSlot = Arc<tokio::sync::Mutex<Option<Connection>>>;

struct Tracked {
    conn: Connection,
    _tasks: [JoinHandle<()>; 2],
}

struct Inner {
    me: EntityName,
    config: Arc<NetConfig>,
    transport: Arc<dyn Transport>,
    auth: Arc<dyn AuthProvider>,
    dispatcher: Arc<dyn Dispatcher>,
    listen: Mutex<Option<SocketAddr>>,
    peers: Mutex<BTreeMap<SocketAddr, PeerSlot>>,
    conns: Mutex<BTreeMap<u64, Tracked>>,
    next_conn: AtomicU64,
    tasks: Mutex<JoinSet<()>>,
    shutdown: watch::Sender<bool>,
    handshakes_in_progress: AtomicU64,
    handshake_failures: AtomicU64,
    connections_accepted: AtomicU64,
    connections_refused: AtomicU64,
}

/// A messenger. Clones share it.
#[derive(Clone)]
pub struct Messenger {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Messenger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Messenger({})", self.inner.me)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here leaves its map consistent, even on panic.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Messenger {
    /// A messenger for entity `me`. `dispatcher` receives every request and
    /// one-way message on every connection.
    pub fn new(
        me: EntityName,
        config: NetConfig,
        transport: Arc<dyn Transport>,
        auth: Arc<dyn AuthProvider>,
        dispatcher: Arc<dyn Dispatcher>,
    ) -> Messenger {
        Messenger {
            inner: Arc::new(Inner {
                me,
                config: Arc::new(config),
                transport,
                auth,
                dispatcher,
                listen: Mutex::new(None),
                peers: Mutex::new(BTreeMap::new()),
                conns: Mutex::new(BTreeMap::new()),
                next_conn: AtomicU64::new(1),
                tasks: Mutex::new(JoinSet::new()),
                shutdown: watch::channel(false).0,
                handshakes_in_progress: AtomicU64::new(0),
                handshake_failures: AtomicU64::new(0),
                connections_accepted: AtomicU64::new(0),
                connections_refused: AtomicU64::new(0),
            }),
        }
    }

    /// Our entity name.
    pub fn name(&self) -> &EntityName {
        &self.inner.me
    }

    /// The address we listen on, once bound.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        *lock(&self.inner.listen)
    }

    /// Listens on `addr` and accepts connections until shutdown. Returns the
    /// bound address (useful with port 0).
    pub async fn bind(&self, addr: SocketAddr) -> Result<SocketAddr, NetError> {
        let listener = self
            .inner
            .transport
            .bind(addr)
            .await
            .map_err(|e| NetError::Bind {
                addr: addr.to_string(),
                reason: e.to_string(),
            })?;
        let local = listener.local_addr();
        *lock(&self.inner.listen) = Some(local);
        let weak = Arc::downgrade(&self.inner);
        let stop = self.inner.shutdown.subscribe();
        let cfg = &self.inner.config;
        let load = ListenerLoad::new(cfg.handshakes_max, cfg.connections_max);
        self.inner
            .spawn_tracked(accept_loop(weak, listener, load, stop));
        tracing::info!(entity = %self.inner.me, addr = %local, "listening");
        Ok(local)
    }

    /// The connection to the peer listening at `addr`, established (with
    /// retries and exponential backoff) if there is none.
    pub async fn connect(&self, addr: SocketAddr) -> Result<Connection, NetError> {
        self.connect_attempts(addr, self.inner.config.reconnect_attempts)
            .await
    }

    /// [`Messenger::connect`] with a single attempt: for a caller that
    /// races several peers and does its own retrying (monitor hunting), so
    /// a dead peer costs one refused or timed-out connect, not a backoff.
    pub async fn connect_once(&self, addr: SocketAddr) -> Result<Connection, NetError> {
        self.connect_attempts(addr, 1).await
    }

    async fn connect_attempts(
        &self,
        addr: SocketAddr,
        attempts: u32,
    ) -> Result<Connection, NetError> {
        let slot = lock(&self.inner.peers).entry(addr).or_default().clone();
        let mut current = slot.lock().await;
        if let Some(c) = current.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let cfg = &self.inner.config;
        let mut delay = cfg.backoff_min;
        let mut attempt = 1;
        loop {
            if *self.inner.shutdown.borrow() {
                return Err(NetError::Shutdown);
            }
            match self.inner.establish(addr).await {
                Ok(c) => {
                    *current = Some(c.clone());
                    return Ok(c);
                }
                Err(e) if !e.is_transient() || attempt >= attempts => return Err(e),
                Err(e) => {
                    tracing::debug!(%addr, attempt, "connect failed, retrying in {delay:?}: {e}");
                    tokio::time::sleep(jitter(delay)).await;
                    delay = (delay * 2).min(cfg.backoff_max);
                    attempt += 1;
                }
            }
        }
    }

    /// Every established connection.
    pub fn connections(&self) -> Vec<Connection> {
        lock(&self.inner.conns)
            .values()
            .map(|t| t.conn.clone())
            .collect()
    }

    /// Current counters.
    pub fn stats(&self) -> MessengerStats {
        let i = &self.inner;
        MessengerStats {
            connections: lock(&i.conns).len(),
            handshakes_in_progress: i.handshakes_in_progress.load(Ordering::Relaxed),
            handshake_failures: i.handshake_failures.load(Ordering::Relaxed),
            connections_accepted: i.connections_accepted.load(Ordering::Relaxed),
            connections_refused: i.connections_refused.load(Ordering::Relaxed),
        }
    }

    /// Stops listening, lets every connection send what it has queued, fails
    /// requests still waiting for replies, and waits for all tasks to end.
    pub async fn shutdown(&self) {
        self.inner.shutdown.send_replace(true);
        let tracked: Vec<Tracked> = std::mem::take(&mut *lock(&self.inner.conns))
            .into_values()
            .collect();
        lock(&self.inner.peers).clear();
        let mut handles = Vec::new();
        for t in tracked {
            t.conn
                .inner
                .close("messenger shutting down".to_string(), true);
            handles.extend(t._tasks);
        }
        let all = async {
            for h in handles.iter_mut() {
                let _ = h.await;
            }
        };
        if tokio::time::timeout(SHUTDOWN_GRACE, all).await.is_err() {
            handles.iter().for_each(JoinHandle::abort);
        }
        let mut tasks = std::mem::take(&mut *lock(&self.inner.tasks));
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }
}

/// Up to +50 % random jitter, so peers that failed together do not retry in
/// lockstep.
fn jitter(d: Duration) -> Duration {
    let r = match crate::runtime::simulated_random() {
        Some(x) => (x & 0xff) as u32,
        None => crate::auth::random_bytes()[0] as u32,
    };
    d + d * r / 512
}

impl Inner {
    fn spawn_tracked(&self, fut: impl std::future::Future<Output = ()> + Send + 'static) {
        let mut tasks = lock(&self.tasks);
        while tasks.try_join_next().is_some() {}
        tasks.spawn(fut);
    }

    async fn establish(self: &Arc<Self>, addr: SocketAddr) -> Result<Connection, NetError> {
        let cfg = &self.config;
        let peer = addr.to_string();
        let connect = tokio::time::timeout(cfg.connect_timeout, self.transport.connect(addr));
        let mut stream = match connect.await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                return Err(NetError::Connect {
                    peer,
                    reason: e.to_string(),
                });
            }
            Err(_) => {
                return Err(NetError::Connect {
                    peer,
                    reason: format!("timed out after {:?}", cfg.connect_timeout),
                });
            }
        };
        let mut buf = BytesMut::with_capacity(4096);
        let listen = *lock(&self.listen);
        let hs = handshake::connect(
            &mut stream,
            &mut buf,
            &self.me,
            listen,
            self.auth.as_ref(),
            &self.config,
        );
        let est = match tokio::time::timeout(cfg.handshake_timeout, hs).await {
            Ok(Ok(est)) => est,
            Ok(Err(source)) => return Err(NetError::Handshake { peer, source }),
            Err(_) => {
                return Err(NetError::Handshake {
                    peer,
                    source: HandshakeError::Timeout,
                });
            }
        };
        Ok(self.start(stream, buf, est, None))
    }

    /// Starts an established connection. `place` is its place on the
    /// listener that accepted it, given back when the connection ends.
    fn start(
        self: &Arc<Self>,
        stream: Stream,
        leftover: BytesMut,
        est: Established,
        place: Option<Admitted>,
    ) -> Connection {
        let id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let peer = PeerInfo {
            name: est.peer,
            addr: stream.peer_addr,
            listen_addr: est.peer_listen,
            features: est.features,
            caps: est.caps,
            cipher: est.keys.as_ref().map(|k| k.cipher),
        };
        // In secure mode every byte from here on is in sealed records,
        // including those already read past the handshake.
        let (halves, leftover): (conn::Halves, BytesMut) = match est.keys {
            None => ((stream.read, stream.write), leftover),
            Some(keys) => {
                let (opener, sealer) = keys.split();
                let read = SecureReader::new(stream.read, opener, &leftover);
                let write = SecureWriter::new(stream.write, sealer);
                ((Box::new(read), Box::new(write)), BytesMut::new())
            }
        };
        tracing::debug!(entity = %self.me, %peer, "connection established");
        let weak: Weak<Inner> = Arc::downgrade(self);
        // Holding the map lock while spawning guarantees the entry exists
        // before the close hook can try to remove it.
        let mut conns = lock(&self.conns);
        let (conn, reader, writer) = conn::spawn(
            id,
            peer,
            Arc::clone(&self.config),
            halves,
            leftover,
            Arc::clone(&self.dispatcher),
            move |_, reason| {
                drop(place);
                if let Some(inner) = weak.upgrade() {
                    tracing::debug!(entity = %inner.me, "connection closed: {reason}");
                    lock(&inner.conns).remove(&id);
                }
            },
        );
        conns.insert(
            id,
            Tracked {
                conn: conn.clone(),
                _tasks: [reader, writer],
            },
        );
        conn
    }

    /// Runs the acceptor's handshake on a new socket and, if it succeeds,
    /// starts the connection and makes it the one used to reach that peer.
    async fn accept(self: Arc<Self>, mut stream: Stream, mut place: Admitted) {
        let addr = stream.peer_addr;
        self.handshakes_in_progress.fetch_add(1, Ordering::Relaxed);
        let mut buf = BytesMut::with_capacity(4096);
        let hs = handshake::accept(
            &mut stream,
            &mut buf,
            &self.me,
            self.auth.as_ref(),
            &self.config,
        );
        let result = match tokio::time::timeout(self.config.handshake_timeout, hs).await {
            Ok(r) => r,
            Err(_) => Err(HandshakeError::Timeout),
        };
        self.handshakes_in_progress.fetch_sub(1, Ordering::Relaxed);
        place.handshake_done();
        let est = match result {
            Ok(est) => est,
            Err(e) => {
                self.handshake_failures.fetch_add(1, Ordering::Relaxed);
                let refused_auth = matches!(
                    e,
                    HandshakeError::Refused {
                        code: RejectCode::BadProof | RejectCode::UnknownEntity,
                        ..
                    }
                );
                let mode_mismatch = matches!(
                    e,
                    HandshakeError::Refused {
                        code: RejectCode::ModeMismatch,
                        ..
                    }
                );
                if mode_mismatch {
                    tracing::warn!(entity = %self.me, peer = %addr, "handshake refused: {e}");
                } else if refused_auth {
                    tracing::warn!(entity = %self.me, peer = %addr, "authentication failed: {e}");
                } else {
                    tracing::info!(entity = %self.me, peer = %addr, "handshake failed: {e}");
                }
                return;
            }
        };
        self.connections_accepted.fetch_add(1, Ordering::Relaxed);
        let listen = est.peer_listen;
        let conn = self.start(stream, buf, est, Some(place));
        // One connection per peer pair: if we have no live connection to
        // the peer's listening address, use this one to reach it.
        if let Some(listen) = listen {
            let slot = lock(&self.peers).entry(listen).or_default().clone();
            if let Ok(mut cur) = slot.try_lock() {
                if cur.as_ref().is_none_or(Connection::is_closed) {
                    *cur = Some(conn);
                }
            }
        }
    }
}

async fn accept_loop(
    weak: Weak<Inner>,
    mut listener: BoxListener,
    load: Arc<ListenerLoad>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            biased;
            _ = stop.changed() => return,
            r = listener.accept() => r,
        };
        let Some(inner) = weak.upgrade() else { return };
        match accepted {
            Ok(stream) => match load.admit() {
                Admission::Admitted {
                    guard,
                    after_refusing,
                } => {
                    if let Some(n) = after_refusing {
                        tracing::info!(entity = %inner.me, "accepting connections again, after refusing {n}");
                    }
                    let fut = Arc::clone(&inner).accept(stream, guard);
                    inner.spawn_tracked(fut);
                }
                Admission::Refused { why, first } => {
                    inner.connections_refused.fetch_add(1, Ordering::Relaxed);
                    // One line per episode: a flood must not flood the log too.
                    if first {
                        tracing::warn!(entity = %inner.me, peer = %stream.peer_addr, "refusing connections: {why}; further refusals are counted, not logged");
                    }
                    drop(stream);
                }
            },
            Err(e) => {
                tracing::warn!(entity = %inner.me, "accept failed: {e}");
                drop(inner);
                // Out of file descriptors and the like: do not spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

//! The [`Transport`] trait and its two implementations: TCP and an in-memory
//! network for tests and simulation.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

/// A boxed future, as the transport traits return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A connected byte stream, already split into halves so reading and writing
/// proceed independently without a lock.
pub struct Stream {
    /// The read half.
    pub read: Box<dyn AsyncRead + Unpin + Send>,
    /// The write half.
    pub write: Box<dyn AsyncWrite + Unpin + Send>,
    /// The remote address.
    pub peer_addr: SocketAddr,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream({})", self.peer_addr)
    }
}

/// A listening endpoint.
pub trait Listener: Send {
    /// The bound address.
    fn local_addr(&self) -> SocketAddr;
    /// Waits for the next connection.
    fn accept(&mut self) -> BoxFuture<'_, io::Result<Stream>>;
}

/// A boxed listener.
pub type BoxListener = Box<dyn Listener>;

/// How the messenger reaches the network.
pub trait Transport: Send + Sync + 'static {
    /// Opens a stream to `addr`.
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<Stream>>;
    /// Listens on `addr` (port 0 picks a free port).
    fn bind(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<BoxListener>>;
}

/// Real TCP sockets, with Nagle's algorithm off.
#[derive(Debug, Default, Clone, Copy)]
pub struct TcpTransport;

fn tcp_stream(s: tokio::net::TcpStream) -> io::Result<Stream> {
    s.set_nodelay(true)?;
    let peer_addr = s.peer_addr()?;
    let (r, w) = s.into_split();
    Ok(Stream {
        read: Box::new(r),
        write: Box::new(w),
        peer_addr,
    })
}

struct TcpListener(tokio::net::TcpListener);

impl Listener for TcpListener {
    fn local_addr(&self) -> SocketAddr {
        self.0
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0))
    }
    fn accept(&mut self) -> BoxFuture<'_, io::Result<Stream>> {
        Box::pin(async move {
            let (s, _) = self.0.accept().await?;
            tcp_stream(s)
        })
    }
}

impl Transport for TcpTransport {
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<Stream>> {
        Box::pin(async move { tcp_stream(tokio::net::TcpStream::connect(addr).await?) })
    }
    fn bind(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<BoxListener>> {
        Box::pin(async move {
            let l = tokio::net::TcpListener::bind(addr).await?;
            Ok(Box::new(TcpListener(l)) as BoxListener)
        })
    }
}

type Backlog = mpsc::Sender<Stream>;

/// An in-memory network: listeners are registered by address and
/// connections are `tokio::io::duplex` pipes. Cloning shares the network.
#[derive(Clone, Default)]
pub struct MemNetwork {
    inner: Arc<MemInner>,
}

#[derive(Default)]
struct MemInner {
    listeners: Mutex<HashMap<SocketAddr, Backlog>>,
    next_port: AtomicU16,
}

impl std::fmt::Debug for MemNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemNetwork")
    }
}

const MEM_PIPE_BYTES: usize = 256 * 1024;

impl MemNetwork {
    /// An empty network.
    pub fn new() -> Self {
        Self::default()
    }

    fn ephemeral(&self, ip: IpAddr) -> SocketAddr {
        let port = 10_000 + self.inner.next_port.fetch_add(1, Ordering::Relaxed) % 50_000;
        SocketAddr::new(ip, port)
    }

    fn backlog(&self, addr: SocketAddr) -> Option<Backlog> {
        let map = self
            .inner
            .listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        map.get(&addr).cloned()
    }
}

struct MemListener {
    addr: SocketAddr,
    rx: mpsc::Receiver<Stream>,
    net: MemNetwork,
}

impl Drop for MemListener {
    fn drop(&mut self) {
        let mut map = self
            .net
            .inner
            .listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        map.remove(&self.addr);
    }
}

impl Listener for MemListener {
    fn local_addr(&self) -> SocketAddr {
        self.addr
    }
    fn accept(&mut self) -> BoxFuture<'_, io::Result<Stream>> {
        Box::pin(async move {
            self.rx
                .recv()
                .await
                .ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "network gone"))
        })
    }
}

impl Transport for MemNetwork {
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<Stream>> {
        Box::pin(async move {
            let refused = || io::Error::new(io::ErrorKind::ConnectionRefused, "connection refused");
            let backlog = self.backlog(addr).ok_or_else(refused)?;
            let local = self.ephemeral(IpAddr::V4(Ipv4Addr::LOCALHOST));
            let (a, b) = tokio::io::duplex(MEM_PIPE_BYTES);
            let (ar, aw) = tokio::io::split(a);
            let (br, bw) = tokio::io::split(b);
            let server_side = Stream {
                read: Box::new(br),
                write: Box::new(bw),
                peer_addr: local,
            };
            backlog.send(server_side).await.map_err(|_| refused())?;
            Ok(Stream {
                read: Box::new(ar),
                write: Box::new(aw),
                peer_addr: addr,
            })
        })
    }

    fn bind(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<BoxListener>> {
        Box::pin(async move {
            let addr = if addr.port() == 0 {
                self.ephemeral(addr.ip())
            } else {
                addr
            };
            let (tx, rx) = mpsc::channel(128);
            let mut map = self
                .inner
                .listeners
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if map.contains_key(&addr) {
                return Err(io::Error::new(io::ErrorKind::AddrInUse, "address in use"));
            }
            map.insert(addr, tx);
            drop(map);
            Ok(Box::new(MemListener {
                addr,
                rx,
                net: self.clone(),
            }) as BoxListener)
        })
    }
}

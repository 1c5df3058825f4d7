//! The NBD server: accepts connections, haggles options (fixed newstyle)
//! and serves requests on the chosen image. Requests are read in order and
//! run at once, many in flight per connection; each reply goes out when
//! its request completes (the protocol lets replies come in any order).
//! A request the server refuses gets the protocol's error and the
//! connection goes on; only a broken stream (a bad magic, a short read)
//! ends it. A request already running when its client goes away still
//! completes, so every write the client saw acknowledged stays written.
//!
//! Every connection to one export shares one [`Image`] (so one exclusive
//! lock, one object map, one cache of nothing): a write is acknowledged
//! only once every OSD holding it has it durable, so FLUSH and FUA have
//! nothing left to do and several connections to an export may be used
//! at once (`CAN_MULTI_CONN`).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use shoal_block::{Error as BlockError, Image};
use shoal_client::{Client, Error as ClusterError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, Semaphore, mpsc};

use crate::proto::{self, cflag, cmd, errno, info, opt, rep, reply, tflag};

/// How the server serves.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The pool of exports named `IMAGE` without a pool.
    pub default_pool: String,
    /// Serve only these exports (`POOL/IMAGE[@SNAP]`); None: any image.
    pub allowed: Option<Vec<String>>,
    /// Requests run at once per connection.
    pub max_inflight: usize,
    /// Keep each image's exclusive lock when another client asks for it.
    pub exclusive: bool,
    /// Serve every export read-only.
    pub read_only: bool,
    /// TLS (`NBD_OPT_STARTTLS`), with its certificate.
    pub tls: Option<Tls>,
}

/// The server's TLS: a certificate and key, and whether clients must use it.
#[derive(Clone)]
pub struct Tls {
    acceptor: tokio_rustls::TlsAcceptor,
    /// Refuse every option but STARTTLS (and ABORT) in the clear.
    pub required: bool,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("required", &self.required)
            .finish()
    }
}

/// Why a certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or parsed.
    #[error("{path}: {why}")]
    File {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
    /// rustls refused the certificate and key.
    #[error("the certificate and key: {0}")]
    Rustls(#[from] rustls::Error),
}

impl Tls {
    /// The acceptor (the S3 gateway serves HTTPS with the same files).
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        self.acceptor.clone()
    }

    /// TLS with the PEM certificate chain at `cert` and key at `key`.
    pub fn from_pem_files(
        cert: &std::path::Path,
        key: &std::path::Path,
        required: bool,
    ) -> std::result::Result<Tls, TlsError> {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let file_err = |p: &std::path::Path, e: &dyn std::fmt::Display| TlsError::File {
            path: p.display().to_string(),
            why: e.to_string(),
        };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .map_err(|e| file_err(cert, &e))?
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| file_err(cert, &e))?;
        if certs.is_empty() {
            return Err(file_err(cert, &"no certificate in it"));
        }
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| file_err(key, &e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        Ok(Tls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            required,
        })
    }
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            default_pool: "rbd".into(),
            allowed: None,
            max_inflight: 128,
            exclusive: false,
            read_only: false,
            tls: None,
        }
    }
}

/// One export: an open image.
struct Export {
    name: String,
    image: Image,
    read_only: bool,
}

impl Export {
    fn flags(&self) -> u16 {
        let mut f = tflag::HAS_FLAGS
            | tflag::SEND_FLUSH
            | tflag::SEND_FUA
            | tflag::SEND_DF
            | tflag::CAN_MULTI_CONN
            | tflag::SEND_CACHE;
        if self.read_only {
            f |= tflag::READ_ONLY;
        } else {
            f |= tflag::SEND_TRIM | tflag::SEND_WRITE_ZEROES | tflag::SEND_FAST_ZERO;
        }
        f
    }
}

/// An NBD server over a cluster client.
pub struct Server {
    client: Client,
    opts: ServerOptions,
    exports: Mutex<HashMap<String, Arc<Export>>>,
    /// Requests by command, for the manager.
    pub metrics: Arc<crate::metrics::Metrics>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("opts", &self.opts).finish()
    }
}

/// Why a connection ended early.
#[derive(Debug, thiserror::Error)]
enum ConnError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Protocol(String),
}

type Result<T> = std::result::Result<T, ConnError>;

/// `POOL/IMAGE[@SNAP]` (or `IMAGE[@SNAP]` in `default_pool`) as its parts.
fn split_name<'a>(default_pool: &'a str, name: &'a str) -> (&'a str, &'a str, Option<&'a str>) {
    let (rest, snap) = match name.split_once('@') {
        Some((r, s)) => (r, Some(s)),
        None => (name, None),
    };
    match rest.split_once('/') {
        Some((p, i)) => (p, i, snap),
        None => (default_pool, rest, snap),
    }
}

/// The protocol's error for an image's failure.
fn errno_of(e: &BlockError) -> u32 {
    match e {
        BlockError::OutOfRange { .. } | BlockError::InvalidArgument(_) => errno::EINVAL,
        BlockError::ReadOnly(_) => errno::EPERM,
        BlockError::Cluster(ClusterError::NoSpace(_)) => errno::ENOSPC,
        BlockError::Cluster(ClusterError::TooLarge(_)) => errno::EOVERFLOW,
        _ => errno::EIO,
    }
}

impl Server {
    /// A server over `client`.
    pub fn new(client: Client, opts: ServerOptions) -> Arc<Server> {
        Arc::new(Server {
            client,
            opts,
            exports: Mutex::new(HashMap::new()),
            metrics: Arc::default(),
        })
    }

    /// Accepts connections until the listener fails.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) -> std::io::Result<()> {
        loop {
            let (stream, peer) = listener.accept().await?;
            let me = Arc::clone(&self);
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                me.metrics.connected();
                if let Err(e) = me.connection(stream).await {
                    tracing::info!(%peer, "nbd connection ended: {e}");
                }
            });
        }
    }

    /// Closes every export: the requests in flight finish, the images'
    /// locks are given up and their header watches removed (so the images
    /// may be removed at once).
    pub async fn shutdown(&self) {
        let exports: Vec<Arc<Export>> = self.exports.lock().await.drain().map(|(_, e)| e).collect();
        for e in exports {
            if let Err(err) = e.image.clone().close().await {
                tracing::warn!(export = %e.name, "closing: {err}");
            }
        }
    }

    /// The export named `name`, opened on first use.
    async fn export(&self, name: &str) -> std::result::Result<Arc<Export>, (u32, String)> {
        let (pool, image, snap) = split_name(&self.opts.default_pool, name);
        let canonical = match snap {
            Some(s) => format!("{pool}/{image}@{s}"),
            None => format!("{pool}/{image}"),
        };
        if let Some(allowed) = &self.opts.allowed
            && !allowed.iter().any(|a| {
                let (p, i, s) = split_name(&self.opts.default_pool, a);
                (p, i, s) == (pool, image, snap)
            })
        {
            return Err((rep::ERR_UNKNOWN, format!("{canonical} is not exported")));
        }
        let mut exports = self.exports.lock().await;
        if let Some(e) = exports.get(&canonical) {
            return Ok(Arc::clone(e));
        }
        let unknown = |e: String| (rep::ERR_UNKNOWN, e);
        let p = self
            .client
            .pool(pool)
            .map_err(|_| unknown(format!("pool {pool} does not exist")))?;
        let opened = match snap {
            Some(s) => Image::open_snap(&p, image, s).await,
            None if self.opts.read_only => Image::open_read_only(&p, image).await,
            None => Image::open(&p, image).await,
        };
        let image = opened.map_err(|e| match e {
            BlockError::NoImage { .. } | BlockError::NoSnap { .. } => unknown(e.to_string()),
            e => (rep::ERR_POLICY, e.to_string()),
        })?;
        image.set_exclusive(self.opts.exclusive);
        if self.opts.exclusive && snap.is_none() && !self.opts.read_only {
            // Exclusive means held from the start, not from the first write.
            let policy = |m: String| (rep::ERR_POLICY, m);
            if image.header().features & shoal_block::format::features::EXCLUSIVE_LOCK == 0 {
                return Err(policy(format!(
                    "{canonical} has no exclusive-lock feature: it cannot be held exclusively"
                )));
            }
            if let Err(e) = image.acquire_lock().await {
                return Err(policy(format!(
                    "{canonical}: the exclusive lock could not be taken: {e}"
                )));
            }
        }
        let e = Arc::new(Export {
            name: canonical.clone(),
            image,
            read_only: snap.is_some() || self.opts.read_only,
        });
        exports.insert(canonical, Arc::clone(&e));
        Ok(e)
    }

    /// Opens every export named at start (`--export`), so that a missing
    /// image, or an exclusive lock another client holds, fails the server
    /// at once rather than its first client.
    pub async fn open_exports(&self) -> std::result::Result<(), String> {
        for name in self.opts.allowed.clone().unwrap_or_default() {
            self.export(&name).await.map_err(|(_, m)| m)?;
        }
        Ok(())
    }

    /// The names `NBD_OPT_LIST` answers: the allowed exports, or every
    /// image of every pool.
    async fn list(&self) -> Vec<String> {
        if let Some(a) = &self.opts.allowed {
            return a.clone();
        }
        let Ok(map) = self.client.map() else {
            return Vec::new();
        };
        let mut names = Vec::new();
        for pool in map.pools().values() {
            let Ok(p) = self.client.pool(&pool.name) else {
                continue;
            };
            if let Ok(images) = shoal_block::rbd::list(&p).await {
                names.extend(
                    images
                        .into_iter()
                        .map(|i| format!("{}/{}", pool.name, i.name)),
                );
            }
        }
        names
    }

    /// One connection: the handshake, the options (upgraded to TLS when
    /// the client asks and the server has a certificate), then
    /// transmission.
    async fn connection(self: Arc<Self>, mut stream: TcpStream) -> Result<()> {
        stream.write_all(&proto::greeting()).await?;
        let client_flags = stream.read_u32().await?;
        if client_flags & proto::C_FLAG_FIXED_NEWSTYLE == 0 {
            return Err(ConnError::Protocol(
                "the client does not speak fixed newstyle".into(),
            ));
        }
        let no_zeroes = client_flags & proto::C_FLAG_NO_ZEROES != 0;
        match self.haggle(stream, no_zeroes, false).await? {
            Haggled::Done => Ok(()),
            Haggled::Transmit(stream, chosen) => {
                let (rd, wr) = stream.into_split();
                self.transmission(chosen, rd, BufWriter::new(wr)).await
            }
            Haggled::StartTls(stream) => {
                let Some(tls) = &self.opts.tls else {
                    return Err(ConnError::Protocol("TLS without a certificate".into()));
                };
                let stream = tls.acceptor.accept(stream).await?;
                match self.haggle(stream, no_zeroes, true).await? {
                    Haggled::Transmit(stream, chosen) => {
                        let (rd, wr) = tokio::io::split(stream);
                        self.transmission(chosen, rd, BufWriter::new(wr)).await
                    }
                    Haggled::Done | Haggled::StartTls(_) => Ok(()),
                }
            }
        }
    }

    /// The option haggling on `stream` (TLS already if `tls`): ends with an
    /// export chosen, a client gone, or (in the clear) an upgrade to TLS.
    async fn haggle<S>(&self, mut stream: S, no_zeroes: bool, tls: bool) -> Result<Haggled<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let mut structured = false;
        let mut allocation = false;
        let tls_required = !tls && self.opts.tls.as_ref().is_some_and(|t| t.required);
        loop {
            let magic = stream.read_u64().await?;
            if magic != proto::IHAVEOPT {
                return Err(ConnError::Protocol("an option with a bad magic".into()));
            }
            let option = stream.read_u32().await?;
            let len = stream.read_u32().await?;
            if len > proto::OPTION_MAX {
                if len > 1 << 20 {
                    return Err(ConnError::Protocol(format!("a {len}-byte option")));
                }
                discard(&mut stream, u64::from(len)).await?;
                let m = format!("options are at most {} bytes", proto::OPTION_MAX);
                send(
                    &mut stream,
                    proto::option_error(option, rep::ERR_TOO_BIG, &m),
                )
                .await?;
                continue;
            }
            let mut data = vec![0u8; len as usize];
            stream.read_exact(&mut data).await?;
            if tls_required && !matches!(option, opt::STARTTLS | opt::ABORT) {
                if option == opt::EXPORT_NAME {
                    return Err(ConnError::Protocol("an export chosen without TLS".into()));
                }
                let m = "this server requires TLS: send NBD_OPT_STARTTLS first";
                send(
                    &mut stream,
                    proto::option_error(option, rep::ERR_TLS_REQD, m),
                )
                .await?;
                continue;
            }
            match option {
                opt::EXPORT_NAME => {
                    let name = String::from_utf8_lossy(&data).into_owned();
                    let e = self
                        .export(&name)
                        .await
                        .map_err(|(_, m)| ConnError::Protocol(m))?;
                    let mut b = Vec::with_capacity(134);
                    b.extend_from_slice(&e.image.size().to_be_bytes());
                    b.extend_from_slice(&e.flags().to_be_bytes());
                    if !no_zeroes {
                        b.extend_from_slice(&[0u8; 124]);
                    }
                    stream.write_all(&b).await?;
                    stream.flush().await?;
                    let chosen = Chosen {
                        e,
                        structured,
                        allocation,
                    };
                    return Ok(Haggled::Transmit(stream, chosen));
                }
                opt::ABORT => {
                    send(&mut stream, proto::option_reply(option, rep::ACK, &[])).await?;
                    return Ok(Haggled::Done);
                }
                opt::LIST => {
                    if !data.is_empty() {
                        let r = proto::option_error(option, rep::ERR_INVALID, "LIST takes no data");
                        send(&mut stream, r).await?;
                        continue;
                    }
                    for name in self.list().await {
                        let r = proto::option_reply(option, rep::SERVER, &proto::rep_server(&name));
                        stream.write_all(&r).await?;
                    }
                    send(&mut stream, proto::option_reply(option, rep::ACK, &[])).await?;
                }
                opt::INFO | opt::GO => {
                    let (name, asked) = match proto::parse_info_request(&data) {
                        Ok(x) => x,
                        Err(e) => {
                            let r = proto::option_error(option, rep::ERR_INVALID, &e.to_string());
                            send(&mut stream, r).await?;
                            continue;
                        }
                    };
                    let e = match self.export(&name).await {
                        Ok(e) => e,
                        Err((code, m)) => {
                            send(&mut stream, proto::option_error(option, code, &m)).await?;
                            continue;
                        }
                    };
                    let mut infos = vec![
                        proto::info_export(e.image.size(), e.flags()),
                        proto::info_block_size(1, 4096, proto::PAYLOAD_MAX),
                    ];
                    if asked.contains(&info::NAME) {
                        infos.push(proto::info_text(info::NAME, &e.name));
                    }
                    if asked.contains(&info::DESCRIPTION) {
                        let d = format!("Shoal image {}", e.name);
                        infos.push(proto::info_text(info::DESCRIPTION, &d));
                    }
                    for i in infos {
                        stream
                            .write_all(&proto::option_reply(option, rep::INFO, &i))
                            .await?;
                    }
                    send(&mut stream, proto::option_reply(option, rep::ACK, &[])).await?;
                    if option == opt::GO {
                        let chosen = Chosen {
                            e,
                            structured,
                            allocation,
                        };
                        return Ok(Haggled::Transmit(stream, chosen));
                    }
                }
                opt::STRUCTURED_REPLY => {
                    let r = if !data.is_empty() {
                        proto::option_error(option, rep::ERR_INVALID, "takes no data")
                    } else {
                        structured = true;
                        proto::option_reply(option, rep::ACK, &[])
                    };
                    send(&mut stream, r).await?;
                }
                opt::LIST_META_CONTEXT | opt::SET_META_CONTEXT => {
                    let set = option == opt::SET_META_CONTEXT;
                    let parsed = proto::parse_meta_request(&data);
                    let r = match (parsed, structured || !set) {
                        (Err(e), _) => {
                            proto::option_error(option, rep::ERR_INVALID, &e.to_string())
                        }
                        (Ok(_), false) => proto::option_error(
                            option,
                            rep::ERR_INVALID,
                            "negotiate structured replies first",
                        ),
                        (Ok((name, queries)), true) => match self.export(&name).await {
                            Err((code, m)) => proto::option_error(option, code, &m),
                            Ok(_) => {
                                let wanted = queries.iter().any(|q| {
                                    q == proto::BASE_ALLOCATION || (!set && (q == "base:"))
                                }) || (!set && queries.is_empty());
                                if set {
                                    allocation = wanted;
                                }
                                if wanted {
                                    let m = proto::rep_meta_context(
                                        proto::BASE_ALLOCATION_ID,
                                        proto::BASE_ALLOCATION,
                                    );
                                    let r = proto::option_reply(option, rep::META_CONTEXT, &m);
                                    stream.write_all(&r).await?;
                                }
                                proto::option_reply(option, rep::ACK, &[])
                            }
                        },
                    };
                    send(&mut stream, r).await?;
                }
                opt::STARTTLS => {
                    let r = match (&self.opts.tls, tls, data.is_empty()) {
                        (None, _, _) => proto::option_error(
                            option,
                            rep::ERR_POLICY,
                            "TLS is not configured on this server",
                        ),
                        (Some(_), true, _) => {
                            proto::option_error(option, rep::ERR_INVALID, "TLS is on already")
                        }
                        (Some(_), false, false) => {
                            proto::option_error(option, rep::ERR_INVALID, "takes no data")
                        }
                        (Some(_), false, true) => {
                            send(&mut stream, proto::option_reply(option, rep::ACK, &[])).await?;
                            return Ok(Haggled::StartTls(stream));
                        }
                    };
                    send(&mut stream, r).await?;
                }
                _ => {
                    let m = format!("option {option} is not supported");
                    send(&mut stream, proto::option_error(option, rep::ERR_UNSUP, &m)).await?;
                }
            }
        }
    }

    /// Serves requests on export `e` until the client disconnects.
    async fn transmission<R, W>(&self, chosen: Chosen, mut rd: R, wr: BufWriter<W>) -> Result<()>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let Chosen {
            e,
            structured,
            allocation,
        } = chosen;
        let (tx, rx) = mpsc::unbounded_channel::<Vec<Bytes>>();
        let writer = tokio::spawn(write_replies(wr, rx));
        let slots = Arc::new(Semaphore::new(self.opts.max_inflight.max(1)));
        let conn = Conn {
            e,
            tx,
            structured,
            allocation,
        };
        let r = loop {
            let mut head = [0u8; proto::REQUEST_BYTES];
            match rd.read_exact(&mut head).await {
                Ok(_) => {}
                Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => break Ok(()),
                Err(err) => break Err(err.into()),
            }
            let req = match proto::parse_request(&head) {
                Ok(r) => r,
                Err(m) => break Err(ConnError::Protocol(m.to_string())),
            };
            if req.kind == cmd::DISC {
                break Ok(());
            }
            // A write's payload is read here, in order, even when refused.
            let mut payload = Bytes::new();
            if req.kind == cmd::WRITE {
                if req.len > proto::PAYLOAD_MAX {
                    if let Err(err) = discard(&mut rd, u64::from(req.len)).await {
                        break Err(err.into());
                    }
                    let m = format!("writes are at most {} bytes", proto::PAYLOAD_MAX);
                    conn.error(req.cookie, errno::EINVAL, &m);
                    continue;
                }
                let mut b = vec![0u8; req.len as usize];
                if let Err(err) = rd.read_exact(&mut b).await {
                    break Err(err.into());
                }
                payload = Bytes::from(b);
            }
            let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
                break Ok(());
            };
            let conn = conn.clone();
            let metrics = Arc::clone(&self.metrics);
            let started = std::time::Instant::now();
            tokio::spawn(async move {
                let (kind, len) = (req.kind, req.len);
                conn.run(req, payload).await;
                metrics.record(kind, len, started.elapsed());
                drop(permit);
            });
        };
        // Requests in flight finish (their writes land) before the close.
        let _ = slots
            .acquire_many(self.opts.max_inflight.max(1) as u32)
            .await;
        drop(conn);
        let _ = writer.await;
        r
    }
}

/// The export a client chose, with what it negotiated.
struct Chosen {
    e: Arc<Export>,
    structured: bool,
    allocation: bool,
}

/// How the option haggling ended.
enum Haggled<S> {
    /// The client went away (`NBD_OPT_ABORT`).
    Done,
    /// The client asked for TLS and was told yes: the stream to upgrade.
    StartTls(S),
    /// An export was chosen: transmission follows.
    Transmit(S, Chosen),
}

/// What the request tasks of one connection share.
#[derive(Clone)]
struct Conn {
    e: Arc<Export>,
    tx: mpsc::UnboundedSender<Vec<Bytes>>,
    structured: bool,
    allocation: bool,
}

impl Conn {
    fn send(&self, parts: Vec<Bytes>) {
        // The client may be gone: the request still ran.
        let _ = self.tx.send(parts);
    }

    fn ok(&self, cookie: u64) {
        let b = if self.structured {
            Bytes::copy_from_slice(&proto::chunk_header(
                reply::FLAG_DONE,
                reply::NONE,
                cookie,
                0,
            ))
        } else {
            Bytes::copy_from_slice(&proto::simple_reply(0, cookie))
        };
        self.send(vec![b]);
    }

    fn error(&self, cookie: u64, code: u32, message: &str) {
        let b = if self.structured {
            proto::chunk_error(cookie, code, message)
        } else {
            Bytes::copy_from_slice(&proto::simple_reply(code, cookie))
        };
        self.send(vec![b]);
    }

    fn done(&self, cookie: u64, r: std::result::Result<(), BlockError>) {
        match r {
            Ok(()) => self.ok(cookie),
            Err(e) => self.error(cookie, errno_of(&e), &e.to_string()),
        }
    }

    /// Checks `[offset, offset + len)` lies within the export.
    fn in_range(&self, req: &proto::Request, code: u32) -> bool {
        let size = self.e.image.size();
        let fits = req
            .offset
            .checked_add(u64::from(req.len))
            .is_some_and(|end| end <= size);
        if !fits {
            let m = format!(
                "{} bytes at {} are past the end of {} ({size} bytes)",
                req.len, req.offset, self.e.name
            );
            self.error(req.cookie, code, &m);
        }
        fits
    }

    fn writable(&self, req: &proto::Request) -> bool {
        if self.e.read_only {
            self.error(
                req.cookie,
                errno::EPERM,
                &format!("{} is read-only", self.e.name),
            );
        }
        !self.e.read_only
    }

    async fn run(&self, req: proto::Request, payload: Bytes) {
        let image = &self.e.image;
        let c = req.cookie;
        match req.kind {
            cmd::READ => {
                if req.len > proto::PAYLOAD_MAX {
                    let code = match req.flags & cflag::DF {
                        0 => errno::EINVAL,
                        _ => errno::EOVERFLOW,
                    };
                    self.error(
                        c,
                        code,
                        &format!("reads are at most {} bytes", proto::PAYLOAD_MAX),
                    );
                    return;
                }
                if !self.in_range(&req, errno::EINVAL) {
                    return;
                }
                match image.read(req.offset, u64::from(req.len)).await {
                    Ok(data) if self.structured => {
                        if data.is_empty() {
                            return self.ok(c);
                        }
                        let h = proto::chunk_header(
                            reply::FLAG_DONE,
                            reply::OFFSET_DATA,
                            c,
                            8 + data.len() as u32,
                        );
                        let mut head = h.to_vec();
                        head.extend_from_slice(&req.offset.to_be_bytes());
                        self.send(vec![Bytes::from(head), data]);
                    }
                    Ok(data) => {
                        let h = Bytes::copy_from_slice(&proto::simple_reply(0, c));
                        self.send(vec![h, data]);
                    }
                    Err(e) => self.error(c, errno_of(&e), &e.to_string()),
                }
            }
            cmd::WRITE => {
                if self.writable(&req) && self.in_range(&req, errno::ENOSPC) {
                    self.done(c, image.write(req.offset, payload).await);
                }
            }
            // Every acknowledged write is durable on every OSD holding it.
            cmd::FLUSH => self.ok(c),
            cmd::TRIM => {
                if self.writable(&req) && self.in_range(&req, errno::ENOSPC) {
                    self.done(c, image.discard(req.offset, u64::from(req.len)).await);
                }
            }
            cmd::WRITE_ZEROES => {
                if !self.writable(&req) || !self.in_range(&req, errno::ENOSPC) {
                    return;
                }
                if req.flags & cflag::NO_HOLE == 0 {
                    return self.done(c, image.write_zeroes(req.offset, u64::from(req.len)).await);
                }
                if req.flags & cflag::FAST_ZERO != 0 {
                    let m = "zeros without a hole are written, which is not fast";
                    return self.error(c, errno::ENOTSUP, m);
                }
                self.done(
                    c,
                    write_zero_bytes(image, req.offset, u64::from(req.len)).await,
                );
            }
            cmd::CACHE => {
                if self.in_range(&req, errno::EINVAL) {
                    self.ok(c);
                }
            }
            cmd::BLOCK_STATUS => {
                if !self.allocation || !self.structured {
                    let m = "block status needs structured replies and base:allocation";
                    return self.error(c, errno::EINVAL, m);
                }
                if !self.in_range(&req, errno::EINVAL) {
                    return;
                }
                if req.len == 0 {
                    return self.error(c, errno::EINVAL, "block status of no bytes");
                }
                match image.allocated(req.offset, u64::from(req.len)).await {
                    Ok(a) => {
                        let one = req.flags & cflag::REQ_ONE != 0;
                        let ext = proto::allocation_extents(req.offset, req.len, &a, one);
                        self.send(vec![proto::chunk_block_status(c, &ext)]);
                    }
                    Err(e) => self.error(c, errno_of(&e), &e.to_string()),
                }
            }
            other => self.error(c, errno::EINVAL, &format!("unknown command {other}")),
        }
    }
}

/// Writes zero bytes over the range (WRITE_ZEROES with NO_HOLE), 4 MiB at
/// a time.
async fn write_zero_bytes(
    image: &Image,
    offset: u64,
    len: u64,
) -> std::result::Result<(), BlockError> {
    const STEP: u64 = 4 << 20;
    let zeros = Bytes::from(vec![0u8; STEP.min(len) as usize]);
    let mut at = 0;
    while at < len {
        let n = STEP.min(len - at);
        image.write(offset + at, zeros.slice(..n as usize)).await?;
        at += n;
    }
    Ok(())
}

/// Sends the replies in the order they complete, flushing when none waits.
async fn write_replies<W: AsyncWrite + Unpin>(
    mut wr: BufWriter<W>,
    mut rx: mpsc::UnboundedReceiver<Vec<Bytes>>,
) {
    while let Some(parts) = rx.recv().await {
        for p in parts {
            if wr.write_all(&p).await.is_err() {
                return;
            }
        }
        if rx.is_empty() && wr.flush().await.is_err() {
            return;
        }
    }
    let _ = wr.flush().await;
}

async fn send<W: AsyncWrite + Unpin>(wr: &mut W, b: Bytes) -> std::io::Result<()> {
    wr.write_all(&b).await?;
    wr.flush().await
}

/// Reads and drops `n` bytes (a refused request's payload).
async fn discard<R: AsyncRead + Unpin>(rd: &mut R, n: u64) -> std::io::Result<()> {
    let copied = tokio::io::copy(&mut rd.take(n), &mut tokio::io::sink()).await?;
    if copied < n {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

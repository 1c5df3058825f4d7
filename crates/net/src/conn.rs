//! One established connection: a writer task that batches queued frames into
//! vectored writes, a reader task that decodes frames out of one receive
//! buffer and routes replies to waiting callers and requests to the
//! [`Dispatcher`], and the bookkeeping that binds them (pending requests by
//! transaction id, the in-flight byte budget, the dispatch budget).

use std::collections::BTreeMap;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use shoal_proto::{
    ErrorReply, Frame, FrameDecoder, FrameFlags, FrameHeader, HEADER_LEN, Message, Pong,
};
use shoal_types::EntityName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};

use crate::config::NetConfig;
use crate::error::NetError;

/// Frames gathered into one vectored write at most.
const BATCH_FRAMES: usize = 64;
/// Bytes gathered into one vectored write before it is issued.
const BATCH_BYTES: usize = 1 << 20;
/// Receive buffer growth step.
const READ_CHUNK: usize = 64 * 1024;

/// Who is at the other end of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer's authenticated entity name.
    pub name: EntityName,
    /// The socket address of the connection's other end.
    pub addr: SocketAddr,
    /// Where the peer listens, if it announced it.
    pub listen_addr: Option<SocketAddr>,
    /// Feature bits both sides support.
    pub features: u64,
    /// The peer's capabilities for our service, when it authenticated with
    /// a monitor-issued ticket.
    pub caps: Option<String>,
    /// The record cipher, when the connection is in secure mode.
    pub cipher: Option<crate::secure::Cipher>,
}

impl std::fmt::Display for PeerInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at {}", self.name, self.addr)
    }
}

/// A reply to a request.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The control part.
    pub msg: Message,
    /// The data part.
    pub data: Bytes,
}

/// A request or one-way message received from a peer.
#[derive(Debug)]
pub struct Incoming {
    /// The message.
    pub msg: Message,
    /// Its data part.
    pub data: Bytes,
    /// The data part's checksum as the frame carried it, checked
    /// ([`shoal_proto::data_crc`]): passed on with the data, it spares the
    /// next hop a pass over it.
    pub data_crc: u32,
    /// The connection it came on (to send further messages back).
    pub conn: Connection,
    /// How to answer it; `None` for one-way messages.
    pub responder: Option<Responder>,
}

/// Receives what peers send. `dispatch` runs on the connection's reader
/// task: it must not block; hand long work to another task.
pub trait Dispatcher: Send + Sync + 'static {
    /// A request or one-way message arrived.
    fn dispatch(&self, incoming: Incoming);
    /// A connection ended, with the reason.
    fn connection_closed(&self, _peer: &PeerInfo, _reason: &str) {}
}

impl<F: Fn(Incoming) + Send + Sync + 'static> Dispatcher for F {
    fn dispatch(&self, incoming: Incoming) {
        self(incoming)
    }
}

/// Answers one request. Holding it counts against the connection's dispatch
/// budget; dropping it without replying frees the slot and the peer's
/// request eventually times out.
#[derive(Debug)]
pub struct Responder {
    conn: Connection,
    tid: u64,
    _slot: OwnedSemaphorePermit,
    observed: Option<(Arc<dyn ReplyHook>, std::time::Instant)>,
}

/// Told when a request is answered, for latency metrics: when it arrived
/// (as its dispatcher said), the reply's data bytes, and whether the reply
/// is an error. Runs on the replying task: keep it to a few atomic adds.
pub trait ReplyHook: Send + Sync + std::fmt::Debug {
    /// The request that arrived at `started` is answered now.
    fn replied(&self, started: std::time::Instant, data_bytes: usize, error: bool);
}

impl Responder {
    /// Tells `hook` when this request is answered (a request dropped
    /// unanswered tells nothing).
    pub fn observe(mut self, hook: Arc<dyn ReplyHook>, started: std::time::Instant) -> Self {
        self.observed = Some((hook, started));
        self
    }

    /// Sends the reply: see [`Responder::send`]. Returns at once.
    pub async fn reply(self, msg: impl Into<Message>, data: Bytes) -> Result<(), NetError> {
        self.send(msg, data)
    }

    /// Queues the reply without waiting. When the connection's send budget
    /// is full, a task waits for room, holding this request's dispatch
    /// slot: a peer that stops reading holds at most its
    /// `dispatch_requests_max` replies here, and the caller (a PG serving
    /// many clients) never waits on one slow reader.
    pub fn send(self, msg: impl Into<Message>, data: Bytes) -> Result<(), NetError> {
        self.send_with_data_crc(msg, data, None)
    }

    /// [`Responder::send`] with the data part's checksum
    /// ([`shoal_proto::data_crc`]) when the caller has it (a store folds it
    /// from the block checksums its read verified): the frame is sealed
    /// without another pass over the data.
    pub fn send_with_data_crc(
        mut self,
        msg: impl Into<Message>,
        data: Bytes,
        data_crc: Option<u32>,
    ) -> Result<(), NetError> {
        debug_assert!(data_crc.is_none_or(|c| c == shoal_proto::data_crc(&data)));
        let msg = msg.into();
        if let Some((hook, started)) = self.observed.take() {
            let error = match &msg {
                Message::ErrorReply(_) => true,
                Message::OsdOpReply(r) => r.code != 0,
                _ => false,
            };
            hook.replied(started, data.len(), error);
        }
        let inner = &self.conn.inner;
        let head = inner.seal(&msg, FrameFlags::REPLY, self.tid, &data, data_crc);
        inner.check_size(head.len() - HEADER_LEN, data.len())?;
        let cost = inner.cost(&head, &data);
        match Arc::clone(&inner.inflight).try_acquire_many_owned(cost) {
            Ok(permit) => inner.push(head, data, permit),
            Err(tokio::sync::TryAcquireError::Closed) => {
                Err(inner.closed_error(&inner.close_reason_or("closing")))
            }
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                tokio::spawn(async move {
                    let inner = &self.conn.inner;
                    if let Ok(permit) = Arc::clone(&inner.inflight).acquire_many_owned(cost).await {
                        let _ = inner.push(head, data, permit);
                    }
                });
                Ok(())
            }
        }
    }

    /// Answers with an error code and message.
    pub async fn error(self, code: u32, message: impl Into<String>) -> Result<(), NetError> {
        let msg = ErrorReply {
            code,
            message: message.into(),
        };
        self.reply(msg, Bytes::new()).await
    }
}

struct OutFrame {
    head: Bytes,
    data: Bytes,
    _permit: OwnedSemaphorePermit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Open,
    /// Send what is queued, then close.
    Draining,
    Closed,
}

type Waiter = oneshot::Sender<Result<Reply, NetError>>;

#[derive(Default)]
struct Pending {
    waiters: BTreeMap<u64, Waiter>,
    closed: Option<String>,
}

pub(crate) struct ConnInner {
    id: u64,
    peer: PeerInfo,
    label: String,
    config: Arc<NetConfig>,
    out: mpsc::UnboundedSender<OutFrame>,
    inflight: Arc<Semaphore>,
    inflight_max: u32,
    dispatch_slots: Arc<Semaphore>,
    pending: Mutex<Pending>,
    next_tid: AtomicU64,
    /// Frames received so far: a request that times out with none
    /// received meanwhile finds the connection dead (see
    /// [`ConnInner::timed_out`]).
    frames_in: AtomicU64,
    phase: watch::Sender<Phase>,
}

/// A handle on an established connection. Clones share the connection.
#[derive(Clone)]
pub struct Connection {
    pub(crate) inner: Arc<ConnInner>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Connection({})", self.inner.label)
    }
}

impl Connection {
    /// This connection's number, unique within its messenger.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The peer.
    pub fn peer(&self) -> &PeerInfo {
        &self.inner.peer
    }

    /// Sends a request and waits for its reply, with the configured timeout.
    pub async fn request(&self, msg: impl Into<Message>, data: Bytes) -> Result<Reply, NetError> {
        self.request_with_timeout(msg, data, self.inner.config.request_timeout)
            .await
    }

    /// Sends a request and waits up to `timeout` for its reply. An
    /// [`ErrorReply`] from the peer becomes [`NetError::Remote`].
    pub async fn request_with_timeout(
        &self,
        msg: impl Into<Message>,
        data: Bytes,
        timeout: Duration,
    ) -> Result<Reply, NetError> {
        // The timeout covers waiting for send budget as well as the reply;
        // the pending entry goes with the `PendingReply` however this ends.
        let heard = self.inner.frames_in.load(Ordering::Relaxed);
        let exchange = async {
            let pending = self.submit(msg, data).await?;
            pending.recv().await
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(self.inner.timed_out(timeout, heard)),
        }
    }

    /// Queues a request and returns once it is queued, before its reply:
    /// requests submitted one after another by one task leave in that
    /// order, while their replies are awaited concurrently (replication
    /// keeps a PG's changes in order this way). Await the returned
    /// [`PendingReply`] for the reply.
    pub async fn submit(
        &self,
        msg: impl Into<Message>,
        data: Bytes,
    ) -> Result<PendingReply, NetError> {
        self.submit_inner(msg.into(), data, None).await
    }

    /// [`Connection::submit`] for a data part whose checksum
    /// ([`shoal_proto::data_crc`]) the caller already has: computed once
    /// for several peers, or carried by the frame it arrived in. A wrong
    /// one makes the peer refuse the frame and close the connection.
    pub async fn submit_with_data_crc(
        &self,
        msg: impl Into<Message>,
        data: Bytes,
        data_crc: u32,
    ) -> Result<PendingReply, NetError> {
        debug_assert_eq!(data_crc, shoal_proto::data_crc(&data));
        self.submit_inner(msg.into(), data, Some(data_crc)).await
    }

    async fn submit_inner(
        &self,
        msg: Message,
        data: Bytes,
        data_crc: Option<u32>,
    ) -> Result<PendingReply, NetError> {
        let tid = self.inner.next_tid.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut p = self.inner.lock_pending();
            if let Some(reason) = &p.closed {
                return Err(self.inner.closed_error(reason));
            }
            p.waiters.insert(tid, tx);
        }
        let pending = PendingReply {
            inner: Arc::clone(&self.inner),
            tid,
            rx: Some(rx),
        };
        self.inner
            .enqueue(&msg, FrameFlags::default(), tid, data, data_crc)
            .await?;
        Ok(pending)
    }

    /// Sends a one-way message (no reply), waiting for send budget.
    pub async fn send(&self, msg: impl Into<Message>, data: Bytes) -> Result<(), NetError> {
        let msg = msg.into();
        self.inner
            .enqueue(&msg, FrameFlags::ONE_WAY, 0, data, None)
            .await
    }

    /// Whether the connection has closed.
    pub fn is_closed(&self) -> bool {
        self.inner.lock_pending().closed.is_some()
    }

    /// Why the connection closed, if it has.
    pub fn close_reason(&self) -> Option<String> {
        self.inner.lock_pending().closed.clone()
    }

    /// Closes the connection after sending what is already queued.
    pub fn close(&self) {
        self.inner.close("closed locally".to_string(), true);
    }

    /// Bytes queued for sending or being written, never more than the
    /// configured `ms_inflight_bytes_max`.
    pub fn queued_bytes(&self) -> u64 {
        u64::from(self.inner.inflight_max)
            .saturating_sub(self.inner.inflight.available_permits() as u64)
    }

    /// Requests sent on this connection and not yet answered.
    pub fn requests_pending(&self) -> usize {
        self.inner.lock_pending().waiters.len()
    }
}

/// The reply to a request queued with [`Connection::submit`]. Dropping it
/// forgets the request.
pub struct PendingReply {
    inner: Arc<ConnInner>,
    tid: u64,
    rx: Option<oneshot::Receiver<Result<Reply, NetError>>>,
}

impl PendingReply {
    /// Waits up to `timeout` for the reply. An [`ErrorReply`] from the peer
    /// becomes [`NetError::Remote`].
    pub async fn wait(self, timeout: Duration) -> Result<Reply, NetError> {
        let inner = Arc::clone(&self.inner);
        let heard = inner.frames_in.load(Ordering::Relaxed);
        match tokio::time::timeout(timeout, self.recv()).await {
            Ok(r) => r,
            Err(_) => Err(inner.timed_out(timeout, heard)),
        }
    }

    /// Waits for the reply, however long it takes.
    async fn recv(mut self) -> Result<Reply, NetError> {
        let Some(rx) = self.rx.take() else {
            return Err(self.inner.closed_error("reply already taken"));
        };
        match rx.await {
            Ok(r) => r,
            Err(_) => Err(self.inner.closed_error("connection dropped")),
        }
    }
}

impl std::fmt::Debug for PendingReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PendingReply({} tid {})", self.inner.label, self.tid)
    }
}

impl Drop for PendingReply {
    fn drop(&mut self) {
        self.inner.lock_pending().waiters.remove(&self.tid);
    }
}

impl ConnInner {
    /// A request timed out after `timeout`; `heard` was the count of
    /// frames received when it began. If the peer sent nothing at all
    /// since, the connection is taken for dead and closed now — a peer
    /// cut off by the network neither answers nor resets a TCP
    /// connection, which could stay silent for minutes after the network
    /// heals (retransmissions back off); whoever asks next connects anew.
    fn timed_out(&self, timeout: Duration, heard: u64) -> NetError {
        if self.frames_in.load(Ordering::Relaxed) == heard {
            tracing::debug!(peer = %self.label, "nothing received for {timeout:?}: closing the connection");
            self.close(
                format!("the peer sent nothing for {} ms", timeout.as_millis()),
                false,
            );
        }
        self.timeout_error(timeout)
    }

    fn timeout_error(&self, timeout: Duration) -> NetError {
        NetError::Timeout {
            peer: self.label.clone(),
            ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        }
    }

    fn lock_pending(&self) -> MutexGuard<'_, Pending> {
        // A panic while holding this lock cannot leave the map inconsistent.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn closed_error(&self, reason: &str) -> NetError {
        NetError::Closed {
            peer: self.label.clone(),
            reason: reason.to_string(),
        }
    }

    /// Fails every pending request and stops both tasks. `graceful` lets
    /// the writer send what is already queued first.
    pub(crate) fn close(&self, reason: String, graceful: bool) {
        let waiters = {
            let mut p = self.lock_pending();
            if p.closed.is_some() {
                return;
            }
            p.closed = Some(reason.clone());
            std::mem::take(&mut p.waiters)
        };
        self.inflight.close();
        self.dispatch_slots.close();
        let phase = if graceful {
            Phase::Draining
        } else {
            Phase::Closed
        };
        self.phase.send_replace(phase);
        for (_, w) in waiters {
            let _ = w.send(Err(self.closed_error(&reason)));
        }
    }

    fn check_size(&self, control: usize, data: usize) -> Result<(), NetError> {
        let limits = self.config.limits;
        let too_large = |what, len, max| NetError::TooLarge {
            peer: self.label.clone(),
            what,
            len,
            max,
        };
        if control > limits.control_bytes_max as usize {
            return Err(too_large("control part", control, limits.control_bytes_max));
        }
        if data > limits.data_bytes_max as usize {
            return Err(too_large("data part", data, limits.data_bytes_max));
        }
        Ok(())
    }

    fn seal(
        &self,
        msg: &Message,
        flags: FrameFlags,
        tid: u64,
        data: &Bytes,
        data_crc: Option<u32>,
    ) -> Bytes {
        let control = msg.encode_control();
        let crc = data_crc.unwrap_or_else(|| shoal_proto::data_crc(data));
        let header = FrameHeader::seal_with_data_crc(
            msg.msg_type() as u16,
            flags,
            tid,
            &control,
            data.len(),
            crc,
        );
        let mut head = BytesMut::with_capacity(HEADER_LEN + control.len());
        head.extend_from_slice(&header.to_bytes());
        head.extend_from_slice(&control);
        head.freeze()
    }

    fn cost(&self, head: &Bytes, data: &Bytes) -> u32 {
        u32::try_from(head.len() + data.len())
            .unwrap_or(u32::MAX)
            .min(self.inflight_max)
    }

    /// Queues a frame for the writer once the send budget has room.
    async fn enqueue(
        &self,
        msg: &Message,
        flags: FrameFlags,
        tid: u64,
        data: Bytes,
        data_crc: Option<u32>,
    ) -> Result<(), NetError> {
        let head = self.seal(msg, flags, tid, &data, data_crc);
        self.check_size(head.len() - HEADER_LEN, data.len())?;
        let permit = Arc::clone(&self.inflight)
            .acquire_many_owned(self.cost(&head, &data))
            .await
            .map_err(|_| self.closed_error(&self.close_reason_or("closing")))?;
        self.push(head, data, permit)
    }

    fn push(&self, head: Bytes, data: Bytes, permit: OwnedSemaphorePermit) -> Result<(), NetError> {
        self.out
            .send(OutFrame {
                head,
                data,
                _permit: permit,
            })
            .map_err(|_| self.closed_error(&self.close_reason_or("writer stopped")))
    }

    fn close_reason_or(&self, default: &str) -> String {
        self.lock_pending()
            .closed
            .clone()
            .unwrap_or_else(|| default.to_string())
    }
}

/// Sends a reply the reader itself owes (a `Pong`, an `ErrorReply`) through
/// the same send budget as every other frame. While the budget is full the
/// reader waits here and reads nothing more, so a peer that sends requests
/// but never reads the replies is pushed back by TCP: what it can make us
/// hold is one frame in the receive buffer plus the budget, and no task is
/// spawned per reply.
async fn reply_from_reader(
    conn: &Connection,
    tid: u64,
    msg: Message,
    data: Bytes,
) -> Result<(), NetError> {
    conn.inner
        .enqueue(&msg, FrameFlags::REPLY, tid, data, None)
        .await
}

/// The two halves of an established stream.
pub(crate) type Halves = (
    Box<dyn AsyncRead + Unpin + Send>,
    Box<dyn AsyncWrite + Unpin + Send>,
);

/// Starts the reader and writer tasks of an established connection,
/// number `id` of its messenger. `leftover` holds bytes already read past
/// the handshake. `on_closed` runs once, when the reader ends, with the
/// reason.
pub(crate) fn spawn(
    id: u64,
    peer: PeerInfo,
    config: Arc<NetConfig>,
    (read, write): Halves,
    leftover: BytesMut,
    dispatcher: Arc<dyn Dispatcher>,
    on_closed: impl FnOnce(&Connection, &str) + Send + 'static,
) -> (
    Connection,
    tokio::task::JoinHandle<()>,
    tokio::task::JoinHandle<()>,
) {
    let (out, rx) = mpsc::unbounded_channel();
    let inflight_max = u32::try_from(config.inflight_bytes_max).unwrap_or(u32::MAX >> 1);
    let (phase, phase_rx) = watch::channel(Phase::Open);
    let inner = Arc::new(ConnInner {
        id,
        label: peer.to_string(),
        peer,
        inflight: Arc::new(Semaphore::new(inflight_max as usize)),
        inflight_max,
        dispatch_slots: Arc::new(Semaphore::new(config.dispatch_requests_max as usize)),
        config,
        out,
        pending: Mutex::new(Pending::default()),
        next_tid: AtomicU64::new(1),
        frames_in: AtomicU64::new(0),
        phase,
    });
    let conn = Connection { inner };
    let writer = tokio::spawn(write_loop(
        Arc::clone(&conn.inner),
        write,
        rx,
        phase_rx.clone(),
    ));
    let reader_conn = conn.clone();
    let reader = tokio::spawn(async move {
        let result = read_loop(&reader_conn, read, leftover, dispatcher.as_ref(), phase_rx).await;
        let reason = match result {
            Ok(()) => reader_conn.inner.close_reason_or("closed"),
            // The peer hanging up is ordinary; anything else is worth a warning.
            Err(e @ NetError::Closed { .. }) => {
                tracing::debug!(peer = %reader_conn.inner.label, "connection ended: {e}");
                e.to_string()
            }
            Err(e) => {
                tracing::warn!(peer = %reader_conn.inner.label, "closing connection: {e}");
                e.to_string()
            }
        };
        reader_conn.inner.close(reason.clone(), false);
        dispatcher.connection_closed(&reader_conn.inner.peer, &reason);
        on_closed(&reader_conn, &reason);
    });
    (conn, reader, writer)
}

async fn write_loop(
    inner: Arc<ConnInner>,
    mut w: Box<dyn AsyncWrite + Unpin + Send>,
    mut rx: mpsc::UnboundedReceiver<OutFrame>,
    mut phase: watch::Receiver<Phase>,
) {
    let mut batch: Vec<OutFrame> = Vec::with_capacity(BATCH_FRAMES);
    loop {
        let first = tokio::select! {
            biased;
            f = rx.recv() => f,
            _ = phase.changed() => None,
        };
        let Some(first) = first else { break };
        let mut bytes = first.head.len() + first.data.len();
        batch.push(first);
        while batch.len() < BATCH_FRAMES && bytes < BATCH_BYTES {
            match rx.try_recv() {
                Ok(f) => {
                    bytes += f.head.len() + f.data.len();
                    batch.push(f);
                }
                Err(_) => break,
            }
        }
        if let Err(e) = write_batch(&mut w, &batch).await {
            inner.close(format!("write failed: {e}"), false);
            return;
        }
        batch.clear();
    }
    if *phase.borrow() == Phase::Draining {
        while let Ok(f) = rx.try_recv() {
            batch.push(f);
        }
        let _ = write_batch(&mut w, &batch).await;
    }
    let _ = w.shutdown().await;
}

/// Writes every frame of `batch` with as few vectored writes as the kernel
/// allows; data parts are never copied.
async fn write_batch<W: AsyncWrite + Unpin + ?Sized>(
    w: &mut W,
    batch: &[OutFrame],
) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(batch.len() * 2);
    for f in batch {
        slices.push(IoSlice::new(&f.head));
        if !f.data.is_empty() {
            slices.push(IoSlice::new(&f.data));
        }
    }
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let n = w.write_vectored(rest).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut rest, n);
    }
    // A secure stream may hold the last sealed record until flushed
    // (a socket's flush does nothing).
    w.flush().await
}

async fn read_loop(
    conn: &Connection,
    mut r: Box<dyn AsyncRead + Unpin + Send>,
    mut buf: BytesMut,
    dispatcher: &dyn Dispatcher,
    mut phase: watch::Receiver<Phase>,
) -> Result<(), NetError> {
    let inner = &conn.inner;
    let mut decoder =
        FrameDecoder::new(inner.config.limits).with_large_data_from(crate::recv::LARGE_DATA_BYTES);
    let bad_frame = |source| NetError::Frame {
        peer: inner.label.clone(),
        source,
    };
    loop {
        while let Some(frame) = decoder.decode(&mut buf).map_err(bad_frame)? {
            on_frame(conn, frame, dispatcher).await?;
        }
        if let Some(mut large) = decoder.take_large(&mut buf).map_err(bad_frame)? {
            let data = tokio::select! {
                biased;
                _ = phase.changed() => return Ok(()),
                d = crate::recv::receive(&mut r, &mut buf, &mut large) => {
                    d.map_err(|e| inner.closed_error(&format!("read failed: {e}")))?
                }
            };
            let Some(data) = data else {
                return Err(inner.closed_error("peer closed the connection"));
            };
            on_frame(conn, large.finish(data).map_err(bad_frame)?, dispatcher).await?;
            continue;
        }
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        let n = tokio::select! {
            biased;
            _ = phase.changed() => return Ok(()),
            r = r.read_buf(&mut buf) => r.map_err(|e| inner.closed_error(&format!("read failed: {e}")))?,
        };
        if n == 0 {
            return Err(inner.closed_error("peer closed the connection"));
        }
    }
}

async fn on_frame(
    conn: &Connection,
    frame: Frame,
    dispatcher: &dyn Dispatcher,
) -> Result<(), NetError> {
    let inner = &conn.inner;
    inner.frames_in.fetch_add(1, Ordering::Relaxed);
    let h = frame.header;
    if h.flags.contains(FrameFlags::REPLY) {
        let waiter = inner.lock_pending().waiters.remove(&h.tid);
        if let Some(w) = waiter {
            let peer = || inner.label.clone();
            let result = match Message::decode(h.msg_type, &frame.control) {
                Ok(Message::ErrorReply(e)) => Err(NetError::Remote {
                    peer: peer(),
                    code: e.code,
                    message: e.message,
                }),
                Ok(msg) => Ok(Reply {
                    msg,
                    data: frame.data,
                }),
                Err(source) => Err(NetError::Decode {
                    peer: peer(),
                    source,
                }),
            };
            let _ = w.send(result);
        }
        return Ok(());
    }
    let one_way = h.flags.contains(FrameFlags::ONE_WAY);
    let msg = match Message::decode(h.msg_type, &frame.control) {
        Ok(Message::Ping(p)) if !one_way => {
            let data = if p.echo { frame.data } else { Bytes::new() };
            return reply_from_reader(conn, h.tid, Pong { seq: p.seq }.into(), data).await;
        }
        Ok(m) if is_handshake(&m) => Err((
            ErrorReply::UNSUPPORTED,
            "handshake message after handshake".to_string(),
        )),
        Ok(m) => Ok(m),
        Err(e) => {
            tracing::debug!(peer = %inner.label, "undecodable message: {e}");
            let code = match e {
                shoal_proto::DecodeError::UnknownType(_) => ErrorReply::UNSUPPORTED,
                _ => ErrorReply::MALFORMED,
            };
            Err((code, e.to_string()))
        }
    };
    let msg = match msg {
        Ok(m) => m,
        Err((code, message)) => {
            if !one_way {
                let reply = ErrorReply { code, message }.into();
                reply_from_reader(conn, h.tid, reply, Bytes::new()).await?;
            }
            return Ok(());
        }
    };
    // Wait for a dispatch slot: while the peer has too many requests
    // unanswered, stop reading so TCP pushes back on it.
    let slot = Arc::clone(&inner.dispatch_slots)
        .acquire_owned()
        .await
        .map_err(|_| inner.closed_error(&inner.close_reason_or("closing")))?;
    let responder = (!one_way).then(|| Responder {
        observed: None,
        conn: conn.clone(),
        tid: h.tid,
        _slot: slot,
    });
    dispatcher.dispatch(Incoming {
        msg,
        data: frame.data,
        data_crc: h.data_crc,
        conn: conn.clone(),
        responder,
    });
    Ok(())
}

fn is_handshake(m: &Message) -> bool {
    matches!(
        m,
        Message::Hello(_)
            | Message::AuthChallenge(_)
            | Message::AuthProof(_)
            | Message::AuthDone(_)
            | Message::AuthReject(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_proto::{Ping, encode_frame};
    use tokio::io::AsyncWriteExt;

    fn peer() -> PeerInfo {
        PeerInfo {
            name: "client.evil".parse().unwrap(),
            addr: "127.0.0.1:4000".parse().unwrap(),
            listen_addr: None,
            features: 1,
            caps: None,
            cipher: None,
        }
    }

    /// A connection over an in-memory pipe; the test holds the other end.
    fn pipe_conn() -> (
        Connection,
        tokio::io::DuplexStream,
        Arc<Mutex<Option<String>>>,
    ) {
        pipe_conn_with(NetConfig::default())
    }

    fn pipe_conn_with(
        config: NetConfig,
    ) -> (
        Connection,
        tokio::io::DuplexStream,
        Arc<Mutex<Option<String>>>,
    ) {
        let (ours, theirs) = tokio::io::duplex(PIPE_BYTES);
        let (r, w) = tokio::io::split(ours);
        let closed = Arc::new(Mutex::new(None));
        let seen = closed.clone();
        let (conn, _, _) = spawn(
            1,
            peer(),
            Arc::new(config),
            (Box::new(r), Box::new(w)),
            BytesMut::new(),
            Arc::new(|_: Incoming| {}),
            move |_, reason| *seen.lock().unwrap() = Some(reason.to_string()),
        );
        (conn, theirs, closed)
    }

    const PIPE_BYTES: usize = 1 << 16;

    /// Writes `frames` into `w` one by one, counting those fully written.
    fn write_frames(
        mut w: tokio::io::WriteHalf<tokio::io::DuplexStream>,
        frames: Vec<Vec<u8>>,
    ) -> Arc<std::sync::atomic::AtomicUsize> {
        let written = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = written.clone();
        tokio::spawn(async move {
            for f in frames {
                if w.write_all(&f).await.is_err() {
                    return;
                }
                count.fetch_add(1, Ordering::SeqCst);
            }
        });
        written
    }

    /// On paused time the clock only moves once every task is idle, so
    /// this returns when nothing can make progress any more.
    async fn quiesce() {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    fn alive_tasks() -> usize {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    }

    /// Reads and decodes `n` frames from `r`.
    async fn read_frames(
        r: &mut tokio::io::ReadHalf<tokio::io::DuplexStream>,
        n: usize,
    ) -> Vec<Frame> {
        let mut decoder = FrameDecoder::new(NetConfig::default().limits);
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        while frames.len() < n {
            while let Some(f) = decoder.decode(&mut buf).unwrap() {
                frames.push(f);
            }
            if frames.len() < n {
                assert!(r.read_buf(&mut buf).await.unwrap() > 0, "pipe closed");
            }
        }
        frames
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_pings_and_never_reads_is_pushed_back_not_buffered() {
        const PING_BYTES: usize = 256 * 1024;
        const PINGS: usize = 64;
        let budget_bytes = 4 * PING_BYTES;
        let config = NetConfig {
            inflight_bytes_max: budget_bytes as u64,
            ..NetConfig::default()
        };
        let (conn, theirs, _) = pipe_conn_with(config);
        let (mut their_r, their_w) = tokio::io::split(theirs);
        let tasks_before = alive_tasks();
        let frames = (0..PINGS)
            .map(|i| {
                let ping = Message::from(Ping {
                    seq: i as u64,
                    echo: true,
                });
                let (t, control) = (ping.msg_type() as u16, ping.encode_control());
                let data = vec![i as u8; PING_BYTES];
                encode_frame(t, FrameFlags::default(), i as u64 + 1, &control, &data).to_vec()
            })
            .collect();
        let written = write_frames(their_w, frames);
        quiesce().await;
        // The pongs fill the pipe back (64 KiB) and then the budget (four
        // pings' worth); the reader then stops, so the peer gets at most
        // one more ping into the receive side before its writes block.
        let sent = written.load(Ordering::SeqCst);
        let fit = budget_bytes / PING_BYTES + 2;
        assert!(
            sent <= fit,
            "the peer wrote {sent} pings, at most {fit} fit"
        );
        assert!(conn.queued_bytes() <= budget_bytes as u64);
        assert_eq!(
            alive_tasks(),
            tasks_before + 1,
            "only the peer's writer task was added"
        );
        // Once the peer reads, every ping gets its own echo, in order.
        let pongs = read_frames(&mut their_r, PINGS).await;
        for (i, f) in pongs.iter().enumerate() {
            assert_eq!(f.header.tid, i as u64 + 1);
            assert!(f.header.flags.contains(FrameFlags::REPLY));
            assert_eq!(f.data.len(), PING_BYTES);
            assert!(f.data.iter().all(|&b| b == i as u8));
        }
        assert_eq!(written.load(Ordering::SeqCst), PINGS);
    }

    #[tokio::test(start_paused = true)]
    async fn error_replies_wait_for_the_send_budget_too() {
        const FRAMES: usize = 20_000;
        let config = NetConfig {
            inflight_bytes_max: 4096,
            ..NetConfig::default()
        };
        let (conn, theirs, _) = pipe_conn_with(config);
        let (mut their_r, their_w) = tokio::io::split(theirs);
        let tasks_before = alive_tasks();
        // Message type 999 does not exist: each request earns an ErrorReply.
        let frames = (0..FRAMES)
            .map(|i| encode_frame(999, FrameFlags::default(), i as u64 + 1, b"", b"").to_vec())
            .collect();
        let written = write_frames(their_w, frames);
        quiesce().await;
        let sent = written.load(Ordering::SeqCst);
        // Bounded by the two 64 KiB pipe directions and the 4 KiB budget,
        // far below the 20 000 the peer tried to send.
        assert!(sent < FRAMES / 4, "the peer wrote {sent} requests");
        assert!(conn.queued_bytes() <= 4096);
        assert_eq!(alive_tasks(), tasks_before + 1);
        let replies = read_frames(&mut their_r, FRAMES).await;
        for (i, f) in replies.iter().enumerate() {
            assert_eq!(f.header.tid, i as u64 + 1);
            let msg = Message::decode(f.header.msg_type, &f.control).unwrap();
            assert!(matches!(msg, Message::ErrorReply(_)), "{msg:?}");
        }
    }

    #[tokio::test]
    async fn a_bad_checksum_closes_the_connection_naming_the_peer() {
        let (conn, mut theirs, closed) = pipe_conn();
        let waiting = tokio::spawn({
            let conn = conn.clone();
            async move {
                conn.request(
                    Ping {
                        seq: 1,
                        echo: false,
                    },
                    Bytes::new(),
                )
                .await
            }
        });
        let mut f = encode_frame(11, FrameFlags::REPLY, 1, b"", b"payload");
        let last = f.len() - 1;
        f[last] ^= 1;
        theirs.write_all(&f).await.unwrap();
        let e = waiting.await.unwrap().unwrap_err();
        let text = e.to_string();
        assert!(text.contains("client.evil at 127.0.0.1:4000"), "{text}");
        assert!(text.contains("data checksum mismatch"), "{text}");
        for _ in 0..100 {
            if closed.lock().unwrap().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let reason = closed.lock().unwrap().clone().unwrap();
        assert!(reason.contains("bad frame from client.evil"), "{reason}");
        assert!(conn.is_closed());
        // The other end sees the connection closed.
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), theirs.read_to_end(&mut rest)).await;
    }

    #[tokio::test]
    async fn oversized_messages_are_refused_locally() {
        let (conn, _theirs, _) = pipe_conn();
        let big = Bytes::from(vec![0u8; (64 << 20) + 1]);
        let e = conn.send(Ping::default(), big).await.unwrap_err();
        assert!(
            matches!(
                e,
                NetError::TooLarge {
                    what: "data part",
                    ..
                }
            ),
            "{e}"
        );
    }
}

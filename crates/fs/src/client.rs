//! The file-system client: a session with the active MDS and file data
//! read and written straight to the OSDs.
//!
//! Every request to the MDS leaves through one task, in order, on one
//! connection; the MDS handles a session's requests in that order. So a
//! request need not be awaited before the next is sent: creates in a
//! directory the client holds [`CAP_CREATE`] on, and attribute changes on
//! files it holds [`CAP_EXCL`] on, are sent and not waited for, and a
//! later `fsync` ([`FsClient::sync`]) waits until every request sent
//! before it is answered (durable in the MDS's journal). Requests stay
//! queued until answered: after a failover the client opens a session
//! with the new MDS (reclaiming the old one) and sends again, in order,
//! every request not yet answered; the MDS's journal of completed requests
//! keeps a resend from applying twice.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use shoal_client::{Client, Error as ClientError, Pool};
use shoal_monclient::replies::{DfReply, FsMapReply};
use shoal_monclient::{Command, MonClient, TicketAuth};
use shoal_net::{Connection, Incoming, Messenger, Secret, TcpTransport};
use shoal_proto::{MdsReply, MdsRequest, Message};
use shoal_types::{EntityName, EntityType};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::msg::{self, CAP_CREATE, CAP_EXCL, Errno, Op, Out, Push, Reply, Request, SetAttr};
use crate::types::{Inode, OBJECT_SIZE, data_object};

/// Bytes of file data a client may have written and not yet durable.
const WRITE_BEHIND_BYTES: usize = 64 << 20;

/// The result of a request: its answer, or an errno.
pub type FsResult<T> = Result<T, Errno>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn eio(e: impl std::fmt::Display) -> Errno {
    Errno::new(libc::EIO, e.to_string())
}

/// A data operation's error as the kernel sees it: a full cluster is
/// ENOSPC, anything else EIO.
fn data_err(e: ClientError) -> Errno {
    match e {
        ClientError::NoSpace(m) => Errno::new(libc::ENOSPC, m),
        e => eio(e),
    }
}

/// How long a data write sent behind its writer's back is retried while
/// the cluster refuses it for want of space (Ceph's client holds such
/// writes until the cluster has room, without end). Past it the write is
/// the file's error, reported by its next fsync.
const FULL_RETRY: Duration = Duration::from_secs(600);

/// How long a data read or write waits through a cluster that does not
/// answer it (a PG peering after an OSD died, say): each op that times out
/// is sent again until this has passed, and only then is it EIO. Ceph's
/// client waits without end (`rados_osd_op_timeout` 0); an EIO after the
/// client's first op timeout (60 s) lost a write-behind whose writer had
/// closed the file (the soak found it, behind a peering stall).
const STALL_RETRY: Duration = Duration::from_secs(600);

/// Runs `op` again while it times out, up to [`STALL_RETRY`]. A data
/// write sent again writes the same bytes at the same place, and an
/// inode's writes go one at a time: order is kept.
async fn patiently<T, Fut>(what: &str, oid: &str, op: impl Fn() -> Fut) -> Result<T, ClientError>
where
    Fut: std::future::Future<Output = Result<T, ClientError>>,
{
    let deadline = tokio::time::Instant::now() + STALL_RETRY;
    loop {
        match op().await {
            Err(ClientError::Timeout(_, why)) if tokio::time::Instant::now() < deadline => {
                tracing::info!("{what} of {oid} timed out, sending it again: {why}");
            }
            r => return r,
        }
    }
}

/// One data write waiting for its inode's writer.
type QueuedWrite = (u64, Bytes, tokio::sync::OwnedSemaphorePermit);

/// Data writes in flight (write-behind).
#[derive(Default)]
struct Writes {
    /// Writes queued or in flight, by inode.
    count: HashMap<u64, u32>,
    /// The first failure of each inode's writes.
    errors: HashMap<u64, Errno>,
    /// A data write was refused for want of space and none has succeeded
    /// since: writes wait for their answer (ENOSPC from `write` itself,
    /// as Ceph's client answers a full pool) and closes wait for the
    /// writes in flight, so no failure goes unreported to a close.
    full: bool,
    /// Each busy inode's writer: one task applies its writes in order.
    writers: HashMap<u64, mpsc::UnboundedSender<QueuedWrite>>,
}

/// A request not yet answered.
struct Inflight {
    req: Request,
    reply: Option<oneshot::Sender<FsResult<Out>>>,
}

/// An entry made without waiting ([`FsClient::touch_dir`]).
#[derive(Debug, Clone, Copy)]
struct LocalMake {
    tid: u64,
    subdir: bool,
    time: i64,
}

/// What the client knows of an inode.
#[derive(Debug, Clone)]
pub struct Cached {
    /// The inode as last seen (with local changes under CAP_EXCL).
    pub inode: Inode,
    /// When it came from the MDS.
    pub fetched: Instant,
}

#[derive(Default)]
struct State {
    session: u64,
    conn: Option<Connection>,
    inflight: BTreeMap<u64, Inflight>,
    caps: HashMap<u64, u32>,
    /// Attribute changes made under CAP_EXCL not yet sent.
    dirty: HashMap<u64, SetAttr>,
    /// Changes sent (`Flush`) and not yet answered: (the newest Flush's
    /// tid, all of them merged). Answers the MDS gives meanwhile do not
    /// have them yet.
    flushing: HashMap<u64, (u64, SetAttr)>,
    /// The newest inode version seen of each inode.
    versions: HashMap<u64, u64>,
    inodes: HashMap<u64, Cached>,
    /// Directories whose every entry the client knows (it made them and
    /// holds CAP_CREATE): names in them.
    complete: HashMap<u64, HashSet<String>>,
    /// Entries made in a directory without waiting and not yet answered:
    /// (the Make's tid, whether a subdirectory, its time). An answer to
    /// an earlier request, handled late, predates them: they apply again
    /// over what it says of the directory (its link count and times).
    local_makes: HashMap<u64, Vec<LocalMake>>,
    /// Preallocated inode numbers.
    inos: std::collections::VecDeque<u64>,
    /// Open files, with how many opens.
    open: HashMap<u64, u32>,
    /// An asynchronous request failed: its errno, reported by the next sync.
    async_error: Option<Errno>,
}

/// A mounted file system's client side.
pub struct FsClient {
    rados: Client,
    data: Pool,
    monc: MonClient,
    fs_name: String,
    me: String,
    messenger: Messenger,
    state: Mutex<State>,
    next_tid: AtomicU64,
    queue: mpsc::UnboundedSender<u64>,
    /// Poked when the inflight set empties or a request is answered.
    answered: Notify,
    /// Poked when the connection broke.
    broken: Arc<Notify>,
    /// Data writes sent and not yet durable, by inode, and the first
    /// error of each inode's (reported by its next fsync).
    writes: Mutex<Writes>,
    /// Poked when a data write ends.
    write_done: Notify,
    /// Bytes of data writes in flight at most (write-behind).
    write_budget: Arc<tokio::sync::Semaphore>,
    timeout: Mutex<Duration>,
}

impl std::fmt::Debug for FsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsClient")
            .field("fs", &self.fs_name)
            .finish_non_exhaustive()
    }
}

impl FsClient {
    /// Connects to file system `fs` (`None`: the first) as the rados
    /// client's entity, whose key is `key`.
    pub async fn connect(
        rados: Client,
        key: Secret,
        fs: Option<&str>,
    ) -> Result<Arc<FsClient>, Errno> {
        let monc = rados.mon_client().clone();
        let map: FsMapReply = monc.command_as(&Command::FsLs).await.map_err(eio)?;
        let f = map.fs(fs).ok_or_else(|| {
            Errno::new(
                libc::ENOENT,
                match fs {
                    Some(n) => format!("no file system {n}"),
                    None => "no file system: make one with `shoal fs new`".to_string(),
                },
            )
        })?;
        let (fs_name, data_pool) = (f.name.clone(), f.data_pool.clone());
        let data = rados.pool(&data_pool).map_err(eio)?;
        let name: EntityName = rados.name().clone();
        let auth = TicketAuth::for_service(name.clone(), key, EntityType::Mds);
        auth.refresh_ticket(&monc).await.map_err(|e| {
            Errno::new(
                libc::EACCES,
                format!("no ticket for the MDS (does {name} have mds caps?): {e}"),
            )
        })?;
        let renewal = auth.spawn_renewal(monc.clone(), false);
        let (push_tx, mut push_rx) = mpsc::unbounded_channel::<Incoming>();
        let messenger = Messenger::new(
            name.clone(),
            rados.net_config().clone(),
            Arc::new(TcpTransport),
            Arc::new(auth),
            Arc::new(move |inc: Incoming| {
                let _ = push_tx.send(inc);
            }),
        );
        let (qtx, qrx) = mpsc::unbounded_channel();
        let client = Arc::new(FsClient {
            rados,
            data,
            monc,
            fs_name,
            me: format!("{name}@{}", std::process::id()),
            messenger,
            state: Mutex::new(State::default()),
            next_tid: AtomicU64::new(1),
            queue: qtx,
            answered: Notify::new(),
            broken: Arc::new(Notify::new()),
            writes: Mutex::new(Writes::default()),
            write_done: Notify::new(),
            write_budget: Arc::new(tokio::sync::Semaphore::new(WRITE_BEHIND_BYTES)),
            timeout: Mutex::new(Duration::from_secs(30)),
        });
        tokio::spawn(sender(Arc::downgrade(&client), qrx, renewal));
        let weak = Arc::downgrade(&client);
        tokio::spawn(async move {
            while let Some(inc) = push_rx.recv().await {
                let Some(c) = weak.upgrade() else { return };
                if let Message::MdsPush(p) = &inc.msg
                    && let Ok(push) = msg::decode::<Push>(&p.body)
                {
                    c.on_push(push);
                }
            }
        });
        let weak = Arc::downgrade(&client);
        tokio::spawn(async move {
            loop {
                let every = match weak.upgrade() {
                    Some(c) => *lock(&c.timeout) / 4,
                    None => return,
                };
                tokio::time::sleep(every.max(Duration::from_millis(250))).await;
                let Some(c) = weak.upgrade() else { return };
                c.send_async(Op::Renew, 0, 0);
                // Attributes changed under CAP_EXCL reach the MDS within a
                // few seconds even if nobody asks (Ceph's periodic cap
                // flush), once the data they describe is written.
                let dirty: Vec<u64> = lock(&c.state).dirty.keys().copied().collect();
                for ino in dirty {
                    if c.writes_pending(ino) == 0 {
                        c.flush_dirty(ino);
                    }
                }
            }
        });
        // The first session, at once: errors show at mount.
        client.request(Op::Sync, 0, 0).await?;
        Ok(client)
    }

    /// The file system's name.
    pub fn fs_name(&self) -> &str {
        &self.fs_name
    }

    /// The cluster client.
    pub fn rados(&self) -> &Client {
        &self.rados
    }

    fn enqueue(
        &self,
        op: Op,
        uid: u32,
        gid: u32,
        reply: Option<oneshot::Sender<FsResult<Out>>>,
    ) -> u64 {
        // The tid is taken and queued under one hold of the lock: requests
        // reach the MDS in the order of their tids, so an answer to `tid`
        // includes every request with a lower one.
        let mut st = lock(&self.state);
        let tid = self.next_tid.fetch_add(1, Ordering::Relaxed);
        let req = Request {
            session: 0,
            tid,
            oldest_tid: 0,
            uid,
            gid,
            op,
        };
        st.inflight.insert(tid, Inflight { req, reply });
        let _ = self.queue.send(tid);
        tid
    }

    /// Sends a request and waits for its answer.
    pub async fn request(&self, op: Op, uid: u32, gid: u32) -> FsResult<Out> {
        let (tx, rx) = oneshot::channel();
        self.enqueue(op, uid, gid, Some(tx));
        rx.await
            .unwrap_or_else(|_| Err(Errno::new(libc::EIO, "the client stopped")))
    }

    /// Sends a request without waiting; [`FsClient::sync`] waits for it.
    /// Returns its tid.
    pub fn send_async(&self, op: Op, uid: u32, gid: u32) -> u64 {
        self.enqueue(op, uid, gid, None)
    }

    /// Waits until every request and data write sent so far is durable;
    /// reports the first failure not yet reported: an asynchronous
    /// request's, or of `ino`'s data writes when given (an fsync of a
    /// file), else of any inode's (a sync of the file system).
    pub async fn sync(&self, ino: Option<u64>) -> FsResult<()> {
        self.wait_writes(None).await;
        let dirty: Vec<u64> = lock(&self.state).dirty.keys().copied().collect();
        for ino in dirty {
            self.flush_dirty(ino);
        }
        self.request(Op::Sync, 0, 0).await?;
        let failed = {
            let mut w = lock(&self.writes);
            let first = ino.or_else(|| w.errors.keys().next().copied());
            first.and_then(|i| w.errors.remove(&i))
        };
        if let Some(e) = failed {
            return Err(e);
        }
        loop {
            let notified = self.answered.notified();
            {
                let st = lock(&self.state);
                if st.inflight.is_empty()
                    || st.inflight.values().all(|i| matches!(i.req.op, Op::Renew))
                {
                    break;
                }
            }
            let _ = tokio::time::timeout(Duration::from_millis(100), notified).await;
        }
        match lock(&self.state).async_error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn on_push(self: &Arc<Self>, push: Push) {
        match push {
            Push::Revoke { ino } => {
                // The data written under the capability lands first, then
                // what changed goes, then the acknowledgement, on the same
                // ordered path.
                let c = Arc::clone(self);
                tokio::spawn(async move {
                    c.wait_writes(Some(ino)).await;
                    {
                        let mut st = lock(&c.state);
                        st.complete.remove(&ino);
                        st.caps.remove(&ino);
                        st.inodes.remove(&ino);
                        if let Some(set) = st.dirty.remove(&ino) {
                            c.queue_flush(&mut st, ino, set);
                        }
                    }
                    c.send_async(Op::CapAck { ino }, 0, 0);
                });
            }
            Push::Invalidate { ino, .. } => {
                lock(&self.state).inodes.remove(&ino);
            }
        }
    }

    /// Records the capabilities an answer grants on an inode, and the
    /// inode itself unless already learned (the answer's own handling
    /// learns it first, knowing which local changes it predates).
    pub fn learn(&self, inode: &Inode, caps: u32) {
        learn_in(&mut lock(&self.state), inode, caps, None);
    }

    /// Records what an unlink or rename answered: inodes changed or gone.
    pub fn learn_changed(&self, out: &Out) {
        if let Out::Changed { inodes, gone } = out {
            for i in inodes {
                self.learn(i, 0);
            }
            let mut st = lock(&self.state);
            for ino in gone {
                st.inodes.remove(ino);
                st.caps.remove(ino);
                st.dirty.remove(ino);
                st.versions.remove(ino);
            }
        }
    }

    /// Records capabilities the MDS granted on `ino`.
    pub fn add_caps(&self, ino: u64, caps: u32) {
        *lock(&self.state).caps.entry(ino).or_insert(0) |= caps;
    }

    /// Capabilities held on `ino`.
    pub fn caps(&self, ino: u64) -> u32 {
        lock(&self.state).caps.get(&ino).copied().unwrap_or(0)
    }

    /// Grants the client itself CAP_CREATE and CAP_EXCL on a directory it
    /// just made (the MDS does the same), with no entries known yet.
    pub fn made_dir(&self, ino: u64) {
        let mut st = lock(&self.state);
        *st.caps.entry(ino).or_insert(0) |= CAP_CREATE | CAP_EXCL;
        st.complete.insert(ino, HashSet::new());
    }

    /// Whether `name` in `dir` is known absent without asking the MDS.
    pub fn known_absent(&self, dir: u64, name: &str) -> bool {
        let st = lock(&self.state);
        st.caps.get(&dir).is_some_and(|c| c & CAP_CREATE != 0)
            && st
                .complete
                .get(&dir)
                .is_some_and(|names| !names.contains(name))
    }

    /// Notes a name added to or removed from a directory the client knows
    /// whole.
    pub fn note_entry(&self, dir: u64, name: &str, present: bool) {
        let mut st = lock(&self.state);
        if let Some(names) = st.complete.get_mut(&dir) {
            if present {
                names.insert(name.to_string());
            } else {
                names.remove(name);
            }
        }
    }

    /// The cached inode, if fresh enough (or held exclusively).
    pub fn cached(&self, ino: u64, fresh: Duration) -> Option<Inode> {
        let st = lock(&self.state);
        let c = st.inodes.get(&ino)?;
        let excl = st.caps.get(&ino).is_some_and(|c| c & CAP_EXCL != 0);
        (excl || c.fetched.elapsed() < fresh).then(|| c.inode.clone())
    }

    /// An inode number for an asynchronous create, when the client has
    /// some left; asks for more in the background when running low.
    pub fn take_ino(&self) -> Option<u64> {
        let (ino, low) = {
            let mut st = lock(&self.state);
            let ino = match st.inos.front() {
                Some(&i) if i != 0 => st.inos.pop_front(),
                _ => None,
            };
            (ino, st.inos.iter().filter(|i| **i != 0).count() < 256)
        };
        if low {
            self.refill_inos();
        }
        ino
    }

    fn refill_inos(&self) {
        // One refill in flight at a time: marked by a zero at the back.
        {
            let mut st = lock(&self.state);
            if st.inos.back() == Some(&0) {
                return;
            }
            st.inos.push_back(0);
        }
        // The answer lands in `inos` (see `send_one`); nobody waits.
        let (tx, _rx) = oneshot::channel();
        self.enqueue(Op::AllocInos { count: 1024 }, 0, 0, Some(tx));
    }

    /// Applies a local attribute change under CAP_EXCL (sent later).
    pub fn set_local(&self, ino: u64, set: &SetAttr) -> Option<Inode> {
        let mut st = lock(&self.state);
        if st.caps.get(&ino).is_none_or(|c| c & CAP_EXCL == 0) {
            return None;
        }
        let d = st.dirty.entry(ino).or_default();
        merge(d, set);
        let c = st.inodes.get_mut(&ino)?;
        overlay(&mut c.inode, set);
        Some(c.inode.clone())
    }

    /// Sends what was changed locally on `ino` (without waiting).
    pub fn flush_dirty(&self, ino: u64) {
        let mut st = lock(&self.state);
        if let Some(set) = st.dirty.remove(&ino) {
            self.queue_flush(&mut st, ino, set);
        }
    }

    /// Queues changes made under CAP_EXCL, remembered as in flight until
    /// answered. Taken from `dirty` and queued under one hold of the
    /// state's lock: a revoke that finds nothing dirty then queues its
    /// CapAck behind this flush, never before it (the MDS would answer
    /// the waiting request with the size before the flush).
    fn queue_flush(&self, st: &mut State, ino: u64, set: SetAttr) {
        let tid = self.next_tid.fetch_add(1, Ordering::Relaxed);
        let f = st.flushing.entry(ino).or_insert((tid, SetAttr::default()));
        f.0 = tid;
        merge(&mut f.1, &set);
        let req = Request {
            session: 0,
            tid,
            oldest_tid: 0,
            uid: 0,
            gid: 0,
            op: Op::Flush { ino, set },
        };
        st.inflight.insert(tid, Inflight { req, reply: None });
        let _ = self.queue.send(tid);
    }

    /// Notes an open of `ino`.
    pub fn opened(&self, ino: u64) {
        *lock(&self.state).open.entry(ino).or_insert(0) += 1;
    }

    /// Notes a close of `ino`.
    pub fn closed(&self, ino: u64) {
        let mut st = lock(&self.state);
        if let Some(n) = st.open.get_mut(&ino) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                st.open.remove(&ino);
            }
        }
    }

    /// Forgets what is cached of `ino` (changes made under CAP_EXCL and
    /// not yet sent stay, and apply again to what the MDS answers next).
    pub fn forget(&self, ino: u64) {
        lock(&self.state).inodes.remove(&ino);
    }

    /// A directory gained an entry made without waiting (by the Make
    /// `tid`): its cached times (and link count, for a subdirectory) move
    /// as the MDS's will, and keep so over answers that predate the Make.
    pub fn touch_dir(&self, dir: u64, subdir: bool, now: i64, tid: u64) {
        touch_dir_in(&mut lock(&self.state), dir, subdir, now, tid);
    }

    /// Reads `len` bytes at `off` of a file of `size` bytes: holes and
    /// absent objects read as zeros.
    pub async fn read(&self, ino: u64, off: u64, len: u64, size: u64) -> FsResult<Bytes> {
        if off >= size {
            return Ok(Bytes::new());
        }
        let end = off.saturating_add(len).min(size);
        let mut out = BytesMut::with_capacity((end - off) as usize);
        let reads = pieces(off, end);
        let futs = reads.iter().map(|(objno, in_obj, n)| {
            let pool = self.data.clone();
            let oid = data_object(ino, *objno);
            let (in_obj, n) = (*in_obj, *n);
            async move {
                match patiently("a read", &oid, || pool.read(&oid, in_obj, n)).await {
                    Ok(b) => Ok((b, n)),
                    Err(ClientError::NotFound(_)) => Ok((Bytes::new(), n)),
                    Err(e) => Err(eio(e)),
                }
            }
        });
        for r in join_all(futs).await {
            let (b, n) = r?;
            out.extend_from_slice(&b[..b.len().min(n as usize)]);
            out.resize(out.len() + (n as usize - b.len().min(n as usize)), 0);
        }
        Ok(out.freeze())
    }

    /// Writes `data` at `off` (straight to the OSDs, durable on return).
    /// A refusal for want of space puts the client in its full state
    /// ([`FsClient::is_full`]); a write that succeeds takes it out.
    pub async fn write(&self, ino: u64, off: u64, data: Bytes) -> FsResult<()> {
        let r = self.write_data(ino, off, data).await;
        match &r {
            Ok(()) => lock(&self.writes).full = false,
            Err(e) if e.errno == libc::ENOSPC => lock(&self.writes).full = true,
            Err(_) => {}
        }
        r
    }

    /// Whether the last data write answered was refused for want of space.
    pub fn is_full(&self) -> bool {
        lock(&self.writes).full
    }

    async fn write_data(&self, ino: u64, off: u64, data: Bytes) -> FsResult<()> {
        let writes = pieces(off, off + data.len() as u64)
            .into_iter()
            .map(|(objno, in_obj, n)| {
                let at = (objno * OBJECT_SIZE + in_obj - off) as usize;
                (objno, in_obj, data.slice(at..at + n as usize))
            });
        let futs = writes.into_iter().map(|(objno, in_obj, chunk)| {
            let pool = self.data.clone();
            let oid = data_object(ino, objno);
            async move {
                patiently("a write", &oid, || pool.write(&oid, in_obj, chunk.clone()))
                    .await
                    .map_err(data_err)
            }
        });
        for r in join_all(futs).await {
            r?;
        }
        Ok(())
    }

    /// Sends `data` at `off` to the OSDs without waiting, when the budget
    /// of bytes in flight allows (false: write it yourself, waiting).
    /// One task per inode applies its writes in the order given; reads,
    /// truncates, fsyncs and revokes of the inode wait for them.
    pub fn write_behind(self: &Arc<Self>, ino: u64, off: u64, data: Bytes) -> bool {
        if self.is_full() {
            // The caller writes and waits: its `write` gets the ENOSPC.
            return false;
        }
        let n = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let Ok(permit) = Arc::clone(&self.write_budget).try_acquire_many_owned(n.max(1)) else {
            return false;
        };
        let mut w = lock(&self.writes);
        *w.count.entry(ino).or_insert(0) += 1;
        if let Some(tx) = w.writers.get(&ino) {
            let _ = tx.send((off, data, permit));
            return true;
        }
        let (tx, mut rx) = mpsc::unbounded_channel::<QueuedWrite>();
        let _ = tx.send((off, data, permit));
        w.writers.insert(ino, tx);
        drop(w);
        let c = Arc::clone(self);
        tokio::spawn(async move {
            while let Some((off, data, permit)) = rx.recv().await {
                // The writer of this data was told it was written: a
                // refusal for want of space is retried (as Ceph's client
                // holds writes while the cluster is full) until space is
                // freed or FULL_RETRY runs out; only then is it the file's
                // error, for its close or fsync.
                let deadline = tokio::time::Instant::now() + FULL_RETRY;
                let r = loop {
                    match c.write(ino, off, data.clone()).await {
                        Err(e)
                            if e.errno == libc::ENOSPC
                                && tokio::time::Instant::now() < deadline =>
                        {
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                        r => break r,
                    }
                };
                drop(permit);
                let mut w = lock(&c.writes);
                if let Err(e) = r {
                    tracing::warn!("a data write of {ino:x} failed: {}", e.message);
                    w.errors.entry(ino).or_insert(e);
                }
                let left = w.count.get_mut(&ino).map_or(0, |k| {
                    *k = k.saturating_sub(1);
                    *k
                });
                if left == 0 {
                    // Nothing queued: the next write starts a new writer.
                    w.count.remove(&ino);
                    w.writers.remove(&ino);
                    drop(w);
                    c.write_done.notify_waiters();
                    return;
                }
                drop(w);
                c.write_done.notify_waiters();
            }
        });
        true
    }

    /// Data writes of `ino` in flight.
    pub fn writes_pending(&self, ino: u64) -> u32 {
        lock(&self.writes).count.get(&ino).copied().unwrap_or(0)
    }

    /// Waits until the data writes of `ino` (`None`: of every inode) in
    /// flight are durable.
    pub async fn wait_writes(&self, ino: Option<u64>) {
        loop {
            let done = self.write_done.notified();
            {
                let w = lock(&self.writes);
                let busy = match ino {
                    Some(i) => w.count.contains_key(&i),
                    None => !w.count.is_empty(),
                };
                if !busy {
                    return;
                }
            }
            let _ = tokio::time::timeout(Duration::from_millis(50), done).await;
        }
    }

    /// The first failed data write of `ino`, if any (taken).
    pub fn take_write_error(&self, ino: u64) -> Option<Errno> {
        lock(&self.writes).errors.remove(&ino)
    }

    /// Zeroes (punches) `len` bytes at `off` of the data.
    pub async fn zero(&self, ino: u64, off: u64, len: u64, size: u64) -> FsResult<()> {
        let end = off.saturating_add(len).min(size);
        for (objno, in_obj, n) in pieces(off, end) {
            let oid = data_object(ino, objno);
            let r = patiently("a punch", &oid, || async {
                if in_obj == 0 && n == OBJECT_SIZE {
                    self.data.remove(&oid).await
                } else {
                    self.data.zero(&oid, in_obj, n).await
                }
            })
            .await;
            match r {
                Ok(()) | Err(ClientError::NotFound(_)) => {}
                Err(e) => return Err(data_err(e)),
            }
        }
        Ok(())
    }

    /// Bytes and objects used and available in the data pool (statfs).
    pub async fn statfs(&self) -> FsResult<(u64, u64, u64)> {
        let df: DfReply = self.monc.command_as(&Command::Df).await.map_err(eio)?;
        Ok((
            df.stats.total_bytes,
            df.stats.total_avail_bytes,
            df.objects(),
        ))
    }

    /// Ends the session (capabilities and opens go) and stops.
    pub async fn close(&self) {
        let _ = tokio::time::timeout(Duration::from_secs(10), self.sync(None)).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.request(Op::SessionClose, 0, 0))
            .await;
        self.messenger.shutdown().await;
    }

    async fn find_mds(&self) -> Option<SocketAddr> {
        let map: FsMapReply = self.monc.command_as(&Command::FsLs).await.ok()?;
        map.fs(Some(&self.fs_name))?
            .active
            .as_ref()?
            .addr
            .parse()
            .ok()
    }

    /// Connects to the active MDS and opens (or reclaims) the session;
    /// then sends again every request not answered.
    async fn reconnect(&self) -> Result<(), Errno> {
        let addr = self
            .find_mds()
            .await
            .ok_or_else(|| Errno::new(libc::EAGAIN, "no active MDS"))?;
        let conn = self.messenger.connect(addr).await.map_err(eio)?;
        let (old, open, caps) = {
            let st = lock(&self.state);
            (
                st.session,
                // Once per open: the MDS counts each (and each close).
                st.open
                    .iter()
                    .flat_map(|(i, n)| std::iter::repeat_n(*i, *n as usize))
                    .collect::<Vec<_>>(),
                st.caps.iter().map(|(i, c)| (*i, *c)).collect::<Vec<_>>(),
            )
        };
        let req = Request {
            session: 0,
            tid: 0,
            oldest_tid: 0,
            uid: 0,
            gid: 0,
            op: Op::SessionOpen {
                client: self.me.clone(),
                reclaim: old,
                open,
                caps,
            },
        };
        let reply = conn
            .request_with_timeout(
                MdsRequest {
                    body: msg::encode(&req),
                },
                Bytes::new(),
                Duration::from_secs(10),
            )
            .await
            .map_err(eio)?;
        let Message::MdsReply(r) = reply.msg else {
            return Err(Errno::new(libc::EIO, "the MDS answered something else"));
        };
        let r: Reply = msg::decode(&r.body)?;
        match r.result? {
            Out::Session { id, timeout_ms, .. } => {
                *lock(&self.timeout) = Duration::from_millis(timeout_ms.max(1000));
                let mut st = lock(&self.state);
                if old != 0 && id != old {
                    // A new session: what the old one held is gone.
                    st.caps.clear();
                    st.complete.clear();
                    st.inos.clear();
                }
                st.session = id;
                st.conn = Some(conn);
                tracing::info!(session = id, %addr, "file-system session open");
                Ok(())
            }
            _ => Err(Errno::new(libc::EIO, "the MDS answered something else")),
        }
    }
}

/// [`FsClient::learn`] under a hold of the state's lock the caller has.
/// [`FsClient::touch_dir`] on the client's state.
fn touch_dir_in(st: &mut State, dir: u64, subdir: bool, now: i64, tid: u64) {
    st.local_makes.entry(dir).or_default().push(LocalMake {
        tid,
        subdir,
        time: now,
    });
    if let Some(c) = st.inodes.get_mut(&dir) {
        c.inode.mtime = now;
        c.inode.ctime = now;
        if subdir {
            c.inode.nlink += 1;
        }
    }
    // Times set earlier and not yet sent are older than this change.
    if let Some(d) = st.dirty.get_mut(&dir) {
        if d.mtime.is_some() {
            d.mtime = Some(now);
        }
        if d.ctime.is_some() {
            d.ctime = Some(now);
        }
    }
}

/// Records an inode an answer gives. `tid` is the answered request's
/// (`None`: a second look at an answer already learned, which only adds
/// `caps` when that inode is cached already).
fn learn_in(st: &mut State, inode: &Inode, caps: u32, tid: Option<u64>) {
    if caps != 0 {
        *st.caps.entry(inode.ino).or_insert(0) |= caps;
    }
    // Answers are handled concurrently: one older than what is known
    // (a lower version: the MDS bumps it with every change) is dropped.
    let cached = st.inodes.contains_key(&inode.ino);
    let seen = st.versions.entry(inode.ino).or_insert(0);
    if inode.version < *seen || (tid.is_none() && inode.version == *seen && cached) {
        return;
    }
    *seen = inode.version;
    let mut keep_dirty = st.flushing.get(&inode.ino).map(|f| f.1.clone());
    if let Some(d) = st.dirty.get(&inode.ino) {
        merge(keep_dirty.get_or_insert_with(SetAttr::default), d);
    }
    let mut inode = inode.clone();
    if let Some(d) = keep_dirty {
        let ctime = inode.ctime;
        overlay(&mut inode, &d);
        inode.ctime = inode.ctime.max(ctime);
    }
    // Entries made here without waiting, sent after the answered request:
    // the answer does not count them yet.
    let after = tid.unwrap_or(0);
    for m in st.local_makes.get(&inode.ino).into_iter().flatten() {
        if m.tid > after {
            inode.nlink += u32::from(m.subdir);
            inode.mtime = inode.mtime.max(m.time);
            inode.ctime = inode.ctime.max(m.time);
        }
    }
    st.inodes.insert(
        inode.ino,
        Cached {
            inode,
            fetched: Instant::now(),
        },
    );
}

/// The bytes `start..end` of a file as (object number, offset in the
/// object, length), object by object.
fn pieces(start: u64, end: u64) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    let mut at = start;
    while at < end {
        let in_obj = at % OBJECT_SIZE;
        let n = (OBJECT_SIZE - in_obj).min(end - at);
        out.push((at / OBJECT_SIZE, in_obj, n));
        at += n;
    }
    out
}

fn merge(d: &mut SetAttr, s: &SetAttr) {
    macro_rules! m {
        ($f:ident) => {
            if s.$f.is_some() {
                d.$f = s.$f;
            }
        };
    }
    m!(perm);
    m!(uid);
    m!(gid);
    m!(size);
    m!(atime);
    m!(mtime);
    m!(ctime);
}

/// Applies attribute changes to an inode as the MDS will.
pub fn overlay(i: &mut Inode, s: &SetAttr) {
    if let Some(v) = s.perm {
        i.perm = v & 0o7777;
    }
    if let Some(v) = s.uid {
        i.uid = v;
    }
    if let Some(v) = s.gid {
        i.gid = v;
    }
    if let Some(v) = s.size {
        i.size = v;
    }
    if let Some(v) = s.atime {
        i.atime = v;
    }
    if let Some(v) = s.mtime {
        i.mtime = v;
    }
    if let Some(v) = s.ctime {
        i.ctime = v;
    }
}

async fn join_all<F>(futs: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        match h.await {
            Ok(v) => out.push(v),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    out
}

/// Sends queued requests in order; reconnects (and resends everything
/// unanswered, in order) when the connection breaks.
async fn sender(
    weak: std::sync::Weak<FsClient>,
    mut rx: mpsc::UnboundedReceiver<u64>,
    renewal: tokio::task::JoinHandle<()>,
) {
    struct Abort(tokio::task::JoinHandle<()>);
    impl Drop for Abort {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let _renewal = Abort(renewal);
    let Some(broken) = weak.upgrade().map(|c| Arc::clone(&c.broken)) else {
        return;
    };
    let mut need_resend = false;
    loop {
        let tid = tokio::select! {
            t = rx.recv() => match t { Some(t) => Some(t), None => return },
            () = broken.notified() => None,
        };
        let Some(c) = weak.upgrade() else { return };
        if tid.is_none() {
            need_resend = true;
        }
        // Connected?
        let connected = lock(&c.state).conn.as_ref().is_some_and(|k| !k.is_closed());
        if !connected || need_resend {
            let mut backoff = Duration::from_millis(100);
            loop {
                match c.reconnect().await {
                    Ok(()) => break,
                    Err(e) => {
                        tracing::debug!("mds reconnect: {}", e.message);
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(2));
                    }
                }
            }
            // Everything unanswered goes again, in order (the tid that
            // brought us here among them).
            let tids: Vec<u64> = lock(&c.state).inflight.keys().copied().collect();
            need_resend = false;
            for t in tids {
                send_one(&c, t).await;
            }
            continue;
        }
        if let Some(t) = tid {
            send_one(&c, t).await;
        }
    }
}

async fn send_one(c: &Arc<FsClient>, tid: u64) {
    let (conn, body) = {
        let mut st = lock(&c.state);
        let session = st.session;
        let Some(conn) = st.conn.clone() else { return };
        // Every lower tid has been answered: the MDS may forget those.
        let oldest = st.inflight.keys().next().copied().unwrap_or(tid);
        let Some(inf) = st.inflight.get_mut(&tid) else {
            return;
        };
        inf.req.session = session;
        inf.req.oldest_tid = oldest;
        (conn, msg::encode(&inf.req))
    };
    let pending = match conn.submit(MdsRequest { body }, Bytes::new()).await {
        Ok(p) => p,
        Err(_) => {
            c.broken.notify_one();
            return;
        }
    };
    let weak = Arc::downgrade(c);
    tokio::spawn(async move {
        let r = pending.wait(Duration::from_secs(600)).await;
        let Some(c) = weak.upgrade() else { return };
        let reply = match r {
            Ok(reply) => match reply.msg {
                Message::MdsReply(MdsReply { body }) => msg::decode::<Reply>(&body).ok(),
                _ => None,
            },
            Err(_) => None,
        };
        match reply {
            Some(Reply { result: Err(e), .. })
                if e.errno == libc::ESTALE || e.errno == libc::EAGAIN =>
            {
                // The MDS does not know the session (failover) or is a
                // standby: find the active one and send again.
                tokio::time::sleep(Duration::from_millis(200)).await;
                if lock(&c.state)
                    .conn
                    .as_ref()
                    .is_some_and(|k| k.id() == conn.id())
                {
                    conn.close();
                }
                c.broken.notify_one();
            }
            Some(Reply { result, .. }) => {
                // The MDS handles a session's requests in order: an answer
                // to request `tid` includes every Flush sent before it. What
                // was flushed stops overlaying the cache in the same hold of
                // the lock that learns the answer: in between, an older
                // answer handled concurrently would be learned bare (an
                // unlink's, from before the flush, with the size before it).
                let inf = {
                    let mut st = lock(&c.state);
                    if let Some(Op::Make { parent, .. }) = st.inflight.get(&tid).map(|i| &i.req.op)
                    {
                        let parent = *parent;
                        if let Some(v) = st.local_makes.get_mut(&parent) {
                            v.retain(|m| m.tid != tid);
                            if v.is_empty() {
                                st.local_makes.remove(&parent);
                            }
                        }
                    }
                    let answered: &[Inode] = match &result {
                        Ok(Out::Inode { inode, .. }) => std::slice::from_ref(inode),
                        Ok(Out::Changed { inodes, .. }) => inodes,
                        _ => &[],
                    };
                    for inode in answered {
                        if st.flushing.get(&inode.ino).is_some_and(|f| f.0 <= tid) {
                            st.flushing.remove(&inode.ino);
                        }
                        learn_in(&mut st, inode, 0, Some(tid));
                    }
                    let inf = st.inflight.remove(&tid);
                    if let Some(Inflight {
                        req:
                            Request {
                                op: Op::Flush { ino, .. },
                                ..
                            },
                        ..
                    }) = &inf
                        && st.flushing.get(ino).is_some_and(|f| f.0 == tid)
                    {
                        // A flush that failed: nothing more to overlay.
                        st.flushing.remove(ino);
                    }
                    inf
                };
                if let Some(inf) = inf {
                    if let Err(e) = &result
                        && inf.reply.is_none()
                        && !matches!(inf.req.op, Op::Renew)
                    {
                        tracing::warn!("an asynchronous {:?} failed: {}", inf.req.op, e.message);
                        lock(&c.state).async_error.get_or_insert(e.clone());
                    }
                    if let Op::AllocInos { .. } = &inf.req.op {
                        let mut st = lock(&c.state);
                        st.inos.retain(|i| *i != 0);
                        if let Ok(Out::Inos { start, count }) = &result {
                            st.inos.extend(*start..*start + *count);
                        }
                    }
                    if let Some(tx) = inf.reply {
                        let _ = tx.send(result);
                    }
                }
                c.answered.notify_waiters();
            }
            None => {
                // Lost connection: resend after reconnecting (unless that
                // already happened).
                if lock(&c.state)
                    .conn
                    .as_ref()
                    .is_some_and(|k| k.id() == conn.id())
                {
                    conn.close();
                    c.broken.notify_one();
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Kind;

    fn dir(ino: u64, version: u64, nlink: u32, time: i64) -> Inode {
        let mut i = Inode::new(ino, Kind::Dir, 0o755, 0, 0, time);
        i.version = version;
        i.nlink = nlink;
        i
    }

    fn cached(st: &State, ino: u64) -> Inode {
        st.inodes
            .get(&ino)
            .map(|c| c.inode.clone())
            .expect("cached")
    }

    #[test]
    fn a_late_answer_keeps_the_subdirectories_made_without_waiting() {
        let mut st = State::default();
        // `mkdir x` without waiting (Make tid 1), then `mkdir x/child`
        // without waiting (Make tid 2).
        learn_in(&mut st, &dir(7, 1, 2, 10), 0, None);
        touch_dir_in(&mut st, 7, true, 20, 2);
        assert_eq!(cached(&st, 7).nlink, 3);
        // Make 1's answer, handled after: x as the MDS had it then.
        learn_in(&mut st, &dir(7, 2, 2, 10), 0, Some(1));
        let x = cached(&st, 7);
        assert_eq!((x.nlink, x.mtime, x.ctime), (3, 20, 20));
        // A second look at that answer changes nothing.
        learn_in(&mut st, &dir(7, 2, 2, 10), 0, None);
        assert_eq!(cached(&st, 7).nlink, 3);
        // An answer to a later request already counts the child, before
        // Make 2's own answer is handled.
        learn_in(&mut st, &dir(7, 3, 3, 20), 0, Some(3));
        assert_eq!(cached(&st, 7).nlink, 3);
        // Forgotten (a rename), then fetched again: what the MDS says.
        st.inodes.remove(&7);
        learn_in(&mut st, &dir(7, 4, 2, 30), 0, Some(4));
        assert_eq!(cached(&st, 7).nlink, 2);
    }
}

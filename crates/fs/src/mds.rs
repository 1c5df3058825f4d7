//! `shoal mds`: the metadata server.
//!
//! A standby sends beacons to the monitors until the file-system map gives
//! it a file system's rank, with an incarnation. It then takes the journal
//! over (fencing any older MDS out of it), replays it into the inode and
//! directory objects, and serves: one task (the [`Engine`]) handles every
//! client request in arrival order against its cache of inodes and
//! directories, and hands the resulting journal event and the answer to
//! the journal task, which appends the events of everything queued in one
//! write (group commit) and answers the clients once it is durable. Every
//! few thousand events the journal task writes them into the objects and
//! trims the journal.
//!
//! Capabilities: a client that makes a file holds [`CAP_EXCL`] on it (it
//! may change its size and times itself and tell the MDS later), and one
//! alone in a directory holds [`CAP_CREATE`] on it (it may create there
//! without waiting). When another session touches that inode, the MDS
//! parks the request, asks the holder to give the capability back
//! ([`Push::Revoke`]), and answers once the holder acknowledged (after
//! sending what it did under it) or its session timed out.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_client::{Client, Error as ClientError};
use shoal_monclient::replies::FsMapReply;
use shoal_monclient::{Command, MonClient, TicketAuth};
use shoal_net::{Connection, Incoming, Messenger, Responder, TcpTransport};
use shoal_proto::{MdsPush, MdsReply, Message};
use shoal_types::{EntityName, EntityType};
use tokio::sync::mpsc;

use crate::journal::{self, Event, Head, JournalError, Update};
use crate::msg::{self, CAP_CREATE, CAP_EXCL, Errno, Op, Out, Push, Reply, Request, SetAttr};
use crate::store::Store;
use crate::types::{
    Dentry, FILE_SIZE_MAX, FIRST_INO, Inode, Kind, NAME_MAX, Names, PATH_MAX, ROOT_INO, XATTRS_MAX,
    now_ns,
};

/// How an MDS runs.
#[derive(Debug, Clone)]
pub struct MdsOptions {
    /// Its name (`a` for `mds.a`).
    pub name: String,
    /// Where it serves clients.
    pub addr: SocketAddr,
    /// Between beacons.
    pub beacon_interval: Duration,
    /// A silent client session ends after this.
    pub session_timeout: Duration,
    /// Journal events kept before a flush and trim.
    pub flush_events: usize,
    /// Entries a directory fragment holds before the directory splits.
    pub dir_frag_max: usize,
}

/// Why an MDS stopped.
#[derive(Debug, thiserror::Error)]
pub enum MdsError {
    /// The network.
    #[error("network: {0}")]
    Net(#[from] shoal_net::NetError),
    /// The cluster.
    #[error("cluster: {0}")]
    Client(#[from] ClientError),
    /// The journal.
    #[error("journal: {0}")]
    Journal(#[from] JournalError),
}

/// The rank the map gave us.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rank {
    fs_id: u64,
    metadata_pool: String,
    data_pool: String,
    incarnation: u64,
}

fn rank_of(map: &FsMapReply, me: &str) -> Option<Rank> {
    let f = map.fs_of_mds(me)?;
    Some(Rank {
        fs_id: f.id,
        metadata_pool: f.metadata_pool.clone(),
        data_pool: f.data_pool.clone(),
        incarnation: f.active.as_ref()?.incarnation,
    })
}

/// Runs an MDS until the process ends: standby, then active whenever the
/// map says so; a rank lost (a newer MDS took over) drops everything and
/// goes back to standby.
pub async fn run(
    client: Client,
    own: TicketAuth,
    opts: MdsOptions,
    listening: impl FnOnce(SocketAddr),
) -> Result<(), MdsError> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Incoming>();
    let name = EntityName::new(EntityType::Mds, opts.name.clone())
        .map_err(|e| ClientError::Config(e.to_string()))?;
    let monc = client.mon_client().clone();
    let renewal = own.spawn_renewal(monc.clone(), true);
    let _renewal = AbortOnDrop(renewal);
    let messenger = Messenger::new(
        name,
        client.net_config().clone(),
        Arc::new(TcpTransport),
        Arc::new(own),
        Arc::new(move |inc: Incoming| {
            let _ = tx.send(inc);
        }),
    );
    let addr = messenger.bind(opts.addr).await?;
    tracing::info!(mds = %opts.name, %addr, "mds listening");
    listening(addr);
    let state = Arc::new(std::sync::Mutex::new(String::from("standby")));
    let (map_tx, mut map_rx) = tokio::sync::watch::channel(FsMapReply::default());
    let beacons = tokio::spawn(beacon_loop(
        monc.clone(),
        opts.clone(),
        addr,
        Arc::clone(&state),
        map_tx,
    ));
    let _beacons = AbortOnDrop(beacons);
    loop {
        // Standby: answer nobody, wait for a rank.
        let rank = loop {
            if let Some(r) = rank_of(&map_rx.borrow_and_update(), &opts.name) {
                break r;
            }
            tokio::select! {
                changed = map_rx.changed() => if changed.is_err() { return Ok(()) },
                inc = rx.recv() => match inc {
                    Some(inc) => refuse(inc, libc::EAGAIN, "this MDS is a standby"),
                    None => return Ok(()),
                },
            }
        };
        tracing::info!(mds = %opts.name, incarnation = rank.incarnation, fs = rank.fs_id, "mds takes rank 0");
        set_state(&state, "replay");
        let outcome = serve(&client, &opts, &rank, &state, &mut rx, &mut map_rx).await;
        set_state(&state, "standby");
        match outcome {
            Ok(()) => tracing::warn!(mds = %opts.name, "mds lost its rank; standby again"),
            Err(e) => {
                tracing::error!(mds = %opts.name, "mds stops serving: {e}");
                // Let the monitors give the rank to another: silence our
                // beacons for a grace would take long; fail ourselves.
                let _ = monc
                    .command(&Command::MdsFail {
                        name: opts.name.clone(),
                    })
                    .await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);
impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn set_state(s: &std::sync::Mutex<String>, v: &str) {
    *s.lock().unwrap_or_else(|p| p.into_inner()) = v.to_string();
}

async fn beacon_loop(
    monc: MonClient,
    opts: MdsOptions,
    addr: SocketAddr,
    state: Arc<std::sync::Mutex<String>>,
    map_tx: tokio::sync::watch::Sender<FsMapReply>,
) {
    let nonce = shoal_net::runtime::random_u64();
    loop {
        let st = state.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let cmd = Command::MdsBeacon {
            name: opts.name.clone(),
            addr: addr.to_string(),
            state: st,
            nonce,
        };
        match monc.command_as::<FsMapReply>(&cmd).await {
            Ok(map) => {
                map_tx.send_if_modified(|m| {
                    let changed = *m != map;
                    *m = map;
                    changed
                });
            }
            Err(e) => tracing::debug!("mds beacon: {e}"),
        }
        tokio::time::sleep(opts.beacon_interval).await;
    }
}

fn refuse(inc: Incoming, errno: i32, why: &str) {
    if let Some(r) = inc.responder {
        let tid = msg::decode::<Request>(match &inc.msg {
            Message::MdsRequest(m) => &m.body,
            _ => &[],
        })
        .map(|r| r.tid)
        .unwrap_or(0);
        let reply = Reply {
            tid,
            result: Err(Errno::new(errno, why)),
        };
        let _ = r.send(
            MdsReply {
                body: msg::encode(&reply),
            },
            Bytes::new(),
        );
    }
}

/// Something for the journal task: an event to append (if any) and the
/// answer to send once it (and everything before) is durable.
struct Commit {
    event: Option<Event>,
    /// The engine's count of events sent, this one included (0: not the
    /// engine's, such as a finished purge).
    seq: u64,
    answer: Option<(Responder, Reply)>,
    /// Data to purge once durable (ino, size).
    purge: Option<(u64, u64)>,
}

/// Serves rank 0 until the map gives it away (Ok) or the journal is fenced
/// or fails (Err).
async fn serve(
    client: &Client,
    opts: &MdsOptions,
    rank: &Rank,
    state: &std::sync::Mutex<String>,
    rx: &mut mpsc::UnboundedReceiver<Incoming>,
    map_rx: &mut tokio::sync::watch::Receiver<FsMapReply>,
) -> Result<(), MdsError> {
    // The MDS's changes go through on a full cluster (its journal records
    // the unlinks that free space; its data changes only cut and remove):
    // clients' data writes are what a full cluster refuses.
    let store = Store {
        meta: client.pool(&rank.metadata_pool)?.full_try(),
        data: client.pool(&rank.data_pool)?.full_try(),
        names: Names { fs_id: rank.fs_id },
    };
    let inc = rank.incarnation;
    let started = Instant::now();
    // 1. Fence and replay.
    let head = journal::take_over(&store.meta, &store.names, inc).await?;
    let (events, segment, seg_len) =
        journal::read_all(&store.meta, &store.names, inc, &head).await?;
    let mut engine = Engine::new(store.clone(), opts.clone(), inc);
    engine.next_ino = head.next_ino.max(FIRST_INO);
    for ev in &events {
        engine.replay(ev);
    }
    tracing::info!(events = events.len(), "journal replayed");
    // Write the replayed events out and start a fresh segment.
    store.apply(&events).await?;
    let mut jstate = JournalState {
        store: store.clone(),
        inc,
        segment: segment + u64::from(seg_len > 0),
        seg_len: 0,
        head,
        unflushed: Vec::new(),
        unflushed_seq: 0,
        flushed_seq: Arc::clone(&engine.flushed_seq),
        flush_events: opts.flush_events,
        flushed_at: Instant::now(),
    };
    jstate.trim(engine.next_ino).await?;
    engine.ensure_root().await?;
    engine.strays = store.load_strays().await?;
    tracing::info!(
        mds = %opts.name,
        ms = started.elapsed().as_millis() as u64,
        "mds active"
    );
    set_state(state, "active");
    // 2. Serve.
    let (jtx, jrx) = mpsc::unbounded_channel::<Commit>();
    let (fail_tx, mut fail_rx) = mpsc::unbounded_channel::<JournalError>();
    let jtask = tokio::spawn(journal_task(jstate, jrx, jtx.downgrade(), fail_tx));
    let _jtask = AbortOnDrop(jtask);
    // Purges an earlier MDS left unfinished (it crashed, or lost the rank)
    // go on: removing what is already gone is harmless.
    let purges = store.load_purges().await?;
    if !purges.is_empty() {
        tracing::info!(files = purges.len(), "resuming purges");
    }
    for purge in purges {
        let _ = jtx.send(Commit {
            event: None,
            seq: 0,
            answer: None,
            purge: Some(purge),
        });
    }
    engine.commits = Some(jtx);
    // Sessions from before a failover may reconnect within one timeout;
    // strays are purged after that.
    engine.reconnect_until = Instant::now() + opts.session_timeout.min(Duration::from_secs(10));
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            inc = rx.recv() => match inc {
                Some(inc) => engine.incoming(inc).await,
                None => return Ok(()),
            },
            _ = tick.tick() => engine.tick().await,
            changed = map_rx.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
                let still = rank_of(&map_rx.borrow_and_update(), &opts.name);
                if still.as_ref().map(|r| r.incarnation) != Some(inc) {
                    return Ok(());
                }
            }
            e = fail_rx.recv() => {
                return Err(e.unwrap_or(JournalError::Fenced(inc)).into());
            }
        }
    }
}

struct JournalState {
    store: Store,
    inc: u64,
    segment: u64,
    seg_len: u64,
    head: Head,
    unflushed: Vec<Event>,
    /// The highest engine sequence among `unflushed`.
    unflushed_seq: u64,
    /// Up to which engine sequence the events are in the objects (read by
    /// the engine to drop its tombstones).
    flushed_seq: Arc<AtomicU64>,
    flush_events: usize,
    /// When the events were last written into the objects.
    flushed_at: Instant,
}

impl JournalState {
    /// Writes nothing new: records that everything up to `segment` is in
    /// the objects, and removes the older segments.
    async fn trim(&mut self, next_ino: u64) -> Result<(), JournalError> {
        let old_first = self.head.first_segment;
        self.head = Head {
            first_segment: self.segment,
            next_ino,
        };
        journal::write_head(&self.store.meta, &self.store.names, self.inc, &self.head).await?;
        for seg in old_first..self.segment {
            let _ = self
                .store
                .meta
                .remove(&self.store.names.journal_segment(seg))
                .await;
        }
        Ok(())
    }

    /// Writes the unflushed events into the objects and trims.
    async fn flush(&mut self) -> Result<(), JournalError> {
        if self.unflushed.is_empty() {
            return Ok(());
        }
        let events = std::mem::take(&mut self.unflushed);
        self.flushed_at = Instant::now();
        let next_ino = events
            .iter()
            .flat_map(|e| &e.updates)
            .filter_map(|u| match u {
                Update::NextIno { next } => Some(*next),
                _ => None,
            })
            .max()
            .unwrap_or(self.head.next_ino)
            .max(self.head.next_ino);
        self.store.apply(&events).await?;
        self.flushed_seq
            .fetch_max(self.unflushed_seq, Ordering::Release);
        self.segment += 1;
        self.seg_len = 0;
        self.trim(next_ino).await
    }
}

/// How often a failed purge is tried again (5 s apart) before it is left
/// in the queue for the next MDS.
const PURGE_RETRIES: u32 = 12;

/// Appends what the engine hands over, many at a time, and answers once
/// durable; flushes and trims every `flush_events` events or when idle.
async fn journal_task(
    mut j: JournalState,
    mut rx: mpsc::UnboundedReceiver<Commit>,
    again: mpsc::WeakUnboundedSender<Commit>,
    fail: mpsc::UnboundedSender<JournalError>,
) {
    let idle_flush = Duration::from_secs(5);
    loop {
        let first = match tokio::time::timeout(idle_flush, rx.recv()).await {
            Ok(Some(c)) => c,
            Ok(None) => return,
            Err(_) => {
                if let Err(e) = j.flush().await {
                    let _ = fail.send(e);
                    return;
                }
                continue;
            }
        };
        let mut batch = vec![first];
        while let Ok(c) = rx.try_recv() {
            batch.push(c);
            if batch.len() >= 4096 {
                break;
            }
        }
        let events: Vec<Event> = batch.iter().filter_map(|c| c.event.clone()).collect();
        if !events.is_empty() {
            let record = journal::encode_record(&events);
            let len = record.len() as u64;
            let mut tries = 0;
            loop {
                match journal::append(
                    &j.store.meta,
                    &j.store.names,
                    j.inc,
                    j.segment,
                    record.clone(),
                )
                .await
                {
                    Ok(()) => break,
                    Err(JournalError::Io(e)) if tries < 3 => {
                        tracing::warn!("journal append: {e}; retrying");
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) => {
                        // Nothing of this batch is answered: clients resend
                        // to the next MDS.
                        let _ = fail.send(e);
                        return;
                    }
                }
            }
            j.seg_len += len;
            j.unflushed.extend(events);
            j.unflushed_seq = batch.iter().map(|c| c.seq).fold(j.unflushed_seq, u64::max);
            if j.seg_len >= journal::SEGMENT_BYTES {
                j.segment += 1;
                j.seg_len = 0;
            }
        }
        for c in batch {
            if let Some((r, reply)) = c.answer {
                let _ = r.send(
                    MdsReply {
                        body: msg::encode(&reply),
                    },
                    Bytes::new(),
                );
            }
            if let Some((ino, size)) = c.purge {
                let store = j.store.clone();
                let again = again.clone();
                tokio::spawn(async move {
                    let mut outcome = store.purge_data(ino, size).await;
                    for _ in 0..PURGE_RETRIES {
                        if outcome.is_ok() {
                            break;
                        }
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        outcome = store.purge_data(ino, size).await;
                    }
                    match outcome {
                        // Done: it leaves the purge queue.
                        Ok(()) => {
                            if let Some(tx) = again.upgrade() {
                                let _ = tx.send(Commit {
                                    event: Some(Event {
                                        updates: vec![Update::Purge {
                                            ino,
                                            size,
                                            on: false,
                                        }],
                                        req: None,
                                    }),
                                    seq: 0,
                                    answer: None,
                                    purge: None,
                                });
                            }
                        }
                        // Left in the queue: the next MDS tries again.
                        Err(e) => tracing::warn!("purging the data of {ino:x}: {e}"),
                    }
                });
            }
        }
        // Flushed every `flush_events` events, and at least every
        // `idle_flush` (a client's renewals alone keep this loop from ever
        // being idle): the objects lag the journal by seconds at most.
        if (j.unflushed.len() >= j.flush_events
            || (!j.unflushed.is_empty() && j.flushed_at.elapsed() >= idle_flush))
            && let Err(e) = j.flush().await
        {
            let _ = fail.send(e);
            return;
        }
    }
}

/// A client session.
#[derive(Debug)]
struct Session {
    client: String,
    conn: Connection,
    last_seen: Instant,
    /// Inodes it holds capabilities on.
    caps: HashMap<u64, u32>,
    /// Inodes it has open, with how many opens.
    open: HashMap<u64, u32>,
}

/// A request waiting for capabilities to come back.
struct Parked {
    session: u64,
    req: Request,
    responder: Option<Responder>,
}

/// The outcome of handling one request.
enum Handled {
    Done {
        result: Result<Out, Errno>,
        updates: Vec<Update>,
        purge: Option<(u64, u64)>,
    },
    /// Wait for these sessions to give back their capabilities on `ino`.
    Wait { ino: u64, holders: Vec<u64> },
}

fn done(out: Out) -> Handled {
    Handled::Done {
        result: Ok(out),
        updates: Vec::new(),
        purge: None,
    }
}

fn fail(errno: i32, why: impl Into<String>) -> Handled {
    Handled::Done {
        result: Err(Errno::new(errno, why)),
        updates: Vec::new(),
        purge: None,
    }
}

macro_rules! tryh {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => {
                return Ok(Handled::Done {
                    result: Err(e),
                    updates: Vec::new(),
                    purge: None,
                })
            }
        }
    };
}

/// Answers of mutating requests kept for resends, by session and tid: a
/// client that lost an answer (its connection broke, or the MDS failed
/// over) sends the request again and gets the same answer rather than
/// doing it twice. Bounded by what clients still wait on.
#[derive(Debug, Default)]
struct Completed {
    by_session: HashMap<u64, BTreeMap<u64, Out>>,
}

impl Completed {
    fn insert(&mut self, session: u64, tid: u64, out: Out) {
        self.by_session.entry(session).or_default().insert(tid, out);
    }

    fn get(&self, session: u64, tid: u64) -> Option<Out> {
        self.by_session.get(&session)?.get(&tid).cloned()
    }

    /// The session's client has every answer below `oldest` (0: unknown,
    /// an older client).
    fn forget_below(&mut self, session: u64, oldest: u64) {
        if oldest == 0 {
            return;
        }
        if let Some(done) = self.by_session.get_mut(&session) {
            *done = done.split_off(&oldest);
        }
    }

    /// The session ended: nobody will resend its requests.
    fn end(&mut self, session: u64) {
        self.by_session.remove(&session);
    }

    /// Keeps only the sessions `live` says are.
    fn keep_only(&mut self, live: impl Fn(u64) -> bool) {
        self.by_session.retain(|s, _| live(*s));
    }

    /// Answers kept.
    fn len(&self) -> usize {
        self.by_session.values().map(BTreeMap::len).sum()
    }
}

/// The request engine: the cache and every session, one request at a time.
pub struct Engine {
    store: Store,
    opts: MdsOptions,
    incarnation: u64,
    inodes: HashMap<u64, Inode>,
    dirs: HashMap<u64, BTreeMap<String, Dentry>>,
    next_ino: u64,
    strays: BTreeSet<u64>,
    sessions: HashMap<u64, Session>,
    next_session: u64,
    /// Answers of mutating requests, by session and tid, for resends.
    /// A session's are forgotten below the oldest tid its client still
    /// waits on ([`Request::oldest_tid`]) and when the session ends; those
    /// of sessions not back after a failover's reconnect window go too.
    completed: Completed,
    parked: Vec<Parked>,
    revoking: HashSet<(u64, u64)>,
    commits: Option<mpsc::UnboundedSender<Commit>>,
    /// Events handed to the journal so far.
    sent_seq: u64,
    /// Up to which of them the objects hold (the journal task says).
    flushed_seq: Arc<AtomicU64>,
    /// Inodes forgotten (ino -> the sequence of the event that forgot
    /// them) whose inode table may still hold them until that event is
    /// flushed: never loaded back from there.
    forgotten: HashMap<u64, u64>,
    reconnect_until: Instant,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("inodes", &self.inodes.len())
            .field("sessions", &self.sessions.len())
            .field("completed", &self.completed.len())
            .finish()
    }
}

type Res = Result<Handled, ClientError>;

impl Engine {
    fn new(store: Store, opts: MdsOptions, incarnation: u64) -> Engine {
        Engine {
            store,
            opts,
            incarnation,
            inodes: HashMap::new(),
            dirs: HashMap::new(),
            next_ino: FIRST_INO,
            strays: BTreeSet::new(),
            sessions: HashMap::new(),
            next_session: (incarnation << 24) | 1,
            completed: Completed::default(),
            parked: Vec::new(),
            revoking: HashSet::new(),
            commits: None,
            sent_seq: 0,
            flushed_seq: Arc::new(AtomicU64::new(0)),
            forgotten: HashMap::new(),
            reconnect_until: Instant::now(),
        }
    }

    /// Applies a replayed event to what is known (the completed requests
    /// and inode numbers; the objects get the events themselves).
    fn replay(&mut self, ev: &Event) {
        for u in &ev.updates {
            match u {
                Update::NextIno { next } => self.next_ino = self.next_ino.max(*next),
                Update::Inode { inode } => {
                    self.next_ino = self.next_ino.max(inode.ino + 1);
                }
                _ => {}
            }
        }
        if let Some((s, t, out)) = &ev.req {
            self.completed.insert(*s, *t, out.clone());
        }
    }

    async fn ensure_root(&mut self) -> Result<(), ClientError> {
        if self.store.load_inode(ROOT_INO).await?.is_none() {
            let mut root = Inode::new(ROOT_INO, Kind::Dir, 0o755, 0, 0, now_ns());
            root.parent = ROOT_INO;
            self.store
                .apply(&[Event {
                    updates: vec![Update::Inode { inode: root }],
                    req: None,
                }])
                .await?;
        }
        Ok(())
    }

    async fn inode(&mut self, ino: u64) -> Result<Result<Inode, Errno>, ClientError> {
        if let Some(i) = self.inodes.get(&ino) {
            return Ok(Ok(i.clone()));
        }
        if self.forgotten.contains_key(&ino) {
            return Ok(Err(Errno::new(libc::ENOENT, format!("no inode {ino:x}"))));
        }
        match self.store.load_inode(ino).await? {
            Some(i) => {
                self.inodes.insert(ino, i.clone());
                Ok(Ok(i))
            }
            None => Ok(Err(Errno::new(libc::ENOENT, format!("no inode {ino:x}")))),
        }
    }

    async fn dir(&mut self, ino: u64) -> Result<Result<Inode, Errno>, ClientError> {
        let i = match self.inode(ino).await? {
            Ok(i) => i,
            Err(e) => return Ok(Err(e)),
        };
        if i.kind != Kind::Dir {
            return Ok(Err(Errno::new(
                libc::ENOTDIR,
                format!("{ino:x} is not a directory"),
            )));
        }
        if !self.dirs.contains_key(&ino) {
            let entries = self.store.load_dir(ino, i.frag_bits).await?;
            self.dirs.insert(ino, entries);
        }
        Ok(Ok(i))
    }

    fn entry(&self, dir: u64, name: &str) -> Option<Dentry> {
        self.dirs.get(&dir).and_then(|d| d.get(name)).copied()
    }

    /// Sessions other than `me` holding capabilities on `ino`.
    fn holders(&self, me: u64, ino: u64) -> Vec<u64> {
        self.sessions
            .iter()
            .filter(|(id, s)| **id != me && s.caps.get(&ino).is_some_and(|c| *c != 0))
            .map(|(id, _)| *id)
            .collect()
    }

    fn caps_of(&self, session: u64, ino: u64) -> u32 {
        self.sessions
            .get(&session)
            .and_then(|s| s.caps.get(&ino))
            .copied()
            .unwrap_or(0)
    }

    fn grant(&mut self, session: u64, ino: u64, caps: u32) {
        if let Some(s) = self.sessions.get_mut(&session) {
            *s.caps.entry(ino).or_insert(0) |= caps;
        }
    }

    /// Wait for other holders of `ino`, if any.
    fn exclusive(&self, me: u64, ino: u64) -> Option<Handled> {
        let holders = self.holders(me, ino);
        (!holders.is_empty()).then_some(Handled::Wait { ino, holders })
    }

    async fn incoming(&mut self, inc: Incoming) {
        let Message::MdsRequest(m) = &inc.msg else {
            refuse(inc, libc::EINVAL, "not an MDS request");
            return;
        };
        let req: Request = match msg::decode(&m.body) {
            Ok(r) => r,
            Err(e) => {
                refuse(inc, e.errno, &e.message);
                return;
            }
        };
        let session = req.session;
        if let Op::SessionOpen {
            client,
            reclaim,
            open,
            caps,
        } = &req.op
        {
            // The same client coming back (a new connection, or a new MDS)
            // keeps its session id, so its resends match what the journal
            // recorded.
            let same = self.sessions.get(reclaim).map(|s| s.client == *client);
            let id = if *reclaim != 0 && same != Some(false) {
                *reclaim
            } else {
                self.next_session += 1;
                self.next_session
            };
            let mut s = Session {
                client: client.clone(),
                conn: inc.conn.clone(),
                last_seen: Instant::now(),
                caps: HashMap::new(),
                open: HashMap::new(),
            };
            if let Some(old) = self.sessions.remove(&id) {
                s.caps = old.caps;
                s.open = old.open;
            } else {
                for ino in open {
                    *s.open.entry(*ino).or_insert(0) += 1;
                }
                // A client back after a failover keeps the capabilities it
                // held, unless another session got the inode meanwhile.
                if *reclaim == id {
                    for (ino, c) in caps {
                        if self.sessions.values().all(|o| !o.caps.contains_key(ino)) {
                            s.caps.insert(*ino, *c);
                        }
                    }
                }
            }
            tracing::info!(session = id, client = %client, reclaim = *reclaim, "client session open");
            self.sessions.insert(id, s);
            let out = Out::Session {
                id,
                timeout_ms: self.opts.session_timeout.as_millis() as u64,
                incarnation: self.incarnation,
            };
            self.answer(inc.responder, req.tid, Ok(out), None, None);
            return;
        }
        match self.sessions.get_mut(&session) {
            Some(s) => {
                s.last_seen = Instant::now();
                if s.conn.id() != inc.conn.id() {
                    s.conn = inc.conn.clone();
                }
            }
            None => {
                refuse(
                    inc,
                    libc::ESTALE,
                    "no such session (it timed out, or the MDS changed)",
                );
                return;
            }
        }
        self.completed.forget_below(session, req.oldest_tid);
        if let Some(out) = self.completed.get(session, req.tid) {
            self.answer(inc.responder, req.tid, Ok(out), None, None);
            return;
        }
        // A request behind a parked one of the same session waits too,
        // unless it answers a revoke (those never wait).
        if !matches!(req.op, Op::CapAck { .. } | Op::Renew | Op::Flush { .. })
            && self.parked.iter().any(|p| p.session == session)
        {
            self.parked.push(Parked {
                session,
                req,
                responder: inc.responder,
            });
            return;
        }
        self.run(session, req, inc.responder).await;
        if !self.parked.is_empty() && !self.revoking.is_empty() {
            // nothing: parked ones retry when revokes complete
        }
    }

    async fn run(&mut self, session: u64, req: Request, responder: Option<Responder>) {
        let tid = req.tid;
        let h = match self.handle(session, &req).await {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!("mds: request failed on the cluster: {e}");
                fail(libc::EIO, format!("metadata I/O: {e}"))
            }
        };
        match h {
            Handled::Done {
                result,
                updates,
                purge,
            } => {
                // An unlink or rename tells the client what it did to the
                // inodes involved, so its cached attributes stay true.
                let result = match (&req.op, result) {
                    (Op::Unlink { .. } | Op::Rename { .. }, Ok(Out::Done)) => Ok(changed(&updates)),
                    (_, r) => r,
                };
                let mutating = !updates.is_empty();
                let event = mutating.then(|| Event {
                    updates,
                    req: result.as_ref().ok().map(|o| (session, tid, o.clone())),
                });
                if let (Some(_), Ok(o)) = (&event, &result) {
                    self.completed.insert(session, tid, o.clone());
                }
                self.answer(responder, tid, result, event, purge);
                if matches!(req.op, Op::CapAck { .. } | Op::SessionClose) {
                    self.retry_parked().await;
                }
            }
            Handled::Wait { ino, holders } => {
                for h in holders {
                    if self.revoking.insert((h, ino))
                        && let Some(s) = self.sessions.get(&h)
                    {
                        let push = MdsPush {
                            body: msg::encode(&Push::Revoke { ino }),
                        };
                        let conn = s.conn.clone();
                        tokio::spawn(async move {
                            let _ = conn.send(push, Bytes::new()).await;
                        });
                    }
                }
                self.parked.push(Parked {
                    session,
                    req,
                    responder,
                });
            }
        }
    }

    async fn retry_parked(&mut self) {
        let parked = std::mem::take(&mut self.parked);
        for p in parked {
            if self.parked.iter().any(|q| q.session == p.session) {
                self.parked.push(p);
                continue;
            }
            if !self.sessions.contains_key(&p.session) {
                continue;
            }
            Box::pin(self.run(p.session, p.req, p.responder)).await;
        }
    }

    fn answer(
        &mut self,
        responder: Option<Responder>,
        tid: u64,
        result: Result<Out, Errno>,
        event: Option<Event>,
        purge: Option<(u64, u64)>,
    ) {
        let answer = responder.map(|r| (r, Reply { tid, result }));
        let mut seq = 0;
        if let Some(ev) = &event {
            self.sent_seq += 1;
            seq = self.sent_seq;
            for u in &ev.updates {
                if let Update::Forget { ino } = u {
                    self.forgotten.insert(*ino, seq);
                }
            }
        }
        if let Some(tx) = &self.commits {
            let _ = tx.send(Commit {
                event,
                seq,
                answer,
                purge,
            });
        }
    }

    /// Ends silent sessions (their capabilities and opens go), purges
    /// strays nobody holds open once reconnects are over.
    async fn tick(&mut self) {
        let flushed = self.flushed_seq.load(Ordering::Acquire);
        self.forgotten.retain(|_, seq| *seq > flushed);
        let timeout = self.opts.session_timeout;
        let dead: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.last_seen.elapsed() > timeout)
            .map(|(id, _)| *id)
            .collect();
        for id in &dead {
            let who = self
                .sessions
                .get(id)
                .map(|s| s.client.clone())
                .unwrap_or_default();
            tracing::warn!(session = id, client = %who, "client session timed out: its capabilities are taken back");
            self.end_session(*id).await;
        }
        if !dead.is_empty() {
            self.retry_parked().await;
        }
        if Instant::now() > self.reconnect_until {
            // Answers replayed for sessions that did not come back.
            let sessions = &self.sessions;
            self.completed.keep_only(|s| sessions.contains_key(&s));
        }
        if Instant::now() > self.reconnect_until && !self.strays.is_empty() {
            let open: HashSet<u64> = self
                .sessions
                .values()
                .flat_map(|s| s.open.keys().copied())
                .collect();
            let purge: Vec<u64> = self
                .strays
                .iter()
                .filter(|i| !open.contains(i))
                .copied()
                .collect();
            for ino in purge {
                self.purge_stray(ino).await;
            }
        }
    }

    async fn end_session(&mut self, id: u64) {
        let Some(s) = self.sessions.remove(&id) else {
            return;
        };
        self.revoking.retain(|(sid, _)| *sid != id);
        self.parked.retain(|p| p.session != id);
        self.completed.end(id);
        for ino in s.open.keys() {
            if self.strays.contains(ino) && !self.is_open(*ino) {
                self.purge_stray(*ino).await;
            }
        }
    }

    fn is_open(&self, ino: u64) -> bool {
        self.sessions
            .values()
            .any(|s| s.open.get(&ino).is_some_and(|n| *n > 0))
    }

    async fn purge_stray(&mut self, ino: u64) {
        self.strays.remove(&ino);
        let size = match self.inode(ino).await {
            Ok(Ok(i)) => i.size,
            _ => 0,
        };
        self.inodes.remove(&ino);
        let event = Event {
            updates: vec![
                Update::Forget { ino },
                Update::Stray { ino, on: false },
                Update::Purge {
                    ino,
                    size,
                    on: true,
                },
            ],
            req: None,
        };
        self.answer(None, 0, Ok(Out::Done), Some(event), Some((ino, size)));
    }

    /// Records a changed inode in the cache and returns its update.
    fn put(&mut self, mut inode: Inode) -> Update {
        inode.version += 1;
        self.inodes.insert(inode.ino, inode.clone());
        Update::Inode { inode }
    }

    fn link(&mut self, dir: u64, name: &str, dentry: Option<Dentry>) -> Update {
        if let Some(d) = self.dirs.get_mut(&dir) {
            match dentry {
                Some(e) => {
                    d.insert(name.to_string(), e);
                }
                None => {
                    d.remove(name);
                }
            }
        }
        Update::Link {
            dir,
            name: name.to_string(),
            dentry,
        }
    }

    /// An inode lost a link: forgotten (data purged) or kept as a stray
    /// while open.
    fn drop_link(
        &mut self,
        mut inode: Inode,
        now: i64,
        updates: &mut Vec<Update>,
    ) -> Option<(u64, u64)> {
        inode.nlink = if inode.kind == Kind::Dir {
            0
        } else {
            inode.nlink.saturating_sub(1)
        };
        inode.ctime = now;
        if inode.nlink > 0 {
            updates.push(self.put(inode));
            return None;
        }
        if self.is_open(inode.ino) && inode.kind == Kind::File {
            self.strays.insert(inode.ino);
            updates.push(self.put(inode.clone()));
            updates.push(Update::Stray {
                ino: inode.ino,
                on: true,
            });
            return None;
        }
        self.inodes.remove(&inode.ino);
        self.dirs.remove(&inode.ino);
        for s in self.sessions.values_mut() {
            s.caps.remove(&inode.ino);
        }
        updates.push(Update::Forget { ino: inode.ino });
        let purge = (inode.kind == Kind::File).then_some((inode.ino, inode.size));
        if let Some((ino, size)) = purge {
            updates.push(Update::Purge {
                ino,
                size,
                on: true,
            });
        }
        purge
    }

    async fn handle(&mut self, me: u64, req: &Request) -> Res {
        let now = now_ns();
        Ok(match &req.op {
            Op::SessionOpen { .. } => fail(libc::EINVAL, "session already open"),
            Op::Renew => done(Out::Done),
            Op::SessionClose => {
                self.end_session(me).await;
                done(Out::Done)
            }
            Op::Sync => done(Out::Done),
            Op::AllocInos { count } => {
                let count = (*count).clamp(1, 65_536);
                let start = self.next_ino;
                self.next_ino += count;
                Handled::Done {
                    result: Ok(Out::Inos { start, count }),
                    updates: vec![Update::NextIno {
                        next: self.next_ino,
                    }],
                    purge: None,
                }
            }
            Op::Getattr { ino } => {
                let i = tryh!(self.inode(*ino).await?);
                if let Some(w) = self.exclusive(me, *ino) {
                    return Ok(w);
                }
                done(Out::Inode {
                    caps: self.caps_of(me, *ino),
                    inode: i,
                    dir_caps: 0,
                })
            }
            Op::Lookup { parent, name } => {
                tryh!(self.dir(*parent).await?);
                if let Some(w) = self.dir_conflict(me, *parent) {
                    return Ok(w);
                }
                let Some(d) = self.entry(*parent, name) else {
                    return Ok(fail(libc::ENOENT, format!("no {name:?}")));
                };
                let i = tryh!(self.inode(d.ino).await?);
                if let Some(w) = self.exclusive(me, d.ino) {
                    return Ok(w);
                }
                done(Out::Inode {
                    caps: self.caps_of(me, d.ino),
                    inode: i,
                    dir_caps: self.caps_of(me, *parent),
                })
            }
            Op::Readdir { ino, after, max } => {
                tryh!(self.dir(*ino).await?);
                if let Some(w) = self.dir_conflict(me, *ino) {
                    return Ok(w);
                }
                let max = (*max).clamp(1, 4096) as usize;
                let d = self.dirs.get(ino).cloned().unwrap_or_default();
                let range = d.range::<str, _>((
                    std::ops::Bound::Excluded(after.as_str()),
                    std::ops::Bound::Unbounded,
                ));
                let entries: Vec<(String, Dentry)> =
                    range.take(max + 1).map(|(k, v)| (k.clone(), *v)).collect();
                let more = entries.len() > max;
                done(Out::Entries {
                    entries: entries.into_iter().take(max).collect(),
                    more,
                })
            }
            Op::Setattr { ino, set } | Op::Flush { ino, set } => {
                let flush = matches!(req.op, Op::Flush { .. });
                let mut i = match self.inode(*ino).await? {
                    Ok(i) => i,
                    // What a client changed of a file since removed: nothing
                    // left to change.
                    Err(_) if flush => return Ok(done(Out::Done)),
                    Err(e) => {
                        return Ok(Handled::Done {
                            result: Err(e),
                            updates: Vec::new(),
                            purge: None,
                        });
                    }
                };
                if !flush && let Some(w) = self.exclusive(me, *ino) {
                    return Ok(w);
                }
                if let Some(size) = set.size {
                    if i.kind == Kind::Dir {
                        return Ok(fail(libc::EISDIR, "a directory has no size to set"));
                    }
                    if size > FILE_SIZE_MAX {
                        return Ok(fail(libc::EFBIG, "beyond the largest file size"));
                    }
                    if flush {
                        // Data written by a client: size only grows here,
                        // unless the holder of CAP_EXCL says otherwise.
                        if size > i.size || self.caps_of(me, *ino) & CAP_EXCL != 0 {
                            if size < i.size {
                                self.store.truncate_data(*ino, i.size, size).await?;
                            }
                            i.size = size;
                        }
                    } else {
                        if size < i.size {
                            self.store.truncate_data(*ino, i.size, size).await?;
                        }
                        i.size = size;
                        i.mtime = now;
                    }
                }
                // The holder of CAP_EXCL says what the times are (a
                // utimens it made locally may set them back); another
                // writer's data only moves them forward.
                let exact = !flush || self.caps_of(me, *ino) & CAP_EXCL != 0;
                apply_set(&mut i, set, now, !exact);
                let u = self.put(i.clone());
                // The answer carries the version stored: a client orders the
                // answers it handles concurrently by it (an older one, such
                // as an unlink's sent before this flush, must not win).
                let i = self.inodes.get(ino).cloned().unwrap_or(i);
                Handled::Done {
                    result: Ok(Out::Inode {
                        caps: self.caps_of(me, *ino),
                        inode: i,
                        dir_caps: 0,
                    }),
                    updates: vec![u],
                    purge: None,
                }
            }
            Op::Make {
                parent,
                name,
                kind,
                perm,
                rdev,
                target,
                ino,
                time,
            } => {
                let p = tryh!(self.dir(*parent).await?);
                tryh!(check_name(name));
                if p.nlink == 0 {
                    return Ok(fail(libc::ENOENT, "the directory was removed"));
                }
                if let Some(w) = self.dir_conflict(me, *parent) {
                    return Ok(w);
                }
                if self.entry(*parent, name).is_some() {
                    return Ok(fail(libc::EEXIST, format!("{name:?} exists")));
                }
                if let Some(t) = target
                    && (t.is_empty() || t.len() >= PATH_MAX)
                {
                    return Ok(fail(libc::ENAMETOOLONG, "symlink target too long"));
                }
                let mut updates = Vec::new();
                let new_ino = match ino {
                    Some(n) if *n >= FIRST_INO && *n < self.next_ino => {
                        if self.inode(*n).await?.is_ok() {
                            return Ok(fail(libc::EEXIST, format!("inode {n:x} is taken")));
                        }
                        *n
                    }
                    Some(n) => {
                        return Ok(fail(
                            libc::EINVAL,
                            format!("inode {n:x} was not handed out"),
                        ));
                    }
                    None => {
                        let n = self.next_ino;
                        self.next_ino += 1;
                        updates.push(Update::NextIno {
                            next: self.next_ino,
                        });
                        n
                    }
                };
                let t = time.unwrap_or(now);
                let mut gid = req.gid;
                let mut perm = *perm & 0o7777;
                if p.perm & libc::S_ISGID != 0 {
                    gid = p.gid;
                    if *kind == Kind::Dir {
                        perm |= libc::S_ISGID;
                    }
                }
                let mut child = Inode::new(new_ino, *kind, perm, req.uid, gid, t);
                child.rdev = *rdev;
                if *kind == Kind::Symlink {
                    child.size = target.as_ref().map_or(0, |s| s.len() as u64);
                    child.target = target.clone();
                }
                if *kind == Kind::Dir {
                    child.parent = *parent;
                    self.dirs.insert(new_ino, BTreeMap::new());
                }
                let mut p = p;
                p.mtime = t;
                p.ctime = t;
                if *kind == Kind::Dir {
                    p.nlink += 1;
                }
                updates.push(self.put(child.clone()));
                updates.push(self.link(
                    *parent,
                    name,
                    Some(Dentry {
                        ino: new_ino,
                        kind: *kind,
                    }),
                ));
                updates.push(self.put(p));
                self.maybe_split(*parent, &mut updates);
                match kind {
                    Kind::File => self.grant(me, new_ino, CAP_EXCL),
                    // Nobody else knows the new directory yet.
                    // Nobody else knows the new directory: its maker
                    // creates in it and changes its attributes itself.
                    Kind::Dir => self.grant(me, new_ino, CAP_CREATE | CAP_EXCL),
                    _ => {}
                }
                // Alone in the directory: creates there may go ahead
                // without waiting.
                if self.holders(me, *parent).is_empty() {
                    self.grant(me, *parent, CAP_CREATE);
                }
                let child = self.inodes.get(&new_ino).cloned().unwrap_or(child);
                Handled::Done {
                    result: Ok(Out::Inode {
                        caps: self.caps_of(me, new_ino),
                        inode: child,
                        dir_caps: self.caps_of(me, *parent),
                    }),
                    updates,
                    purge: None,
                }
            }
            Op::Link { ino, parent, name } => {
                let mut i = tryh!(self.inode(*ino).await?);
                if i.kind == Kind::Dir {
                    return Ok(fail(libc::EPERM, "no hard links to directories"));
                }
                let mut p = tryh!(self.dir(*parent).await?);
                tryh!(check_name(name));
                if let Some(w) = self
                    .dir_conflict(me, *parent)
                    .or_else(|| self.exclusive(me, *ino))
                {
                    return Ok(w);
                }
                if self.entry(*parent, name).is_some() {
                    return Ok(fail(libc::EEXIST, format!("{name:?} exists")));
                }
                if i.nlink == 0 {
                    return Ok(fail(libc::ENOENT, "the file was removed"));
                }
                if i.nlink >= 65_000 {
                    return Ok(fail(libc::EMLINK, "too many links"));
                }
                i.nlink += 1;
                i.ctime = now;
                p.mtime = now;
                p.ctime = now;
                let mut updates = vec![self.put(i.clone())];
                updates.push(self.link(
                    *parent,
                    name,
                    Some(Dentry {
                        ino: *ino,
                        kind: i.kind,
                    }),
                ));
                updates.push(self.put(p));
                self.maybe_split(*parent, &mut updates);
                let i = self.inodes.get(ino).cloned().unwrap_or(i);
                Handled::Done {
                    result: Ok(Out::Inode {
                        caps: self.caps_of(me, *ino),
                        inode: i,
                        dir_caps: 0,
                    }),
                    updates,
                    purge: None,
                }
            }
            Op::Unlink { parent, name, dir } => {
                let mut p = tryh!(self.dir(*parent).await?);
                if let Some(w) = self.dir_conflict(me, *parent) {
                    return Ok(w);
                }
                let Some(d) = self.entry(*parent, name) else {
                    return Ok(fail(libc::ENOENT, format!("no {name:?}")));
                };
                let child = tryh!(self.inode(d.ino).await?);
                if let Some(w) = self.exclusive(me, d.ino) {
                    return Ok(w);
                }
                if *dir {
                    if child.kind != Kind::Dir {
                        return Ok(fail(libc::ENOTDIR, format!("{name:?} is not a directory")));
                    }
                    tryh!(self.dir(d.ino).await?);
                    if self.dirs.get(&d.ino).is_some_and(|e| !e.is_empty()) {
                        return Ok(fail(libc::ENOTEMPTY, format!("{name:?} is not empty")));
                    }
                    p.nlink = p.nlink.saturating_sub(1);
                } else if child.kind == Kind::Dir {
                    return Ok(fail(libc::EISDIR, format!("{name:?} is a directory")));
                }
                p.mtime = now;
                p.ctime = now;
                let mut updates = vec![self.link(*parent, name, None)];
                updates.push(self.put(p));
                let purge = self.drop_link(child, now, &mut updates);
                Handled::Done {
                    result: Ok(Out::Done),
                    updates,
                    purge,
                }
            }
            Op::Rename {
                parent,
                name,
                newparent,
                newname,
                noreplace,
                exchange,
            } => {
                return self
                    .rename(
                        me, *parent, name, *newparent, newname, *noreplace, *exchange, now,
                    )
                    .await;
            }
            Op::SetXattr {
                ino,
                name,
                value,
                flags,
            } => {
                let mut i = tryh!(self.inode(*ino).await?);
                if let Some(w) = self.exclusive(me, *ino) {
                    return Ok(w);
                }
                if name.is_empty() || name.len() > NAME_MAX {
                    return Ok(fail(libc::ERANGE, "bad xattr name length"));
                }
                let exists = i.xattrs.contains_key(name);
                if flags & libc::XATTR_CREATE != 0 && exists {
                    return Ok(fail(libc::EEXIST, "xattr exists"));
                }
                if flags & libc::XATTR_REPLACE != 0 && !exists {
                    return Ok(fail(libc::ENODATA, "no such xattr"));
                }
                let old = i.xattrs.get(name).map_or(0, |v| v.len() + name.len());
                if i.xattr_bytes() - old + name.len() + value.len() > XATTRS_MAX {
                    return Ok(fail(libc::ENOSPC, "the inode's xattrs would exceed 64 KiB"));
                }
                i.xattrs.insert(name.clone(), value.clone());
                i.ctime = now;
                let u = self.put(i);
                Handled::Done {
                    result: Ok(Out::Done),
                    updates: vec![u],
                    purge: None,
                }
            }
            Op::RmXattr { ino, name } => {
                let mut i = tryh!(self.inode(*ino).await?);
                if let Some(w) = self.exclusive(me, *ino) {
                    return Ok(w);
                }
                if i.xattrs.remove(name).is_none() {
                    return Ok(fail(libc::ENODATA, "no such xattr"));
                }
                i.ctime = now;
                let u = self.put(i);
                Handled::Done {
                    result: Ok(Out::Done),
                    updates: vec![u],
                    purge: None,
                }
            }
            Op::Open { ino, write } => {
                let i = tryh!(self.inode(*ino).await?);
                if let Some(w) = self.exclusive(me, *ino) {
                    return Ok(w);
                }
                if let Some(s) = self.sessions.get_mut(&me) {
                    *s.open.entry(*ino).or_insert(0) += 1;
                }
                // A writer alone with the file may keep its size itself.
                let alone = !self
                    .sessions
                    .iter()
                    .any(|(id, s)| *id != me && s.open.get(ino).is_some_and(|n| *n > 0));
                if *write && alone && i.kind == Kind::File {
                    self.grant(me, *ino, CAP_EXCL);
                }
                done(Out::Inode {
                    caps: self.caps_of(me, *ino),
                    inode: i,
                    dir_caps: 0,
                })
            }
            Op::Release { ino } => {
                let mut last = false;
                if let Some(s) = self.sessions.get_mut(&me)
                    && let Some(n) = s.open.get_mut(ino)
                {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        s.open.remove(ino);
                        last = true;
                    }
                }
                if last && self.strays.contains(ino) && !self.is_open(*ino) {
                    self.purge_stray(*ino).await;
                }
                done(Out::Done)
            }
            Op::CapAck { ino } => {
                if let Some(s) = self.sessions.get_mut(&me) {
                    s.caps.remove(ino);
                }
                self.revoking.remove(&(me, *ino));
                done(Out::Done)
            }
        })
    }

    /// A directory past its fragments' bound splits: twice the fragments
    /// (or more), recorded in its inode, the whole directory in the event.
    fn maybe_split(&mut self, dir: u64, updates: &mut Vec<Update>) {
        let count = self.dirs.get(&dir).map_or(0, BTreeMap::len);
        let Some(mut d) = self.inodes.get(&dir).cloned() else {
            return;
        };
        let max = self.opts.dir_frag_max.max(1);
        let old = d.frag_bits;
        while d.frag_bits < 16 && count > max << d.frag_bits {
            d.frag_bits += 1;
        }
        if d.frag_bits == old {
            return;
        }
        tracing::info!(dir = %format!("{dir:x}"), entries = count, bits = d.frag_bits, "directory split");
        let bits = d.frag_bits;
        updates.push(self.put(d));
        let entries = self
            .dirs
            .get(&dir)
            .map(|e| e.iter().map(|(k, v)| (k.clone(), *v)).collect())
            .unwrap_or_default();
        updates.push(Update::Split { dir, bits, entries });
    }

    /// Another session's CAP_CREATE on the directory must come back first.
    fn dir_conflict(&self, me: u64, dir: u64) -> Option<Handled> {
        self.exclusive(me, dir)
    }

    #[allow(clippy::too_many_arguments)]
    async fn rename(
        &mut self,
        me: u64,
        parent: u64,
        name: &str,
        newparent: u64,
        newname: &str,
        noreplace: bool,
        exchange: bool,
        now: i64,
    ) -> Res {
        tryh!(self.dir(parent).await?);
        tryh!(self.dir(newparent).await?);
        tryh!(check_name(newname));
        if let Some(w) = self
            .dir_conflict(me, parent)
            .or_else(|| self.dir_conflict(me, newparent))
        {
            return Ok(w);
        }
        let Some(src) = self.entry(parent, name) else {
            return Ok(fail(libc::ENOENT, format!("no {name:?}")));
        };
        let dst = self.entry(newparent, newname);
        if let Some(w) = self
            .exclusive(me, src.ino)
            .or_else(|| dst.and_then(|d| self.exclusive(me, d.ino)))
        {
            return Ok(w);
        }
        if parent == newparent && name == newname {
            return Ok(done(Out::Done));
        }
        if dst.is_some() && noreplace {
            return Ok(fail(libc::EEXIST, format!("{newname:?} exists")));
        }
        if exchange && dst.is_none() {
            return Ok(fail(libc::ENOENT, format!("no {newname:?}")));
        }
        // A directory may not move under itself.
        let moved_in = |d: Dentry, to: u64| (d.kind == Kind::Dir).then_some((d.ino, to));
        let checks = [
            moved_in(src, newparent),
            dst.filter(|_| exchange).and_then(|d| moved_in(d, parent)),
        ];
        for (dir, to) in checks.into_iter().flatten() {
            if self.is_under(to, dir).await? {
                return Ok(fail(libc::EINVAL, "a directory cannot move into itself"));
            }
        }
        let mut updates = Vec::new();
        let mut purge = None;
        let mut src_inode = tryh!(self.inode(src.ino).await?);
        if exchange {
            let d = dst.unwrap_or(src);
            let mut dst_inode = tryh!(self.inode(d.ino).await?);
            updates.push(self.link(parent, name, Some(d)));
            updates.push(self.link(newparent, newname, Some(src)));
            if parent != newparent {
                if src.kind == Kind::Dir {
                    src_inode.parent = newparent;
                }
                if d.kind == Kind::Dir {
                    dst_inode.parent = parent;
                }
                let delta = i64::from(src.kind == Kind::Dir) - i64::from(d.kind == Kind::Dir);
                self.adjust_nlink(parent, -delta, now, &mut updates).await?;
                self.adjust_nlink(newparent, delta, now, &mut updates)
                    .await?;
            } else {
                self.adjust_nlink(parent, 0, now, &mut updates).await?;
            }
            src_inode.ctime = now;
            dst_inode.ctime = now;
            updates.push(self.put(src_inode));
            updates.push(self.put(dst_inode));
            return Ok(Handled::Done {
                result: Ok(Out::Done),
                updates,
                purge: None,
            });
        }
        if let Some(d) = dst {
            if d.ino == src.ino {
                // Two links of one file: POSIX says do nothing.
                return Ok(done(Out::Done));
            }
            let dst_inode = tryh!(self.inode(d.ino).await?);
            match (src.kind == Kind::Dir, d.kind == Kind::Dir) {
                (true, false) => {
                    return Ok(fail(
                        libc::ENOTDIR,
                        format!("{newname:?} is not a directory"),
                    ));
                }
                (false, true) => {
                    return Ok(fail(libc::EISDIR, format!("{newname:?} is a directory")));
                }
                (true, true) => {
                    tryh!(self.dir(d.ino).await?);
                    if self.dirs.get(&d.ino).is_some_and(|e| !e.is_empty()) {
                        return Ok(fail(libc::ENOTEMPTY, format!("{newname:?} is not empty")));
                    }
                    self.adjust_nlink(newparent, -1, now, &mut updates).await?;
                }
                (false, false) => {}
            }
            purge = self.drop_link(dst_inode, now, &mut updates);
        }
        updates.push(self.link(parent, name, None));
        updates.push(self.link(newparent, newname, Some(src)));
        let moved_dir = src.kind == Kind::Dir && parent != newparent;
        if moved_dir {
            src_inode.parent = newparent;
        }
        src_inode.ctime = now;
        updates.push(self.put(src_inode));
        self.adjust_nlink(parent, if moved_dir { -1 } else { 0 }, now, &mut updates)
            .await?;
        if newparent != parent {
            self.adjust_nlink(newparent, i64::from(moved_dir), now, &mut updates)
                .await?;
        }
        self.maybe_split(newparent, &mut updates);
        Ok(Handled::Done {
            result: Ok(Out::Done),
            updates,
            purge,
        })
    }

    /// Whether directory `at` is `dir` or lies under it (following each
    /// directory's parent up to the root).
    async fn is_under(&mut self, mut at: u64, dir: u64) -> Result<bool, ClientError> {
        for _ in 0..4096 {
            if at == dir {
                return Ok(true);
            }
            if at == ROOT_INO {
                return Ok(false);
            }
            at = match self.inode(at).await? {
                Ok(i) => i.parent,
                Err(_) => return Ok(false),
            };
        }
        Ok(false)
    }

    async fn adjust_nlink(
        &mut self,
        dir: u64,
        delta: i64,
        now: i64,
        updates: &mut Vec<Update>,
    ) -> Result<(), ClientError> {
        // The cache has it (the caller loaded it).
        if let Ok(mut d) = self.inode(dir).await? {
            d.nlink = (i64::from(d.nlink) + delta).max(0) as u32;
            d.mtime = now;
            d.ctime = now;
            updates.push(self.put(d));
        }
        Ok(())
    }
}

/// The inodes `updates` change and forget, for an answer.
fn changed(updates: &[Update]) -> Out {
    let mut inodes = Vec::new();
    let mut gone = Vec::new();
    for u in updates {
        match u {
            Update::Inode { inode } => inodes.push(inode.clone()),
            Update::Forget { ino } => gone.push(*ino),
            _ => {}
        }
    }
    Out::Changed { inodes, gone }
}

fn check_name(name: &str) -> Result<(), Errno> {
    if name.len() > NAME_MAX {
        return Err(Errno::new(libc::ENAMETOOLONG, "name longer than 255 bytes"));
    }
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(Errno::new(libc::EINVAL, format!("bad name {name:?}")));
    }
    Ok(())
}

fn apply_set(i: &mut Inode, set: &SetAttr, now: i64, flush: bool) {
    let mut changed = set.size.is_some();
    if let Some(p) = set.perm {
        i.perm = p & 0o7777;
        changed = true;
    }
    if let Some(u) = set.uid {
        i.uid = u;
        changed = true;
    }
    if let Some(g) = set.gid {
        i.gid = g;
        changed = true;
    }
    if let Some(a) = set.atime {
        i.atime = a;
        changed = true;
    }
    if let Some(m) = set.mtime {
        i.mtime = if flush { i.mtime.max(m) } else { m };
        changed = true;
    }
    if let Some(c) = set.ctime {
        i.ctime = i.ctime.max(c);
    } else if changed && !flush {
        i.ctime = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_kept_for_resends_go_once_the_client_has_them() {
        let mut c = Completed::default();
        for tid in 1..=100 {
            c.insert(7, tid, Out::Done);
            c.insert(8, tid, Out::Done);
        }
        // An older client says nothing: everything stays.
        c.forget_below(7, 0);
        assert_eq!(c.len(), 200);
        // The client still waits on 61: 61 and above stay, for its resend.
        c.forget_below(7, 61);
        assert_eq!(c.len(), 140);
        assert!(c.get(7, 60).is_none());
        assert_eq!(c.get(7, 61), Some(Out::Done));
        assert_eq!(c.get(8, 1), Some(Out::Done));
        // A stale (lower) oldest tid forgets nothing more.
        c.forget_below(7, 10);
        assert_eq!(c.len(), 140);
        // A session that ends, or did not come back after a failover.
        c.end(8);
        assert_eq!(c.len(), 40);
        c.insert(9, 1, Out::Done);
        c.keep_only(|s| s == 9);
        assert_eq!(c.len(), 1);
        assert_eq!(c.get(9, 1), Some(Out::Done));
    }

    #[test]
    fn the_rank_comes_from_the_map() {
        let map: FsMapReply = serde_json::from_value(serde_json::json!({
            "version": 1,
            "epoch": 4,
            "filesystems": [{
                "name": "fs", "id": 2, "metadata_pool": "m", "data_pool": "d",
                "created_ms": 1,
                "active": { "name": "a", "addr": "127.0.0.1:1", "incarnation": 7, "since_ms": 1 }
            }],
            "standbys": [{ "name": "b", "addr": "127.0.0.1:2" }]
        }))
        .unwrap();
        assert_eq!(
            rank_of(&map, "a"),
            Some(Rank {
                fs_id: 2,
                metadata_pool: "m".into(),
                data_pool: "d".into(),
                incarnation: 7
            })
        );
        assert_eq!(rank_of(&map, "b"), None);
        assert_eq!(rank_of(&FsMapReply::default(), "a"), None);
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("ok").is_ok());
        assert_eq!(
            check_name(&"x".repeat(256)).unwrap_err().errno,
            libc::ENAMETOOLONG
        );
        assert_eq!(check_name("a/b").unwrap_err().errno, libc::EINVAL);
        assert_eq!(check_name("..").unwrap_err().errno, libc::EINVAL);
    }

    #[test]
    fn flushed_times_only_move_forward_and_ctime_follows_changes() {
        let mut i = Inode::new(5, Kind::File, 0o644, 1, 1, 100);
        apply_set(
            &mut i,
            &SetAttr {
                mtime: Some(50),
                ..SetAttr::default()
            },
            200,
            true,
        );
        assert_eq!(i.mtime, 100);
        apply_set(
            &mut i,
            &SetAttr {
                perm: Some(0o4755),
                ..SetAttr::default()
            },
            300,
            false,
        );
        assert_eq!((i.perm, i.ctime), (0o4755, 300));
        apply_set(
            &mut i,
            &SetAttr {
                mtime: Some(50),
                ..SetAttr::default()
            },
            400,
            false,
        );
        assert_eq!(i.mtime, 50);
    }
}

//! [`MonClient`]: how tools and daemons reach the monitors. A client keeps
//! a session with one monitor; without one (at start, or when its monitor
//! fails) it hunts: it connects to the monitors in parallel, asks each
//! whether it is in a quorum, and takes the first that says yes. Monitors
//! that failed are remembered and asked last ([`Hunting`]), so a dead
//! monitor never makes a client wait for its connect timeout while
//! another monitor answers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use bytes::Bytes;
use serde_json::Value;
use shoal_maps::{OsdMap, PastIntervals, PgId};
use shoal_net::{Connection, Dispatcher, Incoming};
use shoal_net::{Messenger, Secret, ServiceSecrets, Ticket};
use shoal_proto::{Message, MonCommand, MonCommandReply, MonPastIntervals};
use shoal_proto::{MonSubscribe, MonUpdate};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use crate::command::Command;
use crate::error::{ErrorCode, MonError};
use crate::hunt::{Hunting, Plan};

/// Collects the updates monitors push to a messenger: give it to the
/// messenger as its dispatcher (or call [`UpdateSink::offer`] from yours).
/// Updates queue per subscribed part, at most [`UpdateSink::QUEUE_MAX`] each;
/// past that the oldest are dropped, which a follower notices as a gap and
/// repairs by subscribing again from what it has.
#[derive(Debug, Default)]
pub struct UpdateSink {
    queues: Mutex<BTreeMap<String, VecDeque<(u64, Bytes)>>>,
    notify: Notify,
}

impl UpdateSink {
    /// Updates kept per subscribed part.
    pub const QUEUE_MAX: usize = 1024;

    /// A new, empty sink.
    pub fn new() -> Arc<UpdateSink> {
        Arc::default()
    }

    /// Takes a message if it is a monitor update; returns it otherwise.
    pub fn offer(&self, inc: Incoming) -> Option<Incoming> {
        let Message::MonUpdate(MonUpdate { what, version }) = &inc.msg else {
            return Some(inc);
        };
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let q = queues.entry(what.clone()).or_default();
        q.push_back((*version, inc.data.clone()));
        while q.len() > Self::QUEUE_MAX {
            q.pop_front();
        }
        drop(queues);
        self.notify.notify_waiters();
        None
    }

    fn drain(&self, what: &str) -> Vec<(u64, Bytes)> {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        queues
            .get_mut(what)
            .map(|q| q.drain(..).collect())
            .unwrap_or_default()
    }
}

impl Dispatcher for UpdateSink {
    fn dispatch(&self, incoming: Incoming) {
        let _ = self.offer(incoming);
    }
}

/// The newest value of a subscription: (state version, value).
pub type Subscription = watch::Receiver<Option<(u64, Value)>>;

/// A client of the monitor quorum.
#[derive(Debug, Clone)]
pub struct MonClient {
    msgr: Messenger,
    mons: Arc<Vec<SocketAddr>>,
    timeout: Duration,
    shared: Arc<Shared>,
}

/// What the clones of one client share: the session and what hunting
/// learned.
#[derive(Debug)]
struct Shared {
    hunting: Mutex<Hunting>,
    session: Mutex<Option<Session>>,
    /// Held while hunting, so concurrent callers share one hunt.
    hunt: tokio::sync::Mutex<()>,
}

/// The monitor a client talks to, and its connection.
#[derive(Debug, Clone)]
struct Session {
    index: usize,
    conn: Connection,
}

/// How long a monitor without a quorum may hold a hunting probe, waiting
/// for one (an election in progress ends well within it).
const PROBE_WAIT: Duration = Duration::from_secs(2);

/// A subscription that has heard nothing from its monitor for this long
/// asks it whether it is still in a quorum: a monitor cut off by the
/// network neither closes the connection nor sends another map, and a
/// follower waiting on it would wait for good.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(2);

/// How long that question may take before the monitor counts as gone.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);

impl MonClient {
    /// A client reaching `mons` through `msgr`; each command gives up after
    /// `timeout`.
    pub fn new(msgr: Messenger, mons: Vec<SocketAddr>, timeout: Duration) -> Self {
        let n = mons.len();
        MonClient {
            msgr,
            mons: Arc::new(mons),
            timeout,
            shared: Arc::new(Shared {
                hunting: Mutex::new(Hunting::new(n)),
                session: Mutex::new(None),
                hunt: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// The monitor of the current session, if there is one.
    pub fn session_addr(&self) -> Option<SocketAddr> {
        self.current().map(|s| self.mons[s.index])
    }

    /// Whether the monitor at `addr` is remembered dead (it failed within
    /// the last 30 s, so hunts ask it last).
    pub fn remembers_dead(&self, addr: SocketAddr) -> bool {
        let now = Instant::now();
        let h = lock(&self.shared.hunting);
        self.mons
            .iter()
            .position(|a| *a == addr)
            .is_some_and(|i| h.is_dead(i, now))
    }

    /// Sends `cmd` and returns its JSON output.
    pub async fn command(&self, cmd: &Command) -> Result<Value, MonError> {
        let json = serde_json::to_string(cmd)
            .map_err(|e| MonError::new(ErrorCode::Internal, e.to_string()))?;
        let reply = self
            .exchange(|| MonCommand {
                command: json.clone(),
            })
            .await?;
        match reply.msg {
            Message::MonCommandReply(r) => reply_to_result(r),
            _ => Err(MonError::new(ErrorCode::Internal, "unexpected reply")),
        }
    }

    /// Runs `cmd` and decodes its answer into its typed reply
    /// ([`crate::replies`]): a field missing or renamed is an error.
    pub async fn command_as<T: serde::de::DeserializeOwned>(
        &self,
        cmd: &Command,
    ) -> Result<T, MonError> {
        let v = self.command(cmd).await?;
        crate::replies::decode(CommandName(cmd), v)
    }

    /// PG `pg`'s past intervals since `since`, from a monitor whose map has
    /// reached `epoch` (the caller's): for peering.
    pub async fn past_intervals(
        &self,
        pg: PgId,
        since: u32,
        epoch: u32,
    ) -> Result<PastIntervals, MonError> {
        let reply = self
            .exchange(|| MonPastIntervals {
                pool: pg.pool,
                pg_seed: pg.seed,
                since,
                epoch,
            })
            .await?;
        match reply.msg {
            Message::MonPastIntervalsReply(r) if r.code == 0 => PastIntervals::decode(&reply.data)
                .map_err(|e| {
                    MonError::new(
                        ErrorCode::Internal,
                        format!("past intervals of {pg} from the monitors: {e}"),
                    )
                }),
            Message::MonPastIntervalsReply(r) => {
                Err(MonError::new(ErrorCode::from_u32(r.code), r.message))
            }
            _ => Err(MonError::new(ErrorCode::Internal, "unexpected reply")),
        }
    }

    /// Sends the request `make` builds to the session's monitor and
    /// returns its reply, hunting for another monitor (within the
    /// client's timeout) when one cannot answer: a monitor that is
    /// catching up asks for another (`Again`); one that lost the quorum
    /// ends the session, and its answer is returned (the next request
    /// hunts; this one is not sent again, as a change may still commit).
    async fn exchange<M: Into<Message>>(
        &self,
        make: impl Fn() -> M,
    ) -> Result<shoal_net::Reply, MonError> {
        if self.mons.is_empty() {
            return Err(MonError::new(
                ErrorCode::InvalidArgument,
                "no monitors configured (set mon_host)",
            ));
        }
        let deadline = Instant::now() + self.timeout;
        let mut last = String::new();
        // The first monitor that asked us to go elsewhere, and why: kept
        // when a later attempt only times out.
        let mut sent_on: Option<String> = None;
        while Instant::now() < deadline {
            let s = match self.session(deadline).await {
                Ok(s) => s,
                Err((e, true)) => {
                    return Err(MonError::new(
                        ErrorCode::PermissionDenied,
                        format!("every monitor refused the connection: {e}"),
                    ));
                }
                Err((e, false)) => {
                    last = e;
                    break;
                }
            };
            let addr = self.mons[s.index];
            let remaining = deadline.saturating_duration_since(Instant::now());
            match s
                .conn
                .request_with_timeout(make(), Bytes::new(), remaining)
                .await
            {
                Ok(reply) => {
                    let (code, text) = match &reply.msg {
                        Message::MonCommandReply(r) => (r.code, r.output.as_str()),
                        Message::MonPastIntervalsReply(r) => (r.code, r.message.as_str()),
                        other => {
                            last = format!(
                                "mon at {addr}: unexpected reply {}",
                                other.msg_type().name()
                            );
                            self.end_session(&s, true);
                            continue;
                        }
                    };
                    if code == ErrorCode::Again as u32 {
                        last = format!("mon at {addr}: {text}");
                        sent_on.get_or_insert_with(|| last.clone());
                        self.end_session(&s, true);
                        continue;
                    }
                    if code == ErrorCode::NoQuorum as u32 {
                        self.end_session(&s, true);
                    }
                    return Ok(reply);
                }
                Err(e) => {
                    last = format!("mon at {addr}: {e}");
                    self.end_session(&s, true);
                }
            }
        }
        let earlier = match sent_on {
            Some(a) if a != last => format!(" (earlier, {a})"),
            _ => String::new(),
        };
        Err(MonError::new(
            ErrorCode::NoQuorum,
            format!(
                "no quorum: no monitor answered within {:?}; last error: {last}{earlier}",
                self.timeout
            ),
        ))
    }

    /// The session, if there is one and its connection is open (a closed
    /// one ends the session and counts as a failure of its monitor).
    fn current(&self) -> Option<Session> {
        let mut cur = lock(&self.shared.session);
        let s = cur.as_ref()?;
        if !s.conn.is_closed() {
            return Some(s.clone());
        }
        let i = s.index;
        *cur = None;
        drop(cur);
        lock(&self.shared.hunting).failed(i, Instant::now());
        None
    }

    /// Ends session `s` (unless another one replaced it already); its
    /// monitor is asked last in the next hunts when it `failed`, and its
    /// connection is closed, so that every subscription following that
    /// monitor subscribes again elsewhere.
    fn end_session(&self, s: &Session, failed: bool) {
        let mut cur = lock(&self.shared.session);
        if cur.as_ref().is_some_and(|c| c.conn.id() == s.conn.id()) {
            *cur = None;
        }
        drop(cur);
        if failed {
            lock(&self.shared.hunting).failed(s.index, Instant::now());
            s.conn.close();
        }
    }

    /// Whether the monitor of session `s` still answers, in a quorum,
    /// within [`KEEPALIVE_TIMEOUT`]; when it does not, the session ends.
    async fn keepalive(&self, s: &Session) -> bool {
        let alive = async {
            let cmd = MonCommand {
                command: serde_json::to_string(&Command::MonHunt { wait_ms: 0 }).ok()?,
            };
            let reply = s
                .conn
                .request_with_timeout(cmd, Bytes::new(), KEEPALIVE_TIMEOUT)
                .await
                .ok()?;
            let Message::MonCommandReply(r) = reply.msg else {
                return None;
            };
            let v = reply_to_result(r).ok()?;
            v["in_quorum"].as_bool()
        }
        .await
        .unwrap_or(false);
        if !alive {
            tracing::debug!(mon = %self.mons[s.index], "monitor silent or out of quorum: hunting");
            self.end_session(s, true);
        }
        alive
    }

    /// The current session, or a new one hunted for until `deadline`.
    /// On failure, whether every monitor refused us for good.
    async fn session(&self, deadline: Instant) -> Result<Session, (String, bool)> {
        if let Some(s) = self.current() {
            return Ok(s);
        }
        let _hunting = self.shared.hunt.lock().await;
        // Another caller may have found one while we waited.
        if let Some(s) = self.current() {
            return Ok(s);
        }
        loop {
            let last = match self.hunt_round(deadline).await {
                Ok(s) => {
                    *lock(&self.shared.session) = Some(s.clone());
                    return Ok(s);
                }
                // Every monitor refused us for good (a wrong key, another
                // ms_mode): hunting on would only hide why.
                Err((e, true)) => return Err((e, true)),
                Err((e, false)) => e,
            };
            let pause = lock(&self.shared.hunting).round_failed();
            if Instant::now() + pause >= deadline {
                return Err((last, false));
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// One hunting round: probes the monitors of the plan in parallel (those
    /// remembered dead after the others); the first in a quorum wins.
    /// On failure, whether every monitor refused us for good.
    async fn hunt_round(&self, deadline: Instant) -> Result<Session, (String, bool)> {
        let Plan { first, later } = lock(&self.shared.hunting).plan(Instant::now());
        if first.is_empty() {
            return Err(("no monitors configured (set mon_host)".into(), true));
        }
        let probed = first.len() + later.len();
        let mut refused = 0;
        let mut probes = JoinSet::new();
        let spawn = |probes: &mut JoinSet<_>, i: usize| {
            let (msgr, addr) = (self.msgr.clone(), self.mons[i]);
            probes.spawn(async move { (i, probe(&msgr, addr, deadline).await) });
        };
        for &i in &first {
            spawn(&mut probes, i);
        }
        let mut later = Some(later).filter(|l| !l.is_empty());
        let stagger = tokio::time::sleep(Hunting::STAGGER);
        tokio::pin!(stagger);
        let mut last: String;
        loop {
            tokio::select! {
                Some(done) = probes.join_next() => {
                    match done {
                        Ok((i, Ok(conn))) => {
                            lock(&self.shared.hunting).answered(i);
                            return Ok(Session { index: i, conn });
                        }
                        Ok((i, Err((e, permanent)))) => {
                            lock(&self.shared.hunting).failed(i, Instant::now());
                            last = format!("mon at {}: {e}", self.mons[i]);
                            refused += usize::from(permanent);
                        }
                        Err(e) => last = format!("a probe ended: {e}"),
                    }
                    if probes.is_empty() {
                        match later.take() {
                            Some(l) => l.into_iter().for_each(|i| spawn(&mut probes, i)),
                            None => return Err((last, refused == probed)),
                        }
                    }
                }
                _ = &mut stagger, if later.is_some() => {
                    later.take().into_iter().flatten().for_each(|i| spawn(&mut probes, i));
                }
            }
        }
    }

    /// Asks for a ticket to `service` (e.g. `osd`) for this client, whose
    /// own key is `own_key`; returns the sealed ticket, its session key and
    /// its expiry (ms since the Unix epoch).
    pub async fn ticket(
        &self,
        own_key: &Secret,
        service: &str,
    ) -> Result<(Vec<u8>, Secret, u64), MonError> {
        let v = self
            .command(&Command::AuthGetTicket {
                service: service.to_string(),
            })
            .await?;
        let bad =
            |what: &str| MonError::new(ErrorCode::Internal, format!("bad ticket reply: {what}"));
        let sealed = Secret::decode_base64(v["ticket"].as_str().ok_or_else(|| bad("ticket"))?)
            .map_err(|e| bad(&e))?;
        let wrapped: [u8; 32] = Secret::decode_base64(
            v["session_key"]
                .as_str()
                .ok_or_else(|| bad("session_key"))?,
        )
        .map_err(|e| bad(&e))?
        .try_into()
        .map_err(|_| bad("session key length"))?;
        let t = Ticket::parse(&sealed).map_err(|e| bad(&e.to_string()))?;
        let session = Ticket::unwrap_session_key(&t.nonce, &wrapped, own_key);
        Ok((sealed, session, t.expires_ms))
    }

    /// Follows `what` (`config`, `monmap`) for as long as the returned
    /// receiver lives, across monitor failures: when the monitor it follows
    /// goes away, it subscribes again at another. `sink` must receive this
    /// client's messenger's incoming messages.
    pub fn subscribe(&self, what: &str, sink: Arc<UpdateSink>) -> Subscription {
        let (tx, rx) = watch::channel(None);
        let client = self.clone();
        let what = what.to_string();
        tokio::spawn(async move { client.follow(what, sink, tx).await });
        rx
    }

    async fn follow(
        self,
        what: String,
        sink: Arc<UpdateSink>,
        tx: watch::Sender<Option<(u64, Value)>>,
    ) {
        let mut have = 0u64;
        let publish = |version: u64, data: &[u8], have: &mut u64| {
            if version > *have || *have == 0 {
                if let Ok(v) = serde_json::from_slice::<Value>(data) {
                    *have = version;
                    tx.send_replace(Some((version, v)));
                }
            }
        };
        while !tx.is_closed() {
            let Some((session, reply)) = self.subscribe_once(&what, have).await else {
                continue;
            };
            let Message::MonUpdate(u) = reply.msg else {
                continue;
            };
            publish(u.version, &reply.data, &mut have);
            // Follow pushes until the monitor goes away or nobody listens.
            let mut heard = Instant::now();
            while !session.conn.is_closed() && !tx.is_closed() {
                let notified = sink.notify.notified();
                let pending = sink.drain(&what);
                if !pending.is_empty() {
                    for (v, data) in pending {
                        publish(v, &data, &mut have);
                    }
                    heard = Instant::now();
                    continue;
                }
                if heard.elapsed() >= KEEPALIVE_IDLE {
                    if !self.keepalive(&session).await {
                        break;
                    }
                    heard = Instant::now();
                }
                let _ = tokio::time::timeout(Duration::from_millis(250), notified).await;
            }
        }
    }

    /// Subscribes to `what` at the session's monitor; on failure ends the
    /// session and waits a moment (so a caller retrying does not spin).
    async fn subscribe_once(&self, what: &str, have: u64) -> Option<(Session, shoal_net::Reply)> {
        let sub = MonSubscribe {
            what: what.to_string(),
            have,
        };
        let s = self.session(Instant::now() + self.timeout).await.ok()?;
        match s
            .conn
            .request_with_timeout(sub, Bytes::new(), self.timeout)
            .await
        {
            Ok(r) if matches!(r.msg, Message::MonUpdate(_)) => Some((s, r)),
            // Refused (say, a monitor not caught up) or failed: try another.
            _ => {
                self.end_session(&s, true);
                tokio::time::sleep(Duration::from_millis(200)).await;
                None
            }
        }
    }

    /// Follows the OSD map for as long as the returned receiver lives: the
    /// full map first, then every incremental, across monitor failures.
    /// A gap (updates lost while the follower lagged, or a new monitor)
    /// is repaired by subscribing again from the epoch it has. `sink` must
    /// receive this client's messenger's incoming messages.
    pub fn subscribe_osdmap(&self, sink: Arc<UpdateSink>) -> watch::Receiver<Option<Arc<OsdMap>>> {
        let (tx, rx) = watch::channel(None);
        let client = self.clone();
        tokio::spawn(async move { client.follow_osdmap(sink, tx, None).await });
        rx
    }

    /// [`MonClient::subscribe_osdmap`], plus every map in epoch order on
    /// the second receiver (for a daemon that must see each epoch; the
    /// only gaps are where the monitors sent a full map).
    pub fn subscribe_osdmap_every(
        &self,
        sink: Arc<UpdateSink>,
    ) -> (
        watch::Receiver<Option<Arc<OsdMap>>>,
        tokio::sync::mpsc::UnboundedReceiver<Arc<OsdMap>>,
    ) {
        let (tx, rx) = watch::channel(None);
        let (every_tx, every_rx) = tokio::sync::mpsc::unbounded_channel();
        let client = self.clone();
        tokio::spawn(async move { client.follow_osdmap(sink, tx, Some(every_tx)).await });
        (rx, every_rx)
    }

    async fn follow_osdmap(
        self,
        sink: Arc<UpdateSink>,
        tx: watch::Sender<Option<Arc<OsdMap>>>,
        every: Option<tokio::sync::mpsc::UnboundedSender<Arc<OsdMap>>>,
    ) {
        let every = every.as_ref();
        let mut local: Option<OsdMap> = None;
        while !tx.is_closed() {
            let have = local.as_ref().map_or(0, |m| u64::from(m.epoch.0));
            // Updates queued from an earlier subscription are superseded by
            // this one's reply. What arrives while it is asked for is kept:
            // the monitor may push the next epoch before its reply (the
            // reply's older epochs are skipped when the queue is applied).
            let _ = sink.drain("osdmap");
            let Some((session, reply)) = self.subscribe_once("osdmap", have).await else {
                continue;
            };
            let mut ok = apply_update(&mut local, &reply.data, &tx, every);
            let mut heard = Instant::now();
            while ok && !session.conn.is_closed() && !tx.is_closed() {
                let notified = sink.notify.notified();
                let pending = sink.drain("osdmap");
                if pending.is_empty() {
                    if heard.elapsed() >= KEEPALIVE_IDLE {
                        if !self.keepalive(&session).await {
                            break;
                        }
                        heard = Instant::now();
                    }
                    let _ = tokio::time::timeout(Duration::from_millis(250), notified).await;
                    continue;
                }
                heard = Instant::now();
                ok = pending
                    .iter()
                    .all(|(_, data)| apply_update(&mut local, data, &tx, every));
            }
            // A gap or a bad update: the loop subscribes again, from what we
            // have, at the same monitor while its session lasts.
        }
    }

    /// The service secrets of `service`, for its daemons to check tickets.
    pub async fn service_secrets(&self, service: &str) -> Result<ServiceSecrets, MonError> {
        let v = self
            .command(&Command::AuthServiceSecrets {
                service: service.to_string(),
            })
            .await?;
        let mut out = ServiceSecrets::default();
        for (id, key) in v["secrets"].as_object().into_iter().flatten() {
            let id: u64 = id
                .parse()
                .map_err(|_| MonError::new(ErrorCode::Internal, "bad secret id"))?;
            let key = Secret::from_base64(key.as_str().unwrap_or(""))
                .map_err(|e| MonError::new(ErrorCode::Internal, e))?;
            out.insert(id, key);
        }
        Ok(out)
    }
}

/// Connects to the monitor at `addr` (one attempt) and asks whether it is
/// in a quorum; the connection when it is.
async fn probe(
    msgr: &Messenger,
    addr: SocketAddr,
    deadline: Instant,
) -> Result<Connection, (String, bool)> {
    let remaining = deadline.saturating_duration_since(Instant::now());
    let conn = tokio::time::timeout(remaining, msgr.connect_once(addr))
        .await
        .map_err(|_| ("connect timed out".to_string(), false))?
        .map_err(|e| (e.to_string(), !e.is_transient()))?;
    let transient = |e: String| (e, false);
    let remaining = deadline.saturating_duration_since(Instant::now());
    // Half of what is left at most, so that "no quorum" arrives before the
    // caller's deadline and can be reported.
    let wait = PROBE_WAIT.min(remaining / 2);
    let hunt = Command::MonHunt {
        wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
    };
    let cmd = MonCommand {
        command: serde_json::to_string(&hunt).map_err(|e| transient(e.to_string()))?,
    };
    // The monitor answers within `wait`; the rest is for the round trip.
    let reply = conn
        .request_with_timeout(cmd, Bytes::new(), remaining)
        .await
        .map_err(|e| transient(e.to_string()))?;
    let r = match reply.msg {
        Message::MonCommandReply(r) => r,
        other => {
            return Err(transient(format!(
                "unexpected reply {}",
                other.msg_type().name()
            )));
        }
    };
    let v = reply_to_result(r).map_err(|e| transient(e.message))?;
    if v["in_quorum"].as_bool() == Some(true) {
        Ok(conn)
    } else {
        Err(transient(format!("not in a quorum: {v}")))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section here leaves its value whole, even on panic.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Applies one `osdmap` update to `local` and publishes the result; false
/// when it does not fully apply (a gap).
fn apply_update(
    local: &mut Option<OsdMap>,
    data: &[u8],
    tx: &watch::Sender<Option<Arc<OsdMap>>>,
    every: Option<&tokio::sync::mpsc::UnboundedSender<Arc<OsdMap>>>,
) -> bool {
    let before = local.as_ref().map(|m| m.epoch.0);
    // Each incremental applies atomically, so on a gap `local` is still a
    // whole map, just at an earlier epoch.
    // The newest map sent to `every` is also the one the watch publishes.
    let mut newest: Option<Arc<OsdMap>> = None;
    let mut each = |m: &OsdMap| {
        if let Some(every) = every
            && before.is_none_or(|b| m.epoch.0 > b)
        {
            let m = Arc::new(m.clone());
            let _ = every.send(Arc::clone(&m));
            newest = Some(m);
        }
    };
    let ok = crate::update::apply_osdmap_update_each(local, data, &mut each).is_ok();
    let after = local.as_ref().map(|m| m.epoch.0);
    if after != before {
        let published = newest
            .filter(|m| Some(m.epoch.0) == after)
            .or_else(|| local.clone().map(Arc::new));
        tx.send_replace(published);
    }
    ok
}

fn reply_to_result(r: MonCommandReply) -> Result<Value, MonError> {
    if r.code == 0 {
        serde_json::from_str(&r.output)
            .map_err(|e| MonError::new(ErrorCode::Internal, e.to_string()))
    } else {
        Err(MonError::new(ErrorCode::from_u32(r.code), r.output))
    }
}

/// A command's variant name (`FsLs`), written only when an error names it.
struct CommandName<'a>(&'a Command);

impl std::fmt::Display for CommandName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let debug = format!("{:?}", self.0);
        f.write_str(debug.split([' ', '{', '(']).next().unwrap_or_default())
    }
}

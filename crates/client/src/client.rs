//! [`Client`]: a connection to a cluster. It authenticates to the monitors,
//! keeps a ticket for the OSDs fresh, follows the OSD map, and sends each
//! operation to the primary of its object's PG, resending when the map
//! changes, the primary moves, or the connection is lost, until the
//! operation's timeout.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

use bytes::{Bytes, BytesMut};
use shoal_config::Config;
use shoal_maps::{OsdMap, PgId};
use shoal_monclient::{MonClient, TicketAuth, UpdateSink, parse_mon_host};
use shoal_net::{Keyring, Messenger, NetConfig, Secret, TcpTransport, Transport};
use shoal_proto::{Message, OsdErrorCode, OsdOp};
use shoal_types::EntityName;
use tokio::sync::{Semaphore, watch};

use crate::error::{Error, OpError, Result};
use crate::op::{Op, OpResult};
use crate::pool::Pool;
use crate::watch::WatchTable;

/// How a client connects and behaves.
#[derive(Clone)]
pub struct ClientOptions {
    /// Monitor addresses.
    pub mon_addrs: Vec<SocketAddr>,
    /// Who the client is (`client.admin`).
    pub name: EntityName,
    /// Its key.
    pub key: Secret,
    /// How long an operation may take, resends included.
    pub op_timeout: Duration,
    /// This client instance's id in request ids. Give the id of a client
    /// that stopped to resend its operations without applying them twice;
    /// `None`: a random one.
    pub client_inc: Option<u64>,
    /// Operations in flight at most (more wait).
    pub max_inflight_ops: usize,
    /// Payload bytes in flight at most (more wait).
    pub max_inflight_bytes: usize,
    /// Messenger settings.
    pub net: NetConfig,
    /// The network (TCP; in-memory in tests).
    pub transport: Arc<dyn Transport>,
    /// Told of every attempt an op makes (the simulation checks resends).
    pub observer: Option<Arc<dyn OpObserver>>,
    /// A watch not renewed for this long is dropped by the OSD.
    pub watch_timeout: Duration,
}

/// Sees every attempt of every op as it is sent.
pub trait OpObserver: Send + Sync {
    /// Op `tid` on object `oid` is sent (again) with the client's map at
    /// `epoch`.
    fn sent(&self, tid: u64, oid: &str, epoch: u32);
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("mon_addrs", &self.mon_addrs)
            .field("name", &self.name)
            .field("op_timeout", &self.op_timeout)
            .field("client_inc", &self.client_inc)
            .finish_non_exhaustive()
    }
}

impl ClientOptions {
    /// Options for `name` with `key`, reaching the monitors at `mon_addrs`,
    /// with default limits.
    pub fn new(mon_addrs: Vec<SocketAddr>, name: EntityName, key: Secret) -> ClientOptions {
        ClientOptions {
            mon_addrs,
            name,
            key,
            op_timeout: Duration::from_secs(60),
            client_inc: None,
            max_inflight_ops: 1024,
            max_inflight_bytes: 256 << 20,
            net: NetConfig::default(),
            transport: Arc::new(TcpTransport),
            observer: None,
            watch_timeout: Duration::from_secs(30),
        }
    }

    /// Options from a configuration file (`None`: `$SHOAL_CONF`, or the
    /// defaults) for entity `name`: `mon_host`, the key from `keyring`,
    /// `client_op_timeout_ms` and the messenger settings.
    pub fn from_config(conf: Option<&Path>, name: &EntityName, set: &[String]) -> Result<Self> {
        let config = Config::load(conf, name, set).map_err(|e| Error::Config(e.to_string()))?;
        Self::from_loaded(&config, name)
    }

    /// Options from a loaded configuration.
    pub fn from_loaded(config: &Config, name: &EntityName) -> Result<Self> {
        let o = &config.options;
        let mon_addrs: Vec<SocketAddr> = parse_mon_host(&o.mon_host)
            .map_err(|e| Error::Config(e.to_string()))?
            .into_iter()
            .map(|(_, a)| a)
            .collect();
        if mon_addrs.is_empty() {
            return Err(Error::Config("no monitors: set mon_host".into()));
        }
        if o.keyring.is_empty() {
            return Err(Error::Config("no keyring: set keyring = PATH".into()));
        }
        let ring =
            Keyring::load(Path::new(&o.keyring)).map_err(|e| Error::Config(e.to_string()))?;
        let key = ring
            .get(name)
            .ok_or_else(|| Error::Config(format!("{} has no key for {name}", o.keyring)))?
            .key
            .clone();
        let mut opts = ClientOptions::new(mon_addrs, name.clone(), key);
        opts.op_timeout = Duration::from_millis(o.client_op_timeout_ms);
        opts.watch_timeout = Duration::from_millis(o.client_watch_timeout_ms.max(1000));
        opts.net = NetConfig::from_options(o);
        Ok(opts)
    }
}

pub(crate) struct Inner {
    pub(crate) opts: ClientOptions,
    msgr: Messenger,
    monc: MonClient,
    map: watch::Receiver<Option<Arc<OsdMap>>>,
    inc: u64,
    next_tid: AtomicU64,
    ops: Semaphore,
    bytes: Semaphore,
    renew: tokio::task::JoinHandle<()>,
    pub(crate) watches: Arc<WatchTable>,
    /// Where each PG's ops go, per map epoch (CRUSH once per PG and map).
    placements: std::sync::Mutex<Placements>,
}

/// A PG's placement in one map: its interval and its primary's address.
#[derive(Debug, Clone)]
struct Placement {
    interval: Option<shoal_maps::IntervalKey>,
    /// The pool's `pg_num`: a split starts a new interval of every PG that
    /// splits (and moves some of its objects to the children), as Ceph's
    /// client sees it.
    pg_num: Option<u32>,
    primary: i32,
    addr: Option<SocketAddr>,
}

/// Placements of the two newest map epochs an op used.
#[derive(Debug, Default)]
struct Placements {
    newest: u32,
    by_pg: std::collections::HashMap<(u32, PgId), Arc<Placement>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.renew.abort();
    }
}

/// A connection to a cluster; clones share it.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Client({} inc {:x})",
            self.inner.opts.name, self.inner.inc
        )
    }
}

/// A write's snapshot context: the newest snapshot id the writer knows and
/// the live snapshots, newest first (librados' self-managed write context).
/// The first write to an object after a snapshot keeps what it held then.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapContext {
    /// The newest snapshot id.
    pub seq: u64,
    /// The live snapshots, newest first.
    pub snaps: Vec<u64>,
}

/// Per-operation choices.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpOptions {
    /// This op's id (default: the client's next). An op resent by a new
    /// instance with the same `client_inc` and `tid` applies at most once.
    pub tid: Option<u64>,
    /// Overrides the client's operation timeout.
    pub timeout: Option<Duration>,
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    if getrandom::fill(&mut b).is_err() {
        // Fall back to the clock: uniqueness per process start is what matters.
        return shoal_net::now_ms() ^ u64::from(std::process::id()) << 32;
    }
    u64::from_le_bytes(b)
}

impl Client {
    /// Connects: gets a ticket for the OSDs and the current OSD map, both
    /// within the operation timeout.
    pub async fn connect(opts: ClientOptions) -> Result<Client> {
        let auth = TicketAuth::new(opts.name.clone(), opts.key.clone());
        let sink = UpdateSink::new();
        let watches = Arc::new(WatchTable::default());
        let dispatch = Dispatch {
            sink: sink.clone(),
            watches: Arc::clone(&watches),
        };
        let msgr = Messenger::new(
            opts.name.clone(),
            opts.net.clone(),
            Arc::clone(&opts.transport),
            Arc::new(auth.clone()),
            Arc::new(dispatch),
        );
        let mon_timeout = opts.op_timeout.min(Duration::from_secs(30));
        let monc = MonClient::new(msgr.clone(), opts.mon_addrs.clone(), mon_timeout);
        let deadline = Instant::now() + opts.op_timeout;
        loop {
            match auth.refresh_ticket(&monc).await {
                Ok(_) => break,
                Err(e)
                    if e.code == shoal_monclient::ErrorCode::Again && Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                // No `osd` caps: no ticket for the OSDs.
                Err(e) if e.code == shoal_monclient::ErrorCode::PermissionDenied => {
                    return Err(Error::PermissionDenied(e.message));
                }
                Err(e) => return Err(Error::Mon(e.to_string())),
            }
        }
        let renew = auth.spawn_renewal(monc.clone(), false);
        let mut map = monc.subscribe_osdmap(sink);
        let wait = map.wait_for(|m| m.is_some());
        if tokio::time::timeout_at(deadline, wait).await.is_err() {
            renew.abort();
            return Err(Error::Timeout(
                opts.op_timeout,
                "no OSD map from the monitors".into(),
            ));
        }
        let inc = opts.client_inc.unwrap_or_else(random_u64);
        let inner = Inner {
            ops: Semaphore::new(opts.max_inflight_ops.max(1)),
            bytes: Semaphore::new(opts.max_inflight_bytes.clamp(1, u32::MAX as usize)),
            opts,
            msgr,
            monc,
            map,
            inc,
            next_tid: AtomicU64::new(1),
            renew,
            watches,
            placements: std::sync::Mutex::default(),
        };
        Ok(Client {
            inner: Arc::new(inner),
        })
    }

    /// Connects as configured in `conf` (or `$SHOAL_CONF`) for `name`.
    pub async fn connect_config(conf: Option<&Path>, name: &str) -> Result<Client> {
        let name: EntityName = name
            .parse()
            .map_err(|e| Error::Config(format!("bad entity name {name:?}: {e}")))?;
        Client::connect(ClientOptions::from_config(conf, &name, &[])?).await
    }

    /// The current OSD map.
    pub fn map(&self) -> Result<Arc<OsdMap>> {
        self.inner
            .map
            .borrow()
            .clone()
            .ok_or_else(|| Error::Mon("no OSD map yet".into()))
    }

    /// Follows the client's OSD map (`None` until the first arrives).
    pub fn map_watch(&self) -> watch::Receiver<Option<Arc<OsdMap>>> {
        self.inner.map.clone()
    }

    pub(crate) fn inner_msgr(&self) -> &Messenger {
        &self.inner.msgr
    }

    /// The monitors, for commands.
    pub fn mon_client(&self) -> &MonClient {
        &self.inner.monc
    }

    /// This instance's id in request ids.
    pub fn client_inc(&self) -> u64 {
        self.inner.inc
    }

    /// Who the client is (`client.admin`).
    pub fn name(&self) -> &EntityName {
        &self.inner.opts.name
    }

    /// The messenger settings it was made with (`ms_*`), for other
    /// messengers of the same process (a file-system mount's, an MDS's).
    pub fn net_config(&self) -> &NetConfig {
        &self.inner.opts.net
    }

    /// Opens the pool with id `id`.
    pub fn pool_by_id(&self, id: u64) -> Result<Pool> {
        let map = self.map()?;
        let pool = map
            .pool(id)
            .ok_or_else(|| Error::NoPool(format!("pool {id}")))?;
        Ok(Pool::new(self.clone(), pool.id, &pool.name))
    }

    /// Opens pool `name`.
    pub fn pool(&self, name: &str) -> Result<Pool> {
        let map = self.map()?;
        let pool = map
            .pool_by_name(name)
            .ok_or_else(|| Error::NoPool(name.to_string()))?;
        Ok(Pool::new(self.clone(), pool.id, name))
    }

    /// [`Client::pool`]; when the pool is not in this client's map, the map
    /// is first brought up to the monitors' newest (a pool made a moment
    /// ago may not have reached the monitor this client follows yet, as
    /// librados's wait_for_latest_osdmap): `NoPool` only if the newest map
    /// lacks it too.
    pub async fn pool_latest(&self, name: &str) -> Result<Pool> {
        match self.pool(name) {
            Err(Error::NoPool(_)) => {}
            other => return other,
        }
        let stat: shoal_monclient::replies::OsdStatReply = self
            .mon_client()
            .command_as(&shoal_monclient::Command::OsdStat)
            .await
            .map_err(|e| Error::Mon(e.to_string()))?;
        let mut rx = self.inner.map.clone();
        let caught_up = rx.wait_for(|m| m.as_ref().is_some_and(|m| m.epoch.0 >= stat.epoch));
        let timeout = self.inner.opts.op_timeout;
        match tokio::time::timeout(timeout, caught_up).await {
            Ok(Ok(_)) => self.pool(name),
            Ok(Err(_)) => Err(Error::Mon("the client stopped".into())),
            Err(_) => Err(Error::Timeout(
                timeout,
                format!(
                    "the OSD map of epoch {} (looking for pool {name})",
                    stat.epoch
                ),
            )),
        }
    }

    /// Waits (at most the op timeout) until the map knows snapshot `snapid`
    /// of pool `pool`.
    pub(crate) async fn wait_pool_snap(&self, pool: u64, snapid: u64) {
        let mut rx = self.inner.map.clone();
        let wait = rx.wait_for(|m| {
            m.as_ref()
                .and_then(|m| m.pool(pool))
                .is_some_and(|p| p.snap_seq >= snapid)
        });
        let _ = tokio::time::timeout(self.inner.opts.op_timeout, wait).await;
    }

    /// Waits until the map is at `epoch` or newer, or `deadline` passes.
    pub(crate) async fn wait_epoch(&self, epoch: u32, deadline: Instant) {
        let mut rx = self.inner.map.clone();
        let wait = rx.wait_for(|m| m.as_ref().is_some_and(|m| m.epoch.0 >= epoch));
        let _ = tokio::time::timeout_at(deadline, wait).await;
    }

    /// Runs `op` on object `oid` (namespace `nspace`) of pool `pool`, its
    /// writes with snapshot context `snapc`, its reads at snapshot
    /// `read_snap`; with `full_try`, its changes go through on a full OSD.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn operate(
        &self,
        pool: u64,
        nspace: &str,
        oid: &str,
        op: Op,
        o: OpOptions,
        snapc: Option<&SnapContext>,
        read_snap: u64,
        full_try: bool,
    ) -> Result<OpResult, OpError> {
        let whole = |error| OpError { index: 0, error };
        if op.is_empty() {
            return Err(whole(Error::InvalidArgument(
                "an op needs a sub-operation".into(),
            )));
        }
        let timeout = o.timeout.unwrap_or(self.inner.opts.op_timeout);
        let deadline = Instant::now() + timeout;
        // Payload sent plus data expected back; an op larger than the whole
        // budget takes all of it, so it runs alone rather than never.
        let budget = self
            .inner
            .opts
            .max_inflight_bytes
            .clamp(1, u32::MAX as usize);
        let bytes = op
            .data_len()
            .saturating_add(op.reply_len_hint())
            .clamp(1, budget) as u32;
        let permits = async {
            let op = self.inner.ops.acquire().await;
            (op, self.inner.bytes.acquire_many(bytes).await)
        };
        let Ok(_permits) = tokio::time::timeout_at(deadline, permits).await else {
            let why = "waiting for room among the ops in flight".to_string();
            return Err(whole(Error::Timeout(timeout, why)));
        };
        let tid = o
            .tid
            .unwrap_or_else(|| self.inner.next_tid.fetch_add(1, Ordering::Relaxed));
        let data = concat(&op.data);
        let mut msg = OsdOp {
            pool,
            pg_seed: 0,
            oid: oid.to_string(),
            nspace: nspace.to_string(),
            epoch: 0,
            client_inc: self.inner.inc,
            tid,
            flags: if full_try { OsdOp::FLAG_FULL_TRY } else { 0 },
            ops: op.subs,
            snap_seq: snapc.map_or(0, |s| s.seq),
            snaps: snapc.map(|s| s.snaps.clone()).unwrap_or_default(),
            snap_id: read_snap,
        };
        let mut last = String::from("not sent");
        let mut attempt = 0u32;
        while Instant::now() < deadline {
            if attempt > 0 {
                msg.flags |= OsdOp::FLAG_RESEND;
            }
            attempt += 1;
            let map = self.map().map_err(whole)?;
            let Some(p) = map.pool(pool) else {
                return Err(whole(Error::NoPool(format!(
                    "pool {pool} no longer exists"
                ))));
            };
            let pg = p.object_pg(oid, nspace);
            msg.pg_seed = pg.seed;
            msg.epoch = map.epoch.0;
            if let Some(obs) = &self.inner.opts.observer {
                obs.sent(tid, oid, map.epoch.0);
            }
            match self.send_once(&map, pg, &msg, &data, deadline).await {
                Attempt::Done(reply, d) => {
                    return OpResult::from_reply(reply, d).map_err(whole);
                }
                Attempt::Failed(index, e) => return Err(OpError { index, error: e }),
                Attempt::NewEpoch(e, why) if e > map.epoch.0 => {
                    tracing::debug!(oid, tid, "waiting for epoch {e} to resend: {why}");
                    last = why;
                    // A map short of `e` that already moves the PG to a new
                    // interval is reason enough to resend.
                    tokio::select! {
                        () = self.wait_epoch(e, deadline) => {}
                        _ = self.pg_changes_interval(pg, &map) => {}
                    }
                }
                // The OSD's map is no newer than ours: it is catching up (or
                // the reply is wrong); a new map or a short pause, not a spin.
                Attempt::NewEpoch(_, why) | Attempt::Retry(why) => {
                    tracing::debug!(oid, tid, "resending: {why}");
                    last = why;
                    let next = map.epoch.0 + 1;
                    let pause =
                        Instant::now() + Duration::from_millis(100 * u64::from(attempt.min(5)));
                    self.wait_epoch(next, pause.min(deadline)).await;
                }
            }
        }
        Err(whole(Error::Timeout(timeout, last)))
    }

    /// One attempt at the PG's primary in `map`.
    async fn send_once(
        &self,
        map: &OsdMap,
        pg: PgId,
        msg: &OsdOp,
        data: &Bytes,
        deadline: Instant,
    ) -> Attempt {
        let place = self.placement(map, pg);
        let primary = place.primary;
        if primary < 0 {
            return Attempt::NewEpoch(map.epoch.0 + 1, format!("pg {pg} has no primary"));
        }
        let Some(addr) = place.addr else {
            return Attempt::NewEpoch(map.epoch.0 + 1, format!("osd.{primary} has no address"));
        };
        // Connecting and the request end with their answer, or when the
        // PG starts a new interval (its primary drops what it had in
        // flight), or at the deadline.
        let moved = self.pg_changes_interval(pg, map);
        tokio::pin!(moved);
        let remaining = deadline.saturating_duration_since(Instant::now());
        let connect = tokio::time::timeout(remaining, self.inner.msgr.connect(addr));
        let conn = tokio::select! {
            biased;
            c = connect => match c {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => return Attempt::Retry(format!("osd.{primary}: {e}")),
                Err(_) => return Attempt::Retry(format!("osd.{primary}: connect timed out")),
            },
            why = &mut moved => return Attempt::Retry(why),
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        let request = conn.request_with_timeout(msg.clone(), data.clone(), remaining);
        let reply = tokio::select! {
            biased;
            r = request => r,
            why = &mut moved => return Attempt::Retry(why),
        };
        match reply {
            Ok(r) => match r.msg {
                Message::OsdOpReply(rep) => classify(rep, r.data),
                other => Attempt::Failed(
                    0,
                    Error::Protocol(format!("osd.{primary} answered {:?}", other.msg_type())),
                ),
            },
            Err(shoal_net::NetError::Remote { code, message, .. }) => Attempt::Failed(
                0,
                Error::Protocol(format!("osd.{primary} refused ({code}): {message}")),
            ),
            Err(e) => Attempt::Retry(format!("osd.{primary}: {e}")),
        }
    }

    /// Resolves when a map newer than `sent` starts a new interval of `pg`
    /// (Ceph's clients resend on every interval change, not only when the
    /// primary moves): the primary drops the ops of the old interval.
    /// PG `pg`'s placement in `map`, computed once per map.
    fn placement(&self, map: &OsdMap, pg: PgId) -> Arc<Placement> {
        let key = (map.epoch.0, pg);
        let lock = || {
            self.inner
                .placements
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if let Some(p) = lock().by_pg.get(&key) {
            return Arc::clone(p);
        }
        let m = map.pg_to_up_acting(pg).ok();
        let primary = m.as_ref().map_or(-1, |m| m.acting_primary);
        let place = Arc::new(Placement {
            interval: map.pg_interval_key(pg),
            pg_num: map.pool(pg.pool).map(|p| p.pg_num),
            primary,
            addr: map
                .osd(primary)
                .and_then(|i| i.addr.as_deref())
                .and_then(|a| a.parse::<SocketAddr>().ok()),
        });
        let mut cache = lock();
        if map.epoch.0 > cache.newest {
            let newest = map.epoch.0;
            cache.newest = newest;
            cache
                .by_pg
                .retain(|(e, _), _| e.saturating_add(1) >= newest);
        }
        if map.epoch.0.saturating_add(1) >= cache.newest {
            cache.by_pg.insert(key, Arc::clone(&place));
        }
        place
    }

    /// Resolves once a map newer than `sent` starts a new interval of
    /// `pg` (its sets or primary changed, or its pool's `pg_num`: a split),
    /// saying why: the ops sent to it then are sent again.
    pub(crate) async fn pg_changes_interval(&self, pg: PgId, sent: &OsdMap) -> String {
        let mut rx = self.inner.map.clone();
        let before = self.placement(sent, pg);
        loop {
            // Compare with the newest map first: it may have come before
            // this future was first polled.
            let newest = rx.borrow_and_update().clone();
            if let Some(map) = newest
                && map.epoch > sent.epoch
                && {
                    let now = self.placement(&map, pg);
                    now.interval != before.interval || now.pg_num != before.pg_num
                }
            {
                return format!("pg {pg} changed interval in epoch {}", map.epoch.0);
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Stops the client's connections.
    pub async fn shutdown(&self) {
        self.inner.renew.abort();
        self.inner.msgr.shutdown().await;
    }
}

/// What the client's messenger receives: notifies for its watches, and
/// the monitors' updates.
struct Dispatch {
    sink: Arc<UpdateSink>,
    watches: Arc<WatchTable>,
}

impl shoal_net::Dispatcher for Dispatch {
    fn dispatch(&self, incoming: shoal_net::Incoming) {
        if let Some(other) = self.watches.offer(incoming) {
            self.sink.dispatch(other);
        }
    }

    fn connection_closed(&self, peer: &shoal_net::PeerInfo, reason: &str) {
        self.sink.connection_closed(peer, reason);
    }
}

enum Attempt {
    Done(shoal_proto::OsdOpReply, Bytes),
    Failed(usize, Error),
    NewEpoch(u32, String),
    Retry(String),
}

fn classify(rep: shoal_proto::OsdOpReply, data: Bytes) -> Attempt {
    let code = OsdErrorCode::from_u32(rep.code);
    match code {
        OsdErrorCode::Ok => Attempt::Done(rep, data),
        OsdErrorCode::StaleEpoch | OsdErrorCode::WrongPrimary => {
            Attempt::NewEpoch(rep.epoch, format!("{code:?}: {}", rep.message))
        }
        OsdErrorCode::Again | OsdErrorCode::ShuttingDown | OsdErrorCode::NoPool => {
            // NoPool: the OSD may not have the map that created the pool yet.
            Attempt::Retry(format!("{code:?}: {}", rep.message))
        }
        _ => Attempt::Failed(rep.failed_op as usize, Error::from_osd(code, rep.message)),
    }
}

fn concat(parts: &[Bytes]) -> Bytes {
    match parts.iter().filter(|p| !p.is_empty()).count() {
        0 => Bytes::new(),
        1 => parts
            .iter()
            .find(|p| !p.is_empty())
            .cloned()
            .unwrap_or_default(),
        _ => {
            let mut b = BytesMut::with_capacity(parts.iter().map(Bytes::len).sum());
            for p in parts {
                b.extend_from_slice(p);
            }
            b.freeze()
        }
    }
}

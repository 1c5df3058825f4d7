//! [`Osd`]: the daemon. It authenticates to the monitors, boots into the
//! map, follows it, runs one actor per PG it holds, routes every message
//! to its PG, heartbeats its peers, and reports beacons and statistics.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use shoal_maps::{OsdMap, PgId};
use shoal_monclient::{Command, MonClient, OsdCaps, TicketAuth, UpdateSink};
use shoal_net::{Dispatcher, Incoming, Messenger, NetConfig, Secret, Transport};
use shoal_objectstore::ObjectStore;
use shoal_proto::{ErrorReply, Message, OsdErrorCode};
use shoal_types::{EntityName, EntityType};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::ctx::{OsdCounters, OsdCtx, PgConfig};
use crate::pg::{ClientOp, Pg, PgEvent, PgStat};
use crate::shards::Shards;

/// OSDs each OSD heartbeats at least, besides those it shares PGs with.
const HEARTBEAT_MIN_PEERS: usize = 2;

/// How an OSD runs.
#[derive(Debug, Clone)]
pub struct OsdOptions {
    /// Its id.
    pub id: i32,
    /// Its key (the keyring entry of `osd.ID`).
    pub key: Secret,
    /// Where the monitors are.
    pub mon_addrs: Vec<SocketAddr>,
    /// Where to listen (port 0: any free port).
    pub bind: SocketAddr,
    /// Its CRUSH host.
    pub host: String,
    /// Its CRUSH weight if new, 16.16.
    pub weight: u32,
    /// Messenger settings.
    pub net: NetConfig,
    /// PG settings.
    pub pg: PgConfig,
    /// Between heartbeats to each peer.
    pub heartbeat_interval: Duration,
    /// Silence after which a peer is reported failed.
    pub heartbeat_grace: Duration,
    /// Between beacons to the monitors.
    pub beacon_interval: Duration,
    /// Between PG statistics reports.
    pub stats_interval: Duration,
    /// Between performance reports for the manager (none: no reports).
    pub perf_interval: Option<Duration>,
    /// Per monitor command.
    pub mon_timeout: Duration,
    /// Scrub each PG at least this often.
    pub scrub_interval: Duration,
    /// Deep-scrub each PG at least this often.
    pub deep_scrub_interval: Duration,
    /// Between a stray copy's questions to its primary (may it go?).
    pub stray_check_interval: Duration,
    /// Who watches the OSD's acknowledged writes (the simulation's
    /// checkers; `None` in a daemon).
    pub observer: Option<Arc<dyn crate::ctx::Observer>>,
    /// Op shards (`crate::shards`): 1 runs every PG on the runtime the
    /// OSD starts on.
    pub op_shards: usize,
}

/// A running OSD.
#[derive(Debug)]
pub struct Osd {
    inner: Arc<Inner>,
    tasks: Vec<JoinHandle<()>>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) ctx: Arc<OsdCtx>,
    pub(crate) opts: OsdOptions,
    pub(crate) monc: MonClient,
    pub(crate) addr: SocketAddr,
    sink: Arc<UpdateSink>,
    /// The newest map received (ahead of `applied` while one is applied).
    map: watch::Receiver<Option<Arc<OsdMap>>>,
    /// The newest map every PG here has been handed (and split for): what
    /// messages are routed by.
    applied: watch::Sender<Option<Arc<OsdMap>>>,
    pgs: Mutex<BTreeMap<PgId, mpsc::UnboundedSender<PgEvent>>>,
    /// Per connection, messages waiting for a newer map (in arrival order).
    held: Mutex<BTreeMap<u64, VecDeque<Held>>>,
    /// OSDs sharing a PG with us in the current map.
    pub(crate) peers: Mutex<BTreeSet<i32>>,
    stopping: AtomicBool,
    /// The threads PGs run on.
    shards: Shards,
    /// Capabilities parsed, by their text (a client's caps are parsed
    /// once, not on every op).
    caps: Mutex<HashMap<String, Result<Arc<OsdCaps>, String>>>,
    /// Drawn at start: tells the monitors this process from the last one.
    nonce: u64,
    /// The watches of objects whose PGs we are primary of.
    watches: Arc<crate::watch::Watches>,
}

/// Why an OSD could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OsdError {
    /// The listening socket.
    #[error("cannot listen on {addr}: {why}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        why: String,
    },
    /// The store.
    #[error("object store: {0}")]
    Store(String),
    /// The op shards' threads.
    #[error("cannot start the op shard threads: {0}")]
    Shards(String),
}

#[derive(Default)]
struct Route(OnceLock<Weak<Inner>>);

impl Dispatcher for Route {
    fn dispatch(&self, inc: Incoming) {
        match self.0.get().and_then(Weak::upgrade) {
            Some(inner) => inner.dispatch(inc),
            None => {
                if let Some(r) = inc.responder {
                    tokio::spawn(r.error(ErrorReply::SHUTTING_DOWN, "the OSD is starting"));
                }
            }
        }
    }

    fn connection_closed(&self, peer: &shoal_net::PeerInfo, reason: &str) {
        if peer.name.ty() != shoal_types::EntityType::Osd {
            return;
        }
        let (Some(inner), Ok(osd)) = (
            self.0.get().and_then(Weak::upgrade),
            peer.name.id().parse::<i32>(),
        ) else {
            return;
        };
        inner.peer_connection_closed(osd, reason);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Osd {
    /// Starts OSD `opts.id` on `store`, over `transport` (TCP, or an
    /// in-memory network in tests): listens, authenticates, opens the PGs
    /// found in the store, boots into the map and follows it.
    pub async fn start(
        opts: OsdOptions,
        store: Arc<dyn ObjectStore>,
        transport: Arc<dyn Transport>,
    ) -> Result<Osd, OsdError> {
        let me = EntityName::osd(opts.id.max(0) as u32);
        let auth = TicketAuth::new(me.clone(), opts.key.clone());
        let route = Arc::new(Route::default());
        let msgr = Messenger::new(
            me,
            opts.net.clone(),
            transport,
            Arc::new(auth.clone()),
            route.clone(),
        );
        let addr = msgr.bind(opts.bind).await.map_err(|e| OsdError::Bind {
            addr: opts.bind,
            why: e.to_string(),
        })?;
        let shards =
            Shards::start(opts.op_shards, opts.id).map_err(|e| OsdError::Shards(e.to_string()))?;
        let monc = MonClient::new(msgr.clone(), opts.mon_addrs.clone(), opts.mon_timeout);
        let sink = UpdateSink::new();
        let (map, every_map) = monc.subscribe_osdmap_every(Arc::clone(&sink));
        let ctx = Arc::new(OsdCtx {
            whoami: opts.id,
            store,
            msgr,
            cfg: opts.pg.clone(),
            counters: Arc::default(),
            full: Arc::default(),
            stats_changed: tokio::sync::Notify::new(),
            recovery_slots: Arc::new(tokio::sync::Semaphore::new(
                opts.pg.recovery_max_active.max(1),
            )),
            backfill_slots: Arc::new(tokio::sync::Semaphore::new(opts.pg.max_backfills.max(1))),
            scrub_slots: Arc::new(tokio::sync::Semaphore::new(opts.pg.max_scrubs)),
            monc: monc.clone(),
            written_since_check: std::sync::atomic::AtomicU64::new(0),
            space_check: tokio::sync::Notify::new(),
            up_thru_asked: std::sync::Mutex::new(0),
            observer: opts.observer.clone(),
        });
        let inner = Arc::new(Inner {
            ctx,
            opts,
            monc,
            addr,
            sink,
            map,
            applied: watch::Sender::new(None),
            pgs: Mutex::new(BTreeMap::new()),
            held: Mutex::new(BTreeMap::new()),
            peers: Mutex::new(BTreeSet::new()),
            stopping: AtomicBool::new(false),
            shards,
            caps: Mutex::default(),
            nonce: shoal_net::runtime::random_u64().max(1),
            watches: Arc::default(),
        });
        let _ = route.0.set(Arc::downgrade(&inner));
        inner.open_stored_pgs()?;
        // Tickets and service secrets before the map: peers and clients
        // connect as soon as the map says we are up.
        let renew = auth.spawn_renewal(inner.monc.clone(), true);
        inner.wait_for_secrets(&auth).await;
        let mut tasks = vec![renew];
        tasks.push(tokio::spawn(Arc::clone(&inner).follow_map(every_map)));
        tasks.push(tokio::spawn(Arc::clone(&inner).beacons()));
        if let Some(every) = inner.opts.perf_interval {
            tasks.push(tokio::spawn(Arc::clone(&inner).report_perf(every)));
        }
        tasks.push(tokio::spawn(Arc::clone(&inner).heartbeats()));
        tasks.push(tokio::spawn(Arc::clone(&inner).watch_space()));
        tasks.push(tokio::spawn(Arc::clone(&inner).report_stats()));
        tasks.push(tokio::spawn(Arc::clone(&inner).schedule_scrubs()));
        tasks.push(tokio::spawn(Arc::clone(&inner).check_strays()));
        Ok(Osd { inner, tasks })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// Its counters.
    pub fn counters(&self) -> &OsdCounters {
        &self.inner.ctx.counters
    }

    /// The statistics of the PGs it is primary of.
    pub async fn pg_stats(&self) -> Vec<PgStat> {
        self.inner.pg_stats().await
    }

    /// Dies at once, as a killed process: every task of the daemon stops
    /// where it is, nothing is flushed and nobody is told. (In a process
    /// the kernel would also close its sockets: the caller cuts it off the
    /// network first, and gives a restart the store as a crash left it.)
    pub fn crash(self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
        for t in &self.tasks {
            t.abort();
        }
        let pgs = std::mem::take(&mut *lock(&self.inner.pgs));
        for tx in pgs.into_values() {
            let _ = tx.send(PgEvent::Crash);
        }
        // Whatever still runs on the shard threads (copies, queries) dies too.
        self.inner.shards.stop();
    }

    /// Stops: refuses new ops, lets every PG answer what it has queued,
    /// flushes the store and closes the connections.
    pub async fn stop(self) {
        let inner = self.inner;
        inner.stopping.store(true, Ordering::SeqCst);
        for t in &self.tasks {
            t.abort();
        }
        let pgs: Vec<_> = std::mem::take(&mut *lock(&inner.pgs)).into_iter().collect();
        for (_, tx) in pgs {
            let (done, wait) = oneshot::channel();
            if tx.send(PgEvent::Stop(done)).is_ok() {
                let _ = wait.await;
            }
        }
        let store = Arc::clone(&inner.ctx.store);
        let _ = shoal_net::runtime::offload(move || store.flush()).await;
        // Tell the monitors we are going, so peers and clients move on now
        // rather than after the heartbeat grace (Ceph's mark-me-down).
        let me = inner.opts.id;
        let going = Command::OsdFailure {
            target: me,
            reporter: me,
            immediate: true,
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), inner.monc.command(&going)).await;
        inner.ctx.msgr.shutdown().await;
        inner.shards.stop();
    }
}

/// Most distinct capability texts kept parsed.
const CAPS_CACHED_MAX: usize = 1024;

impl Inner {
    /// The parsed form of capability text `text`.
    fn caps(&self, text: &str) -> Result<Arc<OsdCaps>, String> {
        let mut cache = lock(&self.caps);
        if let Some(c) = cache.get(text) {
            return c.clone();
        }
        let parsed = OsdCaps::parse(text).map(Arc::new).map_err(|e| e.message);
        if cache.len() >= CAPS_CACHED_MAX {
            cache.clear();
        }
        cache.insert(text.to_string(), parsed.clone());
        parsed
    }

    /// The map messages are routed by: the newest every PG here was handed.
    pub(crate) fn current_map(&self) -> Option<Arc<OsdMap>> {
        self.applied.borrow().clone()
    }

    /// The newest map received.
    fn received_map(&self) -> Option<Arc<OsdMap>> {
        self.map.borrow().clone()
    }

    async fn wait_for_secrets(&self, auth: &TicketAuth) {
        while auth.ticket_expires_ms().is_none() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn open_stored_pgs(&self) -> Result<(), OsdError> {
        let colls = self
            .ctx
            .store
            .list_collections()
            .map_err(|e| OsdError::Store(e.to_string()))?;
        for c in colls {
            let pg = PgId {
                pool: c.pool,
                seed: c.seed,
            };
            self.pg(pg)?;
        }
        Ok(())
    }

    /// The PG's actor, started (and its collection created) if needed.
    fn pg(&self, pg: PgId) -> Result<mpsc::UnboundedSender<PgEvent>, OsdError> {
        let mut pgs = lock(&self.pgs);
        if let Some(tx) = pgs.get(&pg)
            && !tx.is_closed()
        {
            return Ok(tx.clone());
        }
        let map = self.current_map();
        let coll = self.open_collection(map.as_deref(), pg)?;
        let tx = Pg::spawn(pg, coll, Arc::clone(&self.ctx), &self.shards)
            .map_err(|e| OsdError::Store(e.to_string()))?;
        if let Some(map) = map {
            let _ = tx.send(PgEvent::Map(map));
        }
        pgs.insert(pg, tx.clone());
        Ok(tx)
    }

    /// The collection PG `pg` keeps here: the one it has (a replicated
    /// PG's, or the shard of an erasure-coded one this OSD holds), else for
    /// an erasure-coded pool that of our position in the map.
    fn open_collection(
        &self,
        map: Option<&OsdMap>,
        pg: PgId,
    ) -> Result<shoal_objectstore::CollectionId, OsdError> {
        let ec = map
            .and_then(|m| m.pool(pg.pool))
            .is_some_and(|p| p.is_erasure());
        let plain = crate::object::collection(pg);
        let store = &self.ctx.store;
        if store.collection_exists(&plain).unwrap_or(false) && !ec {
            return Ok(plain);
        }
        let held: Vec<_> = store
            .list_collections()
            .map_err(|e| OsdError::Store(e.to_string()))?
            .into_iter()
            .filter(|c| c.pool == pg.pool && c.seed == pg.seed)
            .collect();
        // Erasure coded: several shards may be held (those of positions
        // left are strays); the PG's own is our position's, else the one
        // it holds whose log is newest.
        let mine = map
            .filter(|_| ec)
            .and_then(|m| pg_collection(m, pg, self.opts.id));
        let held = match mine.filter(|c| held.contains(c)) {
            Some(c) => Some(c),
            None => held
                .iter()
                .copied()
                .max_by_key(|c| crate::log::PgLog::load_info(store.as_ref(), *c)),
        };
        match (held, map) {
            (Some(c), _) => Ok(c),
            (None, Some(map)) if ec => pg_collection(map, pg, self.opts.id).ok_or_else(|| {
                OsdError::Store(format!("osd.{} holds no shard of pg {pg}", self.opts.id))
            }),
            _ => Ok(plain),
        }
    }

    /// Boots, then applies every new map: starts the PGs it gives us and
    /// boots again if the map says we are down while we run.
    /// Hands every map, epoch by epoch, to the PGs (a PG that skipped an
    /// epoch could miss an interval), and boots when a map says we are not
    /// up here.
    async fn follow_map(self: Arc<Self>, mut every: mpsc::UnboundedReceiver<Arc<OsdMap>>) {
        let mut booted_at = 0u32;
        let me = self.opts.id;
        // This process boots at least once: a map that still has us up is
        // our previous process's (the monitors mark it down, then us up).
        while let Some(map) = every.recv().await {
            self.apply_map(&map).await;
            let listed = map.osd(me).and_then(|i| i.addr.clone());
            let up_here = map.is_up(me) && listed.as_deref() == Some(&self.addr.to_string());
            // Boot once per map that says so, not for each map queued behind it.
            let newest = self.received_map().map_or(0, |m| m.epoch.0);
            let first = booted_at == 0;
            if (first || !up_here) && map.epoch.0 > booted_at && map.epoch.0 >= newest {
                booted_at = map.epoch.0;
                self.boot().await;
            }
        }
    }

    async fn boot(&self) {
        let cmd = Command::OsdBoot {
            id: self.opts.id,
            addr: self.addr.to_string(),
            host: self.opts.host.clone(),
            weight: self.opts.weight,
            nonce: self.nonce,
        };
        loop {
            match self.monc.command(&cmd).await {
                Ok(_) => {
                    tracing::info!(osd = self.opts.id, addr = %self.addr, "booted");
                    return;
                }
                Err(e) => {
                    tracing::warn!(osd = self.opts.id, "boot failed, retrying: {e}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    async fn apply_map(self: &Arc<Self>, map: &Arc<OsdMap>) {
        let me = self.opts.id;
        let weights = map.crush_weights();
        let mut ws = shoal_crush::Workspace::default();
        let mut mine = Vec::new();
        let mut peers = BTreeSet::new();
        for (pool_id, pool) in map.pools().iter() {
            for seed in 0..pool.pg_num {
                let pg = PgId {
                    pool: *pool_id,
                    seed,
                };
                let Ok(m) = map.pg_to_up_acting_with(pg, &weights, &mut ws) else {
                    continue;
                };
                if m.up.contains(&me) || m.acting.contains(&me) {
                    mine.push(pg);
                    peers.extend(m.up.iter().chain(&m.acting).copied());
                }
            }
        }
        peers.remove(&me);
        peers.retain(|p| *p >= 0 && *p != shoal_maps::ITEM_NONE);
        // Like Ceph's osd_heartbeat_min_peers: also watch the next up OSDs
        // by id, so an OSD that holds no PG (marked out, say) is still
        // watched and reported when it dies.
        let up: Vec<i32> = map
            .osds()
            .filter(|(id, _)| *id != me && map.is_up(*id))
            .map(|(id, _)| id)
            .collect();
        let after = up.iter().position(|id| *id > me).unwrap_or(0);
        for id in up
            .iter()
            .cycle()
            .skip(after)
            .take(up.len().min(HEARTBEAT_MIN_PEERS))
        {
            peers.insert(*id);
        }
        *lock(&self.peers) = peers;
        // The PGs open here get the map first. Where it changes a pool's
        // `pg_num` (and on the first map: a copy may have missed a split
        // while the OSD was down) they split first, and the OSD waits for
        // them: their children must be in the store before anything of
        // this map is routed, or a message for a child would open it empty.
        let before = self.current_map();
        let resized = |pool: u64| {
            let count = |m: &OsdMap| m.pool(pool).map(|p| p.pg_num);
            before.as_deref().is_none_or(|b| count(b) != count(map))
        };
        let pgs: Vec<(PgId, mpsc::UnboundedSender<PgEvent>)> = lock(&self.pgs)
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        // A pool absent from this map may exist in a newer one: a peer that
        // saw the newer map already made us open its PG (route). Only a
        // pool the newest map lacks too is gone.
        let newest = self.received_map();
        let mut splits = Vec::new();
        for (pg, tx) in pgs {
            let gone = |m: &OsdMap| m.pool(pg.pool).is_none();
            if gone(map) && newest.as_deref().is_none_or(gone) {
                let _ = tx.send(PgEvent::Map(Arc::clone(map)));
                self.remove_pg(pg, tx);
            } else if resized(pg.pool) {
                let (done, wait) = oneshot::channel();
                let map = Arc::clone(map);
                if tx.send(PgEvent::MapSplit { map, done }).is_ok() {
                    splits.push(wait);
                }
            } else {
                let _ = tx.send(PgEvent::Map(Arc::clone(map)));
            }
        }
        let mut children = Vec::new();
        for wait in splits {
            children.extend(wait.await.unwrap_or_default());
        }
        self.applied.send_replace(Some(Arc::clone(map)));
        // Then the PGs new here, split children among them: opened with
        // this map.
        for pg in mine.into_iter().chain(children) {
            if let Err(e) = self.pg(pg) {
                tracing::error!("{e}");
            }
        }
    }

    /// The pool is gone: stop the PG and delete its objects.
    fn remove_pg(self: &Arc<Self>, pg: PgId, tx: mpsc::UnboundedSender<PgEvent>) {
        lock(&self.pgs).remove(&pg);
        let inner = Arc::clone(self);
        tokio::spawn(async move {
            let (done, wait) = oneshot::channel();
            if tx.send(PgEvent::Stop(done)).is_ok() {
                let _ = wait.await;
            }
            // Under the PG table's lock, so no new actor for the PG opens
            // the collection while it goes; one that opened it meanwhile
            // (the pool is back in a newer map) keeps it.
            let pgs = lock(&inner.pgs);
            if pgs.contains_key(&pg) {
                return;
            }
            let r = shoal_net::runtime::blocking(|| {
                crate::object::remove_pg_collections(inner.ctx.store.as_ref(), pg)
            });
            drop(pgs);
            if let Err(e) = r {
                tracing::warn!(%pg, "removing the PG of a deleted pool: {e}");
            }
        });
    }

    async fn beacons(self: Arc<Self>) {
        loop {
            tokio::time::sleep(self.opts.beacon_interval).await;
            let cmd = Command::OsdBeacon { id: self.opts.id };
            if let Err(e) = self.monc.command(&cmd).await {
                tracing::warn!("beacon: {e}");
            }
        }
    }

    /// Asks every PG, now and then, whether a scrub is due.
    async fn schedule_scrubs(self: Arc<Self>) {
        let every = self.opts.scrub_interval.max(Duration::from_millis(100));
        let deep = self
            .opts
            .deep_scrub_interval
            .max(Duration::from_millis(100));
        let check =
            (every.min(deep) / 10).clamp(Duration::from_millis(50), Duration::from_secs(60));
        loop {
            tokio::time::sleep(check).await;
            let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
            let tick = || PgEvent::ScrubTick {
                now_ms: shoal_net::now_ms(),
                every_ms: ms(every),
                deep_every_ms: ms(deep),
            };
            let pgs: Vec<_> = lock(&self.pgs).values().cloned().collect();
            for tx in pgs {
                let _ = tx.send(tick());
            }
        }
    }

    /// Now and then, asks every PG that is a stray here to ask its
    /// primary whether its copy may go (`pg/engine/purge.rs`), and forgets
    /// the PGs whose copy went.
    async fn check_strays(self: Arc<Self>) {
        let every = self
            .opts
            .stray_check_interval
            .max(Duration::from_millis(100));
        loop {
            tokio::time::sleep(every).await;
            let pgs: Vec<_> = {
                let mut pgs = lock(&self.pgs);
                pgs.retain(|_, tx| !tx.is_closed());
                pgs.values().cloned().collect()
            };
            for tx in pgs {
                let _ = tx.send(PgEvent::StrayTick);
            }
        }
    }

    /// PGs this OSD holds.
    pub(crate) fn pg_count(&self) -> usize {
        lock(&self.pgs)
            .values()
            .filter(|tx| !tx.is_closed())
            .count()
    }

    pub(crate) async fn pg_stats(&self) -> Vec<PgStat> {
        let pgs: Vec<_> = lock(&self.pgs).values().cloned().collect();
        let mut out = Vec::new();
        for tx in pgs {
            let (stx, srx) = oneshot::channel();
            if tx.send(PgEvent::Stats(stx)).is_ok()
                && let Ok(Some(s)) = srx.await
            {
                out.push(s);
            }
        }
        out.sort_by_key(|s| s.pgid);
        out
    }

    /// Routes one message to its PG (waiting for the sender's map epoch first).
    fn dispatch(self: Arc<Self>, inc: Incoming) {
        let Some(inc) = self.sink.offer(inc) else {
            return;
        };
        let Some(responder) = inc.responder else {
            return;
        };
        let peer = inc.conn.peer().clone();
        let from_osd = peer.name.ty() == EntityType::Osd;
        let perf = &self.ctx.counters.perf;
        let started = std::time::Instant::now();
        let internal = |stats: &Arc<crate::ctx::OpStats>| {
            OsdCounters::add(&stats.bytes, inc.data.len() as u64);
            Some(Arc::clone(stats) as Arc<dyn shoal_net::ReplyHook>)
        };
        let kind = match &inc.msg {
            Message::OsdOp(m) => {
                let write = crate::exec::is_mutating(&m.ops);
                let hook = perf.client_op(m.pool, write, inc.data.len());
                Some(Arc::new(hook) as Arc<dyn shoal_net::ReplyHook>)
            }
            Message::RepOp(_) | Message::EcRead(_) if from_osd => internal(&perf.subop),
            Message::PgPush(_) | Message::PgPushBatch(_) | Message::PgPull(_) if from_osd => {
                internal(&perf.recovery)
            }
            _ => None,
        };
        let responder = match kind {
            Some(hook) => responder.observe(hook, started),
            None => responder,
        };
        let (pool, seed, epoch) = match &inc.msg {
            Message::OsdOp(m) => (m.pool, m.pg_seed, m.epoch),
            Message::PgList(m) => (m.pool, m.pg_seed, m.epoch),
            Message::RepOp(m) if from_osd => (m.pool, m.pg_seed, m.epoch),
            Message::PgQuery(m) if from_osd => (m.pool, m.pg_seed, m.epoch),
            Message::PgInfo(m) if from_osd => (m.pool, m.pg_seed, m.epoch),
            Message::PgPush(m) if from_osd => (m.pool, m.pg_seed, m.epoch),
            Message::PgPushBatch(m) if from_osd => (m.pool, m.pg_seed, m.epoch),
            Message::PgStray(m) if from_osd => (m.pool, m.pg_seed, m.epoch),
            Message::PgPull(m) if from_osd => (m.pool, m.pg_seed, m.epoch),
            Message::PgScrub(m) if from_osd => (m.pool, m.pg_seed, m.epoch),
            Message::EcRead(m) if from_osd => (m.pool, m.pg_seed, m.epoch),
            Message::PgCommand(m) => (m.pool, m.pg_seed, m.epoch),
            Message::OsdWatch(m) => (m.pool, m.pg_seed, m.epoch),
            Message::OsdNotify(m) => (m.pool, m.pg_seed, m.epoch),
            Message::RepOp(_)
            | Message::PgQuery(_)
            | Message::PgInfo(_)
            | Message::PgPush(_)
            | Message::PgPushBatch(_)
            | Message::PgStray(_)
            | Message::PgPull(_)
            | Message::EcRead(_)
            | Message::PgScrub(_) => {
                OsdCounters::add(&self.ctx.counters.refused, 1);
                let why = format!("{} may not send OSD-internal messages", peer.name);
                tokio::spawn(responder.error(OsdErrorCode::PermissionDenied as u32, why));
                return;
            }
            other => {
                OsdCounters::add(&self.ctx.counters.refused, 1);
                let why = format!("an OSD does not handle {:?}", other.msg_type());
                tokio::spawn(responder.error(ErrorReply::UNSUPPORTED, why));
                return;
            }
        };
        let routed = Routed {
            msg: inc.msg,
            data: inc.data,
            data_crc: inc.data_crc,
            peer,
            responder,
            from_osd,
            conn: inc.conn.clone(),
        };
        let have = self.current_map().map_or(0, |m| m.epoch.0);
        let conn = inc.conn.id();
        let mut held = lock(&self.held);
        let queue = held.get_mut(&conn);
        if queue.is_none() && epoch <= have {
            drop(held);
            self.route(pool, seed, routed);
            return;
        }
        // The sender has a newer map: act on it once we have it too. Later
        // messages of the connection wait behind it, so a PG sees each
        // sender's messages in the order sent (a replica must apply
        // changes in order).
        let m = Held {
            epoch,
            pool,
            seed,
            routed,
            until: tokio::time::Instant::now() + MAP_WAIT,
        };
        match queue {
            Some(q) => q.push_back(m),
            None => {
                held.insert(conn, VecDeque::from([m]));
                drop(held);
                tokio::spawn(self.release_held(conn));
            }
        }
    }

    /// Routes the messages held for connection `conn`, in order, as the
    /// maps they need arrive (or their wait runs out).
    async fn release_held(self: Arc<Self>, conn: u64) {
        let mut rx = self.applied.subscribe();
        loop {
            let (ready, wait) = {
                let mut held = lock(&self.held);
                let Some(q) = held.get_mut(&conn) else { return };
                let have = self.current_map().map_or(0, |m| m.epoch.0);
                let now = tokio::time::Instant::now();
                match q.front() {
                    None => {
                        held.remove(&conn);
                        return;
                    }
                    Some(f) if f.epoch <= have || f.until <= now => (q.pop_front(), None),
                    Some(f) => (None, Some((f.epoch, f.until))),
                }
            };
            if let Some(m) = ready {
                self.route(m.pool, m.seed, m.routed);
                continue;
            }
            if let Some((epoch, until)) = wait {
                let newer = rx.wait_for(|m| m.as_ref().is_some_and(|m| m.epoch.0 >= epoch));
                let _ = tokio::time::timeout_at(until, newer).await;
            }
        }
    }
}

/// How long a message from a newer map waits for it.
const MAP_WAIT: Duration = Duration::from_secs(10);

/// A message waiting for the map its sender had.
#[derive(Debug)]
struct Held {
    epoch: u32,
    pool: u64,
    seed: u32,
    routed: Routed,
    until: tokio::time::Instant,
}

/// A message on its way to a PG.
#[derive(Debug)]
struct Routed {
    msg: Message,
    data: bytes::Bytes,
    data_crc: u32,
    peer: shoal_net::PeerInfo,
    responder: shoal_net::Responder,
    from_osd: bool,
    /// The connection it came on (a watch is reached on it).
    conn: shoal_net::Connection,
}

impl Inner {
    fn route(&self, pool: u64, seed: u32, r: Routed) {
        let epoch = self.current_map().map_or(0, |m| m.epoch.0);
        let refuse = |r: Routed, code: OsdErrorCode, message: String| {
            OsdCounters::add(&self.ctx.counters.refused, 1);
            tokio::spawn(async move {
                let reply = r.msg.osd_refusal(code as u32, message, epoch);
                let _ = r.responder.reply(reply, bytes::Bytes::new()).await;
            });
        };
        if self.stopping.load(Ordering::SeqCst) {
            return refuse(r, OsdErrorCode::ShuttingDown, "the OSD is stopping".into());
        }
        let Some(map) = self.current_map() else {
            return refuse(r, OsdErrorCode::Again, "the OSD has no map yet".into());
        };
        let Some(p) = map.pool(pool) else {
            let m = format!("pool {pool} does not exist in epoch {}", map.epoch.0);
            return refuse(r, OsdErrorCode::NoPool, m);
        };
        if let (true, Message::OsdOp(op)) = (p.is_erasure(), &r.msg)
            && let Some(why) = ec_refusal(&p.name, &op.ops)
        {
            return refuse(r, OsdErrorCode::NotSupported, why);
        }
        // A client op's PG is the OSD's own placement of the object.
        let pgid = match &r.msg {
            Message::OsdOp(op) => p.object_pg(&op.oid, &op.nspace),
            Message::OsdWatch(m) => p.object_pg(&m.oid, &m.nspace),
            Message::OsdNotify(m) => p.object_pg(&m.oid, &m.nspace),
            _ if seed < p.pg_num => PgId { pool, seed },
            _ => {
                let m = format!("pg {pool}.{seed:x} does not exist");
                return refuse(r, OsdErrorCode::InvalidArgument, m);
            }
        };
        if !r.from_osd {
            let write = match &r.msg {
                Message::OsdOp(op) => crate::exec::is_mutating(&op.ops),
                // Repairs change objects: PG commands need write access.
                Message::PgCommand(_) => true,
                _ => false,
            };
            let allowed = self
                .caps(r.peer.caps.as_deref().unwrap_or_default())
                .and_then(|c| {
                    c.check(&r.peer.name.to_string(), &p.name, write)
                        .map_err(|e| e.message)
                });
            if let Err(e) = allowed {
                return refuse(r, OsdErrorCode::PermissionDenied, e);
            }
        }
        if matches!(r.msg, Message::OsdWatch(_) | Message::OsdNotify(_)) {
            let primary = map.pg_to_up_acting(pgid).map_or(-1, |m| m.acting_primary);
            if primary != self.opts.id {
                let m = format!(
                    "osd.{} is not the primary of pg {pgid} in epoch {}",
                    self.opts.id, map.epoch.0
                );
                return refuse(r, OsdErrorCode::WrongPrimary, m);
            }
            return self.watch_request(r, epoch);
        }
        // A primary searching for unfound objects asks OSDs that may hold
        // no copy of the PG: they say so without opening one.
        if let Message::PgQuery(q) = &r.msg
            && lock(&self.pgs).get(&pgid).is_none_or(|tx| tx.is_closed())
            && !self
                .ctx
                .store
                .collection_exists(
                    &pg_collection(&map, pgid, self.opts.id)
                        .unwrap_or_else(|| crate::object::collection(pgid)),
                )
                .unwrap_or(true)
        {
            let reply = shoal_proto::PgInfo {
                pool: pgid.pool,
                pg_seed: pgid.seed,
                epoch,
                info: crate::log::PgInfoData::default().encode(),
                interval_start: q.interval_start,
                ..Default::default()
            };
            tokio::spawn(async move {
                let _ = r.responder.reply(reply, bytes::Bytes::new()).await;
            });
            return;
        }
        // A stray asks its PG's primary whether its copy may go: a PG we
        // do not run here is not ours to judge (and no actor opens for it).
        if let Message::PgStray(_) = &r.msg {
            let tx = lock(&self.pgs)
                .get(&pgid)
                .filter(|tx| !tx.is_closed())
                .cloned();
            let Some(tx) = tx else {
                let m = format!("osd.{} runs no copy of pg {pgid}", self.opts.id);
                return refuse(r, OsdErrorCode::WrongPrimary, m);
            };
            let Message::PgStray(msg) = r.msg else { return };
            let from = r.peer.name.id().parse::<i32>().unwrap_or(-1);
            let _ = tx.send(PgEvent::StrayAsks {
                from,
                msg,
                responder: r.responder,
            });
            return;
        }
        let tx = if r.from_osd {
            // A peer may make us a member of a PG we have not seen yet.
            match self.pg(pgid) {
                Ok(tx) => tx,
                Err(e) => return refuse(r, OsdErrorCode::Io, e.to_string()),
            }
        } else {
            match lock(&self.pgs).get(&pgid).filter(|tx| !tx.is_closed()) {
                Some(tx) => tx.clone(),
                None => {
                    let m = format!(
                        "osd.{} holds no copy of pg {pgid} in epoch {}",
                        self.opts.id, map.epoch.0
                    );
                    return refuse(r, OsdErrorCode::WrongPrimary, m);
                }
            }
        };
        let Routed {
            msg,
            data,
            data_crc,
            peer,
            responder,
            from_osd,
            ..
        } = r;
        let ev = match msg {
            Message::OsdOp(msg) => PgEvent::Client(ClientOp {
                msg,
                data,
                data_crc,
                peer,
                responder,
            }),
            Message::PgList(msg) => PgEvent::List {
                from_osd,
                msg,
                responder,
            },
            Message::RepOp(msg) => PgEvent::Rep {
                msg,
                data,
                responder,
            },
            Message::PgQuery(msg) => PgEvent::Query { msg, responder },
            Message::PgInfo(msg) => PgEvent::Activate { msg, responder },
            Message::PgPush(msg) => PgEvent::Push {
                msg,
                data,
                responder,
            },
            Message::PgPushBatch(msg) => PgEvent::PushBatch {
                msg,
                data,
                responder,
            },
            Message::PgPull(msg) => PgEvent::Pull { msg, responder },
            Message::PgScrub(msg) => PgEvent::Scrub { msg, responder },
            Message::EcRead(msg) => PgEvent::EcRead { msg, responder },
            Message::PgCommand(msg) => PgEvent::Command { msg, responder },
            _ => return,
        };
        let _ = tx.send(ev);
    }
}

impl Inner {
    /// Answers a watch request or delivers a notify (we are the primary).
    fn watch_request(&self, r: Routed, epoch: u32) {
        let watches = Arc::clone(&self.watches);
        tokio::spawn(async move {
            let Routed {
                msg,
                data,
                peer,
                responder,
                conn,
                ..
            } = r;
            let reply: Message = match msg {
                Message::OsdWatch(m) => match watches.handle(&m, &peer, &conn) {
                    Ok(watchers) => shoal_proto::OsdWatchReply {
                        epoch,
                        watchers,
                        ..Default::default()
                    }
                    .into(),
                    Err((code, message)) => shoal_proto::OsdWatchReply {
                        code: code as u32,
                        message,
                        epoch,
                        ..Default::default()
                    }
                    .into(),
                },
                Message::OsdNotify(m) => {
                    let (reply, data) = watches.notify(&m, &peer, data, epoch).await;
                    let _ = responder.reply(reply, data).await;
                    return;
                }
                _ => return,
            };
            let _ = responder.reply(reply, bytes::Bytes::new()).await;
        });
    }
}

/// Why a client op on an erasure-coded pool is refused, if it is: omap
/// never lives in an EC pool (as in Ceph).
fn ec_refusal(pool: &str, ops: &[shoal_proto::OsdSubOp]) -> Option<String> {
    let omap = ops
        .iter()
        .any(|o| shoal_proto::OpCode::from_u32(o.code).is_some_and(shoal_proto::OpCode::is_omap));
    omap.then(|| {
        format!(
            "omap is not supported on erasure-coded pool {pool}: keep omap (metadata) \
             in a replicated pool"
        )
    })
}

/// Where this OSD keeps its copy of `pg`: the PG's collection, or for an
/// erasure-coded pool that of the shard at our position in the acting set
/// (or, outside it, the up set or CRUSH's answer); `None` if we hold no shard.
pub fn pg_collection(map: &OsdMap, pg: PgId, me: i32) -> Option<shoal_objectstore::CollectionId> {
    let pool = map.pool(pg.pool)?;
    if !pool.is_erasure() {
        return Some(crate::object::collection(pg));
    }
    let m = map.pg_to_up_acting(pg).ok()?;
    // Down, we are a hole in the up and acting sets; CRUSH still names us.
    let pos = [&m.acting, &m.up, &m.raw]
        .into_iter()
        .find_map(|set| set.iter().position(|o| *o == me))?;
    let shard = u8::try_from(pos).ok()?;
    Some(shoal_objectstore::CollectionId::shard(
        pg.pool, pg.seed, shard,
    ))
}

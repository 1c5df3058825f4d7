//! One placement group on this OSD: an actor task that owns the PG's log
//! and state and handles every event for the PG in order (client ops,
//! replication, peering, map changes). Ops of one PG are therefore ordered
//! without locks, while different PGs run in parallel.
//!
//! States, as in Ceph: a primary starts each interval `peering` (gathering
//! the members' logs), recovers members that lack changes, then is
//! `active`; with fewer than `min_size` acting members it stays `peered`
//! without serving I/O. A replica waits for the primary's activation.

mod peering;
mod primary;
mod replica;
mod scrub;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use shoal_maps::{OsdMap, PgId, Pool};
use shoal_net::{Connection, PeerInfo, Responder};
use shoal_objectstore::{CollectionId, Transaction};
use shoal_proto::{OsdOp, PgCommand, PgInfo, PgList, PgPull, PgPush, PgQuery, PgScrub, RepOp};
use tokio::sync::{mpsc, oneshot};

use crate::ctx::OsdCtx;
use crate::log::{LogEntry, PgInfoData, PgLog, ReqId, Version};
use crate::object::{collection, pg_meta_key};

pub use peering::{MemberLog, RecoveryPlan, RecoveryProgress, plan_recovery};

/// Most omap entries read from a PG's meta object at once (its log and dups).
pub(crate) const OMAP_ALL: usize = 1 << 24;

/// A client op routed to its PG.
#[derive(Debug)]
pub struct ClientOp {
    /// The op.
    pub msg: OsdOp,
    /// Its data part.
    pub data: Bytes,
    /// Who sent it.
    pub peer: PeerInfo,
    /// Where the answer goes.
    pub responder: Responder,
}

/// Everything a PG actor reacts to.
#[derive(Debug)]
pub enum PgEvent {
    /// A new OSD map.
    Map(Arc<OsdMap>),
    /// A client op (this OSD should be primary).
    Client(ClientOp),
    /// A replicated transaction from the primary.
    Rep {
        /// The message.
        msg: RepOp,
        /// Its data part.
        data: Bytes,
        /// Where the ack goes.
        responder: Responder,
    },
    /// A replica acked (or failed) a replicated transaction.
    RepAcked {
        /// The change.
        version: Version,
        /// The replica.
        from: i32,
        /// The outcome: the replica refused (with its code), or it could
        /// not be reached (no code: a map change will follow).
        result: Result<(), (Option<shoal_proto::OsdErrorCode>, String)>,
    },
    /// The local store made a change durable (or failed).
    LocalCommitted {
        /// The change.
        version: Version,
        /// The outcome.
        result: Result<(), String>,
    },
    /// The primary asks for our info and log.
    Query {
        /// The message.
        msg: PgQuery,
        /// Where the answer goes.
        responder: Responder,
    },
    /// A member answered our query.
    PeerInfo {
        /// The member.
        from: i32,
        /// The interval the query was for.
        interval_start: u32,
        /// Its info and log, or why it could not answer.
        result: Result<MemberLog, String>,
    },
    /// The primary activates us with the authoritative log.
    Activate {
        /// The message.
        msg: PgInfo,
        /// Where the ack goes.
        responder: Responder,
    },
    /// Recovery: an object pushed by the primary.
    Push {
        /// The message.
        msg: PgPush,
        /// The object's data.
        data: Bytes,
        /// Where the ack goes.
        responder: Responder,
    },
    /// Recovery: the primary wants our copy of an object.
    Pull {
        /// The message.
        msg: PgPull,
        /// Where the object goes.
        responder: Responder,
    },
    /// Recovery finished for an interval.
    Recovered {
        /// The interval.
        interval_start: u32,
        /// The authoritative log now held by every acting member, or why not.
        result: Result<(PgInfoData, Vec<LogEntry>), String>,
    },
    /// A listing page.
    List {
        /// Asked by a peer OSD (recovery may list any member's copy).
        from_osd: bool,
        /// The message.
        msg: PgList,
        /// Where the page goes.
        responder: Responder,
    },
    /// Scrub the next chunk (sent by the PG to itself).
    ScrubStep,
    /// Start a scrub if one is due.
    ScrubTick {
        /// Now, ms since the Unix epoch.
        now_ms: u64,
        /// Scrub at least this often.
        every_ms: u64,
        /// Deep-scrub at least this often.
        deep_every_ms: u64,
    },
    /// An administrative command (scrub, deep-scrub, repair, query).
    Command {
        /// The message.
        msg: PgCommand,
        /// Where the answer goes.
        responder: Responder,
    },
    /// Scrub: the primary wants our summaries of a key range.
    Scrub {
        /// The message.
        msg: PgScrub,
        /// Where the summaries go.
        responder: Responder,
    },
    /// Statistics for the monitors (primaries answer `Some`).
    Stats(oneshot::Sender<Option<PgStat>>),
    /// Stop after answering what is queued.
    Stop(oneshot::Sender<()>),
}

/// A PG's statistics as its primary sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgStat {
    /// The PG.
    pub pgid: PgId,
    /// Ceph-style state (`active+clean`).
    pub state: String,
    /// Objects.
    pub objects: u64,
    /// Logical bytes.
    pub bytes: u64,
    /// Newest change.
    pub version: Version,
    /// Up set.
    pub up: Vec<i32>,
    /// Acting set.
    pub acting: Vec<i32>,
    /// Log entries held.
    pub log_size: u64,
    /// Objects the last scrub found inconsistent (and repair could not fix).
    pub inconsistent: Vec<String>,
    /// Object copies recovery still has to make.
    pub recovery_left: u64,
    /// Object copies recovery makes per second.
    pub recovery_per_s: u64,
}

/// Where a PG is in its interval.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Not a member of the acting set (or no map yet).
    Stray,
    /// Primary, gathering members' logs.
    Peering,
    /// Primary, bringing members up to the authoritative log.
    Recovering,
    /// Primary with fewer than `min_size` acting members: no I/O.
    Peered,
    /// Primary, serving I/O.
    Active,
    /// Replica, waiting for the primary's activation.
    ReplicaWaiting,
    /// Replica of an active PG.
    ReplicaActive,
}

/// A change being replicated, answered once durable everywhere.
#[derive(Debug)]
struct InFlight {
    reqid: Option<ReqId>,
    waiting: Vec<i32>,
    local_done: bool,
    reply: shoal_proto::OsdOpReply,
    data: Bytes,
    responders: Vec<Responder>,
}

/// The PG actor.
pub struct Pg {
    id: PgId,
    coll: CollectionId,
    ctx: Arc<OsdCtx>,
    events: mpsc::UnboundedSender<PgEvent>,
    map: Option<Arc<OsdMap>>,
    pool: Option<Pool>,
    up: Vec<i32>,
    acting: Vec<i32>,
    primary: i32,
    prior: Vec<i32>,
    interval_start: u32,
    state: State,
    log: PgLog,
    waiting: VecDeque<ClientOp>,
    inflight: BTreeMap<Version, InFlight>,
    inflight_reqids: HashMap<ReqId, Version>,
    peer_logs: BTreeMap<i32, MemberLog>,
    peers_pending: Vec<i32>,
    conns: HashMap<i32, Connection>,
    scrub: Option<scrub::ScrubJob>,
    scrub_record: scrub::ScrubRecord,
    recovery: Option<Arc<RecoveryProgress>>,
}

impl std::fmt::Debug for Pg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pg {} ({:?})", self.id, self.state)
    }
}

/// Why a PG could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("pg {pg}: {why}")]
pub struct PgOpenError {
    pg: PgId,
    why: String,
}

impl Pg {
    /// Opens (creating its collection if needed) PG `id` and starts its
    /// actor; returns the actor's event queue.
    pub fn spawn(
        id: PgId,
        ctx: Arc<OsdCtx>,
    ) -> Result<mpsc::UnboundedSender<PgEvent>, PgOpenError> {
        let coll = collection(id);
        let err = |why: String| PgOpenError { pg: id, why };
        let store = &ctx.store;
        let mut scrub_record = scrub::ScrubRecord::default();
        let log = if store
            .collection_exists(&coll)
            .map_err(|e| err(e.to_string()))?
        {
            let omap: BTreeMap<Bytes, Bytes> = store
                .omap_range(
                    &coll,
                    &pg_meta_key(),
                    Bound::Unbounded,
                    Bound::Unbounded,
                    OMAP_ALL,
                )
                .map_err(|e| err(e.to_string()))?
                .into_iter()
                .collect();
            if let Some(b) = omap.get(scrub::SCRUB_KEY) {
                scrub_record = scrub::ScrubRecord::decode(b);
            }
            PgLog::load(&omap).map_err(|e| err(e.to_string()))?
        } else {
            let log = PgLog::default();
            let mut t = Transaction::new();
            t.create_collection(coll);
            log.persist_info(coll, &mut t);
            store.apply_transaction(t).map_err(|e| err(e.to_string()))?;
            log
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let pg = Pg {
            id,
            coll,
            ctx,
            events: tx.clone(),
            map: None,
            pool: None,
            up: Vec::new(),
            acting: Vec::new(),
            primary: -1,
            prior: Vec::new(),
            interval_start: 0,
            state: State::Stray,
            log,
            waiting: VecDeque::new(),
            inflight: BTreeMap::new(),
            inflight_reqids: HashMap::new(),
            peer_logs: BTreeMap::new(),
            peers_pending: Vec::new(),
            conns: HashMap::new(),
            scrub: None,
            scrub_record,
            recovery: None,
        };
        tokio::spawn(pg.run(rx));
        Ok(tx)
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<PgEvent>) {
        while let Some(ev) = rx.recv().await {
            if let PgEvent::Stop(done) = ev {
                self.stop().await;
                let _ = done.send(());
                return;
            }
            self.handle(ev).await;
        }
    }

    async fn handle(&mut self, ev: PgEvent) {
        match ev {
            PgEvent::Map(map) => self.advance_map(map).await,
            PgEvent::Client(op) => self.client_op(op).await,
            PgEvent::Rep {
                msg,
                data,
                responder,
            } => self.rep_op(msg, data, responder).await,
            PgEvent::RepAcked {
                version,
                from,
                result,
            } => self.rep_acked(version, from, result).await,
            PgEvent::LocalCommitted { version, result } => {
                self.local_committed(version, result).await
            }
            PgEvent::Query { msg, responder } => self.query(msg, responder).await,
            PgEvent::PeerInfo {
                from,
                interval_start,
                result,
            } => self.peer_info(from, interval_start, result).await,
            PgEvent::Activate { msg, responder } => self.activate(msg, responder).await,
            PgEvent::Push {
                msg,
                data,
                responder,
            } => self.push(msg, data, responder).await,
            PgEvent::Pull { msg, responder } => self.pull(msg, responder).await,
            PgEvent::Recovered {
                interval_start,
                result,
            } => self.recovered(interval_start, result).await,
            PgEvent::List {
                from_osd,
                msg,
                responder,
            } => self.list(from_osd, msg, responder).await,
            PgEvent::ScrubStep => self.scrub_step().await,
            PgEvent::ScrubTick {
                now_ms,
                every_ms,
                deep_every_ms,
            } => self.scrub_tick(now_ms, every_ms, deep_every_ms),
            PgEvent::Command { msg, responder } => self.command(msg, responder).await,
            PgEvent::Scrub { msg, responder } => self.scrub_map(msg, responder).await,
            PgEvent::Stats(tx) => {
                let _ = tx.send(self.stat());
            }
            PgEvent::Stop(_) => {}
        }
    }

    fn epoch(&self) -> u32 {
        self.map.as_ref().map_or(0, |m| m.epoch.0)
    }

    fn whoami(&self) -> i32 {
        self.ctx.whoami
    }

    fn is_primary(&self) -> bool {
        self.primary == self.whoami() && self.primary >= 0
    }

    fn replicas(&self) -> Vec<i32> {
        let me = self.whoami();
        self.acting
            .iter()
            .copied()
            .filter(|o| *o != me && *o >= 0)
            .collect()
    }

    /// A new map: a changed up or acting set, primary or pool size starts a
    /// new interval, which drops what was in flight (clients resend) and
    /// starts peering.
    async fn advance_map(&mut self, map: Arc<OsdMap>) {
        if self.map.as_ref().is_some_and(|m| m.epoch >= map.epoch) {
            return;
        }
        let Some(pool) = map.pool(self.id.pool).cloned() else {
            self.map = Some(map);
            self.pool = None;
            self.new_interval(Vec::new(), Vec::new(), -1).await;
            return;
        };
        let m = map.pg_to_up_acting(self.id).unwrap_or_default();
        let changed = m.up != self.up
            || m.acting != self.acting
            || m.acting_primary != self.primary
            || self
                .pool
                .as_ref()
                .is_none_or(|p| p.size != pool.size || p.min_size != pool.min_size);
        self.map = Some(map);
        self.pool = Some(pool);
        if changed {
            self.up = m.up.clone();
            self.new_interval(m.up, m.acting, m.acting_primary).await;
        }
    }

    async fn new_interval(&mut self, up: Vec<i32>, acting: Vec<i32>, primary: i32) {
        let was_primary = self.is_primary();
        if !self.acting.is_empty() {
            self.prior = std::mem::take(&mut self.acting);
        }
        self.up = up;
        self.acting = acting;
        self.primary = primary;
        self.interval_start = self.epoch();
        self.inflight.clear();
        self.inflight_reqids.clear();
        self.peer_logs.clear();
        self.peers_pending.clear();
        self.conns.clear();
        self.abort_scrub("the PG changed interval");
        self.recovery = None;
        self.ctx.stats_changed.notify_one();
        let me = self.whoami();
        tracing::debug!(pg = %self.id, epoch = self.interval_start, acting = ?self.acting,
            primary, "new interval");
        if self.is_primary() {
            self.start_peering().await;
        } else {
            self.state = if self.acting.contains(&me) {
                State::ReplicaWaiting
            } else {
                State::Stray
            };
            if was_primary || !self.waiting.is_empty() {
                let ops: Vec<ClientOp> = self.waiting.drain(..).collect();
                for op in ops {
                    self.refuse_wrong_primary(op).await;
                }
            }
        }
    }

    async fn stop(&mut self) {
        // Ops in flight were applied locally; their clients resend to the
        // next primary, which finds them in its log.
        let ops: Vec<ClientOp> = self.waiting.drain(..).collect();
        for op in ops {
            let epoch = self.epoch();
            primary::reply_error(
                op.responder,
                shoal_proto::OsdErrorCode::ShuttingDown,
                epoch,
                "the OSD is shutting down".into(),
            )
            .await;
        }
        self.inflight.clear();
        let _ = tokio::task::block_in_place(|| self.ctx.store.flush());
    }

    fn stat(&self) -> Option<PgStat> {
        if !self.is_primary() {
            return None;
        }
        let size = self.pool.as_ref().map_or(0, |p| p.size as usize);
        let mut state = match self.state {
            State::Active if self.acting.len() < size => "active+undersized+degraded",
            State::Active => "active+clean",
            State::Peering => "peering",
            State::Recovering => "recovering",
            State::Peered => "undersized+degraded+peered",
            _ => "unknown",
        }
        .to_string();
        if let Some(job) = &self.scrub {
            state.push_str(if job.is_deep() {
                "+scrubbing+deep"
            } else {
                "+scrubbing"
            });
        }
        if !self.scrub_record.inconsistent.is_empty() {
            state.push_str("+inconsistent");
        }
        let (recovery_left, recovery_per_s) =
            self.recovery.as_ref().map_or((0, 0), |p| p.left_and_rate());
        Some(PgStat {
            pgid: self.id,
            state,
            objects: self.log.info.objects,
            bytes: self.log.info.bytes,
            version: self.log.info.last_update,
            up: self.up.clone(),
            acting: self.acting.clone(),
            log_size: self.log.len() as u64,
            inconsistent: self
                .scrub_record
                .inconsistent
                .iter()
                .map(|(o, _)| o.clone())
                .collect(),
            recovery_left,
            recovery_per_s,
        })
    }
}

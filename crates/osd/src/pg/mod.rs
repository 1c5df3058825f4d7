//! One placement group on this OSD: an actor task that takes every event
//! for the PG in order (client ops, replication, peering, map changes),
//! hands it to the PG's engine (`engine.rs`: the state and its sans-I/O
//! steps) and carries out the effects (`driver.rs`). Ops of one PG are
//! therefore ordered without locks, while different PGs run in parallel.
//!
//! States, as in Ceph: a primary starts each interval `peering` (gathering
//! the members' logs), `activating` (handing every replica the
//! authoritative log and its missing set), then is `active` and serves I/O
//! while it recovers the objects members lack (`recovering`,
//! `backfilling`); with fewer than `min_size` acting members it stays
//! `peered` without serving I/O. A replica waits for the primary's
//! activation.

pub mod backend;
mod driver;
pub(crate) mod ec;
pub mod engine;
mod peering;
mod primary;
mod recover;
mod scrub;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use shoal_maps::{OsdMap, PgId};
use shoal_net::{Connection, PeerInfo, Responder};
use shoal_objectstore::Transaction;
use shoal_proto::{OsdOp, PgCommand, PgInfo, PgList, PgPull, PgPush, PgQuery, PgScrub, RepOp};
use tokio::sync::{mpsc, oneshot};

use crate::ctx::OsdCtx;

/// A PG's last scrub record, from its bytes (for the fuzzers,
/// `crate::fuzzing`): its deep stamp and inconsistent objects.
#[doc(hidden)]
pub fn scrub_record_decode(b: &[u8]) -> (u64, usize) {
    let r = scrub::ScrubRecord::decode(b);
    (r.deep_stamp_ms, r.inconsistent.len())
}
use crate::log::{PgLog, Version};
use crate::missing::MissingSet;
use crate::object::pg_meta_key;
use engine::PgCore;

pub(crate) use engine::SNAP_TRIMMED_KEY;
pub use peering::{MemberLog, MemberRecovery, RecoveryPlan, plan_recovery, plan_recovery_k};
pub use recover::RecoveryProgress;
pub(crate) use scrub::SCRUB_KEY;

/// Most omap entries read from a PG's meta object at once (its log and dups).
pub(crate) const OMAP_ALL: usize = 1 << 24;

/// A client op routed to its PG.
#[derive(Debug)]
pub struct ClientOp {
    /// The op.
    pub msg: OsdOp,
    /// Its data part.
    pub data: Bytes,
    /// The data part's checksum, as its frame carried it (checked).
    pub data_crc: u32,
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
    /// A new OSD map that changes the pool's `pg_num` (or the first since
    /// the OSD started): the PG splits first if it must, and answers with
    /// the children it made here once they are in the store, for the OSD
    /// to open before it routes anything of this map.
    MapSplit {
        /// The map.
        map: Arc<OsdMap>,
        /// The children made here (none if the PG did not split).
        done: oneshot::Sender<Vec<PgId>>,
    },
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
    /// Recovery: several whole objects pushed by the primary at once.
    PushBatch {
        /// The message.
        msg: shoal_proto::PgPushBatch,
        /// The objects' data, one after the other.
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
    /// The PG's objects were listed for a backfill.
    Listed {
        /// The interval.
        interval_start: u32,
        /// The objects, or why not.
        result: Result<Vec<shoal_objectstore::ObjectKey>, String>,
    },
    /// Every replica took the activation (or one did not).
    Activated {
        /// The interval.
        interval_start: u32,
        /// The outcome.
        result: Result<(), String>,
    },
    /// Objects of a recovery job were recovered for some members, and
    /// maybe the job ended.
    ObjectRecovered {
        /// The recovery it belongs to.
        generation: u64,
        /// What became of each of those objects.
        results: Vec<crate::recovery::Recovered>,
        /// The job ended: its recovery slot is free.
        job_done: bool,
    },
    /// The monitors' answer: the PG's past intervals.
    PastIntervals {
        /// The interval.
        interval_start: u32,
        /// The intervals, or why not.
        result: Result<Vec<shoal_maps::PastInterval>, String>,
    },
    /// Unfound objects are still unfound: peer again, asking every OSD.
    UnfoundSearch {
        /// The recovery it belongs to.
        generation: u64,
    },
    /// Look again at a peering that waits (`incomplete`, `up_thru`).
    PeeringRetry {
        /// The interval.
        interval_start: u32,
    },
    /// Try failed object recoveries again.
    RecoveryRetry {
        /// The recovery it belongs to.
        generation: u64,
    },
    /// A backfill slot of this OSD is ours.
    BackfillReserved {
        /// The recovery it belongs to.
        generation: u64,
        /// The slot.
        permit: tokio::sync::OwnedSemaphorePermit,
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
    /// Erasure coding: the primary wants chunks of our shard.
    EcRead {
        /// The message.
        msg: shoal_proto::EcRead,
        /// Where the chunks go.
        responder: Responder,
    },
    /// Erasure coding: the stripes an op waits for were gathered (and
    /// decoded) from the shards, or could not be.
    EcGathered {
        /// The object.
        key: shoal_objectstore::ObjectKey,
        /// The interval the gather was for.
        interval_start: u32,
        /// Stripe → its object bytes.
        result: Result<ec::Stripes, String>,
    },
    /// Scrub the next chunk (sent by the PG to itself).
    ScrubStep,
    /// Trim removed snapshots from the next object (sent by the PG to itself).
    SnapTrim,
    /// Start a scrub if one is due.
    ScrubTick {
        /// Now, ms since the Unix epoch.
        now_ms: u64,
        /// Scrub at least this often.
        every_ms: u64,
        /// Deep-scrub at least this often.
        deep_every_ms: u64,
    },
    /// Now and then, from the OSD: a stray asks its primary whether its
    /// copy may go (`engine/purge.rs`).
    StrayTick,
    /// A stray asks us, its primary, whether its copy may go.
    StrayAsks {
        /// The stray.
        from: i32,
        /// The message.
        msg: shoal_proto::PgStray,
        /// Where the answer goes.
        responder: Responder,
    },
    /// Our primary agreed that our copy (or, as a member, the shards we
    /// hold of positions we left) serves nothing.
    PurgeGranted {
        /// The primary that agreed.
        primary: i32,
        /// We asked as a member.
        member: bool,
        /// Our interval when we asked.
        interval_start: u32,
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
    /// Die now (the OSD was killed): answer nothing more.
    Crash,
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
    /// Object copies recovery still has to make (Ceph's degraded objects,
    /// beside those of acting members that are absent altogether).
    pub recovery_left: u64,
    /// Object copies recovery makes per second.
    pub recovery_per_s: u64,
    /// Object copies missing: of absent acting members (below the pool's
    /// size) and those acting members or backfill targets still lack.
    pub degraded: u64,
    /// Copies backfill targets lack while an acting member outside the up
    /// set holds them (Ceph's misplaced objects).
    pub misplaced: u64,
    /// Objects whose recovery keeps failing, each with why.
    pub recovery_stalled: Vec<String>,
}

/// Where a PG is in its interval.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Not a member of the acting set (or no map yet).
    Stray,
    /// Primary, gathering members' logs.
    Peering,
    /// Primary, handing the authoritative log to every replica.
    Activating,
    /// Primary: a past interval that may have taken writes has no member up.
    Down,
    /// Primary: a past interval that may have taken writes has members up
    /// but none answered.
    Incomplete,
    /// Primary with fewer than `min_size` acting members: no I/O.
    Peered,
    /// Primary, serving I/O (and recovering while `recovery` is set).
    Active,
    /// Replica, waiting for the primary's activation.
    ReplicaWaiting,
    /// Replica of an active PG.
    ReplicaActive,
}

/// The PG actor: the engine's state ([`PgCore`]) and the driver's
/// handles (the network, the store's commits, timers, reply handles).
pub struct Pg {
    core: PgCore,
    ctx: Arc<OsdCtx>,
    events: mpsc::UnboundedSender<PgEvent>,
    /// The reply handles of requests the engine holds, by token.
    replies: HashMap<u64, Responder>,
    next_reply: u64,
    conns: HashMap<i32, Connection>,
    /// Moved on whenever the recovery is dropped: copies still running
    /// for an older one install nothing (`recovery::CopyFence`).
    copy_fence: Arc<std::sync::Mutex<u64>>,
    /// The OSD's scrub slot this PG's scheduled scrub holds.
    scrub_slot: Option<tokio::sync::OwnedSemaphorePermit>,
    /// The copy was removed (a stray's): the actor ends.
    removed: bool,
}

impl std::fmt::Debug for Pg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pg {} ({:?})", self.core.id, self.core.state)
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
    /// actor on its shard; returns the actor's event queue.
    pub fn spawn(
        id: PgId,
        coll: shoal_objectstore::CollectionId,
        ctx: Arc<OsdCtx>,
        shards: &crate::shards::Shards,
    ) -> Result<mpsc::UnboundedSender<PgEvent>, PgOpenError> {
        let err = |why: String| PgOpenError { pg: id, why };
        let store = &ctx.store;
        let mut scrub_record = scrub::ScrubRecord::default();
        let mut snap_trimmed = Vec::new();
        let mut missing = MissingSet::default();
        let mut stashes = BTreeMap::new();
        let mut strays = std::collections::BTreeSet::new();
        let mut pg_num = 0;
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
            if let Some(b) = omap.get(engine::SNAP_TRIMMED_KEY) {
                snap_trimmed = engine::decode_trimmed(b);
            }
            missing = MissingSet::load(&omap).map_err(|e| err(e.to_string()))?;
            pg_num = crate::split::stored_pg_num(&omap);
            // Copies a crash interrupted start again from their first step.
            let mut t = Transaction::new();
            let temps = crate::copy::remove_temps(store.as_ref(), coll, &mut t)
                .map_err(|e| err(e.to_string()))?;
            if temps > 0 {
                tracing::info!(pg = %id, temps, "removing half-made object copies");
                store.apply_transaction(t).map_err(|e| err(e.to_string()))?;
            }
            // Rollback stashes of an erasure-coded shard, and the shards
            // it keeps from positions it left.
            if coll.shard != shoal_objectstore::CollectionId::NO_SHARD {
                strays = store
                    .list_collections()
                    .map_err(|e| err(e.to_string()))?
                    .into_iter()
                    .filter(|c| c.pool == coll.pool && c.seed == coll.seed && *c != coll)
                    .map(|c| c.shard)
                    .collect();
                stashes = crate::ec::rollback::list_stashes(store.as_ref(), coll)
                    .map_err(|e| err(e.to_string()))?;
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
        let core = PgCore {
            id,
            coll,
            whoami: ctx.whoami,
            cfg: ctx.cfg.clone(),
            store: Arc::clone(&ctx.store),
            backend: Arc::new(backend::Replicated),
            counters: Arc::clone(&ctx.counters),
            observed: ctx.observer.is_some(),
            map: None,
            pool: None,
            up: Vec::new(),
            acting: Vec::new(),
            primary: -1,
            prior: Vec::new(),
            interval_start: 0,
            state: State::Stray,
            log,
            missing,
            activation_pieces: None,
            inflight: BTreeMap::new(),
            inflight_reqids: HashMap::new(),
            waiting: VecDeque::new(),
            waiting_for_object: BTreeMap::new(),
            recovery: None,
            full: Arc::clone(&ctx.full),
            clock: shoal_net::now_ms,
            now: tokio::time::Instant::now,
            peer_logs: BTreeMap::new(),
            peers_pending: Vec::new(),
            peering: peering::PeeringProgress::default(),
            plan: None,
            search_everywhere: false,
            recovery_generation: 0,
            pending_activation: None,
            ec: None,
            ec_gathering: BTreeMap::new(),
            stashes,
            ec_committed: Version::default(),
            strays,
            stray_sources: Vec::new(),
            scrub: None,
            scrub_record,
            snap_trim: None,
            snap_trimmed,
            pg_num,
        };
        let pg = Pg {
            core,
            ctx,
            events: tx.clone(),
            replies: HashMap::new(),
            next_reply: 0,
            conns: HashMap::new(),
            copy_fence: Arc::default(),
            scrub_slot: None,
            removed: false,
        };
        // Log lines name the OSD (several share a process in tests).
        let span = tracing::debug_span!("osd", id = pg.ctx.whoami);
        shards.spawn(id, tracing::Instrument::instrument(pg.run(rx), span));
        Ok(tx)
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<PgEvent>) {
        while let Some(ev) = rx.recv().await {
            match ev {
                PgEvent::Stop(done) => {
                    self.stop().await;
                    let _ = done.send(());
                    return;
                }
                PgEvent::Crash => return,
                ev => {
                    self.handle(ev).await;
                    if self.removed {
                        // The copy is gone: the OSD opens a new PG if a
                        // later map makes it a member again.
                        return;
                    }
                    if self.core.scrub.is_none() {
                        self.scrub_slot = None;
                    }
                    let fx = self.core.snap_trim_poll();
                    if !fx.is_empty() {
                        self.drive(fx).await;
                    }
                }
            }
        }
    }

    async fn handle(&mut self, ev: PgEvent) {
        match ev {
            PgEvent::Map(map) => {
                self.split_for(&map);
                let fx = self.step(|core| core.advance_map(map));
                self.drive(fx).await
            }
            PgEvent::MapSplit { map, done } => {
                let children = self.split_for(&map);
                let fx = self.step(|core| core.advance_map(map));
                self.drive(fx).await;
                let _ = done.send(children);
            }
            PgEvent::Client(op) => {
                let op = self.engine_op(op);
                let fx = self.step(|core| core.client_op(op));
                self.drive(fx).await
            }
            PgEvent::Rep {
                msg,
                data,
                responder,
            } => {
                let to = self.token(responder);
                let fx = self.core.rep_op(msg, data, to);
                self.drive_for_peer(fx).await
            }
            PgEvent::RepAcked {
                version,
                from,
                result,
            } => {
                let fx = self.core.rep_acked(version, from, result);
                self.drive(fx).await
            }
            PgEvent::LocalCommitted { version, result } => {
                let fx = self.core.local_committed(version, result);
                self.drive(fx).await
            }
            PgEvent::Query { msg, responder } => {
                let to = self.token(responder);
                let fx = self.core.query(msg, to);
                self.drive_for_peer(fx).await
            }
            PgEvent::PeerInfo {
                from,
                interval_start,
                result,
            } => {
                let fx = self.core.peer_info(from, interval_start, result);
                self.drive(fx).await
            }
            PgEvent::Activate { msg, responder } => {
                let to = self.token(responder);
                let fx = self.step(|core| core.activate(msg, to));
                self.drive_for_peer(fx).await
            }
            PgEvent::Push {
                msg,
                data,
                responder,
            } => {
                let to = self.token(responder);
                let fx = self.step(|core| core.push(msg, data, to));
                self.drive_for_peer(fx).await
            }
            PgEvent::PushBatch {
                msg,
                data,
                responder,
            } => {
                let to = self.token(responder);
                let fx = self.step(|core| core.push_batch(msg, data, to));
                self.drive_for_peer(fx).await
            }
            PgEvent::Pull { msg, responder } => {
                let to = self.token(responder);
                let fx = self.step(|core| core.pull(msg, to));
                self.drive_for_peer(fx).await
            }
            PgEvent::Listed {
                interval_start,
                result,
            } => {
                let fx = self.core.listed(interval_start, result);
                self.drive(fx).await
            }
            PgEvent::Activated {
                interval_start,
                result,
            } => {
                let fx = self.core.activated(interval_start, result);
                self.drive(fx).await
            }
            PgEvent::ObjectRecovered {
                generation,
                results,
                job_done,
            } => {
                let fx = self.core.objects_recovered(generation, results, job_done);
                self.drive(fx).await
            }
            PgEvent::RecoveryRetry { generation } => {
                let fx = self.core.recovery_retry(generation);
                self.drive(fx).await
            }
            PgEvent::PastIntervals {
                interval_start,
                result,
            } => {
                let fx = self.core.past_intervals(interval_start, result);
                self.drive(fx).await
            }
            PgEvent::PeeringRetry { interval_start } => {
                let fx = self.core.peering_retry(interval_start);
                self.drive(fx).await
            }
            PgEvent::UnfoundSearch { generation } => {
                let fx = self.step(|core| core.unfound_search(generation));
                self.drive(fx).await
            }
            PgEvent::BackfillReserved { generation, permit } => {
                let fx = self.core.backfill_reserved(generation, permit);
                self.drive(fx).await
            }
            PgEvent::List {
                from_osd,
                msg,
                responder,
            } => {
                let to = self.token(responder);
                let fx = self.step(|core| core.list(from_osd, msg, to));
                self.drive(fx).await
            }
            PgEvent::EcRead { msg, responder } => {
                let to = self.token(responder);
                let fx = self.step(|core| core.ec_read(&msg, to));
                self.drive_for_peer(fx).await
            }
            PgEvent::EcGathered {
                key,
                interval_start,
                result,
            } => {
                let fx = self.step(|core| core.ec_gathered(key, interval_start, result));
                self.drive(fx).await
            }
            PgEvent::ScrubStep => {
                let fx = self.core.scrub_step();
                self.drive(fx).await
            }
            PgEvent::SnapTrim => {
                let fx = self.step(|core| core.snap_trim_step());
                self.drive(fx).await
            }
            PgEvent::ScrubTick {
                now_ms,
                every_ms,
                deep_every_ms,
            } => {
                // A scheduled scrub needs one of the OSD's scrub slots:
                // at most `max_scrubs` of its PGs scrub at once, and
                // client ops keep the rest.
                if self.core.scrub.is_some() {
                    return;
                }
                let Ok(slot) = Arc::clone(&self.ctx.scrub_slots).try_acquire_owned() else {
                    return;
                };
                let fx = self.core.scrub_tick(now_ms, every_ms, deep_every_ms);
                if self.core.scrub.is_some() {
                    self.scrub_slot = Some(slot);
                }
                self.drive(fx).await
            }
            PgEvent::StrayTick => {
                let fx = self.core.stray_tick();
                self.drive(fx).await
            }
            PgEvent::StrayAsks {
                from,
                msg,
                responder,
            } => {
                let to = self.token(responder);
                let fx = self.core.stray_asks(from, &msg, to);
                self.drive_for_peer(fx).await
            }
            PgEvent::PurgeGranted {
                primary,
                member,
                interval_start,
            } => {
                let fx = self.core.purge_granted(primary, member, interval_start);
                self.drive(fx).await
            }
            PgEvent::Command { msg, responder } => self.command(msg, responder).await,
            PgEvent::Scrub { msg, responder } => {
                let to = self.token(responder);
                let fx = self.step(|core| core.scrub_map(msg, to));
                self.drive_for_peer(fx).await
            }
            PgEvent::Stats(tx) => {
                let _ = tx.send(self.stat());
            }
            PgEvent::Stop(_) | PgEvent::Crash => {}
        }
    }

    /// What each member lacks, for `pg query`: the primary knows every
    /// acting member's count; every member knows its own objects.
    fn missing_json(&self) -> serde_json::Value {
        let own: Vec<serde_json::Value> = self
            .core
            .missing
            .objects()
            .iter()
            .take(32)
            .map(|(k, v)| {
                serde_json::json!({
                    "object": String::from_utf8_lossy(&k.name).replace('\0', "/"),
                    "need": v.to_string(),
                })
            })
            .collect();
        let mut out = serde_json::json!({
            "own": { "count": self.core.missing.len(), "first": own },
        });
        if let Some(rs) = &self.core.recovery {
            let per: serde_json::Map<String, serde_json::Value> = rs
                .missing_per_member()
                .into_iter()
                .map(|(o, n)| (format!("osd.{o}"), n.into()))
                .collect();
            out["recovery"] = serde_json::json!({
                "state": rs.state_word(self.core.map.as_deref()),
                "objects_missing_per_member": per,
                "backfill_targets": rs.backfill_targets().iter().collect::<Vec<_>>(),
                "copies_left": rs.copies_left(),
                "unfound": rs.unfound().len(),
                "in_progress": rs.in_progress(),
                "stalled": rs.stalled(),
            });
        }
        out
    }

    /// Where peering is, for `pg query`: the past intervals that may have
    /// taken writes, and what blocks the PG.
    fn peering_json(&self) -> serde_json::Value {
        let past: Vec<serde_json::Value> = self
            .core
            .peering
            .past
            .iter()
            .flatten()
            .map(|i| {
                serde_json::json!({
                    "first": i.first, "last": i.last, "acting": i.acting, "primary": i.primary,
                })
            })
            .collect();
        serde_json::json!({
            "past_intervals_rw": past,
            "probe_failed": self.core.peering.probe_failed,
            "waiting_up_thru": self.core.peering.waiting_up_thru,
            "waiting_pg_temp": self.core.peering.waiting_pg_temp,
            "peers_pending": self.core.peers_pending,
            "peers_heard": self.core.peer_logs.keys().collect::<Vec<_>>(),
            "blocked_by": self.core.peering.blocked,
        })
    }

    /// Degraded and misplaced object copies (see [`PgStat`]): a copy a
    /// backfill target lacks is misplaced while an acting member outside
    /// the up set holds one, degraded otherwise (counted once with the
    /// copies of absent members).
    fn degraded_and_misplaced(&self, size: usize) -> (u64, u64) {
        let objects = self.core.log.info.objects;
        let absent = objects.saturating_mul(size.saturating_sub(self.core.acting.len()) as u64);
        let per = self
            .core
            .recovery
            .as_ref()
            .map(|r| r.missing_per_member())
            .unwrap_or_default();
        let targets = self.core.backfill_targets();
        let (mut on_acting, mut on_targets) = (0u64, 0u64);
        for (o, n) in per {
            if targets.contains(&o) {
                on_targets += n;
            } else {
                on_acting += n;
            }
        }
        let extra = self
            .core
            .acting
            .iter()
            .filter(|o| !self.core.up.contains(o))
            .count() as u64;
        let misplaced = on_targets.min(extra.saturating_mul(objects));
        let degraded =
            absent + on_acting + on_targets.saturating_sub(misplaced).saturating_sub(absent);
        (degraded, misplaced)
    }

    async fn stop(&mut self) {
        // Ops in flight were applied locally; their clients resend to the
        // next primary, which finds them in its log.
        let fx = self.core.refuse_waiting_shutting_down();
        self.drive(fx).await;
        self.core.inflight.clear();
        let _ = shoal_net::runtime::blocking(|| self.ctx.store.flush());
    }

    fn stat(&self) -> Option<PgStat> {
        if !self.core.is_primary() {
            return None;
        }
        let size = self.core.pool.as_ref().map_or(0, |p| p.size as usize);
        let undersized = self.core.acting.len() < size;
        let remapped = self.core.acting != self.core.up;
        let (degraded, misplaced) = self.degraded_and_misplaced(size);
        let mut state = match self.core.state {
            State::Active => {
                let mut s = String::from("active");
                if remapped {
                    s.push_str("+remapped");
                }
                if let Some(rs) = &self.core.recovery {
                    s.push('+');
                    s.push_str(rs.state_word(self.core.map.as_deref()));
                }
                if undersized {
                    s.push_str("+undersized");
                }
                if undersized || degraded > 0 {
                    s.push_str("+degraded");
                } else if self.core.recovery.is_none() {
                    s.push_str("+clean");
                }
                s
            }
            State::Peering => "peering".into(),
            State::Activating => "activating".into(),
            State::Down => "down".into(),
            State::Incomplete => "incomplete".into(),
            State::Peered => "undersized+degraded+peered".into(),
            _ => "unknown".into(),
        };
        if let Some(job) = &self.core.scrub {
            state.push_str(if job.is_deep() {
                "+scrubbing+deep"
            } else {
                "+scrubbing"
            });
        }
        if !self.core.scrub_record.inconsistent.is_empty() {
            state.push_str("+inconsistent");
        }
        // Removed snapshots still to trim (Ceph's snaptrim, snaptrim_wait).
        if self.core.snap_trim.is_some() {
            state.push_str("+snaptrim");
        } else if self.core.ec.is_none()
            && self
                .core
                .pool
                .as_ref()
                .is_some_and(|p| p.removed_snaps != self.core.snap_trimmed)
        {
            state.push_str("+snaptrim_wait");
        }
        let (recovery_left, recovery_per_s) = self
            .core
            .recovery
            .as_ref()
            .map_or((0, 0), |r| (r.copies_left(), r.rate()));
        Some(PgStat {
            pgid: self.core.id,
            state,
            objects: self.core.log.info.objects,
            bytes: self.core.log.info.bytes,
            version: self.core.log.info.last_update,
            // An erasure-coded PG's sets as the map gives them: by position.
            up: (self.core.ec.as_ref()).map_or_else(|| self.core.up.clone(), |e| e.up.clone()),
            acting: (self.core.ec.as_ref())
                .map_or_else(|| self.core.acting.clone(), |e| e.acting.clone()),
            log_size: self.core.log.len() as u64,
            inconsistent: self
                .core
                .scrub_record
                .inconsistent
                .iter()
                .map(|(o, _)| o.clone())
                .collect(),
            recovery_left,
            recovery_per_s,
            degraded,
            misplaced,
            recovery_stalled: self
                .core
                .recovery
                .as_ref()
                .map(|r| r.stalled())
                .unwrap_or_default(),
        })
    }
}

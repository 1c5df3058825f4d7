//! The PG engine's state and its step functions: each takes the state and
//! one event and returns the effects the driver ([`super::Pg`]) carries
//! out — replies, store transactions whose commits come back as events,
//! messages to members, notes for the monitors' statistics. A step does no
//! I/O of its own beyond reading the local store (a read is part of the
//! state it decides on, as in Ceph's PG); the driver owns the network, the
//! store's commit callbacks, timers and the reply handles, which a step
//! names by [`ReplyTo`] tokens. So each step is tested alone: one event
//! in, exact effects out (`engine/tests.rs`).
//!
//! Every PG event is a step: a new map and a new interval (`map.rs`); the
//! primary's op path (`ops.rs`: fence, queue, hold for recovery or changes
//! in flight, deduplicate, execute through the backend) and its
//! replication bookkeeping (below: submit a change through the backend,
//! take the members' acks and the local commit, answer in version order,
//! fail what is in flight); the replica's side (below: apply a change,
//! answer a query, take an activation, install or serve a recovery step)
//! and the read-only answers (`answers.rs`: listings, scrub summaries);
//! peering (`peering.rs`: queries, past intervals, `down`/`incomplete`,
//! `up_thru`, `pg_temp`, the plan, activation, going active); recovery's
//! scheduling (`pg/recover.rs`: backfill reservation, which objects to
//! copy and from where, unfound objects, retries, clean); scrub's
//! (`pg/scrub.rs`: commands, the schedule, chunk after chunk, the record;
//! a chunk's round trips and repairs are I/O the driver awaits).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use bytes::Bytes;
use shoal_maps::{OsdMap, PgId, Pool};
use shoal_objectstore::{CollectionId, ObjectKey, ObjectStore, Transaction};
use shoal_proto::{
    Message, OsdErrorCode, OsdOpReply, PgInfo, PgPull, PgPush, PgPushBatch, PgQuery, RepOp,
    RepOpReply,
};

use super::State;
use super::backend::{Change, PgBackend, ShardWrite};
use crate::codec;
use crate::copy;
use crate::ctx::{AckedWrite, OsdCounters, PgConfig};
use crate::log::{Dup, LogEntry, PgInfoData, PgLog, ReqId, Version};
use crate::missing::MissingSet;
use crate::object;
use crate::pieces::Records;

/// Names a request the driver holds the reply handle of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReplyTo(pub u64);

impl ReplyTo {
    /// Names nobody: a change the PG makes of its own (a snapshot trim).
    pub const NONE: ReplyTo = ReplyTo(0);
}

/// What the driver does once a queued transaction is durable (or failed).
#[derive(Debug, Clone, PartialEq)]
pub enum Then {
    /// Answer a replicated request with a [`RepOpReply`] carrying the
    /// commit's outcome (from the store's commit thread: no PG hop).
    AckRep {
        /// The request.
        to: ReplyTo,
        /// Our epoch, for the reply.
        epoch: u32,
    },
    /// The primary's own copy of change `Version` is durable: an event.
    Local(Version),
}

/// What a step asks of the driver.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Answer `to`.
    Reply {
        /// The request.
        to: ReplyTo,
        /// The answer.
        msg: Message,
        /// Its data part.
        data: Bytes,
        /// The data part's crc32c when the store gave it with the data (a
        /// read from BlockStore): the frame checksum without another pass.
        data_crc: Option<u32>,
    },
    /// Queue a store transaction; `then` once durable. If the store
    /// refuses it (it checks before it changes anything) the driver
    /// reloads the log and answers with the store's error.
    Apply {
        /// The transaction.
        txn: Transaction,
        /// What its commit does.
        then: Then,
    },
    /// Send a replicated change to a member (in order with the PG's
    /// earlier changes); its ack comes back as `RepAcked`. Skipped if the
    /// change is no longer in flight when its turn comes.
    Replicate {
        /// The change.
        version: Version,
        /// The member, message and data.
        write: ShardWrite,
    },
    /// Bytes written, towards the next check of the store's space.
    Wrote(u64),
    /// A write was acknowledged (for an observer, when one watches).
    Acked(AckedWrite),
    /// Peer again (a member refused or lost a change).
    StartPeering,
    /// Ops waiting on the object's changes in flight may run.
    RunWaiting(ObjectKey),
    /// Fill the recovery slots (an op waits for an object: it was put
    /// first in line).
    PumpRecovery,
    /// Answer `to` from a task of its own, after this step (a command's
    /// answer).
    ReplyLater {
        /// The request.
        to: ReplyTo,
        /// The answer.
        msg: Message,
        /// Its data part.
        data: Bytes,
    },
    /// `ScrubStep` after this long (zero: at once, behind the queued events).
    ScrubStepAfter(std::time::Duration),
    /// `SnapTrim` after this long (zero: at once, behind the queued events).
    SnapTrimAfter(std::time::Duration),
    /// Scrub one chunk from `cursor` (the driver awaits the replicas'
    /// summaries and any repair, then takes `PgCore::scrub_chunk_done`).
    ScrubChunk {
        /// Read and compare the data, not only sizes and attributes.
        deep: bool,
        /// Copy each inconsistent object from its authoritative member.
        repair: bool,
        /// Where the chunk starts (None: the PG's first object).
        cursor: Option<ObjectKey>,
    },
    /// Ask the acting primary whether the copy this stray holds may go
    /// (`purge.rs`); a yes comes back as `PurgeGranted`.
    AskToPurge {
        /// The primary asked.
        primary: i32,
        /// We ask as a member, to drop the shards of positions we left.
        member: bool,
    },
    /// Remove every collection of the PG this OSD holds, and stop the PG
    /// (a stray whose primary is clean without it).
    RemoveCopy,
    /// Queue a transaction whose outcome nobody waits for (scrub stamps).
    Record(Transaction),
    /// Start recovering what the activation found missing.
    StartRecovery,
    /// Reserve one of the OSD's backfill slots for this recovery: held at
    /// once when one is free, else `BackfillReserved` when one frees.
    ReserveBackfill {
        /// The recovery.
        generation: u64,
    },
    /// Copy one object to the members that lack it, in a task;
    /// `ObjectRecovered` follows.
    RecoverObject(super::recover::ObjectJob),
    /// `UnfoundSearch` a while later.
    UnfoundSearchLater {
        /// The recovery.
        generation: u64,
    },
    /// `RecoveryRetry` after `delay`.
    RecoveryRetryAfter {
        /// How long.
        delay: std::time::Duration,
        /// The recovery.
        generation: u64,
    },
    /// Run the ops queued while the PG was not active (one step each).
    DrainWaiting,
    /// The PG's statistics changed: report them now.
    StatsChanged,
    /// Copies still running for a dropped recovery install nothing.
    FenceCopies,
    /// The members' connections belong to the old interval: drop them.
    DropConnections,
    /// Ask member `osd` for its info, log and missing set after `delay`,
    /// giving it `limit`; the answer comes back as `PeerInfo`.
    Query {
        /// The member.
        osd: i32,
        /// Wait this long first.
        delay: std::time::Duration,
        /// Give up after this long.
        limit: std::time::Duration,
        /// The interval the query is for.
        interval_start: u32,
    },
    /// Ask the monitors for the PG's past intervals since `since`; the
    /// answer comes back as `PastIntervals`.
    AskPastIntervals {
        /// The newest epoch a member saw the PG go active.
        since: u32,
        /// The interval the question is for.
        interval_start: u32,
    },
    /// Ask the monitors for a `pg_temp` (empty: its removal).
    RequestPgTemp(Vec<i32>),
    /// Ask the monitors to record that we were up through this epoch.
    WantUpThru(u32),
    /// `PeeringRetry` for this interval, a while later.
    PeeringRetryLater {
        /// The interval.
        interval_start: u32,
    },
    /// List the PG's objects for a backfill (member `from`'s copy, or
    /// ours), adding `lacks`; the answer comes back as `Listed`.
    ListForBackfill {
        /// Whose copy (None: ours).
        from: Option<i32>,
        /// Objects the lister lacks, listed too.
        lacks: Vec<ObjectKey>,
        /// The interval.
        interval_start: u32,
    },
    /// Persist our activation now, then take
    /// `PgCore::activation_persisted` with the outcome.
    PersistActivation(Transaction),
    /// Erasure coding: gather `stripes` of `key` from the shards and
    /// decode them; `EcGathered` follows.
    EcGather {
        /// The object (an op waits under it).
        key: ObjectKey,
        /// What is read: the object, or its clone a read at a snapshot
        /// resolved to.
        at: ObjectKey,
        /// The stripes.
        stripes: std::collections::BTreeSet<u64>,
        /// Members still lacking the object (their shard is not read).
        lacking: Vec<i32>,
        /// The interval.
        interval_start: u32,
    },
    /// Send each member its activation, in order; the outcome comes back
    /// as `Activated`.
    SendActivations {
        /// Member and message.
        msgs: Vec<(i32, PgInfo)>,
        /// The interval.
        interval_start: u32,
    },
}

/// A change being replicated, answered once durable everywhere.
#[derive(Debug)]
pub(super) struct InFlight {
    /// The object it changes.
    pub key: ObjectKey,
    pub reqid: Option<ReqId>,
    pub waiting: Vec<i32>,
    pub local_done: bool,
    pub reply: OsdOpReply,
    pub data: Bytes,
    pub responders: Vec<ReplyTo>,
}

/// A client's change, executed and ready to log and replicate.
#[derive(Debug)]
pub(super) struct NewChange {
    /// Its log entry.
    pub entry: LogEntry,
    /// What it does to the objects.
    pub txn: Transaction,
    /// Change of the PG's object count and bytes.
    pub delta: (i64, i64),
    /// The client's answer once durable everywhere.
    pub reply: OsdOpReply,
    /// The answer's data part.
    pub out: Bytes,
    /// The client's data part and its checked checksum.
    pub received: Option<(Bytes, u32)>,
}

/// The PG's state: what every step reads and changes. The driver carries
/// out a step's effects before it takes the next step, so a step that
/// reads the store sees every change an earlier step made.
#[derive(Debug)]
pub struct PgCore {
    pub(super) id: PgId,
    pub(super) coll: CollectionId,
    pub(super) whoami: i32,
    pub(super) cfg: PgConfig,
    pub(super) store: Arc<dyn ObjectStore>,
    pub(super) backend: Arc<dyn PgBackend>,
    pub(super) counters: Arc<OsdCounters>,
    /// An observer watches acknowledged writes (simulation).
    pub(super) observed: bool,
    pub(super) map: Option<Arc<OsdMap>>,
    pub(super) pool: Option<Pool>,
    pub(super) up: Vec<i32>,
    pub(super) acting: Vec<i32>,
    pub(super) primary: i32,
    pub(super) prior: Vec<i32>,
    pub(super) interval_start: u32,
    pub(super) state: State,
    pub(super) log: PgLog,
    /// The objects our copy lacks (persisted).
    pub(super) missing: MissingSet,
    /// Replica: the pieces of an activation received so far (its
    /// interval, the next piece's number, the records).
    pub(super) activation_pieces: Option<(u32, u32, Records)>,
    pub(super) inflight: BTreeMap<Version, InFlight>,
    pub(super) inflight_reqids: HashMap<ReqId, Version>,
    /// Client ops waiting for the PG to become active.
    pub(super) waiting: VecDeque<Op>,
    /// Client ops waiting for an object (its recovery, or changes to it
    /// in flight).
    pub(super) waiting_for_object: BTreeMap<ObjectKey, VecDeque<Op>>,
    /// What is left to recover (primary, active, until clean).
    pub(super) recovery: Option<super::recover::RecoveryState>,
    /// The store is fuller than the full ratio: changes are refused
    /// (set by the OSD's space watch).
    pub(super) full: Arc<AtomicBool>,
    /// Milliseconds since the Unix epoch (object mtimes).
    pub(super) clock: fn() -> u64,
    /// The monotonic clock (recovery's retry delays).
    pub(super) now: fn() -> tokio::time::Instant,
    /// Members heard in this peering, with their logs.
    pub(super) peer_logs: BTreeMap<i32, super::MemberLog>,
    /// Members whose answer peering waits for.
    pub(super) peers_pending: Vec<i32>,
    /// Where peering is (primary).
    pub(super) peering: super::peering::PeeringProgress,
    /// This interval's peering outcome (primary, until clean).
    pub(super) plan: Option<super::RecoveryPlan>,
    /// Peering asks every up OSD (objects were unfound in this interval).
    pub(super) search_everywhere: bool,
    /// How many recoveries this PG has started (tells their events apart).
    pub(super) recovery_generation: u64,
    /// A scrub in progress (primary).
    pub(super) scrub: Option<super::scrub::ScrubJob>,
    /// What the last scrub found, and when it ran (persisted).
    pub(super) scrub_record: super::scrub::ScrubRecord,
    /// A walk trimming removed snapshots (primary).
    pub(super) snap_trim: Option<snaptrim::SnapTrimJob>,
    /// The removed snapshots the last finished walk trimmed (persisted).
    pub(super) snap_trimmed: Vec<(u64, u64)>,
    /// An activation being persisted here, then sent.
    pub(super) pending_activation: Option<peering::PendingActivation>,
    /// Erasure coding: the pool's codec and this interval's sets by
    /// position (None for a replicated pool).
    pub(super) ec: Option<super::ec::EcPg>,
    /// Erasure coding: the op of each object whose stripes are being
    /// gathered (other ops on it wait behind it).
    pub(super) ec_gathering: BTreeMap<ObjectKey, Op>,
    /// Erasure coding: the rollback stashes this shard keeps, by the
    /// version of their change (`crate::ec::rollback`).
    pub(super) stashes: BTreeMap<Version, Vec<ObjectKey>>,
    /// Erasure coding, on the primary: the newest change every acting
    /// member has durable (members drop their stashes up to it).
    pub(super) ec_committed: Version,
    /// Erasure coding: the shards we hold from positions we left.
    pub(super) strays: std::collections::BTreeSet<u8>,
    /// The pool's `pg_num` this copy was last split for
    /// ([`crate::split::PG_NUM_KEY`]; 0: not known yet).
    pub(super) pg_num: u32,
    /// Erasure coding, on the primary: the strays peering heard of, by
    /// the OSD holding each.
    pub(super) stray_sources: Vec<(i32, super::peering::Stray)>,
}

fn rep_reply(to: ReplyTo, code: OsdErrorCode, epoch: u32, message: String) -> Effect {
    Effect::Reply {
        to,
        msg: RepOpReply {
            code: code as u32,
            message,
            epoch,
        }
        .into(),
        data: Bytes::new(),
        data_crc: None,
    }
}

/// An op's error answer.
pub(super) fn op_error(to: ReplyTo, code: OsdErrorCode, epoch: u32, message: String) -> Effect {
    Effect::Reply {
        to,
        msg: OsdOpReply {
            code: code as u32,
            message,
            epoch,
            ..OsdOpReply::default()
        }
        .into(),
        data: Bytes::new(),
        data_crc: None,
    }
}

/// Whether a set entry names an OSD: not a hole (-1, or an erasure-coded
/// set's [`shoal_maps::ITEM_NONE`]).
pub(super) fn is_osd(o: i32) -> bool {
    o >= 0 && o != shoal_maps::ITEM_NONE
}

impl PgCore {
    /// Every position of the pool is held by the OSD CRUSH (and the
    /// upmaps) put there: not undersized, not remapped.
    pub(super) fn placed_whole(&self) -> bool {
        let Some(pool) = &self.pool else {
            return false;
        };
        let placed = match &self.ec {
            Some(ec) => ec.acting == ec.up && ec.up.iter().all(|o| is_osd(*o)),
            None => self.acting == self.up,
        };
        placed && self.acting.len() == pool.size as usize
    }

    /// What this member's log keeps now (Ceph's `osd_min_pg_log_entries`
    /// and `osd_max_pg_log_entries`): the short log of a clean PG, or the
    /// long one while a position is empty or remapped or objects are
    /// missing, so that a member that misses changes then catches up from
    /// the log rather than by backfill. A replica sees only its own missing
    /// set: one that trims while another member recovers leaves the long
    /// log to the primary.
    pub(super) fn log_limits(&self) -> crate::log::LogLimits {
        let mut limits = self.cfg.log_limits;
        let settled = match self.state {
            State::Active => self.recovery.is_none() && self.pending_activation.is_none(),
            State::ReplicaActive => self.missing.is_empty(),
            _ => false,
        };
        if settled && self.placed_whole() {
            limits.entries_max = limits.entries_max.min(self.cfg.log_entries_clean);
        }
        limits
    }

    pub(super) fn epoch(&self) -> u32 {
        self.map.as_ref().map_or(0, |m| m.epoch.0)
    }

    pub(super) fn whoami(&self) -> i32 {
        self.whoami
    }

    pub(super) fn is_primary(&self) -> bool {
        self.primary == self.whoami && self.primary >= 0
    }

    /// Backfill targets: up members outside the acting set (while a
    /// `pg_temp` keeps complete members serving the PG).
    pub(super) fn backfill_targets(&self) -> Vec<i32> {
        self.up
            .iter()
            .copied()
            .filter(|o| is_osd(*o) && !self.acting.contains(o))
            .collect()
    }

    /// Every member that holds the PG's data in this interval: the acting
    /// set, then the backfill targets.
    pub(super) fn shards(&self) -> Vec<i32> {
        let mut out: Vec<i32> = self.acting.iter().copied().filter(|o| is_osd(*o)).collect();
        out.extend(self.backfill_targets());
        out
    }

    /// [`PgCore::shards`] but us: where changes are replicated.
    pub(super) fn other_shards(&self) -> Vec<i32> {
        let me = self.whoami;
        self.shards().into_iter().filter(|o| *o != me).collect()
    }

    pub(super) fn replicas(&self) -> Vec<i32> {
        let me = self.whoami;
        self.acting
            .iter()
            .copied()
            .filter(|o| *o != me && is_osd(*o))
            .collect()
    }

    /// A primary's message is stale when the primary had not yet seen the
    /// map in which our interval began (members may see an interval begin
    /// at different epochs: one that first hears of the PG later starts
    /// its interval later; a primary that has seen our first epoch and
    /// still sends is in the same interval as we are).
    fn stale(&self, sender_epoch: u32) -> bool {
        sender_epoch < self.interval_start
    }

    /// Reloads the log's in-memory view from the store (after the store
    /// refused a transaction whose log entry was already appended here).
    pub(super) fn reload_log(&mut self) {
        if let Some(omap) = self.meta_omap()
            && let Ok(log) = PgLog::load(&omap)
        {
            self.log = log;
        }
        // Erasure coding: the refused change's stashes were not made, the
        // ones it rolled forward are still there, and a split moved some
        // to the children. (A shard's collection says so: `ec` is set by
        // the first map, after a restarted copy's split.)
        if self.coll.shard != shoal_objectstore::CollectionId::NO_SHARD
            && let Ok(stashes) = crate::ec::rollback::list_stashes(self.store.as_ref(), self.coll)
        {
            self.stashes = stashes;
        }
    }

    /// Reloads the missing set from the store (after a split rewrote it).
    pub(super) fn reload_missing(&mut self) {
        if let Some(omap) = self.meta_omap()
            && let Ok(missing) = crate::missing::MissingSet::load(&omap)
        {
            self.missing = missing;
        }
    }

    /// The PG meta object's whole omap as the store has it.
    fn meta_omap(&self) -> Option<std::collections::BTreeMap<Bytes, Bytes>> {
        let omap = self.store.omap_range(
            &self.coll,
            &object::pg_meta_key(),
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
            super::OMAP_ALL,
        );
        omap.ok().map(|o| o.into_iter().collect())
    }

    fn apply_delta(&mut self, (objects, bytes): (i64, i64)) {
        let info = &mut self.log.info;
        info.objects = info.objects.saturating_add_signed(objects);
        info.bytes = info.bytes.saturating_add_signed(bytes);
    }

    // ---- the replica's side -------------------------------------------

    /// A change from the primary, applied atomically with its log entry.
    pub(super) fn rep_op(&mut self, msg: RepOp, data: Bytes, to: ReplyTo) -> Vec<Effect> {
        let epoch = self.epoch();
        if self.stale(msg.epoch) {
            let m = format!(
                "replication from epoch {} but pg {} changed in epoch {}",
                msg.epoch, self.id, self.interval_start
            );
            return vec![rep_reply(to, OsdErrorCode::StaleEpoch, epoch, m)];
        }
        let entry = match LogEntry::decode(&msg.log_entry) {
            Ok(e) => e,
            Err(e) => {
                return vec![rep_reply(
                    to,
                    OsdErrorCode::InvalidArgument,
                    epoch,
                    e.to_string(),
                )];
            }
        };
        let last = self.log.info.last_update;
        if entry.version <= last
            && (entry.version <= self.log.info.log_tail
                || self.log.entries().any(|e| e.version == entry.version))
        {
            // Already applied (a resend after a reconnect).
            return vec![rep_reply(to, OsdErrorCode::Ok, epoch, String::new())];
        }
        if entry.version <= last || entry.version.v != last.v + 1 {
            // Changes apply in order, each the one after our newest: a gap
            // (or an older change we never had) means we missed one. The
            // primary fails what is in flight and peers again.
            let m = format!(
                "pg {}: change {} out of order (ours ends at {last})",
                self.id, entry.version
            );
            return vec![rep_reply(to, OsdErrorCode::Again, epoch, m)];
        }
        if let Some(s) = msg.ec_shard
            && s != u32::from(self.coll.shard)
        {
            // Our copy is another position's shard (we are to be
            // backfilled into ours): applying this part would corrupt it.
            let m = format!(
                "pg {}: a change to shard {s}, but this OSD holds shard {}",
                self.id, self.coll.shard
            );
            return vec![rep_reply(to, OsdErrorCode::Again, epoch, m)];
        }
        let mut txn = match codec::decode(self.coll, &msg.txn, &data) {
            Ok(t) => t,
            Err(e) => return vec![rep_reply(to, OsdErrorCode::InvalidArgument, epoch, e.0)],
        };
        if self.ec.is_some() {
            txn = match self.ec_stash(&entry.key, entry.version, txn) {
                Ok(t) => t,
                Err(e) => return vec![rep_reply(to, OsdErrorCode::Internal, epoch, e)],
            };
            let to = Version {
                epoch: msg.roll_forward_epoch,
                v: msg.roll_forward_v,
            };
            self.roll_forward(to, &mut txn);
        }
        self.apply_delta((msg.objects_delta, msg.bytes_delta));
        self.log
            .append(entry, self.log_limits(), self.coll, &mut txn);
        OsdCounters::add(&self.counters.rep_ops, 1);
        vec![
            Effect::Wrote(data.len() as u64),
            Effect::Apply {
                txn,
                then: Then::AckRep { to, epoch },
            },
        ]
    }

    /// The primary asks what we have (one piece of it).
    pub(super) fn query(&self, msg: PgQuery, to: ReplyTo) -> Vec<Effect> {
        let all = Records {
            log: self.log.entries().map(LogEntry::encode).collect(),
            dups: self.log.dups().map(Dup::encode).collect(),
            missing: self.missing.encode(),
        };
        let (piece, more) = all.piece(msg.piece, self.cfg.peering_piece_bytes);
        let floor = self.rollback_floor();
        let reply = PgInfo {
            pool: self.id.pool,
            pg_seed: self.id.seed,
            epoch: self.epoch(),
            info: self.log.info.encode(),
            log: piece.log,
            activate: false,
            interval_start: msg.interval_start,
            missing: piece.missing,
            backfill: false,
            dups: piece.dups,
            more,
            piece: msg.piece,
            shard: u32::from(self.coll.shard),
            has_rollback_floor: floor.is_some(),
            rollback_floor_epoch: floor.map_or(0, |f| f.epoch),
            rollback_floor_v: floor.map_or(0, |f| f.v),
            strays: self.stray_answers(),
            purge_strays: false,
        };
        vec![Effect::Reply {
            to,
            msg: reply.into(),
            data: Bytes::new(),
            data_crc: None,
        }]
    }

    /// The primary's authoritative log: ours becomes the same (once its
    /// last piece is in).
    pub(super) fn activate(&mut self, mut msg: PgInfo, to: ReplyTo) -> Vec<Effect> {
        let epoch = self.epoch();
        if self.stale(msg.epoch) {
            let m = format!(
                "activation from epoch {} but pg {} changed in epoch {}",
                msg.epoch, self.id, self.interval_start
            );
            return vec![rep_reply(to, OsdErrorCode::StaleEpoch, epoch, m)];
        }
        if msg.more || msg.piece > 0 {
            let piece = Records {
                log: std::mem::take(&mut msg.log),
                dups: std::mem::take(&mut msg.dups),
                missing: std::mem::take(&mut msg.missing),
            };
            let mut so_far = match self.activation_pieces.take() {
                _ if msg.piece == 0 => Records::default(),
                Some((start, next, r)) if start == msg.interval_start && next == msg.piece => r,
                _ => {
                    let m = format!(
                        "pg {}: activation piece {} out of order",
                        self.id, msg.piece
                    );
                    return vec![rep_reply(to, OsdErrorCode::Again, epoch, m)];
                }
            };
            so_far.extend(piece);
            if msg.more {
                let next = msg.piece.saturating_add(1);
                self.activation_pieces = Some((msg.interval_start, next, so_far));
                return vec![rep_reply(to, OsdErrorCode::Ok, epoch, String::new())];
            }
            msg.log = so_far.log;
            msg.dups = so_far.dups;
            msg.missing = so_far.missing;
        }
        self.activation_pieces = None;
        let decoded = PgInfoData::decode(&msg.info).and_then(|info| {
            let entries: Result<Vec<LogEntry>, _> =
                msg.log.iter().map(|b| LogEntry::decode(b)).collect();
            let dups: Result<Vec<Dup>, _> = msg.dups.iter().map(|b| Dup::decode(b)).collect();
            Ok((info, entries?, dups?, MissingSet::decode(&msg.missing)?))
        });
        let (mut info, entries, dups, missing) = match decoded {
            Ok(d) => d,
            Err(e) => {
                return vec![rep_reply(
                    to,
                    OsdErrorCode::InvalidArgument,
                    epoch,
                    e.to_string(),
                )];
            }
        };
        info.last_epoch_started = msg.interval_start;
        let mut txn = Transaction::new();
        // Copies the previous primary left half made will not be finished.
        if let Err(e) = copy::remove_temps(self.store.as_ref(), self.coll, &mut txn) {
            let code = crate::exec::store_error_code(&e);
            return vec![rep_reply(to, code, epoch, e.to_string())];
        }
        if msg.purge_strays {
            self.purge_strays(&mut txn);
        }
        if msg.backfill {
            // Our copy is too old for the log (or, erasure coded, another
            // position's shard, kept as a stray): start from an empty one
            // of our position, and lack every object until the primary
            // pushes it.
            txn = Transaction::new();
            let new = match self.ec.as_ref().and_then(|ec| ec.shard_of(self.whoami)) {
                Some(s) => CollectionId::shard(self.id.pool, self.id.seed, s),
                None => self.coll,
            };
            let begun = self.begin_backfill(new, &entries, info.log_tail, Some(&missing), &mut txn);
            if let Err(e) = begun {
                tracing::error!(pg = %self.id, "{e}");
                return vec![rep_reply(to, OsdErrorCode::Internal, epoch, e)];
            }
        } else if let Err(e) = self.ec_activate(&entries, info.log_tail, &mut txn) {
            tracing::error!(pg = %self.id, "{e}");
            return vec![rep_reply(to, OsdErrorCode::Internal, epoch, e)];
        }
        let limits = self.cfg.log_limits;
        self.log
            .replace(info, entries, dups, limits, self.coll, &mut txn);
        self.missing.replace(missing, self.coll, &mut txn);
        if self.shards().contains(&self.whoami) {
            self.state = State::ReplicaActive;
        }
        vec![Effect::Apply {
            txn,
            then: Then::AckRep { to, epoch },
        }]
    }

    /// Recovery: install one step of the primary's copy of an object.
    pub(super) fn push(&mut self, msg: PgPush, data: Bytes, to: ReplyTo) -> Vec<Effect> {
        let epoch = self.epoch();
        if let Err(why) = self.push_current(msg.epoch) {
            return vec![rep_reply(to, OsdErrorCode::StaleEpoch, epoch, why)];
        }
        match self
            .backend
            .install_step(self.store.as_ref(), self.coll, &msg, data)
        {
            Ok(txn) => {
                let (_, after) = copy::bounds(&msg);
                if !msg.exists || copy::is_complete(&after) {
                    // The transaction takes the object out of the persisted set.
                    self.pushed(&msg);
                }
                vec![Effect::Apply {
                    txn,
                    then: Then::AckRep { to, epoch },
                }]
            }
            Err(e) => {
                tracing::debug!(pg = %self.id, "refused a pushed step: {e}");
                vec![rep_reply(to, OsdErrorCode::InvalidArgument, epoch, e)]
            }
        }
    }

    /// Recovery: install several whole objects the primary pushed at once,
    /// in one transaction (all of them or, refused, none).
    pub(super) fn push_batch(&mut self, msg: PgPushBatch, data: Bytes, to: ReplyTo) -> Vec<Effect> {
        let epoch = self.epoch();
        if let Err(why) = self.push_current(msg.epoch) {
            return vec![rep_reply(to, OsdErrorCode::StaleEpoch, epoch, why)];
        }
        match self.install_batch(&msg, data) {
            Ok(txn) => {
                for push in &msg.objects {
                    self.pushed(push);
                }
                vec![Effect::Apply {
                    txn,
                    then: Then::AckRep { to, epoch },
                }]
            }
            Err(e) => {
                tracing::debug!(pg = %self.id, "refused a pushed batch: {e}");
                vec![rep_reply(to, OsdErrorCode::InvalidArgument, epoch, e)]
            }
        }
    }

    /// The transaction that installs every object of a batch.
    fn install_batch(&self, msg: &PgPushBatch, data: Bytes) -> Result<Transaction, String> {
        if self.ec.is_some() {
            return Err("an erasure-coded PG takes no batched pushes".into());
        }
        if msg.objects.len() != msg.data_lengths.len() {
            return Err("push batch: objects and data lengths differ in number".into());
        }
        let total = msg
            .data_lengths
            .iter()
            .try_fold(0u64, |a, n| a.checked_add(*n));
        if total != Some(data.len() as u64) {
            return Err(format!(
                "push batch: lengths add up to {total:?}, the data part holds {} bytes",
                data.len()
            ));
        }
        let mut seen = BTreeSet::new();
        let mut txn = Transaction::new();
        let mut at = 0usize;
        for (push, len) in msg.objects.iter().zip(&msg.data_lengths) {
            let key = object::wire_key(push.hash, &push.name, push.snap);
            let (before, after) = copy::bounds(push);
            if push.exists && !(before.first && copy::is_complete(&after)) {
                return Err(format!("push batch: {key} is not a whole copy"));
            }
            if !seen.insert(key.clone()) {
                return Err(format!("push batch: {key} twice"));
            }
            // `len` fits: the lengths add up to the data part's.
            let end = at + *len as usize;
            let part = data.slice(at..end);
            at = end;
            let t = self
                .backend
                .install_step(self.store.as_ref(), self.coll, push, part)?;
            txn.append(t);
        }
        Ok(txn)
    }

    /// A push from epoch `sent` may be installed: a copy from an interval
    /// that ended may be older than what this interval wrote since.
    fn push_current(&self, sent: u32) -> Result<(), String> {
        if sent < self.interval_start {
            return Err(format!(
                "push from epoch {sent} but pg {} changed in epoch {}",
                self.id, self.interval_start
            ));
        }
        Ok(())
    }

    /// The last step of `push` is being installed: the object leaves the
    /// missing set (its transaction takes it out of the persisted one).
    fn pushed(&mut self, push: &PgPush) {
        self.missing
            .remove(&object::wire_key(push.hash, &push.name, push.snap));
        OsdCounters::add(&self.counters.recovered, 1);
    }

    /// Recovery: send the next step of our copy of an object to the primary.
    pub(super) fn pull(&self, msg: PgPull, to: ReplyTo) -> Vec<Effect> {
        let key = object::wire_key(msg.hash, &msg.name, msg.snap);
        let before = msg.progress.clone().unwrap_or_else(copy::start);
        let limits = self
            .cfg
            .copy_limits
            .narrowed(msg.data_bytes_max, msg.omap_bytes_max);
        let epoch = self.epoch();
        match self
            .backend
            .read_step(self.store.as_ref(), self.coll, &key, &before, limits)
        {
            Ok((mut push, data)) => {
                push.pool = self.id.pool;
                push.pg_seed = self.id.seed;
                push.epoch = epoch;
                vec![Effect::Reply {
                    to,
                    msg: push.into(),
                    data,
                    data_crc: None,
                }]
            }
            Err(e) => {
                let code = crate::exec::store_error_code(&e);
                vec![rep_reply(to, code, epoch, e.to_string())]
            }
        }
    }

    // ---- the primary's replication ------------------------------------

    /// Logs a change, records it in flight and hands it to the backend:
    /// this OSD's transaction, then each other member's part.
    pub(super) fn submit_change(&mut self, c: NewChange, to: ReplyTo) -> Vec<Effect> {
        let NewChange {
            entry,
            txn: data_txn,
            delta,
            reply,
            out,
            received,
        } = c;
        let epoch = self.epoch();
        let version = entry.version;
        let members = self.other_shards();
        let member_shards: Vec<u8> = match &self.ec {
            Some(ec) => members.iter().filter_map(|o| ec.shard_of(*o)).collect(),
            None => Vec::new(),
        };
        let rep = RepOp {
            pool: self.id.pool,
            pg_seed: self.id.seed,
            epoch,
            interval_start: self.interval_start,
            log_entry: entry.encode(),
            txn: Vec::new(),
            objects_delta: delta.0,
            bytes_delta: delta.1,
            roll_forward_epoch: self.ec_committed.epoch,
            roll_forward_v: self.ec_committed.v,
            ec_shard: None,
        };
        let sub = match self.backend.submit(Change {
            coll: self.coll,
            txn: data_txn,
            members: &members,
            member_shards: &member_shards,
            rep,
            received,
        }) {
            Ok(s) => s,
            Err(e) => return vec![op_error(to, OsdErrorCode::Internal, epoch, e.0)],
        };
        let mut txn = sub.local;
        if self.ec.is_some() {
            txn = match self.ec_stash(&entry.key, version, txn) {
                Ok(t) => t,
                Err(e) => return vec![op_error(to, OsdErrorCode::Internal, epoch, e)],
            };
            self.roll_forward(self.ec_committed, &mut txn);
        }
        self.apply_delta(delta);
        let reqid = entry.reqid.clone();
        let key = entry.key.clone();
        self.log
            .append(entry, self.log_limits(), self.coll, &mut txn);
        if let Some(id) = &reqid {
            self.inflight_reqids.insert(id.clone(), version);
        }
        self.inflight.insert(
            version,
            InFlight {
                key,
                reqid,
                waiting: members,
                local_done: false,
                reply,
                data: out,
                responders: if to == ReplyTo::NONE {
                    Vec::new()
                } else {
                    vec![to]
                },
            },
        );
        let mut fx = Vec::with_capacity(1 + sub.shards.len());
        fx.push(Effect::Apply {
            txn,
            then: Then::Local(version),
        });
        // Backfill targets get every change too: they hold the objects
        // already copied (a change to one not copied yet waits for it).
        fx.extend(
            sub.shards
                .into_iter()
                .map(|write| Effect::Replicate { version, write }),
        );
        fx
    }

    /// The store refused our own copy of change `version` (nothing of it
    /// was applied): the log's view goes back to the store's, and the
    /// change fails.
    pub(super) fn local_refused(
        &mut self,
        version: Version,
        code: OsdErrorCode,
        why: String,
    ) -> Vec<Effect> {
        self.reload_log();
        let Some(f) = self.inflight.remove(&version) else {
            return Vec::new();
        };
        if let Some(id) = &f.reqid {
            self.inflight_reqids.remove(id);
        }
        let epoch = self.epoch();
        f.responders
            .into_iter()
            .map(|to| op_error(to, code, epoch, why.clone()))
            .collect()
    }

    /// A member acked (or failed) a change.
    pub(super) fn rep_acked(
        &mut self,
        version: Version,
        from: i32,
        r: Result<(), (Option<OsdErrorCode>, String)>,
    ) -> Vec<Effect> {
        match r {
            Ok(()) => {
                if let Some(f) = self.inflight.get_mut(&version) {
                    f.waiting.retain(|o| *o != from);
                }
                self.complete_ready()
            }
            // The replica did not answer (timeout, lost connection):
            // whether it applied the change is unknown, and a resend on a
            // new connection could reach it out of order. Peer again,
            // which makes the members agree; clients resend and the log
            // recognises what was applied.
            Err((None, e)) => self.replica_refused(version, from, OsdErrorCode::Again, e),
            Err((Some(code), e)) => self.replica_refused(version, from, code, e),
        }
    }

    /// A replica could not apply a change (out of space, a failing
    /// device): the change fails, with every later one in flight, and the
    /// PG peers again so the members' copies agree.
    fn replica_refused(
        &mut self,
        version: Version,
        from: i32,
        code: OsdErrorCode,
        e: String,
    ) -> Vec<Effect> {
        if !self.inflight.contains_key(&version) {
            // Already failed with an earlier change: peering is under way.
            return Vec::new();
        }
        tracing::warn!(pg = %self.id, %version, osd = from, ?code, "replica refused a change: {e}");
        let msg = format!("osd.{from} could not apply the change: {e}");
        let mut fx = self.fail_inflight(code, &msg);
        fx.push(Effect::StartPeering);
        fx
    }

    /// Fails every change in flight (its clients resend; the log
    /// recognises what was applied), so peering starts from changes every
    /// member has answered.
    pub(super) fn fail_inflight(&mut self, code: OsdErrorCode, why: &str) -> Vec<Effect> {
        let epoch = self.epoch();
        self.inflight_reqids.clear();
        std::mem::take(&mut self.inflight)
            .into_values()
            .flat_map(|f| f.responders)
            .map(|to| op_error(to, code, epoch, why.to_string()))
            .collect()
    }

    /// Our own copy of a change is durable (or the store failed).
    pub(super) fn local_committed(
        &mut self,
        version: Version,
        r: Result<(), String>,
    ) -> Vec<Effect> {
        if let Err(e) = r {
            // A failed commit poisons the store: nothing more is durable here.
            tracing::error!(pg = %self.id, %version, "local commit failed: {e}");
            return Vec::new();
        }
        if let Some(f) = self.inflight.get_mut(&version) {
            f.local_done = true;
        }
        self.complete_ready()
    }

    /// Answers, in version order, the changes durable on every member.
    fn complete_ready(&mut self) -> Vec<Effect> {
        let mut fx = Vec::new();
        while let Some(entry) = self.inflight.first_entry() {
            let f = entry.get();
            if !f.local_done || !f.waiting.is_empty() {
                break;
            }
            let (version, f) = entry.remove_entry();
            if self.ec.is_some() {
                // Every member has it: no one will roll it back.
                self.ec_committed = self.ec_committed.max(version);
            }
            if let Some(id) = &f.reqid {
                self.inflight_reqids.remove(id);
                if self.observed {
                    fx.push(Effect::Acked(AckedWrite {
                        osd: self.whoami,
                        pg: self.id,
                        hash: f.key.hash,
                        interval_start: self.interval_start,
                        version,
                        reqid: id.clone(),
                    }));
                }
            }
            let mut first = true;
            for to in f.responders {
                let mut reply = f.reply.clone();
                let data = if first { f.data.clone() } else { Bytes::new() };
                if !first {
                    reply.replayed = true;
                    reply.results.clear();
                }
                first = false;
                fx.push(Effect::Reply {
                    to,
                    msg: reply.into(),
                    data,
                    data_crc: None,
                });
            }
            // Reads that waited for this change see it now.
            if !self.inflight.values().any(|g| g.key == f.key) {
                fx.push(Effect::RunWaiting(f.key));
            }
        }
        fx
    }
}

mod answers;
mod ec_ops;
mod ec_rollback;
mod map;
mod ops;
mod peering;
mod purge;
mod snaptrim;
mod strays;

pub(super) use answers::SCRUB_LIST_CHUNK;

/// The trimmed-snapshot runs a PG's meta object records, from its bytes
/// (for the fuzzers, `crate::fuzzing`).
#[doc(hidden)]
pub fn decode_trimmed_runs(b: &[u8]) -> Vec<(u64, u64)> {
    snaptrim::decode_trimmed(b)
}
pub(super) use ops::Op;
pub(crate) use snaptrim::{SNAP_TRIMMED_KEY, decode_trimmed};

#[cfg(test)]
mod tests;

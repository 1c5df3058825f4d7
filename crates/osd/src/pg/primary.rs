//! The primary's side of the write and read path: order, execute, log,
//! replicate, and answer once every acting member has the change durable.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use shoal_net::Responder;
use shoal_proto::{OsdErrorCode, OsdOpReply, PgList, PgListReply, RepOp};

use super::{ClientOp, InFlight, Pg, PgEvent, State};
use crate::codec;
use crate::ctx::OsdCounters;
use crate::exec::{self, ExecInput};
use crate::log::{LogEntry, LogOp, ReqId, Version};
use crate::object::{self, split_key};

/// Answers an op with an error and the OSD's epoch.
pub(crate) async fn reply_error(r: Responder, code: OsdErrorCode, epoch: u32, message: String) {
    let reply = OsdOpReply {
        code: code as u32,
        message,
        epoch,
        ..OsdOpReply::default()
    };
    let _ = r.reply(reply, Bytes::new()).await;
}

fn concat(chunks: Vec<Bytes>) -> Bytes {
    match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.into_iter().next().unwrap_or_default(),
        _ => {
            let mut b = BytesMut::with_capacity(chunks.iter().map(Bytes::len).sum());
            for c in chunks {
                b.extend_from_slice(&c);
            }
            b.freeze()
        }
    }
}

/// Why a client op waits for its object.
enum Blocked {
    /// The object is missing here or on a member: it is recovered first.
    Recovery(shoal_objectstore::ObjectKey),
    /// A read, of an object with changes in flight: it runs once they are.
    InFlight(shoal_objectstore::ObjectKey),
}

impl Pg {
    pub(super) async fn refuse_wrong_primary(&mut self, op: ClientOp) {
        let epoch = self.epoch();
        reply_error(
            op.responder,
            OsdErrorCode::WrongPrimary,
            epoch,
            format!(
                "osd.{} is not the primary of pg {} in epoch {epoch}",
                self.whoami(),
                self.id
            ),
        )
        .await;
    }

    /// A client op: wait until active, fence by interval, dedup by request
    /// id, execute, and (for changes) log and replicate.
    pub(super) async fn client_op(&mut self, op: ClientOp) {
        if !self.is_primary() {
            return self.refuse_wrong_primary(op).await;
        }
        let epoch = self.epoch();
        if op.msg.epoch < self.interval_start {
            let msg = format!(
                "op placed in epoch {} but pg {} changed in epoch {}",
                op.msg.epoch, self.id, self.interval_start
            );
            return reply_error(op.responder, OsdErrorCode::StaleEpoch, epoch, msg).await;
        }
        if self.state != State::Active {
            self.waiting.push_back(op);
            return;
        }
        self.execute(op).await;
    }

    /// Answers the queued ops placed before the current interval: they
    /// would be refused once the PG is active, and their clients resend
    /// sooner when told now.
    pub(super) async fn refuse_stale_waiting(&mut self, why: &str) {
        let epoch = self.epoch();
        let (stale, current): (VecDeque<ClientOp>, VecDeque<ClientOp>) =
            std::mem::take(&mut self.waiting)
                .into_iter()
                .partition(|op| op.msg.epoch < self.interval_start);
        self.waiting = current;
        for op in stale {
            reply_error(
                op.responder,
                OsdErrorCode::StaleEpoch,
                epoch,
                why.to_string(),
            )
            .await;
        }
    }

    /// Runs the ops that waited for the PG to become active.
    pub(super) async fn drain_waiting(&mut self) {
        while self.state == State::Active {
            let Some(op) = self.waiting.pop_front() else {
                break;
            };
            self.execute(op).await;
        }
    }

    /// The object `op` is for, when the op must wait: for the object's
    /// recovery, or (a read) for the changes to it in flight. A read must
    /// not see a change before every member has it: a crash of the primary
    /// would lose it, and a later read would see the object go back.
    fn blocked_on(&self, op: &ClientOp) -> Option<Blocked> {
        let pool = self.pool.as_ref()?;
        let key = object::object_key(pool, &op.msg.nspace, &op.msg.oid).ok()?;
        let mutating = exec::is_mutating(&op.msg.ops);
        if let Some(rs) = &self.recovery
            && rs.blocks(self.whoami(), &key, mutating)
        {
            return Some(Blocked::Recovery(key));
        }
        let uncommitted = !mutating && self.inflight.values().any(|f| f.key == key);
        uncommitted.then_some(Blocked::InFlight(key))
    }

    pub(super) async fn execute(&mut self, op: ClientOp) {
        match self.blocked_on(&op) {
            Some(Blocked::Recovery(key)) => return self.wait_for_object(key, op),
            Some(Blocked::InFlight(key)) => {
                // Run again when the change in flight completes.
                self.waiting_for_object
                    .entry(key)
                    .or_default()
                    .push_back(op);
                return;
            }
            None => {}
        }
        let epoch = self.epoch();
        let ClientOp {
            msg,
            data,
            peer,
            responder,
        } = op;
        if let Err(e) = exec::validate(&msg.ops, data.len()) {
            OsdCounters::add(&self.ctx.counters.refused, 1);
            return reply_error(responder, e.code, epoch, e.to_string()).await;
        }
        let Some(pool) = self.pool.clone() else {
            let m = format!("pool {} does not exist", self.id.pool);
            return reply_error(responder, OsdErrorCode::NoPool, epoch, m).await;
        };
        let key = match object::object_key(&pool, &msg.nspace, &msg.oid) {
            Ok(k) => k,
            Err(e) => {
                return reply_error(
                    responder,
                    OsdErrorCode::InvalidArgument,
                    epoch,
                    e.to_string(),
                )
                .await;
            }
        };
        let mutating = exec::is_mutating(&msg.ops);
        let reqid = ReqId {
            entity: peer.name.to_string(),
            inc: msg.client_inc,
            tid: msg.tid,
        };
        if mutating {
            // In flight first: its log entry is already in our log, but it
            // is not an answer until every member has it (a crash of ours
            // before then loses it — the simulation found this).
            if let Some(v) = self.inflight_reqids.get(&reqid)
                && let Some(f) = self.inflight.get_mut(v)
            {
                f.responders.push(responder);
                return;
            }
            if let Some((version, code)) = self.log.lookup(&reqid) {
                // Already applied: the original result, not a second change.
                if let Some(obs) = &self.ctx.observer
                    && code == 0
                {
                    obs.write_acked(&crate::ctx::AckedWrite {
                        osd: self.whoami(),
                        pg: self.id,
                        interval_start: self.interval_start,
                        version,
                        reqid: reqid.clone(),
                    });
                }
                let reply = OsdOpReply {
                    code,
                    epoch,
                    version: version.v,
                    replayed: true,
                    ..OsdOpReply::default()
                };
                let _ = responder.reply(reply, Bytes::new()).await;
                return;
            }
        }
        // A full OSD still takes ops that only free space (as Ceph lets
        // deletes through), or nobody could make room again.
        let frees_only = msg.ops.iter().all(|o| {
            matches!(
                shoal_proto::OpCode::from_u32(o.code),
                Some(
                    shoal_proto::OpCode::Remove
                        | shoal_proto::OpCode::RmXattr
                        | shoal_proto::OpCode::OmapRmKeys
                        | shoal_proto::OpCode::OmapClear
                )
            ) || !shoal_proto::OpCode::from_u32(o.code).is_some_and(shoal_proto::OpCode::is_write)
        });
        if mutating && !frees_only && self.ctx.full.load(std::sync::atomic::Ordering::Relaxed) {
            let m = format!(
                "osd.{} is full (over {:.0}% used)",
                self.whoami(),
                self.ctx.cfg.full_ratio * 100.0
            );
            return reply_error(responder, OsdErrorCode::NoSpace, epoch, m).await;
        }
        let version = self.log.next_version(epoch);
        let input = ExecInput {
            store: self.ctx.store.as_ref(),
            coll: self.coll,
            key: key.clone(),
            ops: &msg.ops,
            data: data.clone(),
            new_version: version.v,
            mtime_ms: shoal_net::now_ms(),
        };
        let outcome = match shoal_net::runtime::blocking(|| exec::execute(input)) {
            Ok(o) => o,
            Err(e) => {
                let reply = OsdOpReply {
                    code: e.code as u32,
                    message: e.to_string(),
                    epoch,
                    failed_op: e.failed_op,
                    ..OsdOpReply::default()
                };
                let _ = responder.reply(reply, Bytes::new()).await;
                return;
            }
        };
        let out = concat(outcome.data);
        OsdCounters::add(&self.ctx.counters.ops, 1);
        OsdCounters::add(&self.ctx.counters.read_bytes, out.len() as u64);
        let reply = OsdOpReply {
            code: 0,
            epoch,
            version: outcome.version,
            results: outcome.results,
            ..OsdOpReply::default()
        };
        if !outcome.mutates {
            let _ = responder.reply(reply, out).await;
            return;
        }
        OsdCounters::add(&self.ctx.counters.write_ops, 1);
        OsdCounters::add(&self.ctx.counters.write_bytes, data.len() as u64);
        self.ctx.note_written(data.len() as u64);
        let removed = outcome.txn.ops().last().is_some_and(is_remove);
        let entry = LogEntry {
            version,
            op: if removed {
                LogOp::Delete
            } else {
                LogOp::Modify
            },
            key,
            reqid: Some(reqid.clone()),
            code: 0,
        };
        self.commit_change(
            entry,
            outcome.txn,
            (outcome.delta.objects, outcome.delta.bytes),
            reply,
            out,
            responder,
        )
        .await;
    }

    /// Logs and applies a change locally and sends it to every replica.
    async fn commit_change(
        &mut self,
        entry: LogEntry,
        data_txn: shoal_objectstore::Transaction,
        delta: (i64, i64),
        reply: OsdOpReply,
        out: Bytes,
        responder: Responder,
    ) {
        let epoch = self.epoch();
        let version = entry.version;
        let encoded = match codec::encode(self.coll, &data_txn) {
            Ok(e) => e,
            Err(e) => return reply_error(responder, OsdErrorCode::Internal, epoch, e.0).await,
        };
        let mut txn = data_txn;
        self.apply_delta(delta);
        let reqid = entry.reqid.clone();
        let key = entry.key.clone();
        let log_bytes = entry.encode();
        self.log
            .append(entry, self.ctx.cfg.log_limits, self.coll, &mut txn);
        let ticket = match shoal_net::runtime::blocking(|| self.ctx.store.queue_transaction(txn)) {
            Ok(t) => t,
            Err(e) => {
                // Nothing was applied: the store checks before it changes anything.
                // Reload the log's in-memory view from the store to undo the append.
                self.reload_log();
                let code = exec::store_error_code(&e);
                return reply_error(responder, code, epoch, e.to_string()).await;
            }
        };
        let events = self.events.clone();
        ticket.on_commit(move |r| {
            let _ = events.send(PgEvent::LocalCommitted {
                version,
                result: r.map_err(|e| e.to_string()),
            });
        });
        let (ops, chunks) = encoded;
        let rep_data = concat(chunks);
        let rep = RepOp {
            pool: self.id.pool,
            pg_seed: self.id.seed,
            epoch,
            interval_start: self.interval_start,
            log_entry: log_bytes,
            txn: ops,
            objects_delta: delta.0,
            bytes_delta: delta.1,
        };
        // Backfill targets get every change too: they hold the objects
        // already copied (a change to one not copied yet waits for it).
        let replicas = self.other_shards();
        for r in &replicas {
            self.send_rep(*r, version, rep.clone(), rep_data.clone())
                .await;
        }
        if let Some(id) = &reqid {
            self.inflight_reqids.insert(id.clone(), version);
        }
        self.inflight.insert(
            version,
            InFlight {
                key: key.clone(),
                reqid,
                waiting: replicas,
                local_done: false,
                reply,
                data: out,
                responders: vec![responder],
            },
        );
    }

    fn apply_delta(&mut self, (objects, bytes): (i64, i64)) {
        let info = &mut self.log.info;
        info.objects = info.objects.saturating_add_signed(objects);
        info.bytes = info.bytes.saturating_add_signed(bytes);
    }

    pub(super) fn reload_log(&mut self) {
        let store = &self.ctx.store;
        let omap = store.omap_range(
            &self.coll,
            &object::pg_meta_key(),
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
            super::OMAP_ALL,
        );
        if let Ok(omap) = omap
            && let Ok(log) = crate::log::PgLog::load(&omap.into_iter().collect())
        {
            self.log = log;
        }
    }

    /// Queues the change on the replica's connection (in order with the
    /// PG's earlier changes) and awaits its ack in a task.
    async fn send_rep(&mut self, osd: i32, version: Version, rep: RepOp, data: Bytes) {
        let events = self.events.clone();
        let timeout = self.ctx.cfg.peer_timeout;
        let conn = match self.conn(osd).await {
            Ok(c) => c,
            Err(e) => {
                let _ = events.send(PgEvent::RepAcked {
                    version,
                    from: osd,
                    result: Err((None, e)),
                });
                return;
            }
        };
        let pending = conn.submit(rep, data).await;
        tokio::spawn(async move {
            let result = match pending {
                Ok(p) => match p.wait(timeout).await {
                    Ok(reply) => match reply.msg {
                        shoal_proto::Message::RepOpReply(r) if r.code == 0 => Ok(()),
                        shoal_proto::Message::RepOpReply(r) => {
                            Err((Some(OsdErrorCode::from_u32(r.code)), r.message))
                        }
                        other => Err((
                            Some(OsdErrorCode::Internal),
                            format!("unexpected reply {:?}", other.msg_type()),
                        )),
                    },
                    Err(e) => Err((None, e.to_string())),
                },
                Err(e) => Err((None, e.to_string())),
            };
            let _ = events.send(PgEvent::RepAcked {
                version,
                from: osd,
                result,
            });
        });
    }

    pub(super) async fn conn(&mut self, osd: i32) -> Result<shoal_net::Connection, String> {
        if let Some(c) = self.conns.get(&osd)
            && !c.is_closed()
        {
            return Ok(c.clone());
        }
        let map = self.map.clone().ok_or_else(|| "no map yet".to_string())?;
        let c = self.ctx.peer(&map, osd).await?;
        self.conns.insert(osd, c.clone());
        Ok(c)
    }

    pub(super) async fn rep_acked(
        &mut self,
        version: Version,
        from: i32,
        r: Result<(), (Option<OsdErrorCode>, String)>,
    ) {
        match r {
            Ok(()) => {}
            Err((None, e)) => {
                // The replica did not answer (timeout, lost connection):
                // whether it applied the change is unknown, and a resend on
                // a new connection could reach it out of order. Peer again,
                // which makes the members agree; clients resend and the log
                // recognises what was applied.
                return self
                    .replica_refused(version, from, OsdErrorCode::Again, e)
                    .await;
            }
            Err((Some(code), e)) => {
                return self.replica_refused(version, from, code, e).await;
            }
        }
        if let Some(f) = self.inflight.get_mut(&version) {
            f.waiting.retain(|o| *o != from);
        }
        self.complete_ready().await;
    }

    /// A replica could not apply a change (out of space, a failing
    /// device): the change fails, with every later one in flight, and the
    /// PG peers again so the members' copies agree.
    async fn replica_refused(
        &mut self,
        version: Version,
        from: i32,
        code: OsdErrorCode,
        e: String,
    ) {
        if !self.inflight.contains_key(&version) {
            // Already failed with an earlier change: peering is under way.
            return;
        }
        tracing::warn!(pg = %self.id, %version, osd = from, ?code, "replica refused a change: {e}");
        let msg = format!("osd.{from} could not apply the change: {e}");
        self.fail_inflight(code, &msg).await;
        self.start_peering().await;
    }

    /// Fails every change in flight (its clients resend; the log
    /// recognises what was applied), so peering starts from changes every
    /// member has answered.
    pub(super) async fn fail_inflight(&mut self, code: OsdErrorCode, why: &str) {
        let epoch = self.epoch();
        let failed: Vec<InFlight> = std::mem::take(&mut self.inflight).into_values().collect();
        self.inflight_reqids.clear();
        for f in failed {
            for r in f.responders {
                reply_error(r, code, epoch, why.to_string()).await;
            }
        }
    }

    pub(super) async fn local_committed(&mut self, version: Version, r: Result<(), String>) {
        if let Err(e) = r {
            // A failed commit poisons the store: nothing more is durable here.
            tracing::error!(pg = %self.id, %version, "local commit failed: {e}");
            return;
        }
        if let Some(f) = self.inflight.get_mut(&version) {
            f.local_done = true;
        }
        self.complete_ready().await;
    }

    /// Answers, in version order, the changes durable on every member.
    async fn complete_ready(&mut self) {
        while let Some(entry) = self.inflight.first_entry() {
            let f = entry.get();
            if !f.local_done || !f.waiting.is_empty() {
                break;
            }
            let (version, f) = entry.remove_entry();
            if let Some(id) = &f.reqid {
                self.inflight_reqids.remove(id);
                if let Some(obs) = &self.ctx.observer {
                    obs.write_acked(&crate::ctx::AckedWrite {
                        osd: self.whoami(),
                        pg: self.id,
                        interval_start: self.interval_start,
                        version,
                        reqid: id.clone(),
                    });
                }
            }
            let mut first = true;
            for r in f.responders {
                let mut reply = f.reply.clone();
                let data = if first { f.data.clone() } else { Bytes::new() };
                if !first {
                    reply.replayed = true;
                    reply.results.clear();
                }
                first = false;
                let _ = r.reply(reply, data).await;
            }
            // Reads that waited for this change see it now.
            if !self.inflight.values().any(|g| g.key == f.key) {
                self.run_waiting_for(&f.key).await;
            }
        }
    }

    /// A page of the PG's objects, in hash order.
    pub(super) async fn list(&mut self, from_osd: bool, msg: PgList, responder: Responder) {
        let epoch = self.epoch();
        let fail = |code: OsdErrorCode, message: String| PgListReply {
            code: code as u32,
            message,
            epoch,
            ..PgListReply::default()
        };
        if from_osd {
            // Recovery lists a member's own copy, whatever its role.
        } else if !self.is_primary() {
            let m = format!("osd.{} is not the primary of pg {}", self.whoami(), self.id);
            let _ = responder
                .reply(fail(OsdErrorCode::WrongPrimary, m), Bytes::new())
                .await;
            return;
        }
        if !from_osd && (self.state != State::Active || !self.missing.is_empty()) {
            let m = format!("pg {} is not active, or its primary is recovering", self.id);
            let _ = responder
                .reply(fail(OsdErrorCode::Again, m), Bytes::new())
                .await;
            return;
        }
        let max = msg.max.clamp(1, self.ctx.cfg.list_max) as usize;
        let start = msg
            .has_cursor
            .then(|| shoal_objectstore::ObjectKey::new(msg.cursor_hash, msg.cursor_name.clone()));
        let listing = shoal_net::runtime::blocking(|| {
            self.ctx
                .store
                .list_objects(&self.coll, start.as_ref(), max + 1)
        });
        let reply = match listing {
            Ok(l) => {
                let mut reply = PgListReply {
                    epoch,
                    ..PgListReply::default()
                };
                let mut bytes = 0usize;
                for (taken, k) in l.objects.iter().enumerate() {
                    // Names run to 2 KiB: a page stops short of the
                    // control part's limit whatever they are.
                    bytes += k.name.len() + 8;
                    if taken == max || (taken > 0 && bytes > LIST_REPLY_BYTES_MAX) {
                        reply.more = true;
                        reply.next_hash = k.hash;
                        reply.next_name = k.name.clone();
                        break;
                    }
                    if let Some((ns, name)) = split_key(k) {
                        reply.nspaces.push(ns);
                        reply.names.push(name);
                    }
                }
                if !reply.more
                    && let Some(next) = &l.next
                {
                    reply.more = true;
                    reply.next_hash = next.hash;
                    reply.next_name = next.name.clone();
                }
                reply
            }
            Err(e) => fail(exec::store_error_code(&e), e.to_string()),
        };
        let _ = responder.reply(reply, Bytes::new()).await;
    }
}

/// Bytes of names one listing page carries at most.
const LIST_REPLY_BYTES_MAX: usize = 512 << 10;

fn is_remove(op: &shoal_objectstore::Op) -> bool {
    matches!(op, shoal_objectstore::Op::Remove(..))
}

//! The primary's side of the write and read path: order, execute, log,
//! replicate, and answer once every acting member has the change durable.

use std::collections::VecDeque;

use bytes::Bytes;
use shoal_net::Responder;
use shoal_proto::{OsdErrorCode, OsdOpReply, PgList, PgListReply};

use super::backend::ShardWrite;
use super::{ClientOp, Pg, PgEvent, State, engine};
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

/// Why a client op waits for its object.
enum Blocked {
    /// The object is missing here or on a member: it is recovered first.
    Recovery(shoal_objectstore::ObjectKey),
    /// A read, of an object with changes in flight: it runs once they are.
    InFlight(shoal_objectstore::ObjectKey),
}

impl Pg {
    pub(super) async fn refuse_wrong_primary(&mut self, op: ClientOp) {
        let epoch = self.core.epoch();
        reply_error(
            op.responder,
            OsdErrorCode::WrongPrimary,
            epoch,
            format!(
                "osd.{} is not the primary of pg {} in epoch {epoch}",
                self.core.whoami(),
                self.core.id
            ),
        )
        .await;
    }

    /// A client op: wait until active, fence by interval, dedup by request
    /// id, execute, and (for changes) log and replicate.
    pub(super) async fn client_op(&mut self, op: ClientOp) {
        if !self.core.is_primary() {
            return self.refuse_wrong_primary(op).await;
        }
        let epoch = self.core.epoch();
        if op.msg.epoch < self.core.interval_start {
            let msg = format!(
                "op placed in epoch {} but pg {} changed in epoch {}",
                op.msg.epoch, self.core.id, self.core.interval_start
            );
            return reply_error(op.responder, OsdErrorCode::StaleEpoch, epoch, msg).await;
        }
        if self.core.state != State::Active {
            self.waiting.push_back(op);
            return;
        }
        self.execute(op).await;
    }

    /// Answers the queued ops placed before the current interval: they
    /// would be refused once the PG is active, and their clients resend
    /// sooner when told now.
    pub(super) async fn refuse_stale_waiting(&mut self, why: &str) {
        let epoch = self.core.epoch();
        let (stale, current): (VecDeque<ClientOp>, VecDeque<ClientOp>) =
            std::mem::take(&mut self.waiting)
                .into_iter()
                .partition(|op| op.msg.epoch < self.core.interval_start);
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
        while self.core.state == State::Active {
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
        let pool = self.core.pool.as_ref()?;
        let key = object::object_key(pool, &op.msg.nspace, &op.msg.oid).ok()?;
        let mutating = exec::is_mutating(&op.msg.ops);
        if let Some(rs) = &self.recovery
            && rs.blocks(self.core.whoami(), &key, mutating)
        {
            return Some(Blocked::Recovery(key));
        }
        let uncommitted = !mutating && self.core.inflight.values().any(|f| f.key == key);
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
        let epoch = self.core.epoch();
        let ClientOp {
            msg,
            data,
            data_crc,
            peer,
            responder,
        } = op;
        if let Err(e) = exec::validate(&msg.ops, data.len()) {
            OsdCounters::add(&self.ctx.counters.refused, 1);
            return reply_error(responder, e.code, epoch, e.to_string()).await;
        }
        let Some(pool) = self.core.pool.clone() else {
            let m = format!("pool {} does not exist", self.core.id.pool);
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
            if let Some(v) = self.core.inflight_reqids.get(&reqid)
                && let Some(f) = self.core.inflight.get_mut(v)
            {
                self.next_reply += 1;
                f.responders.push(engine::ReplyTo(self.next_reply));
                self.replies.insert(self.next_reply, responder);
                return;
            }
            if let Some((version, code)) = self.core.log.lookup(&reqid) {
                // Already applied: the original result, not a second change.
                if let Some(obs) = &self.ctx.observer
                    && code == 0
                {
                    obs.write_acked(&crate::ctx::AckedWrite {
                        osd: self.core.whoami(),
                        pg: self.core.id,
                        interval_start: self.core.interval_start,
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
                self.core.whoami(),
                self.ctx.cfg.full_ratio * 100.0
            );
            return reply_error(responder, OsdErrorCode::NoSpace, epoch, m).await;
        }
        let version = self.core.log.next_version(epoch);
        let input = ExecInput {
            store: self.ctx.store.as_ref(),
            coll: self.core.coll,
            key: key.clone(),
            ops: &msg.ops,
            data: data.clone(),
            new_version: version.v,
            mtime_ms: shoal_net::now_ms(),
        };
        let backend = std::sync::Arc::clone(&self.core.backend);
        let outcome = match shoal_net::runtime::blocking(|| backend.execute(input)) {
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
        let out = super::backend::concat(outcome.data);
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
        let to = self.token(responder);
        let change = engine::NewChange {
            entry,
            txn: outcome.txn,
            delta: (outcome.delta.objects, outcome.delta.bytes),
            reply,
            out,
            received: Some((data, data_crc)),
        };
        let fx = self.core.submit_change(change, to);
        self.drive(fx).await;
    }

    /// Queues the change on the replica's connection (in order with the
    /// PG's earlier changes) and awaits its ack in a task.
    pub(super) async fn send_rep(&mut self, version: Version, write: ShardWrite) {
        let ShardWrite {
            osd,
            msg,
            data,
            data_crc,
        } = write;
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
        let pending = conn.submit_with_data_crc(msg, data, data_crc).await;
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
        let map = self
            .core
            .map
            .clone()
            .ok_or_else(|| "no map yet".to_string())?;
        let c = self.ctx.peer(&map, osd).await?;
        self.conns.insert(osd, c.clone());
        Ok(c)
    }

    /// A page of the PG's objects, in hash order.
    pub(super) async fn list(&mut self, from_osd: bool, msg: PgList, responder: Responder) {
        let epoch = self.core.epoch();
        let fail = |code: OsdErrorCode, message: String| PgListReply {
            code: code as u32,
            message,
            epoch,
            ..PgListReply::default()
        };
        if from_osd {
            // Recovery lists a member's own copy, whatever its role.
        } else if !self.core.is_primary() {
            let m = format!(
                "osd.{} is not the primary of pg {}",
                self.core.whoami(),
                self.core.id
            );
            let _ = responder
                .reply(fail(OsdErrorCode::WrongPrimary, m), Bytes::new())
                .await;
            return;
        }
        if !from_osd && (self.core.state != State::Active || !self.core.missing.is_empty()) {
            let m = format!(
                "pg {} is not active, or its primary is recovering",
                self.core.id
            );
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
                .list_objects(&self.core.coll, start.as_ref(), max + 1)
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

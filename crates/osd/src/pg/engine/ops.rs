//! The primary's op path: fence an op by interval, queue it while the PG
//! is not active, hold it while its object is recovered or (a read) has
//! changes in flight, answer a resent change with its first result, refuse
//! changes on a full OSD, execute the op through the backend, and submit
//! a change.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use shoal_objectstore::ObjectKey;
use shoal_proto::{OpCode, OsdErrorCode, OsdOp, OsdOpReply};

use super::{Effect, NewChange, PgCore, ReplyTo, op_error};
use crate::ctx::{AckedWrite, OsdCounters};
use crate::exec::{self, ExecInput, ExecOutcome};
use crate::log::{LogEntry, LogOp, ReqId};
use crate::object;
use crate::pg::State;

/// A client op as the engine holds it: the driver keeps its reply handle.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::pg) struct Op {
    /// The op.
    pub msg: OsdOp,
    /// Its data part.
    pub data: Bytes,
    /// The data part's checksum, as its frame carried it (checked).
    pub data_crc: u32,
    /// Who sent it (`client.admin`): with the op's ids, its request id.
    pub client: String,
    /// Where the answer goes.
    pub to: ReplyTo,
}

/// Why a client op waits for its object.
enum Blocked {
    /// The object is missing here or on a member: it is recovered first.
    Recovery(ObjectKey),
    /// A read, of an object with changes in flight: it runs once they are.
    InFlight(ObjectKey),
}

/// Whether every sub-operation of `msg` only frees space (or only reads).
fn frees_only(msg: &OsdOp) -> bool {
    msg.ops.iter().all(|o| {
        matches!(
            OpCode::from_u32(o.code),
            Some(OpCode::Remove | OpCode::RmXattr | OpCode::OmapRmKeys | OpCode::OmapClear)
        ) || !OpCode::from_u32(o.code).is_some_and(OpCode::is_write)
    })
}

fn is_remove(op: &shoal_objectstore::Op) -> bool {
    matches!(op, shoal_objectstore::Op::Remove(..))
}

impl PgCore {
    /// Refuses `op`: this OSD is not the PG's primary.
    pub(in crate::pg) fn refuse_wrong_primary(&self, op: Op) -> Effect {
        let epoch = self.epoch();
        let m = format!(
            "osd.{} is not the primary of pg {} in epoch {epoch}",
            self.whoami, self.id
        );
        op_error(op.to, OsdErrorCode::WrongPrimary, epoch, m)
    }

    /// A client op: fence by interval, wait until active, then execute.
    pub(in crate::pg) fn client_op(&mut self, op: Op) -> Vec<Effect> {
        if !self.is_primary() {
            return vec![self.refuse_wrong_primary(op)];
        }
        let epoch = self.epoch();
        if op.msg.epoch < self.interval_start {
            let m = format!(
                "op placed in epoch {} but pg {} changed in epoch {}",
                op.msg.epoch, self.id, self.interval_start
            );
            return vec![op_error(op.to, OsdErrorCode::StaleEpoch, epoch, m)];
        }
        if self.state != State::Active {
            self.waiting.push_back(op);
            return Vec::new();
        }
        self.execute(op)
    }

    /// Answers the queued ops placed before the current interval: they
    /// would be refused once the PG is active, and their clients resend
    /// sooner when told now.
    pub(in crate::pg) fn refuse_stale_waiting(&mut self, why: &str) -> Vec<Effect> {
        let epoch = self.epoch();
        let start = self.interval_start;
        let (stale, current): (VecDeque<Op>, VecDeque<Op>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|op| op.msg.epoch < start);
        self.waiting = current;
        stale
            .into_iter()
            .map(|op| op_error(op.to, OsdErrorCode::StaleEpoch, epoch, why.to_string()))
            .collect()
    }

    /// Refuses every queued op: this OSD is no longer the primary.
    pub(in crate::pg) fn refuse_waiting(&mut self) -> Vec<Effect> {
        let ops: Vec<Op> = self.waiting.drain(..).collect();
        ops.into_iter()
            .map(|op| self.refuse_wrong_primary(op))
            .collect()
    }

    /// Answers every queued op: the OSD is shutting down.
    pub(in crate::pg) fn refuse_waiting_shutting_down(&mut self) -> Vec<Effect> {
        self.requeue_object_waiters();
        let epoch = self.epoch();
        self.waiting
            .drain(..)
            .map(|op| {
                let m = "the OSD is shutting down".to_string();
                op_error(op.to, OsdErrorCode::ShuttingDown, epoch, m)
            })
            .collect()
    }

    /// The next op that waited for the PG to become active, while it is.
    /// (The driver executes them one at a time, carrying out each one's
    /// effects before the next reads the store.)
    pub(in crate::pg) fn next_waiting(&mut self) -> Option<Op> {
        if self.state == State::Active {
            self.waiting.pop_front()
        } else {
            None
        }
    }

    /// The ops that waited for `key`, in arrival order (executed one at a
    /// time like [`PgCore::next_waiting`]'s).
    pub(in crate::pg) fn take_waiting_for(&mut self, key: &ObjectKey) -> VecDeque<Op> {
        self.waiting_for_object.remove(key).unwrap_or_default()
    }

    /// Client ops waiting for an object go back to the PG's queue (a new
    /// interval, or the primary role is gone).
    pub(in crate::pg) fn requeue_object_waiters(&mut self) {
        // An op whose stripes were being gathered goes first: it came first.
        for (_, op) in std::mem::take(&mut self.ec_gathering) {
            self.waiting.push_back(op);
        }
        for (_, ops) in std::mem::take(&mut self.waiting_for_object) {
            self.waiting.extend(ops);
        }
    }

    /// The object `op` is for, when the op must wait: for the object's
    /// recovery, or (a read) for the changes to it in flight. A read must
    /// not see a change before every member has it: a crash of the primary
    /// would lose it, and a later read would see the object go back.
    fn blocked_on(&self, op: &Op) -> Option<Blocked> {
        let pool = self.pool.as_ref()?;
        let key = object::object_key(pool, &op.msg.nspace, &op.msg.oid).ok()?;
        let mutating = exec::is_mutating(&op.msg.ops);
        // Erasure coding: a read decodes from the other shards too, so it
        // waits for the object wherever it is lacking.
        if let Some(rs) = &self.recovery
            && rs.blocks(self.whoami, &key, mutating || self.ec.is_some())
        {
            return Some(Blocked::Recovery(key));
        }
        // Erasure coding: every op on the object waits for the changes in
        // flight (a partial write reads committed stripes) and for an op
        // whose stripes are being gathered.
        let ec = self.ec.is_some();
        let uncommitted = (!mutating || ec) && self.inflight.values().any(|f| f.key == key);
        let gathering = self.ec_gathering.contains_key(&key);
        (uncommitted || gathering).then_some(Blocked::InFlight(key))
    }

    /// Executes an op of an active PG (or holds it; see [`Blocked`]).
    pub(in crate::pg) fn execute(&mut self, op: Op) -> Vec<Effect> {
        match self.blocked_on(&op) {
            Some(Blocked::Recovery(key)) => {
                self.waiting_for_object
                    .entry(key.clone())
                    .or_default()
                    .push_back(op);
                // Recover it next. A failed object stays deferred until
                // the retry: a peer that refuses at once must not make
                // this a busy loop.
                if let Some(rs) = self.recovery.as_mut() {
                    rs.urgent.push_back(key);
                }
                return vec![Effect::PumpRecovery];
            }
            Some(Blocked::InFlight(key)) => {
                // Run again when the change in flight completes.
                self.waiting_for_object
                    .entry(key)
                    .or_default()
                    .push_back(op);
                return Vec::new();
            }
            None => {}
        }
        let epoch = self.epoch();
        let Op {
            msg,
            data,
            data_crc,
            client,
            to,
        } = op;
        if let Err(e) = exec::validate(&msg.ops, data.len()) {
            OsdCounters::add(&self.counters.refused, 1);
            return vec![op_error(to, e.code, epoch, e.to_string())];
        }
        let Some(pool) = self.pool.as_ref() else {
            let m = format!("pool {} does not exist", self.id.pool);
            return vec![op_error(to, OsdErrorCode::NoPool, epoch, m)];
        };
        let key = match object::object_key(pool, &msg.nspace, &msg.oid) {
            Ok(k) => k,
            Err(e) => {
                return vec![op_error(
                    to,
                    OsdErrorCode::InvalidArgument,
                    epoch,
                    e.to_string(),
                )];
            }
        };
        let mutating = exec::is_mutating(&msg.ops);
        let reqid = ReqId {
            entity: client,
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
                f.responders.push(to);
                return Vec::new();
            }
            if let Some((version, code)) = self.log.lookup(&reqid) {
                // Already applied: the original result, not a second change.
                let mut fx = Vec::new();
                if self.observed && code == 0 {
                    fx.push(Effect::Acked(AckedWrite {
                        osd: self.whoami,
                        pg: self.id,
                        hash: key.hash,
                        interval_start: self.interval_start,
                        version,
                        reqid,
                    }));
                }
                let reply = OsdOpReply {
                    code,
                    epoch,
                    version: version.v,
                    replayed: true,
                    ..OsdOpReply::default()
                };
                fx.push(Effect::Reply {
                    to,
                    msg: reply.into(),
                    data: Bytes::new(),
                    data_crc: None,
                });
                return fx;
            }
        }
        // A full OSD still takes ops that only free space (as Ceph lets
        // deletes through), or nobody could make room again, and the
        // changes that those deletes need (FLAG_FULL_TRY).
        if mutating
            && !frees_only(&msg)
            && msg.flags & OsdOp::FLAG_FULL_TRY == 0
            && self.full.load(Ordering::Relaxed)
        {
            let m = format!(
                "osd.{} is full (over {:.0}% used)",
                self.whoami,
                self.cfg.full_ratio * 100.0
            );
            return vec![op_error(to, OsdErrorCode::NoSpace, epoch, m)];
        }
        // A pool at its quota takes what frees space, as a full OSD does.
        if mutating
            && !frees_only(&msg)
            && let Some(p) = self.pool.as_ref().filter(|p| p.full_quota())
        {
            let m = format!(
                "pool {} is at its quota (max_bytes {}, max_objects {}; 0: none): \
                 delete objects or raise it (shoal osd pool set-quota)",
                p.name, p.quota_max_bytes, p.quota_max_objects
            );
            return vec![op_error(to, OsdErrorCode::NoSpace, epoch, m)];
        }
        if self.ec.is_some() {
            let op = Op {
                msg,
                data,
                data_crc,
                client: reqid.entity,
                to,
            };
            return self.ec_execute(op, key);
        }
        let removed = self
            .pool
            .as_ref()
            .map(|p| p.removed_snaps.clone())
            .unwrap_or_default();
        let version = self.log.next_version(epoch);
        let input = ExecInput {
            store: self.store.as_ref(),
            coll: self.coll,
            key: key.clone(),
            ops: &msg.ops,
            data: data.clone(),
            new_version: version.v,
            mtime_ms: (self.clock)(),
            snaps: exec::Snaps {
                seq: msg.snap_seq,
                snaps: &msg.snaps,
                read: msg.snap_id,
                removed: &removed,
            },
        };
        let outcome = match self.backend.execute(input) {
            Ok(o) => o,
            Err(e) => return vec![exec_failed(to, epoch, &e)],
        };
        let done = Executed {
            to,
            key,
            reqid,
            version,
            data,
            data_crc,
        };
        self.finish_op(done, outcome)
    }

    /// Answers an executed op: a read at once, a change once logged and
    /// durable on every member (submitted through the backend).
    pub(in crate::pg) fn finish_op(&mut self, done: Executed, outcome: ExecOutcome) -> Vec<Effect> {
        let Executed {
            to,
            key,
            reqid,
            version,
            data,
            data_crc,
        } = done;
        let epoch = self.epoch();
        let out = crate::pg::backend::concat(outcome.data);
        OsdCounters::add(&self.counters.ops, 1);
        OsdCounters::add(&self.counters.read_bytes, out.len() as u64);
        let reply = OsdOpReply {
            code: 0,
            epoch,
            version: outcome.version,
            results: outcome.results,
            ..OsdOpReply::default()
        };
        if !outcome.mutates {
            return vec![Effect::Reply {
                to,
                msg: reply.into(),
                data: out,
                data_crc: outcome.data_crc,
            }];
        }
        OsdCounters::add(&self.counters.write_ops, 1);
        OsdCounters::add(&self.counters.write_bytes, data.len() as u64);
        let removed = outcome.txn.ops().last().is_some_and(is_remove);
        let entry = LogEntry {
            version,
            op: if removed {
                LogOp::Delete
            } else {
                LogOp::Modify
            },
            key,
            reqid: Some(reqid),
            code: 0,
        };
        let mut fx = vec![Effect::Wrote(data.len() as u64)];
        let change = NewChange {
            entry,
            txn: outcome.txn,
            delta: (outcome.delta.objects, outcome.delta.bytes),
            reply,
            out,
            received: Some((data, data_crc)),
        };
        fx.extend(self.submit_change(change, to));
        fx
    }
}

/// The answer to an op that failed at one of its sub-operations.
pub(in crate::pg) fn exec_failed(to: ReplyTo, epoch: u32, e: &exec::ExecError) -> Effect {
    let reply = OsdOpReply {
        code: e.code as u32,
        message: e.to_string(),
        epoch,
        failed_op: e.failed_op,
        ..OsdOpReply::default()
    };
    Effect::Reply {
        to,
        msg: reply.into(),
        data: Bytes::new(),
        data_crc: None,
    }
}

/// An op that ran: what its answer and its log entry need.
#[derive(Debug)]
pub(in crate::pg) struct Executed {
    pub to: ReplyTo,
    pub key: ObjectKey,
    pub reqid: ReqId,
    pub version: crate::log::Version,
    pub data: Bytes,
    pub data_crc: u32,
}

//! The primary's op path on an erasure-coded PG (see `pg/ec.rs`): the
//! first pass learns which stripes the op needs, the gather brings them,
//! the second pass runs the op on them and its change is planned into
//! each shard's part; and the member's side, serving its chunks.

use std::collections::BTreeSet;

use shoal_objectstore::ObjectKey;
use shoal_proto::{EcRead, EcReadReply, OsdErrorCode};

use super::ops::{Executed, Op, exec_failed};
use super::{Effect, PgCore, ReplyTo, op_error};
use crate::exec::{self, ExecInput};
use crate::log::ReqId;
use crate::pg::State;
use crate::pg::ec::{LogicalView, Stripes, lower, serve_read, shard_transactions};

impl PgCore {
    /// Runs a client op of an erasure-coded PG (past the engine's fences
    /// and its duplicate check).
    pub(in crate::pg) fn ec_execute(&mut self, op: Op, key: ObjectKey) -> Vec<Effect> {
        self.ec_run(op, key, &Stripes::default(), true)
    }

    /// One pass of an op over the gathered `stripes`: it gathers what is
    /// missing (when `may_gather`), or answers and submits. A read at a
    /// snapshot runs on the clone standing for it (or the head), whose
    /// stripes are gathered; it waits, like every op, under the head.
    fn ec_run(
        &mut self,
        op: Op,
        key: ObjectKey,
        stripes: &Stripes,
        may_gather: bool,
    ) -> Vec<Effect> {
        let epoch = self.epoch();
        let Some(ec) = self.ec.clone() else {
            let m = format!("pg {} is not erasure coded", self.id);
            return vec![op_error(op.to, OsdErrorCode::Internal, epoch, m)];
        };
        let layout = ec.layout();
        let removed = self
            .pool
            .as_ref()
            .map(|p| p.removed_snaps.clone())
            .unwrap_or_default();
        let snaps = exec::Snaps {
            seq: op.msg.snap_seq,
            snaps: &op.msg.snaps,
            read: op.msg.snap_id,
            removed: &removed,
        };
        if let Err(e) = exec::validate_snaps(&op.msg.ops, &snaps) {
            return vec![exec_failed(op.to, epoch, &e)];
        }
        let store = self.store.as_ref();
        let target = if snaps.read == 0 {
            key.clone()
        } else {
            let at = exec::at_snapshot(&ExecInput {
                store,
                coll: self.coll,
                key: key.clone(),
                ops: &op.msg.ops,
                data: bytes::Bytes::new(),
                new_version: 0,
                mtime_ms: 0,
                snaps,
            });
            match at {
                Ok(k) => k,
                Err(e) => return vec![exec_failed(op.to, epoch, &e)],
            }
        };
        let old_size = match crate::ec::logical_size(store, &self.coll, &target) {
            Ok(s) => s,
            Err(e) => return vec![op_error(op.to, OsdErrorCode::Io, epoch, e.to_string())],
        };
        let version = self.log.next_version(epoch);
        let view = LogicalView {
            store,
            key: &target,
            layout,
            size: old_size,
            stripes,
            wanted: Default::default(),
        };
        let input = ExecInput {
            store: &view,
            coll: self.coll,
            key: target.clone(),
            ops: &op.msg.ops,
            data: op.data.clone(),
            new_version: version.v,
            mtime_ms: (self.clock)(),
            snaps: exec::Snaps { read: 0, ..snaps },
        };
        let mut outcome = match exec::execute(input) {
            Ok(o) => o,
            Err(e) => return vec![exec_failed(op.to, epoch, &e)],
        };
        let mut need: BTreeSet<u64> = view
            .wanted
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let lowered = match lower(&outcome.txn, &key) {
            Ok(l) => l,
            Err(e) => return vec![op_error(op.to, OsdErrorCode::NotSupported, epoch, e)],
        };
        if outcome.mutates {
            match shoal_ec::stripes_to_read(layout, old_size, &lowered.data) {
                Ok(s) => need.extend(s),
                Err(e) => {
                    let m = e.to_string();
                    return vec![op_error(op.to, OsdErrorCode::InvalidArgument, epoch, m)];
                }
            }
        }
        need.retain(|s| !stripes.contains(*s));
        if !need.is_empty() {
            if !may_gather {
                let m = format!("stripes {need:?} of {key} were not gathered");
                return vec![op_error(op.to, OsdErrorCode::Internal, epoch, m)];
            }
            let interval_start = self.interval_start;
            self.ec_gathering.insert(key.clone(), op);
            // A member that lacks the object holds an older version of
            // its shard (or none): it is read around (a degraded read).
            let lacking = self
                .recovery
                .as_ref()
                .map(|rs| rs.lacking(&key))
                .unwrap_or_default();
            return vec![Effect::EcGather {
                key,
                at: target,
                stripes: need,
                lacking,
                interval_start,
            }];
        }
        if outcome.mutates {
            match shard_transactions(&ec, self.id, &key, old_size, &lowered, stripes) {
                Ok(t) => outcome.txn = t,
                Err(e) => return vec![op_error(op.to, OsdErrorCode::Internal, epoch, e)],
            }
        }
        let done = Executed {
            to: op.to,
            key,
            reqid: ReqId {
                entity: op.client,
                inc: op.msg.client_inc,
                tid: op.msg.tid,
            },
            version,
            data: op.data,
            data_crc: op.data_crc,
        };
        self.finish_op(done, outcome)
    }

    /// The stripes an op waited for were gathered (or could not be): run
    /// it again on them; the ops behind it run next.
    pub(in crate::pg) fn ec_gathered(
        &mut self,
        key: ObjectKey,
        interval_start: u32,
        result: Result<Stripes, String>,
    ) -> Vec<Effect> {
        // A gather of an earlier interval: its op went back to the queue.
        if interval_start != self.interval_start {
            return Vec::new();
        }
        // A shard read around for a failed checksum: repair the PG (a deep
        // scrub with repair rebuilds the bad shards, as Ceph's auto repair);
        // while it is not clean, recovery or the next scrub will.
        let mut fx = Vec::new();
        if let Ok(s) = &result
            && !s.damaged.is_empty()
            && self.is_primary()
            && self.active_clean()
        {
            tracing::warn!(pg = %self.id, object = ?key, osds = ?s.damaged,
                "a read found damaged shards: repairing the PG");
            fx.extend(self.start_scrub(true, true, None));
        }
        let Some(op) = self.ec_gathering.remove(&key) else {
            return fx;
        };
        let epoch = self.epoch();
        fx.extend(match result {
            Ok(stripes) if self.state == State::Active => {
                self.ec_run(op, key.clone(), &stripes, false)
            }
            Ok(_) => {
                self.waiting.push_back(op);
                Vec::new()
            }
            // Fewer than k shards answered: the client retries (a map
            // change is likely on its way).
            Err(e) => vec![op_error(op.to, OsdErrorCode::Again, epoch, e)],
        });
        if !self.ec_gathering.contains_key(&key) && !self.inflight.values().any(|f| f.key == key) {
            fx.push(Effect::RunWaiting(key));
        }
        fx
    }

    /// A primary asks for chunks of our shard.
    pub(in crate::pg) fn ec_read(&self, msg: &EcRead, to: ReplyTo) -> Vec<Effect> {
        let epoch = self.epoch();
        let refuse = |code: OsdErrorCode, message: String| Effect::Reply {
            to,
            msg: EcReadReply {
                code: code as u32,
                message,
                epoch,
                ..EcReadReply::default()
            }
            .into(),
            data: bytes::Bytes::new(),
            data_crc: None,
        };
        if msg.epoch < self.interval_start {
            let m = format!(
                "read from epoch {} but pg {} changed in epoch {}",
                msg.epoch, self.id, self.interval_start
            );
            return vec![refuse(OsdErrorCode::StaleEpoch, m)];
        }
        let Some(ec) = &self.ec else {
            let m = format!("pg {} is not erasure coded here", self.id);
            return vec![refuse(OsdErrorCode::InvalidArgument, m)];
        };
        // A shard we hold from a position we left serves recovery too.
        let coll = match u8::try_from(msg.shard) {
            Ok(s) if s != self.coll.shard && self.strays.contains(&s) => self.stray_coll(s),
            _ => self.coll,
        };
        let (reply, data) = serve_read(self.store.as_ref(), coll, ec.layout(), msg, epoch);
        vec![Effect::Reply {
            to,
            msg: reply.into(),
            data,
            data_crc: None,
        }]
    }
}

//! The replica's side: apply the primary's changes in order, answer its
//! peering queries, take its activation and its recovery pushes.

use bytes::Bytes;
use shoal_net::Responder;
use shoal_objectstore::{ObjectKey, Transaction};
use shoal_proto::{OsdErrorCode, PgInfo, PgPull, PgPush, PgQuery, RepOp, RepOpReply};

use super::{Pg, State};
use crate::codec;
use crate::ctx::OsdCounters;
use crate::log::{LogEntry, PgInfoData, PgLog};
use crate::recovery;

fn answer(r: Responder, code: OsdErrorCode, epoch: u32, message: String) {
    let reply = RepOpReply {
        code: code as u32,
        message,
        epoch,
    };
    tokio::spawn(async move {
        let _ = r.reply(reply, Bytes::new()).await;
    });
}

impl Pg {
    /// Answers `responder` once `txn` is durable (from the store's commit
    /// thread, through the runtime).
    fn apply_then_ack(&mut self, txn: Transaction, responder: Responder) {
        let epoch = self.epoch();
        let queued = tokio::task::block_in_place(|| self.ctx.store.queue_transaction(txn));
        match queued {
            Ok(ticket) => {
                let rt = tokio::runtime::Handle::current();
                ticket.on_commit(move |r| {
                    let (code, message) = match r {
                        Ok(()) => (OsdErrorCode::Ok, String::new()),
                        Err(e) => (crate::exec::store_error_code(&e), e.to_string()),
                    };
                    rt.spawn(async move {
                        let reply = RepOpReply {
                            code: code as u32,
                            message,
                            epoch,
                        };
                        let _ = responder.reply(reply, Bytes::new()).await;
                    });
                });
            }
            Err(e) => {
                self.reload_log();
                answer(
                    responder,
                    crate::exec::store_error_code(&e),
                    epoch,
                    e.to_string(),
                );
            }
        }
    }

    fn stale(&self, interval_start: u32) -> bool {
        interval_start < self.interval_start
    }

    /// A change from the primary, applied atomically with its log entry.
    pub(super) async fn rep_op(&mut self, msg: RepOp, data: Bytes, responder: Responder) {
        let epoch = self.epoch();
        if self.stale(msg.interval_start) {
            let m = format!(
                "replication from interval {} but pg {} changed in epoch {}",
                msg.interval_start, self.id, self.interval_start
            );
            return answer(responder, OsdErrorCode::StaleEpoch, epoch, m);
        }
        let entry = match LogEntry::decode(&msg.log_entry) {
            Ok(e) => e,
            Err(e) => {
                return answer(
                    responder,
                    OsdErrorCode::InvalidArgument,
                    epoch,
                    e.to_string(),
                );
            }
        };
        if entry.version <= self.log.info.last_update {
            // Already applied (a resend after a reconnect).
            return answer(responder, OsdErrorCode::Ok, epoch, String::new());
        }
        let mut txn = match codec::decode(self.coll, &msg.txn, &data) {
            Ok(t) => t,
            Err(e) => return answer(responder, OsdErrorCode::InvalidArgument, epoch, e.0),
        };
        let info = &mut self.log.info;
        info.objects = info.objects.saturating_add_signed(msg.objects_delta);
        info.bytes = info.bytes.saturating_add_signed(msg.bytes_delta);
        self.log
            .append(entry, self.ctx.cfg.log_limits, self.coll, &mut txn);
        OsdCounters::add(&self.ctx.counters.rep_ops, 1);
        self.apply_then_ack(txn, responder);
    }

    /// The primary asks what we have.
    pub(super) async fn query(&mut self, msg: PgQuery, responder: Responder) {
        let reply = PgInfo {
            pool: self.id.pool,
            pg_seed: self.id.seed,
            epoch: self.epoch(),
            info: self.log.info.encode(),
            log: self.log.entries().map(LogEntry::encode).collect(),
            activate: false,
            interval_start: msg.interval_start,
        };
        tokio::spawn(async move {
            let _ = responder.reply(reply, Bytes::new()).await;
        });
    }

    /// The primary's authoritative log: ours becomes the same.
    pub(super) async fn activate(&mut self, msg: PgInfo, responder: Responder) {
        let epoch = self.epoch();
        if self.stale(msg.interval_start) {
            let m = format!("activation for an old interval {}", msg.interval_start);
            return answer(responder, OsdErrorCode::StaleEpoch, epoch, m);
        }
        let decoded = PgInfoData::decode(&msg.info).and_then(|info| {
            let entries: Result<Vec<LogEntry>, _> =
                msg.log.iter().map(|b| LogEntry::decode(b)).collect();
            Ok((info, entries?))
        });
        let (mut info, entries) = match decoded {
            Ok(d) => d,
            Err(e) => {
                return answer(
                    responder,
                    OsdErrorCode::InvalidArgument,
                    epoch,
                    e.to_string(),
                );
            }
        };
        info.last_epoch_started = msg.interval_start;
        let mut txn = Transaction::new();
        self.log.replace(info, entries, self.coll, &mut txn);
        if self.acting.contains(&self.whoami()) {
            self.state = State::ReplicaActive;
        }
        self.apply_then_ack(txn, responder);
    }

    /// Recovery: install the primary's copy of an object.
    pub(super) async fn push(&mut self, msg: PgPush, data: Bytes, responder: Responder) {
        let epoch = self.epoch();
        let mut txn = Transaction::new();
        if msg.reset {
            // Backfill starts from an empty copy of the PG.
            txn.remove_collection(self.coll);
            txn.create_collection(self.coll);
            self.log = PgLog::default();
            self.log.persist_info(self.coll, &mut txn);
            if let Err(e) = tokio::task::block_in_place(|| self.ctx.store.apply_transaction(txn)) {
                return answer(
                    responder,
                    crate::exec::store_error_code(&e),
                    epoch,
                    e.to_string(),
                );
            }
            txn = Transaction::new();
            if msg.name.is_empty() {
                return answer(responder, OsdErrorCode::Ok, epoch, String::new());
            }
        }
        let built = tokio::task::block_in_place(|| {
            recovery::install_txn(self.ctx.store.as_ref(), self.coll, &msg, data)
        });
        match built {
            Ok(t) => {
                for op in t.ops() {
                    txn.push(op.clone());
                }
                OsdCounters::add(&self.ctx.counters.recovered, 1);
                self.apply_then_ack(txn, responder);
            }
            Err(e) => answer(responder, OsdErrorCode::InvalidArgument, epoch, e),
        }
    }

    /// Recovery: send our copy of an object to the primary.
    pub(super) async fn pull(&mut self, msg: PgPull, responder: Responder) {
        let key = ObjectKey::new(msg.hash, msg.name.clone());
        let read = tokio::task::block_in_place(|| {
            recovery::read_object(self.ctx.store.as_ref(), self.coll, &key)
        });
        let epoch = self.epoch();
        match read {
            Ok((mut push, data)) => {
                push.pool = self.id.pool;
                push.pg_seed = self.id.seed;
                push.epoch = epoch;
                tokio::spawn(async move {
                    let _ = responder.reply(push, data).await;
                });
            }
            Err(e) => {
                let code = crate::exec::store_error_code(&e);
                answer(responder, code, epoch, e.to_string());
            }
        }
    }
}

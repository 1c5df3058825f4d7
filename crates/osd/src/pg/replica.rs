//! The replica's side: apply the primary's changes in order, answer its
//! peering queries, take its activation and its recovery pushes.

use bytes::Bytes;
use shoal_net::Responder;
use shoal_objectstore::{ObjectKey, Transaction};
use shoal_proto::{OsdErrorCode, PgInfo, PgPull, PgPush, PgQuery, RepOp, RepOpReply};

use super::{Pg, State};
use crate::codec;
use crate::copy;
use crate::ctx::OsdCounters;
use crate::log::{Dup, LogEntry, PgInfoData, PgLog};
use crate::missing::MissingSet;
use crate::pieces::Records;

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
        let queued = shoal_net::runtime::blocking(|| self.ctx.store.queue_transaction(txn));
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

    /// A primary's message is stale when the primary had not yet seen the
    /// map in which our interval began (members may see an interval begin
    /// at different epochs: one that first hears of the PG later starts
    /// its interval later; a primary that has seen our first epoch and
    /// still sends is in the same interval as we are).
    fn stale(&self, sender_epoch: u32) -> bool {
        sender_epoch < self.interval_start
    }

    /// A change from the primary, applied atomically with its log entry.
    pub(super) async fn rep_op(&mut self, msg: RepOp, data: Bytes, responder: Responder) {
        let epoch = self.epoch();
        if self.stale(msg.epoch) {
            let m = format!(
                "replication from epoch {} but pg {} changed in epoch {}",
                msg.epoch, self.id, self.interval_start
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
        let last = self.log.info.last_update;
        if entry.version <= last
            && (entry.version <= self.log.info.log_tail
                || self.log.entries().any(|e| e.version == entry.version))
        {
            // Already applied (a resend after a reconnect).
            return answer(responder, OsdErrorCode::Ok, epoch, String::new());
        }
        if entry.version <= last || entry.version.v != last.v + 1 {
            // Changes apply in order, each the one after our newest: a gap
            // (or an older change we never had) means we missed one. The
            // primary fails what is in flight and peers again.
            let m = format!(
                "pg {}: change {} out of order (ours ends at {last})",
                self.id, entry.version
            );
            return answer(responder, OsdErrorCode::Again, epoch, m);
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
        self.ctx.note_written(data.len() as u64);
        self.apply_then_ack(txn, responder);
    }

    /// The primary asks what we have (one piece of it).
    pub(super) async fn query(&mut self, msg: PgQuery, responder: Responder) {
        let all = Records {
            log: self.log.entries().map(LogEntry::encode).collect(),
            dups: self.log.dups().map(Dup::encode).collect(),
            missing: self.missing.encode(),
        };
        let (piece, more) = all.piece(msg.piece, self.ctx.cfg.peering_piece_bytes);
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
        };
        tokio::spawn(async move {
            let _ = responder.reply(reply, Bytes::new()).await;
        });
    }

    /// The primary's authoritative log: ours becomes the same (once its
    /// last piece is in).
    pub(super) async fn activate(&mut self, mut msg: PgInfo, responder: Responder) {
        let epoch = self.epoch();
        if self.stale(msg.epoch) {
            let m = format!(
                "activation from epoch {} but pg {} changed in epoch {}",
                msg.epoch, self.id, self.interval_start
            );
            return answer(responder, OsdErrorCode::StaleEpoch, epoch, m);
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
                    return answer(responder, OsdErrorCode::Again, epoch, m);
                }
            };
            so_far.extend(piece);
            if msg.more {
                let next = msg.piece.saturating_add(1);
                self.activation_pieces = Some((msg.interval_start, next, so_far));
                return answer(responder, OsdErrorCode::Ok, epoch, String::new());
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
        if msg.backfill {
            // Our copy is too old for the log: start from an empty one,
            // and lack every object until the primary pushes it.
            txn.remove_collection(self.coll);
            txn.create_collection(self.coll);
            self.log = PgLog::default();
            self.missing = MissingSet::default();
        }
        let limits = self.ctx.cfg.log_limits;
        self.log
            .replace(info, entries, dups, limits, self.coll, &mut txn);
        self.missing.replace(missing, self.coll, &mut txn);
        // Copies the previous primary left half made will not be finished.
        if let Err(e) = shoal_net::runtime::blocking(|| {
            copy::remove_temps(self.ctx.store.as_ref(), self.coll, &mut txn)
        }) {
            return answer(
                responder,
                crate::exec::store_error_code(&e),
                epoch,
                e.to_string(),
            );
        }
        if self.shards().contains(&self.whoami()) {
            self.state = State::ReplicaActive;
        }
        self.apply_then_ack(txn, responder);
    }

    /// Recovery: install one step of the primary's copy of an object.
    pub(super) async fn push(&mut self, msg: PgPush, data: Bytes, responder: Responder) {
        let epoch = self.epoch();
        if msg.epoch < self.interval_start {
            // A copy from an interval that ended may be older than what
            // this interval wrote since.
            let why = format!(
                "push from epoch {} but pg {} changed in epoch {}",
                msg.epoch, self.id, self.interval_start
            );
            return answer(responder, OsdErrorCode::StaleEpoch, epoch, why);
        }
        let built = shoal_net::runtime::blocking(|| {
            copy::install_step(self.ctx.store.as_ref(), self.coll, &msg, data)
        });
        match built {
            Ok(txn) => {
                let (_, after) = copy::bounds(&msg);
                if !msg.exists || copy::is_complete(&after) {
                    // The transaction takes the object out of the persisted set.
                    self.missing
                        .remove(&ObjectKey::new(msg.hash, msg.name.clone()));
                    OsdCounters::add(&self.ctx.counters.recovered, 1);
                }
                self.apply_then_ack(txn, responder);
            }
            Err(e) => {
                tracing::debug!(pg = %self.id, "refused a pushed step: {e}");
                answer(responder, OsdErrorCode::InvalidArgument, epoch, e)
            }
        }
    }

    /// Recovery: send the next step of our copy of an object to the primary.
    pub(super) async fn pull(&mut self, msg: PgPull, responder: Responder) {
        let key = ObjectKey::new(msg.hash, msg.name.clone());
        let before = msg.progress.clone().unwrap_or_else(copy::start);
        let limits = self
            .ctx
            .cfg
            .copy_limits
            .narrowed(msg.data_bytes_max, msg.omap_bytes_max);
        let read = shoal_net::runtime::blocking(|| {
            copy::read_step(self.ctx.store.as_ref(), self.coll, &key, &before, limits)
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

//! The driver: carries out the effects of the engine's steps
//! ([`super::engine`]) — replies on the requests' handles, store
//! transactions whose commits come back as events or acks, replicated
//! changes on the members' connections.

use bytes::Bytes;
use shoal_maps::{OsdMap, PgId};
use shoal_net::Responder;
use shoal_objectstore::Transaction;
use shoal_proto::{OsdErrorCode, RepOpReply};

use super::engine::{Effect, ReplyTo, Then};
use super::{Pg, PgEvent};
use crate::exec::store_error_code;

/// Transactions carrying at least this much data are queued off the
/// shard's thread ([`Pg::apply`]).
const OFFLOAD_DATA_BYTES: u64 = 256 << 10;

impl Pg {
    /// Starts peering for the current interval (primary only).
    pub(super) async fn start_peering(&mut self) {
        let fx = self.core.start_peering();
        self.drive(fx).await;
    }

    /// Holds `r` until an effect answers it; the engine names it by the token.
    pub(super) fn token(&mut self, r: Responder) -> ReplyTo {
        self.next_reply += 1;
        self.replies.insert(self.next_reply, r);
        ReplyTo(self.next_reply)
    }

    fn take_reply(&mut self, to: ReplyTo) -> Option<Responder> {
        if to == ReplyTo::NONE {
            return None;
        }
        let r = self.replies.remove(&to.0);
        if r.is_none() {
            tracing::error!(pg = %self.core.id, token = to.0, "an effect names a reply already sent");
        }
        r
    }

    /// Takes a step that may read the store (off the async worker on a
    /// multi-threaded runtime; inline on an op shard).
    pub(super) fn step<T>(&mut self, f: impl FnOnce(&mut super::engine::PgCore) -> T) -> T {
        shoal_net::runtime::blocking(|| f(&mut self.core))
    }

    /// Carries out a step's effects, in order.
    pub(super) async fn drive(&mut self, effects: Vec<Effect>) {
        self.drive_replying(effects, false).await;
    }

    /// [`Pg::drive`] for a step answering a peer OSD: its replies leave
    /// from tasks of their own, after the step.
    pub(super) async fn drive_for_peer(&mut self, effects: Vec<Effect>) {
        self.drive_replying(effects, true).await;
    }

    async fn drive_replying(&mut self, effects: Vec<Effect>, later: bool) {
        for e in effects {
            match e {
                Effect::Reply {
                    to,
                    msg,
                    data,
                    data_crc,
                } => {
                    if let Some(r) = self.take_reply(to) {
                        if later {
                            tokio::spawn(async move {
                                let _ = r.send_with_data_crc(msg, data, data_crc);
                            });
                        } else {
                            let _ = r.send_with_data_crc(msg, data, data_crc);
                        }
                    }
                }
                Effect::Apply { txn, then } => self.apply(txn, then).await,
                Effect::Replicate { version, write } => {
                    if self.core.inflight.contains_key(&version) {
                        self.send_rep(version, write).await;
                    }
                }
                Effect::ReplyLater { to, msg, data } => {
                    if let Some(r) = self.take_reply(to) {
                        tokio::spawn(async move {
                            let _ = r.reply(msg, data).await;
                        });
                    }
                }
                Effect::ScrubStepAfter(delay) => self.scrub_step_after(delay),
                Effect::SnapTrimAfter(delay) => self.snap_trim_after(delay),
                Effect::ScrubChunk {
                    deep,
                    repair,
                    cursor,
                } => Box::pin(self.scrub_chunk(deep, repair, cursor)).await,
                Effect::Record(txn) => {
                    let _ = shoal_net::runtime::blocking(|| self.ctx.store.queue_transaction(txn));
                }
                Effect::Wrote(n) => self.ctx.note_written(n),
                Effect::Acked(w) => {
                    if let Some(obs) = &self.ctx.observer {
                        obs.write_acked(&w);
                    }
                }
                Effect::StartPeering => Box::pin(self.start_peering()).await,
                Effect::StartRecovery => {
                    let fx = self.core.start_recovery();
                    Box::pin(self.drive(fx)).await;
                }
                Effect::ReserveBackfill { generation } => self.reserve_backfill(generation),
                Effect::RecoverObject(job) if self.core.ec.is_some() => {
                    self.ec_recover_object(job).await
                }
                Effect::RecoverObject(job) => self.recover_object(job),
                Effect::EcGather {
                    key,
                    at,
                    stripes,
                    lacking,
                    interval_start,
                } => {
                    self.ec_gather(key, at, stripes, lacking, interval_start)
                        .await
                }
                Effect::UnfoundSearchLater { generation } => self.unfound_search_later(generation),
                Effect::RecoveryRetryAfter { delay, generation } => {
                    self.recovery_retry_after(delay, generation)
                }
                Effect::DrainWaiting => Box::pin(self.drain_waiting()).await,
                Effect::StatsChanged => self.ctx.stats_changed.notify_one(),
                Effect::FenceCopies => crate::recovery::CopyFence::bump(&self.copy_fence),
                Effect::DropConnections => self.conns.clear(),
                Effect::Query {
                    osd,
                    delay,
                    limit,
                    interval_start,
                } => self.query_task(osd, delay, limit, interval_start),
                Effect::AskPastIntervals {
                    since,
                    interval_start,
                } => self.ask_past_intervals(since, interval_start),
                Effect::RequestPgTemp(osds) => self.send_pg_temp(osds),
                Effect::WantUpThru(epoch) => self.ctx.want_up_thru(epoch),
                Effect::PeeringRetryLater { interval_start } => {
                    self.peering_retry_later(interval_start)
                }
                Effect::ListForBackfill {
                    from,
                    lacks,
                    interval_start,
                } => self.list_for_backfill(from, lacks, interval_start),
                Effect::PersistActivation(txn) => {
                    // It waits for its commit: off the shard's thread on a
                    // daemon, so the shard's other PGs peer meanwhile.
                    let store = std::sync::Arc::clone(&self.ctx.store);
                    let r =
                        shoal_net::runtime::offload_try("persisting the activation", move || {
                            store.apply_transaction(txn).map_err(|e| e.to_string())
                        })
                        .await;
                    let fx = self.core.activation_persisted(r);
                    Box::pin(self.drive(fx)).await;
                }
                Effect::SendActivations {
                    msgs,
                    interval_start,
                } => self.send_activations(msgs, interval_start),
                Effect::AskToPurge { primary, member } => self.ask_to_purge(primary, member),
                Effect::RemoveCopy => self.remove_copy().await,
                Effect::RunWaiting(key) => Box::pin(self.run_waiting_for(&key)).await,
                Effect::PumpRecovery => {
                    let fx = self.core.pump();
                    Box::pin(self.drive(fx)).await;
                }
            }
        }
    }

    /// Queues a transaction; its commit answers or comes back as an event.
    /// One that carries much data (a 4 MiB write, a pushed object) is
    /// queued from the blocking pool on a daemon's shard, whose other PGs
    /// run while its data goes to the device; this PG waits for it, so its
    /// transactions stay in order.
    async fn apply(&mut self, txn: Transaction, then: Then) {
        let queued = if txn.data_bytes() >= OFFLOAD_DATA_BYTES {
            let store = std::sync::Arc::clone(&self.ctx.store);
            shoal_net::runtime::offload(move || store.queue_transaction(txn))
                .await
                .unwrap_or_else(|panicked| {
                    Err(shoal_objectstore::Error::Io {
                        context: "queueing a transaction".into(),
                        source: std::io::Error::other(format!("it panicked: {panicked}")),
                    })
                })
        } else {
            shoal_net::runtime::blocking(|| self.ctx.store.queue_transaction(txn))
        };
        let ticket = match queued {
            Ok(t) => t,
            Err(e) => {
                // Nothing was applied: the store checks before it changes
                // anything. The log's view goes back to the store's.
                let code = store_error_code(&e);
                tracing::warn!(pg = %self.core.id, "the store refused a transaction: {e}");
                match then {
                    Then::AckRep { to, epoch } => {
                        self.core.reload_log();
                        let fx = vec![Effect::Reply {
                            to,
                            msg: RepOpReply {
                                code: code as u32,
                                message: e.to_string(),
                                epoch,
                            }
                            .into(),
                            data: Bytes::new(),
                            data_crc: None,
                        }];
                        Box::pin(self.drive_for_peer(fx)).await;
                    }
                    Then::Local(version) => {
                        let fx = self.core.local_refused(version, code, e.to_string());
                        Box::pin(self.drive(fx)).await;
                    }
                }
                return;
            }
        };
        match then {
            Then::AckRep { to, epoch } => {
                let Some(responder) = self.take_reply(to) else {
                    return;
                };
                // The ack leaves from the runtime (the commit callback may
                // run on the store's commit thread).
                let rt = tokio::runtime::Handle::current();
                ticket.on_commit(move |r| {
                    let (code, message) = match r {
                        Ok(()) => (OsdErrorCode::Ok, String::new()),
                        Err(e) => (store_error_code(&e), e.to_string()),
                    };
                    let reply = RepOpReply {
                        code: code as u32,
                        message,
                        epoch,
                    };
                    rt.spawn(async move {
                        let _ = responder.reply(reply, Bytes::new()).await;
                    });
                });
            }
            Then::Local(version) => {
                let events = self.events.clone();
                ticket.on_commit(move |r| {
                    let _ = events.send(PgEvent::LocalCommitted {
                        version,
                        result: r.map_err(|e| e.to_string()),
                    });
                });
            }
        }
    }

    /// Asks `primary` whether our stray copy (as a `member`: the shards of
    /// positions we left) may go; a yes comes back as
    /// [`PgEvent::PurgeGranted`], anything else is left for the next tick.
    fn ask_to_purge(&self, primary: i32, member: bool) {
        let Some(map) = self.core.map.clone() else {
            return;
        };
        let ctx = std::sync::Arc::clone(&self.ctx);
        let events = self.events.clone();
        let pg = self.core.id;
        let msg = shoal_proto::PgStray {
            pool: pg.pool,
            pg_seed: pg.seed,
            epoch: map.epoch.0,
            last_update: self.core.log.info.last_update.to_string(),
            member,
        };
        let interval_start = self.core.interval_start;
        tokio::spawn(async move {
            let asked = async {
                let conn = ctx.peer(&map, primary).await?;
                let timeout = ctx.cfg.peer_timeout;
                let reply = conn.request_with_timeout(msg, Bytes::new(), timeout).await;
                reply.map_err(|e| e.to_string())
            };
            match asked.await {
                Ok(r) => match r.msg {
                    shoal_proto::Message::RepOpReply(a) if a.code == OsdErrorCode::Ok as u32 => {
                        let _ = events.send(PgEvent::PurgeGranted {
                            primary,
                            member,
                            interval_start,
                        });
                    }
                    shoal_proto::Message::RepOpReply(a) => {
                        tracing::debug!(%pg, primary, "the stray copy stays: {}", a.message)
                    }
                    other => tracing::warn!(%pg, primary,
                        "osd.{primary} answered a stray's question with {:?}", other.msg_type()),
                },
                Err(e) => tracing::debug!(%pg, primary, "cannot ask about the stray copy: {e}"),
            }
        });
    }

    /// Removes every collection of the PG this OSD holds (off the shard's
    /// thread: a large copy takes a while) and ends the actor. A failure
    /// leaves the copy, for the next tick to try again.
    async fn remove_copy(&mut self) {
        let store = std::sync::Arc::clone(&self.ctx.store);
        let pg = self.core.id;
        let r = shoal_net::runtime::offload_try("removing a stray copy", move || {
            crate::object::remove_pg_collections(store.as_ref(), pg).map_err(|e| e.to_string())
        })
        .await;
        match r {
            Ok(()) => {
                self.removed = true;
                self.ctx.stats_changed.notify_one();
            }
            Err(e) => tracing::warn!(%pg, "removing the stray copy failed: {e}"),
        }
    }

    /// Splits this copy if `map` gives its pool more PGs than it was last
    /// split for (Ceph splits a PG as its OSD advances to the map that
    /// grows `pg_num`): every collection of the PG held here, in one
    /// transaction, before the map's new interval. Copies in flight are
    /// fenced first (one landing after the split would go to the parent).
    /// Returns the children made here. A copy that never knew its count
    /// takes the map's.
    pub(super) fn split_for(&mut self, map: &OsdMap) -> Vec<PgId> {
        let id = self.core.id;
        let Some(pool) = map.pool(id.pool) else {
            return Vec::new();
        };
        let (old, new) = (self.core.pg_num, pool.pg_num);
        if old == new || self.removed {
            return Vec::new();
        }
        let store = std::sync::Arc::clone(&self.ctx.store);
        let mut txn = shoal_objectstore::Transaction::new();
        let children = shoal_maps::split_children(id.seed, old, new);
        if old == 0 || new < old || children.is_empty() {
            if new < old {
                tracing::error!(pg = %id, old, new, "the pool's pg_num shrank: merging is not supported; the copy stays as it is");
            }
            // Durable with the PG's next change; lost, it is written again.
            crate::split::persist_pg_num(self.core.coll, new, &mut txn);
            match store.queue_transaction(txn) {
                Ok(_) => self.core.pg_num = new,
                Err(e) => tracing::warn!(pg = %id, "recording the pool's pg_num: {e}"),
            }
            return Vec::new();
        }
        crate::recovery::CopyFence::bump(&self.copy_fence);
        let own = self.core.coll;
        let colls = std::iter::once(own).chain(
            self.core
                .strays
                .iter()
                .map(|s| shoal_objectstore::CollectionId { shard: *s, ..own }),
        );
        let limits = self.core.cfg.log_limits;
        for c in colls {
            if let Err(e) =
                crate::split::split_txn(store.as_ref(), c, &children, new, limits, &mut txn)
            {
                tracing::error!(pg = %id, "cannot split: {e}");
                return Vec::new();
            }
        }
        if let Err(e) = store.apply_transaction(txn) {
            tracing::error!(pg = %id, "splitting failed in the store: {e}");
            return Vec::new();
        }
        self.core.pg_num = new;
        self.core.reload_log();
        self.core.reload_missing();
        let seeds: Vec<u32> = children.iter().map(|c| c.seed).collect();
        tracing::info!(pg = %id, old, new, children = ?seeds, objects = self.core.log.info.objects,
            "split: the children's objects moved to their collections");
        self.ctx.stats_changed.notify_one();
        seeds
            .into_iter()
            .map(|seed| PgId {
                pool: id.pool,
                seed,
            })
            .collect()
    }

    /// [`PgEvent::SnapTrim`] after `delay` (or now, behind the queued events).
    fn snap_trim_after(&self, delay: std::time::Duration) {
        self.send_after(delay, PgEvent::SnapTrim);
    }

    /// `ev` to this PG after `delay` (or now, behind the queued events).
    pub(super) fn send_after(&self, delay: std::time::Duration, ev: PgEvent) {
        let events = self.events.clone();
        if delay.is_zero() {
            let _ = events.send(ev);
            return;
        }
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = events.send(ev);
        });
    }
}

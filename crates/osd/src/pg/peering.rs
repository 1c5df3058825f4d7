//! Peering and recovery, run by the primary at the start of each interval:
//! gather the info and log of every member of the acting set and of the
//! previous one, choose the authoritative log (the newest), bring every
//! acting member (the primary first) to it object by object, hand every
//! replica the authoritative log, and go active.
//!
//! The decision ([`plan_recovery`]) is a pure function of the members'
//! logs; the recovery itself runs in a task so the PG keeps answering
//! queries meanwhile.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use shoal_maps::{OsdMap, PgId};
use shoal_net::Connection;
use shoal_objectstore::{CollectionId, ObjectKey, Transaction};
use shoal_proto::{Message, PgInfo, PgList, PgPush, PgQuery};

use super::{Pg, PgEvent, State};
use crate::ctx::OsdCtx;
use crate::log::{LogEntry, PgInfoData, Version};
use crate::recovery;

/// How long peering waits for a member of the previous interval that is
/// not in the current acting set.
const PRIOR_QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// One member's copy of a PG, as peering sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberLog {
    /// Its info.
    pub info: PgInfoData,
    /// Its log entries, oldest first.
    pub entries: Vec<LogEntry>,
}

/// What one member needs to reach the authoritative log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberRecovery {
    /// Its log is too old: it gets the whole PG (backfill).
    pub backfill: bool,
    /// Otherwise, the objects to copy to it (or remove from it).
    pub objects: BTreeSet<ObjectKey>,
}

/// The outcome of peering.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryPlan {
    /// The member holding the authoritative log.
    pub auth: i32,
    /// Its info.
    pub auth_info: PgInfoData,
    /// Its log.
    pub auth_log: Vec<LogEntry>,
    /// What each acting member (the primary included) lacks.
    pub members: BTreeMap<i32, MemberRecovery>,
}

/// Chooses the authoritative log among `logs` (the primary `me` wins ties)
/// and what each member of `acting` needs to match it. A member with no
/// entry in `logs` gets a backfill.
pub fn plan_recovery(me: i32, logs: &BTreeMap<i32, MemberLog>, acting: &[i32]) -> RecoveryPlan {
    let empty = MemberLog::default();
    let auth = logs
        .iter()
        .max_by_key(|(osd, l)| (l.info.last_update, **osd == me, -**osd))
        .map_or(me, |(osd, _)| *osd);
    let auth_log = logs.get(&auth).unwrap_or(&empty);
    let auth_versions: BTreeSet<(Version, &ObjectKey)> = auth_log
        .entries
        .iter()
        .map(|e| (e.version, &e.key))
        .collect();
    let mut members = BTreeMap::new();
    for &m in acting {
        let Some(l) = logs.get(&m) else {
            let backfill = auth_log.info.last_update > Version::default();
            members.insert(
                m,
                MemberRecovery {
                    backfill,
                    objects: BTreeSet::new(),
                },
            );
            continue;
        };
        let lu = l.info.last_update;
        let mut need = MemberRecovery::default();
        if lu < auth_log.info.log_tail {
            need.backfill = true;
        } else {
            for e in auth_log.entries.iter().filter(|e| e.version > lu) {
                need.objects.insert(e.key.clone());
            }
            // Changes the member has that the authoritative log does not:
            // its copies of those objects are replaced by the primary's.
            for e in &l.entries {
                if !auth_versions.contains(&(e.version, &e.key))
                    && e.version > auth_log.info.log_tail
                {
                    need.objects.insert(e.key.clone());
                }
            }
        }
        if need.backfill || !need.objects.is_empty() {
            members.insert(m, need);
        }
    }
    RecoveryPlan {
        auth,
        auth_info: auth_log.info,
        auth_log: auth_log.entries.clone(),
        members,
    }
}

impl Pg {
    /// Starts peering for the current interval (primary only).
    pub(super) async fn start_peering(&mut self) {
        let min = self.pool.as_ref().map_or(1, |p| p.min_size.max(1)) as usize;
        if self.acting.len() < min {
            self.state = State::Peered;
            return;
        }
        self.state = State::Peering;
        let Some(map) = self.map.clone() else { return };
        let me = self.whoami();
        let mut peers: BTreeSet<i32> = self.replicas().into_iter().collect();
        for p in &self.prior {
            if *p != me && *p >= 0 && map.is_up(*p) {
                peers.insert(*p);
            }
        }
        self.peers_pending = peers.iter().copied().collect();
        for p in peers {
            self.query_peer(p, Duration::ZERO);
        }
        if self.peers_pending.is_empty() {
            self.decide();
        }
    }

    fn query_peer(&self, osd: i32, delay: Duration) {
        let ctx = Arc::clone(&self.ctx);
        let Some(map) = self.map.clone() else { return };
        let events = self.events.clone();
        let q = PgQuery {
            pool: self.id.pool,
            pg_seed: self.id.seed,
            epoch: map.epoch.0,
            interval_start: self.interval_start,
        };
        let interval_start = self.interval_start;
        // A member of the previous interval only may be gone for good:
        // give it little time (an acting member is waited for).
        let limit = if self.acting.contains(&osd) {
            ctx.cfg.peer_timeout
        } else {
            PRIOR_QUERY_TIMEOUT.min(ctx.cfg.peer_timeout)
        };
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let result = match tokio::time::timeout(limit, query(&ctx, &map, osd, q)).await {
                Ok(r) => r,
                Err(_) => Err(format!("osd.{osd} did not answer within {limit:?}")),
            };
            let _ = events.send(PgEvent::PeerInfo {
                from: osd,
                interval_start,
                result,
            });
        });
    }

    pub(super) async fn peer_info(
        &mut self,
        from: i32,
        interval_start: u32,
        result: Result<MemberLog, String>,
    ) {
        if interval_start != self.interval_start || self.state != State::Peering {
            return;
        }
        match result {
            Ok(l) => {
                self.peer_logs.insert(from, l);
            }
            Err(e) if self.acting.contains(&from) => {
                // An acting member must answer; a map change ends the wait.
                tracing::debug!(pg = %self.id, osd = from, "peering query failed: {e}");
                self.query_peer(from, Duration::from_millis(500));
                return;
            }
            Err(_) => {}
        }
        self.peers_pending.retain(|p| *p != from);
        if self.peers_pending.is_empty() {
            self.decide();
        }
    }

    /// Every member answered: plan and start recovery.
    fn decide(&mut self) {
        let me = self.whoami();
        let mut logs = self.peer_logs.clone();
        logs.insert(
            me,
            MemberLog {
                info: self.log.info,
                entries: self.log.entries().cloned().collect(),
            },
        );
        let plan = plan_recovery(me, &logs, &self.acting);
        self.state = State::Recovering;
        let Some(map) = self.map.clone() else { return };
        let copies: u64 = plan
            .members
            .values()
            .map(|m| {
                if m.backfill {
                    plan.auth_info.objects
                } else {
                    m.objects.len() as u64
                }
            })
            .sum();
        let progress = RecoveryProgress::new(copies);
        self.recovery = Some(Arc::clone(&progress));
        let job = Recovery {
            ctx: Arc::clone(&self.ctx),
            map,
            pg: self.id,
            coll: self.coll,
            interval_start: self.interval_start,
            replicas: self.replicas(),
            progress,
        };
        let events = self.events.clone();
        let interval_start = self.interval_start;
        tokio::spawn(async move {
            let result = job.run(plan).await;
            let _ = events.send(PgEvent::Recovered {
                interval_start,
                result,
            });
        });
    }

    pub(super) async fn recovered(
        &mut self,
        interval_start: u32,
        result: Result<(PgInfoData, Vec<LogEntry>), String>,
    ) {
        if interval_start != self.interval_start || self.state != State::Recovering {
            return;
        }
        self.recovery = None;
        match result {
            Ok((mut info, entries)) => {
                info.last_epoch_started = interval_start;
                let mut txn = Transaction::new();
                self.log.replace(info, entries, self.coll, &mut txn);
                if let Err(e) =
                    tokio::task::block_in_place(|| self.ctx.store.apply_transaction(txn))
                {
                    tracing::error!(pg = %self.id, "cannot persist the PG log: {e}");
                    return;
                }
                self.state = State::Active;
                self.ctx.stats_changed.notify_one();
                tracing::debug!(pg = %self.id, epoch = interval_start, "active");
                self.drain_waiting().await;
            }
            Err(e) => {
                tracing::warn!(pg = %self.id, "recovery failed, peering again: {e}");
                self.state = State::Peering;
                self.peer_logs.clear();
                self.peers_pending = self.replicas();
                for p in self.peers_pending.clone() {
                    self.query_peer(p, Duration::from_millis(500));
                }
                if self.peers_pending.is_empty() {
                    self.decide();
                }
            }
        }
    }
}

async fn query(ctx: &OsdCtx, map: &OsdMap, osd: i32, q: PgQuery) -> Result<MemberLog, String> {
    let conn = ctx.peer(map, osd).await?;
    let reply = conn
        .request_with_timeout(q, Bytes::new(), ctx.cfg.peer_timeout)
        .await
        .map_err(|e| e.to_string())?;
    let Message::PgInfo(info) = reply.msg else {
        return Err(format!(
            "osd.{osd} answered a query with {:?}",
            reply.msg.msg_type()
        ));
    };
    let parsed = PgInfoData::decode(&info.info).map_err(|e| e.to_string())?;
    let entries: Result<Vec<LogEntry>, _> = info.log.iter().map(|b| LogEntry::decode(b)).collect();
    Ok(MemberLog {
        info: parsed,
        entries: entries.map_err(|e| e.to_string())?,
    })
}

/// How far a PG's recovery has got: object copies to make and made.
#[derive(Debug)]
pub struct RecoveryProgress {
    total: std::sync::atomic::AtomicU64,
    done: std::sync::atomic::AtomicU64,
    started: std::time::Instant,
}

impl RecoveryProgress {
    fn new(total: u64) -> Arc<RecoveryProgress> {
        Arc::new(RecoveryProgress {
            total: total.into(),
            done: 0.into(),
            started: std::time::Instant::now(),
        })
    }

    fn add(&self, n: u64) {
        self.done.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Copies still to make, and the rate so far (copies per second).
    pub fn left_and_rate(&self) -> (u64, u64) {
        let done = self.done.load(std::sync::atomic::Ordering::Relaxed);
        let total = self.total.load(std::sync::atomic::Ordering::Relaxed);
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        (total.saturating_sub(done), (done as f64 / secs) as u64)
    }
}

/// A recovery job for one interval.
struct Recovery {
    ctx: Arc<OsdCtx>,
    map: Arc<OsdMap>,
    pg: PgId,
    coll: CollectionId,
    interval_start: u32,
    replicas: Vec<i32>,
    progress: Arc<RecoveryProgress>,
}

impl Recovery {
    async fn run(self, plan: RecoveryPlan) -> Result<(PgInfoData, Vec<LogEntry>), String> {
        let me = self.ctx.whoami;
        // The primary first: it is the source of every push after.
        if let Some(need) = plan.members.get(&me) {
            if plan.auth == me {
                return Err("the authoritative member lacks objects".into());
            }
            let src = self.ctx.peer(&self.map, plan.auth).await?;
            if need.backfill {
                self.backfill_from(&src).await?;
            } else {
                for key in &need.objects {
                    self.pull(&src, key).await?;
                }
            }
        }
        let info = plan.auth_info;
        for &r in &self.replicas {
            let conn = self.ctx.peer(&self.map, r).await?;
            if let Some(need) = plan.members.get(&r) {
                if need.backfill {
                    self.backfill_to(&conn).await?;
                } else {
                    for key in &need.objects {
                        self.push(&conn, key, false).await?;
                    }
                }
            }
            let act = PgInfo {
                pool: self.pg.pool,
                pg_seed: self.pg.seed,
                epoch: self.map.epoch.0,
                info: info.encode(),
                log: plan.auth_log.iter().map(LogEntry::encode).collect(),
                activate: true,
                interval_start: self.interval_start,
            };
            self.request_ok(&conn, act.into(), Bytes::new()).await?;
        }
        Ok((info, plan.auth_log))
    }

    async fn request_ok(
        &self,
        conn: &Connection,
        msg: Message,
        data: Bytes,
    ) -> Result<Message, String> {
        let reply = conn
            .request_with_timeout(msg, data, self.ctx.cfg.peer_timeout)
            .await
            .map_err(|e| e.to_string())?;
        match reply.msg {
            Message::RepOpReply(r) if r.code != 0 => Err(format!("{}: {}", conn.peer(), r.message)),
            m => Ok(m),
        }
    }

    async fn pull(&self, src: &Connection, key: &ObjectKey) -> Result<(), String> {
        recovery::pull_object(&self.ctx, self.pg, self.map.epoch.0, src, key).await?;
        self.progress.add(1);
        Ok(())
    }

    async fn push(&self, dst: &Connection, key: &ObjectKey, reset: bool) -> Result<(), String> {
        recovery::push_object(&self.ctx, self.pg, self.map.epoch.0, dst, key, reset).await?;
        self.progress.add(1);
        Ok(())
    }

    /// Every object of our copy, in pages.
    fn local_objects(&self) -> Result<Vec<ObjectKey>, String> {
        let mut out = Vec::new();
        let mut cursor: Option<ObjectKey> = None;
        loop {
            let page = tokio::task::block_in_place(|| {
                self.ctx
                    .store
                    .list_objects(&self.coll, cursor.as_ref(), 1024)
            })
            .map_err(|e| e.to_string())?;
            out.extend(
                page.objects
                    .into_iter()
                    .filter(|k| k.name.first() != Some(&0)),
            );
            match page.next {
                Some(n) => cursor = Some(n),
                None => return Ok(out),
            }
        }
    }

    async fn backfill_to(&self, dst: &Connection) -> Result<(), String> {
        let reset = PgPush {
            pool: self.pg.pool,
            pg_seed: self.pg.seed,
            epoch: self.map.epoch.0,
            reset: true,
            ..PgPush::default()
        };
        self.request_ok(dst, reset.into(), Bytes::new()).await?;
        for key in self.local_objects()? {
            self.push(dst, &key, false).await?;
        }
        Ok(())
    }

    async fn backfill_from(&self, src: &Connection) -> Result<(), String> {
        let mut theirs = BTreeSet::new();
        let mut cursor: Option<(u32, Vec<u8>)> = None;
        loop {
            let list = PgList {
                pool: self.pg.pool,
                pg_seed: self.pg.seed,
                epoch: self.map.epoch.0,
                has_cursor: cursor.is_some(),
                cursor_hash: cursor.as_ref().map_or(0, |c| c.0),
                cursor_name: cursor.as_ref().map(|c| c.1.clone()).unwrap_or_default(),
                max: 1024,
            };
            let reply = src
                .request_with_timeout(list, Bytes::new(), self.ctx.cfg.peer_timeout)
                .await
                .map_err(|e| e.to_string())?;
            let Message::PgListReply(page) = reply.msg else {
                return Err("bad listing reply".into());
            };
            if page.code != 0 {
                return Err(format!("listing {}: {}", src.peer(), page.message));
            }
            let pool = self.map.pool(self.pg.pool).ok_or("the pool is gone")?;
            for (ns, name) in page.nspaces.iter().zip(&page.names) {
                let key = crate::object::object_key(pool, ns, name).map_err(|e| e.to_string())?;
                theirs.insert(key);
            }
            if !page.more {
                break;
            }
            cursor = Some((page.next_hash, page.next_name));
        }
        for key in self.local_objects()? {
            if !theirs.contains(&key) {
                let mut t = Transaction::new();
                t.remove(self.coll, key);
                tokio::task::block_in_place(|| self.ctx.store.apply_transaction(t))
                    .map_err(|e| e.to_string())?;
            }
        }
        for key in &theirs {
            self.pull(src, key).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::LogOp;

    fn e(epoch: u32, v: u64, name: &str) -> LogEntry {
        LogEntry {
            version: Version { epoch, v },
            op: LogOp::Modify,
            key: ObjectKey::new(1, name),
            reqid: None,
            code: 0,
        }
    }

    fn member(tail: (u32, u64), entries: Vec<LogEntry>) -> MemberLog {
        let last = entries.last().map(|x| x.version).unwrap_or(Version {
            epoch: tail.0,
            v: tail.1,
        });
        MemberLog {
            info: PgInfoData {
                last_update: last,
                log_tail: Version {
                    epoch: tail.0,
                    v: tail.1,
                },
                ..PgInfoData::default()
            },
            entries,
        }
    }

    #[test]
    fn equal_logs_need_nothing() {
        let l = member((0, 0), vec![e(1, 1, "a"), e(1, 2, "b")]);
        let logs = BTreeMap::from([(0, l.clone()), (1, l.clone()), (2, l)]);
        let p = plan_recovery(0, &logs, &[0, 1, 2]);
        assert_eq!(p.auth, 0);
        assert!(p.members.is_empty());
    }

    #[test]
    fn a_lagging_replica_gets_the_newer_objects() {
        let full = member((0, 0), vec![e(1, 1, "a"), e(1, 2, "b"), e(2, 3, "c")]);
        let behind = member((0, 0), vec![e(1, 1, "a")]);
        let logs = BTreeMap::from([(0, full), (1, behind)]);
        let p = plan_recovery(0, &logs, &[0, 1]);
        let need = &p.members[&1];
        assert!(!need.backfill);
        let names: Vec<_> = need.objects.iter().map(|k| k.name.clone()).collect();
        assert_eq!(names, vec![b"b".to_vec(), b"c".to_vec()]);
    }

    #[test]
    fn a_lagging_primary_pulls_from_the_newest_member() {
        let full = member((0, 0), vec![e(1, 1, "a"), e(2, 2, "b")]);
        let behind = member((0, 0), vec![e(1, 1, "a")]);
        let logs = BTreeMap::from([(0, behind), (3, full)]);
        let p = plan_recovery(0, &logs, &[0, 1]);
        assert_eq!(p.auth, 3);
        assert_eq!(p.members[&0].objects.len(), 1);
        // osd.1 answered nothing: it is backfilled.
        assert!(p.members[&1].backfill);
    }

    #[test]
    fn divergent_entries_are_replaced_and_old_logs_backfill() {
        let auth = member((1, 5), vec![e(2, 6, "a"), e(3, 7, "b")]);
        // Took 2'7 (object "x") that the authoritative log replaced with 3'7.
        let divergent = member((1, 5), vec![e(2, 6, "a"), e(2, 7, "x")]);
        let ancient = member((0, 0), vec![e(1, 1, "z")]);
        let logs = BTreeMap::from([(0, auth), (1, divergent), (2, ancient)]);
        let p = plan_recovery(0, &logs, &[0, 1, 2]);
        let names: Vec<_> = p.members[&1]
            .objects
            .iter()
            .map(|k| k.name.clone())
            .collect();
        assert_eq!(names, vec![b"b".to_vec(), b"x".to_vec()]);
        assert!(p.members[&2].backfill);
    }
}

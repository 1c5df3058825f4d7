//! Peering, run by the primary at the start of each interval:
//!
//! 1. gather the info, log and missing set of every member of the acting
//!    set and of the previous one;
//! 2. ask the monitors for the PG's intervals since the newest epoch in
//!    which a member saw it go active, and hear from at least one member of
//!    every interval that may have taken writes (`maybe_went_rw`): probe
//!    every member of those intervals that is up (Ceph's prior set; they
//!    may also hold objects no one else has); with none of an interval's
//!    members up the PG
//!    is `down`, with some up but none answering it is `incomplete` — it
//!    never serves what could be stale data;
//! 3. have the monitors record our `up_thru` for this interval (so later
//!    peerings know this interval may take writes);
//! 4. choose the authoritative log (the newest), work out what each member
//!    lacks, hand every replica the authoritative log with its missing set
//!    (activation), and go active. Recovery of the missing objects then
//!    runs while the PG serves I/O (`recover.rs`).
//!
//! The decision ([`plan_recovery`]) is a pure function of the members'
//! logs; the queries and the activation run in tasks so the PG keeps
//! answering its peers meanwhile.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use shoal_maps::{OsdMap, PastInterval};
use shoal_objectstore::ObjectKey;
use shoal_proto::{Message, PgInfo, PgQuery};

use super::{Pg, PgEvent};
use crate::ctx::OsdCtx;
use crate::log::{Dup, LogEntry, PgInfoData, Version};
use crate::missing::MissingSet;
use crate::pieces::{PIECES_MAX, Records};
use crate::recovery;

/// How long peering waits for a member of the previous interval that is
/// not in the current acting set.
pub(crate) const PRIOR_QUERY_TIMEOUT: Duration = Duration::from_secs(2);
/// How often an `incomplete` PG, or one waiting for its `up_thru`, looks again.
const PEERING_RETRY: Duration = Duration::from_secs(1);

/// Where a primary is within peering.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PeeringProgress {
    /// The past intervals that may have taken writes, from the monitors.
    pub(crate) past: Option<Vec<PastInterval>>,
    /// Members that did not answer a probe.
    pub(crate) probe_failed: BTreeSet<i32>,
    /// Waiting for the monitors to record our `up_thru`.
    pub(crate) waiting_up_thru: bool,
    /// Asked the monitors for this `pg_temp` (empty: its removal).
    pub(crate) waiting_pg_temp: Option<Vec<i32>>,
    /// Why the PG is `down` or `incomplete`.
    pub(crate) blocked: Option<String>,
}

/// One member's copy of a PG, as peering sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberLog {
    /// Its info.
    pub info: PgInfoData,
    /// Its log entries, oldest first.
    pub entries: Vec<LogEntry>,
    /// The objects it already knew it lacks (from an unfinished recovery).
    pub missing: MissingSet,
    /// The request ids of its trimmed entries.
    pub dups: Vec<Dup>,
    /// Of an erasure-coded PG: the shard its copy is.
    pub shard: u8,
    /// Of an erasure-coded PG: it can roll back every change of its log
    /// newer than this (`crate::ec::rollback`); `None`: none.
    pub rollback_floor: Option<Version>,
    /// Of an erasure-coded PG: the other shards it holds from positions it
    /// left.
    pub strays: Vec<Stray>,
}

impl MemberLog {
    /// Erasure coding: the shard this member holds as it will be kept
    /// as a stray when it moves to another position — activation undoes
    /// the divergent changes it can (every one newer than its rollback
    /// floor) and cuts its log to the history it shares with `plan`'s
    /// authoritative log; an object with a divergent change it cannot
    /// undo is missing there. (`PgCore::settle_stray` does it.)
    pub fn settled(&self, plan: &RecoveryPlan) -> Stray {
        let s = settle(
            &self.entries,
            self.info,
            &self.missing,
            self.rollback_floor,
            &plan.auth_log,
            plan.auth_info.log_tail,
        );
        Stray {
            shard: self.shard,
            info: s.info,
            missing: s.missing,
        }
    }
}

/// A member's copy settled against the authoritative log `auth` (from
/// `tail` on): its log cut to the history the two share, its info ending
/// there, and its missing set with every object of a divergent change it
/// cannot undo (one not newer than its rollback `floor`).
pub(crate) struct Settled {
    pub info: PgInfoData,
    pub missing: MissingSet,
    pub entries: Vec<LogEntry>,
}

/// See [`Settled`]; planned by the primary ([`MemberLog::settled`]) and
/// done by the member (`PgCore::settle_stray`) with the same function.
pub(crate) fn settle(
    entries: &[LogEntry],
    info: PgInfoData,
    missing: &MissingSet,
    floor: Option<Version>,
    auth: &[LogEntry],
    tail: Version,
) -> Settled {
    let shared: BTreeSet<(Version, &ObjectKey)> =
        auth.iter().map(|e| (e.version, &e.key)).collect();
    let divergent = |e: &LogEntry| e.version > tail && !shared.contains(&(e.version, &e.key));
    let mut missing = missing.objects().clone();
    let mut undoable: BTreeMap<&ObjectKey, bool> = BTreeMap::new();
    for e in entries.iter().filter(|e| divergent(e)) {
        let ok = floor.is_some_and(|f| e.version > f);
        let all = undoable.entry(&e.key).or_insert(true);
        *all = *all && ok;
    }
    for (key, ok) in undoable {
        if !ok {
            missing.insert(key.clone(), tail);
        }
    }
    let common: Vec<LogEntry> = entries.iter().filter(|e| !divergent(e)).cloned().collect();
    let last_update = match common.last() {
        Some(e) => e.version,
        None if !entries.is_empty() => tail,
        None => info.last_update,
    };
    Settled {
        info: PgInfoData {
            last_update,
            ..info
        },
        missing: MissingSet::from_map(missing),
        entries: common,
    }
}

/// A shard of an erasure-coded PG a member holds from a position it left,
/// as it was when it left.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stray {
    /// The shard.
    pub shard: u8,
    /// Its info.
    pub info: PgInfoData,
    /// The objects it lacked.
    pub missing: MissingSet,
}

impl Stray {
    /// Whether the stray holds `key` as the authoritative log of `plan`
    /// has it: its history is the log's (its newest change is one of the
    /// log's), no later change touched `key`, and it did not lack `key`.
    pub fn holds(&self, plan: &RecoveryPlan, key: &ObjectKey) -> bool {
        let lu = self.info.last_update;
        let in_history = lu > Version::default()
            && (lu == plan.auth_info.last_update || plan.auth_log.iter().any(|e| e.version == lu));
        in_history
            && !self.missing.contains(key)
            && !plan
                .auth_log
                .iter()
                .any(|e| e.version > lu && e.key == *key)
    }
}

/// What one member lacks to match the authoritative log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberRecovery {
    /// Its log is too old (or it has no copy): it gets the whole PG (backfill).
    pub backfill: bool,
    /// Otherwise, the objects to copy to it (or remove from it), each with
    /// the version it needs.
    pub missing: BTreeMap<ObjectKey, Version>,
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
    /// Its dups.
    pub auth_dups: Vec<Dup>,
    /// What each member lacks: every member that answered and every acting
    /// member (an acting member with nothing to recover has an empty entry).
    pub members: BTreeMap<i32, MemberRecovery>,
    /// Erasure coding: members outside the acting set counted as holding
    /// objects only once they undo their divergent changes, so they are
    /// activated too (they take no writes and no recovery).
    pub roll_back: BTreeSet<i32>,
}

impl RecoveryPlan {
    /// Whether `osd` holds the authoritative copy of `key`.
    pub fn has(&self, osd: i32, key: &ObjectKey) -> bool {
        self.members
            .get(&osd)
            .is_some_and(|m| !m.backfill && !m.missing.contains_key(key))
    }

    /// The members holding the authoritative copy of `key`, those of
    /// `prefer` first.
    pub fn sources(&self, key: &ObjectKey, prefer: &[i32]) -> Vec<i32> {
        let mut out: Vec<i32> = prefer
            .iter()
            .copied()
            .filter(|o| self.has(*o, key))
            .collect();
        for o in self.members.keys() {
            if !out.contains(o) && self.has(*o, key) {
                out.push(*o);
            }
        }
        out
    }
}

/// Chooses the authoritative log among `logs` (among the members that saw
/// the newest activation — the highest `last_epoch_started` — the newest
/// `last_update`; the primary `me` wins ties) and what each member of `logs` and of
/// `acting` lacks to match it: the objects it already knew missing, those
/// changed by authoritative entries newer than its `last_update`, and those
/// of its own entries the authoritative log does not have (divergent
/// changes). A member whose `last_update` is older than the authoritative
/// log's tail, that answered nothing, or whose copy is empty and never
/// went active (a new member) while the PG has data, is backfilled.
pub fn plan_recovery(me: i32, logs: &BTreeMap<i32, MemberLog>, acting: &[i32]) -> RecoveryPlan {
    plan_recovery_k(me, logs, acting, 1)
}

/// [`plan_recovery`] for a PG whose objects need `k` members to be read
/// (an erasure-coded PG's data shards): the authoritative log is the
/// newest that at least `k` of the candidates reached, since a change
/// fewer than `k` shards hold cannot be decoded — it is rolled back on
/// the members that have it (their copies are rebuilt from the others).
pub fn plan_recovery_k(
    me: i32,
    logs: &BTreeMap<i32, MemberLog>,
    acting: &[i32],
    k: usize,
) -> RecoveryPlan {
    let empty = MemberLog::default();
    // A log from before the newest activation may run past the point where
    // that activation's history went another way: its extra entries are
    // divergent however new they look (Ceph's find_best_info; the
    // simulation found a write answered from such an entry, then lost).
    let newest_les = logs
        .values()
        .map(|l| l.info.last_epoch_started)
        .max()
        .unwrap_or(0);
    let candidates = || {
        logs.iter()
            .filter(|(_, l)| l.info.last_epoch_started == newest_les)
    };
    // Erasure coding: a change is readable once k distinct shards hold
    // it (two members may hold the same shard after positions moved).
    let mut reached: Vec<Version> = if k > 1 {
        let mut by_shard: BTreeMap<u8, Version> = BTreeMap::new();
        for (_, l) in candidates() {
            let v = by_shard.entry(l.shard).or_default();
            *v = (*v).max(l.info.last_update);
        }
        by_shard.into_values().collect()
    } else {
        candidates().map(|(_, l)| l.info.last_update).collect()
    };
    reached.sort_unstable_by(|a, b| b.cmp(a));
    let cap = if k > 1 {
        reached.get(k - 1).copied()
    } else {
        None
    };
    let auth = candidates()
        .filter(|(_, l)| cap.is_none_or(|c| l.info.last_update <= c))
        .max_by_key(|(osd, l)| (l.info.last_update, **osd == me, -**osd))
        .map_or(me, |(osd, _)| *osd);
    let auth_log = logs.get(&auth).unwrap_or(&empty);
    let tail = auth_log.info.log_tail;
    let auth_versions: BTreeSet<(Version, &ObjectKey)> = auth_log
        .entries
        .iter()
        .map(|e| (e.version, &e.key))
        .collect();
    // The newest authoritative version of each object the log names.
    let newest: BTreeMap<&ObjectKey, Version> = auth_log
        .entries
        .iter()
        .map(|e| (&e.key, e.version))
        .collect();
    let need = |k: &ObjectKey, otherwise: Version| newest.get(k).copied().unwrap_or(otherwise);
    let mut members = BTreeMap::new();
    let mut roll_back = BTreeSet::new();
    let everyone: BTreeSet<i32> = logs.keys().chain(acting).copied().collect();
    for m in everyone {
        let Some(l) = logs.get(&m) else {
            let backfill = auth_log.info.last_update > Version::default();
            members.insert(
                m,
                MemberRecovery {
                    backfill,
                    missing: BTreeMap::new(),
                },
            );
            continue;
        };
        let lu = l.info.last_update;
        let mut r = MemberRecovery::default();
        let never_active = l.info.last_epoch_started == 0 && lu == Version::default();
        if lu < tail || (never_active && auth_log.info.last_update > Version::default()) {
            r.backfill = true;
        } else {
            for (k, v) in l.missing.objects() {
                r.missing.insert(k.clone(), need(k, *v));
            }
            for e in auth_log.entries.iter().filter(|e| e.version > lu) {
                r.missing.insert(e.key.clone(), e.version);
            }
            let divergent: Vec<&LogEntry> = l
                .entries
                .iter()
                .filter(|e| e.version > tail && !auth_versions.contains(&(e.version, &e.key)))
                .collect();
            // Erasure coding: an object whose divergent changes the member
            // can all roll back is back at its older version there once it
            // is activated. A member of a past interval only is activated
            // for that too: its shard of the older version may be one of
            // the k that object has left (the simulation found objects
            // unfound while such a member kept a change others undid).
            let undone = |key: &ObjectKey| {
                k > 1
                    && l.rollback_floor.is_some_and(|f| {
                        divergent
                            .iter()
                            .filter(|e| e.key == *key)
                            .all(|e| e.version > f)
                    })
            };
            for e in &divergent {
                if !undone(&e.key) {
                    r.missing.insert(e.key.clone(), need(&e.key, tail));
                } else if !acting.contains(&m) {
                    roll_back.insert(m);
                }
            }
        }
        members.insert(m, r);
    }
    RecoveryPlan {
        auth,
        auth_info: auth_log.info,
        auth_log: auth_log.entries.clone(),
        auth_dups: auth_log.dups.clone(),
        members,
        roll_back,
    }
}

/// What a member is told at activation.
#[derive(Debug)]
pub(crate) struct Activation {
    pub(crate) osd: i32,
    pub(crate) backfill: bool,
    pub(crate) missing: MissingSet,
}

impl Pg {
    /// Queries member `osd` after `delay`, giving it `limit`; the answer
    /// comes back as [`PgEvent::PeerInfo`].
    pub(super) fn query_task(
        &self,
        osd: i32,
        delay: Duration,
        limit: Duration,
        interval_start: u32,
    ) {
        let ctx = Arc::clone(&self.ctx);
        let Some(map) = self.core.map.clone() else {
            return;
        };
        let events = self.events.clone();
        let q = PgQuery {
            pool: self.core.id.pool,
            pg_seed: self.core.id.seed,
            epoch: map.epoch.0,
            interval_start,
            piece: 0,
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

    /// Asks the monitors for the PG's intervals since `since`; the answer
    /// comes back as [`PgEvent::PastIntervals`].
    pub(super) fn ask_past_intervals(&self, since: u32, interval_start: u32) {
        let ctx = Arc::clone(&self.ctx);
        let events = self.events.clone();
        let pg = self.core.id;
        // The monitor that answers has seen at least our map, so the
        // intervals reach this one's start.
        let epoch = self.core.epoch();
        tokio::spawn(async move {
            let result = ctx
                .monc
                .past_intervals(pg, since, epoch)
                .await
                .map(|p| p.intervals)
                .map_err(|e| e.to_string());
            let _ = events.send(PgEvent::PastIntervals {
                interval_start,
                result,
            });
        });
    }

    /// Asks the monitors for a `pg_temp` (empty: its removal).
    pub(super) fn send_pg_temp(&self, osds: Vec<i32>) {
        let ctx = Arc::clone(&self.ctx);
        let cmd = shoal_monclient::Command::OsdPgTemp {
            id: self.core.whoami(),
            pgid: self.core.id.to_string(),
            osds,
        };
        tokio::spawn(async move {
            if let Err(e) = ctx.monc.command(&cmd).await {
                tracing::debug!("pg_temp request failed: {e}");
            }
        });
    }

    /// [`PgEvent::PeeringRetry`] after [`PEERING_RETRY`].
    pub(super) fn peering_retry_later(&self, interval_start: u32) {
        let events = self.events.clone();
        tokio::spawn(async move {
            tokio::time::sleep(PEERING_RETRY).await;
            let _ = events.send(PgEvent::PeeringRetry { interval_start });
        });
    }

    /// Lists the PG's objects for a backfill (member `from`'s copy, or
    /// ours), adding `lacks`; the answer comes back as [`PgEvent::Listed`].
    pub(super) fn list_for_backfill(
        &self,
        from: Option<i32>,
        lacks: Vec<ObjectKey>,
        interval_start: u32,
    ) {
        let Some(map) = self.core.map.clone() else {
            return;
        };
        let ctx = Arc::clone(&self.ctx);
        let events = self.events.clone();
        let (pg, coll) = (self.core.id, self.core.coll);
        tokio::spawn(async move {
            let listed = match from {
                Some(auth) => match ctx.peer(&map, auth).await {
                    Ok(src) => recovery::remote_objects(&ctx, &map, pg, &src).await,
                    Err(e) => Err(e),
                },
                None => {
                    let store = Arc::clone(&ctx.store);
                    shoal_net::runtime::offload(move || {
                        recovery::local_objects(store.as_ref(), coll)
                    })
                    .await
                    .and_then(|r| r.map_err(|e| e.to_string()))
                }
            };
            let result = listed.map(|mut keys| {
                keys.extend(lacks);
                keys
            });
            let _ = events.send(PgEvent::Listed {
                interval_start,
                result,
            });
        });
    }

    /// Sends each member its activation, all at once (each member's
    /// pieces in order); the outcome, once every member has answered or
    /// one has failed, comes back as [`PgEvent::Activated`].
    pub(super) fn send_activations(&self, msgs: Vec<(i32, PgInfo)>, interval_start: u32) {
        let Some(map) = self.core.map.clone() else {
            return;
        };
        let ctx = Arc::clone(&self.ctx);
        let events = self.events.clone();
        tokio::spawn(async move {
            let mut sends = tokio::task::JoinSet::new();
            for (osd, msg) in msgs {
                let (ctx, map) = (Arc::clone(&ctx), Arc::clone(&map));
                sends.spawn(async move { send_activation(&ctx, &map, osd, msg).await });
            }
            let mut result = Ok(());
            while let Some(r) = sends.join_next().await {
                let r = r
                    .map_err(|e| format!("an activation's send failed: {e}"))
                    .and_then(|r| r);
                if let Err(e) = r {
                    // The others are dropped with the set.
                    result = Err(e);
                    break;
                }
            }
            let _ = events.send(PgEvent::Activated {
                interval_start,
                result,
            });
        });
    }
}

/// Sends an activation in pieces of bounded size, each acknowledged
/// before the next.
async fn send_activation(
    ctx: &OsdCtx,
    map: &OsdMap,
    osd: i32,
    mut msg: PgInfo,
) -> Result<(), String> {
    let conn = ctx.peer(map, osd).await?;
    let all = Records {
        log: std::mem::take(&mut msg.log),
        dups: std::mem::take(&mut msg.dups),
        missing: std::mem::take(&mut msg.missing),
    };
    for n in 0..PIECES_MAX {
        let (piece, more) = all.piece(n, ctx.cfg.peering_piece_bytes);
        let msg = PgInfo {
            log: piece.log,
            dups: piece.dups,
            missing: piece.missing,
            more,
            piece: n,
            ..msg.clone()
        };
        let reply = conn
            .request_with_timeout(msg, Bytes::new(), ctx.cfg.peer_timeout)
            .await
            .map_err(|e| e.to_string())?;
        match reply.msg {
            Message::RepOpReply(r) if r.code != 0 => {
                return Err(format!("osd.{osd}: {}", r.message));
            }
            _ if !more => return Ok(()),
            _ => {}
        }
    }
    Err(format!("the activation of osd.{osd} takes too many pieces"))
}

/// Asks a member for its info, log, dups and missing set, piece by piece.
async fn query(ctx: &OsdCtx, map: &OsdMap, osd: i32, q: PgQuery) -> Result<MemberLog, String> {
    let conn = ctx.peer(map, osd).await?;
    let mut all = Records::default();
    let mut info: Option<Vec<u8>> = None;
    let mut shard;
    let mut floor;
    for n in 0..PIECES_MAX {
        let q = PgQuery {
            piece: n,
            ..q.clone()
        };
        let reply = conn
            .request_with_timeout(q, Bytes::new(), ctx.cfg.peer_timeout)
            .await
            .map_err(|e| e.to_string())?;
        let Message::PgInfo(piece) = reply.msg else {
            return Err(format!(
                "osd.{osd} answered a query with {:?}",
                reply.msg.msg_type()
            ));
        };
        // The pieces must describe one state of the member's copy.
        if info.as_ref().is_some_and(|i| *i != piece.info) {
            return Err(format!("osd.{osd}'s copy changed while it answered"));
        }
        info = Some(piece.info);
        shard = u8::try_from(piece.shard).unwrap_or(u8::MAX);
        floor = piece.has_rollback_floor.then_some(Version {
            epoch: piece.rollback_floor_epoch,
            v: piece.rollback_floor_v,
        });
        all.extend(Records {
            log: piece.log,
            dups: piece.dups,
            missing: piece.missing,
        });
        if !piece.more {
            let info = info.unwrap_or_default();
            let strays = piece
                .strays
                .iter()
                .map(|s| {
                    Ok(Stray {
                        shard: u8::try_from(s.shard).map_err(|_| "stray shard out of range")?,
                        info: PgInfoData::decode(&s.info).map_err(|e| e.to_string())?,
                        missing: MissingSet::decode(&s.missing).map_err(|e| e.to_string())?,
                    })
                })
                .collect::<Result<Vec<Stray>, String>>()
                .map_err(|e| format!("osd.{osd}'s strays: {e}"))?;
            return member_log(&info, &all).map(|l| MemberLog {
                shard,
                rollback_floor: floor,
                strays,
                ..l
            });
        }
    }
    Err(format!("osd.{osd}'s answer takes too many pieces"))
}

fn member_log(info: &[u8], all: &Records) -> Result<MemberLog, String> {
    let parsed = PgInfoData::decode(info).map_err(|e| e.to_string())?;
    let entries: Result<Vec<LogEntry>, _> = all.log.iter().map(|b| LogEntry::decode(b)).collect();
    let dups: Result<Vec<Dup>, _> = all.dups.iter().map(|b| Dup::decode(b)).collect();
    Ok(MemberLog {
        info: parsed,
        entries: entries.map_err(|e| e.to_string())?,
        missing: MissingSet::decode(&all.missing).map_err(|e| e.to_string())?,
        dups: dups.map_err(|e| e.to_string())?,
        shard: u8::MAX,
        rollback_floor: None,
        strays: Vec::new(),
    })
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
                last_epoch_started: 1,
                ..PgInfoData::default()
            },
            entries,
            missing: MissingSet::default(),
            dups: Vec::new(),
            shard: u8::MAX,
            rollback_floor: None,
            strays: Vec::new(),
        }
    }

    fn names(m: &MemberRecovery) -> Vec<Vec<u8>> {
        m.missing.keys().map(|k| k.name.clone()).collect()
    }

    #[test]
    fn equal_logs_need_nothing() {
        let l = member((0, 0), vec![e(1, 1, "a"), e(1, 2, "b")]);
        let logs = BTreeMap::from([(0, l.clone()), (1, l.clone()), (2, l)]);
        let p = plan_recovery(0, &logs, &[0, 1, 2]);
        assert_eq!(p.auth, 0);
        assert!(
            p.members
                .values()
                .all(|m| !m.backfill && m.missing.is_empty())
        );
        assert_eq!(p.sources(&ObjectKey::new(1, "a"), &[2]), vec![2, 0, 1]);
    }

    #[test]
    fn a_lagging_replica_misses_the_newer_objects_at_their_newest_versions() {
        let full = member(
            (0, 0),
            vec![e(1, 1, "a"), e(1, 2, "b"), e(2, 3, "c"), e(2, 4, "b")],
        );
        let behind = member((0, 0), vec![e(1, 1, "a")]);
        let logs = BTreeMap::from([(0, full), (1, behind)]);
        let p = plan_recovery(0, &logs, &[0, 1]);
        let need = &p.members[&1];
        assert!(!need.backfill);
        assert_eq!(names(need), vec![b"b".to_vec(), b"c".to_vec()]);
        assert_eq!(
            need.missing[&ObjectKey::new(1, "b")],
            Version { epoch: 2, v: 4 }
        );
        assert!(p.members[&0].missing.is_empty());
        // Only osd.0 can be a source for b.
        assert_eq!(p.sources(&ObjectKey::new(1, "b"), &[1]), vec![0]);
    }

    #[test]
    fn a_lagging_primary_misses_what_the_newest_member_has() {
        let full = member((0, 0), vec![e(1, 1, "a"), e(2, 2, "b")]);
        let behind = member((0, 0), vec![e(1, 1, "a")]);
        let logs = BTreeMap::from([(0, behind), (3, full)]);
        let p = plan_recovery(0, &logs, &[0, 1]);
        assert_eq!(p.auth, 3);
        assert_eq!(names(&p.members[&0]), vec![b"b".to_vec()]);
        // osd.1 answered nothing: it is backfilled, and is no source.
        assert!(p.members[&1].backfill);
        assert_eq!(p.sources(&ObjectKey::new(1, "a"), &[0, 1]), vec![0, 3]);
        assert_eq!(p.sources(&ObjectKey::new(1, "b"), &[0, 1]), vec![3]);
    }

    #[test]
    fn divergent_entries_are_replaced_and_old_logs_backfill() {
        let auth = member((1, 5), vec![e(2, 6, "a"), e(3, 7, "b")]);
        // Took 2'7 (object "x") that the authoritative log replaced with 3'7.
        let divergent = member((1, 5), vec![e(2, 6, "a"), e(2, 7, "x")]);
        let ancient = member((0, 0), vec![e(1, 1, "z")]);
        let logs = BTreeMap::from([(0, auth), (1, divergent), (2, ancient)]);
        let p = plan_recovery(0, &logs, &[0, 1, 2]);
        assert_eq!(names(&p.members[&1]), vec![b"b".to_vec(), b"x".to_vec()]);
        assert!(p.members[&2].backfill);
        assert!(p.members[&2].missing.is_empty());
    }

    #[test]
    fn a_log_from_before_the_newest_activation_loses_however_long() {
        // osd.1 took 2'3 in interval 2, which never completed; interval 5
        // went active with osd.0's log (up to 2'2) and did not take it.
        let mut old = member((0, 0), vec![e(2, 1, "a"), e(2, 2, "b"), e(2, 3, "c")]);
        old.info.last_epoch_started = 2;
        let mut newest = member((0, 0), vec![e(2, 1, "a"), e(2, 2, "b")]);
        newest.info.last_epoch_started = 5;
        let logs = BTreeMap::from([(0, newest), (1, old)]);
        let p = plan_recovery(1, &logs, &[1, 0]);
        assert_eq!(p.auth, 0);
        assert_eq!(p.auth_info.last_update, Version { epoch: 2, v: 2 });
        // osd.1's 2'3 is divergent: "c" goes back to what the log says.
        assert_eq!(names(&p.members[&1]), vec![b"c".to_vec()]);
    }

    #[test]
    fn a_new_empty_member_is_backfilled_even_when_the_log_reaches_back() {
        let auth = member((0, 0), vec![e(1, 1, "a"), e(1, 2, "b")]);
        let mut fresh = member((0, 0), vec![]);
        fresh.info.last_epoch_started = 0;
        let logs = BTreeMap::from([(0, auth), (4, fresh.clone())]);
        let p = plan_recovery(0, &logs, &[0, 4]);
        assert!(p.members[&4].backfill);
        // Before the PG has data, a new member needs nothing.
        let logs = BTreeMap::from([(0, fresh.clone()), (4, fresh)]);
        assert!(!plan_recovery(0, &logs, &[0, 4]).members[&4].backfill);
    }

    #[test]
    fn a_persisted_missing_set_carries_over_and_rules_out_a_source() {
        // osd.1 has the newest log but had not yet recovered "a" when the
        // interval changed; osd.2 still has it.
        let mut auth = member((0, 0), vec![e(1, 1, "a"), e(1, 2, "b")]);
        auth.missing = MissingSet::from_map(BTreeMap::from([(
            ObjectKey::new(1, "a"),
            Version { epoch: 1, v: 1 },
        )]));
        let other = member((0, 0), vec![e(1, 1, "a"), e(1, 2, "b")]);
        let behind = member((0, 0), vec![]);
        let logs = BTreeMap::from([(0, behind), (1, auth), (2, other)]);
        let p = plan_recovery(0, &logs, &[0, 1, 2]);
        assert_eq!(p.auth, 1);
        assert_eq!(names(&p.members[&1]), vec![b"a".to_vec()]);
        assert_eq!(names(&p.members[&0]), vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(p.sources(&ObjectKey::new(1, "a"), &[0, 1, 2]), vec![2]);
        assert_eq!(p.sources(&ObjectKey::new(1, "b"), &[0, 1, 2]), vec![1, 2]);
    }

    /// An erasure-coded member of `shard` with these entries.
    fn shard_member(shard: u8, entries: Vec<LogEntry>, floor: Option<Version>) -> MemberLog {
        MemberLog {
            shard,
            rollback_floor: floor,
            ..member((0, 0), entries)
        }
    }

    fn v(epoch: u32, v: u64) -> Version {
        Version { epoch, v }
    }

    /// 3+1: a change that reached two shards of four is not readable; the
    /// authoritative log is the newest that three distinct shards reached,
    /// and members that can roll the change back keep the object (their
    /// stash restores it); one that cannot lacks it.
    #[test]
    fn erasure_coded_changes_short_of_k_shards_roll_back_where_stashed() {
        let base = vec![e(1, 1, "a"), e(1, 2, "b")];
        let mut ahead = base.clone();
        ahead.push(e(2, 3, "a"));
        let logs = BTreeMap::from([
            (0, shard_member(0, ahead.clone(), Some(v(1, 2)))),
            (1, shard_member(1, ahead, None)),
            (2, shard_member(2, base.clone(), Some(v(1, 2)))),
            (3, shard_member(3, base, Some(v(1, 2)))),
        ]);
        let p = plan_recovery_k(0, &logs, &[0, 1, 2, 3], 3);
        assert_eq!(p.auth_info.last_update, v(1, 2));
        assert!(
            p.members[&0].missing.is_empty(),
            "rolled back from its stash"
        );
        assert_eq!(
            names(&p.members[&1]),
            vec![b"a".to_vec()],
            "no stash: rebuilt"
        );
        assert!(p.members[&2].missing.is_empty() && p.members[&3].missing.is_empty());
    }

    /// 2+1: a member of a past interval only (osd.9, not acting) holds
    /// a change the acting members never got; it can undo it, so it
    /// counts as holding the older version — one of the k shards that
    /// version may have left — and is activated to undo it.
    #[test]
    fn a_past_member_that_can_undo_its_divergent_change_is_activated_to_undo_it() {
        let base = vec![e(1, 1, "a"), e(1, 2, "a")];
        let mut ahead = base.clone();
        ahead.push(e(2, 3, "a"));
        let logs = BTreeMap::from([
            (0, shard_member(1, base.clone(), Some(v(1, 2)))),
            (2, shard_member(2, base, Some(v(1, 2)))),
            (9, shard_member(0, ahead.clone(), Some(v(1, 2)))),
        ]);
        let p = plan_recovery_k(0, &logs, &[0, 2, 4], 2);
        assert_eq!(p.auth_info.last_update, v(1, 2));
        assert!(p.has(9, &ObjectKey::new(1, "a")), "after its rollback");
        assert_eq!(p.roll_back, BTreeSet::from([9]));
        // Without a stash it keeps the newer version: nothing to activate.
        let logs = BTreeMap::from([(0, logs[&0].clone()), (9, shard_member(0, ahead, None))]);
        let p = plan_recovery_k(0, &logs, &[0, 2, 4], 2);
        assert!(!p.has(9, &ObjectKey::new(1, "a")));
        assert!(p.roll_back.is_empty());
    }

    /// 3+1: a member moved to another position keeps the shard it held
    /// as a stray, settled: a divergent change it can undo is undone and
    /// its log cut to the shared history, so the stray serves every
    /// object no later change touched; one it cannot undo is missing.
    #[test]
    fn a_moved_members_shard_is_settled_to_the_shared_history() {
        let base = vec![e(1, 1, "a"), e(1, 2, "b"), e(1, 3, "c")];
        let logs = BTreeMap::from([
            (0, shard_member(0, base.clone(), Some(v(1, 3)))),
            (1, shard_member(1, base.clone(), Some(v(1, 3)))),
            (2, shard_member(2, base.clone(), Some(v(1, 3)))),
        ]);
        let p = plan_recovery_k(0, &logs, &[0, 1, 2], 3);
        let mut ahead = base.clone();
        ahead.push(e(2, 4, "a"));
        ahead.push(e(2, 5, "b"));
        // Both divergent changes undoable: nothing missing, the stray is
        // at the shared history's end and holds every object.
        let stray = shard_member(3, ahead.clone(), Some(v(1, 3))).settled(&p);
        assert_eq!((stray.shard, stray.info.last_update), (3, v(1, 3)));
        assert!(stray.missing.is_empty());
        for n in ["a", "b", "c"] {
            assert!(stray.holds(&p, &ObjectKey::new(1, n)), "{n}");
        }
        // The change to "a" is not newer than its floor (no stash):
        // "a" stays missing, "b" is undone.
        let stray = shard_member(3, ahead, Some(v(2, 4))).settled(&p);
        assert_eq!(stray.info.last_update, v(1, 3));
        assert_eq!(
            stray.missing.objects().keys().cloned().collect::<Vec<_>>(),
            vec![ObjectKey::new(1, "a")]
        );
        assert!(!stray.holds(&p, &ObjectKey::new(1, "a")));
        assert!(stray.holds(&p, &ObjectKey::new(1, "b")));
        // Unsettled, its newest change is not the log's: it held nothing.
        let raw = Stray {
            shard: 3,
            info: shard_member(3, vec![e(2, 4, "a")], None).info,
            missing: MissingSet::default(),
        };
        assert!(!raw.holds(&p, &ObjectKey::new(1, "c")));
    }

    /// Two members holding one shard count once towards k.
    #[test]
    fn two_copies_of_one_shard_count_once_towards_k() {
        let base = vec![e(1, 1, "a")];
        let mut ahead = base.clone();
        ahead.push(e(2, 2, "b"));
        let logs = BTreeMap::from([
            (0, shard_member(0, ahead.clone(), None)),
            (1, shard_member(0, ahead, None)),
            (2, shard_member(1, base.clone(), None)),
        ]);
        // 2+1: change 2'2 is on shard 0 alone (twice): not readable.
        let p = plan_recovery_k(0, &logs, &[0, 2], 2);
        assert_eq!(p.auth_info.last_update, v(1, 1));
        assert_eq!(names(&p.members[&0]), vec![b"b".to_vec()]);
    }

    /// A stray serves an object when its history is the log's, no later
    /// change touched the object, and it did not lack it.
    #[test]
    fn a_stray_holds_what_no_later_change_touched() {
        let log = member((0, 0), vec![e(1, 1, "a"), e(1, 2, "b"), e(2, 3, "a")]);
        let logs = BTreeMap::from([(0, log)]);
        let p = plan_recovery(0, &logs, &[0]);
        let stray = |lu: Version, missing: &[&str]| Stray {
            shard: 1,
            info: PgInfoData {
                last_update: lu,
                ..PgInfoData::default()
            },
            missing: MissingSet::from_map(
                missing
                    .iter()
                    .map(|n| (ObjectKey::new(1, *n), v(1, 1)))
                    .collect(),
            ),
        };
        let (a, b) = (ObjectKey::new(1, "a"), ObjectKey::new(1, "b"));
        let left_at_2 = stray(v(1, 2), &[]);
        assert!(left_at_2.holds(&p, &b), "b unchanged since");
        assert!(!left_at_2.holds(&p, &a), "a changed at 2'3");
        assert!(stray(v(2, 3), &[]).holds(&p, &a));
        assert!(!stray(v(2, 3), &["a"]).holds(&p, &a), "it lacked a");
        assert!(!stray(v(9, 2), &[]).holds(&p, &b), "another history");
        assert!(!stray(Version::default(), &[]).holds(&p, &b), "empty");
    }
}

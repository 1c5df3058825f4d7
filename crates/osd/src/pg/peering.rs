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
use shoal_objectstore::{ObjectKey, Transaction};
use shoal_proto::{Message, PgInfo, PgQuery};

use super::recover::RecoveryState;
use super::{Pg, PgEvent, State};
use crate::ctx::OsdCtx;
use crate::log::{Dup, LogEntry, PgInfoData, PgLog, Version};
use crate::missing::MissingSet;
use crate::pieces::{PIECES_MAX, Records};
use crate::recovery;

/// How long peering waits for a member of the previous interval that is
/// not in the current acting set.
const PRIOR_QUERY_TIMEOUT: Duration = Duration::from_secs(2);
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
    let auth = logs
        .iter()
        .filter(|(_, l)| l.info.last_epoch_started == newest_les)
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
            for e in &l.entries {
                if e.version > tail && !auth_versions.contains(&(e.version, &e.key)) {
                    r.missing.insert(e.key.clone(), need(&e.key, tail));
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
    }
}

/// What a member is told at activation.
struct Activation {
    osd: i32,
    backfill: bool,
    missing: MissingSet,
}

impl Pg {
    /// Starts peering for the current interval (primary only).
    pub(super) async fn start_peering(&mut self) {
        self.reset_peering();
        let min = self.core.pool.as_ref().map_or(1, |p| p.min_size.max(1)) as usize;
        if self.core.acting.len() < min {
            self.core.state = State::Peered;
            return;
        }
        self.core.state = State::Peering;
        let Some(map) = self.core.map.clone() else {
            return;
        };
        let me = self.core.whoami();
        let mut peers: BTreeSet<i32> = self.core.other_shards().into_iter().collect();
        for p in &self.core.prior {
            if *p != me && *p >= 0 && map.is_up(*p) {
                peers.insert(*p);
            }
        }
        if self.search_everywhere {
            // Objects no member held: any up OSD may have a copy (one
            // that left the PG's intervals long ago, say).
            peers.extend(
                map.osds()
                    .map(|(o, _)| o)
                    .filter(|o| *o != me && map.is_up(*o)),
            );
        }
        self.query_all(peers.into_iter().collect(), Duration::ZERO);
    }

    /// Peers again after `delay` (a failed activation or query).
    pub(super) fn repeer_soon(&mut self, delay: Duration) {
        self.reset_peering();
        self.core.state = State::Peering;
        self.query_all(self.core.other_shards(), delay);
    }

    /// Forgets this interval's peering and recovery; ops waiting for an
    /// object go back to the PG's queue.
    fn reset_peering(&mut self) {
        self.core.recovery = None;
        crate::recovery::CopyFence::bump(&self.copy_fence);
        self.plan = None;
        self.peering = PeeringProgress::default();
        self.core.requeue_object_waiters();
    }

    /// Queries `peers` (after `delay`) from scratch.
    fn query_all(&mut self, peers: Vec<i32>, delay: Duration) {
        self.peer_logs.clear();
        self.peers_pending = peers.clone();
        for p in peers {
            self.query_peer(p, delay);
        }
        if self.peers_pending.is_empty() {
            self.after_queries();
        }
    }

    /// Every pending query answered (or gave up): next, the past
    /// intervals; once they are known, whether every one that may have
    /// taken writes was heard from.
    fn after_queries(&mut self) {
        if self.peering.past.is_none() {
            return self.fetch_past_intervals();
        }
        self.check_prior();
    }

    /// Asks the monitors for the intervals since the newest epoch in which
    /// any member we heard from saw the PG go active: the writes of
    /// earlier intervals are in the logs of that activation.
    fn fetch_past_intervals(&mut self) {
        let since = self
            .peer_logs
            .values()
            .map(|l| l.info.last_epoch_started)
            .chain([self.core.log.info.last_epoch_started])
            .max()
            .unwrap_or(0);
        let ctx = Arc::clone(&self.ctx);
        let events = self.events.clone();
        let (pg, interval_start) = (self.core.id, self.core.interval_start);
        tokio::spawn(async move {
            let cmd = shoal_monclient::Command::PgPastIntervals {
                pgid: pg.to_string(),
                since,
            };
            let result = match ctx.monc.command(&cmd).await {
                Ok(v) => parse_intervals(&v),
                Err(e) => Err(e.to_string()),
            };
            let _ = events.send(PgEvent::PastIntervals {
                interval_start,
                result,
            });
        });
    }

    /// The monitors answered with the PG's intervals.
    pub(super) fn past_intervals(
        &mut self,
        interval_start: u32,
        result: Result<Vec<PastInterval>, String>,
    ) {
        if interval_start != self.core.interval_start || self.core.state != State::Peering {
            return;
        }
        match result {
            Ok(all) => {
                let rw = all
                    .into_iter()
                    .filter(|i| i.maybe_went_rw && i.first < interval_start)
                    .collect();
                self.peering.past = Some(rw);
                self.check_prior();
            }
            Err(e) => {
                tracing::debug!(pg = %self.core.id, "past intervals: {e}");
                self.retry_peering_later();
            }
        }
    }

    /// Every past interval that may have taken writes must have a member
    /// we heard from: probe those not heard yet, or stay `down` (none of
    /// its members up) or `incomplete` (none answering).
    fn check_prior(&mut self) {
        let Some(map) = self.core.map.clone() else {
            return;
        };
        let me = self.core.whoami();
        let past = self.peering.past.clone().unwrap_or_default();
        let heard: BTreeSet<i32> = self.peer_logs.keys().copied().chain([me]).collect();
        let failed = self.peering.probe_failed.clone();
        // A member worth a probe: up, not heard yet, not already silent.
        let probeable =
            |o: &i32| *o >= 0 && map.is_up(*o) && !heard.contains(o) && !failed.contains(o);
        // Every member of those intervals that is up is heard (Ceph's prior
        // set): besides telling whether each interval has a member heard,
        // they may hold objects no one else has, and complete copies a new
        // primary keeps serving (pg_temp) while new members are backfilled.
        let mut probe = BTreeSet::new();
        for iv in &past {
            let members: Vec<i32> = iv.acting.iter().copied().filter(|o| *o >= 0).collect();
            let up: Vec<i32> = members.iter().copied().filter(probeable).collect();
            probe.extend(up.iter().copied());
            if up.is_empty() && !members.iter().any(|o| heard.contains(o)) {
                let down = !members.iter().any(|o| map.is_up(*o));
                let why = format!(
                    "interval {}-{} (acting {:?}) may have taken writes and {}",
                    iv.first,
                    iv.last,
                    iv.acting,
                    if down {
                        "none of its members is up"
                    } else {
                        "none of its members answered"
                    }
                );
                tracing::info!(pg = %self.core.id, "{why}");
                self.core.state = if down { State::Down } else { State::Incomplete };
                self.peering.blocked = Some(why);
                self.ctx.stats_changed.notify_one();
                if !down {
                    self.retry_peering_later();
                }
                return;
            }
        }
        if !probe.is_empty() {
            self.peers_pending = probe.iter().copied().collect();
            for p in probe {
                self.query_peer(p, Duration::ZERO);
            }
            return;
        }
        self.peering.blocked = None;
        self.check_up_thru();
    }

    /// Activation waits until the monitors have recorded that we were up
    /// in this interval.
    pub(super) fn check_up_thru(&mut self) {
        let Some(map) = self.core.map.clone() else {
            return;
        };
        if map.up_thru(self.core.whoami()) >= self.core.interval_start {
            self.peering.waiting_up_thru = false;
            return self.decide();
        }
        self.peering.waiting_up_thru = true;
        self.ctx.want_up_thru(self.core.interval_start);
        self.retry_peering_later();
    }

    fn retry_peering_later(&self) {
        let events = self.events.clone();
        let interval_start = self.core.interval_start;
        tokio::spawn(async move {
            tokio::time::sleep(PEERING_RETRY).await;
            let _ = events.send(PgEvent::PeeringRetry { interval_start });
        });
    }

    /// The acting set peering wants, when it is not the current one: the
    /// up members the log can bring up to date, then (up to the pool's
    /// size) other complete members, so that members needing a backfill
    /// are backfilled while complete ones serve (Ceph's `choose_acting`).
    /// `Some(vec![])` asks for the up set again (the `pg_temp` removed).
    fn wanted_acting(&self, plan: &RecoveryPlan) -> Option<Vec<i32>> {
        let pool = self.core.pool.as_ref()?;
        let map = self.core.map.as_ref()?;
        let (size, min) = (pool.size as usize, pool.min_size.max(1) as usize);
        // A member mid-backfill lacks more than a log can name.
        let log_len = plan.auth_log.len();
        let eligible = |o: i32| {
            plan.members
                .get(&o)
                .is_some_and(|m| !m.backfill && m.missing.len() <= log_len)
        };
        let mut want: Vec<i32> = self
            .core
            .up
            .iter()
            .copied()
            .filter(|o| *o >= 0 && eligible(*o))
            .collect();
        let newest_rw = self.peering.past.iter().flatten().next_back();
        let candidates = self
            .core
            .acting
            .iter()
            .chain(&self.core.prior)
            .chain(newest_rw.map(|i| &i.acting).into_iter().flatten())
            .copied();
        for o in candidates {
            if want.len() >= size {
                break;
            }
            if o >= 0 && map.is_up(o) && !want.contains(&o) && eligible(o) {
                want.push(o);
            }
        }
        let target = if want.len() < min || want == self.core.up {
            self.core.up.clone()
        } else {
            want
        };
        if target == self.core.acting {
            return None;
        }
        Some(if target == self.core.up {
            Vec::new()
        } else {
            target
        })
    }

    /// Asks the monitors for a `pg_temp` (empty: its removal); the map
    /// that grants it starts a new interval.
    pub(super) fn request_pg_temp(&mut self, osds: Vec<i32>) {
        tracing::debug!(pg = %self.core.id, ?osds, up = ?self.core.up, "asking for pg_temp");
        self.peering.waiting_pg_temp = Some(osds.clone());
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
        self.retry_peering_later();
    }

    /// Looks again: an `incomplete` PG peers again, one waiting for its
    /// `up_thru` or `pg_temp` asks again.
    pub(super) async fn peering_retry(&mut self, interval_start: u32) {
        if interval_start != self.core.interval_start || !self.core.is_primary() {
            return;
        }
        if let Some(osds) = self.peering.waiting_pg_temp.clone() {
            return self.request_pg_temp(osds);
        }
        match self.core.state {
            State::Incomplete => self.start_peering().await,
            State::Peering if self.peering.waiting_up_thru => self.check_up_thru(),
            State::Peering if self.peers_pending.is_empty() && self.peering.past.is_none() => {
                self.fetch_past_intervals()
            }
            _ => {}
        }
    }

    fn query_peer(&self, osd: i32, delay: Duration) {
        let ctx = Arc::clone(&self.ctx);
        let Some(map) = self.core.map.clone() else {
            return;
        };
        let events = self.events.clone();
        let q = PgQuery {
            pool: self.core.id.pool,
            pg_seed: self.core.id.seed,
            epoch: map.epoch.0,
            interval_start: self.core.interval_start,
            piece: 0,
        };
        let interval_start = self.core.interval_start;
        // A member of the previous interval only may be gone for good:
        // give it little time (an acting member is waited for).
        let limit = if self.core.shards().contains(&osd) {
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
        if interval_start != self.core.interval_start || self.core.state != State::Peering {
            return;
        }
        match result {
            Ok(l) => {
                self.peer_logs.insert(from, l);
            }
            Err(e) if self.core.shards().contains(&from) => {
                // An acting member (or backfill target) must answer; a map change ends the wait.
                tracing::debug!(pg = %self.core.id, osd = from, "peering query failed: {e}");
                self.query_peer(from, Duration::from_millis(500));
                return;
            }
            Err(_) => {
                self.peering.probe_failed.insert(from);
            }
        }
        self.peers_pending.retain(|p| *p != from);
        if self.peers_pending.is_empty() {
            self.after_queries();
        }
    }

    /// Every member answered: plan. A backfill needs the list of the PG's
    /// objects first (the authoritative member's when the primary itself is
    /// backfilled, ours otherwise).
    fn decide(&mut self) {
        let me = self.core.whoami();
        let mut logs = self.peer_logs.clone();
        logs.insert(
            me,
            MemberLog {
                info: self.core.log.info,
                entries: self.core.log.entries().cloned().collect(),
                missing: self.core.missing.clone(),
                dups: self.core.log.dups().cloned().collect(),
            },
        );
        let plan = plan_recovery(me, &logs, &self.core.shards());
        if let Some(want) = self.wanted_acting(&plan) {
            return self.request_pg_temp(want);
        }
        let backfills = self
            .core
            .shards()
            .iter()
            .any(|o| plan.members.get(o).is_some_and(|m| m.backfill));
        let primary_backfill = plan.members.get(&me).is_some_and(|m| m.backfill);
        self.core.state = State::Activating;
        if !backfills {
            self.activate_members(plan, BTreeSet::new());
            return;
        }
        let Some(map) = self.core.map.clone() else {
            return;
        };
        let ctx = Arc::clone(&self.ctx);
        let events = self.events.clone();
        let (pg, coll, interval_start, auth) = (
            self.core.id,
            self.core.coll,
            self.core.interval_start,
            plan.auth,
        );
        // The PG's objects are those the lister holds and those it lacks
        // (a member mid-backfill holds few of them: listing its store alone
        // would make the others look deleted — the simulation found this).
        let lister = if primary_backfill { auth } else { me };
        let lister_lacks: Vec<ObjectKey> = plan
            .members
            .get(&lister)
            .map(|m| m.missing.keys().cloned().collect())
            .unwrap_or_default();
        self.plan = Some(plan);
        tokio::spawn(async move {
            let listed = if primary_backfill {
                match ctx.peer(&map, auth).await {
                    Ok(src) => recovery::remote_objects(&ctx, &map, pg, &src).await,
                    Err(e) => Err(e),
                }
            } else {
                let store = Arc::clone(&ctx.store);
                shoal_net::runtime::offload(move || recovery::local_objects(store.as_ref(), coll))
                    .await
                    .and_then(|r| r.map_err(|e| e.to_string()))
            };
            let result = listed.map(|mut keys| {
                keys.extend(lister_lacks);
                keys
            });
            let _ = events.send(PgEvent::Listed {
                interval_start,
                result,
            });
        });
    }

    /// The PG's objects, listed for a backfill.
    pub(super) async fn listed(
        &mut self,
        interval_start: u32,
        result: Result<Vec<ObjectKey>, String>,
    ) {
        if interval_start != self.core.interval_start || self.core.state != State::Activating {
            return;
        }
        let Some(plan) = self.plan.take() else { return };
        match result {
            Ok(keys) => self.activate_members(plan, keys.into_iter().collect()),
            Err(e) => {
                tracing::warn!(pg = %self.core.id, "listing the PG for a backfill failed: {e}");
                self.repeer_soon(Duration::from_millis(500));
            }
        }
    }

    /// Adopts the authoritative log with our missing set, and sends every
    /// replica the same log with its own missing set. `all` lists every
    /// object of the PG: a backfilled member lacks each of them.
    fn activate_members(&mut self, plan: RecoveryPlan, all: BTreeSet<ObjectKey>) {
        let me = self.core.whoami();
        let lu = plan.auth_info.last_update;
        let missing_of = |m: &MemberRecovery| {
            if m.backfill {
                MissingSet::from_map(all.iter().map(|k| (k.clone(), lu)).collect())
            } else {
                MissingSet::from_map(m.missing.clone())
            }
        };
        let mut acts = Vec::new();
        for osd in self.core.shards() {
            let m = plan.members.get(&osd).cloned().unwrap_or_default();
            acts.push(Activation {
                osd,
                backfill: m.backfill,
                missing: missing_of(&m),
            });
        }
        let mut info = plan.auth_info;
        info.last_epoch_started = self.core.interval_start;
        let mut txn = Transaction::new();
        let mine = acts.iter().position(|a| a.osd == me);
        let own = mine.map(|i| acts.remove(i));
        if !own.as_ref().is_some_and(|a| a.backfill) {
            // Copies an earlier recovery left half made start again.
            let temps = shoal_net::runtime::blocking(|| {
                crate::copy::remove_temps(self.ctx.store.as_ref(), self.core.coll, &mut txn)
            });
            if let Err(e) = temps {
                tracing::error!(pg = %self.core.id, "cannot list half-made copies: {e}");
                return self.repeer_soon(Duration::from_secs(1));
            }
        }
        if own.as_ref().is_some_and(|a| a.backfill) {
            txn.remove_collection(self.core.coll);
            txn.create_collection(self.core.coll);
            self.core.log = PgLog::default();
            self.core.missing = MissingSet::default();
        }
        let limits = self.ctx.cfg.log_limits;
        self.core.log.replace(
            info,
            plan.auth_log.clone(),
            plan.auth_dups.clone(),
            limits,
            self.core.coll,
            &mut txn,
        );
        let own_missing = own.map(|a| a.missing).unwrap_or_default();
        self.core
            .missing
            .replace(own_missing, self.core.coll, &mut txn);
        if let Err(e) = shoal_net::runtime::blocking(|| self.ctx.store.apply_transaction(txn)) {
            tracing::error!(pg = %self.core.id, "cannot persist the PG log: {e}");
            self.core.reload_log();
            return self.repeer_soon(Duration::from_secs(1));
        }
        let Some(map) = self.core.map.clone() else {
            return;
        };
        self.recovery_generation += 1;
        self.core.recovery = Some(RecoveryState::new(
            self.recovery_generation,
            me,
            &self.core.missing,
            acts.iter().map(|a| (a.osd, a.backfill, &a.missing)),
        ));
        self.plan = Some(plan);
        let log: Vec<Vec<u8>> = self.core.log.entries().map(LogEntry::encode).collect();
        let dups: Vec<Vec<u8>> = self.core.log.dups().map(Dup::encode).collect();
        let ctx = Arc::clone(&self.ctx);
        let events = self.events.clone();
        let (pg, interval_start) = (self.core.id, self.core.interval_start);
        let encoded_info = info.encode();
        tokio::spawn(async move {
            let mut result = Ok(());
            for a in acts {
                let msg = PgInfo {
                    pool: pg.pool,
                    pg_seed: pg.seed,
                    epoch: map.epoch.0,
                    info: encoded_info.clone(),
                    log: log.clone(),
                    activate: true,
                    interval_start,
                    missing: a.missing.encode(),
                    backfill: a.backfill,
                    dups: dups.clone(),
                    more: false,
                    piece: 0,
                };
                if let Err(e) = send_activation(&ctx, &map, a.osd, msg).await {
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

    /// Every replica holds the authoritative log: serve I/O, and recover.
    pub(super) async fn activated(&mut self, interval_start: u32, result: Result<(), String>) {
        if interval_start != self.core.interval_start || self.core.state != State::Activating {
            return;
        }
        if let Err(e) = result {
            tracing::warn!(pg = %self.core.id, "activation failed, peering again: {e}");
            return self.repeer_soon(Duration::from_millis(500));
        }
        self.core.state = State::Active;
        self.ctx.stats_changed.notify_one();
        tracing::debug!(pg = %self.core.id, epoch = interval_start, "active");
        if self
            .core
            .recovery
            .as_ref()
            .is_some_and(RecoveryState::is_done)
        {
            self.core.recovery = None;
            self.plan = None;
            self.clean();
        }
        self.start_recovery();
        self.drain_waiting().await;
    }
}

/// The intervals in a `pg past-intervals` answer.
fn parse_intervals(v: &serde_json::Value) -> Result<Vec<PastInterval>, String> {
    let list = v["intervals"].as_array().ok_or("past intervals: no list")?;
    let osds = |x: &serde_json::Value| -> Vec<i32> {
        x.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|o| o.as_i64().and_then(|o| i32::try_from(o).ok()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let epoch = |x: &serde_json::Value| -> Result<u32, String> {
        x.as_u64()
            .and_then(|e| u32::try_from(e).ok())
            .ok_or_else(|| format!("past intervals: bad epoch {x}"))
    };
    list.iter()
        .map(|i| {
            Ok(PastInterval {
                first: epoch(&i["first"])?,
                last: epoch(&i["last"])?,
                up: osds(&i["up"]),
                acting: osds(&i["acting"]),
                primary: i["primary"]
                    .as_i64()
                    .and_then(|p| i32::try_from(p).ok())
                    .unwrap_or(-1),
                maybe_went_rw: i["maybe_went_rw"].as_bool().unwrap_or(true),
            })
        })
        .collect()
}

impl Pg {
    /// Nothing left to recover: a `pg_temp` is no longer needed.
    pub(super) fn clean(&mut self) {
        if self.core.acting != self.core.up && self.core.up.len() >= self.core.acting.len() {
            self.request_pg_temp(Vec::new());
        }
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
        all.extend(Records {
            log: piece.log,
            dups: piece.dups,
            missing: piece.missing,
        });
        if !piece.more {
            let info = info.unwrap_or_default();
            return member_log(&info, &all);
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
}

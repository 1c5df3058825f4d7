//! Peering's steps (the procedure is described in `pg/peering.rs`, which
//! keeps the pure planning and the driver's tasks): which members to
//! query, what the monitors' past intervals require, `down` and
//! `incomplete`, `up_thru`, the acting set wanted (`pg_temp`), the plan, a
//! backfill's listing, the activation persisted here and sent to every
//! member, and going active.

use std::collections::BTreeSet;
use std::time::Duration;

use shoal_maps::PastInterval;
use shoal_objectstore::{ObjectKey, Transaction};
use shoal_proto::PgInfo;

use super::{Effect, PgCore, is_osd};
use crate::log::{Dup, LogEntry, PgInfoData};
use crate::missing::MissingSet;
use crate::pg::State;
use crate::pg::peering::{
    Activation, MemberLog, MemberRecovery, PRIOR_QUERY_TIMEOUT, PeeringProgress, RecoveryPlan,
    Stray, plan_recovery_k,
};
use crate::pg::recover::RecoveryState;

/// An activation persisted here and waiting to be sent to the members.
#[derive(Debug)]
pub(in crate::pg) struct PendingActivation {
    plan: RecoveryPlan,
    acts: Vec<Activation>,
    info: PgInfoData,
    /// Every member is complete: members remove their strays.
    purge: bool,
}

impl PgCore {
    /// Starts peering for the current interval (primary only).
    pub(in crate::pg) fn start_peering(&mut self) -> Vec<Effect> {
        let mut fx = self.reset_peering();
        // Below min_size the PG serves nothing; it still peers when a
        // `pg_temp` made it so while the up set is large enough, since
        // only peering asks for that `pg_temp` to go (the simulation
        // found an EC PG left `peered` for good behind a positional
        // `pg_temp` with a hole, every OSD of its up set back).
        let min = self.min_size();
        let up = self.up.iter().filter(|o| is_osd(**o)).count();
        if self.acting.len() < min && (self.acting == self.up || up < min) {
            self.state = State::Peered;
            return fx;
        }
        self.state = State::Peering;
        let Some(map) = self.map.clone() else {
            return fx;
        };
        let me = self.whoami;
        let mut peers: BTreeSet<i32> = self.other_shards().into_iter().collect();
        for p in &self.prior {
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
        fx.extend(self.query_all(peers.into_iter().collect(), Duration::ZERO));
        fx
    }

    fn min_size(&self) -> usize {
        self.pool.as_ref().map_or(1, |p| p.min_size.max(1)) as usize
    }

    /// Peers again after `delay` (a failed activation or query).
    pub(in crate::pg) fn repeer_soon(&mut self, delay: Duration) -> Vec<Effect> {
        let mut fx = self.reset_peering();
        self.state = State::Peering;
        fx.extend(self.query_all(self.other_shards(), delay));
        fx
    }

    /// Forgets this interval's peering and recovery; ops waiting for an
    /// object go back to the PG's queue.
    fn reset_peering(&mut self) -> Vec<Effect> {
        self.recovery = None;
        self.plan = None;
        self.peering = PeeringProgress::default();
        self.requeue_object_waiters();
        vec![Effect::FenceCopies]
    }

    /// Queries `peers` (after `delay`) from scratch.
    fn query_all(&mut self, peers: Vec<i32>, delay: Duration) -> Vec<Effect> {
        self.peer_logs.clear();
        self.peers_pending = peers.clone();
        let mut fx: Vec<Effect> = peers
            .into_iter()
            .filter_map(|p| self.query_peer(p, delay))
            .collect();
        if self.peers_pending.is_empty() {
            fx.extend(self.after_queries());
        }
        fx
    }

    /// Every pending query answered (or gave up): next, the past
    /// intervals; once they are known, whether every one that may have
    /// taken writes was heard from.
    fn after_queries(&mut self) -> Vec<Effect> {
        if self.peering.past.is_none() {
            return self.fetch_past_intervals();
        }
        self.check_prior()
    }

    /// Asks the monitors for the intervals since the newest epoch in which
    /// any member we heard from saw the PG go active: the writes of
    /// earlier intervals are in the logs of that activation.
    fn fetch_past_intervals(&self) -> Vec<Effect> {
        let since = self
            .peer_logs
            .values()
            .map(|l| l.info.last_epoch_started)
            .chain([self.log.info.last_epoch_started])
            .max()
            .unwrap_or(0);
        vec![Effect::AskPastIntervals {
            since,
            interval_start: self.interval_start,
        }]
    }

    /// The monitors answered with the PG's intervals.
    pub(in crate::pg) fn past_intervals(
        &mut self,
        interval_start: u32,
        result: Result<Vec<PastInterval>, String>,
    ) -> Vec<Effect> {
        if interval_start != self.interval_start || self.state != State::Peering {
            return Vec::new();
        }
        match result {
            Ok(all) => {
                let rw = all
                    .into_iter()
                    .filter(|i| i.maybe_went_rw && i.first < interval_start)
                    .collect();
                self.peering.past = Some(rw);
                self.check_prior()
            }
            Err(e) => {
                tracing::debug!(pg = %self.id, "past intervals: {e}");
                // `pg query` says what peering waits for.
                self.peering.blocked = Some(format!("the monitors' past intervals: {e}"));
                vec![self.retry_peering_later()]
            }
        }
    }

    /// Every past interval that may have taken writes must have a member
    /// we heard from: probe those not heard yet, or stay `down` (none of
    /// its members up) or `incomplete` (none answering).
    fn check_prior(&mut self) -> Vec<Effect> {
        let Some(map) = self.map.clone() else {
            return Vec::new();
        };
        let me = self.whoami;
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
        // An erasure-coded interval's writes are readable only from k of
        // its shards: k of its members must be heard.
        let need = self.ec.as_ref().map_or(1, |e| e.layout().k as usize);
        for iv in &past {
            let members: Vec<i32> = iv.acting.iter().copied().filter(|o| is_osd(*o)).collect();
            let up: Vec<i32> = members.iter().copied().filter(probeable).collect();
            probe.extend(up.iter().copied());
            let heard_n = members.iter().filter(|o| heard.contains(o)).count();
            if heard_n + up.len() < need {
                let down = members.iter().filter(|o| map.is_up(**o)).count() < need;
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
                tracing::info!(pg = %self.id, "{why}");
                self.state = if down { State::Down } else { State::Incomplete };
                self.peering.blocked = Some(why);
                let mut fx = vec![Effect::StatsChanged];
                if !down {
                    fx.push(self.retry_peering_later());
                }
                return fx;
            }
        }
        if !probe.is_empty() {
            self.peers_pending = probe.iter().copied().collect();
            return probe
                .into_iter()
                .filter_map(|p| self.query_peer(p, Duration::ZERO))
                .collect();
        }
        self.peering.blocked = None;
        self.check_up_thru()
    }

    /// Activation waits until the monitors have recorded that we were up
    /// in this interval.
    pub(in crate::pg) fn check_up_thru(&mut self) -> Vec<Effect> {
        let Some(map) = self.map.clone() else {
            return Vec::new();
        };
        if map.up_thru(self.whoami) >= self.interval_start {
            self.peering.waiting_up_thru = false;
            return self.decide();
        }
        self.peering.waiting_up_thru = true;
        vec![
            Effect::WantUpThru(self.interval_start),
            self.retry_peering_later(),
        ]
    }

    fn retry_peering_later(&self) -> Effect {
        Effect::PeeringRetryLater {
            interval_start: self.interval_start,
        }
    }

    /// The acting set peering wants, when it is not the current one: the
    /// up members the log can bring up to date, then (up to the pool's
    /// size) other complete members, so that members needing a backfill
    /// are backfilled while complete ones serve (Ceph's `choose_acting`).
    /// `Some(vec![])` asks for the up set again (the `pg_temp` removed).
    fn wanted_acting(&self, plan: &RecoveryPlan) -> Option<Vec<i32>> {
        if let Some(ec) = &self.ec {
            return self.wanted_acting_ec(plan, ec);
        }
        let pool = self.pool.as_ref()?;
        let map = self.map.as_ref()?;
        let (size, min) = (pool.size as usize, pool.min_size.max(1) as usize);
        // A member mid-backfill lacks more than a log can name.
        let log_len = plan.auth_log.len();
        let eligible = |o: i32| {
            plan.members
                .get(&o)
                .is_some_and(|m| !m.backfill && m.missing.len() <= log_len)
        };
        let mut want: Vec<i32> = self
            .up
            .iter()
            .copied()
            .filter(|o| is_osd(*o) && eligible(*o))
            .collect();
        let newest_rw = self.peering.past.iter().flatten().next_back();
        let candidates = self
            .acting
            .iter()
            .chain(&self.prior)
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
        let target = if want.len() < min || want == self.up {
            self.up.clone()
        } else {
            want
        };
        if target == self.acting {
            return None;
        }
        Some(if target == self.up {
            Vec::new()
        } else {
            target
        })
    }

    /// An erasure-coded PG's acting set by position (Ceph's choose_acting
    /// for EC): at each position the up member if its copy of that shard
    /// is complete, else a member heard holding that shard completely
    /// (it serves the position while the up member is backfilled), else
    /// the up member (backfilled) or a hole. `None`: keep the acting set;
    /// `Some(empty)`: the up set as it is.
    fn wanted_acting_ec(&self, plan: &RecoveryPlan, ec: &crate::pg::ec::EcPg) -> Option<Vec<i32>> {
        let map = self.map.as_ref()?;
        let log_len = plan.auth_log.len();
        let held = |o: i32| -> Option<u8> {
            if o == self.whoami {
                Some(self.coll.shard)
            } else {
                self.peer_logs.get(&o).map(|l| l.shard)
            }
        };
        let complete = |o: i32, i: usize| {
            is_osd(o)
                && map.is_up(o)
                && held(o) == u8::try_from(i).ok()
                && plan
                    .members
                    .get(&o)
                    .is_some_and(|m| !m.backfill && m.missing.len() <= log_len)
        };
        let n = ec.layout().shards();
        let up_at = |i: usize| ec.up.get(i).copied().unwrap_or(shoal_maps::ITEM_NONE);
        // Complete copies first, each OSD at one position.
        let mut want: Vec<i32> = (0..n)
            .map(|i| match complete(up_at(i), i) {
                true => up_at(i),
                false => shoal_maps::ITEM_NONE,
            })
            .collect();
        for i in 0..n {
            if want[i] != shoal_maps::ITEM_NONE {
                continue;
            }
            let other = plan
                .members
                .keys()
                .copied()
                .find(|o| complete(*o, i) && !want.contains(o));
            if let Some(o) = other {
                want[i] = o;
            }
        }
        // The rest: the up member, to be backfilled, when it is free.
        for i in 0..n {
            if want[i] == shoal_maps::ITEM_NONE && is_osd(up_at(i)) && !want.contains(&up_at(i)) {
                want[i] = up_at(i);
            }
        }
        if want == ec.acting {
            return None;
        }
        Some(if want == ec.up { Vec::new() } else { want })
    }

    /// Erasure coding: why the PG cannot go active, if it cannot — fewer
    /// than k shards are held completely by the members heard (at their
    /// positions, or as the shard a moved member keeps as a stray), so
    /// objects could not be decoded.
    fn ec_unreadable(&self, complete: &BTreeSet<u8>) -> Option<String> {
        let k = self.ec.as_ref()?.layout().k as usize;
        (complete.len() < k).then(|| {
            format!(
                "only {} shards are held complete ({complete:?}); {k} are needed",
                complete.len()
            )
        })
    }

    /// Asks the monitors for a `pg_temp` (empty: its removal); the map
    /// that grants it starts a new interval.
    pub(in crate::pg) fn request_pg_temp(&mut self, osds: Vec<i32>) -> Vec<Effect> {
        tracing::debug!(pg = %self.id, ?osds, up = ?self.up, "asking for pg_temp");
        self.peering.waiting_pg_temp = Some(osds.clone());
        vec![Effect::RequestPgTemp(osds), self.retry_peering_later()]
    }

    /// Looks again: an `incomplete` PG peers again, one waiting for its
    /// `up_thru` or `pg_temp` asks again.
    pub(in crate::pg) fn peering_retry(&mut self, interval_start: u32) -> Vec<Effect> {
        if interval_start != self.interval_start || !self.is_primary() {
            return Vec::new();
        }
        if let Some(osds) = self.peering.waiting_pg_temp.clone() {
            return self.request_pg_temp(osds);
        }
        match self.state {
            State::Incomplete => self.start_peering(),
            State::Peering if self.peering.waiting_up_thru => self.check_up_thru(),
            State::Peering if self.peers_pending.is_empty() && self.peering.past.is_none() => {
                self.fetch_past_intervals()
            }
            _ => Vec::new(),
        }
    }

    /// The query of `osd` (after `delay`). A member of the previous
    /// interval only may be gone for good: it gets little time (an acting
    /// member is waited for).
    fn query_peer(&self, osd: i32, delay: Duration) -> Option<Effect> {
        self.map.as_ref()?;
        let limit = if self.shards().contains(&osd) {
            self.cfg.peer_timeout
        } else {
            PRIOR_QUERY_TIMEOUT.min(self.cfg.peer_timeout)
        };
        Some(Effect::Query {
            osd,
            delay,
            limit,
            interval_start: self.interval_start,
        })
    }

    /// A member answered our query (or did not).
    pub(in crate::pg) fn peer_info(
        &mut self,
        from: i32,
        interval_start: u32,
        result: Result<MemberLog, String>,
    ) -> Vec<Effect> {
        if interval_start != self.interval_start || self.state != State::Peering {
            return Vec::new();
        }
        match result {
            Ok(l) => {
                self.peer_logs.insert(from, l);
            }
            Err(e) if self.shards().contains(&from) => {
                // An acting member (or backfill target) must answer; a map
                // change ends the wait.
                tracing::debug!(pg = %self.id, osd = from, "peering query failed: {e}");
                return self
                    .query_peer(from, Duration::from_millis(500))
                    .into_iter()
                    .collect();
            }
            Err(_) => {
                self.peering.probe_failed.insert(from);
            }
        }
        self.peers_pending.retain(|p| *p != from);
        if self.peers_pending.is_empty() {
            return self.after_queries();
        }
        Vec::new()
    }

    /// Every member answered: plan. A backfill needs the list of the PG's
    /// objects first (the authoritative member's when the primary itself is
    /// backfilled, ours otherwise).
    fn decide(&mut self) -> Vec<Effect> {
        let me = self.whoami;
        let mut logs = self.peer_logs.clone();
        logs.insert(
            me,
            MemberLog {
                info: self.log.info,
                entries: self.log.entries().cloned().collect(),
                missing: self.missing.clone(),
                dups: self.log.dups().cloned().collect(),
                shard: self.coll.shard,
                rollback_floor: self.rollback_floor(),
                strays: self.load_strays(),
            },
        );
        self.stray_sources = logs
            .iter()
            .flat_map(|(o, l)| l.strays.iter().map(|s| (*o, s.clone())))
            .collect();
        let k = self.ec.as_ref().map_or(1, |ec| ec.layout().k as usize);
        let mut plan = plan_recovery_k(me, &logs, &self.shards(), k);
        // Each member heard: (osd, shard, last_epoch_started, last_update,
        // objects it knew it lacked).
        let heard = || {
            logs.iter()
                .map(|(o, l)| {
                    let i = &l.info;
                    let lu = i.last_update.to_string();
                    (*o, l.shard, i.last_epoch_started, lu, l.missing.len())
                })
                .collect::<Vec<_>>()
        };
        tracing::debug!(pg = %self.id, auth = plan.auth,
            auth_lu = %plan.auth_info.last_update, logs = ?heard(), "peering plan");
        // Erasure coding: a member at another position (in the acting
        // set, or in the up set as a backfill target) than the shard it
        // holds has none of its position's shard: it is backfilled, and
        // the shard it held stays there as a stray, a source for recovery.
        // The shards held complete by a member heard (at its position or
        // not), or by a stray up to date.
        let log_len = plan.auth_log.len();
        let mut complete: BTreeSet<u8> = plan
            .members
            .iter()
            .filter(|(_, m)| !m.backfill && m.missing.len() <= log_len)
            .filter_map(|(o, _)| logs.get(o).map(|l| l.shard))
            .collect();
        complete.extend(
            self.stray_sources
                .iter()
                .filter(|(_, s)| {
                    s.info.last_update == plan.auth_info.last_update && s.missing.is_empty()
                })
                .map(|(_, s)| s.shard),
        );
        if let Some(ec) = &self.ec {
            // The shard it leaves is settled at activation: what it can
            // undo undone, its log cut to the history it shares with the
            // authoritative one.
            let moved: Vec<(i32, Stray)> = logs
                .iter()
                .filter(|(o, l)| ec.shard_of(**o).is_some_and(|p| p != l.shard))
                .map(|(o, l)| (*o, l.settled(&plan)))
                .collect();
            for (o, stray) in moved {
                if let Some(m) = plan.members.get_mut(&o) {
                    m.backfill = true;
                    m.missing.clear();
                }
                self.stray_sources.push((o, stray));
            }
        }
        if let Some(want) = self.wanted_acting(&plan) {
            return self.request_pg_temp(want);
        }
        if self.acting.len() < self.min_size() {
            self.state = State::Peered;
            return vec![Effect::StatsChanged];
        }
        if let Some(why) = self.ec_unreadable(&complete) {
            tracing::info!(pg = %self.id, "{why}");
            self.state = State::Incomplete;
            self.peering.blocked = Some(why);
            return vec![Effect::StatsChanged, self.retry_peering_later()];
        }
        let backfills = self
            .shards()
            .iter()
            .any(|o| plan.members.get(o).is_some_and(|m| m.backfill));
        let primary_backfill = plan.members.get(&me).is_some_and(|m| m.backfill);
        self.state = State::Activating;
        if !backfills {
            return self.activate_members(plan, BTreeSet::new());
        }
        if self.map.is_none() {
            return Vec::new();
        }
        // The PG's objects are those the lister holds and those it lacks
        // (a member mid-backfill holds few of them: listing its store alone
        // would make the others look deleted — the simulation found this).
        // The lister is a member whose copy is whole but for the objects
        // it lacks: us, or when we are backfilled the authoritative member
        // unless it is backfilled too (an erasure-coded member moved to
        // another position holds the authoritative log over a shard it has
        // barely begun: listing it made a backfill that copied nothing,
        // and the PG clean without its objects — the simulation found this
        // once strays were removed), then any member that is not.
        let whole = |o: &i32| plan.members.get(o).is_some_and(|m| !m.backfill);
        let lister = if primary_backfill {
            std::iter::once(plan.auth)
                .chain(plan.members.keys().copied())
                .find(whole)
                .unwrap_or(plan.auth)
        } else {
            me
        };
        let lacks: Vec<ObjectKey> = plan
            .members
            .get(&lister)
            .map(|m| m.missing.keys().cloned().collect())
            .unwrap_or_default();
        let from = primary_backfill.then_some(lister);
        self.plan = Some(plan);
        vec![Effect::ListForBackfill {
            from,
            lacks,
            interval_start: self.interval_start,
        }]
    }

    /// The PG's objects, listed for a backfill.
    pub(in crate::pg) fn listed(
        &mut self,
        interval_start: u32,
        result: Result<Vec<ObjectKey>, String>,
    ) -> Vec<Effect> {
        if interval_start != self.interval_start || self.state != State::Activating {
            return Vec::new();
        }
        let Some(plan) = self.plan.take() else {
            return Vec::new();
        };
        match result {
            Ok(keys) => self.activate_members(plan, keys.into_iter().collect()),
            Err(e) => {
                tracing::warn!(pg = %self.id, "listing the PG for a backfill failed: {e}");
                self.repeer_soon(Duration::from_millis(500))
            }
        }
    }

    /// Adopts the authoritative log with our missing set (persisted now:
    /// [`PgCore::activation_persisted`] continues), and sends every replica
    /// the same log with its own missing set. `all` lists every object of
    /// the PG: a backfilled member lacks each of them.
    fn activate_members(&mut self, plan: RecoveryPlan, all: BTreeSet<ObjectKey>) -> Vec<Effect> {
        let me = self.whoami;
        let lu = plan.auth_info.last_update;
        let missing_of = |m: &MemberRecovery| {
            if m.backfill {
                MissingSet::from_map(all.iter().map(|k| (k.clone(), lu)).collect())
            } else {
                MissingSet::from_map(m.missing.clone())
            }
        };
        let shards = self.shards();
        let mut acts = Vec::new();
        for osd in shards.iter().copied() {
            let m = plan.members.get(&osd).cloned().unwrap_or_default();
            acts.push(Activation {
                osd,
                backfill: m.backfill,
                missing: missing_of(&m),
            });
        }
        // Members of past intervals that undo their divergent changes.
        for osd in plan.roll_back.iter().copied() {
            if let Some(m) = plan.members.get(&osd).filter(|_| !shards.contains(&osd)) {
                acts.push(Activation {
                    osd,
                    backfill: false,
                    missing: missing_of(m),
                });
            }
        }
        let mut info = plan.auth_info;
        info.last_epoch_started = self.interval_start;
        let mut txn = Transaction::new();
        let mine = acts.iter().position(|a| a.osd == me);
        let own = mine.map(|i| acts.remove(i));
        if !own.as_ref().is_some_and(|a| a.backfill) {
            // Copies an earlier recovery left half made start again.
            let temps = crate::copy::remove_temps(self.store.as_ref(), self.coll, &mut txn);
            if let Err(e) = temps {
                tracing::error!(pg = %self.id, "cannot list half-made copies: {e}");
                return self.repeer_soon(Duration::from_secs(1));
            }
        }
        // Every member complete: strays serve nothing any more.
        let purge = self.ec.is_some()
            && own
                .iter()
                .chain(&acts)
                .filter(|a| shards.contains(&a.osd))
                .all(|a| !a.backfill && a.missing.is_empty());
        if purge {
            self.purge_strays(&mut txn);
        }
        if own.as_ref().is_some_and(|a| a.backfill) {
            // Erasure coded: the collection of our position's shard (the
            // one we held stays as a stray).
            let new = match self.ec.as_ref().and_then(|ec| ec.shard_of(me)) {
                Some(s) => shoal_objectstore::CollectionId::shard(self.id.pool, self.id.seed, s),
                None => self.coll,
            };
            let tail = plan.auth_info.log_tail;
            let keep = own.as_ref().map(|a| &a.missing);
            let begun = self.begin_backfill(new, &plan.auth_log, tail, keep, &mut txn);
            if let Err(e) = begun {
                tracing::error!(pg = %self.id, "{e}");
                return self.repeer_soon(Duration::from_secs(1));
            }
        } else if let Err(e) = self.ec_activate(&plan.auth_log, plan.auth_info.log_tail, &mut txn) {
            tracing::error!(pg = %self.id, "{e}");
            return self.repeer_soon(Duration::from_secs(1));
        }
        let limits = self.cfg.log_limits;
        self.log.replace(
            info,
            plan.auth_log.clone(),
            plan.auth_dups.clone(),
            limits,
            self.coll,
            &mut txn,
        );
        let own_missing = own.map(|a| a.missing).unwrap_or_default();
        self.missing.replace(own_missing, self.coll, &mut txn);
        self.pending_activation = Some(PendingActivation {
            plan,
            acts,
            info,
            purge,
        });
        vec![Effect::PersistActivation(txn)]
    }

    /// Our activation is durable (or the store refused it): send every
    /// member its own.
    pub(in crate::pg) fn activation_persisted(&mut self, r: Result<(), String>) -> Vec<Effect> {
        let Some(PendingActivation {
            plan,
            acts,
            info,
            purge,
        }) = self.pending_activation.take()
        else {
            return Vec::new();
        };
        if let Err(e) = r {
            tracing::error!(pg = %self.id, "cannot persist the PG log: {e}");
            self.reload_log();
            return self.repeer_soon(Duration::from_secs(1));
        }
        let Some(map) = self.map.clone() else {
            return Vec::new();
        };
        self.recovery_generation += 1;
        let shards = self.shards();
        self.recovery = Some(RecoveryState::new(
            self.recovery_generation,
            self.whoami,
            &self.missing,
            acts.iter()
                .filter(|a| shards.contains(&a.osd))
                .map(|a| (a.osd, a.backfill, &a.missing)),
        ));
        self.plan = Some(plan);
        let log: Vec<Vec<u8>> = self.log.entries().map(LogEntry::encode).collect();
        let dups: Vec<Vec<u8>> = self.log.dups().map(Dup::encode).collect();
        let encoded_info = info.encode();
        let msgs = acts
            .into_iter()
            .map(|a| {
                let msg = PgInfo {
                    pool: self.id.pool,
                    pg_seed: self.id.seed,
                    epoch: map.epoch.0,
                    info: encoded_info.clone(),
                    log: log.clone(),
                    activate: true,
                    interval_start: self.interval_start,
                    missing: a.missing.encode(),
                    backfill: a.backfill,
                    dups: dups.clone(),
                    more: false,
                    piece: 0,
                    shard: u32::from(u8::MAX),
                    purge_strays: purge,
                    ..PgInfo::default()
                };
                (a.osd, msg)
            })
            .collect();
        vec![Effect::SendActivations {
            msgs,
            interval_start: self.interval_start,
        }]
    }

    /// Every replica holds the authoritative log: serve I/O, and recover.
    pub(in crate::pg) fn activated(
        &mut self,
        interval_start: u32,
        result: Result<(), String>,
    ) -> Vec<Effect> {
        if interval_start != self.interval_start || self.state != State::Activating {
            return Vec::new();
        }
        if let Err(e) = result {
            tracing::warn!(pg = %self.id, "activation failed, peering again: {e}");
            return self.repeer_soon(Duration::from_millis(500));
        }
        self.state = State::Active;
        let mut fx = vec![Effect::StatsChanged];
        tracing::debug!(pg = %self.id, epoch = interval_start, "active");
        if self.recovery.as_ref().is_some_and(RecoveryState::is_done) {
            self.recovery = None;
            self.plan = None;
            fx.extend(self.clean());
        }
        fx.push(Effect::StartRecovery);
        fx.push(Effect::DrainWaiting);
        fx
    }

    /// Nothing left to recover: a `pg_temp` is no longer needed.
    pub(in crate::pg) fn clean(&mut self) -> Vec<Effect> {
        if let Some(ec) = &self.ec {
            let whole = ec.up.iter().all(|o| is_osd(*o));
            if ec.acting != ec.up && whole {
                return self.request_pg_temp(Vec::new());
            }
            return Vec::new();
        }
        if self.acting != self.up && self.up.len() >= self.acting.len() {
            return self.request_pg_temp(Vec::new());
        }
        Vec::new()
    }
}

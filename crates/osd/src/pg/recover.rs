//! Recovery while the PG is active: the primary copies each object an
//! acting member lacks (its own missing objects pulled from a member that
//! has them, then pushed to every replica that lacks them), one object at
//! a time per slot. Ops on an object that is missing wait for that object
//! alone, which jumps the queue; ops on every other object go on.
//!
//! Throttles, as Ceph's: at most `recovery_max_active` objects in flight
//! per PG and per OSD (`OsdCtx::recovery_slots`), and at most
//! `max_backfills` PGs of an OSD backfilling at once
//! (`OsdCtx::backfill_slots`): a PG waiting for that reservation is
//! `backfill_wait`, and recovers only its members that are not backfilled.
//!
//! A failed object recovery is logged when it first fails (and when its
//! reason changes), tried again after a delay that doubles with each
//! failure up to `RETRY_DELAY_MAX`, and reported in the PG's statistics
//! (`recovery_stalled`), which the monitors turn into the
//! `PG_RECOVERY_STALLED` health check, until it succeeds.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

use shoal_maps::{OsdMap, PgId};
use shoal_objectstore::ObjectKey;
use tokio::sync::OwnedSemaphorePermit;

use super::engine::{Effect, PgCore};
use super::{Pg, PgEvent};
use crate::ctx::OsdCtx;
use crate::missing::MissingSet;
use crate::recovery::{self, Recovered};

/// How long a failed object recovery waits before it is tried again the
/// first time; the delay doubles with each failure after that.
const RETRY_DELAY: Duration = Duration::from_secs(1);
/// The longest delay between two tries of a failing object recovery.
const RETRY_DELAY_MAX: Duration = Duration::from_secs(30);
/// Most stalled objects one PG reports.
const STALLED_REPORTED_MAX: usize = 10;

/// The delay before try `attempts + 1` of a recovery that failed `attempts` times.
pub(crate) fn retry_delay(attempts: u32) -> Duration {
    let doublings = attempts.saturating_sub(1).min(16);
    RETRY_DELAY
        .saturating_mul(1 << doublings)
        .min(RETRY_DELAY_MAX)
}

/// Why an object's recovery keeps failing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    /// The last failure's reason.
    pub reason: String,
    /// Failed tries so far.
    pub attempts: u32,
    /// When it first failed.
    pub since: Instant,
}
/// How long unfound objects wait before the PG peers again asking every
/// OSD for them.
const UNFOUND_SEARCH_DELAY: Duration = Duration::from_secs(3);

/// How far a PG's recovery has got: object copies to make and made.
#[derive(Debug)]
pub struct RecoveryProgress {
    total: AtomicU64,
    done: AtomicU64,
    started: Instant,
}

impl RecoveryProgress {
    fn new(total: u64) -> Arc<RecoveryProgress> {
        Arc::new(RecoveryProgress {
            total: total.into(),
            done: 0.into(),
            started: Instant::now(),
        })
    }

    fn add(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }

    /// Copies still to make, and the rate so far (copies per second).
    pub fn left_and_rate(&self) -> (u64, u64) {
        let done = self.done.load(Ordering::Relaxed);
        let total = self.total.load(Ordering::Relaxed);
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        (total.saturating_sub(done), (done as f64 / secs) as u64)
    }
}

/// Background recovery held by the map's flags.
#[derive(Debug, Clone, Copy, Default)]
struct Hold {
    norecover: bool,
    nobackfill: bool,
}

impl Hold {
    fn of(map: &OsdMap) -> Hold {
        Hold {
            norecover: map.has_flag("norecover"),
            nobackfill: map.has_flag("nobackfill"),
        }
    }
}

/// The backfill reservation of a PG.
#[derive(Debug)]
enum Reservation {
    /// No member is backfilled.
    NotNeeded,
    /// Waiting for a slot.
    Waiting,
    /// Holding one (released when the PG is clean or changes interval).
    Held(#[allow(dead_code)] OwnedSemaphorePermit),
}

/// What the primary still has to recover in this interval.
#[derive(Debug)]
pub(crate) struct RecoveryState {
    /// Which recovery of the PG this is: events of an earlier one (the PG
    /// may peer again within an interval) are told apart by it.
    generation: u64,
    /// The acting members (primary included) lacking each object.
    missing_on: BTreeMap<ObjectKey, BTreeSet<i32>>,
    /// Acting members being backfilled.
    backfill: BTreeSet<i32>,
    /// Objects being recovered now.
    active: BTreeSet<ObjectKey>,
    /// Recovery jobs in flight (each of one object, or of a batch).
    jobs: usize,
    /// Objects an op waits for: recovered first.
    pub(super) urgent: VecDeque<ObjectKey>,
    /// Objects whose recovery failed, and when they are tried again.
    deferred: BTreeMap<ObjectKey, Instant>,
    /// Objects whose recovery failed and has not succeeded since.
    failures: BTreeMap<ObjectKey, Failure>,
    /// Objects no member holds: they stay missing (Ceph's "unfound").
    unfound: BTreeSet<ObjectKey>,
    /// Where the scan for the next object to recover is.
    cursor: Option<ObjectKey>,
    search_scheduled: bool,
    reservation: Reservation,
    progress: Arc<RecoveryProgress>,
}

impl RecoveryState {
    /// The state for the missing sets handed out at activation: `own` is
    /// the primary's, `replicas` each replica's (with whether it is
    /// backfilled).
    pub(crate) fn new<'a>(
        generation: u64,
        me: i32,
        own: &MissingSet,
        replicas: impl Iterator<Item = (i32, bool, &'a MissingSet)>,
    ) -> RecoveryState {
        let mut missing_on: BTreeMap<ObjectKey, BTreeSet<i32>> = BTreeMap::new();
        for k in own.objects().keys() {
            missing_on.entry(k.clone()).or_default().insert(me);
        }
        let mut backfill = BTreeSet::new();
        for (osd, bf, set) in replicas {
            if bf {
                backfill.insert(osd);
            }
            for k in set.objects().keys() {
                missing_on.entry(k.clone()).or_default().insert(osd);
            }
        }
        let copies = missing_on.values().map(|s| s.len() as u64).sum();
        RecoveryState {
            generation,
            missing_on,
            reservation: if backfill.is_empty() {
                Reservation::NotNeeded
            } else {
                Reservation::Waiting
            },
            backfill,
            active: BTreeSet::new(),
            jobs: 0,
            urgent: VecDeque::new(),
            deferred: BTreeMap::new(),
            failures: BTreeMap::new(),
            unfound: BTreeSet::new(),
            cursor: None,
            search_scheduled: false,
            progress: RecoveryProgress::new(copies),
        }
    }

    /// Nothing is left to recover.
    pub(crate) fn is_done(&self) -> bool {
        self.missing_on.is_empty()
    }

    /// The members still lacking `key`.
    pub(crate) fn lacking(&self, key: &ObjectKey) -> Vec<i32> {
        self.missing_on
            .get(key)
            .map(|on| on.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Whether an op on `key` must wait: the primary lacks it, or (for a
    /// change) some acting member does.
    pub(crate) fn blocks(&self, me: i32, key: &ObjectKey, mutating: bool) -> bool {
        self.missing_on
            .get(key)
            .is_some_and(|on| mutating || on.contains(&me))
    }

    /// Object copies still to make.
    pub(crate) fn copies_left(&self) -> u64 {
        self.missing_on.values().map(|s| s.len() as u64).sum()
    }

    /// Copies made per second, so far.
    pub(crate) fn rate(&self) -> u64 {
        self.progress.left_and_rate().1
    }

    /// Objects each acting member still lacks.
    pub(crate) fn missing_per_member(&self) -> BTreeMap<i32, u64> {
        let mut out = BTreeMap::new();
        for on in self.missing_on.values() {
            for o in on {
                *out.entry(*o).or_default() += 1;
            }
        }
        out
    }

    /// Members being backfilled.
    pub(crate) fn backfill_targets(&self) -> &BTreeSet<i32> {
        &self.backfill
    }

    /// Objects no member holds.
    pub(crate) fn unfound(&self) -> &BTreeSet<ObjectKey> {
        &self.unfound
    }

    /// Objects being recovered now, and failed ones waiting for a retry.
    pub(crate) fn in_progress(&self) -> (usize, usize) {
        (self.active.len(), self.deferred.len())
    }

    /// The objects whose recovery keeps failing, with why, for people
    /// (at most `STALLED_REPORTED_MAX`, the oldest failures first).
    pub(crate) fn stalled(&self) -> Vec<String> {
        let mut f: Vec<(&ObjectKey, &Failure)> = self.failures.iter().collect();
        f.sort_by_key(|(k, f)| (f.since, *k));
        f.into_iter()
            .take(STALLED_REPORTED_MAX)
            .map(|(k, f)| {
                format!(
                    "{}: {} ({} failed tries in {} s)",
                    String::from_utf8_lossy(&k.name).replace('\0', "/"),
                    f.reason,
                    f.attempts,
                    f.since.elapsed().as_secs()
                )
            })
            .collect()
    }

    /// Records a failed try of `key`; returns the delay before the next
    /// one, and whether to log it (the first failure, or a new reason).
    fn failed(&mut self, key: &ObjectKey, reason: String, now: Instant) -> (Duration, bool) {
        let f = self.failures.entry(key.clone()).or_insert(Failure {
            reason: String::new(),
            attempts: 0,
            since: now,
        });
        f.attempts += 1;
        let log = f.reason != reason;
        f.reason = reason;
        let delay = retry_delay(f.attempts);
        self.deferred.insert(key.clone(), now + delay);
        (delay, log)
    }

    /// Failed objects whose delay is over may be tried again.
    fn release_due(&mut self, now: Instant) {
        self.deferred.retain(|_, at| *at > now);
    }

    /// Ceph's words for where recovery is: `backfill_wait`, `backfilling`,
    /// `recovery_wait` (held by the `norecover` flag) or `recovering`.
    pub(crate) fn state_word(&self, map: Option<&OsdMap>) -> &'static str {
        let flag = |f: &str| map.is_some_and(|m| m.has_flag(f));
        match self.reservation {
            Reservation::Waiting => "backfill_wait",
            Reservation::Held(_) if flag("nobackfill") => "backfill_wait",
            Reservation::Held(_) => "backfilling",
            Reservation::NotNeeded if flag("norecover") => "recovery_wait",
            Reservation::NotNeeded => "recovering",
        }
    }

    /// The members of `on` that may be recovered now (backfill targets
    /// wait for the reservation and `nobackfill`).
    fn targets(&self, on: &BTreeSet<i32>, hold: Hold) -> BTreeSet<i32> {
        let reserved = !matches!(self.reservation, Reservation::Waiting);
        on.iter()
            .copied()
            .filter(|o| !self.backfill.contains(o) || (reserved && !hold.nobackfill))
            .filter(|o| self.backfill.contains(o) || !hold.norecover)
            .collect()
    }

    /// The next object to recover, its targets, and whether an op waits
    /// for it (then every member that lacks it gets it now, whatever the
    /// throttles and flags).
    fn next(&mut self, hold: Hold) -> Option<(ObjectKey, BTreeSet<i32>, bool)> {
        while let Some(k) = self.urgent.pop_front() {
            if let Some(on) = self.missing_on.get(&k)
                && !self.active.contains(&k)
                && !self.deferred.contains_key(&k)
                && !self.unfound.contains(&k)
            {
                return Some((k.clone(), on.clone(), true));
            }
        }
        // From the cursor round to it again: objects skipped earlier (their
        // targets waited for a reservation or a flag) are found once they
        // may go.
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let (after, upto) = match &self.cursor {
            Some(c) => (
                self.missing_on.range((Excluded(c.clone()), Unbounded)),
                self.missing_on.range((Unbounded, Included(c.clone()))),
            ),
            None => (
                self.missing_on.range::<ObjectKey, _>(..),
                self.missing_on
                    .range((Unbounded, Excluded(ObjectKey::new(0, "")))),
            ),
        };
        let found = after.chain(upto).find_map(|(k, on)| {
            if self.active.contains(k) || self.deferred.contains_key(k) || self.unfound.contains(k)
            {
                return None;
            }
            let t = self.targets(on, hold);
            (!t.is_empty()).then(|| (k.clone(), t, false))
        });
        if let Some((k, _, _)) = &found {
            self.cursor = Some(k.clone());
        }
        found
    }

    /// The objects after `first`, in order, that a job pushing `first` to
    /// `targets` may push with it: each lacked by exactly those of its
    /// members that may be recovered now, the primary not among them; at
    /// most `max`, stopping at the first that differs. Moves the cursor
    /// past them.
    fn batch_after(
        &mut self,
        first: &ObjectKey,
        targets: &BTreeSet<i32>,
        me: i32,
        hold: Hold,
        max: usize,
    ) -> Vec<ObjectKey> {
        use std::ops::Bound::{Excluded, Unbounded};
        let mut out = Vec::new();
        for (k, on) in self.missing_on.range((Excluded(first.clone()), Unbounded)) {
            if out.len() >= max {
                break;
            }
            if self.active.contains(k) || self.deferred.contains_key(k) || self.unfound.contains(k)
            {
                continue;
            }
            if on.contains(&me) || k.snap != ObjectKey::HEAD || self.targets(on, hold) != *targets {
                break;
            }
            out.push(k.clone());
        }
        if let Some(k) = out.last() {
            self.cursor = Some(k.clone());
        }
        out
    }
}

impl PgCore {
    /// Starts recovering (after activation): reserve a backfill slot when a
    /// member is backfilled, and fill the recovery slots.
    pub(super) fn start_recovery(&mut self) -> Vec<Effect> {
        let Some(rs) = self.recovery.as_ref() else {
            return Vec::new();
        };
        let mut fx = Vec::new();
        if matches!(rs.reservation, Reservation::Waiting) {
            fx.push(Effect::ReserveBackfill {
                generation: rs.generation,
            });
        }
        fx.push(Effect::PumpRecovery);
        fx
    }

    /// A backfill slot was free at once: hold it.
    pub(super) fn backfill_held(&mut self, generation: u64, permit: OwnedSemaphorePermit) {
        if let Some(rs) = self.recovery.as_mut()
            && rs.generation == generation
            && matches!(rs.reservation, Reservation::Waiting)
        {
            rs.reservation = Reservation::Held(permit);
        }
    }

    /// A backfill slot is ours (after a wait).
    pub(super) fn backfill_reserved(
        &mut self,
        generation: u64,
        permit: OwnedSemaphorePermit,
    ) -> Vec<Effect> {
        if let Some(rs) = self.recovery.as_mut()
            && rs.generation == generation
            && matches!(rs.reservation, Reservation::Waiting)
        {
            rs.reservation = Reservation::Held(permit);
            rs.cursor = None;
            return vec![Effect::StatsChanged, Effect::PumpRecovery];
        }
        Vec::new()
    }

    /// Fills the recovery slots (once active: before that, a replica may
    /// not have taken its activation yet, which would replace the missing
    /// set a push has just emptied — the simulation found this).
    pub(super) fn pump(&mut self) -> Vec<Effect> {
        let mut fx = Vec::new();
        if self.state != super::State::Active {
            return fx;
        }
        let max = self.cfg.recovery_max_active.max(1);
        let me = self.whoami;
        let Some(map) = self.map.clone() else {
            return fx;
        };
        let hold = Hold::of(&map);
        loop {
            let Some(rs) = self.recovery.as_mut() else {
                return fx;
            };
            if rs.jobs >= max {
                return fx;
            }
            let Some((key, targets, urgent)) = rs.next(hold) else {
                return fx;
            };
            // Erasure coding: the members holding the object's shards
            // (with their shards); fewer than k shards is unfound too.
            let ec_sources = match (&self.ec, self.plan.as_ref()) {
                (Some(_), Some(plan)) => Some(ec_sources(
                    plan,
                    &self.peer_logs,
                    (me, self.coll.shard),
                    &self.acting,
                    &targets,
                    &key,
                    &self.stray_sources,
                )),
                _ => None,
            };
            let k = self.ec.as_ref().map_or(1, |e| e.layout().k as usize);
            let enough = ec_sources
                .as_ref()
                .is_none_or(|s| s.iter().map(|(_, sh)| *sh).collect::<BTreeSet<u8>>().len() >= k);
            let pull_from = if targets.contains(&me) || !enough {
                let plan = self.plan.as_ref();
                // Erasure coding rebuilds from k shards, whoever holds
                // them (strays included): when every member moved to
                // another position (a split child placed anew), none holds
                // the object at its own, and the shards they left serve.
                let src = plan
                    .and_then(|p| p.sources(&key, &self.acting).into_iter().find(|o| *o != me))
                    .or_else(|| ec_sources.as_ref().and_then(|s| s.first().map(|(o, _)| *o)))
                    .filter(|_| enough);
                match src {
                    Some(src) => Some(src),
                    None => {
                        tracing::warn!(pg = %self.id, object = ?key, "no member holds the object: unfound");
                        rs.unfound.insert(key);
                        // One wide search per interval; after it only an
                        // OSD coming up can bring a copy.
                        if !rs.search_scheduled && !self.search_everywhere {
                            rs.search_scheduled = true;
                            fx.push(Effect::UnfoundSearchLater {
                                generation: rs.generation,
                            });
                        }
                        continue;
                    }
                }
            } else {
                None
            };
            let pull_from = pull_from.filter(|_| targets.contains(&me));
            // Small objects pushed with others, in one message and one
            // commit each batch: a replicated pool without snapshots (no
            // member holds clones we trimmed; an object with clones of a
            // client's own snapshot context still goes on its own), the
            // same targets, nothing to pull.
            let batch_max = self.cfg.recovery_batch_objects.max(1);
            let batched = batch_max > 1
                && !urgent
                && pull_from.is_none()
                && !targets.contains(&me)
                && key.snap == ObjectKey::HEAD
                && self.ec.is_none()
                && map
                    .pool(self.id.pool)
                    .is_some_and(|p| p.snap_seq == 0 && p.removed_snaps.is_empty());
            let more = match batched {
                true => rs.batch_after(&key, &targets, me, hold, batch_max - 1),
                false => Vec::new(),
            };
            rs.active.insert(key.clone());
            rs.active.extend(more.iter().cloned());
            rs.jobs += 1;
            let expect = expected(&self.log, std::iter::once(&key).chain(&more));
            let sources = ec_sources.unwrap_or_default();
            fx.push(Effect::RecoverObject(ObjectJob {
                generation: rs.generation,
                expect: expect.get(&key).copied(),
                batch: more
                    .into_iter()
                    .map(|k| {
                        let e = expect.get(&k).copied();
                        (k, e)
                    })
                    .collect(),
                key,
                pull_from,
                push_to: targets.into_iter().filter(|o| *o != me).collect(),
                throttled: !urgent,
                sources,
            }));
        }
    }

    /// Objects of a recovery job were recovered (each result lists the
    /// members that now hold its object), and maybe the job ended
    /// (`job_done`: its slot is free).
    pub(super) fn objects_recovered(
        &mut self,
        generation: u64,
        results: Vec<Recovered>,
        job_done: bool,
    ) -> Vec<Effect> {
        // Our copy is in the store whichever recovery made it.
        for r in &results {
            if r.done.contains(&self.whoami) {
                self.missing.remove(&r.key);
            }
        }
        let now = (self.now)();
        let Some(rs) = self
            .recovery
            .as_mut()
            .filter(|r| r.generation == generation)
        else {
            return Vec::new();
        };
        let mut fx = Vec::new();
        let mut completed = Vec::new();
        if job_done {
            rs.jobs = rs.jobs.saturating_sub(1);
        }
        for Recovered { key, done, error } in results {
            rs.active.remove(&key);
            rs.progress.add(done.len() as u64);
            let mut complete = false;
            if let Some(on) = rs.missing_on.get_mut(&key) {
                on.retain(|o| !done.contains(o));
                if on.is_empty() {
                    rs.missing_on.remove(&key);
                    complete = true;
                }
            }
            if let Some(e) = error {
                let (delay, log) = rs.failed(&key, e.clone(), now);
                let object = String::from_utf8_lossy(&key.name).replace('\0', "/");
                if log {
                    tracing::warn!(pg = %self.id, object, retry_in_ms = delay.as_millis() as u64,
                        "recovery of an object failed: {e}");
                    fx.push(Effect::StatsChanged);
                } else {
                    tracing::debug!(pg = %self.id, object, "recovery of an object failed again: {e}");
                }
                fx.push(Effect::RecoveryRetryAfter { delay, generation });
            } else if let Some(f) = rs.failures.remove(&key) {
                tracing::info!(pg = %self.id, object = ?key, attempts = f.attempts,
                    "recovered an object after failed tries");
                fx.push(Effect::StatsChanged);
            }
            completed.push((key, complete));
        }
        if rs.is_done() {
            tracing::debug!(pg = %self.id, "recovered: clean");
            self.recovery = None;
            self.plan = None;
            fx.push(Effect::StatsChanged);
            fx.extend(self.clean());
        }
        for (key, complete) in completed {
            if complete || !self.missing.contains(&key) {
                fx.push(Effect::RunWaiting(key));
            }
        }
        fx.push(Effect::PumpRecovery);
        fx
    }

    /// One object's recovery ended (a job of one object).
    #[cfg(test)]
    pub(super) fn object_recovered(
        &mut self,
        generation: u64,
        key: ObjectKey,
        done: BTreeSet<i32>,
        error: Option<String>,
    ) -> Vec<Effect> {
        self.objects_recovered(generation, vec![Recovered { key, done, error }], true)
    }

    /// A new map in the same interval: flags may have changed.
    pub(super) fn recovery_map_changed(&mut self) -> Vec<Effect> {
        if let Some(rs) = self.recovery.as_mut() {
            rs.cursor = None;
        }
        vec![Effect::PumpRecovery]
    }

    /// Objects are still unfound: peer again, asking every up OSD (what is
    /// in flight fails first; clients resend).
    pub(super) fn unfound_search(&mut self, generation: u64) -> Vec<Effect> {
        let still = self
            .recovery
            .as_ref()
            .is_some_and(|r| r.generation == generation && !r.unfound.is_empty());
        if !still || !self.is_primary() || self.state != super::State::Active {
            return Vec::new();
        }
        self.search_everywhere = true;
        self.peer_again_for_unfound()
    }

    /// Fails what is in flight (clients resend) and peers again, to hear
    /// OSDs that may hold copies of unfound objects.
    pub(super) fn peer_again_for_unfound(&mut self) -> Vec<Effect> {
        let mut fx = self.fail_inflight(
            shoal_proto::OsdErrorCode::Again,
            "the PG peers again to find unfound objects",
        );
        fx.extend(self.start_peering());
        fx
    }

    /// Failed recoveries are tried again.
    pub(super) fn recovery_retry(&mut self, generation: u64) -> Vec<Effect> {
        let now = (self.now)();
        if let Some(rs) = self
            .recovery
            .as_mut()
            .filter(|r| r.generation == generation)
        {
            rs.release_due(now);
            rs.cursor = None;
            rs.urgent.extend(self.waiting_for_object.keys().cloned());
        }
        vec![Effect::PumpRecovery]
    }
}

/// Erasure coding: the members other than `targets` holding `key`'s
/// authoritative version, each with the shard it holds (ours is `me`'s),
/// then the strays that hold it (shards members keep from positions they
/// left).
fn ec_sources(
    plan: &super::RecoveryPlan,
    peer_logs: &BTreeMap<i32, super::MemberLog>,
    me: (i32, u8),
    acting: &[i32],
    targets: &BTreeSet<i32>,
    key: &ObjectKey,
    strays: &[(i32, super::peering::Stray)],
) -> Vec<(i32, u8)> {
    // A clone or snapdir is authoritative where its head is: the changes
    // that make and trim them are logged under the head.
    let key = &key.clone_for(ObjectKey::HEAD);
    let mut out: Vec<(i32, u8)> = plan
        .sources(key, acting)
        .into_iter()
        .filter(|o| !targets.contains(o))
        .filter_map(|o| match peer_logs.get(&o) {
            _ if o == me.0 => Some((o, me.1)),
            Some(l) => Some((o, l.shard)),
            None => None,
        })
        .collect();
    for (o, s) in strays {
        if s.holds(plan, key) && !out.contains(&(*o, s.shard)) {
            out.push((*o, s.shard));
        }
    }
    out
}

/// What the log says of each of `keys` it still names: whether its newest
/// change wrote it (`true`) or deleted it.
fn expected<'a>(
    log: &crate::log::PgLog,
    keys: impl Iterator<Item = &'a ObjectKey>,
) -> BTreeMap<ObjectKey, bool> {
    let keys: BTreeSet<&ObjectKey> = keys.collect();
    let mut out = BTreeMap::new();
    // Newest first: each object's newest change, and no further once
    // every object has one.
    for e in log.entries().rev() {
        if out.len() == keys.len() {
            break;
        }
        if keys.contains(&e.key) && !out.contains_key(&e.key) {
            out.insert(e.key.clone(), e.op == crate::log::LogOp::Modify);
        }
    }
    out
}

/// One object to recover: what the driver's task needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectJob {
    /// The recovery it belongs to.
    pub generation: u64,
    /// The object.
    pub key: ObjectKey,
    /// The primary lacks the object: pull it from this member first.
    pub pull_from: Option<i32>,
    /// Replicas that lack it.
    pub push_to: Vec<i32>,
    /// Whether the log says the object exists (checked against every copy
    /// moved).
    pub expect: Option<bool>,
    /// Further objects pushed with `key` to the same members, in batches
    /// (each with its `expect`); empty but for a replicated pool without
    /// snapshots.
    pub batch: Vec<(ObjectKey, Option<bool>)>,
    /// Takes one of the OSD's recovery slots (an object an op waits for
    /// does not wait for a slot).
    pub throttled: bool,
    /// Erasure coding: the members holding the object's authoritative
    /// version, with the shard each holds (a member of an earlier interval
    /// may hold another position's), whose shards rebuild the others
    /// (empty for replication).
    pub sources: Vec<(i32, u8)>,
}

impl Pg {
    /// Reserves a backfill slot: at once when one is free, else when one
    /// frees ([`PgEvent::BackfillReserved`]).
    pub(super) fn reserve_backfill(&mut self, generation: u64) {
        let slots = Arc::clone(&self.ctx.backfill_slots);
        match Arc::clone(&slots).try_acquire_owned() {
            Ok(p) => self.core.backfill_held(generation, p),
            Err(_) => {
                let events = self.events.clone();
                tokio::spawn(async move {
                    if let Ok(permit) = slots.acquire_owned().await {
                        let _ = events.send(PgEvent::BackfillReserved { generation, permit });
                    }
                });
            }
        }
    }

    /// Copies one object in a task; [`PgEvent::ObjectRecovered`] follows.
    pub(super) fn recover_object(&self, job: ObjectJob) {
        let Some(map) = self.core.map.clone() else {
            return;
        };
        let me = self.core.whoami();
        let task = ObjectRecovery {
            expect: job.expect,
            ctx: Arc::clone(&self.ctx),
            map,
            pg: self.core.id,
            key: job.key,
            batch: job.batch,
            pull_from: job.pull_from,
            push_to: job.push_to,
            throttled: job.throttled,
            fence: recovery::CopyFence::at(&self.copy_fence),
            backend: Arc::clone(&self.core.backend),
        };
        let events = self.events.clone();
        let generation = job.generation;
        tokio::spawn(async move {
            let mut report = |results| {
                let _ = events.send(PgEvent::ObjectRecovered {
                    generation,
                    results,
                    job_done: false,
                });
            };
            task.run(me, &mut report).await;
            let _ = events.send(PgEvent::ObjectRecovered {
                generation,
                results: Vec::new(),
                job_done: true,
            });
        });
    }

    /// [`PgEvent::UnfoundSearch`] a while later.
    pub(super) fn unfound_search_later(&self, generation: u64) {
        let events = self.events.clone();
        tokio::spawn(async move {
            tokio::time::sleep(UNFOUND_SEARCH_DELAY).await;
            let _ = events.send(PgEvent::UnfoundSearch { generation });
        });
    }

    /// [`PgEvent::RecoveryRetry`] after `delay`.
    pub(super) fn recovery_retry_after(&self, delay: Duration, generation: u64) {
        let events = self.events.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = events.send(PgEvent::RecoveryRetry { generation });
        });
    }
}

/// One object recovered for some members of the acting set.
struct ObjectRecovery {
    ctx: Arc<OsdCtx>,
    map: Arc<OsdMap>,
    pg: PgId,
    key: ObjectKey,
    /// Further objects pushed with it, in batches (see [`ObjectJob`]).
    batch: Vec<(ObjectKey, Option<bool>)>,
    /// The primary lacks the object: pull it from this member first.
    pull_from: Option<i32>,
    /// Replicas that lack it.
    push_to: Vec<i32>,
    /// Whether the log says the object exists (checked against every copy
    /// moved).
    expect: Option<bool>,
    /// Takes one of the OSD's recovery slots (an object an op waits for
    /// does not wait for a slot).
    throttled: bool,
    /// Refuses the copy once the PG's recovery started over.
    fence: recovery::CopyFence,
    /// How the PG's data is read and installed.
    backend: Arc<dyn super::backend::PgBackend>,
}

impl ObjectRecovery {
    /// Recovers the job's objects, `report`ing each as it is done.
    async fn run(self, me: i32, report: &mut (dyn FnMut(Vec<Recovered>) + Send)) {
        let _permit = if self.throttled {
            Arc::clone(&self.ctx.recovery_slots)
                .acquire_owned()
                .await
                .ok()
        } else {
            None
        };
        if !self.batch.is_empty() {
            return self.run_batch(report).await;
        }
        let (done, error) = self.run_one(me).await;
        report(vec![Recovered {
            key: self.key.clone(),
            done,
            error,
        }]);
    }

    /// The PG's copies in this job's interval.
    fn copier(&self) -> recovery::Copier<'_> {
        recovery::Copier {
            ctx: &self.ctx,
            backend: &self.backend,
            pg: self.pg,
            epoch: self.map.epoch.0,
            fence: &self.fence,
        }
    }

    /// Pushes the job's objects to every member lacking them, small ones
    /// several to a message.
    async fn run_batch(&self, report: &mut (dyn FnMut(Vec<Recovered>) + Send)) {
        let c = self.copier();
        let mut conns = Vec::new();
        let mut unreachable = Vec::new();
        for osd in &self.push_to {
            match self.ctx.peer(&self.map, *osd).await {
                Ok(conn) => conns.push((*osd, conn)),
                Err(e) => unreachable.push(format!("push to osd.{osd}: {e}")),
            }
        }
        let objects: Vec<(ObjectKey, Option<bool>)> =
            std::iter::once((self.key.clone(), self.expect))
                .chain(self.batch.iter().cloned())
                .collect();
        let why = unreachable.join("; ");
        let mut reported = |mut results: Vec<Recovered>| {
            if !why.is_empty() {
                for r in &mut results {
                    r.error.get_or_insert_with(|| why.clone());
                }
            }
            report(results);
        };
        recovery::push_objects(c, &conns, &objects, &mut reported).await;
    }

    /// Recovers the job's one object: pulled first when the primary lacks
    /// it, then pushed to each member lacking it.
    async fn run_one(&self, me: i32) -> (BTreeSet<i32>, Option<String>) {
        let mut done = BTreeSet::new();
        // The primary first: it is the source of every push after.
        let steps = self
            .pull_from
            .map(|src| (src, me, true))
            .into_iter()
            .chain(self.push_to.iter().map(|dst| (*dst, *dst, false)));
        for (peer, holder, pull) in steps {
            if let Err(e) = self.copy(peer, pull).await {
                let dir = if pull { "pull from" } else { "push to" };
                return (done, Some(format!("{dir} osd.{peer}: {e}")));
            }
            done.insert(holder);
        }
        (done, None)
    }

    /// Pulls the object from `peer`, or pushes ours to it.
    async fn copy(&self, peer: i32, pull: bool) -> Result<(), String> {
        let conn = self.ctx.peer(&self.map, peer).await?;
        let c = self.copier();
        // A head's snapshot clones come with it: the write that made one
        // is logged under the head alone. They go first: installing the
        // head ends its recovery on the member, so a copy cut short
        // after it would leave the member without the clones for good.
        let replicated = self.map.pool(self.pg.pool).is_some_and(|p| !p.is_erasure());
        if replicated && self.key.snap == ObjectKey::HEAD {
            if pull {
                recovery::pull_family(c, &conn, &self.key).await?;
            } else {
                recovery::push_family(c, &conn, &self.key).await?;
            }
        }
        if pull {
            recovery::pull_object(c, &conn, &self.key, self.expect).await
        } else {
            recovery::push_object(c, &conn, &self.key, self.expect).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retry_delay_doubles_up_to_its_limit() {
        let d: Vec<u64> = (1..=8).map(|a| retry_delay(a).as_secs()).collect();
        assert_eq!(d, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(retry_delay(u32::MAX), RETRY_DELAY_MAX);
    }

    #[test]
    fn a_failing_object_is_logged_once_per_reason_deferred_and_reported() {
        let key = ObjectKey::new(1, "big");
        let own = MissingSet::from_map(BTreeMap::from([(key.clone(), Default::default())]));
        let mut rs = RecoveryState::new(1, 0, &own, std::iter::empty());
        let t0 = Instant::now();
        let (d1, log1) = rs.failed(&key, "push to osd.2: too large".into(), t0);
        let (d2, log2) = rs.failed(&key, "push to osd.2: too large".into(), t0);
        let (d3, log3) = rs.failed(&key, "push to osd.2: timed out".into(), t0);
        assert_eq!((log1, log2, log3), (true, false, true));
        assert_eq!((d1.as_secs(), d2.as_secs(), d3.as_secs()), (1, 2, 4));
        // Deferred until its delay is over, then offered again.
        let hold = Hold::default();
        assert!(rs.next(hold).is_none());
        rs.release_due(t0 + Duration::from_secs(3));
        assert!(rs.next(hold).is_none());
        rs.release_due(t0 + Duration::from_secs(4));
        assert_eq!(rs.next(hold).map(|n| n.0), Some(key.clone()));
        let stalled = rs.stalled();
        assert_eq!(stalled.len(), 1);
        assert!(
            stalled[0].starts_with("big: push to osd.2: timed out (3 failed tries in"),
            "{stalled:?}"
        );
    }
}

//! A new OSD map: whether it starts a new interval (a changed up or acting
//! set, primary, pool size or `min_size`, a split, or epochs this PG did
//! not see),
//! and what the PG does then — fail what is in flight, drop what the old
//! interval planned, peer (primary) or wait for the primary (member).

use std::sync::Arc;

use shoal_maps::OsdMap;

use super::{Effect, PgCore};
use crate::pg::State;

impl PgCore {
    /// A new map: a changed up or acting set, primary or pool size starts a
    /// new interval, which drops what was in flight (clients resend) and
    /// starts peering.
    pub(in crate::pg) fn advance_map(&mut self, map: Arc<OsdMap>) -> Vec<Effect> {
        if self.map.as_ref().is_some_and(|m| m.epoch >= map.epoch) {
            return Vec::new();
        }
        let Some(pool) = map.pool(self.id.pool).cloned() else {
            self.map = Some(map);
            self.pool = None;
            return self.new_interval(Vec::new(), Vec::new(), -1);
        };
        let m = map.pg_to_up_acting(self.id).unwrap_or_default();
        // Epochs this PG did not see may hold an interval it knows nothing
        // of (writes elsewhere): count a gap as a new interval.
        let gap = self
            .map
            .as_ref()
            .is_some_and(|old| map.epoch.0 > old.epoch.0 + 1);
        // An OSD that came up may hold what no member heard has (unfound).
        let someone_up = self
            .map
            .as_ref()
            .is_some_and(|old| map.osds().any(|(id, _)| map.is_up(id) && !old.is_up(id)));
        let key = |up: &[i32], acting: &[i32], primary: i32, pool: &shoal_maps::Pool| {
            shoal_maps::IntervalKey {
                up: up.to_vec(),
                acting: acting.to_vec(),
                primary,
                size: pool.size,
                min_size: pool.min_size,
            }
        };
        // An erasure-coded PG's sets are positional (holes are ITEM_NONE):
        // the engine's own sets list the members, `ec` keeps the positions.
        let (prev_up, prev_acting) = match &self.ec {
            Some(ec) => (ec.up.clone(), ec.acting.clone()),
            None => (self.up.clone(), self.acting.clone()),
        };
        let before = (self.pool.as_ref()).map(|p| key(&prev_up, &prev_acting, self.primary, p));
        // A split starts a new interval for the parent (its children start
        // their first): what was in flight may belong to a child now.
        let split = self.pool.as_ref().is_some_and(|p| {
            !shoal_maps::split_children(self.id.seed, p.pg_num, pool.pg_num).is_empty()
        });
        let changed =
            gap || split || before != Some(key(&m.up, &m.acting, m.acting_primary, &pool));
        let (up, acting) = if pool.is_erasure() {
            self.set_ec(&pool, &m);
            let members = |v: &[i32]| v.iter().copied().filter(|o| super::is_osd(*o)).collect();
            (members(&m.up), members(&m.acting))
        } else {
            (m.up, m.acting)
        };
        self.map = Some(map);
        self.pool = Some(pool);
        if changed {
            self.up = up.clone();
            return self.new_interval(up, acting, m.acting_primary);
        }
        if someone_up
            && self.is_primary()
            && self
                .recovery
                .as_ref()
                .is_some_and(|r| !r.unfound().is_empty())
        {
            // Ceph searches the OSDs that might have unfound objects; we
            // peer again, which hears every member of the previous acting
            // set and of the past intervals that are up now.
            return self.peer_again_for_unfound();
        }
        if self.recovery.is_some() {
            return self.recovery_map_changed();
        }
        if !self.is_primary() {
            return Vec::new();
        }
        match self.state {
            // A member may be back: look again.
            State::Down | State::Incomplete => self.start_peering(),
            State::Peering if self.peering.waiting_up_thru => self.check_up_thru(),
            State::Peering => self.queried_went_down(),
            _ => Vec::new(),
        }
    }

    /// An erasure-coded pool's codec (made once) and this map's sets by
    /// position; the backend becomes erasure coding.
    fn set_ec(&mut self, pool: &shoal_maps::Pool, m: &shoal_maps::PgMapping) {
        let codec = match &self.ec {
            Some(ec) => Arc::clone(&ec.codec),
            None => match crate::pg::ec::pool_codec(pool) {
                Some(Ok(c)) => {
                    let c = Arc::new(c);
                    self.backend = Arc::new(crate::pg::ec::Erasure {
                        codec: Arc::clone(&c),
                    });
                    c
                }
                Some(Err(e)) => {
                    tracing::error!(pg = %self.id, "cannot code this pool: {e}");
                    return;
                }
                None => return,
            },
        };
        let ec = crate::pg::ec::EcPg {
            codec,
            acting: m.acting.clone(),
            up: m.up.clone(),
        };
        // At another position than the shard we hold, we keep it: the
        // primary serves our shard's position from us (pg_temp) while the
        // new one is backfilled, or backfills us as the new one.
        self.ec = Some(ec);
    }

    /// Members of earlier intervals we still wait to hear from that this map
    /// marks down will not answer: give their queries up now (as Ceph's
    /// peering does when the prior set is affected) rather than when they
    /// time out.
    fn queried_went_down(&mut self) -> Vec<Effect> {
        let Some(map) = self.map.clone() else {
            return Vec::new();
        };
        let shards = self.shards();
        let gone: Vec<i32> = self
            .peers_pending
            .iter()
            .copied()
            .filter(|p| !map.is_up(*p) && !shards.contains(p))
            .collect();
        let mut fx = Vec::new();
        for p in gone {
            let why = format!("osd.{p} went down in epoch {}", map.epoch.0);
            fx.extend(self.peer_info(p, self.interval_start, Err(why)));
        }
        fx
    }

    /// The PG's new interval: `up`, `acting` and `primary` from this map.
    fn new_interval(&mut self, up: Vec<i32>, acting: Vec<i32>, primary: i32) -> Vec<Effect> {
        let was_primary = self.is_primary();
        if !self.acting.is_empty() {
            self.prior = std::mem::take(&mut self.acting);
        }
        self.up = up;
        self.acting = acting;
        self.primary = primary;
        self.interval_start = self.epoch();
        self.search_everywhere = false;
        // What was in flight belongs to the old interval: its clients are
        // told now (they resend, and the log recognises what was applied)
        // rather than left to notice the interval change themselves.
        let why = format!("pg {} changed in epoch {}", self.id, self.interval_start);
        let mut fx = self.fail_inflight(shoal_proto::OsdErrorCode::StaleEpoch, &why);
        self.peer_logs.clear();
        self.peers_pending.clear();
        fx.push(Effect::DropConnections);
        fx.extend(self.abort_scrub("the PG changed interval"));
        self.recovery = None;
        fx.push(Effect::FenceCopies);
        self.plan = None;
        self.requeue_object_waiters();
        fx.push(Effect::StatsChanged);
        tracing::debug!(pg = %self.id, epoch = self.interval_start, acting = ?self.acting,
            primary, "new interval");
        if self.is_primary() {
            fx.extend(self.refuse_stale_waiting(&why));
            fx.extend(self.start_peering());
        } else {
            self.state = if self.shards().contains(&self.whoami) {
                State::ReplicaWaiting
            } else {
                State::Stray
            };
            if was_primary || !self.waiting.is_empty() {
                fx.extend(self.refuse_waiting());
            }
        }
        fx
    }
}

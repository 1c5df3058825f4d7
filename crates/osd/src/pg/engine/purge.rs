//! Copies left behind. When a PG moves off an OSD (the OSD is marked out,
//! an upmap or the balancer moves it, CRUSH weights change), the OSD keeps
//! its copy while the new members are backfilled from it, and is then in
//! neither the up nor the acting set: a stray. Once the PG is active and
//! clean without it, the copy serves nothing and only holds space (Ceph's
//! primary sends its strays `MOSDPGRemove` when it goes clean). Here the
//! stray asks: now and then ([`PgCore::stray_tick`]) it sends the acting
//! primary a [`PgStray`]; the primary agrees only while it is active and
//! clean — nothing to recover, every position held by its up OSD, no
//! `pg_temp`, no inconsistency left by a scrub — and the asker is in none
//! of its sets ([`PgCore::stray_asks`]); the stray removes its copy (every
//! collection of the PG it holds, the shards of positions an erasure-coded
//! PG left included) only if, when the answer comes, it is still a stray
//! of that same primary ([`PgCore::purge_granted`]). A member of an
//! erasure-coded PG that holds the shards of positions it left asks the
//! same way (`member`), and drops those shards alone.

use shoal_proto::{OsdErrorCode, PgStray};

use super::{Effect, PgCore, ReplyTo, is_osd, rep_reply};
use crate::pg::State;

impl PgCore {
    /// Whether copies outside the PG's sets serve nothing any more: the
    /// PG is active with nothing to recover or activate, every position of
    /// the pool is held by the OSD CRUSH (and the upmaps) put there — not
    /// undersized, not remapped, no `pg_temp` asked for — and no scrub
    /// left an inconsistency a stray copy might help repair.
    pub(in crate::pg) fn purge_ready(&self) -> bool {
        let settled = self.state == State::Active
            && self.recovery.is_none()
            && self.pending_activation.is_none()
            && self.peering.waiting_pg_temp.is_none()
            && self.scrub_record.inconsistent.is_empty();
        settled && self.placed_whole()
    }

    /// A stray asks whether its copy may go: yes (code 0) only from the
    /// primary of an active and clean PG, to an OSD in none of its sets.
    pub(in crate::pg) fn stray_asks(
        &mut self,
        from: i32,
        msg: &PgStray,
        to: ReplyTo,
    ) -> Vec<Effect> {
        let epoch = self.epoch();
        let refuse = |code: OsdErrorCode, message: String| rep_reply(to, code, epoch, message);
        if !self.is_primary() {
            let m = format!("osd.{} is not the primary of pg {}", self.whoami, self.id);
            return vec![refuse(OsdErrorCode::WrongPrimary, m)];
        }
        let member = self.up.contains(&from) || self.acting.contains(&from);
        if !is_osd(from) || member != msg.member {
            let is = if member { "is" } else { "is not" };
            let m = format!(
                "osd.{from} {is} a member of pg {} in epoch {epoch}",
                self.id
            );
            return vec![refuse(OsdErrorCode::InvalidArgument, m)];
        }
        if !self.purge_ready() {
            let m = format!("pg {} is not active and clean yet", self.id);
            return vec![refuse(OsdErrorCode::Again, m)];
        }
        tracing::info!(pg = %self.id, osd = from, epoch = msg.epoch, member,
            last_update = %msg.last_update, "a stray copy may go: the PG is clean without it");
        vec![refuse(OsdErrorCode::Ok, String::new())]
    }

    /// The OSD's periodic look at its PGs: a stray with a primary to ask
    /// asks it whether its copy may go. A member of an erasure-coded PG
    /// still holding shards of positions it left (an activation drops them
    /// once every member is complete, but a recovery that ends without a
    /// new interval has none) asks to drop those; a primary holding such
    /// shards drops them itself once clean.
    pub(in crate::pg) fn stray_tick(&mut self) -> Vec<Effect> {
        if self.is_stray() {
            return vec![Effect::AskToPurge {
                primary: self.primary,
                member: false,
            }];
        }
        if self.strays.is_empty() {
            return Vec::new();
        }
        if self.is_primary() && self.purge_ready() {
            let mut txn = shoal_objectstore::Transaction::new();
            self.purge_strays(&mut txn);
            return vec![Effect::Record(txn)];
        }
        if self.state == State::ReplicaActive && is_osd(self.primary) {
            return vec![Effect::AskToPurge {
                primary: self.primary,
                member: true,
            }];
        }
        Vec::new()
    }

    /// `primary` agreed that our copy serves nothing: remove it, if we are
    /// still a stray of that primary (a newer map may have made us a
    /// member again, or moved the PG to a primary that has not judged it).
    pub(in crate::pg) fn purge_granted(
        &mut self,
        primary: i32,
        member: bool,
        interval_start: u32,
    ) -> Vec<Effect> {
        if self.primary != primary {
            return Vec::new();
        }
        if member {
            // Still a member of the same interval: the shards of positions
            // we left go, never our own position's.
            if self.state != State::ReplicaActive
                || self.interval_start != interval_start
                || self.strays.is_empty()
            {
                return Vec::new();
            }
            let mut txn = shoal_objectstore::Transaction::new();
            self.purge_strays(&mut txn);
            return vec![Effect::Record(txn)];
        }
        if !self.is_stray() {
            return Vec::new();
        }
        tracing::info!(pg = %self.id, primary, last_update = %self.log.info.last_update,
            "removing the copy left here: the PG is clean on its members");
        vec![Effect::RemoveCopy]
    }

    /// In neither set of a PG whose pool exists, with an acting primary
    /// that is another OSD.
    fn is_stray(&self) -> bool {
        self.state == State::Stray
            && self.pool.is_some()
            && is_osd(self.primary)
            && self.primary != self.whoami
            && !self.up.contains(&self.whoami)
            && !self.acting.contains(&self.whoami)
    }
}

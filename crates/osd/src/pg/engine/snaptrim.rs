//! Snapshot trimming (Ceph's snap trimmer): once the pool's map removes a
//! snapshot, the primary of an active, recovered PG walks its
//! objects and drops the removed snapshots from every snapset; a clone
//! left standing for no snapshot is deleted, and a snapdir left with no
//! clone too. Each object's trim is a logged change of its head,
//! replicated like a client's write (a member that misses it recovers the
//! head with its clones; on an erasure-coded PG every shard trims its own
//! chunk objects), one object at a time per PG and
//! `osd_snap_trim_sleep_ms` apart. The removed snapshots a finished walk
//! covered are persisted, so a walk runs again only for new removals (or
//! on a new primary, where it finds nothing left to do).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use shoal_objectstore::{ObjectKey, Transaction};
use shoal_proto::OsdOpReply;

use super::{Effect, NewChange, PgCore, ReplyTo};
use crate::log::{LogEntry, LogOp, Version};
use crate::object::{self, SNAPDIR, SNAPSET_XATTR, SnapSet};
use crate::pg::State;

/// The PG meta omap key of the removed snapshots every object was trimmed of.
pub(crate) const SNAP_TRIMMED_KEY: &[u8] = b"snap_trimmed";

/// Store keys looked at per trim step when none needs trimming.
const SCAN_PAGE: usize = 256;

/// A walk over the PG's objects trimming the removed snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SnapTrimJob {
    /// The pool's removed snapshots when the walk began.
    removed: Vec<(u64, u64)>,
    /// Where the walk goes on (None: the PG's first object).
    cursor: Option<ObjectKey>,
    /// The interval it runs in.
    interval_start: u32,
    /// The change of the object being trimmed, until it completes.
    pending: Option<Version>,
    /// A `SnapTrim` event is on its way.
    scheduled: bool,
    /// Clones deleted so far.
    pub(crate) clones_removed: u64,
}

/// The removed snapshot runs in their stored form.
pub(crate) fn encode_trimmed(runs: &[(u64, u64)]) -> Bytes {
    let mut b = Vec::with_capacity(4 + runs.len() * 16);
    b.extend_from_slice(&(runs.len() as u32).to_le_bytes());
    for (first, n) in runs {
        b.extend_from_slice(&first.to_le_bytes());
        b.extend_from_slice(&n.to_le_bytes());
    }
    Bytes::from(b)
}

/// Reads [`encode_trimmed`]'s form; a damaged record reads as nothing
/// trimmed (the next walk finds what is left).
pub(crate) fn decode_trimmed(b: &[u8]) -> Vec<(u64, u64)> {
    let n = b
        .get(..4)
        .and_then(|x| x.try_into().ok())
        .map(u32::from_le_bytes)
        .unwrap_or(0) as usize;
    if b.len() != 4 + n * 16 {
        return Vec::new();
    }
    b[4..]
        .chunks_exact(16)
        .filter_map(|c| {
            let first = u64::from_le_bytes(c[..8].try_into().ok()?);
            let count = u64::from_le_bytes(c[8..].try_into().ok()?);
            Some((first, count))
        })
        .collect()
}

fn in_runs(runs: &[(u64, u64)], snap: u64) -> bool {
    runs.iter()
        .any(|(first, n)| snap >= *first && snap - first < *n)
}

/// What trimming one object's family changes.
#[derive(Debug)]
pub(crate) struct Trim {
    /// The store changes.
    txn: Transaction,
    /// The head exists (else a snapdir held the snapset).
    head_exists: bool,
    /// The change of the PG's object count and bytes.
    delta: (i64, i64),
}

/// What trimming `removed` from `head`'s family changes, or None when
/// nothing of it is removed.
pub(crate) fn trim_family(
    store: &dyn shoal_objectstore::ObjectStore,
    coll: shoal_objectstore::CollectionId,
    head: &ObjectKey,
    removed: &[(u64, u64)],
) -> shoal_objectstore::Result<Option<Trim>> {
    let head_exists = store.exists(&coll, head)?;
    let snapdir = head.clone_for(SNAPDIR);
    let holder = if head_exists { head } else { &snapdir };
    let Some(raw) = store.getxattr(&coll, holder, SNAPSET_XATTR)? else {
        return Ok(None);
    };
    let Some(old) = SnapSet::decode(&raw) else {
        tracing::warn!(object = %holder, "snap trim: the snapset is damaged; left for scrub");
        return Ok(None);
    };
    let mut new = old.clone();
    let mut txn = Transaction::new();
    let mut delta = (0i64, 0i64);
    new.clones.retain_mut(|c| {
        c.snaps.retain(|s| !in_runs(removed, *s));
        if c.snaps.is_empty() {
            txn.remove(coll, head.clone_for(c.id));
            delta.0 -= 1;
            delta.1 -= i64::try_from(c.size).unwrap_or(i64::MAX);
            false
        } else {
            true
        }
    });
    if new == old {
        return Ok(None);
    }
    if head_exists {
        txn.set_xattr(coll, head.clone(), SNAPSET_XATTR, new.encode());
    } else if new.clones.is_empty() {
        txn.remove(coll, snapdir);
    } else {
        txn.set_xattr(coll, snapdir, SNAPSET_XATTR, new.encode());
    }
    Ok(Some(Trim {
        txn,
        head_exists,
        delta,
    }))
}

impl PgCore {
    /// Whether this PG may trim now: its primary, active with nothing to
    /// recover or scrub.
    fn may_trim(&self) -> bool {
        self.is_primary()
            && self.state == State::Active
            && self.recovery.is_none()
            && self.scrub.is_none()
            && self.pool.is_some()
    }

    /// After every event: starts a walk when the pool removed snapshots
    /// this PG has not trimmed, and asks for its next step when none is on
    /// its way and the last object's change has completed.
    pub(in crate::pg) fn snap_trim_poll(&mut self) -> Vec<Effect> {
        if !self.is_primary()
            || self
                .snap_trim
                .as_ref()
                .is_some_and(|j| j.interval_start != self.interval_start)
        {
            self.snap_trim = None;
        }
        if !self.may_trim() {
            return Vec::new();
        }
        let Some(pool) = self.pool.as_ref() else {
            return Vec::new();
        };
        if self.snap_trim.is_none() {
            if pool.removed_snaps == self.snap_trimmed {
                return Vec::new();
            }
            self.snap_trim = Some(SnapTrimJob {
                removed: pool.removed_snaps.clone(),
                cursor: None,
                interval_start: self.interval_start,
                pending: None,
                scheduled: false,
                clones_removed: 0,
            });
        }
        let sleep = self.cfg.snap_trim_sleep;
        let inflight = &self.inflight;
        let Some(job) = self.snap_trim.as_mut() else {
            return Vec::new();
        };
        if job.scheduled || job.pending.is_some_and(|v| inflight.contains_key(&v)) {
            return Vec::new();
        }
        let delay = if job.pending.take().is_some() {
            sleep
        } else {
            Duration::ZERO
        };
        job.scheduled = true;
        vec![Effect::SnapTrimAfter(delay)]
    }

    /// One trim step: the next object with removed snapshots is trimmed
    /// (a change submitted like a client's), or up to [`SCAN_PAGE`] keys
    /// are passed over, or the walk ends and its removals are recorded.
    pub(in crate::pg) fn snap_trim_step(&mut self) -> Vec<Effect> {
        let Some(job) = self.snap_trim.as_mut() else {
            return Vec::new();
        };
        job.scheduled = false;
        if !self.may_trim() {
            return Vec::new();
        }
        let removed = self
            .pool
            .as_ref()
            .map(|p| p.removed_snaps.clone())
            .unwrap_or_default();
        let Some(job) = self.snap_trim.as_ref() else {
            return Vec::new();
        };
        let cursor = job.cursor.clone();
        let page = match self
            .store
            .list_objects(&self.coll, cursor.as_ref(), SCAN_PAGE)
        {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(pg = %self.id, "snap trim: listing failed: {e}");
                self.snap_trim = None;
                return Vec::new();
            }
        };
        let mut last_family: Option<(u32, Vec<u8>)> = None;
        for k in &page.objects {
            if k.snap == ObjectKey::HEAD || k.name.first() == Some(&0) || k.name.is_empty() {
                continue;
            }
            if last_family
                .as_ref()
                .is_some_and(|(h, n)| *h == k.hash && *n == k.name)
            {
                continue;
            }
            last_family = Some((k.hash, k.name.clone()));
            let head = k.clone_for(ObjectKey::HEAD);
            match trim_family(self.store.as_ref(), self.coll, &head, &removed) {
                Ok(None) => {}
                Ok(Some(trim)) => {
                    return self.submit_trim(head, trim);
                }
                Err(e) => {
                    tracing::warn!(pg = %self.id, object = %head, "snap trim: {e}");
                    self.snap_trim = None;
                    return Vec::new();
                }
            }
        }
        match page.next {
            Some(next) => {
                if let Some(job) = self.snap_trim.as_mut() {
                    job.cursor = Some(next);
                }
                Vec::new()
            }
            None => self.snap_trim_done(),
        }
    }

    /// Logs and replicates one object's trim; the walk goes on after its
    /// head once the change completes.
    fn submit_trim(&mut self, head: ObjectKey, trim: Trim) -> Vec<Effect> {
        let Trim {
            mut txn,
            head_exists,
            delta,
        } = trim;
        // Erasure coding: every shard trims its own chunk objects.
        if let Some(ec) = &self.ec {
            txn = crate::pg::ec::family_transactions(ec, self.id, &txn);
        }
        let version = self.log.next_version(self.epoch());
        let entry = LogEntry {
            version,
            op: if head_exists {
                LogOp::Modify
            } else {
                LogOp::Delete
            },
            key: head.clone(),
            reqid: None,
            code: 0,
        };
        let change = NewChange {
            entry,
            txn,
            delta,
            reply: OsdOpReply::default(),
            out: Bytes::new(),
            received: None,
        };
        if let Some(job) = self.snap_trim.as_mut() {
            job.cursor = Some(head);
            job.pending = Some(version);
            job.clones_removed += u64::try_from(-delta.0).unwrap_or(0);
        }
        let mut fx = self.submit_change(change, ReplyTo::NONE);
        fx.push(Effect::StatsChanged);
        fx
    }

    /// The walk is over: every object is trimmed of the removals it began
    /// with (persisted, so the next walk is for new removals only).
    fn snap_trim_done(&mut self) -> Vec<Effect> {
        let Some(job) = self.snap_trim.take() else {
            return Vec::new();
        };
        if job.clones_removed > 0 {
            tracing::info!(pg = %self.id, clones = job.clones_removed, "snapshots trimmed");
        }
        self.snap_trimmed = job.removed;
        let mut t = Transaction::new();
        t.omap_set_keys(
            self.coll,
            object::pg_meta_key(),
            BTreeMap::from([(
                Bytes::from_static(SNAP_TRIMMED_KEY),
                encode_trimmed(&self.snap_trimmed),
            )]),
        );
        vec![Effect::Record(t)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trimmed_runs_round_trip_and_damage_reads_as_nothing() {
        let runs = vec![(3, 2), (9, 1)];
        assert_eq!(decode_trimmed(&encode_trimmed(&runs)), runs);
        assert_eq!(
            decode_trimmed(&encode_trimmed(&[])),
            Vec::<(u64, u64)>::new()
        );
        let b = encode_trimmed(&runs);
        assert!(decode_trimmed(&b[..b.len() - 1]).is_empty());
        assert!(decode_trimmed(&[1]).is_empty());
    }
}

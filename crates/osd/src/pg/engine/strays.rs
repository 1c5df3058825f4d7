//! Strays (Ceph's stray PG shards): an OSD of an erasure-coded PG that
//! moves to another position is backfilled into the new position's shard,
//! but keeps the shard it held, which may be one of the few complete
//! copies of that shard's chunks. It tells the primary about it in its
//! query answers, serves chunk reads from it, and removes it once an
//! activation says every member is complete.

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;
use shoal_objectstore::{CollectionId, ObjectKey, Transaction};
use shoal_proto::StrayShard;

use super::PgCore;
use crate::log::{Dup, LogEntry, PgLog, Version};
use crate::missing::MissingSet;
use crate::object::pg_meta_key;
use crate::pg::peering::{Stray, settle};

impl PgCore {
    /// The collection of our stray of shard `shard`.
    pub(in crate::pg) fn stray_coll(&self, shard: u8) -> CollectionId {
        CollectionId::shard(self.id.pool, self.id.seed, shard)
    }

    /// Our strays as their collections describe them (a stray that cannot
    /// be read is left out: it serves nothing).
    pub(in crate::pg) fn load_strays(&self) -> Vec<Stray> {
        let mut out = Vec::new();
        for &shard in &self.strays {
            let coll = self.stray_coll(shard);
            let omap = self.store.omap_range(
                &coll,
                &pg_meta_key(),
                Bound::Unbounded,
                Bound::Unbounded,
                super::super::OMAP_ALL,
            );
            let loaded = omap.map_err(|e| e.to_string()).and_then(|o| {
                let omap: BTreeMap<Bytes, Bytes> = o.into_iter().collect();
                let log = PgLog::load(&omap).map_err(|e| e.to_string())?;
                let missing = MissingSet::load(&omap).map_err(|e| e.to_string())?;
                Ok((log.info, missing))
            });
            match loaded {
                Ok((info, missing)) => out.push(Stray {
                    shard,
                    info,
                    missing,
                }),
                Err(e) => tracing::warn!(pg = %self.id, shard, "stray unreadable: {e}"),
            }
        }
        out
    }

    /// Our strays for a query's answer.
    pub(in crate::pg) fn stray_answers(&self) -> Vec<StrayShard> {
        self.load_strays()
            .into_iter()
            .map(|s| StrayShard {
                shard: u32::from(s.shard),
                info: s.info.encode(),
                missing: s.missing.encode(),
            })
            .collect()
    }

    /// Before our copy is backfilled into `new`, another shard than the
    /// one we hold: settles the shard we leave, as the primary planned
    /// (`MemberLog::settled`) — our divergent changes undone where their
    /// stashes allow, those left marked missing, the log cut to the
    /// history it shares with the authoritative log `auth` (from `tail`
    /// on). A stray whose newest change went another way would otherwise
    /// serve nothing, though it may hold one of the k shards an object
    /// has left.
    pub(in crate::pg) fn settle_stray(
        &mut self,
        new: CollectionId,
        auth: &[LogEntry],
        tail: Version,
        txn: &mut Transaction,
    ) -> Result<(), String> {
        if self.ec.is_none() || self.coll.shard == new.shard {
            return Ok(());
        }
        let entries: Vec<LogEntry> = self.log.entries().cloned().collect();
        let floor = self.rollback_floor();
        let s = settle(&entries, self.log.info, &self.missing, floor, auth, tail);
        self.ec_activate(auth, tail, txn)?;
        let dups: Vec<Dup> = self.log.dups().cloned().collect();
        let limits = self.cfg.log_limits;
        self.log
            .replace(s.info, s.entries, dups, limits, self.coll, txn);
        self.missing.replace(s.missing, self.coll, txn);
        Ok(())
    }

    /// Our copy is backfilled into `new` (our position's shard), lacking
    /// the objects of `lacks` (every object of the PG): the shard we held
    /// is settled and stays as a stray when it is another one (erasure
    /// coded), and goes otherwise. A stray of shard `new` itself becomes
    /// our copy: its objects may be the only ones left of that shard's
    /// chunks, and recovery still reads them from here; the backfill
    /// replaces each as it copies it (a write waits for that copy), and
    /// what the PG no longer has goes now, with the stray's own metadata.
    pub(in crate::pg) fn begin_backfill(
        &mut self,
        new: CollectionId,
        auth: &[LogEntry],
        tail: Version,
        lacks: Option<&MissingSet>,
        txn: &mut Transaction,
    ) -> Result<(), String> {
        self.settle_stray(new, auth, tail, txn)?;
        let old = self.coll;
        if self.ec.is_some() && old.shard != new.shard {
            self.strays.insert(old.shard);
        } else {
            txn.remove_collection(old);
        }
        if self.strays.remove(&new.shard) {
            let all = crate::recovery::all_objects(self.store.as_ref(), new)
                .map_err(|e| format!("cannot list the stray of shard {}: {e}", new.shard))?;
            // An object's clones and snapdir go with its head.
            let wanted = |k: &ObjectKey| {
                k.name.first() != Some(&0)
                    && lacks.is_some_and(|m| m.contains(&k.clone_for(ObjectKey::HEAD)))
            };
            for k in all.into_iter().filter(|k| !wanted(k)) {
                txn.remove(new, k);
            }
            txn.touch(new, pg_meta_key());
        } else {
            txn.create_collection(new);
        }
        // The new copy is split as far as ours: an OSD down while the pool
        // splits again splits it from this count when it returns (without
        // it, the copy would take the first map's count and never split).
        if self.pg_num > 0 {
            crate::split::persist_pg_num(new, self.pg_num, txn);
        }
        self.coll = new;
        self.log = PgLog::default();
        self.missing = MissingSet::default();
        self.stashes.clear();
        Ok(())
    }

    /// Every member is complete: our strays are no longer needed.
    pub(in crate::pg) fn purge_strays(&mut self, txn: &mut Transaction) {
        for shard in std::mem::take(&mut self.strays) {
            tracing::debug!(pg = %self.id, shard, "removing a stray shard");
            txn.remove_collection(self.stray_coll(shard));
        }
    }
}

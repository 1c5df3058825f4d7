//! Rollback on an erasure-coded PG's shards (see `crate::ec::rollback`):
//! every change a shard applies is stashed first; the primary tells the
//! members how far every one of them has the changes durable, and they
//! drop the stashes up to there; at activation a member undoes its
//! divergent changes from their stashes (newest first) instead of
//! waiting for the objects to be rebuilt from other shards, which may
//! not hold enough of the older version to decode it.

use std::collections::{BTreeMap, BTreeSet};

use shoal_objectstore::{ObjectKey, Transaction};

use super::PgCore;
use crate::ec::rollback::{self, Undoing};
use crate::log::{LogEntry, Version};

impl PgCore {
    /// `txn`, the change `version` to `key` on our shard, with its stash
    /// made first (unchanged for a replicated PG): one for the head, and
    /// one for each other member of its snapshot family the change makes,
    /// changes or removes (a clone, the snapdir).
    pub(super) fn ec_stash(
        &mut self,
        key: &ObjectKey,
        version: Version,
        txn: Transaction,
    ) -> Result<Transaction, String> {
        let Some(ec) = &self.ec else {
            return Ok(txn);
        };
        let unit = u64::from(ec.layout().unit);
        let mut keys = vec![key.clone()];
        for op in txn.ops() {
            if let Some(k) = rollback::changed_key(op)
                && k.hash == key.hash
                && k.name == key.name
                && !keys.contains(k)
            {
                keys.push(k.clone());
            }
        }
        let mut t = txn;
        for k in &keys {
            t = rollback::stash(self.store.as_ref(), self.coll, k, version, unit, t)
                .map_err(|e| format!("cannot stash the rollback of {version}: {e}"))?;
        }
        let stashes = self.stashes.entry(version).or_default();
        stashes.extend(keys.iter().map(|k| rollback::stash_key(version, k)));
        Ok(t)
    }

    /// Adds to `txn` the removal of every stash up to `to`: no member
    /// will roll those changes back.
    pub(super) fn roll_forward(&mut self, to: Version, txn: &mut Transaction) {
        while let Some(entry) = self.stashes.first_entry() {
            if *entry.key() > to {
                break;
            }
            for k in entry.remove() {
                txn.remove(self.coll, k);
            }
        }
    }

    /// The newest change of our log that we could not roll back: every
    /// newer one has its stash (`None` for a replicated PG).
    pub(in crate::pg) fn rollback_floor(&self) -> Option<Version> {
        self.ec.as_ref()?;
        let mut floor = self.log.info.log_tail;
        for e in self.log.entries().rev() {
            let stashed = self
                .stashes
                .get(&e.version)
                .is_some_and(|ks| ks.contains(&rollback::stash_key(e.version, &e.key)));
            if !stashed {
                floor = e.version;
                break;
            }
        }
        Some(floor)
    }

    /// At activation, with `auth` the authoritative log from `tail` on:
    /// undoes our divergent changes whose every divergent change is newer
    /// than our rollback floor (the primary planned with the same floor,
    /// so it counts those objects as present), and drops every stash
    /// left: the authoritative log's changes are never rolled back.
    pub(in crate::pg) fn ec_activate(
        &mut self,
        auth: &[LogEntry],
        tail: Version,
        txn: &mut Transaction,
    ) -> Result<(), String> {
        if self.ec.is_none() {
            return Ok(());
        }
        let floor = self.rollback_floor().unwrap_or(tail);
        let auth: BTreeSet<(Version, &ObjectKey)> =
            auth.iter().map(|e| (e.version, &e.key)).collect();
        let mut divergent: BTreeMap<&ObjectKey, Vec<Version>> = BTreeMap::new();
        for e in self.log.entries() {
            if e.version > tail && !auth.contains(&(e.version, &e.key)) {
                divergent.entry(&e.key).or_default().push(e.version);
            }
        }
        let mut undone = BTreeSet::new();
        let store = self.store.as_ref();
        for (key, versions) in divergent {
            if versions.iter().any(|v| *v <= floor) {
                continue;
            }
            // Each change undoes the head and every family member it
            // stashed, newest change first; each object's state follows it.
            let mut states: BTreeMap<ObjectKey, Undoing> = BTreeMap::new();
            for v in versions.iter().rev() {
                let mut objects = vec![key.clone()];
                for s in self.stashes.get(v).into_iter().flatten() {
                    if let Some(k) = rollback::stashed_key(s)
                        && k.hash == key.hash
                        && k.name == key.name
                        && !objects.contains(&k)
                    {
                        objects.push(k);
                    }
                }
                for k in objects {
                    let state = match states.entry(k.clone()) {
                        std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                        std::collections::btree_map::Entry::Vacant(e) => e.insert(
                            Undoing::now(store, &self.coll, &k).map_err(|e| e.to_string())?,
                        ),
                    };
                    rollback::undo(store, self.coll, &k, *v, state, txn)
                        .map_err(|e| format!("cannot roll back {v} of {k:?}: {e}"))?;
                    undone.insert(rollback::stash_key(*v, &k));
                }
            }
            tracing::debug!(pg = %self.id, object = ?key, changes = versions.len(), "rolled back");
        }
        for k in std::mem::take(&mut self.stashes).into_values().flatten() {
            if !undone.contains(&k) {
                txn.remove(self.coll, k);
            }
        }
        Ok(())
    }
}

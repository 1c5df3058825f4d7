//! A PG split's log half (Ceph's `PGLog::split_out_child`): when a pool's
//! `pg_num` grows, every member of a parent PG moves the objects of each
//! child into the child's collection (the store's `SplitCollection`) and
//! divides what it knows of the PG the same way — each log entry and each
//! missing object goes with its object; both keep the whole history's
//! bounds (`last_update`, `log_tail`, `last_epoch_started`), since the
//! child's history is the parent's up to the split, and both keep every
//! dup (a resent request may name an object of either). The object counts
//! come from what the store moved. Pure: the same function on every member
//! gives every member the same child.

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;
use shoal_maps::SplitChild;
use shoal_objectstore::{CollectionId, ObjectKey, ObjectStore, Transaction};

use crate::log::{Dup, LogEntry, LogLimits, PgInfoData, PgLog};
use crate::missing::MissingSet;
use crate::object::pg_meta_key;

/// The omap key (in the PG meta object) of the pool's `pg_num` a copy was
/// last split for: a copy that finds a larger one in a map splits first.
/// Absent in copies made before splits existed: the first map's counts.
pub const PG_NUM_KEY: &[u8] = b"pg_num";

/// The `pg_num` stored under [`PG_NUM_KEY`] (0: none).
pub fn stored_pg_num(omap: &BTreeMap<Bytes, Bytes>) -> u32 {
    omap.get(PG_NUM_KEY)
        .and_then(|b| <[u8; 4]>::try_from(b.as_ref()).ok())
        .map_or(0, u32::from_le_bytes)
}

/// The store op that records `pg_num` for the copy in `coll`.
pub fn persist_pg_num(coll: CollectionId, pg_num: u32, txn: &mut Transaction) {
    let v = Bytes::copy_from_slice(&pg_num.to_le_bytes());
    txn.omap_set_keys(
        coll,
        pg_meta_key(),
        BTreeMap::from([(Bytes::from_static(PG_NUM_KEY), v)]),
    );
}

/// Why a copy could not be split.
#[derive(Debug, thiserror::Error)]
#[error("splitting {coll:?}: {why}")]
pub struct SplitError {
    coll: CollectionId,
    why: String,
}

/// Meta keys a child copies from its parent as they are.
const INHERITED: [&[u8]; 2] = [crate::pg::SCRUB_KEY, crate::pg::SNAP_TRIMMED_KEY];

/// Adds to `txn` the split of the copy in `src` into `children` (each in
/// the collection of its seed, same shard) for a pool now of `pg_num`
/// PGs: each child's collection made with its meta object — its half of
/// the log and missing set ([`split_log`]), the parent's dups, scrub
/// stamps and trimmed snapshots, its object counts from what the store
/// holds — then the parent's meta rewritten, then the objects moved
/// (`SplitCollection`, last, as the store requires). A child collection
/// already there (a copy left from before) is replaced. Reads `src` as
/// the store has it: every transaction queued so far is visible.
pub fn split_txn(
    store: &dyn ObjectStore,
    src: CollectionId,
    children: &[SplitChild],
    pg_num: u32,
    limits: LogLimits,
    txn: &mut Transaction,
) -> Result<(), SplitError> {
    let err = |why: String| SplitError { coll: src, why };
    let meta = pg_meta_key();
    let omap: BTreeMap<Bytes, Bytes> = store
        .omap_range(&src, &meta, Bound::Unbounded, Bound::Unbounded, usize::MAX)
        .map_err(|e| err(e.to_string()))?
        .into_iter()
        .collect();
    let log = PgLog::load(&omap).map_err(|e| err(e.to_string()))?;
    let missing = MissingSet::load(&omap).map_err(|e| err(e.to_string()))?;
    // What each child takes, counted in the store: the objects clients
    // made (the OSD's own names start with a NUL byte).
    let mut stats = vec![(0u64, 0u64); children.len()];
    let mut start: Option<ObjectKey> = None;
    loop {
        let page = store
            .list_objects(&src, start.as_ref(), 1024)
            .map_err(|e| err(e.to_string()))?;
        for key in &page.objects {
            if key.name.first().is_none_or(|b| *b == 0) {
                continue;
            }
            if let Some(i) = children.iter().position(|c| c.takes(key.hash)) {
                // An erasure-coded shard records the object's size.
                let size = if src.shard == CollectionId::NO_SHARD {
                    store.stat(&src, key).map_err(|e| err(e.to_string()))?.size
                } else {
                    crate::ec::logical_size(store, &src, key)
                        .map_err(|e| err(e.to_string()))?
                        .unwrap_or(0)
                };
                stats[i].0 += 1;
                stats[i].1 += size;
            }
        }
        match page.next {
            Some(next) => start = Some(next),
            None => break,
        }
    }
    let dups: Vec<Dup> = log.dups().cloned().collect();
    let mut parent = SplitSide {
        info: log.info,
        entries: log.entries().cloned().collect(),
        dups: dups.clone(),
        missing: missing.clone(),
    };
    for (child, child_stats) in children.iter().zip(stats) {
        let dst = CollectionId {
            seed: child.seed,
            ..src
        };
        let (kept, side) = split_log(
            parent.info,
            &parent.entries,
            &dups,
            &parent.missing,
            |k| child.takes(k.hash),
            child_stats,
        );
        parent = kept;
        if store
            .collection_exists(&dst)
            .map_err(|e| err(e.to_string()))?
        {
            tracing::warn!(?dst, "replacing a copy of a split's child left from before");
            txn.remove_collection(dst);
        }
        txn.create_collection(dst);
        txn.touch(dst, meta.clone());
        PgLog::default().replace(side.info, side.entries, side.dups, limits, dst, txn);
        MissingSet::default().replace(side.missing, dst, txn);
        let inherited: BTreeMap<Bytes, Bytes> = INHERITED
            .iter()
            .filter_map(|k| omap.get(*k).map(|v| (Bytes::from_static(k), v.clone())))
            .collect();
        if !inherited.is_empty() {
            txn.omap_set_keys(dst, meta.clone(), inherited);
        }
        persist_pg_num(dst, pg_num, txn);
    }
    // An erasure-coded shard's rollback stashes (hidden, hash 0, so no
    // split moves them) go with the objects they belong to: the child
    // rolls back what its members did not all apply.
    if src.shard != CollectionId::NO_SHARD {
        let stashes =
            crate::ec::rollback::list_stashes(store, src).map_err(|e| err(e.to_string()))?;
        for stash in stashes.into_values().flatten() {
            let Some(object) = crate::ec::rollback::stashed_key(&stash) else {
                continue;
            };
            if let Some(child) = children.iter().find(|c| c.takes(object.hash)) {
                let dst = CollectionId {
                    seed: child.seed,
                    ..src
                };
                move_object(store, src, dst, &stash, txn).map_err(|e| err(e.to_string()))?;
            }
        }
    }
    let (mut log, mut missing) = (log, missing);
    log.replace(parent.info, parent.entries, dups, limits, src, txn);
    missing.replace(parent.missing, src, txn);
    persist_pg_num(src, pg_num, txn);
    for child in children {
        let dst = CollectionId {
            seed: child.seed,
            ..src
        };
        txn.split_collection(src, dst, child.bits, child.seed);
    }
    Ok(())
}

/// One side of a split: what the parent keeps, or what the child starts
/// with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SplitSide {
    /// Its info.
    pub info: PgInfoData,
    /// Its log entries, oldest first.
    pub entries: Vec<LogEntry>,
    /// The request ids of trimmed entries (both sides keep all).
    pub dups: Vec<Dup>,
    /// The objects it lacks.
    pub missing: MissingSet,
}

/// Splits a PG's log, dups and missing set between the parent and one
/// child: `moves` says whether an object goes to the child, and
/// `child_stats` is the (objects, bytes) the store moved. Returns (parent,
/// child).
pub fn split_log(
    info: PgInfoData,
    entries: &[LogEntry],
    dups: &[Dup],
    missing: &MissingSet,
    moves: impl Fn(&ObjectKey) -> bool,
    child_stats: (u64, u64),
) -> (SplitSide, SplitSide) {
    let (to_child, kept): (Vec<LogEntry>, Vec<LogEntry>) =
        entries.iter().cloned().partition(|e| moves(&e.key));
    let (child_missing, parent_missing): (Vec<_>, Vec<_>) = missing
        .objects()
        .iter()
        .map(|(k, v)| (k.clone(), *v))
        .partition(|(k, _)| moves(k));
    let (objects, bytes) = child_stats;
    let parent = SplitSide {
        info: PgInfoData {
            objects: info.objects.saturating_sub(objects),
            bytes: info.bytes.saturating_sub(bytes),
            ..info
        },
        entries: kept,
        dups: dups.to_vec(),
        missing: MissingSet::from_map(parent_missing.into_iter().collect()),
    };
    let child = SplitSide {
        info: PgInfoData {
            objects,
            bytes,
            ..info
        },
        entries: to_child,
        dups: dups.to_vec(),
        missing: MissingSet::from_map(child_missing.into_iter().collect()),
    };
    (parent, child)
}

/// Adds to `txn` a copy of object `key` of `src` in `dst` — data, xattrs
/// and omap — and its removal from `src`.
fn move_object(
    store: &dyn ObjectStore,
    src: CollectionId,
    dst: CollectionId,
    key: &ObjectKey,
    txn: &mut Transaction,
) -> shoal_objectstore::Result<()> {
    let size = store.stat(&src, key)?.size;
    txn.touch(dst, key.clone());
    if size > 0 {
        let data = store.read(&src, key, 0, size)?;
        txn.write(dst, key.clone(), 0, data);
    }
    let xattrs = store.getxattrs(&src, key)?;
    if !xattrs.is_empty() {
        txn.set_xattrs(dst, key.clone(), xattrs);
    }
    let header = store.omap_get_header(&src, key)?;
    if !header.is_empty() {
        txn.omap_set_header(dst, key.clone(), header);
    }
    let omap: BTreeMap<Bytes, Bytes> = store
        .omap_range(&src, key, Bound::Unbounded, Bound::Unbounded, usize::MAX)?
        .into_iter()
        .collect();
    if !omap.is_empty() {
        txn.omap_set_keys(dst, key.clone(), omap);
    }
    txn.remove(src, key.clone());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{LogOp, ReqId, Version};

    fn entry(v: u64, hash: u32) -> LogEntry {
        LogEntry {
            version: Version { epoch: 7, v },
            op: LogOp::Modify,
            key: ObjectKey::new(hash, format!("o{hash:x}")),
            reqid: Some(ReqId {
                entity: "client.admin".into(),
                inc: 1,
                tid: v,
            }),
            code: 0,
        }
    }

    /// A copy with objects of both halves, a log naming them, a missing
    /// object of each and (erasure coded) a rollback stash: one
    /// transaction splits it, and each side reads back whole.
    #[test]
    fn a_copy_splits_in_one_transaction_and_each_side_has_its_objects_log_and_stashes() {
        use shoal_objectstore::MemStore;
        let store = MemStore::new(1 << 30);
        for shard in [CollectionId::NO_SHARD, 1] {
            let parent = CollectionId::shard(3, 1, shard);
            // Sizes: the shard's recorded logical size, or the copy's.
            let size = if shard == CollectionId::NO_SHARD {
                100
            } else {
                300
            };
            let mut t = Transaction::new();
            t.create_collection(parent);
            t.touch(parent, pg_meta_key());
            // Pool of 4 PGs growing to 8: PG 1's child is 5 (hash & 7 == 5).
            let hashes = [0x1u32, 0x5, 0x9, 0xd, 0x15, 0x11];
            for h in hashes {
                let key = ObjectKey::new(h, format!("o{h:x}"));
                t.write(parent, key.clone(), 0, Bytes::from(vec![1u8; 100]));
                if shard != CollectionId::NO_SHARD {
                    let size = Bytes::copy_from_slice(&300u64.to_le_bytes());
                    t.set_xattrs(
                        parent,
                        key,
                        BTreeMap::from([(crate::ec::SIZE_XATTR.into(), size)]),
                    );
                }
            }
            let entries: Vec<LogEntry> = hashes
                .iter()
                .enumerate()
                .map(|(i, h)| entry(i as u64 + 1, *h))
                .collect();
            let info = PgInfoData {
                last_update: Version { epoch: 7, v: 6 },
                log_tail: Version::default(),
                last_epoch_started: 6,
                objects: 6,
                bytes: 6 * size,
            };
            PgLog::default().replace(
                info,
                entries,
                Vec::new(),
                LogLimits::default(),
                parent,
                &mut t,
            );
            let lacks = |h: u32| {
                (
                    ObjectKey::new(h, format!("o{h:x}")),
                    Version { epoch: 7, v: 9 },
                )
            };
            let missing = MissingSet::from_map([lacks(0x5), lacks(0x1)].into_iter().collect());
            MissingSet::default().replace(missing, parent, &mut t);
            let moving = ObjectKey::new(0xd, "od");
            let stash = crate::ec::rollback::stash_key(Version { epoch: 7, v: 4 }, &moving);
            t.write(parent, stash.clone(), 0, Bytes::from_static(b"old bytes"));
            store.apply_transaction(t).unwrap();

            let children = shoal_maps::split_children(1, 4, 8);
            assert_eq!(children, vec![SplitChild { seed: 5, bits: 3 }]);
            let mut t = Transaction::new();
            split_txn(&store, parent, &children, 8, LogLimits::default(), &mut t).unwrap();
            store.apply_transaction(t).unwrap();

            let child = CollectionId { seed: 5, ..parent };
            let list = |c: &CollectionId| -> Vec<u32> {
                let l = store.list_objects(c, None, 100).unwrap().objects;
                l.iter()
                    .filter(|k| k.name[0] != 0)
                    .map(|k| k.hash)
                    .collect()
            };
            assert_eq!(list(&parent), vec![0x1, 0x9, 0x11], "shard {shard}");
            assert_eq!(list(&child), vec![0x5, 0xd, 0x15], "shard {shard}");
            let load = |c: &CollectionId| {
                let omap: BTreeMap<Bytes, Bytes> = store
                    .omap_range(
                        c,
                        &pg_meta_key(),
                        Bound::Unbounded,
                        Bound::Unbounded,
                        usize::MAX,
                    )
                    .unwrap()
                    .into_iter()
                    .collect();
                let log = PgLog::load(&omap).unwrap();
                let missing = MissingSet::load(&omap).unwrap();
                (log, missing, stored_pg_num(&omap))
            };
            let (plog, pmissing, ppg) = load(&parent);
            let (clog, cmissing, cpg) = load(&child);
            let versions = |l: &PgLog| l.entries().map(|e| e.version.v).collect::<Vec<_>>();
            assert_eq!(versions(&plog), vec![1, 3, 6]);
            assert_eq!(versions(&clog), vec![2, 4, 5]);
            for (log, objects) in [(&plog, 3), (&clog, 3)] {
                assert_eq!(log.info.last_update, info.last_update);
                assert_eq!(log.info.objects, objects);
                assert_eq!(log.info.bytes, objects * size);
            }
            assert!(pmissing.contains(&ObjectKey::new(0x1, "o1")) && pmissing.len() == 1);
            assert!(cmissing.contains(&ObjectKey::new(0x5, "o5")) && cmissing.len() == 1);
            assert_eq!((ppg, cpg), (8, 8));
            // The stash went with its object (erasure coded only).
            let stashes = crate::ec::rollback::list_stashes(&store, child).unwrap();
            let moved = shard != CollectionId::NO_SHARD;
            assert_eq!(stashes.values().flatten().any(|k| *k == stash), moved);
            assert_eq!(store.exists(&parent, &stash).unwrap(), !moved);
        }
    }

    #[test]
    fn each_entry_and_missing_object_goes_with_its_object_and_both_keep_the_history() {
        let entries: Vec<LogEntry> = [(3, 0x1), (4, 0x2), (5, 0x5), (6, 0x1), (7, 0x6)]
            .iter()
            .map(|(v, h)| entry(*v, *h))
            .collect();
        let dups = vec![Dup {
            version: Version { epoch: 6, v: 2 },
            reqid: ReqId {
                entity: "client.admin".into(),
                inc: 1,
                tid: 2,
            },
            code: 0,
        }];
        let info = PgInfoData {
            last_update: Version { epoch: 7, v: 7 },
            log_tail: Version { epoch: 6, v: 2 },
            last_epoch_started: 6,
            objects: 10,
            bytes: 4000,
        };
        let missing = MissingSet::from_map(
            [(0x5u32, 5u64), (0x2, 4)]
                .iter()
                .map(|(h, v)| {
                    let key = ObjectKey::new(*h, format!("o{h:x}"));
                    (key, Version { epoch: 7, v: *v })
                })
                .collect(),
        );
        // Child: low two bits 0b01.
        let moves = |k: &ObjectKey| k.hash & 3 == 1;
        let (parent, child) = split_log(info, &entries, &dups, &missing, moves, (4, 1500));
        let versions = |s: &SplitSide| s.entries.iter().map(|e| e.version.v).collect::<Vec<_>>();
        assert_eq!(versions(&child), vec![3, 5, 6]);
        assert_eq!(versions(&parent), vec![4, 7]);
        assert_eq!(child.missing.len(), 1);
        assert!(child.missing.contains(&ObjectKey::new(0x5, "o5")));
        assert!(parent.missing.contains(&ObjectKey::new(0x2, "o2")));
        for side in [&parent, &child] {
            assert_eq!(side.info.last_update, info.last_update);
            assert_eq!(side.info.log_tail, info.log_tail);
            assert_eq!(side.info.last_epoch_started, 6);
            assert_eq!(side.dups, dups);
        }
        assert_eq!((child.info.objects, child.info.bytes), (4, 1500));
        assert_eq!((parent.info.objects, parent.info.bytes), (6, 2500));
        // Stats never go below zero, however the store counted.
        let (p, _) = split_log(info, &entries, &dups, &missing, moves, (50, 1 << 20));
        assert_eq!((p.info.objects, p.info.bytes), (0, 0));
    }
}

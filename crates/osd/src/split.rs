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

use crate::log::{Dup, LogEntry, PgInfoData};
use crate::missing::MissingSet;
use shoal_objectstore::ObjectKey;

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

//! A PG member's missing set: the objects its copy lacks (or holds a stale
//! or divergent version of), each with the version it needs. Peering builds
//! it; the member persists it in its PG meta object in the same transaction
//! as its new log, and removes an object from it in the same transaction
//! that installs the recovered copy. So a member that restarts mid-recovery
//! still knows exactly what it lacks, and the PG can be active meanwhile:
//! ops on a missing object wait for that object alone.
//!
//! Persistent layout, in the omap of the PG's meta object:
//! `miss.<object key>` (`ObjectKey::to_bytes`: hash, name, snapshot) →
//! format byte, needed version (epoch u32 LE, v u64 LE). Keys sort in hash
//! order, the order a backfill scans.

use std::collections::BTreeMap;

use bytes::Bytes;
use shoal_objectstore::{CollectionId, ObjectKey, Transaction};

use crate::log::{FORMAT, LogDecodeError, Reader, Version, put_bytes, put_version};
use crate::object::pg_meta_key;

const MISSING_PREFIX: &[u8] = b"miss.";

/// Objects a member lacks, with the version each needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MissingSet {
    objects: BTreeMap<ObjectKey, Version>,
}

fn omap_key(k: &ObjectKey) -> Bytes {
    let mut out = MISSING_PREFIX.to_vec();
    out.extend_from_slice(&k.to_bytes());
    Bytes::from(out)
}

fn encode_value(need: Version) -> Bytes {
    let mut out = vec![FORMAT];
    put_version(&mut out, need);
    Bytes::from(out)
}

impl MissingSet {
    /// The set held in a PG meta object's omap (other keys are ignored).
    pub fn load(omap: &BTreeMap<Bytes, Bytes>) -> Result<MissingSet, LogDecodeError> {
        let mut objects = BTreeMap::new();
        for (k, v) in omap {
            let Some(rest) = k.strip_prefix(MISSING_PREFIX) else {
                continue;
            };
            let key =
                ObjectKey::from_bytes(rest).ok_or(LogDecodeError("undecodable missing-set key"))?;
            let mut r = Reader(v);
            if r.u8()? != FORMAT {
                return Err(LogDecodeError("unknown format"));
            }
            let need = r.version()?;
            r.done()?;
            objects.insert(key, need);
        }
        Ok(MissingSet { objects })
    }

    /// A set from its objects.
    pub fn from_map(objects: BTreeMap<ObjectKey, Version>) -> MissingSet {
        MissingSet { objects }
    }

    /// The objects, in hash order.
    pub fn objects(&self) -> &BTreeMap<ObjectKey, Version> {
        &self.objects
    }

    /// Whether `key` is missing.
    pub fn contains(&self, key: &ObjectKey) -> bool {
        self.objects.contains_key(key)
    }

    /// How many objects are missing.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Nothing is missing.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Replaces the whole set, in memory and (through `txn`) on disk.
    pub fn replace(&mut self, new: MissingSet, coll: CollectionId, txn: &mut Transaction) {
        let meta = pg_meta_key();
        let old: Vec<Bytes> = self
            .objects
            .keys()
            .filter(|k| !new.objects.contains_key(*k))
            .map(omap_key)
            .collect();
        if !old.is_empty() {
            txn.omap_remove_keys(coll, meta.clone(), old);
        }
        let set: BTreeMap<Bytes, Bytes> = new
            .objects
            .iter()
            .map(|(k, v)| (omap_key(k), encode_value(*v)))
            .collect();
        if !set.is_empty() {
            txn.omap_set_keys(coll, meta, set);
        }
        *self = new;
    }

    /// The store ops that record `key` as recovered; [`MissingSet::remove`]
    /// updates memory once they are durable.
    pub fn remove_txn(key: &ObjectKey, coll: CollectionId, txn: &mut Transaction) {
        txn.omap_remove_keys(coll, pg_meta_key(), vec![omap_key(key)]);
    }

    /// Forgets `key` in memory (its removal was persisted with
    /// [`MissingSet::remove_txn`]).
    pub fn remove(&mut self, key: &ObjectKey) -> bool {
        self.objects.remove(key).is_some()
    }

    /// Wire form: one record per object (format, version, hash, name, snapshot).
    pub fn encode(&self) -> Vec<Vec<u8>> {
        self.objects
            .iter()
            .map(|(k, v)| {
                let mut out = Vec::with_capacity(21 + k.name.len());
                out.push(FORMAT);
                put_version(&mut out, *v);
                out.extend_from_slice(&k.hash.to_le_bytes());
                put_bytes(&mut out, &k.name);
                out.extend_from_slice(&k.snap.to_le_bytes());
                out
            })
            .collect()
    }

    /// Decodes [`MissingSet::encode`]'s output.
    pub fn decode(records: &[Vec<u8>]) -> Result<MissingSet, LogDecodeError> {
        let mut objects = BTreeMap::new();
        for b in records {
            let mut r = Reader(b);
            if r.u8()? != FORMAT {
                return Err(LogDecodeError("unknown format"));
            }
            let need = r.version()?;
            let hash = r.u32()?;
            let name = r.bytes()?.to_vec();
            let snap = r.u64()?;
            r.done()?;
            objects.insert(ObjectKey { hash, name, snap }, need);
        }
        Ok(MissingSet { objects })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_objectstore::{MemStore, ObjectStore};
    use std::ops::Bound;

    fn v(epoch: u32, v: u64) -> Version {
        Version { epoch, v }
    }

    fn stored(store: &MemStore, c: CollectionId) -> MissingSet {
        let omap = store
            .omap_range(
                &c,
                &pg_meta_key(),
                Bound::Unbounded,
                Bound::Unbounded,
                1 << 20,
            )
            .unwrap();
        MissingSet::load(&omap.into_iter().collect()).unwrap()
    }

    #[test]
    fn persisted_replaced_and_removed_objects_reload_the_same() {
        let store = MemStore::new(1 << 30);
        let c = CollectionId::new(1, 0);
        let mut t = Transaction::new();
        t.create_collection(c);
        store.apply_transaction(t).unwrap();
        let mut m = MissingSet::default();
        let first = MissingSet::from_map(BTreeMap::from([
            (ObjectKey::new(9, "b"), v(2, 5)),
            (ObjectKey::new(1, "a\0x"), v(3, 7)),
        ]));
        let mut t = Transaction::new();
        m.replace(first.clone(), c, &mut t);
        store.apply_transaction(t).unwrap();
        assert_eq!(stored(&store, c), first);
        // Hash order, as a backfill scans.
        let names: Vec<_> = m.objects().keys().map(|k| k.hash).collect();
        assert_eq!(names, vec![1, 9]);

        let second = MissingSet::from_map(BTreeMap::from([(ObjectKey::new(4, "c"), v(4, 1))]));
        let mut t = Transaction::new();
        m.replace(second.clone(), c, &mut t);
        store.apply_transaction(t).unwrap();
        assert_eq!(stored(&store, c), second);

        let mut t = Transaction::new();
        MissingSet::remove_txn(&ObjectKey::new(4, "c"), c, &mut t);
        store.apply_transaction(t).unwrap();
        assert!(m.remove(&ObjectKey::new(4, "c")));
        assert!(m.is_empty());
        assert_eq!(stored(&store, c), m);
    }

    #[test]
    fn wire_form_round_trips_and_rejects_garbage() {
        let m = MissingSet::from_map(BTreeMap::from([
            (ObjectKey::new(u32::MAX, vec![0u8, 1, 2]), v(1, 2)),
            (ObjectKey::new(0, ""), v(0, 0)),
        ]));
        assert_eq!(MissingSet::decode(&m.encode()).unwrap(), m);
        let mut bad = m.encode();
        bad[0].pop();
        assert!(MissingSet::decode(&bad).is_err());
        assert!(MissingSet::decode(&[vec![7u8; 30]]).is_err());
        assert!(MissingSet::decode(&[Vec::new()]).is_err());
    }
}

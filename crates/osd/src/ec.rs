//! One shard of an erasure-coded PG in the object store: how a planned
//! change ([`shoal_ec::ShardUpdate`]) becomes shard `i`'s transaction, and
//! how a shard's chunks are read back and checked.
//!
//! A shard object holds chunk `i` of every stripe of the object, end to
//! end, so its bytes for stripes `a..b` are `a × unit .. b × unit`. Every
//! shard records the object's logical size (xattr [`SIZE_XATTR`]) and the
//! crc32c of each of its chunks in its omap, keyed by the stripe number
//! (8 bytes, big-endian): a write rewrites the keys of the stripes it
//! touches and nothing else, a truncate drops the keys past the end, and
//! a read checks every chunk it returns (a stripe never written, a hole,
//! has no key and must read as zeros). Client omap is refused on EC
//! pools (as in Ceph), so a shard's omap is the OSD's own.

pub mod rollback;

use std::collections::BTreeMap;
use std::ops::{Bound, Range};

use bytes::Bytes;
use shoal_ec::{ShardUpdate, StripeLayout};
use shoal_objectstore::{CollectionId, Error as StoreError, ObjectKey, ObjectStore, Transaction};

/// The xattr holding an EC object's logical size (u64, little-endian).
pub const SIZE_XATTR: &str = "_ec_size";

/// What can go wrong reading a shard.
#[derive(Debug, thiserror::Error)]
pub enum ShardReadError {
    /// The store failed or the object is absent.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A chunk's bytes do not match its checksum, or are missing: the
    /// shard needs repair, and the stripe is read from the others.
    #[error("chunk of stripe {stripe} is damaged: {why}")]
    BadChunk {
        /// The stripe.
        stripe: u64,
        /// What was found.
        why: String,
    },
}

/// The omap key of stripe `s`'s chunk checksum.
pub fn crc_key(stripe: u64) -> Bytes {
    Bytes::copy_from_slice(&stripe.to_be_bytes())
}

/// Appends to `txn` what shard `shard` does for `update` on `key` in
/// `coll` (`existed`: whether the shard object exists now).
pub fn shard_txn(
    txn: &mut Transaction,
    coll: CollectionId,
    key: &ObjectKey,
    layout: StripeLayout,
    update: &ShardUpdate,
    shard: usize,
    existed: bool,
) {
    if update.remove_first && existed {
        txn.remove(coll, key.clone());
    }
    if !update.exists {
        if existed && !update.remove_first {
            txn.remove(coll, key.clone());
        }
        return;
    }
    txn.touch(coll, key.clone());
    let unit = u64::from(layout.unit);
    let drop_from = |txn: &mut Transaction, len: u64| {
        txn.omap_remove_range(coll, key.clone(), crc_key(len / unit), crc_key(u64::MAX));
    };
    if let Some(cut) = update.cut_to {
        txn.truncate(coll, key.clone(), cut);
        drop_from(txn, cut);
    }
    let mut crcs = BTreeMap::new();
    for (stripes, parts) in &update.writes {
        let Some(bytes) = parts.get(shard) else {
            continue;
        };
        let at = layout.shard_bytes(stripes).start;
        txn.write(coll, key.clone(), at, Bytes::copy_from_slice(bytes));
    }
    for (stripe, per_shard) in &update.crcs {
        if let Some(crc) = per_shard.get(shard) {
            crcs.insert(crc_key(*stripe), Bytes::copy_from_slice(&crc.to_le_bytes()));
        }
    }
    txn.truncate(coll, key.clone(), update.shard_len);
    drop_from(txn, update.shard_len);
    if !crcs.is_empty() {
        txn.omap_set_keys(coll, key.clone(), crcs);
    }
    txn.set_xattr(
        coll,
        key.clone(),
        SIZE_XATTR,
        Bytes::copy_from_slice(&update.size.to_le_bytes()),
    );
}

/// The logical size an EC object's shard records (`None`: absent here).
pub fn logical_size(
    store: &dyn ObjectStore,
    coll: &CollectionId,
    key: &ObjectKey,
) -> Result<Option<u64>, ShardReadError> {
    if !store.exists(coll, key)? {
        return Ok(None);
    }
    let raw = store.getxattr(coll, key, SIZE_XATTR)?.unwrap_or_default();
    let bytes: [u8; 8] = raw[..].try_into().map_err(|_| ShardReadError::BadChunk {
        stripe: 0,
        why: format!("size xattr of {} bytes", raw.len()),
    })?;
    Ok(Some(u64::from_le_bytes(bytes)))
}

/// Shard `coll`'s bytes of `stripes`, each chunk checked against its
/// checksum; a short shard or a chunk without its checksum is damage too.
pub fn read_chunks(
    store: &dyn ObjectStore,
    coll: &CollectionId,
    key: &ObjectKey,
    layout: StripeLayout,
    stripes: Range<u64>,
) -> Result<Bytes, ShardReadError> {
    let r = layout.shard_bytes(&stripes);
    let data = store.read(coll, key, r.start, r.end - r.start)?;
    let (start, end) = (crc_key(stripes.start), crc_key(stripes.end));
    let n = (stripes.end - stripes.start) as usize;
    let crcs = store.omap_range(
        coll,
        key,
        Bound::Included(&start[..]),
        Bound::Excluded(&end[..]),
        n,
    )?;
    let crcs: BTreeMap<u64, u32> = crcs
        .iter()
        .filter_map(|(k, v)| {
            let s = u64::from_be_bytes(k[..].try_into().ok()?);
            let c = u32::from_le_bytes(v[..].try_into().ok()?);
            Some((s, c))
        })
        .collect();
    let unit = layout.unit as usize;
    for (i, stripe) in stripes.enumerate() {
        let chunk = data
            .get(i * unit..(i + 1) * unit)
            .ok_or_else(|| ShardReadError::BadChunk {
                stripe,
                why: format!("the shard ends at byte {}", r.start + data.len() as u64),
            })?;
        // A stripe no change wrote (a hole left by a write past the end,
        // or a truncate that grew the object) has no checksum: it is zeros.
        let Some(want) = crcs.get(&stripe) else {
            if chunk.iter().any(|b| *b != 0) {
                return Err(ShardReadError::BadChunk {
                    stripe,
                    why: "no checksum recorded for a chunk that is not zeros".into(),
                });
            }
            continue;
        };
        let got = crc32c::crc32c(chunk);
        if got != *want {
            return Err(ShardReadError::BadChunk {
                stripe,
                why: format!("crc32c {got:#010x}, recorded {want:#010x}"),
            });
        }
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use shoal_ec::{Codec, DataOp, plan, stripes_to_read};
    use shoal_objectstore::MemStore;

    struct Pg {
        store: MemStore,
        layout: StripeLayout,
        codec: Codec,
        key: ObjectKey,
    }

    impl Pg {
        fn new(k: u32, m: u32, unit: u32) -> Pg {
            let layout = StripeLayout::new(k, m, unit);
            let store = MemStore::new(1 << 30);
            let mut t = Transaction::new();
            for i in 0..layout.shards() {
                t.create_collection(Self::coll(i));
            }
            store.apply_transaction(t).unwrap();
            Pg {
                store,
                layout,
                codec: Codec::new(layout).unwrap(),
                key: ObjectKey::new(1, b"obj".to_vec()),
            }
        }

        fn coll(i: usize) -> CollectionId {
            CollectionId::shard(3, 7, i as u8)
        }

        fn size(&self) -> Option<u64> {
            logical_size(&self.store, &Self::coll(0), &self.key).unwrap()
        }

        /// Decodes `stripes` from any k shards whose chunks check out,
        /// naming the shards that did not.
        fn read(&self, stripes: Range<u64>) -> (Vec<u8>, Vec<usize>) {
            let mut bad = Vec::new();
            let parts = (0..self.layout.shards())
                .map(|i| {
                    match read_chunks(
                        &self.store,
                        &Self::coll(i),
                        &self.key,
                        self.layout,
                        stripes.clone(),
                    ) {
                        Ok(b) => Some(b.to_vec()),
                        Err(ShardReadError::BadChunk { .. }) => {
                            bad.push(i);
                            None
                        }
                        Err(e) => panic!("{e}"),
                    }
                })
                .collect();
            (self.codec.decode(parts).unwrap(), bad)
        }

        fn change(&self, ops: &[DataOp]) {
            let old_size = self.size();
            let need = stripes_to_read(self.layout, old_size, ops).unwrap();
            let old = need.iter().map(|s| (*s, self.read(*s..*s + 1).0)).collect();
            let u = plan(&self.codec, old_size, ops, &old).unwrap();
            let mut t = Transaction::new();
            for i in 0..self.layout.shards() {
                shard_txn(
                    &mut t,
                    Self::coll(i),
                    &self.key,
                    self.layout,
                    &u,
                    i,
                    old_size.is_some(),
                );
            }
            self.store.apply_transaction(t).unwrap();
        }

        /// `change`, each shard's part stashed first as change `version`.
        fn change_stashed(&self, ops: &[DataOp], version: crate::log::Version) {
            let old_size = self.size();
            let need = stripes_to_read(self.layout, old_size, ops).unwrap();
            let old = need.iter().map(|s| (*s, self.read(*s..*s + 1).0)).collect();
            let u = plan(&self.codec, old_size, ops, &old).unwrap();
            for i in 0..self.layout.shards() {
                let mut t = Transaction::new();
                let c = Self::coll(i);
                shard_txn(&mut t, c, &self.key, self.layout, &u, i, old_size.is_some());
                let unit = u64::from(self.layout.unit);
                let t = rollback::stash(&self.store, c, &self.key, version, unit, t).unwrap();
                self.store.apply_transaction(t).unwrap();
            }
        }

        /// Every shard's object as the store holds it: data, xattrs, omap.
        #[allow(clippy::type_complexity)]
        fn shards(&self) -> Vec<Option<(Bytes, BTreeMap<String, Bytes>, Vec<(Bytes, Bytes)>)>> {
            (0..self.layout.shards())
                .map(|i| {
                    let c = Self::coll(i);
                    if !self.store.exists(&c, &self.key).unwrap() {
                        return None;
                    }
                    let size = self.store.stat(&c, &self.key).unwrap().size;
                    Some((
                        self.store.read(&c, &self.key, 0, size).unwrap(),
                        self.store.getxattrs(&c, &self.key).unwrap(),
                        self.store
                            .omap_range(&c, &self.key, Bound::Unbounded, Bound::Unbounded, 1 << 20)
                            .unwrap(),
                    ))
                })
                .collect()
        }

        /// Undoes `versions` (newest first) on every shard, one
        /// transaction per shard.
        fn undo(&self, versions: &[crate::log::Version]) {
            for i in 0..self.layout.shards() {
                let c = Self::coll(i);
                let mut state = rollback::Undoing::now(&self.store, &c, &self.key).unwrap();
                let mut t = Transaction::new();
                for v in versions {
                    rollback::undo(&self.store, c, &self.key, *v, &mut state, &mut t).unwrap();
                }
                self.store.apply_transaction(t).unwrap();
            }
        }

        fn logical(&self) -> Option<Vec<u8>> {
            let size = self.size()?;
            let stripes = 0..size.div_ceil(self.layout.width());
            let (mut d, bad) = self.read(stripes);
            assert!(bad.is_empty(), "damaged shards {bad:?}");
            d.truncate(size as usize);
            Some(d)
        }
    }

    #[test]
    fn shards_in_the_store_hold_checked_chunks_and_decode_to_the_object() {
        let pg = Pg::new(3, 2, 4096);
        let w = |offset, data: Vec<u8>| DataOp::Write {
            offset,
            data: data.into(),
        };
        let body: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        pg.change(&[w(0, body.clone())]);
        let mut want = body.clone();
        assert_eq!(pg.logical().unwrap(), want);
        // Every shard is whole stripes long and holds one checksum per chunk.
        let shard_len = pg.layout.shard_len(want.len() as u64);
        for i in 0..5 {
            let c = Pg::coll(i);
            assert_eq!(pg.store.stat(&c, &pg.key).unwrap().size, shard_len);
            let crcs = pg
                .store
                .omap_range(&c, &pg.key, Bound::Unbounded, Bound::Unbounded, 1000)
                .unwrap();
            assert_eq!(crcs.len() as u64, shard_len / 4096);
        }
        // A partial overwrite in the middle, an append, a shrink.
        pg.change(&[w(50_000, vec![0xab; 10])]);
        want[50_000..50_010].fill(0xab);
        assert_eq!(pg.logical().unwrap(), want);
        pg.change(&[w(want.len() as u64, vec![1; 5000])]);
        want.extend_from_slice(&[1; 5000]);
        assert_eq!(pg.logical().unwrap(), want);
        pg.change(&[DataOp::Truncate(30_001)]);
        want.truncate(30_001);
        assert_eq!(pg.logical().unwrap(), want);
        let shard_len = pg.layout.shard_len(30_001);
        for i in 0..5 {
            let c = Pg::coll(i);
            let crcs = pg
                .store
                .omap_range(&c, &pg.key, Bound::Unbounded, Bound::Unbounded, 1000)
                .unwrap();
            assert_eq!(crcs.len() as u64, shard_len / 4096, "shard {i}");
        }
        // Removed: gone from every shard.
        pg.change(&[DataOp::Remove]);
        assert_eq!(pg.logical(), None);
        for i in 0..5 {
            assert!(!pg.store.exists(&Pg::coll(i), &pg.key).unwrap());
        }
    }

    #[test]
    fn a_flipped_bit_is_caught_by_its_chunk_checksum_and_read_around() {
        let pg = Pg::new(2, 1, 4096);
        let body: Vec<u8> = (0..20_000u32).map(|i| (i % 253) as u8).collect();
        pg.change(&[DataOp::Write {
            offset: 0,
            data: body.clone().into(),
        }]);
        // Flip one bit in shard 1's second chunk, behind the checksum's back.
        let c = Pg::coll(1);
        let mut b = pg.store.read(&c, &pg.key, 4096, 1).unwrap().to_vec();
        b[0] ^= 0x04;
        let mut t = Transaction::new();
        t.write(c, pg.key.clone(), 4096, Bytes::from(b));
        pg.store.apply_transaction(t).unwrap();
        let e = read_chunks(&pg.store, &c, &pg.key, pg.layout, 0..3).unwrap_err();
        assert!(
            matches!(e, ShardReadError::BadChunk { stripe: 1, .. }),
            "{e}"
        );
        // Stripe 0 of that shard is still good.
        read_chunks(&pg.store, &c, &pg.key, pg.layout, 0..1).unwrap();
        // The object reads whole from the other two shards.
        let (mut d, bad) = pg.read(0..3);
        assert_eq!(bad, vec![1]);
        d.truncate(body.len());
        assert_eq!(d, body);
        // A shard cut short is damage too, not a panic.
        let mut t = Transaction::new();
        t.truncate(c, pg.key.clone(), 5000);
        pg.store.apply_transaction(t).unwrap();
        let e = read_chunks(&pg.store, &c, &pg.key, pg.layout, 0..3).unwrap_err();
        assert!(e.to_string().contains("the shard ends at byte"), "{e}");
    }

    fn v(n: u64) -> crate::log::Version {
        crate::log::Version { epoch: 5, v: n }
    }

    fn w(offset: u64, data: Vec<u8>) -> DataOp {
        DataOp::Write {
            offset,
            data: data.into(),
        }
    }

    /// Each kind of change, undone from its stash, leaves every shard
    /// exactly as it was (data, size, chunk checksums, xattrs), and the
    /// stash is gone.
    #[test]
    fn every_change_is_undone_by_its_stash() {
        let pg = Pg::new(2, 1, 4096);
        let body: Vec<u8> = (0..30_000u32).map(|i| (i * 13 + i / 97) as u8).collect();
        let changes: Vec<(&str, Vec<DataOp>)> = vec![
            ("create", vec![w(0, body.clone())]),
            (
                "overwrite inside stripes",
                vec![w(5_000, vec![0xee; 9_000])],
            ),
            ("append", vec![w(30_000, vec![7; 12_345])]),
            ("write past the end", vec![w(60_000, vec![9; 100])]),
            (
                "zero",
                vec![DataOp::Zero {
                    offset: 1_000,
                    len: 20_000,
                }],
            ),
            ("shrink", vec![DataOp::Truncate(4_000)]),
            ("grow", vec![DataOp::Truncate(50_000)]),
            ("replace", vec![DataOp::Remove, w(0, vec![3; 1_000])]),
            ("remove", vec![DataOp::Remove]),
            ("recreate", vec![w(100, vec![4; 10])]),
        ];
        let mut before = Vec::new();
        for (n, (what, ops)) in changes.iter().enumerate() {
            let was = (pg.shards(), pg.logical());
            pg.change_stashed(ops, v(n as u64 + 1));
            let after = (pg.shards(), pg.logical());
            // Undone alone, the change leaves the shards as they were…
            pg.undo(&[v(n as u64 + 1)]);
            assert_eq!((pg.shards(), pg.logical()), was, "{what} undone");
            // …and applied again, as the change makes them.
            pg.change_stashed(ops, v(n as u64 + 1));
            assert_eq!((pg.shards(), pg.logical()), after, "{what} again");
            before.push(was);
        }
        // Undone all together, newest first, in one transaction a shard.
        let all: Vec<_> = (1..=changes.len() as u64).rev().map(v).collect();
        pg.undo(&all);
        assert_eq!((pg.shards(), pg.logical()), before[0]);
        for i in 0..pg.layout.shards() {
            let left = rollback::list_stashes(&pg.store, Pg::coll(i)).unwrap();
            assert!(left.is_empty(), "shard {i} keeps {left:?}");
        }
    }

    /// Stashes list in version order, hidden from the PG's objects; one
    /// already dropped cannot be undone.
    #[test]
    fn stashes_list_in_version_order_and_a_dropped_one_cannot_be_undone() {
        let pg = Pg::new(2, 1, 4096);
        for n in [3, 1, 2] {
            pg.change_stashed(&[w(0, vec![n as u8; 100])], v(n));
        }
        let c = Pg::coll(0);
        let listed = rollback::list_stashes(&pg.store, c).unwrap();
        assert_eq!(
            listed.keys().copied().collect::<Vec<_>>(),
            vec![v(1), v(2), v(3)]
        );
        for (ver, keys) in &listed {
            assert_eq!(keys, &vec![rollback::stash_key(*ver, &pg.key)]);
            assert_eq!(rollback::stash_version(&keys[0]), Some(*ver));
            assert!(crate::object::split_key(&keys[0]).is_none(), "hidden");
        }
        assert_eq!(rollback::stash_version(&pg.key), None);
        let mut t = Transaction::new();
        t.remove(c, rollback::stash_key(v(3), &pg.key));
        pg.store.apply_transaction(t).unwrap();
        let mut state = rollback::Undoing::now(&pg.store, &c, &pg.key).unwrap();
        let r = rollback::undo(
            &pg.store,
            c,
            &pg.key,
            v(3),
            &mut state,
            &mut Transaction::new(),
        );
        assert!(matches!(r, Err(rollback::RollbackError::NoStash)), "{r:?}");
    }

    /// A damaged rollback record is an error naming it, never a panic.
    #[test]
    fn a_damaged_rollback_record_is_an_error() {
        let pg = Pg::new(2, 1, 4096);
        pg.change_stashed(&[w(0, vec![1; 10_000])], v(1));
        pg.change_stashed(&[w(100, vec![2; 100])], v(2));
        let c = Pg::coll(1);
        let s = rollback::stash_key(v(2), &pg.key);
        let good = pg
            .store
            .getxattr(&c, &s, rollback::RECORD_XATTR)
            .unwrap()
            .unwrap();
        let mut bad: Vec<Bytes> = (0..good.len()).map(|n| good.slice(..n)).collect();
        bad.push([&good[..], &[0u8]].concat().into());
        let mut wrong_format = good.to_vec();
        wrong_format[0] = 9;
        bad.push(wrong_format.into());
        for b in bad {
            let mut t = Transaction::new();
            t.set_xattr(c, s.clone(), rollback::RECORD_XATTR, b.clone());
            pg.store.apply_transaction(t).unwrap();
            let mut state = rollback::Undoing::now(&pg.store, &c, &pg.key).unwrap();
            let r = rollback::undo(
                &pg.store,
                c,
                &pg.key,
                v(2),
                &mut state,
                &mut Transaction::new(),
            );
            assert!(
                matches!(&r, Err(rollback::RollbackError::Store(m)) if m.contains("rollback record")),
                "{} bytes: {r:?}",
                b.len()
            );
        }
    }
}

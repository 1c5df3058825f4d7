//! The conformance suite: every backend must pass [`run_all`]. Each check panics with a
//! description on failure, so call it from a `#[test]`.

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::model::{Model, TxnGen};
use crate::store::ObjectStore;
use crate::transaction::Transaction;
use crate::types::{CollectionId, ObjectKey};

fn ok<T>(r: Result<T>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

const C: CollectionId = CollectionId::new(3, 1);

fn obj(name: &str) -> ObjectKey {
    ObjectKey::new(0x1234, name)
}

fn setup(s: &dyn ObjectStore) {
    let mut t = Transaction::new();
    t.create_collection(C);
    ok(s.apply_transaction(t), "create collection");
}

/// Run every check, each on a fresh store from `factory`.
pub fn run_all(factory: &mut dyn FnMut() -> Box<dyn ObjectStore>) {
    data_laws(&*factory());
    allocation(&*factory());
    atomicity(&*factory());
    listing(&*factory());
    clone_rename(&*factory());
    omap_xattrs(&*factory());
    collections(&*factory());
    split(&*factory());
    model_check(&*factory(), 0x5eed, 300);
}

/// Law 5: holes and growth read as zeros, short reads at the end.
pub fn data_laws(s: &dyn ObjectStore) {
    setup(s);
    let o = obj("a");
    let mut t = Transaction::new();
    t.write(C, o.clone(), 10_000, Bytes::from_static(b"hello"));
    ok(s.apply_transaction(t), "write");
    assert_eq!(ok(s.stat(&C, &o), "stat").size, 10_005);
    let all = ok(s.read(&C, &o, 0, u64::MAX), "read");
    assert_eq!(all.len(), 10_005);
    assert!(
        all[..10_000].iter().all(|b| *b == 0),
        "hole must read as zeros"
    );
    assert_eq!(&all[10_000..], b"hello");
    assert_eq!(
        ok(s.read(&C, &o, 10_003, 100), "read tail"),
        Bytes::from_static(b"lo")
    );
    assert!(ok(s.read(&C, &o, 20_000, 10), "read past end").is_empty());
    let mut t = Transaction::new();
    t.truncate(C, o.clone(), 10_002)
        .truncate(C, o.clone(), 12_000);
    ok(s.apply_transaction(t), "truncate");
    let all = ok(s.read(&C, &o, 0, u64::MAX), "read");
    assert_eq!(&all[10_000..10_002], b"he");
    assert!(
        all[10_002..].iter().all(|b| *b == 0),
        "truncated-away bytes must read as zeros"
    );
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let mut t = Transaction::new();
    t.write(C, o.clone(), 5, Bytes::from(big.clone()))
        .zero(C, o.clone(), 100, 5000);
    ok(s.apply_transaction(t), "big write");
    let got = ok(s.read(&C, &o, 5, 300_000), "read big");
    assert_eq!(&got[95 + 5000..], &big[95 + 5000..]);
    assert!(got[95..95 + 5000].iter().all(|b| *b == 0));
    assert!(matches!(
        s.read(&C, &obj("none"), 0, 1),
        Err(Error::ObjectNotFound(..))
    ));
}

/// The allocated ranges of an object whose data is `data` are ordered, apart,
/// within its size, and hold every nonzero byte; asked for a part, the store
/// answers within that part.
fn check_allocation(
    s: &dyn ObjectStore,
    c: &CollectionId,
    o: &ObjectKey,
    data: &[u8],
) -> std::result::Result<(), String> {
    let size = data.len() as u64;
    for (from, len) in [(0, size), (size / 3, size / 3 + 1)] {
        let ranges = s
            .allocated(c, o, from, len)
            .map_err(|e| format!("{c}/{o}: allocated: {e}"))?;
        let end = (from + len).min(size);
        let mut at = from;
        for (off, n) in &ranges {
            if *n == 0 || *off < at || off + n > end || (at > from && *off == at) {
                return Err(format!(
                    "{c}/{o}: allocated [{from}, +{len}) gave {ranges:?}: not ordered, apart and within"
                ));
            }
            if let Some(i) = data[at as usize..*off as usize]
                .iter()
                .position(|b| *b != 0)
            {
                return Err(format!(
                    "{c}/{o}: byte {} is data outside the allocated ranges {ranges:?}",
                    at as usize + i
                ));
            }
            at = off + n;
        }
        if end > at
            && let Some(i) = data[at as usize..end as usize].iter().position(|b| *b != 0)
        {
            return Err(format!(
                "{c}/{o}: byte {} is data past the allocated ranges {ranges:?}",
                at as usize + i
            ));
        }
    }
    Ok(())
}

/// Law 10: allocation. What was never written (or was zeroed or cut off) in
/// whole 4 KiB blocks is not reported allocated; what was written is.
pub fn allocation(s: &dyn ObjectStore) {
    setup(s);
    let o = obj("sparse");
    let mut t = Transaction::new();
    t.write(C, o.clone(), 0, Bytes::from(vec![7u8; 8192]))
        .write(C, o.clone(), 1 << 20, Bytes::from(vec![9u8; 4096]))
        .truncate(C, o.clone(), 2 << 20);
    ok(s.apply_transaction(t), "sparse write");
    let got = ok(s.allocated(&C, &o, 0, u64::MAX), "allocated");
    let total: u64 = got.iter().map(|(_, n)| n).sum();
    assert!(
        got.first().is_some_and(|(o, n)| *o == 0 && *n >= 8192),
        "the first 8 KiB were written: {got:?}"
    );
    assert!(
        got.iter()
            .any(|(o, n)| *o <= 1 << 20 && o + n >= (1 << 20) + 4096),
        "the block at 1 MiB was written: {got:?}"
    );
    assert!(total <= 64 << 10, "holes reported allocated: {got:?}");
    let mut t = Transaction::new();
    t.zero(C, o.clone(), 0, 8192);
    ok(s.apply_transaction(t), "zero");
    let got = ok(s.allocated(&C, &o, 0, 1 << 20), "allocated after zero");
    assert!(got.is_empty(), "zeroed blocks reported allocated: {got:?}");
    assert!(ok(s.allocated(&C, &o, 3 << 20, 10), "past the end").is_empty());
    assert!(matches!(
        s.allocated(&C, &obj("none"), 0, 1),
        Err(Error::ObjectNotFound(..))
    ));
}

/// Law 1: a failing op makes the whole transaction a no-op.
pub fn atomicity(s: &dyn ObjectStore) {
    setup(s);
    let mut t = Transaction::new();
    t.write(C, obj("a"), 0, Bytes::from_static(b"x"))
        .remove(C, obj("missing"));
    assert!(matches!(
        s.queue_transaction(t),
        Err(Error::ObjectNotFound(..))
    ));
    assert!(!ok(s.exists(&C, &obj("a")), "exists"));
    let mut t = Transaction::new();
    t.touch(C, obj("a")).remove(C, obj("a")).remove(C, obj("a"));
    assert!(s.queue_transaction(t).is_err());
    let mut t = Transaction::new();
    t.create_collection(C);
    assert!(matches!(
        s.queue_transaction(t),
        Err(Error::CollectionExists(_))
    ));
    let mut t = Transaction::new();
    t.touch(CollectionId::new(9, 9), obj("a"));
    assert!(matches!(
        s.queue_transaction(t),
        Err(Error::CollectionNotFound(_))
    ));
    let mut t = Transaction::new();
    t.write(C, obj("a"), u64::MAX - 2, Bytes::from_static(b"xyz"));
    assert!(matches!(
        s.queue_transaction(t),
        Err(Error::InvalidArgument(_))
    ));
    assert!(!ok(s.exists(&C, &obj("a")), "exists"));
    let mut t = Transaction::new();
    for _ in 0..=crate::types::TRANSACTION_OPS_MAX {
        t.touch(C, obj("a"));
    }
    assert!(matches!(
        s.queue_transaction(t),
        Err(Error::InvalidArgument(_))
    ));
    assert!(!ok(s.exists(&C, &obj("a")), "exists"));
}

/// Law 7: stable hash order and a cursor that visits everything once.
pub fn listing(s: &dyn ObjectStore) {
    setup(s);
    let mut want = Vec::new();
    let mut t = Transaction::new();
    for i in 0..50u32 {
        let k = ObjectKey::new(i.wrapping_mul(2_654_435_761) % 7, format!("n{i}"));
        t.touch(C, k.clone());
        want.push(k);
    }
    ok(s.apply_transaction(t), "touch 50");
    want.sort();
    let mut got = Vec::new();
    let mut cursor = None;
    loop {
        let page = ok(s.list_objects(&C, cursor.as_ref(), 7), "list");
        assert!(page.objects.len() <= 7);
        got.extend(page.objects);
        match page.next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    assert_eq!(got, want);
    assert!(
        got.windows(2)
            .all(|w| (w[0].hash, &w[0].name) < (w[1].hash, &w[1].name))
    );
}

/// Law 9: clones are independent; rename replaces the destination.
pub fn clone_rename(s: &dyn ObjectStore) {
    setup(s);
    let (a, b, d) = (obj("a"), obj("b"), obj("d"));
    let mut t = Transaction::new();
    t.write(C, a.clone(), 0, Bytes::from(vec![1u8; 100_000]))
        .set_xattr(C, a.clone(), "v", Bytes::from_static(b"1"))
        .omap_set_keys(
            C,
            a.clone(),
            BTreeMap::from([(Bytes::from_static(b"k"), Bytes::from_static(b"v"))]),
        )
        .write(C, d.clone(), 0, Bytes::from(vec![9u8; 200_000]))
        .clone_object(C, a.clone(), b.clone())
        .write(C, b.clone(), 10, Bytes::from_static(b"changed"));
    ok(s.apply_transaction(t), "clone");
    assert_eq!(
        ok(s.read(&C, &a, 10, 7), "read a"),
        Bytes::from(vec![1u8; 7])
    );
    assert_eq!(
        ok(s.read(&C, &b, 10, 7), "read b"),
        Bytes::from_static(b"changed")
    );
    assert_eq!(
        ok(s.getxattr(&C, &b, "v"), "xattr"),
        Some(Bytes::from_static(b"1"))
    );
    assert_eq!(
        ok(
            s.omap_get_values(&C, &b, &[Bytes::from_static(b"k")]),
            "omap"
        )
        .len(),
        1
    );
    let mut t = Transaction::new();
    t.rename(C, a.clone(), d.clone())
        .clone_range(C, b.clone(), a.clone(), 5, 12, 3);
    ok(s.apply_transaction(t), "rename");
    assert_eq!(ok(s.stat(&C, &d), "stat d").size, 100_000);
    assert_eq!(
        ok(s.read(&C, &a, 0, 100), "read a"),
        Bytes::from(b"\0\0\0\x01\x01\x01\x01\x01changed".to_vec())
    );
    assert!(ok(s.getxattrs(&C, &a), "xattrs").is_empty());
}

/// Omap and xattr reads.
pub fn omap_xattrs(s: &dyn ObjectStore) {
    setup(s);
    let o = obj("m");
    let kv: BTreeMap<Bytes, Bytes> = (0..20)
        .map(|i| {
            (
                Bytes::from(format!("k{i:02}")),
                Bytes::from(format!("v{i}")),
            )
        })
        .collect();
    let mut t = Transaction::new();
    t.omap_set_keys(C, o.clone(), kv)
        .omap_set_header(C, o.clone(), Bytes::from_static(b"hdr"))
        .omap_remove_range(
            C,
            o.clone(),
            Bytes::from_static(b"k05"),
            Bytes::from_static(b"k10"),
        )
        .omap_remove_keys(C, o.clone(), vec![Bytes::from_static(b"k15")])
        .set_xattr(C, o.clone(), "a", Bytes::from_static(b"1"))
        .set_xattr(C, o.clone(), "b", Bytes::from_static(b"2"))
        .remove_xattr(C, o.clone(), "a");
    ok(s.apply_transaction(t), "omap");
    let all = ok(
        s.omap_range(&C, &o, Bound::Unbounded, Bound::Unbounded, usize::MAX),
        "range",
    );
    assert_eq!(all.len(), 14);
    let page = ok(
        s.omap_range(&C, &o, Bound::Excluded(b"k04"), Bound::Excluded(b"k12"), 3),
        "page",
    );
    let keys: Vec<&[u8]> = page.iter().map(|(k, _)| &k[..]).collect();
    assert_eq!(keys, vec![&b"k10"[..], b"k11"]);
    assert!(
        ok(
            s.omap_range(&C, &o, Bound::Included(b"z"), Bound::Excluded(b"a"), 9),
            "inverted"
        )
        .is_empty()
    );
    assert_eq!(
        ok(s.omap_get_header(&C, &o), "header"),
        Bytes::from_static(b"hdr")
    );
    assert_eq!(
        ok(s.getxattrs(&C, &o), "xattrs").keys().collect::<Vec<_>>(),
        vec!["b"]
    );
    let mut t = Transaction::new();
    t.omap_clear(C, o.clone());
    ok(s.apply_transaction(t), "clear");
    assert!(ok(s.omap_get_header(&C, &o), "header").is_empty());
    assert!(
        ok(
            s.omap_range(&C, &o, Bound::Unbounded, Bound::Unbounded, 9),
            "range"
        )
        .is_empty()
    );
}

/// Removing a collection removes its objects; statfs counts.
pub fn collections(s: &dyn ObjectStore) {
    setup(s);
    let mut t = Transaction::new();
    t.write(C, obj("a"), 0, Bytes::from(vec![3u8; 50_000]))
        .touch(C, obj("b"));
    ok(s.apply_transaction(t), "fill");
    let fs = ok(s.statfs(), "statfs");
    assert_eq!(
        (fs.objects, fs.stored_bytes, fs.collections),
        (2, 50_000, 1)
    );
    assert!(fs.free_bytes <= fs.total_bytes);
    let space = ok(s.space(), "space");
    assert_eq!(
        (space.total_bytes, space.free_bytes),
        (fs.total_bytes, fs.free_bytes),
        "space() gives statfs's capacity and free space"
    );
    let mut t = Transaction::new();
    t.remove_collection(C).create_collection(C);
    ok(s.apply_transaction(t), "recreate");
    assert!(!ok(s.exists(&C, &obj("a")), "exists"));
    assert_eq!(ok(s.list_collections(), "colls"), vec![C]);
    let after = ok(s.statfs(), "statfs");
    assert_eq!(after.objects, 0);
    ok(s.flush(), "flush");
    let after = ok(s.statfs(), "statfs");
    assert!(
        after.free_bytes >= fs.free_bytes,
        "space of removed objects is freed"
    );
    assert_eq!(ok(s.space(), "space").free_bytes, after.free_bytes);
}

/// A PG split: the objects whose hash's low bits match move to the child
/// with their data, xattrs and omap, nothing is copied, the rest stay;
/// malformed splits are refused with no effect.
pub fn split(s: &dyn ObjectStore) {
    setup(s);
    let child = CollectionId::new(3, 5);
    let key = |hash: u32, name: &str| ObjectKey::new(hash, name);
    let mut t = Transaction::new();
    t.create_collection(child);
    // Low two bits: 0b01 moves, the others stay.
    for (i, hash) in [0x11u32, 0x15, 0x12, 0x20, 0xffff_fffd].iter().enumerate() {
        let o = key(*hash, &format!("o{i}"));
        t.write(C, o.clone(), 0, Bytes::from(vec![i as u8 + 1; 20_000]));
        t.set_xattrs(
            C,
            o.clone(),
            BTreeMap::from([("x".into(), Bytes::from(vec![i as u8]))]),
        );
        t.omap_set_keys(
            C,
            o,
            BTreeMap::from([(Bytes::from_static(b"k"), Bytes::from(vec![i as u8; 3]))]),
        );
    }
    // The child already holds an object of a key that moves: replaced.
    t.write(child, key(0x11, "o0"), 0, Bytes::from_static(b"old"));
    ok(s.apply_transaction(t), "fill");
    ok(s.flush(), "flush");
    let before = ok(s.statfs(), "statfs");

    for bad in [
        (C, 2, 1),     // into itself
        (child, 2, 4), // rem wider than bits
        (child, 33, 1),
        (CollectionId::new(3, 9), 2, 1), // no such collection
    ] {
        let mut t = Transaction::new();
        t.split_collection(C, bad.0, bad.1, bad.2);
        assert!(s.apply_transaction(t).is_err(), "split {bad:?} refused");
    }
    let mut t = Transaction::new();
    t.split_collection(C, child, 2, 1).touch(C, key(1, "after"));
    assert!(
        s.apply_transaction(t).is_err(),
        "an op on a split collection after the split is refused"
    );
    let listed = ok(s.list_objects(&C, None, 100), "list");
    assert_eq!(listed.objects.len(), 5, "nothing moved");

    let mut t = Transaction::new();
    t.split_collection(C, child, 2, 1);
    ok(s.apply_transaction(t), "split");
    ok(s.flush(), "flush");
    let names = |c: &CollectionId| -> Vec<Vec<u8>> {
        let mut n: Vec<Vec<u8>> = ok(s.list_objects(c, None, 100), "list")
            .objects
            .into_iter()
            .map(|k| k.name)
            .collect();
        n.sort();
        n
    };
    assert_eq!(
        names(&child),
        vec![b"o0".to_vec(), b"o1".to_vec(), b"o4".to_vec()]
    );
    assert_eq!(names(&C), vec![b"o2".to_vec(), b"o3".to_vec()]);
    for (i, hash) in [0x11u32, 0x15, 0x12, 0x20, 0xffff_fffd].iter().enumerate() {
        let o = key(*hash, &format!("o{i}"));
        let at = if hash & 3 == 1 { child } else { C };
        let other = if at == child { C } else { child };
        assert!(!ok(s.exists(&other, &o), "exists"), "o{i} in one place");
        let data = ok(s.read(&at, &o, 0, u64::MAX), "read");
        assert_eq!(data, Bytes::from(vec![i as u8 + 1; 20_000]), "o{i}'s data");
        let x = ok(s.getxattrs(&at, &o), "xattrs");
        assert_eq!(
            x.get("x"),
            Some(&Bytes::from(vec![i as u8])),
            "o{i}'s xattr"
        );
        let omap = ok(
            s.omap_range(&at, &o, Bound::Unbounded, Bound::Unbounded, 10),
            "omap",
        );
        assert_eq!(
            omap,
            vec![(Bytes::from_static(b"k"), Bytes::from(vec![i as u8; 3]))],
            "o{i}'s omap"
        );
    }
    let after = ok(s.statfs(), "statfs");
    assert_eq!(
        (after.objects, after.stored_bytes),
        (before.objects - 1, before.stored_bytes - 3),
        "the replaced object is gone, nothing else changes"
    );
    assert!(
        after.free_bytes >= before.free_bytes,
        "a split copies no data: {} free before, {} after",
        before.free_bytes,
        after.free_bytes
    );
}

/// Random transactions against the reference model; compares the full state every few.
pub fn model_check(s: &dyn ObjectStore, seed: u64, txns: usize) {
    let mut model = Model::default();
    let mut tickets = Vec::new();
    let mut g = TxnGen::new(seed);
    for i in 0..txns {
        let t = g.txn();
        let want = model.apply(&t);
        match s.queue_transaction(t.clone()) {
            Ok(ticket) => {
                assert!(want, "txn {i} should have failed: {t:?}");
                tickets.push(ticket);
            }
            Err(e) => assert!(
                !want,
                "txn {i} failed ({e}) but the model accepted it: {t:?}"
            ),
        }
        if i % 25 == 0 || i + 1 == txns {
            assert_matches_model(s, &model, &format!("after txn {i} (seed {seed:#x})"));
        }
    }
    for t in tickets {
        ok(t.wait(), "ticket");
    }
}

/// Compare everything a reader can see with `model`; panics with `ctx` on a difference.
pub fn assert_matches_model(s: &dyn ObjectStore, model: &Model, ctx: &str) {
    if let Err(e) = compare_with_model(s, model) {
        panic!("store differs from model {ctx}: {e}");
    }
}

/// Like [`assert_matches_model`] but returns the first difference.
pub fn compare_with_model(s: &dyn ObjectStore, model: &Model) -> std::result::Result<(), String> {
    compare_pools_with_model(s, model, |_| true)
}

/// Like [`compare_with_model`], limited to the collections whose pool passes `pools`
/// (for stores shared by several independent writers, one model per pool).
pub fn compare_pools_with_model(
    s: &dyn ObjectStore,
    model: &Model,
    pools: impl Fn(u64) -> bool,
) -> std::result::Result<(), String> {
    let mut colls = s.list_collections().map_err(|e| e.to_string())?;
    colls.retain(|c| pools(c.pool));
    let want: Vec<CollectionId> = model.colls.keys().copied().collect();
    if colls != want {
        return Err(format!("collections {colls:?} != {want:?}"));
    }
    for (c, objs) in &model.colls {
        let mut listed = Vec::new();
        let mut cursor = None;
        loop {
            let page = s
                .list_objects(c, cursor.as_ref(), 4)
                .map_err(|e| e.to_string())?;
            listed.extend(page.objects);
            match page.next {
                Some(n) => cursor = Some(n),
                None => break,
            }
        }
        let want: Vec<&ObjectKey> = objs.keys().collect();
        if listed.iter().collect::<Vec<_>>() != want {
            return Err(format!("objects of {c}: {listed:?} != {want:?}"));
        }
        for (o, m) in objs {
            let e = |e: Error| format!("{c}/{o}: {e}");
            let size = s.stat(c, o).map_err(e)?.size;
            if size != m.data.len() as u64 {
                return Err(format!("{c}/{o}: size {size} != {}", m.data.len()));
            }
            let data = s.read(c, o, 0, u64::MAX).map_err(e)?;
            if data[..] != m.data[..] {
                let at = data.iter().zip(&m.data).position(|(a, b)| a != b);
                return Err(format!("{c}/{o}: data differs at {at:?}"));
            }
            check_allocation(s, c, o, &m.data)?;
            if s.getxattrs(c, o).map_err(e)? != m.xattrs {
                return Err(format!("{c}/{o}: xattrs differ"));
            }
            if s.omap_get_header(c, o).map_err(e)? != m.omap_header {
                return Err(format!("{c}/{o}: omap header differs"));
            }
            let omap = s
                .omap_range(c, o, Bound::Unbounded, Bound::Unbounded, usize::MAX)
                .map_err(e)?;
            if omap.into_iter().collect::<BTreeMap<_, _>>() != m.omap {
                return Err(format!("{c}/{o}: omap differs"));
            }
        }
    }
    Ok(())
}

use super::*;
use prost::Message as _;
use shoal_objectstore::MemStore;

const C: CollectionId = CollectionId::new(1, 2);

fn store() -> MemStore {
    let s = MemStore::new(1 << 30);
    let mut t = Transaction::new();
    t.create_collection(C);
    s.apply_transaction(t).unwrap();
    s
}

/// An object with `data_bytes` of data, `omap` entries of `value_bytes`,
/// two xattrs and a header.
fn big(s: &MemStore, k: &ObjectKey, data_bytes: usize, omap: u32, value_bytes: usize) {
    let data: Vec<u8> = (0..data_bytes).map(|i| (i % 251) as u8).collect();
    let mut t = Transaction::new();
    t.write(C, k.clone(), 0, Bytes::from(data))
        .set_xattrs(
            C,
            k.clone(),
            BTreeMap::from([
                ("u.a".to_string(), Bytes::from_static(b"1")),
                ("s.meta".to_string(), Bytes::from_static(b"meta")),
            ]),
        )
        .omap_set_header(C, k.clone(), Bytes::from_static(b"hdr"));
    s.apply_transaction(t).unwrap();
    for chunk in (0..omap).collect::<Vec<_>>().chunks(1000) {
        let kv = chunk
            .iter()
            .map(|i| {
                let v = vec![(*i % 256) as u8; value_bytes];
                (Bytes::from(format!("key{i:08}")), Bytes::from(v))
            })
            .collect();
        let mut t = Transaction::new();
        t.omap_set_keys(C, k.clone(), kv);
        s.apply_transaction(t).unwrap();
    }
}

/// Everything of `k` in one value, for comparing copies.
fn whole(s: &MemStore, k: &ObjectKey) -> Option<(PgPush, Bytes)> {
    if !s.exists(&C, k).unwrap() {
        return None;
    }
    let limits = StepLimits {
        data_bytes_max: u64::MAX,
        omap_bytes_max: u64::MAX,
    };
    let (mut p, d) = read_step(s, C, k, &start(), limits).unwrap();
    p.before = None;
    p.after = None;
    Some((p, d))
}

/// Copies `k` from `a` to `b` step by step; checks every step's bounds and
/// that `b`'s object does not change until the last step. Returns the steps.
fn copy_all(a: &MemStore, b: &MemStore, k: &ObjectKey, limits: StepLimits) -> usize {
    let old = whole(b, k);
    let mut progress = start();
    for steps in 1.. {
        let (push, data) = read_step(a, C, k, &progress, limits).unwrap();
        assert!(data.len() as u64 <= limits.data_bytes_max);
        let omap: u64 = push
            .omap_keys
            .iter()
            .chain(&push.omap_values)
            .map(|v| v.len() as u64)
            .sum();
        assert!(
            omap <= limits.omap_bytes_max.max(70_000),
            "{omap} omap bytes"
        );
        assert!(
            push.encoded_len() < 1 << 20,
            "control part within the frame limit"
        );
        let (_, after) = bounds(&push);
        b.apply_transaction(install_step(b, C, &push, data).unwrap())
            .unwrap();
        if is_complete(&after) || !push.exists {
            return steps;
        }
        assert_eq!(whole(b, k), old, "a half-made copy is never visible");
        assert!(b.exists(&C, &temp_key(k)).unwrap());
        assert_ne!(after, progress, "every step moves the copy on");
        progress = after;
    }
    unreachable!()
}

#[test]
fn a_big_object_is_copied_in_bounded_steps_and_appears_whole_at_the_end() {
    let (a, b) = (store(), store());
    let k = ObjectKey::new(7, "big");
    // 5 MiB of data, 3000 omap values of 1 KiB (3 MB): neither fits a step.
    big(&a, &k, 5 << 20, 3000, 1024);
    // b holds a stale copy (with an xattr that must go) and lacks it.
    let mut t = Transaction::new();
    t.write(C, k.clone(), 0, Bytes::from_static(b"old"))
        .set_xattrs(
            C,
            k.clone(),
            BTreeMap::from([("u.stale".to_string(), Bytes::from_static(b"x"))]),
        );
    MissingSet::default().replace(
        MissingSet::from_map(BTreeMap::from([(k.clone(), Default::default())])),
        C,
        &mut t,
    );
    b.apply_transaction(t).unwrap();
    let limits = StepLimits {
        data_bytes_max: 1 << 20,
        omap_bytes_max: 64 << 10,
    };
    let steps = copy_all(&a, &b, &k, limits);
    // 3000 entries of ~1 KiB at 64 KiB a step: about 50 steps.
    assert!((45..=60).contains(&steps), "{steps} steps");
    assert_eq!(whole(&b, &k), whole(&a, &k));
    assert!(!b.exists(&C, &temp_key(&k)).unwrap());
    let meta = b
        .omap_range(
            &C,
            &crate::object::pg_meta_key(),
            Bound::Unbounded,
            Bound::Unbounded,
            100,
        )
        .unwrap();
    let meta: BTreeMap<Bytes, Bytes> = meta.into_iter().collect();
    let missing = MissingSet::load(&meta).unwrap();
    assert!(missing.is_empty(), "the last step empties the missing set");
}

#[test]
fn small_objects_take_one_step_and_absence_removes_the_copy() {
    let (a, b) = (store(), store());
    let k = ObjectKey::new(3, "small");
    big(&a, &k, 10_000, 20, 10);
    assert_eq!(copy_all(&a, &b, &k, StepLimits::default()), 1);
    assert_eq!(whole(&b, &k), whole(&a, &k));
    // An empty object: one step too.
    let e = ObjectKey::new(4, "empty");
    let mut t = Transaction::new();
    t.touch(C, e.clone());
    a.apply_transaction(t).unwrap();
    assert_eq!(copy_all(&a, &b, &e, StepLimits::default()), 1);
    assert_eq!(whole(&b, &e), whole(&a, &e));
    // Absent at the source: removed at the destination.
    let mut t = Transaction::new();
    t.remove(C, k.clone());
    a.apply_transaction(t).unwrap();
    assert_eq!(copy_all(&a, &b, &k, StepLimits::default()), 1);
    assert!(!b.exists(&C, &k).unwrap());
}

#[test]
fn one_omap_value_larger_than_a_step_still_moves() {
    let (a, b) = (store(), store());
    let k = ObjectKey::new(9, "fat");
    big(&a, &k, 0, 5, 60_000);
    let limits = StepLimits {
        data_bytes_max: 1024,
        omap_bytes_max: 1000,
    };
    // The first step carries the xattrs and header; then one value a step.
    assert_eq!(copy_all(&a, &b, &k, limits), 6);
    assert_eq!(whole(&b, &k), whole(&a, &k));
}

#[test]
fn an_interrupted_copy_starts_again_cleanly() {
    let (a, b) = (store(), store());
    let k = ObjectKey::new(5, "obj");
    big(&a, &k, 3 << 20, 100, 1000);
    let limits = StepLimits {
        data_bytes_max: 1 << 20,
        omap_bytes_max: 16 << 10,
    };
    // Two steps, then the copy is abandoned.
    let (p1, d1) = read_step(&a, C, &k, &start(), limits).unwrap();
    b.apply_transaction(install_step(&b, C, &p1, d1).unwrap())
        .unwrap();
    let after1 = bounds(&p1).1;
    let (p2, d2) = read_step(&a, C, &k, &after1, limits).unwrap();
    // A step that does not follow the temporary copy is refused.
    let (p3, d3) = read_step(&a, C, &k, &bounds(&p2).1, limits).unwrap();
    let e = install_step(&b, C, &p3, d3).unwrap_err();
    assert!(e.contains("out of step"), "{e}");
    // Data that does not match the step is refused.
    assert!(install_step(&b, C, &p2, Bytes::from_static(b"short")).is_err());
    b.apply_transaction(install_step(&b, C, &p2, d2).unwrap())
        .unwrap();
    // The PG's next start removes the half-made copy, and only that.
    let mut t = Transaction::new();
    t.touch(C, crate::object::pg_meta_key())
        .touch(C, ObjectKey::new(0, "hash-zero-client-object"));
    b.apply_transaction(t).unwrap();
    let mut t = Transaction::new();
    assert_eq!(remove_temps(&b, C, &mut t).unwrap(), 1);
    b.apply_transaction(t).unwrap();
    assert!(!b.exists(&C, &temp_key(&k)).unwrap());
    assert!(b.exists(&C, &crate::object::pg_meta_key()).unwrap());
    assert!(
        b.exists(&C, &ObjectKey::new(0, "hash-zero-client-object"))
            .unwrap()
    );
    // A step after that finds no temporary copy: refused.
    let (p3, d3) = read_step(&a, C, &k, &bounds(&p2).1, limits).unwrap();
    assert!(install_step(&b, C, &p3, d3).is_err());
    // A new copy from the first step completes, even over a leftover.
    let (p1, d1) = read_step(&a, C, &k, &start(), limits).unwrap();
    b.apply_transaction(install_step(&b, C, &p1, d1).unwrap())
        .unwrap();
    copy_all(&a, &b, &k, limits);
    assert_eq!(whole(&b, &k), whole(&a, &k));
    assert!(!b.exists(&C, &temp_key(&k)).unwrap());
}

#[test]
fn a_peer_asks_for_smaller_steps_but_never_larger_ones() {
    let ours = StepLimits::default();
    assert_eq!(ours.narrowed(0, 0), ours);
    assert_eq!(ours.narrowed(1 << 30, 1 << 30), ours);
    let small = ours.narrowed(1000, 100);
    assert_eq!((small.data_bytes_max, small.omap_bytes_max), (1000, 100));
}

#[test]
fn temporary_copies_list_before_client_objects_and_are_not_client_objects() {
    let k = ObjectKey::new(0, "a");
    let t = temp_key(&k);
    assert!(t < k && t > crate::object::pg_meta_key());
    assert!(crate::object::split_key(&t).is_none());
    assert!(is_temp(&t) && !is_temp(&k));
}

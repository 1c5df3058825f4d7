use super::*;

#[test]
fn data_ops_follow_ceph_semantics() {
    let mut e = env();
    assert_eq!(e.read().unwrap_err().code, OsdErrorCode::NotFound);
    let out = e
        .run(vec![with_data(OpCode::WriteFull, b"hello world")])
        .unwrap();
    assert_eq!(out.delta, delta(1, 11));
    assert!(out.mutates);
    assert_eq!(out.version, e.version);
    assert_eq!(e.read().unwrap(), Bytes::from_static(b"hello world"));
    let mut w = with_data(OpCode::Write, b"W");
    w.0.offset = 20;
    assert_eq!(e.run(vec![w]).unwrap().delta, delta(0, 10));
    assert_eq!(e.read().unwrap().len(), 21);
    e.run(vec![with_data(OpCode::Append, b"!")]).unwrap();
    e.run(vec![at(OpCode::Zero, 0, 1000)]).unwrap();
    let data = e.read().unwrap();
    assert_eq!(data.len(), 22, "zero does not extend");
    assert!(data.iter().all(|b| *b == 0));
    let out = e.run(vec![at(OpCode::Truncate, 3, 0)]).unwrap();
    assert_eq!(out.delta.bytes, 3 - 22);
    let out = e.run(vec![at(OpCode::Read, 1, 100)]).unwrap();
    assert_eq!(out.data[0].len(), 2);
    assert_eq!(out.results[0].data_len, 2);
    assert!(!out.mutates && out.txn.is_empty());
    assert_eq!(
        out.version,
        e.version - 1,
        "a read reports the stored version"
    );
    let out = e.run(vec![at(OpCode::Read, 100, 5)]).unwrap();
    assert!(out.data[0].is_empty(), "a read past the end is empty");
    let out = e.run(vec![sub(OpCode::Stat)]).unwrap();
    let r = &out.results[0];
    assert_eq!(
        (r.size, r.version),
        (3, e.version - 3),
        "stat shows the last change"
    );
    assert_eq!(r.mtime_ms, 1000 + r.version);
    let out = e.run(vec![sub(OpCode::Remove)]).unwrap();
    assert_eq!(out.delta, delta(-1, -3));
    assert_eq!(out.version, 0);
    assert_eq!(e.snapshot(), None);
    assert_eq!(e.code(vec![sub(OpCode::Remove)]), OsdErrorCode::NotFound);
    assert_eq!(e.code(vec![sub(OpCode::Stat)]), OsdErrorCode::NotFound);
    assert_eq!(e.code(vec![at(OpCode::Zero, 0, 1)]), OsdErrorCode::NotFound);
}

#[test]
fn writes_create_and_record_the_object_metadata() {
    let mut e = env();
    let out = e.run(vec![at(OpCode::Truncate, 5, 0)]).unwrap();
    assert_eq!(
        out.delta,
        delta(1, 5),
        "truncate of an absent object creates it"
    );
    assert_eq!(e.read().unwrap(), Bytes::from_static(&[0; 5]));
    assert_eq!(
        e.meta(),
        Some(ObjectMeta {
            version: 1,
            mtime_ms: 1001
        })
    );
    // An empty write creates nothing beyond the object and extends nothing.
    let mut empty = with_data(OpCode::Write, b"");
    empty.0.offset = 100;
    let out = e.run(vec![empty]).unwrap();
    assert_eq!(out.delta, delta(0, 0));
    assert_eq!(e.meta().unwrap().version, out.version);
    // WriteFull shrinks and Append follows the op's own size.
    let out = e
        .run(vec![
            with_data(OpCode::WriteFull, b"ab"),
            with_data(OpCode::Append, b"cd"),
        ])
        .unwrap();
    assert_eq!(out.delta, delta(0, -1));
    assert_eq!(e.read().unwrap(), Bytes::from_static(b"abcd"));
    // A non-exclusive create of an existing object is a change.
    let out = e.run(vec![sub(OpCode::Create)]).unwrap();
    assert_eq!(e.meta().unwrap().version, out.version);
    let out = e.run(vec![with_data(OpCode::WriteFull, b"")]).unwrap();
    assert_eq!(out.delta, delta(0, -4));
    assert!(e.snapshot().unwrap().data.is_empty());
}

#[test]
fn create_exclusive_and_guards() {
    let mut e = env();
    let mut excl = sub(OpCode::Create);
    excl.0.flags = OsdSubOp::CREATE_EXCLUSIVE;
    assert_eq!(
        e.code(vec![sub(OpCode::AssertExists)]),
        OsdErrorCode::NotFound
    );
    let mut av = sub(OpCode::AssertVersion);
    assert_eq!(e.code(vec![av.clone()]), OsdErrorCode::NotFound);
    let out = e.run(vec![excl.clone()]).unwrap();
    assert_eq!(out.delta, delta(1, 0));
    let before = e.snapshot();
    let err = e
        .run(vec![with_data(OpCode::Append, b"x"), excl])
        .unwrap_err();
    assert_eq!((err.code, err.failed_op), (OsdErrorCode::Exists, 1));
    assert_eq!(e.snapshot(), before);
    e.run(vec![sub(OpCode::AssertExists)]).unwrap();
    let v = e.run(vec![sub(OpCode::Stat)]).unwrap().results[0].version;
    av.0.version = v;
    e.run(vec![av.clone(), with_data(OpCode::Append, b"x")])
        .unwrap();
    let before = e.snapshot();
    let err = e
        .run(vec![with_data(OpCode::Append, b"y"), av])
        .unwrap_err();
    assert_eq!(
        (err.code, err.failed_op),
        (OsdErrorCode::VersionMismatch, 1)
    );
    assert_eq!(e.snapshot(), before);
}

#[test]
fn a_failed_guard_applies_nothing() {
    let mut e = env();
    e.run(vec![
        with_data(OpCode::WriteFull, b"v1"),
        named(OpCode::SetXattr, "gen", b"1"),
    ])
    .unwrap();
    let before = e.snapshot();
    let kv = omap_set(&[("k", "v")]);
    let guard = cmp("gen", CmpOp::Eq, b"2");
    let err = e
        .run(vec![with_data(OpCode::WriteFull, b"v2"), guard, kv.clone()])
        .unwrap_err();
    assert_eq!((err.code, err.failed_op), (OsdErrorCode::CompareFailed, 1));
    assert_eq!(e.snapshot(), before);
    // The guard holds: everything applies, in one change.
    let guard = cmp("gen", CmpOp::Eq, b"1");
    let out = e
        .run(vec![guard, with_data(OpCode::WriteFull, b"v2"), kv])
        .unwrap();
    assert_eq!(out.delta, delta(0, 0));
    let s = e.snapshot().unwrap();
    assert_eq!(s.data, Bytes::from_static(b"v2"));
    assert_eq!(s.omap.len(), 1);
    for (c, d) in [
        (CmpOp::Gt, &b"0"[..]),
        (CmpOp::Gte, b"1"),
        (CmpOp::Lt, b"2"),
        (CmpOp::Lte, b"1"),
        (CmpOp::Ne, b"x"),
    ] {
        e.run(vec![cmp("gen", c, d)]).unwrap();
    }
    assert_eq!(
        e.code(vec![cmp("gen", CmpOp::Gt, b"1")]),
        OsdErrorCode::CompareFailed
    );
    // An absent xattr compares as empty.
    e.run(vec![cmp("none", CmpOp::Eq, b"")]).unwrap();
    assert_eq!(
        e.code(vec![cmp("none", CmpOp::Eq, b"x")]),
        OsdErrorCode::CompareFailed
    );
    let mut bad = cmp("gen", CmpOp::Eq, b"1");
    bad.0.cmp = 77;
    assert_eq!(e.code(vec![bad]), OsdErrorCode::InvalidArgument);
    e.store.apply_transaction(remove_txn(&e)).unwrap();
    assert_eq!(
        e.code(vec![cmp("gen", CmpOp::Eq, b"")]),
        OsdErrorCode::NotFound
    );
}

#[test]
fn compound_write_xattr_and_omap_in_one_op() {
    let mut e = env();
    let out = e
        .run(vec![
            sub(OpCode::Create),
            with_data(OpCode::Write, b"data"),
            named(OpCode::SetXattr, "x", b"1"),
            omap_set(&[("k1", "v1"), ("k2", "v2")]),
            with_data(OpCode::OmapSetHeader, b"h"),
            sub(OpCode::Stat),
        ])
        .unwrap();
    assert_eq!(out.results[5].size, 4, "stat follows the op's size");
    assert_eq!(out.delta, delta(1, 4));
    let s = e.snapshot().unwrap();
    assert_eq!(s.data, Bytes::from_static(b"data"));
    assert_eq!(s.xattrs.get("u.x"), Some(&Bytes::from_static(b"1")));
    assert_eq!(s.omap.len(), 2);
    assert_eq!(e.meta().unwrap().version, out.version);
    // Reads mixed with writes: payloads stay with their own sub-operation.
    let out = e
        .run(vec![
            with_data(OpCode::Read, b"ignored"),
            named(OpCode::GetXattr, "x", b""),
            with_data(OpCode::Append, b"!"),
            sub(OpCode::Read),
        ])
        .unwrap();
    assert_eq!(
        out.data,
        vec![
            Bytes::from_static(b"data"),
            Bytes::from_static(b"1"),
            Bytes::from_static(b"data")
        ]
    );
    assert_eq!(e.read().unwrap(), Bytes::from_static(b"data!"));
}

#[test]
fn remove_then_write_in_one_op_recreates() {
    let mut e = env();
    e.run(vec![
        with_data(OpCode::WriteFull, b"old data"),
        named(OpCode::SetXattr, "a", b"1"),
    ])
    .unwrap();
    let before = e.snapshot();
    let err = e
        .run(vec![sub(OpCode::Remove), sub(OpCode::Read)])
        .unwrap_err();
    assert_eq!((err.code, err.failed_op), (OsdErrorCode::NotFound, 1));
    assert_eq!(e.snapshot(), before);
    let out = e
        .run(vec![
            sub(OpCode::Remove),
            with_data(OpCode::Append, b"new"),
            sub(OpCode::GetXattrs),
        ])
        .unwrap();
    assert_eq!(out.delta, delta(0, 3 - 8));
    assert!(
        out.results[2].names.is_empty(),
        "xattrs went with the remove"
    );
    let s = e.snapshot().unwrap();
    assert_eq!(s.data, Bytes::from_static(b"new"));
    assert!(!s.xattrs.contains_key("u.a"));
    // Created and removed in one op: absent before and after.
    e.store.apply_transaction(remove_txn(&e)).unwrap();
    let out = e
        .run(vec![
            with_data(OpCode::WriteFull, b"tmp"),
            sub(OpCode::Remove),
        ])
        .unwrap();
    assert_eq!((out.delta, out.version), (delta(0, 0), 0));
    assert_eq!(e.snapshot(), None);
}

/// A read from a store that gives the crc of what it returns (BlockStore)
/// passes it on as the reply's checksum; anything else leaves it to be
/// computed.
#[test]
fn a_single_read_passes_on_the_stores_crc() {
    use shoal_objectstore::BlockStore;
    use shoal_objectstore::block::fault::{FaultController, MemDevice};
    let ctl = FaultController::new(0, 0);
    let (dev, meta) = (
        MemDevice::new(vec![0u8; 16 << 20], ctl.clone()),
        MemDevice::new(Vec::new(), ctl),
    );
    BlockStore::mkfs_on(dev.clone(), meta.clone()).unwrap();
    let store = BlockStore::open_on(dev, meta).unwrap();
    let e = env();
    let run = |store: &dyn ObjectStore, ops: Vec<(OsdSubOp, Vec<u8>)>| {
        let data: Vec<u8> = ops.iter().flat_map(|(_, d)| d.clone()).collect();
        let ops: Vec<OsdSubOp> = ops.into_iter().map(|(o, _)| o).collect();
        let out = execute(ExecInput {
            store,
            coll: e.coll,
            key: e.key.clone(),
            ops: &ops,
            data: Bytes::from(data),
            new_version: 99,
            mtime_ms: 1,
            snaps: Snaps::default(),
        })
        .unwrap();
        store.apply_transaction(out.txn.clone()).unwrap();
        out
    };
    let mut t = Transaction::new();
    t.create_collection(e.coll);
    store.apply_transaction(t).unwrap();
    let object: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    for s in [&store as &dyn ObjectStore, &e.store] {
        run(s, vec![with_data(OpCode::WriteFull, &object)]);
    }
    let crc = |out: &ExecOutcome| {
        let all: Vec<u8> = out.data.iter().flat_map(|b| b.to_vec()).collect();
        crc32c::crc32c(&all)
    };
    for ops in [
        vec![sub(OpCode::Read)],
        vec![at(OpCode::Read, 4095, 70_001)],
        vec![sub(OpCode::Stat), at(OpCode::Read, 1, 2)],
        vec![at(OpCode::Read, 1_000_000, 5), at(OpCode::Read, 7, 9)],
    ] {
        let out = run(&store, ops.clone());
        assert_eq!(out.data_crc, Some(crc(&out)), "{ops:?}");
        assert_eq!(run(&e.store, ops).data_crc, None, "MemStore gives none");
    }
    // Two chunks with data: computed by the messenger; so is a read with
    // a sparse read's data beside it, or a sparse read alone.
    for ops in [
        vec![at(OpCode::Read, 0, 10), at(OpCode::Read, 5, 10)],
        vec![at(OpCode::Read, 0, 10), at(OpCode::SparseRead, 5, 10)],
        vec![at(OpCode::SparseRead, 5, 10), at(OpCode::Read, 0, 10)],
        vec![at(OpCode::SparseRead, 5, 10)],
    ] {
        assert_eq!(run(&store, ops.clone()).data_crc, None, "{ops:?}");
    }
    // Nothing read: the crc of no data.
    assert_eq!(run(&store, vec![sub(OpCode::Stat)]).data_crc, Some(0));
}

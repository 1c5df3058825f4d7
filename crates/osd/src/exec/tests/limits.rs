use super::*;

#[test]
fn malformed_ops_are_refused_before_the_store_is_read() {
    let code =
        |ops: &[OsdSubOp], n| validate(ops, n).map_or_else(|e| e.code, |()| OsdErrorCode::Ok);
    let inval = OsdErrorCode::InvalidArgument;
    let bad_len = OsdSubOp {
        data_len: 10,
        ..OsdSubOp::new(OpCode::Write)
    };
    assert_eq!(code(std::slice::from_ref(&bad_len), 3), inval);
    assert_eq!(code(&[bad_len], 10), OsdErrorCode::Ok);
    let unknown = OsdSubOp {
        code: 999,
        ..OsdSubOp::default()
    };
    let err = validate(&[OsdSubOp::new(OpCode::Stat), unknown], 0).unwrap_err();
    assert_eq!((err.code, err.failed_op), (inval, 1));
    assert_eq!(code(&[], 0), inval);
    let many = vec![OsdSubOp::new(OpCode::Stat); SUB_OPS_MAX + 1];
    assert_eq!(code(&many, 0), OsdErrorCode::TooLarge);
    let unpaired = OsdSubOp {
        keys: vec![b"k".to_vec()],
        ..OsdSubOp::new(OpCode::OmapSetVals)
    };
    assert_eq!(code(&[unpaired], 0), inval);
    let keys = OsdSubOp {
        keys: vec![Vec::new(); OMAP_KEYS_MAX / 2 + 1],
        ..OsdSubOp::new(OpCode::OmapRmKeys)
    };
    assert_eq!(code(std::slice::from_ref(&keys), 0), OsdErrorCode::Ok);
    assert_eq!(
        code(&[keys.clone(), keys], 0),
        OsdErrorCode::TooLarge,
        "keys count per op"
    );
    assert_eq!(code(&[OsdSubOp::new(OpCode::GetXattr)], 0), inval);
    let long = OsdSubOp {
        name: "x".repeat(XATTR_NAME_MAX + 1),
        ..OsdSubOp::new(OpCode::SetXattr)
    };
    assert_eq!(code(&[long], 0), inval);
    let huge = |n| OsdSubOp {
        data_len: n,
        ..OsdSubOp::new(OpCode::Write)
    };
    assert_eq!(
        code(&[huge(2), huge(u64::MAX)], 1),
        inval,
        "data lengths overflow"
    );
    assert_eq!(
        code(&[huge(OP_DATA_BYTES_MAX + 1)], 0),
        OsdErrorCode::TooLarge
    );
    // execute validates too: nothing is read from a store that lacks the collection.
    let mut e = env();
    e.coll = CollectionId::new(9, 9);
    let mut bad = with_data(OpCode::Write, b"x");
    bad.0.data_len = 5;
    assert_eq!(e.code(vec![bad]), inval);
    assert_eq!(
        e.code(vec![sub(OpCode::Stat)]),
        OsdErrorCode::NotFound,
        "missing collection"
    );
}

#[test]
fn offsets_that_overflow_or_pass_the_size_limit() {
    let mut e = env();
    e.run(vec![with_data(OpCode::WriteFull, b"abc")]).unwrap();
    let before = e.snapshot();
    let mut far = with_data(OpCode::Write, b"x");
    far.0.offset = u64::MAX;
    assert_eq!(e.code(vec![far]), OsdErrorCode::InvalidArgument);
    let mut past = with_data(OpCode::Write, b"x");
    past.0.offset = OBJECT_SIZE_MAX;
    assert_eq!(e.code(vec![past]), OsdErrorCode::TooLarge);
    assert_eq!(
        e.code(vec![at(OpCode::Truncate, OBJECT_SIZE_MAX + 1, 0)]),
        OsdErrorCode::TooLarge
    );
    assert_eq!(
        e.code(vec![at(OpCode::Zero, u64::MAX, 2)]),
        OsdErrorCode::InvalidArgument
    );
    assert_eq!(
        e.code(vec![at(OpCode::Zero, 1, OBJECT_SIZE_MAX)]),
        OsdErrorCode::TooLarge
    );
    assert_eq!(
        e.code(vec![at(OpCode::Read, u64::MAX, 2)]),
        OsdErrorCode::InvalidArgument
    );
    let mut grow = at(OpCode::Truncate, OBJECT_SIZE_MAX - 1, 0);
    let append = with_data(OpCode::Append, b"xy");
    let err = e.run(vec![grow.clone(), append]).unwrap_err();
    assert_eq!(
        (err.code, err.failed_op),
        (OsdErrorCode::TooLarge, 1),
        "append past the limit"
    );
    assert_eq!(e.snapshot(), before);
    grow.0.offset = 2;
    e.run(vec![grow]).unwrap();
    assert_eq!(e.read().unwrap(), Bytes::from_static(b"ab"));
}

#[test]
fn store_errors_map_to_wire_codes_and_name_the_sub_operation() {
    use shoal_objectstore::Error as E;
    let c = CollectionId::new(1, 0);
    let k = ObjectKey::new(0, "o");
    let cases = [
        (E::ObjectNotFound(c, k), OsdErrorCode::NotFound),
        (E::CollectionNotFound(c), OsdErrorCode::NotFound),
        (
            E::NoSpace {
                needed_bytes: 1,
                free_bytes: 0,
            },
            OsdErrorCode::NoSpace,
        ),
        (
            E::InvalidArgument("x".into()),
            OsdErrorCode::InvalidArgument,
        ),
        (E::Checksum { device_offset: 0 }, OsdErrorCode::Io),
        (E::Poisoned("x".into()), OsdErrorCode::Io),
        (E::Corrupt("x".into()), OsdErrorCode::Io),
        (E::CollectionExists(c), OsdErrorCode::Internal),
    ];
    for (e, want) in cases {
        assert_eq!(store_error_code(&e), want, "{e}");
    }
    let mut e = env();
    e.run(vec![with_data(OpCode::WriteFull, b"abc")]).unwrap();
    let store = BadDisk(e.store);
    let ops = [OsdSubOp::new(OpCode::Stat), OsdSubOp::new(OpCode::Read)];
    let err = execute(ExecInput {
        store: &store,
        coll: e.coll,
        key: e.key.clone(),
        ops: &ops,
        data: Bytes::new(),
        new_version: 9,
        mtime_ms: 0,
        snaps: Snaps::default(),
    })
    .unwrap_err();
    assert_eq!((err.code, err.failed_op), (OsdErrorCode::Io, 1));
}

/// A store whose data reads fail their checksum.
#[derive(Debug)]
struct BadDisk(MemStore);

impl ObjectStore for BadDisk {
    fn queue_transaction(&self, txn: Transaction) -> shoal_objectstore::Result<CommitTicket> {
        self.0.queue_transaction(txn)
    }
    fn flush(&self) -> shoal_objectstore::Result<()> {
        self.0.flush()
    }
    fn list_collections(&self) -> shoal_objectstore::Result<Vec<CollectionId>> {
        self.0.list_collections()
    }
    fn collection_exists(&self, c: &CollectionId) -> shoal_objectstore::Result<bool> {
        self.0.collection_exists(c)
    }
    fn list_objects(
        &self,
        c: &CollectionId,
        start: Option<&ObjectKey>,
        max: usize,
    ) -> shoal_objectstore::Result<Listing> {
        self.0.list_objects(c, start, max)
    }
    fn exists(&self, c: &CollectionId, o: &ObjectKey) -> shoal_objectstore::Result<bool> {
        self.0.exists(c, o)
    }
    fn stat(&self, c: &CollectionId, o: &ObjectKey) -> shoal_objectstore::Result<ObjectStat> {
        self.0.stat(c, o)
    }
    fn read(
        &self,
        _: &CollectionId,
        _: &ObjectKey,
        _: u64,
        _: u64,
    ) -> shoal_objectstore::Result<Bytes> {
        Err(shoal_objectstore::Error::Checksum {
            device_offset: 4096,
        })
    }
    fn getxattr(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        name: &str,
    ) -> shoal_objectstore::Result<Option<Bytes>> {
        self.0.getxattr(c, o, name)
    }
    fn getxattrs(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
    ) -> shoal_objectstore::Result<BTreeMap<String, Bytes>> {
        self.0.getxattrs(c, o)
    }
    fn omap_get_header(&self, c: &CollectionId, o: &ObjectKey) -> shoal_objectstore::Result<Bytes> {
        self.0.omap_get_header(c, o)
    }
    fn omap_get_values(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        keys: &[Bytes],
    ) -> shoal_objectstore::Result<BTreeMap<Bytes, Bytes>> {
        self.0.omap_get_values(c, o, keys)
    }
    fn omap_range(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        max: usize,
    ) -> shoal_objectstore::Result<Vec<(Bytes, Bytes)>> {
        self.0.omap_range(c, o, start, end, max)
    }
    fn statfs(&self) -> shoal_objectstore::Result<StatFs> {
        self.0.statfs()
    }
}

#[test]
fn is_mutating_knows_the_writes() {
    assert!(!is_mutating(&[
        OsdSubOp::new(OpCode::Read),
        OsdSubOp::new(OpCode::OmapGetVals)
    ]));
    assert!(is_mutating(&[
        OsdSubOp::new(OpCode::Read),
        OsdSubOp::new(OpCode::OmapClear)
    ]));
    assert!(!is_mutating(&[OsdSubOp {
        code: 999,
        ..OsdSubOp::default()
    }]));
}

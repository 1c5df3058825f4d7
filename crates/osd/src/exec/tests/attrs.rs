use super::*;

#[test]
fn xattrs_follow_the_op_and_hide_the_osd_metadata() {
    let mut e = env();
    assert_eq!(
        e.code(vec![named(OpCode::GetXattr, "a", b"")]),
        OsdErrorCode::NotFound
    );
    assert_eq!(e.code(vec![sub(OpCode::GetXattrs)]), OsdErrorCode::NotFound);
    assert_eq!(
        e.code(vec![named(OpCode::RmXattr, "a", b"")]),
        OsdErrorCode::NotFound
    );
    let out = e
        .run(vec![
            named(OpCode::SetXattr, "a", b"A"),
            named(OpCode::SetXattr, "b", b"B"),
            cmp("b", CmpOp::Eq, b"B"),
            named(OpCode::GetXattr, "a", b""),
        ])
        .unwrap();
    assert_eq!(out.delta, delta(1, 0), "setxattr creates the object");
    assert_eq!(out.data, vec![Bytes::from_static(b"A")]);
    let out = e.run(vec![sub(OpCode::GetXattrs)]).unwrap();
    assert_eq!(out.results[0].names, vec!["a", "b"]);
    assert_eq!(out.results[0].values, vec![b"A".to_vec(), b"B".to_vec()]);
    assert!(e.snapshot().unwrap().xattrs.contains_key("u.a"));
    let rm = named(OpCode::RmXattr, "a", b"");
    let err = e
        .run(vec![rm.clone(), named(OpCode::GetXattr, "a", b"")])
        .unwrap_err();
    assert_eq!(
        (err.code, err.failed_op),
        (OsdErrorCode::NoData, 1),
        "get after rm in one op"
    );
    let out = e
        .run(vec![
            rm.clone(),
            named(OpCode::SetXattr, "c", b"C"),
            sub(OpCode::GetXattrs),
        ])
        .unwrap();
    assert_eq!(out.results[2].names, vec!["b", "c"]);
    assert_eq!(e.code(vec![rm]), OsdErrorCode::NoData);
    // The OSD's metadata xattr is no user xattr.
    let meta = META_XATTR.strip_prefix(crate::object::USER_XATTR_PREFIX);
    assert!(meta.is_none());
    let out = e.run(vec![named(OpCode::GetXattr, "b", b"")]).unwrap();
    assert_eq!(out.data[0], Bytes::from_static(b"B"));
}

#[test]
fn omap_listing_pages_with_prefix_and_more() {
    let mut e = env();
    let set = omap_set(&[
        ("a1", "va1"),
        ("a2", "va2"),
        ("a3", "va3"),
        ("b1", "vb1"),
        ("b2", "vb2"),
    ]);
    e.run(vec![set, with_data(OpCode::OmapSetHeader, b"hdr")])
        .unwrap();
    let list = |prefix: &str, after: &str, max: u32, values: bool| {
        let mut s = sub(if values {
            OpCode::OmapGetVals
        } else {
            OpCode::OmapGetKeys
        });
        s.0.prefix = prefix.as_bytes().to_vec();
        s.0.start_after = after.as_bytes().to_vec();
        s.0.max = max;
        s
    };
    let keys = |r: &OsdSubOpResult| -> Vec<String> {
        r.keys
            .iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect()
    };
    let r = e
        .run(vec![list("a", "", 2, true)])
        .unwrap()
        .results
        .remove(0);
    assert_eq!((keys(&r), r.more), (vec!["a1".into(), "a2".into()], true));
    assert_eq!(r.values[1], b"va2".to_vec());
    let r = e
        .run(vec![list("a", "a2", 2, true)])
        .unwrap()
        .results
        .remove(0);
    assert_eq!(
        (keys(&r), r.more),
        (vec!["a3".into()], false),
        "b keys do not count as more"
    );
    let r = e
        .run(vec![list("a", "a3", 2, true)])
        .unwrap()
        .results
        .remove(0);
    assert!(r.keys.is_empty() && !r.more);
    let r = e
        .run(vec![list("b", "a9", 0, false)])
        .unwrap()
        .results
        .remove(0);
    assert_eq!(keys(&r), vec!["b1", "b2"], "start_after before the prefix");
    assert!(r.values.is_empty());
    let r = e
        .run(vec![list("", "a3", 1, false)])
        .unwrap()
        .results
        .remove(0);
    assert_eq!((keys(&r), r.more), (vec!["b1".into()], true));
    let r = e
        .run(vec![list("", "zz", 0, true)])
        .unwrap()
        .results
        .remove(0);
    assert!(r.keys.is_empty() && !r.more);
    let r = e
        .run(vec![list("c", "", 0, true)])
        .unwrap()
        .results
        .remove(0);
    assert!(r.keys.is_empty());
    let mut by = sub(OpCode::OmapGetValsByKeys);
    by.0.keys = vec![b"b2".to_vec(), b"zz".to_vec()];
    let r = e.run(vec![by]).unwrap().results.remove(0);
    assert_eq!(
        (keys(&r), r.values.clone()),
        (vec!["b2".into()], vec![b"vb2".to_vec()])
    );
    let mut rm = sub(OpCode::OmapRmKeys);
    rm.0.keys = vec![b"a1".to_vec(), b"nope".to_vec()];
    // Omap reads in the op see the omap stored before it.
    let r = e
        .run(vec![rm, list("a", "", 1, false)])
        .unwrap()
        .results
        .remove(1);
    assert_eq!(keys(&r), vec!["a1"]);
    let r = e
        .run(vec![list("a", "", 1, false)])
        .unwrap()
        .results
        .remove(0);
    assert_eq!(keys(&r), vec!["a2"]);
    let out = e.run(vec![sub(OpCode::OmapGetHeader)]).unwrap();
    assert_eq!(out.data[0], Bytes::from_static(b"hdr"));
    e.run(vec![sub(OpCode::OmapClear)]).unwrap();
    let s = e.snapshot().unwrap();
    assert!(s.omap.is_empty() && s.header.is_empty());
}

#[test]
fn omap_on_absent_or_removed_objects() {
    let mut e = env();
    for code in [
        OpCode::OmapGetVals,
        OpCode::OmapGetKeys,
        OpCode::OmapGetValsByKeys,
        OpCode::OmapGetHeader,
        OpCode::OmapRmKeys,
        OpCode::OmapClear,
    ] {
        assert_eq!(e.code(vec![sub(code)]), OsdErrorCode::NotFound, "{code:?}");
    }
    let out = e
        .run(vec![omap_set(&[("k", "v")]), sub(OpCode::OmapGetKeys)])
        .unwrap();
    assert_eq!(out.delta, delta(1, 0), "omap set creates the object");
    assert!(
        out.results[1].keys.is_empty(),
        "created by this op: nothing stored yet"
    );
    let err = e
        .run(vec![sub(OpCode::Remove), sub(OpCode::OmapGetVals)])
        .unwrap_err();
    assert_eq!((err.code, err.failed_op), (OsdErrorCode::NotFound, 1));
    let out = e
        .run(vec![
            sub(OpCode::Remove),
            with_data(OpCode::OmapSetHeader, b"h"),
            sub(OpCode::OmapGetVals),
        ])
        .unwrap();
    assert!(
        out.results[2].keys.is_empty(),
        "the old omap went with the remove"
    );
    let s = e.snapshot().unwrap();
    assert!(s.omap.is_empty());
    assert_eq!(s.header, Bytes::from_static(b"h"));
}

//! Self-managed snapshots in execution: the first write after a snapshot
//! clones the object; reads at a snapshot find the head or the clone that
//! stands for it, or nothing if the object did not exist then; a removed
//! head leaves its snapset on the snapdir while clones remain.

use super::*;

fn write(e: &mut Env, d: &[u8]) {
    e.run(vec![with_data(OpCode::WriteFull, d)]).unwrap();
}

fn read_at(e: &mut Env, snap: u64) -> Result<Vec<u8>, OsdErrorCode> {
    e.read_snap = snap;
    let r = e.run(vec![sub(OpCode::Read)]);
    e.read_snap = 0;
    match r {
        Ok(out) => Ok(out.data.concat()),
        Err(err) => Err(err.code),
    }
}

fn clones(e: &Env) -> Vec<u64> {
    let l = e.store.list_objects(&e.coll, None, 100).unwrap();
    l.objects
        .iter()
        .filter(|k| k.name == e.key.name && k.snap != ObjectKey::HEAD)
        .map(|k| k.snap)
        .collect()
}

#[test]
fn the_first_write_after_a_snapshot_keeps_the_object_as_it_was() {
    let mut e = env();
    write(&mut e, b"v1");
    // Snapshot 1: the next write clones.
    e.snapc = (1, vec![1]);
    write(&mut e, b"v2");
    assert_eq!(clones(&e), vec![1]);
    // Another write under the same context clones nothing more.
    write(&mut e, b"v2b");
    assert_eq!(clones(&e), vec![1]);
    // Snapshots 2 and 3 taken, then a write: one clone stands for both.
    e.snapc = (3, vec![3, 2, 1]);
    write(&mut e, b"v3");
    assert_eq!(clones(&e), vec![1, 3]);
    assert_eq!(read_at(&mut e, 1).unwrap(), b"v1");
    assert_eq!(read_at(&mut e, 2).unwrap(), b"v2b");
    assert_eq!(read_at(&mut e, 3).unwrap(), b"v2b");
    assert_eq!(read_at(&mut e, 4).unwrap(), b"v3");
    assert_eq!(read_at(&mut e, 0).unwrap(), b"v3");
    // A snapshot is read-only.
    e.read_snap = 1;
    let err = e.run(vec![with_data(OpCode::WriteFull, b"x")]).unwrap_err();
    assert_eq!(err.code, OsdErrorCode::InvalidArgument);
    e.read_snap = 0;
}

#[test]
fn an_object_made_after_a_snapshot_did_not_exist_then() {
    let mut e = env();
    e.snapc = (2, vec![2, 1]);
    write(&mut e, b"new");
    assert!(clones(&e).is_empty());
    assert_eq!(read_at(&mut e, 1), Err(OsdErrorCode::NotFound));
    assert_eq!(read_at(&mut e, 2), Err(OsdErrorCode::NotFound));
    assert_eq!(read_at(&mut e, 3).unwrap(), b"new");
}

#[test]
fn a_removed_head_keeps_its_clones_and_a_new_head_finds_them() {
    let mut e = env();
    write(&mut e, b"v1");
    e.snapc = (1, vec![1]);
    e.run(vec![sub(OpCode::Remove)]).unwrap();
    assert_eq!(clones(&e), vec![1, SNAPDIR]);
    assert_eq!(read_at(&mut e, 1).unwrap(), b"v1");
    assert_eq!(read_at(&mut e, 2), Err(OsdErrorCode::NotFound));
    // Made again: the snapdir's snapset moves back onto the head.
    write(&mut e, b"v2");
    assert_eq!(clones(&e), vec![1]);
    assert_eq!(read_at(&mut e, 1).unwrap(), b"v1");
    assert_eq!(read_at(&mut e, 2).unwrap(), b"v2");
    // Snapshot 2, removed again: both clones remain.
    e.snapc = (2, vec![2, 1]);
    e.run(vec![sub(OpCode::Remove)]).unwrap();
    assert_eq!(read_at(&mut e, 2).unwrap(), b"v2");
    assert_eq!(read_at(&mut e, 1).unwrap(), b"v1");
}

#[test]
fn removed_snapshots_get_no_clone_and_bad_contexts_are_refused() {
    let mut e = env();
    write(&mut e, b"v1");
    e.removed = vec![(1, 1)];
    e.snapc = (1, vec![1]);
    write(&mut e, b"v2");
    assert!(clones(&e).is_empty(), "a removed snapshot was cloned");
    for bad in [(1, vec![2]), (3, vec![1, 2]), (3, vec![2, 2])] {
        e.snapc = bad;
        let err = e.run(vec![with_data(OpCode::WriteFull, b"x")]).unwrap_err();
        assert_eq!(err.code, OsdErrorCode::InvalidArgument);
    }
}

#[test]
fn snapsets_round_trip_and_damaged_ones_are_refused() {
    let s = SnapSet {
        seq: 9,
        clones: vec![
            CloneInfo {
                id: 3,
                snaps: vec![3, 2],
                size: 10,
            },
            CloneInfo {
                id: 9,
                snaps: vec![9],
                size: 0,
            },
        ],
    };
    let b = s.encode();
    assert_eq!(SnapSet::decode(&b), Some(s.clone()));
    for cut in 0..b.len() {
        assert_eq!(SnapSet::decode(&b[..cut]), None, "cut at {cut}");
    }
    let mut long = b.to_vec();
    long.push(0);
    assert_eq!(SnapSet::decode(&long), None);
    assert_eq!(s.resolve(1), None);
    assert_eq!(s.resolve(2), Some(3));
    assert_eq!(s.resolve(4), None);
    assert_eq!(s.resolve(9), Some(9));
    assert_eq!(s.resolve(10), Some(ObjectKey::HEAD));
}

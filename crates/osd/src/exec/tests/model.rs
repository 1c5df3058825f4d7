//! Random compound write ops against a plain in-memory model of one object.

use std::collections::BTreeMap;

use bytes::Bytes;
use proptest::prelude::*;
use shoal_proto::{OpCode, OsdErrorCode, OsdSubOp};

use super::{Env, env, with_data};

#[derive(Debug, Clone)]
enum MOp {
    Create(bool),
    Write(u64, Vec<u8>),
    WriteFull(Vec<u8>),
    Append(Vec<u8>),
    Truncate(u64),
    Zero(u64, u64),
    Remove,
    SetXattr(String, Vec<u8>),
    RmXattr(String),
    OmapSet(Vec<(Vec<u8>, Vec<u8>)>),
    OmapRm(Vec<Vec<u8>>),
    OmapClear,
    OmapSetHeader(Vec<u8>),
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Obj {
    data: Vec<u8>,
    xattrs: BTreeMap<String, Vec<u8>>,
    header: Vec<u8>,
    omap: BTreeMap<Vec<u8>, Vec<u8>>,
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(0xff)], 0..3)
}

fn mop() -> impl Strategy<Value = MOp> {
    let name = prop_oneof![Just("a".to_string()), Just("b".to_string())];
    prop_oneof![
        any::<bool>().prop_map(MOp::Create),
        (0..48u64, bytes(16)).prop_map(|(o, d)| MOp::Write(o, d)),
        bytes(16).prop_map(MOp::WriteFull),
        bytes(16).prop_map(MOp::Append),
        (0..48u64).prop_map(MOp::Truncate),
        (0..48u64, 0..48u64).prop_map(|(o, l)| MOp::Zero(o, l)),
        Just(MOp::Remove),
        (name.clone(), bytes(4)).prop_map(|(n, v)| MOp::SetXattr(n, v)),
        name.prop_map(MOp::RmXattr),
        proptest::collection::vec((key(), bytes(4)), 0..3).prop_map(MOp::OmapSet),
        proptest::collection::vec(key(), 0..3).prop_map(MOp::OmapRm),
        Just(MOp::OmapClear),
        bytes(4).prop_map(MOp::OmapSetHeader),
    ]
}

/// The sub-operation and payload for `m`.
fn wire(m: &MOp) -> (OsdSubOp, Vec<u8>) {
    let (code, d): (OpCode, &[u8]) = match m {
        MOp::Create(_) => (OpCode::Create, &[]),
        MOp::Write(_, b) => (OpCode::Write, b),
        MOp::WriteFull(b) => (OpCode::WriteFull, b),
        MOp::Append(b) => (OpCode::Append, b),
        MOp::Truncate(_) => (OpCode::Truncate, &[]),
        MOp::Zero(..) => (OpCode::Zero, &[]),
        MOp::Remove => (OpCode::Remove, &[]),
        MOp::SetXattr(_, v) => (OpCode::SetXattr, v),
        MOp::RmXattr(_) => (OpCode::RmXattr, &[]),
        MOp::OmapSet(_) => (OpCode::OmapSetVals, &[]),
        MOp::OmapRm(_) => (OpCode::OmapRmKeys, &[]),
        MOp::OmapClear => (OpCode::OmapClear, &[]),
        MOp::OmapSetHeader(h) => (OpCode::OmapSetHeader, h),
    };
    let (mut s, d) = with_data(code, d);
    match m {
        MOp::Create(true) => s.flags = OsdSubOp::CREATE_EXCLUSIVE,
        MOp::Write(o, _) | MOp::Truncate(o) => s.offset = *o,
        MOp::Zero(o, l) => (s.offset, s.length) = (*o, *l),
        MOp::SetXattr(n, _) | MOp::RmXattr(n) => s.name = n.clone(),
        MOp::OmapSet(kv) => {
            s.keys = kv.iter().map(|(k, _)| k.clone()).collect();
            s.values = kv.iter().map(|(_, v)| v.clone()).collect();
        }
        MOp::OmapRm(keys) => s.keys = keys.clone(),
        _ => {}
    }
    (s, d)
}

fn created(obj: &mut Option<Obj>) -> &mut Obj {
    obj.get_or_insert_with(Obj::default)
}

fn step(obj: &mut Option<Obj>, m: &MOp) -> Result<(), OsdErrorCode> {
    use OsdErrorCode::{Exists, NoData, NotFound};
    match m {
        MOp::Create(excl) => {
            if *excl && obj.is_some() {
                return Err(Exists);
            }
            created(obj);
        }
        MOp::Write(o, b) => {
            let o = usize::try_from(*o).unwrap_or(usize::MAX);
            let data = &mut created(obj).data;
            if !b.is_empty() {
                if data.len() < o + b.len() {
                    data.resize(o + b.len(), 0);
                }
                data[o..o + b.len()].copy_from_slice(b);
            }
        }
        MOp::WriteFull(b) => created(obj).data = b.clone(),
        MOp::Append(b) => created(obj).data.extend_from_slice(b),
        MOp::Truncate(n) => created(obj).data.resize(*n as usize, 0),
        MOp::Zero(o, l) => {
            let data = &mut obj.as_mut().ok_or(NotFound)?.data;
            let end = ((o + l) as usize).min(data.len());
            for b in data.iter_mut().take(end).skip(*o as usize) {
                *b = 0;
            }
        }
        MOp::Remove => {
            obj.take().ok_or(NotFound)?;
        }
        MOp::SetXattr(n, v) => {
            created(obj).xattrs.insert(n.clone(), v.clone());
        }
        MOp::RmXattr(n) => {
            let o = obj.as_mut().ok_or(NotFound)?;
            o.xattrs.remove(n).ok_or(NoData)?;
        }
        MOp::OmapSet(kv) => created(obj).omap.extend(kv.iter().cloned()),
        MOp::OmapRm(keys) => {
            let o = obj.as_mut().ok_or(NotFound)?;
            for k in keys {
                o.omap.remove(k);
            }
        }
        MOp::OmapClear => {
            let o = obj.as_mut().ok_or(NotFound)?;
            o.omap.clear();
            o.header.clear();
        }
        MOp::OmapSetHeader(h) => created(obj).header = h.clone(),
    }
    Ok(())
}

fn stored(e: &Env) -> Option<Obj> {
    let s = e.snapshot()?;
    Some(Obj {
        data: s.data.to_vec(),
        xattrs: s
            .xattrs
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("u.")?.to_string(), v.to_vec())))
            .collect(),
        header: s.header.to_vec(),
        omap: s
            .omap
            .iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect(),
    })
}

fn size(o: &Option<Obj>) -> i64 {
    o.as_ref().map_or(0, |o| o.data.len() as i64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn compound_writes_match_a_model(
        ops in proptest::collection::vec(proptest::collection::vec(mop(), 1..4), 1..12)
    ) {
        let mut e = env();
        let mut model: Option<Obj> = None;
        for op in &ops {
            let mut next = model.clone();
            let want = op
                .iter()
                .enumerate()
                .try_for_each(|(i, m)| step(&mut next, m).map_err(|c| (c, i as u32)));
            let before = (model.is_some(), size(&model));
            match (e.run(op.iter().map(wire).collect()), want) {
                (Ok(out), Ok(())) => {
                    let after = (next.is_some(), size(&next));
                    let objects = i64::from(after.0) - i64::from(before.0);
                    prop_assert_eq!(out.delta.objects, objects);
                    prop_assert_eq!(out.delta.bytes, after.1 - before.1);
                    let version = if next.is_some() { e.version } else { 0 };
                    prop_assert_eq!(out.version, version);
                    model = next;
                }
                (Err(got), Err((code, i))) => {
                    prop_assert_eq!((got.code, got.failed_op), (code, i));
                }
                (got, want) => prop_assert!(false, "{op:?}: got {got:?}, model {want:?}"),
            }
            prop_assert_eq!(&stored(&e), &model, "after {:?}", op);
            if let Some(m) = &model {
                prop_assert_eq!(e.read().map_err(|x| x.code), Ok(Bytes::from(m.data.clone())));
            }
        }
    }
}

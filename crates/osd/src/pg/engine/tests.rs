//! The engine's steps, one event in and the exact effects out.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use shoal_maps::{OsdMap, PgId};
use shoal_objectstore::{MemStore, ObjectKey, ObjectStore, Transaction};
use shoal_proto::{
    Message, OsdErrorCode, OsdOpReply, PgInfo, PgPull, PgPush, PgPushBatch, PgQuery, RepOp,
    RepOpReply,
};

use super::{Effect, NewChange, PgCore, ReplyTo, Then};
use crate::codec;
use crate::ctx::{AckedWrite, PgConfig};
use crate::log::{LogEntry, LogOp, PgLog, ReqId, Version};
use crate::missing::MissingSet;
use crate::object::collection;
use crate::pg::State;
use crate::pg::backend::{Replicated, ShardWrite};

const PG: PgId = PgId { pool: 1, seed: 0 };
/// Our map's epoch; the interval began at [`START`].
const EPOCH: u32 = 10;
const START: u32 = 8;

/// A member of PG 1.0 with acting set `acting`, in epoch [`EPOCH`], over
/// an empty in-memory store holding the PG's collection.
fn member(whoami: i32, acting: &[i32]) -> PgCore {
    member_on(whoami, acting, Arc::new(MemStore::new(1 << 30)))
}

/// [`member`] over `store`.
fn member_on(whoami: i32, acting: &[i32], store: Arc<dyn ObjectStore>) -> PgCore {
    let coll = collection(PG);
    let mut t = Transaction::new();
    t.create_collection(coll);
    PgLog::default().persist_info(coll, &mut t);
    store.apply_transaction(t).unwrap();
    let mut map = OsdMap::new([0; 16], 0, shoal_crush::CrushMap::default()).unwrap();
    map.epoch = shoal_types::Epoch(EPOCH);
    PgCore {
        id: PG,
        coll,
        whoami,
        cfg: PgConfig::default(),
        store,
        backend: Arc::new(Replicated),
        counters: Arc::default(),
        observed: true,
        map: Some(Arc::new(map)),
        pool: Some(shoal_maps::Pool::replicated(PG.pool, "rbd", 3, 2, 1, 0)),
        up: acting.to_vec(),
        acting: acting.to_vec(),
        primary: acting[0],
        prior: Vec::new(),
        interval_start: START,
        state: if acting[0] == whoami {
            State::Active
        } else {
            State::ReplicaActive
        },
        log: PgLog::default(),
        missing: MissingSet::default(),
        activation_pieces: None,
        inflight: BTreeMap::new(),
        inflight_reqids: HashMap::new(),
        waiting: Default::default(),
        waiting_for_object: BTreeMap::new(),
        recovery: None,
        full: Arc::default(),
        clock: || 1_000,
        now: tokio::time::Instant::now,
        peer_logs: BTreeMap::new(),
        peers_pending: Vec::new(),
        peering: Default::default(),
        plan: None,
        search_everywhere: false,
        recovery_generation: 0,
        pending_activation: None,
        ec: None,
        ec_gathering: BTreeMap::new(),
        stashes: BTreeMap::new(),
        ec_committed: Version::default(),
        strays: Default::default(),
        stray_sources: Vec::new(),
        scrub: None,
        scrub_record: Default::default(),
        snap_trim: None,
        snap_trimmed: Vec::new(),
        pg_num: 0,
    }
}

fn key() -> ObjectKey {
    ObjectKey::new(0x1234, b"obj".to_vec())
}

fn entry(v: u64) -> LogEntry {
    LogEntry {
        version: Version { epoch: EPOCH, v },
        op: LogOp::Modify,
        key: key(),
        reqid: Some(ReqId {
            entity: "client.admin".into(),
            inc: 1,
            tid: v,
        }),
        code: 0,
    }
}

fn write_txn(core: &PgCore, data: &'static [u8]) -> Transaction {
    let mut t = Transaction::new();
    t.write(core.coll, key(), 0, Bytes::from_static(data));
    t
}

/// The replicated-op message a primary sends for change `v` writing `data`.
fn rep(core: &PgCore, v: u64, data: &'static [u8]) -> (RepOp, Bytes) {
    let (ops, chunks) = codec::encode(core.coll, &write_txn(core, data)).unwrap();
    let msg = RepOp {
        pool: PG.pool,
        pg_seed: PG.seed,
        epoch: EPOCH,
        interval_start: START,
        log_entry: entry(v).encode(),
        txn: ops,
        objects_delta: i64::from(v == 1),
        bytes_delta: 5,
        ..RepOp::default()
    };
    (msg, crate::pg::backend::concat(chunks))
}

fn rep_answer(to: u64, code: OsdErrorCode, message: &str) -> Effect {
    Effect::Reply {
        to: ReplyTo(to),
        msg: RepOpReply {
            code: code as u32,
            message: message.into(),
            epoch: EPOCH,
        }
        .into(),
        data: Bytes::new(),
        data_crc: None,
    }
}

/// Applies what an `Apply` effect queues, as the driver would.
fn run_applies(core: &PgCore, fx: &[Effect]) {
    for e in fx {
        if let Effect::Apply { txn, .. } = e {
            core.store.apply_transaction(txn.clone()).unwrap();
        }
    }
}

// ---- the replica's side ------------------------------------------------

#[test]
fn a_replica_applies_the_next_change_with_its_log_entry_and_acks_on_commit() {
    let mut r = member(2, &[1, 2, 3]);
    let (msg, data) = rep(&r, 1, b"hello");
    let fx = r.rep_op(msg, data, ReplyTo(7));
    // The change and its log entry in one transaction, acked once durable.
    let mut want = write_txn(&r, b"hello");
    let mut log = PgLog::default();
    log.info.objects = 1;
    log.info.bytes = 5;
    log.append(entry(1), r.cfg.log_limits, r.coll, &mut want);
    assert_eq!(
        fx,
        vec![
            Effect::Wrote(5),
            Effect::Apply {
                txn: want,
                then: Then::AckRep {
                    to: ReplyTo(7),
                    epoch: EPOCH
                },
            },
        ]
    );
    assert_eq!(r.log.info.last_update, Version { epoch: EPOCH, v: 1 });
    assert_eq!((r.log.info.objects, r.log.info.bytes), (1, 5));
}

#[test]
fn a_resent_change_already_applied_is_acked_without_applying_it_again() {
    let mut r = member(2, &[1, 2, 3]);
    let (msg, data) = rep(&r, 1, b"hello");
    let fx = r.rep_op(msg.clone(), data.clone(), ReplyTo(1));
    run_applies(&r, &fx);
    assert_eq!(
        r.rep_op(msg, data, ReplyTo(2)),
        vec![rep_answer(2, OsdErrorCode::Ok, "")]
    );
    assert_eq!(r.log.info.objects, 1, "counted once");
}

#[test]
fn a_change_after_a_gap_is_refused_so_the_primary_peers_again() {
    let mut r = member(2, &[1, 2, 3]);
    let (msg, data) = rep(&r, 2, b"hello");
    assert_eq!(
        r.rep_op(msg, data, ReplyTo(3)),
        vec![rep_answer(
            3,
            OsdErrorCode::Again,
            "pg 1.0: change 10'2 out of order (ours ends at 0'0)"
        )]
    );
    assert_eq!(r.log.info.last_update, Version::default());
}

#[test]
fn a_change_from_before_our_interval_is_refused_as_stale() {
    let mut r = member(2, &[1, 2, 3]);
    let (mut msg, data) = rep(&r, 1, b"hello");
    msg.epoch = START - 1;
    assert_eq!(
        r.rep_op(msg, data, ReplyTo(4)),
        vec![rep_answer(
            4,
            OsdErrorCode::StaleEpoch,
            "replication from epoch 7 but pg 1.0 changed in epoch 8"
        )]
    );
}

#[test]
fn a_damaged_change_is_refused_and_changes_nothing() {
    let mut r = member(2, &[1, 2, 3]);
    let (mut msg, data) = rep(&r, 1, b"hello");
    msg.log_entry.truncate(3);
    let fx = r.rep_op(msg, data.clone(), ReplyTo(5));
    assert!(matches!(
        &fx[..],
        [Effect::Reply { to: ReplyTo(5), msg: Message::RepOpReply(m), .. }]
            if m.code == OsdErrorCode::InvalidArgument as u32
    ));
    // A data part shorter than its ops say.
    let (msg, _) = rep(&r, 1, b"hello");
    let fx = r.rep_op(msg, data.slice(..2), ReplyTo(6));
    assert!(matches!(
        &fx[..],
        [Effect::Reply { to: ReplyTo(6), msg: Message::RepOpReply(m), .. }]
            if m.code == OsdErrorCode::InvalidArgument as u32
    ));
    assert_eq!(r.log.info.last_update, Version::default());
    assert_eq!(r.log.info.objects, 0);
}

#[test]
fn a_query_is_answered_with_our_info_and_log() {
    let mut r = member(2, &[1, 2, 3]);
    let (msg, data) = rep(&r, 1, b"hello");
    let fx = r.rep_op(msg, data, ReplyTo(1));
    run_applies(&r, &fx);
    let fx = r.query(
        PgQuery {
            interval_start: START,
            ..PgQuery::default()
        },
        ReplyTo(9),
    );
    let want = PgInfo {
        pool: PG.pool,
        pg_seed: PG.seed,
        epoch: EPOCH,
        info: r.log.info.encode(),
        log: vec![entry(1).encode()],
        interval_start: START,
        // A replicated PG's copy is whole: no shard.
        shard: u32::from(shoal_objectstore::CollectionId::NO_SHARD),
        ..PgInfo::default()
    };
    assert_eq!(
        fx,
        vec![Effect::Reply {
            to: ReplyTo(9),
            msg: want.into(),
            data: Bytes::new(),
            data_crc: None,
        }]
    );
}

/// The primary's activation message: its info and log (entries 1..=n).
fn activation(n: u64) -> PgInfo {
    let mut log = PgLog::default();
    let mut t = Transaction::new();
    for v in 1..=n {
        log.append(
            entry(v),
            PgConfig::default().log_limits,
            collection(PG),
            &mut t,
        );
    }
    PgInfo {
        pool: PG.pool,
        pg_seed: PG.seed,
        epoch: EPOCH,
        info: log.info.encode(),
        log: log.entries().map(LogEntry::encode).collect(),
        activate: true,
        interval_start: START,
        ..PgInfo::default()
    }
}

#[test]
fn an_activation_replaces_our_log_and_makes_us_an_active_replica() {
    let mut r = member(2, &[1, 2, 3]);
    r.state = State::ReplicaWaiting;
    let fx = r.activate(activation(2), ReplyTo(4));
    let [
        Effect::Apply {
            then: Then::AckRep { to, epoch },
            ..
        },
    ] = &fx[..]
    else {
        panic!("{fx:?}")
    };
    assert_eq!((*to, *epoch), (ReplyTo(4), EPOCH));
    assert_eq!(r.state, State::ReplicaActive);
    assert_eq!(r.log.info.last_update, Version { epoch: EPOCH, v: 2 });
    assert_eq!(r.log.info.last_epoch_started, START);
    // What the transaction persists is what a restart loads.
    run_applies(&r, &fx);
    let mut again = member(2, &[1, 2, 3]);
    again.store = Arc::clone(&r.store);
    again.reload_log();
    assert_eq!(again.log.info, r.log.info);
    assert_eq!(again.log.len(), 2);
}

#[test]
fn an_activation_in_pieces_waits_for_its_last_piece_and_refuses_a_gap() {
    let mut r = member(2, &[1, 2, 3]);
    r.state = State::ReplicaWaiting;
    let full = activation(2);
    let first = PgInfo {
        log: full.log[..1].to_vec(),
        more: true,
        piece: 0,
        ..full.clone()
    };
    let second = PgInfo {
        log: full.log[1..].to_vec(),
        more: false,
        piece: 1,
        ..full.clone()
    };
    assert_eq!(
        r.activate(first.clone(), ReplyTo(1)),
        vec![rep_answer(1, OsdErrorCode::Ok, "")]
    );
    assert_eq!(
        r.state,
        State::ReplicaWaiting,
        "not active on a first piece"
    );
    let fx = r.activate(second.clone(), ReplyTo(2));
    assert!(matches!(&fx[..], [Effect::Apply { .. }]), "{fx:?}");
    assert_eq!(r.log.len(), 2, "both pieces' entries");
    // A piece out of order (the first was lost) is refused.
    let mut r = member(2, &[1, 2, 3]);
    assert_eq!(
        r.activate(second, ReplyTo(3)),
        vec![rep_answer(
            3,
            OsdErrorCode::Again,
            "pg 1.0: activation piece 1 out of order"
        )]
    );
}

#[test]
fn a_stale_or_damaged_activation_is_refused() {
    let mut r = member(2, &[1, 2, 3]);
    let mut stale = activation(1);
    stale.epoch = START - 1;
    assert_eq!(
        r.activate(stale, ReplyTo(1)),
        vec![rep_answer(
            1,
            OsdErrorCode::StaleEpoch,
            "activation from epoch 7 but pg 1.0 changed in epoch 8"
        )]
    );
    let mut bad = activation(1);
    bad.info.truncate(2);
    let fx = r.activate(bad, ReplyTo(2));
    assert!(matches!(
        &fx[..],
        [Effect::Reply { msg: Message::RepOpReply(m), .. }]
            if m.code == OsdErrorCode::InvalidArgument as u32
    ));
    assert_eq!(r.log.info.last_update, Version::default());
}

/// `fx` is one transaction, acknowledged on token `to` once applied.
fn assert_one_acked_apply(fx: &[Effect], to: u64) {
    let [
        Effect::Apply {
            then: Then::AckRep { to: t, .. },
            ..
        },
    ] = fx
    else {
        panic!("{fx:?}")
    };
    assert_eq!(*t, ReplyTo(to));
}

/// A store holding `key()` with `data`, and the one-step copy of it.
fn source_copy(data: &'static [u8]) -> (PgPush, Bytes) {
    let src = member(1, &[1, 2, 3]);
    let mut t = write_txn(&src, data);
    t.set_xattr(src.coll, key(), "a", Bytes::from_static(b"1"));
    src.store.apply_transaction(t).unwrap();
    let (mut push, data) = src
        .backend
        .read_step(
            src.store.as_ref(),
            src.coll,
            &key(),
            &crate::copy::start(),
            src.cfg.copy_limits,
        )
        .unwrap();
    push.epoch = EPOCH;
    (push, data)
}

#[test]
fn a_pushed_object_is_installed_and_leaves_the_missing_set() {
    let mut r = member(2, &[1, 2, 3]);
    r.missing = MissingSet::from_map([(key(), Version { epoch: EPOCH, v: 1 })].into());
    let (push, data) = source_copy(b"hello");
    let fx = r.push(push, data, ReplyTo(3));
    assert_one_acked_apply(&fx, 3);
    assert!(r.missing.is_empty());
    run_applies(&r, &fx);
    let got = r.store.read(&r.coll, &key(), 0, 100).unwrap();
    assert_eq!(&got[..], b"hello");
}

#[test]
fn a_push_from_an_older_interval_is_refused() {
    let mut r = member(2, &[1, 2, 3]);
    let (mut push, data) = source_copy(b"hello");
    push.epoch = START - 1;
    assert_eq!(
        r.push(push, data, ReplyTo(1)),
        vec![rep_answer(
            1,
            OsdErrorCode::StaleEpoch,
            "push from epoch 7 but pg 1.0 changed in epoch 8"
        )]
    );
}

/// Whole copies of objects 100, 101, ... (`n` of them, "data of I" each)
/// and of object 200, which the source lacks.
fn source_copies(n: u32) -> Vec<(ObjectKey, PgPush, Bytes)> {
    let src = member(1, &[1, 2, 3]);
    let keys: Vec<ObjectKey> = (0..n).map(|i| obj(100 + i)).chain([obj(200)]).collect();
    keys.into_iter()
        .enumerate()
        .map(|(i, k)| {
            if k != obj(200) {
                let mut t = Transaction::new();
                t.write(src.coll, k.clone(), 0, Bytes::from(format!("data of {i}")));
                src.store.apply_transaction(t).unwrap();
            }
            let (mut push, data) = src
                .backend
                .read_step(
                    src.store.as_ref(),
                    src.coll,
                    &k,
                    &crate::copy::start(),
                    src.cfg.copy_limits,
                )
                .unwrap();
            push.epoch = EPOCH;
            (k, push, data)
        })
        .collect()
}

fn batch_of(copies: &[(ObjectKey, PgPush, Bytes)]) -> (PgPushBatch, Bytes) {
    let mut data = Vec::new();
    let msg = PgPushBatch {
        pool: PG.pool,
        pg_seed: PG.seed,
        epoch: EPOCH,
        objects: copies.iter().map(|(_, p, _)| p.clone()).collect(),
        data_lengths: copies
            .iter()
            .map(|(_, _, d)| {
                data.extend_from_slice(d);
                d.len() as u64
            })
            .collect(),
    };
    (msg, Bytes::from(data))
}

/// Replica osd.2 lacking every object of `copies`, holding an old object 200.
fn lacking(copies: &[(ObjectKey, PgPush, Bytes)]) -> PgCore {
    let mut r = member(2, &[1, 2, 3]);
    let mut t = Transaction::new();
    t.write(r.coll, obj(200), 0, Bytes::from_static(b"deleted since"));
    let v = Version { epoch: EPOCH, v: 1 };
    let set = MissingSet::from_map(copies.iter().map(|(k, _, _)| (k.clone(), v)).collect());
    r.missing.replace(set, r.coll, &mut t);
    r.store.apply_transaction(t).unwrap();
    assert_eq!(
        persisted_missing(r.store.as_ref()).objects().len(),
        copies.len()
    );
    r
}

fn persisted_missing(store: &dyn ObjectStore) -> MissingSet {
    MissingSet::load(&meta_omap(store, collection(PG))).unwrap()
}

/// The omap of the PG meta object in `coll`.
fn meta_omap(
    store: &dyn ObjectStore,
    coll: shoal_objectstore::CollectionId,
) -> BTreeMap<Bytes, Bytes> {
    store
        .omap_range(
            &coll,
            &crate::object::pg_meta_key(),
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
            usize::MAX,
        )
        .unwrap()
        .into_iter()
        .collect()
}

#[test]
fn a_pushed_batch_is_installed_in_one_transaction_and_leaves_the_missing_set() {
    let copies = source_copies(3);
    let mut r = lacking(&copies);
    let (msg, data) = batch_of(&copies);
    let fx = r.push_batch(msg, data, ReplyTo(3));
    assert_one_acked_apply(&fx, 3);
    assert!(r.missing.is_empty());
    run_applies(&r, &fx);
    for i in 0..3 {
        let got = r.store.read(&r.coll, &obj(100 + i), 0, 100).unwrap();
        assert_eq!(got, format!("data of {i}").as_bytes());
    }
    assert!(
        !r.store.exists(&r.coll, &obj(200)).unwrap(),
        "the source's deletion"
    );
    // The persisted missing set is emptied by the same transaction.
    let persisted = persisted_missing(r.store.as_ref());
    assert!(persisted.is_empty(), "{persisted:?}");
}

#[test]
fn a_damaged_or_stale_batch_is_refused_whole() {
    let copies = source_copies(2);
    let refused = |msg: PgPushBatch, data: Bytes, code: OsdErrorCode, why: &str| {
        let mut r = lacking(&copies);
        let fx = r.push_batch(msg, data, ReplyTo(1));
        let [
            Effect::Reply {
                msg: Message::RepOpReply(m),
                ..
            },
        ] = &fx[..]
        else {
            panic!("{fx:?}")
        };
        assert_eq!(m.code, code as u32, "{m:?}");
        assert!(m.message.contains(why), "{m:?}");
        assert_eq!(
            r.missing.objects().len(),
            copies.len(),
            "nothing leaves the missing set"
        );
        assert!(
            r.store.exists(&r.coll, &obj(200)).unwrap(),
            "nothing installed"
        );
    };
    let (msg, data) = batch_of(&copies);
    refused(
        msg.clone(),
        data.slice(1..),
        OsdErrorCode::InvalidArgument,
        "lengths add up to",
    );
    let mut short = msg.clone();
    short.data_lengths.pop();
    refused(
        short,
        data.clone(),
        OsdErrorCode::InvalidArgument,
        "differ in number",
    );
    let mut overflow = msg.clone();
    overflow.data_lengths[0] = u64::MAX;
    refused(
        overflow,
        data.clone(),
        OsdErrorCode::InvalidArgument,
        "lengths add up to",
    );
    let mut twice = msg.clone();
    twice.objects[1] = twice.objects[0].clone();
    twice.data_lengths[1] = twice.data_lengths[0];
    let d = Bytes::from([&data[..twice.data_lengths[0] as usize]; 2].concat());
    let mut d2 = d.to_vec();
    d2.extend_from_slice(&data[(msg.data_lengths[0] + msg.data_lengths[1]) as usize..]);
    refused(
        twice,
        Bytes::from(d2),
        OsdErrorCode::InvalidArgument,
        "twice",
    );
    let mut partial = msg.clone();
    partial.objects[0].after.as_mut().unwrap().data_complete = false;
    refused(
        partial,
        data.clone(),
        OsdErrorCode::InvalidArgument,
        "not a whole copy",
    );
    let mut stale = msg;
    stale.epoch = START - 1;
    refused(stale, data, OsdErrorCode::StaleEpoch, "push from epoch 7");
}

#[test]
fn a_batch_is_installed_whole_or_not_at_all_when_the_power_fails() {
    use shoal_objectstore::block::fault::{FaultController, MemDevice};
    use shoal_objectstore::block::{self, BlockStore};
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    const BATCHES: u32 = 400;
    const PER: u32 = 8;
    // Batch b: objects (b, 0..7) of 100 B up to 40 KiB (in the journal
    // record, or copy-on-write before it), and the deletion of (b, 99),
    // which the replica holds and the source has not.
    let k = |b: u32, j: u32| ObjectKey::new(b * 100 + j, format!("b{b}.{j}").into_bytes());
    let fill = |b: u32, j: u32| (b * 7 + j) as u8 | 1;
    let size = |b: u32, j: u32| 100 + ((b * 13 + j * 5129) % 40_000) as usize;
    let src = member(1, &[1, 2, 3]);
    let mut t = Transaction::new();
    for b in 0..BATCHES {
        for j in 0..PER {
            t.write(
                src.coll,
                k(b, j),
                0,
                Bytes::from(vec![fill(b, j); size(b, j)]),
            );
        }
    }
    src.store.apply_transaction(t).unwrap();
    let ctl = FaultController::new(0, 0);
    let data = MemDevice::new(vec![0u8; 256 << 20], ctl.clone());
    let meta = MemDevice::new(Vec::new(), ctl.clone());
    BlockStore::mkfs_on(data.clone(), meta.clone()).unwrap();
    let store: Arc<dyn ObjectStore> =
        Arc::new(BlockStore::open_on(data.clone(), meta.clone()).unwrap());
    let mut r = member_on(2, &[1, 2, 3], Arc::clone(&store));
    let mut t = Transaction::new();
    let mut lacking = BTreeMap::new();
    for b in 0..BATCHES {
        t.write(r.coll, k(b, 99), 0, Bytes::from_static(b"stale"));
        for j in (0..PER).chain([99]) {
            lacking.insert(k(b, j), Version { epoch: EPOCH, v: 1 });
        }
    }
    r.missing
        .replace(MissingSet::from_map(lacking), r.coll, &mut t);
    store.apply_transaction(t).unwrap();
    // Each batch's transaction, as the replica makes it.
    let txns: Vec<Transaction> = (0..BATCHES)
        .map(|b| {
            let copies: Vec<(ObjectKey, PgPush, Bytes)> = (0..PER)
                .chain([99])
                .map(|j| {
                    let (mut push, data) = src
                        .backend
                        .read_step(
                            src.store.as_ref(),
                            src.coll,
                            &k(b, j),
                            &crate::copy::start(),
                            src.cfg.copy_limits,
                        )
                        .unwrap();
                    push.epoch = EPOCH;
                    (k(b, j), push, data)
                })
                .collect();
            let (msg, data) = batch_of(&copies);
            match &r.push_batch(msg, data, ReplyTo(u64::from(b)))[..] {
                [Effect::Apply { txn, .. }] => txn.clone(),
                fx => panic!("{fx:?}"),
            }
        })
        .collect();
    // The replica installs batch after batch until the power fails.
    let acked = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (store, acked) = (Arc::clone(&store), Arc::clone(&acked));
        std::thread::spawn(move || {
            for (i, t) in txns.into_iter().enumerate() {
                if store.apply_transaction(t).is_err() {
                    return;
                }
                acked.store(i + 1, SeqCst);
            }
        })
    };
    while acked.load(SeqCst) < 20 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    ctl.stop();
    writer.join().unwrap();
    let acked = acked.load(SeqCst);
    let mut rng = shoal_objectstore::model::Rng::new(7);
    let ctl = FaultController::new(0, 0);
    let data = MemDevice::new(data.crash_image(&mut rng), ctl.clone());
    let meta = MemDevice::new(meta.crash_image(&mut rng), ctl);
    drop((store, r));
    let store: Arc<dyn ObjectStore> =
        Arc::new(BlockStore::open_on(data.clone(), meta.clone()).unwrap());
    let coll = collection(PG);
    let missing = persisted_missing(store.as_ref());
    let mut whole = 0;
    for b in 0..BATCHES {
        let installed: Vec<bool> = (0..PER)
            .map(|j| match store.read(&coll, &k(b, j), 0, 1 << 20) {
                Ok(got) => {
                    assert_eq!(got.len(), size(b, j), "object {}", k(b, j));
                    assert!(got.iter().all(|x| *x == fill(b, j)), "object {}", k(b, j));
                    true
                }
                Err(_) => false,
            })
            .chain([!store.exists(&coll, &k(b, 99)).unwrap()])
            .collect();
        let left: Vec<bool> = (0..PER)
            .chain([99])
            .map(|j| missing.objects().contains_key(&k(b, j)))
            .collect();
        let done = installed[0];
        assert!(
            installed.iter().all(|i| *i == done) && left.iter().all(|l| *l != done),
            "batch {b} half installed: {installed:?}, still missing {left:?}"
        );
        if (b as usize) < acked {
            assert!(done, "acknowledged batch {b} lost");
        }
        whole += usize::from(done);
    }
    assert!(
        whole >= acked,
        "{whole} batches installed, {acked} acknowledged"
    );
    drop(store);
    let report = block::fsck_on(data, meta, true).unwrap();
    assert!(report.is_clean(), "{report}");
}

#[test]
fn a_pull_is_answered_with_our_copy() {
    let src = member(2, &[1, 2, 3]);
    src.store
        .apply_transaction(write_txn(&src, b"hello"))
        .unwrap();
    let fx = src.pull(
        PgPull {
            hash: key().hash,
            name: key().name,
            ..PgPull::default()
        },
        ReplyTo(8),
    );
    let [
        Effect::Reply {
            to: ReplyTo(8),
            msg: Message::PgPush(p),
            data,
            ..
        },
    ] = &fx[..]
    else {
        panic!("{fx:?}")
    };
    assert!(p.exists);
    assert_eq!((p.pool, p.pg_seed, p.epoch), (PG.pool, PG.seed, EPOCH));
    assert_eq!(&data[..], b"hello");
}

// ---- the primary's replication -----------------------------------------

fn op_reply(v: u64) -> OsdOpReply {
    OsdOpReply {
        epoch: EPOCH,
        version: v,
        ..OsdOpReply::default()
    }
}

/// Submits change `v` (answered on token `v`) on primary `p`.
fn submit(p: &mut PgCore, v: u64) -> Vec<Effect> {
    let txn = write_txn(p, b"hello");
    let change = NewChange {
        entry: entry(v),
        txn,
        delta: (0, 5),
        reply: op_reply(v),
        out: Bytes::from_static(b"out"),
        received: None,
    };
    p.submit_change(change, ReplyTo(v))
}

fn acked(v: u64) -> Effect {
    let e = entry(v);
    Effect::Acked(AckedWrite {
        osd: 1,
        pg: PG,
        hash: e.key.hash,
        interval_start: START,
        version: e.version,
        reqid: e.reqid.unwrap(),
    })
}

fn answered(v: u64) -> Effect {
    Effect::Reply {
        to: ReplyTo(v),
        msg: op_reply(v).into(),
        data: Bytes::from_static(b"out"),
        data_crc: None,
    }
}

fn version(v: u64) -> Version {
    Version { epoch: EPOCH, v }
}

#[test]
fn a_change_is_applied_here_and_sent_to_every_other_member_through_the_backend() {
    let mut p = member(1, &[1, 2, 3]);
    let fx = submit(&mut p, 1);
    let mut local = write_txn(&p, b"hello");
    let mut log = PgLog::default();
    log.info.bytes = 5;
    log.append(entry(1), p.cfg.log_limits, p.coll, &mut local);
    let (msg, data) = rep(&p, 1, b"hello");
    let msg = RepOp {
        objects_delta: 0,
        ..msg
    };
    let to = |osd| Effect::Replicate {
        version: version(1),
        write: ShardWrite {
            osd,
            msg: msg.clone(),
            data: data.clone(),
            data_crc: crc32c::crc32c(&data),
        },
    };
    assert_eq!(
        fx,
        vec![
            Effect::Apply {
                txn: local,
                then: Then::Local(version(1)),
            },
            to(2),
            to(3),
        ]
    );
    assert_eq!(p.inflight[&version(1)].waiting, vec![2, 3]);
}

#[test]
fn a_change_is_answered_once_durable_here_and_on_every_member() {
    let mut p = member(1, &[1, 2, 3]);
    submit(&mut p, 1);
    assert_eq!(p.rep_acked(version(1), 2, Ok(())), vec![]);
    assert_eq!(p.local_committed(version(1), Ok(())), vec![]);
    assert_eq!(
        p.rep_acked(version(1), 3, Ok(())),
        vec![acked(1), answered(1), Effect::RunWaiting(key())]
    );
    assert!(p.inflight.is_empty() && p.inflight_reqids.is_empty());
}

#[test]
fn changes_are_answered_in_version_order() {
    let mut p = member(1, &[1, 2]);
    submit(&mut p, 1);
    submit(&mut p, 2);
    // The second is durable everywhere first: it waits for the first.
    assert_eq!(p.local_committed(version(2), Ok(())), vec![]);
    assert_eq!(p.rep_acked(version(2), 2, Ok(())), vec![]);
    assert_eq!(p.local_committed(version(1), Ok(())), vec![]);
    assert_eq!(
        p.rep_acked(version(1), 2, Ok(())),
        vec![
            acked(1),
            answered(1),
            acked(2),
            answered(2),
            Effect::RunWaiting(key())
        ]
    );
}

#[test]
fn a_resent_op_in_flight_is_answered_with_the_first_as_replayed() {
    let mut p = member(1, &[1]);
    submit(&mut p, 1);
    p.inflight
        .get_mut(&version(1))
        .unwrap()
        .responders
        .push(ReplyTo(9));
    let replayed = OsdOpReply {
        replayed: true,
        ..op_reply(1)
    };
    assert_eq!(
        p.local_committed(version(1), Ok(())),
        vec![
            acked(1),
            answered(1),
            Effect::Reply {
                to: ReplyTo(9),
                msg: replayed.into(),
                data: Bytes::new(),
                data_crc: None,
            },
            Effect::RunWaiting(key()),
        ]
    );
}

#[test]
fn a_member_that_refuses_a_change_fails_everything_in_flight_and_peering_starts() {
    let mut p = member(1, &[1, 2, 3]);
    submit(&mut p, 1);
    submit(&mut p, 2);
    let fx = p.rep_acked(
        version(1),
        3,
        Err((Some(OsdErrorCode::NoSpace), "full".into())),
    );
    let why = "osd.3 could not apply the change: full";
    let fail = |v| super::op_error(ReplyTo(v), OsdErrorCode::NoSpace, EPOCH, why.into());
    assert_eq!(fx, vec![fail(1), fail(2), Effect::StartPeering]);
    assert!(p.inflight.is_empty() && p.inflight_reqids.is_empty());
    // Later answers for the failed changes change nothing.
    assert_eq!(
        p.rep_acked(version(2), 3, Err((None, "gone".into()))),
        vec![]
    );
    assert_eq!(p.local_committed(version(2), Ok(())), vec![]);
}

#[test]
fn a_member_that_does_not_answer_fails_the_change_to_be_resent() {
    let mut p = member(1, &[1, 2]);
    submit(&mut p, 1);
    let fx = p.rep_acked(version(1), 2, Err((None, "timed out".into())));
    let why = "osd.2 could not apply the change: timed out";
    assert_eq!(
        fx,
        vec![
            super::op_error(ReplyTo(1), OsdErrorCode::Again, EPOCH, why.into()),
            Effect::StartPeering
        ]
    );
}

#[test]
fn a_change_the_store_refuses_fails_and_the_log_goes_back() {
    let mut p = member(1, &[1, 2]);
    submit(&mut p, 1);
    assert_eq!(p.log.info.last_update, version(1));
    assert_eq!(
        p.local_refused(version(1), OsdErrorCode::NoSpace, "no space".into()),
        vec![super::op_error(
            ReplyTo(1),
            OsdErrorCode::NoSpace,
            EPOCH,
            "no space".into()
        )]
    );
    assert_eq!(p.log.info.last_update, Version::default());
    assert!(p.inflight.is_empty() && p.inflight_reqids.is_empty());
}

#[test]
fn a_failed_local_commit_answers_nothing() {
    let mut p = member(1, &[1]);
    submit(&mut p, 1);
    assert_eq!(
        p.local_committed(version(1), Err("device failed".into())),
        vec![]
    );
    assert_eq!(p.inflight.len(), 1);
}

// ---- reads -------------------------------------------------------------

/// Stores client objects `names` (hash = their index) in `core`'s PG.
fn store_objects(core: &PgCore, names: &[&str]) {
    let mut t = Transaction::new();
    for (i, n) in names.iter().enumerate() {
        t.write(
            core.coll,
            ObjectKey::new(i as u32, n.as_bytes().to_vec()),
            0,
            Bytes::from_static(b"x"),
        );
    }
    core.store.apply_transaction(t).unwrap();
}

fn list_reply(fx: Vec<Effect>, to: u64) -> shoal_proto::PgListReply {
    match &fx[..] {
        [
            Effect::Reply {
                to: t,
                msg: Message::PgListReply(r),
                data,
                ..
            },
        ] if *t == ReplyTo(to) && data.is_empty() => r.clone(),
        _ => panic!("{fx:?}"),
    }
}

#[test]
fn a_listing_comes_in_pages_with_a_cursor_and_skips_the_pgs_own_objects() {
    let p = member(1, &[1, 2]);
    store_objects(&p, &["a", "b", "c"]);
    let first = list_reply(
        p.list(
            false,
            shoal_proto::PgList {
                max: 2,
                ..Default::default()
            },
            ReplyTo(1),
        ),
        1,
    );
    // The PG's meta object (hash 0, a hidden name) takes a place in the
    // page but is not listed.
    assert_eq!(first.code, 0);
    assert_eq!(first.names, vec!["a"]);
    assert!(first.more);
    assert_eq!((first.next_hash, &first.next_name[..]), (1, &b"b"[..]));
    let rest = list_reply(
        p.list(
            false,
            shoal_proto::PgList {
                max: 2,
                has_cursor: true,
                cursor_hash: first.next_hash,
                cursor_name: first.next_name,
                ..Default::default()
            },
            ReplyTo(2),
        ),
        2,
    );
    assert_eq!(rest.names, vec!["b", "c"]);
    assert!(!rest.more);
}

#[test]
fn a_client_lists_only_through_an_active_primary_a_peer_through_any_member() {
    let mut r = member(2, &[1, 2]);
    store_objects(&r, &["a"]);
    let refused = list_reply(r.list(false, Default::default(), ReplyTo(1)), 1);
    assert_eq!(refused.code, OsdErrorCode::WrongPrimary as u32);
    assert_eq!(refused.message, "osd.2 is not the primary of pg 1.0");
    // Recovery lists a replica's own copy.
    let all = shoal_proto::PgList {
        max: 10,
        ..Default::default()
    };
    let page = list_reply(r.list(true, all, ReplyTo(2)), 2);
    assert_eq!(page.names, vec!["a"]);
    // A primary still peering, or lacking objects, asks to come back.
    r.whoami = 1;
    r.state = State::Peering;
    let later = list_reply(r.list(false, Default::default(), ReplyTo(3)), 3);
    assert_eq!(later.code, OsdErrorCode::Again as u32);
}

#[test]
fn scrub_summaries_cover_the_asked_range_and_skip_hidden_objects() {
    let r = member(2, &[1, 2]);
    store_objects(&r, &["a", "b", "c", "d"]);
    let fx = r.scrub_map(
        shoal_proto::PgScrub {
            has_start: true,
            start_hash: 1,
            start_name: b"b".to_vec(),
            has_end: true,
            end_hash: 2,
            end_name: b"c".to_vec(),
            deep: true,
            ..Default::default()
        },
        ReplyTo(5),
    );
    let [
        Effect::Reply {
            to: ReplyTo(5),
            msg: Message::PgScrubMap(m),
            ..
        },
    ] = &fx[..]
    else {
        panic!("{fx:?}")
    };
    assert_eq!(m.code, 0);
    let names: Vec<&[u8]> = m.objects.iter().map(|o| &o.name[..]).collect();
    assert_eq!(names, vec![&b"b"[..], &b"c"[..]]);
    // Deep: the data was read and summarized.
    assert_eq!(
        m.objects[0],
        crate::scrub::summarize(
            r.store.as_ref(),
            &r.coll,
            &ObjectKey::new(1, b"b".to_vec()),
            true
        )
    );
    // The whole PG: every client object, not the meta object.
    let fx = r.scrub_map(shoal_proto::PgScrub::default(), ReplyTo(6));
    let [
        Effect::Reply {
            msg: Message::PgScrubMap(m),
            ..
        },
    ] = &fx[..]
    else {
        panic!("{fx:?}")
    };
    assert_eq!(m.objects.len(), 4);
}

// ---- the primary's op path ---------------------------------------------

/// A client op on object `oid`: one sub-op `code` with `data`.
fn op(oid: &str, code: shoal_proto::OpCode, data: &'static [u8], tid: u64, to: u64) -> super::Op {
    super::Op {
        msg: shoal_proto::OsdOp {
            pool: PG.pool,
            pg_seed: PG.seed,
            oid: oid.into(),
            epoch: EPOCH,
            client_inc: 1,
            tid,
            ops: vec![shoal_proto::OsdSubOp {
                code: code as u32,
                data_len: data.len() as u64,
                ..Default::default()
            }],
            ..Default::default()
        },
        data: Bytes::from_static(data),
        data_crc: crc32c::crc32c(data),
        client: "client.admin".into(),
        to: ReplyTo(to),
    }
}

fn write_op(tid: u64, to: u64) -> super::Op {
    op("obj", shoal_proto::OpCode::WriteFull, b"hello", tid, to)
}

fn read_op(to: u64) -> super::Op {
    op("obj", shoal_proto::OpCode::Read, b"", 99, to)
}

fn op_code(e: &Effect) -> (ReplyTo, u32, String) {
    match e {
        Effect::Reply {
            to,
            msg: Message::OsdOpReply(r),
            ..
        } => (*to, r.code, r.message.clone()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_op_sent_to_a_replica_or_placed_before_the_interval_is_refused() {
    let mut r = member(2, &[1, 2]);
    assert_eq!(
        r.client_op(write_op(1, 1)),
        vec![super::op_error(
            ReplyTo(1),
            OsdErrorCode::WrongPrimary,
            EPOCH,
            "osd.2 is not the primary of pg 1.0 in epoch 10".into()
        )]
    );
    let mut p = member(1, &[1, 2]);
    let mut old = write_op(1, 2);
    old.msg.epoch = START - 1;
    assert_eq!(
        p.client_op(old),
        vec![super::op_error(
            ReplyTo(2),
            OsdErrorCode::StaleEpoch,
            EPOCH,
            "op placed in epoch 7 but pg 1.0 changed in epoch 8".into()
        )]
    );
    assert!(p.inflight.is_empty());
}

#[test]
fn an_op_waits_while_the_pg_is_not_active() {
    let mut p = member(1, &[1, 2]);
    p.state = State::Peering;
    assert_eq!(p.client_op(write_op(1, 1)), vec![]);
    assert_eq!(p.next_waiting(), None, "not before the PG is active");
    p.state = State::Active;
    assert_eq!(p.next_waiting(), Some(write_op(1, 1)));
}

#[test]
fn a_write_is_executed_logged_and_replicated() {
    let mut p = member(1, &[1, 2]);
    let fx = p.client_op(write_op(1, 1));
    assert_eq!(fx[0], Effect::Wrote(5));
    assert!(matches!(
        &fx[1],
        Effect::Apply {
            then: Then::Local(v),
            ..
        } if *v == version(1)
    ));
    let Effect::Replicate { version: v, write } = &fx[2] else {
        panic!("{fx:?}")
    };
    assert_eq!((*v, write.osd), (version(1), 2));
    // The client's buffer and checksum go to the member as they came.
    assert_eq!(write.data, Bytes::from_static(b"hello"));
    assert_eq!(write.data_crc, crc32c::crc32c(b"hello"));
    assert_eq!(fx.len(), 3);
    let f = &p.inflight[&version(1)];
    assert_eq!(
        (f.waiting.clone(), f.responders.clone()),
        (vec![2], vec![ReplyTo(1)])
    );
    // The object's mtime is the engine's clock.
    run_applies(&p, &fx);
    let got = p
        .store
        .read(&p.coll, &p.inflight[&version(1)].key, 0, 10)
        .unwrap();
    assert_eq!(&got[..], b"hello");
}

#[test]
fn a_read_waits_for_the_change_in_flight_then_sees_it() {
    let mut p = member(1, &[1, 2]);
    let fx = p.client_op(write_op(1, 1));
    run_applies(&p, &fx);
    // Not before every member has the change.
    assert_eq!(p.client_op(read_op(2)), vec![]);
    p.local_committed(version(1), Ok(()));
    let fx = p.rep_acked(version(1), 2, Ok(()));
    let key = p
        .pool
        .as_ref()
        .map(|pool| crate::object::object_key(pool, "", "obj").unwrap())
        .unwrap();
    assert_eq!(fx.last(), Some(&Effect::RunWaiting(key.clone())));
    let held: Vec<super::Op> = p.take_waiting_for(&key).into();
    assert_eq!(held, vec![read_op(2)]);
    let fx = p.execute(read_op(2));
    let [
        Effect::Reply {
            to: ReplyTo(2),
            msg: Message::OsdOpReply(r),
            data,
            ..
        },
    ] = &fx[..]
    else {
        panic!("{fx:?}")
    };
    assert_eq!(r.code, 0);
    assert_eq!(&data[..], b"hello");
}

#[test]
fn a_resent_change_is_answered_once_with_its_first_result() {
    let mut p = member(1, &[1]);
    let fx = p.client_op(write_op(7, 1));
    run_applies(&p, &fx);
    // Resent while in flight: answered with the first, not applied again.
    assert_eq!(p.client_op(write_op(7, 2)), vec![]);
    assert_eq!(
        p.inflight[&version(1)].responders,
        vec![ReplyTo(1), ReplyTo(2)]
    );
    let done = p.local_committed(version(1), Ok(()));
    assert_eq!(
        done.iter()
            .filter(|e| matches!(e, Effect::Reply { .. }))
            .count(),
        2
    );
    // Resent after it completed: the log answers.
    let fx = p.client_op(write_op(7, 3));
    let Effect::Acked(a) = &fx[0] else {
        panic!("{fx:?}")
    };
    assert_eq!(a.version, version(1));
    let Effect::Reply {
        to: ReplyTo(3),
        msg: Message::OsdOpReply(r),
        ..
    } = &fx[1]
    else {
        panic!("{fx:?}")
    };
    assert!(r.replayed);
    assert_eq!((r.code, r.version), (0, 1));
    assert_eq!(p.log.info.last_update, version(1), "no second change");
}

#[test]
fn a_full_osd_refuses_changes_but_takes_removals() {
    let mut p = member(1, &[1]);
    let fx = p.client_op(write_op(1, 1));
    run_applies(&p, &fx);
    p.local_committed(version(1), Ok(()));
    p.full.store(true, std::sync::atomic::Ordering::Relaxed);
    let fx = p.client_op(write_op(2, 2));
    assert_eq!(
        op_code(&fx[0]),
        (
            ReplyTo(2),
            OsdErrorCode::NoSpace as u32,
            "osd.1 is full (over 95% used)".into()
        )
    );
    let fx = p.client_op(op("obj", shoal_proto::OpCode::Remove, b"", 3, 3));
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Apply { then: Then::Local(v), .. } if *v == version(2))),
        "{fx:?}"
    );
}

#[test]
fn a_full_osd_takes_a_change_marked_full_try() {
    let mut p = member(1, &[1]);
    p.full.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut w = write_op(1, 1);
    w.msg.flags |= shoal_proto::OsdOp::FLAG_FULL_TRY;
    let fx = p.client_op(w);
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Apply { then: Then::Local(v), .. } if *v == version(1))),
        "{fx:?}"
    );
}

#[test]
fn a_malformed_op_is_refused_and_counted() {
    let mut p = member(1, &[1]);
    let mut bad = write_op(1, 1);
    bad.data = Bytes::from_static(b"hel"); // shorter than its sub-op says
    let fx = p.client_op(bad);
    assert_eq!(op_code(&fx[0]).1, OsdErrorCode::InvalidArgument as u32);
    assert_eq!(fx.len(), 1);
    assert_eq!(
        p.counters
            .refused
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    let fx = p.client_op(op("", shoal_proto::OpCode::Read, b"", 2, 2));
    assert_eq!(op_code(&fx[0]).1, OsdErrorCode::InvalidArgument as u32);
}

#[test]
fn at_a_new_interval_queued_ops_from_before_it_are_refused_and_the_rest_kept() {
    let mut p = member(1, &[1]);
    p.state = State::Peering;
    let mut old = write_op(1, 1);
    old.msg.epoch = START;
    p.client_op(old);
    p.client_op(write_op(2, 2));
    p.interval_start = EPOCH;
    let fx = p.refuse_stale_waiting("pg 1.0 changed in epoch 10");
    assert_eq!(
        fx,
        vec![super::op_error(
            ReplyTo(1),
            OsdErrorCode::StaleEpoch,
            EPOCH,
            "pg 1.0 changed in epoch 10".into()
        )]
    );
    assert_eq!(p.waiting.len(), 1);
    // No longer the primary: what is left is refused too.
    p.whoami = 3;
    assert_eq!(
        op_code(&p.refuse_waiting()[0]).1,
        OsdErrorCode::WrongPrimary as u32
    );
    assert!(p.waiting.is_empty());
}

// ---- peering -----------------------------------------------------------

/// Primary osd.1 of PG 1.0 acting [1, 2, 3] in epoch [`EPOCH`], OSDs 0-3
/// up; the monitors recorded its `up_thru` for this interval when
/// `up_thru`.
fn peering_primary(up_thru: bool) -> PgCore {
    let map = osd_map(EPOCH, |inc| {
        if up_thru {
            inc.new_up_thru.insert(1, START);
        }
    });
    let mut p = member(1, &[1, 2, 3]);
    p.map = Some(map);
    p.state = State::Peering;
    p
}

fn query(osd: i32, delay_ms: u64) -> Effect {
    Effect::Query {
        osd,
        delay: std::time::Duration::from_millis(delay_ms),
        limit: PgConfig::default().peer_timeout,
        interval_start: START,
    }
}

/// Every member's answer: an empty PG like ours.
fn empty_member() -> crate::pg::MemberLog {
    crate::pg::MemberLog::default()
}

#[test]
fn peering_queries_every_member_and_the_previous_acting_set() {
    let mut p = peering_primary(true);
    p.prior = vec![0, 1];
    let fx = p.start_peering();
    // A member of the previous interval only is given little time.
    let prior = Effect::Query {
        osd: 0,
        delay: std::time::Duration::ZERO,
        limit: crate::pg::peering::PRIOR_QUERY_TIMEOUT,
        interval_start: START,
    };
    assert_eq!(
        fx,
        vec![Effect::FenceCopies, prior, query(2, 0), query(3, 0)]
    );
    assert_eq!(p.state, State::Peering);
    assert_eq!(p.peers_pending, vec![0, 2, 3]);
}

#[test]
fn a_previous_member_that_goes_down_while_queried_is_given_up_at_once() {
    let map = osd_map(EPOCH, |_| {});
    let mut p = fresh_primary(&map);
    p.advance_map(Arc::clone(&map));
    let acting = p.acting.clone();
    let gone = (0..4).find(|o| !acting.contains(o)).unwrap();
    p.prior = acting.iter().copied().chain([gone]).collect();
    p.start_peering();
    assert!(p.peers_pending.contains(&gone), "{:?}", p.peers_pending);
    // The members answer; the member of the previous interval stays silent.
    let (me, interval) = (p.whoami, p.interval_start);
    for m in acting.iter().copied().filter(|m| *m != me) {
        assert!(p.peer_info(m, interval, Ok(empty_member())).is_empty());
    }
    assert_eq!(p.peers_pending, vec![gone]);
    // A map marks it down: its query is given up now, and peering goes on.
    let next = osd_map(EPOCH + 1, |inc| {
        inc.new_down.insert(gone);
    });
    let fx = p.advance_map(next);
    assert!(p.peers_pending.is_empty());
    assert!(p.peering.probe_failed.contains(&gone));
    assert_eq!(
        fx,
        vec![Effect::AskPastIntervals {
            since: 0,
            interval_start: p.interval_start
        }]
    );
}

#[test]
fn below_min_size_the_pg_is_peered_and_queries_nobody() {
    let mut p = peering_primary(true);
    p.acting = vec![1];
    p.up = vec![1];
    p.pool = Some(shoal_maps::Pool::replicated(PG.pool, "rbd", 3, 2, 1, 0));
    assert_eq!(p.start_peering(), vec![Effect::FenceCopies]);
    assert_eq!(p.state, State::Peered);
    // Below min_size only through a pg_temp while the up set is large
    // enough: it peers, since only peering asks for the pg_temp to go.
    p.up = vec![1, 2, 3];
    let fx = p.start_peering();
    assert_eq!(fx, vec![Effect::FenceCopies, query(2, 0), query(3, 0)]);
    assert_eq!(p.state, State::Peering);
}

#[test]
fn an_acting_member_that_does_not_answer_is_asked_again_a_former_one_is_not() {
    let mut p = peering_primary(true);
    p.prior = vec![0];
    p.start_peering();
    assert_eq!(
        p.peer_info(2, START, Err("refused".into())),
        vec![query(2, 500)]
    );
    assert_eq!(p.peer_info(0, START, Err("gone".into())), vec![]);
    assert!(p.peering.probe_failed.contains(&0));
    // An answer for an older interval changes nothing.
    assert_eq!(p.peer_info(3, START - 1, Ok(empty_member())), vec![]);
    assert_eq!(p.peers_pending, vec![2, 3]);
}

#[test]
fn once_every_member_answered_the_monitors_are_asked_for_past_intervals() {
    let mut p = peering_primary(true);
    p.start_peering();
    let mut newer = empty_member();
    newer.info.last_epoch_started = 6;
    assert_eq!(p.peer_info(2, START, Ok(newer)), vec![]);
    assert_eq!(
        p.peer_info(3, START, Ok(empty_member())),
        vec![Effect::AskPastIntervals {
            since: 6,
            interval_start: START
        }]
    );
}

fn interval(first: u32, last: u32, acting: Vec<i32>) -> PastInterval {
    PastInterval {
        first,
        last,
        up: acting.clone(),
        primary: acting[0],
        acting,
        maybe_went_rw: true,
    }
}

use shoal_maps::PastInterval;

#[test]
fn a_past_interval_with_no_member_heard_makes_the_pg_down_or_incomplete() {
    // osd.9 does not exist: none of that interval's members is up.
    let mut p = peering_primary(true);
    p.start_peering();
    p.peer_info(2, START, Ok(empty_member()));
    p.peer_info(3, START, Ok(empty_member()));
    let fx = p.past_intervals(START, Ok(vec![interval(3, 7, vec![9])]));
    assert_eq!(fx, vec![Effect::StatsChanged]);
    assert_eq!(p.state, State::Down);
    // Its members up but silent: incomplete, and it looks again later.
    let mut p = peering_primary(true);
    p.start_peering();
    p.peer_info(2, START, Ok(empty_member()));
    p.peer_info(3, START, Ok(empty_member()));
    // osd.0 is up: it is probed first.
    let fx = p.past_intervals(START, Ok(vec![interval(3, 7, vec![0])]));
    assert_eq!(
        fx,
        vec![Effect::Query {
            osd: 0,
            delay: std::time::Duration::ZERO,
            limit: crate::pg::peering::PRIOR_QUERY_TIMEOUT,
            interval_start: START,
        }]
    );
    let fx = p.peer_info(0, START, Err("silent".into()));
    assert_eq!(
        fx,
        vec![
            Effect::StatsChanged,
            Effect::PeeringRetryLater {
                interval_start: START
            }
        ]
    );
    assert_eq!(p.state, State::Incomplete);
    assert!(
        p.peering
            .blocked
            .as_deref()
            .is_some_and(|b| b.contains("none of its members answered"))
    );
}

#[test]
fn activation_waits_for_the_monitors_to_record_up_thru() {
    let mut p = peering_primary(false);
    p.start_peering();
    p.peer_info(2, START, Ok(empty_member()));
    p.peer_info(3, START, Ok(empty_member()));
    assert_eq!(
        p.past_intervals(START, Ok(vec![])),
        vec![
            Effect::WantUpThru(START),
            Effect::PeeringRetryLater {
                interval_start: START
            }
        ]
    );
    assert!(p.peering.waiting_up_thru);
}

#[test]
fn members_that_agree_are_activated_and_the_pg_goes_active() {
    let mut p = peering_primary(true);
    p.start_peering();
    p.peer_info(2, START, Ok(empty_member()));
    p.peer_info(3, START, Ok(empty_member()));
    let fx = p.past_intervals(START, Ok(vec![]));
    let [Effect::PersistActivation(txn)] = &fx[..] else {
        panic!("{fx:?}")
    };
    assert!(!txn.is_empty(), "the log's info with this interval");
    assert_eq!(p.state, State::Activating);
    assert_eq!(p.log.info.last_epoch_started, START);
    // Persisted: every member gets the same log.
    let fx = p.activation_persisted(Ok(()));
    let [
        Effect::SendActivations {
            msgs,
            interval_start,
        },
    ] = &fx[..]
    else {
        panic!("{fx:?}")
    };
    assert_eq!(*interval_start, START);
    assert_eq!(msgs.iter().map(|(o, _)| *o).collect::<Vec<_>>(), vec![2, 3]);
    assert!(
        msgs.iter()
            .all(|(_, m)| m.activate && !m.backfill && m.interval_start == START)
    );
    assert_eq!(p.recovery_generation, 1);
    // Every member took it: active, nothing to recover.
    assert_eq!(
        p.activated(START, Ok(())),
        vec![
            Effect::StatsChanged,
            Effect::StartRecovery,
            Effect::DrainWaiting
        ]
    );
    assert_eq!(p.state, State::Active);
    assert!(p.recovery.is_none());
}

/// Erasure coding: a member of a past interval that undoes its divergent
/// changes (the plan's `roll_back`) gets the activation too, but no
/// recovery and no say in whether strays are purged.
#[test]
fn a_past_member_that_rolls_back_is_activated_but_not_recovered() {
    let mut p = peering_primary(true);
    p.state = State::Activating;
    let member = |v: &[u32]| crate::pg::MemberRecovery {
        backfill: false,
        missing: v.iter().map(|i| (obj(*i), version(1))).collect(),
    };
    p.plan = Some(RecoveryPlan {
        auth: 1,
        members: [
            (1, member(&[])),
            (2, member(&[])),
            (3, member(&[])),
            (7, member(&[4])),
        ]
        .into(),
        roll_back: [7].into(),
        ..Default::default()
    });
    let fx = p.listed(START, Ok(Vec::new()));
    assert!(matches!(&fx[..], [Effect::PersistActivation(_)]), "{fx:?}");
    let fx = p.activation_persisted(Ok(()));
    let [Effect::SendActivations { msgs, .. }] = &fx[..] else {
        panic!("{fx:?}")
    };
    assert_eq!(
        msgs.iter().map(|(o, _)| *o).collect::<Vec<_>>(),
        vec![2, 3, 7]
    );
    let (_, to7) = &msgs[2];
    assert!(to7.activate && !to7.backfill);
    assert_eq!(MissingSet::decode(&to7.missing).unwrap().len(), 1);
    let rs = p.recovery.as_ref().unwrap();
    assert!(
        rs.is_done(),
        "osd.7 lacks obj 4 but is no member to recover"
    );
}

#[test]
fn a_failed_activation_or_a_refused_persist_peers_again() {
    let mut p = peering_primary(true);
    p.start_peering();
    p.peer_info(2, START, Ok(empty_member()));
    p.peer_info(3, START, Ok(empty_member()));
    p.past_intervals(START, Ok(vec![]));
    let fx = p.activation_persisted(Err("no space".into()));
    assert_eq!(
        fx,
        vec![Effect::FenceCopies, query(2, 1000), query(3, 1000)]
    );
    assert_eq!(p.state, State::Peering);
    assert_eq!(
        p.log.info.last_epoch_started, 0,
        "the log went back to the store's"
    );
    // An activation a member refused.
    let mut p = peering_primary(true);
    p.start_peering();
    p.peer_info(2, START, Ok(empty_member()));
    p.peer_info(3, START, Ok(empty_member()));
    p.past_intervals(START, Ok(vec![]));
    p.activation_persisted(Ok(()));
    assert_eq!(
        p.activated(START, Err("osd.3: refused".into())),
        vec![Effect::FenceCopies, query(2, 500), query(3, 500)]
    );
}

#[test]
fn a_member_that_needs_a_backfill_while_complete_ones_exist_asks_for_pg_temp() {
    // osd.3 has no copy at all but osd.0 (up, of the previous interval)
    // has the whole log: the primary asks to keep serving from 1, 2, 0
    // while 3 is backfilled.
    let mut p = peering_primary(true);
    let mut t = Transaction::new();
    let mut log = PgLog::default();
    log.append(entry(1), p.cfg.log_limits, p.coll, &mut t);
    log.append(entry(2), p.cfg.log_limits, p.coll, &mut t);
    let full = crate::pg::MemberLog {
        info: log.info,
        entries: log.entries().cloned().collect(),
        ..Default::default()
    };
    p.log = log;
    p.prior = vec![0];
    p.start_peering();
    p.peer_info(0, START, Ok(full.clone()));
    p.peer_info(2, START, Ok(full));
    let mut none = empty_member();
    none.info.log_tail = Version::default();
    p.peer_info(3, START, Ok(none));
    let fx = p.past_intervals(START, Ok(vec![]));
    let [
        Effect::RequestPgTemp(want),
        Effect::PeeringRetryLater { .. },
    ] = &fx[..]
    else {
        panic!("{fx:?}")
    };
    assert!(!want.contains(&3), "{want:?}");
    assert_eq!(p.peering.waiting_pg_temp.as_ref(), Some(want));
}

// ---- recovery scheduling -----------------------------------------------

use crate::pg::RecoveryPlan;
use crate::pg::recover::{ObjectJob, RecoveryState};

fn obj(i: u32) -> ObjectKey {
    ObjectKey::new(i, format!("o{i}").into_bytes())
}

/// Active primary osd.1 (acting [1, 2, 3]) that lacks `own` objects while
/// osd.3 lacks `on3`; osd.3 is backfilled when `backfill`.
fn recovering(own: &[u32], on3: &[u32], backfill: bool) -> PgCore {
    let mut p = peering_primary(true);
    p.state = State::Active;
    let set = |v: &[u32]| MissingSet::from_map(v.iter().map(|i| (obj(*i), version(1))).collect());
    p.missing = set(own);
    let empty = set(&[]);
    let theirs = set(on3);
    p.recovery = Some(RecoveryState::new(
        1,
        1,
        &p.missing,
        [(2, false, &empty), (3, backfill, &theirs)].into_iter(),
    ));
    let member = |v: &[u32]| crate::pg::MemberRecovery {
        backfill: false,
        missing: v.iter().map(|i| (obj(*i), version(1))).collect(),
    };
    p.plan = Some(RecoveryPlan {
        auth: 2,
        members: [(1, member(own)), (2, member(&[])), (3, member(on3))].into(),
        ..Default::default()
    });
    p.recovery_generation = 1;
    p
}

fn job(i: u32, pull_from: Option<i32>, push_to: Vec<i32>) -> Effect {
    Effect::RecoverObject(ObjectJob {
        generation: 1,
        key: obj(i),
        pull_from,
        push_to,
        expect: None,
        batch: Vec::new(),
        throttled: true,
        sources: Vec::new(),
    })
}

/// `p`'s map with a snapshot taken in its pool: its objects may have clones.
fn with_snapshots(p: &mut PgCore) {
    let Some(map) = p.map.as_ref() else {
        panic!("no map");
    };
    let mut map = (**map).clone();
    let mut inc = shoal_maps::Incremental::next(&map);
    let mut pool = map.pool(PG.pool).cloned().unwrap();
    pool.snap_seq = 4;
    inc.new_pools.insert(PG.pool, pool);
    map.apply(&inc).unwrap();
    p.map = Some(Arc::new(map));
}

fn batch(first: u32, more: &[u32], push_to: Vec<i32>) -> Effect {
    Effect::RecoverObject(ObjectJob {
        generation: 1,
        key: obj(first),
        pull_from: None,
        push_to,
        expect: None,
        batch: more.iter().map(|i| (obj(*i), None)).collect(),
        throttled: true,
        sources: Vec::new(),
    })
}

fn recovered(i: u32, done: &[i32]) -> crate::recovery::Recovered {
    crate::recovery::Recovered {
        key: obj(i),
        done: done.iter().copied().collect(),
        error: None,
    }
}

#[test]
fn recovery_pulls_what_the_primary_lacks_and_pushes_what_replicas_lack_within_its_slots() {
    let mut p = recovering(&[1], &[1, 2, 3, 4], false);
    with_snapshots(&mut p);
    assert_eq!(p.start_recovery(), vec![Effect::PumpRecovery]);
    // recovery_max_active (3) objects at once: the primary's own first
    // pulled from a member that has it, then pushed with the others; one
    // job each, as the pool has snapshots (clones come with each head).
    assert_eq!(
        p.pump(),
        vec![
            job(1, Some(2), vec![3]),
            job(2, None, vec![3]),
            job(3, None, vec![3])
        ]
    );
    assert_eq!(p.pump(), vec![], "every slot is taken");
    // One done: the next starts; ops waiting for it run.
    let fx = p.object_recovered(1, obj(1), [1, 3].into(), None);
    assert_eq!(fx, vec![Effect::RunWaiting(obj(1)), Effect::PumpRecovery]);
    assert!(p.missing.is_empty());
    assert_eq!(p.pump(), vec![job(4, None, vec![3])]);
}

#[test]
fn objects_pushed_to_the_same_members_go_in_one_job_that_takes_one_slot() {
    // osd.3 lacks 2-9, osd.2 lacks 5: 2-4 go to osd.3 together, 5 on
    // its own (to both), 6-9 together again.
    let all = [1, 2, 3, 4, 5, 6, 7, 8, 9];
    let mut p = recovering(&[1], &all, false);
    let set = |v: &[u32]| MissingSet::from_map(v.iter().map(|i| (obj(*i), version(1))).collect());
    let (on2, on3) = (set(&[5]), set(&all));
    p.recovery = Some(RecoveryState::new(
        1,
        1,
        &p.missing,
        [(2, false, &on2), (3, false, &on3)].into_iter(),
    ));
    assert_eq!(
        p.pump(),
        vec![
            job(1, Some(2), vec![3]),
            batch(2, &[3, 4], vec![3]),
            batch(5, &[], vec![2, 3]),
        ]
    );
    assert_eq!(p.pump(), vec![], "three jobs: every slot is taken");
    assert_eq!(p.recovery.as_ref().unwrap().in_progress().0, 5);
    // The batch's objects are recovered as each message is acknowledged
    // (ops waiting for them go on); its slot is free once the job ends,
    // and the rest go in one job.
    let fx = p.objects_recovered(1, vec![recovered(2, &[3]), recovered(3, &[3])], false);
    assert_eq!(
        fx,
        vec![
            Effect::RunWaiting(obj(2)),
            Effect::RunWaiting(obj(3)),
            Effect::PumpRecovery
        ]
    );
    assert_eq!(p.pump(), vec![], "the job goes on");
    let fx = p.objects_recovered(1, vec![recovered(4, &[3])], false);
    assert_eq!(fx, vec![Effect::RunWaiting(obj(4)), Effect::PumpRecovery]);
    assert_eq!(
        p.objects_recovered(1, vec![], true),
        vec![Effect::PumpRecovery]
    );
    assert_eq!(p.recovery.as_ref().unwrap().copies_left(), 8);
    assert_eq!(p.pump(), vec![batch(6, &[7, 8, 9], vec![3])]);
    // osd_recovery_batch_objects 1: each object on its own.
    let mut p = recovering(&[], &[1, 2, 3, 4], false);
    p.cfg.recovery_batch_objects = 1;
    assert_eq!(
        p.pump(),
        vec![
            job(1, None, vec![3]),
            job(2, None, vec![3]),
            job(3, None, vec![3])
        ]
    );
}

#[test]
fn the_last_object_recovered_makes_the_pg_clean() {
    let mut p = recovering(&[], &[1], false);
    p.pump();
    let fx = p.object_recovered(1, obj(1), [3].into(), None);
    assert_eq!(
        fx,
        vec![
            Effect::StatsChanged,
            Effect::RunWaiting(obj(1)),
            Effect::PumpRecovery
        ]
    );
    assert!(p.recovery.is_none() && p.plan.is_none());
    // A late answer of the finished recovery changes nothing.
    assert_eq!(p.object_recovered(1, obj(1), [3].into(), None), vec![]);
}

#[test]
fn a_failed_object_is_tried_again_later_and_reported() {
    let mut p = recovering(&[], &[1], false);
    p.pump();
    let fx = p.object_recovered(1, obj(1), [].into(), Some("push to osd.3: refused".into()));
    assert_eq!(
        fx,
        vec![
            Effect::StatsChanged,
            Effect::RecoveryRetryAfter {
                delay: std::time::Duration::from_secs(1),
                generation: 1
            },
            // Reads waiting for it may run: the primary has it.
            Effect::RunWaiting(obj(1)),
            Effect::PumpRecovery
        ]
    );
    // Deferred until the retry.
    assert_eq!(p.pump(), vec![]);
    assert_eq!(p.recovery_retry(1), vec![Effect::PumpRecovery]);
}

#[test]
fn a_backfill_waits_for_a_reservation() {
    let mut p = recovering(&[], &[1], true);
    assert_eq!(
        p.start_recovery(),
        vec![
            Effect::ReserveBackfill { generation: 1 },
            Effect::PumpRecovery
        ]
    );
    assert_eq!(p.pump(), vec![], "the backfilled member waits for its slot");
    let sem = Arc::new(tokio::sync::Semaphore::new(1));
    let permit = Arc::clone(&sem).try_acquire_owned().unwrap();
    assert_eq!(
        p.backfill_reserved(1, permit),
        vec![Effect::StatsChanged, Effect::PumpRecovery]
    );
    assert_eq!(p.pump(), vec![job(1, None, vec![3])]);
}

#[test]
fn an_object_no_member_holds_is_unfound_and_searched_for_once() {
    let mut p = recovering(&[1], &[], false);
    // Nobody else has it either.
    if let Some(plan) = p.plan.as_mut() {
        for m in plan.members.values_mut() {
            m.missing.insert(obj(1), version(1));
        }
    }
    assert_eq!(p.pump(), vec![Effect::UnfoundSearchLater { generation: 1 }]);
    assert_eq!(p.pump(), vec![], "searched for once");
    // The search: what is in flight fails, peering asks every up OSD.
    let fx = p.unfound_search(1);
    assert!(p.search_everywhere);
    assert_eq!(fx[0], Effect::FenceCopies);
    let asked: Vec<i32> = fx
        .iter()
        .filter_map(|e| match e {
            Effect::Query { osd, .. } => Some(*osd),
            _ => None,
        })
        .collect();
    assert_eq!(asked, vec![0, 2, 3]);
}

// ---- scrub -------------------------------------------------------------

fn command_answer(fx: &[Effect]) -> (ReplyTo, shoal_proto::PgCommandReply) {
    match fx {
        [
            Effect::ReplyLater {
                to,
                msg: Message::PgCommandReply(r),
                ..
            },
        ] => (*to, r.clone()),
        other => panic!("{other:?}"),
    }
}

fn clean_primary() -> PgCore {
    let mut p = member(1, &[1, 2]);
    p.state = State::Active;
    p
}

#[test]
fn a_scrub_is_refused_off_the_primary_while_not_clean_or_unknown() {
    let mut r = member(2, &[1, 2]);
    let (to, a) = command_answer(&r.scrub_command("scrub", ReplyTo(1)));
    assert_eq!(
        (to, a.code),
        (ReplyTo(1), OsdErrorCode::WrongPrimary as u32)
    );
    let mut p = clean_primary();
    let (_, a) = command_answer(&p.scrub_command("polish", ReplyTo(2)));
    assert_eq!(a.code, OsdErrorCode::InvalidArgument as u32);
    p.state = State::Peering;
    let (_, a) = command_answer(&p.scrub_command("scrub", ReplyTo(3)));
    assert_eq!(
        (a.code, a.message.as_str()),
        (OsdErrorCode::Again as u32, "pg 1.0 is not active+clean")
    );
    assert!(p.scrub.is_none());
}

#[test]
fn a_scrub_runs_chunk_after_chunk_and_answers_with_what_it_found() {
    let mut p = clean_primary();
    assert_eq!(
        p.scrub_command("scrub", ReplyTo(1)),
        vec![Effect::ScrubStepAfter(std::time::Duration::ZERO)]
    );
    // Asked again, deeper, while it runs: one scrub, both answered.
    assert_eq!(p.scrub_command("deep-scrub", ReplyTo(2)), vec![]);
    // A change in flight: the chunk waits until every member has it.
    submit(&mut p, 1);
    assert_eq!(
        p.scrub_step(),
        vec![Effect::ScrubStepAfter(std::time::Duration::from_millis(20))]
    );
    p.inflight.clear();
    assert_eq!(
        p.scrub_step(),
        vec![Effect::ScrubChunk {
            deep: true,
            repair: false,
            cursor: None
        }]
    );
    let chunk = |next: Option<ObjectKey>, found| {
        Ok(crate::pg::scrub::ChunkOutcome {
            scrubbed: 64,
            found,
            repaired: 0,
            next,
        })
    };
    assert_eq!(
        p.scrub_chunk_done(chunk(Some(obj(7)), vec![])),
        vec![Effect::ScrubStepAfter(std::time::Duration::ZERO)]
    );
    assert_eq!(
        p.scrub_step(),
        vec![Effect::ScrubChunk {
            deep: true,
            repair: false,
            cursor: Some(obj(7))
        }]
    );
    let bad = crate::scrub::Inconsistency {
        key: obj(8),
        bad: vec![2],
        auth: Some(1),
        why: "data digest differs".into(),
    };
    let fx = p.scrub_chunk_done(chunk(None, vec![bad]));
    assert_eq!(fx[0], Effect::StatsChanged);
    assert!(matches!(&fx[1], Effect::Record(t) if !t.is_empty()));
    let answers: Vec<(ReplyTo, serde_json::Value)> = fx[2..]
        .iter()
        .map(|e| {
            let (to, a) = command_answer(std::slice::from_ref(e));
            (to, serde_json::from_str(&a.output).unwrap())
        })
        .collect();
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[0].0, ReplyTo(1));
    assert_eq!(answers[1].0, ReplyTo(2));
    assert_eq!(answers[0].1["objects"], 128);
    assert_eq!(answers[0].1["errors"], 1);
    assert_eq!(answers[0].1["deep"], true);
    // The record: stamped with the engine's clock, the object left
    // inconsistent (no repair asked).
    assert_eq!(
        (p.scrub_record.stamp_ms, p.scrub_record.deep_stamp_ms),
        (1_000, 1_000)
    );
    assert_eq!(p.scrub_record.inconsistent.len(), 1);
    assert!(p.scrub.is_none());
}

#[test]
fn a_scrub_stops_when_the_pg_changes_interval() {
    let mut p = clean_primary();
    p.scrub_command("scrub", ReplyTo(4));
    p.interval_start = EPOCH;
    let (to, a) = command_answer(&p.scrub_step());
    assert_eq!(to, ReplyTo(4));
    assert_eq!(a.code, OsdErrorCode::Again as u32);
    assert_eq!(
        a.message,
        "scrub of pg 1.0 stopped: the PG changed interval"
    );
    assert!(p.scrub.is_none());
}

#[test]
fn scheduled_scrubs_start_when_due_one_at_a_time() {
    let day = 86_400_000;
    let t0 = 5_000;
    let mut p = clean_primary();
    p.scrub_record.stamp_ms = 0;
    p.scrub_record.deep_stamp_ms = 0;
    // Never scrubbed: the first tick starts the clocks and records them,
    // it does not scrub (a new cluster's PGs would all be due at once).
    let fx = p.scrub_tick(t0, day, 7 * day);
    assert!(matches!(fx.as_slice(), [Effect::Record(_)]), "{fx:?}");
    assert!(p.scrub.is_none());
    assert_eq!(
        (p.scrub_record.stamp_ms, p.scrub_record.deep_stamp_ms),
        (t0, t0)
    );
    let start = vec![Effect::ScrubStepAfter(std::time::Duration::ZERO)];
    assert_eq!(p.scrub_tick(t0 + day - 1, day, 7 * day), vec![]);
    // A day on: a shallow scrub.
    assert_eq!(p.scrub_tick(t0 + day, day, 7 * day), start);
    assert!(p.scrub.as_ref().is_some_and(|j| !j.is_deep()));
    assert_eq!(
        p.scrub_tick(t0 + day, day, 7 * day),
        vec![],
        "one at a time"
    );
    // A week on: a deep one.
    p.scrub = None;
    assert_eq!(p.scrub_tick(t0 + 7 * day, day, 7 * day), start);
    assert!(p.scrub.as_ref().is_some_and(|j| j.is_deep()));
}

// ---- maps and intervals ------------------------------------------------

/// [`osd_map`] with `down` marked down in its last epoch.
fn pool_map(epoch: u32, down: Option<i32>) -> Arc<OsdMap> {
    osd_map(epoch, |inc| {
        if let Some(o) = down {
            inc.new_down.insert(o);
        }
    })
}

/// OSDs 0-3 up, pool 1 (size 3, one PG) created, up to `epoch`; `last`
/// edits the last incremental.
fn osd_map(epoch: u32, last: impl Fn(&mut shoal_maps::Incremental)) -> Arc<OsdMap> {
    let crush = shoal_crush::build_map(&shoal_crush::BuildSpec::hosts(4, 1, None)).unwrap();
    let mut map = OsdMap::new([1; 16], 0, crush).unwrap();
    while map.epoch.0 < epoch {
        let mut inc = shoal_maps::Incremental::next(&map);
        if map.epoch.0 == 0 {
            inc.new_max_osd = Some(4);
            for o in 0..4 {
                inc.new_osds.insert(o);
                inc.new_up.insert(o, format!("127.0.0.1:{}", 6800 + o));
                inc.new_weight.insert(o, shoal_maps::WEIGHT_IN);
            }
            inc.new_pools.insert(
                PG.pool,
                shoal_maps::Pool::replicated(PG.pool, "rbd", 3, 2, 1, 0),
            );
        }
        if inc.epoch.0 == epoch {
            last(&mut inc);
        }
        map.apply(&inc).unwrap();
    }
    Arc::new(map)
}

/// The primary of PG 1.0 in `map`, before it has seen any map.
fn fresh_primary(map: &OsdMap) -> PgCore {
    let m = map.pg_to_up_acting(PG).unwrap();
    let mut p = member(m.acting_primary, &m.acting);
    p.map = None;
    p.pool = None;
    p.up = Vec::new();
    p.acting = Vec::new();
    p.primary = -1;
    p.interval_start = 0;
    p.state = State::Stray;
    p
}

#[test]
fn the_first_map_starts_an_interval_and_the_primary_peers() {
    let map = pool_map(EPOCH, None);
    let mut p = fresh_primary(&map);
    let fx = p.advance_map(Arc::clone(&map));
    assert_eq!(
        fx[..3],
        [
            Effect::DropConnections,
            Effect::FenceCopies,
            Effect::StatsChanged
        ]
    );
    assert_eq!(fx[3], Effect::FenceCopies, "peering starts afresh");
    let asked = fx
        .iter()
        .filter(|e| matches!(e, Effect::Query { .. }))
        .count();
    assert_eq!(asked, 2, "{fx:?}");
    assert_eq!((p.state.clone(), p.interval_start), (State::Peering, EPOCH));
    // The same map again, or an older one: nothing.
    assert_eq!(p.advance_map(map), vec![]);
}

#[test]
fn a_new_interval_fails_what_is_in_flight_and_the_old_acting_set_becomes_prior() {
    let map = pool_map(EPOCH, None);
    let mut p = fresh_primary(&map);
    p.advance_map(Arc::clone(&map));
    let acting = p.acting.clone();
    p.state = State::Active;
    submit(&mut p, 1);
    // A member goes down in the next epoch.
    let gone = *acting.iter().find(|o| **o != p.whoami).unwrap();
    let next = pool_map(EPOCH + 1, Some(gone));
    let fx = p.advance_map(next);
    assert_eq!(
        fx[0],
        super::op_error(
            ReplyTo(1),
            OsdErrorCode::StaleEpoch,
            EPOCH + 1,
            "pg 1.0 changed in epoch 11".into()
        )
    );
    assert!(p.inflight.is_empty());
    assert_eq!(p.prior, acting);
    assert!(!p.acting.contains(&gone));
    assert_eq!(p.interval_start, EPOCH + 1);
}

#[test]
fn a_map_without_the_pool_leaves_a_stray_that_refuses_its_queued_ops() {
    let map = pool_map(EPOCH, None);
    let mut p = fresh_primary(&map);
    p.advance_map(Arc::clone(&map));
    p.state = State::Peering;
    p.client_op(write_op(1, 1));
    // The pool is deleted.
    let mut gone = (*pool_map(EPOCH + 1, None)).clone();
    let mut inc = shoal_maps::Incremental::next(&gone);
    inc.old_pools.insert(PG.pool);
    gone.apply(&inc).unwrap();
    let fx = p.advance_map(Arc::new(gone));
    assert_eq!(p.state, State::Stray);
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Reply { to: ReplyTo(1), .. })),
        "{fx:?}"
    );
    assert!(p.waiting.is_empty());
}

// ---- snapshot trimming -------------------------------------------------

fn snapset_of(p: &PgCore, k: &ObjectKey) -> Option<crate::object::SnapSet> {
    let b = p
        .store
        .getxattr(&p.coll, k, crate::object::SNAPSET_XATTR)
        .unwrap()?;
    crate::object::SnapSet::decode(&b)
}

fn clone_info(id: u64, snaps: &[u64], size: u64) -> crate::object::CloneInfo {
    crate::object::CloneInfo {
        id,
        snaps: snaps.to_vec(),
        size,
    }
}

/// Carries out a trim step's effects as the driver would: applies our
/// transaction and completes the change on both members. Returns the
/// step's log entry.
fn trim_once(p: &mut PgCore) -> LogEntry {
    let fx = p.snap_trim_step();
    let mut version = None;
    for e in &fx {
        match e {
            Effect::Apply { txn, then } => {
                p.store.apply_transaction(txn.clone()).unwrap();
                let Then::Local(v) = then else {
                    panic!("{then:?}")
                };
                version = Some(*v);
            }
            Effect::Replicate { write, .. } => assert_eq!(write.osd, 2),
            Effect::StatsChanged => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    let v = version.expect("a trim change");
    assert_eq!(p.snap_trim_poll(), vec![], "waits for its change");
    // Nobody is answered: the PG made the change of its own.
    let done: Vec<Effect> = [p.local_committed(v, Ok(())), p.rep_acked(v, 2, Ok(()))].concat();
    assert!(
        done.iter().all(|e| matches!(e, Effect::RunWaiting(_))),
        "{done:?}"
    );
    p.log.entries().next_back().cloned().unwrap()
}

#[test]
fn a_removed_snapshot_is_trimmed_object_by_object_as_logged_changes() {
    use crate::object::{SNAPDIR, SNAPSET_XATTR, SnapSet};
    let mut p = clean_primary();
    p.cfg.snap_trim_sleep = std::time::Duration::from_millis(7);
    let coll = p.coll;
    let a = ObjectKey::new(0x10, b"a".to_vec());
    let b = ObjectKey::new(0x20, b"b".to_vec());
    let a_set = SnapSet {
        seq: 3,
        clones: vec![clone_info(2, &[2, 1], 2), clone_info(3, &[3], 3)],
    };
    let b_set = SnapSet {
        seq: 2,
        clones: vec![clone_info(2, &[2], 5)],
    };
    let mut t = Transaction::new();
    t.write(coll, a.clone(), 0, Bytes::from_static(b"head"));
    t.set_xattr(coll, a.clone(), SNAPSET_XATTR, a_set.encode());
    t.write(coll, a.clone_for(2), 0, Bytes::from_static(b"a2"));
    t.write(coll, a.clone_for(3), 0, Bytes::from_static(b"a3_"));
    // b's head was removed: its snapdir keeps the snapset.
    t.write(coll, b.clone_for(2), 0, Bytes::from_static(b"b2___"));
    t.touch(coll, b.clone_for(SNAPDIR));
    t.set_xattr(coll, b.clone_for(SNAPDIR), SNAPSET_XATTR, b_set.encode());
    p.store.apply_transaction(t).unwrap();
    p.log.info.objects = 4;
    p.log.info.bytes = 4 + 2 + 3 + 5;

    // No snapshot removed: no walk.
    assert_eq!(p.snap_trim_poll(), vec![]);
    p.pool.as_mut().unwrap().removed_snaps = vec![(2, 1)];
    // A replica does not trim: its primary's changes reach it.
    let mut r = member(2, &[1, 2]);
    r.pool.as_mut().unwrap().removed_snaps = vec![(2, 1)];
    assert_eq!(r.snap_trim_poll(), vec![]);
    assert_eq!(
        p.snap_trim_poll(),
        vec![Effect::SnapTrimAfter(std::time::Duration::ZERO)]
    );
    assert_eq!(p.snap_trim_poll(), vec![], "one step on its way at a time");

    // a: clone 2 still stands for snapshot 1, so only the snapset changes.
    let e = trim_once(&mut p);
    assert_eq!(
        (e.key.clone(), e.op, e.reqid),
        (a.clone(), LogOp::Modify, None)
    );
    assert_eq!(
        snapset_of(&p, &a).unwrap().clones,
        vec![clone_info(2, &[1], 2), clone_info(3, &[3], 3)]
    );
    assert!(p.store.exists(&coll, &a.clone_for(2)).unwrap());
    // The next object after a pause.
    assert_eq!(
        p.snap_trim_poll(),
        vec![Effect::SnapTrimAfter(std::time::Duration::from_millis(7))]
    );

    // b: its only clone goes, and the snapdir with it (logged as the
    // head's removal, which recovery takes with the head's family).
    let e = trim_once(&mut p);
    assert_eq!((e.key.clone(), e.op), (b.clone(), LogOp::Delete));
    assert!(!p.store.exists(&coll, &b.clone_for(2)).unwrap());
    assert!(!p.store.exists(&coll, &b.clone_for(SNAPDIR)).unwrap());
    assert_eq!((p.log.info.objects, p.log.info.bytes), (3, 9));

    // The walk ends and records what it trimmed: no walk again until the
    // pool removes another snapshot.
    assert_eq!(p.snap_trim_poll().len(), 1);
    let fx = p.snap_trim_step();
    assert!(matches!(fx.as_slice(), [Effect::Record(_)]), "{fx:?}");
    assert_eq!(p.snap_trimmed, vec![(2, 1)]);
    assert_eq!(p.snap_trim_poll(), vec![]);

    // Snapshot 3 removed too, while peering: nothing until active.
    p.pool.as_mut().unwrap().removed_snaps = vec![(2, 2)];
    p.state = State::Peering;
    assert_eq!(p.snap_trim_poll(), vec![]);
    p.state = State::Active;
    assert_eq!(p.snap_trim_poll().len(), 1);
    let e = trim_once(&mut p);
    assert_eq!(e.key, a);
    assert_eq!(
        snapset_of(&p, &a).unwrap().clones,
        vec![clone_info(2, &[1], 2)]
    );
    assert!(!p.store.exists(&coll, &a.clone_for(3)).unwrap());
    assert_eq!((p.log.info.objects, p.log.info.bytes), (2, 6));
}

// ---- stray copies ------------------------------------------------------

fn stray_answer(fx: &[Effect]) -> (ReplyTo, u32) {
    match fx {
        [
            Effect::Reply {
                to,
                msg: Message::RepOpReply(r),
                ..
            },
        ] => (*to, r.code),
        other => panic!("{other:?}"),
    }
}

fn stray_question() -> shoal_proto::PgStray {
    shoal_proto::PgStray {
        pool: PG.pool,
        pg_seed: PG.seed,
        epoch: EPOCH,
        last_update: "9'4".into(),
        member: false,
    }
}

#[test]
fn a_clean_primary_lets_a_stray_remove_its_copy_and_nobody_else() {
    let mut p = member(1, &[1, 2, 3]);
    assert!(p.purge_ready());
    let q = stray_question();
    assert_eq!(
        stray_answer(&p.stray_asks(4, &q, ReplyTo(1))),
        (ReplyTo(1), OsdErrorCode::Ok as u32)
    );
    // A member of the PG is no stray.
    assert_eq!(
        stray_answer(&p.stray_asks(2, &q, ReplyTo(2))).1,
        OsdErrorCode::InvalidArgument as u32
    );
    // Nor a backfill target (in the up set, not acting).
    p.up = vec![1, 2, 4];
    assert_eq!(
        stray_answer(&p.stray_asks(4, &q, ReplyTo(3))).1,
        OsdErrorCode::InvalidArgument as u32
    );
    // A replica does not judge.
    let mut r = member(2, &[1, 2, 3]);
    assert_eq!(
        stray_answer(&r.stray_asks(4, &q, ReplyTo(4))).1,
        OsdErrorCode::WrongPrimary as u32
    );
}

#[test]
fn a_primary_not_clean_keeps_every_stray_copy() {
    let q = stray_question();
    let not_ready = |p: &mut PgCore| {
        assert!(!p.purge_ready());
        assert_eq!(
            stray_answer(&p.stray_asks(4, &q, ReplyTo(1))).1,
            OsdErrorCode::Again as u32
        );
    };
    // Undersized: two copies of three.
    not_ready(&mut member(1, &[1, 2]));
    // Remapped: a pg_temp keeps osd.4's copy serving while osd.3 fills.
    let mut p = member(1, &[1, 2, 3]);
    p.up = vec![1, 2, 5];
    p.acting = vec![1, 2, 3];
    not_ready(&mut p);
    // Still peering or activating.
    let mut p = member(1, &[1, 2, 3]);
    p.state = State::Peering;
    not_ready(&mut p);
    // Recovering.
    let mut p = member(1, &[1, 2, 3]);
    p.recovery = Some(crate::pg::recover::RecoveryState::new(
        1,
        1,
        &MissingSet::default(),
        std::iter::empty(),
    ));
    not_ready(&mut p);
    // Waiting for a pg_temp to go.
    let mut p = member(1, &[1, 2, 3]);
    p.peering.waiting_pg_temp = Some(Vec::new());
    not_ready(&mut p);
    // A scrub left an inconsistency a stray copy might still repair.
    let mut p = member(1, &[1, 2, 3]);
    p.scrub_record.inconsistent = vec![("obj".into(), "data differs".into())];
    not_ready(&mut p);
}

#[test]
fn a_stray_asks_its_primary_and_removes_its_copy_only_while_still_a_stray_of_it() {
    // osd.4 holds a copy; the PG's sets are 1, 2, 3.
    let mut s = member(4, &[1, 2, 3]);
    s.state = State::Stray;
    assert_eq!(
        s.stray_tick(),
        vec![Effect::AskToPurge {
            primary: 1,
            member: false
        }]
    );
    assert_eq!(s.purge_granted(1, false, START), vec![Effect::RemoveCopy]);
    // An answer from another OSD than our primary, or one given to a
    // member's question: kept.
    assert_eq!(s.purge_granted(2, false, START), vec![]);
    assert_eq!(s.purge_granted(1, true, START), vec![]);
    // A newer map made us a member again before the answer came: kept.
    let mut m = member(4, &[1, 2, 4]);
    m.state = State::ReplicaWaiting;
    assert_eq!(m.stray_tick(), vec![]);
    assert_eq!(m.purge_granted(1, false, START), vec![]);
    // A member (replica or primary) never asks.
    assert_eq!(member(2, &[1, 2, 3]).stray_tick(), vec![]);
    assert_eq!(member(1, &[1, 2, 3]).stray_tick(), vec![]);
    // No primary (the PG is down): nobody to ask.
    let mut d = member(4, &[1, 2, 3]);
    d.state = State::Stray;
    d.primary = -1;
    assert_eq!(d.stray_tick(), vec![]);
}

#[test]
fn a_member_drops_the_shards_of_positions_it_left_once_its_primary_is_clean() {
    let q = shoal_proto::PgStray {
        member: true,
        ..stray_question()
    };
    // The primary agrees to a member asking as a member, and only then.
    let mut p = member(1, &[1, 2, 3]);
    assert_eq!(
        stray_answer(&p.stray_asks(2, &q, ReplyTo(1))).1,
        OsdErrorCode::Ok as u32
    );
    assert_eq!(
        stray_answer(&p.stray_asks(4, &q, ReplyTo(2))).1,
        OsdErrorCode::InvalidArgument as u32
    );
    p.state = State::Activating;
    assert_eq!(
        stray_answer(&p.stray_asks(2, &q, ReplyTo(3))).1,
        OsdErrorCode::Again as u32
    );

    // osd.2 holds shard 0 from a position it left, beside its own.
    let mut r = member(2, &[1, 2, 3]);
    assert_eq!(r.stray_tick(), vec![]);
    r.strays.insert(0);
    assert_eq!(
        r.stray_tick(),
        vec![Effect::AskToPurge {
            primary: 1,
            member: true
        }]
    );
    // An answer to a question asked in another interval: kept.
    assert_eq!(r.purge_granted(1, true, START - 1), vec![]);
    // An answer meant for a stray: kept.
    assert_eq!(r.purge_granted(1, false, START), vec![]);
    let mut txn = Transaction::new();
    txn.remove_collection(r.stray_coll(0));
    assert_eq!(r.purge_granted(1, true, START), vec![Effect::Record(txn)]);
    assert!(r.strays.is_empty());
    assert_eq!(r.stray_tick(), vec![]);

    // A clean primary holding such a shard drops it without asking; one
    // that is not clean keeps it.
    let mut p = member(1, &[1, 2, 3]);
    p.strays.insert(2);
    p.state = State::Peering;
    assert_eq!(p.stray_tick(), vec![]);
    p.state = State::Active;
    let mut txn = Transaction::new();
    txn.remove_collection(p.stray_coll(2));
    assert_eq!(p.stray_tick(), vec![Effect::Record(txn)]);
    assert!(p.strays.is_empty());
}

#[test]
fn a_clean_pg_keeps_the_short_log_and_one_not_clean_the_long() {
    // A replica of a clean PG: its log shortens to the clean length.
    let mut r = member(2, &[1, 2, 3]);
    r.cfg.log_entries_clean = 3;
    r.cfg.log_limits.entries_max = 6;
    let mut v = 0;
    let mut apply = |r: &mut PgCore, n: u64| {
        for _ in 0..n {
            v += 1;
            let (msg, data) = rep(r, v, b"hello");
            let fx = r.rep_op(msg, data, ReplyTo(v));
            run_applies(r, &fx);
        }
    };
    apply(&mut r, 8);
    assert_eq!(r.log.len(), 3);
    // Missing an object, it keeps the long log again.
    let key = ObjectKey::new(0x42, b"lost".to_vec());
    r.missing = MissingSet::from_map([(key, Version { epoch: EPOCH, v: 1 })].into());
    apply(&mut r, 8);
    assert_eq!(r.log.len(), 6);
    r.missing = MissingSet::default();
    apply(&mut r, 1);
    assert_eq!(r.log.len(), 3);

    // The primary: clean only while active with every position held by
    // its up OSD.
    let mut p = member(1, &[1, 2, 3]);
    p.cfg.log_entries_clean = 3;
    p.state = State::Peering;
    assert_eq!(p.log_limits().entries_max, 3000, "peering");
    p.state = State::Active;
    assert_eq!(p.log_limits().entries_max, 3, "clean");
    p.up = vec![1, 2, 4];
    assert_eq!(p.log_limits().entries_max, 3000, "remapped");
    p.up = vec![1, 2];
    p.acting = vec![1, 2];
    assert_eq!(p.log_limits().entries_max, 3000, "undersized");
}

/// An erasure-coded member moved to another position is backfilled into
/// that position's collection: the new copy records the `pg_num` ours was
/// split for, so a split made while the OSD is down is made when it
/// returns (`shoal-sim --seed 20 --splits --erasure 2+1`: without it the
/// copy took the first map's count, kept its parent's objects and log,
/// and its stale log named an object the PG never had).
#[test]
fn a_copy_backfilled_into_another_position_keeps_its_split_count() {
    let mut r = member(2, &[1, 2, 3]);
    r.pg_num = 32;
    let new = shoal_objectstore::CollectionId::shard(PG.pool, PG.seed, 1);
    let mut txn = Transaction::new();
    r.begin_backfill(new, &[], Version::default(), None, &mut txn)
        .unwrap();
    // The activation then persists the authoritative log there.
    r.log.persist_info(new, &mut txn);
    r.store.apply_transaction(txn).unwrap();
    let omap = meta_omap(r.store.as_ref(), new);
    assert_eq!(crate::split::stored_pg_num(&omap), 32);
    assert_eq!(r.coll, new);
}

//! The client's placement, resend and limit rules against fake OSDs: a
//! real in-process monitor (real maps and tickets) and OSD entities that
//! boot into the map but answer from one in-memory table, and can be told
//! to refuse, drop the connection or stay silent. Every request they see is
//! recorded, so the tests check what the client sent, not only what it got.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

mod fake;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use fake::{Fault, Seen, cluster};
use shoal_client::{Client, ClientOptions, Error, ListCursor, Op, OpOptions};
use shoal_monclient::Command;
use shoal_proto::{OsdErrorCode, OsdOp};
use shoal_testkit::{Cluster, MON, net_cfg};

fn options(c: &Cluster) -> ClientOptions {
    let name = "client.admin".parse().unwrap();
    let mut o = ClientOptions::new(vec![MON.parse().unwrap()], name, c.admin_key.clone());
    o.net = net_cfg();
    o.transport = Arc::new(c.net.clone());
    o.op_timeout = Duration::from_secs(10);
    o
}

/// Waits until `cond` holds (polled). The deadline only guards against a
/// hang; it is far above any wait a test expects.
async fn wait_until(mut cond: impl FnMut() -> bool) {
    let waiting = async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(120), waiting)
        .await
        .is_err()
    {
        panic!("condition not reached in 120 s");
    }
}

/// A client whose map shows every OSD up.
async fn connect(c: &Cluster, o: ClientOptions, n: i32) -> Client {
    let client = Client::connect(o).await.unwrap();
    wait_until(|| (0..n).all(|id| client.map().unwrap().is_up(id))).await;
    let _ = c;
    client
}

fn primary_of(client: &Client, oid: &str) -> (u32, i32) {
    let map = client.map().unwrap();
    let pg = map.pool_by_name("rbd").unwrap().object_pg(oid, "");
    (pg.seed, map.pg_to_up_acting(pg).unwrap().acting_primary)
}

/// Every request of `oid` carries the same request id; all but the first are flagged as resends.
fn assert_one_request_id(seen: &[Seen], client: &Client) {
    assert!(seen.len() >= 2, "{seen:?}");
    for (i, s) in seen.iter().enumerate() {
        assert_eq!((s.client_inc, s.tid), (client.client_inc(), seen[0].tid));
        assert_eq!(s.flags & OsdOp::FLAG_RESEND != 0, i > 0, "{seen:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_go_to_the_primary_with_the_epoch_and_distinct_request_ids() {
    let (c, fakes, _m) = cluster("fake-place", 3, 16).await;
    let client = connect(&c, options(&c), 3).await;
    let pool = client.pool("rbd").unwrap();
    for i in 0..60 {
        pool.write_full(&format!("o{i}"), format!("data {i}"))
            .await
            .unwrap();
    }
    assert_eq!(&pool.read("o7", 0, 0).await.unwrap()[..], b"data 7");
    let epoch = client.map().unwrap().epoch.0;
    let mut tids = BTreeSet::new();
    let mut primaries = BTreeSet::new();
    for s in fakes.seen() {
        let (seed, primary) = primary_of(&client, &s.oid);
        assert_eq!((s.osd, s.pg_seed, s.epoch), (primary, seed, epoch), "{s:?}");
        assert_eq!((s.client_inc, s.flags), (client.client_inc(), 0));
        assert!(tids.insert(s.tid), "tid {} used twice", s.tid);
        primaries.insert(primary);
    }
    assert_eq!(tids.len(), 61);
    assert!(primaries.len() > 1, "60 objects all on one primary");
}

// On real time, with no upper bound on how long anything takes: "resent
// soon" shows as the write succeeding within its 10 s op timeout, which
// waiting for a newer map (none comes) would not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_epoch_and_wrong_primary_resend_with_the_same_id_after_the_newer_map() {
    let (c, fakes, _m) = cluster("fake-stale", 2, 8).await;
    let client = connect(&c, options(&c), 2).await;
    let pool = client.pool("rbd").unwrap();
    let epoch = client.map().unwrap().epoch.0;
    // The OSD has a newer map: the client waits for it before resending.
    fakes.fault(Fault::Reply(OsdErrorCode::StaleEpoch, epoch + 1));
    let p = pool.clone();
    let op = tokio::spawn(async move { p.write_full("s", &b"1"[..]).await });
    // The client gets its refusal, then has a whole second (of paused time,
    // so everything else runs first) to resend too early.
    wait_until(|| fakes.seen_for("s").len() == 1).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!op.is_finished(), "resent before the map it was told about");
    assert_eq!(fakes.seen_for("s").len(), 1);
    c.create_pool("other", 8, 2).await;
    op.await.unwrap().unwrap();
    let seen = fakes.seen_for("s");
    assert_one_request_id(&seen, &client);
    assert_eq!(seen.len(), 2);
    assert!(seen[1].epoch > epoch);
    // Not the primary in the OSD's map, which is no newer than ours: resend soon.
    let epoch = client.map().unwrap().epoch.0;
    fakes.fault(Fault::Reply(OsdErrorCode::WrongPrimary, epoch));
    fakes.fault(Fault::Reply(OsdErrorCode::WrongPrimary, epoch));
    // Not waiting for a newer map, which would time out.
    pool.write_full("w", &b"2"[..]).await.unwrap();
    let seen = fakes.seen_for("w");
    assert_eq!(seen.len(), 3);
    assert_one_request_id(&seen, &client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn again_shutting_down_and_a_dropped_connection_resend_the_same_request() {
    let (c, fakes, _m) = cluster("fake-again", 2, 8).await;
    let client = connect(&c, options(&c), 2).await;
    let pool = client.pool("rbd").unwrap();
    let epoch = client.map().unwrap().epoch.0;
    fakes.fault(Fault::Reply(OsdErrorCode::Again, epoch));
    fakes.fault(Fault::Reply(OsdErrorCode::ShuttingDown, epoch));
    fakes.fault(Fault::Close);
    pool.append("a", &b"x"[..]).await.unwrap();
    let seen = fakes.seen_for("a");
    assert_eq!(seen.len(), 4);
    assert_one_request_id(&seen, &client);
    assert_eq!(&pool.read("a", 0, 0).await.unwrap()[..], b"x");
    // A caller-chosen tid is kept too.
    fakes.fault(Fault::Close);
    let o = OpOptions {
        tid: Some(777),
        timeout: None,
    };
    pool.operate_with("t", Op::new().write_full(&b"t"[..]), o)
        .await
        .unwrap();
    let seen = fakes.seen_for("t");
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|s| s.tid == 777));
}

// The timeout's lower bound only: a real clock bounds nothing above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_op_times_out_and_one_waiting_on_a_moved_pg_follows_it() {
    let (c, fakes, _m) = cluster("fake-timeout", 3, 8).await;
    let client = connect(&c, options(&c), 3).await;
    let pool = client.pool("rbd").unwrap();
    fakes.fault(Fault::Hang);
    let o = OpOptions {
        tid: None,
        timeout: Some(Duration::from_millis(600)),
    };
    let t0 = tokio::time::Instant::now();
    let e = pool
        .operate_with("h", Op::new().stat(), o)
        .await
        .unwrap_err();
    assert!(matches!(e.error, Error::Timeout(..)), "{e:?}");
    assert!(
        t0.elapsed() >= Duration::from_millis(600),
        "{:?}",
        t0.elapsed()
    );
    // The primary stays silent, then the map marks it down: the op goes
    // to the new primary with the same id.
    pool.write_full("m", &b"1"[..]).await.unwrap();
    let (_, primary) = primary_of(&client, "m");
    fakes.fault(Fault::Hang);
    let p = pool.clone();
    let op = tokio::spawn(async move { p.read("m", 0, 0).await });
    wait_until(|| fakes.seen_for("m").len() == 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!op.is_finished(), "a silent primary's op finished");
    c.command(Command::OsdDown { ids: vec![primary] }).await;
    assert_eq!(&op.await.unwrap().unwrap()[..], b"1");
    let seen = fakes.seen_for("m");
    let (first, resent) = (&seen[1], &seen[2]);
    assert_eq!(first.osd, primary);
    assert_ne!(resent.osd, primary);
    assert_one_request_id(&seen[1..], &client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn osd_error_codes_become_typed_errors_with_the_failing_sub_op() {
    let (c, _fakes, _m) = cluster("fake-codes", 2, 8).await;
    let client = connect(&c, options(&c), 2).await;
    let pool = client.pool("rbd").unwrap();
    let code = |c: OsdErrorCode| format!("code-{}", c as u32);
    use OsdErrorCode as C;
    let none = String::new;
    let cases = [
        (C::NotFound, Error::NotFound(none())),
        (C::Exists, Error::Exists(none())),
        (C::NoSpace, Error::NoSpace(none())),
        (C::PermissionDenied, Error::PermissionDenied(none())),
        (C::InvalidArgument, Error::InvalidArgument(none())),
        (C::CompareFailed, Error::CompareFailed(none())),
        (C::VersionMismatch, Error::VersionMismatch(none())),
        (C::NoData, Error::NoData(none())),
        (C::Io, Error::Io(none())),
        (C::TooLarge, Error::TooLarge(none())),
        (C::NotSupported, Error::NotSupported(none())),
        (C::Internal, Error::Internal(none())),
    ];
    for (c, want) in cases {
        let e = pool.stat(&code(c)).await.unwrap_err();
        let same = std::mem::discriminant(&e) == std::mem::discriminant(&want);
        assert!(same, "{c:?} gave {e:?}");
    }
    // A compound op names the sub-op that failed; nothing of it applied.
    let op = Op::new().create(false).write_full(&b"x"[..]).getxattr("a");
    let e = pool.operate("c", op).await.unwrap_err();
    assert_eq!(e.index, 2);
    assert!(matches!(e.error, Error::NoData(_)));
    assert!(matches!(pool.stat("c").await, Err(Error::NotFound(_))));
    pool.create("c", true).await.unwrap();
    assert!(matches!(
        pool.create("c", true).await,
        Err(Error::Exists(_))
    ));
    // Refused at the messenger level: not retried.
    let e = pool.stat("refuse").await.unwrap_err();
    assert!(matches!(e, Error::Protocol(_)), "{e:?}");
    let e = pool.operate("c", Op::new()).await.unwrap_err();
    assert!(matches!(e.error, Error::InvalidArgument(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compound_reply_data_is_split_by_sub_operation() {
    let (c, _fakes, _m) = cluster("fake-split", 2, 8).await;
    let client = connect(&c, options(&c), 2).await;
    let pool = client.pool("rbd").unwrap();
    pool.write_full("d", &b"abcdef"[..]).await.unwrap();
    let op = Op::new().read(0, 2).stat().read(2, 3).read(5, 0);
    let r = pool.operate("d", op).await.unwrap();
    assert_eq!(&r.data(0).unwrap()[..], b"ab");
    assert_eq!(r.stat(1).unwrap().size, 6);
    assert!(r.data(1).unwrap().is_empty());
    assert_eq!(&r.data(2).unwrap()[..], b"cde");
    assert_eq!(&r.data(3).unwrap()[..], b"f");
    assert!(r.data(4).is_err());
    assert!(!r.replayed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_and_bytes_in_flight_are_bounded() {
    let (c, fakes, _m) = cluster("fake-inflight", 2, 8).await;
    fakes.delay_ms.store(20, Ordering::SeqCst);
    let mut o = options(&c);
    o.max_inflight_ops = 8;
    let client = connect(&c, o, 2).await;
    let pool = client.pool("rbd").unwrap();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let p = pool.clone();
        tasks.push(tokio::spawn(async move {
            p.write_full(&format!("n{i}"), &b"x"[..]).await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let max = fakes.inflight_max.swap(0, Ordering::SeqCst);
    assert!((2..=8).contains(&max), "{max} ops in flight");
    // 256 KiB writes under a 1 MiB budget: at most 4 at once.
    let mut o = options(&c);
    o.max_inflight_bytes = 1 << 20;
    let client = connect(&c, o, 2).await;
    let pool = client.pool("rbd").unwrap();
    let chunk = Bytes::from(vec![1u8; 256 << 10]);
    let mut tasks = Vec::new();
    for i in 0..40 {
        let (p, chunk) = (pool.clone(), chunk.clone());
        tasks.push(tokio::spawn(async move {
            p.write_full(&format!("b{i}"), chunk).await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let max = fakes.inflight_max.load(Ordering::SeqCst);
    assert!((2..=4).contains(&max), "{max} 256 KiB writes in flight");
    // Reads count the bytes they will bring back: 4 at most too.
    fakes.inflight_max.store(0, Ordering::SeqCst);
    let mut tasks = Vec::new();
    for i in 0..40 {
        let p = pool.clone();
        tasks.push(tokio::spawn(async move {
            p.read(&format!("b{i}"), 0, 256 << 10).await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap().len(), 256 << 10);
    }
    let max = fakes.inflight_max.load(Ordering::SeqCst);
    assert!((2..=4).contains(&max), "{max} 256 KiB reads in flight");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_pages_through_the_pgs_in_order() {
    let (c, fakes, _m) = cluster("fake-list", 2, 8).await;
    let client = connect(&c, options(&c), 2).await;
    let pool = client.pool("rbd").unwrap();
    let ns = pool.with_namespace("ns");
    let mut want = BTreeSet::new();
    for i in 0..50 {
        pool.write_full(&format!("l{i}"), &b"x"[..]).await.unwrap();
        ns.write_full(&format!("m{i}"), &b"x"[..]).await.unwrap();
        want.insert((String::new(), format!("l{i}")));
        want.insert(("ns".to_string(), format!("m{i}")));
    }
    let epoch = client.map().unwrap().epoch.0;
    fakes.fault(Fault::Reply(OsdErrorCode::Again, epoch));
    let mut got = BTreeSet::new();
    let mut cur = ListCursor::start();
    let mut pages = 0;
    while !cur.is_done() {
        let (page, next) = pool.list(&cur, 7).await.unwrap();
        assert!(page.len() <= 7);
        for e in page {
            assert!(
                got.insert((e.nspace.clone(), e.name.clone())),
                "{e:?} twice"
            );
        }
        cur = next;
        pages += 1;
    }
    assert_eq!(got, want);
    assert!(pages >= 100 / 7, "{pages} pages");
    let listed = fakes.listed.lock().unwrap().clone();
    assert!(listed.windows(2).all(|w| w[0] <= w[1]), "{listed:?}");
    assert_eq!(listed.iter().collect::<BTreeSet<_>>().len(), 8);
    assert_eq!(pool.list_all().await.unwrap().len(), 100);
    let (none, end) = pool.list(&cur, 10).await.unwrap();
    assert!(none.is_empty() && end.is_done());
}

#[test]
fn the_blocking_facade_runs_ops_outside_any_runtime() {
    // The cluster runs on its own runtime; the blocking client on another.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (c, _fakes, _m) = rt.block_on(cluster("fake-blocking", 2, 8));
    let client = shoal_client::blocking::Client::connect(options(&c)).unwrap();
    let map = client.inner().map().unwrap();
    while (0..2).any(|id| !client.inner().map().unwrap().is_up(id)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(map.epoch.0 > 0);
    let pool = client.pool("rbd").unwrap();
    pool.put("b", &b"blocking"[..]).unwrap();
    pool.write("b", 0, &b"B"[..]).unwrap();
    assert_eq!(&pool.get("b").unwrap()[..], b"Blocking");
    assert_eq!(&pool.read("b", 1, 3).unwrap()[..], b"loc");
    assert_eq!(pool.stat("b").unwrap().size, 8);
    pool.with_namespace("n").put("b", &b"other"[..]).unwrap();
    assert_eq!(pool.list().unwrap().len(), 2);
    pool.remove("b").unwrap();
    assert!(matches!(pool.stat("b"), Err(Error::NotFound(_))));
    let r = client.block_on(client.inner().pool("rbd").unwrap().read("b", 0, 0));
    assert!(matches!(r, Err(Error::NotFound(_))));
    drop(client);
    drop(c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_op_is_resent_when_its_pg_changes_interval_though_the_primary_stays() {
    let (c, fakes, _m) = cluster("fake-interval", 3, 8).await;
    let client = connect(&c, options(&c), 3).await;
    let pool = client.pool("rbd").unwrap();
    pool.write_full("i", &b"1"[..]).await.unwrap();
    let (_, primary) = primary_of(&client, "i");
    // The primary stays silent (it dropped the op with the old interval);
    // a min_size change (1 to 2) starts a new interval with the same primary and
    // acting set: the client sends the op again, to the same primary.
    fakes.fault(Fault::Hang);
    let p = pool.clone();
    let op = tokio::spawn(async move { p.read("i", 0, 0).await });
    let sent = |n: usize| {
        let fakes = fakes.clone();
        async move {
            while fakes.seen_for("i").len() < n {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    sent(2).await;
    assert!(!op.is_finished());
    c.command(Command::PoolSet {
        name: "rbd".into(),
        key: "min_size".into(),
        value: "2".into(),
    })
    .await;
    assert_eq!(&op.await.unwrap().unwrap()[..], b"1");
    let seen = fakes.seen_for("i");
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen[1..].iter().all(|s| s.osd == primary), "{seen:?}");
    assert!(seen[2].epoch > seen[1].epoch, "{seen:?}");
    assert_one_request_id(&seen[1..], &client);
}

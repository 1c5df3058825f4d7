//! The client library against an in-process cluster (one monitor, three
//! OSDs on MemStores): every operation kind, compound operations and their
//! guards, typed errors, resends by a restarted client applying once,
//! listing across PGs, many operations in flight, failover and timeouts.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use shoal_client::{Client, ClientOptions, CmpOp, Error, ListCursor, Op, OpOptions};
use shoal_monclient::Command;
use shoal_testkit::{Cluster, MON, net_cfg};

fn options(c: &Cluster, name: &str, key: shoal_net::Secret) -> ClientOptions {
    let mut o = ClientOptions::new(vec![MON.parse().unwrap()], name.parse().unwrap(), key);
    o.net = net_cfg();
    o.transport = Arc::new(c.net.clone());
    o.op_timeout = Duration::from_secs(20);
    o
}

async fn admin(c: &Cluster) -> Client {
    Client::connect(options(c, "client.admin", c.admin_key.clone()))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_kind() {
    let c = Cluster::with_pool("client-ops", 3, 3, 8).await;
    let client = admin(&c).await;
    let pool = client.pool("rbd").unwrap();
    assert!(matches!(
        pool.read("none", 0, 0).await,
        Err(Error::NotFound(_))
    ));
    pool.write_full("o", &b"hello world"[..]).await.unwrap();
    pool.write("o", 6, &b"WORLD"[..]).await.unwrap();
    pool.append("o", &b"!"[..]).await.unwrap();
    assert_eq!(&pool.read("o", 0, 0).await.unwrap()[..], b"hello WORLD!");
    assert_eq!(&pool.read("o", 6, 3).await.unwrap()[..], b"WOR");
    pool.zero("o", 0, 5).await.unwrap();
    pool.truncate("o", 8).await.unwrap();
    assert_eq!(&pool.read("o", 0, 0).await.unwrap()[..], b"\0\0\0\0\0 WO");
    let st = pool.stat("o").await.unwrap();
    assert_eq!(st.size, 8);
    assert!(st.mtime_ms > 0 && st.version > 0);
    pool.setxattr("o", "color", &b"blue"[..]).await.unwrap();
    assert_eq!(&pool.getxattr("o", "color").await.unwrap()[..], b"blue");
    assert_eq!(pool.getxattrs("o").await.unwrap().len(), 1);
    pool.cmpxattr("o", "color", CmpOp::Eq, &b"blue"[..])
        .await
        .unwrap();
    let e = pool.cmpxattr("o", "color", CmpOp::Eq, &b"red"[..]).await;
    assert!(matches!(e, Err(Error::CompareFailed(_))), "{e:?}");
    pool.rmxattr("o", "color").await.unwrap();
    assert!(matches!(
        pool.getxattr("o", "color").await,
        Err(Error::NoData(_))
    ));
    pool.omap_set("o", &[("k1", "v1"), ("k2", "v2"), ("x", "y")])
        .await
        .unwrap();
    pool.omap_set_header("o", &b"hdr"[..]).await.unwrap();
    let page = pool.omap_get_vals("o", b"", b"k", 1).await.unwrap();
    assert_eq!(page.entries, vec![(Bytes::from("k1"), Bytes::from("v1"))]);
    assert!(page.more);
    let keys = pool.omap_get_keys("o", b"k1", b"", 0).await.unwrap();
    assert_eq!(keys.entries.len(), 2);
    let got = pool
        .omap_get_vals_by_keys("o", &["k2", "nope"])
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    pool.omap_rm_keys("o", &["k1"]).await.unwrap();
    assert_eq!(&pool.omap_get_header("o").await.unwrap()[..], b"hdr");
    pool.omap_clear("o").await.unwrap();
    assert!(
        pool.omap_get_keys("o", b"", b"", 0)
            .await
            .unwrap()
            .entries
            .is_empty()
    );
    pool.create("new", true).await.unwrap();
    assert!(matches!(
        pool.create("new", true).await,
        Err(Error::Exists(_))
    ));
    pool.create("new", false).await.unwrap();
    pool.remove("new").await.unwrap();
    assert!(matches!(pool.remove("new").await, Err(Error::NotFound(_))));
    assert!(matches!(client.pool("nope"), Err(Error::NoPool(_))));
    // Namespaces keep objects apart.
    let ns = pool.with_namespace("ns1");
    ns.write_full("o", &b"other"[..]).await.unwrap();
    assert_eq!(&ns.read("o", 0, 0).await.unwrap()[..], b"other");
    assert_eq!(pool.stat("o").await.unwrap().size, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compound_ops_apply_all_or_nothing() {
    let c = Cluster::with_pool("client-compound", 3, 3, 8).await;
    let client = admin(&c).await;
    let pool = client.pool("rbd").unwrap();
    let v = pool
        .operate(
            "doc",
            Op::new().write_full(&b"v1"[..]).setxattr("gen", &b"1"[..]),
        )
        .await
        .unwrap()
        .version;
    // A failing guard in the middle: nothing of the op is applied.
    let op = Op::new()
        .write_full(&b"v2"[..])
        .assert_version(v + 1000)
        .omap_set(&[("k", "v")]);
    let e = pool.operate("doc", op).await.unwrap_err();
    assert_eq!(e.index, 1);
    assert!(matches!(e.error, Error::VersionMismatch(_)));
    assert_eq!(&pool.read("doc", 0, 0).await.unwrap()[..], b"v1");
    assert!(
        pool.omap_get_keys("doc", b"", b"", 0)
            .await
            .unwrap()
            .entries
            .is_empty()
    );
    // The guards hold: every sub-operation applies, reads return their data.
    let op = Op::new()
        .assert_exists()
        .assert_version(v)
        .cmpxattr("gen", CmpOp::Eq, &b"1"[..])
        .write_full(&b"v2"[..])
        .setxattr("gen", &b"2"[..])
        .omap_set(&[("k", "v")])
        .stat();
    let r = pool.operate("doc", op).await.unwrap();
    assert_eq!(
        r.stat(6).unwrap().size,
        1 + 1,
        "stat sees the op's own size"
    );
    assert_eq!(&pool.read("doc", 0, 0).await.unwrap()[..], b"v2");
    let r = pool
        .operate(
            "doc",
            Op::new()
                .read(0, 0)
                .getxattr("gen")
                .omap_get_vals(b"", b"", 0),
        )
        .await
        .unwrap();
    assert_eq!(&r.data(0).unwrap()[..], b"v2");
    assert_eq!(&r.data(1).unwrap()[..], b"2");
    assert_eq!(r.omap(2).unwrap().entries.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_client_resending_applies_each_op_once() {
    let c = Cluster::with_pool("client-resend", 3, 3, 8).await;
    let mut o = options(&c, "client.admin", c.admin_key.clone());
    o.client_inc = Some(0xfeed);
    let first = Client::connect(o.clone()).await.unwrap();
    let pool = first.pool("rbd").unwrap();
    for tid in 1..=20u64 {
        let opts = OpOptions {
            tid: Some(tid),
            timeout: None,
        };
        pool.operate_with("log", Op::new().append(format!("{tid};")), opts)
            .await
            .unwrap();
    }
    first.shutdown().await;
    // A new instance with the same id resends everything, then goes on.
    let second = Client::connect(o).await.unwrap();
    let pool = second.pool("rbd").unwrap();
    for tid in 1..=25u64 {
        let opts = OpOptions {
            tid: Some(tid),
            timeout: None,
        };
        let r = pool
            .operate_with("log", Op::new().append(format!("{tid};")), opts)
            .await
            .unwrap();
        assert_eq!(r.replayed, tid <= 20, "tid {tid}");
    }
    let want: String = (1..=25).map(|t| format!("{t};")).collect();
    assert_eq!(pool.read("log", 0, 0).await.unwrap(), Bytes::from(want));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_pages_across_pgs_and_thousands_in_flight() {
    let c = Cluster::with_pool("client-list", 3, 3, 16).await;
    let mut o = options(&c, "client.admin", c.admin_key.clone());
    o.max_inflight_ops = 64;
    let client = Client::connect(o).await.unwrap();
    let pool = client.pool("rbd").unwrap();
    let mut tasks = Vec::new();
    for i in 0..2000u32 {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            pool.write_full(&format!("obj-{i}"), Bytes::from(i.to_le_bytes().to_vec()))
                .await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let mut seen = BTreeSet::new();
    let mut cur = ListCursor::start();
    let mut pages = 0;
    while !cur.is_done() {
        let (page, next) = pool.list(&cur, 97).await.unwrap();
        assert!(page.len() <= 97);
        for e in page {
            assert!(seen.insert(e.name.clone()), "{} listed twice", e.name);
        }
        cur = next;
        pages += 1;
    }
    assert_eq!(seen.len(), 2000);
    assert!(pages > 20);
    assert_eq!(pool.list_all().await.unwrap().len(), 2000);
}

// The timeout's lower bound only: a real clock bounds nothing above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_fail_over_to_the_next_primary_and_time_out_with_no_osd() {
    let mut c = Cluster::with_pool("client-failover", 3, 3, 8).await;
    let mut o = options(&c, "client.admin", c.admin_key.clone());
    o.op_timeout = Duration::from_secs(2);
    let client = Client::connect(o).await.unwrap();
    let pool = client.pool("rbd").unwrap();
    pool.write_full("x", &b"1"[..]).await.unwrap();
    let map = client.map().unwrap();
    let pg = map.pool_by_name("rbd").unwrap().object_pg("x", "");
    let primary = map.pg_to_up_acting(pg).unwrap().acting_primary;
    c.stop_osd(primary).await;
    c.command(Command::OsdDown { ids: vec![primary] }).await;
    let slow = OpOptions {
        tid: None,
        timeout: Some(Duration::from_secs(20)),
    };
    pool.operate_with("x", Op::new().append(&b"2"[..]), slow)
        .await
        .unwrap();
    assert_eq!(&pool.read("x", 0, 0).await.unwrap()[..], b"12");
    // No OSD left: the op times out, with the last reason.
    let ids: Vec<i32> = c.osds.keys().copied().collect();
    for id in &ids {
        c.stop_osd(*id).await;
    }
    c.command(Command::OsdDown { ids }).await;
    let t0 = tokio::time::Instant::now();
    let e = pool.read("x", 0, 0).await.unwrap_err();
    assert!(matches!(e, Error::Timeout(..)), "{e:?}");
    // Not before the 2 s op timeout.
    let took = t0.elapsed();
    assert!(took >= Duration::from_secs(2), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_limit_what_a_client_may_do() {
    let c = Cluster::with_pool("client-caps", 3, 3, 8).await;
    c.create_pool("images", 8, 3).await;
    let key = c
        .entity_key(
            "client.app",
            &[
                ("mon", "allow r"),
                ("osd", "allow rw pool=images, allow r pool=rbd"),
            ],
        )
        .await;
    let app = Client::connect(options(&c, "client.app", key))
        .await
        .unwrap();
    let images = app.pool("images").unwrap();
    images.write_full("i", &b"ok"[..]).await.unwrap();
    let rbd = app.pool("rbd").unwrap();
    let e = rbd.write_full("r", &b"no"[..]).await.unwrap_err();
    assert!(matches!(e, Error::PermissionDenied(_)), "{e:?}");
    assert!(matches!(rbd.read("r", 0, 0).await, Err(Error::NotFound(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_cluster_refuses_writes_and_keeps_serving_reads() {
    let c = Cluster::with_pool_and_stores("client-full", 3, 3, 8, 64 << 20).await;
    let client = admin(&c).await;
    let pool = client.pool("rbd").unwrap();
    pool.write_full("keep", &b"still here"[..]).await.unwrap();
    let chunk = Bytes::from(vec![7u8; 1 << 20]);
    let mut refused = None;
    for i in 0..200 {
        match pool.write_full(&format!("fill{i}"), chunk.clone()).await {
            Ok(()) => {}
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let e = refused.expect("64 MiB stores fill up before 200 MiB");
    assert!(matches!(e, Error::NoSpace(_)), "{e:?}");
    assert_eq!(&pool.read("keep", 0, 0).await.unwrap()[..], b"still here");
    // Removing data is allowed when full, and makes room again (once the
    // OSDs see it).
    for i in 0..40 {
        match pool.remove(&format!("fill{i}")).await {
            Ok(()) | Err(Error::NotFound(_)) => {}
            Err(e) => panic!("fill{i}: {e:?}"),
        }
    }
    // Polled until it holds; the deadline only guards against a hang.
    let room = async {
        loop {
            match pool.write_full("after", &b"ok"[..]).await {
                Ok(()) => break,
                Err(Error::NoSpace(_)) => tokio::time::sleep(Duration::from_millis(200)).await,
                Err(e) => panic!("{e:?}"),
            }
        }
    };
    let hang_guard = Duration::from_secs(120);
    assert!(
        tokio::time::timeout(hang_guard, room).await.is_ok(),
        "writes still refused after {hang_guard:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_min_size_writes_wait_then_time_out_and_resume_when_members_return() {
    let mut c = Cluster::with_pool("client-minsize", 3, 3, 8).await;
    let client = admin(&c).await;
    let pool = client.pool("rbd").unwrap();
    pool.write_full("m", &b"1"[..]).await.unwrap();
    let s1 = c.stop_osd(1).await;
    let _s2 = c.stop_osd(2).await;
    c.command(Command::OsdDown { ids: vec![1, 2] }).await;
    let short = OpOptions {
        tid: None,
        timeout: Some(Duration::from_secs(2)),
    };
    // One acting member of three, min_size 2: the write waits, then times out.
    let e = pool
        .operate_with("m", Op::new().write_full(&b"2"[..]), short)
        .await
        .unwrap_err();
    assert!(matches!(e.error, Error::Timeout(..)), "{e:?}");
    // A second member returns: writes go through again.
    c.start_osd(1, s1).await;
    let slow = OpOptions {
        tid: None,
        timeout: Some(Duration::from_secs(20)),
    };
    pool.operate_with("m", Op::new().write_full(&b"3"[..]), slow)
        .await
        .unwrap();
    assert_eq!(&pool.read("m", 0, 0).await.unwrap()[..], b"3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sparse_read_returns_the_allocated_extents_and_their_data() {
    let c = Cluster::with_pool("client-sparse", 3, 3, 8).await;
    let client = admin(&c).await;
    let pool = client.pool("rbd").unwrap();
    pool.write("s", 0, vec![1u8; 4096]).await.unwrap();
    pool.write("s", 1 << 20, vec![2u8; 4096]).await.unwrap();
    pool.truncate("s", 2 << 20).await.unwrap();
    let (ext, data) = pool.sparse_read("s", 0, 0).await.unwrap();
    assert_eq!(ext, vec![(0, 4096), (1 << 20, 4096)]);
    assert_eq!(data.len(), 8192);
    assert!(data[..4096].iter().all(|b| *b == 1) && data[4096..].iter().all(|b| *b == 2));
    assert_eq!(pool.allocated("s", 0, 0).await.unwrap(), ext);
    // A part of the object: clipped to it.
    assert_eq!(
        pool.allocated("s", 2048, 1 << 20).await.unwrap(),
        vec![(2048, 2048), (1 << 20, 2048)]
    );
    pool.zero("s", 0, 4096).await.unwrap();
    assert_eq!(
        pool.allocated("s", 0, 0).await.unwrap(),
        vec![(1 << 20, 4096)]
    );
    assert!(matches!(
        pool.sparse_read("none", 0, 0).await,
        Err(Error::NotFound(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_managed_snapshot_ids_come_from_the_monitors() {
    let c = Cluster::with_pool("client-snapids", 1, 1, 4).await;
    let client = admin(&c).await;
    let pool = client.pool("rbd").unwrap();
    assert_eq!(pool.selfmanaged_snap_create().await.unwrap(), 1);
    assert_eq!(pool.selfmanaged_snap_create().await.unwrap(), 2);
    assert_eq!(pool.selfmanaged_snap_create().await.unwrap(), 3);
    // The client's map has them when the call returns.
    let map = client.map().unwrap();
    assert_eq!(map.pool_by_name("rbd").unwrap().snap_seq, 3);
    pool.selfmanaged_snap_remove(1).await.unwrap();
    pool.selfmanaged_snap_remove(3).await.unwrap();
    let e = pool.selfmanaged_snap_remove(1).await.unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e}");
    let e = pool.selfmanaged_snap_remove(9).await.unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e}");
    pool.selfmanaged_snap_remove(2).await.unwrap();
    let v = c.command(Command::PoolGet { name: "rbd".into() }).await;
    assert_eq!(v["snap_seq"], 3, "{v}");
    assert_eq!(v["removed_snaps"], serde_json::json!([[1, 3]]), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_after_a_snapshot_keep_it_readable() {
    let c = Cluster::with_pool("client-snaps", 3, 3, 8).await;
    let client = admin(&c).await;
    let pool = client.pool("rbd").unwrap();
    pool.write_full("o", &b"v1"[..]).await.unwrap();
    let s1 = pool.selfmanaged_snap_create().await.unwrap();
    let w1 = pool.with_snap_context(shoal_client::SnapContext {
        seq: s1,
        snaps: vec![s1],
    });
    w1.write_full("o", &b"v2"[..]).await.unwrap();
    w1.write_full("made-after", &b"new"[..]).await.unwrap();
    let s2 = pool.selfmanaged_snap_create().await.unwrap();
    let w2 = pool.with_snap_context(shoal_client::SnapContext {
        seq: s2,
        snaps: vec![s2, s1],
    });
    w2.write("o", 0, &b"V3"[..]).await.unwrap();
    assert_eq!(&pool.read("o", 0, 0).await.unwrap()[..], b"V3");
    assert_eq!(&pool.at_snap(s1).read("o", 0, 0).await.unwrap()[..], b"v1");
    assert_eq!(&pool.at_snap(s2).read("o", 0, 0).await.unwrap()[..], b"v2");
    assert!(matches!(
        pool.at_snap(s1).read("made-after", 0, 0).await,
        Err(Error::NotFound(_))
    ));
    assert_eq!(
        &pool.at_snap(s2).read("made-after", 0, 0).await.unwrap()[..],
        b"new"
    );
    // Removed at the head, kept at the snapshots.
    w2.remove("o").await.unwrap();
    assert!(matches!(
        pool.read("o", 0, 0).await,
        Err(Error::NotFound(_))
    ));
    assert_eq!(&pool.at_snap(s1).read("o", 0, 0).await.unwrap()[..], b"v1");
    assert_eq!(&pool.at_snap(s2).read("o", 0, 0).await.unwrap()[..], b"v2");
    // A snapshot is read-only; a bad context is refused.
    let e = pool
        .at_snap(s1)
        .write_full("o", &b"x"[..])
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let bad = pool.with_snap_context(shoal_client::SnapContext {
        seq: 1,
        snaps: vec![2],
    });
    assert!(matches!(
        bad.write_full("o", &b"x"[..]).await,
        Err(Error::InvalidArgument(_))
    ));
    // Listings name each object once.
    let mut names: Vec<String> = pool
        .list_all()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    names.sort();
    assert_eq!(names, vec!["made-after".to_string()]);
}

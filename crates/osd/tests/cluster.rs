//! One monitor and three OSDs in one process, over the in-memory network,
//! driven by a raw client that speaks the OSD protocol: replication to
//! every acting member, request-id dedup, epoch fencing, refusal of
//! unauthorized and malformed requests, and recovery of an OSD that missed
//! writes while it was stopped.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_maps::OsdMap;
use shoal_mon::{Command, MonClient, TicketAuth, UpdateSink};
use shoal_net::{Messenger, Secret};
use shoal_objectstore::{MemStore, ObjectKey, ObjectStore};
use shoal_proto::{Message, OpCode, OsdErrorCode, OsdOp, OsdOpReply, OsdSubOp};
use shoal_types::EntityName;
use tokio::sync::watch;

use shoal_testkit::{Cluster, MON, net_cfg};

/// A client that speaks the OSD protocol directly.
struct RawClient {
    msgr: Messenger,
    map: watch::Receiver<Option<Arc<OsdMap>>>,
    inc: u64,
}

impl RawClient {
    async fn new(c: &Cluster, name: &str, key: Secret) -> RawClient {
        let me: EntityName = name.parse().unwrap();
        let auth = TicketAuth::new(me.clone(), key);
        let sink = UpdateSink::new();
        let msgr = Messenger::new(
            me,
            net_cfg(),
            Arc::new(c.net.clone()),
            Arc::new(auth.clone()),
            sink.clone(),
        );
        let monc = MonClient::new(
            msgr.clone(),
            vec![MON.parse().unwrap()],
            Duration::from_secs(8),
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while auth.refresh_ticket(&monc).await.is_err() {
            assert!(Instant::now() < deadline, "no ticket");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let map = monc.subscribe_osdmap(sink);
        RawClient { msgr, map, inc: 42 }
    }

    fn map(&self) -> Arc<OsdMap> {
        self.map.borrow().clone().unwrap()
    }

    async fn wait_map(&mut self, ok: impl Fn(&OsdMap) -> bool) -> Arc<OsdMap> {
        let wait = self.map.wait_for(|m| m.as_ref().is_some_and(|m| ok(m)));
        tokio::time::timeout(Duration::from_secs(20), wait)
            .await
            .expect("map condition within 20 s")
            .unwrap();
        self.map()
    }

    fn primary(&self, oid: &str) -> (i32, Vec<i32>) {
        let map = self.map();
        let pool = map.pool_by_name("rbd").unwrap();
        let pg = pool.object_pg(oid, "");
        let m = map.pg_to_up_acting(pg).unwrap();
        (m.acting_primary, m.acting)
    }

    async fn send_to(
        &self,
        osd: i32,
        oid: &str,
        tid: u64,
        epoch: u32,
        ops: Vec<OsdSubOp>,
        data: Bytes,
    ) -> (OsdOpReply, Bytes) {
        self.try_send_to(osd, oid, tid, epoch, ops, data)
            .await
            .unwrap()
    }

    async fn try_send_to(
        &self,
        osd: i32,
        oid: &str,
        tid: u64,
        epoch: u32,
        ops: Vec<OsdSubOp>,
        data: Bytes,
    ) -> Result<(OsdOpReply, Bytes), shoal_net::NetError> {
        let map = self.map();
        let pool = map.pool_by_name("rbd").unwrap();
        let addr: SocketAddr = map.osd(osd).unwrap().addr.clone().unwrap().parse().unwrap();
        let conn = self.msgr.connect(addr).await?;
        let op = OsdOp {
            pool: pool.id,
            pg_seed: pool.object_pg(oid, "").seed,
            oid: oid.into(),
            nspace: String::new(),
            epoch,
            client_inc: self.inc,
            tid,
            flags: 0,
            ops,
        };
        let reply = conn.request(op, data).await?;
        match reply.msg {
            Message::OsdOpReply(r) => Ok((r, reply.data)),
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Sends to the primary, resending while the PG is not ready.
    async fn op(
        &self,
        oid: &str,
        tid: u64,
        ops: Vec<OsdSubOp>,
        data: Bytes,
    ) -> (OsdOpReply, Bytes) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (primary, _) = self.primary(oid);
            let epoch = self.map().epoch.0;
            let sent = self
                .try_send_to(primary, oid, tid, epoch, ops.clone(), data.clone())
                .await;
            let Ok((r, d)) = sent else {
                assert!(Instant::now() < deadline, "{oid}: {sent:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let retry = [
                OsdErrorCode::Again,
                OsdErrorCode::StaleEpoch,
                OsdErrorCode::WrongPrimary,
            ]
            .contains(&OsdErrorCode::from_u32(r.code));
            if !retry || Instant::now() > deadline {
                return (r, d);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn write_full(len: usize) -> OsdSubOp {
    OsdSubOp {
        data_len: len as u64,
        ..OsdSubOp::new(OpCode::WriteFull)
    }
}

fn append(len: usize) -> OsdSubOp {
    OsdSubOp {
        data_len: len as u64,
        ..OsdSubOp::new(OpCode::Append)
    }
}

fn read_all() -> OsdSubOp {
    OsdSubOp::new(OpCode::Read)
}

async fn setup(tag: &str) -> (Cluster, RawClient) {
    let c = Cluster::with_pool(tag, 3, 3, 8).await;
    let admin_key = c.admin_key.clone();
    let mut client = RawClient::new(&c, "client.admin", admin_key).await;
    client
        .wait_map(|m| (0..3).all(|o| m.is_up(o)) && m.pool_by_name("rbd").is_some())
        .await;
    (c, client)
}

fn object_on(store: &MemStore, map: &OsdMap, oid: &str) -> Option<Bytes> {
    let pool = map.pool_by_name("rbd").unwrap();
    let pg = pool.object_pg(oid, "");
    let coll = shoal_osd::object::collection(pg);
    let key: ObjectKey = shoal_osd::object::object_key(pool, "", oid).unwrap();
    if !store.exists(&coll, &key).ok()? {
        return None;
    }
    Some(store.read(&coll, &key, 0, 1 << 30).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_reach_every_replica_and_resends_apply_once() {
    let (c, client) = setup("replicate").await;
    let map = client.map();
    for i in 0..20u64 {
        let oid = format!("obj{i}");
        let body = Bytes::from(vec![i as u8; 1000 + i as usize]);
        let (r, _) = client
            .op(&oid, i, vec![write_full(body.len())], body.clone())
            .await;
        assert_eq!(r.code, 0, "{}", r.message);
        let (r, data) = client
            .op(&oid, 1000 + i, vec![read_all()], Bytes::new())
            .await;
        assert_eq!(r.code, 0, "{}", r.message);
        assert_eq!(data, body);
        let (_, acting) = client.primary(&oid);
        assert_eq!(acting.len(), 3);
        for o in acting {
            let store = &c.osds[&o].1;
            assert_eq!(
                object_on(store, &map, &oid).as_deref(),
                Some(&body[..]),
                "osd.{o}"
            );
        }
    }
    // The same request id twice: applied once, the second answer replayed.
    let (r1, _) = client
        .op("log", 5000, vec![append(3)], Bytes::from_static(b"abc"))
        .await;
    let (r2, _) = client
        .op("log", 5000, vec![append(3)], Bytes::from_static(b"abc"))
        .await;
    assert_eq!((r1.code, r2.code), (0, 0));
    assert!(!r1.replayed && r2.replayed);
    assert_eq!(r1.version, r2.version);
    let (_, data) = client.op("log", 5001, vec![read_all()], Bytes::new()).await;
    assert_eq!(&data[..], b"abc");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_unauthorized_and_malformed_ops_are_refused_and_the_osd_keeps_serving() {
    let (c, client) = setup("refuse").await;
    let (r, _) = client
        .op("x", 1, vec![write_full(2)], Bytes::from_static(b"hi"))
        .await;
    assert_eq!(r.code, 0, "{}", r.message);
    let (primary, _) = client.primary("x");
    // An op placed with an epoch before the PG's interval is fenced.
    let (r, _) = client
        .send_to(primary, "x", 2, 1, vec![read_all()], Bytes::new())
        .await;
    assert_eq!(OsdErrorCode::from_u32(r.code), OsdErrorCode::StaleEpoch);
    assert!(r.epoch >= client.map().epoch.0);
    // data_len does not match the data part.
    let (r, _) = client
        .send_to(
            primary,
            "x",
            3,
            client.map().epoch.0,
            vec![write_full(10)],
            Bytes::from_static(b"short"),
        )
        .await;
    assert_eq!(
        OsdErrorCode::from_u32(r.code),
        OsdErrorCode::InvalidArgument,
        "{}",
        r.message
    );
    // A client whose caps only allow reading another pool.
    let key = c
        .entity_key(
            "client.ro",
            &[("mon", "allow r"), ("osd", "allow r pool=other")],
        )
        .await;
    let mut ro = RawClient::new(&c, "client.ro", key).await;
    ro.wait_map(|m| m.pool_by_name("rbd").is_some()).await;
    let (r, _) = ro
        .op("x", 1, vec![write_full(2)], Bytes::from_static(b"no"))
        .await;
    assert_eq!(
        OsdErrorCode::from_u32(r.code),
        OsdErrorCode::PermissionDenied,
        "{}",
        r.message
    );
    let (r, _) = ro.op("x", 2, vec![read_all()], Bytes::new()).await;
    assert_eq!(
        OsdErrorCode::from_u32(r.code),
        OsdErrorCode::PermissionDenied
    );
    // Everyone else is still served.
    let (r, data) = client.op("x", 4, vec![read_all()], Bytes::new()).await;
    assert_eq!((r.code, &data[..]), (0, &b"hi"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_osd_that_missed_writes_is_recovered_when_it_returns() {
    let (mut c, mut client) = setup("recover").await;
    for i in 0..10u64 {
        let body = Bytes::from(format!("before {i}"));
        let (r, _) = client
            .op(&format!("o{i}"), i, vec![write_full(body.len())], body)
            .await;
        assert_eq!(r.code, 0, "{}", r.message);
    }
    let store2 = c.stop_osd(2).await;
    c.command(Command::OsdDown { ids: vec![2] }).await;
    client.wait_map(|m| !m.is_up(2)).await;
    // Writes continue with two of three (min_size 2).
    for i in 0..10u64 {
        let body = Bytes::from(format!("after {i}"));
        let (r, _) = client
            .op(
                &format!("o{i}"),
                100 + i,
                vec![write_full(body.len())],
                body,
            )
            .await;
        assert_eq!(r.code, 0, "{}", r.message);
    }
    c.start_osd(2, store2).await;
    let map = client.wait_map(|m| m.is_up(2)).await;
    // Once its PGs are active again, osd.2 holds the newest copies.
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in 0..10u64 {
        let oid = format!("o{i}");
        let (r, data) = client
            .op(&oid, 200 + i, vec![read_all()], Bytes::new())
            .await;
        assert_eq!(r.code, 0);
        assert_eq!(data, Bytes::from(format!("after {i}")));
        let (_, acting) = client.primary(&oid);
        if acting.contains(&2) {
            loop {
                let got = object_on(&c.osds[&2].1, &map, &oid);
                if got.as_deref() == Some(format!("after {i}").as_bytes()) {
                    break;
                }
                assert!(Instant::now() < deadline, "osd.2 never got {oid}: {got:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

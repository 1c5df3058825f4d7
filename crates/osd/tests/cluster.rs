//! One monitor and three OSDs in one process, over the in-memory network,
//! driven by a raw client that speaks the OSD protocol: replication to
//! every acting member, request-id dedup, epoch fencing, refusal of
//! unauthorized and malformed requests, and recovery of an OSD that missed
//! writes while it was stopped, with the PG serving I/O meanwhile (log
//! recovery and backfill, held and released by `norecover`/`nobackfill`).

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_maps::OsdMap;
use shoal_monclient::{Command, MonClient, TicketAuth, UpdateSink};
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
    /// The snapshot context writes carry (seq, snaps newest first).
    snapc: (u64, Vec<u64>),
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
        RawClient {
            msgr,
            map,
            inc: 42,
            snapc: (0, Vec::new()),
        }
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
            snap_seq: self.snapc.0,
            snaps: self.snapc.1.clone(),
            ..OsdOp::default()
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
    // An op placed with an epoch before the PG's interval is fenced; the
    // answer names an epoch at least as new as the client's when it sent
    // (a newer map may reach the client before the answer does).
    let sent_with = client.map().epoch.0;
    let (r, _) = client
        .send_to(primary, "x", 2, 1, vec![read_all()], Bytes::new())
        .await;
    assert_eq!(OsdErrorCode::from_u32(r.code), OsdErrorCode::StaleEpoch);
    assert!(r.epoch >= sent_with, "{} < {sent_with}", r.epoch);
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

/// Every primary's PG statistics.
async fn pg_stats(c: &Cluster) -> Vec<shoal_osd::pg::PgStat> {
    let mut out = Vec::new();
    for (osd, _) in c.osds.values() {
        out.extend(osd.pg_stats().await);
    }
    out
}

/// Waits (up to 20 s) until the PGs' statistics satisfy `ok`.
async fn wait_stats(c: &Cluster, what: &str, ok: impl Fn(&[shoal_osd::pg::PgStat]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stats = pg_stats(c).await;
        if stats.len() == 8 && ok(&stats) {
            return;
        }
        let states: Vec<_> = stats
            .iter()
            .map(|s| {
                format!(
                    "{} {} up {:?} acting {:?} left {} stalled {:?}",
                    s.pgid, s.state, s.up, s.acting, s.recovery_left, s.recovery_stalled
                )
            })
            .collect();
        assert!(Instant::now() < deadline, "never {what}: {states:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Writes `body(i)` to o0..o{n}, checking each answer.
async fn write_all(client: &mut RawClient, n: u64, tid: u64, body: impl Fn(u64) -> String) {
    for i in 0..n {
        let b = Bytes::from(body(i));
        let (r, _) = client
            .op(&format!("o{i}"), tid + i, vec![write_full(b.len())], b)
            .await;
        assert_eq!(r.code, 0, "{}", r.message);
    }
}

/// Stops osd.2, writes `after i` to every object while it is down, sets
/// `flag` and starts osd.2 again.
async fn miss_writes_then_return(c: &mut Cluster, client: &mut RawClient, n: u64, flag: &str) {
    write_all(client, n, 0, |i| format!("before {i}")).await;
    let store2 = c.stop_osd(2).await;
    c.command(Command::OsdDown { ids: vec![2] }).await;
    client.wait_map(|m| !m.is_up(2)).await;
    write_all(client, n, 1000, |i| format!("after {i}")).await;
    c.command(Command::OsdFlag {
        flag: flag.into(),
        on: true,
    })
    .await;
    client.wait_map(|m| m.has_flag(flag)).await;
    c.start_osd(2, store2).await;
    client.wait_map(|m| m.is_up(2)).await;
}

/// Copies osd.2 installed and recovery messages it took so far.
fn recovered_on_2(c: &Cluster) -> (u64, u64) {
    let counters = c.osds[&2].0.counters();
    (
        counters.recovered.load(Ordering::Relaxed),
        counters.perf.recovery.ops.load(Ordering::Relaxed),
    )
}

/// Reads every object and writes the first half again, while PGs are
/// degraded; then releases `flag` and checks every copy on osd.2. Returns
/// the copies osd.2 installed and the recovery messages it took once the
/// flag was released.
async fn io_while_degraded_then_release(
    c: &mut Cluster,
    client: &mut RawClient,
    n: u64,
    flag: &str,
) -> (u64, u64) {
    for i in 0..n {
        let (r, data) = client
            .op(&format!("o{i}"), 2000 + i, vec![read_all()], Bytes::new())
            .await;
        assert_eq!((r.code, data), (0, Bytes::from(format!("after {i}"))));
    }
    write_all(client, n / 2, 3000, |i| format!("during {i}")).await;
    // The objects nobody asked for are still missing: recovery is held.
    let stats = pg_stats(c).await;
    let left: u64 = stats.iter().map(|s| s.recovery_left).sum();
    assert!(left > 0, "recovery was not held: {stats:?}");
    let before = recovered_on_2(c);
    c.command(Command::OsdFlag {
        flag: flag.into(),
        on: false,
    })
    .await;
    wait_stats(c, "active+clean", |s| {
        s.iter().all(|s| s.state == "active+clean")
    })
    .await;
    let map = client.map();
    for i in 0..n {
        let want = if i < n / 2 {
            format!("during {i}")
        } else {
            format!("after {i}")
        };
        assert_eq!(
            object_on(&c.osds[&2].1, &map, &format!("o{i}")).as_deref(),
            Some(want.as_bytes()),
            "o{i} on osd.2"
        );
    }
    let after = recovered_on_2(c);
    (after.0 - before.0, after.1 - before.1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returning_osd_is_recovered_while_its_pgs_serve_io() {
    let (mut c, mut client) = setup("degraded").await;
    let n = 40;
    miss_writes_then_return(&mut c, &mut client, n, "norecover").await;
    // Every PG goes active at once, with osd.2 lacking objects.
    wait_stats(&c, "active+recovery_wait", |s| {
        s.iter().all(|s| s.state.starts_with("active"))
            && s.iter().any(|s| s.state == "active+recovery_wait+degraded")
    })
    .await;
    io_while_degraded_then_release(&mut c, &mut client, n, "norecover").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_osd_whose_log_is_too_old_is_backfilled_while_its_pgs_serve_io() {
    let mut c = Cluster::with_pool_config("backfill", 3, 3, 8, 1 << 30, |pg| {
        pg.log_limits.entries_max = 2;
    })
    .await;
    let mut client = RawClient::new(&c, "client.admin", c.admin_key.clone()).await;
    client
        .wait_map(|m| (0..3).all(|o| m.is_up(o)) && m.pool_by_name("rbd").is_some())
        .await;
    let n = 80;
    miss_writes_then_return(&mut c, &mut client, n, "nobackfill").await;
    // The two members with complete copies serve (pg_temp) while osd.2
    // waits to be backfilled.
    wait_stats(&c, "active+remapped+backfill_wait", |s| {
        s.iter().all(|s| s.state.starts_with("active"))
            && s.iter().any(|s| {
                s.state == "active+remapped+backfill_wait+undersized+degraded"
                    && !s.acting.contains(&2)
                    && s.up.contains(&2)
                    && s.degraded > 0
            })
    })
    .await;
    let (copies, pushes) =
        io_while_degraded_then_release(&mut c, &mut client, n, "nobackfill").await;
    // The backfill pushed small objects several to a message (installed
    // in one transaction, acknowledged once); the objects written while
    // osd.2 waited went one by one, each before its write.
    assert!(copies >= n / 4, "osd.2 installed {copies} copies");
    assert!(
        pushes * 2 <= copies,
        "osd.2 took {pushes} pushes for {copies} copies"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pg_whose_last_writers_are_down_is_down_not_stale_until_they_return() {
    // Two OSDs, two copies, writes with one (min_size 1).
    let mut c = Cluster::with_pool("down", 2, 2, 8).await;
    c.command(Command::PoolSet {
        name: "rbd".into(),
        key: "min_size".into(),
        value: "1".into(),
    })
    .await;
    let mut client = RawClient::new(&c, "client.admin", c.admin_key.clone()).await;
    client
        .wait_map(|m| {
            (0..2).all(|o| m.is_up(o)) && m.pool_by_name("rbd").is_some_and(|p| p.min_size == 1)
        })
        .await;
    write_all(&mut client, 10, 0, |i| format!("v1 {i}")).await;
    // osd.1 goes; osd.0 alone takes newer writes.
    let store1 = c.stop_osd(1).await;
    c.command(Command::OsdDown { ids: vec![1] }).await;
    client.wait_map(|m| !m.is_up(1)).await;
    write_all(&mut client, 10, 100, |i| format!("v2 {i}")).await;
    // osd.0 goes; osd.1 returns with only the older copies.
    let store0 = c.stop_osd(0).await;
    c.command(Command::OsdDown { ids: vec![0] }).await;
    client.wait_map(|m| !m.is_up(0)).await;
    c.start_osd(1, store1).await;
    client.wait_map(|m| m.is_up(1)).await;
    // Every PG took writes while osd.0 alone held it: osd.1 must not serve.
    wait_stats(&c, "down", |s| s.iter().all(|s| s.state == "down")).await;
    let epoch = client.map().epoch.0;
    let read = client.try_send_to(1, "o3", 500, epoch, vec![read_all()], Bytes::new());
    match tokio::time::timeout(Duration::from_millis(1500), read).await {
        Err(_) => {} // Waits: the PG is down.
        Ok(r) => panic!("a down PG answered a read: {r:?}"),
    }
    // osd.0 returns: the PGs peer with it, and osd.1 gets the newer copies.
    c.start_osd(0, store0).await;
    client.wait_map(|m| m.is_up(0)).await;
    wait_stats(&c, "active+clean", |s| {
        s.iter().all(|s| s.state == "active+clean")
    })
    .await;
    let map = client.map();
    for i in 0..10u64 {
        let oid = format!("o{i}");
        let (r, data) = client
            .op(&oid, 600 + i, vec![read_all()], Bytes::new())
            .await;
        assert_eq!((r.code, data), (0, Bytes::from(format!("v2 {i}"))));
        assert_eq!(
            object_on(&c.osds[&1].1, &map, &oid).as_deref(),
            Some(format!("v2 {i}").as_bytes())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_osd_is_backfilled_while_pg_temp_keeps_the_old_members_serving() {
    let (mut c, mut client) = setup("pgtemp").await;
    let n = 40;
    write_all(&mut client, n, 0, |i| format!("v1 {i}")).await;
    c.command(Command::OsdFlag {
        flag: "nobackfill".into(),
        on: true,
    })
    .await;
    // A new, empty osd.3: CRUSH maps some PGs to it, and their old acting
    // sets keep serving them (pg_temp) while it waits to be backfilled.
    c.start_osd(3, Arc::new(MemStore::new(1 << 30))).await;
    client.wait_map(|m| m.is_up(3)).await;
    wait_stats(&c, "remapped+backfill_wait", |s| {
        s.iter().any(|s| s.state == "active+remapped+backfill_wait")
            && s.iter().all(|s| {
                s.state == "active+clean"
                    || (s.state == "active+remapped+backfill_wait"
                        && !s.acting.contains(&3)
                        && s.up.contains(&3)
                        && s.misplaced > 0
                        && s.degraded == 0
                        && s.misplaced == s.recovery_left)
            })
    })
    .await;
    // Full redundancy meanwhile: reads and writes go on.
    for i in 0..n {
        let (r, data) = client
            .op(&format!("o{i}"), 200 + i, vec![read_all()], Bytes::new())
            .await;
        assert_eq!((r.code, data), (0, Bytes::from(format!("v1 {i}"))));
    }
    write_all(&mut client, n / 2, 300, |i| format!("v2 {i}")).await;
    c.command(Command::OsdFlag {
        flag: "nobackfill".into(),
        on: false,
    })
    .await;
    wait_stats(&c, "active+clean with osd.3", |s| {
        s.iter()
            .all(|s| s.state == "active+clean" && s.acting == s.up)
            && s.iter().any(|s| s.acting.contains(&3))
    })
    .await;
    let map = client.map();
    for i in 0..n {
        let oid = format!("o{i}");
        let want = if i < n / 2 {
            format!("v2 {i}")
        } else {
            format!("v1 {i}")
        };
        let (_, acting) = client.primary(&oid);
        for o in acting {
            assert_eq!(
                object_on(&c.osds[&o].1, &map, &oid).as_deref(),
                Some(want.as_bytes()),
                "{oid} on osd.{o}"
            );
        }
    }
}

/// Sets omap `keys` to `values`.
fn omap_set(keys: Vec<Vec<u8>>, values: Vec<Vec<u8>>) -> OsdSubOp {
    OsdSubOp {
        keys,
        values,
        ..OsdSubOp::new(OpCode::OmapSetVals)
    }
}

/// An object too big for one frame: `data_bytes` of data and 30 omap
/// values of 60 KB (1.8 MB of omap, past the 1 MiB control limit), as the
/// issue had it; written in ops that each fit a frame.
async fn write_big(client: &RawClient, oid: &str, tid: u64, data_bytes: usize) {
    let data: Bytes = (0..data_bytes).map(|i| (i % 253) as u8).collect();
    let (r, _) = client
        .op(oid, tid, vec![write_full(data.len())], data)
        .await;
    assert_eq!(r.code, 0, "{}", r.message);
    for batch in 0..3u64 {
        let keys = (0..10).map(|i| format!("k{:02}", batch * 10 + i).into_bytes());
        let values = (0..10).map(|i| vec![(batch * 10 + i) as u8; 60_000]);
        let op = omap_set(keys.collect(), values.collect());
        let (r, _) = client
            .op(oid, tid + 1 + batch, vec![op], Bytes::new())
            .await;
        assert_eq!(r.code, 0, "{}", r.message);
    }
}

/// Everything of `oid` in `store`: data, xattrs, omap header and entries.
type Copy = (
    Bytes,
    std::collections::BTreeMap<String, Bytes>,
    Bytes,
    Vec<(Bytes, Bytes)>,
);

fn full_copy(store: &MemStore, map: &OsdMap, oid: &str) -> Option<Copy> {
    use std::ops::Bound::Unbounded;
    let pool = map.pool_by_name("rbd").unwrap();
    let coll = shoal_osd::object::collection(pool.object_pg(oid, ""));
    let key = shoal_osd::object::object_key(pool, "", oid).unwrap();
    if !store.exists(&coll, &key).unwrap() {
        return None;
    }
    Some((
        store.read(&coll, &key, 0, 1 << 30).unwrap(),
        store.getxattrs(&coll, &key).unwrap(),
        store.omap_get_header(&coll, &key).unwrap(),
        store
            .omap_range(&coll, &key, Unbounded, Unbounded, 1 << 20)
            .unwrap(),
    ))
}

/// No half-made copy is left in any PG of `store`.
fn no_temps(store: &MemStore) {
    for coll in store.list_collections().unwrap() {
        let list = store.list_objects(&coll, None, 1 << 20).unwrap();
        let temps: Vec<_> = list
            .objects
            .iter()
            .filter(|k| k.name.starts_with(shoal_osd::copy::TEMP_PREFIX))
            .collect();
        assert!(temps.is_empty(), "{coll:?}: {temps:?}");
    }
}

/// Every member of `oid`'s acting set holds the same whole copy of it,
/// with 1.8 MB of omap.
fn same_everywhere(c: &Cluster, client: &RawClient, oid: &str) {
    let map = client.map();
    let (_, acting) = client.primary(oid);
    assert_eq!(acting.len(), 3, "{acting:?}");
    let copies: Vec<_> = acting
        .iter()
        .map(|o| full_copy(&c.osds[o].1, &map, oid).unwrap_or_else(|| panic!("osd.{o}")))
        .collect();
    let omap_bytes: usize = copies[0].3.iter().map(|(k, v)| k.len() + v.len()).sum();
    assert!(omap_bytes > 1_800_000, "{omap_bytes}");
    for (o, copy) in acting.iter().zip(&copies) {
        assert!(copy == &copies[0], "{oid} on osd.{o} differs");
        no_temps(&c.osds[o].1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_too_big_for_one_frame_heals_in_steps_when_members_return_or_are_replaced() {
    // Peering answers and activations go in pieces of 1 KiB: many of them.
    let mut c = Cluster::with_pool_config("bigheal", 4, 3, 8, 1 << 30, |pg| {
        pg.peering_piece_bytes = 1024;
    })
    .await;
    let mut client = RawClient::new(&c, "client.admin", c.admin_key.clone()).await;
    client
        .wait_map(|m| (0..4).all(|o| m.is_up(o)) && m.pool_by_name("rbd").is_some())
        .await;
    write_all(&mut client, 20, 0, |i| format!("small {i}")).await;
    // The primary misses the big object's writes: when it returns it
    // pulls the object from a replica (6 MiB of data: two steps; 1.8 MB
    // of omap: four).
    let (p, _) = client.primary("big");
    let store_p = c.stop_osd(p).await;
    c.command(Command::OsdDown { ids: vec![p] }).await;
    client.wait_map(|m| !m.is_up(p)).await;
    write_big(&client, "big", 100, 6 << 20).await;
    c.start_osd(p, store_p).await;
    client.wait_map(|m| m.is_up(p)).await;
    wait_stats(&c, "active+clean after the pull", |s| {
        s.iter().all(|s| s.state == "active+clean")
    })
    .await;
    assert_eq!(client.primary("big").0, p);
    same_everywhere(&c, &client, "big");
    // A replica is killed and marked out: another OSD takes its place and
    // the primary pushes the object to it, step by step.
    let (_, acting) = client.primary("big");
    let r = acting[1];
    c.stop_osd(r).await;
    c.command(Command::OsdDown { ids: vec![r] }).await;
    c.command(Command::OsdOut { ids: vec![r] }).await;
    client
        .wait_map(|m| !m.is_up(r) && m.osd(r).is_some_and(|o| o.weight == 0))
        .await;
    wait_stats(&c, "active+clean without the replica", |s| {
        s.iter()
            .all(|s| s.state == "active+clean" && !s.acting.contains(&r))
    })
    .await;
    same_everywhere(&c, &client, "big");
    for i in 0..20 {
        let (r, data) = client
            .op(&format!("o{i}"), 500 + i, vec![read_all()], Bytes::new())
            .await;
        assert_eq!((r.code, data), (0, Bytes::from(format!("small {i}"))));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_that_keeps_failing_is_reported_with_its_reason_then_heals() {
    // Steps of up to 4 MiB of omap cannot be sent (the control part of a
    // frame is limited to 1 MiB): every push of the big object fails.
    let mut c = Cluster::with_pool_config("stalled", 3, 3, 8, 1 << 30, |pg| {
        pg.copy_limits.omap_bytes_max = 4 << 20;
    })
    .await;
    let mut client = RawClient::new(&c, "client.admin", c.admin_key.clone()).await;
    client
        .wait_map(|m| (0..3).all(|o| m.is_up(o)) && m.pool_by_name("rbd").is_some())
        .await;
    let (p, acting) = client.primary("big");
    let r = *acting.iter().find(|o| **o != p).unwrap();
    let store_r = c.stop_osd(r).await;
    c.command(Command::OsdDown { ids: vec![r] }).await;
    client.wait_map(|m| !m.is_up(r)).await;
    write_big(&client, "big", 100, 1 << 20).await;
    c.start_osd(r, store_r).await;
    client.wait_map(|m| m.is_up(r)).await;
    // The PG says which object is stuck and why, and so does health.
    let pgid = client
        .map()
        .pool_by_name("rbd")
        .unwrap()
        .object_pg("big", "");
    wait_stats(&c, "a stalled recovery", |s| {
        s.iter().any(|s| {
            s.pgid == pgid
                && s.state.contains("degraded")
                && s.recovery_stalled.len() == 1
                && s.recovery_stalled[0].starts_with("big: push to osd.")
                && s.recovery_stalled[0].contains("control part of 1800")
        })
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let health = c.command(Command::Health).await;
        let stalled = health["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["code"] == "PG_RECOVERY_STALLED")
            .cloned();
        if let Some(s) = stalled {
            let line = s["detail"][0].as_str().unwrap();
            assert!(
                line.starts_with(&format!(
                    "pg {pgid} cannot recover object big: push to osd."
                )),
                "{line}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no PG_RECOVERY_STALLED: {health}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Fixed settings on the primary: it peers again and the copy goes
    // through in steps that fit.
    c.pg.copy_limits = shoal_osd::copy::StepLimits::default();
    let store_p = c.stop_osd(p).await;
    c.command(Command::OsdDown { ids: vec![p] }).await;
    client.wait_map(|m| !m.is_up(p)).await;
    c.start_osd(p, store_p).await;
    client.wait_map(|m| m.is_up(p)).await;
    wait_stats(&c, "active+clean", |s| {
        s.iter()
            .all(|s| s.state == "active+clean" && s.recovery_stalled.is_empty())
    })
    .await;
    same_everywhere(&c, &client, "big");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let health = c.command(Command::Health).await;
        let codes: Vec<_> = health["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["code"].clone())
            .collect();
        if !codes.iter().any(|c| c == "PG_RECOVERY_STALLED") {
            break;
        }
        assert!(Instant::now() < deadline, "still stalled: {health}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The store key of `oid`'s clone for snapshot `snap` and its PG's collection.
fn clone_key(map: &OsdMap, oid: &str, snap: u64) -> (shoal_objectstore::CollectionId, ObjectKey) {
    let pool = map.pool_by_name("rbd").unwrap();
    let pg = pool.object_pg(oid, "");
    let coll = shoal_osd::object::collection(pg);
    let head = shoal_osd::object::object_key(pool, "", oid).unwrap();
    (coll, head.clone_for(snap))
}

/// Snapshot clones (store keys of the same name with a snapshot id, as
/// clone-on-write leaves them) travel with backfill as objects of their
/// own, and a client's listing shows each object once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clones_are_backfilled_as_objects_and_clients_list_heads_only() {
    let (mut c, mut client) = setup("clones").await;
    let n = 12;
    write_all(&mut client, n, 0, |i| format!("v1 {i}")).await;
    let map = client.map();
    // Every member clones each head for snapshot 5, then the heads change.
    for i in 0..n {
        let oid = format!("o{i}");
        let (coll, clone) = clone_key(&map, &oid, 5);
        let head = clone.clone_for(ObjectKey::HEAD);
        for o in client.primary(&oid).1 {
            let mut t = shoal_objectstore::Transaction::new();
            t.clone_object(coll, head.clone(), clone.clone());
            c.osds[&o].1.apply_transaction(t).unwrap();
        }
    }
    write_all(&mut client, n, 100, |i| format!("v2 {i}")).await;
    // A new OSD is backfilled: the clones come with their heads.
    c.start_osd(3, Arc::new(MemStore::new(1 << 30))).await;
    client.wait_map(|m| m.is_up(3)).await;
    wait_stats(&c, "active+clean with osd.3", |s| {
        s.iter()
            .all(|s| s.state == "active+clean" && s.acting == s.up)
            && s.iter().any(|s| s.acting.contains(&3))
    })
    .await;
    let map = client.map();
    let mut on_new = 0;
    for i in 0..n {
        let oid = format!("o{i}");
        let (coll, clone) = clone_key(&map, &oid, 5);
        for o in client.primary(&oid).1 {
            let store = &c.osds[&o].1;
            assert_eq!(
                object_on(store, &map, &oid).as_deref(),
                Some(format!("v2 {i}").as_bytes()),
                "{oid} on osd.{o}"
            );
            let got = store.read(&coll, &clone, 0, 1 << 20);
            assert_eq!(
                got.as_deref().ok(),
                Some(format!("v1 {i}").as_bytes()),
                "{oid}'s clone on osd.{o}"
            );
            on_new += usize::from(o == 3);
        }
    }
    assert!(on_new > 0, "no object landed on osd.3");
    // A client lists each object once: every PG's primary, asked as a
    // client, names heads only.
    let pool = map.pool_by_name("rbd").unwrap();
    let mut names = Vec::new();
    for seed in 0..pool.pg_num {
        let pg = shoal_maps::PgId {
            pool: pool.id,
            seed,
        };
        let primary = map.pg_to_up_acting(pg).unwrap().acting_primary;
        let addr: SocketAddr = map
            .osd(primary)
            .unwrap()
            .addr
            .clone()
            .unwrap()
            .parse()
            .unwrap();
        let conn = client.msgr.connect(addr).await.unwrap();
        let list = shoal_proto::PgList {
            pool: pool.id,
            pg_seed: seed,
            epoch: map.epoch.0,
            max: 1000,
            ..Default::default()
        };
        let reply = conn.request(list, Bytes::new()).await.unwrap();
        let Message::PgListReply(page) = reply.msg else {
            panic!("not a listing")
        };
        assert_eq!(page.code, 0, "{}", page.message);
        assert!(page.snaps.is_empty(), "a client was told of clones");
        names.extend(page.names);
    }
    names.sort();
    let mut want: Vec<String> = (0..n).map(|i| format!("o{i}")).collect();
    want.sort();
    assert_eq!(names, want);
}

/// A write that cloned an object for a snapshot reached two of three
/// members: the third, back, gets the clone with the head (log recovery
/// syncs a head's clones), and one a primary lacks is pulled too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_recovery_brings_a_heads_clones() {
    let (mut c, mut client) = setup("clone-recovery").await;
    let n = 10;
    write_all(&mut client, n, 0, |i| format!("v1 {i}")).await;
    let store2 = c.stop_osd(2).await;
    c.command(Command::OsdDown { ids: vec![2] }).await;
    client.wait_map(|m| !m.is_up(2)).await;
    client.snapc = (4, vec![4]);
    write_all(&mut client, n, 100, |i| format!("v2 {i}")).await;
    c.start_osd(2, store2).await;
    client.wait_map(|m| m.is_up(2)).await;
    wait_stats(&c, "active+clean", |s| {
        s.iter().all(|s| s.state == "active+clean")
    })
    .await;
    let map = client.map();
    for i in 0..n {
        let oid = format!("o{i}");
        let (coll, clone) = clone_key(&map, &oid, 4);
        for o in client.primary(&oid).1 {
            let store = &c.osds[&o].1;
            assert_eq!(
                object_on(store, &map, &oid).as_deref(),
                Some(format!("v2 {i}").as_bytes()),
                "{oid} on osd.{o}"
            );
            assert_eq!(
                store.read(&coll, &clone, 0, 1 << 20).ok().as_deref(),
                Some(format!("v1 {i}").as_bytes()),
                "{oid}'s clone on osd.{o}"
            );
        }
    }
}

/// Waits until `ok` holds of every member's store for every object.
async fn wait_stores(
    c: &Cluster,
    client: &RawClient,
    n: u64,
    what: &str,
    ok: impl Fn(&MemStore, &OsdMap, &str) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let map = client.map();
        let mut bad = Vec::new();
        for i in 0..n {
            let oid = format!("o{i}");
            for o in client.primary(&oid).1 {
                if !ok(&c.osds[&o].1, &map, &oid) {
                    bad.push(format!("{oid} on osd.{o}"));
                }
            }
        }
        if bad.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "never {what}: {bad:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Removing a snapshot trims it on every member: a clone that stood for it
/// alone is deleted, snapsets forget it, a removed head's snapdir goes
/// with its last clone, and the PGs' object counts (clones included) drop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_snapshots_are_trimmed_on_every_member() {
    let (c, mut client) = setup("snaptrim").await;
    let n = 8;
    write_all(&mut client, n, 0, |i| format!("v1 {i}")).await;
    let create = || Command::PoolSelfmanagedSnapCreate { pool: "rbd".into() };
    let s1 = c.command(create()).await["snapid"].as_u64().unwrap();
    client.snapc = (s1, vec![s1]);
    write_all(&mut client, n, 100, |i| format!("v2 {i}")).await;
    let s2 = c.command(create()).await["snapid"].as_u64().unwrap();
    client.snapc = (s2, vec![s2, s1]);
    write_all(&mut client, n, 200, |i| format!("v3 {i}")).await;
    // o0's head goes: its snapdir keeps its clones.
    let (r, _) = client
        .op("o0", 300, vec![OsdSubOp::new(OpCode::Remove)], Bytes::new())
        .await;
    assert_eq!(r.code, 0, "{}", r.message);
    let objects = |s: &[shoal_osd::pg::PgStat]| s.iter().map(|s| s.objects).sum::<u64>();
    wait_stats(&c, "heads and clones counted", |s| objects(s) == 3 * n - 1).await;
    let has = |store: &MemStore, map: &OsdMap, oid: &str, snap: u64| {
        let (coll, k) = clone_key(map, oid, snap);
        store.exists(&coll, &k).unwrap()
    };

    c.command(Command::PoolSelfmanagedSnapRemove {
        pool: "rbd".into(),
        snapid: s1,
    })
    .await;
    wait_stores(&c, &client, n, "snapshot 1 trimmed", |st, map, oid| {
        !has(st, map, oid, s1) && has(st, map, oid, s2)
    })
    .await;
    wait_stats(&c, "clones of snapshot 1 uncounted", |s| {
        objects(s) == 2 * n - 1 && s.iter().all(|s| s.state == "active+clean")
    })
    .await;
    // Snapshot 2's clones still read as they were.
    let map = client.map();
    for i in 0..n {
        let oid = format!("o{i}");
        let (coll, k) = clone_key(&map, &oid, s2);
        for o in client.primary(&oid).1 {
            let got = c.osds[&o].1.read(&coll, &k, 0, 1 << 20).unwrap();
            assert_eq!(got, format!("v2 {i}").as_bytes(), "{oid}@{s2} on osd.{o}");
        }
    }

    c.command(Command::PoolSelfmanagedSnapRemove {
        pool: "rbd".into(),
        snapid: s2,
    })
    .await;
    wait_stores(&c, &client, n, "every clone trimmed", |st, map, oid| {
        !has(st, map, oid, s2) && !has(st, map, oid, shoal_osd::object::SNAPDIR)
    })
    .await;
    wait_stats(&c, "heads alone counted", |s| objects(s) == n - 1).await;
}

/// PGs of `osd` (as primary) in a scrub.
async fn scrubbing(c: &Cluster, osd: i32) -> Vec<String> {
    let (o, _) = &c.osds[&osd];
    o.pg_stats()
        .await
        .into_iter()
        .filter(|s| s.state.contains("scrubbing"))
        .map(|s| s.pgid.to_string())
        .collect()
}

/// A cluster of 3 OSDs with `max_scrubs` slots each, every PG due for a
/// (deep) scrub every 300 ms, 1 200 objects written; and its client.
async fn scrub_cluster(tag: &str, max_scrubs: usize) -> (Cluster, RawClient) {
    let mut c = Cluster::new(tag).await;
    c.scrub_intervals = (Duration::from_millis(300), Duration::from_millis(300));
    c.pg.max_scrubs = max_scrubs;
    c.create_pool("rbd", 8, 3).await;
    for id in 0..3 {
        c.start_osd(id, Arc::new(MemStore::new(1 << 30))).await;
    }
    c.wait_up(3).await;
    let admin_key = c.admin_key.clone();
    let mut client = RawClient::new(&c, "client.admin", admin_key).await;
    client
        .wait_map(|m| (0..3).all(|o| m.is_up(o)) && m.pool_by_name("rbd").is_some())
        .await;
    // Objects enough for each scrub to take several chunks.
    write_all(&mut client, 1200, 1, |i| format!("{i}").repeat(1000)).await;
    (c, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_scrubs_run_one_pg_per_osd_at_a_time() {
    // Without the OSD's scrub slot, each OSD would scrub all its PGs at
    // once, as a new cluster did at its first tick.
    let (c, client) = scrub_cluster("scrub-slots", 1).await;
    let mut seen = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(6);
    while Instant::now() < deadline {
        for osd in 0..3 {
            let now = scrubbing(&c, osd).await;
            if now.len() > 1 {
                // One pass is not atomic across PGs: a scrub that ended
                // and the next that began during it are not two at once.
                // Two that still run when asked again are.
                let again = scrubbing(&c, osd).await;
                let both: Vec<_> = now.iter().filter(|p| again.contains(p)).collect();
                assert!(both.len() <= 1, "osd.{osd} scrubs {both:?} at once");
            }
            seen.extend(now);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Scrubs did run, one after another, on several PGs.
    assert!(seen.len() >= 4, "scrubs seen on {seen:?} only");
    // And the PGs still serve I/O.
    let (r, d) = client.op("o7", 5000, vec![read_all()], Bytes::new()).await;
    assert_eq!(r.code, 0, "{}", r.message);
    assert_eq!(d, Bytes::from("7".repeat(1000)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_scrub_is_scheduled_with_no_slots() {
    let (c, _client) = scrub_cluster("scrub-none", 0).await;
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        for osd in 0..3 {
            let now = scrubbing(&c, osd).await;
            assert!(
                now.is_empty(),
                "osd.{osd} scrubs {now:?} with osd_max_scrubs 0"
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

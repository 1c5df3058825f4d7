//! Watch and notify against an in-process cluster: a notify reaches every
//! watcher and returns their replies; a watcher that does not answer is
//! reported missed; the watchers are listed; a watch follows its PG to a
//! new primary when the old one stops; a watcher whose client is gone is
//! dropped after its timeout.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bytes::Bytes;
use shoal_client::{Client, ClientOptions};
use shoal_monclient::Command;
use shoal_testkit::{Cluster, MON, net_cfg};

async fn client(c: &Cluster, watch_timeout: Duration) -> Client {
    let mut o = ClientOptions::new(
        vec![MON.parse().unwrap()],
        "client.admin".parse().unwrap(),
        c.admin_key.clone(),
    );
    o.net = net_cfg();
    o.transport = Arc::new(c.net.clone());
    o.op_timeout = Duration::from_secs(20);
    o.watch_timeout = watch_timeout;
    Client::connect(o).await.unwrap()
}

/// Answers every notify on `w` with `reply`, counting them in `seen`.
fn answer(
    mut w: shoal_client::Watch,
    reply: &'static [u8],
    seen: Arc<AtomicU32>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(ev) = w.next().await {
            seen.fetch_add(1, Ordering::Relaxed);
            ev.ack(Bytes::from_static(reply)).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifies_reach_every_watcher_and_watches_follow_the_pg() {
    let mut c = Cluster::with_pool("client-watch", 3, 3, 8).await;
    let a = client(&c, Duration::from_secs(3)).await;
    let b = client(&c, Duration::from_secs(3)).await;
    let n = client(&c, Duration::from_secs(3)).await;
    let (pa, pb, pn) = (
        a.pool("rbd").unwrap(),
        b.pool("rbd").unwrap(),
        n.pool("rbd").unwrap(),
    );
    pn.write_full("hdr", &b"x"[..]).await.unwrap();

    let wa = pa.watch("hdr").await.unwrap();
    let wb = pb.watch("hdr").await.unwrap();
    let (ca, cb) = (wa.cookie(), wb.cookie());
    let mut watchers = pn.list_watchers("hdr").await.unwrap();
    watchers.sort_by_key(|w| w.cookie);
    let mut want = vec![(a.client_inc(), ca), (b.client_inc(), cb)];
    want.sort_by_key(|w| w.1);
    let got: Vec<_> = watchers.iter().map(|w| (w.client_inc, w.cookie)).collect();
    assert_eq!(got, want);
    assert!(watchers.iter().all(|w| w.entity == "client.admin"));
    let seen_a = Arc::new(AtomicU32::new(0));
    let ta = answer(wa, b"from a", Arc::clone(&seen_a));
    let tb = answer(wb, b"from b", Arc::new(AtomicU32::new(0)));

    let r = pn
        .notify("hdr", &b"hello"[..], Duration::from_secs(5))
        .await
        .unwrap();
    assert!(r.missed.is_empty(), "{r:?}");
    let mut replies: Vec<_> = r.acked.iter().map(|(_, d)| d.clone()).collect();
    replies.sort();
    assert_eq!(replies, vec![Bytes::from("from a"), Bytes::from("from b")]);

    // A notify to an object nobody watches comes back at once, empty.
    let r = pn
        .notify("other", &b"x"[..], Duration::from_secs(5))
        .await
        .unwrap();
    assert!(r.acked.is_empty() && r.missed.is_empty());

    // A watcher that never answers is reported missed after the timeout.
    let mut silent = pn.watch("hdr").await.unwrap();
    let hold = tokio::spawn(async move {
        // Take the event and keep it unanswered until the notify gives up.
        let ev = silent.next().await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        drop(ev);
        silent
    });
    let r = pn
        .notify("hdr", &b"again"[..], Duration::from_millis(1500))
        .await
        .unwrap();
    assert_eq!(r.acked.len(), 2, "{r:?}");
    assert_eq!(r.missed.len(), 1, "{r:?}");
    assert_eq!(r.missed[0].client_inc, n.client_inc());
    hold.await.unwrap().unwatch().await.unwrap();
    assert_eq!(pn.list_watchers("hdr").await.unwrap().len(), 2);

    // The primary stops: both watches are registered with the new one.
    let map = n.map().unwrap();
    let pool = map.pool_by_name("rbd").unwrap();
    let pg = pool.object_pg("hdr", "");
    let primary = map.pg_to_up_acting(pg).unwrap().acting_primary;
    c.stop_osd(primary).await;
    c.command(Command::OsdDown { ids: vec![primary] }).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let now = n.map().unwrap();
        let moved = now.pg_to_up_acting(pg).unwrap().acting_primary;
        if moved != primary && moved >= 0 {
            let listed = pn.list_watchers("hdr").await.map(|w| w.len()).unwrap_or(0);
            if listed == 2 {
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the watches did not follow the PG to its new primary"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let r = pn
        .notify("hdr", &b"after"[..], Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(r.acked.len(), 2, "{r:?}");

    // Client b goes away without unwatching: its watch times out.
    b.shutdown().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let left = pn.list_watchers("hdr").await.unwrap();
        if left.len() == 1 {
            assert_eq!(left[0].cookie, ca);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "a dead watcher was never dropped: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let r = pn
        .notify("hdr", &b"last"[..], Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(r.acked.len(), 1);
    assert!(r.missed.is_empty());
    ta.abort();
    tb.abort();
    let na = seen_a.load(Ordering::Relaxed);
    assert_eq!(na, 4, "a saw {na} notifies");
    a.shutdown().await;
}

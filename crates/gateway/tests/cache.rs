//! Two gateways' record caches and the command line's changes against an
//! in-process cluster: records are served from the cache once read (a
//! change made behind the gateways' back, without a notify, is not seen,
//! which shows the cache is used); every change made through the records
//! (an ACL set by one gateway, a key removed or a user and bucket removed
//! from the command line) is seen by the other gateway at once; and when
//! the control object's primary stops, the watch moves to the new one and
//! the cache starts empty (a notify may have missed it meanwhile).

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::time::Duration;

use shoal_gateway::cache::CONTROL;
use shoal_gateway::meta::Meta;
use shoal_monclient::Command;
use shoal_testkit::Cluster;

mod common;

async fn client(c: &Cluster) -> shoal_client::Client {
    common::client(c, Duration::from_secs(20), Some(Duration::from_secs(3))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateways_see_every_change_of_a_record_they_cache() {
    let mut c = Cluster::with_pool("gw-cache", 3, 3, 8).await;
    let (ca, cb, cli) = (client(&c).await, client(&c).await, client(&c).await);
    let a = Meta::cached(ca.pool("rbd").unwrap()).await.unwrap();
    let b = Meta::cached(cb.pool("rbd").unwrap()).await.unwrap();
    // The command line keeps no cache; its changes notify all the same.
    let admin = Meta::new(cli.pool("rbd").unwrap());

    let alice = admin.user_create("alice", "Alice", "").await.unwrap();
    let key = alice.keys[0].access_key.clone();
    let bucket = a
        .bucket_create("photos", &alice, "private", "")
        .await
        .unwrap();
    assert_eq!(b.user_by_key(&key).await.unwrap().unwrap().uid, "alice");
    assert_eq!(b.bucket("photos").await.unwrap().unwrap().acl, "private");
    assert!(b.cache().unwrap().len() >= 2);

    // Served from the cache: a change that tells nobody is not seen.
    let mut sneaky = bucket.clone();
    sneaky.acl = "public-read".into();
    let rec = serde_json::to_vec(&sneaky).unwrap();
    cli.pool("rbd")
        .unwrap()
        .omap_set("buckets", &[("photos", rec)])
        .await
        .unwrap();
    assert_eq!(b.bucket("photos").await.unwrap().unwrap().acl, "private");

    // A change through the records reaches the other gateway at once.
    a.set_bucket_acl(&bucket, "public-read-write")
        .await
        .unwrap();
    assert_eq!(
        b.bucket("photos").await.unwrap().unwrap().acl,
        "public-read-write"
    );
    let second = admin.key_create("alice").await.unwrap().keys[1]
        .access_key
        .clone();
    assert!(a.user_by_key(&second).await.unwrap().is_some());
    admin.key_remove("alice", &key).await.unwrap();
    assert!(a.user_by_key(&key).await.unwrap().is_none());
    assert!(b.user_by_key(&key).await.unwrap().is_none());
    assert_eq!(b.user_by_key(&second).await.unwrap().unwrap().keys.len(), 1);
    b.bucket_remove(&b.bucket("photos").await.unwrap().unwrap())
        .await
        .unwrap();
    assert!(a.bucket("photos").await.unwrap().is_none());
    admin.user_remove("alice").await.unwrap();
    assert!(a.user_by_key(&second).await.unwrap().is_none());
    assert!(b.user("alice").await.unwrap().is_none());

    // The control object's primary stops: the watch moves to the new one
    // and the cache is emptied (a notify may have missed it meanwhile).
    let bob = admin.user_create("bob", "Bob", "").await.unwrap();
    let bob_key = bob.keys[0].access_key.clone();
    assert!(a.user_by_key(&bob_key).await.unwrap().is_some());
    assert!(!a.cache().unwrap().is_empty());
    let map = ca.map().unwrap();
    let pg = map.pool_by_name("rbd").unwrap().object_pg(CONTROL, "");
    let primary = map.pg_to_up_acting(pg).unwrap().acting_primary;
    c.stop_osd(primary).await;
    c.command(Command::OsdDown { ids: vec![primary] }).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        // Each lookup checks whether the watch moved or lapsed.
        let _ = a.cache().unwrap().get("users", "nothing");
        if a.cache().unwrap().is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cache outlived its watch's move"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // And changes reach it through the new primary.
    assert!(a.user_by_key(&bob_key).await.unwrap().is_some());
    admin.user_remove("bob").await.unwrap();
    assert!(a.user_by_key(&bob_key).await.unwrap().is_none());
}

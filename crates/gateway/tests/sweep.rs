//! What a gateway that dies leaves behind is collected: a PUT cut off
//! after some of its stripes (its future dropped, as a killed gateway's
//! would be) is never listed, and the sweep removes its stripes; a
//! multipart upload left unfinished is aborted, parts and all, once it is
//! older than the expiry; data an overwrite replaced stays for readers
//! until then. Writes in progress and young uploads are left. Versions
//! racing through two gateways are all kept, the newest current, and
//! their data collected once they are deleted.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::time::Duration;

use bytes::Bytes;
use shoal_client::{Client, Pool};
use shoal_gateway::meta::{Entry, Meta, STRIPE, md5_check};
use shoal_testkit::Cluster;

mod common;

async fn client(c: &Cluster) -> Client {
    common::client(c, Duration::from_secs(30), None).await
}

/// The data objects (stripes) in `pool`.
async fn stripes(pool: &Pool) -> Vec<String> {
    let mut names: Vec<String> = pool
        .list_all()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n.starts_with("data."))
        .collect();
    names.sort();
    names
}

/// A body of `full` stripes and then nothing, ever (a client that stalls
/// while the gateway dies).
fn stalled_body(
    full: usize,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Unpin {
    let chunks = (0..full).map(|_| Ok(Bytes::from(vec![7u8; STRIPE as usize])));
    Box::pin(futures_util::stream::iter(chunks).chain(futures_util::stream::pending()))
}

use futures_util::StreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_dies_mid_write_leaves_nothing_after_a_sweep() {
    let c = Cluster::with_pool("gw-sweep", 3, 2, 8).await;
    let client = client(&c).await;
    let pool = client.pool("rbd").unwrap();
    let meta = Meta::new(pool.clone());
    meta.user_create("alice", "alice", "").await.unwrap();
    let b = meta
        .bucket_create(
            "photos",
            &meta.user("alice").await.unwrap().unwrap(),
            "private",
            "",
        )
        .await
        .unwrap();
    meta.put(
        &b,
        "kept",
        futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b"kept"))]),
        1 << 30,
        md5_check(None),
        Entry::default(),
    )
    .await
    .unwrap();
    let kept = stripes(&pool).await;
    assert_eq!(kept.len(), 1);

    // A PUT cut off after two stripes: nothing is listed, its stripes
    // remain until a sweep.
    let cut = tokio::time::timeout(
        Duration::from_secs(3),
        meta.put(
            &b,
            "cut",
            stalled_body(2),
            1 << 30,
            md5_check(None),
            Entry::default(),
        ),
    )
    .await;
    assert!(cut.is_err(), "the stalled PUT finished");
    let (listed, _) = meta.list(&b, "", "", 100).await.unwrap();
    let keys: Vec<&str> = listed.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["kept"]);
    assert_eq!(stripes(&pool).await.len(), 3, "the cut PUT's stripes");
    // Too young to sweep: left alone (it may still be in progress).
    assert_eq!(meta.sweep(3_600_000, 3_600_000).await.unwrap(), (0, 0));
    assert_eq!(stripes(&pool).await.len(), 3);

    // An upload begun and left with a part.
    let u = meta
        .upload_create(&b, "movie", Entry::default(), None)
        .await
        .unwrap();
    meta.upload_part(
        &b,
        &u,
        1,
        futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from(vec![1u8; 1000]))]),
        md5_check(None),
        None,
    )
    .await
    .unwrap();
    assert_eq!(stripes(&pool).await.len(), 4);

    // An overwrite keeps the data it replaced for readers until a sweep.
    meta.put(
        &b,
        "kept",
        futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b"new"))]),
        1 << 30,
        md5_check(None),
        Entry::default(),
    )
    .await
    .unwrap();
    assert_eq!(stripes(&pool).await.len(), 5);
    assert_eq!(meta.sweep(3_600_000, 3_600_000).await.unwrap(), (0, 0));
    assert_eq!(stripes(&pool).await.len(), 5);

    // Old enough: the cut PUT's stripes and the replaced ones go, and the
    // upload with its part.
    assert_eq!(meta.sweep(0, 0).await.unwrap(), (2, 1));
    let now = stripes(&pool).await;
    assert_eq!(now.len(), 1);
    assert_ne!(now, kept, "the replaced stripe was kept");
    assert!(meta.uploads(&b, "").await.unwrap().is_empty());
    // The object written whole still reads.
    let e = meta.entry(&b, "kept").await.unwrap().unwrap();
    let (oid, off, len) = Meta::pieces(&e, 0, e.size).remove(0);
    assert_eq!(&meta.read_piece(&oid, off, len).await.unwrap()[..], b"new");
    // A second sweep finds nothing.
    assert_eq!(meta.sweep(0, 0).await.unwrap(), (0, 0));
    client.shutdown().await;
}

fn body(
    data: &'static [u8],
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Unpin {
    futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(data))])
}

/// Writers racing on one key of a versioned bucket (through two gateways'
/// records, as two gateways would) each make a version; the current entry
/// is always the newest version; deleting every version for good and
/// sweeping leaves no data behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_versioned_writes_keep_every_version_and_the_newest_current() {
    let c = Cluster::with_pool("gw-versions", 3, 2, 8).await;
    let client = client(&c).await;
    let pool = client.pool("rbd").unwrap();
    let (m1, m2) = (Meta::new(pool.clone()), Meta::new(pool.clone()));
    let alice = m1.user_create("alice", "Alice", "").await.unwrap();
    let b = m1
        .bucket_create("logs", &alice, "private", "")
        .await
        .unwrap();
    // Written before versioning: becomes the null version when it is turned on.
    m1.put(
        &b,
        "k",
        body(b"old"),
        1 << 20,
        md5_check(None),
        Entry::default(),
    )
    .await
    .unwrap();
    let b = m1.set_versioning(&b, "Enabled").await.unwrap();
    assert!(b.versions_recorded);
    let writes = (0..16).map(|i| {
        let (m, b) = (if i % 2 == 0 { m1.clone() } else { m2.clone() }, b.clone());
        async move {
            let data: &'static [u8] = if i % 5 == 4 { b"" } else { b"data" };
            if i % 5 == 4 {
                m.commit(&b, "k", Meta::delete_marker()).await
            } else {
                m.put(
                    &b,
                    "k",
                    body(data),
                    1 << 20,
                    md5_check(None),
                    Entry::default(),
                )
                .await
            }
        }
    });
    let made: Vec<Entry> = futures_util::future::join_all(writes)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let (versions, more) = m1.list_versions(&b, b"", "", 100).await.unwrap();
    assert!(!more);
    assert_eq!(versions.len(), 17, "16 writes and the null version");
    let mut ids: Vec<&str> = versions.iter().map(|v| v.version_id.as_str()).collect();
    assert_eq!(ids.last(), Some(&"null"));
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 17, "version ids are unique");
    for m in &made {
        assert!(versions.iter().any(|v| v.entry.version_id == m.version_id));
    }
    // The current entry is the newest version, or none under a marker.
    let newest = &versions[0].entry;
    let current = m1.entry(&b, "k").await.unwrap();
    match newest.delete_marker {
        true => assert!(current.is_none()),
        false => assert_eq!(current.as_ref(), Some(newest)),
    }
    // Every version removed for good, newest first and oldest first by two
    // gateways at once; then nothing is listed and the sweep takes all data.
    let (front, back) = versions.split_at(8);
    let (a, z) = tokio::join!(
        async {
            for v in front {
                m1.delete_version(&b, "k", &v.version_id).await.unwrap();
            }
        },
        async {
            for v in back.iter().rev() {
                m2.delete_version(&b, "k", &v.version_id).await.unwrap();
            }
        }
    );
    let ((), ()) = (a, z);
    assert!(m1.entry(&b, "k").await.unwrap().is_none());
    assert!(!m1.has_versions(&b).await.unwrap());
    m1.sweep(0, 0).await.unwrap();
    assert!(stripes(&pool).await.is_empty());
    m1.bucket_remove(&b).await.unwrap();
    client.shutdown().await;
}

/// A version's lock is checked in the delete's own step: one under a
/// legal hold set after it was written stays, whoever deletes it; lifted,
/// it goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_put_on_hold_after_it_was_written_is_not_deleted() {
    let c = Cluster::with_pool("gw-lock", 3, 2, 8).await;
    let client = client(&c).await;
    let pool = client.pool("rbd").unwrap();
    let m = Meta::new(pool.clone());
    let alice = m.user_create("alice", "Alice", "").await.unwrap();
    let b = m
        .bucket_create("held", &alice, "private", "")
        .await
        .unwrap();
    let b = m.set_versioning(&b, "Enabled").await.unwrap();
    let e = m
        .put(
            &b,
            "k",
            body(b"kept"),
            1 << 20,
            md5_check(None),
            Entry::default(),
        )
        .await
        .unwrap();
    let vid = e.version_id.clone().unwrap();
    m.update_object(&b, "k", Some(&vid), |e| e.legal_hold = true)
        .await
        .unwrap()
        .unwrap();
    let held = |e: &Entry| match e.legal_hold {
        true => Err("under a legal hold".to_string()),
        false => Ok(()),
    };
    let r = m.delete_version_if(&b, "k", &vid, held).await;
    assert!(
        matches!(r, Err(shoal_gateway::meta::MetaError::Locked(_))),
        "{r:?}"
    );
    assert!(m.version(&b, "k", &vid).await.unwrap().is_some());
    m.update_object(&b, "k", Some(&vid), |e| e.legal_hold = false)
        .await
        .unwrap()
        .unwrap();
    m.delete_version_if(&b, "k", &vid, held).await.unwrap();
    assert!(m.version(&b, "k", &vid).await.unwrap().is_none());
    m.sweep(0, 0).await.unwrap();
    assert!(stripes(&pool).await.is_empty());
    m.bucket_remove(&b).await.unwrap();
    client.shutdown().await;
}

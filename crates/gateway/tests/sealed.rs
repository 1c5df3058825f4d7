//! An encrypted object's stripes in the pool hold none of its plaintext and
//! read back through its data key, whole and in ranges across chunk and
//! stripe edges; another key, or a byte changed in the pool, fails the
//! read of the chunks it touches (never wrong bytes), while the chunks it
//! does not touch still read.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use shoal_gateway::meta::{Entry, Meta, STRIPE, chunks, md5_check};
use shoal_gateway::sse::{self, Key};
use shoal_testkit::Cluster;

mod common;

/// Bytes `[start, end)` of `e` read through `key`, or the read's error.
async fn read(meta: &Meta, e: &Entry, start: u64, end: u64, key: &Key) -> Result<Vec<u8>, String> {
    let mut s = chunks(meta.clone(), Meta::pieces(e, start, end), Some(key.clone()));
    let mut out = Vec::new();
    while let Some(c) = s.next().await {
        out.extend_from_slice(&c.map_err(|e| e.to_string())?);
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_stripes_hold_no_plaintext_read_back_and_refuse_damage() {
    let c = Cluster::with_pool("gw-sealed", 3, 2, 8).await;
    let client = common::client(&c, Duration::from_secs(30), None).await;
    let pool = client.pool("rbd").unwrap();
    let meta = Meta::new(pool.clone());
    let alice = meta.user_create("alice", "alice", "").await.unwrap();
    let b = meta
        .bucket_create("vault", &alice, "private", "")
        .await
        .unwrap();
    // Two stripes, the second short and ending mid-chunk.
    let data: Vec<u8> = (0..STRIPE as usize + 5000)
        .map(|i| (i % 251) as u8)
        .collect();
    let key = Key::from_bytes([9; 32]);
    let body: Vec<Result<Bytes, std::io::Error>> = data
        .chunks(1 << 20)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let e = meta
        .put_sealed(
            &b,
            "secret",
            futures_util::stream::iter(body),
            u64::MAX,
            md5_check(None),
            Entry::default(),
            Some(&key),
        )
        .await
        .unwrap();
    assert_eq!(e.size, data.len() as u64);
    // The ETag is the plaintext's MD5, as for any object.
    {
        use md5::Digest;
        let md5 = md5::Md5::digest(&data);
        let hex: String = md5.iter().map(|x| format!("{x:02x}")).collect();
        assert_eq!(e.etag, hex);
    }

    // Raw, each stripe is its sealed length and none of the plaintext.
    let pieces = Meta::pieces(&e, 0, e.size);
    assert_eq!(pieces.len(), 2);
    for (oid, _, len) in &pieces {
        let raw = pool.read(oid, 0, 8 << 20).await.unwrap();
        assert_eq!(raw.len() as u64, sse::sealed_len(*len), "{oid}");
        for at in [0, 4096, 100_000, *len as usize - 64] {
            let plain = &data[at..at + 64];
            assert!(
                !raw.windows(64).any(|w| w == plain),
                "{oid} holds plaintext"
            );
        }
    }

    // Back through the key: whole, and ranges across chunk and stripe edges.
    let s = STRIPE;
    for (a, z) in [
        (0, e.size),
        (0, 1),
        (4095, 4097),
        (4096, 8192),
        (s - 10, s + 10),
        (s + 4000, e.size),
        (e.size - 1, e.size),
    ] {
        let got = read(&meta, &e, a, z, &key).await.unwrap();
        assert!(got == data[a as usize..z as usize], "{a}..{z}");
    }

    // Another key reads nothing.
    let other = Key::from_bytes([10; 32]);
    let err = read(&meta, &e, 0, 10, &other).await.unwrap_err();
    assert!(err.contains("authentication tag"), "{err}");

    // A byte changed in the second chunk of the first stripe: reads that
    // touch that chunk fail, the others still read.
    let (oid, _, _) = &pieces[0];
    let sealed_chunk = (sse::CHUNK + sse::TAG) as u64;
    let at = sealed_chunk + 100;
    let byte = pool.read(oid, at, 1).await.unwrap()[0];
    pool.write(oid, at, vec![byte ^ 0x40]).await.unwrap();
    let err = read(&meta, &e, 4096, 4200, &key).await.unwrap_err();
    assert!(err.contains("authentication tag"), "{err}");
    assert!(read(&meta, &e, 0, e.size, &key).await.is_err());
    let got = read(&meta, &e, 0, 4096, &key).await.unwrap();
    assert!(got == data[..4096]);
    let got = read(&meta, &e, 8192, 9000, &key).await.unwrap();
    assert!(got == data[8192..9000]);
    // A stripe cut short: the read says so.
    let (oid2, _, len2) = &pieces[1];
    pool.truncate(oid2, sse::sealed_len(*len2) - 100)
        .await
        .unwrap();
    assert!(read(&meta, &e, s, e.size, &key).await.is_err());
    assert!(read(&meta, &e, s, s + 4096, &key).await.is_ok());
    client.shutdown().await;
}

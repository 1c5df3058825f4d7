//! The simulation's network: latency in virtual time, order within a
//! stream, partitions, kills.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use shoal_net::Transport;
use shoal_testkit::simnet::{Latency, SimNet, SimRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

fn addr() -> SocketAddr {
    "10.0.0.9:7000".parse().unwrap()
}

#[tokio::test(start_paused = true)]
async fn chunks_arrive_late_and_in_order() {
    let net = SimNet::new(
        1,
        Latency {
            min_ms: 10,
            max_ms: 50,
        },
    );
    let mut l = net.host("b").bind(addr()).await.unwrap();
    let t0 = Instant::now();
    let mut c = net.host("a").connect(addr()).await.unwrap();
    let mut s = l.accept().await.unwrap();
    for i in 0..20u8 {
        c.write.write_all(&[i]).await.unwrap();
    }
    let mut got = [0u8; 20];
    s.read.read_exact(&mut got).await.unwrap();
    assert_eq!(got.to_vec(), (0..20).collect::<Vec<u8>>());
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(20), "{took:?}");
    assert!(took <= Duration::from_millis(200), "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn partitions_break_streams_and_kills_refuse() {
    let net = SimNet::new(
        2,
        Latency {
            min_ms: 1,
            max_ms: 1,
        },
    );
    let mut l = net.host("b").bind(addr()).await.unwrap();
    let mut c = net.host("a").connect(addr()).await.unwrap();
    let mut s = l.accept().await.unwrap();
    net.partition("a", "b");
    assert!(c.write.write_all(b"x").await.is_err());
    assert!(s.read.read_u8().await.is_err());
    // Connecting across the partition hangs a while, then times out.
    let t0 = Instant::now();
    let e = net.host("a").connect(addr()).await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    assert!(t0.elapsed() >= Duration::from_millis(200));
    net.heal();
    assert!(net.host("a").connect(addr()).await.is_ok());
    // A killed node's port refuses, and its old handle is inert.
    let old = net.host("b");
    net.kill("b");
    let e = net.host("a").connect(addr()).await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
    let inert = tokio::time::timeout(Duration::from_secs(60), old.connect(addr())).await;
    assert!(
        inert.is_err(),
        "a dead incarnation's connect never finishes"
    );
    // The next incarnation listens again.
    let _l2 = net.host("b").bind(addr()).await.unwrap();
    assert!(net.host("a").connect(addr()).await.is_ok());
    drop(l);
}

#[test]
fn the_generator_replays() {
    let mut a = SimRng::new(9);
    let mut b = SimRng::new(9);
    let xs: Vec<u64> = (0..5).map(|_| a.range(0, 100)).collect();
    let ys: Vec<u64> = (0..5).map(|_| b.range(0, 100)).collect();
    assert_eq!(xs, ys);
    assert!(xs.iter().all(|x| *x <= 100));
    assert_eq!(a.pick::<u8>(&[]), None);
}

//! Messenger behaviour over real loopback TCP (and the in-memory network):
//! request/reply, pipelining, one-way messages, timeouts, reconnects,
//! backpressure, shutdown, and every way a handshake can fail.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use shoal_net::{
    Dispatcher, HandshakeError, Incoming, Keyring, KeyringAuth, MemNetwork, Messenger, NetConfig,
    NetError, Responder, TcpTransport, Transport,
};
use shoal_proto::{
    FrameDecoder, FrameFlags, FrameLimits, Hello, Message, Ping, Pong, RejectCode, encode_frame,
};
use shoal_types::EntityName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn names() -> (EntityName, EntityName) {
    ("mon.a".parse().unwrap(), "client.admin".parse().unwrap())
}

fn keyring() -> Keyring {
    let (s, c) = names();
    let mut k = Keyring::default();
    k.add_generated(s);
    k.add_generated(c);
    k
}

fn config() -> NetConfig {
    NetConfig {
        handshake_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_secs(10),
        backoff_min: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
        ..NetConfig::default()
    }
}

/// Answers every `Pong` request with a `Pong` carrying `seq + 1` and the
/// same data, after a delay of `seq % 7` ms so replies come out of order.
fn echo_dispatcher() -> Arc<dyn Dispatcher> {
    Arc::new(|inc: Incoming| {
        tokio::spawn(async move {
            if let (Message::Pong(p), Some(r)) = (inc.msg, inc.responder) {
                tokio::time::sleep(Duration::from_millis(p.seq % 7)).await;
                let _ = r.reply(Pong { seq: p.seq + 1 }, inc.data).await;
            }
        });
    })
}

fn messenger(
    name: &EntityName,
    k: Keyring,
    cfg: NetConfig,
    t: Arc<dyn Transport>,
    d: Arc<dyn Dispatcher>,
) -> Messenger {
    Messenger::new(
        name.clone(),
        cfg,
        t,
        Arc::new(KeyringAuth::new(name.clone(), k)),
        d,
    )
}

async fn server(k: Keyring, cfg: NetConfig, d: Arc<dyn Dispatcher>) -> (Messenger, SocketAddr) {
    let (s, _) = names();
    let m = messenger(&s, k, cfg, Arc::new(TcpTransport), d);
    let addr = m.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    (m, addr)
}

fn client(k: Keyring, cfg: NetConfig) -> Messenger {
    let (_, c) = names();
    messenger(
        &c,
        k,
        cfg,
        Arc::new(TcpTransport),
        Arc::new(|_: Incoming| {}),
    )
}

/// A hang guard, far above any wait a test expects: tests wait for events,
/// never for a time to pass.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// Waits until `cond` holds (polled), failing only if it never does.
async fn wait_for(mut cond: impl FnMut() -> bool) {
    let waiting = async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    if tokio::time::timeout(HANG_GUARD, waiting).await.is_err() {
        panic!("condition not reached in {HANG_GUARD:?}");
    }
}

#[tokio::test]
async fn pipelined_requests_get_their_own_replies() {
    let k = keyring();
    let (srv, addr) = server(k.clone(), config(), echo_dispatcher()).await;
    let cli = client(k, config());
    let conn = cli.connect(addr).await.unwrap();
    assert_eq!(conn.peer().name.to_string(), "mon.a");
    let mut joins = Vec::new();
    for seq in 0..500u64 {
        let conn = conn.clone();
        joins.push(tokio::spawn(async move {
            let data = Bytes::from(seq.to_le_bytes().to_vec());
            let r = conn.request(Pong { seq }, data.clone()).await.unwrap();
            assert_eq!(r.msg, Message::Pong(Pong { seq: seq + 1 }));
            assert_eq!(r.data, data);
        }));
    }
    for j in joins {
        j.await.unwrap();
    }
    // One connection carried everything, and nothing is left pending.
    assert_eq!(cli.connections().len(), 1);
    assert_eq!(srv.stats().connections_accepted, 1);
    assert_eq!(conn.requests_pending(), 0);
    cli.shutdown().await;
    srv.shutdown().await;
}

#[tokio::test]
async fn large_data_parts_arrive_intact_and_ping_is_built_in() {
    let k = keyring();
    let (srv, addr) = server(k.clone(), config(), echo_dispatcher()).await;
    let cli = client(k, config());
    let conn = cli.connect(addr).await.unwrap();
    let data: Bytes = (0..4 << 20)
        .map(|i: u32| (i * 7 + i / 4096) as u8)
        .collect::<Vec<_>>()
        .into();
    let r = conn
        .request(Ping { seq: 9, echo: true }, data.clone())
        .await
        .unwrap();
    assert_eq!(r.msg, Message::Pong(Pong { seq: 9 }));
    assert!(r.data == data, "4 MiB echo differs");
    cli.shutdown().await;
    srv.shutdown().await;
}

#[tokio::test]
async fn one_way_messages_reach_the_dispatcher() {
    let k = keyring();
    let got = Arc::new(Mutex::new(Vec::new()));
    let sink = got.clone();
    let d: Arc<dyn Dispatcher> = Arc::new(move |inc: Incoming| {
        assert!(inc.responder.is_none());
        if let Message::Pong(p) = inc.msg {
            sink.lock().unwrap().push(p.seq);
        }
    });
    let (srv, addr) = server(k.clone(), config(), d).await;
    let cli = client(k, config());
    let conn = cli.connect(addr).await.unwrap();
    for seq in 0..100 {
        conn.send(Pong { seq }, Bytes::new()).await.unwrap();
    }
    wait_for(|| got.lock().unwrap().len() == 100).await;
    // One connection delivers in order.
    assert_eq!(*got.lock().unwrap(), (0..100).collect::<Vec<_>>());
    cli.shutdown().await;
    srv.shutdown().await;
}

#[tokio::test]
async fn request_timeout_cleans_up() {
    let k = keyring();
    // Answers nothing: the responder is dropped (pings the messenger
    // answers itself).
    let (srv, addr) = server(k.clone(), config(), Arc::new(|_: Incoming| {})).await;
    let cli = client(k, config());
    let conn = cli.connect(addr).await.unwrap();
    let ping = |seq| Ping { seq, echo: false };
    // While the peer answers something else, a timed-out request leaves
    // the connection open.
    let (e, pong) = tokio::join!(
        conn.request_with_timeout(Pong { seq: 1 }, Bytes::new(), Duration::from_millis(300)),
        conn.request(ping(7), Bytes::new())
    );
    let e = e.unwrap_err();
    assert!(matches!(e, NetError::Timeout { ms: 300, .. }), "{e}");
    assert!(e.to_string().contains("mon.a"), "{e}");
    assert_eq!(pong.unwrap().msg, Message::Pong(Pong { seq: 7 }));
    assert_eq!(conn.requests_pending(), 0);
    assert!(!conn.is_closed());
    let r = conn.request(ping(2), Bytes::new()).await.unwrap();
    assert_eq!(r.msg, Message::Pong(Pong { seq: 2 }));
    // A peer that sends nothing at all until a request times out is taken
    // for dead (cut off by the network, say): the connection closes and the
    // next connect makes a new one that works.
    let e = conn
        .request_with_timeout(Pong { seq: 3 }, Bytes::new(), Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(matches!(e, NetError::Timeout { ms: 100, .. }), "{e}");
    assert!(conn.is_closed());
    assert!(
        conn.close_reason()
            .unwrap_or_default()
            .contains("sent nothing"),
        "{:?}",
        conn.close_reason()
    );
    let again = cli.connect(addr).await.unwrap();
    assert_ne!(again.id(), conn.id());
    let r = again.request(ping(4), Bytes::new()).await.unwrap();
    assert_eq!(r.msg, Message::Pong(Pong { seq: 4 }));
    cli.shutdown().await;
    srv.shutdown().await;
}

#[tokio::test]
async fn unsupported_requests_get_an_error_reply() {
    let k = keyring();
    let (srv, addr) = server(k.clone(), config(), echo_dispatcher()).await;
    let cli = client(k, config());
    let conn = cli.connect(addr).await.unwrap();
    let hello = Hello::default();
    let e = conn.request(hello, Bytes::new()).await.unwrap_err();
    assert!(matches!(e, NetError::Remote { code: 1, .. }), "{e}");
    cli.shutdown().await;
    srv.shutdown().await;
}

#[tokio::test]
async fn reconnects_with_backoff_after_the_server_appears_and_after_it_restarts() {
    let k = keyring();
    // Reserve a port, then free it so the first attempts are refused.
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    // Enough attempts to outlast any scheduling delay of the starter below:
    // the test is that retries reach a server that appears, not how soon.
    let cli = client(
        k.clone(),
        NetConfig {
            reconnect_attempts: 1000,
            ..config()
        },
    );
    let k2 = k.clone();
    let starter = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let (s, _) = names();
        let m = messenger(&s, k2, config(), Arc::new(TcpTransport), echo_dispatcher());
        m.bind(addr).await.unwrap();
        m
    });
    let conn = cli
        .connect(addr)
        .await
        .expect("retries until the server is up");
    let srv = starter.await.unwrap();
    conn.request(
        Ping {
            seq: 1,
            echo: false,
        },
        Bytes::new(),
    )
    .await
    .unwrap();
    // The server goes away: requests fail, then a new connection is made.
    srv.shutdown().await;
    wait_for(|| conn.is_closed()).await;
    let e = conn
        .request(
            Ping {
                seq: 2,
                echo: false,
            },
            Bytes::new(),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, NetError::Closed { .. }), "{e}");
    let (s, _) = names();
    let srv2 = messenger(&s, k, config(), Arc::new(TcpTransport), echo_dispatcher());
    srv2.bind(addr).await.unwrap();
    let conn2 = cli.connect(addr).await.unwrap();
    conn2
        .request(
            Ping {
                seq: 3,
                echo: false,
            },
            Bytes::new(),
        )
        .await
        .unwrap();
    cli.shutdown().await;
    srv2.shutdown().await;
}

#[tokio::test]
async fn connect_gives_up_after_the_configured_attempts() {
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let cfg = NetConfig {
        reconnect_attempts: 3,
        ..config()
    };
    let cli = client(keyring(), cfg);
    let started = std::time::Instant::now();
    let e = cli.connect(addr).await.unwrap_err();
    assert!(matches!(e, NetError::Connect { .. }), "{e}");
    assert!(e.to_string().contains(&addr.to_string()), "{e}");
    // Two backoff sleeps of at least 20 ms and 40 ms happened.
    assert!(started.elapsed() >= Duration::from_millis(60));
}

#[tokio::test]
async fn backpressure_bounds_queued_bytes_and_resumes() {
    let k = keyring();
    let held: Arc<Mutex<Vec<Responder>>> = Arc::default();
    let keep = held.clone();
    let d: Arc<dyn Dispatcher> = Arc::new(move |inc: Incoming| {
        if let Some(r) = inc.responder {
            keep.lock().unwrap().push(r);
        }
    });
    let srv_cfg = NetConfig {
        dispatch_requests_max: 2,
        ..config()
    };
    let (srv, addr) = server(k.clone(), srv_cfg, d).await;
    let cli_cfg = NetConfig {
        inflight_bytes_max: 1 << 20,
        ..config()
    };
    let cli = client(k, cli_cfg);
    let conn = cli.connect(addr).await.unwrap();
    let chunk = Bytes::from(vec![7u8; 256 * 1024]);
    let mut sends = Vec::new();
    for seq in 0..64 {
        let conn = conn.clone();
        let chunk = chunk.clone();
        sends.push(tokio::spawn(async move {
            conn.request(Pong { seq }, chunk).await
        }));
    }
    // The server reads two requests and stops; kernel buffers fill (the
    // server's receive buffer does not grow while it reads nothing); then
    // the client's 1 MiB budget is spent and the remaining senders wait.
    wait_for(|| held.lock().unwrap().len() == 2).await;
    wait_for(|| conn.queued_bytes() + chunk.len() as u64 > 1 << 20).await;
    assert_eq!(
        held.lock().unwrap().len(),
        2,
        "server dispatched past its budget"
    );
    let unfinished = sends.iter().filter(|s| !s.is_finished()).count();
    assert_eq!(unfinished, 64);
    let queued = conn.queued_bytes();
    assert!(queued > 0 && queued <= 1 << 20, "queued {queued} bytes");
    // Answer everything as it arrives: all 64 complete.
    let keep = held.clone();
    let answer = tokio::spawn(async move {
        let mut answered = 0;
        while answered < 64 {
            let batch: Vec<Responder> = std::mem::take(&mut *keep.lock().unwrap());
            for r in batch {
                r.reply(Pong { seq: 0 }, Bytes::new()).await.unwrap();
                answered += 1;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    for s in sends {
        s.await.unwrap().unwrap();
    }
    answer.await.unwrap();
    cli.shutdown().await;
    srv.shutdown().await;
}

#[tokio::test]
async fn shutdown_fails_waiting_requests_and_stops_listening() {
    let k = keyring();
    let held: Arc<Mutex<Vec<Responder>>> = Arc::default();
    let keep = held.clone();
    let d: Arc<dyn Dispatcher> = Arc::new(move |inc: Incoming| {
        if let Some(r) = inc.responder {
            keep.lock().unwrap().push(r);
        }
    });
    let (srv, addr) = server(k.clone(), config(), d).await;
    let cli = client(k, config());
    let conn = cli.connect(addr).await.unwrap();
    let waiting = tokio::spawn({
        let conn = conn.clone();
        async move { conn.request(Pong { seq: 1 }, Bytes::new()).await }
    });
    wait_for(|| held.lock().unwrap().len() == 1).await;
    srv.shutdown().await;
    let e = waiting.await.unwrap().unwrap_err();
    assert!(matches!(e, NetError::Closed { .. }), "{e}");
    assert_eq!(srv.stats().connections, 0);
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    cli.shutdown().await;
    assert_eq!(cli.stats().connections, 0);
}

#[tokio::test]
async fn in_memory_transport_carries_the_same_protocol() {
    let k = keyring();
    let net = MemNetwork::new();
    let (s, c) = names();
    let srv = messenger(
        &s,
        k.clone(),
        config(),
        Arc::new(net.clone()),
        echo_dispatcher(),
    );
    let addr = srv.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let cli = messenger(&c, k, config(), Arc::new(net), Arc::new(|_: Incoming| {}));
    let conn = cli.connect(addr).await.unwrap();
    let r = conn
        .request(Pong { seq: 41 }, Bytes::from_static(b"x"))
        .await
        .unwrap();
    assert_eq!(r.msg, Message::Pong(Pong { seq: 42 }));
    cli.shutdown().await;
    srv.shutdown().await;
}

// ---- handshake failures ----

async fn connect_error(
    server_keys: Keyring,
    client_keys: Keyring,
    client_name: &str,
) -> (NetError, Messenger) {
    let (srv, addr) = server(server_keys, config(), echo_dispatcher()).await;
    let name: EntityName = client_name.parse().unwrap();
    let cli = messenger(
        &name,
        client_keys,
        config(),
        Arc::new(TcpTransport),
        echo_dispatcher(),
    );
    let e = cli.connect(addr).await.unwrap_err();
    cli.shutdown().await;
    (e, srv)
}

#[tokio::test]
async fn wrong_key_is_refused_on_both_sides() {
    let k = keyring();
    let mut wrong = k.clone();
    wrong.add_generated(names().1);
    let (e, srv) = connect_error(k, wrong, "client.admin").await;
    let NetError::Handshake {
        source: HandshakeError::Rejected { code, reason },
        ..
    } = &e
    else {
        panic!("unexpected {e}")
    };
    assert_eq!(*code, RejectCode::BadProof);
    assert!(reason.contains("client.admin"), "{reason}");
    wait_for(|| srv.stats().handshake_failures == 1).await;
    assert_eq!(srv.stats().connections, 0);
    srv.shutdown().await;
}

#[tokio::test]
async fn unknown_entity_is_refused() {
    let k = keyring();
    let mut client_keys = k.clone();
    client_keys.add_generated("client.stranger".parse().unwrap());
    let (e, srv) = connect_error(k, client_keys, "client.stranger").await;
    assert!(
        matches!(
            &e,
            NetError::Handshake {
                source: HandshakeError::Rejected {
                    code: RejectCode::UnknownEntity,
                    ..
                },
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("unknown entity client.stranger"),
        "{e}"
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn a_client_without_its_own_key_says_so() {
    let k = keyring();
    let (e, srv) = connect_error(k, Keyring::default(), "client.admin").await;
    assert!(
        matches!(
            &e,
            NetError::Handshake {
                source: HandshakeError::NoOwnKey(_),
                ..
            }
        ),
        "{e}"
    );
    srv.shutdown().await;
}

/// Reads what the server sends until it closes.
async fn read_until_closed(s: &mut tokio::net::TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let r = tokio::time::timeout(HANG_GUARD, s.read_to_end(&mut out)).await;
    assert!(r.is_ok(), "server did not close the connection");
    out
}

async fn assert_server_clean(srv: &Messenger, failures: u64) {
    wait_for(|| {
        let s = srv.stats();
        s.handshakes_in_progress == 0 && s.handshake_failures == failures
    })
    .await;
    assert_eq!(srv.stats().connections, 0);
}

#[tokio::test]
async fn version_mismatch_is_refused_with_a_clear_reason() {
    let (srv, addr) = server(keyring(), config(), echo_dispatcher()).await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let hello = Message::Hello(Hello {
        protocol_version: 99,
        features: 1,
        entity: "client.admin".into(),
        nonce: vec![0; 32],
        listen_addr: String::new(),
        auth_method: 1,
        ticket: Vec::new(),
        ms_mode: 0,
        cipher: 0,
    });
    let f = encode_frame(1, FrameFlags::default(), 0, &hello.encode_control(), &[]);
    s.write_all(&f).await.unwrap();
    let reply = read_until_closed(&mut s).await;
    let mut buf = bytes::BytesMut::from(&reply[..]);
    let frame = FrameDecoder::new(FrameLimits::default())
        .decode(&mut buf)
        .unwrap()
        .unwrap();
    let Message::AuthReject(r) = Message::decode(frame.header.msg_type, &frame.control).unwrap()
    else {
        panic!("expected AuthReject")
    };
    assert_eq!(r.code, RejectCode::VersionMismatch as u32);
    assert!(
        r.reason.contains("peer speaks 99, we speak 1"),
        "{}",
        r.reason
    );
    assert_server_clean(&srv, 1).await;
    srv.shutdown().await;
}

#[tokio::test]
async fn truncated_handshake_random_bytes_and_silence_leak_nothing() {
    let k = keyring();
    let (srv, addr) = server(k.clone(), config(), echo_dispatcher()).await;
    // Half a Hello, then close.
    let hello = Message::Hello(Hello {
        protocol_version: 1,
        entity: "client.admin".into(),
        nonce: vec![1; 32],
        auth_method: 1,
        ..Hello::default()
    });
    let f = encode_frame(1, FrameFlags::default(), 0, &hello.encode_control(), &[]);
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(&f[..f.len() / 2]).await.unwrap();
    drop(s);
    assert_server_clean(&srv, 1).await;
    // Random bytes: refused at the first header.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let noise: Vec<u8> = (0..1000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    s.write_all(&noise).await.unwrap();
    read_until_closed(&mut s).await;
    assert_server_clean(&srv, 2).await;
    // A peer that connects and says nothing is dropped after the timeout.
    let started = std::time::Instant::now();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    wait_for(|| srv.stats().handshakes_in_progress == 1).await;
    read_until_closed(&mut s).await;
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert_server_clean(&srv, 3).await;
    // The server still serves real clients.
    let cli = client(k, config());
    let conn = cli.connect(addr).await.unwrap();
    conn.request(
        Ping {
            seq: 1,
            echo: false,
        },
        Bytes::new(),
    )
    .await
    .unwrap();
    cli.shutdown().await;
    srv.shutdown().await;
}

// ---- admission caps ----

#[tokio::test]
async fn a_listener_refuses_sockets_past_its_handshake_cap_until_one_finishes() {
    let k = keyring();
    let cfg = NetConfig {
        handshakes_max: 2,
        handshake_timeout: Duration::from_secs(600),
        ..config()
    };
    let (srv, addr) = server(k.clone(), cfg, echo_dispatcher()).await;
    let silent_a = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _silent_b = tokio::net::TcpStream::connect(addr).await.unwrap();
    wait_for(|| srv.stats().handshakes_in_progress == 2).await;
    // A third socket is closed at once, before any handshake.
    let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
    assert!(read_until_closed(&mut third).await.is_empty());
    assert_eq!(srv.stats().connections_refused, 1);
    // So is a real client, which gives up after its attempts.
    let quick = NetConfig {
        reconnect_attempts: 2,
        ..config()
    };
    let e = client(k.clone(), quick).connect(addr).await.unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert_eq!(srv.stats().connections_refused, 3);
    // One silent socket leaves: its place is free again.
    drop(silent_a);
    wait_for(|| srv.stats().handshakes_in_progress == 1).await;
    let cli = client(k, config());
    let conn = cli.connect(addr).await.unwrap();
    conn.request(Ping::default(), Bytes::new()).await.unwrap();
    assert_eq!(srv.stats().handshakes_in_progress, 1);
    cli.shutdown().await;
    srv.shutdown().await;
}

#[tokio::test]
async fn a_listener_refuses_connections_past_its_cap_until_one_closes() {
    let k = keyring();
    let cfg = NetConfig {
        connections_max: 2,
        ..config()
    };
    let (srv, addr) = server(k.clone(), cfg, echo_dispatcher()).await;
    let first = client(k.clone(), config());
    first.connect(addr).await.unwrap();
    let second = client(k.clone(), config());
    second.connect(addr).await.unwrap();
    let quick = NetConfig {
        reconnect_attempts: 1,
        ..config()
    };
    let third = client(k.clone(), quick);
    let e = third.connect(addr).await.unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert_eq!(srv.stats().connections_refused, 1);
    wait_for(|| srv.stats().connections == 2).await;
    first.shutdown().await;
    wait_for(|| srv.stats().connections == 1).await;
    let conn = third.connect(addr).await.unwrap();
    conn.request(Ping::default(), Bytes::new()).await.unwrap();
    assert_eq!(srv.stats().connections_refused, 1);
    third.shutdown().await;
    second.shutdown().await;
    srv.shutdown().await;
}

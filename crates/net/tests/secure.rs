//! The secure mode over loopback TCP, through a proxy that records every
//! byte and plays the man in the middle: what crosses the wire hides its
//! payload, and a flipped bit, a replayed, dropped or truncated record is
//! refused before anything reaches a handler.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use shoal_net::{
    Cipher, Dispatcher, Incoming, Keyring, KeyringAuth, Messenger, MsMode, NetConfig, PeerInfo,
    TcpTransport,
};
use shoal_proto::{FrameDecoder, FrameLimits, Message, Pong};
use shoal_types::EntityName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const HANG_GUARD: Duration = Duration::from_secs(60);

fn names() -> (EntityName, EntityName) {
    ("mon.a".parse().unwrap(), "client.admin".parse().unwrap())
}

/// One keyring for every end of a test binary.
fn keyring() -> Keyring {
    static RING: std::sync::LazyLock<Keyring> = std::sync::LazyLock::new(|| {
        let (s, c) = names();
        let mut k = Keyring::default();
        k.add_generated(s);
        k.add_generated(c);
        k.add_generated("osd.1".parse().unwrap());
        k
    });
    RING.clone()
}

fn config(mode: MsMode, cipher: Cipher) -> NetConfig {
    NetConfig {
        handshake_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(10),
        reconnect_attempts: 1,
        cipher,
        ..NetConfig::default()
    }
    .with_mode(mode)
}

/// The server's handler: answers `Pong{seq}` with `Pong{seq + 1}` and the
/// same data, and records what reached it and why connections closed.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<u64>>,
    closed: Mutex<Vec<String>>,
}

impl Dispatcher for Recorder {
    fn dispatch(&self, inc: Incoming) {
        if let Message::Pong(p) = inc.msg {
            self.seen.lock().unwrap().push(p.seq);
            if let Some(r) = inc.responder {
                let _ = r.send(Pong { seq: p.seq + 1 }, inc.data);
            }
        }
    }

    fn connection_closed(&self, _peer: &PeerInfo, reason: &str) {
        self.closed.lock().unwrap().push(reason.to_string());
    }
}

fn messenger(name: &EntityName, cfg: NetConfig, d: Arc<dyn Dispatcher>) -> Messenger {
    Messenger::new(
        name.clone(),
        cfg,
        Arc::new(TcpTransport),
        Arc::new(KeyringAuth::new(name.clone(), keyring())),
        d,
    )
}

async fn server(cfg: NetConfig) -> (Messenger, SocketAddr, Arc<Recorder>) {
    let rec = Arc::new(Recorder::default());
    let m = messenger(&names().0, cfg, rec.clone());
    let addr = m.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    (m, addr, rec)
}

fn client(cfg: NetConfig) -> Messenger {
    messenger(&names().1, cfg, Arc::new(|_: Incoming| {}))
}

/// What the proxy does to the client's records after the handshake.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Attack {
    None,
    /// Flips a bit of the second record's ciphertext.
    FlipBit,
    /// Sends the second record twice.
    Replay,
    /// Drops the second record.
    Drop,
    /// Sends half of the second record, then ends the stream.
    Truncate,
}

/// The bytes each direction carried.
#[derive(Default)]
struct Capture {
    bytes: Mutex<Vec<u8>>,
}

/// A proxy for one connection to `to`; returns its address.
async fn proxy(to: SocketAddr, attack: Attack, capture: Arc<Capture>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (c, _) = l.accept().await.unwrap();
        let s = TcpStream::connect(to).await.unwrap();
        let (cr, cw) = c.into_split();
        let (sr, sw) = s.into_split();
        tokio::spawn(pump(cr, sw, attack, capture.clone()));
        tokio::spawn(pump(sr, cw, Attack::None, capture));
    });
    addr
}

/// Forwards one direction: the two handshake frames as they are, then
/// record after record, applying `attack` to the second record.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    attack: Attack,
    capture: Arc<Capture>,
) {
    let mut pending: Vec<u8> = Vec::new();
    let (mut frames, mut records) = (0, 0);
    let mut decoder = FrameDecoder::new(FrameLimits::default());
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        let n = from.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            let _ = to.shutdown().await;
            return;
        }
        capture.bytes.lock().unwrap().extend_from_slice(&chunk[..n]);
        if attack == Attack::None {
            // No need to know where records are (nor are there any in crc mode).
            if to.write_all(&chunk[..n]).await.is_err() {
                return;
            }
            continue;
        }
        pending.extend_from_slice(&chunk[..n]);
        loop {
            let unit = if frames < 2 {
                let mut b = BytesMut::from(&pending[..]);
                match decoder.decode(&mut b) {
                    Ok(Some(_)) => pending.len() - b.len(),
                    _ => break,
                }
            } else {
                if pending.len() < 4 {
                    break;
                }
                let len = u32::from_le_bytes(pending[..4].try_into().unwrap()) as usize;
                if pending.len() < 4 + len + 16 {
                    break;
                }
                4 + len + 16
            };
            let mut unit: Vec<u8> = pending.drain(..unit).collect();
            if frames < 2 {
                frames += 1;
                to.write_all(&unit).await.unwrap();
                continue;
            }
            records += 1;
            if records != 2 {
                let _ = to.write_all(&unit).await;
                continue;
            }
            match attack {
                Attack::None => unreachable!("forwarded as it came"),
                Attack::FlipBit => {
                    unit[10] ^= 0x20;
                    let _ = to.write_all(&unit).await;
                }
                Attack::Replay => {
                    let _ = to.write_all(&unit).await;
                    let _ = to.write_all(&unit).await;
                }
                Attack::Drop => {}
                Attack::Truncate => {
                    let _ = to.write_all(&unit[..unit.len() / 2]).await;
                    let _ = to.shutdown().await;
                    return;
                }
            }
        }
    }
}

async fn wait_for(mut cond: impl FnMut() -> bool) {
    let waiting = async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(HANG_GUARD, waiting)
        .await
        .expect("condition not reached");
}

fn pattern(len: usize) -> Bytes {
    let unit = b"shoal-known-plaintext-0123456789";
    Bytes::from(unit.iter().copied().cycle().take(len).collect::<Vec<u8>>())
}

#[tokio::test]
async fn secure_connections_carry_small_and_large_frames_and_the_wire_shows_no_plaintext() {
    let cases = [
        (MsMode::Secure, Cipher::Aes256Gcm, Cipher::Aes256Gcm),
        (MsMode::Secure, Cipher::ChaCha20Poly1305, Cipher::Aes256Gcm),
        // The same through crc mode: the capture check can fail.
        (MsMode::Crc, Cipher::Aes256Gcm, Cipher::Aes256Gcm),
    ];
    for (mode, client_cipher, server_cipher) in cases {
        let (srv, addr, rec) = server(config(mode, server_cipher)).await;
        let capture = Arc::new(Capture::default());
        let via = proxy(addr, Attack::None, capture.clone()).await;
        let cli = client(config(mode, client_cipher));
        let conn = cli.connect(via).await.unwrap();
        let want_cipher = match mode {
            MsMode::Crc => None,
            MsMode::Secure => Some(Cipher::agree(client_cipher, server_cipher)),
        };
        assert_eq!(conn.peer().cipher, want_cipher);
        // Small frames, pipelined, then large ones (the received-in-pieces path).
        let mut joins = Vec::new();
        for seq in 0..200u64 {
            let conn = conn.clone();
            joins.push(tokio::spawn(async move {
                let data = pattern(64 + seq as usize);
                let r = conn.request(Pong { seq }, data.clone()).await.unwrap();
                assert_eq!(r.msg, Message::Pong(Pong { seq: seq + 1 }));
                assert_eq!(r.data, data);
            }));
        }
        for j in joins {
            j.await.unwrap();
        }
        for seq in 1000..1004u64 {
            let data = pattern((4 << 20) + 17);
            let r = conn.request(Pong { seq }, data.clone()).await.unwrap();
            assert_eq!(r.data, data);
        }
        assert_eq!(rec.seen.lock().unwrap().len(), 204);
        let wire = capture.bytes.lock().unwrap().clone();
        let leaked = wire.windows(21).any(|w| w == b"shoal-known-plaintext");
        assert_eq!(
            leaked,
            mode == MsMode::Crc,
            "{mode} {client_cipher}: plaintext on the wire: {leaked}"
        );
        cli.shutdown().await;
        srv.shutdown().await;
    }
}

#[tokio::test]
async fn a_man_in_the_middle_is_refused_and_nothing_reaches_a_handler() {
    for attack in [
        Attack::FlipBit,
        Attack::Replay,
        Attack::Drop,
        Attack::Truncate,
    ] {
        let (srv, addr, rec) = server(config(MsMode::Secure, Cipher::Aes256Gcm)).await;
        let via = proxy(addr, attack, Arc::new(Capture::default())).await;
        let cli = client(config(MsMode::Secure, Cipher::Aes256Gcm));
        let conn = cli.connect(via).await.unwrap();
        // Record 1: a request answered in full.
        let r = conn.request(Pong { seq: 1 }, pattern(100)).await.unwrap();
        assert_eq!(r.msg, Message::Pong(Pong { seq: 2 }));
        // Record 2 (attacked): a one-way message; record 3 a request.
        conn.send(Pong { seq: 10 }, pattern(100)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let third = conn
            .request_with_timeout(Pong { seq: 20 }, Bytes::new(), Duration::from_secs(2))
            .await;
        wait_for(|| !rec.closed.lock().unwrap().is_empty()).await;
        let seen = rec.seen.lock().unwrap().clone();
        let want: &[u64] = match attack {
            // The genuine copy arrives; its replay is refused.
            Attack::Replay => &[1, 10],
            _ => &[1],
        };
        assert_eq!(seen, want, "{attack:?}: what reached the handler");
        assert!(third.is_err(), "{attack:?}: the third record was served");
        let closed = rec.closed.lock().unwrap().clone();
        assert_eq!(closed.len(), 1, "{attack:?}: {closed:?}");
        let want = match attack {
            Attack::Truncate => "truncated",
            _ => "failed its integrity check",
        };
        assert!(closed[0].contains(want), "{attack:?}: {}", closed[0]);
        assert_eq!(srv.connections().len(), 0);
        cli.shutdown().await;
        srv.shutdown().await;
    }
}

#[tokio::test]
async fn ends_in_different_modes_fail_the_handshake_naming_both() {
    for (client_mode, server_mode) in [(MsMode::Secure, MsMode::Crc), (MsMode::Crc, MsMode::Secure)]
    {
        let (srv, addr, _) = server(config(server_mode, Cipher::Aes256Gcm)).await;
        let cli = client(config(client_mode, Cipher::Aes256Gcm));
        let err = cli.connect(addr).await.unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "connection mode mismatch: client.admin uses ms_mode {client_mode}, \
                 mon.a requires {server_mode}"
            )),
            "{err}"
        );
        wait_for(|| srv.stats().handshake_failures == 1).await;
        assert_eq!(srv.connections().len(), 0);
        srv.shutdown().await;
    }
}

#[tokio::test]
async fn finer_options_split_daemons_from_clients() {
    // A daemon whose cluster links are secure while it serves crc clients.
    let o = {
        let mut o = shoal_config::Options::default();
        o.ms_cluster_mode = Some(MsMode::Secure);
        o
    };
    let daemon_cfg = NetConfig::from_options(&o);
    let (srv, addr, _) = server(daemon_cfg.clone()).await;
    let cli = client(config(MsMode::Crc, Cipher::Aes256Gcm));
    let conn = cli.connect(addr).await.unwrap();
    assert_eq!(conn.peer().cipher, None);
    // Another daemon connects in the cluster mode: secure.
    let osd: EntityName = "osd.1".parse().unwrap();
    let k = keyring();
    let srv2 = Messenger::new(
        names().0,
        daemon_cfg.clone(),
        Arc::new(TcpTransport),
        Arc::new(KeyringAuth::new(names().0, k.clone())),
        Arc::new(|_: Incoming| {}),
    );
    let addr2 = srv2.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let peer = Messenger::new(
        osd.clone(),
        daemon_cfg,
        Arc::new(TcpTransport),
        Arc::new(KeyringAuth::new(osd, k)),
        Arc::new(|_: Incoming| {}),
    );
    let c2 = peer.connect(addr2).await.unwrap();
    assert!(c2.peer().cipher.is_some());
    for m in [cli, srv, srv2, peer] {
        m.shutdown().await;
    }
}

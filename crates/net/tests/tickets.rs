//! Ticket authentication end to end: a client holding a monitor-issued
//! ticket connects to a service (an OSD stand-in) that knows only the
//! service secrets, never the client's key; expired, forged and
//! other-entity tickets are refused with a clear error; the accepted
//! ticket's capabilities reach the service.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use shoal_net::{
    AuthProvider, Dispatcher, HandshakeError, Incoming, Messenger, NetConfig, NetError, Secret,
    ServiceSecrets, TcpTransport, Ticket, now_ms,
};
use shoal_proto::{Pong, RejectCode};
use shoal_types::{EntityName, EntityType};

/// The service side: accepts tickets sealed with its service secrets.
struct OsdAuth {
    me: EntityName,
    own: Secret,
    secrets: ServiceSecrets,
}

impl AuthProvider for OsdAuth {
    fn own_secret(&self) -> Option<Secret> {
        Some(self.own.clone())
    }
    fn secret_for(&self, _peer: &EntityName) -> Option<Secret> {
        None
    }
    fn open_ticket(
        &self,
        peer: &EntityName,
        ticket: &[u8],
    ) -> Option<Result<(Secret, String), String>> {
        Some(
            self.secrets
                .open(ticket, self.me.ty(), now_ms())
                .map_err(|e| e.to_string())
                .and_then(|(t, session)| {
                    if &t.entity == peer {
                        Ok((session, t.caps))
                    } else {
                        Err(format!("ticket belongs to {}, not {peer}", t.entity))
                    }
                }),
        )
    }
}

/// The client side: its own key, plus a ticket and its session key.
struct ClientAuth {
    own: Secret,
    ticket: Option<(Vec<u8>, Secret)>,
}

impl AuthProvider for ClientAuth {
    fn own_secret(&self) -> Option<Secret> {
        Some(self.own.clone())
    }
    fn secret_for(&self, _peer: &EntityName) -> Option<Secret> {
        None
    }
    fn ticket(&self) -> Option<(Vec<u8>, Secret)> {
        self.ticket.clone()
    }
}

/// Answers a `Pong` request with the caller's caps in the data part.
fn caps_echo() -> Arc<dyn Dispatcher> {
    Arc::new(|inc: Incoming| {
        let caps = inc.conn.peer().caps.clone().unwrap_or_default();
        if let Some(r) = inc.responder {
            tokio::spawn(r.reply(Pong { seq: 0 }, Bytes::from(caps)));
        }
    })
}

struct Setup {
    service_secret: Secret,
    osd: Messenger,
    addr: std::net::SocketAddr,
}

async fn osd() -> Setup {
    let service_secret = Secret::generate();
    let mut secrets = ServiceSecrets::default();
    secrets.insert(1, service_secret.clone());
    let me = EntityName::osd(0);
    let auth = Arc::new(OsdAuth {
        me: me.clone(),
        own: Secret::generate(),
        secrets,
    });
    let cfg = NetConfig {
        reconnect_attempts: 1,
        ..NetConfig::default()
    };
    let osd = Messenger::new(me, cfg, Arc::new(TcpTransport), auth, caps_echo());
    let addr = osd.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    Setup {
        service_secret,
        osd,
        addr,
    }
}

/// What a monitor hands the client: the sealed ticket and the session key
/// wrapped with the client's key (which the client unwraps).
fn issue(
    s: &Setup,
    who: &EntityName,
    client_key: &Secret,
    caps: &str,
    ttl_ms: u64,
    now: u64,
) -> (Vec<u8>, Secret) {
    let t = Ticket::new(who.clone(), EntityType::Osd, caps.into(), now, ttl_ms, 1);
    let sealed = t.seal(&s.service_secret);
    let wrapped = t.wrap_session_key(&t.session_key(&s.service_secret), client_key);
    let parsed = Ticket::parse(&sealed).unwrap();
    (
        sealed,
        Ticket::unwrap_session_key(&parsed.nonce, &wrapped, client_key),
    )
}

fn client(name: &EntityName, own: Secret, ticket: Option<(Vec<u8>, Secret)>) -> Messenger {
    let cfg = NetConfig {
        reconnect_attempts: 1,
        request_timeout: Duration::from_secs(5),
        ..NetConfig::default()
    };
    Messenger::new(
        name.clone(),
        cfg,
        Arc::new(TcpTransport),
        Arc::new(ClientAuth { own, ticket }),
        Arc::new(|_: Incoming| {}),
    )
}

fn refusal(e: &NetError) -> (RejectCode, String) {
    match e {
        NetError::Handshake {
            source: HandshakeError::Rejected { code, reason },
            ..
        } => (*code, reason.clone()),
        other => panic!("expected a refused handshake, got {other}"),
    }
}

#[tokio::test]
async fn a_valid_ticket_is_accepted_and_carries_caps() {
    let s = osd().await;
    let who: EntityName = "client.app".parse().unwrap();
    let key = Secret::generate();
    let ticket = issue(&s, &who, &key, "allow rw pool=images", 60_000, now_ms());
    let c = client(&who, key, Some(ticket));
    let conn = c.connect(s.addr).await.unwrap();
    let r = conn.request(Pong { seq: 1 }, Bytes::new()).await.unwrap();
    assert_eq!(&r.data[..], b"allow rw pool=images");
    c.shutdown().await;
    s.osd.shutdown().await;
}

#[tokio::test]
async fn expired_forged_stolen_and_missing_tickets_are_refused() {
    let s = osd().await;
    let who: EntityName = "client.app".parse().unwrap();
    let key = Secret::generate();

    // Expired a second ago.
    let old = issue(&s, &who, &key, "allow r", 1_000, now_ms() - 2_000);
    let e = client(&who, key.clone(), Some(old))
        .connect(s.addr)
        .await
        .unwrap_err();
    let (code, reason) = refusal(&e);
    assert_eq!(code, RejectCode::BadTicket);
    assert!(reason.contains("expired"), "{reason}");

    // Forged: sealed with a secret the OSD never had.
    let fake = Setup {
        service_secret: Secret::generate(),
        osd: s.osd.clone(),
        addr: s.addr,
    };
    let forged = issue(&fake, &who, &key, "allow *", 60_000, now_ms());
    let e = client(&who, key.clone(), Some(forged))
        .connect(s.addr)
        .await
        .unwrap_err();
    let (code, reason) = refusal(&e);
    assert_eq!(code, RejectCode::BadTicket);
    assert!(reason.contains("forged"), "{reason}");

    // Someone else's ticket: names another entity.
    let theirs = issue(
        &s,
        &"client.other".parse().unwrap(),
        &key,
        "allow rw",
        60_000,
        now_ms(),
    );
    let e = client(&who, key.clone(), Some(theirs))
        .connect(s.addr)
        .await
        .unwrap_err();
    assert!(refusal(&e).1.contains("belongs to client.other"), "{e}");

    // A stolen ticket without its session key: the proof fails.
    let (sealed, _) = issue(&s, &who, &key, "allow rw", 60_000, now_ms());
    let thief = client(&who, Secret::generate(), Some((sealed, Secret::generate())));
    let e = thief.connect(s.addr).await.unwrap_err();
    assert_eq!(refusal(&e).0, RejectCode::BadProof);

    // No ticket at all: the OSD knows no client keys.
    let e = client(&who, key, None).connect(s.addr).await.unwrap_err();
    assert_eq!(refusal(&e).0, RejectCode::UnknownEntity);
    assert_eq!(s.osd.stats().connections, 0);
    s.osd.shutdown().await;
}

//! The connection handshake: version and feature negotiation, then mutual
//! authentication by HMAC-SHA256 challenge/response over the connecting
//! entity's secret.
//!
//! ```text
//! connector                                   acceptor
//!   Hello{version, features, name, nonce_c} ->
//!                                           <- AuthChallenge{version, features, name, nonce_s}
//!   AuthProof{HMAC(K, "client" | T)}        ->
//!                                           <- AuthDone{HMAC(K, "server" | T), features}
//! ```
//!
//! `K` is the connector's key (the acceptor must hold it), `T` the transcript
//! of both names, nonces, feature sets and the version, so a proof cannot be
//! replayed on another connection or reflected back. Either side may answer
//! with `AuthReject` and close instead; nothing reaches a message handler
//! until the handshake is complete. The steps are pure functions; [`connect`]
//! and [`accept`] drive them over a stream.
//!
//! The connector's `Hello` names its connection mode (`ms_mode`) and, in
//! secure mode, the record cipher it prefers; the acceptor refuses a mode
//! other than the one it requires of that peer (`ModeMismatch`, naming
//! both), and its challenge names the mode and the cipher both will use,
//! which the connector checks in turn. In secure mode the transcript also
//! covers the mode and the cipher, so a party on the path cannot talk
//! either end down to crc, and both ends derive the connection's record
//! keys from the proved key and the transcript.

use std::net::SocketAddr;

use bytes::BytesMut;
use shoal_config::MsMode;
use shoal_proto::{
    AuthChallenge, AuthDone, AuthProof, AuthReject, FrameDecoder, FrameFlags, FrameLimits, Hello,
    Message, PROTOCOL_VERSION, RejectCode, encode_frame,
};
use shoal_types::EntityName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::FEATURES_SUPPORTED;
use crate::auth::{AuthProvider, Secret, random_bytes};
use crate::config::NetConfig;
use crate::error::HandshakeError;
use crate::secure::{Cipher, SessionKeys};
use crate::transport::Stream;

/// The shared-key HMAC method.
pub(crate) const AUTH_SHARED_KEY: u32 = 1;
/// The connector proves the session key of the ticket it presented.
pub(crate) const AUTH_TICKET: u32 = 2;
const HANDSHAKE_LIMITS: FrameLimits = FrameLimits {
    control_bytes_max: 4096,
    data_bytes_max: 0,
};

/// What a finished handshake tells about the peer.
#[derive(Debug)]
pub(crate) struct Established {
    pub peer: EntityName,
    /// Where the peer listens, if it said.
    pub peer_listen: Option<SocketAddr>,
    /// Features both sides support.
    pub features: u64,
    /// The peer's capabilities for our service, from the ticket it presented.
    pub caps: Option<String>,
    /// The connection's record keys, in secure mode.
    pub keys: Option<SessionKeys>,
}

type Reject = (RejectCode, String);

/// A mode's number in the handshake.
fn mode_wire(m: MsMode) -> u32 {
    match m {
        MsMode::Crc => 0,
        MsMode::Secure => 1,
    }
}

/// A mode number from the wire, named for messages.
fn mode_name(v: u32) -> String {
    match v {
        0 => "crc".into(),
        1 => "secure".into(),
        other => format!("unknown mode {other}"),
    }
}

/// The transcript's secure-mode suffix: the mode and cipher both ends
/// agreed on (nothing in crc mode, so crc handshakes are as before).
fn bind_mode(transcript: &mut Vec<u8>, cipher: Option<Cipher>) {
    if let Some(c) = cipher {
        transcript.extend_from_slice(b"ms_mode=secure cipher=");
        transcript.extend_from_slice(&c.wire().to_le_bytes());
    }
}

fn transcript(
    client: &str,
    server: &str,
    nonce_c: &[u8],
    nonce_s: &[u8],
    feat_c: u64,
    feat_s: u64,
) -> Vec<u8> {
    let mut t = Vec::with_capacity(128);
    t.extend_from_slice(b"shoal-handshake-v1");
    t.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    for part in [client.as_bytes(), server.as_bytes(), nonce_c, nonce_s] {
        t.extend_from_slice(&(part.len() as u32).to_le_bytes());
        t.extend_from_slice(part);
    }
    t.extend_from_slice(&feat_c.to_le_bytes());
    t.extend_from_slice(&feat_s.to_le_bytes());
    t
}

/// The connector between its `Hello` and the acceptor's `AuthDone`.
pub(crate) struct Connector {
    me: EntityName,
    secret: Secret,
    session: Option<Secret>,
    hello: Hello,
    mode: MsMode,
    cipher: Option<Cipher>,
    transcript: Vec<u8>,
    acceptor: Option<(EntityName, u64)>,
}

impl Connector {
    /// Starts a handshake as `me` in `mode` (preferring `cipher` if
    /// secure), returning the `Hello` to send.
    pub fn start(
        me: &EntityName,
        listen: Option<SocketAddr>,
        auth: &dyn AuthProvider,
        mode: MsMode,
        cipher: Cipher,
    ) -> Result<(Connector, Hello), HandshakeError> {
        let secret = auth
            .own_secret()
            .ok_or_else(|| HandshakeError::NoOwnKey(me.to_string()))?;
        let (ticket, session) = match auth.ticket() {
            Some((t, s)) => (t, Some(s)),
            None => (Vec::new(), None),
        };
        let hello = Hello {
            protocol_version: u32::from(PROTOCOL_VERSION),
            features: FEATURES_SUPPORTED,
            entity: me.to_string(),
            nonce: random_bytes().to_vec(),
            listen_addr: listen.map(|a| a.to_string()).unwrap_or_default(),
            auth_method: AUTH_SHARED_KEY,
            ticket,
            ms_mode: mode_wire(mode),
            cipher: match mode {
                MsMode::Secure => cipher.wire(),
                MsMode::Crc => 0,
            },
        };
        let c = Connector {
            me: me.clone(),
            secret,
            session,
            hello: hello.clone(),
            mode,
            cipher: None,
            transcript: Vec::new(),
            acceptor: None,
        };
        Ok((c, hello))
    }

    /// Answers the acceptor's challenge with our proof.
    pub fn on_challenge(&mut self, ch: &AuthChallenge) -> Result<AuthProof, Reject> {
        if ch.protocol_version != u32::from(PROTOCOL_VERSION) {
            return Err((
                RejectCode::VersionMismatch,
                format!(
                    "protocol version mismatch: peer speaks {}, we speak {PROTOCOL_VERSION}",
                    ch.protocol_version
                ),
            ));
        }
        let peer: EntityName = ch
            .entity
            .parse()
            .map_err(|e| (RejectCode::Protocol, format!("bad acceptor name: {e}")))?;
        if ch.nonce.len() != 32 {
            return Err((
                RejectCode::Protocol,
                "acceptor nonce must be 32 bytes".into(),
            ));
        }
        if ch.ms_mode != mode_wire(self.mode) {
            return Err((
                RejectCode::ModeMismatch,
                format!(
                    "connection mode mismatch: {peer} uses ms_mode {}, {} uses {}",
                    mode_name(ch.ms_mode),
                    self.me,
                    self.mode
                ),
            ));
        }
        if self.mode == MsMode::Secure {
            let c = Cipher::from_wire(ch.cipher).ok_or_else(|| {
                (
                    RejectCode::Protocol,
                    format!("acceptor chose unknown cipher {}", ch.cipher),
                )
            })?;
            self.cipher = Some(c);
        }
        self.transcript = transcript(
            &self.me.to_string(),
            &ch.entity,
            &self.hello.nonce,
            &ch.nonce,
            self.hello.features,
            ch.features,
        );
        bind_mode(&mut self.transcript, self.cipher);
        self.acceptor = Some((peer, ch.features & FEATURES_SUPPORTED));
        if ch.auth_method == AUTH_TICKET {
            // The acceptor took our ticket: from now on we prove its session key.
            self.secret = self.session.clone().ok_or_else(|| {
                (
                    RejectCode::Protocol,
                    "acceptor chose a ticket we did not present".to_string(),
                )
            })?;
        } else if ch.auth_method != AUTH_SHARED_KEY {
            return Err((
                RejectCode::UnsupportedAuth,
                format!(
                    "acceptor chose unknown authentication method {}",
                    ch.auth_method
                ),
            ));
        }
        Ok(AuthProof {
            proof: self.secret.mac(&[b"client", &self.transcript]),
        })
    }

    /// Checks the acceptor's proof: it holds our key too.
    pub fn on_done(self, done: &AuthDone) -> Result<Established, Reject> {
        let Some((peer, features)) = self.acceptor else {
            return Err((RejectCode::Protocol, "AuthDone before AuthChallenge".into()));
        };
        if !self
            .secret
            .verify(&[b"server", &self.transcript], &done.proof)
        {
            return Err((
                RejectCode::BadProof,
                format!("{peer} could not prove it holds our key"),
            ));
        }
        let keys = self
            .cipher
            .map(|c| SessionKeys::derive(self.secret.as_bytes(), &self.transcript, c, true));
        Ok(Established {
            peer,
            peer_listen: None,
            features,
            caps: None,
            keys,
        })
    }
}

/// The acceptor between the connector's `Hello` and its `AuthProof`.
pub(crate) struct Acceptor {
    secret: Secret,
    caps: Option<String>,
    peer: EntityName,
    peer_listen: Option<SocketAddr>,
    features: u64,
    cipher: Option<Cipher>,
    transcript: Vec<u8>,
}

impl Acceptor {
    /// Checks a `Hello` and returns the challenge to send. `mode` gives
    /// the mode required of a peer (`NetConfig::accept_mode`); `cipher` is
    /// the one this end prefers.
    pub fn on_hello(
        me: &EntityName,
        hello: &Hello,
        auth: &dyn AuthProvider,
        mode: impl Fn(&EntityName) -> MsMode,
        cipher: Cipher,
    ) -> Result<(Acceptor, AuthChallenge), Reject> {
        if hello.protocol_version != u32::from(PROTOCOL_VERSION) {
            return Err((
                RejectCode::VersionMismatch,
                format!(
                    "protocol version mismatch: peer speaks {}, we speak {PROTOCOL_VERSION}",
                    hello.protocol_version
                ),
            ));
        }
        if hello.auth_method != AUTH_SHARED_KEY {
            return Err((
                RejectCode::UnsupportedAuth,
                format!("authentication method {} is not offered", hello.auth_method),
            ));
        }
        let peer: EntityName = hello
            .entity
            .parse()
            .map_err(|e| (RejectCode::Protocol, format!("bad entity name: {e}")))?;
        if hello.nonce.len() != 32 {
            return Err((RejectCode::Protocol, "nonce must be 32 bytes".into()));
        }
        let mode = mode(&peer);
        if hello.ms_mode != mode_wire(mode) {
            return Err((
                RejectCode::ModeMismatch,
                format!(
                    "connection mode mismatch: {peer} uses ms_mode {}, {me} requires {mode}",
                    mode_name(hello.ms_mode)
                ),
            ));
        }
        let cipher = match mode {
            MsMode::Crc => None,
            // A connector whose preference we do not know gets the cipher
            // every build has.
            MsMode::Secure => Some(Cipher::agree(
                Cipher::from_wire(hello.cipher).unwrap_or(Cipher::ChaCha20Poly1305),
                cipher,
            )),
        };
        // A service that accepts tickets takes the ticket's session key;
        // otherwise the connector proves its own key.
        let ticketed = match hello.ticket.is_empty() {
            true => None,
            false => auth.open_ticket(&peer, &hello.ticket),
        };
        let (secret, caps, method) = match ticketed {
            Some(Ok((session, caps))) => (session, Some(caps), AUTH_TICKET),
            Some(Err(reason)) => return Err((RejectCode::BadTicket, reason)),
            None => {
                let secret = auth
                    .secret_for(&peer)
                    .ok_or_else(|| (RejectCode::UnknownEntity, format!("unknown entity {peer}")))?;
                (secret, None, AUTH_SHARED_KEY)
            }
        };
        let peer_listen = match hello.listen_addr.as_str() {
            "" => None,
            a => Some(
                a.parse()
                    .map_err(|_| (RejectCode::Protocol, format!("bad listen address {a:?}")))?,
            ),
        };
        let nonce_s = random_bytes();
        let challenge = AuthChallenge {
            protocol_version: u32::from(PROTOCOL_VERSION),
            features: FEATURES_SUPPORTED,
            entity: me.to_string(),
            nonce: nonce_s.to_vec(),
            auth_method: method,
            ms_mode: mode_wire(mode),
            cipher: cipher.map_or(0, Cipher::wire),
        };
        let mut transcript = transcript(
            &hello.entity,
            &challenge.entity,
            &hello.nonce,
            &nonce_s,
            hello.features,
            FEATURES_SUPPORTED,
        );
        bind_mode(&mut transcript, cipher);
        let a = Acceptor {
            secret,
            caps,
            features: hello.features & FEATURES_SUPPORTED,
            peer,
            peer_listen,
            cipher,
            transcript,
        };
        Ok((a, challenge))
    }

    /// Checks the connector's proof and returns our own.
    pub fn on_proof(self, proof: &AuthProof) -> Result<(Established, AuthDone), Reject> {
        if !self
            .secret
            .verify(&[b"client", &self.transcript], &proof.proof)
        {
            return Err((
                RejectCode::BadProof,
                format!("{} failed to prove its key (wrong key?)", self.peer),
            ));
        }
        let done = AuthDone {
            proof: self.secret.mac(&[b"server", &self.transcript]),
            features: self.features,
        };
        let keys = self
            .cipher
            .map(|c| SessionKeys::derive(self.secret.as_bytes(), &self.transcript, c, false));
        let est = Established {
            peer: self.peer,
            peer_listen: self.peer_listen,
            features: self.features,
            caps: self.caps,
            keys,
        };
        Ok((est, done))
    }
}

/// A stream during its handshake: frames in and out, with a small limit.
struct Wire<'a> {
    stream: &'a mut Stream,
    buf: &'a mut BytesMut,
    decoder: FrameDecoder,
}

impl Wire<'_> {
    async fn send(&mut self, m: Message) -> Result<(), HandshakeError> {
        let frame = encode_frame(
            m.msg_type() as u16,
            FrameFlags::default(),
            0,
            &m.encode_control(),
            &[],
        );
        self.stream
            .write
            .write_all(&frame)
            .await
            .map_err(|_| HandshakeError::Truncated)
    }

    async fn recv(&mut self) -> Result<Message, HandshakeError> {
        loop {
            match self.decoder.decode(self.buf) {
                Ok(Some(f)) => {
                    return Message::decode(f.header.msg_type, &f.control)
                        .map_err(|e| HandshakeError::BadFrame(e.to_string()));
                }
                Ok(None) => {}
                Err(e) => return Err(HandshakeError::BadFrame(e.to_string())),
            }
            self.buf.reserve(512);
            match self.stream.read.read_buf(self.buf).await {
                Ok(0) | Err(_) => return Err(HandshakeError::Truncated),
                Ok(_) => {}
            }
        }
    }

    /// Tells the peer why we refuse it, then reports the refusal.
    async fn refuse(&mut self, (code, reason): Reject) -> HandshakeError {
        let _ = self
            .send(Message::AuthReject(AuthReject {
                code: code as u32,
                reason: reason.clone(),
            }))
            .await;
        let _ = self.stream.write.shutdown().await;
        HandshakeError::Refused { code, reason }
    }
}

fn rejected(r: &AuthReject) -> HandshakeError {
    HandshakeError::Rejected {
        code: RejectCode::from_u32(r.code),
        reason: r.reason.clone(),
    }
}

fn unexpected(m: &Message, wanted: &str) -> Reject {
    (
        RejectCode::Protocol,
        format!("expected {wanted}, got {}", m.msg_type().name()),
    )
}

/// Runs the connector's side. Bytes read past the handshake stay in `buf`.
pub(crate) async fn connect(
    stream: &mut Stream,
    buf: &mut BytesMut,
    me: &EntityName,
    listen: Option<SocketAddr>,
    auth: &dyn AuthProvider,
    config: &NetConfig,
) -> Result<Established, HandshakeError> {
    let mut wire = Wire {
        stream,
        buf,
        decoder: FrameDecoder::new(HANDSHAKE_LIMITS),
    };
    let (mut state, hello) =
        Connector::start(me, listen, auth, config.connect_mode(me), config.cipher)?;
    wire.send(hello.into()).await?;
    let proof = match wire.recv().await? {
        Message::AuthChallenge(ch) => state.on_challenge(&ch),
        Message::AuthReject(r) => return Err(rejected(&r)),
        other => Err(unexpected(&other, "AuthChallenge")),
    };
    match proof {
        Ok(p) => wire.send(p.into()).await?,
        Err(r) => return Err(wire.refuse(r).await),
    }
    let est = match wire.recv().await? {
        Message::AuthDone(done) => state.on_done(&done),
        Message::AuthReject(r) => return Err(rejected(&r)),
        other => Err(unexpected(&other, "AuthDone")),
    };
    match est {
        Ok(e) => Ok(e),
        Err(r) => Err(wire.refuse(r).await),
    }
}

/// Runs the acceptor's side. Bytes read past the handshake stay in `buf`.
pub(crate) async fn accept(
    stream: &mut Stream,
    buf: &mut BytesMut,
    me: &EntityName,
    auth: &dyn AuthProvider,
    config: &NetConfig,
) -> Result<Established, HandshakeError> {
    let mut wire = Wire {
        stream,
        buf,
        decoder: FrameDecoder::new(HANDSHAKE_LIMITS),
    };
    let step = match wire.recv().await? {
        Message::Hello(h) => {
            Acceptor::on_hello(me, &h, auth, |p| config.accept_mode(p), config.cipher)
        }
        other => Err(unexpected(&other, "Hello")),
    };
    let state = match step {
        Ok((state, challenge)) => {
            wire.send(challenge.into()).await?;
            state
        }
        Err(r) => return Err(wire.refuse(r).await),
    };
    let step = match wire.recv().await? {
        Message::AuthProof(p) => state.on_proof(&p),
        Message::AuthReject(r) => return Err(rejected(&r)),
        other => Err(unexpected(&other, "AuthProof")),
    };
    match step {
        Ok((est, done)) => {
            wire.send(done.into()).await?;
            Ok(est)
        }
        Err(r) => Err(wire.refuse(r).await),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::KeyringAuth;
    use crate::keyring::Keyring;

    fn on_hello(
        s: &EntityName,
        h: &Hello,
        sa: &KeyringAuth,
    ) -> Result<(Acceptor, AuthChallenge), Reject> {
        Acceptor::on_hello(s, h, sa, |_| MsMode::Crc, Cipher::Aes256Gcm)
    }

    fn setup() -> (EntityName, EntityName, Keyring) {
        let client: EntityName = "client.admin".parse().unwrap();
        let server: EntityName = "mon.a".parse().unwrap();
        let mut k = Keyring::default();
        k.add_generated(client.clone());
        k.add_generated(server.clone());
        (client, server, k)
    }

    #[test]
    fn both_sides_agree() {
        let (c, s, k) = setup();
        let ca = KeyringAuth::new(c.clone(), k.clone());
        let sa = KeyringAuth::new(s.clone(), k);
        let (mut conn, hello) =
            Connector::start(&c, None, &ca, MsMode::Crc, Cipher::Aes256Gcm).unwrap();
        let (acc, ch) = on_hello(&s, &hello, &sa).unwrap();
        let proof = conn.on_challenge(&ch).unwrap();
        let (est_s, done) = acc.on_proof(&proof).unwrap();
        let est_c = conn.on_done(&done).unwrap();
        assert_eq!(est_s.peer, c);
        assert_eq!(est_c.peer, s);
        assert_eq!(est_s.features, FEATURES_SUPPORTED);
        assert_eq!(est_c.features, FEATURES_SUPPORTED);
    }

    #[test]
    fn wrong_key_fails_and_server_cannot_fake_its_proof() {
        let (c, s, k) = setup();
        let mut wrong = k.clone();
        wrong.add_generated(c.clone());
        let (mut conn, hello) = Connector::start(
            &c,
            None,
            &KeyringAuth::new(c.clone(), wrong),
            MsMode::Crc,
            Cipher::Aes256Gcm,
        )
        .unwrap();
        let sa = KeyringAuth::new(s.clone(), k);
        let (acc, ch) = on_hello(&s, &hello, &sa).unwrap();
        let proof = conn.on_challenge(&ch).unwrap();
        let Err((code, _)) = acc.on_proof(&proof) else {
            panic!("wrong key accepted")
        };
        assert_eq!(code, RejectCode::BadProof);
        let forged = AuthDone {
            proof: vec![0; 32],
            features: 1,
        };
        assert_eq!(conn.on_done(&forged).unwrap_err().0, RejectCode::BadProof);
    }

    #[test]
    fn proofs_do_not_replay_across_connections() {
        let (c, s, k) = setup();
        let ca = KeyringAuth::new(c.clone(), k.clone());
        let sa = KeyringAuth::new(s.clone(), k);
        let (mut conn1, hello1) =
            Connector::start(&c, None, &ca, MsMode::Crc, Cipher::Aes256Gcm).unwrap();
        let (_acc1, ch1) = on_hello(&s, &hello1, &sa).unwrap();
        let old_proof = conn1.on_challenge(&ch1).unwrap();
        // A second connection with the same Hello gets a fresh server nonce.
        let (acc2, _ch2) = on_hello(&s, &hello1, &sa).unwrap();
        assert_eq!(
            acc2.on_proof(&old_proof).unwrap_err().0,
            RejectCode::BadProof
        );
    }

    #[test]
    fn hello_checks() {
        let (c, s, k) = setup();
        let sa = KeyringAuth::new(s.clone(), k.clone());
        let (_, hello) = Connector::start(
            &c,
            None,
            &KeyringAuth::new(c.clone(), k),
            MsMode::Crc,
            Cipher::Aes256Gcm,
        )
        .unwrap();
        let code = |h: Hello| on_hello(&s, &h, &sa).err().map(|e| e.0);
        let mut h = hello.clone();
        h.protocol_version = 2;
        assert_eq!(code(h), Some(RejectCode::VersionMismatch));
        let mut h = hello.clone();
        h.entity = "client.stranger".into();
        assert_eq!(code(h), Some(RejectCode::UnknownEntity));
        let mut h = hello.clone();
        h.entity = "garbage".into();
        assert_eq!(code(h), Some(RejectCode::Protocol));
        let mut h = hello.clone();
        h.auth_method = 9;
        assert_eq!(code(h), Some(RejectCode::UnsupportedAuth));
        let mut h = hello.clone();
        h.nonce.truncate(3);
        assert_eq!(code(h), Some(RejectCode::Protocol));
        let mut h = hello;
        h.listen_addr = "nowhere".into();
        assert_eq!(code(h), Some(RejectCode::Protocol));
    }

    #[test]
    fn no_own_key() {
        let (c, _, _) = setup();
        let auth = KeyringAuth::new(c.clone(), Keyring::default());
        assert!(matches!(
            Connector::start(&c, None, &auth, MsMode::Crc, Cipher::Aes256Gcm),
            Err(HandshakeError::NoOwnKey(_))
        ));
    }

    /// One handshake with the connector in `cm` preferring `cc` and the
    /// acceptor requiring `am` and preferring `ac`.
    fn handshake(
        cm: MsMode,
        cc: Cipher,
        am: MsMode,
        ac: Cipher,
    ) -> Result<(Established, Established), Reject> {
        let (c, s, k) = setup();
        let ca = KeyringAuth::new(c.clone(), k.clone());
        let sa = KeyringAuth::new(s.clone(), k);
        let (mut conn, hello) = Connector::start(&c, None, &ca, cm, cc).unwrap();
        let (acc, ch) = Acceptor::on_hello(&s, &hello, &sa, |_| am, ac)?;
        let proof = conn.on_challenge(&ch)?;
        let (est_s, done) = acc.on_proof(&proof)?;
        Ok((conn.on_done(&done)?, est_s))
    }

    #[test]
    fn secure_mode_agrees_on_a_cipher_and_keys_only_when_both_ends_ask_for_it() {
        use Cipher::*;
        let (c, s) = handshake(MsMode::Crc, Aes256Gcm, MsMode::Crc, Aes256Gcm).unwrap();
        assert!(c.keys.is_none() && s.keys.is_none());
        for (cc, ac, want) in [
            (Aes256Gcm, Aes256Gcm, Aes256Gcm),
            (ChaCha20Poly1305, Aes256Gcm, ChaCha20Poly1305),
            (Aes256Gcm, ChaCha20Poly1305, ChaCha20Poly1305),
        ] {
            let (c, s) = handshake(MsMode::Secure, cc, MsMode::Secure, ac).unwrap();
            assert_eq!(c.keys.map(|k| k.cipher), Some(want));
            assert_eq!(s.keys.map(|k| k.cipher), Some(want));
        }
    }

    #[test]
    fn ends_in_different_modes_fail_naming_both() {
        for (cm, am) in [(MsMode::Secure, MsMode::Crc), (MsMode::Crc, MsMode::Secure)] {
            let (code, reason) =
                handshake(cm, Cipher::Aes256Gcm, am, Cipher::Aes256Gcm).unwrap_err();
            assert_eq!(code, RejectCode::ModeMismatch);
            assert_eq!(
                reason,
                format!(
                    "connection mode mismatch: client.admin uses ms_mode {cm}, \
                     mon.a requires {am}"
                )
            );
        }
    }

    #[test]
    fn a_party_on_the_path_cannot_talk_either_end_down_to_crc() {
        let (c, s, k) = setup();
        let ca = KeyringAuth::new(c.clone(), k.clone());
        let sa = KeyringAuth::new(s.clone(), k);
        let secure = |_: &EntityName| MsMode::Secure;
        // The acceptor's challenge rewritten to crc: the connector refuses.
        let (mut conn, hello) =
            Connector::start(&c, None, &ca, MsMode::Secure, Cipher::Aes256Gcm).unwrap();
        let (_, mut ch) = Acceptor::on_hello(&s, &hello, &sa, secure, Cipher::Aes256Gcm).unwrap();
        ch.ms_mode = 0;
        ch.cipher = 0;
        let (code, reason) = conn.on_challenge(&ch).unwrap_err();
        assert_eq!(code, RejectCode::ModeMismatch, "{reason}");
        // The cipher in the challenge changed: the proofs no longer match.
        let (mut conn, hello) =
            Connector::start(&c, None, &ca, MsMode::Secure, Cipher::Aes256Gcm).unwrap();
        let (acc, mut ch) = Acceptor::on_hello(&s, &hello, &sa, secure, Cipher::Aes256Gcm).unwrap();
        ch.cipher = Cipher::ChaCha20Poly1305.wire();
        let proof = conn.on_challenge(&ch).unwrap();
        assert_eq!(acc.on_proof(&proof).unwrap_err().0, RejectCode::BadProof);
        // An old acceptor (no mode in its challenge) and a secure connector.
        let (mut conn, hello) =
            Connector::start(&c, None, &ca, MsMode::Secure, Cipher::Aes256Gcm).unwrap();
        let (_, mut ch) = on_hello(
            &s,
            &Hello {
                ms_mode: 0,
                cipher: 0,
                ..hello
            },
            &sa,
        )
        .unwrap();
        ch.ms_mode = 0;
        let (code, reason) = conn.on_challenge(&ch).unwrap_err();
        assert_eq!(code, RejectCode::ModeMismatch);
        assert!(reason.contains("mon.a uses ms_mode crc"), "{reason}");
    }
}

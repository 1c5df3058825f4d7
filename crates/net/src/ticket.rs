//! Tickets: how an entity proves to an OSD (or any other service) that the
//! monitors authenticated it, without the OSD asking a monitor.
//!
//! A monitor issues a [`Ticket`] (entity, service capabilities, validity
//! window) sealed with the current *service secret*, a key the monitors
//! rotate and share with the service's daemons. The ticket carries no
//! secret itself. Its *session key* is `HMAC(service secret, "session" |
//! ticket body)`: the service derives it from the ticket it receives, and
//! the monitor hands it to the client wrapped with the client's own key
//! (`session key XOR HMAC(client key, "wrap" | ticket nonce)`, a one-time
//! pad since every ticket has a fresh nonce). In the handshake the client
//! then proves the session key exactly as it would prove its own key.
//!
//! Encoding (little-endian): `version u8 | service u8 | issued_ms u64 |
//! expires_ms u64 | secret_id u64 | nonce [16] | entity len u16 + bytes |
//! caps len u16 + bytes | tag [32]`, the tag being HMAC-SHA256 of everything
//! before it under the service secret.

use std::collections::BTreeMap;

use shoal_types::{EntityName, EntityType};

use crate::auth::{Secret, random_bytes};

const VERSION: u8 = 1;
const TAG_LEN: usize = 32;
/// Longest encoded ticket accepted.
pub const TICKET_BYTES_MAX: usize = 2048;

/// What a ticket asserts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// Who it was issued to.
    pub entity: EntityName,
    /// The service it is for (OSD).
    pub service: EntityType,
    /// The entity's capabilities for that service (`allow rw pool=images`).
    pub caps: String,
    /// Issue time, milliseconds since the Unix epoch.
    pub issued_ms: u64,
    /// Expiry time, milliseconds since the Unix epoch.
    pub expires_ms: u64,
    /// Which service secret sealed it.
    pub secret_id: u64,
    /// Random, unique per ticket.
    pub nonce: [u8; 16],
}

/// Why a ticket is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TicketError {
    /// Not a ticket at all.
    #[error("malformed ticket: {0}")]
    Malformed(&'static str),
    /// Sealed with a secret this service does not know (too old, or forged).
    #[error("ticket sealed with unknown service secret {0}")]
    UnknownSecret(u64),
    /// The seal does not verify: the ticket was altered or forged.
    #[error("forged ticket: its seal does not verify")]
    Forged,
    /// The validity window has passed.
    #[error("ticket expired {0} ms ago")]
    Expired(u64),
    /// Issued for another service.
    #[error("ticket is for {0}, not this service")]
    WrongService(EntityType),
}

fn service_code(t: EntityType) -> u8 {
    match t {
        EntityType::Mon => 1,
        EntityType::Osd => 2,
        EntityType::Client => 3,
        EntityType::Mgr => 4,
        EntityType::Mds => 5,
    }
}

fn service_from(code: u8) -> Option<EntityType> {
    EntityType::ALL
        .into_iter()
        .find(|t| service_code(*t) == code)
}

impl Ticket {
    /// A new ticket valid from `now_ms` for `ttl_ms`.
    pub fn new(
        entity: EntityName,
        service: EntityType,
        caps: String,
        now_ms: u64,
        ttl_ms: u64,
        secret_id: u64,
    ) -> Ticket {
        let mut nonce = [0u8; 16];
        nonce.copy_from_slice(&random_bytes()[..16]);
        Ticket {
            entity,
            service,
            caps,
            issued_ms: now_ms,
            expires_ms: now_ms.saturating_add(ttl_ms),
            secret_id,
            nonce,
        }
    }

    fn body(&self) -> Vec<u8> {
        let entity = self.entity.to_string();
        let mut b = Vec::with_capacity(64 + entity.len() + self.caps.len());
        b.push(VERSION);
        b.push(service_code(self.service));
        b.extend_from_slice(&self.issued_ms.to_le_bytes());
        b.extend_from_slice(&self.expires_ms.to_le_bytes());
        b.extend_from_slice(&self.secret_id.to_le_bytes());
        b.extend_from_slice(&self.nonce);
        for s in [entity.as_bytes(), self.caps.as_bytes()] {
            let len = u16::try_from(s.len()).unwrap_or(u16::MAX);
            b.extend_from_slice(&len.to_le_bytes());
            b.extend_from_slice(&s[..usize::from(len)]);
        }
        b
    }

    /// The encoded, sealed ticket.
    pub fn seal(&self, service_secret: &Secret) -> Vec<u8> {
        let mut b = self.body();
        let tag = service_secret.mac(&[&b]);
        b.extend_from_slice(&tag);
        b
    }

    /// The session key of this ticket (as the service derives it).
    pub fn session_key(&self, service_secret: &Secret) -> Secret {
        Secret::from_mac(&service_secret.mac(&[b"session", &self.body()]))
    }

    /// The session key wrapped for the ticket's holder, whose key is
    /// `holder_key`; [`Ticket::unwrap_session_key`] reverses it.
    pub fn wrap_session_key(&self, session: &Secret, holder_key: &Secret) -> [u8; 32] {
        xor(session.as_bytes(), &holder_key.mac(&[b"wrap", &self.nonce]))
    }

    /// Recovers the session key from its wrapped form.
    pub fn unwrap_session_key(nonce: &[u8; 16], wrapped: &[u8; 32], holder_key: &Secret) -> Secret {
        Secret::from_mac(&xor(wrapped, &holder_key.mac(&[b"wrap", nonce])))
    }

    /// Parses a sealed ticket without checking its seal (for its holder,
    /// who cannot check it).
    pub fn parse(bytes: &[u8]) -> Result<Ticket, TicketError> {
        if bytes.len() > TICKET_BYTES_MAX {
            return Err(TicketError::Malformed("too long"));
        }
        let body_len = bytes
            .len()
            .checked_sub(TAG_LEN)
            .ok_or(TicketError::Malformed("too short"))?;
        let mut r = Reader(&bytes[..body_len]);
        if r.u8()? != VERSION {
            return Err(TicketError::Malformed("unknown version"));
        }
        let service = service_from(r.u8()?).ok_or(TicketError::Malformed("unknown service"))?;
        let issued_ms = r.u64()?;
        let expires_ms = r.u64()?;
        let secret_id = r.u64()?;
        let mut nonce = [0u8; 16];
        nonce.copy_from_slice(r.take(16)?);
        let entity = std::str::from_utf8(r.string()?)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or(TicketError::Malformed("bad entity name"))?;
        let caps = String::from_utf8(r.string()?.to_vec())
            .map_err(|_| TicketError::Malformed("caps are not UTF-8"))?;
        if !r.0.is_empty() {
            return Err(TicketError::Malformed("trailing bytes"));
        }
        Ok(Ticket {
            entity,
            service,
            caps,
            issued_ms,
            expires_ms,
            secret_id,
            nonce,
        })
    }
}

fn xor(a: &[u8; 32], b: &[u8]) -> [u8; 32] {
    let mut out = *a;
    for (o, k) in out.iter_mut().zip(b) {
        *o ^= k;
    }
    out
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], TicketError> {
        if self.0.len() < n {
            return Err(TicketError::Malformed("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, TicketError> {
        Ok(self.take(1)?[0])
    }
    fn u64(&mut self) -> Result<u64, TicketError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn string(&mut self) -> Result<&'a [u8], TicketError> {
        let b = self.take(2)?;
        let len = u16::from_le_bytes([b[0], b[1]]);
        self.take(usize::from(len))
    }
}

/// The service secrets a daemon knows, by id. The monitors rotate them;
/// a daemon keeps the current and recent ones so tickets sealed just
/// before a rotation stay valid until they expire.
#[derive(Debug, Clone, Default)]
pub struct ServiceSecrets {
    secrets: BTreeMap<u64, Secret>,
}

impl ServiceSecrets {
    /// Adds or replaces secret `id`.
    pub fn insert(&mut self, id: u64, secret: Secret) {
        self.secrets.insert(id, secret);
    }

    /// Keeps only the `n` newest secrets.
    pub fn retain_newest(&mut self, n: usize) {
        while self.secrets.len() > n {
            self.secrets.pop_first();
        }
    }

    /// The newest secret, to seal new tickets with.
    pub fn current(&self) -> Option<(u64, &Secret)> {
        self.secrets.iter().next_back().map(|(id, s)| (*id, s))
    }

    /// Checks a sealed ticket for `service` at time `now_ms`; returns it and
    /// its session key.
    pub fn open(
        &self,
        bytes: &[u8],
        service: EntityType,
        now_ms: u64,
    ) -> Result<(Ticket, Secret), TicketError> {
        let ticket = Ticket::parse(bytes)?;
        let secret = self
            .secrets
            .get(&ticket.secret_id)
            .ok_or(TicketError::UnknownSecret(ticket.secret_id))?;
        let (body, tag) = bytes.split_at(bytes.len() - TAG_LEN);
        if !secret.verify(&[body], tag) {
            return Err(TicketError::Forged);
        }
        if ticket.service != service {
            return Err(TicketError::WrongService(ticket.service));
        }
        if now_ms >= ticket.expires_ms {
            return Err(TicketError::Expired(now_ms - ticket.expires_ms));
        }
        let session = ticket.session_key(secret);
        Ok((ticket, session))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (ServiceSecrets, Secret, Ticket) {
        let mut s = ServiceSecrets::default();
        let secret = Secret::generate();
        s.insert(7, secret.clone());
        let t = Ticket::new(
            "client.app".parse().unwrap(),
            EntityType::Osd,
            "allow rw pool=images".into(),
            1_000,
            60_000,
            7,
        );
        (s, secret, t)
    }

    #[test]
    fn seal_open_and_session_keys_agree() {
        let (secrets, secret, t) = setup();
        let sealed = t.seal(&secret);
        let (opened, session) = secrets.open(&sealed, EntityType::Osd, 2_000).unwrap();
        assert_eq!(opened, t);
        // The holder recovers the same session key from its wrapped form.
        let holder = Secret::generate();
        let wrapped = t.wrap_session_key(&t.session_key(&secret), &holder);
        assert_eq!(
            Ticket::unwrap_session_key(&t.nonce, &wrapped, &holder),
            session
        );
        assert_ne!(
            Ticket::unwrap_session_key(&t.nonce, &wrapped, &Secret::generate()),
            session
        );
        assert_eq!(Ticket::parse(&sealed).unwrap(), t);
    }

    #[test]
    fn expired_forged_unknown_and_wrong_service_are_refused() {
        let (secrets, secret, t) = setup();
        let sealed = t.seal(&secret);
        assert_eq!(
            secrets.open(&sealed, EntityType::Osd, 61_000 + 5),
            Err(TicketError::Expired(5))
        );
        // Any change to the body (here: wider caps) breaks the seal.
        let mut forged = t.clone();
        forged.caps = "allow *".into();
        let mut bytes = forged.body();
        bytes.extend_from_slice(&sealed[sealed.len() - TAG_LEN..]);
        assert_eq!(
            secrets.open(&bytes, EntityType::Osd, 2_000),
            Err(TicketError::Forged)
        );
        // A ticket sealed with a key the service never had.
        assert_eq!(
            secrets.open(&t.seal(&Secret::generate()), EntityType::Osd, 2_000),
            Err(TicketError::Forged)
        );
        let mut other = t.clone();
        other.secret_id = 9;
        assert_eq!(
            secrets.open(&other.seal(&secret), EntityType::Osd, 2_000),
            Err(TicketError::UnknownSecret(9))
        );
        assert_eq!(
            secrets.open(&sealed, EntityType::Mds, 2_000),
            Err(TicketError::WrongService(EntityType::Osd))
        );
    }

    #[test]
    fn garbage_never_panics() {
        let (secrets, secret, t) = setup();
        let sealed = t.seal(&secret);
        for cut in 0..sealed.len() {
            let _ = secrets.open(&sealed[..cut], EntityType::Osd, 2_000);
        }
        let mut x = 0x1234_5678u32;
        for _ in 0..2000 {
            let len = (x % 200) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            assert!(secrets.open(&bytes, EntityType::Osd, 2_000).is_err());
        }
        assert!(Ticket::parse(&vec![0u8; TICKET_BYTES_MAX + 1]).is_err());
    }

    #[test]
    fn rotation_keeps_recent_secrets() {
        let mut s = ServiceSecrets::default();
        for id in 1..=5 {
            s.insert(id, Secret::generate());
        }
        s.retain_newest(2);
        assert_eq!(s.current().map(|(id, _)| id), Some(5));
        assert_eq!(s.secrets.len(), 2);
    }
}

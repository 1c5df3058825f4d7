//! Secrets, the pluggable [`AuthProvider`], and the HMAC-SHA256 proofs used by
//! the handshake.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use shoal_types::EntityName;

use crate::keyring::Keyring;

type HmacSha256 = Hmac<Sha256>;

/// A 32-byte secret key. Its `Debug` form never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret([u8; Secret::LEN]);

impl Secret {
    /// Key length in bytes.
    pub const LEN: usize = 32;

    /// A fresh random key from the operating system's generator.
    pub fn generate() -> Secret {
        Secret(random_bytes())
    }

    /// Parses the base64 form used in keyrings.
    pub fn from_base64(s: &str) -> Result<Secret, String> {
        let bytes = B64
            .decode(s.trim())
            .map_err(|e| format!("key is not valid base64: {e}"))?;
        let arr: [u8; Secret::LEN] = bytes
            .try_into()
            .map_err(|v: Vec<u8>| format!("key must be 32 bytes, got {}", v.len()))?;
        Ok(Secret(arr))
    }

    /// A secret made of the first 32 bytes of an HMAC output (or any 32
    /// bytes); shorter input is zero-padded.
    pub fn from_mac(bytes: &[u8]) -> Secret {
        let mut arr = [0u8; Secret::LEN];
        for (a, b) in arr.iter_mut().zip(bytes) {
            *a = *b;
        }
        Secret(arr)
    }

    /// The base64 form.
    pub fn to_base64(&self) -> String {
        B64.encode(self.0)
    }

    /// Base64 of any bytes, in the same alphabet keys use.
    pub fn encode_base64(bytes: &[u8]) -> String {
        B64.encode(bytes)
    }

    /// Bytes from base64, in the same alphabet keys use.
    pub fn decode_base64(s: &str) -> Result<Vec<u8>, String> {
        B64.decode(s.trim())
            .map_err(|e| format!("not valid base64: {e}"))
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; Secret::LEN] {
        &self.0
    }

    /// HMAC-SHA256 of `parts` (concatenated) under this key.
    pub(crate) fn mac(&self, parts: &[&[u8]]) -> Vec<u8> {
        self.mac_state(parts).finalize().into_bytes().to_vec()
    }

    /// Constant-time check of `tag` against the HMAC of `parts`.
    pub(crate) fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        self.mac_state(parts).verify_slice(tag).is_ok()
    }

    fn mac_state(&self, parts: &[&[u8]]) -> HmacSha256 {
        // HMAC accepts keys of any length, so this cannot fail for 32 bytes.
        let mut m = <HmacSha256 as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        for p in parts {
            m.update(p);
        }
        m
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// 32 random bytes from the operating system. Failing to get randomness is
/// not recoverable: keys and nonces must never be predictable.
pub(crate) fn random_bytes() -> [u8; 32] {
    let mut b = [0u8; 32];
    if let Err(e) = getrandom::fill(&mut b) {
        panic!("the operating system's random generator failed: {e}");
    }
    b
}

/// Where the handshake gets keys. The keyring-based provider is the first;
/// monitor-issued tickets implement the same trait later.
pub trait AuthProvider: Send + Sync + 'static {
    /// The key this entity proves when it connects to a peer.
    fn own_secret(&self) -> Option<Secret>;
    /// The key that a connecting `peer` must prove, or `None` when the peer
    /// is unknown here.
    fn secret_for(&self, peer: &EntityName) -> Option<Secret>;

    /// A monitor-issued ticket to present when connecting, with its
    /// session key. A service that accepts tickets (an OSD) then asks for
    /// the session key instead of our own.
    fn ticket(&self) -> Option<(Vec<u8>, Secret)> {
        None
    }

    /// Checks a ticket presented by a connecting `peer`. `None`: this side
    /// does not take tickets (the peer proves its own key instead);
    /// `Some(Ok((session key, caps)))`: accepted; `Some(Err(why))`: refused.
    fn open_ticket(
        &self,
        _peer: &EntityName,
        _ticket: &[u8],
    ) -> Option<Result<(Secret, String), String>> {
        None
    }
}

/// An [`AuthProvider`] backed by a keyring: our own key is the keyring's
/// entry for our entity; connecting peers must be in the keyring too.
#[derive(Debug, Clone)]
pub struct KeyringAuth {
    me: EntityName,
    keyring: Keyring,
}

impl KeyringAuth {
    /// A provider for entity `me`.
    pub fn new(me: EntityName, keyring: Keyring) -> Self {
        KeyringAuth { me, keyring }
    }
}

impl AuthProvider for KeyringAuth {
    fn own_secret(&self) -> Option<Secret> {
        self.keyring.get(&self.me).map(|e| e.key.clone())
    }
    fn secret_for(&self, peer: &EntityName) -> Option<Secret> {
        self.keyring.get(peer).map(|e| e.key.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_verifies_only_with_the_same_key_and_parts() {
        let k = Secret::generate();
        let other = Secret::generate();
        let tag = k.mac(&[b"a", b"bc"]);
        assert!(k.verify(&[b"ab", b"c"], &tag));
        assert!(!k.verify(&[b"abd"], &tag));
        assert!(!other.verify(&[b"abc"], &tag));
        assert!(!k.verify(&[b"abc"], &tag[..31]));
        assert_ne!(k, other);
        assert_eq!(format!("{k:?}"), "Secret(..)");
        assert_eq!(Secret::from_base64(&k.to_base64()).unwrap(), k);
    }
}

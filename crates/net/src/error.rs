//! Messenger errors. Each names the peer it concerns, as `ENTITY at ADDR`
//! when the entity is known and the address alone otherwise.

use shoal_proto::{DecodeError, FrameError, RejectCode};

/// Why a handshake failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The peer refused us.
    #[error("rejected by the peer: {reason} ({code:?})")]
    Rejected {
        /// Why, as a stable code.
        code: RejectCode,
        /// Why, in words.
        reason: String,
    },
    /// We refused the peer.
    #[error("refused the peer: {reason} ({code:?})")]
    Refused {
        /// Why, as a stable code.
        code: RejectCode,
        /// Why, in words.
        reason: String,
    },
    /// We hold no key for our own entity.
    #[error("no key for {0} in the keyring")]
    NoOwnKey(String),
    /// The peer closed the connection before the handshake finished.
    #[error("connection closed during the handshake")]
    Truncated,
    /// The peer did not finish in time.
    #[error("handshake timed out")]
    Timeout,
    /// The peer sent something that is not a valid handshake frame.
    #[error("bad handshake frame: {0}")]
    BadFrame(String),
}

/// A messenger error.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// The TCP connection could not be established.
    #[error("cannot connect to {peer}: {reason}")]
    Connect {
        /// The peer.
        peer: String,
        /// Why.
        reason: String,
    },
    /// The handshake failed.
    #[error("handshake with {peer} failed: {source}")]
    Handshake {
        /// The peer.
        peer: String,
        /// Why.
        source: HandshakeError,
    },
    /// The peer sent a frame that does not decode; the connection was closed.
    #[error("bad frame from {peer}, connection closed: {source}")]
    Frame {
        /// The peer.
        peer: String,
        /// Why.
        source: FrameError,
    },
    /// The peer's reply does not decode.
    #[error("bad reply from {peer}: {source}")]
    Decode {
        /// The peer.
        peer: String,
        /// Why.
        source: DecodeError,
    },
    /// The connection is closed; a request in flight may or may not have
    /// been executed.
    #[error("connection to {peer} closed: {reason}")]
    Closed {
        /// The peer.
        peer: String,
        /// Why.
        reason: String,
    },
    /// No reply arrived in time.
    #[error("request to {peer} timed out after {ms} ms")]
    Timeout {
        /// The peer.
        peer: String,
        /// The timeout.
        ms: u64,
    },
    /// A message is larger than the configured limits.
    #[error("message too large for {peer}: {what} of {len} bytes exceeds {max}")]
    TooLarge {
        /// The peer.
        peer: String,
        /// Control or data part.
        what: &'static str,
        /// Its size.
        len: usize,
        /// The limit.
        max: u32,
    },
    /// The peer answered with an error.
    #[error("{peer} returned error {code}: {message}")]
    Remote {
        /// The peer.
        peer: String,
        /// The stable error code.
        code: u32,
        /// The peer's message.
        message: String,
    },
    /// The messenger is shutting down.
    #[error("messenger is shutting down")]
    Shutdown,
    /// Binding a listening address failed.
    #[error("cannot listen on {addr}: {reason}")]
    Bind {
        /// The address.
        addr: String,
        /// Why.
        reason: String,
    },
}

impl NetError {
    /// Whether retrying on a new connection may succeed (a refused key or a
    /// version mismatch never will).
    pub fn is_transient(&self) -> bool {
        match self {
            NetError::Handshake { source, .. } => matches!(
                source,
                HandshakeError::Truncated | HandshakeError::Timeout | HandshakeError::BadFrame(_)
            ),
            NetError::Connect { .. } | NetError::Closed { .. } | NetError::Frame { .. } => true,
            _ => false,
        }
    }
}

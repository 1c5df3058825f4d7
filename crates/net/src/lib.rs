//! The messenger: how every Shoal daemon and client talks to another.
//!
//! It owns connections (one per peer pair, established by a mutually
//! authenticated handshake), framing on top of `shoal-proto`, request/reply
//! matching by transaction id with pipelining and per-request timeouts,
//! one-way messages, reconnection with backoff, bounded in-flight bytes per
//! connection (senders wait; nothing queues without bound), bounded
//! unanswered requests per connection (the reader stops reading), vectored
//! writes that never copy a data part, and clean shutdown.
//!
//! All I/O goes through the [`Transport`] trait, with TCP ([`TcpTransport`])
//! and in-memory ([`MemNetwork`]) implementations, so a simulated network can
//! replace sockets. Authentication is behind [`AuthProvider`]: today keys
//! come from a keyring file or from monitor-issued tickets. In secure mode
//! (`ms_mode = secure`) every byte after the handshake travels in records
//! sealed with keys the handshake derived (the `secure` module's record
//! layer). This crate knows nothing of monitors, OSDs or maps.

mod admission;
mod auth;
mod config;
mod conn;
mod error;
mod handshake;
mod keyring;
mod messenger;
mod recv;
pub mod runtime;
mod secure;
mod ticket;
mod transport;

pub use auth::{AuthProvider, KeyringAuth, Secret};
pub use config::NetConfig;
pub use conn::{
    Connection, Dispatcher, Incoming, PeerInfo, PendingReply, Reply, ReplyHook, Responder,
};
pub use error::{HandshakeError, NetError};
pub use keyring::{Keyring, KeyringEntry, KeyringError};
pub use messenger::{Messenger, MessengerStats};
pub use runtime::now_ms;
pub use secure::{Cipher, MsMode};
pub use ticket::{ServiceSecrets, TICKET_BYTES_MAX, Ticket, TicketError};
pub use transport::{BoxListener, Listener, MemNetwork, Stream, TcpTransport, Transport};

/// Feature bits this build supports. Peers use the intersection.
pub const FEATURES_SUPPORTED: u64 = FEATURE_BASE;
/// The base protocol: frames, handshake v1, request/reply, one-way messages.
pub const FEATURE_BASE: u64 = 1;

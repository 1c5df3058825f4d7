//! Message schemas: the control part of each frame, by message type.
//!
//! Type numbers are part of the wire format and never reused: 1-9 handshake,
//! 10-19 messenger-level messages, 100-199 monitors; later ranges belong to
//! the OSD (200-299) and the front ends.

use prost::Message as _;

pub use crate::osd::{
    EcRead, EcReadReply, OsdNotify, OsdNotifyReply, OsdOp, OsdOpReply, OsdWatch, OsdWatchReply,
    PgCommand, PgCommandReply, PgInfo, PgList, PgListReply, PgPull, PgPush, PgPushBatch, PgQuery,
    PgScrub, PgScrubMap, PgStray, RepOp, RepOpReply, WatchNotify, WatchNotifyAck,
};

/// Handshake, first frame from the connecting side.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Hello {
    /// The sender's protocol version.
    #[prost(uint32, tag = "1")]
    pub protocol_version: u32,
    /// Feature bits the sender supports.
    #[prost(uint64, tag = "2")]
    pub features: u64,
    /// The sender's entity name (`client.admin`).
    #[prost(string, tag = "3")]
    pub entity: String,
    /// 32 random bytes chosen by the sender.
    #[prost(bytes = "vec", tag = "4")]
    pub nonce: Vec<u8>,
    /// Where the sender listens for connections, if it does (`ip:port`).
    #[prost(string, tag = "5")]
    pub listen_addr: String,
    /// Authentication method the sender wants (1: shared-key HMAC).
    #[prost(uint32, tag = "6")]
    pub auth_method: u32,
    /// A monitor-issued ticket the acceptor may accept instead of the
    /// sender's own key (empty when none).
    #[prost(bytes = "vec", tag = "7")]
    pub ticket: Vec<u8>,
    /// The connection mode the sender uses: 0 crc (what builds before the
    /// secure mode send), 1 secure.
    #[prost(uint32, tag = "8")]
    pub ms_mode: u32,
    /// In secure mode, the record cipher the sender prefers (1
    /// AES-256-GCM, 2 ChaCha20-Poly1305).
    #[prost(uint32, tag = "9")]
    pub cipher: u32,
}

/// Handshake, the accepting side's answer to [`Hello`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthChallenge {
    /// The acceptor's protocol version.
    #[prost(uint32, tag = "1")]
    pub protocol_version: u32,
    /// Feature bits the acceptor supports.
    #[prost(uint64, tag = "2")]
    pub features: u64,
    /// The acceptor's entity name.
    #[prost(string, tag = "3")]
    pub entity: String,
    /// 32 random bytes chosen by the acceptor.
    #[prost(bytes = "vec", tag = "4")]
    pub nonce: Vec<u8>,
    /// The key the connector must prove: 1 its own key, 2 the session key
    /// of the ticket it presented.
    #[prost(uint32, tag = "5")]
    pub auth_method: u32,
    /// The connection mode the acceptor requires of this connector: 0
    /// crc, 1 secure.
    #[prost(uint32, tag = "6")]
    pub ms_mode: u32,
    /// In secure mode, the record cipher both ends use (1 AES-256-GCM, 2
    /// ChaCha20-Poly1305).
    #[prost(uint32, tag = "7")]
    pub cipher: u32,
}

/// Handshake, the connecting side's proof that it holds its key.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthProof {
    /// HMAC-SHA256 over the handshake transcript.
    #[prost(bytes = "vec", tag = "1")]
    pub proof: Vec<u8>,
}

/// Handshake, the acceptor's proof that it holds the same key; the
/// connection is established once the connecting side has checked it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthDone {
    /// HMAC-SHA256 over the handshake transcript.
    #[prost(bytes = "vec", tag = "1")]
    pub proof: Vec<u8>,
    /// The feature bits both sides support.
    #[prost(uint64, tag = "2")]
    pub features: u64,
}

/// Handshake, sent by either side before it closes a connection it refuses.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthReject {
    /// A [`RejectCode`].
    #[prost(uint32, tag = "1")]
    pub code: u32,
    /// Human-readable reason.
    #[prost(string, tag = "2")]
    pub reason: String,
}

/// Why a handshake was refused (stable on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum RejectCode {
    /// The peers speak different protocol versions.
    VersionMismatch = 1,
    /// The connecting entity has no key on the accepting side.
    UnknownEntity = 2,
    /// A proof did not verify: wrong key.
    BadProof = 3,
    /// A handshake message was malformed or out of order.
    Protocol = 4,
    /// The requested authentication method is not offered.
    UnsupportedAuth = 5,
    /// The presented ticket is expired, forged or not for this entity.
    BadTicket = 6,
    /// The two ends use different connection modes (`ms_mode`).
    ModeMismatch = 7,
}

impl RejectCode {
    /// The code for a wire value; unknown values map to `Protocol`.
    pub fn from_u32(v: u32) -> RejectCode {
        match v {
            1 => RejectCode::VersionMismatch,
            2 => RejectCode::UnknownEntity,
            3 => RejectCode::BadProof,
            5 => RejectCode::UnsupportedAuth,
            6 => RejectCode::BadTicket,
            7 => RejectCode::ModeMismatch,
            _ => RejectCode::Protocol,
        }
    }
}

/// A liveness probe; the receiver answers with [`Pong`] carrying the same
/// `seq` (and, when `echo` is set, the same data part).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Ping {
    /// Sequence number chosen by the sender.
    #[prost(uint64, tag = "1")]
    pub seq: u64,
    /// Whether the reply should carry the request's data part back.
    #[prost(bool, tag = "2")]
    pub echo: bool,
}

/// The answer to a [`Ping`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct Pong {
    /// The `seq` of the ping answered.
    #[prost(uint64, tag = "1")]
    pub seq: u64,
}

/// A request failed. Codes are stable on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ErrorReply {
    /// Error code (see `shoal_proto::ErrorReply::UNSUPPORTED` and later ones).
    #[prost(uint32, tag = "1")]
    pub code: u32,
    /// Human-readable message.
    #[prost(string, tag = "2")]
    pub message: String,
}

impl ErrorReply {
    /// The receiver does not handle this message type.
    pub const UNSUPPORTED: u32 = 1;
    /// The control part could not be decoded.
    pub const MALFORMED: u32 = 2;
    /// The receiver is shutting down.
    pub const SHUTTING_DOWN: u32 = 3;
}

/// A command for the monitors (`shoal status`, `shoal auth ls`, ...). The
/// command itself is JSON in `command`, so the CLI and the monitor share one
/// serde definition and new commands need no new message type.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MonCommand {
    /// The command, as JSON.
    #[prost(string, tag = "1")]
    pub command: String,
}

/// A request to a metadata server (a client's, or a revoke's answer). The
/// body is the file system's own JSON encoding (`shoal-fs`'s `msg`), so new
/// metadata operations need no new message type.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MdsRequest {
    /// The request, as JSON.
    #[prost(bytes = "vec", tag = "1")]
    pub body: Vec<u8>,
}

/// A metadata server's answer to an [`MdsRequest`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct MdsReply {
    /// The reply, as JSON.
    #[prost(bytes = "vec", tag = "1")]
    pub body: Vec<u8>,
}

/// A message a metadata server sends a client unasked (a capability
/// revoke), one-way.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MdsPush {
    /// The message, as JSON.
    #[prost(bytes = "vec", tag = "1")]
    pub body: Vec<u8>,
}

/// The monitors' answer to a [`MonCommand`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct MonCommandReply {
    /// 0 on success, else a stable error code (see `shoal_monclient::ErrorCode`).
    #[prost(uint32, tag = "1")]
    pub code: u32,
    /// JSON output on success, an error message otherwise.
    #[prost(string, tag = "2")]
    pub output: String,
}

/// A Raft RPC between monitors. The RPC body (openraft's own serde types)
/// travels as JSON in the data part.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MonRaft {
    /// 1 append-entries, 2 vote, 3 install-snapshot.
    #[prost(uint32, tag = "1")]
    pub rpc: u32,
}

/// The answer to a [`MonRaft`] RPC; the body is JSON in the data part.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MonRaftReply {
    /// Whether the data part holds an error rather than a response.
    #[prost(bool, tag = "1")]
    pub error: bool,
}

/// Subscribes the sender to a part of the monitors' state (`config`,
/// `monmap`; later `osdmap`). The reply is a [`MonUpdate`] with the current
/// value; later changes are pushed as one-way [`MonUpdate`]s on the same
/// connection.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MonSubscribe {
    /// What to follow.
    #[prost(string, tag = "1")]
    pub what: String,
    /// The version the sender already has (0: none).
    #[prost(uint64, tag = "2")]
    pub have: u64,
}

/// A value of a subscribed part of the monitors' state; the value is JSON
/// in the data part.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MonUpdate {
    /// What it is (`config`, `monmap`).
    #[prost(string, tag = "1")]
    pub what: String,
    /// The monitors' state version it was taken at (grows with every change).
    #[prost(uint64, tag = "2")]
    pub version: u64,
}

/// A primary's peering asks the monitors for a PG's past intervals: those
/// since `since`, from a monitor whose map has reached `epoch` (the
/// asker's own), so any monitor of the quorum may answer from its applied
/// state. The answer is a [`MonPastIntervalsReply`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct MonPastIntervals {
    /// The PG's pool.
    #[prost(uint64, tag = "1")]
    pub pool: u64,
    /// The PG's seed.
    #[prost(uint32, tag = "2")]
    pub pg_seed: u32,
    /// The first epoch of interest.
    #[prost(uint32, tag = "3")]
    pub since: u32,
    /// The epoch of the asker's map: the answer covers at least that far.
    #[prost(uint32, tag = "4")]
    pub epoch: u32,
}

/// The answer to [`MonPastIntervals`]: on success (code 0) the data part
/// is `shoal_maps::PastIntervals`' binary encoding; otherwise `message`
/// says why (codes as for [`MonCommandReply`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct MonPastIntervalsReply {
    /// 0 on success, else a stable error code (see `shoal_monclient::ErrorCode`).
    #[prost(uint32, tag = "1")]
    pub code: u32,
    /// Why, when it failed.
    #[prost(string, tag = "2")]
    pub message: String,
}

/// Why a control part could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The message type is not known to this build.
    #[error("unknown message type {0}")]
    UnknownType(u16),
    /// The control part is not a valid encoding of its type.
    #[error("malformed {ty} message: {reason}")]
    Malformed {
        /// The message type's name.
        ty: &'static str,
        /// What the decoder said.
        reason: String,
    },
}

macro_rules! messages {
    ($( $id:literal => $name:ident ),* $(,)?) => {
        /// Every message, by type.
        #[derive(Clone, Debug, PartialEq)]
        #[non_exhaustive]
        pub enum Message {
            $( #[allow(missing_docs)] $name($name), )*
        }

        /// The wire number of each message type.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u16)]
        #[non_exhaustive]
        pub enum MessageType {
            $( #[allow(missing_docs)] $name = $id, )*
        }

        impl MessageType {
            /// Every message type.
            pub const ALL: &'static [MessageType] = &[ $( MessageType::$name, )* ];

            /// The type for a wire number, if known.
            pub fn from_u16(v: u16) -> Option<MessageType> {
                match v { $( $id => Some(MessageType::$name), )* _ => None }
            }

            /// The type's name, for logs and errors.
            pub fn name(self) -> &'static str {
                match self { $( MessageType::$name => stringify!($name), )* }
            }
        }

        impl Message {
            /// This message's type.
            pub fn msg_type(&self) -> MessageType {
                match self { $( Message::$name(_) => MessageType::$name, )* }
            }

            /// Encodes the control part.
            pub fn encode_control(&self) -> Vec<u8> {
                match self { $( Message::$name(m) => m.encode_to_vec(), )* }
            }

            /// Decodes a control part of wire type `ty`.
            pub fn decode(ty: u16, control: &[u8]) -> Result<Message, DecodeError> {
                match MessageType::from_u16(ty) {
                    $( Some(MessageType::$name) => $name::decode(control)
                        .map(Message::$name)
                        .map_err(|e| DecodeError::Malformed {
                            ty: stringify!($name),
                            reason: e.to_string(),
                        }), )*
                    None => Err(DecodeError::UnknownType(ty)),
                }
            }
        }

        $( impl From<$name> for Message {
            fn from(m: $name) -> Message { Message::$name(m) }
        } )*
    };
}

messages! {
    1 => Hello,
    2 => AuthChallenge,
    3 => AuthProof,
    4 => AuthDone,
    5 => AuthReject,
    10 => Ping,
    11 => Pong,
    12 => ErrorReply,
    100 => MonCommand,
    101 => MonCommandReply,
    102 => MonRaft,
    103 => MonRaftReply,
    104 => MonSubscribe,
    105 => MonUpdate,
    106 => MonPastIntervals,
    107 => MonPastIntervalsReply,
    200 => OsdOp,
    201 => OsdOpReply,
    202 => RepOp,
    203 => RepOpReply,
    204 => PgQuery,
    205 => PgInfo,
    206 => PgPush,
    207 => PgList,
    208 => PgListReply,
    209 => PgPull,
    210 => PgScrub,
    211 => PgScrubMap,
    212 => PgCommand,
    213 => PgCommandReply,
    214 => EcRead,
    215 => EcReadReply,
    216 => OsdWatch,
    217 => OsdWatchReply,
    218 => OsdNotify,
    219 => OsdNotifyReply,
    220 => WatchNotify,
    221 => WatchNotifyAck,
    222 => PgPushBatch,
    223 => PgStray,
    300 => MdsRequest,
    301 => MdsReply,
    302 => MdsPush,
}

impl Message {
    /// An OSD's refusal of this request, as the request's own reply type:
    /// `code` (an `OsdErrorCode`), why, and the refusing OSD's map
    /// `epoch`. A message with no reply type of its own (replication,
    /// peering, recovery, scrub) is answered with a [`RepOpReply`].
    pub fn osd_refusal(&self, code: u32, message: String, epoch: u32) -> Message {
        macro_rules! refusal {
            ($reply:ident) => {
                $reply {
                    code,
                    message,
                    epoch,
                    ..Default::default()
                }
                .into()
            };
        }
        match self {
            Message::OsdOp(_) => refusal!(OsdOpReply),
            Message::PgList(_) => refusal!(PgListReply),
            Message::PgCommand(_) => refusal!(PgCommandReply),
            Message::OsdWatch(_) => refusal!(OsdWatchReply),
            Message::OsdNotify(_) => refusal!(OsdNotifyReply),
            Message::EcRead(_) => refusal!(EcReadReply),
            _ => RepOpReply {
                code,
                message,
                epoch,
            }
            .into(),
        }
    }
}

#[cfg(test)]
mod tests;

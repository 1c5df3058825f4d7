//! Shoal's wire protocol: the frame format (a fixed header, a control part and
//! a raw data part, each checksummed with crc32c), the bounded, panic-free
//! frame decoder, and the schema of every message carried in a control part.
//!
//! Control parts are protobuf messages (prost): fields are numbered, unknown
//! fields are skipped, so a message can gain fields without a version bump.
//! The data part is never encoded into the control part: it travels as
//! `bytes::Bytes` from the socket buffer to whoever consumes it. This crate
//! does no I/O and knows nothing of connections; `shoal-net` drives it.
//! The byte-level format is documented in `docs/design/wire-protocol.md`.

mod frame;
mod message;
mod osd;

pub use frame::{
    Frame, FrameDecoder, FrameError, FrameFlags, FrameHeader, FrameLimits, HEADER_LEN, LargeData,
    MAGIC, PROTOCOL_VERSION, data_crc, encode_frame,
};
pub use message::{
    AuthChallenge, AuthDone, AuthProof, AuthReject, DecodeError, ErrorReply, Hello, MdsPush,
    MdsReply, MdsRequest, Message, MessageType, MonCommand, MonCommandReply, MonPastIntervals,
    MonPastIntervalsReply, MonRaft, MonRaftReply, MonSubscribe, MonUpdate, Ping, Pong, RejectCode,
};
pub use osd::{
    CmpOp, CopyProgress, EcRead, EcReadReply, OpCode, OsdErrorCode, OsdNotify, OsdNotifyReply,
    OsdOp, OsdOpReply, OsdSubOp, OsdSubOpResult, OsdWatch, OsdWatchReply, PgCommand,
    PgCommandReply, PgInfo, PgList, PgListReply, PgPull, PgPush, PgPushBatch, PgQuery, PgScrub,
    PgScrubMap, PgStray, RepOp, RepOpReply, ScrubObject, StrayShard, TxnOp, WatchNotify,
    WatchNotifyAck, WatcherInfo,
};

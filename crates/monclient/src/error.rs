//! Monitor errors, with codes that are stable on the wire.

use serde::{Deserialize, Serialize};

/// Stable error codes of monitor commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ErrorCode {
    /// A name or value is invalid.
    InvalidArgument = 1,
    /// The thing exists already.
    Exists = 2,
    /// The thing does not exist.
    NotFound = 3,
    /// The caller's capabilities do not allow this.
    PermissionDenied = 4,
    /// No quorum: the change cannot be made now.
    NoQuorum = 5,
    /// Try again (e.g. not bootstrapped yet).
    Again = 6,
    /// The command needs a confirmation flag.
    NeedsConfirmation = 7,
    /// Something failed inside the monitor.
    Internal = 8,
    /// The thing is in use (a profile a pool was made from).
    Busy = 9,
}

impl ErrorCode {
    /// The code for a wire value.
    pub fn from_u32(v: u32) -> ErrorCode {
        match v {
            1 => ErrorCode::InvalidArgument,
            2 => ErrorCode::Exists,
            3 => ErrorCode::NotFound,
            4 => ErrorCode::PermissionDenied,
            5 => ErrorCode::NoQuorum,
            6 => ErrorCode::Again,
            7 => ErrorCode::NeedsConfirmation,
            9 => ErrorCode::Busy,
            _ => ErrorCode::Internal,
        }
    }
}

/// A refused or failed monitor operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct MonError {
    /// Stable code.
    pub code: ErrorCode,
    /// What happened.
    pub message: String,
}

impl MonError {
    /// An error with `code`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        MonError {
            code,
            message: message.into(),
        }
    }
}

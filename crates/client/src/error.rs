//! The client's errors: what an application can handle (an object that is
//! not there, a guard that did not hold, a timeout) kept apart by kind.

use shoal_proto::OsdErrorCode;

/// Why an operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The object (or the omap key) does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// An exclusive create found the object.
    #[error("exists: {0}")]
    Exists(String),
    /// The OSD is out of space.
    #[error("no space: {0}")]
    NoSpace(String),
    /// The caller's capabilities do not allow the operation.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The operation did not complete within its timeout.
    #[error("timed out after {0:?}: {1}")]
    Timeout(std::time::Duration, String),
    /// No pool of that name or id.
    #[error("no such pool: {0}")]
    NoPool(String),
    /// A `cmpxattr` guard did not hold.
    #[error("comparison failed: {0}")]
    CompareFailed(String),
    /// An `assert_version` guard did not hold.
    #[error("version mismatch: {0}")]
    VersionMismatch(String),
    /// No such xattr.
    #[error("no such xattr: {0}")]
    NoData(String),
    /// An argument the OSD refused (bad name, offset out of range).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The object is larger than allowed, or the read too large.
    #[error("too large: {0}")]
    TooLarge(String),
    /// The OSD's store failed to read or write.
    #[error("I/O error: {0}")]
    Io(String),
    /// The pool does not offer the operation (omap on an erasure-coded pool).
    #[error("operation not supported: {0}")]
    NotSupported(String),
    /// The monitors refused or could not answer.
    #[error("monitors: {0}")]
    Mon(String),
    /// The configuration or keyring is unusable.
    #[error("configuration: {0}")]
    Config(String),
    /// The peer answered something the protocol does not allow.
    #[error("protocol: {0}")]
    Protocol(String),
    /// An OSD failed internally.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// The error for a final (not retried) OSD answer.
    pub fn from_osd(code: OsdErrorCode, message: String) -> Error {
        use OsdErrorCode as C;
        match code {
            C::NotFound => Error::NotFound(message),
            C::Exists => Error::Exists(message),
            C::NoSpace => Error::NoSpace(message),
            C::PermissionDenied => Error::PermissionDenied(message),
            C::InvalidArgument => Error::InvalidArgument(message),
            C::CompareFailed => Error::CompareFailed(message),
            C::VersionMismatch => Error::VersionMismatch(message),
            C::NoData => Error::NoData(message),
            C::TooLarge => Error::TooLarge(message),
            C::NoPool => Error::NoPool(message),
            C::Io => Error::Io(message),
            C::NotSupported => Error::NotSupported(message),
            _ => Error::Internal(format!("{code:?}: {message}")),
        }
    }
}

/// A compound operation failed at one of its sub-operations; nothing of it
/// was applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sub-operation {index} failed: {error}")]
pub struct OpError {
    /// The index of the failing sub-operation.
    pub index: usize,
    /// Why.
    pub error: Error,
}

/// The result type of the client library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

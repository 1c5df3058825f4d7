//! The object store's error type.

use crate::types::{CollectionId, ObjectKey};

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors of the object store.
///
/// Two families: errors a caller handles (`CollectionNotFound`, `ObjectNotFound`,
/// `CollectionExists`, `InvalidArgument`, `NoSpace`, `Checksum`) and errors that end the
/// store (`Poisoned`, `Io` on a write path, `Corrupt`): after a failed write or sync the
/// store refuses every later write ([`Error::is_fatal`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The collection does not exist.
    #[error("collection {0} does not exist")]
    CollectionNotFound(CollectionId),
    /// `CreateCollection` of a collection that exists.
    #[error("collection {0} already exists")]
    CollectionExists(CollectionId),
    /// The object does not exist.
    #[error("object {1} does not exist in collection {0}")]
    ObjectNotFound(CollectionId, ObjectKey),
    /// An argument is out of range (offset overflow, object too large, name too long...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The data device has no room for the transaction.
    #[error("no space: {needed_bytes} bytes needed, {free_bytes} free")]
    NoSpace {
        /// Bytes the transaction needs.
        needed_bytes: u64,
        /// Bytes free when it was refused.
        free_bytes: u64,
    },
    /// A data block failed its crc32c check; the data is not returned.
    #[error("checksum mismatch in data block at device offset {device_offset}")]
    Checksum {
        /// Byte offset of the 4 KiB block on the data device.
        device_offset: u64,
    },
    /// Persistent state does not decode or breaks an invariant.
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// An I/O error.
    #[error("I/O error while {context}: {source}")]
    Io {
        /// What the store was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The metadata store failed.
    #[error("metadata store error while {context}: {message}")]
    Meta {
        /// What the store was doing.
        context: String,
        /// The underlying error, rendered.
        message: String,
    },
    /// An earlier write or sync failed; the store refuses all writes until it is reopened
    /// (and the fsync is never retried: its failure may have dropped dirty pages).
    #[error("store is poisoned and refuses writes: {0}")]
    Poisoned(String),
    /// The store is not formatted, or formatted with an unknown version.
    #[error("not a Shoal object store: {0}")]
    NotFormatted(String),
    /// A file of the store is missing, damaged, of another format or of another store;
    /// found while opening it, before anything was written.
    #[error("{}: {reason}", file.display())]
    Damaged {
        /// The file (or directory) at fault.
        file: std::path::PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Another process (or another open in this one) holds the store.
    #[error("{}: store in use by another process (its lock file is held)", file.display())]
    Locked {
        /// The lock file.
        file: std::path::PathBuf,
    },
}

impl Error {
    /// True for errors after which the store must not be written again.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            Error::Poisoned(_)
                | Error::Io { .. }
                | Error::Meta { .. }
                | Error::Corrupt(_)
                | Error::Damaged { .. }
        )
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// `file` is damaged: `reason` says how.
    pub(crate) fn damaged(file: &std::path::Path, reason: impl Into<String>) -> Self {
        Error::Damaged {
            file: file.to_path_buf(),
            reason: reason.into(),
        }
    }

    /// Name `file` as the place of any error found while opening it (errors that already
    /// name their file, or a held lock, stay as they are).
    pub(crate) fn in_file(file: &std::path::Path) -> impl Fn(Error) -> Error + '_ {
        move |e| match e {
            Error::Damaged { .. } | Error::Locked { .. } => e,
            other => Error::damaged(file, other.to_string()),
        }
    }

    pub(crate) fn meta(context: impl Into<String>, e: impl std::fmt::Display) -> Self {
        Error::Meta {
            context: context.into(),
            message: e.to_string(),
        }
    }
}

//! The block library's errors: each names the image (and pool) it is about.

/// Why an image operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No image of that name in the pool.
    #[error("image {image} does not exist in pool {pool}")]
    NoImage {
        /// The pool.
        pool: String,
        /// The image.
        image: String,
    },
    /// An image of that name exists.
    #[error("image {image} already exists in pool {pool}")]
    ImageExists {
        /// The pool.
        pool: String,
        /// The image.
        image: String,
    },
    /// A bad argument (name, size, object order, pool kind).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An I/O reaching past the image's end.
    #[error("{offset}+{len} is beyond the end of image {image} ({size} bytes)")]
    OutOfRange {
        /// The image.
        image: String,
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        len: u64,
        /// The image's size.
        size: u64,
    },
    /// Another client holds the image's exclusive lock.
    #[error("image {image} is locked by {owner}: it has one writer at a time")]
    Locked {
        /// The image.
        image: String,
        /// Who holds the lock.
        owner: String,
    },
    /// The image was opened read-only.
    #[error("image {0} is open read-only")]
    ReadOnly(String),
    /// The image is in use by another client (it has watchers).
    #[error("image {image} is in use: {why}")]
    Busy {
        /// The image.
        image: String,
        /// By whom.
        why: String,
    },
    /// What the cluster holds for the image cannot be understood.
    #[error("image {image} is damaged: {why}")]
    Corrupt {
        /// The image.
        image: String,
        /// What is wrong.
        why: String,
    },
    /// No snapshot of that name.
    #[error("image {image} has no snapshot {snap}")]
    NoSnap {
        /// The image.
        image: String,
        /// The snapshot.
        snap: String,
    },
    /// A snapshot of that name exists.
    #[error("image {image} already has a snapshot {snap}")]
    SnapExists {
        /// The image.
        image: String,
        /// The snapshot.
        snap: String,
    },
    /// The snapshot is protected.
    #[error("snapshot {snap} of image {image} is protected: unprotect it first")]
    SnapProtected {
        /// The image.
        image: String,
        /// The snapshot.
        snap: String,
    },
    /// Not offered (yet) for this image.
    #[error("not supported: {0}")]
    NotSupported(String),
    /// The cluster refused or failed an operation.
    #[error("{0}")]
    Cluster(#[from] shoal_client::Error),
}

impl From<shoal_client::OpError> for Error {
    fn from(e: shoal_client::OpError) -> Error {
        Error::Cluster(e.error)
    }
}

/// The block library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

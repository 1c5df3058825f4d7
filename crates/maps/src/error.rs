//! Errors of the maps crate.

use thiserror::Error;

/// What can go wrong with cluster maps.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MapError {
    /// An incremental does not follow this map.
    #[error("incremental for epoch {got} cannot apply to epoch {have}")]
    WrongEpoch {
        /// The map's epoch.
        have: u32,
        /// The incremental's epoch.
        got: u32,
    },
    /// An incremental of another cluster.
    #[error("fsid mismatch")]
    FsidMismatch,
    /// A reference to a pool the map does not have.
    #[error("no pool {0}")]
    NoSuchPool(u64),
    /// An OSD id out of range.
    #[error("no osd.{0}")]
    NoSuchOsd(i32),
    /// A value out of its allowed range.
    #[error("invalid: {0}")]
    Invalid(String),
    /// A number in the map above the limit that keeps its memory and the
    /// work of mapping it bounded (`max_osd`, a pool's `pg_num` or size).
    #[error("{what} {value} is above the limit of {max}")]
    Limit {
        /// Which number.
        what: &'static str,
        /// The map's value.
        value: u64,
        /// The largest value accepted.
        max: u64,
    },
    /// Bytes that do not decode.
    #[error("decode: {0}")]
    Decode(String),
    /// An error from the CRUSH map.
    #[error(transparent)]
    Crush(#[from] shoal_crush::CrushError),
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, MapError>;

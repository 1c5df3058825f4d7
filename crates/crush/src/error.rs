//! Errors of the CRUSH crate.

use thiserror::Error;

/// Everything that can go wrong building, parsing or decoding a CRUSH map.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CrushError {
    /// The Ceph text form could not be parsed.
    #[error("line {line}: {msg}")]
    Parse {
        /// 1-based line number in the input.
        line: usize,
        /// What was wrong.
        msg: String,
    },
    /// The map is structurally invalid (unknown item, duplicate id, cycle...).
    #[error("invalid map: {0}")]
    Invalid(String),
    /// A binary encoding could not be decoded.
    #[error("decode: {0}")]
    Decode(String),
    /// A number in the map above the limit that keeps mapping bounded
    /// (see [`crate::limits`]).
    #[error("{what} {value} is above the limit of {max}")]
    Limit {
        /// Which number: `choose_total_tries`, `bucket size`, ...
        what: &'static str,
        /// The map's value.
        value: u64,
        /// The largest value accepted.
        max: u64,
    },
    /// A rule id that the map does not have.
    #[error("no rule {0}")]
    NoSuchRule(u32),
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, CrushError>;

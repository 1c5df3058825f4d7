//! Erasure coding for EC pools: what an operator's profile says
//! ([`EcProfile`]: `k`, `m`, the failure domain, the stripe unit), how an
//! object's bytes are cut into stripes and shards ([`StripeLayout`]), and
//! the Reed–Solomon codec that turns `k` data chunks into `m` coding chunks
//! and rebuilds any `m` lost ones ([`Codec`], on `reed-solomon-erasure`,
//! chosen by `bench/ec-codecs`).
//!
//! An object of an EC pool is cut into stripes of `k × stripe_unit` bytes;
//! chunk `i` of every stripe goes to shard `i` (shards `k..k+m` hold the
//! coding chunks), and shard `i` lives on the `i`-th member of the PG's
//! acting set. A shard is therefore the concatenation of its chunks, one
//! per stripe, and a logical range maps to the same byte range in every
//! shard. This crate does no I/O: the OSD's EC backend reads and writes
//! shards and uses this crate to plan and compute them.

mod codec;
mod layout;
mod plan;
mod profile;

pub use codec::{Codec, chunk_crcs};
pub use layout::StripeLayout;
pub use plan::{DataOp, ShardUpdate, plan, plan_with, stripes_to_read};
pub use profile::{DEFAULT_PROFILE, DEFAULT_STRIPE_UNIT, EcProfile, MAX_CHUNKS};

/// What can go wrong with a profile or a coding operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EcError {
    /// A profile key or value is not acceptable.
    #[error("{0}")]
    Profile(String),
    /// Too few shards survive to decode.
    #[error("{have} of {k} shards needed are readable")]
    TooFewShards {
        /// Shards available.
        have: usize,
        /// Shards needed (`k`).
        k: usize,
    },
    /// The shards handed to the codec are not of one whole-chunk length,
    /// or there are not `k + m` of them.
    #[error("shards do not line up: {0}")]
    Shape(String),
}

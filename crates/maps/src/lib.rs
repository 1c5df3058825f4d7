//! The cluster map and the object -> PG -> OSD mapping, as Ceph computes them.
//!
//! This crate owns [`OsdMap`] (epoch, fsid, OSDs with address, up/down,
//! in/out weight and primary affinity, pools, `pg_temp`/`primary_temp` and
//! `pg_upmap_items` overrides, the CRUSH map), [`Incremental`] and its
//! `apply`, the versioned binary encodings of both, and placement: object
//! name -> PG with Ceph's rjenkins string hash and stable mod, PG -> raw
//! CRUSH result -> up set -> acting set -> primary, step for step as Ceph's
//! `OSDMap::_pg_to_up_acting_osds`. It is pure (no I/O, no async, no floating
//! point) and depends only on `shoal-crush` and `shoal-types`.

pub mod balance;
mod encode;
mod error;
mod hash;
mod incremental;
mod interval;
mod mapping;
mod osdmap;
mod pg;
mod pool;

pub use encode::PastIntervals;
pub use error::{MapError, Result};
pub use hash::{cbits, pg_mask, stable_mod, str_hash_rjenkins};
pub use incremental::Incremental;
pub use interval::{IntervalHistory, IntervalKey, PastInterval};
pub use mapping::PgMapping;
pub use osdmap::{MAX_OSD_LIMIT, OsdInfo, OsdMap, PRIMARY_AFFINITY_DEFAULT, WEIGHT_IN, WEIGHT_OUT};
pub use pg::{PgId, SplitChild, split_children};
pub use pool::{
    AutoscaleMode, AutoscaleOptions, DEFAULT_STRIPE_UNIT, FLAG_AUTOSCALE_OFF, FLAG_AUTOSCALE_WARN,
    FLAG_BULK, FLAG_EC_OVERWRITES, FLAG_FULL_QUOTA, FLAG_HASHPSPOOL, MAX_PG_NUM, MAX_POOL_SIZE,
    Pool, PoolKind,
};
pub use shoal_crush::ITEM_NONE;

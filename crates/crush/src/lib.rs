//! CRUSH placement, computed exactly as Ceph computes it.
//!
//! This crate owns the CRUSH map model (devices with 16.16 weights and
//! classes, typed buckets, rules, tunables), the mapping algorithm (rjenkins1
//! hash, straw2 with Ceph's integer `crush_ln`, firstn/indep rule steps with
//! Ceph's retry and collision rules, device-class shadow trees, reweights),
//! Ceph's text format (`crushtool -d` / `-c`), Shoal's versioned binary
//! encoding of a map, and the pure parts of the `crushtool --test` tooling.
//! It is pure: no I/O, no async, no clocks, and no floating point on the
//! placement path, so every machine computes the same answer. It must not
//! depend on any other Shoal crate except through plain data.

mod bucket;
mod build;
pub mod ceph_binary;
mod choose;
mod classes;
pub mod codec;
mod edit;
mod encode;
mod error;
pub mod hash;
pub mod limits;
mod ln;
mod ln_table;
mod map;
mod mapper;
pub mod tester;
pub mod text;
mod tree;

pub use build::{BuildSpec, build_map};
pub use error::{CrushError, Result};
pub use limits::{
    MAX_BUCKET_ITEMS, MAX_CHOOSE_TRIES, MAX_DEPTH, MAX_DEVICES, MAX_LOCAL_TRIES, MAX_REPLICAS,
    MAX_RULE_STEPS,
};
pub use ln::crush_ln;
pub use map::{
    Bucket, BucketAlg, CrushMap, Device, ITEM_NONE, RULE_ERASURE, RULE_REPLICATED, Rule, Step,
    Tunables, WEIGHT_ONE,
};
pub use mapper::Workspace;

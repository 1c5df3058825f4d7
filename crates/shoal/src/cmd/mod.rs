//! One module per top-level subcommand. Each exposes a clap `Subcommand`
//! or `Args` type and a `run` function; `main` only dispatches.

pub mod auth;
pub mod balancer;
pub mod bench;
pub mod bench_history;
pub mod bench_mon;
pub mod bench_rados;
pub mod bench_s3;
pub mod cluster;
pub mod common;
pub mod config;
pub mod crash;
pub mod crush;
pub mod dev;
pub mod fs;
pub mod gateway;
pub mod keyring;
pub mod mgr;
pub mod mon;
pub mod nbd;
pub mod osd;
pub mod osd_daemon;
pub mod osd_views;
pub mod out;
pub mod pg;
pub mod rados;
pub mod rbd;
pub mod rbd_device;
pub mod status;
pub mod store;
pub mod units;

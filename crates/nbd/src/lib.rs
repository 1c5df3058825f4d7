//! Shoal images as network block devices: an NBD server (the protocol
//! Linux's `nbd` driver, qemu, libnbd, fio and Windows' WNBD speak) that
//! exports images by name — `POOL/IMAGE`, or `POOL/IMAGE@SNAP` read-only.
//! [`proto`] holds the wire format (pure encoding and decoding), and
//! [`server`] the connections: the fixed-newstyle option haggling
//! (`INFO`, `GO`, `LIST`, `ABORT`, structured replies, the
//! `base:allocation` metadata context) and the transmission phase (read,
//! write, flush, trim, write-zeroes, cache and block status, many requests
//! in flight per connection and several connections per export).
//! `NBD_OPT_STARTTLS` upgrades a connection to TLS (rustls) when the
//! server has a certificate, and may be required.

pub mod metrics;
pub mod proto;
pub mod server;

pub use server::{Server, ServerOptions, Tls, TlsError};

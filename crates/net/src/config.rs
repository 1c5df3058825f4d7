//! The messenger's settings, taken from the configuration options `ms_*`.

use std::time::Duration;

use shoal_config::{MsMode, Options};
use shoal_proto::FrameLimits;
use shoal_types::{EntityName, EntityType};

use crate::secure::Cipher;

/// Limits and timeouts of one messenger.
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// Largest control and data parts accepted and sent.
    pub limits: FrameLimits,
    /// Bytes queued for sending per connection before senders wait.
    pub inflight_bytes_max: u64,
    /// Unanswered received requests per connection before reading pauses.
    pub dispatch_requests_max: u32,
    /// Accepted sockets in their handshake, per listener, before new ones
    /// are refused.
    pub handshakes_max: u32,
    /// Accepted connections (in their handshake or established), per
    /// listener, before new ones are refused.
    pub connections_max: u32,
    /// Time allowed for the handshake.
    pub handshake_timeout: Duration,
    /// Time allowed for a TCP connect.
    pub connect_timeout: Duration,
    /// Default request timeout.
    pub request_timeout: Duration,
    /// First reconnect delay.
    pub backoff_min: Duration,
    /// Longest reconnect delay.
    pub backoff_max: Duration,
    /// Connection attempts per call before giving up.
    pub reconnect_attempts: u32,
    /// Mode of connections between daemons (`ms_cluster_mode`).
    pub cluster_mode: MsMode,
    /// Mode required of connecting clients (`ms_service_mode`).
    pub service_mode: MsMode,
    /// Mode a client connects with (`ms_client_mode`).
    pub client_mode: MsMode,
    /// The record cipher this end prefers in secure mode (by default the
    /// one its CPU runs fastest; tests set the other).
    pub cipher: Cipher,
}

impl NetConfig {
    /// The messenger settings in `o`.
    pub fn from_options(o: &Options) -> Self {
        NetConfig {
            limits: FrameLimits {
                control_bytes_max: o.ms_frame_control_bytes_max,
                data_bytes_max: o.ms_frame_data_bytes_max,
            },
            inflight_bytes_max: o.ms_inflight_bytes_max.max(1),
            dispatch_requests_max: o.ms_dispatch_requests_max.max(1),
            handshakes_max: o.ms_handshakes_max.max(1),
            connections_max: o.ms_connections_max.max(1),
            handshake_timeout: Duration::from_millis(o.ms_handshake_timeout_ms),
            connect_timeout: Duration::from_millis(o.ms_connect_timeout_ms),
            request_timeout: Duration::from_millis(o.ms_request_timeout_ms),
            backoff_min: Duration::from_millis(o.ms_reconnect_backoff_min_ms),
            backoff_max: Duration::from_millis(o.ms_reconnect_backoff_max_ms),
            reconnect_attempts: o.ms_reconnect_attempts.max(1),
            cluster_mode: o.ms_cluster_mode.unwrap_or(o.ms_mode),
            service_mode: o.ms_service_mode.unwrap_or(o.ms_mode),
            client_mode: o.ms_client_mode.unwrap_or(o.ms_mode),
            cipher: Cipher::preferred(),
        }
    }

    /// Every connection in `mode` (as `ms_mode` sets them).
    pub fn with_mode(self, mode: MsMode) -> Self {
        NetConfig {
            cluster_mode: mode,
            service_mode: mode,
            client_mode: mode,
            ..self
        }
    }

    /// The mode `me` connects with: a client's, or a daemon's to another
    /// daemon.
    pub(crate) fn connect_mode(&self, me: &EntityName) -> MsMode {
        match me.ty() {
            EntityType::Client => self.client_mode,
            _ => self.cluster_mode,
        }
    }

    /// The mode a connection from `peer` must use: the service mode for a
    /// client, the cluster mode for a daemon.
    pub(crate) fn accept_mode(&self, peer: &EntityName) -> MsMode {
        match peer.ty() {
            EntityType::Client => self.service_mode,
            _ => self.cluster_mode,
        }
    }
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig::from_options(&Options::default())
    }
}

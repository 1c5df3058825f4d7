//! The option schema. Each option is declared once, with its type, default
//! and documentation; the macro derives the typed struct, the setters used by
//! the file loader and `--set`, and the listing used by `shoal config show`.

use toml::Value;

/// A value type an option may have.
pub(crate) trait OptionValue: Sized {
    const TYPE_NAME: &'static str;
    fn from_toml(v: &Value) -> Option<Self>;
    fn parse_str(s: &str) -> Option<Self>;
    fn to_toml(&self) -> Value;
}

impl OptionValue for u64 {
    const TYPE_NAME: &'static str = "an unsigned integer";
    fn from_toml(v: &Value) -> Option<Self> {
        v.as_integer().and_then(|i| u64::try_from(i).ok())
    }
    fn parse_str(s: &str) -> Option<Self> {
        s.trim().parse().ok()
    }
    fn to_toml(&self) -> Value {
        // Values above i64::MAX cannot be written in TOML; saturate for display.
        Value::Integer(i64::try_from(*self).unwrap_or(i64::MAX))
    }
}

impl OptionValue for u32 {
    const TYPE_NAME: &'static str = "an unsigned 32-bit integer";
    fn from_toml(v: &Value) -> Option<Self> {
        v.as_integer().and_then(|i| u32::try_from(i).ok())
    }
    fn parse_str(s: &str) -> Option<Self> {
        s.trim().parse().ok()
    }
    fn to_toml(&self) -> Value {
        Value::Integer(i64::from(*self))
    }
}

impl OptionValue for bool {
    const TYPE_NAME: &'static str = "a boolean";
    fn from_toml(v: &Value) -> Option<Self> {
        v.as_bool()
    }
    fn parse_str(s: &str) -> Option<Self> {
        match s.trim() {
            "true" | "yes" | "1" | "on" => Some(true),
            "false" | "no" | "0" | "off" => Some(false),
            _ => None,
        }
    }
    fn to_toml(&self) -> Value {
        Value::Boolean(*self)
    }
}

impl OptionValue for f64 {
    const TYPE_NAME: &'static str = "a number";
    fn from_toml(v: &Value) -> Option<Self> {
        v.as_float()
            .or_else(|| v.as_integer().map(|i| i as f64))
            .filter(|f| f.is_finite())
    }
    fn parse_str(s: &str) -> Option<Self> {
        s.trim().parse::<f64>().ok().filter(|f| f.is_finite())
    }
    fn to_toml(&self) -> Value {
        Value::Float(*self)
    }
}

impl OptionValue for String {
    const TYPE_NAME: &'static str = "a string";
    fn from_toml(v: &Value) -> Option<Self> {
        v.as_str().map(str::to_string)
    }
    fn parse_str(s: &str) -> Option<Self> {
        Some(s.to_string())
    }
    fn to_toml(&self) -> Value {
        Value::String(self.clone())
    }
}

/// How a connection protects its frames (`ms_mode` and its finer options).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MsMode {
    /// Frames carry a crc32c of each part: accidental damage is caught,
    /// nothing is hidden or protected against a party on the path.
    #[default]
    Crc,
    /// Every frame is encrypted and authenticated (AES-256-GCM or
    /// ChaCha20-Poly1305) under keys of the connection's handshake.
    Secure,
}

impl MsMode {
    /// The mode's name in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            MsMode::Crc => "crc",
            MsMode::Secure => "secure",
        }
    }
}

impl std::fmt::Display for MsMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for MsMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "crc" => Ok(MsMode::Crc),
            "secure" => Ok(MsMode::Secure),
            other => Err(format!("unknown connection mode {other:?}: crc or secure")),
        }
    }
}

impl OptionValue for MsMode {
    const TYPE_NAME: &'static str = "crc or secure";
    fn from_toml(v: &Value) -> Option<Self> {
        v.as_str().and_then(|s| s.parse().ok())
    }
    fn parse_str(s: &str) -> Option<Self> {
        s.parse().ok()
    }
    fn to_toml(&self) -> Value {
        Value::String(self.as_str().to_string())
    }
}

/// A finer mode option: empty means "as `ms_mode`".
impl OptionValue for Option<MsMode> {
    const TYPE_NAME: &'static str = "crc, secure or empty (as ms_mode)";
    fn from_toml(v: &Value) -> Option<Self> {
        match v.as_str()? {
            "" => Some(None),
            s => s.parse().ok().map(Some),
        }
    }
    fn parse_str(s: &str) -> Option<Self> {
        match s.trim() {
            "" => Some(None),
            s => s.parse().ok().map(Some),
        }
    }
    fn to_toml(&self) -> Value {
        Value::String(self.map(MsMode::as_str).unwrap_or_default().to_string())
    }
}

/// One option of the schema, for listings and error messages.
#[derive(Debug, Clone, Copy)]
pub struct OptionInfo {
    /// The key as written in the file.
    pub name: &'static str,
    /// The value type, in words.
    pub type_name: &'static str,
    /// What the option does.
    pub doc: &'static str,
}

/// Why a value could not be set.
pub(crate) enum SetError {
    UnknownKey,
    WrongType(&'static str),
}

macro_rules! options {
    ($( $(#[doc = $doc:literal])+ $name:ident : $ty:ty = $default:expr ; )*) => {
        /// The effective value of every option for one entity.
        #[derive(Debug, Clone, PartialEq)]
        #[non_exhaustive]
        pub struct Options {
            $( $(#[doc = $doc])+ pub $name: $ty, )*
        }

        impl Default for Options {
            fn default() -> Self {
                Options { $( $name: $default.into(), )* }
            }
        }

        impl Options {
            /// Every option, in declaration order.
            pub const SCHEMA: &'static [OptionInfo] = &[
                $( OptionInfo {
                    name: stringify!($name),
                    type_name: <$ty as OptionValue>::TYPE_NAME,
                    doc: concat!($($doc),+),
                }, )*
            ];

            pub(crate) fn set_toml(&mut self, key: &str, v: &Value) -> Result<(), SetError> {
                match key {
                    $( stringify!($name) => {
                        self.$name = <$ty as OptionValue>::from_toml(v)
                            .ok_or(SetError::WrongType(<$ty as OptionValue>::TYPE_NAME))?;
                        Ok(())
                    } )*
                    _ => Err(SetError::UnknownKey),
                }
            }

            pub(crate) fn set_str(&mut self, key: &str, s: &str) -> Result<(), SetError> {
                match key {
                    $( stringify!($name) => {
                        self.$name = <$ty as OptionValue>::parse_str(s)
                            .ok_or(SetError::WrongType(<$ty as OptionValue>::TYPE_NAME))?;
                        Ok(())
                    } )*
                    _ => Err(SetError::UnknownKey),
                }
            }

            /// Every option with its current value, in declaration order.
            pub fn values(&self) -> Vec<(&'static str, Value)> {
                vec![ $( (stringify!($name), OptionValue::to_toml(&self.$name)), )* ]
            }
        }
    };
}

options! {
    /// Log filter: a default level and per-subsystem levels, e.g. "info,net=debug,osd=trace".
    log_level: String = "info";
    /// Comma-separated monitor addresses (host:port) that daemons and clients contact first.
    mon_host: String = "";
    /// Path of the keyring file holding this entity's secret key (and, for daemons, the keys of entities allowed to connect).
    keyring: String = "";
    /// Address a daemon listens on (host:port; port 0 picks a free one).
    public_addr: String = "127.0.0.1:0";
    /// Largest control part of a frame accepted or sent, in bytes.
    ms_frame_control_bytes_max: u32 = 1u32 << 20;
    /// Largest data part of a frame accepted or sent, in bytes.
    ms_frame_data_bytes_max: u32 = 64u32 << 20;
    /// Bytes of frames queued for sending on one connection before senders wait (backpressure).
    ms_inflight_bytes_max: u64 = 256u64 << 20;
    /// Requests received on one connection and not yet answered before the connection stops reading (backpressure).
    ms_dispatch_requests_max: u32 = 4096u32;
    /// Accepted connections still in their handshake, per listening address, before new ones are refused.
    ms_handshakes_max: u32 = 128u32;
    /// Accepted connections (in their handshake or established), per listening address, before new ones are refused.
    ms_connections_max: u32 = 4096u32;
    /// Time allowed for a connection's handshake and authentication, in milliseconds.
    ms_handshake_timeout_ms: u64 = 5_000u64;
    /// Time allowed to establish a TCP connection, in milliseconds.
    ms_connect_timeout_ms: u64 = 3_000u64;
    /// Default time a request waits for its reply, in milliseconds.
    ms_request_timeout_ms: u64 = 30_000u64;
    /// First delay before reconnecting to a peer, in milliseconds; doubles after each failure.
    ms_reconnect_backoff_min_ms: u64 = 50u64;
    /// Longest delay between reconnect attempts, in milliseconds.
    ms_reconnect_backoff_max_ms: u64 = 5_000u64;
    /// Connection attempts made for one request before it fails.
    ms_reconnect_attempts: u32 = 6u32;
    /// How every connection of this daemon or client protects its frames: "crc" (a checksum per frame part) or "secure" (every frame encrypted and authenticated with keys from the handshake). Both ends must agree; ms_cluster_mode, ms_service_mode and ms_client_mode override it.
    ms_mode: MsMode = MsMode::Crc;
    /// Mode of connections between daemons (monitors, OSDs, managers, MDSs); empty: as ms_mode.
    ms_cluster_mode: Option<MsMode> = None::<MsMode>;
    /// Mode a daemon requires of the clients that connect to it; empty: as ms_mode.
    ms_service_mode: Option<MsMode> = None::<MsMode>;
    /// Mode a client uses for its connections to daemons; empty: as ms_mode.
    ms_client_mode: Option<MsMode> = None::<MsMode>;
    /// A monitor's data directory (made by `shoal mon mkfs`).
    mon_data: String = "";
    /// Interval of the monitors' Raft heartbeats, in milliseconds (openraft sends them on a tick of 1.5 times this).
    mon_heartbeat_interval_ms: u64 = 50u64;
    /// Election timeout, in milliseconds: each monitor draws its own between this and 1.5 times this, and a follower that stops hearing the leader calls an election after 1.5 times this (the leader's lease) plus its own; tuned for a LAN (a leader failure costs about 1 s).
    mon_election_timeout_ms: u64 = 300u64;
    /// Raft log entries between monitor snapshots.
    mon_snapshot_every: u64 = 1_000u64;
    /// How long a monitor command may wait for a leader and a commit, in milliseconds; then it fails with "no quorum".
    mon_command_timeout_ms: u64 = 10_000u64;
    /// Validity of the tickets monitors issue for OSD access, in milliseconds.
    auth_ticket_ttl_ms: u64 = 3_600_000u64;
    /// Age at which the monitors replace the service secret that seals tickets, in milliseconds (the three newest stay valid).
    auth_service_secret_rotation_ms: u64 = 3_600_000u64;
    /// CRUSH failure domain of the default replicated rule made at bootstrap: host, or osd for a one-machine cluster.
    osd_crush_failure_domain: String = "host";
    /// OSD-map epochs of history the monitors keep (incrementals, and full maps at intervals), fixed at bootstrap.
    mon_osdmap_history: u32 = 500u32;
    /// Epochs between the full OSD maps the monitors keep, fixed at bootstrap.
    mon_osdmap_full_interval: u32 = 100u32;
    /// Distinct reporters (from different subtrees) needed to mark an OSD down.
    mon_osd_min_down_reporters: u32 = 2u32;
    /// CRUSH level that makes failure reporters distinct: host, or osd for a one-machine cluster.
    mon_osd_reporter_subtree_level: String = "host";
    /// An OSD that sends no beacon for this long is marked down, in milliseconds.
    mon_osd_report_timeout_ms: u64 = 900_000u64;
    /// A down OSD is marked out after this long unless noout is set, in milliseconds.
    mon_osd_down_out_interval_ms: u64 = 600_000u64;
    /// OSD boots, downs and outs arriving within this window share one map epoch, in milliseconds.
    mon_osd_batch_window_ms: u64 = 100u64;
    /// An OSD reports a peer that has not answered heartbeats for this long, in milliseconds; reports count for twice this.
    osd_heartbeat_grace_ms: u64 = 20_000u64;
    /// Where an OSD keeps its store and keyring; `$id` is replaced by the OSD id.
    osd_data: String = "/var/lib/shoal/osd-$id";
    /// The CRUSH host an OSD registers under at boot (empty: the machine's host name).
    osd_host: String = "";
    /// The interval between an OSD's heartbeats to the peers it shares PGs with, in milliseconds.
    osd_heartbeat_interval_ms: u64 = 2_000u64;
    /// The interval between an OSD's beacons to the monitors, in milliseconds.
    osd_beacon_interval_ms: u64 = 30_000u64;
    /// The interval between an OSD's PG statistics reports to the monitors, in milliseconds.
    osd_pg_stats_interval_ms: u64 = 5_000u64;
    /// PG log entries kept per PG while it is degraded, recovering, backfilling or remapped (Ceph's `osd_max_pg_log_entries`): a member that missed up to this many changes catches up from the log rather than by backfill.
    osd_pg_log_entries_max: u32 = 3_000u32;
    /// PG log entries a clean PG keeps (Ceph's `osd_min_pg_log_entries`; at most `osd_pg_log_entries_max`, else the OSD refuses to start); a longer log is trimmed to it a little with every change once the PG is clean.
    osd_pg_log_entries_min: u32 = 250u32;
    /// Request ids of trimmed PG log entries kept per PG for resend detection.
    osd_pg_log_dups_max: u32 = 3_000u32;
    /// How long a primary waits for a replica's acknowledgement or a peer's peering answer, in milliseconds.
    osd_peer_timeout_ms: u64 = 30_000u64;
    /// Above this percentage of its store used, an OSD refuses writes (as Ceph's full ratio).
    osd_full_ratio_pct: u32 = 95u32;
    /// The CRUSH weight an OSD new to CRUSH gets when it first boots (as Ceph's osd_crush_initial_weight); negative: its store's size in TiB, so that CRUSH and the balancer give each OSD a share by capacity.
    osd_crush_initial_weight: f64 = -1.0f64;
    /// Above this share of its store used, an OSD is reported nearfull (health OSD_NEARFULL, and POOL_NEARFULL for the pools on it), as Ceph's mon_osd_nearfull_ratio.
    mon_osd_nearfull_ratio: f64 = 0.85f64;
    /// Above this share of its store used, an OSD is reported backfillfull (health OSD_BACKFILLFULL), as Ceph's mon_osd_backfillfull_ratio.
    mon_osd_backfillfull_ratio: f64 = 0.90f64;
    /// Above this share of its store used, an OSD is reported full (health OSD_FULL, an error, and POOL_FULL for the pools on it), as Ceph's mon_osd_full_ratio; the OSD itself refuses writes past osd_full_ratio_pct.
    mon_osd_full_ratio: f64 = 0.95f64;
    /// Objects an OSD recovers at once, per PG and in all (as Ceph's osd_recovery_max_active).
    osd_recovery_max_active: u32 = 3u32;
    /// Most whole objects one recovery message pushes to a member, installed in one transaction and acknowledged once (replicated pools whose snapshots were never trimmed; each batch also within osd_recovery_max_chunk_bytes of data); 1 pushes every object on its own.
    osd_recovery_batch_objects: u32 = 64u32;
    /// PGs of an OSD backfilling at once (as Ceph's osd_max_backfills).
    osd_max_backfills: u32 = 1u32;
    /// An erasure-coded read asks one more shard when none of those it asked has answered for this many milliseconds (a slow OSD is read around, as a missing one is); 0 never does.
    osd_ec_read_hedge_ms: u64 = 50u64;
    /// The pause between two objects' snapshot trims in a PG, in milliseconds (as Ceph's osd_snap_trim_sleep); a PG trims one object at a time.
    osd_snap_trim_sleep_ms: u64 = 0u64;
    /// Most data bytes one step of an object copy (recovery, backfill, repair) carries (as Ceph's osd_recovery_max_chunk).
    osd_recovery_max_chunk_bytes: u64 = 4u64 << 20;
    /// Most bytes of xattrs, omap header and omap entries one step of an object copy carries; keep it well below ms_frame_control_bytes_max.
    osd_recovery_max_omap_chunk_bytes: u64 = 512u64 << 10;
    /// Op shards per OSD (as Ceph's osd_op_num_shards): threads with a single-threaded runtime each, PGs spread over them; 0 means one per core.
    osd_op_num_shards: u32 = 0u32;
    /// Scrub (compare replicas' object metadata) each PG at least this often, in milliseconds.
    osd_scrub_interval_ms: u64 = 86_400_000u64;
    /// Deep-scrub (compare replicas' data checksums too) each PG at least this often, in milliseconds.
    osd_deep_scrub_interval_ms: u64 = 604_800_000u64;
    /// How often a stray — an OSD holding a copy of a PG it is no longer a member of (after an OSD out, an upmap, a balancer move) — asks the PG's primary whether the copy may go, in milliseconds; the copy is removed once the PG is active and clean without it.
    osd_stray_check_interval_ms: u64 = 5_000u64;
    /// Scheduled scrubs an OSD runs at once as primary (as Ceph's osd_max_scrubs; 0: none are scheduled); scrubs asked for with `pg scrub` or `osd scrub` do not wait for one.
    osd_max_scrubs: u32 = 1u32;
    /// Size of the data file `shoal osd mkfs` creates for a block store, in bytes.
    osd_store_bytes: u64 = 10u64 << 30;
    /// Recently read data a block store keeps in memory, in bytes (as Ceph's bluestore_cache_size; 0: none, every read goes to the device). Reads of at most 64 KiB fill it; a deep scrub reads past it.
    osd_store_cache_bytes: u64 = 256u64 << 20;
    /// Reserve the block store's data file in full at mkfs (fallocate), so a filesystem too small for it fails there rather than mid-write; otherwise the file is sparse and takes space as it is written (as Ceph's bluestore_block_preallocate_file).
    osd_store_preallocate: bool = false;
    /// How long a client op may take, resends included, before it fails with a timeout, in milliseconds.
    client_op_timeout_ms: u64 = 60_000u64;
    /// A client's watch (an open image's, say) that is not renewed for this long is dropped by the OSD, in milliseconds; the client renews it every sixth of it.
    client_watch_timeout_ms: u64 = 30_000u64;
    /// The region the S3 gateway enforces: a request signed for another is refused with AuthorizationHeaderMalformed naming this one, as AWS does; empty: requests signed for any region are taken (as radosgw does; s3cmd's default configuration signs for `US`).
    gateway_region: String = "";
    /// The S3 gateway refuses SSE-C (keys sent by the client) over plain HTTP, as AWS does: the key would cross the network in the clear (as Ceph's rgw_crypt_require_ssl); false: taken, for tests on loopback.
    gateway_sse_c_require_tls: bool = true;
    /// Where daemons without a data directory (the S3 gateway, the NBD server) write crash reports, which they post to the monitors while they run; empty: they write none. Monitors and OSDs use `<data>/crash`.
    crash_dir: String = "";
    /// A manager that sends no beacon for this long loses its role (a standby takes over), in milliseconds (as Ceph's mon_mgr_beacon_grace).
    mon_mgr_beacon_grace_ms: u64 = 10_000u64;
    /// The PG copies each OSD should hold, which the autoscaler sizes pools' pg_num by (as Ceph's mon_target_pg_per_osd; central configuration).
    mon_target_pg_per_osd: u32 = 100u32;
    /// How often the monitors' leader looks at pools whose pg_autoscale_mode is on, in milliseconds (central configuration; Ceph's autoscaler sleeps 60 s).
    mon_pg_autoscale_interval_ms: u64 = 60_000u64;
    /// The factor a pool's pg_num must be off by before the autoscaler changes it or warns (as Ceph's autoscaler threshold; central configuration).
    mon_pg_autoscale_threshold: f64 = 3.0f64;
    /// The fewest PGs the autoscaler sizes a pool to (Ceph's autoscaler floors at 32; Shoal lets pools start small and grow with their data; central configuration).
    mon_pg_autoscale_pg_num_min: u32 = 8u32;
    /// The pg_autoscale_mode a new pool gets: on (the leader raises its pg_num as its data grows), warn (a health check says when it is off by the threshold) or off (central configuration).
    osd_pool_default_pg_autoscale_mode: String = "on";
    /// The monitors' leader balances PGs (as Ceph's balancer in upmap mode): once every PG is active+clean it moves copies with pg_upmap_items until each up and in OSD holds within mon_balancer_max_deviation copies of its share (CRUSH weight times reweight), keeping each PG's failure domains; read from the central configuration (`shoal balancer on|off`).
    mon_balancer_active: bool = true;
    /// How often the balancer looks, in milliseconds (central configuration).
    mon_balancer_interval_ms: u64 = 60_000u64;
    /// The most PG copies an OSD may hold above or below its share once balanced (central configuration).
    mon_balancer_max_deviation: u32 = 1u32;
    /// The most copies the balancer moves in one round (central configuration).
    mon_balancer_max_moves: u32 = 10u32;
    /// The largest share of object copies that may be misplaced while a pool's pgp_num follows a grown pg_num (as Ceph's target_max_misplaced_ratio): the leader moves it a step only below this, each step about this share of the pool's PGs (central configuration).
    mon_target_max_misplaced_ratio: f64 = 0.05f64;
    /// A metadata server that sends no beacon for this long loses its rank to a standby, in milliseconds (as Ceph's mds_beacon_grace).
    mon_mds_beacon_grace_ms: u64 = 8_000u64;
    /// The interval between a metadata server's beacons to the monitors, in milliseconds.
    mds_beacon_interval_ms: u64 = 1_000u64;
    /// Where a metadata server serves clients (port 0: any free port; the monitors' file-system map tells clients).
    mds_addr: String = "127.0.0.1:0";
    /// A client session silent this long is ended by the MDS and its capabilities taken back, in milliseconds (as Ceph's session_timeout); clients renew every quarter of it.
    mds_session_timeout_ms: u64 = 30_000u64;
    /// Journal events an MDS keeps before it writes them to the directory and inode objects and trims the journal.
    mds_journal_flush_events: u64 = 4_096u64;
    /// Entries a directory fragment object holds before the directory splits into twice as many fragments (by a hash of the name).
    mds_dir_frag_max: u64 = 10_000u64;
    /// The interval between a manager's beacons to the monitors, in milliseconds.
    mgr_beacon_interval_ms: u64 = 2_000u64;
    /// Where a manager serves HTTP: `/metrics` for Prometheus and the dashboard.
    mgr_http_addr: String = "127.0.0.1:9283";
    /// The interval between daemons' performance reports for the manager (OSDs, gateways, NBD servers), and between the manager's refreshes of what it serves, in milliseconds (as Ceph's mgr_stats_period); 0: daemons report nothing.
    mgr_stats_period_ms: u64 = 5_000u64;
    /// For testing crash handling only: a daemon panics this many milliseconds after it starts (0: never), as Ceph's debug_asok_assert_abort lets an operator make one abort.
    debug_inject_panic_ms: u64 = 0u64;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_lists_every_field_once() {
        let names: Vec<_> = Options::SCHEMA.iter().map(|o| o.name).collect();
        let values: Vec<_> = Options::default()
            .values()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, values);
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len());
        assert!(Options::SCHEMA.iter().all(|o| !o.doc.is_empty()));
    }

    #[test]
    fn typed_setters() {
        let mut o = Options::default();
        assert!(o.set_str("ms_request_timeout_ms", "1500").is_ok());
        assert_eq!(o.ms_request_timeout_ms, 1500);
        assert!(matches!(
            o.set_str("ms_request_timeout_ms", "soon"),
            Err(SetError::WrongType(_))
        ));
        assert!(matches!(
            o.set_toml("ms_frame_data_bytes_max", &Value::Integer(-1)),
            Err(SetError::WrongType(_))
        ));
        assert!(matches!(
            o.set_str("no_such_option", "1"),
            Err(SetError::UnknownKey)
        ));
    }
}

//! The monitors' replicated state and the one function that changes it.
//!
//! [`MonState::apply`] is a pure, deterministic function of (state, request):
//! every monitor applies the same committed requests in the same order and
//! reaches the same state. Anything random (new keys) is chosen by the
//! proposing monitor before the request is proposed, never while applying.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use shoal_types::EntityName;

use crate::osdmap::{OsdChange, OsdMapState};
use crate::pgstats::{OsdStatfs, PgStatEntry, PgStats};
use shoal_monclient::{ErrorCode, MonError};

/// One monitor in the monitor map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonInfo {
    /// Raft node id, derived from the name ([`node_id`]).
    pub id: u64,
    /// Where it listens (`ip:port`).
    pub addr: String,
}

/// An entity's key and capabilities, as `shoal auth get` shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthEntry {
    /// The secret key, base64.
    pub key: String,
    /// Capabilities by service: `mon` → `allow r`.
    pub caps: BTreeMap<String, String>,
}

/// A replicated change, proposed through Raft.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MonRequest {
    /// The first entry of a new cluster.
    Bootstrap {
        /// The cluster id.
        fsid: String,
        /// The CRUSH failure domain of the default replicated rule (`host`,
        /// or `osd` on one machine).
        #[serde(default = "default_failure_domain")]
        failure_domain: String,
        /// OSD-map epochs of history to keep.
        #[serde(default = "default_history")]
        history: u32,
        /// Epochs between kept full OSD maps.
        #[serde(default = "default_full_interval")]
        full_interval: u32,
        /// Initial monitors by name.
        mons: BTreeMap<String, MonInfo>,
        /// Initial entities (the bootstrap keyring).
        auth: BTreeMap<String, AuthEntry>,
    },
    /// Adds an entity; with `if_missing`, an existing one is returned as is.
    AuthAdd {
        /// The entity.
        entity: String,
        /// Its key (chosen by the proposer).
        key: String,
        /// Its capabilities.
        caps: BTreeMap<String, String>,
        /// get-or-create semantics.
        if_missing: bool,
    },
    /// Removes an entity.
    AuthRm {
        /// The entity.
        entity: String,
    },
    /// Replaces an entity's capabilities.
    AuthCaps {
        /// The entity.
        entity: String,
        /// The new capabilities.
        caps: BTreeMap<String, String>,
    },
    /// Sets a central configuration option for `who` (`global`, `osd`, `osd.3`).
    ConfigSet {
        /// The section.
        who: String,
        /// The option.
        key: String,
        /// Its value, as `--set` would take it.
        value: String,
    },
    /// Removes a central configuration option.
    ConfigRm {
        /// The section.
        who: String,
        /// The option.
        key: String,
    },
    /// Records a monitor added to the quorum.
    MonAdd {
        /// Its name (`d` for `mon.d`).
        name: String,
        /// Its address.
        addr: String,
    },
    /// Records a monitor removed from the quorum.
    MonRm {
        /// Its name.
        name: String,
    },
    /// A change to the OSD map (one new epoch).
    Osd(OsdChange),
    /// Adds a new service secret (chosen by the proposer) and keeps only
    /// the `keep` newest.
    RotateServiceSecret {
        /// The new secret, base64.
        key: String,
        /// When the proposer made it (ms since the Unix epoch).
        created_ms: u64,
        /// How many secrets to keep, newest first.
        keep: u32,
    },
    /// An OSD's PG statistics and store space (no new OSD-map epoch).
    PgStats(PgStats),
    /// The health checks the leader sees now, with its clock: recorded
    /// (events for those raised, changed or cleared; see `health.rs`).
    HealthRecord {
        /// When (ms since the Unix epoch).
        at_ms: u64,
        /// Every check, muted or not.
        checks: Vec<crate::health::CheckNow>,
    },
    /// Mutes a health check.
    HealthMute {
        /// Its code.
        code: String,
        /// When the mute lapses (none: never).
        until_ms: Option<u64>,
        /// Kept when the check clears.
        sticky: bool,
    },
    /// Ends the mute of a health check.
    HealthUnmute {
        /// Its code.
        code: String,
    },
    /// Records a daemon's crash (one already recorded is left as it is).
    CrashPost(shoal_monclient::CrashReport),
    /// Marks a crash (none: every crash) seen.
    CrashArchive {
        /// The crash.
        id: Option<String>,
    },
    /// Forgets a crash.
    CrashRm {
        /// The crash.
        id: String,
    },
    /// A new manager map (its epoch must follow the current one's).
    MgrMap(crate::mgrmap::MgrMap),
    /// Makes a file system (`fs new`): its pools must exist, and a pool
    /// serves one file system at most.
    FsNew {
        /// Its name.
        name: String,
        /// The pool of metadata.
        metadata_pool: String,
        /// The pool of file data.
        data_pool: String,
        /// When (ms since the Unix epoch, the proposer's clock).
        now_ms: u64,
    },
    /// Forgets a file system (its pools and objects stay).
    FsRm {
        /// Its name.
        name: String,
    },
    /// A new MDS assignment (its epoch must follow the current one's).
    FsMap(crate::fsmap::FsMap),
}

/// Crashes kept at most (the oldest go first).
pub const CRASHES_MAX: usize = 500;

/// A service secret: seals the tickets OSDs accept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceSecret {
    /// The key, base64.
    pub key: String,
    /// When it was made (ms since the Unix epoch).
    pub created_ms: u64,
}

/// The result of applying a request: JSON output or an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MonResponse {
    /// Applied; the output.
    Ok(serde_json::Value),
    /// Refused; nothing changed.
    Err {
        /// Stable code.
        code: ErrorCode,
        /// Message.
        message: String,
    },
}

fn default_failure_domain() -> String {
    "host".to_string()
}

fn default_history() -> u32 {
    crate::osdmap::HISTORY_MAX as u32
}

fn default_full_interval() -> u32 {
    crate::osdmap::FULL_INTERVAL
}

/// The 16 bytes of a textual UUID (hyphens ignored).
pub fn fsid_bytes(fsid: &str) -> Result<[u8; 16], MonError> {
    let hex: Vec<u8> = fsid.bytes().filter(|b| *b != b'-').collect();
    let bad = || err(ErrorCode::InvalidArgument, format!("bad fsid {fsid:?}"));
    if hex.len() != 32 {
        return Err(bad());
    }
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).map_err(|_| bad())?;
        out[i] = u8::from_str_radix(s, 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// Whether applying a request changed the state.
enum Applied {
    Changed(serde_json::Value),
    Unchanged(serde_json::Value),
}

/// The Raft node id of monitor `name`: a 64-bit FNV-1a hash of the name, so
/// any process can compute it without coordination.
pub fn node_id(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Everything the monitors agree on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonState {
    /// The cluster id; empty until bootstrap.
    pub fsid: String,
    /// Monitor-map epoch: bumped by every membership change.
    pub monmap_epoch: u64,
    /// Monitors by name.
    pub mons: BTreeMap<String, MonInfo>,
    /// Entities by name (`client.admin`).
    pub auth: BTreeMap<String, AuthEntry>,
    /// Central configuration: section → option → value.
    pub config: BTreeMap<String, BTreeMap<String, String>>,
    /// The OSD map, its history and the cluster flags.
    #[serde(default)]
    pub osdmap: OsdMapState,
    /// Service secrets by id (ids increase; the newest seals new tickets).
    #[serde(default)]
    pub service_secrets: BTreeMap<u64, ServiceSecret>,
    /// The newest report of each PG, by PG id (`1.6`).
    #[serde(default)]
    pub pg_stats: BTreeMap<String, PgStatEntry>,
    /// Each OSD's store space, as it last reported it.
    #[serde(default)]
    pub osd_statfs: BTreeMap<i32, OsdStatfs>,
    /// Health checks recorded, mutes and history.
    #[serde(default)]
    pub health: crate::health::HealthState,
    /// Daemons' crashes by id (ids begin with their time, so oldest first).
    #[serde(default)]
    pub crashes: BTreeMap<String, shoal_monclient::CrashReport>,
    /// The manager map.
    #[serde(default)]
    pub mgrmap: crate::mgrmap::MgrMap,
    /// The file systems and their metadata servers.
    #[serde(default)]
    pub fsmap: crate::fsmap::FsMap,
    /// Changes applied so far: every request that changed the state counts
    /// once, so it also proves no change was applied twice.
    pub version: u64,
}

fn err(code: ErrorCode, message: impl Into<String>) -> MonError {
    MonError::new(code, message)
}

fn entity(name: &str) -> Result<EntityName, MonError> {
    name.parse()
        .map_err(|e| err(ErrorCode::InvalidArgument, format!("{e}")))
}

/// Refuses capabilities the services would not understand.
fn check_caps(caps: &BTreeMap<String, String>) -> Result<(), MonError> {
    for (service, cap) in caps {
        match service.as_str() {
            "osd" => {
                shoal_monclient::OsdCaps::parse(cap)?;
            }
            "mon" | "mds" | "mgr" => {}
            other => {
                return Err(err(
                    ErrorCode::InvalidArgument,
                    format!("unknown service {other:?} in capabilities (mon, osd, mds, mgr)"),
                ));
            }
        }
    }
    Ok(())
}

/// Checks `who` is `global`, an entity type or an entity name.
fn check_section(who: &str) -> Result<(), MonError> {
    if who == "global" || who.parse::<shoal_types::EntityType>().is_ok() {
        return Ok(());
    }
    entity(who).map(|_| ())
}

impl MonState {
    /// Applies one committed request. Refused requests change nothing.
    pub fn apply(&mut self, req: &MonRequest) -> MonResponse {
        match self.try_apply(req) {
            Ok(Applied::Changed(out)) => {
                self.version += 1;
                MonResponse::Ok(out)
            }
            Ok(Applied::Unchanged(out)) => MonResponse::Ok(out),
            Err(e) => MonResponse::Err {
                code: e.code,
                message: e.message,
            },
        }
    }

    fn try_apply(&mut self, req: &MonRequest) -> Result<Applied, MonError> {
        use serde_json::json;
        if self.fsid.is_empty() && !matches!(req, MonRequest::Bootstrap { .. }) {
            return Err(err(ErrorCode::Again, "cluster not bootstrapped yet"));
        }
        match req {
            MonRequest::Bootstrap {
                fsid,
                failure_domain,
                history,
                full_interval,
                mons,
                auth,
            } => {
                if !self.fsid.is_empty() {
                    return Err(err(ErrorCode::Exists, "cluster already bootstrapped"));
                }
                let crush = crate::osdmap::initial_crush(failure_domain)?;
                let mut osdmap = OsdMapState::default();
                osdmap.bootstrap(fsid_bytes(fsid)?, crush, *history, *full_interval)?;
                self.osdmap = osdmap;
                self.fsid = fsid.clone();
                self.mons = mons.clone();
                self.auth = auth.clone();
                self.monmap_epoch = 1;
                Ok(Applied::Changed(json!({ "fsid": fsid })))
            }
            MonRequest::AuthAdd {
                entity: name,
                key,
                caps,
                if_missing,
            } => {
                entity(name)?;
                check_caps(caps)?;
                if let Some(existing) = self.auth.get(name) {
                    if *if_missing {
                        return Ok(Applied::Unchanged(json!({ name.clone(): existing })));
                    }
                    return Err(err(ErrorCode::Exists, format!("entity {name} exists")));
                }
                let entry = AuthEntry {
                    key: key.clone(),
                    caps: caps.clone(),
                };
                let out = json!({ name.clone(): &entry });
                self.auth.insert(name.clone(), entry);
                Ok(Applied::Changed(out))
            }
            MonRequest::AuthRm { entity: name } => {
                self.auth
                    .remove(name)
                    .ok_or_else(|| err(ErrorCode::NotFound, format!("no entity {name}")))?;
                Ok(Applied::Changed(json!({ "removed": name })))
            }
            MonRequest::AuthCaps { entity: name, caps } => {
                check_caps(caps)?;
                let e = self
                    .auth
                    .get_mut(name)
                    .ok_or_else(|| err(ErrorCode::NotFound, format!("no entity {name}")))?;
                e.caps = caps.clone();
                Ok(Applied::Changed(json!({ name.clone(): e })))
            }
            MonRequest::ConfigSet { who, key, value } => {
                check_section(who)?;
                // A daemon or client needs its connection mode before it
                // can reach a monitor: a central value would never apply.
                if matches!(
                    key.as_str(),
                    "ms_mode" | "ms_cluster_mode" | "ms_service_mode" | "ms_client_mode"
                ) {
                    return Err(err(
                        ErrorCode::InvalidArgument,
                        format!(
                            "{key} cannot be set centrally: every daemon and client needs it \
                             before it reaches a monitor; set it in the configuration file"
                        ),
                    ));
                }
                // Validate exactly as a config file or --set would.
                let arg = format!("{key}={value}");
                shoal_config::Config::parse(
                    "",
                    shoal_config::ConfigSource::Defaults,
                    &"client.check"
                        .parse()
                        .map_err(|_| err(ErrorCode::Internal, "name"))?,
                    &[arg],
                )
                .map_err(|e| err(ErrorCode::InvalidArgument, e.to_string()))?;
                self.config
                    .entry(who.clone())
                    .or_default()
                    .insert(key.clone(), value.clone());
                Ok(Applied::Changed(
                    json!({ "who": who, "key": key, "value": value }),
                ))
            }
            MonRequest::ConfigRm { who, key } => {
                let section = self.config.get_mut(who);
                let removed = section.and_then(|s| s.remove(key));
                if removed.is_none() {
                    return Err(err(
                        ErrorCode::NotFound,
                        format!("{key} is not set for {who}"),
                    ));
                }
                self.config.retain(|_, s| !s.is_empty());
                Ok(Applied::Changed(json!({ "who": who, "removed": key })))
            }
            MonRequest::MonAdd { name, addr } => {
                if self.mons.contains_key(name) {
                    return Err(err(ErrorCode::Exists, format!("mon.{name} exists")));
                }
                let info = MonInfo {
                    id: node_id(name),
                    addr: addr.clone(),
                };
                self.mons.insert(name.clone(), info);
                self.monmap_epoch += 1;
                Ok(Applied::Changed(json!({ "epoch": self.monmap_epoch })))
            }
            MonRequest::MonRm { name } => {
                self.mons
                    .remove(name)
                    .ok_or_else(|| err(ErrorCode::NotFound, format!("no mon.{name}")))?;
                self.monmap_epoch += 1;
                Ok(Applied::Changed(json!({ "epoch": self.monmap_epoch })))
            }
            MonRequest::Osd(change) => {
                if let OsdChange::PoolRm { name } = change
                    && let Some((fs, _)) = self
                        .fsmap
                        .filesystems
                        .iter()
                        .find(|(_, f)| &f.metadata_pool == name || &f.data_pool == name)
                {
                    return Err(err(
                        ErrorCode::Busy,
                        format!("pool {name} is in use by file system {fs}"),
                    ));
                }
                let out = self.osdmap.apply(change)?;
                let map = self.osdmap.current()?;
                crate::pgstats::prune(&mut self.pg_stats, &mut self.osd_statfs, map);
                Ok(Applied::Changed(out))
            }
            MonRequest::PgStats(report) => {
                let map = self.osdmap.current()?;
                let out =
                    crate::pgstats::record(&mut self.pg_stats, &mut self.osd_statfs, map, report)?;
                Ok(Applied::Changed(out))
            }
            MonRequest::RotateServiceSecret {
                key,
                created_ms,
                keep,
            } => {
                let id = self.service_secrets.keys().next_back().map_or(1, |l| l + 1);
                let secret = ServiceSecret {
                    key: key.clone(),
                    created_ms: *created_ms,
                };
                self.service_secrets.insert(id, secret);
                while self.service_secrets.len() > (*keep).max(1) as usize {
                    self.service_secrets.pop_first();
                }
                Ok(Applied::Changed(json!({ "id": id })))
            }
            MonRequest::HealthRecord { at_ms, checks } => {
                let events = self.health.record(*at_ms, checks);
                Ok(Applied::Changed(json!({ "events": events })))
            }
            MonRequest::HealthMute {
                code,
                until_ms,
                sticky,
            } => {
                if code.is_empty()
                    || !code
                        .bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
                {
                    return Err(err(
                        ErrorCode::InvalidArgument,
                        format!("bad health check code {code:?}: expected e.g. OSD_DOWN"),
                    ));
                }
                let mute = crate::health::Mute {
                    until_ms: *until_ms,
                    sticky: *sticky,
                };
                self.health.mutes.insert(code.clone(), mute);
                Ok(Applied::Changed(
                    json!({ "muted": code, "until_ms": until_ms }),
                ))
            }
            MonRequest::HealthUnmute { code } => {
                if self.health.mutes.remove(code).is_none() {
                    return Err(err(
                        ErrorCode::NotFound,
                        format!("health check {code} is not muted"),
                    ));
                }
                Ok(Applied::Changed(json!({ "unmuted": code })))
            }
            MonRequest::FsNew {
                name,
                metadata_pool,
                data_pool,
                now_ms,
            } => {
                let map = self.osdmap.current()?;
                for p in [metadata_pool, data_pool] {
                    if map.pool_by_name(p).is_none() {
                        return Err(err(ErrorCode::NotFound, format!("no pool {p}")));
                    }
                }
                if metadata_pool == data_pool {
                    return Err(err(
                        ErrorCode::InvalidArgument,
                        "the metadata and data pools must differ",
                    ));
                }
                if self.fsmap.filesystems.contains_key(name) {
                    return Err(err(ErrorCode::Exists, format!("file system {name} exists")));
                }
                if let Some((fs, _)) = self.fsmap.filesystems.iter().find(|(_, f)| {
                    [&f.metadata_pool, &f.data_pool]
                        .iter()
                        .any(|p| *p == metadata_pool || *p == data_pool)
                }) {
                    return Err(err(
                        ErrorCode::Busy,
                        format!("a pool is already in use by file system {fs}"),
                    ));
                }
                if name.is_empty()
                    || name.len() > 64
                    || !name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                {
                    return Err(err(
                        ErrorCode::InvalidArgument,
                        format!("bad file system name {name:?}: 1-64 of [A-Za-z0-9_-]"),
                    ));
                }
                let m = &mut self.fsmap;
                m.epoch += 1;
                m.next_id = m.next_id.max(1);
                let info = crate::fsmap::FsInfo {
                    id: m.next_id,
                    metadata_pool: metadata_pool.clone(),
                    data_pool: data_pool.clone(),
                    created_ms: *now_ms,
                    active: None,
                };
                m.next_id += 1;
                let out = serde_json::to_value(info.reply(name))
                    .map_err(|e| err(ErrorCode::Internal, e.to_string()))?;
                m.filesystems.insert(name.clone(), info);
                Ok(Applied::Changed(out))
            }
            MonRequest::FsRm { name } => {
                if self.fsmap.filesystems.remove(name).is_none() {
                    return Err(err(ErrorCode::NotFound, format!("no file system {name}")));
                }
                self.fsmap.epoch += 1;
                Ok(Applied::Changed(json!({ "removed": name })))
            }
            MonRequest::FsMap(m) => {
                if m.epoch != self.fsmap.epoch + 1 {
                    return Err(err(
                        ErrorCode::Again,
                        format!(
                            "file-system map epoch {} does not follow {}",
                            m.epoch, self.fsmap.epoch
                        ),
                    ));
                }
                // Only assignments change here: file systems come and go
                // through FsNew and FsRm.
                if m.filesystems.keys().ne(self.fsmap.filesystems.keys()) {
                    return Err(err(ErrorCode::Again, "the file systems changed meanwhile"));
                }
                self.fsmap = m.clone();
                Ok(Applied::Changed(self.fsmap.to_json()))
            }
            MonRequest::MgrMap(m) => {
                if m.epoch != self.mgrmap.epoch + 1 {
                    return Err(err(
                        ErrorCode::Again,
                        format!(
                            "manager map epoch {} does not follow {}",
                            m.epoch, self.mgrmap.epoch
                        ),
                    ));
                }
                self.mgrmap = m.clone();
                Ok(Applied::Changed(self.mgrmap.to_json()))
            }
            MonRequest::CrashPost(report) => {
                if report.crash_id.is_empty() || report.crash_id.len() > 128 {
                    return Err(err(ErrorCode::InvalidArgument, "bad crash id"));
                }
                if self.crashes.contains_key(&report.crash_id) {
                    return Ok(Applied::Unchanged(json!({ "crash_id": report.crash_id })));
                }
                let mut r = report.clone();
                r.archived = false;
                r.backtrace.truncate(64);
                self.crashes.insert(r.crash_id.clone(), r);
                while self.crashes.len() > CRASHES_MAX {
                    self.crashes.pop_first();
                }
                Ok(Applied::Changed(json!({ "crash_id": report.crash_id })))
            }
            MonRequest::CrashArchive { id } => {
                let mut n = 0;
                for (k, c) in &mut self.crashes {
                    if id.as_ref().is_none_or(|i| i == k) && !c.archived {
                        c.archived = true;
                        n += 1;
                    }
                }
                if let Some(i) = id
                    && !self.crashes.contains_key(i)
                {
                    return Err(err(ErrorCode::NotFound, format!("no crash {i}")));
                }
                Ok(Applied::Changed(json!({ "archived": n })))
            }
            MonRequest::CrashRm { id } => match self.crashes.remove(id) {
                Some(_) => Ok(Applied::Changed(json!({ "removed": id }))),
                None => Err(err(ErrorCode::NotFound, format!("no crash {id}"))),
            },
        }
    }

    /// The central configuration that applies to `who`, as `--set`
    /// arguments, lowest precedence first (global, type, entity).
    pub fn config_for(&self, who: &EntityName) -> Vec<String> {
        let sections = ["global".to_string(), who.ty().to_string(), who.to_string()];
        sections
            .iter()
            .filter_map(|s| self.config.get(s))
            .flat_map(|kv| kv.iter().map(|(k, v)| format!("{k}={v}")))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn booted() -> MonState {
        crate::fuzzing::bootstrapped(500, 100)
    }

    fn code(r: MonResponse) -> Option<ErrorCode> {
        match r {
            MonResponse::Ok(_) => None,
            MonResponse::Err { code, .. } => Some(code),
        }
    }

    #[test]
    fn nothing_before_bootstrap_and_bootstrap_once() {
        let mut s = MonState::default();
        let r = s.apply(&MonRequest::AuthRm {
            entity: "client.x".into(),
        });
        assert_eq!(code(r), Some(ErrorCode::Again));
        let mut s = booted();
        let again = MonRequest::Bootstrap {
            fsid: "00112233-4455-6677-8899-aabbccddeeff".into(),
            failure_domain: "host".into(),
            history: 500,
            full_interval: 100,
            mons: BTreeMap::new(),
            auth: BTreeMap::new(),
        };
        assert_eq!(code(s.apply(&again)), Some(ErrorCode::Exists));
        assert_eq!(s.fsid, "00112233-4455-6677-8899-aabbccddeeff");
        assert_eq!(s.osdmap.epoch(), 1);
        assert_eq!(s.osdmap.current().unwrap().fsid[15], 0xff);
        assert!(fsid_bytes("nope").is_err());
    }

    #[test]
    fn auth_add_get_or_create_caps_rm() {
        let mut s = booted();
        let add = |if_missing, key: &str| MonRequest::AuthAdd {
            entity: "client.x".into(),
            key: key.into(),
            caps: BTreeMap::from([("mon".to_string(), "allow r".to_string())]),
            if_missing,
        };
        assert_eq!(code(s.apply(&add(false, "k1"))), None);
        assert_eq!(code(s.apply(&add(false, "k2"))), Some(ErrorCode::Exists));
        // get-or-create returns the existing key, not the new one.
        assert_eq!(code(s.apply(&add(true, "k3"))), None);
        assert_eq!(s.auth["client.x"].key, "k1");
        let caps = MonRequest::AuthCaps {
            entity: "client.x".into(),
            caps: BTreeMap::from([("osd".to_string(), "allow rw".to_string())]),
        };
        assert_eq!(code(s.apply(&caps)), None);
        assert_eq!(s.auth["client.x"].caps["osd"], "allow rw");
        let rm = MonRequest::AuthRm {
            entity: "client.x".into(),
        };
        assert_eq!(code(s.apply(&rm)), None);
        assert_eq!(code(s.apply(&rm)), Some(ErrorCode::NotFound));
        let bad = MonRequest::AuthAdd {
            entity: "nobody".into(),
            key: "k".into(),
            caps: BTreeMap::new(),
            if_missing: false,
        };
        assert_eq!(code(s.apply(&bad)), Some(ErrorCode::InvalidArgument));
        let bad_caps = MonRequest::AuthCaps {
            entity: "client.admin".into(),
            caps: BTreeMap::from([("osd".to_string(), "allow everything".to_string())]),
        };
        assert_eq!(code(s.apply(&bad_caps)), Some(ErrorCode::InvalidArgument));
        let bad_service = MonRequest::AuthAdd {
            entity: "client.y".into(),
            key: "k".into(),
            caps: BTreeMap::from([("disk".to_string(), "allow r".to_string())]),
            if_missing: false,
        };
        assert_eq!(
            code(s.apply(&bad_service)),
            Some(ErrorCode::InvalidArgument)
        );
    }

    #[test]
    fn central_config_is_validated_and_layered() {
        let mut s = booted();
        let set = |who: &str, key: &str, value: &str| MonRequest::ConfigSet {
            who: who.into(),
            key: key.into(),
            value: value.into(),
        };
        assert_eq!(
            code(s.apply(&set("global", "ms_request_timeout_ms", "100"))),
            None
        );
        assert_eq!(code(s.apply(&set("osd.3", "log_level", "debug"))), None);
        assert_eq!(
            code(s.apply(&set("osd", "ms_reconnect_attempts", "3"))),
            None
        );
        assert_eq!(
            code(s.apply(&set("osd.3", "no_such_key", "1"))),
            Some(ErrorCode::InvalidArgument)
        );
        assert_eq!(
            code(s.apply(&set("osd.3", "ms_request_timeout_ms", "soon"))),
            Some(ErrorCode::InvalidArgument)
        );
        assert_eq!(
            code(s.apply(&set("disk.1", "log_level", "x"))),
            Some(ErrorCode::InvalidArgument)
        );
        assert_eq!(
            code(s.apply(&set("global", "ms_mode", "secure"))),
            Some(ErrorCode::InvalidArgument)
        );
        assert_eq!(
            s.config_for(&EntityName::osd(3)),
            vec![
                "ms_request_timeout_ms=100".to_string(),
                "ms_reconnect_attempts=3".to_string(),
                "log_level=debug".to_string()
            ]
        );
        assert_eq!(s.config_for(&EntityName::osd(4)).len(), 2);
        let rm = MonRequest::ConfigRm {
            who: "osd.3".into(),
            key: "log_level".into(),
        };
        assert_eq!(code(s.apply(&rm)), None);
        assert_eq!(code(s.apply(&rm)), Some(ErrorCode::NotFound));
        assert!(!s.config.contains_key("osd.3"));
    }

    #[test]
    fn service_secrets_rotate_and_keep_the_newest() {
        let mut s = booted();
        for i in 0..5u64 {
            let r = s.apply(&MonRequest::RotateServiceSecret {
                key: format!("k{i}"),
                created_ms: i,
                keep: 3,
            });
            assert_eq!(code(r), None);
        }
        let ids: Vec<u64> = s.service_secrets.keys().copied().collect();
        assert_eq!(ids, vec![3, 4, 5]);
        assert_eq!(s.service_secrets[&5].key, "k4");
    }

    #[test]
    fn pg_stats_make_no_epoch_and_old_snapshots_load() {
        let mut s = booted();
        let create = MonRequest::Osd(OsdChange::PoolCreate {
            name: "rbd".into(),
            pg_num: 4,
            spec: crate::osdmap::PoolSpec::Replicated {
                size: 1,
                min_size: 1,
            },
            autoscale_mode: None,
            set: Vec::new(),
        });
        assert_eq!(code(s.apply(&create)), None);
        assert_eq!(code(s.apply(&MonRequest::Osd(OsdChange::OsdCreate))), None);
        let (epoch, version) = (s.osdmap.epoch(), s.version);
        let report = MonRequest::PgStats(PgStats {
            id: 0,
            epoch,
            statfs: OsdStatfs {
                total_bytes: 10,
                used_bytes: 1,
                available_bytes: 9,
            },
            pgs: vec![crate::pgstats::PgStatReport {
                pgid: "1.3".into(),
                state: "active+clean".into(),
                ..Default::default()
            }],
        });
        assert_eq!(code(s.apply(&report)), None);
        assert_eq!(s.osdmap.epoch(), epoch, "a report made an epoch");
        assert_eq!(s.version, version + 1);
        assert_eq!(s.pg_stats["1.3"].reporter, 0);
        assert_eq!(s.osd_statfs[&0].available_bytes, 9);
        // The state round-trips, and a snapshot from before PG stats loads.
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(serde_json::from_value::<MonState>(json.clone()).unwrap(), s);
        let mut old = json;
        let o = old.as_object_mut().unwrap();
        o.remove("pg_stats");
        o.remove("osd_statfs");
        let old: MonState = serde_json::from_value(old).unwrap();
        assert!(old.pg_stats.is_empty() && old.osd_statfs.is_empty());
        // Deleting the pool drops its PGs' stats.
        let rm = MonRequest::Osd(OsdChange::PoolRm { name: "rbd".into() });
        assert_eq!(code(s.apply(&rm)), None);
        assert!(s.pg_stats.is_empty());
        assert_eq!(s.osd_statfs.len(), 1);
    }

    #[test]
    fn monmap_changes_bump_the_epoch() {
        let mut s = booted();
        let add = MonRequest::MonAdd {
            name: "b".into(),
            addr: "127.0.0.1:6790".into(),
        };
        assert_eq!(code(s.apply(&add)), None);
        assert_eq!(code(s.apply(&add)), Some(ErrorCode::Exists));
        assert_eq!(s.monmap_epoch, 2);
        assert_eq!(s.mons["b"].id, node_id("b"));
        assert_eq!(code(s.apply(&MonRequest::MonRm { name: "a".into() })), None);
        assert_eq!(s.monmap_epoch, 3);
        assert_ne!(node_id("a"), node_id("b"));
    }
}

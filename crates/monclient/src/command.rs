//! Commands the monitors answer (`shoal status`, `shoal auth ls`, ...), as
//! one serde type shared by the CLI and the monitor, plus the `mon_host`
//! syntax and the capability check.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::error::{ErrorCode, MonError};
use crate::stats::{OsdStatfs, PgStatReport};

/// A monitor command. Travels as JSON inside a `MonCommand` message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "prefix", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Command {
    /// Cluster status: fsid, health, monitors and quorum.
    Status,
    /// The monitor map and quorum.
    MonStat,
    /// A client hunting for a monitor asks: are you in a quorum (do you
    /// know a leader, and know me)? Answered by the monitor itself, at once
    /// when it is, else as soon as it is or after `wait_ms`:
    /// `{"mon": NAME, "in_quorum": BOOL}`. Needs no capability.
    MonHunt {
        /// How long a monitor without a quorum may hold the answer.
        wait_ms: u64,
    },
    /// Health: the status and every check that is not OK (muted ones apart).
    Health,
    /// Mutes a health check for `ttl_secs` (none: until unmuted or, unless
    /// `sticky`, until the check clears).
    HealthMute {
        /// The check's code (`OSD_DOWN`).
        code: String,
        /// How long the mute lasts.
        ttl_secs: Option<u64>,
        /// Kept when the check clears.
        sticky: bool,
    },
    /// Ends a mute.
    HealthUnmute {
        /// The check's code.
        code: String,
    },
    /// Health checks raised and cleared, oldest first, with timestamps.
    HealthHistory,
    /// Records a daemon's crash (posted by the daemon after it restarts).
    CrashPost {
        /// The report.
        report: crate::CrashReport,
    },
    /// Every recorded crash, oldest first.
    CrashLs,
    /// One crash, whole.
    CrashInfo {
        /// Its id.
        id: String,
    },
    /// Marks crashes seen (all of them without an id): no longer a
    /// health warning.
    CrashArchive {
        /// The crash, or none for all.
        id: Option<String>,
    },
    /// Forgets a crash.
    CrashRm {
        /// Its id.
        id: String,
    },
    /// Adds a monitor to the quorum.
    MonAdd {
        /// Its name (`d` for `mon.d`).
        name: String,
        /// Its address.
        addr: String,
    },
    /// Removes a monitor from the quorum.
    MonRm {
        /// Its name.
        name: String,
    },
    /// Every entity with its capabilities (and keys).
    AuthLs,
    /// One entity.
    AuthGet {
        /// The entity.
        entity: String,
    },
    /// Creates an entity with a new key; fails if it exists.
    AuthAdd {
        /// The entity.
        entity: String,
        /// Capabilities by service.
        caps: BTreeMap<String, String>,
    },
    /// Returns an entity's key, creating the entity if needed.
    AuthGetOrCreate {
        /// The entity.
        entity: String,
        /// Capabilities by service (used only on creation).
        caps: BTreeMap<String, String>,
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
        /// Capabilities by service.
        caps: BTreeMap<String, String>,
    },
    /// Sets a central configuration option.
    ConfigSet {
        /// `global`, a type (`osd`) or an entity (`osd.3`).
        who: String,
        /// The option.
        key: String,
        /// The value.
        value: String,
    },
    /// The central options that apply to `who`.
    ConfigGet {
        /// An entity (`osd.3`) or section.
        who: String,
    },
    /// Removes a central configuration option.
    ConfigRm {
        /// The section.
        who: String,
        /// The option.
        key: String,
    },
    /// Every central configuration section.
    ConfigDump,
    /// A ticket for the caller to present to a service's daemons (`osd`),
    /// with its session key wrapped with the caller's key.
    AuthGetTicket {
        /// The service: `osd`.
        service: String,
    },
    /// The OSD hierarchy (CRUSH) with each OSD's state.
    OsdTree,
    /// The whole OSD map: epoch, flags, pools, OSDs.
    OsdDump,
    /// OSD counts: how many exist, are up and are in.
    OsdStat,
    /// Allocates a new OSD id.
    OsdCreate,
    /// Marks OSDs out.
    OsdOut {
        /// OSD ids.
        ids: Vec<i32>,
    },
    /// Marks OSDs in.
    OsdIn {
        /// OSD ids.
        ids: Vec<i32>,
    },
    /// Marks OSDs down.
    OsdDown {
        /// OSD ids.
        ids: Vec<i32>,
    },
    /// Removes OSDs.
    OsdRm {
        /// OSD ids.
        ids: Vec<i32>,
    },
    /// Sets (or, with `on` false, clears) a cluster flag such as `noout`.
    OsdFlag {
        /// The flag.
        flag: String,
        /// Set or clear.
        on: bool,
    },
    /// An OSD announces it is running at `addr` under `host`.
    OsdBoot {
        /// Its id (the caller must be `osd.ID`).
        id: i32,
        /// Where it listens.
        addr: String,
        /// Its host bucket in CRUSH.
        host: String,
        /// Its CRUSH weight if new to CRUSH, 16.16.
        weight: u32,
        /// Drawn when the process started (Ceph's address nonce): a boot
        /// with another nonce while the map says the OSD is up is a
        /// restart, which the monitors mark down before up. 0: unknown.
        #[serde(default)]
        nonce: u64,
    },
    /// An OSD says it is alive.
    OsdBeacon {
        /// Its id (the caller must be `osd.ID`).
        id: i32,
    },
    /// An OSD peers in an interval that started at `up_thru`: record that
    /// it was up through that epoch (Ceph's MOSDAlive).
    OsdAlive {
        /// Its id (the caller must be `osd.ID`).
        id: i32,
        /// The interval's first epoch.
        up_thru: u32,
    },
    /// A PG's primary asks for a `pg_temp` (the acting set that serves
    /// the PG while its up set is backfilled), or with no OSDs, its removal.
    OsdPgTemp {
        /// The primary (the caller must be `osd.ID`).
        id: i32,
        /// The PG (`1.6`).
        pgid: String,
        /// The acting set wanted.
        osds: Vec<i32>,
    },
    /// The intervals of a PG since an epoch, for peering.
    PgPastIntervals {
        /// The PG (`1.6`).
        pgid: String,
        /// The first epoch of interest.
        since: u32,
    },
    /// An OSD reports a peer it cannot reach.
    OsdFailure {
        /// The peer.
        target: i32,
        /// The reporter (the caller must be `osd.REPORTER`).
        reporter: i32,
        /// The peer refused the connection: its process is gone.
        immediate: bool,
    },
    /// Adds a CRUSH bucket.
    OsdCrushAddBucket {
        /// Name.
        name: String,
        /// Type.
        type_name: String,
    },
    /// Moves a CRUSH bucket under another.
    OsdCrushMove {
        /// Bucket.
        name: String,
        /// New parent.
        parent: String,
    },
    /// Removes a CRUSH item.
    OsdCrushRm {
        /// Item.
        name: String,
    },
    /// Sets a PG's `pg_upmap_items`: each (from, to) pair puts OSD `to`
    /// where CRUSH put `from` (Ceph's `osd pg-upmap-items`).
    OsdPgUpmapItems {
        /// The PG (`1.6`).
        pgid: String,
        /// (from, to) pairs.
        pairs: Vec<(i32, i32)>,
    },
    /// Removes a PG's `pg_upmap_items` (`osd rm-pg-upmap-items`).
    OsdRmPgUpmapItems {
        /// The PG (`1.6`).
        pgid: String,
    },
    /// The balancer: whether it is on, its settings, the `pg_upmap_items`
    /// in the map, and each up and in OSD's PG copies beside its share.
    BalancerStatus,
    /// The autoscaler's view: each pool's share of the raw space, the PG
    /// count it calls for and its `pg_autoscale_mode`.
    PoolAutoscaleStatus,
    /// Sets a CRUSH weight (16.16).
    OsdCrushReweight {
        /// Item.
        name: String,
        /// Weight, 16.16.
        weight: u32,
    },
    /// Creates a pool.
    PoolCreate {
        /// Name.
        name: String,
        /// PGs.
        pg_num: u32,
        /// Redundancy.
        spec: PoolSpec,
        /// Properties the pool starts with, as `PoolSet` takes them: the
        /// autoscaler's (`pg_autoscale_mode`, `bulk`, `pg_num_min`,
        /// `pg_num_max`, `target_size_bytes`, `target_size_ratio`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        set: Vec<(String, String)>,
    },
    /// Every pool.
    PoolLs,
    /// Deletes a pool; `sure` must be set (`--yes-i-really-mean-it`).
    PoolRm {
        /// Name.
        name: String,
        /// The confirmation.
        sure: bool,
    },
    /// Renames a pool.
    PoolRename {
        /// Current name.
        from: String,
        /// New name.
        to: String,
    },
    /// Sets a pool property.
    PoolSet {
        /// Pool.
        name: String,
        /// Property.
        key: String,
        /// Value.
        value: String,
    },
    /// Hands out the pool's next self-managed snapshot id (`{"snapid": N}`).
    PoolSelfmanagedSnapCreate {
        /// Pool.
        pool: String,
    },
    /// Removes self-managed snapshot `snapid` of the pool: the OSDs trim
    /// its clones.
    PoolSelfmanagedSnapRemove {
        /// Pool.
        pool: String,
        /// The snapshot.
        snapid: u64,
    },
    /// A pool's properties.
    PoolGet {
        /// Pool.
        name: String,
    },
    /// Creates (or, with `force`, replaces) an erasure-code profile.
    ErasureCodeProfileSet {
        /// Profile name.
        name: String,
        /// Its settings (`k`, `m`, `crush-failure-domain`, ...).
        params: BTreeMap<String, String>,
        /// Replace a profile of that name with other settings.
        force: bool,
    },
    /// One erasure-code profile's settings.
    ErasureCodeProfileGet {
        /// Profile name.
        name: String,
    },
    /// Every erasure-code profile's name.
    ErasureCodeProfileLs,
    /// Removes an erasure-code profile no pool uses.
    ErasureCodeProfileRm {
        /// Profile name.
        name: String,
    },
    /// Where an object lives: PG, up and acting sets.
    OsdMap {
        /// Pool name.
        pool: String,
        /// Object name.
        object: String,
        /// Namespace (empty for the default).
        #[serde(default)]
        namespace: String,
    },
    /// The current service secrets, for a service's daemons to check
    /// tickets with (OSDs and monitors only).
    AuthServiceSecrets {
        /// The service: `osd`.
        service: String,
    },
    /// An OSD reports the PGs it is primary of, and its store's space.
    OsdPgStats {
        /// Its id (the caller must be `osd.ID`).
        id: i32,
        /// Its OSD-map epoch: an older report never replaces a newer one.
        epoch: u32,
        /// Its store's space.
        statfs: OsdStatfs,
        /// The PGs it is primary of.
        pgs: Vec<PgStatReport>,
    },
    /// Every PG of every pool with its reported statistics (`pg dump`).
    PgDump,
    /// PG counts by state, objects and bytes (`pg stat`).
    PgStat,
    /// Space used and available, per pool and in total (`df`).
    Df,
    /// A manager says it is alive and where it serves HTTP; the answer is
    /// the manager map (whether it is the active one).
    MgrBeacon {
        /// Its name (`x` for `mgr.x`).
        name: String,
        /// Its HTTP address.
        addr: String,
    },
    /// The manager map: the active manager and the standbys.
    MgrStat,
    /// Makes the active (or a standby) manager give up its role: a
    /// standby takes over (`mgr fail`).
    MgrFail {
        /// Its name.
        name: String,
    },
    /// A daemon's performance counters, kept by the leader in memory for
    /// the manager (no change to the replicated state).
    DaemonReport {
        /// The report.
        report: crate::DaemonReport,
    },
    /// The newest report of every daemon, with its age.
    DaemonReports,
    /// Makes a file system on two existing pools (`fs new`).
    FsNew {
        /// Its name.
        name: String,
        /// The pool of inodes, directories and the journal.
        metadata_pool: String,
        /// The pool of file data.
        data_pool: String,
    },
    /// The file-system map: file systems, their active MDS, standbys.
    FsLs,
    /// Forgets a file system (its pools stay); needs `sure`.
    FsRm {
        /// Its name.
        name: String,
        /// `--yes-i-really-mean-it`.
        sure: bool,
    },
    /// A metadata server says it is alive, where it serves, and how far
    /// it got (`replay`, `active`, `standby`); the answer is the
    /// file-system map (whether it holds a rank, with which incarnation).
    MdsBeacon {
        /// Its name (`a` for `mds.a`).
        name: String,
        /// Its client address.
        addr: String,
        /// Its own state.
        state: String,
        /// Its process instance (random at start).
        #[serde(default)]
        nonce: u64,
    },
    /// Makes an MDS give up its rank: a standby takes over (`mds fail`).
    MdsFail {
        /// Its name.
        name: String,
    },
}

impl Command {
    /// The OSD a daemon command speaks for, which the caller must be.
    pub fn speaks_for_osd(&self) -> Option<i32> {
        match self {
            Command::OsdBoot { id, .. }
            | Command::OsdBeacon { id }
            | Command::OsdAlive { id, .. }
            | Command::OsdPgTemp { id, .. }
            | Command::OsdPgStats { id, .. } => Some(*id),
            Command::OsdFailure { reporter, .. } => Some(*reporter),
            _ => None,
        }
    }

    /// Whether the command changes the replicated state (needs `w`).
    pub fn is_write(&self) -> bool {
        !matches!(
            self,
            Command::Status
                | Command::MonStat
                | Command::MonHunt { .. }
                | Command::Health
                | Command::HealthHistory
                | Command::CrashLs
                | Command::CrashInfo { .. }
                | Command::AuthLs
                | Command::AuthGet { .. }
                | Command::ConfigGet { .. }
                | Command::ConfigDump
                | Command::AuthGetTicket { .. }
                | Command::AuthServiceSecrets { .. }
                | Command::OsdTree
                | Command::OsdDump
                | Command::BalancerStatus
                | Command::PoolAutoscaleStatus
                | Command::OsdStat
                | Command::PoolLs
                | Command::PoolGet { .. }
                | Command::ErasureCodeProfileGet { .. }
                | Command::ErasureCodeProfileLs
                | Command::OsdMap { .. }
                | Command::PgDump
                | Command::PgPastIntervals { .. }
                | Command::PgStat
                | Command::Df
                | Command::MgrStat
                | Command::DaemonReports
                | Command::FsLs
        )
    }
}

/// Parses `mon_host`: comma-separated `addr` or `name=addr` items.
pub fn parse_mon_host(s: &str) -> Result<Vec<(Option<String>, SocketAddr)>, MonError> {
    let bad = |item: &str| {
        MonError::new(
            ErrorCode::InvalidArgument,
            format!("bad mon_host item {item:?}: expected ip:port or name=ip:port"),
        )
    };
    s.split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .map(|item| match item.split_once('=') {
            Some((name, addr)) => {
                let addr = addr.trim().parse().map_err(|_| bad(item))?;
                Ok((Some(name.trim().to_string()), addr))
            }
            None => Ok((None, item.parse().map_err(|_| bad(item))?)),
        })
        .collect()
}

/// What a `mon` capability grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MonCaps {
    /// Read commands.
    pub read: bool,
    /// Write commands.
    pub write: bool,
}

/// Parses a `mon` capability: `allow *`, `allow r`, `allow rw`, `allow
/// rwx`, or `allow profile NAME` (profiles `osd`, `mds`, `mgr` read and
/// write the maps as their daemons need; `read-only` reads).
pub fn parse_mon_caps(cap: &str) -> MonCaps {
    let mut caps = MonCaps::default();
    for grant in cap.split(',').map(str::trim) {
        let Some(what) = grant.strip_prefix("allow").map(str::trim) else {
            continue;
        };
        match what {
            "*" | "all" => {
                return MonCaps {
                    read: true,
                    write: true,
                };
            }
            p if p.starts_with("profile") => match p.trim_start_matches("profile").trim() {
                "osd" | "mds" | "mgr" | "bootstrap-osd" => {
                    caps.read = true;
                    caps.write = true;
                }
                "read-only" => caps.read = true,
                _ => {}
            },
            perms => {
                caps.read |= perms.contains('r');
                caps.write |= perms.contains('w');
            }
        }
    }
    caps
}

/// One grant of an `osd` capability.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OsdGrant {
    read: bool,
    write: bool,
    /// Only this pool, or every pool.
    pool: Option<String>,
}

/// What an `osd` capability grants: comma-separated `allow PERMS [pool=NAME]`
/// grants, PERMS being `*`, `r`, `w`, `x` or a combination
/// (`allow r, allow rw pool=images`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OsdCaps {
    text: String,
    grants: Vec<OsdGrant>,
}

impl OsdCaps {
    /// Parses an `osd` capability, refusing anything it does not understand.
    pub fn parse(cap: &str) -> Result<OsdCaps, MonError> {
        let bad = |why: &str| {
            MonError::new(
                ErrorCode::InvalidArgument,
                format!("bad osd capability {cap:?}: {why}"),
            )
        };
        let mut grants = Vec::new();
        for grant in cap.split(',').map(str::trim).filter(|g| !g.is_empty()) {
            let mut words = grant.split_whitespace();
            if words.next() != Some("allow") {
                return Err(bad("each grant starts with 'allow'"));
            }
            let perms = words.next().ok_or_else(|| bad("missing permissions"))?;
            let (read, write) = match perms {
                "*" | "all" => (true, true),
                p if !p.is_empty() && p.chars().all(|c| matches!(c, 'r' | 'w' | 'x')) => {
                    (p.contains('r'), p.contains('w'))
                }
                _ => return Err(bad("permissions are *, r, w, x or a combination")),
            };
            let pool = match words.next() {
                None => None,
                Some(p) => Some(
                    p.strip_prefix("pool=")
                        .filter(|n| !n.is_empty())
                        .ok_or_else(|| bad("only pool=NAME may follow the permissions"))?
                        .to_string(),
                ),
            };
            if words.next().is_some() {
                return Err(bad("unexpected words after pool=NAME"));
            }
            grants.push(OsdGrant { read, write, pool });
        }
        Ok(OsdCaps {
            text: cap.to_string(),
            grants,
        })
    }

    /// Whether these caps let `who` read (or, with `write`, write) `pool`;
    /// the error says what was missing.
    pub fn check(&self, who: &str, pool: &str, write: bool) -> Result<(), MonError> {
        let ok = self.grants.iter().any(|g| {
            g.pool.as_deref().is_none_or(|p| p == pool) && if write { g.write } else { g.read }
        });
        if ok {
            return Ok(());
        }
        let verb = if write { "write" } else { "read" };
        Err(MonError::new(
            ErrorCode::PermissionDenied,
            format!(
                "{who} may not {verb} pool {pool} (osd caps: {:?})",
                self.text
            ),
        ))
    }
}

/// How a new pool keeps its data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PoolSpec {
    /// Whole copies.
    Replicated {
        /// Copies.
        size: u32,
        /// Fewest copies that take writes.
        min_size: u32,
    },
    /// Reed-Solomon chunks, as an erasure-code profile says.
    Erasure {
        /// The profile (`default` when the operator names none).
        profile: String,
        /// The CRUSH rule to use; by default one named after the pool,
        /// made from the profile if it does not exist.
        rule: Option<String>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_travel_as_tagged_json() {
        let c = Command::ConfigSet {
            who: "osd.3".into(),
            key: "log_level".into(),
            value: "debug".into(),
        };
        let j = serde_json::to_string(&c).unwrap();
        assert!(j.contains("\"prefix\":\"config-set\""), "{j}");
        assert_eq!(serde_json::from_str::<Command>(&j).unwrap(), c);
        assert!(c.is_write());
        assert!(!Command::Status.is_write());
        assert!(serde_json::from_str::<Command>("{\"prefix\":\"rm-rf\"}").is_err());
    }

    #[test]
    fn pg_stats_speak_for_their_osd_and_are_writes() {
        let c = Command::OsdPgStats {
            id: 4,
            epoch: 9,
            statfs: OsdStatfs::default(),
            pgs: vec![PgStatReport {
                pgid: "1.6".into(),
                ..PgStatReport::default()
            }],
        };
        let j = serde_json::to_string(&c).unwrap();
        assert!(j.contains("\"prefix\":\"osd-pg-stats\""), "{j}");
        assert_eq!(serde_json::from_str::<Command>(&j).unwrap(), c);
        assert_eq!(c.speaks_for_osd(), Some(4));
        assert!(c.is_write());
        for read in [Command::PgDump, Command::PgStat, Command::Df] {
            assert!(!read.is_write());
            assert_eq!(read.speaks_for_osd(), None);
        }
        let df = serde_json::to_string(&Command::Df).unwrap();
        assert_eq!(df, "{\"prefix\":\"df\"}");
    }

    #[test]
    fn mon_host_forms() {
        let v = parse_mon_host("a=127.0.0.1:6789, 127.0.0.2:6790").unwrap();
        assert_eq!(v[0].0.as_deref(), Some("a"));
        assert_eq!(v[1], (None, "127.0.0.2:6790".parse().unwrap()));
        assert!(parse_mon_host("a=nowhere").is_err());
        assert!(parse_mon_host("").unwrap().is_empty());
    }

    #[test]
    fn osd_caps() {
        let c = OsdCaps::parse("allow r, allow rw pool=images").unwrap();
        assert!(c.check("client.x", "images", true).is_ok());
        assert!(c.check("client.x", "rbd", false).is_ok());
        let e = c.check("client.x", "rbd", true).unwrap_err();
        assert_eq!(e.code, ErrorCode::PermissionDenied);
        assert!(
            e.message.contains("client.x may not write pool rbd"),
            "{}",
            e.message
        );
        assert!(
            OsdCaps::parse("allow *")
                .unwrap()
                .check("c", "any", true)
                .is_ok()
        );
        assert!(
            OsdCaps::parse("")
                .unwrap()
                .check("c", "any", false)
                .is_err()
        );
        for bad in [
            "deny *",
            "allow",
            "allow q",
            "allow rw images",
            "allow r pool=",
            "allow r pool=a b",
        ] {
            assert!(OsdCaps::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn caps() {
        assert_eq!(
            parse_mon_caps("allow *"),
            MonCaps {
                read: true,
                write: true
            }
        );
        assert_eq!(
            parse_mon_caps("allow r"),
            MonCaps {
                read: true,
                write: false
            }
        );
        assert_eq!(
            parse_mon_caps("allow rw"),
            MonCaps {
                read: true,
                write: true
            }
        );
        assert_eq!(
            parse_mon_caps("allow profile osd"),
            MonCaps {
                read: true,
                write: true
            }
        );
        assert!(!parse_mon_caps("allow profile read-only").write);
        assert_eq!(parse_mon_caps(""), MonCaps::default());
        assert_eq!(parse_mon_caps("deny *"), MonCaps::default());
    }
}

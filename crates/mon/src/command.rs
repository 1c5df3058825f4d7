//! Commands the monitors answer (`shoal status`, `shoal auth ls`, ...), as
//! one serde type shared by the CLI and the monitor, plus the `mon_host`
//! syntax and the capability check.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::error::{ErrorCode, MonError};

/// A monitor command. Travels as JSON inside a `MonCommand` message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "prefix", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Command {
    /// Cluster status: fsid, health, monitors and quorum.
    Status,
    /// The monitor map and quorum.
    MonStat,
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
}

impl Command {
    /// Whether the command changes the replicated state (needs `w`).
    pub fn is_write(&self) -> bool {
        !matches!(
            self,
            Command::Status
                | Command::MonStat
                | Command::AuthLs
                | Command::AuthGet { .. }
                | Command::ConfigGet { .. }
                | Command::ConfigDump
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
    fn mon_host_forms() {
        let v = parse_mon_host("a=127.0.0.1:6789, 127.0.0.2:6790").unwrap();
        assert_eq!(v[0].0.as_deref(), Some("a"));
        assert_eq!(v[1], (None, "127.0.0.2:6790".parse().unwrap()));
        assert!(parse_mon_host("a=nowhere").is_err());
        assert!(parse_mon_host("").unwrap().is_empty());
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

//! Keyring files, in the form Ceph's keyrings take:
//!
//! ```text
//! [client.admin]
//!     key = <base64 of 32 random bytes>
//!     caps mon = "allow *"
//! ```
//!
//! Capabilities are kept as written; the monitors interpret them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use shoal_types::EntityName;

use crate::auth::Secret;

/// Why a keyring could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyringError {
    /// The file could not be read or written.
    #[error("keyring {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A line does not parse.
    #[error("keyring {file} line {line}: {reason}")]
    Syntax {
        /// The file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
}

/// One entity's key and capabilities.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyringEntry {
    /// The secret key.
    pub key: Secret,
    /// Capabilities by service (`mon` → `allow *`).
    pub caps: BTreeMap<String, String>,
}

/// A set of entities and their keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Keyring {
    entries: BTreeMap<EntityName, KeyringEntry>,
}

impl Keyring {
    /// Reads a keyring file.
    pub fn load(path: &Path) -> Result<Keyring, KeyringError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeyringError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Keyring::parse(&text, &path.display().to_string())
    }

    /// Writes the keyring to `path`, readable by its owner only.
    pub fn save(&self, path: &Path) -> Result<(), KeyringError> {
        let io = |source| KeyringError::Io {
            path: path.to_path_buf(),
            source,
        };
        std::fs::write(path, self.to_string()).map_err(io)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
        }
        Ok(())
    }

    /// Parses keyring text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Keyring, KeyringError> {
        let err = |line: usize, reason: String| KeyringError::Syntax {
            file: file.to_string(),
            line,
            reason,
        };
        let mut entries = BTreeMap::new();
        let mut current: Option<(EntityName, Option<Secret>, BTreeMap<String, String>)> = None;
        let mut finish = |cur: Option<(EntityName, Option<Secret>, BTreeMap<String, String>)>,
                          line: usize|
         -> Result<(), KeyringError> {
            if let Some((name, key, caps)) = cur {
                let key = key.ok_or_else(|| err(line, format!("section [{name}] has no key")))?;
                entries.insert(name, KeyringEntry { key, caps });
            }
            Ok(())
        };
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(section) = line.strip_prefix('[') {
                let name = section
                    .strip_suffix(']')
                    .ok_or_else(|| err(n, "unterminated section header".into()))?;
                let name: EntityName = name.trim().parse().map_err(|e| err(n, format!("{e}")))?;
                finish(current.take(), n)?;
                current = Some((name, None, BTreeMap::new()));
                continue;
            }
            let (k, v) = line
                .split_once('=')
                .ok_or_else(|| err(n, "expected key = value".into()))?;
            let (k, v) = (k.trim(), v.trim());
            let Some((_, key, caps)) = current.as_mut() else {
                return Err(err(n, "key outside of any [entity] section".into()));
            };
            if k == "key" {
                *key = Some(Secret::from_base64(v).map_err(|e| err(n, e))?);
            } else if let Some(service) = k.strip_prefix("caps ") {
                caps.insert(service.trim().to_string(), v.trim_matches('"').to_string());
            } else {
                return Err(err(n, format!("unknown setting {k:?}")));
            }
        }
        finish(current, text.lines().count())?;
        Ok(Keyring { entries })
    }

    /// The entry for `name`.
    pub fn get(&self, name: &EntityName) -> Option<&KeyringEntry> {
        self.entries.get(name)
    }

    /// Adds or replaces an entry.
    pub fn insert(&mut self, name: EntityName, entry: KeyringEntry) {
        self.entries.insert(name, entry);
    }

    /// Adds `name` with a fresh random key, returning the key.
    pub fn add_generated(&mut self, name: EntityName) -> Secret {
        let key = Secret::generate();
        self.insert(
            name,
            KeyringEntry {
                key: key.clone(),
                caps: BTreeMap::new(),
            },
        );
        key
    }

    /// Every entity in the keyring.
    pub fn entities(&self) -> impl Iterator<Item = &EntityName> {
        self.entries.keys()
    }
}

impl std::fmt::Display for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = String::new();
        for (name, e) in &self.entries {
            let _ = writeln!(out, "[{name}]");
            let _ = writeln!(out, "\tkey = {}", B64.encode(e.key.as_bytes()));
            for (svc, cap) in &e.caps {
                let _ = writeln!(out, "\tcaps {svc} = \"{cap}\"");
            }
        }
        f.write_str(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut k = Keyring::default();
        k.add_generated("client.admin".parse().unwrap());
        let osd = k.add_generated(EntityName::osd(3));
        let mut e = k.get(&EntityName::osd(3)).unwrap().clone();
        e.caps.insert("mon".into(), "allow profile osd".into());
        k.insert(EntityName::osd(3), e);
        let text = k.to_string();
        let back = Keyring::parse(&text, "k").unwrap();
        assert_eq!(back, k);
        assert_eq!(back.get(&EntityName::osd(3)).unwrap().key, osd);
        assert_eq!(back.entities().count(), 2);
    }

    #[test]
    fn errors_name_file_and_line() {
        let cases = [
            ("key = abc\n", "line 1", "outside"),
            ("[client.a]\nkey = !!notbase64\n", "line 2", "base64"),
            ("[client.a]\n", "line 1", "no key"),
            ("[client.a\nkey=x\n", "line 1", "unterminated"),
            ("[bogus.a]\n", "line 1", "unknown entity type"),
            ("[client.a]\nkey = AAAA\n", "line 2", "32 bytes"),
            ("[client.a]\nfoo = 1\n", "line 2", "unknown setting"),
        ];
        for (text, line, what) in cases {
            let e = Keyring::parse(text, "my.keyring").unwrap_err().to_string();
            assert!(
                e.contains("my.keyring") && e.contains(line) && e.contains(what),
                "{text:?}: {e}"
            );
        }
    }

    #[test]
    fn missing_file_is_named() {
        let e = Keyring::load(Path::new("/nonexistent/k")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/k"));
    }
}

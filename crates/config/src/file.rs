//! Loading the configuration file and layering its sections for one entity.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use shoal_types::{EntityName, EntityType};
use toml::{Table, Value};

use crate::options::{Options, SetError};

/// Where the configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// No file: built-in defaults and `--set` overrides only.
    Defaults,
    /// The file at this path.
    File(PathBuf),
}

impl std::fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigSource::Defaults => f.write_str("(no file)"),
            ConfigSource::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Why the configuration could not be loaded. Every variant names the file
/// (or the command-line argument) at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("config file {file} is not valid TOML: {message}")]
    Parse {
        /// The file.
        file: String,
        /// What the TOML parser said.
        message: String,
    },
    /// A key is not a known option.
    #[error("unknown option {key:?} in section [{section}] of {file}")]
    UnknownKey {
        /// The key.
        key: String,
        /// The section it appears in.
        section: String,
        /// The file.
        file: String,
    },
    /// A value has the wrong type.
    #[error("option {key:?} in section [{section}] of {file} must be {expected}")]
    WrongType {
        /// The key.
        key: String,
        /// The section it appears in.
        section: String,
        /// The type the option needs.
        expected: &'static str,
        /// The file.
        file: String,
    },
    /// A section name is not one Shoal knows.
    #[error("bad section [{section}] in {file}: {reason}")]
    BadSection {
        /// The section.
        section: String,
        /// The file.
        file: String,
        /// Why it is rejected.
        reason: String,
    },
    /// A `--set key=value` argument is malformed, names an unknown option or
    /// has a value of the wrong type.
    #[error("bad --set {arg:?}: {reason}")]
    BadOverride {
        /// The argument as given.
        arg: String,
        /// Why it is rejected.
        reason: String,
    },
}

/// The effective configuration of one entity.
#[derive(Debug, Clone)]
pub struct Config {
    /// The value of every option.
    pub options: Options,
    /// The file it was read from.
    pub source: ConfigSource,
    entity: EntityName,
    /// For each option not at its default, where its value came from.
    origin: BTreeMap<&'static str, String>,
}

impl Config {
    /// Loads the configuration for `entity`: from `path`, else from the file
    /// named by `$SHOAL_CONF`, else defaults only; then applies `overrides`
    /// (each `key=value`).
    pub fn load(
        path: Option<&Path>,
        entity: &EntityName,
        overrides: &[String],
    ) -> Result<Config, ConfigError> {
        let env_path = std::env::var_os(crate::CONF_ENV).map(PathBuf::from);
        match path.map(Path::to_path_buf).or(env_path) {
            Some(p) => {
                let text = std::fs::read_to_string(&p).map_err(|source| ConfigError::Io {
                    path: p.clone(),
                    source,
                })?;
                Self::parse(&text, ConfigSource::File(p), entity, overrides)
            }
            None => Self::parse("", ConfigSource::Defaults, entity, overrides),
        }
    }

    /// Parses `text` as the file named by `source`, for `entity`.
    pub fn parse(
        text: &str,
        source: ConfigSource,
        entity: &EntityName,
        overrides: &[String],
    ) -> Result<Config, ConfigError> {
        let file = source.to_string();
        let table: Table = text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::Parse {
                file: file.clone(),
                message: e.message().to_string(),
            })?;
        let sections = Sections::from_table(&table, &file)?;
        let mut cfg = Config {
            options: Options::default(),
            source,
            entity: entity.clone(),
            origin: BTreeMap::new(),
        };
        // Apply every section, whether or not it concerns this entity, into
        // a scratch copy first: that checks every key of the whole file.
        for (name, keys) in &sections.all {
            let mut scratch = Options::default();
            apply_table(&mut scratch, keys, name, &file)?;
        }
        let ty = entity.ty().as_str();
        let own = entity.to_string();
        for name in ["global", ty, own.as_str()] {
            if let Some(keys) = sections.all.get(name) {
                apply_table(&mut cfg.options, keys, name, &file)?;
                for key in keys.keys() {
                    cfg.note_origin(key, format!("[{name}]"));
                }
            }
        }
        for arg in overrides {
            cfg.apply_override(arg)?;
        }
        Ok(cfg)
    }

    fn note_origin(&mut self, key: &str, from: String) {
        if let Some(info) = Options::SCHEMA.iter().find(|o| o.name == key) {
            self.origin.insert(info.name, from);
        }
    }

    fn apply_override(&mut self, arg: &str) -> Result<(), ConfigError> {
        let bad = |reason: String| ConfigError::BadOverride {
            arg: arg.to_string(),
            reason,
        };
        let (key, value) = arg
            .split_once('=')
            .ok_or_else(|| bad("expected key=value".to_string()))?;
        let key = key.trim();
        match self.options.set_str(key, value) {
            Ok(()) => {
                self.note_origin(key, "--set".to_string());
                Ok(())
            }
            Err(SetError::UnknownKey) => Err(bad(format!("unknown option {key:?}"))),
            Err(SetError::WrongType(t)) => Err(bad(format!("{key} must be {t}"))),
        }
    }

    /// The entity this configuration is for.
    pub fn entity(&self) -> &EntityName {
        &self.entity
    }

    /// The effective configuration as TOML, each line commented with where
    /// its value came from.
    pub fn show(&self) -> String {
        let mut out = format!(
            "# effective configuration of {} from {}\n",
            self.entity, self.source
        );
        for (name, value) in self.options.values() {
            let from = self
                .origin
                .get(name)
                .map(String::as_str)
                .unwrap_or("default");
            let _ = writeln!(out, "{name} = {value}  # {from}");
        }
        out
    }
}

/// The sections of a file, keyed by their name (`global`, `osd`, `osd.3`).
struct Sections<'a> {
    all: BTreeMap<String, &'a Table>,
}

impl<'a> Sections<'a> {
    fn from_table(table: &'a Table, file: &str) -> Result<Self, ConfigError> {
        let bad = |section: &str, reason: String| ConfigError::BadSection {
            section: section.to_string(),
            file: file.to_string(),
            reason,
        };
        let mut all = BTreeMap::new();
        for (name, value) in table {
            let Value::Table(inner) = value else {
                return Err(bad(
                    name,
                    format!("top-level key {name:?} must be a section such as [global]"),
                ));
            };
            if name == "global" {
                if let Some((k, _)) = inner.iter().find(|(_, v)| v.is_table()) {
                    return Err(bad(
                        &format!("global.{k}"),
                        "[global] has no sub-sections".into(),
                    ));
                }
                all.insert(name.clone(), inner);
                continue;
            }
            let ty: EntityType = name.parse().map_err(|_| {
                bad(
                    name,
                    "expected global, mon, osd, client, mgr, mds or TYPE.ID".to_string(),
                )
            })?;
            all.insert(name.clone(), inner);
            for (id, sub) in inner {
                let Value::Table(sub) = sub else { continue };
                let entity = EntityName::new(ty, id.clone())
                    .map_err(|e| bad(&format!("{name}.{id}"), e.to_string()))?;
                if let Some((k, _)) = sub.iter().find(|(_, v)| v.is_table()) {
                    return Err(bad(&format!("{entity}.{k}"), "too deeply nested".into()));
                }
                all.insert(entity.to_string(), sub);
            }
        }
        Ok(Sections { all })
    }
}

/// Applies the scalar keys of one section (sub-sections are skipped: they
/// are sections of their own).
fn apply_table(
    opts: &mut Options,
    keys: &Table,
    section: &str,
    file: &str,
) -> Result<(), ConfigError> {
    for (key, value) in keys.iter().filter(|(_, v)| !v.is_table()) {
        match opts.set_toml(key, value) {
            Ok(()) => {}
            Err(SetError::UnknownKey) => {
                return Err(ConfigError::UnknownKey {
                    key: key.clone(),
                    section: section.to_string(),
                    file: file.to_string(),
                });
            }
            Err(SetError::WrongType(expected)) => {
                return Err(ConfigError::WrongType {
                    key: key.clone(),
                    section: section.to_string(),
                    expected,
                    file: file.to_string(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
[global]
mon_host = "127.0.0.1:6789"
ms_request_timeout_ms = 1000

[osd]
ms_request_timeout_ms = 2000

[osd.3]
ms_request_timeout_ms = 3000

[client.admin]
keyring = "/etc/shoal/admin.keyring"
"#;

    fn load(entity: &str, overrides: &[&str]) -> Result<Config, ConfigError> {
        let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        Config::parse(
            SAMPLE,
            ConfigSource::File("shoal.toml".into()),
            &entity.parse().unwrap(),
            &o,
        )
    }

    #[test]
    fn layering_global_type_entity_override() {
        assert_eq!(
            load("osd.3", &[]).unwrap().options.ms_request_timeout_ms,
            3000
        );
        assert_eq!(
            load("osd.4", &[]).unwrap().options.ms_request_timeout_ms,
            2000
        );
        assert_eq!(
            load("mon.a", &[]).unwrap().options.ms_request_timeout_ms,
            1000
        );
        let c = load("osd.3", &["ms_request_timeout_ms=5"]).unwrap();
        assert_eq!(c.options.ms_request_timeout_ms, 5);
        assert_eq!(c.options.mon_host, "127.0.0.1:6789");
        let admin = load("client.admin", &[]).unwrap();
        assert_eq!(admin.options.keyring, "/etc/shoal/admin.keyring");
        assert_eq!(load("client.x", &[]).unwrap().options.keyring, "");
    }

    #[test]
    fn show_names_origins() {
        let shown = load("osd.3", &["log_level=debug"]).unwrap().show();
        assert!(
            shown.contains("ms_request_timeout_ms = 3000  # [osd.3]"),
            "{shown}"
        );
        assert!(shown.contains("log_level = \"debug\"  # --set"), "{shown}");
        assert!(
            shown.contains("ms_reconnect_attempts = 6  # default"),
            "{shown}"
        );
    }

    fn parse_err(text: &str) -> String {
        Config::parse(
            text,
            ConfigSource::File("bad.toml".into()),
            &"client.admin".parse().unwrap(),
            &[],
        )
        .unwrap_err()
        .to_string()
    }

    #[test]
    fn unknown_key_is_named_with_file_even_in_other_sections() {
        let e = parse_err("[osd.7]\nms_request_timout_ms = 1\n");
        assert!(e.contains("\"ms_request_timout_ms\""), "{e}");
        assert!(e.contains("[osd.7]") && e.contains("bad.toml"), "{e}");
    }

    #[test]
    fn wrong_type_is_named() {
        let e = parse_err("[global]\nms_request_timeout_ms = \"fast\"\n");
        assert!(
            e.contains("ms_request_timeout_ms") && e.contains("unsigned integer"),
            "{e}"
        );
        assert!(e.contains("bad.toml"), "{e}");
    }

    #[test]
    fn bad_sections_and_syntax() {
        assert!(parse_err("[disk]\nx = 1\n").contains("[disk]"));
        assert!(parse_err("log_level = 'x'\n").contains("log_level"));
        assert!(parse_err("[osd.\"a b\"]\n").contains("osd.a b"));
        assert!(parse_err("[global\n").contains("not valid TOML"));
    }

    #[test]
    fn bad_overrides() {
        assert!(
            load("osd.1", &["nokey"])
                .unwrap_err()
                .to_string()
                .contains("key=value")
        );
        assert!(
            load("osd.1", &["nope=1"])
                .unwrap_err()
                .to_string()
                .contains("unknown option")
        );
        assert!(
            load("osd.1", &["ms_reconnect_attempts=-3"])
                .unwrap_err()
                .to_string()
                .contains("must be an unsigned 32-bit integer")
        );
    }

    #[test]
    fn missing_file_is_named() {
        let e = Config::load(
            Some(Path::new("/nonexistent/shoal.toml")),
            &"osd.1".parse().unwrap(),
            &[],
        )
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/shoal.toml"));
    }
}

//! Shoal's configuration: the one TOML file every daemon and tool reads, the
//! schema of every option (name, type, default, meaning), the layering that
//! turns sections into the effective configuration of one entity, and the
//! set-up of `tracing` logging with levels per subsystem.
//!
//! Layering, lowest first: built-in defaults, `[global]`, the entity type's
//! section (`[osd]`), the entity's own section (`[osd.3]`), then `--set
//! key=value` overrides. Every key in every section is checked against the
//! schema, whichever entity reads the file, so a typo is an error the first
//! time any tool reads it. This crate depends only on `shoal-types`.

mod file;
pub mod logging;
mod options;

pub use file::{Config, ConfigError, ConfigSource};
pub use options::{MsMode, OptionInfo, Options};

/// The environment variable naming the configuration file when `--conf` is
/// not given.
pub const CONF_ENV: &str = "SHOAL_CONF";

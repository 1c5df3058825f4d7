//! Logging through `tracing`, with a level per subsystem.
//!
//! The filter is the `log_level` option: a default level and
//! `subsystem=level` pairs, for example `info,net=debug,osd=trace`. A
//! subsystem is a Shoal crate name without its `shoal_` prefix (`net`,
//! `proto`, `mon`, `osd`, `store`, ...); a full target path is accepted too.

use std::str::FromStr;

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::prelude::*;

/// A `log_level` value that could not be understood.
#[derive(Debug, thiserror::Error)]
#[error("bad log_level {spec:?}: {reason}")]
pub struct LogSpecError {
    spec: String,
    reason: String,
}

/// Parses a `log_level` value into a per-target filter.
pub fn parse_filter(spec: &str) -> Result<Targets, LogSpecError> {
    let err = |reason: String| LogSpecError {
        spec: spec.to_string(),
        reason,
    };
    // openraft reports every failed heartbeat to a down monitor at ERROR;
    // that is expected while a monitor is down, so it is silent unless asked
    // for (`log_level = "info,openraft=warn"`).
    let mut targets = Targets::new()
        .with_default(LevelFilter::INFO)
        .with_target("openraft", LevelFilter::OFF);
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('=') {
            None => {
                let level = LevelFilter::from_str(part)
                    .map_err(|_| err(format!("{part:?} is not a level")))?;
                targets = targets.with_default(level);
            }
            Some((subsystem, level)) => {
                let level = LevelFilter::from_str(level.trim())
                    .map_err(|_| err(format!("{level:?} is not a level")))?;
                targets = targets.with_target(target_of(subsystem.trim()), level);
            }
        }
    }
    Ok(targets)
}

fn target_of(subsystem: &str) -> String {
    match subsystem {
        "store" => "shoal_objectstore".to_string(),
        "openraft" => "openraft".to_string(),
        s if s.contains("::") || s.starts_with("shoal") => s.to_string(),
        s => format!("shoal_{s}"),
    }
}

/// Installs the global subscriber writing to standard error. Calling it a
/// second time does nothing.
pub fn init(spec: &str) -> Result<(), LogSpecError> {
    let filter = parse_filter(spec)?;
    use std::io::IsTerminal;
    // Colours only for people: daemons' logs usually go to files.
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(true);
    let _ = tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .try_init();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    #[test]
    fn per_subsystem_levels() {
        let f = parse_filter("warn,net=debug,store=trace").unwrap();
        assert!(f.would_enable("shoal_net::conn", &Level::DEBUG));
        assert!(!f.would_enable("shoal_net::conn", &Level::TRACE));
        assert!(f.would_enable("shoal_objectstore", &Level::TRACE));
        assert!(!f.would_enable("shoal_osd", &Level::INFO));
        assert!(f.would_enable("shoal_osd", &Level::WARN));
        assert!(!f.would_enable("openraft::core", &Level::ERROR));
        let f = parse_filter("info,openraft=warn").unwrap();
        assert!(f.would_enable("openraft::core", &Level::WARN));
    }

    #[test]
    fn bad_specs() {
        assert!(parse_filter("loud").is_err());
        assert!(parse_filter("net=verbose").is_err());
        assert!(parse_filter("").is_ok());
    }
}

//! One module per top-level subcommand. Each exposes a clap `Subcommand`
//! type and a `run` function; `main` only dispatches.

pub mod bench;
pub mod config;
pub mod crush;
pub mod keyring;

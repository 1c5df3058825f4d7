//! One module per top-level subcommand. Each exposes a clap `Args`/`Subcommand`
//! type and a `run` function; `main` only dispatches.

pub mod crush;

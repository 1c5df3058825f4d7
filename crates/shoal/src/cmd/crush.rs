//! `shoal crush`: build, test, compare, import and export CRUSH maps.

use clap::Subcommand;

/// CRUSH map tools, compatible with Ceph's crushtool.
#[derive(Debug, Subcommand)]
pub enum CrushCmd {}

/// Runs one `shoal crush` subcommand.
pub fn run(cmd: CrushCmd) -> anyhow::Result<()> {
    match cmd {}
}

//! `shoal status`: the cluster at a glance, as `ceph status` shows it.

use clap::Args;
use serde_json::Value;
use shoal_mon::Command;

use super::common::{Ctx, Format, mon_command, print};

/// Options of `shoal status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Output format.
    #[arg(long, value_enum, default_value = "plain")]
    format: Format,
}

fn plain(v: &Value) -> String {
    let quorum: Vec<&str> = v["quorum"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let total = v["monmap"]["mons"].as_array().map(Vec::len).unwrap_or(0);
    let mut out = format!(
        "  cluster:\n    id:     {}\n    health: {}\n",
        v["fsid"].as_str().unwrap_or("?"),
        v["health"]["status"].as_str().unwrap_or("?")
    );
    for check in v["health"]["checks"].as_array().into_iter().flatten() {
        out.push_str(&format!("            {}\n", check.as_str().unwrap_or("")));
    }
    out.push_str(&format!(
        "\n  services:\n    mon: {total} daemons, quorum {} (leader {})\n",
        quorum.join(","),
        v["leader"].as_str().unwrap_or("?")
    ));
    out
}

/// Runs `shoal status`.
pub fn run(a: StatusArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let v = mon_command(ctx, &Command::Status)?;
    print(a.format, &v, plain);
    Ok(())
}

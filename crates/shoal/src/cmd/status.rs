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
        out.push_str(&format!(
            "            {}\n",
            check["summary"].as_str().unwrap_or("")
        ));
    }
    out.push_str(&format!(
        "\n  services:\n    mon: {total} daemons, quorum {} (leader {})\n",
        quorum.join(","),
        v["leader"].as_str().unwrap_or("?")
    ));
    let o = &v["osdmap"];
    if !o.is_null() {
        out.push_str(&format!(
            "    osd: {} osds: {} up, {} in; epoch e{}\n\n  data:\n    pools:   {} pools, {} pgs\n",
            o["num_osds"],
            o["num_up_osds"],
            o["num_in_osds"],
            o["epoch"],
            o["num_pools"],
            o["num_pgs"]
        ));
    }
    let p = &v["pgmap"];
    if !p.is_null() {
        out.push_str(&format!(
            "    objects: {} objects, {}\n    usage:   {} used, {} / {} avail\n    pgs:     ",
            p["num_objects"],
            super::pg::human_bytes(p["num_bytes"].as_u64().unwrap_or(0)),
            super::pg::human_bytes(p["raw_bytes_used"].as_u64().unwrap_or(0)),
            super::pg::human_bytes(p["raw_bytes_avail"].as_u64().unwrap_or(0)),
            super::pg::human_bytes(p["raw_bytes"].as_u64().unwrap_or(0)),
        ));
        let states: Vec<String> = p["num_pg_by_state"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| format!("{} {}", s["num"], s["name"].as_str().unwrap_or("?")))
            .collect();
        out.push_str(&states.join("\n             "));
        out.push('\n');
        let copies = p["num_object_copies"].as_u64().unwrap_or(1).max(1);
        for what in ["degraded", "misplaced"] {
            let n = p[format!("num_objects_{what}")].as_u64().unwrap_or(0);
            if n > 0 {
                out.push_str(&format!(
                    "             {n}/{copies} objects {what} ({:.3}%)\n",
                    n as f64 * 100.0 / copies as f64
                ));
            }
        }
        let left = p["recovery_objects_left"].as_u64().unwrap_or(0);
        if left > 0 {
            let rate = p["recovery_objects_per_s"].as_u64().unwrap_or(0);
            let eta = if rate > 0 {
                format!("{} s", left.div_ceil(rate))
            } else {
                "unknown".into()
            };
            out.push_str(&format!(
                "\n  progress:\n    recovery: {left} object copies left, {rate} objects/s, eta {eta}\n"
            ));
        }
    }
    out
}

/// Options of `shoal health`.
#[derive(Debug, Args)]
pub struct HealthArgs {
    /// Show every affected item, not only the summaries.
    #[arg(value_parser = ["detail"])]
    detail: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "plain")]
    format: Format,
}

/// Runs `shoal health [detail]`.
pub fn run_health(a: HealthArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let v = mon_command(ctx, &Command::Health)?;
    let detail = a.detail.is_some();
    print(a.format, &v, |v| {
        let checks: Vec<&Value> = v["checks"].as_array().into_iter().flatten().collect();
        let summaries: Vec<&str> = checks
            .iter()
            .filter_map(|c| c["summary"].as_str())
            .collect();
        let mut out = v["status"].as_str().unwrap_or("?").to_string();
        if !summaries.is_empty() {
            out.push(' ');
            out.push_str(&summaries.join("; "));
        }
        out.push('\n');
        if detail {
            for c in checks {
                out.push_str(&format!(
                    "[{}] {}: {}\n",
                    c["severity"]
                        .as_str()
                        .unwrap_or("")
                        .trim_start_matches("HEALTH_"),
                    c["code"].as_str().unwrap_or(""),
                    c["summary"].as_str().unwrap_or("")
                ));
                for d in c["detail"].as_array().into_iter().flatten() {
                    out.push_str(&format!("    {}\n", d.as_str().unwrap_or("")));
                }
            }
        }
        out
    });
    Ok(())
}

/// Runs `shoal status`.
pub fn run(a: StatusArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let v = mon_command(ctx, &Command::Status)?;
    print(a.format, &v, plain);
    Ok(())
}

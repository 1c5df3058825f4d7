//! `shoal status`: the cluster at a glance, as `ceph status` shows it.

use clap::{Args, Subcommand};
use shoal_mon::Command;
use shoal_monclient::replies::{HealthHistoryReply, HealthReply, PgStatReply, StatusReply};

use super::common::{Ctx, Format, mon_command, mon_command_as, print, print_typed};

/// Options of `shoal status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Output format.
    #[arg(long, value_enum, default_value = "plain")]
    format: Format,
}

fn plain(v: &StatusReply) -> String {
    let mut out = format!(
        "  cluster:\n    id:     {}\n    health: {}\n",
        v.fsid, v.health.status
    );
    for check in &v.health.checks {
        out.push_str(&format!("            {}\n", check.summary));
    }
    out.push_str(&format!(
        "\n  services:\n    mon: {} daemons, quorum {} (leader {})\n",
        v.monmap.mons.len(),
        v.quorum.join(","),
        v.leader.as_deref().unwrap_or("?")
    ));
    let m = &v.mgrmap;
    if m.epoch > 0 {
        let standbys: Vec<&str> = m.standbys.iter().map(|s| s.name.as_str()).collect();
        let active = match &m.active {
            Some(a) => format!("{}(active)", a.name),
            None => "no daemons active".to_string(),
        };
        let standbys = match standbys.is_empty() {
            true => String::new(),
            false => format!(", standbys: {}", standbys.join(",")),
        };
        out.push_str(&format!("    mgr: {active}{standbys}\n"));
    }
    if let Some(o) = &v.osdmap {
        out.push_str(&format!(
            "    osd: {} osds: {} up, {} in; epoch e{}\n\n  data:\n    pools:   {} pools, {} pgs\n",
            o.num_osds, o.num_up_osds, o.num_in_osds, o.epoch, o.num_pools, o.num_pgs
        ));
    }
    if let Some(p) = &v.pgmap {
        out.push_str(&pgmap_plain(p));
    }
    out
}

/// The data and progress lines of `status`.
fn pgmap_plain(p: &PgStatReply) -> String {
    let mut out = format!(
        "    objects: {} objects, {}\n    usage:   {} used, {} / {} avail\n    pgs:     ",
        p.num_objects,
        super::pg::human_bytes(p.num_bytes),
        super::pg::human_bytes(p.raw_bytes_used),
        super::pg::human_bytes(p.raw_bytes_avail),
        super::pg::human_bytes(p.raw_bytes),
    );
    let states: Vec<String> = p
        .num_pg_by_state
        .iter()
        .map(|s| format!("{} {}", s.num, s.name))
        .collect();
    out.push_str(&states.join("\n             "));
    out.push('\n');
    let copies = p.num_object_copies.max(1);
    for (what, n) in [
        ("degraded", p.num_objects_degraded),
        ("misplaced", p.num_objects_misplaced),
    ] {
        if n > 0 {
            out.push_str(&format!(
                "             {n}/{copies} objects {what} ({:.3}%)\n",
                n as f64 * 100.0 / copies as f64
            ));
        }
    }
    let left = p.recovery_objects_left;
    if left > 0 {
        let rate = p.recovery_objects_per_s;
        let eta = if rate > 0 {
            format!("{} s", left.div_ceil(rate))
        } else {
            "unknown".into()
        };
        out.push_str(&format!(
            "\n  progress:\n    recovery: {left} object copies left, {rate} objects/s, eta {eta}\n"
        ));
    }
    out
}

/// Options of `shoal health`.
#[derive(Debug, Args)]
pub struct HealthArgs {
    #[command(subcommand)]
    cmd: Option<HealthCmd>,
    /// Output format.
    #[arg(long, value_enum, default_value = "plain", global = true)]
    format: Format,
}

/// `shoal health` subcommands.
#[derive(Debug, Subcommand)]
enum HealthCmd {
    /// Every check with each affected item, not only the summaries.
    Detail,
    /// Mutes a check: it no longer counts in the status (as `ceph health
    /// mute`). Without a TTL the mute lasts until the check clears (or,
    /// with --sticky, until unmuted).
    Mute {
        /// The check's code (`OSD_DOWN`, `PG_DEGRADED`, ...).
        code: String,
        /// How long: seconds, or with a unit (`90s`, `30m`, `4h`, `2d`, `1w`).
        ttl: Option<String>,
        /// Keep the mute when the check clears.
        #[arg(long)]
        sticky: bool,
    },
    /// Ends a mute.
    Unmute {
        /// The check's code.
        code: String,
    },
    /// Checks raised and cleared, oldest first, with when.
    History,
}

/// Seconds in a TTL as `ceph health mute` takes it.
fn parse_ttl(s: &str) -> anyhow::Result<u64> {
    let t = s.trim();
    let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("bad TTL {s:?}: expected e.g. 600, 90s, 30m, 4h, 2d or 1w"))?;
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        _ => anyhow::bail!("bad TTL {s:?}: units are s, m, h, d and w"),
    };
    n.checked_mul(scale)
        .ok_or_else(|| anyhow::anyhow!("TTL {s:?} is too long"))
}

/// Runs `shoal health [detail|mute|unmute|history]`.
pub fn run_health(a: HealthArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let detail = match a.cmd {
        None => false,
        Some(HealthCmd::Detail) => true,
        Some(HealthCmd::Mute { code, ttl, sticky }) => {
            let ttl_secs = ttl.as_deref().map(parse_ttl).transpose()?;
            let v = mon_command(
                ctx,
                &Command::HealthMute {
                    code,
                    ttl_secs,
                    sticky,
                },
            )?;
            print(a.format, &v, |_| String::new());
            return Ok(());
        }
        Some(HealthCmd::Unmute { code }) => {
            let v = mon_command(ctx, &Command::HealthUnmute { code })?;
            print(a.format, &v, |_| String::new());
            return Ok(());
        }
        Some(HealthCmd::History) => {
            let v: HealthHistoryReply = mon_command_as(ctx, &Command::HealthHistory)?;
            print_typed(a.format, &v, |v| {
                let mut out = String::new();
                for e in &v.events {
                    out.push_str(&format!(
                        "{}  {:<9} {:<16} {:<11} {}\n",
                        super::rados::format_ms(e.at_ms),
                        e.what,
                        e.code,
                        e.severity,
                        e.summary
                    ));
                }
                out
            });
            return Ok(());
        }
    };
    let v: HealthReply = mon_command_as(ctx, &Command::Health)?;
    print_typed(a.format, &v, |v| health_plain(v, detail));
    Ok(())
}

/// `health` (and with `detail`, each check's items) for people.
fn health_plain(v: &HealthReply, detail: bool) -> String {
    let summaries: Vec<&str> = v.checks.iter().map(|c| c.summary.as_str()).collect();
    let mut out = v.status.clone();
    if !summaries.is_empty() {
        out.push(' ');
        out.push_str(&summaries.join("; "));
    }
    let muted: Vec<&str> = v.muted.iter().map(|c| c.check.code.as_str()).collect();
    if !muted.is_empty() {
        out.push_str(&format!(" (muted: {})", muted.join(" ")));
    }
    out.push('\n');
    if detail {
        for c in &v.checks {
            out.push_str(&format!(
                "[{}] {}: {}\n",
                c.severity.trim_start_matches("HEALTH_"),
                c.code,
                c.summary
            ));
            for d in &c.detail {
                out.push_str(&format!("    {d}\n"));
            }
        }
    }
    out
}

/// Runs `shoal status`.
pub fn run(a: StatusArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let v: StatusReply = mon_command_as(ctx, &Command::Status)?;
    print_typed(a.format, &v, plain);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_ttl;

    #[test]
    fn ttls_parse_as_ceph_takes_them() {
        assert_eq!(parse_ttl("600").unwrap(), 600);
        assert_eq!(parse_ttl("90s").unwrap(), 90);
        assert_eq!(parse_ttl("30m").unwrap(), 1800);
        assert_eq!(parse_ttl("4h").unwrap(), 14_400);
        assert_eq!(parse_ttl("2d").unwrap(), 172_800);
        assert_eq!(parse_ttl("1w").unwrap(), 604_800);
        for bad in ["", "m", "5y", "-3", "1.5h", "99999999999999999999"] {
            assert!(parse_ttl(bad).is_err(), "{bad}");
        }
    }
}

//! `shoal balancer status|on|off|eval`: the monitors' upmap balancer (the
//! leader moves PG copies with `pg_upmap_items` until every up and in OSD
//! holds its share, `shoal_maps::balance`). On and off are the central
//! option `mon_balancer_active`; status and eval read the monitors'
//! `balancer status`.

use clap::{Args, Subcommand};
use shoal_mon::Command;
use shoal_monclient::replies::BalancerStatusReply;

use super::common::{Ctx, Format, mon_command, mon_command_as, print, print_typed};

/// Balancer commands.
#[derive(Debug, Subcommand)]
pub enum BalancerCmd {
    /// Whether it is on, its settings, the pg_upmap_items it keeps and the
    /// spread.
    Status(FormatArg),
    /// Turn it on.
    On(FormatArg),
    /// Turn it off (the pg_upmap_items made stay).
    Off(FormatArg),
    /// Each up and in OSD's PG copies beside its share, and the spread's
    /// standard deviation (lower is better).
    Eval(FormatArg),
}

/// `--format`.
#[derive(Debug, Args)]
pub struct FormatArg {
    /// Output format.
    #[arg(long, value_enum, default_value = "plain")]
    format: Format,
}

fn status_plain(v: &BalancerStatusReply) -> String {
    format!(
        "active: {}\nmode: {}\ninterval: {} ms\npg_upmap_items: {}\n\
         max deviation: {:.2} PGs (allowed {}), stddev {:.2}\n",
        v.active,
        v.mode,
        v.interval_ms,
        v.pg_upmap_items,
        v.max_deviation,
        v.max_deviation_allowed,
        v.stddev,
    )
}

fn eval_plain(v: &BalancerStatusReply) -> String {
    let mut out = format!(
        "{:>4} {:>6} {:>8} {:>9}\n",
        "OSD", "PGS", "TARGET", "DEVIATION"
    );
    for o in &v.osds {
        out.push_str(&format!(
            "{:>4} {:>6} {:>8.2} {:>+9.2}\n",
            o.osd,
            o.pgs,
            o.target,
            o.pgs as f64 - o.target
        ));
    }
    out.push_str(&format!(
        "current cluster score {:.6} (the standard deviation of PG copies from their shares; \
         lower is better)\n",
        v.stddev
    ));
    out
}

/// Runs `shoal balancer`.
pub fn run(cmd: BalancerCmd, ctx: &Ctx) -> anyhow::Result<()> {
    let set = |on: bool, f: FormatArg| -> anyhow::Result<()> {
        let v = mon_command(
            ctx,
            &Command::ConfigSet {
                who: "mon".into(),
                key: "mon_balancer_active".into(),
                value: on.to_string(),
            },
        )?;
        print(f.format, &v, |_| {
            format!("balancer {}\n", if on { "on" } else { "off" })
        });
        Ok(())
    };
    match cmd {
        BalancerCmd::Status(f) => {
            let v: BalancerStatusReply = mon_command_as(ctx, &Command::BalancerStatus)?;
            print_typed(f.format, &v, status_plain);
        }
        BalancerCmd::Eval(f) => {
            let v: BalancerStatusReply = mon_command_as(ctx, &Command::BalancerStatus)?;
            print_typed(f.format, &v, eval_plain);
        }
        BalancerCmd::On(f) => set(true, f)?,
        BalancerCmd::Off(f) => set(false, f)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_views() {
        let v: BalancerStatusReply = serde_json::from_value(serde_json::json!({
            "active": true, "mode": "upmap", "interval_ms": 1000, "max_moves": 10,
            "pg_upmap_items": 3, "max_deviation": 0.5, "max_deviation_allowed": 1,
            "stddev": 0.25, "osds": [{"osd": 0, "pgs": 25, "target": 24.5}]}))
        .unwrap();
        assert!(status_plain(&v).contains("max deviation: 0.50 PGs (allowed 1), stddev 0.25"));
        let e = eval_plain(&v);
        assert!(e.contains("   0     25    24.50     +0.50"), "{e}");
        assert!(e.contains("current cluster score 0.250000"), "{e}");
    }
}

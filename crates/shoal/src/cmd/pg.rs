//! `shoal pg dump|stat|ls-by-osd|ls-by-pool` and `shoal df [detail]`: the
//! PG statistics OSDs report to the monitors and the space they use, as
//! `ceph pg` and `ceph df` show them.

use clap::{Args, Subcommand};
use serde_json::Value;
use shoal_mon::Command;
use shoal_monclient::replies::{DfReply, PgDumpReply, PgStatReply};
use shoal_osd::scrub::ScrubReport;

use super::common::{Ctx, Format, mon_command_as, print, print_typed};

/// PG commands.
#[derive(Debug, Subcommand)]
pub enum PgCmd {
    /// Every PG with its state, objects, bytes, log and OSDs.
    Dump(FormatArg),
    /// PG counts by state, data stored, raw space.
    Stat(FormatArg),
    /// Compare the replicas' object metadata now (waits for the result).
    Scrub(PgArg),
    /// Compare the replicas' metadata and data checksums now.
    DeepScrub(PgArg),
    /// Deep-scrub and copy the authoritative copy over every copy that differs.
    Repair(PgArg),
    /// The PG's state, sets, interval, log and last scrub, from its primary.
    Query(PgArg),
    /// The PGs whose up or acting set holds an OSD.
    LsByOsd {
        /// The OSD (`3` or `osd.3`).
        #[arg(value_parser = super::osd::osd_id)]
        osd: i32,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// The PGs of a pool.
    LsByPool {
        /// The pool's name.
        pool: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
}

/// `pg ls-by-osd` and `pg ls-by-pool`: the PGs chosen, as `pg dump` has
/// them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PgList {
    /// The OSD map epoch the PGs map by.
    pub epoch: u32,
    /// The PGs.
    pub pg_stats: Vec<shoal_monclient::replies::PgDumpEntry>,
}

/// The PGs of `dump` that `keep` chooses.
fn pg_list(
    dump: PgDumpReply,
    keep: impl Fn(&shoal_monclient::replies::PgDumpEntry) -> bool,
) -> PgList {
    PgList {
        epoch: dump.epoch,
        pg_stats: dump.pg_stats.into_iter().filter(|p| keep(p)).collect(),
    }
}

/// A PG and an output format.
#[derive(Debug, Args)]
pub struct PgArg {
    /// The PG, `POOL_ID.SEED` in hex as `pg dump` shows it (`1.1f`).
    pgid: String,
    /// Output format.
    #[arg(long, value_enum, default_value = "plain")]
    format: Format,
}

fn parse_pgid(s: &str) -> anyhow::Result<shoal_maps::PgId> {
    let (pool, seed) = s
        .split_once('.')
        .ok_or_else(|| anyhow::anyhow!("bad pg id {s:?}: POOL.SEED, e.g. 1.1f"))?;
    Ok(shoal_maps::PgId {
        pool: pool
            .parse()
            .map_err(|_| anyhow::anyhow!("bad pool in pg id {s:?}"))?,
        seed: u32::from_str_radix(seed, 16)
            .map_err(|_| anyhow::anyhow!("bad seed in pg id {s:?} (hex)"))?,
    })
}

/// `shoal osd scrub|deep-scrub|repair N`.
#[derive(Debug, Args)]
pub struct OsdScrubArg {
    /// The OSD id.
    id: i32,
    /// Output format.
    #[arg(long, value_enum, default_value = "plain")]
    format: Format,
}

/// Sends commands to PGs' primaries through the client library: to `pgs`,
/// or (with `None`) to every PG whose primary is `osd`.
fn pg_commands(
    ctx: &Ctx,
    pgs: Option<Vec<shoal_maps::PgId>>,
    osd: i32,
    command: &str,
) -> anyhow::Result<Vec<Value>> {
    let rt = super::common::runtime()?;
    rt.block_on(async {
        let opts = shoal_client::ClientOptions::from_loaded(&ctx.config, &ctx.name)?;
        let timeout = opts.op_timeout.max(std::time::Duration::from_secs(600));
        let client = shoal_client::Client::connect(opts).await?;
        let pgs = pgs.unwrap_or_else(|| pgs_of(&client, osd));
        let mut out = Vec::new();
        for pg in pgs {
            match client.pg_command(pg, command, timeout).await {
                Ok(v) => out.push(v),
                Err(e) => {
                    client.shutdown().await;
                    anyhow::bail!("pg {pg}: {e}");
                }
            }
        }
        client.shutdown().await;
        Ok(out)
    })
}

/// The PGs whose acting primary is `osd` in the client's map.
pub fn pgs_of(client: &shoal_client::Client, osd: i32) -> Vec<shoal_maps::PgId> {
    let Ok(map) = client.map() else {
        return Vec::new();
    };
    let mut mine = Vec::new();
    for (id, pool) in map.pools() {
        for seed in 0..pool.pg_num {
            let pg = shoal_maps::PgId { pool: *id, seed };
            if map
                .pg_to_up_acting(pg)
                .is_ok_and(|m| m.acting_primary == osd)
            {
                mine.push(pg);
            }
        }
    }
    mine
}

fn pg_command(ctx: &Ctx, a: &PgArg, command: &str) -> anyhow::Result<Value> {
    let pg = parse_pgid(&a.pgid)?;
    let mut out = pg_commands(ctx, Some(vec![pg]), -1, command)?;
    out.pop()
        .ok_or_else(|| anyhow::anyhow!("pg {pg}: no answer"))
}

/// A PG's scrub report, as its primary answered it.
fn scrub_report(v: Value) -> anyhow::Result<ScrubReport> {
    serde_json::from_value(v)
        .map_err(|e| anyhow::anyhow!("the OSD's scrub report does not parse: {e}"))
}

/// Runs `shoal pg scrub|deep-scrub|repair PGID`.
fn run_pg_scrub(ctx: &Ctx, a: &PgArg, command: &str) -> anyhow::Result<()> {
    let report = scrub_report(pg_command(ctx, a, command)?)?;
    print_typed(a.format, &report, scrub_plain);
    Ok(())
}

/// Runs `shoal osd scrub|deep-scrub|repair N`.
pub fn run_osd_scrub(ctx: &Ctx, a: &OsdScrubArg, command: &str) -> anyhow::Result<()> {
    let list = pg_commands(ctx, None, a.id, command)?
        .into_iter()
        .map(scrub_report)
        .collect::<anyhow::Result<Vec<_>>>()?;
    print_typed(a.format, &list, |list| {
        let errors: u64 = list.iter().map(|r| r.errors).sum();
        let mut out: String = list.iter().map(scrub_plain).collect();
        out.push_str(&format!(
            "osd.{}: {} pgs, {errors} errors\n",
            a.id,
            list.len()
        ));
        out
    });
    Ok(())
}

fn scrub_plain(v: &ScrubReport) -> String {
    let mut out = format!(
        "pg {} {}: {} objects, {} errors, {} repaired\n",
        v.pgid,
        if v.repair {
            "repair"
        } else if v.deep {
            "deep-scrub"
        } else {
            "scrub"
        },
        v.objects,
        v.errors,
        v.repaired,
    );
    for i in &v.inconsistent {
        out.push_str(&format!("  {}: {}\n", i.object, i.why));
    }
    out
}

/// `--format`.
#[derive(Debug, Args)]
pub struct FormatArg {
    /// Output format.
    #[arg(long, value_enum, default_value = "plain")]
    format: Format,
}

/// Options of `shoal df`.
/// `shoal df [detail]`.
#[derive(Debug, Args)]
pub struct DfArgs {
    /// `detail`: the pools' quotas too.
    #[arg(value_parser = ["detail"])]
    view: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "plain")]
    format: Format,
}

pub use super::units::human_bytes;

fn ids(v: &[i32]) -> String {
    let list: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("[{}]", list.join(","))
}

/// `pg dump` as a table of PGs, then one of OSDs.
fn dump_plain(v: &PgDumpReply) -> String {
    let mut out = pgs_plain(&v.pg_stats);
    out.push_str(&format!(
        "\n{:<6} {:>10} {:>10} {:>10}\n",
        "OSD", "USED", "AVAIL", "TOTAL"
    ));
    for o in &v.osd_stats {
        out.push_str(&format!(
            "{:<6} {:>10} {:>10} {:>10}\n",
            o.osd,
            human_bytes(o.used_bytes),
            human_bytes(o.available_bytes),
            human_bytes(o.total_bytes),
        ));
    }
    out
}

/// PGs as a table.
fn pgs_plain(pgs: &[shoal_monclient::replies::PgDumpEntry]) -> String {
    let mut out = format!(
        "{:<8} {:>8} {:>10} {:>6}  {:<28} {:<12} {:<12} {:>10}  {:<12} {:>14}\n",
        "PG_STAT",
        "OBJECTS",
        "BYTES",
        "LOG",
        "STATE",
        "VERSION",
        "UP",
        "UP_PRIMARY",
        "ACTING",
        "ACTING_PRIMARY"
    );
    for p in pgs {
        out.push_str(&format!(
            "{:<8} {:>8} {:>10} {:>6}  {:<28} {:<12} {:<12} {:>10}  {:<12} {:>14}\n",
            p.pgid,
            p.objects,
            p.bytes,
            p.log_size,
            p.state,
            p.version,
            ids(&p.up),
            p.up_primary,
            ids(&p.acting),
            p.acting_primary,
        ));
    }
    out
}

/// `pg stat` on one line: `64 pgs: 64 active+clean; 1.2 MiB data, 30
/// objects, 3 GiB used, 297 GiB / 300 GiB avail`.
fn stat_plain(v: &PgStatReply) -> String {
    let states: Vec<String> = v
        .num_pg_by_state
        .iter()
        .map(|s| format!("{} {}", s.num, s.name))
        .collect();
    format!(
        "{} pgs: {}; {} data, {} objects, {} used, {} / {} avail\n",
        v.num_pgs,
        states.join(", "),
        human_bytes(v.num_bytes),
        v.num_objects,
        human_bytes(v.raw_bytes_used),
        human_bytes(v.raw_bytes_avail),
        human_bytes(v.raw_bytes),
    )
}

fn percent(ratio: f64) -> String {
    if ratio == 0.0 {
        "0".into()
    } else {
        format!("{:.2}", ratio * 100.0)
    }
}

/// `df` as Ceph's two tables: raw storage, then pools (with `detail`,
/// their quotas: N/A where none is set).
fn df_plain(df: &DfReply, detail: bool) -> String {
    let s = &df.stats;
    let (size, avail, used) = (
        human_bytes(s.total_bytes),
        human_bytes(s.total_avail_bytes),
        human_bytes(s.total_used_raw_bytes),
    );
    let mut out = format!(
        "--- RAW STORAGE ---\n{:<6} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
        "CLASS", "SIZE", "AVAIL", "USED", "RAW USED", "%RAW USED"
    );
    out.push_str(&format!(
        "{:<6} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
        "TOTAL",
        size,
        avail,
        used,
        used,
        percent(s.total_used_raw_ratio)
    ));
    let width = df
        .pools
        .iter()
        .map(|p| p.name.len())
        .max()
        .unwrap_or(0)
        .max(4);
    out.push_str(&format!(
        "\n--- POOLS ---\n{:<width$} {:>4} {:>5} {:>10} {:>8} {:>10} {:>6} {:>10}",
        "POOL", "ID", "PGS", "STORED", "OBJECTS", "USED", "%USED", "MAX AVAIL"
    ));
    if detail {
        out.push_str(&format!(" {:>13} {:>11}", "QUOTA OBJECTS", "QUOTA BYTES"));
    }
    out.push('\n');
    for p in &df.pools {
        let st = &p.stats;
        out.push_str(&format!(
            "{:<width$} {:>4} {:>5} {:>10} {:>8} {:>10} {:>6} {:>10}",
            p.name,
            p.id,
            p.pg_num,
            human_bytes(st.stored),
            st.objects,
            human_bytes(st.bytes_used),
            percent(st.percent_used),
            human_bytes(st.max_avail),
        ));
        if detail {
            let q = &p.quota;
            let objects = match q.max_objects {
                0 => "N/A".to_string(),
                n => n.to_string(),
            };
            let bytes = match q.max_bytes {
                0 => "N/A".to_string(),
                n => human_bytes(n),
            };
            out.push_str(&format!(" {objects:>13} {bytes:>11}"));
        }
        out.push('\n');
    }
    out
}

/// Runs one `shoal pg` subcommand.
pub fn run(cmd: PgCmd, ctx: &Ctx) -> anyhow::Result<()> {
    match cmd {
        PgCmd::Dump(f) => print_typed(
            f.format,
            &mon_command_as::<PgDumpReply>(ctx, &Command::PgDump)?,
            dump_plain,
        ),
        PgCmd::Stat(f) => print_typed(
            f.format,
            &mon_command_as::<PgStatReply>(ctx, &Command::PgStat)?,
            stat_plain,
        ),
        PgCmd::Scrub(a) => run_pg_scrub(ctx, &a, "scrub")?,
        PgCmd::DeepScrub(a) => run_pg_scrub(ctx, &a, "deep-scrub")?,
        PgCmd::Repair(a) => run_pg_scrub(ctx, &a, "repair")?,
        PgCmd::Query(a) => print(
            a.format,
            &pg_command(ctx, &a, "query")?,
            super::common::pretty,
        ),
        PgCmd::LsByOsd { osd, format } => {
            let dump: PgDumpReply = mon_command_as(ctx, &Command::PgDump)?;
            let l = pg_list(dump, |p| p.up.contains(&osd) || p.acting.contains(&osd));
            print_typed(format, &l, |l| pgs_plain(&l.pg_stats));
        }
        PgCmd::LsByPool { pool, format } => {
            let p: shoal_monclient::replies::PoolReply =
                mon_command_as(ctx, &Command::PoolGet { name: pool })?;
            let dump: PgDumpReply = mon_command_as(ctx, &Command::PgDump)?;
            let prefix = format!("{}.", p.id);
            let l = pg_list(dump, |e| e.pgid.starts_with(&prefix));
            print_typed(format, &l, |l| pgs_plain(&l.pg_stats));
        }
    }
    Ok(())
}

/// Runs `shoal df`.
pub fn run_df(a: DfArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let df: DfReply = mon_command_as(ctx, &Command::Df)?;
    let detail = a.view.is_some();
    print_typed(a.format, &df, |df| df_plain(df, detail));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plain_tables() {
        let stat: PgStatReply = serde_json::from_value(json!({
            "epoch": 5, "num_pgs": 64,
            "num_pg_by_state": [{ "name": "active+clean", "num": 60 }, { "name": "peering", "num": 4 }],
            "num_bytes": 1_258_291u64, "num_objects": 30,
            "num_object_copies": 90, "num_objects_degraded": 0, "num_objects_misplaced": 0,
            "raw_bytes": 300u64 << 30, "raw_bytes_used": 30u64 << 20, "raw_bytes_avail": 299u64 << 30,
            "recovery_objects_left": 0, "recovery_objects_per_s": 0,
        }))
        .unwrap();
        assert_eq!(
            stat_plain(&stat),
            "64 pgs: 60 active+clean, 4 peering; 1.2 MiB data, 30 objects, \
             30 MiB used, 299 GiB / 300 GiB avail\n"
        );
        let df: DfReply = serde_json::from_value(json!({
            "epoch": 3,
            "stats": { "total_bytes": 3u64 << 30, "total_avail_bytes": 2u64 << 30,
                       "total_used_raw_bytes": 1u64 << 30, "total_used_raw_ratio": 1.0 / 3.0,
                       "num_osds": 3 },
            "pools": [{ "name": "rbd", "id": 1, "pg_num": 32,
                        "quota": { "max_bytes": 0, "max_objects": 0, "full": false },
                        "stats": { "stored": 1024, "objects": 1, "bytes_used": 3072,
                                   "percent_used": 0.0, "max_avail": 700u64 << 20 } }],
        }))
        .unwrap();
        let text = df_plain(&df, false);
        assert!(
            text.contains("TOTAL       3 GiB      2 GiB      1 GiB      1 GiB      33.33"),
            "{text}"
        );
        assert!(
            text.contains("rbd     1    32      1 KiB        1      3 KiB      0    700 MiB"),
            "{text}"
        );
        let text = df_plain(&df, true);
        assert!(text.contains("QUOTA OBJECTS QUOTA BYTES"), "{text}");
        assert!(text.contains("700 MiB           N/A         N/A"), "{text}");
        let dump: PgDumpReply = serde_json::from_value(json!({
            "epoch": 5,
            "pg_stats": [{ "pgid": "1.a", "objects": 2, "bytes": 10, "log_size": 2,
                           "state": "stale+active+clean", "version": "5'2", "up": [0, 1],
                           "up_primary": 0, "acting": [0, 1], "acting_primary": 0,
                           "reporter": 0, "reported_epoch": 5 }],
            "osd_stats": [{ "osd": 0, "up": true, "used_bytes": 1024, "available_bytes": 2048,
                            "total_bytes": 3072 }],
        }))
        .unwrap();
        let text = dump_plain(&dump);
        assert!(
            text.contains("1.a             2         10      2  stale+active+clean"),
            "{text}"
        );
        assert!(
            text.contains("[0,1]                 0  [0,1]                     0\n"),
            "{text}"
        );
        assert!(
            text.contains("0           1 KiB      2 KiB      3 KiB\n"),
            "{text}"
        );
    }
}

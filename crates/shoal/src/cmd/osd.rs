//! `shoal osd`: the OSD map as the monitors keep it: the tree, dump and
//! counts; marking OSDs out, in and down; flags; pools; where an object
//! lives.

use clap::{Args, Subcommand};
use serde::Deserialize;
use serde_json::Value;
use shoal_mon::{Command, PoolSpec};
use shoal_monclient::replies::{
    DaemonReportsReply, EpochReply, OsdCreateReply, OsdMapReply, OsdStatReply, OsdTreeReply,
    PgDumpReply, PoolReply,
};

use super::common::{Ctx, Format, mon_command, mon_command_as, pretty, print, print_typed};

/// OSD map commands.
#[derive(Debug, Subcommand)]
pub enum OsdCmd {
    /// Prepare an OSD's data directory: its store, key and metadata.
    Mkfs(super::osd_daemon::MkfsArgs),
    /// Scrub every PG the OSD is primary of.
    Scrub(super::pg::OsdScrubArg),
    /// Deep-scrub every PG the OSD is primary of.
    DeepScrub(super::pg::OsdScrubArg),
    /// Repair every PG the OSD is primary of.
    Repair(super::pg::OsdScrubArg),
    /// The CRUSH hierarchy with each OSD's state.
    Tree(FormatArg),
    /// The whole OSD map.
    Dump(FormatArg),
    /// How many OSDs exist, are up and are in.
    Stat(FormatArg),
    /// Each OSD's size, use, PGs and VAR (its utilization over the mean),
    /// with the spread's standard deviation; `osd df tree`: the CRUSH
    /// hierarchy, buckets summing their OSDs.
    Df {
        /// `tree`.
        #[arg(value_parser = ["tree"])]
        view: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Each OSD's mean commit latency (client writes it led) and apply
    /// latency (changes it applied as a replica) since it started.
    Perf(FormatArg),
    /// The pools by id and name.
    Lspools(FormatArg),
    /// Put OSDs where CRUSH puts others for one PG, as Ceph's
    /// `pg-upmap-items PGID FROM TO [FROM TO ...]`: its data moves there.
    PgUpmapItems {
        /// The PG (`1.1f`).
        pgid: String,
        /// FROM TO pairs of OSD ids (`3` or `osd.3`).
        #[arg(required = true, num_args = 2.., value_parser = osd_id)]
        osds: Vec<i32>,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Remove a PG's pg-upmap-items: CRUSH places it again.
    RmPgUpmapItems {
        /// The PG (`1.1f`).
        pgid: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Allocate a new OSD id.
    Create(FormatArg),
    /// Mark OSDs out: their data moves elsewhere.
    Out {
        /// OSD ids (`3` or `osd.3`).
        #[arg(required = true, value_parser = osd_id)]
        ids: Vec<i32>,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Mark OSDs in.
    In {
        /// OSD ids (`3` or `osd.3`).
        #[arg(required = true, value_parser = osd_id)]
        ids: Vec<i32>,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Mark OSDs down (a running OSD marks itself up again).
    Down {
        /// OSD ids (`3` or `osd.3`).
        #[arg(required = true, value_parser = osd_id)]
        ids: Vec<i32>,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Remove OSDs (they must be down).
    Rm {
        /// OSD ids (`3` or `osd.3`).
        #[arg(required = true, value_parser = osd_id)]
        ids: Vec<i32>,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Set a cluster flag: noout, noin, nodown, noup, nobackfill, norecover,
    /// noscrub, nodeep-scrub.
    Set {
        /// The flag.
        flag: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Clear a cluster flag.
    Unset {
        /// The flag.
        flag: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Pools.
    #[command(subcommand)]
    Pool(PoolCmd),
    /// Erasure-code profiles: what erasure-coded pools are made from.
    #[command(subcommand, name = "erasure-code-profile")]
    ErasureCodeProfile(EcProfileCmd),
    /// Edit the CRUSH hierarchy.
    #[command(subcommand)]
    Crush(CrushEditCmd),
    /// Follow the OSD map: print each new epoch as it arrives (across
    /// monitor failures) until COUNT epochs after the current one or TIMEOUT.
    Watch {
        /// Stop after this many new epochs (0: never).
        #[arg(long, default_value_t = 0)]
        count: u64,
        /// Stop after this many seconds (0: never).
        #[arg(long, default_value_t = 0)]
        timeout: u64,
    },
    /// Where an object lives: its PG and the OSDs holding it.
    Map {
        /// Pool name.
        pool: String,
        /// Object name.
        object: String,
        /// Object namespace.
        #[arg(long, default_value = "")]
        namespace: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
}

/// Erasure-code profiles, as `ceph osd erasure-code-profile ...`.
#[derive(Debug, Subcommand)]
pub enum EcProfileCmd {
    /// Create a profile: `set NAME k=K m=M [crush-failure-domain=host|osd]
    /// [crush-device-class=CLASS] [crush-root=ROOT] [stripe_unit=BYTES]`.
    Set {
        /// Name.
        name: String,
        /// Settings, `key=value`.
        settings: Vec<String>,
        /// Replace a profile of that name (no pool may use it).
        #[arg(long)]
        force: bool,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Show a profile's settings.
    Get {
        /// Name.
        name: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// List profiles.
    Ls {
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Remove a profile no pool uses.
    Rm {
        /// Name.
        name: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
}

fn run_ec_profile(cmd: EcProfileCmd, ctx: &Ctx) -> anyhow::Result<()> {
    match cmd {
        EcProfileCmd::Set {
            name,
            settings,
            force,
            format,
        } => {
            let mut params = std::collections::BTreeMap::new();
            for s in &settings {
                let (k, v) = s
                    .split_once('=')
                    .ok_or_else(|| anyhow::anyhow!("{s:?} is not key=value"))?;
                params.insert(k.to_string(), v.to_string());
            }
            let v = mon_command(
                ctx,
                &Command::ErasureCodeProfileSet {
                    name: name.clone(),
                    params,
                    force,
                },
            )?;
            done(format, &v, &format!("erasure-code profile {name} set"));
        }
        EcProfileCmd::Get { name, format } => {
            let v = mon_command(ctx, &Command::ErasureCodeProfileGet { name })?;
            print(format, &v, |v| {
                let mut out = String::new();
                for (k, val) in v.as_object().into_iter().flatten() {
                    out.push_str(&format!("{k}={}\n", val.as_str().unwrap_or("")));
                }
                out
            });
        }
        EcProfileCmd::Ls { format } => {
            let v = mon_command(ctx, &Command::ErasureCodeProfileLs)?;
            print(format, &v, |v| {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .map(|n| format!("{}\n", n.as_str().unwrap_or("")))
                    .collect()
            });
        }
        EcProfileCmd::Rm { name, format } => {
            let v = mon_command(ctx, &Command::ErasureCodeProfileRm { name: name.clone() })?;
            done(format, &v, &format!("erasure-code profile {name} removed"));
        }
    }
    Ok(())
}

/// CRUSH edits, as `ceph osd crush ...`.
#[derive(Debug, Subcommand)]
pub enum CrushEditCmd {
    /// Set an item's CRUSH weight (e.g. `osd.3 1.5`).
    Reweight {
        /// Item name.
        name: String,
        /// Weight (1.0 = one unit, usually 1 TiB).
        weight: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Add a bucket (e.g. `rack1 rack`); it starts as a root.
    AddBucket {
        /// Name.
        name: String,
        /// Type: host, rack, row, room, datacenter, ...
        type_name: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Move a bucket under another: `move host1 rack1` or `move host1 rack=rack1`.
    Move {
        /// Bucket.
        name: String,
        /// New parent (`NAME` or `TYPE=NAME`).
        parent: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Remove an item (a device, or an empty bucket).
    Rm {
        /// Item name.
        name: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// The CRUSH hierarchy: buckets and devices with their weights.
    Tree(FormatArg),
}

/// An OSD id as Ceph's tools take it: `3` or `osd.3`.
pub fn osd_id(s: &str) -> Result<i32, String> {
    s.strip_prefix("osd.")
        .unwrap_or(s)
        .parse::<i32>()
        .map_err(|e| format!("{e} (an OSD id: 3 or osd.3)"))
}

/// `--format`.
#[derive(Debug, Args)]
pub struct FormatArg {
    /// Output format.
    #[arg(long, value_enum, default_value = "plain")]
    format: Format,
}

/// Pool commands.
#[derive(Debug, Subcommand)]
pub enum PoolCmd {
    /// Create a pool, as Ceph's `osd pool create`:
    /// `create NAME [PG_NUM [PGP_NUM]] [replicated [--size N --min-size N] |
    /// erasure [PROFILE [RULE]]]`.
    Create {
        /// Name.
        name: String,
        /// `[PG_NUM [PGP_NUM]] [replicated | erasure [PROFILE [RULE]]]`
        /// (PG_NUM defaults to 32, the profile to `default`, the rule of
        /// an erasure-coded pool to one made from the profile, named after
        /// the pool).
        #[arg(num_args = 0..)]
        args: Vec<String>,
        /// Copies (replicated).
        #[arg(long, default_value_t = 3)]
        size: u32,
        /// Fewest copies that take writes (default: size - size/2).
        #[arg(long)]
        min_size: Option<u32>,
        /// What the autoscaler does with its pg_num: on, warn or off
        /// (default: osd_pool_default_pg_autoscale_mode).
        #[arg(long, value_parser = ["on", "warn", "off"])]
        autoscale_mode: Option<String>,
        /// Expected to hold much of the cluster's data: the autoscaler
        /// gives it its share of PGs from the start.
        #[arg(long)]
        bulk: bool,
        /// The fewest PGs the autoscaler leaves it.
        #[arg(long)]
        pg_num_min: Option<u32>,
        /// The most PGs the autoscaler gives it.
        #[arg(long)]
        pg_num_max: Option<u32>,
        /// Bytes it is expected to hold (100G), sized for from the start.
        #[arg(long)]
        target_size_bytes: Option<String>,
        /// Its expected share of the capacity, relative to the other
        /// pools' ratios.
        #[arg(long)]
        target_size_ratio: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// List pools (`ls detail`: with every property).
    Ls {
        /// `detail`: every property.
        #[arg(value_parser = ["detail"])]
        view: Option<String>,
        /// Show every property.
        #[arg(long)]
        detail: bool,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Delete a pool and everything in it (also as Ceph's
    /// `delete NAME NAME --yes-i-really-really-mean-it`).
    #[command(alias = "delete")]
    Rm {
        /// Name.
        name: String,
        /// The name again, as Ceph asks for it; must match.
        confirm: Option<String>,
        /// Confirms the deletion.
        #[arg(long = "yes-i-really-mean-it", alias = "yes-i-really-really-mean-it")]
        sure: bool,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Rename a pool.
    Rename {
        /// Current name.
        from: String,
        /// New name.
        to: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Set a property: size, min_size, crush_rule, allow_ec_overwrites.
    Set {
        /// Pool.
        name: String,
        /// Property.
        key: String,
        /// Value.
        value: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Set a pool's quota, as Ceph's `osd pool set-quota POOL
    /// max_objects|max_bytes N` (0 removes it; bytes take K, M, G, T).
    /// At its quota a pool refuses writes that add to it (deletes pass)
    /// and the cluster warns POOL_FULL.
    SetQuota {
        /// Pool.
        name: String,
        /// `max_objects` or `max_bytes`.
        #[arg(value_parser = ["max_objects", "max_bytes"])]
        field: String,
        /// The limit.
        value: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Each pool's client I/O per second, from the OSDs' consecutive
    /// reports (waits for every OSD to report twice: up to three stats
    /// periods, `mgr_stats_period_ms`).
    Stats {
        /// One pool (all by default).
        name: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Each pool's share of the raw space and the PG count it calls for
    /// (`mon_target_pg_per_osd` PG copies an OSD), as the monitors'
    /// autoscaler computes them; NEW PG_NUM where it is off by the
    /// threshold (3×), and each pool's `pg_autoscale_mode`.
    AutoscaleStatus(FormatArg),
    /// Show a pool's quotas.
    GetQuota {
        /// Pool.
        name: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// Show a pool's properties (or one of them).
    Get {
        /// Pool.
        name: String,
        /// One property.
        key: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
}

fn tree_plain(v: &OsdTreeReply) -> String {
    let mut out = format!(
        "{:<4} {:<6} {:>9}  {:<24} {:<7} {:>8} {:>8}\n",
        "ID", "CLASS", "WEIGHT", "TYPE NAME", "STATUS", "REWEIGHT", "PRI-AFF"
    );
    for n in &v.nodes {
        let label = format!("{}{} {}", "    ".repeat(n.depth as usize), n.kind, n.name);
        let (status, reweight, affinity) = match &n.osd {
            Some(o) => (
                if o.up { "up" } else { "down" },
                format!("{:.5}", o.reweight),
                format!("{:.5}", o.primary_affinity),
            ),
            None => ("", String::new(), String::new()),
        };
        out.push_str(&format!(
            "{:<4} {:<6} {:>9}  {:<24} {:<7} {:>8} {:>8}\n",
            n.id,
            n.class.as_deref().unwrap_or(""),
            format!("{:.5}", n.crush_weight),
            label,
            status,
            reweight,
            affinity,
        ));
    }
    for o in &v.stray {
        let status = if o.up { "up" } else { "down" };
        out.push_str(&format!(
            "{:<4} {:<6} {:>9}  {:<24} {:<7} {:>8.5} {:>8.5}   (not in CRUSH)\n",
            o.osd,
            "",
            "0",
            format!("osd.{}", o.osd),
            status,
            o.reweight,
            o.primary_affinity
        ));
    }
    out
}

/// `osd stat` on one line (and the flags on another).
pub(crate) fn stat_plain(v: &OsdStatReply) -> String {
    let mut s = format!(
        "{} osds: {} up, {} in; epoch: e{}\n",
        v.num_osds, v.num_up_osds, v.num_in_osds, v.epoch
    );
    if !v.flags.is_empty() {
        s.push_str(&format!("flags {}\n", v.flags.join(",")));
    }
    s
}

fn map_plain(v: &OsdMapReply) -> String {
    let set = |s: &[i32]| serde_json::to_string(s).unwrap_or_default();
    format!(
        "osdmap e{} pool '{}' ({}) object '{}' -> pg {} ({}) -> up ({}, p{}) acting ({}, p{})\n",
        v.epoch,
        v.pool,
        v.pool_id,
        v.objname,
        v.raw_pgid,
        v.pgid,
        set(&v.up),
        v.up_primary,
        set(&v.acting),
        v.acting_primary
    )
}

/// The outcome of a change: the monitor's reply as JSON, or `what` and
/// the new epoch.
fn done(format: Format, v: &Value, what: &str) {
    print(format, v, |v| {
        let epoch = EpochReply::deserialize(v).map_or(0, |e| e.epoch);
        format!("{what} (osdmap e{epoch})\n")
    });
}

/// Runs one `shoal osd` subcommand.
pub fn run(cmd: OsdCmd, ctx: &Ctx) -> anyhow::Result<()> {
    match cmd {
        OsdCmd::Mkfs(_) => bail_mkfs()?,
        OsdCmd::Scrub(a) => super::pg::run_osd_scrub(ctx, &a, "scrub")?,
        OsdCmd::DeepScrub(a) => super::pg::run_osd_scrub(ctx, &a, "deep-scrub")?,
        OsdCmd::Repair(a) => super::pg::run_osd_scrub(ctx, &a, "repair")?,
        OsdCmd::Tree(f) => print_typed(
            f.format,
            &mon_command_as::<OsdTreeReply>(ctx, &Command::OsdTree)?,
            tree_plain,
        ),
        OsdCmd::Dump(f) => print(f.format, &mon_command(ctx, &Command::OsdDump)?, pretty),
        OsdCmd::Stat(f) => print_typed(
            f.format,
            &mon_command_as::<OsdStatReply>(ctx, &Command::OsdStat)?,
            stat_plain,
        ),
        OsdCmd::Df { view, format } => {
            use super::osd_views::{osd_df, osd_df_plain};
            let tree: OsdTreeReply = mon_command_as(ctx, &Command::OsdTree)?;
            let pgs: PgDumpReply = mon_command_as(ctx, &Command::PgDump)?;
            let as_tree = view.is_some();
            print_typed(format, &osd_df(&tree, &pgs, as_tree), |d| {
                osd_df_plain(d, as_tree)
            });
        }
        OsdCmd::Perf(f) => {
            use super::osd_views::{osd_perf, osd_perf_plain};
            let r: DaemonReportsReply = mon_command_as(ctx, &Command::DaemonReports)?;
            print_typed(f.format, &osd_perf(&r), osd_perf_plain);
        }
        OsdCmd::Lspools(f) => {
            let v: Vec<PoolReply> = mon_command_as(ctx, &Command::PoolLs)?;
            let pools: Vec<serde_json::Value> = v
                .iter()
                .map(|p| serde_json::json!({"poolnum": p.id, "poolname": p.name}))
                .collect();
            print_typed(f.format, &pools, |_| {
                v.iter().map(|p| format!("{} {}\n", p.id, p.name)).collect()
            });
        }
        OsdCmd::Create(f) => print_typed(
            f.format,
            &mon_command_as::<OsdCreateReply>(ctx, &Command::OsdCreate)?,
            |v| format!("{}\n", v.osd),
        ),
        OsdCmd::Out { ids, format } => done(
            format,
            &mon_command(ctx, &Command::OsdOut { ids: ids.clone() })?,
            &format!("marked out osd {ids:?}"),
        ),
        OsdCmd::In { ids, format } => done(
            format,
            &mon_command(ctx, &Command::OsdIn { ids: ids.clone() })?,
            &format!("marked in osd {ids:?}"),
        ),
        OsdCmd::Down { ids, format } => done(
            format,
            &mon_command(ctx, &Command::OsdDown { ids: ids.clone() })?,
            &format!("marked down osd {ids:?}"),
        ),
        OsdCmd::PgUpmapItems { pgid, osds, format } => {
            anyhow::ensure!(
                osds.len() % 2 == 0,
                "pg-upmap-items takes FROM TO pairs: {} OSDs given",
                osds.len()
            );
            let pairs: Vec<(i32, i32)> = osds.chunks(2).map(|p| (p[0], p[1])).collect();
            let what = format!("set {pgid} pg_upmap_items mapping to {pairs:?}");
            let v = mon_command(ctx, &Command::OsdPgUpmapItems { pgid, pairs })?;
            done(format, &v, &what);
        }
        OsdCmd::RmPgUpmapItems { pgid, format } => {
            let what = format!("no pg_upmap_items for {pgid}");
            let v = mon_command(ctx, &Command::OsdRmPgUpmapItems { pgid })?;
            done(format, &v, &what);
        }
        OsdCmd::Rm { ids, format } => done(
            format,
            &mon_command(ctx, &Command::OsdRm { ids: ids.clone() })?,
            &format!("removed osd {ids:?}"),
        ),
        OsdCmd::Set { flag, format } => done(
            format,
            &mon_command(
                ctx,
                &Command::OsdFlag {
                    flag: flag.clone(),
                    on: true,
                },
            )?,
            &format!("{flag} is set"),
        ),
        OsdCmd::Unset { flag, format } => done(
            format,
            &mon_command(
                ctx,
                &Command::OsdFlag {
                    flag: flag.clone(),
                    on: false,
                },
            )?,
            &format!("{flag} is unset"),
        ),
        OsdCmd::Pool(p) => run_pool(p, ctx)?,
        OsdCmd::ErasureCodeProfile(p) => run_ec_profile(p, ctx)?,
        OsdCmd::Watch { count, timeout } => watch(ctx, count, timeout)?,
        OsdCmd::Crush(c) => run_crush(c, ctx)?,
        OsdCmd::Map {
            pool,
            object,
            namespace,
            format,
        } => {
            let v: OsdMapReply = mon_command_as(
                ctx,
                &Command::OsdMap {
                    pool,
                    object,
                    namespace,
                },
            )?;
            print_typed(format, &v, map_plain);
        }
    }
    Ok(())
}

fn watch(ctx: &Ctx, count: u64, timeout: u64) -> anyhow::Result<()> {
    let rt = super::common::runtime()?;
    rt.block_on(async {
        let sink = shoal_mon::UpdateSink::new();
        let client = super::common::mon_client_with(ctx, sink.clone())?;
        let mut maps = client.subscribe_osdmap(sink);
        let deadline = (timeout > 0)
            .then(|| tokio::time::Instant::now() + std::time::Duration::from_secs(timeout));
        let mut first: Option<u64> = None;
        let mut last = 0u64;
        loop {
            let changed = maps.changed();
            let ok = match deadline {
                Some(d) => tokio::time::timeout_at(d, changed).await.map(|r| r.is_ok()),
                None => Ok(changed.await.is_ok()),
            };
            if !matches!(ok, Ok(true)) {
                break;
            }
            let Some(map) = maps.borrow_and_update().clone() else {
                continue;
            };
            let epoch = u64::from(map.epoch.0);
            if epoch <= last {
                continue;
            }
            let start = *first.get_or_insert(epoch);
            outln!(
                "e{epoch}: {} pools, {} osds ({} up)",
                map.pools().len(),
                map.osds().filter(|(_, o)| o.exists).count(),
                map.osds().filter(|(id, _)| map.is_up(*id)).count()
            );
            super::out::flush();
            last = epoch;
            if count > 0 && epoch - start >= count {
                break;
            }
        }
        anyhow::Ok(())
    })
}

/// Each pool's client I/O per second: the OSDs' reports gathered until
/// every OSD has reported twice since (or three stats periods passed).
fn pool_rates(ctx: &Ctx) -> anyhow::Result<std::collections::BTreeMap<u64, shoal_mgr::gather::Io>> {
    let period = std::time::Duration::from_millis(ctx.config.options.mgr_stats_period_ms.max(100));
    let rt = super::common::runtime()?;
    rt.block_on(async {
        let monc = super::common::mon_client(ctx)?;
        let mut history = shoal_mgr::gather::History::default();
        let deadline = std::time::Instant::now() + 3 * period;
        loop {
            let snap = shoal_mgr::gather::gather(&monc)
                .await
                .map_err(|e| anyhow::anyhow!("{:?}: {}", e.code, e.message))?;
            history.push(&snap);
            if history.every_osd_rated() || std::time::Instant::now() >= deadline {
                return Ok(history.pools);
            }
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    })
}

fn run_crush(cmd: CrushEditCmd, ctx: &Ctx) -> anyhow::Result<()> {
    let (cmd, what, format) = match cmd {
        CrushEditCmd::Tree(f) => {
            use super::osd_views::{crush_tree, crush_tree_plain};
            let tree: OsdTreeReply = mon_command_as(ctx, &Command::OsdTree)?;
            print_typed(f.format, &crush_tree(&tree), crush_tree_plain);
            return Ok(());
        }
        CrushEditCmd::Reweight {
            name,
            weight,
            format,
        } => {
            let w = shoal_crush::text::parse_weight(&weight)
                .ok_or_else(|| anyhow::anyhow!("bad weight {weight:?}: a number such as 1.5"))?;
            let what = format!("reweighted item {name} to {weight} in crush map");
            (Command::OsdCrushReweight { name, weight: w }, what, format)
        }
        CrushEditCmd::AddBucket {
            name,
            type_name,
            format,
        } => {
            let what = format!("added bucket {name} type {type_name} to crush map");
            (Command::OsdCrushAddBucket { name, type_name }, what, format)
        }
        CrushEditCmd::Move {
            name,
            parent,
            format,
        } => {
            let parent = parent
                .split_once('=')
                .map_or(parent.clone(), |(_, p)| p.to_string());
            let what = format!("moved item {name} to {parent} in crush map");
            (Command::OsdCrushMove { name, parent }, what, format)
        }
        CrushEditCmd::Rm { name, format } => {
            let what = format!("removed item {name} from crush map");
            (Command::OsdCrushRm { name }, what, format)
        }
    };
    done(format, &mon_command(ctx, &cmd)?, &what);
    Ok(())
}

fn run_pool(cmd: PoolCmd, ctx: &Ctx) -> anyhow::Result<()> {
    match cmd {
        PoolCmd::Create {
            name,
            args,
            size,
            min_size,
            autoscale_mode,
            bulk,
            pg_num_min,
            pg_num_max,
            target_size_bytes,
            target_size_ratio,
            format,
        } => {
            let (pg_num, spec) = create_args(&args, size, min_size)?;
            let set: Vec<(String, String)> = [
                ("pg_autoscale_mode", autoscale_mode),
                ("bulk", bulk.then(|| "true".to_string())),
                ("pg_num_min", pg_num_min.map(|n| n.to_string())),
                ("pg_num_max", pg_num_max.map(|n| n.to_string())),
                ("target_size_bytes", target_size_bytes),
                ("target_size_ratio", target_size_ratio),
            ]
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_string(), v?)))
            .collect();
            let v = mon_command(
                ctx,
                &Command::PoolCreate {
                    name: name.clone(),
                    pg_num,
                    spec,
                    set,
                },
            )?;
            done(format, &v, &format!("pool '{name}' created"));
        }
        PoolCmd::Stats { name, format } => {
            use super::osd_views::{pool_stats, pool_stats_plain};
            let mut pools: Vec<PoolReply> = mon_command_as(ctx, &Command::PoolLs)?;
            if let Some(n) = &name {
                pools.retain(|p| &p.name == n);
                anyhow::ensure!(!pools.is_empty(), "pool {n} does not exist");
            }
            let rates = pool_rates(ctx)?;
            print_typed(format, &pool_stats(&pools, &rates), |s| pool_stats_plain(s));
        }
        PoolCmd::Ls {
            view,
            detail,
            format,
        } => {
            let detail = detail || view.is_some();
            let v: Vec<PoolReply> = mon_command_as(ctx, &Command::PoolLs)?;
            print_typed(format, &v, |v| {
                let mut out = String::new();
                for p in v {
                    if detail {
                        out.push_str(&format!(
                            "pool {} '{}' {} size {} min_size {} pg_num {} pgp_num {} crush_rule {} \
                             autoscale_mode {}",
                            p.id,
                            p.name,
                            p.kind,
                            p.size,
                            p.min_size,
                            p.pg_num,
                            p.pgp_num,
                            p.crush_rule,
                            p.pg_autoscale_mode
                        ));
                        if let Some(profile) = &p.erasure_code_profile {
                            out.push_str(&format!(
                                " erasure_code_profile {profile} stripe_width {}{}",
                                p.stripe_width,
                                if p.allow_ec_overwrites == Some(true) {
                                    " ec_overwrites"
                                } else {
                                    ""
                                }
                            ));
                        }
                        // What the operator told the autoscaler, as
                        // Ceph lists a pool's options.
                        if p.bulk {
                            out.push_str(" bulk");
                        }
                        for (k, n) in [
                            ("pg_num_min", u64::from(p.pg_num_min)),
                            ("pg_num_max", u64::from(p.pg_num_max)),
                            ("target_size_bytes", p.target_size_bytes),
                        ] {
                            if n != 0 {
                                out.push_str(&format!(" {k} {n}"));
                            }
                        }
                        if p.target_size_ratio != 0.0 {
                            out.push_str(&format!(" target_size_ratio {}", p.target_size_ratio));
                        }
                        out.push('\n');
                    } else {
                        out.push_str(&format!("{}\n", p.name));
                    }
                }
                out
            });
        }
        PoolCmd::Rm {
            name,
            confirm,
            sure,
            format,
        } => {
            if confirm.as_ref().is_some_and(|c| *c != name) {
                anyhow::bail!("the pool name must be given twice alike: {name} {name}");
            }
            let v = mon_command(
                ctx,
                &Command::PoolRm {
                    name: name.clone(),
                    sure,
                },
            )?;
            done(format, &v, &format!("pool '{name}' removed"));
        }
        PoolCmd::Rename { from, to, format } => {
            let v = mon_command(
                ctx,
                &Command::PoolRename {
                    from: from.clone(),
                    to: to.clone(),
                },
            )?;
            done(format, &v, &format!("pool '{from}' renamed to '{to}'"));
        }
        PoolCmd::Set {
            name,
            key,
            value,
            format,
        } => {
            let v = mon_command(
                ctx,
                &Command::PoolSet {
                    name: name.clone(),
                    key: key.clone(),
                    value: value.clone(),
                },
            )?;
            done(format, &v, &format!("set pool {name} {key} to {value}"));
        }
        PoolCmd::SetQuota {
            name,
            field,
            value,
            format,
        } => {
            let v = mon_command(
                ctx,
                &Command::PoolSet {
                    name: name.clone(),
                    key: format!("quota_{field}"),
                    value: value.clone(),
                },
            )?;
            done(
                format,
                &v,
                &format!("set-quota {field} = {value} for pool {name}"),
            );
        }
        PoolCmd::AutoscaleStatus(f) => {
            let v: shoal_monclient::replies::AutoscaleStatusReply =
                mon_command_as(ctx, &Command::PoolAutoscaleStatus)?;
            // Ceph's JSON is the list of pools.
            print_typed(f.format, &v.pools, |_| {
                super::osd_views::autoscale_plain(&v)
            });
        }
        PoolCmd::GetQuota { name, format } => {
            let v: PoolReply = mon_command_as(ctx, &Command::PoolGet { name: name.clone() })?;
            let q = serde_json::json!({
                "pool_name": name,
                "pool_id": v.id,
                "quota_max_objects": v.quota_max_objects,
                "quota_max_bytes": v.quota_max_bytes,
                "full": v.full_quota,
            });
            let show = |n: u64| match n {
                0 => "N/A".to_string(),
                n => n.to_string(),
            };
            print(format, &q, |_| {
                format!(
                    "quotas for pool '{name}':\n  max objects: {}\n  max bytes  : {}\n",
                    show(v.quota_max_objects),
                    show(v.quota_max_bytes)
                )
            });
        }
        PoolCmd::Get { name, key, format } => {
            let v = mon_command(ctx, &Command::PoolGet { name })?;
            match key {
                Some(k) => {
                    let field = v
                        .get(&k)
                        .cloned()
                        .ok_or_else(|| anyhow::anyhow!("unknown pool property {k:?}"))?;
                    print(format, &serde_json::json!({ k.clone(): field }), |v| {
                        format!("{k}: {}\n", v[&k])
                    });
                }
                None => print(format, &v, pretty),
            }
        }
    }
    Ok(())
}

/// `[PG_NUM [PGP_NUM]] [replicated | erasure [PROFILE [RULE]]]`, as
/// Ceph's `osd pool create` takes them.
fn create_args(
    args: &[String],
    size: u32,
    min_size: Option<u32>,
) -> anyhow::Result<(u32, PoolSpec)> {
    let mut rest = args.iter().map(String::as_str).peekable();
    let mut nums = Vec::new();
    while let Some(n) = rest.peek().and_then(|a| a.parse::<u32>().ok()) {
        nums.push(n);
        rest.next();
    }
    let pg_num = nums.first().copied().unwrap_or(32);
    match nums.get(1..) {
        Some([]) | None => {}
        Some([pgp]) if *pgp == pg_num => {}
        Some([pgp]) => {
            anyhow::bail!("pgp_num {pgp} differs from pg_num {pg_num}: Shoal places by every PG")
        }
        Some(_) => anyhow::bail!("at most PG_NUM and PGP_NUM before the pool type"),
    }
    let spec = match rest.next() {
        None | Some("replicated") => PoolSpec::Replicated {
            size,
            min_size: min_size.unwrap_or(size - size / 2),
        },
        Some("erasure") => PoolSpec::Erasure {
            profile: rest.next().unwrap_or("default").to_string(),
            rule: rest.next().map(str::to_string),
        },
        Some(other) => anyhow::bail!("pool type must be replicated or erasure, not {other:?}"),
    };
    if let Some(extra) = rest.next() {
        anyhow::bail!("unexpected argument {extra:?} after the pool type");
    }
    Ok((pg_num, spec))
}

fn bail_mkfs() -> anyhow::Result<()> {
    anyhow::bail!("`shoal osd mkfs` is handled by the OSD daemon module")
}

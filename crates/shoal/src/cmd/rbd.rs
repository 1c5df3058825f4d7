//! `shoal rbd ...`: block images from the command line, as Ceph's `rbd`
//! tool: create, list, inspect, resize, rename and remove images; import
//! and export them as files (sparse-aware, with progress); the holder of an
//! image's lock; and `bench`, timing I/O against an image as `rbd bench`
//! does. Images are named `[POOL/]IMAGE` (`-p` gives the pool; `rbd` by
//! default); sizes take a K, M, G or T suffix and mean MiB without one, as
//! in `rbd`.

use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;
use shoal_block::{CreateOptions, Image, format as fmt, rbd};
use shoal_client::{Client, Pool};

use super::common::{Ctx, Format};

/// Chunks in flight when importing or exporting.
const INFLIGHT: usize = 8;

/// `shoal rbd`.
#[derive(Debug, Args)]
pub struct RbdArgs {
    /// The pool of images named without one.
    #[arg(short = 'p', long, global = true, default_value = "rbd")]
    pool: String,
    /// Output of the commands that print: plain or json.
    #[arg(long, global = true, value_enum, default_value_t = Format::Plain)]
    format: Format,
    #[command(subcommand)]
    cmd: RbdCmd,
}

#[derive(Debug, Subcommand)]
enum RbdCmd {
    /// Create an image.
    Create {
        /// `[POOL/]IMAGE`.
        image: String,
        /// Size (K, M, G, T suffixes; MiB without one).
        #[arg(short = 's', long)]
        size: String,
        /// Object size, a power of two from 4K to 32M (default 4M).
        #[arg(long)]
        object_size: Option<String>,
        /// Keep the data objects in this pool (erasure-coded pools need
        /// allow_ec_overwrites).
        #[arg(long)]
        data_pool: Option<String>,
        /// Features, comma-separated (default layering,exclusive-lock,object-map).
        #[arg(long)]
        image_feature: Option<String>,
    },
    /// List the pool's images.
    #[command(alias = "list")]
    Ls {
        /// The pool (instead of -p).
        pool: Option<String>,
        /// With sizes.
        #[arg(short = 'l', long)]
        long: bool,
    },
    /// Show an image's size, objects, features and pools.
    Info {
        /// `[POOL/]IMAGE`.
        image: String,
    },
    /// Change an image's size.
    Resize {
        /// `[POOL/]IMAGE`.
        image: String,
        /// New size.
        #[arg(short = 's', long)]
        size: String,
        /// Allow shrinking (it discards the data past the new end).
        #[arg(long)]
        allow_shrink: bool,
    },
    /// Remove an image and its data.
    #[command(alias = "remove")]
    Rm {
        /// `[POOL/]IMAGE`.
        image: String,
    },
    /// Rename an image within its pool.
    #[command(alias = "rename")]
    Mv {
        /// `[POOL/]IMAGE`.
        from: String,
        /// New name (`[POOL/]IMAGE`, the same pool).
        to: String,
    },
    /// Provisioned and used space of one image or every image of the pool.
    #[command(alias = "disk-usage")]
    Du {
        /// `[POOL/]IMAGE` (every image if absent).
        image: Option<String>,
    },
    /// Make an image from a file (`-`: standard input); zero runs stay holes.
    Import {
        /// The file.
        path: String,
        /// `[POOL/]IMAGE` (default: the file's name).
        image: Option<String>,
        /// Object size.
        #[arg(long)]
        object_size: Option<String>,
        /// Keep the data objects in this pool.
        #[arg(long)]
        data_pool: Option<String>,
        /// No progress on standard error.
        #[arg(long)]
        no_progress: bool,
    },
    /// Write an image to a file (`-`: standard output); holes stay holes
    /// in a regular file.
    Export {
        /// `[POOL/]IMAGE`.
        image: String,
        /// The file.
        path: String,
        /// No progress on standard error.
        #[arg(long)]
        no_progress: bool,
    },
    /// The image's exclusive lock.
    Lock {
        #[command(subcommand)]
        cmd: LockCmd,
    },
    /// Snapshots: create, ls, rm, rollback, protect, unprotect.
    Snap {
        #[command(subcommand)]
        cmd: SnapCmd,
    },
    /// Clone a protected snapshot into a new image (copy-on-write: the
    /// clone reads its parent's data until it writes its own).
    Clone {
        /// The parent: `[POOL/]IMAGE@SNAP`.
        parent: String,
        /// The clone: `[POOL/]IMAGE`.
        child: String,
        /// Object size (default: the parent's).
        #[arg(long)]
        object_size: Option<String>,
        /// Keep the clone's data objects in this pool.
        #[arg(long)]
        data_pool: Option<String>,
    },
    /// List the clones of a snapshot.
    Children {
        /// `[POOL/]IMAGE@SNAP`.
        spec: String,
    },
    /// Copy a clone's data from its parent, so it no longer needs it.
    Flatten {
        /// `[POOL/]IMAGE`.
        image: String,
    },
    /// Images attached as block devices (NBD): map, unmap, list.
    Device {
        #[command(subcommand)]
        cmd: super::rbd_device::DeviceCmd,
    },
    /// Who has the image open for writing (its header's watchers).
    Status {
        /// `[POOL/]IMAGE`.
        image: String,
    },
    /// Time I/O against an image, as `rbd bench`.
    Bench(BenchArgs),
    /// Test tool: write COUNT blocks of 4 KiB, block N at offset N*4096
    /// (wrapping), each 512-byte sector stamped with N; 16 in flight;
    /// prints `acked N` as each completes.
    #[command(hide = true)]
    Stamp {
        /// `[POOL/]IMAGE`.
        image: String,
        /// Blocks to write.
        #[arg(long)]
        count: u64,
        /// Keep the lock when another client asks for it.
        #[arg(long)]
        exclusive: bool,
    },
}

#[derive(Debug, Subcommand)]
enum SnapCmd {
    /// Take a snapshot.
    #[command(alias = "add")]
    Create {
        /// `[POOL/]IMAGE@SNAP`.
        spec: String,
    },
    /// List the image's snapshots.
    #[command(alias = "list")]
    Ls {
        /// `[POOL/]IMAGE`.
        image: String,
    },
    /// Remove a snapshot.
    #[command(alias = "remove")]
    Rm {
        /// `[POOL/]IMAGE@SNAP`.
        spec: String,
    },
    /// Roll the image back to a snapshot.
    #[command(alias = "revert")]
    Rollback {
        /// `[POOL/]IMAGE@SNAP`.
        spec: String,
    },
    /// Protect a snapshot from removal (and allow clones of it).
    Protect {
        /// `[POOL/]IMAGE@SNAP`.
        spec: String,
    },
    /// Unprotect a snapshot.
    Unprotect {
        /// `[POOL/]IMAGE@SNAP`.
        spec: String,
    },
}

#[derive(Debug, Subcommand)]
enum LockCmd {
    /// Who holds the image's lock.
    #[command(alias = "list")]
    Ls {
        /// `[POOL/]IMAGE`.
        image: String,
    },
    /// Break the lock held by LOCKER (as `lock ls` shows it), say of a
    /// client that is gone; a live owner's next write fails until it takes
    /// the lock again.
    #[command(alias = "remove")]
    Rm {
        /// `[POOL/]IMAGE`.
        image: String,
        /// The holder, as `lock ls` prints it (`client.admin 00ab.. 12cd..`).
        locker: String,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum IoType {
    Write,
    Read,
    Rw,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum IoPattern {
    Seq,
    Rand,
}

/// `shoal rbd bench`.
#[derive(Debug, Args)]
struct BenchArgs {
    /// `[POOL/]IMAGE`.
    image: String,
    /// What to do.
    #[arg(long, value_enum)]
    io_type: IoType,
    /// Bytes per I/O.
    #[arg(long, default_value = "4K")]
    io_size: String,
    /// I/Os in flight.
    #[arg(long, default_value_t = 16)]
    io_threads: usize,
    /// Bytes in all.
    #[arg(long, default_value = "1G")]
    io_total: String,
    /// Offsets in order or at random.
    #[arg(long, value_enum, default_value_t = IoPattern::Seq)]
    io_pattern: IoPattern,
    /// With --io-type rw: the percentage of reads (70 unless given).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=100))]
    rw_mix_read: Option<u32>,
}

use super::units::{human_bytes as human, parse_size, percentile};

fn order_of(object_size: Option<&str>) -> anyhow::Result<u8> {
    let Some(s) = object_size else {
        return Ok(fmt::ORDER_DEFAULT);
    };
    let b = parse_size(s, 1)?;
    if !b.is_power_of_two() {
        bail!("object size {s} is not a power of two");
    }
    let order = b.trailing_zeros() as u8;
    if !(fmt::ORDER_MIN..=fmt::ORDER_MAX).contains(&order) {
        bail!("object size {s} is not between 4K and 32M");
    }
    Ok(order)
}

/// Splits `[POOL/]IMAGE[@SNAP]`.
fn spec_at<'a>(
    default_pool: &'a str,
    s: &'a str,
) -> anyhow::Result<(&'a str, &'a str, Option<&'a str>)> {
    let (rest, snap) = match s.split_once('@') {
        Some((r, snap)) if !snap.is_empty() => (r, Some(snap)),
        Some(_) => bail!("{s}: expected [POOL/]IMAGE@SNAP"),
        None => (s, None),
    };
    let (pool, image) = spec(default_pool, rest)?;
    Ok((pool, image, snap))
}

/// Splits `[POOL/]IMAGE@SNAP`, which must name a snapshot.
fn spec_snap<'a>(default_pool: &'a str, s: &'a str) -> anyhow::Result<(&'a str, &'a str, &'a str)> {
    match spec_at(default_pool, s)? {
        (p, i, Some(snap)) => Ok((p, i, snap)),
        _ => bail!("{s}: expected [POOL/]IMAGE@SNAP"),
    }
}

/// Opens `[POOL/]IMAGE[@SNAP]` for reading.
async fn open_view(client: &Client, dp: &str, s: &str) -> anyhow::Result<(Pool, Image)> {
    let (p, name, snap) = spec_at(dp, s)?;
    let pool = pool_of(client, p)?;
    let image = match snap {
        Some(snap) => Image::open_snap(&pool, name, snap).await?,
        None => Image::open_read_only(&pool, name).await?,
    };
    Ok((pool, image))
}

/// Splits `[POOL/]IMAGE` (a snapshot, `@SNAP`, is refused: it takes no changes).
fn spec<'a>(default_pool: &'a str, s: &'a str) -> anyhow::Result<(&'a str, &'a str)> {
    let (pool, image) = match s.split_once('/') {
        Some((p, i)) => (p, i),
        None => (default_pool, s),
    };
    if image.contains('@') {
        bail!("{s}: snapshots are not supported by this command");
    }
    if pool.is_empty() || image.is_empty() {
        bail!("{s}: expected [POOL/]IMAGE");
    }
    Ok((pool, image))
}

/// Runs `shoal rbd`.
pub fn run(a: RbdArgs, ctx: &Ctx) -> anyhow::Result<()> {
    if let RbdCmd::Device { cmd } = a.cmd {
        return super::rbd_device::run(ctx, &a.pool, a.format, cmd);
    }
    super::common::with_data_client(ctx, |client| async move {
        command(&client, &a.pool, a.format, a.cmd).await
    })
}

fn pool_of(client: &Client, name: &str) -> anyhow::Result<Pool> {
    client
        .pool(name)
        .map_err(|_| anyhow::anyhow!("pool {name} does not exist"))
}

impl RbdCmd {
    /// Whether the command prints something `--format` shapes.
    fn prints(&self) -> bool {
        match self {
            RbdCmd::Ls { .. }
            | RbdCmd::Info { .. }
            | RbdCmd::Du { .. }
            | RbdCmd::Children { .. }
            | RbdCmd::Status { .. }
            | RbdCmd::Bench(_)
            | RbdCmd::Device { .. }
            | RbdCmd::Lock {
                cmd: LockCmd::Ls { .. },
            }
            | RbdCmd::Snap {
                cmd: SnapCmd::Ls { .. },
            } => true,
            RbdCmd::Create { .. }
            | RbdCmd::Resize { .. }
            | RbdCmd::Rm { .. }
            | RbdCmd::Mv { .. }
            | RbdCmd::Import { .. }
            | RbdCmd::Export { .. }
            | RbdCmd::Clone { .. }
            | RbdCmd::Flatten { .. }
            | RbdCmd::Stamp { .. }
            | RbdCmd::Lock { .. }
            | RbdCmd::Snap { .. } => false,
        }
    }
}

async fn command(client: &Client, dp: &str, format: Format, cmd: RbdCmd) -> anyhow::Result<()> {
    let mut out = crate::cmd::out::Stdout::new();
    let json = format == Format::Json;
    if json && !cmd.prints() {
        bail!("--format json: this rbd command prints nothing to format");
    }
    match cmd {
        RbdCmd::Create {
            image,
            size,
            object_size,
            data_pool,
            image_feature,
        } => {
            let (p, name) = spec(dp, &image)?;
            let pool = pool_of(client, p)?;
            let features = match image_feature {
                None => fmt::features::DEFAULT,
                Some(list) => {
                    let names: Vec<&str> = list
                        .split(',')
                        .map(str::trim)
                        .filter(|f| !f.is_empty())
                        .collect();
                    if names.is_empty() {
                        bail!("--image-feature names no feature (give e.g. layering)");
                    }
                    names.iter().try_fold(0, |acc, f| {
                        fmt::features::parse(f)
                            .map(|b| acc | b)
                            .with_context(|| format!("unknown image feature {f:?}"))
                    })?
                }
            };
            let o = CreateOptions {
                order: order_of(object_size.as_deref())?,
                features,
                data_pool,
            };
            rbd::create(&pool, name, parse_size(&size, 1 << 20)?, &o).await?;
        }
        RbdCmd::Ls { pool, long } => {
            let p = pool.as_deref().unwrap_or(dp);
            let pool = pool_of(client, p)?;
            let images = rbd::list(&pool).await?;
            if !long {
                if json {
                    let names: Vec<&str> = images.iter().map(|e| e.name.as_str()).collect();
                    writeln!(out, "{}", json!(names))?;
                } else {
                    for e in &images {
                        writeln!(out, "{}", e.name)?;
                    }
                }
                return Ok(());
            }
            let mut rows = Vec::new();
            for e in &images {
                match Image::open_read_only(&pool, &e.name).await {
                    Ok(i) => rows.push(i.info()),
                    Err(shoal_block::Error::NoImage { .. }) => {}
                    Err(err) => return Err(err.into()),
                }
            }
            if json {
                writeln!(out, "{}", serde_json::to_value(&rows)?)?;
            } else {
                writeln!(out, "{:<32} {:>10} {:>5}", "NAME", "SIZE", "FMT")?;
                for r in rows {
                    writeln!(out, "{:<32} {:>10} {:>5}", r.name, human(r.size), 2)?;
                }
            }
        }
        RbdCmd::Info { image } => {
            let (_, i) = open_view(client, dp, &image).await?;
            let info = i.info_full().await?;
            if json {
                writeln!(out, "{}", serde_json::to_value(&info)?)?;
            } else {
                writeln!(out, "rbd image '{}':", info.name)?;
                writeln!(
                    out,
                    "\tsize {} in {} objects",
                    human(info.size),
                    info.objects
                )?;
                writeln!(
                    out,
                    "\torder {} ({} objects)",
                    info.order,
                    human(info.object_size)
                )?;
                writeln!(out, "\tid: {}", info.id)?;
                if let Some(d) = &info.data_pool {
                    writeln!(out, "\tdata_pool: {d}")?;
                }
                writeln!(out, "\tblock_name_prefix: {}", info.block_name_prefix)?;
                writeln!(out, "\tsnapshot_count: {}", info.snapshot_count)?;
                writeln!(out, "\tformat: 2")?;
                writeln!(out, "\tfeatures: {}", info.features.join(", "))?;
                if let (Some(p), Some(o)) = (&info.parent, info.overlap) {
                    writeln!(out, "\tparent: {p}")?;
                    writeln!(out, "\toverlap: {}", human(o))?;
                }
                writeln!(
                    out,
                    "\tcreate_timestamp: {}",
                    super::rados::format_ms(info.created_ms)
                )?;
            }
        }
        RbdCmd::Resize {
            image,
            size,
            allow_shrink,
        } => {
            let (p, name) = spec(dp, &image)?;
            let pool = pool_of(client, p)?;
            let i = Image::open(&pool, name).await?;
            let size = parse_size(&size, 1 << 20)?;
            if size < i.size() && !allow_shrink {
                let old = i.size();
                i.close().await?;
                bail!(
                    "shrinking {name} from {} to {} discards data: add --allow-shrink",
                    human(old),
                    human(size)
                );
            }
            let r = i.resize(size).await;
            i.close().await?;
            r?;
        }
        RbdCmd::Clone {
            parent,
            child,
            object_size,
            data_pool,
        } => {
            let (pp, pname, snap) = spec_snap(dp, &parent)?;
            let (cp, cname) = spec(dp, &child)?;
            let o = CreateOptions {
                order: match object_size {
                    Some(s) => order_of(Some(&s))?,
                    None => 0,
                },
                features: fmt::features::DEFAULT,
                data_pool,
            };
            let (ppool, cpool) = (pool_of(client, pp)?, pool_of(client, cp)?);
            shoal_block::layering::clone(&ppool, pname, snap, &cpool, cname, &o).await?;
        }
        RbdCmd::Children { spec } => {
            let (p, name, snap) = spec_snap(dp, &spec)?;
            let pool = pool_of(client, p)?;
            let children = shoal_block::layering::children(&pool, name, snap).await?;
            if json {
                writeln!(out, "{}", serde_json::to_value(&children)?)?;
            } else {
                for c in children {
                    writeln!(out, "{}/{}", c.pool, c.name)?;
                }
            }
        }
        RbdCmd::Flatten { image } => {
            let (p, name) = spec(dp, &image)?;
            let i = Image::open(&pool_of(client, p)?, name).await?;
            let r = i.flatten().await;
            i.close().await?;
            r?;
        }
        RbdCmd::Rm { image } => {
            let (p, name) = spec(dp, &image)?;
            rbd::remove(&pool_of(client, p)?, name).await?;
        }
        RbdCmd::Mv { from, to } => {
            let (p, name) = spec(dp, &from)?;
            let (p2, to) = spec(p, &to)?;
            if p2 != p {
                bail!("an image is renamed within its pool ({p}), not into {p2}");
            }
            rbd::rename(&pool_of(client, p)?, name, to).await?;
        }
        RbdCmd::Du { image } => {
            let (p, names) = match &image {
                Some(s) => {
                    let (p, n) = spec(dp, s)?;
                    (p, vec![n.to_string()])
                }
                None => {
                    let pool = pool_of(client, dp)?;
                    let all = rbd::list(&pool)
                        .await?
                        .into_iter()
                        .map(|e| e.name)
                        .collect();
                    (dp, all)
                }
            };
            let pool = pool_of(client, p)?;
            let mut rows = Vec::new();
            for n in names {
                let i = Image::open_read_only(&pool, &n).await?;
                rows.push((n, i.du().await?));
            }
            if json {
                let v: Vec<_> = rows
                    .iter()
                    .map(|(n, d)| json!({"name": n, "provisioned_size": d.provisioned, "used_size": d.used, "objects": d.objects}))
                    .collect();
                writeln!(out, "{}", json!({"images": v}))?;
            } else {
                writeln!(out, "{:<32} {:>12} {:>12}", "NAME", "PROVISIONED", "USED")?;
                for (n, d) in rows {
                    writeln!(
                        out,
                        "{n:<32} {:>12} {:>12}",
                        human(d.provisioned),
                        human(d.used)
                    )?;
                }
            }
        }
        RbdCmd::Import {
            path,
            image,
            object_size,
            data_pool,
            no_progress,
        } => {
            let default_name = std::path::Path::new(&path)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .filter(|_| path != "-");
            let image = match (image, default_name) {
                (Some(i), _) => i,
                (None, Some(n)) => n,
                (None, None) => bail!("importing from standard input needs an image name"),
            };
            let (p, name) = spec(dp, &image)?;
            let pool = pool_of(client, p)?;
            let o = CreateOptions {
                order: order_of(object_size.as_deref())?,
                data_pool,
                ..CreateOptions::default()
            };
            import(&pool, name, &path, &o, !no_progress).await?;
        }
        RbdCmd::Export {
            image,
            path,
            no_progress,
        } => {
            let (_, view) = open_view(client, dp, &image).await?;
            export(view, &path, !no_progress).await?;
        }
        RbdCmd::Snap { cmd } => snap(client, dp, json, cmd, &mut out).await?,
        RbdCmd::Lock {
            cmd: LockCmd::Ls { image },
        } => {
            let (p, name) = spec(dp, &image)?;
            let pool = pool_of(client, p)?;
            let i = Image::open_read_only(&pool, name).await?;
            let owner = shoal_block::lock::owner(&pool, i.id()).await?;
            if json {
                let v: Vec<_> = owner
                    .iter()
                    .map(|o| {
                        let mut f = o.split(' ');
                        json!({"locker": f.next(), "id": o, "exclusive": true})
                    })
                    .collect();
                writeln!(out, "{}", json!(v))?;
            } else if let Some(o) = owner {
                writeln!(out, "There is 1 exclusive lock on this image.")?;
                let mut f = o.splitn(2, ' ');
                let who = f.next().unwrap_or("");
                writeln!(out, "{:<24} ID", "Locker")?;
                writeln!(out, "{who:<24} {}", f.next().unwrap_or(""))?;
            }
        }
        RbdCmd::Lock {
            cmd: LockCmd::Rm { image, locker },
        } => {
            let (p, name) = spec(dp, &image)?;
            let pool = pool_of(client, p)?;
            let i = Image::open_read_only(&pool, name).await?;
            match shoal_block::lock::owner(&pool, i.id()).await? {
                Some(o) if o == locker => shoal_block::lock::break_lock(&pool, i.id(), &o).await?,
                Some(o) => bail!("image {name} is locked by {o}, not {locker}"),
                None => bail!("image {name} is not locked"),
            }
        }
        RbdCmd::Device { .. } => bail!("device commands run without a cluster client"),
        RbdCmd::Status { image } => {
            let (p, name) = spec(dp, &image)?;
            let pool = pool_of(client, p)?;
            let i = Image::open_read_only(&pool, name).await?;
            let watchers = pool.list_watchers(&fmt::header_object(i.id())).await?;
            if json {
                let v: Vec<_> = watchers
                    .iter()
                    .map(|w| json!({"address": w.addr, "client": w.entity, "cookie": w.cookie}))
                    .collect();
                writeln!(out, "{}", json!({ "watchers": v }))?;
            } else if watchers.is_empty() {
                writeln!(out, "Watchers: none")?;
            } else {
                writeln!(out, "Watchers:")?;
                for w in watchers {
                    writeln!(out, "\twatcher={} {} cookie={}", w.addr, w.entity, w.cookie)?;
                }
            }
        }
        RbdCmd::Bench(b) => bench(client, dp, format, b).await?,
        RbdCmd::Stamp {
            image,
            count,
            exclusive,
        } => {
            let (p, name) = spec(dp, &image)?;
            let pool = pool_of(client, p)?;
            stamp(&pool, name, count, exclusive).await?;
        }
    }
    Ok(())
}

/// Prints `Importing image: N% complete...` as `rbd` does.
struct Progress {
    what: &'static str,
    total: u64,
    shown: Option<u64>,
    on: bool,
}

impl Progress {
    fn new(what: &'static str, total: u64, on: bool) -> Progress {
        use std::io::IsTerminal;
        Progress {
            what,
            total,
            shown: None,
            // As `rbd`, on a terminal only: logs get no carriage returns.
            on: on && std::io::stderr().is_terminal(),
        }
    }

    fn at(&mut self, done: u64) {
        if !self.on || self.total == 0 {
            return;
        }
        let pct = (done.saturating_mul(100) / self.total).min(100);
        if self.shown != Some(pct) {
            self.shown = Some(pct);
            eprint!("\r{}: {pct}% complete...", self.what);
        }
    }

    fn done(self) {
        if self.on {
            eprintln!("\r{}: 100% complete...done.", self.what);
        }
    }
}

/// Reads up to `buf.len()` bytes, as many as the reader gives before its end.
fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

async fn import(
    pool: &Pool,
    name: &str,
    path: &str,
    o: &CreateOptions,
    progress: bool,
) -> anyhow::Result<()> {
    let (mut input, size): (Box<dyn Read + Send>, Option<u64>) = if path == "-" {
        (Box::new(std::io::stdin()), None)
    } else {
        let mut f = std::fs::File::open(path).with_context(|| format!("opening {path}"))?;
        // A block device's metadata says 0 bytes: its end says its size.
        let len = {
            use std::io::{Seek, SeekFrom};
            let end = f.seek(SeekFrom::End(0))?;
            f.seek(SeekFrom::Start(0))?;
            end
        };
        (Box::new(f), Some(len))
    };
    rbd::create(pool, name, size.unwrap_or(0), o).await?;
    let image = Image::open(pool, name).await?;
    let r = import_into(&image, &mut *input, size, progress).await;
    let closed = image.close().await;
    if let Err(e) = r {
        // Leave nothing half-made behind.
        let _ = rbd::remove(pool, name).await;
        return Err(e);
    }
    Ok(closed?)
}

async fn import_into(
    image: &Image,
    input: &mut (dyn Read + Send),
    size: Option<u64>,
    progress: bool,
) -> anyhow::Result<()> {
    let chunk = image.header().object_size() as usize;
    let mut bar = Progress::new(
        "Importing image",
        size.unwrap_or(0),
        progress && size.is_some(),
    );
    let mut set = tokio::task::JoinSet::new();
    let mut at = 0u64;
    loop {
        let mut buf = vec![0u8; chunk];
        let n = tokio::task::block_in_place(|| read_full(input, &mut buf))?;
        if n == 0 {
            break;
        }
        buf.truncate(n);
        if size.is_none() {
            // Standard input: the image grows as the data comes.
            image.resize(at + n as u64).await?;
        }
        if buf.iter().any(|b| *b != 0) {
            let image = image.clone();
            let data = Bytes::from(buf);
            set.spawn(async move { image.write(at, data).await });
            while set.len() >= INFLIGHT {
                if let Some(r) = set.join_next().await {
                    r??;
                }
            }
        }
        at += n as u64;
        bar.at(at);
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    image.flush().await?;
    bar.done();
    Ok(())
}

async fn snap(
    client: &Client,
    dp: &str,
    json: bool,
    cmd: SnapCmd,
    out: &mut crate::cmd::out::Stdout,
) -> anyhow::Result<()> {
    let open = |s: &str| -> anyhow::Result<(Pool, String, String)> {
        let (p, image, snap) = spec_snap(dp, s)?;
        Ok((pool_of(client, p)?, image.to_string(), snap.to_string()))
    };
    match cmd {
        SnapCmd::Ls { image } => {
            let (p, name) = spec(dp, &image)?;
            let pool = pool_of(client, p)?;
            let i = Image::open_read_only(&pool, name).await?;
            let snaps = i.snapshots();
            if json {
                writeln!(out, "{}", serde_json::to_value(&snaps)?)?;
            } else if !snaps.is_empty() {
                writeln!(
                    out,
                    "{:>6}  {:<24} {:>10}  {:<9}  TIMESTAMP",
                    "SNAPID", "NAME", "SIZE", "PROTECTED"
                )?;
                for s in snaps {
                    writeln!(
                        out,
                        "{:>6}  {:<24} {:>10}  {:<9}  {}",
                        s.id,
                        s.name,
                        human(s.size),
                        if s.protected { "yes" } else { "no" },
                        super::rados::format_ms(s.created_ms)
                    )?;
                }
            }
        }
        SnapCmd::Create { spec } => {
            let (pool, image, snap) = open(&spec)?;
            let i = Image::open(&pool, &image).await?;
            let r = i.snap_create(&snap).await;
            i.close().await?;
            r?;
        }
        SnapCmd::Rm { spec } => {
            let (pool, image, snap) = open(&spec)?;
            let i = Image::open(&pool, &image).await?;
            let r = i.snap_remove(&snap).await;
            i.close().await?;
            r?;
        }
        SnapCmd::Rollback { spec } => {
            let (pool, image, snap) = open(&spec)?;
            let i = Image::open(&pool, &image).await?;
            let r = i.snap_rollback(&snap).await;
            i.close().await?;
            r?;
            eprintln!("Rolling back to snapshot: 100% complete...done.");
        }
        SnapCmd::Protect { spec } => protect(&open(&spec)?, true).await?,
        SnapCmd::Unprotect { spec } => protect(&open(&spec)?, false).await?,
    }
    Ok(())
}

async fn protect(target: &(Pool, String, String), on: bool) -> anyhow::Result<()> {
    let (pool, image, snap) = target;
    let i = Image::open(pool, image).await?;
    let r = i.snap_protect(snap, on).await;
    i.close().await?;
    Ok(r?)
}

async fn export(image: Image, path: &str, progress: bool) -> anyhow::Result<()> {
    let size = image.size();
    let chunk = image.header().object_size();
    let (mut output, seekable): (Box<dyn WriteSeek>, bool) = if path == "-" {
        (Box::new(NoSeek(std::io::stdout())), false)
    } else {
        let f = std::fs::File::create(path).with_context(|| format!("creating {path}"))?;
        (Box::new(f), true)
    };
    let mut bar = Progress::new("Exporting image", size, progress);
    let mut pending = std::collections::VecDeque::new();
    let mut next = 0u64;
    let mut written = 0u64;
    loop {
        while pending.len() < INFLIGHT && next < size {
            let len = chunk.min(size - next);
            let image = image.clone();
            let at = next;
            pending.push_back(tokio::spawn(async move { image.read(at, len).await }));
            next += len;
        }
        let Some(h) = pending.pop_front() else { break };
        let data = h.await??;
        if seekable && data.iter().all(|b| *b == 0) {
            output.seek(SeekFrom::Current(data.len() as i64))?;
        } else {
            output.write_all(&data)?;
        }
        written += data.len() as u64;
        bar.at(written);
    }
    if seekable {
        output.set_len(size)?;
    }
    output.flush()?;
    bar.done();
    Ok(())
}

trait WriteSeek: Write + Seek + Send {
    fn set_len(&mut self, len: u64) -> std::io::Result<()>;
}

impl WriteSeek for std::fs::File {
    fn set_len(&mut self, len: u64) -> std::io::Result<()> {
        std::fs::File::set_len(self, len)
    }
}

/// Standard output: written in order, never seeked.
struct NoSeek(std::io::Stdout);

impl Write for NoSeek {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl Seek for NoSeek {
    fn seek(&mut self, _: SeekFrom) -> std::io::Result<u64> {
        Err(std::io::Error::other("standard output cannot seek"))
    }
}

impl WriteSeek for NoSeek {
    fn set_len(&mut self, _: u64) -> std::io::Result<()> {
        Ok(())
    }
}

/// One stamped sector: `STAMP`, the block number, the sector's index, and
/// a fill derived from both (so a torn or misplaced sector shows).
pub fn stamp_sector(block: u64, sector: u64) -> [u8; 512] {
    let mut s = [0u8; 512];
    s[..8].copy_from_slice(b"STAMP---");
    s[8..16].copy_from_slice(&block.to_le_bytes());
    s[16..24].copy_from_slice(&sector.to_le_bytes());
    for (i, b) in s[24..].iter_mut().enumerate() {
        *b = (block.wrapping_mul(31).wrapping_add(sector * 7 + i as u64) % 251) as u8;
    }
    s
}

async fn stamp(pool: &Pool, name: &str, count: u64, exclusive: bool) -> anyhow::Result<()> {
    let image = Image::open(pool, name).await?;
    image.set_exclusive(exclusive);
    image.acquire_lock().await?;
    let blocks = image.size() / 4096;
    if blocks == 0 {
        bail!("image {name} is smaller than one block");
    }
    outln!("locked");
    crate::cmd::out::flush();
    let mut set = tokio::task::JoinSet::new();
    for n in 0..count {
        let mut buf = Vec::with_capacity(4096);
        for sector in 0..8 {
            buf.extend_from_slice(&stamp_sector(n, sector));
        }
        let image = image.clone();
        set.spawn(async move {
            image
                .write((n % blocks) * 4096, Bytes::from(buf))
                .await
                .map(|()| n)
        });
        while set.len() >= 16 {
            if let Some(r) = set.join_next().await {
                outln!("acked {}", r??);
                crate::cmd::out::flush();
            }
        }
    }
    while let Some(r) = set.join_next().await {
        outln!("acked {}", r??);
    }
    image.close().await?;
    Ok(())
}

async fn bench(client: &Client, dp: &str, format: Format, b: BenchArgs) -> anyhow::Result<()> {
    let (p, name) = spec(dp, &b.image)?;
    let pool = pool_of(client, p)?;
    let io_size = parse_size(&b.io_size, 1)?;
    let total = parse_size(&b.io_total, 1)?;
    if io_size == 0 || b.io_threads == 0 || total < io_size {
        bail!("--io-size and --io-threads must be positive and --io-total at least --io-size");
    }
    if b.rw_mix_read.is_some() && b.io_type != IoType::Rw {
        bail!("--rw-mix-read applies to --io-type rw only");
    }
    if total % io_size != 0 {
        bail!("--io-total ({total} bytes) is not a whole number of --io-size ({io_size} bytes)");
    }
    let image = Image::open(&pool, name).await?;
    let size = image.size();
    if size < io_size {
        bail!("image {name} ({size} bytes) is smaller than one I/O");
    }
    if b.io_type != IoType::Read {
        image.acquire_lock().await?;
    }
    let slots = size / io_size;
    let ops = total / io_size;
    let plain = format == Format::Plain;
    if plain {
        outln!(
            "bench  type {} io_size {io_size} io_threads {} bytes {total} pattern {}",
            match b.io_type {
                IoType::Write => "write",
                IoType::Read => "read",
                IoType::Rw => "readwrite",
            },
            b.io_threads,
            match b.io_pattern {
                IoPattern::Seq => "sequential",
                IoPattern::Rand => "random",
            }
        );
        outln!("  SEC       OPS   OPS/SEC   BYTES/SEC");
    }
    let issued = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let payload = Bytes::from(vec![0x5au8; io_size as usize]);
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for t in 0..b.io_threads {
        let (image, issued, done, payload) = (
            image.clone(),
            Arc::clone(&issued),
            Arc::clone(&done),
            payload.clone(),
        );
        let (pattern, io_type, mix) = (b.io_pattern, b.io_type, b.rw_mix_read.unwrap_or(70));
        set.spawn(async move {
            let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (t as u64 + 1).wrapping_mul(0x2545_F491);
            let mut lats = Vec::new();
            loop {
                let i = issued.fetch_add(1, Ordering::Relaxed);
                if i >= ops {
                    break;
                }
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let slot = match pattern {
                    IoPattern::Seq => i % slots,
                    IoPattern::Rand => rng % slots,
                };
                let read = match io_type {
                    IoType::Read => true,
                    IoType::Write => false,
                    IoType::Rw => (rng >> 32) % 100 < u64::from(mix),
                };
                let t0 = Instant::now();
                if read {
                    image.read(slot * io_size, io_size).await?;
                } else {
                    image.write(slot * io_size, payload.clone()).await?;
                }
                lats.push(t0.elapsed().as_secs_f64());
                done.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(lats)
        });
    }
    let ticker = {
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            let mut last = 0u64;
            let mut sec = 0u64;
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                sec += 1;
                let now = done.load(Ordering::Relaxed);
                if plain {
                    outln!(
                        "{sec:>5} {now:>9} {:>9.2} {:>10}/s",
                        (now - last) as f64,
                        human((now - last) * io_size)
                    );
                }
                last = now;
            }
        })
    };
    let mut lats = Vec::new();
    let mut first_err = None;
    while let Some(r) = set.join_next().await {
        match r? {
            Ok(l) => lats.extend(l),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    ticker.abort();
    let elapsed = start.elapsed().as_secs_f64();
    image.close().await?;
    if let Some(e) = first_err {
        return Err(e.context("bench I/O failed"));
    }
    lats.sort_by(f64::total_cmp);
    let n = lats.len() as u64;
    let pct = |p: f64| percentile(&lats, p);
    let iops = n as f64 / elapsed;
    let bw = iops * io_size as f64;
    if plain {
        outln!(
            "elapsed: {elapsed:.2}   ops: {n}   ops/sec: {iops:.2}   bytes/sec: {}/s",
            human(bw as u64)
        );
        outln!(
            "latency: p50 {:.3} ms   p99 {:.3} ms   max {:.3} ms",
            pct(0.5) * 1e3,
            pct(0.99) * 1e3,
            pct(1.0) * 1e3
        );
    } else {
        outln!(
            "{}",
            json!({
                "io_type": format!("{:?}", b.io_type).to_lowercase(),
                "io_pattern": format!("{:?}", b.io_pattern).to_lowercase(),
                "io_size": io_size, "io_threads": b.io_threads,
                "elapsed_s": elapsed, "ops": n, "ops_per_s": iops, "bytes_per_s": bw,
                "latency_p50_s": pct(0.5), "latency_p99_s": pct(0.99), "latency_max_s": pct(1.0),
            })
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn sizes_print_and_orders_parse_as_rbd_does() {
        assert_eq!(human(10 << 30), "10 GiB");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(order_of(Some("4M")).unwrap(), 22);
        assert!(order_of(Some("3M")).is_err());
        assert!(order_of(Some("64M")).is_err());
        assert_eq!(spec("rbd", "p/i").unwrap(), ("p", "i"));
        assert_eq!(spec("rbd", "i").unwrap(), ("rbd", "i"));
        assert!(spec("rbd", "i@s").is_err());
    }
}

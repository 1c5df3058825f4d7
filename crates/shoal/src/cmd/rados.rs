//! `shoal rados -p POOL ...`: objects from the command line, as Ceph's
//! `rados` tool: put, get and append stream files (or stdin/stdout) in
//! chunks with several in flight; xattrs and omap; listing.

use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::{Args, Subcommand};
use shoal_client::{Client, ClientOptions, Error, Pool};

use super::common::{Ctx, runtime};

/// Bytes per write or read when streaming a file.
const CHUNK: usize = 4 << 20;
/// Chunks in flight when streaming.
const INFLIGHT: usize = 4;

/// `shoal rados`.
#[derive(Debug, Args)]
pub struct RadosArgs {
    /// The pool.
    #[arg(short = 'p', long)]
    pool: String,
    /// The namespace ("" for the default).
    #[arg(short = 'N', long, default_value = "")]
    namespace: String,
    /// This client instance's id in request ids (default: random). A
    /// restarted client given the same id resends without applying twice.
    #[arg(long, hide = true)]
    client_inc: Option<u64>,
    #[command(subcommand)]
    cmd: RadosCmd,
}

#[derive(Debug, Subcommand)]
enum RadosCmd {
    /// Write a file (`-` for stdin) as an object, replacing it.
    Put {
        /// Object.
        obj: String,
        /// File, or `-`.
        file: String,
    },
    /// Read an object into a file (`-` for stdout).
    Get {
        /// Object.
        obj: String,
        /// File, or `-`.
        file: String,
    },
    /// Append a file (`-` for stdin) to an object.
    Append {
        /// Object.
        obj: String,
        /// File, or `-`.
        file: String,
    },
    /// Remove objects.
    Rm {
        /// Objects.
        #[arg(required = true)]
        objs: Vec<String>,
    },
    /// Size and modification time.
    Stat {
        /// Object.
        obj: String,
    },
    /// List the pool's objects (with their namespace when not the default).
    Ls,
    /// Set an object's size.
    Truncate {
        /// Object.
        obj: String,
        /// New size in bytes.
        size: u64,
    },
    /// Copy an object within the pool (data, xattrs, omap).
    Cp {
        /// Source.
        src: String,
        /// Destination.
        dst: String,
    },
    /// Set an xattr.
    Setxattr {
        /// Object.
        obj: String,
        /// Name.
        name: String,
        /// Value.
        value: String,
    },
    /// Print an xattr.
    Getxattr {
        /// Object.
        obj: String,
        /// Name.
        name: String,
    },
    /// List xattr names.
    Listxattr {
        /// Object.
        obj: String,
    },
    /// Remove an xattr.
    Rmxattr {
        /// Object.
        obj: String,
        /// Name.
        name: String,
    },
    /// Set an omap value.
    Setomapval {
        /// Object.
        obj: String,
        /// Key.
        key: String,
        /// Value.
        value: String,
    },
    /// Print an omap value (or write it to FILE).
    Getomapval {
        /// Object.
        obj: String,
        /// Key.
        key: String,
        /// File to write the value to.
        file: Option<String>,
    },
    /// List omap keys.
    Listomapkeys {
        /// Object.
        obj: String,
    },
    /// List omap keys and values.
    Listomapvals {
        /// Object.
        obj: String,
    },
    /// Remove an omap key.
    Rmomapkey {
        /// Object.
        obj: String,
        /// Key.
        key: String,
    },
    /// Test tool: append `N;` for N in 1..=COUNT, op N with request id N,
    /// one at a time (with --client-inc, a rerun after a kill resends).
    #[command(hide = true)]
    AppendSeq {
        /// Object.
        obj: String,
        /// Last N.
        #[arg(long)]
        count: u64,
    },
}

/// Runs `shoal rados`.
pub fn run(a: RadosArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let rt = runtime()?;
    rt.block_on(async {
        let mut opts = ClientOptions::from_loaded(&ctx.config, &ctx.name)?;
        opts.client_inc = a.client_inc;
        let client = Client::connect(opts).await?;
        let pool = client.pool(&a.pool)?.with_namespace(&a.namespace);
        let r = command(&pool, a.cmd).await;
        client.shutdown().await;
        r
    })
}

async fn command(pool: &Pool, cmd: RadosCmd) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match cmd {
        RadosCmd::Put { obj, file } => {
            pool.write_full(&obj, Bytes::new()).await?;
            upload(pool, &obj, &file, 0).await?;
        }
        RadosCmd::Append { obj, file } => {
            let start = match pool.stat(&obj).await {
                Ok(s) => s.size,
                Err(Error::NotFound(_)) => 0,
                Err(e) => return Err(e.into()),
            };
            upload(pool, &obj, &file, start).await?;
        }
        RadosCmd::Get { obj, file } => download(pool, &obj, &file).await?,
        RadosCmd::Rm { objs } => {
            for o in objs {
                pool.remove(&o)
                    .await
                    .with_context(|| format!("removing {o}"))?;
            }
        }
        RadosCmd::Stat { obj } => {
            let s = pool.stat(&obj).await?;
            writeln!(
                out,
                "{}/{obj} mtime {}, size {}",
                pool.name(),
                format_ms(s.mtime_ms),
                s.size
            )?;
        }
        RadosCmd::Ls => {
            for e in pool.list_all().await? {
                if e.nspace.is_empty() {
                    writeln!(out, "{}", e.name)?;
                } else {
                    writeln!(out, "{}\t{}", e.nspace, e.name)?;
                }
            }
        }
        RadosCmd::Truncate { obj, size } => pool.truncate(&obj, size).await?,
        RadosCmd::Cp { src, dst } => copy(pool, &src, &dst).await?,
        RadosCmd::Setxattr { obj, name, value } => pool.setxattr(&obj, &name, value).await?,
        RadosCmd::Getxattr { obj, name } => {
            out.write_all(&pool.getxattr(&obj, &name).await?)?;
        }
        RadosCmd::Listxattr { obj } => {
            for name in pool.getxattrs(&obj).await?.keys() {
                writeln!(out, "{name}")?;
            }
        }
        RadosCmd::Rmxattr { obj, name } => pool.rmxattr(&obj, &name).await?,
        RadosCmd::Setomapval { obj, key, value } => {
            pool.omap_set(&obj, &[(key.as_bytes(), value.as_bytes())])
                .await?;
        }
        RadosCmd::Getomapval { obj, key, file } => {
            let got = pool.omap_get_vals_by_keys(&obj, &[key.as_bytes()]).await?;
            let Some(v) = got.get(key.as_bytes()) else {
                bail!("no key {key:?} in the omap of {obj}");
            };
            match file {
                Some(f) => std::fs::write(&f, v).with_context(|| format!("writing {f}"))?,
                None => {
                    writeln!(out, "value ({} bytes) :", v.len())?;
                    out.write_all(v)?;
                    writeln!(out)?;
                }
            }
        }
        RadosCmd::Listomapkeys { obj } => {
            for (k, _) in omap_all(pool, &obj, false).await? {
                writeln!(out, "{}", String::from_utf8_lossy(&k))?;
            }
        }
        RadosCmd::Listomapvals { obj } => {
            for (k, v) in omap_all(pool, &obj, true).await? {
                writeln!(
                    out,
                    "{}\nvalue ({} bytes) :",
                    String::from_utf8_lossy(&k),
                    v.len()
                )?;
                out.write_all(&v)?;
                writeln!(out)?;
            }
        }
        RadosCmd::Rmomapkey { obj, key } => pool.omap_rm_keys(&obj, &[key.as_bytes()]).await?,
        RadosCmd::AppendSeq { obj, count } => {
            for n in 1..=count {
                let o = shoal_client::OpOptions {
                    tid: Some(n),
                    timeout: None,
                };
                let op = shoal_client::Op::new().append(format!("{n};"));
                pool.operate_with(&obj, op, o).await.map_err(|e| e.error)?;
                writeln!(out, "{n}")?;
                out.flush()?;
            }
        }
    }
    Ok(())
}

fn format_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

async fn omap_all(pool: &Pool, obj: &str, values: bool) -> anyhow::Result<Vec<(Bytes, Bytes)>> {
    let mut all = Vec::new();
    let mut after = Vec::new();
    loop {
        let page = if values {
            pool.omap_get_vals(obj, &after, b"", 1000).await?
        } else {
            pool.omap_get_keys(obj, &after, b"", 1000).await?
        };
        if let Some((k, _)) = page.entries.last() {
            after = k.to_vec();
        }
        all.extend(page.entries);
        if !page.more {
            return Ok(all);
        }
    }
}

/// A progress line on stderr, only when it is a terminal.
struct Progress {
    on: bool,
    start: Instant,
    total: Option<u64>,
}

impl Progress {
    fn new(total: Option<u64>) -> Progress {
        Progress {
            on: std::io::stderr().is_terminal(),
            start: Instant::now(),
            total,
        }
    }

    fn show(&self, done: u64) {
        if !self.on {
            return;
        }
        let mb_s = done as f64 / self.start.elapsed().as_secs_f64().max(1e-3) / 1e6;
        let line = match self.total {
            Some(t) if t > 0 => {
                let width = 30;
                let filled = (done.min(t) * width / t) as usize;
                format!(
                    "[{}{}] {:>5.1}% {:.1} MB/s",
                    "#".repeat(filled),
                    " ".repeat(width as usize - filled),
                    done as f64 * 100.0 / t as f64,
                    mb_s
                )
            }
            _ => format!("{} bytes, {mb_s:.1} MB/s", done),
        };
        eprint!("\r{line}");
    }

    fn finish(&self) {
        if self.on {
            eprintln!();
        }
    }
}

fn open_input(file: &str) -> anyhow::Result<(Box<dyn Read>, Option<u64>)> {
    if file == "-" {
        return Ok((Box::new(std::io::stdin().lock()), None));
    }
    let f = std::fs::File::open(Path::new(file)).with_context(|| format!("opening {file}"))?;
    let len = f.metadata().ok().map(|m| m.len());
    Ok((Box::new(f), len))
}

/// Reads up to CHUNK bytes (less only at the end of the input).
fn read_chunk(r: &mut dyn Read) -> anyhow::Result<Vec<u8>> {
    let mut buf = vec![0u8; CHUNK];
    let mut n = 0;
    while n < CHUNK {
        let got = r.read(&mut buf[n..])?;
        if got == 0 {
            break;
        }
        n += got;
    }
    buf.truncate(n);
    Ok(buf)
}

/// Writes the input at `start` onwards, CHUNK bytes per write, INFLIGHT at once.
async fn upload(pool: &Pool, obj: &str, file: &str, start: u64) -> anyhow::Result<()> {
    let (mut input, total) = open_input(file)?;
    let progress = Progress::new(total);
    let mut off = start;
    let mut pending = tokio::task::JoinSet::new();
    loop {
        let chunk = read_chunk(&mut *input)?;
        if chunk.is_empty() {
            break;
        }
        let len = chunk.len() as u64;
        let (p, o, at) = (pool.clone(), obj.to_string(), off);
        pending.spawn(async move { p.write(&o, at, chunk).await });
        off += len;
        while pending.len() >= INFLIGHT {
            if let Some(r) = pending.join_next().await {
                r??;
            }
        }
        progress.show(off - start);
    }
    while let Some(r) = pending.join_next().await {
        r??;
    }
    progress.finish();
    Ok(())
}

async fn download(pool: &Pool, obj: &str, file: &str) -> anyhow::Result<()> {
    let size = pool.stat(obj).await?.size;
    let mut output: Box<dyn Write> = if file == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(std::fs::File::create(file).with_context(|| format!("creating {file}"))?)
    };
    let progress = Progress::new(Some(size));
    let mut reads = std::collections::VecDeque::new();
    let mut next = 0u64;
    let mut written = 0u64;
    while written < size {
        while next < size && reads.len() < INFLIGHT {
            let (p, o, at) = (pool.clone(), obj.to_string(), next);
            let len = (CHUNK as u64).min(size - next);
            reads.push_back(tokio::spawn(async move { p.read(&o, at, len).await }));
            next += len;
        }
        let Some(r) = reads.pop_front() else { break };
        let data = r.await??;
        if data.is_empty() {
            bail!("{obj} shrank while being read");
        }
        output.write_all(&data)?;
        written += data.len() as u64;
        progress.show(written);
    }
    output.flush()?;
    progress.finish();
    Ok(())
}

async fn copy(pool: &Pool, src: &str, dst: &str) -> anyhow::Result<()> {
    let size = pool.stat(src).await?.size;
    pool.write_full(dst, Bytes::new()).await?;
    let mut off = 0;
    while off < size {
        let len = (CHUNK as u64).min(size - off);
        let data = pool.read(src, off, len).await?;
        if data.is_empty() {
            break;
        }
        pool.write(dst, off, data.clone()).await?;
        off += data.len() as u64;
    }
    for (name, value) in pool.getxattrs(src).await? {
        pool.setxattr(dst, &name, value).await?;
    }
    let header = pool.omap_get_header(src).await?;
    if !header.is_empty() {
        pool.omap_set_header(dst, header).await?;
    }
    let entries = omap_all(pool, src, true).await?;
    for batch in entries.chunks(1000) {
        pool.omap_set(dst, batch).await?;
    }
    Ok(())
}

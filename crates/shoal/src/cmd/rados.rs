//! `shoal rados -p POOL ...`: objects from the command line, as Ceph's
//! `rados` tool: put, get and append stream files (or stdin/stdout) in
//! chunks with several in flight; xattrs and omap; listing.

use std::io::Write;

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::{Args, Subcommand};
use shoal_client::{Client, ClientOptions, Pool};

use super::common::{Ctx, runtime};
use stream::{Target, copy, download, omap_all, upload};

mod stream;

/// Bytes per write or read when streaming a file.
const CHUNK: usize = 4 << 20;
/// Chunks in flight when streaming.
const INFLIGHT: usize = 4;

/// `shoal rados`.
#[derive(Debug, Args)]
pub struct RadosArgs {
    /// The pool (before or after the command: `rados -p rbd ls`, `ls -p rbd`).
    #[arg(short = 'p', long, global = true)]
    pool: Option<String>,
    /// The namespace ("" for the default).
    #[arg(short = 'N', long, default_value = "", global = true)]
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
    /// List the objects of the namespace (`-N`; the default one if not given).
    Ls {
        /// Every namespace: one `NAMESPACE<TAB>NAME` line per object.
        #[arg(long)]
        all: bool,
    },
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
    /// Set many omap values: one `KEY<TAB>VALUE` per line of FILE (`-`:
    /// standard input), sent in ops of at most 256 KiB each.
    Setomapvals {
        /// Object.
        obj: String,
        /// The entries.
        file: String,
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
    /// Remove the objects a `shoal bench ... write --no-cleanup` run left
    /// (as `rados -p POOL cleanup`).
    Cleanup,
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
    let Some(pool_name) = a.pool else {
        bail!("which pool? shoal rados -p POOL COMMAND");
    };
    if let RadosCmd::Cleanup = a.cmd {
        return super::bench_rados::run_cleanup(&pool_name, ctx);
    }
    let rt = runtime()?;
    rt.block_on(async {
        let mut opts = ClientOptions::from_loaded(&ctx.config, &ctx.name)?;
        opts.client_inc = a.client_inc;
        let client = Client::connect(opts).await?;
        let pool = client
            .pool_latest(&pool_name)
            .await?
            .with_namespace(&a.namespace);
        let r = command(&pool, a.cmd).await;
        client.shutdown().await;
        r
    })
}

async fn command(pool: &Pool, cmd: RadosCmd) -> anyhow::Result<()> {
    let mut out = crate::cmd::out::Stdout::new();
    match cmd {
        RadosCmd::Put { obj, file } => {
            pool.write_full(&obj, Bytes::new()).await?;
            upload(pool, &obj, &file, Target::At(0)).await?;
        }
        RadosCmd::Append { obj, file } => upload(pool, &obj, &file, Target::End).await?,
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
        RadosCmd::Ls { all } => {
            // Page by page: a pool's names need not fit in memory.
            let mut cur = shoal_client::ListCursor::start();
            while !cur.is_done() {
                let (page, next) = pool.list(&cur, 1024).await?;
                for e in page {
                    if all {
                        writeln!(out, "{}\t{}", e.nspace, e.name)?;
                    } else if e.nspace == pool.namespace() {
                        writeln!(out, "{}", e.name)?;
                    }
                }
                cur = next;
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
        RadosCmd::Setomapvals { obj, file } => {
            let n = set_omap_vals(pool, &obj, &file).await?;
            writeln!(out, "{n} omap values set")?;
        }
        RadosCmd::Getomapval { obj, key, file } => {
            let got = pool.omap_get_vals_by_keys(&obj, &[key.as_bytes()]).await?;
            let Some(v) = got.get(key.as_bytes()) else {
                bail!("No such key: {}/{obj}/{key}", pool.name());
            };
            match file {
                Some(f) => std::fs::write(&f, v).with_context(|| format!("writing {f}"))?,
                None => writeln!(out, "value ({} bytes) :\n{}", v.len(), hexdump(v))?,
            }
        }
        RadosCmd::Listomapkeys { obj } => {
            for (k, _) in omap_all(pool, &obj, false).await? {
                writeln!(out, "{}", String::from_utf8_lossy(&k))?;
            }
        }
        RadosCmd::Listomapvals { obj } => {
            for (k, v) in omap_all(pool, &obj, true).await? {
                let key = String::from_utf8_lossy(&k);
                writeln!(out, "{key}\nvalue ({} bytes) :\n{}", v.len(), hexdump(&v))?;
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
        // Handled by `run` before connecting.
        RadosCmd::Cleanup => {}
    }
    Ok(())
}

/// A time as Ceph's `rados stat` prints it (UTC, microseconds).
pub(crate) fn format_ms(ms: u64) -> String {
    let (y, m, d, hh, mm, ss) = civil(ms / 1000);
    format!(
        "{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{:06}+0000",
        ms % 1000 * 1000
    )
}

/// Year, month, day, hour, minute and second (UTC) of `secs` since the
/// Unix epoch.
pub(crate) fn civil(secs: u64) -> (i64, i64, i64, u64, u64, u64) {
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
    (y, m, d, rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Bytes as Ceph prints omap values: offset, 16 bytes in hex, the
/// printable ones between bars, and the length on a last line.
fn hexdump(data: &[u8]) -> String {
    let mut s = String::new();
    for (i, row) in data.chunks(16).enumerate() {
        let hex: Vec<String> = row.iter().map(|b| format!("{b:02x}")).collect();
        let (left, right) = hex.split_at(hex.len().min(8));
        let text: String = row
            .iter()
            .map(|&b| match b {
                0x20..=0x7e => b as char,
                _ => '.',
            })
            .collect();
        s += &format!(
            "{:08x}  {:<23}  {:<23}  |{text}|\n",
            i * 16,
            left.join(" "),
            right.join(" ")
        );
    }
    s += &format!("{:08x}\n", data.len());
    s
}

/// Bytes of omap entries per op of `setomapvals`: well within a frame's
/// control part.
const OMAP_BATCH_BYTES: usize = 256 << 10;

/// Sets the `KEY<TAB>VALUE` lines of `file` (`-`: stdin) as omap values of
/// `obj`, in bounded ops; returns how many.
async fn set_omap_vals(pool: &Pool, obj: &str, file: &str) -> anyhow::Result<u64> {
    use std::io::BufRead;
    let input: Box<dyn std::io::Read> = if file == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(std::fs::File::open(file).with_context(|| format!("opening {file}"))?)
    };
    let mut batch: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let (mut bytes, mut total) = (0usize, 0u64);
    for (i, line) in std::io::BufReader::new(input).split(b'\n').enumerate() {
        let line = line.with_context(|| format!("reading {file}"))?;
        if line.is_empty() {
            continue;
        }
        let Some(tab) = line.iter().position(|b| *b == b'\t') else {
            bail!("{file}:{}: no TAB between key and value", i + 1);
        };
        bytes += line.len();
        batch.push((line[..tab].to_vec(), line[tab + 1..].to_vec()));
        if bytes >= OMAP_BATCH_BYTES {
            pool.omap_set(obj, &batch).await?;
            total += batch.len() as u64;
            batch.clear();
            bytes = 0;
        }
    }
    if !batch.is_empty() {
        pool.omap_set(obj, &batch).await?;
        total += batch.len() as u64;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hexdump_matches_ceph() {
        assert_eq!(
            hexdump(b"value1"),
            "00000000  76 61 6c 75 65 31                                 |value1|\n00000006\n"
        );
        let two = hexdump(b"0123456789abcdef\x01");
        assert_eq!(
            two,
            "00000000  30 31 32 33 34 35 36 37  38 39 61 62 63 64 65 66  |0123456789abcdef|\n\
             00000010  01                                                |.|\n\
             00000011\n"
        );
        assert_eq!(hexdump(b""), "00000000\n");
    }

    #[test]
    fn stat_times_print_as_ceph_does() {
        assert_eq!(format_ms(0), "1970-01-01T00:00:00.000000+0000");
        assert_eq!(
            format_ms(1_700_000_000_123),
            "2023-11-14T22:13:20.123000+0000"
        );
    }
}

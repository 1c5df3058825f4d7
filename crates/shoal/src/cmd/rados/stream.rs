//! Streaming for `shoal rados`: files (or stdin/stdout) in CHUNK-byte
//! writes and reads with INFLIGHT of them at once, so memory stays bounded
//! whatever the object's size; a progress line on a terminal.

use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};
use bytes::Bytes;
use shoal_client::Pool;

use super::{CHUNK, INFLIGHT};

/// Every omap entry of `obj`, page by page (values empty unless `values`).
pub(super) async fn omap_all(
    pool: &Pool,
    obj: &str,
    values: bool,
) -> anyhow::Result<Vec<(Bytes, Bytes)>> {
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

/// Where [`upload`] puts the input.
#[derive(Debug, Clone, Copy)]
pub(super) enum Target {
    /// At this offset onwards, INFLIGHT writes at once.
    At(u64),
    /// At the object's end, one append at a time, so that appends by
    /// others land between chunks, never inside or over them.
    End,
}

/// Writes the input (a file, or `-` for stdin) into `obj`, CHUNK bytes per op.
pub(super) async fn upload(pool: &Pool, obj: &str, file: &str, to: Target) -> anyhow::Result<()> {
    let (mut input, total) = open_input(file)?;
    let progress = Progress::new(total);
    let mut done = 0u64;
    let mut pending = tokio::task::JoinSet::new();
    let inflight = match to {
        Target::At(_) => INFLIGHT,
        Target::End => 1,
    };
    loop {
        let chunk = read_chunk(&mut *input)?;
        if chunk.is_empty() {
            break;
        }
        let len = chunk.len() as u64;
        let (p, o) = (pool.clone(), obj.to_string());
        match to {
            Target::At(start) => {
                pending.spawn(async move { p.write(&o, start + done, chunk).await });
            }
            Target::End => {
                pending.spawn(async move { p.append(&o, chunk).await });
            }
        }
        done += len;
        while pending.len() >= inflight {
            if let Some(r) = pending.join_next().await {
                r??;
            }
        }
        progress.show(done);
    }
    while let Some(r) = pending.join_next().await {
        r??;
    }
    progress.finish();
    Ok(())
}

/// Reads `obj` into a file (or `-` for stdout), INFLIGHT ranged reads at once,
/// written out in order.
pub(super) async fn download(pool: &Pool, obj: &str, file: &str) -> anyhow::Result<()> {
    let size = pool.stat(obj).await?.size;
    let mut output: Box<dyn Write> = if file == "-" {
        Box::new(crate::cmd::out::Stdout::new())
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

/// Copies `src` to `dst` in the same pool: data by ranges, xattrs, omap header and entries.
pub(super) async fn copy(pool: &Pool, src: &str, dst: &str) -> anyhow::Result<()> {
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

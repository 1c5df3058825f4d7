//! Daemon crashes, as Ceph's crash module keeps them: a daemon that
//! panics writes a report (`<data dir>/crash/<id>/meta.json`: when, who,
//! the message, the top of the backtrace) and aborts, whatever thread or
//! task panicked; once it runs again it posts its unposted reports to the
//! monitors, where `shoal crash ls|info|archive|archive-all|rm` reads and
//! tends them, and the health check RECENT_CRASH warns of those not yet
//! archived.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Subcommand;
use serde_json::Value;
use shoal_mon::Command;
use shoal_mon::CrashReport;
use shoal_monclient::replies::CrashLsReply;

use super::common::{Ctx, Format, mon_command, pretty, print};

/// Frames of the backtrace a report keeps.
const FRAMES: usize = 40;

/// Makes a panic anywhere in this process write a crash report for
/// `entity` under `dir` (after the usual message on stderr) and, with
/// `abort`, end the process: a storage daemon stops rather than run on
/// with a dead task. A front end serving untrusted requests (the S3
/// gateway, the NBD server) keeps serving: the panic ends only the task
/// it happened in (one connection's), and the report is posted while it
/// runs.
pub fn install(entity: String, dir: PathBuf, abort: bool) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        let message = match info.payload().downcast_ref::<&str>() {
            Some(s) => (*s).to_string(),
            None => info
                .payload()
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "unknown panic".into()),
        };
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let trace = std::backtrace::Backtrace::force_capture().to_string();
        let backtrace = trace
            .lines()
            .map(str::trim)
            .filter(|l| !l.starts_with("at "))
            .take(FRAMES)
            .map(String::from)
            .collect();
        let now = shoal_net::now_ms();
        let report = CrashReport {
            crash_id: format!("{}_{}", crash_time(now), random_suffix()),
            timestamp_ms: now,
            entity_name: entity.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            message: format!("{message}{at}"),
            backtrace,
            archived: false,
        };
        match write(&dir, &report) {
            Ok(p) => eprintln!("crash report written to {}", p.display()),
            Err(e) => eprintln!("could not write the crash report in {}: {e}", dir.display()),
        }
        if abort {
            std::process::abort();
        }
    }));
}

/// A crash id's time part (UTC, milliseconds, as Ceph's ids begin).
fn crash_time(ms: u64) -> String {
    let s = super::rados::format_ms(ms);
    // 2026-11-26T11:50:01.123000+0000 → 2026-11-26T11:50:01.123Z
    format!("{}Z", &s[..s.len().min(23)])
}

fn random_suffix() -> String {
    // Unique enough among one daemon's crashes: the pid and the clock.
    let n = u64::from(std::process::id()) << 40 ^ shoal_net::now_ms();
    format!("{n:016x}")
}

/// Writes `report` as `<dir>/<id>/meta.json` (whole or not at all).
fn write(dir: &Path, report: &CrashReport) -> std::io::Result<PathBuf> {
    let d = dir.join(&report.crash_id);
    std::fs::create_dir_all(&d)?;
    let tmp = d.join("meta.json.tmp");
    let json = serde_json::to_vec_pretty(report).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, json)?;
    let path = d.join("meta.json");
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// The reports under `dir` not yet posted (a damaged one is skipped with a
/// warning and left for an operator).
fn unposted(dir: &Path) -> Vec<(PathBuf, CrashReport)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let d = e.path();
        if !d.is_dir() || d.join("posted").exists() {
            continue;
        }
        match std::fs::read(d.join("meta.json")).map(|b| serde_json::from_slice::<CrashReport>(&b))
        {
            Ok(Ok(r)) => out.push((d, r)),
            Ok(Err(err)) => tracing::warn!("crash report {}: {err}", d.display()),
            Err(err) => tracing::warn!("crash report {}: {err}", d.display()),
        }
    }
    out.sort_by(|a, b| a.1.crash_id.cmp(&b.1.crash_id));
    out
}

/// Posts every unposted report under `dir` with `post`, marking each once
/// the monitors have it; tries again every 10 s until none is left (with
/// `forever`, looks again every 10 s for good: a front end's panics do
/// not end it).
pub async fn post_pending<F, Fut>(dir: PathBuf, forever: bool, post: F)
where
    F: Fn(CrashReport) -> Fut,
    Fut: std::future::Future<Output = Result<Value, shoal_mon::MonError>>,
{
    loop {
        let mut left = 0;
        for (d, r) in unposted(&dir) {
            let id = r.crash_id.clone();
            match post(r).await {
                Ok(_) => {
                    if let Err(e) = std::fs::write(d.join("posted"), b"") {
                        tracing::warn!("crash report {id}: posted, but not marked: {e}");
                    }
                    tracing::info!("posted crash report {id}");
                }
                Err(e) => {
                    left += 1;
                    tracing::debug!("posting crash report {id}: {}", e.message);
                }
            }
        }
        if left == 0 && !forever {
            return;
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

/// For a daemon without a data directory (`what`: `gateway`, `nbd`): with
/// `crash_dir` set, panics write reports there, which a task on the
/// current runtime posts as `ctx`'s entity (those of earlier runs first).
pub fn for_front_end(ctx: &Ctx, what: &str) {
    let o = &ctx.config.options;
    inject_panic(o.debug_inject_panic_ms);
    if o.crash_dir.is_empty() {
        return;
    }
    let dir = PathBuf::from(&o.crash_dir);
    install(format!("{what} ({})", ctx.name), dir.clone(), false);
    match super::common::mon_client(ctx) {
        Ok(monc) => {
            tokio::spawn(post_pending(dir, true, move |r| {
                let monc = monc.clone();
                async move { monc.command(&Command::CrashPost { report: r }).await }
            }));
        }
        Err(e) => tracing::warn!("crash reports will not be posted: {e}"),
    }
}

/// With `debug_inject_panic_ms` set, a thread that panics after it (for
/// tests of crash handling).
pub fn inject_panic(after_ms: u64) {
    if after_ms == 0 {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("inject-panic".into())
        .spawn(move || {
            std::thread::sleep(Duration::from_millis(after_ms));
            panic!("panic injected by debug_inject_panic_ms={after_ms}");
        });
    if let Err(e) = spawned {
        tracing::warn!("debug_inject_panic_ms: {e}");
    }
}

/// `shoal crash` subcommands.
#[derive(Debug, Subcommand)]
pub enum CrashCmd {
    /// Every recorded crash, oldest first (`*` marks those not archived).
    Ls {
        /// Output format.
        #[arg(long, value_enum, default_value = "plain")]
        format: Format,
    },
    /// One crash, whole (its backtrace included).
    Info {
        /// The crash's id.
        id: String,
    },
    /// Marks a crash seen: it no longer raises RECENT_CRASH.
    Archive {
        /// The crash's id.
        id: String,
    },
    /// Marks every crash seen.
    ArchiveAll,
    /// Forgets a crash.
    Rm {
        /// The crash's id.
        id: String,
    },
}

/// Runs `shoal crash ...`.
pub fn run(cmd: CrashCmd, ctx: &Ctx) -> anyhow::Result<()> {
    match cmd {
        CrashCmd::Ls { format } => {
            let v: CrashLsReply = super::common::mon_command_as(ctx, &Command::CrashLs)?;
            super::common::print_typed(format, &v, |v| {
                let mut out = format!("{:<52} {:<12} {}\n", "ID", "ENTITY", "NEW");
                for c in &v.crashes {
                    out.push_str(&format!(
                        "{:<52} {:<12} {}\n",
                        c.crash_id,
                        c.entity_name,
                        if c.archived { "" } else { "*" }
                    ));
                }
                out
            });
        }
        CrashCmd::Info { id } => {
            let v = mon_command(ctx, &Command::CrashInfo { id })?;
            print(Format::Plain, &v, pretty);
        }
        CrashCmd::Archive { id } => {
            mon_command(ctx, &Command::CrashArchive { id: Some(id) })?;
        }
        CrashCmd::ArchiveAll => {
            mon_command(ctx, &Command::CrashArchive { id: None })?;
        }
        CrashCmd::Rm { id } => {
            mon_command(ctx, &Command::CrashRm { id })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_written_whole_and_found_until_posted() {
        let dir = std::env::temp_dir().join(format!("shoal-crash-{}", random_suffix()));
        let r = CrashReport {
            crash_id: format!("{}_{}", crash_time(1_700_000_000_123), random_suffix()),
            timestamp_ms: 1_700_000_000_123,
            entity_name: "osd.2".into(),
            version: "0".into(),
            message: "boom at x.rs:1".into(),
            backtrace: vec!["0: main".into()],
            archived: false,
        };
        assert!(
            r.crash_id.starts_with("2023-11-14T22:13:20.123Z_"),
            "{}",
            r.crash_id
        );
        let p = write(&dir, &r).unwrap();
        assert!(p.ends_with("meta.json"));
        // A damaged report is skipped, not fatal.
        std::fs::create_dir_all(dir.join("broken")).unwrap();
        std::fs::write(dir.join("broken").join("meta.json"), b"{ not json").unwrap();
        let found = unposted(&dir);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].1, r);
        std::fs::write(found[0].0.join("posted"), b"").unwrap();
        assert!(unposted(&dir).is_empty());
        assert!(unposted(&dir.join("none")).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

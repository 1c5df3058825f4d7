//! `shoal rbd device map|unmap|list`: an image attached as a block device.
//! Each mapping is a `shoal nbd serve` process of its own exporting the one
//! image on a loopback port; where the kernel has the `nbd` module and
//! `nbd-client` is installed, the image is attached as `/dev/nbdN` through
//! it, else the command says so and prints the NBD URI that userspace
//! clients (qemu, nbdfuse, fio) and Windows' WNBD attach.
//!
//! Mappings in force are files in the run directory (`/run/shoal/rbd`, or
//! `$SHOAL_RBD_RUN_DIR`); `--persistent` also records the mapping in
//! `/etc/shoal/rbd-mappings.json` (or `$SHOAL_RBD_MAPPINGS`), which
//! `shoal rbd device map --persistent-all` — what the shipped systemd unit
//! `shoal-rbd-mappings.service` runs at boot — maps again. `unmap` stops
//! the server (it finishes the requests in flight and gives up the image's
//! lock) after detaching the kernel device, which flushes it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Subcommand;
use serde::{Deserialize, Serialize};

use super::common::{Ctx, Format};

/// `shoal rbd device`.
#[derive(Debug, Subcommand)]
pub enum DeviceCmd {
    /// Attach an image (`[POOL/]IMAGE[@SNAP]`) as a block device.
    Map {
        /// The image; omitted with --persistent-all.
        image: Option<String>,
        /// Serve it read-only.
        #[arg(long)]
        read_only: bool,
        /// Take the image's exclusive lock at once and keep it against
        /// other writers (refused when another holds it).
        #[arg(long, conflicts_with = "read_only")]
        exclusive: bool,
        /// Record the mapping so that it is made again at boot.
        #[arg(long)]
        persistent: bool,
        /// Map every recorded mapping not in force (the boot service),
        /// each with the flags it was recorded with.
        #[arg(long, conflicts_with_all = ["image", "read_only", "exclusive", "persistent"])]
        persistent_all: bool,
    },
    /// Detach a mapping (by image, device or URI), or all of them.
    Unmap {
        /// `[POOL/]IMAGE[@SNAP]`, `/dev/nbdN` or the NBD URI.
        target: Option<String>,
        /// Every mapping in force.
        #[arg(long, conflicts_with = "target")]
        all: bool,
        /// Leave the persistent record (a shutdown, not a removal).
        #[arg(long)]
        keep_persistent: bool,
    },
    /// The mappings in force.
    #[command(alias = "ls")]
    List,
}

fn run_dir() -> PathBuf {
    std::env::var_os("SHOAL_RBD_RUN_DIR")
        .map_or_else(|| PathBuf::from("/run/shoal/rbd"), PathBuf::from)
}

fn persistent_file() -> PathBuf {
    std::env::var_os("SHOAL_RBD_MAPPINGS").map_or_else(
        || PathBuf::from("/etc/shoal/rbd-mappings.json"),
        PathBuf::from,
    )
}

/// `POOL/IMAGE[@SNAP]` with the default pool filled in.
fn canonical(default_pool: &str, s: &str) -> String {
    if s.contains('/') {
        s.to_string()
    } else {
        format!("{default_pool}/{s}")
    }
}

/// The state file of a mapping of `spec`.
fn state_path(spec: &str) -> PathBuf {
    run_dir().join(format!("{}.json", spec.replace('/', "%")))
}

/// A mapping's state file: what its NBD server announced (`pid`, `addr`),
/// then what `map` added.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Mapping {
    /// The NBD server's process.
    pid: u64,
    /// Where it listens.
    addr: String,
    /// `POOL/IMAGE[@SNAP]`.
    #[serde(default)]
    image: String,
    /// `nbd://ADDR/POOL/IMAGE`.
    #[serde(default)]
    uri: String,
    /// The kernel device, when one is attached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    device: Option<String>,
    /// Why no kernel device is attached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

/// A mapping recorded to be made again at boot (`map --persistent`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Recorded {
    image: String,
    #[serde(default)]
    read_only: bool,
    #[serde(default)]
    exclusive: bool,
}

/// Every mapping in force, with its state (dead servers' files removed).
fn mappings() -> Vec<(PathBuf, Mapping)> {
    let Ok(dir) = std::fs::read_dir(run_dir()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let path = e.path();
        // Only mapping files: the directory may hold others' files.
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let Ok(v) = std::fs::read(&path).map(|b| serde_json::from_slice::<Mapping>(&b)) else {
            continue;
        };
        // A file not ours, or a server's that map has not finished.
        let Ok(v) = v else {
            continue;
        };
        if v.image.is_empty() {
            continue;
        }
        let alive = running(v.pid);
        if alive {
            out.push((path, v));
        } else {
            let _ = std::fs::remove_file(&path);
        }
    }
    out.sort_by(|a, b| a.1.image.cmp(&b.1.image));
    out
}

/// Whether process `pid` runs (a zombie, waiting for a reaper, does not).
fn running(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        // `pid (comm) S ...`: the state follows the last parenthesis.
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
    })
}

fn read_persistent() -> anyhow::Result<Vec<Recorded>> {
    let path = persistent_file();
    match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b).with_context(|| format!("reading {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn write_persistent(v: &[Recorded]) -> anyhow::Result<()> {
    let path = persistent_file();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(v)?)?;
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))
}

/// Whether this host can attach NBD devices in the kernel, and if not why.
fn kernel_nbd() -> Result<(), String> {
    if !Path::new("/sys/module/nbd").exists() {
        return Err("the kernel's nbd module is not loaded (modprobe nbd)".into());
    }
    let found = Command::new("sh")
        .args(["-c", "command -v nbd-client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        return Err("nbd-client is not installed (apt-get install nbd-client)".into());
    }
    Ok(())
}

/// A free `/dev/nbdN` (size 0).
fn free_nbd_device() -> Option<String> {
    (0..256).find_map(|n| {
        let size = std::fs::read_to_string(format!("/sys/block/nbd{n}/size")).ok()?;
        (size.trim() == "0").then(|| format!("/dev/nbd{n}"))
    })
}

/// Maps `spec`: starts its server, attaches the kernel device if it can.
fn map_one(ctx: &Ctx, spec: &str, read_only: bool, exclusive: bool) -> anyhow::Result<Mapping> {
    if let Some((_, v)) = mappings().into_iter().find(|(_, v)| v.image == spec) {
        bail!("{spec} is mapped already (at {})", v.uri);
    }
    std::fs::create_dir_all(run_dir())
        .with_context(|| format!("creating {}", run_dir().display()))?;
    let state = state_path(spec);
    let _ = std::fs::remove_file(&state);
    let exe = std::env::current_exe().context("finding the shoal executable")?;
    let mut cmd = Command::new("setsid");
    cmd.arg(exe);
    if let Some(c) = &ctx.conf {
        cmd.arg("--conf").arg(c);
    }
    for s in &ctx.set {
        cmd.args(["--set", s]);
    }
    cmd.args(["--name", &ctx.name.to_string()]);
    cmd.args(["nbd", "serve", "--bind", "127.0.0.1:0", "--export", spec]);
    cmd.arg("--state-file").arg(&state);
    if read_only {
        cmd.arg("--read-only");
    }
    if exclusive {
        cmd.arg("--exclusive");
    }
    let log = run_dir().join(format!("{}.log", spec.replace('/', "%")));
    let logf = std::fs::File::create(&log)?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(logf)
        .spawn()
        .context("starting the NBD server")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut v = loop {
        if let Ok(b) = std::fs::read(&state)
            && let Ok(v) = serde_json::from_slice::<Mapping>(&b)
        {
            break v;
        }
        if let Some(status) = child.try_wait()? {
            let why = std::fs::read_to_string(&log).unwrap_or_default();
            bail!(
                "the NBD server for {spec} exited ({status}): {}",
                why.trim()
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("the NBD server for {spec} did not start within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let addr = v.addr.clone();
    v.uri = format!("nbd://{addr}/{spec}");
    v.image = spec.to_string();
    match kernel_nbd() {
        Ok(()) => {
            let dev = free_nbd_device().context("no free /dev/nbdN")?;
            let (host, port) = addr.rsplit_once(':').unwrap_or((&addr, "10809"));
            let out = Command::new("nbd-client")
                .args([host, port, &dev, "-N", spec, "-b", "4096"])
                .output()
                .context("running nbd-client")?;
            if !out.status.success() {
                let _ = Command::new("kill").arg(child.id().to_string()).status();
                bail!(
                    "nbd-client could not attach {spec}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            v.device = Some(dev);
        }
        Err(why) => v.note = Some(format!("no kernel device: {why}")),
    }
    std::fs::write(&state, serde_json::to_vec_pretty(&v)?)?;
    Ok(v)
}

/// Detaches one mapping: the kernel device (which flushes), then the
/// server (which finishes what is in flight and gives the lock up).
fn unmap_one(path: &Path, v: &Mapping) -> anyhow::Result<()> {
    if let Some(dev) = &v.device {
        let out = Command::new("nbd-client").args(["-d", dev]).output()?;
        if !out.status.success() {
            bail!(
                "nbd-client -d {dev}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    if v.pid > 0 {
        let pid = v.pid;
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while running(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if running(pid) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
    let _ = std::fs::remove_file(path);
    Ok(())
}

/// Runs `shoal rbd device ...`.
pub fn run(ctx: &Ctx, default_pool: &str, format: Format, cmd: DeviceCmd) -> anyhow::Result<()> {
    let mut out = super::out::Stdout::new();
    match cmd {
        DeviceCmd::Map {
            image,
            read_only,
            exclusive,
            persistent,
            persistent_all,
        } => {
            if persistent_all {
                let mut failed = 0;
                for rec in read_persistent()? {
                    let spec = rec.image;
                    if mappings().iter().any(|(_, v)| v.image == spec) {
                        continue;
                    }
                    match map_one(ctx, &spec, rec.read_only, rec.exclusive) {
                        Ok(v) => writeln!(out, "{spec}: {}", where_(&v))?,
                        Err(e) => {
                            failed += 1;
                            writeln!(out, "{spec}: {e:#}")?;
                        }
                    }
                }
                if failed > 0 {
                    bail!("{failed} recorded mappings could not be made");
                }
                return Ok(());
            }
            let Some(image) = image else {
                bail!("name the image to map ([POOL/]IMAGE[@SNAP])");
            };
            let spec = canonical(default_pool, &image);
            let v = map_one(ctx, &spec, read_only || spec.contains('@'), exclusive)?;
            if persistent {
                let mut recs = read_persistent()?;
                recs.retain(|r| r.image != spec);
                recs.push(Recorded {
                    image: spec.clone(),
                    read_only,
                    exclusive,
                });
                write_persistent(&recs)?;
            }
            if format == Format::Json {
                writeln!(out, "{}", serde_json::to_string(&v)?)?;
            } else {
                if let Some(n) = &v.note {
                    writeln!(out, "{n}; attach the URI with qemu, nbdfuse or WNBD")?;
                }
                writeln!(out, "{}", where_(&v))?;
            }
        }
        DeviceCmd::Unmap {
            target,
            all,
            keep_persistent,
        } => {
            if format == Format::Json {
                bail!("--format json: rbd device unmap prints nothing to format");
            }
            let maps = mappings();
            let chosen: Vec<&(PathBuf, Mapping)> = match (&target, all) {
                (_, true) => maps.iter().collect(),
                (Some(t), false) => {
                    let spec = canonical(default_pool, t);
                    let m: Vec<_> = maps
                        .iter()
                        .filter(|(_, v)| {
                            v.image == spec || v.device.as_deref() == Some(t) || v.uri == *t
                        })
                        .collect();
                    if m.is_empty() {
                        bail!("{t} is not mapped");
                    }
                    m
                }
                (None, false) => bail!("name the mapping to undo, or --all"),
            };
            let mut recs = read_persistent().unwrap_or_default();
            let before = recs.len();
            for (path, v) in chosen {
                unmap_one(path, v)?;
                if !keep_persistent {
                    recs.retain(|r| r.image != v.image);
                }
            }
            if recs.len() != before {
                write_persistent(&recs)?;
            }
        }
        DeviceCmd::List => {
            let maps = mappings();
            if format == Format::Json {
                let v: Vec<&Mapping> = maps.iter().map(|(_, v)| v).collect();
                writeln!(out, "{}", serde_json::to_string(&v)?)?;
            } else {
                writeln!(out, "{:<8} {:<32} {:<12} URI", "PID", "IMAGE", "DEVICE")?;
                for (_, v) in maps {
                    writeln!(
                        out,
                        "{:<8} {:<32} {:<12} {}",
                        v.pid,
                        v.image,
                        v.device.as_deref().unwrap_or("-"),
                        v.uri
                    )?;
                }
            }
        }
    }
    Ok(())
}

/// Where a mapping can be reached: its device, else its URI.
fn where_(v: &Mapping) -> String {
    v.device.clone().unwrap_or_else(|| v.uri.clone())
}

//! Damaged data directories met by the real binary: `shoal store fsck|stat`,
//! `shoal osd --id N` and `shoal mon --id X` exit non-zero with a
//! one-paragraph error naming the file, print no panic or backtrace (even
//! with RUST_BACKTRACE=1), and leave the damaged files byte for byte as they
//! were. A second `shoal osd` on a running OSD's directory refuses (the
//! store's lock); so does an OSD started on another OSD's directory or on a
//! store of another cluster. (The full matrix of store damage runs in
//! process: crates/objectstore/tests/damage.rs.)

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Dev, SHOAL};

/// Runs `shoal ARGS` (with `conf` when given) and kills it after 20 s: a
/// damaged directory must make it exit long before.
fn shoal(conf: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = Command::new(SHOAL);
    cmd.args(args)
        .env("RUST_BACKTRACE", "1")
        .env_remove("SHOAL_CONF")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(c) = conf {
        cmd.env("SHOAL_CONF", c);
    }
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "shoal {args:?} still running after 20 s: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else if p.file_name().is_some_and(|n| n != "lock") {
                out.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

/// `shoal ARGS` must fail with one paragraph naming `names`, no panic, and
/// `dir` must not change.
fn refuses(conf: Option<&Path>, args: &[&str], dir: &Path, names: &str) -> String {
    let before = snapshot(dir);
    let out = shoal(conf, args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "shoal {args:?} succeeded: {err}");
    assert_ne!(
        out.status.code(),
        Some(101),
        "shoal {args:?} panicked: {err}"
    );
    for bad in ["panicked", "backtrace", "RUST_BACKTRACE"] {
        assert!(!err.contains(bad), "shoal {args:?}: {bad} in stderr: {err}");
    }
    let paragraph: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("shoal: error:"))
        .collect();
    assert_eq!(paragraph.len(), 1, "shoal {args:?}: {err}");
    assert!(
        err.trim_end().ends_with(paragraph[0].trim_end()),
        "the error is the last paragraph: {err}"
    );
    assert!(
        paragraph[0].contains(names),
        "shoal {args:?} does not name {names}: {err}"
    );
    assert!(
        snapshot(dir) == before,
        "shoal {args:?} changed {}",
        dir.display()
    );
    err
}

fn cut_to_third(p: &Path) {
    let len = std::fs::metadata(p).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(p)
        .unwrap()
        .set_len(len / 3)
        .unwrap();
}

#[test]
fn store_tools_report_damage_without_a_panic() {
    let dir = std::env::temp_dir().join(format!("shoal-damaged-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let s = dir.join("s");
    let sp = s.to_str().unwrap();
    let out = shoal(None, &["store", "mkfs", sp, "--size", "4M"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The case: both files cut to a third.
    let pristine = snapshot(&s);
    cut_to_third(&s.join("meta.redb"));
    cut_to_third(&s.join("block"));
    for cmd in ["fsck", "stat"] {
        let e = refuses(None, &["store", cmd, sp], &s, "meta.redb");
        assert!(e.contains("truncated"), "{e}");
    }
    // The data file alone: too short for its label's capacity.
    for (p, bytes) in &pristine {
        std::fs::write(p, bytes).unwrap();
    }
    cut_to_third(&s.join("block"));
    refuses(None, &["store", "fsck", sp], &s, "block");
    // Garbage over the metadata header; a missing data file.
    for (p, bytes) in &pristine {
        std::fs::write(p, bytes).unwrap();
    }
    let meta = s.join("meta.redb");
    let mut m = std::fs::read(&meta).unwrap();
    m[..64].fill(0x5a);
    std::fs::write(&meta, m).unwrap();
    refuses(None, &["store", "stat", sp], &s, "meta.redb");
    for (p, bytes) in &pristine {
        std::fs::write(p, bytes).unwrap();
    }
    std::fs::remove_file(s.join("block")).unwrap();
    refuses(None, &["store", "fsck", sp], &s, "block");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The offset of a point inside a record of the monitor log near a third of
/// it (records: `len u32 LE | crc u32 | body`), so the cut leaves a partial
/// record.
fn inside_a_record(log: &[u8]) -> u64 {
    let third = log.len() / 3;
    let mut at = 0;
    while at + 8 <= log.len() {
        let len = u32::from_le_bytes([log[at], log[at + 1], log[at + 2], log[at + 3]]) as usize;
        let end = at + 8 + len;
        if end > third {
            return (at + 8 + len / 2) as u64;
        }
        at = end;
    }
    panic!("the monitor log has no record past a third");
}

#[test]
fn daemons_refuse_damaged_or_foreign_directories() {
    let dev = Dev::new("damaged");
    dev.ok(&[
        "dev",
        "up",
        "--dir",
        dev.dir(),
        "--osds",
        "1",
        "--store",
        "block",
        "--osd-bytes",
        "67108864",
    ]);
    let conf = dev.0.join("shoal.conf");
    let conf = Some(conf.as_path());
    let osd0 = dev.0.join("osd.0");
    let osd0s = osd0.to_str().unwrap();

    // osd.0 runs: a second process on its directory finds the store locked.
    let e = refuses(
        conf,
        &["osd", "--id", "0"],
        &osd0,
        "in use by another process",
    );
    assert!(e.contains("store/lock"), "{e}");
    // Another OSD id on osd.0's directory.
    refuses(
        conf,
        &["osd", "--id", "1", "--data", osd0s],
        &osd0,
        "osd.json",
    );

    dev.ok(&["dev", "down", "--dir", dev.dir()]);

    // A store of another cluster: osd.json (and so the OSD) expects another fsid.
    let meta = osd0.join("osd.json");
    let original = std::fs::read_to_string(&meta).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&original).unwrap();
    v["fsid"] = "00000000-0000-4000-8000-00000000abcd".into();
    std::fs::write(&meta, v.to_string()).unwrap();
    let e = refuses(conf, &["osd", "--id", "0"], &osd0, "meta.redb");
    assert!(e.contains("belongs to osd.0 of cluster"), "{e}");
    std::fs::write(&meta, original).unwrap();

    // A damaged store.
    let store_meta = osd0.join("store/meta.redb");
    let pristine = std::fs::read(&store_meta).unwrap();
    cut_to_third(&store_meta);
    refuses(conf, &["osd", "--id", "0"], &osd0, "meta.redb");
    std::fs::write(&store_meta, pristine).unwrap();

    // The monitor: a log cut inside a record, a garbage snapshot, no keyring.
    let mon = dev.0.join("mon.a");
    let mon_args = ["mon", "--id", "a", "--data", mon.to_str().unwrap()];
    let log = mon.join("raft/log");
    let bytes = std::fs::read(&log).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(inside_a_record(&bytes))
        .unwrap();
    refuses(conf, &mon_args, &mon, "raft/log");
    std::fs::write(&log, &bytes).unwrap();

    let snap = mon.join("raft/snapshot");
    let old_snap = std::fs::read(&snap).ok();
    std::fs::write(&snap, b"{\"meta\": garbage").unwrap();
    refuses(conf, &mon_args, &mon, "raft/snapshot");
    match old_snap {
        Some(b) => std::fs::write(&snap, b).unwrap(),
        None => std::fs::remove_file(&snap).unwrap(),
    }

    let ring = mon.join("keyring");
    let hidden = mon.join("keyring.away");
    std::fs::rename(&ring, &hidden).unwrap();
    refuses(conf, &mon_args, &mon, "keyring");
    std::fs::rename(&hidden, &ring).unwrap();
}

//! `shoal rbd` against a `shoal dev` cluster, as a user runs it: images
//! made, listed, inspected, imported and exported (sparse), resized,
//! renamed and removed, with errors that name what is wrong; `rbd bench`;
//! and a writer SIGKILLed mid-stream, on a replicated pool and with the
//! data in an erasure-coded pool: every write it had acknowledged is there
//! whole, no 512-byte sector is torn, a second process is refused while the
//! exclusive writer lives and takes the lock once its watch lapses.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

mod common;

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Dev, SHOAL};

fn cluster(tag: &str) -> Dev {
    let d = Dev::new(tag);
    d.ok(&[
        "--set",
        "client_watch_timeout_ms=3000",
        "dev",
        "up",
        "--dir",
        d.dir(),
        "--osds",
        "3",
    ]);
    d.ok(&[
        "osd",
        "erasure-code-profile",
        "set",
        "two-one",
        "k=2",
        "m=1",
        "crush-failure-domain=osd",
    ]);
    d.ok(&["osd", "pool", "create", "ec", "8", "erasure", "two-one"]);
    d.ok(&["osd", "pool", "set", "ec", "allow_ec_overwrites", "true"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !d.all_active_clean() {
        assert!(Instant::now() < deadline, "{}", d.ok(&["pg", "stat"]));
        std::thread::sleep(Duration::from_millis(300));
    }
    d
}

fn err(d: &Dev, args: &[&str]) -> String {
    let out = d.run(args);
    assert!(!out.status.success(), "shoal {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn images_from_the_command_line() {
    let d = cluster("rbd-cli");
    let dir = &d.0;
    d.ok(&["rbd", "create", "disk", "--size", "64M"]);
    d.ok(&[
        "rbd",
        "create",
        "ecdisk",
        "--size",
        "32M",
        "--data-pool",
        "ec",
    ]);
    let ls = d.json(&["rbd", "ls"]);
    assert_eq!(ls, serde_json::json!(["disk", "ecdisk"]));
    let info = d.json(&["rbd", "info", "ecdisk"]);
    assert_eq!(info["size"], 32 << 20);
    assert_eq!(info["object_size"], 4 << 20);
    assert_eq!(info["data_pool"], "ec");
    assert!(
        d.ok(&["rbd", "info", "disk"])
            .contains("size 64 MiB in 16 objects")
    );

    // Import and export, sparse: 1 MiB of data, a 20 MiB hole, a tail.
    let src = dir.join("src.img");
    let mut body: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 253) as u8 + 1).collect();
    body.resize(21 << 20, 0);
    body.extend_from_slice(b"the end");
    std::fs::write(&src, &body).unwrap();
    for (image, extra) in [("imp", None), ("ecimp", Some("ec"))] {
        let mut args = vec!["rbd", "import", src.to_str().unwrap(), image];
        if let Some(p) = extra {
            args.extend(["--data-pool", p]);
        }
        d.ok(&args);
        let out = dir.join(format!("{image}.out"));
        d.ok(&["rbd", "export", image, out.to_str().unwrap()]);
        assert!(
            std::fs::read(&out).unwrap() == body,
            "{image} exported otherwise"
        );
        // The hole stayed a hole.
        let used = std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(&out).unwrap()) * 512;
        assert!(used < 10 << 20, "{image}: the export takes {used} bytes");
        let du = d.json(&["rbd", "du", image]);
        let row = &du["images"][0];
        assert_eq!(row["provisioned_size"], body.len() as u64);
        // Two of six objects were written.
        assert_eq!(row["objects"], 2, "{du}");
        // To standard output.
        let piped = Command::new(SHOAL)
            .args(["rbd", "export", image, "-"])
            .env("SHOAL_CONF", dir.join("shoal.conf"))
            .output()
            .unwrap();
        assert!(piped.status.success());
        assert!(piped.stdout == body);
    }

    // Resize: shrinking needs saying so.
    let e = err(&d, &["rbd", "resize", "imp", "--size", "1M"]);
    assert!(e.contains("--allow-shrink"), "{e}");
    d.ok(&["rbd", "resize", "imp", "--size", "1M", "--allow-shrink"]);
    assert_eq!(d.json(&["rbd", "info", "imp"])["size"], 1 << 20);
    d.ok(&["rbd", "resize", "imp", "--size", "2M"]);
    let out = dir.join("grown.out");
    d.ok(&["rbd", "export", "imp", out.to_str().unwrap()]);
    let grown = std::fs::read(&out).unwrap();
    assert!(grown[..1 << 20] == body[..1 << 20]);
    assert!(
        grown[1 << 20..].iter().all(|b| *b == 0),
        "shrink then grow left data behind"
    );

    // Snapshots: taken, listed, read, rolled back, protected.
    let small = dir.join("small.img");
    let before = vec![1u8; 1 << 20];
    std::fs::write(&small, &before).unwrap();
    d.ok(&["rbd", "import", small.to_str().unwrap(), "snapimg"]);
    d.ok(&["rbd", "snap", "create", "snapimg@one"]);
    d.ok(&[
        "rbd",
        "bench",
        "snapimg",
        "--io-type",
        "write",
        "--io-total",
        "1M",
    ]);
    let at_snap = dir.join("one.out");
    d.ok(&["rbd", "export", "snapimg@one", at_snap.to_str().unwrap()]);
    assert!(
        std::fs::read(&at_snap).unwrap() == before,
        "the snapshot changed"
    );
    let now = dir.join("now.out");
    d.ok(&["rbd", "export", "snapimg", now.to_str().unwrap()]);
    assert!(std::fs::read(&now).unwrap().iter().all(|b| *b == 0x5a));
    let ls = d.json(&["rbd", "snap", "ls", "snapimg"]);
    assert_eq!(ls[0]["name"], "one", "{ls}");
    assert_eq!(d.json(&["rbd", "info", "snapimg"])["snapshot_count"], 1);
    d.ok(&["rbd", "snap", "protect", "snapimg@one"]);
    let e = err(&d, &["rbd", "snap", "rm", "snapimg@one"]);
    assert!(e.contains("protected"), "{e}");
    // A clone of the protected snapshot reads it, until flattened it
    // keeps the snapshot from being unprotected.
    d.ok(&["rbd", "clone", "snapimg@one", "kid"]);
    let info = d.json(&["rbd", "info", "kid"]);
    assert_eq!(info["parent"], "rbd/snapimg@one", "{info}");
    assert_eq!(info["overlap"], 1 << 20, "{info}");
    let kid = dir.join("kid.out");
    d.ok(&["rbd", "export", "kid", kid.to_str().unwrap()]);
    assert!(
        std::fs::read(&kid).unwrap() == before,
        "the clone reads otherwise"
    );
    assert_eq!(d.ok(&["rbd", "children", "snapimg@one"]).trim(), "rbd/kid");
    let e = err(&d, &["rbd", "snap", "unprotect", "snapimg@one"]);
    assert!(e.contains("clones") && e.contains("rbd/kid"), "{e}");
    d.ok(&["rbd", "flatten", "kid"]);
    assert!(d.json(&["rbd", "info", "kid"])["parent"].is_null());
    assert_eq!(d.ok(&["rbd", "children", "snapimg@one"]).trim(), "");
    d.ok(&["rbd", "export", "kid", kid.to_str().unwrap()]);
    assert!(
        std::fs::read(&kid).unwrap() == before,
        "flattening changed the clone"
    );
    d.ok(&["rbd", "rm", "kid"]);
    d.ok(&["rbd", "snap", "unprotect", "snapimg@one"]);
    let e = err(&d, &["rbd", "clone", "snapimg@one", "kid2"]);
    assert!(e.contains("not protected"), "{e}");
    d.ok(&["rbd", "snap", "rollback", "snapimg@one"]);
    d.ok(&["rbd", "export", "snapimg", now.to_str().unwrap()]);
    assert!(
        std::fs::read(&now).unwrap() == before,
        "the rollback did not restore"
    );
    let e = err(&d, &["rbd", "rm", "snapimg"]);
    assert!(e.contains("snapshots"), "{e}");
    let e = err(&d, &["rbd", "snap", "rm", "snapimg@two"]);
    assert!(e.contains("has no snapshot two"), "{e}");
    d.ok(&["rbd", "snap", "rm", "snapimg@one"]);
    d.ok(&["rbd", "rm", "snapimg"]);
    // An image whose data is erasure coded takes snapshots too.
    let ec_before = dir.join("ec-before.out");
    d.ok(&["rbd", "export", "ecdisk", ec_before.to_str().unwrap()]);
    d.ok(&["rbd", "snap", "create", "ecdisk@x"]);
    d.ok(&[
        "rbd",
        "bench",
        "ecdisk",
        "--io-type",
        "write",
        "--io-total",
        "1M",
    ]);
    let ec_at = dir.join("ec-x.out");
    d.ok(&["rbd", "export", "ecdisk@x", ec_at.to_str().unwrap()]);
    assert!(
        std::fs::read(&ec_at).unwrap() == std::fs::read(&ec_before).unwrap(),
        "the snapshot of an image with erasure-coded data changed"
    );
    d.ok(&["rbd", "export", "ecdisk", ec_at.to_str().unwrap()]);
    assert!(
        std::fs::read(&ec_at).unwrap() != std::fs::read(&ec_before).unwrap(),
        "the writes after the snapshot are not in the image"
    );
    d.ok(&["rbd", "snap", "rm", "ecdisk@x"]);

    // Nobody has it open; a lock is broken by hand only if named exactly.
    assert!(d.ok(&["rbd", "status", "disk"]).contains("Watchers: none"));
    let e = err(&d, &["rbd", "lock", "rm", "disk", "client.x 1 2"]);
    assert!(e.contains("not locked"), "{e}");

    // Rename and remove.
    d.ok(&["rbd", "mv", "imp", "renamed"]);
    let ls = d.ok(&["rbd", "ls"]);
    assert!(
        ls.contains("renamed") && !ls.lines().any(|l| l == "imp"),
        "{ls}"
    );
    d.ok(&["rbd", "rm", "renamed"]);
    d.ok(&["rbd", "rm", "ecimp"]);
    assert_eq!(
        d.json(&["rbd", "ls"]),
        serde_json::json!(["disk", "ecdisk"])
    );

    // Errors name the pool, image or feature.
    let e = err(&d, &["rbd", "info", "nope"]);
    assert!(e.contains("image nope does not exist in pool rbd"), "{e}");
    let e = err(&d, &["rbd", "ls", "nopool"]);
    assert!(e.contains("pool nopool does not exist"), "{e}");
    let e = err(&d, &["rbd", "create", "disk", "--size", "1M"]);
    assert!(e.contains("image disk already exists in pool rbd"), "{e}");
    let e = err(
        &d,
        &[
            "rbd",
            "create",
            "x",
            "--size",
            "1M",
            "--data-pool",
            "nopool",
        ],
    );
    assert!(e.contains("nopool"), "{e}");
    let e = err(&d, &["rbd", "create", "ec/x", "--size", "1M"]);
    assert!(e.contains("erasure-coded"), "{e}");
    let e = err(
        &d,
        &[
            "rbd",
            "create",
            "x",
            "--size",
            "1M",
            "--image-feature",
            "journaling",
        ],
    );
    assert!(e.contains("journaling"), "{e}");
    let e = err(&d, &["rbd", "rm", "nope"]);
    assert!(e.contains("nope"), "{e}");

    // rbd bench, as Ceph's: every I/O counted.
    for (ty, pattern) in [("write", "rand"), ("read", "rand"), ("rw", "seq")] {
        let v = d.json(&[
            "rbd",
            "bench",
            "ecdisk",
            "--io-type",
            ty,
            "--io-size",
            "4K",
            "--io-threads",
            "4",
            "--io-total",
            "2M",
            "--io-pattern",
            pattern,
        ]);
        assert_eq!(v["ops"], 512, "{ty}: {v}");
        assert!(v["ops_per_s"].as_f64().unwrap() > 0.0);
    }
    let plain = d.ok(&[
        "rbd",
        "bench",
        "disk",
        "--io-type",
        "write",
        "--io-total",
        "1M",
    ]);
    assert!(plain.contains("ops: 256"), "{plain}");
    // A run past a second prints its per-second line from a worker thread
    // while the command goes on (it once blocked on standard output, locked
    // by the command, and took the worker's queued writes with it).
    // The run doubles until it lasts past a second (a faster build or
    // machine finishes 4 MiB sooner).
    let mut total_mib = 4u64;
    loop {
        let total = format!("{total_mib}M");
        let long = d.ok(&[
            "rbd",
            "bench",
            "ecdisk",
            "--io-type",
            "write",
            "--io-threads",
            "8",
            "--io-total",
            &total,
            "--io-pattern",
            "rand",
        ]);
        assert!(
            long.contains(&format!("ops: {} ", total_mib * 256)),
            "{long}"
        );
        let elapsed: f64 = long
            .split("elapsed:")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no elapsed time: {long}"));
        if elapsed < 1.5 {
            assert!(total_mib < 256, "4 KiB writes never took a second: {long}");
            total_mib *= 4;
            continue;
        }
        assert!(long.lines().any(|l| l.starts_with("    1 ")), "{long}");
        break;
    }
}

/// Reads `shoal rbd stamp`'s lines as they come.
fn lines(child: &mut std::process::Child) -> mpsc::Receiver<String> {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines() {
            let Ok(l) = l else { return };
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    rx
}

/// Kills the writer however the test ends.
struct Writer(std::process::Child);

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn stamp_sector(block: u64, sector: u64) -> Vec<u8> {
    let mut s = vec![0u8; 512];
    s[..8].copy_from_slice(b"STAMP---");
    s[8..16].copy_from_slice(&block.to_le_bytes());
    s[16..24].copy_from_slice(&sector.to_le_bytes());
    for (i, b) in s[24..].iter_mut().enumerate() {
        *b = (block.wrapping_mul(31).wrapping_add(sector * 7 + i as u64) % 251) as u8;
    }
    s
}

fn killed_writer(d: &Dev, image: &str, data_pool: Option<&str>) {
    let mut create = vec![
        "rbd",
        "create",
        image,
        "--size",
        "64M",
        "--object-size",
        "64K",
    ];
    if let Some(p) = data_pool {
        create.extend(["--data-pool", p]);
    }
    d.ok(&create);
    let child = Command::new(SHOAL)
        .args(["rbd", "stamp", image, "--count", "16384", "--exclusive"])
        .env("SHOAL_CONF", d.0.join("shoal.conf"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut w = Writer(child);
    let rx = lines(&mut w.0);
    let mut acked = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut checked_lock = false;
    while acked.len() < 400 {
        let l = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        if let Some(n) = l.strip_prefix("acked ") {
            acked.push(n.parse::<u64>().unwrap());
        }
        if acked.len() >= 50 && !checked_lock {
            checked_lock = true;
            // A second process is refused while the writer lives.
            let e = err(d, &["rbd", "resize", image, "--size", "128M"]);
            assert!(e.contains("locked by"), "{e}");
            let locks = d.ok(&["rbd", "lock", "ls", image]);
            assert!(locks.contains("1 exclusive lock"), "{locks}");
            let status = d.json(&["rbd", "status", image]);
            assert_eq!(status["watchers"].as_array().unwrap().len(), 1, "{status}");
        }
        assert!(Instant::now() < deadline);
    }
    w.0.kill().unwrap();
    w.0.wait().unwrap();
    // Lines already written are acknowledged writes too.
    while let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
        if let Some(n) = l.strip_prefix("acked ") {
            acked.push(n.parse::<u64>().unwrap());
        }
    }
    // The dead writer's lock is broken once its watch lapses.
    d.ok(&["rbd", "resize", image, "--size", "128M"]);
    let out = d.0.join(format!("{image}.out"));
    d.ok(&["rbd", "export", image, out.to_str().unwrap()]);
    let data = std::fs::read(&out).unwrap();
    assert_eq!(data.len(), 128 << 20);
    for n in &acked {
        for s in 0..8 {
            let at = (*n as usize * 8 + s as usize) * 512;
            assert!(
                data[at..at + 512] == stamp_sector(*n, s)[..],
                "{image}: acknowledged block {n} sector {s} is not there"
            );
        }
    }
    let mut written = 0;
    for (i, sector) in data.chunks(512).enumerate() {
        if sector.iter().all(|b| *b == 0) {
            continue;
        }
        let (block, s) = ((i / 8) as u64, (i % 8) as u64);
        assert!(
            sector == &stamp_sector(block, s)[..],
            "{image}: sector {i} is torn or misplaced"
        );
        written += 1;
    }
    assert!(written >= acked.len() * 8);
    d.ok(&["rbd", "rm", image]);
}

#[test]
fn a_killed_writer_keeps_every_acknowledged_write_and_tears_no_sector() {
    let d = cluster("rbd-kill");
    killed_writer(&d, "victim", None);
    killed_writer(&d, "ecvictim", Some("ec"));
}

/// An option that is accepted takes effect, or is refused, saying why:
/// sizes in bytes, `--format` where nothing prints, an empty feature
/// list, bench options that would be ignored, and the NBD server's
/// `--exclusive` (held from the start, refused without the feature or
/// while another holds the lock) and `--export` of a missing image.
#[test]
fn options_take_effect_or_are_refused() {
    let d = Dev::new("rbd-options");
    d.up_mem(&["--no-gateway", "--no-mgr"]);
    d.ok(&["rbd", "create", "bytes", "--size", "8192B"]);
    let info = d.json(&["rbd", "info", "bytes"]);
    assert_eq!(info["size"], 8192, "{info}");
    // Each refused with a message that says why, and nothing made.
    let refused: [(&[&str], &str); 7] = [
        (
            &["rbd", "create", "x", "--size", "1M", "--format", "json"],
            "prints nothing",
        ),
        (
            &["rbd", "create", "x", "--size", "1M", "--image-feature", ""],
            "names no feature",
        ),
        (
            &[
                "rbd",
                "bench",
                "bytes",
                "--io-type",
                "write",
                "--rw-mix-read",
                "50",
            ],
            "--io-type rw only",
        ),
        (
            &[
                "rbd",
                "bench",
                "bytes",
                "--io-type",
                "write",
                "--io-total",
                "6K",
            ],
            "whole number",
        ),
        (
            &["rbd", "device", "map", "--persistent-all", "--read-only"],
            "cannot be used with",
        ),
        (
            &["nbd", "serve", "--exclusive", "--read-only"],
            "cannot be used with",
        ),
        (&["nbd", "serve", "--max-inflight", "0"], "--max-inflight"),
    ];
    for (args, why) in refused {
        let e = err(&d, args);
        assert!(e.contains(why), "{args:?}: {e}");
    }
    assert!(
        !d.ok(&["rbd", "ls"]).contains('x'),
        "a refused create made x"
    );
    let serve = |extra: &[&'static str]| {
        let mut a = vec!["nbd", "serve", "--bind", "127.0.0.1:0"];
        a.extend_from_slice(extra);
        a
    };
    let e = err(&d, &serve(&["--export", "rbd/missing"]));
    assert!(e.contains("missing"), "{e}");

    // --exclusive holds the lock from the start, before any write.
    d.ok(&["rbd", "create", "held", "--size", "4M"]);
    let held = serve(&["--exclusive", "--export", "rbd/held"]);
    let server = common::Background::start(&d, &held, "nbd");
    let locks = d.json(&["rbd", "lock", "ls", "held"]);
    assert_eq!(locks.as_array().unwrap().len(), 1, "{locks}");
    let e = err(&d, &held);
    assert!(e.contains("exclusive lock could not be taken"), "{e}");
    drop(server);
    d.ok(&[
        "rbd",
        "create",
        "nolock",
        "--size",
        "4M",
        "--image-feature",
        "layering",
    ]);
    let e = err(&d, &serve(&["--exclusive", "--export", "rbd/nolock"]));
    assert!(e.contains("no exclusive-lock feature"), "{e}");
}

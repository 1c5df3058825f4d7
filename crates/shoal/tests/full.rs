//! OSDs filling up, as an operator meets it: three 320 MiB BlockStore
//! OSDs filled with 4 MiB `shoal rados put`s. Health escalates through
//! OSD_NEARFULL and OSD_BACKFILLFULL (with POOL_NEARFULL) to OSD_FULL
//! (HEALTH_ERR, with POOL_FULL), each naming the OSD or pool and its use,
//! in `health detail`, `status` and the manager's `/metrics`; the write
//! past the full ratio is refused with an error that says so, and every
//! acknowledged object reads back intact. Each front end answers the full
//! cluster in its own terms: S3 `507 InsufficientStorage`, the file
//! system `ENOSPC`, NBD an error reply (qemu-io's "No space left"), while
//! an S3 DELETE and a file's `rm` still work (their metadata changes go
//! through a full OSD, Ceph's FULL_TRY). Deleting frees the space: every
//! check clears and writes resume within a minute, through every front
//! end.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{Dev, Mount, http_get, python, until};
use serde_json::Value;

/// Writes `len` bytes to `path` and fsyncs: the errno it fails with, or 0.
fn fs_write(path: &std::path::Path, len: usize) -> i32 {
    let code = "import os,sys\n\
        try:\n\
        \x20   fd=os.open(sys.argv[1],os.O_WRONLY|os.O_CREAT|os.O_TRUNC)\n\
        \x20   os.write(fd,os.urandom(int(sys.argv[2])))\n\
        \x20   os.fsync(fd)\n\
        \x20   os.close(fd)\n\
        \x20   print(0)\n\
        except OSError as e:\n\
        \x20   print(e.errno)\n";
    let out = python(
        120,
        &["-c", code, path.to_str().unwrap(), &len.to_string()],
        &[],
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Writes `n` files of 256 KiB under `dir` as tar does (write, close, no
/// fsync): for each, the errno its write or close failed with (0: none)
/// and its content.
fn fs_write_unsynced(dir: &std::path::Path, n: usize) -> Vec<(i32, Vec<u8>)> {
    std::fs::create_dir_all(dir).unwrap();
    let files: Vec<Vec<u8>> = (0..n)
        .map(|i| object(7000 + i as u32)[..256 << 10].to_vec())
        .collect();
    for (i, data) in files.iter().enumerate() {
        std::fs::write(unsynced_src(dir, i), data).unwrap();
    }
    // Python's close reports close(2)'s error, which Rust's drop ignores.
    let code = "import os,sys\n\
        for src, dst in zip(sys.argv[1::2], sys.argv[2::2]):\n\
        \x20   data=open(src,'rb').read()\n\
        \x20   try:\n\
        \x20       fd=os.open(dst,os.O_WRONLY|os.O_CREAT|os.O_TRUNC)\n\
        \x20       try:\n\
        \x20           os.write(fd,data)\n\
        \x20       finally:\n\
        \x20           os.close(fd)\n\
        \x20       print(0)\n\
        \x20   except OSError as e:\n\
        \x20       print(e.errno)\n";
    let mut args = vec!["-c".to_string(), code.to_string()];
    for i in 0..n {
        args.push(unsynced_src(dir, i).to_str().unwrap().to_string());
        args.push(dir.join(format!("f{i}")).to_str().unwrap().to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = python(180, &args, &[]);
    let errnos: Vec<i32> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(errnos.len(), n, "{out:?}");
    errnos.into_iter().zip(files).collect()
}

/// Where `fs_write_unsynced` keeps file `i`'s content, outside the mount.
fn unsynced_src(dir: &std::path::Path, i: usize) -> std::path::PathBuf {
    let base = dir.parent().unwrap().parent().unwrap();
    base.join(format!("unsynced-src-{i}"))
}

/// An S3 request through boto3 against the dev gateway (`MB BUCKET`,
/// `PUT KEY` or `DELETE KEY` of bucket `full`): the HTTP status it got.
fn s3(d: &Dev, what: &str, key: &str) -> u16 {
    let user: Value =
        serde_json::from_str(&std::fs::read_to_string(d.0.join("gateway/user.json")).unwrap())
            .unwrap();
    let k = &user["keys"][0];
    let code = "import boto3,botocore.config,os,sys\n\
        from botocore.exceptions import ClientError\n\
        c=boto3.client('s3',endpoint_url=os.environ['E'],aws_access_key_id=os.environ['K'],\
        aws_secret_access_key=os.environ['S'],region_name='us-east-1',\
        config=botocore.config.Config(retries={'max_attempts': 1}))\n\
        what,key=sys.argv[1],sys.argv[2]\n\
        try:\n\
        \x20   if what=='MB': r=c.create_bucket(Bucket=key)\n\
        \x20   elif what=='PUT': r=c.put_object(Bucket='full',Key=key,Body=os.urandom(1<<20))\n\
        \x20   else: r=c.delete_object(Bucket='full',Key=key)\n\
        \x20   print(r['ResponseMetadata']['HTTPStatusCode'])\n\
        except ClientError as e:\n\
        \x20   print(e.response['Error']['Code'], file=sys.stderr)\n\
        \x20   print(e.response['ResponseMetadata']['HTTPStatusCode'])\n";
    let endpoint = format!("http://{}", d.addr_of("gateway"));
    let out = python(
        120,
        &["-c", code, what, key],
        &[
            ("E", &endpoint),
            ("K", k["access_key"].as_str().unwrap()),
            ("S", k["secret_key"].as_str().unwrap()),
        ],
    );
    eprintln!(
        "S3 {what} {key}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// qemu-io writing 4 MiB at `off` of the NBD export `uri`: its output.
fn nbd_write(uri: &str, off: u64) -> String {
    let out = std::process::Command::new("timeout")
        .args(["120", "qemu-io", "-f", "raw", "-c"])
        .arg(format!("write -P 7 {off} 4M"))
        .arg(uri)
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Whether FUSE, boto3 and qemu-io are here (CI has them all).
fn front_ends_usable() -> bool {
    let ok = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .is_ok()
        && std::process::Command::new("sh")
            .args([
                "-c",
                "[ $(id -u) = 0 ] && python3 -c 'import boto3' && command -v qemu-io",
            ])
            .output()
            .is_ok_and(|o| o.status.success());
    if !ok {
        let m = "the front-end part needs root, /dev/fuse, boto3 and qemu-io";
        assert!(std::env::var_os("SHOAL_REQUIRE_TOOLS").is_none(), "{m}");
        eprintln!("skipped the front ends: {m}");
    }
    ok
}

const SPACE: [&str; 5] = [
    "OSD_NEARFULL",
    "OSD_BACKFILLFULL",
    "OSD_FULL",
    "POOL_NEARFULL",
    "POOL_FULL",
];

fn checks(d: &Dev) -> Vec<Value> {
    d.json(&["health", "detail"])["checks"]
        .as_array()
        .unwrap()
        .clone()
}

fn codes(d: &Dev) -> BTreeSet<String> {
    checks(d)
        .iter()
        .map(|c| c["code"].as_str().unwrap().to_string())
        .collect()
}

/// A 4 MiB object's bytes, different for each `i`.
fn object(i: u32) -> Vec<u8> {
    let mut b: Vec<u8> = (0..4u32 << 20)
        .map(|j| (j.wrapping_mul(31) ^ i) as u8)
        .collect();
    b[..4].copy_from_slice(&i.to_le_bytes());
    b
}

#[test]
fn full_osds_are_reported_refuse_writes_and_clear_when_freed() {
    let d = Dev::new("full");
    d.ok(&[
        "dev",
        "up",
        "--dir",
        d.dir(),
        "--osds",
        "3",
        "--store",
        "block",
        "--osd-bytes",
        "335544320",
        "--fs",
        "--set",
        "osd_pg_stats_interval_ms=300",
        "--set",
        "mgr_stats_period_ms=500",
    ]);
    until("HEALTH_OK", 60, || {
        d.json(&["health"])["status"] == "HEALTH_OK"
    });
    let file = d.0.join("obj");
    let path = file.to_str().unwrap();

    // The front ends, before the cluster fills: a file, an object, an
    // image served over NBD.
    let fronts = front_ends_usable();
    let mount = fronts.then(|| Mount::new(&d, "mnt"));
    let nbd = fronts.then(|| {
        d.ok(&["rbd", "create", "img", "--size", "64M"]);
        common::Background::start(
            &d,
            &[
                "nbd",
                "serve",
                "--bind",
                "127.0.0.1:0",
                "--export",
                "rbd/img",
            ],
            "nbd",
        )
    });
    if let Some(m) = &mount {
        assert_eq!(fs_write(&m.path.join("before"), 1 << 20), 0);
        assert_eq!(s3(&d, "MB", "full"), 200);
        assert_eq!(s3(&d, "PUT", "before"), 200);
    }

    // Fill until refused, noting every space check seen on the way.
    let mut seen = BTreeSet::new();
    let mut acked = 0u32;
    let refusal = loop {
        assert!(acked < 120, "{acked} objects of 4 MiB on 320 MiB OSDs");
        std::fs::write(&file, object(acked)).unwrap();
        let out = d.run(&["rados", "-p", "rbd", "put", &format!("o{acked}"), path]);
        if !out.status.success() {
            break String::from_utf8_lossy(&out.stderr).into_owned();
        }
        acked += 1;
        let now = codes(&d);
        if now.iter().any(|c| SPACE.contains(&c.as_str())) {
            // Near the top: give each report time to land, so that no
            // level is passed between two looks.
            std::thread::sleep(Duration::from_millis(700));
            seen.extend(codes(&d));
        }
        seen.extend(now);
    };
    eprintln!("{acked} objects acknowledged; refused with: {refusal}");
    assert!(
        refusal.contains("no space") && refusal.contains("is full"),
        "{refusal}"
    );
    assert!(acked >= 60, "refused after only {acked} objects");
    until("OSD_FULL", 30, || codes(&d).contains("OSD_FULL"));
    seen.extend(codes(&d));
    for code in SPACE {
        assert!(seen.contains(code), "{code} never raised: saw {seen:?}");
    }

    // What the operator sees.
    let health = d.json(&["health", "detail"]);
    assert_eq!(health["status"], "HEALTH_ERR", "{health}");
    let full = checks(&d)
        .into_iter()
        .find(|c| c["code"] == "OSD_FULL")
        .unwrap();
    let detail = full["detail"][0].as_str().unwrap();
    assert!(
        detail.starts_with("osd.") && detail.contains("is full: ") && detail.contains("% used"),
        "{full}"
    );
    let pool = checks(&d)
        .into_iter()
        .find(|c| c["code"] == "POOL_FULL")
        .unwrap();
    assert!(
        pool["detail"][0]
            .as_str()
            .unwrap()
            .starts_with("pool 'rbd' is full (no space)"),
        "{pool}"
    );
    let text = d.ok(&["health", "detail"]);
    assert!(text.contains("[ERR] OSD_FULL"), "{text}");
    let status = d.ok(&["status"]);
    assert!(status.contains("full osd(s)"), "{status}");
    let mgr = d.addr_of("mgr.x");
    until("OSD_FULL in /metrics", 30, || {
        http_get(&mgr, "/metrics")
            .2
            .lines()
            .any(|l| l.starts_with("shoal_health_check{") && l.contains("code=\"OSD_FULL\""))
    });

    // Every acknowledged object is there, whole.
    let back = d.0.join("back");
    for i in 0..acked {
        d.ok(&[
            "rados",
            "-p",
            "rbd",
            "get",
            &format!("o{i}"),
            back.to_str().unwrap(),
        ]);
        assert!(std::fs::read(&back).unwrap() == object(i), "o{i} differs");
    }

    // Each front end in its own terms; deletes still work.
    let mut unsynced = Vec::new();
    if let (Some(m), Some(n)) = (&mount, &nbd) {
        assert_eq!(s3(&d, "PUT", "after-full"), 507, "S3 PUT on a full cluster");
        assert_eq!(
            s3(&d, "DELETE", "before"),
            204,
            "S3 DELETE on a full cluster"
        );
        // Files written as tar writes them, the first writes this client
        // makes on the full cluster: each is refused (ENOSPC from its
        // write or close) or kept and written once space is freed; none
        // is silently short.
        unsynced = fs_write_unsynced(&m.path.join("unsynced"), 6);
        for (errno, _) in &unsynced {
            assert!(
                [0, libc_enospc()].contains(errno),
                "a file written without fsync on a full cluster: errno {errno}"
            );
        }
        let errno = fs_write(&m.path.join("after-full"), 4 << 20);
        assert_eq!(errno, libc_enospc(), "a file written on a full cluster");
        std::fs::remove_file(m.path.join("before")).unwrap();
        std::fs::remove_file(m.path.join("after-full")).unwrap();
        let out = nbd_write(&format!("nbd://{}/rbd/img", n.addr), 0);
        assert!(
            out.contains("No space left"),
            "NBD write on a full cluster: {out}"
        );
    }

    // Freed: the checks clear and writes resume within a minute.

    for i in 0..acked / 2 {
        d.ok(&["rados", "-p", "rbd", "rm", &format!("o{i}")]);
    }
    let freed = Instant::now();
    until("the space checks cleared", 60, || {
        codes(&d).iter().all(|c| !SPACE.contains(&c.as_str()))
    });
    std::fs::write(&file, object(1000)).unwrap();
    until("a write after freeing", 60, || {
        d.run(&["rados", "-p", "rbd", "put", "after", path])
            .status
            .success()
    });
    eprintln!("writes resumed {:?} after the deletes", freed.elapsed());
    assert!(freed.elapsed() < Duration::from_secs(60));
    if let (Some(m), Some(n)) = (&mount, &nbd) {
        assert_eq!(s3(&d, "PUT", "after-freed"), 200);
        assert_eq!(fs_write(&m.path.join("after-freed"), 4 << 20), 0);
        for (i, (errno, data)) in unsynced.iter().enumerate() {
            if *errno == 0 {
                let got = std::fs::read(m.path.join(format!("unsynced/f{i}"))).unwrap();
                assert!(
                    got == *data,
                    "unsynced/f{i}: its write and close succeeded on the full cluster, \
                     but it reads back {} bytes that differ",
                    got.len()
                );
            }
        }
        eprintln!(
            "files written without fsync on the full cluster: {} refused, {} kept",
            unsynced.iter().filter(|(e, _)| *e != 0).count(),
            unsynced.iter().filter(|(e, _)| *e == 0).count()
        );
        let out = nbd_write(&format!("nbd://{}/rbd/img", n.addr), 0);
        assert!(
            out.contains("wrote 4194304"),
            "NBD write after freeing: {out}"
        );
    }
    until("HEALTH_OK", 60, || {
        d.json(&["health"])["status"] == "HEALTH_OK"
    });
    until("no OSD_FULL in /metrics", 30, || {
        !http_get(&mgr, "/metrics").2.contains("code=\"OSD_FULL\"")
    });
}

/// ENOSPC, as Linux numbers it.
fn libc_enospc() -> i32 {
    28
}

//! Real processes on loopback: one `shoal mon` and three `shoal osd` with
//! BlockStores (started by `shoal dev up`), a replicated pool of size 3.
//! Ten thousand objects of 0 B to 8 MiB are written and read back
//! byte-identical through the client library; every op kind runs against
//! the daemons, including a compound op whose guard fails; a `shoal rados`
//! writer SIGKILLed mid-stream and restarted with the same client id
//! applies each op exactly once; an OSD given garbage, malformed ops and
//! unauthorized ops refuses them and keeps serving; erasure-code profiles
//! and an EC pool are made with the CLI (omap there is refused); and at the end the
//! three replicas hold identical objects (`shoal store ls` checksums).

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_client::{Client, ClientOptions, CmpOp, Error, Op};
use shoal_types::EntityName;

const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");

/// A dev cluster, stopped (and its directory removed) however the test ends.
struct DevCluster {
    dir: PathBuf,
}

impl DevCluster {
    fn up(tag: &str) -> DevCluster {
        let dir = std::env::temp_dir().join(format!("shoal-osdproc-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let c = DevCluster { dir };
        // Three op shards per OSD: PGs on threads of their own beside the
        // messenger's (the daemon default is one per core; dev clusters
        // take one).
        let out = c.shoal(&[
            "--set",
            "osd_op_num_shards=3",
            "dev",
            "up",
            "--dir",
            c.dir.to_str().unwrap(),
            "--osds",
            "3",
            "--store",
            "block",
            "--osd-bytes",
            "3000000000",
        ]);
        assert!(
            out.status.success(),
            "dev up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        c
    }

    fn conf(&self) -> PathBuf {
        self.dir.join("shoal.conf")
    }

    fn shoal(&self, args: &[&str]) -> std::process::Output {
        Command::new(SHOAL)
            .args(common::with_test_sets(args))
            .env("SHOAL_CONF", self.conf())
            .output()
            .unwrap()
    }

    async fn client(&self, name: &str) -> Client {
        let name: EntityName = name.parse().unwrap();
        let mut o = ClientOptions::from_config(Some(&self.conf()), &name, &[]).unwrap();
        o.op_timeout = Duration::from_secs(60);
        Client::connect(o).await.unwrap()
    }

    fn down(&self) {
        let out = self.shoal(&["dev", "down", "--dir", self.dir.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "dev down: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for DevCluster {
    fn drop(&mut self) {
        let _ = self.shoal(&["dev", "down", "--dir", self.dir.to_str().unwrap(), "--wipe"]);
    }
}

/// Deterministic bytes for object `i`.
fn content(i: u64, len: usize) -> Bytes {
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    Bytes::from(v)
}

/// Sizes: most objects small (0 B to 32 KiB), one in 200 large (1 to 8 MiB).
fn size_of(i: u64) -> usize {
    let r = i.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11;
    if i % 200 == 7 {
        (1 << 20) + (r % (7 << 20)) as usize
    } else {
        (r % (32 << 10)) as usize
    }
}

async fn write_and_verify(client: &Client, n: u64) {
    let pool = client.pool("rbd").unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let pool = pool.clone();
        tasks.spawn(async move {
            pool.write_full(&format!("obj{i}"), content(i, size_of(i)))
                .await
                .map_err(|e| format!("obj{i}: {e}"))
        });
        while tasks.len() >= 64 {
            tasks.join_next().await.unwrap().unwrap().unwrap();
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap().unwrap();
    }
    for i in 0..n {
        let pool = pool.clone();
        tasks.spawn(async move {
            let got = pool.read(&format!("obj{i}"), 0, 0).await.unwrap();
            assert!(got == content(i, size_of(i)), "obj{i} differs");
            Ok(())
        });
        while tasks.len() >= 64 {
            tasks.join_next().await.unwrap().unwrap().unwrap();
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap().unwrap();
    }
    let listed = pool.list_all().await.unwrap();
    assert_eq!(
        listed.iter().filter(|e| e.name.starts_with("obj")).count() as u64,
        n
    );
}

async fn every_op_kind(client: &Client) {
    let pool = client.pool("rbd").unwrap();
    pool.create("k", true).await.unwrap();
    assert!(matches!(
        pool.create("k", true).await,
        Err(Error::Exists(_))
    ));
    pool.write("k", 4, &b"data"[..]).await.unwrap();
    pool.append("k", &b"+"[..]).await.unwrap();
    pool.zero("k", 4, 1).await.unwrap();
    pool.truncate("k", 8).await.unwrap();
    assert_eq!(&pool.read("k", 0, 0).await.unwrap()[..], b"\0\0\0\0\0ata");
    assert_eq!(pool.stat("k").await.unwrap().size, 8);
    pool.setxattr("k", "a", &b"1"[..]).await.unwrap();
    pool.cmpxattr("k", "a", CmpOp::Eq, &b"1"[..]).await.unwrap();
    assert_eq!(pool.getxattrs("k").await.unwrap().len(), 1);
    pool.omap_set("k", &[("x", "1"), ("y", "2")]).await.unwrap();
    pool.omap_set_header("k", &b"h"[..]).await.unwrap();
    assert_eq!(
        pool.omap_get_vals("k", b"", b"", 0)
            .await
            .unwrap()
            .entries
            .len(),
        2
    );
    pool.omap_rm_keys("k", &["x"]).await.unwrap();
    assert_eq!(
        pool.omap_get_keys("k", b"", b"", 0)
            .await
            .unwrap()
            .entries
            .len(),
        1
    );
    // A compound op whose guard fails applies nothing.
    let v = pool.stat("k").await.unwrap().version;
    let op = Op::new()
        .write_full(&b"changed"[..])
        .cmpxattr("a", CmpOp::Eq, &b"2"[..])
        .omap_clear();
    let e = pool.operate("k", op).await.unwrap_err();
    assert_eq!(e.index, 1);
    assert!(matches!(e.error, Error::CompareFailed(_)));
    let r = pool
        .operate(
            "k",
            Op::new().assert_version(v).read(0, 0).omap_get_header(),
        )
        .await
        .unwrap();
    assert_eq!(r.data(1).unwrap().len(), 8);
    assert_eq!(&r.data(2).unwrap()[..], b"h");
    pool.rmxattr("k", "a").await.unwrap();
    pool.omap_clear("k").await.unwrap();
    pool.remove("k").await.unwrap();
    assert!(matches!(pool.stat("k").await, Err(Error::NotFound(_))));
}

/// A `shoal rados` writer appending `1;2;...` is SIGKILLed mid-stream and
/// run again with the same client id: every append applies exactly once.
fn killed_writer_resends_exactly_once(c: &DevCluster) {
    let args = [
        "rados",
        "-p",
        "rbd",
        "--client-inc",
        "4242",
        "append-seq",
        "seq",
        "--count",
        "300",
    ];
    let mut child = Command::new(SHOAL)
        .args(args)
        .env("SHOAL_CONF", c.conf())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Let it get somewhere, then kill it without warning.
    let mut out = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut buf = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("\n40\n") && Instant::now() < deadline {
        use std::io::Read;
        let n = out.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&buf[..n]);
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let out = c.shoal(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = c.shoal(&["rados", "-p", "rbd", "get", "seq", "-"]);
    let want: String = (1..=300).map(|n| format!("{n};")).collect();
    assert_eq!(String::from_utf8_lossy(&got.stdout), want);
}

/// Garbage, malformed ops and unauthorized ops are refused; others are served.
async fn bad_requests_are_refused(c: &DevCluster, admin: &Client) {
    let map = admin.map().unwrap();
    let addr: SocketAddr = map.osd(0).unwrap().addr.clone().unwrap().parse().unwrap();
    // Random bytes instead of a handshake: the OSD closes the connection.
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(&content(99, 4096));
    let mut sink = Vec::new();
    use std::io::Read;
    let _ = s.read_to_end(&mut sink);
    // A client allowed to read only: its writes are refused.
    let out = c.shoal(&[
        "auth",
        "get-or-create",
        "client.ro",
        "mon",
        "allow r",
        "osd",
        "allow r pool=rbd",
        "--format",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let key = v["client.ro"]["key"].as_str().unwrap();
    let admin_name: EntityName = "client.admin".parse().unwrap();
    let mut o = ClientOptions::from_config(Some(&c.conf()), &admin_name, &[]).unwrap();
    o.name = "client.ro".parse().unwrap();
    o.key = shoal_net::Secret::from_base64(key).unwrap();
    let ro = Client::connect(o).await.unwrap();
    let pool = ro.pool("rbd").unwrap();
    let e = pool.write_full("ro", &b"x"[..]).await.unwrap_err();
    assert!(matches!(e, Error::PermissionDenied(_)), "{e:?}");
    assert_eq!(
        pool.read("obj1", 0, 0).await.unwrap(),
        content(1, size_of(1))
    );
    ro.shutdown().await;
    // Everyone else is still served.
    let pool = admin.pool("rbd").unwrap();
    assert_eq!(
        pool.read("obj3", 0, 0).await.unwrap(),
        content(3, size_of(3))
    );
}

/// Erasure-code profiles and pools through the CLI, as an operator makes
/// them; omap on an EC pool is refused by the OSD with a clear error.
async fn erasure_code_profiles_and_pools(c: &DevCluster, admin: &Client) {
    let run = |args: &[&str]| {
        let o = c.shoal(args);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        (o.status.success(), out, err)
    };
    let ok = |args: &[&str]| {
        let (good, out, err) = run(args);
        assert!(good, "{args:?}: {err}");
        out
    };
    ok(&[
        "osd",
        "erasure-code-profile",
        "set",
        "two-one",
        "k=2",
        "m=1",
        "crush-failure-domain=osd",
    ]);
    let got = ok(&["osd", "erasure-code-profile", "get", "two-one"]);
    for line in [
        "k=2",
        "m=1",
        "crush-failure-domain=osd",
        "stripe_unit=4096",
        "plugin=jerasure",
    ] {
        assert!(got.lines().any(|l| l == line), "{line} not in\n{got}");
    }
    let ls = ok(&["osd", "erasure-code-profile", "ls"]);
    assert_eq!(ls.lines().collect::<Vec<_>>(), ["default", "two-one"]);
    let (good, _, err) = run(&[
        "osd",
        "erasure-code-profile",
        "set",
        "bad",
        "k=2",
        "m=1",
        "plugin=shec",
    ]);
    assert!(!good && err.contains("not available"), "{err}");
    // Ceph's spelling, with pgp_num; the default profile (2+2) does not fit
    // three OSDs and says so.
    ok(&[
        "osd", "pool", "create", "ecpool", "8", "8", "erasure", "two-one",
    ]);
    let (good, _, err) = run(&["osd", "pool", "create", "wide", "8", "erasure"]);
    assert!(!good && err.contains("failure domains"), "{err}");
    ok(&[
        "osd",
        "pool",
        "set",
        "ecpool",
        "allow_ec_overwrites",
        "true",
    ]);
    let detail = ok(&["osd", "pool", "ls", "--detail"]);
    let line = detail.lines().find(|l| l.contains("'ecpool'")).unwrap();
    for want in [
        "erasure size 3 min_size 3",
        "crush_rule ecpool",
        "erasure_code_profile two-one",
        "stripe_width 8192",
        "ec_overwrites",
    ] {
        assert!(line.contains(want), "{want} not in {line}");
    }
    let (good, _, err) = run(&["osd", "erasure-code-profile", "rm", "two-one"]);
    assert!(!good && err.contains("in use by pool ecpool"), "{err}");
    // Omap never lives in an EC pool.
    let ec = admin.pool("ecpool").unwrap();
    let e = ec
        .operate("meta", Op::new().omap_set(&[("k", &b"v"[..])]))
        .await
        .unwrap_err();
    assert!(
        matches!(e.error, Error::NotSupported(ref m) if m.contains("omap is not supported")),
        "{e:?}"
    );
    ok(&[
        "osd",
        "pool",
        "rm",
        "ecpool",
        "ecpool",
        "--yes-i-really-really-mean-it",
    ]);
    ok(&["osd", "erasure-code-profile", "rm", "two-one"]);
    let ls = ok(&["osd", "erasure-code-profile", "ls"]);
    assert_eq!(ls.lines().collect::<Vec<_>>(), ["default"]);
}

/// `shoal store ls` of each OSD, as pg → object → (size, data crc, meta crc).
fn replica_listings(c: &DevCluster) -> Vec<BTreeMap<String, String>> {
    (0..3)
        .map(|i| {
            let store = c.dir.join(format!("osd.{i}")).join("store");
            let out = c.shoal(&["store", "ls", store.to_str().unwrap()]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| {
                    let (key, rest) = l.split_once(' ').unwrap();
                    let (name, sums) = rest.split_once(' ').unwrap();
                    (format!("{key} {name}"), sums.to_string())
                })
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_objects_on_three_osds_with_block_stores() {
    let c = DevCluster::up("main");
    let admin = c.client("client.admin").await;
    write_and_verify(&admin, 10_000).await;
    every_op_kind(&admin).await;
    killed_writer_resends_exactly_once(&c);
    bad_requests_are_refused(&c, &admin).await;
    erasure_code_profiles_and_pools(&c, &admin).await;
    admin.shutdown().await;
    c.down();
    let lists = replica_listings(&c);
    assert!(
        lists[0].len() >= 10_001,
        "{} objects on osd.0",
        lists[0].len()
    );
    assert_eq!(lists[0], lists[1], "osd.0 and osd.1 differ");
    assert_eq!(lists[0], lists[2], "osd.0 and osd.2 differ");
}

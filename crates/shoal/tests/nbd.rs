//! `shoal nbd serve` against clients nobody here wrote — nbdinfo, qemu-img,
//! qemu-io, nbdcopy, nbdsh (libnbd) and fio's nbd engine — on a `shoal dev`
//! cluster: sizes agree, pattern writes and reads (aligned and not),
//! copies round trip, fio verifies, four connections write at once, block
//! status follows trims and zero writes, a snapshot is served read-only,
//! TLS (STARTTLS) serves a client with the CA and refuses one in the clear;
//! and, through a raw client written here, the protocol's errors for bad
//! requests on a connection that keeps serving, and a client that drops
//! the socket with writes in flight: every acknowledged write is there.
//!
//! The external tools come from Debian (`qemu-utils`, `libnbd-bin`,
//! `python3-libnbd`, `fio`; `.ci/run` installs them and sets
//! `SHOAL_REQUIRE_TOOLS=1`, so CI fails rather than skips without them).

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Dev, SHOAL};
use shoal_nbd::proto::{self, cmd, errno, opt, rep};

const TOOLS: [&str; 7] = [
    "nbdinfo", "nbdcopy", "nbdsh", "qemu-io", "qemu-img", "fio", "openssl",
];

/// Whether every tool is installed; without them the test is skipped,
/// unless `SHOAL_REQUIRE_TOOLS` says CI must have them.
fn tools_present() -> bool {
    let missing: Vec<&str> = TOOLS
        .iter()
        .copied()
        .filter(|t| {
            Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .output()
                .map(|o| !o.status.success())
                .unwrap_or(true)
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    let m =
        format!("missing {missing:?}: apt-get install qemu-utils libnbd-bin python3-libnbd fio");
    assert!(std::env::var_os("SHOAL_REQUIRE_TOOLS").is_none(), "{m}");
    eprintln!("skipped: {m}");
    false
}

/// A `shoal nbd serve` process, stopped when dropped.
struct Serve(common::Background);

impl std::ops::Deref for Serve {
    type Target = common::Background;
    fn deref(&self) -> &common::Background {
        &self.0
    }
}

impl Serve {
    fn start(d: &Dev, extra: &[&str]) -> Serve {
        let mut args = vec!["nbd", "serve", "--bind", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        Serve(common::Background::start(d, &args, "nbd"))
    }

    fn uri(&self, export: &str) -> String {
        format!("nbd://{}/{export}", self.addr)
    }
}

/// Runs a tool, which must succeed within 60 s; its standard output.
fn tool(args: &[&str]) -> String {
    let out = run_tool(args);
    assert!(
        out.status.success(),
        "{args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn run_tool(args: &[&str]) -> std::process::Output {
    let mut child = Command::new("timeout")
        .arg("60")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = Vec::new();
    let mut err = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    child.stderr.take().unwrap().read_to_end(&mut err).unwrap();
    std::process::Output {
        status: child.wait().unwrap(),
        stdout: out,
        stderr: err,
    }
}

/// qemu-io commands against `uri`; fails on any error or bad pattern.
fn qemu_io(uri: &str, cmds: &[&str]) -> String {
    qemu_io_with(&[], uri, cmds)
}

fn qemu_io_with(opts: &[&str], uri: &str, cmds: &[&str]) -> String {
    let mut args = vec!["qemu-io", "-f", "raw"];
    args.extend(opts);
    for c in cmds {
        args.extend(["-c", c]);
    }
    args.push(uri);
    let out = tool(&args);
    assert!(
        !out.contains("failed") && !out.contains("error"),
        "qemu-io {cmds:?}: {out}"
    );
    out
}

fn cluster(tag: &str) -> Dev {
    let d = Dev::new(tag);
    d.ok(&["dev", "up", "--dir", d.dir(), "--osds", "3"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !d.all_active_clean() {
        assert!(Instant::now() < deadline, "{}", d.ok(&["pg", "stat"]));
        std::thread::sleep(Duration::from_millis(300));
    }
    d
}

#[test]
fn standard_nbd_clients_attach_images() {
    if !tools_present() {
        return;
    }
    let d = cluster("nbd-clients");
    d.ok(&["rbd", "create", "disk", "-s", "64M"]);
    let s = Serve::start(&d, &[]);
    let uri = s.uri("rbd/disk");

    // Sizes agree; the export is listed.
    assert_eq!(tool(&["nbdinfo", "--size", &uri]).trim(), "67108864");
    let info: serde_json::Value =
        serde_json::from_str(&tool(&["qemu-img", "info", "--output=json", &uri])).unwrap();
    assert_eq!(info["virtual-size"], 67108864, "{info}");
    let list = tool(&["nbdinfo", "--list", &s.uri("")]);
    assert!(list.contains("rbd/disk"), "{list}");
    let caps = tool(&["nbdinfo", &uri]);
    for cap in ["can_multi_conn: true", "can_fua: true", "base:allocation"] {
        assert!(caps.contains(cap), "{cap} not in {caps}");
    }

    // Pattern writes and reads, aligned and not.
    qemu_io(
        &uri,
        &[
            "write -P 0xab 0 1M",
            "write -P 0xcd 1000 777",
            "write -P 0xef 4095 4098",
            "read -P 0xab 0 1000",
            "read -P 0xcd 1000 777",
            "read -P 0xab 1777 2318",
            "read -P 0xef 4095 4098",
            "read -P 0xab 8193 1040383",
            "read -P 0 1M 1M",
        ],
    );

    // A copy round trips through the export.
    let src = d.0.join("src.bin");
    let mut body: Vec<u8> = (0..8u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    body.resize(64 << 20, 0);
    std::fs::write(&src, &body).unwrap();
    tool(&["nbdcopy", src.to_str().unwrap(), &uri]);
    let back = d.0.join("back.bin");
    tool(&["nbdcopy", &uri, back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == body, "nbdcopy round trip");

    // Block status: data where written, holes where trimmed or zeroed.
    qemu_io(&uri, &["discard 0 4M", "write -z -u 4M 4M"]);
    let map = tool(&["nbdinfo", "--map", "--totals", &uri]);
    let data: u64 = map
        .lines()
        .find(|l| l.contains("data"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert_eq!(
        data, 0,
        "nothing is allocated after trims and zeroing:\n{map}"
    );
    qemu_io(&uri, &["read -P 0 0 8M"]);

    // fio's nbd engine: random writes verified, then random reads.
    let fio = tool(&[
        "fio",
        "--name=verify",
        "--ioengine=nbd",
        &format!("--uri={uri}"),
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=16",
        "--size=8M",
        "--verify=crc32c",
        "--do_verify=1",
        "--verify_state_save=0",
    ]);
    assert!(fio.contains("err= 0"), "{fio}");

    // Four connections writing at once, each its own pattern and region.
    let writers: Vec<_> = (0..4u32)
        .map(|i| {
            let uri = uri.clone();
            std::thread::spawn(move || {
                let at = (16 + i * 4) << 20;
                let c = format!("write -P {} {at} 4M", 0x10 + i);
                qemu_io(&uri, &[&c]);
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    for i in 0..4u32 {
        let at = (16 + i * 4) << 20;
        qemu_io(&uri, &[&format!("read -P {} {at} 4M", 0x10 + i)]);
    }

    // libnbd: a read past the end fails and the connection keeps serving.
    let script = format!(
        "h.connect_uri('{uri}')\n\
         try:\n    h.pread(512, 64 << 20)\n    raise SystemExit('read past the end succeeded')\n\
         except nbd.Error as e:\n    print('refused', e.errno)\n\
         assert h.pread(4, 16 << 20) == b'\\x10' * 4\n\
         h.shutdown()\n"
    );
    // nbdsh, run by Debian's Python (which has the nbd module), not
    // whatever python3 comes first on the PATH.
    let out = tool(&["/usr/bin/python3", "-m", "nbd", "-c", &script]);
    assert!(out.contains("refused"), "{out}");

    // A snapshot is served read-only, as it was taken.
    d.ok(&["rbd", "snap", "create", "disk@before"]);
    qemu_io(&uri, &["write -P 0x77 16M 4k"]);
    let snap = s.uri("rbd/disk@before");
    let caps = tool(&["nbdinfo", &snap]);
    assert!(caps.contains("is_read_only: true"), "{caps}");
    qemu_io_with(&["-r"], &snap, &["read -P 0x10 16M 4k"]);
    let w = run_tool(&["qemu-io", "-f", "raw", "-c", "write 0 4k", &snap]);
    let out = String::from_utf8_lossy(&w.stdout).into_owned() + &String::from_utf8_lossy(&w.stderr);
    assert!(out.contains("failed") || !w.status.success(), "{out}");

    // Unknown exports are refused by name.
    let e = run_tool(&["nbdinfo", &s.uri("rbd/nosuch")]);
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stderr).contains("nosuch"));

    // Written data outlives the server process.
    drop(s);
    let s2 = Serve::start(&d, &[]);
    qemu_io(
        &s2.uri("rbd/disk"),
        &["read -P 0x77 16M 4k", "read -P 0x11 20M 4M"],
    );
    drop(s2);

    // TLS: a client with the CA certificate upgrades with STARTTLS and
    // reads and writes; one in the clear is refused.
    let tls = d.0.join("tls");
    let (cert, key) = common::self_signed(&tls);
    let s3 = Serve::start(
        &d,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--tls-required",
        ],
    );
    let secure = format!(
        "nbds://{}/rbd/disk?tls-certificates={}",
        s3.addr,
        tls.to_str().unwrap()
    );
    let out = tool(&["nbdinfo", &secure]);
    assert!(
        out.contains("with TLS") && out.contains("67108864"),
        "{out}"
    );
    let small = d.0.join("small.bin");
    std::fs::write(&small, vec![0x42u8; 1 << 20]).unwrap();
    tool(&["nbdcopy", small.to_str().unwrap(), &secure]);
    let back = d.0.join("small.back");
    tool(&["nbdcopy", &secure, back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap()[..1 << 20] == vec![0x42u8; 1 << 20][..]);
    let clear = run_tool(&["nbdinfo", &s3.uri("rbd/disk")]);
    assert!(!clear.status.success(), "a client in the clear was served");
}

/// A client of the raw protocol (fixed newstyle, structured replies).
struct Raw(TcpStream);

impl Raw {
    fn connect(addr: &str, export: &str, structured: bool) -> Raw {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut g = [0u8; 18];
        s.read_exact(&mut g).unwrap();
        assert_eq!(&g[..8], b"NBDMAGIC");
        s.write_all(&(proto::C_FLAG_FIXED_NEWSTYLE | proto::C_FLAG_NO_ZEROES).to_be_bytes())
            .unwrap();
        let mut r = Raw(s);
        if structured {
            assert_eq!(r.option(opt::STRUCTURED_REPLY, &[]).0, rep::ACK);
            let mut m = Vec::new();
            m.extend_from_slice(&(export.len() as u32).to_be_bytes());
            m.extend_from_slice(export.as_bytes());
            m.extend_from_slice(&1u32.to_be_bytes());
            m.extend_from_slice(&(proto::BASE_ALLOCATION.len() as u32).to_be_bytes());
            m.extend_from_slice(proto::BASE_ALLOCATION.as_bytes());
            assert_eq!(r.option(opt::SET_META_CONTEXT, &m).0, rep::META_CONTEXT);
            assert_eq!(r.reply().0, rep::ACK);
        }
        let mut go = Vec::new();
        go.extend_from_slice(&(export.len() as u32).to_be_bytes());
        go.extend_from_slice(export.as_bytes());
        go.extend_from_slice(&0u16.to_be_bytes());
        let (mut kind, _) = r.option(opt::GO, &go);
        while kind == rep::INFO {
            kind = r.reply().0;
        }
        assert_eq!(kind, rep::ACK);
        r
    }

    fn option(&mut self, option: u32, data: &[u8]) -> (u32, Vec<u8>) {
        let mut b = Vec::new();
        b.extend_from_slice(&proto::IHAVEOPT.to_be_bytes());
        b.extend_from_slice(&option.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        self.0.write_all(&b).unwrap();
        self.reply()
    }

    fn reply(&mut self) -> (u32, Vec<u8>) {
        let mut h = [0u8; 20];
        self.0.read_exact(&mut h).unwrap();
        assert_eq!(&h[..8], &proto::REPLY_MAGIC.to_be_bytes());
        let kind = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
        let mut d = vec![0u8; len as usize];
        self.0.read_exact(&mut d).unwrap();
        (kind, d)
    }

    fn send(&mut self, kind: u16, flags: u16, cookie: u64, offset: u64, len: u32, data: &[u8]) {
        let r = proto::Request {
            flags,
            kind,
            cookie,
            offset,
            len,
        };
        let mut b = proto::encode_request(&r).to_vec();
        b.extend_from_slice(data);
        self.0.write_all(&b).unwrap();
    }

    /// One structured reply: (cookie, error, payload of its data chunk).
    fn structured(&mut self) -> (u64, u32, Vec<u8>) {
        let mut h = [0u8; 20];
        self.0.read_exact(&mut h).unwrap();
        assert_eq!(&h[..4], &proto::STRUCTURED_REPLY_MAGIC.to_be_bytes());
        let kind = u16::from_be_bytes([h[6], h[7]]);
        let cookie = u64::from_be_bytes(h[8..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
        let mut d = vec![0u8; len as usize];
        self.0.read_exact(&mut d).unwrap();
        let error = match kind {
            proto::reply::ERROR => u32::from_be_bytes(d[..4].try_into().unwrap()),
            _ => 0,
        };
        (cookie, error, d)
    }

    /// One simple reply: (cookie, error); a read's data follows it.
    fn simple(&mut self) -> (u64, u32) {
        let mut h = [0u8; 16];
        self.0.read_exact(&mut h).unwrap();
        assert_eq!(&h[..4], &proto::SIMPLE_REPLY_MAGIC.to_be_bytes());
        let error = u32::from_be_bytes(h[4..8].try_into().unwrap());
        (u64::from_be_bytes(h[8..16].try_into().unwrap()), error)
    }
}

#[test]
fn bad_requests_get_errors_and_dropped_clients_lose_no_acknowledged_write() {
    let d = cluster("nbd-raw");
    d.ok(&["rbd", "create", "disk", "-s", "8M"]);
    let s = Serve::start(&d, &[]);
    let size = 8u64 << 20;

    // Options: an unknown export, an unknown option; the haggling goes on.
    let mut r = Raw(TcpStream::connect(&s.addr).unwrap());
    let mut g = [0u8; 18];
    r.0.read_exact(&mut g).unwrap();
    r.0.write_all(&proto::C_FLAG_FIXED_NEWSTYLE.to_be_bytes())
        .unwrap();
    let mut info = Vec::new();
    info.extend_from_slice(&6u32.to_be_bytes());
    info.extend_from_slice(b"nosuch");
    info.extend_from_slice(&0u16.to_be_bytes());
    let (kind, msg) = r.option(opt::INFO, &info);
    assert_eq!(kind, rep::ERR_UNKNOWN, "{}", String::from_utf8_lossy(&msg));
    assert_eq!(r.option(99, &[]).0, rep::ERR_UNSUP);
    assert_eq!(r.option(opt::INFO, &[1, 2]).0, rep::ERR_INVALID);
    assert_eq!(r.option(opt::ABORT, &[]).0, rep::ACK);

    // Bad requests: each gets its error, and the connection serves on.
    let mut r = Raw::connect(&s.addr, "rbd/disk", true);
    r.send(cmd::READ, 0, 1, size - 10, 20, &[]);
    assert_eq!(r.structured().1, errno::EINVAL, "read past the end");
    r.send(cmd::WRITE, 0, 2, size - 2, 4, b"abcd");
    assert_eq!(r.structured().1, errno::ENOSPC, "write past the end");
    r.send(cmd::WRITE, 0, 3, u64::MAX - 1, 4, b"abcd");
    assert_eq!(r.structured().1, errno::ENOSPC, "offset overflowing");
    r.send(42, 0, 4, 0, 0, &[]);
    assert_eq!(r.structured().1, errno::EINVAL, "unknown command");
    r.send(cmd::READ, 0, 5, 0, 64 << 20, &[]);
    assert_eq!(r.structured().1, errno::EINVAL, "oversized read");
    r.send(cmd::READ, proto::cflag::DF, 6, 0, 64 << 20, &[]);
    assert_eq!(
        r.structured().1,
        errno::EOVERFLOW,
        "oversized read, unfragmented"
    );
    // An oversized write's payload is read past, not taken as requests.
    let big = vec![0x5au8; (33 << 20) as usize];
    r.send(cmd::WRITE, 0, 7, 0, big.len() as u32, &big);
    assert_eq!(r.structured().1, errno::EINVAL, "oversized write");
    r.send(
        cmd::WRITE_ZEROES,
        proto::cflag::NO_HOLE | proto::cflag::FAST_ZERO,
        8,
        0,
        4096,
        &[],
    );
    assert_eq!(
        r.structured().1,
        errno::ENOTSUP,
        "slow zeroing asked to be fast"
    );
    r.send(cmd::BLOCK_STATUS, 0, 9, 0, 0, &[]);
    assert_eq!(r.structured().1, errno::EINVAL, "block status of nothing");
    r.send(cmd::WRITE, proto::cflag::FUA, 10, 100, 5, b"hello");
    assert_eq!(r.structured(), (10, 0, Vec::new()));
    r.send(cmd::READ, 0, 11, 100, 5, &[]);
    let (cookie, error, data) = r.structured();
    assert_eq!((cookie, error), (11, 0));
    assert_eq!(&data[8..], b"hello");
    r.send(cmd::BLOCK_STATUS, 0, 12, 0, 8192, &[]);
    let (_, error, data) = r.structured();
    assert_eq!(error, 0);
    // The context id, then (length, flags) descriptors covering the
    // range: the bytes written at 100 lie in data, the rest may be holes.
    let word = |i: usize| u32::from_be_bytes(data[i..i + 4].try_into().unwrap());
    assert_eq!(word(0), proto::BASE_ALLOCATION_ID);
    let mut at = 0u64;
    let mut covered = false;
    for i in (4..data.len()).step_by(8) {
        let (len, flags) = (u64::from(word(i)), word(i + 4));
        if at <= 100 && 105 <= at + len {
            covered = flags == 0;
        }
        at += len;
    }
    assert_eq!(at, 8192, "the descriptors cover the range");
    assert!(covered, "the written bytes are data");
    r.send(cmd::DISC, 0, 13, 0, 0, &[]);

    // Simple replies (no structured replies negotiated): a block status
    // is refused, reads and writes work.
    let mut r = Raw::connect(&s.addr, "disk", false);
    r.send(cmd::BLOCK_STATUS, 0, 1, 0, 4096, &[]);
    assert_eq!(r.simple(), (1, errno::EINVAL));
    r.send(cmd::READ, 0, 2, 100, 5, &[]);
    assert_eq!(r.simple(), (2, 0));
    let mut b = [0u8; 5];
    r.0.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"hello");

    // A client sends 64 writes, reads the first replies and drops the
    // socket: each write acknowledged is there, each other one is whole
    // or absent.
    let mut r = Raw::connect(&s.addr, "rbd/disk", true);
    let block = |i: u64| vec![(i as u8) | 0x80; 4096];
    for i in 0..64u64 {
        r.send(cmd::WRITE, 0, i, (1 << 20) + i * 4096, 4096, &block(i));
    }
    let mut acked = Vec::new();
    for _ in 0..8 {
        let (cookie, error, _) = r.structured();
        assert_eq!(error, 0);
        acked.push(cookie);
    }
    drop(r);
    std::thread::sleep(Duration::from_millis(500));
    let mut r = Raw::connect(&s.addr, "rbd/disk", true);
    r.send(cmd::READ, 0, 1, 1 << 20, 64 * 4096, &[]);
    let (_, error, data) = r.structured();
    assert_eq!(error, 0);
    let data = &data[8..];
    for i in 0..64u64 {
        let got = &data[(i * 4096) as usize..((i + 1) * 4096) as usize];
        let whole = got == block(i).as_slice();
        if acked.contains(&i) {
            assert!(whole, "acknowledged write {i} is not there");
        } else {
            assert!(whole || got.iter().all(|b| *b == 0), "write {i} is torn");
        }
    }
}

#[test]
fn device_mappings_are_listed_recorded_remade_and_removed() {
    let d = cluster("nbd-device");
    d.ok(&["rbd", "create", "disk", "-s", "8M"]);
    let run = d.0.join("rbd-run");
    let recs = d.0.join("mappings.json");
    let dev = |args: &[&str]| {
        let out = Command::new(SHOAL)
            .args(["rbd", "device"])
            .args(args)
            .env("SHOAL_CONF", d.0.join("shoal.conf"))
            .env("SHOAL_RBD_RUN_DIR", &run)
            .env("SHOAL_RBD_MAPPINGS", &recs)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let list = || -> Vec<serde_json::Value> {
        let (ok, out) = dev(&["list", "--format", "json"]);
        assert!(ok, "{out}");
        serde_json::from_str(&out).unwrap()
    };
    let alive = |pid: u64| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| !r.trim_start().starts_with('Z'))
        })
    };

    let (ok, out) = dev(&["map", "disk", "--persistent"]);
    assert!(ok, "{out}");
    if !std::path::Path::new("/sys/module/nbd").exists() {
        // No kernel device here: said clearly, with the URI to attach.
        assert!(
            out.contains("nbd module is not loaded") && out.contains("nbd://"),
            "{out}"
        );
    }
    let maps = list();
    assert_eq!(maps.len(), 1, "{maps:?}");
    assert_eq!(maps[0]["image"], "rbd/disk");
    let pid = maps[0]["pid"].as_u64().unwrap();
    let uri = maps[0]["uri"].as_str().unwrap().to_string();
    let (ok, out) = dev(&["map", "rbd/disk"]);
    assert!(!ok && out.contains("mapped already"), "{out}");
    // The mapping serves the image, and a snapshot maps read-only.
    let mut s =
        TcpStream::connect(uri.trim_start_matches("nbd://").split('/').next().unwrap()).unwrap();
    let mut g = [0u8; 8];
    s.read_exact(&mut g).unwrap();
    assert_eq!(&g, b"NBDMAGIC");
    drop(s);
    d.ok(&["rbd", "snap", "create", "disk@s"]);
    let (ok, out) = dev(&["map", "disk@s"]);
    assert!(ok, "{out}");
    assert_eq!(list().len(), 2);

    // Detached at "shutdown", records kept; made again at "boot".
    let (ok, out) = dev(&["unmap", "--all", "--keep-persistent"]);
    assert!(ok, "{out}");
    assert!(list().is_empty());
    assert!(!alive(pid), "the server of the unmapped image still runs");
    let (ok, out) = dev(&["map", "--persistent-all"]);
    assert!(ok, "{out}");
    let maps = list();
    assert_eq!(
        maps.len(),
        1,
        "only the persistent mapping comes back: {maps:?}"
    );
    let pid = maps[0]["pid"].as_u64().unwrap();

    // Unmapped for good: no record, no process, nothing in force.
    let (ok, out) = dev(&["unmap", "disk"]);
    assert!(ok, "{out}");
    assert!(list().is_empty());
    assert!(!alive(pid));
    let recorded: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(&recs).unwrap()).unwrap();
    assert!(recorded.is_empty(), "{recorded:?}");
    let (ok, out) = dev(&["unmap", "disk"]);
    assert!(!ok && out.contains("not mapped"), "{out}");
}

/// A sample of the 1 000-image run (`bench/rbd_nbd_images.sh`): images
/// created, mapped, written and verified through NBD, unmapped and removed,
/// several at a time, with nothing left behind.
#[test]
fn a_sample_of_the_thousand_image_run_leaves_nothing_behind() {
    if !tools_present() {
        return;
    }
    let d = cluster("nbd-images");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/rbd_nbd_images.sh");
    let out = Command::new("timeout")
        .args([
            "300",
            "bash",
            script,
            "--count",
            "12",
            "--parallel",
            "6",
            "--mib",
            "1",
        ])
        .env("SHOAL", SHOAL)
        .env("SHOAL_CONF", d.0.join("shoal.conf"))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("left behind: 0 images, 0 data objects, 0 mappings, 0 servers; 0 failures"),
        "{text}"
    );
    for step in ["create", "map", "io", "unmap", "remove"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(step) && l.contains(" 12 ")),
            "no {step} row for 12 images:\n{text}"
        );
    }
}

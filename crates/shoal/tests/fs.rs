//! The file system through the kernel: `shoal dev up --fs` (an active and
//! a standby MDS) and `shoal fs mount` (FUSE), exercised as users do.
//!
//! - a POSIX conformance suite (`clients/posix_suite.py`, pjdfstest's
//!   cases written here: it must also pass whole on the local disk) and an
//!   fsx-style exerciser (`clients/fsx.py`), with and without mmap;
//! - an untar of a source tarball compared entry by entry (type, mode,
//!   size, mtime, content, link target) with the same untar on local disk;
//! - two mounts: close-to-open consistency both ways, a writer's
//!   capability recalled when the other stats its file, and a client
//!   SIGKILLed while holding a capability: the other proceeds once the
//!   dead session times out;
//! - an unlinked open file freed at its last close;
//! - the active MDS SIGKILLed in the middle of an untar: the standby
//!   replays the journal and takes over, the client resends what was not
//!   acknowledged, and the tree ends identical to the local one; an orphan
//!   whose client died is freed by the next MDS.
//!
//! Needs /dev/fuse and root (CI has both); skipped with a message
//! elsewhere, unless `SHOAL_REQUIRE_TOOLS` says it must run.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

mod common;

use shoal_monclient::replies::FsMapReply;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Dev, Mount, python, until};

const SETS: [&str; 10] = [
    "--set",
    "mds_dir_frag_max=200",
    "--set",
    "mds_session_timeout_ms=6000",
    "--set",
    "mon_mds_beacon_grace_ms=4000",
    "--set",
    "mds_beacon_interval_ms=500",
    "--set",
    "mds_journal_flush_events=500",
];

fn clients() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// Whether FUSE mounts can work here.
fn fuse_usable() -> bool {
    let ok = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .is_ok()
        && unsafe_free_is_root();
    if !ok {
        let m = "no usable /dev/fuse (or not root): the file-system tests need both";
        assert!(std::env::var_os("SHOAL_REQUIRE_TOOLS").is_none(), "{m}");
        eprintln!("skipped: {m}");
    }
    ok
}

fn unsafe_free_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn up(tag: &str) -> Dev {
    let d = Dev::new(tag);
    let mut extra = vec!["--no-gateway", "--no-mgr", "--fs"];
    extra.extend(SETS);
    d.up_mem(&extra);
    d
}

/// A tarball of this repository's sources (a few hundred files and
/// directories, symlinks and all, as `git archive` would give).
fn source_tarball(dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let tar = dir.join("src.tar");
    let ok = Command::new("tar")
        .arg("-C")
        .arg(&root)
        .args(["--exclude=target", "-cf"])
        .arg(&tar)
        .args(["crates", "docs", "scripts", "README.md"])
        .status()
        .unwrap()
        .success();
    assert!(ok, "making the tarball");
    tar
}

fn untar(tar: &Path, into: &Path) -> std::process::ExitStatus {
    std::fs::create_dir_all(into).unwrap();
    Command::new("tar")
        .arg("-C")
        .arg(into)
        .arg("-xf")
        .arg(tar)
        .status()
        .unwrap()
}

/// Compares two trees entry by entry: kind, permissions, size, mtime (to
/// the second), content and link targets. Returns the entries compared.
fn same_tree(a: &Path, b: &Path) -> usize {
    use std::os::unix::fs::MetadataExt;
    let mut n = 0;
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let (pa, pb) = (a.join(&rel), b.join(&rel));
        let (ma, mb) = (
            std::fs::symlink_metadata(&pa).unwrap(),
            std::fs::symlink_metadata(&pb).unwrap_or_else(|e| panic!("{}: {e}", pb.display())),
        );
        assert_eq!(ma.file_type(), mb.file_type(), "{}", rel.display());
        if !rel.as_os_str().is_empty() {
            // (The two roots were made apart, by the test.)
            assert_eq!(ma.mode(), mb.mode(), "mode of {}", rel.display());
            assert_eq!(ma.mtime(), mb.mtime(), "mtime of {}", rel.display());
        }
        if !ma.is_dir() {
            assert_eq!(ma.len(), mb.len(), "size of {}", rel.display());
        }
        n += 1;
        if ma.is_symlink() {
            assert_eq!(
                std::fs::read_link(&pa).unwrap(),
                std::fs::read_link(&pb).unwrap()
            );
        } else if ma.is_file() {
            assert!(
                std::fs::read(&pa).unwrap() == std::fs::read(&pb).unwrap(),
                "content of {}",
                rel.display()
            );
        } else if ma.is_dir() {
            let names = |p: &Path| {
                let mut v: Vec<_> = std::fs::read_dir(p)
                    .unwrap()
                    .map(|e| e.unwrap().file_name())
                    .collect();
                v.sort();
                v
            };
            let (na, nb) = (names(&pa), names(&pb));
            assert_eq!(na, nb, "entries of {}", rel.display());
            stack.extend(na.into_iter().map(|x| rel.join(x)));
        }
    }
    n
}

/// `fs status --format json`, decoded into its type (a field missing or
/// renamed fails here).
fn fs_status(d: &Dev) -> FsMapReply {
    serde_json::from_value(d.json(&["fs", "status"])).expect("fs status decodes")
}

fn data_objects(d: &Dev, ino: u64) -> usize {
    let out = d.ok(&["rados", "-p", "shoalfs.data", "ls"]);
    let prefix = format!("{ino:x}.");
    out.lines().filter(|l| l.starts_with(&prefix)).count()
}

#[test]
fn posix_suite_fsx_untar_two_clients_and_caps() {
    if !fuse_usable() {
        return;
    }
    let d = up("fs");
    every_read_command_decodes_into_its_type(&d);
    let a = Mount::new(&d, "mnt-a");
    let b = Mount::new(&d, "mnt-b");

    // POSIX: the suite first proves itself on the local disk, then runs
    // on the mount.
    let local = d.0.join("local-posix");
    std::fs::create_dir_all(&local).unwrap();
    let suite = clients().join("posix_suite.py");
    python(
        300,
        &[suite.to_str().unwrap(), local.to_str().unwrap()],
        &[],
    );
    std::fs::create_dir(a.p("posix")).unwrap();
    let report = d.0.join("posix.json");
    let out = Command::new("timeout")
        .args(["600", "python3"])
        .arg(&suite)
        .arg(a.p("posix"))
        .arg("--json")
        .arg(&report)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the POSIX suite on the mount:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // fsx, with and without mmap.
    let fsx = clients().join("fsx.py");
    for extra in [&[][..], &["--no-mmap"][..]] {
        let file = a.p(&format!("fsx{}", extra.len()));
        let mut args = vec![
            fsx.to_str().unwrap(),
            file.to_str().unwrap(),
            "-N",
            "1500",
            "-S",
            "7",
        ];
        args.extend(extra);
        let out = python(600, &args, &[]);
        eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    }

    // An untar, compared with the same on local disk, and seen whole from
    // the other mount.
    let tar = source_tarball(&d.0);
    assert!(untar(&tar, &d.0.join("local-tree")).success());
    let t0 = Instant::now();
    assert!(untar(&tar, &a.p("tree")).success());
    eprintln!("untar on the mount: {:?}", t0.elapsed());
    let n = same_tree(&d.0.join("local-tree"), &a.p("tree"));
    assert!(n > 100, "only {n} entries");
    assert_eq!(same_tree(&d.0.join("local-tree"), &b.p("tree")), n);

    // Close-to-open, both ways.
    std::fs::write(a.p("shared"), b"from a").unwrap();
    assert_eq!(std::fs::read(b.p("shared")).unwrap(), b"from a");
    std::fs::write(b.p("shared"), b"from b, longer").unwrap();
    assert_eq!(std::fs::read(a.p("shared")).unwrap(), b"from b, longer");
    close_to_open_rounds(&a, &b);

    // A writer holding its file open (its size known only to it): a stat
    // from the other mount recalls the capability and sees the size.
    let holder = Command::new("python3")
        .args(["-c", "import sys,time\nf=open(sys.argv[1],'wb')\nf.write(b'x'*123457)\nf.flush()\nprint('written',flush=True)\ntime.sleep(30)", a.p("held").to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut holder = KillOnDrop(holder);
    wait_line(&mut holder.0, "written");
    let t0 = Instant::now();
    let size = std::fs::metadata(b.p("held")).unwrap().len();
    assert_eq!(size, 123_457, "the other mount's stat");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "the recall took {:?}",
        t0.elapsed()
    );
    drop(holder);

    // An unlinked open file lives until its last close (of two opens by
    // one process here), then its data goes.
    let big = a.p("orphan");
    std::fs::write(&big, vec![7u8; 5 << 20]).unwrap();
    let ino = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&big).unwrap().ino()
    };
    let keeper = Command::new("python3")
        .args(["-c", "import os,sys,time\nfd=os.open(sys.argv[1],os.O_RDONLY)\nfd2=os.open(sys.argv[1],os.O_RDONLY)\nos.unlink(sys.argv[1])\nprint('unlinked',flush=True)\nsys.stdin.readline()\nos.close(fd2)\ntime.sleep(0.5)\nassert os.pread(fd,5,5<<20-5)==b'\\x07'*5\nos.close(fd)\nprint('closed',flush=True)", big.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut keeper = KillOnDrop(keeper);
    wait_line(&mut keeper.0, "unlinked");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        data_objects(&d, ino),
        2,
        "the orphan's data stays while open"
    );
    {
        use std::io::Write;
        keeper.0.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
    }
    wait_line(&mut keeper.0, "closed");
    until("the orphan's data freed after its last close", 30, || {
        data_objects(&d, ino) == 0
    });

    // A client SIGKILLed while holding a capability: the other waits for
    // its session to time out (6 s here), then goes on.
    let mut c = Mount::new(&d, "mnt-c");
    let writer = Command::new("python3")
        .args(["-c", "import sys,time\nf=open(sys.argv[1],'wb')\nf.write(b'y'*1000)\nf.flush()\nprint('written',flush=True)\ntime.sleep(60)", c.p("dying").to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut writer = KillOnDrop(writer);
    wait_line(&mut writer.0, "written");
    c.kill9();
    let t0 = Instant::now();
    let st = std::fs::metadata(a.p("dying"));
    let waited = t0.elapsed();
    assert!(st.is_ok(), "{st:?}");
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(30),
        "the stat waited {waited:?} for the dead client's session"
    );
    eprintln!("stat after the holder died: {waited:?}");
    drop(writer);
    drop(c);

    // A second file system with its data in an erasure-coded pool (2+1,
    // overwrites allowed): mds.b, the standby, takes its rank.
    d.ok(&[
        "osd",
        "erasure-code-profile",
        "set",
        "fsec",
        "k=2",
        "m=1",
        "crush-failure-domain=osd",
    ]);
    d.ok(&["osd", "pool", "create", "fsec.data", "8", "erasure", "fsec"]);
    d.ok(&[
        "osd",
        "pool",
        "set",
        "fsec.data",
        "allow_ec_overwrites",
        "true",
    ]);
    d.ok(&["osd", "pool", "create", "fsec.meta", "8"]);
    d.ok(&["fs", "new", "ecfs", "fsec.meta", "fsec.data"]);
    until("ecfs active", 60, || {
        let m = fs_status(&d);
        m.fs(Some("ecfs"))
            .and_then(|f| f.active.as_ref()?.report.as_ref())
            .is_some_and(|r| r.state == "active")
    });
    let e = Mount::of_fs(&d, "mnt-ec", Some("ecfs"));
    let file = e.p("fsx-ec");
    let out = python(
        600,
        &[
            fsx.to_str().unwrap(),
            file.to_str().unwrap(),
            "-N",
            "800",
            "-S",
            "9",
            "--no-mmap",
        ],
        &[],
    );
    eprintln!("on the EC pool: {}", String::from_utf8_lossy(&out.stdout));
    let data: Vec<u8> = (0..(9u32 << 20)).map(|i| (i % 251) as u8).collect();
    std::fs::write(e.p("big"), &data).unwrap();
    assert!(
        std::fs::read(e.p("big")).unwrap() == data,
        "9 MiB through the EC pool"
    );
    assert!(
        d.ok(&["rados", "-p", "fsec.data", "ls"]).lines().count() >= 3,
        "the data is in the EC pool"
    );
}

/// Issue 46's check on a live cluster (OSDs, an MDS and a standby, no
/// manager): every monitor read command's reply decodes into its type in
/// `shoal_monclient::replies`, whole (see `Dev::typed`), and says what
/// this cluster is.
fn every_read_command_decodes_into_its_type(d: &Dev) {
    use shoal_monclient::replies::*;
    let status: StatusReply = d.typed(&["status"]);
    assert_eq!(status.version, STATUS_VERSION);
    assert!(
        !status.fsid.is_empty() && status.quorum.len() == 1,
        "{status:?}"
    );
    let osds = status.osdmap.as_ref().expect("an OSD map");
    assert_eq!((osds.num_osds, osds.num_up_osds), (3, 3), "{osds:?}");
    let _: StatusReply = d.typed(&["mon", "stat"]);
    let health: HealthReply = d.typed(&["health", "detail"]);
    assert!(
        health.checks.iter().all(|c| !c.code.is_empty()),
        "{health:?}"
    );
    let _: HealthReply = d.typed(&["health"]);
    let stat: PgStatReply = d.typed(&["pg", "stat"]);
    assert!(stat.all_active_clean(), "{stat:?}");
    let dump: PgDumpReply = d.typed(&["pg", "dump"]);
    assert_eq!(dump.pg_stats.len() as u64, stat.num_pgs);
    assert!(
        dump.pg_stats.iter().all(|p| p.reporter.is_some()),
        "{dump:?}"
    );
    assert_eq!(dump.osd_stats.len(), 3);
    let _: OsdStatReply = d.typed(&["osd", "stat"]);
    let tree: OsdTreeReply = d.typed(&["osd", "tree"]);
    assert_eq!(tree.osds().count(), 3, "{tree:?}");
    assert!(tree.osds().all(|n| n.osd.as_ref().is_some_and(|o| o.up)));
    let pools: Vec<PoolReply> = d.typed(&["osd", "pool", "ls"]);
    assert!(pools.iter().any(|p| p.name == "rbd"), "{pools:?}");
    let rbd: PoolReply = d.typed(&["osd", "pool", "get", "rbd"]);
    assert_eq!(rbd.kind, "replicated");
    let placed: OsdMapReply = d.typed(&["osd", "map", "rbd", "some-object"]);
    assert_eq!(placed.acting.len() as u32, rbd.size, "{placed:?}");
    let df: DfReply = d.typed(&["df"]);
    assert_eq!(df.pools.len(), pools.len());
    let mgrs: MgrMapReply = d.typed(&["mgr", "stat"]);
    assert!(
        mgrs.active.is_none(),
        "this cluster runs no manager: {mgrs:?}"
    );
    let fsmap: FsMapReply = d.typed(&["fs", "status"]);
    assert_eq!(fsmap.filesystems.len(), 1, "{fsmap:?}");
    let admin: AuthReply = d.typed(&["auth", "get", "client.admin"]);
    assert!(AuthKey::of(&admin, "client.admin").is_some(), "{admin:?}");
    let listed: AuthReply = d.typed(&["auth", "ls"]);
    assert!(
        listed.values().all(|e| e.key.is_empty()),
        "auth ls shows no key"
    );
    let _: HealthHistoryReply = d.typed(&["health", "history"]);
    let crashes: CrashLsReply = d.typed(&["crash", "ls"]);
    assert!(crashes.crashes.is_empty(), "{crashes:?}");
}

/// Close-to-open where the reader's kernel holds the file's attributes
/// (B stats it, as `ls -l` does, then A changes it and closes, then B
/// opens and reads): every open on B sees exactly what A closed, through
/// 50 appends, then a shrink, then 30 renames over the file.
fn close_to_open_rounds(a: &Mount, b: &Mount) {
    use std::io::Write;
    let mut want: Vec<u8> = b"start\n".to_vec();
    std::fs::write(a.p("c2o"), &want).unwrap();
    for round in 0..50u32 {
        let _ = std::fs::metadata(b.p("c2o")).unwrap();
        let chunk: Vec<u8> = (0..100u32).map(|i| (round * 7 + i) as u8).collect();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(a.p("c2o"))
            .unwrap();
        f.write_all(&chunk).unwrap();
        drop(f);
        want.extend_from_slice(&chunk);
        let got = std::fs::read(b.p("c2o")).unwrap();
        assert_eq!(
            got.len(),
            want.len(),
            "round {round}: B read {} bytes after A closed {}",
            got.len(),
            want.len()
        );
        assert!(got == want, "round {round}: B read other bytes");
    }
    // A shrink on A, read on B.
    let _ = std::fs::metadata(b.p("c2o")).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(a.p("c2o"))
        .unwrap();
    f.set_len(1234).unwrap();
    drop(f);
    want.truncate(1234);
    let got = std::fs::read(b.p("c2o")).unwrap();
    assert_eq!(got.len(), 1234, "B after A's truncate");
    assert!(got == want, "B after A's truncate: other bytes");
    // A rename over the file on A, read on B (whose kernel still has the
    // name pointing at the old inode, which the MDS forgot but its inode
    // table still holds until the next flush: it must not be loaded back).
    // The MDS writes its journal into the inode tables at least every 5 s:
    // once this has passed, the first old inode is in its table.
    std::thread::sleep(Duration::from_secs(6));
    for round in 0..30 {
        let _ = std::fs::metadata(b.p("c2o")).unwrap();
        assert_eq!(
            std::fs::read(b.p("c2o")).unwrap(),
            want,
            "round {round}: B before the rename"
        );
        let fresh = format!("a new file renamed over the old one, round {round}").into_bytes();
        std::fs::write(a.p("c2o.tmp"), &fresh).unwrap();
        std::fs::rename(a.p("c2o.tmp"), a.p("c2o")).unwrap();
        assert_eq!(
            std::fs::read(b.p("c2o")).unwrap(),
            fresh,
            "round {round}: B after A renamed another file over it"
        );
        want = fresh;
    }
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_line(c: &mut Child, want: &str) {
    use std::io::BufRead;
    let out = c.stdout.as_mut().unwrap();
    let mut r = std::io::BufReader::new(out);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), want);
}

#[test]
fn mds_killed_mid_untar_the_standby_takes_over() {
    if !fuse_usable() {
        return;
    }
    let d = up("fs-failover");
    let a = Mount::new(&d, "mnt-a");
    let tar = source_tarball(&d.0);
    assert!(untar(&tar, &d.0.join("local-tree")).success());

    // An orphan whose client dies: the next MDS frees it.
    let mut c = Mount::new(&d, "mnt-c");
    std::fs::write(c.p("orphan"), vec![1u8; 100_000]).unwrap();
    let ino = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(c.p("orphan")).unwrap().ino()
    };
    let keeper = Command::new("python3")
        .args(["-c", "import os,sys,time\nfd=os.open(sys.argv[1],os.O_RDONLY)\nos.unlink(sys.argv[1])\nprint('unlinked',flush=True)\ntime.sleep(120)", c.p("orphan").to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut keeper = KillOnDrop(keeper);
    wait_line(&mut keeper.0, "unlinked");
    c.kill9();
    drop(keeper);
    drop(c);
    assert_eq!(data_objects(&d, ino), 1);

    // A directory past its fragments' bound (200 entries here) splits.
    python(
        120,
        &[
            "-c",
            "import os,sys\nos.mkdir(sys.argv[1])\nfor i in range(700): open(os.path.join(sys.argv[1], f'f{i:03d}'), 'w').close()",
            a.p("big").to_str().unwrap(),
        ],
        &[],
    );
    let big_ino = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(a.p("big")).unwrap().ino()
    };

    // A sparse file of 1 TiB (262 144 data objects to look for, two
    // there), removed just before the kill: its purge, cut short, is
    // resumed by the next MDS from the journaled purge queue.
    let sparse = a.p("sparse");
    python(
        60,
        &[
            "-c",
            "import os,sys\nfd=os.open(sys.argv[1],os.O_CREAT|os.O_WRONLY)\nos.pwrite(fd,b'x',0)\nos.pwrite(fd,b'y',(1<<40)-1)\nos.fsync(fd)\nos.close(fd)",
            sparse.to_str().unwrap(),
        ],
        &[],
    );
    let sparse_ino = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&sparse).unwrap().ino()
    };
    assert_eq!(data_objects(&d, sparse_ino), 2);

    let into = a.p("tree");
    let tar2 = tar.clone();
    let untarring = std::thread::spawn(move || {
        let t0 = Instant::now();
        let s = untar(&tar2, &into);
        (s, t0.elapsed())
    });
    // The kill lands once part of the tree is there.
    let entries = |p: &Path| {
        Command::new("sh")
            .arg("-c")
            .arg(format!("find '{}' 2>/dev/null | wc -l", p.display()))
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .trim()
                    .parse::<usize>()
                    .unwrap_or(0)
            })
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while entries(&a.p("tree")) < 60 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = fs_status(&d);
    let active = before.filesystems[0].active.clone().unwrap();
    assert_eq!(active.name, "a");
    let inc = active.incarnation;
    std::fs::remove_file(&sparse).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        data_objects(&d, sparse_ino) > 0,
        "the purge ended before the kill: the test shows nothing"
    );
    let killed = Instant::now();
    d.kill9("mds.a");
    let (status, took) = untarring.join().unwrap();
    assert!(status.success(), "tar failed across the failover");
    eprintln!("untar across the failover: {took:?}");
    // Durable: an fsync of the tree's root returns once the new MDS has
    // every create the client sent without waiting.
    python(
        120,
        &[
            "-c",
            "import os,sys\nos.fsync(os.open(sys.argv[1], os.O_RDONLY))",
            a.p("tree").to_str().unwrap(),
        ],
        &[],
    );
    eprintln!(
        "from the kill to the fsync's return: {:?}",
        killed.elapsed()
    );
    let after = fs_status(&d);
    let active = after.filesystems[0].active.as_ref().unwrap();
    assert_eq!(active.name, "b", "{after:?}");
    assert!(active.incarnation > inc);
    let n = same_tree(&d.0.join("local-tree"), &a.p("tree"));
    assert!(n > 100);
    // A client that knows nothing yet sees the same tree, and the split
    // directory, as the new MDS reads them from its journal and objects.
    let fresh = Mount::new(&d, "mnt-d");
    assert_eq!(same_tree(&d.0.join("local-tree"), &fresh.p("tree")), n);
    assert_eq!(std::fs::read_dir(fresh.p("big")).unwrap().count(), 700);
    let frags = d.ok(&["rados", "-p", "shoalfs.meta", "ls"]);
    let prefix = format!("fs1.dir.{big_ino:x}.");
    let mut frags: Vec<&str> = frags.lines().filter(|l| l.starts_with(&prefix)).collect();
    frags.sort();
    assert_eq!(frags.len(), 4, "fragments of the big directory: {frags:?}");
    // The dead client's orphan is freed by the new MDS once reconnects
    // are over.
    until("the orphan freed by the next MDS", 60, || {
        data_objects(&d, ino) == 0
    });
    until("the sparse file's purge resumed and finished", 120, || {
        data_objects(&d, sparse_ino) == 0
    });
    // And it leaves the queue (once the journal is flushed to the objects).
    until("the purge queue empty", 30, || {
        d.ok(&["rados", "-p", "shoalfs.meta", "listomapkeys", "fs1.purge"])
            .trim()
            .is_empty()
    });
}

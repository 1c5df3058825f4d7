//! The `shoal` binary as a user runs it: version, help, configuration and
//! keyring commands, and the errors a user sees.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use common::Dev;

fn shoal(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(args)
        .env_remove("SHOAL_CONF")
        .output()
        .expect("run shoal")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shoal-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn version_names_the_commit() {
    let o = shoal(&["--version"]);
    let (out, _) = text(&o);
    assert!(o.status.success());
    // "shoal 0.1.0 (0123456789ab)" or "(unknown)" outside a git checkout.
    let commit = out.trim().rsplit_once('(').unwrap().1.trim_end_matches(')');
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "{out}"
    );
}

#[test]
fn help_lists_the_commands() {
    let (out, _) = text(&shoal(&["--help"]));
    for cmd in ["config", "keyring", "bench", "crush", "--conf", "--set"] {
        assert!(out.contains(cmd), "--help lacks {cmd}: {out}");
    }
}

#[test]
fn config_show_layers_file_and_overrides() {
    let dir = scratch("show");
    let conf = dir.join("shoal.toml");
    std::fs::write(
        &conf,
        "[global]\nms_request_timeout_ms = 1234\n[osd.2]\nlog_level = \"debug\"\n",
    )
    .unwrap();
    let o = shoal(&[
        "--conf",
        conf.to_str().unwrap(),
        "--name",
        "osd.2",
        "--set",
        "ms_reconnect_attempts=9",
        "config",
        "show",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("ms_request_timeout_ms = 1234  # [global]"),
        "{out}"
    );
    assert!(out.contains("log_level = \"debug\"  # [osd.2]"), "{out}");
    assert!(out.contains("ms_reconnect_attempts = 9  # --set"), "{out}");
    // The same file through $SHOAL_CONF.
    let o = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["config", "show"])
        .env("SHOAL_CONF", &conf)
        .output()
        .unwrap();
    assert!(text(&o).0.contains("ms_request_timeout_ms = 1234"));
}

#[test]
fn config_errors_name_key_and_file() {
    let dir = scratch("bad");
    let conf = dir.join("bad.toml");
    std::fs::write(&conf, "[client]\nms_request_timout_ms = 5\n").unwrap();
    let o = shoal(&["--conf", conf.to_str().unwrap(), "config", "show"]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("ms_request_timout_ms") && err.contains("bad.toml"),
        "{err}"
    );
    std::fs::write(&conf, "[global]\nms_reconnect_attempts = \"many\"\n").unwrap();
    let (_, err) = text(&shoal(&[
        "--conf",
        conf.to_str().unwrap(),
        "config",
        "show",
    ]));
    assert!(
        err.contains("ms_reconnect_attempts") && err.contains("integer"),
        "{err}"
    );
    let (_, err) = text(&shoal(&["--set", "bogus=1", "config", "show"]));
    assert!(err.contains("bogus"), "{err}");
    let (out, _) = text(&shoal(&["config", "options"]));
    assert!(
        out.contains("ms_inflight_bytes_max (an unsigned integer)"),
        "{out}"
    );
}

#[test]
fn keyring_create_add_list() {
    let dir = scratch("keyring");
    let k = dir.join("keyring");
    let ks = k.to_str().unwrap();
    assert!(
        shoal(&["keyring", "create", ks, "-e", "client.admin", "-e", "mon.a"])
            .status
            .success()
    );
    assert!(
        shoal(&["keyring", "add", ks, "-e", "osd.0"])
            .status
            .success()
    );
    let (out, _) = text(&shoal(&["keyring", "list", ks]));
    assert_eq!(out, "mon.a\nosd.0\nclient.admin\n");
    // Refuses to clobber or duplicate.
    assert!(
        !shoal(&["keyring", "create", ks, "-e", "client.x"])
            .status
            .success()
    );
    let (_, err) = text(&shoal(&["keyring", "add", ks, "-e", "osd.0"]));
    assert!(err.contains("already has a key"), "{err}");
    let (_, err) = text(&shoal(&["keyring", "list", "/nonexistent/keyring"]));
    assert!(err.contains("/nonexistent/keyring"), "{err}");
}

#[test]
fn store_mkfs_stat_fsck() {
    let dir = scratch("store");
    let store = dir.join("osd0");
    let path = store.to_str().unwrap();
    let o = shoal(&["store", "mkfs", path, "--size", "16M"]);
    assert!(o.status.success(), "{}", text(&o).1);
    let (out, _) = text(&shoal(&["store", "stat", path]));
    assert!(out.contains("objects:          0"), "{out}");
    let o = shoal(&["store", "fsck", "--deep", path]);
    assert!(
        o.status.success() && text(&o).0.contains("clean"),
        "{:?}",
        text(&o)
    );
    // Never formats over an existing store; a missing one is named.
    let (_, err) = text(&shoal(&["store", "mkfs", path]));
    assert!(err.contains("refusing to format"), "{err}");
    let (_, err) = text(&shoal(&["store", "stat", "/nonexistent/store"]));
    assert!(err.contains("/nonexistent/store"), "{err}");
    let (_, err) = text(&shoal(&["store", "mkfs", path, "--size", "lots"]));
    assert!(err.contains("bad size"), "{err}");
}

/// Blocks (512 bytes each) a file takes on disk.
fn allocated(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().blocks() * 512
}

#[test]
fn store_data_files_are_sparse_unless_preallocated() {
    let dir = scratch("sparse");
    // Sparse by default: a 1 GiB store takes what its label and journal wrote.
    let sparse = dir.join("sparse");
    let o = shoal(&["store", "mkfs", sparse.to_str().unwrap(), "--size", "1G"]);
    assert!(o.status.success(), "{}", text(&o).1);
    let taken = allocated(&sparse.join("block"));
    assert!(taken < 64 << 20, "a sparse 1 GiB store took {taken} bytes");
    // --preallocate reserves all of it.
    let full = dir.join("full");
    let o = shoal(&[
        "store",
        "mkfs",
        full.to_str().unwrap(),
        "--size",
        "32M",
        "--preallocate",
    ]);
    assert!(o.status.success(), "{}", text(&o).1);
    let taken = allocated(&full.join("block"));
    assert!(
        taken >= 32 << 20,
        "a preallocated 32 MiB store took {taken} bytes"
    );
    // On a filesystem too small for it, preallocation fails clearly and gives the
    // space back (run in a private mount namespace on an 8 MiB tmpfs, where allowed).
    let small = dir.join("small");
    std::fs::create_dir_all(&small).unwrap();
    let bin = env!("CARGO_BIN_EXE_shoal");
    let script = format!(
        "mount -t tmpfs -o size=8m tmpfs {d} || exit 77; \
         {bin} store mkfs {d}/s --size 64M --preallocate; echo rc=$?; df -k --output=used {d} | tail -1",
        d = small.display()
    );
    let o = std::process::Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .output();
    let Ok(o) = o else { return };
    if o.status.code() == Some(77) || !o.status.success() {
        eprintln!("skipped the full-filesystem case: no private tmpfs here");
        return;
    }
    let (out, err) = text(&o);
    assert!(out.contains("rc=1"), "{out} {err}");
    assert!(err.contains("less than the 67108864 bytes"), "{err}");
    let used_kib: u64 = out.lines().last().unwrap().trim().parse().unwrap();
    assert!(
        used_kib < 1024,
        "the failed reservation kept {used_kib} KiB: {out}"
    );
}

#[test]
fn pg_and_df_commands_parse() {
    let (out, _) = text(&shoal(&["pg", "--help"]));
    assert!(out.contains("dump") && out.contains("stat"), "{out}");
    let (out, _) = text(&shoal(&["--help"]));
    assert!(out.contains("df") && out.contains("pg"), "{out}");
    let o = shoal(&["df", "--format", "xml"]);
    assert!(!o.status.success());
    assert!(text(&o).1.contains("xml"), "{}", text(&o).1);
    // Parsed: without monitors configured, it fails reaching them.
    for args in [
        &["df", "--format", "json"][..],
        &["pg", "dump"],
        &["pg", "stat", "--format", "plain"],
    ] {
        let o = shoal(&[&["--set", "mon_host="][..], args].concat());
        let (_, err) = text(&o);
        assert!(!o.status.success());
        assert!(err.starts_with("shoal: error:"), "{args:?}: {err}");
    }
}

#[test]
fn every_monitor_action_takes_format() {
    let actions: [&[&str]; 29] = [
        &["osd", "out", "0"],
        &["osd", "in", "0"],
        &["osd", "down", "0"],
        &["osd", "rm", "0"],
        &["osd", "set", "noout"],
        &["osd", "unset", "noout"],
        &["osd", "create"],
        &["osd", "crush", "reweight", "osd.0", "1"],
        &["osd", "crush", "add-bucket", "r", "rack"],
        &["osd", "crush", "move", "r", "root=default"],
        &["osd", "crush", "rm", "r"],
        &["osd", "pool", "create", "p", "8"],
        &["osd", "pool", "rm", "p", "--yes-i-really-mean-it"],
        &["osd", "pool", "rename", "p", "q"],
        &["osd", "pool", "set", "p", "size", "2"],
        &["osd", "erasure-code-profile", "set", "e", "k=2", "m=1"],
        &["osd", "erasure-code-profile", "get", "e"],
        &["osd", "erasure-code-profile", "ls"],
        &["osd", "erasure-code-profile", "rm", "e"],
        &["osd", "pool", "create", "q", "8", "erasure", "e"],
        &["auth", "add", "client.x", "mon", "allow r"],
        &["auth", "rm", "client.x"],
        &["auth", "caps", "client.x", "mon", "allow r"],
        &["auth", "get-or-create", "client.x"],
        &["config", "set", "global", "log_level", "debug"],
        &["config", "rm", "global", "log_level"],
        &["mon", "add", "d", "127.0.0.1:6799"],
        &["mon", "rm", "d"],
        &["auth", "get", "client.x"],
    ];
    for action in actions {
        for format in ["json", "plain"] {
            let args = [&["--set", "mon_host="][..], action, &["--format", format]].concat();
            let o = shoal(&args);
            let (_, err) = text(&o);
            // Parsed: the error is reaching the (unconfigured) monitors.
            assert!(err.starts_with("shoal: error:"), "{args:?}: {err}");
        }
    }
}

/// Runs `shoal ARGS` with its standard output a pipe whose reader has
/// already gone (`shoal ARGS | head` once `head` has had enough): the
/// first write meets EPIPE, whatever the timing. Returns the exit status
/// and standard error.
fn into_closed_pipe(
    args: &[&str],
    conf: Option<&std::path::Path>,
) -> (std::process::ExitStatus, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shoal"));
    cmd.args(args).env_remove("SHOAL_CONF");
    if let Some(c) = conf {
        cmd.env("SHOAL_CONF", c);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `shoal ARGS | head -1`: the first line, then the pipe closes.
fn head_1(args: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(args)
        .env_remove("SHOAL_CONF")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.is_empty(),
        "{}: {err}",
        out.status
    );
    line
}

#[test]
fn a_closed_pipe_ends_output_quietly() {
    // Far more than a pipe buffer holds, so the writer must meet the
    // closed pipe: 2000 devices in Ceph's text form, then their mappings.
    let dir = scratch("pipe");
    let map = dir.join("map");
    let build = ["crush", "build", "--hosts", "200", "--osds-per-host", "10"];
    let (status, err) = into_closed_pipe(&build, None);
    assert!(status.success() && err.is_empty(), "{status}: {err}");
    // The map is far larger than a pipe's buffer: `| head -1` meets the
    // closed pipe as surely.
    assert_eq!(head_1(&build), "# begin crush map\n");
    let o = shoal(&[&build[..], &["-o", map.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", text(&o).1);
    let test = [
        "crush",
        "test",
        "-i",
        map.to_str().unwrap(),
        "--num-rep",
        "3",
        "--max-x",
        "4999",
        "--show-mappings",
    ];
    let (status, err) = into_closed_pipe(&test, None);
    assert!(status.success() && err.is_empty(), "{status}: {err}");
    let (status, err) = into_closed_pipe(&["config", "options"], None);
    assert!(status.success() && err.is_empty(), "{status}: {err}");
}

#[test]
fn pool_options_go_before_or_after_the_command() {
    // Parsed (the error is the missing monitors, not the command line).
    for args in [
        &["bench", "-p", "rbd", "cleanup"][..],
        &["bench", "cleanup", "-p", "rbd"],
        &["bench", "-p", "rbd", "10", "write"],
        &["bench", "10", "write", "-p", "rbd", "-t", "4"],
        &["rados", "-p", "rbd", "ls"],
        &["rados", "ls", "-p", "rbd"],
        &["rados", "ls", "--pool", "rbd", "-N", "ns"],
        &["rados", "-p", "rbd", "cleanup"],
        &["rados", "stat", "obj", "-p", "rbd"],
    ] {
        let o = shoal(&[&["--set", "mon_host="][..], args].concat());
        let (_, err) = text(&o);
        assert!(!o.status.success());
        assert!(err.contains("mon_host"), "{args:?}: {err}");
    }
    for (args, want) in [
        (&["bench", "cleanup"][..], "shoal bench -p POOL cleanup"),
        (&["rados", "ls"], "shoal rados -p POOL"),
        (&["bench", "-p", "rbd", "net"], "only object benchmarks"),
    ] {
        let o = shoal(args);
        let (_, err) = text(&o);
        assert!(!o.status.success());
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn bench_cleanup_in_either_order_and_ls_into_a_closed_pipe() {
    let d = Dev::new("cli-order");
    d.ok(&[
        "dev",
        "up",
        "--dir",
        d.dir(),
        "--store",
        "mem",
        "--osds",
        "2",
    ]);
    let conf = d.0.join("shoal.conf");
    for cleanup in [
        &["bench", "-p", "rbd", "cleanup"][..],
        &["bench", "cleanup", "-p", "rbd"],
        &["rados", "-p", "rbd", "cleanup"],
    ] {
        d.ok(&[
            "bench",
            "-p",
            "rbd",
            "10",
            "write",
            "-b",
            "4K",
            "-t",
            "4",
            "--max-objects",
            "40",
            "--no-cleanup",
        ]);
        let listed = d.ok(&["rados", "ls", "-p", "rbd"]);
        assert!(listed.lines().count() > 40, "{listed}");
        // `rados ls | head`: quiet success.
        let (status, err) = into_closed_pipe(&["rados", "-p", "rbd", "ls"], Some(&conf));
        assert!(status.success() && err.is_empty(), "{status}: {err}");
        let out = d.ok(cleanup);
        assert!(out.contains("removed"), "{cleanup:?}: {out}");
        assert_eq!(d.ok(&["rados", "-p", "rbd", "ls"]), "", "{cleanup:?}");
    }
}

#[test]
fn ceph_spellings_parse() {
    for args in [
        &["osd", "out", "osd.3"][..],
        &["osd", "in", "3", "osd.4"],
        &["osd", "pool", "create", "rbd", "64"],
        &[
            "osd",
            "pool",
            "create",
            "ecpool",
            "32",
            "32",
            "erasure",
            "myprofile",
        ],
        &["osd", "pool", "create", "ecpool", "erasure"],
        &["osd", "pool", "create", "rbd", "64", "64", "replicated"],
        &[
            "osd",
            "pool",
            "delete",
            "rbd",
            "rbd",
            "--yes-i-really-really-mean-it",
        ],
        &["osd", "pool", "rm", "rbd", "--yes-i-really-mean-it"],
        &["auth", "list"],
        &["pg", "dump"],
    ] {
        let o = shoal(&[&["--set", "mon_host="][..], args].concat());
        let (_, err) = text(&o);
        assert!(err.starts_with("shoal: error:"), "{args:?}: {err}");
    }
    let o = shoal(&[
        "osd",
        "pool",
        "delete",
        "rbd",
        "data",
        "--yes-i-really-mean-it",
    ]);
    assert!(text(&o).1.contains("given twice alike"), "{}", text(&o).1);
    for (args, says) in [
        (
            &["osd", "pool", "create", "p", "32", "16"][..],
            "differs from pg_num",
        ),
        (
            &["osd", "pool", "create", "p", "8", "mirrored"],
            "replicated or erasure",
        ),
        (
            &[
                "osd", "pool", "create", "p", "8", "erasure", "prof", "rule", "more",
            ],
            "unexpected argument",
        ),
        (
            &["osd", "erasure-code-profile", "set", "e", "k2"],
            "is not key=value",
        ),
    ] {
        let o = shoal(&[&["--set", "mon_host="][..], args].concat());
        assert!(text(&o).1.contains(says), "{args:?}: {}", text(&o).1);
    }
    let o = shoal(&["osd", "out", "host.3"]);
    assert!(text(&o).1.contains("3 or osd.3"), "{}", text(&o).1);
}

#[test]
fn format_goes_anywhere() {
    for args in [
        &["--format", "json", "osd", "dump"][..],
        &["-f", "json", "status"],
        &["osd", "-f", "json", "tree"],
        &["--format=json", "pg", "dump"],
        &["osd", "pool", "--format", "plain", "ls"],
        &["health", "--format", "json", "detail"],
    ] {
        let o = shoal(&[&["--set", "mon_host="][..], args].concat());
        let (_, err) = text(&o);
        assert!(err.starts_with("shoal: error:"), "{args:?}: {err}");
    }
    let o = shoal(&["-f", "xml", "status"]);
    assert!(text(&o).1.contains("xml"), "{}", text(&o).1);
}

/// `dev up --set ms_mode=secure`: every daemon and the tools run in secure
/// mode; a tool still in crc mode is refused at once, with one line naming
/// both modes, and the monitor logs the same line.
#[test]
fn a_secure_dev_cluster_names_both_modes_to_a_crc_client() {
    let (options, _) = text(&shoal(&["config", "options"]));
    for o in [
        "ms_mode (crc or secure)",
        "ms_cluster_mode (crc, secure or empty (as ms_mode))",
        "ms_service_mode",
        "ms_client_mode",
    ] {
        assert!(options.contains(o), "{o} not in:\n{options}");
    }
    let d = Dev::new("secure-mode");
    d.up_mem(&["--no-gateway", "--set", "ms_mode=secure"]);
    let conf = std::fs::read_to_string(d.0.join("shoal.conf")).unwrap();
    assert!(conf.contains("ms_mode = \"secure\""), "{conf}");
    let obj = d.0.join("obj.txt");
    std::fs::write(&obj, b"sealed on the wire").unwrap();
    d.ok(&["rados", "-p", "rbd", "put", "o1", obj.to_str().unwrap()]);
    assert_eq!(
        d.ok(&["rados", "-p", "rbd", "get", "o1", "-"]),
        "sealed on the wire"
    );
    let out = d.run(&["--set", "ms_mode=crc", "status"]);
    let (_, err) = text(&out);
    assert!(!out.status.success());
    let line = "connection mode mismatch: client.admin uses ms_mode crc, mon.a requires secure";
    assert!(err.contains(line), "{err}");
    assert!(
        err.contains("every monitor refused the connection"),
        "{err}"
    );
    let log = std::fs::read_to_string(d.0.join("out").join("mon.a.log")).unwrap();
    assert!(log.contains(line), "mon.a's log:\n{log}");
}

/// Options that cannot hold together stop the OSD at once, with a line
/// naming both: a clean PG's log longer than the longest log.
#[test]
fn an_osd_refuses_a_clean_pg_log_longer_than_the_longest() {
    let d = Dev::new("cli-log-limits");
    let o = d.run(&[
        "dev",
        "up",
        "--dir",
        d.dir(),
        "--store",
        "mem",
        "--osds",
        "1",
        "--set",
        "osd_pg_log_entries_min=5000",
    ]);
    let (_, err) = text(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("osd_pg_log_entries_min (5000) is larger than osd_pg_log_entries_max (3000)"),
        "{err}"
    );
}

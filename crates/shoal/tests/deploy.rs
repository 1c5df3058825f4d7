//! Standing a cluster up host by host, as an operator does (issue 22):
//! `shoal cluster bootstrap` on a first "host", `shoal host join TOKEN` on
//! others (each host its own loopback address, configuration and data
//! directories, daemons started as detached processes), a monitor and OSDs
//! added, a host removed with its data drained first; and the systemd
//! units shipped in packaging/systemd checked by `systemd-analyze verify`.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

mod common;

use common::{SHOAL, until};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn systemd_units_pass_systemd_analyze_verify() {
    let Ok(o) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("skipped: no systemd-analyze");
        return;
    };
    assert!(o.status.success());
    // The units name the binary where it is installed; here, the build's.
    let dir = tempdir("units");
    let units = repo().join("packaging/systemd");
    let mut names = Vec::new();
    for e in std::fs::read_dir(&units).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(e.path()).unwrap();
        std::fs::write(dir.join(&name), text.replace("/usr/local/bin/shoal", SHOAL)).unwrap();
        names.push(name.replace("@.", "@x."));
    }
    for want in [
        "shoal-mon@x.service",
        "shoal-osd@x.service",
        "shoal-mgr@x.service",
        "shoal-gateway@x.service",
        "shoal.target",
    ] {
        assert!(names.iter().any(|n| n == want), "no {want} in {names:?}");
    }
    let verify = |dir: &Path| {
        Command::new("systemd-analyze")
            .arg("verify")
            .args(&names)
            .current_dir(dir)
            .output()
            .unwrap()
    };
    let o = verify(&dir);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && err.trim().is_empty(), "{err}");
    // The check can fail: a unit naming a binary that is not there.
    let osd = dir.join("shoal-osd@.service");
    let text = std::fs::read_to_string(&osd).unwrap();
    std::fs::write(&osd, text.replace(SHOAL, "/nonexistent/shoal")).unwrap();
    let o = verify(&dir);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("/nonexistent"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("shoal-deploy-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The "hosts" of the test: each a directory with etc/ and data/; every
/// daemon they spawned is killed on drop.
struct Hosts {
    dir: PathBuf,
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for h in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let run = h.path().join("data/run");
            for p in std::fs::read_dir(run).into_iter().flatten().flatten() {
                if let Ok(pid) = std::fs::read_to_string(p.path()) {
                    let _ = Command::new("kill").args(["-9", pid.trim()]).status();
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Hosts {
    fn dirs(&self, host: &str) -> Vec<String> {
        let h = self.dir.join(host);
        vec![
            "--etc".into(),
            h.join("etc").display().to_string(),
            "--data".into(),
            h.join("data").display().to_string(),
            "--start".into(),
            "spawn".into(),
        ]
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("timeout")
            .arg("300")
            .arg(SHOAL)
            .args(args)
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "shoal {args:?}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// `shoal ARGS` as an admin of host `host`.
    fn admin(&self, host: &str, args: &[&str]) -> Value {
        let conf = self.dir.join(host).join("etc/shoal.conf");
        let mut a = vec!["--conf", conf.to_str().unwrap()];
        a.extend(args);
        a.extend(["--format", "json"]);
        serde_json::from_str(&self.ok(&a)).unwrap()
    }
}

fn free_port(ip: &str) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Each CRUSH host and how many OSDs are under it (the tree is listed
/// depth first: a host's OSDs follow it).
fn hosts_in_crush(tree: &Value) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for n in tree["nodes"].as_array().unwrap() {
        if n["type"] == "host" {
            out.push((n["name"].as_str().unwrap().to_string(), 0));
        } else if n["type"] == "osd" && n["depth"] == 2 {
            if let Some(last) = out.last_mut() {
                last.1 += 1;
            }
        }
    }
    out
}

#[test]
fn bootstrap_join_add_and_remove_hosts() {
    let hosts = Hosts {
        dir: tempdir("hosts"),
    };
    let net = format!("127.0.{}", 10 + std::process::id() % 200);
    let ip = |n: u8| format!("{net}.{n}");
    let mut args = vec![
        "cluster".to_string(),
        "bootstrap".into(),
        "--mon-ip".into(),
        ip(11),
        "--mon-port".into(),
        free_port(&ip(11)).to_string(),
        "--host".into(),
        "ha".into(),
    ];
    args.extend(hosts.dirs("ha"));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = hosts.ok(&a);
    let token = out
        .split_whitespace()
        .find(|w| w.starts_with("shoal1."))
        .unwrap_or_else(|| panic!("no token in {out}"))
        .to_string();
    // A second bootstrap on the same host is refused.
    let again = hosts.run(&a);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already in a cluster"));
    // The token names the cluster; a damaged one is refused, and nothing is
    // left half-written.
    let mut bad = vec![
        "host",
        "join",
        &token[..token.len() - 9],
        "--addr",
        "127.0.0.1",
    ];
    let bad_dirs = hosts.dirs("bad");
    bad.extend(bad_dirs.iter().map(String::as_str));
    let o = hosts.run(&bad);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("damaged"),
        "{o:?}"
    );
    assert!(!hosts.dir.join("bad/etc/shoal.conf").exists());

    let join = |host: &str, n: u8, extra: &[String]| {
        let mut a: Vec<String> = vec![
            "host".into(),
            "join".into(),
            token.clone(),
            "--addr".into(),
            ip(n),
            "--host".into(),
            host.into(),
        ];
        a.extend(extra.iter().cloned());
        a.extend(hosts.dirs(host));
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        hosts.ok(&a)
    };
    let disk = |name: &str| hosts.dir.join("disks").join(name).display().to_string();
    join(
        "hb",
        12,
        &["--osd".into(), disk("b1"), "--osd".into(), disk("b2")],
    );
    let mon_port = free_port(&ip(13)).to_string();
    join(
        "hc",
        13,
        &[
            "--mon".into(),
            "--mon-port".into(),
            mon_port,
            "--osd".into(),
            disk("c1"),
        ],
    );
    join("hd", 14, &["--osd".into(), disk("d1")]);

    // Three hosts of OSDs (and the first, monitor only) in CRUSH, every
    // OSD up and in; two monitors in the quorum.
    until("four OSDs up and in", 90, || {
        let s = hosts.admin("ha", &["osd", "stat"]);
        s["num_up_osds"] == 4 && s["num_in_osds"] == 4
    });
    let tree = hosts.admin("ha", &["osd", "tree"]);
    let mut found = hosts_in_crush(&tree);
    found.sort();
    assert_eq!(
        found,
        vec![
            ("ha".into(), 0),
            ("hb".into(), 2),
            ("hc".into(), 1),
            ("hd".into(), 1)
        ],
        "{tree}"
    );
    let mons = hosts.admin("hc", &["mon", "stat"]);
    assert_eq!(mons["quorum"].as_array().unwrap().len(), 2, "{mons}");
    // Every OSD listens on its host's address.
    let dump = hosts.admin("ha", &["osd", "dump"]);
    let text = dump.to_string();
    for n in [12, 13, 14] {
        assert!(text.contains(&format!("{}:", ip(n))), "{dump}");
    }

    // A pool with the host as failure domain, written and read.
    hosts.admin(
        "hb",
        &[
            "osd",
            "pool",
            "create",
            "data",
            "8",
            "replicated",
            "--size",
            "2",
            "--min-size",
            "1",
        ],
    );
    let conf_b = hosts.dir.join("hb/etc/shoal.conf");
    let conf_b = conf_b.to_str().unwrap();
    let file = hosts.dir.join("object");
    std::fs::write(&file, "kept through a host's removal\n".repeat(500)).unwrap();
    hosts.ok(&[
        "--conf",
        conf_b,
        "rados",
        "-p",
        "data",
        "put",
        "o",
        file.to_str().unwrap(),
    ]);
    until("the pool active+clean", 120, || {
        let v = hosts.admin("ha", &["pg", "stat"]);
        v["num_pg_by_state"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "active+clean" && s["num"] == v["num_pgs"])
    });

    // Host hc leaves: drained onto the others, its OSD and monitor
    // removed, its bucket gone; the data stays whole (two copies on two
    // hosts, hb and hd, once it is gone).
    let mut rm = vec!["host".to_string(), "rm".into(), "--purge-data".into()];
    rm.extend(hosts.dirs("hc"));
    let rm: Vec<&str> = rm.iter().map(String::as_str).collect();
    let out = hosts.ok(&rm);
    assert!(out.contains("host hc removed"), "{out}");
    assert!(!hosts.dir.join("hc/etc/shoal.conf").exists());
    let tree = hosts.admin("ha", &["osd", "tree"]);
    let found = hosts_in_crush(&tree);
    assert!(!found.iter().any(|(h, _)| h == "hc"), "{tree}");
    let s = hosts.admin("ha", &["osd", "stat"]);
    assert_eq!(s["num_osds"], 3, "{s}");
    let mons = hosts.admin("ha", &["mon", "stat"]);
    assert_eq!(
        mons["monmap"]["mons"].as_array().unwrap().len(),
        1,
        "{mons}"
    );
    let got = hosts.ok(&["--conf", conf_b, "rados", "-p", "data", "get", "o", "-"]);
    assert_eq!(got, std::fs::read_to_string(&file).unwrap());
}

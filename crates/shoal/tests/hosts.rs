//! Three hosts in containers (the short variant of issue 22's host
//! faults): the image `deploy/image.sh` builds from this build's binary,
//! `deploy/cluster.sh up` (three hosts of a monitor and two OSDs, each
//! daemon in its own container on a private network, pools with the host
//! as failure domain), objects written, a whole host SIGKILLed: the other
//! two keep the replicated pool writable and every object reads back as
//! written; the host started again, the cluster heals to HEALTH_OK with
//! every object intact. Then the short variants of `deploy/faults.sh`
//! (each with the history workload of `shoal bench history`, every
//! acknowledged write checked, a deep scrub of every PG after): the host
//! SIGKILLed again, cut off both ways (a client on it gets nothing
//! acknowledged), cut off one way, every daemon restarted one host at a
//! time, and loss (and a rate limit) on its link. Skipped, saying so, where
//! no Docker engine answers.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::path::PathBuf;
use std::process::{Command, Output};

mod common;

use common::until;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn docker_present() -> bool {
    let ok = Command::new("docker")
        .arg("info")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipped: no Docker engine answers `docker info`");
    }
    ok
}

/// The cluster of this test: its name, subnet and image, removed on drop.
struct Hosts {
    env: Vec<(String, String)>,
}

impl Hosts {
    fn script(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new("timeout");
        cmd.arg("300")
            .arg("bash")
            .arg(repo().join("deploy/cluster.sh"))
            .args(args);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.script(args);
        assert!(
            out.status.success(),
            "cluster.sh {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = vec!["run"];
        a.extend(args);
        a.extend(["--format", "json"]);
        serde_json::from_str(&self.ok(&a)).unwrap()
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = self.script(&["down"]);
        let tag = &self.env.iter().find(|(k, _)| k == "TAG").unwrap().1;
        let _ = Command::new("docker")
            .args(["rmi", "-f", &format!("shoal:{tag}")])
            .output();
    }
}

#[test]
fn a_host_killed_and_restarted_loses_nothing() {
    if !docker_present() {
        return;
    }
    let pid = std::process::id();
    let tag = format!("test{pid}");
    let hosts = Hosts {
        env: vec![
            ("NAME".into(), format!("shoaltest{pid}")),
            ("TAG".into(), tag.clone()),
            ("SUBNET".into(), format!("172.30.{}", pid % 250)),
            (
                "WORK".into(),
                std::env::temp_dir()
                    .join(format!("shoal-test-{pid}-hosts"))
                    .display()
                    .to_string(),
            ),
            ("OSD_BYTES".into(), (512u64 << 20).to_string()),
        ],
    };
    let built = Command::new("bash")
        .arg(repo().join("deploy/image.sh"))
        .args(["--tag", &tag, "--binary", common::SHOAL])
        .output()
        .unwrap();
    assert!(built.status.success(), "{built:?}");
    let up = hosts.ok(&["up"]);
    // CRUSH sees three hosts of two OSDs.
    assert!(up.contains("host h1") && up.contains("host h3"), "{up}");
    let tree = hosts.json(&["osd", "tree"]);
    let host_count = tree["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["type"] == "host")
        .count();
    assert_eq!(host_count, 3, "{tree}");

    // Objects of known content, acknowledged before the fault.
    let work = PathBuf::from(&hosts.env.iter().find(|(k, _)| k == "WORK").unwrap().1);
    let content = |i: usize| format!("object {i} of the host test\n").repeat(100 + i);
    for i in 0..8 {
        std::fs::write(work.join("etc").join(format!("obj-{i}")), content(i)).unwrap();
        let src = format!("/etc/shoal/obj-{i}");
        hosts.ok(&[
            "run",
            "rados",
            "-p",
            "rbd",
            "put",
            &format!("obj-{i}"),
            &src,
        ]);
    }
    let read_all = |when: &str| {
        for i in 0..8 {
            let got = hosts.ok(&["run", "rados", "-p", "rbd", "get", &format!("obj-{i}"), "-"]);
            assert!(got == content(i), "obj-{i} differs {when}");
        }
    };

    // A whole host SIGKILLed: writes go on, every object reads back.
    hosts.ok(&["kill-host", "h3"]);
    let w = hosts.json(&["bench", "-p", "rbd", "2", "write", "-b", "4096"]);
    assert!(w["ops"].as_u64().unwrap() > 0, "{w}");
    read_all("with h3 down");

    // Back: the cluster heals, nothing lost.
    hosts.ok(&["start-host", "h3"]);
    until("HEALTH_OK after the host returned", 180, || {
        hosts.json(&["health"])["status"] == "HEALTH_OK"
    });
    read_all("after h3 returned");

    // The faults, 15 s each, with the history workload.
    let mut cmd = Command::new("timeout");
    cmd.arg("1500")
        .arg("bash")
        .arg(repo().join("deploy/faults.sh"))
        .args([
            "--hold",
            "15",
            "kill",
            "partition",
            "oneway",
            "rolling",
            "netem",
        ]);
    for (k, v) in &hosts.env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "faults.sh: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let figures: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let names: Vec<&str> = figures
        .iter()
        .filter_map(|f| f["scenario"].as_str())
        .collect();
    assert_eq!(names, ["kill", "partition", "oneway", "rolling", "netem"]);
    for f in &figures {
        eprintln!("{f}");
        // Writes went on through every fault: none failed (the client
        // library resends across intervals), and none stalled for longer
        // than the stated bound.
        assert!(f["acked_writes"].as_u64().unwrap() > 100, "{f}");
        assert_eq!(f["failed_writes"], 0, "{f}");
        assert_eq!(f["failed_reads"], 0, "{f}");
        assert!(f["max_stall_s"].as_f64().unwrap() < 60.0, "{f}");
    }
}

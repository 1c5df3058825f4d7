//! An OSD process keeps following the OSD map when the monitor it talks to
//! dies: three `shoal mon` processes and one `shoal osd`; each monitor in
//! turn is SIGKILLed (so whichever one the OSD was subscribed to goes away),
//! a pool is created while it is down, and the OSD must instantiate and
//! activate that pool's PGs (it can only know of them from the new map).

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::process::Command;
use std::time::{Duration, Instant};

mod common;

use common::{Dev, SHOAL};

trait Daemons {
    fn wait_pool_active(&self, pool: &str);
    fn pool_id(&self, pool: &str) -> u64;
}

impl Daemons for Dev {
    /// Waits until the pool's PGs are all active+clean (reported by the OSD).
    fn wait_pool_active(&self, pool: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self.run(&["pg", "dump", "--format", "json"]);
            if out.status.success() {
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                let id = self.pool_id(pool);
                let pgs: Vec<&serde_json::Value> = v["pg_stats"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|p| p["pgid"].as_str().unwrap().starts_with(&format!("{id}.")))
                    .collect();
                if !pgs.is_empty() && pgs.iter().all(|p| p["state"] == "active+clean") {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "pool {pool} never became active+clean"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn pool_id(&self, pool: &str) -> u64 {
        let v: serde_json::Value =
            serde_json::from_str(&self.ok(&["osd", "pool", "ls", "--format", "json"])).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == pool)
            .unwrap()["id"]
            .as_u64()
            .unwrap()
    }
}

#[test]
fn an_osd_follows_the_map_across_monitor_failures() {
    let d = Dev::new("monfail");
    let dirs = d.0.to_str().unwrap().to_string();
    d.ok(&[
        "dev", "up", "--dir", &dirs, "--mons", "3", "--osds", "1", "--store", "mem",
    ]);
    for (i, mon) in ["a", "b", "c"].iter().enumerate() {
        let name = format!("mon.{mon}");
        d.signal(&name, "-KILL");
        let pool = format!("p{i}");
        d.ok(&[
            "osd",
            "pool",
            "create",
            &pool,
            "8",
            "replicated",
            "--size",
            "1",
            "--min-size",
            "1",
        ]);
        d.wait_pool_active(&pool);
        // Bring it back before the next one goes.
        let data = d.0.join(&name);
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(d.0.join("out").join(format!("{name}.log")))
            .unwrap();
        let child = Command::new(SHOAL)
            .args(["--conf", d.0.join("shoal.conf").to_str().unwrap()])
            .args(["mon", "--id", mon, "--data", data.to_str().unwrap()])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        std::fs::write(
            d.0.join("run").join(format!("{name}.pid")),
            child.id().to_string(),
        )
        .unwrap();
        std::mem::forget(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let v: serde_json::Value =
                serde_json::from_str(&d.ok(&["mon", "stat", "--format", "json"])).unwrap();
            if v["quorum"].as_array().is_some_and(|q| q.len() == 3) {
                break;
            }
            assert!(Instant::now() < deadline, "{name} did not rejoin: {v}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

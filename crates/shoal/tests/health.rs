//! Health with a memory, as an operator meets it on a `shoal dev` cluster:
//! a check raised (a flag set, an OSD killed) and cleared shows in `shoal
//! health history` with when; a muted check no longer counts in `health`
//! or `status` and is listed apart; a mute goes with its check unless
//! sticky, lapses after its TTL, and bad codes and TTLs are refused.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

mod common;

use common::{Dev, until};
use serde_json::Value;

/// The history's (code, what) pairs.
fn history(d: &Dev) -> Vec<(String, String)> {
    let v = d.json(&["health", "history"]);
    v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["code"].as_str().unwrap().to_string(),
                e["what"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn has(d: &Dev, code: &str, what: &str) -> bool {
    history(d).iter().any(|(c, w)| c == code && w == what)
}

fn status(d: &Dev) -> Value {
    d.json(&["health"])
}

/// Whether the list `what` (`checks`, `muted`) of `health` names `code`.
fn lists(health: &Value, what: &str, code: &str) -> bool {
    health[what]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["code"] == code)
}

fn err(d: &Dev, args: &[&str]) -> String {
    let out = d.run(args);
    assert!(!out.status.success(), "shoal {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn checks_are_recorded_muted_and_unmuted() {
    let d = Dev::new("health");
    d.ok(&["dev", "up", "--dir", d.dir(), "--osds", "3", "--no-gateway"]);
    until("HEALTH_OK", 60, || status(&d)["status"] == "HEALTH_OK");

    // A flag raises OSDMAP_FLAGS; the leader records it.
    d.ok(&["osd", "set", "noout"]);
    until("OSDMAP_FLAGS raised", 30, || {
        has(&d, "OSDMAP_FLAGS", "raised")
    });
    assert_eq!(status(&d)["status"], "HEALTH_WARN");

    // Muted, it no longer counts, here or in `status`, and is listed apart.
    d.ok(&["health", "mute", "OSDMAP_FLAGS"]);
    let h = status(&d);
    assert_eq!(h["status"], "HEALTH_OK", "{h}");
    assert_eq!(h["muted"][0]["code"], "OSDMAP_FLAGS", "{h}");
    assert_eq!(d.json(&["status"])["health"]["status"], "HEALTH_OK");
    assert!(d.ok(&["health"]).contains("(muted: OSDMAP_FLAGS)"));

    // The check clears: so does its (not sticky) mute.
    d.ok(&["osd", "unset", "noout"]);
    until("OSDMAP_FLAGS cleared", 30, || {
        has(&d, "OSDMAP_FLAGS", "cleared")
    });
    let e = err(&d, &["health", "unmute", "OSDMAP_FLAGS"]);
    assert!(e.contains("OSDMAP_FLAGS is not muted"), "{e}");

    // A mute with a TTL lapses; a sticky one outlives its check.
    d.ok(&["osd", "set", "noout"]);
    d.ok(&["health", "mute", "OSDMAP_FLAGS", "2s"]);
    assert_eq!(status(&d)["status"], "HEALTH_OK");
    until("the mute lapsed", 15, || {
        status(&d)["status"] == "HEALTH_WARN"
    });
    d.ok(&["health", "mute", "OSDMAP_FLAGS", "--sticky"]);
    d.ok(&["osd", "unset", "noout"]);
    until("cleared again", 30, || {
        history(&d)
            .iter()
            .filter(|(c, w)| c == "OSDMAP_FLAGS" && w == "cleared")
            .count()
            == 2
    });
    d.ok(&["health", "unmute", "OSDMAP_FLAGS"]);

    // An OSD killed: OSD_DOWN (and the PGs it held) are raised, then
    // cleared once it is back, each with when.
    d.kill9("osd.2");
    d.ok(&["osd", "down", "2"]);
    until("OSD_DOWN raised", 30, || has(&d, "OSD_DOWN", "raised"));
    common::start_osd(&d, 2);
    until("OSD_DOWN cleared", 60, || has(&d, "OSD_DOWN", "cleared"));
    until("HEALTH_OK again", 60, || {
        status(&d)["status"] == "HEALTH_OK"
    });
    let plain = d.ok(&["health", "history"]);
    let line = plain
        .lines()
        .find(|l| l.contains("OSD_DOWN") && l.contains("raised"))
        .unwrap_or_else(|| panic!("{plain}"));
    assert!(
        line.starts_with("20") && line.contains("HEALTH_WARN"),
        "{line}"
    );
    let events = d.json(&["health", "history"])["events"].clone();
    let at: Vec<u64> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["at_ms"].as_u64().unwrap())
        .collect();
    assert!(at.windows(2).all(|w| w[0] <= w[1]), "{events}");

    // Bad codes and TTLs are refused with what is wrong.
    let e = err(&d, &["health", "mute", "not a code"]);
    assert!(e.contains("bad health check code"), "{e}");
    let e = err(&d, &["health", "mute", "OSD_DOWN", "5y"]);
    assert!(e.contains("bad TTL"), "{e}");
}

#[test]
fn a_crashed_daemon_is_reported_and_its_crash_archived() {
    use std::process::{Command, Stdio};
    let d = Dev::new("crash");
    d.ok(&["dev", "up", "--dir", d.dir(), "--osds", "3"]);
    // osd.2 runs again, made to panic half a second in: it writes its
    // report and aborts (the panic is on a thread of its own: any thread's
    // panic ends the daemon).
    d.kill9("osd.2");
    let crashed = Command::new(common::SHOAL)
        .args(["--conf", d.0.join("shoal.conf").to_str().unwrap()])
        .args(["--set", "debug_inject_panic_ms=500", "osd", "--id", "2"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!crashed.status.success());
    let said = String::from_utf8_lossy(&crashed.stderr);
    assert!(said.contains("crash report written to"), "{said}");
    let reports: Vec<_> = std::fs::read_dir(d.0.join("osd.2").join("crash"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(reports.len(), 1);
    // Back up, it posts the report; RECENT_CRASH warns until archived.
    common::start_osd(&d, 2);
    until("the crash posted", 30, || {
        d.json(&["crash", "ls"])["crashes"]
            .as_array()
            .is_some_and(|a| a.len() == 1)
    });
    let c = d.json(&["crash", "ls"])["crashes"][0].clone();
    assert_eq!(c["entity_name"], "osd.2", "{c}");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .contains("panic injected by debug_inject_panic_ms=500"),
        "{c}"
    );
    let id = c["crash_id"].as_str().unwrap().to_string();
    assert!(d.ok(&["crash", "ls"]).contains(&id));
    let info: Value = serde_json::from_str(&d.ok(&["crash", "info", &id])).unwrap();
    assert!(!info["backtrace"].as_array().unwrap().is_empty(), "{info}");
    assert!(reports[0].path().join("posted").exists());
    assert!(lists(&status(&d), "checks", "RECENT_CRASH"));
    // Recorded by the leader's next look, before it is archived.
    until("RECENT_CRASH raised in the history", 30, || {
        has(&d, "RECENT_CRASH", "raised")
    });
    d.ok(&["crash", "archive", &id]);
    assert!(!lists(&status(&d), "checks", "RECENT_CRASH"));
    until("RECENT_CRASH cleared in the history", 30, || {
        has(&d, "RECENT_CRASH", "cleared")
    });
    d.ok(&["crash", "rm", &id]);
    assert_eq!(d.json(&["crash", "ls"])["crashes"], serde_json::json!([]));
    let e = err(&d, &["crash", "info", &id]);
    assert!(e.contains("no crash"), "{e}");

    // A gateway's panic is reported (in the dev cluster's crash_dir) and
    // posted while it runs: a front end keeps serving through a panic
    // that ends only the task it happened in.
    let gw = common::Background::start(
        &d,
        &[
            "--set",
            "debug_inject_panic_ms=300",
            "gateway",
            "--bind",
            "127.0.0.1:0",
        ],
        "http",
    );
    until("the gateway's crash posted", 40, || {
        d.json(&["crash", "ls"])["crashes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["entity_name"] == "gateway (client.admin)")
    });
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(gw.addr.as_str()).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
    d.ok(&["crash", "archive-all"]);
}

/// The leader monitor SIGKILLed: the next leader goes on recording (the
/// dead monitor's MON_DOWN), and the health commands work from the
/// command line while a monitor is dead.
#[test]
fn the_next_leader_records_a_dead_monitor() {
    let d = Dev::new("health-mons");
    d.ok(&[
        "dev",
        "up",
        "--dir",
        d.dir(),
        "--mons",
        "3",
        "--osds",
        "1",
        "--no-gateway",
    ]);
    let mut leader = None;
    until("a quorum of 3", 60, || {
        let out = d.run(&["status", "--format", "json"]);
        let Ok(v) = serde_json::from_slice::<Value>(&out.stdout) else {
            return false;
        };
        leader = v["leader"].as_str().map(String::from);
        v["quorum"].as_array().is_some_and(|q| q.len() == 3) && leader.is_some()
    });
    let leader = leader.unwrap();
    // Whatever the leader recorded while the quorum formed is settled
    // (a MON_DOWN still in force would make no new event).
    until("no MON_DOWN in force", 30, || {
        let last = history(&d).into_iter().rfind(|(c, _)| c == "MON_DOWN");
        last.is_none_or(|(_, w)| w == "cleared") && !lists(&status(&d), "checks", "MON_DOWN")
    });
    let killed_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    d.kill9(&format!("mon.{leader}"));
    // Raised after the kill (a check seen while the quorum formed may be
    // in the history before it).
    let raised_after_kill = || {
        let out = d.run(&["health", "history", "--format", "json"]);
        let Ok(v) = serde_json::from_slice::<Value>(&out.stdout) else {
            return None;
        };
        v["events"].as_array().and_then(|a| {
            a.iter()
                .find(|e| {
                    e["code"] == "MON_DOWN"
                        && e["what"] == "raised"
                        && e["at_ms"].as_u64().unwrap_or(0) + 1000 >= killed_ms
                })
                .cloned()
        })
    };
    until("MON_DOWN raised by the next leader", 60, || {
        raised_after_kill().is_some()
    });
    let down = raised_after_kill().unwrap();
    assert!(
        down["summary"].as_str().unwrap().contains("1/3 mons down"),
        "{down}"
    );
    d.ok(&["health", "mute", "MON_DOWN", "10m"]);
    let h = status(&d);
    assert!(lists(&h, "muted", "MON_DOWN"), "{h}");
    d.ok(&["health", "unmute", "MON_DOWN"]);
}

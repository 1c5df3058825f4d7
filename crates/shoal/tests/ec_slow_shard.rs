//! A read of an erasure-coded object while the OSD holding one of its
//! data shards is stalled (SIGSTOP: its connections stay open, nothing
//! answers, no failure is detected): the primary asks the next shard once
//! the stalled one has been silent for `osd_ec_read_hedge_ms` and decodes
//! around it. The peer timeout is set far above the client's op timeout,
//! so a read that waited for the stalled shard would fail; and the OSD is
//! still up in the map when the read returns, so no new interval served it.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

mod common;

use common::Dev;

/// SIGCONTs the stalled OSD however the test ends, so `dev down` can stop it.
struct Stalled<'a>(&'a Dev, String);

impl Drop for Stalled<'_> {
    fn drop(&mut self) {
        self.0.signal(&self.1, "-CONT");
    }
}

#[test]
fn a_read_decodes_around_a_stalled_shard() {
    let d = Dev::new("ec-slow");
    d.ok(&[
        "--set",
        "osd_peer_timeout_ms=120000",
        "--set",
        "client_op_timeout_ms=20000",
        "--set",
        "osd_heartbeat_grace_ms=600000",
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
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !d.all_active_clean() {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            d.ok(&["pg", "stat"])
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let body: Vec<u8> = (0..100_000u32).map(|i| (i * 131 % 251) as u8).collect();
    let file = d.0.join("victim.bin");
    std::fs::write(&file, &body).unwrap();
    d.ok(&["rados", "-p", "ec", "put", "victim", file.to_str().unwrap()]);

    // Stall the holder of data shard 1 (the primary holds shard 0).
    let m = d.json(&["osd", "map", "ec", "victim"]);
    let acting: Vec<i64> = serde_json::from_value(m["acting"].clone()).unwrap();
    let victim = format!("osd.{}", acting[1]);
    d.signal(&victim, "-STOP");
    let _cont = Stalled(&d, victim.clone());

    let out = d.0.join("read.bin");
    d.ok(&["rados", "-p", "ec", "get", "victim", out.to_str().unwrap()]);
    assert!(
        std::fs::read(&out).unwrap() == body,
        "the decoded read differs"
    );
    let m = d.json(&["osd", "map", "ec", "victim"]);
    let now: Vec<i64> = serde_json::from_value(m["acting"].clone()).unwrap();
    assert_eq!(now, acting, "{victim} left the acting set while stalled");
    let tree = d.json(&["osd", "dump"]);
    let up = tree["osds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["osd"] == acting[1])
        .map(|o| o["up"].clone());
    assert_eq!(up, Some(serde_json::Value::Bool(true)), "{tree}");
}

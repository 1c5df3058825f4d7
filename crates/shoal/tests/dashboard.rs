//! The manager's dashboard in a real headless browser (Debian's chromium
//! and chromedriver through selenium: `clients/dashboard.py`) on a `shoal
//! dev` cluster under a little load: pages load with no console error; the
//! figures shown are those of `shoal status --format json`; a read-only
//! user is offered no action and is refused one sent anyway; an admin
//! marks an OSD out and creates a pool through the page, and the cluster
//! says so. Screenshots of each page go to a temporary directory, or to
//! `$SHOAL_DASHBOARD_SHOTS` (how `docs/dashboard/` was made).
//!
//! `.ci/run` installs chromium, chromium-driver and selenium and sets
//! `SHOAL_REQUIRE_TOOLS=1`, so CI fails rather than skips without them.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::process::Command;

mod common;

use common::{Dev, python, until};

fn browser_present() -> bool {
    let found = |c: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {c}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let selenium = Command::new("python3")
        .args(["-c", "import selenium"])
        .output()
        .is_ok_and(|o| o.status.success());
    let ok = found("chromium") && found("chromedriver") && selenium;
    if !ok {
        let m = "missing chromium, chromedriver or selenium: \
                 apt-get install chromium chromium-driver; pip install selenium";
        assert!(std::env::var_os("SHOAL_REQUIRE_TOOLS").is_none(), "{m}");
        eprintln!("skipped: {m}");
    }
    ok
}

/// The `key = ...` of a keyring section.
fn key_of(section: &str) -> String {
    section
        .lines()
        .find_map(|l| l.trim().strip_prefix("key = "))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn the_dashboard_shows_the_cluster_and_acts_for_admins_only() {
    if !browser_present() {
        return;
    }
    let d = Dev::new("dashboard");
    d.up_mem(&["--set", "mgr_stats_period_ms=1000"]);
    let mgr = d.addr_of("mgr.x");
    let admin = key_of(&d.ok(&["auth", "get", "client.admin"]));
    let viewer = key_of(&d.ok(&["auth", "get-or-create", "client.viewer", "mon", "allow r"]));
    // Some I/O for the throughput chart; an image and a bucket to list.
    d.ok(&["bench", "-p", "rbd", "2", "write"]);
    d.ok(&["rbd", "create", "dashboard-disk", "--size", "1G"]);
    let user: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(d.0.join("gateway").join("user.json")).unwrap(),
    )
    .unwrap();
    let k = &user["keys"][0];
    python(
        60,
        &[
            "-c",
            "import boto3, os\n\
             s3 = boto3.client('s3', endpoint_url=os.environ['E'], region_name='us-east-1',\n\
                 aws_access_key_id=os.environ['K'], aws_secret_access_key=os.environ['S'])\n\
             s3.create_bucket(Bucket='dashboard-bucket')\n",
        ],
        &[
            ("E", &format!("http://{}", d.addr_of("gateway"))),
            ("K", k["access_key"].as_str().unwrap()),
            ("S", k["secret_key"].as_str().unwrap()),
        ],
    );
    until("every PG clean", 60, || d.all_active_clean());
    let started_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let status = d.0.join("status.json");
    std::fs::write(&status, d.ok(&["status", "--format", "json"])).unwrap();
    let shots = std::env::var("SHOAL_DASHBOARD_SHOTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| d.0.join("shots"));
    std::fs::create_dir_all(&shots).unwrap();
    let results = d.0.join("results.json");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/dashboard.py");
    let url = format!("http://{mgr}/");
    let (status, shots_dir, results_file) = (
        status.display().to_string(),
        shots.display().to_string(),
        results.display().to_string(),
    );
    python(
        180,
        &[script],
        &[
            ("URL", &url),
            ("ADMIN_KEY", &admin),
            ("RO_ENTITY", "client.viewer"),
            ("RO_KEY", &viewer),
            ("STATUS", &status),
            ("SHOTS", &shots_dir),
            ("OUT", &results_file),
        ],
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["read_only_action"][0], 403, "{r}");
    assert_eq!(r["read_only_scrub"][0], 403, "{r}");
    assert_eq!(r["catalog"], true, "{r}");
    for page in ["login", "overview", "osds", "pools", "pgs", "storage"] {
        let png = std::fs::read(shots.join(format!("{page}.png"))).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "{page}.png is no PNG");
    }

    // What the admin did through the page is what the cluster says.
    let tree = d.json(&["osd", "tree"]);
    let out_osd = tree["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == r["marked_out"])
        .unwrap();
    assert_eq!(out_osd["in"], false, "{out_osd}");
    let pools = d.ok(&["osd", "pool", "ls"]);
    assert!(pools.contains("dashboard-pool"), "{pools}");
    // The admin's scrub of osd.0 reached its PGs: one at least (the first,
    // done before the page was answered) was scrubbed during the test.
    let dump = d.json(&["pg", "dump"]);
    let scrubbed = dump["pg_stats"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["acting"][0] == 0)
        .filter_map(|p| p["pgid"].as_str())
        .any(|pg| {
            let q = d.json(&["pg", "query", pg]);
            q["scrub"]["last_scrub_ms"].as_u64().unwrap_or(0) >= started_ms
        });
    assert!(scrubbed, "no PG of osd.0 was scrubbed: {}", r["scrubbed"]);
    // The read-only user's refused action changed nothing.
    let osd0 = tree["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "osd.0")
        .unwrap();
    assert_eq!(osd0["in"], true, "{osd0}");
}

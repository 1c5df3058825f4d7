//! `shoal gateway` on a `shoal dev` cluster: users and keys from the CLI
//! (with errors that name what is wrong), then the S3 API through clients
//! nobody here wrote — boto3 and the aws CLI (`tests/clients/s3_clients.py`):
//! buckets per owner, objects with their headers, metadata, ETags and
//! ranges, listings v1 and v2 with prefixes, delimiters and pagination,
//! signatures checked (wrong secrets, unknown keys, presigned URLs and
//! their expiry), owners and canned ACLs, deletes, and versioning (version
//! ids, delete markers, listings of versions, reads and deletes by version);
//! every protection the gateway lacks refused and nothing stored
//! (`clients/s3_refused.py`); object and bucket tags with AWS's limits
//! (`clients/s3_tagging.py`); bucket policies and public access blocks
//! (`clients/s3_policy.py`); object lock (`clients/s3_lock.py`);
//! malformed configuration bodies (`clients/s3_malformed.py`); rclone's sync, check, copy back, server-side
//! copy and delete (`clients/rclone_s3.py`); s3cmd with its default configuration, which
//! signs for region `US` (`clients/s3cmd_default.py`), and a gateway that
//! enforces its region.
//!
//! boto3 and awscli come from PyPI (`.ci/run` installs them and sets
//! `SHOAL_REQUIRE_TOOLS=1`, so CI fails rather than skips without them).

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Dev, python};

/// A `shoal gateway` process on a free port, stopped when dropped.
fn gateway(d: &Dev) -> common::Background {
    common::Background::start(d, &["gateway", "--bind", "127.0.0.1:0"], "http")
}

/// Whether boto3 and the aws CLI are installed; without them the client
/// part is skipped, unless `SHOAL_REQUIRE_TOOLS` says CI must have them.
fn clients_present() -> bool {
    let ok = |cmd: &str| {
        Command::new("sh")
            .args(["-c", cmd])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    if ok("python3 -c 'import boto3' && command -v aws") {
        return true;
    }
    let m = "missing boto3 or the aws CLI: pip install boto3 awscli";
    assert!(std::env::var_os("SHOAL_REQUIRE_TOOLS").is_none(), "{m}");
    eprintln!("skipped: {m}");
    false
}

/// A `shoal gateway user` command's JSON (it always prints JSON, as
/// `radosgw-admin` does).
fn json(d: &Dev, args: &[&str]) -> serde_json::Value {
    let out = d.ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

/// A gateway serving HTTPS with a certificate made here (in `dir`), and
/// that certificate.
fn https_gateway(d: &Dev, dir: &str) -> (common::Background, std::path::PathBuf) {
    let (cert, pkey) = common::self_signed(&d.0.join(dir));
    let gw = common::Background::start(
        d,
        &[
            "gateway",
            "--bind",
            "127.0.0.1:0",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            pkey.to_str().unwrap(),
        ],
        "https",
    );
    (gw, cert)
}

/// A gateway serving HTTPS: boto3 trusting its certificate gets through,
/// one that does not trust it is refused.
fn https(d: &Dev, key: &str, secret: &str) {
    let (gw, cert) = https_gateway(d, "gw-tls");
    let script = "import boto3,botocore.config,os\n\
        from botocore.exceptions import SSLError\n\
        def c(v): return boto3.client('s3',endpoint_url=os.environ['E'],aws_access_key_id=os.environ['K'],\
        aws_secret_access_key=os.environ['S'],region_name='us-east-1',verify=v,\
        config=botocore.config.Config(retries={'max_attempts': 1}))\n\
        assert 'Buckets' in c(os.environ['CA']).list_buckets()\n\
        try:\n    c(True).list_buckets(); raise SystemExit('an untrusted certificate was accepted')\n\
        except SSLError: pass\n";
    let endpoint = format!("https://{}", gw.addr);
    let ca = cert.to_str().unwrap();
    python(
        60,
        &["-c", script],
        &[("E", &endpoint), ("K", key), ("S", secret), ("CA", ca)],
    );
}

/// Server-side encryption (`clients/s3_sse.py`) over an HTTPS gateway:
/// objects written with SSE-C and SSE-S3, then every data object in the
/// pool read raw with `shoal rados get`: the secret marker is in none,
/// the plain control's marker in one (the look can see plaintext); then
/// everything read back through the gateway, with the keys and without.
fn encrypted_at_rest(d: &Dev, key: &str, secret: &str, plain_endpoint: &str) {
    let (gw, cert) = https_gateway(d, "gw-sse-tls");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/s3_sse.py");
    let endpoint = format!("https://{}", gw.addr);
    let env = [
        ("GW_ENDPOINT", endpoint.as_str()),
        ("GW_PLAIN_ENDPOINT", plain_endpoint),
        ("GW_KEY", key),
        ("GW_SECRET", secret),
        ("AWS_CA_BUNDLE", cert.to_str().unwrap()),
    ];
    python(300, &[script, "write"], &env);
    let listing = d.ok(&["rados", "-p", ".shoal.gateway", "ls"]);
    let (mut seen, mut control) = (0, 0);
    for oid in listing.lines().filter(|l| l.starts_with("data.")) {
        let out = d.run(&["rados", "-p", ".shoal.gateway", "get", oid, "-"]);
        assert!(out.status.success(), "rados get {oid}");
        let has = |m: &[u8]| out.stdout.windows(m.len()).any(|w| w == m);
        assert!(
            !has(b"SSE-SECRET-MARKER-"),
            "{oid} holds encrypted data in the clear"
        );
        control += usize::from(has(b"PLAIN-CONTROL-MARKER-"));
        seen += out.stdout.len();
    }
    assert_eq!(control, 1, "the plain control object was not found raw");
    // Every object's data was looked at (over 14 MiB of it sealed).
    assert!(seen > 14 << 20, "{seen} bytes of data objects");
    python(300, &[script, "read"], &env);
    // The master key is the monitors' record, made once.
    let auth = d.ok(&["auth", "get", "client.gateway-sse-s3"]);
    assert!(auth.contains("client.gateway-sse-s3"), "{auth}");
}

/// Whether `tool` is installed (Debian's package of that name); CI must
/// have it.
fn tool_present(tool: &str) -> bool {
    let ok = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        let m = format!("missing {tool}: apt-get install {tool}");
        assert!(std::env::var_os("SHOAL_REQUIRE_TOOLS").is_none(), "{m}");
        eprintln!("skipped: {m}");
    }
    ok
}

/// A gateway that enforces its region (`gateway_region`): a request
/// signed for another is answered as AWS answers it, naming the region
/// expected, and one signed for it goes through; s3cmd, signing for `US`,
/// learns the region from that answer and goes on.
fn enforced_region(d: &Dev, key: &str, secret: &str) {
    let gw = common::Background::start(
        d,
        &[
            "--set",
            "gateway_region=us-east-1",
            "gateway",
            "--bind",
            "127.0.0.1:0",
        ],
        "http",
    );
    let endpoint = format!("http://{}", gw.addr);
    let script = "import boto3,botocore.config,os\n\
        from botocore.exceptions import ClientError\n\
        def c(r): return boto3.client('s3',endpoint_url=os.environ['E'],aws_access_key_id=os.environ['K'],\
        aws_secret_access_key=os.environ['S'],region_name=r,\
        config=botocore.config.Config(retries={'max_attempts': 1}))\n\
        assert 'Buckets' in c('us-east-1').list_buckets()\n\
        try:\n    c('eu-west-1').list_buckets(); raise SystemExit('another region was accepted')\n\
        except ClientError as e:\n\
        \x20   err = e.response['Error']\n\
        \x20   assert err['Code'] == 'AuthorizationHeaderMalformed', err\n\
        \x20   assert err['Region'] == 'us-east-1', err\n\
        \x20   assert e.response['ResponseMetadata']['HTTPStatusCode'] == 400\n";
    python(
        60,
        &["-c", script],
        &[("E", &endpoint), ("K", key), ("S", secret)],
    );
    if tool_present("s3cmd") {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients");
        python(
            120,
            &[&format!("{dir}/s3cmd_default.py"), "--short"],
            &[
                ("GW_ENDPOINT", &endpoint),
                ("GW_KEY", key),
                ("GW_SECRET", secret),
            ],
        );
    }
}

fn key(user: &serde_json::Value) -> (String, String) {
    let k = &user["keys"][0];
    (
        k["access_key"].as_str().unwrap().to_string(),
        k["secret_key"].as_str().unwrap().to_string(),
    )
}

#[test]
fn s3_clients_use_the_gateway() {
    let d = Dev::new("gateway");
    // The gateway `dev up` starts is checked at the end; this one starts
    // without, to see the errors of a cluster with no gateway pool.
    d.ok(&["dev", "up", "--dir", d.dir(), "--osds", "3", "--no-gateway"]);
    // The pool must exist; the error says how to make it.
    let e = d.run(&["gateway", "user", "create", "--uid", "alice"]);
    assert!(!e.status.success());
    let msg = String::from_utf8_lossy(&e.stderr);
    assert!(
        msg.contains("shoal osd pool create .shoal.gateway"),
        "{msg}"
    );
    d.ok(&["osd", "pool", "create", ".shoal.gateway", "8"]);

    // Users and keys.
    let alice = json(&d, &["gateway", "user", "create", "--uid", "alice"]);
    assert_eq!(alice["uid"], "alice");
    let (ak, asec) = key(&alice);
    assert_eq!(ak.len(), 20);
    let bob = json(
        &d,
        &[
            "gateway",
            "user",
            "create",
            "--uid",
            "bob",
            "--display-name",
            "Bob B.",
            "--email",
            "bob@example.com",
        ],
    );
    assert_eq!(bob["email"], "bob@example.com");
    let (bk, bsec) = key(&bob);
    let e = d.run(&["gateway", "user", "create", "--uid", "alice"]);
    assert!(String::from_utf8_lossy(&e.stderr).contains("user alice already exists"));
    // An e-mail address names one user (ACL grants may name it).
    let e = d.run(&[
        "gateway",
        "user",
        "create",
        "--uid",
        "bobby",
        "--email",
        "BOB@example.com",
    ]);
    assert!(
        String::from_utf8_lossy(&e.stderr)
            .contains("a user with e-mail address BOB@example.com already exists"),
        "{}",
        String::from_utf8_lossy(&e.stderr)
    );
    let e = d.run(&["gateway", "user", "create", "--uid", "bad uid"]);
    assert!(String::from_utf8_lossy(&e.stderr).contains("bad uid"));
    assert_eq!(
        json(&d, &["gateway", "user", "ls"]),
        serde_json::json!(["alice", "bob"])
    );
    let two = json(&d, &["gateway", "user", "key", "create", "--uid", "bob"]);
    let spare = two["keys"][1]["access_key"].as_str().unwrap().to_string();
    let one = json(
        &d,
        &[
            "gateway",
            "user",
            "key",
            "rm",
            "--uid",
            "bob",
            "--access-key",
            &spare,
        ],
    );
    assert_eq!(one["keys"].as_array().unwrap().len(), 1);
    let e = d.run(&["gateway", "user", "info", "--uid", "carol"]);
    assert!(String::from_utf8_lossy(&e.stderr).contains("user carol does not exist"));

    let gw = gateway(&d);
    if clients_present() {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/s3_clients.py");
        let endpoint = format!("http://{}", gw.addr);
        python(
            300,
            &[script],
            &[
                ("GW_ENDPOINT", &endpoint),
                ("GW_ALICE_KEY", &ak),
                ("GW_ALICE_SECRET", &asec),
                ("GW_BOB_KEY", &bk),
                ("GW_BOB_SECRET", &bsec),
            ],
        );
    }
    if clients_present() {
        https(&d, &ak, &asec);
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients");
        let endpoint = format!("http://{}", gw.addr);
        let env = [
            ("GW_ENDPOINT", endpoint.as_str()),
            ("GW_KEY", ak.as_str()),
            ("GW_SECRET", asec.as_str()),
        ];
        python(300, &[&format!("{dir}/s3_refused.py")], &env);
        // Two users: the bucket owner and another.
        let two_env = [
            env[0],
            env[1],
            env[2],
            ("GW_BOB_KEY", bk.as_str()),
            ("GW_BOB_SECRET", bsec.as_str()),
            ("GW_BOB_UID", "bob"),
            ("GW_BOB_EMAIL", "bob@example.com"),
        ];
        python(300, &[&format!("{dir}/s3_tagging.py")], &two_env);
        python(300, &[&format!("{dir}/s3_policy.py")], &two_env);
        python(300, &[&format!("{dir}/s3_lock.py")], &env);
        python(300, &[&format!("{dir}/s3_malformed.py")], &env);
        encrypted_at_rest(&d, &ak, &asec, &endpoint);
        if tool_present("s3cmd") {
            python(300, &[&format!("{dir}/s3cmd_default.py")], &env);
        }
        if tool_present("rclone") {
            python(300, &[&format!("{dir}/rclone_s3.py")], &env);
        }
        enforced_region(&d, &ak, &asec);
    }
    // A sweep taking everything recorded, however young (replaced and
    // deleted data waits for one; a removed bucket's goes with it).
    let swept = json(&d, &["gateway", "sweep", "--stale-write-secs", "0"]);
    assert_eq!(swept["uploads_aborted"], 0, "{swept}");
    let left = d.ok(&["rados", "-p", ".shoal.gateway", "ls"]);
    let data: Vec<&str> = left.lines().filter(|l| l.starts_with("data.")).collect();
    assert!(data.is_empty(), "left behind: {data:?}");
    // A user owning a bucket is not removed (the clients left Bob one);
    // without one it is.
    let me = json(&d, &["gateway", "user", "info", "--uid", "bob"]);
    assert_eq!(me["display_name"], "Bob B.");
    if clients_present() {
        let e = d.run(&["gateway", "user", "rm", "--uid", "bob"]);
        let msg = String::from_utf8_lossy(&e.stderr);
        assert!(msg.contains("user bob owns buckets bobs-bucket"), "{msg}");
    }
    d.ok(&["gateway", "user", "rm", "--uid", "alice"]);
    assert_eq!(
        json(&d, &["gateway", "user", "ls"]),
        serde_json::json!(["bob"])
    );
    drop(gw);
}

/// `shoal dev up` starts a gateway with a user of its own and prints how
/// to reach it; `dev down` stops it with the rest.
#[test]
fn dev_up_starts_a_gateway_and_prints_its_keys() {
    let d = Dev::new("gateway-dev");
    let out = d.ok(&[
        "dev",
        "up",
        "--dir",
        d.dir(),
        "--osds",
        "1",
        "--store",
        "mem",
    ]);
    let endpoint = out
        .split("S3 gateway: ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no gateway in {out}"))
        .trim_end_matches('/')
        .to_string();
    let user: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.0.join("gateway/user.json")).unwrap())
            .unwrap();
    let (k, s) = key(&user);
    assert!(out.contains(&format!("AWS_ACCESS_KEY_ID={k}")), "{out}");
    assert!(out.contains(&format!("AWS_SECRET_ACCESS_KEY={s}")), "{out}");
    if clients_present() {
        let script = "import boto3,os,sys\n\
            c=boto3.client('s3',endpoint_url=os.environ['E'],aws_access_key_id=os.environ['K'],\
            aws_secret_access_key=os.environ['S'],region_name='us-east-1')\n\
            c.create_bucket(Bucket='devbucket')\n\
            c.put_object(Bucket='devbucket',Key='k',Body=b'v')\n\
            assert c.get_object(Bucket='devbucket',Key='k')['Body'].read()==b'v'\n";
        python(
            60,
            &["-c", script],
            &[("E", &endpoint), ("K", &k), ("S", &s)],
        );
    }
    // `shoal bench s3` against it: small objects, then multipart ones; every
    // phase does every operation, the gateway's CPU is read from its pid.
    for (size, count) in [("4K", "40"), ("12M", "2")] {
        let out = d.ok(&[
            "bench",
            "s3",
            "--dev",
            d.dir(),
            "--size",
            size,
            "--count",
            count,
            "--multipart-threshold",
            "10M",
            "--part-size",
            "5M",
            "--format",
            "json",
        ]);
        let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
        let ops: Vec<(&str, u64)> = rows
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["op"].as_str().unwrap(), r["ops"].as_u64().unwrap()))
            .collect();
        let n: u64 = count.parse().unwrap();
        assert_eq!(ops, [("PUT", n), ("GET", n), ("DELETE", n)], "{out}");
        assert!(rows[0]["gateway_cpu_us_per_op"].is_f64(), "{out}");
    }
    let down = d.ok(&["dev", "down", "--dir", d.dir()]);
    // The monitor, the OSD, the gateway and the manager.
    assert!(down.contains("stopped 4 daemons"), "{down}");
}

/// A gateway SIGKILLed while boto3 uploads (single PUTs and multipart):
/// after a restart every acknowledged object reads back whole, nothing
/// half-written is listed, and a sweep then removes what the killed
/// gateway left.
#[test]
fn a_sigkilled_gateway_loses_no_acknowledged_object_and_lists_no_partial_one() {
    if !clients_present() {
        return;
    }
    let d = Dev::new("gateway-kill");
    d.ok(&["dev", "up", "--dir", d.dir(), "--osds", "3", "--no-gateway"]);
    d.ok(&["osd", "pool", "create", ".shoal.gateway", "8"]);
    let user = json(&d, &["gateway", "user", "create", "--uid", "k"]);
    let (k, s) = key(&user);
    let log = d.0.join("acked.txt");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/s3_kill.py");
    let run = |gw: &common::Background, mode: &str| {
        Command::new("timeout")
            .args(["120", "python3", script, mode])
            .env("GW_ENDPOINT", format!("http://{}", gw.addr))
            .env("GW_KEY", &k)
            .env("GW_SECRET", &s)
            .env("GW_LOG", &log)
            .spawn()
            .unwrap()
    };
    let mut gw = gateway(&d);
    let mut writer = run(&gw, "write");
    // Let some uploads complete, then kill the gateway mid-stream.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&log).map_or(0, |l| l.lines().count()) < 4 {
        assert!(std::time::Instant::now() < deadline, "no uploads completed");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let pid = gw.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-9", &pid])
            .status()
            .unwrap()
            .success()
    );
    assert!(writer.wait().unwrap().success());
    let gw2 = gateway(&d);
    drop(std::mem::replace(&mut gw, gw2));
    let mut checker = run(&gw, "check");
    assert!(checker.wait().unwrap().success(), "the check failed");
    let swept = json(
        &d,
        &[
            "gateway",
            "sweep",
            "--stale-write-secs",
            "0",
            "--upload-expiry-secs",
            "0",
        ],
    );
    assert!(swept["writes_removed"].is_u64(), "{swept}");
}

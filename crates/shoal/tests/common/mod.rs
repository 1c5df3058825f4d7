//! What the process-level tests share: a `shoal dev` cluster directory and
//! the `shoal` binary run against it, stopped and removed however the test ends.

#![allow(dead_code, clippy::unwrap_used)] // Each test binary uses part of it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The binary under test.
pub const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");

/// The environment variable whose `KEY=VALUE` words every `shoal dev up`
/// of a test adds as `--set`s: `SHOAL_TEST_SET=ms_mode=secure` runs a
/// suite's clusters, and every command and client against them, in secure
/// mode (`scripts/check` does so for the process tests that matter).
pub const TEST_SET_ENV: &str = "SHOAL_TEST_SET";

/// `args` with the `--set`s of [`TEST_SET_ENV`] in front when they run
/// `dev up`.
pub fn with_test_sets(args: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if args.windows(2).any(|w| w == ["dev", "up"]) {
        for kv in std::env::var(TEST_SET_ENV)
            .unwrap_or_default()
            .split_whitespace()
        {
            out.extend(["--set".to_string(), kv.to_string()]);
        }
    }
    out.extend(args.iter().map(|a| a.to_string()));
    out
}

/// A `shoal dev` cluster directory.
pub struct Dev(pub PathBuf);

impl Dev {
    /// A fresh directory for the test `tag` (nothing started yet).
    pub fn new(tag: &str) -> Dev {
        let dir = std::env::temp_dir().join(format!("shoal-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Dev(dir)
    }

    /// The directory, as an argument.
    pub fn dir(&self) -> &str {
        self.0.to_str().unwrap()
    }

    /// Runs `shoal ARGS` with this cluster's configuration. A command
    /// that runs longer than 90 s is killed, and the test fails
    /// showing the daemons' logs.
    pub fn run(&self, args: &[&str]) -> Output {
        let mut child = Command::new(SHOAL)
            .args(with_test_sets(args))
            .env("SHOAL_CONF", self.0.join("shoal.conf"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (out, err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let read = |mut r: Box<dyn std::io::Read + Send>| {
            std::thread::spawn(move || {
                let mut v = Vec::new();
                let _ = r.read_to_end(&mut v);
                v
            })
        };
        let (out, err) = (read(Box::new(out)), read(Box::new(err)));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                let logs = self.logs(60);
                panic!("shoal {args:?} hung for 90 s; the daemons' logs:\n{logs}");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        Output {
            status,
            stdout: out.join().unwrap(),
            stderr: err.join().unwrap(),
        }
    }

    /// The last `lines` lines of every daemon's log.
    pub fn logs(&self, lines: usize) -> String {
        Command::new(SHOAL)
            .args([
                "dev",
                "logs",
                "--dir",
                self.dir(),
                "--lines",
                &lines.to_string(),
            ])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Waits until `f` holds, at most `secs` seconds, as [`until`] does;
    /// fails the test naming `what`, with the daemons' logs, otherwise.
    pub fn until(&self, what: &str, secs: u64, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !f() {
            if Instant::now() >= deadline {
                panic!(
                    "{what}: not within {secs} s; the daemons' logs:\n{}",
                    self.logs(80)
                );
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Runs `shoal ARGS`, which must succeed; returns its standard output.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "shoal {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `shoal ARGS --format json` and parses the output.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.extend(["--format", "json"]);
        serde_json::from_str(&self.ok(&a)).unwrap()
    }

    /// Runs `shoal ARGS --format json` and decodes it into its typed reply,
    /// checking that the type holds the whole reply: encoded again, it is
    /// the same JSON (no field dropped, renamed or retyped).
    pub fn typed<T: serde::de::DeserializeOwned + serde::Serialize>(&self, args: &[&str]) -> T {
        let raw = self.json(args);
        let t: T = serde_json::from_value(raw.clone())
            .unwrap_or_else(|e| panic!("shoal {args:?}: {e}\n{raw}"));
        assert_eq!(
            serde_json::to_value(&t).unwrap(),
            raw,
            "shoal {args:?}: its type does not hold the whole reply"
        );
        t
    }

    /// SIGKILLs the daemon `name` (`osd.3`) started in this directory.
    /// SIGKILLs the daemon `name` and waits until it is gone (or a zombie),
    /// so its store's lock is free for a daemon started next.
    pub fn kill9(&self, name: &str) {
        let pid = std::fs::read_to_string(self.0.join("run").join(format!("{name}.pid"))).unwrap();
        self.signal(name, "-KILL");
        let stat = PathBuf::from(format!("/proc/{}/stat", pid.trim()));
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match std::fs::read_to_string(&stat) {
                // The state follows the command's closing parenthesis.
                Ok(s)
                    if !s
                        .rsplit(')')
                        .next()
                        .unwrap_or("")
                        .trim_start()
                        .starts_with('Z') =>
                {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => return,
            }
        }
        panic!("{name} (pid {}) still runs 10 s after SIGKILL", pid.trim());
    }

    /// Sends `signal` (`-STOP`, `-CONT`, ...) to the daemon `name`.
    pub fn signal(&self, name: &str, signal: &str) {
        let pid = std::fs::read_to_string(self.0.join("run").join(format!("{name}.pid"))).unwrap();
        let ok = Command::new("kill")
            .args([signal, pid.trim()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {signal} {name}");
    }

    /// Whether every PG is active+clean (false while the monitors do not answer).
    pub fn all_active_clean(&self) -> bool {
        let out = self.run(&["pg", "stat", "--format", "json"]);
        if !out.status.success() {
            return false;
        }
        let v: shoal_monclient::replies::PgStatReply = serde_json::from_slice(&out.stdout).unwrap();
        v.all_active_clean()
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.run(&["dev", "down", "--dir", self.dir(), "--wipe"]);
    }
}

/// Starts `shoal osd --id N` as `shoal dev` does (own process group, log,
/// pid file), so `dev down` stops it.
pub fn start_osd(d: &Dev, id: u32) {
    use std::os::unix::process::CommandExt;
    let name = format!("osd.{id}");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(d.0.join("out").join(format!("{name}.log")))
        .unwrap();
    let child = Command::new(SHOAL)
        .args(["--conf", d.0.join("shoal.conf").to_str().unwrap()])
        .args(["osd", "--id", &id.to_string()])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .process_group(0)
        .spawn()
        .unwrap();
    std::fs::write(
        d.0.join("run").join(format!("{name}.pid")),
        child.id().to_string(),
    )
    .unwrap();
    std::mem::forget(child);
}

/// A server process (`shoal nbd serve`, `shoal gateway`) started on a free
/// loopback port, whose first line of output names its address as
/// `SCHEME://ADDR/`; stopped as `kill` would when dropped (killed if it
/// does not stop within 10 s).
pub struct Background {
    pub child: std::process::Child,
    pub addr: String,
}

impl Background {
    pub fn start(d: &Dev, args: &[&str], scheme: &str) -> Background {
        use std::io::BufRead;
        let mut child = Command::new(SHOAL)
            .args(args)
            .env("SHOAL_CONF", d.0.join("shoal.conf"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .split(&format!("{scheme}://"))
            .nth(1)
            .and_then(|r| r.split('/').next())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_string();
        Background { child, addr }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A self-signed certificate for 127.0.0.1 and its key, made by openssl
/// in `dir` (as `ca-cert.pem`, the name libnbd looks for in a
/// `tls-certificates` directory, and `key.pem`): (certificate, key).
pub fn self_signed(dir: &std::path::Path) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let (cert, key) = (dir.join("ca-cert.pem"), dir.join("key.pem"));
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

/// `GET path` on `addr` over HTTP/1.1 (std only): (status, head, body);
/// status 0 when nothing listens.
pub fn http_get(addr: &str, path: &str) -> (u16, String, String) {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return (0, String::new(), String::new());
    };
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return (0, String::new(), String::new());
    }
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

/// Waits until `f` holds, at most `secs` seconds, asking every 300 ms;
/// fails the test naming `what` otherwise.
pub fn until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {secs} s"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

impl Dev {
    /// `shoal dev up` with three OSDs on memory stores, and `extra`
    /// arguments (`--set`s, `--no-gateway`).
    pub fn up_mem(&self, extra: &[&str]) {
        let mut args = vec![
            "dev",
            "up",
            "--dir",
            self.dir(),
            "--osds",
            "3",
            "--store",
            "mem",
        ];
        args.extend(extra);
        self.ok(&args);
    }

    /// The address a `dev up` daemon recorded (`mgr.x`, `gateway`).
    pub fn addr_of(&self, daemon: &str) -> String {
        std::fs::read_to_string(self.0.join(daemon).join("addr"))
            .unwrap()
            .trim()
            .to_string()
    }
}

/// Runs `python3 ARGS` (a script and its arguments, or `-c CODE`) with
/// `env`, killed after `secs`; it must succeed. Returns its output.
pub fn python(secs: u64, args: &[&str], env: &[(&str, &str)]) -> Output {
    let out = Command::new("timeout")
        .arg(secs.to_string())
        .arg("python3")
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python3 {args:?}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Whether `path` is a mount point now.
pub fn mounted(path: &Path) -> bool {
    std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(path.to_str().unwrap()))
}

/// A `shoal fs mount` process; unmounted (lazily, if it died) when dropped.
pub struct Mount {
    /// The `shoal fs mount` process.
    pub child: Child,
    /// Where it is mounted.
    pub path: PathBuf,
}

impl Mount {
    pub fn new(d: &Dev, name: &str) -> Mount {
        Mount::of_fs(d, name, None)
    }

    pub fn of_fs(d: &Dev, name: &str, fs: Option<&str>) -> Mount {
        let path = d.0.join(name);
        std::fs::create_dir_all(&path).unwrap();
        let log = std::fs::File::create(d.0.join(format!("{name}.log"))).unwrap();
        let child = Command::new(SHOAL)
            .args(["fs", "mount"])
            .args(fs.map(|f| vec!["--fs", f]).unwrap_or_default())
            .arg(&path)
            .env("SHOAL_CONF", d.0.join("shoal.conf"))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let m = Mount { child, path };
        until(&format!("{name} mounted"), 30, || mounted(&m.path));
        m
    }

    pub fn p(&self, rel: &str) -> PathBuf {
        self.path.join(rel)
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if mounted(&self.path) {
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
    }
}

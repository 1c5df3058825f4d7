//! What the process-level tests share: a `shoal dev` cluster directory and
//! the `shoal` binary run against it, stopped and removed however the test ends.

#![allow(dead_code, clippy::unwrap_used)] // Each test binary uses part of it.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

/// The binary under test.
pub const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");

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

    /// Runs `shoal ARGS` with this cluster's configuration.
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new(SHOAL)
            .args(args)
            .env("SHOAL_CONF", self.0.join("shoal.conf"))
            .output()
            .unwrap()
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
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.run(&["dev", "down", "--dir", self.dir(), "--wipe"]);
    }
}

//! The README's Quick start, run literally: the commands of its first `sh`
//! block (all but the `cargo install` line: the binary under test stands in
//! for the installed one) in a clean directory, with this build's `shoal`
//! first on PATH. Whatever happens, the dev cluster is stopped at the end.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::path::PathBuf;
use std::process::Command;

const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");

/// The lines of the first ```sh block after "## Quick start".
fn quick_start() -> Vec<String> {
    let readme = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let text = std::fs::read_to_string(&readme).unwrap();
    let section = &text[text.find("## Quick start").expect("a Quick start section")..];
    let start = section.find("```sh\n").expect("an sh block") + "```sh\n".len();
    let end = start + section[start..].find("```").unwrap();
    section[start..end].lines().map(str::to_string).collect()
}

struct Clean(PathBuf);

impl Drop for Clean {
    fn drop(&mut self) {
        let _ = Command::new(SHOAL)
            .args(["dev", "down", "--dir"])
            .arg(self.0.join("shoal-dev"))
            .arg("--wipe")
            .output();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_quick_start_works_as_written() {
    let lines = quick_start();
    assert!(lines[0].starts_with("cargo install"), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.starts_with("shoal dev up")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("shoal bench")),
        "{lines:?}"
    );
    let dir = std::env::temp_dir().join(format!("shoal-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let _clean = Clean(dir.clone());
    let script = format!("set -euxo pipefail\n{}\n", lines[1..].join("\n"));
    let bin_dir = PathBuf::from(SHOAL).parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(&dir)
        .env("PATH", path)
        .env_remove("SHOAL_CONF")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "quick start failed\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("hello\n"),
        "the get printed the object\n{stdout}"
    );
    assert!(
        stdout.contains("Bandwidth (MB/sec)"),
        "the bench summary\n{stdout}"
    );
}

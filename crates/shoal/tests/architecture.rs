//! The map is the territory: every source path ARCHITECTURE.md names
//! exists. Paths from the repository's root (`crates/gateway/src/s3.rs`,
//! `docs/fs.md`, `bench/upgrade.sh`) must exist as written; a file named in
//! a crate's entry of the code map (`block/journal.rs` under
//! `objectstore/`) must exist somewhere under that crate.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Every file below `dir`, as paths relative to the repository's root.
fn files(dir: &Path, root: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if name == "target" || name.starts_with('.') {
            continue;
        }
        if p.is_dir() {
            files(&p, root, out);
        } else if let Ok(rel) = p.strip_prefix(root) {
            out.push(rel.to_string_lossy().into_owned());
        }
    }
}

/// The path-like words of `line`: runs of letters, digits, `_`, `-`, `.`,
/// `/`, `@` and `*` that end in a file extension of the sources.
fn paths(line: &str) -> Vec<String> {
    const EXT: [&str; 7] = [".rs", ".md", ".sh", ".py", ".toml", ".js", ".service"];
    line.split(|c: char| !(c.is_alphanumeric() || "_-./@*".contains(c)))
        .map(|w| w.trim_end_matches('.'))
        // Not `cmd/<subcommand>.rs`'s bare `.rs`, nor `../shared/` (outside).
        .filter(|w| {
            EXT.iter().any(|e| w.ends_with(e) && w.len() > e.len())
                && !w.contains('*')
                && !w.starts_with("..")
        })
        .map(str::to_string)
        .collect()
}

const TOP: [&str; 9] = [
    "crates/",
    "docs/",
    "bench/",
    "scripts/",
    "deploy/",
    "packaging/",
    "sim/",
    "fuzz/",
    ".ci/",
];

#[test]
fn every_path_architecture_names_exists() {
    let root = root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let mut all = Vec::new();
    files(&root, &root, &mut all);
    all.push(".ci/run".into());
    let mut missing = Vec::new();
    // The code map's current entry: `  gateway/` under `crates/`, or a
    // top-level directory (`sim/`, `bench/`).
    let mut under: Option<String> = None;
    let mut in_crates = false;
    let mut in_block = false;
    for line in text.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            under = None;
            in_crates = false;
            continue;
        }
        if in_block {
            if line.starts_with("crates/") {
                in_crates = true;
            } else if let Some(first) = line.split_whitespace().next()
                && first.ends_with('/')
                && !line.starts_with(' ')
            {
                in_crates = false;
                under = Some(first.to_string());
            }
            if in_crates
                && line.starts_with("  ")
                && !line.starts_with("   ")
                && let Some(first) = line.split_whitespace().next()
                && first.ends_with('/')
            {
                under = Some(format!("crates/{first}"));
            }
        }
        for p in paths(line) {
            let rooted =
                TOP.iter().any(|t| p.starts_with(t)) || p == "README.md" || p == "ARCHITECTURE.md";
            let found = if rooted {
                all.contains(&p)
            } else if let (true, Some(dir)) = (in_block, &under) {
                all.iter()
                    .any(|f| f.starts_with(dir.as_str()) && f.ends_with(&format!("/{p}")))
            } else {
                // A bare file name in prose: it must exist somewhere.
                all.iter().any(|f| f.ends_with(&format!("/{p}")) || *f == p)
            };
            if !found {
                missing.push(format!("{p} (under {})", under.as_deref().unwrap_or("/")));
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist:\n{}",
        missing.join("\n")
    );
}

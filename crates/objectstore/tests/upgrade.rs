//! Stores written by earlier builds open with this one, with nothing lost.
//!
//! `tests/fixtures/blockstore-v<N>.tar.gz` is a BlockStore of on-disk
//! format version N, written by the build that had that format (by the
//! ignored test `make_fixture` below) and closed as an OSD stopping
//! closes it. Its contents are [`fixture_txns`]: collections of replicated
//! and erasure-coded PGs, objects small and large, sparse, overwritten,
//! truncated, zeroed, renamed and removed, with xattrs, omap keys and
//! headers, and snapshot clones. Every fixture must open with this build
//! (converted in place, or read as it is), hold exactly what the
//! transactions made, pass a deep fsck, and take writes after.
//!
//! `blockstore-v<N>-journal` holds the same, but as a machine that lost
//! power right after the last transaction was acknowledged leaves it (by
//! `make_journal_fixture`): its journal's records are not yet checkpointed,
//! so opening it replays them with the old format's journal layout before
//! the store is converted.
//!
//! When the format changes: first run `make_fixture` and
//! `make_journal_fixture` with the build *before* the change (they write
//! the fixtures of the format that build has), commit them, then change the
//! format and add their names to [`FIXTURES`]. Never change
//! [`fixture_txns`]: it describes the fixtures already committed.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use bytes::Bytes;
use shoal_objectstore::block::{MkfsOptions, OpenOptions};
use shoal_objectstore::model::Model;
use shoal_objectstore::{
    BlockStore, CollectionId, ObjectKey, ObjectStore, Transaction, testsuite, tool,
};

/// The fixtures every build must open.
const FIXTURES: [&str; 2] = ["blockstore-v3", "blockstore-v3-journal"];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A fresh directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("shoal-upgrade-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `len` bytes that differ with `seed` and position.
fn bytes(seed: u8, len: usize) -> Bytes {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ seed)
        .collect::<Vec<u8>>()
        .into()
}

fn key(name: &str, hash: u32) -> ObjectKey {
    ObjectKey::new(hash, name.as_bytes().to_vec())
}

/// What every fixture holds. Never change it (see the module doc).
fn fixture_txns() -> Vec<Transaction> {
    let rep = CollectionId {
        pool: 1,
        seed: 0,
        shard: CollectionId::NO_SHARD,
    };
    let ec = CollectionId {
        pool: 2,
        seed: 3,
        shard: 1,
    };
    let gone = CollectionId {
        pool: 3,
        seed: 1,
        shard: CollectionId::NO_SHARD,
    };
    let mut out = Vec::new();
    let mut t = Transaction::new();
    t.create_collection(rep)
        .create_collection(ec)
        .create_collection(gone);
    out.push(t);

    // Small writes (the journal's deferred path), large ones (written in
    // place), unaligned and sparse ones.
    let mut t = Transaction::new();
    t.write(rep, key("small", 0x11), 0, bytes(1, 4096))
        .write(rep, key("big", 0x22), 0, bytes(2, 1 << 20))
        .write(rep, key("unaligned", 0x33), 777, bytes(3, 1000))
        .write(rep, key("sparse", 0x44), 3 << 20, bytes(4, 64 << 10))
        .write(ec, key("shard", 0x55), 0, bytes(5, 256 << 10));
    out.push(t);
    let mut t = Transaction::new();
    t.write(rep, key("big", 0x22), 300_000, bytes(6, 8192))
        .write(rep, key("small", 0x11), 100, bytes(7, 10));
    out.push(t);

    // Xattrs, omap keys and a header (a PG log's shape: many small keys).
    let mut t = Transaction::new();
    t.set_xattr(rep, key("big", 0x22), "_", bytes(8, 300))
        .set_xattr(rep, key("big", 0x22), "snapset", bytes(9, 40))
        .set_xattr(ec, key("shard", 0x55), "hinfo_key", bytes(10, 64));
    let log: BTreeMap<Bytes, Bytes> = (0..200u32)
        .map(|i| {
            (
                Bytes::from(format!("0000000012.{i:020}")),
                bytes(i as u8, 180),
            )
        })
        .collect();
    t.touch(rep, key("pglog", 0x66))
        .omap_set_keys(rep, key("pglog", 0x66), log)
        .omap_set_header(rep, key("pglog", 0x66), bytes(11, 96));
    out.push(t);
    let mut t = Transaction::new();
    t.omap_remove_range(
        rep,
        key("pglog", 0x66),
        Bytes::from("0000000012.00000000000000000000"),
        Bytes::from("0000000012.00000000000000000050"),
    );
    out.push(t);

    // A snapshot: the head cloned for snap 5, then the head overwritten.
    let mut t = Transaction::new();
    t.clone_object(rep, key("big", 0x22), key("big", 0x22).clone_for(5))
        .write(rep, key("big", 0x22), 4096, bytes(12, 4096))
        .clone_range(rep, key("small", 0x11), key("ranged", 0x77), 0, 2048, 512);
    out.push(t);

    // Truncates, zeroes, a rename, removals.
    let mut t = Transaction::new();
    t.truncate(rep, key("sparse", 0x44), (3 << 20) + 1000)
        .zero(rep, key("big", 0x22), 500_000, 20_000)
        .rename(rep, key("unaligned", 0x33), key("renamed", 0x33))
        .write(gone, key("doomed", 0x88), 0, bytes(13, 4096));
    out.push(t);
    let mut t = Transaction::new();
    t.remove(gone, key("doomed", 0x88))
        .remove_collection(gone)
        .remove_xattr(rep, key("big", 0x22), "snapset");
    out.push(t);
    out
}

/// The store `txns` make, by the model.
fn expected() -> Model {
    let mut m = Model::default();
    for t in fixture_txns() {
        assert!(m.apply(&t), "a fixture transaction is invalid");
    }
    m
}

fn untar(fixture: &str, into: &Path) {
    let archive = fixtures().join(format!("{fixture}.tar.gz"));
    let ok = Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(into)
        .status()
        .unwrap()
        .success();
    assert!(ok, "unpacking {}", archive.display());
}

#[test]
fn stores_of_earlier_formats_open_intact_and_take_writes() {
    let want = expected();
    for fixture in FIXTURES {
        let dir = TempDir::new(fixture);
        untar(fixture, &dir.0);
        let store = dir.0.join("store");
        let report = tool::fsck(&store, true).unwrap();
        assert!(report.is_clean(), "{fixture} before opening: {report}");
        let old: u64 = fixture
            .trim_start_matches("blockstore-v")
            .trim_end_matches("-journal")
            .parse()
            .unwrap();
        let stat = tool::stat(&store).unwrap();
        assert_eq!(stat.format_version, old, "{fixture}");
        if fixture.ends_with("-journal") {
            assert!(stat.journal_records > 0, "{fixture}: nothing to replay");
        }

        let s = BlockStore::open(&store, &OpenOptions::default()).unwrap();
        testsuite::assert_matches_model(&s, &want, fixture);
        // It takes writes, and keeps them across a reopen.
        let mut more = want.clone();
        let rep = CollectionId {
            pool: 1,
            seed: 0,
            shard: CollectionId::NO_SHARD,
        };
        let mut t = Transaction::new();
        t.write(rep, key("after", 0x99), 0, bytes(14, 8192)).write(
            rep,
            key("big", 0x22),
            0,
            bytes(15, 4096),
        );
        assert!(more.apply(&t));
        s.queue_transaction(t).unwrap().wait().unwrap();
        drop(s);
        let s = BlockStore::open(&store, &OpenOptions::default()).unwrap();
        testsuite::assert_matches_model(&s, &more, &format!("{fixture}, written and reopened"));
        drop(s);
        let report = tool::fsck(&store, true).unwrap();
        assert!(report.is_clean(), "{fixture} after: {report}");
        // Converted to the format of a store this build makes.
        let fresh = dir.0.join("fresh");
        BlockStore::mkfs(
            &fresh,
            &MkfsOptions {
                data_bytes: 16 << 20,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            tool::stat(&store).unwrap().format_version,
            tool::stat(&fresh).unwrap().format_version,
            "{fixture} converted"
        );
    }
}

/// Writes the fixture of this build's format as
/// `tests/fixtures/blockstore-v<N>.tar.gz`.
#[test]
#[ignore = "writes a fixture: run by hand before changing the on-disk format"]
fn make_fixture() {
    let dir = TempDir::new("make");
    let store = dir.0.join("store");
    BlockStore::mkfs(
        &store,
        &MkfsOptions {
            data_bytes: 16 << 20,
            ..Default::default()
        },
    )
    .unwrap();
    let s = BlockStore::open(&store, &OpenOptions::default()).unwrap();
    for t in fixture_txns() {
        s.queue_transaction(t).unwrap().wait().unwrap();
    }
    testsuite::assert_matches_model(&s, &expected(), "as written");
    drop(s);
    pack(&dir.0, "");
}

/// Archive `within/store` as the fixture of its format, `suffix` after the version.
fn pack(within: &Path, suffix: &str) {
    let format = tool::stat(&within.join("store")).unwrap().format_version;
    std::fs::create_dir_all(fixtures()).unwrap();
    let archive = fixtures().join(format!("blockstore-v{format}{suffix}.tar.gz"));
    let ok = Command::new("tar")
        .arg("-czSf")
        .arg(&archive)
        .arg("-C")
        .arg(within)
        .arg("store")
        .status()
        .unwrap()
        .success();
    assert!(ok);
    eprintln!("wrote {}", archive.display());
}

/// Writes `tests/fixtures/blockstore-v<N>-journal.tar.gz`: the fixture's
/// transactions, each acknowledged, then a power loss (fault-injecting
/// devices stop taking writes; the files are what the disks kept).
#[test]
#[ignore = "writes a fixture: run by hand before changing the on-disk format"]
fn make_journal_fixture() {
    use shoal_objectstore::block::fault::{FaultController, MemDevice};
    use shoal_objectstore::model::Rng;
    let dir = TempDir::new("make-journal");
    let store = dir.0.join("store");
    std::fs::create_dir_all(&store).unwrap();
    let ctl = FaultController::new(0, 0);
    let data = MemDevice::new(vec![0u8; 16 << 20], ctl.clone());
    let meta = MemDevice::new(Vec::new(), ctl.clone());
    BlockStore::mkfs_on(data.clone(), meta.clone()).unwrap();
    let s = BlockStore::open_on(data.clone(), meta.clone()).unwrap();
    for t in fixture_txns() {
        s.queue_transaction(t).unwrap().wait().unwrap();
    }
    ctl.stop();
    let mut rng = Rng::new(7);
    std::fs::write(store.join("block"), data.crash_image(&mut rng)).unwrap();
    std::fs::write(store.join("meta.redb"), meta.crash_image(&mut rng)).unwrap();
    drop(s);
    let report = tool::fsck(&store, true).unwrap();
    assert!(report.is_clean(), "{report}");
    assert!(report.journal_records > 0, "nothing left in the journal");
    pack(&dir.0, "-journal");
}

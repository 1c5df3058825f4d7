//! Damaged store directories: every way of opening a store (`BlockStore::open`,
//! `tool::fsck`, `tool::fsck --deep`, `tool::stat`) meets each damage of `meta.redb` and
//! of `block` with an error that names the damaged file, never a panic, and leaves both
//! files byte for byte as they were. Also: stores of another owner, and the lock.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use bytes::Bytes;
use shoal_objectstore::block::{
    DATA_FILE, META_FILE, MkfsOptions, OpenOptions, StoreIdentity, store_paths,
};
use shoal_objectstore::{
    BlockStore, CollectionId, Error, ObjectKey, ObjectStore, Transaction, tool,
};

/// A fresh directory under the temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!("shoal-dmg-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Blocks of the template store's data file (label included).
const TOTAL_BLOCKS: u64 = 40;

/// A small store whose data blocks are all used by objects except blocks 9-10 (1-8 are
/// the journal, empty after a clean close), so that
/// damage in the middle or at the end of the data file lands in checksummed data. Built
/// once; each case copies it.
fn template() -> &'static (Vec<u8>, Vec<u8>) {
    static T: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
    T.get_or_init(|| {
        let d = TempDir::new("template");
        BlockStore::mkfs(
            &d.0,
            &MkfsOptions {
                data_bytes: TOTAL_BLOCKS * 4096,
                ..Default::default()
            },
        )
        .unwrap();
        let s = BlockStore::open(&d.0, &OpenOptions::default()).unwrap();
        let c = CollectionId::new(1, 0);
        let put = |name: &str, blocks: usize| {
            let o = ObjectKey::new(name.len() as u32, name);
            let data: Vec<u8> = (0..blocks * 4096).map(|j| (j % 251) as u8).collect();
            let mut t = Transaction::new();
            t.write(c, o.clone(), 0, Bytes::from(data));
            t.omap_set_keys(
                c,
                o,
                [(Bytes::from_static(b"k"), Bytes::from_static(b"v"))].into(),
            );
            s.queue_transaction(t).unwrap();
            s.flush().unwrap();
        };
        let mut t = Transaction::new();
        t.create_collection(c);
        s.queue_transaction(t).unwrap();
        // First fit: the filler takes blocks 9-10, a and b 11-30; once the filler is gone
        // the last object fits only in 31-39, the end of the file.
        put("filler", 2);
        put("a", 10);
        put("b", 10);
        let mut t = Transaction::new();
        t.remove(c, ObjectKey::new(6, "filler"));
        s.queue_transaction(t).unwrap();
        s.flush().unwrap();
        put("last", 9);
        drop(s);
        let (data, meta) = store_paths(&d.0);
        (std::fs::read(data).unwrap(), std::fs::read(meta).unwrap())
    })
}

fn store_from_template(tag: &str) -> TempDir {
    let d = TempDir::new(tag);
    std::fs::create_dir_all(&d.0).unwrap();
    let (data, meta) = template();
    let (dp, mp) = store_paths(&d.0);
    std::fs::write(dp, data).unwrap();
    std::fs::write(mp, meta).unwrap();
    d
}

/// How a file is damaged.
#[derive(Debug, Clone, Copy)]
enum Damage {
    Missing,
    Empty,
    OneByte,
    Third,
    OneShort,
    GarbageStart,
    GarbageMiddle,
    GarbageEnd,
    /// Garbage over the metadata pages that hold a given key.
    GarbageAt(&'static [u8]),
    OtherVersion,
}

const DAMAGES: [Damage; 11] = [
    Damage::Missing,
    Damage::Empty,
    Damage::OneByte,
    Damage::Third,
    Damage::OneShort,
    Damage::GarbageStart,
    Damage::GarbageMiddle,
    Damage::GarbageEnd,
    Damage::GarbageAt(b"total_blocks"),
    Damage::GarbageAt(b"last"),
    Damage::OtherVersion,
];

/// Deterministic garbage (xorshift).
fn garbage(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

const GARBAGE_BYTES: usize = 512;

fn damage(dir: &Path, file: &str, how: Damage) {
    let path = dir.join(file);
    let mut bytes = std::fs::read(&path).unwrap();
    let len = bytes.len();
    let splat = |bytes: &mut Vec<u8>, at: usize| {
        bytes[at..at + GARBAGE_BYTES].copy_from_slice(&garbage(at as u64 + 7, GARBAGE_BYTES));
    };
    match how {
        Damage::Missing => {
            std::fs::remove_file(&path).unwrap();
            return;
        }
        Damage::Empty => bytes.clear(),
        Damage::OneByte => bytes.truncate(1),
        Damage::Third => bytes.truncate(len / 3),
        Damage::OneShort => bytes.truncate(len - 1),
        Damage::GarbageStart => splat(&mut bytes, 0),
        Damage::GarbageMiddle => splat(&mut bytes, len / 2),
        Damage::GarbageEnd => splat(&mut bytes, len - GARBAGE_BYTES),
        Damage::GarbageAt(key) => {
            // Every page that holds the key (redb keeps older copies of a page until it
            // reuses them, and which copy is live depends on the commits' history).
            let hits: Vec<usize> = bytes
                .windows(key.len())
                .enumerate()
                .filter(|(_, w)| *w == key)
                .map(|(i, _)| i)
                .collect();
            let hits = if hits.is_empty() { vec![len / 2] } else { hits };
            for at in hits {
                // Cover the key and what follows it in its page.
                splat(&mut bytes, at.saturating_sub(64).min(len - GARBAGE_BYTES));
            }
        }
        Damage::OtherVersion if file == META_FILE => {
            // The format record says version 1: a store from before object keys
            // carried snapshot ids and collections shards.
            let db = redb::Database::open(&path).unwrap();
            let w = db.begin_write().unwrap();
            {
                let def: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("super");
                let mut t = w.open_table(def).unwrap();
                t.insert(&b"format"[..], &1u64.to_be_bytes()[..]).unwrap();
            }
            w.commit().unwrap();
            return;
        }
        Damage::OtherVersion => {
            // A well-formed label of version 1 (the older layout).
            bytes[16..24].copy_from_slice(&1u64.to_be_bytes());
            let crc = crc32c::crc32c(&bytes[..32]);
            bytes[32..36].copy_from_slice(&crc.to_be_bytes());
        }
    }
    std::fs::write(&path, bytes).unwrap();
}

/// Both files' bytes (None when missing).
fn snapshot(dir: &Path) -> [Option<Vec<u8>>; 2] {
    [
        std::fs::read(dir.join(DATA_FILE)).ok(),
        std::fs::read(dir.join(META_FILE)).ok(),
    ]
}

/// The ways a store is opened, each reduced to Ok or the error it returns.
const OPENERS: [&str; 4] = ["open", "fsck", "fsck --deep", "stat"];

fn run_opener(name: &str, dir: &Path) -> Result<(), String> {
    // An fsck report listing problems fails too: `shoal store fsck` exits non-zero on it.
    let fsck = |deep| {
        tool::fsck(dir, deep).map(|r| {
            if r.is_clean() {
                Ok(())
            } else {
                Err(r.errors.join("; "))
            }
        })
    };
    let r = match name {
        "open" => BlockStore::open(dir, &OpenOptions::default()).map(|_| Ok(())),
        "fsck" => fsck(false),
        "fsck --deep" => fsck(true),
        "stat" => tool::stat(dir).map(|_| Ok(())),
        _ => unreachable!(),
    };
    r.map_err(|e| e.to_string())?
}

/// What opening a damaged store must give.
#[derive(Debug, PartialEq, Eq)]
enum Want {
    /// An error naming the damaged file.
    ErrorNaming,
    /// The bytes hit space the format does not use (free redb pages): nothing is wrong.
    Clean,
    /// The bytes hit object data: only reading it (deep fsck) can tell, by checksum.
    ChecksumOnRead,
}

fn want(file: &str, how: Damage, opener: &str) -> Want {
    match (file, how) {
        // redb's file is mostly preallocated free pages; the middle and the end of the
        // template's file are among them (the test below shows nothing reads them).
        (META_FILE, Damage::GarbageMiddle | Damage::GarbageEnd) => Want::Clean,
        (DATA_FILE, Damage::GarbageMiddle | Damage::GarbageEnd) if opener == "fsck --deep" => {
            Want::ChecksumOnRead
        }
        (DATA_FILE, Damage::GarbageMiddle | Damage::GarbageEnd) => Want::Clean,
        _ => Want::ErrorNaming,
    }
}

#[test]
fn every_damage_gives_an_error_naming_the_file_and_changes_nothing() {
    for file in [META_FILE, DATA_FILE] {
        for (i, how) in DAMAGES.into_iter().enumerate() {
            if matches!(how, Damage::GarbageAt(_)) && file == DATA_FILE {
                continue;
            }
            let d = store_from_template(&format!("{file}-{i}"));
            damage(&d.0, file, how);
            let before = snapshot(&d.0);
            let path = d.0.join(file).display().to_string();
            for opener in OPENERS {
                let case = format!("{file} {how:?} {opener}");
                let outcome = std::panic::catch_unwind(|| run_opener(opener, &d.0))
                    .unwrap_or_else(|_| panic!("{case}: panicked"));
                match (want(file, how, opener), outcome) {
                    (Want::ErrorNaming, Err(e)) => {
                        assert!(
                            e.contains(&path),
                            "{case}: error does not name the file: {e}"
                        );
                        assert!(!e.contains('\n'), "{case}: not one paragraph: {e}");
                    }
                    (Want::Clean, Ok(())) => {}
                    (Want::ChecksumOnRead, Err(e)) => {
                        assert!(e.contains("checksum mismatch"), "{case}: {e}");
                        assert!(e.contains("data file"), "{case}: {e}");
                    }
                    (w, got) => panic!("{case}: wanted {w:?}, got {got:?}"),
                }
                assert_eq!(snapshot(&d.0), before, "{case}: the files changed");
            }
        }
    }
}

#[test]
fn a_truncated_metadata_file_is_refused_before_redb_asserts() {
    // The report: both files cut to a third made `fsck` panic inside redb.
    let d = store_from_template("both-third");
    damage(&d.0, META_FILE, Damage::Third);
    damage(&d.0, DATA_FILE, Damage::Third);
    let before = snapshot(&d.0);
    let e = tool::fsck(&d.0, false).unwrap_err();
    assert!(matches!(e, Error::Damaged { .. }), "{e:?}");
    assert!(e.to_string().contains("meta.redb"), "{e}");
    assert!(e.to_string().contains("truncated"), "{e}");
    assert_eq!(snapshot(&d.0), before);
}

#[test]
fn a_store_of_the_older_format_is_refused_saying_which_versions() {
    // Format 1 had no snapshot id in object keys and no shard in collections.
    for file in [DATA_FILE, META_FILE] {
        let d = store_from_template("older");
        damage(&d.0, file, Damage::OtherVersion);
        let before = snapshot(&d.0);
        let e = BlockStore::open(&d.0, &OpenOptions::default()).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("version 1") && m.contains("versions 3 to 4"),
            "{file}: {m}"
        );
        assert_eq!(snapshot(&d.0), before);
    }
}

#[test]
fn a_healthy_store_opens_and_checks_clean_without_changing_a_byte_in_the_tools() {
    let d = store_from_template("healthy");
    let before = snapshot(&d.0);
    assert!(tool::fsck(&d.0, true).unwrap().is_clean());
    let st = tool::stat(&d.0).unwrap();
    assert_eq!(st.objects, 3);
    assert_eq!(snapshot(&d.0), before, "fsck and stat only read");
    let s = BlockStore::open(&d.0, &OpenOptions::default()).unwrap();
    let c = CollectionId::new(1, 0);
    let got = s.read(&c, &ObjectKey::new(4, "last"), 0, 4096).unwrap();
    assert_eq!(got.len(), 4096);
}

#[test]
fn a_store_of_another_osd_or_cluster_is_refused() {
    let d = store_from_template("identity");
    let mine = StoreIdentity {
        fsid: "00000000-0000-4000-8000-000000000001".into(),
        osd_id: 3,
    };
    {
        let s = BlockStore::open(&d.0, &OpenOptions::default()).unwrap();
        s.set_identity(&mine).unwrap();
        let other = StoreIdentity {
            osd_id: 4,
            ..mine.clone()
        };
        assert!(
            s.set_identity(&other).is_err(),
            "an owner is never replaced"
        );
    }
    let open_as = |id: &StoreIdentity| {
        BlockStore::open(
            &d.0,
            &OpenOptions {
                identity: Some(id.clone()),
                ..OpenOptions::default()
            },
        )
    };
    let s = open_as(&mine).unwrap();
    assert_eq!(s.identity(), Some(mine.clone()));
    drop(s);
    let before = snapshot(&d.0);
    for other in [
        StoreIdentity {
            osd_id: 4,
            ..mine.clone()
        },
        StoreIdentity {
            fsid: "00000000-0000-4000-8000-000000000002".into(),
            ..mine.clone()
        },
    ] {
        let e = open_as(&other).unwrap_err().to_string();
        assert!(e.contains("meta.redb"), "{e}");
        assert!(e.contains("belongs to osd.3 of cluster"), "{e}");
    }
    assert_eq!(snapshot(&d.0), before);
    // A store without an owner is not an OSD's store.
    let bare = store_from_template("bare");
    let e = BlockStore::open(
        &bare.0,
        &OpenOptions {
            identity: Some(mine),
            ..OpenOptions::default()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("records no owner"), "{e}");
}

#[test]
fn a_store_in_use_is_refused_by_a_second_opener() {
    let d = store_from_template("lock");
    let s = BlockStore::open(&d.0, &OpenOptions::default()).unwrap();
    for e in [
        BlockStore::open(&d.0, &OpenOptions::default()).map(drop),
        tool::fsck(&d.0, false).map(drop),
        tool::stat(&d.0).map(drop),
    ] {
        let e = e.unwrap_err();
        assert!(matches!(e, Error::Locked { .. }), "{e:?}");
        assert!(e.to_string().contains("in use by another process"), "{e}");
    }
    drop(s);
    // Released with the store; the read-only tools share the lock with each other.
    let s = tool::stat(&d.0).unwrap();
    assert_eq!(s.objects, 3);
    BlockStore::open(&d.0, &OpenOptions::default()).unwrap();
}

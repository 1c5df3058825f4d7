//! `shoal store`: make, check and inspect an OSD's BlockStore.

use std::io::Write;
use std::path::PathBuf;

use anyhow::bail;
use clap::Subcommand;
use shoal_objectstore::block::{MkfsOptions, OpenOptions};
use shoal_objectstore::{BlockStore, ObjectStore, tool};

/// Object store commands.
#[derive(Debug, Subcommand)]
pub enum StoreCmd {
    /// Format a new BlockStore in PATH (refuses an existing store).
    Mkfs {
        /// The store's directory.
        path: PathBuf,
        /// Size of the data file, e.g. 1G, 512M (default 1G).
        #[arg(long, default_value = "1G")]
        size: String,
        /// Reserve the data file's space now (fallocate) instead of leaving it sparse.
        #[arg(long)]
        preallocate: bool,
    },
    /// Check every metadata cross-reference (and with --deep every block
    /// checksum); exits non-zero when anything is wrong.
    Fsck {
        /// The store's directory.
        path: PathBuf,
        /// Also read every data block and verify its crc32c.
        #[arg(long)]
        deep: bool,
    },
    /// Capacity, usage and counts.
    Stat {
        /// The store's directory.
        path: PathBuf,
    },
    /// Every object, one line each: collection, name, size and crc32c of its
    /// data and of its xattrs and omap, to compare replicas of a PG.
    /// (Objects whose name starts with NUL, the OSD's own, are skipped.)
    Ls {
        /// The store's directory.
        path: PathBuf,
    },
}

/// Runs one `shoal store` subcommand.
pub fn run(cmd: StoreCmd) -> anyhow::Result<()> {
    match cmd {
        StoreCmd::Mkfs {
            path,
            size,
            preallocate,
        } => {
            let opts = MkfsOptions {
                data_bytes: super::units::parse_size(&size, 1)?,
                preallocate,
            };
            outln!("{}", tool::mkfs(&path, &opts)?);
        }
        StoreCmd::Fsck { path, deep } => {
            let report = tool::fsck(&path, deep)?;
            outln!("{report}");
            if !report.is_clean() {
                bail!(
                    "{} problems found in {}",
                    report.errors.len(),
                    path.display()
                );
            }
        }
        StoreCmd::Stat { path } => outln!("{}", tool::stat(&path)?),
        StoreCmd::Ls { path } => {
            let store = BlockStore::open(&path, &OpenOptions::default())?;
            let mut out = crate::cmd::out::Stdout::new();
            list_checksums(&store, &mut out)?;
        }
    }
    Ok(())
}

/// Writes one line per object of `store`: `pool.seed name size data_crc meta_crc`.
pub fn list_checksums(store: &dyn ObjectStore, out: &mut dyn Write) -> anyhow::Result<()> {
    for c in store.list_collections()? {
        let mut cursor = None;
        loop {
            let page = store.list_objects(&c, cursor.as_ref(), 1024)?;
            for k in &page.objects {
                if k.name.first() == Some(&0) {
                    continue;
                }
                let sum = shoal_osd::scrub::summarize(store, &c, k, true);
                if !sum.error.is_empty() {
                    anyhow::bail!("{}: {}", String::from_utf8_lossy(&k.name), sum.error);
                }
                let (size, data_crc, meta_crc) = (sum.size, sum.data_crc, sum.meta_crc);
                writeln!(
                    out,
                    "{}.{:x} {} {size} {data_crc:08x} {meta_crc:08x}",
                    c.pool,
                    c.seed,
                    String::from_utf8_lossy(&k.name).escape_debug()
                )?;
            }
            match page.next {
                Some(n) => cursor = Some(n),
                None => break,
            }
        }
    }
    Ok(())
}

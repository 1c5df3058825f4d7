//! `shoal store mkfs|fsck|stat PATH`: the functions behind the subcommands. Each opens
//! the store directory itself; none may run while an OSD has the store open (redb's
//! file lock refuses it).

use std::fmt;
use std::path::{Path, PathBuf};

pub use crate::block::MkfsOptions;
use crate::block::device::FileDevice;
pub use crate::block::fsck::FsckReport;
use crate::block::{self, BLOCK, BlockStore, META_FILE, store_paths};
use crate::error::{Error, Result};

/// What `stat` reports about a store directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatReport {
    /// The store directory.
    pub path: PathBuf,
    /// On-disk format version.
    pub format_version: u64,
    /// Allocation and checksum unit.
    pub block_bytes: u64,
    /// Usable data capacity (device size less the label block).
    pub capacity_bytes: u64,
    /// Free data space.
    pub free_bytes: u64,
    /// Collections.
    pub collections: u64,
    /// Objects.
    pub objects: u64,
    /// Sum of object sizes.
    pub stored_bytes: u64,
    /// Data space allocated to objects.
    pub allocated_bytes: u64,
    /// Omap entries.
    pub omap_entries: u64,
    /// Deferred writes waiting to be applied in place.
    pub deferred_records: u64,
    /// Size of the metadata file.
    pub meta_file_bytes: u64,
    /// Whether the data device accepts O_DIRECT.
    pub direct_io: bool,
}

impl fmt::Display for StatReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "path:             {}", self.path.display())?;
        writeln!(f, "format version:   {}", self.format_version)?;
        writeln!(f, "block size:       {} B", self.block_bytes)?;
        writeln!(f, "capacity:         {} B", self.capacity_bytes)?;
        writeln!(f, "free:             {} B", self.free_bytes)?;
        writeln!(f, "allocated:        {} B", self.allocated_bytes)?;
        writeln!(f, "stored (logical): {} B", self.stored_bytes)?;
        writeln!(f, "collections:      {}", self.collections)?;
        writeln!(f, "objects:          {}", self.objects)?;
        writeln!(f, "omap entries:     {}", self.omap_entries)?;
        writeln!(f, "deferred records: {}", self.deferred_records)?;
        writeln!(f, "metadata file:    {} B", self.meta_file_bytes)?;
        write!(
            f,
            "direct I/O:       {}",
            if self.direct_io {
                "yes"
            } else {
                "no (filesystem refuses O_DIRECT)"
            }
        )
    }
}

/// Format a new store in `path` (created if missing; refuses an existing store).
pub fn mkfs(path: &Path, opts: &MkfsOptions) -> Result<StatReport> {
    if opts.data_bytes < 2 * BLOCK as u64 {
        return Err(Error::InvalidArgument(format!(
            "data size {} B is too small",
            opts.data_bytes
        )));
    }
    BlockStore::mkfs(path, opts)?;
    stat(path)
}

fn open_db(path: &Path) -> Result<(FileDevice, redb::Database)> {
    let (data, meta) = store_paths(path);
    if !meta.exists() {
        return Err(Error::NotFormatted(format!(
            "{} is missing",
            meta.display()
        )));
    }
    let dev = FileDevice::open(&data, false).map_err(|e| Error::io("opening the data file", e))?;
    let db = redb::Database::open(&meta).map_err(|e| Error::meta("opening the metadata", e))?;
    Ok((dev, db))
}

/// Check every metadata cross-reference; with `deep`, every block checksum too.
pub fn fsck(path: &Path, deep: bool) -> Result<FsckReport> {
    let (dev, db) = open_db(path)?;
    block::fsck::fsck(&dev, &db, deep)
}

/// Capacity, usage and counts of a store, read without changing it.
pub fn stat(path: &Path) -> Result<StatReport> {
    let (dev, db) = open_db(path)?;
    let report = block::fsck::fsck(&dev, &db, false)?;
    let direct_io =
        FileDevice::open(&path.join(block::DATA_FILE), true).is_ok_and(|d| d.is_direct());
    let b = BLOCK as u64;
    let stored_bytes = block::stored_bytes(&db)?;
    Ok(StatReport {
        path: path.to_path_buf(),
        format_version: block::FORMAT_VERSION,
        block_bytes: b,
        capacity_bytes: report.usable_blocks.saturating_mul(b),
        free_bytes: report.free_blocks.saturating_mul(b),
        collections: report.collections,
        objects: report.objects,
        stored_bytes,
        allocated_bytes: report.allocated_blocks.saturating_mul(b),
        omap_entries: report.omap_entries,
        deferred_records: report.deferred_records,
        meta_file_bytes: std::fs::metadata(path.join(META_FILE))
            .map(|m| m.len())
            .unwrap_or(0),
        direct_io,
    })
}

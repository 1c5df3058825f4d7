//! `shoal store mkfs|fsck|stat PATH`: the functions behind the subcommands. Each opens
//! the store directory itself; none may run while an OSD has the store open (the store's
//! lock file refuses it). `fsck` and `stat` never write: both files are checked before
//! they are trusted, redb's own writes at open stay in memory, and a panic of redb on a
//! damaged file comes back as [`Error::Damaged`] naming the file.

use std::fmt;
use std::path::{Path, PathBuf};

pub use crate::block::MkfsOptions;
use crate::block::device::FileDevice;
pub use crate::block::fsck::FsckReport;
use crate::block::guard::{StoreFiles, StoreLock, catch_panic, panicked};
use crate::block::{self, BLOCK, BlockStore, META_FILE};
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
    /// Usable data capacity (device size less the label block and the journal).
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
    /// Journal records not yet checkpointed (replayed by the next open).
    pub journal_records: u64,
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
        writeln!(f, "journal records:  {}", self.journal_records)?;
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

/// A store opened for reading only, with its shared lock.
struct ReadOnly {
    _lock: StoreLock,
    files: StoreFiles,
    dev: FileDevice,
    db: redb::Database,
}

fn open_read_only(path: &Path) -> Result<ReadOnly> {
    let lock = StoreLock::acquire(path, false)?;
    let files = StoreFiles::of(path);
    files.check()?;
    let dev = FileDevice::open_read_only(&files.data)
        .map_err(|e| Error::damaged(&files.data, format!("cannot open it: {e}")))?;
    let db = block::open_db_read_only(&files.meta)?;
    Ok(ReadOnly {
        _lock: lock,
        files,
        dev,
        db,
    })
}

impl ReadOnly {
    /// Run `f` on the open store; a panic of redb inside it names the metadata file.
    fn read<T>(&self, f: impl FnOnce(&Self) -> Result<T>) -> Result<T> {
        catch_panic(|| f(self))
            .map_err(|p| panicked(&self.files.meta, p))?
            .map_err(Error::in_file(&self.files.meta))
    }
}

/// Check every metadata cross-reference; with `deep`, every block checksum too.
pub fn fsck(path: &Path, deep: bool) -> Result<FsckReport> {
    let s = open_read_only(path)?;
    let mut report = s.read(|s| block::fsck::fsck(&s.dev, &s.files.data, &s.db, deep))?;
    // Each line names the file its problem is in: the data file for what
    // reading blocks found, the metadata file for everything else.
    let data = path.join(block::DATA_FILE).display().to_string();
    let meta = path.join(META_FILE).display().to_string();
    for e in &mut report.errors {
        *e = if e.contains("the data file") {
            e.replace("the data file", &format!("the data file {data}"))
        } else {
            format!("{meta}: {e}")
        };
    }
    Ok(report)
}

/// Capacity, usage and counts of a store, read without changing it.
pub fn stat(path: &Path) -> Result<StatReport> {
    let s = open_read_only(path)?;
    let (report, stored_bytes, format_version) = s.read(|s| {
        let report = block::fsck::fsck(&s.dev, &s.files.data, &s.db, false)?;
        Ok((
            report,
            block::stored_bytes(&s.db)?,
            block::read_format(&s.db)?,
        ))
    })?;
    let direct_io =
        FileDevice::open(&path.join(block::DATA_FILE), true).is_ok_and(|d| d.is_direct());
    let b = BLOCK as u64;
    Ok(StatReport {
        path: path.to_path_buf(),
        format_version,
        block_bytes: b,
        capacity_bytes: report.usable_blocks.saturating_mul(b),
        free_bytes: report.free_blocks.saturating_mul(b),
        collections: report.collections,
        objects: report.objects,
        stored_bytes,
        allocated_bytes: report.allocated_blocks.saturating_mul(b),
        omap_entries: report.omap_entries,
        deferred_records: report.deferred_records,
        journal_records: report.journal_records,
        meta_file_bytes: std::fs::metadata(path.join(META_FILE))
            .map(|m| m.len())
            .unwrap_or(0),
        direct_io,
    })
}

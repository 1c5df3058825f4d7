//! What a store directory must look like before anything in it is trusted: the lock that
//! keeps a second process out, the checks of both files made before redb or the label
//! are believed, and the one place where a panic of a dependency on a damaged file is
//! turned into an error.
//!
//! The metadata header checks mirror the assertions redb 2.x makes when it opens a file
//! (`TransactionalMemory::new`: page size, region geometry, file at least as long as the
//! layout its header records); the header format is redb's documented file format v2/v3.
//! Anything redb can still trip on deeper in the file is caught by [`catch_panic`].

use std::cell::{Cell, RefCell};
use std::fs::{File, OpenOptions};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Once;

use super::device::Device;
use super::meta::FORMAT_OLDEST;
use super::{BLOCK, FORMAT_VERSION, LABEL_MAGIC};
use crate::error::{Error, Result};

/// Name of the lock file inside a store directory.
pub const LOCK_FILE: &str = "lock";

/// redb's magic number (the first 9 bytes of its file).
const REDB_MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];
/// redb's page size; its super-header occupies the first page.
const REDB_PAGE_BYTES: u64 = 4096;

/// An advisory lock on `DIR/lock`, held as long as this value lives. The OSD holds it
/// exclusively for the store's life; the read-only tools hold it shared, so they run
/// side by side but never beside an OSD.
#[derive(Debug)]
pub(crate) struct StoreLock {
    _file: File,
}

impl StoreLock {
    /// Take the lock of store directory `dir`, creating the lock file if needed.
    pub(crate) fn acquire(dir: &Path, exclusive: bool) -> Result<StoreLock> {
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(Error::damaged(dir, "not a directory")),
            Err(e) => {
                return Err(Error::damaged(
                    dir,
                    format!("store directory cannot be read: {e}"),
                ));
            }
        }
        let path = dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::damaged(&path, format!("cannot open the lock file: {e}")))?;
        // flock(2) through rustix: std's `File::try_lock` needs Rust 1.89, above the
        // workspace's rust-version, and raising that turns on newer clippy lints in
        // every crate. The lock goes with the file description, so a second open in
        // this process is refused too, and the kernel drops it when the process dies.
        use rustix::fs::FlockOperation;
        let op = if exclusive {
            FlockOperation::NonBlockingLockExclusive
        } else {
            FlockOperation::NonBlockingLockShared
        };
        match rustix::fs::flock(&file, op) {
            Ok(()) => Ok(StoreLock { _file: file }),
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => Err(Error::Locked { file: path }),
            Err(e) => Err(Error::damaged(
                &path,
                format!("cannot lock the lock file: {e}"),
            )),
        }
    }
}

/// Length of `file`, which must exist and be a regular file or a block device.
fn file_len(file: &Path, what: &str) -> Result<u64> {
    let md = std::fs::metadata(file).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::damaged(file, format!("{what} is missing")),
        _ => Error::damaged(file, format!("{what} cannot be read: {e}")),
    })?;
    use std::os::unix::fs::FileTypeExt;
    if md.file_type().is_block_device() {
        // Block devices report 0 in metadata; their size is read from the open device.
        return Ok(u64::MAX);
    }
    if !md.is_file() {
        return Err(Error::damaged(
            file,
            format!("{what} is not a regular file"),
        ));
    }
    Ok(md.len())
}

/// Check the metadata file's redb header against its length, as redb would assert.
pub(crate) fn check_meta_file(file: &Path) -> Result<()> {
    let len = file_len(file, "the metadata file")?;
    let dev = super::device::FileDevice::open_read_only(file)
        .map_err(|e| Error::damaged(file, format!("cannot open the metadata file: {e}")))?;
    check_meta_header(&dev, len).map_err(|reason| Error::damaged(file, reason))
}

/// The reasons redb would refuse or assert on `dev` (`len` bytes long), in words.
pub(crate) fn check_meta_header(dev: &dyn Device, len: u64) -> std::result::Result<(), String> {
    if len == 0 {
        return Err("the metadata file is empty".into());
    }
    if len < REDB_PAGE_BYTES {
        return Err(format!(
            "the metadata file is {len} bytes, shorter than its {REDB_PAGE_BYTES}-byte header"
        ));
    }
    let mut h = [0u8; 64];
    dev.read_at(0, &mut h)
        .map_err(|e| format!("cannot read the metadata header: {e}"))?;
    if h[..9] != REDB_MAGIC {
        return Err("no redb header at the start of the metadata file (bad magic number)".into());
    }
    let u32_at = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
    let (page, region_header_pages, region_pages) = (u32_at(12), u32_at(16), u32_at(20));
    let (full_regions, trailing_pages) = (u32_at(24), u32_at(28));
    if u64::from(page) != REDB_PAGE_BYTES {
        return Err(format!(
            "metadata header records a page size of {page} bytes, expected {REDB_PAGE_BYTES}"
        ));
    }
    if region_header_pages == 0 || region_pages == 0 || trailing_pages >= region_pages {
        return Err(format!(
            "metadata header records an impossible region geometry \
             ({region_header_pages} header pages, {region_pages} pages per region, \
             {trailing_pages} in the last)"
        ));
    }
    if full_regions == 0 && trailing_pages == 0 {
        return Err("metadata header records no regions".into());
    }
    let page = u64::from(page);
    let full = (u64::from(region_header_pages) + u64::from(region_pages)) * page;
    let trailing = if trailing_pages > 0 {
        (u64::from(region_header_pages) + u64::from(trailing_pages)) * page
    } else {
        0
    };
    let layout = u64::from(full_regions)
        .checked_mul(full)
        .and_then(|b| b.checked_add(page + trailing));
    match layout {
        Some(want) if want <= len => Ok(()),
        Some(want) => Err(format!(
            "the metadata file is {len} bytes but its header describes {want} bytes (truncated)"
        )),
        None => Err("metadata header records an impossible length".into()),
    }
}

/// What the data device's label says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Label {
    pub(crate) total_blocks: u64,
    pub(crate) version: u64,
}

/// Decode block 0 of the data device.
pub(crate) fn parse_label(b: &[u8]) -> std::result::Result<Label, String> {
    if b.len() < 36 || &b[..16] != LABEL_MAGIC {
        return Err("no Shoal label at the start of the data file (bad magic)".into());
    }
    let crc = u32::from_be_bytes([b[32], b[33], b[34], b[35]]);
    if crc != crc32c::crc32c(&b[..32]) {
        return Err("the data file's label fails its checksum".into());
    }
    let u64_at = |o: usize| {
        let mut v = [0u8; 8];
        v.copy_from_slice(&b[o..o + 8]);
        u64::from_be_bytes(v)
    };
    let version = u64_at(16);
    if !(FORMAT_OLDEST..=FORMAT_VERSION).contains(&version) {
        return Err(format!(
            "the data file has format version {version}; this build reads versions \
             {FORMAT_OLDEST} to {FORMAT_VERSION}"
        ));
    }
    Ok(Label {
        total_blocks: u64_at(24),
        version,
    })
}

/// Check the data file: present, labelled, and as long as its label says.
pub(crate) fn check_data_file(file: &Path) -> Result<()> {
    let meta_len = file_len(file, "the data file")?;
    let dev = super::device::FileDevice::open_read_only(file)
        .map_err(|e| Error::damaged(file, format!("cannot open the data file: {e}")))?;
    let len = if meta_len == u64::MAX {
        dev.len()
            .map_err(|e| Error::damaged(file, format!("cannot size the data device: {e}")))?
    } else {
        meta_len
    };
    check_data_device(&dev, len)
        .map(|_| ())
        .map_err(|reason| Error::damaged(file, reason))
}

/// The label of `dev` (`len` bytes long), checked against that length.
pub(crate) fn check_data_device(dev: &dyn Device, len: u64) -> std::result::Result<Label, String> {
    if len == 0 {
        return Err("the data file is empty".into());
    }
    if len < BLOCK as u64 {
        return Err(format!(
            "the data file is {len} bytes, shorter than its {BLOCK}-byte label"
        ));
    }
    let mut b = vec![0u8; BLOCK];
    dev.read_at(0, &mut b)
        .map_err(|e| format!("cannot read the data file's label: {e}"))?;
    let label = parse_label(&b)?;
    let want = label.total_blocks.checked_mul(BLOCK as u64);
    match want {
        Some(w) if w <= len => Ok(label),
        Some(w) => Err(format!(
            "the data file is {len} bytes but its label records {} blocks ({w} bytes): truncated",
            label.total_blocks
        )),
        None => Err(format!(
            "the data file's label records an impossible {} blocks",
            label.total_blocks
        )),
    }
}

thread_local! {
    /// Set while this thread runs inside [`catch_panic`].
    static QUIET: Cell<bool> = const { Cell::new(false) };
    /// The last panic message of this thread while quiet.
    static CAUGHT: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

/// Run `f`; a panic inside it becomes `Err(message)` and prints nothing. The panic hook is
/// wrapped once for the process and stays silent only on a thread inside this function,
/// so panics elsewhere still report as before.
pub(crate) fn catch_panic<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if QUIET.with(Cell::get) {
                let msg = match info.payload().downcast_ref::<&str>() {
                    Some(s) => (*s).to_string(),
                    None => info
                        .payload()
                        .downcast_ref::<String>()
                        .cloned()
                        .unwrap_or_else(|| "unknown panic".into()),
                };
                // The crate's own path, not where the registry sits on this machine.
                let at = info
                    .location()
                    .map(|l| {
                        let f = l.file();
                        let short = f.rfind("/src/").map_or(f, |i| {
                            f[..i].rfind('/').map_or(&f[i + 1..], |j| &f[j + 1..])
                        });
                        format!(" at {short}:{}", l.line())
                    })
                    .unwrap_or_default();
                CAUGHT.with(|c| *c.borrow_mut() = Some(format!("{msg}{at}")));
            } else {
                previous(info);
            }
        }));
    });
    let was = QUIET.with(|q| q.replace(true));
    let r = panic::catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was));
    r.map_err(|_| {
        CAUGHT
            .with(|c| c.borrow_mut().take())
            .unwrap_or_else(|| "unknown panic".into())
    })
}

/// The error for a panic of the metadata library while it read `file`.
pub(crate) fn panicked(file: &Path, msg: String) -> Error {
    Error::damaged(
        file,
        format!("the metadata library failed on the damaged file ({msg})"),
    )
}

/// Paths of a store directory's files.
#[derive(Debug, Clone)]
pub(crate) struct StoreFiles {
    pub(crate) data: PathBuf,
    pub(crate) meta: PathBuf,
}

impl StoreFiles {
    pub(crate) fn of(dir: &Path) -> Self {
        let (data, meta) = super::store_paths(dir);
        Self { data, meta }
    }

    /// Check both files before either is trusted.
    pub(crate) fn check(&self) -> Result<()> {
        check_meta_file(&self.meta)?;
        check_data_file(&self.data)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_caught_panic_is_an_error_with_its_message() {
        let r: std::result::Result<(), String> =
            catch_panic(|| panic!("assertion failed: storage long enough"));
        let msg = r.unwrap_err();
        assert!(
            msg.contains("assertion failed: storage long enough"),
            "{msg}"
        );
        assert_eq!(catch_panic(|| 7).unwrap(), 7);
    }

    #[test]
    fn label_round_trips_and_names_what_is_wrong() {
        let good = super::super::label(10);
        assert_eq!(parse_label(&good).unwrap().total_blocks, 10);
        let mut bad = good.clone();
        bad[0] ^= 1;
        assert!(parse_label(&bad).unwrap_err().contains("magic"));
        let mut bad = good.clone();
        bad[25] ^= 1;
        assert!(parse_label(&bad).unwrap_err().contains("checksum"));
    }
}

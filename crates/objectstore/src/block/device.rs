//! The data device: a narrow I/O trait, the file/block-device implementation with direct
//! I/O, and an adapter that lets redb keep its file on a `Device` (used by tests to
//! inject faults into metadata writes as well as data writes).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

use super::BLOCK;

/// Positional I/O on a device of fixed length. Implementations must be thread-safe.
#[allow(clippy::len_without_is_empty)] // a device is never empty
pub trait Device: Send + Sync + std::fmt::Debug {
    /// Current length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Fill `buf` from `offset`; reading past the end is an error.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Write all of `buf` at `offset`.
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Make every completed write durable.
    fn sync(&self) -> io::Result<()>;
    /// Change the length (new bytes read as zeros).
    fn set_len(&self, len: u64) -> io::Result<()>;
}

/// A regular file or a block device, opened with `O_DIRECT` when the filesystem allows.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    direct: bool,
}

/// Alignment for direct I/O buffers and offsets.
const ALIGN: usize = BLOCK;

/// A zeroed buffer of `len` bytes whose start is `ALIGN`-aligned (safe code: over-allocate
/// and slice at the aligned offset). Block buffers are built in these so direct I/O needs
/// no bounce copy.
#[derive(Default)]
pub(crate) struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    pub(crate) fn new(len: usize) -> Self {
        let raw = vec![0u8; len + ALIGN];
        let start = raw.as_ptr().align_offset(ALIGN).min(ALIGN);
        Self { raw, start, len }
    }
    /// Makes the buffer `len` bytes long, keeping its memory when it has room (its
    /// contents are then whatever they were: the caller writes every byte it uses).
    pub(crate) fn reuse(&mut self, len: usize) {
        if self.raw.len() - self.start >= len {
            self.len = len;
        } else {
            *self = AlignedBuf::new(len.next_power_of_two());
            self.len = len;
        }
    }
    /// Bytes the buffer can hold without a new allocation.
    pub(crate) fn capacity(&self) -> usize {
        self.raw.len() - self.start
    }
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
    /// Bytes `[from, from + n)` of the buffer, without copying.
    pub(crate) fn into_bytes(self, from: usize, n: usize) -> bytes::Bytes {
        bytes::Bytes::from(self.raw).slice(self.start + from..self.start + from + n)
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} of {})", self.len, self.capacity())
    }
}

/// Aligned buffers for large reads, kept for the next read once the data
/// sent from them is dropped: a fresh 4 MiB buffer costs the allocator's
/// zeroing (or the kernel's page faults) on every read, more CPU than the
/// read's checksums. At most [`BufPool::KEEP`] buffers of at most
/// [`BufPool::LARGEST`] bytes are kept.
#[derive(Debug, Default)]
pub(crate) struct BufPool {
    free: std::sync::Mutex<Vec<AlignedBuf>>,
}

impl BufPool {
    /// Reads smaller than this get a buffer of their own.
    pub(crate) const SMALLEST: usize = 64 << 10;
    /// Buffers larger than this are not kept.
    pub(crate) const LARGEST: usize = 8 << 20;
    /// Buffers kept.
    pub(crate) const KEEP: usize = 16;

    /// A buffer of `len` bytes. Its contents are whatever an earlier read
    /// left (zeros when new): the caller writes every byte it returns.
    pub(crate) fn take(&self, len: usize) -> AlignedBuf {
        if len < Self::SMALLEST {
            return AlignedBuf::new(len);
        }
        let mut free = self
            .free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let best = (0..free.len())
            .filter(|&i| free[i].capacity() >= len)
            .min_by_key(|&i| free[i].capacity());
        match best {
            Some(i) => {
                let mut buf = free.swap_remove(i);
                buf.reuse(len);
                buf
            }
            None => {
                drop(free);
                let mut buf = AlignedBuf::new(len.next_power_of_two());
                buf.reuse(len);
                buf
            }
        }
    }

    /// Bytes `[from, from + n)` of `buf`, without copying; `buf` comes back
    /// to the pool when the last view of them is dropped.
    pub(crate) fn bytes(self: &Arc<Self>, buf: AlignedBuf, from: usize, n: usize) -> bytes::Bytes {
        if buf.capacity() < Self::SMALLEST || buf.capacity() > Self::LARGEST {
            return buf.into_bytes(from, n);
        }
        bytes::Bytes::from_owner(Pooled {
            buf,
            from,
            n,
            pool: Arc::clone(self),
        })
    }

    /// Buffers waiting for a read.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        self.free.lock().map_or(0, |f| f.len())
    }
}

/// A pooled buffer lent to a [`bytes::Bytes`].
struct Pooled {
    buf: AlignedBuf,
    from: usize,
    n: usize,
    pool: Arc<BufPool>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf.as_slice()[self.from..self.from + self.n]
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Ok(mut free) = self.pool.free.lock()
            && free.len() < BufPool::KEEP
        {
            free.push(std::mem::take(&mut self.buf));
        }
    }
}

fn is_aligned(ptr: *const u8, offset: u64, len: usize) -> bool {
    (ptr as usize) % ALIGN == 0 && offset % ALIGN as u64 == 0 && len % ALIGN == 0
}

impl FileDevice {
    /// Open `path` read-write, trying `O_DIRECT` first when `direct` is set; falls back to
    /// buffered I/O (with a logged note) when the filesystem refuses it (tmpfs does).
    pub fn open(path: &Path, direct: bool) -> io::Result<Self> {
        if direct {
            let flags = rustix::fs::OFlags::DIRECT.bits() as i32;
            match OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(flags)
                .open(path)
            {
                Ok(file) => return Ok(Self { file, direct: true }),
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
                    tracing::info!(path = %path.display(), "O_DIRECT refused by the filesystem; using buffered I/O");
                }
                Err(e) => return Err(e),
            }
        }
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Self {
            file,
            direct: false,
        })
    }

    /// Open `path` for reading only (buffered): the read-only tools, and the checks made
    /// before a store is trusted. Writes through it fail.
    pub fn open_read_only(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).open(path)?;
        Ok(Self {
            file,
            direct: false,
        })
    }

    /// Create (or extend) a file of `len` bytes. It stays sparse (space is taken as
    /// blocks are written, as Ceph's `bluestore_block_preallocate_file=false`) unless
    /// `preallocate` asks for the space to be reserved now, so that a full filesystem
    /// shows at mkfs rather than mid-write. A reservation the filesystem cannot make
    /// fails with `StorageFull` and gives back what it took; a filesystem without
    /// `fallocate` leaves the file sparse.
    pub fn create(path: &Path, len: u64, preallocate: bool) -> io::Result<()> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        if file.metadata()?.file_type().is_file() {
            let before = file.metadata()?.len();
            file.set_len(len)?;
            if preallocate {
                match rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, len) {
                    Ok(()) => {}
                    Err(rustix::io::Errno::NOSPC) => {
                        // A failed fallocate may keep the blocks it got: give them back.
                        let _ = file.set_len(0);
                        let _ = file.set_len(before);
                        return Err(io::Error::new(
                            io::ErrorKind::StorageFull,
                            format!(
                                "the filesystem holding {} has less than the {len} bytes to reserve",
                                path.display()
                            ),
                        ));
                    }
                    Err(e) => {
                        tracing::info!(error = %e, "fallocate unsupported; data file stays sparse");
                    }
                }
            }
        }
        file.sync_all()
    }

    /// Whether direct I/O is in use.
    pub fn is_direct(&self) -> bool {
        self.direct
    }
}

impl Device for FileDevice {
    fn len(&self) -> io::Result<u64> {
        let md = self.file.metadata()?;
        if md.file_type().is_file() {
            return Ok(md.len());
        }
        // Block devices report length 0 in metadata; seek to the end instead.
        use std::io::Seek;
        (&self.file).seek(io::SeekFrom::End(0))
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if !self.direct || is_aligned(buf.as_ptr(), offset, buf.len()) {
            return self.file.read_exact_at(buf, offset);
        }
        let mut a = AlignedBuf::new(buf.len().next_multiple_of(ALIGN));
        self.file.read_exact_at(a.as_mut_slice(), offset)?;
        buf.copy_from_slice(&a.as_slice()[..buf.len()]);
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        if !self.direct || is_aligned(buf.as_ptr(), offset, buf.len()) {
            return self.file.write_all_at(buf, offset);
        }
        let mut a = AlignedBuf::new(buf.len());
        a.as_mut_slice().copy_from_slice(buf);
        self.file.write_all_at(a.as_slice(), offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
}

/// redb storage on a [`Device`].
#[derive(Debug)]
pub(crate) struct MetaOnDevice(pub Arc<dyn Device>);

impl redb::StorageBackend for MetaOnDevice {
    fn len(&self) -> Result<u64, io::Error> {
        self.0.len()
    }
    fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>, io::Error> {
        let mut v = vec![0u8; len];
        self.0.read_at(offset, &mut v)?;
        Ok(v)
    }
    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        self.0.set_len(len)
    }
    fn sync_data(&self, _eventual: bool) -> Result<(), io::Error> {
        self.0.sync()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.0.write_at(offset, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_read_buffers_come_back_when_their_bytes_are_dropped() {
        let pool = Arc::new(BufPool::default());
        let mut buf = pool.take(1 << 20);
        buf.as_mut_slice().fill(5);
        let at = buf.as_slice().as_ptr();
        let b = pool.bytes(buf, 10, 100);
        let view = b.slice(1..5);
        drop(b);
        assert_eq!(pool.kept(), 0, "a view still holds it");
        assert_eq!(&view[..], &[5; 4]);
        drop(view);
        assert_eq!(pool.kept(), 1);
        // The next large read gets it, whatever it holds; a smaller one
        // fits in it too.
        let again = pool.take(1 << 19);
        assert_eq!(again.as_slice().as_ptr(), at);
        assert_eq!(again.as_slice().len(), 1 << 19);
        assert_eq!(pool.kept(), 0);
        drop(pool.bytes(again, 0, 1));
        // Small reads and buffers too large to keep are not kept; at most
        // KEEP are.
        drop(pool.bytes(pool.take(4096), 0, 4096));
        drop(pool.bytes(pool.take(BufPool::LARGEST + 1), 0, 1));
        assert_eq!(pool.kept(), 1);
        let many: Vec<_> = (0..BufPool::KEEP + 3).map(|_| pool.take(1 << 16)).collect();
        drop(
            many.into_iter()
                .map(|b| pool.bytes(b, 0, 1))
                .collect::<Vec<_>>(),
        );
        assert_eq!(pool.kept(), BufPool::KEEP);
    }
}

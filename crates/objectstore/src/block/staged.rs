//! redb storage that keeps every write in memory until the store is known to be sound.
//!
//! redb writes while it opens a file (it sets its recovery flag, may repair after a crash,
//! and flushes allocator state when dropped). Opening a damaged file must leave it byte for
//! byte as it was, so metadata is opened through a [`Staged`] backend: reads see the file
//! plus the staged writes, writes go to an in-memory page overlay and an ordered log.
//! Once every check of the open has passed, [`StagedHandle::commit`] replays the log on the
//! file in redb's order (writes, length changes and syncs, so crash safety is redb's own)
//! and switches to writing straight through. The read-only tools never commit.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::device::Device;

/// Granularity of the overlay (redb's page size).
const PAGE_BYTES: u64 = 4096;

/// One staged change, replayed in order at commit.
#[derive(Debug)]
enum Op {
    Write(u64, Vec<u8>),
    SetLen(u64),
    Sync,
}

/// What redb has written since the open, not yet on the device.
#[derive(Debug)]
struct Overlay {
    /// Length as redb sees it.
    len: u64,
    /// Bytes of the device still visible: a shrink hides the device beyond it.
    base_len: u64,
    /// Staged pages, by page index; each `PAGE_BYTES` long.
    pages: HashMap<u64, Vec<u8>>,
    log: Vec<Op>,
}

#[derive(Debug)]
struct Inner {
    dev: Arc<dyn Device>,
    /// Set once the log is replayed: from then on every call goes to the device.
    through: AtomicBool,
    overlay: Mutex<Option<Overlay>>,
}

/// The redb backend (moved into redb).
#[derive(Debug)]
pub(crate) struct Staged(Arc<Inner>);

/// Our handle on the same backend, to commit it.
#[derive(Debug, Clone)]
pub(crate) struct StagedHandle(Arc<Inner>);

impl Staged {
    /// A staging backend on `dev`, and the handle that commits it.
    pub(crate) fn new(dev: Arc<dyn Device>) -> io::Result<(Staged, StagedHandle)> {
        let len = dev.len()?;
        let inner = Arc::new(Inner {
            dev,
            through: AtomicBool::new(false),
            overlay: Mutex::new(Some(Overlay {
                len,
                base_len: len,
                pages: HashMap::new(),
                log: Vec::new(),
            })),
        });
        Ok((Staged(inner.clone()), StagedHandle(inner)))
    }
}

impl StagedHandle {
    /// Replay the staged changes on the device, then write straight through.
    pub(crate) fn commit(&self) -> io::Result<()> {
        let mut guard = self
            .0
            .overlay
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(ov) = guard.take() else {
            return Ok(());
        };
        for op in &ov.log {
            match op {
                Op::Write(off, data) => self.0.dev.write_at(*off, data)?,
                Op::SetLen(n) => self.0.dev.set_len(*n)?,
                Op::Sync => self.0.dev.sync()?,
            }
        }
        self.0.through.store(true, Ordering::Release);
        Ok(())
    }
}

impl Overlay {
    /// The device's bytes of page `idx` (zeros beyond what is visible).
    fn base_page(&self, dev: &dyn Device, idx: u64) -> io::Result<Vec<u8>> {
        let mut page = vec![0u8; PAGE_BYTES as usize];
        let start = idx * PAGE_BYTES;
        let end = (start + PAGE_BYTES).min(self.base_len);
        if end > start {
            dev.read_at(start, &mut page[..(end - start) as usize])?;
        }
        Ok(page)
    }

    fn read(&self, dev: &dyn Device, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|e| e > self.len) {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end of the metadata file",
            ));
        }
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let (idx, within) = (pos / PAGE_BYTES, (pos % PAGE_BYTES) as usize);
            let n = (PAGE_BYTES as usize - within).min(buf.len() - done);
            let out = &mut buf[done..done + n];
            match self.pages.get(&idx) {
                Some(p) => out.copy_from_slice(&p[within..within + n]),
                None => {
                    // Straight from the device where visible, zeros beyond.
                    let visible = self.base_len.saturating_sub(pos).min(n as u64) as usize;
                    if visible > 0 {
                        dev.read_at(pos, &mut out[..visible])?;
                    }
                    out[visible..].fill(0);
                }
            }
            done += n;
        }
        Ok(())
    }

    fn write(&mut self, dev: &dyn Device, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            let (idx, within) = (pos / PAGE_BYTES, (pos % PAGE_BYTES) as usize);
            let n = (PAGE_BYTES as usize - within).min(data.len() - done);
            if !self.pages.contains_key(&idx) {
                let page = self.base_page(dev, idx)?;
                self.pages.insert(idx, page);
            }
            if let Some(p) = self.pages.get_mut(&idx) {
                p[within..within + n].copy_from_slice(&data[done..done + n]);
            }
            done += n;
        }
        self.len = self.len.max(offset + data.len() as u64);
        self.log.push(Op::Write(offset, data.to_vec()));
        Ok(())
    }

    fn set_len(&mut self, len: u64) {
        if len < self.len {
            self.pages.retain(|idx, _| idx * PAGE_BYTES < len);
            let (idx, within) = (len / PAGE_BYTES, (len % PAGE_BYTES) as usize);
            if let Some(p) = self.pages.get_mut(&idx) {
                p[within..].fill(0);
            }
            self.base_len = self.base_len.min(len);
        }
        self.len = len;
        self.log.push(Op::SetLen(len));
    }
}

impl Inner {
    fn staged<T>(&self, f: impl FnOnce(&mut Overlay) -> io::Result<T>) -> Option<io::Result<T>> {
        if self.through.load(Ordering::Acquire) {
            return None;
        }
        let mut guard = self.overlay.lock().unwrap_or_else(PoisonError::into_inner);
        guard.as_mut().map(f)
    }
}

impl redb::StorageBackend for Staged {
    fn len(&self) -> io::Result<u64> {
        self.0
            .staged(|ov| Ok(ov.len))
            .unwrap_or_else(|| self.0.dev.len())
    }

    fn read(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut v = vec![0u8; len];
        match self.0.staged(|ov| ov.read(&*self.0.dev, offset, &mut v)) {
            Some(r) => r?,
            None => self.0.dev.read_at(offset, &mut v)?,
        }
        Ok(v)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0
            .staged(|ov| {
                ov.set_len(len);
                Ok(())
            })
            .unwrap_or_else(|| self.0.dev.set_len(len))
    }

    fn sync_data(&self, _eventual: bool) -> io::Result<()> {
        self.0
            .staged(|ov| {
                ov.log.push(Op::Sync);
                Ok(())
            })
            .unwrap_or_else(|| self.0.dev.sync())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0
            .staged(|ov| ov.write(&*self.0.dev, offset, data))
            .unwrap_or_else(|| self.0.dev.write_at(offset, data))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use redb::StorageBackend;

    use super::*;
    use crate::block::fault::{FaultController, MemDevice};

    fn dev_with(bytes: &[u8]) -> Arc<MemDevice> {
        MemDevice::new(bytes.to_vec(), FaultController::new(0, 0))
    }

    #[test]
    fn staged_writes_are_visible_but_leave_the_device_alone_until_commit() {
        let original: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let dev = dev_with(&original);
        let (b, h) = Staged::new(dev.clone()).unwrap();
        b.write(4090, &[0xaa; 20]).unwrap();
        b.set_len(5000).unwrap();
        b.set_len(9000).unwrap();
        b.sync_data(false).unwrap();
        let seen = b.read(0, 9000).unwrap();
        assert_eq!(&seen[..4090], &original[..4090]);
        assert_eq!(&seen[4090..4110], &[0xaa; 20]);
        assert_eq!(&seen[4110..5000], &original[4110..5000]);
        assert!(
            seen[5000..].iter().all(|&x| x == 0),
            "a shrink hides the old tail"
        );
        assert!(b.read(8999, 2).is_err());
        let mut now = vec![0u8; 10_000];
        dev.read_at(0, &mut now).unwrap();
        assert_eq!(now, original, "nothing reaches the device before commit");
        h.commit().unwrap();
        assert_eq!(dev.len().unwrap(), 9000);
        let mut after = vec![0u8; 9000];
        dev.read_at(0, &mut after).unwrap();
        assert_eq!(after, seen);
        b.write(0, &[1]).unwrap();
        assert_eq!(b.read(0, 1).unwrap(), vec![1]);
        dev.read_at(0, &mut after[..1]).unwrap();
        assert_eq!(after[0], 1, "after commit writes go straight through");
    }
}

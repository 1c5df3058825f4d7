//! A fault-injecting in-memory device for crash tests. It keeps a "live" image (what
//! reads see) apart from a "durable" image (what survives a crash: the state at the last
//! sync). The Nth write is torn (only a prefix lands) and every later write and sync
//! fails, as if the machine lost power. [`MemDevice::crash_image`] then builds what a
//! disk could hold after the crash: the durable image plus any subset of the writes
//! since the last sync, in order, the torn one included.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::device::Device;
use crate::model::Rng;

/// Shared by the devices of one store, so "the Nth write" counts data and metadata
/// writes together.
#[derive(Debug)]
pub struct FaultController {
    writes: AtomicU64,
    /// Tear the write with this number (1-based); 0 = never.
    tear_at: AtomicU64,
    stopped: AtomicBool,
    seed: u64,
}

impl FaultController {
    /// Tear write number `tear_at` (0 = never), with randomness from `seed`.
    pub fn new(tear_at: u64, seed: u64) -> Arc<Self> {
        Arc::new(Self {
            writes: AtomicU64::new(0),
            tear_at: AtomicU64::new(tear_at),
            stopped: AtomicBool::new(false),
            seed,
        })
    }

    /// Tear write number `n` (counted from the controller's creation; 0 = never).
    pub fn set_tear_at(&self, n: u64) {
        self.tear_at.store(n, Ordering::SeqCst);
    }

    /// Writes issued so far.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    /// Whether the fault fired.
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Make every later write and sync fail now.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }
}

#[derive(Debug, Default)]
struct Images {
    live: Vec<u8>,
    durable: Vec<u8>,
    /// Writes since the last sync, in order: (offset, bytes that reached the medium).
    unsynced: Vec<(u64, Vec<u8>)>,
}

/// An in-memory device with fault injection.
#[derive(Debug)]
pub struct MemDevice {
    images: Mutex<Images>,
    ctl: Arc<FaultController>,
}

fn stopped_err() -> io::Error {
    io::Error::other("injected fault: device stopped")
}

fn put(img: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let o = offset as usize;
    if img.len() < o + data.len() {
        img.resize(o + data.len(), 0);
    }
    img[o..o + data.len()].copy_from_slice(data);
}

impl MemDevice {
    /// A device holding `image` (durable), controlled by `ctl`.
    pub fn new(image: Vec<u8>, ctl: Arc<FaultController>) -> Arc<Self> {
        Arc::new(Self {
            images: Mutex::new(Images {
                live: image.clone(),
                durable: image,
                unsynced: Vec::new(),
            }),
            ctl,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Images> {
        self.images.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The durable image plus a random in-order subset of the unsynced writes.
    pub fn crash_image(&self, rng: &mut Rng) -> Vec<u8> {
        let im = self.lock();
        let mut img = im.durable.clone();
        for (off, data) in &im.unsynced {
            if rng.one_in(2) {
                put(&mut img, *off, data);
            }
        }
        img
    }

    /// The live image (what a clean shutdown leaves).
    pub fn live_image(&self) -> Vec<u8> {
        self.lock().live.clone()
    }
}

impl Device for MemDevice {
    fn len(&self) -> io::Result<u64> {
        Ok(self.lock().live.len() as u64)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let im = self.lock();
        let o = offset as usize;
        let src = im
            .live
            .get(o..o + buf.len())
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "read past end"))?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        if self.ctl.stopped() {
            return Err(stopped_err());
        }
        let n = self.ctl.writes.fetch_add(1, Ordering::SeqCst) + 1;
        let mut im = self.lock();
        if n == self.ctl.tear_at.load(Ordering::SeqCst) {
            // Tear: a prefix in 512-byte sectors lands, the rest does not.
            let mut rng = Rng::new(self.ctl.seed ^ n);
            let sectors = buf.len().div_ceil(512) as u64;
            let keep = ((rng.below(sectors.max(1)) * 512) as usize).min(buf.len());
            put(&mut im.live, offset, &buf[..keep]);
            im.unsynced.push((offset, buf[..keep].to_vec()));
            self.ctl.stop();
            return Err(io::Error::other("injected fault: torn write"));
        }
        put(&mut im.live, offset, buf);
        im.unsynced.push((offset, buf.to_vec()));
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        if self.ctl.stopped() {
            return Err(stopped_err());
        }
        let mut im = self.lock();
        let im = &mut *im;
        for (off, data) in im.unsynced.drain(..) {
            put(&mut im.durable, off, &data);
        }
        let len = im.live.len();
        im.durable.resize(len, 0);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        if self.ctl.stopped() {
            return Err(stopped_err());
        }
        let mut im = self.lock();
        im.live.resize(len as usize, 0);
        // Growth is metadata the filesystem keeps; shrinking waits for the next sync.
        if im.durable.len() < len as usize {
            im.durable.resize(len as usize, 0);
        }
        Ok(())
    }
}

//! [`Image`]: an open image. Reads, writes, discards and write-zeroes are
//! cut at data object boundaries and run on the objects at once; reads of
//! objects the object map says were never written answer zeros without a
//! round trip (when this client holds the exclusive lock, so the map is its
//! own). The first change takes the exclusive lock (see [`crate::lock`]).
//!
//! The object map is kept a superset of the objects that exist: an object's
//! state becomes "exists" (persisted) before its first write is sent, and
//! "nonexistent" only after it has been removed. Writes to an object and
//! the whole-object discards that remove it are ordered by a striped
//! reader–writer lock, so a write never lands on an object between its
//! removal and the map's update.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::{Bytes, BytesMut};
use shoal_client::{Error as ClusterError, Op, Pool};
use tokio::task::JoinSet;

use crate::error::{Error, Result};
use crate::format::{
    Header, OBJECT_EXISTS, OBJECT_NONEXISTENT, ObjectExtent, ParentSpec, SnapInfo, check_range,
    data_object, features, header_object, object_count, object_extents, object_map_object,
};
use crate::lock::{self, LockOwner};
use crate::rbd::{load_header, lookup_id};

/// Stripes of the per-object ordering lock.
const STRIPES: u64 = 64;
/// Object operations in flight for one whole-image task (du, shrink, remove).
pub(crate) const PARALLEL: usize = 32;
/// Bytes of the object map read per op when loading it.
const MAP_READ_BYTES: u64 = 4 << 20;

/// What `rbd info` shows.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ImageInfo {
    /// The image's name.
    pub name: String,
    /// Its id.
    pub id: String,
    /// Bytes.
    pub size: u64,
    /// Bytes per data object.
    pub object_size: u64,
    /// Object order (`object_size` is `1 << order`).
    pub order: u8,
    /// Data objects the image spans.
    pub objects: u64,
    /// Feature names.
    pub features: Vec<String>,
    /// The data objects' name prefix.
    pub block_name_prefix: String,
    /// The data pool, when not the image's pool.
    pub data_pool: Option<String>,
    /// Creation time, ms since the Unix epoch.
    pub created_ms: u64,
    /// Snapshots the image has.
    pub snapshot_count: usize,
    /// The snapshot this view is of, if any.
    pub snapshot: Option<String>,
    /// A clone's parent, as `pool/image@snap`.
    pub parent: Option<String>,
    /// Bytes of a clone that may read through to its parent.
    pub overlap: Option<u64>,
}

/// Space an image takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DiskUsage {
    /// The image's size.
    pub provisioned: u64,
    /// Bytes the data objects hold (their allocated extents added up).
    pub used: u64,
    /// Data objects that exist.
    pub objects: u64,
}

/// An open image; clones share it.
#[derive(Clone)]
pub struct Image {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Image({}/{})", self.inner.pool.name(), self.inner.name)
    }
}

pub(crate) struct Inner {
    pub(crate) pool: Pool,
    pub(crate) data: Pool,
    /// The data pool as reads see it: at the snapshot this image was
    /// opened at, or the objects as they are.
    data_r: Pool,
    /// The data pool as writes go to it: with the image's snapshot context.
    data_w: RwLock<Arc<Pool>>,
    /// The snapshot this image was opened at (read-only).
    snap: Option<SnapInfo>,
    pub(crate) name: String,
    pub(crate) id: String,
    header: RwLock<Header>,
    read_only: bool,
    /// Held while taking or giving up the lock.
    lock_change: tokio::sync::Mutex<()>,
    owned: AtomicBool,
    /// Refuse to give the lock up when another client asks.
    exclusive: AtomicBool,
    /// Changes hold it shared; giving the lock up holds it alone, so no
    /// change is in flight when another client takes the lock.
    io_gate: tokio::sync::RwLock<()>,
    pub(crate) me: LockOwner,
    /// Whether our watch on the header stands (writers only).
    health: Option<shoal_client::WatchHealth>,
    watch_timeout: std::time::Duration,
    /// Answers the notifies on the header (writers only).
    watcher: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The object map, when this client holds the lock and the image has one.
    map: Mutex<Option<Vec<u8>>>,
    /// Serializes changes of the object map.
    map_update: tokio::sync::Mutex<()>,
    stripes: Vec<tokio::sync::RwLock<()>>,
    /// A clone's parent, opened at its snapshot when first needed.
    parent: tokio::sync::OnceCell<Image>,
}

impl Image {
    /// Opens image `name` of `pool` for reading and writing; the first
    /// change takes the exclusive lock.
    pub async fn open(pool: &Pool, name: &str) -> Result<Image> {
        Image::open_with(pool, name, false, None).await
    }

    /// Opens image `name` of `pool` for reading only.
    pub async fn open_read_only(pool: &Pool, name: &str) -> Result<Image> {
        Image::open_with(pool, name, true, None).await
    }

    /// Opens snapshot `snap` of image `name` (read-only): the image as it
    /// was when the snapshot was taken.
    pub async fn open_snap(pool: &Pool, name: &str, snap: &str) -> Result<Image> {
        Image::open_with(pool, name, true, Some(snap)).await
    }

    async fn open_with(
        pool: &Pool,
        name: &str,
        read_only: bool,
        at: Option<&str>,
    ) -> Result<Image> {
        let id = lookup_id(pool, name).await?;
        let header = load_header(pool, name, &id).await?;
        let snap = match at {
            None => None,
            Some(s) => Some(header.snapshot(s).cloned().ok_or_else(|| Error::NoSnap {
                image: name.to_string(),
                snap: s.to_string(),
            })?),
        };
        Image::open_loaded(pool, name.to_string(), id, header, read_only, snap).await
    }

    /// Opens a clone's parent: image `spec.image_id` of `pool` at snapshot
    /// `spec.snap_id` (read-only).
    pub(crate) async fn open_parent(pool: &Pool, spec: &ParentSpec) -> Result<Image> {
        let name = crate::rbd::name_of_id(pool, &spec.image_id).await?;
        let header = load_header(pool, &name, &spec.image_id).await?;
        let snap = header
            .snapshots
            .iter()
            .find(|s| s.id == spec.snap_id)
            .cloned()
            .ok_or_else(|| Error::Corrupt {
                image: name.clone(),
                why: format!("snapshot {} that a clone reads from is gone", spec.snap_id),
            })?;
        let id = spec.image_id.clone();
        Image::open_loaded(pool, name, id, header, true, Some(snap)).await
    }

    async fn open_loaded(
        pool: &Pool,
        name: String,
        id: String,
        mut header: Header,
        read_only: bool,
        snap: Option<SnapInfo>,
    ) -> Result<Image> {
        if let Some(s) = &snap {
            header.size = s.size;
        }
        let data = match header.data_pool {
            Some(p) => pool.client().pool_by_id(p).map_err(|_| Error::Corrupt {
                image: name.clone(),
                why: format!("its data pool {p} no longer exists"),
            })?,
            None => pool.clone(),
        };
        let data = data.with_namespace(pool.namespace());
        // A writer watches the header: others reach it there to ask for
        // the lock, and the watch tells them it is alive.
        let watch = match read_only {
            true => None,
            false => Some(pool.watch(&header_object(&id)).await?),
        };
        let cookie = watch.as_ref().map_or(0, |w| w.cookie());
        let data_r = match &snap {
            Some(s) => data.at_snap(s.id),
            None => data.clone(),
        };
        let data_w = RwLock::new(Arc::new(with_context(&data, &header)));
        let inner = Inner {
            pool: pool.clone(),
            data_r,
            data_w,
            snap,
            data,
            name,
            id,
            header: RwLock::new(header),
            read_only,
            lock_change: tokio::sync::Mutex::new(()),
            owned: AtomicBool::new(false),
            exclusive: AtomicBool::new(false),
            io_gate: tokio::sync::RwLock::new(()),
            me: LockOwner::new(pool.client(), cookie),
            health: watch.as_ref().map(|w| w.health()),
            watch_timeout: watch
                .as_ref()
                .map_or(std::time::Duration::from_secs(30), |w| w.timeout()),
            watcher: Mutex::new(None),
            map: Mutex::new(None),
            map_update: tokio::sync::Mutex::new(()),
            stripes: (0..STRIPES).map(|_| tokio::sync::RwLock::new(())).collect(),
            parent: tokio::sync::OnceCell::new(),
        };
        let inner = Arc::new(inner);
        if let Some(w) = watch {
            let task = tokio::spawn(answer_notifies(w, Arc::downgrade(&inner)));
            *inner.watcher.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
        }
        Ok(Image { inner })
    }

    /// Whether this client keeps the lock when another asks for it
    /// (default: it gives it up after its writes in flight, as librbd).
    pub fn set_exclusive(&self, exclusive: bool) {
        self.inner.exclusive.store(exclusive, Ordering::Release);
    }

    /// The image's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The image's id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The header as this client last read or changed it.
    pub fn header(&self) -> Header {
        self.inner.header()
    }

    /// Bytes.
    pub fn size(&self) -> u64 {
        self.inner.header().size
    }

    /// Whether this client holds the image's exclusive lock.
    pub fn owns_lock(&self) -> bool {
        self.inner.owned.load(Ordering::Acquire)
    }

    /// Reads the header again (another client may have resized the image).
    pub async fn refresh(&self) -> Result<()> {
        let h = load_header(&self.inner.pool, &self.inner.name, &self.inner.id).await?;
        self.inner.set_header(h);
        Ok(())
    }

    /// What `rbd info` shows.
    pub fn info(&self) -> ImageInfo {
        let h = self.header();
        let data_pool = h.data_pool.map(|_| self.inner.data.name().to_string());
        ImageInfo {
            name: self.inner.name.clone(),
            id: self.inner.id.clone(),
            size: h.size,
            object_size: h.object_size(),
            order: h.order,
            objects: h.object_count(),
            features: features::names(h.features)
                .into_iter()
                .map(String::from)
                .collect(),
            block_name_prefix: crate::format::data_prefix(&self.inner.id)
                .trim_end_matches('.')
                .to_string(),
            data_pool,
            created_ms: h.created_ms,
            snapshot_count: h.snapshots.len(),
            snapshot: self.inner.snap.as_ref().map(|s| s.name.clone()),
            parent: self.inner.parent.get().map(|p| {
                let at = p.inner.snap.as_ref().map_or("", |s| s.name.as_str());
                format!("{}/{}@{at}", p.inner.pool.name(), p.inner.name)
            }),
            overlap: self.inner.parent_spec().map(|p| p.overlap),
        }
    }

    /// What `rbd info` shows, with a clone's parent named (it is opened
    /// to learn its name).
    pub async fn info_full(&self) -> Result<ImageInfo> {
        if let Some(p) = self.inner.parent_spec() {
            self.inner.parent_image(&p).await?;
        }
        Ok(self.info())
    }

    /// Reads `len` bytes at `offset`; never-written ranges read as zeros.
    pub async fn read(&self, offset: u64, len: u64) -> Result<Bytes> {
        let h = self.header();
        check_range(&self.inner.name, h.size, offset, len)?;
        let extents = object_extents(offset, len, h.order);
        if let [e] = extents[..] {
            let b = self.inner.read_extent(e).await?;
            return Ok(pad(b, e.len));
        }
        let mut buf = BytesMut::zeroed(usize::try_from(len).map_err(too_big)?);
        let mut set = JoinSet::new();
        for e in extents {
            let me = Arc::clone(&self.inner);
            set.spawn(async move { me.read_extent(e).await.map(|b| (e, b)) });
        }
        while let Some(r) = set.join_next().await {
            let (e, b) = r.map_err(joined)??;
            let at = e.buf_offset as usize;
            buf[at..at + b.len()].copy_from_slice(&b);
        }
        Ok(buf.freeze())
    }

    /// Writes `data` at `offset`.
    pub async fn write(&self, offset: u64, data: Bytes) -> Result<()> {
        let _gate = self.inner.io_gate.read().await;
        self.inner.writable().await?;
        let h = self.header();
        check_range(&self.inner.name, h.size, offset, data.len() as u64)?;
        let extents = object_extents(offset, data.len() as u64, h.order);
        if let [e] = extents[..] {
            return self.inner.write_extent(e, data).await;
        }
        let mut set = JoinSet::new();
        for e in extents {
            let me = Arc::clone(&self.inner);
            let at = e.buf_offset as usize;
            let piece = data.slice(at..at + e.len as usize);
            set.spawn(async move { me.write_extent(e, piece).await });
        }
        join_all(set).await
    }

    /// Discards `len` bytes at `offset`: they read as zeros afterwards and,
    /// where whole objects or their tails are discarded, stop taking space.
    pub async fn discard(&self, offset: u64, len: u64) -> Result<()> {
        let _gate = self.inner.io_gate.read().await;
        self.inner.writable().await?;
        let h = self.header();
        check_range(&self.inner.name, h.size, offset, len)?;
        let mut set = JoinSet::new();
        for e in object_extents(offset, len, h.order) {
            let me = Arc::clone(&self.inner);
            let h = h.clone();
            set.spawn(async move { me.discard_extent(&h, e).await });
        }
        join_all(set).await
    }

    /// Writes zeros over `len` bytes at `offset` (as a discard: the image is
    /// thin, so zeros need no space).
    pub async fn write_zeroes(&self, offset: u64, len: u64) -> Result<()> {
        self.discard(offset, len).await
    }

    /// Makes every completed write durable. Each write is acknowledged only
    /// once every OSD holding it has it in its store's journal, so there is
    /// nothing left to do: the call only checks the image is writable.
    pub async fn flush(&self) -> Result<()> {
        if self.inner.read_only {
            return Err(Error::ReadOnly(self.inner.name.clone()));
        }
        Ok(())
    }

    /// Sets the image's size; shrinking discards what lies past the new end.
    pub async fn resize(&self, size: u64) -> Result<()> {
        if size > crate::format::SIZE_MAX {
            return Err(Error::InvalidArgument(format!(
                "size {size} is beyond {}",
                crate::format::SIZE_MAX
            )));
        }
        let gate = self.inner.io_gate.read().await;
        self.inner.writable().await?;
        self.resize_held(size).await?;
        drop(gate);
        // Readers elsewhere learn the new size (best effort).
        let _ = lock::notify_header_update(&self.inner.pool, &self.inner.id).await;
        Ok(())
    }

    /// [`Image::resize`] once the lock is held.
    async fn resize_held(&self, size: u64) -> Result<()> {
        let old = self.header();
        let i = &self.inner;
        let mut h = Header {
            size,
            ..old.clone()
        };
        if let Some(p) = h.parent.as_mut().filter(|p| p.overlap > size) {
            // A clone shrunk reads no more of its parent past the new end,
            // even once grown again.
            p.overlap = size;
            i.put_parent(Some(p)).await?;
            i.set_header(Header {
                parent: Some(p.clone()),
                ..old.clone()
            });
        }
        let old = i.header();
        if size < old.size {
            // Data first: the header never claims less than what exists.
            let mut set = JoinSet::new();
            let (first, count) = (size >> old.order, old.object_count());
            for objno in first..count {
                let me = Arc::clone(i);
                let old = old.clone();
                let start = if objno == first {
                    size - (objno << old.order)
                } else {
                    0
                };
                let end = old.object_size().min(old.size - (objno << old.order));
                if start >= end {
                    continue;
                }
                let e = ObjectExtent {
                    objno,
                    offset: start,
                    len: end - start,
                    buf_offset: 0,
                };
                set.spawn(async move { me.discard_extent(&old, e).await });
                if set.len() >= PARALLEL {
                    join_one(&mut set).await?;
                }
            }
            join_all(set).await?;
        }
        let count = h.object_count();
        if h.features & features::OBJECT_MAP != 0 && count > old.object_count() {
            i.resize_map(count).await?;
        }
        i.pool
            .omap_set(
                &header_object(&i.id),
                &[("size", size.to_le_bytes().to_vec())],
            )
            .await?;
        i.set_header(h.clone());
        if h.features & features::OBJECT_MAP != 0 && count < old.object_count() {
            i.resize_map(count).await?;
        }
        Ok(())
    }

    /// The image's snapshots, oldest first.
    pub fn snapshots(&self) -> Vec<SnapInfo> {
        self.header().snapshots
    }

    /// The snapshot this image was opened at, if any.
    pub fn opened_at(&self) -> Option<&SnapInfo> {
        self.inner.snap.as_ref()
    }

    /// Takes snapshot `name` of the image: writes completed before it are
    /// in it, none after. Returns its id.
    pub async fn snap_create(&self, name: &str) -> Result<u64> {
        crate::format::check_name(name)?;
        let i = &self.inner;
        // No write of ours in flight across the snapshot.
        let _gate = i.io_gate.write().await;
        i.writable().await?;
        let mut h = self.header();
        if h.snapshot(name).is_some() {
            return Err(Error::SnapExists {
                image: i.name.clone(),
                snap: name.to_string(),
            });
        }
        let id = i.data.selfmanaged_snap_create().await?;
        let info = SnapInfo {
            id,
            name: name.to_string(),
            size: h.size,
            protected: false,
            created_ms: crate::rbd::now_ms(),
            parent: h.parent.clone(),
        };
        i.put_snap(&info).await?;
        h.snapshots.push(info);
        i.set_header(h);
        let _ = lock::notify_header_update(&i.pool, &i.id).await;
        Ok(id)
    }

    /// Removes snapshot `name` (refused while it is protected).
    pub async fn snap_remove(&self, name: &str) -> Result<()> {
        let i = &self.inner;
        let _gate = i.io_gate.read().await;
        i.writable().await?;
        let mut h = self.header();
        let info = i.snap_named(&h, name)?;
        if info.protected {
            return Err(Error::SnapProtected {
                image: i.name.clone(),
                snap: name.to_string(),
            });
        }
        i.pool
            .omap_rm_keys(&header_object(&i.id), &[crate::format::snap_key(info.id)])
            .await?;
        h.snapshots.retain(|s| s.id != info.id);
        let parent_left = info.parent.as_ref().filter(|p| !h.refers_to(p)).cloned();
        i.set_header(h);
        if let Some(p) = parent_left {
            i.leave_parent(&p).await?;
        }
        // The OSDs trim its clones.
        match i.data.selfmanaged_snap_remove(info.id).await {
            Ok(()) | Err(ClusterError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let _ = lock::notify_header_update(&i.pool, &i.id).await;
        Ok(())
    }

    /// Protects snapshot `name` (clones may be made of it; it may not be
    /// removed) or, with `protect` false, unprotects it.
    pub async fn snap_protect(&self, name: &str, protect: bool) -> Result<()> {
        let i = &self.inner;
        let _gate = i.io_gate.read().await;
        i.writable().await?;
        let mut h = self.header();
        let mut info = i.snap_named(&h, name)?;
        if !protect && info.protected {
            let children = crate::layering::children_of(&i.pool, &i.id, info.id).await?;
            if !children.is_empty() {
                let names: Vec<String> = children
                    .iter()
                    .map(|c| format!("{}/{}", c.pool, c.name))
                    .collect();
                return Err(Error::Busy {
                    image: format!("{}@{name}", i.name),
                    why: format!(
                        "it has clones: {} (flatten or remove them first)",
                        names.join(", ")
                    ),
                });
            }
        }
        info.protected = protect;
        i.put_snap(&info).await?;
        for s in &mut h.snapshots {
            if s.id == info.id {
                s.protected = protect;
            }
        }
        i.set_header(h);
        Ok(())
    }

    /// Rolls the image back to snapshot `name`: its size and every data
    /// object as they were then (the rollback is itself a change: later
    /// snapshots keep what they hold).
    pub async fn snap_rollback(&self, name: &str) -> Result<()> {
        let i = &self.inner;
        let _gate = i.io_gate.read().await;
        i.writable().await?;
        let info = i.snap_named(&self.header(), name)?;
        let head_parent = self.header().parent;
        match (&head_parent, &info.parent) {
            (None, Some(_)) => {
                return Err(Error::NotSupported(format!(
                    "rolling flattened clone {} back to snapshot {name}, taken while it read \
                     through to its parent",
                    i.name
                )));
            }
            (Some(hp), Some(sp)) if hp.overlap != sp.overlap => {
                let mut h = self.header();
                h.parent = Some(sp.clone());
                i.put_parent(h.parent.as_ref()).await?;
                i.set_header(h);
            }
            _ => {}
        }
        self.resize_held(info.size).await?;
        let h = self.header();
        let at = i.data.at_snap(info.id);
        let mut set = JoinSet::new();
        for objno in 0..h.object_count() {
            let (me, at) = (Arc::clone(i), at.clone());
            set.spawn(async move { me.roll_back_object(&at, objno).await });
            if set.len() >= PARALLEL {
                join_one(&mut set).await?;
            }
        }
        join_all(set).await?;
        let _ = lock::notify_header_update(&i.pool, &i.id).await;
        Ok(())
    }

    /// Flattens a clone: copies up every object it still reads from its
    /// parent, then forgets the parent (its snapshots keep reading through
    /// to it while they exist).
    pub async fn flatten(&self) -> Result<()> {
        let i = &self.inner;
        let _gate = i.io_gate.read().await;
        i.writable().await?;
        let h = self.header();
        let Some(p) = h.parent.clone() else {
            return Err(Error::InvalidArgument(format!(
                "image {} is not a clone",
                i.name
            )));
        };
        let count = object_count(p.overlap.min(h.size), h.order);
        let mut set = JoinSet::new();
        for objno in 0..count {
            let (me, p) = (Arc::clone(i), p.clone());
            set.spawn(async move {
                let _order = me.stripe(objno).read().await;
                if me.if_exists(objno, |o| o).await? {
                    return Ok(());
                }
                me.copy_up(&p, objno, true, |_| {}).await.map(|_| ())
            });
            if set.len() >= PARALLEL {
                join_one(&mut set).await?;
            }
        }
        join_all(set).await?;
        i.put_parent(None).await?;
        let mut h = self.header();
        h.parent = None;
        let still = h.refers_to(&p);
        i.set_header(h);
        if !still {
            i.leave_parent(&p).await?;
        }
        let _ = lock::notify_header_update(&i.pool, &i.id).await;
        Ok(())
    }

    /// The allocated ranges of `[offset, offset + len)`, `(offset, length)`
    /// in order: what lies outside them reads as zeros (thin images say
    /// what they hold; NBD's block status answers from this).
    pub async fn allocated(&self, offset: u64, len: u64) -> Result<Vec<(u64, u64)>> {
        let h = self.header();
        check_range(&self.inner.name, h.size, offset, len)?;
        let mut set = JoinSet::new();
        let mut found = Vec::new();
        for e in object_extents(offset, len, h.order) {
            let me = Arc::clone(&self.inner);
            let base = offset + e.buf_offset - e.offset;
            set.spawn(async move { me.allocated_extent(e, base).await });
            while set.len() >= PARALLEL {
                if let Some(r) = set.join_next().await {
                    found.extend(r.map_err(joined)??);
                }
            }
        }
        while let Some(r) = set.join_next().await {
            found.extend(r.map_err(joined)??);
        }
        found.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(found.len());
        for (o, n) in found {
            match out.last_mut() {
                Some((po, pn)) if *po + *pn == o => *pn += n,
                _ => out.push((o, n)),
            }
        }
        Ok(out)
    }

    /// The space the image's data objects take: their allocated bytes.
    pub async fn du(&self) -> Result<DiskUsage> {
        let h = self.header();
        let i = &self.inner;
        let mut usage = DiskUsage {
            provisioned: h.size,
            used: 0,
            objects: 0,
        };
        let known = i.map_snapshot();
        let mut set = JoinSet::new();
        for objno in 0..h.object_count() {
            if known
                .as_ref()
                .is_some_and(|m| m.get(objno as usize) == Some(&OBJECT_NONEXISTENT))
            {
                continue;
            }
            let data = i.data_r.clone();
            let oid = data_object(&i.id, objno);
            set.spawn(async move {
                match data.allocated(&oid, 0, 0).await {
                    Ok(ext) => Ok(Some(ext.iter().map(|(_, n)| n).sum())),
                    Err(ClusterError::NotFound(_)) => Ok(None),
                    Err(e) => Err(Error::from(e)),
                }
            });
            while set.len() >= PARALLEL {
                add_usage(&mut usage, set.join_next().await)?;
            }
        }
        while let Some(r) = set.join_next().await {
            add_usage(&mut usage, Some(r))?;
        }
        Ok(usage)
    }

    /// Takes the exclusive lock now (it is otherwise taken by the first change).
    pub async fn acquire_lock(&self) -> Result<()> {
        let _gate = self.inner.io_gate.read().await;
        self.inner.writable().await
    }

    /// Gives up the exclusive lock if this client holds it.
    pub async fn release_lock(&self) -> Result<()> {
        self.inner.release().await
    }

    /// Closes the image: gives up the lock and the header watch.
    pub async fn close(self) -> Result<()> {
        let r = self.inner.release().await;
        self.inner.stop_watching();
        if self.inner.health.is_some() {
            let cookie = self.inner.me.cookie();
            let header = header_object(&self.inner.id);
            self.inner.pool.unwatch(&header, cookie).await?;
        }
        r
    }
}

fn add_usage(
    usage: &mut DiskUsage,
    r: Option<std::result::Result<Result<Option<u64>>, tokio::task::JoinError>>,
) -> Result<()> {
    if let Some(r) = r
        && let Some(size) = r.map_err(joined)??
    {
        usage.used += size;
        usage.objects += 1;
    }
    Ok(())
}

/// A boxed future of a parent's answer: a clone's reads recurse through
/// its ancestors.
type Boxed<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T>> + Send + 'a>>;

/// A parent's read, boxed.
fn read_boxed(image: &Image, (offset, len): (u64, u64)) -> Boxed<'_, Bytes> {
    Box::pin(image.read(offset, len))
}

/// A parent's allocation, boxed as [`read_boxed`].
fn allocated_boxed(image: &Image, (offset, len): (u64, u64)) -> Boxed<'_, Vec<(u64, u64)>> {
    Box::pin(image.allocated(offset, len))
}

fn pad(b: Bytes, len: u64) -> Bytes {
    if b.len() as u64 >= len {
        return b;
    }
    let mut out = BytesMut::zeroed(len as usize);
    out[..b.len()].copy_from_slice(&b);
    out.freeze()
}

fn too_big(_: std::num::TryFromIntError) -> Error {
    Error::InvalidArgument("the range does not fit in memory".into())
}

pub(crate) fn joined(e: tokio::task::JoinError) -> Error {
    Error::Cluster(ClusterError::Internal(format!("an image task failed: {e}")))
}

pub(crate) async fn join_one(set: &mut JoinSet<Result<()>>) -> Result<()> {
    match set.join_next().await {
        Some(r) => r.map_err(joined)?,
        None => Ok(()),
    }
}

pub(crate) async fn join_all(mut set: JoinSet<Result<()>>) -> Result<()> {
    let mut first = Ok(());
    while let Some(r) = set.join_next().await {
        let r = r.map_err(joined).and_then(|r| r);
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// `data` with the snapshot context of header `h`'s snapshots.
fn with_context(data: &Pool, h: &Header) -> Pool {
    let (seq, snaps) = h.snap_context();
    match seq {
        0 => data.clone(),
        _ => data.with_snap_context(shoal_client::SnapContext { seq, snaps }),
    }
}

/// Answers the notifies on the header while the image is open.
async fn answer_notifies(mut w: shoal_client::Watch, image: std::sync::Weak<Inner>) {
    while let Some(ev) = w.next().await {
        let Some(i) = image.upgrade() else { return };
        let reply: &'static [u8] = match &ev.payload[..] {
            p if p == lock::REQUEST_LOCK => {
                if !i.owned.load(Ordering::Acquire) {
                    lock::NOT_OWNER
                } else if i.exclusive.load(Ordering::Acquire) {
                    lock::BUSY
                } else {
                    match i.release().await {
                        Ok(()) => lock::RELEASED,
                        Err(e) => {
                            tracing::warn!(image = %i.name, "giving up the lock: {e}");
                            lock::BUSY
                        }
                    }
                }
            }
            p if p == lock::HEADER_UPDATE => {
                if !i.owned.load(Ordering::Acquire)
                    && let Ok(h) = load_header(&i.pool, &i.name, &i.id).await
                {
                    i.set_header(h);
                }
                b""
            }
            _ => b"",
        };
        drop(i);
        ev.ack(Bytes::from_static(reply)).await;
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop_watching();
    }
}

impl Inner {
    fn stop_watching(&self) {
        if let Some(t) = self
            .watcher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            t.abort();
        }
    }

    fn header(&self) -> Header {
        self.with_header(Header::clone)
    }

    /// `f` of the header, read in place (no copy of its snapshot list on
    /// the I/O path).
    fn with_header<T>(&self, f: impl FnOnce(&Header) -> T) -> T {
        f(&self.header.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Takes a header read from the cluster (or changed here): a snapshot
    /// keeps its own size; writes take its snapshot context.
    fn set_header(&self, mut h: Header) {
        if let Some(s) = &self.snap {
            h.size = s.size;
        }
        *self.data_w.write().unwrap_or_else(|p| p.into_inner()) =
            Arc::new(with_context(&self.data, &h));
        *self.header.write().unwrap_or_else(|p| p.into_inner()) = h;
    }

    fn data_w(&self) -> Arc<Pool> {
        Arc::clone(&self.data_w.read().unwrap_or_else(|p| p.into_inner()))
    }

    fn snap_named(&self, h: &Header, name: &str) -> Result<SnapInfo> {
        h.snapshot(name).cloned().ok_or_else(|| Error::NoSnap {
            image: self.name.clone(),
            snap: name.to_string(),
        })
    }

    /// Persists the header's parent (None: removes it).
    async fn put_parent(&self, p: Option<&ParentSpec>) -> Result<()> {
        let header = header_object(&self.id);
        match p {
            Some(p) => {
                let v = crate::format::parent_value(p);
                self.pool.omap_set(&header, &[("parent", v)]).await?;
            }
            None => self.pool.omap_rm_keys(&header, &["parent"]).await?,
        }
        Ok(())
    }

    /// Nothing of this image refers to parent `p` any more: leave its list
    /// of children.
    async fn leave_parent(&self, p: &ParentSpec) -> Result<()> {
        let Ok(ppool) = self.pool.client().pool_by_id(p.pool) else {
            return Ok(());
        };
        let ppool = ppool.with_namespace(self.pool.namespace());
        crate::layering::unregister_child(&ppool, p, self.pool.id(), &self.id).await
    }

    async fn put_snap(&self, info: &SnapInfo) -> Result<()> {
        let v = serde_json::to_vec(info)
            .map_err(|e| Error::InvalidArgument(format!("snapshot record: {e}")))?;
        self.pool
            .omap_set(
                &header_object(&self.id),
                &[(crate::format::snap_key(info.id), v)],
            )
            .await?;
        Ok(())
    }

    /// Data object `objno` as it was at the snapshot `at` reads.
    async fn roll_back_object(&self, at: &Pool, objno: u64) -> Result<()> {
        let oid = data_object(&self.id, objno);
        match at.read(&oid, 0, 0).await {
            Ok(b) => {
                let _order = self.stripe(objno).read().await;
                self.mark_exists(objno).await?;
                self.data_w().write_full(&oid, b).await?;
                Ok(())
            }
            Err(ClusterError::NotFound(_)) => {
                let _order = self.stripe(objno).write().await;
                match self.data_w().remove(&oid).await {
                    Ok(()) | Err(ClusterError::NotFound(_)) => {}
                    Err(e) => return Err(e.into()),
                }
                self.mark_removed(objno).await
            }
            Err(e) => Err(e.into()),
        }
    }

    fn map_snapshot(&self) -> Option<Vec<u8>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The object map's state for `objno`, if the map is known.
    fn map_state(&self, objno: u64) -> Option<u8> {
        let m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        m.as_ref()
            .map(|m| m.get(objno as usize).copied().unwrap_or(OBJECT_EXISTS))
    }

    fn stripe(&self, objno: u64) -> &tokio::sync::RwLock<()> {
        &self.stripes[(objno % STRIPES) as usize]
    }

    async fn read_extent(&self, e: ObjectExtent) -> Result<Bytes> {
        if self.map_state(e.objno) != Some(OBJECT_NONEXISTENT) {
            let oid = data_object(&self.id, e.objno);
            match self.data_r.read(&oid, e.offset, e.len).await {
                Ok(b) => return Ok(b),
                Err(ClusterError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // Never written here: a clone reads its parent's data.
        let Some((p, start, n)) = self.through_parent(e) else {
            return Ok(Bytes::new());
        };
        let parent = self.parent_image(&p).await?;
        read_boxed(parent, (start, n)).await
    }

    /// The allocated ranges of extent `e` (whose object starts at image
    /// offset `base`), in image offsets: a clone's object it lacks answers
    /// for its parent's data.
    async fn allocated_extent(&self, e: ObjectExtent, base: u64) -> Result<Vec<(u64, u64)>> {
        if self.map_state(e.objno) != Some(OBJECT_NONEXISTENT) {
            let oid = data_object(&self.id, e.objno);
            match self.data_r.allocated(&oid, e.offset, e.len).await {
                Ok(v) => return Ok(v.into_iter().map(|(o, n)| (base + o, n)).collect()),
                Err(ClusterError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let Some((p, start, n)) = self.through_parent(e) else {
            return Ok(Vec::new());
        };
        let parent = self.parent_image(&p).await?;
        allocated_boxed(parent, (start, n)).await
    }

    /// Where extent `e` of an object this image lacks reads from its
    /// parent: the parent, the image offset and the length within the
    /// overlap (None: not a clone, or past the overlap).
    fn through_parent(&self, e: ObjectExtent) -> Option<(ParentSpec, u64, u64)> {
        let p = self.parent_spec()?;
        let start = (e.objno << self.with_header(|h| h.order)) + e.offset;
        let n = e.len.min(p.overlap.checked_sub(start)?);
        (n > 0).then_some((p, start, n))
    }

    /// The parent this view reads through to: a snapshot's as it was
    /// taken, else the head's.
    fn parent_spec(&self) -> Option<ParentSpec> {
        match &self.snap {
            Some(s) => s.parent.clone(),
            None => self.with_header(|h| h.parent.clone()),
        }
    }

    async fn parent_image(&self, p: &ParentSpec) -> Result<&Image> {
        self.parent
            .get_or_try_init(|| async {
                let pool = self
                    .pool
                    .client()
                    .pool_by_id(p.pool)
                    .map_err(|_| Error::Corrupt {
                        image: self.name.clone(),
                        why: format!("the pool {} of its parent no longer exists", p.pool),
                    })?;
                let pool = pool.with_namespace(self.pool.namespace());
                Box::pin(Image::open_parent(&pool, p)).await
            })
            .await
    }

    /// The parent a change of object `objno` copies up from first, if the
    /// object lies within a clone's overlap.
    fn copy_up_parent(&self, objno: u64) -> Option<ParentSpec> {
        self.with_header(|h| {
            let p = h.parent.as_ref()?;
            ((objno << h.order) < p.overlap).then(|| p.clone())
        })
    }

    /// Makes object `objno`, which this clone lacks, from its parent's
    /// data (within the overlap) with `patch` applied — unless it exists by
    /// now (false). `skip_zeros`: make nothing where the parent holds only
    /// zeros (flatten).
    async fn copy_up(
        &self,
        p: &ParentSpec,
        objno: u64,
        skip_zeros: bool,
        patch: impl FnOnce(&mut Vec<u8>),
    ) -> Result<bool> {
        let h = self.header();
        let start = objno << h.order;
        let n = h
            .object_size()
            .min(p.overlap.saturating_sub(start))
            .min(h.size.saturating_sub(start));
        let mut buf = if n == 0 {
            Vec::new()
        } else {
            let parent = self.parent_image(p).await?;
            read_boxed(parent, (start, n)).await?.to_vec()
        };
        let zeros = buf.iter().all(|b| *b == 0);
        if skip_zeros && zeros {
            return Ok(true);
        }
        patch(&mut buf);
        self.mark_exists(objno).await?;
        let mut op = Op::new().create(true);
        if buf.iter().any(|b| *b != 0) {
            op = op.write(0, Bytes::from(buf));
        }
        let oid = data_object(&self.id, objno);
        match self.data_w().operate(&oid, op).await {
            Ok(_) => Ok(true),
            Err(shoal_client::OpError {
                error: ClusterError::Exists(_),
                ..
            }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Runs the op `build` makes on a clone's object `objno` if it exists
    /// (true), else nothing (false: it is copied up first).
    async fn if_exists(&self, objno: u64, build: impl FnOnce(Op) -> Op) -> Result<bool> {
        if self.map_state(objno) == Some(OBJECT_NONEXISTENT) {
            return Ok(false);
        }
        let oid = data_object(&self.id, objno);
        let op = build(Op::new().assert_exists());
        match self.data_w().operate(&oid, op).await {
            Ok(_) => Ok(true),
            Err(shoal_client::OpError {
                error: ClusterError::NotFound(_),
                ..
            }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    async fn write_extent(&self, e: ObjectExtent, data: Bytes) -> Result<()> {
        let _order = self.stripe(e.objno).read().await;
        let oid = data_object(&self.id, e.objno);
        if let Some(p) = self.copy_up_parent(e.objno) {
            // A clone's object is made whole from its parent on its first
            // write, so what the write does not cover still reads the same.
            let piece = data.clone();
            if self
                .if_exists(e.objno, |o| o.write(e.offset, piece))
                .await?
            {
                return Ok(());
            }
            let (at, piece) = (e.offset as usize, data.clone());
            let patch = move |b: &mut Vec<u8>| {
                if b.len() < at + piece.len() {
                    b.resize(at + piece.len(), 0);
                }
                b[at..at + piece.len()].copy_from_slice(&piece);
            };
            if self.copy_up(&p, e.objno, false, patch).await? {
                return Ok(());
            }
        }
        self.mark_exists(e.objno).await?;
        self.data_w().write(&oid, e.offset, data).await?;
        Ok(())
    }

    async fn discard_extent(&self, h: &Header, e: ObjectExtent) -> Result<()> {
        let object_end = h.object_size().min(h.size - (e.objno << h.order));
        let oid = data_object(&self.id, e.objno);
        let tail = e.offset + e.len >= object_end;
        let op = |base: Op| match tail {
            true => base.truncate(e.offset),
            false => base.zero(e.offset, e.len),
        };
        if let Some(p) = self.copy_up_parent(e.objno) {
            // A clone's object stays (empty, or made from its parent and
            // then cut): were it removed, reads would see the parent again.
            let _order = self.stripe(e.objno).read().await;
            if self.if_exists(e.objno, op).await? {
                return Ok(());
            }
            let (at, len) = (e.offset as usize, e.len as usize);
            let patch = move |b: &mut Vec<u8>| match tail {
                true => b.truncate(at),
                false => {
                    let end = (at + len).min(b.len());
                    if at < end {
                        b[at..end].fill(0);
                    }
                }
            };
            if self.copy_up(&p, e.objno, false, patch).await? {
                return Ok(());
            }
            self.data_w().operate(&oid, op(Op::new())).await?;
            return Ok(());
        }
        if self.map_state(e.objno) == Some(OBJECT_NONEXISTENT) {
            return Ok(());
        }
        let ignore_absent = |r: std::result::Result<_, shoal_client::OpError>| match r {
            Ok(_) => Ok(()),
            Err(shoal_client::OpError {
                error: ClusterError::NotFound(_),
                ..
            }) => Ok(()),
            Err(e) => Err(Error::from(e)),
        };
        if e.offset == 0 && tail {
            let _order = self.stripe(e.objno).write().await;
            ignore_absent(self.data_w().operate(&oid, Op::new().remove()).await)?;
            return self.mark_removed(e.objno).await;
        }
        let _order = self.stripe(e.objno).read().await;
        ignore_absent(
            self.data_w()
                .operate(&oid, op(Op::new().assert_exists()))
                .await,
        )
    }

    /// Persists "exists" for `objno` before its first write.
    async fn mark_exists(&self, objno: u64) -> Result<()> {
        if self.map_state(objno) != Some(OBJECT_NONEXISTENT) {
            return Ok(());
        }
        let _g = self.map_update.lock().await;
        if self.map_state(objno) != Some(OBJECT_NONEXISTENT) {
            return Ok(());
        }
        self.set_map(objno, OBJECT_EXISTS).await
    }

    /// Persists "nonexistent" for `objno` after its removal.
    async fn mark_removed(&self, objno: u64) -> Result<()> {
        if self.map_state(objno).is_none() {
            return Ok(());
        }
        let _g = self.map_update.lock().await;
        self.set_map(objno, OBJECT_NONEXISTENT).await
    }

    async fn set_map(&self, objno: u64, state: u8) -> Result<()> {
        let oid = object_map_object(&self.id);
        self.pool
            .write(&oid, objno, Bytes::copy_from_slice(&[state]))
            .await?;
        if let Some(m) = self.map.lock().unwrap_or_else(|p| p.into_inner()).as_mut()
            && let Some(s) = m.get_mut(objno as usize)
        {
            *s = state;
        }
        Ok(())
    }

    /// Sets the object map's length to `count` objects (new ones nonexistent).
    async fn resize_map(&self, count: u64) -> Result<()> {
        let _g = self.map_update.lock().await;
        let oid = object_map_object(&self.id);
        self.pool.truncate(&oid, count).await?;
        if let Some(m) = self.map.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            m.resize(count as usize, OBJECT_NONEXISTENT);
        }
        Ok(())
    }

    /// Loads the object map (after taking the lock). A missing map or one of
    /// the wrong length is rebuilt conservatively: every object "exists".
    async fn load_map(&self) -> Result<()> {
        let h = self.header();
        if h.features & features::OBJECT_MAP == 0 {
            return Ok(());
        }
        let count = object_count(h.size, h.order);
        let oid = object_map_object(&self.id);
        let mut map = Vec::with_capacity(count as usize);
        let mut valid = true;
        while (map.len() as u64) < count {
            let at = map.len() as u64;
            let want = MAP_READ_BYTES.min(count - at);
            match self.pool.read(&oid, at, want).await {
                Ok(b) if b.len() as u64 == want => map.extend_from_slice(&b),
                Ok(_) | Err(ClusterError::NotFound(_)) => {
                    valid = false;
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
        if !valid {
            tracing::warn!(
                image = %self.name,
                "the object map is missing or short: rebuilding it as every object existing"
            );
            map = vec![OBJECT_EXISTS; count as usize];
            let mut at = 0usize;
            while at < map.len() {
                let n = (map.len() - at).min(MAP_READ_BYTES as usize);
                let part = Bytes::copy_from_slice(&map[at..at + n]);
                self.pool.write(&oid, at as u64, part).await?;
                at += n;
            }
            self.pool.truncate(&oid, count).await?;
        }
        *self.map.lock().unwrap_or_else(|p| p.into_inner()) = Some(map);
        Ok(())
    }

    /// Checks the image may change and takes the exclusive lock if the
    /// image has one and this client does not hold it yet.
    pub(crate) async fn writable(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly(self.name.clone()));
        }
        let standing = || self.health.as_ref().is_none_or(|h| h.healthy());
        if self.owned.load(Ordering::Acquire) && standing() {
            return Ok(());
        }
        let _g = self.lock_change.lock().await;
        if self.owned.load(Ordering::Acquire) {
            if standing() {
                return Ok(());
            }
            // Our watch lapsed: another client may have broken the lock.
            // Stop writing as its owner until we hold it again.
            tracing::warn!(image = %self.name, "the header watch lapsed: taking the lock again");
            self.owned.store(false, Ordering::Release);
            *self.map.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        let h = self.header();
        if h.features & features::EXCLUSIVE_LOCK != 0 {
            lock::acquire(
                &self.pool,
                &self.name,
                &self.id,
                &self.me,
                self.watch_timeout,
            )
            .await?;
            // The previous owner may have resized the image.
            match load_header(&self.pool, &self.name, &self.id).await {
                Ok(h) => self.set_header(h),
                Err(e) => {
                    let _ = lock::release(&self.pool, &self.id, &self.me).await;
                    return Err(e);
                }
            }
            if let Err(e) = self.load_map().await {
                let _ = lock::release(&self.pool, &self.id, &self.me).await;
                return Err(e);
            }
        }
        self.owned.store(true, Ordering::Release);
        Ok(())
    }

    async fn release(&self) -> Result<()> {
        let _gate = self.io_gate.write().await;
        let _g = self.lock_change.lock().await;
        if !self.owned.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        *self.map.lock().unwrap_or_else(|p| p.into_inner()) = None;
        if self.header().features & features::EXCLUSIVE_LOCK != 0 {
            lock::release(&self.pool, &self.id, &self.me).await?;
        }
        Ok(())
    }
}

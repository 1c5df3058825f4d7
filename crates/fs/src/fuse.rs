//! `shoal fs mount`: the kernel's FUSE requests served by an [`FsClient`].
//!
//! fuser calls each method on one thread; every method hands its work to
//! a tokio task with the reply, so requests run concurrently. The kernel
//! checks permissions itself (`default_permissions`) from the attributes
//! given here; attributes and entries are cached by the kernel for
//! [`TTL`], and every `open` fetches fresh attributes, makes the kernel
//! drop its cached attributes (a notification: the kernel reads up to the
//! size it holds) and its cached pages, which gives close-to-open
//! consistency between clients. An open of an inode that is gone or no
//! longer linked (the name was renamed over or removed by another client
//! while this kernel cached it) answers `ESTALE`, and the kernel looks the
//! path up again.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use fuser::{
    FileAttr, FileType, Filesystem, KernelConfig, Notifier, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow,
};

use crate::client::FsClient;
use crate::msg::{CAP_CREATE, CAP_EXCL, Errno, Op, Out, SetAttr};
use crate::types::{Dentry, FILE_SIZE_MAX, Inode, Kind, NAME_MAX, PATH_MAX, now_ns};

/// How long the kernel may cache attributes and entries.
pub const TTL: Duration = Duration::from_secs(1);

/// A directory's entries as one `opendir` read them: (inode, type, name).
type Listing = Vec<(u64, FileType, String)>;

/// The FUSE file system.
pub struct ShoalFuse {
    c: Arc<FsClient>,
    rt: tokio::runtime::Handle,
    next_fh: AtomicU64,
    listings: Arc<Mutex<HashMap<u64, Listing>>>,
    notifier: Arc<OnceLock<Notifier>>,
}

impl std::fmt::Debug for ShoalFuse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShoalFuse").finish_non_exhaustive()
    }
}

impl ShoalFuse {
    /// Serves `c` with tasks on `rt`.
    pub fn new(c: Arc<FsClient>, rt: tokio::runtime::Handle) -> ShoalFuse {
        ShoalFuse {
            c,
            rt,
            next_fh: AtomicU64::new(1),
            listings: Arc::default(),
            notifier: Arc::default(),
        }
    }

    /// Where the session's notifier goes once the session exists (the
    /// session owns this value): opens tell the kernel through it that
    /// its cached attributes are stale.
    pub fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
        Arc::clone(&self.notifier)
    }
}

fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::from_nanos(ns.unsigned_abs()))
            .unwrap_or(UNIX_EPOCH)
    }
}

fn ns_of(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_nanos()).unwrap_or(i64::MAX),
    }
}

fn ns_of_t(t: TimeOrNow) -> i64 {
    match t {
        TimeOrNow::Now => now_ns(),
        TimeOrNow::SpecificTime(t) => ns_of(t),
    }
}

fn file_type(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Char => FileType::CharDevice,
        Kind::Block => FileType::BlockDevice,
        Kind::Socket => FileType::Socket,
    }
}

/// The attributes the kernel sees.
pub fn attr(i: &Inode) -> FileAttr {
    FileAttr {
        ino: i.ino,
        size: i.size,
        blocks: i.size.div_ceil(512),
        atime: time(i.atime),
        mtime: time(i.mtime),
        ctime: time(i.ctime),
        crtime: time(i.ctime),
        kind: file_type(i.kind),
        perm: (i.perm & 0o7777) as u16,
        nlink: i.nlink,
        uid: i.uid,
        gid: i.gid,
        rdev: i.rdev,
        blksize: 4 << 20,
        flags: 0,
    }
}

fn name_of(name: &OsStr) -> Result<String, Errno> {
    let n = name
        .to_str()
        .ok_or_else(|| Errno::new(libc::EINVAL, "names must be UTF-8"))?;
    if n.len() > NAME_MAX {
        return Err(Errno::new(libc::ENAMETOOLONG, "name longer than 255 bytes"));
    }
    Ok(n.to_string())
}

fn inode_of(out: Out) -> Result<(Inode, u32, u32), Errno> {
    match out {
        Out::Inode {
            inode,
            caps,
            dir_caps,
        } => Ok((inode, caps, dir_caps)),
        _ => Err(Errno::new(libc::EIO, "the MDS answered something else")),
    }
}

/// An inode's attributes: cached if fresh, else from the MDS.
async fn getattr(c: &FsClient, ino: u64, fresh: Duration) -> Result<Inode, Errno> {
    if let Some(i) = c.cached(ino, fresh) {
        return Ok(i);
    }
    let (i, caps, _) = inode_of(c.request(Op::Getattr { ino }, 0, 0).await?)?;
    c.learn(&i, caps);
    Ok(c.cached(ino, Duration::MAX).unwrap_or(i))
}

/// Makes an entry without waiting, when the client holds CAP_CREATE on
/// the directory, knows the name absent and has a preallocated inode
/// number; `None` otherwise (ask the MDS: [`make`]).
#[allow(clippy::too_many_arguments)]
fn make_local(
    c: &FsClient,
    uid: u32,
    gid: u32,
    parent: u64,
    name: &str,
    kind: Kind,
    perm: u32,
    rdev: u32,
    target: Option<&String>,
) -> Option<Inode> {
    if c.caps(parent) & CAP_CREATE != 0
        && let Some(p) = c.cached(parent, Duration::MAX)
        && c.known_absent(parent, name)
        && let Some(ino) = c.take_ino()
    {
        let now = now_ns();
        let mut gid = gid;
        let mut perm = perm & 0o7777;
        if p.perm & libc::S_ISGID != 0 {
            gid = p.gid;
            if kind == Kind::Dir {
                perm |= libc::S_ISGID;
            }
        }
        let mut i = Inode::new(ino, kind, perm, uid, gid, now);
        i.rdev = rdev;
        if kind == Kind::Symlink {
            i.size = target.map_or(0, |t| t.len() as u64);
            i.target = target.cloned();
        }
        if kind == Kind::Dir {
            i.parent = parent;
        }
        let tid = c.send_async(
            Op::Make {
                parent,
                name: name.to_string(),
                kind,
                perm,
                rdev,
                target: target.cloned(),
                ino: Some(ino),
                time: Some(now),
            },
            uid,
            gid,
        );
        c.learn(&i, if kind == Kind::File { CAP_EXCL } else { 0 });
        c.note_entry(parent, name, true);
        c.touch_dir(parent, kind == Kind::Dir, now, tid);
        if kind == Kind::Dir {
            c.made_dir(ino);
        }
        return Some(i);
    }
    None
}

/// Makes an entry: without waiting if it can ([`make_local`]), else by
/// asking the MDS.
#[allow(clippy::too_many_arguments)]
async fn make(
    c: &FsClient,
    uid: u32,
    gid: u32,
    parent: u64,
    name: String,
    kind: Kind,
    perm: u32,
    rdev: u32,
    target: Option<String>,
) -> Result<Inode, Errno> {
    if let Some(i) = make_local(
        c,
        uid,
        gid,
        parent,
        &name,
        kind,
        perm,
        rdev,
        target.as_ref(),
    ) {
        return Ok(i);
    }
    let op = Op::Make {
        parent,
        name: name.clone(),
        kind,
        perm,
        rdev,
        target,
        ino: None,
        time: None,
    };
    let (i, caps, dir_caps) = inode_of(c.request(op, uid, gid).await?)?;
    c.learn(&i, caps);
    c.forget(parent);
    if dir_caps & CAP_CREATE != 0 {
        // The MDS says we are alone in the directory, but we do not know
        // its every entry unless we made it: lookups there still ask.
        c.add_caps(parent, CAP_CREATE);
    }
    c.note_entry(parent, &name, true);
    if kind == Kind::Dir {
        c.made_dir(i.ino);
    }
    Ok(i)
}

impl Filesystem for ShoalFuse {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        let _ = config.set_max_write(1 << 20);
        Ok(())
    }

    fn destroy(&mut self) {
        let c = Arc::clone(&self.c);
        let _ = self.rt.block_on(async move {
            tokio::time::timeout(Duration::from_secs(10), c.sync(None)).await
        });
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let name = name_of(name);
        // Answered here, without a hop to another thread, when it can be.
        if let Ok(n) = &name
            && self.c.known_absent(parent, n)
        {
            reply.error(libc::ENOENT);
            return;
        }
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            let r: Result<_, Errno> = async {
                let name = name?;
                if c.known_absent(parent, &name) {
                    return Err(Errno::new(libc::ENOENT, "absent"));
                }
                let (i, caps, _) = inode_of(c.request(Op::Lookup { parent, name }, 0, 0).await?)?;
                c.learn(&i, caps);
                Ok(c.cached(i.ino, Duration::MAX).unwrap_or(i))
            }
            .await;
            match r {
                Ok(i) => reply.entry(&TTL, &attr(&i), 0),
                Err(e) => reply.error(e.errno),
            }
        });
    }

    fn forget(&mut self, _req: &Request<'_>, ino: u64, _nlookup: u64) {
        self.c.forget(ino);
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        if let Some(i) = self.c.cached(ino, TTL) {
            reply.attr(&TTL, &attr(&i));
            return;
        }
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            match getattr(&c, ino, TTL).await {
                Ok(i) => reply.attr(&TTL, &attr(&i)),
                Err(e) => reply.error(e.errno),
            }
        });
    }

    fn setattr(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr {
            perm: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(ns_of_t),
            mtime: mtime.map(ns_of_t),
            ctime: ctime.map(ns_of),
        };
        let (ruid, rgid) = (req.uid(), req.gid());
        if set.size.is_none() {
            let mut local = set.clone();
            if local.ctime.is_none() {
                local.ctime = Some(now_ns());
            }
            if let Some(i) = self.c.set_local(ino, &local) {
                reply.attr(&TTL, &attr(&i));
                return;
            }
        }
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            let r: Result<_, Errno> = async {
                if set.size.is_some_and(|s| s > FILE_SIZE_MAX) {
                    return Err(Errno::new(libc::EFBIG, "too large"));
                }
                if set.size.is_none() {
                    let mut local = set.clone();
                    if local.ctime.is_none() {
                        local.ctime = Some(now_ns());
                    }
                    if let Some(i) = c.set_local(ino, &local) {
                        return Ok(i);
                    }
                }
                c.wait_writes(Some(ino)).await;
                c.flush_dirty(ino);
                let (i, caps, _) =
                    inode_of(c.request(Op::Setattr { ino, set }, ruid, rgid).await?)?;
                c.learn(&i, caps);
                Ok(c.cached(ino, Duration::MAX).unwrap_or(i))
            }
            .await;
            match r {
                Ok(i) => reply.attr(&TTL, &attr(&i)),
                Err(e) => reply.error(e.errno),
            }
        });
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            match getattr(&c, ino, Duration::from_secs(60)).await {
                Ok(i) => match i.target {
                    Some(t) => reply.data(t.as_bytes()),
                    None => reply.error(libc::EINVAL),
                },
                Err(e) => reply.error(e.errno),
            }
        });
    }

    fn mknod(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let name = name_of(name);
        let (uid, gid) = (req.uid(), req.gid());
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            let r: Result<_, Errno> = async {
                let kind =
                    Kind::from_mode(mode).ok_or_else(|| Errno::new(libc::EINVAL, "bad mode"))?;
                if kind == Kind::Dir || kind == Kind::Symlink {
                    return Err(Errno::new(
                        libc::EINVAL,
                        "mknod makes no directories or links",
                    ));
                }
                make(&c, uid, gid, parent, name?, kind, mode, rdev, None).await
            }
            .await;
            match r {
                Ok(i) => reply.entry(&TTL, &attr(&i), 0),
                Err(e) => reply.error(e.errno),
            }
        });
    }

    fn mkdir(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let name = name_of(name);
        let (uid, gid) = (req.uid(), req.gid());
        if let Ok(n) = &name
            && let Some(i) = make_local(&self.c, uid, gid, parent, n, Kind::Dir, mode, 0, None)
        {
            reply.entry(&TTL, &attr(&i), 0);
            return;
        }
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            let r: Result<_, Errno> =
                async { make(&c, uid, gid, parent, name?, Kind::Dir, mode, 0, None).await }.await;
            match r {
                Ok(i) => reply.entry(&TTL, &attr(&i), 0),
                Err(e) => reply.error(e.errno),
            }
        });
    }

    fn symlink(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let name = name_of(link_name);
        let target = target.to_str().map(str::to_string);
        let (uid, gid) = (req.uid(), req.gid());
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            let r: Result<_, Errno> = async {
                let t = target.ok_or_else(|| Errno::new(libc::EINVAL, "targets must be UTF-8"))?;
                if t.len() >= PATH_MAX {
                    return Err(Errno::new(libc::ENAMETOOLONG, "target too long"));
                }
                make(
                    &c,
                    uid,
                    gid,
                    parent,
                    name?,
                    Kind::Symlink,
                    0o777,
                    0,
                    Some(t),
                )
                .await
            }
            .await;
            match r {
                Ok(i) => reply.entry(&TTL, &attr(&i), 0),
                Err(e) => reply.error(e.errno),
            }
        });
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, false, reply);
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, true, reply);
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        let (name, newname) = (name_of(name), name_of(newname));
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            let r: Result<_, Errno> = async {
                let (name, newname) = (name?, newname?);
                let noreplace = flags & libc::RENAME_NOREPLACE != 0;
                let exchange = flags & libc::RENAME_EXCHANGE != 0;
                if flags & !(libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE) != 0 {
                    return Err(Errno::new(libc::EINVAL, "unsupported rename flags"));
                }
                let op = Op::Rename {
                    parent,
                    name: name.clone(),
                    newparent,
                    newname: newname.clone(),
                    noreplace,
                    exchange,
                };
                let out = c.request(op, 0, 0).await?;
                c.learn_changed(&out);
                if !exchange {
                    c.note_entry(parent, &name, false);
                }
                c.note_entry(newparent, &newname, true);
                for ino in [parent, newparent] {
                    c.forget(ino);
                }
                Ok(())
            }
            .await;
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e.errno),
            }
        });
    }

    fn link(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let name = name_of(newname);
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            let r: Result<_, Errno> = async {
                let name = name?;
                c.flush_dirty(ino);
                let (i, caps, _) = inode_of(
                    c.request(
                        Op::Link {
                            ino,
                            parent: newparent,
                            name: name.clone(),
                        },
                        0,
                        0,
                    )
                    .await?,
                )?;
                c.learn(&i, caps);
                c.note_entry(newparent, &name, true);
                c.forget(newparent);
                Ok(c.cached(ino, Duration::MAX).unwrap_or(i))
            }
            .await;
            match r {
                Ok(i) => reply.entry(&TTL, &attr(&i), 0),
                Err(e) => reply.error(e.errno),
            }
        });
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
        if self.c.caps(ino) & CAP_EXCL != 0 {
            // Ours alone: the MDS counts the open when it comes.
            self.c.opened(ino);
            self.c.send_async(Op::Open { ino, write }, 0, 0);
            reply.opened(0, 0);
            return;
        }
        let c = Arc::clone(&self.c);
        let notifier = Arc::clone(&self.notifier);
        self.rt.spawn(async move {
            let r: Result<_, Errno> = async {
                c.opened(ino);
                if c.caps(ino) & CAP_EXCL != 0 {
                    // Ours alone: the MDS counts the open when it comes.
                    c.send_async(Op::Open { ino, write }, 0, 0);
                    return Ok(());
                }
                match c
                    .request(Op::Open { ino, write }, 0, 0)
                    .await
                    .and_then(inode_of)
                {
                    Ok((i, _, _)) if i.nlink == 0 => {
                        // Unlinked by another client since this kernel
                        // looked the name up: have it look again.
                        c.closed(ino);
                        c.send_async(Op::Release { ino }, 0, 0);
                        Err(Errno::new(libc::ESTALE, "no longer linked"))
                    }
                    Ok((i, caps, _)) => {
                        c.learn(&i, caps);
                        // The kernel answers reads up to the size it holds:
                        // make it ask again (ENOENT: it holds nothing).
                        if let Some(n) = notifier.get()
                            && let Err(e) = n.inval_inode(ino, -1, 0)
                        {
                            tracing::warn!(ino, "attribute invalidation failed: {e}");
                        }
                        Ok(())
                    }
                    Err(e) => {
                        c.closed(ino);
                        Err(if e.errno == libc::ENOENT {
                            Errno::new(libc::ESTALE, "the inode is gone")
                        } else {
                            e
                        })
                    }
                }
            }
            .await;
            match r {
                Ok(()) => reply.opened(0, 0),
                Err(e) => reply.error(e.errno),
            }
        });
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            let r: Result<_, Errno> = async {
                c.wait_writes(Some(ino)).await;
                let i = getattr(&c, ino, Duration::from_secs(3600)).await?;
                c.read(ino, offset.max(0) as u64, u64::from(size), i.size)
                    .await
            }
            .await;
            match r {
                Ok(b) => reply.data(&b),
                Err(e) => reply.error(e.errno),
            }
        });
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        let data = Bytes::copy_from_slice(data);
        // A file this client holds alone: the data goes to the OSDs in the
        // background (reads, truncates, fsync and revokes wait for it).
        let off = offset.max(0) as u64;
        let end = off.saturating_add(data.len() as u64);
        if self.c.caps(ino) & CAP_EXCL != 0
            && end <= FILE_SIZE_MAX
            && let Some(i) = self.c.cached(ino, Duration::MAX)
        {
            let n = data.len() as u32;
            let _guard = self.rt.enter();
            if self.c.write_behind(ino, off, data.clone()) {
                let now = now_ns();
                let set = SetAttr {
                    size: (end > i.size).then_some(end),
                    mtime: Some(now),
                    ctime: Some(now),
                    ..SetAttr::default()
                };
                if self.c.set_local(ino, &set).is_some() {
                    reply.written(n);
                    return;
                }
                // The capability went meanwhile: wait for the data, tell
                // the MDS.
                let c = Arc::clone(&self.c);
                self.rt.spawn(async move {
                    c.wait_writes(Some(ino)).await;
                    let r = match c.take_write_error(ino) {
                        Some(e) => Err(e),
                        None => c.request(Op::Flush { ino, set }, 0, 0).await.map(|_| ()),
                    };
                    match r {
                        Ok(()) => reply.written(n),
                        Err(e) => reply.error(e.errno),
                    }
                });
                return;
            }
        }
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            let r: Result<_, Errno> = async {
                let off = offset.max(0) as u64;
                let end = off.saturating_add(data.len() as u64);
                if end > FILE_SIZE_MAX {
                    return Err(Errno::new(libc::EFBIG, "beyond the largest file size"));
                }
                let n = data.len() as u32;
                // After the inode's writes behind (a refused one may still
                // be retried): an older write never lands over this one.
                c.wait_writes(Some(ino)).await;
                c.write(ino, off, data).await?;
                let i = getattr(&c, ino, Duration::from_secs(3600)).await?;
                let now = now_ns();
                let set = SetAttr {
                    size: (end > i.size).then_some(end),
                    mtime: Some(now),
                    ctime: Some(now),
                    ..SetAttr::default()
                };
                if c.set_local(ino, &set).is_none() {
                    // Shared with another client: tell the MDS now.
                    let (i, caps, _) = inode_of(c.request(Op::Flush { ino, set }, 0, 0).await?)?;
                    c.learn(&i, caps);
                }
                Ok(n)
            }
            .await;
            match r {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(e.errno),
            }
        });
    }

    fn flush(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        _lock_owner: u64,
        reply: ReplyEmpty,
    ) {
        // Close does not mean fsync: once the data written is durable, what
        // changed goes to the MDS, unawaited. But a data write that failed
        // is the close's error (as Ceph's client returns it), and while the
        // cluster refuses writes for want of space the close waits for the
        // file's writes in flight, so none fails unreported.
        let c = Arc::clone(&self.c);
        let reply = if c.is_full() {
            Some(reply)
        } else {
            answer(reply, c.take_write_error(ino));
            None
        };
        self.rt.spawn(async move {
            c.wait_writes(Some(ino)).await;
            c.flush_dirty(ino);
            if let Some(reply) = reply {
                answer(reply, c.take_write_error(ino));
            }
        });
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        _flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // Every open was counted by the MDS, so every close is: an inode
        // unlinked while open is freed when its last open goes, however
        // the opens and closes interleave.
        self.c.closed(ino);
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            c.wait_writes(Some(ino)).await;
            c.flush_dirty(ino);
            c.send_async(Op::Release { ino }, 0, 0);
        });
        reply.ok();
    }

    fn fsync(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.c.flush_dirty(ino);
        self.sync(Some(ino), reply);
    }

    fn opendir(&mut self, _req: &Request<'_>, _ino: u64, _flags: i32, reply: ReplyOpen) {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        reply.opened(fh, 0);
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        let c = Arc::clone(&self.c);
        let listings = Arc::clone(&self.listings);
        self.rt.spawn(async move {
            let have = listings
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&fh)
                .cloned();
            let list = match have {
                Some(l) if offset > 0 => l,
                _ => {
                    let r: Result<_, Errno> = async {
                        let me = getattr(&c, ino, TTL).await?;
                        let mut list = vec![
                            (ino, FileType::Directory, ".".to_string()),
                            (
                                if me.parent == 0 { ino } else { me.parent },
                                FileType::Directory,
                                "..".to_string(),
                            ),
                        ];
                        let mut after = String::new();
                        loop {
                            let out = c
                                .request(
                                    Op::Readdir {
                                        ino,
                                        after: after.clone(),
                                        max: 1024,
                                    },
                                    0,
                                    0,
                                )
                                .await?;
                            let Out::Entries { entries, more } = out else {
                                return Err(Errno::new(
                                    libc::EIO,
                                    "the MDS answered something else",
                                ));
                            };
                            if let Some((n, _)) = entries.last() {
                                after = n.clone();
                            }
                            list.extend(
                                entries
                                    .into_iter()
                                    .map(|(n, d): (String, Dentry)| (d.ino, file_type(d.kind), n)),
                            );
                            if !more {
                                break;
                            }
                        }
                        Ok(list)
                    }
                    .await;
                    match r {
                        Ok(l) => {
                            listings
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .insert(fh, l.clone());
                            l
                        }
                        Err(e) => {
                            reply.error(e.errno);
                            return;
                        }
                    }
                }
            };
            for (i, (ino, kind, name)) in list.iter().enumerate().skip(offset.max(0) as usize) {
                if reply.add(*ino, (i + 1) as i64, *kind, name) {
                    break;
                }
            }
            reply.ok();
        });
    }

    fn releasedir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        reply: ReplyEmpty,
    ) {
        self.listings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fh);
        reply.ok();
    }

    fn fsyncdir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        _fh: u64,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.sync(None, reply);
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            match c.statfs().await {
                Ok((total, avail, objects)) => {
                    let bs = 4096u64;
                    reply.statfs(
                        total / bs,
                        avail / bs,
                        avail / bs,
                        objects + avail / bs,
                        avail / bs,
                        bs as u32,
                        NAME_MAX as u32,
                        bs as u32,
                    )
                }
                Err(e) => reply.error(e.errno),
            }
        });
    }

    fn setxattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let name = name.to_str().map(str::to_string);
        let value = value.to_vec();
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            let r: Result<_, Errno> = async {
                let name =
                    name.ok_or_else(|| Errno::new(libc::EINVAL, "xattr names must be UTF-8"))?;
                if value.len() > 65_536 {
                    return Err(Errno::new(libc::E2BIG, "xattr value too large"));
                }
                c.flush_dirty(ino);
                c.request(
                    Op::SetXattr {
                        ino,
                        name,
                        value,
                        flags,
                    },
                    0,
                    0,
                )
                .await?;
                c.forget(ino);
                Ok(())
            }
            .await;
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e.errno),
            }
        });
    }

    fn getxattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) {
        let name = name.to_str().map(str::to_string);
        if let (Some(n), Some(i)) = (name.as_deref(), self.c.cached(ino, TTL)) {
            match i.xattrs.get(n) {
                None => reply.error(libc::ENODATA),
                Some(v) if size == 0 => reply.size(v.len() as u32),
                Some(v) if v.len() > size as usize => reply.error(libc::ERANGE),
                Some(v) => reply.data(v),
            }
            return;
        }
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            let r: Result<_, Errno> = async {
                let name = name.ok_or_else(|| Errno::new(libc::ENODATA, "no such xattr"))?;
                let i = getattr(&c, ino, TTL).await?;
                i.xattrs
                    .get(&name)
                    .cloned()
                    .ok_or_else(|| Errno::new(libc::ENODATA, "no such xattr"))
            }
            .await;
            match r {
                Ok(v) if size == 0 => reply.size(v.len() as u32),
                Ok(v) if v.len() > size as usize => reply.error(libc::ERANGE),
                Ok(v) => reply.data(&v),
                Err(e) => reply.error(e.errno),
            }
        });
    }

    fn listxattr(&mut self, _req: &Request<'_>, ino: u64, size: u32, reply: ReplyXattr) {
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            match getattr(&c, ino, TTL).await {
                Ok(i) => {
                    let mut out = Vec::new();
                    for k in i.xattrs.keys() {
                        out.extend_from_slice(k.as_bytes());
                        out.push(0);
                    }
                    if size == 0 {
                        reply.size(out.len() as u32);
                    } else if out.len() > size as usize {
                        reply.error(libc::ERANGE);
                    } else {
                        reply.data(&out);
                    }
                }
                Err(e) => reply.error(e.errno),
            }
        });
    }

    fn removexattr(&mut self, _req: &Request<'_>, ino: u64, name: &OsStr, reply: ReplyEmpty) {
        let name = name.to_str().map(str::to_string);
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            let r: Result<_, Errno> = async {
                let name = name.ok_or_else(|| Errno::new(libc::ENODATA, "no such xattr"))?;
                c.flush_dirty(ino);
                c.request(Op::RmXattr { ino, name }, 0, 0).await?;
                c.forget(ino);
                Ok(())
            }
            .await;
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e.errno),
            }
        });
    }

    fn access(&mut self, _req: &Request<'_>, _ino: u64, _mask: i32, reply: ReplyEmpty) {
        // default_permissions: the kernel checked.
        reply.ok();
    }

    fn create(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let name = name_of(name);
        let (uid, gid) = (req.uid(), req.gid());
        let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
        if let Ok(n) = &name
            && let Some(i) = make_local(&self.c, uid, gid, parent, n, Kind::File, mode, 0, None)
        {
            self.c.opened(i.ino);
            self.c.send_async(Op::Open { ino: i.ino, write }, 0, 0);
            reply.created(&TTL, &attr(&i), 0, 0, 0);
            return;
        }
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            let r: Result<_, Errno> = async {
                let i = make(&c, uid, gid, parent, name?, Kind::File, mode, 0, None).await?;
                c.opened(i.ino);
                c.send_async(Op::Open { ino: i.ino, write }, 0, 0);
                Ok(i)
            }
            .await;
            match r {
                Ok(i) => reply.created(&TTL, &attr(&i), 0, 0, 0),
                Err(e) => reply.error(e.errno),
            }
        });
    }

    fn fallocate(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            let r: Result<_, Errno> = async {
                if offset < 0 || length <= 0 {
                    return Err(Errno::new(libc::EINVAL, "bad range"));
                }
                let (off, len) = (offset as u64, length as u64);
                let end = off.saturating_add(len);
                if end > FILE_SIZE_MAX {
                    return Err(Errno::new(libc::EFBIG, "too large"));
                }
                c.wait_writes(Some(ino)).await;
                let i = getattr(&c, ino, Duration::from_secs(3600)).await?;
                let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
                if mode & libc::FALLOC_FL_PUNCH_HOLE != 0 {
                    if !keep {
                        return Err(Errno::new(libc::EOPNOTSUPP, "punch hole needs keep size"));
                    }
                    return c.zero(ino, off, len, i.size).await;
                }
                if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
                    return Err(Errno::new(libc::EOPNOTSUPP, "unsupported fallocate mode"));
                }
                // Space is allocated as written; only the size moves.
                if !keep && end > i.size {
                    let now = now_ns();
                    let set = SetAttr {
                        size: Some(end),
                        ctime: Some(now),
                        ..SetAttr::default()
                    };
                    if c.set_local(ino, &set).is_none() {
                        let (i, caps, _) =
                            inode_of(c.request(Op::Flush { ino, set }, 0, 0).await?)?;
                        c.learn(&i, caps);
                    }
                }
                Ok(())
            }
            .await;
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e.errno),
            }
        });
    }
}

/// Answers `reply` with `failed`'s errno, or success.
fn answer(reply: ReplyEmpty, failed: Option<Errno>) {
    match failed {
        Some(e) => reply.error(e.errno),
        None => reply.ok(),
    }
}

impl ShoalFuse {
    /// Answers once everything sent so far is durable, with `ino`'s failed
    /// data write (an fsync) or any inode's (`None`: a sync of the file
    /// system).
    fn sync(&self, ino: Option<u64>, reply: ReplyEmpty) {
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            match c.sync(ino).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e.errno),
            }
        });
    }

    fn remove(&self, parent: u64, name: &OsStr, dir: bool, reply: ReplyEmpty) {
        let name = name_of(name);
        let c = Arc::clone(&self.c);
        self.rt.spawn(async move {
            let r: Result<_, Errno> = async {
                let name = name?;
                let out = c
                    .request(
                        Op::Unlink {
                            parent,
                            name: name.clone(),
                            dir,
                        },
                        0,
                        0,
                    )
                    .await?;
                c.learn_changed(&out);
                c.note_entry(parent, &name, false);
                c.forget(parent);
                Ok(())
            }
            .await;
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e.errno),
            }
        });
    }
}

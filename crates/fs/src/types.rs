//! Inodes, dentries and the names of the objects that hold them.
//!
//! In the metadata pool of file system `N` (its id): `fs<N>.inodes.<shard>`
//! hold inodes in their omap (key: the inode number, 16 hex digits;
//! [`INODE_SHARDS`] objects), `fs<N>.dir.<ino>.<frag>` hold a directory's
//! entries in their omap (key: the name; a directory is split into
//! 2^`frag_bits` fragments by a hash of the name once it grows past
//! `mds_dir_frag_max` entries a fragment), `fs<N>.journal.*` the journal,
//! `fs<N>.stray` the inodes unlinked while open (freed at last close, or by
//! the next MDS). File data: objects `<ino>.<objno>` (hex, the object
//! number 8 digits) of [`OBJECT_SIZE`] bytes in the data pool; an absent
//! object, or the part of one past its end, reads as zeros.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The root directory's inode number (FUSE's too).
pub const ROOT_INO: u64 = 1;
/// The first inode number handed out.
pub const FIRST_INO: u64 = 0x1000;
/// Bytes of file data per object.
pub const OBJECT_SIZE: u64 = 4 << 20;
/// Objects holding the inode table.
pub const INODE_SHARDS: u64 = 64;
/// Longest name (bytes).
pub const NAME_MAX: usize = 255;
/// Longest symlink target and path (bytes).
pub const PATH_MAX: usize = 4096;
/// Bytes of extended attributes an inode may hold, names and values.
pub const XATTRS_MAX: usize = 64 << 10;
/// Largest file (as ext4's 16 TiB).
pub const FILE_SIZE_MAX: u64 = 16 << 40;

/// What an inode is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A named pipe.
    Fifo,
    /// A character device.
    Char,
    /// A block device.
    Block,
    /// A socket.
    Socket,
}

impl Kind {
    /// The kind of a `mode`'s file-type bits.
    pub fn from_mode(mode: u32) -> Option<Kind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => Kind::File,
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Symlink,
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFCHR => Kind::Char,
            libc::S_IFBLK => Kind::Block,
            libc::S_IFSOCK => Kind::Socket,
            _ => return None,
        })
    }
}

/// An inode: every attribute of a file, directory or link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inode {
    /// Its number.
    pub ino: u64,
    /// What it is.
    pub kind: Kind,
    /// Permission bits with setuid, setgid and sticky (`0o7777`).
    pub perm: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Links (a directory: 2 + its subdirectories).
    pub nlink: u32,
    /// Bytes (a directory: 0; a symlink: the target's length).
    pub size: u64,
    /// Last access, ns since the Unix epoch.
    pub atime: i64,
    /// Last change of the data.
    pub mtime: i64,
    /// Last change of the inode.
    pub ctime: i64,
    /// Device number (character and block devices).
    #[serde(default)]
    pub rdev: u32,
    /// A symlink's target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Extended attributes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub xattrs: BTreeMap<String, Vec<u8>>,
    /// A directory: the directory it is in (its one link from above).
    #[serde(default)]
    pub parent: u64,
    /// A directory: its fragments are 2^frag_bits.
    #[serde(default)]
    pub frag_bits: u8,
    /// Bumped by every change (clients keep the newest they saw).
    #[serde(default)]
    pub version: u64,
}

impl Inode {
    /// A new inode.
    pub fn new(ino: u64, kind: Kind, perm: u32, uid: u32, gid: u32, now: i64) -> Inode {
        Inode {
            ino,
            kind,
            perm: perm & 0o7777,
            uid,
            gid,
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            rdev: 0,
            target: None,
            xattrs: BTreeMap::new(),
            parent: 0,
            frag_bits: 0,
            version: 1,
        }
    }

    /// Bytes its extended attributes take.
    pub fn xattr_bytes(&self) -> usize {
        self.xattrs.iter().map(|(k, v)| k.len() + v.len()).sum()
    }
}

/// A directory entry: the inode it names, and what that is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dentry {
    /// The inode.
    pub ino: u64,
    /// Its kind (readdir needs it without loading the inode).
    pub kind: Kind,
}

/// Now, ns since the Unix epoch.
pub fn now_ns() -> i64 {
    let ms = shoal_net::now_ms() as i64;
    let sub = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::from(d.subsec_nanos() % 1_000_000))
        .unwrap_or(0);
    ms.saturating_mul(1_000_000).saturating_add(sub)
}

/// Object names of one file system.
#[derive(Debug, Clone)]
pub struct Names {
    /// The file system's id.
    pub fs_id: u64,
}

impl Names {
    /// The inode table object holding `ino`.
    pub fn inode_shard(&self, ino: u64) -> String {
        format!("fs{}.inodes.{:02x}", self.fs_id, ino % INODE_SHARDS)
    }

    /// The omap key of `ino` in its shard.
    pub fn inode_key(ino: u64) -> String {
        format!("{ino:016x}")
    }

    /// Fragment `frag` of directory `ino`.
    pub fn dir_frag(&self, ino: u64, frag: u32) -> String {
        format!("fs{}.dir.{ino:x}.{frag:x}", self.fs_id)
    }

    /// The journal's head object (incarnation, where the journal starts).
    pub fn journal_head(&self) -> String {
        format!("fs{}.journal.head", self.fs_id)
    }

    /// Journal segment `seg`.
    pub fn journal_segment(&self, seg: u64) -> String {
        format!("fs{}.journal.{seg:016x}", self.fs_id)
    }

    /// The stray set: inodes unlinked while still open.
    pub fn stray(&self) -> String {
        format!("fs{}.stray", self.fs_id)
    }

    /// The purge queue: removed files whose data is being removed.
    pub fn purge_queue(&self) -> String {
        format!("fs{}.purge", self.fs_id)
    }

    /// A purge queue entry's key: the inode and its size.
    pub fn purge_key(ino: u64, size: u64) -> String {
        format!("{ino:016x}.{size:016x}")
    }

    /// The inode and size a purge queue key names.
    pub fn parse_purge_key(key: &str) -> Option<(u64, u64)> {
        let (ino, size) = key.split_once('.')?;
        Some((
            u64::from_str_radix(ino, 16).ok()?,
            u64::from_str_radix(size, 16).ok()?,
        ))
    }
}

/// Data object `objno` of file `ino`.
pub fn data_object(ino: u64, objno: u64) -> String {
    format!("{ino:x}.{objno:08x}")
}

/// The fragment of a directory with `frag_bits` that holds `name` (FNV-1a).
pub fn frag_of(name: &str, frag_bits: u8) -> u32 {
    if frag_bits == 0 {
        return 0;
    }
    let mut h: u32 = 0x811c_9dc5;
    for b in name.as_bytes() {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h & ((1u32 << frag_bits.min(16)) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_and_fragments_spread() {
        let n = Names { fs_id: 3 };
        assert_eq!(n.inode_shard(0x1041), "fs3.inodes.01");
        assert_eq!(n.dir_frag(0x1000, 2), "fs3.dir.1000.2");
        assert_eq!(data_object(0x1000, 5), "1000.00000005");
        let mut counts = [0usize; 4];
        for i in 0..4000 {
            counts[frag_of(&format!("file{i}"), 2) as usize] += 1;
        }
        assert!(counts.iter().all(|c| *c > 800), "{counts:?}");
        assert_eq!(frag_of("anything", 0), 0);
    }

    #[test]
    fn kinds_from_modes() {
        assert_eq!(Kind::from_mode(libc::S_IFREG | 0o644), Some(Kind::File));
        assert_eq!(Kind::from_mode(libc::S_IFIFO), Some(Kind::Fifo));
        assert_eq!(Kind::from_mode(0o170000), None);
    }
}

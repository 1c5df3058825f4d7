//! The metadata's resting place: inodes in the inode-table objects,
//! directory entries in their directory's fragment objects, the stray set,
//! and file data objects to purge. The MDS reads what its cache misses
//! from here and writes journal events here before trimming the journal;
//! writing the same events twice leaves the same state (replay after a
//! crash in the middle of a flush is safe).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use shoal_client::{Error as ClientError, Op as RadosOp, Pool};

use crate::journal::{Event, Update};
use crate::types::{Dentry, Inode, Kind, Names, OBJECT_SIZE, data_object, frag_of};

/// How many data objects a truncate or purge removes at once.
const REMOVE_FANOUT: usize = 32;

/// The pools and names of one file system.
#[derive(Debug, Clone)]
pub struct Store {
    /// The metadata pool.
    pub meta: Pool,
    /// The data pool.
    pub data: Pool,
    /// Object names.
    pub names: Names,
}

fn not_found(e: &ClientError) -> bool {
    matches!(e, ClientError::NotFound(_))
}

/// What a flush does to one object's omap: clear it first (a directory
/// split), then set keys (`Some`) and remove them (`None`).
type ObjectWrite = (bool, BTreeMap<String, Option<Vec<u8>>>);

/// Omap entries read at a time.
const PAGE: u32 = 1024;

impl Store {
    /// Inode `ino`, if it exists.
    pub async fn load_inode(&self, ino: u64) -> Result<Option<Inode>, ClientError> {
        let key = Names::inode_key(ino);
        let vals = match self
            .meta
            .omap_get_vals_by_keys(&self.names.inode_shard(ino), &[key.as_bytes()])
            .await
        {
            Ok(v) => v,
            Err(e) if not_found(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        match vals.values().next() {
            None => Ok(None),
            Some(raw) => serde_json::from_slice(raw)
                .map(Some)
                .map_err(|e| ClientError::Io(format!("damaged inode {ino:x}: {e}"))),
        }
    }

    /// Every entry of directory `ino`.
    pub async fn load_dir(
        &self,
        ino: u64,
        frag_bits: u8,
    ) -> Result<BTreeMap<String, Dentry>, ClientError> {
        let mut out = BTreeMap::new();
        for frag in 0..(1u32 << frag_bits.min(16)) {
            let oid = self.names.dir_frag(ino, frag);
            let mut after: Vec<u8> = Vec::new();
            loop {
                let page = match self.meta.omap_get_vals(&oid, &after, b"", PAGE).await {
                    Ok(p) => p,
                    Err(e) if not_found(&e) => break,
                    Err(e) => return Err(e),
                };
                for (k, v) in &page.entries {
                    let name = String::from_utf8_lossy(k).into_owned();
                    let d: Dentry = serde_json::from_slice(v).map_err(|e| {
                        ClientError::Io(format!("damaged entry {name:?} of directory {ino:x}: {e}"))
                    })?;
                    out.insert(name, d);
                }
                match page.entries.last() {
                    Some((k, _)) if page.more => after = k.to_vec(),
                    _ => break,
                }
            }
        }
        Ok(out)
    }

    /// The stray set.
    pub async fn load_strays(&self) -> Result<BTreeSet<u64>, ClientError> {
        let keys = self.omap_keys(&self.names.stray()).await?;
        Ok(keys
            .iter()
            .filter_map(|k| u64::from_str_radix(k, 16).ok())
            .collect())
    }

    /// The purge queue: (inode, size) of removed files whose data may
    /// still be there.
    pub async fn load_purges(&self) -> Result<Vec<(u64, u64)>, ClientError> {
        let keys = self.omap_keys(&self.names.purge_queue()).await?;
        Ok(keys
            .iter()
            .filter_map(|k| Names::parse_purge_key(k))
            .collect())
    }

    /// Every omap key of metadata object `oid` (none if it does not exist).
    async fn omap_keys(&self, oid: &str) -> Result<Vec<String>, ClientError> {
        let mut out = Vec::new();
        let mut after: Vec<u8> = Vec::new();
        loop {
            let page = match self.meta.omap_get_keys(oid, &after, b"", PAGE).await {
                Ok(p) => p,
                Err(e) if not_found(&e) => return Ok(out),
                Err(e) => return Err(e),
            };
            out.extend(
                page.entries
                    .iter()
                    .map(|(k, _)| String::from_utf8_lossy(k).into_owned()),
            );
            match page.entries.last() {
                Some((k, _)) if page.more => after = k.to_vec(),
                _ => return Ok(out),
            }
        }
    }

    /// Writes `events` into the inode, directory and stray objects: the
    /// newest state of each key wins. A directory's entries go to the
    /// fragment its inode's `frag_bits` say (the newest inode state in
    /// `events`, else the stored one); a split rewrites every fragment of
    /// the directory whole (clear, then every entry it holds).
    pub async fn apply(&self, events: &[Event]) -> Result<(), ClientError> {
        // Fragment bits of every directory the events touch.
        let mut bits: HashMap<u64, u8> = HashMap::new();
        for ev in events {
            for u in &ev.updates {
                match u {
                    Update::Inode { inode } if inode.kind == Kind::Dir => {
                        bits.insert(inode.ino, inode.frag_bits);
                    }
                    Update::Split { dir, bits: b, .. } => {
                        bits.insert(*dir, *b);
                    }
                    _ => {}
                }
            }
        }
        let mut missing: Vec<u64> = Vec::new();
        for ev in events {
            for u in &ev.updates {
                if let Update::Link { dir, .. } = u
                    && !bits.contains_key(dir)
                    && !missing.contains(dir)
                {
                    missing.push(*dir);
                }
            }
        }
        for dir in missing {
            let b = self.load_inode(dir).await?.map_or(0, |i| i.frag_bits);
            bits.insert(dir, b);
        }
        // object -> (cleared first, key -> Some(value) | None (removed))
        let mut objects: HashMap<String, ObjectWrite> = HashMap::new();
        for ev in events {
            for u in &ev.updates {
                match u {
                    Update::Inode { inode } => {
                        let v = serde_json::to_vec(inode).unwrap_or_default();
                        objects
                            .entry(self.names.inode_shard(inode.ino))
                            .or_default()
                            .1
                            .insert(Names::inode_key(inode.ino), Some(v));
                    }
                    Update::Forget { ino } => {
                        objects
                            .entry(self.names.inode_shard(*ino))
                            .or_default()
                            .1
                            .insert(Names::inode_key(*ino), None);
                    }
                    Update::Link { dir, name, dentry } => {
                        let b = bits.get(dir).copied().unwrap_or(0);
                        let oid = self.names.dir_frag(*dir, frag_of(name, b));
                        let v = dentry.map(|d| serde_json::to_vec(&d).unwrap_or_default());
                        objects.entry(oid).or_default().1.insert(name.clone(), v);
                    }
                    Update::Split {
                        dir,
                        bits: b,
                        entries,
                    } => {
                        // The whole directory as it was at the split: what
                        // came before in this batch is in it.
                        for frag in 0..(1u32 << (*b).min(16)) {
                            objects
                                .insert(self.names.dir_frag(*dir, frag), (true, BTreeMap::new()));
                        }
                        let final_bits = bits.get(dir).copied().unwrap_or(*b);
                        for (name, d) in entries {
                            let oid = self.names.dir_frag(*dir, frag_of(name, final_bits));
                            let v = serde_json::to_vec(d).unwrap_or_default();
                            objects
                                .entry(oid)
                                .or_default()
                                .1
                                .insert(name.clone(), Some(v));
                        }
                    }
                    Update::Stray { ino, on } => {
                        objects
                            .entry(self.names.stray())
                            .or_default()
                            .1
                            .insert(format!("{ino:016x}"), on.then(Vec::new));
                    }
                    Update::Purge { ino, size, on } => {
                        objects
                            .entry(self.names.purge_queue())
                            .or_default()
                            .1
                            .insert(Names::purge_key(*ino, *size), on.then(Vec::new));
                    }
                    Update::NextIno { .. } => {}
                }
            }
        }
        let mut tasks = tokio::task::JoinSet::new();
        for (oid, (clear, keys)) in objects {
            let pool = self.meta.clone();
            tasks.spawn(async move {
                let set: Vec<(&String, &Vec<u8>)> = keys
                    .iter()
                    .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
                    .collect();
                let rm: Vec<&String> = keys
                    .iter()
                    .filter(|(_, v)| v.is_none())
                    .map(|(k, _)| k)
                    .collect();
                let mut op = RadosOp::new().create(false);
                if clear {
                    op = op.omap_clear();
                }
                if !set.is_empty() {
                    op = op.omap_set(&set);
                }
                if !rm.is_empty() {
                    op = op.omap_rm_keys(&rm);
                }
                pool.operate(&oid, op)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.error)
            });
            // Bounded fan-out.
            while tasks.len() >= 32 {
                if let Some(r) = tasks.join_next().await {
                    r.map_err(|e| ClientError::Internal(e.to_string()))??;
                }
            }
        }
        while let Some(r) = tasks.join_next().await {
            r.map_err(|e| ClientError::Internal(e.to_string()))??;
        }
        Ok(())
    }

    /// Removes file data past `size` (a truncate): the objects wholly past
    /// it go, the one it ends in is cut. `old_size` bounds the search.
    pub async fn truncate_data(
        &self,
        ino: u64,
        old_size: u64,
        size: u64,
    ) -> Result<(), ClientError> {
        if size >= old_size {
            return Ok(());
        }
        let first_gone = size.div_ceil(OBJECT_SIZE);
        let last = old_size.div_ceil(OBJECT_SIZE);
        // A sparse file names far more objects than it has: removes go
        // REMOVE_FANOUT at a time.
        let mut tasks = tokio::task::JoinSet::new();
        for objno in first_gone..last {
            let pool = self.data.clone();
            tasks.spawn(async move {
                match pool.remove(&data_object(ino, objno)).await {
                    Err(e) if !not_found(&e) => Err(e),
                    _ => Ok(()),
                }
            });
            while tasks.len() >= REMOVE_FANOUT {
                if let Some(r) = tasks.join_next().await {
                    r.map_err(|e| ClientError::Internal(e.to_string()))??;
                }
            }
        }
        while let Some(r) = tasks.join_next().await {
            r.map_err(|e| ClientError::Internal(e.to_string()))??;
        }
        if size % OBJECT_SIZE != 0 {
            let objno = size / OBJECT_SIZE;
            match self
                .data
                .truncate(&data_object(ino, objno), size % OBJECT_SIZE)
                .await
            {
                Ok(()) => {}
                Err(e) if not_found(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Removes every data object of a file of `size` bytes.
    pub async fn purge_data(&self, ino: u64, size: u64) -> Result<(), ClientError> {
        self.truncate_data(ino, size.max(1), 0).await
    }
}

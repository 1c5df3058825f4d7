//! `ObjectStore` for `BlockStore`: the transaction entry point and the read path.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::apply::{self, Applier, read_range};
use super::commit::Queued;
use super::state::{ReadFailure, ReadPlan};
use super::{BLOCK, BlockStore};
use crate::error::{Error, Result};
use crate::store::ObjectStore;
use crate::ticket::CommitTicket;
use crate::transaction::Transaction;
use crate::types::{CollectionId, Listing, ObjectKey, ObjectStat, StatFs};
use crate::validate::validate;

impl BlockStore {
    /// Reads `[offset, offset + len)`: planned under the lock, the device read
    /// without it (writers and the committer are not held up by read I/O);
    /// `cached`: blocks the data cache holds are taken from it, and a small
    /// read fills it.
    fn read_planned(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        offset: u64,
        len: u64,
        cached: bool,
    ) -> Result<(Bytes, Option<u32>)> {
        let plan = self.with_onode(c, o, |st, on| {
            let len = crate::validate::check_read(on.size, offset, len)?;
            Ok((len > 0).then(|| ReadPlan::new(st, on, offset, len, cached)))
        })?;
        let Some(plan) = plan else {
            return Ok((Bytes::new(), Some(0)));
        };
        let device_offset = match plan.execute(&*self.shared.dev, &self.shared.read_bufs) {
            Ok((b, crc)) => return Ok((b, Some(crc))),
            Err(ReadFailure::Other(e)) => return Err(e),
            Err(ReadFailure::Checksum(at)) => at,
        };
        if self.shared.read_state().reuse_gen == plan.reuse_gen {
            self.shared
                .counters
                .checksum_errors
                .fetch_add(1, Ordering::Relaxed);
            return Err(Error::Checksum { device_offset });
        }
        // A block changed under the unlocked read: read again holding the lock.
        self.shared
            .counters
            .read_retries
            .fetch_add(1, Ordering::Relaxed);
        self.with_onode(c, o, |st, on| {
            let len = crate::validate::check_read(on.size, offset, len)?;
            if len == 0 {
                return Ok((Bytes::new(), Some(0)));
            }
            let b = read_range(
                st,
                &*self.shared.dev,
                &self.shared.counters,
                on,
                offset,
                len,
            )?;
            Ok((b, None))
        })
    }
}

impl ObjectStore for BlockStore {
    fn queue_transaction(&self, txn: Transaction) -> Result<CommitTicket> {
        if let Some(reason) = self.shared.poison_reason() {
            return Err(Error::Poisoned(reason));
        }
        let sh = &*self.shared;
        sh.reserve();
        let mut st = sh.write_state();
        let checked = validate(&st.colls, &txn).and_then(|()| apply::check_space(&st, &txn));
        if let Err(e) = checked {
            sh.release(1);
            return Err(e);
        }
        let mut batch = match Applier::new(&mut st, &*sh.dev, &sh.counters).apply(&txn) {
            Ok(b) => b,
            Err(e) => {
                // The in-memory state may hold part of the transaction: stop writing.
                let reason = sh.poison(&e);
                sh.release(1);
                return Err(Error::Poisoned(reason));
            }
        };
        sh.counters.transactions.fetch_add(1, Ordering::Relaxed);
        let ticket = CommitTicket::default();
        let data = std::mem::take(&mut batch.data);
        // Enqueue under the state lock so commit order equals apply order; a batch with
        // data to write is committed once that data has landed.
        let id = sh.enqueue(Queued {
            batch,
            ticket: ticket.clone(),
            reserved: true,
            ready: data.is_empty(),
            id: 0,
        });
        drop(st);
        if !data.is_empty() {
            // Outside the state lock: other writers (other PGs) and readers go on while
            // this data reaches the device; reads of these blocks use the overlay.
            for (pb, bytes) in &data {
                if let Err(e) = sh.dev.write_at(pb * BLOCK as u64, bytes) {
                    sh.poison(&Error::io("writing data", e));
                    break;
                }
            }
            sh.mark_ready(id);
        }
        Ok(ticket)
    }

    fn flush(&self) -> Result<()> {
        let ticket = CommitTicket::default();
        self.shared.enqueue(Queued {
            batch: Default::default(),
            ticket: ticket.clone(),
            reserved: false,
            ready: true,
            id: 0,
        });
        ticket.wait()
    }

    fn list_collections(&self) -> Result<Vec<CollectionId>> {
        Ok(self.shared.read_state().colls.keys().copied().collect())
    }

    fn collection_exists(&self, c: &CollectionId) -> Result<bool> {
        Ok(self.shared.read_state().colls.contains_key(c))
    }

    fn list_objects(
        &self,
        c: &CollectionId,
        start: Option<&ObjectKey>,
        max: usize,
    ) -> Result<Listing> {
        let st = self.shared.read_state();
        let objs = st.colls.get(c).ok_or(Error::CollectionNotFound(*c))?;
        let lower = start.map_or(Bound::Unbounded, Bound::Included);
        let mut it = objs
            .range::<ObjectKey, _>((lower, Bound::Unbounded))
            .map(|(k, _)| k);
        let objects: Vec<ObjectKey> = it.by_ref().take(max).cloned().collect();
        Ok(Listing {
            objects,
            next: it.next().cloned(),
        })
    }

    fn exists(&self, c: &CollectionId, o: &ObjectKey) -> Result<bool> {
        let st = self.shared.read_state();
        Ok(st
            .colls
            .get(c)
            .ok_or(Error::CollectionNotFound(*c))?
            .contains_key(o))
    }

    fn stat(&self, c: &CollectionId, o: &ObjectKey) -> Result<ObjectStat> {
        self.with_onode(c, o, |_, on| {
            Ok(ObjectStat {
                size: on.size,
                allocated_bytes: on.extents.allocated_blocks() * BLOCK as u64,
            })
        })
    }

    fn allocated(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        offset: u64,
        len: u64,
    ) -> Result<Vec<(u64, u64)>> {
        let b = BLOCK as u64;
        self.with_onode(c, o, |_, on| {
            let end = offset.saturating_add(len).min(on.size);
            let mut out: Vec<(u64, u64)> = Vec::new();
            if end <= offset {
                return Ok(out);
            }
            for (lb, mapped, n) in on.extents.segments(offset / b, end.div_ceil(b)) {
                if mapped.is_none() {
                    continue;
                }
                let from = (lb * b).max(offset);
                let to = ((lb + n) * b).min(end);
                match out.last_mut() {
                    Some((o, l)) if *o + *l == from => *l += to - from,
                    _ => out.push((from, to - from)),
                }
            }
            Ok(out)
        })
    }

    fn read(&self, c: &CollectionId, o: &ObjectKey, offset: u64, len: u64) -> Result<Bytes> {
        self.read_with_crc(c, o, offset, len).map(|(b, _)| b)
    }

    fn read_with_crc(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        offset: u64,
        len: u64,
    ) -> Result<(Bytes, Option<u32>)> {
        self.read_planned(c, o, offset, len, true)
    }

    fn read_from_media(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        offset: u64,
        len: u64,
    ) -> Result<Bytes> {
        self.read_planned(c, o, offset, len, false).map(|(b, _)| b)
    }

    fn getxattr(&self, c: &CollectionId, o: &ObjectKey, name: &str) -> Result<Option<Bytes>> {
        self.with_onode(c, o, |_, on| Ok(on.meta.xattrs.get(name).cloned()))
    }

    fn getxattrs(&self, c: &CollectionId, o: &ObjectKey) -> Result<BTreeMap<String, Bytes>> {
        self.with_onode(c, o, |_, on| {
            Ok(on
                .meta
                .xattrs
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect())
        })
    }

    fn omap_get_header(&self, c: &CollectionId, o: &ObjectKey) -> Result<Bytes> {
        self.with_onode(c, o, |_, on| Ok(on.meta.omap_header.clone()))
    }

    fn omap_get_values(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        keys: &[Bytes],
    ) -> Result<BTreeMap<Bytes, Bytes>> {
        self.with_onode(c, o, |_, on| {
            Ok(keys
                .iter()
                .filter_map(|k| on.meta.omap.get(k).map(|v| (k.clone(), v.clone())))
                .collect())
        })
    }

    fn omap_range(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        max: usize,
    ) -> Result<Vec<(Bytes, Bytes)>> {
        self.with_onode(c, o, |_, on| Ok(on.meta.range(start, end, max)))
    }

    fn space(&self) -> Result<StatFs> {
        let st = self.shared.read_state();
        Ok(StatFs {
            total_bytes: (st.total_blocks - 1 - st.journal_blocks) * BLOCK as u64,
            free_bytes: st.alloc.free_blocks() * BLOCK as u64,
            ..StatFs::default()
        })
    }

    /// Counts every object: a walk of the whole index under the read lock (writers
    /// wait), for tools and tests; the OSD's fullness checks use [`space`](Self::space).
    fn statfs(&self) -> Result<StatFs> {
        let st = self.shared.read_state();
        let mut fs = StatFs {
            total_bytes: (st.total_blocks - 1 - st.journal_blocks) * BLOCK as u64,
            free_bytes: st.alloc.free_blocks() * BLOCK as u64,
            collections: st.colls.len() as u64,
            ..StatFs::default()
        };
        for on in st.colls.values().flat_map(|m| m.values()) {
            fs.objects += 1;
            fs.stored_bytes += on.size;
        }
        Ok(fs)
    }
}

//! Copying one object between members in bounded steps, as Ceph's
//! `ObjectRecoveryProgress`: each step carries at most `data_bytes_max`
//! bytes of data after where the previous step ended, omap entries after
//! the last key copied worth at most `omap_bytes_max`, and, on the first
//! step, the xattrs and the omap header. So no object is too big to move:
//! every frame stays within the messenger's limits whatever the object
//! holds (a 1 MiB control part, a bounded data part).
//!
//! A copy of more than one step is built in a temporary object that the
//! last step renames over the object, in the same transaction that takes
//! the object out of the member's missing set: a half-made copy is never
//! visible. A crash or a failed step leaves only the temporary object,
//! which the next first step replaces and the PG's next start removes.
//! Temporary objects have hash 0 and a name starting with NUL (which
//! client names cannot), so they list before every client object and
//! listings of client objects skip them.
//!
//! Pure over the store: no I/O beyond `ObjectStore` reads; the network
//! loops are in `recovery.rs`.

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::{Bytes, BytesMut};
use shoal_objectstore::{CollectionId, ObjectKey, ObjectStore, Transaction};
use shoal_proto::{CopyProgress, PgPush};

use crate::missing::MissingSet;

/// Name prefix of temporary copies.
pub const TEMP_PREFIX: &[u8] = b"\0tmp.";
/// Bytes read per store call.
const READ_CHUNK: u64 = 4 << 20;
/// Omap entries read per store call (few: values may be large).
const OMAP_PAGE: usize = 256;
/// What an omap entry or xattr costs beyond its bytes in a control part
/// (protobuf tags and lengths), so a step's encoding stays within budget.
const ENTRY_OVERHEAD_BYTES: u64 = 16;

/// How much one step may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepLimits {
    /// Data bytes per step (the data part).
    pub data_bytes_max: u64,
    /// Bytes of xattrs, omap header and omap entries per step (the control
    /// part; well below its 1 MiB limit).
    pub omap_bytes_max: u64,
}

impl Default for StepLimits {
    fn default() -> Self {
        StepLimits {
            data_bytes_max: 4 << 20,
            omap_bytes_max: 512 << 10,
        }
    }
}

impl StepLimits {
    /// The tighter of our limits and a peer's request (0: no request).
    pub fn narrowed(self, data_bytes_max: u64, omap_bytes_max: u64) -> StepLimits {
        let pick = |ours: u64, theirs: u64| if theirs == 0 { ours } else { ours.min(theirs) };
        StepLimits {
            data_bytes_max: pick(self.data_bytes_max, data_bytes_max).max(1),
            omap_bytes_max: pick(self.omap_bytes_max, omap_bytes_max).max(1),
        }
    }
}

/// Where a copy starts: nothing copied.
pub fn start() -> CopyProgress {
    CopyProgress {
        first: true,
        ..CopyProgress::default()
    }
}

/// Whether a copy that got to `p` is complete.
pub fn is_complete(p: &CopyProgress) -> bool {
    p.data_complete && p.omap_complete
}

fn done() -> CopyProgress {
    CopyProgress {
        data_complete: true,
        omap_complete: true,
        ..CopyProgress::default()
    }
}

/// Where a pushed step starts and ends (a push without them is a whole
/// object).
pub fn bounds(push: &PgPush) -> (CopyProgress, CopyProgress) {
    (
        push.before.clone().unwrap_or_else(start),
        push.after.clone().unwrap_or_else(done),
    )
}

/// What a step's name, xattrs, omap header and omap entries take in a
/// control part (with what each entry costs beyond its bytes).
pub fn control_bytes(push: &PgPush) -> u64 {
    let entries = push
        .attrs
        .iter()
        .zip(&push.attr_values)
        .map(|(n, v)| n.len() + v.len())
        .chain(
            push.omap_keys
                .iter()
                .zip(&push.omap_values)
                .map(|(k, v)| k.len() + v.len()),
        )
        .map(|n| n as u64 + ENTRY_OVERHEAD_BYTES)
        .sum::<u64>();
    entries + (push.name.len() + push.omap_header.len()) as u64 + ENTRY_OVERHEAD_BYTES
}

/// The temporary object a copy of `key` is built in.
pub fn temp_key(key: &ObjectKey) -> ObjectKey {
    crate::object::hidden_key(TEMP_PREFIX, &[], key)
}

fn is_temp(key: &ObjectKey) -> bool {
    key.hash == 0 && key.name.starts_with(TEMP_PREFIX)
}

/// Reads the step of a copy of `key` that follows `before`.
pub fn read_step(
    store: &dyn ObjectStore,
    coll: CollectionId,
    key: &ObjectKey,
    before: &CopyProgress,
    limits: StepLimits,
) -> shoal_objectstore::Result<(PgPush, Bytes)> {
    let mut push = PgPush {
        hash: key.hash,
        name: key.name.clone(),
        snap: crate::object::wire_snap(key),
        before: Some(before.clone()),
        ..PgPush::default()
    };
    if !store.exists(&coll, key)? {
        // Absence is one step, whatever a receiver has built so far.
        push.after = Some(done());
        return Ok((push, Bytes::new()));
    }
    push.exists = true;
    let size = store.stat(&coll, key)?.size;
    push.object_size = size;
    let mut after = CopyProgress {
        first: false,
        ..before.clone()
    };
    let mut meta_bytes = 0u64;
    if before.first {
        for (n, v) in store.getxattrs(&coll, key)? {
            meta_bytes += (n.len() + v.len()) as u64 + ENTRY_OVERHEAD_BYTES;
            push.attrs.push(n);
            push.attr_values.push(v.to_vec());
        }
        push.omap_header = store.omap_get_header(&coll, key)?.to_vec();
        meta_bytes += push.omap_header.len() as u64;
    }
    let data = if before.data_complete {
        Bytes::new()
    } else {
        let from = before.data_recovered_to;
        let end = size.min(from.saturating_add(limits.data_bytes_max));
        let data = read_data(store, coll, key, from, end)?;
        after.data_recovered_to = from + data.len() as u64;
        after.data_complete = after.data_recovered_to >= size;
        data
    };
    if !before.omap_complete {
        read_omap(
            store,
            coll,
            key,
            limits.omap_bytes_max.saturating_sub(meta_bytes),
            meta_bytes > 0,
            &mut push,
            &mut after,
        )?;
    }
    push.after = Some(after);
    Ok((push, data))
}

fn read_data(
    store: &dyn ObjectStore,
    coll: CollectionId,
    key: &ObjectKey,
    from: u64,
    end: u64,
) -> shoal_objectstore::Result<Bytes> {
    let first = store.read(&coll, key, from, READ_CHUNK.min(end - from))?;
    if first.is_empty() || first.len() as u64 == end - from {
        // One read was the whole step: its bytes as the store returned
        // them (on BlockStore, the buffer the device read into).
        return Ok(first);
    }
    let mut data = BytesMut::with_capacity(usize::try_from(end - from).unwrap_or(0));
    data.extend_from_slice(&first);
    let mut off = from + first.len() as u64;
    while off < end {
        let chunk = store.read(&coll, key, off, READ_CHUNK.min(end - off))?;
        if chunk.is_empty() {
            break;
        }
        off += chunk.len() as u64;
        data.extend_from_slice(&chunk);
    }
    Ok(data.freeze())
}

/// Adds the omap entries after `after`'s cursor worth at most `budget`
/// bytes to `push`, and moves the cursor. A step that carries nothing
/// else takes at least one entry, whatever its size, so every copy ends.
fn read_omap(
    store: &dyn ObjectStore,
    coll: CollectionId,
    key: &ObjectKey,
    budget: u64,
    carries_meta: bool,
    push: &mut PgPush,
    after: &mut CopyProgress,
) -> shoal_objectstore::Result<()> {
    let mut used = 0u64;
    loop {
        let cursor = after.omap_recovered_to.clone();
        let start = if after.omap_started {
            Bound::Excluded(cursor.as_slice())
        } else {
            Bound::Unbounded
        };
        let page = store.omap_range(&coll, key, start, Bound::Unbounded, OMAP_PAGE)?;
        let full = page.len() == OMAP_PAGE;
        for (k, v) in page {
            let cost = (k.len() + v.len()) as u64 + ENTRY_OVERHEAD_BYTES;
            if used + cost > budget && (used > 0 || carries_meta) {
                return Ok(());
            }
            used += cost;
            after.omap_recovered_to = k.to_vec();
            after.omap_started = true;
            push.omap_keys.push(k.to_vec());
            push.omap_values.push(v.to_vec());
        }
        if !full {
            after.omap_complete = true;
            return Ok(());
        }
    }
}

/// The transaction that installs one pushed step in `coll`. The last step
/// makes the member's copy identical to the source's (removing it when
/// the source has none) and takes the object out of the member's missing
/// set; earlier steps only build the temporary copy.
pub fn install_step(
    store: &dyn ObjectStore,
    coll: CollectionId,
    push: &PgPush,
    data: Bytes,
) -> Result<Transaction, String> {
    if push.attrs.len() != push.attr_values.len() || push.omap_keys.len() != push.omap_values.len()
    {
        return Err("push: names and values differ in number".into());
    }
    let (before, after) = bounds(push);
    let complete = is_complete(&after);
    if !push.exists || (before.first && complete) {
        return install_whole(store, coll, push, data);
    }
    let key = crate::object::wire_key(push.hash, &push.name, push.snap);
    let tmp = temp_key(&key);
    let err = |e: shoal_objectstore::Error| e.to_string();
    let mut t = Transaction::new();
    if before.first {
        if store.exists(&coll, &tmp).map_err(err)? {
            t.remove(coll, tmp.clone());
        }
        t.touch(coll, tmp.clone());
    } else {
        // Steps follow one another: the temporary copy ends where this
        // step begins (a receiver that restarted, or a step replayed, has
        // something else, and the copy starts again).
        let have = match store.exists(&coll, &tmp).map_err(err)? {
            true => Some(store.stat(&coll, &tmp).map_err(err)?.size),
            false => None,
        };
        if have != Some(before.data_recovered_to) {
            return Err(format!(
                "copy of {} out of step: the temporary copy holds {have:?} bytes, the step starts at {}",
                String::from_utf8_lossy(&key.name),
                before.data_recovered_to
            ));
        }
    }
    let want = after
        .data_recovered_to
        .checked_sub(before.data_recovered_to)
        .ok_or("push: the step's data ends before it starts")?;
    if data.len() as u64 != want {
        return Err(format!(
            "push: {} data bytes for a step of {want}",
            data.len()
        ));
    }
    add_content(&mut t, coll, &tmp, push, data, before.data_recovered_to);
    if complete {
        t.truncate(coll, tmp.clone(), push.object_size);
        MissingSet::remove_txn(&key, coll, &mut t);
        t.rename(coll, tmp, key);
    }
    Ok(t)
}

/// A copy in one step: replace the object in place.
fn install_whole(
    store: &dyn ObjectStore,
    coll: CollectionId,
    push: &PgPush,
    data: Bytes,
) -> Result<Transaction, String> {
    let key = crate::object::wire_key(push.hash, &push.name, push.snap);
    let err = |e: shoal_objectstore::Error| e.to_string();
    let mut t = Transaction::new();
    MissingSet::remove_txn(&key, coll, &mut t);
    if store.exists(&coll, &key).map_err(err)? {
        t.remove(coll, key.clone());
    }
    if !push.exists {
        // The source's copy went away in the middle of a copy.
        let tmp = temp_key(&key);
        if store.exists(&coll, &tmp).map_err(err)? {
            t.remove(coll, tmp);
        }
        return Ok(t);
    }
    t.touch(coll, key.clone());
    add_content(&mut t, coll, &key, push, data, 0);
    if push.after.is_some() {
        t.truncate(coll, key, push.object_size);
    }
    Ok(t)
}

/// Writes a step's data at `offset`, its xattrs, header and omap entries.
fn add_content(
    t: &mut Transaction,
    coll: CollectionId,
    key: &ObjectKey,
    push: &PgPush,
    data: Bytes,
    offset: u64,
) {
    if !data.is_empty() {
        t.write(coll, key.clone(), offset, data);
    }
    if !push.attrs.is_empty() {
        let attrs: BTreeMap<String, Bytes> = push
            .attrs
            .iter()
            .cloned()
            .zip(push.attr_values.iter().map(|v| Bytes::from(v.clone())))
            .collect();
        t.set_xattrs(coll, key.clone(), attrs);
    }
    if !push.omap_header.is_empty() {
        t.omap_set_header(coll, key.clone(), Bytes::from(push.omap_header.clone()));
    }
    if !push.omap_keys.is_empty() {
        let kv: BTreeMap<Bytes, Bytes> = push
            .omap_keys
            .iter()
            .map(|k| Bytes::from(k.clone()))
            .zip(push.omap_values.iter().map(|v| Bytes::from(v.clone())))
            .collect();
        t.omap_set_keys(coll, key.clone(), kv);
    }
}

/// Adds the removal of every temporary copy in `coll` to `t` (copies a
/// crash or a new interval interrupted); returns how many there were.
pub fn remove_temps(
    store: &dyn ObjectStore,
    coll: CollectionId,
    t: &mut Transaction,
) -> shoal_objectstore::Result<usize> {
    let mut n = 0;
    let mut cursor = ObjectKey::new(0, TEMP_PREFIX.to_vec());
    loop {
        let page = store.list_objects(&coll, Some(&cursor), 64)?;
        for k in &page.objects {
            if !is_temp(k) {
                return Ok(n);
            }
            t.remove(coll, k.clone());
            n += 1;
        }
        match page.next {
            Some(next) => cursor = next,
            None => return Ok(n),
        }
    }
}

#[cfg(test)]
mod tests;

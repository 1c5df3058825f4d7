//! Consistency check of a BlockStore: every metadata cross-reference, and with `deep`
//! every block checksum. Reads only; reports every problem found rather than the first.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use redb::ReadableTable;

use super::codec::{self, ObjectRecord};
use super::device::Device;
use super::journal;
use super::meta::{self, COLLS, DEFERRED, FREE, OBJECTS, OMAP, me};
use super::{BLOCK, check_label};
use crate::error::Result;
use crate::types::{CollectionId, ObjectKey};

/// What fsck found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FsckReport {
    /// Collections.
    pub collections: u64,
    /// Objects.
    pub objects: u64,
    /// Omap entries.
    pub omap_entries: u64,
    /// Data blocks referenced by objects.
    pub allocated_blocks: u64,
    /// Blocks in the free list.
    pub free_blocks: u64,
    /// Usable blocks on the device (all but the label and the journal).
    pub usable_blocks: u64,
    /// Journal records not yet checkpointed (applied in memory for this check; replayed
    /// for good by the next open).
    pub journal_records: u64,
    /// Deferred writes not yet applied in place (replayed at open).
    pub deferred_records: u64,
    /// Blocks whose checksum was verified (deep only).
    pub blocks_verified: u64,
    /// Every inconsistency, one line each.
    pub errors: Vec<String>,
}

impl FsckReport {
    /// No inconsistency found.
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty()
    }
}

impl fmt::Display for FsckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "collections:      {}", self.collections)?;
        writeln!(f, "objects:          {}", self.objects)?;
        writeln!(f, "omap entries:     {}", self.omap_entries)?;
        writeln!(f, "allocated blocks: {}", self.allocated_blocks)?;
        writeln!(f, "free blocks:      {}", self.free_blocks)?;
        writeln!(f, "usable blocks:    {}", self.usable_blocks)?;
        writeln!(f, "deferred records: {}", self.deferred_records)?;
        writeln!(f, "journal records:  {}", self.journal_records)?;
        writeln!(f, "blocks verified:  {}", self.blocks_verified)?;
        for e in &self.errors {
            writeln!(f, "error: {e}")?;
        }
        write!(
            f,
            "{}",
            if self.is_clean() {
                "clean"
            } else {
                "INCONSISTENT"
            }
        )
    }
}

/// A run of device blocks and who holds it.
struct Owned {
    start: u64,
    len: u64,
    owner: String,
}

/// Check the store held by `db` and `dev`. The journal's records are applied to `db`
/// first, which must therefore keep its writes in memory (the staged open).
pub(crate) fn fsck(
    dev: &dyn Device,
    data: &std::path::Path,
    db: &redb::Database,
    deep: bool,
) -> Result<FsckReport> {
    let mut r = FsckReport::default();
    let replayed = journal::replay(dev, db, data)?;
    r.journal_records = replayed.records;
    let txn = db.begin_read().map_err(me("begin read"))?;
    let total = meta::read_super(&txn)?;
    let jpos = journal::read_position(&txn, total)?;
    r.usable_blocks = total.saturating_sub(1 + jpos.blocks);
    if let Err(e) = check_label(dev, total) {
        r.errors.push(e.to_string());
    }
    let mut colls = BTreeSet::new();
    for row in txn
        .open_table(COLLS)
        .map_err(me("open colls"))?
        .iter()
        .map_err(me("scan colls"))?
    {
        let (k, _) = row.map_err(me("scan colls"))?;
        match CollectionId::from_bytes(k.value()) {
            Some(c) if k.value().len() == crate::types::COLLECTION_ID_BYTES => {
                colls.insert(c);
            }
            _ => r.errors.push("undecodable collection key".into()),
        }
    }
    r.collections = colls.len() as u64;
    let mut runs: Vec<Owned> = Vec::new();
    let mut objects: BTreeMap<(CollectionId, ObjectKey), ObjectRecord> = BTreeMap::new();
    for row in txn
        .open_table(OBJECTS)
        .map_err(me("open objects"))?
        .iter()
        .map_err(me("scan objects"))?
    {
        let (k, v) = row.map_err(me("scan objects"))?;
        let (c, o) = match codec::parse_object_key(k.value()) {
            Ok(x) => x,
            Err(e) => {
                r.errors.push(e.to_string());
                continue;
            }
        };
        let rec = match ObjectRecord::decode(v.value()) {
            Ok(rec) => rec,
            Err(e) => {
                r.errors.push(format!("{c}/{o}: {e}"));
                continue;
            }
        };
        if !colls.contains(&c) {
            r.errors.push(format!("{c}/{o}: collection does not exist"));
        }
        if let Err(e) = rec.check(total) {
            // Out-of-range extents are reported once here and kept out of the checks below.
            r.errors.push(format!("{c}/{o}: {e}"));
            continue;
        }
        for (_, (pb, n)) in rec.extents.runs() {
            runs.push(Owned {
                start: pb,
                len: n,
                owner: format!("{c}/{o}"),
            });
        }
        r.allocated_blocks = r
            .allocated_blocks
            .saturating_add(rec.extents.allocated_blocks());
        objects.insert((c, o), rec);
    }
    r.objects = objects.len() as u64;
    for row in txn
        .open_table(OMAP)
        .map_err(me("open omap"))?
        .iter()
        .map_err(me("scan omap"))?
    {
        let (k, _) = row.map_err(me("scan omap"))?;
        r.omap_entries += 1;
        match codec::parse_omap_key(k.value()) {
            Ok((c, o, _)) if objects.contains_key(&(c, o.clone())) => {}
            Ok((c, o, _)) => r
                .errors
                .push(format!("omap entry of missing object {c}/{o}")),
            Err(e) => r.errors.push(e.to_string()),
        }
    }
    for row in txn
        .open_table(FREE)
        .map_err(me("open free"))?
        .iter()
        .map_err(me("scan free"))?
    {
        let (k, v) = row.map_err(me("scan free"))?;
        match (
            codec::u64_value(k.value(), "free key"),
            codec::u64_value(v.value(), "free run"),
        ) {
            (Ok(s), Ok(n)) if n > 0 => {
                r.free_blocks = r.free_blocks.saturating_add(n);
                runs.push(Owned {
                    start: s,
                    len: n,
                    owner: "free list".into(),
                });
            }
            _ => r.errors.push("bad free list entry".into()),
        }
    }
    if jpos.blocks > 0 {
        runs.push(Owned {
            start: 1,
            len: jpos.blocks,
            owner: "the journal".into(),
        });
    }
    check_runs(&mut runs, total, &mut r.errors);
    let covered = runs
        .iter()
        .fold(0u64, |a, o| a.saturating_add(o.len))
        .saturating_sub(jpos.blocks);
    if covered != r.usable_blocks {
        r.errors.push(format!(
            "space accounting: {} allocated + {} free = {covered} blocks, device has {} usable (leak or double use)",
            r.allocated_blocks, r.free_blocks, r.usable_blocks
        ));
    }
    let mut overlay: HashMap<u64, Vec<u8>> = HashMap::new();
    for row in txn
        .open_table(DEFERRED)
        .map_err(me("open deferred"))?
        .iter()
        .map_err(me("scan deferred"))?
    {
        let (_, v) = row.map_err(me("scan deferred"))?;
        r.deferred_records += 1;
        match codec::decode_deferred(v.value()) {
            Ok((pb, data)) if pb >= 1 && pb < total => {
                overlay.insert(pb, data.to_vec());
            }
            Ok((pb, _)) => r
                .errors
                .push(format!("deferred write to block {pb} outside the device")),
            Err(e) => r.errors.push(e.to_string()),
        }
    }
    // The journal's deferred blocks are newer than the table's.
    for (pb, data) in replayed.blocks {
        overlay.insert(pb, data.to_vec());
    }
    if deep {
        verify_blocks(dev, &objects, &overlay, &mut r);
    }
    Ok(r)
}

/// Runs must lie in `[1, total)` and not overlap.
fn check_runs(runs: &mut [Owned], total: u64, errors: &mut Vec<String>) {
    runs.sort_by_key(|o| o.start);
    for o in runs.iter() {
        if o.start < 1 || o.start.saturating_add(o.len) > total {
            errors.push(format!(
                "{}: blocks {}+{} outside the device",
                o.owner, o.start, o.len
            ));
        }
    }
    for w in runs.windows(2) {
        if w[0].start.saturating_add(w[0].len) > w[1].start {
            errors.push(format!(
                "blocks {}+{} of {} overlap blocks {}+{} of {}",
                w[0].start, w[0].len, w[0].owner, w[1].start, w[1].len, w[1].owner
            ));
        }
    }
}

fn verify_blocks(
    dev: &dyn Device,
    objects: &BTreeMap<(CollectionId, ObjectKey), ObjectRecord>,
    overlay: &HashMap<u64, Vec<u8>>,
    r: &mut FsckReport,
) {
    let mut buf = vec![0u8; BLOCK];
    for ((c, o), rec) in objects {
        for ext in rec.extents.extents.values() {
            for (i, want) in ext.crcs.iter().enumerate() {
                let pb = ext.pblock + i as u64;
                if let Some(d) = overlay.get(&pb) {
                    buf.copy_from_slice(d);
                } else if let Err(e) = dev.read_at(pb * BLOCK as u64, &mut buf) {
                    r.errors
                        .push(format!("{c}/{o}: reading block {pb} of the data file: {e}"));
                    continue;
                }
                r.blocks_verified += 1;
                if crc32c::crc32c(&buf) != *want {
                    r.errors.push(format!(
                        "{c}/{o}: checksum mismatch in block {pb} of the data file"
                    ));
                }
            }
        }
    }
}

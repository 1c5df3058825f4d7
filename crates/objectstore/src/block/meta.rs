//! The metadata store: redb tables, the format record, and loading everything into the
//! in-memory state at open.

use std::collections::BTreeMap;

use redb::{ReadableTable, TableDefinition};

use super::codec::{self, ObjectRecord};
use super::extent::ExtentMap;
use crate::error::{Error, Result};
use crate::objmeta::ObjMeta;
use crate::types::{CollectionId, ObjectKey};

pub(crate) type Table = TableDefinition<'static, &'static [u8], &'static [u8]>;

/// Format facts: `format` (u64), `total_blocks` (u64), the journal's `journal_blocks`,
/// `journal_through`, `journal_applied` and (format 4) `journal_tail` (u64 each, see
/// `journal.rs`); once an OSD owns
/// the store, `fsid` (its cluster's, UTF-8) and `osd_id` (u64).
pub(crate) const SUPER: Table = TableDefinition::new("super");
/// Collection id -> empty.
pub(crate) const COLLS: Table = TableDefinition::new("colls");
/// Collection id ++ object key -> object record.
pub(crate) const OBJECTS: Table = TableDefinition::new("objects");
/// Omap prefix of the object ++ omap key -> value.
pub(crate) const OMAP: Table = TableDefinition::new("omap");
/// First free block (u64 BE) -> number of blocks (u64 BE).
pub(crate) const FREE: Table = TableDefinition::new("free");
/// Sequence number (u64 BE) -> deferred write record.
pub(crate) const DEFERRED: Table = TableDefinition::new("deferred");

pub(crate) const ALL_TABLES: [Table; 6] = [SUPER, COLLS, OBJECTS, OMAP, FREE, DEFERRED];

/// Current on-disk format version. 1: object keys without snapshot ids, collections
/// without shards. 2: no write-ahead journal (small writes logged in redb). 3: the
/// journal at blocks `1..=journal_blocks` of the data device. 4: the journal is a ring
/// (`journal_tail`), and redb holds metadata only up to the last checkpoint.
pub(crate) const FORMAT_VERSION: u64 = 4;

/// The oldest format this build opens. A store of format 3 is converted at open, after
/// its journal is replayed (its records start at the region's start, as a format-4
/// journal whose tail is 0): the format record, then the data device's label, say 4.
pub(crate) const FORMAT_OLDEST: u64 = 3;

/// Map any redb error type to ours.
pub(crate) fn me<E: Into<redb::Error>>(context: &'static str) -> impl Fn(E) -> Error {
    move |e| Error::meta(context, e.into())
}

/// An object as held in memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Onode {
    pub size: u64,
    pub extents: ExtentMap,
    pub meta: ObjMeta,
}

/// Whose a store is: written by `shoal osd mkfs`, checked at every open by the OSD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreIdentity {
    /// The cluster's fsid.
    pub fsid: String,
    /// The OSD's id.
    pub osd_id: u32,
}

impl std::fmt::Display for StoreIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "osd.{} of cluster {}", self.osd_id, self.fsid)
    }
}

/// Everything `open` reads.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    pub total_blocks: u64,
    pub identity: Option<StoreIdentity>,
    pub colls: BTreeMap<CollectionId, BTreeMap<ObjectKey, Onode>>,
    pub free: Vec<(u64, u64)>,
    pub journal: super::journal::Position,
    /// (seq, device block, data)
    pub deferred: Vec<(u64, u64, Vec<u8>)>,
}

pub(crate) fn read_super(txn: &redb::ReadTransaction) -> Result<u64> {
    let t = txn.open_table(SUPER).map_err(me("open super"))?;
    let get = |k: &str| -> Result<u64> {
        let v = t
            .get(k.as_bytes())
            .map_err(me("read super"))?
            .ok_or_else(|| Error::NotFormatted(format!("no `{k}` in the format record")))?;
        codec::u64_value(v.value(), k)
    };
    let format = get("format")?;
    if !(FORMAT_OLDEST..=FORMAT_VERSION).contains(&format) {
        return Err(Error::NotFormatted(format!(
            "format version {format}; this build reads versions {FORMAT_OLDEST} to \
             {FORMAT_VERSION} (a store of another format cannot be opened: move its OSD's \
             data by recovery to a store made by this build)"
        )));
    }
    let total = get("total_blocks")?;
    // Every device offset is `block * BLOCK`: keep that product in range.
    if !(2..=u64::MAX / super::BLOCK as u64).contains(&total) {
        return Err(Error::Corrupt(format!("total_blocks {total} out of range")));
    }
    Ok(total)
}

/// The format version the format record holds.
pub(crate) fn read_format(db: &redb::Database) -> Result<u64> {
    let txn = db.begin_read().map_err(me("begin read"))?;
    let t = txn.open_table(SUPER).map_err(me("open super"))?;
    match t.get(&b"format"[..]).map_err(me("read super"))? {
        Some(v) => codec::u64_value(v.value(), "format"),
        None => Err(Error::NotFormatted(
            "no `format` in the format record".into(),
        )),
    }
}

/// Convert the format record of an older store to this build's format (see
/// [`FORMAT_OLDEST`]); the journal must have been replayed. Returns whether it did.
pub(crate) fn upgrade(db: &redb::Database) -> Result<bool> {
    if read_format(db)? >= FORMAT_VERSION {
        return Ok(false);
    }
    let mut w = db.begin_write().map_err(me("begin upgrade"))?;
    w.set_durability(redb::Durability::Immediate);
    {
        let mut s = w.open_table(SUPER).map_err(me("open super"))?;
        s.insert(&b"format"[..], &FORMAT_VERSION.to_be_bytes()[..])
            .map_err(me("write super"))?;
        s.insert(super::journal::KEY_TAIL.as_bytes(), &0u64.to_be_bytes()[..])
            .map_err(me("write super"))?;
    }
    w.commit().map_err(me("commit upgrade"))?;
    Ok(true)
}

/// The owner recorded in the format record, if any.
pub(crate) fn read_identity(txn: &redb::ReadTransaction) -> Result<Option<StoreIdentity>> {
    let t = txn.open_table(SUPER).map_err(me("open super"))?;
    let fsid = t.get(&b"fsid"[..]).map_err(me("read super"))?;
    let id = t.get(&b"osd_id"[..]).map_err(me("read super"))?;
    match (fsid, id) {
        (None, None) => Ok(None),
        (Some(f), Some(i)) => {
            let fsid = std::str::from_utf8(f.value())
                .map_err(|_| Error::Corrupt("the recorded fsid is not UTF-8".into()))?
                .to_string();
            let id = codec::u64_value(i.value(), "osd_id")?;
            let osd_id = u32::try_from(id)
                .map_err(|_| Error::Corrupt(format!("recorded OSD id {id} out of range")))?;
            Ok(Some(StoreIdentity { fsid, osd_id }))
        }
        _ => Err(Error::Corrupt(
            "the format record has only half of the OSD identity".into(),
        )),
    }
}

/// Record the owner in the format record.
pub(crate) fn write_identity(db: &redb::Database, id: &StoreIdentity) -> Result<()> {
    let mut w = db.begin_write().map_err(me("begin identity"))?;
    w.set_durability(redb::Durability::Immediate);
    {
        let mut s = w.open_table(SUPER).map_err(me("open super"))?;
        s.insert(&b"fsid"[..], id.fsid.as_bytes())
            .map_err(me("write super"))?;
        s.insert(&b"osd_id"[..], &u64::from(id.osd_id).to_be_bytes()[..])
            .map_err(me("write super"))?;
    }
    w.commit().map_err(me("commit identity"))
}

/// The persisted free list's runs.
pub(crate) fn read_free(txn: &redb::ReadTransaction, total_blocks: u64) -> Result<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    for row in txn
        .open_table(FREE)
        .map_err(me("open free"))?
        .iter()
        .map_err(me("scan free"))?
    {
        let (k, v) = row.map_err(me("scan free"))?;
        let (start, n) = (
            codec::u64_value(k.value(), "free key")?,
            codec::u64_value(v.value(), "free run")?,
        );
        if start < 1 || start.checked_add(n).is_none_or(|e| e > total_blocks) {
            return Err(Error::Corrupt(format!(
                "free run {start}+{n} outside the device"
            )));
        }
        out.push((start, n));
    }
    Ok(out)
}

pub(crate) fn load(db: &redb::Database) -> Result<Loaded> {
    let txn = db.begin_read().map_err(me("begin read"))?;
    let mut out = Loaded {
        total_blocks: read_super(&txn)?,
        identity: read_identity(&txn)?,
        ..Loaded::default()
    };
    for row in txn
        .open_table(COLLS)
        .map_err(me("open colls"))?
        .iter()
        .map_err(me("scan colls"))?
    {
        let (k, _) = row.map_err(me("scan colls"))?;
        let c = CollectionId::from_bytes(k.value())
            .ok_or_else(|| Error::Corrupt("bad collection key".into()))?;
        out.colls.insert(c, BTreeMap::new());
    }
    for row in txn
        .open_table(OBJECTS)
        .map_err(me("open objects"))?
        .iter()
        .map_err(me("scan objects"))?
    {
        let (k, v) = row.map_err(me("scan objects"))?;
        let (c, o) = codec::parse_object_key(k.value())?;
        let rec = ObjectRecord::decode(v.value())?;
        rec.check(out.total_blocks)
            .map_err(|e| Error::Corrupt(format!("{c}/{o}: {e}")))?;
        let objs = out
            .colls
            .get_mut(&c)
            .ok_or_else(|| Error::Corrupt(format!("object {o} in missing collection {c}")))?;
        let meta = ObjMeta {
            xattrs: rec.xattrs,
            omap_header: rec.omap_header,
            omap: BTreeMap::new(),
        };
        objs.insert(
            o,
            Onode {
                size: rec.size,
                extents: rec.extents,
                meta,
            },
        );
    }
    for row in txn
        .open_table(OMAP)
        .map_err(me("open omap"))?
        .iter()
        .map_err(me("scan omap"))?
    {
        let (k, v) = row.map_err(me("scan omap"))?;
        let (c, o, key) = codec::parse_omap_key(k.value())?;
        let onode = out
            .colls
            .get_mut(&c)
            .and_then(|objs| objs.get_mut(&o))
            .ok_or_else(|| Error::Corrupt(format!("omap entry of missing object {c}/{o}")))?;
        onode.meta.omap.insert(
            bytes::Bytes::copy_from_slice(key),
            bytes::Bytes::copy_from_slice(v.value()),
        );
    }
    out.free = read_free(&txn, out.total_blocks)?;
    out.journal = super::journal::read_position(&txn, out.total_blocks)?;
    for row in txn
        .open_table(DEFERRED)
        .map_err(me("open deferred"))?
        .iter()
        .map_err(me("scan deferred"))?
    {
        let (k, v) = row.map_err(me("scan deferred"))?;
        let seq = codec::u64_value(k.value(), "deferred key")?;
        let (pblock, data) = codec::decode_deferred(v.value())?;
        if pblock < 1 || pblock >= out.total_blocks {
            return Err(Error::Corrupt(format!(
                "deferred write to block {pblock} outside the device"
            )));
        }
        out.deferred.push((seq, pblock, data.to_vec()));
    }
    Ok(out)
}

//! The write-ahead journal: a region of the data device (blocks `1..=journal_blocks`,
//! right after the label) where the committer appends each group of transactions as one
//! checksummed record, made durable by the same device sync that covers their
//! copy-on-write data. A transaction is acknowledged once its record is durable. Its
//! metadata then waits in memory, merged with the changes of later records, and its
//! deferred blocks in the overlay, until a checkpoint writes them all back (the blocks in
//! place, the metadata to redb in one transaction) in the background.
//!
//! The region is a ring. Records are appended at the head; one that does not fit before
//! the region's end goes to its start. A checkpoint covers every record up to the one it
//! was started after and, once durable, records in the format record the sequence it
//! covers (`journal_through`; `journal_applied` is kept equal to it for stores of format
//! 3, whose redb also held the metadata of later records) and the offset where the next
//! record starts (`journal_tail`, absent in format 3, whose records always started at
//! the region's start). The space of the records it covers is then reused. Replay at open
//! reads records from the tail while each is whole and carries the next sequence number,
//! looking at the region's start when the next one is not where the last ended: a torn or
//! stale record ends the journal.
//!
//! Record: a 32-byte header (magic, sequence, payload length, crc32c of the header's first
//! 24 bytes and the payload), the payload, zeros to the next block. Payload: the batches,
//! each its metadata changes (table, key, value), allocated runs, freed runs and deferred
//! blocks.

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;

use super::BLOCK;
use super::alloc::{FreeList, Run};
use super::apply::{Batch, KvOp};
use super::codec::{self, Reader};
use super::device::{AlignedBuf, Device};
use super::meta::{COLLS, DEFERRED, FREE, OBJECTS, OMAP, SUPER, Table, me};
use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"SHJRNL\x00\x01";
const HEADER: usize = 32;
const B: u64 = BLOCK as u64;

/// Smallest and largest journal, in blocks.
const MIN_BLOCKS: u64 = 8;
const MAX_BLOCKS: u64 = 16_384;

/// The journal's size for a device of `total_blocks`: 1/32 of it within
/// [`MIN_BLOCKS`, `MAX_BLOCKS`], and never more than a quarter of the space after the label.
pub(crate) fn blocks_for(total_blocks: u64) -> u64 {
    (total_blocks / 32)
        .clamp(MIN_BLOCKS, MAX_BLOCKS)
        .min(total_blocks.saturating_sub(1) / 4)
}

/// Where the journal is and how far redb has got, from the format record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Position {
    /// Length of the region in blocks (it starts at block 1).
    pub blocks: u64,
    /// Every record up to this sequence is fully in redb and in place.
    pub through: u64,
    /// redb holds the metadata of every record up to this sequence (`>= through`).
    pub applied: u64,
    /// Byte offset in the region where record `through + 1` starts, or where the record
    /// after it wrapped from (replay then looks at the region's start).
    pub tail: u64,
}

impl Position {
    pub fn bytes(&self) -> u64 {
        self.blocks * B
    }
}

pub(crate) const KEY_BLOCKS: &str = "journal_blocks";
pub(crate) const KEY_THROUGH: &str = "journal_through";
pub(crate) const KEY_APPLIED: &str = "journal_applied";
pub(crate) const KEY_TAIL: &str = "journal_tail";

/// Read the journal's position from the format record.
pub(crate) fn read_position(txn: &redb::ReadTransaction, total_blocks: u64) -> Result<Position> {
    let t = txn.open_table(SUPER).map_err(me("open super"))?;
    let get = |k: &str| -> Result<u64> {
        let v = t
            .get(k.as_bytes())
            .map_err(me("read super"))?
            .ok_or_else(|| Error::Corrupt(format!("no `{k}` in the format record")))?;
        codec::u64_value(v.value(), k)
    };
    // Format 3 has no tail: its records always started at the region's start.
    let tail = match t.get(KEY_TAIL.as_bytes()).map_err(me("read super"))? {
        Some(v) => codec::u64_value(v.value(), KEY_TAIL)?,
        None => 0,
    };
    let p = Position {
        blocks: get(KEY_BLOCKS)?,
        through: get(KEY_THROUGH)?,
        applied: get(KEY_APPLIED)?,
        tail,
    };
    if p.blocks > total_blocks.saturating_sub(2) || p.applied < p.through {
        return Err(Error::Corrupt(format!(
            "journal of {} blocks (applied {}, through {}) does not fit a device of {total_blocks} blocks",
            p.blocks, p.applied, p.through
        )));
    }
    if p.tail % B != 0 || p.tail > p.bytes() {
        return Err(Error::Corrupt(format!(
            "journal tail at byte {} of a journal of {} blocks",
            p.tail, p.blocks
        )));
    }
    Ok(p)
}

/// Write one sequence number of the position in a write transaction.
pub(crate) fn put_seq(wtx: &redb::WriteTransaction, key: &str, seq: u64) -> Result<()> {
    wtx.open_table(SUPER)
        .map_err(me("open super"))?
        .insert(key.as_bytes(), &seq.to_be_bytes()[..])
        .map_err(me("write super"))?;
    Ok(())
}

pub(crate) fn table_id(t: &Table) -> Option<u8> {
    use redb::TableHandle;
    [COLLS, OBJECTS, OMAP]
        .iter()
        .position(|x| x.name() == t.name())
        .map(|i| i as u8 + 1)
}

pub(crate) fn table_of(id: u8) -> Option<Table> {
    match id {
        1 => Some(COLLS),
        2 => Some(OBJECTS),
        3 => Some(OMAP),
        _ => None,
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
}

fn put_runs(out: &mut Vec<u8>, runs: &[Run]) {
    out.extend_from_slice(&(runs.len() as u32).to_be_bytes());
    for (s, n) in runs {
        out.extend_from_slice(&s.to_be_bytes());
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// Append the encoding of `b` to `out`. Fails only on a table the journal does not know
/// (a programming error, reported rather than lost).
pub(crate) fn encode_batch(out: &mut Vec<u8>, b: &Batch) -> Result<()> {
    out.extend_from_slice(&(b.kv.len() as u32).to_be_bytes());
    for kv in &b.kv {
        let (kind, t, k, v) = match kv {
            KvOp::Put(t, k, v) => (0u8, t, k, Some(v)),
            KvOp::Del(t, k) => (1u8, t, k, None),
        };
        let id = table_id(t).ok_or_else(|| {
            Error::Corrupt("a metadata change to a table the journal does not carry".into())
        })?;
        out.push(kind);
        out.push(id);
        put_bytes(out, k);
        if let Some(v) = v {
            put_bytes(out, v);
        }
    }
    put_runs(out, &b.allocs);
    put_runs(out, &b.frees);
    out.extend_from_slice(&(b.deferred.len() as u32).to_be_bytes());
    for (seq, pb, data) in &b.deferred {
        out.extend_from_slice(&seq.to_be_bytes());
        out.extend_from_slice(&pb.to_be_bytes());
        put_bytes(out, data);
    }
    Ok(())
}

/// Bytes a record with this payload takes in the journal.
pub(crate) fn record_bytes(payload_len: usize) -> u64 {
    ((HEADER + payload_len) as u64).div_ceil(B) * B
}

/// A whole record (header, `payload`, padding) in a buffer fit for direct I/O.
#[cfg(test)]
pub(crate) fn seal(seq: u64, payload: &[u8]) -> AlignedBuf {
    let mut buf = AlignedBuf::new(0);
    seal_into(&mut buf, seq, payload);
    buf
}

/// [`seal`] into a buffer kept from the last record (no fresh pages per record).
pub(crate) fn seal_into(buf: &mut AlignedBuf, seq: u64, payload: &[u8]) {
    buf.reuse(record_bytes(payload.len()) as usize);
    let s = buf.as_mut_slice();
    s[..8].copy_from_slice(MAGIC);
    s[8..16].copy_from_slice(&seq.to_be_bytes());
    s[16..24].copy_from_slice(&(payload.len() as u64).to_be_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&s[..24]), payload);
    s[24..28].copy_from_slice(&crc.to_be_bytes());
    s[HEADER..HEADER + payload.len()].copy_from_slice(payload);
    s[HEADER + payload.len()..].fill(0);
}

fn runs(c: &mut Reader<'_>) -> Result<Vec<Run>> {
    let n = c.count(16)?;
    (0..n).map(|_| Ok((c.u64()?, c.u64()?))).collect()
}

/// Decode a record's payload.
pub(crate) fn decode_payload(payload: &[u8]) -> Result<Vec<Batch>> {
    let mut c = Reader::new(payload, "journal record");
    let mut out = Vec::new();
    while !c.is_empty() {
        let mut b = Batch::default();
        let n = c.count(6)?;
        for _ in 0..n {
            let kind = c.u8()?;
            let t = table_of(c.u8()?)
                .ok_or_else(|| Error::Corrupt("journal entry names an unknown table".into()))?;
            let k = c.bytes32()?.to_vec();
            b.kv.push(match kind {
                0 => KvOp::Put(t, k, c.bytes32()?.to_vec()),
                1 => KvOp::Del(t, k),
                _ => return Err(Error::Corrupt(format!("journal entry of kind {kind}"))),
            });
        }
        b.allocs = runs(&mut c)?;
        b.frees = runs(&mut c)?;
        let n = c.count(20)?;
        for _ in 0..n {
            let (seq, pb) = (c.u64()?, c.u64()?);
            b.deferred
                .push((seq, pb, Bytes::copy_from_slice(c.bytes32()?)));
        }
        out.push(b);
    }
    Ok(out)
}

/// A record read back from the journal.
#[derive(Debug)]
pub(crate) struct Record {
    pub seq: u64,
    pub batches: Vec<Batch>,
}

/// Read the records after `pos.through`, from the tail, while each is whole and next in
/// sequence (the next record is where the last one ended, or at the region's start when
/// it wrapped). Only the last record written can be torn (each is synced before the next
/// is written): a whole record with a later sequence anywhere in the region means a
/// damaged record before it, and acknowledged writes would be lost, so that is an error
/// rather than the end of the journal.
pub(crate) fn scan(dev: &dyn Device, pos: &Position) -> Result<Vec<Record>> {
    let mut off = pos.tail;
    let mut expect = pos.through + 1;
    let mut out = Vec::new();
    loop {
        let mut found = read_record(dev, pos, off, expect)?.map(|r| (off, r));
        if found.is_none() && off != 0 {
            found = read_record(dev, pos, 0, expect)?.map(|r| (0, r));
        }
        let Some((at, (payload, total))) = found else {
            break;
        };
        let batches = decode_payload(&payload)
            .map_err(|e| Error::Corrupt(format!("journal record {expect}: {e}")))?;
        out.push(Record {
            seq: expect,
            batches,
        });
        off = at + total;
        expect += 1;
    }
    if let Some((at, seq)) = later_record(dev, pos, expect)? {
        return Err(Error::Corrupt(format!(
            "the journal's record {expect} (at byte {}) is damaged but record {seq} follows it \
             at byte {}: acknowledged writes would be lost",
            B + off,
            B + at
        )));
    }
    Ok(out)
}

/// The whole record with sequence `seq` at byte `off` of the region, if one is there:
/// its payload and the bytes it takes. `seq: None` accepts any sequence.
fn record_at(
    dev: &dyn Device,
    pos: &Position,
    off: u64,
    seq: Option<u64>,
) -> Result<Option<(u64, Vec<u8>, u64)>> {
    let end = pos.bytes();
    if off + B > end {
        return Ok(None);
    }
    let mut head = AlignedBuf::new(BLOCK);
    dev.read_at(B + off, head.as_mut_slice())
        .map_err(|e| Error::io("reading the journal", e))?;
    let h = head.as_slice();
    let word = |i: usize| u64::from_be_bytes(h[i..i + 8].try_into().unwrap_or([0; 8]));
    let (got, len) = (word(8), word(16));
    if &h[..8] != MAGIC || seq.is_some_and(|s| s != got) || len > end - off - HEADER as u64 {
        return Ok(None);
    }
    let total = record_bytes(len as usize);
    let mut rec = AlignedBuf::new(total as usize);
    dev.read_at(B + off, rec.as_mut_slice())
        .map_err(|e| Error::io("reading the journal", e))?;
    let r = rec.as_slice();
    let want = u32::from_be_bytes([r[24], r[25], r[26], r[27]]);
    let payload = &r[HEADER..HEADER + len as usize];
    if crc32c::crc32c_append(crc32c::crc32c(&r[..24]), payload) != want {
        // A torn record: the crash came before its sync, so nothing in it was
        // acknowledged.
        return Ok(None);
    }
    Ok(Some((got, payload.to_vec(), total)))
}

fn read_record(
    dev: &dyn Device,
    pos: &Position,
    off: u64,
    seq: u64,
) -> Result<Option<(Vec<u8>, u64)>> {
    Ok(record_at(dev, pos, off, Some(seq))?.map(|(_, p, t)| (p, t)))
}

/// A whole record with a sequence after `expect` anywhere in the region: (offset, seq).
fn later_record(dev: &dyn Device, pos: &Position, expect: u64) -> Result<Option<(u64, u64)>> {
    let mut off = 0;
    while off + B <= pos.bytes() {
        if let Some((seq, _, _)) = record_at(dev, pos, off, None)?
            && seq > expect
        {
            return Ok(Some((off, seq)));
        }
        off += B;
    }
    Ok(None)
}

/// Apply the metadata of `b` to an open write transaction and to the persisted free list
/// mirror `free` (the caller writes its dirty runs).
pub(crate) fn write_meta(
    wtx: &redb::WriteTransaction,
    b: &Batch,
    free: &mut FreeList,
) -> Result<()> {
    for kv in &b.kv {
        match kv {
            KvOp::Put(t, k, v) => {
                wtx.open_table(*t)
                    .map_err(me("open table"))?
                    .insert(&k[..], &v[..])
                    .map_err(me("put"))?;
            }
            KvOp::Del(t, k) => {
                wtx.open_table(*t)
                    .map_err(me("open table"))?
                    .remove(&k[..])
                    .map_err(me("delete"))?;
            }
        }
    }
    apply_runs(b, free)
}

/// Apply a batch's allocated and freed runs to the persisted free list mirror.
pub(crate) fn apply_runs(b: &Batch, free: &mut FreeList) -> Result<()> {
    for &(s, n) in &b.allocs {
        if !free.remove_range(s, n) {
            return Err(Error::Corrupt(format!(
                "allocated run {s}+{n} is not free in the persisted free list"
            )));
        }
    }
    for &(s, n) in &b.frees {
        if !free.free(s, n) {
            return Err(Error::Corrupt(format!("double free of run {s}+{n}")));
        }
    }
    Ok(())
}

/// Write the changed runs of the free list mirror.
pub(crate) fn write_free(wtx: &redb::WriteTransaction, free: &mut FreeList) -> Result<()> {
    write_free_runs(wtx, &free.take_dirty())
}

/// Write changed runs of the free list (`None`: the run is gone).
pub(crate) fn write_free_runs(
    wtx: &redb::WriteTransaction,
    runs: &[(u64, Option<u64>)],
) -> Result<()> {
    let mut t = wtx.open_table(FREE).map_err(me("open free"))?;
    for &(k, v) in runs {
        let k = k.to_be_bytes();
        match v {
            Some(n) => t.insert(&k[..], &n.to_be_bytes()[..]).map(|_| ()),
            None => t.remove(&k[..]).map(|_| ()),
        }
        .map_err(me("put free"))?;
    }
    Ok(())
}

/// What replaying the journal left to do.
#[derive(Debug, Default)]
pub(crate) struct Replayed {
    /// Records found after the last checkpoint.
    pub records: u64,
    /// Newest contents of every block the records defer: to be written in place (and
    /// synced) before the replay's metadata commit reaches the file.
    pub blocks: BTreeMap<u64, Bytes>,
    /// The sequence number the next record gets.
    pub next_seq: u64,
}

/// Read the journal and apply what redb lacks to `db` in one transaction that records
/// every record as applied and checkpointed. The caller must write [`Replayed::blocks`]
/// in place and sync the device before that transaction reaches the file (the staged
/// open and the read-only tools hold it in memory).
pub(crate) fn replay(dev: &dyn Device, db: &redb::Database, data: &Path) -> Result<Replayed> {
    let rtx = db.begin_read().map_err(me("begin read"))?;
    let total = super::meta::read_super(&rtx)?;
    let pos = read_position(&rtx, total)?;
    let records = scan(dev, &pos).map_err(|e| match e {
        Error::Corrupt(m) => Error::damaged(data, m),
        other => other,
    })?;
    let free_runs = if records.is_empty() {
        Vec::new()
    } else {
        super::meta::read_free(&rtx, total)?
    };
    drop(rtx);
    let mut out = Replayed {
        records: records.len() as u64,
        next_seq: pos.through + 1 + records.len() as u64,
        ..Replayed::default()
    };
    if records.is_empty() {
        if pos.applied > pos.through {
            return Err(Error::Corrupt(format!(
                "redb holds journal records up to {} but the journal ends at {}",
                pos.applied, pos.through
            )));
        }
        return Ok(out);
    }
    let last = pos.through + records.len() as u64;
    if pos.applied > last {
        return Err(Error::Corrupt(format!(
            "redb holds journal records up to {} but the journal ends at {last}",
            pos.applied
        )));
    }
    let mut free = FreeList::from_runs(free_runs)
        .ok_or_else(|| Error::Corrupt("persisted free list overlaps itself".into()))?;
    let journal_end = 1 + pos.blocks;
    let mut wtx = db.begin_write().map_err(me("begin replay"))?;
    wtx.set_durability(redb::Durability::Immediate);
    // Records of the `deferred` table (batches too large for the journal) are older than
    // every journal record after the checkpoint: they go in place first, and a later
    // free cancels them like any other deferred write.
    {
        use redb::ReadableTable;
        let mut t = wtx.open_table(DEFERRED).map_err(me("open deferred"))?;
        let mut seqs = Vec::new();
        for row in t.iter().map_err(me("scan deferred"))? {
            let (k, v) = row.map_err(me("scan deferred"))?;
            let (pb, data) = codec::decode_deferred(v.value())?;
            if pb < journal_end || pb >= total || data.len() != BLOCK {
                return Err(Error::Corrupt(format!(
                    "deferred write to block {pb} ({} bytes) outside the data area",
                    data.len()
                )));
            }
            out.blocks.insert(pb, Bytes::copy_from_slice(data));
            seqs.push(k.value().to_vec());
        }
        for k in seqs {
            t.remove(&k[..]).map_err(me("delete deferred"))?;
        }
    }
    for r in &records {
        for b in &r.batches {
            if r.seq > pos.applied {
                write_meta(&wtx, b, &mut free)?;
            }
            for (_, pb, data) in &b.deferred {
                if *pb < journal_end || *pb >= total || data.len() != BLOCK {
                    return Err(Error::Corrupt(format!(
                        "journal record {} defers a write to block {pb} ({} bytes)",
                        r.seq,
                        data.len()
                    )));
                }
                out.blocks.insert(*pb, data.clone());
            }
            // A freed block may since hold another object's copy-on-write data: a
            // deferred write that came before the free must not land on it.
            for &(s, n) in &b.frees {
                let gone: Vec<u64> = out
                    .blocks
                    .range(s..s.saturating_add(n))
                    .map(|(k, _)| *k)
                    .collect();
                for k in gone {
                    out.blocks.remove(&k);
                }
            }
        }
    }
    write_free(&wtx, &mut free)?;
    put_seq(&wtx, KEY_APPLIED, last)?;
    put_seq(&wtx, KEY_THROUGH, last)?;
    put_seq(&wtx, KEY_TAIL, 0)?;
    wtx.commit().map_err(me("commit replay"))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> Batch {
        Batch {
            kv: vec![
                KvOp::Put(OBJECTS, b"key".to_vec(), b"value".to_vec()),
                KvOp::Del(OMAP, b"gone".to_vec()),
            ],
            allocs: vec![(10, 2)],
            frees: vec![(20, 1), (30, 4)],
            deferred: vec![(7, 12, Bytes::from(vec![5u8; BLOCK]))],
            ..Batch::default()
        }
    }

    #[test]
    fn a_payload_decodes_to_what_was_encoded() {
        let mut p = Vec::new();
        encode_batch(&mut p, &batch()).unwrap();
        encode_batch(&mut p, &Batch::default()).unwrap();
        let got = decode_payload(&p).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(format!("{:?}", got[0].kv), format!("{:?}", batch().kv));
        assert_eq!(got[0].allocs, vec![(10, 2)]);
        assert_eq!(got[0].frees, vec![(20, 1), (30, 4)]);
        assert_eq!(got[0].deferred, batch().deferred);
        assert!(got[1].kv.is_empty() && got[1].deferred.is_empty());
    }

    #[test]
    fn every_truncation_of_a_payload_is_an_error_not_a_panic() {
        let mut p = Vec::new();
        encode_batch(&mut p, &batch()).unwrap();
        for n in 1..p.len() {
            assert!(decode_payload(&p[..n]).is_err(), "cut at {n}");
        }
        // Huge counts are refused before anything is allocated.
        assert!(decode_payload(&[0xff, 0xff, 0xff, 0xff]).is_err());
    }

    #[test]
    fn the_scan_stops_at_a_torn_or_stale_record() {
        use super::super::fault::{FaultController, MemDevice};
        let dev = MemDevice::new(vec![0; 64 * BLOCK], FaultController::new(0, 1));
        let pos = Position {
            blocks: 16,
            through: 4,
            applied: 4,
            tail: 0,
        };
        let mut p = Vec::new();
        encode_batch(&mut p, &batch()).unwrap();
        let r5 = seal(5, &p);
        let r6 = seal(6, &p);
        let len = r5.as_slice().len() as u64;
        dev.write_at(B, r5.as_slice()).unwrap();
        dev.write_at(B + len, r6.as_slice()).unwrap();
        // A stale record (an older sequence) after them ends the journal.
        dev.write_at(B + 2 * len, seal(3, &p).as_slice()).unwrap();
        let got = scan(&*dev, &pos).unwrap();
        assert_eq!(got.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![5, 6]);
        // Tear record 6: one byte of its payload changes.
        let mut torn = r6.as_slice().to_vec();
        torn[HEADER + 3] ^= 1;
        dev.write_at(B + len, &torn).unwrap();
        let got = scan(&*dev, &pos).unwrap();
        assert_eq!(got.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![5]);
        // A journal whose first record is not the next in sequence is empty.
        let later = Position { through: 5, ..pos };
        assert!(scan(&*dev, &later).unwrap().is_empty());
        // A damaged record with a whole later one after it is an error, not the end.
        let r7 = seal(7, &p);
        dev.write_at(B + 2 * len, r7.as_slice()).unwrap();
        let e = scan(&*dev, &pos).unwrap_err().to_string();
        assert!(
            e.contains("record 6") && e.contains("record 7 follows"),
            "{e}"
        );
        dev.write_at(B + len, r6.as_slice()).unwrap();
        assert_eq!(scan(&*dev, &pos).unwrap().len(), 3);
    }

    #[test]
    fn the_scan_follows_records_around_the_ring() {
        use super::super::fault::{FaultController, MemDevice};
        let dev = MemDevice::new(vec![0; 64 * BLOCK], FaultController::new(0, 1));
        let mut p = Vec::new();
        encode_batch(&mut p, &batch()).unwrap();
        let len = record_bytes(p.len());
        assert_eq!(len, 2 * B, "the layout below assumes two-block records");
        // Record 5 at the tail (block 13 of 16); record 6 does not fit after it and went
        // to the region's start; a stale record of an earlier lap lies where 6 would be.
        let pos = Position {
            blocks: 16,
            through: 4,
            applied: 4,
            tail: 13 * B,
        };
        dev.write_at(B + 13 * B, seal(5, &p).as_slice()).unwrap();
        dev.write_at(B + 15 * B, &vec![0xAB; BLOCK]).unwrap();
        dev.write_at(B, seal(6, &p).as_slice()).unwrap();
        dev.write_at(B + 2 * B, seal(7, &p).as_slice()).unwrap();
        dev.write_at(B + 4 * B, seal(2, &p).as_slice()).unwrap();
        let got = scan(&*dev, &pos).unwrap();
        assert_eq!(got.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![5, 6, 7]);
        // A tail whose record wrapped: replay finds it at the start.
        let wrapped = Position {
            through: 5,
            tail: 15 * B,
            ..pos
        };
        let got = scan(&*dev, &wrapped).unwrap();
        assert_eq!(got.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![6, 7]);
        // Record 6 torn with 7 after it: acknowledged writes would be lost.
        let mut torn = seal(6, &p).as_slice().to_vec();
        torn[HEADER + 1] ^= 1;
        dev.write_at(B, &torn).unwrap();
        let e = scan(&*dev, &pos).unwrap_err().to_string();
        assert!(
            e.contains("record 6") && e.contains("record 7 follows"),
            "{e}"
        );
        // Only the last record torn: the journal ends before it.
        dev.write_at(B + 2 * B, &vec![0; 2 * BLOCK]).unwrap();
        let got = scan(&*dev, &pos).unwrap();
        assert_eq!(got.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![5]);
    }

    #[test]
    fn the_journal_is_a_thirty_second_of_the_device_within_bounds() {
        assert_eq!(blocks_for(40), 8);
        assert_eq!(blocks_for(16), 3);
        assert_eq!(blocks_for(2), 0);
        assert_eq!(blocks_for(1 << 18), 8192);
        assert_eq!(blocks_for(1 << 30), MAX_BLOCKS);
    }
}

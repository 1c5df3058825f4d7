//! The MDS journal: every metadata change is an [`Event`] appended to
//! segment objects in the metadata pool before its client hears back, and
//! replayed when an MDS starts. Appends are fenced by the MDS's
//! incarnation: the head object carries the incarnation of the newest MDS
//! that took the journal over, and every append checks it, so an old MDS
//! that was replaced (and may still run) can write nothing more.
//!
//! A segment holds records `[len u32][crc32c u32][JSON of Vec<Event>]`
//! (little-endian); one record per group commit. After the events are
//! written into the inode and directory objects ([`crate::store`]), the
//! head moves past their segments and those are removed.

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use shoal_client::{Error as ClientError, Op as RadosOp, Pool};
use shoal_proto::CmpOp;

use crate::msg::Out;
use crate::types::{Dentry, Inode, Names};

/// Bytes a segment grows to before the next one starts.
pub const SEGMENT_BYTES: u64 = 4 << 20;
/// Largest record accepted when reading (a damaged length is refused).
const RECORD_MAX: usize = 64 << 20;

/// One change of the metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "u", rename_all = "snake_case")]
pub enum Update {
    /// An inode's new state.
    Inode {
        /// The inode.
        inode: Inode,
    },
    /// An inode is gone (its data purged).
    Forget {
        /// Its number.
        ino: u64,
    },
    /// A directory entry set or removed.
    Link {
        /// The directory.
        dir: u64,
        /// The name.
        name: String,
        /// What it names now (`None`: removed).
        dentry: Option<Dentry>,
    },
    /// Inode numbers below this are taken.
    NextIno {
        /// The next free one.
        next: u64,
    },
    /// A directory grew past its fragments' bound: from now on its
    /// entries are spread over 2^bits fragments; `entries` is all of it
    /// at that point (the fragments are rewritten whole).
    Split {
        /// The directory.
        dir: u64,
        /// Its new fragment bits.
        bits: u8,
        /// Every entry.
        entries: Vec<(String, Dentry)>,
    },
    /// An inode unlinked while open joins (or leaves) the stray set.
    Stray {
        /// The inode.
        ino: u64,
        /// Joins (true) or leaves.
        on: bool,
    },
    /// A removed file's data joins the purge queue (journaled with its
    /// `Forget`), or leaves it once every object is gone: a purge an MDS
    /// crash cut short is resumed by the next one.
    Purge {
        /// The inode.
        ino: u64,
        /// Its size when removed (which objects to look for).
        size: u64,
        /// Joins (true) or leaves.
        on: bool,
    },
}

/// One client request's (or the MDS's own) changes, applied together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The changes.
    pub updates: Vec<Update>,
    /// The request it answers (session, tid) and the answer, so a resend
    /// after a failover gets the same answer without applying twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub req: Option<(u64, u64, Out)>,
}

/// Why the journal could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// A newer MDS took the journal over.
    #[error("fenced: a newer MDS (incarnation above {0}) owns the journal")]
    Fenced(u64),
    /// The cluster refused or failed.
    #[error("journal I/O: {0}")]
    Io(#[from] ClientError),
}

/// Where the journal starts, in the head's omap header.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// The first segment not yet trimmed.
    pub first_segment: u64,
    /// Inode numbers below this were handed out (as of the last trim).
    pub next_ino: u64,
}

/// The incarnation as stored: fixed width, so bytes compare as numbers.
pub fn incarnation_bytes(inc: u64) -> Bytes {
    Bytes::from(format!("{inc:020}"))
}

/// Takes the journal over for `incarnation`: refuses if a newer MDS
/// already has, else records ours (from now on older ones are fenced) and
/// returns the head.
pub async fn take_over(meta: &Pool, names: &Names, incarnation: u64) -> Result<Head, JournalError> {
    let oid = names.journal_head();
    // Made if missing; the guard refuses a newer incarnation's head.
    let op = RadosOp::new()
        .create(false)
        .cmpxattr("incarnation", CmpOp::Lte, incarnation_bytes(incarnation))
        .setxattr("incarnation", incarnation_bytes(incarnation));
    match meta.operate(&oid, op).await {
        Ok(_) => {}
        Err(e) if matches!(e.error, ClientError::CompareFailed(_)) => {
            return Err(JournalError::Fenced(incarnation));
        }
        Err(e) => return Err(e.error.into()),
    }
    let raw = meta.omap_get_header(&oid).await?;
    if raw.is_empty() {
        return Ok(Head::default());
    }
    serde_json::from_slice(&raw)
        .map_err(|e| JournalError::Io(ClientError::Io(format!("damaged journal head {oid}: {e}"))))
}

/// Records a new head (after a trim), fenced.
pub async fn write_head(
    meta: &Pool,
    names: &Names,
    incarnation: u64,
    head: &Head,
) -> Result<(), JournalError> {
    let op = RadosOp::new()
        .cmpxattr("incarnation", CmpOp::Eq, incarnation_bytes(incarnation))
        .omap_set_header(serde_json::to_vec(head).unwrap_or_default());
    fenced(meta.operate(&names.journal_head(), op).await, incarnation)
}

fn fenced<T>(r: Result<T, shoal_client::OpError>, incarnation: u64) -> Result<(), JournalError> {
    match r {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.error, ClientError::CompareFailed(_)) => {
            Err(JournalError::Fenced(incarnation))
        }
        Err(e) => Err(e.error.into()),
    }
}

/// Encodes events as one record.
pub fn encode_record(events: &[Event]) -> Bytes {
    let body = serde_json::to_vec(events).unwrap_or_default();
    let mut b = BytesMut::with_capacity(body.len() + 8);
    b.put_u32_le(body.len() as u32);
    b.put_u32_le(crc32c::crc32c(&body));
    b.put_slice(&body);
    b.freeze()
}

/// Decodes a segment's records; stops at the first damaged or truncated
/// one (reported as the second value: what was left unread, and why).
pub fn decode_records(mut data: &[u8]) -> (Vec<Event>, Option<String>) {
    let mut out = Vec::new();
    while !data.is_empty() {
        if data.len() < 8 {
            return (out, Some(format!("{} trailing bytes", data.len())));
        }
        let len = u32::from_le_bytes([data[0], data[1], data[2], data[3]]) as usize;
        let crc = u32::from_le_bytes([data[4], data[5], data[6], data[7]]);
        if len > RECORD_MAX || data.len() < 8 + len {
            return (out, Some(format!("a record of {len} bytes is cut short")));
        }
        let body = &data[8..8 + len];
        if crc32c::crc32c(body) != crc {
            return (out, Some("a record's checksum does not match".into()));
        }
        match serde_json::from_slice::<Vec<Event>>(body) {
            Ok(evs) => out.extend(evs),
            Err(e) => return (out, Some(format!("a record does not parse: {e}"))),
        }
        data = &data[8 + len..];
    }
    (out, None)
}

/// Appends a record to `segment`, fenced: every segment carries the
/// incarnation of the newest MDS that touched it, and an append of an
/// older one fails.
pub async fn append(
    meta: &Pool,
    names: &Names,
    incarnation: u64,
    segment: u64,
    record: Bytes,
) -> Result<(), JournalError> {
    let op = RadosOp::new()
        .create(false)
        .cmpxattr("incarnation", CmpOp::Lte, incarnation_bytes(incarnation))
        .setxattr("incarnation", incarnation_bytes(incarnation))
        .append(record);
    fenced(
        meta.operate(&names.journal_segment(segment), op).await,
        incarnation,
    )
}

/// Every event from `head` on, and the segment to append to next with its
/// length. Each segment read is also fenced: its incarnation xattr moves
/// to ours, so an older MDS can append to none of them; so is the first
/// segment past the end (made empty), so it cannot start a new one.
pub async fn read_all(
    meta: &Pool,
    names: &Names,
    incarnation: u64,
    head: &Head,
) -> Result<(Vec<Event>, u64, u64), JournalError> {
    let mut events = Vec::new();
    let mut seg = head.first_segment;
    loop {
        let oid = names.journal_segment(seg);
        let fence = RadosOp::new()
            .create(false)
            .cmpxattr("incarnation", CmpOp::Lte, incarnation_bytes(incarnation))
            .setxattr("incarnation", incarnation_bytes(incarnation));
        fenced(meta.operate(&oid, fence).await, incarnation)?;
        let data = meta.read(&oid, 0, 0).await?;
        if data.is_empty() {
            return Ok((events, seg, 0));
        }
        let (evs, damage) = decode_records(&data);
        events.extend(evs);
        if let Some(why) = damage {
            tracing::warn!(segment = %oid, "journal replay stops: {why}");
            // Nothing after a damaged record is trusted; new appends go to
            // a fresh segment.
            return Ok((events, seg + 1, 0));
        }
        let len = data.len() as u64;
        if len < SEGMENT_BYTES {
            return Ok((events, seg, len));
        }
        seg += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Kind;

    #[test]
    fn records_round_trip_and_damage_stops_the_reading() {
        let ev = |n: u64| Event {
            updates: vec![
                Update::Inode {
                    inode: Inode::new(n, Kind::File, 0o644, 0, 0, 5),
                },
                Update::Link {
                    dir: 1,
                    name: format!("f{n}"),
                    dentry: Some(Dentry {
                        ino: n,
                        kind: Kind::File,
                    }),
                },
            ],
            req: Some((1, n, Out::Done)),
        };
        let mut seg = Vec::new();
        seg.extend_from_slice(&encode_record(&[ev(1), ev(2)]));
        seg.extend_from_slice(&encode_record(&[ev(3)]));
        let (evs, damage) = decode_records(&seg);
        assert_eq!(evs, vec![ev(1), ev(2), ev(3)]);
        assert_eq!(damage, None);
        // Truncated: the whole records before stay.
        let (evs, damage) = decode_records(&seg[..seg.len() - 3]);
        assert_eq!(evs, vec![ev(1), ev(2)]);
        assert!(damage.unwrap().contains("cut short"));
        // A flipped byte in the second record.
        let mut bad = seg.clone();
        let n = bad.len();
        bad[n - 2] ^= 0x40;
        let (evs, damage) = decode_records(&bad);
        assert_eq!(evs.len(), 2);
        assert!(damage.unwrap().contains("checksum"));
        // A huge length.
        let (evs, damage) = decode_records(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1]);
        assert!(evs.is_empty() && damage.is_some());
    }

    #[test]
    fn incarnations_compare_as_numbers() {
        assert!(incarnation_bytes(9) < incarnation_bytes(10));
        assert!(incarnation_bytes(99) < incarnation_bytes(100_000));
    }
}

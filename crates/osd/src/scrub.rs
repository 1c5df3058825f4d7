//! Scrub's pure parts: the summary of one stored object (size, crc32c of
//! its data when deep, crc32c of its xattrs and omap), and the comparison
//! of the members' summaries that finds inconsistent objects and the copy
//! to repair them from.

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;
use shoal_objectstore::{CollectionId, ObjectKey, ObjectStore};
use shoal_proto::ScrubObject;

/// Bytes read per store call while checksumming.
const READ_CHUNK: u64 = 4 << 20;
/// Omap entries read per store call while checksumming.
const OMAP_PAGE: usize = 4096;

/// Summarizes one object. A read error (a checksum mismatch on the
/// device) is reported in `error`, not returned: it is what scrub looks for.
pub fn summarize(
    store: &dyn ObjectStore,
    c: &CollectionId,
    k: &ObjectKey,
    deep: bool,
) -> ScrubObject {
    let mut s = ScrubObject {
        hash: k.hash,
        name: k.name.clone(),
        snap: crate::object::wire_snap(k),
        ..ScrubObject::default()
    };
    if let Err(e) = fill(store, c, k, deep, &mut s) {
        s.error = e.to_string();
    }
    s
}

fn fill(
    store: &dyn ObjectStore,
    c: &CollectionId,
    k: &ObjectKey,
    deep: bool,
    s: &mut ScrubObject,
) -> shoal_objectstore::Result<()> {
    s.size = store.stat(c, k)?.size;
    if deep {
        let mut off = 0;
        while off < s.size {
            let chunk = store.read_from_media(c, k, off, READ_CHUNK.min(s.size - off))?;
            if chunk.is_empty() {
                break;
            }
            s.data_crc = crc32c::crc32c_append(s.data_crc, &chunk);
            off += chunk.len() as u64;
        }
    }
    let mut crc = 0u32;
    let mut add = |b: &[u8]| {
        crc = crc32c::crc32c_append(crc, &(b.len() as u64).to_le_bytes());
        crc = crc32c::crc32c_append(crc, b);
    };
    for (n, v) in store.getxattrs(c, k)? {
        add(n.as_bytes());
        add(&v);
    }
    add(&store.omap_get_header(c, k)?);
    let mut after: Option<Bytes> = None;
    loop {
        let start = match &after {
            Some(a) => Bound::Excluded(a.as_ref()),
            None => Bound::Unbounded,
        };
        let page = store.omap_range(c, k, start, Bound::Unbounded, OMAP_PAGE)?;
        let full = page.len() == OMAP_PAGE;
        for (key, v) in page {
            add(&key);
            add(&v);
            after = Some(key);
        }
        if !full {
            break;
        }
    }
    s.meta_crc = crc;
    Ok(())
}

/// An object whose copies differ, or that some member cannot read or lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inconsistency {
    /// The object.
    pub key: ObjectKey,
    /// Members whose copy differs from the authoritative one, lacks it, or cannot be read.
    pub bad: Vec<i32>,
    /// The member holding the copy to repair from (`None`: no readable copy).
    pub auth: Option<i32>,
    /// What differs, for people.
    pub why: String,
}

/// What `pg scrub|deep-scrub|repair` answers: one PG's pass.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScrubReport {
    /// The PG (`1.a`).
    pub pgid: String,
    /// Data read and checksummed, not only sizes and metadata.
    pub deep: bool,
    /// Inconsistent copies were rewritten from the authoritative one.
    pub repair: bool,
    /// Objects compared.
    pub objects: u64,
    /// Inconsistent objects found.
    pub errors: u64,
    /// Of them, repaired.
    pub repaired: u64,
    /// Each inconsistent object.
    pub inconsistent: Vec<ScrubFinding>,
}

/// One inconsistent object of a [`ScrubReport`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScrubFinding {
    /// The object's name.
    pub object: String,
    /// Members whose copy differs, lacks it or cannot be read.
    pub bad: Vec<i32>,
    /// The member holding the copy to repair from (null: none readable).
    pub auth: Option<i32>,
    /// What differs, for people.
    pub why: String,
}

fn fingerprint(o: &ScrubObject) -> (u64, u32, u32) {
    (o.size, o.data_crc, o.meta_crc)
}

/// Compares the members' summaries of the same key range. `maps[m]` is
/// member `m`'s list; `primary` wins ties. An object missing on a member
/// that the others have is inconsistent on that member.
pub fn compare(primary: i32, maps: &BTreeMap<i32, Vec<ScrubObject>>) -> Vec<Inconsistency> {
    let mut by_key: BTreeMap<ObjectKey, BTreeMap<i32, &ScrubObject>> = BTreeMap::new();
    for (m, list) in maps {
        for o in list {
            by_key
                .entry(crate::object::wire_key(o.hash, &o.name, o.snap))
                .or_default()
                .insert(*m, o);
        }
    }
    let mut out = Vec::new();
    for (key, copies) in by_key {
        // The authoritative copy: readable, the most common fingerprint,
        // the primary's on a tie.
        let mut votes: BTreeMap<(u64, u32, u32), Vec<i32>> = BTreeMap::new();
        for (m, o) in &copies {
            if o.error.is_empty() {
                votes.entry(fingerprint(o)).or_default().push(*m);
            }
        }
        let auth = votes
            .values()
            .max_by_key(|ms| (ms.len(), ms.contains(&primary)))
            .and_then(|ms| {
                if ms.contains(&primary) {
                    Some(primary)
                } else {
                    ms.first().copied()
                }
            });
        let want = auth.and_then(|a| copies.get(&a)).map(|o| fingerprint(o));
        let mut bad = Vec::new();
        let mut why = Vec::new();
        for m in maps.keys() {
            match copies.get(m) {
                None => {
                    bad.push(*m);
                    why.push(format!("missing on osd.{m}"));
                }
                Some(o) if !o.error.is_empty() => {
                    bad.push(*m);
                    why.push(format!("read error on osd.{m}: {}", o.error));
                }
                Some(o) if Some(fingerprint(o)) != want => {
                    bad.push(*m);
                    let (size, dcrc, mcrc) = fingerprint(o);
                    why.push(format!(
                        "osd.{m} differs (size {size}, data crc {dcrc:08x}, meta crc {mcrc:08x})"
                    ));
                }
                Some(_) => {}
            }
        }
        if !bad.is_empty() {
            out.push(Inconsistency {
                key,
                bad,
                auth,
                why: why.join("; "),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(name: &str, size: u64, crc: u32, error: &str) -> ScrubObject {
        ScrubObject {
            hash: 1,
            name: name.as_bytes().to_vec(),
            size,
            data_crc: crc,
            meta_crc: 7,
            error: error.into(),
            snap: 0,
        }
    }

    #[test]
    fn agreeing_copies_are_consistent() {
        let list = vec![o("a", 3, 9, ""), o("b", 4, 1, "")];
        let maps = BTreeMap::from([(0, list.clone()), (1, list.clone()), (2, list)]);
        assert!(compare(0, &maps).is_empty());
    }

    #[test]
    fn the_odd_copy_out_is_bad_and_the_majority_is_authoritative() {
        let maps = BTreeMap::from([
            (0, vec![o("a", 3, 666, "")]),
            (1, vec![o("a", 3, 9, "")]),
            (2, vec![o("a", 3, 9, "")]),
        ]);
        let inc = compare(0, &maps);
        assert_eq!(inc.len(), 1);
        assert_eq!(inc[0].bad, vec![0]);
        assert_eq!(inc[0].auth, Some(1));
    }

    #[test]
    fn unreadable_and_missing_copies_are_bad() {
        let maps = BTreeMap::from([
            (0, vec![o("a", 3, 9, ""), o("b", 1, 1, "")]),
            (1, vec![o("a", 0, 0, "checksum mismatch")]),
            (2, vec![o("a", 3, 9, ""), o("b", 1, 1, "")]),
        ]);
        let inc = compare(0, &maps);
        assert_eq!(inc.len(), 2);
        assert_eq!((inc[0].bad.clone(), inc[0].auth), (vec![1], Some(0)));
        assert!(inc[0].why.contains("read error on osd.1"));
        assert_eq!((inc[1].bad.clone(), inc[1].auth), (vec![1], Some(0)));
        assert!(inc[1].why.contains("missing on osd.1"));
    }

    #[test]
    fn on_a_tie_the_primary_wins_and_with_no_readable_copy_there_is_no_source() {
        let maps = BTreeMap::from([(0, vec![o("a", 3, 1, "")]), (1, vec![o("a", 3, 2, "")])]);
        let inc = compare(0, &maps);
        assert_eq!((inc[0].bad.clone(), inc[0].auth), (vec![1], Some(0)));
        let maps = BTreeMap::from([
            (0, vec![o("a", 0, 0, "bad")]),
            (1, vec![o("a", 0, 0, "bad")]),
        ]);
        assert_eq!(compare(0, &maps)[0].auth, None);
    }
}

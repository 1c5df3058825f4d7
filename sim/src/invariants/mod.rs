//! What must hold after every step, one file per invariant, and what must
//! hold of the copies once the cluster is clean.
//!
//! - [`single_primary`]: at most one primary acknowledges writes for a PG
//!   in an interval, it is the acting primary of the map that began the
//!   interval, and no two acknowledged writes of a PG share a version.
//! - [`acked_in_log`]: no acknowledged write is missing from the PG's
//!   authoritative log (the newest among every OSD's store, a crashed
//!   OSD's as its restart will find it).
//! - [`replicas_identical`]: once active+clean, every acting member holds
//!   the same objects with the same contents.

pub mod acked_in_log;
pub mod single_primary;

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;
use shoal_maps::PgId;
use shoal_objectstore::{ObjectKey, ObjectStore};
use shoal_osd::log::PgLog;
use shoal_osd::object::{collection, pg_meta_key};

use crate::world::World;

/// Runs the invariants that hold at every step.
pub fn check(w: &World) -> Result<(), String> {
    let acks = w.acks.all();
    single_primary::check(&acks, &w.maps)?;
    let stores: BTreeMap<i32, &dyn ObjectStore> = w
        .osds
        .iter()
        .map(|(id, s)| (*id, s.store.as_ref() as &dyn ObjectStore))
        .collect();
    acked_in_log::check(&acks, &stores)?;
    Ok(())
}

/// A PG's log in `store`, if the store holds the PG.
pub fn load_log(store: &dyn ObjectStore, pg: PgId) -> Option<PgLog> {
    let coll = collection(pg);
    if !store.collection_exists(&coll).ok()? {
        return None;
    }
    let omap: BTreeMap<Bytes, Bytes> = store
        .omap_range(
            &coll,
            &pg_meta_key(),
            Bound::Unbounded,
            Bound::Unbounded,
            1 << 24,
        )
        .ok()?
        .into_iter()
        .collect();
    PgLog::load(&omap).ok()
}

/// The client objects of `pg` in `store` and their data.
fn objects(store: &dyn ObjectStore, pg: PgId) -> Result<BTreeMap<ObjectKey, Bytes>, String> {
    let coll = collection(pg);
    let meta = pg_meta_key();
    let mut out = BTreeMap::new();
    let mut start: Option<ObjectKey> = None;
    loop {
        let page = store
            .list_objects(&coll, start.as_ref(), 256)
            .map_err(|e| e.to_string())?;
        for k in page.objects {
            if k == meta {
                continue;
            }
            let data = store
                .read(&coll, &k, 0, u64::MAX >> 1)
                .map_err(|e| e.to_string())?;
            out.insert(k, data);
        }
        match page.next {
            Some(n) => start = Some(n),
            None => return Ok(out),
        }
    }
}

/// The names of the client objects of `pg` in `store` (for diagnostics).
pub fn object_names(store: &dyn ObjectStore, pg: PgId) -> Vec<String> {
    objects(store, pg)
        .map(|m| {
            m.keys()
                .map(|k| String::from_utf8_lossy(&k.name).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Once clean: each PG's acting members hold identical objects.
pub async fn replicas_identical(w: &World) -> Result<(), String> {
    let map = w.newest_map().ok_or("no map")?;
    let pool = map.pool(w.pool).ok_or("no pool")?;
    for seed in 0..pool.pg_num {
        let pg = PgId { pool: w.pool, seed };
        let m = map.pg_to_up_acting(pg).map_err(|e| e.to_string())?;
        let mut first: Option<(i32, BTreeMap<ObjectKey, Bytes>)> = None;
        for osd in &m.acting {
            let slot = w.osds.get(osd).ok_or(format!("osd.{osd} unknown"))?;
            let mine = objects(slot.store.as_ref(), pg)?;
            match &first {
                None => first = Some((*osd, mine)),
                Some((o, theirs)) if *theirs != mine => {
                    let differ: Vec<String> = theirs
                        .keys()
                        .chain(mine.keys())
                        .filter(|k| theirs.get(*k) != mine.get(*k))
                        .map(|k| String::from_utf8_lossy(&k.name).into_owned())
                        .take(5)
                        .collect();
                    return Err(format!(
                        "pg {pg}: osd.{o} and osd.{osd} hold different copies of {differ:?}"
                    ));
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

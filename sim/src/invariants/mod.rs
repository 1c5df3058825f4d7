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
//!   the same objects with the same contents; of an erasure-coded pool,
//!   every member's shard holds the same objects, each with the same size
//!   and xattrs, and their coding chunks match their data chunks.

pub mod acked_in_log;
pub mod single_primary;

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;
use shoal_maps::PgId;
use shoal_objectstore::{CollectionId, ObjectKey, ObjectStore};
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
    // The pool's first count, and its count now (the nemesis splits it;
    // an OSD may have split for a map the world has not seen yet: the
    // largest seed any store holds counts too).
    let first = w.cfg.pg_num;
    let pg_num = |pool: u64| {
        let mapped = w.newest_map().and_then(|m| m.pool(pool).map(|p| p.pg_num));
        let held = stores
            .values()
            .filter_map(|s| s.list_collections().ok())
            .flatten()
            .filter(|c| c.pool == pool)
            .map(|c| (c.seed + 1).next_power_of_two())
            .max();
        let now = mapped.unwrap_or(first).max(held.unwrap_or(0)).max(first);
        (first, now)
    };
    acked_in_log::check(&acks, &stores, pg_num)?;
    Ok(())
}

/// The collection `store` keeps PG `pg` in: the PG's, or the shard of an
/// erasure-coded PG it holds.
pub fn pg_collection(store: &dyn ObjectStore, pg: PgId) -> Option<CollectionId> {
    let plain = collection(pg);
    if store.collection_exists(&plain).ok()? {
        return Some(plain);
    }
    // Erasure coded: the PG's own shard is the one whose log is newest
    // (others are strays kept from positions the OSD left).
    store
        .list_collections()
        .ok()?
        .into_iter()
        .filter(|c| c.pool == pg.pool && c.seed == pg.seed)
        .max_by_key(|c| shoal_osd::log::PgLog::load_info(store, *c))
}

/// A PG's log in `store`, if the store holds the PG.
pub fn load_log(store: &dyn ObjectStore, pg: PgId) -> Option<PgLog> {
    let coll = pg_collection(store, pg)?;
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

/// The client objects of `pg` in `store` and their data (of a shard: its
/// chunks).
fn objects(store: &dyn ObjectStore, pg: PgId) -> Result<BTreeMap<ObjectKey, Bytes>, String> {
    let Some(coll) = pg_collection(store, pg) else {
        return Ok(BTreeMap::new());
    };
    let meta = pg_meta_key();
    let mut out = BTreeMap::new();
    let mut start: Option<ObjectKey> = None;
    loop {
        let page = store
            .list_objects(&coll, start.as_ref(), 256)
            .map_err(|e| e.to_string())?;
        for k in page.objects {
            // The PG's meta object and the OSD's hidden ones (rollback
            // stashes, half-made copies) are not the PG's objects.
            if k == meta || k.name.first() == Some(&0) {
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

/// The client objects of `pg` in every collection `store` keeps of it (an
/// erasure-coded PG's shard, and strays of others), as `shard: name@snap`
/// (for diagnostics).
pub fn object_names(store: &dyn ObjectStore, pg: PgId) -> Vec<String> {
    let mut out = Vec::new();
    let colls = store.list_collections().unwrap_or_default();
    for coll in colls
        .into_iter()
        .filter(|c| c.pool == pg.pool && c.seed == pg.seed)
    {
        let Ok(page) = store.list_objects(&coll, None, 100_000) else {
            continue;
        };
        for k in page
            .objects
            .iter()
            .filter(|k| k.name.first() != Some(&0) && !k.name.is_empty())
        {
            let snap = match k.snap {
                ObjectKey::HEAD => "head".to_string(),
                shoal_osd::object::SNAPDIR => "snapdir".to_string(),
                s => s.to_string(),
            };
            out.push(format!(
                "s{}: {}@{snap}",
                coll.shard,
                String::from_utf8_lossy(&k.name)
            ));
        }
    }
    out
}

/// Once clean: each PG's acting members hold identical objects (of an
/// erasure-coded pool: consistent shards).
pub async fn replicas_identical(w: &World) -> Result<(), String> {
    let map = w.newest_map().ok_or("no map")?;
    let pool = map.pool(w.pool).ok_or("no pool")?;
    if pool.is_erasure() {
        return shards_consistent(w, &map, pool);
    }
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
                        .map(|k| {
                            let name = match k.snap {
                                ObjectKey::HEAD => String::from_utf8_lossy(&k.name).into_owned(),
                                snap => format!("{}@{snap:x}", String::from_utf8_lossy(&k.name)),
                            };
                            let data = |m: &BTreeMap<ObjectKey, Bytes>| {
                                m.get(k).map(|b| {
                                    String::from_utf8_lossy(&b[..b.len().min(32)]).into_owned()
                                })
                            };
                            format!("{name} ({:?} / {:?})", data(theirs), data(&mine))
                        })
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

/// Once clean, of an erasure-coded pool: the members of each PG hold the
/// same objects, each with one logical size and one set of xattrs, and
/// every object's coding chunks match its data chunks.
fn shards_consistent(
    w: &World,
    map: &shoal_maps::OsdMap,
    pool: &shoal_maps::Pool,
) -> Result<(), String> {
    let shoal_maps::PoolKind::Erasure { k, m } = pool.kind else {
        return Ok(());
    };
    let layout = shoal_ec::StripeLayout::new(k, m, pool.stripe_unit());
    let codec = shoal_ec::Codec::new(layout).map_err(|e| e.to_string())?;
    for seed in 0..pool.pg_num {
        let pg = PgId { pool: w.pool, seed };
        let acting = map.pg_to_up_acting(pg).map_err(|e| e.to_string())?.acting;
        // Shard position → (object → (size, xattrs, chunks)).
        type Shard = BTreeMap<ObjectKey, (u64, BTreeMap<String, Bytes>, Bytes)>;
        let mut shards: Vec<Shard> = Vec::new();
        for (i, osd) in acting.iter().enumerate() {
            let slot = w
                .osds
                .get(osd)
                .ok_or(format!("pg {pg}: osd.{osd} unknown"))?;
            let store = slot.store.as_ref();
            let coll =
                pg_collection(store, pg).ok_or(format!("pg {pg}: osd.{osd} holds no shard"))?;
            if usize::from(coll.shard) != i {
                return Err(format!(
                    "pg {pg}: osd.{osd} holds shard {} at position {i}",
                    coll.shard
                ));
            }
            let mut mine = Shard::new();
            for (key, data) in objects(store, pg)? {
                let size = shoal_osd::ec::logical_size(store, &coll, &key)
                    .map_err(|e| e.to_string())?
                    .unwrap_or(0);
                let attrs = store.getxattrs(&coll, &key).map_err(|e| e.to_string())?;
                mine.insert(key, (size, attrs, data));
            }
            shards.push(mine);
        }
        let Some(first) = shards.first() else {
            continue;
        };
        for (key, (size, attrs, _)) in first {
            let name = String::from_utf8_lossy(&key.name).into_owned();
            let mut all = Vec::new();
            for (i, s) in shards.iter().enumerate() {
                let (sz, at, data) = s
                    .get(key)
                    .ok_or(format!("pg {pg}: {name} missing on shard {i}"))?;
                if sz != size || at != attrs {
                    let meta = |a: &std::collections::BTreeMap<String, bytes::Bytes>| {
                        a.get(shoal_osd::object::META_XATTR)
                            .and_then(|m| shoal_osd::object::ObjectMeta::decode(m))
                            .map(|m| m.version)
                    };
                    return Err(format!(
                        "pg {pg}: {name} differs on shard {i} (size {sz} vs {size}, \
                         version {:?} vs {:?})",
                        meta(at),
                        meta(attrs)
                    ));
                }
                all.push(data.to_vec());
            }
            if !codec
                .verify(&all)
                .map_err(|e| format!("pg {pg}: {name}: {e}"))?
            {
                return Err(format!(
                    "pg {pg}: {name}: coding chunks do not match the data"
                ));
            }
        }
        for (i, s) in shards.iter().enumerate() {
            if s.len() != first.len() {
                return Err(format!(
                    "pg {pg}: shard {i} holds {} objects, shard 0 {}",
                    s.len(),
                    first.len()
                ));
            }
        }
    }
    Ok(())
}

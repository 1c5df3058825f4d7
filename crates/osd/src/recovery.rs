//! Whole-object copies for recovery and repair: reading an object (data,
//! xattrs, omap) into a [`PgPush`], the store transaction that installs a
//! pushed copy, and pulling from or pushing to a peer.

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::{Bytes, BytesMut};
use shoal_maps::{OsdMap, PgId};
use shoal_net::Connection;
use shoal_objectstore::{CollectionId, ObjectKey, ObjectStore, Transaction};
use shoal_proto::{Message, PgList, PgPull, PgPush};

use crate::ctx::{OsdCounters, OsdCtx};
use crate::missing::MissingSet;

/// Omap entries read per store call while copying an object.
const OMAP_PAGE: usize = 4096;
/// Bytes read per store call while copying an object.
const READ_CHUNK: u64 = 4 << 20;

/// Reads the whole of `key` (or its absence) into a push message and data.
pub fn read_object(
    store: &dyn ObjectStore,
    coll: CollectionId,
    key: &ObjectKey,
) -> shoal_objectstore::Result<(PgPush, Bytes)> {
    let mut push = PgPush {
        hash: key.hash,
        name: key.name.clone(),
        ..PgPush::default()
    };
    if !store.exists(&coll, key)? {
        return Ok((push, Bytes::new()));
    }
    push.exists = true;
    let size = store.stat(&coll, key)?.size;
    let mut data = BytesMut::with_capacity(usize::try_from(size).unwrap_or(0));
    let mut off = 0;
    while off < size {
        let chunk = store.read(&coll, key, off, READ_CHUNK.min(size - off))?;
        if chunk.is_empty() {
            break;
        }
        off += chunk.len() as u64;
        data.extend_from_slice(&chunk);
    }
    for (n, v) in store.getxattrs(&coll, key)? {
        push.attrs.push(n);
        push.attr_values.push(v.to_vec());
    }
    push.omap_header = store.omap_get_header(&coll, key)?.to_vec();
    let mut after: Option<Bytes> = None;
    loop {
        let start = match &after {
            Some(k) => Bound::Excluded(k.as_ref()),
            None => Bound::Unbounded,
        };
        let page = store.omap_range(&coll, key, start, Bound::Unbounded, OMAP_PAGE)?;
        let full = page.len() == OMAP_PAGE;
        for (k, v) in page {
            push.omap_keys.push(k.to_vec());
            push.omap_values.push(v.to_vec());
            after = Some(k);
        }
        if !full {
            break;
        }
    }
    Ok((push, data.freeze()))
}

/// The transaction that makes `coll`'s copy of the pushed object identical
/// to the pushed one (removing it when the push says it does not exist),
/// and takes the object out of the member's persisted missing set.
pub fn install_txn(
    store: &dyn ObjectStore,
    coll: CollectionId,
    push: &PgPush,
    data: Bytes,
) -> Result<Transaction, String> {
    let key = ObjectKey::new(push.hash, push.name.clone());
    let mut t = Transaction::new();
    MissingSet::remove_txn(&key, coll, &mut t);
    if store.exists(&coll, &key).map_err(|e| e.to_string())? {
        t.remove(coll, key.clone());
    }
    if !push.exists {
        return Ok(t);
    }
    if push.attrs.len() != push.attr_values.len() || push.omap_keys.len() != push.omap_values.len()
    {
        return Err("push: names and values differ in number".into());
    }
    t.touch(coll, key.clone());
    if !data.is_empty() {
        t.write(coll, key.clone(), 0, data);
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
        t.omap_set_keys(coll, key, kv);
    }
    Ok(t)
}

/// Pulls `key` of PG `pg` from the member at `src` and installs its copy
/// in our store (`epoch`: our map epoch, for the peer's checks).
/// Whether a copy's existence agrees with what the log says of the object
/// (`Some(true)`: its newest change wrote it; `Some(false)`: deleted it).
/// A source that lacks an object the log says exists must not make a
/// member delete its copy.
fn agrees(exists: bool, expect: Option<bool>, key: &ObjectKey, who: &str) -> Result<(), String> {
    match expect {
        Some(e) if e != exists => Err(format!(
            "{who}'s copy of {} {} but the log says it {}",
            String::from_utf8_lossy(&key.name),
            if exists { "exists" } else { "is absent" },
            if e { "exists" } else { "was deleted" }
        )),
        _ => Ok(()),
    }
}

/// Pulls `key` of PG `pg` from the member at `src` into our store; `expect`
/// is whether the log says it exists (checked, when known).
pub async fn pull_object(
    ctx: &OsdCtx,
    pg: PgId,
    epoch: u32,
    src: &Connection,
    key: &ObjectKey,
    expect: Option<bool>,
) -> Result<(), String> {
    let pull = PgPull {
        pool: pg.pool,
        pg_seed: pg.seed,
        epoch,
        hash: key.hash,
        name: key.name.clone(),
    };
    let reply = src
        .request_with_timeout(pull, Bytes::new(), ctx.cfg.peer_timeout)
        .await
        .map_err(|e| e.to_string())?;
    let Message::PgPush(push) = reply.msg else {
        return Err(format!("{} could not send an object", src.peer()));
    };
    agrees(push.exists, expect, key, &src.peer().to_string())?;
    let coll = crate::object::collection(pg);
    shoal_net::runtime::blocking(|| {
        let t = install_txn(ctx.store.as_ref(), coll, &push, reply.data)?;
        ctx.store.apply_transaction(t).map_err(|e| e.to_string())
    })?;
    OsdCounters::add(&ctx.counters.recovered, 1);
    Ok(())
}

/// Pushes our copy of `key` of PG `pg` to the member at `dst`; `expect` as
/// for [`pull_object`].
pub async fn push_object(
    ctx: &OsdCtx,
    pg: PgId,
    epoch: u32,
    dst: &Connection,
    key: &ObjectKey,
    expect: Option<bool>,
) -> Result<(), String> {
    let coll = crate::object::collection(pg);
    let (mut push, data) =
        shoal_net::runtime::blocking(|| read_object(ctx.store.as_ref(), coll, key))
            .map_err(|e| e.to_string())?;
    agrees(push.exists, expect, key, &format!("osd.{}", ctx.whoami))?;
    push.pool = pg.pool;
    push.pg_seed = pg.seed;
    push.epoch = epoch;
    let reply = dst
        .request_with_timeout(push, data, ctx.cfg.peer_timeout)
        .await
        .map_err(|e| e.to_string())?;
    if let Message::RepOpReply(r) = reply.msg
        && r.code != 0
    {
        return Err(format!("{}: {}", dst.peer(), r.message));
    }
    OsdCounters::add(&ctx.counters.recovered, 1);
    Ok(())
}

/// Objects listed per page while scanning a PG.
const LIST_PAGE: usize = 1024;

/// Every object of our copy of a PG (not the PG's own meta object), in hash
/// order.
pub fn local_objects(
    store: &dyn ObjectStore,
    coll: CollectionId,
) -> shoal_objectstore::Result<Vec<ObjectKey>> {
    let mut out = Vec::new();
    let mut cursor: Option<ObjectKey> = None;
    loop {
        let page = store.list_objects(&coll, cursor.as_ref(), LIST_PAGE)?;
        out.extend(
            page.objects
                .into_iter()
                .filter(|k| k.name.first() != Some(&0)),
        );
        match page.next {
            Some(n) => cursor = Some(n),
            None => return Ok(out),
        }
    }
}

/// Every object of the copy of PG `pg` held by the member at `src`, in
/// hash order (`map`: ours, for its epoch and the pool's hash).
pub async fn remote_objects(
    ctx: &OsdCtx,
    map: &OsdMap,
    pg: PgId,
    src: &Connection,
) -> Result<Vec<ObjectKey>, String> {
    let pool = map.pool(pg.pool).ok_or("the pool is gone")?;
    let mut out = Vec::new();
    let mut cursor: Option<(u32, Vec<u8>)> = None;
    loop {
        let list = PgList {
            pool: pg.pool,
            pg_seed: pg.seed,
            epoch: map.epoch.0,
            has_cursor: cursor.is_some(),
            cursor_hash: cursor.as_ref().map_or(0, |c| c.0),
            cursor_name: cursor.as_ref().map(|c| c.1.clone()).unwrap_or_default(),
            max: LIST_PAGE as u32,
        };
        let reply = src
            .request_with_timeout(list, Bytes::new(), ctx.cfg.peer_timeout)
            .await
            .map_err(|e| e.to_string())?;
        let Message::PgListReply(page) = reply.msg else {
            return Err(format!(
                "{} answered a listing with another message",
                src.peer()
            ));
        };
        if page.code != 0 {
            return Err(format!("listing {}: {}", src.peer(), page.message));
        }
        for (ns, name) in page.nspaces.iter().zip(&page.names) {
            out.push(crate::object::object_key(pool, ns, name).map_err(|e| e.to_string())?);
        }
        if !page.more {
            return Ok(out);
        }
        cursor = Some((page.next_hash, page.next_name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_objectstore::MemStore;

    #[test]
    fn a_pushed_copy_is_identical_and_absence_removes() {
        let a = MemStore::new(1 << 30);
        let b = MemStore::new(1 << 30);
        let c = CollectionId::new(1, 2);
        let k = ObjectKey::new(7, "obj");
        for s in [&a, &b] {
            let mut t = Transaction::new();
            t.create_collection(c);
            s.apply_transaction(t).unwrap();
        }
        let mut t = Transaction::new();
        t.write(c, k.clone(), 3, Bytes::from(vec![9u8; 10_000]))
            .set_xattrs(
                c,
                k.clone(),
                BTreeMap::from([("u.a".to_string(), Bytes::from_static(b"1"))]),
            )
            .omap_set_header(c, k.clone(), Bytes::from_static(b"hdr"))
            .omap_set_keys(
                c,
                k.clone(),
                (0..5000u32)
                    .map(|i| {
                        (
                            Bytes::from(i.to_be_bytes().to_vec()),
                            Bytes::from_static(b"v"),
                        )
                    })
                    .collect(),
            );
        a.apply_transaction(t).unwrap();
        // b holds a stale copy with an extra xattr that must go.
        let mut t = Transaction::new();
        t.write(c, k.clone(), 0, Bytes::from_static(b"old"))
            .set_xattrs(
                c,
                k.clone(),
                BTreeMap::from([("u.stale".to_string(), Bytes::from_static(b"x"))]),
            );
        b.apply_transaction(t).unwrap();
        let (push, data) = read_object(&a, c, &k).unwrap();
        b.apply_transaction(install_txn(&b, c, &push, data).unwrap())
            .unwrap();
        let (again, data2) = read_object(&b, c, &k).unwrap();
        assert_eq!(again, push);
        assert_eq!(data2.len(), 10_003);
        // Absent at the source: removed at the destination.
        let mut t = Transaction::new();
        t.remove(c, k.clone());
        a.apply_transaction(t).unwrap();
        let (push, data) = read_object(&a, c, &k).unwrap();
        assert!(!push.exists);
        b.apply_transaction(install_txn(&b, c, &push, data).unwrap())
            .unwrap();
        assert!(!b.exists(&c, &k).unwrap());
    }
}

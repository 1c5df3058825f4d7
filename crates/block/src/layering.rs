//! Clones (Ceph's layering): a new image made from a protected snapshot
//! of another, sharing its data copy-on-write. The clone's header names
//! its parent (pool, image id, snapshot id) and the overlap: reads of the
//! clone's objects that do not exist fall through to the parent within it;
//! the first change of such an object copies the parent's data up into the
//! clone first (the read path and copy-up live in `image.rs`).
//! Flattening copies up every object and drops the parent.
//!
//! Each pool keeps a list of the clones of its images' snapshots
//! ([`CHILDREN`]'s omap, keyed by parent image, snapshot, child pool and
//! child id), so a snapshot with clones cannot be unprotected (and so not
//! removed) and `rbd children` can answer. A clone is listed before its
//! header exists and unlisted after it stops referring to the parent, so
//! the list is never short; an entry left by a crash names no image that
//! still refers to the parent, and is passed over.

use shoal_client::{Error as ClusterError, Pool};

use crate::error::{Error, Result};
use crate::format::{CHILDREN, ParentSpec, child_key, children_prefix, features};
use crate::rbd::{CreateOptions, create_with, load_header, lookup_id, name_of_id};

/// One clone of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ChildEntry {
    /// The clone's pool.
    pub pool: String,
    /// Its name.
    pub name: String,
    /// Its id.
    pub id: String,
}

/// Records clone `child_id` of pool `child_pool` in `parent_pool`'s list.
pub(crate) async fn register_child(
    parent_pool: &Pool,
    spec: &ParentSpec,
    child_pool: u64,
    child_id: &str,
) -> Result<()> {
    let key = child_key(spec, child_pool, child_id);
    parent_pool
        .omap_set(CHILDREN, &[(key, Vec::new())])
        .await
        .map_err(Error::from)
}

/// Drops clone `child_id` of pool `child_pool` from `parent_pool`'s list.
pub(crate) async fn unregister_child(
    parent_pool: &Pool,
    spec: &ParentSpec,
    child_pool: u64,
    child_id: &str,
) -> Result<()> {
    let key = child_key(spec, child_pool, child_id);
    match parent_pool.omap_rm_keys(CHILDREN, &[key]).await {
        Ok(()) | Err(ClusterError::NotFound(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Clones snapshot `snap` of image `parent` (of `parent_pool`; the
/// snapshot must be protected) into a new image `name` of `pool`, of the
/// snapshot's size. `o.order` of 0 takes the parent's object size.
pub async fn clone(
    parent_pool: &Pool,
    parent: &str,
    snap: &str,
    pool: &Pool,
    name: &str,
    o: &CreateOptions,
) -> Result<()> {
    let pid = lookup_id(parent_pool, parent).await?;
    let ph = load_header(parent_pool, parent, &pid).await?;
    if ph.features & features::LAYERING == 0 {
        return Err(Error::InvalidArgument(format!(
            "image {parent} lacks the layering feature: it cannot be cloned"
        )));
    }
    let info = ph.snapshot(snap).cloned().ok_or_else(|| Error::NoSnap {
        image: parent.to_string(),
        snap: snap.to_string(),
    })?;
    let unprotected = || {
        Error::InvalidArgument(format!(
            "snapshot {parent}@{snap} is not protected: protect it first (rbd snap protect)"
        ))
    };
    if !info.protected {
        return Err(unprotected());
    }
    let spec = ParentSpec {
        pool: parent_pool.id(),
        image_id: pid.clone(),
        snap_id: info.id,
        overlap: info.size,
    };
    let mut o = o.clone();
    if o.order == 0 {
        o.order = ph.order;
    }
    o.features |= features::LAYERING;
    create_with(pool, name, info.size, &o, Some((parent_pool, spec.clone()))).await?;
    // Unprotected meanwhile (it saw no child yet): the clone cannot stay.
    let still = load_header(parent_pool, parent, &pid)
        .await
        .map(|h| h.snapshots.iter().any(|s| s.id == info.id && s.protected));
    if !matches!(still, Ok(true)) {
        let _ = crate::rbd::remove(pool, name).await;
        return Err(still.err().unwrap_or_else(unprotected));
    }
    Ok(())
}

/// The clones of snapshot `snap` of image `image` (of `pool`), in any pool.
pub async fn children(pool: &Pool, image: &str, snap: &str) -> Result<Vec<ChildEntry>> {
    let id = lookup_id(pool, image).await?;
    let h = load_header(pool, image, &id).await?;
    let info = h.snapshot(snap).ok_or_else(|| Error::NoSnap {
        image: image.to_string(),
        snap: snap.to_string(),
    })?;
    children_of(pool, &id, info.id).await
}

/// The clones of snapshot `snap_id` of image `id` (of `pool`) that still
/// refer to it.
pub(crate) async fn children_of(pool: &Pool, id: &str, snap_id: u64) -> Result<Vec<ChildEntry>> {
    let prefix = children_prefix(id, snap_id);
    let mut keys = Vec::new();
    let mut after = Vec::new();
    loop {
        let page = match pool
            .omap_get_keys(CHILDREN, &after, prefix.as_bytes(), 1000)
            .await
        {
            Ok(p) => p,
            Err(ClusterError::NotFound(_)) => break,
            Err(e) => return Err(e.into()),
        };
        keys.extend(page.entries.iter().map(|(k, _)| k.clone()));
        match page.entries.last() {
            Some((k, _)) if page.more => after = k.to_vec(),
            _ => break,
        }
    }
    let mut out = Vec::new();
    for k in keys {
        let rest = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
        let Some((child_pool, child_id)) = rest.split_once('_') else {
            continue;
        };
        let Ok(Ok(cpool)) = child_pool
            .parse::<u64>()
            .map(|p| pool.client().pool_by_id(p))
        else {
            continue;
        };
        let cpool = cpool.with_namespace(pool.namespace());
        let Ok(name) = name_of_id(&cpool, child_id).await else {
            continue;
        };
        // Listed by a clone that a crash kept from being made or unlisted.
        let refers = match load_header(&cpool, &name, child_id).await {
            Ok(ch) => {
                let is = |p: &Option<ParentSpec>| {
                    p.as_ref().is_some_and(|p| {
                        p.pool == pool.id() && p.image_id == id && p.snap_id == snap_id
                    })
                };
                is(&ch.parent) || ch.snapshots.iter().any(|s| is(&s.parent))
            }
            Err(Error::NoImage { .. }) => false,
            Err(e) => return Err(e),
        };
        if refers {
            out.push(ChildEntry {
                pool: cpool.name().to_string(),
                name,
                id: child_id.to_string(),
            });
        }
    }
    out.sort_by(|a, b| (&a.pool, &a.name).cmp(&(&b.pool, &b.name)));
    Ok(out)
}

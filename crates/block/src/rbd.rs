//! A pool's images as a whole: create, list, remove and rename (the
//! directory, id and header objects), as `rbd create|ls|rm|mv` use them.

use std::collections::BTreeMap;

use bytes::Bytes;
use shoal_client::{Error as ClusterError, Op, OpError, Pool};
use tokio::task::JoinSet;

use crate::error::{Error, Result};
use crate::format::{
    DIRECTORY, Header, OBJECT_NONEXISTENT, ORDER_DEFAULT, ORDER_MAX, ORDER_MIN, SIZE_MAX,
    check_name, data_object, features, header_object, id_object, object_map_object,
};
use crate::image::{PARALLEL, join_all, join_one};
use crate::lock;

/// How a new image is made.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    /// Objects of `1 << order` bytes.
    pub order: u8,
    /// [`features`] bits.
    pub features: u64,
    /// Put the data objects in this pool (it may be erasure-coded with
    /// overwrites allowed); the header stays in the image's pool.
    pub data_pool: Option<String>,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            order: ORDER_DEFAULT,
            features: features::DEFAULT,
            data_pool: None,
        }
    }
}

/// One image of a pool's directory.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ImageEntry {
    /// The name.
    pub name: String,
    /// The id.
    pub id: String,
}

fn no_image(pool: &Pool, name: &str) -> Error {
    Error::NoImage {
        pool: pool.name().to_string(),
        image: name.to_string(),
    }
}

fn random_id() -> String {
    let mut b = [0u8; 6];
    if getrandom::fill(&mut b).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        b.copy_from_slice(&t.to_le_bytes()[..6]);
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Checks that `pool` can hold image headers (replicated: they use omap).
fn check_header_pool(pool: &Pool) -> Result<()> {
    let map = pool.client().map()?;
    match map.pool(pool.id()) {
        Some(p) if p.is_erasure() => Err(Error::InvalidArgument(format!(
            "pool {} is erasure-coded: image headers need a replicated pool \
             (put the data in the erasure-coded pool with --data-pool)",
            pool.name()
        ))),
        Some(_) => Ok(()),
        None => Err(Error::Cluster(ClusterError::NoPool(
            pool.name().to_string(),
        ))),
    }
}

/// Creates image `name` of `size` bytes in `pool`.
pub async fn create(pool: &Pool, name: &str, size: u64, o: &CreateOptions) -> Result<()> {
    create_with(pool, name, size, o, None).await
}

/// [`create`], of a clone of `parent` (registered with the parent's pool
/// before the clone's header exists, so a parent never loses track of a
/// child).
pub(crate) async fn create_with(
    pool: &Pool,
    name: &str,
    size: u64,
    o: &CreateOptions,
    parent: Option<(&Pool, crate::format::ParentSpec)>,
) -> Result<()> {
    check_name(name)?;
    check_header_pool(pool)?;
    if size > SIZE_MAX {
        return Err(Error::InvalidArgument(format!(
            "size {size} is beyond {SIZE_MAX}"
        )));
    }
    if !(ORDER_MIN..=ORDER_MAX).contains(&o.order) {
        return Err(Error::InvalidArgument(format!(
            "object order {} is not within {ORDER_MIN}..={ORDER_MAX} (objects of 4 KiB to 32 MiB)",
            o.order
        )));
    }
    if o.features & !features::KNOWN != 0 {
        return Err(Error::InvalidArgument(format!(
            "unknown feature bits {:#x}",
            o.features & !features::KNOWN
        )));
    }
    if o.features & features::OBJECT_MAP != 0 && o.features & features::EXCLUSIVE_LOCK == 0 {
        return Err(Error::InvalidArgument(
            "the object-map feature needs exclusive-lock".into(),
        ));
    }
    let mut feats = o.features & !features::DATA_POOL;
    let mut data_pool = None;
    if let Some(dp) = &o.data_pool {
        let map = pool.client().map()?;
        let p = map
            .pool_by_name(dp)
            .ok_or_else(|| Error::Cluster(ClusterError::NoPool(dp.clone())))?;
        if p.is_erasure() && p.flags & shoal_maps::FLAG_EC_OVERWRITES == 0 {
            return Err(Error::InvalidArgument(format!(
                "data pool {dp} is erasure-coded without overwrites: \
                 set allow_ec_overwrites true on it first"
            )));
        }
        if p.id != pool.id() {
            data_pool = Some(p.id);
            feats |= features::DATA_POOL;
        }
    }
    let id = random_id();
    let exists = || Error::ImageExists {
        pool: pool.name().to_string(),
        image: name.to_string(),
    };
    match pool
        .operate(
            &id_object(name),
            Op::new().create(true).write_full(id.clone().into_bytes()),
        )
        .await
    {
        Ok(_) => {}
        Err(OpError {
            error: ClusterError::Exists(_),
            ..
        }) => return Err(exists()),
        Err(e) => return Err(e.into()),
    }
    let header = Header {
        size,
        order: o.order,
        features: feats,
        data_pool,
        created_ms: now_ms(),
        snapshots: Vec::new(),
        parent: parent.as_ref().map(|(_, p)| p.clone()),
    };
    let made = async {
        if let Some((ppool, spec)) = &parent {
            crate::layering::register_child(ppool, spec, pool.id(), &id).await?;
        }
        // The name is ours (its id object): header, object map and
        // directory entries go at once (a crash between them leaves what
        // `remove` finishes removing).
        let entries = header.to_omap();
        let header_op = Op::new().create(true).omap_set(&entries);
        let dir = [
            (format!("name_{name}"), id.clone()),
            (format!("id_{id}"), name.to_string()),
        ];
        let map = async {
            if feats & features::OBJECT_MAP != 0 {
                let op = Op::new().create(true).truncate(header.object_count());
                pool.operate(&object_map_object(&id), op).await?;
            }
            Ok::<(), OpError>(())
        };
        let header_oid = header_object(&id);
        let (h, m, d) = tokio::join!(
            pool.operate(&header_oid, header_op),
            map,
            pool.omap_set(DIRECTORY, &dir)
        );
        h?;
        m?;
        d?;
        Ok::<(), Error>(())
    }
    .await;
    if let Err(e) = made {
        // Undo what was made, best effort: the name is free again.
        if let Some((ppool, spec)) = &parent {
            let _ = crate::layering::unregister_child(ppool, spec, pool.id(), &id).await;
        }
        let _ = pool.remove(&object_map_object(&id)).await;
        let _ = pool.remove(&header_object(&id)).await;
        let _ = pool.remove(&id_object(name)).await;
        return Err(e);
    }
    Ok(())
}

/// The images of `pool`, by name.
pub async fn list(pool: &Pool) -> Result<Vec<ImageEntry>> {
    let mut out = Vec::new();
    let mut after = Vec::new();
    loop {
        let page = match pool.omap_get_vals(DIRECTORY, &after, b"name_", 1000).await {
            Ok(p) => p,
            Err(ClusterError::NotFound(_)) => return Ok(out),
            Err(e) => return Err(e.into()),
        };
        for (k, v) in &page.entries {
            out.push(ImageEntry {
                name: String::from_utf8_lossy(&k[5..]).into_owned(),
                id: String::from_utf8_lossy(v).into_owned(),
            });
        }
        match page.entries.last() {
            Some((k, _)) if page.more => after = k.to_vec(),
            _ => return Ok(out),
        }
    }
}

/// The id of image `name`.
pub(crate) async fn lookup_id(pool: &Pool, name: &str) -> Result<String> {
    check_name(name)?;
    match pool.read(&id_object(name), 0, 0).await {
        Ok(b) if !b.is_empty() => String::from_utf8(b.to_vec()).map_err(|_| Error::Corrupt {
            image: name.to_string(),
            why: "its id object does not hold text".into(),
        }),
        Ok(_) => Err(Error::Corrupt {
            image: name.to_string(),
            why: "its id object is empty".into(),
        }),
        Err(ClusterError::NotFound(_)) => Err(no_image(pool, name)),
        Err(e) => Err(e.into()),
    }
}

/// The name of image `id` of `pool`, from the pool's directory.
pub(crate) async fn name_of_id(pool: &Pool, id: &str) -> Result<String> {
    let key = format!("id_{id}");
    let gone = || Error::NoImage {
        pool: pool.name().to_string(),
        image: format!("(id {id})"),
    };
    let found = match pool
        .omap_get_vals_by_keys(DIRECTORY, &[key.as_bytes()])
        .await
    {
        Ok(v) => v,
        Err(ClusterError::NotFound(_)) => return Err(gone()),
        Err(e) => return Err(e.into()),
    };
    let v = found.get(key.as_bytes()).ok_or_else(gone)?;
    String::from_utf8(v.to_vec()).map_err(|_| Error::Corrupt {
        image: format!("(id {id})"),
        why: "its directory entry does not hold text".into(),
    })
}

/// Image `name`'s header (id `id`).
pub(crate) async fn load_header(pool: &Pool, name: &str, id: &str) -> Result<Header> {
    let mut omap: BTreeMap<Bytes, Bytes> = BTreeMap::new();
    let mut after = Vec::new();
    loop {
        let page = match pool
            .omap_get_vals(&header_object(id), &after, b"", 1000)
            .await
        {
            Ok(p) => p,
            Err(ClusterError::NotFound(_)) => return Err(no_image(pool, name)),
            Err(e) => return Err(e.into()),
        };
        let more = page.more;
        let last = page.entries.last().map(|(k, _)| k.to_vec());
        omap.extend(page.entries);
        match last {
            Some(k) if more => after = k,
            _ => break,
        }
    }
    Header::from_omap(name, &omap)
}

/// Removes image `name` and its data. Refused while another client holds
/// its lock.
pub async fn remove(pool: &Pool, name: &str) -> Result<()> {
    let id = lookup_id(pool, name).await?;
    let header_oid = header_object(&id);
    let (header, watchers, owner) = tokio::join!(
        load_header(pool, name, &id),
        pool.list_watchers(&header_oid),
        lock::owner(pool, &id)
    );
    let header = match header {
        Ok(h) => Some(h),
        // Half-made or half-removed: finish removing what is left.
        Err(Error::NoImage { .. } | Error::Corrupt { .. }) => None,
        Err(e) => return Err(e),
    };
    // Open for writing somewhere: its watch on the header stands.
    match watchers {
        Ok(w) if !w.is_empty() => {
            let who: Vec<String> = w
                .iter()
                .map(|w| format!("{} at {}", w.entity, w.addr))
                .collect();
            return Err(Error::Busy {
                image: name.to_string(),
                why: format!("it is open for writing by {}", who.join(", ")),
            });
        }
        Ok(_) | Err(ClusterError::NotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    // A lock left by an owner that died.
    let owner = match owner {
        Ok(o) => o,
        Err(Error::Cluster(ClusterError::NotFound(_))) => None,
        Err(e) => return Err(e),
    };
    if let Some(owner) = owner
        && !lock::owner_alive(pool, &id, &owner).await?
    {
        lock::break_lock(pool, &id, &owner).await?;
    }
    if let Some(h) = header.as_ref().filter(|h| !h.snapshots.is_empty()) {
        return Err(Error::Busy {
            image: name.to_string(),
            why: format!(
                "it has {} snapshots: remove them first (rbd snap rm)",
                h.snapshots.len()
            ),
        });
    }
    if let Some(h) = &header {
        let data = match h.data_pool {
            Some(p) => pool.client().pool_by_id(p).ok(),
            None => Some(pool.clone()),
        };
        if let Some(data) = data {
            let data = data.with_namespace(pool.namespace());
            let map = match pool.read(&object_map_object(&id), 0, 0).await {
                Ok(b) if h.features & features::OBJECT_MAP != 0 => Some(b),
                _ => None,
            };
            let mut set = JoinSet::new();
            for objno in 0..h.object_count() {
                let known_absent = map
                    .as_ref()
                    .is_some_and(|m| m.get(objno as usize) == Some(&OBJECT_NONEXISTENT));
                if known_absent {
                    continue;
                }
                let data = data.clone();
                let oid = data_object(&id, objno);
                set.spawn(async move {
                    match data.remove(&oid).await {
                        Ok(()) | Err(ClusterError::NotFound(_)) => Ok(()),
                        Err(e) => Err(Error::from(e)),
                    }
                });
                if set.len() >= PARALLEL {
                    join_one(&mut set).await?;
                }
            }
            join_all(set).await?;
        }
    }
    // A clone leaves its parent's list of children.
    if let Some(spec) = header.as_ref().and_then(|h| h.parent.as_ref())
        && let Ok(ppool) = pool.client().pool_by_id(spec.pool)
    {
        let ppool = ppool.with_namespace(pool.namespace());
        crate::layering::unregister_child(&ppool, spec, pool.id(), &id).await?;
    }
    // Object map, header and directory entries at once; the id object
    // (the name) goes last, so a crash leaves what a retry finishes.
    let keys = [format!("name_{name}"), format!("id_{id}")];
    let gone = |r: std::result::Result<(), ClusterError>| match r {
        Ok(()) | Err(ClusterError::NotFound(_)) => Ok(()),
        Err(e) => Err(Error::from(e)),
    };
    let map_oid = object_map_object(&id);
    let (m, h, d) = tokio::join!(
        pool.remove(&map_oid),
        pool.remove(&header_oid),
        pool.omap_rm_keys(DIRECTORY, &keys)
    );
    gone(m)?;
    gone(h)?;
    gone(d)?;
    match pool.remove(&id_object(name)).await {
        Ok(()) | Err(ClusterError::NotFound(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Renames image `from` to `to` within its pool.
pub async fn rename(pool: &Pool, from: &str, to: &str) -> Result<()> {
    check_name(to)?;
    let id = lookup_id(pool, from).await?;
    match pool
        .operate(
            &id_object(to),
            Op::new().create(true).write_full(id.clone().into_bytes()),
        )
        .await
    {
        Ok(_) => {}
        Err(OpError {
            error: ClusterError::Exists(_),
            ..
        }) => {
            return Err(Error::ImageExists {
                pool: pool.name().to_string(),
                image: to.to_string(),
            });
        }
        Err(e) => return Err(e.into()),
    }
    let op = Op::new()
        .omap_rm_keys(&[format!("name_{from}")])
        .omap_set(&[
            (format!("name_{to}"), id.clone()),
            (format!("id_{id}"), to.to_string()),
        ]);
    if let Err(e) = pool.operate(DIRECTORY, op).await {
        let _ = pool.remove(&id_object(to)).await;
        return Err(e.into());
    }
    match pool.remove(&id_object(from)).await {
        Ok(()) | Err(ClusterError::NotFound(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

//! Object copies for recovery and repair, over the network: pulling an
//! object from a peer or pushing ours to it, step by bounded step
//! (`copy.rs`), and listing a PG's objects here or on a peer.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use shoal_maps::{OsdMap, PgId};
use shoal_net::Connection;
use shoal_objectstore::{CollectionId, ObjectKey, ObjectStore, Transaction};
use shoal_proto::{CopyProgress, Message, PgList, PgPull, PgPush, PgPushBatch};

use crate::copy;
use crate::ctx::{OsdCounters, OsdCtx};
use crate::pg::backend::PgBackend;

/// Stops a copy that outlived the recovery that started it. The PG bumps
/// the shared generation whenever it drops its recovery (a new interval,
/// peering again); a pull installs its last step, and a push sends its
/// last step, only while the copy's generation is still current — a pull
/// under the lock, so a bump waits for an install under way and every
/// install after it is refused. A stale copy would otherwise overwrite
/// what a later recovery or a client wrote (the simulation found this).
#[derive(Debug, Clone)]
pub struct CopyFence {
    current: Arc<Mutex<u64>>,
    generation: u64,
}

impl CopyFence {
    /// A fence that never moves, for copies made within one PG event
    /// (scrub repair).
    pub fn fixed() -> CopyFence {
        CopyFence {
            current: Arc::default(),
            generation: 0,
        }
    }

    /// A fence at the current generation of `current`.
    pub fn at(current: &Arc<Mutex<u64>>) -> CopyFence {
        let generation = *current.lock().unwrap_or_else(PoisonError::into_inner);
        CopyFence {
            current: Arc::clone(current),
            generation,
        }
    }

    /// Moves `current` on: every fence taken before refuses from now on.
    pub fn bump(current: &Arc<Mutex<u64>>) {
        *current.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    }

    /// Holds the fence while the copy's generation is current.
    pub(crate) fn hold(&self) -> Result<MutexGuard<'_, u64>, String> {
        let g = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if *g == self.generation {
            Ok(g)
        } else {
            Err("the PG's recovery started over: this copy is stale".into())
        }
    }
}

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

/// Checks that a step answers where the copy is, and moves the copy on;
/// `Ok(true)` when the copy is complete.
fn advance(progress: &mut CopyProgress, push: &PgPush, who: &str) -> Result<bool, String> {
    if push.before.as_ref().is_some_and(|b| b != progress) {
        return Err(format!("{who} answered another step of the copy"));
    }
    let (_, after) = copy::bounds(push);
    if !push.exists || copy::is_complete(&after) {
        return Ok(true);
    }
    // A step that moves nothing would keep the copy going forever.
    if after == *progress {
        return Err(format!("{who} sent a step that copies nothing"));
    }
    *progress = after;
    Ok(false)
}

/// One PG's object copies in one interval: where they come from and go
/// to, and what reads and installs them (the PG's backend).
#[derive(Debug, Clone, Copy)]
pub struct Copier<'a> {
    /// The OSD.
    pub ctx: &'a OsdCtx,
    /// How the PG's data is read and installed.
    pub backend: &'a Arc<dyn PgBackend>,
    /// The PG.
    pub pg: PgId,
    /// Our map epoch, for the peer's checks.
    pub epoch: u32,
    /// Refuses the copy once the PG's recovery started over.
    pub fence: &'a CopyFence,
}

/// Pulls `key` from the member at `src` into our store, step by step;
/// `expect` is whether the log says it exists (checked, when known).
pub async fn pull_object(
    c: Copier<'_>,
    src: &Connection,
    key: &ObjectKey,
    expect: Option<bool>,
) -> Result<(), String> {
    let (ctx, backend, pg, epoch, fence) = (c.ctx, c.backend, c.pg, c.epoch, c.fence);
    let coll = crate::object::collection(pg);
    let limits = ctx.cfg.copy_limits;
    let who = src.peer().to_string();
    let mut progress = copy::start();
    loop {
        let pull = PgPull {
            pool: pg.pool,
            pg_seed: pg.seed,
            epoch,
            hash: key.hash,
            name: key.name.clone(),
            snap: crate::object::wire_snap(key),
            progress: Some(progress.clone()),
            data_bytes_max: limits.data_bytes_max,
            omap_bytes_max: limits.omap_bytes_max,
        };
        let reply = src
            .request_with_timeout(pull, Bytes::new(), ctx.cfg.peer_timeout)
            .await
            .map_err(|e| e.to_string())?;
        let Message::PgPush(push) = reply.msg else {
            return Err(format!("{who} could not send an object"));
        };
        if progress.first {
            agrees(push.exists, expect, key, &who)?;
        }
        let last = advance(&mut progress, &push, &who)?;
        // Off the shard's thread on a daemon: the install writes the
        // step's data and, on the last step, waits for its commit.
        let (store, backend, fence) = (Arc::clone(&ctx.store), Arc::clone(backend), fence.clone());
        let data = reply.data;
        shoal_net::runtime::offload_try("installing a step", move || {
            let t = backend.install_step(store.as_ref(), coll, &push, data)?;
            if last {
                // The last step makes the copy visible: only while the
                // copy is current, and durable before it counts as
                // recovered.
                let _held = fence.hold()?;
                store.apply_transaction(t).map_err(|e| e.to_string())
            } else {
                // Earlier steps are read back from the queue.
                store.queue_transaction(t).map_err(|e| e.to_string())?;
                Ok(())
            }
        })
        .await?;
        if last {
            break;
        }
    }
    OsdCounters::add(&ctx.counters.recovered, 1);
    Ok(())
}

/// How long the last step of a push may take: it renames the temporary
/// copy over the object, which a store that keys omap entries by object
/// name (the BlockStore) does by moving every entry, so its wait grows
/// with the entries copied (one `peer_timeout` more per 100 000, at most
/// 20 in all).
pub fn last_step_timeout(peer_timeout: Duration, omap_entries: usize) -> Duration {
    let extra = u32::try_from(omap_entries / 100_000)
        .unwrap_or(u32::MAX)
        .min(19);
    peer_timeout.saturating_mul(1 + extra)
}

/// Pushes our copy of `key` to the member at `dst`, step by step, each
/// acknowledged (durable) before the next is read; `expect` as for
/// [`pull_object`].
pub async fn push_object(
    c: Copier<'_>,
    dst: &Connection,
    key: &ObjectKey,
    expect: Option<bool>,
) -> Result<(), String> {
    let (ctx, backend, pg, epoch, fence) = (c.ctx, c.backend, c.pg, c.epoch, c.fence);
    let coll = crate::object::collection(pg);
    let limits = ctx.cfg.copy_limits;
    let me = format!("osd.{}", ctx.whoami);
    let mut progress = copy::start();
    let mut omap_entries = 0usize;
    loop {
        // Off the shard's thread on a daemon: a step reads up to
        // `data_bytes_max` from the device. No client change moves the
        // object meanwhile: changes to an object being recovered wait.
        let (store, backend, k, before) = (
            Arc::clone(&ctx.store),
            Arc::clone(backend),
            key.clone(),
            progress.clone(),
        );
        let (mut push, data) = shoal_net::runtime::offload_try("reading a step", move || {
            backend
                .read_step(store.as_ref(), coll, &k, &before, limits)
                .map_err(|e| e.to_string())
        })
        .await?;
        if progress.first {
            agrees(push.exists, expect, key, &me)?;
        }
        push.pool = pg.pool;
        push.pg_seed = pg.seed;
        push.epoch = epoch;
        let last = advance(&mut progress, &push, &me)?;
        if last {
            drop(fence.hold()?);
        }
        omap_entries += push.omap_keys.len();
        let timeout = match last {
            true => last_step_timeout(ctx.cfg.peer_timeout, omap_entries),
            false => ctx.cfg.peer_timeout,
        };
        let reply = dst
            .request_with_timeout(push, data, timeout)
            .await
            .map_err(|e| e.to_string())?;
        match reply.msg {
            Message::RepOpReply(r) if r.code == 0 => {}
            Message::RepOpReply(r) => return Err(format!("{}: {}", dst.peer(), r.message)),
            other => {
                return Err(format!(
                    "{} answered a push with {:?}",
                    dst.peer(),
                    other.msg_type()
                ));
            }
        }
        if last {
            break;
        }
    }
    OsdCounters::add(&ctx.counters.recovered, 1);
    Ok(())
}

/// What became of one object of a recovery job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The object.
    pub key: ObjectKey,
    /// The members that now hold it.
    pub done: BTreeSet<i32>,
    /// Why the others do not.
    pub error: Option<String>,
}

/// Whole objects read and waiting to be pushed together.
#[derive(Default)]
struct Batch {
    /// Each object's place in the job, its copy and its data.
    entries: Vec<(usize, PgPush, Bytes)>,
    data_bytes: u64,
    control_bytes: u64,
}

/// Pushes `objects` (each with what the log says of it, as for
/// [`push_object`]) to every member of `dsts`. An object whose copy is one
/// step goes with others in one [`PgPushBatch`], up to the copy limits'
/// data and control bytes, which the member installs in one transaction
/// and acknowledges once; a bigger one is pushed step by step on its own.
/// For a replicated pool whose snapshots were never trimmed: a member's
/// clones are then ones we hold too. What became of each object is
/// `report`ed as soon as it is known (ops waiting for it go on).
pub async fn push_objects(
    c: Copier<'_>,
    dsts: &[(i32, Connection)],
    objects: &[(ObjectKey, Option<bool>)],
    report: &mut (dyn FnMut(Vec<Recovered>) + Send),
) {
    let coll = crate::object::collection(c.pg);
    let limits = c.ctx.cfg.copy_limits;
    let me = format!("osd.{}", c.ctx.whoami);
    let mut results: Vec<Recovered> = objects
        .iter()
        .map(|(key, _)| Recovered {
            key: key.clone(),
            done: BTreeSet::new(),
            error: None,
        })
        .collect();
    let mut batch = Batch::default();
    let mut reads = std::collections::VecDeque::new();
    for (i, (key, expect)) in objects.iter().enumerate() {
        if reads.is_empty() {
            // Off the shard's thread on a daemon, as a push's steps: the
            // next objects' first steps, a batch's worth, in one call.
            let (store, backend) = (Arc::clone(&c.ctx.store), Arc::clone(c.backend));
            let keys: Vec<ObjectKey> = objects[i..].iter().map(|(k, _)| k.clone()).collect();
            match shoal_net::runtime::offload_try("reading steps", move || {
                Ok(read_firsts(
                    store.as_ref(),
                    backend.as_ref(),
                    coll,
                    &keys,
                    limits,
                ))
            })
            .await
            {
                Ok(r) => reads.extend(r),
                Err(e) => reads.push_back(Err(e)),
            }
        }
        let step = reads
            .pop_front()
            .unwrap_or_else(|| Err("no step was read".into()))
            .and_then(|(push, data, family)| {
                agrees(push.exists, *expect, key, &me).map(|()| (push, data, family))
            });
        let (push, data, family) = match step {
            Ok(s) => s,
            Err(e) => {
                results[i].error = Some(e);
                report(vec![results[i].clone()]);
                continue;
            }
        };
        let (_, after) = copy::bounds(&push);
        if family || (push.exists && !copy::is_complete(&after)) {
            // Bigger than a step, or with clones: on its own.
            send_batch(c, dsts, &mut batch, &mut results, report).await;
            for (osd, conn) in dsts {
                let alone = async {
                    if family {
                        push_family(c, conn, key).await?;
                    }
                    push_object(c, conn, key, *expect).await
                };
                match alone.await {
                    Ok(()) => {
                        results[i].done.insert(*osd);
                    }
                    Err(e) => {
                        results[i]
                            .error
                            .get_or_insert(format!("push to osd.{osd}: {e}"));
                    }
                }
            }
            report(vec![results[i].clone()]);
            continue;
        }
        let control = copy::control_bytes(&push);
        let fits = batch.data_bytes + data.len() as u64 <= limits.data_bytes_max
            && batch.control_bytes + control <= limits.omap_bytes_max;
        if !fits {
            send_batch(c, dsts, &mut batch, &mut results, report).await;
        }
        batch.data_bytes += data.len() as u64;
        batch.control_bytes += control;
        batch.entries.push((i, push, data));
    }
    send_batch(c, dsts, &mut batch, &mut results, report).await;
}

/// The first steps of copies of `keys`, in order, each with whether the
/// object has clones (or a snapdir): as many as one batch may carry, and
/// none after one that goes on its own (bigger than a step, or with
/// clones); at least one.
fn read_firsts(
    store: &dyn ObjectStore,
    backend: &dyn PgBackend,
    coll: CollectionId,
    keys: &[ObjectKey],
    limits: copy::StepLimits,
) -> Vec<Result<(PgPush, Bytes, bool), String>> {
    let mut out = Vec::new();
    let (mut data_bytes, mut control_bytes) = (0u64, 0u64);
    for k in keys {
        let read = has_family(store, coll, k).and_then(|family| {
            let (push, data) = backend.read_step(store, coll, k, &copy::start(), limits)?;
            Ok((push, data, family))
        });
        let Ok((push, data, family)) = read else {
            out.push(read.map_err(|e| e.to_string()));
            continue;
        };
        let (_, after) = copy::bounds(&push);
        let alone = family || (push.exists && !copy::is_complete(&after));
        data_bytes += data.len() as u64;
        control_bytes += copy::control_bytes(&push);
        out.push(Ok((push, data, family)));
        if alone || data_bytes >= limits.data_bytes_max || control_bytes >= limits.omap_bytes_max {
            break;
        }
    }
    out
}

/// Whether our copy of the PG holds a clone or the snapdir of `head`.
fn has_family(
    store: &dyn ObjectStore,
    coll: CollectionId,
    head: &ObjectKey,
) -> shoal_objectstore::Result<bool> {
    let page = store.list_objects(&coll, Some(&head.clone_for(1)), 1)?;
    Ok(page
        .objects
        .first()
        .is_some_and(|k| k.hash == head.hash && k.name == head.name && k.snap != ObjectKey::HEAD))
}

/// Sends the objects gathered in `batch` to every member of `dsts` (one
/// object as a plain [`PgPush`]), empties it and reports its objects; each
/// object acknowledged by a member counts as done there.
async fn send_batch(
    c: Copier<'_>,
    dsts: &[(i32, Connection)],
    batch: &mut Batch,
    results: &mut [Recovered],
    report: &mut (dyn FnMut(Vec<Recovered>) + Send),
) {
    let Batch { entries, .. } = std::mem::take(batch);
    if entries.is_empty() {
        return;
    }
    let places: Vec<usize> = entries.iter().map(|(i, _, _)| *i).collect();
    // The copies become visible on the members: only while they are
    // current.
    match c.fence.hold().map(drop) {
        Ok(()) => send_entries(c, dsts, entries, results).await,
        Err(e) => {
            for i in &places {
                results[*i].error.get_or_insert_with(|| e.clone());
            }
        }
    }
    report(places.iter().map(|i| results[*i].clone()).collect());
}

/// Sends `entries` to every member of `dsts` and records who took them.
async fn send_entries(
    c: Copier<'_>,
    dsts: &[(i32, Connection)],
    entries: Vec<(usize, PgPush, Bytes)>,
    results: &mut [Recovered],
) {
    let omap_entries = entries.iter().map(|(_, p, _)| p.omap_keys.len()).sum();
    let timeout = last_step_timeout(c.ctx.cfg.peer_timeout, omap_entries);
    let places: Vec<usize> = entries.iter().map(|(i, _, _)| *i).collect();
    let (msg, data): (Message, Bytes) = if entries.len() == 1 {
        let (_, mut push, data) = entries.into_iter().next().unwrap_or_default();
        push.pool = c.pg.pool;
        push.pg_seed = c.pg.seed;
        push.epoch = c.epoch;
        (push.into(), data)
    } else {
        let total: usize = entries.iter().map(|(_, _, d)| d.len()).sum();
        let mut data = BytesMut::with_capacity(total);
        let mut msg = PgPushBatch {
            pool: c.pg.pool,
            pg_seed: c.pg.seed,
            epoch: c.epoch,
            ..PgPushBatch::default()
        };
        for (_, push, d) in entries {
            data.extend_from_slice(&d);
            msg.data_lengths.push(d.len() as u64);
            msg.objects.push(push);
        }
        (msg.into(), data.freeze())
    };
    for (osd, conn) in dsts {
        let reply = conn
            .request_with_timeout(msg.clone(), data.clone(), timeout)
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| match r.msg {
                Message::RepOpReply(r) if r.code == 0 => Ok(()),
                Message::RepOpReply(r) => Err(r.message),
                other => Err(format!("answered a push with {:?}", other.msg_type())),
            });
        match reply {
            Ok(()) => {
                OsdCounters::add(&c.ctx.counters.recovered, places.len() as u64);
                for i in &places {
                    results[*i].done.insert(*osd);
                }
            }
            Err(e) => {
                for i in &places {
                    results[*i]
                        .error
                        .get_or_insert_with(|| format!("push to osd.{osd}: {e}"));
                }
            }
        }
    }
}

/// Clones listed per page when syncing an object's family.
const FAMILY_PAGE: u32 = 64;

/// The clones and snapdir of `head` (store keys of its name with a
/// snapshot id) in our copy of the PG, in order.
pub fn local_family(
    store: &dyn ObjectStore,
    coll: CollectionId,
    head: &ObjectKey,
) -> shoal_objectstore::Result<Vec<ObjectKey>> {
    let mut out = Vec::new();
    let mut cursor = head.clone_for(1);
    loop {
        let page = store.list_objects(&coll, Some(&cursor), FAMILY_PAGE as usize)?;
        for k in &page.objects {
            if k.hash != head.hash || k.name != head.name || k.snap == ObjectKey::HEAD {
                return Ok(out);
            }
            out.push(k.clone());
        }
        match page.next {
            Some(n) => cursor = n,
            None => return Ok(out),
        }
    }
}

/// The clones and snapdir of `head` in the copy held by the member at `peer`.
pub async fn remote_family(
    c: Copier<'_>,
    peer: &Connection,
    head: &ObjectKey,
) -> Result<Vec<ObjectKey>, String> {
    let Some(want) = crate::object::split_key(head) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    let mut cursor = 1u64;
    loop {
        let list = PgList {
            pool: c.pg.pool,
            pg_seed: c.pg.seed,
            epoch: c.epoch,
            has_cursor: true,
            cursor_hash: head.hash,
            cursor_name: head.name.clone(),
            cursor_snap: cursor,
            max: FAMILY_PAGE,
        };
        let reply = peer
            .request_with_timeout(list, Bytes::new(), c.ctx.cfg.peer_timeout)
            .await
            .map_err(|e| e.to_string())?;
        let Message::PgListReply(page) = reply.msg else {
            return Err(format!("{} answered a listing otherwise", peer.peer()));
        };
        if page.code != 0 {
            return Err(format!("listing {}: {}", peer.peer(), page.message));
        }
        for (i, (ns, name)) in page.nspaces.iter().zip(&page.names).enumerate() {
            let snap = page.snaps.get(i).copied().unwrap_or(0);
            if (ns.as_str(), name.as_str()) != (want.0.as_str(), want.1.as_str()) || snap == 0 {
                return Ok(out);
            }
            out.push(head.clone_for(snap));
        }
        if !page.more
            || page.next_hash != head.hash
            || page.next_name != head.name
            || page.next_snap == 0
        {
            return Ok(out);
        }
        cursor = page.next_snap;
    }
}

/// Whether family member `k` must be copied to a copy holding `held`: a
/// clone never changes once made, so one held is current; a snapdir's
/// snapset changes as snapshots are trimmed, so it is always copied.
pub(crate) fn stale(k: &ObjectKey, held: &[ObjectKey]) -> bool {
    k.snap == crate::object::SNAPDIR || !held.contains(k)
}

/// After pulling `head` from `src`: its clones and snapdir as `src` has
/// them (one `src` lacks was trimmed there).
pub async fn pull_family(c: Copier<'_>, src: &Connection, head: &ObjectKey) -> Result<(), String> {
    let coll = crate::object::collection(c.pg);
    let theirs = remote_family(c, src, head).await?;
    let store = c.ctx.store.as_ref();
    let ours = shoal_net::runtime::blocking(|| local_family(store, coll, head))
        .map_err(|e| e.to_string())?;
    tracing::debug!(pg = %c.pg, object = %head, ?ours, ?theirs, from = %src.peer(), "pull family");
    for k in theirs.iter().filter(|k| stale(k, &ours)) {
        pull_object(c, src, k, Some(true)).await?;
    }
    let extra: Vec<&ObjectKey> = ours.iter().filter(|k| !theirs.contains(k)).collect();
    if !extra.is_empty() {
        let mut t = Transaction::new();
        for k in extra {
            t.remove(coll, k.clone());
        }
        let _held = c.fence.hold()?;
        shoal_net::runtime::blocking(|| store.apply_transaction(t)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// After pushing `head` to `dst`: our clones and snapdir that `dst` lacks,
/// and the removal of those it has and we do not.
pub async fn push_family(c: Copier<'_>, dst: &Connection, head: &ObjectKey) -> Result<(), String> {
    let coll = crate::object::collection(c.pg);
    let theirs = remote_family(c, dst, head).await?;
    let store = c.ctx.store.as_ref();
    let ours = shoal_net::runtime::blocking(|| local_family(store, coll, head))
        .map_err(|e| e.to_string())?;
    tracing::debug!(pg = %c.pg, object = %head, ?ours, ?theirs, to = %dst.peer(), "push family");
    for k in ours.iter().filter(|k| stale(k, &theirs)) {
        push_object(c, dst, k, Some(true)).await?;
    }
    for k in theirs.iter().filter(|k| !ours.contains(k)) {
        push_object(c, dst, k, Some(false)).await?;
    }
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
    let mut out = all_objects(store, coll)?;
    out.retain(|k| k.name.first() != Some(&0));
    Ok(out)
}

/// Every object of `coll`, the PG's hidden ones (metadata, stashes,
/// temporary copies) too.
pub fn all_objects(
    store: &dyn ObjectStore,
    coll: CollectionId,
) -> shoal_objectstore::Result<Vec<ObjectKey>> {
    let mut out = Vec::new();
    let mut cursor: Option<ObjectKey> = None;
    loop {
        let page = store.list_objects(&coll, cursor.as_ref(), LIST_PAGE)?;
        out.extend(page.objects);
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
    let mut cursor: Option<(u32, Vec<u8>, u64)> = None;
    loop {
        let list = PgList {
            pool: pg.pool,
            pg_seed: pg.seed,
            epoch: map.epoch.0,
            has_cursor: cursor.is_some(),
            cursor_hash: cursor.as_ref().map_or(0, |c| c.0),
            cursor_name: cursor.as_ref().map(|c| c.1.clone()).unwrap_or_default(),
            cursor_snap: cursor.as_ref().map_or(0, |c| c.2),
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
        for (i, (ns, name)) in page.nspaces.iter().zip(&page.names).enumerate() {
            let mut key = crate::object::object_key(pool, ns, name).map_err(|e| e.to_string())?;
            // A clone: the same name, the snapshot it is for.
            if let Some(snap) = page.snaps.get(i).filter(|s| **s != 0) {
                key.snap = *snap;
            }
            out.push(key);
        }
        if !page.more {
            return Ok(out);
        }
        cursor = Some((page.next_hash, page.next_name, page.next_snap));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_step_of_a_big_omap_may_take_longer() {
        let t = Duration::from_secs(30);
        assert_eq!(last_step_timeout(t, 0), t);
        assert_eq!(last_step_timeout(t, 99_999), t);
        assert_eq!(last_step_timeout(t, 1_000_000), t * 11);
        assert_eq!(last_step_timeout(t, usize::MAX), t * 20);
    }
}

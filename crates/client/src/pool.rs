//! [`Pool`]: the objects of one pool (in one namespace): single operations,
//! compound operations, and listing across the pool's PGs.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use shoal_maps::PgId;
use shoal_proto::{CmpOp, Message, OsdErrorCode, PgList};

use crate::client::{Client, OpOptions};
use crate::error::{Error, OpError, Result};
use crate::op::{ObjectStat, OmapPage, Op, OpResult};

/// One object of a listing.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjectEntry {
    /// Its namespace ("" for the default).
    pub nspace: String,
    /// Its name.
    pub name: String,
}

/// Where a listing continues: a PG and a position inside it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListCursor {
    seed: u32,
    within: Option<(u32, Vec<u8>, u64)>,
    done: bool,
}

impl ListCursor {
    /// The start of the pool.
    pub fn start() -> ListCursor {
        ListCursor::default()
    }

    /// Whether the listing has reached the end.
    pub fn is_done(&self) -> bool {
        self.done
    }
}

/// Why one listing request did not give a page.
enum Listing {
    /// Final.
    Failed(Error),
    /// Try again once the map is at this epoch (0: after a short pause).
    Retry(u32, String),
}

/// A pool, as an application uses it.
#[derive(Debug, Clone)]
pub struct Pool {
    client: Client,
    id: u64,
    name: String,
    nspace: String,
    snapc: Option<std::sync::Arc<crate::SnapContext>>,
    read_snap: u64,
    full_try: bool,
}

/// A monitor's refusal as the client's error.
fn mon_error(pool: &str, e: shoal_monclient::MonError) -> Error {
    match e.code {
        shoal_monclient::ErrorCode::NotFound => Error::NotFound(e.message),
        shoal_monclient::ErrorCode::PermissionDenied => Error::PermissionDenied(e.message),
        shoal_monclient::ErrorCode::InvalidArgument => Error::InvalidArgument(e.message),
        _ => Error::Mon(format!("pool {pool}: {}", e.message)),
    }
}

fn single(r: Result<OpResult, OpError>) -> Result<OpResult> {
    r.map_err(|e| e.error)
}

impl Pool {
    pub(crate) fn new(client: Client, id: u64, name: &str) -> Pool {
        Pool {
            client,
            id,
            name: name.to_string(),
            nspace: String::new(),
            snapc: None,
            read_snap: 0,
            full_try: false,
        }
    }

    /// The same pool, its changes taken by a full OSD (Ceph's FULL_TRY):
    /// for what must work for anyone to free space, as a metadata server's
    /// journal or a gateway's deletes. The stores' own space checks still
    /// apply.
    pub fn full_try(&self) -> Pool {
        Pool {
            full_try: true,
            ..self.clone()
        }
    }

    /// The same pool, its writes carrying snapshot context `snapc`.
    pub fn with_snap_context(&self, snapc: crate::SnapContext) -> Pool {
        Pool {
            snapc: Some(std::sync::Arc::new(snapc)),
            ..self.clone()
        }
    }

    /// The same pool, reading objects as they were at snapshot `snap`
    /// (0: as they are); such a pool cannot write.
    pub fn at_snap(&self, snap: u64) -> Pool {
        Pool {
            read_snap: snap,
            ..self.clone()
        }
    }

    /// The same pool, in namespace `nspace`.
    pub fn with_namespace(&self, nspace: &str) -> Pool {
        Pool {
            nspace: nspace.to_string(),
            ..self.clone()
        }
    }

    /// The client the pool is used through.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace operations act in ("" for the default).
    pub fn namespace(&self) -> &str {
        &self.nspace
    }

    /// The pool's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Runs a compound operation on `oid`: every sub-operation or none.
    pub async fn operate(&self, oid: &str, op: Op) -> Result<OpResult, OpError> {
        self.operate_with(oid, op, OpOptions::default()).await
    }

    /// [`Pool::operate`] with a given request id or timeout.
    pub async fn operate_with(&self, oid: &str, op: Op, o: OpOptions) -> Result<OpResult, OpError> {
        let snapc = self.snapc.as_deref();
        self.client
            .operate(
                self.id,
                &self.nspace,
                oid,
                op,
                o,
                snapc,
                self.read_snap,
                self.full_try,
            )
            .await
    }

    /// A new self-managed snapshot id of this pool, from the monitors; the
    /// client's map has it when this returns. Writes that carry it in their
    /// snapshot context preserve what objects held before them.
    pub async fn selfmanaged_snap_create(&self) -> Result<u64> {
        let cmd = shoal_monclient::Command::PoolSelfmanagedSnapCreate {
            pool: self.name.clone(),
        };
        let v = self
            .client
            .mon_client()
            .command(&cmd)
            .await
            .map_err(|e| mon_error(&self.name, e))?;
        let snapid = v["snapid"]
            .as_u64()
            .ok_or_else(|| Error::Protocol(format!("the monitors answered {v}")))?;
        self.client.wait_pool_snap(self.id, snapid).await;
        Ok(snapid)
    }

    /// Removes self-managed snapshot `snapid`: the OSDs trim its clones.
    pub async fn selfmanaged_snap_remove(&self, snapid: u64) -> Result<()> {
        let cmd = shoal_monclient::Command::PoolSelfmanagedSnapRemove {
            pool: self.name.clone(),
            snapid,
        };
        self.client
            .mon_client()
            .command(&cmd)
            .await
            .map_err(|e| mon_error(&self.name, e))?;
        Ok(())
    }

    /// Watches `oid`: every notify sent to it arrives on the [`Watch`](crate::Watch).
    pub async fn watch(&self, oid: &str) -> Result<crate::Watch> {
        self.client.watch(self.id, &self.nspace, oid).await
    }

    /// Sends `payload` to every watcher of `oid`; waits for their answers
    /// at most `timeout`.
    pub async fn notify(
        &self,
        oid: &str,
        payload: impl Into<Bytes>,
        timeout: std::time::Duration,
    ) -> Result<crate::NotifyResult> {
        self.client
            .notify(self.id, &self.nspace, oid, payload.into(), timeout)
            .await
    }

    /// Ends this client's watch `cookie` on `oid` (what [`crate::Watch::unwatch`]
    /// does, for a watch owned elsewhere).
    pub async fn unwatch(&self, oid: &str, cookie: u64) -> Result<()> {
        self.client
            .unwatch(self.id, &self.nspace, oid, cookie)
            .await
    }

    /// The live watchers of `oid`.
    pub async fn list_watchers(&self, oid: &str) -> Result<Vec<crate::WatcherInfo>> {
        self.client.list_watchers(self.id, &self.nspace, oid).await
    }

    /// Writes `data` at `offset`.
    pub async fn write(&self, oid: &str, offset: u64, data: impl Into<Bytes>) -> Result<()> {
        single(self.operate(oid, Op::new().write(offset, data)).await).map(|_| ())
    }

    /// Replaces the object's data.
    pub async fn write_full(&self, oid: &str, data: impl Into<Bytes>) -> Result<()> {
        single(self.operate(oid, Op::new().write_full(data)).await).map(|_| ())
    }

    /// Appends.
    pub async fn append(&self, oid: &str, data: impl Into<Bytes>) -> Result<()> {
        single(self.operate(oid, Op::new().append(data)).await).map(|_| ())
    }

    /// Reads `len` bytes at `offset` (`len` 0: to the end).
    pub async fn read(&self, oid: &str, offset: u64, len: u64) -> Result<Bytes> {
        single(self.operate(oid, Op::new().read(offset, len)).await)?.data(0)
    }

    /// The allocated extents of `len` bytes at `offset` (`len` 0: to the
    /// end) and their data, concatenated.
    pub async fn sparse_read(
        &self,
        oid: &str,
        offset: u64,
        len: u64,
    ) -> Result<(Vec<(u64, u64)>, Bytes)> {
        let r = single(self.operate(oid, Op::new().sparse_read(offset, len)).await)?;
        let extents = r.extents(0)?;
        let data = r.data(0)?;
        let total: u64 = extents.iter().map(|(_, n)| n).sum();
        if total != data.len() as u64 {
            return Err(Error::Protocol(format!(
                "a sparse read's extents cover {total} bytes, its data {}",
                data.len()
            )));
        }
        Ok((extents, data))
    }

    /// The allocated extents of `len` bytes at `offset`: what lies outside
    /// them reads as zeros.
    pub async fn allocated(&self, oid: &str, offset: u64, len: u64) -> Result<Vec<(u64, u64)>> {
        single(self.operate(oid, Op::new().allocated(offset, len)).await)?.extents(0)
    }

    /// Size, mtime and version.
    pub async fn stat(&self, oid: &str) -> Result<ObjectStat> {
        single(self.operate(oid, Op::new().stat()).await)?.stat(0)
    }

    /// Sets the size.
    pub async fn truncate(&self, oid: &str, size: u64) -> Result<()> {
        single(self.operate(oid, Op::new().truncate(size)).await).map(|_| ())
    }

    /// Zeroes a range.
    pub async fn zero(&self, oid: &str, offset: u64, len: u64) -> Result<()> {
        single(self.operate(oid, Op::new().zero(offset, len)).await).map(|_| ())
    }

    /// Removes the object.
    pub async fn remove(&self, oid: &str) -> Result<()> {
        single(self.operate(oid, Op::new().remove()).await).map(|_| ())
    }

    /// Creates the object (exclusive: fail with `Exists` if present).
    pub async fn create(&self, oid: &str, exclusive: bool) -> Result<()> {
        single(self.operate(oid, Op::new().create(exclusive)).await).map(|_| ())
    }

    /// One xattr.
    pub async fn getxattr(&self, oid: &str, name: &str) -> Result<Bytes> {
        single(self.operate(oid, Op::new().getxattr(name)).await)?.data(0)
    }

    /// Every xattr.
    pub async fn getxattrs(&self, oid: &str) -> Result<BTreeMap<String, Bytes>> {
        single(self.operate(oid, Op::new().getxattrs()).await)?.xattrs(0)
    }

    /// Sets an xattr.
    pub async fn setxattr(&self, oid: &str, name: &str, value: impl Into<Bytes>) -> Result<()> {
        single(self.operate(oid, Op::new().setxattr(name, value)).await).map(|_| ())
    }

    /// Removes an xattr.
    pub async fn rmxattr(&self, oid: &str, name: &str) -> Result<()> {
        single(self.operate(oid, Op::new().rmxattr(name)).await).map(|_| ())
    }

    /// Checks an xattr (`CompareFailed` when the comparison does not hold).
    pub async fn cmpxattr(
        &self,
        oid: &str,
        name: &str,
        cmp: CmpOp,
        v: impl Into<Bytes>,
    ) -> Result<()> {
        single(self.operate(oid, Op::new().cmpxattr(name, cmp, v)).await).map(|_| ())
    }

    /// Omap entries after `start_after` with `prefix`, at most `max`.
    pub async fn omap_get_vals(
        &self,
        oid: &str,
        start_after: &[u8],
        prefix: &[u8],
        max: u32,
    ) -> Result<OmapPage> {
        single(
            self.operate(oid, Op::new().omap_get_vals(start_after, prefix, max))
                .await,
        )?
        .omap(0)
    }

    /// Omap keys after `start_after` with `prefix`, at most `max`.
    pub async fn omap_get_keys(
        &self,
        oid: &str,
        start_after: &[u8],
        prefix: &[u8],
        max: u32,
    ) -> Result<OmapPage> {
        single(
            self.operate(oid, Op::new().omap_get_keys(start_after, prefix, max))
                .await,
        )?
        .omap(0)
    }

    /// The values of those `keys` that exist.
    pub async fn omap_get_vals_by_keys<K: AsRef<[u8]>>(
        &self,
        oid: &str,
        keys: &[K],
    ) -> Result<BTreeMap<Bytes, Bytes>> {
        let page = single(
            self.operate(oid, Op::new().omap_get_vals_by_keys(keys))
                .await,
        )?
        .omap(0)?;
        Ok(page.entries.into_iter().collect())
    }

    /// Sets omap entries.
    pub async fn omap_set<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        oid: &str,
        entries: &[(K, V)],
    ) -> Result<()> {
        single(self.operate(oid, Op::new().omap_set(entries)).await).map(|_| ())
    }

    /// Removes omap keys.
    pub async fn omap_rm_keys<K: AsRef<[u8]>>(&self, oid: &str, keys: &[K]) -> Result<()> {
        single(self.operate(oid, Op::new().omap_rm_keys(keys)).await).map(|_| ())
    }

    /// Removes every omap entry and the header.
    pub async fn omap_clear(&self, oid: &str) -> Result<()> {
        single(self.operate(oid, Op::new().omap_clear()).await).map(|_| ())
    }

    /// The omap header.
    pub async fn omap_get_header(&self, oid: &str) -> Result<Bytes> {
        single(self.operate(oid, Op::new().omap_get_header()).await)?.data(0)
    }

    /// Sets the omap header.
    pub async fn omap_set_header(&self, oid: &str, header: impl Into<Bytes>) -> Result<()> {
        single(self.operate(oid, Op::new().omap_set_header(header)).await).map(|_| ())
    }

    /// Up to `max` objects (of every namespace) from `cursor`, and where to
    /// continue. Pages follow the pool's PGs in order, each PG's objects in
    /// hash order; an object present throughout is listed exactly once.
    /// Each PG's page goes to its primary, resent as operations are (map
    /// changes, lost connections, a PG not ready), within the op timeout.
    pub async fn list(
        &self,
        cursor: &ListCursor,
        max: usize,
    ) -> Result<(Vec<ObjectEntry>, ListCursor)> {
        let mut out = Vec::new();
        let mut cur = cursor.clone();
        let timeout = self.client.inner.opts.op_timeout;
        let deadline = Instant::now() + timeout;
        let mut attempt = 0u64;
        while !cur.done && out.len() < max {
            let map = self.client.map()?;
            let pool = map
                .pool(self.id)
                .ok_or_else(|| Error::NoPool(self.name.clone()))?;
            if cur.seed >= pool.pg_num {
                cur.done = true;
                break;
            }
            let pg = PgId {
                pool: self.id,
                seed: cur.seed,
            };
            let want = u32::try_from(max - out.len()).unwrap_or(u32::MAX);
            let req = PgList {
                pool: self.id,
                pg_seed: cur.seed,
                epoch: map.epoch.0,
                has_cursor: cur.within.is_some(),
                cursor_hash: cur.within.as_ref().map_or(0, |w| w.0),
                cursor_name: cur.within.as_ref().map(|w| w.1.clone()).unwrap_or_default(),
                cursor_snap: cur.within.as_ref().map_or(0, |w| w.2),
                max: want,
            };
            match self.list_once(&map, pg, req, deadline).await {
                Ok(page) => {
                    attempt = 0;
                    for (ns, name) in page.nspaces.into_iter().zip(page.names) {
                        out.push(ObjectEntry { nspace: ns, name });
                    }
                    if page.more {
                        cur.within = Some((page.next_hash, page.next_name, page.next_snap));
                    } else {
                        cur.seed += 1;
                        cur.within = None;
                    }
                }
                Err(Listing::Failed(e)) => return Err(e),
                Err(Listing::Retry(epoch, why)) => {
                    if Instant::now() >= deadline {
                        return Err(Error::Timeout(timeout, format!("listing pg {pg}: {why}")));
                    }
                    // A newer map, or a short pause when none is announced.
                    attempt += 1;
                    let wait = epoch.max(map.epoch.0 + 1);
                    let pause = match epoch > map.epoch.0 {
                        true => deadline,
                        false => Instant::now() + Duration::from_millis(100 * attempt.min(5)),
                    };
                    self.client.wait_epoch(wait, pause.min(deadline)).await;
                }
            }
        }
        Ok((out, cur))
    }

    /// One page of one PG.
    async fn list_once(
        &self,
        map: &shoal_maps::OsdMap,
        pg: PgId,
        req: PgList,
        deadline: Instant,
    ) -> Result<shoal_proto::PgListReply, Listing> {
        let next = map.epoch.0 + 1;
        let primary = match map.pg_to_up_acting(pg) {
            Ok(m) if m.acting_primary >= 0 => m.acting_primary,
            _ => return Err(Listing::Retry(next, format!("pg {pg} has no primary"))),
        };
        let addr = map
            .osd(primary)
            .and_then(|i| i.addr.clone())
            .and_then(|a| a.parse::<SocketAddr>().ok())
            .ok_or_else(|| Listing::Retry(next, format!("osd.{primary} has no address")))?;
        let remaining = deadline.saturating_duration_since(Instant::now());
        let retry = |e: String| Listing::Retry(0, format!("osd.{primary}: {e}"));
        let conn = tokio::time::timeout(remaining, self.client.inner_msgr().connect(addr))
            .await
            .map_err(|_| retry("connect timed out".into()))?
            .map_err(|e| retry(e.to_string()))?;
        let reply = match conn
            .request_with_timeout(req, Bytes::new(), remaining)
            .await
        {
            Ok(r) => r,
            Err(shoal_net::NetError::Remote { code, message, .. }) => {
                let why = format!("osd.{primary} refused ({code}): {message}");
                return Err(Listing::Failed(Error::Protocol(why)));
            }
            Err(e) => return Err(retry(e.to_string())),
        };
        let Message::PgListReply(page) = reply.msg else {
            let why = format!("osd.{primary} answered a listing with something else");
            return Err(Listing::Failed(Error::Protocol(why)));
        };
        let code = OsdErrorCode::from_u32(page.code);
        match code {
            OsdErrorCode::Ok => Ok(page),
            OsdErrorCode::WrongPrimary | OsdErrorCode::StaleEpoch => Err(Listing::Retry(
                page.epoch,
                format!("{code:?}: {}", page.message),
            )),
            OsdErrorCode::Again | OsdErrorCode::ShuttingDown | OsdErrorCode::NoPool => {
                Err(Listing::Retry(0, format!("{code:?}: {}", page.message)))
            }
            _ => Err(Listing::Failed(Error::from_osd(code, page.message))),
        }
    }

    /// Every object of the pool.
    pub async fn list_all(&self) -> Result<Vec<ObjectEntry>> {
        let mut all = Vec::new();
        let mut cur = ListCursor::start();
        while !cur.is_done() {
            let (page, next) = self.list(&cur, 1024).await?;
            all.extend(page);
            cur = next;
        }
        Ok(all)
    }
}

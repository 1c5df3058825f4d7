//! Erasure coding in the PG engine: the backend of an EC pool's PGs and the
//! primary's op path for them.
//!
//! Each member holds the shard of its position in the acting set (the
//! collection `pool.seed` shard `i`); every shard holds the PG's log and
//! every object's metadata (size, xattrs), and chunk `i` of each stripe.
//! A client op runs in two passes: first against the object as this shard
//! knows it with no data, which tells which stripes the op reads and which
//! partially written stripes it must read first (`shoal_ec::stripes_to_read`);
//! those are gathered from `k` shards (data shards first, any others when
//! one is missing or fails its checksum) and decoded; then the op runs
//! again on the gathered data. A change becomes one transaction per shard
//! (`crate::ec::shard_txn`), each member's sent with the log entry: the
//! client is answered once every member has it durable, as in replication,
//! and a PG serves writes only with at least `min_size` (k+1) members.
//! Ops on an object wait while a change to it is in flight, so a
//! read-modify-write always reads committed stripes.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use shoal_ec::{Codec, DataOp, StripeLayout};
use shoal_objectstore::{
    CollectionId, Listing, ObjectKey, ObjectStat, ObjectStore, StatFs, Transaction,
};
use shoal_proto::{CopyProgress, EcRead, EcReadReply, OsdErrorCode, PgPush, ScrubObject};

use super::backend::{Change, PgBackend, ShardWrite, Submission};
use crate::codec::{self, CodecError};
use crate::copy::StepLimits;
use crate::ec::{self as shard, SIZE_XATTR, ShardReadError};
use crate::exec::{self, ExecError, ExecInput, ExecOutcome};
use crate::missing::MissingSet;

/// What an EC PG knows of its pool and interval.
#[derive(Debug, Clone)]
pub(crate) struct EcPg {
    /// The pool's codec (and layout).
    pub codec: Arc<Codec>,
    /// The acting set by position (holes are `ITEM_NONE`).
    pub acting: Vec<i32>,
    /// The up set by position.
    pub up: Vec<i32>,
}

impl EcPg {
    /// The pool's stripe layout.
    pub fn layout(&self) -> StripeLayout {
        self.codec.layout()
    }

    /// The shard member `osd` holds: its position in the acting set, or
    /// else in the up set.
    pub fn shard_of(&self, osd: i32) -> Option<u8> {
        let pos = self
            .acting
            .iter()
            .position(|o| *o == osd)
            .or_else(|| self.up.iter().position(|o| *o == osd))?;
        u8::try_from(pos).ok()
    }

    /// Who holds shard `i` in this interval.
    pub fn holder(&self, i: usize) -> Option<i32> {
        self.acting
            .get(i)
            .copied()
            .filter(|o| super::engine::is_osd(*o))
    }
}

/// The codec of an EC pool, from its map entry.
pub(crate) fn pool_codec(pool: &shoal_maps::Pool) -> Option<Result<Codec, String>> {
    let shoal_maps::PoolKind::Erasure { k, m } = pool.kind else {
        return None;
    };
    let layout = StripeLayout::new(k, m, pool.stripe_unit());
    Some(Codec::new(layout).map_err(|e| format!("pool {}: {e}", pool.name)))
}

/// Zeros a first pass answers reads with (it only learns which stripes
/// to gather), without allocating them each time.
static ZEROS: [u8; 4 << 20] = [0; 4 << 20];

/// Decoded stripes of one object, as gathered: runs of consecutive
/// stripes, each run one buffer (`width` bytes a stripe), so a read inside
/// a run is a slice of it, never a copy.
#[derive(Debug, Clone, Default)]
pub struct Stripes {
    runs: BTreeMap<u64, Bytes>,
    width: u64,
    /// Members whose shard was read around because a chunk of it failed
    /// its checksum: the PG repairs them.
    pub damaged: BTreeSet<i32>,
}

impl Stripes {
    /// No stripes yet, of `width` bytes each.
    pub fn new(width: u64) -> Stripes {
        Stripes {
            runs: BTreeMap::new(),
            width,
            damaged: BTreeSet::new(),
        }
    }

    /// Adds the run of stripes from `start` on (`bytes`: whole stripes).
    pub fn insert_run(&mut self, start: u64, bytes: Bytes) {
        self.runs.insert(start, bytes);
    }

    /// The run holding stripe `s`, with where `s` begins in it.
    fn run_of(&self, s: u64) -> Option<(&Bytes, usize)> {
        let (start, b) = self.runs.range(..=s).next_back()?;
        let at = (s - start).checked_mul(self.width)?;
        let at = usize::try_from(at).ok()?;
        (self.width > 0 && at < b.len()).then_some((b, at))
    }

    /// Stripe `s`'s bytes, if gathered.
    pub fn get(&self, s: u64) -> Option<&[u8]> {
        let (b, at) = self.run_of(s)?;
        b.get(at..at + self.width as usize)
    }

    /// Whether stripe `s` was gathered.
    pub fn contains(&self, s: u64) -> bool {
        self.get(s).is_some()
    }

    /// The object's bytes `from..to` when one run holds them all.
    fn slice(&self, from: u64, to: u64) -> Option<Bytes> {
        let w = self.width.max(1);
        let (b, at) = self.run_of(from / w)?;
        let start = at + (from % w) as usize;
        let end = start + usize::try_from(to.checked_sub(from)?).ok()?;
        (end <= b.len()).then(|| b.slice(start..end))
    }
}

/// The logical object an op runs against: this shard's metadata, the
/// logical size it records, and the gathered stripes as the data. Reads
/// outside the gathered stripes are recorded (the first pass learns what
/// to gather from them) and answered with zeros. Other keys (the object's
/// clones and snapdir) answer from this shard's store.
#[derive(Debug)]
pub(crate) struct LogicalView<'a> {
    pub store: &'a dyn ObjectStore,
    pub key: &'a ObjectKey,
    pub layout: StripeLayout,
    pub size: Option<u64>,
    pub stripes: &'a Stripes,
    pub wanted: std::sync::Mutex<BTreeSet<u64>>,
}

impl LogicalView<'_> {
    fn missing(&self) -> shoal_objectstore::Error {
        shoal_objectstore::Error::InvalidArgument("an EC view serves one object".into())
    }
}

impl ObjectStore for LogicalView<'_> {
    fn queue_transaction(
        &self,
        _: Transaction,
    ) -> shoal_objectstore::Result<shoal_objectstore::CommitTicket> {
        Err(self.missing())
    }

    fn flush(&self) -> shoal_objectstore::Result<()> {
        Ok(())
    }

    fn list_collections(&self) -> shoal_objectstore::Result<Vec<CollectionId>> {
        self.store.list_collections()
    }

    fn collection_exists(&self, c: &CollectionId) -> shoal_objectstore::Result<bool> {
        self.store.collection_exists(c)
    }

    fn list_objects(
        &self,
        c: &CollectionId,
        start: Option<&ObjectKey>,
        max: usize,
    ) -> shoal_objectstore::Result<Listing> {
        self.store.list_objects(c, start, max)
    }

    fn exists(&self, c: &CollectionId, o: &ObjectKey) -> shoal_objectstore::Result<bool> {
        if o != self.key {
            return self.store.exists(c, o);
        }
        Ok(self.size.is_some())
    }

    fn stat(&self, c: &CollectionId, o: &ObjectKey) -> shoal_objectstore::Result<ObjectStat> {
        if o != self.key {
            return Err(self.missing());
        }
        match self.size {
            Some(size) => Ok(ObjectStat {
                size,
                allocated_bytes: size,
            }),
            None => Err(shoal_objectstore::Error::ObjectNotFound(*c, o.clone())),
        }
    }

    fn read(
        &self,
        _: &CollectionId,
        _: &ObjectKey,
        offset: u64,
        len: u64,
    ) -> shoal_objectstore::Result<Bytes> {
        let size = self.size.unwrap_or(0);
        let end = offset.saturating_add(len).min(size);
        if end <= offset {
            return Ok(Bytes::new());
        }
        if let Some(b) = self.stripes.slice(offset, end) {
            return Ok(b);
        }
        let w = self.layout.width();
        let first = offset / w;
        let last = (end - 1) / w;
        let missing: Vec<u64> = (first..=last)
            .filter(|s| !self.stripes.contains(*s))
            .collect();
        if !missing.is_empty() {
            // A pass that learns what to gather: its answer is dropped,
            // so it is zeros, from a shared page when it fits.
            self.wanted
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend(missing);
            let n = (end - offset) as usize;
            return Ok(match ZEROS.get(..n) {
                Some(z) => Bytes::from_static(z),
                None => Bytes::from(vec![0u8; n]),
            });
        }
        let mut out = Vec::with_capacity((end - offset) as usize);
        let mut pos = offset;
        while pos < end {
            let s = pos / w;
            let within = (pos % w) as usize;
            let n = (w - pos % w).min(end - pos) as usize;
            // Every stripe is gathered (checked above).
            let b = self.stripes.get(s).and_then(|b| b.get(within..within + n));
            out.extend_from_slice(b.unwrap_or_default());
            pos += n as u64;
        }
        Ok(Bytes::from(out))
    }

    fn getxattr(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
        name: &str,
    ) -> shoal_objectstore::Result<Option<Bytes>> {
        self.store.getxattr(c, o, name)
    }

    fn getxattrs(
        &self,
        c: &CollectionId,
        o: &ObjectKey,
    ) -> shoal_objectstore::Result<BTreeMap<String, Bytes>> {
        let mut all = self.store.getxattrs(c, o)?;
        all.remove(SIZE_XATTR);
        Ok(all)
    }

    fn omap_get_header(&self, _: &CollectionId, _: &ObjectKey) -> shoal_objectstore::Result<Bytes> {
        Err(self.missing())
    }

    fn omap_get_values(
        &self,
        _: &CollectionId,
        _: &ObjectKey,
        _: &[Bytes],
    ) -> shoal_objectstore::Result<BTreeMap<Bytes, Bytes>> {
        Err(self.missing())
    }

    fn omap_range(
        &self,
        _: &CollectionId,
        _: &ObjectKey,
        _: Bound<&[u8]>,
        _: Bound<&[u8]>,
        _: usize,
    ) -> shoal_objectstore::Result<Vec<(Bytes, Bytes)>> {
        Err(self.missing())
    }

    fn statfs(&self) -> shoal_objectstore::Result<StatFs> {
        self.store.statfs()
    }
    fn space(&self) -> shoal_objectstore::Result<StatFs> {
        self.store.space()
    }
}

/// An op's logical transaction, split into its data changes (planned
/// across the stripes), its xattr changes after the last remove (copied
/// to every shard), and its changes to the object's snapshot family
/// (clones of the head, the snapdir), which each shard makes to its own
/// chunk objects.
#[derive(Debug, Default)]
pub(crate) struct Lowered {
    pub data: Vec<DataOp>,
    pub attrs: Vec<shoal_objectstore::Op>,
    pub family: Vec<shoal_objectstore::Op>,
}

/// Splits exec's transaction on `key` (see [`Lowered`]).
pub(crate) fn lower(txn: &Transaction, key: &ObjectKey) -> Result<Lowered, String> {
    use shoal_objectstore::Op;
    let mut out = Lowered::default();
    for op in txn.ops() {
        if let Some(other) = family_op(op, key)? {
            out.family.push(other);
            continue;
        }
        match op {
            Op::Touch(..) => out.data.push(DataOp::Touch),
            Op::Write { offset, data, .. } => out.data.push(DataOp::Write {
                offset: *offset,
                data: data.clone(),
            }),
            Op::Zero { offset, len, .. } => out.data.push(DataOp::Zero {
                offset: *offset,
                len: *len,
            }),
            Op::Truncate { size, .. } => out.data.push(DataOp::Truncate(*size)),
            Op::Remove(..) => {
                out.data.push(DataOp::Remove);
                out.attrs.clear();
            }
            Op::SetXattrs(..) | Op::RemoveXattr(..) => out.attrs.push(op.clone()),
            other => {
                return Err(format!(
                    "an erasure-coded pool cannot {:?}",
                    std::mem::discriminant(other)
                ));
            }
        }
    }
    Ok(out)
}

/// `op` when it changes a member of `key`'s snapshot family other than
/// the head: a clone made from the head, a clone's or the snapdir's
/// xattrs, creation or removal. Every other op on another key is refused.
fn family_op(
    op: &shoal_objectstore::Op,
    key: &ObjectKey,
) -> Result<Option<shoal_objectstore::Op>, String> {
    use shoal_objectstore::Op;
    let kin = |k: &ObjectKey| k.hash == key.hash && k.name == key.name && k.snap != key.snap;
    let ours = match op {
        Op::Clone { src, dst, .. } if src == key && kin(dst) => true,
        Op::Touch(_, k) | Op::Remove(_, k) | Op::SetXattrs(_, k, _) | Op::RemoveXattr(_, k, _)
            if kin(k) =>
        {
            true
        }
        Op::Clone { dst: k, .. }
        | Op::Write { oid: k, .. }
        | Op::Zero { oid: k, .. }
        | Op::Truncate { oid: k, .. }
        | Op::Touch(_, k)
        | Op::Remove(_, k)
        | Op::SetXattrs(_, k, _)
        | Op::RemoveXattr(_, k, _)
            if k != key =>
        {
            return Err(format!(
                "an erasure-coded change to {key} cannot change {k}"
            ));
        }
        _ => false,
    };
    Ok(ours.then(|| op.clone()))
}

/// A change to `key`'s snapshot family only (a snapshot trim), made by
/// every present shard to its own objects (`txn` is on any one shard's
/// collection).
pub(crate) fn family_transactions(
    ec: &EcPg,
    pg: shoal_maps::PgId,
    txn: &Transaction,
) -> Transaction {
    let mut out = Transaction::new();
    for coll in shard_collections(ec, pg) {
        for op in txn.ops() {
            push_family_op(&mut out, op, coll);
        }
    }
    out
}

/// The collections of the shards some member holds.
fn shard_collections(ec: &EcPg, pg: shoal_maps::PgId) -> Vec<CollectionId> {
    (0..ec.layout().shards())
        .filter(|i| ec.holder(*i).is_some())
        .filter_map(|i| u8::try_from(i).ok())
        .map(|s| CollectionId::shard(pg.pool, pg.seed, s))
        .collect()
}

/// A family op on shard collection `coll`. A snapdir is made as an object
/// of logical size 0 (its shards hold no chunks), so that it reads,
/// rebuilds and scrubs like any other.
fn push_family_op(out: &mut Transaction, op: &shoal_objectstore::Op, coll: CollectionId) {
    use shoal_objectstore::Op;
    match op {
        Op::Touch(_, k) => {
            out.touch(coll, k.clone());
            out.set_xattr(
                coll,
                k.clone(),
                SIZE_XATTR,
                Bytes::copy_from_slice(&0u64.to_le_bytes()),
            );
        }
        Op::Clone { src, dst, .. } => {
            out.clone_object(coll, src.clone(), dst.clone());
        }
        Op::Remove(_, k) => {
            out.remove(coll, k.clone());
        }
        other => {
            out.push(retarget(other, coll));
        }
    }
}

/// One transaction holding every present shard's part of a change, each
/// on its own collection (the backend splits it by member). A shard makes
/// the change's family ops first: a clone copies the head as it was.
pub(crate) fn shard_transactions(
    ec: &EcPg,
    pg: shoal_maps::PgId,
    key: &ObjectKey,
    old_size: Option<u64>,
    lowered: &Lowered,
    old: &Stripes,
) -> Result<Transaction, String> {
    let update = shoal_ec::plan_with(&ec.codec, old_size, &lowered.data, &|s| old.get(s))
        .map_err(|e| e.to_string())?;
    let mut txn = Transaction::new();
    for coll in shard_collections(ec, pg) {
        let i = usize::from(coll.shard);
        for op in &lowered.family {
            push_family_op(&mut txn, op, coll);
        }
        shard::shard_txn(
            &mut txn,
            coll,
            key,
            ec.layout(),
            &update,
            i,
            old_size.is_some(),
        );
        if update.exists {
            for a in &lowered.attrs {
                txn.push(retarget(a, coll));
            }
        }
    }
    Ok(txn)
}

/// An xattr op of the logical transaction, on shard collection `coll`.
fn retarget(op: &shoal_objectstore::Op, coll: CollectionId) -> shoal_objectstore::Op {
    use shoal_objectstore::Op;
    match op {
        Op::SetXattrs(_, k, a) => Op::SetXattrs(coll, k.clone(), a.clone()),
        Op::RemoveXattr(_, k, n) => Op::RemoveXattr(coll, k.clone(), n.clone()),
        other => other.clone(),
    }
}

/// The erasure-coding backend (see the module doc).
#[derive(Debug)]
pub(crate) struct Erasure {
    pub codec: Arc<Codec>,
}

impl PgBackend for Erasure {
    fn execute(&self, input: ExecInput<'_>) -> Result<ExecOutcome, ExecError> {
        exec::execute(input)
    }

    /// Splits the change's transaction by shard collection: ops on ours
    /// are applied here, each member gets those on the collection of its
    /// position (`change.member_shards`).
    fn submit(&self, change: Change<'_>) -> Result<Submission, CodecError> {
        let mut parts: BTreeMap<u8, Transaction> = BTreeMap::new();
        for op in change.txn.ops() {
            let c = op.collection();
            if c.pool != change.coll.pool || c.seed != change.coll.seed {
                return Err(CodecError(format!("an op on {c} outside the PG")));
            }
            parts.entry(c.shard).or_default().push(op.clone());
        }
        // Two members may hold one shard (a backfill target of the
        // position beside the member serving it): each gets its part.
        let local = parts.get(&change.coll.shard).cloned().unwrap_or_default();
        let mut shards = Vec::with_capacity(change.members.len());
        for (osd, s) in change.members.iter().zip(change.member_shards) {
            let coll = CollectionId::shard(change.coll.pool, change.coll.seed, *s);
            let txn = parts.get(s).cloned().unwrap_or_default();
            let (ops, chunks) = codec::encode(coll, &txn)?;
            let data = super::backend::concat(chunks);
            let mut msg = change.rep.clone();
            msg.txn = ops;
            msg.ec_shard = Some(u32::from(*s));
            let data_crc = shoal_proto::data_crc(&data);
            shards.push(ShardWrite {
                osd: *osd,
                msg,
                data,
                data_crc,
            });
        }
        Ok(Submission { local, shards })
    }

    fn read_step(
        &self,
        _: &dyn ObjectStore,
        coll: CollectionId,
        _: &ObjectKey,
        _: &CopyProgress,
        _: StepLimits,
    ) -> shoal_objectstore::Result<(PgPush, Bytes)> {
        Err(shoal_objectstore::Error::InvalidArgument(format!(
            "{coll}: a shard is rebuilt by decoding, not copied"
        )))
    }

    /// Installs a whole rebuilt shard object: its chunks (checksummed
    /// afresh), its logical size and its xattrs; or removes it.
    fn install_step(
        &self,
        store: &dyn ObjectStore,
        coll: CollectionId,
        push: &PgPush,
        data: Bytes,
    ) -> Result<Transaction, String> {
        let key = crate::object::wire_key(push.hash, &push.name, push.snap);
        let mut t = Transaction::new();
        let exists = store.exists(&coll, &key).map_err(|e| e.to_string())?;
        if exists {
            t.remove(coll, key.clone());
        }
        // The shard arrives whole: in the same transaction the member no
        // longer lacks the object (else a restart finds it missing again,
        // at a version older than its log, and no recovery runs for it).
        MissingSet::remove_txn(&key, coll, &mut t);
        if !push.exists {
            return Ok(t);
        }
        let layout = self.codec.layout();
        if data.len() as u64 != layout.shard_len(push.object_size) {
            return Err(format!(
                "a rebuilt shard of {} bytes for an object of {} (want {})",
                data.len(),
                push.object_size,
                layout.shard_len(push.object_size)
            ));
        }
        if push.attrs.len() != push.attr_values.len() {
            return Err("xattr names and values differ in number".into());
        }
        t.touch(coll, key.clone());
        let crcs: BTreeMap<Bytes, Bytes> = shoal_ec::chunk_crcs(&data, layout.unit)
            .into_iter()
            .enumerate()
            .map(|(s, c)| {
                (
                    shard::crc_key(s as u64),
                    Bytes::copy_from_slice(&c.to_le_bytes()),
                )
            })
            .collect();
        if !data.is_empty() {
            t.write(coll, key.clone(), 0, data);
        }
        if !crcs.is_empty() {
            t.omap_set_keys(coll, key.clone(), crcs);
        }
        let mut attrs: BTreeMap<String, Bytes> = push
            .attrs
            .iter()
            .cloned()
            .zip(push.attr_values.iter().map(|v| Bytes::copy_from_slice(v)))
            .collect();
        attrs.insert(
            SIZE_XATTR.to_string(),
            Bytes::copy_from_slice(&push.object_size.to_le_bytes()),
        );
        t.set_xattrs(coll, key, attrs);
        Ok(t)
    }

    /// Scrub: the shard's metadata (logical size and xattrs), alike on
    /// every shard (its omap holds its own chunks' checksums, so it is
    /// left out); deep, each chunk checked against its checksum.
    fn summarize(
        &self,
        store: &dyn ObjectStore,
        coll: &CollectionId,
        key: &ObjectKey,
        deep: bool,
    ) -> ScrubObject {
        let mut s = ScrubObject {
            hash: key.hash,
            name: key.name.clone(),
            snap: crate::object::wire_snap(key),
            ..ScrubObject::default()
        };
        let layout = self.codec.layout();
        let r = (|| -> Result<(), String> {
            s.size = shard::logical_size(store, coll, key)
                .map_err(|e| e.to_string())?
                .ok_or("no such object")?;
            let mut crc = 0u32;
            for (n, v) in store.getxattrs(coll, key).map_err(|e| e.to_string())? {
                for b in [n.as_bytes(), &v[..]] {
                    crc = crc32c::crc32c_append(crc, &(b.len() as u64).to_le_bytes());
                    crc = crc32c::crc32c_append(crc, b);
                }
            }
            s.meta_crc = crc;
            if deep {
                let stripes = layout.shard_len(s.size) / u64::from(layout.unit.max(1));
                shard::read_chunks(store, coll, key, layout, 0..stripes)
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        })();
        if let Err(e) = r {
            s.error = e;
        }
        s
    }
}

/// Serves a primary's [`EcRead`] from our shard.
pub(crate) fn serve_read(
    store: &dyn ObjectStore,
    coll: CollectionId,
    layout: StripeLayout,
    msg: &EcRead,
    epoch: u32,
) -> (EcReadReply, Bytes) {
    let fail = |code: OsdErrorCode, message: String| {
        (
            EcReadReply {
                code: code as u32,
                message,
                epoch,
                ..EcReadReply::default()
            },
            Bytes::new(),
        )
    };
    if u32::from(coll.shard) != msg.shard {
        let m = format!(
            "this OSD holds shard {} of the PG, not {}",
            coll.shard, msg.shard
        );
        return fail(OsdErrorCode::InvalidArgument, m);
    }
    let key = crate::object::wire_key(msg.hash, &msg.name, msg.snap);
    let size = match shard::logical_size(store, &coll, &key) {
        Ok(Some(s)) => s,
        Ok(None) => return fail(OsdErrorCode::NotFound, "no such object".into()),
        Err(e) => return fail(OsdErrorCode::Io, e.to_string()),
    };
    let last = layout.shard_len(size) / u64::from(layout.unit.max(1));
    let end = msg.stripe_end.min(last);
    let start = msg.stripe_start.min(end);
    if end
        .saturating_sub(start)
        .saturating_mul(u64::from(layout.unit))
        > shoal_objectstore::types::READ_BYTES_MAX
    {
        return fail(OsdErrorCode::TooLarge, "read fewer stripes at once".into());
    }
    let mut reply = EcReadReply {
        code: 0,
        message: String::new(),
        epoch,
        object_size: size,
        ..EcReadReply::default()
    };
    if msg.want_attrs {
        match store.getxattrs(&coll, &key) {
            Ok(attrs) => {
                for (n, v) in attrs.into_iter().filter(|(n, _)| n != SIZE_XATTR) {
                    reply.attrs.push(n);
                    reply.attr_values.push(v.to_vec());
                }
            }
            Err(e) => return fail(crate::exec::store_error_code(&e), e.to_string()),
        }
    }
    match shard::read_chunks(store, &coll, &key, layout, start..end) {
        Ok(data) => (reply, data),
        Err(ShardReadError::Store(e)) => fail(crate::exec::store_error_code(&e), e.to_string()),
        Err(e @ ShardReadError::BadChunk { .. }) => fail(OsdErrorCode::Io, e.to_string()),
    }
}

/// Reads chunks of a PG's shards for the primary: ours from the store,
/// the others' with [`EcRead`] on connections the PG made.
#[derive(Debug)]
pub(crate) struct ShardReader {
    pub ctx: Arc<crate::ctx::OsdCtx>,
    pub ec: EcPg,
    pub me: i32,
    pub coll: CollectionId,
    pub pg: shoal_maps::PgId,
    pub epoch: u32,
    /// The PG's map, to reach members without an open connection.
    pub map: Arc<shoal_maps::OsdMap>,
    /// Connections the PG had open.
    pub conns: BTreeMap<i32, shoal_net::Connection>,
    /// The shards this OSD keeps from positions it left.
    pub strays: BTreeSet<u8>,
}

/// One shard's answer: its chunks, the object's logical size and (when
/// asked) its xattrs.
#[derive(Debug, Clone, Default)]
pub(crate) struct ShardChunks {
    pub data: Bytes,
    pub size: u64,
    pub attrs: Vec<(String, Vec<u8>)>,
}

/// Why one shard could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ShardFailure {
    /// The member holds no such object in that shard.
    Absent,
    /// A chunk failed its checksum (or the shard is short): the shard
    /// needs repair.
    Damaged(String),
    /// Anything else (unreachable, damaged, another shard).
    Other(String),
}

impl From<String> for ShardFailure {
    fn from(s: String) -> ShardFailure {
        ShardFailure::Other(s)
    }
}

impl std::fmt::Display for ShardFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShardFailure::Absent => f.write_str("no such object"),
            ShardFailure::Damaged(s) | ShardFailure::Other(s) => f.write_str(s),
        }
    }
}

/// Why `k` shards could not be read.
#[derive(Debug)]
pub(crate) struct ReadFailure {
    /// No shard holds the object, and at least `k` said so.
    pub absent: bool,
    /// At least `k` shards said they hold no such object.
    pub absent_k: bool,
    pub why: String,
}

/// Runs of consecutive stripes.
fn runs(stripes: &BTreeSet<u64>) -> Vec<std::ops::Range<u64>> {
    let mut out: Vec<std::ops::Range<u64>> = Vec::new();
    for &s in stripes {
        match out.last_mut() {
            Some(r) if r.end == s => r.end = s + 1,
            _ => out.push(s..s + 1),
        }
    }
    out
}

impl ShardReader {
    /// This interval's holders of each shard: (member, shard).
    fn acting_holders(&self) -> Vec<(i32, usize)> {
        (0..self.ec.layout().shards())
            .filter_map(|i| self.ec.holder(i).map(|o| (o, i)))
            .collect()
    }

    /// Shard `i`'s chunks of `run` from member `osd` (`u64::MAX` as the
    /// run's end: to the object's end).
    async fn read_one(
        self: Arc<Self>,
        osd: i32,
        i: usize,
        key: ObjectKey,
        run: std::ops::Range<u64>,
        want_attrs: bool,
    ) -> Result<ShardChunks, ShardFailure> {
        let layout = self.ec.layout();
        if osd == self.me {
            let coll = match u8::try_from(i) {
                Ok(s) if s == self.coll.shard => self.coll,
                Ok(s) if self.strays.contains(&s) => {
                    CollectionId::shard(self.coll.pool, self.coll.seed, s)
                }
                _ => {
                    let why = format!("this OSD holds shard {}, not {i}", self.coll.shard);
                    return Err(why.into());
                }
            };
            let me = Arc::clone(&self);
            return shoal_net::runtime::blocking(move || {
                let store = me.ctx.store.as_ref();
                let size = shard::logical_size(store, &coll, &key)
                    .map_err(|e| e.to_string())?
                    .ok_or(ShardFailure::Absent)?;
                let last = layout.shard_len(size) / u64::from(layout.unit.max(1));
                let end = run.end.min(last);
                let data = shard::read_chunks(store, &coll, &key, layout, run.start.min(end)..end)
                    .map_err(|e| match e {
                        ShardReadError::BadChunk { .. } => ShardFailure::Damaged(e.to_string()),
                        other => ShardFailure::Other(other.to_string()),
                    })?;
                let attrs = if want_attrs {
                    store
                        .getxattrs(&coll, &key)
                        .map_err(|e| e.to_string())?
                        .into_iter()
                        .filter(|(n, _)| n != SIZE_XATTR)
                        .map(|(n, v)| (n, v.to_vec()))
                        .collect()
                } else {
                    Vec::new()
                };
                Ok(ShardChunks { data, size, attrs })
            });
        }
        let conn = self.conn(osd).await?;
        let msg = EcRead {
            pool: self.pg.pool,
            pg_seed: self.pg.seed,
            epoch: self.epoch,
            shard: i as u32,
            hash: key.hash,
            name: key.name.clone(),
            stripe_start: run.start,
            stripe_end: run.end,
            want_attrs,
            snap: crate::object::wire_snap(&key),
        };
        let reply = conn
            .request_with_timeout(msg, Bytes::new(), self.ctx.cfg.peer_timeout)
            .await
            .map_err(|e| format!("osd.{osd}: {e}"))?;
        match reply.msg {
            shoal_proto::Message::EcReadReply(r) if r.code == 0 => Ok(ShardChunks {
                data: reply.data,
                size: r.object_size,
                attrs: r.attrs.into_iter().zip(r.attr_values).collect(),
            }),
            shoal_proto::Message::EcReadReply(r) if r.code == OsdErrorCode::NotFound as u32 => {
                Err(ShardFailure::Absent)
            }
            shoal_proto::Message::EcReadReply(r) if r.code == OsdErrorCode::Io as u32 => {
                Err(ShardFailure::Damaged(format!("osd.{osd}: {}", r.message)))
            }
            shoal_proto::Message::EcReadReply(r) => Err(format!("osd.{osd}: {}", r.message).into()),
            other => Err(format!("osd.{osd} answered {:?}", other.msg_type()).into()),
        }
    }

    /// `run` from `k` of the `sources` ((member, shard) pairs), data
    /// shards first: each shard's chunks at its position, and the first
    /// answer's size and xattrs. A shard that is missing, fails a
    /// checksum or holds another version is replaced by the next source;
    /// one still silent after `ec_read_hedge` gets company — the next
    /// source is asked too, and the first `k` answers win (the slow reads
    /// are dropped).
    async fn read_k(
        self: &Arc<Self>,
        key: &ObjectKey,
        run: std::ops::Range<u64>,
        sources: &[(i32, usize)],
        want_attrs: bool,
    ) -> Result<(Vec<Option<Bytes>>, ShardChunks, BTreeSet<i32>), ReadFailure> {
        let layout = self.ec.layout();
        let k = layout.k as usize;
        let mut order: Vec<(i32, usize)> = sources
            .iter()
            .copied()
            .filter(|(_, i)| *i < layout.shards())
            .collect();
        // Data shards first; ours first among holders of one shard.
        order.sort_by_key(|(o, i)| (*i, *o != self.me));
        // Each source is asked at most once; one passed over while its
        // shard was being read stays for when that read fails.
        let mut tried = vec![false; order.len()];
        let mut parts: Vec<Option<Bytes>> = vec![None; layout.shards()];
        let mut asked = vec![false; layout.shards()];
        let mut first: Option<ShardChunks> = None;
        let (mut have, mut absent) = (0, 0);
        let mut damaged = BTreeSet::new();
        let mut errors = Vec::new();
        let mut tasks = tokio::task::JoinSet::new();
        let hedge = self.ctx.cfg.ec_read_hedge;
        let mut ask = |tasks: &mut tokio::task::JoinSet<_>, asked: &mut Vec<bool>| {
            // The next source of a shard not asked yet.
            let at = (0..order.len()).find(|n| !tried[*n] && !asked[order[*n].1])?;
            tried[at] = true;
            let (o, i) = order[at];
            asked[i] = true;
            let me = Arc::clone(self);
            let (key, run) = (key.clone(), run.clone());
            tasks.spawn(async move { (o, i, me.read_one(o, i, key, run, want_attrs).await) });
            Some(())
        };
        while have < k {
            while have + tasks.len() < k && ask(&mut tasks, &mut asked).is_some() {}
            let done = if hedge.is_zero() {
                tasks.join_next().await
            } else {
                match tokio::time::timeout(hedge, tasks.join_next()).await {
                    Ok(done) => done,
                    Err(_) => {
                        if ask(&mut tasks, &mut asked).is_some() {
                            tracing::debug!(pg = %self.pg, "a shard is slow: asking another");
                        }
                        continue;
                    }
                }
            };
            let Some(done) = done else {
                break;
            };
            let (o, i, r) = match done {
                Ok(d) => d,
                Err(e) => {
                    errors.push(format!("a read task failed: {e}"));
                    continue;
                }
            };
            match r {
                Ok(c) => {
                    let version = |c: &ShardChunks| {
                        c.attrs
                            .iter()
                            .find(|(n, _)| n == crate::object::META_XATTR)
                            .map(|(_, v)| v.clone())
                    };
                    if let Some(f) = &first
                        && (f.size != c.size
                            || f.data.len() != c.data.len()
                            || version(f) != version(&c))
                    {
                        errors.push(format!(
                            "shard {i} on osd.{o} holds another version ({} bytes, not {})",
                            c.size, f.size
                        ));
                        asked[i] = false;
                        continue;
                    }
                    parts[i] = Some(c.data.clone());
                    have += 1;
                    if first.is_none() {
                        first = Some(c);
                    }
                }
                Err(e) => {
                    if let ShardFailure::Damaged(_) = e {
                        damaged.insert(o);
                    }
                    if e == ShardFailure::Absent {
                        absent += 1;
                    } else {
                        tracing::warn!(pg = %self.pg, shard = i, osd = o, "reading around a shard: {e}");
                    }
                    errors.push(format!("shard {i} on osd.{o}: {e}"));
                    // Another holder of the same shard may serve it.
                    asked[i] = false;
                }
            }
        }
        match first {
            Some(f) if have >= k => Ok((parts, f, damaged)),
            _ => Err(ReadFailure {
                absent: have == 0 && absent >= k && absent == errors.len(),
                absent_k: absent >= k,
                why: format!(
                    "{have} of the {k} shards needed could be read: {}",
                    errors.join("; ")
                ),
            }),
        }
    }

    /// The object bytes of `stripes`, decoded from `k` shards (never
    /// those of the `lacking` members, which hold an older version).
    pub async fn gather(
        self: Arc<Self>,
        key: &ObjectKey,
        stripes: &BTreeSet<u64>,
        lacking: &[i32],
    ) -> Result<Stripes, String> {
        let width = self.ec.layout().width() as usize;
        let mut all = self.acting_holders();
        all.retain(|(o, _)| !lacking.contains(o));
        let mut out = Stripes::new(width as u64);
        for run in runs(stripes) {
            let (parts, _, damaged) = self
                .read_k(key, run.clone(), &all, false)
                .await
                .map_err(|e| e.why)?;
            out.damaged.extend(damaged);
            let bytes = self.ec.codec.decode(parts).map_err(|e| e.to_string())?;
            if bytes.len() != width * (run.end - run.start) as usize {
                return Err(format!("stripes {run:?} of {key} are past its end"));
            }
            out.insert_run(run.start, Bytes::from(bytes));
        }
        Ok(out)
    }

    /// Rebuilds `key` on `targets` (members lacking it) from `k` of the
    /// `sources` (members holding its authoritative version), see
    /// [`ShardReader::rebuild_one`]. A head's snapshot family comes first,
    /// as in replication: the changes that made its clones and snapdir are
    /// logged under the head alone, and installing the head ends its
    /// recovery on the member.
    pub async fn rebuild(
        self: Arc<Self>,
        key: &ObjectKey,
        targets: &[i32],
        sources: &[(i32, u8)],
        expect: Option<bool>,
        fence: &crate::recovery::CopyFence,
        backend: &Arc<dyn PgBackend>,
    ) -> (BTreeSet<i32>, Option<String>) {
        if key.snap == ObjectKey::HEAD
            && let Err(e) = Arc::clone(&self)
                .rebuild_family(key, targets, sources, fence, backend)
                .await
        {
            return (
                BTreeSet::new(),
                Some(format!("the snapshots of {key}: {e}")),
            );
        }
        self.rebuild_one(key, targets, sources, expect, fence, backend)
            .await
    }

    /// The clones and snapdir of `head` in the shard `osd` holds in this
    /// interval (ours from the store).
    async fn family_on(
        &self,
        osd: i32,
        head: &ObjectKey,
        c: crate::recovery::Copier<'_>,
    ) -> Result<Vec<ObjectKey>, String> {
        if osd == self.me {
            let store = self.ctx.store.as_ref();
            return shoal_net::runtime::blocking(|| {
                crate::recovery::local_family(store, self.coll, head)
            })
            .map_err(|e| e.to_string());
        }
        let conn = self.conn(osd).await?;
        crate::recovery::remote_family(c, &conn, head).await
    }

    /// The clones and snapdir `head` has in its authoritative version:
    /// from the snapset the head's xattrs hold, or its snapdir's once the
    /// head is removed (only the metadata of `k` shards is read).
    async fn family_of(
        self: &Arc<Self>,
        head: &ObjectKey,
        sources: &[(i32, usize)],
    ) -> Result<Vec<ObjectKey>, String> {
        let snapdir = head.clone_for(crate::object::SNAPDIR);
        for key in [head, &snapdir] {
            let meta = match self.read_k(key, 0..0, sources, true).await {
                Ok((_, meta, _)) => meta,
                Err(e) if e.absent => continue,
                Err(e) => return Err(format!("reading the snapset of {key}: {}", e.why)),
            };
            let raw = meta
                .attrs
                .iter()
                .find(|(n, _)| n == crate::object::SNAPSET_XATTR)
                .map(|(_, v)| v.as_slice());
            let set = match raw {
                Some(b) => crate::object::SnapSet::decode(b)
                    .ok_or_else(|| format!("the snapset of {key} is damaged"))?,
                None => crate::object::SnapSet::default(),
            };
            let mut family: Vec<ObjectKey> =
                set.clones.iter().map(|c| head.clone_for(c.id)).collect();
            if key == &snapdir {
                family.push(snapdir.clone());
            }
            family.sort();
            return Ok(family);
        }
        Ok(Vec::new())
    }

    /// Rebuilds on each target the clones and snapdir of `head` it lacks
    /// (a snapdir always: trims rewrite it), and removes those the
    /// authoritative version no longer has.
    async fn rebuild_family(
        self: Arc<Self>,
        head: &ObjectKey,
        targets: &[i32],
        sources: &[(i32, u8)],
        fence: &crate::recovery::CopyFence,
        backend: &Arc<dyn PgBackend>,
    ) -> Result<(), String> {
        let c = crate::recovery::Copier {
            ctx: &self.ctx,
            backend,
            pg: self.pg,
            epoch: self.epoch,
            fence,
        };
        let by_shard: Vec<(i32, usize)> =
            sources.iter().map(|(o, s)| (*o, usize::from(*s))).collect();
        let theirs = self.family_of(head, &by_shard).await?;
        let mut want: BTreeMap<&ObjectKey, Vec<i32>> = BTreeMap::new();
        let mut extra: BTreeMap<ObjectKey, Vec<i32>> = BTreeMap::new();
        for &t in targets {
            let held = self.family_on(t, head, c).await?;
            for k in theirs.iter().filter(|k| crate::recovery::stale(k, &held)) {
                want.entry(k).or_default().push(t);
            }
            for k in held.into_iter().filter(|k| !theirs.contains(k)) {
                extra.entry(k).or_default().push(t);
            }
        }
        tracing::debug!(pg = %self.pg, object = %head, ?theirs, ?want, ?extra, "rebuild family");
        let steps = want
            .into_iter()
            .map(|(k, t)| (k.clone(), t, Some(true)))
            .chain(extra.into_iter().map(|(k, t)| (k, t, Some(false))));
        for (k, t, expect) in steps {
            let (_, e) = Arc::clone(&self)
                .rebuild_one(&k, &t, sources, expect, fence, backend)
                .await;
            if let Some(e) = e {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Rebuilds `key` on `targets` from `k` of the `sources`: every shard
    /// is read whole and decoded, and each target gets its own shard,
    /// installed here or pushed. `expect`: whether the log says the object
    /// exists (false: it is removed from the targets).
    async fn rebuild_one(
        self: Arc<Self>,
        key: &ObjectKey,
        targets: &[i32],
        sources: &[(i32, u8)],
        expect: Option<bool>,
        fence: &crate::recovery::CopyFence,
        backend: &Arc<dyn PgBackend>,
    ) -> (BTreeSet<i32>, Option<String>) {
        let mut done = BTreeSet::new();
        let layout = self.ec.layout();
        let mut push = PgPush {
            pool: self.pg.pool,
            pg_seed: self.pg.seed,
            epoch: self.epoch,
            hash: key.hash,
            name: key.name.clone(),
            snap: crate::object::wire_snap(key),
            exists: expect != Some(false),
            ..PgPush::default()
        };
        let mut shards: Vec<Option<Vec<u8>>> = vec![None; layout.shards()];
        if push.exists {
            let sources: Vec<(i32, usize)> =
                sources.iter().map(|(o, s)| (*o, usize::from(*s))).collect();
            match self.read_k(key, 0..u64::MAX, &sources, true).await {
                Ok((parts, meta, _)) => {
                    let mut parts: Vec<Option<Vec<u8>>> =
                        parts.into_iter().map(|p| p.map(|b| b.to_vec())).collect();
                    if let Err(e) = self.ec.codec.rebuild(&mut parts) {
                        return (done, Some(e.to_string()));
                    }
                    shards = parts;
                    push.object_size = meta.size;
                    for (n, v) in meta.attrs {
                        push.attrs.push(n);
                        push.attr_values.push(v);
                    }
                }
                // A backfill lists the objects a member held before
                // activation undid its divergent changes: one such
                // change's creation leaves no object, and at least k
                // holders of the authoritative version say so.
                Err(e) if e.absent && expect.is_none() => push.exists = false,
                // A clone or snapdir `k` holders of its head's
                // authoritative version lack was trimmed: a stray's stale
                // copy of it goes too.
                Err(e) if e.absent_k && key.snap != ObjectKey::HEAD && expect.is_none() => {
                    push.exists = false;
                }
                Err(e) => return (done, Some(format!("{} (sources: {sources:?})", e.why))),
            }
        }
        for &t in targets {
            let Some(i) = self.ec.shard_of(t).map(usize::from) else {
                return (done, Some(format!("osd.{t} holds no shard of the PG")));
            };
            let data = Bytes::from(shards.get_mut(i).and_then(Option::take).unwrap_or_default());
            let r = if t == self.me {
                self.install_here(&push, data, fence, backend).await
            } else {
                self.push_to(t, &push, data).await
            };
            if let Err(e) = r {
                return (done, Some(format!("rebuilding shard {i} on osd.{t}: {e}")));
            }
            done.insert(t);
            crate::ctx::OsdCounters::add(&self.ctx.counters.recovered, 1);
        }
        (done, None)
    }

    /// A connection to member `osd`: the PG's, or a new one (in the
    /// reader's task: the PG never waits for a connect).
    async fn conn(&self, osd: i32) -> Result<shoal_net::Connection, String> {
        match self.conns.get(&osd) {
            Some(c) if !c.is_closed() => Ok(c.clone()),
            _ => self.ctx.peer(&self.map, osd).await,
        }
    }

    /// Deep scrub: reads every shard of `key` whole and recomputes the
    /// coding chunks from the data chunks.
    pub async fn verify(self: &Arc<Self>, key: &ObjectKey) -> Result<bool, String> {
        let holders = self.acting_holders();
        if holders.len() < self.ec.layout().shards() {
            // A shard no member holds now: recovery's, not scrub's.
            return Ok(true);
        }
        let mut shards = Vec::with_capacity(holders.len());
        for (o, i) in holders {
            let c = Arc::clone(self)
                .read_one(o, i, key.clone(), 0..u64::MAX, false)
                .await
                .map_err(|e| e.to_string())?;
            shards.push(c.data.to_vec());
        }
        self.ec.codec.verify(&shards).map_err(|e| e.to_string())
    }

    async fn install_here(
        &self,
        push: &PgPush,
        data: Bytes,
        fence: &crate::recovery::CopyFence,
        backend: &Arc<dyn PgBackend>,
    ) -> Result<(), String> {
        // It waits for its commit: off the shard's thread on a daemon.
        let (store, backend, fence) = (
            Arc::clone(&self.ctx.store),
            Arc::clone(backend),
            fence.clone(),
        );
        let (coll, push) = (self.coll, push.clone());
        shoal_net::runtime::offload_try("installing a shard", move || {
            let t = backend.install_step(store.as_ref(), coll, &push, data)?;
            let _held = fence.hold()?;
            store.apply_transaction(t).map_err(|e| e.to_string())
        })
        .await
    }

    async fn push_to(&self, osd: i32, push: &PgPush, data: Bytes) -> Result<(), String> {
        let conn = self.conn(osd).await?;
        let reply = conn
            .request_with_timeout(push.clone(), data, self.ctx.cfg.peer_timeout)
            .await
            .map_err(|e| e.to_string())?;
        match reply.msg {
            shoal_proto::Message::RepOpReply(r) if r.code == 0 => Ok(()),
            shoal_proto::Message::RepOpReply(r) => Err(r.message),
            other => Err(format!("answered {:?}", other.msg_type())),
        }
    }
}

impl super::Pg {
    /// [`super::Pg::ec_reader`] for scrub.
    pub(super) async fn ec_reader_for(&mut self) -> Option<Arc<ShardReader>> {
        self.ec_reader().await
    }

    /// A reader of this interval's shards, with the PG's open connections.
    async fn ec_reader(&mut self) -> Option<Arc<ShardReader>> {
        let ec = self.core.ec.clone()?;
        let map = self.core.map.clone()?;
        // Only the connections already open: a member that died may take
        // a connect timeout to refuse, which the reader's task waits out.
        let conns = self
            .conns
            .iter()
            .filter(|(_, c)| !c.is_closed())
            .map(|(o, c)| (*o, c.clone()))
            .collect();
        Some(Arc::new(ShardReader {
            ctx: Arc::clone(&self.ctx),
            ec,
            me: self.core.whoami(),
            coll: self.core.coll,
            pg: self.core.id,
            epoch: self.core.epoch(),
            map,
            conns,
            strays: self.core.strays.clone(),
        }))
    }

    /// Gathers and decodes `stripes` of `key` in a task;
    /// [`super::PgEvent::EcGathered`] follows.
    pub(super) async fn ec_gather(
        &mut self,
        key: ObjectKey,
        at: ObjectKey,
        stripes: BTreeSet<u64>,
        lacking: Vec<i32>,
        interval_start: u32,
    ) {
        let events = self.events.clone();
        let reader = self.ec_reader().await;
        tokio::spawn(async move {
            let result = match reader {
                Some(r) => r.gather(&at, &stripes, &lacking).await,
                None => Err("the PG is not erasure coded".to_string()),
            };
            let _ = events.send(super::PgEvent::EcGathered {
                key,
                interval_start,
                result,
            });
        });
    }

    /// Rebuilds one object's shards on the members lacking it, in a task;
    /// [`super::PgEvent::ObjectRecovered`] follows.
    pub(super) async fn ec_recover_object(&mut self, job: super::recover::ObjectJob) {
        let me = self.core.whoami();
        let targets: Vec<i32> = job
            .push_to
            .iter()
            .copied()
            .chain(job.pull_from.map(|_| me))
            .collect();
        let reader = self.ec_reader().await;
        let fence = crate::recovery::CopyFence::at(&self.copy_fence);
        let backend = Arc::clone(&self.core.backend);
        let slots = Arc::clone(&self.ctx.recovery_slots);
        let events = self.events.clone();
        tokio::spawn(async move {
            let _permit = match job.throttled {
                true => slots.acquire_owned().await.ok(),
                false => None,
            };
            let (done, error) = match reader {
                Some(r) => {
                    r.rebuild(
                        &job.key,
                        &targets,
                        &job.sources,
                        job.expect,
                        &fence,
                        &backend,
                    )
                    .await
                }
                None => (BTreeSet::new(), Some("the PG is not erasure coded".into())),
            };
            let _ = events.send(super::PgEvent::ObjectRecovered {
                generation: job.generation,
                results: vec![crate::recovery::Recovered {
                    key: job.key,
                    done,
                    error,
                }],
                job_done: true,
            });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::pg_meta_key;
    use shoal_objectstore::MemStore;

    /// A rebuilt shard (or its removal) takes the object out of the
    /// member's persisted missing set in the same transaction: a restart
    /// must not find it missing again (the simulation found a restarted
    /// member lacking objects at a version older than its log, which no
    /// recovery then rebuilt).
    #[test]
    fn an_installed_shard_leaves_the_persisted_missing_set() {
        let store = MemStore::new(1 << 26);
        let coll = CollectionId::shard(1, 0, 1);
        let (a, b) = (ObjectKey::new(1, "a"), ObjectKey::new(2, "b"));
        let mut missing = MissingSet::default();
        let mut t = Transaction::new();
        t.create_collection(coll);
        t.touch(coll, pg_meta_key());
        let need = crate::log::Version { epoch: 3, v: 7 };
        missing.replace(
            MissingSet::from_map([(a.clone(), need), (b.clone(), need)].into()),
            coll,
            &mut t,
        );
        store.apply_transaction(t).unwrap();
        let backend = Erasure {
            codec: Arc::new(Codec::new(StripeLayout::new(2, 1, 4096)).unwrap()),
        };
        let push = |key: &ObjectKey, exists: bool| PgPush {
            hash: key.hash,
            name: key.name.clone(),
            exists,
            object_size: 6000,
            ..PgPush::default()
        };
        let shard = Bytes::from(vec![7u8; 4096]);
        let t = backend
            .install_step(&store, coll, &push(&a, true), shard)
            .unwrap();
        store.apply_transaction(t).unwrap();
        let t = backend
            .install_step(&store, coll, &push(&b, false), Bytes::new())
            .unwrap();
        store.apply_transaction(t).unwrap();
        let omap = store
            .omap_range(
                &coll,
                &pg_meta_key(),
                Bound::Unbounded,
                Bound::Unbounded,
                1000,
            )
            .unwrap();
        let left = MissingSet::load(&omap.into_iter().collect()).unwrap();
        assert!(left.is_empty(), "{left:?}");
        assert_eq!(shard::logical_size(&store, &coll, &a).unwrap(), Some(6000));
    }
}

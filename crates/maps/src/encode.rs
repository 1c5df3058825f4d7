//! Shoal's versioned binary encodings of [`OsdMap`] and [`Incremental`].
//!
//! Both start with a 4-byte magic (`SOSM`, `SOSI`) and a format version
//! (u8, now 1); integers are little-endian and fixed width; every list is
//! length-prefixed and its length is checked against the bytes left; the
//! CRUSH map is nested as length-prefixed `shoal-crush` encoding. Decoding
//! never panics: malformed input is a [`MapError::Decode`]; a map above
//! the limits that keep mapping bounded (`max_osd` at most
//! [`crate::MAX_OSD_LIMIT`], pools of at most [`crate::MAX_POOL_SIZE`]
//! members and [`crate::MAX_PG_NUM`] PGs, CRUSH as in
//! [`shoal_crush::limits`]) is a [`MapError::Limit`] or a
//! [`MapError::Crush`] holding a `CrushError::Limit`.

use std::collections::BTreeMap;

use shoal_crush::CrushMap;
use shoal_crush::codec::{Reader, Writer};
use shoal_types::Epoch;

use crate::error::{MapError, Result};
use crate::incremental::Incremental;
use crate::osdmap::{MAX_OSD_LIMIT, OsdInfo, OsdMap, max_osd_limit};
use crate::pg::PgId;
use crate::pool::{Pool, PoolKind};

const MAP_MAGIC: &[u8; 4] = b"SOSM";
const INC_MAGIC: &[u8; 4] = b"SOSI";
const VERSION: u8 = 1;

fn de(e: shoal_crush::CrushError) -> MapError {
    MapError::Decode(e.to_string())
}

/// A nested CRUSH map's error: limits keep their type, the rest is `Decode`.
fn de_crush(e: shoal_crush::CrushError) -> MapError {
    match e {
        e @ shoal_crush::CrushError::Limit { .. } => MapError::Crush(e),
        e => de(e),
    }
}

fn header(w: &mut Writer, magic: &[u8; 4]) {
    for b in magic {
        w.u8(*b);
    }
    w.u8(VERSION);
}

fn check_header(r: &mut Reader<'_>, magic: &[u8; 4]) -> Result<()> {
    for b in magic {
        if r.u8().map_err(de)? != *b {
            return Err(MapError::Decode("bad magic".into()));
        }
    }
    let v = r.u8().map_err(de)?;
    if v != VERSION {
        return Err(MapError::Decode(format!("unsupported version {v}")));
    }
    Ok(())
}

fn put_pool(w: &mut Writer, p: &Pool) {
    w.u64(p.id);
    w.str(&p.name);
    // Pools without snapshots keep the encodings they had before snapshots,
    // and pools without a quota those they had before quotas.
    let snaps = p.snap_seq != 0 || !p.removed_snaps.is_empty();
    let quota = p.quota_max_bytes != 0 || p.quota_max_objects != 0;
    let with_quota = if quota { POOL_QUOTA } else { 0 }
        | if p.autoscale.is_set() {
            POOL_AUTOSCALE
        } else {
            0
        };
    match p.kind {
        PoolKind::Replicated => {
            w.u8(if snaps { POOL_REPLICATED_SNAPS } else { 1 } | with_quota);
            w.u32(0);
            w.u32(0);
        }
        PoolKind::Erasure { k, m } => {
            w.u8(if snaps {
                POOL_ERASURE_SNAPS
            } else {
                POOL_ERASURE
            } | with_quota);
            w.u32(k);
            w.u32(m);
        }
    }
    for v in [p.size, p.min_size, p.pg_num, p.pgp_num, p.crush_rule] {
        w.u32(v);
    }
    w.u64(p.flags);
    if let PoolKind::Erasure { .. } = p.kind {
        w.u32(p.stripe_width);
        w.str(&p.ec_profile);
    }
    if snaps {
        w.u64(p.snap_seq);
        w.u32(u32::try_from(p.removed_snaps.len()).unwrap_or(u32::MAX));
        for (first, count) in &p.removed_snaps {
            w.u64(*first);
            w.u64(*count);
        }
    }
    if quota {
        w.u64(p.quota_max_bytes);
        w.u64(p.quota_max_objects);
    }
    if p.autoscale.is_set() {
        let a = &p.autoscale;
        w.u32(a.pg_num_min);
        w.u32(a.pg_num_max);
        w.u64(a.target_size_bytes);
        w.u64(a.target_size_ratio_micro);
    }
}

/// Added to a pool's type code when the operator's autoscaler options
/// (pg_num_min, pg_num_max, target_size_bytes, target_size_ratio) follow
/// last, after any quota. Pools without them keep their encoding.
const POOL_AUTOSCALE: u8 = 0x20;

/// Added to a pool's type code when its quotas (max bytes, max objects)
/// follow last.
const POOL_QUOTA: u8 = 0x40;

/// Pool type codes with self-managed snapshots: 5 is 1 and 6 is 4, each
/// followed by the snapshot sequence and the removed snapshots' runs.
const POOL_REPLICATED_SNAPS: u8 = 5;
const POOL_ERASURE_SNAPS: u8 = 6;

/// Pool type codes: Ceph's replicated (1) and erasure (3); 4 is an erasure
/// pool followed by its stripe width and profile name (3 is read as the
/// default stripe unit and no profile).
const POOL_ERASURE: u8 = 4;

fn get_pool(r: &mut Reader<'_>) -> Result<Pool> {
    let id = r.u64().map_err(de)?;
    let name = r.str().map_err(de)?;
    let (t, k, m) = (
        r.u8().map_err(de)?,
        r.u32().map_err(de)?,
        r.u32().map_err(de)?,
    );
    let has_quota = t & POOL_QUOTA != 0;
    let has_autoscale = t & POOL_AUTOSCALE != 0;
    let t = t & !(POOL_QUOTA | POOL_AUTOSCALE);
    let kind = match t {
        1 | POOL_REPLICATED_SNAPS => PoolKind::Replicated,
        3 | POOL_ERASURE | POOL_ERASURE_SNAPS => PoolKind::Erasure { k, m },
        _ => return Err(MapError::Decode(format!("pool type {t}"))),
    };
    let mut v = [0u32; 5];
    for x in &mut v {
        *x = r.u32().map_err(de)?;
    }
    let flags = r.u64().map_err(de)?;
    let [size, min_size, pg_num, pgp_num, crush_rule] = v;
    let (stripe_width, ec_profile) = match t {
        POOL_ERASURE | POOL_ERASURE_SNAPS => (r.u32().map_err(de)?, r.str().map_err(de)?),
        3 => (
            k.saturating_mul(crate::pool::DEFAULT_STRIPE_UNIT),
            String::new(),
        ),
        _ => (0, String::new()),
    };
    let (mut snap_seq, mut removed_snaps) = (0, Vec::new());
    if matches!(t, POOL_REPLICATED_SNAPS | POOL_ERASURE_SNAPS) {
        snap_seq = r.u64().map_err(de)?;
        let n = r.u32().map_err(de)? as usize;
        if n > crate::pool::MAX_REMOVED_SNAP_RUNS {
            return Err(MapError::Limit {
                what: "removed snapshot runs",
                value: n as u64,
                max: crate::pool::MAX_REMOVED_SNAP_RUNS as u64,
            });
        }
        for _ in 0..n {
            removed_snaps.push((r.u64().map_err(de)?, r.u64().map_err(de)?));
        }
    }
    let (quota_max_bytes, quota_max_objects) = match has_quota {
        true => (r.u64().map_err(de)?, r.u64().map_err(de)?),
        false => (0, 0),
    };
    let autoscale = if has_autoscale {
        crate::pool::AutoscaleOptions {
            pg_num_min: r.u32().map_err(de)?,
            pg_num_max: r.u32().map_err(de)?,
            target_size_bytes: r.u64().map_err(de)?,
            target_size_ratio_micro: r.u64().map_err(de)?,
        }
    } else {
        crate::pool::AutoscaleOptions::default()
    };
    let p = Pool {
        id,
        name,
        kind,
        size,
        min_size,
        pg_num,
        pgp_num,
        crush_rule,
        flags,
        stripe_width,
        ec_profile,
        snap_seq,
        removed_snaps,
        quota_max_bytes,
        quota_max_objects,
        autoscale,
    };
    p.validate().map_err(|e| match e {
        e @ MapError::Limit { .. } => e,
        e => MapError::Decode(e.to_string()),
    })?;
    Ok(p)
}

fn put_pg(w: &mut Writer, pg: &PgId) {
    w.u64(pg.pool);
    w.u32(pg.seed);
}

fn get_pg(r: &mut Reader<'_>) -> Result<PgId> {
    Ok(PgId {
        pool: r.u64().map_err(de)?,
        seed: r.u32().map_err(de)?,
    })
}

fn put_osds(w: &mut Writer, v: &[i32]) {
    w.len(v.len());
    for o in v {
        w.i32(*o);
    }
}

fn get_osds(r: &mut Reader<'_>) -> Result<Vec<i32>> {
    let n = r.count(4).map_err(de)?;
    (0..n).map(|_| r.i32().map_err(de)).collect()
}

fn put_pairs(w: &mut Writer, v: &[(i32, i32)]) {
    w.len(v.len());
    for (a, b) in v {
        w.i32(*a);
        w.i32(*b);
    }
}

fn get_pairs(r: &mut Reader<'_>) -> Result<Vec<(i32, i32)>> {
    let n = r.count(8).map_err(de)?;
    (0..n)
        .map(|_| Ok((r.i32().map_err(de)?, r.i32().map_err(de)?)))
        .collect()
}

/// Tagged sections after a map's or an incremental's original fields.
const TAG_FLAGS: u8 = 1;
const TAG_UP_THRU: u8 = 2;

fn put_epochs(w: &mut Writer, m: &BTreeMap<i32, u32>) {
    w.len(m.len());
    for (id, e) in m {
        w.i32(*id);
        w.u32(*e);
    }
}

fn get_epochs(r: &mut Reader<'_>) -> Result<BTreeMap<i32, u32>> {
    let mut m = BTreeMap::new();
    for _ in 0..r.count(8).map_err(de)? {
        let id = r.i32().map_err(de)?;
        m.insert(id, r.u32().map_err(de)?);
    }
    Ok(m)
}

fn put_fsid(w: &mut Writer, f: &[u8; 16]) {
    for b in f {
        w.u8(*b);
    }
}

fn get_fsid(r: &mut Reader<'_>) -> Result<[u8; 16]> {
    let mut f = [0u8; 16];
    for b in &mut f {
        *b = r.u8().map_err(de)?;
    }
    Ok(f)
}

impl OsdMap {
    /// Encodes the map.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        header(&mut w, MAP_MAGIC);
        put_fsid(&mut w, &self.fsid);
        w.u32(self.epoch.0);
        w.len(self.osds.len());
        for o in &self.osds {
            w.u8(u8::from(o.exists) | (u8::from(o.up) << 1));
            w.u32(o.weight);
            w.u32(o.primary_affinity);
            w.str(o.addr.as_deref().unwrap_or(""));
        }
        w.len(self.pools.len());
        for p in self.pools.values() {
            put_pool(&mut w, p);
        }
        w.len(self.pg_temp.len());
        for (pg, v) in &self.pg_temp {
            put_pg(&mut w, pg);
            put_osds(&mut w, v);
        }
        w.len(self.primary_temp.len());
        for (pg, p) in &self.primary_temp {
            put_pg(&mut w, pg);
            w.i32(*p);
        }
        w.len(self.pg_upmap_items.len());
        for (pg, v) in &self.pg_upmap_items {
            put_pg(&mut w, pg);
            put_pairs(&mut w, v);
        }
        w.bytes(&self.crush.encode());
        // Fields added later follow as tagged sections, each written only
        // when not empty, so maps written before still decode.
        if self.flags != 0 {
            w.u8(TAG_FLAGS);
            w.u32(self.flags);
        }
        if !self.up_thru.is_empty() {
            w.u8(TAG_UP_THRU);
            put_epochs(&mut w, &self.up_thru);
        }
        w.finish()
    }

    /// Decodes [`OsdMap::encode`] output.
    pub fn decode(buf: &[u8]) -> Result<OsdMap> {
        let mut r = Reader::new(buf);
        check_header(&mut r, MAP_MAGIC)?;
        let fsid = get_fsid(&mut r)?;
        let epoch = Epoch(r.u32().map_err(de)?);
        let n = r.count(13).map_err(de)?;
        if n > MAX_OSD_LIMIT as usize {
            return Err(max_osd_limit(n as u64));
        }
        let mut osds = Vec::with_capacity(n);
        for _ in 0..n {
            let flags = r.u8().map_err(de)?;
            let weight = r.u32().map_err(de)?;
            let primary_affinity = r.u32().map_err(de)?;
            let addr = r.str().map_err(de)?;
            osds.push(OsdInfo {
                exists: flags & 1 != 0,
                up: flags & 2 != 0,
                weight,
                primary_affinity,
                addr: (!addr.is_empty()).then_some(addr),
            });
        }
        let mut pools = BTreeMap::new();
        for _ in 0..r.count(40).map_err(de)? {
            let p = get_pool(&mut r)?;
            pools.insert(p.id, p);
        }
        let mut pg_temp = BTreeMap::new();
        for _ in 0..r.count(16).map_err(de)? {
            pg_temp.insert(get_pg(&mut r)?, get_osds(&mut r)?);
        }
        let mut primary_temp = BTreeMap::new();
        for _ in 0..r.count(16).map_err(de)? {
            primary_temp.insert(get_pg(&mut r)?, r.i32().map_err(de)?);
        }
        let mut pg_upmap_items = BTreeMap::new();
        for _ in 0..r.count(16).map_err(de)? {
            pg_upmap_items.insert(get_pg(&mut r)?, get_pairs(&mut r)?);
        }
        let crush = CrushMap::decode(r.bytes().map_err(de)?).map_err(de_crush)?;
        let (mut flags, mut up_thru) = (0, BTreeMap::new());
        while r.remaining() != 0 {
            match r.u8().map_err(de)? {
                TAG_FLAGS => flags = r.u32().map_err(de)?,
                TAG_UP_THRU => up_thru = get_epochs(&mut r)?,
                t => return Err(MapError::Decode(format!("unknown section {t}"))),
            }
        }
        Ok(OsdMap {
            fsid,
            epoch,
            osds,
            pools,
            pg_temp,
            primary_temp,
            pg_upmap_items,
            crush,
            flags,
            up_thru,
        })
    }
}

impl Incremental {
    /// Encodes the incremental.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        header(&mut w, INC_MAGIC);
        put_fsid(&mut w, &self.fsid);
        w.u32(self.epoch.0);
        match self.new_max_osd {
            Some(n) => {
                w.u8(1);
                w.u32(n);
            }
            None => w.u8(0),
        }
        match &self.new_crush {
            Some(c) => {
                w.u8(1);
                w.bytes(&c.encode());
            }
            None => w.u8(0),
        }
        w.len(self.new_pools.len());
        for p in self.new_pools.values() {
            put_pool(&mut w, p);
        }
        w.len(self.old_pools.len());
        for p in &self.old_pools {
            w.u64(*p);
        }
        for set in [&self.new_osds, &self.removed_osds, &self.new_down] {
            put_osds(&mut w, &set.iter().copied().collect::<Vec<_>>());
        }
        w.len(self.new_up.len());
        for (o, a) in &self.new_up {
            w.i32(*o);
            w.str(a);
        }
        for m in [&self.new_weight, &self.new_primary_affinity] {
            w.len(m.len());
            for (o, v) in m {
                w.i32(*o);
                w.u32(*v);
            }
        }
        w.len(self.new_pg_temp.len());
        for (pg, v) in &self.new_pg_temp {
            put_pg(&mut w, pg);
            put_osds(&mut w, v);
        }
        w.len(self.new_primary_temp.len());
        for (pg, p) in &self.new_primary_temp {
            put_pg(&mut w, pg);
            w.i32(*p);
        }
        w.len(self.new_pg_upmap_items.len());
        for (pg, v) in &self.new_pg_upmap_items {
            put_pg(&mut w, pg);
            put_pairs(&mut w, v);
        }
        w.len(self.old_pg_upmap_items.len());
        for pg in &self.old_pg_upmap_items {
            put_pg(&mut w, pg);
        }
        // Fields added later, as tagged sections (see OsdMap::encode).
        if let Some(f) = self.new_flags {
            w.u8(TAG_FLAGS);
            w.u32(f);
        }
        if !self.new_up_thru.is_empty() {
            w.u8(TAG_UP_THRU);
            put_epochs(&mut w, &self.new_up_thru);
        }
        w.finish()
    }

    /// Decodes [`Incremental::encode`] output.
    pub fn decode(buf: &[u8]) -> Result<Incremental> {
        let mut r = Reader::new(buf);
        check_header(&mut r, INC_MAGIC)?;
        let mut inc = Incremental {
            fsid: get_fsid(&mut r)?,
            epoch: Epoch(r.u32().map_err(de)?),
            ..Incremental::default()
        };
        if r.u8().map_err(de)? != 0 {
            let n = r.u32().map_err(de)?;
            if n > MAX_OSD_LIMIT {
                return Err(max_osd_limit(u64::from(n)));
            }
            inc.new_max_osd = Some(n);
        }
        if r.u8().map_err(de)? != 0 {
            inc.new_crush = Some(CrushMap::decode(r.bytes().map_err(de)?).map_err(de_crush)?);
        }
        for _ in 0..r.count(40).map_err(de)? {
            let p = get_pool(&mut r)?;
            inc.new_pools.insert(p.id, p);
        }
        for _ in 0..r.count(8).map_err(de)? {
            inc.old_pools.insert(r.u64().map_err(de)?);
        }
        inc.new_osds = get_osds(&mut r)?.into_iter().collect();
        inc.removed_osds = get_osds(&mut r)?.into_iter().collect();
        inc.new_down = get_osds(&mut r)?.into_iter().collect();
        for _ in 0..r.count(8).map_err(de)? {
            let o = r.i32().map_err(de)?;
            inc.new_up.insert(o, r.str().map_err(de)?);
        }
        for m in [&mut inc.new_weight, &mut inc.new_primary_affinity] {
            for _ in 0..r.count(8).map_err(de)? {
                let o = r.i32().map_err(de)?;
                m.insert(o, r.u32().map_err(de)?);
            }
        }
        for _ in 0..r.count(16).map_err(de)? {
            inc.new_pg_temp.insert(get_pg(&mut r)?, get_osds(&mut r)?);
        }
        for _ in 0..r.count(16).map_err(de)? {
            inc.new_primary_temp
                .insert(get_pg(&mut r)?, r.i32().map_err(de)?);
        }
        for _ in 0..r.count(16).map_err(de)? {
            inc.new_pg_upmap_items
                .insert(get_pg(&mut r)?, get_pairs(&mut r)?);
        }
        for _ in 0..r.count(12).map_err(de)? {
            inc.old_pg_upmap_items.insert(get_pg(&mut r)?);
        }
        while r.remaining() != 0 {
            match r.u8().map_err(de)? {
                TAG_FLAGS => inc.new_flags = Some(r.u32().map_err(de)?),
                TAG_UP_THRU => inc.new_up_thru = get_epochs(&mut r)?,
                t => return Err(MapError::Decode(format!("unknown section {t}"))),
            }
        }
        Ok(inc)
    }
}

const PAST_MAGIC: &[u8; 4] = b"SOPI";

/// A PG's past intervals as the monitors answer peering: the first epoch
/// their history covers and the intervals from it on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastIntervals {
    /// The first epoch the intervals cover (the history the monitors still
    /// keep may start after the epoch asked for).
    pub from: u32,
    /// The intervals, oldest first.
    pub intervals: Vec<crate::PastInterval>,
}

impl PastIntervals {
    /// Encodes the intervals (`SOPI`, version 1).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        header(&mut w, PAST_MAGIC);
        w.u32(self.from);
        w.len(self.intervals.len());
        for i in &self.intervals {
            w.u32(i.first);
            w.u32(i.last);
            put_osds(&mut w, &i.up);
            put_osds(&mut w, &i.acting);
            w.i32(i.primary);
            w.u8(u8::from(i.maybe_went_rw));
        }
        w.finish()
    }

    /// Decodes [`PastIntervals::encode`] output; a set of more members
    /// than a pool may have is a [`MapError::Limit`].
    pub fn decode(buf: &[u8]) -> Result<PastIntervals> {
        let mut r = Reader::new(buf);
        check_header(&mut r, PAST_MAGIC)?;
        let from = r.u32().map_err(de)?;
        let n = r.count(21).map_err(de)?;
        let mut intervals = Vec::with_capacity(n);
        let members = |r: &mut Reader<'_>| -> Result<Vec<i32>> {
            let v = get_osds(r)?;
            if v.len() > crate::MAX_POOL_SIZE as usize {
                return Err(MapError::Limit {
                    what: "members of an interval's set",
                    value: v.len() as u64,
                    max: u64::from(crate::MAX_POOL_SIZE),
                });
            }
            Ok(v)
        };
        for _ in 0..n {
            let first = r.u32().map_err(de)?;
            let last = r.u32().map_err(de)?;
            let up = members(&mut r)?;
            let acting = members(&mut r)?;
            let primary = r.i32().map_err(de)?;
            let maybe_went_rw = match r.u8().map_err(de)? {
                0 => false,
                1 => true,
                b => return Err(MapError::Decode(format!("bad maybe_went_rw {b}"))),
            };
            if last < first {
                return Err(MapError::Decode(format!(
                    "interval {first}..{last} ends before it starts"
                )));
            }
            intervals.push(crate::PastInterval {
                first,
                last,
                up,
                acting,
                primary,
                maybe_went_rw,
            });
        }
        if r.remaining() != 0 {
            return Err(MapError::Decode(format!(
                "{} bytes after the past intervals",
                r.remaining()
            )));
        }
        Ok(PastIntervals { from, intervals })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PastInterval;

    fn sample() -> PastIntervals {
        PastIntervals {
            from: 7,
            intervals: vec![
                PastInterval {
                    first: 7,
                    last: 9,
                    up: vec![0, 1, 2],
                    acting: vec![0, 1, 2],
                    primary: 0,
                    maybe_went_rw: true,
                },
                PastInterval {
                    first: 10,
                    last: 10,
                    up: vec![1, 2, 3],
                    acting: vec![1, 2],
                    primary: -1,
                    maybe_went_rw: false,
                },
            ],
        }
    }

    #[test]
    fn pools_keep_their_quotas_and_the_full_flag() {
        let plain = Pool::replicated(2, "rbd", 3, 2, 8, 0);
        let mut w = Writer::new();
        put_pool(&mut w, &plain);
        let old_bytes = w.finish();
        for mut p in [plain, Pool::erasure(3, "ec", 2, 1, 8, 1)] {
            p.quota_max_objects = 5;
            p.flags |= crate::pool::FLAG_FULL_QUOTA;
            let mut with_snaps = p.clone();
            with_snaps.snap_seq = 4;
            with_snaps.remove_snap(2);
            for q in [p, with_snaps] {
                let mut w = Writer::new();
                put_pool(&mut w, &q);
                let buf = w.finish();
                let back = get_pool(&mut Reader::new(&buf)).unwrap();
                assert_eq!(back, q);
                assert!(back.full_quota());
                // Cut short, the quota is an error, not a default.
                assert!(get_pool(&mut Reader::new(&buf[..buf.len() - 4])).is_err());
            }
        }
        // No quota: the bytes of before quotas.
        let mut w = Writer::new();
        put_pool(&mut w, &Pool::replicated(2, "rbd", 3, 2, 8, 0));
        assert_eq!(w.finish(), old_bytes);
    }

    #[test]
    fn pools_keep_what_the_operator_told_the_autoscaler() {
        for mut p in [
            Pool::replicated(2, "rbd", 3, 2, 8, 0),
            Pool::erasure(3, "ec", 2, 1, 8, 1),
        ] {
            p.autoscale = crate::pool::AutoscaleOptions {
                pg_num_min: 16,
                pg_num_max: 256,
                target_size_bytes: 1 << 40,
                target_size_ratio_micro: 2_500_000,
            };
            p.flags |= crate::pool::FLAG_BULK;
            for quota in [0, 7] {
                let mut q = p.clone();
                q.quota_max_objects = quota;
                let mut w = Writer::new();
                put_pool(&mut w, &q);
                let buf = w.finish();
                let back = get_pool(&mut Reader::new(&buf)).unwrap();
                assert_eq!(back, q);
                assert!(back.bulk());
                assert_eq!(back.autoscale.target_size_ratio(), 2.5);
                // Cut short, the options are an error, not a default.
                assert!(get_pool(&mut Reader::new(&buf[..buf.len() - 4])).is_err());
            }
            // A minimum above the maximum is refused on decode.
            p.autoscale.pg_num_min = 512;
            let mut w = Writer::new();
            put_pool(&mut w, &p);
            assert!(get_pool(&mut Reader::new(&w.finish())).is_err());
        }
    }

    #[test]
    fn pools_keep_their_snapshots_and_pools_without_keep_their_old_bytes() {
        let plain = Pool::replicated(2, "rbd", 3, 2, 8, 0);
        let mut w = Writer::new();
        put_pool(&mut w, &plain);
        let old_bytes = w.finish();
        assert_eq!(
            old_bytes[8 + 4 + 3],
            1,
            "type code of a pool without snapshots"
        );
        for mut p in [plain, Pool::erasure(3, "ec", 2, 1, 8, 1)] {
            p.snap_seq = 9;
            for s in [1, 2, 3, 7, 5, 6] {
                p.remove_snap(s);
            }
            assert_eq!(p.removed_snaps, vec![(1, 3), (5, 3)]);
            assert!(p.is_snap_removed(6) && !p.is_snap_removed(4) && !p.is_snap_removed(8));
            let mut w = Writer::new();
            put_pool(&mut w, &p);
            let buf = w.finish();
            assert_eq!(get_pool(&mut Reader::new(&buf)).unwrap(), p);
            // Runs that overlap, or reach past the sequence, are refused.
            let mut bad = p.clone();
            bad.removed_snaps = vec![(1, 3), (3, 1)];
            let mut w = Writer::new();
            put_pool(&mut w, &bad);
            assert!(get_pool(&mut Reader::new(&w.finish())).is_err());
            bad.removed_snaps = vec![(8, 5)];
            let mut w = Writer::new();
            put_pool(&mut w, &bad);
            assert!(get_pool(&mut Reader::new(&w.finish())).is_err());
        }
    }

    #[test]
    fn erasure_pools_keep_their_stripe_width_and_profile() {
        let mut ec = Pool::erasure(3, "ec", 3, 1, 16, 1);
        ec.stripe_width = 3 * 8192;
        ec.ec_profile = "three-one".into();
        let mut w = Writer::new();
        put_pool(&mut w, &ec);
        let buf = w.finish();
        assert_eq!(get_pool(&mut Reader::new(&buf)).unwrap(), ec);
        // Type 3 (written before pools carried their stripe width) reads
        // as the default stripe unit and no profile.
        let mut w = Writer::new();
        w.u64(3);
        w.str("ec");
        w.u8(3);
        w.u32(3);
        w.u32(1);
        for v in [4, 4, 16, 16, 1] {
            w.u32(v);
        }
        w.u64(crate::FLAG_HASHPSPOOL);
        let buf = w.finish();
        let old = get_pool(&mut Reader::new(&buf)).unwrap();
        assert_eq!(old, Pool::erasure(3, "ec", 3, 1, 16, 1));
        assert_eq!(old.stripe_unit(), crate::DEFAULT_STRIPE_UNIT);
        // A stripe width that is not k whole chunks is refused.
        ec.stripe_width = 3 * 8192 + 1;
        let mut w = Writer::new();
        put_pool(&mut w, &ec);
        let buf = w.finish();
        assert!(get_pool(&mut Reader::new(&buf)).is_err());
    }

    #[test]
    fn past_intervals_round_trip() {
        let p = sample();
        assert_eq!(PastIntervals::decode(&p.encode()).unwrap(), p);
        let empty = PastIntervals {
            from: 1,
            intervals: Vec::new(),
        };
        assert_eq!(PastIntervals::decode(&empty.encode()).unwrap(), empty);
    }

    #[test]
    fn every_truncation_and_trailing_byte_is_an_error() {
        let b = sample().encode();
        for n in 0..b.len() {
            assert!(
                matches!(PastIntervals::decode(&b[..n]), Err(MapError::Decode(_))),
                "{n} of {} bytes decoded",
                b.len()
            );
        }
        let mut longer = b.clone();
        longer.push(0);
        assert!(matches!(
            PastIntervals::decode(&longer),
            Err(MapError::Decode(_))
        ));
    }

    #[test]
    fn a_wrong_magic_version_or_field_is_refused() {
        let b = sample().encode();
        let mut bad = b.clone();
        bad[0] = b'X';
        assert!(PastIntervals::decode(&bad).is_err());
        let mut bad = b.clone();
        bad[4] = 9;
        let e = PastIntervals::decode(&bad).unwrap_err().to_string();
        assert!(e.contains("unsupported version 9"), "{e}");
        // The first interval's maybe_went_rw byte (after magic, version,
        // from, count, first, last, two 3-member sets and the primary).
        let at = 5 + 4 + 4 + 4 + 4 + (4 + 12) * 2 + 4;
        let mut bad = b.clone();
        bad[at] = 2;
        let e = PastIntervals::decode(&bad).unwrap_err().to_string();
        assert!(e.contains("maybe_went_rw"), "{e}");
        // An interval that ends before it starts.
        let mut p = sample();
        p.intervals[0].last = 3;
        let e = PastIntervals::decode(&p.encode()).unwrap_err().to_string();
        assert!(e.contains("ends before it starts"), "{e}");
    }

    #[test]
    fn a_set_larger_than_any_pool_is_a_limit_error() {
        let mut p = sample();
        p.intervals[0].acting = (0..=crate::MAX_POOL_SIZE as i32).collect();
        assert!(matches!(
            PastIntervals::decode(&p.encode()),
            Err(MapError::Limit { .. })
        ));
    }
}

//! [`Incremental`]: the change from one epoch to the next.

use std::collections::{BTreeMap, BTreeSet};

use shoal_crush::CrushMap;
use shoal_types::Epoch;

use crate::error::{MapError, Result};
use crate::osdmap::{MAX_OSD_LIMIT, OsdInfo, OsdMap, WEIGHT_IN, max_osd_limit};
use crate::pg::PgId;
use crate::pool::Pool;

/// Everything that changes between epoch `epoch - 1` and `epoch`.
/// Applied in a fixed order (see [`OsdMap::apply`]); fields left empty
/// change nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Incremental {
    /// Cluster id; must match the map's.
    pub fsid: [u8; 16],
    /// The epoch this produces (the map's epoch + 1).
    pub epoch: Epoch,
    /// New number of OSD slots.
    pub new_max_osd: Option<u32>,
    /// A whole new CRUSH map.
    pub new_crush: Option<CrushMap>,
    /// Pools created or changed.
    pub new_pools: BTreeMap<u64, Pool>,
    /// Pools deleted.
    pub old_pools: BTreeSet<u64>,
    /// OSD ids created (exist, down, out until told otherwise).
    pub new_osds: BTreeSet<i32>,
    /// OSD ids destroyed.
    pub removed_osds: BTreeSet<i32>,
    /// OSDs that booted, with their address.
    pub new_up: BTreeMap<i32, String>,
    /// OSDs marked down (their address is forgotten).
    pub new_down: BTreeSet<i32>,
    /// New reweights (in = 0x10000, out = 0).
    pub new_weight: BTreeMap<i32, u32>,
    /// New primary affinities.
    pub new_primary_affinity: BTreeMap<i32, u32>,
    /// New `pg_temp` entries; an empty list removes the entry.
    pub new_pg_temp: BTreeMap<PgId, Vec<i32>>,
    /// New `primary_temp` entries; -1 removes the entry.
    pub new_primary_temp: BTreeMap<PgId, i32>,
    /// New `pg_upmap_items` entries.
    pub new_pg_upmap_items: BTreeMap<PgId, Vec<(i32, i32)>>,
    /// `pg_upmap_items` entries removed.
    pub old_pg_upmap_items: BTreeSet<PgId>,
    /// The map's new flags (bits of [`crate::OsdMap::FLAG_NAMES`]).
    pub new_flags: Option<u32>,
    /// New `up_thru` epochs.
    pub new_up_thru: BTreeMap<i32, u32>,
}

impl Incremental {
    /// An empty incremental that moves `map` to the next epoch.
    pub fn next(map: &OsdMap) -> Self {
        Incremental {
            fsid: map.fsid,
            epoch: Epoch(map.epoch.0 + 1),
            ..Incremental::default()
        }
    }
}

impl OsdMap {
    /// Applies `inc`, giving the map of epoch `inc.epoch`. On error the map
    /// is unchanged.
    pub fn apply(&mut self, inc: &Incremental) -> Result<()> {
        if inc.epoch.0 != self.epoch.0.wrapping_add(1) {
            return Err(MapError::WrongEpoch {
                have: self.epoch.0,
                got: inc.epoch.0,
            });
        }
        if inc.fsid != self.fsid {
            return Err(MapError::FsidMismatch);
        }
        let mut next = self.clone();
        next.apply_unchecked(inc)?;
        *self = next;
        Ok(())
    }

    fn apply_unchecked(&mut self, inc: &Incremental) -> Result<()> {
        if let Some(n) = inc.new_max_osd {
            if n > MAX_OSD_LIMIT {
                return Err(max_osd_limit(u64::from(n)));
            }
            self.osds.resize(n as usize, OsdInfo::default());
        }
        if let Some(c) = &inc.new_crush {
            self.crush = c.clone();
        }
        for id in &inc.old_pools {
            self.pools.remove(id);
            self.pg_temp.retain(|pg, _| pg.pool != *id);
            self.primary_temp.retain(|pg, _| pg.pool != *id);
            self.pg_upmap_items.retain(|pg, _| pg.pool != *id);
        }
        for (id, p) in &inc.new_pools {
            if p.id != *id {
                return Err(MapError::Invalid(format!("pool {id} holds pool {}", p.id)));
            }
            p.validate()?;
            self.pools.insert(*id, p.clone());
        }
        self.apply_osd_changes(inc)?;
        for (pg, osds) in &inc.new_pg_temp {
            if osds.is_empty() {
                self.pg_temp.remove(pg);
            } else {
                self.pg_temp.insert(*pg, osds.clone());
            }
        }
        for (pg, p) in &inc.new_primary_temp {
            if *p < 0 {
                self.primary_temp.remove(pg);
            } else {
                self.primary_temp.insert(*pg, *p);
            }
        }
        for pg in &inc.old_pg_upmap_items {
            self.pg_upmap_items.remove(pg);
        }
        if let Some(f) = inc.new_flags {
            self.flags = f;
        }
        for (id, e) in &inc.new_up_thru {
            self.osd_mut(*id)?;
            self.up_thru.insert(*id, *e);
        }
        for (pg, items) in &inc.new_pg_upmap_items {
            self.pg_upmap_items.insert(*pg, items.clone());
        }
        self.epoch = inc.epoch;
        Ok(())
    }

    fn apply_osd_changes(&mut self, inc: &Incremental) -> Result<()> {
        for id in &inc.removed_osds {
            *self.osd_mut(*id)? = OsdInfo::default();
            self.up_thru.remove(id);
        }
        for id in &inc.new_osds {
            let o = self.osd_mut(*id)?;
            if !o.exists {
                *o = OsdInfo {
                    exists: true,
                    ..OsdInfo::default()
                };
            }
        }
        for id in &inc.new_down {
            // A down OSD's address is stale: it gets a new one when it boots.
            let o = self.osd_mut(*id)?;
            o.up = false;
            o.addr = None;
        }
        for (id, addr) in &inc.new_up {
            let o = self.osd_mut(*id)?;
            if !o.exists {
                return Err(MapError::NoSuchOsd(*id));
            }
            o.up = true;
            o.addr = Some(addr.clone());
        }
        for (id, w) in &inc.new_weight {
            if *w > WEIGHT_IN {
                return Err(MapError::Invalid(format!("osd.{id} weight {w:#x}")));
            }
            self.osd_mut(*id)?.weight = *w;
        }
        for (id, a) in &inc.new_primary_affinity {
            if *a > WEIGHT_IN {
                return Err(MapError::Invalid(format!(
                    "osd.{id} primary affinity {a:#x}"
                )));
            }
            self.osd_mut(*id)?.primary_affinity = *a;
        }
        Ok(())
    }
}

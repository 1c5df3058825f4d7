//! [`OsdMap`]: one epoch of the cluster's OSDs, pools and placement rules.

use std::collections::BTreeMap;

use shoal_crush::CrushMap;
use shoal_types::Epoch;

use crate::error::{MapError, Result};
use crate::pg::PgId;
use crate::pool::Pool;

/// Reweight of an OSD that is in (16.16 fixed point, Ceph's `CEPH_OSD_IN`).
pub const WEIGHT_IN: u32 = 0x1_0000;
/// Reweight of an OSD that is out.
pub const WEIGHT_OUT: u32 = 0;
/// Default primary affinity (1.0 in 16.16).
pub const PRIMARY_AFFINITY_DEFAULT: u32 = 0x1_0000;
/// Largest `max_osd` a map may have (Ceph's `mon_max_osd` defaults to
/// 10000): every map holds, and every mapping reads, one entry per slot.
pub const MAX_OSD_LIMIT: u32 = 1 << 16;

/// The error for a `max_osd` above [`MAX_OSD_LIMIT`].
pub(crate) fn max_osd_limit(n: u64) -> MapError {
    MapError::Limit {
        what: "max_osd",
        value: n,
        max: u64::from(MAX_OSD_LIMIT),
    }
}

/// What the map says about one OSD.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OsdInfo {
    /// The id has been created (and not removed).
    pub exists: bool,
    /// Running and reachable.
    pub up: bool,
    /// Reweight: [`WEIGHT_IN`], [`WEIGHT_OUT`] or in between (16.16).
    pub weight: u32,
    /// Chance to be chosen primary, 16.16 (1.0 = always when first).
    pub primary_affinity: u32,
    /// Where clients reach it (`host:port`), once it has booted.
    pub addr: Option<String>,
}

impl Default for OsdInfo {
    fn default() -> Self {
        OsdInfo {
            exists: false,
            up: false,
            weight: WEIGHT_OUT,
            primary_affinity: PRIMARY_AFFINITY_DEFAULT,
            addr: None,
        }
    }
}

/// The OSD map of one epoch. Changed only by [`crate::Incremental`]s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OsdMap {
    /// Cluster id.
    pub fsid: [u8; 16],
    /// This map's epoch.
    pub epoch: Epoch,
    pub(crate) osds: Vec<OsdInfo>,
    pub(crate) pools: BTreeMap<u64, Pool>,
    pub(crate) pg_temp: BTreeMap<PgId, Vec<i32>>,
    pub(crate) primary_temp: BTreeMap<PgId, i32>,
    pub(crate) pg_upmap_items: BTreeMap<PgId, Vec<(i32, i32)>>,
    pub(crate) crush: CrushMap,
    /// Cluster flags the OSDs act on ([`OsdMap::FLAG_NAMES`]).
    pub(crate) flags: u32,
    /// Per OSD, the newest epoch through which the monitors know it was
    /// up and peering (Ceph's `up_thru`): an interval whose primary's
    /// `up_thru` reached its first epoch may have taken writes.
    pub(crate) up_thru: BTreeMap<i32, u32>,
}

impl OsdMap {
    /// Cluster flags carried in the map, by name, with their bits (Ceph's
    /// `CEPH_OSDMAP_*` values): OSDs pause background recovery, backfill
    /// or scheduled scrubs while one is set.
    pub const FLAG_NAMES: &'static [(&'static str, u32)] = &[
        ("nobackfill", 1 << 9),
        ("norecover", 1 << 10),
        ("noscrub", 1 << 11),
        ("nodeep-scrub", 1 << 12),
    ];

    /// The bit of the map flag `name`.
    pub fn flag_bit(name: &str) -> Option<u32> {
        Self::FLAG_NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| *b)
    }

    /// Whether the map flag `name` is set.
    pub fn has_flag(&self, name: &str) -> bool {
        Self::flag_bit(name).is_some_and(|b| self.flags & b != 0)
    }

    /// The map's flags, as bits.
    pub fn flags(&self) -> u32 {
        self.flags
    }

    /// OSD `osd`'s `up_thru` (0 if never set).
    pub fn up_thru(&self, osd: i32) -> u32 {
        self.up_thru.get(&osd).copied().unwrap_or(0)
    }

    /// An empty map at epoch 0 with `max_osd` OSD slots, none existing.
    pub fn new(fsid: [u8; 16], max_osd: u32, crush: CrushMap) -> Result<Self> {
        if max_osd > MAX_OSD_LIMIT {
            return Err(max_osd_limit(u64::from(max_osd)));
        }
        Ok(OsdMap {
            fsid,
            epoch: Epoch(0),
            osds: vec![OsdInfo::default(); max_osd as usize],
            pools: BTreeMap::new(),
            pg_temp: BTreeMap::new(),
            primary_temp: BTreeMap::new(),
            pg_upmap_items: BTreeMap::new(),
            flags: 0,
            up_thru: BTreeMap::new(),
            crush,
        })
    }

    /// Number of OSD slots (`max_osd`).
    pub fn max_osd(&self) -> u32 {
        self.osds.len() as u32
    }

    /// One OSD's state.
    pub fn osd(&self, id: i32) -> Option<&OsdInfo> {
        usize::try_from(id).ok().and_then(|i| self.osds.get(i))
    }

    pub(crate) fn osd_mut(&mut self, id: i32) -> Result<&mut OsdInfo> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.osds.get_mut(i))
            .ok_or(MapError::NoSuchOsd(id))
    }

    /// All OSD slots, by id.
    pub fn osds(&self) -> impl Iterator<Item = (i32, &OsdInfo)> {
        self.osds.iter().enumerate().map(|(i, o)| (i as i32, o))
    }

    /// True if the OSD exists.
    pub fn exists(&self, id: i32) -> bool {
        self.osd(id).is_some_and(|o| o.exists)
    }

    /// True if the OSD exists and is up.
    pub fn is_up(&self, id: i32) -> bool {
        self.osd(id).is_some_and(|o| o.exists && o.up)
    }

    /// Pools by id.
    pub fn pools(&self) -> &BTreeMap<u64, Pool> {
        &self.pools
    }

    /// A pool by id.
    pub fn pool(&self, id: u64) -> Option<&Pool> {
        self.pools.get(&id)
    }

    /// A pool by name.
    pub fn pool_by_name(&self, name: &str) -> Option<&Pool> {
        self.pools.values().find(|p| p.name == name)
    }

    /// The CRUSH map.
    pub fn crush(&self) -> &CrushMap {
        &self.crush
    }

    /// `pg_temp` overrides.
    pub fn pg_temp(&self) -> &BTreeMap<PgId, Vec<i32>> {
        &self.pg_temp
    }

    /// `primary_temp` overrides.
    pub fn primary_temp(&self) -> &BTreeMap<PgId, i32> {
        &self.primary_temp
    }

    /// `pg_upmap_items` overrides: (from, to) pairs per PG.
    pub fn pg_upmap_items(&self) -> &BTreeMap<PgId, Vec<(i32, i32)>> {
        &self.pg_upmap_items
    }

    /// The reweight vector CRUSH sees: an OSD's weight if it exists, else 0.
    pub fn crush_weights(&self) -> Vec<u32> {
        self.osds
            .iter()
            .map(|o| if o.exists { o.weight } else { WEIGHT_OUT })
            .collect()
    }
}

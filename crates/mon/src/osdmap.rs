//! The OSD map inside the monitors' state: the current map, the history of
//! incrementals that produced it, the cluster flags (`noout`), and the pure
//! changes the monitors apply to it (pools, OSD state).
//!
//! Every change becomes exactly one [`Incremental`] and one new epoch, so a
//! subscriber that has epoch `e` catches up by applying the incrementals
//! `e+1..` in order. The last [`HISTORY_MAX`] incrementals are kept; a
//! subscriber further behind receives the full map.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use shoal_crush::{CrushMap, RULE_ERASURE, Rule, Step};
use shoal_ec::EcProfile;
use shoal_maps::{
    AutoscaleMode, FLAG_EC_OVERWRITES, Incremental, OsdMap, Pool, PoolKind, WEIGHT_IN, WEIGHT_OUT,
};
use shoal_net::Secret;

use shoal_monclient::{ErrorCode, MonError};

/// Default number of epochs of history kept (`mon_osdmap_history`).
pub const HISTORY_MAX: usize = 500;
/// Default interval, in epochs, between kept full maps (`mon_osdmap_full_interval`).
pub const FULL_INTERVAL: u32 = 100;
/// Largest `pg_num` a pool may have (Ceph's `mon_max_pool_pg_num`).
pub const POOL_PG_NUM_MAX: u32 = 65_536;
/// Largest replicated pool size.
pub const POOL_SIZE_MAX: u32 = 10;
/// Cluster flags an operator may set.
pub const FLAGS: &[&str] = &[
    "noout",
    "noin",
    "nodown",
    "noup",
    "nobackfill",
    "norecover",
    "noscrub",
    "nodeep-scrub",
];

/// The CRUSH map of a new cluster: a `default` root and a replicated rule
/// choosing leaves under distinct buckets of `failure_domain` (`host`, or
/// `osd` on a one-machine cluster, as Ceph's vstart does).
pub fn initial_crush(failure_domain: &str) -> Result<CrushMap, MonError> {
    // The tunables are Ceph's optimal (jewel) profile: the legacy defaults
    // give up early on collisions and map small clusters to too few OSDs.
    let text = format!(
        "tunable choose_local_tries 0\ntunable choose_local_fallback_tries 0\n\
         tunable choose_total_tries 50\ntunable chooseleaf_descend_once 1\n\
         tunable chooseleaf_vary_r 1\ntunable chooseleaf_stable 1\n\
         tunable straw_calc_version 1\ntunable allowed_bucket_algs 54\n\
         # types\ntype 0 osd\ntype 1 host\ntype 2 chassis\ntype 3 rack\ntype 4 row\n\
         type 5 pdu\ntype 6 pod\ntype 7 room\ntype 8 datacenter\ntype 9 zone\n\
         type 10 region\ntype 11 root\n\n\
         root default {{\n\tid -1\n\talg straw2\n\thash 0\n}}\n\n\
         rule replicated_rule {{\n\tid 0\n\ttype replicated\n\tstep take default\n\
         \tstep chooseleaf firstn 0 type {failure_domain}\n\tstep emit\n}}\n"
    );
    shoal_crush::text::parse(&text).map_err(|e| {
        MonError::new(
            ErrorCode::InvalidArgument,
            format!("initial CRUSH map: {e}"),
        )
    })
}

pub use shoal_monclient::PoolSpec;

/// A change to the OSD map, applied by every monitor alike.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OsdChange {
    /// Creates a pool.
    PoolCreate {
        /// Name.
        name: String,
        /// Number of PGs.
        pg_num: u32,
        /// Redundancy.
        spec: PoolSpec,
        /// Its `pg_autoscale_mode` (`on`, `warn`, `off`; none: `on`),
        /// from the central `osd_pool_default_pg_autoscale_mode` when the
        /// command was taken.
        #[serde(default)]
        autoscale_mode: Option<String>,
        /// The autoscaler's properties the pool starts with
        /// (`pg_autoscale_mode`, `bulk`, `pg_num_min`, `pg_num_max`,
        /// `target_size_bytes`, `target_size_ratio`), as `osd pool set`
        /// takes them: set in the same map change, so the autoscaler never
        /// sees the pool without them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        set: Vec<(String, String)>,
    },
    /// Deletes a pool.
    PoolRm {
        /// Name.
        name: String,
    },
    /// Renames a pool.
    PoolRename {
        /// Current name.
        from: String,
        /// New name.
        to: String,
    },
    /// Sets a pool property (`size`, `min_size`, `crush_rule`,
    /// `allow_ec_overwrites`).
    PoolSet {
        /// Pool name.
        name: String,
        /// Property.
        key: String,
        /// Value.
        value: String,
    },
    /// Marks a pool at its quota (writes that add are refused) or no
    /// longer; proposed by the leader from the PG statistics.
    PoolQuotaFull {
        /// Pool name.
        name: String,
        /// At the quota.
        full: bool,
    },
    /// Raises a pool's `pg_num` (proposed by the leader's autoscaler for a
    /// pool whose mode is `on`); `pgp_num` follows in steps, as after
    /// `osd pool set NAME pg_num`, and the mode stays.
    AutoscalePgNum {
        /// Pool id.
        pool: u64,
        /// The new `pg_num`.
        pg_num: u32,
    },
    /// Moves a pool's `pgp_num` one step toward its target (proposed by
    /// the leader while the misplaced ratio allows).
    PgpStep {
        /// Pool id.
        pool: u64,
        /// The new `pgp_num`.
        pgp_num: u32,
    },
    /// Hands out a pool's next self-managed snapshot id.
    SnapCreate {
        /// Pool name.
        pool: String,
    },
    /// Removes a pool's self-managed snapshot.
    SnapRemove {
        /// Pool name.
        pool: String,
        /// The snapshot.
        snapid: u64,
    },
    /// Allocates the lowest free OSD id (exists, down, out; not in CRUSH).
    OsdCreate,
    /// Marks OSDs out.
    MarkOut {
        /// OSD ids.
        ids: Vec<i32>,
    },
    /// Marks OSDs in.
    MarkIn {
        /// OSD ids.
        ids: Vec<i32>,
    },
    /// Marks OSDs down.
    MarkDown {
        /// OSD ids.
        ids: Vec<i32>,
    },
    /// Sets (or, with no OSDs, removes) a PG's `pg_temp`: the acting set
    /// that serves it while its up set is backfilled.
    PgTemp {
        /// The PG (`1.6`).
        pgid: String,
        /// The acting set wanted; empty to follow the up set again.
        osds: Vec<i32>,
    },
    /// The balancer's round (`shoal_maps::balance`), proposed by the
    /// leader: PGs whose `pg_upmap_items` become these pairs, and PGs
    /// whose entries go. A PG whose target OSD is no longer up and in when
    /// this applies is left as it is.
    Upmaps {
        /// (PG, its new pairs).
        set: Vec<(String, Vec<(i32, i32)>)>,
        /// PGs whose entries go.
        removed: Vec<String>,
    },
    /// Sets (or, with no pairs, removes) a PG's `pg_upmap_items`.
    PgUpmapItems {
        /// The PG (`1.6`).
        pgid: String,
        /// (from, to) pairs.
        pairs: Vec<(i32, i32)>,
    },
    /// An up OSD peers in an interval that started at `up_thru` (Ceph's
    /// MOSDAlive): record that it was up through that epoch.
    Alive {
        /// The OSD.
        id: i32,
        /// The epoch.
        up_thru: u32,
    },
    /// Removes OSDs (they must be down).
    OsdRm {
        /// OSD ids.
        ids: Vec<i32>,
    },
    /// OSDs booting, marked down and marked out, batched by the leader
    /// into one epoch.
    Batch {
        /// OSDs that booted.
        boots: Vec<Boot>,
        /// OSDs to mark down (failure reports, missed beacons).
        down: Vec<i32>,
        /// OSDs down too long, to mark out automatically.
        out: Vec<i32>,
    },
    /// Adds a CRUSH bucket (`osd crush add-bucket NAME TYPE`).
    CrushAddBucket {
        /// Name.
        name: String,
        /// Type (host, rack, ...).
        type_name: String,
    },
    /// Moves a CRUSH bucket under another (`osd crush move NAME PARENT`).
    CrushMove {
        /// Bucket.
        name: String,
        /// New parent bucket.
        parent: String,
    },
    /// Removes a CRUSH item (`osd crush rm NAME`).
    CrushRm {
        /// Item.
        name: String,
    },
    /// Sets an item's CRUSH weight (`osd crush reweight NAME WEIGHT`), 16.16.
    CrushReweight {
        /// Item.
        name: String,
        /// New weight, 16.16 fixed point.
        weight: u32,
    },
    /// Sets or clears a cluster flag.
    Flag {
        /// The flag (`noout`, ...).
        flag: String,
        /// Set (true) or clear.
        on: bool,
    },
    /// Creates an erasure-code profile (`osd erasure-code-profile set`).
    EcProfileSet {
        /// Name.
        name: String,
        /// Settings as the operator gave them.
        params: BTreeMap<String, String>,
        /// Replace a profile of that name with other settings.
        force: bool,
    },
    /// Removes an erasure-code profile no pool uses.
    EcProfileRm {
        /// Name.
        name: String,
    },
}

/// An OSD announcing itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Boot {
    /// Its id.
    pub id: i32,
    /// Where clients reach it.
    pub addr: String,
    /// The host bucket it belongs under.
    pub host: String,
    /// Its CRUSH weight if it is new to CRUSH (16.16, by capacity).
    pub weight: u32,
    /// Drawn when its process started (0: unknown): see [`OsdMapState::boot_nonce`].
    #[serde(default)]
    pub nonce: u64,
}

/// The OSD map and its history, as the monitors keep them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdMapState {
    /// The current map (absent before bootstrap), encoded.
    #[serde(with = "b64_map")]
    pub map: Option<OsdMap>,
    /// Incrementals by the epoch they produce, encoded (newest HISTORY_MAX).
    pub incrementals: BTreeMap<u32, String>,
    /// Cluster flags.
    pub flags: BTreeSet<String>,
    /// The largest pool id ever used: ids are never reused.
    pub pool_max: u64,
    /// OSDs the monitors marked out on their own (marked in again when they
    /// return).
    #[serde(default)]
    pub auto_out: BTreeSet<i32>,
    /// Full maps every `full_interval` epochs, encoded, within the history.
    #[serde(default)]
    pub full_maps: BTreeMap<u32, String>,
    /// Epochs of history kept (incrementals and full maps older are trimmed).
    #[serde(default = "default_history")]
    pub history: u32,
    /// Epochs between kept full maps.
    #[serde(default = "default_full_interval")]
    pub full_interval: u32,
    /// The nonce each up OSD booted with. A boot with another nonce while
    /// the OSD is up is a restarted process (within the heartbeat grace,
    /// so nobody marked it down): it is marked down first, and up when it
    /// boots again, so its PGs see a new interval and peer with it.
    #[serde(default)]
    pub boot_nonce: BTreeMap<i32, u64>,
    /// Erasure-code profiles by name, each as its full settings
    /// ([`EcProfile::to_map`]); a new cluster has Ceph's `default`.
    #[serde(default = "default_ec_profiles")]
    pub ec_profiles: BTreeMap<String, BTreeMap<String, String>>,
    /// Pools whose `pg_num` grew, by id, with the `pgp_num` their
    /// placement moves to: the leader raises `pgp_num` in steps bounded by
    /// the misplaced ratio (`mon_target_max_misplaced_ratio`).
    #[serde(default)]
    pub pgp_num_target: BTreeMap<u64, u32>,
}

fn default_ec_profiles() -> BTreeMap<String, BTreeMap<String, String>> {
    EcProfile::parse_words(shoal_ec::DEFAULT_PROFILE)
        .map(|p| BTreeMap::from([("default".to_string(), p.to_map())]))
        .unwrap_or_default()
}

fn default_history() -> u32 {
    HISTORY_MAX as u32
}

fn default_full_interval() -> u32 {
    FULL_INTERVAL
}

mod b64_map {
    use serde::{Deserialize, Deserializer, Serializer};
    use shoal_maps::OsdMap;
    use shoal_net::Secret;

    pub fn serialize<S: Serializer>(m: &Option<OsdMap>, s: S) -> Result<S::Ok, S::Error> {
        match m {
            Some(m) => s.serialize_some(&Secret::encode_base64(&m.encode())),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<OsdMap>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        text.map(|t| {
            let bytes = Secret::decode_base64(&t).map_err(serde::de::Error::custom)?;
            OsdMap::decode(&bytes).map_err(serde::de::Error::custom)
        })
        .transpose()
    }
}

fn invalid(msg: impl Into<String>) -> MonError {
    MonError::new(ErrorCode::InvalidArgument, msg)
}

fn map_err(e: shoal_maps::MapError) -> MonError {
    MonError::new(ErrorCode::InvalidArgument, e.to_string())
}

impl Default for OsdMapState {
    fn default() -> Self {
        OsdMapState {
            map: None,
            incrementals: BTreeMap::new(),
            flags: BTreeSet::new(),
            pool_max: 0,
            auto_out: BTreeSet::new(),
            full_maps: BTreeMap::new(),
            history: default_history(),
            full_interval: default_full_interval(),
            boot_nonce: BTreeMap::new(),
            ec_profiles: default_ec_profiles(),
            pgp_num_target: BTreeMap::new(),
        }
    }
}

impl OsdMapState {
    /// The map of a new cluster, keeping `history` epochs with a full map
    /// every `full_interval`.
    pub fn bootstrap(
        &mut self,
        fsid: [u8; 16],
        crush: CrushMap,
        history: u32,
        full_interval: u32,
    ) -> Result<(), MonError> {
        let mut map = OsdMap::new(fsid, 0, crush).map_err(map_err)?;
        let inc = Incremental::next(&map);
        map.apply(&inc).map_err(map_err)?;
        self.history = history.max(1);
        self.full_interval = full_interval.max(1);
        self.record(&inc, &map);
        self.map = Some(map);
        Ok(())
    }

    /// Keeps `inc` (which produced `map`), a full map at each interval, and
    /// trims both to the history length.
    fn record(&mut self, inc: &Incremental, map: &OsdMap) {
        let epoch = inc.epoch.0;
        self.incrementals
            .insert(epoch, Secret::encode_base64(&inc.encode()));
        if epoch % self.full_interval == 1 || self.full_interval == 1 {
            self.full_maps
                .insert(epoch, Secret::encode_base64(&map.encode()));
        }
        let oldest = epoch.saturating_sub(self.history.saturating_sub(1));
        // Keep the newest full map at or before the oldest epoch of the
        // history and every incremental after it, so every epoch from that
        // full map on can be rebuilt and walked (the history is up to a
        // full interval longer than asked). Incrementals cut at the oldest
        // epoch instead left a gap after the full map: past intervals from
        // it failed ("the map history has a gap") and a new PG, or one
        // whose last activation fell in the gap, stayed peering until the
        // window moved — minutes under churn (the soak's stalls).
        let base = self.full_maps.range(..=oldest).next_back().map(|(e, _)| *e);
        if let Some(base) = base {
            self.full_maps = self.full_maps.split_off(&base);
            self.incrementals = self.incrementals.split_off(&(base + 1));
        }
    }

    /// The oldest epoch from which the map can be rebuilt and walked to
    /// the current one: the oldest full map with every incremental after
    /// it (a history trimmed by an older monitor may lack the first few).
    fn oldest_walkable(&self) -> Option<u32> {
        let now = self.epoch();
        let first_inc = self.incrementals.keys().next().copied().unwrap_or(now + 1);
        self.full_maps
            .keys()
            .copied()
            .find(|f| *f + 1 >= first_inc || *f == now)
    }

    /// The map as it was at `epoch`, rebuilt from the nearest kept full map
    /// and the incrementals after it; `None` when `epoch` is outside the
    /// kept history.
    pub fn map_at(&self, epoch: u32) -> Option<OsdMap> {
        if epoch == self.epoch() {
            return self.map.clone();
        }
        let (base_epoch, full) = self.full_maps.range(..=epoch).next_back()?;
        let mut map = OsdMap::decode(&Secret::decode_base64(full).ok()?).ok()?;
        for e in base_epoch + 1..=epoch {
            let inc = self.incrementals.get(&e)?;
            let inc = Incremental::decode(&Secret::decode_base64(inc).ok()?).ok()?;
            map.apply(&inc).ok()?;
        }
        Some(map)
    }

    /// The intervals of `pg` from epoch `since` (or the oldest kept, if
    /// later) to now, and the epoch they start from.
    pub fn past_intervals(
        &self,
        pg: shoal_maps::PgId,
        since: u32,
    ) -> Result<(u32, Vec<shoal_maps::PastInterval>), MonError> {
        let now = self.epoch();
        let oldest = self.oldest_walkable().unwrap_or(now);
        let start = since.max(oldest).clamp(1, now.max(1));
        let gone = || MonError::new(ErrorCode::Internal, "the map history has a gap");
        let mut map = self.map_at(start).ok_or_else(gone)?;
        let mut history = shoal_maps::IntervalHistory::new(pg);
        history.push(&map);
        for e in start + 1..=now {
            let inc = self.incrementals.get(&e).ok_or_else(gone)?;
            let inc = Secret::decode_base64(inc)
                .ok()
                .and_then(|b| Incremental::decode(&b).ok())
                .ok_or_else(gone)?;
            map.apply(&inc).map_err(map_err)?;
            history.push(&map);
        }
        Ok((start, history.finish()))
    }

    /// The current map.
    pub fn current(&self) -> Result<&OsdMap, MonError> {
        self.map
            .as_ref()
            .ok_or_else(|| MonError::new(ErrorCode::Again, "no OSD map yet"))
    }

    /// The current epoch (0 before bootstrap).
    pub fn epoch(&self) -> u32 {
        self.map.as_ref().map_or(0, |m| m.epoch.0)
    }

    /// Applies a change as one new epoch; returns its output.
    pub fn apply(&mut self, change: &OsdChange) -> Result<Value, MonError> {
        let map = self.current()?;
        let mut inc = Incremental::next(map);
        let out = self.build(change, map, &mut inc)?;
        let mut next = map.clone();
        next.apply(&inc).map_err(map_err)?;
        match change {
            OsdChange::Flag { flag, on: true } => {
                self.flags.insert(flag.clone());
            }
            OsdChange::Flag { flag, on: false } => {
                self.flags.remove(flag);
            }
            OsdChange::PoolCreate { .. } => {
                self.pool_max = out["id"].as_u64().unwrap_or(self.pool_max);
            }
            OsdChange::Batch { boots, .. } => {
                for b in boots {
                    self.auto_out.remove(&b.id);
                }
                let booted: BTreeSet<i64> = out["booted"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_i64())
                    .collect();
                for b in boots.iter().filter(|b| booted.contains(&i64::from(b.id))) {
                    self.boot_nonce.insert(b.id, b.nonce);
                }
                let marked = out["out"].as_array().into_iter().flatten();
                self.auto_out
                    .extend(marked.filter_map(|v| v.as_i64()).map(|v| v as i32));
            }
            OsdChange::MarkIn { ids } | OsdChange::MarkOut { ids } => {
                for id in ids {
                    self.auto_out.remove(id);
                }
            }
            OsdChange::EcProfileSet { name, params, .. } => {
                // `build` checked the settings; store them complete.
                if let Ok(p) = EcProfile::parse(params) {
                    self.ec_profiles.insert(name.clone(), p.to_map());
                }
            }
            OsdChange::EcProfileRm { name } => {
                self.ec_profiles.remove(name);
            }
            OsdChange::AutoscalePgNum { pool, pg_num } => {
                self.pgp_num_target.insert(*pool, *pg_num);
            }
            OsdChange::PoolSet { key, .. } => {
                let counts: Vec<(u64, u32, u32)> = (inc.new_pools.iter())
                    .map(|(id, p)| (*id, map.pool(*id).map_or(p.pg_num, |b| b.pg_num), p.pg_num))
                    .collect();
                for (id, before, pg_num) in counts {
                    match key.as_str() {
                        // More PGs: the OSDs split them where they are;
                        // the leader moves their placement after, in steps.
                        "pg_num" if pg_num > before => {
                            self.pgp_num_target.insert(id, pg_num);
                        }
                        // The operator placed them by hand.
                        "pgp_num" => {
                            self.pgp_num_target.remove(&id);
                        }
                        _ => {}
                    }
                }
            }
            OsdChange::PgpStep { pool, pgp_num }
                if self.pgp_num_target.get(pool) == Some(pgp_num) =>
            {
                self.pgp_num_target.remove(pool);
            }
            _ => {}
        }
        self.pgp_num_target.retain(|id, _| next.pool(*id).is_some());
        self.record(&inc, &next);
        let epoch = next.epoch.0;
        self.map = Some(next);
        let mut out = out;
        if let Some(o) = out.as_object_mut() {
            o.insert("epoch".into(), json!(epoch));
        }
        Ok(out)
    }

    /// Fills `inc` for `change` after checking it against `map`.
    fn build(
        &self,
        change: &OsdChange,
        map: &OsdMap,
        inc: &mut Incremental,
    ) -> Result<Value, MonError> {
        match change {
            OsdChange::PoolCreate {
                name,
                pg_num,
                spec,
                autoscale_mode,
                set,
            } => {
                let mode = match autoscale_mode.as_deref() {
                    None => AutoscaleMode::On,
                    Some(m) => m
                        .parse()
                        .map_err(|e| invalid(format!("osd_pool_default_pg_autoscale_mode: {e}")))?,
                };
                let mut pool = self.pool_create(map, inc, name, *pg_num, spec)?;
                pool.set_autoscale_mode(mode);
                for (key, value) in set {
                    if !CREATE_PROPERTIES.contains(&key.as_str()) {
                        return Err(invalid(format!(
                            "a pool is created with {} only, not {key:?} (osd pool set it after)",
                            CREATE_PROPERTIES.join(", ")
                        )));
                    }
                    set_pool_property(map, &mut pool, key, value)?;
                }
                pool.validate().map_err(map_err)?;
                let id = pool.id;
                inc.new_pools.insert(id, pool);
                Ok(json!({ "pool": name, "id": id }))
            }
            OsdChange::PoolRm { name } => {
                let pool = pool_named(map, name)?;
                inc.old_pools.insert(pool.id);
                Ok(json!({ "removed": name }))
            }
            OsdChange::PoolRename { from, to } => {
                check_pool_name(to)?;
                if map.pool_by_name(to).is_some() {
                    return Err(MonError::new(
                        ErrorCode::Exists,
                        format!("pool {to} exists"),
                    ));
                }
                let mut pool = pool_named(map, from)?.clone();
                pool.name = to.clone();
                inc.new_pools.insert(pool.id, pool);
                Ok(json!({ "renamed": from, "to": to }))
            }
            OsdChange::PoolSet { name, key, value } => {
                let mut pool = pool_named(map, name)?.clone();
                set_pool_property(map, &mut pool, key, value)?;
                inc.new_pools.insert(pool.id, pool);
                Ok(json!({ "pool": name, key.clone(): value }))
            }
            OsdChange::AutoscalePgNum { pool, pg_num } => {
                let mut p = pool_by_id(map, *pool)?.clone();
                if p.autoscale_mode() != AutoscaleMode::On {
                    return Err(invalid(format!(
                        "pool {}'s pg_autoscale_mode is {}",
                        p.name,
                        p.autoscale_mode()
                    )));
                }
                if *pg_num <= p.pg_num || *pg_num > POOL_PG_NUM_MAX {
                    return Err(invalid(format!(
                        "the autoscaler only grows pool {} ({} PGs) up to {POOL_PG_NUM_MAX}, not to {pg_num}",
                        p.name, p.pg_num
                    )));
                }
                p.pg_num = *pg_num;
                let name = p.name.clone();
                inc.new_pools.insert(p.id, p);
                Ok(json!({ "pool": name, "pg_num": pg_num }))
            }
            OsdChange::PgpStep { pool, pgp_num } => {
                let Some(target) = self.pgp_num_target.get(pool).copied() else {
                    return Err(invalid(format!("pool {pool} has no pgp_num to move to")));
                };
                let mut p = pool_by_id(map, *pool)?.clone();
                if *pgp_num == 0 || *pgp_num > p.pg_num.min(target) || *pgp_num == p.pgp_num {
                    return Err(invalid(format!(
                        "pgp_num {pgp_num} is not a step of pool {} from {} toward {target}",
                        p.name, p.pgp_num
                    )));
                }
                p.pgp_num = *pgp_num;
                let name = p.name.clone();
                inc.new_pools.insert(p.id, p);
                Ok(json!({ "pool": name, "pgp_num": pgp_num }))
            }
            OsdChange::PoolQuotaFull { name, full } => {
                let mut pool = pool_named(map, name)?.clone();
                if pool.full_quota() == *full {
                    return Err(MonError::new(
                        ErrorCode::Again,
                        format!(
                            "pool {name} is already {}",
                            if *full { "full" } else { "not full" }
                        ),
                    ));
                }
                if *full {
                    pool.flags |= shoal_maps::FLAG_FULL_QUOTA;
                } else {
                    pool.flags &= !shoal_maps::FLAG_FULL_QUOTA;
                }
                inc.new_pools.insert(pool.id, pool);
                Ok(json!({ "pool": name, "full_quota": full }))
            }
            OsdChange::SnapCreate { pool } => {
                let mut p = pool_named(map, pool)?.clone();
                p.snap_seq = p
                    .snap_seq
                    .checked_add(1)
                    .ok_or_else(|| invalid(format!("pool {pool} has no snapshot id left")))?;
                let snapid = p.snap_seq;
                inc.new_pools.insert(p.id, p);
                Ok(json!({ "pool": pool, "snapid": snapid }))
            }
            OsdChange::SnapRemove { pool, snapid } => {
                let mut p = pool_named(map, pool)?.clone();
                if *snapid == 0 || *snapid > p.snap_seq {
                    return Err(MonError::new(
                        ErrorCode::NotFound,
                        format!("pool {pool} has no snapshot {snapid}"),
                    ));
                }
                if p.is_snap_removed(*snapid) {
                    return Err(MonError::new(
                        ErrorCode::NotFound,
                        format!("snapshot {snapid} of pool {pool} is already removed"),
                    ));
                }
                p.remove_snap(*snapid);
                inc.new_pools.insert(p.id, p);
                Ok(json!({ "pool": pool, "removed": snapid }))
            }
            OsdChange::OsdCreate => {
                let id = (0..map.max_osd() as i32)
                    .find(|i| !map.exists(*i))
                    .unwrap_or(map.max_osd() as i32);
                if id as u32 >= map.max_osd() {
                    inc.new_max_osd = Some(id as u32 + 1);
                }
                inc.new_osds.insert(id);
                Ok(json!({ "osd": id }))
            }
            OsdChange::MarkOut { ids } => {
                for id in existing(map, ids)? {
                    inc.new_weight.insert(id, WEIGHT_OUT);
                }
                Ok(json!({ "out": ids }))
            }
            OsdChange::MarkIn { ids } => {
                for id in existing(map, ids)? {
                    inc.new_weight.insert(id, WEIGHT_IN);
                }
                Ok(json!({ "in": ids }))
            }
            OsdChange::PgTemp { pgid, osds } => {
                let pg: shoal_maps::PgId = pgid
                    .parse()
                    .map_err(|_| invalid(format!("bad pg id {pgid:?}")))?;
                let pg = &pg;
                let pool = map.pool(pg.pool).ok_or_else(|| {
                    MonError::new(ErrorCode::NotFound, format!("no pool {}", pg.pool))
                })?;
                if pg.seed >= pool.pg_num {
                    return Err(invalid(format!("pg {pg} does not exist")));
                }
                if osds.len() > pool.size as usize {
                    return Err(invalid(format!(
                        "pg_temp {osds:?} is larger than the pool's size"
                    )));
                }
                // An erasure-coded PG's pg_temp is by position: a hole is
                // ITEM_NONE.
                let named: Vec<i32> = osds
                    .iter()
                    .copied()
                    .filter(|o| !(pool.is_erasure() && *o == shoal_maps::ITEM_NONE))
                    .collect();
                if !named.is_empty() {
                    existing(map, &named)?;
                }
                if map.pg_temp().get(pg).map_or(osds.is_empty(), |t| t == osds) {
                    return Err(invalid(format!("pg {pg} already has pg_temp {osds:?}")));
                }
                inc.new_pg_temp.insert(*pg, osds.clone());
                Ok(json!({ "pgid": pg.to_string(), "pg_temp": osds }))
            }
            OsdChange::Upmaps { set, removed } => {
                let mut applied = 0u64;
                for (pgid, pairs) in set {
                    let Ok(pg) = pgid.parse::<shoal_maps::PgId>() else {
                        continue;
                    };
                    let valid = map.pool(pg.pool).is_some_and(|p| pg.seed < p.pg_num)
                        && pairs.iter().all(|(from, to)| {
                            map.exists(*from)
                                && map.is_up(*to)
                                && map.osd(*to).is_some_and(|o| o.weight > 0)
                        });
                    if valid {
                        inc.new_pg_upmap_items.insert(pg, pairs.clone());
                        applied += 1;
                    }
                }
                for pgid in removed {
                    if let Ok(pg) = pgid.parse::<shoal_maps::PgId>()
                        && map.pg_upmap_items().contains_key(&pg)
                    {
                        inc.old_pg_upmap_items.insert(pg);
                        applied += 1;
                    }
                }
                if applied == 0 {
                    return Err(invalid("no balancer change still applies".to_string()));
                }
                Ok(json!({ "changed_pgs": applied }))
            }
            OsdChange::PgUpmapItems { pgid, pairs } => {
                let pg: shoal_maps::PgId = pgid
                    .parse()
                    .map_err(|_| invalid(format!("bad pg id {pgid:?}")))?;
                let pool = map.pool(pg.pool).ok_or_else(|| {
                    MonError::new(ErrorCode::NotFound, format!("no pool {}", pg.pool))
                })?;
                if pg.seed >= pool.pg_num {
                    return Err(invalid(format!("pg {pg} does not exist")));
                }
                if pairs.len() > pool.size as usize {
                    return Err(invalid(format!(
                        "{} pairs for a pg of {} OSDs",
                        pairs.len(),
                        pool.size
                    )));
                }
                let mut froms = std::collections::BTreeSet::new();
                let mut tos = std::collections::BTreeSet::new();
                for (from, to) in pairs {
                    if from == to {
                        return Err(invalid(format!("osd.{from} mapped to itself")));
                    }
                    if !froms.insert(*from) || !tos.insert(*to) {
                        return Err(invalid(format!(
                            "an OSD named twice as a source or a target in {pairs:?}"
                        )));
                    }
                    existing(map, &[*from, *to])?;
                }
                if pairs.is_empty() {
                    if !map.pg_upmap_items().contains_key(&pg) {
                        return Err(MonError::new(
                            ErrorCode::NotFound,
                            format!("pg {pg} has no pg_upmap_items"),
                        ));
                    }
                    inc.old_pg_upmap_items.insert(pg);
                } else {
                    inc.new_pg_upmap_items.insert(pg, pairs.clone());
                }
                Ok(json!({ "pgid": pg.to_string(), "pg_upmap_items": pairs }))
            }
            OsdChange::Alive { id, up_thru } => {
                if !map.is_up(*id) {
                    return Err(MonError::new(
                        ErrorCode::InvalidArgument,
                        format!("osd.{id} is not up"),
                    ));
                }
                if *up_thru > map.epoch.0 {
                    return Err(invalid(format!(
                        "up_thru {up_thru} is past the current epoch {}",
                        map.epoch.0
                    )));
                }
                if map.up_thru(*id) < *up_thru {
                    inc.new_up_thru.insert(*id, *up_thru);
                }
                Ok(json!({ "osd": id, "up_thru": (*up_thru).max(map.up_thru(*id)) }))
            }
            OsdChange::MarkDown { ids } => {
                for id in existing(map, ids)? {
                    if map.is_up(id) {
                        inc.new_down.insert(id);
                    }
                }
                Ok(json!({ "down": ids }))
            }
            OsdChange::OsdRm { ids } => {
                for id in existing(map, ids)? {
                    if map.is_up(id) {
                        return Err(MonError::new(
                            ErrorCode::InvalidArgument,
                            format!("osd.{id} is still up; mark it down (and stop it) first"),
                        ));
                    }
                    inc.removed_osds.insert(id);
                }
                Ok(json!({ "removed": ids }))
            }
            OsdChange::Batch { boots, down, out } => self.batch(map, inc, boots, down, out),
            OsdChange::CrushAddBucket { name, type_name } => {
                let mut crush = map.crush().clone();
                crush
                    .add_named_bucket(name, type_name, None)
                    .map_err(|e| invalid(e.to_string()))?;
                inc.new_crush = Some(crush);
                Ok(json!({ "added": name }))
            }
            OsdChange::CrushMove { name, parent } => {
                let mut crush = map.crush().clone();
                crush
                    .move_bucket(name, parent)
                    .map_err(|e| invalid(e.to_string()))?;
                inc.new_crush = Some(crush);
                Ok(json!({ "moved": name, "to": parent }))
            }
            OsdChange::CrushRm { name } => {
                let mut crush = map.crush().clone();
                crush
                    .remove_item(name)
                    .map_err(|e| invalid(e.to_string()))?;
                inc.new_crush = Some(crush);
                Ok(json!({ "removed": name }))
            }
            OsdChange::CrushReweight { name, weight } => {
                let mut crush = map.crush().clone();
                crush
                    .reweight_named(name, *weight)
                    .map_err(|e| invalid(e.to_string()))?;
                inc.new_crush = Some(crush);
                Ok(json!({ "reweighted": name, "weight": f64::from(*weight) / 65536.0 }))
            }
            OsdChange::Flag { flag, on } => {
                if !FLAGS.contains(&flag.as_str()) {
                    return Err(invalid(format!("unknown flag {flag:?} (one of {FLAGS:?})")));
                }
                if self.flags.contains(flag) == *on {
                    let state = if *on { "already set" } else { "not set" };
                    return Err(invalid(format!("{flag} is {state}")));
                }
                // The flags OSDs act on travel in the map itself.
                if let Some(bit) = OsdMap::flag_bit(flag) {
                    inc.new_flags = Some(if *on {
                        map.flags() | bit
                    } else {
                        map.flags() & !bit
                    });
                }
                Ok(json!({ "flag": flag, "set": on }))
            }
            OsdChange::EcProfileSet {
                name,
                params,
                force,
            } => {
                check_pool_name(name)?;
                let profile = EcProfile::parse(params).map_err(|e| invalid(e.to_string()))?;
                let settings = profile.to_map();
                match self.ec_profiles.get(name) {
                    Some(old) if *old == settings => {}
                    Some(_) if !force => {
                        return Err(MonError::new(
                            ErrorCode::Exists,
                            format!(
                                "erasure-code profile {name} exists with other settings; \
                                 add --force to replace it"
                            ),
                        ));
                    }
                    Some(_) => {
                        if let Some(p) = map.pools().values().find(|p| p.ec_profile == *name) {
                            return Err(MonError::new(
                                ErrorCode::Busy,
                                format!(
                                    "erasure-code profile {name} is used by pool {}: \
                                     a pool's coding cannot change",
                                    p.name
                                ),
                            ));
                        }
                    }
                    None => {}
                }
                Ok(json!({ "profile": name, "settings": settings }))
            }
            OsdChange::EcProfileRm { name } => {
                if !self.ec_profiles.contains_key(name) {
                    return Err(MonError::new(
                        ErrorCode::NotFound,
                        format!("erasure-code profile {name} does not exist"),
                    ));
                }
                if let Some(p) = map.pools().values().find(|p| p.ec_profile == *name) {
                    return Err(MonError::new(
                        ErrorCode::Busy,
                        format!("erasure-code profile {name} is in use by pool {}", p.name),
                    ));
                }
                Ok(json!({ "removed": name }))
            }
        }
    }

    /// A new pool of `spec` (not yet in `inc`; an erasure-coded one's
    /// rule is).
    fn pool_create(
        &self,
        map: &OsdMap,
        inc: &mut Incremental,
        name: &str,
        pg_num: u32,
        spec: &PoolSpec,
    ) -> Result<Pool, MonError> {
        check_pool_name(name)?;
        if map.pool_by_name(name).is_some() {
            return Err(MonError::new(
                ErrorCode::Exists,
                format!("pool {name} exists"),
            ));
        }
        if pg_num == 0 || pg_num > POOL_PG_NUM_MAX {
            return Err(invalid(format!(
                "pg_num must be 1..={POOL_PG_NUM_MAX}, not {pg_num}"
            )));
        }
        let id = self
            .pool_max
            .max(map.pools().keys().next_back().copied().unwrap_or(0))
            + 1;
        let pool = match spec {
            PoolSpec::Replicated { size, min_size } => {
                check_sizes(*size, *min_size)?;
                Pool::replicated(id, name, *size, *min_size, pg_num, 0)
            }
            PoolSpec::Erasure { profile, rule } => {
                let settings = self.ec_profiles.get(profile).ok_or_else(|| {
                    MonError::new(
                        ErrorCode::NotFound,
                        format!(
                            "erasure-code profile {profile} does not exist \
                             (osd erasure-code-profile set {profile} k=K m=M)"
                        ),
                    )
                })?;
                let p = EcProfile::parse(settings).map_err(|e| invalid(e.to_string()))?;
                let rule_name = rule.as_deref().unwrap_or(name);
                let rule = erasure_rule(map, inc, rule_name, &p)?;
                let mut pool = Pool::erasure(id, name, p.k, p.m, pg_num, rule);
                pool.stripe_width = p.stripe_width();
                pool.ec_profile = profile.clone();
                pool
            }
        };
        Ok(pool)
    }
}

impl OsdMapState {
    fn batch(
        &self,
        map: &OsdMap,
        inc: &mut Incremental,
        boots: &[Boot],
        down: &[i32],
        out: &[i32],
    ) -> Result<Value, MonError> {
        if boots.is_empty() && down.is_empty() && out.is_empty() {
            return Err(invalid("empty batch"));
        }
        let mut crush: Option<shoal_crush::CrushMap> = None;
        let mut max = map.max_osd();
        let mut booted = Vec::new();
        let mut restarted = Vec::new();
        for b in boots {
            if b.id < 0 || b.id as u32 >= crate::osdmap::OSD_ID_MAX {
                return Err(invalid(format!("bad OSD id {}", b.id)));
            }
            if self.flags.contains("noup") {
                continue;
            }
            let known = self.boot_nonce.get(&b.id).copied().unwrap_or(0);
            if map.is_up(b.id) && b.nonce != 0 && known != b.nonce && !self.flags.contains("nodown")
            {
                // A new process of an OSD the map has up: down now, up
                // when it boots again into this map.
                inc.new_down.insert(b.id);
                restarted.push(b.id);
                continue;
            }
            let new = !map.exists(b.id);
            if new {
                inc.new_osds.insert(b.id);
                max = max.max(b.id as u32 + 1);
            }
            // An id allocated by `osd create` that never ran yet boots
            // for the first time: in, as a new OSD (Ceph's
            // mon_osd_auto_mark_new_in).
            let first_boot = !self.boot_nonce.contains_key(&b.id);
            let c = crush.get_or_insert_with(|| map.crush().clone());
            let location = [("host", b.host.as_str()), ("root", "default")];
            c.create_or_move_device(b.id, b.weight, &location)
                .map_err(|e| invalid(e.to_string()))?;
            inc.new_up.insert(b.id, b.addr.clone());
            let was_auto_out = self.auto_out.contains(&b.id);
            if (new || first_boot || was_auto_out) && !self.flags.contains("noin") {
                inc.new_weight.insert(b.id, WEIGHT_IN);
            }
            booted.push(b.id);
        }
        if max > map.max_osd() {
            inc.new_max_osd = Some(max);
        }
        if let Some(c) = crush {
            if &c != map.crush() {
                inc.new_crush = Some(c);
            }
        }
        for id in down {
            if map.is_up(*id) && !inc.new_up.contains_key(id) && !self.flags.contains("nodown") {
                inc.new_down.insert(*id);
            }
        }
        // A restart and a boot of the same OSD in one batch: down wins.
        inc.new_up.retain(|id, _| !restarted.contains(id));
        booted.retain(|id| !restarted.contains(id));
        let mut marked_out = Vec::new();
        for id in out {
            let is_in = map.osd(*id).is_some_and(|o| o.exists && o.weight > 0);
            // One that boots in this batch is no longer down: marked out
            // now, it would stay up and out for good (only a boot marks an
            // automatically out OSD in again).
            let booting = inc.new_up.contains_key(id);
            if is_in && !map.is_up(*id) && !booting && !self.flags.contains("noout") {
                inc.new_weight.insert(*id, WEIGHT_OUT);
                marked_out.push(*id);
            }
        }
        if booted.is_empty() && inc.new_down.is_empty() && marked_out.is_empty() {
            return Err(invalid("nothing to change"));
        }
        Ok(json!({
            "booted": booted,
            "restarted": restarted,
            "down": inc.new_down,
            "out": marked_out,
        }))
    }
}

/// Largest OSD id accepted from a booting OSD.
pub const OSD_ID_MAX: u32 = 1 << 16;

fn check_pool_name(name: &str) -> Result<(), MonError> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(invalid(format!(
            "bad pool name {name:?}: 1-128 of A-Z a-z 0-9 _ - ."
        )))
    }
}

fn check_sizes(size: u32, min_size: u32) -> Result<(), MonError> {
    if size == 0 || size > POOL_SIZE_MAX {
        return Err(invalid(format!(
            "size must be 1..={POOL_SIZE_MAX}, not {size}"
        )));
    }
    if min_size == 0 || min_size > size {
        return Err(invalid(format!(
            "min_size must be 1..=size ({size}), not {min_size}"
        )));
    }
    Ok(())
}

fn pool_by_id(map: &OsdMap, id: u64) -> Result<&Pool, MonError> {
    map.pool(id)
        .ok_or_else(|| MonError::new(ErrorCode::NotFound, format!("no pool {id}")))
}

fn pool_named<'a>(map: &'a OsdMap, name: &str) -> Result<&'a Pool, MonError> {
    map.pool_by_name(name)
        .ok_or_else(|| MonError::new(ErrorCode::NotFound, format!("pool {name} does not exist")))
}

fn existing(map: &OsdMap, ids: &[i32]) -> Result<Vec<i32>, MonError> {
    if ids.is_empty() {
        return Err(invalid("no OSD ids given"));
    }
    ids.iter()
        .map(|id| {
            if map.exists(*id) {
                Ok(*id)
            } else {
                Err(MonError::new(
                    ErrorCode::NotFound,
                    format!("osd.{id} does not exist"),
                ))
            }
        })
        .collect()
}

fn set_pool_property(
    map: &OsdMap,
    pool: &mut Pool,
    key: &str,
    value: &str,
) -> Result<(), MonError> {
    let num = || {
        value
            .parse::<u32>()
            .map_err(|_| invalid(format!("{key} must be a whole number, not {value:?}")))
    };
    match key {
        "size" => {
            if matches!(pool.kind, PoolKind::Erasure { .. }) {
                return Err(invalid(
                    "an erasure-coded pool's size is k+m and cannot change",
                ));
            }
            let size = num()?;
            let min_size = pool.min_size.min(size);
            check_sizes(size, min_size)?;
            pool.size = size;
            pool.min_size = min_size;
        }
        "min_size" => {
            let min_size = num()?;
            if let PoolKind::Erasure { k, .. } = pool.kind
                && min_size < k
            {
                return Err(invalid(format!(
                    "an erasure-coded pool's min_size must be k..=k+m ({k}..={}), not {min_size}",
                    pool.size
                )));
            }
            check_sizes(pool.size, min_size)?;
            pool.min_size = min_size;
        }
        "crush_rule" => {
            let rule = map
                .crush()
                .rules()
                .find(|r| r.name == value || r.id.to_string() == value)
                .ok_or_else(|| {
                    MonError::new(ErrorCode::NotFound, format!("no CRUSH rule {value:?}"))
                })?;
            if (rule.rule_type == RULE_ERASURE) != pool.is_erasure() {
                return Err(invalid(format!(
                    "CRUSH rule {} is of the other kind than pool {} (replicated or erasure)",
                    rule.name, pool.name
                )));
            }
            pool.crush_rule = rule.id;
        }
        "allow_ec_overwrites" => {
            if !pool.is_erasure() {
                return Err(invalid(
                    "allow_ec_overwrites applies to erasure-coded pools only",
                ));
            }
            match value {
                "true" | "1" | "yes" => pool.flags |= FLAG_EC_OVERWRITES,
                "false" | "0" | "no" if pool.flags & FLAG_EC_OVERWRITES != 0 => {
                    return Err(invalid(
                        "allow_ec_overwrites cannot be turned off once on: \
                         objects may already hold partial overwrites",
                    ));
                }
                "false" | "0" | "no" => {}
                other => {
                    return Err(invalid(format!(
                        "allow_ec_overwrites is true or false, not {other:?}"
                    )));
                }
            }
        }
        "pg_num" => {
            let n = num()?;
            if n < pool.pg_num {
                return Err(invalid(format!(
                    "pool {} has {} PGs: merging PGs is not supported yet, pg_num only grows",
                    pool.name, pool.pg_num
                )));
            }
            if n > POOL_PG_NUM_MAX {
                return Err(invalid(format!(
                    "pg_num must be 1..={POOL_PG_NUM_MAX}, not {n}"
                )));
            }
            let max = pool.autoscale.pg_num_max;
            if max != 0 && n > max {
                return Err(invalid(format!(
                    "specified pg_num {n} > pg_num_max {max} of pool {}",
                    pool.name
                )));
            }
            pool.pg_num = n;
            // The operator chose the count: the autoscaler keeps off it
            // (as Ceph does).
            pool.set_autoscale_mode(AutoscaleMode::Off);
        }
        "pg_autoscale_mode" => {
            let mode: AutoscaleMode = value.parse().map_err(invalid)?;
            pool.set_autoscale_mode(mode);
        }
        "pg_num_min" => {
            let n = num()?;
            let max = pool.autoscale.pg_num_max;
            if n > POOL_PG_NUM_MAX || (max != 0 && n > max) {
                return Err(invalid(format!(
                    "pg_num_min must be 0..={} (0: the central mon_pg_autoscale_pg_num_min), not {n}",
                    if max != 0 { max } else { POOL_PG_NUM_MAX }
                )));
            }
            // Above pg_num: the autoscaler (mode on) grows the pool to it.
            pool.autoscale.pg_num_min = n;
        }
        "pg_num_max" => {
            let n = num()?;
            if n > POOL_PG_NUM_MAX || (n != 0 && n < pool.autoscale.pg_num_min) {
                return Err(invalid(format!(
                    "pg_num_max must be 0 (no bound) or {}..={POOL_PG_NUM_MAX} (at least pg_num_min), not {n}",
                    pool.autoscale.pg_num_min.max(1)
                )));
            }
            if n != 0 && n < pool.pg_num {
                return Err(invalid(format!(
                    "pool {} has {} PGs: pg_num_max {n} would need merging PGs, which is not supported yet",
                    pool.name, pool.pg_num
                )));
            }
            pool.autoscale.pg_num_max = n;
        }
        "target_size_bytes" => {
            pool.autoscale.target_size_bytes = parse_quota(value).ok_or_else(|| {
                invalid(format!(
                    "target_size_bytes must be a whole number of bytes, with an optional \
                     suffix (100G; 0: none), not {value:?}"
                ))
            })?;
        }
        "target_size_ratio" => {
            let r = value
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|r| r.is_finite() && (0.0..=1e6).contains(r))
                .ok_or_else(|| {
                    invalid(format!(
                        "target_size_ratio must be a number from 0 (none) to 1000000, not {value:?}"
                    ))
                })?;
            pool.autoscale.target_size_ratio_micro = (r * 1e6).round() as u64;
        }
        "bulk" => {
            let on = parse_bool(value)
                .ok_or_else(|| invalid(format!("bulk is true or false, not {value:?}")))?;
            if on {
                pool.flags |= shoal_maps::FLAG_BULK;
            } else {
                pool.flags &= !shoal_maps::FLAG_BULK;
            }
        }
        "pgp_num" => {
            let n = num()?;
            if n == 0 || n > pool.pg_num {
                return Err(invalid(format!(
                    "pgp_num must be 1..={} (the pool's pg_num), not {n}",
                    pool.pg_num
                )));
            }
            pool.pgp_num = n;
        }
        // The leader sets or clears the full flag from the PG statistics
        // once the new quota is known.
        "quota_max_bytes" | "quota_max_objects" => {
            let v = parse_quota(value).ok_or_else(|| {
                invalid(format!(
                    "{key} must be a whole number (0: no quota), not {value:?}"
                ))
            })?;
            if key == "quota_max_bytes" {
                pool.quota_max_bytes = v;
            } else {
                pool.quota_max_objects = v;
            }
        }
        other => {
            return Err(invalid(format!(
                "unknown pool property {other:?} (size, min_size, pg_num, pgp_num, \
                 crush_rule, allow_ec_overwrites, quota_max_bytes, quota_max_objects, \
                 pg_autoscale_mode, pg_num_min, pg_num_max, target_size_bytes, \
                 target_size_ratio, bulk)"
            )));
        }
    }
    Ok(())
}

/// The properties `osd pool create` may give a new pool.
const CREATE_PROPERTIES: [&str; 6] = [
    "pg_autoscale_mode",
    "bulk",
    "pg_num_min",
    "pg_num_max",
    "target_size_bytes",
    "target_size_ratio",
];

/// A boolean as Ceph's commands take it.
fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// A quota: a whole number, with an optional binary suffix (`10G`, `512Ki`).
fn parse_quota(value: &str) -> Option<u64> {
    let v = value.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: u64 = n.parse().ok()?;
    let mult: u64 = match unit.trim_end_matches(['i', 'B', 'b']) {
        "" => 1,
        "K" | "k" => 1 << 10,
        "M" | "m" => 1 << 20,
        "G" | "g" => 1 << 30,
        "T" | "t" => 1 << 40,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// Buckets of `type_name` (or devices, for `osd`) below the default root.
pub fn failure_domains(crush: &CrushMap, type_name: &str) -> u32 {
    match (crush.item_id("default"), crush.type_id(type_name)) {
        (Some(root), Some(ty)) => failure_domains_under(crush, root, ty),
        _ => 0,
    }
}

/// Buckets of type `ty` (or devices, for type 0) below `root`.
fn failure_domains_under(crush: &CrushMap, root: i32, ty: i32) -> u32 {
    let mut count = 0;
    let mut stack = vec![root];
    while let Some(id) = stack.pop() {
        if id >= 0 {
            count += u32::from(ty == 0);
            continue;
        }
        let Some(b) = crush.bucket(id) else { continue };
        if b.type_id == ty && ty != 0 {
            count += 1;
            continue;
        }
        stack.extend(b.items.iter().copied());
    }
    count
}

/// The id of the erasure rule `name`, made from `profile` and added to
/// the CRUSH map in `inc` if the map has no rule of that name (as Ceph
/// does: `take ROOT [class CLASS]`, `chooseleaf indep 0 type DOMAIN`, or
/// `choose indep 0 type osd` when the failure domain is the OSD). The
/// profile's `k + m` must fit in the failure domains under its root.
fn erasure_rule(
    map: &OsdMap,
    inc: &mut Incremental,
    name: &str,
    profile: &EcProfile,
) -> Result<u32, MonError> {
    let crush = inc.new_crush.as_ref().unwrap_or(map.crush());
    if let Some(r) = crush.rules().find(|r| r.name == name) {
        if r.rule_type != RULE_ERASURE {
            return Err(invalid(format!(
                "CRUSH rule {name} is a replicated rule; an erasure-coded pool needs an \
                 erasure rule (name another with the pool's rule argument)"
            )));
        }
        return Ok(r.id);
    }
    let root = crush.item_id(&profile.crush_root).ok_or_else(|| {
        MonError::new(
            ErrorCode::NotFound,
            format!("CRUSH root {} does not exist", profile.crush_root),
        )
    })?;
    let domain = crush
        .type_id(&profile.crush_failure_domain)
        .ok_or_else(|| {
            MonError::new(
                ErrorCode::NotFound,
                format!(
                    "CRUSH type {} does not exist (crush-failure-domain)",
                    profile.crush_failure_domain
                ),
            )
        })?;
    let take = if profile.crush_device_class.is_empty() {
        root
    } else {
        crush
            .class_shadow(root, &profile.crush_device_class)
            .ok_or_else(|| {
                MonError::new(
                    ErrorCode::NotFound,
                    format!(
                        "no device of class {} under {} (crush-device-class)",
                        profile.crush_device_class, profile.crush_root
                    ),
                )
            })?
    };
    let domains = failure_domains_under(crush, take, domain);
    let (k, m) = (profile.k, profile.m);
    if k + m > domains {
        return Err(invalid(format!(
            "k+m = {} is more than the {domains} failure domains ({}) under {}: \
             add {} or choose a smaller failure domain (crush-failure-domain=osd)",
            k + m,
            profile.crush_failure_domain,
            profile.crush_root,
            profile.crush_failure_domain,
        )));
    }
    let mut crush = crush.clone();
    let id = crush.rules().map(|r| r.id + 1).max().unwrap_or(0);
    let choose = if domain == 0 {
        Step::ChooseIndep { n: 0, type_id: 0 }
    } else {
        Step::ChooseLeafIndep {
            n: 0,
            type_id: domain,
        }
    };
    let rule = Rule {
        id,
        name: name.to_string(),
        rule_type: RULE_ERASURE,
        min_size: 3,
        max_size: (k + m) as i32,
        steps: vec![
            Step::SetChooseLeafTries(5),
            Step::SetChooseTries(100),
            Step::Take(take),
            choose,
            Step::Emit,
        ],
    };
    crush.add_rule(rule).map_err(|e| invalid(e.to_string()))?;
    crush.finalize().map_err(|e| invalid(e.to_string()))?;
    inc.new_crush = Some(crush);
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> OsdMapState {
        let mut s = OsdMapState::default();
        s.bootstrap([7; 16], initial_crush("host").unwrap(), 500, 100)
            .unwrap();
        s
    }

    fn rep(size: u32, min_size: u32) -> PoolSpec {
        PoolSpec::Replicated { size, min_size }
    }

    fn create(
        s: &mut OsdMapState,
        name: &str,
        pg_num: u32,
        spec: PoolSpec,
    ) -> Result<Value, MonError> {
        s.apply(&OsdChange::PoolCreate {
            name: name.into(),
            pg_num,
            spec,
            autoscale_mode: None,
            set: Vec::new(),
        })
    }

    fn ec(profile: &str) -> PoolSpec {
        PoolSpec::Erasure {
            profile: profile.into(),
            rule: None,
        }
    }

    fn profile_set(
        s: &mut OsdMapState,
        name: &str,
        words: &str,
        force: bool,
    ) -> Result<Value, MonError> {
        let params = words
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        s.apply(&OsdChange::EcProfileSet {
            name: name.into(),
            params,
            force,
        })
    }

    #[test]
    fn erasure_code_profiles_make_pools_with_their_own_indep_rule() {
        let mut s = state();
        for id in 0..4 {
            boot(&mut s, id, 1);
        }
        // A new cluster has Ceph's default profile.
        assert_eq!(s.ec_profiles["default"]["k"], "2");
        assert_eq!(s.ec_profiles["default"]["m"], "2");
        let out = profile_set(&mut s, "three-one", "k=3 m=1", false).unwrap();
        assert_eq!(out["settings"]["crush-failure-domain"], "host");
        assert_eq!(s.ec_profiles["three-one"]["stripe_unit"], "4096");
        // Setting the same again is fine; other settings need --force.
        profile_set(&mut s, "three-one", "k=3 m=1 stripe_unit=4096", false).unwrap();
        let e = profile_set(&mut s, "three-one", "k=2 m=1", false).unwrap_err();
        assert_eq!(e.code, ErrorCode::Exists);
        let e = profile_set(&mut s, "bad", "k=3 m=1 plugin=clay", false).unwrap_err();
        assert!(e.message.contains("not available"), "{}", e.message);
        assert!(!s.ec_profiles.contains_key("bad"));
        profile_set(&mut s, "wide", "k=4 m=2", false).unwrap();
        profile_set(
            &mut s,
            "osds",
            "k=4 m=2 crush-failure-domain=osd stripe_unit=8K",
            false,
        )
        .unwrap();
        profile_set(&mut s, "ssd", "k=2 m=1 crush-device-class=ssd", false).unwrap();
        profile_set(
            &mut s,
            "rooms",
            "k=2 m=1 crush-failure-domain=cabinet",
            false,
        )
        .unwrap();

        // An EC pool: its own indep rule named after it, min_size k+1,
        // stripe width k * stripe_unit, the profile recorded.
        let before = s.epoch();
        create(&mut s, "ecpool", 16, ec("three-one")).unwrap();
        assert_eq!(s.epoch(), before + 1);
        let map = s.current().unwrap();
        let pool = map.pool_by_name("ecpool").unwrap().clone();
        assert_eq!(pool.kind, PoolKind::Erasure { k: 3, m: 1 });
        assert_eq!((pool.size, pool.min_size), (4, 4));
        assert_eq!((pool.stripe_width, pool.stripe_unit()), (3 * 4096, 4096));
        assert_eq!(pool.ec_profile, "three-one");
        let rule = map.crush().rule(pool.crush_rule).unwrap();
        assert_eq!(rule.name, "ecpool");
        assert_eq!(rule.rule_type, RULE_ERASURE);
        let host = map.crush().type_id("host").unwrap();
        assert!(rule.steps.contains(&Step::ChooseLeafIndep {
            n: 0,
            type_id: host
        }));
        // Every PG maps to 4 distinct OSDs, by position.
        for seed in 0..16 {
            let m = map
                .pg_to_up_acting(shoal_maps::PgId {
                    pool: pool.id,
                    seed,
                })
                .unwrap();
            let mut up = m.up.clone();
            up.sort_unstable();
            up.dedup();
            assert_eq!(up.len(), 4, "{:?}", m.up);
        }
        // Five hosts are needed for 4+2 across hosts; OSDs suffice.
        let e = create(&mut s, "wide", 8, ec("wide")).unwrap_err();
        assert!(
            e.message.contains("more than the 4 failure domains (host)"),
            "{}",
            e.message
        );
        let e = create(&mut s, "osds", 8, ec("osds")).unwrap_err();
        assert!(
            e.message.contains("more than the 4 failure domains (osd)"),
            "{}",
            e.message
        );
        boot(&mut s, 4, 1);
        boot(&mut s, 5, 1);
        create(&mut s, "osds", 8, ec("osds")).unwrap();
        let map = s.current().unwrap();
        let p = map.pool_by_name("osds").unwrap();
        assert_eq!(p.stripe_width, 4 * 8192);
        let r = map.crush().rule(p.crush_rule).unwrap();
        assert!(r.steps.contains(&Step::ChooseIndep { n: 0, type_id: 0 }));
        // Unknown classes, types and profiles are named in the error.
        let e = create(&mut s, "x", 8, ec("ssd")).unwrap_err();
        assert!(
            e.message.contains("no device of class ssd"),
            "{}",
            e.message
        );
        let e = create(&mut s, "x", 8, ec("rooms")).unwrap_err();
        assert!(
            e.message.contains("CRUSH type cabinet does not exist"),
            "{}",
            e.message
        );
        let e = create(&mut s, "x", 8, ec("nope")).unwrap_err();
        assert_eq!(e.code, ErrorCode::NotFound);
        // A named rule is used as it is; a replicated one is refused.
        let e = create(
            &mut s,
            "x",
            8,
            PoolSpec::Erasure {
                profile: "three-one".into(),
                rule: Some("replicated_rule".into()),
            },
        )
        .unwrap_err();
        assert!(e.message.contains("is a replicated rule"), "{}", e.message);
        create(
            &mut s,
            "twin",
            8,
            PoolSpec::Erasure {
                profile: "three-one".into(),
                rule: Some("ecpool".into()),
            },
        )
        .unwrap();
        let map = s.current().unwrap();
        assert_eq!(
            map.pool_by_name("twin").unwrap().crush_rule,
            pool.crush_rule
        );

        // Pool properties of an EC pool.
        let set = |s: &mut OsdMapState, key: &str, value: &str| {
            s.apply(&OsdChange::PoolSet {
                name: "ecpool".into(),
                key: key.into(),
                value: value.into(),
            })
        };
        assert!(
            set(&mut s, "min_size", "2")
                .unwrap_err()
                .message
                .contains("k..=k+m")
        );
        set(&mut s, "min_size", "3").unwrap();
        assert!(
            set(&mut s, "size", "5")
                .unwrap_err()
                .message
                .contains("cannot change")
        );
        assert!(
            set(&mut s, "crush_rule", "replicated_rule")
                .unwrap_err()
                .message
                .contains("other kind")
        );
        set(&mut s, "allow_ec_overwrites", "false").unwrap();
        set(&mut s, "allow_ec_overwrites", "true").unwrap();
        let p = s.current().unwrap().pool_by_name("ecpool").unwrap().clone();
        assert_eq!(p.min_size, 3);
        assert_ne!(p.flags & FLAG_EC_OVERWRITES, 0);
        assert!(
            set(&mut s, "allow_ec_overwrites", "false")
                .unwrap_err()
                .message
                .contains("cannot be turned off")
        );
        assert!(set(&mut s, "allow_ec_overwrites", "maybe").is_err());
        let e = s.apply(&OsdChange::PoolSet {
            name: "rbd".into(),
            key: "allow_ec_overwrites".into(),
            value: "true".into(),
        });
        assert!(e.is_err());

        // A profile in use cannot be removed or replaced; then it can.
        let e = s
            .apply(&OsdChange::EcProfileRm {
                name: "three-one".into(),
            })
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::Busy);
        assert!(e.message.contains("in use by pool"), "{}", e.message);
        let e = profile_set(&mut s, "three-one", "k=2 m=1", true).unwrap_err();
        assert_eq!(e.code, ErrorCode::Busy);
        for pool in ["ecpool", "twin"] {
            s.apply(&OsdChange::PoolRm { name: pool.into() }).unwrap();
        }
        profile_set(&mut s, "three-one", "k=2 m=1", true).unwrap();
        assert_eq!(s.ec_profiles["three-one"]["k"], "2");
        s.apply(&OsdChange::EcProfileRm {
            name: "three-one".into(),
        })
        .unwrap();
        assert!(!s.ec_profiles.contains_key("three-one"));
        let e = s
            .apply(&OsdChange::EcProfileRm {
                name: "three-one".into(),
            })
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::NotFound);
        // The profiles survive the monitors' serialization.
        let back: OsdMapState = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back.ec_profiles, s.ec_profiles);
    }

    #[test]
    fn pools_create_rename_set_remove_one_epoch_each() {
        let mut s = state();
        assert_eq!(s.epoch(), 1);
        let out = create(&mut s, "rbd", 32, rep(3, 2)).unwrap();
        assert_eq!(out["id"], 1);
        assert_eq!(out["epoch"], 2);
        assert_eq!(
            create(&mut s, "rbd", 8, rep(3, 2)).unwrap_err().code,
            ErrorCode::Exists
        );
        for (pg, spec) in [
            (0, rep(3, 2)),
            (8, rep(2, 3)),
            (8, rep(0, 0)),
            (8, rep(11, 2)),
        ] {
            assert_eq!(
                create(&mut s, "bad", pg, spec).unwrap_err().code,
                ErrorCode::InvalidArgument
            );
        }
        assert_eq!(
            create(&mut s, "a b", 8, rep(3, 2)).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        // No hosts yet: k+m cannot fit.
        let e = create(&mut s, "ec", 8, ec("default")).unwrap_err();
        assert!(
            e.message.contains("more than the 0 failure domains"),
            "{}",
            e.message
        );
        // Refused changes made no epoch.
        assert_eq!(s.epoch(), 2);
        s.apply(&OsdChange::PoolRename {
            from: "rbd".into(),
            to: "images".into(),
        })
        .unwrap();
        s.apply(&OsdChange::PoolSet {
            name: "images".into(),
            key: "min_size".into(),
            value: "1".into(),
        })
        .unwrap();
        let e = s
            .apply(&OsdChange::PoolSet {
                name: "images".into(),
                key: "min_size".into(),
                value: "4".into(),
            })
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        let pool = s.current().unwrap().pool_by_name("images").unwrap().clone();
        assert_eq!((pool.id, pool.min_size, pool.size), (1, 1, 3));
        s.apply(&OsdChange::PoolRm {
            name: "images".into(),
        })
        .unwrap();
        // Ids are never reused.
        assert_eq!(create(&mut s, "next", 8, rep(2, 1)).unwrap()["id"], 2);
        assert_eq!(s.epoch(), 6);
        let e = s
            .apply(&OsdChange::PoolRm {
                name: "images".into(),
            })
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::NotFound);
    }

    /// `pg_num` only grows and leaves `pgp_num` for the leader to move in
    /// steps toward it; a step past the target, or with none, is refused;
    /// `pgp_num` set by hand ends the stepping.
    #[test]
    fn pg_num_grows_and_pgp_num_follows_it_in_steps() {
        let mut s = state();
        create(&mut s, "rbd", 8, rep(3, 2)).unwrap();
        let set = |s: &mut OsdMapState, key: &str, value: &str| {
            s.apply(&OsdChange::PoolSet {
                name: "rbd".into(),
                key: key.into(),
                value: value.into(),
            })
        };
        let counts = |s: &OsdMapState| {
            let p = s.current().unwrap().pool_by_name("rbd").unwrap();
            (p.pg_num, p.pgp_num)
        };
        for bad in ["4", "0", "x", "70000"] {
            let e = set(&mut s, "pg_num", bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidArgument, "{bad}");
        }
        assert!(
            set(&mut s, "pg_num", "4")
                .unwrap_err()
                .message
                .contains("merging")
        );
        set(&mut s, "pg_num", "32").unwrap();
        assert_eq!(counts(&s), (32, 8));
        assert_eq!(s.pgp_num_target.get(&1), Some(&32));
        let step = |s: &mut OsdMapState, n: u32| {
            s.apply(&OsdChange::PgpStep {
                pool: 1,
                pgp_num: n,
            })
        };
        assert!(step(&mut s, 40).is_err(), "past the target");
        assert!(step(&mut s, 8).is_err(), "no step at all");
        step(&mut s, 16).unwrap();
        assert_eq!(counts(&s), (32, 16));
        step(&mut s, 32).unwrap();
        assert_eq!(counts(&s), (32, 32));
        assert!(s.pgp_num_target.is_empty(), "reached");
        assert!(step(&mut s, 24).is_err(), "no target left");
        // By hand: within pg_num, and the leader no longer steps.
        set(&mut s, "pg_num", "64").unwrap();
        assert!(set(&mut s, "pgp_num", "65").is_err());
        set(&mut s, "pgp_num", "40").unwrap();
        assert_eq!(counts(&s), (64, 40));
        assert!(s.pgp_num_target.is_empty());
        // A removed pool's target goes with it.
        set(&mut s, "pg_num", "128").unwrap();
        s.apply(&OsdChange::PoolRm { name: "rbd".into() }).unwrap();
        assert!(s.pgp_num_target.is_empty());
    }

    #[test]
    fn incrementals_rebuild_the_map_and_serde_round_trips() {
        let mut s = state();
        create(&mut s, "p", 16, rep(3, 2)).unwrap();
        s.apply(&OsdChange::OsdCreate).unwrap();
        s.apply(&OsdChange::OsdCreate).unwrap();
        s.apply(&OsdChange::MarkIn { ids: vec![0, 1] }).unwrap();
        s.apply(&OsdChange::MarkOut { ids: vec![1] }).unwrap();
        s.apply(&OsdChange::Flag {
            flag: "noout".into(),
            on: true,
        })
        .unwrap();
        // Replaying every incremental from an empty map gives the same map.
        let first = s.incrementals.keys().next().copied().unwrap();
        assert_eq!(first, 1);
        let mut replay = OsdMap::new([7; 16], 0, initial_crush("host").unwrap()).unwrap();
        for enc in s.incrementals.values() {
            let inc = Incremental::decode(&Secret::decode_base64(enc).unwrap()).unwrap();
            replay.apply(&inc).unwrap();
        }
        assert_eq!(&replay, s.current().unwrap());
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<OsdMapState>(&json).unwrap(), s);
        assert!(s.flags.contains("noout"));
        // Flags the OSDs act on travel in the map; the others stay here.
        assert!(!s.current().unwrap().has_flag("noout"));
        s.apply(&OsdChange::Flag {
            flag: "norecover".into(),
            on: true,
        })
        .unwrap();
        assert!(s.current().unwrap().has_flag("norecover"));
        let inc = s.incrementals.values().last().unwrap();
        let inc = Incremental::decode(&Secret::decode_base64(inc).unwrap()).unwrap();
        replay.apply(&inc).unwrap();
        assert_eq!(&replay, s.current().unwrap());
        s.apply(&OsdChange::Flag {
            flag: "norecover".into(),
            on: false,
        })
        .unwrap();
        assert!(!s.current().unwrap().has_flag("norecover"));
    }

    fn boot(s: &mut OsdMapState, id: i32, nonce: u64) -> Value {
        let b = Boot {
            id,
            addr: format!("127.0.0.1:{}", 6800 + id),
            host: format!("h{id}"),
            weight: WEIGHT_IN,
            nonce,
        };
        s.apply(&OsdChange::Batch {
            boots: vec![b],
            down: Vec::new(),
            out: Vec::new(),
        })
        .unwrap()
    }

    #[test]
    fn a_restarted_osd_is_marked_down_before_it_is_up_again() {
        let mut s = OsdMapState::default();
        s.bootstrap([7; 16], initial_crush("osd").unwrap(), 500, 100)
            .unwrap();
        for id in 0..3 {
            boot(&mut s, id, 10 + id as u64);
        }
        assert!(s.current().unwrap().is_up(0));
        // A retried boot of the same process changes nothing about up.
        let r = boot(&mut s, 0, 10);
        assert_eq!(r["restarted"], json!([]), "{r}");
        assert!(s.current().unwrap().is_up(0));
        // A new process while the map still has the old one up: down.
        let before = s.epoch();
        let r = boot(&mut s, 0, 99);
        assert_eq!(r["restarted"], json!([0]), "{r}");
        assert_eq!(r["booted"], json!([]), "{r}");
        assert!(!s.current().unwrap().is_up(0));
        assert_eq!(s.epoch(), before + 1);
        // It boots again into that map: up, with its nonce recorded.
        let r = boot(&mut s, 0, 99);
        assert_eq!(r["booted"], json!([0]), "{r}");
        assert!(s.current().unwrap().is_up(0));
        assert_eq!(s.boot_nonce.get(&0), Some(&99));
        // A boot that names no nonce (an older OSD) is taken as it is.
        let r = boot(&mut s, 1, 0);
        assert_eq!(r["restarted"], json!([]), "{r}");
        assert!(s.current().unwrap().is_up(1));
        // With nodown set, a restart cannot be marked down: it is booted.
        s.apply(&OsdChange::Flag {
            flag: "nodown".into(),
            on: true,
        })
        .unwrap();
        let r = boot(&mut s, 2, 77);
        assert_eq!(r["booted"], json!([2]), "{r}");
        assert!(s.current().unwrap().is_up(2));
    }

    /// The monitors' judge may find an OSD down past the down-out interval
    /// in the same tick its boot arrives (the simulation: an OSD marked
    /// back in by hand while still down, its restart waiting for a quorum).
    /// It comes up in, not up and out for good.
    #[test]
    fn an_osd_booting_in_the_batch_that_would_mark_it_out_stays_in() {
        let mut s = OsdMapState::default();
        s.bootstrap([7; 16], initial_crush("osd").unwrap(), 500, 100)
            .unwrap();
        for id in 0..3 {
            boot(&mut s, id, 10 + id as u64);
        }
        s.apply(&OsdChange::Batch {
            boots: Vec::new(),
            down: vec![1],
            out: Vec::new(),
        })
        .unwrap();
        assert!(!s.current().unwrap().is_up(1));
        let b = Boot {
            id: 1,
            addr: "127.0.0.1:6801".into(),
            host: "h1".into(),
            weight: WEIGHT_IN,
            nonce: 50,
        };
        let r = s
            .apply(&OsdChange::Batch {
                boots: vec![b],
                down: Vec::new(),
                out: vec![1],
            })
            .unwrap();
        assert_eq!(r["booted"], json!([1]), "{r}");
        assert_eq!(r["out"], json!([]), "{r}");
        let map = s.current().unwrap();
        assert!(map.is_up(1));
        assert!(map.osd(1).is_some_and(|o| o.weight > 0), "up but out");
        assert!(!s.auto_out.contains(&1));
        // Down and still down: the judge's out takes.
        s.apply(&OsdChange::Batch {
            boots: Vec::new(),
            down: vec![2],
            out: Vec::new(),
        })
        .unwrap();
        let r = s
            .apply(&OsdChange::Batch {
                boots: Vec::new(),
                down: Vec::new(),
                out: vec![2],
            })
            .unwrap();
        assert_eq!(r["out"], json!([2]), "{r}");
    }

    #[test]
    fn alive_records_up_thru_and_past_intervals_follow_the_history() {
        let mut s = OsdMapState::default();
        s.bootstrap([7; 16], initial_crush("osd").unwrap(), 500, 100)
            .unwrap();
        let boots = (0..3)
            .map(|id| Boot {
                id,
                addr: format!("127.0.0.1:{}", 6800 + id),
                host: format!("h{id}"),
                weight: WEIGHT_IN,
                nonce: 0,
            })
            .collect();
        s.apply(&OsdChange::Batch {
            boots,
            down: Vec::new(),
            out: Vec::new(),
        })
        .unwrap();
        create(&mut s, "rbd", 1, rep(3, 2)).unwrap();
        let pg = shoal_maps::PgId { pool: 1, seed: 0 };
        let start = s.epoch();
        let m = s.current().unwrap().pg_to_up_acting(pg).unwrap();
        let p = m.acting_primary;
        assert_eq!(m.acting.len(), 3);
        // The primary peers in the interval that began at `start`.
        s.apply(&OsdChange::Alive {
            id: p,
            up_thru: start,
        })
        .unwrap();
        assert_eq!(s.current().unwrap().up_thru(p), start);
        let future = OsdChange::Alive {
            id: p,
            up_thru: s.epoch() + 5,
        };
        assert_eq!(
            s.apply(&future).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        let other = m.acting[1];
        s.apply(&OsdChange::MarkDown { ids: vec![other] }).unwrap();
        let e = s
            .apply(&OsdChange::Alive {
                id: other,
                up_thru: 1,
            })
            .unwrap_err();
        assert!(e.message.contains("not up"), "{e:?}");
        let (from, iv) = s.past_intervals(pg, start).unwrap();
        assert_eq!(from, start);
        assert_eq!(iv.len(), 2, "{iv:?}");
        assert!(iv[0].maybe_went_rw, "{iv:?}");
        assert_eq!(iv[0].acting, m.acting);
        assert!(!iv[1].acting.contains(&other));
        assert!(!iv[1].maybe_went_rw, "{iv:?}");
    }

    #[test]
    fn osd_state_changes_check_their_osds() {
        let mut s = state();
        assert_eq!(s.apply(&OsdChange::OsdCreate).unwrap()["osd"], 0);
        assert_eq!(s.apply(&OsdChange::OsdCreate).unwrap()["osd"], 1);
        let e = s.apply(&OsdChange::MarkOut { ids: vec![7] }).unwrap_err();
        assert_eq!(e.code, ErrorCode::NotFound);
        s.apply(&OsdChange::OsdRm { ids: vec![0] }).unwrap();
        assert!(!s.current().unwrap().exists(0));
        // The freed id is taken again first.
        assert_eq!(s.apply(&OsdChange::OsdCreate).unwrap()["osd"], 0);
        let bad = OsdChange::Flag {
            flag: "nothing".into(),
            on: true,
        };
        assert_eq!(s.apply(&bad).unwrap_err().code, ErrorCode::InvalidArgument);
        let unset = OsdChange::Flag {
            flag: "noout".into(),
            on: false,
        };
        assert!(s.apply(&unset).unwrap_err().message.contains("not set"));
    }

    #[test]
    fn history_is_trimmed_and_old_maps_rebuild() {
        let mut s = OsdMapState::default();
        s.bootstrap([7; 16], initial_crush("host").unwrap(), 50, 10)
            .unwrap();
        let mut maps = vec![None, s.map.clone()];
        for i in 0..120 {
            let on = i % 2 == 0;
            s.apply(&OsdChange::Flag {
                flag: "noout".into(),
                on,
            })
            .unwrap();
            maps.push(s.map.clone());
        }
        assert_eq!(s.epoch(), 121);
        assert_eq!(s.incrementals.len(), 50);
        assert_eq!(s.incrementals.keys().next().copied(), Some(72));
        // Full maps every 10 epochs, the oldest one at or before epoch 72.
        let fulls: Vec<u32> = s.full_maps.keys().copied().collect();
        assert_eq!(fulls, vec![71, 81, 91, 101, 111, 121]);
        for e in 72..=121u32 {
            assert_eq!(s.map_at(e), maps[e as usize], "epoch {e}");
        }
        assert!(s.map_at(60).is_none());
        assert!(s.map_at(500).is_none());
    }

    /// At every epoch, not only where the history happens to start just
    /// after a full map: every epoch from the oldest kept full map on
    /// rebuilds, and a PG's past intervals from any epoch (0: a new PG)
    /// are answered. Incrementals cut at the history's oldest epoch left a
    /// gap after the full map, and new PGs peered for minutes.
    #[test]
    fn past_intervals_are_answered_at_every_epoch_of_a_trimmed_history() {
        let mut s = OsdMapState::default();
        s.bootstrap([7; 16], initial_crush("host").unwrap(), 50, 10)
            .unwrap();
        let pg = shoal_maps::PgId { pool: 1, seed: 0 };
        let mut maps = vec![None, s.map.clone()];
        for i in 0..160 {
            s.apply(&OsdChange::Flag {
                flag: "noout".into(),
                on: i % 2 == 0,
            })
            .unwrap();
            maps.push(s.map.clone());
            let now = s.epoch();
            let oldest = *s.full_maps.keys().next().unwrap();
            assert!(
                now - oldest + 1 >= 50.min(now),
                "history too short at {now}"
            );
            for e in oldest..=now {
                assert_eq!(s.map_at(e), maps[e as usize], "epoch {e} at {now}");
            }
            for since in [0, oldest, oldest + 1, now.saturating_sub(3), now] {
                let r = s.past_intervals(pg, since);
                assert!(r.is_ok(), "since {since} at {now}: {r:?}");
            }
        }
        // A history an older monitor trimmed with the gap is still walked,
        // from its first full map the incrementals continue.
        let first_inc = *s.incrementals.keys().next().unwrap();
        s.incrementals = s.incrementals.split_off(&(first_inc + 3));
        let (from, _) = s.past_intervals(pg, 0).unwrap();
        assert!(from > first_inc + 2, "{from}");
    }
}

//! Pools: a namespace of objects with a redundancy rule and `pg_num` PGs.

use crate::hash::{pg_mask, stable_mod, str_hash_rjenkins};
use crate::pg::PgId;

/// Ceph's `FLAG_HASHPSPOOL`: mix the pool id into the CRUSH input, so pools'
/// PGs do not land on the same OSDs. Set on every pool Ceph creates today.
pub const FLAG_HASHPSPOOL: u64 = 1;
/// Ceph's `FLAG_EC_OVERWRITES`: an erasure-coded pool takes partial
/// overwrites (`allow_ec_overwrites`); without it, only appends and whole
/// objects.
pub const FLAG_EC_OVERWRITES: u64 = 1 << 17;
/// Ceph's `FLAG_FULL_QUOTA`: the pool holds as many bytes or objects as
/// its quota allows; OSDs refuse what would add to it (deletes pass). Set
/// and cleared by the monitors' leader from the PG statistics.
pub const FLAG_FULL_QUOTA: u64 = 1 << 10;
/// Shoal's: the pool's `pg_autoscale_mode` is `off` (the autoscaler leaves
/// its `pg_num` alone). Neither this nor [`FLAG_AUTOSCALE_WARN`]: `on`.
/// Ceph keeps the mode among a pool's options; Shoal keeps it in bits far
/// above Ceph's flags.
pub const FLAG_AUTOSCALE_OFF: u64 = 1 << 40;
/// Shoal's: the pool's `pg_autoscale_mode` is `warn` (a health check, no
/// change).
pub const FLAG_AUTOSCALE_WARN: u64 = 1 << 41;
/// Shoal's: the pool is `bulk` (expected to hold much of the cluster's
/// data): the autoscaler gives it an even share of the capacity the other
/// pools do not claim from the start, rather than growing it as data comes.
pub const FLAG_BULK: u64 = 1 << 42;
/// The stripe unit of an erasure-coded pool whose map names none.
pub const DEFAULT_STRIPE_UNIT: u32 = 4096;

/// Largest pool size (copies or k + m) a map may hold: the result size
/// CRUSH is asked for, which its work grows with ([`shoal_crush::limits`]).
pub const MAX_POOL_SIZE: u32 = shoal_crush::MAX_REPLICAS as u32;

/// Largest `pg_num` of a pool (Ceph's `mon_max_pool_pg_num`): OSDs and
/// tools walk every PG of a pool.
pub const MAX_PG_NUM: u32 = 1 << 16;
/// Most runs of removed snapshots one pool records.
pub const MAX_REMOVED_SNAP_RUNS: usize = 1 << 16;

/// What the monitors' autoscaler does with a pool's `pg_num` (Ceph's
/// `pg_autoscale_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AutoscaleMode {
    /// Changes it when its share of the data calls for 3× more PGs.
    On,
    /// Raises a health check (`POOL_TOO_FEW_PGS`, `POOL_TOO_MANY_PGS`).
    Warn,
    /// Leaves it alone.
    Off,
}

impl AutoscaleMode {
    /// Its name in commands and replies.
    pub fn as_str(self) -> &'static str {
        match self {
            AutoscaleMode::On => "on",
            AutoscaleMode::Warn => "warn",
            AutoscaleMode::Off => "off",
        }
    }
}

impl std::str::FromStr for AutoscaleMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "on" => Ok(AutoscaleMode::On),
            "warn" => Ok(AutoscaleMode::Warn),
            "off" => Ok(AutoscaleMode::Off),
            other => Err(format!(
                "pg_autoscale_mode is on, warn or off, not {other:?}"
            )),
        }
    }
}

impl std::fmt::Display for AutoscaleMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the operator tells the autoscaler about a pool (Ceph's pool
/// options of the same names). All zero: nothing said.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AutoscaleOptions {
    /// The fewest PGs the autoscaler leaves it (`pg_num_min`; 0: the
    /// central `mon_pg_autoscale_pg_num_min`).
    pub pg_num_min: u32,
    /// The most PGs the autoscaler gives it (`pg_num_max`; 0: no bound).
    pub pg_num_max: u32,
    /// The bytes it is expected to hold (`target_size_bytes`; 0: none):
    /// sized for that from the start.
    pub target_size_bytes: u64,
    /// Its expected share of the capacity, relative to the other pools'
    /// (`target_size_ratio`), in millionths (0: none).
    pub target_size_ratio_micro: u64,
}

impl AutoscaleOptions {
    /// Whether anything is said (the map encodes the options only then).
    pub fn is_set(&self) -> bool {
        *self != AutoscaleOptions::default()
    }

    /// `target_size_ratio` as a number.
    pub fn target_size_ratio(&self) -> f64 {
        self.target_size_ratio_micro as f64 / 1e6
    }
}

/// How a pool keeps its objects safe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// Whole copies; CRUSH result positions may shift.
    Replicated,
    /// `k` data + `m` coding chunks; positions are fixed (indep rules).
    Erasure {
        /// Data chunks.
        k: u32,
        /// Coding chunks.
        m: u32,
    },
}

/// One pool.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pool {
    /// Id (never reused).
    pub id: u64,
    /// Name.
    pub name: String,
    /// Replicated or erasure coded.
    pub kind: PoolKind,
    /// Copies (replicated) or k + m (erasure).
    pub size: u32,
    /// Fewest acting members that may take writes.
    pub min_size: u32,
    /// Number of PGs.
    pub pg_num: u32,
    /// Number of PGs used for placement (normally `pg_num`).
    pub pgp_num: u32,
    /// CRUSH rule id.
    pub crush_rule: u32,
    /// Flags (`FLAG_HASHPSPOOL`, ...).
    pub flags: u64,
    /// Bytes of object data in one stripe of an erasure-coded pool
    /// (`k × stripe_unit`); 0 for a replicated pool.
    pub stripe_width: u32,
    /// The erasure-code profile the pool was made from (empty if none).
    pub ec_profile: String,
    /// The newest self-managed snapshot id handed out (0: none yet).
    pub snap_seq: u64,
    /// Self-managed snapshots removed, as sorted, apart `(first, count)`
    /// runs: their clones are to be trimmed.
    pub removed_snaps: Vec<(u64, u64)>,
    /// Most bytes stored (before redundancy) the pool takes; 0: no quota.
    pub quota_max_bytes: u64,
    /// Most objects the pool takes; 0: no quota.
    pub quota_max_objects: u64,
    /// What the operator told the autoscaler.
    pub autoscale: AutoscaleOptions,
}

impl Pool {
    /// A replicated pool with Ceph's defaults (hashpspool, pgp_num = pg_num).
    pub fn replicated(
        id: u64,
        name: &str,
        size: u32,
        min_size: u32,
        pg_num: u32,
        rule: u32,
    ) -> Self {
        Pool {
            id,
            name: name.to_string(),
            kind: PoolKind::Replicated,
            size,
            min_size,
            pg_num,
            pgp_num: pg_num,
            crush_rule: rule,
            flags: FLAG_HASHPSPOOL,
            stripe_width: 0,
            ec_profile: String::new(),
            snap_seq: 0,
            removed_snaps: Vec::new(),
            quota_max_bytes: 0,
            quota_max_objects: 0,
            autoscale: AutoscaleOptions::default(),
        }
    }

    /// An erasure-coded pool of `k + m` chunks of [`DEFAULT_STRIPE_UNIT`]
    /// bytes (min_size k + 1, as Ceph).
    pub fn erasure(id: u64, name: &str, k: u32, m: u32, pg_num: u32, rule: u32) -> Self {
        Pool {
            id,
            name: name.to_string(),
            kind: PoolKind::Erasure { k, m },
            size: k + m,
            min_size: (k + 1).min(k + m),
            pg_num,
            pgp_num: pg_num,
            crush_rule: rule,
            flags: FLAG_HASHPSPOOL,
            stripe_width: k.saturating_mul(DEFAULT_STRIPE_UNIT),
            ec_profile: String::new(),
            snap_seq: 0,
            removed_snaps: Vec::new(),
            quota_max_bytes: 0,
            quota_max_objects: 0,
            autoscale: AutoscaleOptions::default(),
        }
    }

    /// Whether the pool is at its quota: writes that add are refused.
    pub fn full_quota(&self) -> bool {
        self.flags & FLAG_FULL_QUOTA != 0
    }

    /// Its `pg_autoscale_mode`.
    pub fn autoscale_mode(&self) -> AutoscaleMode {
        if self.flags & FLAG_AUTOSCALE_OFF != 0 {
            AutoscaleMode::Off
        } else if self.flags & FLAG_AUTOSCALE_WARN != 0 {
            AutoscaleMode::Warn
        } else {
            AutoscaleMode::On
        }
    }

    /// Whether it is `bulk` ([`FLAG_BULK`]).
    pub fn bulk(&self) -> bool {
        self.flags & FLAG_BULK != 0
    }

    /// Sets its `pg_autoscale_mode`.
    pub fn set_autoscale_mode(&mut self, mode: AutoscaleMode) {
        self.flags &= !(FLAG_AUTOSCALE_OFF | FLAG_AUTOSCALE_WARN);
        self.flags |= match mode {
            AutoscaleMode::On => 0,
            AutoscaleMode::Warn => FLAG_AUTOSCALE_WARN,
            AutoscaleMode::Off => FLAG_AUTOSCALE_OFF,
        };
    }

    /// Whether the pool is erasure coded.
    pub fn is_erasure(&self) -> bool {
        matches!(self.kind, PoolKind::Erasure { .. })
    }

    /// An erasure-coded pool's chunk size (`stripe_width / k`); 0 for a
    /// replicated pool.
    pub fn stripe_unit(&self) -> u32 {
        match self.kind {
            PoolKind::Erasure { k, .. } if k > 0 => self.stripe_width / k,
            _ => 0,
        }
    }

    /// Whether self-managed snapshot `snap` was removed.
    pub fn is_snap_removed(&self, snap: u64) -> bool {
        let i = self
            .removed_snaps
            .partition_point(|(first, _)| *first <= snap);
        i > 0 && {
            let (first, count) = self.removed_snaps[i - 1];
            snap < first.saturating_add(count)
        }
    }

    /// Records self-managed snapshot `snap` as removed (joining runs).
    pub fn remove_snap(&mut self, snap: u64) {
        if self.is_snap_removed(snap) {
            return;
        }
        let i = self
            .removed_snaps
            .partition_point(|(first, _)| *first <= snap);
        self.removed_snaps.insert(i, (snap, 1));
        // Join with the run before and the run after where they touch.
        if i > 0 && self.removed_snaps[i - 1].0 + self.removed_snaps[i - 1].1 == snap {
            self.removed_snaps[i - 1].1 += 1;
            self.removed_snaps.remove(i);
        }
        let j = self
            .removed_snaps
            .partition_point(|(first, _)| *first <= snap)
            - 1;
        if j + 1 < self.removed_snaps.len()
            && self.removed_snaps[j].0 + self.removed_snaps[j].1 == self.removed_snaps[j + 1].0
        {
            self.removed_snaps[j].1 += self.removed_snaps[j + 1].1;
            self.removed_snaps.remove(j + 1);
        }
    }

    /// Checks the invariants every map keeps for its pools.
    pub fn validate(&self) -> crate::Result<()> {
        let limit = |what, value: u32, max: u32| crate::MapError::Limit {
            what,
            value: u64::from(value),
            max: u64::from(max),
        };
        if self.size > MAX_POOL_SIZE {
            return Err(limit("pool size", self.size, MAX_POOL_SIZE));
        }
        if self.pg_num > MAX_PG_NUM {
            return Err(limit("pg_num", self.pg_num, MAX_PG_NUM));
        }
        let shape = match self.kind {
            PoolKind::Replicated => self.stripe_width == 0,
            PoolKind::Erasure { k, m } => {
                k >= 1
                    && k.checked_add(m) == Some(self.size)
                    && self.stripe_width > 0
                    && self.stripe_width % k == 0
            }
        };
        if self.removed_snaps.len() > MAX_REMOVED_SNAP_RUNS {
            return Err(crate::MapError::Limit {
                what: "removed snapshot runs",
                value: self.removed_snaps.len() as u64,
                max: MAX_REMOVED_SNAP_RUNS as u64,
            });
        }
        let mut next = 1u64;
        for (first, count) in &self.removed_snaps {
            let end = first.checked_add(*count);
            if *count == 0 || *first < next || end.is_none_or(|e| e - 1 > self.snap_seq) {
                return Err(crate::MapError::Invalid(format!(
                    "pool {}: removed snapshots {:?} are not sorted, apart runs within 1..={}",
                    self.name, self.removed_snaps, self.snap_seq
                )));
            }
            // Apart: the next run starts past this one's end.
            next = end.unwrap_or(u64::MAX).saturating_add(1);
        }
        let a = &self.autoscale;
        if a.pg_num_min > MAX_PG_NUM || a.pg_num_max > MAX_PG_NUM {
            return Err(limit(
                "pg_num_min or pg_num_max",
                a.pg_num_min.max(a.pg_num_max),
                MAX_PG_NUM,
            ));
        }
        let ok = shape
            && (a.pg_num_max == 0 || a.pg_num_min <= a.pg_num_max)
            && self.size > 0
            && self.min_size <= self.size
            && self.pg_num > 0
            && self.pgp_num > 0
            && self.pgp_num <= self.pg_num;
        if ok {
            Ok(())
        } else {
            Err(crate::MapError::Invalid(format!(
                "pool {} ({})",
                self.id, self.name
            )))
        }
    }

    /// Replicated pools drop missing members and shift the rest left;
    /// erasure-coded pools keep positions (`can_shift_osds`).
    pub fn can_shift_osds(&self) -> bool {
        self.kind == PoolKind::Replicated
    }

    /// `hash_key`: the object-name hash, namespace first with a 0x1f separator.
    pub fn hash_key(&self, name: &str, namespace: &str) -> u32 {
        if namespace.is_empty() {
            return str_hash_rjenkins(name.as_bytes());
        }
        let mut buf = Vec::with_capacity(namespace.len() + 1 + name.len());
        buf.extend_from_slice(namespace.as_bytes());
        buf.push(0x1f);
        buf.extend_from_slice(name.as_bytes());
        str_hash_rjenkins(&buf)
    }

    /// The PG an object belongs to.
    pub fn object_pg(&self, name: &str, namespace: &str) -> PgId {
        self.raw_pg_to_pg(self.hash_key(name, namespace))
    }

    /// Folds a raw seed (a full 32-bit hash) into `0..pg_num`.
    pub fn raw_pg_to_pg(&self, raw_seed: u32) -> PgId {
        PgId {
            pool: self.id,
            seed: stable_mod(raw_seed, self.pg_num, pg_mask(self.pg_num)),
        }
    }

    /// The CRUSH input for a PG (`raw_pg_to_pps`).
    pub fn pps(&self, seed: u32) -> u32 {
        let ps = stable_mod(seed, self.pgp_num, pg_mask(self.pgp_num));
        if self.flags & FLAG_HASHPSPOOL != 0 {
            shoal_crush::hash::hash32_2(ps, self.id as u32)
        } else {
            ps.wrapping_add(self.id as u32)
        }
    }
}

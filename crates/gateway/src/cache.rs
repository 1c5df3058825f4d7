//! The gateway's cache of user and bucket records, kept coherent across
//! gateways with watch/notify (as radosgw's metadata cache): every gateway
//! watches one control object; whoever changes a record (a gateway, or
//! `shoal gateway user ...`) notifies it with the record's name once the
//! change is in the cluster, and each watcher drops the record before it
//! acknowledges. So when a change returns, no live gateway serves the old
//! record. A request then needs no cluster read to learn who signed it or
//! what bucket it names.
//!
//! What a notify cannot reach is covered otherwise: while the watch is not
//! known to stand (renewals failing) nothing is served from the cache; when
//! the watch is registered anew (its primary changed, or renewals had
//! failed) a notify may have missed it, so the cache starts empty again;
//! a fill that read the cluster before an invalidation is not kept; and
//! every record expires after [`TTL`] whatever happens.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use shoal_client::WatchHealth;

/// The object every gateway watches for changes of user and bucket records.
pub const CONTROL: &str = "gateway.control";

/// How long a record is served from the cache at most.
pub const TTL: Duration = Duration::from_secs(60);

/// How long a change waits for the gateways to drop what it changed.
pub const NOTIFY_TIMEOUT: Duration = Duration::from_secs(2);

/// Records kept at most (past it the cache starts again).
const MAX_ENTRIES: usize = 65_536;

/// What a notify on [`CONTROL`] carries: the omap keys of one record
/// object that changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changed {
    /// The record object (`users`, `buckets`).
    pub oid: String,
    /// Its keys that changed.
    pub keys: Vec<String>,
}

/// One record object's cached values by omap key, with when each was read.
type Records = HashMap<String, (Bytes, Instant)>;

/// Cached records by (object, omap key).
#[derive(Debug)]
pub struct Cache {
    /// Record object → omap key → (value, when read): looked up by
    /// `&str` without building a key per request.
    entries: Mutex<HashMap<String, Records>>,
    /// Moves with every invalidation: a fill that read before it is not kept.
    generation: AtomicU64,
    health: WatchHealth,
    /// The watch's gap count the cache was last emptied for.
    gaps_seen: AtomicU64,
    /// The watch ended: nothing is served.
    ended: AtomicBool,
}

impl Cache {
    /// An empty cache kept coherent by the watch `health` tells about.
    pub fn new(health: WatchHealth) -> Cache {
        let gaps = health.gaps();
        Cache {
            entries: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
            health,
            gaps_seen: AtomicU64::new(gaps),
            ended: AtomicBool::new(false),
        }
    }

    /// Whether cached records may be served now (emptying the cache if
    /// the watch may have missed a notify since it was last emptied).
    fn usable(&self) -> bool {
        if self.ended.load(Ordering::Acquire) || !self.health.healthy() {
            self.clear();
            return false;
        }
        let gaps = self.health.gaps();
        if self.gaps_seen.swap(gaps, Ordering::AcqRel) != gaps {
            self.clear();
        }
        true
    }

    /// The generation to hand to [`Cache::fill`] for a read starting now.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The cached value of `key` in `oid`, if fresh and servable.
    pub fn get(&self, oid: &str, key: &str) -> Option<Bytes> {
        if !self.usable() {
            return None;
        }
        let m = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        match m.get(oid).and_then(|o| o.get(key)) {
            Some((v, at)) if at.elapsed() < TTL => Some(v.clone()),
            _ => None,
        }
    }

    /// Keeps `value`, read from the cluster when the generation was
    /// `generation`, unless something was invalidated since.
    pub fn fill(&self, oid: &str, key: &str, value: Bytes, generation: u64) {
        if !self.usable() {
            return;
        }
        let mut m = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if self.generation.load(Ordering::Acquire) != generation {
            return;
        }
        if m.values().map(Records::len).sum::<usize>() >= MAX_ENTRIES {
            m.clear();
        }
        m.entry(oid.to_string())
            .or_default()
            .insert(key.to_string(), (value, Instant::now()));
    }

    /// Drops what `changed` names.
    pub fn invalidate(&self, changed: &Changed) {
        let mut m = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        self.generation.fetch_add(1, Ordering::AcqRel);
        if let Some(o) = m.get_mut(&changed.oid) {
            for k in &changed.keys {
                o.remove(k);
            }
        }
    }

    /// Drops everything.
    pub fn clear(&self) {
        let mut m = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        self.generation.fetch_add(1, Ordering::AcqRel);
        m.clear();
    }

    /// The watch is gone for good: serve nothing from now on.
    pub fn end(&self) {
        self.ended.store(true, Ordering::Release);
        self.clear();
    }

    /// How many records are cached.
    pub fn len(&self) -> usize {
        let m = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        m.values().map(Records::len).sum()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

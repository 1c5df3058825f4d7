//! The snapshot client: one more client, with objects of its own, that
//! takes self-managed snapshots of the pool (ids from the monitors),
//! writes under its snapshot context, removes snapshots and reads objects
//! at the snapshots it keeps, while the nemesis works — then, once the
//! cluster is clean, reads every object at every snapshot again.
//!
//! A read at snapshot S must return what the object held when S was
//! taken: the value of the last write answered before S was taken, or of
//! a write that failed before it (a failed write may still have taken
//! effect, even later, under the context it was sent with). The client
//! writes one op at a time, so every write after S carries S in its
//! context: the first one keeps the object's value in a clone for S. The
//! trimming of removed snapshots must leave the clones of the others.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use shoal_client::{Client, Error, Pool, SnapContext};
use shoal_testkit::simnet::SimRng;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::history::Value;
use crate::trace::Trace;

/// Objects the snapshot client writes (no other client touches them).
pub const OBJECTS: usize = 4;

/// One snapshot the client keeps, with what each object may read at it.
#[derive(Debug, Clone)]
struct Snap {
    id: u64,
    expect: BTreeMap<String, Vec<Value>>,
}

/// What the snapshot client knows.
#[derive(Debug, Default)]
pub struct SnapState {
    objects: Vec<String>,
    /// The newest snapshot id taken.
    seq: u64,
    /// The snapshots kept, oldest first.
    live: Vec<Snap>,
    /// Each object's value as its last answered write left it.
    acked: BTreeMap<String, Value>,
    /// Each object's values written by writes that failed.
    failed: BTreeMap<String, Vec<String>>,
    /// Reads at a snapshot that saw something else.
    violations: Vec<String>,
    /// Snapshots taken, removed; reads at snapshots checked.
    pub counts: (usize, usize, usize),
}

/// The running snapshot client.
#[derive(Debug)]
pub struct SnapWorkload {
    stop: Arc<AtomicBool>,
    task: JoinHandle<SnapState>,
}

fn ms_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl SnapState {
    fn context(&self) -> SnapContext {
        SnapContext {
            seq: self.seq,
            snaps: self.live.iter().rev().map(|s| s.id).collect(),
        }
    }

    /// What `object` may read at a snapshot taken now.
    fn possible(&self, object: &str) -> Vec<Value> {
        let mut v = vec![self.acked.get(object).cloned().flatten()];
        if let Some(f) = self.failed.get(object) {
            v.extend(f.iter().cloned().map(Some));
        }
        v
    }

    /// Checks one read of `object` at snapshot `snap` (None: it failed).
    fn check(&mut self, snap: usize, object: &str, read: Value, when: &str) {
        let s = &self.live[snap];
        let ok = s.expect.get(object).is_some_and(|e| e.contains(&read));
        self.counts.2 += 1;
        if !ok {
            self.violations.push(format!(
                "{when}: {object} at snapshot {} read {read:?}, not one of {:?}",
                s.id,
                s.expect.get(object)
            ));
        }
    }
}

/// Reads `object` at snapshot `id`: Ok(None) if it did not exist then.
async fn read_at(pool: &Pool, id: u64, object: &str) -> Result<Value, String> {
    match pool.at_snap(id).read(object, 0, 0).await {
        Ok(b) => Ok(Some(String::from_utf8_lossy(&b).into_owned())),
        Err(Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

impl SnapWorkload {
    /// Starts the snapshot client on `client` (which may create and
    /// remove snapshots of pool `rbd`).
    pub fn start(client: Client, seed: u64, trace: &Trace, start: Instant) -> SnapWorkload {
        let stop = Arc::new(AtomicBool::new(false));
        let trace = trace.clone();
        let stopping = Arc::clone(&stop);
        let task = tokio::spawn(async move {
            let mut rng = SimRng::new(seed);
            let mut st = SnapState {
                objects: (0..OBJECTS).map(|i| format!("snapobj{i}")).collect(),
                ..SnapState::default()
            };
            let Ok(pool) = client.pool("rbd") else {
                st.violations.push("no pool rbd".into());
                return st;
            };
            let mut n = 0u64;
            while !stopping.load(Ordering::Relaxed) {
                let at = || ms_since(start);
                let roll = rng.range(0, 99);
                if roll < 50 {
                    let Some(object) = rng.pick(&st.objects).cloned() else {
                        break;
                    };
                    n += 1;
                    let value = format!("s-{n}");
                    let w = pool.with_snap_context(st.context());
                    let r = w.write_full(&object, Bytes::from(value.clone())).await;
                    trace.line(at(), format!("snapclient write {object} {value}: {r:?}"));
                    match r {
                        Ok(()) => {
                            st.acked.insert(object, Some(value));
                        }
                        Err(_) => st.failed.entry(object).or_default().push(value),
                    }
                } else if roll < 62 || st.live.is_empty() {
                    match pool.selfmanaged_snap_create().await {
                        Ok(id) => {
                            let expect = st
                                .objects
                                .iter()
                                .map(|o| (o.clone(), st.possible(o)))
                                .collect();
                            st.seq = st.seq.max(id);
                            st.live.push(Snap { id, expect });
                            st.counts.0 += 1;
                            trace.line(at(), format!("snapclient snapshot {id}"));
                        }
                        Err(e) => trace.line(at(), format!("snapclient snapshot failed: {e}")),
                    }
                } else if roll < 72 {
                    let i = rng.range(0, st.live.len() as u64 - 1) as usize;
                    let s = st.live.remove(i);
                    // Dropped from the context whatever the answer: at worst
                    // its clones stay untrimmed.
                    let r = pool.selfmanaged_snap_remove(s.id).await;
                    st.counts.1 += 1;
                    trace.line(at(), format!("snapclient remove snapshot {}: {r:?}", s.id));
                } else {
                    let i = rng.range(0, st.live.len() as u64 - 1) as usize;
                    let Some(object) = rng.pick(&st.objects).cloned() else {
                        break;
                    };
                    let id = st.live[i].id;
                    let r = read_at(&pool, id, &object).await;
                    trace.line(at(), format!("snapclient read {object}@{id}: {r:?}"));
                    if let Ok(v) = r {
                        st.check(i, &object, v, &format!("at {} ms", at()));
                    }
                }
                tokio::time::sleep(Duration::from_millis(rng.range(0, 40))).await;
            }
            st
        });
        SnapWorkload { stop, task }
    }

    /// Stops the client after its current op.
    pub async fn stop(self) -> SnapState {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or_else(|e| SnapState {
            violations: vec![format!("the snapshot client failed: {e}")],
            ..SnapState::default()
        })
    }
}

/// Once the cluster is clean: every object read at every kept snapshot
/// (retrying what fails); the first wrong read, if any.
pub async fn final_check(
    client: &Client,
    mut st: SnapState,
    trace: &Trace,
    start: Instant,
) -> Result<SnapState, String> {
    let pool = client.pool("rbd").map_err(|e| e.to_string())?;
    for i in 0..st.live.len() {
        for object in st.objects.clone() {
            let id = st.live[i].id;
            let mut last = String::new();
            let mut read = None;
            for _ in 0..5 {
                match read_at(&pool, id, &object).await {
                    Ok(v) => {
                        read = Some(v);
                        break;
                    }
                    Err(e) => last = e,
                }
            }
            let at = ms_since(start);
            trace.line(at, format!("final snapclient read {object}@{id}: {read:?}"));
            match read {
                Some(v) => st.check(i, &object, v, "after healing"),
                None => {
                    return Err(format!("{object} at snapshot {id} unreadable: {last}"));
                }
            }
        }
    }
    match st.violations.first() {
        Some(v) => Err(format!(
            "snapshot reads: {v} ({} wrong)",
            st.violations.len()
        )),
        None => Ok(st),
    }
}

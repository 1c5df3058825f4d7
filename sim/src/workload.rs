//! The clients: each writes unique values to, and reads, objects picked
//! by its own seeded generator, one op at a time, and records every op's
//! call, answer and outcome for the history checker.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use shoal_client::{Client, Error, OpObserver};
use shoal_maps::OsdMap;
use shoal_testkit::simnet::SimRng;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::history::{Kind, Op, Outcome};
use crate::trace::Trace;

/// Running clients.
#[derive(Debug)]
pub struct Workload {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
    history: Arc<Mutex<Vec<Op>>>,
}

fn ms_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// What one client saw: when each of its op attempts was sent, and each
/// OSD map it received (for the resend check).
#[derive(Debug)]
pub struct ClientLog {
    start: Instant,
    sends_ms: Mutex<Vec<u64>>,
    maps: Mutex<Vec<(u64, Arc<OsdMap>)>>,
}

impl OpObserver for ClientLog {
    fn sent(&self, _tid: u64, _oid: &str, _epoch: u32) {
        lock(&self.sends_ms).push(ms_since(self.start));
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ClientLog {
    /// An empty log with times from `start`.
    pub fn new(start: Instant) -> Arc<ClientLog> {
        Arc::new(ClientLog {
            start,
            sends_ms: Mutex::default(),
            maps: Mutex::default(),
        })
    }

    /// Records every map `client` receives, until it shuts down.
    pub fn follow(self: &Arc<Self>, client: &Client) {
        let mut rx = client.map_watch();
        let log = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                let map = rx.borrow_and_update().clone();
                if let Some(map) = map {
                    lock(&log.maps).push((ms_since(log.start), map));
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        });
    }

    /// The sends since the last call (a client runs one op at a time).
    fn take_sends(&self) -> Vec<u64> {
        std::mem::take(&mut *lock(&self.sends_ms))
    }

    /// The maps received, with when.
    pub fn maps(&self) -> Vec<(u64, Arc<OsdMap>)> {
        lock(&self.maps).clone()
    }
}

/// Reads `object` through `client`, as the history records it.
async fn read(client: &Client, log: &ClientLog, n: usize, object: &str, start: Instant) -> Op {
    log.take_sends();
    let call_ms = ms_since(start);
    let outcome = match client.pool("rbd") {
        Ok(pool) => match pool.read(object, 0, 0).await {
            Ok(b) => Outcome::Ok {
                at_ms: ms_since(start),
                read: Some(String::from_utf8_lossy(&b).into_owned()),
            },
            Err(Error::NotFound(_)) => Outcome::Ok {
                at_ms: ms_since(start),
                read: None,
            },
            Err(e) => Outcome::Failed(e.to_string()),
        },
        Err(e) => Outcome::Failed(e.to_string()),
    };
    Op {
        client: n,
        object: object.to_string(),
        kind: Kind::Read,
        call_ms,
        end_ms: ms_since(start),
        sends_ms: log.take_sends(),
        outcome,
    }
}

async fn write(
    client: &Client,
    log: &ClientLog,
    n: usize,
    object: &str,
    value: String,
    start: Instant,
) -> Op {
    log.take_sends();
    let call_ms = ms_since(start);
    let result = match client.pool("rbd") {
        Ok(pool) => pool
            .write_full(object, Bytes::from(value.clone().into_bytes()))
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    Op {
        client: n,
        object: object.to_string(),
        kind: Kind::Write(value),
        call_ms,
        end_ms: ms_since(start),
        sends_ms: log.take_sends(),
        outcome: match result {
            Ok(()) => Outcome::Ok {
                at_ms: ms_since(start),
                read: None,
            },
            Err(e) => Outcome::Failed(e),
        },
    }
}

fn summary(op: &Op) -> String {
    let what = match &op.kind {
        Kind::Write(v) => format!("write {} {v}", op.object),
        Kind::Read => format!("read {}", op.object),
    };
    match &op.outcome {
        Outcome::Ok { read: Some(v), .. } => format!("client.{} {what} -> {v}", op.client),
        Outcome::Ok { read: None, .. } if op.kind == Kind::Read => {
            format!("client.{} {what} -> absent", op.client)
        }
        Outcome::Ok { .. } => format!("client.{} {what} ok", op.client),
        Outcome::Failed(e) => format!("client.{} {what} failed: {e}", op.client),
    }
}

impl Workload {
    /// Starts one task per client.
    pub fn start(
        clients: &[(Client, Arc<ClientLog>)],
        objects: &[String],
        seed: u64,
        trace: &Trace,
        start: Instant,
    ) -> Workload {
        let stop = Arc::new(AtomicBool::new(false));
        let history = Arc::new(Mutex::new(Vec::new()));
        let mut seeds = SimRng::new(seed);
        let tasks = clients
            .iter()
            .enumerate()
            .map(|(n, (c, log))| {
                let (c, log) = (c.clone(), Arc::clone(log));
                let (objects, trace) = (objects.to_vec(), trace.clone());
                let (stop, history) = (Arc::clone(&stop), Arc::clone(&history));
                let mut rng = SimRng::new(seeds.next_u64());
                tokio::spawn(async move {
                    let mut seq = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let Some(object) = rng.pick(&objects).cloned() else {
                            return;
                        };
                        let op = if rng.chance(1, 2) {
                            seq += 1;
                            write(&c, &log, n, &object, format!("c{n}-{seq}"), start).await
                        } else {
                            read(&c, &log, n, &object, start).await
                        };
                        trace.line(ms_since(start), summary(&op));
                        history
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(op);
                        tokio::time::sleep(Duration::from_millis(rng.range(0, 40))).await;
                    }
                })
            })
            .collect();
        Workload {
            stop,
            tasks,
            history,
        }
    }

    /// Stops the clients after their current op; returns the history.
    pub async fn stop(self) -> Vec<Op> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            let _ = t.await;
        }
        std::mem::take(&mut *self.history.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The client number of [`read_all`]'s reads (made with the first client).
pub const READ_ALL: usize = 99;

/// Reads every object once more (retrying what fails), for the history.
pub async fn read_all(
    (client, log): &(Client, Arc<ClientLog>),
    objects: &[String],
    trace: &Trace,
    start: Instant,
) -> Vec<Op> {
    let mut out = Vec::new();
    for object in objects {
        for _ in 0..5 {
            let op = read(client, log, READ_ALL, object, start).await;
            trace.line(ms_since(start), format!("final {}", summary(&op)));
            let done = matches!(op.outcome, Outcome::Ok { .. });
            out.push(op);
            if done {
                break;
            }
        }
    }
    out
}

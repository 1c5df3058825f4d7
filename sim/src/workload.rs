//! The clients: each writes unique values to, and reads, objects picked
//! by its own seeded generator, one op at a time, and records every op's
//! call, answer and outcome for the history checker.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use shoal_client::{Client, Error};
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

/// Reads `object` through `client`, as the history records it.
async fn read(client: &Client, n: usize, object: &str, start: Instant) -> Op {
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
        outcome,
    }
}

async fn write(client: &Client, n: usize, object: &str, value: String, start: Instant) -> Op {
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
        clients: &[Client],
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
            .map(|(n, c)| {
                let (c, objects, trace) = (c.clone(), objects.to_vec(), trace.clone());
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
                            write(&c, n, &object, format!("c{n}-{seq}"), start).await
                        } else {
                            read(&c, n, &object, start).await
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

/// Reads every object once more (retrying what fails), for the history.
pub async fn read_all(
    client: &Client,
    objects: &[String],
    trace: &Trace,
    start: Instant,
) -> Vec<Op> {
    let mut out = Vec::new();
    for object in objects {
        for _ in 0..5 {
            let op = read(client, 99, object, start).await;
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

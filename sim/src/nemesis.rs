//! The nemesis: for the fault phase, it picks a fault now and then —
//! crash an OSD or a monitor, restart one, cut two nodes apart (or, with
//! black holes on, drop what crosses silently, one way or both), slow a
//! link, heal the network, mark an OSD out or in, create or delete a
//! scratch pool — applies it, and runs the invariant checkers after each.

use std::time::Duration;

use shoal_testkit::simnet::Latency;
use tokio::time::Instant;

use crate::invariants;
use crate::world::{OsdState, World};

/// At most this many OSDs crashed at once.
const CRASHED_MAX: usize = 2;
/// At most this many OSDs out at once (the pool keeps 3 places).
const OUT_MAX: usize = 2;

/// A fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Kill an OSD.
    Crash(i32),
    /// Start a killed OSD again.
    Restart(i32),
    /// Cut two nodes apart.
    Partition(String, String),
    /// Slow the link between two nodes.
    Slow(String, String, Latency),
    /// End every partition and slow link.
    Heal,
    /// Mark an OSD out.
    Out(i32),
    /// Mark an OSD in.
    In(i32),
    /// Stop a monitor as a crash would.
    MonCrash(String),
    /// Start a crashed monitor again.
    MonRestart(String),
    /// Create the scratch pool (PGs appear while OSDs follow the maps).
    PoolCreate,
    /// Delete the scratch pool.
    PoolRm,
    /// Double the clients' pool's `pg_num` (up to [`SPLIT_PG_NUM_MAX`]).
    Split,
    /// Black-hole what goes from the first node to the second (and back
    /// too, when the flag says both ways) until the network heals.
    BlackHole(String, String, bool),
}

/// The most PGs splits grow the clients' pool to.
pub const SPLIT_PG_NUM_MAX: u32 = 64;

/// The pool the nemesis creates and deletes (the clients use `rbd`).
pub const SCRATCH: &str = "scratch";

fn nodes(w: &World) -> Vec<String> {
    let mut out: Vec<String> = w.mons.keys().map(|m| format!("mon.{m}")).collect();
    out.extend(w.osds.keys().map(|id| format!("osd.{id}")));
    out.extend((0..w.cfg.clients).map(|n| format!("client.sim{n}")));
    out
}

/// Picks the next fault.
fn choose(w: &mut World) -> Fault {
    let ids: Vec<i32> = w.osds.keys().copied().collect();
    let running = w.osds_where(|s| matches!(s.state, OsdState::Running(_)));
    let crashed = w.osds_where(|s| matches!(s.state, OsdState::Crashed));
    let outs = w.osds_where(|s| s.out);
    let scratch = w
        .newest_map()
        .is_some_and(|m| m.pool_by_name(SCRATCH).is_some());
    loop {
        let roll = w.rng.range(0, 99);
        let pick = |w: &mut World, v: &[i32]| w.rng.pick(v).copied();
        // With splits on, one roll in ten grows the pool (the other
        // faults keep their rolls, so runs without splits stay as they were).
        if w.cfg.splits && w.rng.range(0, 9) == 0 {
            let pg_num = w
                .newest_map()
                .and_then(|m| m.pool_by_name("rbd").map(|p| p.pg_num))
                .unwrap_or(SPLIT_PG_NUM_MAX);
            if pg_num < SPLIT_PG_NUM_MAX {
                return Fault::Split;
            }
        }
        // With black holes on, one roll in five makes one (the other
        // faults keep their rolls).
        if w.cfg.black_holes && w.rng.range(0, 4) == 0 {
            let all = nodes(w);
            let a = w.rng.pick(&all).cloned();
            let b = w.rng.pick(&all).cloned();
            let both = w.rng.chance(1, 2);
            let lone_mon = w.mons.len() == 1;
            if let (Some(a), Some(b)) = (a, b)
                && a != b
                && !(lone_mon && (a.starts_with("mon") || b.starts_with("mon")))
            {
                return Fault::BlackHole(a, b, both);
            }
        }
        let fault = match roll {
            0..=19 if ids.len() - running.len() < CRASHED_MAX => {
                pick(w, &running).map(Fault::Crash)
            }
            20..=34 => pick(w, &crashed).map(Fault::Restart),
            35..=54 => {
                let all = nodes(w);
                let a = w.rng.pick(&all).cloned();
                let b = w.rng.pick(&all).cloned();
                // A lone monitor is not cut from the clients: they would
                // have no quorum to ask.
                let lone_mon = w.mons.len() == 1;
                match (a, b) {
                    (Some(a), Some(b))
                        if a != b
                            && !(lone_mon && a.starts_with("client") && b.starts_with("mon")) =>
                    {
                        Some(Fault::Partition(a, b))
                    }
                    _ => None,
                }
            }
            55..=64 => {
                let all = nodes(w);
                let a = w.rng.pick(&all).cloned();
                let b = w.rng.pick(&all).cloned();
                let max_ms = w.rng.range(50, 3000);
                match (a, b) {
                    (Some(a), Some(b)) if a != b => Some(Fault::Slow(
                        a,
                        b,
                        Latency {
                            min_ms: max_ms / 4,
                            max_ms,
                        },
                    )),
                    _ => None,
                }
            }
            65..=77 => Some(Fault::Heal),
            78..=88 if outs.len() < OUT_MAX => {
                let ins: Vec<i32> = ids.iter().copied().filter(|i| !outs.contains(i)).collect();
                pick(w, &ins).map(Fault::Out)
            }
            89..=95 => pick(w, &outs).map(Fault::In),
            96..=97 => Some(if scratch {
                Fault::PoolRm
            } else {
                Fault::PoolCreate
            }),
            98..=99 if w.mons.len() > 1 => {
                // One monitor down at a time: the other two keep a quorum.
                let (down, up) = (w.mons_up(false), w.mons_up(true));
                match down.first() {
                    Some(n) => Some(Fault::MonRestart(n.clone())),
                    None => w.rng.pick(&up).cloned().map(Fault::MonCrash),
                }
            }
            _ => None,
        };
        if let Some(f) = fault {
            return f;
        }
    }
}

async fn apply(w: &mut World, f: &Fault) -> Result<(), String> {
    match f {
        Fault::Crash(id) => w.crash_osd(*id),
        Fault::Restart(id) => w.restart_osd(*id),
        Fault::Partition(a, b) => {
            w.net.partition(a, b);
            w.note(format!("partition {a} | {b}"));
        }
        Fault::Slow(a, b, l) => {
            w.net.slow(a, b, *l);
            w.note(format!("slow {a} - {b}: {}-{} ms", l.min_ms, l.max_ms));
        }
        Fault::BlackHole(a, b, both) => {
            w.black_holes += 1;
            w.net.black_hole(a, b);
            if *both {
                w.net.black_hole(b, a);
            }
            w.note(format!(
                "black hole {a} {} {b}",
                if *both { "<->" } else { "->" }
            ));
        }
        Fault::Heal => {
            w.net.heal();
            w.note("heal the network");
        }
        Fault::Out(id) => w.set_out(*id, true).await?,
        Fault::In(id) => w.set_out(*id, false).await?,
        Fault::MonCrash(m) => w.crash_mon(m).await,
        Fault::MonRestart(m) => w.restart_mon(m).await?,
        Fault::PoolCreate => {
            w.command(shoal_mon::Command::PoolCreate {
                name: SCRATCH.into(),
                pg_num: 4,
                spec: shoal_mon::PoolSpec::Replicated {
                    size: 2,
                    min_size: 1,
                },
                set: Vec::new(),
            })
            .await?;
            w.note("pool scratch created");
        }
        Fault::Split => {
            let pg_num = w
                .newest_map()
                .and_then(|m| m.pool_by_name("rbd").map(|p| p.pg_num))
                .unwrap_or(SPLIT_PG_NUM_MAX);
            let to = (pg_num * 2).min(SPLIT_PG_NUM_MAX);
            w.command(shoal_mon::Command::PoolSet {
                name: "rbd".into(),
                key: "pg_num".into(),
                value: to.to_string(),
            })
            .await?;
            w.note(format!("pool rbd split: pg_num {pg_num} → {to}"));
        }
        Fault::PoolRm => {
            w.command(shoal_mon::Command::PoolRm {
                name: SCRATCH.into(),
                sure: true,
            })
            .await?;
            w.note("pool scratch deleted");
        }
    }
    Ok(())
}

/// Runs the fault phase; returns how many faults it injected.
pub async fn run(w: &mut World) -> Result<usize, String> {
    let end = Instant::now() + w.cfg.faults;
    let mut n = 0;
    while Instant::now() < end {
        // Between faults, look at the PGs' states every 250 ms.
        let pause = Instant::now() + Duration::from_millis(w.rng.range(200, 2500));
        while Instant::now() < pause {
            let step = Duration::from_millis(250).min(pause - Instant::now());
            tokio::time::sleep(step).await;
            w.sample_states().await;
        }
        w.settle_starts().await;
        let f = choose(w);
        // A fault the monitors must carry out fails while the nemesis has
        // taken their quorum away: the run goes on without it.
        if let Err(e) = apply(w, &f).await {
            w.note(format!("could not {f:?}: {e}"));
        }
        n += 1;
        invariants::check(w).map_err(|e| format!("after {f:?}: {e}"))?;
        w.sample_states().await;
    }
    Ok(n)
}

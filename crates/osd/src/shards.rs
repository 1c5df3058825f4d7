//! The OSD's op shards (Ceph's `osd_op_num_shards`): a fixed number of
//! threads, each running a single-threaded tokio runtime, over which the
//! PGs are spread by their id. A PG's work — its ops, store calls,
//! replication, replies, peering and recovery tasks — runs to completion on
//! its shard's thread: nothing is stolen by another worker, store calls run
//! inline (on a current-thread runtime `shoal_net::runtime::blocking` does
//! not hand the thread off as `block_in_place` does), and PGs of different
//! shards share no lock.
//!
//! Shard 0 is the runtime the OSD was started on: in the daemon, its main
//! thread, which also runs the messenger, heartbeats and the monitor
//! client; shards 1.. are threads of their own. With one shard (the
//! default in-process, and always in the simulation) every PG runs on the
//! caller's runtime, as before shards existed.

use std::sync::Mutex;

use shoal_maps::PgId;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The threads of shards 1.. and a way to stop them.
#[derive(Debug)]
pub struct Shards {
    extra: Vec<Handle>,
    /// Dropping a sender ends its shard's thread (and every task on it).
    stops: Mutex<Vec<oneshot::Sender<()>>>,
}

impl Shards {
    /// Starts `count - 1` shard threads (shard 0 is the caller's runtime).
    pub fn start(count: usize, osd: i32) -> std::io::Result<Shards> {
        let mut extra = Vec::new();
        let mut stops = Vec::new();
        for i in 1..count.max(1) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            extra.push(rt.handle().clone());
            let (stop, stopped) = oneshot::channel::<()>();
            stops.push(stop);
            std::thread::Builder::new()
                .name(format!("osd.{osd}-shard{i}"))
                .spawn(move || {
                    // A daemon's thread: long store calls leave it.
                    shoal_net::runtime::offload_to_blocking_pool();
                    // Returns when the sender is sent to or dropped; the
                    // runtime's drop then cancels the shard's tasks.
                    let _ = rt.block_on(stopped);
                })?;
        }
        Ok(Shards {
            extra,
            stops: Mutex::new(stops),
        })
    }

    /// How many shards there are.
    pub fn count(&self) -> usize {
        1 + self.extra.len()
    }

    /// The shard PG `pg` runs on.
    pub fn of(&self, pg: PgId) -> usize {
        shard_of(pg, self.count())
    }

    /// Runs `fut` on PG `pg`'s shard.
    pub fn spawn<F>(&self, pg: PgId, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match self.of(pg) {
            0 => drop(tokio::spawn(fut)),
            i => drop(self.extra[i - 1].spawn(fut)),
        }
    }

    /// Ends every shard thread, cancelling what still runs there.
    pub fn stop(&self) {
        self.stops.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

impl Drop for Shards {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The shard of `pg` among `count`: consecutive seeds of a pool go to
/// consecutive shards, and pools start at different shards.
fn shard_of(pg: PgId, count: usize) -> usize {
    if count <= 1 {
        return 0;
    }
    let mixed = pg
        .pool
        .wrapping_mul(0x9E37_79B9)
        .wrapping_add(u64::from(pg.seed));
    (mixed % count as u64) as usize
}

/// The number of shards option `osd_op_num_shards` asks for (0: one per core).
pub fn shards_for(option: u32) -> usize {
    match option {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n as usize,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shard_takes_every_pg() {
        for seed in 0..64 {
            assert_eq!(shard_of(PgId { pool: 3, seed }, 1), 0);
        }
    }

    #[test]
    fn a_pool_s_pgs_spread_evenly_over_the_shards() {
        for count in 2..6 {
            let mut per = vec![0u32; count];
            for seed in 0..(32 * count as u32) {
                per[shard_of(PgId { pool: 7, seed }, count)] += 1;
            }
            assert!(per.iter().all(|n| *n == 32), "{count} shards: {per:?}");
        }
    }

    #[tokio::test]
    async fn a_pg_runs_on_its_shard_thread_and_stop_ends_the_threads() {
        let shards = Shards::start(3, 0).expect("threads");
        assert_eq!(shards.count(), 3);
        let here = std::thread::current().id();
        for seed in 0..6 {
            let pg = PgId { pool: 1, seed };
            let (tx, rx) = oneshot::channel();
            shards.spawn(pg, async move {
                let _ = tx.send(std::thread::current().id());
            });
            let ran_on = rx.await.expect("ran");
            assert_eq!(ran_on == here, shards.of(pg) == 0, "pg {pg}");
        }
        // A task still running on a stopped shard is cancelled: its
        // sender drops without sending.
        let pg = (0..6)
            .map(|seed| PgId { pool: 1, seed })
            .find(|pg| shards.of(*pg) != 0)
            .expect("a pg off shard 0");
        let (tx, rx) = oneshot::channel::<()>();
        shards.spawn(pg, async move {
            std::future::pending::<()>().await;
            drop(tx);
        });
        shards.stop();
        assert!(rx.await.is_err());
    }
}

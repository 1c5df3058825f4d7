//! Runtime helpers that keep a daemon deterministic under simulation.
//!
//! Daemons run on a multi-threaded tokio runtime in production and on one
//! thread with a paused (virtual) clock in the deterministic simulation.
//! Three things differ between the two, and every daemon goes through
//! these helpers for them:
//!
//! - **Blocking store calls** ([`blocking`], [`offload`]): on a
//!   multi-threaded runtime they leave the worker thread (`block_in_place`,
//!   `spawn_blocking`); on a current-thread runtime they run inline, so no
//!   other thread's timing changes the order of events — unless the
//!   thread is a daemon's (an OSD's op shard), which says so with
//!   [`offload_to_blocking_pool`]: its long store calls (a 4 MiB write or
//!   a recovery read) then go to the blocking pool, and the shard's other
//!   PGs run meanwhile.
//! - **Wall-clock time** ([`now_ms`]): the system clock, or, on a thread
//!   that called [`simulate_wall_clock`], a clock that starts at a fixed
//!   instant and advances with tokio's (virtual) time.
//! - **Elapsed time**: daemons use `tokio::time::Instant`, which is the
//!   monotonic clock in production and the virtual one under simulation.
//! - **Randomness that steers behaviour** (Raft election timeouts):
//!   [`simulated_random`] draws from a generator seeded by
//!   [`simulate_randomness`] on this thread, and is `None` elsewhere, where
//!   callers use the operating system's randomness.

use std::cell::Cell;

use tokio::runtime::{Handle, RuntimeFlavor};

fn multi_threaded() -> bool {
    Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread)
}

/// Runs `f`, which may block on the store: off the async worker on a
/// multi-threaded runtime (`block_in_place`), inline otherwise.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    if multi_threaded() {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

thread_local! {
    static TO_POOL: Cell<bool> = const { Cell::new(false) };
}

/// From now on, on this thread, [`offload`] uses the runtime's blocking
/// pool even when the runtime is current-thread: for a daemon's threads,
/// which no simulation replays.
pub fn offload_to_blocking_pool() {
    TO_POOL.with(|t| t.set(true));
}

/// Runs `f` on the blocking pool and waits for it (inline on a
/// current-thread runtime, where a pool thread would race the simulation,
/// unless this thread called [`offload_to_blocking_pool`]). `Err` if `f`
/// panicked.
pub async fn offload<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    if multi_threaded() || TO_POOL.with(Cell::get) {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| e.to_string())
    } else {
        Ok(f())
    }
}

thread_local! {
    /// (wall-clock ms at the anchor, the tokio instant of the anchor)
    static SIMULATED: Cell<Option<(u64, tokio::time::Instant)>> = const { Cell::new(None) };
}

/// [`offload`] for work that fails with a message: a panic becomes an
/// error naming `what`.
pub async fn offload_try<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    offload(f)
        .await
        .map_err(|panicked| format!("{what} panicked: {panicked}"))
        .and_then(|r| r)
}

thread_local! {
    static RANDOM: Cell<Option<u64>> = const { Cell::new(None) };
}

/// From now on, on this thread, [`simulated_random`] draws from a
/// generator seeded with `seed`.
pub fn simulate_randomness(seed: u64) {
    RANDOM.with(|r| r.set(Some(seed)));
}

/// 64 random bits: the simulated randomness on a simulated thread, else
/// the operating system's.
pub fn random_u64() -> u64 {
    simulated_random().unwrap_or_else(|| {
        let b = crate::auth::random_bytes();
        u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    })
}

/// The next 64 bits of this thread's simulated randomness (SplitMix64), or
/// `None` on a thread that is not simulated.
pub fn simulated_random() -> Option<u64> {
    RANDOM.with(|r| {
        let state = r.get()?.wrapping_add(0x9e37_79b9_7f4a_7c15);
        r.set(Some(state));
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Some(z ^ (z >> 31))
    })
}

/// From now on, on this thread, [`now_ms`] starts at `start_ms` and
/// advances with tokio's clock (virtual when the runtime's time is paused).
pub fn simulate_wall_clock(start_ms: u64) {
    SIMULATED.with(|s| s.set(Some((start_ms, tokio::time::Instant::now()))));
}

/// Milliseconds since the Unix epoch: the system clock, or the simulated
/// one on a thread that called [`simulate_wall_clock`].
pub fn now_ms() -> u64 {
    if let Some((start, anchor)) = SIMULATED.with(Cell::get) {
        let elapsed = tokio::time::Instant::now().saturating_duration_since(anchor);
        return start.saturating_add(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX));
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn the_simulated_wall_clock_follows_virtual_time() {
        simulate_wall_clock(1_000_000);
        assert_eq!(now_ms(), 1_000_000);
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(now_ms(), 1_000_000 + 3_600_000);
        // Inline on a current-thread runtime.
        assert_eq!(blocking(|| 7), 7);
        assert_eq!(offload(|| 8).await, Ok(8));
        // Seeded randomness replays.
        simulate_randomness(42);
        let a: Vec<Option<u64>> = (0..3).map(|_| simulated_random()).collect();
        simulate_randomness(42);
        let b: Vec<Option<u64>> = (0..3).map(|_| simulated_random()).collect();
        assert_eq!(a, b);
        assert!(a[0] != a[1]);
    }

    #[test]
    fn a_daemon_thread_offloads_even_on_a_current_thread_runtime() {
        // A thread of its own: the flag is per thread.
        std::thread::spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let here = std::thread::current().id();
                let inline = offload(move || std::thread::current().id()).await;
                assert_eq!(inline, Ok(here));
                offload_to_blocking_pool();
                let there = offload(move || std::thread::current().id()).await;
                assert!(there.is_ok_and(|t| t != here));
                assert!(offload(|| panic!("boom")).await.is_err());
                let failed = offload_try::<()>("the work", || panic!("boom")).await;
                assert!(failed.is_err_and(|e| e.starts_with("the work panicked")));
            });
        })
        .join()
        .expect("the test thread");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn off_the_worker_on_a_multi_threaded_runtime() {
        let here = std::thread::current().id();
        assert_eq!(blocking(|| 7), 7);
        let there = offload(move || std::thread::current().id()).await;
        assert_ne!(there, Ok(here));
        assert!(offload(|| panic!("boom")).await.is_err());
        let wall = now_ms();
        assert!(wall > 1_700_000_000_000, "{wall}");
        assert_eq!(simulated_random(), None);
    }
}

//! The openraft type configuration of the monitors.

use std::io::Cursor;

use crate::state::{MonRequest, MonResponse};

openraft::declare_raft_types!(
    /// Raft types for the monitor quorum: requests are [`MonRequest`],
    /// responses [`MonResponse`], node ids the hash of a monitor's name,
    /// nodes carry the monitor's address.
    pub TypeConfig:
        D = MonRequest,
        R = MonResponse,
        NodeId = u64,
        Node = openraft::BasicNode,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = MonRuntime,
);

/// The Raft handle of a monitor.
pub type MonRaft = openraft::Raft<TypeConfig>;
/// A log entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// A log id.
pub type LogId = openraft::LogId<u64>;
/// A storage error.
pub type StorageError = openraft::StorageError<u64>;

/// Tokio, as openraft's own runtime, but with election timeouts drawn from
/// the simulation's seeded randomness on a simulated thread
/// ([`shoal_net::runtime::simulated_random`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MonRuntime;

/// The generator openraft draws election timeouts from.
#[derive(Debug)]
pub enum MonRng {
    /// The operating system's (a daemon).
    System(rand::rngs::ThreadRng),
    /// The simulation's.
    Simulated,
}

impl rand::RngCore for MonRng {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
    fn next_u64(&mut self) -> u64 {
        match self {
            MonRng::System(r) => r.next_u64(),
            MonRng::Simulated => shoal_net::runtime::simulated_random().unwrap_or_default(),
        }
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

type Tokio = openraft::TokioRuntime;

impl openraft::AsyncRuntime for MonRuntime {
    type JoinError = <Tokio as openraft::AsyncRuntime>::JoinError;
    type JoinHandle<T: openraft::OptionalSend + 'static> =
        <Tokio as openraft::AsyncRuntime>::JoinHandle<T>;
    type Sleep = <Tokio as openraft::AsyncRuntime>::Sleep;
    type Instant = <Tokio as openraft::AsyncRuntime>::Instant;
    type TimeoutError = <Tokio as openraft::AsyncRuntime>::TimeoutError;
    type Timeout<R, T: std::future::Future<Output = R> + openraft::OptionalSend> =
        <Tokio as openraft::AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = MonRng;
    type OneshotSender<T: openraft::OptionalSend> =
        <Tokio as openraft::AsyncRuntime>::OneshotSender<T>;
    type OneshotReceiverError = <Tokio as openraft::AsyncRuntime>::OneshotReceiverError;
    type OneshotReceiver<T: openraft::OptionalSend> =
        <Tokio as openraft::AsyncRuntime>::OneshotReceiver<T>;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: std::future::Future + openraft::OptionalSend + 'static,
        T::Output: openraft::OptionalSend + 'static,
    {
        Tokio::spawn(future)
    }
    fn sleep(duration: std::time::Duration) -> Self::Sleep {
        Tokio::sleep(duration)
    }
    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        Tokio::sleep_until(deadline)
    }
    fn timeout<R, F: std::future::Future<Output = R> + openraft::OptionalSend>(
        duration: std::time::Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        Tokio::timeout(duration, future)
    }
    fn timeout_at<R, F: std::future::Future<Output = R> + openraft::OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        Tokio::timeout_at(deadline, future)
    }
    fn is_panic(join_error: &Self::JoinError) -> bool {
        Tokio::is_panic(join_error)
    }
    fn thread_rng() -> Self::ThreadLocalRng {
        match shoal_net::runtime::simulated_random() {
            Some(_) => MonRng::Simulated,
            None => MonRng::System(rand::thread_rng()),
        }
    }
    fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>)
    where
        T: openraft::OptionalSend,
    {
        Tokio::oneshot()
    }
}

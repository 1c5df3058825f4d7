//! Admission of accepted sockets on one listener: at most `connections_max`
//! accepted connections (in their handshake or established) and at most
//! `handshakes_max` of them still in their handshake. A socket over either
//! limit is closed at once, before any memory or task is spent on it. Each
//! admitted socket holds a [`Admitted`] guard whose drop gives its place back,
//! so the counts stay right however the connection ends (handshake failure,
//! close, task abort).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// The load of one listener.
#[derive(Debug)]
pub(crate) struct ListenerLoad {
    handshakes_max: u32,
    connections_max: u32,
    handshakes: AtomicU32,
    connections: AtomicU32,
    /// Set while refusing, so an episode of refusals is logged once.
    refusing: AtomicBool,
    refused: AtomicU64,
}

/// Why a socket was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `connections_max` accepted connections are open.
    Connections(u32),
    /// `handshakes_max` accepted sockets are in their handshake.
    Handshakes(u32),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Connections(n) => {
                write!(f, "{n} accepted connections open (ms_connections_max)")
            }
            Refusal::Handshakes(n) => write!(f, "{n} handshakes in progress (ms_handshakes_max)"),
        }
    }
}

/// What [`ListenerLoad::admit`] decided, with whether to log it: only the
/// first refusal of an episode and the first admission after one are worth
/// a line.
#[derive(Debug)]
pub(crate) enum Admission {
    /// Admitted; `after_refusing` counts the refusals of the episode that
    /// just ended, if one did.
    Admitted {
        guard: Admitted,
        after_refusing: Option<u64>,
    },
    /// Refused; `first` is true for the first refusal of an episode.
    Refused { why: Refusal, first: bool },
}

impl ListenerLoad {
    /// An idle listener with these limits (each at least 1).
    pub(crate) fn new(handshakes_max: u32, connections_max: u32) -> Arc<ListenerLoad> {
        Arc::new(ListenerLoad {
            handshakes_max: handshakes_max.max(1),
            connections_max: connections_max.max(1),
            handshakes: AtomicU32::new(0),
            connections: AtomicU32::new(0),
            refusing: AtomicBool::new(false),
            refused: AtomicU64::new(0),
        })
    }

    /// Admits one accepted socket or refuses it. Only the accept loop calls
    /// this, so counts never pass their limits: other tasks only decrement.
    pub(crate) fn admit(self: &Arc<Self>) -> Admission {
        let connections = self.connections.load(Ordering::Acquire);
        let handshakes = self.handshakes.load(Ordering::Acquire);
        let why = if connections >= self.connections_max {
            Some(Refusal::Connections(connections))
        } else if handshakes >= self.handshakes_max {
            Some(Refusal::Handshakes(handshakes))
        } else {
            None
        };
        if let Some(why) = why {
            self.refused.fetch_add(1, Ordering::Relaxed);
            let first = !self.refusing.swap(true, Ordering::Relaxed);
            return Admission::Refused { why, first };
        }
        self.connections.fetch_add(1, Ordering::AcqRel);
        self.handshakes.fetch_add(1, Ordering::AcqRel);
        let after_refusing = self
            .refusing
            .swap(false, Ordering::Relaxed)
            .then(|| self.refused.swap(0, Ordering::Relaxed));
        Admission::Admitted {
            guard: Admitted {
                load: Arc::clone(self),
                in_handshake: true,
            },
            after_refusing,
        }
    }

    /// Accepted connections open, in their handshake or established.
    #[cfg(test)]
    fn connections(&self) -> u32 {
        self.connections.load(Ordering::Acquire)
    }

    /// Accepted sockets in their handshake.
    #[cfg(test)]
    fn handshakes(&self) -> u32 {
        self.handshakes.load(Ordering::Acquire)
    }
}

/// One admitted socket's place on its listener; dropping it frees the place.
#[derive(Debug)]
pub(crate) struct Admitted {
    load: Arc<ListenerLoad>,
    in_handshake: bool,
}

impl Admitted {
    /// The handshake is over (either way): the socket no longer counts
    /// against `handshakes_max`.
    pub(crate) fn handshake_done(&mut self) {
        if std::mem::replace(&mut self.in_handshake, false) {
            self.load.handshakes.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.handshake_done();
        self.load.connections.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(a: Admission) -> (Admitted, Option<u64>) {
        match a {
            Admission::Admitted {
                guard,
                after_refusing,
            } => (guard, after_refusing),
            Admission::Refused { why, .. } => panic!("refused: {why}"),
        }
    }

    fn refused(a: Admission) -> (Refusal, bool) {
        match a {
            Admission::Refused { why, first } => (why, first),
            Admission::Admitted { .. } => panic!("admitted"),
        }
    }

    #[test]
    fn handshakes_are_capped_and_a_finished_handshake_frees_its_place() {
        let load = ListenerLoad::new(2, 10);
        let (mut a, _) = admitted(load.admit());
        let (_b, _) = admitted(load.admit());
        assert_eq!(refused(load.admit()), (Refusal::Handshakes(2), true));
        assert_eq!(refused(load.admit()), (Refusal::Handshakes(2), false));
        a.handshake_done();
        a.handshake_done();
        assert_eq!((load.handshakes(), load.connections()), (1, 2));
        let (_c, after) = admitted(load.admit());
        assert_eq!(after, Some(2), "the episode of two refusals ends");
        assert_eq!((load.handshakes(), load.connections()), (2, 3));
    }

    #[test]
    fn connections_are_capped_and_dropping_a_guard_frees_its_place() {
        let load = ListenerLoad::new(10, 2);
        let (mut a, _) = admitted(load.admit());
        a.handshake_done();
        let (b, _) = admitted(load.admit());
        assert_eq!(refused(load.admit()), (Refusal::Connections(2), true));
        drop(b);
        assert_eq!((load.handshakes(), load.connections()), (0, 1));
        let (_c, after) = admitted(load.admit());
        assert_eq!(after, Some(1));
        drop(a);
        assert_eq!((load.handshakes(), load.connections()), (1, 1));
    }
}

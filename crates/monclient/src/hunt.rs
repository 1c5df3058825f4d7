//! [`Hunting`]: which monitors a client asks first when it has no session
//! with one. Pure bookkeeping; [`MonClient`](crate::MonClient) does the I/O
//! (it probes the monitors of a [`Plan`] in parallel and reports each
//! outcome back here).
//!
//! A monitor that failed (refused, timed out, closed, or answered without a
//! quorum) is remembered dead for [`Hunting::DEAD_MEMORY`]: a hunt probes it
//! only after the others, so a dead monitor costs a client nothing while
//! another one answers, whatever its connect timeout.

use std::time::Duration;

use tokio::time::Instant;

/// The order of one hunting round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Probed at once, the last monitor that answered first.
    pub first: Vec<usize>,
    /// Remembered dead: probed when every probe of `first` failed, or
    /// after [`Hunting::STAGGER`] without an answer.
    pub later: Vec<usize>,
}

/// What a client remembers about the monitors between hunts.
#[derive(Debug, Clone)]
pub(crate) struct Hunting {
    /// The last monitor that answered (an index into the monitor list).
    preferred: usize,
    /// Until when each monitor counts as dead.
    dead_until: Vec<Option<Instant>>,
    /// Pause before the next round after a round in which nobody answered.
    backoff: Duration,
}

impl Hunting {
    /// How long a failed monitor is probed last.
    pub const DEAD_MEMORY: Duration = Duration::from_secs(30);
    /// How long the monitors remembered dead wait for the others to answer
    /// before they are probed as well.
    pub const STAGGER: Duration = Duration::from_millis(250);
    /// First pause after a round without an answer; doubles up to
    /// [`Hunting::BACKOFF_MAX`].
    pub const BACKOFF_MIN: Duration = Duration::from_millis(50);
    /// Longest pause between rounds.
    pub const BACKOFF_MAX: Duration = Duration::from_secs(1);

    /// Nothing known yet about `n` monitors.
    pub fn new(n: usize) -> Hunting {
        Hunting {
            preferred: 0,
            dead_until: vec![None; n],
            backoff: Hunting::BACKOFF_MIN,
        }
    }

    /// The round to run at `now`: the monitors not remembered dead from
    /// the preferred one on, then those remembered dead, soonest to
    /// expire first. When every monitor is remembered dead they are all
    /// probed at once (nothing better is known).
    pub fn plan(&self, now: Instant) -> Plan {
        let n = self.dead_until.len();
        let mut first = Vec::new();
        let mut later = Vec::new();
        for k in 0..n {
            let i = (self.preferred + k) % n;
            match self.dead_until[i] {
                Some(t) if t > now => later.push((t, i)),
                _ => first.push(i),
            }
        }
        later.sort();
        let later: Vec<usize> = later.into_iter().map(|(_, i)| i).collect();
        if first.is_empty() {
            return Plan {
                first: later,
                later: Vec::new(),
            };
        }
        Plan { first, later }
    }

    /// Monitor `i` answered with a quorum: it is the session's monitor.
    pub fn answered(&mut self, i: usize) {
        if let Some(d) = self.dead_until.get_mut(i) {
            *d = None;
            self.preferred = i;
        }
        self.backoff = Hunting::BACKOFF_MIN;
    }

    /// Monitor `i` failed at `now`: probe it last for a while.
    pub fn failed(&mut self, i: usize, now: Instant) {
        if let Some(d) = self.dead_until.get_mut(i) {
            *d = Some(now + Hunting::DEAD_MEMORY);
        }
    }

    /// Whether monitor `i` counts as dead at `now`.
    pub fn is_dead(&self, i: usize, now: Instant) -> bool {
        self.dead_until
            .get(i)
            .copied()
            .flatten()
            .is_some_and(|t| t > now)
    }

    /// A round ended without an answer: the pause before the next one.
    pub fn round_failed(&mut self) -> Duration {
        let pause = self.backoff;
        self.backoff = (self.backoff * 2).min(Hunting::BACKOFF_MAX);
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_client_probes_every_monitor_at_once() {
        let h = Hunting::new(3);
        let p = h.plan(Instant::now());
        assert_eq!(p.first, vec![0, 1, 2]);
        assert!(p.later.is_empty());
    }

    #[test]
    fn the_monitor_that_answered_comes_first() {
        let mut h = Hunting::new(3);
        h.answered(2);
        assert_eq!(h.plan(Instant::now()).first, vec![2, 0, 1]);
    }

    #[test]
    fn a_failed_monitor_is_probed_last_until_its_memory_expires() {
        let now = Instant::now();
        let mut h = Hunting::new(3);
        h.failed(0, now);
        assert!(h.is_dead(0, now));
        let p = h.plan(now);
        assert_eq!((p.first, p.later), (vec![1, 2], vec![0]));
        let later = now + Hunting::DEAD_MEMORY + Duration::from_millis(1);
        assert!(!h.is_dead(0, later));
        assert_eq!(h.plan(later).first, vec![0, 1, 2]);
    }

    #[test]
    fn answering_clears_the_memory_of_a_failure() {
        let now = Instant::now();
        let mut h = Hunting::new(3);
        h.failed(1, now);
        h.answered(1);
        assert!(!h.is_dead(1, now));
        assert_eq!(h.plan(now).first, vec![1, 2, 0]);
    }

    #[test]
    fn when_every_monitor_failed_all_are_probed_at_once_oldest_failure_first() {
        let now = Instant::now();
        let mut h = Hunting::new(3);
        h.failed(2, now);
        h.failed(0, now + Duration::from_millis(5));
        h.failed(1, now + Duration::from_millis(9));
        let p = h.plan(now + Duration::from_millis(10));
        assert_eq!(p.first, vec![2, 0, 1]);
        assert!(p.later.is_empty());
    }

    #[test]
    fn rounds_without_an_answer_back_off_up_to_a_bound_and_an_answer_resets() {
        let mut h = Hunting::new(2);
        let pauses: Vec<Duration> = (0..8).map(|_| h.round_failed()).collect();
        assert_eq!(pauses[0], Hunting::BACKOFF_MIN);
        assert_eq!(pauses[1], Hunting::BACKOFF_MIN * 2);
        assert_eq!(
            *pauses.last().unwrap_or(&Duration::ZERO),
            Hunting::BACKOFF_MAX
        );
        assert!(pauses.windows(2).all(|w| w[0] <= w[1]));
        h.answered(1);
        assert_eq!(h.round_failed(), Hunting::BACKOFF_MIN);
    }

    #[test]
    fn an_index_out_of_range_changes_nothing() {
        let now = Instant::now();
        let mut h = Hunting::new(2);
        h.failed(7, now);
        h.answered(9);
        assert_eq!(h.plan(now).first, vec![0, 1]);
    }
}

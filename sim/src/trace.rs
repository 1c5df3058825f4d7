//! The run's trace: every fault, every client op's outcome and every map
//! epoch, stamped with virtual time. Its digest tells two runs of a seed
//! apart: a seed that replays exactly gives the same digest.

use std::sync::{Arc, Mutex, PoisonError};

/// A shared, append-only trace.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    inner: Arc<Mutex<TraceInner>>,
}

#[derive(Debug, Default)]
struct TraceInner {
    lines: Vec<String>,
    digest: u64,
    echo: bool,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

impl Trace {
    /// A trace that also prints each line as it comes when `echo`.
    pub fn new(echo: bool) -> Trace {
        let t = Trace::default();
        {
            let mut i = t.lock();
            i.digest = FNV_OFFSET;
            i.echo = echo;
        }
        t
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TraceInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a line at virtual time `t_ms`.
    pub fn line(&self, t_ms: u64, what: impl AsRef<str>) {
        let line = format!("{:>7}.{:03} {}", t_ms / 1000, t_ms % 1000, what.as_ref());
        let mut i = self.lock();
        for b in line.bytes().chain([b'\n']) {
            i.digest = (i.digest ^ u64::from(b)).wrapping_mul(FNV_PRIME);
        }
        if i.echo {
            eprintln!("{line}");
        }
        i.lines.push(line);
    }

    /// The digest of every line so far.
    pub fn digest(&self) -> u64 {
        self.lock().digest
    }

    /// How many lines.
    pub fn len(&self) -> usize {
        self.lock().lines.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The last `n` lines.
    pub fn tail(&self, n: usize) -> Vec<String> {
        let i = self.lock();
        i.lines[i.lines.len().saturating_sub(n)..].to_vec()
    }
}

//! `CommitTicket`: the completion of a queued transaction.

use std::sync::{Arc, Condvar, Mutex, PoisonError};

use crate::error::{Error, Result};

type Callback = Box<dyn FnOnce(Result<()>) + Send>;

#[derive(Default)]
struct State {
    /// `Some(Ok)` once durable, `Some(Err(reason))` if the store failed first.
    outcome: Option<std::result::Result<(), String>>,
    callbacks: Vec<Callback>,
}

#[derive(Default)]
struct Inner {
    state: Mutex<State>,
    done: Condvar,
}

/// Completion handle of a queued transaction: resolves once the transaction is durable
/// (or the store failed before it was). Cheap to clone; usable from any thread.
#[derive(Clone, Default)]
pub struct CommitTicket {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CommitTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitTicket")
            .field("done", &self.is_done())
            .finish()
    }
}

fn outcome_to_result(o: &std::result::Result<(), String>) -> Result<()> {
    o.clone().map_err(Error::Poisoned)
}

impl CommitTicket {
    /// A ticket that is already durable (for stores with nothing to sync).
    pub fn done() -> Self {
        let t = Self::default();
        t.complete(Ok(()));
        t
    }

    /// True once the outcome is known.
    pub fn is_done(&self) -> bool {
        self.lock().outcome.is_some()
    }

    /// Block until the transaction is durable; `Err(Poisoned)` if the store failed first.
    pub fn wait(&self) -> Result<()> {
        let mut st = self.lock();
        loop {
            if let Some(o) = &st.outcome {
                return outcome_to_result(o);
            }
            st = self
                .inner
                .done
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Run `f` with the outcome once it is known: at once if it is, otherwise on the
    /// store's commit thread. So `f` must be quick (e.g. wake a task or send on a channel)
    /// and must not queue or wait for transactions: the commit thread would wait on
    /// itself.
    pub fn on_commit(&self, f: impl FnOnce(Result<()>) + Send + 'static) {
        let mut st = self.lock();
        match &st.outcome {
            Some(o) => {
                let r = outcome_to_result(o);
                drop(st);
                f(r);
            }
            None => st.callbacks.push(Box::new(f)),
        }
    }

    pub(crate) fn complete(&self, outcome: std::result::Result<(), String>) {
        let callbacks = {
            let mut st = self.lock();
            if st.outcome.is_some() {
                return;
            }
            st.outcome = Some(outcome.clone());
            std::mem::take(&mut st.callbacks)
        };
        self.inner.done.notify_all();
        for cb in callbacks {
            cb(outcome_to_result(&outcome));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn callbacks_and_waiters_see_the_outcome_once() {
        let t = CommitTicket::default();
        let (tx, rx) = mpsc::channel();
        let tx2 = tx.clone();
        t.on_commit(move |r| tx.send(r.is_ok()).unwrap());
        let waiter = {
            let t = t.clone();
            std::thread::spawn(move || t.wait().is_ok())
        };
        assert!(!t.is_done());
        t.complete(Ok(()));
        t.complete(Err("late failure is ignored".into()));
        assert!(waiter.join().unwrap());
        assert!(rx.recv().unwrap());
        t.on_commit(move |r| tx2.send(r.is_ok()).unwrap());
        assert!(
            rx.recv().unwrap(),
            "a callback added after completion runs at once"
        );
        let failed = CommitTicket::default();
        failed.complete(Err("disk gone".into()));
        assert!(matches!(failed.wait(), Err(Error::Poisoned(m)) if m == "disk gone"));
    }
}

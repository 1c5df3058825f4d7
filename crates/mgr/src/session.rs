//! Dashboard sessions: a user logs in with a Shoal entity and its key; the
//! manager opens a monitor session as that user (the key is checked by the
//! monitors' handshake, never by the manager) and keeps it behind a random
//! token set as an HTTP-only cookie. Every action of the session goes
//! through that monitor client, so the monitors enforce the user's caps.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shoal_monclient::MonClient;

/// A session idle this long ends.
pub const IDLE: Duration = Duration::from_secs(3600);
/// Sessions kept at most (the least recently used go first).
pub const SESSIONS_MAX: usize = 1000;

/// One logged-in user.
#[derive(Debug, Clone)]
pub struct Session {
    /// The entity (`client.admin`).
    pub entity: String,
    /// Whether its `mon` caps allow writes (the dashboard shows actions).
    pub admin: bool,
    /// Its own monitor session.
    pub monc: MonClient,
    /// Its key, for what goes to the OSDs as the user (scrubs).
    pub key: shoal_net::Secret,
}

#[derive(Debug, Default)]
pub struct Sessions {
    by_token: Mutex<HashMap<String, (Instant, Arc<Session>)>>,
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Arc<Session>)>> {
        self.by_token.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps a new session; returns its token.
    pub fn open(&self, s: Session) -> String {
        let mut raw = [0u8; 24];
        if getrandom::fill(&mut raw).is_err() {
            // No randomness: no session rather than a guessable one.
            return String::new();
        }
        let token: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        let mut m = self.lock();
        if m.len() >= SESSIONS_MAX
            && let Some(oldest) = m
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone())
        {
            m.remove(&oldest);
        }
        m.insert(token.clone(), (Instant::now(), Arc::new(s)));
        token
    }

    /// The session of `token`, if it lives (and marks it used).
    pub fn get(&self, token: &str) -> Option<Arc<Session>> {
        let mut m = self.lock();
        let (at, s) = m.get_mut(token)?;
        if at.elapsed() > IDLE {
            m.remove(token);
            return None;
        }
        *at = Instant::now();
        Some(Arc::clone(s))
    }

    /// Ends a session.
    pub fn close(&self, token: &str) {
        self.lock().remove(token);
    }

    /// Drops idle sessions.
    pub fn expire(&self) {
        self.lock().retain(|_, (at, _)| at.elapsed() <= IDLE);
    }
}

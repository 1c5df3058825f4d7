//! [`MonClient`]: how tools and daemons send commands to the monitors. It
//! tries each monitor in turn (starting with the last that answered) until
//! one answers or the timeout passes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use bytes::Bytes;
use serde_json::Value;
use shoal_maps::OsdMap;
use shoal_net::{Dispatcher, Incoming};
use shoal_net::{Messenger, Secret, ServiceSecrets, Ticket};
use shoal_proto::{Message, MonCommand, MonCommandReply};
use shoal_proto::{MonSubscribe, MonUpdate};
use tokio::sync::{Notify, watch};

use crate::command::Command;
use crate::error::{ErrorCode, MonError};

/// Collects the updates monitors push to a messenger: give it to the
/// messenger as its dispatcher (or call [`UpdateSink::offer`] from yours).
/// Updates queue per subscribed part, at most [`UpdateSink::QUEUE_MAX`] each;
/// past that the oldest are dropped, which a follower notices as a gap and
/// repairs by subscribing again from what it has.
#[derive(Debug, Default)]
pub struct UpdateSink {
    queues: Mutex<BTreeMap<String, VecDeque<(u64, Bytes)>>>,
    notify: Notify,
}

impl UpdateSink {
    /// Updates kept per subscribed part.
    pub const QUEUE_MAX: usize = 1024;

    /// A new, empty sink.
    pub fn new() -> Arc<UpdateSink> {
        Arc::default()
    }

    /// Takes a message if it is a monitor update; returns it otherwise.
    pub fn offer(&self, inc: Incoming) -> Option<Incoming> {
        let Message::MonUpdate(MonUpdate { what, version }) = &inc.msg else {
            return Some(inc);
        };
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let q = queues.entry(what.clone()).or_default();
        q.push_back((*version, inc.data.clone()));
        while q.len() > Self::QUEUE_MAX {
            q.pop_front();
        }
        drop(queues);
        self.notify.notify_waiters();
        None
    }

    fn drain(&self, what: &str) -> Vec<(u64, Bytes)> {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        queues
            .get_mut(what)
            .map(|q| q.drain(..).collect())
            .unwrap_or_default()
    }
}

impl Dispatcher for UpdateSink {
    fn dispatch(&self, incoming: Incoming) {
        let _ = self.offer(incoming);
    }
}

/// The newest value of a subscription: (state version, value).
pub type Subscription = watch::Receiver<Option<(u64, Value)>>;

/// A client of the monitor quorum.
#[derive(Debug, Clone)]
pub struct MonClient {
    msgr: Messenger,
    mons: Arc<Vec<SocketAddr>>,
    timeout: Duration,
    last_good: Arc<AtomicUsize>,
}

impl MonClient {
    /// A client reaching `mons` through `msgr`; each command gives up after
    /// `timeout`.
    pub fn new(msgr: Messenger, mons: Vec<SocketAddr>, timeout: Duration) -> Self {
        MonClient {
            msgr,
            mons: Arc::new(mons),
            timeout,
            last_good: Arc::default(),
        }
    }

    /// Sends `cmd` and returns its JSON output.
    pub async fn command(&self, cmd: &Command) -> Result<Value, MonError> {
        if self.mons.is_empty() {
            return Err(MonError::new(
                ErrorCode::InvalidArgument,
                "no monitors configured (set mon_host)",
            ));
        }
        let json = serde_json::to_string(cmd)
            .map_err(|e| MonError::new(ErrorCode::Internal, e.to_string()))?;
        let deadline = Instant::now() + self.timeout;
        let start = self.last_good.load(Ordering::Relaxed);
        let mut last = String::new();
        let mut attempt = 0usize;
        while Instant::now() < deadline {
            let i = (start + attempt) % self.mons.len();
            attempt += 1;
            let addr = self.mons[i];
            match self.try_one(addr, &json, deadline).await {
                // A monitor that is catching up asks us to try again (another one).
                Ok(r) if r.code == ErrorCode::Again as u32 => {
                    last = format!("mon at {addr}: {}", r.output);
                }
                Ok(r) => {
                    self.last_good.store(i, Ordering::Relaxed);
                    return reply_to_result(r);
                }
                Err(e) => last = format!("mon at {addr}: {e}"),
            }
            if attempt % self.mons.len() == 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Err(MonError::new(
            ErrorCode::NoQuorum,
            format!(
                "no monitor answered within {:?}; last error: {last}",
                self.timeout
            ),
        ))
    }

    /// Asks for a ticket to `service` (e.g. `osd`) for this client, whose
    /// own key is `own_key`; returns the sealed ticket, its session key and
    /// its expiry (ms since the Unix epoch).
    pub async fn ticket(
        &self,
        own_key: &Secret,
        service: &str,
    ) -> Result<(Vec<u8>, Secret, u64), MonError> {
        let v = self
            .command(&Command::AuthGetTicket {
                service: service.to_string(),
            })
            .await?;
        let bad =
            |what: &str| MonError::new(ErrorCode::Internal, format!("bad ticket reply: {what}"));
        let sealed = Secret::decode_base64(v["ticket"].as_str().ok_or_else(|| bad("ticket"))?)
            .map_err(|e| bad(&e))?;
        let wrapped: [u8; 32] = Secret::decode_base64(
            v["session_key"]
                .as_str()
                .ok_or_else(|| bad("session_key"))?,
        )
        .map_err(|e| bad(&e))?
        .try_into()
        .map_err(|_| bad("session key length"))?;
        let t = Ticket::parse(&sealed).map_err(|e| bad(&e.to_string()))?;
        let session = Ticket::unwrap_session_key(&t.nonce, &wrapped, own_key);
        Ok((sealed, session, t.expires_ms))
    }

    /// Follows `what` (`config`, `monmap`) for as long as the returned
    /// receiver lives, across monitor failures: when the monitor it follows
    /// goes away, it subscribes again at another. `sink` must receive this
    /// client's messenger's incoming messages.
    pub fn subscribe(&self, what: &str, sink: Arc<UpdateSink>) -> Subscription {
        let (tx, rx) = watch::channel(None);
        let client = self.clone();
        let what = what.to_string();
        tokio::spawn(async move { client.follow(what, sink, tx).await });
        rx
    }

    async fn follow(
        self,
        what: String,
        sink: Arc<UpdateSink>,
        tx: watch::Sender<Option<(u64, Value)>>,
    ) {
        let mut have = 0u64;
        let publish = |version: u64, data: &[u8], have: &mut u64| {
            if version > *have || *have == 0 {
                if let Ok(v) = serde_json::from_slice::<Value>(data) {
                    *have = version;
                    tx.send_replace(Some((version, v)));
                }
            }
        };
        let mut next = self.last_good.load(Ordering::Relaxed);
        while !tx.is_closed() {
            let addr = self.mons[next % self.mons.len().max(1)];
            next += 1;
            let Some((conn, reply)) = self.subscribe_at(addr, &what, have).await else {
                continue;
            };
            let Message::MonUpdate(u) = reply.msg else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            publish(u.version, &reply.data, &mut have);
            // Follow pushes until the monitor goes away or nobody listens.
            while !conn.is_closed() && !tx.is_closed() {
                let notified = sink.notify.notified();
                let pending = sink.drain(&what);
                if !pending.is_empty() {
                    for (v, data) in pending {
                        publish(v, &data, &mut have);
                    }
                    continue;
                }
                let _ = tokio::time::timeout(Duration::from_millis(250), notified).await;
            }
        }
    }

    /// Subscribes to `what` at the monitor at `addr`; on failure waits a
    /// moment (so a caller cycling through monitors does not spin).
    async fn subscribe_at(
        &self,
        addr: SocketAddr,
        what: &str,
        have: u64,
    ) -> Option<(shoal_net::Connection, shoal_net::Reply)> {
        let sub = MonSubscribe {
            what: what.to_string(),
            have,
        };
        let attempt = async {
            let conn = self.msgr.connect(addr).await.ok()?;
            let r = conn
                .request_with_timeout(sub, Bytes::new(), self.timeout)
                .await
                .ok()?;
            Some((conn, r))
        };
        let got = attempt.await;
        if got.is_none() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        got
    }

    /// Follows the OSD map for as long as the returned receiver lives: the
    /// full map first, then every incremental, across monitor failures.
    /// A gap (updates lost while the follower lagged, or a new monitor)
    /// is repaired by subscribing again from the epoch it has. `sink` must
    /// receive this client's messenger's incoming messages.
    pub fn subscribe_osdmap(&self, sink: Arc<UpdateSink>) -> watch::Receiver<Option<Arc<OsdMap>>> {
        let (tx, rx) = watch::channel(None);
        let client = self.clone();
        tokio::spawn(async move { client.follow_osdmap(sink, tx, None).await });
        rx
    }

    /// [`MonClient::subscribe_osdmap`], plus every map in epoch order on
    /// the second receiver (for a daemon that must see each epoch; the
    /// only gaps are where the monitors sent a full map).
    pub fn subscribe_osdmap_every(
        &self,
        sink: Arc<UpdateSink>,
    ) -> (
        watch::Receiver<Option<Arc<OsdMap>>>,
        tokio::sync::mpsc::UnboundedReceiver<Arc<OsdMap>>,
    ) {
        let (tx, rx) = watch::channel(None);
        let (every_tx, every_rx) = tokio::sync::mpsc::unbounded_channel();
        let client = self.clone();
        tokio::spawn(async move { client.follow_osdmap(sink, tx, Some(every_tx)).await });
        (rx, every_rx)
    }

    async fn follow_osdmap(
        self,
        sink: Arc<UpdateSink>,
        tx: watch::Sender<Option<Arc<OsdMap>>>,
        every: Option<tokio::sync::mpsc::UnboundedSender<Arc<OsdMap>>>,
    ) {
        let every = every.as_ref();
        let mut local: Option<OsdMap> = None;
        let mut next = self.last_good.load(Ordering::Relaxed);
        while !tx.is_closed() {
            let addr = self.mons[next % self.mons.len().max(1)];
            next += 1;
            let have = local.as_ref().map_or(0, |m| u64::from(m.epoch.0));
            // Updates queued from an earlier subscription are superseded by
            // this one's reply. What arrives while it is asked for is kept:
            // the monitor may push the next epoch before its reply (the
            // reply's older epochs are skipped when the queue is applied).
            let _ = sink.drain("osdmap");
            let Some((conn, reply)) = self.subscribe_at(addr, "osdmap", have).await else {
                continue;
            };
            let mut ok = matches!(reply.msg, Message::MonUpdate(_))
                && apply_update(&mut local, &reply.data, &tx, every);
            while ok && !conn.is_closed() && !tx.is_closed() {
                let notified = sink.notify.notified();
                let pending = sink.drain("osdmap");
                if pending.is_empty() {
                    let _ = tokio::time::timeout(Duration::from_millis(250), notified).await;
                    continue;
                }
                ok = pending
                    .iter()
                    .all(|(_, data)| apply_update(&mut local, data, &tx, every));
            }
            if !ok {
                // A gap or a bad update: subscribe again from what we have.
                next -= 1;
            }
        }
    }

    /// The service secrets of `service`, for its daemons to check tickets.
    pub async fn service_secrets(&self, service: &str) -> Result<ServiceSecrets, MonError> {
        let v = self
            .command(&Command::AuthServiceSecrets {
                service: service.to_string(),
            })
            .await?;
        let mut out = ServiceSecrets::default();
        for (id, key) in v["secrets"].as_object().into_iter().flatten() {
            let id: u64 = id
                .parse()
                .map_err(|_| MonError::new(ErrorCode::Internal, "bad secret id"))?;
            let key = Secret::from_base64(key.as_str().unwrap_or(""))
                .map_err(|e| MonError::new(ErrorCode::Internal, e))?;
            out.insert(id, key);
        }
        Ok(out)
    }

    async fn try_one(
        &self,
        addr: SocketAddr,
        json: &str,
        deadline: Instant,
    ) -> Result<MonCommandReply, String> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let conn = tokio::time::timeout(remaining, self.msgr.connect(addr))
            .await
            .map_err(|_| "connect timed out".to_string())?
            .map_err(|e| e.to_string())?;
        let cmd = MonCommand {
            command: json.to_string(),
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        let reply = conn
            .request_with_timeout(cmd, Bytes::new(), remaining)
            .await
            .map_err(|e| e.to_string())?;
        match reply.msg {
            Message::MonCommandReply(r) => Ok(r),
            other => Err(format!("unexpected reply {}", other.msg_type().name())),
        }
    }
}

/// Applies one `osdmap` update to `local` and publishes the result; false
/// when it does not fully apply (a gap).
fn apply_update(
    local: &mut Option<OsdMap>,
    data: &[u8],
    tx: &watch::Sender<Option<Arc<OsdMap>>>,
    every: Option<&tokio::sync::mpsc::UnboundedSender<Arc<OsdMap>>>,
) -> bool {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return false;
    };
    let before = local.as_ref().map(|m| m.epoch.0);
    // Each incremental applies atomically, so on a gap `local` is still a
    // whole map, just at an earlier epoch.
    // The newest map sent to `every` is also the one the watch publishes.
    let mut newest: Option<Arc<OsdMap>> = None;
    let mut each = |m: &OsdMap| {
        if let Some(every) = every
            && before.is_none_or(|b| m.epoch.0 > b)
        {
            let m = Arc::new(m.clone());
            let _ = every.send(Arc::clone(&m));
            newest = Some(m);
        }
    };
    let ok = crate::views::apply_osdmap_update_each(local, &v, &mut each).is_ok();
    let after = local.as_ref().map(|m| m.epoch.0);
    if after != before {
        let published = newest
            .filter(|m| Some(m.epoch.0) == after)
            .or_else(|| local.clone().map(Arc::new));
        tx.send_replace(published);
    }
    ok
}

fn reply_to_result(r: MonCommandReply) -> Result<Value, MonError> {
    if r.code == 0 {
        serde_json::from_str(&r.output)
            .map_err(|e| MonError::new(ErrorCode::Internal, e.to_string()))
    } else {
        Err(MonError::new(ErrorCode::from_u32(r.code), r.output))
    }
}

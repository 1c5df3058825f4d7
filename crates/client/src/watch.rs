//! Watch and notify, the client side (as librados' watch2/notify2): a
//! [`Watch`] on an object receives every notify sent to it and answers each
//! with a reply; [`Pool::notify`](crate::Pool::notify) reaches every
//! watcher and returns their replies, or who did not answer in time.
//!
//! A watch lives at the primary of the object's PG, in its memory. The
//! client registers it and then renews it every sixth of its timeout, on
//! whatever connection it has then (so a watch survives reconnects), and
//! registers it with the new primary whenever the PG changes interval (so
//! it survives primary changes). A watcher that dies stops renewing, and
//! the primary drops it after the timeout. [`Watch::healthy`] says whether
//! the last renewal is recent enough for the watch still to stand.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use shoal_net::{Incoming, Responder};
use shoal_proto::{
    Message, OsdErrorCode, OsdNotify, OsdNotifyReply, OsdWatch, OsdWatchReply, WatchNotifyAck,
    WatcherInfo,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};

/// One notify as a watcher receives it; answer it with [`NotifyEvent::ack`].
/// Dropped without an answer, the notifier counts this watcher as missed.
#[derive(Debug)]
pub struct NotifyEvent {
    /// The notify's id at the OSD.
    pub notify_id: u64,
    /// Who sent it.
    pub notifier: String,
    /// What it carries.
    pub payload: Bytes,
    responder: Responder,
}

impl NotifyEvent {
    /// Acknowledges the notify with `reply`.
    pub async fn ack(self, reply: Bytes) {
        let ack = WatchNotifyAck {
            cookie: 0,
            notify_id: self.notify_id,
        };
        let _ = self.responder.reply(ack, reply).await;
    }
}

/// What a notify got back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NotifyResult {
    /// The watchers that acknowledged, with their replies.
    pub acked: Vec<(WatcherInfo, Bytes)>,
    /// The watchers that did not answer in time.
    pub missed: Vec<WatcherInfo>,
}

/// The client's watches by cookie: where notifies for each go.
#[derive(Default)]
pub(crate) struct WatchTable {
    by_cookie: Mutex<HashMap<u64, mpsc::UnboundedSender<NotifyEvent>>>,
}

impl WatchTable {
    /// Takes a `WatchNotify`; returns any other message.
    pub(crate) fn offer(&self, inc: Incoming) -> Option<Incoming> {
        let Message::WatchNotify(n) = &inc.msg else {
            return Some(inc);
        };
        let responder = inc.responder?;
        let tx = self
            .by_cookie
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&n.cookie)
            .cloned();
        let event = NotifyEvent {
            notify_id: n.notify_id,
            notifier: n.notifier.clone(),
            payload: inc.data,
            responder,
        };
        match tx {
            Some(tx) => {
                // A watch dropped meanwhile: the notifier sees it missed.
                let _ = tx.send(event);
            }
            None => drop(event),
        }
        None
    }

    fn add(&self, cookie: u64, tx: mpsc::UnboundedSender<NotifyEvent>) {
        self.by_cookie
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(cookie, tx);
    }

    fn remove(&self, cookie: u64) {
        self.by_cookie
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&cookie);
    }
}

/// A registered watch; dropping it (or [`Watch::unwatch`]) ends it.
#[derive(Debug)]
pub struct Watch {
    cookie: u64,
    events: mpsc::UnboundedReceiver<NotifyEvent>,
    renewed: Arc<Mutex<Instant>>,
    gaps: Arc<AtomicU64>,
    timeout: Duration,
    task: tokio::task::JoinHandle<()>,
    target: Target,
}

#[derive(Debug, Clone)]
struct Target {
    client: Client,
    pool: u64,
    nspace: String,
    oid: String,
}

impl Watch {
    /// The watch's cookie (with the client's instance, its identity at the OSD).
    pub fn cookie(&self) -> u64 {
        self.cookie
    }

    /// The next notify.
    pub async fn next(&mut self) -> Option<NotifyEvent> {
        self.events.recv().await
    }

    /// Whether the watch was renewed within its timeout: if not, the
    /// primary may have dropped it.
    pub fn healthy(&self) -> bool {
        self.health().healthy()
    }

    /// Ends the watch at the OSD.
    pub async fn unwatch(self) -> Result<()> {
        self.task.abort();
        self.target.client.inner.watches.remove(self.cookie);
        let t = self.target.clone();
        let cookie = self.cookie;
        t.send(
            OsdWatch::OP_UNWATCH,
            cookie,
            self.timeout,
            Instant::now() + self.timeout,
        )
        .await
        .map(|_| ())
    }

    /// A handle that tells whether the watch stands, kept apart from it.
    pub fn health(&self) -> WatchHealth {
        WatchHealth {
            renewed: Arc::clone(&self.renewed),
            gaps: Arc::clone(&self.gaps),
            timeout: self.timeout,
        }
    }

    /// How long the OSD keeps the watch without a renewal.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// Whether a [`Watch`] stands: renewed within its timeout.
#[derive(Debug, Clone)]
pub struct WatchHealth {
    renewed: Arc<Mutex<Instant>>,
    gaps: Arc<AtomicU64>,
    timeout: Duration,
}

impl WatchHealth {
    /// Whether the last renewal is within the watch's timeout.
    pub fn healthy(&self) -> bool {
        let at = *self.renewed.lock().unwrap_or_else(|p| p.into_inner());
        at.elapsed() < self.timeout
    }

    /// How many times the watch was registered again where it may have
    /// been missing: with a new primary (its PG changed interval), or
    /// after renewals failed. A notify sent just before may have missed
    /// it, so a watcher caching what notifies invalidate starts afresh
    /// when this moves.
    pub fn gaps(&self) -> u64 {
        self.gaps.load(Ordering::Acquire)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
        self.target.client.inner.watches.remove(self.cookie);
        // Best effort: otherwise the primary drops it after the timeout.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let t = self.target.clone();
            let (cookie, timeout) = (self.cookie, self.timeout);
            rt.spawn(async move {
                let deadline = Instant::now() + Duration::from_secs(5);
                let _ = t
                    .send(OsdWatch::OP_UNWATCH, cookie, timeout, deadline)
                    .await;
            });
        }
    }
}

impl Target {
    /// One watch request to the object's primary, resent until the deadline.
    async fn send(
        &self,
        op: u32,
        cookie: u64,
        timeout: Duration,
        deadline: Instant,
    ) -> Result<Vec<WatcherInfo>> {
        let msg = |seed: u32, epoch: u32| {
            Message::OsdWatch(OsdWatch {
                pool: self.pool,
                pg_seed: seed,
                oid: self.oid.clone(),
                nspace: self.nspace.clone(),
                epoch,
                client_inc: self.client.client_inc(),
                cookie,
                op,
                timeout_ms: u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX),
            })
        };
        let (reply, _) = self
            .client
            .pg_request(
                self.pool,
                &self.nspace,
                &self.oid,
                msg,
                Bytes::new(),
                deadline,
            )
            .await?;
        match reply {
            Message::OsdWatchReply(OsdWatchReply { watchers, .. }) => Ok(watchers),
            other => Err(Error::Protocol(format!(
                "a watch was answered with {:?}",
                other.msg_type()
            ))),
        }
    }
}

fn random_cookie() -> u64 {
    let mut b = [0u8; 8];
    match getrandom::fill(&mut b) {
        Ok(()) => u64::from_le_bytes(b).max(1),
        Err(_) => shoal_net::now_ms().max(1),
    }
}

/// The code, message and epoch of an OSD's answer to a watch or notify.
fn reply_status(m: &Message) -> Option<(u32, &str, u32)> {
    match m {
        Message::OsdWatchReply(r) => Some((r.code, &r.message, r.epoch)),
        Message::OsdNotifyReply(r) => Some((r.code, &r.message, r.epoch)),
        _ => None,
    }
}

impl Client {
    /// Sends a request built by `msg(pg seed, epoch)` to the primary of
    /// `oid`'s PG, resending on map changes and lost connections until
    /// `deadline`; returns the answer if its code is 0.
    pub(crate) async fn pg_request(
        &self,
        pool: u64,
        nspace: &str,
        oid: &str,
        msg: impl Fn(u32, u32) -> Message,
        data: Bytes,
        deadline: Instant,
    ) -> Result<(Message, Bytes)> {
        let mut last = String::from("not sent");
        let mut attempt = 0u32;
        while Instant::now() < deadline {
            attempt += 1;
            let map = self.map()?;
            let Some(p) = map.pool(pool) else {
                return Err(Error::NoPool(format!("pool {pool} no longer exists")));
            };
            let pg = p.object_pg(oid, nspace);
            let primary = match map.pg_to_up_acting(pg) {
                Ok(m) if m.acting_primary >= 0 => m.acting_primary,
                _ => -1,
            };
            let addr = map
                .osd(primary)
                .and_then(|i| i.addr.clone())
                .and_then(|a| a.parse::<SocketAddr>().ok());
            let pause = Instant::now() + Duration::from_millis(100 * u64::from(attempt.min(5)));
            let Some(addr) = addr else {
                last = format!("pg {pg} has no primary with an address");
                self.wait_epoch(map.epoch.0 + 1, pause.min(deadline)).await;
                continue;
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            let conn = match tokio::time::timeout(remaining, self.inner_msgr().connect(addr)).await
            {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => {
                    last = format!("osd.{primary}: {e}");
                    self.wait_epoch(map.epoch.0 + 1, pause.min(deadline)).await;
                    continue;
                }
                Err(_) => break,
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            let r = conn
                .request_with_timeout(msg(pg.seed, map.epoch.0), data.clone(), remaining)
                .await;
            let reply = match r {
                Ok(r) => r,
                Err(shoal_net::NetError::Remote { code, message, .. }) => {
                    return Err(Error::Protocol(format!(
                        "osd.{primary} refused ({code}): {message}"
                    )));
                }
                Err(e) => {
                    last = format!("osd.{primary}: {e}");
                    self.wait_epoch(map.epoch.0 + 1, pause.min(deadline)).await;
                    continue;
                }
            };
            let Some((code, message, epoch)) = reply_status(&reply.msg) else {
                return Err(Error::Protocol(format!(
                    "osd.{primary} answered {:?}",
                    reply.msg.msg_type()
                )));
            };
            match OsdErrorCode::from_u32(code) {
                OsdErrorCode::Ok => return Ok((reply.msg, reply.data)),
                c @ (OsdErrorCode::StaleEpoch
                | OsdErrorCode::WrongPrimary
                | OsdErrorCode::Again
                | OsdErrorCode::ShuttingDown
                | OsdErrorCode::NoPool) => {
                    last = format!("{c:?}: {message}");
                    let want = epoch.max(map.epoch.0 + 1);
                    self.wait_epoch(want, pause.min(deadline)).await;
                }
                c => return Err(Error::from_osd(c, message.to_string())),
            }
        }
        let timeout = self.inner.opts.op_timeout;
        Err(Error::Timeout(timeout, last))
    }

    /// Watches `oid` of pool `pool` (namespace `nspace`).
    pub(crate) async fn watch(&self, pool: u64, nspace: &str, oid: &str) -> Result<Watch> {
        let timeout = self.inner.opts.watch_timeout;
        let cookie = random_cookie();
        let target = Target {
            client: self.clone(),
            pool,
            nspace: nspace.to_string(),
            oid: oid.to_string(),
        };
        let (tx, events) = mpsc::unbounded_channel();
        self.inner.watches.add(cookie, tx);
        let deadline = Instant::now() + self.inner.opts.op_timeout;
        if let Err(e) = target
            .send(OsdWatch::OP_WATCH, cookie, timeout, deadline)
            .await
        {
            self.inner.watches.remove(cookie);
            return Err(e);
        }
        let renewed = Arc::new(Mutex::new(Instant::now()));
        let gaps = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(linger(
            target.clone(),
            cookie,
            timeout,
            Arc::clone(&renewed),
            Arc::clone(&gaps),
        ));
        Ok(Watch {
            cookie,
            events,
            renewed,
            gaps,
            timeout,
            task,
            target,
        })
    }

    /// Sends `payload` to every watcher of `oid` and waits for their
    /// answers, at most `timeout`.
    pub(crate) async fn notify(
        &self,
        pool: u64,
        nspace: &str,
        oid: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<NotifyResult> {
        let msg = |seed: u32, epoch: u32| {
            Message::OsdNotify(OsdNotify {
                pool,
                pg_seed: seed,
                oid: oid.to_string(),
                nspace: nspace.to_string(),
                epoch,
                timeout_ms: u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX),
            })
        };
        // The OSD answers after the watchers' timeout: leave room for it.
        let deadline = Instant::now() + self.inner.opts.op_timeout.max(timeout * 2);
        let (reply, data) = self
            .pg_request(pool, nspace, oid, msg, payload, deadline)
            .await?;
        let Message::OsdNotifyReply(OsdNotifyReply {
            acked,
            reply_len,
            missed,
            ..
        }) = reply
        else {
            return Err(Error::Protocol("a notify was answered otherwise".into()));
        };
        if acked.len() != reply_len.len() || reply_len.iter().sum::<u64>() != data.len() as u64 {
            return Err(Error::Protocol(
                "a notify's replies do not add up to its data".into(),
            ));
        }
        let mut at = 0usize;
        let acked = acked
            .into_iter()
            .zip(reply_len)
            .map(|(w, n)| {
                let d = data.slice(at..at + n as usize);
                at += n as usize;
                (w, d)
            })
            .collect();
        Ok(NotifyResult { acked, missed })
    }

    /// Drops watch `cookie` of this client on `oid`.
    pub(crate) async fn unwatch(
        &self,
        pool: u64,
        nspace: &str,
        oid: &str,
        cookie: u64,
    ) -> Result<()> {
        self.inner.watches.remove(cookie);
        let target = Target {
            client: self.clone(),
            pool,
            nspace: nspace.to_string(),
            oid: oid.to_string(),
        };
        let deadline = Instant::now() + self.inner.opts.op_timeout;
        target
            .send(OsdWatch::OP_UNWATCH, cookie, Duration::ZERO, deadline)
            .await
            .map(|_| ())
    }

    /// The watchers of `oid`.
    pub(crate) async fn list_watchers(
        &self,
        pool: u64,
        nspace: &str,
        oid: &str,
    ) -> Result<Vec<WatcherInfo>> {
        let target = Target {
            client: self.clone(),
            pool,
            nspace: nspace.to_string(),
            oid: oid.to_string(),
        };
        let deadline = Instant::now() + self.inner.opts.op_timeout;
        target
            .send(OsdWatch::OP_LIST, 0, Duration::ZERO, deadline)
            .await
    }
}

/// Keeps a watch registered: renews it every sixth of its timeout, and at
/// once when its PG changes interval (a new primary knows nothing of it);
/// counts the registrations that may have closed a gap in `gaps`.
async fn linger(
    t: Target,
    cookie: u64,
    timeout: Duration,
    renewed: Arc<Mutex<Instant>>,
    gaps: Arc<AtomicU64>,
) {
    let every = (timeout / 6).max(Duration::from_millis(100));
    let mut failed = false;
    loop {
        let Ok(map) = t.client.map() else {
            tokio::time::sleep(every).await;
            continue;
        };
        let pg = map.pool(t.pool).map(|p| p.object_pg(&t.oid, &t.nspace));
        let moved = async {
            match pg {
                Some(pg) => {
                    t.client.pg_changes_interval(pg, &map).await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        let mut anew = failed;
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = moved => anew = true,
        }
        let deadline = Instant::now() + every.max(Duration::from_secs(1));
        match t.send(OsdWatch::OP_WATCH, cookie, timeout, deadline).await {
            Ok(_) => {
                *renewed.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
                if anew {
                    gaps.fetch_add(1, Ordering::AcqRel);
                }
                failed = false;
            }
            Err(e) => {
                failed = true;
                tracing::debug!(oid = %t.oid, "renewing watch {cookie:x}: {e}");
            }
        }
    }
}

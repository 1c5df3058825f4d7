//! Watch and notify, at the primary of an object's PG: the watchers of
//! each object (client, cookie, the connection to reach it and when it last
//! renewed), and the delivery of a notify to all of them.
//!
//! Watches are held in the primary's memory, not in the PG log: a watch is
//! a client's live interest, renewed every few seconds by the client on
//! whatever connection it has, and registered again with the new primary
//! when the PG moves, so it follows the PG and survives reconnects. A
//! watcher that stops renewing for its timeout is dropped (it is not
//! listed and gets no more notifies). A notify goes to every live watcher
//! at once; the notifier's answer lists who acknowledged (with their
//! replies) and who did not within the notify's timeout.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use shoal_net::{Connection, PeerInfo};
use shoal_proto::{
    Message, OsdErrorCode, OsdNotify, OsdNotifyReply, OsdWatch, WatchNotify, WatcherInfo,
};
use tokio::time::Instant;

/// A watch's timeout when the client names none.
pub const WATCH_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// The longest watch timeout a client may ask for.
pub const WATCH_TIMEOUT_MAX: Duration = Duration::from_secs(600);
/// A notify's timeout when the client names none.
pub const NOTIFY_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// The longest notify timeout.
pub const NOTIFY_TIMEOUT_MAX: Duration = Duration::from_secs(120);
/// Most watchers of one object.
pub const WATCHERS_MAX: usize = 1024;
/// Most bytes of one notify's payload, and of one watcher's reply.
pub const NOTIFY_BYTES_MAX: usize = 1 << 20;

/// An object: pool, namespace, name.
type ObjectId = (u64, String, String);

struct Watcher {
    info: WatcherInfo,
    conn: Connection,
    renewed: Instant,
    timeout: Duration,
}

impl Watcher {
    fn live(&self, now: Instant) -> bool {
        now.duration_since(self.renewed) < self.timeout
    }
}

/// Every watch this OSD holds as a primary.
#[derive(Default)]
pub struct Watches {
    objects: Mutex<HashMap<ObjectId, Vec<Watcher>>>,
    next_notify: AtomicU64,
}

impl std::fmt::Debug for Watches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.objects.lock().map(|o| o.len()).unwrap_or(0);
        write!(f, "Watches({n} objects)")
    }
}

/// Why a watch request failed: the wire code and a message.
pub type Refusal = (OsdErrorCode, String);

fn clamp_ms(ms: u32, default: Duration, max: Duration) -> Duration {
    match ms {
        0 => default,
        n => Duration::from_millis(u64::from(n)).min(max),
    }
}

impl Watches {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectId, Vec<Watcher>>> {
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live watchers of `obj`, dropping the ones that timed out.
    fn live(&self, obj: &ObjectId, now: Instant) -> Vec<(WatcherInfo, Connection)> {
        let mut objects = self.lock();
        let Some(ws) = objects.get_mut(obj) else {
            return Vec::new();
        };
        ws.retain(|w| w.live(now));
        let out = ws
            .iter()
            .map(|w| (w.info.clone(), w.conn.clone()))
            .collect();
        if ws.is_empty() {
            objects.remove(obj);
        }
        out
    }

    /// Handles an [`OsdWatch`] from `peer` on `conn`: the watchers for
    /// `OP_LIST`, nothing otherwise.
    pub fn handle(
        &self,
        m: &OsdWatch,
        peer: &PeerInfo,
        conn: &Connection,
    ) -> Result<Vec<WatcherInfo>, Refusal> {
        let obj = (m.pool, m.nspace.clone(), m.oid.clone());
        let now = Instant::now();
        let entity = peer.name.to_string();
        let same = |w: &Watcher| {
            w.info.entity == entity
                && w.info.client_inc == m.client_inc
                && w.info.cookie == m.cookie
        };
        match m.op {
            OsdWatch::OP_LIST => Ok(self.live(&obj, now).into_iter().map(|(i, _)| i).collect()),
            OsdWatch::OP_WATCH | OsdWatch::OP_PING => {
                let mut objects = self.lock();
                let ws = objects.entry(obj).or_default();
                ws.retain(|w| w.live(now));
                let timeout = clamp_ms(m.timeout_ms, WATCH_TIMEOUT_DEFAULT, WATCH_TIMEOUT_MAX);
                if let Some(w) = ws.iter_mut().find(|w| same(w)) {
                    // Renewed, perhaps on a new connection after a reconnect.
                    w.renewed = now;
                    w.conn = conn.clone();
                    w.timeout = timeout;
                    w.info.addr = peer.addr.to_string();
                    return Ok(Vec::new());
                }
                if m.op == OsdWatch::OP_PING {
                    return Err((
                        OsdErrorCode::NotFound,
                        format!("no watch {:x} on {}: register it again", m.cookie, m.oid),
                    ));
                }
                if ws.len() >= WATCHERS_MAX {
                    return Err((
                        OsdErrorCode::TooLarge,
                        format!("{} has {WATCHERS_MAX} watchers already", m.oid),
                    ));
                }
                ws.push(Watcher {
                    info: WatcherInfo {
                        entity,
                        client_inc: m.client_inc,
                        cookie: m.cookie,
                        addr: peer.addr.to_string(),
                    },
                    conn: conn.clone(),
                    renewed: now,
                    timeout,
                });
                Ok(Vec::new())
            }
            OsdWatch::OP_UNWATCH => {
                let mut objects = self.lock();
                if let Some(ws) = objects.get_mut(&obj) {
                    ws.retain(|w| !same(w));
                    if ws.is_empty() {
                        objects.remove(&obj);
                    }
                }
                Ok(Vec::new())
            }
            op => Err((
                OsdErrorCode::InvalidArgument,
                format!("unknown watch op {op}"),
            )),
        }
    }

    /// Delivers a notify to every live watcher of its object and gathers
    /// their acknowledgements: the reply and its data part.
    pub async fn notify(
        &self,
        m: &OsdNotify,
        notifier: &PeerInfo,
        payload: Bytes,
        epoch: u32,
    ) -> (OsdNotifyReply, Bytes) {
        let mut reply = OsdNotifyReply {
            epoch,
            ..Default::default()
        };
        if payload.len() > NOTIFY_BYTES_MAX {
            reply.code = OsdErrorCode::TooLarge as u32;
            reply.message = format!("a notify carries at most {NOTIFY_BYTES_MAX} bytes");
            return (reply, Bytes::new());
        }
        let timeout = clamp_ms(m.timeout_ms, NOTIFY_TIMEOUT_DEFAULT, NOTIFY_TIMEOUT_MAX);
        let obj = (m.pool, m.nspace.clone(), m.oid.clone());
        let notify_id = self.next_notify.fetch_add(1, Ordering::Relaxed) + 1;
        let mut set = tokio::task::JoinSet::new();
        for (info, conn) in self.live(&obj, Instant::now()) {
            let msg = WatchNotify {
                pool: m.pool,
                oid: m.oid.clone(),
                nspace: m.nspace.clone(),
                cookie: info.cookie,
                notify_id,
                notifier: notifier.name.to_string(),
            };
            let payload = payload.clone();
            set.spawn(async move {
                let r = conn.request_with_timeout(msg, payload, timeout).await;
                match r {
                    Ok(r)
                        if matches!(r.msg, Message::WatchNotifyAck(_))
                            && r.data.len() <= NOTIFY_BYTES_MAX =>
                    {
                        (info, Some(r.data))
                    }
                    _ => (info, None),
                }
            });
        }
        let mut data = BytesMut::new();
        while let Some(r) = set.join_next().await {
            let Ok((info, ack)) = r else { continue };
            match ack {
                Some(d) => {
                    reply.reply_len.push(d.len() as u64);
                    data.extend_from_slice(&d);
                    reply.acked.push(info);
                }
                None => reply.missed.push(info),
            }
        }
        (reply, data.freeze())
    }
}

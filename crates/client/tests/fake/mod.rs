//! A fake OSD for the client's tests: OSD entities that authenticate and
//! boot into a real monitor's map like real OSDs, but answer every request
//! from one in-memory table shared by all of them, record what they
//! receive, and apply injected faults (refuse, drop the connection, stay
//! silent) to the next requests.

#![allow(clippy::unwrap_used, dead_code)] // Test support: a failed unwrap is a failed test.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use shoal_monclient::{Command, MonClient, TicketAuth};
use shoal_net::{Incoming, Messenger, Responder};
use shoal_proto::{
    ErrorReply, Message, OpCode, OsdErrorCode, OsdOp, OsdOpReply, OsdSubOpResult, PgList,
    PgListReply,
};
use shoal_testkit::{Cluster, MON, net_cfg};
use shoal_types::EntityName;

/// What a fake OSD does with the next request instead of executing it.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// Answer with this code and epoch.
    Reply(OsdErrorCode, u32),
    /// Close the connection without answering.
    Close,
    /// Never answer.
    Hang,
}

/// One request as a fake OSD received it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The OSD that got it.
    pub osd: i32,
    /// Object.
    pub oid: String,
    /// The PG the client placed it in.
    pub pg_seed: u32,
    /// The client's map epoch.
    pub epoch: u32,
    /// Request id: client instance.
    pub client_inc: u64,
    /// Request id: tid.
    pub tid: u64,
    /// `OsdOp::FLAG_*`.
    pub flags: u32,
}

type Key = (u32, String, String);

/// The state every fake OSD shares: the objects, the requests seen, the
/// faults to inject (in order, whichever OSD gets the next request).
#[derive(Default)]
pub struct Fakes {
    /// Objects by (PG seed, namespace, name).
    pub objects: Mutex<BTreeMap<Key, Vec<u8>>>,
    /// Every `OsdOp` received, in order.
    pub seen: Mutex<Vec<Seen>>,
    /// The PG of every `PgList` received, in order.
    pub listed: Mutex<Vec<u32>>,
    /// Faults for the next requests.
    pub faults: Mutex<VecDeque<Fault>>,
    /// Requests left unanswered.
    pub hung: Mutex<Vec<Responder>>,
    /// How long each op takes.
    pub delay_ms: AtomicUsize,
    /// Ops being executed now.
    pub inflight: AtomicUsize,
    /// The most ops executed at once.
    pub inflight_max: AtomicUsize,
    /// The last version given.
    pub version: AtomicUsize,
}

impl Fakes {
    /// Queues a fault for the next request.
    pub fn fault(&self, f: Fault) {
        self.faults.lock().unwrap().push_back(f);
    }

    /// Every op received.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The ops received for `oid`.
    pub fn seen_for(&self, oid: &str) -> Vec<Seen> {
        self.seen().into_iter().filter(|s| s.oid == oid).collect()
    }

    /// Applies `fault` if one is queued; `None`: it was handled.
    async fn inject(
        &self,
        responder: Responder,
        inc_conn: &shoal_net::Connection,
    ) -> Option<Responder> {
        let fault = self.faults.lock().unwrap().pop_front();
        match fault {
            None => Some(responder),
            Some(Fault::Reply(code, epoch)) => {
                let rep = OsdOpReply {
                    code: code as u32,
                    message: format!("injected {code:?}"),
                    epoch,
                    ..Default::default()
                };
                let _ = responder.reply(rep, Bytes::new()).await;
                None
            }
            Some(Fault::Close) => {
                inc_conn.close();
                None
            }
            Some(Fault::Hang) => {
                self.hung.lock().unwrap().push(responder);
                None
            }
        }
    }

    async fn handle(self: Arc<Self>, osd: i32, inc: Incoming) {
        let Some(responder) = inc.responder else {
            return;
        };
        match inc.msg {
            Message::OsdOp(op) => {
                self.seen.lock().unwrap().push(Seen {
                    osd,
                    oid: op.oid.clone(),
                    pg_seed: op.pg_seed,
                    epoch: op.epoch,
                    client_inc: op.client_inc,
                    tid: op.tid,
                    flags: op.flags,
                });
                let Some(responder) = self.inject(responder, &inc.conn).await else {
                    return;
                };
                if op.oid == "refuse" {
                    let _ = responder.error(ErrorReply::MALFORMED, "refused").await;
                    return;
                }
                let now = self.inflight.fetch_add(1, Ordering::SeqCst) + 1;
                self.inflight_max.fetch_max(now, Ordering::SeqCst);
                let delay = self.delay_ms.load(Ordering::SeqCst) as u64;
                tokio::time::sleep(Duration::from_millis(delay)).await;
                let (rep, data) = self.execute(&op, &inc.data);
                self.inflight.fetch_sub(1, Ordering::SeqCst);
                let _ = responder.reply(rep, data).await;
            }
            Message::PgList(l) => {
                self.listed.lock().unwrap().push(l.pg_seed);
                let fault = self.faults.lock().unwrap().pop_front();
                if let Some(Fault::Reply(code, epoch)) = fault {
                    let rep = PgListReply {
                        code: code as u32,
                        epoch,
                        ..Default::default()
                    };
                    let _ = responder.reply(rep, Bytes::new()).await;
                    return;
                }
                let _ = responder.reply(self.list(&l), Bytes::new()).await;
            }
            _ => {
                let _ = responder.error(ErrorReply::UNSUPPORTED, "fake OSD").await;
            }
        }
    }

    /// Runs the sub-operations on a copy of the object, kept only if all succeed.
    fn execute(&self, op: &OsdOp, data: &Bytes) -> (OsdOpReply, Bytes) {
        let fail = |code: OsdErrorCode, index: usize| {
            let rep = OsdOpReply {
                code: code as u32,
                message: format!("{code:?}"),
                failed_op: index as u32,
                ..Default::default()
            };
            (rep, Bytes::new())
        };
        // "code-N" objects answer every op with error code N.
        if let Some(n) = op.oid.strip_prefix("code-") {
            return fail(OsdErrorCode::from_u32(n.parse().unwrap()), 0);
        }
        let key = (op.pg_seed, op.nspace.clone(), op.oid.clone());
        let mut objects = self.objects.lock().unwrap();
        let mut obj = objects.get(&key).cloned();
        let mut results = Vec::new();
        let mut out = BytesMut::new();
        let mut at = 0usize;
        for (i, sub) in op.ops.iter().enumerate() {
            let payload = data.slice(at..at + sub.data_len as usize);
            at += sub.data_len as usize;
            let mut r = OsdSubOpResult::default();
            match OpCode::from_u32(sub.code).unwrap() {
                OpCode::WriteFull => obj = Some(payload.to_vec()),
                OpCode::Write => {
                    let o = obj.get_or_insert_with(Vec::new);
                    let end = sub.offset as usize + payload.len();
                    if o.len() < end {
                        o.resize(end, 0);
                    }
                    o[sub.offset as usize..end].copy_from_slice(&payload);
                }
                OpCode::Append => obj.get_or_insert_with(Vec::new).extend_from_slice(&payload),
                OpCode::Create => {
                    if obj.is_some() && sub.flags != 0 {
                        return fail(OsdErrorCode::Exists, i);
                    }
                    obj.get_or_insert_with(Vec::new);
                }
                OpCode::Read | OpCode::Stat | OpCode::AssertExists | OpCode::Remove => {
                    let Some(o) = obj.as_ref() else {
                        return fail(OsdErrorCode::NotFound, i);
                    };
                    match OpCode::from_u32(sub.code).unwrap() {
                        OpCode::Read => {
                            let start = (sub.offset as usize).min(o.len());
                            let end = match sub.length {
                                0 => o.len(),
                                n => (start + n as usize).min(o.len()),
                            };
                            r.data_len = (end - start) as u64;
                            out.extend_from_slice(&o[start..end]);
                        }
                        OpCode::Stat => r.size = o.len() as u64,
                        OpCode::Remove => obj = None,
                        _ => {}
                    }
                }
                OpCode::GetXattr => return fail(OsdErrorCode::NoData, i),
                _ => return fail(OsdErrorCode::InvalidArgument, i),
            }
            results.push(r);
        }
        match obj {
            Some(o) => objects.insert(key, o),
            None => objects.remove(&key),
        };
        let rep = OsdOpReply {
            version: self.version.fetch_add(1, Ordering::SeqCst) as u64 + 1,
            results,
            ..Default::default()
        };
        (rep, out.freeze())
    }

    /// One page of a PG: objects in (namespace, name) order; the cursor is
    /// the first object not yet returned, as "nspace\0name".
    fn list(&self, l: &PgList) -> PgListReply {
        let objects = self.objects.lock().unwrap();
        let from = l.has_cursor.then(|| l.cursor_name.clone());
        let mut rest = objects
            .keys()
            .filter(|(seed, _, _)| *seed == l.pg_seed)
            .map(|(_, ns, name)| (ns.clone(), name.clone()))
            .filter(|(ns, name)| from.as_ref().is_none_or(|f| &cursor(ns, name) >= f));
        let mut rep = PgListReply::default();
        for (ns, name) in rest.by_ref().take(l.max.max(1) as usize) {
            rep.nspaces.push(ns);
            rep.names.push(name);
        }
        if let Some((ns, name)) = rest.next() {
            rep.more = true;
            rep.next_name = cursor(&ns, &name);
        }
        rep
    }
}

fn cursor(ns: &str, name: &str) -> Vec<u8> {
    [ns.as_bytes(), b"\0", name.as_bytes()].concat()
}

/// A monitor, `n` fake OSDs booted into its map, and a pool `rbd`.
pub async fn cluster(tag: &str, n: i32, pg_num: u32) -> (Cluster, Arc<Fakes>, Vec<Messenger>) {
    let c = Cluster::new(tag).await;
    c.create_pool("rbd", pg_num, 2).await;
    let fakes = Arc::new(Fakes::default());
    let mut msgrs = Vec::new();
    for id in 0..n {
        let key = c
            .entity_key(
                &format!("osd.{id}"),
                &[("mon", "allow profile osd"), ("osd", "allow *")],
            )
            .await;
        let me = EntityName::osd(id as u32);
        let auth = TicketAuth::new(me.clone(), key);
        let f = Arc::clone(&fakes);
        let dispatch = move |inc: Incoming| {
            tokio::spawn(Arc::clone(&f).handle(id, inc));
        };
        let msgr = Messenger::new(
            me,
            net_cfg(),
            Arc::new(c.net.clone()),
            Arc::new(auth.clone()),
            Arc::new(dispatch),
        );
        let addr = msgr.bind(Cluster::osd_addr(id)).await.unwrap();
        let monc = MonClient::new(
            msgr.clone(),
            vec![MON.parse().unwrap()],
            Duration::from_secs(8),
        );
        // The service secrets check client tickets; the first ticket issued
        // creates them. The renewal keeps them fresh until the runtime ends.
        while auth.refresh_ticket(&monc).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        auth.refresh_secrets(&monc).await.unwrap();
        let _renew = auth.spawn_renewal(monc.clone(), true);
        let boot = Command::OsdBoot {
            id,
            addr: addr.to_string(),
            host: format!("host{id}"),
            weight: 0x10000,
            nonce: 0,
        };
        monc.command(&boot).await.unwrap();
        msgrs.push(msgr);
    }
    c.wait_up(n).await;
    (c, fakes, msgrs)
}

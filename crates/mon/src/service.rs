//! The monitor daemon: a messenger, a Raft node over [`MonStore`], and the
//! handling of Raft RPCs and client commands.
//!
//! Any monitor accepts any command. It checks the caller's `mon`
//! capabilities, then runs the command itself if it leads, or forwards it to
//! the leader and relays the answer. Reads are linearizable (the leader
//! confirms its leadership with a quorum first); writes are answered once
//! committed. Without a quorum, a command fails with `NoQuorum` within the
//! command timeout instead of hanging.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use openraft::{BasicNode, ChangeMembers, Config, SnapshotPolicy};
use serde_json::{Value, json};
use shoal_net::{
    AuthProvider, Connection, Dispatcher, Incoming, Keyring, Messenger, NetConfig, Responder,
    Secret, Ticket, Transport, now_ms,
};
use shoal_proto::{
    ErrorReply, Message, MonCommand, MonCommandReply, MonPastIntervals, MonPastIntervalsReply,
    MonRaft, MonRaftReply, MonSubscribe, MonUpdate,
};
use shoal_types::{EntityName, EntityType};

use crate::mkfs::MonMeta;
use crate::network::{MonNetwork, PeerContact, RPC_APPEND, RPC_SNAPSHOT, RPC_VOTE};
use crate::osdmap::{Boot, OsdChange};
use crate::state::{AuthEntry, MonInfo, MonRequest, MonResponse, MonState, node_id};
use crate::store::MonStore;
use crate::types::MonRaft as Raft;
use shoal_monclient::replies::{
    AgedReport, AuthSummary, ConfigGetReply, ConfigValue, CrashLsReply, DaemonReportsReply,
    MonMapSummary, MonSummary, STATUS_VERSION, StatusReply,
};
use shoal_monclient::{Command, parse_mon_caps};
use shoal_monclient::{ErrorCode, MonError};

/// How a monitor runs.
#[derive(Debug, Clone)]
pub struct MonitorOptions {
    /// The data directory made by `mkfs`.
    pub data: PathBuf,
    /// Messenger settings.
    pub net: NetConfig,
    /// Raft heartbeat interval.
    pub heartbeat: Duration,
    /// Raft election timeout: the lower bound of each monitor's randomised
    /// timeout, whose upper bound is 1.5 times this. A follower calls an
    /// election when it has not heard from the leader for the leader's
    /// lease (the upper bound) plus its own timeout.
    pub election_timeout: Duration,
    /// Log entries between snapshots.
    pub snapshot_every: u64,
    /// How long a command may wait for a leader and a commit.
    pub command_timeout: Duration,
    /// Validity of the tickets this monitor issues.
    pub ticket_ttl: Duration,
    /// Age at which the leader replaces the newest service secret.
    pub secret_rotation: Duration,
    /// CRUSH failure domain of the default rule at bootstrap (`host`, `osd`).
    pub failure_domain: String,
    /// OSD-map epochs of history kept (set at bootstrap).
    pub osdmap_history: u32,
    /// Epochs between kept full OSD maps (set at bootstrap).
    pub osdmap_full_interval: u32,
    /// How the leader decides an OSD is down or out.
    pub osd: OsdLiveness,
    /// A manager silent this long loses its role.
    pub mgr_beacon_grace: Duration,
    /// A metadata server silent this long loses its rank to a standby.
    pub mds_beacon_grace: Duration,
    /// Past which share of used space an OSD is nearfull, backfillfull, full.
    pub full_ratios: crate::views_space::FullRatios,
}

/// How the leader decides an OSD is down or out, and how it batches.
#[derive(Debug, Clone)]
pub struct OsdLiveness {
    /// Distinct reporter subtrees needed to mark an OSD down.
    pub min_down_reporters: u32,
    /// CRUSH level that makes reporters distinct: `host`, or `osd` on one machine.
    pub reporter_subtree_level: String,
    /// An OSD with no beacon for this long is marked down.
    pub beacon_grace: Duration,
    /// A failure report counts for this long.
    pub report_expiry: Duration,
    /// A down OSD is marked out after this long (unless `noout`).
    pub down_out_interval: Duration,
    /// Boots, downs and outs arriving within this window share one epoch.
    pub batch_window: Duration,
}

impl Default for OsdLiveness {
    fn default() -> Self {
        OsdLiveness {
            min_down_reporters: 2,
            reporter_subtree_level: "host".into(),
            beacon_grace: Duration::from_secs(900),
            report_expiry: Duration::from_secs(40),
            down_out_interval: Duration::from_secs(600),
            batch_window: Duration::from_millis(100),
        }
    }
}

/// The leader's view of OSD liveness. Soft state: a new leader starts over,
/// giving every OSD a full grace period from its election.
#[derive(Default)]
struct Liveness {
    since: Option<Instant>,
    beacons: BTreeMap<i32, Instant>,
    down_since: BTreeMap<i32, Instant>,
    /// target -> reporter -> (when, immediate)
    reports: BTreeMap<i32, BTreeMap<i32, (Instant, bool)>>,
    boots: Vec<(Boot, tokio::sync::oneshot::Sender<Result<Value, MonError>>)>,
}

/// What the leader keeps in memory for the managers: their beacons, an
/// operator's `mgr fail`, and the daemons' performance reports. Soft
/// state: a new leader hears it all again within a beacon or report period.
#[derive(Default)]
struct MgrSoft {
    /// name -> (when, HTTP address)
    beacons: BTreeMap<String, (Instant, String)>,
    /// Metadata servers: name -> (when, client address, its own state,
    /// its instance)
    mds_beacons: BTreeMap<String, (Instant, String, String, u64)>,
    /// daemon -> (when, its newest report)
    reports: BTreeMap<String, (Instant, shoal_monclient::DaemonReport)>,
}

/// Reports older than this are not served (their daemon is gone).
const REPORT_MAX_AGE: Duration = Duration::from_secs(120);
/// Daemons whose reports are kept at most.
const REPORTERS_MAX: usize = 10_000;

/// A running monitor.
#[derive(Clone, Debug)]
pub struct Monitor {
    core: Arc<Core>,
}

struct Core {
    me: EntityName,
    id: u64,
    meta: MonMeta,
    raft: Raft,
    state: Arc<RwLock<MonState>>,
    msgr: Messenger,
    opts: MonitorOptions,
    subs: std::sync::Mutex<Vec<Subscriber>>,
    life: std::sync::Mutex<Liveness>,
    mgr: std::sync::Mutex<MgrSoft>,
    /// When each peer last answered our Raft RPCs (the quorum, on a leader).
    contact: Arc<PeerContact>,
    /// Moves on with every change this monitor applies.
    applied: tokio::sync::watch::Receiver<u64>,
}

/// A connection following part of the state.
struct Subscriber {
    conn: Connection,
    what: String,
    entity: EntityName,
    last: Value,
}

/// The value of `what` as `entity` sees it, and the marker that tells when
/// it changed. For `osdmap` the value is what takes a subscriber at epoch
/// `have` to the current epoch (the incrementals, or the full map when it
/// is too far behind) and the marker is the epoch.
/// A subscription's payload (JSON for `config` and `monmap`, the binary
/// [`shoal_monclient::OsdMapUpdate`] for `osdmap`) and the marker that
/// tells whether it changed.
fn subscription_value(
    what: &str,
    entity: &EntityName,
    state: &MonState,
    have: u64,
) -> Result<(Bytes, Value), MonError> {
    let json = |v: Value| (Bytes::from(v.to_string()), v);
    match what {
        "config" => Ok(json(json!(state.config_for(entity)))),
        "monmap" => Ok(json(
            json!({ "epoch": state.monmap_epoch, "mons": state.mons }),
        )),
        "osdmap" => {
            let epoch = state.osdmap.epoch();
            Ok((
                Bytes::from(crate::views::osdmap_update(&state.osdmap, have)),
                json!(epoch),
            ))
        }
        other => Err(MonError::new(
            ErrorCode::InvalidArgument,
            format!("cannot subscribe to {other:?} (config, monmap, osdmap)"),
        )),
    }
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Monitor({})", self.me)
    }
}

fn internal(e: impl std::fmt::Display) -> MonError {
    MonError::new(ErrorCode::Internal, e.to_string())
}

fn read_state(state: &RwLock<MonState>) -> std::sync::RwLockReadGuard<'_, MonState> {
    // apply() never panics while holding the lock; a poisoned lock still
    // holds a consistent state.
    state.read().unwrap_or_else(|p| p.into_inner())
}

/// Keys come from the replicated auth database; before bootstrap, from the
/// bootstrap keyring in the data directory.
struct MonAuth {
    me: EntityName,
    keyring: Keyring,
    state: Arc<RwLock<MonState>>,
}

impl AuthProvider for MonAuth {
    fn own_secret(&self) -> Option<Secret> {
        self.keyring.get(&self.me).map(|e| e.key.clone())
    }
    fn secret_for(&self, peer: &EntityName) -> Option<Secret> {
        let from_state = read_state(&self.state)
            .auth
            .get(&peer.to_string())
            .and_then(|e| Secret::from_base64(&e.key).ok());
        from_state.or_else(|| self.keyring.get(peer).map(|e| e.key.clone()))
    }
}

/// How long a monitor behind the asker's epoch waits to catch up before it
/// sends a past-intervals query elsewhere.
const PAST_INTERVALS_WAIT: Duration = Duration::from_secs(1);

/// Routes messages to the core once it exists.
struct MonDispatcher {
    core: Arc<OnceLock<Arc<Core>>>,
}

impl Dispatcher for MonDispatcher {
    fn dispatch(&self, inc: Incoming) {
        let Some(core) = self.core.get().cloned() else {
            if let Some(r) = inc.responder {
                tokio::spawn(r.error(ErrorReply::SHUTTING_DOWN, "monitor starting"));
            }
            return;
        };
        let Some(responder) = inc.responder else {
            return;
        };
        let caller = inc.conn.peer().name.clone();
        tokio::spawn(async move {
            match inc.msg {
                Message::MonRaft(MonRaft { rpc }) => core.raft_rpc(rpc, inc.data, responder).await,
                Message::MonCommand(MonCommand { command }) => {
                    let reply = core.command(&caller, &command).await;
                    let _ = responder.reply(to_reply(reply), Bytes::new()).await;
                }
                Message::MonPastIntervals(q) => {
                    let (reply, data) = match core.past_intervals(&caller, &q).await {
                        Ok(data) => (
                            MonPastIntervalsReply {
                                code: 0,
                                message: String::new(),
                            },
                            data,
                        ),
                        Err(e) => (
                            MonPastIntervalsReply {
                                code: e.code as u32,
                                message: e.message,
                            },
                            Bytes::new(),
                        ),
                    };
                    let _ = responder.reply(reply, data).await;
                }
                Message::MonSubscribe(MonSubscribe { what, have }) => {
                    match core.subscribe(&caller, inc.conn, &what, have) {
                        Ok((version, value)) => {
                            let update = MonUpdate { what, version };
                            let _ = responder.reply(update, value).await;
                        }
                        Err(e) => {
                            let _ = responder.reply(to_reply(Err(e)), Bytes::new()).await;
                        }
                    }
                }
                other => {
                    let msg = format!("monitors do not handle {}", other.msg_type().name());
                    let _ = responder.error(ErrorReply::UNSUPPORTED, msg).await;
                }
            }
        });
    }
}

fn to_reply(r: Result<Value, MonError>) -> MonCommandReply {
    match r {
        Ok(v) => MonCommandReply {
            code: 0,
            output: v.to_string(),
        },
        Err(e) => MonCommandReply {
            code: e.code as u32,
            output: e.message,
        },
    }
}

fn election_timeout_min_ms(opts: &MonitorOptions) -> u64 {
    u64::try_from(opts.election_timeout.as_millis()).unwrap_or(u64::MAX / 2)
}

/// The upper bound of the randomised election timeout, which openraft also
/// takes as the leader's lease: a follower waits this long plus its own
/// timeout after the last heartbeat before it calls an election. Half the
/// lower bound again (rather than twice it) keeps a failover under
/// 3 × `election_timeout` while the spread still separates candidates.
fn election_timeout_max_ms(opts: &MonitorOptions) -> u64 {
    let min = election_timeout_min_ms(opts);
    min + (min / 2).max(1)
}

impl Monitor {
    /// Starts the monitor in `opts.data`, listening on its address from the
    /// initial monitors (or `listen` when given).
    pub async fn start(
        opts: MonitorOptions,
        transport: Arc<dyn Transport>,
        listen: Option<SocketAddr>,
    ) -> Result<Monitor, MonError> {
        let meta = MonMeta::load(&opts.data)?;
        let me = meta.entity()?;
        let keyring_path = opts.data.join("keyring");
        let keyring = Keyring::load(&keyring_path).map_err(internal)?;
        let store = MonStore::open(&opts.data).map_err(internal)?;
        let fresh = store.is_fresh().await;
        let state = store.state();
        let applied = store.watch_applied();
        let slot = Arc::new(OnceLock::new());
        let auth = Arc::new(MonAuth {
            me: me.clone(),
            keyring: keyring.clone(),
            state: Arc::clone(&state),
        });
        let dispatcher = Arc::new(MonDispatcher {
            core: Arc::clone(&slot),
        });
        let msgr = Messenger::new(me.clone(), opts.net.clone(), transport, auth, dispatcher);
        let addr = match listen {
            Some(a) => a,
            None => {
                let own = meta.initial.get(&meta.name).cloned();
                let recorded = read_state(&state)
                    .mons
                    .get(&meta.name)
                    .map(|m| m.addr.clone());
                let a = recorded.or(own).unwrap_or_default();
                a.parse().map_err(|_| {
                    internal(format!("mon.{} has no valid address ({a:?})", meta.name))
                })?
            }
        };
        msgr.bind(addr).await.map_err(internal)?;
        let config = Config {
            cluster_name: "shoal-mon".into(),
            heartbeat_interval: opts.heartbeat.as_millis() as u64,
            election_timeout_min: election_timeout_min_ms(&opts),
            election_timeout_max: election_timeout_max_ms(&opts),
            snapshot_policy: SnapshotPolicy::LogsSinceLast(opts.snapshot_every),
            max_in_snapshot_log_to_keep: 64,
            ..Config::default()
        }
        .validate()
        .map_err(internal)?;
        let id = node_id(&meta.name);
        let (log, sm) = openraft::storage::Adaptor::new(store);
        let network = MonNetwork::new(msgr.clone());
        let contact = network.contact();
        let raft = Raft::new(id, Arc::new(config), network, log, sm)
            .await
            .map_err(internal)?;
        let core = Arc::new(Core {
            me,
            id,
            meta,
            raft,
            state,
            msgr,
            opts,
            subs: std::sync::Mutex::new(Vec::new()),
            life: std::sync::Mutex::new(Liveness::default()),
            mgr: std::sync::Mutex::new(MgrSoft::default()),
            contact,
            applied: applied.clone(),
        });
        tokio::spawn(osd_tick(Arc::downgrade(&core)));
        let _ = slot.set(Arc::clone(&core));
        tokio::spawn(push_updates(Arc::downgrade(&core), applied));
        if fresh && core.meta.initial.keys().next() == Some(&core.meta.name) {
            tokio::spawn(Arc::clone(&core).bootstrap(keyring));
        }
        tokio::spawn(rotate_service_secrets(Arc::downgrade(&core)));
        tokio::spawn(record_health(Arc::downgrade(&core)));
        tracing::info!(mon = %core.me, %addr, "monitor started");
        Ok(Monitor { core })
    }

    /// The replicated state as this monitor has applied it.
    pub fn state(&self) -> MonState {
        read_state(&self.core.state).clone()
    }

    /// Where this monitor listens.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.core.msgr.local_addr()
    }

    /// The current leader's node id, if known.
    pub async fn leader(&self) -> Option<u64> {
        self.core.raft.current_leader().await
    }

    /// Runs a command as `caller` would.
    pub async fn command(&self, caller: &EntityName, cmd: &Command) -> Result<Value, MonError> {
        let json = serde_json::to_string(cmd).map_err(internal)?;
        self.core.command(caller, &json).await
    }

    /// Stops Raft and the messenger.
    pub async fn shutdown(&self) {
        let _ = self.core.raft.shutdown().await;
        self.core.msgr.shutdown().await;
    }
}

impl Core {
    /// Initializes Raft with the initial monitors and proposes the first
    /// entry: fsid, monitor map and bootstrap keys.
    async fn bootstrap(self: Arc<Self>, keyring: Keyring) {
        let members: BTreeMap<u64, BasicNode> = self
            .meta
            .initial
            .iter()
            .map(|(n, a)| (node_id(n), BasicNode { addr: a.clone() }))
            .collect();
        if let Err(e) = self.raft.initialize(members).await {
            tracing::warn!("raft initialize: {e}");
        }
        let mons = self
            .meta
            .initial
            .iter()
            .map(|(n, a)| {
                let info = MonInfo {
                    id: node_id(n),
                    addr: a.clone(),
                };
                (n.clone(), info)
            })
            .collect();
        let auth = keyring
            .entities()
            .filter_map(|e| {
                let entry = keyring.get(e)?;
                let a = AuthEntry {
                    key: entry.key.to_base64(),
                    caps: entry.caps.clone(),
                };
                Some((e.to_string(), a))
            })
            .collect();
        let req = MonRequest::Bootstrap {
            fsid: self.meta.fsid.clone(),
            failure_domain: self.opts.failure_domain.clone(),
            history: self.opts.osdmap_history,
            full_interval: self.opts.osdmap_full_interval,
            mons,
            auth,
        };
        while read_state(&self.state).fsid.is_empty() {
            if self.raft.current_leader().await == Some(self.id) {
                match self.raft.client_write(req.clone()).await {
                    Ok(_) => tracing::info!(fsid = %self.meta.fsid, "cluster bootstrapped"),
                    Err(e) => tracing::debug!("bootstrap proposal: {e}"),
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn raft_rpc(&self, rpc: u32, body: Bytes, responder: Responder) {
        fn answer<T: serde::Serialize, E: serde::Serialize>(r: Result<T, E>) -> (bool, Vec<u8>) {
            match r {
                Ok(v) => (false, serde_json::to_vec(&v).unwrap_or_default()),
                Err(e) => (true, serde_json::to_vec(&e).unwrap_or_default()),
            }
        }
        let result = match rpc {
            RPC_APPEND => match serde_json::from_slice(&body) {
                Ok(req) => Ok(answer(self.raft.append_entries(req).await)),
                Err(e) => Err(e.to_string()),
            },
            RPC_VOTE => match serde_json::from_slice(&body) {
                Ok(req) => Ok(answer(self.raft.vote(req).await)),
                Err(e) => Err(e.to_string()),
            },
            RPC_SNAPSHOT => match serde_json::from_slice(&body) {
                Ok(req) => Ok(answer(self.raft.install_snapshot(req).await)),
                Err(e) => Err(e.to_string()),
            },
            other => Err(format!("unknown raft rpc {other}")),
        };
        let _ = match result {
            Ok((error, data)) => {
                responder
                    .reply(MonRaftReply { error }, Bytes::from(data))
                    .await
            }
            Err(e) => responder.error(ErrorReply::MALFORMED, e).await,
        };
    }

    /// A PG's past intervals for peering ([`MonPastIntervals`]), from this
    /// monitor's applied state once its map reaches the asker's epoch (an
    /// applied epoch is committed, so any monitor answers alike), in the
    /// binary encoding of [`shoal_maps::PastIntervals`].
    async fn past_intervals(
        &self,
        caller: &EntityName,
        q: &MonPastIntervals,
    ) -> Result<Bytes, MonError> {
        let pg = shoal_maps::PgId {
            pool: q.pool,
            seed: q.pg_seed,
        };
        self.wait_caught_up(caller).await?;
        let as_command = Command::PgPastIntervals {
            pgid: pg.to_string(),
            since: q.since,
        };
        self.check_caps(caller, &as_command)?;
        // Briefly: a monitor that far behind sends the asker to another.
        let wait = self.opts.command_timeout.min(PAST_INTERVALS_WAIT);
        let deadline = Instant::now() + wait;
        let mut applied = self.applied.clone();
        loop {
            {
                let state = read_state(&self.state);
                if state.osdmap.epoch() >= q.epoch {
                    let (from, intervals) = state.osdmap.past_intervals(pg, q.since)?;
                    let p = shoal_maps::PastIntervals { from, intervals };
                    return Ok(Bytes::from(p.encode()));
                }
            }
            let more = tokio::time::timeout_at(deadline, applied.changed()).await;
            if !matches!(more, Ok(Ok(()))) {
                return Err(MonError::new(
                    ErrorCode::Again,
                    format!(
                        "{} has not reached epoch {} within {wait:?}; ask another monitor",
                        self.me, q.epoch
                    ),
                ));
            }
        }
    }

    /// A caller that authenticated but is not in this monitor's copy of the
    /// auth database means this monitor has not caught up with the quorum
    /// (it just restarted): wait for it, up to the command timeout, then
    /// answer "no quorum" (a monitor that cannot catch up has none).
    async fn wait_caught_up(&self, caller: &EntityName) -> Result<(), MonError> {
        if caller.ty() == EntityType::Mon {
            return Ok(());
        }
        let deadline = Instant::now() + self.opts.command_timeout;
        loop {
            if read_state(&self.state)
                .auth
                .contains_key(&caller.to_string())
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(MonError::new(
                    ErrorCode::NoQuorum,
                    format!(
                        "no quorum: {} has not caught up with the quorum within {:?} (cannot check {caller}'s capabilities)",
                        self.me, self.opts.command_timeout
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn check_caps(&self, caller: &EntityName, cmd: &Command) -> Result<(), MonError> {
        if caller.ty() == EntityType::Mon {
            return Ok(());
        }
        let state = read_state(&self.state);
        let Some(entry) = state.auth.get(&caller.to_string()) else {
            // It authenticated, so it exists: this monitor has not caught
            // up with the replicated auth database yet (it just started).
            return Err(MonError::new(
                ErrorCode::Again,
                format!(
                    "{} has not caught up with the auth database yet; retry",
                    self.me
                ),
            ));
        };
        let cap = entry.caps.get("mon").map(String::as_str).unwrap_or("");
        let caps = parse_mon_caps(cap);
        let (ok, need) = if cmd.is_write() {
            (caps.write, "w")
        } else {
            (caps.read, "r")
        };
        if ok {
            Ok(())
        } else {
            Err(MonError::new(
                ErrorCode::PermissionDenied,
                format!("{caller} lacks mon '{need}' capability (has {cap:?})"),
            ))
        }
    }

    /// Runs or forwards one command until it succeeds, fails for good, or
    /// the command timeout passes.
    async fn command(&self, caller: &EntityName, json: &str) -> Result<Value, MonError> {
        let cmd: Command = serde_json::from_str(json)
            .map_err(|e| MonError::new(ErrorCode::InvalidArgument, format!("bad command: {e}")))?;
        if let Command::MonHunt { wait_ms } = cmd {
            return Ok(self.hunted(caller, Duration::from_millis(wait_ms)).await);
        }
        self.wait_caught_up(caller).await?;
        self.check_caps(caller, &cmd)?;
        if let Some(id) = cmd.speaks_for_osd() {
            let ok = caller.ty() == EntityType::Mon
                || (caller.ty() == EntityType::Osd && caller.id() == id.to_string());
            if !ok {
                return Err(MonError::new(
                    ErrorCode::PermissionDenied,
                    format!("{caller} may not speak for osd.{id}"),
                ));
            }
        }
        if let Command::DaemonReport { report } = &cmd {
            check_report(caller, report)?;
        }
        // Tickets are issued by whichever monitor the caller reached, from
        // its applied state: they name the caller, who is known only here.
        match &cmd {
            Command::AuthGetTicket { service } => return self.issue_ticket(caller, service),
            Command::AuthServiceSecrets { service } => {
                return self.service_secrets(caller, service);
            }
            _ => {}
        }
        let deadline = Instant::now() + self.opts.command_timeout;
        let mut last = String::from("no leader elected");
        while Instant::now() < deadline {
            let leader = self.raft.current_leader().await;
            let outcome = match leader {
                Some(l) if l == self.id => self.lead(&cmd, deadline).await,
                Some(l) => self.forward(l, json, deadline).await,
                None => Err(Retry("no leader elected".into())),
            };
            match outcome {
                Ok(r) => return r,
                Err(Retry(why)) => last = why,
            }
            // Try again as soon as another leader is known (an election
            // ended), or after a moment if the failure was passing.
            let pause =
                Duration::from_millis(50).min(deadline.saturating_duration_since(Instant::now()));
            let _ = tokio::time::timeout(pause, self.leader_other_than(leader)).await;
        }
        Err(MonError::new(
            ErrorCode::NoQuorum,
            format!(
                "no quorum: {} could not complete the command within {:?} ({last})",
                self.me, self.opts.command_timeout
            ),
        ))
    }

    /// Returns once this monitor knows a leader other than `from` (or none
    /// when `from` is none: once it knows one).
    async fn leader_other_than(&self, from: Option<u64>) {
        let mut m = self.raft.metrics();
        let _ = m.wait_for(|m| m.current_leader != from).await;
        if m.has_changed().is_err() {
            // Raft stopped: nothing will change; let the caller's timeout end it.
            std::future::pending::<()>().await;
        }
    }

    /// Whether this monitor can serve `caller` now: it knows a leader and
    /// has the caller in its auth database. A client hunting for a monitor
    /// asks this of several at once and keeps the first that says yes; one
    /// that cannot yet holds the answer until it can, up to `wait` (so the
    /// end of an election answers the hunt, not the client's next try).
    async fn hunted(&self, caller: &EntityName, wait: Duration) -> Value {
        let deadline = Instant::now() + wait.min(self.opts.command_timeout);
        let mut metrics = self.raft.metrics();
        let lease_ms = election_timeout_max_ms(&self.opts);
        loop {
            let (leader, quorum_ack_ms) = {
                let m = metrics.borrow_and_update();
                (m.current_leader, m.millis_since_quorum_ack)
            };
            // A leader cut off from the others keeps its title (openraft
            // 0.9 does not step down); it leads a quorum only while a
            // quorum acknowledges it within the lease.
            let leads = |l: u64| l != self.id || quorum_ack_ms.is_some_and(|ms| ms <= lease_ms);
            let leader = leader.filter(|l| leads(*l));
            let knows_caller = caller.ty() == EntityType::Mon
                || read_state(&self.state)
                    .auth
                    .contains_key(&caller.to_string());
            let in_quorum = leader.is_some() && knows_caller;
            // Applying an entry changes the metrics too, so a caller that
            // arrives in the auth database wakes this as well.
            if in_quorum
                || !matches!(
                    tokio::time::timeout_at(deadline, metrics.changed()).await,
                    Ok(Ok(()))
                )
            {
                return json!({
                    "mon": self.meta.name,
                    "in_quorum": in_quorum,
                    "leader": leader.and_then(|l| self.name_of(l)),
                });
            }
        }
    }

    /// The name of the monitor with Raft node id `id`.
    fn name_of(&self, id: u64) -> Option<String> {
        read_state(&self.state)
            .mons
            .iter()
            .find(|(_, m)| m.id == id)
            .map(|(n, _)| n.clone())
    }

    async fn forward(&self, leader: u64, json: &str, deadline: Instant) -> Outcome {
        let addr = {
            let state = read_state(&self.state);
            state
                .mons
                .values()
                .find(|m| m.id == leader)
                .map(|m| m.addr.clone())
        };
        let addr = addr
            .or_else(|| {
                let m = self.raft.metrics().borrow().membership_config.clone();
                m.membership().get_node(&leader).map(|n| n.addr.clone())
            })
            .and_then(|a| a.parse::<SocketAddr>().ok())
            .ok_or_else(|| Retry(format!("leader {leader} has no known address")))?;
        let remaining = deadline.saturating_duration_since(Instant::now());
        // One attempt, abandoned when another leader is elected: a dead
        // leader must cost its election, not our connect backoff or timeout.
        let conn = tokio::select! {
            c = tokio::time::timeout(remaining, self.msgr.connect_once(addr)) => match c {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => return Err(Retry(e.to_string())),
                Err(_) => return Err(Retry(format!("leader at {addr}: connect timed out"))),
            },
            _ = self.leader_other_than(Some(leader)) => {
                return Err(Retry("the leader changed".into()));
            }
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        let cmd = MonCommand {
            command: json.to_string(),
        };
        let reply = conn
            .request_with_timeout(cmd, Bytes::new(), remaining)
            .await
            .map_err(|e| Retry(e.to_string()))?;
        match reply.msg {
            Message::MonCommandReply(r) if r.code == ErrorCode::NoQuorum as u32 => {
                Err(Retry(r.output))
            }
            Message::MonCommandReply(r) => Ok(from_reply(r)),
            _ => Err(Retry("unexpected reply from the leader".into())),
        }
    }

    /// Runs a command as the leader.
    async fn lead(&self, cmd: &Command, deadline: Instant) -> Outcome {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let work = async {
            if !cmd.is_write() {
                self.raft
                    .ensure_linearizable()
                    .await
                    .map_err(|e| Retry(e.to_string()))?;
                return Ok(self.read(cmd).await);
            }
            match cmd {
                Command::MonAdd { name, addr } => self.mon_add(name, addr).await,
                Command::MonRm { name } => self.mon_rm(name).await,
                Command::OsdBoot {
                    id,
                    addr,
                    host,
                    weight,
                    nonce,
                } => {
                    let boot = Boot {
                        id: *id,
                        addr: addr.clone(),
                        host: host.clone(),
                        weight: *weight,
                        nonce: *nonce,
                    };
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    self.life_lock().boots.push((boot, tx));
                    match rx.await {
                        Ok(r) => Ok(r),
                        Err(_) => Err(Retry("lost leadership before the boot committed".into())),
                    }
                }
                Command::OsdBeacon { id } => {
                    let mut life = self.life_lock();
                    life.beacons.insert(*id, Instant::now());
                    Ok(Ok(json!({ "osd": id })))
                }
                Command::MgrBeacon { name, addr } => {
                    self.mgr_lock()
                        .beacons
                        .insert(name.clone(), (Instant::now(), addr.clone()));
                    Ok(Ok(read_state(&self.state).mgrmap.to_json()))
                }
                Command::MgrFail { name } => self.mgr_fail(name).await,
                Command::MdsBeacon {
                    name,
                    addr,
                    state,
                    nonce,
                } => {
                    self.mgr_lock().mds_beacons.insert(
                        name.clone(),
                        (Instant::now(), addr.clone(), state.clone(), *nonce),
                    );
                    Ok(Ok(read_state(&self.state).fsmap.to_json()))
                }
                Command::MdsFail { name } => self.mds_fail(name).await,
                Command::DaemonReport { report } => {
                    let mut soft = self.mgr_lock();
                    let now = Instant::now();
                    soft.reports
                        .retain(|_, (at, _)| now.duration_since(*at) < REPORT_MAX_AGE);
                    if soft.reports.len() >= REPORTERS_MAX
                        && !soft.reports.contains_key(&report.daemon)
                    {
                        return Ok(Err(MonError::new(
                            ErrorCode::Again,
                            "too many daemons report at once",
                        )));
                    }
                    soft.reports
                        .insert(report.daemon.clone(), (now, report.clone()));
                    Ok(Ok(json!({ "daemon": report.daemon })))
                }
                Command::OsdFailure {
                    target,
                    reporter,
                    immediate,
                } => {
                    let mut life = self.life_lock();
                    let reps = life.reports.entry(*target).or_default();
                    reps.insert(*reporter, (Instant::now(), *immediate));
                    Ok(Ok(json!({ "target": target, "reporters": reps.len() })))
                }
                Command::OsdAlive { id, up_thru }
                    if read_state(&self.state)
                        .osdmap
                        .current()
                        .is_ok_and(|m| m.up_thru(*id) >= *up_thru) =>
                {
                    // Already recorded: no new epoch.
                    Ok(Ok(json!({ "osd": id, "up_thru": up_thru })))
                }
                Command::OsdPgTemp { pgid, osds, .. }
                    if read_state(&self.state).osdmap.current().is_ok_and(|m| {
                        pgid.parse::<shoal_maps::PgId>().is_ok_and(|pg| {
                            m.pg_temp().get(&pg).map_or(osds.is_empty(), |t| t == osds)
                        })
                    }) =>
                {
                    // Already so: no new epoch.
                    Ok(Ok(json!({ "pgid": pgid, "pg_temp": osds })))
                }
                _ => match self.to_request(cmd) {
                    Ok(req) => self.propose(req).await,
                    Err(e) => Ok(Err(e)),
                },
            }
        };
        match tokio::time::timeout(remaining, work).await {
            Ok(r) => r,
            Err(_) => Err(Retry("change not committed in time".into())),
        }
    }

    async fn propose(&self, req: MonRequest) -> Outcome {
        match self.raft.client_write(req).await {
            Ok(resp) => Ok(match resp.data {
                MonResponse::Ok(v) => Ok(v),
                MonResponse::Err { code, message } => Err(MonError::new(code, message)),
            }),
            Err(e) => Err(Retry(e.to_string())),
        }
    }

    fn to_request(&self, cmd: &Command) -> Result<MonRequest, MonError> {
        let key = || Secret::generate().to_base64();
        Ok(match cmd.clone() {
            Command::AuthAdd { entity, caps } => MonRequest::AuthAdd {
                entity,
                key: key(),
                caps,
                if_missing: false,
            },
            Command::AuthGetOrCreate { entity, caps } => MonRequest::AuthAdd {
                entity,
                key: key(),
                caps,
                if_missing: true,
            },
            Command::AuthRm { entity } => MonRequest::AuthRm { entity },
            Command::AuthCaps { entity, caps } => MonRequest::AuthCaps { entity, caps },
            Command::ConfigSet { who, key, value } => MonRequest::ConfigSet { who, key, value },
            Command::ConfigRm { who, key } => MonRequest::ConfigRm { who, key },
            Command::HealthMute {
                code,
                ttl_secs,
                sticky,
            } => MonRequest::HealthMute {
                code,
                until_ms: ttl_secs.map(|t| now_ms().saturating_add(t.saturating_mul(1000))),
                sticky,
            },
            Command::HealthUnmute { code } => MonRequest::HealthUnmute { code },
            Command::CrashPost { report } => MonRequest::CrashPost(report),
            Command::CrashArchive { id } => MonRequest::CrashArchive { id },
            Command::CrashRm { id } => MonRequest::CrashRm { id },
            Command::OsdCreate => MonRequest::Osd(OsdChange::OsdCreate),
            Command::OsdOut { ids } => MonRequest::Osd(OsdChange::MarkOut { ids }),
            Command::OsdIn { ids } => MonRequest::Osd(OsdChange::MarkIn { ids }),
            Command::OsdDown { ids } => MonRequest::Osd(OsdChange::MarkDown { ids }),
            Command::OsdRm { ids } => MonRequest::Osd(OsdChange::OsdRm { ids }),
            Command::OsdFlag { flag, on } => MonRequest::Osd(OsdChange::Flag { flag, on }),
            Command::OsdAlive { id, up_thru } => MonRequest::Osd(OsdChange::Alive { id, up_thru }),
            Command::OsdPgTemp { pgid, osds, .. } => {
                MonRequest::Osd(OsdChange::PgTemp { pgid, osds })
            }
            Command::PoolCreate {
                name,
                pg_num,
                spec,
                set,
            } => {
                let autoscale_mode = leader_options(&read_state(&self.state))
                    .map(|o| o.osd_pool_default_pg_autoscale_mode);
                MonRequest::Osd(OsdChange::PoolCreate {
                    name,
                    pg_num,
                    spec,
                    autoscale_mode,
                    set,
                })
            }
            Command::PoolRm { name, sure } => {
                if !sure {
                    return Err(MonError::new(
                        ErrorCode::NeedsConfirmation,
                        format!(
                            "this will delete every object in pool {name}; \
                             add --yes-i-really-mean-it to confirm"
                        ),
                    ));
                }
                MonRequest::Osd(OsdChange::PoolRm { name })
            }
            Command::FsNew {
                name,
                metadata_pool,
                data_pool,
            } => MonRequest::FsNew {
                name,
                metadata_pool,
                data_pool,
                now_ms: now_ms(),
            },
            Command::FsRm { name, sure } => {
                if !sure {
                    return Err(MonError::new(
                        ErrorCode::NeedsConfirmation,
                        format!(
                            "this forgets file system {name} (its pools stay); \
                             add --yes-i-really-mean-it to confirm"
                        ),
                    ));
                }
                MonRequest::FsRm { name }
            }
            Command::PoolRename { from, to } => MonRequest::Osd(OsdChange::PoolRename { from, to }),
            Command::OsdCrushAddBucket { name, type_name } => {
                MonRequest::Osd(OsdChange::CrushAddBucket { name, type_name })
            }
            Command::OsdCrushMove { name, parent } => {
                MonRequest::Osd(OsdChange::CrushMove { name, parent })
            }
            Command::OsdCrushRm { name } => MonRequest::Osd(OsdChange::CrushRm { name }),
            Command::OsdPgUpmapItems { pgid, pairs } => {
                MonRequest::Osd(OsdChange::PgUpmapItems { pgid, pairs })
            }
            Command::OsdRmPgUpmapItems { pgid } => MonRequest::Osd(OsdChange::PgUpmapItems {
                pgid,
                pairs: Vec::new(),
            }),
            Command::OsdCrushReweight { name, weight } => {
                MonRequest::Osd(OsdChange::CrushReweight { name, weight })
            }
            Command::PoolSelfmanagedSnapCreate { pool } => {
                MonRequest::Osd(OsdChange::SnapCreate { pool })
            }
            Command::PoolSelfmanagedSnapRemove { pool, snapid } => {
                MonRequest::Osd(OsdChange::SnapRemove { pool, snapid })
            }
            Command::PoolSet { name, key, value } => {
                MonRequest::Osd(OsdChange::PoolSet { name, key, value })
            }
            Command::ErasureCodeProfileSet {
                name,
                params,
                force,
            } => MonRequest::Osd(OsdChange::EcProfileSet {
                name,
                params,
                force,
            }),
            Command::ErasureCodeProfileRm { name } => {
                MonRequest::Osd(OsdChange::EcProfileRm { name })
            }
            Command::OsdPgStats {
                id,
                epoch,
                statfs,
                pgs,
            } => MonRequest::PgStats(crate::pgstats::PgStats {
                id,
                epoch,
                statfs,
                pgs,
            }),
            other => {
                return Err(MonError::new(
                    ErrorCode::Internal,
                    format!("{other:?} is not a replicated change"),
                ));
            }
        })
    }

    fn voters(&self) -> BTreeSet<u64> {
        let m = self.raft.metrics().borrow().membership_config.clone();
        m.membership().voter_ids().collect()
    }

    async fn mon_add(&self, name: &str, addr: &str) -> Outcome {
        if let Err(e) = EntityName::new(EntityType::Mon, name) {
            return Ok(Err(MonError::new(
                ErrorCode::InvalidArgument,
                e.to_string(),
            )));
        }
        if addr.parse::<SocketAddr>().is_err() {
            let msg = format!("bad address {addr:?}");
            return Ok(Err(MonError::new(ErrorCode::InvalidArgument, msg)));
        }
        if read_state(&self.state).mons.contains_key(name) {
            return Ok(Err(MonError::new(
                ErrorCode::Exists,
                format!("mon.{name} exists"),
            )));
        }
        let id = node_id(name);
        let node = BasicNode {
            addr: addr.to_string(),
        };
        self.raft
            .add_learner(id, node, true)
            .await
            .map_err(|e| Retry(e.to_string()))?;
        let mut voters = self.voters();
        voters.insert(id);
        self.raft
            .change_membership(ChangeMembers::ReplaceAllVoters(voters), false)
            .await
            .map_err(|e| Retry(e.to_string()))?;
        self.propose(MonRequest::MonAdd {
            name: name.to_string(),
            addr: addr.to_string(),
        })
        .await
    }

    async fn mon_rm(&self, name: &str) -> Outcome {
        let Some(info) = read_state(&self.state).mons.get(name).cloned() else {
            return Ok(Err(MonError::new(
                ErrorCode::NotFound,
                format!("no mon.{name}"),
            )));
        };
        let mut voters = self.voters();
        voters.remove(&info.id);
        if voters.is_empty() {
            let msg = "cannot remove the last monitor";
            return Ok(Err(MonError::new(ErrorCode::InvalidArgument, msg)));
        }
        self.raft
            .change_membership(ChangeMembers::ReplaceAllVoters(voters), false)
            .await
            .map_err(|e| Retry(e.to_string()))?;
        self.propose(MonRequest::MonRm {
            name: name.to_string(),
        })
        .await
    }

    /// Answers a read command from the applied state.
    async fn read(&self, cmd: &Command) -> Result<Value, MonError> {
        let state = read_state(&self.state).clone();
        match cmd {
            Command::Status | Command::MonStat => {
                crate::views::to_reply(Ok(self.status(&state).await))
            }
            Command::Health => crate::views::to_reply(Ok(self.health(&state))),
            Command::HealthHistory => crate::views::to_reply(Ok(state.health.history_view())),
            Command::CrashLs => crate::views::to_reply(Ok(CrashLsReply {
                crashes: state.crashes.values().cloned().collect(),
            })),
            Command::CrashInfo { id } => state
                .crashes
                .get(id)
                .map(|c| json!(c))
                .ok_or_else(|| MonError::new(ErrorCode::NotFound, format!("no crash {id}"))),
            Command::AuthLs => Ok(json!(state.auth)),
            Command::AuthGet { entity } => state
                .auth
                .get(entity)
                .map(|e| json!({ entity.clone(): e }))
                .ok_or_else(|| MonError::new(ErrorCode::NotFound, format!("no entity {entity}"))),
            Command::ConfigGet { who } => {
                let mut merged = ConfigGetReply::new();
                let sections: Vec<String> = match who.parse::<EntityName>() {
                    Ok(e) => vec!["global".into(), e.ty().to_string(), e.to_string()],
                    Err(_) => vec![who.clone()],
                };
                for s in sections {
                    if let Some(kv) = state.config.get(&s) {
                        for (k, v) in kv {
                            merged.insert(
                                k.clone(),
                                ConfigValue {
                                    value: v.clone(),
                                    section: s.clone(),
                                },
                            );
                        }
                    }
                }
                crate::views::to_reply(Ok(merged))
            }
            Command::ConfigDump => Ok(json!(state.config)),
            Command::OsdTree => crate::views::to_reply(crate::views::osd_tree(&state)),
            Command::OsdDump => crate::views::osd_dump(&state),
            Command::BalancerStatus => {
                crate::views::to_reply(crate::views::balancer_status(&state))
            }
            Command::PoolAutoscaleStatus => crate::views::to_reply(
                crate::autoscale::Settings::central(&state)
                    .and_then(|s| crate::autoscale::status(&state, &s)),
            ),
            Command::OsdStat => crate::views::to_reply(crate::views::osd_stat(&state)),
            Command::PoolLs => crate::views::pool_ls(&state),
            Command::PoolGet { name } => crate::views::pool_get(&state, name),
            Command::ErasureCodeProfileGet { name } => crate::views::ec_profile_get(&state, name),
            Command::ErasureCodeProfileLs => Ok(crate::views::ec_profile_ls(&state)),
            Command::OsdMap {
                pool,
                object,
                namespace,
            } => crate::views::to_reply(crate::views::osd_map(&state, pool, object, namespace)),
            Command::PgDump => crate::views::to_reply(crate::views_pg::pg_dump(&state)),
            Command::PgPastIntervals { pgid, since } => {
                crate::views_pg::past_intervals(&state, pgid, *since)
            }
            Command::PgStat => crate::views::to_reply(crate::views_pg::pg_stat(&state)),
            Command::Df => crate::views_pg::df(&state),
            Command::MgrStat => Ok(state.mgrmap.to_json()),
            Command::FsLs => {
                let mut map = state.fsmap.reply();
                let soft = self.mgr_lock();
                let now = Instant::now();
                for a in map.filesystems.iter_mut().filter_map(|f| f.active.as_mut()) {
                    a.report = soft.mds_beacons.get(&a.name).map(|(at, _, st, _)| {
                        shoal_monclient::replies::MdsReport {
                            state: st.clone(),
                            beacon_age_ms: now.duration_since(*at).as_millis() as u64,
                        }
                    });
                }
                serde_json::to_value(map)
                    .map_err(|e| MonError::new(ErrorCode::Internal, e.to_string()))
            }
            Command::DaemonReports => {
                let now = Instant::now();
                let soft = self.mgr_lock();
                let reports = soft
                    .reports
                    .values()
                    .filter(|(at, _)| now.duration_since(*at) < REPORT_MAX_AGE)
                    .map(|(at, r)| AgedReport {
                        age_ms: now.duration_since(*at).as_millis() as u64,
                        report: r.clone(),
                    })
                    .collect();
                crate::views::to_reply(Ok(DaemonReportsReply { reports }))
            }
            other => Err(MonError::new(
                ErrorCode::Internal,
                format!("{other:?} is not a read"),
            )),
        }
    }

    /// Status. It runs on the leader (reads do), whose heartbeats reach
    /// every follower each tick: the monitors that answered one within the
    /// leader's lease form the quorum. Nobody is asked anything more, so a
    /// dead monitor costs `status` nothing.
    /// The monitors this one heard from lately (the quorum, as far as it
    /// knows) and the others.
    fn quorum(&self, state: &MonState) -> (Vec<String>, Vec<String>) {
        let window = self.contact_window();
        state.mons.iter().fold(
            (Vec::new(), Vec::new()),
            |(mut up, mut down), (name, info)| {
                if info.id == self.id || self.contact.heard_within(info.id, window) {
                    up.push(name.clone());
                } else {
                    down.push(name.clone());
                }
                (up, down)
            },
        )
    }

    /// How recently a monitor must have been heard from to count as up.
    fn contact_window(&self) -> Duration {
        let lease = Duration::from_millis(election_timeout_max_ms(&self.opts));
        lease.max(self.opts.heartbeat * 4)
    }

    /// The cluster's health alone (what `status` embeds).
    fn health(&self, state: &MonState) -> shoal_monclient::replies::HealthReply {
        let (quorum, down) = self.quorum(state);
        crate::views::health(state, &down, &quorum, now_ms(), &self.opts.full_ratios)
    }

    async fn status(&self, state: &MonState) -> StatusReply {
        let (quorum, down) = self.quorum(state);
        let mons = state
            .mons
            .iter()
            .map(|(name, info)| MonSummary {
                name: name.clone(),
                addr: info.addr.clone(),
                in_quorum: quorum.contains(name),
            })
            .collect();
        let health = crate::views::health(state, &down, &quorum, now_ms(), &self.opts.full_ratios);
        let leader = state
            .mons
            .iter()
            .find(|(_, m)| m.id == self.id)
            .map(|(n, _)| n.clone());
        let term = self.raft.metrics().borrow().current_term;
        StatusReply {
            version: STATUS_VERSION,
            fsid: state.fsid.clone(),
            health,
            election_term: term,
            mgrmap: state.mgrmap.reply(),
            monmap: MonMapSummary {
                epoch: state.monmap_epoch,
                mons,
            },
            quorum,
            leader,
            state_version: state.version,
            osdmap: crate::views::osd_stat(state).ok(),
            pgmap: crate::views_pg::pg_stat(state).ok(),
            auth: AuthSummary {
                entities: state.auth.len() as u64,
                service_secret: state.service_secrets.keys().next_back().copied(),
            },
        }
    }
}

impl Core {
    fn issue_ticket(&self, caller: &EntityName, service: &str) -> Result<Value, MonError> {
        let ty: EntityType = service
            .parse()
            .map_err(|e| MonError::new(ErrorCode::InvalidArgument, format!("{e}")))?;
        let state = read_state(&self.state);
        let entry = state.auth.get(&caller.to_string()).ok_or_else(|| {
            MonError::new(
                ErrorCode::PermissionDenied,
                format!("{caller} is not in the auth database"),
            )
        })?;
        let caps = entry.caps.get(service).cloned().ok_or_else(|| {
            MonError::new(
                ErrorCode::PermissionDenied,
                format!("{caller} has no {service} capabilities"),
            )
        })?;
        let key = Secret::from_base64(&entry.key).map_err(internal)?;
        let (id, secret) = state.service_secrets.iter().next_back().ok_or_else(|| {
            MonError::new(ErrorCode::Again, "no service secret yet; retry shortly")
        })?;
        let secret = Secret::from_base64(&secret.key).map_err(internal)?;
        let ttl = u64::try_from(self.opts.ticket_ttl.as_millis()).unwrap_or(u64::MAX);
        let ticket = Ticket::new(caller.clone(), ty, caps, now_ms(), ttl, *id);
        let wrapped = ticket.wrap_session_key(&ticket.session_key(&secret), &key);
        Ok(json!({
            "ticket": Secret::encode_base64(&ticket.seal(&secret)),
            "session_key": Secret::encode_base64(&wrapped),
            "expires_ms": ticket.expires_ms,
        }))
    }

    fn service_secrets(&self, caller: &EntityName, service: &str) -> Result<Value, MonError> {
        let ty: EntityType = service
            .parse()
            .map_err(|e| MonError::new(ErrorCode::InvalidArgument, format!("{e}")))?;
        if caller.ty() != ty && caller.ty() != EntityType::Mon {
            return Err(MonError::new(
                ErrorCode::PermissionDenied,
                format!(
                    "only {service} daemons may read the {service} service secrets, not {caller}"
                ),
            ));
        }
        let state = read_state(&self.state);
        let secrets: BTreeMap<String, String> = state
            .service_secrets
            .iter()
            .map(|(id, s)| (id.to_string(), s.key.clone()))
            .collect();
        Ok(json!({ "secrets": secrets }))
    }
}

impl Core {
    /// Registers a subscription; returns the current version and value.
    fn subscribe(
        &self,
        caller: &EntityName,
        conn: Connection,
        what: &str,
        have: u64,
    ) -> Result<(u64, Bytes), MonError> {
        self.check_caps(caller, &Command::MonStat)?;
        let state = read_state(&self.state);
        let (value, marker) = subscription_value(what, caller, &state, have)?;
        let mut subs = self.subs.lock().unwrap_or_else(|p| p.into_inner());
        subs.retain(|s| !s.conn.is_closed());
        subs.push(Subscriber {
            conn,
            what: what.to_string(),
            entity: caller.clone(),
            last: marker,
        });
        Ok((state.version, value))
    }
}

/// After every applied change, pushes each subscriber the new value of
/// what it follows, if that value changed.
async fn push_updates(core: std::sync::Weak<Core>, mut applied: tokio::sync::watch::Receiver<u64>) {
    while applied.changed().await.is_ok() {
        let Some(core) = core.upgrade() else { return };
        let mut sends = Vec::new();
        {
            let state = read_state(&core.state);
            let mut subs = core.subs.lock().unwrap_or_else(|p| p.into_inner());
            subs.retain(|s| !s.conn.is_closed());
            for sub in subs.iter_mut() {
                let have = sub.last.as_u64().unwrap_or(0);
                let Ok((value, marker)) = subscription_value(&sub.what, &sub.entity, &state, have)
                else {
                    continue;
                };
                if marker != sub.last {
                    sub.last = marker;
                    let update = MonUpdate {
                        what: sub.what.clone(),
                        version: state.version,
                    };
                    sends.push((sub.conn.clone(), update, value));
                }
            }
        }
        for (conn, update, value) in sends {
            if let Err(e) = conn.send(update, value).await {
                tracing::debug!("dropping subscriber: {e}");
            }
        }
    }
}

impl Core {
    fn mgr_lock(&self) -> std::sync::MutexGuard<'_, MgrSoft> {
        self.mgr.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The managers heard from within the grace, by name, with addresses.
    fn fresh_mgrs(&self, now: Instant) -> BTreeMap<String, String> {
        let grace = self.opts.mgr_beacon_grace;
        self.mgr_lock()
            .beacons
            .iter()
            .filter(|(_, (at, _))| now.duration_since(*at) <= grace)
            .map(|(n, (_, a))| (n.clone(), a.clone()))
            .collect()
    }

    /// On the leader, every second: proposes a new manager map when the
    /// managers' beacons call for one (`mgrmap.rs`). A new leader (since
    /// `since`) has heard no beacon yet: for one grace period it counts
    /// the managers of the map as alive, so only newcomers change it.
    async fn choose_mgr(&self, since: Instant) {
        let map = {
            let s = read_state(&self.state);
            if s.fsid.is_empty() {
                return;
            }
            s.mgrmap.clone()
        };
        let mut fresh = self.fresh_mgrs(Instant::now());
        if fresh.is_empty() && map.epoch == 0 {
            return;
        }
        if since.elapsed() < self.opts.mgr_beacon_grace {
            if let Some(a) = &map.active {
                fresh
                    .entry(a.name.clone())
                    .or_insert_with(|| a.addr.clone());
            }
            for (n, a) in &map.standbys {
                fresh.entry(n.clone()).or_insert_with(|| a.clone());
            }
        }
        if let Some(m) = crate::mgrmap::next(&map, &fresh, None, now_ms())
            && let Err(e) = self.raft.client_write(MonRequest::MgrMap(m)).await
        {
            tracing::debug!("manager map: {e}");
        }
    }

    /// On the leader, every second: marks pools that reached their quota
    /// full (OSDs then refuse what would add to them) and clears the mark
    /// once they are back under it, from the PG statistics.
    async fn enforce_quotas(&self) {
        let changes = {
            let s = read_state(&self.state);
            if s.fsid.is_empty() {
                return;
            }
            crate::views_pg::quota_changes(&s)
        };
        for (name, full) in changes {
            let req = MonRequest::Osd(OsdChange::PoolQuotaFull { name, full });
            if let Err(e) = self.raft.client_write(req).await {
                tracing::debug!("pool quota: {e}");
            }
        }
    }

    /// On the leader, every second: when the balancer is on and its
    /// interval has passed since its last round (`last`), and every PG is
    /// active+clean, proposes the moves that bring each OSD nearer its
    /// share of PG copies (`shoal_maps::balance`) as one change.
    async fn balance(&self, last: &mut Option<Instant>) {
        let req = {
            let s = read_state(&self.state);
            if s.fsid.is_empty() {
                return;
            }
            let Some(o) = leader_options(&s) else {
                return;
            };
            if !o.mon_balancer_active || !round_due(last, o.mon_balancer_interval_ms) {
                return;
            }
            if !crate::views_pg::pg_stat(&s).is_ok_and(|p| p.all_active_clean()) {
                return;
            }
            let Ok(map) = s.osdmap.current() else {
                return;
            };
            let pools: Vec<u64> = map.pools().keys().copied().collect();
            let plan = match shoal_maps::balance::plan_upmaps(
                map,
                &pools,
                f64::from(o.mon_balancer_max_deviation),
                o.mon_balancer_max_moves as usize,
            ) {
                Ok(p) if !p.is_empty() => p,
                Ok(_) => return,
                Err(e) => {
                    tracing::warn!("balancer: {e}");
                    return;
                }
            };
            tracing::info!(
                set = plan.set.len(),
                removed = plan.removed.len(),
                "balancer: moving PG copies"
            );
            MonRequest::Osd(OsdChange::Upmaps {
                set: plan
                    .set
                    .into_iter()
                    .map(|(pg, pairs)| (pg.to_string(), pairs))
                    .collect(),
                removed: plan.removed.iter().map(|pg| pg.to_string()).collect(),
            })
        };
        if let Err(e) = self.raft.client_write(req).await {
            tracing::debug!("balancer: {e}");
        }
    }

    /// On the leader, every second: once `mon_pg_autoscale_interval_ms`
    /// has passed since its last round (`last`), grows the pool whose
    /// `pg_autoscale_mode` is on and whose share of the data calls for
    /// the threshold times more PGs ([`crate::autoscale::next_growth`]).
    async fn autoscale(&self, last: &mut Option<Instant>) {
        let req = {
            let s = read_state(&self.state);
            if s.fsid.is_empty() {
                return;
            }
            let Some(o) = leader_options(&s) else {
                return;
            };
            if !round_due(last, o.mon_pg_autoscale_interval_ms) {
                return;
            }
            let settings = crate::autoscale::Settings::of(&o);
            let Some((pool, pg_num)) =
                crate::autoscale::next_growth(&s, &settings, &self.opts.full_ratios)
            else {
                return;
            };
            let name = s
                .osdmap
                .current()
                .ok()
                .and_then(|m| m.pool(pool).map(|p| (p.name.clone(), p.pg_num)));
            if let Some((name, from)) = name {
                tracing::info!(pool = %name, from, to = pg_num,
                    "autoscaler: growing a pool's PGs with its data");
            }
            MonRequest::Osd(OsdChange::AutoscalePgNum { pool, pg_num })
        };
        if let Err(e) = self.raft.client_write(req).await {
            tracing::debug!("autoscaler: {e}");
        }
    }

    /// On the leader, every second: a pool whose `pg_num` grew has its
    /// `pgp_num` moved toward it a step at a time (Ceph's manager does so),
    /// each step about `mon_target_max_misplaced_ratio` of its PGs, taken
    /// only once every PG of the pool is active as of the last step and
    /// the misplaced share is below that ratio. `stepped`: the epoch of
    /// each pool's last step.
    async fn step_pgp(&self, stepped: &mut BTreeMap<u64, u32>) {
        let req = {
            let s = read_state(&self.state);
            let Ok(map) = s.osdmap.current() else {
                return;
            };
            let Some(o) = leader_options(&s) else {
                return;
            };
            let ratio = o.mon_target_max_misplaced_ratio.clamp(0.0, 1.0);
            stepped.retain(|id, _| s.osdmap.pgp_num_target.contains_key(id));
            let mut next = None;
            for (id, target) in &s.osdmap.pgp_num_target {
                let Some(pool) = map.pool(*id) else { continue };
                let since = stepped.get(id).copied().unwrap_or(0);
                let Some(misplaced) = crate::views_pg::pool_active_since(&s, *id, since) else {
                    continue;
                };
                if misplaced > ratio || pool.pgp_num == *target {
                    continue;
                }
                let step = ((f64::from(pool.pg_num) * ratio) as u32).max(1);
                let pgp_num = if pool.pgp_num < *target {
                    pool.pgp_num.saturating_add(step).min(*target)
                } else {
                    pool.pgp_num.saturating_sub(step).max(*target)
                };
                tracing::info!(pool = %pool.name, from = pool.pgp_num, to = pgp_num, target,
                    "moving the placement of a split pool's PGs a step");
                stepped.insert(*id, map.epoch.0 + 1);
                next = Some(MonRequest::Osd(OsdChange::PgpStep { pool: *id, pgp_num }));
                break;
            }
            match next {
                Some(r) => r,
                None => return,
            }
        };
        if let Err(e) = self.raft.client_write(req).await {
            tracing::debug!("pgp_num step: {e}");
        }
    }

    /// The metadata servers heard from within the grace, with addresses.
    fn fresh_mds(&self, now: Instant) -> crate::fsmap::Fresh {
        let grace = self.opts.mds_beacon_grace;
        self.mgr_lock()
            .mds_beacons
            .iter()
            .filter(|(_, (at, _, _, _))| now.duration_since(*at) <= grace)
            .map(|(n, (_, a, _, nonce))| (n.clone(), (a.clone(), *nonce)))
            .collect()
    }

    /// On the leader, every second: proposes a new file-system map when
    /// the metadata servers' beacons call for one (`fsmap.rs`); a new
    /// leader counts the map's servers alive for one grace period.
    async fn choose_mds(&self, since: Instant) {
        let map = {
            let s = read_state(&self.state);
            if s.fsid.is_empty() {
                return;
            }
            s.fsmap.clone()
        };
        let mut fresh = self.fresh_mds(Instant::now());
        if fresh.is_empty()
            && map.standbys.is_empty()
            && map.filesystems.values().all(|f| f.active.is_none())
        {
            return;
        }
        if since.elapsed() < self.opts.mds_beacon_grace {
            for a in map.filesystems.values().filter_map(|f| f.active.as_ref()) {
                fresh
                    .entry(a.name.clone())
                    .or_insert_with(|| (a.addr.clone(), a.nonce));
            }
            for (n, a) in &map.standbys {
                fresh.entry(n.clone()).or_insert_with(|| (a.clone(), 0));
            }
        }
        if let Some(m) = crate::fsmap::next(&map, &fresh, None, now_ms())
            && let Err(e) = self.raft.client_write(MonRequest::FsMap(m)).await
        {
            tracing::debug!("file-system map: {e}");
        }
    }

    /// `mds fail NAME`: the MDS gives up its rank at once.
    async fn mds_fail(&self, name: &str) -> Outcome {
        let map = read_state(&self.state).fsmap.clone();
        let known = map.fs_of_mds(name).is_some() || map.standbys.contains_key(name);
        if !known {
            return Ok(Err(MonError::new(
                ErrorCode::NotFound,
                format!("mds.{name} is neither active nor standby"),
            )));
        }
        self.mgr_lock().mds_beacons.remove(name);
        let fresh = self.fresh_mds(Instant::now());
        match crate::fsmap::next(&map, &fresh, Some(name), now_ms()) {
            Some(m) => self.propose(MonRequest::FsMap(m)).await,
            None => Ok(Ok(map.to_json())),
        }
    }

    /// `mgr fail NAME`: the manager gives up its role at once.
    async fn mgr_fail(&self, name: &str) -> Outcome {
        let map = read_state(&self.state).mgrmap.clone();
        let known =
            map.active.as_ref().is_some_and(|a| a.name == name) || map.standbys.contains_key(name);
        if !known {
            return Ok(Err(MonError::new(
                ErrorCode::NotFound,
                format!("mgr.{name} is neither active nor standby"),
            )));
        }
        // Its beacons so far no longer count: it comes back as a standby
        // with its next one.
        self.mgr_lock().beacons.remove(name);
        let fresh = self.fresh_mgrs(Instant::now());
        match crate::mgrmap::next(&map, &fresh, Some(name), now_ms()) {
            Some(m) => self.propose(MonRequest::MgrMap(m)).await,
            None => Ok(Ok(map.to_json())),
        }
    }

    fn life_lock(&self) -> std::sync::MutexGuard<'_, Liveness> {
        self.life.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Which OSDs to mark down and out now, from beacons, failure reports
    /// and how long OSDs have been down.
    fn judge(&self, now: Instant) -> (Vec<i32>, Vec<i32>) {
        let state = read_state(&self.state);
        let Ok(map) = state.osdmap.current() else {
            return (Vec::new(), Vec::new());
        };
        let cfg = &self.opts.osd;
        let mut life = self.life_lock();
        let since = *life.since.get_or_insert(now);
        let mut down = Vec::new();
        let mut out = Vec::new();
        for (id, o) in map.osds().filter(|(_, o)| o.exists) {
            if !map.is_up(id) {
                life.reports.remove(&id);
                let down_at = *life.down_since.entry(id).or_insert(now);
                if o.weight > 0 && now.duration_since(down_at) >= cfg.down_out_interval {
                    out.push(id);
                }
                continue;
            }
            life.down_since.remove(&id);
            let last = life.beacons.get(&id).copied().unwrap_or(since).max(since);
            let mut is_down = now.duration_since(last) > cfg.beacon_grace;
            if let Some(reps) = life.reports.get_mut(&id) {
                reps.retain(|_, (t, _)| now.duration_since(*t) < cfg.report_expiry);
                let immediate = reps.values().any(|(_, imm)| *imm);
                let subtrees: BTreeSet<i32> = reps
                    .keys()
                    .map(|r| subtree_of(map.crush(), *r, &cfg.reporter_subtree_level))
                    .collect();
                is_down |= immediate || subtrees.len() as u32 >= cfg.min_down_reporters.max(1);
            }
            if is_down {
                down.push(id);
            }
        }
        (down, out)
    }
}

/// The CRUSH bucket of type `level` above `osd` (the OSD itself for
/// `osd`, or when it is not in CRUSH).
fn subtree_of(crush: &shoal_crush::CrushMap, osd: i32, level: &str) -> i32 {
    if level == "osd" {
        return osd;
    }
    let Some(ty) = crush.type_id(level) else {
        return osd;
    };
    let mut cur = crush.parent_of(osd);
    while let Some(b) = cur {
        if crush.bucket(b).is_some_and(|x| x.type_id == ty) {
            return b;
        }
        cur = crush.parent_of(b);
    }
    osd
}

/// On the leader, every batch window: boots that arrived, OSDs to mark
/// down, OSDs to mark out, all in one epoch.
async fn osd_tick(core: std::sync::Weak<Core>) {
    loop {
        let window = match core.upgrade() {
            Some(c) => c.opts.osd.batch_window,
            None => return,
        };
        tokio::time::sleep(window).await;
        let Some(core) = core.upgrade() else { return };
        if core.raft.current_leader().await != Some(core.id) {
            let mut life = core.life_lock();
            let boots = std::mem::take(&mut life.boots);
            *life = Liveness::default();
            drop(life);
            for (_, tx) in boots {
                let e = MonError::new(ErrorCode::NoQuorum, "this monitor is no longer the leader");
                let _ = tx.send(Err(e));
            }
            continue;
        }
        let now = Instant::now();
        let (down, out) = core.judge(now);
        let boots = std::mem::take(&mut core.life_lock().boots);
        if boots.is_empty() && down.is_empty() && out.is_empty() {
            continue;
        }
        let req = MonRequest::Osd(OsdChange::Batch {
            boots: boots.iter().map(|(b, _)| b.clone()).collect(),
            down: down.clone(),
            out,
        });
        let result = match core.raft.client_write(req).await {
            Ok(r) => match r.data {
                MonResponse::Ok(v) => Ok(v),
                MonResponse::Err { code, message } => Err(MonError::new(code, message)),
            },
            Err(e) => Err(MonError::new(ErrorCode::NoQuorum, e.to_string())),
        };
        {
            let mut life = core.life_lock();
            for id in &down {
                life.reports.remove(id);
            }
            for (b, _) in &boots {
                life.reports.remove(&b.id);
                life.beacons.insert(b.id, now);
            }
        }
        for (_, tx) in boots {
            let _ = tx.send(result.clone());
        }
    }
}

/// On the leader, replaces the newest service secret once it is older than
/// the rotation period (and makes the first one after bootstrap).
async fn rotate_service_secrets(core: std::sync::Weak<Core>) {
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let Some(core) = core.upgrade() else { return };
        if core.raft.current_leader().await != Some(core.id) {
            continue;
        }
        let (booted, newest) = {
            let s = read_state(&core.state);
            let newest = s.service_secrets.values().next_back().map(|x| x.created_ms);
            (!s.fsid.is_empty(), newest)
        };
        let rotation = u64::try_from(core.opts.secret_rotation.as_millis()).unwrap_or(u64::MAX);
        let due = newest.is_none_or(|t| now_ms().saturating_sub(t) >= rotation);
        if booted && due {
            let req = MonRequest::RotateServiceSecret {
                key: Secret::generate().to_base64(),
                created_ms: now_ms(),
                keep: 3,
            };
            if let Err(e) = core.raft.client_write(req).await {
                tracing::debug!("service secret rotation: {e}");
            }
        }
    }
}

/// Whether a leader's round that runs every `interval_ms` is due, its last
/// having been at `last`; when it is, now becomes the last.
fn round_due(last: &mut Option<Instant>, interval_ms: u64) -> bool {
    if last.is_some_and(|t| t.elapsed() < Duration::from_millis(interval_ms)) {
        return false;
    }
    *last = Some(Instant::now());
    true
}

/// The options of the leader's timers (balancer, autoscaler, placement
/// steps, new pools' autoscale mode): the defaults under the central
/// configuration's `global` and `mon` sections.
pub(crate) fn leader_options(s: &MonState) -> Option<shoal_config::Options> {
    let who = EntityName::new(EntityType::Mon, "balancer").ok()?;
    let sets: Vec<String> = s
        .config_for(&who)
        .into_iter()
        .filter(|kv| {
            [
                "mon_balancer_",
                "mon_target_",
                "mon_pg_autoscale_",
                "osd_pool_default_pg_autoscale_mode",
            ]
            .iter()
            .any(|p| kv.starts_with(p))
        })
        .collect();
    shoal_config::Config::parse("", shoal_config::ConfigSource::Defaults, &who, &sets)
        .ok()
        .map(|c| c.options)
}

/// On the leader, every second: chooses the active manager
/// ([`Core::choose_mgr`]) and records the health checks whenever one is
/// raised, changes severity or clears (`health.rs`). A new leader waits
/// until it can tell which monitors are up before it records anything.
async fn record_health(core: std::sync::Weak<Core>) {
    let mut leading_since: Option<Instant> = None;
    let mut balanced_at: Option<Instant> = None;
    let mut autoscaled_at: Option<Instant> = None;
    let mut pgp_stepped = BTreeMap::new();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Some(core) = core.upgrade() else { return };
        if core.raft.current_leader().await != Some(core.id) {
            if leading_since.take().is_some() {
                *core.mgr_lock() = MgrSoft::default();
            }
            continue;
        }
        let since = *leading_since.get_or_insert_with(|| {
            // The balancer's and the autoscaler's first rounds come an
            // interval after taking the lead (as Ceph's modules sleep
            // first), not while a new cluster's pools are still being made.
            balanced_at = Some(Instant::now());
            autoscaled_at = Some(Instant::now());
            Instant::now()
        });
        core.choose_mgr(since).await;
        core.choose_mds(since).await;
        core.enforce_quotas().await;
        core.balance(&mut balanced_at).await;
        core.autoscale(&mut autoscaled_at).await;
        core.step_pgp(&mut pgp_stepped).await;
        if since.elapsed() < core.contact_window() {
            continue;
        }
        let req = {
            let s = read_state(&core.state);
            if s.fsid.is_empty() {
                continue;
            }
            let (quorum, down) = core.quorum(&s);
            let checks =
                crate::views::checks_now(&s, &down, &quorum, now_ms(), &core.opts.full_ratios);
            if !s.health.differs(&checks) {
                continue;
            }
            MonRequest::HealthRecord {
                at_ms: now_ms(),
                checks,
            }
        };
        if let Err(e) = core.raft.client_write(req).await {
            tracing::debug!("recording health: {e}");
        }
    }
}

/// A daemon may report only as itself (an OSD as `osd.ID`); a report is
/// bounded.
fn check_report(
    caller: &EntityName,
    report: &shoal_monclient::DaemonReport,
) -> Result<(), MonError> {
    let own = caller.to_string();
    let speaks_for_itself = report.daemon == own
        || (caller.ty() != EntityType::Osd
            && report.daemon.starts_with(&format!("{}.", report.kind)));
    if caller.ty() != EntityType::Mon && !speaks_for_itself {
        return Err(MonError::new(
            ErrorCode::PermissionDenied,
            format!("{caller} may not report for {}", report.daemon),
        ));
    }
    if report.daemon.is_empty() || report.daemon.len() > 256 || report.kind.is_empty() {
        return Err(MonError::new(
            ErrorCode::InvalidArgument,
            "bad daemon report",
        ));
    }
    if report.metrics.len() > shoal_monclient::REPORT_METRICS_MAX {
        return Err(MonError::new(
            ErrorCode::InvalidArgument,
            format!(
                "a report carries at most {} metrics",
                shoal_monclient::REPORT_METRICS_MAX
            ),
        ));
    }
    Ok(())
}

/// A command attempt that may succeed on the next try.
struct Retry(String);
type Outcome = Result<Result<Value, MonError>, Retry>;

fn from_reply(r: MonCommandReply) -> Result<Value, MonError> {
    if r.code == 0 {
        serde_json::from_str(&r.output).map_err(internal)
    } else {
        Err(MonError::new(ErrorCode::from_u32(r.code), r.output))
    }
}

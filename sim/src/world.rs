//! The simulated cluster: one monitor, OSDs on [`CrashStore`]s, clients,
//! all over one [`SimNet`]; and the run's phases ([`simulate`]): set-up,
//! faults with checks after each, liveness, the final reads and checks.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use shoal_client::{Client, ClientOptions};
use shoal_maps::{OsdMap, PgId};
use shoal_mon::{Command, MonClient, Monitor, MonitorOptions, PoolSpec, TicketAuth, UpdateSink};
use shoal_net::{Keyring, Messenger, NetConfig, Secret};
use shoal_objectstore::CrashStore;
use shoal_osd::ctx::{AckedWrite, Observer, PgConfig};
use shoal_osd::daemon::{Osd, OsdOptions};
use shoal_osd::log::LogLimits;
use shoal_testkit::simnet::{Latency, SimNet, SimRng};
use shoal_types::EntityName;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::trace::Trace;
use crate::workload::{ClientLog, Workload};
use crate::{Failure, Report, SimConfig, history, invariants, nemesis};

/// The monitors' names, in order.
pub const MON_NAMES: [&str; 3] = ["a", "b", "c"];

/// Monitor `i`'s address.
fn mon_addr(i: usize) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1 + i as u8], 6789))
}
/// The wall-clock time the simulation starts at (2026-01-01).
const WALL_START_MS: u64 = 1_767_225_600_000;

/// Every write a primary acknowledged, in order.
#[derive(Debug, Default)]
pub struct AckLog(Mutex<Vec<AckedWrite>>);

impl Observer for AckLog {
    fn write_acked(&self, w: &AckedWrite) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(w.clone());
    }
}

impl AckLog {
    /// A copy of the acknowledged writes so far.
    pub fn all(&self) -> Vec<AckedWrite> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Every OSD map the harness saw, by epoch.
pub type MapLog = Arc<Mutex<BTreeMap<u32, Arc<OsdMap>>>>;

/// Where an OSD is.
#[derive(Debug)]
pub enum OsdState {
    /// Serving.
    Running(Osd),
    /// Restarting (it waits for the monitors, who may be cut off).
    Starting(JoinHandle<Osd>),
    /// Killed.
    Crashed,
}

/// One OSD: its store (as a restart would find it, when crashed) and state.
#[derive(Debug)]
pub struct OsdSlot {
    /// Its store.
    pub store: Arc<CrashStore>,
    /// Running, starting or crashed.
    pub state: OsdState,
    /// Makes the store's transactions durable now and then.
    committer: JoinHandle<()>,
    /// Marked out by the nemesis.
    pub out: bool,
}

/// The simulated cluster.
#[derive(Debug)]
pub struct World {
    /// The run's shape.
    pub cfg: SimConfig,
    /// The nemesis' and the set-up's randomness.
    pub rng: SimRng,
    /// The network.
    pub net: SimNet,
    /// What happened.
    pub trace: Trace,
    /// Acknowledged writes.
    pub acks: Arc<AckLog>,
    /// Maps seen.
    pub maps: MapLog,
    /// The OSDs.
    pub osds: BTreeMap<i32, OsdSlot>,
    /// The pool's id.
    pub pool: u64,
    /// Every word of a PG state a primary reported during the faults
    /// (`active`, `peering`, `backfilling`, `incomplete`, ...).
    pub states: std::collections::BTreeSet<String>,
    /// Black holes the nemesis made.
    pub black_holes: usize,
    dir: PathBuf,
    /// The monitors (None while one is down).
    pub mons: BTreeMap<String, Option<Monitor>>,
    admin: MonClient,
    keys: BTreeMap<i32, Secret>,
    start: Instant,
}

/// Messenger settings: short timeouts, as a test cluster's.
fn net_cfg() -> NetConfig {
    NetConfig {
        connect_timeout: Duration::from_secs(1),
        ..shoal_testkit::net_cfg()
    }
}

/// A test cluster's monitor, with a longer history and OSDs marked out
/// after 15 s down (so out-and-remap happens within a run).
fn mon_opts(data: PathBuf) -> MonitorOptions {
    let mut o = shoal_testkit::mon_opts(data);
    o.net = net_cfg();
    o.heartbeat = Duration::from_millis(200);
    o.election_timeout = Duration::from_millis(600);
    o.snapshot_every = 200;
    o.ticket_ttl = Duration::from_secs(3600);
    o.secret_rotation = Duration::from_secs(7200);
    o.osdmap_history = 1000;
    o.osd.beacon_grace = Duration::from_secs(30);
    o.osd.down_out_interval = Duration::from_secs(15);
    o
}

/// A directory for the monitor's data, in memory where the machine has one.
fn data_dir(seed: u64) -> PathBuf {
    static RUN: AtomicU64 = AtomicU64::new(0);
    let shm = PathBuf::from("/dev/shm");
    let base = if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    };
    let n = RUN.fetch_add(1, Ordering::Relaxed);
    base.join(format!("shoal-sim-{}-{seed}-{n}", std::process::id()))
}

impl World {
    /// Virtual ms since the run began.
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Adds a trace line.
    pub fn note(&self, what: impl AsRef<str>) {
        self.trace.line(self.now_ms(), what);
    }

    /// Starts the monitor and the harness's view of the maps.
    async fn new(seed: u64, cfg: SimConfig) -> World {
        shoal_net::runtime::simulate_wall_clock(WALL_START_MS);
        shoal_net::runtime::simulate_randomness(seed ^ 0x5eed_5eed_5eed_5eed);
        let mut rng = SimRng::new(seed);
        let net = SimNet::new(
            rng.next_u64(),
            Latency {
                min_ms: 1,
                max_ms: 6,
            },
        );
        let trace = Trace::new(cfg.verbose);
        let dir = data_dir(seed);
        let _ = std::fs::remove_dir_all(&dir);
        let names = &MON_NAMES[..cfg.mons.clamp(1, 3)];
        let initial: BTreeMap<String, String> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.to_string(), mon_addr(i).to_string()))
            .collect();
        let ring = shoal_mon::mkfs(&dir.join(names[0]), names[0], &initial, None, None).unwrap();
        for n in &names[1..] {
            shoal_mon::mkfs(&dir.join(n), n, &initial, Some(&ring), None).unwrap();
        }
        let mut mons = BTreeMap::new();
        for n in names {
            let m = Monitor::start(mon_opts(dir.join(n)), net.host(&format!("mon.{n}")), None)
                .await
                .unwrap();
            mons.insert(n.to_string(), Some(m));
        }
        let keyring = Keyring::load(&ring).unwrap();
        let admin_key = keyring
            .get(&"client.admin".parse().unwrap())
            .unwrap()
            .key
            .clone();
        let me: EntityName = "client.admin".parse().unwrap();
        let auth = TicketAuth::new(me.clone(), admin_key);
        let sink = UpdateSink::new();
        let msgr = Messenger::new(
            me,
            net_cfg(),
            net.host("client.admin"),
            Arc::new(auth),
            Arc::clone(&sink) as Arc<dyn shoal_net::Dispatcher>,
        );
        let admin = MonClient::new(msgr, mon_addrs(cfg.mons), Duration::from_secs(8));
        let maps: MapLog = Arc::default();
        let (latest, mut every) = admin.subscribe_osdmap_every(sink);
        let (m, t) = (Arc::clone(&maps), trace.clone());
        let start = Instant::now();
        tokio::spawn(async move {
            // The subscription lasts while its watch is held.
            let _latest = latest;
            while let Some(map) = every.recv().await {
                let ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(0);
                t.line(ms, format!("osdmap e{}", map.epoch.0));
                m.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(map.epoch.0, map);
            }
        });
        World {
            cfg,
            rng,
            net,
            trace,
            acks: Arc::default(),
            maps,
            osds: BTreeMap::new(),
            pool: 0,
            states: Default::default(),
            black_holes: 0,
            dir,
            mons,
            admin,
            keys: BTreeMap::new(),
            start,
        }
    }

    /// Runs a monitor command as client.admin, retrying for a while.
    pub async fn command(&self, cmd: Command) -> Result<serde_json::Value, String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.admin.command(&cmd).await {
                Ok(v) => return Ok(v),
                Err(e) if Instant::now() >= deadline => return Err(format!("{cmd:?}: {e}")),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// The newest map the harness has.
    pub fn newest_map(&self) -> Option<Arc<OsdMap>> {
        let maps = self.maps.lock().unwrap_or_else(PoisonError::into_inner);
        maps.values().next_back().cloned()
    }

    async fn key(&mut self, name: &str, caps: &[(&str, &str)]) -> Secret {
        let caps = caps
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let v = self
            .command(Command::AuthGetOrCreate {
                entity: name.into(),
                caps,
            })
            .await
            .unwrap();
        Secret::from_base64(v[name]["key"].as_str().unwrap()).unwrap()
    }

    fn osd_opts(&self, id: i32) -> OsdOptions {
        let observer: Arc<dyn Observer> = self.acks.clone();
        OsdOptions {
            id,
            key: self.keys[&id].clone(),
            mon_addrs: mon_addrs(self.cfg.mons),
            bind: osd_addr(id),
            host: format!("host{id}"),
            weight: 0x10000,
            net: net_cfg(),
            pg: PgConfig {
                log_limits: LogLimits {
                    entries_max: self.cfg.log_entries,
                    dups_max: 2000,
                },
                log_entries_clean: self.cfg.log_entries_clean,
                peer_timeout: Duration::from_secs(5),
                ..PgConfig::default()
            },
            heartbeat_interval: Duration::from_millis(500),
            heartbeat_grace: Duration::from_secs(3),
            beacon_interval: Duration::from_secs(5),
            stats_interval: Duration::from_secs(2),
            perf_interval: None,
            mon_timeout: Duration::from_secs(5),
            scrub_interval: Duration::from_secs(86_400),
            deep_scrub_interval: Duration::from_secs(7 * 86_400),
            // Often, so stray copies go while the nemesis still moves PGs.
            stray_check_interval: Duration::from_secs(1),
            observer: Some(observer),
            op_shards: 1,
        }
    }

    fn committer(&mut self, store: &Arc<CrashStore>) -> JoinHandle<()> {
        let mut rng = SimRng::new(self.rng.next_u64());
        let store = Arc::clone(store);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(rng.range(1, 20))).await;
                store.commit();
            }
        })
    }

    /// Creates OSD `id` (its key, an empty store) and starts it.
    async fn add_osd(&mut self, id: i32) {
        let key = self
            .key(
                &format!("osd.{id}"),
                &[("mon", "allow profile osd"), ("osd", "allow *")],
            )
            .await;
        self.keys.insert(id, key);
        let store = Arc::new(CrashStore::new(1 << 30));
        let committer = self.committer(&store);
        let osd = Osd::start(
            self.osd_opts(id),
            store.clone(),
            self.net.host(&format!("osd.{id}")),
        )
        .await
        .unwrap();
        self.osds.insert(
            id,
            OsdSlot {
                store,
                state: OsdState::Running(osd),
                committer,
                out: false,
            },
        );
    }

    /// Kills OSD `id` as a process dies: off the network at once, its
    /// store keeps what was durable plus a prefix of what was queued.
    pub fn crash_osd(&mut self, id: i32) {
        self.net.kill(&format!("osd.{id}"));
        let Some(slot) = self.osds.get_mut(&id) else {
            return;
        };
        let pending = slot.store.pending() as u64;
        let keep = self.rng.range(0, pending) as usize;
        slot.committer.abort();
        match std::mem::replace(&mut slot.state, OsdState::Crashed) {
            OsdState::Running(osd) => osd.crash(),
            OsdState::Starting(h) => h.abort(),
            OsdState::Crashed => {}
        }
        slot.store = Arc::new(slot.store.crash(keep));
        self.note(format!(
            "crash osd.{id} (kept {keep} of {pending} queued transactions)"
        ));
    }

    /// Restarts a crashed OSD on the store its crash left (in a task: it
    /// waits for the monitors, who may be cut off from it).
    pub fn restart_osd(&mut self, id: i32) {
        let opts = self.osd_opts(id);
        let transport = self.net.host(&format!("osd.{id}"));
        let Some(slot) = self.osds.get(&id) else {
            return;
        };
        let store = Arc::clone(&slot.store);
        let committer = self.committer(&store);
        let h = tokio::spawn(async move {
            loop {
                match Osd::start(opts.clone(), store.clone(), transport.clone()).await {
                    Ok(osd) => return osd,
                    Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
                }
            }
        });
        if let Some(slot) = self.osds.get_mut(&id) {
            slot.committer = committer;
            slot.state = OsdState::Starting(h);
        }
        self.note(format!("restart osd.{id}"));
    }

    /// OSDs whose restart finished become running.
    pub async fn settle_starts(&mut self) {
        for slot in self.osds.values_mut() {
            if let OsdState::Starting(h) = &slot.state
                && h.is_finished()
                && let OsdState::Starting(h) = std::mem::replace(&mut slot.state, OsdState::Crashed)
                && let Ok(osd) = h.await
            {
                slot.state = OsdState::Running(osd);
            }
        }
    }

    /// A client's options: its key (with capability `mon_cap` on the
    /// monitors), its incarnation and its network.
    async fn client_options(&mut self, name: &str, mon_cap: &str) -> ClientOptions {
        let key = self
            .key(name, &[("mon", mon_cap), ("osd", "allow rw")])
            .await;
        let mut o = ClientOptions::new(mon_addrs(self.cfg.mons), name.parse().unwrap(), key);
        o.op_timeout = Duration::from_secs(15);
        o.client_inc = Some(self.rng.next_u64() >> 1);
        o.net = net_cfg();
        o.transport = self.net.host(name);
        o
    }

    /// Connects client `n`.
    async fn client(&mut self, n: usize) -> (Client, Arc<ClientLog>) {
        let mut o = self
            .client_options(&format!("client.sim{n}"), "allow r")
            .await;
        let log = ClientLog::new(self.start);
        o.observer = Some(log.clone());
        let client = Client::connect(o).await.unwrap();
        log.follow(&client);
        (client, log)
    }

    /// The snapshot client: it may take and remove the pool's snapshots.
    async fn snapshot_client(&mut self) -> Client {
        let o = self.client_options("client.simsnap", "allow rw").await;
        Client::connect(o).await.unwrap()
    }

    /// Waits until every OSD is up in the map.
    async fn wait_up(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let v = self.command(Command::OsdStat).await?;
            if v["num_up_osds"].as_i64() == Some(i64::from(self.cfg.osds)) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("OSDs not up: {v}"));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Whether every PG of every pool is active+clean on its primary (per
    /// the newest map), with its acting set the up set; else the first
    /// that is not.
    pub async fn unclean(&self) -> Option<String> {
        let Some(map) = self.newest_map() else {
            return Some("no map yet".into());
        };
        let mut stats = BTreeMap::new();
        for (id, slot) in &self.osds {
            if let OsdState::Running(osd) = &slot.state {
                // A restarted OSD boots (down, then up again if the map
                // had its old process up): clean means after that.
                if !map.is_up(*id) {
                    return Some(format!("osd.{id} runs but is not up in e{}", map.epoch.0));
                }
                stats.insert(*id, osd.pg_stats().await);
            }
        }
        let unclean_pg = Self::unclean_pg(&map, &stats);
        // A split pool is clean once its placement has followed too: the
        // leader moves pgp_num step by step after every step is clean.
        if let Some(p) = map.pools().values().find(|p| p.pgp_num != p.pg_num) {
            return Some(format!(
                "pool {}: pgp_num {} still moving to pg_num {}{}",
                p.name,
                p.pgp_num,
                p.pg_num,
                unclean_pg.map(|w| format!(" ({w})")).unwrap_or_default()
            ));
        }
        unclean_pg
    }

    /// The first PG of `map` not active+clean on its primary (per `stats`,
    /// each running OSD's), with its acting set the up set.
    fn unclean_pg(
        map: &OsdMap,
        stats: &BTreeMap<i32, Vec<shoal_osd::pg::PgStat>>,
    ) -> Option<String> {
        let pgs = map
            .pools()
            .iter()
            .flat_map(|(id, p)| (0..p.pg_num).map(|seed| PgId { pool: *id, seed }));
        for pg in pgs {
            let Ok(m) = map.pg_to_up_acting(pg) else {
                return Some(format!("pg {pg}: no mapping"));
            };
            if m.acting != m.up {
                return Some(format!("pg {pg}: acting {:?} up {:?}", m.acting, m.up));
            }
            let stat = stats
                .get(&m.acting_primary)
                .and_then(|s| s.iter().find(|s| s.pgid == pg));
            match stat {
                Some(s) if s.state == "active+clean" && s.acting == m.acting => {}
                Some(s) => {
                    return Some(format!(
                        "pg {pg}: {} on osd.{} acting {:?} (map e{} acting {:?})",
                        s.state, m.acting_primary, s.acting, map.epoch.0, m.acting
                    ));
                }
                None => {
                    return Some(format!(
                        "pg {pg}: no report from its primary osd.{}",
                        m.acting_primary
                    ));
                }
            }
        }
        None
    }

    /// Waits up to `max` (virtual) for every PG to be active+clean.
    pub async fn wait_clean(&self, max: Duration) -> Result<(), String> {
        let deadline = Instant::now() + max;
        loop {
            match self.unclean().await {
                None => return Ok(()),
                Some(why) if Instant::now() >= deadline => {
                    return Err(format!("not active+clean after {max:?}: {why}"));
                }
                Some(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        }
    }

    /// Stops monitor `name` as a crash would: off the network first, then
    /// its Raft core and messenger stop (everything it acknowledged is on
    /// disk already: its log fsyncs before it answers).
    pub async fn crash_mon(&mut self, name: &str) {
        self.net.kill(&format!("mon.{name}"));
        if let Some(Some(m)) = self.mons.insert(name.to_string(), None) {
            m.shutdown().await;
        }
        self.note(format!("crash mon.{name}"));
    }

    /// Starts monitor `name` again on its data.
    pub async fn restart_mon(&mut self, name: &str) -> Result<(), String> {
        let data = self.dir.join(name);
        let m = Monitor::start(mon_opts(data), self.net.host(&format!("mon.{name}")), None)
            .await
            .map_err(|e| format!("restarting mon.{name}: {e}"))?;
        self.mons.insert(name.to_string(), Some(m));
        self.note(format!("restart mon.{name}"));
        Ok(())
    }

    /// The OSDs in state `which`.
    pub fn osds_where(&self, which: impl Fn(&OsdSlot) -> bool) -> Vec<i32> {
        self.osds
            .iter()
            .filter(|(_, s)| which(s))
            .map(|(id, _)| *id)
            .collect()
    }

    /// The monitors that are up (`true`) or down.
    pub fn mons_up(&self, up: bool) -> Vec<String> {
        self.mons
            .iter()
            .filter(|(_, m)| m.is_some() == up)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Notes the states the running OSDs' primaries report now.
    pub async fn sample_states(&mut self) {
        for slot in self.osds.values() {
            if let OsdState::Running(osd) = &slot.state {
                for s in osd.pg_stats().await {
                    self.states.extend(s.state.split('+').map(str::to_string));
                }
            }
        }
    }

    /// Marks OSD `id` out or in.
    pub async fn set_out(&mut self, id: i32, out: bool) -> Result<(), String> {
        let cmd = if out {
            Command::OsdOut { ids: vec![id] }
        } else {
            Command::OsdIn { ids: vec![id] }
        };
        self.command(cmd).await?;
        if let Some(s) = self.osds.get_mut(&id) {
            s.out = out;
        }
        self.note(format!(
            "osd.{id} marked {}",
            if out { "out" } else { "in" }
        ));
        Ok(())
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The addresses of the first `n` monitors.
fn mon_addrs(n: usize) -> Vec<SocketAddr> {
    (0..n.clamp(1, 3)).map(mon_addr).collect()
}

/// Where OSD `id` listens.
pub fn osd_addr(id: i32) -> SocketAddr {
    format!("10.0.1.{}:6800", id + 1).parse().unwrap()
}

/// One whole run (see the crate doc).
pub async fn simulate(seed: u64, cfg: SimConfig) -> Result<Report, Failure> {
    let mut w = World::new(seed, cfg.clone()).await;
    let fail = |w: &World, why: String| Failure {
        seed,
        why,
        trace: w.trace.tail(40),
    };
    if let Err(e) = set_up(&mut w).await {
        return Err(fail(&w, format!("set-up: {e}")));
    }
    let mut clients = Vec::new();
    for n in 0..cfg.clients {
        clients.push(w.client(n).await);
    }
    let objects: Vec<String> = (0..cfg.objects).map(|i| format!("obj{i}")).collect();
    let workload = Workload::start(&clients, &objects, w.rng.next_u64(), &w.trace, w.start);
    let snap_client = match cfg.snapshots {
        true => Some(w.snapshot_client().await),
        false => None,
    };
    let snaps = snap_client.as_ref().map(|c| {
        crate::snapshots::SnapWorkload::start(c.clone(), w.rng.next_u64(), &w.trace, w.start)
    });
    let faults = match nemesis::run(&mut w).await {
        Ok(n) => n,
        Err(e) => return Err(fail(&w, e)),
    };
    let mut history = workload.stop().await;
    let snaps = match snaps {
        Some(s) => Some(s.stop().await),
        None => None,
    };
    if let Err(e) = heal(&mut w).await {
        return Err(fail(&w, e));
    }
    if let Err(e) = w.wait_clean(cfg.liveness).await {
        let query = stuck_query(&w, &clients[0].0, &e).await;
        return Err(fail(&w, format!("liveness: {e}\n{query}")));
    }
    w.note("active+clean");
    history.extend(crate::workload::read_all(&clients[0], &objects, &w.trace, w.start).await);
    let mut snapshots = (0, 0, 0);
    if let (Some(c), Some(st)) = (&snap_client, snaps) {
        match crate::snapshots::final_check(c, st, &w.trace, w.start).await {
            Ok(st) => snapshots = st.counts,
            Err(e) => return Err(fail(&w, e)),
        }
    }
    let answered = history
        .iter()
        .filter(|o| matches!(o.outcome, history::Outcome::Ok { .. }))
        .count();
    // The invariants first: they name what broke more precisely.
    if let Err(e) = invariants::check(&w) {
        return Err(fail(&w, e));
    }
    if let Err(v) = history::check(&history) {
        let copies = object_report(&w, &v.object);
        return Err(fail(
            &w,
            format!("history of {}: {}{copies}", v.object, v.why),
        ));
    }
    let logs: Vec<Arc<ClientLog>> = clients.iter().map(|(_, l)| Arc::clone(l)).collect();
    if let Err(e) = crate::resends::check(&history, &logs, w.pool) {
        return Err(fail(&w, e));
    }
    if let Err(e) = invariants::replicas_identical(&w).await {
        return Err(fail(&w, e));
    }
    for (c, _) in &clients {
        c.shutdown().await;
    }
    if let Some(c) = &snap_client {
        c.shutdown().await;
    }
    Ok(Report {
        seed,
        digest: w.trace.digest(),
        faults,
        ops: (answered, history.len() - answered),
        acked: w.acks.all().len(),
        virtual_ms: w.now_ms(),
        states: std::mem::take(&mut w.states),
        black_holes: w.black_holes,
        pg_num: w
            .newest_map()
            .and_then(|m| m.pool_by_name("rbd").map(|p| (p.pg_num, p.pgp_num)))
            .unwrap_or_default(),
        snapshots,
    })
}

/// What each OSD's store holds of `object`: its PG's newest log entry for
/// it, whether it is in the missing set, and its data.
fn object_report(w: &World, object: &str) -> String {
    let Some(map) = w.newest_map() else {
        return String::new();
    };
    let Some(pool) = map.pool(w.pool) else {
        return String::new();
    };
    let pg = pool.object_pg(object, "");
    let Ok(key) = shoal_osd::object::object_key(pool, "", object) else {
        return String::new();
    };
    let mut out = format!("copies of {object} (pg {pg}):\n");
    for (id, slot) in &w.osds {
        let store = slot.store.as_ref();
        let Some(coll) = invariants::pg_collection(store, pg) else {
            continue;
        };
        let Some(log) = invariants::load_log(store, pg) else {
            continue;
        };
        let newest = log.entries().rev().find(|e| e.key == key).map(|e| {
            format!(
                "{} {:?} {:?}",
                e.version,
                e.op,
                e.reqid.as_ref().map(|r| r.tid)
            )
        });
        let data = shoal_objectstore::ObjectStore::read(store, &coll, &key, 0, 1 << 20)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_else(|e| e.to_string());
        out.push_str(&format!(
            "  osd.{id}: log up to {} newest entry {newest:?} data {data:?}\n",
            log.info.last_update
        ));
    }
    out
}

/// `pg query` of the PG a liveness failure names, from its primary.
async fn stuck_query(w: &World, client: &Client, why: &str) -> String {
    let pg = why
        .split_whitespace()
        .find_map(|t| t.trim_end_matches(':').parse::<PgId>().ok());
    let Some(pg) = pg else {
        return String::new();
    };
    let mut out = match client.pg_command(pg, "query", Duration::from_secs(5)).await {
        Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_default(),
        Err(e) => format!("pg {pg} query: {e} (pool {})", w.pool),
    };
    if let Ok(v) = w.command(Command::OsdTree).await {
        out.push_str(&format!("\nosd tree: {v}"));
    }
    // What each OSD's store holds of the PG.
    for (id, slot) in &w.osds {
        if let Some(l) = invariants::load_log(slot.store.as_ref(), pg) {
            let objects = invariants::object_names(slot.store.as_ref(), pg);
            out.push_str(&format!(
                "\nosd.{id}: les {} log {}..{} objects {objects:?}",
                l.info.last_epoch_started, l.info.log_tail, l.info.last_update
            ));
        }
    }
    out
}

async fn set_up(w: &mut World) -> Result<(), String> {
    match w.cfg.erasure {
        None => {
            w.command(Command::PoolCreate {
                name: "rbd".into(),
                pg_num: w.cfg.pg_num,
                spec: PoolSpec::Replicated {
                    size: 3,
                    min_size: 2,
                },
                set: Vec::new(),
            })
            .await?;
            for id in 0..w.cfg.osds {
                w.add_osd(id).await;
            }
            w.wait_up().await?;
        }
        // An EC pool's rule needs its k+m OSDs in CRUSH first.
        Some((k, m)) => {
            for id in 0..w.cfg.osds {
                w.add_osd(id).await;
            }
            w.wait_up().await?;
            let params = [
                ("k", k.to_string()),
                ("m", m.to_string()),
                ("crush-failure-domain", "osd".to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            w.command(Command::ErasureCodeProfileSet {
                name: "sim".into(),
                params,
                force: false,
            })
            .await?;
            w.command(Command::PoolCreate {
                name: "rbd".into(),
                pg_num: w.cfg.pg_num,
                spec: PoolSpec::Erasure {
                    profile: "sim".into(),
                    rule: None,
                },
                set: Vec::new(),
            })
            .await?;
            w.command(Command::PoolSet {
                name: "rbd".into(),
                key: "allow_ec_overwrites".into(),
                value: "true".into(),
            })
            .await?;
        }
    }
    let map = loop {
        if let Some(m) = w.newest_map()
            && m.pool_by_name("rbd").is_some()
        {
            break m;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    w.pool = map.pool_by_name("rbd").map(|p| p.id).unwrap_or(0);
    w.wait_clean(Duration::from_secs(120)).await?;
    w.note("set up: every PG active+clean");
    Ok(())
}

/// Ends every fault: the network heals, crashed OSDs restart, all are in.
async fn heal(w: &mut World) -> Result<(), String> {
    w.net.heal();
    w.note("heal: network, restarts, every OSD in");
    for id in w.osds_where(|s| matches!(s.state, OsdState::Crashed)) {
        w.restart_osd(id);
    }
    for m in w.mons_up(false) {
        w.restart_mon(&m).await?;
    }
    // Every OSD in, including one whose "out" the harness did not see
    // succeed (the command may have committed after its answer was lost).
    let ids: Vec<i32> = w.osds.keys().copied().collect();
    w.command(Command::OsdIn { ids }).await?;
    for s in w.osds.values_mut() {
        s.out = false;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while w
        .osds
        .values()
        .any(|s| matches!(s.state, OsdState::Starting(_)))
    {
        if Instant::now() >= deadline {
            return Err("an OSD did not restart within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        w.settle_starts().await;
    }
    Ok(())
}

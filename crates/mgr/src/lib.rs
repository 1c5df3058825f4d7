//! The manager (`shoal mgr`): one active and any number of standbys,
//! chosen by the monitors from the managers' beacons (the manager map,
//! `shoal-mon`'s `mgrmap.rs`). The active one gathers, every stats period,
//! the monitors' views and the performance reports daemons send through
//! them ([`gather`]), and serves over HTTP: `/metrics` in Prometheus' text
//! format ([`prom`]) and the dashboard, a page built into the binary that
//! reads `/api/summary` and acts through `/api/action` with the logged-in
//! user's own credentials, so the monitors check what that user may do
//! (`http.rs`). A standby answers `/metrics` with 503 and sends browsers to
//! the active manager. Nothing here is on a data path.

pub mod gather;
mod http;
pub mod prom;
mod session;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::Value;
use shoal_monclient::replies::MgrMapReply;
use shoal_monclient::{Command, MonClient};
use shoal_net::Secret;
use shoal_types::EntityName;

pub use gather::{History, Snapshot};

/// Makes a monitor client that authenticates as a user with a key (for
/// the dashboard's logins). Given by the binary, which knows the
/// transport and where the monitors are.
pub type Login = Arc<dyn Fn(EntityName, Secret) -> MonClient + Send + Sync>;

/// Lists what the front ends keep in the cluster (block images, S3
/// buckets) as JSON `{"images": [...], "buckets": [...]}`, for the
/// dashboard. Given by the binary, which links the front ends' crates; the
/// active manager calls it every [`CATALOG_PERIOD`].
pub type Catalog = Arc<
    dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, String>> + Send>>
        + Send
        + Sync,
>;

/// Scrubs (or, with `deep`, deep-scrubs) the PGs an OSD is primary of,
/// as user `entity` with its key: the OSDs decide whether the user may.
/// Answers once the first PG's scrub is done (a refusal shows there) and
/// goes on with the others in the background. Given by the binary, which
/// links the client library.
pub type Scrub = Arc<
    dyn Fn(
            EntityName,
            Secret,
            i32,
            bool,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, Refusal>> + Send>>
        + Send
        + Sync,
>;

/// Why an action was not done.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The user may not (as opposed to: it failed).
    pub denied: bool,
    /// What was said.
    pub message: String,
}

/// What the binary lends the manager beyond the monitors: how users log
/// in, and what reaches the data (images and buckets, scrubs).
#[derive(Clone)]
pub struct Hooks {
    /// Monitor sessions for dashboard logins.
    pub login: Login,
    /// Images and buckets.
    pub catalog: Option<Catalog>,
    /// Scrubs from the dashboard.
    pub scrub: Option<Scrub>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("catalog", &self.catalog.is_some())
            .field("scrub", &self.scrub.is_some())
            .finish()
    }
}

/// Between two listings of the catalog.
pub const CATALOG_PERIOD: Duration = Duration::from_secs(15);

/// How a manager runs.
#[derive(Debug, Clone)]
pub struct MgrOptions {
    /// Its name (`x` for `mgr.x`).
    pub name: String,
    /// Where it serves HTTP (port 0: any free port).
    pub http: SocketAddr,
    /// Between beacons to the monitors.
    pub beacon_interval: Duration,
    /// Between gatherings while active.
    pub period: Duration,
}

/// Errors starting a manager.
#[derive(Debug, thiserror::Error)]
pub enum MgrError {
    /// The HTTP address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// What the manager's tasks share.
struct Shared {
    opts: MgrOptions,
    /// Where HTTP is served (the bound address).
    addr: SocketAddr,
    monc: MonClient,
    hooks: Hooks,
    /// The manager map as the last beacon's answer gave it.
    mgrmap: RwLock<MgrMapReply>,
    /// The newest snapshot while active.
    snap: RwLock<Option<Arc<Snapshot>>>,
    history: Mutex<History>,
    sessions: session::Sessions,
    /// Images and buckets as the catalog last listed them.
    catalog: RwLock<Value>,
    /// The role changed: gather now.
    role_changed: tokio::sync::Notify,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mgr({}, {})", self.opts.name, self.addr)
    }
}

impl Shared {
    fn active(&self) -> bool {
        read(&self.mgrmap).is_active(&self.opts.name)
    }

    fn snapshot(&self) -> Option<Arc<Snapshot>> {
        read(&self.snap).clone()
    }

    /// The newest snapshot; gathered now when none is yet (a manager
    /// just made active serves its first scrape, rather than 503).
    async fn snapshot_now(&self) -> Result<Arc<Snapshot>, shoal_monclient::MonError> {
        if let Some(snap) = self.snapshot() {
            return Ok(snap);
        }
        let snap = Arc::new(gather::gather(&self.monc).await?);
        let mut slot = write(&self.snap);
        if slot.is_none() && self.active() {
            lock(&self.history).push(&snap);
            *slot = Some(Arc::clone(&snap));
        }
        Ok(snap)
    }
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running manager.
#[derive(Debug)]
pub struct Mgr {
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Mgr {
    /// Binds the HTTP address and starts beaconing; the manager serves as
    /// the active one once the monitors' map says so.
    pub async fn start(opts: MgrOptions, monc: MonClient, hooks: Hooks) -> Result<Mgr, MgrError> {
        let listener = tokio::net::TcpListener::bind(opts.http)
            .await
            .map_err(|source| MgrError::Bind {
                addr: opts.http,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| MgrError::Bind {
            addr: opts.http,
            source,
        })?;
        let shared = Arc::new(Shared {
            opts,
            addr,
            monc,
            hooks: hooks.clone(),
            mgrmap: RwLock::new(MgrMapReply::default()),
            snap: RwLock::new(None),
            history: Mutex::new(History::default()),
            sessions: session::Sessions::default(),
            catalog: RwLock::new(Value::Null),
            role_changed: tokio::sync::Notify::new(),
        });
        let mut tasks = vec![
            tokio::spawn(beacons(Arc::clone(&shared))),
            tokio::spawn(gathering(Arc::clone(&shared))),
            tokio::spawn(http::serve(Arc::clone(&shared), listener)),
        ];
        if let Some(c) = hooks.catalog {
            tasks.push(tokio::spawn(cataloging(Arc::clone(&shared), c)));
        }
        Ok(Mgr { shared, tasks })
    }

    /// Where HTTP is served.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// Whether the monitors' map names this manager active.
    pub fn is_active(&self) -> bool {
        self.shared.active()
    }
}

impl Drop for Mgr {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Tells the monitors this manager is alive, and learns from the answer
/// whether it is the active one.
async fn beacons(s: Arc<Shared>) {
    loop {
        let cmd = Command::MgrBeacon {
            name: s.opts.name.clone(),
            addr: s.addr.to_string(),
        };
        match s.monc.command_as::<MgrMapReply>(&cmd).await {
            Ok(map) => {
                let was = s.active();
                *write(&s.mgrmap) = map;
                let now = s.active();
                if now != was {
                    tracing::info!(mgr = %s.opts.name, active = now, "manager role changed");
                    s.role_changed.notify_one();
                }
            }
            Err(e) => tracing::debug!("mgr beacon: {e}"),
        }
        tokio::time::sleep(s.opts.beacon_interval).await;
    }
}

/// While active, gathers a snapshot every period; a standby keeps none.
async fn gathering(s: Arc<Shared>) {
    loop {
        if s.active() {
            match gather::gather(&s.monc).await {
                Ok(snap) => {
                    lock(&s.history).push(&snap);
                    *write(&s.snap) = Some(Arc::new(snap));
                }
                Err(e) => tracing::debug!("mgr gather: {e}"),
            }
        } else if read(&s.snap).is_some() {
            *write(&s.snap) = None;
            *lock(&s.history) = History::default();
        }
        s.sessions.expire();
        let _ = tokio::time::timeout(s.opts.period, s.role_changed.notified()).await;
    }
}

/// While active, lists the images and buckets every [`CATALOG_PERIOD`]
/// (and at once on becoming active).
async fn cataloging(s: Arc<Shared>, catalog: Catalog) {
    let mut was_active = false;
    let mut last: Option<std::time::Instant> = None;
    loop {
        let active = s.active();
        let due = last.is_none_or(|t| t.elapsed() >= CATALOG_PERIOD);
        if active && (!was_active || due) {
            let listed = match catalog().await {
                Ok(v) => v,
                Err(e) => serde_json::json!({ "error": e }),
            };
            *write(&s.catalog) = listed;
            last = Some(std::time::Instant::now());
        }
        was_active = active;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

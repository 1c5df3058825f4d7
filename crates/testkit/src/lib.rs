//! Test support: a cluster in one process — one monitor and any number of
//! OSDs on MemStores, over the in-memory network — with helpers to create
//! pools and entities, stop and restart OSDs, and reach each OSD's store.
//! Only tests depend on this crate. Its functions panic on failure: a
//! failed set-up is a failed test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod simnet;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shoal_mon::{Command, MonClient, Monitor, MonitorOptions, PoolSpec, TicketAuth, UpdateSink};
use shoal_net::{Keyring, MemNetwork, Messenger, NetConfig, Secret};
use shoal_objectstore::MemStore;
use shoal_osd::ctx::PgConfig;
use shoal_osd::daemon::{Osd, OsdOptions};
use shoal_types::EntityName;

/// The monitor's address on the in-memory network.
pub const MON: &str = "10.0.0.1:6789";

/// Messenger settings with short timeouts.
pub fn net_cfg() -> NetConfig {
    NetConfig {
        request_timeout: Duration::from_secs(5),
        reconnect_attempts: 2,
        connect_timeout: Duration::from_millis(300),
        ..NetConfig::default()
    }
}

/// A monitor's options for tests: short timeouts, the OSD as the failure
/// domain, one reporter enough to mark an OSD down.
pub fn mon_opts(data: PathBuf) -> MonitorOptions {
    MonitorOptions {
        data,
        net: net_cfg(),
        heartbeat: Duration::from_millis(100),
        election_timeout: Duration::from_millis(400),
        snapshot_every: 100,
        command_timeout: Duration::from_secs(5),
        ticket_ttl: Duration::from_secs(600),
        secret_rotation: Duration::from_secs(3600),
        failure_domain: "osd".into(),
        osdmap_history: 500,
        osdmap_full_interval: 100,
        osd: shoal_mon::OsdLiveness {
            min_down_reporters: 1,
            reporter_subtree_level: "osd".into(),
            beacon_grace: Duration::from_secs(60),
            report_expiry: Duration::from_secs(10),
            down_out_interval: Duration::from_secs(600),
            batch_window: Duration::from_millis(50),
        },
        mgr_beacon_grace: Duration::from_secs(10),
        mds_beacon_grace: Duration::from_secs(10),
        full_ratios: shoal_mon::FullRatios::default(),
    }
}

/// One monitor and OSDs in this process.
pub struct Cluster {
    dir: PathBuf,
    /// The in-memory network everything talks over.
    pub net: MemNetwork,
    _mon: Monitor,
    /// client.admin's key.
    pub admin_key: Secret,
    /// Running OSDs and their stores.
    pub osds: BTreeMap<i32, (Osd, Arc<MemStore>)>,
    keys: BTreeMap<i32, Secret>,
    /// The PG settings OSDs start with.
    pub pg: PgConfig,
    /// The OSDs' scheduled scrub and deep-scrub intervals.
    pub scrub_intervals: (Duration, Duration),
    /// Between a stray copy's questions to its primary.
    pub stray_check_interval: Duration,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cluster({} osds)", self.osds.len())
    }
}

/// A monitor client for `name` on `net`.
pub fn mon_client(net: &MemNetwork, name: &str, key: Secret, sink: Arc<UpdateSink>) -> MonClient {
    let me: EntityName = name.parse().unwrap();
    let auth = TicketAuth::new(me.clone(), key);
    let msgr = Messenger::new(me, net_cfg(), Arc::new(net.clone()), Arc::new(auth), sink);
    MonClient::new(msgr, vec![MON.parse().unwrap()], Duration::from_secs(8))
}

impl Cluster {
    /// A monitor alone; `tag` names its temporary directory.
    pub async fn new(tag: &str) -> Cluster {
        let dir = std::env::temp_dir().join(format!("shoal-tk-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let initial = BTreeMap::from([("a".to_string(), MON.to_string())]);
        let ring = shoal_mon::mkfs(&dir.join("a"), "a", &initial, None, None).unwrap();
        let net = MemNetwork::new();
        let mon = Monitor::start(mon_opts(dir.join("a")), Arc::new(net.clone()), None)
            .await
            .unwrap();
        let keyring = Keyring::load(&ring).unwrap();
        let admin_key = keyring
            .get(&"client.admin".parse().unwrap())
            .unwrap()
            .key
            .clone();
        Cluster {
            dir,
            net,
            _mon: mon,
            admin_key,
            osds: BTreeMap::new(),
            keys: BTreeMap::new(),
            pg: PgConfig {
                peer_timeout: Duration::from_secs(5),
                ..PgConfig::default()
            },
            scrub_intervals: (Duration::from_secs(86_400), Duration::from_secs(7 * 86_400)),
            stray_check_interval: Duration::from_millis(500),
        }
    }

    /// A monitor, `osds` OSDs, and a replicated pool `rbd` of `pg_num` PGs
    /// with `size` copies (min_size: a majority), every OSD up.
    pub async fn with_pool(tag: &str, osds: i32, size: u32, pg_num: u32) -> Cluster {
        Cluster::with_pool_and_stores(tag, osds, size, pg_num, 1 << 30).await
    }

    /// [`Cluster::with_pool`] with MemStores of `store_bytes` each.
    pub async fn with_pool_and_stores(
        tag: &str,
        osds: i32,
        size: u32,
        pg_num: u32,
        store_bytes: u64,
    ) -> Cluster {
        Cluster::with_pool_config(tag, osds, size, pg_num, store_bytes, |_| {}).await
    }

    /// [`Cluster::with_pool_and_stores`] with OSDs whose PG settings
    /// `tune` changed.
    pub async fn with_pool_config(
        tag: &str,
        osds: i32,
        size: u32,
        pg_num: u32,
        store_bytes: u64,
        tune: impl FnOnce(&mut PgConfig),
    ) -> Cluster {
        let mut c = Cluster::new(tag).await;
        tune(&mut c.pg);
        c.create_pool("rbd", pg_num, size).await;
        for id in 0..osds {
            c.start_osd(id, Arc::new(MemStore::new(store_bytes))).await;
        }
        c.wait_up(osds).await;
        c
    }

    /// An admin monitor client.
    pub fn admin(&self) -> MonClient {
        mon_client(
            &self.net,
            "client.admin",
            self.admin_key.clone(),
            UpdateSink::new(),
        )
    }

    /// Runs a monitor command as client.admin, retrying for 15 s.
    pub async fn command(&self, cmd: Command) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match self.admin().command(&cmd).await {
                Ok(v) => return v,
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("{cmd:?}: {e}"),
            }
        }
    }

    /// Creates a replicated pool.
    pub async fn create_pool(&self, name: &str, pg_num: u32, size: u32) {
        self.command(Command::PoolCreate {
            name: name.into(),
            pg_num,
            spec: PoolSpec::Replicated {
                size,
                min_size: size - size / 2,
            },
            set: Vec::new(),
        })
        .await;
    }

    /// The key of `name`, created with `caps` if new.
    pub async fn entity_key(&self, name: &str, caps: &[(&str, &str)]) -> Secret {
        let caps = caps
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let v = self
            .command(Command::AuthGetOrCreate {
                entity: name.into(),
                caps,
            })
            .await;
        Secret::from_base64(v[name]["key"].as_str().unwrap()).unwrap()
    }

    /// The address OSD `id` listens on.
    pub fn osd_addr(id: i32) -> SocketAddr {
        format!("10.0.1.{}:6800", id + 1).parse().unwrap()
    }

    /// Starts OSD `id` on `store` (a new one, or the store it had).
    pub async fn start_osd(&mut self, id: i32, store: Arc<MemStore>) {
        let key = match self.keys.get(&id) {
            Some(k) => k.clone(),
            None => {
                let k = self
                    .entity_key(
                        &format!("osd.{id}"),
                        &[("mon", "allow profile osd"), ("osd", "allow *")],
                    )
                    .await;
                self.keys.insert(id, k.clone());
                k
            }
        };
        let opts = OsdOptions {
            id,
            key,
            mon_addrs: vec![MON.parse().unwrap()],
            bind: Cluster::osd_addr(id),
            host: format!("host{id}"),
            weight: 0x10000,
            net: net_cfg(),
            pg: self.pg.clone(),
            heartbeat_interval: Duration::from_millis(300),
            heartbeat_grace: Duration::from_secs(2),
            beacon_interval: Duration::from_secs(5),
            stats_interval: Duration::from_secs(1),
            perf_interval: None,
            mon_timeout: Duration::from_secs(8),
            scrub_interval: self.scrub_intervals.0,
            deep_scrub_interval: self.scrub_intervals.1,
            stray_check_interval: self.stray_check_interval,
            observer: None,
            op_shards: 1,
        };
        let osd = Osd::start(opts, store.clone(), Arc::new(self.net.clone()))
            .await
            .unwrap();
        self.osds.insert(id, (osd, store));
    }

    /// Stops OSD `id` cleanly; returns its store.
    pub async fn stop_osd(&mut self, id: i32) -> Arc<MemStore> {
        let (osd, store) = self.osds.remove(&id).unwrap();
        osd.stop().await;
        store
    }

    /// Waits (up to 20 s) until `n` OSDs are up.
    pub async fn wait_up(&self, n: i32) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let v = self.command(Command::OsdStat).await;
            if v["num_up_osds"].as_i64() == Some(i64::from(n)) {
                return;
            }
            assert!(Instant::now() < deadline, "{n} OSDs not up: {v}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

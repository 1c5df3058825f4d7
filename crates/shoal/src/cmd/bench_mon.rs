//! `shoal bench mon`: the monitors' commit rate, command latency and the
//! time for a change to reach many subscribers.
//!
//! It builds a throw-away cluster in a temporary directory: monitors run in
//! this process (each with its own messenger, Raft node and on-disk store,
//! fsync included) and talk over loopback TCP; subscribers are simulated
//! daemons, each with its own connection, over the in-memory network (so a
//! thousand of them need no file descriptors).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use shoal_mon::{Command, MonClient, Monitor, MonitorOptions, UpdateSink, mkfs};
use shoal_net::{
    Incoming, Keyring, KeyringAuth, KeyringEntry, MemNetwork, Messenger, NetConfig, TcpTransport,
    Transport,
};
use shoal_types::EntityName;

use super::common::Format;

/// Options of `shoal bench mon`.
#[derive(Debug, Args)]
pub struct MonBenchArgs {
    /// Monitors in the quorum.
    #[arg(long, default_value_t = 3)]
    mons: usize,
    /// Seconds of the commit-rate and latency measurements.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Concurrent writers for the commit rate.
    #[arg(long, default_value_t = 16)]
    writers: usize,
    /// Simulated subscribers for the fan-out measurement.
    #[arg(long, default_value_t = 1000)]
    subscribers: usize,
    /// Where to put the throw-away cluster (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "plain")]
    format: Format,
}

struct Bench {
    dir: PathBuf,
    initial: BTreeMap<String, String>,
    keyring: Keyring,
    mons: Vec<Monitor>,
}

fn opts(data: PathBuf) -> MonitorOptions {
    MonitorOptions {
        data,
        net: NetConfig::default(),
        heartbeat: Duration::from_millis(100),
        election_timeout: Duration::from_millis(500),
        snapshot_every: 1000,
        command_timeout: Duration::from_secs(10),
        ticket_ttl: Duration::from_secs(3600),
        secret_rotation: Duration::from_secs(3600),
        failure_domain: "osd".into(),
        osdmap_history: 500,
        osdmap_full_interval: 100,
        osd: shoal_mon::OsdLiveness::default(),
        mgr_beacon_grace: Duration::from_secs(10),
        mds_beacon_grace: Duration::from_secs(10),
        full_ratios: shoal_mon::FullRatios::default(),
    }
}

impl Bench {
    /// Makes and starts `n` monitors; `extra` entities get keys (and a mon
    /// read cap) in the bootstrap keyring.
    async fn start(
        dir: &Path,
        n: usize,
        transport: Arc<dyn Transport>,
        extra: &[EntityName],
    ) -> anyhow::Result<Bench> {
        let names: Vec<String> = (0..n)
            .map(|i| ((b'a' + i as u8) as char).to_string())
            .collect();
        let mut initial = BTreeMap::new();
        for name in &names {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            initial.insert(name.clone(), format!("127.0.0.1:{port}"));
        }
        let first = &names[0];
        let ring_path = mkfs(&dir.join(first), first, &initial, None, None)?;
        let mut keyring = Keyring::load(&ring_path)?;
        for e in extra {
            keyring.add_generated(e.clone());
            let key = keyring.get(e).map(|k| k.key.clone()).context("key")?;
            let caps = BTreeMap::from([("mon".to_string(), "allow profile osd".to_string())]);
            keyring.insert(e.clone(), KeyringEntry { key, caps });
        }
        keyring.save(&ring_path)?;
        for name in &names[1..] {
            mkfs(&dir.join(name), name, &initial, Some(&ring_path), None)?;
        }
        let mut mons = Vec::new();
        for name in &names {
            mons.push(Monitor::start(opts(dir.join(name)), Arc::clone(&transport), None).await?);
        }
        Ok(Bench {
            dir: dir.to_path_buf(),
            initial,
            keyring,
            mons,
        })
    }

    fn client(
        &self,
        name: &str,
        transport: Arc<dyn Transport>,
        sink: Option<Arc<UpdateSink>>,
    ) -> anyhow::Result<(MonClient, Messenger)> {
        let me: EntityName = name.parse()?;
        let auth = Arc::new(KeyringAuth::new(me.clone(), self.keyring.clone()));
        let dispatcher: Arc<dyn shoal_net::Dispatcher> = match sink {
            Some(s) => s,
            None => Arc::new(|_: Incoming| {}),
        };
        let msgr = Messenger::new(me, NetConfig::default(), transport, auth, dispatcher);
        let addrs: Vec<SocketAddr> = self
            .initial
            .values()
            .filter_map(|a| a.parse().ok())
            .collect();
        Ok((
            MonClient::new(msgr.clone(), addrs, Duration::from_secs(20)),
            msgr,
        ))
    }

    async fn wait_ready(client: &MonClient) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(s) = client
                .command_as::<shoal_monclient::replies::StatusReply>(&Command::Status)
                .await
                && !s.fsid.is_empty()
            {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "monitors did not bootstrap in 20 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn stop(self) {
        for m in self.mons {
            m.shutdown().await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn set(i: u64) -> Command {
    Command::ConfigSet {
        who: format!("client.bench{i}"),
        key: "ms_request_timeout_ms".into(),
        value: (1000 + i).to_string(),
    }
}

/// What `shoal bench mon` measured (`--format json` prints it).
#[derive(Debug, serde::Serialize)]
struct MonReport {
    mons: usize,
    writers: usize,
    commits_per_s: f64,
    change_latency_p50_ms: f64,
    change_latency_p99_ms: f64,
    subscribers: usize,
    fanout_commit_ms: f64,
    fanout_all_received_ms: f64,
    pool_create_p50_ms: f64,
    pool_create_p99_ms: f64,
    osdmap_osds: usize,
    osdmap_epoch_commit_ms: f64,
    osdmap_epoch_all_received_ms: f64,
}

/// The `q` percentile of `sorted`, in ms.
fn percentile(sorted: &[Duration], q: f64) -> f64 {
    let ms: Vec<f64> = sorted.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    super::units::percentile(&ms, q)
}

/// Runs `shoal bench mon`.
pub fn run(a: MonBenchArgs) -> anyhow::Result<()> {
    let base = a.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("shoal-bench-mon-{}", std::process::id()))
    });
    let _ = std::fs::remove_dir_all(&base);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let out = rt.block_on(async {
        let dur = Duration::from_secs(a.seconds.max(1));
        // (a) and (b): TCP, fsync'd store.
        let tcp: Arc<dyn Transport> = Arc::new(TcpTransport);
        let b = Bench::start(&base.join("tcp"), a.mons.max(1), Arc::clone(&tcp), &[]).await?;
        let (client, _m) = b.client("client.admin", Arc::clone(&tcp), None)?;
        Bench::wait_ready(&client).await?;
        eprintln!("(a) commits per second with {} writers ...", a.writers);
        let end = Instant::now() + dur;
        let start = Instant::now();
        let mut tasks = Vec::new();
        for w in 0..a.writers.max(1) as u64 {
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < end {
                    client.command(&set(w * 1_000_000 + n)).await?;
                    n += 1;
                }
                anyhow::Ok(n)
            }));
        }
        let mut commits = 0;
        for t in tasks {
            commits += t.await??;
        }
        let commits_per_s = commits as f64 / start.elapsed().as_secs_f64();
        eprintln!("(b) latency of one change at a time ...");
        let mut lat = Vec::new();
        let end = Instant::now() + dur;
        let mut i = 0;
        while Instant::now() < end {
            let t = Instant::now();
            client.command(&set(900_000_000 + i)).await?;
            lat.push(t.elapsed());
            i += 1;
        }
        lat.sort_unstable();
        eprintln!("(d) latency of osd pool create ...");
        let mut pool_lat = Vec::new();
        for i in 0..50 {
            let t = Instant::now();
            client
                .command(&Command::PoolCreate {
                    name: format!("bench{i}"),
                    pg_num: 32,
                    spec: shoal_mon::PoolSpec::Replicated {
                        size: 3,
                        min_size: 2,
                    },
                    set: Vec::new(),
                })
                .await?;
            pool_lat.push(t.elapsed());
        }
        pool_lat.sort_unstable();
        b.stop().await;

        // (c): fan-out to simulated subscribers over the in-memory network.
        eprintln!("(c) one change to {} subscribers ...", a.subscribers);
        let mem: Arc<dyn Transport> = Arc::new(MemNetwork::new());
        let subs: Vec<EntityName> = (0..a.subscribers as u32).map(EntityName::osd).collect();
        let b = Bench::start(&base.join("mem"), a.mons.max(1), Arc::clone(&mem), &subs).await?;
        let (admin, _m) = b.client("client.admin", Arc::clone(&mem), None)?;
        Bench::wait_ready(&admin).await?;
        let mut watchers = Vec::new();
        let mut keep = Vec::new();
        let mut osd_sinks = Vec::new();
        for e in &subs {
            let sink = UpdateSink::new();
            let (c, m) = b.client(&e.to_string(), Arc::clone(&mem), Some(Arc::clone(&sink)))?;
            watchers.push(c.subscribe("config", Arc::clone(&sink)));
            osd_sinks.push(sink);
            keep.push((c, m));
        }
        for w in &mut watchers {
            while w.borrow().is_none() {
                w.changed().await?;
            }
        }
        let t = Instant::now();
        admin
            .command(&Command::ConfigSet {
                who: "osd".into(),
                key: "log_level".into(),
                value: "debug".into(),
            })
            .await?;
        let committed = t.elapsed();
        for w in &mut watchers {
            loop {
                let has = w
                    .borrow()
                    .as_ref()
                    .is_some_and(|(_, v)| v.to_string().contains("log_level=debug"));
                if has {
                    break;
                }
                w.changed().await?;
            }
        }
        let fanout = t.elapsed();
        eprintln!(
            "(e) {} OSDs boot, then one OSD-map epoch reaches all of them ...",
            a.subscribers
        );
        let mut boots = Vec::new();
        for (i, (c, _)) in keep.iter().enumerate() {
            let c = c.clone();
            let cmd = Command::OsdBoot {
                id: i as i32,
                addr: format!("127.0.0.1:{}", 20_000 + i),
                host: format!("host{}", i / 20),
                weight: 0x10000,
                nonce: 0,
            };
            boots.push(tokio::spawn(async move { c.command(&cmd).await }));
        }
        for j in boots {
            j.await??;
        }
        let mut maps = Vec::new();
        for (i, (c, _)) in keep.iter().enumerate() {
            maps.push(c.subscribe_osdmap(Arc::clone(&osd_sinks[i])));
        }
        let booted: shoal_monclient::replies::OsdStatReply =
            admin.command_as(&Command::OsdStat).await?;
        let target = u64::from(booted.epoch);
        for m in &mut maps {
            while m
                .borrow()
                .as_ref()
                .is_none_or(|x| u64::from(x.epoch.0) < target)
            {
                m.changed().await?;
            }
        }
        let t = Instant::now();
        admin
            .command(&Command::PoolCreate {
                name: "fanout".into(),
                pg_num: 64,
                spec: shoal_mon::PoolSpec::Replicated {
                    size: 3,
                    min_size: 2,
                },
                set: Vec::new(),
            })
            .await?;
        let map_commit = t.elapsed();
        for m in &mut maps {
            while m
                .borrow()
                .as_ref()
                .is_none_or(|x| u64::from(x.epoch.0) <= target)
            {
                m.changed().await?;
            }
        }
        let map_fanout = t.elapsed();
        for (_, m) in keep {
            m.shutdown().await;
        }
        b.stop().await;
        anyhow::Ok(MonReport {
            mons: a.mons,
            writers: a.writers,
            commits_per_s,
            change_latency_p50_ms: percentile(&lat, 0.5),
            change_latency_p99_ms: percentile(&lat, 0.99),
            subscribers: a.subscribers,
            fanout_commit_ms: committed.as_secs_f64() * 1e3,
            fanout_all_received_ms: fanout.as_secs_f64() * 1e3,
            pool_create_p50_ms: percentile(&pool_lat, 0.5),
            pool_create_p99_ms: percentile(&pool_lat, 0.99),
            osdmap_osds: a.subscribers,
            osdmap_epoch_commit_ms: map_commit.as_secs_f64() * 1e3,
            osdmap_epoch_all_received_ms: map_fanout.as_secs_f64() * 1e3,
        })
    })?;
    let _ = std::fs::remove_dir_all(&base);
    match a.format {
        Format::Json => outln!("{}", serde_json::to_string(&out)?),
        Format::Plain => {
            outln!(
                "shoal bench mon: {} monitors, in one process, store fsync'd",
                out.mons
            );
            outln!(
                "(a) committed changes/s, {} writers:     {:>10.1}",
                out.writers,
                out.commits_per_s
            );
            outln!(
                "(b) one change at a time, latency p50:   {:>10.2} ms",
                out.change_latency_p50_ms
            );
            outln!(
                "(b) one change at a time, latency p99:   {:>10.2} ms",
                out.change_latency_p99_ms
            );
            outln!(
                "(c) change committed, then seen by all {} subscribers: {:.1} ms (commit {:.1} ms)",
                out.subscribers,
                out.fanout_all_received_ms,
                out.fanout_commit_ms
            );
            outln!(
                "(d) osd pool create, latency p50 / p99:  {:>10.2} / {:.2} ms",
                out.pool_create_p50_ms,
                out.pool_create_p99_ms
            );
            outln!(
                "(e) one OSD-map epoch of a {n}-OSD cluster reaches all {n} OSDs: {:.1} ms (commit {:.1} ms)",
                out.osdmap_epoch_all_received_ms,
                out.osdmap_epoch_commit_ms,
                n = out.osdmap_osds
            );
        }
    }
    Ok(())
}

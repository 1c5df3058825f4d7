//! How a client finds a monitor: three monitors in one process over the
//! in-memory network, and a client whose transport can black-hole an
//! address (a connect there never completes, as to a host that is gone).
//! A dead monitor must cost a command nothing while another one answers,
//! whatever the connect timeout; a session whose monitor dies moves to
//! another one, which remembers the dead one; `status` tells the quorum
//! from the leader's heartbeats, without asking the dead monitor.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal_mon::{Command, MonClient, Monitor, MonitorOptions, mkfs};
use shoal_net::{
    BoxListener, Incoming, Keyring, KeyringAuth, MemNetwork, Messenger, NetConfig, Stream,
    Transport,
};
use shoal_types::EntityName;

/// Long enough that waiting for it would fail the test (by the outer
/// bound) rather than pass slowly.
const FOREVER: Duration = Duration::from_secs(3600);
/// The outer bound of every step: it only fails a test whose client waits
/// on a dead monitor; the steps themselves take milliseconds.
const STEP_MAX: Duration = Duration::from_secs(60);

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The in-memory network, where connects to black-holed addresses never
/// complete.
#[derive(Clone, Default)]
struct BlackHoles {
    net: MemNetwork,
    holes: Arc<Mutex<BTreeSet<SocketAddr>>>,
}

impl Transport for BlackHoles {
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<Stream>> {
        let hole = self.holes.lock().unwrap().contains(&addr);
        if hole {
            return Box::pin(std::future::pending());
        }
        self.net.connect(addr)
    }
    fn bind(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<BoxListener>> {
        self.net.bind(addr)
    }
}

fn opts(data: PathBuf) -> MonitorOptions {
    MonitorOptions {
        data,
        net: NetConfig {
            reconnect_attempts: 1,
            connect_timeout: Duration::from_millis(300),
            ..NetConfig::default()
        },
        heartbeat: Duration::from_millis(50),
        election_timeout: Duration::from_millis(300),
        snapshot_every: 100,
        command_timeout: Duration::from_secs(10),
        ticket_ttl: Duration::from_secs(60),
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

struct Cluster {
    dir: PathBuf,
    net: BlackHoles,
    addrs: BTreeMap<String, SocketAddr>,
    mons: BTreeMap<String, Monitor>,
}

impl Cluster {
    async fn new(tag: &str) -> Cluster {
        let dir = std::env::temp_dir().join(format!("shoal-hunt-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let names = ["a", "b", "c"];
        let initial: BTreeMap<String, String> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.to_string(), format!("127.0.0.1:{}", 6789 + i)))
            .collect();
        let ring = mkfs(&dir.join("a"), "a", &initial, None, None).unwrap();
        for n in &names[1..] {
            mkfs(&dir.join(n), n, &initial, Some(&ring), None).unwrap();
        }
        let mut c = Cluster {
            dir,
            net: BlackHoles::default(),
            addrs: initial
                .iter()
                .map(|(n, a)| (n.clone(), a.parse().unwrap()))
                .collect(),
            mons: BTreeMap::new(),
        };
        for n in names {
            // The monitors talk over the plain network: only the client
            // meets the black holes.
            let m = Monitor::start(opts(c.dir.join(n)), Arc::new(c.net.net.clone()), None)
                .await
                .unwrap();
            c.mons.insert(n.to_string(), m);
        }
        c
    }

    /// An admin client that tries `order` first to last, with connect and
    /// command timeouts too long to wait for.
    fn admin(&self, order: &[&str]) -> MonClient {
        let me: EntityName = "client.admin".parse().unwrap();
        let ring = Keyring::load(&self.dir.join("a").join("keyring")).unwrap();
        let cfg = NetConfig {
            connect_timeout: FOREVER,
            ..NetConfig::default()
        };
        let msgr = Messenger::new(
            me.clone(),
            cfg,
            Arc::new(self.net.clone()),
            Arc::new(KeyringAuth::new(me, ring)),
            Arc::new(|_: Incoming| {}),
        );
        let addrs = order.iter().map(|n| self.addrs[*n]).collect();
        MonClient::new(msgr, addrs, FOREVER)
    }

    fn name_at(&self, addr: SocketAddr) -> String {
        self.addrs
            .iter()
            .find(|(_, a)| **a == addr)
            .map(|(n, _)| n.clone())
            .unwrap()
    }

    async fn stop(&mut self, name: &str) {
        if let Some(m) = self.mons.remove(name) {
            m.shutdown().await;
        }
    }

    async fn shutdown(mut self) {
        for n in ["a", "b", "c"] {
            self.stop(n).await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `cmd`, which must answer within the step bound.
async fn run(client: &MonClient, cmd: &Command) -> serde_json::Value {
    tokio::time::timeout(STEP_MAX, client.command(cmd))
        .await
        .expect("the client waited on a dead monitor")
        .unwrap()
}

/// Until `status` shows `want` as the quorum.
async fn quorum_becomes(client: &MonClient, want: &[&str]) -> serde_json::Value {
    let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    tokio::time::timeout(STEP_MAX, async {
        loop {
            if let Ok(s) = client.command(&Command::Status).await {
                let q: Vec<String> = s["quorum"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect();
                if !s["fsid"].as_str().unwrap_or("").is_empty() && q == want {
                    return s;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the quorum never became what was expected")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitor_that_never_answers_costs_a_command_nothing() {
    let mut c = Cluster::new("hole").await;
    quorum_becomes(&c.admin(&["b", "c"]), &["a", "b", "c"]).await;
    // mon.a is gone and its address swallows connects: a client that
    // asked it first, waiting for its connect timeout (an hour here),
    // would never get to the others.
    c.stop("a").await;
    c.net.holes.lock().unwrap().insert(c.addrs["a"]);
    let client = c.admin(&["a", "b", "c"]);
    let s = quorum_becomes(&client, &["b", "c"]).await;
    assert_eq!(s["health"]["status"], "HEALTH_WARN", "{s}");
    let down: Vec<&serde_json::Value> = s["monmap"]["mons"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["in_quorum"] == false)
        .collect();
    assert_eq!(down.len(), 1, "{s}");
    assert_eq!(down[0]["name"], "a");
    // A write too, and a new client each time (each hunts afresh).
    for i in 0..3 {
        let fresh = c.admin(&["a", "b", "c"]);
        run(
            &fresh,
            &Command::ConfigSet {
                who: "global".into(),
                key: "ms_request_timeout_ms".into(),
                value: (2000 + i).to_string(),
            },
        )
        .await;
        assert_ne!(fresh.session_addr(), Some(c.addrs["a"]));
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_session_monitor_dies_the_client_moves_on_and_remembers_it() {
    let mut c = Cluster::new("session").await;
    let client = c.admin(&["a", "b", "c"]);
    quorum_becomes(&client, &["a", "b", "c"]).await;
    let first = client.session_addr().expect("a session after a command");
    assert!(!client.remembers_dead(first));
    // Its monitor dies (it may be the leader: then the command also waits
    // for the election, inside the monitor it reaches next).
    let name = c.name_at(first);
    c.stop(&name).await;
    run(
        &client,
        &Command::ConfigSet {
            who: "global".into(),
            key: "log_level".into(),
            value: "debug".into(),
        },
    )
    .await;
    let next = client.session_addr().unwrap();
    assert_ne!(next, first);
    assert!(client.remembers_dead(first));
    assert!(!client.remembers_dead(next));
    // The dead monitor is out of the quorum as the leader sees it, and back
    // in once it returns.
    let rest: Vec<&str> = ["a", "b", "c"].into_iter().filter(|n| *n != name).collect();
    quorum_becomes(&client, &rest).await;
    let m = Monitor::start(opts(c.dir.join(&name)), Arc::new(c.net.net.clone()), None)
        .await
        .unwrap();
    c.mons.insert(name.clone(), m);
    quorum_becomes(&client, &["a", "b", "c"]).await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_monitor_says_it_has_no_quorum_and_the_client_reports_it() {
    let mut c = Cluster::new("lone").await;
    quorum_becomes(&c.admin(&["a", "b", "c"]), &["a", "b", "c"]).await;
    // Leave a follower alone; once it stops believing in its leader it can
    // only say it has no quorum.
    let leader = c.mons["a"].leader().await.unwrap();
    let lone = ["a", "b", "c"]
        .into_iter()
        .find(|n| shoal_mon::node_id(n) != leader)
        .unwrap();
    for n in ["a", "b", "c"].into_iter().filter(|n| *n != lone) {
        c.stop(n).await;
    }
    tokio::time::timeout(STEP_MAX, async {
        while c.mons[lone].leader().await.is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    let me: EntityName = "client.admin".parse().unwrap();
    let ring = Keyring::load(&c.dir.join("a").join("keyring")).unwrap();
    let msgr = Messenger::new(
        me.clone(),
        NetConfig::default(),
        Arc::new(c.net.clone()),
        Arc::new(KeyringAuth::new(me, ring)),
        Arc::new(|_: Incoming| {}),
    );
    let addrs = ["a", "b", "c"].iter().map(|n| c.addrs[*n]).collect();
    let client = MonClient::new(msgr, addrs, Duration::from_secs(4));
    let e = tokio::time::timeout(STEP_MAX, client.command(&Command::Status))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code, shoal_mon::ErrorCode::NoQuorum, "{}", e.message);
    assert!(e.message.contains("not in a quorum"), "{}", e.message);
    assert_eq!(client.session_addr(), None);
    c.shutdown().await;
}

//! Three monitors in one process over the in-memory network: bootstrap,
//! commands through any monitor, capabilities, leader loss, loss of quorum,
//! restart with identical state, and membership changes.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shoal_mon::{Command, ErrorCode, MonClient, Monitor, MonitorOptions, mkfs};
use shoal_net::{Incoming, Keyring, KeyringAuth, MemNetwork, Messenger, NetConfig, Secret};
use shoal_types::EntityName;

struct Cluster {
    dir: PathBuf,
    net: MemNetwork,
    initial: BTreeMap<String, String>,
    mons: BTreeMap<String, Monitor>,
}

fn opts(data: PathBuf) -> MonitorOptions {
    MonitorOptions {
        data,
        net: NetConfig {
            request_timeout: Duration::from_secs(2),
            reconnect_attempts: 1,
            connect_timeout: Duration::from_millis(300),
            ..NetConfig::default()
        },
        heartbeat: Duration::from_millis(100),
        election_timeout: Duration::from_millis(400),
        snapshot_every: 20,
        command_timeout: Duration::from_secs(3),
        ticket_ttl: Duration::from_secs(60),
        secret_rotation: Duration::from_secs(3600),
        failure_domain: "osd".into(),
        osdmap_history: 500,
        osdmap_full_interval: 100,
        osd: shoal_mon::OsdLiveness {
            min_down_reporters: 2,
            reporter_subtree_level: "host".into(),
            beacon_grace: Duration::from_millis(2000),
            report_expiry: Duration::from_secs(10),
            down_out_interval: Duration::from_millis(1000),
            batch_window: Duration::from_millis(100),
        },
        mgr_beacon_grace: Duration::from_secs(10),
        mds_beacon_grace: Duration::from_secs(10),
        full_ratios: shoal_mon::FullRatios::default(),
    }
}

impl Cluster {
    async fn new(tag: &str, names: &[&str]) -> Cluster {
        let dir = std::env::temp_dir().join(format!("shoal-quorum-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let initial: BTreeMap<String, String> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.to_string(), format!("127.0.0.1:{}", 6789 + i)))
            .collect();
        let first = names[0];
        let ring = mkfs(&dir.join(first), first, &initial, None, None).unwrap();
        for n in &names[1..] {
            mkfs(&dir.join(n), n, &initial, Some(&ring), None).unwrap();
        }
        let mut c = Cluster {
            dir,
            net: MemNetwork::new(),
            initial,
            mons: BTreeMap::new(),
        };
        for n in names {
            c.start(n).await;
        }
        c
    }

    async fn start(&mut self, name: &str) {
        let m = Monitor::start(opts(self.dir.join(name)), Arc::new(self.net.clone()), None)
            .await
            .unwrap();
        self.mons.insert(name.to_string(), m);
    }

    async fn stop(&mut self, name: &str) {
        if let Some(m) = self.mons.remove(name) {
            m.shutdown().await;
        }
    }

    fn keyring(&self) -> Keyring {
        let first = self.initial.keys().next().unwrap();
        Keyring::load(&self.dir.join(first).join("keyring")).unwrap()
    }

    fn client_as(&self, name: &str, keyring: Keyring) -> MonClient {
        let me: EntityName = name.parse().unwrap();
        let auth = Arc::new(KeyringAuth::new(me.clone(), keyring));
        let cfg = NetConfig {
            reconnect_attempts: 1,
            connect_timeout: Duration::from_millis(300),
            ..NetConfig::default()
        };
        let msgr = Messenger::new(
            me,
            cfg,
            Arc::new(self.net.clone()),
            auth,
            Arc::new(|_: Incoming| {}),
        );
        let addrs: Vec<SocketAddr> = self.initial.values().map(|a| a.parse().unwrap()).collect();
        MonClient::new(msgr, addrs, Duration::from_secs(6))
    }

    fn admin(&self) -> MonClient {
        self.client_as("client.admin", self.keyring())
    }

    async fn leader_name(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            for m in self.mons.values() {
                if let Some(id) = m.leader().await {
                    for (n, lm) in &self.mons {
                        if shoal_mon::node_id(n) == id && lm.leader().await == Some(id) {
                            return n.clone();
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no leader within 5 s");
    }
}

async fn wait_bootstrapped(c: &MonClient) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(s) = c.command(&Command::Status).await {
            if s["fsid"].as_str().is_some_and(|f| !f.is_empty()) {
                return s;
            }
        }
        assert!(Instant::now() < deadline, "cluster did not bootstrap");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates `name` with `mon_cap` through `admin`; returns its key and a
/// keyring holding it.
async fn new_entity(admin: &MonClient, name: &str, mon_cap: &str) -> (Secret, Keyring) {
    let v = admin
        .command(&Command::AuthGetOrCreate {
            entity: name.into(),
            caps: caps(mon_cap),
        })
        .await
        .unwrap();
    let key = Secret::from_base64(v[name]["key"].as_str().unwrap()).unwrap();
    let mut ring = Keyring::default();
    ring.insert(
        name.parse().unwrap(),
        shoal_net::KeyringEntry {
            key: key.clone(),
            caps: BTreeMap::new(),
        },
    );
    (key, ring)
}

fn caps(mon: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("mon".to_string(), mon.to_string())])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_commands_caps_failover_and_restart() {
    let mut c = Cluster::new("main", &["a", "b", "c"]).await;
    let admin = c.admin();
    let status = wait_bootstrapped(&admin).await;
    assert_eq!(status["health"]["status"], "HEALTH_OK", "{status}");
    assert_eq!(status["quorum"].as_array().unwrap().len(), 3);

    // Writes and reads through whichever monitor answers.
    let out = admin
        .command(&Command::AuthGetOrCreate {
            entity: "client.ro".into(),
            caps: caps("allow r"),
        })
        .await
        .unwrap();
    let key = out["client.ro"]["key"].as_str().unwrap().to_string();
    let again = admin
        .command(&Command::AuthGetOrCreate {
            entity: "client.ro".into(),
            caps: caps("allow *"),
        })
        .await
        .unwrap();
    assert_eq!(
        again["client.ro"]["key"],
        key.as_str(),
        "get-or-create made a new key"
    );
    let dup = admin
        .command(&Command::AuthAdd {
            entity: "client.ro".into(),
            caps: caps("allow r"),
        })
        .await
        .unwrap_err();
    assert_eq!(dup.code, ErrorCode::Exists);
    admin
        .command(&Command::ConfigSet {
            who: "osd.3".into(),
            key: "log_level".into(),
            value: "debug".into(),
        })
        .await
        .unwrap();
    let bad = admin
        .command(&Command::ConfigSet {
            who: "osd.3".into(),
            key: "log_levle".into(),
            value: "debug".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code, ErrorCode::InvalidArgument);
    let got = admin
        .command(&Command::ConfigGet {
            who: "osd.3".into(),
        })
        .await
        .unwrap();
    assert_eq!(got["log_level"]["value"], "debug");

    // The new entity authenticates with its key and may only read.
    let mut ro_ring = Keyring::default();
    ro_ring.insert(
        "client.ro".parse().unwrap(),
        shoal_net::KeyringEntry {
            key: Secret::from_base64(&key).unwrap(),
            caps: BTreeMap::new(),
        },
    );
    let ro = c.client_as("client.ro", ro_ring);
    ro.command(&Command::AuthLs).await.unwrap();
    let denied = ro
        .command(&Command::AuthRm {
            entity: "client.admin".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(denied.code, ErrorCode::PermissionDenied);
    assert!(
        denied.message.contains("client.ro lacks mon 'w'"),
        "{}",
        denied.message
    );
    // A stranger never gets past the handshake, and hears so at once
    // rather than hunting until its timeout.
    let mut fake = Keyring::default();
    fake.add_generated("client.admin".parse().unwrap());
    let impostor = c.client_as("client.admin", fake);
    let e = impostor.command(&Command::Status).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    assert!(
        e.message.contains("every monitor refused the connection")
            && e.message.contains("rejected"),
        "{}",
        e.message
    );

    // Lose the leader: a new one serves within 5 s.
    let leader = c.leader_name().await;
    c.stop(&leader).await;
    let t = Instant::now();
    admin
        .command(&Command::ConfigSet {
            who: "global".into(),
            key: "ms_request_timeout_ms".into(),
            value: "1234".into(),
        })
        .await
        .unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "failover took {:?}",
        t.elapsed()
    );
    let s = admin.command(&Command::Status).await.unwrap();
    assert_eq!(s["health"]["status"], "HEALTH_WARN", "{s}");

    // One monitor alone refuses changes, within the command timeout.
    let second = c.leader_name().await;
    c.stop(&second).await;
    let t = Instant::now();
    let e = admin
        .command(&Command::ConfigSet {
            who: "global".into(),
            key: "log_level".into(),
            value: "warn".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::NoQuorum, "{}", e.message);
    assert!(
        t.elapsed() < Duration::from_secs(8),
        "took {:?}",
        t.elapsed()
    );

    // Restart everything: all three agree on one state.
    let names: Vec<String> = c.initial.keys().cloned().collect();
    for n in &names {
        c.stop(n).await;
    }
    for n in &names {
        c.start(n).await;
    }
    let after = wait_bootstrapped(&admin).await;
    assert_eq!(after["fsid"], status["fsid"]);
    admin
        .command(&Command::AuthGet {
            entity: "client.ro".into(),
        })
        .await
        .unwrap();
    // Wait until every monitor has applied the same state.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let states: Vec<_> = c.mons.values().map(|m| m.state()).collect();
        if states.windows(2).all(|w| w[0] == w[1]) {
            assert_eq!(states[0].config["global"]["ms_request_timeout_ms"], "1234");
            break;
        }
        assert!(Instant::now() < deadline, "monitors disagree after restart");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for n in &names {
        c.stop(n).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitors_join_and_leave_at_runtime() {
    let mut c = Cluster::new("members", &["a"]).await;
    let admin = c.admin();
    wait_bootstrapped(&admin).await;
    // mon.b: made with the cluster's keyring, then added.
    let ring = c.dir.join("a").join("keyring");
    let mut k = Keyring::load(&ring).unwrap();
    k.add_generated("mon.b".parse().unwrap());
    let with_b = c.dir.join("keyring-b");
    k.save(&with_b).unwrap();
    admin
        .command(&Command::AuthAdd {
            entity: "mon.b".into(),
            caps: caps("allow *"),
        })
        .await
        .unwrap();
    // Use the key the monitors now hold for mon.b.
    let got = admin
        .command(&Command::AuthGet {
            entity: "mon.b".into(),
        })
        .await
        .unwrap();
    let key = Secret::from_base64(got["mon.b"]["key"].as_str().unwrap()).unwrap();
    k.insert(
        "mon.b".parse().unwrap(),
        shoal_net::KeyringEntry {
            key,
            caps: BTreeMap::new(),
        },
    );
    k.save(&with_b).unwrap();
    let mut initial = c.initial.clone();
    initial.insert("b".into(), "127.0.0.1:6800".into());
    mkfs(&c.dir.join("b"), "b", &initial, Some(&with_b), None).unwrap();
    c.start("b").await;
    admin
        .command(&Command::MonAdd {
            name: "b".into(),
            addr: "127.0.0.1:6800".into(),
        })
        .await
        .unwrap();
    let s = admin.command(&Command::MonStat).await.unwrap();
    assert_eq!(s["monmap"]["mons"].as_array().unwrap().len(), 2, "{s}");
    assert_eq!(s["monmap"]["epoch"], 2);
    // b has the whole state.
    let deadline = Instant::now() + Duration::from_secs(5);
    while c.mons["b"].state() != c.mons["a"].state() {
        assert!(Instant::now() < deadline, "mon.b did not catch up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    admin
        .command(&Command::MonRm { name: "b".into() })
        .await
        .unwrap();
    let s = admin.command(&Command::MonStat).await.unwrap();
    assert_eq!(s["monmap"]["mons"].as_array().unwrap().len(), 1, "{s}");
    let e = admin
        .command(&Command::MonRm { name: "a".into() })
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    c.stop("b").await;
    c.stop("a").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickets_for_osds_are_issued_to_entities_with_osd_caps() {
    let c = Cluster::new("tickets", &["a"]).await;
    let admin = c.admin();
    wait_bootstrapped(&admin).await;
    let mut all_caps = caps("allow r");
    all_caps.insert("osd".into(), "allow rw pool=images".into());
    let app = admin
        .command(&Command::AuthGetOrCreate {
            entity: "client.app".into(),
            caps: all_caps,
        })
        .await
        .unwrap();
    let app_key = Secret::from_base64(app["client.app"]["key"].as_str().unwrap()).unwrap();
    let osd = admin
        .command(&Command::AuthGetOrCreate {
            entity: "osd.0".into(),
            caps: caps("allow profile osd"),
        })
        .await
        .unwrap();
    let osd_key = Secret::from_base64(osd["osd.0"]["key"].as_str().unwrap()).unwrap();
    let ring = |name: &str, key: &Secret| {
        let mut k = Keyring::default();
        k.insert(
            name.parse().unwrap(),
            shoal_net::KeyringEntry {
                key: key.clone(),
                caps: BTreeMap::new(),
            },
        );
        k
    };
    let app_client = c.client_as("client.app", ring("client.app", &app_key));
    let osd_client = c.client_as("osd.0", ring("osd.0", &osd_key));
    // The leader makes the first service secret shortly after bootstrap.
    let deadline = Instant::now() + Duration::from_secs(5);
    let (sealed, session, expires) = loop {
        match app_client.ticket(&app_key, "osd").await {
            Ok(t) => break t,
            Err(e) if e.code == ErrorCode::Again && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert!(expires > shoal_net::now_ms());
    // The OSD checks it with the service secrets alone, and derives the
    // same session key the client unwrapped.
    let secrets = osd_client.service_secrets("osd").await.unwrap();
    let (ticket, osd_session) = secrets
        .open(&sealed, shoal_types::EntityType::Osd, shoal_net::now_ms())
        .unwrap();
    assert_eq!(ticket.entity.to_string(), "client.app");
    assert_eq!(ticket.caps, "allow rw pool=images");
    assert_eq!(osd_session, session);
    // The caps the ticket carries decide what the OSD lets it do.
    let osd_caps = shoal_mon::OsdCaps::parse(&ticket.caps).unwrap();
    osd_caps.check("client.app", "images", true).unwrap();
    let e = osd_caps.check("client.app", "rbd", false).unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    assert!(e.message.contains("may not read pool rbd"), "{}", e.message);
    // No osd caps, no ticket; only OSDs read the service secrets.
    let e = admin_without_osd_caps(&c, &admin).await;
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{}", e.message);
    let e = app_client.service_secrets("osd").await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    assert!(e.message.contains("only osd daemons"), "{}", e.message);
    for n in c.initial.keys().cloned().collect::<Vec<_>>() {
        c.mons[&n].shutdown().await;
    }
}

async fn admin_without_osd_caps(c: &Cluster, admin: &MonClient) -> shoal_mon::MonError {
    let (key, k) = new_entity(admin, "client.noosd", "allow r").await;
    let client = c.client_as("client.noosd", k);
    let e = client.ticket(&key, "osd").await.unwrap_err();
    assert!(
        e.message.contains("has no osd capabilities"),
        "{}",
        e.message
    );
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn central_config_reaches_its_daemon_and_survives_monitor_failover() {
    let mut c = Cluster::new("subs", &["a", "b", "c"]).await;
    let admin = c.admin();
    wait_bootstrapped(&admin).await;
    let (_, ring) = new_entity(&admin, "osd.3", "allow profile osd").await;
    let me: EntityName = "osd.3".parse().unwrap();
    let sink = shoal_mon::UpdateSink::new();
    let cfg = NetConfig {
        reconnect_attempts: 1,
        connect_timeout: Duration::from_millis(300),
        ..NetConfig::default()
    };
    let msgr = Messenger::new(
        me.clone(),
        cfg,
        Arc::new(c.net.clone()),
        Arc::new(KeyringAuth::new(me, ring)),
        sink.clone(),
    );
    let addrs: Vec<SocketAddr> = c.initial.values().map(|a| a.parse().unwrap()).collect();
    let osd = MonClient::new(msgr.clone(), addrs, Duration::from_secs(6));
    let mut sub = osd.subscribe("config", sink);

    async fn until(sub: &mut shoal_mon::Subscription, want: &[&str]) {
        let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let current = sub.borrow_and_update().clone();
            if let Some((_, v)) = current {
                let got: Vec<String> = serde_json::from_value(v).unwrap();
                if got == want {
                    return;
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "subscription never showed {want:?}");
            let _ = tokio::time::timeout(left, sub.changed()).await;
        }
    }

    until(&mut sub, &[]).await;
    let set = |who: &str, key: &str, value: &str| Command::ConfigSet {
        who: who.into(),
        key: key.into(),
        value: value.into(),
    };
    admin
        .command(&set("osd.3", "log_level", "debug"))
        .await
        .unwrap();
    until(&mut sub, &["log_level=debug"]).await;
    // Options for other daemons do not concern osd.3 ...
    admin
        .command(&set("osd.4", "log_level", "warn"))
        .await
        .unwrap();
    // ... but those for every OSD do, layered under its own.
    admin
        .command(&set("osd", "ms_reconnect_attempts", "2"))
        .await
        .unwrap();
    until(&mut sub, &["ms_reconnect_attempts=2", "log_level=debug"]).await;

    // Stop the monitor the subscription follows: it moves to another.
    let followed = msgr
        .connections()
        .into_iter()
        .find(|conn| conn.peer().name.ty() == shoal_types::EntityType::Mon)
        .map(|conn| conn.peer().name.id().to_string())
        .unwrap();
    c.stop(&followed).await;
    admin
        .command(&set("osd.3", "log_level", "trace"))
        .await
        .unwrap();
    until(&mut sub, &["ms_reconnect_attempts=2", "log_level=trace"]).await;
    for n in c.initial.keys().cloned().collect::<Vec<_>>() {
        c.stop(&n).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn osd_map_changes_and_subscribers_follow_them_by_incrementals() {
    let mut c = Cluster::new("osdmap", &["a", "b", "c"]).await;
    let admin = c.admin();
    wait_bootstrapped(&admin).await;
    let epoch = |v: &serde_json::Value| v["epoch"].as_u64().unwrap();
    let start = epoch(&admin.command(&Command::OsdStat).await.unwrap());

    // A subscriber at epoch 0 gets the full map first.
    let sink = shoal_mon::UpdateSink::new();
    let me: EntityName = "client.admin".parse().unwrap();
    let msgr = Messenger::new(
        me.clone(),
        NetConfig {
            reconnect_attempts: 1,
            connect_timeout: Duration::from_millis(300),
            ..NetConfig::default()
        },
        Arc::new(c.net.clone()),
        Arc::new(KeyringAuth::new(me, c.keyring())),
        sink.clone(),
    );
    let addrs: Vec<SocketAddr> = c.initial.values().map(|a| a.parse().unwrap()).collect();
    let follower = MonClient::new(msgr.clone(), addrs, Duration::from_secs(6));
    let mut sub = follower.subscribe_osdmap(sink);

    async fn follow_to(
        sub: &mut tokio::sync::watch::Receiver<Option<Arc<shoal_maps::OsdMap>>>,
        want: u64,
    ) -> Arc<shoal_maps::OsdMap> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(m) = sub.borrow_and_update().clone() {
                if u64::from(m.epoch.0) >= want {
                    return m;
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "subscriber never reached epoch {want}");
            let _ = tokio::time::timeout(left, sub.changed()).await;
        }
    }
    follow_to(&mut sub, start).await;

    let rep = |size, min_size| shoal_mon::PoolSpec::Replicated { size, min_size };
    let created = admin
        .command(&Command::PoolCreate {
            name: "rbd".into(),
            pg_num: 16,
            spec: rep(3, 2),
            set: Vec::new(),
        })
        .await
        .unwrap();
    assert_eq!(epoch(&created), start + 1);
    admin.command(&Command::OsdCreate).await.unwrap();
    admin
        .command(&Command::OsdIn { ids: vec![0] })
        .await
        .unwrap();
    admin
        .command(&Command::OsdFlag {
            flag: "noout".into(),
            on: true,
        })
        .await
        .unwrap();
    // Bad input: a clear error, and no new epoch.
    for bad in [
        Command::PoolCreate {
            name: "rbd".into(),
            pg_num: 16,
            spec: rep(3, 2),
            set: Vec::new(),
        },
        Command::PoolCreate {
            name: "zero".into(),
            pg_num: 0,
            spec: rep(3, 2),
            set: Vec::new(),
        },
        Command::PoolCreate {
            name: "small".into(),
            pg_num: 8,
            spec: rep(2, 3),
            set: Vec::new(),
        },
        Command::PoolCreate {
            name: "ec".into(),
            pg_num: 8,
            spec: shoal_mon::PoolSpec::Erasure {
                profile: "default".into(),
                rule: None,
            },
            set: Vec::new(),
        },
        Command::ErasureCodeProfileSet {
            name: "odd".into(),
            params: [("k".to_string(), "1".to_string())].into(),
            force: false,
        },
        Command::ErasureCodeProfileRm {
            name: "nope".into(),
        },
        Command::PoolRm {
            name: "nope".into(),
            sure: true,
        },
        Command::OsdOut { ids: vec![42] },
    ] {
        assert!(admin.command(&bad).await.is_err(), "{bad:?} was accepted");
    }
    let e = admin
        .command(&Command::PoolRm {
            name: "rbd".into(),
            sure: false,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::NeedsConfirmation);
    let stat = admin.command(&Command::OsdStat).await.unwrap();
    assert_eq!(epoch(&stat), start + 4, "{stat}");
    assert_eq!(stat["num_osds"], 1);
    assert_eq!(stat["num_in_osds"], 1);
    assert_eq!(stat["flags"][0], "noout");
    let health = admin.command(&Command::Health).await.unwrap();
    assert_eq!(health["status"], "HEALTH_WARN", "{health}");
    let codes: Vec<&str> = health["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["code"].as_str())
        .collect();
    assert_eq!(codes, ["OSD_DOWN", "OSDMAP_FLAGS"], "{health}");
    assert_eq!(health["checks"][0]["detail"][0], "osd.0 is down");

    // The subscriber applied the same changes, by incrementals.
    let m = follow_to(&mut sub, start + 4).await;
    assert_eq!(m.pool_by_name("rbd").unwrap().pg_num, 16);
    assert!(m.exists(0));
    let where_ = admin
        .command(&Command::OsdMap {
            pool: "rbd".into(),
            object: "foo".into(),
            namespace: String::new(),
        })
        .await
        .unwrap();
    assert_eq!(where_["raw_pgid"], "1.7fc1f406");
    assert_eq!(where_["pgid"], "1.6");

    // Peering's past intervals come in their binary encoding and agree
    // with the operator's `pg past-intervals`.
    let pg = shoal_maps::PgId {
        pool: m.pool_by_name("rbd").unwrap().id,
        seed: 6,
    };
    let now = m.epoch.0;
    let bin = admin.past_intervals(pg, 1, now).await.unwrap();
    let json = admin
        .command(&Command::PgPastIntervals {
            pgid: pg.to_string(),
            since: 1,
        })
        .await
        .unwrap();
    assert_eq!(json["from"].as_u64(), Some(u64::from(bin.from)), "{json}");
    let listed = json["intervals"].as_array().unwrap();
    assert!(!bin.intervals.is_empty());
    assert_eq!(listed.len(), bin.intervals.len(), "{json}");
    for (j, i) in listed.iter().zip(&bin.intervals) {
        assert_eq!(j["first"].as_u64(), Some(u64::from(i.first)));
        assert_eq!(j["last"].as_u64(), Some(u64::from(i.last)));
        assert_eq!(j["primary"].as_i64(), Some(i64::from(i.primary)));
        assert_eq!(j["maybe_went_rw"].as_bool(), Some(i.maybe_went_rw));
        let acting: Vec<i64> = i.acting.iter().map(|o| i64::from(*o)).collect();
        assert_eq!(j["acting"], serde_json::json!(acting));
    }
    // Without mon read caps: refused.
    let (_, ring) = new_entity(&admin, "client.nocaps", "").await;
    let e = c
        .client_as("client.nocaps", ring)
        .past_intervals(pg, 1, now)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{e}");
    // An epoch no monitor has reached: an error saying so, not an answer
    // from an older map (each monitor waits its command timeout).
    let e = admin.past_intervals(pg, 1, now + 1000).await.unwrap_err();
    assert!(e.message.contains("has not reached epoch"), "{e}");

    // Its monitor goes away: it continues from another, with no gap.
    let followed = msgr
        .connections()
        .into_iter()
        .find(|conn| conn.peer().name.ty() == shoal_types::EntityType::Mon)
        .map(|conn| conn.peer().name.id().to_string())
        .unwrap();
    c.stop(&followed).await;
    admin
        .command(&Command::PoolRename {
            from: "rbd".into(),
            to: "images".into(),
        })
        .await
        .unwrap();
    let m = follow_to(&mut sub, start + 5).await;
    assert!(m.pool_by_name("images").is_some());
    for n in c.initial.keys().cloned().collect::<Vec<_>>() {
        c.stop(&n).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn osd_boot_failure_reports_beacons_auto_out_and_return() {
    let c = Cluster::new("life", &["a", "b", "c"]).await;
    let admin = c.admin();
    wait_bootstrapped(&admin).await;
    let start = admin.command(&Command::OsdStat).await.unwrap()["epoch"]
        .as_u64()
        .unwrap();
    let mut osds = Vec::new();
    for id in 0..4 {
        let name = format!("osd.{id}");
        let (_, ring) = new_entity(&admin, &name, "allow profile osd").await;
        osds.push(c.client_as(&name, ring));
    }
    let boot = |id: i32| Command::OsdBoot {
        id,
        addr: format!("127.0.0.1:{}", 6800 + id),
        host: format!("h{}", id / 2),
        weight: 0x10000,
        nonce: 0,
    };
    // Four OSDs boot at once: they share (at most two) epochs.
    let mut joins = Vec::new();
    for (id, client) in osds.iter().enumerate() {
        let client = client.clone();
        let cmd = boot(id as i32);
        joins.push(tokio::spawn(async move { client.command(&cmd).await }));
    }
    for j in joins {
        j.await.unwrap().unwrap();
    }
    let stat = admin.command(&Command::OsdStat).await.unwrap();
    assert_eq!(
        (
            stat["num_osds"].as_u64(),
            stat["num_up_osds"].as_u64(),
            stat["num_in_osds"].as_u64()
        ),
        (Some(4), Some(4), Some(4))
    );
    let epochs = stat["epoch"].as_u64().unwrap() - start;
    assert!(epochs <= 2, "4 boots took {epochs} epochs");
    let tree = admin.command(&Command::OsdTree).await.unwrap();
    let names: Vec<&str> = tree["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["name"].as_str())
        .collect();
    // default, then each host followed by its two OSDs (hosts in boot order).
    assert_eq!(names[0], "default");
    for host in ["h0", "h1"] {
        let at = names.iter().position(|n| *n == host).unwrap();
        let mut under: Vec<&str> = names[at + 1..at + 3].to_vec();
        under.sort_unstable();
        let want = if host == "h0" {
            ["osd.0", "osd.1"]
        } else {
            ["osd.2", "osd.3"]
        };
        assert_eq!(under, want, "{names:?}");
    }
    // An OSD may only speak for itself.
    let e = osds[1].command(&boot(0)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);

    // Beacons from osd.0-2; osd.3 stays silent.
    let beaconers: Vec<(i32, MonClient)> = (0..3).map(|i| (i, osds[i as usize].clone())).collect();
    let beating = tokio::spawn(async move {
        loop {
            for (id, c) in &beaconers {
                let _ = c.command(&Command::OsdBeacon { id: *id }).await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    let state_of = |v: &serde_json::Value, id: i64| {
        let o = v["osds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["osd"] == id)
            .cloned()
            .unwrap();
        (o["up"] == true, o["in"] == true)
    };
    async fn until(
        admin: &MonClient,
        what: &str,
        ok: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(8);
        loop {
            let v = admin.command(&Command::OsdDump).await.unwrap();
            if ok(&v) {
                return v;
            }
            assert!(Instant::now() < deadline, "never saw: {what}: {v}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let report = |target: i32, reporter: i32, immediate: bool| Command::OsdFailure {
        target,
        reporter,
        immediate,
    };
    // One reporter subtree is not enough ...
    osds[1].command(&report(0, 1, false)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let v = admin.command(&Command::OsdDump).await.unwrap();
    assert_eq!(
        state_of(&v, 0),
        (true, true),
        "one host's report marked osd.0 down"
    );
    // ... a second host's is.
    osds[2].command(&report(0, 2, false)).await.unwrap();
    until(&admin, "osd.0 down", |v| !state_of(v, 0).0).await;
    // A refused connection counts at once.
    osds[2].command(&report(1, 2, true)).await.unwrap();
    until(&admin, "osd.1 down", |v| !state_of(v, 1).0).await;
    // No beacons: osd.3 goes down by itself; then everything down is marked out.
    let v = until(&admin, "osd.3 down and out, osd.0 and 1 out", |v| {
        !state_of(v, 3).0 && !state_of(v, 3).1 && !state_of(v, 0).1 && !state_of(v, 1).1
    })
    .await;
    assert!(
        state_of(&v, 2).0 && state_of(&v, 2).1,
        "osd.2 was disturbed: {v}"
    );
    // With noout, a down OSD stays in.
    admin
        .command(&Command::OsdFlag {
            flag: "noout".into(),
            on: true,
        })
        .await
        .unwrap();
    osds[1].command(&report(2, 1, true)).await.unwrap();
    until(&admin, "osd.2 down", |v| !state_of(v, 2).0).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let v = admin.command(&Command::OsdDump).await.unwrap();
    assert_eq!(
        state_of(&v, 2),
        (false, true),
        "noout did not keep osd.2 in"
    );
    // A returning OSD that was marked out automatically comes back in.
    osds[0].command(&boot(0)).await.unwrap();
    let v = admin.command(&Command::OsdDump).await.unwrap();
    assert_eq!(state_of(&v, 0), (true, true));
    beating.abort();
    for n in c.initial.keys().cloned().collect::<Vec<_>>() {
        c.mons[&n].shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn osds_report_pg_stats_and_admins_read_pg_dump_and_df() {
    let c = Cluster::new("pgstats", &["a", "b", "c"]).await;
    let admin = c.admin();
    wait_bootstrapped(&admin).await;
    let mut osds = Vec::new();
    for id in 0..2 {
        let name = format!("osd.{id}");
        let (_, ring) = new_entity(&admin, &name, "allow profile osd").await;
        let client = c.client_as(&name, ring);
        client
            .command(&Command::OsdBoot {
                id,
                addr: format!("127.0.0.1:{}", 6800 + id),
                host: format!("h{id}"),
                weight: 0x10000,
                nonce: 0,
            })
            .await
            .unwrap();
        osds.push(client);
    }
    let beaconers = osds.clone();
    let beating = tokio::spawn(async move {
        loop {
            for (id, c) in beaconers.iter().enumerate() {
                let _ = c.command(&Command::OsdBeacon { id: id as i32 }).await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    admin
        .command(&Command::PoolCreate {
            name: "rbd".into(),
            pg_num: 4,
            spec: shoal_mon::PoolSpec::Replicated {
                size: 2,
                min_size: 1,
            },
            set: Vec::new(),
        })
        .await
        .unwrap();
    let dump = admin.command(&Command::PgDump).await.unwrap();
    let epoch = dump["epoch"].as_u64().unwrap() as u32;
    let pgs = dump["pg_stats"].as_array().unwrap().clone();
    assert_eq!(pgs.len(), 4);
    assert!(pgs.iter().all(|p| p["state"] == "unknown"), "{dump}");

    // Each OSD reports the PGs it is primary of.
    let statfs = shoal_mon::OsdStatfs {
        total_bytes: 1 << 30,
        used_bytes: 1 << 20,
        available_bytes: (1 << 30) - (1 << 20),
    };
    for (id, client) in osds.iter().enumerate() {
        let mine: Vec<shoal_mon::PgStatReport> = pgs
            .iter()
            .filter(|p| p["acting_primary"] == id)
            .map(|p| shoal_mon::PgStatReport {
                pgid: p["pgid"].as_str().unwrap().into(),
                state: "active+clean".into(),
                objects: 3,
                bytes: 3 << 10,
                version: format!("{epoch}'3"),
                up: serde_json::from_value(p["up"].clone()).unwrap(),
                acting: serde_json::from_value(p["acting"].clone()).unwrap(),
                log_size: 3,
                ..Default::default()
            })
            .collect();
        let cmd = Command::OsdPgStats {
            id: id as i32,
            epoch,
            statfs: statfs.clone(),
            pgs: mine,
        };
        client.command(&cmd).await.unwrap();
    }
    let dump = admin.command(&Command::PgDump).await.unwrap();
    assert_eq!(
        dump["epoch"].as_u64(),
        Some(u64::from(epoch)),
        "a report made an epoch"
    );
    for p in dump["pg_stats"].as_array().unwrap() {
        assert_eq!(p["state"], "active+clean", "{dump}");
        assert_eq!(p["objects"], 3);
    }
    let stat = admin.command(&Command::PgStat).await.unwrap();
    assert_eq!(stat["num_pg_by_state"][0]["num"], 4, "{stat}");
    assert_eq!(stat["num_objects"], 12);
    let df: shoal_monclient::replies::DfReply = admin.command_as(&Command::Df).await.unwrap();
    assert_eq!(df.stats.total_bytes, 2u64 << 30, "{df:?}");
    assert_eq!(df.pools[0].stats.stored, 12 << 10);
    assert_eq!(df.pools[0].stats.bytes_used, 24 << 10);
    let health = admin.command(&Command::Health).await.unwrap();
    assert_eq!(health["status"], "HEALTH_OK", "{health}");

    // Only osd.ID may report for osd.ID.
    let as_osd0 = Command::OsdPgStats {
        id: 0,
        epoch,
        statfs,
        pgs: vec![],
    };
    for who in [&osds[1], &admin] {
        let e = who.command(&as_osd0).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::PermissionDenied, "{e:?}");
    }
    // A degraded PG warns.
    let first = &dump["pg_stats"][0];
    let primary = first["acting_primary"].as_i64().unwrap() as usize;
    let degraded = Command::OsdPgStats {
        id: primary as i32,
        epoch,
        statfs: shoal_mon::OsdStatfs::default(),
        pgs: vec![shoal_mon::PgStatReport {
            pgid: first["pgid"].as_str().unwrap().into(),
            state: "active+undersized+degraded".into(),
            up: serde_json::from_value(first["up"].clone()).unwrap(),
            acting: serde_json::from_value(first["acting"].clone()).unwrap(),
            ..Default::default()
        }],
    };
    osds[primary].command(&degraded).await.unwrap();
    let health = admin.command(&Command::Health).await.unwrap();
    assert_eq!(health["checks"][0]["code"], "PG_DEGRADED", "{health}");
    beating.abort();
    for n in c.initial.keys().cloned().collect::<Vec<_>>() {
        c.mons[&n].shutdown().await;
    }
}

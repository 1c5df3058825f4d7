//! An erasure-coded pool (3+2 across five OSDs on MemStores, in one
//! process) through the client library: random data ops checked against
//! a model of each object, ranged reads, xattrs, and omap refused; then
//! an OSD stops (reads decode around its shards, writes go on with four),
//! comes back and has its shards rebuilt by decoding, so that with two
//! others stopped (min_size lowered to k) every object still reads whole.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shoal_client::{Client, ClientOptions, Error, Op, Pool};
use shoal_monclient::{Command, PoolSpec};
use shoal_testkit::{Cluster, MON, net_cfg};

/// Creates profile `name` with `settings` and an EC pool `pool` from it,
/// taking partial overwrites; returns the pool's id.
async fn ec_pool(c: &Cluster, name: &str, settings: &[(&str, &str)], pool: &str) -> u64 {
    let params = settings
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    c.command(Command::ErasureCodeProfileSet {
        name: name.into(),
        params,
        force: false,
    })
    .await;
    let v = c
        .command(Command::PoolCreate {
            name: pool.into(),
            pg_num: 8,
            spec: PoolSpec::Erasure {
                profile: name.into(),
                rule: None,
            },
            set: Vec::new(),
        })
        .await;
    c.command(Command::PoolSet {
        name: pool.into(),
        key: "allow_ec_overwrites".into(),
        value: "true".into(),
    })
    .await;
    v["id"].as_u64().unwrap()
}

async fn admin(c: &Cluster) -> Client {
    let mut o = ClientOptions::new(
        vec![MON.parse().unwrap()],
        "client.admin".parse().unwrap(),
        c.admin_key.clone(),
    );
    o.net = net_cfg();
    o.transport = Arc::new(c.net.clone());
    o.op_timeout = Duration::from_secs(30);
    Client::connect(o).await.unwrap()
}

/// A deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let seed = self.next();
        (0..n)
            .map(|i| (seed.wrapping_mul(i as u64 + 1) >> 7) as u8)
            .collect()
    }
}

/// The PG statistics of pool `pool` as the monitors last heard of them.
async fn pool_pgs(c: &Cluster, pool: u64) -> Vec<serde_json::Value> {
    let v = c.command(Command::PgDump).await;
    let prefix = format!("{pool}.");
    v["pg_stats"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["pgid"].as_str().is_some_and(|id| id.starts_with(&prefix)))
        .cloned()
        .collect()
}

/// The states of pool `pool`'s PGs.
async fn pg_states(c: &Cluster, pool: u64) -> Vec<String> {
    let pgs = pool_pgs(c, pool).await;
    pgs.iter()
        .map(|p| p["state"].as_str().unwrap_or("").to_string())
        .collect()
}

async fn wait_states(c: &Cluster, pool: u64, what: &str, ok: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let states = pg_states(c, pool).await;
        if !states.is_empty() && states.iter().all(|s| ok(s)) {
            return;
        }
        assert!(Instant::now() < deadline, "PGs not {what}: {states:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Random changes to `objects` objects, each checked against the model
/// and read back in random ranges.
async fn churn(pool: &Pool, model: &mut BTreeMap<String, Vec<u8>>, rng: &mut Rng, ops: usize) {
    for _ in 0..ops {
        let name = format!("obj{}", rng.below(6));
        let cur = model.get(&name).cloned();
        let size = cur.as_ref().map_or(0, Vec::len) as u64;
        match rng.below(7) {
            0 => {
                let n = rng.below(40_000) as usize;
                let d = rng.bytes(n);
                pool.write_full(&name, d.clone()).await.unwrap();
                model.insert(name.clone(), d);
            }
            1 | 2 => {
                let off = rng.below(size + 5000);
                let n = 1 + rng.below(9000) as usize;
                let d = rng.bytes(n);
                pool.write(&name, off, d.clone()).await.unwrap();
                let m = model.entry(name.clone()).or_default();
                let end = off as usize + d.len();
                if m.len() < end {
                    m.resize(end, 0);
                }
                m[off as usize..end].copy_from_slice(&d);
            }
            3 => {
                let n = rng.below(6000) as usize;
                let d = rng.bytes(n);
                pool.append(&name, d.clone()).await.unwrap();
                model.entry(name.clone()).or_default().extend_from_slice(&d);
            }
            4 if cur.is_some() => {
                let to = rng.below(size + 3000);
                pool.truncate(&name, to).await.unwrap();
                if let Some(m) = model.get_mut(&name) {
                    m.resize(to as usize, 0);
                }
            }
            5 if cur.is_some() => {
                let off = rng.below(size);
                let len = rng.below(12_000);
                pool.zero(&name, off, len).await.unwrap();
                if let Some(m) = model.get_mut(&name) {
                    let end = ((off + len) as usize).min(m.len());
                    m[off as usize..end].fill(0);
                }
            }
            6 if cur.is_some() && rng.below(4) == 0 => {
                pool.remove(&name).await.unwrap();
                model.remove(&name);
            }
            _ => {}
        }
        // A random range of a random object reads as the model says.
        let name = format!("obj{}", rng.below(6));
        match model.get(&name) {
            Some(m) => {
                let off = rng.below(m.len() as u64 + 100);
                let len = rng.below(20_000);
                let got = pool.read(&name, off, len).await.unwrap();
                let from = (off as usize).min(m.len());
                let to = match len {
                    0 => m.len(),
                    n => (off as usize + n as usize).min(m.len()),
                };
                assert_eq!(&got[..], &m[from..to.max(from)], "{name} [{off}, +{len})");
            }
            None => assert!(matches!(
                pool.read(&name, 0, 0).await,
                Err(Error::NotFound(_))
            )),
        }
    }
}

async fn check_all(pool: &Pool, model: &BTreeMap<String, Vec<u8>>) {
    for (name, want) in model {
        let got = pool.read(name, 0, 0).await.unwrap();
        assert_eq!(got.len(), want.len(), "{name}");
        assert!(got[..] == want[..], "{name} differs");
        assert_eq!(pool.stat(name).await.unwrap().size, want.len() as u64);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erasure_coded_pool_serves_decodes_and_heals() {
    let mut c = Cluster::with_pool_and_stores("client-ec", 5, 3, 4, 1 << 30).await;
    let settings = [("k", "3"), ("m", "2"), ("crush-failure-domain", "osd")];
    let pool_id = ec_pool(&c, "three-two", &settings, "ec").await;
    wait_states(&c, pool_id, "active+clean", |s| s == "active+clean").await;
    let client = admin(&c).await;
    let pool = client.pool("ec").unwrap();

    // Every data op against a model, with ranged reads.
    let mut model = BTreeMap::new();
    let mut rng = Rng(0x5eed_0fec);
    churn(&pool, &mut model, &mut rng, 150).await;
    check_all(&pool, &model).await;
    // Xattrs live on every shard; omap is refused.
    pool.write_full("meta", &b"m"[..]).await.unwrap();
    pool.setxattr("meta", "color", &b"blue"[..]).await.unwrap();
    assert_eq!(&pool.getxattr("meta", "color").await.unwrap()[..], b"blue");
    let e = pool
        .operate("meta", Op::new().omap_set(&[("k", &b"v"[..])]))
        .await
        .unwrap_err();
    assert!(matches!(e.error, Error::NotSupported(_)), "{e:?}");
    model.insert("meta".into(), b"m".to_vec());

    // One OSD stops: its PGs go on with four shards (min_size 4), reads
    // decode around the missing one.
    let store = c.stop_osd(1).await;
    c.wait_up(4).await;
    wait_states(&c, pool_id, "active with four", |s| s.starts_with("active")).await;
    check_all(&pool, &model).await;
    churn(&pool, &mut model, &mut rng, 80).await;
    check_all(&pool, &model).await;

    // It returns: the shards it missed are rebuilt by decoding.
    c.start_osd(1, store).await;
    c.wait_up(5).await;
    wait_states(&c, pool_id, "active+clean again", |s| s == "active+clean").await;
    // With two others down (and min_size lowered to k), every object
    // still reads whole: the three shards left include osd.1's rebuilt one.
    c.command(Command::PoolSet {
        name: "ec".into(),
        key: "min_size".into(),
        value: "3".into(),
    })
    .await;
    let _three = c.stop_osd(3).await;
    let _four = c.stop_osd(4).await;
    c.wait_up(3).await;
    wait_states(&c, pool_id, "active on three", |s| s.starts_with("active")).await;
    check_all(&pool, &model).await;
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_scrub_finds_a_flipped_bit_in_one_shard_and_repair_rebuilds_it() {
    let mut c = Cluster::with_pool_and_stores("client-ec-scrub", 3, 3, 4, 1 << 30).await;
    let settings = [("k", "2"), ("m", "1"), ("crush-failure-domain", "osd")];
    let pool_id = ec_pool(&c, "two-one", &settings, "ec").await;
    wait_states(&c, pool_id, "active+clean", |s| s == "active+clean").await;
    let client = admin(&c).await;
    let pool = client.pool("ec").unwrap();
    let body: Vec<u8> = (0..50_000u32).map(|i| (i * 31 % 251) as u8).collect();
    pool.write_full("victim", body.clone()).await.unwrap();

    // Flip a bit in data shard 1 of the object, behind its checksum's back
    // (the OSD stopped, its store changed, the OSD started again).
    let map = client.map().unwrap();
    let p = map.pool(pool_id).unwrap().clone();
    let pg = p.object_pg("victim", "");
    let acting = map.pg_to_up_acting(pg).unwrap().acting;
    let victim_osd = acting[1];
    let key = shoal_osd::object::object_key(&p, "", "victim").unwrap();
    let coll = shoal_objectstore::CollectionId::shard(pg.pool, pg.seed, 1);
    let flip = async |c: &mut Cluster| {
        let store = c.stop_osd(victim_osd).await;
        {
            use shoal_objectstore::ObjectStore;
            let mut b = store.read(&coll, &key, 4096 + 7, 1).unwrap().to_vec();
            b[0] ^= 0x20;
            let mut t = shoal_objectstore::Transaction::new();
            t.write(coll, key.clone(), 4096 + 7, b.into());
            store.apply_transaction(t).unwrap();
        }
        c.start_osd(victim_osd, store).await;
        c.wait_up(3).await;
        wait_states(c, pool_id, "active+clean", |s| {
            s.starts_with("active+clean")
        })
        .await;
    };
    flip(&mut c).await;
    // Deep scrub names the object and the member; repair rebuilds it.
    let t = Duration::from_secs(30);
    let v = client.pg_command(pg, "deep-scrub", t).await.unwrap();
    assert_eq!(v["errors"], 1, "{v}");
    assert_eq!(v["inconsistent"][0]["object"], "victim", "{v}");
    assert_eq!(v["inconsistent"][0]["bad"][0], victim_osd, "{v}");
    assert!(
        v["inconsistent"][0]["why"]
            .as_str()
            .unwrap()
            .contains("stripe 1"),
        "{v}"
    );
    let v = client.pg_command(pg, "repair", t).await.unwrap();
    assert_eq!(v["repaired"], 1, "{v}");
    let v = client.pg_command(pg, "deep-scrub", t).await.unwrap();
    assert_eq!(v["errors"], 0, "{v}");

    // Damaged again: a read decodes around the bad chunk and has the PG
    // repair it, unasked.
    flip(&mut c).await;
    assert!(pool.read("victim", 0, 0).await.unwrap()[..] == body[..]);
    let started = Instant::now();
    loop {
        let v = client.pg_command(pg, "deep-scrub", t).await.unwrap();
        if v["errors"] == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never repaired: {v}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The rebuilt shard is good: with another member down, the object
    // decodes from it.
    c.command(Command::PoolSet {
        name: "ec".into(),
        key: "min_size".into(),
        value: "2".into(),
    })
    .await;
    let other = acting.iter().copied().find(|o| *o != victim_osd).unwrap();
    let _gone = c.stop_osd(other).await;
    c.wait_up(2).await;
    wait_states(&c, pool_id, "active on two", |s| s.starts_with("active")).await;
    assert!(pool.read("victim", 0, 0).await.unwrap()[..] == body[..]);
    client.shutdown().await;
}

/// Every object of `kept`'s models reads at its snapshot as it was then
/// (an object made after it is absent there).
async fn check_snapshots(pool: &Pool, kept: &[(u64, BTreeMap<String, Vec<u8>>)]) {
    for (snap, model) in kept {
        let at = pool.at_snap(*snap);
        for i in 0..6 {
            let name = format!("obj{i}");
            match model.get(&name) {
                Some(want) => {
                    let got = at.read(&name, 0, 0).await.unwrap();
                    assert!(got[..] == want[..], "{name}@{snap} differs");
                    assert_eq!(at.stat(&name).await.unwrap().size, want.len() as u64);
                }
                None => assert!(
                    matches!(at.read(&name, 0, 0).await, Err(Error::NotFound(_))),
                    "{name}@{snap} exists"
                ),
            }
        }
    }
}

/// Takes a snapshot of `model`'s objects (kept in `kept`): the pool to
/// write under it.
async fn snapshot(
    pool: &Pool,
    model: &BTreeMap<String, Vec<u8>>,
    kept: &mut Vec<(u64, BTreeMap<String, Vec<u8>>)>,
) -> Pool {
    let s = pool.selfmanaged_snap_create().await.unwrap();
    kept.push((s, model.clone()));
    pool.with_snap_context(shoal_client::SnapContext {
        seq: s,
        snaps: kept.iter().rev().map(|(s, _)| *s).collect(),
    })
}

/// Objects of pool `pool` the monitors count (heads and clones).
async fn pool_objects(c: &Cluster, pool: u64) -> u64 {
    let pgs = pool_pgs(c, pool).await;
    pgs.iter().map(|p| p["objects"].as_u64().unwrap_or(0)).sum()
}

/// Snapshot objects (clones, snapdirs) in pool `pool`'s shards on every
/// running OSD.
fn family_objects(c: &Cluster, pool: u64) -> usize {
    use shoal_objectstore::{ObjectKey, ObjectStore};
    let mut n = 0;
    for (_, store) in c.osds.values() {
        for coll in store.list_collections().unwrap() {
            if coll.pool != pool {
                continue;
            }
            let listing = store.list_objects(&coll, None, 100_000).unwrap();
            n += listing
                .objects
                .iter()
                .filter(|k| k.snap != ObjectKey::HEAD && k.name.first() != Some(&0))
                .count();
        }
    }
    n
}

/// Every shard of each PG of pool `pool` holds the same clones and
/// snapdirs (by object and snapshot).
fn families_agree(c: &Cluster, pool: u64) {
    use shoal_objectstore::{ObjectKey, ObjectStore};
    type Family = std::collections::BTreeSet<(u32, Vec<u8>, u64)>;
    let mut by_pg: BTreeMap<u32, Vec<(i32, u8, Family)>> = BTreeMap::new();
    for (osd, (_, store)) in &c.osds {
        for coll in store.list_collections().unwrap() {
            if coll.pool != pool {
                continue;
            }
            let listing = store.list_objects(&coll, None, 100_000).unwrap();
            let family: Family = listing
                .objects
                .into_iter()
                .filter(|k| k.snap != ObjectKey::HEAD && k.name.first() != Some(&0))
                .map(|k| (k.hash, k.name, k.snap))
                .collect();
            by_pg
                .entry(coll.seed)
                .or_default()
                .push((*osd, coll.shard, family));
        }
    }
    for (seed, shards) in by_pg {
        for (osd, shard, f) in &shards {
            assert_eq!(
                f, &shards[0].2,
                "pg {pool}.{seed:x}: shard {shard} on osd.{osd} differs from shard {} on osd.{}",
                shards[0].1, shards[0].0
            );
        }
    }
}

/// Snapshots of an erasure-coded pool: the first write after a snapshot
/// clones every shard's chunks; reads at each snapshot decode its clones
/// while an OSD is down, after it returns (its shards' clones rebuilt
/// with the heads the log says it missed) and with another one down; a
/// removed snapshot's clones are trimmed on every shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_of_an_erasure_coded_pool_clone_every_shard_recover_and_trim() {
    let mut c = Cluster::with_pool_and_stores("client-ec-snaps", 4, 3, 4, 1 << 30).await;
    let settings = [("k", "2"), ("m", "1"), ("crush-failure-domain", "osd")];
    let pool_id = ec_pool(&c, "two-one", &settings, "ec").await;
    c.command(Command::PoolSet {
        name: "ec".into(),
        key: "min_size".into(),
        value: "2".into(),
    })
    .await;
    wait_states(&c, pool_id, "active+clean", |s| s == "active+clean").await;
    let client = admin(&c).await;
    let pool = client.pool("ec").unwrap();
    let mut model = BTreeMap::new();
    let mut rng = Rng(0x5eed_5a95);
    churn(&pool, &mut model, &mut rng, 30).await;
    let mut kept = Vec::new();
    let w = snapshot(&pool, &model, &mut kept).await;
    churn(&w, &mut model, &mut rng, 40).await;
    check_snapshots(&pool, &kept).await;
    check_all(&pool, &model).await;
    assert!(family_objects(&c, pool_id) > 0, "no clone was made");

    // An OSD stops: snapshots and writes go on with two shards.
    let store = c.stop_osd(1).await;
    c.wait_up(3).await;
    wait_states(&c, pool_id, "active with two", |s| s.starts_with("active")).await;
    let w = snapshot(&pool, &model, &mut kept).await;
    churn(&w, &mut model, &mut rng, 40).await;
    check_snapshots(&pool, &kept).await;
    // It returns: the heads it missed come back with their clones.
    c.start_osd(1, store).await;
    c.wait_up(4).await;
    wait_states(&c, pool_id, "active+clean", |s| s == "active+clean").await;
    families_agree(&c, pool_id);
    // Another stops: reads decode from osd.1's rebuilt shards too.
    let other = c.stop_osd(2).await;
    c.wait_up(3).await;
    wait_states(&c, pool_id, "active again", |s| s.starts_with("active")).await;
    check_snapshots(&pool, &kept).await;
    check_all(&pool, &model).await;
    c.start_osd(2, other).await;
    c.wait_up(4).await;
    wait_states(&c, pool_id, "active+clean", |s| s == "active+clean").await;

    // The first snapshot goes: the second still reads as it was.
    let (first, _) = kept.remove(0);
    pool.selfmanaged_snap_remove(first).await.unwrap();
    wait_states(&c, pool_id, "trimmed", |s| s == "active+clean").await;
    check_snapshots(&pool, &kept).await;
    // The second goes: only heads are left, on every shard.
    let (second, _) = kept.remove(0);
    pool.selfmanaged_snap_remove(second).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let objects = pool_objects(&c, pool_id).await;
        let family = family_objects(&c, pool_id);
        if objects == model.len() as u64 && family == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{objects} objects counted for {} heads, {family} snapshot objects left",
            model.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    check_all(&pool, &model).await;
    client.shutdown().await;
}

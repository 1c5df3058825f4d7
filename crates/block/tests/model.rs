//! The image against a model: an in-memory byte array of the image's size
//! (what was never written is zeros). Seeded random reads, writes,
//! discards, write-zeroes, resizes, snapshots (rollbacks, removals, reads
//! at them) and reopenings, on small objects so that I/O spans several;
//! after each seed the object map must cover every data object that exists
//! and the image must read whole as the model. The same runs, and so do
//! clones, with the data objects in an erasure-coded pool. Also the exclusive
//! lock: an exclusive owner refuses a second writer clearly, a cooperative
//! one hands the lock over after its writes, a vanished owner's lock is
//! broken once its watch lapses; and errors name the pool and image.
//!
//! `SHOAL_BLOCK_SEEDS=N` runs N seeds per pool kind (default 6).

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use shoal_block::format::{OBJECT_EXISTS, data_object, object_map_object};
use shoal_block::{CreateOptions, Error, Image, rbd};
use shoal_client::{Client, ClientOptions, Pool};
use shoal_monclient::{Command, PoolSpec};
use shoal_testkit::{Cluster, MON, net_cfg};

async fn client(c: &Cluster) -> Client {
    let mut o = ClientOptions::new(
        vec![MON.parse().unwrap()],
        "client.admin".parse().unwrap(),
        c.admin_key.clone(),
    );
    o.net = net_cfg();
    o.transport = Arc::new(c.net.clone());
    o.op_timeout = Duration::from_secs(30);
    o.watch_timeout = Duration::from_secs(3);
    Client::connect(o).await.unwrap()
}

async fn ec_pool(c: &Cluster, name: &str) {
    c.command(Command::ErasureCodeProfileSet {
        name: "p21".into(),
        params: [("k", "2"), ("m", "1")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        force: false,
    })
    .await;
    c.command(Command::PoolCreate {
        name: name.into(),
        pg_num: 4,
        spec: PoolSpec::Erasure {
            profile: "p21".into(),
            rule: None,
        },
        set: Vec::new(),
    })
    .await;
    c.command(Command::PoolSet {
        name: name.into(),
        key: "allow_ec_overwrites".into(),
        value: "true".into(),
    })
    .await;
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
        let seed = self.next() | 1;
        (0..n)
            .map(|i| (seed.wrapping_mul(i as u64 + 7) >> 13) as u8 | 1)
            .collect()
    }
}

/// A random range within `size`, biased to object boundaries.
fn range(rng: &mut Rng, size: u64, obj: u64) -> (u64, u64) {
    if size == 0 {
        return (0, 0);
    }
    let off = match rng.below(3) {
        0 => rng.below(size / obj + 1) * obj,
        _ => rng.below(size),
    }
    .min(size);
    let max = size - off;
    let len = match rng.below(4) {
        0 => max,
        1 => rng.below(obj * 3).min(max),
        _ => rng.below(obj / 2 + 1).min(max),
    };
    (off, len)
}

async fn check_object_map(pool: &Pool, data: &Pool, image: &Image) {
    let h = image.header();
    let map = pool
        .read(&object_map_object(image.id()), 0, 0)
        .await
        .unwrap();
    assert_eq!(map.len() as u64, h.object_count(), "object map length");
    for objno in 0..h.object_count() {
        let exists = data.stat(&data_object(image.id(), objno)).await.is_ok();
        if exists {
            assert_eq!(
                map[objno as usize], OBJECT_EXISTS,
                "object {objno} exists but the map says it does not"
            );
        }
    }
    // Nothing past the end.
    let past = data.stat(&data_object(image.id(), h.object_count())).await;
    assert!(
        past.is_err(),
        "a data object past the end survived a shrink"
    );
}

async fn run_seed(pool: &Pool, data: &Pool, data_pool: Option<&str>, seed: u64) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let order = 12 + rng.below(3) as u8;
    let obj = 1u64 << order;
    let name = format!("model-{seed}-{}", data_pool.is_some());
    let size0 = obj * (1 + rng.below(6)) + rng.below(obj);
    let opts = CreateOptions {
        order,
        data_pool: data_pool.map(String::from),
        ..CreateOptions::default()
    };
    rbd::create(pool, &name, size0, &opts).await.unwrap();
    let mut model = vec![0u8; size0 as usize];
    let mut image = Image::open(pool, &name).await.unwrap();
    let mut snaps: Vec<(String, Vec<u8>)> = Vec::new();
    for step in 0..60 {
        let size = model.len() as u64;
        match rng.below(10) {
            0..=3 => {
                let (off, len) = range(&mut rng, size, obj);
                let d = rng.bytes(len as usize);
                image.write(off, Bytes::from(d.clone())).await.unwrap();
                model[off as usize..(off + len) as usize].copy_from_slice(&d);
            }
            4 => {
                let (off, len) = range(&mut rng, size, obj);
                image.discard(off, len).await.unwrap();
                model[off as usize..(off + len) as usize].fill(0);
            }
            5 => {
                let (off, len) = range(&mut rng, size, obj);
                image.write_zeroes(off, len).await.unwrap();
                model[off as usize..(off + len) as usize].fill(0);
            }
            6 => {
                let to = match rng.below(2) {
                    0 => rng.below(size + 1),
                    _ => size + rng.below(obj * 3),
                };
                image.resize(to).await.unwrap();
                model.resize(to as usize, 0);
                assert_eq!(image.size(), to);
            }
            8 => {
                let s = format!("s{step}");
                image.snap_create(&s).await.unwrap();
                snaps.push((s, model.clone()));
            }
            9 if !snaps.is_empty() => {
                let k = rng.below(snaps.len() as u64) as usize;
                let (s, at) = snaps[k].clone();
                match rng.below(4) {
                    0 => {
                        image.snap_rollback(&s).await.unwrap();
                        model = at;
                    }
                    1 => {
                        image.snap_remove(&s).await.unwrap();
                        snaps.remove(k);
                    }
                    _ => {
                        let view = Image::open_snap(pool, &name, &s).await.unwrap();
                        assert_eq!(view.size(), at.len() as u64);
                        let got = view.read(0, at.len() as u64).await.unwrap();
                        assert!(
                            got[..] == at[..],
                            "seed {seed} step {step}: snapshot {s} differs"
                        );
                    }
                }
            }
            7 => {
                image.flush().await.unwrap();
                image.close().await.unwrap();
                image = Image::open(pool, &name).await.unwrap();
                assert_eq!(
                    image.size(),
                    model.len() as u64,
                    "step {step}: size after reopen"
                );
            }
            _ => {}
        }
        let (off, len) = range(&mut rng, model.len() as u64, obj);
        let got = image.read(off, len).await.unwrap();
        assert!(
            got[..] == model[off as usize..(off + len) as usize],
            "seed {seed} step {step}: [{off}, +{len}) differs"
        );
        let past = image.read(model.len() as u64, 1).await;
        assert!(matches!(past, Err(Error::OutOfRange { .. })), "{past:?}");
    }
    let whole = image.read(0, model.len() as u64).await.unwrap();
    assert!(
        whole[..] == model[..],
        "seed {seed}: the whole image differs"
    );
    for (s, at) in &snaps {
        let view = Image::open_snap(pool, &name, s).await.unwrap();
        let got = view.read(0, at.len() as u64).await.unwrap();
        assert!(
            got[..] == at[..],
            "seed {seed}: snapshot {s} differs at the end"
        );
    }
    for (s, _) in &snaps {
        image.snap_remove(s).await.unwrap();
    }
    // A reader without the lock (no object map) sees the same.
    let reader = Image::open_read_only(pool, &name).await.unwrap();
    let whole = reader.read(0, model.len() as u64).await.unwrap();
    assert!(
        whole[..] == model[..],
        "seed {seed}: a reader sees otherwise"
    );
    assert!(matches!(
        reader.write(0, Bytes::from_static(b"x")).await,
        Err(Error::ReadOnly(_))
    ));
    check_object_map(pool, data, &image).await;
    let du = image.du().await.unwrap();
    assert_eq!(du.provisioned, model.len() as u64);
    let nonzero_bytes = model.iter().filter(|b| **b != 0).count() as u64;
    assert!(du.used >= nonzero_bytes, "{du:?} < {nonzero_bytes} bytes");
    // Every byte of data lies in an allocated range.
    let mut at = 0usize;
    for (o, n) in image.allocated(0, model.len() as u64).await.unwrap() {
        assert!(
            model[at..o as usize].iter().all(|b| *b == 0),
            "seed {seed}: data outside the allocated ranges before {o}"
        );
        at = (o + n) as usize;
    }
    assert!(
        model[at..].iter().all(|b| *b == 0),
        "seed {seed}: data past the allocated ranges"
    );
    let nonzero_objects = model
        .chunks(obj as usize)
        .filter(|c| c.iter().any(|b| *b != 0))
        .count() as u64;
    assert!(du.objects >= nonzero_objects, "{du:?} < {nonzero_objects}");
    image.close().await.unwrap();
    rbd::remove(pool, &name).await.unwrap();
    assert!(matches!(
        Image::open(pool, &name).await,
        Err(Error::NoImage { .. })
    ));
}

fn seeds() -> u64 {
    std::env::var("SHOAL_BLOCK_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_match_the_model_on_replicated_and_erasure_coded_data_pools() {
    let c = Cluster::with_pool("block-model", 3, 2, 8).await;
    ec_pool(&c, "ecdata").await;
    let client = client(&c).await;
    let pool = client.pool("rbd").unwrap();
    let ec = client.pool("ecdata").unwrap();
    for seed in 0..seeds() {
        run_seed(&pool, &pool, None, seed).await;
        run_seed(&pool, &ec, Some("ecdata"), seed).await;
    }
    assert!(rbd::list(&pool).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_writer_at_a_time_and_clear_errors() {
    let c = Cluster::with_pool("block-lock", 3, 2, 4).await;
    ec_pool(&c, "ecdata").await;
    let a = client(&c).await;
    let b = client(&c).await;
    let pa = a.pool("rbd").unwrap();
    let pb = b.pool("rbd").unwrap();
    rbd::create(&pa, "disk", 1 << 20, &CreateOptions::default())
        .await
        .unwrap();
    let e = rbd::create(&pa, "disk", 1 << 20, &CreateOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, Error::ImageExists { .. }), "{e}");
    assert!(e.to_string().contains("disk") && e.to_string().contains("rbd"));

    let ia = Image::open(&pa, "disk").await.unwrap();
    let ib = Image::open(&pb, "disk").await.unwrap();
    ia.set_exclusive(true);
    ia.write(0, Bytes::from_static(b"first")).await.unwrap();
    assert!(ia.owns_lock());
    // An exclusive owner keeps the lock: the second writer fails, clearly.
    let e = ib
        .write(0, Bytes::from_static(b"second"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Locked { .. }), "{e}");
    assert!(e.to_string().contains("disk"), "{e}");
    assert!(matches!(ib.resize(10).await, Err(Error::Locked { .. })));
    // Reading needs no lock.
    assert_eq!(&ib.read(0, 5).await.unwrap()[..], b"first");
    // Removal is refused while the image is open for writing.
    let e = rbd::remove(&pb, "disk").await.unwrap_err();
    assert!(matches!(e, Error::Busy { .. }), "{e}");
    // A cooperative owner gives the lock up when asked, after its writes.
    ia.set_exclusive(false);
    ib.write(0, Bytes::from_static(b"second")).await.unwrap();
    assert!(ib.owns_lock() && !ia.owns_lock());
    assert_eq!(&ia.read(0, 6).await.unwrap()[..], b"second");
    // And takes it back the same way.
    ia.write(6, Bytes::from_static(b"!")).await.unwrap();
    assert!(ia.owns_lock() && !ib.owns_lock());
    assert_eq!(&ib.read(0, 7).await.unwrap()[..], b"second!");
    ia.close().await.unwrap();
    ib.close().await.unwrap();

    // An owner that vanishes without closing: its watch times out and the
    // next writer breaks its lock.
    let dead = client(&c).await;
    let pd = dead.pool("rbd").unwrap();
    let id = Image::open(&pd, "disk").await.unwrap();
    id.set_exclusive(true);
    id.write(0, Bytes::from_static(b"third")).await.unwrap();
    dead.shutdown().await;
    std::mem::forget(id);
    let ic = Image::open(&pb, "disk").await.unwrap();
    let t0 = std::time::Instant::now();
    ic.write(0, Bytes::from_static(b"fourth")).await.unwrap();
    assert!(t0.elapsed() >= Duration::from_secs(2), "broken too soon");
    assert_eq!(&ic.read(0, 6).await.unwrap()[..], b"fourth");
    ic.close().await.unwrap();

    // Rename, list, info.
    rbd::rename(&pa, "disk", "disk2").await.unwrap();
    let names: Vec<String> = rbd::list(&pa)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec!["disk2".to_string()]);
    let i = Image::open(&pa, "disk2").await.unwrap();
    assert_eq!(&i.read(0, 6).await.unwrap()[..], b"fourth");
    let info = i.info();
    assert_eq!(info.size, 1 << 20);
    assert_eq!(info.object_size, 4 << 20);
    i.close().await.unwrap();

    // Errors name what is missing or wrong.
    let e = Image::open(&pa, "nope").await.unwrap_err();
    assert_eq!(e.to_string(), "image nope does not exist in pool rbd");
    let e = rbd::create(
        &pa,
        "x",
        1,
        &CreateOptions {
            data_pool: Some("nopool".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("nopool"), "{e}");
    let ec = a.pool("ecdata").unwrap();
    let e = rbd::create(&ec, "x", 1, &CreateOptions::default())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("erasure-coded"), "{e}");
    let e = rbd::create(
        &pa,
        "x",
        1,
        &CreateOptions {
            order: 30,
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
}

/// One random change of `image` (a write, discard, write-zeroes or
/// resize), made to `model` too.
async fn random_change(rng: &mut Rng, image: &Image, model: &mut Vec<u8>, obj: u64) {
    let size = model.len() as u64;
    let (off, len) = range(rng, size, obj);
    match rng.below(8) {
        0..=3 => {
            let d = rng.bytes(len as usize);
            image.write(off, Bytes::from(d.clone())).await.unwrap();
            model[off as usize..(off + len) as usize].copy_from_slice(&d);
        }
        4 => {
            image.discard(off, len).await.unwrap();
            model[off as usize..(off + len) as usize].fill(0);
        }
        5 => {
            image.write_zeroes(off, len).await.unwrap();
            model[off as usize..(off + len) as usize].fill(0);
        }
        6 => {
            let to = size - rng.below(obj * 2).min(size);
            image.resize(to).await.unwrap();
            model.resize(to as usize, 0);
        }
        _ => {
            let to = size + rng.below(obj * 2);
            image.resize(to).await.unwrap();
            model.resize(to as usize, 0);
        }
    }
}

/// `image` reads whole as `model`, and every non-zero byte lies in what
/// it says is allocated.
async fn check_image(image: &Image, model: &[u8], what: &str) {
    let size = model.len() as u64;
    assert_eq!(image.size(), size, "{what}: size");
    let got = image.read(0, size).await.unwrap();
    if got[..] != model[..] {
        let at = got.iter().zip(model).position(|(a, b)| a != b).unwrap();
        panic!("{what}: byte {at} reads {} not {}", got[at], model[at]);
    }
    let allocated = image.allocated(0, size).await.unwrap();
    for (at, b) in model.iter().enumerate() {
        let at = at as u64;
        if *b != 0 {
            assert!(
                allocated.iter().any(|(o, n)| at >= *o && at < o + n),
                "{what}: byte {at} holds data but is not allocated in {allocated:?}"
            );
        }
    }
}

/// Clones: a clone reads its parent's snapshot until it writes its own
/// data (copy-up keeps the rest of each object), shrinking lowers what
/// it reads through, a snapshot of the clone keeps reading through, a
/// clone of that snapshot reads through two parents, and flattening cuts
/// the clone loose; a snapshot with clones cannot be unprotected, and
/// `children` names them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clones_read_through_copy_up_and_flatten() {
    let c = Cluster::with_pool("block-clone", 3, 2, 8).await;
    ec_pool(&c, "ecdata").await;
    let client = client(&c).await;
    let pool = client.pool("rbd").unwrap();
    let runs = (0..seeds().div_ceil(2)).flat_map(|s| [(s, None), (s, Some("ecdata"))]);
    for (seed, data_pool) in runs {
        let mut rng = Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1);
        let order = 12 + rng.below(2) as u8;
        let obj = 1u64 << order;
        let tag = data_pool.unwrap_or("");
        let (parent, child, grand) = (
            format!("parent{seed}{tag}"),
            format!("child{seed}{tag}"),
            format!("grand{seed}{tag}"),
        );
        let size = obj * (2 + rng.below(5)) + rng.below(obj);
        let opts = CreateOptions {
            order,
            data_pool: data_pool.map(String::from),
            ..CreateOptions::default()
        };
        rbd::create(&pool, &parent, size, &opts).await.unwrap();
        let p = Image::open(&pool, &parent).await.unwrap();
        let mut pmodel = vec![0u8; size as usize];
        for _ in 0..12 {
            random_change(&mut rng, &p, &mut pmodel, obj).await;
        }
        p.snap_create("base").await.unwrap();
        let at_base = pmodel.clone();
        // Only a protected snapshot is cloned.
        let e = shoal_block::layering::clone(&pool, &parent, "base", &pool, &child, &opts)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("not protected"), "{e}");
        p.snap_protect("base", true).await.unwrap();
        shoal_block::layering::clone(&pool, &parent, "base", &pool, &child, &opts)
            .await
            .unwrap();
        let ch = Image::open(&pool, &child).await.unwrap();
        let mut cmodel = at_base.clone();
        check_image(&ch, &cmodel, "a fresh clone").await;
        assert_eq!(
            ch.info_full().await.unwrap().overlap,
            Some(at_base.len() as u64)
        );
        // The parent goes on changing; the clone does not see it.
        for _ in 0..8 {
            random_change(&mut rng, &p, &mut pmodel, obj).await;
        }
        let mut at_cs = None;
        for step in 0..30 {
            random_change(&mut rng, &ch, &mut cmodel, obj).await;
            if step % 6 == 5 {
                check_image(&ch, &cmodel, &format!("clone at step {step}")).await;
            }
            if step == 15 {
                ch.snap_create("cs").await.unwrap();
                at_cs = Some(cmodel.clone());
            }
        }
        let at_cs = at_cs.unwrap();
        check_image(&ch, &cmodel, "the clone").await;
        check_image(&p, &pmodel, "the parent").await;
        let kids = shoal_block::layering::children(&pool, &parent, "base")
            .await
            .unwrap();
        let names: Vec<&str> = kids.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, [child.as_str()]);
        let e = p.snap_protect("base", false).await.unwrap_err();
        assert!(
            matches!(e, Error::Busy { .. }) && e.to_string().contains(&child),
            "{e}"
        );

        // A clone of the clone's snapshot reads through both.
        ch.snap_protect("cs", true).await.unwrap();
        shoal_block::layering::clone(&pool, &child, "cs", &pool, &grand, &opts)
            .await
            .unwrap();
        let g = Image::open(&pool, &grand).await.unwrap();
        let mut gmodel = at_cs.clone();
        check_image(&g, &gmodel, "a clone of a clone").await;
        for _ in 0..6 {
            random_change(&mut rng, &g, &mut gmodel, obj).await;
        }
        check_image(&g, &gmodel, "a clone of a clone, changed").await;

        // Flattened, the clone holds its own data; its snapshot still
        // reads through to the parent, so the parent keeps it as a child.
        ch.flatten().await.unwrap();
        assert_eq!(ch.header().parent, None);
        check_image(&ch, &cmodel, "the flattened clone").await;
        let cs = Image::open_snap(&pool, &child, "cs").await.unwrap();
        check_image(&cs, &at_cs, "the clone's snapshot after flattening").await;
        assert!(p.snap_protect("base", false).await.is_err());
        g.flatten().await.unwrap();
        check_image(&g, &gmodel, "the flattened clone of a clone").await;
        ch.snap_protect("cs", false).await.unwrap();
        ch.snap_remove("cs").await.unwrap();
        // Nothing refers to the parent's snapshot any more.
        assert!(
            shoal_block::layering::children(&pool, &parent, "base")
                .await
                .unwrap()
                .is_empty()
        );
        p.snap_protect("base", false).await.unwrap();
        p.snap_remove("base").await.unwrap();
        check_image(&ch, &cmodel, "the clone, its parent's snapshot gone").await;
        check_image(&g, &gmodel, "the grandchild, its parent's snapshot gone").await;
        for (i, name) in [(g, &grand), (ch, &child), (p, &parent)] {
            i.close().await.unwrap();
            rbd::remove(&pool, name).await.unwrap();
        }
    }
    assert!(rbd::list(&pool).await.unwrap().is_empty());
}

use fjall::{Config, PartitionCreateOptions, PersistMode};
use std::time::Instant;
fn main() {
    let dir = std::env::args().nth(1).unwrap();
    let p = format!("{dir}/fjall.db");
    let _ = std::fs::remove_dir_all(&p);
    let ks = Config::new(&p).open().unwrap();
    let tb = ks.open_partition("meta", PartitionCreateOptions::default()).unwrap();
    let rec = vec![7u8; 200];
    let ext = vec![9u8; 4096];
    let n = 1000;
    let t = Instant::now();
    for i in 0..n {
        let mut b = ks.batch();
        for j in 0..3u32 { let k = format!("o{:08}{j}", i); b.insert(&tb, k.as_bytes(), rec.as_slice()); }
        let k = format!("d{:08}", i); b.insert(&tb, k.as_bytes(), ext.as_slice());
        b.commit().unwrap();
        ks.persist(PersistMode::SyncAll).unwrap();
    }
    let e = t.elapsed();
    println!("fjall durable commits: {n} in {:?} => {:.0} us/commit", e, e.as_micros() as f64 / n as f64);
    let t = Instant::now();
    for bn in 0..100 {
        let mut b = ks.batch();
        for j in 0..1000u32 { let k = format!("b{:04}{:06}", bn, j); b.insert(&tb, k.as_bytes(), rec.as_slice()); }
        b.commit().unwrap(); ks.persist(PersistMode::SyncAll).unwrap();
    }
    let e = t.elapsed();
    println!("fjall bulk 100k keys in 100 durable batches: {:?} => {:.0} keys/s", e, 100_000.0 / e.as_secs_f64());
    let t = Instant::now();
    let mut hits = 0; for i in 0..100_000u32 { let k = format!("b{:04}{:06}", (i * 7919) % 100, i % 1000); if tb.get(k.as_bytes()).unwrap().is_some() { hits += 1; } }
    println!("fjall 100k point reads: {:?} (hits {hits})", t.elapsed());
    let t = Instant::now(); let c = tb.iter().count();
    println!("fjall full scan {c} keys: {:?}", t.elapsed());
    drop(tb); drop(ks);
    let t = Instant::now(); let ks = Config::new(&p).open().unwrap(); let _tb = ks.open_partition("meta", PartitionCreateOptions::default()).unwrap();
    println!("fjall reopen: {:?}", t.elapsed());
}

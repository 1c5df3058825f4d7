use redb::{Database, Durability, ReadableTable, TableDefinition};

// Usage: kvbench-redb DIR  (the database is created as DIR/redb.db)
use std::time::Instant;
const T: TableDefinition<&[u8], &[u8]> = TableDefinition::new("meta");
fn main() {
    let dir = std::env::args().nth(1).unwrap();
    let p = format!("{dir}/redb.db");
    let _ = std::fs::remove_file(&p);
    let db = Database::create(&p).unwrap();
    let rec = vec![7u8; 200];
    let ext = vec![9u8; 4096];
    // durable small commits: 4 keys, one 4 KiB deferred value each
    let n = 1000;
    let t = Instant::now();
    for i in 0..n {
        let mut tx = db.begin_write().unwrap();
        tx.set_durability(Durability::Immediate);
        {
            let mut tb = tx.open_table(T).unwrap();
            for j in 0..3u32 { let k = format!("o{:08}{j}", i); tb.insert(k.as_bytes(), rec.as_slice()).unwrap(); }
            let k = format!("d{:08}", i); tb.insert(k.as_bytes(), ext.as_slice()).unwrap();
        }
        tx.commit().unwrap();
    }
    let e = t.elapsed();
    println!("redb durable commits: {n} in {:?} => {:.0} us/commit", e, e.as_micros() as f64 / n as f64);
    println!("  file after small commits: {} KiB", std::fs::metadata(&p).unwrap().len() / 1024);
    // bulk: 100 batches of 1000 keys
    let t = Instant::now();
    for b in 0..100 {
        let mut tx = db.begin_write().unwrap();
        tx.set_durability(Durability::Immediate);
        { let mut tb = tx.open_table(T).unwrap();
          for j in 0..1000u32 { let k = format!("b{:04}{:06}", b, j); tb.insert(k.as_bytes(), rec.as_slice()).unwrap(); } }
        tx.commit().unwrap();
    }
    let e = t.elapsed();
    println!("redb bulk 100k keys in 100 durable batches: {:?} => {:.0} keys/s", e, 100_000.0 / e.as_secs_f64());
    println!("  file after bulk: {} KiB", std::fs::metadata(&p).unwrap().len() / 1024);
    // steady state: overwrite the same 3 records + delete deferred, as the store does
    let t = Instant::now();
    for i in 0..1000 {
        let mut tx = db.begin_write().unwrap();
        tx.set_durability(Durability::Immediate);
        { let mut tb = tx.open_table(T).unwrap();
          for j in 0..3u32 { let k = format!("s{j}"); tb.insert(k.as_bytes(), rec.as_slice()).unwrap(); }
          let k = format!("e{:08}", i); tb.insert(k.as_bytes(), ext.as_slice()).unwrap();
          if i > 0 { let k = format!("e{:08}", i - 1); tb.remove(k.as_bytes()).unwrap(); } }
        tx.commit().unwrap();
    }
    println!("redb steady-state overwrite commits: 1000 in {:?}; file {} KiB", t.elapsed(), std::fs::metadata(&p).unwrap().len() / 1024);
    let t = Instant::now();
    let rt = db.begin_read().unwrap(); let tb = rt.open_table(T).unwrap();
    let mut hits = 0; for i in 0..100_000u32 { let k = format!("b{:04}{:06}", (i * 7919) % 100, i % 1000); if tb.get(k.as_bytes()).unwrap().is_some() { hits += 1; } }
    let e = t.elapsed();
    println!("redb 100k point reads: {:?} (hits {hits})", e);
    let t = Instant::now(); let c = tb.range::<&[u8]>(..).unwrap().count();
    println!("redb full scan {c} keys: {:?}", t.elapsed());
    drop(tb); drop(rt); drop(db);
    let t = Instant::now(); let db = Database::create(&p).unwrap(); drop(db);
    println!("redb reopen: {:?}; file size {} KiB", t.elapsed(), std::fs::metadata(&p).unwrap().len() / 1024);
}

//! The conformance suite against MemStore.

use shoal_objectstore::{MemStore, ObjectStore, testsuite};

#[test]
fn memstore_conforms() {
    testsuite::run_all(&mut || Box::new(MemStore::new(1 << 30)) as Box<dyn ObjectStore>);
}

#[test]
fn memstore_model_many_seeds() {
    for seed in 0..20 {
        testsuite::model_check(&MemStore::new(1 << 30), seed, 200);
    }
}

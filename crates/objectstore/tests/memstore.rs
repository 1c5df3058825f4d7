//! The conformance suite against MemStore and CrashStore.

use std::sync::Arc;

use shoal_objectstore::{CrashStore, MemStore, ObjectStore, testsuite};

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

/// A CrashStore with a committer thread (the simulation's group commit),
/// which ends when the test drops the store.
fn committed_crashstore() -> Box<dyn ObjectStore> {
    let store = Arc::new(CrashStore::new(1 << 30));
    let weak = Arc::downgrade(&store);
    std::thread::spawn(move || {
        while let Some(s) = weak.upgrade() {
            s.commit();
            drop(s);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
    Box::new(store)
}

#[test]
fn crashstore_conforms() {
    testsuite::run_all(&mut committed_crashstore);
}

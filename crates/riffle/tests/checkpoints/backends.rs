//! The state-backend conformance suite on the heap (its own reference: the suite's checks hold)
//! and on an in-memory key-value store, which takes the store path every embedded backend
//! takes: state tables over a byte store, store checkpoints uploaded next to operator state,
//! key-group ranges copied on a rescaling restore.

use std::sync::Arc;

use riffle::state::HeapBackend;
use riffle::testing::MemoryKvBackend;
use riffle::testing::conformance::check_backend;

#[test]
fn the_heap_backend_passes_the_conformance_suite() {
    let work = tempfile::tempdir().unwrap();
    check_backend(Arc::new(HeapBackend), work.path());
}

#[test]
fn a_key_value_store_backend_passes_the_conformance_suite() {
    let work = tempfile::tempdir().unwrap();
    check_backend(Arc::new(MemoryKvBackend), work.path());
}

//! The state-backend conformance suite on the heap (its own reference: the suite's checks hold)
//! and on an in-memory key-value store, which takes the store path every embedded backend
//! takes: state tables over a byte store, store checkpoints uploaded next to operator state,
//! key-group ranges copied on a rescaling restore.

use std::sync::Arc;

use riffle::state::HeapBackend;
use riffle::testing::MemoryKvBackend;
use riffle_testing::conformance::check_backend;

#[test]
fn the_heap_backend_passes_the_conformance_suite() {
    let work = tempfile::tempdir().unwrap();
    check_backend(Arc::new(HeapBackend), work.path());
}

#[test]
fn a_key_value_store_backend_passes_the_conformance_suite() {
    let work = tempfile::tempdir().unwrap();
    check_backend(Arc::new(MemoryKvBackend), work.path());
    // The store's immutable files went to the shared directory, referenced by the checkpoints.
    let shared = work.path().join("recovery/chk/conformance/shared");
    let files = walk(&shared);
    assert!(
        files.iter().any(|f| f.ends_with(".sst")),
        "no shared store files under {}",
        shared.display()
    );
    // A savepoint holds its store files itself.
    let savepoint = walk(&work.path().join("rescale-2/savepoint"));
    assert!(
        savepoint.iter().any(|f| f.ends_with(".sst")),
        "{savepoint:?}"
    );
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().is_dir() {
            files.extend(walk(&entry.path()));
        } else {
            files.push(entry.path().to_string_lossy().into_owned());
        }
    }
    files
}

#[test]
fn a_savepoint_survives_a_changed_state_type_on_the_heap() {
    let work = tempfile::tempdir().unwrap();
    riffle_testing::evolution::check_state_evolution(Arc::new(HeapBackend), work.path());
}

#[test]
fn a_savepoint_survives_a_changed_state_type_in_a_key_value_store() {
    let work = tempfile::tempdir().unwrap();
    riffle_testing::evolution::check_state_evolution(Arc::new(MemoryKvBackend), work.path());
}

#[test]
fn a_savepoint_of_windows_survives_a_changed_accumulator_on_the_heap() {
    let work = tempfile::tempdir().unwrap();
    riffle_testing::evolution::check_window_state_evolution(Arc::new(HeapBackend), work.path());
}

#[test]
fn a_savepoint_of_windows_survives_a_changed_accumulator_in_a_key_value_store() {
    let work = tempfile::tempdir().unwrap();
    riffle_testing::evolution::check_window_state_evolution(Arc::new(MemoryKvBackend), work.path());
}

//! The state-backend conformance suite on RocksDB: windows, sessions, keyed process state and
//! timers, rolling aggregates, recovery from a failure and a rescaling restore give exactly the
//! heap backend's output; every stateful operator survives a checkpoint in the operator harness.

use std::sync::Arc;

use riffle_rocksdb::RocksDbBackend;

#[test]
fn rocksdb_gives_the_heap_backends_output() {
    let work = tempfile::tempdir().unwrap();
    // Small memtables: the runs flush, compact and checkpoint several SST files.
    let backend = RocksDbBackend::new().memory(32 << 20).write_buffer(1 << 20);
    riffle_testing::conformance::check_backend(Arc::new(backend), work.path());
}

/// Small RocksDB backends with the state cache (entries reach RocksDB at the checkpoint) and
/// without it (every access goes to RocksDB).
fn small_backends() -> impl Iterator<Item = RocksDbBackend> {
    [64 << 20, 0].into_iter().map(|cache| {
        RocksDbBackend::new()
            .memory(8 << 20)
            .write_buffer(1 << 20)
            .state_cache(cache)
    })
}

#[test]
fn every_stateful_operator_round_trips_on_rocksdb() -> riffle::Result<()> {
    for backend in small_backends() {
        riffle_testing::conformance::operator_round_trips(&backend)?;
    }
    Ok(())
}

#[test]
fn a_savepoint_survives_a_changed_state_type_on_rocksdb() {
    // Old values are rewritten in RocksDB at the restore, with the cache and without it.
    for backend in small_backends() {
        let work = tempfile::tempdir().unwrap();
        riffle_testing::evolution::check_state_evolution(Arc::new(backend), work.path());
    }
}

#[test]
fn a_savepoint_of_windows_survives_a_changed_accumulator_on_rocksdb() {
    for backend in small_backends() {
        let work = tempfile::tempdir().unwrap();
        riffle_testing::evolution::check_window_state_evolution(Arc::new(backend), work.path());
    }
}

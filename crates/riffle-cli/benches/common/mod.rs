//! What the bench binaries share.

pub use riffle_cli::process::cpu_seconds;

/// An operator harness for `operator` with its keyed state in a store of `backend` (the heap
/// when the backend gives none), in a fresh directory kept as long as the harness is used.
#[allow(dead_code)] // not every bench binary measures state
pub fn harness_on<Op: riffle::operators::BuildOperator>(
    backend: &dyn riffle::state::StateBackend,
    operator: Op,
) -> (
    riffle_testing::OperatorHarness<riffle::operators::InOf<Op>, riffle::operators::OutOf<Op>>,
    tempfile::TempDir,
) {
    let work = tempfile::tempdir().unwrap();
    let store = backend
        .open_store(&riffle::state::TaskStore {
            job: "bench".into(),
            task: 0,
            run_id: "state".into(),
            key_groups: riffle::keys::KeyGroupRange::for_subtask(0, 1, 128),
            local_dir: work.path().to_path_buf(),
        })
        .unwrap();
    let builder = riffle_testing::OperatorHarness::builder(operator);
    let harness = match store {
        Some(store) => builder.store(store),
        None => builder,
    }
    .build()
    .unwrap();
    (harness, work)
}

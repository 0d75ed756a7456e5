//! Test harnesses for Riffle: add this crate as a dev-dependency to test your operators, sinks
//! and state backends the way Riffle tests its own (Flink's `*OperatorTestHarness`).
//!
//! - [`OperatorHarness`] drives one operator by hand: push records and watermarks, move
//!   processing time, end the input, and read the exact output, side outputs and state size;
//!   a two-input operator takes [`riffle::Either`] records.
//! - [`assert_snapshot_round_trip`] (and [`assert_snapshot_round_trip_on`] for a given state
//!   backend) checks that an operator snapshotted anywhere in a script and restored goes on
//!   exactly as if it had never stopped.
//! - [`conformance`] is the suite every state backend passes (heap and RocksDB do).
//!
//! - [`duckdb`] reads the Parquet files of lake sinks back with DuckDB, an independent reader.
//! - [`evolution`] is the suite for savepoints across a new version of a job (changed state
//!   types, windows' accumulators).
//!
//! The seam in the core is the operator harness (driving one operator needs the runtime's
//! chain of operators, which the core keeps to itself): it lives behind the core's `testing`
//! feature, which only this crate turns on, so a job's own build of `riffle` carries none of
//! it. The suites, written on the public API, live here.
//!
//! ```
//! use riffle_testing::OperatorHarness;
//! use riffle::operators::Map;
//!
//! let mut h = OperatorHarness::builder(Map::new(std::sync::Arc::new(|x: u64| x * 2)))
//!     .build()
//!     .unwrap();
//! h.process(21, 1_000).unwrap();
//! assert_eq!(h.take_values(), vec![42]);
//! ```

pub use riffle::testing::*;

/// A job's configuration for recovery tests: `parallelism`, local state under `dir/state`,
/// checkpoints every `interval` into `dir/chk` (the default restart strategy).
pub fn checkpointed(
    dir: &std::path::Path,
    parallelism: usize,
    interval: std::time::Duration,
) -> riffle::EnvConfig {
    riffle::EnvConfig {
        parallelism,
        local_state_dir: dir.join("state"),
        checkpoints: riffle::checkpoint::CheckpointConfig {
            interval: Some(interval),
            storage: dir.join("chk").display().to_string(),
            ..Default::default()
        },
        ..riffle::EnvConfig::default()
    }
}

pub mod conformance;
pub mod duckdb;
pub mod evolution;

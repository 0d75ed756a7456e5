//! End-to-end tests of the engine: whole jobs, exact outputs.

mod bad_input;
mod config;
mod deprecated_names;
mod event_time;
mod failures;
mod latency;
mod lifecycle;
mod operators;
mod partitioning;
mod plan;
mod timestamp_edges;

use std::sync::mpsc;
use std::time::Duration;

use riffle::{EnvConfig, JobResult, Result, StreamEnv};

/// An environment with a small batch size, so that tests cross batch boundaries.
pub fn env(parallelism: usize) -> StreamEnv {
    StreamEnv::with_config(EnvConfig {
        parallelism,
        buffer_size: 7,
        channel_capacity: 2,
        dead_letter_dir: std::env::temp_dir().join("riffle-tests-dead-letter"),
        ..EnvConfig::default()
    })
}

/// Runs the job, failing the test (instead of hanging it) if it does not end within 60 s.
pub fn run(env: &StreamEnv) -> Result<JobResult> {
    let handle = env.execute_async()?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(handle.wait());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the job did not end within 60 s")
}

//! Helpers of the riffle-web tests: jobs to observe and a server configuration for tests.

#![allow(dead_code)]

use std::time::Duration;

use riffle::checkpoint::CheckpointConfig;
use riffle::sink::CollectSink;
use riffle::time::WatermarkStrategy;
use riffle::{EnvConfig, JobHandle, StreamEnv};
use riffle_clicks::{Click, ClicksConfig};
use riffle_web::WebConfig;

#[allow(unused_imports)]
pub use riffle_testing::eventually;

pub fn config(dir: &std::path::Path) -> WebConfig {
    WebConfig {
        savepoint_dir: Some(dir.join("savepoints").display().to_string()),
        register: false,
        sample_interval: Duration::from_millis(100),
        ..WebConfig::any_port()
    }
}

/// An endless click stream at 20K/s (parallelism 2) through a filter into a collecting sink,
/// checkpointing every 200 ms into `dir`.
pub fn running_job(dir: &std::path::Path) -> JobHandle {
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 2,
        job_name: "clicks-api".into(),
        checkpoints: CheckpointConfig {
            interval: Some(Duration::from_millis(200)),
            storage: dir.join("checkpoints").display().to_string(),
            ..CheckpointConfig::default()
        },
        ..EnvConfig::default()
    });
    let (sink, _) = CollectSink::new();
    env.from_source_with_watermarks(
        riffle_clicks::source(ClicksConfig::default()).rate(20_000.0),
        WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(2))
            .with_timestamps(|c: &Click| c.event_time),
    )
    .filter(|c| c.user_id % 2 == 0)
    .name("even users")
    .sink(sink);
    env.execute_async().unwrap()
}

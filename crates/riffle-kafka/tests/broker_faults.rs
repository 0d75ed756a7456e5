//! The broker stopped and restarted under an exactly-once job (the broker `scripts/test.sh`
//! starts). In a test binary of its own: it stops the broker the other tests share.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;
use riffle::checkpoint::{CheckpointConfig, RestartStrategy};
use riffle::source::datagen::{DatagenSource, Generator};
use riffle::{EnvConfig, StreamEnv};
use riffle_kafka::KafkaSink;

fn kafka_script(command: &str) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kafka.sh");
    let status = Command::new(&script)
        .arg(command)
        .status()
        .expect("scripts/kafka.sh runs");
    assert!(status.success(), "scripts/kafka.sh {command} failed");
}

fn env(dir: &std::path::Path) -> StreamEnv {
    StreamEnv::with_config(EnvConfig {
        parallelism: 2,
        checkpoints: CheckpointConfig {
            interval: Some(Duration::from_millis(500)),
            storage: dir.display().to_string(),
            restart: RestartStrategy::FixedDelay {
                attempts: 20,
                delay: Duration::from_secs(2),
            },
            ..CheckpointConfig::default()
        },
        ..EnvConfig::default()
    })
}

/// The numbers 0, 1, 2, ...
struct Numbers;

impl Generator for Numbers {
    type Item = u64;
    fn generate(&self, index: u64) -> u64 {
        index
    }
}

#[test]
fn the_broker_stopped_and_restarted_mid_run_makes_the_job_restore_with_every_record_once() {
    let output = topic("outage-out", 2);
    // Records keep coming while the broker is away (a generator, 5K/s for 30 s): the sink's
    // flush at the next barrier times out, the job fails, retries until the broker is back,
    // restores its last checkpoint and replays from there.
    let total = 150_000u64;
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path());
    env.from_source(
        DatagenSource::new(Numbers)
            .count(total)
            .rate(5_000.0)
            .splits(2),
    )
    .map(|n: u64| n * 2)
    .sink(
        KafkaSink::json(kafka(), &output)
            .exactly_once()
            // The outage (~20 s: stop, 5 s, a start of ~13 s) outlasts it.
            .broker_timeout(Duration::from_secs(5)),
    );
    let job = env.execute_async().unwrap();
    std::thread::sleep(Duration::from_secs(4));
    kafka_script("stop");
    std::thread::sleep(Duration::from_secs(5));
    kafka_script("start");
    let result = job.wait().unwrap();
    let values = read_committed(&output, Duration::from_secs(60), |n, quiet| {
        n >= total as usize && quiet > Duration::from_secs(3)
    });
    assert!(
        result.restarts >= 1 && !result.restores.is_empty(),
        "the outage should have made the job restore from a checkpoint: {} restarts, restores {:?}",
        result.restarts,
        result.restores
    );
    let mut doubled: Vec<u64> = values.iter().map(|r| r.value.parse().unwrap()).collect();
    doubled.sort();
    assert_eq!(
        doubled.len(),
        total as usize,
        "restores: {:?}",
        result.restores
    );
    assert!(
        doubled.iter().enumerate().all(|(i, v)| *v == 2 * i as u64),
        "every record exactly once (restores: {:?})",
        result.restores
    );
}

//! A task fails mid-stream; the job restores from its latest checkpoint and the committed output
//! is exactly the failure-free output.

use crate::{COUNT, committed, expected, run, windowed_job};
use riffle::testing::fail_once_after;

#[test]
fn a_failure_mid_stream_is_recovered_without_duplicates_or_loss() {
    let expected = expected(COUNT);
    assert!(!expected.is_empty());
    let total: u64 = expected
        .iter()
        .map(|l| {
            l.trim_matches('"')
                .rsplit(' ')
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert_eq!(total, COUNT);
    let dir = tempfile::tempdir().unwrap();
    let env = windowed_job(
        &dir.path().join("out"),
        &dir.path().join("chk"),
        2,
        COUNT,
        fail_once_after(35_000),
    );
    let result = run(&env).unwrap();
    assert_eq!(result.restarts, 1, "one failure, one restart");
    assert!(
        result.restores[0] > 0,
        "restored from a checkpoint, not from scratch: {:?}",
        result.restores
    );
    let read_after_restore = result
        .metrics
        .operator_total("Source: clicks")
        .unwrap()
        .records_out;
    assert!(
        read_after_restore < crate::COUNT,
        "the restored run resumed the source ({read_after_restore})"
    );
    assert!(result.restored_from.is_none());
    assert!(
        result.completed_checkpoints() > 0,
        "{:?}",
        result.checkpoints
    );
    assert_eq!(committed(&dir.path().join("out")), expected);
}

/// Count windows keep their records in keyed state: a failure mid-stream and the restore from
/// the latest checkpoint give exactly the windows of a run without the failure.
#[test]
fn count_windows_survive_a_failure_exactly_once() {
    use riffle::aggregate::Sum;
    use riffle::checkpoint::{CheckpointConfig, RestartStrategy};
    use riffle::sink::ExactlyOnceFileSink;
    use riffle::source::datagen::DatagenSource;
    use riffle::source::function::FnGenerator;
    use riffle::{EnvConfig, StreamEnv};
    use std::time::Duration;

    const COUNT: u64 = 20_000;
    let job = |dir: &std::path::Path, fail_after: Option<u64>| {
        let env = StreamEnv::with_config(EnvConfig {
            parallelism: 2,
            buffer_size: 64,
            checkpoints: CheckpointConfig {
                interval: Some(Duration::from_millis(50)),
                storage: dir.join("chk").to_str().unwrap().to_string(),
                restart: RestartStrategy::FixedDelay {
                    attempts: 3,
                    delay: Duration::from_millis(20),
                },
                ..CheckpointConfig::default()
            },
            ..EnvConfig::default()
        });
        let crash = fail_once_after::<(u64, u64)>(fail_after.unwrap_or(u64::MAX));
        env.from_source(
            DatagenSource::new(FnGenerator::new(|i| (i % 7, i)))
                .count(COUNT)
                .rate(40_000.0)
                .splits(1),
        )
        .set_parallelism(1)
        .uid("numbers")
        // One producer before the shuffle: every key's records arrive in one order, so the
        // count windows are the same in every run.
        .map(crash)
        .set_parallelism(1)
        .key_by(|n| n.0)
        .count_window(4)
        .aggregate(Sum::of(|n: &(u64, u64)| n.1))
        .uid("windows")
        .map(|(key, sum)| format!("{key} {sum}"))
        .sink(ExactlyOnceFileSink::new(dir.join("out")))
        .uid("sink");
        let result = run(&env).unwrap();
        (committed(&dir.join("out")), result)
    };
    let clean = tempfile::tempdir().unwrap();
    let (expected, _) = job(clean.path(), None);
    // 7 keys of 20 000 numbers: 2 857 or 2 858 numbers each, 714 full windows of 4 per key.
    assert_eq!(expected.len(), 7 * 714);
    let failing = tempfile::tempdir().unwrap();
    let (lines, result) = job(failing.path(), Some(12_000));
    assert_eq!(result.restarts, 1);
    assert!(
        result.restores[0] > 0,
        "restored a checkpoint: {:?}",
        result.restores
    );
    assert!(
        lines == expected,
        "{} committed windows differ from the {} of a run without failure",
        lines.len(),
        expected.len()
    );
}

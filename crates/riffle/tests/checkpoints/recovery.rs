//! A task fails mid-stream; the job restores from its latest checkpoint and the committed output
//! is exactly the failure-free output.

use crate::{COUNT, committed, expected, run, windowed_job};
use riffle::testing::fail_once_after;

#[test]
fn a_failure_mid_stream_is_recovered_without_duplicates_or_loss() {
    let expected = expected(COUNT);
    assert!(!expected.is_empty());
    assert_eq!(crate::counted(&expected), COUNT);
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

    use riffle::StreamEnv;
    use riffle::sink::ExactlyOnceFileSink;
    use riffle::source::datagen::DatagenSource;
    use riffle::source::function::FnGenerator;
    use std::time::Duration;

    const COUNT: u64 = 20_000;
    let job = |dir: &std::path::Path, fail_after: Option<u64>| {
        let env = StreamEnv::with_config(riffle::testing::recovering_config(
            2,
            &dir.join("chk"),
            Duration::from_millis(50),
        ));
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

/// The file source read every file, but the windows still wait for a slower input: a failure
/// then restores the finished file source at the end of its file (it reads nothing again) and
/// every window fires once the other input ends, as without the failure (issue: event time
/// survives a restore).
#[test]
fn windows_fire_after_a_restore_that_finds_the_files_read() {
    use riffle::aggregate::Count;
    use riffle::checkpoint::{CheckpointConfig, RestartStrategy};
    use riffle::sink::ExactlyOnceFileSink;
    use riffle::source::datagen::{DatagenSource, Generator};
    use riffle::source::file::FileSource;
    use riffle::source::function::FnGenerator;
    use riffle::time::WatermarkStrategy;
    use riffle::window::Tumbling;
    use riffle::{EnvConfig, StreamEnv};
    use riffle_clicks::{Click, ClickGenerator, ClicksConfig};
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let generator = ClickGenerator::new(ClicksConfig {
        users: 50,
        late_share: 0.0,
        bot_share: 0.0,
        events_per_second: 1_000.0,
        ..ClicksConfig::default()
    });
    let clicks: Vec<Click> = (0..5_000).map(|i| generator.generate(i)).collect();
    let input = dir.path().join("clicks.jsonl");
    let lines: Vec<String> = clicks
        .iter()
        .map(|c| serde_json::to_string(c).unwrap())
        .collect();
    std::fs::write(&input, lines.join("\n")).unwrap();
    let mut expected: Vec<String> = {
        let mut counts = std::collections::BTreeMap::<(u64, i64), u64>::new();
        for c in &clicks {
            *counts
                .entry((c.user_id, c.event_time - c.event_time.rem_euclid(10_000)))
                .or_default() += 1;
        }
        counts
            .into_iter()
            .map(|((user, start), n)| format!("\"{user} {start} {n}\""))
            .collect()
    };
    expected.sort();

    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 1,
        checkpoints: CheckpointConfig {
            interval: Some(Duration::from_millis(50)),
            storage: dir.path().join("chk").to_str().unwrap().to_string(),
            restart: RestartStrategy::FixedDelay {
                attempts: 3,
                delay: Duration::from_millis(20),
            },
            ..CheckpointConfig::default()
        },
        ..EnvConfig::default()
    });
    let files = env
        .from_source_with_watermarks(
            FileSource::<Click>::json(&input),
            WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(3))
                .with_timestamps(|c: &Click| c.event_time),
        )
        .uid("files");
    // A slower input without watermarks (bot clicks, dropped): it holds every window back until
    // it ends, 1.5 s later, and it fails once half-way, long after the file was read.
    let crash = fail_once_after::<Click>(150);
    let bots = env
        .from_source(
            DatagenSource::new(FnGenerator::new(|i| Click {
                user_id: i,
                url: "/".into(),
                user_agent: "bot".into(),
                ip: "10.0.0.1".into(),
                event_time: 0,
            }))
            .count(300)
            .rate(200.0)
            .splits(1),
        )
        .uid("bots")
        .map(crash)
        .uid("crash");
    files
        .union(&[&bots])
        .filter(|c| c.user_agent != "bot")
        .key_by(|c| c.user_id)
        .window(Tumbling::of(Duration::from_secs(10)))
        .aggregate(Count)
        .uid("count")
        .map(|r| format!("{} {} {}", r.key, r.window_start, r.value))
        .sink(ExactlyOnceFileSink::new(dir.path().join("out")))
        .uid("sink");
    let result = run(&env).unwrap();
    assert_eq!(result.restarts, 1);
    assert!(
        result.restores[0] > 0,
        "restored a checkpoint taken after the file source finished: {:?}",
        result.restores
    );
    let reread = result
        .metrics
        .operator_total(&format!("Source: file {}", input.display()))
        .map_or(0, |o| o.records_out);
    assert_eq!(reread, 0, "the restored file source read nothing again");
    let lines = committed(&dir.path().join("out"));
    assert!(
        lines == expected,
        "{} committed counts, {} expected",
        lines.len(),
        expected.len()
    );
}

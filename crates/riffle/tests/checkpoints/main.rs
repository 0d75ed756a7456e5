//! Checkpoints and recovery end to end: a task fails at some point, the job restores from its
//! latest completed checkpoint, and what the exactly-once sink committed equals the output of a
//! run without the failure: nothing missing, nothing twice.

mod backends;
mod edges;
mod faults;
mod faulty_store;
mod file_ranges;
mod key_hash;
mod recovery;
mod s3;
mod savepoints;
mod two_inputs;
mod unaligned;

use std::path::Path;
use std::time::Duration;

use riffle::aggregate::Count;
use riffle::sink::ExactlyOnceFileSink;
use riffle::source::datagen::DatagenSource;
use riffle::time::WatermarkStrategy;
use riffle::window::Tumbling;
use riffle::{JobResult, Result, StreamEnv};
use riffle_clicks::{Click, ClicksConfig};

/// Clicks within the watermark bound (nothing late: every run has one exact answer).
pub fn clicks(count: u64) -> DatagenSource<riffle_clicks::ClickGenerator> {
    let config = ClicksConfig {
        users: 300,
        late_share: 0.0,
        events_per_second: 2_000.0,
        ..ClicksConfig::default()
    };
    riffle_clicks::source(config)
        .count(count)
        .rate(40_000.0)
        .splits(4)
}

/// A job counting clicks per user in 5-second windows into an exactly-once file sink at `out`,
/// with `crash` on the way, checkpointing into `checkpoints` every 100 ms.
pub fn windowed_job(
    out: &Path,
    checkpoints: &Path,
    parallelism: usize,
    count: u64,
    crash: impl Fn(Click) -> Click + Send + Sync + 'static,
) -> StreamEnv {
    let env = StreamEnv::with_config(riffle::testing::recovering_config(
        parallelism,
        checkpoints,
        Duration::from_millis(100),
    ));
    env.from_source_with_watermarks(
        clicks(count),
        WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(5))
            .with_timestamps(|c: &Click| c.event_time),
    )
    .uid("clicks")
    .map(crash)
    .uid("crash")
    .key_by(|c| c.user_id)
    .window(Tumbling::of(Duration::from_secs(5)))
    .aggregate(Count)
    .uid("count")
    .map(|r| format!("{} {} {}", r.key, r.window_start, r.value))
    .sink(ExactlyOnceFileSink::new(out))
    .uid("sink");
    env
}

/// Runs the job, failing the test if it does not end within 120 s.
pub fn run(env: &StreamEnv) -> Result<JobResult> {
    let handle = env.execute_async()?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(handle.wait());
    });
    rx.recv_timeout(Duration::from_secs(120))
        .expect("the job did not end within 120 s")
}

/// Every committed line (visible part files), sorted; asserts no in-progress file is left.
pub fn committed(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.path().is_file() {
            lines.extend(
                std::fs::read_to_string(entry.path())
                    .unwrap()
                    .lines()
                    .map(str::to_string),
            );
        }
    }
    lines.sort();
    lines
}

/// The failure-free output, computed once.
pub fn expected(count: u64) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let env = windowed_job(
        &dir.path().join("out"),
        &dir.path().join("chk"),
        2,
        count,
        |c| c,
    );
    let result = run(&env).unwrap();
    assert_eq!(result.restarts, 0);
    committed(&dir.path().join("out"))
}

/// Count of the generated clicks, for the recovery tests.
pub const COUNT: u64 = 60_000;

/// The clicks counted by committed lines `"<user> <window start> <count>"`.
pub fn counted(lines: &[String]) -> u64 {
    lines
        .iter()
        .map(|l| {
            l.trim_matches('"')
                .rsplit(' ')
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum()
}

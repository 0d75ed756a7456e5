//! Event time across whole jobs: windows over several subtasks with and without
//! pre-aggregation, late records, idle splits, future timestamps, batch versus stream.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use riffle::aggregate::Count;
use riffle::sink::CollectSink;
use riffle::source::datagen::Generator;
use riffle::source::file::FileSource;
use riffle::source::{Boundedness, DeadLetter, ReadStatus, Source, SourceOutput, SplitReader};
use riffle::time::{Clock, SystemClock, WatermarkStrategy};
use riffle::window::{Tumbling, WindowResult};
use riffle::{EnvConfig, OutputTag, StreamEnv};
use riffle_clicks::{Click, ClickGenerator, ClicksConfig};

use crate::run;

const MINUTE: Duration = Duration::from_secs(60);

fn env(parallelism: usize) -> StreamEnv {
    StreamEnv::with_config(EnvConfig {
        parallelism,
        buffer_size: 64,
        watermark_interval: Duration::from_millis(5),
        ..EnvConfig::default()
    })
}

fn strategy(bound: Duration) -> WatermarkStrategy<Click> {
    WatermarkStrategy::bounded_out_of_orderness(bound).with_timestamps(|c: &Click| c.event_time)
}

/// The last result per (user, window start): the final values.
fn finals(results: Vec<WindowResult<u64, u64>>) -> BTreeMap<(u64, i64), u64> {
    results
        .into_iter()
        .map(|r| ((r.key, r.window_start), r.value))
        .collect()
}

/// The truth: a batch group-by over the generated clicks.
fn batch(config: &ClicksConfig, count: u64) -> BTreeMap<(u64, i64), u64> {
    let generator = ClickGenerator::new(config.clone());
    let mut counts = BTreeMap::new();
    for i in 0..count {
        let click = generator.generate(i);
        *counts
            .entry((
                click.user_id,
                click.event_time - click.event_time.rem_euclid(60_000),
            ))
            .or_insert(0) += 1;
    }
    counts
}

#[test]
fn windowed_counts_equal_the_batch_truth_with_and_without_pre_aggregation_at_any_parallelism() {
    // Disorder within the bound: nothing is late, so every run must give the exact truth.
    let config = ClicksConfig {
        users: 40,
        hot_key_share: 0.8,
        late_share: 0.0,
        events_per_second: 500.0,
        ..ClicksConfig::default()
    };
    let count = 40_000;
    let truth = batch(&config, count);
    for parallelism in [1, 2, 4] {
        for pre_aggregate in [true, false] {
            let env = env(parallelism);
            let (sink, out) = CollectSink::new();
            env.from_source_with_watermarks(
                riffle_clicks::source(config.clone()).count(count),
                strategy(Duration::from_secs(5)),
            )
            .key_by(|c| c.user_id)
            .window(Tumbling::of(MINUTE))
            .pre_aggregate(pre_aggregate)
            .aggregate(Count)
            .sink(sink);
            run(&env).unwrap();
            assert_eq!(
                finals(out.values()),
                truth,
                "parallelism {parallelism}, pre-aggregation {pre_aggregate}"
            );
        }
    }
}

#[test]
fn late_clicks_reach_the_side_output_unchanged_and_nothing_is_lost() {
    let config = ClicksConfig {
        users: 100,
        late_share: 0.01,
        ..ClicksConfig::default()
    };
    let count = 30_000;
    for pre_aggregate in [true, false] {
        let env = env(2);
        let late = OutputTag::<Click>::new("late-clicks");
        let (sink, out) = CollectSink::new();
        let (late_sink, late_out) = CollectSink::new();
        let counts = env
            .from_source_with_watermarks(
                riffle_clicks::source(config.clone())
                    .count(count)
                    .rate(20_000.0),
                strategy(Duration::from_secs(5)),
            )
            .key_by(|c| c.user_id)
            .window(Tumbling::of(MINUTE))
            .allowed_lateness(Duration::from_secs(30))
            .side_output_late(&late)
            .pre_aggregate(pre_aggregate)
            .aggregate(Count);
        counts.sink(sink);
        counts.get_side_output(&late).sink(late_sink);
        let result = run(&env).unwrap();
        let counted: u64 = finals(out.values()).values().sum();
        let late_clicks = late_out.values();
        assert_eq!(
            counted + late_clicks.len() as u64,
            count,
            "pre-aggregation {pre_aggregate}"
        );
        assert!(
            late_clicks.len() > 200,
            "about 300 clicks are 6 minutes late: {}",
            late_clicks.len()
        );
        let generator = ClickGenerator::new(config.clone());
        let very_late: Vec<Click> = (0..count)
            .map(|i| (i, generator.generate(i)))
            .filter(|(i, c)| generator.on_time_event_time(*i) - c.event_time > 300_000)
            .map(|(_, c)| c)
            .collect();
        for click in &late_clicks {
            assert!(
                very_late.contains(click),
                "only very late clicks are late, unchanged: {click:?}"
            );
        }
        assert_eq!(
            result
                .metrics
                .operator_total("Window")
                .unwrap()
                .late_records_side_output,
            late_clicks.len() as u64
        );
    }
}

/// Two splits: split 0 emits one (key, time) record every 5 ms of wall time with event time
/// advancing 100 ms each; split 1 never has anything.
struct OneSilentSplit;

struct Ticking {
    next: u64,
    started: Instant,
}

struct Silent;

impl Source<(u64, i64)> for OneSilentSplit {
    type Split = usize;
    fn name(&self) -> String {
        "one-silent-split".into()
    }
    fn boundedness(&self) -> Boundedness {
        Boundedness::Unbounded
    }
    fn splits(&self, _: usize) -> riffle::Result<Vec<usize>> {
        Ok(vec![0, 1])
    }
    fn reader(&self, split: usize) -> riffle::Result<Box<dyn SplitReader<(u64, i64)>>> {
        Ok(if split == 0 {
            Box::new(Ticking {
                next: 0,
                started: Instant::now(),
            })
        } else {
            Box::new(Silent)
        })
    }
}

impl SplitReader<(u64, i64)> for Ticking {
    fn split_id(&self) -> String {
        "ticking".into()
    }
    fn read(&mut self, out: &mut SourceOutput<(u64, i64)>, _: usize) -> riffle::Result<ReadStatus> {
        let due = self.started.elapsed().as_millis() as u64 / 5;
        while self.next < due {
            out.emit((self.next % 3, self.next as i64 * 100));
            self.next += 1;
        }
        Ok(ReadStatus::Pending(None))
    }
    fn position(&self) -> serde_json::Value {
        serde_json::json!(self.next)
    }
    fn seek(&mut self, _: &serde_json::Value) -> riffle::Result<()> {
        Ok(())
    }
}

impl SplitReader<(u64, i64)> for Silent {
    fn split_id(&self) -> String {
        "silent".into()
    }
    fn read(&mut self, _: &mut SourceOutput<(u64, i64)>, _: usize) -> riffle::Result<ReadStatus> {
        Ok(ReadStatus::Pending(Some(
            Instant::now() + Duration::from_millis(20),
        )))
    }
    fn position(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
    fn seek(&mut self, _: &serde_json::Value) -> riffle::Result<()> {
        Ok(())
    }
}

fn windows_fired_with(idleness: Option<Duration>) -> usize {
    let env = env(1);
    let mut strategy = WatermarkStrategy::monotonous().with_timestamps(|r: &(u64, i64)| r.1);
    if let Some(idleness) = idleness {
        strategy = strategy.with_idleness(idleness);
    }
    let (sink, out) = CollectSink::new();
    env.from_source_with_watermarks(OneSilentSplit, strategy)
        .key_by(|r| r.0)
        .window(Tumbling::of(Duration::from_secs(1)))
        .aggregate(Count)
        .sink(sink);
    let job = env.execute_async().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let fired_while_running = out.len();
    job.stop();
    job.wait().unwrap();
    fired_while_running
}

#[test]
fn a_silent_split_does_not_stall_the_windows_once_idle() {
    assert_eq!(
        windows_fired_with(None),
        0,
        "without idleness the silent split holds the watermark"
    );
    assert!(
        windows_fired_with(Some(Duration::from_millis(100))) >= 3,
        "with idleness the windows fire"
    );
}

#[test]
fn clicks_from_the_future_are_quarantined_as_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let now = SystemClock.now();
    let clicks: Vec<String> = [now - 120_000, now - 60_000, now + 7_200_000, now - 30_000]
        .iter()
        .enumerate()
        .map(|(i, ts)| {
            serde_json::to_string(&Click {
                user_id: 1,
                url: format!("/{i}").into(),
                user_agent: "x".into(),
                ip: "1.1.1.1".into(),
                event_time: *ts,
            })
            .unwrap()
        })
        .collect();
    std::fs::write(dir.path().join("clicks.jsonl"), clicks.join("\n")).unwrap();
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 1,
        dead_letter_dir: dir.path().join("dead"),
        ..EnvConfig::default()
    });
    let (sink, out) = CollectSink::new();
    let (dead, letters) = CollectSink::new();
    let clicks = env.from_source_with_watermarks(
        FileSource::<Click>::json(dir.path().join("clicks.jsonl")),
        strategy(Duration::from_secs(5)),
    );
    clicks.dead_letters().sink(dead);
    clicks
        .key_by(|c| c.user_id)
        .window(Tumbling::of(Duration::from_secs(3600 * 24)))
        .aggregate(Count)
        .sink(sink);
    let result = run(&env).unwrap();
    let total: u64 = out.values().iter().map(|r| r.value).sum();
    assert_eq!(total, 3, "the future click does not count");
    let letters: Vec<DeadLetter> = letters.values();
    assert_eq!(letters.len(), 1);
    assert!(
        letters[0].error.contains("ahead of the wall clock"),
        "{}",
        letters[0].error
    );
    assert!(letters[0].payload.contains("\"url\":\"/2\""));
    assert_eq!(result.bad_records(), 1);
}

#[test]
fn a_bounded_run_gives_the_same_answer_as_the_streaming_run() {
    let config = ClicksConfig {
        users: 500,
        late_share: 0.0,
        events_per_second: 2_000.0,
        ..ClicksConfig::default()
    };
    let count = 50_000;
    let run_with = |strategy: WatermarkStrategy<Click>, rate: Option<f64>| {
        let env = env(2);
        let (sink, out) = CollectSink::new();
        env.from_source_with_watermarks(
            riffle_clicks::source(config.clone())
                .count(count)
                .pace(rate),
            strategy,
        )
        .key_by(|c| c.user_id)
        .window(Tumbling::of(MINUTE))
        .aggregate(Count)
        .sink(sink);
        run(&env).unwrap();
        out.values()
    };
    // Batch: no watermarks until the input ends.
    let batch_results = run_with(
        WatermarkStrategy::no_watermarks().with_timestamps(|c: &Click| c.event_time),
        None,
    );
    // Stream: paced input, windows fire one after another as the watermark advances.
    let stream_results = run_with(strategy(Duration::from_secs(5)), Some(50_000.0));
    assert!(batch_results.iter().all(|r| !r.update));
    assert_eq!(finals(batch_results), finals(stream_results.clone()));
    assert_eq!(finals(stream_results), batch(&config, count));
}

//! The Kafka shuffle against a real broker, inside one process: the seed's windowed count per
//! user through a repartition topic equals the in-process `key_by` exactly; a slow producer task
//! holds the windows back (no early firing) and an idle one does not; a crash mid-run restored
//! from the checkpoint gives the failure-free result in a `read_committed` output.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use riffle::aggregate::Count;
use riffle::checkpoint::{CheckpointConfig, RestartStrategy};
use riffle::operators::{Collector, Operator, OperatorContext};
use riffle::sink::CollectSink;
use riffle::source::datagen::{DatagenSource, Generator};
use riffle::source::{Boundedness, ReadStatus, Source, SourceOutput, SplitReader};
use riffle::time::WatermarkStrategy;
use riffle::window::Tumbling;
use riffle::{DataStream, EnvConfig, KeyedStream, Record, StreamEnv};
use riffle_clicks::{Click, ClicksConfig};
use riffle_kafka::{KafkaShuffle, KafkaShuffleExt, KafkaSink, ensure_topics};

/// A shuffle through a topic no other test uses.
fn shuffle(name: &str, partitions: usize) -> KafkaShuffle {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let group = format!("shuffle-test-{}-{nanos}", std::process::id());
    KafkaShuffle::new(kafka(), group, name).partitions(partitions)
}

fn env(dir: &std::path::Path, parallelism: usize) -> StreamEnv {
    StreamEnv::with_config(EnvConfig {
        parallelism,
        job_name: format!("shuffle-{}", dir.file_name().unwrap().to_string_lossy()),
        checkpoints: CheckpointConfig {
            interval: Some(Duration::from_millis(300)),
            storage: dir.display().to_string(),
            restart: RestartStrategy::FixedDelay {
                attempts: 3,
                delay: Duration::from_millis(200),
            },
            ..CheckpointConfig::default()
        },
        ..EnvConfig::default()
    })
}

/// The seed's clicks, small: 40 users, 20 clicks per second of event time, out of order by up
/// to 2 s (under the watermark's bound of 3 s: no click is late, whatever the timing), no very
/// late clicks; bots filtered out.
fn clicks(env: &StreamEnv, count: u64, rate: Option<f64>) -> DataStream<Click> {
    let config = ClicksConfig {
        users: 40,
        events_per_second: 20.0,
        max_out_of_orderness_ms: 2_000,
        late_share: 0.0,
        ..ClicksConfig::default()
    };
    let source = riffle_clicks::source(config).count(count).splits(2);
    let source = match rate {
        Some(rate) => source.rate(rate),
        None => source,
    };
    env.from_source_with_watermarks(
        source,
        WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(3))
            .with_timestamps(|c: &Click| c.event_time),
    )
    .uid("clicks")
    .filter(|c: &Click| !c.user_agent.to_lowercase().contains("bot"))
    .uid("humans")
}

/// 1-minute count per user: `(user, window start, count)`.
fn count_per_minute(keyed: &KeyedStream<u64, Click>) -> DataStream<(u64, i64, u64)> {
    keyed
        .window(Tumbling::of(Duration::from_secs(60)))
        .aggregate(Count)
        .uid("count")
        .map(|r| (r.key, r.window_start, r.value))
        .uid("rows")
}

fn sorted(mut rows: Vec<(u64, i64, u64)>) -> Vec<(u64, i64, u64)> {
    rows.sort();
    rows
}

#[test]
fn the_windowed_count_through_a_kafka_shuffle_equals_the_in_process_key_by() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let count = 6_000; // 5 minutes of event time
    let expected = {
        let dir = tempfile::tempdir().unwrap();
        let env = env(dir.path(), 2);
        let (sink, out) = CollectSink::new();
        count_per_minute(&clicks(&env, count, None).key_by(|c| c.user_id)).sink(sink);
        env.execute().unwrap();
        sorted(out.values())
    };
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path(), 2);
    let (sink, out) = CollectSink::new();
    let shuffle = shuffle("by-user", 2);
    let topic = shuffle.topic();
    count_per_minute(
        &clicks(&env, count, None)
            .key_by(|c| c.user_id)
            .through_kafka(shuffle),
    )
    .sink(sink);
    let result = env.execute().unwrap();
    let got = sorted(out.values());
    let metrics: Vec<String> = result
        .metrics
        .operators
        .iter()
        .map(|o| {
            format!(
                "{}#{}: in {} out {} late {} bad {} watermark {}",
                o.name,
                o.subtask,
                o.records_in,
                o.records_out,
                o.late_records_dropped,
                o.bad_records,
                o.watermark
            )
        })
        .collect();
    eprintln!("{}", metrics.join("\n"));
    assert!(expected.len() > 100, "{} rows", expected.len());
    assert_eq!(
        expected.iter().map(|r| r.2).sum::<u64>(),
        got.iter().map(|r| r.2).sum::<u64>()
    );
    assert_eq!(got, expected);
    assert_eq!(
        result.records_out(&format!("Shuffle: read {topic}")),
        got.iter().map(|r| r.2).sum::<u64>()
    );
}

/// Record `i`: key `i % 4`, event time `(i / 2) * 1000` — both splits walk through event time
/// at the same pace, one record per second each.
struct Ticks;

impl Generator for Ticks {
    type Item = (u64, i64);
    fn generate(&self, index: u64) -> (u64, i64) {
        (index % 4, (index / 2) as i64 * 1_000)
    }
}

/// Passes records on; subtask 1 takes `delay` per record and logs when it passed each event time.
struct Slow {
    delay: Duration,
    slow: bool,
    passed: Arc<Mutex<Vec<(Instant, i64)>>>,
}

impl Operator for Slow {
    type In = (u64, i64);
    type Out = (u64, i64);
    fn open(&mut self, ctx: &OperatorContext) -> riffle::Result<()> {
        self.slow = ctx.subtask == 1;
        Ok(())
    }
    fn process(
        &mut self,
        batch: &mut Vec<Record<(u64, i64)>>,
        out: &mut Collector<'_, (u64, i64)>,
    ) -> riffle::Result<()> {
        for record in batch.drain(..) {
            if self.slow {
                std::thread::sleep(self.delay);
                self.passed
                    .lock()
                    .unwrap()
                    .push((Instant::now(), record.value.1));
            }
            out.emit(record)?;
        }
        Ok(())
    }
}

#[test]
fn a_slow_producer_holds_the_windows_back_until_its_watermark_passes_them() {
    // Producer 0 writes 60 s of event time at once; producer 1 one second of it every 40 ms.
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path(), 2);
    env.configure(|c| c.buffer_size = 1);
    let passed = Arc::new(Mutex::new(Vec::new()));
    let fired = Arc::new(Mutex::new(Vec::new()));
    let log = passed.clone();
    let keyed = env
        .from_source_with_watermarks(
            DatagenSource::new(Ticks).count(120).splits(2),
            WatermarkStrategy::monotonous().with_timestamps(|t: &(u64, i64)| t.1),
        )
        .transform("Slow", move || Slow {
            delay: Duration::from_millis(40),
            slow: false,
            passed: log.clone(),
        })
        .key_by(|t| t.0)
        .through_kafka(shuffle("slow", 2).watermark_interval(Duration::from_millis(20)));
    let seen = fired.clone();
    keyed
        .window(Tumbling::of(Duration::from_secs(10)))
        .aggregate(Count)
        .sink_fn(move |r| {
            seen.lock()
                .unwrap()
                .push((Instant::now(), r.key, r.window_end, r.value));
            Ok(())
        });
    env.execute().unwrap();
    let passed = passed.lock().unwrap().clone();
    let fired = fired.lock().unwrap().clone();
    // No window fired before the slow producer passed its end (its watermark: time - 1 ms).
    for (at, key, end, _) in &fired {
        let passed_end = passed
            .iter()
            .find(|(_, time)| *time >= *end)
            .map(|(when, _)| *when);
        if *end <= 59_000 {
            let passed_end = passed_end.expect("producer 1 passed the window's end");
            assert!(
                *at > passed_end,
                "window ending {end} (key {key}) fired before the slow producer passed it"
            );
        }
    }
    // Every window fired, with its exact count: 10 s of two records per second over 4 keys.
    let mut counts: BTreeMap<(u64, i64), u64> = BTreeMap::new();
    for (_, key, end, n) in &fired {
        *counts.entry((*key, *end)).or_default() += n;
    }
    assert_eq!(counts.len(), 24, "{counts:?}");
    assert!(counts.values().all(|n| *n == 5), "{counts:?}");
    // And the slow producer did hold them back: its run took over a second and the first
    // window fired well after producer 0 was done with all of event time.
    let first_fire = fired.iter().map(|f| f.0).min().unwrap();
    let slow_start = passed.first().unwrap().0;
    assert!(first_fire > slow_start + Duration::from_millis(300));
}

#[test]
fn an_idle_producer_does_not_hold_the_windows_back() {
    // Producer 1's only split goes idle; producer 0 runs on (paced), and its windows fire while
    // producer 1 is idle: the job is unbounded (stopped by the test).
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path(), 2);
    let (sink, out) = CollectSink::new();
    env.from_source_with_watermarks(
        // Split 0: even indices (all records); split 1: odd indices, idle at once.
        IdleSecond::source(),
        WatermarkStrategy::monotonous()
            .with_timestamps(|t: &(u64, i64)| t.1)
            .with_idleness(Duration::from_millis(300)),
    )
    .key_by(|t| t.0)
    .through_kafka(shuffle("idle", 2).watermark_interval(Duration::from_millis(50)))
    .window(Tumbling::of(Duration::from_secs(10)))
    .aggregate(Count)
    .map(|r| (r.key, r.window_end, r.value))
    .sink(sink);
    let job = env.execute_async().unwrap();
    let fired = eventually(Duration::from_secs(40), || out.len() >= 3);
    job.stop();
    job.wait().unwrap();
    assert!(fired, "no window fired while producer 1 was idle");
    let mut first: Vec<(u64, i64, u64)> =
        out.values().into_iter().filter(|r| r.1 == 10_000).collect();
    first.sort();
    // Event times 0..9 s, one record per second, keys i % 3.
    assert_eq!(first, vec![(0, 10_000, 4), (1, 10_000, 3), (2, 10_000, 3)]);
}

/// Two splits: split 0 has one record per 50 ms, forever (event time one second per record,
/// keys `i % 3`); split 1 never has one (it goes idle).
struct IdleSecond;

impl IdleSecond {
    fn source() -> Self {
        IdleSecond
    }
}

struct IdleSecondReader {
    split: usize,
    next: u64,
    due: Instant,
}

impl Source<(u64, i64)> for IdleSecond {
    type Split = usize;
    fn name(&self) -> String {
        "idle-second".into()
    }
    fn boundedness(&self) -> Boundedness {
        Boundedness::Unbounded
    }
    fn splits(&self, _parallelism: usize) -> riffle::Result<Vec<usize>> {
        Ok(vec![0, 1])
    }
    fn reader(&self, split: usize) -> riffle::Result<Box<dyn SplitReader<(u64, i64)>>> {
        Ok(Box::new(IdleSecondReader {
            split,
            next: 0,
            due: Instant::now(),
        }))
    }
}

impl SplitReader<(u64, i64)> for IdleSecondReader {
    fn split_id(&self) -> String {
        self.split.to_string()
    }
    fn read(
        &mut self,
        out: &mut SourceOutput<(u64, i64)>,
        _max: usize,
    ) -> riffle::Result<ReadStatus> {
        if self.split == 1 || Instant::now() < self.due {
            return Ok(ReadStatus::Pending(Some(
                Instant::now() + Duration::from_millis(10),
            )));
        }
        out.emit((self.next % 3, self.next as i64 * 1_000));
        self.next += 1;
        self.due += Duration::from_millis(50);
        Ok(ReadStatus::Ready)
    }
    fn position(&self) -> serde_json::Value {
        serde_json::json!(self.next)
    }
    fn seek(&mut self, position: &serde_json::Value) -> riffle::Result<()> {
        self.next = position.as_u64().unwrap_or(0);
        Ok(())
    }
}

#[test]
fn a_crash_mid_run_restored_from_the_checkpoint_gives_the_failure_free_result() {
    let count = 4_000;
    let run = |crash_at: Option<(&str, u64)>, output: &str| {
        let dir = tempfile::tempdir().unwrap();
        let env = env(dir.path(), 2);
        let mut humans = clicks(&env, count, Some(4_000.0));
        if let Some(("writing", after)) = crash_at {
            // On the writing side, with a transaction open on the shuffle topic.
            humans = humans
                .map(riffle_testing::fail_once_after(after))
                .uid("crash");
        }
        let keyed = humans
            .key_by(|c| c.user_id)
            .through_kafka(shuffle("crash", 2));
        let keyed = match crash_at {
            // On the reading side of the shuffle, after records came through it.
            Some(("reading", after)) => keyed
                .unkeyed()
                .map(riffle_testing::fail_once_after(after))
                .uid("crash")
                .key_by(|c: &Click| c.user_id),
            _ => keyed,
        };
        count_per_minute(&keyed)
            .map(|(user, start, n)| format!("{user} {start} {n}"))
            .sink(KafkaSink::raw(kafka(), output).exactly_once());
        let result = env.execute().unwrap();
        let rows = read_committed(output, Duration::from_secs(60), |_, quiet| {
            quiet > Duration::from_secs(3)
        });
        let mut rows: Vec<String> = rows.into_iter().map(|r| r.value).collect();
        rows.sort();
        (rows, result)
    };
    let (expected, clean) = run(None, &topic("shuffle-clean-out", 2));
    assert_eq!(clean.restarts, 0);
    assert!(expected.len() > 100, "{} rows", expected.len());
    for side in ["reading", "writing"] {
        let (got, crashed) = run(Some((side, 1_500)), &topic("shuffle-crash-out", 2));
        assert!(
            crashed.restarts == 1 && !crashed.restores.is_empty(),
            "crash on the {side} side: the job should have restored a checkpoint: {} restarts, \
             restores {:?}",
            crashed.restarts,
            crashed.restores
        );
        assert_eq!(got, expected, "crash on the {side} side");
    }
}

#[test]
fn bad_shuffle_settings_fail_at_start_naming_the_setting() {
    // Exactly-once without checkpoints.
    let plain = StreamEnv::new();
    let (sink, _) = CollectSink::new();
    plain
        .from_iter(vec![(1u64, 1_000i64)])
        .key_by(|t| t.0)
        .through_kafka(shuffle("no-checkpoints", 2))
        .process(|_, t, ctx| ctx.emit(t))
        .sink(sink);
    let err = plain.execute().unwrap_err().to_string();
    assert!(err.contains("`exactly_once`"), "{err}");
    // A topic that exists with another partition count.
    let existing = shuffle("resized", 2);
    ensure_topics(&kafka(), &[(&existing.topic(), 3)], 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let checkpointed = env(dir.path(), 2);
    let (sink, _) = CollectSink::new();
    checkpointed
        .from_iter(vec![(1u64, 1_000i64)])
        .key_by(|t| t.0)
        .through_kafka(existing)
        .process(|_, t, ctx| ctx.emit(t))
        .sink(sink);
    let err = checkpointed.execute().unwrap_err().to_string();
    assert!(
        err.contains("`partitions`") && err.contains("exists with 3 partitions"),
        "{err}"
    );
}

/// CPU time (user + system) of the process `pid` ("self" for this one), in seconds.
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces): utime is the 12th, stime the 13th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// The pid of the local Kafka broker (a JVM running `kafka.Kafka`), if found.
fn broker_pid() -> Option<String> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            (name.chars().all(|c| c.is_ascii_digit())
                && String::from_utf8_lossy(&cmdline).contains("kafka.Kafka"))
            .then_some(name)
        })
}

/// The cost of a Kafka shuffle against the in-process one: the seed's windowed count per user
/// (500K clicks, ~350K after the bot filter, parallelism 2, checkpoints every second), events
/// per CPU-second of this process, and the broker's CPU meanwhile (shared with whatever else
/// uses it). Release build:
/// `cargo test --release -p riffle-kafka --test shuffle measure_shuffle -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, run by hand"]
fn measure_shuffle_cost() {
    let count = 500_000u64;
    let broker = broker_pid();
    println!("shuffle | wall (s) | riffle CPU (s) | events per riffle CPU-second | broker CPU (s)");
    for mode in ["in-process", "kafka exactly-once", "kafka at-least-once"] {
        let dir = tempfile::tempdir().unwrap();
        let env = env(dir.path(), 2);
        env.configure(|c| c.checkpoints.interval = Some(Duration::from_secs(1)));
        let (sink, out) = CollectSink::new();
        let keyed = clicks(&env, count, None).key_by(|c| c.user_id);
        let keyed = match mode {
            "in-process" => keyed,
            "kafka exactly-once" => keyed.through_kafka(shuffle("measure", 2)),
            _ => keyed.through_kafka(shuffle("measure", 2).at_least_once()),
        };
        count_per_minute(&keyed).sink(sink);
        let (cpu, broker_cpu, started) = (
            cpu_seconds("self"),
            broker.as_deref().map_or(0.0, cpu_seconds),
            Instant::now(),
        );
        env.execute().unwrap();
        let wall = started.elapsed().as_secs_f64();
        let cpu = cpu_seconds("self") - cpu;
        let broker_cpu = broker.as_deref().map_or(0.0, cpu_seconds) - broker_cpu;
        let events: u64 = out.values().iter().map(|r| r.2).sum();
        println!(
            "{mode} | {wall:.2} | {cpu:.2} | {:.0} | {broker_cpu:.2} ({events} events counted)",
            count as f64 / cpu
        );
    }
}

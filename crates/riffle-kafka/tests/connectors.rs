//! The Kafka source and sink against a real broker (started by `scripts/test.sh`): exactly-once
//! copies, offsets in checkpoints and in the consumer group, dead letters, the repair of a commit
//! a failure interrupted, idle partitions, partitions added while the job runs, and a slow
//! (throttled) Kafka sink back-pressuring the source while the consumer lag grows.

mod common;

use std::time::{Duration, Instant};

use common::*;
use riffle::checkpoint::{CheckpointConfig, RestoreFrom};
use riffle::record::Record;
use riffle::sink::{CollectSink, SinkWriter, ThrottledSink};
use riffle::time::WatermarkStrategy;
use riffle::window::Tumbling;
use riffle::{EnvConfig, StreamEnv};
use riffle_kafka::{KafkaSink, KafkaSource, StartFrom, create_partitions};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct Event {
    user: String,
    n: u64,
    ts: i64,
}

fn event_json(user: &str, n: u64, ts: i64) -> String {
    serde_json::to_string(&Event {
        user: user.into(),
        n,
        ts,
    })
    .unwrap()
}

fn env_with_checkpoints(dir: &std::path::Path, parallelism: usize) -> StreamEnv {
    StreamEnv::with_config(EnvConfig {
        parallelism,
        checkpoints: CheckpointConfig {
            interval: Some(Duration::from_millis(300)),
            storage: dir.display().to_string(),
            ..CheckpointConfig::default()
        },
        ..EnvConfig::default()
    })
}

#[test]
fn an_exactly_once_copy_has_every_record_once_and_commits_offsets_to_the_group() {
    let input = topic("copy-in", 4);
    let output = topic("copy-out", 3);
    let mut records: Vec<(i32, String, String)> = (0..2000u64)
        .map(|n| {
            (
                (n % 4) as i32,
                format!("u{}", n % 17),
                event_json(&format!("u{}", n % 17), n, 1_000 + n as i64),
            )
        })
        .collect();
    records.push((1, "bad".into(), "{not json".into()));
    records.push((3, "bad".into(), "[1,2]".into()));
    produce(&input, &records);

    let dir = tempfile::tempdir().unwrap();
    let env = env_with_checkpoints(dir.path(), 2);
    let group = format!("{input}-group");
    let events = env.from_source(
        KafkaSource::<Event>::json(kafka(), [input.clone()])
            .group_id(&group)
            .start_from(StartFrom::Earliest),
    );
    let (dead, letters) = CollectSink::new();
    events.dead_letters().sink(dead);
    events
        .map(|mut e: Event| {
            e.n *= 10;
            e
        })
        .sink(
            KafkaSink::json(kafka(), &output)
                .key_field("user")
                .exactly_once(),
        );
    let job = env.execute_async().unwrap();

    let copied = read_committed(&output, Duration::from_secs(60), |n, _| n >= 2000);
    assert_eq!(
        copied.len(),
        2000,
        "every record once, visible to read_committed"
    );
    // Offsets reach the group once a checkpoint covering everything completed.
    let complete = eventually(Duration::from_secs(30), || {
        committed_offsets(&group, &input, 4).values().sum::<i64>() == 2002
    });
    job.stop();
    let result = job.wait().unwrap();

    let mut values: Vec<Event> = copied
        .iter()
        .map(|record| {
            let event: Event = serde_json::from_str(&record.value).unwrap();
            assert_eq!(record.key, event.user, "keyed by the user field");
            event
        })
        .collect();
    values.sort_by_key(|e| e.n);
    let expected: Vec<Event> = (0..2000u64)
        .map(|n| Event {
            user: format!("u{}", n % 17),
            n: n * 10,
            ts: 1_000 + n as i64,
        })
        .collect();
    assert_eq!(values, expected);
    // Nothing more after the stop (it drained and committed the last transaction).
    assert_eq!(
        read_committed(&output, Duration::from_secs(2), |_, _| false).len(),
        2000
    );

    assert!(
        complete,
        "group offsets: {:?}",
        committed_offsets(&group, &input, 4)
    );
    let mut letters = letters.values();
    letters.sort_by(|a, b| a.split.cmp(&b.split));
    assert_eq!(letters.len(), 2, "{letters:?}");
    assert_eq!(
        (letters[0].split.as_str(), letters[0].position.as_str()),
        (format!("{input}-1").as_str(), "offset 500")
    );
    assert_eq!(letters[0].payload, "{not json");
    assert!(
        letters[0].error.contains("invalid JSON"),
        "{}",
        letters[0].error
    );
    assert_eq!(
        (letters[1].split.as_str(), letters[1].position.as_str()),
        (format!("{input}-3").as_str(), "offset 500")
    );
    assert_eq!(result.bad_records(), 2);
}

fn writer(output: &str, run: &str) -> Box<dyn SinkWriter<Event>> {
    subtask_writer(output, run, 0, 1)
}

fn subtask_writer(
    output: &str,
    run: &str,
    subtask: usize,
    parallelism: usize,
) -> Box<dyn SinkWriter<Event>> {
    use riffle::sink::Sink;
    let sink = KafkaSink::<Event>::json(kafka(), output)
        .key(|e: &Event| e.user.clone())
        .exactly_once()
        .transactional_id_prefix(format!("{output}-txn"));
    sink.writer(&riffle_testing::operator_context(
        "sink",
        run,
        subtask,
        parallelism,
    ))
    .unwrap()
}

fn batch(range: std::ops::Range<u64>) -> Vec<Record<Event>> {
    range
        .map(|n| {
            Record::untimed(Event {
                user: format!("u{}", n % 5),
                n,
                ts: 0,
            })
        })
        .collect()
}

fn committed_ns(output: &str) -> Vec<u64> {
    let mut ns: Vec<u64> = read_committed(output, Duration::from_secs(3), |_, _| false)
        .iter()
        .map(|record| serde_json::from_str::<Event>(&record.value).unwrap().n)
        .collect();
    ns.sort();
    ns
}

#[test]
fn a_commit_interrupted_by_a_failure_is_completed_on_restore_and_never_doubled() {
    let output = topic("interrupted", 2);
    // Run 1: checkpoint 1 pre-commits 0..100 and completes, then the process dies before the
    // commit; 100..150 were written after the barrier.
    let mut first = writer(&output, "run1");
    first.recover(Vec::new()).unwrap();
    first.write(&mut batch(0..100)).unwrap();
    let committable = first
        .pre_commit(1)
        .unwrap()
        .expect("exactly-once sinks store a committable");
    first.write(&mut batch(100..150)).unwrap();
    first.flush().unwrap();
    std::mem::forget(first); // no commit, no abort: as after kill -9
    assert_eq!(
        committed_ns(&output),
        Vec::<u64>::new(),
        "nothing visible before the commit"
    );

    // Run 2 restores checkpoint 1: its transaction becomes visible, what came after does not.
    let mut second = writer(&output, "run2");
    second.recover(vec![committable.clone()]).unwrap();
    assert_eq!(committed_ns(&output), (0..100).collect::<Vec<_>>());
    second.write(&mut batch(100..150)).unwrap(); // replayed after the restore
    let next = second.pre_commit(2).unwrap().unwrap();
    second.commit(2).unwrap();
    assert_eq!(committed_ns(&output), (0..150).collect::<Vec<_>>());

    // Run 3 restores checkpoint 1 again (as if 2 had not completed): no duplicates of 0..100.
    drop(second);
    let mut third = writer(&output, "run3");
    third.recover(vec![committable]).unwrap();
    // And restoring checkpoint 2, whose transaction was committed, adds nothing either.
    let mut fourth = writer(&output, "run4");
    fourth.recover(vec![next]).unwrap();
    assert_eq!(committed_ns(&output), (0..150).collect::<Vec<_>>());
}

#[test]
fn interleaved_interrupted_commits_of_two_subtasks_are_each_repaired_with_their_own_records() {
    // One partition, two subtasks writing in turns: their transactions' offsets interleave.
    let output = topic("interleaved", 1);
    let mut a = subtask_writer(&output, "run1", 0, 2);
    let mut b = subtask_writer(&output, "run1", 1, 2);
    a.recover(Vec::new()).unwrap();
    b.recover(Vec::new()).unwrap();
    for turn in 0..5u64 {
        a.write(&mut batch(turn * 10..turn * 10 + 10)).unwrap();
        a.flush().unwrap();
        std::thread::sleep(Duration::from_millis(60)); // past linger.ms: the batch goes out
        b.write(&mut batch(1000 + turn * 10..1000 + turn * 10 + 10))
            .unwrap();
        b.flush().unwrap();
        std::thread::sleep(Duration::from_millis(60));
    }
    let committables = vec![
        a.pre_commit(1).unwrap().unwrap(),
        b.pre_commit(1).unwrap().unwrap(),
    ];
    std::mem::forget(a); // both die after checkpoint 1 completed, before committing
    std::mem::forget(b);
    assert_eq!(committed_ns(&output), Vec::<u64>::new());

    // Restored at parallelism 1: the one subtask repairs both transactions.
    let mut restored = subtask_writer(&output, "run2", 0, 1);
    restored.recover(committables.clone()).unwrap();
    let expected: Vec<u64> = (0..50).chain(1000..1050).collect();
    assert_eq!(committed_ns(&output), expected);
    // Restoring the same checkpoint again copies nothing twice.
    let mut again = subtask_writer(&output, "run3", 0, 1);
    again.recover(committables).unwrap();
    assert_eq!(committed_ns(&output), expected);
}

#[test]
fn an_idle_partition_does_not_stall_event_time_windows() {
    let input = topic("idle-in", 2);
    // Only partition 0 gets clicks, one per second of event time, 100 per second of wall time;
    // partition 1 stays empty.
    let producer = {
        let input = input.clone();
        std::thread::spawn(move || {
            let producer = TestProducer::new(&[("linger.ms", "0")]);
            for n in 0..300u64 {
                let click = event_json(&format!("u{}", n % 3), n, n as i64 * 1_000);
                send(&producer, &input, &[(0, "u".into(), click)]);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let env = StreamEnv::new();
    env.set_parallelism(1);
    let (sink, counts) = CollectSink::new();
    env.from_source_with_watermarks(
        KafkaSource::<Event>::json(kafka(), [input.clone()]).start_from(StartFrom::Earliest),
        WatermarkStrategy::bounded_out_of_orderness(Duration::from_millis(0))
            .with_timestamps(|e: &Event| e.ts)
            .with_idleness(Duration::from_millis(500)),
    )
    .key_by(|e: &Event| e.user.clone())
    .window(Tumbling::of(Duration::from_secs(60)))
    .aggregate(riffle::aggregate::Count)
    .map(|r: riffle::window::WindowResult<String, u64>| (r.key, r.window_start, r.value))
    .sink(sink);
    let job = env.execute_async().unwrap();
    // The first minute (t 0..59 s: 60 clicks, 20 per user) closes although partition 1 is silent.
    let fired = eventually(Duration::from_secs(30), || counts.len() >= 3);
    producer.join().unwrap();
    job.stop();
    job.wait().unwrap();
    assert!(
        fired,
        "the window of the first minute did not fire: {:?}",
        counts.values()
    );
    let mut first_minute: Vec<(String, i64, u64)> = counts
        .values()
        .into_iter()
        .filter(|(_, start, _)| *start == 0)
        .collect();
    first_minute.sort();
    assert_eq!(
        first_minute,
        vec![
            ("u0".into(), 0, 20),
            ("u1".into(), 0, 20),
            ("u2".into(), 0, 20)
        ]
    );
}

/// Runs `env` to its end, failing the test if it does not end within two minutes.
fn finishes(env: StreamEnv) -> riffle::JobResult {
    let job = env.execute_async().unwrap();
    assert!(
        eventually(Duration::from_secs(120), || job.is_finished()),
        "a bounded job did not end"
    );
    job.wait().unwrap()
}

/// Whether a checkpoint under `dir` completed (its manifest is written last).
fn has_checkpoint(dir: &std::path::Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let path = e.path();
            path.ends_with("_manifest.json") || (path.is_dir() && has_checkpoint(&path))
        })
    })
}

#[test]
fn a_bounded_read_ends_at_the_offsets_of_its_start_even_after_a_restore() {
    use rdkafka::producer::{BaseRecord, Producer};
    const RECORDS: u64 = 3_000;
    let input = topic("bounded-in", 3);
    let records: Vec<(i32, String, String)> = (0..RECORDS)
        .map(|n| ((n % 3) as i32, "k".into(), event_json("a", n, 0)))
        .collect();
    produce(&input, &records);
    // Partition 0 ends with an aborted transaction: markers a reader skips, then the end.
    let transactional: rdkafka::producer::BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("transactional.id", format!("{input}-aborted"))
        .create()
        .unwrap();
    transactional
        .init_transactions(Duration::from_secs(30))
        .unwrap();
    transactional.begin_transaction().unwrap();
    let aborted = event_json("aborted", 999_999, 0);
    transactional
        .send(
            BaseRecord::<str, str>::to(&input)
                .partition(0)
                .payload(&aborted),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    transactional.flush(Duration::from_secs(30)).unwrap();
    transactional
        .abort_transaction(Duration::from_secs(30))
        .unwrap();

    // Once a checkpoint holds the readers' positions, the job writes 10 more records and fails:
    // the restored run must not read them, it ends where the first run would have.
    let dir = tempfile::tempdir().unwrap();
    let env = env_with_checkpoints(dir.path(), 2);
    env.configure(|c: &mut EnvConfig| {
        c.checkpoints.interval = Some(Duration::from_millis(50));
        c.checkpoints.restart = riffle::checkpoint::RestartStrategy::FixedDelay {
            attempts: 2,
            delay: Duration::from_millis(20),
        };
    });
    let (sink, seen) = CollectSink::new();
    let later = input.clone();
    let checkpoints = dir.path().to_path_buf();
    let failed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    env.from_source(
        KafkaSource::<Event>::json(kafka(), [input.clone()])
            .start_from(StartFrom::Earliest)
            .until_latest(),
    )
    .map(move |e: Event| {
        std::thread::sleep(Duration::from_millis(1)); // room for checkpoints
        if has_checkpoint(&checkpoints) && !failed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let more: Vec<(i32, String, String)> = (0..10)
                .map(|n| {
                    (
                        (n % 3) as i32,
                        "k".into(),
                        event_json("later", RECORDS + n, 0),
                    )
                })
                .collect();
            produce(&later, &more);
            panic!("injected failure");
        }
        e
    })
    .sink(sink);
    let result = finishes(env);
    assert_eq!(result.restarts, 1, "failed once, after a checkpoint");
    let mut ns: Vec<u64> = seen.values().iter().map(|e| e.n).collect();
    ns.sort();
    ns.dedup(); // records after the checkpoint were read again after the restore
    let past_end = ns.iter().filter(|n| **n >= RECORDS).count();
    assert!(
        ns.len() as u64 - past_end as u64 == RECORDS && past_end == 0,
        "read {} distinct records, {past_end} of them written after the start",
        ns.len()
    );

    // A new run reads what is there at its start: the 3 010 committed records.
    let env = StreamEnv::new();
    env.set_parallelism(2);
    let (sink, seen) = CollectSink::new();
    env.from_source(
        KafkaSource::<Event>::json(kafka(), [input])
            .start_from(StartFrom::Earliest)
            .until_latest(),
    )
    .sink(sink);
    finishes(env);
    assert_eq!(seen.len() as u64, RECORDS + 10);
}

#[test]
fn partitions_added_while_the_job_runs_are_read_from_their_beginning() {
    let input = topic("grow-in", 1);
    produce(&input, &[(0, "k".into(), event_json("a", 1, 0))]);
    let env = StreamEnv::new();
    env.set_parallelism(2);
    let (sink, seen) = CollectSink::new();
    env.from_source(
        KafkaSource::<Event>::json(kafka(), [input.clone()])
            .start_from(StartFrom::Earliest)
            .partition_discovery(Some(Duration::from_millis(300))),
    )
    .sink(sink);
    let job = env.execute_async().unwrap();
    assert!(eventually(Duration::from_secs(30), || seen.len() == 1));
    create_partitions(&kafka(), &input, 3).unwrap();
    produce(
        &input,
        &[
            (1, "k".into(), event_json("b", 2, 0)),
            (2, "k".into(), event_json("c", 3, 0)),
        ],
    );
    let grown = eventually(Duration::from_secs(30), || seen.len() == 3);
    job.stop();
    job.wait().unwrap();
    assert!(grown, "{:?}", seen.values());
    let mut ns: Vec<u64> = seen.values().iter().map(|e| e.n).collect();
    ns.sort();
    assert_eq!(ns, vec![1, 2, 3]);
}

#[test]
fn a_partition_added_after_a_savepoint_is_read_from_its_beginning_on_restore() {
    let input = topic("grow-restore-in", 1);
    // Before the first job: not read, the source starts at the end.
    produce(&input, &[(0, "k".into(), event_json("a", 1, 0))]);
    let dir = tempfile::tempdir().unwrap();
    let run = |restore: Option<String>| {
        let env = env_with_checkpoints(dir.path(), 2);
        env.configure(|c| c.checkpoints.restore = restore.map(RestoreFrom::Savepoint));
        let (sink, seen) = CollectSink::new();
        env.from_source(
            KafkaSource::<Event>::json(kafka(), [input.clone()])
                .start_from(StartFrom::Latest)
                .partition_discovery(None),
        )
        .sink(sink);
        (env.execute_async().unwrap(), seen)
    };
    let (job, seen) = run(None);
    // The source has resolved `Latest` once a checkpoint holds its position.
    assert!(eventually(Duration::from_secs(30), || !job
        .checkpoints()
        .is_empty()));
    produce(&input, &[(0, "k".into(), event_json("b", 2, 0))]);
    assert!(eventually(Duration::from_secs(30), || seen.len() == 1));
    let savepoint = job
        .stop_with_savepoint(dir.path().join("savepoint").to_str().unwrap())
        .unwrap();
    job.wait().unwrap();
    create_partitions(&kafka(), &input, 2).unwrap();
    produce(
        &input,
        &[
            (1, "k".into(), event_json("c", 3, 0)),
            (0, "k".into(), event_json("d", 4, 0)),
        ],
    );
    let (job, restored) = run(Some(savepoint));
    let read = eventually(Duration::from_secs(30), || restored.len() == 2);
    job.stop();
    job.wait().unwrap();
    assert!(read, "{:?}", restored.values());
    let mut ns: Vec<u64> = restored.values().iter().map(|e| e.n).collect();
    ns.sort();
    // d after the savepoint's offset; c from the beginning of the new partition, not its end.
    assert_eq!(ns, vec![3, 4]);
    assert_eq!(
        seen.values().iter().map(|e| e.n).collect::<Vec<_>>(),
        vec![2]
    );
}

#[test]
fn a_missing_topic_fails_at_start_naming_it() {
    let env = StreamEnv::new();
    let (sink, _) = CollectSink::new();
    env.from_source(KafkaSource::<Event>::json(
        kafka(),
        ["no-such-topic-riffle"],
    ))
    .sink(sink);
    let err = env.execute().unwrap_err().to_string();
    assert!(
        err.contains("no-such-topic-riffle") && err.contains("does not exist"),
        "{err}"
    );
}

/// A sink to a topic that does not exist (the test broker creates none on use) fails when the
/// job starts, naming the topic and the setting, at-least-once and exactly-once, instead of
/// waiting out the producer's message timeout (two minutes) on its first record.
#[test]
fn a_sink_to_a_missing_topic_fails_at_start_naming_it() {
    for exactly_once in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let env = env_with_checkpoints(dir.path(), 1);
        let sink = KafkaSink::<String>::raw(kafka(), "no-such-output-topic-riffle");
        let sink = match exactly_once {
            true => sink.exactly_once(),
            false => sink,
        };
        env.from_iter(vec!["a".to_string(), "b".to_string()])
            .sink(sink);
        let started = Instant::now();
        let err = env.execute().unwrap_err().to_string();
        assert!(
            err.contains("`topic`")
                && err.contains("no-such-output-topic-riffle")
                && err.contains("does not exist"),
            "{err}"
        );
        // Within the check's 10 s (not the producer's 120 s message timeout).
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{:?}",
            started.elapsed()
        );
    }
}

/// Two exactly-once sinks of one job given the same transactional id prefix would fence each
/// other's producers (a fatal error mid-run): the job fails at start naming both and the
/// setting.
#[test]
fn two_exactly_once_sinks_with_one_transactional_id_prefix_fail_at_start() {
    let job = |first: &str, second: &str| {
        let env = StreamEnv::new();
        let events = env.from_iter((0..10u64).map(|n| Event {
            user: "u".into(),
            n,
            ts: 0,
        }));
        let sink = |topic: &str, prefix: &str| {
            let sink = KafkaSink::<Event>::json(kafka(), topic).exactly_once();
            if prefix.is_empty() {
                sink
            } else {
                sink.transactional_id_prefix(prefix)
            }
        };
        events.sink(sink("out-a", first)).name("write a");
        events.sink(sink("out-b", second)).name("write b");
        env
    };
    let err = job("clicks-job", "clicks-job")
        .execute()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`write a` and `write b`")
            && err.contains("`clicks-job` (transactional_id_prefix)"),
        "{err}"
    );
}

#[test]
fn a_throttled_kafka_sink_back_pressures_the_source_and_the_lag_grows() {
    let input = topic("slow-in", 2);
    let output = topic("slow-out", 1);
    // Input at ~20K records/s for 8 s; the sink writes at most 2K/s.
    let writer = {
        let input = input.clone();
        std::thread::spawn(move || {
            let producer = TestProducer::new(&[]);
            for n in 0..160_000u64 {
                producer.send(&input, (n % 2) as i32, None, n.to_string().as_bytes());
                if n % 2_000 == 1_999 {
                    producer.flush();
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            producer.flush();
        })
    };
    let env = StreamEnv::new();
    env.set_parallelism(1);
    env.from_source(
        KafkaSource::<u64>::json(kafka(), [input.clone()]).start_from(StartFrom::Earliest),
    )
    .sink(ThrottledSink::new(
        KafkaSink::<u64>::json(kafka(), &output),
        2_000.0,
    ));
    let job = env.execute_async().unwrap();
    let lag = |job: &riffle::JobHandle| -> i64 {
        job.metrics()
            .operators
            .iter()
            .flat_map(|o| o.split_lag.values().copied())
            .sum()
    };
    let in_flight = |job: &riffle::JobHandle| -> u64 {
        let metrics = job.metrics();
        let read: u64 = metrics
            .operators
            .iter()
            .filter(|o| o.name.starts_with("Source:"))
            .map(|o| o.records_out)
            .sum();
        let written: u64 = metrics
            .operators
            .iter()
            .filter(|o| o.name.starts_with("Sink:"))
            .map(|o| o.records_in)
            .sum();
        read - written
    };
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    let early = lag(&job);
    let mut most_in_flight = 0;
    while started.elapsed() < Duration::from_secs(8) {
        most_in_flight = most_in_flight.max(in_flight(&job));
        std::thread::sleep(Duration::from_millis(100));
    }
    let late = lag(&job);
    // The REST API shows the lag per partition, and the slow sink as the bottleneck.
    let web = riffle_web::WebServer::start(
        job.monitor(),
        riffle_web::WebConfig {
            register: false,
            ..riffle_web::WebConfig::any_port()
        },
    )
    .unwrap();
    let api = riffle_web::client::JobClient::new(&web.address().to_string(), None);
    let source = api
        .get(&format!("/api/v1/job/operators/Source: kafka {input}"))
        .unwrap();
    let partitions: Vec<&String> = source["split_lag"].as_object().unwrap().keys().collect();
    assert_eq!(partitions, [&format!("{input}-0"), &format!("{input}-1")]);
    let shown: i64 = source["split_lag"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_i64().unwrap())
        .sum();
    assert!(
        shown > 20_000,
        "the API shows the lag: {shown} (metrics said {late})"
    );
    writer.join().unwrap();
    job.cancel();
    let _ = job.wait();
    assert!(
        early > 0 && late > early + 20_000,
        "consumer lag should grow: {early} then {late}"
    );
    // Back-pressure: the source reads only what the pipeline's bounded buffers hold beyond what
    // the sink wrote, not the whole topic into memory.
    assert!(
        most_in_flight < 40_000,
        "{most_in_flight} records between source and sink"
    );
}

/// Measures what a restore costs the exactly-once sink per transaction the restored checkpoint
/// pre-committed: when its commit went through (a check), when a SIGKILL interrupted the commit
/// (the rewrite: read the records back, write them again in a new transaction), and the same with
/// as many records committed after it in the same partitions by another subtask (the check then
/// scans the partitions' tail). Prints a table; run by hand (docs/operations.md, "What a restore
/// costs"): `cargo test -p riffle-kafka --test connectors measure_restore -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, run by hand"]
fn measure_restore_of_committed_and_interrupted_transactions() {
    println!(
        "records per transaction | committed: check (s) | interrupted: rewrite (s) | interrupted, as many committed after it (s)"
    );
    for records in [10_000u64, 50_000, 150_000] {
        let mut seconds = [0.0f64; 3];
        for (i, case) in ["committed", "interrupted", "tail"].into_iter().enumerate() {
            let output = topic(&format!("restore-cost-{records}-{case}"), 2);
            let mut first = subtask_writer(&output, "run1", 0, 2);
            first.recover(Vec::new()).unwrap();
            first.write(&mut batch(0..records)).unwrap();
            let committable = first.pre_commit(1).unwrap().unwrap();
            if case == "committed" {
                first.commit(1).unwrap();
                drop(first);
            } else {
                std::mem::forget(first); // as after kill -9 between the checkpoint and the commit
            }
            let mut expected = records;
            if case == "tail" {
                let mut other = subtask_writer(&output, "run1", 1, 2);
                other.recover(Vec::new()).unwrap();
                other.write(&mut batch(records..2 * records)).unwrap();
                other.pre_commit(1).unwrap().unwrap();
                other.commit(1).unwrap();
                expected += records;
            }
            let started = Instant::now();
            let mut second = subtask_writer(&output, "run2", 0, 2);
            second.recover(vec![committable]).unwrap();
            seconds[i] = started.elapsed().as_secs_f64();
            assert_eq!(committed_ns(&output).len() as u64, expected, "exactly once");
        }
        println!(
            "{records} | {:.2} | {:.2} | {:.2}",
            seconds[0], seconds[1], seconds[2]
        );
    }
}

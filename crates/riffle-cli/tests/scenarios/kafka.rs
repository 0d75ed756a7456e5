//! The seed's job from Kafka to Kafka (`riffle demo --kafka`), against the broker
//! `scripts/test.sh` starts: killed with SIGKILL at random points and restored from its latest
//! checkpoint, every (user, window) count appears exactly once in `agg-clicks` for a
//! read_committed reader and equals a batch computation over the input topic; every very late
//! click is in `late-clicks` or counted, once; malformed input lands in the dead-letter topic.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use riffle::source::datagen::Generator;
use riffle_cli::clicks::is_bot;
use riffle_cli::demos::UserCount;
use riffle_clicks::{ClickGenerator, ClicksConfig, DEFAULT_START_TIME};
use riffle_kafka::testing::{TestProducer, bootstrap, read_committed};

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The values of `topic` a read_committed reader sees, once `quiet` passed without new ones
/// after at least `min` records (or `wait` passed).
pub(crate) fn read_topic(topic: &str, min: usize, wait: Duration, quiet: Duration) -> Vec<String> {
    read_committed(topic, wait, |n, silent| n >= min && silent > quiet)
        .into_iter()
        .map(|record| record.value)
        .collect()
}

pub(crate) use crate::Job;

pub(crate) fn spawn(args: &[String], dir: &std::path::Path) -> Job {
    // Every run's output goes to `riffle.log` in `dir`, for a failing test to show
    // (`log_tail`).
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("riffle.log"))
        .unwrap();
    Job(Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(args)
        .current_dir(dir)
        .env("RIFFLE_LOG", "warn,riffle=info")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap())
}

/// The last lines the runs `spawn` started in `dir` wrote.
pub(crate) fn log_tail(dir: &std::path::Path) -> String {
    let text = std::fs::read_to_string(dir.join("riffle.log")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

/// Waits (up to a minute) until `topic` exists with `partitions` partitions.
pub(crate) fn wait_for_partitions(topic: &str, partitions: usize) {
    let ready = Instant::now();
    let metadata: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    while metadata
        .fetch_metadata(Some(topic), Duration::from_secs(5))
        .map_or(true, |m| m.topics()[0].partitions().len() < partitions)
    {
        assert!(
            ready.elapsed() < Duration::from_secs(60),
            "the demo did not create {topic}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The arguments of the seed's job between Kafka topics under `prefix`, without its own
/// producer: 1 s windows, lateness 0, 3 s out of order, a checkpoint every `checkpoint_ms`,
/// parallelism 2, checkpoints in `checkpoints/`.
pub(crate) fn seed_job_args(prefix: &str, checkpoint_ms: u64) -> Vec<String> {
    let checkpoint_ms = checkpoint_ms.to_string();
    [
        "demo",
        "--no-web",
        "--kafka",
        &bootstrap(),
        "--kafka-topic-prefix",
        prefix,
        "--kafka-no-producer",
        "--window-secs",
        "1",
        "--lateness-secs",
        "0",
        "--out-of-orderness-secs",
        "3",
        "--checkpoint-interval-ms",
        &checkpoint_ms,
        "--checkpoint-dir",
        "checkpoints",
        "-p",
        "2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn the_seed_job_between_kafka_topics_survives_kill_9_with_every_count_exactly_once() {
    let prefix = format!("kill9-{}-{}-", std::process::id(), now_ms());
    let clicks_topic = format!("{prefix}clicks");
    let dir = tempfile::tempdir().unwrap();
    let args = seed_job_args(&prefix, 300);

    // The first run creates the topics; then the input goes in: 200K clicks over 10 s of event
    // time, 3 malformed records, and one bot click per partition far ahead so that every window
    // of the input closes.
    let mut first = spawn(&args, dir.path());
    wait_for_partitions(&clicks_topic, 8);
    let generator = ClickGenerator::new(ClicksConfig {
        users: 300,
        events_per_second: 20_000.0,
        late_share: 0.002,
        ..ClicksConfig::default()
    });
    // Very late clicks (6 minutes) fall in windows long closed: to `late-clicks`, unless they
    // arrive before every partition has a watermark (then they are counted in their window).
    let is_late = |c: &riffle_clicks::Click| c.event_time < DEFAULT_START_TIME - 60_000;
    let clicks: Vec<_> = (0..200_000u64).map(|i| generator.generate(i)).collect();
    let window_of = |t: i64| t - t.rem_euclid(1000);
    let mut expected: BTreeMap<(u64, i64), u64> = BTreeMap::new();
    let mut late_by_window: BTreeMap<(u64, i64), u64> = BTreeMap::new();
    let mut late_clicks: BTreeMap<(u64, i64), u64> = BTreeMap::new();
    for click in clicks.iter().filter(|c| !is_bot(&c.user_agent)) {
        let key = (click.user_id, window_of(click.event_time));
        if is_late(click) {
            *late_by_window.entry(key).or_default() += 1;
            *late_clicks
                .entry((click.user_id, click.event_time))
                .or_default() += 1;
        } else {
            *expected.entry(key).or_default() += 1;
        }
    }
    assert!(late_clicks.len() > 100, "the input has late clicks");
    // Written over ~4 s while the job runs (and is killed): the end of the input, a bot click far
    // ahead in every partition, comes last, so no run can finish before the first kill.
    let writer = {
        let topic = clicks_topic.clone();
        std::thread::spawn(move || {
            let producer = TestProducer::new(&[]);
            let send = |partition: i32, payload: String| {
                producer.send(&topic, partition, None, payload.as_bytes())
            };
            for (i, click) in clicks.iter().enumerate() {
                send(
                    (click.user_id % 8) as i32,
                    serde_json::to_string(click).unwrap(),
                );
                if i == 1_000 || i == 50_000 || i == 150_000 {
                    send((i % 8) as i32, format!("{{\"not a click\": {i}"));
                }
                if i % 5_000 == 4_999 {
                    producer.flush();
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            let last_time = clicks.iter().map(|c| c.event_time).max().unwrap();
            for partition in 0..8 {
                let mut bot = clicks[0].clone();
                bot.user_agent = "Googlebot/2.1".into();
                bot.event_time = last_time + 60_000;
                assert!(is_bot(&bot.user_agent));
                send(partition, serde_json::to_string(&bot).unwrap());
            }
            producer.flush();
        })
    };

    // Kill -9 at random points, restore from the latest checkpoint each time. The first kill
    // comes while the input is still being written, so that the restores have work to do.
    let counts_topic = format!("{prefix}agg-clicks");
    let mut restored = args.clone();
    restored.extend(["--restore".to_string(), "latest".to_string()]);
    let mut child = first;
    let mut kills = Vec::new();
    for round in 0..3u64 {
        let random = (now_ms() * 7919 + round * 1237) % 1_000;
        let pause = if round == 0 {
            700 + random / 2
        } else {
            1_500 + random * 2
        };
        std::thread::sleep(Duration::from_millis(pause));
        child.kill(); // SIGKILL
        kills.push(pause);
        if round == 0 {
            let partial = read_topic(
                &counts_topic,
                0,
                Duration::from_secs(10),
                Duration::from_secs(1),
            );
            assert!(
                partial.len() < expected.len(),
                "the first kill came after the job had written everything ({} counts)",
                partial.len()
            );
        }
        child = spawn(&restored, dir.path());
    }
    first = child;
    writer.join().unwrap();

    let lines = read_topic(
        &counts_topic,
        expected.len(),
        Duration::from_secs(180),
        Duration::from_secs(5),
    );
    first.kill();

    let mut seen: BTreeMap<(u64, i64), u64> = BTreeMap::new();
    let mut early: BTreeMap<(u64, i64), u64> = BTreeMap::new();
    for line in &lines {
        let count: UserCount = serde_json::from_str(line).unwrap();
        assert!(!count.update, "no allowed lateness, no updates: {line}");
        let key = (count.user_id, count.window_start);
        let counts = if count.window_start < DEFAULT_START_TIME - 60_000 {
            &mut early
        } else {
            &mut seen
        };
        let previous = counts.insert(key, count.count);
        assert!(
            previous.is_none(),
            "{line} appears twice (kills after {kills:?} ms)"
        );
    }
    // Every late click is either in `late-clicks` or counted in its window, once.
    let late_lines = read_topic(
        &format!("{prefix}late-clicks"),
        1,
        Duration::from_secs(30),
        Duration::from_secs(2),
    );
    let mut late_out: BTreeMap<(u64, i64), u64> = BTreeMap::new();
    for line in &late_lines {
        let click: riffle_cli::clicks::EnrichedClick = serde_json::from_str(line).unwrap();
        let n = late_out
            .entry((click.user_id, window_of(click.event_time)))
            .or_default();
        *n += 1;
        match late_clicks.get_mut(&(click.user_id, click.event_time)) {
            Some(left) if *left > 0 => *left -= 1,
            _ => panic!("{line} is not a late click of the input, or appears twice"),
        }
    }
    assert!(!late_lines.is_empty(), "late clicks reach late-clicks");
    for (key, total) in &late_by_window {
        let counted = early.get(key).copied().unwrap_or(0);
        let sent = late_out.get(key).copied().unwrap_or(0);
        assert_eq!(
            counted + sent,
            *total,
            "late clicks of {key:?}: {counted} counted, {sent} in late-clicks"
        );
    }
    assert!(
        early.keys().all(|k| late_by_window.contains_key(k)),
        "no counts for windows without late clicks"
    );
    assert_eq!(seen.len(), expected.len(), "kills after {kills:?} ms");
    assert!(
        seen == expected,
        "the counts differ from the batch computation (kills after {kills:?} ms)"
    );

    let dead = read_topic(
        &format!("{prefix}clicks-dlq"),
        3,
        Duration::from_secs(30),
        Duration::from_secs(2),
    );
    assert_eq!(dead.len(), 3, "{dead:?}");
    for letter in &dead {
        let letter: riffle::source::DeadLetter = serde_json::from_str(letter).unwrap();
        assert!(letter.payload.starts_with("{\"not a click\""), "{letter:?}");
        assert!(letter.error.contains("invalid JSON"), "{letter:?}");
    }
}

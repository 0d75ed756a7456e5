//! The kill -9 suite between Kafka topics (issue 27): the seed's job in one process (`riffle demo
//! --kafka B`, parallelism 2, exactly-once sinks: a transaction per checkpoint and sink), heap
//! and RocksDB state, killed with SIGKILL at the crash points of each seed's plan and restored
//! with `--restore latest`. Each seed has its own topics, with the same input written before the
//! first run: clicks in 8 partitions, 3 malformed records, and a bot click far ahead in every
//! partition so that every window of the input closes. The job never ends by itself: once every
//! count is committed it is stopped with SIGINT (and killed at `final checkpoint completed` or
//! at its summary), restored once more and stopped again. What a `read_committed` reader then
//! sees in `agg-clicks`, `late-clicks` and `clicks-dlq` must equal, line for line, what a run
//! never killed committed (and its counts a batch computation of the input).
//!
//! Kills after a checkpoint completed are sorted by how far the commit of its transactions had
//! come, read from the next run's recovery: each transaction the restored checkpoint
//! pre-committed is found committed or not (`checked a transaction ... committed=`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use riffle::source::datagen::Generator;
use riffle_cli::clicks::is_bot;
use riffle_cli::demos::UserCount;
use riffle_clicks::{Click, ClickGenerator, ClicksConfig};
use riffle_kafka::KafkaConnection;
use riffle_kafka::testing::{TestProducer, bootstrap};

use super::run::{CHECKPOINT, Ended, Kill, Process, Trigger};
use super::{
    Budget, CommitState, CrashPoint, Diff, Lines, Moments, Tally, count_lines, diff_lines, keep,
};
use crate::kafka::{now_ms, read_topic, seed_job_args, wait_for_partitions};

/// The log the triggers and the commit states read.
const LOG: &str = "riffle=info,riffle_kafka=info";

/// Clicks in the input.
const CLICKS: u64 = 60_000;

/// The input is written in chunks of this many clicks ...
const CHUNK: usize = 2_000;

/// ... over about this many seconds.
const WRITE_SECS: u64 = 8;

/// Malformed records in the input: each becomes one dead letter.
const BAD: usize = 3;

/// The recovery's line for each transaction the restored checkpoint pre-committed.
const CHECKED: &str = "checked a transaction the restored checkpoint pre-committed";

/// The input and the counts a batch computation gives.
fn input() -> (Vec<Click>, BTreeMap<(u64, i64), u64>) {
    let generator = ClickGenerator::new(ClicksConfig {
        users: 300,
        events_per_second: 10_000.0,
        late_share: 0.0,
        ..ClicksConfig::default()
    });
    let clicks: Vec<Click> = (0..CLICKS).map(|i| generator.generate(i)).collect();
    let mut expected = BTreeMap::new();
    for click in clicks.iter().filter(|c| !is_bot(&c.user_agent)) {
        let window = click.event_time - click.event_time.rem_euclid(1000);
        *expected.entry((click.user_id, window)).or_default() += 1;
    }
    (clicks, expected)
}

/// The topics of one run under `prefix`.
struct Topics {
    prefix: String,
}

impl Topics {
    fn new(case: &str, name: &str) -> Topics {
        Topics {
            prefix: format!("ks-{case}-{name}-{}-{}-", std::process::id(), now_ms()),
        }
    }

    fn name(&self, topic: &str) -> String {
        format!("{}{topic}", self.prefix)
    }

    fn all(&self) -> [String; 4] {
        ["clicks", "agg-clicks", "late-clicks", "clicks-dlq"].map(|t| self.name(t))
    }

    /// Creates the topics as the demo does (and waits until they are there).
    fn create(&self) {
        let kafka = KafkaConnection::new(bootstrap());
        let [input, counts, late, dead] = self.all();
        riffle_kafka::ensure_topics(
            &kafka,
            &[(&input, 8), (&counts, 8), (&late, 1), (&dead, 1)],
            1,
        )
        .expect("topics created");
        wait_for_partitions(&input, 8);
        wait_for_partitions(&counts, 8);
    }

    /// Writes the input into `clicks` over about [`WRITE_SECS`] (the job runs, and is killed,
    /// meanwhile): the clicks by user in 8 partitions (an idempotent producer keeps their order,
    /// so dead letters name the same offsets in every run), [`BAD`] malformed records, and at
    /// the end a bot click far ahead in every partition.
    fn write_input(&self, clicks: Vec<Click>) -> std::thread::JoinHandle<()> {
        let input = self.name("clicks");
        std::thread::spawn(move || {
            let producer = TestProducer::new(&[("enable.idempotence", "true")]);
            let chunks = clicks.len().div_ceil(CHUNK) as u64;
            let pause = Duration::from_millis(WRITE_SECS * 1_000 / chunks);
            for (i, click) in clicks.iter().enumerate() {
                let payload = serde_json::to_string(click).unwrap();
                producer.send(&input, (click.user_id % 8) as i32, None, payload.as_bytes());
                if i % 20_000 == 10_000 {
                    let bad = format!("{{\"not a click\": {i}");
                    producer.send(&input, (i % 8) as i32, None, bad.as_bytes());
                }
                if i % CHUNK == CHUNK - 1 {
                    producer.flush();
                    std::thread::sleep(pause);
                }
            }
            let last_time = clicks.iter().map(|c| c.event_time).max().unwrap();
            for partition in 0..8 {
                let mut bot = clicks[0].clone();
                bot.user_agent = "Googlebot/2.1".into();
                bot.event_time = last_time + 60_000;
                assert!(is_bot(&bot.user_agent));
                let payload = serde_json::to_string(&bot).unwrap();
                producer.send(&input, partition, None, payload.as_bytes());
            }
            producer.flush();
        })
    }

    /// What a `read_committed` reader sees in the three outputs, `reference` lines expected in
    /// each (it reads until that many came and a second passed without more, or 20 s); the
    /// topic names in dead letters replaced by `<prefix>`.
    fn outputs(&self, reference: Option<&BTreeMap<String, Lines>>) -> BTreeMap<String, Lines> {
        ["agg-clicks", "late-clicks", "clicks-dlq"]
            .iter()
            .map(|topic| {
                let want = reference.map_or(0, |r| r[*topic].values().sum::<usize>());
                let lines = read_topic(
                    &self.name(topic),
                    want,
                    Duration::from_secs(20),
                    Duration::from_secs(1),
                );
                let lines: Vec<String> = lines
                    .iter()
                    .map(|l| l.replace(&self.prefix, "<prefix>"))
                    .collect();
                (
                    topic.to_string(),
                    count_lines(lines.iter().map(String::as_str)),
                )
            })
            .collect()
    }

    /// How many counts are committed now (a read of at most `wait`).
    fn counts_now(&self, want: usize, wait: Duration) -> usize {
        read_topic(&self.name("agg-clicks"), want, wait, Duration::ZERO).len()
    }

    fn delete(&self) {
        let topics = self.all();
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        let _ = riffle_kafka::delete_topics(&KafkaConnection::new(bootstrap()), &names);
    }
}

/// The flags of every run: the seed's job on the topics of `topics`, checkpoints every 300 ms,
/// `-p 2`, `state` flags, `--restore latest` (a fresh start when there is no checkpoint).
fn job_args(topics: &Topics, state: &[&str]) -> Vec<String> {
    let mut args = seed_job_args(&topics.prefix, 300);
    args.extend(state.iter().map(|s| s.to_string()));
    args.extend(["--restore", "latest"].map(str::to_string));
    args
}

/// The crash points of one seed: one for the fresh start, two or three for restored runs; the
/// last, at the end, is chosen by [`finish`].
fn plan(moments: &mut Moments, run_ms: u64) -> Vec<Kill> {
    let start = |m: &mut Moments| Kill::new("start", Trigger::After(m.millis(2_500)));
    let mid = |m: &mut Moments| Kill::new("mid", Trigger::After(m.millis(run_ms.max(1_000))));
    let at_checkpoint = |m: &mut Moments, kind, delay| {
        Kill::new(
            kind,
            Trigger::AtLog {
                text: CHECKPOINT,
                n: 1 + m.next(4) as usize,
                delay,
            },
        )
    };
    let restore = |m: &mut Moments| {
        Kill::new(
            "restore",
            Trigger::AtLog {
                text: "job: restoring",
                n: 1,
                delay: m.millis(50),
            },
        )
    };
    let mut kills = vec![match moments.next(4) {
        0 => start(moments),
        1 => mid(moments),
        2 => at_checkpoint(moments, "checkpoint", Duration::ZERO),
        _ => {
            let delay = Duration::from_micros(moments.next(3_000));
            at_checkpoint(moments, "commit", delay)
        }
    }];
    for _ in 0..2 + moments.next(2) {
        kills.push(match moments.next(4) {
            0 => restore(moments),
            1 => at_checkpoint(moments, "checkpoint", Duration::ZERO),
            2 => {
                let delay = Duration::from_micros(moments.next(3_000));
                at_checkpoint(moments, "commit", delay)
            }
            _ => mid(moments),
        });
    }
    kills
}

/// How far the commit of checkpoint `killed_after` had come when its run was killed, from the
/// recovery of the run after it (`stderr`), if that restored it.
fn commit_state(stderr: &str, killed_after: u64) -> Option<CommitState> {
    let restored = stderr
        .lines()
        .find(|l| l.contains("job: restoring"))
        .and_then(|l| l.split("from=checkpoint ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|id| id.parse::<u64>().ok())?;
    if restored != killed_after {
        return None;
    }
    let checked: Vec<bool> = stderr
        .lines()
        .filter(|l| l.contains(CHECKED))
        .map(|l| l.contains("committed=true"))
        .collect();
    Some(
        match (checked.iter().filter(|c| **c).count(), checked.len()) {
            (_, 0) => CommitState::Nothing,
            (0, _) => CommitState::NotStarted,
            (done, all) if done == all => CommitState::Done,
            _ => CommitState::Inside,
        },
    )
}

/// What the runs of one seed did.
#[derive(Default)]
struct SeedOutcome {
    points: Vec<CrashPoint>,
    runs: Vec<String>,
    problems: Vec<String>,
    /// The last crash point, with the checkpoint completed before it: the next run's recovery
    /// says where its commit stood.
    previous: Option<(CrashPoint, Option<u64>)>,
    /// Where the runs' logs go.
    dir: std::path::PathBuf,
}

impl SeedOutcome {
    /// Records a run that ended as `ended`, killed by `kill` or stopped (`kill` at the end);
    /// false if it failed.
    fn record(&mut self, kill: Kill, ended: Result<Ended, String>, process: &Process) -> bool {
        process.save(&self.dir.join(format!("run-{}.log", self.runs.len())));
        if let Some((mut point, id)) = self.previous.take() {
            if let Some(id) = id
                && matches!(point.kind, "checkpoint" | "commit" | "final")
            {
                point.commit = commit_state(&process.stderr, id);
            }
            self.points.push(point);
        }
        match ended {
            Ok(Ended::Killed(kind)) => {
                self.runs.push(format!(
                    "{kind} {:?} at {} ms after checkpoint {:?}",
                    kill.trigger,
                    process.killed_at.unwrap_or_default().as_millis(),
                    process.killed_after_checkpoint
                ));
                let point = CrashPoint { kind, commit: None };
                self.previous = Some((point, process.killed_after_checkpoint));
                true
            }
            Ok(Ended::Exited) if kill.kind != "none" => {
                self.runs.push(format!("{kill:?}: exited"));
                true
            }
            Ok(Ended::Exited) => true,
            Err(error) => {
                self.problems
                    .push(format!("a run ({kill:?}) failed: {error}"));
                false
            }
        }
    }

    /// The crash points, the last one included.
    fn points(&mut self) -> Vec<CrashPoint> {
        if let Some((point, _)) = self.previous.take() {
            self.points.push(point);
        }
        std::mem::take(&mut self.points)
    }
}

/// Drives `process` until it has completed a checkpoint since its start and every one of
/// `counts` is committed (0: no count needed), then stops it with SIGINT, killing it as `last`
/// says; how it ended.
fn stop_when_done(
    process: &mut Process,
    topics: &Topics,
    counts: usize,
    last: Kill,
) -> Result<Ended, String> {
    process.count(CHECKPOINT);
    let started = Instant::now();
    loop {
        if let Some(ended) = process.drive(Kill::NEVER, Duration::from_millis(300)) {
            return ended.and(Err(format!(
                "exited before it was stopped\nstderr (last 30 lines):\n{}",
                super::run::tail(&process.stderr, 30)
            )));
        }
        if process.seen(CHECKPOINT) > 0
            && (counts == 0 || topics.counts_now(counts, Duration::from_millis(500)) >= counts)
        {
            break;
        }
        if started.elapsed() > Duration::from_secs(180) {
            return Err(format!(
                "not done within 180 s (counts: {} of {counts})\nstderr (last 30 lines):\n{}",
                topics.counts_now(counts, Duration::from_secs(2)),
                super::run::tail(&process.stderr, 30)
            ));
        }
    }
    process.signal("INT");
    process.finish(last, Duration::from_secs(60))
}

/// Runs the job on `topics` in `dir`: killed by each crash point of `plan`; then until every
/// one of `counts` is committed, stopped with SIGINT (and killed at the end as `last` says);
/// then restored once more, and stopped after its first checkpoint: it must write nothing.
fn kill_and_restore(
    dir: &Path,
    topics: &Topics,
    state: &[&str],
    plan: Vec<Kill>,
    last: Kill,
    counts: usize,
) -> SeedOutcome {
    let args = job_args(topics, state);
    let mut outcome = SeedOutcome {
        dir: dir.to_path_buf(),
        ..SeedOutcome::default()
    };
    for kill in plan {
        let mut process = Process::start(dir, &args, LOG);
        // A trigger that never comes (no checkpoint to restore): killed at 20 s anyway (a
        // restore that rewrites an interrupted commit takes a few seconds).
        let ended = match process.drive(kill, Duration::from_secs(20)) {
            Some(Ok(Ended::Exited)) => Err("exited by itself".to_string()),
            Some(ended) => ended,
            None => {
                process.kill("fallback");
                process.finish(Kill::NEVER, Duration::from_secs(30))
            }
        };
        if !outcome.record(kill, ended, &process) {
            return outcome;
        }
    }
    let mut process = Process::start(dir, &args, LOG);
    let ended = stop_when_done(&mut process, topics, counts, last);
    if !outcome.record(last, ended, &process) {
        return outcome;
    }
    let mut process = Process::start(dir, &args, LOG);
    let ended = stop_when_done(&mut process, topics, 0, Kill::NEVER);
    outcome.record(Kill::NEVER, ended, &process);
    outcome
}

/// One case: the reference run on its own topics (checked against the batch computation), then
/// the seeds the budget allows, each on its own topics, compared with the reference.
fn suite(case: &str, test: &str, state: &[&str], ci_seeds: u64) {
    let budget = Budget::from_env(ci_seeds);
    let mut tally = Tally::new(case, test);
    let (clicks, expected) = input();
    let base = tempfile::tempdir().unwrap();

    // The run never killed: until every count is committed, then stopped.
    let topics = Topics::new(case, "reference");
    topics.create();
    let writer = topics.write_input(clicks.clone());
    let dir = base.path().join("reference");
    std::fs::create_dir_all(&dir).unwrap();
    let mut process = Process::start(&dir, &job_args(&topics, state), LOG);
    let started = Instant::now();
    if let Err(error) = stop_when_done(&mut process, &topics, expected.len(), Kill::NEVER) {
        panic!("{case}: the run never killed: {error}");
    }
    let run_ms = started.elapsed().as_millis() as u64;
    writer.join().unwrap();
    let reference = topics.outputs(None);
    let counts: BTreeMap<(u64, i64), u64> = reference["agg-clicks"]
        .keys()
        .map(|line| {
            let count: UserCount = serde_json::from_str(line).unwrap();
            ((count.user_id, count.window_start), count.count)
        })
        .collect();
    assert!(
        counts == expected && reference["agg-clicks"].values().all(|n| *n == 1),
        "{case}: the run never killed differs from the batch computation: {} counts, {} expected",
        counts.len(),
        expected.len()
    );
    assert_eq!(reference["clicks-dlq"].len(), BAD, "{case}: dead letters");
    topics.delete();
    eprintln!("{case}: the run never killed committed every count in {run_ms} ms");

    while let Some(seed) = budget.next_seed(&tally) {
        let mut moments = Moments::new(case, seed);
        let plan = plan(&mut moments, run_ms);
        let last = if moments.next(2) == 0 {
            Kill::new(
                "final",
                Trigger::AtLog {
                    text: "final checkpoint completed",
                    n: 1,
                    delay: Duration::ZERO,
                },
            )
        } else {
            Kill::new("summary", Trigger::AtStdout("  read "))
        };
        let topics = Topics::new(case, &format!("s{seed}"));
        topics.create();
        let writer = topics.write_input(clicks.clone());
        let dir = base.path().join(format!("seed-{seed}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut outcome = kill_and_restore(&dir, &topics, state, plan, last, expected.len());
        writer.join().unwrap();
        let got = topics.outputs(Some(&reference));
        let outputs: Vec<(String, Diff, String)> = reference
            .iter()
            .map(|(name, lines)| {
                let (diff, examples) = diff_lines(lines, &got[name]);
                (name.clone(), diff, examples)
            })
            .collect();
        let clean = outcome.problems.is_empty() && outputs.iter().all(|(_, d, _)| d.is_clean());
        if clean {
            topics.delete();
            let _ = std::fs::remove_dir_all(&dir);
        } else {
            outcome.problems.push(format!(
                "topics {}*, files kept in {}",
                topics.prefix,
                keep(&dir, case, seed)
            ));
        }
        eprintln!("{case} seed {seed}: {}", outcome.runs.join(", "));
        let plan = outcome.runs.join(", ");
        let points = outcome.points();
        tally.seed(seed, points, outputs, outcome.problems, &plan);
    }
    tally.finish();
}

#[test]
fn kill_9_anywhere_between_kafka_topics() {
    suite(
        "kafka-p2-heap",
        "kafka::kill_9_anywhere_between_kafka_topics",
        &[],
        1,
    );
}

/// The same on RocksDB state (in the long run only: `scripts/kill-suite.sh --long`).
#[cfg(feature = "rocksdb")]
#[test]
#[ignore = "long run only (scripts/kill-suite.sh --long)"]
fn kill_9_anywhere_between_kafka_topics_rocksdb() {
    suite(
        "kafka-p2-rocksdb",
        "kafka::kill_9_anywhere_between_kafka_topics_rocksdb",
        &["--state-backend", "rocksdb", "--state-dir", "state"],
        1,
    );
}

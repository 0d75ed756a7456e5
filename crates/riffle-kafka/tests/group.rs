//! A job as a group of processes (issue 17, `docs/scale-out.md`), against the local broker: the
//! same program runs as several OS processes in one consumer group, Kafka → Kafka, exactly-once.
//! Members are SIGKILLed, join, and restart mid-run; the `read_committed` output must hold every
//! input record exactly once.
//!
//! The member processes are this test binary run again with `--ignored --exact member_process`
//! and the job's settings in `RIFFLE_GROUP_MEMBER` (the ignored test is their entry point, not a
//! test of its own).

mod common;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{kafka, produce, read_committed, topic};
use riffle::checkpoint::CheckpointConfig;
use riffle::{EnvConfig, StreamEnv};
use riffle_kafka::{KafkaGroup, KafkaSink, KafkaSource, run_in_group};
use serde_json::{Value, json};

const MEMBER_ENV: &str = "RIFFLE_GROUP_MEMBER";
/// Per record in a member's map: 12 000 records take each of 3 members ~10 s (2 subtasks).
const DELAY_US: u64 = 5_000;

/// What a member process runs: `group input output delay-µs`.
#[test]
#[ignore = "the entry point of the member processes of the other tests"]
fn member_process() {
    let Ok(settings) = std::env::var(MEMBER_ENV) else {
        return;
    };
    let parts: Vec<&str> = settings.split(' ').collect();
    let [group, input, output, delay] = parts[..] else {
        panic!("{MEMBER_ENV}: expected `group input output delay-µs`, got `{settings}`");
    };
    let delay = Duration::from_micros(delay.parse().expect("delay in µs"));
    let (input, output) = (input.to_string(), output.to_string());
    let checkpoints = tempfile::tempdir().unwrap();
    let group = KafkaGroup::join(kafka(), group, [input.clone()]).unwrap();
    run_in_group(&group, |group| {
        eprintln!(
            "member {}: run on {:?}",
            std::process::id(),
            group.assignment()
        );
        let env = StreamEnv::with_config(EnvConfig {
            parallelism: 2,
            checkpoints: CheckpointConfig {
                interval: Some(Duration::from_millis(100)),
                storage: checkpoints.path().display().to_string(),
                ..CheckpointConfig::default()
            },
            ..EnvConfig::default()
        });
        env.from_source(KafkaSource::<Value>::json(kafka(), [input.clone()]).in_group(group))
            .map(move |record: Value| {
                std::thread::sleep(delay);
                let id = record["id"].as_u64().expect("an id");
                json!({ "id": id, "square": id * id })
            })
            .sink(
                KafkaSink::json(kafka(), output.clone())
                    .key_field("id")
                    .in_group(group),
            );
        Ok(env)
    })
    .unwrap();
}

/// A member process of `group` (killed when dropped).
struct Member(Child);

impl Member {
    fn start(group: &str, input: &str, output: &str, delay_us: u64) -> Member {
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "member_process", "--nocapture"])
            .env(MEMBER_ENV, format!("{group} {input} {output} {delay_us}"))
            .stdout(Stdio::null())
            .spawn()
            .expect("a member process");
        Member(child)
    }

    /// SIGKILL: the process leaves no goodbye, its session expires.
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `count` records `{"id": n}` spread over the input's partitions.
fn input_records(input: &str, partitions: i32, count: u64) {
    let records: Vec<(i32, String, String)> = (0..count)
        .map(|n| {
            (
                (n % partitions as u64) as i32,
                n.to_string(),
                json!({ "id": n }).to_string(),
            )
        })
        .collect();
    produce(input, &records);
}

/// The number of records in the committed output now.
fn committed(output: &str) -> usize {
    read_committed(output, Duration::from_secs(5), |_, quiet| {
        quiet > Duration::from_millis(200)
    })
    .len()
}

/// Waits until the committed output holds at least `count` records.
fn wait_for_output(output: &str, count: usize, wait: Duration) {
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        if committed(output) >= count {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the output did not reach {count} records in {wait:?}");
}

/// Asserts the run is still going: the committed output is short of `count`.
fn assert_mid_run(output: &str, count: u64) {
    let now = committed(output);
    assert!(
        (now as u64) < count,
        "the run had already ended ({now} records): the test must act mid-run"
    );
    eprintln!("mid-run: {now} of {count} records committed");
}

/// Reads the whole committed output once it stopped growing, and checks it holds each id in
/// `0..count` exactly once, with its square.
fn assert_exactly_once(output: &str, count: u64) {
    let records = read_committed(output, Duration::from_secs(180), |n, quiet| {
        n >= count as usize && quiet > Duration::from_secs(3)
    });
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    for record in &records {
        let value: Value = serde_json::from_str(&record.value).unwrap();
        let id = value["id"].as_u64().unwrap();
        assert_eq!(value["square"].as_u64(), Some(id * id), "{value}");
        *seen.entry(id).or_default() += 1;
    }
    let duplicated: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    let missing: Vec<u64> = (0..count).filter(|id| !seen.contains_key(id)).collect();
    assert!(
        duplicated.is_empty() && missing.is_empty(),
        "{} records; duplicated (id, times): {:?}; missing: {} ({:?}..)",
        records.len(),
        &duplicated[..duplicated.len().min(10)],
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    assert_eq!(records.len() as u64, count);
}

fn group_name(name: &str) -> String {
    format!(
        "{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

#[test]
fn three_processes_one_killed_mid_run_write_every_record_once() {
    let (input, output) = (topic("group-in", 6), topic("group-out", 3));
    let count = 12_000;
    input_records(&input, 6, count);
    let group = group_name("kill");
    let mut members: Vec<Member> = (0..3)
        .map(|_| Member::start(&group, &input, &output, DELAY_US))
        .collect();
    wait_for_output(&output, 600, Duration::from_secs(120));
    members[0].kill();
    assert_mid_run(&output, count);
    assert_exactly_once(&output, count);
}

#[test]
fn a_process_that_joins_mid_run_takes_partitions_and_nothing_is_lost_or_doubled() {
    let (input, output) = (topic("group-join-in", 6), topic("group-join-out", 3));
    let count = 12_000;
    input_records(&input, 6, count);
    let group = group_name("join");
    let mut members = vec![
        Member::start(&group, &input, &output, DELAY_US),
        Member::start(&group, &input, &output, DELAY_US),
    ];
    wait_for_output(&output, 600, Duration::from_secs(120));
    members.push(Member::start(&group, &input, &output, DELAY_US));
    assert_mid_run(&output, count);
    assert_exactly_once(&output, count);
}

#[test]
fn a_rolling_restart_of_every_process_loses_and_doubles_nothing() {
    let (input, output) = (topic("group-roll-in", 6), topic("group-roll-out", 3));
    let count = 12_000;
    input_records(&input, 6, count);
    let group = group_name("roll");
    let mut members: Vec<Member> = (0..3)
        .map(|_| Member::start(&group, &input, &output, DELAY_US))
        .collect();
    wait_for_output(&output, 300, Duration::from_secs(120));
    for member in &mut members {
        member.kill();
        *member = Member::start(&group, &input, &output, DELAY_US);
        std::thread::sleep(Duration::from_millis(DELAY_US));
    }
    assert_mid_run(&output, count);
    assert_exactly_once(&output, count);
}

#[test]
fn a_process_paused_past_its_session_is_fenced_and_nothing_is_doubled() {
    let (input, output) = (topic("group-pause-in", 6), topic("group-pause-out", 3));
    let count = 12_000;
    input_records(&input, 6, count);
    let group = group_name("pause");
    let mut members: Vec<Member> = (0..3)
        .map(|_| Member::start(&group, &input, &output, DELAY_US))
        .collect();
    wait_for_output(&output, 600, Duration::from_secs(120));
    // SIGSTOP for longer than the session (6 s) and the transaction timeout (10 s): the others
    // take its partitions; when it wakes up, it is a zombie whose commits must fail.
    let pid = members[0].0.id().to_string();
    signal("-STOP", &pid);
    std::thread::sleep(Duration::from_secs(12));
    assert_mid_run(&output, count);
    signal("-CONT", &pid);
    assert_exactly_once(&output, count);
    // The zombie found out, and joined again instead of dying.
    assert!(
        members[0].0.try_wait().unwrap().is_none(),
        "the paused member exited instead of joining the group again"
    );
}

fn signal(signal: &str, pid: &str) {
    let status = Command::new("kill").args([signal, pid]).status().unwrap();
    assert!(status.success(), "kill {signal} {pid}");
}

//! A job as a group of processes (issue 17, `docs/scale-out.md`), against the local broker: the
//! same program runs as several OS processes in one consumer group, Kafka → Kafka, exactly-once.
//! Members are SIGKILLed, join, and restart mid-run; the `read_committed` output must hold every
//! input record exactly once.
//!
//! The member processes are this test binary run again with `--ignored --exact member_process`
//! and the job's settings in `RIFFLE_GROUP_MEMBER` (the ignored test is their entry point, not a
//! test of its own).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{kafka, produce, read_committed, topic};
use riffle::checkpoint::CheckpointConfig;
use riffle::{EnvConfig, StreamEnv};
use riffle_kafka::{KafkaGroup, KafkaSink, KafkaSource, run_in_group};
use serde_json::{Value, json};

const MEMBER_ENV: &str = "RIFFLE_GROUP_MEMBER";
/// For a member in mode `count-broken`: its checkpoint storage fails every write this many ms
/// after the member started.
const BREAK_AFTER_ENV: &str = "RIFFLE_GROUP_BREAK_STORAGE_AFTER_MS";
/// The tests that start member processes run one at a time: each keeps the cores busy, and
/// timing (sessions, mid-run actions) should not depend on what the others do.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

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
    let [mode, group, input, output, delay, storage] = parts[..] else {
        panic!(
            "{MEMBER_ENV}: expected `mode group input output delay-µs storage`, got `{settings}`"
        );
    };
    let counting = mode.starts_with("count");
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,riffle_kafka=info".into()),
        )
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();
    let delay = Duration::from_micros(delay.parse().expect("delay in µs"));
    let (input, output) = (input.to_string(), output.to_string());
    let group = KafkaGroup::join(kafka(), group, [input.clone()]).unwrap();
    if mode == "count-clean" {
        // Cleans up what is more than 1 s old (the other tests keep the default).
        group.set_cleanup_grace(Duration::from_secs(1));
    }
    if mode.contains("standby") {
        group.set_standby_replicas(1);
    }
    // Padded: every user's state carries 1 KiB more, for a state large enough to measure its
    // restore; checkpoints every second then.
    let padded = mode.contains("padded");
    let interval = Duration::from_millis(if padded { 1000 } else { 100 });
    // A member whose checkpoint storage stops taking its writes after a while.
    let broken = mode.contains("broken").then(|| {
        let after: u64 = std::env::var(BREAK_AFTER_ENV)
            .ok()
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(0);
        std::sync::Arc::new(BreakingStore::new(
            std::path::Path::new(storage),
            Instant::now() + Duration::from_millis(after),
        )) as std::sync::Arc<dyn object_store::ObjectStore>
    });
    run_in_group(&group, |group| {
        eprintln!(
            "{} member {}: run on {:?}",
            clock(),
            std::process::id(),
            group.assignment()
        );
        let env = StreamEnv::with_config(EnvConfig {
            parallelism: 2,
            checkpoints: CheckpointConfig {
                interval: Some(interval),
                storage: storage.to_string(),
                object_store: broken.clone(),
                ..CheckpointConfig::default()
            },
            ..EnvConfig::default()
        });
        // The first record a run processes (after its restore), for the fail-over measurements.
        let first = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let records = env
            .from_source(KafkaSource::<Value>::json(kafka(), [input.clone()]).in_group(group))
            .map(move |record: Value| {
                if first.swap(false, std::sync::atomic::Ordering::Relaxed) {
                    tracing::info!("member: the run processes its first record");
                }
                std::thread::sleep(delay);
                record
            });
        let sink = KafkaSink::json(kafka(), output.clone()).in_group(group);
        if counting {
            // One output partition per user (the key), so its counts stay in order.
            let sink = sink.key_field("user");
            // Keyed state across processes: the input is partitioned by key group, so a
            // partition's owner owns its users' counts.
            let pad = if padded {
                "x".repeat(1024)
            } else {
                String::new()
            };
            records
                .map(move |record: Value| {
                    let user = record["user"].as_str().expect("a user").to_string();
                    (user, 1u64, pad.clone())
                })
                .key_by(|(user, _, _)| user.clone())
                .reduce(|(user, a, pad), (_, b, _)| (user, a + b, pad))
                .map(|(user, count, _)| json!({ "user": user, "count": count }))
                .sink(sink);
        } else {
            records
                .map(|record: Value| {
                    let id = record["id"].as_u64().expect("an id");
                    json!({ "id": id, "square": id * id })
                })
                .sink(sink);
        }
        Ok(env)
    })
    .unwrap();
}

/// A member process of `group` (killed when dropped).
struct Member(Child);

impl Member {
    fn start(group: &str, input: &str, output: &str, delay_us: u64) -> Member {
        Self::start_mode("copy", group, input, output, delay_us)
    }

    fn start_mode(mode: &str, group: &str, input: &str, output: &str, delay_us: u64) -> Member {
        // The group's checkpoint storage, shared by its processes (S3 in production).
        let storage = std::env::temp_dir().join(format!("riffle-group-test-{group}"));
        let storage = storage.display().to_string();
        Self::start_logged(mode, group, input, output, delay_us, &storage, None)
    }

    /// A member with its checkpoint storage at `storage`, its log written to `log` if given.
    fn start_logged(
        mode: &str,
        group: &str,
        input: &str,
        output: &str,
        delay_us: u64,
        storage: &str,
        log: Option<&std::path::Path>,
    ) -> Member {
        Self::start_with(mode, group, input, output, delay_us, storage, log, &[])
    }

    /// [`start_logged`](Self::start_logged), with more environment variables.
    #[allow(clippy::too_many_arguments)]
    fn start_with(
        mode: &str,
        group: &str,
        input: &str,
        output: &str,
        delay_us: u64,
        storage: &str,
        log: Option<&std::path::Path>,
        env: &[(&str, &str)],
    ) -> Member {
        let stderr = match log {
            Some(path) => Stdio::from(std::fs::File::create(path).expect("a member's log")),
            None => Stdio::inherit(),
        };
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "member_process", "--nocapture"])
            .env(
                MEMBER_ENV,
                format!("{mode} {group} {input} {output} {delay_us} {storage}"),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(stderr)
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
    // Quiet for long enough that the reader's start (assignment, first fetch) is not taken for
    // the end of the output.
    read_committed(output, Duration::from_secs(10), |_, quiet| {
        quiet > Duration::from_millis(1_500)
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
    let _serial = one_at_a_time();
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
    let _serial = one_at_a_time();
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
    let _serial = one_at_a_time();
    let (input, output) = (topic("group-roll-in", 6), topic("group-roll-out", 3));
    // Three members copy 1,200 records a second; the restarts take 15 s and more: the input
    // lasts past them.
    let count = 36_000;
    input_records(&input, 6, count);
    let group = group_name("roll");
    let mut members: Vec<Member> = (0..3)
        .map(|_| Member::start(&group, &input, &output, DELAY_US))
        .collect();
    wait_for_output(&output, 300, Duration::from_secs(120));
    for member in &mut members {
        member.kill();
        *member = Member::start(&group, &input, &output, DELAY_US);
        // Let the new member join and the group settle before the next restart.
        std::thread::sleep(Duration::from_secs(5));
    }
    assert_mid_run(&output, count);
    assert_exactly_once(&output, count);
}

#[test]
fn a_process_paused_past_its_session_is_fenced_and_nothing_is_doubled() {
    let _serial = one_at_a_time();
    let (input, output) = (topic("group-pause-in", 6), topic("group-pause-out", 3));
    // The two others copy up to 800 records a second while the third is paused (12 s): the
    // input lasts past the pause, so the zombie wakes up mid-run.
    let count = 30_000;
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

/// Committed offsets of `group` for each of the input's `partitions`.
fn progress(group: &str, input: &str, partitions: i32) -> BTreeMap<i32, i64> {
    common::committed_offsets(group, input, partitions)
}

/// Hand-run measurement (BENCHMARKS.md): a stateless group job, Kafka → Kafka, exactly-once,
/// checkpoints every 100 ms: records per CPU-second of one and of two member processes, and the
/// fail-over time (SIGKILL of one of two members until every input partition commits again).
/// The members join first and settle (5 s), then the input is written.
///
/// `cargo test --release -p riffle-kafka --test group measure_group -- --ignored --nocapture`
#[test]
#[ignore = "a measurement, run by hand"]
fn measure_group() {
    let _serial = one_at_a_time();
    let partitions = 6;
    let count = 300_000;
    let total = |offsets: &BTreeMap<i32, i64>| offsets.values().sum::<i64>();
    for members in [1, 2] {
        let (input, output) = (topic("measure-in", partitions), topic("measure-out", 3));
        let group = group_name("measure");
        let running: Vec<Member> = (0..members)
            .map(|_| Member::start(&group, &input, &output, 0))
            .collect();
        std::thread::sleep(Duration::from_secs(5));
        let cpu_before: Duration = running
            .iter()
            .map(|m| riffle_kafka::testing::cpu_time(m.0.id()))
            .sum();
        let start = Instant::now();
        input_records(&input, partitions, count);
        while total(&progress(&group, &input, partitions)) < count as i64 {
            std::thread::sleep(Duration::from_millis(20));
        }
        let wall = start.elapsed();
        let cpu = running
            .iter()
            .map(|m| riffle_kafka::testing::cpu_time(m.0.id()))
            .sum::<Duration>()
            - cpu_before;
        eprintln!(
            "{members} member(s): {count} records in {:.2} s wall from the first write ({:.0} records/s), {:.2} CPU-s of the members ({:.0} records per CPU-s)",
            wall.as_secs_f64(),
            count as f64 / wall.as_secs_f64(),
            cpu.as_secs_f64(),
            count as f64 / cpu.as_secs_f64()
        );
    }
    // Fail-over: two members own three partitions each, slowed down so that the run lasts; one
    // is killed.
    let (input, output) = (topic("failover-in", partitions), topic("failover-out", 3));
    let group = group_name("failover");
    let mut running: Vec<Member> = (0..2)
        .map(|_| Member::start(&group, &input, &output, 500))
        .collect();
    std::thread::sleep(Duration::from_secs(5));
    // Enough that no partition is read to its end before the kill (a subtask alone on one
    // partition reads 2 000 a second): one that is could not commit again.
    input_records(&input, partitions, 150_000);
    wait_for_output(&output, 2_000, Duration::from_secs(120));
    let before = progress(&group, &input, partitions);
    running[0].kill();
    let killed = Instant::now();
    eprintln!("{} killed one member", clock());
    loop {
        let now = progress(&group, &input, partitions);
        if before
            .iter()
            .all(|(p, o)| now.get(p).is_some_and(|n| n > o))
        {
            break;
        }
        assert!(killed.elapsed() < Duration::from_secs(120), "no fail-over");
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "fail-over: {:.2} s from SIGKILL until every partition committed again (broker session timeout 6 s)",
        killed.elapsed().as_secs_f64()
    );
}

/// The resident memory of process `pid`, in MB.
fn resident_mb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0)
        / 1024
}

/// Seconds since midnight UTC of `at`.
fn seconds_of_day(at: std::time::SystemTime) -> f64 {
    let since = at.duration_since(std::time::UNIX_EPOCH).unwrap();
    since.as_secs_f64() % 86_400.0
}

/// Seconds since midnight UTC of a log line's timestamp (`2026-12-01T11:38:13.298383Z ...`).
fn log_seconds(line: &str) -> Option<f64> {
    let time = line
        .split_whitespace()
        .next()?
        .split_once('T')?
        .1
        .strip_suffix('Z')?;
    let mut parts = time.split(':');
    let (h, m, s): (f64, f64, f64) = (
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
    );
    Some(h * 3600.0 + m * 60.0 + s)
}

/// Wall-clock seconds (for lines of several processes to be put in order).
fn clock() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    format!("{:.3}", now.as_secs_f64() % 1000.0)
}

#[test]
fn a_group_job_without_checkpoints_or_with_a_restore_fails_at_start_naming_the_setting() {
    let input = topic("group-config-in", 1);
    let group = KafkaGroup::join(kafka(), group_name("config"), [input.clone()]).unwrap();
    let job = |config: EnvConfig| {
        let input = input.clone();
        move |group: &KafkaGroup| {
            let env = StreamEnv::with_config(config.clone());
            env.from_source(KafkaSource::<Value>::json(kafka(), [input.clone()]).in_group(group))
                .sink(KafkaSink::json(kafka(), "unused").in_group(group));
            Ok(env)
        }
    };
    let error = run_in_group(&group, job(EnvConfig::default())).unwrap_err();
    assert!(
        error.to_string().contains("checkpoints.interval"),
        "{error}"
    );
    let mut restoring = EnvConfig::default();
    restoring.checkpoints.interval = Some(Duration::from_millis(100));
    restoring.checkpoints.restore = Some(riffle::checkpoint::RestoreFrom::Latest);
    let error = run_in_group(&group, job(restoring)).unwrap_err();
    assert!(error.to_string().contains("checkpoints.restore"), "{error}");
}

/// The coordinator's view of a group (DescribeConsumerGroups, KIP-848's ConsumerGroupDescribe):
/// every live member by its label, with the partitions assigned to it now, before anything is
/// committed; with more members than partitions, one owns nothing and is listed all the same.
#[test]
fn the_group_status_lists_every_live_member_with_its_assignment_before_any_commit() {
    let input = topic("group-describe-in", 2);
    let name = group_name("describe");
    let members: Vec<KafkaGroup> = (0..3)
        .map(|_| KafkaGroup::join(kafka(), name.clone(), [input.clone()]).unwrap())
        .collect();
    let expected = || -> BTreeMap<String, Vec<String>> {
        members
            .iter()
            .map(|member| {
                let mut owned: Vec<String> = member
                    .assignment()
                    .into_iter()
                    .map(|(topic, partition)| format!("{topic}-{partition}"))
                    .collect();
                owned.sort();
                (member.status().unwrap().member, owned)
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = members[0].status().unwrap();
        let expected = expected();
        let owned: usize = expected.values().map(Vec::len).sum();
        // Settled (the assignor spreads the two partitions over two members) and seen alike.
        let settled = owned == 2 && expected.values().all(|o| o.len() <= 1);
        if settled && status.assigned == expected {
            assert!(status.members.is_empty(), "nothing committed: {status:?}");
            assert_eq!(status.assigned.len(), 3);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the coordinator's members {:?}, the members' own assignments {expected:?}",
            status.assigned
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Clicks of `users` users, `per_user` each, written to the partition that owns the user's key
/// group (as a Kafka shuffle would), in order.
fn keyed_input(input: &str, partitions: i32, users: u64, per_user: u64) {
    let records: Vec<(i32, String, String)> = (0..per_user)
        .flat_map(|_| 0..users)
        .map(|u| {
            let user = format!("u{u}");
            let key_group = riffle::keys::key_group_of(&user, 128);
            let partition =
                riffle::keys::subtask_for_key_group(key_group, 128, partitions as usize) as i32;
            (partition, user.clone(), json!({ "user": user }).to_string())
        })
        .collect();
    produce(input, &records);
}

/// The committed output holds, for every user, running counts that only grow (a count
/// written twice would be a duplicate: the rolling count folds batches, so not every count
/// appears) and end at `per_user` (a lost or doubled record changes the end).
fn assert_counts_exactly_once(output: &str, users: u64, per_user: u64) {
    let records = read_committed(output, Duration::from_secs(180), |_, quiet| {
        quiet > Duration::from_secs(5)
    });
    let mut counts: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for record in &records {
        let value: Value = serde_json::from_str(&record.value).unwrap();
        counts
            .entry(value["user"].as_str().unwrap().to_string())
            .or_default()
            .push(value["count"].as_u64().unwrap());
    }
    for u in 0..users {
        let user = format!("u{u}");
        let seen = counts.remove(&user).unwrap_or_default();
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "the running counts of {user} go back (a duplicate): {seen:?}"
        );
        assert_eq!(
            seen.last(),
            Some(&per_user),
            "the final count of {user}: {seen:?}"
        );
    }
    assert!(counts.is_empty(), "unexpected users: {:?}", counts.keys());
}

/// Waits until the group committed at least `count` input records.
fn wait_for_input(group: &str, input: &str, partitions: i32, count: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let done: i64 = progress(group, input, partitions).values().sum();
        if done >= count {
            return done;
        }
        assert!(
            Instant::now() < deadline,
            "the group committed {done} of {count} records"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn keyed_state_moves_with_its_partitions_when_a_process_is_killed_or_joins() {
    let _serial = one_at_a_time();
    let (input, output) = (topic("group-count-in", 6), topic("group-count-out", 3));
    let (users, per_user) = (60, 200);
    let total = (users * per_user) as i64;
    keyed_input(&input, 6, users, per_user);
    let group = group_name("count");
    let start = |members: &mut Vec<Member>| {
        members.push(Member::start_mode(
            "count",
            &group,
            &input,
            &output,
            DELAY_US / 2,
        ));
    };
    let mut members = Vec::new();
    start(&mut members);
    start(&mut members);
    wait_for_input(&group, &input, 6, total / 6);
    members[0].kill();
    start(&mut members);
    let done = wait_for_input(&group, &input, 6, total / 2);
    assert!(
        done < total,
        "the run had already ended: the test must act mid-run"
    );
    start(&mut members);
    wait_for_input(&group, &input, 6, total);
    assert_counts_exactly_once(&output, users, per_user);

    // The clean-up: the members are stopped, and one starts whose clean-up takes what is 1 s
    // old. Of the runs before (killed, rebalanced), only those the committed offsets name
    // stay, with the cleaner's own.
    for member in &mut members {
        member.kill();
    }
    std::thread::sleep(Duration::from_secs(2));
    let storage = storage_dir(&group);
    let runs_before = registered_runs(&storage, &group).len();
    let mut cleaner = Member::start_mode("count-clean", &group, &input, &output, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    let kept = loop {
        let named = named_runs(&group, &input);
        let runs = registered_runs(&storage, &group);
        if runs.len() <= named.len() + 1 && runs.len() < runs_before {
            assert!(
                named.is_subset(&runs),
                "a run the commits name is gone: {named:?}, registered {runs:?}"
            );
            break runs;
        }
        assert!(
            Instant::now() < deadline,
            "not cleaned up: runs {runs:?}, of which the commits name {named:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    for entry in std::fs::read_dir(&storage).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        assert!(
            name.starts_with(&group) || kept.contains(&name),
            "`{name}` is neither the group's nor a kept run's"
        );
    }
    assert!(
        runs_before > kept.len(),
        "{runs_before} runs before, {kept:?} after"
    );

    // What stayed is enough: a new member restores from it and counts on exactly.
    cleaner.kill();
    let _member = Member::start_mode("count", &group, &input, &output, 0);
    keyed_input(&input, 6, users, 1);
    wait_for_input(&group, &input, 6, total + users as i64);
    assert_counts_exactly_once(&output, users, per_user + 1);
}

/// The runs registered under `<group>-runs/` of the group's checkpoint storage.
fn registered_runs(storage: &std::path::Path, group: &str) -> BTreeSet<String> {
    std::fs::read_dir(storage.join(format!("{group}-runs")))
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The runs that the group's committed offsets of `topic` name (their notes' `run`).
fn named_runs(group: &str, topic: &str) -> BTreeSet<String> {
    common::committed_notes(group, topic, 6)
        .values()
        .filter_map(|(_, note)| note["run"].as_str().map(str::to_string))
        .collect()
}

/// The group's checkpoint storage, shared by its member processes.
fn storage_dir(group: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("riffle-group-test-{group}"))
}

/// Standby replicas: two members keep each other's partitions warm. One is SIGKILLed; the
/// survivor restores the dead member's partitions from its warm copy (its log says how many
/// of the restore's files were held warm), and the counts end exact.
#[test]
fn a_standby_replica_restores_a_dead_members_partitions_from_its_warm_copy() {
    let _serial = one_at_a_time();
    let (input, output) = (topic("group-standby-in", 6), topic("group-standby-out", 3));
    let (users, per_user) = (60, 200);
    let total = (users * per_user) as i64;
    keyed_input(&input, 6, users, per_user);
    let group = group_name("standby");
    let storage = std::env::temp_dir().join(format!("riffle-group-test-{group}"));
    let logs = tempfile::tempdir().unwrap();
    let log = |n: usize| logs.path().join(format!("member-{n}.log"));
    let mut members: Vec<Member> = (0..2)
        .map(|n| {
            Member::start_logged(
                "count-standby",
                &group,
                &input,
                &output,
                DELAY_US / 2,
                &storage.display().to_string(),
                Some(&log(n)),
            )
        })
        .collect();
    // Both follow the other's partitions before one dies.
    let deadline = Instant::now() + Duration::from_secs(90);
    while !(0..2).all(|n| {
        std::fs::read_to_string(log(n))
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains("standby replica follows") && !l.contains("partitions=[]"))
    }) {
        assert!(
            Instant::now() < deadline,
            "the standby replicas never followed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let done = wait_for_input(&group, &input, 6, total / 4);
    assert!(
        done < total,
        "the run had already ended: the test must act mid-run"
    );
    let before = std::fs::read_to_string(log(1)).unwrap().len();
    members[0].kill();
    wait_for_input(&group, &input, 6, total);
    assert_counts_exactly_once(&output, users, per_user);
    let after = std::fs::read_to_string(log(1)).unwrap()[before..].to_string();
    // (files, of them warm) of each restore.
    let field = |line: &str, name: &str| -> Option<u64> {
        line.split(&format!(" {name}="))
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let restores: Vec<(u64, u64)> = after
        .lines()
        .filter(|l| l.contains("group: restoring the partitions' state"))
        .filter_map(|l| Some((field(l, "files")?, field(l, "warm")?)))
        .collect();
    // The dead member's snapshots were followed, the survivor's own written through.
    assert!(
        restores
            .last()
            .is_some_and(|&(files, warm)| files > 0 && warm == files),
        "the survivor's restores after the kill read files from the storage ({restores:?}); its log:\n{after}"
    );
    eprintln!("the survivor's restores after the kill, (files, of them warm): {restores:?}");
    members.clear();
}

/// Hand-run measurement (BENCHMARKS.md): fail-over time with and without a standby replica,
/// for a keyed state of `RIFFLE_MEASURE_USERS` users (default 60 000) × 1 KiB. Two members
/// (parallelism 2 each, a commit every second) build the state, then more clicks stream in and
/// one member is SIGKILLed; the time from the kill until every partition committed again is
/// reported, and the survivor's log lines of the takeover. Checkpoints go to the S3 server when
/// `scripts/s3-server.sh env` is in the environment, else to a local directory.
///
/// `cargo test --release -p riffle-kafka --test group measure_standby -- --ignored --nocapture`
#[test]
#[ignore = "a measurement, run by hand"]
fn measure_standby() {
    let _serial = one_at_a_time();
    let users: u64 = std::env::var("RIFFLE_MEASURE_USERS")
        .ok()
        .and_then(|u| u.parse().ok())
        .unwrap_or(60_000);
    let rounds: usize = std::env::var("RIFFLE_MEASURE_ROUNDS")
        .ok()
        .and_then(|u| u.parse().ok())
        .unwrap_or(2);
    let partitions = 6;
    for round in 0..rounds {
        for standby in [false, true] {
            let mode = if standby {
                "count-padded-standby"
            } else {
                "count-padded"
            };
            let (input, output) = (topic("standby-m-in", partitions), topic("standby-m-out", 3));
            let group = group_name("standby-m");
            let storage = match std::env::var("RIFFLE_TEST_S3_BUCKET") {
                Ok(bucket) => format!("s3://{bucket}/{group}"),
                Err(_) => std::env::temp_dir()
                    .join(format!("riffle-group-test-{group}"))
                    .display()
                    .to_string(),
            };
            // The members' logs stay, for a failed measurement to be read.
            let logs = std::env::temp_dir().join(format!("riffle-{group}-logs"));
            std::fs::create_dir_all(&logs).unwrap();
            let log = |n: usize| logs.join(format!("member-{n}.log"));
            eprintln!("logs in {}", logs.display());
            let mut members: Vec<Member> = (0..2)
                .map(|n| {
                    Member::start_logged(
                        mode,
                        &group,
                        &input,
                        &output,
                        100,
                        &storage,
                        Some(&log(n)),
                    )
                })
                .collect();
            // The state: every user once.
            keyed_input(&input, partitions, users, 1);
            wait_for_input(&group, &input, partitions, users as i64);
            // Then more, which takes the members a while (100 µs a record), and the kill.
            keyed_input(&input, partitions, users, 3);
            std::thread::sleep(Duration::from_secs(3));
            let before = progress(&group, &input, partitions);
            let offset = std::fs::read_to_string(log(1)).unwrap().len();
            // What the members spent until then (the same work, but for the standby's).
            let cpu: Duration = members
                .iter()
                .map(|m| riffle_kafka::testing::cpu_time(m.0.id()))
                .sum();
            let rss: Vec<u64> = members.iter().map(|m| resident_mb(m.0.id())).collect();
            members[0].kill();
            let killed = Instant::now();
            let killed_at = seconds_of_day(std::time::SystemTime::now());
            let commits_again = loop {
                let now = progress(&group, &input, partitions);
                if before
                    .iter()
                    .all(|(p, o)| now.get(p).is_some_and(|n| n > o))
                {
                    break killed.elapsed();
                }
                assert!(killed.elapsed() < Duration::from_secs(120), "no fail-over");
                std::thread::sleep(Duration::from_millis(20));
            };
            let survivor = std::fs::read_to_string(log(1)).unwrap()[offset..].to_string();
            // The survivor's steps, in seconds from the kill.
            let step = |what: &str| {
                survivor
                    .lines()
                    .filter(|l| l.contains(what))
                    .filter_map(|l| log_seconds(l).map(|at| format!("{:.2}", at - killed_at)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let takeover = [
                ("run starts", step("group: run starts")),
                (
                    "restore composed",
                    step("group: restoring the partitions' state"),
                ),
                ("state files loaded", step("restoring from=")),
                ("first record processed", step("processes its first record")),
            ]
            .map(|(what, at)| format!("{what} at +{at} s"));
            eprintln!(
                "round {round}, standby {standby}: {users} users x 1 KiB; the members spent {:.2} CPU-s before the kill, resident {rss:?} MB; the survivor: {}; every partition committed again at +{:.2} s",
                cpu.as_secs_f64(),
                takeover.join(", "),
                commits_again.as_secs_f64(),
            );
            members.clear();
        }
    }
}

/// Local files whose writes all fail from a moment on: a member's checkpoint storage that
/// stops taking its writes mid-run.
#[derive(Debug)]
struct BreakingStore {
    inner: object_store::local::LocalFileSystem,
    from: Instant,
}

impl BreakingStore {
    fn new(dir: &std::path::Path, from: Instant) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        BreakingStore {
            inner: object_store::local::LocalFileSystem::new_with_prefix(dir).unwrap(),
            from,
        }
    }
}

impl std::fmt::Display for BreakingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BreakingStore")
    }
}

#[async_trait::async_trait]
impl object_store::ObjectStore for BreakingStore {
    async fn put_opts(
        &self,
        location: &object_store::path::Path,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        if Instant::now() >= self.from {
            return Err(object_store::Error::Generic {
                store: "broken-test-store",
                source: "the storage takes no writes (injected)".into(),
            });
        }
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &object_store::path::Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &object_store::path::Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: futures_util::stream::BoxStream<
            'static,
            object_store::Result<object_store::path::Path>,
        >,
    ) -> futures_util::stream::BoxStream<'static, object_store::Result<object_store::path::Path>>
    {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> futures_util::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
    {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &object_store::path::Path,
        to: &object_store::path::Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

/// Waits until the log at `path` has a line containing `what`; returns it.
fn wait_for_log(path: &std::path::Path, what: &str, wait: Duration) -> String {
    let deadline = Instant::now() + wait;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains(what)) {
            return line.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no `{what}` in {} within {wait:?}:\n{text}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `n` runs registered in `group`'s storage by members long gone, each with a checkpoint
/// written an hour ago: what a group that ran for a while leaves for its clean-ups to walk.
fn register_dead_runs(storage: &std::path::Path, group: &str, n: usize) -> Vec<String> {
    let an_hour_ago = std::time::SystemTime::now() - Duration::from_secs(3_600);
    let old = |path: &std::path::Path| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"{}").unwrap();
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(an_hour_ago)
            .unwrap();
    };
    (0..n)
        .map(|i| {
            let run = format!("job-{:016x}-1-1", 0xdead_0000_u64 + i as u64);
            old(&storage.join(format!("{group}-runs/{run}/run")));
            old(&storage.join(format!("{run}/chk-1/_manifest.json")));
            run
        })
        .collect()
}

/// Reads the group's commits of `topic` again and again while it runs, and records every
/// commit that names a snapshot which is not in `storage` (read twice: a commit that moved on
/// since may have let retention remove the snapshot it named before).
struct NamedSnapshotsWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<(usize, Vec<String>)>>,
}

impl NamedSnapshotsWatch {
    fn start(group: &str, topic: &str, storage: &std::path::Path) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (group, topic, storage) = (group.to_string(), topic.to_string(), storage.to_path_buf());
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let (mut checks, mut gone) = (0, Vec::new());
                let mut check = || {
                    for (partition, (offset, note)) in common::committed_notes(&group, &topic, 6) {
                        let (Some(run), Some(checkpoint)) =
                            (note["run"].as_str(), note["checkpoint"].as_u64())
                        else {
                            continue;
                        };
                        checks += 1;
                        let manifest =
                            storage.join(format!("{run}/chk-{checkpoint}/_manifest.json"));
                        if manifest.exists() {
                            continue;
                        }
                        let again = common::committed_notes(&group, &topic, 6);
                        if again.get(&partition) == Some(&(offset, note.clone())) {
                            gone.push(format!(
                                "partition {partition} committed at {offset} names {} , which is gone",
                                manifest.display()
                            ));
                        }
                    }
                };
                while !stop.load(std::sync::atomic::Ordering::Acquire) {
                    check();
                    std::thread::sleep(Duration::from_millis(50));
                }
                check();
                (checks, gone)
            })
        };
        NamedSnapshotsWatch {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops watching; returns the checks made and what was found gone.
    fn finish(mut self) -> (usize, Vec<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// Issue 27: a group deleted the checkpoint that its own commits named (its clean-up took a run
/// written "after now" for one idle for ever), and every member then failed at start for good.
/// Here 3,000 dead runs are registered (long clean-ups), three members start in one rebalance
/// (each cleaning, with a grace of 1 s, while the others write their first checkpoints), one is
/// killed, its replacement is killed during its restore, and others join. Throughout, every
/// snapshot a commit names must exist; at the end the counts are exact, and the dead runs are
/// gone.
#[test]
fn no_clean_up_removes_a_snapshot_that_the_committed_offsets_name() {
    let _serial = one_at_a_time();
    let (input, output) = (topic("group-safe-in", 6), topic("group-safe-out", 3));
    let (users, per_user) = (60, 300);
    let total = (users * per_user) as i64;
    keyed_input(&input, 6, users, per_user);
    let group = group_name("safe");
    let storage = storage_dir(&group);
    let dead = register_dead_runs(&storage, &group, 3_000);
    let logs = tempfile::tempdir().unwrap();
    let log = |n: usize| logs.path().join(format!("member-{n}.log"));
    let start = |n: usize| {
        Member::start_logged(
            "count-clean",
            &group,
            &input,
            &output,
            DELAY_US / 2,
            &storage.display().to_string(),
            Some(&log(n)),
        )
    };
    let watch = NamedSnapshotsWatch::start(&group, &input, &storage);
    let mut members: Vec<Member> = (0..3).map(start).collect();
    wait_for_input(&group, &input, 6, total / 6);
    // Every partition has committed state (a commit naming a snapshot), so that whichever
    // partitions the replacement below takes, it restores some: on a loaded machine one member
    // may not have committed yet when the others have read a sixth of the input.
    let deadline = Instant::now() + Duration::from_secs(90);
    while common::committed_notes(&group, &input, 6)
        .values()
        .filter(|(_, note)| note["run"].is_string())
        .count()
        < 6
    {
        assert!(
            Instant::now() < deadline,
            "not every partition committed state in 90 s: {:?}",
            common::committed_notes(&group, &input, 6)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    members[0].kill();
    // Its replacement is killed while it restores the partitions it took.
    let mut replacement = start(3);
    wait_for_log(
        &log(3),
        "group: restoring the partitions' state",
        Duration::from_secs(90),
    );
    replacement.kill();
    members.push(start(4));
    let done = wait_for_input(&group, &input, 6, total / 2);
    assert!(
        done < total,
        "the run had already ended: the test must act mid-run"
    );
    members[1].kill();
    members.push(start(5));
    wait_for_input(&group, &input, 6, total);
    assert_counts_exactly_once(&output, users, per_user);
    let (checks, gone) = watch.finish();
    assert!(
        gone.is_empty(),
        "commits named snapshots that were removed:\n{}",
        gone.join("\n")
    );
    assert!(checks > 100, "only {checks} commits were checked");
    // The clean-ups did their work: the dead runs are gone.
    let left: Vec<&String> = dead
        .iter()
        .filter(|run| storage.join(run).exists())
        .collect();
    assert!(left.is_empty(), "{} dead runs left", left.len());
    for n in 0..6 {
        let text = std::fs::read_to_string(log(n)).unwrap_or_default();
        assert!(
            !text.contains("is gone"),
            "member {n} found state missing:\n{text}"
        );
    }
    eprintln!("{checks} commits checked: every snapshot they named was there");
}

/// A member whose partitions' committed state is gone (the snapshot a commit names was removed
/// from the storage) does not exit, for its replacement to fail the same way for ever: it says
/// what is missing, reports it in the storage, and waits; once the loss is accepted
/// (`accept_state_loss`, what `riffle group accept-state-loss` does), it starts those partitions
/// with empty state, and the others with theirs.
#[test]
fn a_member_whose_committed_state_is_gone_waits_and_starts_once_its_loss_is_accepted() {
    let _serial = one_at_a_time();
    let (input, output) = (topic("group-lost-in", 6), topic("group-lost-out", 3));
    let (users, per_user) = (60, 100);
    let total = (users * per_user) as i64;
    keyed_input(&input, 6, users, per_user);
    let group = group_name("lost");
    let storage = storage_dir(&group);
    let mut members: Vec<Member> = (0..3)
        .map(|_| Member::start_mode("count", &group, &input, &output, DELAY_US / 2))
        .collect();
    wait_for_input(&group, &input, 6, total);
    // Each member commits its own partitions (they keep committing once the input is read).
    let deadline = Instant::now() + Duration::from_secs(60);
    while named_runs(&group, &input).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "one member committed every partition"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    members.clear(); // killed
    // The runs the commits name: the storage loses the manifest of one's snapshot, and the
    // state files (not the manifest) of another's; a third, if any, stays whole.
    let notes = common::committed_notes(&group, &input, 6);
    let named: BTreeSet<(String, u64)> = notes
        .values()
        .map(|(_, note)| {
            (
                note["run"].as_str().unwrap().to_string(),
                note["checkpoint"].as_u64().unwrap(),
            )
        })
        .collect();
    let named: Vec<(String, u64)> = named.into_iter().collect();
    assert!(named.len() >= 2, "the commits name one snapshot: {notes:?}");
    let snapshot =
        |(run, checkpoint): &(String, u64)| storage.join(format!("{run}/chk-{checkpoint}"));
    std::fs::remove_file(snapshot(&named[0]).join("_manifest.json")).unwrap();
    let mut files = 0;
    for entry in walk(&snapshot(&named[1])) {
        if !entry.ends_with("_manifest.json") {
            std::fs::remove_file(entry).unwrap();
            files += 1;
        }
    }
    assert!(files > 0, "{:?} holds no state file", named[1]);
    let lost_runs = [named[0].0.clone(), named[1].0.clone()];
    let lost: BTreeSet<i32> = notes
        .iter()
        .filter(|(_, (_, note))| lost_runs.iter().any(|run| note["run"] == run.as_str()))
        .map(|(p, _)| *p)
        .collect();
    assert!(lost.len() < 6, "every partition's state is lost: {notes:?}");
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("member.log");
    let mut member = Member::start_logged(
        "count",
        &group,
        &input,
        &output,
        0,
        &storage.display().to_string(),
        Some(&log),
    );
    wait_for_log(&log, "is gone", Duration::from_secs(60));
    // It waits, and looks again.
    wait_for_log(&log, "accept-state-loss", Duration::from_secs(20));
    let checkpoints = riffle::checkpoint::CheckpointStorage::open(
        &storage.display().to_string(),
        &[],
        "",
        "storage",
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let reported = loop {
        let reported = riffle_kafka::reported_missing_state(&checkpoints, &group).unwrap();
        let partitions: BTreeSet<i32> = reported.iter().map(|m| m.partition).collect();
        if partitions == lost {
            break reported;
        }
        assert!(
            Instant::now() < deadline,
            "reported {reported:?}, lost {lost:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        member.0.try_wait().unwrap().is_none(),
        "the member exited instead of waiting"
    );
    riffle_kafka::accept_state_loss(&checkpoints, &group, &reported, "the test").unwrap();
    assert!(
        riffle_kafka::reported_missing_state(&checkpoints, &group)
            .unwrap()
            .is_empty()
    );
    // One more click per user: the lost partitions' users count from nothing, the others on.
    keyed_input(&input, 6, users, 1);
    wait_for_input(&group, &input, 6, total + users as i64);
    let records = read_committed(&output, Duration::from_secs(60), |_, quiet| {
        quiet > Duration::from_secs(5)
    });
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    for record in &records {
        let value: Value = serde_json::from_str(&record.value).unwrap();
        last.insert(
            value["user"].as_str().unwrap().to_string(),
            value["count"].as_u64().unwrap(),
        );
    }
    for u in 0..users {
        let user = format!("u{u}");
        let partition =
            riffle::keys::subtask_for_key_group(riffle::keys::key_group_of(&user, 128), 128, 6)
                as i32;
        let expected = if lost.contains(&partition) {
            1
        } else {
            per_user + 1
        };
        assert_eq!(
            last.get(&user),
            Some(&expected),
            "{user} of partition {partition}"
        );
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("its loss was accepted"), "{text}");
    member.kill();
}

/// Issue 27: a member whose checkpoint storage stopped taking its writes kept its partitions,
/// and their offsets never moved. Now, after `tolerable_failed_checkpoints` (5 in a group)
/// failures in a row, its run fails naming the storage's error, it leaves the group and its
/// partitions move: the counts end exact without it.
#[test]
fn a_member_that_cannot_checkpoint_leaves_the_group_and_its_partitions_move() {
    let _serial = one_at_a_time();
    let (input, output) = (topic("group-broken-in", 6), topic("group-broken-out", 3));
    let (users, per_user) = (60, 200);
    let total = (users * per_user) as i64;
    keyed_input(&input, 6, users, per_user);
    let group = group_name("broken");
    let storage = storage_dir(&group).display().to_string();
    let mut members: Vec<Member> = (0..2)
        .map(|_| Member::start_mode("count", &group, &input, &output, DELAY_US / 2))
        .collect();
    wait_for_input(&group, &input, 6, total / 6);
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("broken.log");
    let mut broken = Member::start_with(
        "count-broken",
        &group,
        &input,
        &output,
        DELAY_US / 2,
        &storage,
        Some(&log),
        &[(BREAK_AFTER_ENV, "3000")],
    );
    wait_for_log(&log, "run on [(", Duration::from_secs(60));
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(status) = broken.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the member that cannot checkpoint is still there:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "{text}");
    assert!(
        text.contains("checkpoints failed in a row")
            && text.contains("the storage takes no writes"),
        "{text}"
    );
    let done = wait_for_input(&group, &input, 6, total);
    assert_eq!(done, total);
    assert_counts_exactly_once(&output, users, per_user);
    members.clear();
}

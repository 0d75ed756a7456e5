//! Unaligned checkpoints (Flink's FLIP-76) end to end: under heavy back-pressure they complete
//! where aligned ones time out; a failure after one is recovered exactly (the records in flight
//! are replayed, none twice); a checkpoint with records in flight refuses another parallelism.
//!
//! The job: two click sources, a union, and a slow operator in the union's task (every batch
//! takes a while), with small channels: the sources' channels into the union stay full, so an
//! aligned barrier waits behind every batch queued there.

use std::path::Path;
use std::time::Duration;

use riffle::aggregate::Count;
use riffle::checkpoint::{CheckpointConfig, CheckpointStats, RestartStrategy, RestoreFrom};
use riffle::operators::{Collector, Operator, OperatorContext};
use riffle::sink::{BlackholeSink, ExactlyOnceFileSink};
use riffle::testing::fail_once_after;
use riffle::time::WatermarkStrategy;
use riffle::window::Tumbling;
use riffle::{DataStream, EnvConfig, Record, StreamEnv};
use riffle_clicks::{Click, ClicksConfig};

use crate::{committed, run};

/// Clicks of one source (`offset` tells the two sources' users apart), within the watermark
/// bound: every run has one exact answer.
fn clicks(env: &StreamEnv, name: &str, offset: u64, count: u64) -> DataStream<Click> {
    let config = ClicksConfig {
        users: 200,
        late_share: 0.0,
        events_per_second: 2_000.0,
        seed: offset + 1,
        ..ClicksConfig::default()
    };
    let source = riffle_clicks::source(config).count(count).splits(2);
    env.from_source_with_watermarks(
        source,
        WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(5))
            .with_timestamps(|c: &Click| c.event_time),
    )
    .uid(name)
    .map(move |mut c: Click| {
        c.user_id += offset;
        c
    })
    .uid(&format!("{name}-users"))
}

/// Sleeps `per_record` for each record of a batch: the union's task is the bottleneck.
fn slow(stream: &DataStream<Click>, per_record: Duration) -> DataStream<Click> {
    stream
        .map(move |c: Click| {
            std::thread::sleep(per_record);
            c
        })
        .uid("slow")
}

fn config(checkpoints: &Path, unaligned: bool, timeout: Duration) -> EnvConfig {
    EnvConfig {
        parallelism: 1,
        buffer_size: 32,
        channel_capacity: 32,
        watermark_interval: Duration::from_millis(10),
        checkpoints: CheckpointConfig {
            interval: Some(Duration::from_millis(100)),
            timeout,
            retained: 1_000,
            storage: checkpoints.to_str().unwrap().to_string(),
            restart: RestartStrategy::FixedDelay {
                attempts: 3,
                delay: Duration::from_millis(50),
            },
            ..CheckpointConfig::default()
        }
        .unaligned(unaligned),
        ..EnvConfig::default()
    }
}

/// The checkpoints of a back-pressured run of `seconds`, aligned or not.
fn backpressured_run(unaligned: bool, seconds: u64, timeout: Duration) -> Vec<CheckpointStats> {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::with_config(config(dir.path(), unaligned, timeout));
    let a = clicks(&env, "a", 0, u64::MAX);
    let b = clicks(&env, "b", 1_000_000, u64::MAX);
    slow(&a.union(&[&b]), Duration::from_millis(2)).sink(BlackholeSink::new());
    let job = env.execute_async().unwrap();
    std::thread::sleep(Duration::from_secs(seconds));
    let checkpoints = job.checkpoints();
    job.cancel();
    let _ = job.wait();
    checkpoints
}

fn durations(checkpoints: &[CheckpointStats]) -> Vec<String> {
    checkpoints
        .iter()
        .map(|c| format!("{}: {} ms {}", c.id, c.duration_ms, c.status))
        .collect()
}

#[test]
fn under_backpressure_unaligned_checkpoints_complete_where_aligned_ones_time_out() {
    // One batch takes 64 ms in the union's task, and 32 batches wait in each source's channel:
    // an aligned barrier needs about 4 s to get through, past the timeout of 1.5 s. An
    // unaligned one overtakes them: about the time of a few batches.
    let timeout = Duration::from_millis(1_500);
    let aligned = backpressured_run(false, 4, timeout);
    println!("aligned: {:?}", durations(&aligned));
    assert!(
        aligned.iter().any(|c| c.status.contains("timed out")),
        "{aligned:?}"
    );
    assert!(
        aligned.iter().all(|c| !c.completed()),
        "no aligned checkpoint completes: {:?}",
        durations(&aligned)
    );
    let unaligned = backpressured_run(true, 4, timeout);
    println!("unaligned: {:?}", durations(&unaligned));
    let completed: Vec<_> = unaligned.iter().filter(|c| c.completed()).collect();
    assert!(
        completed.len() >= 3,
        "unaligned checkpoints complete: {:?}",
        durations(&unaligned)
    );
    // They hold the records they overtook.
    assert!(completed.iter().all(|c| c.unaligned));
    assert!(
        completed.iter().any(|c| c.in_flight_bytes > 0),
        "{:?}",
        completed
    );
    assert!(
        aligned
            .iter()
            .all(|c| !c.unaligned && c.in_flight_bytes == 0)
    );
}

/// Not a test: prints how long aligned and unaligned checkpoints take under the back-pressure
/// above, with no timeout (`cargo test -p riffle --test checkpoints measure_ -- --ignored
/// --nocapture`).
#[test]
#[ignore]
fn measure_checkpoint_durations_under_backpressure() {
    for unaligned in [false, true] {
        let checkpoints = backpressured_run(unaligned, 20, Duration::from_secs(60));
        let completed: Vec<u64> = checkpoints
            .iter()
            .filter(|c| c.completed())
            .map(|c| c.duration_ms)
            .collect();
        let sizes: Vec<u64> = checkpoints.iter().map(|c| c.in_flight_bytes).collect();
        println!(
            "unaligned {unaligned}: durations (ms) {completed:?}, in flight (bytes) {sizes:?}"
        );
    }
}

/// Two click sources into a union, one input slow (a slow operator in its own task between
/// its source and the union), then `crash`, counted per user in 5 s windows into an
/// exactly-once file sink (parallelism 2 after the union: the keyed task reads two channels).
///
/// The slow input makes both kinds of in-flight records: the source's queue into the slow task
/// is full (in-flight output), and the union snapshots at the other input's barrier while the
/// slow task still sends its last batch before its barrier (in-flight input).
fn union_with_a_slow_input(
    out: &Path,
    checkpoints: &Path,
    unaligned: bool,
    count: u64,
    crash: impl Fn(Click) -> Click + Send + Sync + 'static,
) -> StreamEnv {
    two_inputs_one_slow(out, checkpoints, unaligned, count, crash, Merge::Union)
}

/// How the two inputs meet.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Merge {
    /// `a.union(&[&b])`.
    Union,
    /// `a.connect(&b).map(..)`: a two-input operator over `Either`.
    Connect,
}

/// The job of [`union_with_a_slow_input`], its inputs merged by `merge`.
fn two_inputs_one_slow(
    out: &Path,
    checkpoints: &Path,
    unaligned: bool,
    count: u64,
    crash: impl Fn(Click) -> Click + Send + Sync + 'static,
    merge: Merge,
) -> StreamEnv {
    let env = StreamEnv::with_config(config(checkpoints, unaligned, Duration::from_secs(10)));
    let a = slow(&clicks(&env, "a", 0, count), Duration::from_micros(100)).start_new_chain();
    let b = env
        .from_source_with_watermarks(
            riffle_clicks::source(ClicksConfig {
                users: 200,
                late_share: 0.0,
                events_per_second: 2_000.0,
                seed: 2,
                ..ClicksConfig::default()
            })
            .count(count)
            .rate(6_000.0),
            WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(5))
                .with_timestamps(|c: &Click| c.event_time),
        )
        .uid("b")
        .map(|mut c: Click| {
            c.user_id += 1_000_000;
            c
        })
        .uid("b-users");
    let merged = match merge {
        Merge::Union => a.union(&[&b]),
        Merge::Connect => a.connect(&b).map(|c| c, |c| c).uid("merge"),
    };
    merged
        .map(crash)
        .uid("crash")
        .rebalance()
        .transform("spread", || SlowOnSubtask0 {
            slow: false,
            delay: Duration::from_micros(100),
            copies: 1,
        })
        .uid("spread")
        .set_parallelism(2)
        .key_by(|c| c.user_id)
        .window(Tumbling::of(Duration::from_secs(5)))
        // Counted where the keys are (no pre-aggregation before the shuffle): the keyed task
        // reads the two channels of `spread`.
        .pre_aggregate(false)
        .aggregate(Count)
        .uid("count")
        .set_parallelism(2)
        .map(|r| format!("{} {} {}", r.key, r.window_start, r.value))
        .set_parallelism(2)
        .sink(ExactlyOnceFileSink::new(out))
        .uid("sink")
        .set_parallelism(2);
    env
}

const COUNT: u64 = 15_000;

/// Passes each record on `copies` times; subtask 0 takes `delay` per record (`slow`). With
/// several copies, subtask 0 fills and sends output batches while it is still busy with its
/// input batch: the task after it gets the barrier from subtask 1 first, snapshots, and then
/// reads what subtask 0 sends before it reaches its barrier (in-flight input).
struct SlowOnSubtask0 {
    slow: bool,
    delay: Duration,
    copies: usize,
}

impl Operator for SlowOnSubtask0 {
    type In = Click;
    type Out = Click;
    fn open(&mut self, ctx: &OperatorContext) -> riffle::Result<()> {
        self.slow = ctx.subtask == 0;
        Ok(())
    }
    fn process(
        &mut self,
        batch: &mut Vec<Record<Click>>,
        out: &mut Collector<'_, Click>,
    ) -> riffle::Result<()> {
        for record in batch.drain(..) {
            if self.slow {
                std::thread::sleep(self.delay);
            }
            for _ in 0..self.copies {
                out.emit(record.clone())?;
            }
        }
        Ok(())
    }
}

/// The ids of the in-flight state (with a file) in checkpoint `id` of the storage at `root`.
fn in_flight_state(root: &Path, id: u64) -> Vec<String> {
    let storage = riffle::checkpoint::CheckpointStorage::open(
        root.to_str().unwrap(),
        &[],
        "riffle-job",
        "test",
    )
    .unwrap();
    let manifest = storage.read_manifest(&format!("chk-{id}")).unwrap();
    manifest
        .operators
        .iter()
        .filter(|(op, state)| {
            riffle::checkpoint::is_in_flight(op) && state.subtasks.iter().any(|s| s.file.is_some())
        })
        .map(|(op, _)| op.clone())
        .collect()
}

/// The failure-free output of the job, with aligned checkpoints.
fn expected(dir: &Path) -> Vec<String> {
    let env = union_with_a_slow_input(
        &dir.join("expected"),
        &dir.join("chk-expected"),
        false,
        COUNT,
        |c| c,
    );
    assert_eq!(run(&env).unwrap().restarts, 0);
    let expected = committed(&dir.join("expected"));
    assert!(!expected.is_empty());
    expected
}

/// Runs the job (inputs merged by `merge`) with unaligned checkpoints and a failure after
/// `after` records; checks that it restored records in flight and that its output equals
/// `expected`.
fn recovered_exactly(dir: &Path, merge: Merge, after: u64, expected: &[String]) {
    let (out, chk) = (dir.join("out"), dir.join("chk"));
    let env = two_inputs_one_slow(&out, &chk, true, COUNT, fail_once_after(after), merge);
    let result = run(&env).unwrap();
    assert_eq!(result.restarts, 1);
    let restored = result.restores[0];
    assert!(
        restored > 0,
        "restored from a checkpoint: {:?}",
        result.restores
    );
    let in_flight = in_flight_state(&chk, restored);
    assert!(
        !in_flight.is_empty(),
        "checkpoint {restored} had records in flight"
    );
    println!("checkpoint {restored} restored records in flight of {in_flight:?}");
    assert_eq!(committed(&out), expected);
}

#[test]
fn a_failure_after_unaligned_checkpoints_is_recovered_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let expected = expected(dir.path());
    recovered_exactly(&dir.path().join("union"), Merge::Union, 16_000, &expected);
    // The same through a two-input operator (records wrapped into `Either` on the way).
    recovered_exactly(
        &dir.path().join("connect"),
        Merge::Connect,
        12_000,
        &expected,
    );
}

#[test]
fn savepoints_stay_aligned_and_restore_at_another_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    let expected = expected(dir.path());
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let env = union_with_a_slow_input(&out, &chk, true, COUNT, |c| c);
    let job = env.execute_async().unwrap();
    std::thread::sleep(Duration::from_millis(1_000));
    let location = job
        .stop_with_savepoint(dir.path().join("savepoint").to_str().unwrap())
        .unwrap();
    let first = job.wait().unwrap();
    // The checkpoints before it held records in flight; the savepoint holds none.
    assert!(
        first
            .checkpoints
            .iter()
            .filter(|c| c.completed() && c.kind == riffle::checkpoint::SnapshotKind::Checkpoint)
            .any(|c| !in_flight_state(&chk, c.id).is_empty()),
        "{:?}",
        first.checkpoints
    );
    let manifest = riffle::checkpoint::Manifest::from_json(
        &std::fs::read(Path::new(&location).join(riffle::checkpoint::MANIFEST_FILE)).unwrap(),
    )
    .unwrap();
    assert!(
        manifest
            .operators
            .keys()
            .all(|id| !riffle::checkpoint::is_in_flight(id)),
        "{:?}",
        manifest.operators.keys()
    );
    // So it restores at parallelism 2, and the two runs together wrote the output of one.
    let env = union_with_a_slow_input(&out, &dir.path().join("chk-2"), true, COUNT, |c| c);
    env.configure(|c: &mut EnvConfig| {
        c.parallelism = 2;
        c.checkpoints.restore = Some(RestoreFrom::Savepoint(location.clone()));
    });
    let second = run(&env).unwrap();
    assert!(second.restored_from.is_some());
    assert_eq!(committed(&out), expected);
}

/// Clicks of both sources, spread over two subtasks (4 copies each; subtask 0 slow), then a
/// running count per user whose state is in `backend`, emitting `"<user> <n>"` for the n-th
/// click of a user.
fn running_counts(
    out: &Path,
    checkpoints: &Path,
    unaligned: bool,
    backend: std::sync::Arc<dyn riffle::state::StateBackend>,
    crash: impl Fn(Click) -> Click + Send + Sync + 'static,
) -> StreamEnv {
    static SEEN: riffle::state::ValueStateDescriptor<u64> =
        riffle::state::ValueStateDescriptor::new("seen");
    let mut config = config(checkpoints, unaligned, Duration::from_secs(10));
    config.state_backend = backend;
    // Small channels: the failure points below are spread over the run.
    config.channel_capacity = 4;
    let env = StreamEnv::with_config(config);
    let a = clicks(&env, "a", 0, 1_500);
    let b = clicks(&env, "b", 1_000_000, 1_500);
    a.union(&[&b])
        .map(crash)
        .uid("crash")
        .rebalance()
        .transform("spread", || SlowOnSubtask0 {
            slow: false,
            delay: Duration::from_millis(2),
            copies: 4,
        })
        .uid("spread")
        .set_parallelism(2)
        .key_by(|c| c.user_id)
        .process(
            |user: &u64,
             _: Click,
             ctx: &mut riffle::operators::KeyedContext<'_, '_, u64, String>| {
                let mut seen = ctx.value(&SEEN);
                let n = seen.get()?.unwrap_or(0) + 1;
                seen.set(n)?;
                ctx.emit(format!("{user} {n}"))
            },
        )
        .uid("count")
        .set_parallelism(2)
        .sink(ExactlyOnceFileSink::new(out))
        .uid("sink")
        .set_parallelism(2);
    env
}

#[test]
fn a_keyed_task_with_state_in_a_store_recovers_its_in_flight_input_exactly() {
    // The keyed task snapshots (operators and store) at the first barrier of its two channels
    // and goes on counting what the slow subtask of `spread` still sends before its barrier: a
    // store checkpoint taken later would hold those clicks too, and the restore would count
    // them twice.
    let backend = || -> std::sync::Arc<dyn riffle::state::StateBackend> {
        std::sync::Arc::new(riffle::testing::MemoryKvBackend)
    };
    let dir = tempfile::tempdir().unwrap();
    let env = running_counts(
        &dir.path().join("expected"),
        &dir.path().join("chk-expected"),
        false,
        backend(),
        |c| c,
    );
    assert_eq!(run(&env).unwrap().restarts, 0);
    let expected = committed(&dir.path().join("expected"));
    assert_eq!(expected.len(), 12_000);
    // Which records are in flight where at the restored checkpoint depends on timing: the
    // failure comes at other points until a restore had the keyed task's in-flight input
    // (about every second one has); every run must be exact.
    let mut restored_keyed_input = false;
    for (attempt, after) in [1_500, 2_000, 1_000, 2_500, 1_800].into_iter().enumerate() {
        let (out, chk) = (
            dir.path().join(format!("out-{attempt}")),
            dir.path().join(format!("chk-{attempt}")),
        );
        let env = running_counts(&out, &chk, true, backend(), fail_once_after(after));
        let result = run(&env).unwrap();
        assert_eq!(result.restarts, 1);
        assert_eq!(committed(&out), expected, "failure after {after} records");
        let restored = result.restores[0];
        if restored == 0 {
            continue; // failed before its first checkpoint
        }
        let in_flight = in_flight_state(&chk, restored);
        println!("checkpoint {restored} restored records in flight of {in_flight:?}");
        if in_flight.contains(&"count#in-flight-input".to_string()) {
            restored_keyed_input = true;
            break;
        }
    }
    assert!(
        restored_keyed_input,
        "no restore had in-flight input of the keyed task"
    );
}

#[test]
fn a_checkpoint_with_records_in_flight_restores_only_at_its_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let env = union_with_a_slow_input(&out, &chk, true, COUNT, fail_once_after(10_000));
    env.configure(|c: &mut EnvConfig| c.checkpoints.restart = RestartStrategy::None);
    assert!(run(&env).is_err());
    let storage = riffle::checkpoint::CheckpointStorage::open(
        chk.to_str().unwrap(),
        &[],
        "riffle-job",
        "test",
    )
    .unwrap();
    let with_records = storage
        .completed_checkpoints()
        .unwrap()
        .into_iter()
        .rev()
        .find(|&id| !in_flight_state(&chk, id).is_empty())
        .expect("a checkpoint with records in flight");
    // The same job at parallelism 2 everywhere: the sources' in-flight output belongs to
    // channels that no longer exist.
    let env = union_with_a_slow_input(&out, &chk, true, COUNT, |c| c);
    env.configure(|c: &mut EnvConfig| {
        c.parallelism = 2;
        c.checkpoints.restore = Some(RestoreFrom::Checkpoint(with_records));
        c.checkpoints.restart = RestartStrategy::None;
    });
    let err = run(&env).unwrap_err().to_string();
    assert!(
        err.contains("unaligned checkpoint") && err.contains("restores only at"),
        "{err}"
    );
}

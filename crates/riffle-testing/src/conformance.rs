//! A conformance suite for [`StateBackend`]s: what any backend must do for a job to give the
//! same answer on it as on the heap — through windows, sessions, keyed process functions with
//! value, list and map state and timers, rolling aggregates, two keyed steps in one task, a
//! failure and recovery, and a rescaling restore from a savepoint ([`check_backend`]); and
//! every stateful operator's snapshot -> restore -> continue round trip in the operator
//! harness ([`operator_round_trips`]).
//!
//! A backend crate runs them from a test:
//!
//! ```no_run
//! # use std::sync::Arc;
//! let work = std::env::temp_dir().join("conformance");
//! riffle_testing::conformance::check_backend(Arc::new(riffle::state::HeapBackend), &work);
//! riffle_testing::conformance::operator_round_trips(&riffle::state::HeapBackend).unwrap();
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use riffle::aggregate::Count;
use riffle::checkpoint::{CheckpointConfig, RestartStrategy, RestoreFrom};
use riffle::operators::{KeyedContext, KeyedProcessFunction};
use riffle::sink::ExactlyOnceFileSink;
use riffle::source::datagen::{DatagenSource, Generator, mix};
use riffle::state::{
    HeapBackend, ListStateDescriptor, MapStateDescriptor, StateBackend, StateTtl, TimeDomain,
    ValueStateDescriptor,
};
use riffle::testing::{Step, assert_snapshot_round_trip_on};
use riffle::time::WatermarkStrategy;
use riffle::window::{Session, Tumbling};
use riffle::{EnvConfig, JobResult, Result, StreamEnv, Timestamp};

/// Clicks in the conformance job.
const COUNT: u64 = 40_000;

/// A click of the conformance job.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Click {
    user_id: u64,
    url: String,
    event_time: Timestamp,
}

/// Clicks of 200 users on 50 pages, 2 000 per second of event time, up to 2 s out of order
/// (within the watermark bound: nothing late, every run has one exact answer).
struct Clicks;

impl Generator for Clicks {
    type Item = Click;
    fn generate(&self, i: u64) -> Click {
        Click {
            user_id: 1 + mix(42, i, 2) % 200,
            url: format!("/page/{}", mix(42, i, 5) % 50),
            event_time: 1_768_491_600_000 + i as Timestamp / 2
                - (mix(42, i, 6) % 2_001) as Timestamp,
        }
    }
    fn name(&self) -> String {
        "clicks".into()
    }
}

/// Event-time buckets of the keyed process function.
const BUCKET: Timestamp = 10_000;

static BUCKET_COUNTS: MapStateDescriptor<Timestamp, u64> = MapStateDescriptor::new("bucket-counts");
static BUCKET_PAGES: ListStateDescriptor<(Timestamp, String)> =
    ListStateDescriptor::new("bucket-pages");
static FIRED: ValueStateDescriptor<u64> = ValueStateDescriptor::new("fired");
/// The state of both keyed steps of one task (see [`job`]): the same name in each.
static CHAINED: ValueStateDescriptor<u64> = ValueStateDescriptor::new("chained");

/// Counts each user's clicks per 10-second bucket of event time (map state), remembers the
/// pages (list state) and reports each bucket when the watermark passes it (timers), with how
/// many buckets the user had before (value state). Independent of arrival order.
#[derive(Clone)]
struct Buckets;

impl KeyedProcessFunction<u64, Click, String> for Buckets {
    fn process_element(
        &mut self,
        _: &u64,
        click: Click,
        ctx: &mut KeyedContext<u64, String>,
    ) -> Result<()> {
        let bucket = click.event_time - click.event_time.rem_euclid(BUCKET);
        let count = ctx.map(&BUCKET_COUNTS).get(&bucket)?.unwrap_or(0);
        ctx.map(&BUCKET_COUNTS).put(bucket, count + 1)?;
        ctx.list(&BUCKET_PAGES).add((bucket, click.url))?;
        ctx.register_event_time_timer(bucket + BUCKET - 1);
        Ok(())
    }

    fn on_timer(
        &mut self,
        user: &u64,
        timestamp: Timestamp,
        _: TimeDomain,
        ctx: &mut KeyedContext<u64, String>,
    ) -> Result<()> {
        let bucket = timestamp + 1 - BUCKET;
        let count = ctx.map(&BUCKET_COUNTS).remove(&bucket)?.unwrap_or(0);
        let (mine, rest): (Vec<_>, Vec<_>) = ctx
            .list(&BUCKET_PAGES)
            .get()?
            .into_iter()
            .partition(|(b, _)| *b == bucket);
        ctx.list(&BUCKET_PAGES).update(rest)?;
        let mut pages: Vec<String> = mine.into_iter().map(|(_, page)| page).collect();
        pages.sort();
        pages.dedup();
        let before = ctx.value(&FIRED).get()?.unwrap_or(0);
        ctx.value(&FIRED).set(before + 1)?;
        ctx.emit(format!(
            "bucket {user} {bucket} clicks={count} pages={} before={before}",
            pages.len()
        ))
    }
}

/// The conformance job on `backend`: every kind of keyed state into an exactly-once file sink
/// at `work/out`, checkpointing into `work/chk` every 100 ms, `crash` applied to each click.
fn job(
    backend: &Arc<dyn StateBackend>,
    work: &Path,
    parallelism: usize,
    crash: impl Fn(Click) -> Click + Send + Sync + 'static,
) -> StreamEnv {
    let env = StreamEnv::with_config(EnvConfig {
        job_name: "conformance".into(),
        parallelism,
        buffer_size: 64,
        watermark_interval: Duration::from_millis(10),
        checkpoints: CheckpointConfig {
            interval: Some(Duration::from_millis(100)),
            storage: work.join("chk").to_string_lossy().into_owned(),
            restart: RestartStrategy::FixedDelay {
                attempts: 3,
                delay: Duration::from_millis(50),
            },
            ..CheckpointConfig::default()
        },
        state_backend: backend.clone(),
        local_state_dir: work.join("local"),
        ..EnvConfig::default()
    });
    let source = DatagenSource::new(Clicks)
        .count(COUNT)
        .rate(40_000.0)
        .splits(4);
    let strategy = WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(5))
        .with_timestamps(|c: &Click| c.event_time);
    let clicks = env
        .from_source_with_watermarks(source, strategy)
        .uid("clicks")
        .map(crash)
        .uid("crash");
    let keyed = clicks.key_by(|c| c.user_id);
    let tumbling = keyed
        .window(Tumbling::of(Duration::from_secs(5)))
        .aggregate(Count)
        .uid("tumbling")
        .map(|r| format!("tumbling {} {} {}", r.key, r.window_start, r.value));
    let sessions = keyed
        .window(Session::with_gap(Duration::from_secs(3)))
        .aggregate(Count)
        .uid("sessions")
        .map(|r| {
            format!(
                "session {} {}..{} {}",
                r.key, r.window_start, r.window_end, r.value
            )
        });
    let buckets = keyed.process_function(Buckets).uid("buckets");
    let rolling = keyed
        .aggregate(Count)
        .uid("rolling")
        .map(|(user, n)| format!("rolling {user} {n}"));
    // Two keyed steps in one task (the second keyed by the first's key, not repartitioned),
    // each with a value state of the same name: in a store of one task they must not mix.
    let chained = keyed
        .process(|user: &u64, _: Click, ctx| {
            let n = ctx.value(&CHAINED).get()?.unwrap_or(0) + 1;
            ctx.value(&CHAINED).set(n)?;
            ctx.emit((*user, n))
        })
        .uid("chained-count")
        .reinterpret_as_keyed(|(user, _): &(u64, u64)| *user)
        .process(|_: &u64, (user, n): (u64, u64), ctx| {
            let sum = ctx.value(&CHAINED).get()?.unwrap_or(0) + n;
            ctx.value(&CHAINED).set(sum)?;
            match n % 10 {
                0 => ctx.emit(format!("chained {user} {n} {sum}")),
                _ => Ok(()),
            }
        })
        .uid("chained-sum");
    tumbling
        .union(&[&sessions, &buckets, &rolling, &chained])
        .sink(ExactlyOnceFileSink::new(work.join("out")))
        .uid("sink");
    env
}

/// Runs the job; panics if it does not end within 180 s.
fn run(env: &StreamEnv) -> Result<JobResult> {
    let handle = env.execute_async()?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(handle.wait());
    });
    rx.recv_timeout(Duration::from_secs(180))
        .expect("the conformance job did not end within 180 s")
}

/// Every committed line under `dir`, sorted; of the rolling counts only each user's last
/// (the intermediate ones depend on how the pre-aggregation batched them).
fn committed(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    let mut rolling = std::collections::BTreeMap::<String, u64>::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().is_file() && !entry.file_name().to_string_lossy().starts_with('.') {
            for line in std::fs::read_to_string(entry.path())
                .unwrap_or_default()
                .lines()
            {
                let text = line.trim_matches('"');
                match text
                    .strip_prefix("rolling ")
                    .and_then(|rest| rest.split_once(' '))
                {
                    Some((user, n)) => {
                        let n = n.parse().expect("a rolling count");
                        let last = rolling.entry(user.to_string()).or_default();
                        *last = (*last).max(n);
                    }
                    None => lines.push(text.to_string()),
                }
            }
        }
    }
    lines.extend(
        rolling
            .into_iter()
            .map(|(user, n)| format!("rolling {user} {n}")),
    );
    lines.sort();
    lines
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create a directory");
    for entry in std::fs::read_dir(from).expect("list a directory").flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy a file");
        }
    }
}

fn fresh(dir: PathBuf) -> PathBuf {
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a work directory");
    dir
}

/// Panics with the lines only one side has (the outputs are large).
fn assert_same(got: &[String], expected: &[String], what: &str) {
    if got == expected {
        return;
    }
    let (mut missing, mut extra) = (expected.to_vec(), Vec::new());
    for line in got {
        match missing.iter().position(|l| l == line) {
            Some(i) => {
                missing.swap_remove(i);
            }
            None => extra.push(line.clone()),
        }
    }
    missing.sort();
    panic!(
        "{what}: {} lines missing, {} extra (of {}); first missing: {:?}; first extra: {:?}",
        missing.len(),
        extra.len(),
        expected.len(),
        &missing[..missing.len().min(8)],
        &extra[..extra.len().min(8)]
    );
}

/// Runs the whole suite for `backend` in `work` (emptied first); panics naming the first check
/// that fails.
pub fn check_backend(backend: Arc<dyn StateBackend>, work: &Path) {
    let heap: Arc<dyn StateBackend> = Arc::new(HeapBackend);
    let reference = fresh(work.join("heap"));
    let result = run(&job(&heap, &reference, 2, |c| c)).expect("the reference run on the heap");
    assert_eq!(result.restarts, 0);
    let expected = committed(&reference.join("out"));
    let kinds = ["tumbling ", "session ", "bucket ", "rolling ", "chained "];
    for kind in kinds {
        assert!(
            expected.iter().any(|l| l.starts_with(kind)),
            "the reference output has no `{kind}` lines"
        );
    }
    same_output(&backend, work, &expected);
    recovers_exactly(&backend, work, &expected);
    rescales_through_a_savepoint(&backend, work, &expected);
}

/// The same job on `backend` gives the heap's output.
fn same_output(backend: &Arc<dyn StateBackend>, work: &Path, expected: &[String]) {
    let dir = fresh(work.join("same"));
    let result = run(&job(backend, &dir, 2, |c| c)).expect("the run on the backend");
    assert_eq!(result.restarts, 0);
    assert_same(
        &committed(&dir.join("out")),
        expected,
        &format!("{} gave other output than the heap", backend.name()),
    );
}

/// A failure mid-stream is recovered from the backend's checkpoint with exactly the heap's output.
fn recovers_exactly(backend: &Arc<dyn StateBackend>, work: &Path, expected: &[String]) {
    let dir = fresh(work.join("recovery"));
    // Slowed before the failure (sleeping, 3 s or more): a loaded machine must have completed
    // a checkpoint by then.
    let crash = super::fail_once_after(COUNT * 3 / 5);
    let result = run(&job(backend, &dir, 2, move |click| {
        std::thread::sleep(Duration::from_micros(250));
        crash(click)
    }))
    .expect("the run with a failure");
    assert_eq!(result.restarts, 1, "one failure, one restart");
    assert!(
        result.restores[0] > 0,
        "restored from a checkpoint, not from scratch: {:?}",
        result.restores
    );
    assert_same(
        &committed(&dir.join("out")),
        expected,
        &format!("{} after a failure", backend.name()),
    );
}

/// Stopped with a savepoint at parallelism 2, the job continues at 1 and at 3 (key groups move
/// between stores) with exactly the heap's output.
fn rescales_through_a_savepoint(backend: &Arc<dyn StateBackend>, work: &Path, expected: &[String]) {
    let first = fresh(work.join("rescale-2"));
    // Slowed to 5 s or more (sleeping, not spinning): on a loaded machine the input must not
    // end before two checkpoints have completed.
    let handle = job(backend, &first, 2, |c| {
        std::thread::sleep(Duration::from_micros(250));
        c
    })
    .execute_async()
    .expect("start the first half");
    // Stop once a checkpoint holds state: part-way through the input.
    let started = Instant::now();
    while handle
        .checkpoints()
        .iter()
        .filter(|c| c.completed())
        .count()
        < 2
        && started.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let savepoint = handle
        .stop_with_savepoint(first.join("savepoint").to_str().expect("a UTF-8 path"))
        .expect("a savepoint");
    let read = handle
        .wait()
        .expect("the first half")
        .metrics
        .operator_total("Source: clicks")
        .map_or(0, |m| m.records_out);
    assert!(
        read > 0 && read < COUNT,
        "stopped part-way: {read} of {COUNT} read"
    );
    for parallelism in [1, 3] {
        let dir = fresh(work.join(format!("rescale-{parallelism}")));
        copy_dir(&first.join("out"), &dir.join("out"));
        let env = job(backend, &dir, parallelism, |c| c);
        env.configure(|c: &mut EnvConfig| {
            c.checkpoints.restore = Some(RestoreFrom::Savepoint(savepoint.clone()))
        });
        let result = run(&env).expect("the restored run");
        assert!(result.restored_from.is_some());
        assert_same(
            &committed(&dir.join("out")),
            expected,
            &format!("{} restored at parallelism {parallelism}", backend.name()),
        );
    }
}

/// Input of the operator round trips: (user, event time).
pub type Visit = (u64, Timestamp);

static LAST_SEEN: ValueStateDescriptor<Timestamp> = ValueStateDescriptor::new("last-seen");
static VISITS: ValueStateDescriptor<u64> =
    ValueStateDescriptor::new("visits").with_ttl(StateTtl::after_write(Duration::from_secs(60)));

/// Reports a user inactive for 30 s of event time (an event-time timer moved by each visit),
/// counts visits in state with a 60 s TTL after write, and says when a user was first seen 10 s
/// of processing time ago (a processing-time timer): a keyed process function using every kind
/// of timer and TTL, for tests.
#[derive(Clone, Debug)]
pub struct Inactivity;

impl KeyedProcessFunction<u64, Visit, String> for Inactivity {
    fn process_element(
        &mut self,
        user: &u64,
        visit: Visit,
        ctx: &mut KeyedContext<u64, String>,
    ) -> Result<()> {
        if let Some(previous) = ctx.value(&LAST_SEEN).get()? {
            ctx.delete_event_time_timer(previous + 30_000);
        }
        ctx.value(&LAST_SEEN).set(visit.1)?;
        ctx.register_event_time_timer(visit.1 + 30_000);
        let visits = ctx.value(&VISITS).get()?.unwrap_or(0) + 1;
        ctx.value(&VISITS).set(visits)?;
        if visits == 1 {
            let at = ctx.current_processing_time() + 10_000;
            ctx.register_processing_time_timer(at);
        }
        ctx.emit(format!("user {user} visit {visits}"))
    }

    fn on_timer(
        &mut self,
        user: &u64,
        timestamp: Timestamp,
        domain: TimeDomain,
        ctx: &mut KeyedContext<u64, String>,
    ) -> Result<()> {
        match domain {
            TimeDomain::EventTime => {
                ctx.emit(format!("user {user} inactive since {}", timestamp - 30_000))
            }
            TimeDomain::ProcessingTime => ctx.emit(format!("user {user} first seen 10 s ago")),
        }
    }
}

/// Firings of a window, in a window function's per-window state.
static FIRINGS: ValueStateDescriptor<u64> = ValueStateDescriptor::new("firings");
/// Windows (or records) of a user, in a window function's global state.
static WINDOWS: ValueStateDescriptor<u64> = ValueStateDescriptor::new("windows");

/// Visits, watermarks and processing time: on-time records, a late update within the lateness,
/// state dropped past it, a record too late, windows and timers firing.
fn script() -> Vec<Step<Visit>> {
    use super::Step::*;
    vec![
        Record((1, 1_000), 1_000),
        Record((2, 2_000), 2_000),
        Record((1, 61_000), 61_000),
        Advance(Duration::from_secs(1)),
        Watermark(59_999),
        Record((1, 5_000), 5_000), // late, within 30 s of lateness: an update
        Record((2, 62_000), 62_000),
        Record((3, 63_000), 63_000),
        Advance(Duration::from_secs(1)),
        Watermark(95_000),           // the first window's state is dropped
        Record((1, 10_000), 10_000), // too late
        Record((3, 121_000), 121_000),
        Advance(Duration::from_secs(10)),
        Watermark(130_000),
        Record((3, 125_000), 125_000),
    ]
}

/// Every stateful operator survives a checkpoint at any point of a scripted run with its keyed
/// state in `backend`: tumbling windows with lateness and early firings, sliding windows,
/// merging session windows, processing-time windows, a full-window function, a keyed process
/// function with state TTL and both kinds of timers, sliding windows kept as slices, a rolling aggregate, and a keyed broadcast
/// function (keyed state, timers and broadcast state), an interval join and a pattern. See
/// [`assert_snapshot_round_trip_on`].
pub fn operator_round_trips(backend: &dyn StateBackend) -> Result<()> {
    use riffle::aggregate::Sum;
    use riffle::operators::KeyedProcess;
    use riffle::testing::WindowTest;
    use riffle::window::{Sliding, TimeWindow, WindowCollector};
    let user = |v: &Visit| v.0;
    let script = script();
    assert_snapshot_round_trip_on(
        backend,
        || {
            WindowTest::new(user, Tumbling::of(Duration::from_secs(60)))
                .allowed_lateness(Duration::from_secs(30))
                .early_firing(Duration::from_millis(700))
                .aggregate(Count)
        },
        &script,
    )?;
    assert_snapshot_round_trip_on(
        backend,
        || {
            WindowTest::new(
                user,
                Sliding::of(Duration::from_secs(60), Duration::from_secs(20)),
            )
            .allowed_lateness(Duration::from_secs(10))
            .aggregate(Sum::of(|v: &Visit| v.1 as u64 / 1000))
        },
        &script,
    )?;
    // The same windows kept as slices (no lateness: slices need none).
    assert_snapshot_round_trip_on(
        backend,
        || {
            WindowTest::new(
                user,
                Sliding::of(Duration::from_secs(60), Duration::from_secs(20)),
            )
            .sliced()
            .aggregate(Sum::of(|v: &Visit| v.1 as u64 / 1000))
        },
        &script,
    )?;
    assert_snapshot_round_trip_on(
        backend,
        || {
            WindowTest::new(user, Session::with_gap(Duration::from_secs(30)))
                .allowed_lateness(Duration::from_secs(20))
                .aggregate(Count)
        },
        &script,
    )?;
    assert_snapshot_round_trip_on(
        backend,
        || {
            WindowTest::new(
                user,
                Tumbling::processing_time(Duration::from_millis(1_500)),
            )
            .aggregate(Count)
        },
        &script,
    )?;
    assert_snapshot_round_trip_on(
        backend,
        || {
            WindowTest::new(user, Tumbling::of(Duration::from_secs(60)))
                .allowed_lateness(Duration::from_secs(30))
                .process(
                    |user: &u64,
                     window: TimeWindow,
                     visits: &[Visit],
                     out: &mut WindowCollector<String>|
                     -> Result<()> {
                        let mut times: Vec<i64> = visits.iter().map(|v| v.1).collect();
                        times.sort();
                        // Firings of this window (per-window state, dropped with the window)
                        // and windows of this user (global state).
                        let firing = out.window_state()?.value(&FIRINGS).get()?.unwrap_or(0) + 1;
                        out.window_state()?.value(&FIRINGS).set(firing)?;
                        let mut global = out.global_state()?;
                        let windows =
                            global.value(&WINDOWS).get()?.unwrap_or(0) + u64::from(firing == 1);
                        global.value(&WINDOWS).set(windows)?;
                        out.emit(format!(
                            "{user} {} {times:?} {} firing {firing} window {windows}",
                            window.start,
                            out.is_update()
                        ))
                    },
                )
        },
        &script,
    )?;
    assert_snapshot_round_trip_on(
        backend,
        || {
            WindowTest::new(user, Session::with_gap(Duration::from_secs(30)))
                .allowed_lateness(Duration::from_secs(20))
                .process(
                    |user: &u64,
                     window: TimeWindow,
                     visits: &[Visit],
                     out: &mut WindowCollector<String>|
                     -> Result<()> {
                        let mut global = out.global_state()?;
                        let seen = global.value(&WINDOWS).get()?.unwrap_or(0) + visits.len() as u64;
                        global.value(&WINDOWS).set(seen)?;
                        out.emit(format!("{user} session {} total {seen}", window.start))
                    },
                )
        },
        &script,
    )?;
    assert_snapshot_round_trip_on(
        backend,
        || KeyedProcess::new(Arc::new(user), Inactivity),
        &script,
    )?;
    rolling_round_trip(backend)?;
    keyed_broadcast_round_trip(backend)?;
    interval_join_round_trip(backend)?;
    pattern_round_trip(backend)
}

/// Per-page thresholds, broadcast.
static THRESHOLDS: MapStateDescriptor<u64, u64> = MapStateDescriptor::new("thresholds");
static VISIT_COUNT: ValueStateDescriptor<u64> = ValueStateDescriptor::new("visit-count");

/// Counts each user's visits (keyed state) and, 10 s of event time after each, reports the count
/// against the user's threshold (broadcast state) from a timer.
#[derive(Clone)]
struct Thresholds;

impl riffle::operators::KeyedBroadcastProcessFunction<u64, Visit, (u64, u64), String>
    for Thresholds
{
    fn process_element(
        &mut self,
        _: &u64,
        visit: Visit,
        ctx: &mut riffle::operators::KeyedReadOnlyBroadcastContext<'_, '_, '_, u64, String>,
    ) -> Result<()> {
        let visits = ctx.value(&VISIT_COUNT).get()?.unwrap_or(0) + 1;
        ctx.value(&VISIT_COUNT).set(visits)?;
        ctx.register_event_time_timer(visit.1 + 10_000);
        Ok(())
    }
    fn process_broadcast_element(
        &mut self,
        (user, threshold): (u64, u64),
        ctx: &mut riffle::operators::BroadcastContext<'_, '_, String>,
    ) -> Result<()> {
        ctx.broadcast_state(&THRESHOLDS)?.insert(user, threshold);
        Ok(())
    }
    fn on_timer(
        &mut self,
        user: &u64,
        at: Timestamp,
        _: TimeDomain,
        ctx: &mut riffle::operators::KeyedReadOnlyBroadcastContext<'_, '_, '_, u64, String>,
    ) -> Result<()> {
        let visits = ctx.value(&VISIT_COUNT).get()?.unwrap_or(0);
        let threshold = ctx.broadcast_state(&THRESHOLDS)?.get(user).copied();
        ctx.emit(format!(
            "{user} at {at}: {visits} visits, threshold {threshold:?}"
        ))
    }
}

/// A keyed broadcast function (keyed state and timers, broadcast state) round trip.
fn keyed_broadcast_round_trip(backend: &dyn StateBackend) -> Result<()> {
    use riffle::Either;
    use riffle::operators::{BroadcastStateDeclarations, KeyedBroadcastProcess};
    let mut steps: Vec<Step<Either<Visit, (u64, u64)>>> =
        vec![Step::Record(Either::Right((1, 2)), 0)];
    for (i, step) in script().into_iter().enumerate() {
        steps.push(match step {
            Step::Record(visit, at) => Step::Record(Either::Left(visit), at),
            Step::Watermark(w) => Step::Watermark(w),
            Step::Advance(by) => Step::Advance(by),
        });
        if i == 4 {
            steps.push(Step::Record(Either::Right((2, 1)), 0));
            steps.push(Step::Record(Either::Right((1, 3)), 0));
        }
    }
    let mut declarations = BroadcastStateDeclarations::default();
    declarations.declare(&THRESHOLDS);
    let key: riffle::keys::KeyFn<u64, Visit> = Arc::new(|v: &Visit| v.0);
    assert_snapshot_round_trip_on(
        backend,
        || KeyedBroadcastProcess::new(key.clone(), Thresholds, declarations.clone()),
        &steps,
    )
}

/// The rolling aggregate (with partial aggregates from a pre-aggregation) round trip.
fn rolling_round_trip(backend: &dyn StateBackend) -> Result<()> {
    use riffle::aggregate::Sum;
    use riffle::operators::Rolling;
    use riffle::testing::rolling_aggregate;
    type In = Rolling<u64, (u64, u64), u64>;
    let steps: Vec<Step<In>> = vec![
        Step::Record(Rolling::Record((1, 5)), 1),
        Step::Record(Rolling::Partial { key: 2, acc: 10 }, 2),
        Step::Record(Rolling::Record((1, 7)), 3),
        Step::Record(Rolling::Partial { key: 1, acc: 100 }, 4),
        Step::Record(Rolling::Record((2, 1)), 5),
    ];
    let key: riffle::keys::KeyFn<u64, In> = Arc::new(|e: &In| match e {
        Rolling::Record((k, _)) => *k,
        Rolling::Partial { key, .. } => *key,
    });
    assert_snapshot_round_trip_on(
        backend,
        || rolling_aggregate(key.clone(), Sum::of(|v: &(u64, u64)| v.1)),
        &steps,
    )
}

/// The interval join round trip: both sides buffered across the cut, joins with what was
/// restored, cleanup timers restored, late records of both sides (17 pairs, 9 late records).
fn interval_join_round_trip(backend: &dyn StateBackend) -> Result<()> {
    use riffle::Either;
    use riffle::operators::{IntervalJoinOperator, IntervalJoinSpec, JoinContext};
    type In = Either<(u64, u32), (u64, u32)>;
    let key: riffle::api::KeyFn<u64, In> = Arc::new(|e: &In| match e {
        Either::Left((k, _)) | Either::Right((k, _)) => *k,
    });
    let mut steps: Vec<Step<In>> = Vec::new();
    for i in 0..40u32 {
        let t = i64::from(i) * 300 - i64::from(i % 4) * 400;
        let record = if i % 3 == 0 {
            Either::Right((u64::from(i % 2), i))
        } else {
            Either::Left((u64::from(i % 2), i))
        };
        steps.push(Step::Record(record, t));
        if i % 4 == 3 {
            // Some records of either side come after the watermark passed them: late.
            steps.push(Step::Watermark(t + 1_250));
        }
    }
    assert_snapshot_round_trip_on(
        backend,
        || {
            IntervalJoinOperator::new(
                key.clone(),
                IntervalJoinSpec::new(-700, 1_200),
                |l: (u64, u32), r: (u64, u32), ctx: &mut JoinContext<(u64, u32, u32)>| {
                    ctx.emit((l.0, l.1, r.1))
                },
            )
        },
        &steps,
    )
}

/// The pattern round trip: partial matches, the events they took and the events waiting for
/// the watermark cross the cut; matches, timeouts (emitted into the main output here) and late
/// events on both sides of it.
fn pattern_round_trip(backend: &dyn StateBackend) -> Result<()> {
    use riffle::cep::{CepOperator, Match, Pattern, PatternContext, PatternProcessFunction};
    /// (user, kind): 0 opens, 1 goes on, 2 cancels, 3 closes.
    type Event = (u64, u8);
    #[derive(Clone)]
    struct Both;
    impl PatternProcessFunction<u64, Event, String> for Both {
        fn process_match(
            &mut self,
            key: &u64,
            m: Match<Event>,
            ctx: &mut PatternContext<Event, String>,
        ) -> Result<()> {
            ctx.emit(format!(
                "match {key} {} events {:?}",
                m.len(),
                ctx.timestamp()
            ))
        }
        fn process_timed_out(
            &mut self,
            key: &u64,
            m: Match<Event>,
            ctx: &mut PatternContext<Event, String>,
        ) -> Result<()> {
            ctx.emit(format!(
                "timeout {key} {} events {:?}",
                m.len(),
                ctx.timestamp()
            ))
        }
    }
    let pattern = Pattern::begin("open")
        .where_(|e: &Event| e.1 == 0)
        .followed_by("on")
        .where_(|e: &Event| e.1 == 1)
        .one_or_more()
        .not_followed_by("cancel")
        .where_(|e: &Event| e.1 == 2)
        .followed_by("close")
        .where_(|e: &Event| e.1 == 3)
        .within(Duration::from_millis(2_000));
    let mut steps: Vec<Step<Event>> = Vec::new();
    for i in 0..60u32 {
        let t = i64::from(i) * 150 - i64::from(i % 3) * 200;
        steps.push(Step::Record((u64::from(i % 3), ((i * 7) % 4) as u8), t));
        if i % 5 == 4 {
            steps.push(Step::Watermark(t - 100));
        }
    }
    assert_snapshot_round_trip_on(
        backend,
        || CepOperator::new(|e: &Event| e.0, &pattern, Both).expect("a valid pattern"),
        &steps,
    )
}

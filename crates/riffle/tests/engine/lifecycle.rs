//! Stopping and cancelling running jobs: no hang, a clean summary on stop; what a job that
//! ended or failed does with its state.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use riffle::operators::KeyedContext;
use riffle::sink::CollectSink;
use riffle::state::ValueStateDescriptor;
use riffle::{EnvConfig, Error, Result, StreamEnv};
use riffle_clicks::ClicksConfig;

use crate::{env, run};

#[test]
fn stop_drains_an_unbounded_job_and_loses_nothing_in_flight() {
    let env = env(2);
    let (sink, out) = CollectSink::new();
    env.from_source(riffle_clicks::source(ClicksConfig::default()).rate(20_000.0))
        .map(|c| c.user_id)
        .key_by(|u| *u)
        .process(
            |_: &u64,
             u: u64,
             ctx: &mut riffle::operators::KeyedContext<'_, '_, u64, u64>|
             -> riffle::Result<()> { ctx.emit(u) },
        )
        .sink(sink);
    let job = env.execute_async().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    job.stop();
    let result = job.wait().unwrap();
    let produced = result.records_out("Source: clicks");
    assert!(produced > 1_000, "the source ran ({produced})");
    assert_eq!(
        out.len() as u64,
        produced,
        "everything the source emitted reached the sink"
    );
}

#[test]
fn cancel_ends_a_running_job_with_cancelled() {
    let env = env(2);
    env.from_source(riffle_clicks::source(ClicksConfig::default()))
        .map(|c| c.user_id)
        .rebalance()
        .map(|u| u)
        .sink(CollectSink::new().0);
    let job = env.execute_async().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    job.cancel();
    assert!(matches!(job.wait(), Err(Error::Cancelled)));
}

/// A state's value that counts its creations and drops (each test its own counters).
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Counted {
    #[serde(skip)]
    counters: Option<&'static Counters>,
}

#[derive(Default)]
struct Counters {
    created: AtomicUsize,
    dropped: AtomicUsize,
}

impl Drop for Counted {
    fn drop(&mut self) {
        if let Some(counters) = self.counters {
            counters.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

const COUNTED: ValueStateDescriptor<Counted> = ValueStateDescriptor::new("counted");

/// Runs 1000 numbers through a keyed step that keeps a [`Counted`] per key (100 keys, p = 2),
/// failing at `fail_at` if given; returns the sink's records and how the job ended.
fn run_counted(
    counters: &'static Counters,
    free_state_at_end: bool,
    fail_at: Option<u64>,
) -> (usize, Result<riffle::JobResult>) {
    let env = StreamEnv::with_config(EnvConfig {
        free_state_at_end,
        ..env(2).config()
    });
    let (sink, out) = CollectSink::new();
    env.from_iter(0..1000u64)
        .key_by(|n| n % 100)
        .process(
            move |_: &u64, n: u64, ctx: &mut KeyedContext<'_, '_, u64, u64>| -> Result<()> {
                if Some(n) == fail_at {
                    return Err(Error::user("failing on purpose"));
                }
                let create = || {
                    counters.created.fetch_add(1, Ordering::SeqCst);
                    Counted {
                        counters: Some(counters),
                    }
                };
                ctx.value(&COUNTED).modify(create, |_| ())?;
                ctx.emit(n)
            },
        )
        .sink(sink);
    let result = run(&env);
    (out.len(), result)
}

#[test]
fn a_job_that_ends_frees_its_heap_state_unless_told_to_leave_it_to_the_exit() {
    static FREED: Counters = Counters {
        created: AtomicUsize::new(0),
        dropped: AtomicUsize::new(0),
    };
    let (records, result) = run_counted(&FREED, true, None);
    result.unwrap();
    assert_eq!(records, 1000);
    assert_eq!(
        FREED.created.load(Ordering::SeqCst),
        100,
        "one value per key"
    );
    assert_eq!(
        FREED.dropped.load(Ordering::SeqCst),
        100,
        "freed at the end"
    );

    static LEFT: Counters = Counters {
        created: AtomicUsize::new(0),
        dropped: AtomicUsize::new(0),
    };
    let (records, result) = run_counted(&LEFT, false, None);
    result.unwrap();
    assert_eq!(records, 1000, "the same output");
    assert_eq!(LEFT.created.load(Ordering::SeqCst), 100);
    assert_eq!(
        LEFT.dropped.load(Ordering::SeqCst),
        0,
        "the state of a job that ended is left to the process's exit"
    );
}

#[test]
fn a_job_that_fails_frees_its_heap_state_even_when_told_to_leave_it() {
    static FAILED: Counters = Counters {
        created: AtomicUsize::new(0),
        dropped: AtomicUsize::new(0),
    };
    // The last number fails its subtask; the other subtask may have finished its input by
    // then (its chain kept for the exit) or be cancelled: either way the run's state is freed.
    let (_, result) = run_counted(&FAILED, false, Some(999));
    assert!(result.is_err(), "the job failed");
    let created = FAILED.created.load(Ordering::SeqCst);
    assert!(created > 0);
    assert_eq!(FAILED.dropped.load(Ordering::SeqCst), created);
}

//! Event times at the edges of `i64` through whole windowed jobs: i64::MIN is no event time (a
//! bad record of the source, with the reason); a time whose window does not fit in the
//! millisecond range (i64::MIN + 1, i64::MAX - 1, i64::MAX in one-minute windows) is a dead
//! letter of the window operator, with the reason; 0 and negative times are windowed as any
//! other. The job never fails and nothing wraps around.

use std::collections::BTreeMap;
use std::time::Duration;

use riffle::aggregate::Count;
use riffle::sink::CollectSink;
use riffle::source::DeadLetter;
use riffle::source::file::FileSource;
use riffle::time::WatermarkStrategy;
use riffle::window::{Session, Tumbling, Windows};
use riffle::{EnvConfig, OutputTag, StreamEnv};
use riffle_clicks::Click;

use crate::run;

/// (user, event time) of the input, in file order: in event-time order, so that nothing is late
/// however the reads are batched.
const CLICKS: [(u64, i64); 8] = [
    (3, i64::MIN),
    (3, i64::MIN + 1),
    (2, -90_000),
    (1, -1),
    (1, 0),
    (1, 59_999),
    (4, i64::MAX - 1),
    (4, i64::MAX),
];

fn input(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("clicks.jsonl");
    let lines: Vec<String> = CLICKS
        .iter()
        .map(|(user, time)| {
            format!(
                r#"{{"user_id":{user},"url":"/","user_agent":"ua","ip":"10.0.0.1","event_time":{time}}}"#
            )
        })
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

struct Outcome {
    /// (user, window start, window end) -> final count.
    counts: BTreeMap<(u64, i64, i64), u64>,
    late: usize,
    /// (position, error) of the source's dead letters.
    source_letters: Vec<(String, String)>,
    /// (position, error) of the window's dead letters.
    window_letters: Vec<(String, String)>,
    bad_records: u64,
}

/// `skew`: the strategy's bound on event time ahead of the wall clock (`None`: no bound).
fn run_job(
    windows: Windows,
    parallelism: usize,
    pre_aggregate: bool,
    skew: Option<Duration>,
) -> Outcome {
    run_job_with(windows, parallelism, pre_aggregate, skew, None)
}

/// [`run_job`]; with `Some(sliced)` the windows have no allowed lateness (30 s otherwise) and
/// are kept as slices if `sliced`.
fn run_job_with(
    windows: Windows,
    parallelism: usize,
    pre_aggregate: bool,
    skew: Option<Duration>,
    sliced: Option<bool>,
) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::with_config(EnvConfig {
        parallelism,
        buffer_size: 3,
        watermark_interval: Duration::from_millis(1),
        dead_letter_dir: dir.path().join("dead-letter"),
        ..EnvConfig::default()
    });
    let clicks = env.from_source_with_watermarks(
        FileSource::<Click>::json(input(dir.path())),
        WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(5))
            .with_timestamps(|c: &Click| c.event_time)
            .with_max_future_skew(skew),
    );
    let late = OutputTag::<Click>::new("late");
    let windowed = clicks
        .key_by(|c| c.user_id)
        .window(windows)
        .side_output_late(&late)
        .pre_aggregate(pre_aggregate);
    let windowed = match sliced {
        None => windowed.allowed_lateness(Duration::from_secs(30)),
        Some(true) => windowed.sliced(),
        Some(false) => windowed,
    };
    let counted = windowed.aggregate(Count);
    let (results, results_out) = CollectSink::new();
    let (late_sink, late_out) = CollectSink::new();
    let (source_dead, source_dead_out) = CollectSink::<DeadLetter>::new();
    let (window_dead, window_dead_out) = CollectSink::<DeadLetter>::new();
    counted.sink(results);
    counted.get_side_output(&late).sink(late_sink);
    clicks.dead_letters().sink(source_dead);
    counted.dead_letters().sink(window_dead);
    let result = run(&env).expect("edge timestamps never fail the job");
    let sorted = |letters: Vec<DeadLetter>| {
        let mut v: Vec<(String, String)> =
            letters.into_iter().map(|l| (l.position, l.error)).collect();
        v.sort();
        v
    };
    Outcome {
        counts: results_out
            .values()
            .into_iter()
            .map(|r| ((r.key, r.window_start, r.window_end), r.value))
            .collect(),
        late: late_out.len(),
        source_letters: sorted(source_dead_out.values()),
        window_letters: sorted(window_dead_out.values()),
        bad_records: result.bad_records(),
    }
}

fn unplaceable(time: i64, start: i128, end: i128) -> (String, String) {
    (
        format!("event time {time}"),
        format!(
            "time {time} ms cannot be placed in a window: its window [{start}, {end}) reaches \
             beyond the timestamp range -9223372036854775808..=9223372036854775807 ms"
        ),
    )
}

fn out_of_range() -> Vec<(String, String)> {
    vec![(
        "event time -9223372036854775808".into(),
        "event time -9223372036854775808 ms is outside the supported range \
         -9223372036854775807..=9223372036854775807 ms"
            .into(),
    )]
}

#[test]
fn tumbling_windows_place_every_time_they_can_and_dead_letter_the_others() {
    for parallelism in [1, 2] {
        for pre_aggregate in [true, false] {
            let outcome = run_job(
                Tumbling::of(Duration::from_secs(60)),
                parallelism,
                pre_aggregate,
                None,
            );
            let context = format!("parallelism {parallelism}, pre-aggregate {pre_aggregate}");
            assert_eq!(
                outcome.counts,
                BTreeMap::from([
                    ((1, -60_000, 0), 1),
                    ((1, 0, 60_000), 2),
                    ((2, -120_000, -60_000), 1),
                ]),
                "{context}"
            );
            assert_eq!(outcome.late, 0, "{context}");
            assert_eq!(outcome.source_letters, out_of_range(), "{context}");
            assert_eq!(
                outcome.window_letters,
                vec![
                    unplaceable(
                        i64::MIN + 1,
                        -9_223_372_036_854_780_000,
                        -9_223_372_036_854_720_000
                    ),
                    unplaceable(
                        i64::MAX - 1,
                        9_223_372_036_854_720_000,
                        9_223_372_036_854_780_000
                    ),
                    unplaceable(
                        i64::MAX,
                        9_223_372_036_854_720_000,
                        9_223_372_036_854_780_000
                    ),
                ],
                "{context}"
            );
            assert_eq!(
                outcome.bad_records, 4,
                "{context}: every dead letter is counted"
            );
        }
    }
}

/// Sliding windows kept as slices place, count and dead-letter the edge times as whole windows
/// do: a time is a dead letter when one of its windows does not fit, even if its slice does.
#[test]
fn sliced_sliding_windows_at_the_edges_do_what_whole_ones_do() {
    let windows = riffle::window::Sliding::of(Duration::from_secs(60), Duration::from_secs(20));
    for parallelism in [1, 2] {
        for pre_aggregate in [true, false] {
            let context = format!("parallelism {parallelism}, pre-aggregate {pre_aggregate}");
            let whole = run_job_with(windows, parallelism, pre_aggregate, None, Some(false));
            let sliced = run_job_with(windows, parallelism, pre_aggregate, None, Some(true));
            assert_eq!(whole.counts.len(), 9, "{context}: {:?}", whole.counts);
            assert_eq!(sliced.counts, whole.counts, "{context}");
            assert_eq!(sliced.late, whole.late, "{context}");
            assert_eq!(sliced.source_letters, out_of_range(), "{context}");
            assert_eq!(whole.window_letters.len(), 3, "{context}");
            assert_eq!(sliced.window_letters, whole.window_letters, "{context}");
            assert_eq!(sliced.bad_records, whole.bad_records, "{context}");
        }
    }
}

#[test]
fn sessions_at_the_edges() {
    let outcome = run_job(Session::with_gap(Duration::from_secs(10)), 2, false, None);
    assert_eq!(
        outcome.counts,
        BTreeMap::from([
            ((1, -1, 10_000), 2),
            ((1, 59_999, 69_999), 1),
            ((2, -90_000, -80_000), 1),
            // The session of i64::MIN + 1 fits: [MIN + 1, MIN + 1 + gap).
            ((3, i64::MIN + 1, i64::MIN + 10_001), 1),
        ])
    );
    assert_eq!(outcome.source_letters, out_of_range());
    let max = i128::from(i64::MAX);
    assert_eq!(
        outcome.window_letters,
        vec![
            unplaceable(i64::MAX - 1, max - 1, max - 1 + 10_000),
            unplaceable(i64::MAX, max, max + 10_000),
        ]
    );
    assert_eq!(outcome.bad_records, 3);
}

#[test]
fn with_the_default_skew_bound_the_far_future_is_quarantined_by_the_source() {
    let outcome = run_job(
        Tumbling::of(Duration::from_secs(60)),
        2,
        true,
        Some(Duration::from_secs(3600)),
    );
    assert_eq!(outcome.counts.len(), 3);
    let mut source = outcome.source_letters;
    let future: Vec<_> = source.drain(1..).collect();
    assert_eq!(source, out_of_range());
    assert_eq!(
        future.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
        [
            "event time 9223372036854775806",
            "event time 9223372036854775807"
        ]
    );
    assert!(
        future
            .iter()
            .all(|(_, e)| e
                .contains("ahead of the wall clock, beyond the allowed skew of 3600000 ms")),
        "{future:?}"
    );
    assert_eq!(
        outcome.window_letters,
        vec![unplaceable(
            i64::MIN + 1,
            -9_223_372_036_854_780_000,
            -9_223_372_036_854_720_000
        )]
    );
    assert_eq!(outcome.bad_records, 4);
}

//! Tumbling and sliding windows: firing on the watermark, allowed lateness, late side output and
//! counter, processing time, early firings, full-window functions.

use std::time::Duration;

use riffle::aggregate::{Count, Sum};
use riffle::testing::{OperatorHarness, WindowTest};
use riffle::window::{Sliding, TimeWindow, Tumbling, WindowCollector, WindowResult};
use riffle::{OutputTag, Record, Result};

use crate::{Click, user};

const MINUTE: Duration = Duration::from_secs(60);

fn result(key: u64, start: i64, value: u64, update: bool) -> WindowResult<u64, u64> {
    WindowResult {
        key,
        window_start: start,
        window_end: start + 60_000,
        value,
        update,
    }
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

#[test]
fn tumbling_windows_fire_when_the_watermark_passes_their_end() -> Result<()> {
    let mut h =
        OperatorHarness::builder(WindowTest::new(user, Tumbling::of(MINUTE)).aggregate(Count))
            .build()?;
    for (u, ts) in [
        (1, 1_000),
        (2, 5_000),
        (1, 59_999),
        (1, 60_000),
        (2, 30_000),
    ] {
        h.process((u, ts), ts)?;
    }
    h.watermark(59_998)?;
    assert_eq!(
        h.take_output(),
        vec![],
        "the window [0, 60s) ends at 59 999"
    );
    h.watermark(59_999)?;
    let fired = h.take_output();
    assert!(
        fired.iter().all(|r| r.timestamp() == Some(59_999)),
        "results carry the window's last millisecond"
    );
    assert_eq!(
        sorted(fired.into_iter().map(|r| r.value).collect()),
        vec![result(1, 0, 2, false), result(2, 0, 2, false)]
    );
    h.watermark(i64::MAX)?;
    assert_eq!(h.take_values(), vec![result(1, 60_000, 1, false)]);
    assert_eq!(
        h.watermarks(),
        vec![59_998, 59_999, i64::MAX],
        "watermarks are forwarded"
    );
    assert_eq!(
        h.metrics().state_entries,
        0,
        "fired windows without lateness leave no state"
    );
    Ok(())
}

#[test]
fn a_late_record_within_the_lateness_updates_its_window_and_beyond_goes_to_the_side_output()
-> Result<()> {
    let late = OutputTag::<Click>::new("late-clicks");
    let op = WindowTest::new(user, Tumbling::of(MINUTE))
        .allowed_lateness(Duration::from_secs(30))
        .side_output_late(&late)
        .aggregate(Count);
    let mut h = OperatorHarness::builder(op).side_output(&late).build()?;
    h.process((7, 10_000), 10_000)?;
    h.watermark(65_000)?;
    assert_eq!(h.take_values(), vec![result(7, 0, 1, false)]);
    // 25 s after the window's end: within the lateness, the result is updated at once.
    h.process((7, 20_000), 20_000)?;
    assert_eq!(h.take_values(), vec![result(7, 0, 2, true)]);
    assert!(
        h.metrics().state_entries > 0,
        "the window's state is kept for the lateness"
    );
    h.watermark(89_999)?;
    assert_eq!(
        h.metrics().state_entries,
        0,
        "and dropped when the watermark passes end + lateness"
    );
    h.process((7, 30_000), 30_000)?;
    assert_eq!(h.take_values(), vec![]);
    assert_eq!(
        h.take_side_output(&late),
        vec![Record::new((7, 30_000), 30_000)],
        "the late record, unchanged"
    );
    let metrics = h.metrics();
    assert_eq!(
        (
            metrics.late_records_side_output,
            metrics.late_records_dropped
        ),
        (1, 0)
    );
    Ok(())
}

#[test]
fn without_a_side_output_late_records_are_counted() -> Result<()> {
    let mut h =
        OperatorHarness::builder(WindowTest::new(user, Tumbling::of(MINUTE)).aggregate(Count))
            .build()?;
    h.watermark(120_000)?;
    h.process((1, 5_000), 5_000)?;
    h.process((1, 65_000), 65_000)?;
    assert_eq!(h.take_values(), vec![]);
    assert_eq!(h.metrics().late_records_dropped, 2);
    Ok(())
}

#[test]
fn sliding_windows_count_a_record_in_every_window_it_falls_in() -> Result<()> {
    let op = WindowTest::new(user, Sliding::of(MINUTE, Duration::from_secs(20)))
        .aggregate(Sum::of(|c: &Click| c.1 / 1000));
    let mut h = OperatorHarness::builder(op).build()?;
    h.process((1, 10_000), 10_000)?;
    h.process((1, 50_000), 50_000)?;
    h.watermark(i64::MAX)?;
    let got: Vec<(i64, i64, i64)> = sorted(
        h.take_values()
            .into_iter()
            .map(|r| (r.window_start, r.window_end, r.value))
            .collect(),
    );
    assert_eq!(
        got,
        vec![
            (-40_000, 20_000, 10),
            (-20_000, 40_000, 10),
            (0, 60_000, 60),
            (20_000, 80_000, 50),
            (40_000, 100_000, 50),
        ]
    );
    Ok(())
}

/// Counts, and counts the accumulators it creates.
struct CountingCreates(&'static std::sync::atomic::AtomicUsize);

impl riffle::aggregate::AggregateFunction<Click> for CountingCreates {
    type Acc = u64;
    type Out = u64;
    fn create(&self) -> u64 {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        0
    }
    fn add(&self, acc: &mut u64, _: &Click) {
        *acc += 1;
    }
    fn merge(&self, acc: &mut u64, other: u64) {
        *acc += other;
    }
    fn result(&self, acc: &u64) -> u64 {
        *acc
    }
}

#[test]
fn an_accumulator_is_created_once_per_key_and_window_not_per_record() -> Result<()> {
    static CREATED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let op = WindowTest::new(user, Sliding::of(MINUTE, Duration::from_secs(20)))
        .aggregate(CountingCreates(&CREATED));
    let mut h = OperatorHarness::builder(op).build()?;
    // Two keys, ten records each in [0, 20 s): each record falls in 3 windows.
    for i in 0..10 {
        h.process((1, i * 1_000), i * 1_000)?;
        h.process((2, i * 1_000 + 500), i * 1_000 + 500)?;
    }
    h.watermark(i64::MAX)?;
    let counts: Vec<u64> = h.take_values().into_iter().map(|r| r.value).collect();
    assert_eq!(
        counts,
        vec![10; 6],
        "3 windows of 10 records for each of 2 keys"
    );
    assert_eq!(
        CREATED.load(std::sync::atomic::Ordering::SeqCst),
        6,
        "one accumulator per key and window"
    );
    Ok(())
}

#[test]
fn processing_time_windows_follow_the_clock() -> Result<()> {
    let op =
        WindowTest::new(user, Tumbling::processing_time(Duration::from_secs(10))).aggregate(Count);
    let mut h = OperatorHarness::builder(op)
        .processing_time(1_000)
        .build()?;
    h.process_untimed((1, 0))?;
    h.process_untimed((1, 0))?;
    h.advance_processing_time(Duration::from_secs(5))?;
    assert_eq!(h.take_values(), vec![]);
    h.process_untimed((1, 0))?;
    h.advance_processing_time(Duration::from_secs(4))?; // 10 000: the window [0, 10 000) ended at 9 999
    assert_eq!(
        h.take_values(),
        vec![WindowResult {
            key: 1,
            window_start: 0,
            window_end: 10_000,
            value: 3,
            update: false
        }]
    );
    h.process_untimed((1, 0))?;
    h.finish()?;
    assert_eq!(
        h.take_values().len(),
        1,
        "the end of a bounded input fires what is open"
    );
    Ok(())
}

/// The clock at a window's last millisecond: records still fall in that window, so it must not
/// fire (and drop its state) before the clock reaches its end, and the records of its last
/// millisecond are counted with the others, in its one result.
#[test]
fn a_processing_time_window_fires_once_when_the_clock_reaches_its_end() -> Result<()> {
    let op =
        WindowTest::new(user, Tumbling::processing_time(Duration::from_secs(10))).aggregate(Count);
    let mut h = OperatorHarness::builder(op)
        .processing_time(9_998)
        .build()?;
    h.process_untimed((1, 0))?;
    h.advance_processing_time(Duration::from_millis(1))?; // 9 999, the window's last millisecond
    h.process_records(vec![Record::untimed((1, 0)), Record::untimed((1, 0))])?;
    h.process_untimed((2, 0))?;
    h.advance_processing_time(Duration::ZERO)?;
    assert_eq!(h.take_values(), vec![], "the window is still open at 9 999");
    h.advance_processing_time(Duration::from_millis(1))?; // 10 000
    let window = |key, value| WindowResult {
        key,
        window_start: 0,
        window_end: 10_000,
        value,
        update: false,
    };
    assert_eq!(sorted(h.take_values()), vec![window(1, 3), window(2, 1)]);
    h.finish()?;
    assert_eq!(
        h.take_values(),
        vec![],
        "nothing is left to fire at the end"
    );
    Ok(())
}

#[test]
fn early_firings_emit_changes_before_the_end_and_the_final_result_is_an_update() -> Result<()> {
    let op = WindowTest::new(user, Tumbling::of(MINUTE))
        .early_firing(Duration::from_secs(1))
        .aggregate(Count);
    let mut h = OperatorHarness::builder(op).build()?;
    h.process((1, 1_000), 1_000)?;
    h.advance_processing_time(Duration::from_secs(1))?;
    assert_eq!(h.take_values(), vec![result(1, 0, 1, false)]);
    h.advance_processing_time(Duration::from_secs(1))?;
    assert_eq!(h.take_values(), vec![], "nothing changed, nothing emitted");
    h.process((1, 2_000), 2_000)?;
    h.process((2, 3_000), 3_000)?;
    h.advance_processing_time(Duration::from_secs(1))?;
    assert_eq!(
        sorted(h.take_values()),
        vec![result(1, 0, 2, true), result(2, 0, 1, false)]
    );
    h.watermark(59_999)?;
    assert_eq!(
        sorted(h.take_values()),
        vec![result(1, 0, 2, true), result(2, 0, 1, true)]
    );
    Ok(())
}

#[test]
fn a_full_window_function_sees_every_record_and_its_window() -> Result<()> {
    let op = WindowTest::new(user, Tumbling::of(MINUTE))
        .allowed_lateness(MINUTE)
        .process(
            |user: &u64,
             window: TimeWindow,
             clicks: &[Click],
             out: &mut WindowCollector<'_, '_, String>|
             -> Result<()> {
                let times: Vec<String> = clicks.iter().map(|c| (c.1 / 1000).to_string()).collect();
                let kind = if out.is_update() { "update" } else { "first" };
                out.emit(format!(
                    "{kind} {user} [{}, {}) {}",
                    window.start,
                    window.end,
                    times.join(",")
                ))
            },
        );
    let mut h = OperatorHarness::builder(op).build()?;
    h.process((3, 5_000), 5_000)?;
    h.process((3, 7_000), 7_000)?;
    h.watermark(60_000)?;
    h.process((3, 1_000), 1_000)?;
    assert_eq!(
        h.take_values(),
        vec!["first 3 [0, 60000) 5,7", "update 3 [0, 60000) 5,7,1"]
    );
    Ok(())
}

#[test]
fn an_event_time_window_needs_timestamps() {
    let mut h =
        OperatorHarness::builder(WindowTest::new(user, Tumbling::of(MINUTE)).aggregate(Count))
            .build()
            .unwrap();
    let err = h.process_untimed((1, 1)).unwrap_err();
    assert!(err.to_string().contains("without a timestamp"), "{err}");
}

/// Sliding windows of a minute every 20 s, kept whole or as slices.
fn minute_every_20_s(
    sliced: bool,
) -> impl riffle::operators::BuildOperator<
    Operator = impl riffle::operators::Operator<In = Click, Out = WindowResult<u64, u64>>,
> {
    let test = WindowTest::new(user, Sliding::of(MINUTE, Duration::from_secs(20)));
    if sliced { test.sliced() } else { test }.aggregate(Count)
}

#[test]
fn sliced_windows_keep_one_accumulator_per_key_and_slide() -> Result<()> {
    for (sliced, entries) in [(false, 3), (true, 1)] {
        let mut h = OperatorHarness::builder(minute_every_20_s(sliced)).build()?;
        h.process((1, 1_000), 1_000)?;
        h.process((1, 2_000), 2_000)?;
        h.watermark(0)?;
        assert_eq!(h.metrics().state_entries, entries, "sliced: {sliced}");
        h.watermark(i64::MAX)?;
        let results: Vec<(i64, u64)> = h
            .take_values()
            .into_iter()
            .map(|r| (r.window_start, r.value))
            .collect();
        assert_eq!(results, vec![(-40_000, 2), (-20_000, 2), (0, 2)]);
        assert_eq!(h.metrics().state_entries, 0);
    }
    Ok(())
}

/// A job whose sliding windows were kept whole (an older version), restored with slices at
/// every point of a run, emits what the run without a restore emits: the whole windows'
/// accumulators are merged with the slices that came after them.
#[test]
fn sliced_windows_finish_the_whole_windows_of_an_older_version() -> Result<()> {
    let mut steps: Vec<Option<Click>> = Vec::new();
    for (i, ts) in [
        1_000, 25_000, 5_000, 41_000, 61_000, 30_000, 99_000, 121_000, 70_000, 150_000,
    ]
    .into_iter()
    .enumerate()
    {
        steps.push(Some((i as u64 % 3, ts)));
        if i % 2 == 1 {
            steps.push(None);
        }
    }
    let play = |h: &mut OperatorHarness<Click, WindowResult<u64, u64>>,
                steps: &[Option<Click>],
                watermark: &mut i64|
     -> Result<()> {
        for step in steps {
            match step {
                Some(click) => {
                    *watermark = (*watermark).max(click.1 - 20_001);
                    h.process(*click, click.1)?
                }
                None => h.watermark(*watermark)?,
            }
        }
        Ok(())
    };
    let results = |h: &mut OperatorHarness<Click, WindowResult<u64, u64>>| {
        let mut r: Vec<_> = h
            .take_values()
            .into_iter()
            .map(|r| (r.key, r.window_start, r.value))
            .collect();
        r.sort();
        r
    };
    let mut whole = OperatorHarness::builder(minute_every_20_s(false)).build()?;
    let mut watermark = i64::MIN;
    play(&mut whole, &steps, &mut watermark)?;
    whole.watermark(i64::MAX)?;
    let expected = results(&mut whole);
    assert!(expected.len() > 10, "{expected:?}");
    for cut in 0..=steps.len() {
        let mut before = OperatorHarness::builder(minute_every_20_s(false)).build()?;
        let mut watermark = i64::MIN;
        play(&mut before, &steps[..cut], &mut watermark)?;
        let state = before.snapshot(1)?;
        let mut got = results(&mut before);
        let mut after = OperatorHarness::builder(minute_every_20_s(true))
            .restore(state)
            .build()?;
        play(&mut after, &steps[cut..], &mut watermark)?;
        after.watermark(i64::MAX)?;
        got.extend(results(&mut after));
        got.sort();
        assert_eq!(got, expected, "restored with slices after step {cut}");
    }
    Ok(())
}

/// Many slides per window (500 one-second slides): each watermark fires the windows it makes
/// due and nothing else, and the results are the whole windows' results.
#[test]
fn sliced_windows_of_many_slides_fire_as_whole_windows_do() -> Result<()> {
    let windows = Sliding::of(Duration::from_secs(500), Duration::from_secs(1));
    let run = |sliced: bool| -> Result<Vec<(u64, i64, u64)>> {
        let test = WindowTest::new(user, windows);
        let op = if sliced { test.sliced() } else { test }.aggregate(Count);
        let mut h = OperatorHarness::builder(op).build()?;
        for i in 0..200i64 {
            let time = i * 1_700 % 97_000 + i * 300;
            h.process(((i % 3) as u64, time), time)?;
            h.watermark(i * 500 - 10_000)?;
        }
        h.watermark(i64::MAX)?;
        let mut results: Vec<_> = h
            .take_values()
            .into_iter()
            .map(|r| (r.key, r.window_start, r.value))
            .collect();
        results.sort();
        Ok(results)
    };
    let whole = run(false)?;
    assert!(whole.len() > 1_000, "{}", whole.len());
    assert_eq!(run(true)?, whole);
    Ok(())
}

//! Event-time correctness for any arrival order (proptest): with disorder within the watermark's
//! bound, windowed results equal a batch group-by over the same records; with any disorder,
//! every record is counted in a result or in the late output, never lost.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use riffle::OutputTag;
use riffle::aggregate::Count;
use riffle::testing::{OperatorHarness, WindowTest};
use riffle::window::{Sliding, TimeWindow, Tumbling, Windows};

use crate::{Click, user};

const BOUND: i64 = 5_000;

/// Records in event-time order: (user, event time).
fn records() -> impl Strategy<Value = Vec<Click>> {
    prop::collection::vec((0u64..5, 0i64..600_000), 1..200).prop_map(|mut v| {
        v.sort_by_key(|c| c.1);
        v
    })
}

/// An arrival order in which no record arrives more than `disorder` ms of event time after a
/// later one: each record is moved earlier among the records at most `disorder` younger.
fn arrivals(sorted: Vec<Click>, disorder: i64, seeds: Vec<u32>) -> Vec<Click> {
    let mut keyed: Vec<(i64, usize, Click)> = sorted
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let shift = seeds[i % seeds.len()] as i64 % (disorder + 1);
            (c.1 - shift, i, c)
        })
        .collect();
    keyed.sort();
    keyed.into_iter().map(|(_, _, c)| c).collect()
}

/// Feeds `arrivals` with a bounded-out-of-orderness watermark after each record; returns the
/// final count per (key, window) and the number of late records.
fn run(
    windows: Windows,
    arrivals: &[Click],
    lateness: Duration,
) -> (BTreeMap<(u64, i64, i64), u64>, usize) {
    let (results, late) = run_with(windows, arrivals, lateness, BOUND, false);
    let mut last = BTreeMap::new();
    for (key, start, end, count) in results {
        // The last result for a key and window is its final value.
        last.insert((key, start, end), count);
    }
    (last, late.len())
}

/// A result as emitted: key, window start and end, count.
type Emitted = (u64, i64, i64, u64);

/// A window's bounds and its `(key, count)` results.
type WindowResults = ((i64, i64), Vec<(u64, u64)>);

/// Every result `(key, start, end, count)` in the order emitted, and the late records, with a
/// watermark `bound` behind the latest record after each one; the windows kept as slices when
/// `sliced`.
fn run_with(
    windows: Windows,
    arrivals: &[Click],
    lateness: Duration,
    bound: i64,
    sliced: bool,
) -> (Vec<Emitted>, Vec<Click>) {
    let late = OutputTag::<Click>::new("late");
    let mut test = WindowTest::new(user, windows)
        .allowed_lateness(lateness)
        .side_output_late(&late);
    if sliced {
        test = test.sliced();
    }
    let mut h = OperatorHarness::builder(test.aggregate(Count))
        .side_output(&late)
        .buffer_size(3)
        .build()
        .unwrap();
    let mut max_seen = i64::MIN;
    for &click in arrivals {
        h.process(click, click.1).unwrap();
        max_seen = max_seen.max(click.1);
        h.watermark(max_seen - bound - 1).unwrap();
    }
    h.watermark(i64::MAX).unwrap();
    let results = h
        .take_values()
        .into_iter()
        .map(|r| (r.key, r.window_start, r.window_end, r.value))
        .collect();
    let late = h
        .take_side_output(&late)
        .into_iter()
        .map(|r| r.value)
        .collect();
    (results, late)
}

/// The same computation as a batch job: group by key and window.
fn batch(windows: Windows, records: &[Click]) -> BTreeMap<(u64, i64, i64), u64> {
    let mut counts = BTreeMap::new();
    let mut assigned: Vec<TimeWindow> = Vec::new();
    for &(u, ts) in records {
        windows
            .assign(ts, &mut assigned)
            .expect("the test's timestamps fit in windows");
        for w in &assigned {
            *counts.entry((u, w.start, w.end)).or_insert(0) += 1;
        }
    }
    counts
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn within_the_bound_results_equal_the_batch_computation(
        sorted in records(),
        seeds in prop::collection::vec(any::<u32>(), 1..50),
        sliding in any::<bool>(),
    ) {
        let windows = if sliding {
            Sliding::of(Duration::from_secs(60), Duration::from_secs(20))
        } else {
            Tumbling::of(Duration::from_secs(60))
        };
        let order = arrivals(sorted.clone(), BOUND, seeds);
        let (results, late) = run(windows, &order, Duration::ZERO);
        prop_assert_eq!(late, 0);
        prop_assert_eq!(results, batch(windows, &sorted));
    }

    /// Sliding windows kept as slices give the results whole windows give, in the same order
    /// of windows, and the same late records, whatever the disorder and the sizes.
    #[test]
    fn slices_give_what_whole_windows_give(
        sorted in records(),
        seeds in prop::collection::vec(any::<u32>(), 1..50),
        disorder in 0i64..100_000,
        bound in 0i64..30_000,
        slide_s in 1u64..30,
        slides in 2u64..6,
    ) {
        let windows = Sliding::of(
            Duration::from_secs(slide_s * slides),
            Duration::from_secs(slide_s),
        );
        let order = arrivals(sorted, disorder, seeds);
        let (whole, whole_late) = run_with(windows, &order, Duration::ZERO, bound, false);
        let (sliced, sliced_late) = run_with(windows, &order, Duration::ZERO, bound, true);
        prop_assert_eq!(sliced_late, whole_late);
        // Within one window keys come in the table's order: compare windows in order, each
        // window's results as a set.
        let by_window = |results: Vec<Emitted>| {
            let mut windows: Vec<WindowResults> = Vec::new();
            for (key, start, end, count) in results {
                match windows.last_mut() {
                    Some((w, keys)) if *w == (start, end) => keys.push((key, count)),
                    _ => windows.push(((start, end), vec![(key, count)])),
                }
            }
            for (_, keys) in &mut windows {
                keys.sort();
            }
            windows
        };
        prop_assert_eq!(by_window(sliced), by_window(whole));
    }

    #[test]
    fn beyond_the_bound_every_record_is_counted_or_late(
        sorted in records(),
        seeds in prop::collection::vec(any::<u32>(), 1..50),
        disorder in 0i64..200_000,
        lateness_s in 0u64..60,
    ) {
        let windows = Tumbling::of(Duration::from_secs(60));
        let order = arrivals(sorted.clone(), disorder, seeds);
        let (results, late) = run(windows, &order, Duration::from_secs(lateness_s));
        let counted: u64 = results.values().sum();
        prop_assert_eq!(counted as usize + late, sorted.len());
        // Whatever was counted is never more than the truth for its window.
        let truth = batch(windows, &sorted);
        for (window, count) in &results {
            prop_assert!(count <= &truth[window]);
        }
    }
}

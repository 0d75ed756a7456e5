//! Every stateful operator survives a checkpoint at any point of a scripted run: restored from a
//! snapshot, it emits exactly what an uninterrupted run emits.

use std::sync::Arc;
use std::time::Duration;

use riffle::Result;
use riffle::aggregate::{Count, Sum};
use riffle::operators::KeyedProcess;
use riffle::testing::{Step, WindowTest, assert_snapshot_round_trip};
use riffle::window::{Session, Sliding, TimeWindow, Tumbling, WindowCollector};

use crate::{Click, user};

fn script() -> Vec<Step<Click>> {
    use Step::*;
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
        Watermark(130_000),
        Record((3, 125_000), 125_000),
    ]
}

#[test]
fn tumbling_windows_with_lateness_and_early_firings() -> Result<()> {
    assert_snapshot_round_trip(
        || {
            WindowTest::new(user, Tumbling::of(Duration::from_secs(60)))
                .allowed_lateness(Duration::from_secs(30))
                .early_firing(Duration::from_millis(700))
                .aggregate(Count)
        },
        &script(),
    )
}

#[test]
fn sliding_windows() -> Result<()> {
    assert_snapshot_round_trip(
        || {
            WindowTest::new(
                user,
                Sliding::of(Duration::from_secs(60), Duration::from_secs(20)),
            )
            .allowed_lateness(Duration::from_secs(10))
            .aggregate(Sum::of(|c: &Click| c.1 / 1000))
        },
        &script(),
    )
}

#[test]
fn session_windows_with_merging_and_lateness() -> Result<()> {
    assert_snapshot_round_trip(
        || {
            WindowTest::new(user, Session::with_gap(Duration::from_secs(30)))
                .allowed_lateness(Duration::from_secs(20))
                .aggregate(Count)
        },
        &script(),
    )
}

#[test]
fn processing_time_windows() -> Result<()> {
    assert_snapshot_round_trip(
        || {
            WindowTest::new(
                user,
                Tumbling::processing_time(Duration::from_millis(1_500)),
            )
            .aggregate(Count)
        },
        &script(),
    )
}

#[test]
fn full_window_functions() -> Result<()> {
    assert_snapshot_round_trip(
        || {
            WindowTest::new(user, Tumbling::of(Duration::from_secs(60)))
                .allowed_lateness(Duration::from_secs(30))
                .process(
                    |user: &u64,
                     window: TimeWindow,
                     clicks: &[Click],
                     out: &mut WindowCollector<'_, '_, String>|
                     -> Result<()> {
                        let mut times: Vec<i64> = clicks.iter().map(|c| c.1).collect();
                        times.sort();
                        out.emit(format!(
                            "{user} {} {times:?} {}",
                            window.start,
                            out.is_update()
                        ))
                    },
                )
        },
        &script(),
    )
}

#[test]
fn keyed_process_functions_with_state_ttl_and_timers() -> Result<()> {
    assert_snapshot_round_trip(
        || KeyedProcess::new(Arc::new(|c: &Click| c.0), crate::keyed_process::Inactivity),
        &script(),
    )
}

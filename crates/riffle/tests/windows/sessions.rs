//! Session windows: gaps close sessions, a bridging record merges two, late records within the
//! lateness update a merged session.

use std::time::Duration;

use riffle::aggregate::Count;
use riffle::testing::{OperatorHarness, WindowTest};
use riffle::window::{Session, WindowResult};
use riffle::{OutputTag, Result};

use crate::{Click, user};

fn session(key: u64, start: i64, end: i64, value: u64, update: bool) -> WindowResult<u64, u64> {
    WindowResult {
        key,
        window_start: start,
        window_end: end,
        value,
        update,
    }
}

#[test]
fn records_closer_than_the_gap_form_one_session_and_a_bridge_merges_two() -> Result<()> {
    let op = WindowTest::new(user, Session::with_gap(Duration::from_secs(5))).aggregate(Count);
    let mut h = OperatorHarness::builder(op).build()?;
    h.process((1, 1_000), 1_000)?;
    h.process((1, 3_000), 3_000)?; // [1 000, 8 000)
    h.process((1, 12_000), 12_000)?; // [12 000, 17 000): a second session
    h.process((2, 2_000), 2_000)?;
    assert_eq!(
        h.metrics().state_entries,
        2 + 3,
        "two keys with sessions, three timers"
    );
    h.process((1, 7_500), 7_500)?; // [7 500, 12 500) touches both: one session [1 000, 17 000)
    h.watermark(16_998)?;
    assert_eq!(h.take_values(), vec![session(2, 2_000, 7_000, 1, false)]);
    h.watermark(16_999)?;
    assert_eq!(h.take_values(), vec![session(1, 1_000, 17_000, 4, false)]);
    assert_eq!(h.metrics().state_entries, 0);
    Ok(())
}

#[test]
fn a_late_record_merging_into_a_fired_session_updates_it() -> Result<()> {
    let late = OutputTag::<Click>::new("late");
    let op = WindowTest::new(user, Session::with_gap(Duration::from_secs(5)))
        .allowed_lateness(Duration::from_secs(10))
        .side_output_late(&late)
        .aggregate(Count);
    let mut h = OperatorHarness::builder(op).side_output(&late).build()?;
    h.process((1, 10_000), 10_000)?;
    h.watermark(20_000)?;
    assert_eq!(h.take_values(), vec![session(1, 10_000, 15_000, 1, false)]);
    h.process((1, 8_000), 8_000)?; // merges into [8 000, 15 000), which ended before the watermark
    assert_eq!(h.take_values(), vec![session(1, 8_000, 15_000, 2, true)]);
    h.watermark(30_000)?;
    h.process((1, 9_000), 9_000)?; // past the lateness
    assert_eq!(h.take_values(), vec![]);
    assert_eq!(h.take_side_output(&late).len(), 1);
    assert_eq!(h.metrics().state_entries, 0);
    Ok(())
}

#[test]
fn processing_time_sessions_close_when_the_clock_passes_the_gap() -> Result<()> {
    let op =
        WindowTest::new(user, Session::processing_time(Duration::from_secs(5))).aggregate(Count);
    let mut h = OperatorHarness::builder(op)
        .processing_time(100_000)
        .build()?;
    h.process_untimed((1, 0))?;
    h.advance_processing_time(Duration::from_secs(3))?;
    h.process_untimed((1, 0))?;
    h.advance_processing_time(Duration::from_secs(4))?;
    assert_eq!(h.take_values(), vec![]);
    h.advance_processing_time(Duration::from_secs(1))?;
    assert_eq!(
        h.take_values(),
        vec![session(1, 100_000, 108_000, 2, false)]
    );
    Ok(())
}

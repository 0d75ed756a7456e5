//! Keyed state of window functions: per-window state (Flink's `windowState()`) lives as long as
//! its window and is dropped when the window is purged; global state (`globalState()`) outlives
//! windows; session windows have global state only.

use std::time::Duration;

use riffle::Result;
use riffle::state::ValueStateDescriptor;
use riffle::testing::{OperatorHarness, WindowTest};
use riffle::window::{Session, TimeWindow, Tumbling, WindowCollector};

use crate::{Click, user};

const FIRINGS: ValueStateDescriptor<u64> = ValueStateDescriptor::new("firings");
const SEEN: ValueStateDescriptor<u64> = ValueStateDescriptor::new("seen");

fn stateful(
    user: &u64,
    window: TimeWindow,
    clicks: &[Click],
    out: &mut WindowCollector<String>,
) -> Result<()> {
    let firing = out.window_state()?.value(&FIRINGS).get()?.unwrap_or(0) + 1;
    out.window_state()?.value(&FIRINGS).set(firing)?;
    let mut global = out.global_state()?;
    let seen = global.value(&SEEN).get()?.unwrap_or(0) + 1;
    global.value(&SEEN).set(seen)?;
    out.emit(format!(
        "{user}@{}: {} clicks, firing {firing}, firings of the user {seen}",
        window.start,
        clicks.len()
    ))
}

/// Ten-second windows with 20 s of lateness: user 1 clicks in window 0, once more late (within
/// the lateness: the window fires again, from inside the record's add) and in window 10 000.
fn two_windows_and_a_late_click(h: &mut OperatorHarness<Click, String>) -> Result<()> {
    h.process((1, 1_000), 1_000)?;
    h.watermark(9_999)?;
    h.process((1, 2_000), 2_000)?;
    h.process((1, 12_000), 12_000)?;
    h.watermark(19_999)?;
    assert_eq!(
        h.take_values(),
        vec![
            "1@0: 1 clicks, firing 1, firings of the user 1",
            "1@0: 2 clicks, firing 2, firings of the user 2",
            "1@10000: 1 clicks, firing 1, firings of the user 3",
        ]
    );
    Ok(())
}

#[test]
fn per_window_state_counts_a_windows_firings_and_is_dropped_with_the_window() -> Result<()> {
    let op = WindowTest::new(user, Tumbling::of(Duration::from_secs(10)))
        .allowed_lateness(Duration::from_secs(20))
        .process(stateful);
    let mut h = OperatorHarness::builder(op).build()?;
    two_windows_and_a_late_click(&mut h)?;
    // (window 0's records, window 10 000's record) + 2 per-window states + 1 global state.
    let before = h.metrics().state_entries;
    h.watermark(29_999)?; // window 0 is purged, with its per-window state
    let after = h.metrics().state_entries;
    assert_eq!(
        before - after,
        2,
        "the window's slot and its per-window state"
    );
    h.watermark(39_999)?; // window 10 000 too: only the global state is left
    assert_eq!(h.metrics().state_entries, 1);
    Ok(())
}

#[test]
fn session_windows_have_global_state_but_no_per_window_state() -> Result<()> {
    let op = WindowTest::new(user, Session::with_gap(Duration::from_secs(5))).process(
        |user: &u64, _: TimeWindow, clicks: &[Click], out: &mut WindowCollector<String>| {
            let mut global = out.global_state()?;
            let seen = global.value(&SEEN).get()?.unwrap_or(0) + clicks.len() as u64;
            global.value(&SEEN).set(seen)?;
            let refused = out.window_state().err().map(|e| e.to_string());
            out.emit(format!("{user}: {seen} so far; window state: {refused:?}"))
        },
    );
    let mut h = OperatorHarness::builder(op).build()?;
    h.process((7, 1_000), 1_000)?;
    h.process((7, 2_000), 2_000)?;
    h.watermark(10_000)?;
    h.process((7, 20_000), 20_000)?;
    h.watermark(30_000)?;
    let lines = h.take_values();
    assert_eq!(lines.len(), 2);
    assert!(
        lines[0].starts_with("7: 2 so far; window state: Some("),
        "{}",
        lines[0]
    );
    assert!(lines[0].contains("not available in merging (session) windows"));
    assert!(lines[1].starts_with("7: 3 so far"), "{}", lines[1]);
    Ok(())
}

/// The entries of state `name` of the harness's operator (id `operator under test`) under `scope`
/// (`global` or `window`) in `store`, in key group `key_group`.
fn stored(
    store: &dyn riffle::state::KvStore,
    key_group: u16,
    scope: &str,
    name: &str,
) -> Result<usize> {
    let id = riffle::state::state_id(&format!("operator under test#window-fn-{scope}"), name);
    let mut prefix = key_group.to_be_bytes().to_vec();
    prefix.extend_from_slice(&id.to_be_bytes());
    let mut count = 0;
    store.scan(&[prefix], &mut |_, _| {
        count += 1;
        Ok(true)
    })?;
    Ok(count)
}

#[test]
fn with_a_store_the_window_functions_state_lives_in_the_store() -> Result<()> {
    let store = std::sync::Arc::new(riffle::testing::MemoryKvStore::default());
    let op = WindowTest::new(user, Tumbling::of(Duration::from_secs(10)))
        .allowed_lateness(Duration::from_secs(20))
        .process(stateful);
    let mut h = OperatorHarness::builder(op).store(store.clone()).build()?;
    two_windows_and_a_late_click(&mut h)?;
    let key_group = riffle::keys::key_group_of(&1u64, 128);
    assert_eq!(stored(store.as_ref(), key_group, "global", "seen")?, 1);
    assert_eq!(stored(store.as_ref(), key_group, "window", "firings")?, 2);
    h.watermark(29_999)?; // window 0 is purged, with its per-window state
    assert_eq!(stored(store.as_ref(), key_group, "window", "firings")?, 1);
    h.watermark(39_999)?;
    assert_eq!(stored(store.as_ref(), key_group, "window", "firings")?, 0);
    assert_eq!(stored(store.as_ref(), key_group, "global", "seen")?, 1);
    Ok(())
}

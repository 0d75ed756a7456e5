//! Window and keyed-state operators, driven one at a time through the operator test harness:
//! exact outputs for every kind of window, lateness, side outputs, processing time, timers, TTL;
//! property tests of event-time correctness for any arrival order.

mod function_state;
mod keyed_process;
mod properties;
mod round_trips;
mod sessions;
mod tumbling_sliding;

/// A click: (user, event time in ms).
pub type Click = (u64, i64);

/// The key of a click.
pub fn user(click: &Click) -> u64 {
    click.0
}

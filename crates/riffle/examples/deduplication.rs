//! Deduplication: events delivered more than once (a retrying producer) pass once; an id is
//! remembered for 10 minutes of event time, then forgotten by a timer, so state stays bounded
//! whatever the number of ids (the seed's "keyBy a unique id" made safe).
//!
//! The built-in operators, `key_by(id).deduplicate(ttl)` (keep the first) and
//! `deduplicate_keep_last(ttl)` (a changelog of the latest), remember ids for a time-to-live of
//! *processing* time, as Flink SQL's deduplication does (`deduplicate_built_in` below); this
//! example's keyed process function shows the *event-time* variant, for when duplicates are
//! known to come within a span of event time and replays of old input must give the same answer.
//!
//! ```sh
//! cargo run -p riffle --example deduplication
//! ```

use std::time::Duration;

use riffle::sink::CollectSink;
use riffle::state::ValueStateDescriptor;
use riffle::time::WatermarkStrategy;
use riffle::{EnvConfig, StreamEnv};

/// An event: id, payload, event time (epoch ms).
type Event = (String, u32, i64);

/// When the id was first seen.
static SEEN: ValueStateDescriptor<i64> = ValueStateDescriptor::new("first-seen");

const REMEMBER_MS: i64 = 10 * 60_000;

/// The events that pass, in order, and the number of ids still remembered at the end.
fn deduplicate(events: Vec<Event>) -> riffle::Result<(Vec<Event>, u64)> {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let (sink, output) = CollectSink::new();
    env.from_iter_with_watermarks(
        events,
        WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(10))
            .with_timestamps(|e: &Event| e.2),
    )
    .key_by(|event| event.0.clone())
    .process_with_timers(
        |_, event, ctx| {
            // A duplicate: seen less than ten minutes before (its timer may not have fired
            // yet when the next record comes, so the time decides).
            if let Some(first) = ctx.value(&SEEN).get()?
                && event.2 - first < REMEMBER_MS
            {
                return Ok(());
            }
            ctx.value(&SEEN).set(event.2)?;
            ctx.register_event_time_timer(event.2 + REMEMBER_MS);
            ctx.emit(event)
        },
        // Ten minutes later, forget the id (unless it was seen again since and renewed).
        |_, timer, _, ctx| {
            if ctx.value(&SEEN).get()? == Some(timer - REMEMBER_MS) {
                ctx.value(&SEEN).clear()?;
            }
            Ok(())
        },
    )
    .name("deduplicate")
    .sink(sink);
    let result = env.execute()?;
    let remembered = result
        .metrics
        .operator_total("deduplicate")
        .map_or(0, |o| o.state_entries);
    Ok((output.values(), remembered))
}

/// The same with the built-in operator: ids remembered for 10 minutes of processing time (the
/// whole run here), so the late repeat of `a` is dropped too.
fn deduplicate_built_in(events: Vec<Event>) -> riffle::Result<Vec<Event>> {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let (sink, output) = CollectSink::new();
    env.from_iter(events)
        .key_by(|event| event.0.clone())
        .deduplicate(Duration::from_secs(600))
        .sink(sink);
    env.execute()?;
    Ok(output.values())
}

fn input() -> Vec<Event> {
    let event = |id: &str, payload, minute: i64| (id.to_string(), payload, minute * 60_000);
    vec![
        event("a", 1, 0),
        event("b", 2, 1),
        event("a", 1, 2), // duplicate of a, within 10 minutes
        event("c", 3, 3),
        event("b", 2, 9),  // duplicate of b
        event("a", 4, 15), // a again, 15 minutes later: forgotten, passes
    ]
}

fn main() -> riffle::Result<()> {
    let (events, _) = deduplicate(input())?;
    for event in events {
        println!("{event:?}");
    }
    println!("built-in, processing-time TTL:");
    for event in deduplicate_built_in(input())? {
        println!("{event:?}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn duplicates_within_ten_minutes_are_dropped_and_state_is_freed() {
        let (events, remembered) = super::deduplicate(super::input()).unwrap();
        let ids: Vec<(&str, u32)> = events.iter().map(|e| (e.0.as_str(), e.1)).collect();
        assert_eq!(ids, vec![("a", 1), ("b", 2), ("c", 3), ("a", 4)]);
        assert_eq!(remembered, 0, "every id was forgotten by its timer");
    }

    #[test]
    fn the_built_in_operator_remembers_ids_for_its_processing_time_ttl() {
        let events = super::deduplicate_built_in(super::input()).unwrap();
        let ids: Vec<(&str, u32)> = events.iter().map(|e| (e.0.as_str(), e.1)).collect();
        assert_eq!(ids, vec![("a", 1), ("b", 2), ("c", 3)]);
    }
}

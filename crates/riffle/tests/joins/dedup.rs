//! Deduplication (`key_by(id).deduplicate(ttl)` and `deduplicate_keep_last(ttl)`): exact output,
//! the time-to-live on a manual clock bounding the state, checkpoint round trips, and the
//! keep-last changelog applied by key at any parallelism.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use riffle::operators::{KeepFirst, KeepLast, KeyedProcess};
use riffle::sink::{CollectSink, UpsertSink};
use riffle::testing::{
    MemoryKvBackend, OperatorHarness, Step, assert_snapshot_round_trip,
    assert_snapshot_round_trip_on,
};
use riffle::{Change, EnvConfig, Result, StreamEnv};

/// An event: id and payload.
type Event = (u32, u32);

fn first(ttl: Duration) -> KeyedProcess<u32, Event, Event, KeepFirst> {
    KeyedProcess::new(Arc::new(|e: &Event| e.0), KeepFirst::new(ttl))
}

fn last(ttl: Duration) -> KeyedProcess<u32, Event, Change<Event>, KeepLast> {
    KeyedProcess::new(Arc::new(|e: &Event| e.0), KeepLast::new(ttl))
}

#[test]
fn keep_first_passes_each_id_once_until_the_ttl_forgets_it() -> Result<()> {
    let mut h = OperatorHarness::builder(first(Duration::from_secs(60))).build()?;
    for (event, time) in [((1, 10), 5), ((2, 20), 6), ((1, 11), 7), ((2, 21), 8)] {
        h.process(event, time)?;
    }
    assert_eq!(
        h.take_output()
            .into_iter()
            .map(|r| (r.timestamp(), r.value))
            .collect::<Vec<_>>(),
        vec![(Some(5), (1, 10)), (Some(6), (2, 20))]
    );
    assert_eq!(h.metrics().state_entries, 2);
    // Duplicates do not renew an id: 60 s after its first record it is forgotten.
    h.advance_processing_time(Duration::from_secs(59))?;
    h.process((1, 12), 9)?;
    assert_eq!(h.take_values(), vec![]);
    h.advance_processing_time(Duration::from_secs(1))?;
    assert_eq!(h.metrics().state_entries, 0, "the sweep freed both ids");
    h.process((1, 13), 10)?;
    assert_eq!(h.take_values(), vec![(1, 13)]);
    Ok(())
}

#[test]
fn keep_last_emits_inserts_then_update_pairs_and_starts_over_after_the_ttl() -> Result<()> {
    let mut h = OperatorHarness::builder(last(Duration::from_secs(60))).build()?;
    h.process((1, 10), 1)?;
    h.process((2, 20), 2)?;
    h.advance_processing_time(Duration::from_secs(50))?;
    h.process((1, 11), 3)?;
    assert_eq!(
        h.take_values(),
        vec![
            Change::insert((1, 10)),
            Change::insert((2, 20)),
            Change::update_before((1, 10)),
            Change::update_after((1, 11)),
        ]
    );
    // Key 2 was last written 60 s ago, key 1 only 10 s ago (each record renews its key).
    h.advance_processing_time(Duration::from_secs(10))?;
    h.process((2, 21), 4)?;
    h.process((1, 12), 5)?;
    assert_eq!(
        h.take_values(),
        vec![
            Change::insert((2, 21)),
            Change::update_before((1, 11)),
            Change::update_after((1, 12)),
        ]
    );
    Ok(())
}

#[test]
fn zero_ttl_keeps_ids_forever() -> Result<()> {
    let mut h = OperatorHarness::builder(first(Duration::ZERO)).build()?;
    h.process((1, 1), 1)?;
    h.advance_processing_time(Duration::from_secs(10 * 365 * 24 * 3600))?;
    h.process((1, 2), 2)?;
    assert_eq!(h.take_values(), vec![(1, 1)]);
    Ok(())
}

fn script() -> Vec<Step<Event>> {
    use Step::{Advance, Record};
    vec![
        Record((1, 1), 1),
        Record((2, 1), 2),
        Record((1, 2), 3),
        Advance(Duration::from_secs(6)),
        Record((3, 1), 4),
        Record((2, 2), 5),
        Advance(Duration::from_secs(5)), // ttl 10 s: keys 1 and 2 of keep-first are forgotten
        Record((1, 3), 6),
        Record((3, 2), 7),
        Record((2, 3), 8),
    ]
}

#[test]
fn deduplication_survives_a_checkpoint_at_any_step_on_the_heap_and_the_byte_store() -> Result<()> {
    let ttl = Duration::from_secs(10);
    assert_snapshot_round_trip(|| first(ttl), &script())?;
    assert_snapshot_round_trip(|| last(ttl), &script())?;
    assert_snapshot_round_trip_on(&MemoryKvBackend, || first(ttl), &script())?;
    assert_snapshot_round_trip_on(&MemoryKvBackend, || last(ttl), &script())
}

#[test]
fn end_to_end_keep_first_and_keep_last_at_any_parallelism() -> Result<()> {
    // 1 000 events over 100 ids, each id 10 times with payloads 0..10 in order.
    let events: Vec<Event> = (0..1_000u32).map(|i| (i % 100, i / 100)).collect();
    for parallelism in [1, 2, 4] {
        let env = StreamEnv::with_config(EnvConfig {
            parallelism,
            ..EnvConfig::default()
        });
        let (firsts, first_out) = CollectSink::new();
        let (upsert, table) = UpsertSink::new(|e: &Event| e.0);
        let (changes, changes_out) = CollectSink::new();
        // One source subtask keeps each id's events in order through the shuffle (a split
        // collection would interleave them): "first" and "last" then have one answer.
        let keyed = env
            .from_iter(events.clone())
            .set_parallelism(1)
            .key_by(|e| e.0);
        keyed.deduplicate(Duration::from_secs(3600)).sink(firsts);
        let latest = keyed.deduplicate_keep_last(Duration::from_secs(3600));
        latest.sink(upsert);
        latest.sink(changes);
        env.execute()?;
        assert_eq!(
            first_out.sorted(),
            (0..100).map(|id| (id, 0)).collect::<Vec<_>>()
        );
        assert_eq!(
            table.rows(),
            (0..100).map(|id| (id, (id, 9))).collect::<BTreeMap<_, _>>(),
            "parallelism {parallelism}"
        );
        // Per id: one +I, then 9 pairs of -U/+U.
        let changes = changes_out.values();
        assert_eq!(changes.len(), 100 * (1 + 2 * 9));
        assert_eq!(
            changes
                .iter()
                .filter(|c| c.op == riffle::RowKind::Insert)
                .count(),
            100
        );
    }
    Ok(())
}

//! The regular join (`key_by(..).join_regular(..)`): exact changelogs with their retractions,
//! the final table equal to a batch join computed here for inner/left/right/full at any input
//! interleaving and parallelism, state time-to-live on a manual clock, and checkpoint round trips
//! on the heap and on the byte-encoded store path (RocksDB: `riffle-rocksdb/tests/changelog.rs`).

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use riffle::change::RetractTable;
use riffle::operators::{JoinType, KeyedProcess, RegularJoinFunction};
use riffle::sink::{CollectSink, RetractSink};
use riffle::testing::{
    MemoryKvBackend, OperatorHarness, Step, assert_snapshot_round_trip,
    assert_snapshot_round_trip_on,
};
use riffle::{Change, Either, EnvConfig, Result, StreamEnv};

/// A row of either input: key and a value.
type Row = (u8, u16);
type Joined = (Option<Row>, Option<Row>);
type JoinOp =
    KeyedProcess<u8, Either<Row, Row>, Change<Joined>, RegularJoinFunction<Row, Row, Joined>>;

fn join_op(join: JoinType, ttl: Option<Duration>) -> JoinOp {
    let key = Arc::new(|e: &Either<Row, Row>| match e {
        Either::Left(l) => l.0,
        Either::Right(r) => r.0,
    });
    KeyedProcess::new(
        key,
        RegularJoinFunction::new(join, ttl, |l: Option<&Row>, r: Option<&Row>| {
            (l.copied(), r.copied())
        }),
    )
}

fn harness(
    join: JoinType,
    ttl: Option<Duration>,
) -> OperatorHarness<Either<Row, Row>, Change<Joined>> {
    OperatorHarness::builder(join_op(join, ttl))
        .build()
        .unwrap()
}

/// The join of `lefts` and `rights` on their keys, computed as a batch.
fn batch_join(join: JoinType, lefts: &[Row], rights: &[Row]) -> Vec<Joined> {
    let mut out = Vec::new();
    for l in lefts {
        let matches: Vec<&Row> = rights.iter().filter(|r| r.0 == l.0).collect();
        out.extend(matches.iter().map(|r| (Some(*l), Some(**r))));
        if matches.is_empty() && join.left_outer() {
            out.push((Some(*l), None));
        }
    }
    if join.right_outer() {
        for r in rights {
            if !lefts.iter().any(|l| l.0 == r.0) {
                out.push((None, Some(*r)));
            }
        }
    }
    out.sort();
    out
}

const ALL: [JoinType; 4] = [
    JoinType::Inner,
    JoinType::Left,
    JoinType::Right,
    JoinType::Full,
];

#[test]
fn a_left_row_later_matched_retracts_its_padded_result() -> Result<()> {
    let mut h = harness(JoinType::Left, None);
    h.process(Either::Left((1, 100)), 1_000)?;
    h.process(Either::Left((1, 101)), 2_000)?;
    h.process(Either::Right((2, 200)), 3_000)?; // no left row of key 2: a left join drops it
    assert_eq!(
        h.take_output()
            .into_iter()
            .map(|r| (r.timestamp(), r.value))
            .collect::<Vec<_>>(),
        vec![
            (Some(1_000), Change::insert((Some((1, 100)), None))),
            (Some(2_000), Change::insert((Some((1, 101)), None))),
        ]
    );
    h.process(Either::Right((1, 300)), 4_000)?;
    h.process(Either::Right((1, 301)), 5_000)?;
    // The first match retracts each padded row before its joined row; the second only adds.
    assert_eq!(
        h.take_values(),
        vec![
            Change::delete((Some((1, 100)), None)),
            Change::insert((Some((1, 100)), Some((1, 300)))),
            Change::delete((Some((1, 101)), None)),
            Change::insert((Some((1, 101)), Some((1, 300)))),
            Change::insert((Some((1, 100)), Some((1, 301)))),
            Change::insert((Some((1, 101)), Some((1, 301)))),
        ]
    );
    h.process(Either::Left((1, 102)), 6_000)?; // matches at once: no padded row
    assert_eq!(
        h.take_values(),
        vec![
            Change::insert((Some((1, 102)), Some((1, 300)))),
            Change::insert((Some((1, 102)), Some((1, 301)))),
        ]
    );
    Ok(())
}

#[test]
fn a_right_join_pads_and_retracts_the_right_side() -> Result<()> {
    let mut h = harness(JoinType::Right, None);
    h.process(Either::Left((1, 1)), 1)?; // a right join drops unmatched left rows
    h.process(Either::Right((2, 7)), 2)?;
    h.process(Either::Left((2, 3)), 3)?;
    assert_eq!(
        h.take_values(),
        vec![
            Change::insert((None, Some((2, 7)))),
            Change::delete((None, Some((2, 7)))),
            Change::insert((Some((2, 3)), Some((2, 7)))),
        ]
    );
    Ok(())
}

#[test]
fn rows_expire_after_the_state_ttl_silently_and_their_state_is_freed() -> Result<()> {
    let mut h = harness(JoinType::Full, Some(Duration::from_secs(10)));
    h.process(Either::Left((1, 1)), 0)?;
    h.advance_processing_time(Duration::from_secs(6))?;
    h.process(Either::Left((1, 2)), 0)?;
    h.process(Either::Left((9, 9)), 0)?;
    assert_eq!(
        h.take_values(),
        vec![
            Change::insert((Some((1, 1)), None)),
            Change::insert((Some((1, 2)), None)),
            Change::insert((Some((9, 9)), None)),
        ]
    );
    // 11 s after the first left row, 5 s after the second: only the second joins; the first
    // is forgotten without a retraction (its padded row stays in the result, as in Flink).
    h.advance_processing_time(Duration::from_secs(5))?;
    h.process(Either::Right((1, 50)), 0)?;
    assert_eq!(
        h.take_values(),
        vec![
            Change::delete((Some((1, 2)), None)),
            Change::insert((Some((1, 2)), Some((1, 50)))),
        ]
    );
    assert_eq!(
        h.metrics().state_entries,
        3,
        "left rows of keys 1, 9; right of 1"
    );
    // 10 s after the last write of each key's lists, the sweep removes them all.
    h.advance_processing_time(Duration::from_secs(10))?;
    assert_eq!(h.metrics().state_entries, 0);
    h.process(Either::Left((1, 3)), 0)?;
    assert_eq!(h.take_values(), vec![Change::insert((Some((1, 3)), None))]);
    Ok(())
}

#[test]
fn without_a_ttl_rows_are_kept_forever() -> Result<()> {
    let mut h = harness(JoinType::Inner, None);
    h.process(Either::Left((1, 1)), 0)?;
    h.advance_processing_time(Duration::from_secs(365 * 24 * 3600))?;
    h.process(Either::Right((1, 2)), 0)?;
    assert_eq!(
        h.take_values(),
        vec![Change::insert((Some((1, 1)), Some((1, 2))))]
    );
    Ok(())
}

/// A scripted run over three keys with both inputs, padded rows, matches and expiry.
fn script() -> Vec<Step<Either<Row, Row>>> {
    use Either::{Left, Right};
    use Step::{Advance, Record};
    vec![
        Record(Left((1, 1)), 1),
        Record(Right((2, 1)), 2),
        Record(Left((3, 1)), 3),
        Advance(Duration::from_secs(4)),
        Record(Right((1, 2)), 4),
        Record(Left((2, 2)), 5),
        Record(Left((1, 3)), 6),
        Advance(Duration::from_secs(7)), // the rows of the first step expire (ttl 10 s)
        Record(Right((3, 3)), 7),
        Record(Left((2, 4)), 8),
        Advance(Duration::from_secs(2)),
        Record(Right((1, 5)), 9),
        Record(Right((4, 6)), 10),
    ]
}

#[test]
fn the_join_survives_a_checkpoint_at_any_step_on_the_heap_and_the_byte_store() -> Result<()> {
    for join in ALL {
        for ttl in [None, Some(Duration::from_secs(10))] {
            assert_snapshot_round_trip(|| join_op(join, ttl), &script())?;
            assert_snapshot_round_trip_on(&MemoryKvBackend, || join_op(join, ttl), &script())?;
        }
    }
    Ok(())
}

#[test]
fn end_to_end_the_final_table_is_the_batch_join_at_any_parallelism() -> Result<()> {
    let lefts: Vec<Row> = (0..300u16).map(|i| ((i % 37) as u8, i)).collect();
    let rights: Vec<Row> = (0..200u16).map(|i| ((i % 53) as u8, 1_000 + i)).collect();
    for parallelism in [1, 2, 3] {
        for join in ALL {
            let env = StreamEnv::with_config(EnvConfig {
                parallelism,
                ..EnvConfig::default()
            });
            let (sink, table) = RetractSink::new();
            env.from_iter(lefts.clone())
                .key_by(|l| l.0)
                .join_regular(&env.from_iter(rights.clone()).key_by(|r| r.0))
                .join_type(join)
                .with_state_ttl(Duration::from_secs(3600))
                .apply(|l, r| (l.copied(), r.copied()))
                .sink(sink);
            env.execute()?;
            assert_eq!(
                table.rows(),
                batch_join(join, &lefts, &rights),
                "{join:?} at parallelism {parallelism}"
            );
        }
    }
    Ok(())
}

#[test]
fn the_changelog_goes_to_any_sink_as_appends() -> Result<()> {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let dir = tempfile::tempdir().unwrap();
    let (sink, out) = CollectSink::new();
    let joined = env
        .from_iter(vec![(1u8, 10u16)])
        .key_by(|l| l.0)
        .join_regular(&env.from_iter(vec![(2u8, 20u16)]).key_by(|r| r.0))
        .full()
        .apply(|l, r| (l.map(|l| l.1), r.map(|r| r.1)));
    joined.sink(sink);
    joined.sink(riffle::sink::FileSink::new(dir.path()));
    env.execute()?;
    let mut lines: Vec<String> = std::fs::read_to_string(dir.path().join("part-0.jsonl"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            r#"{"op":"+I","row":[10,null]}"#,
            r#"{"op":"+I","row":[null,20]}"#
        ]
    );
    assert_eq!(out.len(), 2);
    Ok(())
}

/// Generated inputs: which input, key (few keys: many matches), value.
fn inputs() -> impl Strategy<Value = Vec<(bool, u8, u16)>> {
    proptest::collection::vec((any::<bool>(), 0u8..4, 0u16..1_000), 0..40)
}

fn split(input: &[(bool, u8, u16)]) -> (Vec<Row>, Vec<Row>) {
    let lefts = input.iter().filter(|r| r.0).map(|r| (r.1, r.2)).collect();
    let rights = input.iter().filter(|r| !r.0).map(|r| (r.1, r.2)).collect();
    (lefts, rights)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// In whatever order the two inputs' rows interleave, the changelog, applied as a multiset,
    /// ends as the batch join; every retraction retracts a row that was emitted.
    #[test]
    fn the_applied_changelog_equals_the_batch_join(input in inputs()) {
        let (lefts, rights) = split(&input);
        for join in ALL {
            let mut h = harness(join, None);
            for (i, &(left, key, value)) in input.iter().enumerate() {
                let row = if left { Either::Left((key, value)) } else { Either::Right((key, value)) };
                h.process(row, i as i64).unwrap();
            }
            let mut table = RetractTable::new();
            table.apply_all(h.take_values()).unwrap();
            prop_assert_eq!(table.rows(), batch_join(join, &lefts, &rights), "{:?}", join);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// The same through a job at parallelism 2, where the two sources interleave as they run.
    #[test]
    fn a_parallel_job_ends_as_the_batch_join(input in inputs(), join in 0..4usize) {
        let join = ALL[join];
        let (lefts, rights) = split(&input);
        let env = StreamEnv::with_config(EnvConfig { parallelism: 2, ..EnvConfig::default() });
        let (sink, table) = RetractSink::new();
        env.from_iter(lefts.clone())
            .key_by(|l| l.0)
            .join_regular(&env.from_iter(rights.clone()).key_by(|r| r.0))
            .join_type(join)
            .apply(|l, r| (l.copied(), r.copied()))
            .sink(sink);
        env.execute().unwrap();
        prop_assert_eq!(table.rows(), batch_join(join, &lefts, &rights));
    }
}

#[test]
fn batch_join_of_the_test_is_itself_right() {
    // The reference the property tests compare with, on a case worked by hand.
    let lefts = [(1, 1), (1, 2), (2, 3)];
    let rights = [(1, 10), (3, 30)];
    assert_eq!(
        batch_join(JoinType::Inner, &lefts, &rights),
        vec![(Some((1, 1)), Some((1, 10))), (Some((1, 2)), Some((1, 10)))]
    );
    assert_eq!(
        batch_join(JoinType::Full, &lefts, &rights),
        vec![
            (None, Some((3, 30))),
            (Some((1, 1)), Some((1, 10))),
            (Some((1, 2)), Some((1, 10))),
            (Some((2, 3)), None),
        ]
    );
    assert_eq!(batch_join(JoinType::Left, &lefts, &rights).len(), 3);
    assert_eq!(batch_join(JoinType::Right, &lefts, &rights).len(), 3);
}

#[test]
fn a_retract_sink_fails_the_job_on_a_retraction_of_a_row_it_does_not_hold() {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let (sink, table) = RetractSink::new();
    env.from_iter(vec![Change::insert(1u32), Change::delete(2)])
        .sink(sink);
    let err = env.execute().unwrap_err().to_string();
    assert!(
        err.contains("changelog retracts 2 with -D, which the table does not hold"),
        "{err}"
    );
    assert_eq!(table.rows(), vec![1], "the insert before it was applied");
}

/// A harness of an inner join with a 10 s TTL, its state on the heap or in a byte store.
fn ttl_harness(in_store: bool) -> OperatorHarness<Either<Row, Row>, Change<Joined>> {
    let builder = OperatorHarness::builder(join_op(JoinType::Inner, Some(Duration::from_secs(10))));
    match in_store {
        true => builder.store(Arc::new(riffle::testing::MemoryKvStore::default())),
        false => builder,
    }
    .build()
    .unwrap()
}

proptest! {
    /// With a TTL, an inner join pairs a row with the other side's rows of its key that arrived
    /// less than the TTL before it, however rows arrive and however long expired rows wait in
    /// a key's list to be dropped; on the heap and in a byte store.
    #[test]
    fn with_a_ttl_a_row_joins_the_rows_that_arrived_within_it(
        steps in proptest::collection::vec((any::<bool>(), 0u8..2, 0u64..6_000), 1..80),
        in_store in any::<bool>(),
    ) {
        let mut h = ttl_harness(in_store);
        let mut arrived: Vec<(bool, Row, i64)> = Vec::new();
        let mut expected: Vec<Joined> = Vec::new();
        for (i, (left, key, wait)) in steps.into_iter().enumerate() {
            h.advance_processing_time(Duration::from_millis(wait)).unwrap();
            let now = h.processing_time();
            let row = (key, i as u16);
            for &(other_left, other, at) in &arrived {
                if other_left != left && other.0 == key && now - at < 10_000 {
                    expected.push(match left {
                        true => (Some(row), Some(other)),
                        false => (Some(other), Some(row)),
                    });
                }
            }
            arrived.push((left, row, now));
            let input = if left { Either::Left(row) } else { Either::Right(row) };
            h.process(input, 0).unwrap();
        }
        let mut got: Vec<Joined> = h
            .take_values()
            .into_iter()
            .map(|change| {
                assert_eq!(change.op, riffle::RowKind::Insert, "an inner join only inserts");
                change.row
            })
            .collect();
        got.sort();
        expected.sort();
        prop_assert_eq!(got, expected);
    }
}

#[test]
fn a_hot_keys_expired_rows_are_dropped_within_a_ttl_and_a_half() -> Result<()> {
    for in_store in [false, true] {
        let mut h = ttl_harness(in_store);
        let mut bytes = Vec::new();
        // A row a second on one key (10 s TTL): at most 15 rows are ever kept.
        for i in 0..200u16 {
            h.process(Either::Left((1, i)), 0)?;
            h.advance_processing_time(Duration::from_secs(1))?;
            bytes.push(h.metrics().state_bytes);
        }
        let (early, late) = (bytes[20], *bytes[100..].iter().max().unwrap());
        assert!(
            late <= early * 2,
            "state of {late} bytes after 200 rows, {early} after 20 (in a store: {in_store})"
        );
        // Only the rows of the last 10 s join (1 s to 9 s old; the one 10 s old expired).
        h.process(Either::Right((1, 0)), 0)?;
        assert_eq!(h.take_values().len(), 9);
    }
    Ok(())
}

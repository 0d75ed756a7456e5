//! The interval join: exact outputs and times on small inputs, bounds (signed, exclusive), late
//! records of both sides, state cleaned up by the watermark, checkpoint round trips, a job at
//! parallelism 1 to 3, and (proptest) equality with a nested-loop batch join for any disorder
//! within the watermark's bound.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use riffle::operators::{IntervalJoinOperator, IntervalJoinSpec, JoinContext};
use riffle::sink::CollectSink;
use riffle::testing::{OperatorHarness, Step, assert_snapshot_round_trip};
use riffle::time::WatermarkStrategy;
use riffle::{Either, EnvConfig, OutputTag, Record, Result, StreamEnv};

/// An order: (user, order id, time).
type Order = (u64, u32, i64);
/// A payment: (user, amount, time).
type Payment = (u64, u64, i64);
/// The joined pair: (user, order id, amount).
type Paid = (u64, u32, u64);

fn key(record: &Either<Order, Payment>) -> u64 {
    match record {
        Either::Left(o) => o.0,
        Either::Right(p) => p.0,
    }
}

fn pair(order: Order, payment: Payment, ctx: &mut JoinContext<Paid>) -> Result<()> {
    ctx.emit((order.0, order.1, payment.1))
}

type Op = IntervalJoinOperator<
    u64,
    Order,
    Payment,
    Paid,
    fn(Order, Payment, &mut JoinContext<Paid>) -> Result<()>,
>;

fn operator(spec: IntervalJoinSpec<Order, Payment>) -> Op {
    IntervalJoinOperator::new(
        Arc::new(key),
        spec,
        pair as fn(Order, Payment, &mut JoinContext<Paid>) -> Result<()>,
    )
}

fn order(user: u64, id: u32, at: i64) -> Either<Order, Payment> {
    Either::Left((user, id, at))
}

fn payment(user: u64, amount: u64, at: i64) -> Either<Order, Payment> {
    Either::Right((user, amount, at))
}

fn at(records: Vec<Record<Paid>>) -> Vec<(Paid, Option<i64>)> {
    let mut v: Vec<_> = records
        .into_iter()
        .map(|r| (r.value, r.timestamp()))
        .collect();
    v.sort();
    v
}

#[test]
fn pairs_within_the_interval_join_with_the_later_time() -> Result<()> {
    // A payment joins an order of the same user made 0..=10 s before it.
    let mut h = OperatorHarness::builder(operator(IntervalJoinSpec::new(0, 10_000))).build()?;
    h.process(order(1, 100, 1_000), 1_000)?;
    h.process(order(2, 200, 1_500), 1_500)?;
    h.process(payment(1, 7, 5_000), 5_000)?; // joins order 100 (4 s after)
    h.process(payment(1, 8, 11_000), 11_000)?; // joins order 100 (exactly 10 s after)
    h.process(payment(1, 9, 11_001), 11_001)?; // 10.001 s after: no
    h.process(payment(2, 3, 1_000), 1_000)?; // before order 200: no
    h.process(order(1, 101, 4_000), 4_000)?; // joins payments 7, 8, 9 (already buffered)
    assert_eq!(
        at(h.take_output()),
        vec![
            ((1, 100, 7), Some(5_000)),
            ((1, 100, 8), Some(11_000)),
            ((1, 101, 7), Some(5_000)),
            ((1, 101, 8), Some(11_000)),
            ((1, 101, 9), Some(11_001)),
        ]
    );
    Ok(())
}

#[test]
fn negative_and_exclusive_bounds_shift_the_interval() -> Result<()> {
    // between(-5, -1): payments 1..=5 ms before the order; exclusive bounds: 2..=4 ms before.
    for (spec, expected) in [
        (IntervalJoinSpec::new(-5, -1), vec![1, 2, 3, 4, 5]),
        (
            IntervalJoinSpec {
                lower: -4,
                upper: -2,
                ..IntervalJoinSpec::new(0, 0)
            },
            vec![2, 3, 4],
        ),
    ] {
        let mut h = OperatorHarness::builder(operator(spec)).build()?;
        for before in 0..=6u64 {
            let t = 100 - before as i64;
            h.process(payment(1, before, t), t)?;
        }
        h.process(order(1, 1, 100), 100)?;
        let mut amounts: Vec<u64> = h.take_values().into_iter().map(|p| p.2).collect();
        amounts.sort();
        assert_eq!(amounts, expected);
    }
    Ok(())
}

#[test]
fn exclusive_bounds_through_the_api() -> Result<()> {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let (sink, out) = CollectSink::new();
    let strategy = || WatermarkStrategy::monotonous().with_timestamps(|r: &(u64, i64)| r.1);
    let left = env.from_iter_with_watermarks(vec![(1u64, 100i64)], strategy());
    let right = env.from_iter_with_watermarks((90..=120).map(|t| (1u64, t)), strategy());
    left.key_by(|r| r.0)
        .interval_join(&right.key_by(|r| r.0))
        .between(-5, 5)
        .lower_bound_exclusive()
        .process(|l, r, ctx| ctx.emit((l.1, r.1, ctx.timestamp())))
        .sink(sink);
    env.execute()?;
    assert_eq!(
        out.sorted(),
        (96..=105).map(|t| (100, t, t.max(100))).collect::<Vec<_>>()
    );
    Ok(())
}

#[test]
fn a_lower_bound_above_the_upper_one_fails_at_start_naming_the_setting() {
    let env = StreamEnv::new();
    let a = env.from_iter(vec![(1u64, 1i64)]);
    let b = env.from_iter(vec![(1u64, 1i64)]);
    a.key_by(|r| r.0)
        .interval_join(&b.key_by(|r| r.0))
        .between(5, 5)
        .upper_bound_exclusive()
        .process(|l, _, ctx| ctx.emit(l.1))
        .sink(CollectSink::new().0);
    let error = env.execute().unwrap_err().to_string();
    assert!(error.contains("interval join bounds"), "{error}");
    assert!(
        error.contains("lower bound (5 ms) is above the upper bound (4 ms)"),
        "{error}"
    );
}

#[test]
fn late_records_of_each_side_go_to_their_side_output_or_are_counted() -> Result<()> {
    let late_orders = OutputTag::<Order>::new("late-orders");
    let late_payments = OutputTag::<Payment>::new("late-payments");
    let spec = IntervalJoinSpec {
        left_late: Some(late_orders.clone()),
        right_late: Some(late_payments.clone()),
        ..IntervalJoinSpec::new(-1_000, 1_000)
    };
    let mut h = OperatorHarness::builder(operator(spec))
        .side_output(&late_orders)
        .side_output(&late_payments)
        .build()?;
    h.process(order(1, 1, 5_000), 5_000)?;
    h.watermark(5_000)?;
    h.process(payment(1, 10, 5_000), 5_000)?; // at the watermark: not late, joins
    h.process(payment(1, 11, 4_999), 4_999)?; // late
    h.process(order(1, 2, 4_000), 4_000)?; // late
    assert_eq!(h.take_values(), vec![(1, 1, 10)]);
    assert_eq!(
        h.take_side_output(&late_orders)
            .into_iter()
            .map(|r| (r.value, r.timestamp()))
            .collect::<Vec<_>>(),
        vec![((1, 2, 4_000), Some(4_000))]
    );
    assert_eq!(
        h.take_side_output(&late_payments)
            .into_iter()
            .map(|r| r.value)
            .collect::<Vec<_>>(),
        vec![(1, 11, 4_999)]
    );
    assert_eq!(h.metrics().late_records_side_output, 2);
    assert_eq!(h.metrics().late_records_dropped, 0);

    // Without side outputs, late records are dropped and counted.
    let mut h = OperatorHarness::builder(operator(IntervalJoinSpec::new(0, 0))).build()?;
    h.watermark(100)?;
    h.process(order(1, 1, 99), 99)?;
    h.process(payment(1, 1, 50), 50)?;
    h.process(payment(1, 2, 100), 100)?;
    assert!(h.take_values().is_empty());
    assert_eq!(h.metrics().late_records_dropped, 2);
    Ok(())
}

#[test]
fn the_watermark_cleans_up_what_can_no_longer_join() -> Result<()> {
    // between(-2 s, 3 s): an order waits until the watermark passes its time + 3 s, a payment
    // until it passes its time + 2 s.
    let mut h = OperatorHarness::builder(operator(IntervalJoinSpec::new(-2_000, 3_000))).build()?;
    h.process(order(1, 1, 10_000), 10_000)?;
    h.process(payment(2, 5, 10_000), 10_000)?;
    assert_eq!(h.metrics().state_entries, 4, "two buffers and two timers");
    h.watermark(12_000)?; // payment kept: a later order at 12 000 may still join it
    h.process(order(2, 2, 12_000), 12_000)?; // joins (payment 2 s before)
    assert_eq!(h.take_values(), vec![(2, 2, 5)]);
    h.watermark(12_001)?; // payment's reach passed
    h.process(order(2, 3, 12_001), 12_001)?; // nothing left to join
    h.watermark(13_000)?; // order 1 still kept: a payment at 13 000 may join it
    h.process(payment(1, 6, 13_000), 13_000)?;
    assert_eq!(h.take_values(), vec![(1, 1, 6)]);
    h.watermark(15_001)?; // orders 1, 2 and payment 6 passed their reach; order 3 did not
    assert_eq!(h.metrics().state_entries, 2, "order 3's buffer and timer");
    h.watermark(15_002)?;
    assert!(h.take_values().is_empty());
    assert_eq!(h.metrics().state_entries, 0);
    Ok(())
}

#[test]
fn a_record_that_cannot_join_any_later_record_is_not_buffered() -> Result<()> {
    // between(-10, -5): an order joins payments 5..=10 ms before it; at watermark 100 an order
    // at 100 can only join payments that are late already: it joins what is buffered, no more.
    let mut h = OperatorHarness::builder(operator(IntervalJoinSpec::new(-10, -5))).build()?;
    h.process(payment(1, 9, 93), 93)?;
    h.watermark(100)?;
    h.process(order(1, 1, 100), 100)?;
    assert_eq!(h.take_values(), vec![(1, 1, 9)]);
    h.watermark(106)?; // the payment's reach (93 + 10) passed
    assert_eq!(h.metrics().state_entries, 0);
    Ok(())
}

#[test]
fn a_record_without_timestamp_fails_the_job_with_a_clear_error() -> Result<()> {
    let mut h = OperatorHarness::builder(operator(IntervalJoinSpec::new(0, 1))).build()?;
    let error = h.process_untimed(order(1, 1, 0)).unwrap_err().to_string();
    assert!(
        error.contains("interval join received a record without a timestamp"),
        "{error}"
    );
    Ok(())
}

/// A script with joins across cut points, cleanup by the watermark and late records.
pub fn script() -> Vec<Step<Either<Order, Payment>>> {
    use Step::{Record as R, Watermark as W};
    vec![
        R(order(1, 1, 1_000), 1_000),
        R(payment(1, 10, 1_500), 1_500),
        R(order(2, 2, 2_000), 2_000),
        R(payment(2, 20, 900), 900),
        W(1_000),
        R(payment(1, 11, 2_900), 2_900),
        R(order(1, 3, 2_500), 2_500),
        W(2_500),
        R(payment(1, 12, 2_000), 2_000), // late
        R(payment(2, 21, 3_100), 3_100),
        W(3_500),
        R(order(2, 4, 3_600), 3_600),
        R(payment(2, 22, 4_000), 4_000),
        W(6_000),
        R(order(1, 5, 6_100), 6_100),
        R(payment(1, 13, 6_000), 6_000),
    ]
}

#[test]
fn the_interval_join_survives_a_checkpoint_at_any_point_on_the_heap() -> Result<()> {
    assert_snapshot_round_trip(|| operator(IntervalJoinSpec::new(-500, 1_000)), &script())
}

#[test]
fn a_job_joins_the_same_pairs_at_parallelism_1_2_and_3() -> Result<()> {
    // 40 users; orders every 700 ms, payments every 300 ms, with disorder within 2 s.
    let orders: Vec<Order> = (0..600u32)
        .map(|i| ((i % 40) as u64, i, i as i64 * 700 - (i as i64 * 37 % 2_000)))
        .collect();
    let payments: Vec<Payment> = (0..1_400u64)
        .map(|i| (i % 40, i, i as i64 * 300 - (i as i64 * 53 % 2_000)))
        .collect();
    let expected = batch_join(&orders, &payments, -1_000, 5_000);
    assert!(expected.len() > 100, "{}", expected.len());
    for parallelism in [1, 2, 3] {
        let env = StreamEnv::with_config(EnvConfig {
            parallelism,
            ..EnvConfig::default()
        });
        let (sink, out) = CollectSink::new();
        let bound = std::time::Duration::from_secs(2);
        let o = env.from_iter_with_watermarks(
            orders.clone(),
            WatermarkStrategy::bounded_out_of_orderness(bound).with_timestamps(|o: &Order| o.2),
        );
        let p = env.from_iter_with_watermarks(
            payments.clone(),
            WatermarkStrategy::bounded_out_of_orderness(bound).with_timestamps(|p: &Payment| p.2),
        );
        o.key_by(|o| o.0)
            .interval_join(&p.key_by(|p| p.0))
            .between(-1_000, 5_000)
            .process(|o, p, ctx| ctx.emit((o, p, ctx.timestamp())))
            .sink(sink);
        let result = env.execute()?;
        assert_eq!(out.sorted(), expected, "p={parallelism}");
        assert_eq!(
            result
                .metrics
                .operator_total("IntervalJoin")
                .unwrap()
                .late_records_dropped,
            0
        );
    }
    Ok(())
}

/// The join as a batch computation: every pair of a key with `lower <= p.ts - o.ts <= upper`,
/// with the later time.
fn batch_join(
    orders: &[Order],
    payments: &[Payment],
    lower: i64,
    upper: i64,
) -> Vec<(Order, Payment, i64)> {
    let mut out = Vec::new();
    for o in orders {
        for p in payments {
            if o.0 == p.0 && p.2 - o.2 >= lower && p.2 - o.2 <= upper {
                out.push((*o, *p, o.2.max(p.2)));
            }
        }
    }
    out.sort();
    out
}

/// An arrival order in which no record comes more than `disorder` ms of event time after a
/// later one (many exactly `disorder` ms after).
fn arrivals<T: Clone>(mut records: Vec<(i64, T)>, disorder: i64, seeds: &[u32]) -> Vec<(i64, T)> {
    records.sort_by_key(|r| r.0);
    let mut keyed: Vec<(i64, usize, (i64, T))> = records
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            // A third of the records move by the whole bound, a third not at all: the records
            // overtaken by the first come exactly at the watermark.
            let seed = seeds[i % seeds.len()];
            let shift = match seed % 3 {
                0 => disorder,
                1 => 0,
                _ => i64::from(seed / 3) % (disorder + 1),
            };
            (r.0 - shift, i, r)
        })
        .collect();
    // On a tie the later record comes first: the earlier one then arrives exactly at the
    // watermark.
    keyed.sort_by_key(|k| (k.0, std::cmp::Reverse(k.1)));
    keyed.into_iter().map(|(_, _, r)| r).collect()
}

const BOUND: i64 = 20;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_interval_join_equals_a_nested_loop_join_for_any_disorder_within_the_bound(
        orders in prop::collection::vec((0u64..3, 0i64..60), 0..60),
        payments in prop::collection::vec((0u64..3, 0i64..60), 0..60),
        lower in -8i64..8,
        width in 0i64..12,
        seeds in prop::collection::vec(any::<u32>(), 1..20),
        batch in 1usize..5,
    ) {
        // Times and bounds on a 5 ms grid: many pairs sit exactly on a bound, many records
        // exactly at the watermark.
        let (lower, upper) = (lower * 5, (lower + width) * 5);
        let orders: Vec<Order> = orders.iter().enumerate().map(|(i, &(u, t))| (u, i as u32, t * 5)).collect();
        let payments: Vec<Payment> = payments.iter().enumerate().map(|(i, &(u, t))| (u, i as u64, t * 5)).collect();
        let mut input: Vec<(i64, Either<Order, Payment>)> = orders.iter().map(|o| (o.2, Either::Left(*o))).collect();
        input.extend(payments.iter().map(|p| (p.2, Either::Right(*p))));
        let input = arrivals(input, BOUND, &seeds);

        let op = IntervalJoinOperator::new(
            Arc::new(key),
            IntervalJoinSpec::new(lower, upper),
            |o: Order, p: Payment, ctx: &mut JoinContext<(Order, Payment, i64)>| {
                let at = ctx.timestamp();
                ctx.emit((o, p, at))
            },
        );
        let mut h = OperatorHarness::builder(op).buffer_size(batch).build().unwrap();
        let mut max_seen = i64::MIN;
        for (ts, record) in input {
            h.process(record, ts).unwrap();
            max_seen = max_seen.max(ts);
            h.watermark(max_seen - BOUND).unwrap();
        }
        h.watermark(i64::MAX).unwrap();
        let mut joined: Vec<(Order, Payment, i64)> = h.take_output().into_iter().map(|r| {
            assert_eq!(r.timestamp(), Some(r.value.2));
            r.value
        }).collect();
        joined.sort();
        prop_assert_eq!(h.metrics().late_records_dropped, 0);
        prop_assert_eq!(h.metrics().state_entries, 0, "the final watermark cleans up everything");
        prop_assert_eq!(joined, batch_join(&orders, &payments, lower, upper));
    }
}

#[test]
fn joined_results_per_key_are_counted_once() -> Result<()> {
    // Duplicate timestamps on both sides: every pair once, none twice.
    let mut h = OperatorHarness::builder(operator(IntervalJoinSpec::new(0, 0))).build()?;
    for i in 0..3 {
        h.process(order(1, i, 10), 10)?;
        h.process(payment(1, u64::from(i), 10), 10)?;
    }
    let mut counts: BTreeMap<Paid, usize> = BTreeMap::new();
    for p in h.take_values() {
        *counts.entry(p).or_default() += 1;
    }
    assert_eq!(counts.len(), 9);
    assert!(counts.values().all(|&n| n == 1));
    Ok(())
}

#[test]
fn a_job_recovers_its_buffered_records_from_a_checkpoint_after_a_failure() -> Result<()> {
    use riffle::sink::ExactlyOnceFileSink;
    use riffle::source::collection::CollectionSource;
    use std::time::Duration;
    let orders: Vec<Order> = (0..4_000u32)
        .map(|i| ((i % 25) as u64, i, i as i64 * 10 - (i as i64 * 37 % 300)))
        .collect();
    let payments: Vec<Payment> = (0..4_000u64)
        .map(|i| (i % 25, i, i as i64 * 10 - (i as i64 * 53 % 300)))
        .collect();
    let expected: Vec<String> = {
        let mut lines: Vec<String> = batch_join(&orders, &payments, -100, 400)
            .into_iter()
            .map(|(o, p, at)| format!("{} {} {} {at}", o.0, o.1, p.1))
            .collect();
        lines.sort();
        lines
    };
    for parallelism in [2, 3] {
        let dir = tempfile::tempdir().unwrap();
        let env = StreamEnv::with_config(riffle::testing::recovering_config(
            parallelism,
            &dir.path().join("chk"),
            Duration::from_millis(50),
        ));
        let bound = Duration::from_millis(300);
        let fail = riffle::testing::fail_once_after::<Order>(3_500);
        let o = env
            .from_source_with_watermarks(
                CollectionSource::new(orders.clone()),
                WatermarkStrategy::bounded_out_of_orderness(bound).with_timestamps(|o: &Order| o.2),
            )
            .uid("orders")
            .map(move |o: Order| {
                if o.1.is_multiple_of(100) {
                    std::thread::sleep(Duration::from_millis(20)); // room for checkpoints
                }
                fail(o)
            })
            .uid("crash");
        let p = env
            .from_source_with_watermarks(
                CollectionSource::new(payments.clone()),
                WatermarkStrategy::bounded_out_of_orderness(bound)
                    .with_timestamps(|p: &Payment| p.2),
            )
            .uid("payments");
        o.key_by(|o| o.0)
            .interval_join(&p.key_by(|p| p.0))
            .between(-100, 400)
            .process(|o, p, ctx| {
                let at = ctx.timestamp();
                ctx.emit(format!("{} {} {} {at}", o.0, o.1, p.1))
            })
            .uid("join")
            .sink(ExactlyOnceFileSink::new(dir.path().join("out")))
            .uid("sink");
        let result = env.execute()?;
        assert_eq!(result.restarts, 1, "p={parallelism}");
        assert!(
            result.restores[0] > 0,
            "restored from a checkpoint: {:?}",
            result.restores
        );
        let mut lines = Vec::new();
        for entry in std::fs::read_dir(dir.path().join("out")).unwrap().flatten() {
            if entry.path().is_file() {
                let text = std::fs::read_to_string(entry.path()).unwrap();
                lines.extend(text.lines().map(|l| l.trim_matches('"').to_string()));
            }
        }
        lines.sort();
        assert_eq!(lines.len(), expected.len(), "p={parallelism}");
        assert_eq!(lines, expected, "p={parallelism}");
    }
    Ok(())
}

#[test]
fn late_records_reach_the_side_outputs_of_a_job() -> Result<()> {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let (sink, out) = CollectSink::new();
    let (late_sink, late_out) = CollectSink::new();
    let late = OutputTag::<(u64, i64)>::new("late-left");
    let strategy = || WatermarkStrategy::monotonous().with_timestamps(|r: &(u64, i64)| r.1);
    // The left record at 1 000 comes after the left watermark passed 5 000: once the right
    // input's watermark passed too, it is late.
    let left = env.from_iter_with_watermarks(vec![(1u64, 5_000i64), (1, 1_000)], strategy());
    let right = env.from_iter_with_watermarks(vec![(1u64, 1_000i64), (1, 5_000)], strategy());
    let joined = left
        .key_by(|r| r.0)
        .interval_join(&right.key_by(|r| r.0))
        .between(0, 0)
        .side_output_left_late(&late)
        .process(|l, r, ctx| ctx.emit((l.1, r.1)));
    joined.get_side_output(&late).sink(late_sink);
    joined.sink(sink);
    let result = env.execute()?;
    let late_records = late_out.values();
    let mut expected = vec![(5_000, 5_000)];
    if late_records.is_empty() {
        expected.push((1_000, 1_000));
    } else {
        assert_eq!(late_records, vec![(1, 1_000)]);
    }
    expected.sort();
    assert_eq!(out.sorted(), expected);
    let metrics = result.metrics.operator_total("IntervalJoin").unwrap();
    assert_eq!(metrics.late_records_side_output, late_records.len() as u64);
    assert_eq!(metrics.late_records_dropped, 0);
    Ok(())
}

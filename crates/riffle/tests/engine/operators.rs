//! Exact output of each basic operator.

use riffle::operators::{Collector, Operator};
use riffle::sink::CollectSink;
use riffle::{OutputTag, Record, Result};

use crate::{env, run};

#[test]
fn map_filter_flat_map_give_exact_output() {
    let env = env(1);
    let (sink, out) = CollectSink::new();
    env.from_iter(1..=20u64)
        .filter(|x| x % 3 != 0)
        .map(|x| x * 10)
        .flat_map(|x| if x % 20 == 0 { vec![x, x + 1] } else { vec![] })
        .sink(sink);
    let result = run(&env).unwrap();
    // Within one subtask the order is the input order.
    assert_eq!(
        out.values(),
        vec![
            20, 21, 40, 41, 80, 81, 100, 101, 140, 141, 160, 161, 200, 201
        ]
    );
    assert_eq!(result.records_in("Filter"), 20);
    assert_eq!(result.records_out("Filter"), 14);
    assert_eq!(result.records_out("FlatMap"), 14);
}

#[test]
fn try_map_passes_values_through() {
    let env = env(2);
    let (sink, out) = CollectSink::new();
    env.from_iter(vec!["1".to_string(), "22".into(), "333".into()])
        .try_map(|s| s.parse::<u32>())
        .sink(sink);
    run(&env).unwrap();
    assert_eq!(out.sorted(), vec![1, 22, 333]);
}

#[test]
fn union_merges_streams() {
    let env = env(2);
    let (sink, out) = CollectSink::new();
    let a = env.from_iter(vec![1u64, 2, 3]);
    let b = env.from_iter(vec![10u64, 20]).set_parallelism(1);
    let c = env.from_iter(vec![100u64]);
    a.union(&[&b, &c]).map(|x| x + 1).sink(sink);
    run(&env).unwrap();
    assert_eq!(out.sorted(), vec![2, 3, 4, 11, 21, 101]);
}

#[test]
fn broadcast_reaches_every_subtask_and_rebalance_spreads() {
    let env = env(1);
    let (sink, out) = CollectSink::new();
    env.from_iter(vec![1u64, 2])
        .broadcast()
        .map(|x| x)
        .set_parallelism(3)
        .sink(sink)
        .set_parallelism(3);
    run(&env).unwrap();
    let by_subtask = out.records_by_subtask();
    for subtask in 0..3 {
        let mut got: Vec<u64> = by_subtask
            .iter()
            .filter(|(s, _)| *s == subtask)
            .map(|(_, r)| r.value)
            .collect();
        got.sort();
        assert_eq!(got, vec![1, 2], "subtask {subtask}");
    }

    let env = crate::env(1);
    let (sink, out) = CollectSink::new();
    env.from_iter(0..90u64)
        .rebalance()
        .map(|x| x)
        .set_parallelism(3)
        .sink(sink)
        .set_parallelism(3);
    run(&env).unwrap();
    let by_subtask = out.records_by_subtask();
    for subtask in 0..3 {
        let got: Vec<u64> = by_subtask
            .iter()
            .filter(|(s, _)| *s == subtask)
            .map(|(_, r)| r.value)
            .collect();
        assert_eq!(
            got,
            (0..90)
                .filter(|x| x % 3 == subtask as u64)
                .collect::<Vec<_>>()
        );
    }
}

/// Emits even numbers and sends odd ones to a side output.
struct SplitOdd {
    odd: OutputTag<u64>,
    dropped: u64,
}

impl Operator for SplitOdd {
    type In = u64;
    type Out = u64;
    fn process(
        &mut self,
        batch: &mut Vec<Record<u64>>,
        out: &mut Collector<'_, u64>,
    ) -> Result<()> {
        for record in batch.drain(..) {
            if record.value % 2 == 0 {
                out.emit(record)?;
            } else if !out.side_output(&self.odd, record)? {
                self.dropped += 1;
            }
        }
        Ok(())
    }
}

#[test]
fn side_outputs_reach_their_consumers() {
    let env = env(2);
    let odd = OutputTag::<u64>::new("odd");
    let (evens, even_out) = CollectSink::new();
    let (odds, odd_out) = CollectSink::new();
    let tag = odd.clone();
    let split = env
        .from_iter(0..10u64)
        .transform("split", move || SplitOdd {
            odd: tag.clone(),
            dropped: 0,
        });
    split.sink(evens);
    split
        .get_side_output(&odd)
        .map(|x| x * 100)
        .set_parallelism(1)
        .sink(odds);
    run(&env).unwrap();
    assert_eq!(even_out.sorted(), vec![0, 2, 4, 6, 8]);
    assert_eq!(odd_out.sorted(), vec![100, 300, 500, 700, 900]);
}

#[test]
fn a_stream_consumed_twice_feeds_both() {
    let env = env(2);
    let (a, a_out) = CollectSink::new();
    let (b, b_out) = CollectSink::new();
    let numbers = env.from_iter(1..=4u64).map(|x| x * 2);
    numbers.sink(a);
    numbers.filter(|x| *x > 4).sink(b);
    run(&env).unwrap();
    assert_eq!(a_out.sorted(), vec![2, 4, 6, 8]);
    assert_eq!(b_out.sorted(), vec![6, 8]);
}

#[test]
fn timestamps_travel_with_records() {
    struct Stamp;
    impl Operator for Stamp {
        type In = u64;
        type Out = u64;
        fn process(
            &mut self,
            batch: &mut Vec<Record<u64>>,
            out: &mut Collector<'_, u64>,
        ) -> Result<()> {
            for r in batch.drain(..) {
                out.emit_value(r.value, r.value as i64 * 1000)?;
            }
            Ok(())
        }
    }
    let env = env(2);
    let (sink, out) = CollectSink::new();
    env.from_iter(1..=5u64)
        .transform("stamp", || Stamp)
        .key_by(|x| *x)
        .process(
            |_: &u64,
             x: u64,
             ctx: &mut riffle::operators::KeyedContext<'_, '_, u64, (u64, i64)>|
             -> Result<()> {
                let ts = ctx.timestamp().unwrap();
                ctx.emit((x, ts))
            },
        )
        .map(|pair| pair)
        .sink(sink);
    run(&env).unwrap();
    let mut records = out.records();
    records.sort_by_key(|r| r.value);
    for r in records {
        assert_eq!(
            r.timestamp(),
            Some(r.value.1),
            "the map keeps the timestamp"
        );
        assert_eq!(r.value.1, r.value.0 as i64 * 1000);
    }
}

#[test]
fn records_sent_to_a_side_output_nothing_consumes_are_counted() {
    let env = env(2);
    let (sink, out) = CollectSink::new();
    let rejected = OutputTag::<u64>::new("rejected");
    let consumed = OutputTag::<u64>::new("consumed");
    let (side_sink, side_out) = CollectSink::new();
    let main = env.from_iter(1..=10u64).process({
        let (rejected, consumed) = (rejected.clone(), consumed.clone());
        move |x, ctx| {
            if x % 2 == 0 {
                // Nothing consumes `rejected`: dropped, but counted.
                assert!(!ctx.side_output(&rejected, x)?);
                Ok(())
            } else if x == 9 {
                assert!(ctx.side_output(&consumed, x)?);
                Ok(())
            } else {
                ctx.emit(x)
            }
        }
    });
    main.sink(sink);
    main.get_side_output(&consumed).sink(side_sink);
    let result = run(&env).unwrap();
    assert_eq!(out.sorted(), vec![1, 3, 5, 7]);
    assert_eq!(side_out.values(), vec![9]);
    let process = result.metrics.operator_total("Process").unwrap();
    assert_eq!(process.side_output_unconsumed, 5);
}

/// A custom trigger fires a window as records arrive; purging starts it again empty; a trigger
/// that keeps the end firing leaves the on-time result too; an evictor trims what a full-window
/// function sees.
#[test]
fn custom_triggers_and_evictors_shape_window_results() {
    use riffle::aggregate::Count;
    use riffle::time::WatermarkStrategy;
    use riffle::window::{
        CountEvictor, CountTrigger, Purging, TimeWindow, Trigger, TriggerResult, Tumbling,
    };
    use riffle::{EnvConfig, StreamEnv};
    use std::time::Duration;

    /// Fires when a record's value is odd, and at the window's end.
    struct OnOdd;
    impl Trigger<(u64, i64)> for OnOdd {
        fn on_element(&self, r: &(u64, i64), _: TimeWindow, _: u64) -> TriggerResult {
            if r.1 % 2 == 1 {
                TriggerResult::Fire
            } else {
                TriggerResult::Continue
            }
        }
    }

    let clicks: Vec<(u64, i64)> = vec![(1, 1_000), (1, 2_000), (1, 3_001), (1, 4_000), (1, 5_000)];
    let run_with = |configure: &dyn Fn(
        riffle::WindowedStream<u64, (u64, i64)>,
    ) -> riffle::DataStream<String>| {
        let env = StreamEnv::with_config(EnvConfig::deterministic());
        let (sink, out) = CollectSink::new();
        let windowed = env
            .from_iter_with_watermarks(
                clicks.clone(),
                WatermarkStrategy::monotonous().with_timestamps(|c: &(u64, i64)| c.1),
            )
            .key_by(|c| c.0)
            .window(Tumbling::of(Duration::from_secs(60)));
        configure(windowed).sink(sink);
        env.execute().unwrap();
        out.values()
    };
    let counts = |w: riffle::WindowedStream<u64, (u64, i64)>| {
        w.aggregate(Count)
            .map(|r| format!("{}{}", r.value, if r.update { "u" } else { "" }))
    };
    // Every 2 records, never at the end: counts 2 and 4.
    assert_eq!(
        run_with(&|w| counts(w.trigger(CountTrigger::of(2)))),
        vec!["2", "4u"]
    );
    // Purging: each firing starts the window again.
    assert_eq!(
        run_with(&|w| counts(w.trigger(Purging(CountTrigger::of(2))))),
        vec!["2", "2u"]
    );
    // Fires on the odd record (3 so far), then at the end with all 5.
    assert_eq!(run_with(&|w| counts(w.trigger(OnOdd))), vec!["3", "5u"]);
    // The function sees the last 2 records only.
    assert_eq!(
        run_with(&|w| w
            .evictor(CountEvictor::of(2))
            .process(|_, _, clicks, out| out.emit(format!(
                "{:?}",
                clicks.iter().map(|c| c.1).collect::<Vec<_>>()
            )))),
        vec!["[4000, 5000]"]
    );
}

/// Keeps the even numbers it reads, by reference when it can; counts the batches it was given
/// to own.
struct Evens {
    owned: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Operator for Evens {
    type In = u64;
    type Out = u64;
    fn process(
        &mut self,
        batch: &mut Vec<Record<u64>>,
        out: &mut Collector<'_, u64>,
    ) -> Result<()> {
        self.owned
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.process_shared(batch, out)?;
        batch.clear();
        Ok(())
    }
    fn process_shared(
        &mut self,
        batch: &[Record<u64>],
        out: &mut Collector<'_, u64>,
    ) -> Result<bool> {
        for r in batch.iter().filter(|r| r.value % 2 == 0) {
            out.emit(r.with_value(r.value))?;
        }
        Ok(true)
    }
}

/// A stream read by several operators of its task lends its records to all but the last: an
/// operator that reads them by reference gets no copy; one that does not gets a copy.
#[test]
fn a_stream_with_several_readers_lends_its_records_to_all_but_the_last() {
    let env = env(1);
    let owned = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (evens, even_out) = CollectSink::new();
    let (tens, ten_out) = CollectSink::new();
    let (all, all_out) = CollectSink::new();
    let numbers = env.from_iter(1..=1_000u64);
    let counter = owned.clone();
    numbers
        .transform("Evens", move || Evens {
            owned: counter.clone(),
        })
        .sink(evens);
    numbers.filter(|x| x % 10 == 0).sink(tens);
    numbers.map(|x| x + 1).sink(all);
    let result = run(&env).unwrap();
    assert_eq!(
        even_out.values(),
        (1..=500).map(|x| x * 2).collect::<Vec<_>>()
    );
    assert_eq!(
        ten_out.values(),
        (1..=100).map(|x| x * 10).collect::<Vec<_>>()
    );
    assert_eq!(all_out.values(), (2..=1_001).collect::<Vec<_>>());
    assert_eq!(
        owned.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "Evens read lent records"
    );
    assert_eq!(result.records_in("Evens"), 1_000);
    assert_eq!(result.records_in("Filter"), 1_000);
}

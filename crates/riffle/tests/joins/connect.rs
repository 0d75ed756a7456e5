//! `connect`: two streams of different types into one operator, at any parallelism; keyed state
//! and timers shared by both inputs; the watermark is the minimum of both inputs'.

use std::collections::BTreeMap;

use riffle::operators::Collector;
use riffle::operators::{CoProcessFunction, KeyedCoProcessFunction, KeyedContext, ProcessContext};
use riffle::sink::CollectSink;
use riffle::state::{TimeDomain, ValueStateDescriptor};
use riffle::time::WatermarkStrategy;
use riffle::{EnvConfig, Result, StreamEnv, Timestamp};

#[test]
fn keyed_connect_meets_both_inputs_of_a_key_in_one_subtask_at_any_parallelism() -> Result<()> {
    for parallelism in [1, 2, 3] {
        let env = StreamEnv::with_config(EnvConfig {
            parallelism,
            ..EnvConfig::default()
        });
        let (sink, out) = CollectSink::new();
        // Users' names on one input, their clicks on the other; a click gets the name when the
        // name arrived before it, and every name is emitted with the clicks seen before it.
        let names = env.from_iter((0..50u64).map(|u| (u, format!("user-{u}"))));
        let clicks = env.from_iter((0..500u64).map(|i| (i % 50, i)));
        #[derive(Clone)]
        struct Count;
        const CLICKS: ValueStateDescriptor<u64> = ValueStateDescriptor::new("clicks");
        impl KeyedCoProcessFunction<u64, (u64, String), (u64, u64), (u64, u64)> for Count {
            fn process_element1(
                &mut self,
                _: &u64,
                _: (u64, String),
                _: &mut KeyedContext<u64, (u64, u64)>,
            ) -> Result<()> {
                Ok(())
            }
            fn process_element2(
                &mut self,
                user: &u64,
                _: (u64, u64),
                ctx: &mut KeyedContext<u64, (u64, u64)>,
            ) -> Result<()> {
                let n = ctx.value(&CLICKS).get()?.unwrap_or(0) + 1;
                ctx.value(&CLICKS).set(n)?;
                ctx.emit((*user, n))
            }
        }
        names
            .key_by(|n| n.0)
            .connect(&clicks.key_by(|c| c.0))
            .process_function(Count)
            .sink(sink);
        env.execute()?;
        let mut last: BTreeMap<u64, u64> = BTreeMap::new();
        for (user, n) in out.values() {
            let seen = last.entry(user).or_default();
            assert_eq!(
                n,
                *seen + 1,
                "counts of user {user} go up by one in one subtask"
            );
            *seen = n;
        }
        assert_eq!(last.len(), 50);
        assert!(last.values().all(|&n| n == 10), "p={parallelism}: {last:?}");
    }
    Ok(())
}

/// Fires a timer per key at the record's time; reports which input registered it.
#[derive(Clone)]
struct Timers;

impl KeyedCoProcessFunction<u64, (u64, i64), (u64, i64), String> for Timers {
    fn process_element1(
        &mut self,
        _: &u64,
        r: (u64, i64),
        ctx: &mut KeyedContext<u64, String>,
    ) -> Result<()> {
        ctx.register_event_time_timer(r.1);
        Ok(())
    }
    fn process_element2(
        &mut self,
        _: &u64,
        r: (u64, i64),
        ctx: &mut KeyedContext<u64, String>,
    ) -> Result<()> {
        ctx.register_event_time_timer(r.1);
        Ok(())
    }
    fn on_timer(
        &mut self,
        key: &u64,
        at: Timestamp,
        _: TimeDomain,
        ctx: &mut KeyedContext<u64, String>,
    ) -> Result<()> {
        let watermark = ctx.current_watermark();
        ctx.emit(format!("{key}@{at} (watermark {watermark})"))
    }
}

#[test]
fn timers_fire_on_the_minimum_watermark_of_both_inputs() -> Result<()> {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let (sink, out) = CollectSink::new();
    let strategy = || WatermarkStrategy::monotonous().with_timestamps(|r: &(u64, i64)| r.1);
    // The first input runs far ahead; the second is slow. A timer at 1 000 must wait for the
    // second input's watermark, which reaches 1 000 only with its record at 1 000.
    let fast =
        env.from_iter_with_watermarks(vec![(1, 1_000), (1, 50_000), (1, 90_000)], strategy());
    let slow = env.from_iter_with_watermarks(vec![(2, 500), (2, 1_000)], strategy());
    fast.key_by(|r| r.0)
        .connect(&slow.key_by(|r| r.0))
        .process_function(Timers)
        .sink(sink);
    env.execute()?;
    let fired = out.values();
    // No timer fired while the slow input held the watermark below it; at the end of both
    // inputs the final watermark fires the rest.
    for line in &fired {
        let (at, watermark) = line
            .split_once('@')
            .and_then(|(_, rest)| rest.split_once(" (watermark "))
            .map(|(at, wm)| {
                (
                    at.parse::<i64>().unwrap(),
                    wm.trim_end_matches(')').parse::<i64>().unwrap(),
                )
            })
            .unwrap();
        assert!(watermark >= at, "{line}");
    }
    assert_eq!(fired.len(), 5, "{fired:?}");
    Ok(())
}

/// Counts each input's records and says when each input ended.
#[derive(Clone, Default)]
struct Ends {
    seen: [u64; 2],
}

impl CoProcessFunction<u64, String, String> for Ends {
    fn process_element1(&mut self, _: u64, _: &mut ProcessContext<String>) -> Result<()> {
        self.seen[0] += 1;
        Ok(())
    }
    fn process_element2(&mut self, _: String, _: &mut ProcessContext<String>) -> Result<()> {
        self.seen[1] += 1;
        Ok(())
    }
    fn end_input(&mut self, input: usize, out: &mut Collector<'_, String>) -> Result<()> {
        out.emit(riffle::Record::untimed(format!(
            "input {input} ended after {} records",
            self.seen[input]
        )))
    }
    fn close(&mut self, out: &mut Collector<'_, String>) -> Result<()> {
        out.emit(riffle::Record::untimed(format!(
            "closed after {:?}",
            self.seen
        )))
    }
}

#[test]
fn each_input_ends_on_its_own_and_the_operator_closes_after_both() -> Result<()> {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let (sink, out) = CollectSink::new();
    let numbers = env.from_iter(0..1_000u64);
    let words = env.from_iter(vec!["a".to_string(), "b".to_string()]);
    numbers
        .connect(&words)
        .process_function(Ends::default())
        .sink(sink);
    env.execute()?;
    let mut lines = out.values();
    let closed = lines.pop().unwrap();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            "input 0 ended after 1000 records",
            "input 1 ended after 2 records"
        ]
    );
    assert_eq!(closed, "closed after [1000, 2]");
    Ok(())
}

#[test]
fn connect_keeps_each_inputs_partitioning() -> Result<()> {
    // A broadcast second input reaches every subtask; a rebalanced first input is spread.
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 3,
        ..EnvConfig::default()
    });
    let (sink, out) = CollectSink::new();
    let rules = env.from_iter(vec!["rule".to_string()]).set_parallelism(1);
    let events = env.from_iter(0..30u64).rebalance();
    events
        .connect(&rules.broadcast())
        .process_with(|_, _| Ok(()), |rule, ctx| ctx.emit(rule))
        .sink(sink);
    env.execute()?;
    assert_eq!(out.values(), vec!["rule"; 3]);
    Ok(())
}

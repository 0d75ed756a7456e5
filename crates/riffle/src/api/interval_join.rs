//! The interval join of two keyed streams: `a.key_by(f).interval_join(&b.key_by(g))
//! .between(lower, upper).process(..)`, as Flink's `KeyedStream.intervalJoin`.
//!
//! See [`IntervalJoinOperator`](crate::operators::IntervalJoinOperator) for its state and how
//! the watermark cleans it up, and `docs/joins.md` for when to use which join.

use std::hash::Hash;

use crate::api::KeyedStream;
use crate::api::stream::DataStream;
use crate::error::Result;
use crate::operators::{
    IntervalJoinOperator, IntervalJoinSpec, JoinContext, OutputTag, ProcessJoinFunction,
};
use crate::record::Data;

/// Two keyed streams to be joined by time interval; say how with
/// [`between`](IntervalJoin::between).
pub struct IntervalJoin<K, A, B> {
    first: KeyedStream<K, A>,
    second: KeyedStream<K, B>,
}

impl<K: Data + Hash + Eq, A: Data, B: Data> IntervalJoin<K, A, B> {
    pub(crate) fn new(first: KeyedStream<K, A>, second: KeyedStream<K, B>) -> Self {
        IntervalJoin { first, second }
    }

    /// Joins a left record (this stream's) with every right record (the other stream's) of the
    /// same key whose time is within `[left.ts + lower_ms, left.ts + upper_ms]`, both bounds
    /// inclusive (see [`lower_bound_exclusive`](IntervalJoined::lower_bound_exclusive)).
    /// Bounds are signed: `between(-5_000, 0)` joins the right records of the 5 s before each
    /// left record. A lower bound above the upper one fails the job at start.
    ///
    /// ```
    /// use riffle::{EnvConfig, StreamEnv, sink::CollectSink, time::WatermarkStrategy};
    ///
    /// // A click joins its impression when it comes within 10 minutes after it.
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, out) = CollectSink::new();
    /// let at = || WatermarkStrategy::monotonous().with_timestamps(|r: &(String, i64)| r.1);
    /// let impressions = env.from_iter_with_watermarks(vec![("ad1".to_string(), 0i64), ("ad2".into(), 0)], at());
    /// let clicks = env.from_iter_with_watermarks(vec![("ad1".to_string(), 60_000i64), ("ad2".into(), 700_000)], at());
    /// impressions
    ///     .key_by(|i| i.0.clone())
    ///     .interval_join(&clicks.key_by(|c| c.0.clone()))
    ///     .between(0, 600_000)
    ///     .process(|impression, click, ctx| ctx.emit(format!("{} clicked after {} ms", impression.0, click.1 - impression.1)))
    ///     .sink(sink);
    /// env.execute().unwrap();
    /// assert_eq!(out.values(), vec!["ad1 clicked after 60000 ms"]);
    /// ```
    pub fn between(&self, lower_ms: i64, upper_ms: i64) -> IntervalJoined<K, A, B> {
        IntervalJoined {
            first: self.first.clone(),
            second: self.second.clone(),
            lower: lower_ms,
            upper: upper_ms,
            lower_exclusive: false,
            upper_exclusive: false,
            left_late: None,
            right_late: None,
        }
    }
}

/// An interval join with its bounds: finish it with [`process`](IntervalJoined::process).
pub struct IntervalJoined<K, A, B> {
    first: KeyedStream<K, A>,
    second: KeyedStream<K, B>,
    lower: i64,
    upper: i64,
    lower_exclusive: bool,
    upper_exclusive: bool,
    left_late: Option<OutputTag<A>>,
    right_late: Option<OutputTag<B>>,
}

impl<K: Data + Hash + Eq, A: Data, B: Data> IntervalJoined<K, A, B> {
    /// Excludes the lower bound: `right.ts > left.ts + lower`.
    ///
    /// ```
    /// # use riffle::{EnvConfig, StreamEnv, sink::CollectSink, time::WatermarkStrategy};
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, out) = CollectSink::new();
    /// let at = || WatermarkStrategy::monotonous().with_timestamps(|r: &(u8, i64)| r.1);
    /// let left = env.from_iter_with_watermarks(vec![(1u8, 100i64)], at());
    /// let right = env.from_iter_with_watermarks(vec![(1u8, 100i64), (1, 101), (1, 110)], at());
    /// left.key_by(|r| r.0).interval_join(&right.key_by(|r| r.0))
    ///     .between(0, 10)
    ///     .lower_bound_exclusive()
    ///     .upper_bound_exclusive()
    ///     .process(|_, r, ctx| ctx.emit(r.1))
    ///     .sink(sink);
    /// env.execute().unwrap();
    /// assert_eq!(out.values(), vec![101]);
    /// ```
    pub fn lower_bound_exclusive(mut self) -> Self {
        self.lower_exclusive = true;
        self
    }

    /// Excludes the upper bound: `right.ts < left.ts + upper`.
    pub fn upper_bound_exclusive(mut self) -> Self {
        self.upper_exclusive = true;
        self
    }

    /// Sends left records that arrive late (their time below the watermark) to the side
    /// output `tag`, read with `get_side_output(&tag)` on the join's result. Without it they
    /// are dropped, counted in `late_records_dropped` and logged.
    ///
    /// ```
    /// use riffle::{OutputTag, StreamEnv};
    /// let env = StreamEnv::new();
    /// let late_orders = OutputTag::<(u64, i64)>::new("late-orders");
    /// let orders = env.from_iter(vec![(1u64, 5i64)]);
    /// let payments = env.from_iter(vec![(1u64, 7i64)]);
    /// let joined = orders.key_by(|o| o.0).interval_join(&payments.key_by(|p| p.0))
    ///     .between(0, 60_000)
    ///     .side_output_left_late(&late_orders)
    ///     .process(|o, p, ctx| ctx.emit((o.0, p.1)));
    /// let late = joined.get_side_output(&late_orders);
    /// ```
    pub fn side_output_left_late(mut self, tag: &OutputTag<A>) -> Self {
        self.left_late = Some(tag.clone());
        self
    }

    /// Sends right records that arrive late to the side output `tag` (see
    /// [`side_output_left_late`](IntervalJoined::side_output_left_late)).
    pub fn side_output_right_late(mut self, tag: &OutputTag<B>) -> Self {
        self.right_late = Some(tag.clone());
        self
    }

    /// The inclusive bounds and late outputs the operator runs with.
    fn spec(&self) -> IntervalJoinSpec<A, B> {
        IntervalJoinSpec {
            lower: self.lower.saturating_add(i64::from(self.lower_exclusive)),
            upper: self.upper.saturating_sub(i64::from(self.upper_exclusive)),
            left_late: self.left_late.clone(),
            right_late: self.right_late.clone(),
        }
    }

    /// Calls the closure `function(left, right, ctx)` for every joined pair; it emits through
    /// `ctx` (results carry `max(left.ts, right.ts)`). Its parameter types are inferred (see
    /// [`IntervalJoin::between`]). Each subtask gets its own clone.
    pub fn process<Out, F>(self, function: F) -> DataStream<Out>
    where
        Out: Data,
        F: FnMut(A, B, &mut JoinContext<'_, '_, Out>) -> Result<()> + Clone + Send + Sync + 'static,
    {
        self.process_function(function)
    }

    /// Calls a [`ProcessJoinFunction`] (a struct, with `open`) for every joined pair, as
    /// Flink's `process(ProcessJoinFunction)`; each subtask gets its own clone.
    pub fn process_function<Out, P>(self, function: P) -> DataStream<Out>
    where
        Out: Data,
        P: ProcessJoinFunction<A, B, Out> + Clone + Sync,
    {
        let spec = self.spec();
        if let Err(error) = spec.validate() {
            self.first.input().env.defer_error(error.to_string());
        }
        let connected = self.first.connect(&self.second);
        let key = connected.key();
        connected.add_keyed("IntervalJoin", move || {
            IntervalJoinOperator::new(key.clone(), spec.clone(), function.clone())
        })
    }
}

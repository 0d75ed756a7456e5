//! The interval join of two keyed streams (Flink's `IntervalJoinOperator`): a right record joins
//! every left record of the same key whose time is within a bounded interval around its own,
//! `right.ts ∈ [left.ts + lower, left.ts + upper]`.
//!
//! Each side's records wait in the key's state (a sorted buffer per side, in the job's state
//! backend), as long as a record of the other side can still join them: a left record until the
//! watermark passes `left.ts + upper`, a right record until it passes `right.ts - lower`. An
//! event-time timer per key and cleanup time removes them then, so state is bounded by the
//! interval and the watermark's lag, not by the input. A record whose time is below the
//! watermark when it arrives is late: it goes to its side's late output, or is dropped and
//! counted in `late_records_dropped` (and logged, rate-limited), as windows do.

use std::hash::Hash;
use std::marker::PhantomData;
use std::time::Duration;

use crate::checkpoint::{RestoreState, SnapshotWriter};
use crate::error::{Error, Result};
use crate::keys::KeyFn;
use crate::keys::KeyGroup;
use crate::operators::keyed::KeyedRuntime;
use crate::operators::{
    BuildOperator, Collector, OperatorContext, OutputTag, TwoInput, TwoInputOperator,
};
use crate::record::{Data, Either, EventTime, Record, Timestamp};
use crate::state::{TimeDomain, ValueStateDescriptor};
use crate::util::RateLimitedLog;

/// The function of an interval join, as Flink's `ProcessJoinFunction`: called once per pair of
/// a left and a right record of one key whose times are within the join's interval.
///
/// Closures `FnMut(A, B, &mut JoinContext<Out>) -> Result<()>` implement it (pass them to
/// [`IntervalJoin::process`](crate::api::IntervalJoin::process), which infers their types);
/// implement it on a struct for [`open`](ProcessJoinFunction::open) and pass the struct to
/// [`IntervalJoin::process_function`](crate::api::IntervalJoin::process_function).
///
/// ```
/// use riffle::Result;
/// use riffle::operators::{JoinContext, ProcessJoinFunction};
///
/// /// Pairs an order with its payment, with the time the payment took.
/// #[derive(Clone)]
/// struct Paid;
///
/// impl ProcessJoinFunction<(u64, i64), (u64, i64), String> for Paid {
///     fn process_element(&mut self, order: (u64, i64), payment: (u64, i64), ctx: &mut JoinContext<String>) -> Result<()> {
///         let took = ctx.right_timestamp() - ctx.left_timestamp();
///         ctx.emit(format!("order {} paid after {took} ms", order.0))
///     }
/// }
/// ```
pub trait ProcessJoinFunction<A, B, Out>: Send + 'static {
    /// Called once per parallel instance before the first record.
    fn open(&mut self, _ctx: &OperatorContext) -> Result<()> {
        Ok(())
    }

    /// Processes one joined pair: `left` from the first stream, `right` from the second.
    fn process_element(&mut self, left: A, right: B, ctx: &mut JoinContext<Out>) -> Result<()>;
}

impl<A, B, Out, F> ProcessJoinFunction<A, B, Out> for F
where
    F: FnMut(A, B, &mut JoinContext<Out>) -> Result<()> + Send + 'static,
{
    fn process_element(&mut self, left: A, right: B, ctx: &mut JoinContext<Out>) -> Result<()> {
        self(left, right, ctx)
    }
}

/// What a [`ProcessJoinFunction`] sees of a joined pair: both records' times, and where to emit.
/// Results carry the later of both times, `max(left.ts, right.ts)`.
///
/// ```
/// use riffle::{EnvConfig, StreamEnv, sink::CollectSink, time::WatermarkStrategy};
///
/// let env = StreamEnv::with_config(EnvConfig::deterministic());
/// let (sink, out) = CollectSink::new();
/// let times = || WatermarkStrategy::monotonous().with_timestamps(|r: &(u64, i64)| r.1);
/// let left = env.from_iter_with_watermarks(vec![(1u64, 1_000i64)], times());
/// let right = env.from_iter_with_watermarks(vec![(1u64, 1_500i64)], times());
/// left.key_by(|r| r.0)
///     .interval_join(&right.key_by(|r| r.0))
///     .between(0, 1_000)
///     .process(|_, _, ctx| {
///         let (l, r, at) = (ctx.left_timestamp(), ctx.right_timestamp(), ctx.timestamp());
///         ctx.emit((l, r, at))
///     })
///     .sink(sink);
/// env.execute().unwrap();
/// assert_eq!(out.values(), vec![(1_000, 1_500, 1_500)]);
/// ```
pub struct JoinContext<'c, 'o, Out> {
    out: &'c mut Collector<'o, Out>,
    left: Timestamp,
    right: Timestamp,
}

impl<Out: Data> JoinContext<'_, '_, Out> {
    /// The left record's event time.
    pub fn left_timestamp(&self) -> Timestamp {
        self.left
    }

    /// The right record's event time.
    pub fn right_timestamp(&self) -> Timestamp {
        self.right
    }

    /// The time of the joined result: the later of both records' times.
    pub fn timestamp(&self) -> Timestamp {
        self.left.max(self.right)
    }

    /// The operator's current event-time watermark.
    pub fn current_watermark(&self) -> Timestamp {
        self.out.current_watermark()
    }

    /// Emits a result with the joined timestamp, `max(left.ts, right.ts)`.
    pub fn emit(&mut self, value: Out) -> Result<()> {
        self.out
            .emit(Record::timed(value, EventTime::new(self.timestamp())))
    }

    /// Emits a result with another timestamp; `i64::MIN` is no event time and fails the job.
    pub fn emit_with_timestamp(&mut self, value: Out, timestamp: Timestamp) -> Result<()> {
        self.out.emit_value(value, timestamp)
    }

    /// Sends a value to a side output, with the joined timestamp; `false` if nothing in the job
    /// consumes that side output (then counted and dropped).
    pub fn side_output<S: Data>(&mut self, tag: &OutputTag<S>, value: S) -> Result<bool> {
        self.out
            .side_output(tag, Record::timed(value, EventTime::new(self.timestamp())))
    }
}

/// The interval of an interval join and where its late records go (what
/// [`IntervalJoined`](crate::api::IntervalJoined) builds; see [`IntervalJoinOperator`] for an
/// example). Bounds are inclusive: an exclusive lower bound `l` is the inclusive `l + 1`.
#[derive(Clone, Debug)]
pub struct IntervalJoinSpec<A, B> {
    /// Smallest `right.ts - left.ts` that joins (inclusive).
    pub lower: i64,
    /// Largest `right.ts - left.ts` that joins (inclusive).
    pub upper: i64,
    /// Where late left records go; counted and dropped when `None`.
    pub left_late: Option<OutputTag<A>>,
    /// Where late right records go; counted and dropped when `None`.
    pub right_late: Option<OutputTag<B>>,
}

impl<A, B> IntervalJoinSpec<A, B> {
    /// Joins when `right.ts - left.ts` is in `lower..=upper`; late records counted and dropped.
    pub fn new(lower: i64, upper: i64) -> Self {
        IntervalJoinSpec {
            lower,
            upper,
            left_late: None,
            right_late: None,
        }
    }

    /// The bounds, checked: `lower <= upper`.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.lower > self.upper {
            return Err(Error::config(
                "interval join bounds (between)",
                format!(
                    "the lower bound ({} ms) is above the upper bound ({} ms) once exclusive \
                     bounds are applied: no pair can join",
                    self.lower, self.upper
                ),
            ));
        }
        Ok(())
    }
}

/// One side's buffered records of a key with their event times, sorted by time (records of
/// equal time in arrival order): one allocation per key and side, cheap to copy and to scan.
type Buffer<T> = Vec<(Timestamp, T)>;

/// The records of `buffer` whose time is in `from..=to`.
fn in_range<T>(buffer: &Buffer<T>, from: Timestamp, to: Timestamp) -> &[(Timestamp, T)] {
    let start = buffer.partition_point(|(ts, _)| *ts < from);
    let end = buffer.partition_point(|(ts, _)| *ts <= to);
    &buffer[start..end.max(start)]
}

/// Adds a record at `ts` after the records of time `<= ts`.
fn insert<T>(buffer: &mut Buffer<T>, ts: Timestamp, value: T) {
    let at = buffer.partition_point(|(t, _)| *t <= ts);
    buffer.insert(at, (ts, value));
}

/// Drops the records whose cleanup time (by `reach`) is at or before `time`; whether any was.
fn expire<T>(buffer: &mut Buffer<T>, reach: i128, time: Timestamp) -> bool {
    let n = buffer.partition_point(|(ts, _)| cleanup_time(*ts, reach) <= time);
    buffer.drain(..n);
    n > 0
}

/// The `[from, to]` range of `ts + lower ..= ts + upper` within the timestamp range, if any.
fn window(ts: Timestamp, lower: i128, upper: i128) -> Option<(Timestamp, Timestamp)> {
    let clamp = |x: i128| x.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    let (from, to) = (i128::from(ts) + lower, i128::from(ts) + upper);
    if to < i128::from(i64::MIN) || from > i128::from(i64::MAX) || from > to {
        return None;
    }
    Some((clamp(from), clamp(to)))
}

/// When a record at `ts` that can join the other side's records up to `ts + reach` is no longer
/// needed: once the watermark passes `ts + reach`, i.e. reaches `ts + reach + 1` (at most the
/// final watermark, `i64::MAX`).
fn cleanup_time(ts: Timestamp, reach: i128) -> Timestamp {
    (i128::from(ts) + reach + 1).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// The operator of [`IntervalJoin`](crate::api::IntervalJoin): reads [`Either`] (`Left` from
/// the first stream, `Right` from the second), keyed by `key`. Use it directly to test a join
/// function in the [`OperatorHarness`](crate::testing::OperatorHarness):
///
/// ```
/// use std::sync::Arc;
/// use riffle::Either;
/// use riffle::operators::{IntervalJoinOperator, IntervalJoinSpec, JoinContext};
/// use riffle::testing::OperatorHarness;
///
/// type In = Either<(u64, i64), (u64, i64)>;
/// let key = Arc::new(|e: &In| match e { Either::Left(l) => l.0, Either::Right(r) => r.0 });
/// let join = IntervalJoinOperator::new(
///     key,
///     IntervalJoinSpec::new(-1_000, 1_000),
///     |l: (u64, i64), r: (u64, i64), ctx: &mut JoinContext<i64>| ctx.emit(r.1 - l.1),
/// );
/// let mut h = OperatorHarness::builder(join).build().unwrap();
/// h.process(Either::Left((7, 5_000)), 5_000).unwrap();
/// h.process(Either::Right((7, 5_400)), 5_400).unwrap();
/// h.process(Either::Right((7, 6_001)), 6_001).unwrap(); // 1 001 ms after: no
/// h.watermark(6_001).unwrap(); // the left record can no longer join: cleaned up
/// assert_eq!(h.take_values(), vec![400]);
/// ```
pub struct IntervalJoinOperator<K, A, B, Out, P> {
    key: KeyFn<K, Either<A, B>>,
    spec: IntervalJoinSpec<A, B>,
    function: P,
    _out: PhantomData<fn() -> Out>,
}

/// An [`IntervalJoinOperator`] built on its subtask: the buffers of both sides in its keyed
/// state.
pub struct OpenIntervalJoin<K, A, B, Out, P> {
    key: KeyFn<K, Either<A, B>>,
    spec: IntervalJoinSpec<A, B>,
    function: P,
    runtime: KeyedRuntime<K>,
    left: ValueStateDescriptor<Buffer<A>>,
    right: ValueStateDescriptor<Buffer<B>>,
    late_log: RateLimitedLog,
    _out: PhantomData<fn() -> Out>,
}

impl<K, A, B, Out, P> IntervalJoinOperator<K, A, B, Out, P> {
    /// The operator joining by `spec`, calling `function` per joined pair.
    pub fn new(key: KeyFn<K, Either<A, B>>, spec: IntervalJoinSpec<A, B>, function: P) -> Self {
        IntervalJoinOperator {
            key,
            spec,
            function,
            _out: PhantomData,
        }
    }
}

impl<K, A, B, Out, P> BuildOperator for IntervalJoinOperator<K, A, B, Out, P>
where
    K: Data + Hash + Eq,
    A: Data,
    B: Data,
    Out: Data,
    P: ProcessJoinFunction<A, B, Out>,
{
    type Operator = TwoInput<OpenIntervalJoin<K, A, B, Out, P>>;

    fn build(self, ctx: &OperatorContext) -> Result<Self::Operator> {
        self.spec.validate()?;
        Ok(TwoInput::new(OpenIntervalJoin {
            key: self.key,
            spec: self.spec,
            function: self.function,
            runtime: KeyedRuntime::new(ctx),
            left: ValueStateDescriptor::new("interval-join-left"),
            right: ValueStateDescriptor::new("interval-join-right"),
            late_log: RateLimitedLog::new(Duration::from_secs(10)),
            _out: PhantomData,
        }))
    }
}

impl<K, A, B, Out, P> OpenIntervalJoin<K, A, B, Out, P>
where
    K: Data + Hash + Eq,
    A: Data,
    B: Data,
    Out: Data,
    P: ProcessJoinFunction<A, B, Out>,
{
    /// The key and key group of a record of either side, and its event time (a record without
    /// one is an error: the join's windows are in event time).
    fn locate(&self, record: &Record<Either<A, B>>) -> Result<(K, KeyGroup, Timestamp)> {
        let Some(ts) = record.timestamp() else {
            return Err(Error::user(
                "an interval join received a record without a timestamp: give both sources \
                 a WatermarkStrategy with timestamps",
            ));
        };
        let key = (self.key)(&record.value);
        let key_group = self.runtime.key_group(&key)?;
        Ok((key, key_group, ts))
    }

    /// Joins (or sends aside, when behind the watermark) a run of one side's records, each
    /// tagged with its side for the join's key function.
    fn side(
        &mut self,
        batch: impl Iterator<Item = Record<Either<A, B>>>,
        out: &mut Collector<'_, Out>,
    ) -> Result<()> {
        for record in batch {
            let (key, key_group, ts) = self.locate(&record)?;
            let late = ts < out.current_watermark();
            let ctx = &self.runtime.ctx;
            match record.value {
                Either::Left(a) if late => {
                    let record = Record::timed(a, record.timestamp);
                    let tag = self.spec.left_late.as_ref();
                    Self::late(tag, record, ctx, &mut self.late_log, out)?;
                }
                Either::Right(b) if late => {
                    let record = Record::timed(b, record.timestamp);
                    let tag = self.spec.right_late.as_ref();
                    Self::late(tag, record, ctx, &mut self.late_log, out)?;
                }
                Either::Left(a) => self.left(&key, key_group, a, ts, out)?,
                Either::Right(b) => self.right(&key, key_group, b, ts, out)?,
            }
        }
        Ok(())
    }

    /// A left record: joins the right records buffered for `key`, then waits for later ones.
    fn left(
        &mut self,
        key: &K,
        key_group: KeyGroup,
        value: A,
        ts: Timestamp,
        out: &mut Collector<'_, Out>,
    ) -> Result<()> {
        let runtime = &mut self.runtime;
        let (lower, upper) = (i128::from(self.spec.lower), i128::from(self.spec.upper));
        if let Some((from, to)) = window(ts, lower, upper)
            && let Some(rights) = runtime.state.value(&self.right, key_group, key).get()?
        {
            for (right_ts, right) in in_range(&rights, from, to) {
                let mut ctx = JoinContext {
                    out,
                    left: ts,
                    right: *right_ts,
                };
                self.function
                    .process_element(value.clone(), right.clone(), &mut ctx)?;
            }
        }
        // Right records still to come are at or after the watermark: keep this one only if one
        // of them can join it.
        if i128::from(ts) + upper < i128::from(out.current_watermark()) {
            return Ok(());
        }
        let mut buffer = runtime.state.value(&self.left, key_group, key);
        let mut lefts = buffer.get()?.unwrap_or_default();
        insert(&mut lefts, ts, value);
        buffer.set(lefts)?;
        let at = cleanup_time(ts, upper);
        runtime
            .timers
            .register(TimeDomain::EventTime, at, key.clone());
        Ok(())
    }

    /// A right record: joins the left records buffered for `key`, then waits for later ones.
    fn right(
        &mut self,
        key: &K,
        key_group: KeyGroup,
        value: B,
        ts: Timestamp,
        out: &mut Collector<'_, Out>,
    ) -> Result<()> {
        let runtime = &mut self.runtime;
        // left.ts ∈ [right.ts - upper, right.ts - lower].
        let (lower, upper) = (i128::from(self.spec.lower), i128::from(self.spec.upper));
        if let Some((from, to)) = window(ts, -upper, -lower)
            && let Some(lefts) = runtime.state.value(&self.left, key_group, key).get()?
        {
            for (left_ts, left) in in_range(&lefts, from, to) {
                let mut ctx = JoinContext {
                    out,
                    left: *left_ts,
                    right: ts,
                };
                self.function
                    .process_element(left.clone(), value.clone(), &mut ctx)?;
            }
        }
        if i128::from(ts) - lower < i128::from(out.current_watermark()) {
            return Ok(());
        }
        let mut buffer = runtime.state.value(&self.right, key_group, key);
        let mut rights = buffer.get()?.unwrap_or_default();
        insert(&mut rights, ts, value);
        buffer.set(rights)?;
        let at = cleanup_time(ts, -lower);
        runtime
            .timers
            .register(TimeDomain::EventTime, at, key.clone());
        Ok(())
    }

    /// A late record: to its side's late output, or counted as dropped and logged.
    fn late<S: Data>(
        tag: Option<&OutputTag<S>>,
        record: Record<S>,
        ctx: &OperatorContext,
        log: &mut RateLimitedLog,
        out: &mut Collector<'_, Out>,
    ) -> Result<()> {
        let timestamp = record.timestamp();
        if let Some(tag) = tag
            && out.side_output(tag, record)?
        {
            ctx.metrics.add_late_side_output(1);
            return Ok(());
        }
        ctx.metrics.add_late_dropped(1);
        if let Some(suppressed) = log.should_log() {
            tracing::warn!(
                operator = %ctx.name,
                timestamp,
                watermark = out.current_watermark(),
                suppressed,
                "late record dropped by an interval join (counted in late_records_dropped); \
                 declare side_output_left_late / side_output_right_late to keep late records"
            );
        }
        Ok(())
    }

    /// The cleanup timer of `key` at `time`: drops the records no later record can join.
    fn clean(&mut self, key: &K, time: Timestamp) -> Result<()> {
        let runtime = &mut self.runtime;
        let key_group = runtime.key_group(key)?;
        let (lower, upper) = (i128::from(self.spec.lower), i128::from(self.spec.upper));
        let mut lefts = runtime.state.value(&self.left, key_group, key);
        if let Some(mut buffer) = lefts.get()?
            && expire(&mut buffer, upper, time)
        {
            if buffer.is_empty() {
                lefts.clear()?;
            } else {
                lefts.set(buffer)?;
            }
        }
        let mut rights = runtime.state.value(&self.right, key_group, key);
        if let Some(mut buffer) = rights.get()?
            && expire(&mut buffer, -lower, time)
        {
            if buffer.is_empty() {
                rights.clear()?;
            } else {
                rights.set(buffer)?;
            }
        }
        Ok(())
    }
}

impl<K, A, B, Out, P> TwoInputOperator for OpenIntervalJoin<K, A, B, Out, P>
where
    K: Data + Hash + Eq,
    A: Data,
    B: Data,
    Out: Data,
    P: ProcessJoinFunction<A, B, Out>,
{
    type In1 = A;
    type In2 = B;
    type Out = Out;

    fn open(&mut self, ctx: &OperatorContext) -> Result<()> {
        self.function.open(ctx)
    }

    fn process1(&mut self, batch: &mut Vec<Record<A>>, out: &mut Collector<'_, Out>) -> Result<()> {
        let run = batch
            .drain(..)
            .map(|r| Record::timed(Either::Left(r.value), r.timestamp));
        self.side(run, out)
    }

    fn process2(&mut self, batch: &mut Vec<Record<B>>, out: &mut Collector<'_, Out>) -> Result<()> {
        let run = batch
            .drain(..)
            .map(|r| Record::timed(Either::Right(r.value), r.timestamp));
        self.side(run, out)
    }

    fn end_of_batch(&mut self, _out: &mut Collector<'_, Out>) -> Result<()> {
        self.runtime.report_size(0, 0);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Timestamp, _out: &mut Collector<'_, Out>) -> Result<()> {
        loop {
            let runtime = &mut self.runtime;
            let Some((time, keys)) = runtime
                .timers
                .pop_earliest_due(TimeDomain::EventTime, watermark)
            else {
                break;
            };
            for key in keys {
                self.clean(&key, time)?;
            }
        }
        self.runtime.report_size(0, 0);
        Ok(())
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64, snapshot: &mut SnapshotWriter) -> Result<()> {
        self.runtime.snapshot(snapshot)
    }

    fn restore_state(&mut self, state: &RestoreState) -> Result<()> {
        self.runtime.restore(state)
    }

    fn on_tick(&mut self, _out: &mut Collector<'_, Out>) -> Result<()> {
        let runtime = &mut self.runtime;
        runtime.state.sweep_expired();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_stay_within_the_timestamp_range() {
        assert_eq!(window(10, -5, 5), Some((5, 15)));
        assert_eq!(window(i64::MAX - 1, 0, 10), Some((i64::MAX - 1, i64::MAX)));
        assert_eq!(window(i64::MIN + 1, -10, 0), Some((i64::MIN, i64::MIN + 1)));
        assert_eq!(window(i64::MAX, 1, 2), None);
        assert_eq!(window(0, 3, 2), None);
    }

    #[test]
    fn buffers_stay_sorted_and_scan_by_time() {
        let mut buffer: Buffer<char> = Vec::new();
        for (ts, c) in [(5, 'a'), (3, 'b'), (5, 'c'), (9, 'd'), (1, 'e')] {
            insert(&mut buffer, ts, c);
        }
        assert_eq!(
            buffer,
            vec![(1, 'e'), (3, 'b'), (5, 'a'), (5, 'c'), (9, 'd')]
        );
        assert_eq!(in_range(&buffer, 3, 5), &buffer[1..4]);
        assert!(in_range(&buffer, 6, 8).is_empty());
        // Kept until the watermark passes ts + 2 (reaches ts + 3): at 7, those at 1 and 3 go.
        assert!(expire(&mut buffer, 2, 7));
        assert_eq!(buffer, vec![(5, 'a'), (5, 'c'), (9, 'd')]);
        assert!(expire(&mut buffer, 2, 8));
        assert_eq!(buffer, vec![(9, 'd')]);
        assert!(!expire(&mut buffer, 2, 11));
    }

    #[test]
    fn records_are_kept_until_the_watermark_passes_their_reach() {
        assert_eq!(cleanup_time(100, 50), 151);
        assert_eq!(cleanup_time(100, -200), -99);
        assert_eq!(cleanup_time(i64::MAX - 3, 10), i64::MAX);
        assert_eq!(cleanup_time(5, -i128::from(i64::MIN)), i64::MAX);
    }
}

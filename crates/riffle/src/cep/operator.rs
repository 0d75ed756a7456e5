//! The operator matching a pattern on a keyed stream, and [`PatternStream`], what
//! [`KeyedStream::pattern`] declares.
//!
//! In event time (the default) events wait until the watermark passes them, then are matched in
//! time order (events of equal time in arrival order). They wait in the operator's queue, ordered
//! by time, which the watermark drains together with the event-time timers of open partial
//! matches' `within` deadlines: an event before a timer of a later time. At a checkpoint the
//! queue moves into the keys' state, each event with a timer at its time plus one, so that what
//! waits is checkpointed, restored and rescaled with its key (and matched in the same order). An event behind the watermark when it arrives is late: it goes to the late side
//! output, or is dropped and counted in `late_records_dropped`. In processing time events are
//! matched as they arrive, and `within` is measured on the clock.

use std::collections::BTreeMap;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::DataStream;
use crate::api::KeyedStream;
use crate::cep::nfa::{Emitted, KeyNfa, Match, Matcher};
use crate::cep::pattern::Pattern;
use crate::checkpoint::{RestoreState, SnapshotWriter};
use crate::error::{Error, Result};
use crate::keys::KeyFn;
use crate::operators::keyed::KeyedRuntime;
use crate::operators::{BuildOperator, Collector, Operator, OperatorContext, OutputTag};
use crate::record::{Data, EventTime, Record, Timestamp};
use crate::state::{TimeDomain, ValueStateDescriptor};
use crate::util::RateLimitedLog;

/// What to do with each match (and each timed-out partial match), as FlinkCEP's
/// `PatternProcessFunction` with its `TimedOutPartialMatchHandler`.
///
/// Closures `FnMut(&K, Match<T>, &mut PatternContext<T, Out>) -> Result<()>` implement it; a
/// struct implementing it can also handle timeouts itself.
///
/// ```
/// use riffle::Result;
/// use riffle::cep::{Match, PatternContext, PatternProcessFunction};
///
/// /// Alerts on a match; counts the partial matches that timed out instead of keeping them.
/// #[derive(Clone, Default)]
/// struct Alerts { timed_out: u64 }
///
/// impl PatternProcessFunction<u64, (u64, i64), String> for Alerts {
///     fn process_match(&mut self, card: &u64, m: Match<(u64, i64)>, ctx: &mut PatternContext<(u64, i64), String>) -> Result<()> {
///         ctx.emit(format!("card {card}: {} events", m.len()))
///     }
///     fn process_timed_out(&mut self, _: &u64, _: Match<(u64, i64)>, _: &mut PatternContext<(u64, i64), String>) -> Result<()> {
///         self.timed_out += 1;
///         Ok(())
///     }
/// }
/// ```
pub trait PatternProcessFunction<K, T: Data, Out: Data>: Send + 'static {
    /// Called once per parallel instance before the first event.
    fn open(&mut self, _ctx: &OperatorContext) -> Result<()> {
        Ok(())
    }

    /// Called for each match of key `key`.
    fn process_match(
        &mut self,
        key: &K,
        matched: Match<T>,
        ctx: &mut PatternContext<T, Out>,
    ) -> Result<()>;

    /// Called for each partial match that could not complete within the pattern's `within`
    /// (one that was emitted as a match is not). By default it goes to the side output given
    /// to [`PatternStream::side_output_timed_out`], if any.
    fn process_timed_out(
        &mut self,
        _key: &K,
        partial: Match<T>,
        ctx: &mut PatternContext<T, Out>,
    ) -> Result<()> {
        ctx.send_timed_out(partial)
    }
}

impl<K, T: Data, Out: Data, F> PatternProcessFunction<K, T, Out> for F
where
    F: FnMut(&K, Match<T>, &mut PatternContext<T, Out>) -> Result<()> + Send + 'static,
{
    fn process_match(
        &mut self,
        key: &K,
        matched: Match<T>,
        ctx: &mut PatternContext<T, Out>,
    ) -> Result<()> {
        self(key, matched, ctx)
    }
}

/// The function [`PatternStream::select`] runs: one output per match.
#[derive(Clone)]
pub struct Select<F>(F);

impl<K, T, Out, F> PatternProcessFunction<K, T, Out> for Select<F>
where
    F: FnMut(Match<T>) -> Out + Send + 'static,
    T: Data,
    Out: Data,
{
    fn process_match(
        &mut self,
        _key: &K,
        matched: Match<T>,
        ctx: &mut PatternContext<T, Out>,
    ) -> Result<()> {
        let value = (self.0)(matched);
        ctx.emit(value)
    }
}

/// What a [`PatternProcessFunction`] sees: the time of the match and where to emit.
pub struct PatternContext<'c, 'o, T, Out> {
    out: &'c mut Collector<'o, Out>,
    timestamp: Option<EventTime>,
    timed_out: Option<&'c OutputTag<Match<T>>>,
}

impl<T: Data, Out: Data> PatternContext<'_, '_, T, Out> {
    /// The time of the match: its last event's time, or for a timeout (and a match ending in
    /// `not_followed_by`) the moment `within` passed. `None` in processing time.
    pub fn timestamp(&self) -> Option<Timestamp> {
        self.timestamp.map(EventTime::millis)
    }

    /// The operator's current event-time watermark.
    pub fn current_watermark(&self) -> Timestamp {
        self.out.current_watermark()
    }

    /// Emits a value with the match's time.
    pub fn emit(&mut self, value: Out) -> Result<()> {
        self.out.emit(Record::timed(value, self.timestamp))
    }

    /// Sends a value to a side output; `false` if the job does not consume that side output.
    pub fn side_output<S: Data>(&mut self, tag: &OutputTag<S>, value: S) -> Result<bool> {
        self.out
            .side_output(tag, Record::timed(value, self.timestamp))
    }

    /// Sends a timed-out partial match to the side output given to
    /// [`PatternStream::side_output_timed_out`]; dropped if none was.
    pub fn send_timed_out(&mut self, partial: Match<T>) -> Result<()> {
        if let Some(tag) = self.timed_out {
            self.out
                .side_output(tag, Record::timed(partial, self.timestamp))?;
        }
        Ok(())
    }
}

/// A keyed stream matched against a pattern: [`KeyedStream::pattern`] makes it, `select` or
/// `process` turns its matches into a stream.
///
/// ```
/// use std::time::Duration;
/// use riffle::{EnvConfig, OutputTag, StreamEnv, cep::{Match, Pattern}, sink::CollectSink, time::WatermarkStrategy};
///
/// // (card, amount, time)
/// type Txn = (u64, f64, i64);
/// let env = StreamEnv::with_config(EnvConfig::deterministic());
/// let (sink, alerts) = CollectSink::new();
/// let txns = vec![(1u64, 0.5, 1_000i64), (2, 0.2, 1_000), (2, 40.0, 2_000), (1, 900.0, 20_000)];
/// let timed_out = OutputTag::<Match<Txn>>::new("timed-out");
/// let matches = env
///     .from_iter_with_watermarks(txns, WatermarkStrategy::monotonous().with_timestamps(|t: &Txn| t.2))
///     .key_by(|t| t.0)
///     .pattern(
///         Pattern::begin("small").where_(|t: &Txn| t.1 < 1.0)
///             .followed_by("large").where_(|t: &Txn| t.1 > 500.0)
///             .within(Duration::from_secs(60)),
///     )
///     .side_output_timed_out(&timed_out)
///     .select(|m: Match<Txn>| (m.first("small").unwrap().0, m.first("large").unwrap().1));
/// matches.sink(sink);
/// let (timeouts, partials) = CollectSink::new();
/// matches.get_side_output(&timed_out).sink(timeouts);
/// env.execute().unwrap();
/// assert_eq!(alerts.values(), vec![(1, 900.0)]);
/// assert_eq!(partials.values()[0].first("small").unwrap().0, 2); // card 2 never had a large one
/// ```
pub struct PatternStream<K, T> {
    keyed: KeyedStream<K, T>,
    pattern: Pattern<T>,
    options: PatternOptions<T>,
}

/// Where late events and timed-out partial matches go, and in which time a pattern matches.
///
/// ```
/// use riffle::{OutputTag, cep::{Match, PatternOptions}};
///
/// let late = OutputTag::<(u64, i64)>::new("late");
/// let expired = OutputTag::<Match<(u64, i64)>>::new("expired");
/// let options = PatternOptions::default().side_output_late(&late).side_output_timed_out(&expired);
/// ```
pub struct PatternOptions<T> {
    late: Option<OutputTag<T>>,
    timed_out: Option<OutputTag<Match<T>>>,
    processing_time: bool,
}

impl<T> Default for PatternOptions<T> {
    fn default() -> Self {
        PatternOptions {
            late: None,
            timed_out: None,
            processing_time: false,
        }
    }
}

impl<T> Clone for PatternOptions<T> {
    fn clone(&self) -> Self {
        PatternOptions {
            late: self.late.clone(),
            timed_out: self.timed_out.clone(),
            processing_time: self.processing_time,
        }
    }
}

impl<T> PatternOptions<T> {
    /// Events behind the watermark when they arrive go to side output `tag` instead of being
    /// dropped (and counted).
    pub fn side_output_late(mut self, tag: &OutputTag<T>) -> Self {
        self.late = Some(tag.clone());
        self
    }

    /// Partial matches that could not complete within the pattern's `within` go to side
    /// output `tag` (the "expected event did not arrive in time" alerts).
    pub fn side_output_timed_out(mut self, tag: &OutputTag<Match<T>>) -> Self {
        self.timed_out = Some(tag.clone());
        self
    }

    /// Events are matched in arrival order as they arrive, `within` measured on the
    /// processing clock (no timestamps or watermarks needed).
    pub fn in_processing_time(mut self) -> Self {
        self.processing_time = true;
        self
    }
}

impl<K: Data + Hash + Eq, T: Data> KeyedStream<K, T> {
    /// Matches each key's events against `pattern` (FlinkCEP's `CEP.pattern`), in event time:
    /// the stream needs timestamps and watermarks, unless
    /// [`in_processing_time`](PatternStream::in_processing_time) is asked for. A pattern that
    /// cannot match fails the job at start, naming the stage.
    pub fn pattern(&self, pattern: Pattern<T>) -> PatternStream<K, T> {
        PatternStream {
            keyed: self.clone(),
            pattern,
            options: PatternOptions::default(),
        }
    }
}

impl<K: Data + Hash + Eq, T: Data> PatternStream<K, T> {
    /// Events behind the watermark when they arrive go to this side output (read it with
    /// `get_side_output(&tag)` on the result) instead of being dropped.
    pub fn side_output_late(mut self, tag: &OutputTag<T>) -> Self {
        self.options = self.options.side_output_late(tag);
        self
    }

    /// Partial matches that could not complete within the pattern's `within` go to this side
    /// output (the "expected event did not arrive in time" alerts).
    pub fn side_output_timed_out(mut self, tag: &OutputTag<Match<T>>) -> Self {
        self.options = self.options.side_output_timed_out(tag);
        self
    }

    /// Matches events in arrival order as they arrive, measuring `within` on the processing
    /// clock (no timestamps or watermarks needed).
    pub fn in_processing_time(mut self) -> Self {
        self.options = self.options.in_processing_time();
        self
    }

    /// One output per match, made by `select` (FlinkCEP's `PatternSelectFunction`).
    pub fn select<Out, F>(self, select: F) -> DataStream<Out>
    where
        Out: Data,
        F: FnMut(Match<T>) -> Out + Clone + Send + Sync + 'static,
    {
        self.process(Select(select))
    }

    /// Runs `function` on every match and timed-out partial match.
    pub fn process<Out, P>(self, function: P) -> DataStream<Out>
    where
        Out: Data,
        P: PatternProcessFunction<K, T, Out> + Clone + Sync,
    {
        let matcher = match self.pattern.validate() {
            Ok(()) => Some(Arc::new(Matcher::new(&self.pattern))),
            Err(e) => {
                self.keyed.defer_error(e.to_string());
                None
            }
        };
        let key = self.keyed.key_fn();
        let options = self.options;
        let described = self.pattern.describe();
        let stream = self.keyed.add_keyed("Pattern", move || CepOperator {
            key: key.clone(),
            matcher: matcher.clone(),
            function: function.clone(),
            options: options.clone(),
            _out: PhantomData,
        });
        stream.with_setting("pattern", described)
    }
}

/// The operator matching a pattern per key, as declared; built per subtask into an
/// [`OpenCep`].
pub struct CepOperator<K, T, Out, P> {
    key: KeyFn<K, T>,
    matcher: Option<Arc<Matcher<T>>>,
    function: P,
    options: PatternOptions<T>,
    _out: PhantomData<fn() -> Out>,
}

/// A [`CepOperator`] on its subtask: each key's events and partial matches in its keyed state.
pub struct OpenCep<K, T, Out, P> {
    key: KeyFn<K, T>,
    matcher: Arc<Matcher<T>>,
    function: P,
    options: PatternOptions<T>,
    runtime: KeyedRuntime<K>,
    state: ValueStateDescriptor<KeyNfa<T>>,
    /// Events in event time waiting for the watermark, by time and arrival, with their keys.
    queue: BTreeMap<(Timestamp, u64), (K, T)>,
    arrivals: u64,
    late_log: RateLimitedLog,
    _out: PhantomData<fn() -> Out>,
}

impl<K, T, Out, P> CepOperator<K, T, Out, P>
where
    K: Data + Hash + Eq,
    T: Data,
    Out: Data,
    P: PatternProcessFunction<K, T, Out>,
{
    /// The operator matching `pattern` on records keyed by `key` and handing matches to
    /// `function`, for tests with [`OperatorHarness`](crate::testing) (jobs declare it with
    /// [`KeyedStream::pattern`]). Fails if the pattern cannot be matched.
    pub fn new(
        key: impl Fn(&T) -> K + Send + Sync + 'static,
        pattern: &Pattern<T>,
        function: P,
    ) -> Result<Self> {
        pattern.validate()?;
        Ok(CepOperator {
            key: Arc::new(key),
            matcher: Some(Arc::new(Matcher::new(pattern))),
            function,
            options: PatternOptions::default(),
            _out: PhantomData,
        })
    }

    /// Where late events and timed-out partial matches go, and in which time it matches.
    pub fn with_options(mut self, options: PatternOptions<T>) -> Self {
        self.options = options;
        self
    }
}

impl<K, T, Out, P> BuildOperator for CepOperator<K, T, Out, P>
where
    K: Data + Hash + Eq,
    T: Data,
    Out: Data,
    P: PatternProcessFunction<K, T, Out>,
{
    type Operator = OpenCep<K, T, Out, P>;

    fn build(self, ctx: &OperatorContext) -> Result<Self::Operator> {
        let Some(matcher) = self.matcher else {
            return Err(Error::config("pattern", "the pattern cannot be matched"));
        };
        Ok(OpenCep {
            key: self.key,
            matcher,
            function: self.function,
            options: self.options,
            runtime: KeyedRuntime::new(ctx),
            state: ValueStateDescriptor::new("cep-nfa"),
            queue: BTreeMap::new(),
            arrivals: 0,
            late_log: RateLimitedLog::new(Duration::from_secs(10)),
            _out: PhantomData,
        })
    }
}

impl<K, T, Out, P> OpenCep<K, T, Out, P>
where
    K: Data + Hash + Eq,
    T: Data,
    Out: Data,
    P: PatternProcessFunction<K, T, Out>,
{
    /// Changes `key`'s matching state with `change`, then hands what it emitted to the
    /// function and sets the timer of the next deadline.
    fn with_nfa(
        &mut self,
        key: &K,
        out: &mut Collector<'_, Out>,
        change: impl FnOnce(&Matcher<T>, &mut KeyNfa<T>, &mut Emitted<T>),
    ) -> Result<()> {
        let runtime = &mut self.runtime;
        let key_group = runtime.key_group(key)?;
        let matcher = &*self.matcher;
        let mut emitted = Emitted::default();
        let mut state = runtime.state.value(&self.state, key_group, key);
        // A deadline (or the hold of matches) the key had before the change has its timer.
        let (empty, deadline, holds) = state.modify(KeyNfa::default, |nfa| {
            let had = (nfa.next_deadline(matcher.within()), nfa.holds_matches());
            change(matcher, nfa, &mut emitted);
            let deadline = nfa.next_deadline(matcher.within());
            let holds = nfa.holds_matches();
            (
                nfa.is_empty(),
                deadline.filter(|_| deadline != had.0),
                holds && !had.1,
            )
        })?;
        if empty {
            state.clear()?;
        }
        let domain = if self.options.processing_time {
            TimeDomain::ProcessingTime
        } else {
            TimeDomain::EventTime
        };
        if let Some(deadline) = deadline {
            runtime.timers.register(domain, deadline, key.clone());
        }
        if holds {
            // Matches held back for partial matches that may never end come out at the end of
            // the input (its watermark, in processing time too).
            runtime
                .timers
                .register(TimeDomain::EventTime, Timestamp::MAX, key.clone());
        }
        let time = |t: Timestamp| {
            if self.options.processing_time {
                None
            } else {
                EventTime::new(t)
            }
        };
        for (at, matched) in emitted.matches {
            let mut ctx = PatternContext {
                out,
                timestamp: time(at),
                timed_out: self.options.timed_out.as_ref(),
            };
            self.function.process_match(key, matched, &mut ctx)?;
        }
        for (at, partial) in emitted.timed_out {
            let mut ctx = PatternContext {
                out,
                timestamp: time(at),
                timed_out: self.options.timed_out.as_ref(),
            };
            self.function.process_timed_out(key, partial, &mut ctx)?;
        }
        Ok(())
    }

    /// A late event: to the late output, or counted as dropped and logged.
    fn late(&mut self, record: Record<T>, out: &mut Collector<'_, Out>) -> Result<()> {
        let ctx = &self.runtime.ctx;
        let timestamp = record.timestamp();
        if let Some(tag) = &self.options.late
            && out.side_output(tag, record)?
        {
            ctx.metrics.add_late_side_output(1);
            return Ok(());
        }
        ctx.metrics.add_late_dropped(1);
        if let Some(suppressed) = self.late_log.should_log() {
            tracing::warn!(
                operator = %ctx.name,
                timestamp,
                watermark = out.current_watermark(),
                suppressed,
                "late event dropped by a pattern (counted in late_records_dropped); \
                 declare side_output_late to keep late events"
            );
        }
        Ok(())
    }

    /// Fires the timers at or before `time`, earliest first. An event-time timer matches the
    /// key's events in its state before its time (those a checkpoint moved there), in time
    /// order, then ends the partial matches whose `within` has passed.
    fn fire(
        &mut self,
        domain: TimeDomain,
        time: Timestamp,
        out: &mut Collector<'_, Out>,
    ) -> Result<()> {
        while let Some((timestamp, keys)) = self.runtime.timers.pop_earliest_due(domain, time) {
            self.fire_keys(timestamp, keys, out)?;
        }
        Ok(())
    }

    fn fire_keys(
        &mut self,
        timestamp: Timestamp,
        keys: Vec<K>,
        out: &mut Collector<'_, Out>,
    ) -> Result<()> {
        let processing_time = self.options.processing_time;
        for key in keys {
            self.with_nfa(&key, out, |matcher, nfa, emitted| {
                if processing_time && timestamp == Timestamp::MAX {
                    // The end of the input: what waits on the clock never times out.
                    matcher.end(nfa, timestamp, emitted);
                    return;
                }
                if !processing_time {
                    // Everything before `timestamp` is here: match it in time order.
                    let is_due = |ts: Timestamp| ts < timestamp || timestamp == Timestamp::MAX;
                    match_stored(matcher, nfa, is_due, emitted);
                }
                matcher.expire(nfa, timestamp, emitted);
                if timestamp == Timestamp::MAX {
                    matcher.end(nfa, timestamp, emitted);
                }
            })?;
        }
        Ok(())
    }

    /// Matches, in event time, the queued events and fires the event-time timers that the
    /// watermark has passed, in time order: an event of time `t` before a timer at `t + 1`.
    fn advance_event_time(
        &mut self,
        watermark: Timestamp,
        out: &mut Collector<'_, Out>,
    ) -> Result<()> {
        let due = |ts: Timestamp| ts.saturating_add(1) <= watermark;
        loop {
            let timer = self
                .runtime
                .timers
                .next(TimeDomain::EventTime)
                .filter(|t| *t <= watermark);
            let event = self
                .queue
                .first_key_value()
                .map(|((ts, _), _)| *ts)
                .filter(|ts| {
                    // (At the end of time, events first: a timer there ends what they start.)
                    due(*ts) && timer.is_none_or(|t| *ts < t || t == Timestamp::MAX)
                });
            if event.is_some() {
                let Some(((ts, _), (key, value))) = self.queue.pop_first() else {
                    unreachable!("peeked above")
                };
                self.with_nfa(&key, out, |matcher, nfa, emitted| {
                    // Events a checkpoint stored arrived before this one.
                    match_stored(matcher, nfa, |stored| stored <= ts, emitted);
                    matcher.advance(nfa, ts, value, emitted);
                })?;
            } else if let Some(timer) = timer {
                let Some((timestamp, keys)) = self
                    .runtime
                    .timers
                    .pop_earliest_due(TimeDomain::EventTime, timer)
                else {
                    unreachable!("peeked above")
                };
                self.fire_keys(timestamp, keys, out)?;
            } else {
                return Ok(());
            }
        }
    }

    /// Moves the queued events into their keys' state, each with a timer at its time plus one:
    /// what a checkpoint holds of them.
    fn store_queue(&mut self) -> Result<()> {
        for ((ts, _), (key, value)) in std::mem::take(&mut self.queue) {
            let key_group = self.runtime.key_group(&key)?;
            let mut state = self.runtime.state.value(&self.state, key_group, &key);
            state.modify(KeyNfa::default, |nfa| {
                nfa.pending.push((ts, nfa.next_id, value));
                nfa.next_id += 1;
            })?;
            self.runtime
                .timers
                .register(TimeDomain::EventTime, ts.saturating_add(1), key);
        }
        Ok(())
    }
}

/// Matches the events stored in `nfa` (by a checkpoint) whose time `is_due`, in time order,
/// events of one time in arrival order.
fn match_stored<T: Data>(
    matcher: &Matcher<T>,
    nfa: &mut KeyNfa<T>,
    is_due: impl Fn(Timestamp) -> bool,
    emitted: &mut Emitted<T>,
) {
    if nfa.pending.is_empty() {
        return;
    }
    nfa.pending.sort_unstable_by_key(|(ts, seq, _)| (*ts, *seq));
    let due = nfa
        .pending
        .iter()
        .take_while(|(ts, _, _)| is_due(*ts))
        .count();
    let events: Vec<_> = nfa.pending.drain(..due).collect();
    for (ts, _, event) in events {
        matcher.advance(nfa, ts, event, emitted);
    }
}

impl<K, T, Out, P> Operator for OpenCep<K, T, Out, P>
where
    K: Data + Hash + Eq,
    T: Data,
    Out: Data,
    P: PatternProcessFunction<K, T, Out>,
{
    type In = T;
    type Out = Out;

    fn open(&mut self, ctx: &OperatorContext) -> Result<()> {
        self.function.open(ctx)
    }

    fn process(&mut self, batch: &mut Vec<Record<T>>, out: &mut Collector<'_, Out>) -> Result<()> {
        for record in batch.drain(..) {
            let key = (self.key)(&record.value);
            if self.options.processing_time {
                let now = self.runtime.state.now();
                self.with_nfa(&key, out, |matcher, nfa, emitted| {
                    matcher.advance(nfa, now, record.value, emitted)
                })?;
                continue;
            }
            let Some(ts) = record.timestamp() else {
                return Err(Error::user(
                    "a pattern in event time received an event without a timestamp: give the \
                     source a WatermarkStrategy with timestamps, or match in_processing_time()",
                ));
            };
            if ts < out.current_watermark() {
                self.late(record, out)?;
                continue;
            }
            self.queue.insert((ts, self.arrivals), (key, record.value));
            self.arrivals += 1;
        }
        self.runtime.report_size(0, 0);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Collector<'_, Out>) -> Result<()> {
        self.advance_event_time(watermark, out)?;
        self.runtime.report_size(0, 0);
        Ok(())
    }

    fn on_tick(&mut self, out: &mut Collector<'_, Out>) -> Result<()> {
        let now = self.runtime.state.now();
        self.fire(TimeDomain::ProcessingTime, now, out)?;
        self.runtime.report_size(0, 0);
        Ok(())
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64, snapshot: &mut SnapshotWriter) -> Result<()> {
        self.store_queue()?;
        self.runtime.snapshot(snapshot)
    }

    fn restore_state(&mut self, state: &RestoreState) -> Result<()> {
        self.runtime.restore(state)
    }
}

//! Keyed processing: a user function called for every record with a context that knows the
//! record's key, its keyed state and its timers, as Flink's `KeyedProcessFunction`.

use std::collections::BTreeMap;
use std::hash::Hash;
use std::marker::PhantomData;

use crate::aggregate::AggregateFunction;
use crate::checkpoint::{RestoreState, SnapshotWriter};
use crate::error::{Error, Result};
use crate::keys::KeyFn;
use crate::keys::{KeyGroup, key_group_of};
use crate::operators::{BuildOperator, Collector, Operator, OperatorContext, OutputTag};
use crate::record::{Data, EventTime, Record, Timestamp};
use crate::state::{
    AggregatingState, AggregatingStateDescriptor, KeyedState, ListState, ListStateDescriptor,
    MapState, MapStateDescriptor, ReducingState, ReducingStateDescriptor, TimeDomain, TimerService,
    ValueState, ValueStateDescriptor,
};

/// The low-level keyed function, as Flink's `KeyedProcessFunction`.
///
/// Closures `FnMut(&K, In, &mut KeyedContext<K, Out>) -> Result<()>` implement it (pass them to
/// [`KeyedStream::process`](crate::KeyedStream::process), which infers their types); implement it
/// on a struct for timers, `open` and `close`, and pass the struct to
/// [`KeyedStream::process_function`](crate::KeyedStream::process_function).
pub trait KeyedProcessFunction<K, In, Out>: Send + 'static {
    /// Called once per parallel instance before the first record (Flink's `open`): set up
    /// what the function needs (a client, a table), on the task's thread.
    fn open(&mut self, _ctx: &crate::operators::OperatorContext) -> Result<()> {
        Ok(())
    }

    /// Processes one record of key `key`.
    fn process_element(&mut self, key: &K, value: In, ctx: &mut KeyedContext<K, Out>)
    -> Result<()>;

    /// A timer of `key` registered for `timestamp` fired (`ctx.timestamp()` is that time).
    fn on_timer(
        &mut self,
        _key: &K,
        _timestamp: Timestamp,
        _domain: TimeDomain,
        _ctx: &mut KeyedContext<K, Out>,
    ) -> Result<()> {
        Ok(())
    }

    /// Called once when the input ended, after the final watermark's timers fired (Flink's
    /// `close`); emit through `out` what is still held.
    fn close(&mut self, _out: &mut Collector<'_, Out>) -> Result<()> {
        Ok(())
    }
}

/// A [`KeyedProcessFunction`] made of two closures, one per record and one per timer: what
/// [`KeyedStream::process_with_timers`](crate::KeyedStream::process_with_timers) runs.
#[derive(Clone)]
pub struct ProcessWithTimers<E, T> {
    on_element: E,
    on_timer: T,
}

impl<E, T> ProcessWithTimers<E, T> {
    /// The function calling `on_element` for records and `on_timer` for timers.
    pub fn new(on_element: E, on_timer: T) -> Self {
        ProcessWithTimers {
            on_element,
            on_timer,
        }
    }
}

impl<K, In, Out, E, T> KeyedProcessFunction<K, In, Out> for ProcessWithTimers<E, T>
where
    E: FnMut(&K, In, &mut KeyedContext<K, Out>) -> Result<()> + Send + 'static,
    T: FnMut(&K, Timestamp, TimeDomain, &mut KeyedContext<K, Out>) -> Result<()> + Send + 'static,
{
    fn process_element(
        &mut self,
        key: &K,
        value: In,
        ctx: &mut KeyedContext<K, Out>,
    ) -> Result<()> {
        (self.on_element)(key, value, ctx)
    }

    fn on_timer(
        &mut self,
        key: &K,
        timestamp: Timestamp,
        domain: TimeDomain,
        ctx: &mut KeyedContext<K, Out>,
    ) -> Result<()> {
        (self.on_timer)(key, timestamp, domain, ctx)
    }
}

impl<K, In, Out, F> KeyedProcessFunction<K, In, Out> for F
where
    F: FnMut(&K, In, &mut KeyedContext<K, Out>) -> Result<()> + Send + 'static,
{
    fn process_element(
        &mut self,
        key: &K,
        value: In,
        ctx: &mut KeyedContext<K, Out>,
    ) -> Result<()> {
        self(key, value, ctx)
    }
}

/// What a keyed function sees: the current key and record time, its state, its timers, and where
/// to emit.
pub struct KeyedContext<'c, 'o, K, Out> {
    key: &'c K,
    key_group: KeyGroup,
    timestamp: Option<EventTime>,
    out: &'c mut Collector<'o, Out>,
    state: &'c mut KeyedState<K>,
    timers: &'c mut TimerService<K>,
}

impl<K: Data + Hash + Eq, Out: Data> KeyedContext<'_, '_, K, Out> {
    /// The current key.
    pub fn key(&self) -> &K {
        self.key
    }

    /// The current record's event time (or the firing timer's time), if it has one.
    pub fn timestamp(&self) -> Option<Timestamp> {
        self.timestamp.map(EventTime::millis)
    }

    /// The operator's current event-time watermark.
    pub fn current_watermark(&self) -> Timestamp {
        self.out.current_watermark()
    }

    /// The current processing time (epoch ms).
    pub fn current_processing_time(&self) -> Timestamp {
        self.state.now()
    }

    /// Emits a value with the current record's timestamp.
    pub fn emit(&mut self, value: Out) -> Result<()> {
        self.out.emit(Record::timed(value, self.timestamp))
    }

    /// Emits a value with another timestamp; `i64::MIN` is no event time and fails the job
    /// (a bug of the function, not of its input).
    pub fn emit_with_timestamp(&mut self, value: Out, timestamp: Timestamp) -> Result<()> {
        self.out.emit_value(value, timestamp)
    }

    /// Sends a value to a side output; `false` if the job does not consume that side output.
    pub fn side_output<S: Data>(&mut self, tag: &OutputTag<S>, value: S) -> Result<bool> {
        self.out
            .side_output(tag, Record::timed(value, self.timestamp))
    }

    /// Whether the keyed state lives in a store (RocksDB) rather than in heap tables. A
    /// function may lay its state out for where it lives: a large collection is best as the
    /// entries of a [`MapState`](crate::state::MapState) in a store (each read and written
    /// alone), and may be cheaper as one value on the heap (changed in place).
    ///
    /// ```
    /// # fn layout(ctx: &riffle::operators::KeyedContext<'_, '_, u64, u64>) -> &'static str {
    /// if ctx.state_in_store() { "entries" } else { "one value" }
    /// # }
    /// ```
    pub fn state_in_store(&self) -> bool {
        self.state.has_store()
    }

    /// The current key's value state.
    pub fn value<V: Data>(&mut self, descriptor: &ValueStateDescriptor<V>) -> ValueState<'_, K, V> {
        self.state.value(descriptor, self.key_group, self.key)
    }

    /// The current key's list state.
    pub fn list<V: Data>(&mut self, descriptor: &ListStateDescriptor<V>) -> ListState<'_, K, V> {
        self.state.list(descriptor, self.key_group, self.key)
    }

    /// The current key's map state.
    pub fn map<UK: Data + Hash + Eq, UV: Data>(
        &mut self,
        descriptor: &MapStateDescriptor<UK, UV>,
    ) -> MapState<'_, K, UK, UV> {
        self.state.map(descriptor, self.key_group, self.key)
    }

    /// The current key's reducing state.
    pub fn reducing<V: Data>(
        &mut self,
        descriptor: &ReducingStateDescriptor<V>,
    ) -> ReducingState<'_, K, V> {
        self.state.reducing(descriptor, self.key_group, self.key)
    }

    /// The current key's aggregating state.
    pub fn aggregating<'d, In, A: AggregateFunction<In>>(
        &'d mut self,
        descriptor: &'d AggregatingStateDescriptor<In, A>,
    ) -> AggregatingState<'d, K, In, A> {
        self.state.aggregating(descriptor, self.key_group, self.key)
    }

    /// Calls `on_timer` for the current key when the watermark reaches `timestamp`.
    pub fn register_event_time_timer(&mut self, timestamp: Timestamp) {
        self.timers
            .register(TimeDomain::EventTime, timestamp, self.key.clone());
    }

    /// Calls `on_timer` for the current key when processing time reaches `timestamp`.
    pub fn register_processing_time_timer(&mut self, timestamp: Timestamp) {
        self.timers
            .register(TimeDomain::ProcessingTime, timestamp, self.key.clone());
    }

    /// Deletes the current key's event-time timer at `timestamp`.
    pub fn delete_event_time_timer(&mut self, timestamp: Timestamp) {
        self.timers
            .delete(TimeDomain::EventTime, timestamp, self.key);
    }

    /// Deletes the current key's processing-time timer at `timestamp`.
    pub fn delete_processing_time_timer(&mut self, timestamp: Timestamp) {
        self.timers
            .delete(TimeDomain::ProcessingTime, timestamp, self.key);
    }
}

/// The operator that runs a [`KeyedProcessFunction`], as the job declares it: built on each
/// subtask into an [`OpenKeyedProcess`] with the subtask's keyed state and timers.
pub struct KeyedProcess<K, In, Out, P> {
    key: KeyFn<K, In>,
    function: P,
    _types: PhantomData<fn(In) -> Out>,
}

/// A [`KeyedProcess`] built on its subtask: the function with its keyed state and timers.
pub struct OpenKeyedProcess<K, In, Out, P> {
    key: KeyFn<K, In>,
    function: P,
    runtime: KeyedRuntime<K>,
    _types: PhantomData<fn(In) -> Out>,
}

/// What a keyed operator instance holds once open: its state, timers and key groups.
pub(crate) struct KeyedRuntime<K> {
    pub(crate) state: KeyedState<K>,
    pub(crate) timers: TimerService<K>,
    pub(crate) ctx: OperatorContext,
}

impl<K: Data + Hash + Eq> KeyedRuntime<K> {
    pub(crate) fn new(ctx: &OperatorContext) -> Self {
        KeyedRuntime {
            state: KeyedState::in_store(
                ctx.key_groups,
                ctx.clock.clone(),
                ctx.store.clone(),
                &ctx.id,
            ),
            timers: TimerService::new(),
            ctx: ctx.clone(),
        }
    }

    /// The key group of `key`, checked against the ones this instance owns.
    pub(crate) fn key_group(&self, key: &K) -> Result<KeyGroup> {
        let key_group = key_group_of(key, self.ctx.max_parallelism);
        if !self.ctx.key_groups.contains(key_group) {
            return Err(Error::Graph(format!(
                "a record of key group {key_group} reached subtask {} of `{}`, which owns {:?}: \
                 was the stream keyed with the same key?",
                self.ctx.subtask, self.ctx.name, self.ctx.key_groups
            )));
        }
        Ok(key_group)
    }

    /// Writes the state and timers of every key group with any.
    pub(crate) fn snapshot(&self, writer: &mut SnapshotWriter) -> Result<()> {
        let mut timers: BTreeMap<KeyGroup, Vec<(TimeDomain, Timestamp, &K)>> = BTreeMap::new();
        for (domain, timestamp, key) in self.timers.all() {
            timers
                .entry(key_group_of(key, self.ctx.max_parallelism))
                .or_default()
                .push((domain, timestamp, key));
        }
        for key_group in self.ctx.key_groups.start..=self.ctx.key_groups.end {
            let states = self.state.snapshot_group(key_group)?;
            let group_timers = timers.remove(&key_group).unwrap_or_default();
            if !states.is_empty() || !group_timers.is_empty() {
                writer.write_keyed(key_group, &(states, group_timers))?;
            }
        }
        writer.record_state_schemas(self.state.schemas());
        Ok(())
    }

    /// Restores what [`snapshot`](KeyedRuntime::snapshot) wrote; timers are registered again.
    pub(crate) fn restore(&mut self, restored: &RestoreState) -> Result<()> {
        self.state.restore_schemas(restored.state_schemas());
        for group in restored.keyed::<(Vec<(String, Vec<u8>)>, Vec<(TimeDomain, Timestamp, K)>)>() {
            let (key_group, (states, timers)) = group?;
            self.state.restore_group(key_group, states)?;
            for (domain, timestamp, key) in timers {
                self.timers.register(domain, timestamp, key);
            }
        }
        Ok(())
    }

    /// Publishes the size of the state in the operator's metrics.
    pub(crate) fn report_size(&self, extra_entries: usize, extra_bytes: usize) {
        let (entries, bytes) = self.state.size();
        self.ctx.metrics.set_state(
            (entries + extra_entries + self.timers.len()) as u64,
            (bytes + extra_bytes) as u64,
        );
    }
}

impl<K, In, Out, P> KeyedProcess<K, In, Out, P> {
    /// The operator for `function`, keyed by `key`.
    pub fn new(key: KeyFn<K, In>, function: P) -> Self {
        KeyedProcess {
            key,
            function,
            _types: PhantomData,
        }
    }
}

impl<K, In, Out, P> BuildOperator for KeyedProcess<K, In, Out, P>
where
    K: Data + Hash + Eq,
    In: Data,
    Out: Data,
    P: KeyedProcessFunction<K, In, Out>,
{
    type Operator = OpenKeyedProcess<K, In, Out, P>;

    fn build(self, ctx: &OperatorContext) -> Result<Self::Operator> {
        Ok(OpenKeyedProcess {
            key: self.key,
            function: self.function,
            runtime: KeyedRuntime::new(ctx),
            _types: PhantomData,
        })
    }
}

impl<K, In, Out, P> OpenKeyedProcess<K, In, Out, P> {
    /// The function it runs (for operators built around a keyed process, which keep more state
    /// in the function).
    pub(crate) fn function_mut(&mut self) -> &mut P {
        &mut self.function
    }
}

impl<K, In, Out, P> OpenKeyedProcess<K, In, Out, P>
where
    K: Data + Hash + Eq,
    In: Data,
    Out: Data,
    P: KeyedProcessFunction<K, In, Out>,
{
    fn fire(
        &mut self,
        domain: TimeDomain,
        time: Timestamp,
        out: &mut Collector<'_, Out>,
    ) -> Result<()> {
        let runtime = &mut self.runtime;
        // Earliest first, and again until none is due: a timer that `on_timer` registers at or
        // before `time` fires in this advance too, in time order.
        while let Some((timestamp, keys)) = runtime.timers.pop_earliest_due(domain, time) {
            for key in keys {
                let key_group = runtime.key_group(&key)?;
                let mut ctx = KeyedContext {
                    key: &key,
                    key_group,
                    timestamp: EventTime::new(timestamp),
                    out,
                    state: &mut runtime.state,
                    timers: &mut runtime.timers,
                };
                self.function.on_timer(&key, timestamp, domain, &mut ctx)?;
            }
        }
        Ok(())
    }
}

impl<K, In, Out, P> Operator for OpenKeyedProcess<K, In, Out, P>
where
    K: Data + Hash + Eq,
    In: Data,
    Out: Data,
    P: KeyedProcessFunction<K, In, Out>,
{
    type In = In;
    type Out = Out;

    fn open(&mut self, ctx: &OperatorContext) -> Result<()> {
        self.function.open(ctx)
    }

    fn close(&mut self, out: &mut Collector<'_, Out>) -> Result<()> {
        self.function.close(out)
    }

    fn process(&mut self, batch: &mut Vec<Record<In>>, out: &mut Collector<'_, Out>) -> Result<()> {
        let runtime = &mut self.runtime;
        for record in batch.drain(..) {
            let key = (self.key)(&record.value);
            let key_group = runtime.key_group(&key)?;
            let mut ctx = KeyedContext {
                key: &key,
                key_group,
                timestamp: record.timestamp,
                out,
                state: &mut runtime.state,
                timers: &mut runtime.timers,
            };
            self.function
                .process_element(&key, record.value, &mut ctx)?;
        }
        runtime.report_size(0, 0);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Collector<'_, Out>) -> Result<()> {
        self.fire(TimeDomain::EventTime, watermark, out)?;
        self.runtime.report_size(0, 0);
        Ok(())
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64, snapshot: &mut SnapshotWriter) -> Result<()> {
        self.runtime.snapshot(snapshot)
    }

    fn restore_state(&mut self, state: &RestoreState) -> Result<()> {
        self.runtime.restore(state)
    }

    fn on_tick(&mut self, out: &mut Collector<'_, Out>) -> Result<()> {
        let now = self.runtime.state.now();
        self.fire(TimeDomain::ProcessingTime, now, out)?;
        let runtime = &mut self.runtime;
        runtime.state.sweep_expired();
        runtime.report_size(0, 0);
        Ok(())
    }
}

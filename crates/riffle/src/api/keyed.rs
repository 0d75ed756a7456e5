//! [`KeyedStream`]: a stream partitioned by key, on which keyed operators run.

use std::hash::Hash;
use std::sync::Arc;

use crate::aggregate::{AggregateFunction, Max, MaxBy, Min, MinBy, Number, Reduce, Sum};
use crate::api::declared::operator_node;
use crate::api::stream::DataStream;
use crate::api::{CountWindowedStream, WindowedStream};
use crate::error::Result;
use crate::graph::{Node, Ship, Slot};
use crate::keys::KeyFn;
use crate::operators::{BuildOperator, OutOf};
use crate::operators::{
    KeyedContext, KeyedProcess, KeyedProcessFunction, ProcessWithTimers, Rolling, RollingAggregate,
    RollingCombine,
};
use crate::record::{Data, Timestamp};
use crate::state::TimeDomain;
use crate::window::Windows;

/// A stream partitioned by a key: every record of a key is processed by the same subtask, which
/// owns the key's key group (and, with the state API, its state).
///
/// ```
/// use riffle::{StreamEnv, sink::CollectSink};
///
/// let env = StreamEnv::new();
/// let (sink, output) = CollectSink::new();
/// env.from_iter(vec![(1u64, "a".to_string()), (2, "b".to_string()), (1, "c".to_string())])
///     .key_by(|(user, _)| *user)
///     .process(|user, (_, page), ctx| ctx.emit(format!("user {user} saw {page}")))
///     .sink(sink);
/// env.execute().unwrap();
/// assert_eq!(output.sorted(), vec!["user 1 saw a", "user 1 saw c", "user 2 saw b"]);
/// ```
pub struct KeyedStream<K, T> {
    input: DataStream<T>,
    key: KeyFn<K, T>,
}

impl<K, T> Clone for KeyedStream<K, T> {
    fn clone(&self) -> Self {
        KeyedStream {
            input: self.input.clone(),
            key: self.key.clone(),
        }
    }
}

impl<K, T> KeyedStream<K, T>
where
    K: Data + Hash + Eq,
    T: Data,
{
    pub(crate) fn new(input: DataStream<T>, key: KeyFn<K, T>) -> Self {
        KeyedStream { input, key }
    }

    /// Connects this stream to another keyed by the same kind of key: each key's records of
    /// both meet in one subtask, sharing its state and timers (see
    /// [`KeyedCoProcessFunction`](crate::operators::KeyedCoProcessFunction)).
    pub fn connect<B: Data>(
        &self,
        other: &KeyedStream<K, B>,
    ) -> crate::api::KeyedConnectedStreams<K, T, B> {
        crate::api::KeyedConnectedStreams::new(self.clone(), other.clone())
    }

    /// Joins this stream's records with the other stream's records of the same key whose times
    /// are within an interval around theirs: say which with
    /// [`between`](crate::api::IntervalJoin::between) (Flink's `intervalJoin`).
    pub fn interval_join<B: Data>(
        &self,
        other: &KeyedStream<K, B>,
    ) -> crate::api::IntervalJoin<K, T, B> {
        crate::api::IntervalJoin::new(self.clone(), other.clone())
    }

    /// The stream before `key_by`, not partitioned (its next operator gets the default edge):
    /// for libraries that partition it another way, such as a Kafka shuffle.
    pub fn unkeyed(&self) -> DataStream<T> {
        self.input.forward()
    }

    /// The key selector.
    pub fn key_selector(&self) -> Arc<dyn Fn(&T) -> K + Send + Sync> {
        self.key.clone()
    }

    /// Runs the closure `function(key, record, ctx)` on every record, with a context that knows
    /// the record's key, its keyed state and timers, and emits; each subtask gets its own clone.
    /// Its parameter types are inferred (see the example above). For timers, use
    /// [`process_with_timers`](KeyedStream::process_with_timers) or a struct with
    /// [`process_function`](KeyedStream::process_function).
    pub fn process<Out, F>(&self, function: F) -> DataStream<Out>
    where
        Out: Data,
        F: FnMut(&K, T, &mut KeyedContext<'_, '_, K, Out>) -> Result<()>
            + Clone
            + Send
            + Sync
            + 'static,
    {
        self.process_function(function)
    }

    /// As [`process`](KeyedStream::process), with a second closure called when a timer of a
    /// key fires: `on_timer(key, timestamp, domain, ctx)`.
    ///
    /// ```
    /// use riffle::{EnvConfig, StreamEnv, sink::CollectSink, time::WatermarkStrategy};
    ///
    /// // Says goodbye to a user 10 s (event time) after their last click.
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, output) = CollectSink::new();
    /// env.from_iter_with_watermarks(
    ///     vec![(1u64, 1_000i64), (1, 5_000), (2, 6_000)],
    ///     WatermarkStrategy::monotonous().with_timestamps(|c: &(u64, i64)| c.1),
    /// )
    /// .key_by(|c| c.0)
    /// .process_with_timers(
    ///     |_, click, ctx| {
    ///         ctx.register_event_time_timer(click.1 + 10_000);
    ///         Ok(())
    ///     },
    ///     |user, at, _, ctx| ctx.emit(format!("user {user}: timer at {at}")),
    /// )
    /// .sink(sink);
    /// env.execute().unwrap();
    /// assert_eq!(
    ///     output.values(),
    ///     vec!["user 1: timer at 11000", "user 1: timer at 15000", "user 2: timer at 16000"]
    /// );
    /// ```
    pub fn process_with_timers<Out, E, Tm>(&self, on_element: E, on_timer: Tm) -> DataStream<Out>
    where
        Out: Data,
        E: FnMut(&K, T, &mut KeyedContext<'_, '_, K, Out>) -> Result<()>
            + Clone
            + Send
            + Sync
            + 'static,
        Tm: FnMut(&K, Timestamp, TimeDomain, &mut KeyedContext<'_, '_, K, Out>) -> Result<()>
            + Clone
            + Send
            + Sync
            + 'static,
    {
        self.process_function(ProcessWithTimers::new(on_element, on_timer))
    }

    /// Runs a [`KeyedProcessFunction`] (a struct: records, timers, `open`, `close`) on every
    /// record, as Flink's `process(KeyedProcessFunction)`; each subtask gets its own clone.
    pub fn process_function<Out, P>(&self, function: P) -> DataStream<Out>
    where
        Out: Data,
        P: KeyedProcessFunction<K, T, Out> + Clone + Sync,
    {
        let key = self.key.clone();
        self.add_keyed("KeyedProcess", move || {
            KeyedProcess::new(key.clone(), function.clone())
        })
    }

    /// Applies a custom keyed [`Operator`](crate::operators::Operator), one instance per
    /// subtask, as Flink's `keyedStream.transform(..)`: each instance gets the records of the
    /// key groups it owns ([`OperatorContext::key_groups`](crate::operators::OperatorContext)),
    /// and, when the job's state backend keeps state in a key-value store (RocksDB), the task's
    /// store in [`OperatorContext::store`](crate::operators::OperatorContext) and
    /// [`OperatorContext::state_table`](crate::operators::OperatorContext::state_table): what
    /// the operator writes into the store is checkpointed and restored with the job's keyed
    /// state, rescaling included, as long as its keys start with their key group. On the heap
    /// backend (no store), the operator writes its state in
    /// [`snapshot_state`](crate::operators::Operator::snapshot_state) itself.
    ///
    /// ```
    /// use riffle::operators::{Collector, Operator, OperatorContext};
    /// use riffle::state::StateTable;
    /// use riffle::{Record, StreamEnv, keys::key_group_of, sink::CollectSink};
    ///
    /// /// Counts records per word, in the job's state backend.
    /// struct Counts {
    ///     counts: Option<StateTable<String, (), u64>>,
    ///     max_parallelism: usize,
    /// }
    ///
    /// impl Operator for Counts {
    ///     type In = String;
    ///     type Out = (String, u64);
    ///
    ///     fn open(&mut self, ctx: &OperatorContext) -> riffle::Result<()> {
    ///         self.counts = Some(ctx.state_table("counts"));
    ///         self.max_parallelism = ctx.max_parallelism;
    ///         Ok(())
    ///     }
    ///
    ///     fn process(&mut self, batch: &mut Vec<Record<String>>, out: &mut Collector<'_, (String, u64)>) -> riffle::Result<()> {
    ///         let counts = self.counts.as_mut().expect("opened");
    ///         for record in batch.drain(..) {
    ///             let group = key_group_of(&record.value, self.max_parallelism);
    ///             let n = counts.get(group, &record.value, &())?.unwrap_or(0) + 1;
    ///             counts.put(group, record.value.clone(), (), n)?;
    ///             out.emit(Record::timed((record.value, n), record.timestamp))?;
    ///         }
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let env = StreamEnv::new();
    /// let (sink, output) = CollectSink::new();
    /// env.from_iter(vec!["a".to_string(), "b".into(), "a".into()])
    ///     .key_by(|w| w.clone())
    ///     .transform("Counts", || Counts { counts: None, max_parallelism: 0 })
    ///     .sink(sink);
    /// env.execute().unwrap();
    /// assert_eq!(output.sorted(), vec![("a".to_string(), 1), ("a".to_string(), 2), ("b".to_string(), 1)]);
    /// ```
    pub fn transform<Op, F>(&self, name: &str, factory: F) -> DataStream<OutOf<Op>>
    where
        Op: BuildOperator,
        Op::Operator: crate::operators::Operator<In = T>,
        F: Fn() -> Op + Send + Sync + 'static,
    {
        self.add_keyed(name, factory)
    }

    /// A rolling aggregate per key (as Flink's `keyBy(..).sum(..)`): emits `(key, result)` as
    /// records arrive. Each upstream subtask first folds its batches per key (when they fold), so
    /// a hot key costs its owner one update per batch; the last result per key is the total.
    ///
    /// ```
    /// use riffle::{StreamEnv, aggregate::Count, sink::CollectSink};
    /// let env = StreamEnv::new();
    /// let (sink, out) = CollectSink::new();
    /// env.from_iter(vec!["a".to_string(), "b".into(), "a".into()]).key_by(|w| w.clone()).aggregate(Count).sink(sink);
    /// env.execute().unwrap();
    /// let finals: std::collections::BTreeMap<String, u64> = out.values().into_iter().collect();
    /// assert_eq!(finals, [("a".to_string(), 2), ("b".to_string(), 1)].into());
    /// ```
    pub fn aggregate<A: AggregateFunction<T> + Clone>(
        &self,
        aggregate: A,
    ) -> DataStream<(K, A::Out)> {
        let key = self.key.clone();
        let first = aggregate.clone();
        let partials = self.input.forward().transform("Combine", move || {
            RollingCombine::new(key.clone(), first.clone())
        });
        let key = self.key.clone();
        let keyed = partials.key_by(move |element: &Rolling<K, T, A::Acc>| match element {
            Rolling::Record(record) => key(record),
            Rolling::Partial { key, .. } => key.clone(),
        });
        let key_of = keyed.key_selector();
        keyed.add_keyed("Aggregate", move || {
            RollingAggregate::new(key_of.clone(), aggregate.clone())
        })
    }

    /// Combines the records of each key pairwise, `combine(accumulated, next)`, and emits the
    /// running result for every record (Flink's `keyBy(..).reduce(..)`).
    ///
    /// ```
    /// use riffle::{StreamEnv, sink::CollectSink};
    /// let env = StreamEnv::new();
    /// let (sink, out) = CollectSink::new();
    /// env.from_iter(vec![("a", 3u64), ("b", 1), ("a", 4)].into_iter().map(|(k, v)| (k.to_string(), v)))
    ///     .key_by(|(word, _)| word.clone())
    ///     .reduce(|(word, x), (_, y)| (word, x + y))
    ///     .sink(sink);
    /// env.execute().unwrap();
    /// let finals: std::collections::BTreeMap<String, u64> = out.values().into_iter().collect();
    /// assert_eq!(finals, [("a".to_string(), 7), ("b".to_string(), 1)].into());
    /// ```
    pub fn reduce(&self, combine: impl Fn(T, T) -> T + Send + Sync + 'static) -> DataStream<T>
    where
        T: Sync,
    {
        self.aggregate(Reduce::new(combine)).map(|(_, value)| value)
    }

    /// The running sum of a numeric field per key: `(key, sum)` for every record.
    pub fn sum<N: Number>(
        &self,
        field: impl Fn(&T) -> N + Send + Sync + 'static,
    ) -> DataStream<(K, N)> {
        self.aggregate(Sum::of(field))
    }

    /// The running minimum of a numeric field per key: `(key, min)` for every record.
    pub fn min<N: Number>(
        &self,
        field: impl Fn(&T) -> N + Send + Sync + 'static,
    ) -> DataStream<(K, N)> {
        self.aggregate(Min::of(field))
            .flat_map(|(key, min)| min.map(|min| (key, min)))
    }

    /// The running maximum of a numeric field per key: `(key, max)` for every record.
    pub fn max<N: Number>(
        &self,
        field: impl Fn(&T) -> N + Send + Sync + 'static,
    ) -> DataStream<(K, N)> {
        self.aggregate(Max::of(field))
            .flat_map(|(key, max)| max.map(|max| (key, max)))
    }

    /// Per key, the record with the smallest value of a numeric field so far (the first on a
    /// tie), emitted for every record (Flink's `minBy`).
    pub fn min_by<N: Number>(
        &self,
        field: impl Fn(&T) -> N + Send + Sync + 'static,
    ) -> DataStream<T>
    where
        T: Sync,
    {
        self.aggregate(MinBy::of(field)).map(|(_, record)| record)
    }

    /// Per key, the record with the largest value of a numeric field so far (the first on a
    /// tie), emitted for every record (Flink's `maxBy`).
    pub fn max_by<N: Number>(
        &self,
        field: impl Fn(&T) -> N + Send + Sync + 'static,
    ) -> DataStream<T>
    where
        T: Sync,
    {
        self.aggregate(MaxBy::of(field)).map(|(_, record)| record)
    }

    /// Windows of `size` records per key (Flink's `countWindow(size)`): a key's window fires
    /// when it holds `size` records, then starts empty.
    pub fn count_window(&self, size: u64) -> CountWindowedStream<K, T>
    where
        T: Sync,
    {
        CountWindowedStream::new(self.clone_stream(), size, size)
    }

    /// Sliding count windows (Flink's `countWindow(size, slide)`): every `slide` records of a
    /// key, a window over its last `size` records.
    pub fn count_window_sliding(&self, size: u64, slide: u64) -> CountWindowedStream<K, T>
    where
        T: Sync,
    {
        CountWindowedStream::new(self.clone_stream(), size, slide)
    }

    fn clone_stream(&self) -> KeyedStream<K, T> {
        KeyedStream {
            input: self.input.clone(),
            key: self.key.clone(),
        }
    }

    /// Cuts the stream into windows (per key): [`Tumbling`](crate::window::Tumbling),
    /// [`Sliding`](crate::window::Sliding) or [`Session`](crate::window::Session).
    pub fn window(&self, windows: Windows) -> WindowedStream<K, T> {
        WindowedStream::new(self.clone_stream(), windows)
    }

    /// The keyed input stream.
    pub(crate) fn input(&self) -> &DataStream<T> {
        &self.input
    }

    /// The function giving a record's key.
    pub(crate) fn key_fn(&self) -> KeyFn<K, T> {
        self.key.clone()
    }

    /// Reports a misuse of the API found while declaring (`execute` fails with it).
    pub(crate) fn defer_error(&self, message: String) {
        self.input.env.defer_error(message);
    }

    pub(crate) fn add_keyed<Op, F>(&self, name: &str, factory: F) -> DataStream<OutOf<Op>>
    where
        Op: BuildOperator,
        Op::Operator: crate::operators::Operator<In = T>,
        F: Fn() -> Op + Send + Sync + 'static,
    {
        let mut node: Node = operator_node(name, vec![self.input.edge()], move || Ok(factory()));
        node.keyed = true;
        node.settings
            .push(("key".to_string(), std::any::type_name::<K>().to_string()));
        let id = self.input.env.add_node(node);
        DataStream::new(self.input.env.clone(), id, Slot::Main, Ship::Forward)
    }
}

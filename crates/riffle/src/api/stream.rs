//! [`DataStream`]: a stream of records of one type, and the steps declared on it.

use std::hash::Hash;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use crate::api::declared::{EnvInner, operator_node, sink_node};
use crate::api::keyed::KeyedStream;
use crate::error::{BoxError, Result};
use crate::graph::{Edge, KeyGroupFactory, Node, NodeId, Ship, Slot, TypeOf};
use crate::keys::key_group_of;
use crate::operators::{
    BuildOperator, Filter, FlatMap, Identity, Map, Operator, OutOf, OutputTag, ParseJson, TryMap,
};
use crate::record::Data;
use crate::sink::{Sink, StdoutSink};
use crate::source::DEAD_LETTER_TAG;
use crate::source::{BadRecordPolicy, DeadLetter};

/// A stream of records of type `T`.
///
/// Transformations (`map`, `filter`, ...) return a new stream; the setters (`name`, `uid`,
/// `set_parallelism`) apply to the operator that produces this stream.
///
/// ```
/// use riffle::{StreamEnv, sink::CollectSink};
///
/// let env = StreamEnv::new();
/// let (sink, output) = CollectSink::new();
/// env.from_iter(1..=10u64)
///     .filter(|x| x % 2 == 0)
///     .name("even")
///     .map(|x| x * x)
///     .sink(sink);
/// env.execute().unwrap();
/// assert_eq!(output.sorted(), vec![4, 16, 36, 64, 100]);
/// ```
pub struct DataStream<T> {
    pub(crate) env: Rc<EnvInner>,
    pub(crate) node: NodeId,
    slot: Slot,
    ship: Ship,
    _type: PhantomData<fn() -> T>,
}

impl<T> Clone for DataStream<T> {
    fn clone(&self) -> Self {
        DataStream {
            env: self.env.clone(),
            node: self.node,
            slot: self.slot.clone(),
            ship: self.ship.clone(),
            _type: PhantomData,
        }
    }
}

impl<T: Data> DataStream<T> {
    pub(crate) fn new(env: Rc<EnvInner>, node: NodeId, slot: Slot, ship: Ship) -> Self {
        DataStream {
            env,
            node,
            slot,
            ship,
            _type: PhantomData,
        }
    }

    /// The environment this stream belongs to (to add sources to the same job from a library
    /// that extends the API, such as a Kafka shuffle).
    pub fn env(&self) -> crate::StreamEnv {
        crate::StreamEnv {
            inner: self.env.clone(),
        }
    }

    /// The edge from this stream into a new consumer.
    pub(crate) fn edge(&self) -> Edge {
        Edge {
            from: self.node,
            slot: self.slot.clone(),
            ship: self.ship.clone(),
            ty: TypeOf::<T>::arc(),
            into: None,
        }
    }

    fn add<U: Data>(&self, node: Node) -> DataStream<U> {
        let id = self.env.add_node(node);
        DataStream::new(self.env.clone(), id, Slot::Main, Ship::Forward)
    }

    /// Applies a custom [`Operator`], one instance per subtask: `factory` makes the operator,
    /// or a [`BuildOperator`](crate::operators::BuildOperator) that builds it from its
    /// [`OperatorContext`](crate::operators::OperatorContext) on the subtask.
    pub fn transform<Op, F>(&self, name: &str, factory: F) -> DataStream<OutOf<Op>>
    where
        Op: BuildOperator,
        Op::Operator: Operator<In = T>,
        F: Fn() -> Op + Send + Sync + 'static,
    {
        self.add(operator_node(
            name,
            vec![self.edge()],
            move || Ok(factory()),
        ))
    }

    /// Transforms every record.
    pub fn map<U: Data, F: Fn(T) -> U + Send + Sync + 'static>(&self, f: F) -> DataStream<U> {
        let f = Arc::new(f);
        self.transform("Map", move || Map::new(f.clone()))
    }

    /// Transforms every record with a function that may fail; an error fails the job with an
    /// error naming this operator.
    pub fn try_map<U, E, F>(&self, f: F) -> DataStream<U>
    where
        U: Data,
        E: Into<BoxError>,
        F: Fn(T) -> Result<U, E> + Send + Sync + 'static,
    {
        let f = Arc::new(move |value: T| f(value).map_err(Into::into));
        self.transform("Map", move || TryMap::new(f.clone()))
    }

    /// Keeps the records for which `predicate` is true.
    pub fn filter<F: Fn(&T) -> bool + Send + Sync + 'static>(&self, predicate: F) -> DataStream<T> {
        let predicate = Arc::new(predicate);
        self.transform("Filter", move || Filter::new(predicate.clone()))
    }

    /// Turns every record into zero or more records (each with the input's timestamp).
    pub fn flat_map<U, I, F>(&self, f: F) -> DataStream<U>
    where
        U: Data,
        I: IntoIterator<Item = U> + 'static,
        F: Fn(T) -> I + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        self.transform("FlatMap", move || FlatMap::new(f.clone()))
    }

    /// Runs the closure `f(record, ctx)` on every record (Flink's `ProcessFunction`): emit any
    /// number of results with `ctx.emit`, send records to side outputs with `ctx.side_output`,
    /// read `ctx.timestamp()` and `ctx.current_watermark()`. Its parameter types are inferred.
    ///
    /// ```
    /// use riffle::{OutputTag, StreamEnv, sink::CollectSink};
    /// let env = StreamEnv::new();
    /// let odd = OutputTag::<u32>::new("odd");
    /// let (evens, even_out) = CollectSink::new();
    /// let (odds, odd_out) = CollectSink::new();
    /// let halves = env.from_iter(vec![1u32, 2, 3, 4]).process({
    ///     let odd = odd.clone();
    ///     move |x, ctx| {
    ///         if x % 2 == 0 {
    ///             ctx.emit(x / 2)
    ///         } else {
    ///             ctx.side_output(&odd, x).map(|_| ())
    ///         }
    ///     }
    /// });
    /// halves.sink(evens);
    /// halves.get_side_output(&odd).sink(odds);
    /// env.execute().unwrap();
    /// assert_eq!((even_out.sorted(), odd_out.sorted()), (vec![1, 2], vec![1, 3]));
    /// ```
    pub fn process<U, F>(&self, f: F) -> DataStream<U>
    where
        U: Data,
        F: Fn(T, &mut crate::operators::ProcessContext<'_, '_, U>) -> crate::Result<()>
            + Send
            + Sync
            + 'static,
    {
        let f = Arc::new(f);
        self.transform("Process", move || crate::operators::Process::new(f.clone()))
    }

    /// Windows over the whole stream, not per key (Flink's `windowAll`): every record goes to
    /// one subtask of the window operator (its key is `()`), so one thread does the windowing;
    /// the pre-aggregation of `aggregate` and its shortcuts still runs in parallel upstream.
    ///
    /// ```
    /// use std::time::Duration;
    /// use riffle::{EnvConfig, StreamEnv, aggregate::Count, sink::CollectSink, time::WatermarkStrategy, window::Tumbling};
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, out) = CollectSink::new();
    /// env.from_iter_with_watermarks(vec![1_000i64, 2_000, 61_000], WatermarkStrategy::monotonous().with_timestamps(|t: &i64| *t))
    ///     .window_all(Tumbling::of(Duration::from_secs(60)))
    ///     .aggregate(Count)
    ///     .map(|r| (r.window_start, r.value))
    ///     .sink(sink);
    /// env.execute().unwrap();
    /// assert_eq!(out.sorted(), vec![(0, 2), (60_000, 1)]);
    /// ```
    pub fn window_all(&self, windows: crate::window::Windows) -> crate::WindowedStream<(), T> {
        self.key_by(|_| ()).window(windows)
    }

    /// Partitions the stream by key: all records of a key go to the same subtask (by key group).
    pub fn key_by<K, F>(&self, key: F) -> KeyedStream<K, T>
    where
        K: Data + Hash + Eq,
        F: Fn(&T) -> K + Send + Sync + 'static,
    {
        let key = Arc::new(key);
        let for_shuffle = key.clone();
        let factory: Arc<KeyGroupFactory> = Arc::new(move |max_parallelism| {
            let key = for_shuffle.clone();
            let key_group: crate::runtime::KeyGroupFn<T> =
                Arc::new(move |value: &T| key_group_of(&key(value), max_parallelism));
            Box::new(key_group)
        });
        let input = DataStream::new(
            self.env.clone(),
            self.node,
            self.slot.clone(),
            Ship::Hash(factory),
        );
        KeyedStream::new(input, key)
    }

    /// This stream as keyed by `key`, without repartitioning it (Flink's
    /// `DataStreamUtils.reinterpretAsKeyedStream`): for a stream already partitioned exactly as
    /// [`key_by`](Self::key_by) with this key would partition it, such as the output of a keyed
    /// operator whose records carry its key unchanged. The keyed operator after it runs in the
    /// same task as the one before, with no exchange between them, and takes the parallelism
    /// of this stream. A record that reaches a subtask which does not own its key's key group
    /// fails the job, naming the operator.
    ///
    /// ```
    /// use riffle::{EnvConfig, StreamEnv, sink::CollectSink, state::ValueStateDescriptor};
    /// const SEEN: ValueStateDescriptor<u64> = ValueStateDescriptor::new("seen");
    /// let env = StreamEnv::with_config(EnvConfig::deterministic().with_parallelism(2));
    /// let (sink, out) = CollectSink::new();
    /// env.from_iter(vec![1u64, 2, 1, 3, 1])
    ///     .key_by(|n: &u64| *n)
    ///     .process(|n: &u64, _: u64, ctx| {
    ///         let times = ctx.value(&SEEN).get()?.unwrap_or(0) + 1;
    ///         ctx.value(&SEEN).set(times)?;
    ///         ctx.emit((*n, times))
    ///     })
    ///     // Keyed by the same key: no exchange, the same task.
    ///     .reinterpret_as_keyed(|(n, _): &(u64, u64)| *n)
    ///     .process(|_: &u64, (n, times): (u64, u64), ctx| ctx.emit((n, times * 10)))
    ///     .sink(sink);
    /// env.execute().unwrap();
    /// assert_eq!(out.sorted(), vec![(1, 10), (1, 20), (1, 30), (2, 10), (3, 10)]);
    /// ```
    pub fn reinterpret_as_keyed<K, F>(&self, key: F) -> KeyedStream<K, T>
    where
        K: Data + Hash + Eq,
        F: Fn(&T) -> K + Send + Sync + 'static,
    {
        KeyedStream::new(self.forward(), Arc::new(key))
    }

    /// Connects this stream to `other` (of any type) for a two-input operator: see
    /// [`ConnectedStreams`](crate::api::ConnectedStreams).
    pub fn connect<B: Data>(&self, other: &DataStream<B>) -> crate::api::ConnectedStreams<T, B> {
        crate::api::ConnectedStreams::new(self.clone(), other.clone())
    }

    /// Joins this stream with `other` by key and window (Flink's `join`): see
    /// [`WindowedJoin::apply`](crate::api::WindowedJoin::apply) for an example.
    pub fn join<B: Data>(
        &self,
        other: &DataStream<B>,
    ) -> crate::api::TwoStreams<T, B, crate::api::Join> {
        crate::api::TwoStreams::new(self.clone(), other.clone())
    }

    /// Groups this stream's and `other`'s records by key and window (Flink's `coGroup`): see
    /// [`WindowedCoGroup::apply`](crate::api::WindowedCoGroup::apply) for an example.
    pub fn co_group<B: Data>(
        &self,
        other: &DataStream<B>,
    ) -> crate::api::TwoStreams<T, B, crate::api::CoGroup> {
        crate::api::TwoStreams::new(self.clone(), other.clone())
    }

    /// Merges this stream with others of the same type.
    pub fn union(&self, others: &[&DataStream<T>]) -> DataStream<T> {
        let inputs = std::iter::once(self.edge())
            .chain(others.iter().map(|o| o.edge()))
            .collect();
        self.add(operator_node("Union", inputs, || Ok(Identity::<T>::new())))
    }

    /// The same stream with the default (forward) edge to its next operator.
    pub(crate) fn forward(&self) -> DataStream<T> {
        DataStream::new(
            self.env.clone(),
            self.node,
            self.slot.clone(),
            Ship::Forward,
        )
    }

    /// Spreads the records round robin over the next operator's subtasks.
    pub fn rebalance(&self) -> DataStream<T> {
        DataStream::new(
            self.env.clone(),
            self.node,
            self.slot.clone(),
            Ship::Rebalance,
        )
    }

    /// Sends every record to every subtask of the next operator.
    pub fn broadcast(&self) -> DataStream<T> {
        DataStream::new(
            self.env.clone(),
            self.node,
            self.slot.clone(),
            Ship::Broadcast,
        )
    }

    /// Writes the stream to `sink`.
    pub fn sink<S: Sink<T>>(&self, sink: S) -> DataStreamSink {
        let mut node = sink_node(format!("Sink: {}", sink.name()), sink);
        node.inputs.push(self.edge());
        let id = self.env.add_node(node);
        DataStreamSink {
            env: self.env.clone(),
            node: id,
        }
    }

    /// Hands every record to the closure `f` (each subtask calls its own clone); an error fails
    /// the job naming this sink. At-least-once. For quick jobs and tests.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use riffle::StreamEnv;
    /// let env = StreamEnv::new();
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let into = seen.clone();
    /// env.from_iter(vec![1u32, 2, 3]).sink_fn(move |x| {
    ///     into.lock().unwrap().push(x);
    ///     Ok(())
    /// });
    /// env.execute().unwrap();
    /// let mut seen = seen.lock().unwrap().clone();
    /// seen.sort();
    /// assert_eq!(seen, vec![1, 2, 3]);
    /// ```
    pub fn sink_fn<F>(&self, f: F) -> DataStreamSink
    where
        F: FnMut(T) -> crate::Result<()> + Clone + Send + Sync + 'static,
    {
        self.sink(crate::sink::FnSink::new(f))
    }

    /// Prints the stream to standard output as JSON lines.
    pub fn print(&self) -> DataStreamSink {
        self.sink(StdoutSink::new())
    }

    /// The records a source could not decode (its dead-letter output). Without this call, a
    /// source whose policy is dead-letter writes them to files under the job's `dead_letter_dir`.
    pub fn dead_letters(&self) -> DataStream<DeadLetter> {
        self.side(DEAD_LETTER_TAG)
    }

    /// The side output `tag` of the operator that produces this stream.
    pub fn get_side_output<S: Data>(&self, tag: &OutputTag<S>) -> DataStream<S> {
        self.side(tag.id())
    }

    fn side<S: Data>(&self, tag: &str) -> DataStream<S> {
        DataStream::new(
            self.env.clone(),
            self.node,
            Slot::Side(tag.to_string()),
            Ship::Forward,
        )
    }

    fn with_node(&self, setter: &str, change: impl FnOnce(&mut Node)) -> Self {
        if self.slot != Slot::Main || !matches!(self.ship, Ship::Forward) {
            self.env.defer_error(format!(
                "`{setter}` applies to an operator: call it on the stream the operator returned, \
                 not after rebalance(), broadcast(), key_by() or on a side output"
            ));
        } else {
            change(&mut self.env.nodes.borrow_mut()[self.node]);
        }
        self.clone()
    }

    /// Records a setting of the operator producing this stream, shown in its plan.
    pub(crate) fn with_setting(&self, name: &str, value: String) -> Self {
        self.with_node("setting", |node| {
            node.settings.push((name.to_string(), value))
        })
    }

    /// Names the operator that produces this stream (in metrics, logs and errors).
    pub fn name(&self, name: &str) -> Self {
        self.with_node("name", |node| node.name = name.to_string())
    }

    /// Gives the operator a stable id, so its state maps onto a new version of the job.
    pub fn uid(&self, uid: &str) -> Self {
        self.with_node("uid", |node| node.uid = Some(uid.to_string()))
    }

    /// Sets the number of parallel subtasks of the operator that produces this stream. Like every
    /// setting of an operator (and [`StreamEnv::set_parallelism`](crate::StreamEnv::set_parallelism)),
    /// it takes `&self`: the returned stream is this one, for chaining.
    pub fn set_parallelism(&self, parallelism: usize) -> Self {
        self.with_node("set_parallelism", |node| {
            node.parallelism = Some(parallelism)
        })
    }

    /// Starts a new task chain at this operator instead of chaining it to its input.
    pub fn start_new_chain(&self) -> Self {
        self.with_node("start_new_chain", |node| node.start_new_chain = true)
    }
}

impl<T: Data + AsRef<[u8]>> DataStream<T> {
    /// Parses JSON payloads (strings or bytes) into records of type `U`. Payloads that do not
    /// parse follow `policy`; with [`BadRecordPolicy::DeadLetter`] they are available through
    /// [`dead_letters`](DataStream::dead_letters) on the returned stream.
    ///
    /// ```
    /// use riffle::{StreamEnv, sink::CollectSink, source::BadRecordPolicy};
    /// let env = StreamEnv::new();
    /// let (sink, numbers) = CollectSink::new();
    /// let (dead, letters) = CollectSink::new();
    /// let parsed = env.from_iter(vec!["1".to_string(), "x".into()]).parse_json::<u64>(BadRecordPolicy::DeadLetter);
    /// parsed.sink(sink);
    /// parsed.dead_letters().sink(dead);
    /// env.execute().unwrap();
    /// assert_eq!((numbers.values(), letters.len()), (vec![1], 1));
    /// ```
    pub fn parse_json<U: Data>(&self, policy: BadRecordPolicy) -> DataStream<U> {
        let mut node = operator_node("ParseJson", vec![self.edge()], move || {
            Ok(ParseJson::<T, U>::new(policy))
        });
        node.bad_records = Some(policy);
        self.add(node)
    }

    /// Renamed [`parse_with_decoder`](Self::parse_with_decoder).
    #[deprecated(
        since = "0.2.0",
        note = "renamed `parse_with_decoder`, one name for a custom decoder everywhere"
    )]
    pub fn parse_json_with<U: Data>(
        &self,
        policy: BadRecordPolicy,
        decoder: crate::operators::JsonDecoder<U>,
    ) -> DataStream<U> {
        self.parse_with_decoder(policy, decoder)
    }

    /// As [`parse_json`](DataStream::parse_json), decoding each payload with `decoder`: one
    /// that knows the schema can be several times faster than the derived `Deserialize`. A
    /// payload it refuses follows `policy`, with its error's text as the dead letter's reason.
    ///
    /// ```
    /// use riffle::{StreamEnv, sink::CollectSink, source::BadRecordPolicy};
    /// fn even(json: &str) -> serde_json::Result<u64> {
    ///     let n: u64 = serde_json::from_str(json)?;
    ///     if n % 2 == 0 { Ok(n) } else { Err(serde::de::Error::custom("odd")) }
    /// }
    /// let env = StreamEnv::new();
    /// let (sink, numbers) = CollectSink::new();
    /// let (dead, letters) = CollectSink::new();
    /// let parsed = env
    ///     .from_iter(vec!["2".to_string(), "3".into()])
    ///     .parse_with_decoder(BadRecordPolicy::DeadLetter, even);
    /// parsed.sink(sink);
    /// parsed.dead_letters().sink(dead);
    /// env.execute().unwrap();
    /// assert_eq!(numbers.values(), vec![2]);
    /// assert_eq!(letters.values()[0].error, "odd");
    /// ```
    pub fn parse_with_decoder<U: Data>(
        &self,
        policy: BadRecordPolicy,
        decoder: crate::operators::JsonDecoder<U>,
    ) -> DataStream<U> {
        let mut node = operator_node("ParseJson", vec![self.edge()], move || {
            Ok(ParseJson::<T, U>::with_decoder(policy, decoder))
        });
        node.bad_records = Some(policy);
        self.add(node)
    }
}

/// The end of a stream: a sink, whose name and parallelism can still be set.
#[derive(Clone)]
pub struct DataStreamSink {
    env: Rc<EnvInner>,
    node: NodeId,
}

impl DataStreamSink {
    /// Names the sink operator.
    pub fn name(&self, name: &str) -> Self {
        self.env.nodes.borrow_mut()[self.node].name = name.to_string();
        self.clone()
    }

    /// Gives the sink a stable id.
    pub fn uid(&self, uid: &str) -> Self {
        self.env.nodes.borrow_mut()[self.node].uid = Some(uid.to_string());
        self.clone()
    }

    /// Sets the number of parallel sink subtasks.
    pub fn set_parallelism(&self, parallelism: usize) -> Self {
        self.env.nodes.borrow_mut()[self.node].parallelism = Some(parallelism);
        self.clone()
    }

    /// Runs the sink in its own task instead of chaining it to its input.
    pub fn start_new_chain(&self) -> Self {
        self.env.nodes.borrow_mut()[self.node].start_new_chain = true;
        self.clone()
    }
}

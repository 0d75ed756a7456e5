//! Two streams connected into one two-input operator: [`ConnectedStreams`] (`a.connect(&b)`) and
//! [`KeyedConnectedStreams`] (`a.key_by(f).connect(&b.key_by(g))`), as Flink's.
//!
//! Each input keeps its own partitioning (forward, rebalance, broadcast, or by key); the operator
//! reads [`Either`] in one task per subtask, so its watermark is the minimum of both inputs', its
//! checkpoint barriers are aligned across both, and keyed state and timers are shared by both.

use std::hash::Hash;
use std::sync::Arc;

use crate::api::declared::operator_node;
use crate::api::keyed::KeyedStream;
use crate::api::stream::DataStream;
use crate::error::Result;
use crate::graph::{Edge, Node, Ship, Slot};
use crate::keys::KeyFn;
use crate::operators::{BuildOperator, OutOf};
use crate::operators::{
    CoMap, CoProcess, CoProcessFn, CoProcessFunction, KeyedCo, KeyedCoProcessFunction,
    KeyedProcess, Operator, ProcessContext,
};
use crate::record::{Data, Either};

/// Two streams of possibly different types, to be processed by one two-input operator.
///
/// ```
/// use riffle::{EnvConfig, StreamEnv, sink::CollectSink};
///
/// let env = StreamEnv::with_config(EnvConfig::deterministic());
/// let (sink, out) = CollectSink::new();
/// let clicks = env.from_iter(vec![1u64, 2, 3]);
/// let names = env.from_iter(vec!["ann".to_string()]);
/// clicks.connect(&names).map(|n| n.to_string(), |name| name.to_uppercase()).sink(sink);
/// env.execute().unwrap();
/// assert_eq!(out.sorted(), vec!["1", "2", "3", "ANN"]);
/// ```
pub struct ConnectedStreams<A, B> {
    first: DataStream<A>,
    second: DataStream<B>,
}

/// The edges of a two-input operator: the first input's records become `Either::Left`, the
/// second's `Either::Right`.
fn two_input_edges<A: Data, B: Data>(first: &DataStream<A>, second: &DataStream<B>) -> Vec<Edge> {
    vec![
        first
            .edge()
            .into_input(Either::<A, B>::Left, Either::<A, B>::left),
        second
            .edge()
            .into_input(Either::<A, B>::Right, Either::<A, B>::right),
    ]
}

impl<A: Data, B: Data> ConnectedStreams<A, B> {
    pub(crate) fn new(first: DataStream<A>, second: DataStream<B>) -> Self {
        ConnectedStreams { first, second }
    }

    /// Applies a custom two-input [`Operator`] reading [`Either`], one instance per subtask.
    pub fn transform<Op, F>(&self, name: &str, factory: F) -> DataStream<OutOf<Op>>
    where
        Op: BuildOperator,
        Op::Operator: Operator<In = Either<A, B>>,
        F: Fn() -> Op + Send + Sync + 'static,
    {
        let node = operator_node(
            name,
            two_input_edges(&self.first, &self.second),
            move || Ok(factory()),
        );
        let id = self.first.env.add_node(node);
        DataStream::new(self.first.env.clone(), id, Slot::Main, Ship::Forward)
    }

    /// Maps the first input's records with `first` and the second's with `second`, into one
    /// stream (Flink's `CoMapFunction`; a typed union of two types with `Either::Left` and
    /// `Either::Right`).
    pub fn map<Out, F1, F2>(&self, first: F1, second: F2) -> DataStream<Out>
    where
        Out: Data,
        F1: Fn(A) -> Out + Send + Sync + 'static,
        F2: Fn(B) -> Out + Send + Sync + 'static,
    {
        let (first, second) = (Arc::new(first), Arc::new(second));
        self.transform("CoMap", move || CoMap::new(first.clone(), second.clone()))
    }

    /// The trait form is now [`process_function`](Self::process_function), as on every other
    /// stream; `process` will take closures here too.
    #[deprecated(
        since = "0.2.0",
        note = "renamed `process_function`; `process` takes closures on every other stream"
    )]
    pub fn process<Out, P>(&self, function: P) -> DataStream<Out>
    where
        Out: Data,
        P: CoProcessFunction<A, B, Out> + Clone + Sync,
    {
        self.process_function(function)
    }

    /// Runs a [`CoProcessFunction`] (a struct, one method per input); each subtask gets a clone.
    pub fn process_function<Out, P>(&self, function: P) -> DataStream<Out>
    where
        Out: Data,
        P: CoProcessFunction<A, B, Out> + Clone + Sync,
    {
        self.transform("CoProcess", move || CoProcess::new(function.clone()))
    }

    /// As [`process_function`](ConnectedStreams::process_function) with two closures, whose
    /// types are inferred.
    ///
    /// ```
    /// use riffle::{EnvConfig, StreamEnv, sink::CollectSink};
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, out) = CollectSink::new();
    /// env.from_iter(vec![2u64]).connect(&env.from_iter(vec![-1i64]))
    ///     .process_with(|n, ctx| ctx.emit(n as i64 * 10), |m, ctx| ctx.emit(m))
    ///     .sink(sink);
    /// env.execute().unwrap();
    /// assert_eq!(out.sorted(), vec![-1, 20]);
    /// ```
    pub fn process_with<Out, F1, F2>(&self, first: F1, second: F2) -> DataStream<Out>
    where
        Out: Data,
        F1: FnMut(A, &mut ProcessContext<'_, '_, Out>) -> Result<()>
            + Clone
            + Send
            + Sync
            + 'static,
        F2: FnMut(B, &mut ProcessContext<'_, '_, Out>) -> Result<()>
            + Clone
            + Send
            + Sync
            + 'static,
    {
        self.process_function(CoProcessFn::new(first, second))
    }

    /// Partitions both inputs by key (`first` for the first input, `second` for the second), so
    /// records of one key of both inputs meet in one subtask.
    pub fn key_by<K, F1, F2>(&self, first: F1, second: F2) -> KeyedConnectedStreams<K, A, B>
    where
        K: Data + Hash + Eq,
        F1: Fn(&A) -> K + Send + Sync + 'static,
        F2: Fn(&B) -> K + Send + Sync + 'static,
    {
        KeyedConnectedStreams::new(self.first.key_by(first), self.second.key_by(second))
    }
}

/// Two streams keyed by the same kind of key, processed together: each key's records of both
/// inputs reach the same subtask, where they share the key's state and timers.
pub struct KeyedConnectedStreams<K, A, B> {
    first: KeyedStream<K, A>,
    second: KeyedStream<K, B>,
}

impl<K: Data + Hash + Eq, A: Data, B: Data> KeyedConnectedStreams<K, A, B> {
    pub(crate) fn new(first: KeyedStream<K, A>, second: KeyedStream<K, B>) -> Self {
        KeyedConnectedStreams { first, second }
    }

    /// The key of a record of either input.
    pub(crate) fn key(&self) -> KeyFn<K, Either<A, B>> {
        let (first, second) = (self.first.key_selector(), self.second.key_selector());
        Arc::new(move |value: &Either<A, B>| match value {
            Either::Left(a) => first(a),
            Either::Right(b) => second(b),
        })
    }

    /// Adds a keyed two-input operator (its state and timers in the job's state backend).
    pub(crate) fn add_keyed<Op, F>(&self, name: &str, factory: F) -> DataStream<OutOf<Op>>
    where
        Op: BuildOperator,
        Op::Operator: Operator<In = Either<A, B>>,
        F: Fn() -> Op + Send + Sync + 'static,
    {
        let (first, second) = (self.first.input(), self.second.input());
        let mut node: Node =
            operator_node(name, two_input_edges(first, second), move || Ok(factory()));
        node.keyed = true;
        node.settings
            .push(("key".to_string(), std::any::type_name::<K>().to_string()));
        let id = first.env.add_node(node);
        DataStream::new(first.env.clone(), id, Slot::Main, Ship::Forward)
    }

    /// The trait form is now [`process_function`](Self::process_function), as on every other
    /// stream; `process` will take closures here too.
    #[deprecated(
        since = "0.2.0",
        note = "renamed `process_function`; `process` takes closures on every other stream"
    )]
    pub fn process<Out, P>(&self, function: P) -> DataStream<Out>
    where
        Out: Data,
        P: KeyedCoProcessFunction<K, A, B, Out> + Clone + Sync,
    {
        self.process_function(function)
    }

    /// Runs a [`KeyedCoProcessFunction`] on both inputs; each subtask gets a clone.
    pub fn process_function<Out, P>(&self, function: P) -> DataStream<Out>
    where
        Out: Data,
        P: KeyedCoProcessFunction<K, A, B, Out> + Clone + Sync,
    {
        let key = self.key();
        self.add_keyed("KeyedCoProcess", move || {
            KeyedProcess::new(key.clone(), KeyedCo(function.clone()))
        })
    }
}

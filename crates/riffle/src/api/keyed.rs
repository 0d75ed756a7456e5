//! [`KeyedStream`]: a stream partitioned by key, on which keyed operators run.

use std::hash::Hash;
use std::sync::Arc;

use crate::aggregate::AggregateFunction;
use crate::api::WindowedStream;
use crate::api::stream::{DataStream, operator_node};
use crate::graph::{Node, Ship, Slot};
use crate::operators::{
    KeyedProcess, KeyedProcessFunction, Rolling, RollingAggregate, RollingCombine,
};
use crate::record::Data;
use crate::window::Windows;

/// The key selector of a keyed stream.
pub type KeyFn<K, T> = Arc<dyn Fn(&T) -> K + Send + Sync>;

/// A stream partitioned by a key: every record of a key is processed by the same subtask, which
/// owns the key's key group (and, with the state API, its state).
///
/// ```
/// use riffle::{StreamEnv, Result, sink::CollectSink, operators::KeyedContext};
///
/// let env = StreamEnv::new();
/// let (sink, output) = CollectSink::new();
/// env.from_iter(vec![(1u64, "a".to_string()), (2, "b".to_string()), (1, "c".to_string())])
///     .key_by(|(user, _)| *user)
///     .process(|user: &u64, (_, page): (u64, String), ctx: &mut KeyedContext<'_, '_, u64, String>| -> Result<()> {
///         ctx.emit(format!("user {user} saw {page}"))
///     })
///     .sink(sink);
/// env.execute().unwrap();
/// assert_eq!(output.sorted(), vec!["user 1 saw a", "user 1 saw c", "user 2 saw b"]);
/// ```
pub struct KeyedStream<K, T> {
    input: DataStream<T>,
    key: KeyFn<K, T>,
}

impl<K, T> KeyedStream<K, T>
where
    K: Data + Hash + Eq,
    T: Data,
{
    pub(crate) fn new(input: DataStream<T>, key: KeyFn<K, T>) -> Self {
        KeyedStream { input, key }
    }

    /// The key selector.
    pub fn key_selector(&self) -> Arc<dyn Fn(&T) -> K + Send + Sync> {
        self.key.clone()
    }

    /// Runs `function` on every record with a context that knows the record's key; each subtask
    /// gets its own clone of `function`.
    pub fn process<Out, P>(&self, function: P) -> DataStream<Out>
    where
        Out: Data,
        P: KeyedProcessFunction<K, T, Out> + Clone + Sync,
    {
        let key = self.key.clone();
        self.add_keyed("KeyedProcess", move || {
            KeyedProcess::new(key.clone(), function.clone())
        })
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

    /// Cuts the stream into windows (per key): [`Tumbling`](crate::window::Tumbling),
    /// [`Sliding`](crate::window::Sliding) or [`Session`](crate::window::Session).
    pub fn window(&self, windows: Windows) -> WindowedStream<K, T> {
        WindowedStream::new(
            KeyedStream {
                input: self.input.clone(),
                key: self.key.clone(),
            },
            windows,
        )
    }

    /// The keyed input stream.
    pub(crate) fn input(&self) -> &DataStream<T> {
        &self.input
    }

    pub(crate) fn add_keyed<Op, F>(&self, name: &str, factory: F) -> DataStream<Op::Out>
    where
        Op: crate::operators::Operator<In = T>,
        F: Fn() -> Op + Send + Sync + 'static,
    {
        let mut node: Node = operator_node(name, vec![self.input.edge()], move || Ok(factory()));
        node.keyed = true;
        let id = self.input.env.add_node(node);
        DataStream::new(self.input.env.clone(), id, Slot::Main, Ship::Forward)
    }
}

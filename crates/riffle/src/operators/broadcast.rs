//! Broadcast state (Flink's broadcast state pattern): a low-volume stream (rules, configuration,
//! a lookup table) is sent to every subtask of an operator, which keeps it in *broadcast state*:
//! maps declared by [`MapStateDescriptor`]s, equal on every subtask, that the high-volume input
//! reads.
//!
//! - [`BroadcastProcessFunction`] (after `events.connect_broadcast(&rules)`):
//!   `process_element` reads the broadcast state ([`ReadOnlyBroadcastContext`]),
//!   `process_broadcast_element` reads and writes it ([`BroadcastContext`]).
//! - [`KeyedBroadcastProcessFunction`] (after `events.key_by(f).connect_broadcast(&rules)`):
//!   the same, plus keyed state and timers for the keyed input's records and timers
//!   ([`KeyedReadOnlyBroadcastContext`]).
//!
//! Only broadcast records may change the broadcast state and every subtask sees every one of
//! them, so every subtask's copy stays equal, provided `process_broadcast_element` is
//! deterministic and the order of updates does not matter where it can differ: records of one
//! subtask of the broadcast stream arrive in order everywhere, records of different ones
//! interleave differently on each subtask (as in Flink). The state is non-keyed operator state: at a checkpoint every subtask writes its
//! copy ([`Redistribution::Broadcast`]); a restore at any parallelism gives every new subtask
//! exactly one copy.

use std::any::Any;
use std::collections::HashMap;
use std::hash::Hash;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use crate::checkpoint::{Redistribution, RestoreState, SnapshotWriter, decode, encode};
use crate::error::{Error, Result};
use crate::operators::{
    BuildOperator, Collector, KeyedContext, KeyedProcess, KeyedProcessFunction, OpenKeyedProcess,
    Operator, OperatorContext, ProcessContext, TwoInput, TwoInputOperator,
};
use crate::record::{Data, Record, Timestamp};
use crate::state::{MapStateDescriptor, TimeDomain};

/// One map of broadcast state, its key and value types hidden.
trait ErasedMap: Send {
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn encode(&self) -> Result<Vec<u8>>;
    fn restore(&mut self, bytes: &[u8]) -> Result<()>;
    fn len(&self) -> usize;
}

impl<K: Data + Hash + Eq, V: Data> ErasedMap for HashMap<K, V> {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn encode(&self) -> Result<Vec<u8>> {
        // Sorted by encoded key: equal copies encode equally on every subtask.
        let mut entries = self
            .iter()
            .map(|(k, v)| Ok((encode(k)?, v)))
            .collect::<Result<Vec<_>>>()?;
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let values: Vec<(&[u8], &V)> = entries.iter().map(|(k, v)| (k.as_slice(), *v)).collect();
        encode(&values)
    }
    fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        let entries: Vec<(Vec<u8>, V)> = decode(bytes)?;
        self.clear();
        for (key, value) in entries {
            self.insert(decode(&key)?, value);
        }
        Ok(())
    }
    fn len(&self) -> usize {
        HashMap::len(self)
    }
}

type MapFactory = Arc<dyn Fn() -> Box<dyn ErasedMap> + Send + Sync>;

/// The broadcast states an operator declares: their names and types (what
/// [`DataStream::broadcast_state`](crate::DataStream::broadcast_state) and
/// [`BroadcastStream::and_state`](crate::api::BroadcastStream::and_state) collect).
#[derive(Clone, Default)]
pub struct BroadcastStateDeclarations {
    declared: Vec<(&'static str, MapFactory)>,
}

impl BroadcastStateDeclarations {
    /// Declares the map state `descriptor` (a second declaration of the same name is an error
    /// when the operator opens).
    pub fn declare<K: Data + Hash + Eq, V: Data>(&mut self, descriptor: &MapStateDescriptor<K, V>) {
        let factory: MapFactory = Arc::new(|| Box::new(HashMap::<K, V>::new()));
        self.declared.push((descriptor.name(), factory));
    }

    /// The names declared, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.declared.iter().map(|(name, _)| *name).collect()
    }

    /// Empty broadcast state of every declared descriptor.
    pub fn instantiate(&self) -> Result<BroadcastStates> {
        let mut maps: Vec<(&'static str, Box<dyn ErasedMap>)> = Vec::new();
        for (name, factory) in &self.declared {
            if maps.iter().any(|(n, _)| n == name) {
                return Err(Error::user(format!(
                    "broadcast state `{name}` is declared twice: give each descriptor its own name"
                )));
            }
            maps.push((name, factory()));
        }
        Ok(BroadcastStates { maps })
    }
}

/// The broadcast state of one operator instance: one map per declared descriptor.
pub struct BroadcastStates {
    maps: Vec<(&'static str, Box<dyn ErasedMap>)>,
}

impl BroadcastStates {
    fn find(&self, name: &str) -> Result<&dyn ErasedMap> {
        self.maps
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, map)| map.as_ref())
            .ok_or_else(|| self.undeclared(name))
    }

    fn undeclared(&self, name: &str) -> Error {
        let declared: Vec<&str> = self.maps.iter().map(|(n, _)| *n).collect();
        Error::user(format!(
            "broadcast state `{name}` was not declared: declare it with broadcast_state(..) or \
             and_state(..) on the broadcast stream (declared: {declared:?})"
        ))
    }

    fn mismatch(name: &str) -> Error {
        Error::user(format!(
            "broadcast state `{name}` is read with other key or value types than it was declared \
             with"
        ))
    }

    /// The map of `descriptor`, to read.
    pub fn get<K: Data + Hash + Eq, V: Data>(
        &self,
        descriptor: &MapStateDescriptor<K, V>,
    ) -> Result<&HashMap<K, V>> {
        self.find(descriptor.name())?
            .as_any()
            .downcast_ref()
            .ok_or_else(|| Self::mismatch(descriptor.name()))
    }

    /// The map of `descriptor`, to read and write.
    pub fn get_mut<K: Data + Hash + Eq, V: Data>(
        &mut self,
        descriptor: &MapStateDescriptor<K, V>,
    ) -> Result<&mut HashMap<K, V>> {
        let name = descriptor.name();
        let Some(index) = self.maps.iter().position(|(n, _)| *n == name) else {
            return Err(self.undeclared(name));
        };
        self.maps[index]
            .1
            .as_any_mut()
            .downcast_mut()
            .ok_or_else(|| Self::mismatch(name))
    }

    /// Entries over all maps.
    pub fn len(&self) -> usize {
        self.maps.iter().map(|(_, m)| m.len()).sum()
    }

    /// Whether every map is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes every map (this subtask's copy) as broadcast operator state.
    pub(crate) fn snapshot(&self, writer: &mut SnapshotWriter) -> Result<()> {
        let maps = self
            .maps
            .iter()
            .map(|(name, map)| Ok((name.to_string(), map.encode()?)))
            .collect::<Result<Vec<_>>>()?;
        writer.write_operator(Redistribution::Broadcast, &maps)
    }

    /// Restores the copy the checkpoint handed to this subtask.
    pub(crate) fn restore(&mut self, state: &RestoreState) -> Result<()> {
        // A broadcast redistribution hands out one copy; take the first if there were several.
        let Some(copy) = state.operator::<Vec<(String, Vec<u8>)>>().next() else {
            return Ok(());
        };
        for (name, bytes) in copy? {
            let Some((_, map)) = self.maps.iter_mut().find(|(n, _)| *n == name) else {
                return Err(Error::Checkpoint(format!(
                    "the checkpoint holds broadcast state `{name}`, which this operator does not \
                     declare: declare it (with the same types) or start without restoring"
                )));
            };
            map.restore(&bytes).map_err(|e| {
                Error::Checkpoint(format!(
                    "broadcast state `{name}` does not decode with the declared types: {e}"
                ))
            })?;
        }
        Ok(())
    }
}

/// What [`BroadcastProcessFunction::process_element`] sees: everything of a
/// [`ProcessContext`] (emit, side outputs, timestamp, watermark), and the broadcast state to
/// read.
pub struct ReadOnlyBroadcastContext<'c, 'o, Out> {
    process: ProcessContext<'c, 'o, Out>,
    states: &'c BroadcastStates,
}

impl<'c, 'o, Out> ReadOnlyBroadcastContext<'c, 'o, Out> {
    /// The broadcast state of `descriptor`, read-only (an error if the broadcast stream did not
    /// declare it, or declared other types).
    pub fn broadcast_state<K: Data + Hash + Eq, V: Data>(
        &self,
        descriptor: &MapStateDescriptor<K, V>,
    ) -> Result<&'c HashMap<K, V>> {
        self.states.get(descriptor)
    }
}

impl<'c, 'o, Out> Deref for ReadOnlyBroadcastContext<'c, 'o, Out> {
    type Target = ProcessContext<'c, 'o, Out>;
    fn deref(&self) -> &Self::Target {
        &self.process
    }
}

impl<Out> DerefMut for ReadOnlyBroadcastContext<'_, '_, Out> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.process
    }
}

/// What `process_broadcast_element` sees: everything of a [`ProcessContext`], and the broadcast
/// state to read and write.
pub struct BroadcastContext<'c, 'o, Out> {
    process: ProcessContext<'c, 'o, Out>,
    states: &'c mut BroadcastStates,
}

impl<'c, 'o, Out> BroadcastContext<'c, 'o, Out> {
    /// The broadcast state of `descriptor`, to read and write.
    pub fn broadcast_state<K: Data + Hash + Eq, V: Data>(
        &mut self,
        descriptor: &MapStateDescriptor<K, V>,
    ) -> Result<&mut HashMap<K, V>> {
        self.states.get_mut(descriptor)
    }
}

impl<'c, 'o, Out> Deref for BroadcastContext<'c, 'o, Out> {
    type Target = ProcessContext<'c, 'o, Out>;
    fn deref(&self) -> &Self::Target {
        &self.process
    }
}

impl<Out> DerefMut for BroadcastContext<'_, '_, Out> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.process
    }
}

/// A function over a stream and a broadcast stream, as Flink's `BroadcastProcessFunction`.
///
/// ```
/// use riffle::{EnvConfig, Result, StreamEnv, sink::CollectSink};
/// use riffle::operators::{BroadcastContext, BroadcastProcessFunction, ReadOnlyBroadcastContext};
/// use riffle::state::MapStateDescriptor;
///
/// /// Words are blocked once a rule names them.
/// const BLOCKED: MapStateDescriptor<String, bool> = MapStateDescriptor::new("blocked");
///
/// #[derive(Clone)]
/// struct Censor;
///
/// impl BroadcastProcessFunction<String, String, String> for Censor {
///     fn process_element(&mut self, word: String, ctx: &mut ReadOnlyBroadcastContext<String>) -> Result<()> {
///         if !ctx.broadcast_state(&BLOCKED)?.contains_key(&word) {
///             ctx.emit(word)?;
///         }
///         Ok(())
///     }
///     fn process_broadcast_element(&mut self, rule: String, ctx: &mut BroadcastContext<String>) -> Result<()> {
///         ctx.broadcast_state(&BLOCKED)?.insert(rule, true);
///         Ok(())
///     }
/// }
///
/// let env = StreamEnv::with_config(EnvConfig::deterministic());
/// let (sink, out) = CollectSink::new();
/// let words = env.from_iter(["spam", "ham", "spam", "eggs"].map(String::from));
/// let rules = env.from_iter(vec!["spam".to_string()]).broadcast_state(&BLOCKED);
/// words.connect_broadcast(&rules).process_function(Censor).sink(sink);
/// env.execute().unwrap();
/// // The two inputs have no order between them: a "spam" that came before the rule passed.
/// // (For an answer that does not depend on arrival, see the event-time example of
/// // KeyedBroadcastProcessFunction.)
/// let mut passed = out.values();
/// passed.retain(|w| w != "spam");
/// assert_eq!(passed, vec!["ham", "eggs"]);
/// ```
pub trait BroadcastProcessFunction<In, B, Out>: Send + 'static {
    /// Called once per parallel instance before the first record.
    fn open(&mut self, _ctx: &OperatorContext) -> Result<()> {
        Ok(())
    }
    /// Processes a record of the (non-broadcast) input; the broadcast state is read-only.
    fn process_element(
        &mut self,
        value: In,
        ctx: &mut ReadOnlyBroadcastContext<'_, '_, Out>,
    ) -> Result<()>;
    /// Processes a record of the broadcast input (every subtask gets every one), which may
    /// change the broadcast state.
    fn process_broadcast_element(
        &mut self,
        value: B,
        ctx: &mut BroadcastContext<'_, '_, Out>,
    ) -> Result<()>;
    /// Called once when both inputs ended.
    fn close(&mut self, _out: &mut Collector<'_, Out>) -> Result<()> {
        Ok(())
    }
}

/// The operator that runs a [`BroadcastProcessFunction`], as the job declares it: built on each
/// subtask into an [`OpenBroadcastProcess`] holding the broadcast states.
pub struct BroadcastProcess<A, B, Out, P> {
    function: P,
    declarations: BroadcastStateDeclarations,
    _types: PhantomData<fn(A, B) -> Out>,
}

/// A [`BroadcastProcess`] built on its subtask.
pub struct OpenBroadcastProcess<A, B, Out, P> {
    function: P,
    states: BroadcastStates,
    ctx: OperatorContext,
    _types: PhantomData<fn(A, B) -> Out>,
}

impl<A, B, Out, P> BroadcastProcess<A, B, Out, P> {
    /// The operator for `function`, with the broadcast states `declarations`.
    pub fn new(function: P, declarations: BroadcastStateDeclarations) -> Self {
        BroadcastProcess {
            function,
            declarations,
            _types: PhantomData,
        }
    }
}

impl<A: Data, B: Data, Out: Data, P: BroadcastProcessFunction<A, B, Out>> BuildOperator
    for BroadcastProcess<A, B, Out, P>
{
    type Operator = TwoInput<OpenBroadcastProcess<A, B, Out, P>>;

    fn build(self, ctx: &OperatorContext) -> Result<Self::Operator> {
        Ok(TwoInput::new(OpenBroadcastProcess {
            function: self.function,
            states: self.declarations.instantiate()?,
            ctx: ctx.clone(),
            _types: PhantomData,
        }))
    }
}

/// Publishes the broadcast state's size (entries) in the operator's metrics.
fn report_size(ctx: &OperatorContext, states: &BroadcastStates) {
    ctx.metrics.set_state(states.len() as u64, 0);
}

impl<A: Data, B: Data, Out: Data, P: BroadcastProcessFunction<A, B, Out>> TwoInputOperator
    for OpenBroadcastProcess<A, B, Out, P>
{
    type In1 = A;
    type In2 = B;
    type Out = Out;

    fn open(&mut self, ctx: &OperatorContext) -> Result<()> {
        self.function.open(ctx)
    }

    fn process1(&mut self, batch: &mut Vec<Record<A>>, out: &mut Collector<'_, Out>) -> Result<()> {
        for record in batch.drain(..) {
            let mut ctx = ReadOnlyBroadcastContext {
                process: ProcessContext::new(out, record.timestamp),
                states: &self.states,
            };
            self.function.process_element(record.value, &mut ctx)?;
        }
        Ok(())
    }

    fn process2(&mut self, batch: &mut Vec<Record<B>>, out: &mut Collector<'_, Out>) -> Result<()> {
        for record in batch.drain(..) {
            let mut ctx = BroadcastContext {
                process: ProcessContext::new(out, record.timestamp),
                states: &mut self.states,
            };
            self.function
                .process_broadcast_element(record.value, &mut ctx)?;
        }
        report_size(&self.ctx, &self.states);
        Ok(())
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64, snapshot: &mut SnapshotWriter) -> Result<()> {
        self.states.snapshot(snapshot)
    }

    fn restore_state(&mut self, state: &RestoreState) -> Result<()> {
        self.states.restore(state)?;
        report_size(&self.ctx, &self.states);
        Ok(())
    }

    fn close(&mut self, out: &mut Collector<'_, Out>) -> Result<()> {
        self.function.close(out)
    }
}

/// What [`KeyedBroadcastProcessFunction::process_element`] and `on_timer` see: everything of a
/// [`KeyedContext`] (the key, its state and timers, emit), and the broadcast state to read.
pub struct KeyedReadOnlyBroadcastContext<'a, 'c, 'o, K, Out> {
    keyed: &'a mut KeyedContext<'c, 'o, K, Out>,
    states: &'a BroadcastStates,
}

impl<'a, 'c, 'o, K, Out> KeyedReadOnlyBroadcastContext<'a, 'c, 'o, K, Out> {
    /// The broadcast state of `descriptor`, read-only.
    pub fn broadcast_state<BK: Data + Hash + Eq, BV: Data>(
        &self,
        descriptor: &MapStateDescriptor<BK, BV>,
    ) -> Result<&'a HashMap<BK, BV>> {
        self.states.get(descriptor)
    }
}

impl<'c, 'o, K, Out> Deref for KeyedReadOnlyBroadcastContext<'_, 'c, 'o, K, Out> {
    type Target = KeyedContext<'c, 'o, K, Out>;
    fn deref(&self) -> &Self::Target {
        self.keyed
    }
}

impl<K, Out> DerefMut for KeyedReadOnlyBroadcastContext<'_, '_, '_, K, Out> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.keyed
    }
}

/// A function over a keyed stream and a broadcast stream, as Flink's
/// `KeyedBroadcastProcessFunction`: the keyed input's records have their key's state and timers
/// and read the broadcast state; the broadcast records (no key) read and write it.
///
/// The two inputs have no order between them, but the operator's watermark is the lower of
/// both: a record that waits for an event-time timer at its own time sees every broadcast record
/// up to that time (when the broadcast stream has timestamps and watermarks), whichever came
/// first. This example judges payments by the limits of their country that way:
///
/// ```
/// use riffle::{EnvConfig, Result, StreamEnv, Timestamp, sink::CollectSink, time::WatermarkStrategy};
/// use riffle::operators::{BroadcastContext, KeyedBroadcastProcessFunction, KeyedReadOnlyBroadcastContext};
/// use riffle::state::{MapStateDescriptor, TimeDomain, ValueStateDescriptor};
///
/// const LIMITS: MapStateDescriptor<String, u64> = MapStateDescriptor::new("limits");
/// const AMOUNT: ValueStateDescriptor<u64> = ValueStateDescriptor::new("amount");
///
/// /// (country, amount or limit, event time)
/// type Entry = (String, u64, Timestamp);
///
/// #[derive(Clone)]
/// struct OverLimit;
///
/// impl KeyedBroadcastProcessFunction<String, Entry, Entry, String> for OverLimit {
///     fn process_element(&mut self, _: &String, payment: Entry,
///                        ctx: &mut KeyedReadOnlyBroadcastContext<String, String>) -> Result<()> {
///         ctx.value(&AMOUNT).set(payment.1)?;
///         ctx.register_event_time_timer(payment.2); // judged when the limits are known
///         Ok(())
///     }
///     fn process_broadcast_element(&mut self, limit: Entry, ctx: &mut BroadcastContext<String>) -> Result<()> {
///         ctx.broadcast_state(&LIMITS)?.insert(limit.0, limit.1);
///         Ok(())
///     }
///     fn on_timer(&mut self, country: &String, _: Timestamp, _: TimeDomain,
///                 ctx: &mut KeyedReadOnlyBroadcastContext<String, String>) -> Result<()> {
///         let amount = ctx.value(&AMOUNT).get()?.unwrap_or(0);
///         match ctx.broadcast_state(&LIMITS)?.get(country) {
///             Some(&limit) if amount > limit => ctx.emit(format!("{country}: {amount} > {limit}")),
///             Some(_) => Ok(()),
///             None => ctx.emit(format!("{country}: no limit")),
///         }
///     }
/// }
///
/// let env = StreamEnv::with_config(EnvConfig::deterministic());
/// let (sink, out) = CollectSink::new();
/// let time = || WatermarkStrategy::monotonous().with_timestamps(|e: &Entry| e.2);
/// let entry = |country: &str, n, at| (country.to_string(), n, at);
/// let payments = env.from_iter_with_watermarks(
///     vec![entry("fr", 150, 10), entry("de", 50, 20), entry("it", 500, 30)], time());
/// let limits = env.from_iter_with_watermarks(vec![entry("fr", 100, 0), entry("de", 100, 0)], time());
/// payments
///     .key_by(|p| p.0.clone())
///     .connect_broadcast(&limits.broadcast_state(&LIMITS))
///     .process_function(OverLimit)
///     .sink(sink);
/// env.execute().unwrap();
/// assert_eq!(out.values(), vec!["fr: 150 > 100", "it: no limit"]);
/// ```
pub trait KeyedBroadcastProcessFunction<K, In, B, Out>: Send + 'static {
    /// Called once per parallel instance before the first record.
    fn open(&mut self, _ctx: &OperatorContext) -> Result<()> {
        Ok(())
    }
    /// Processes a record of the keyed input, of key `key`: keyed state and timers, broadcast
    /// state read-only.
    fn process_element(
        &mut self,
        key: &K,
        value: In,
        ctx: &mut KeyedReadOnlyBroadcastContext<'_, '_, '_, K, Out>,
    ) -> Result<()>;
    /// Processes a record of the broadcast input (every subtask gets every one): broadcast state
    /// to read and write, no key.
    fn process_broadcast_element(
        &mut self,
        value: B,
        ctx: &mut BroadcastContext<'_, '_, Out>,
    ) -> Result<()>;
    /// A timer of `key` fired; the broadcast state is read-only.
    fn on_timer(
        &mut self,
        _key: &K,
        _timestamp: Timestamp,
        _domain: TimeDomain,
        _ctx: &mut KeyedReadOnlyBroadcastContext<'_, '_, '_, K, Out>,
    ) -> Result<()> {
        Ok(())
    }
    /// Called once when both inputs ended, after the final watermark's timers fired.
    fn close(&mut self, _out: &mut Collector<'_, Out>) -> Result<()> {
        Ok(())
    }
}

/// A [`KeyedBroadcastProcessFunction`] seen as a [`KeyedProcessFunction`] of the keyed input,
/// holding the broadcast state, so [`KeyedProcess`] runs the keyed part (state, timers, their
/// checkpoints).
pub(crate) struct WithBroadcastState<P, B> {
    function: P,
    states: BroadcastStates,
    _type: PhantomData<fn(B)>,
}

impl<K, A, B, Out, P> KeyedProcessFunction<K, A, Out> for WithBroadcastState<P, B>
where
    B: 'static,
    P: KeyedBroadcastProcessFunction<K, A, B, Out>,
{
    fn open(&mut self, ctx: &OperatorContext) -> Result<()> {
        self.function.open(ctx)
    }

    fn process_element(&mut self, key: &K, value: A, ctx: &mut KeyedContext<K, Out>) -> Result<()> {
        let mut ctx = KeyedReadOnlyBroadcastContext {
            keyed: ctx,
            states: &self.states,
        };
        self.function.process_element(key, value, &mut ctx)
    }

    fn on_timer(
        &mut self,
        key: &K,
        timestamp: Timestamp,
        domain: TimeDomain,
        ctx: &mut KeyedContext<K, Out>,
    ) -> Result<()> {
        let mut ctx = KeyedReadOnlyBroadcastContext {
            keyed: ctx,
            states: &self.states,
        };
        self.function.on_timer(key, timestamp, domain, &mut ctx)
    }

    fn close(&mut self, out: &mut Collector<'_, Out>) -> Result<()> {
        self.function.close(out)
    }
}

/// The operator that runs a [`KeyedBroadcastProcessFunction`], as the job declares it: built on
/// each subtask into an [`OpenKeyedBroadcastProcess`], whose keyed input's records go to a
/// [`KeyedProcess`] (keyed state and timers, checkpointed per key group) while the broadcast
/// records update the broadcast state, checkpointed as broadcast operator state.
pub struct KeyedBroadcastProcess<K, A, B, Out, P> {
    key: crate::keys::KeyFn<K, A>,
    function: P,
    declarations: BroadcastStateDeclarations,
    _types: PhantomData<fn(B) -> Out>,
}

/// A [`KeyedBroadcastProcess`] built on its subtask.
pub struct OpenKeyedBroadcastProcess<K, A, B, Out, P> {
    inner: OpenKeyedProcess<K, A, Out, WithBroadcastState<P, B>>,
}

impl<K, A, B, Out, P> KeyedBroadcastProcess<K, A, B, Out, P> {
    /// The operator for `function`, keying the first input with `key`, with the broadcast states
    /// `declarations`.
    pub fn new(
        key: crate::keys::KeyFn<K, A>,
        function: P,
        declarations: BroadcastStateDeclarations,
    ) -> Self {
        KeyedBroadcastProcess {
            key,
            function,
            declarations,
            _types: PhantomData,
        }
    }
}

impl<K, A, B, Out, P> BuildOperator for KeyedBroadcastProcess<K, A, B, Out, P>
where
    K: Data + Hash + Eq,
    A: Data,
    B: Data,
    Out: Data,
    P: KeyedBroadcastProcessFunction<K, A, B, Out>,
{
    type Operator = TwoInput<OpenKeyedBroadcastProcess<K, A, B, Out, P>>;

    fn build(self, ctx: &OperatorContext) -> Result<Self::Operator> {
        let function = WithBroadcastState {
            function: self.function,
            states: self.declarations.instantiate()?,
            _type: PhantomData,
        };
        Ok(TwoInput::new(OpenKeyedBroadcastProcess {
            inner: KeyedProcess::new(self.key, function).build(ctx)?,
        }))
    }
}

impl<K, A, B, Out, P> TwoInputOperator for OpenKeyedBroadcastProcess<K, A, B, Out, P>
where
    K: Data + Hash + Eq,
    A: Data,
    B: Data,
    Out: Data,
    P: KeyedBroadcastProcessFunction<K, A, B, Out>,
{
    type In1 = A;
    type In2 = B;
    type Out = Out;

    fn open(&mut self, ctx: &OperatorContext) -> Result<()> {
        self.inner.open(ctx)
    }

    fn process1(&mut self, batch: &mut Vec<Record<A>>, out: &mut Collector<'_, Out>) -> Result<()> {
        self.inner.process(batch, out)
    }

    fn process2(&mut self, batch: &mut Vec<Record<B>>, out: &mut Collector<'_, Out>) -> Result<()> {
        // Keyed records of the batch before these broadcast ones saw the state before them.
        let function = self.inner.function_mut();
        for record in batch.drain(..) {
            let mut ctx = BroadcastContext {
                process: ProcessContext::new(out, record.timestamp),
                states: &mut function.states,
            };
            function
                .function
                .process_broadcast_element(record.value, &mut ctx)?;
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Collector<'_, Out>) -> Result<()> {
        self.inner.on_watermark(watermark, out)
    }

    fn on_tick(&mut self, out: &mut Collector<'_, Out>) -> Result<()> {
        self.inner.on_tick(out)
    }

    fn snapshot_state(&mut self, checkpoint_id: u64, snapshot: &mut SnapshotWriter) -> Result<()> {
        self.inner.snapshot_state(checkpoint_id, snapshot)?;
        self.inner.function_mut().states.snapshot(snapshot)
    }

    fn restore_state(&mut self, state: &RestoreState) -> Result<()> {
        self.inner.restore_state(state)?;
        self.inner.function_mut().states.restore(state)
    }

    fn close(&mut self, out: &mut Collector<'_, Out>) -> Result<()> {
        self.inner.close(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: MapStateDescriptor<String, u32> = MapStateDescriptor::new("rules");
    const OTHER: MapStateDescriptor<u64, String> = MapStateDescriptor::new("other");

    fn declared() -> BroadcastStateDeclarations {
        let mut declarations = BroadcastStateDeclarations::default();
        declarations.declare(&RULES);
        declarations.declare(&OTHER);
        declarations
    }

    #[test]
    fn broadcast_state_round_trips_through_a_snapshot() {
        let mut states = declared().instantiate().unwrap();
        states.get_mut(&RULES).unwrap().insert("a".into(), 1);
        states.get_mut(&RULES).unwrap().insert("b".into(), 2);
        states.get_mut(&OTHER).unwrap().insert(7, "x".into());
        let mut writer = SnapshotWriter::default();
        states.snapshot(&mut writer).unwrap();
        assert_eq!(
            writer.operator.as_ref().unwrap().0,
            Redistribution::Broadcast
        );
        let mut restored = declared().instantiate().unwrap();
        restored
            .restore(&RestoreState::from_snapshot(&writer))
            .unwrap();
        assert_eq!(restored.get(&RULES).unwrap(), states.get(&RULES).unwrap());
        assert_eq!(restored.get(&OTHER).unwrap(), states.get(&OTHER).unwrap());
        assert_eq!(restored.len(), 3);
    }

    #[test]
    fn equal_maps_encode_equally_whatever_their_insertion_order() {
        let mut one = declared().instantiate().unwrap();
        let mut two = declared().instantiate().unwrap();
        for i in 0..100u32 {
            one.get_mut(&RULES).unwrap().insert(i.to_string(), i);
            two.get_mut(&RULES)
                .unwrap()
                .insert((99 - i).to_string(), 99 - i);
        }
        let (mut a, mut b) = (SnapshotWriter::default(), SnapshotWriter::default());
        one.snapshot(&mut a).unwrap();
        two.snapshot(&mut b).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn undeclared_or_mistyped_state_is_a_clear_error() {
        let mut only_rules = BroadcastStateDeclarations::default();
        only_rules.declare(&RULES);
        let states = only_rules.instantiate().unwrap();
        let err = states.get(&OTHER).unwrap_err().to_string();
        assert!(
            err.contains("broadcast state `other` was not declared"),
            "{err}"
        );
        const MISTYPED: MapStateDescriptor<String, String> = MapStateDescriptor::new("rules");
        let err = states.get(&MISTYPED).unwrap_err().to_string();
        assert!(err.contains("other key or value types"), "{err}");
        let mut twice = only_rules.clone();
        twice.declare(&RULES);
        assert!(twice.instantiate().is_err());

        // A checkpoint with state the new job does not declare is refused, naming it.
        let mut full = declared().instantiate().unwrap();
        full.get_mut(&OTHER).unwrap().insert(1, "x".into());
        let mut writer = SnapshotWriter::default();
        full.snapshot(&mut writer).unwrap();
        let err = only_rules
            .instantiate()
            .unwrap()
            .restore(&RestoreState::from_snapshot(&writer))
            .unwrap_err()
            .to_string();
        assert!(err.contains("broadcast state `other`"), "{err}");
    }
}

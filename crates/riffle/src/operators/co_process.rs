//! Functions over two connected streams (Flink's `CoProcessFunction`, `KeyedCoProcessFunction`,
//! `CoMapFunction`).
//!
//! A two-input operator ([`TwoInputOperator`]) runs in one task whose watermark is the minimum of
//! both inputs' and whose checkpoints align barriers across both. The functions here have one
//! method per input; a
//! keyed one shares its keyed state and timers between both inputs, so a record of one input can
//! see what the other left for the same key.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::error::Result;
use crate::operators::{
    BuildOperator, Collector, KeyedContext, KeyedProcessFunction, OperatorContext, ProcessContext,
    TwoInput, TwoInputOperator,
};
use crate::record::{Data, Either, Record, Timestamp};
use crate::state::TimeDomain;

/// A function over two connected streams, as Flink's `CoProcessFunction`: one method per input,
/// each with a context to emit, send to side outputs and read the record's time.
///
/// ```
/// use riffle::{EnvConfig, Result, StreamEnv, operators::{CoProcessFunction, ProcessContext}, sink::CollectSink};
///
/// /// Tags each record with the input it came from.
/// #[derive(Clone)]
/// struct Tag;
///
/// impl CoProcessFunction<u64, String, String> for Tag {
///     fn process_element1(&mut self, n: u64, ctx: &mut ProcessContext<String>) -> Result<()> {
///         ctx.emit(format!("number {n}"))
///     }
///     fn process_element2(&mut self, w: String, ctx: &mut ProcessContext<String>) -> Result<()> {
///         ctx.emit(format!("word {w}"))
///     }
/// }
///
/// let env = StreamEnv::with_config(EnvConfig::deterministic());
/// let (sink, out) = CollectSink::new();
/// env.from_iter(vec![7u64]).connect(&env.from_iter(vec!["x".to_string()])).process_function(Tag).sink(sink);
/// env.execute().unwrap();
/// assert_eq!(out.sorted(), vec!["number 7", "word x"]);
/// ```
pub trait CoProcessFunction<A, B, Out>: Send + 'static {
    /// Called once per parallel instance before the first record.
    fn open(&mut self, _ctx: &OperatorContext) -> Result<()> {
        Ok(())
    }
    /// Processes a record of the first input.
    fn process_element1(&mut self, value: A, ctx: &mut ProcessContext<Out>) -> Result<()>;
    /// Processes a record of the second input.
    fn process_element2(&mut self, value: B, ctx: &mut ProcessContext<Out>) -> Result<()>;
    /// Every record of input `input` (0 or 1) arrived; the other input may go on.
    fn end_input(&mut self, _input: usize, _out: &mut Collector<'_, Out>) -> Result<()> {
        Ok(())
    }
    /// Called once when both inputs ended.
    fn close(&mut self, _out: &mut Collector<'_, Out>) -> Result<()> {
        Ok(())
    }
}

/// A [`CoProcessFunction`] of two closures, one per input (what
/// [`ConnectedStreams::process_with`](crate::api::ConnectedStreams::process_with) runs).
#[derive(Clone)]
pub struct CoProcessFn<F1, F2> {
    first: F1,
    second: F2,
}

impl<F1, F2> CoProcessFn<F1, F2> {
    /// The function calling `first` for the first input's records and `second` for the second's.
    pub fn new(first: F1, second: F2) -> Self {
        CoProcessFn { first, second }
    }
}

impl<A, B, Out, F1, F2> CoProcessFunction<A, B, Out> for CoProcessFn<F1, F2>
where
    F1: FnMut(A, &mut ProcessContext<Out>) -> Result<()> + Send + 'static,
    F2: FnMut(B, &mut ProcessContext<Out>) -> Result<()> + Send + 'static,
{
    fn process_element1(&mut self, value: A, ctx: &mut ProcessContext<Out>) -> Result<()> {
        (self.first)(value, ctx)
    }
    fn process_element2(&mut self, value: B, ctx: &mut ProcessContext<Out>) -> Result<()> {
        (self.second)(value, ctx)
    }
}

/// The operator that runs a [`CoProcessFunction`].
pub struct CoProcess<A, B, Out, P> {
    function: P,
    _types: PhantomData<fn(A, B) -> Out>,
}

impl<A, B, Out, P> CoProcess<A, B, Out, P> {
    /// The operator for `function`.
    pub fn new(function: P) -> Self {
        CoProcess {
            function,
            _types: PhantomData,
        }
    }
}

impl<A: Data, B: Data, Out: Data, P: CoProcessFunction<A, B, Out>> TwoInputOperator
    for CoProcess<A, B, Out, P>
{
    type In1 = A;
    type In2 = B;
    type Out = Out;

    fn open(&mut self, ctx: &OperatorContext) -> Result<()> {
        self.function.open(ctx)
    }

    fn process1(&mut self, batch: &mut Vec<Record<A>>, out: &mut Collector<'_, Out>) -> Result<()> {
        for record in batch.drain(..) {
            let mut ctx = ProcessContext::new(out, record.timestamp);
            self.function.process_element1(record.value, &mut ctx)?;
        }
        Ok(())
    }

    fn process2(&mut self, batch: &mut Vec<Record<B>>, out: &mut Collector<'_, Out>) -> Result<()> {
        for record in batch.drain(..) {
            let mut ctx = ProcessContext::new(out, record.timestamp);
            self.function.process_element2(record.value, &mut ctx)?;
        }
        Ok(())
    }

    fn end_input(&mut self, input: usize, out: &mut Collector<'_, Out>) -> Result<()> {
        self.function.end_input(input, out)
    }

    fn close(&mut self, out: &mut Collector<'_, Out>) -> Result<()> {
        self.function.close(out)
    }
}

impl<A: Data, B: Data, Out: Data, P: CoProcessFunction<A, B, Out>> BuildOperator
    for CoProcess<A, B, Out, P>
{
    type Operator = TwoInput<Self>;

    fn build(self, _ctx: &OperatorContext) -> Result<TwoInput<Self>> {
        Ok(TwoInput::new(self))
    }
}

/// The operator of [`ConnectedStreams::map`](crate::api::ConnectedStreams::map): one function per
/// input, both to the same output type (Flink's `CoMapFunction`).
pub struct CoMap<A, B, Out, F1, F2> {
    first: Arc<F1>,
    second: Arc<F2>,
    _types: PhantomData<fn(A, B) -> Out>,
}

impl<A, B, Out, F1, F2> CoMap<A, B, Out, F1, F2> {
    /// The operator mapping first-input records with `first`, second-input ones with `second`.
    pub fn new(first: Arc<F1>, second: Arc<F2>) -> Self {
        CoMap {
            first,
            second,
            _types: PhantomData,
        }
    }
}

impl<A, B, Out, F1, F2> TwoInputOperator for CoMap<A, B, Out, F1, F2>
where
    A: Data,
    B: Data,
    Out: Data,
    F1: Fn(A) -> Out + Send + Sync + 'static,
    F2: Fn(B) -> Out + Send + Sync + 'static,
{
    type In1 = A;
    type In2 = B;
    type Out = Out;

    fn process1(&mut self, batch: &mut Vec<Record<A>>, out: &mut Collector<'_, Out>) -> Result<()> {
        for record in batch.drain(..) {
            out.emit(Record::timed((self.first)(record.value), record.timestamp))?;
        }
        Ok(())
    }

    fn process2(&mut self, batch: &mut Vec<Record<B>>, out: &mut Collector<'_, Out>) -> Result<()> {
        for record in batch.drain(..) {
            out.emit(Record::timed((self.second)(record.value), record.timestamp))?;
        }
        Ok(())
    }
}

impl<A, B, Out, F1, F2> BuildOperator for CoMap<A, B, Out, F1, F2>
where
    A: Data,
    B: Data,
    Out: Data,
    F1: Fn(A) -> Out + Send + Sync + 'static,
    F2: Fn(B) -> Out + Send + Sync + 'static,
{
    type Operator = TwoInput<Self>;

    fn build(self, _ctx: &OperatorContext) -> Result<TwoInput<Self>> {
        Ok(TwoInput::new(self))
    }
}

/// A function over two streams keyed alike, as Flink's `KeyedCoProcessFunction`: both inputs
/// share the key's state and timers.
///
/// ```
/// use riffle::{EnvConfig, Result, StreamEnv, sink::CollectSink};
/// use riffle::operators::{KeyedContext, KeyedCoProcessFunction};
/// use riffle::state::ValueStateDescriptor;
///
/// /// Emits each order with the latest price of its item seen before it.
/// #[derive(Clone)]
/// struct Price;
///
/// const PRICE: ValueStateDescriptor<u64> = ValueStateDescriptor::new("price");
///
/// impl KeyedCoProcessFunction<String, (String, u64), (String, u64), String> for Price {
///     fn process_element1(&mut self, item: &String, order: (String, u64), ctx: &mut KeyedContext<String, String>) -> Result<()> {
///         match ctx.value(&PRICE).get()? {
///             Some(price) => ctx.emit(format!("{item}: {} x {price}", order.1)),
///             None => ctx.emit(format!("{item}: no price yet")),
///         }
///     }
///     fn process_element2(&mut self, _: &String, price: (String, u64), ctx: &mut KeyedContext<String, String>) -> Result<()> {
///         ctx.value(&PRICE).set(price.1)
///     }
/// }
///
/// let env = StreamEnv::with_config(EnvConfig::deterministic());
/// let (sink, out) = CollectSink::new();
/// let orders = env.from_iter(vec![("tea".to_string(), 2u64)]);
/// let prices = env.from_iter(vec![("coffee".to_string(), 5u64)]);
/// orders.key_by(|o| o.0.clone()).connect(&prices.key_by(|p| p.0.clone())).process_function(Price).sink(sink);
/// env.execute().unwrap();
/// assert_eq!(out.values(), vec!["tea: no price yet"]);
/// ```
pub trait KeyedCoProcessFunction<K, A, B, Out>: Send + 'static {
    /// Called once per parallel instance before the first record.
    fn open(&mut self, _ctx: &OperatorContext) -> Result<()> {
        Ok(())
    }
    /// Processes a record of the first input, of key `key`.
    fn process_element1(&mut self, key: &K, value: A, ctx: &mut KeyedContext<K, Out>)
    -> Result<()>;
    /// Processes a record of the second input, of key `key`.
    fn process_element2(&mut self, key: &K, value: B, ctx: &mut KeyedContext<K, Out>)
    -> Result<()>;
    /// A timer of `key` fired (registered by either input's records).
    fn on_timer(
        &mut self,
        _key: &K,
        _timestamp: Timestamp,
        _domain: TimeDomain,
        _ctx: &mut KeyedContext<K, Out>,
    ) -> Result<()> {
        Ok(())
    }
    /// Called once when both inputs ended, after the final watermark's timers fired.
    fn close(&mut self, _out: &mut Collector<'_, Out>) -> Result<()> {
        Ok(())
    }
}

/// Runs a [`KeyedCoProcessFunction`] as a [`KeyedProcessFunction`] over [`Either`].
#[derive(Clone)]
pub(crate) struct KeyedCo<P>(pub(crate) P);

impl<K, A, B, Out, P> KeyedProcessFunction<K, Either<A, B>, Out> for KeyedCo<P>
where
    P: KeyedCoProcessFunction<K, A, B, Out>,
{
    fn open(&mut self, ctx: &OperatorContext) -> Result<()> {
        self.0.open(ctx)
    }

    fn process_element(
        &mut self,
        key: &K,
        value: Either<A, B>,
        ctx: &mut KeyedContext<K, Out>,
    ) -> Result<()> {
        match value {
            Either::Left(a) => self.0.process_element1(key, a, ctx),
            Either::Right(b) => self.0.process_element2(key, b, ctx),
        }
    }

    fn on_timer(
        &mut self,
        key: &K,
        timestamp: Timestamp,
        domain: TimeDomain,
        ctx: &mut KeyedContext<K, Out>,
    ) -> Result<()> {
        self.0.on_timer(key, timestamp, domain, ctx)
    }

    fn close(&mut self, out: &mut Collector<'_, Out>) -> Result<()> {
        self.0.close(out)
    }
}

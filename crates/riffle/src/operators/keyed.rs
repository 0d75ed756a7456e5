//! Keyed processing: a user function called for every record with a context that knows the
//! record's key (and, as the state API grows, its state and timers).

use std::marker::PhantomData;

use crate::api::KeyFn;
use crate::error::Result;
use crate::operators::{Collector, Operator};
use crate::record::{Data, Record, Timestamp};

/// The low-level keyed function, as Flink's `KeyedProcessFunction`.
///
/// Implemented for closures `FnMut(&K, In, &mut KeyedContext<K, Out>) -> Result<()>`.
pub trait KeyedProcessFunction<K, In, Out>: Send + 'static {
    /// Processes one record of key `key`.
    fn process_element(&mut self, key: &K, value: In, ctx: &mut KeyedContext<'_, '_, K, Out>) -> Result<()>;
}

impl<K, In, Out, F> KeyedProcessFunction<K, In, Out> for F
where
    F: FnMut(&K, In, &mut KeyedContext<'_, '_, K, Out>) -> Result<()> + Send + 'static,
{
    fn process_element(&mut self, key: &K, value: In, ctx: &mut KeyedContext<'_, '_, K, Out>) -> Result<()> {
        self(key, value, ctx)
    }
}

/// What a keyed function sees of the record it processes.
pub struct KeyedContext<'c, 'o, K, Out> {
    key: &'c K,
    timestamp: Timestamp,
    out: &'c mut Collector<'o, Out>,
}

impl<K, Out: Data> KeyedContext<'_, '_, K, Out> {
    /// The key of the current record.
    pub fn key(&self) -> &K {
        self.key
    }

    /// The current record's event timestamp, if it has one.
    pub fn timestamp(&self) -> Option<Timestamp> {
        Record { value: (), timestamp: self.timestamp }.timestamp()
    }

    /// The operator's current event-time watermark.
    pub fn current_watermark(&self) -> Timestamp {
        self.out.current_watermark()
    }

    /// Emits a value with the current record's timestamp.
    pub fn emit(&mut self, value: Out) -> Result<()> {
        self.out.emit(Record { value, timestamp: self.timestamp })
    }

    /// Emits a value with another timestamp.
    pub fn emit_with_timestamp(&mut self, value: Out, timestamp: Timestamp) -> Result<()> {
        self.out.emit(Record { value, timestamp })
    }
}

/// The operator that runs a [`KeyedProcessFunction`].
pub struct KeyedProcess<K, In, Out, P> {
    key: KeyFn<K, In>,
    function: P,
    _types: PhantomData<fn(In) -> Out>,
}

impl<K, In, Out, P> KeyedProcess<K, In, Out, P> {
    /// The operator for `function`, keyed by `key`.
    pub fn new(key: KeyFn<K, In>, function: P) -> Self {
        KeyedProcess { key, function, _types: PhantomData }
    }
}

impl<K, In, Out, P> Operator for KeyedProcess<K, In, Out, P>
where
    K: Send + 'static,
    In: Data,
    Out: Data,
    P: KeyedProcessFunction<K, In, Out>,
{
    type In = In;
    type Out = Out;

    fn process(&mut self, batch: &mut Vec<Record<In>>, out: &mut Collector<'_, Out>) -> Result<()> {
        for record in batch.drain(..) {
            let key = (self.key)(&record.value);
            let mut ctx = KeyedContext { key: &key, timestamp: record.timestamp, out };
            self.function.process_element(&key, record.value, &mut ctx)?;
        }
        Ok(())
    }
}

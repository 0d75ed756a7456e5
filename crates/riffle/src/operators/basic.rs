//! Stateless record-at-a-time operators: map, fallible map, filter, flat map, identity.
//!
//! Each keeps the input record's timestamp. Filter works in place: the batch it received is the
//! batch it passes on.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::error::{BoxError, Error, Result};
use crate::operators::{Collector, Operator};
use crate::record::{Data, Record};

/// Applies a function to every record.
pub struct Map<In, Out, F> {
    f: Arc<F>,
    buffer: Vec<Record<Out>>,
    _types: PhantomData<fn(In) -> Out>,
}

impl<In, Out, F> Map<In, Out, F> {
    /// A map with the shared function `f`.
    pub fn new(f: Arc<F>) -> Self {
        Map {
            f,
            buffer: Vec::new(),
            _types: PhantomData,
        }
    }
}

impl<In: Data, Out: Data, F: Fn(In) -> Out + Send + Sync + 'static> Operator for Map<In, Out, F> {
    type In = In;
    type Out = Out;

    fn process(&mut self, batch: &mut Vec<Record<In>>, out: &mut Collector<'_, Out>) -> Result<()> {
        let f = &*self.f;
        self.buffer.extend(batch.drain(..).map(|r| Record {
            value: f(r.value),
            timestamp: r.timestamp,
        }));
        out.emit_batch(&mut self.buffer)
    }
}

/// Applies a function that may fail to every record; the first error fails the job.
pub struct TryMap<In, Out, F> {
    f: Arc<F>,
    buffer: Vec<Record<Out>>,
    _types: PhantomData<fn(In) -> Out>,
}

impl<In, Out, F> TryMap<In, Out, F> {
    /// A fallible map with the shared function `f`.
    pub fn new(f: Arc<F>) -> Self {
        TryMap {
            f,
            buffer: Vec::new(),
            _types: PhantomData,
        }
    }
}

impl<In, Out, F> Operator for TryMap<In, Out, F>
where
    In: Data,
    Out: Data,
    F: Fn(In) -> Result<Out, BoxError> + Send + Sync + 'static,
{
    type In = In;
    type Out = Out;

    fn process(&mut self, batch: &mut Vec<Record<In>>, out: &mut Collector<'_, Out>) -> Result<()> {
        for record in batch.drain(..) {
            let value = (self.f)(record.value).map_err(Error::User)?;
            self.buffer.push(Record {
                value,
                timestamp: record.timestamp,
            });
        }
        out.emit_batch(&mut self.buffer)
    }
}

/// Keeps the records that satisfy a predicate.
pub struct Filter<T, F> {
    predicate: Arc<F>,
    _type: PhantomData<fn(T)>,
}

impl<T, F> Filter<T, F> {
    /// A filter with the shared predicate.
    pub fn new(predicate: Arc<F>) -> Self {
        Filter {
            predicate,
            _type: PhantomData,
        }
    }
}

impl<T: Data, F: Fn(&T) -> bool + Send + Sync + 'static> Operator for Filter<T, F> {
    type In = T;
    type Out = T;

    fn process(&mut self, batch: &mut Vec<Record<T>>, out: &mut Collector<'_, T>) -> Result<()> {
        let predicate = &*self.predicate;
        batch.retain(|r| predicate(&r.value));
        out.emit_batch(batch)
    }
}

/// Turns every record into zero or more records.
pub struct FlatMap<In, Out, I, F> {
    f: Arc<F>,
    buffer: Vec<Record<Out>>,
    _types: PhantomData<fn(In) -> I>,
}

impl<In, Out, I, F> FlatMap<In, Out, I, F> {
    /// A flat map with the shared function `f`.
    pub fn new(f: Arc<F>) -> Self {
        FlatMap {
            f,
            buffer: Vec::new(),
            _types: PhantomData,
        }
    }
}

impl<In, Out, I, F> Operator for FlatMap<In, Out, I, F>
where
    In: Data,
    Out: Data,
    I: IntoIterator<Item = Out> + 'static,
    F: Fn(In) -> I + Send + Sync + 'static,
{
    type In = In;
    type Out = Out;

    fn process(&mut self, batch: &mut Vec<Record<In>>, out: &mut Collector<'_, Out>) -> Result<()> {
        for record in batch.drain(..) {
            let timestamp = record.timestamp;
            for value in (self.f)(record.value) {
                self.buffer.push(Record { value, timestamp });
            }
            if self.buffer.len() >= 4096 {
                out.emit_batch(&mut self.buffer)?;
            }
        }
        out.emit_batch(&mut self.buffer)
    }
}

/// Passes records through unchanged (the operator behind `union`).
pub struct Identity<T>(PhantomData<fn(T)>);

impl<T> Identity<T> {
    /// The identity operator.
    pub fn new() -> Self {
        Identity(PhantomData)
    }
}

impl<T> Default for Identity<T> {
    fn default() -> Self {
        Identity::new()
    }
}

impl<T: Data> Operator for Identity<T> {
    type In = T;
    type Out = T;

    fn process(&mut self, batch: &mut Vec<Record<T>>, out: &mut Collector<'_, T>) -> Result<()> {
        out.emit_batch(batch)
    }
}

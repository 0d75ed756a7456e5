//! Processing a non-keyed stream record by record with a context (Flink's `ProcessFunction`):
//! emit any number of results, send records to side outputs, read the record's timestamp and
//! the current watermark.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::error::Result;
use crate::operators::{Collector, Operator, OutputTag};
use crate::record::{Data, EventTime, Record, Timestamp};

/// What a process function sees for one record.
pub struct ProcessContext<'c, 'o, Out> {
    out: &'c mut Collector<'o, Out>,
    timestamp: Option<EventTime>,
}

impl<'c, 'o, Out: Data> ProcessContext<'c, 'o, Out> {
    pub(crate) fn new(out: &'c mut Collector<'o, Out>, timestamp: Option<EventTime>) -> Self {
        ProcessContext { out, timestamp }
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

    /// Sends a value to a side output (with the current record's timestamp); `false` if
    /// nothing in the job consumes it (then counted in `side_output_unconsumed` and dropped).
    pub fn side_output<S: Data>(&mut self, tag: &OutputTag<S>, value: S) -> Result<bool> {
        self.out
            .side_output(tag, Record::timed(value, self.timestamp))
    }

    /// The current record's event time, if it has one.
    pub fn timestamp(&self) -> Option<Timestamp> {
        self.timestamp.map(EventTime::millis)
    }

    /// The operator's current event-time watermark.
    pub fn current_watermark(&self) -> Timestamp {
        self.out.current_watermark()
    }
}

/// The operator behind [`DataStream::process`](crate::DataStream::process).
pub struct Process<In, Out, F> {
    f: Arc<F>,
    _types: PhantomData<fn(In) -> Out>,
}

impl<In, Out, F> Process<In, Out, F> {
    /// Runs the shared function `f` on every record.
    pub fn new(f: Arc<F>) -> Self {
        Process {
            f,
            _types: PhantomData,
        }
    }
}

impl<In, Out, F> Operator for Process<In, Out, F>
where
    In: Data,
    Out: Data,
    F: Fn(In, &mut ProcessContext<'_, '_, Out>) -> Result<()> + Send + Sync + 'static,
{
    type In = In;
    type Out = Out;

    fn process(&mut self, batch: &mut Vec<Record<In>>, out: &mut Collector<'_, Out>) -> Result<()> {
        for record in batch.drain(..) {
            let mut ctx = ProcessContext {
                out: &mut *out,
                timestamp: record.timestamp,
            };
            (self.f)(record.value, &mut ctx)?;
        }
        Ok(())
    }
}

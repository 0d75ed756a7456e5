//! The operator at the end of a stream: hands batches to a [`SinkWriter`].

use crate::error::Result;
use crate::operators::{Collector, Operator};
use crate::record::{Data, Record};
use crate::sink::SinkWriter;

/// Writes every batch to a sink writer; flushes it on every tick and closes it at the end.
pub struct SinkOperator<T> {
    writer: Box<dyn SinkWriter<T>>,
}

impl<T> SinkOperator<T> {
    /// The operator around `writer`.
    pub fn new(writer: Box<dyn SinkWriter<T>>) -> Self {
        SinkOperator { writer }
    }
}

impl<T: Data> Operator for SinkOperator<T> {
    type In = T;
    type Out = ();

    fn process(&mut self, batch: &mut Vec<Record<T>>, _out: &mut Collector<'_, ()>) -> Result<()> {
        self.writer.write(batch)
    }

    fn on_tick(&mut self, _out: &mut Collector<'_, ()>) -> Result<()> {
        self.writer.flush()
    }

    fn close(&mut self, _out: &mut Collector<'_, ()>) -> Result<()> {
        self.writer.close()
    }
}

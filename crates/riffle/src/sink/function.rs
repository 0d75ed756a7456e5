//! A sink from a closure, for quick jobs: every record is handed to `f` (each subtask calls its
//! own clone). At-least-once: after a restore, records since the last checkpoint are handed over
//! again.

use std::marker::PhantomData;

use crate::error::Result;
use crate::operators::OperatorContext;
use crate::record::{Data, Record};
use crate::sink::{Sink, SinkWriter};

/// Hands every record to a closure: what [`DataStream::sink_fn`](crate::DataStream::sink_fn)
/// adds.
pub struct FnSink<T, F> {
    f: F,
    _records: PhantomData<fn(T)>,
}

impl<T, F> FnSink<T, F> {
    /// The sink calling `f(record)`.
    pub fn new(f: F) -> Self {
        FnSink {
            f,
            _records: PhantomData,
        }
    }
}

impl<T, F> Sink<T> for FnSink<T, F>
where
    T: Data,
    F: FnMut(T) -> Result<()> + Clone + Send + Sync + 'static,
{
    fn name(&self) -> String {
        "sink_fn".into()
    }

    fn writer(&self, _ctx: &OperatorContext) -> Result<Box<dyn SinkWriter<T>>> {
        Ok(Box::new(FnWriter(self.f.clone())))
    }
}

struct FnWriter<F>(F);

impl<T, F: FnMut(T) -> Result<()> + Send> SinkWriter<T> for FnWriter<F> {
    fn write(&mut self, batch: &mut Vec<Record<T>>) -> Result<()> {
        for record in batch.drain(..) {
            (self.0)(record.value)?;
        }
        Ok(())
    }
}

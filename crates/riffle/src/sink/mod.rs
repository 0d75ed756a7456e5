//! Sinks: where a job's records go.
//!
//! A [`Sink`] creates one [`SinkWriter`] per parallel subtask. Built in: JSON-lines files
//! ([`FileSink`]), standard output ([`StdoutSink`]), a blackhole for benchmarks
//! ([`BlackholeSink`]), an in-memory collector for tests ([`CollectSink`]), and a throttle that
//! makes any sink slow ([`ThrottledSink`], the seed's back-pressure scenario).
//!
//! These sinks give at-least-once delivery: what they wrote before a failure stays written.

mod collect;
mod file;
mod simple;

pub use collect::{CollectSink, Collected};
pub use file::FileSink;
pub use simple::{BlackholeSink, StdoutSink, ThrottledSink};

use crate::error::Result;
use crate::operators::OperatorContext;
use crate::record::{Data, Record};

/// A destination for a stream; creates the writer of each subtask.
pub trait Sink<T: Data>: Send + Sync + 'static {
    /// The default name of the sink's operator (`Sink: <name>`).
    fn name(&self) -> String;

    /// Checks the sink's configuration (a writable path) before the job starts.
    fn validate(&self) -> Result<()> {
        Ok(())
    }

    /// The writer of one subtask.
    fn writer(&self, ctx: &OperatorContext) -> Result<Box<dyn SinkWriter<T>>>;
}

/// Writes the records of one sink subtask.
pub trait SinkWriter<T>: Send {
    /// Writes the records of `batch` (taking them out of it).
    fn write(&mut self, batch: &mut Vec<Record<T>>) -> Result<()>;

    /// Makes what was written so far visible (called every buffer timeout).
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }

    /// The stream ended: flush and release resources.
    fn close(&mut self) -> Result<()> {
        self.flush()
    }
}

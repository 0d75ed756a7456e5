//! Small sinks: standard output, a blackhole, and a throttle around any sink.

use std::io::Write;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::operators::OperatorContext;
use crate::record::{Data, Record};
use crate::sink::{Sink, SinkWriter};

/// Prints records to standard output as JSON lines.
pub struct StdoutSink<T>(PhantomData<fn(T)>);

impl<T> StdoutSink<T> {
    /// The stdout sink.
    pub fn new() -> Self {
        StdoutSink(PhantomData)
    }
}

impl<T> Default for StdoutSink<T> {
    fn default() -> Self {
        StdoutSink::new()
    }
}

impl<T: Data> Sink<T> for StdoutSink<T> {
    fn name(&self) -> String {
        "stdout".into()
    }

    fn writer(&self, _ctx: &OperatorContext) -> Result<Box<dyn SinkWriter<T>>> {
        Ok(Box::new(StdoutWriter { line: Vec::new() }))
    }
}

struct StdoutWriter {
    line: Vec<u8>,
}

impl<T: Data> SinkWriter<T> for StdoutWriter {
    fn write(&mut self, batch: &mut Vec<Record<T>>) -> Result<()> {
        self.line.clear();
        for record in batch.drain(..) {
            serde_json::to_writer(&mut self.line, &record.value).map_err(Error::user)?;
            self.line.push(b'\n');
        }
        std::io::stdout()
            .lock()
            .write_all(&self.line)
            .map_err(|e| Error::io("cannot write to stdout", e))
    }

    fn flush(&mut self) -> Result<()> {
        std::io::stdout()
            .flush()
            .map_err(|e| Error::io("cannot write to stdout", e))
    }
}

/// Discards every record (they are still counted in the sink's `records_in`): for benchmarks.
pub struct BlackholeSink<T>(PhantomData<fn(T)>);

impl<T> BlackholeSink<T> {
    /// The blackhole sink.
    pub fn new() -> Self {
        BlackholeSink(PhantomData)
    }
}

impl<T> Default for BlackholeSink<T> {
    fn default() -> Self {
        BlackholeSink::new()
    }
}

impl<T: Data> Sink<T> for BlackholeSink<T> {
    fn name(&self) -> String {
        "blackhole".into()
    }

    fn writer(&self, _ctx: &OperatorContext) -> Result<Box<dyn SinkWriter<T>>> {
        Ok(Box::new(BlackholeWriter))
    }
}

struct BlackholeWriter;

impl<T: Data> SinkWriter<T> for BlackholeWriter {
    fn write(&mut self, batch: &mut Vec<Record<T>>) -> Result<()> {
        batch.clear();
        Ok(())
    }
}

/// Slows any sink down to a number of records per second per subtask: the slow Kafka cluster of
/// the seed's back-pressure scenario, on demand.
///
/// ```
/// use riffle::sink::{BlackholeSink, ThrottledSink};
/// let slow = ThrottledSink::new(BlackholeSink::<u64>::new(), 1_000.0);
/// ```
pub struct ThrottledSink<S> {
    inner: S,
    records_per_second: f64,
}

impl<S> ThrottledSink<S> {
    /// `inner`, taking at most `records_per_second` records per second in each subtask.
    pub fn new(inner: S, records_per_second: f64) -> Self {
        ThrottledSink {
            inner,
            records_per_second,
        }
    }
}

impl<T: Data, S: Sink<T>> Sink<T> for ThrottledSink<S> {
    fn name(&self) -> String {
        format!(
            "{} (throttled to {}/s)",
            self.inner.name(),
            self.records_per_second
        )
    }

    fn validate(&self) -> Result<()> {
        if !(self.records_per_second > 0.0 && self.records_per_second.is_finite()) {
            return Err(Error::config(
                "sink rate",
                format!("must be a positive number, got {}", self.records_per_second),
            ));
        }
        self.inner.validate()
    }

    fn guarantee(&self) -> crate::sink::Guarantee {
        self.inner.guarantee()
    }

    fn writer(&self, ctx: &OperatorContext) -> Result<Box<dyn SinkWriter<T>>> {
        Ok(Box::new(ThrottledWriter {
            inner: self.inner.writer(ctx)?,
            per_record: Duration::from_secs_f64(1.0 / self.records_per_second),
            next_free: None,
        }))
    }
}

struct ThrottledWriter<T> {
    inner: Box<dyn SinkWriter<T>>,
    per_record: Duration,
    /// When the writer may accept the next record.
    next_free: Option<Instant>,
}

impl<T: Data> SinkWriter<T> for ThrottledWriter<T> {
    fn write(&mut self, batch: &mut Vec<Record<T>>) -> Result<()> {
        let now = Instant::now();
        // Never bank more than a short burst of idle time.
        let start = self.next_free.map_or(now, |t| {
            t.max(now - self.per_record.min(Duration::from_millis(10)))
        });
        let due = start + self.per_record * batch.len() as u32;
        self.next_free = Some(due);
        self.inner.write(batch)?;
        let wait = due.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.inner.flush()
    }

    fn pre_commit(&mut self, checkpoint_id: u64) -> Result<Option<Vec<u8>>> {
        self.inner.pre_commit(checkpoint_id)
    }

    fn commit(&mut self, checkpoint_id: u64) -> Result<()> {
        self.inner.commit(checkpoint_id)
    }

    fn recover(&mut self, committables: Vec<Vec<u8>>) -> Result<()> {
        self.inner.recover(committables)
    }

    fn close(&mut self) -> Result<Option<crate::sink::Finalizer>> {
        self.inner.close()
    }
}

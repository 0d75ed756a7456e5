//! The plumbing between the operators of a chain: [`Output`], the receiving side of a stream
//! inside a task (the next operator, a fan-out, or the network writer at the end of the chain),
//! the [`Collector`] an operator emits through, and its side outputs. One place, below both the
//! operators that emit and the runtime that connects them.

use std::any::Any;
use std::sync::Arc;

use super::OutputTag;
use crate::checkpoint::TaskSnapshot;
use crate::error::Result;
use crate::metrics::OperatorMetrics;
use crate::record::{CheckpointBarrier, Data, LatencyMarker, Record, Timestamp};

/// The receiving side of a stream inside a task: the next operator of a chain, a fan-out to
/// several, or the network writer at the end of the chain.
///
/// Every method is called from the task's thread only.
pub(crate) trait Output<T>: Send {
    /// Called once on the task's thread before anything else.
    fn open(&mut self) -> Result<()> {
        Ok(())
    }
    /// Takes the records out of `batch` (leaving it empty, its capacity for reuse).
    fn records(&mut self, batch: &mut Vec<Record<T>>) -> Result<()>;
    /// Reads the records of `batch`, which other outputs read too (a fan-out): by default
    /// copies them into `copy` (empty, kept between calls for its capacity) and takes those.
    fn shared_records(&mut self, batch: &[Record<T>], copy: &mut Vec<Record<T>>) -> Result<()>
    where
        T: Clone,
    {
        copy.extend_from_slice(batch);
        self.records(copy)
    }
    /// The event-time watermark advanced.
    fn watermark(&mut self, watermark: Timestamp) -> Result<()>;
    /// The stream became idle (no data, must not hold back watermarks) or active again.
    fn idle(&mut self, idle: bool) -> Result<()>;
    /// A checkpoint barrier: each operator writes its state into `snapshot`, then the barrier
    /// goes on downstream.
    fn barrier(&mut self, barrier: CheckpointBarrier, snapshot: &mut TaskSnapshot) -> Result<()>;
    /// Checkpoint `checkpoint_id` completed on every task: commit what it covers.
    fn notify_complete(&mut self, _checkpoint_id: u64) -> Result<()> {
        Ok(())
    }
    /// Every channel of input `input` of a multi-input task ended (the task's head operator
    /// is told; nothing is passed on: the operators after it have one input).
    fn end_input(&mut self, _input: usize) -> Result<()> {
        Ok(())
    }
    /// A latency marker from a source: recorded by each operator, passed on downstream.
    fn latency_marker(&mut self, _marker: LatencyMarker) -> Result<()> {
        Ok(())
    }
    /// Periodic call (every buffer timeout): flush partial batches, processing-time work.
    fn tick(&mut self) -> Result<()>;
    /// The input ended: close operators in chain order, flush, signal the end downstream.
    fn finish(&mut self) -> Result<()>;
}

/// The side outputs of one operator instance that have a consumer, by tag name.
#[derive(Default)]
pub(crate) struct SideOutputs {
    outputs: Vec<(String, Box<dyn ErasedSideOutput>)>,
    /// Where records sent to a tag without consumer are counted.
    metrics: Option<Arc<OperatorMetrics>>,
    /// The tags without consumer already warned about (once per tag).
    warned: Vec<String>,
}

impl SideOutputs {
    pub(crate) fn insert(&mut self, tag: String, output: Box<dyn ErasedSideOutput>) {
        self.outputs.push((tag, output));
    }

    /// Counts records sent to a tag without consumer in `metrics`.
    pub(crate) fn count_unconsumed_in(&mut self, metrics: Arc<OperatorMetrics>) {
        self.metrics = Some(metrics);
    }

    /// A record went to `tag`, which nothing consumes: count it, warn once per tag.
    fn unconsumed(&mut self, tag: &str) {
        if let Some(metrics) = &self.metrics {
            metrics.add_side_output_unconsumed(1);
        }
        if !self.warned.iter().any(|t| t == tag) {
            self.warned.push(tag.to_string());
            let operator = self
                .metrics
                .as_ref()
                .map(|m| m.name.as_str())
                .unwrap_or("?");
            tracing::warn!(
                operator,
                tag,
                "records sent to side output `{tag}` are dropped: nothing in the job consumes it \
                 (counted in side_output_unconsumed; consume it with get_side_output)"
            );
        }
    }

    fn get<T: Data>(&mut self, tag: &str) -> Option<&mut Box<dyn Output<T>>> {
        let (_, output) = self.outputs.iter_mut().find(|(id, _)| id == tag)?;
        output
            .as_any()
            .downcast_mut::<TypedSideOutput<T>>()
            .map(|typed| &mut typed.0)
    }

    /// Forwards a control event to every side output.
    pub(crate) fn for_each(
        &mut self,
        mut f: impl FnMut(&mut dyn ErasedSideOutput) -> Result<()>,
    ) -> Result<()> {
        for (_, output) in &mut self.outputs {
            f(output.as_mut())?;
        }
        Ok(())
    }
}

/// A side output whose record type is hidden; control events reach it all the same, so its
/// consumers see watermarks and the end of input like any other stream.
pub(crate) trait ErasedSideOutput: Send {
    fn as_any(&mut self) -> &mut dyn Any;
    fn open(&mut self) -> Result<()>;
    fn watermark(&mut self, watermark: Timestamp) -> Result<()>;
    fn idle(&mut self, idle: bool) -> Result<()>;
    fn latency_marker(&mut self, marker: crate::record::LatencyMarker) -> Result<()>;
    fn barrier(
        &mut self,
        barrier: crate::record::CheckpointBarrier,
        snapshot: &mut crate::checkpoint::TaskSnapshot,
    ) -> Result<()>;
    fn notify_complete(&mut self, checkpoint_id: u64) -> Result<()>;
    fn tick(&mut self) -> Result<()>;
    fn finish(&mut self) -> Result<()>;
}

/// The typed side output behind an [`ErasedSideOutput`].
pub(crate) struct TypedSideOutput<T>(pub(crate) Box<dyn Output<T>>);

impl<T: Data> ErasedSideOutput for TypedSideOutput<T> {
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
    fn open(&mut self) -> Result<()> {
        self.0.open()
    }
    fn watermark(&mut self, watermark: Timestamp) -> Result<()> {
        self.0.watermark(watermark)
    }
    fn idle(&mut self, idle: bool) -> Result<()> {
        self.0.idle(idle)
    }
    fn latency_marker(&mut self, marker: crate::record::LatencyMarker) -> Result<()> {
        self.0.latency_marker(marker)
    }
    fn barrier(
        &mut self,
        barrier: crate::record::CheckpointBarrier,
        snapshot: &mut crate::checkpoint::TaskSnapshot,
    ) -> Result<()> {
        self.0.barrier(barrier, snapshot)
    }
    fn notify_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        self.0.notify_complete(checkpoint_id)
    }
    fn tick(&mut self) -> Result<()> {
        self.0.tick()
    }
    fn finish(&mut self) -> Result<()> {
        self.0.finish()
    }
}

/// Where an operator emits its records: the next operator of the chain or the task's network
/// output. Records are buffered into batches of the job's batch size.
pub struct Collector<'a, T> {
    next: &'a mut dyn Output<T>,
    buffer: &'a mut Vec<Record<T>>,
    side: &'a mut SideOutputs,
    batch_size: usize,
    emitted: u64,
    watermark: Timestamp,
}

impl<'a, T: Data> Collector<'a, T> {
    pub(crate) fn new(
        next: &'a mut dyn Output<T>,
        buffer: &'a mut Vec<Record<T>>,
        side: &'a mut SideOutputs,
        batch_size: usize,
        watermark: Timestamp,
    ) -> Self {
        Collector {
            next,
            buffer,
            side,
            batch_size,
            emitted: 0,
            watermark,
        }
    }

    /// Emits one record.
    pub fn emit(&mut self, record: Record<T>) -> Result<()> {
        self.buffer.push(record);
        if self.buffer.len() >= self.batch_size {
            self.flush()?;
        }
        Ok(())
    }

    /// Emits a value with a timestamp; `i64::MIN` is no event time and fails the job (a bug of
    /// the operator, not of its input).
    pub fn emit_value(&mut self, value: T, timestamp: Timestamp) -> Result<()> {
        let time = crate::record::EventTime::try_from(timestamp).map_err(crate::Error::user)?;
        self.emit(Record::timed(value, Some(time)))
    }

    /// Emits a whole batch, leaving `batch` empty. Cheaper than emitting one by one.
    pub fn emit_batch(&mut self, batch: &mut Vec<Record<T>>) -> Result<()> {
        self.flush()?;
        if !batch.is_empty() {
            self.emitted += batch.len() as u64;
            self.next.records(batch)?;
            batch.clear();
        }
        Ok(())
    }

    /// Sends `record` to the side output `tag`. Returns `false` if the job declared no consumer
    /// for that side output: the record is then dropped, counted in the operator's
    /// `side_output_unconsumed` metric and warned about once per tag (never silently).
    pub fn side_output<S: Data>(&mut self, tag: &OutputTag<S>, record: Record<S>) -> Result<bool> {
        match self.side.get::<S>(&tag.id) {
            Some(output) => {
                output.records(&mut vec![record])?;
                Ok(true)
            }
            None => {
                self.side.unconsumed(&tag.id);
                Ok(false)
            }
        }
    }

    /// The operator's current event-time watermark.
    pub fn current_watermark(&self) -> Timestamp {
        self.watermark
    }

    pub(crate) fn flush(&mut self) -> Result<()> {
        if !self.buffer.is_empty() {
            self.emitted += self.buffer.len() as u64;
            self.next.records(self.buffer)?;
            self.buffer.clear();
        }
        Ok(())
    }

    pub(crate) fn emitted(&self) -> u64 {
        self.emitted
    }
}

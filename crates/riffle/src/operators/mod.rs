//! Operators: what a job's steps are made of.
//!
//! An [`Operator`] receives batches of records and control events from one task loop and is never
//! called concurrently (Flink's mailbox model), so it needs no locks. Only
//! [`process`](Operator::process) is required; the hooks for watermarks, periodic ticks,
//! checkpoints and the end of input default to doing nothing. Operators of a chain call each other
//! directly through their [`Collector`]: no channel, no copy, no serialization.

pub(crate) mod adaptive;
mod async_io;
mod basic;
mod broadcast;
mod co_process;
mod decode;
mod dedup;
mod interval_join;
mod keyed;
mod process;
mod regular_join;
mod rolling;

use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;

pub(crate) use async_io::RequestFn;
pub use async_io::{AsyncConfig, AsyncFailure, AsyncOrder, AsyncWait};
pub use basic::{Filter, FlatMap, Identity, Map, TryMap};
pub use broadcast::{
    BroadcastContext, BroadcastProcess, BroadcastProcessFunction, BroadcastStateDeclarations,
    BroadcastStates, KeyedBroadcastProcess, KeyedBroadcastProcessFunction,
    KeyedReadOnlyBroadcastContext, ReadOnlyBroadcastContext,
};
pub(crate) use co_process::KeyedCo;
pub use co_process::{CoMap, CoProcess, CoProcessFn, CoProcessFunction, KeyedCoProcessFunction};
pub use decode::{JsonDecoder, ParseJson};
pub use dedup::{KeepFirst, KeepLast};
pub use interval_join::{IntervalJoinOperator, IntervalJoinSpec, JoinContext, ProcessJoinFunction};
pub use keyed::{KeyedContext, KeyedProcess, KeyedProcessFunction, ProcessWithTimers};
pub use process::{Process, ProcessContext};
pub use regular_join::{JoinType, RegularJoinFunction};
pub use rolling::Rolling;
pub(crate) use rolling::{RollingAggregate, RollingCombine};

use crate::checkpoint::{RestoreState, SnapshotWriter};
use crate::error::Result;
use crate::keys::KeyGroupRange;
use crate::metrics::OperatorMetrics;
use crate::record::{Data, MIN_WATERMARK, Record, Timestamp};
use crate::runtime::Output;

/// A step of a job: consumes records of type `In`, emits records of type `Out`.
///
/// ```
/// use riffle::operators::{Collector, Operator};
/// use riffle::{Record, Result};
///
/// /// Emits each word of a line, keeping the line's timestamp.
/// struct Split;
///
/// impl Operator for Split {
///     type In = String;
///     type Out = String;
///     fn process(&mut self, batch: &mut Vec<Record<String>>, out: &mut Collector<'_, String>) -> Result<()> {
///         for line in batch.drain(..) {
///             for word in line.value.split_whitespace() {
///                 out.emit(line.with_value(word.to_string()))?;
///             }
///         }
///         Ok(())
///     }
/// }
/// ```
pub trait Operator: Send + 'static {
    /// Type of the records received.
    type In: Data;
    /// Type of the records emitted.
    type Out: Data;

    /// Called once on the task's thread before the first record.
    fn open(&mut self, _ctx: &OperatorContext) -> Result<()> {
        Ok(())
    }

    /// Processes a batch of records; the operator takes them out of `batch` (the runtime clears
    /// whatever is left) and emits results through `out`.
    fn process(
        &mut self,
        batch: &mut Vec<Record<Self::In>>,
        out: &mut Collector<'_, Self::Out>,
    ) -> Result<()>;

    /// The event-time watermark advanced to `watermark`: no record with a smaller timestamp will
    /// arrive. Emit whatever this completes (fired windows); the runtime then forwards the
    /// watermark downstream.
    fn on_watermark(
        &mut self,
        _watermark: Timestamp,
        _out: &mut Collector<'_, Self::Out>,
    ) -> Result<()> {
        Ok(())
    }

    /// The input went idle (`true`: no upstream split has records, so the watermark cannot
    /// move) or became active again (`false`). The runtime forwards the change downstream;
    /// operators that tell other processes about event time (a Kafka shuffle's producer) react.
    fn on_idle(&mut self, _idle: bool) -> Result<()> {
        Ok(())
    }

    /// Called periodically (every buffer timeout) on the task's thread: processing-time work.
    fn on_tick(&mut self, _out: &mut Collector<'_, Self::Out>) -> Result<()> {
        Ok(())
    }

    /// Synchronous part of a checkpoint: writes the operator's state (keyed state per key
    /// group, non-keyed state as one blob). Called when the checkpoint's barrier reaches the
    /// operator; what it writes is uploaded while processing goes on.
    fn snapshot_state(
        &mut self,
        _checkpoint_id: u64,
        _snapshot: &mut SnapshotWriter,
    ) -> Result<()> {
        Ok(())
    }

    /// Restores what [`snapshot_state`](Operator::snapshot_state) wrote (called after `open`,
    /// before the first record, when the job starts from a checkpoint or savepoint).
    fn restore_state(&mut self, _state: &RestoreState) -> Result<()> {
        Ok(())
    }

    /// Checkpoint `checkpoint_id` completed on every task: commit what it covers.
    fn notify_checkpoint_complete(&mut self, _checkpoint_id: u64) -> Result<()> {
        Ok(())
    }

    /// Every channel of input `input` ended, in an operator with several inputs (Flink's
    /// `endInput(inputId)`); the other inputs may go on. Not called for one-input operators,
    /// whose end is [`close`](Operator::close).
    fn end_input(&mut self, _input: usize, _out: &mut Collector<'_, Self::Out>) -> Result<()> {
        Ok(())
    }

    /// The input ended: emit what is still held (the runtime has already delivered the final
    /// watermark for bounded inputs).
    fn close(&mut self, _out: &mut Collector<'_, Self::Out>) -> Result<()> {
        Ok(())
    }
}

/// What an operator instance knows about where it runs.
#[derive(Clone, Debug)]
pub struct OperatorContext {
    /// Operator name.
    pub name: String,
    /// Stable id of the operator: its `uid`, or one derived from its place in the job graph.
    /// Checkpoints and savepoints store state under it.
    pub id: String,
    /// Index of this parallel instance, `0..parallelism`.
    pub subtask: usize,
    /// Number of parallel instances of the operator.
    pub parallelism: usize,
    /// Number of key groups of the job.
    pub max_parallelism: usize,
    /// Key groups this instance owns (meaningful for keyed operators).
    pub key_groups: KeyGroupRange,
    /// Counters of this instance.
    pub metrics: Arc<OperatorMetrics>,
    /// Records per batch on the job's channels.
    pub batch_size: usize,
    /// Processing time.
    pub clock: std::sync::Arc<dyn crate::time::Clock>,
    /// Unique per run of the job (a restart is a new run): for names of files a run writes.
    pub run_id: String,
    /// The job's name (`EnvConfig::job_name`), the same for every run and restore of the job:
    /// a sink tells its own output from other jobs' by it, and a connector names its resources
    /// after it (Kafka transactional ids), so two jobs never share them.
    pub job_name: String,
    /// Whether this run restored a checkpoint or savepoint (`false`: a fresh start).
    pub restored: bool,
    /// Where a sink leaves what is to be committed once every task finished successfully.
    pub(crate) finalizers: Option<crate::checkpoint::Finalizers>,
    /// The task's key-value store, when the job's state backend has one.
    pub store: Option<std::sync::Arc<dyn crate::state::KvStore>>,
    /// Whether the operator is keyed (its input keyed by `key_by`).
    pub(crate) keyed: bool,
}

impl OperatorContext {
    /// A state of this operator named `name`, in the job's state backend.
    pub fn state_table<K, N, V>(&self, name: &str) -> crate::state::StateTable<K, N, V>
    where
        K: std::hash::Hash + Eq + Clone + serde::Serialize + serde::de::DeserializeOwned,
        N: std::hash::Hash + Eq + Clone + serde::Serialize + serde::de::DeserializeOwned,
        V: Clone + serde::Serialize + serde::de::DeserializeOwned,
    {
        crate::state::StateTable::new(self.store.as_ref(), &self.id, name, self.key_groups)
    }
}

/// Names a side output of an operator and the type of its records.
///
/// ```
/// let late: riffle::OutputTag<String> = riffle::OutputTag::new("late-clicks");
/// assert_eq!(late.id(), "late-clicks");
/// ```
pub struct OutputTag<T> {
    id: String,
    _type: PhantomData<fn() -> T>,
}

impl<T> OutputTag<T> {
    /// A tag with a name that is unique among the side outputs of one operator.
    pub fn new(id: impl Into<String>) -> Self {
        OutputTag {
            id: id.into(),
            _type: PhantomData,
        }
    }

    /// The tag's name.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl<T> Clone for OutputTag<T> {
    fn clone(&self) -> Self {
        OutputTag::new(self.id.clone())
    }
}

impl<T> std::fmt::Debug for OutputTag<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OutputTag({})", self.id)
    }
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

/// The watermark before the first one arrives.
pub(crate) const INITIAL_WATERMARK: Timestamp = MIN_WATERMARK;

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
pub(crate) mod keyed;
mod keyed_table;
mod output;
mod process;
mod rolling;
mod two_input;

use std::marker::PhantomData;
use std::sync::Arc;

pub use async_io::{AsyncConfig, AsyncFailure, AsyncOrder, AsyncWait};
pub(crate) use async_io::{AsyncMap, RequestFn};
pub use basic::{Filter, FlatMap, Identity, Map, TryMap};
pub use broadcast::{
    BroadcastContext, BroadcastProcess, BroadcastProcessFunction, BroadcastStateDeclarations,
    BroadcastStates, KeyedBroadcastProcess, KeyedBroadcastProcessFunction,
    KeyedReadOnlyBroadcastContext, OpenBroadcastProcess, OpenKeyedBroadcastProcess,
    ReadOnlyBroadcastContext,
};
pub(crate) use co_process::KeyedCo;
pub use co_process::{CoMap, CoProcess, CoProcessFn, CoProcessFunction, KeyedCoProcessFunction};
pub use decode::{JsonDecoder, OpenParseJson, ParseJson};
pub use dedup::{KeepFirst, KeepLast};
pub use keyed::{
    KeyedContext, KeyedProcess, KeyedProcessFunction, OpenKeyedProcess, ProcessWithTimers,
};
pub use output::Collector;
pub(crate) use output::{ErasedSideOutput, Output, SideOutputs, TypedSideOutput};
pub use process::{Process, ProcessContext};
pub use rolling::Rolling;
pub use two_input::{TwoInput, TwoInputOperator};

// Moved to `crate::join` (one home for the join operators); the old paths stay for one release.
pub use crate::join::{
    IntervalJoinOperator, IntervalJoinSpec, JoinContext, JoinType, ProcessJoinFunction,
    RegularJoinFunction,
};
pub(crate) use keyed_table::{GroupState, KeyedTable, NoGroupState};
pub(crate) use rolling::{RollingAggregate, RollingCombine};

use crate::checkpoint::{RestoreState, SnapshotWriter};
use crate::error::Result;
use crate::keys::KeyGroupRange;
use crate::metrics::OperatorMetrics;
use crate::record::{Data, MIN_WATERMARK, Record, Timestamp};

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

    /// Processes a batch of records that other operators read too (the stream this operator
    /// reads has several readers in its task): they are lent, not given. Returns `false` when
    /// the operator does not read records by reference (the default): the runtime then copies
    /// the batch and calls [`process`](Operator::process). An operator that drops most records,
    /// or keeps a small part of each, overrides it so that nothing is copied for nothing.
    ///
    /// ```
    /// use riffle::operators::{Collector, Operator};
    /// use riffle::{Record, Result};
    ///
    /// /// The lengths of the long strings.
    /// struct LongLengths;
    ///
    /// impl Operator for LongLengths {
    ///     type In = String;
    ///     type Out = usize;
    ///     fn process(&mut self, batch: &mut Vec<Record<String>>, out: &mut Collector<'_, usize>) -> Result<()> {
    ///         self.process_shared(batch, out).map(|_| batch.clear())
    ///     }
    ///     fn process_shared(&mut self, batch: &[Record<String>], out: &mut Collector<'_, usize>) -> Result<bool> {
    ///         for r in batch.iter().filter(|r| r.value.len() > 100) {
    ///             out.emit(r.with_value(r.value.len()))?;
    ///         }
    ///         Ok(true)
    ///     }
    /// }
    /// ```
    fn process_shared(
        &mut self,
        _batch: &[Record<Self::In>],
        _out: &mut Collector<'_, Self::Out>,
    ) -> Result<bool> {
        Ok(false)
    }

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

/// What builds an operator instance from where it runs, as Timely builds an operator's logic
/// from its context: the operator receives its state, timers and settings when it is made, so
/// that none of its fields waits, optional, for an `open` call.
///
/// Every [`Operator`] builds itself (it is already made); the operators that need their
/// context (keyed state, the task's store) are built by a builder implementing this trait, or
/// by a closure wrapped in [`FromContext`]. [`DataStream::transform`](crate::DataStream::transform)
/// and the test harness take either.
///
/// ```
/// use riffle::operators::{BuildOperator, Collector, Operator, OperatorContext};
/// use riffle::{Record, Result};
///
/// /// Tags every record with the parallel instance that saw it.
/// struct Tagged { subtask: usize }
///
/// impl Operator for Tagged {
///     type In = u64;
///     type Out = (usize, u64);
///     fn process(&mut self, batch: &mut Vec<Record<u64>>, out: &mut Collector<'_, (usize, u64)>) -> Result<()> {
///         for r in batch.drain(..) {
///             out.emit(r.with_value((self.subtask, r.value)))?;
///         }
///         Ok(())
///     }
/// }
///
/// /// What the job declares: built into a `Tagged` on each subtask.
/// struct Tag;
///
/// impl BuildOperator for Tag {
///     type Operator = Tagged;
///     fn build(self, ctx: &OperatorContext) -> Result<Tagged> {
///         Ok(Tagged { subtask: ctx.subtask })
///     }
/// }
/// ```
pub trait BuildOperator: Send + 'static {
    /// The operator it builds.
    type Operator: Operator;

    /// Builds the instance that runs as subtask `ctx.subtask` (called on the task's thread,
    /// before [`Operator::open`] and any restore).
    fn build(self, ctx: &OperatorContext) -> Result<Self::Operator>;
}

impl<Op: Operator> BuildOperator for Op {
    type Operator = Op;

    fn build(self, _ctx: &OperatorContext) -> Result<Op> {
        Ok(self)
    }
}

/// A closure that builds an operator from its context.
///
/// ```
/// use std::sync::Arc;
/// use riffle::operators::{FromContext, Map, OperatorContext};
/// use riffle::{EnvConfig, StreamEnv, sink::CollectSink};
///
/// let env = StreamEnv::with_config(EnvConfig::deterministic());
/// let (sink, out) = CollectSink::new();
/// env.from_iter(vec![1u64, 2])
///     .transform("Tag", || {
///         FromContext(|ctx: &OperatorContext| {
///             let subtask = ctx.subtask;
///             Ok(Map::new(Arc::new(move |x: u64| (subtask, x))))
///         })
///     })
///     .sink(sink);
/// env.execute().unwrap();
/// assert_eq!(out.values(), vec![(0, 1), (0, 2)]);
/// ```
pub struct FromContext<F>(pub F);

impl<Op, F> BuildOperator for FromContext<F>
where
    Op: Operator,
    F: FnOnce(&OperatorContext) -> Result<Op> + Send + 'static,
{
    type Operator = Op;

    fn build(self, ctx: &OperatorContext) -> Result<Op> {
        (self.0)(ctx)
    }
}

/// Builds an operator on its task's thread, naming the operator in an error or a panic.
pub(crate) fn build_operator<Op>(
    ctx: &OperatorContext,
    build: impl FnOnce() -> Result<Op>,
) -> Result<Op> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(build)) {
        Ok(built) => built.map_err(|e| e.in_operator(&ctx.name, ctx.subtask)),
        Err(payload) => Err(crate::Error::Panic {
            operator: ctx.name.clone(),
            subtask: ctx.subtask,
            message: crate::error::panic_message(payload.as_ref()),
        }),
    }
}

/// The type of the records a built operator receives.
pub type InOf<B> = <<B as BuildOperator>::Operator as Operator>::In;
/// The type of the records a built operator emits.
pub type OutOf<B> = <<B as BuildOperator>::Operator as Operator>::Out;

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
    /// Records per batch on the job's channels ([`EnvConfig::buffer_size`](crate::EnvConfig::buffer_size)).
    pub buffer_size: usize,
    /// The same as [`buffer_size`](Self::buffer_size), under its former name.
    #[deprecated(
        since = "0.1.0",
        note = "renamed `buffer_size`, as the setting it comes from"
    )]
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

/// The watermark before the first one arrives.
pub(crate) const INITIAL_WATERMARK: Timestamp = MIN_WATERMARK;

//! The runtime: tasks, their threads, the channels between them, and the job that runs them.
//!
//! A physical task runs one chain of operators for one subtask on its own thread. Inside a chain
//! operators call each other through [`Output`]; the chain's tail writes to bounded channels
//! ([`writer`]) that the next task reads through its input gate ([`input`]). A full channel blocks
//! its producer (back-pressure, measured); control events travel in band with the records.

mod chain;
mod input;
mod job;
mod task;
mod writer;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub(crate) use chain::{ChainLink, Discard, Fanout};
pub(crate) use input::InputTask;
pub use job::{JobHandle, JobMonitor, JobResult};
pub(crate) use job::{TaskSpec, launch};
pub(crate) use task::TaskDriver;
pub(crate) use writer::{KeyGroupFn, RecordWriter, ShipStrategy};

use crate::error::Result;
use crate::metrics::TaskMetrics;
use crate::record::{CheckpointBarrier, Record, Timestamp};

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
    /// The event-time watermark advanced.
    fn watermark(&mut self, watermark: Timestamp) -> Result<()>;
    /// The stream became idle (no data, must not hold back watermarks) or active again.
    fn idle(&mut self, idle: bool) -> Result<()>;
    /// A checkpoint barrier: snapshot, then forward.
    fn barrier(&mut self, barrier: CheckpointBarrier) -> Result<()>;
    /// Periodic call (every buffer timeout): flush partial batches, processing-time work.
    fn tick(&mut self) -> Result<()>;
    /// The input ended: close operators in chain order, flush, signal the end downstream.
    fn finish(&mut self) -> Result<()>;
}

/// Shared switches of a running job.
#[derive(Debug, Default)]
pub(crate) struct JobControl {
    cancelled: AtomicBool,
    stop_requested: AtomicBool,
}

impl JobControl {
    /// Stops every task as soon as possible; output may be partial.
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    /// Asks sources to end their input; the pipeline then drains and finishes.
    pub(crate) fn stop(&self) {
        self.stop_requested.store(true, Ordering::Release);
    }

    pub(crate) fn is_stop_requested(&self) -> bool {
        self.stop_requested.load(Ordering::Acquire)
    }
}

/// What every part of one task shares: the job's switches, the task's time accounting, timing.
#[derive(Clone, Debug)]
pub(crate) struct TaskContext {
    pub(crate) control: Arc<JobControl>,
    pub(crate) metrics: Arc<TaskMetrics>,
    pub(crate) buffer_timeout: Duration,
}

/// How long a blocked task waits at most before it looks at the cancel switch again.
pub(crate) const CANCEL_POLL: Duration = Duration::from_millis(50);

impl TaskContext {
    /// Sends on a bounded channel; blocks while it is full, counting the time as back-pressure.
    pub(crate) fn send<E>(&self, tx: &crossbeam_channel::Sender<E>, element: E) -> Result<()> {
        use crossbeam_channel::{SendTimeoutError, TrySendError};
        let mut element = match tx.try_send(element) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Full(element)) => element,
            Err(TrySendError::Disconnected(_)) => return Err(crate::Error::Cancelled),
        };
        loop {
            let start = Instant::now();
            let result = tx.send_timeout(element, CANCEL_POLL);
            self.metrics.add_backpressured(start.elapsed());
            match result {
                Ok(()) => return Ok(()),
                Err(SendTimeoutError::Timeout(back)) => {
                    if self.control.is_cancelled() {
                        return Err(crate::Error::Cancelled);
                    }
                    element = back;
                }
                Err(SendTimeoutError::Disconnected(_)) => return Err(crate::Error::Cancelled),
            }
        }
    }
}

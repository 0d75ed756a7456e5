//! The runtime: tasks, their threads, the channels between them, and the job that runs them.
//!
//! A physical task runs one chain of operators for one subtask on its own thread. Inside a chain
//! operators call each other through [`Output`]; the chain's tail writes to bounded channels
//! ([`writer`]) that the next task reads through its input gate ([`input`]). A full channel blocks
//! its producer (back-pressure, measured); control events travel in band with the records.

mod alignment;
mod chain;
mod in_flight;
mod input;
mod job;
mod local_dir;
mod plan;
pub(crate) mod source_task;
mod task;
mod writer;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use crate::control::JobControl;
pub(crate) use crate::operators::Output;
pub(crate) use chain::{ChainLink, Discard, Fanout, IntoInput};
pub(crate) use in_flight::InFlightSetup;
pub(crate) use input::InputTask;
pub use job::{JobHandle, JobMonitor, JobOverview, JobResult, JobStatus};
pub(crate) use job::{TaskSpec, start};
pub(crate) use local_dir::process_dir;
pub use plan::{JobPlan, PlanEdge, PlanVertex};
pub(crate) use plan::{Planner, RunContext};
pub(crate) use task::TaskDriver;
pub(crate) use writer::{KeyGroupFn, RecordWriter, ShipStrategy};

use crate::checkpoint::TaskSnapshot;
use crate::checkpoint::coordinator::CheckpointHub;
use crate::error::Result;
use crate::metrics::TaskMetrics;

/// What every part of one task shares: the job's switches, the task's time accounting, timing.
#[derive(Clone)]
pub(crate) struct TaskContext {
    pub(crate) control: Arc<JobControl>,
    pub(crate) metrics: Arc<TaskMetrics>,
    pub(crate) buffer_timeout: Duration,
    /// Index of the task among all tasks of the job.
    pub(crate) task_index: usize,
    /// The checkpoint coordination, when the job takes checkpoints.
    pub(crate) checkpoints: Option<Arc<CheckpointHub>>,
    /// The task's key-value store, when the state backend has one and the task keeps keyed state.
    pub(crate) store: Option<TaskStoreHandle>,
}

#[cfg(test)]
impl TaskContext {
    /// A context for unit tests of one task part: no checkpoints, no store.
    pub(crate) fn detached(name: &str) -> Self {
        TaskContext {
            control: Arc::new(JobControl::default()),
            metrics: Arc::new(TaskMetrics::new(name, 0)),
            buffer_timeout: Duration::from_millis(5),
            task_index: 0,
            checkpoints: None,
            store: None,
        }
    }
}

/// A task's key-value store and what its checkpoints are filed under.
#[derive(Clone)]
pub(crate) struct TaskStoreHandle {
    pub(crate) store: Arc<dyn crate::state::KvStore>,
    /// Unique per store: its immutable files keep their names from one checkpoint to the next.
    pub(crate) id: String,
    pub(crate) key_groups: crate::keys::KeyGroupRange,
    pub(crate) local_dir: std::path::PathBuf,
}

impl TaskContext {
    /// Calls `notify` with the latest completed checkpoint if it is newer than `*last`.
    pub(crate) fn completed_checkpoint(&self, last: &mut u64) -> Option<u64> {
        let completed = self.checkpoints.as_ref()?.completed();
        (completed > *last).then(|| {
            *last = completed;
            completed
        })
    }

    /// Adds a checkpoint of the task's store to `snapshot` (the synchronous part: the store
    /// flushes its memory and links its files; uploading happens elsewhere). Taken with the
    /// operators' snapshots: an unaligned snapshot is submitted later, after its in-flight input.
    pub(crate) fn snapshot_store(&self, snapshot: &mut TaskSnapshot) -> crate::Result<()> {
        let (Some(_), Some(store), None) = (&self.checkpoints, &self.store, &snapshot.store) else {
            return Ok(());
        };
        let dir = store
            .local_dir
            .join(format!("chk-{}", snapshot.checkpoint_id));
        let files = store.store.checkpoint(&dir)?;
        snapshot.store = Some(crate::checkpoint::StoreSnapshot {
            store_id: store.id.clone(),
            key_groups: store.key_groups,
            dir,
            files,
        });
        Ok(())
    }

    /// Hands a snapshot to the uploader, with a checkpoint of the task's store if it has none
    /// yet.
    pub(crate) fn submit(
        &self,
        mut snapshot: TaskSnapshot,
        alignment: Duration,
    ) -> crate::Result<()> {
        let Some(hub) = &self.checkpoints else {
            return Ok(());
        };
        self.snapshot_store(&mut snapshot)?;
        hub.submit(self.task_index, snapshot, alignment);
        Ok(())
    }

    /// Drops a snapshot that will not be submitted (its checkpoint was abandoned), with the
    /// local checkpoint of its store.
    pub(crate) fn discard(&self, snapshot: TaskSnapshot) {
        if let Some(store) = snapshot.store {
            let _ = std::fs::remove_dir_all(&store.dir);
        }
    }

    /// Whether the job takes checkpoints: a task that finishes then takes a final snapshot.
    pub(crate) fn takes_checkpoints(&self) -> bool {
        self.checkpoints
            .as_ref()
            .is_some_and(|hub| hub.takes_checkpoints())
    }

    /// Tells the coordinator this task ended, after taking part in checkpoint `last` (its final
    /// snapshot, if it takes part in checkpoints, was submitted just before).
    pub(crate) fn finished(&self, last: u64) {
        if let Some(hub) = &self.checkpoints {
            hub.task_finished(self.task_index, last);
        }
    }
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

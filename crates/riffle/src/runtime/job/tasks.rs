//! The task threads of one attempt: each runs its chain to the end; the first real failure
//! cancels the others ([`FirstFailure`](super::decide::FirstFailure) decides which one it is).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use super::decide::{FirstFailure, TaskFailure};
use crate::error::{Error, Result, panic_message};
use crate::metrics::TaskMetrics;
use crate::runtime::{JobControl, TaskDriver};

/// A task ready to run.
pub(crate) struct TaskSpec {
    /// Thread name and error attribution: the chain's name.
    pub(crate) name: String,
    /// Name of the chain's first operator, blamed for panics outside any operator call.
    pub(crate) head: String,
    pub(crate) subtask: usize,
    pub(crate) driver: Box<dyn TaskDriver>,
    pub(crate) metrics: Arc<TaskMetrics>,
}

/// Thread names are limited to 15 bytes on Linux: keep the start of the chain's name.
fn short(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_alphanumeric() || *c == '-')
        .take(12)
        .collect()
}

/// Runs the tasks of one attempt to their end; returns the first real failure.
pub(super) fn run_tasks(tasks: Vec<TaskSpec>, control: &Arc<JobControl>) -> Result<Option<Error>> {
    let (done_tx, done_rx) = crossbeam_channel::unbounded::<Result<()>>();
    let mut threads = Vec::with_capacity(tasks.len());
    for task in tasks {
        let done = done_tx.clone();
        let TaskSpec {
            name,
            head,
            subtask,
            driver,
            metrics,
        } = task;
        let spawned = std::thread::Builder::new()
            .name(format!("{}#{}", short(&name), subtask))
            .spawn(move || {
                let outcome = catch_unwind(AssertUnwindSafe(|| driver.run()));
                metrics.mark_finished();
                let result = match outcome {
                    Ok(result) => result,
                    Err(payload) => Err(Error::Panic {
                        operator: head,
                        subtask,
                        message: panic_message(payload.as_ref()),
                    }),
                };
                let _ = done.send(result);
            });
        match spawned {
            Ok(handle) => threads.push(handle),
            Err(e) => {
                control.fail_attempt();
                return Err(Error::io("cannot start a task thread", e));
            }
        }
    }
    drop(done_tx);
    let mut failures = FirstFailure::default();
    for result in done_rx.iter() {
        if let Err(error) = result {
            let shown = error.to_string();
            match failures.record(error) {
                // An ordinary rebalance of a process group: the run ends on purpose.
                TaskFailure::FirstReassigned => {
                    tracing::info!(reason = %shown, "a task ended its run; stopping the other tasks")
                }
                TaskFailure::First => {
                    tracing::error!(error = %shown, "task failed; cancelling the other tasks")
                }
                TaskFailure::Secondary => {}
            }
            control.fail_attempt();
        }
    }
    for thread in threads {
        let _ = thread.join();
    }
    Ok(failures.into_failure())
}

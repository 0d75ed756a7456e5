//! A running job: one thread per task, a supervisor that waits for them, and the handle through
//! which the caller stops, cancels, observes and waits for the job.
//!
//! The first task that fails cancels the others; the job's error is that first failure (the
//! secondary "cancelled" errors of the other tasks are not reported).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result, panic_message};
use crate::graph::JobPlan;
use crate::metrics::{MetricsRegistry, MetricsSnapshot, TaskMetrics};
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

/// Starts every task on its own thread and a supervisor that collects their outcomes.
pub(crate) fn launch(
    job_name: String,
    tasks: Vec<TaskSpec>,
    control: Arc<JobControl>,
    registry: Arc<MetricsRegistry>,
    plan: JobPlan,
) -> Result<JobHandle> {
    let started = Instant::now();
    let (done_tx, done_rx) = crossbeam_channel::unbounded::<Result<()>>();
    let mut threads = Vec::with_capacity(tasks.len());
    for task in tasks {
        let done = done_tx.clone();
        let TaskSpec { name, head, subtask, driver, metrics } = task;
        let thread_name = format!("{}#{}", short(&name), subtask);
        let spawned = std::thread::Builder::new().name(thread_name).spawn(move || {
            let outcome = catch_unwind(AssertUnwindSafe(|| driver.run()));
            metrics.mark_finished();
            let result = match outcome {
                Ok(result) => result,
                Err(payload) => Err(Error::Panic { operator: head, subtask, message: panic_message(payload.as_ref()) }),
            };
            let _ = done.send(result);
        });
        match spawned {
            Ok(handle) => threads.push(handle),
            Err(e) => {
                control.cancel();
                return Err(Error::io("cannot start a task thread", e));
            }
        }
    }
    drop(done_tx);
    let supervisor_control = control.clone();
    let supervisor_registry = registry.clone();
    let supervisor = std::thread::Builder::new()
        .name("riffle-supervisor".into())
        .spawn(move || {
            let mut failure: Option<Error> = None;
            for result in done_rx.iter() {
                if let Err(error) = result {
                    if !error.is_cancelled() && failure.is_none() {
                        tracing::error!(%error, "task failed; cancelling the job");
                        failure = Some(error);
                    }
                    supervisor_control.cancel();
                }
            }
            for thread in threads {
                let _ = thread.join();
            }
            let result = JobResult {
                job_name,
                duration: started.elapsed(),
                metrics: supervisor_registry.snapshot(),
            };
            match failure {
                Some(error) => Err(error),
                None if supervisor_control.is_cancelled() => Err(Error::Cancelled),
                None => Ok(result),
            }
        })
        .map_err(|e| Error::io("cannot start the job supervisor", e))?;
    Ok(JobHandle { control, registry, plan, started, supervisor: Some(supervisor) })
}

/// Thread names are limited to 15 bytes on Linux: keep the start of the chain's name.
fn short(name: &str) -> String {
    name.chars().filter(|c| c.is_alphanumeric() || *c == '-').take(12).collect()
}

/// A job that runs in the background.
///
/// ```
/// use riffle::{StreamEnv, sink::CollectSink};
/// let env = StreamEnv::new();
/// let (sink, collected) = CollectSink::new();
/// env.from_iter((1..=3u64).collect::<Vec<_>>()).map(|x| x * 10).sink(sink);
/// let job = env.execute_async().unwrap();
/// job.wait().unwrap();
/// assert_eq!(collected.sorted(), vec![10, 20, 30]);
/// ```
pub struct JobHandle {
    control: Arc<JobControl>,
    registry: Arc<MetricsRegistry>,
    plan: JobPlan,
    started: Instant,
    supervisor: Option<JoinHandle<Result<JobResult>>>,
}

impl JobHandle {
    /// Asks the sources to end their input; the pipeline drains what is in flight and finishes.
    /// [`wait`](JobHandle::wait) then returns `Ok` with the final metrics.
    pub fn stop(&self) {
        self.control.stop();
    }

    /// Stops every task as soon as possible; [`wait`](JobHandle::wait) returns [`Error::Cancelled`].
    pub fn cancel(&self) {
        self.control.cancel();
    }

    /// Current value of every metric.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.registry.snapshot()
    }

    /// The physical plan: tasks (chains), parallelism and edges.
    pub fn plan(&self) -> &JobPlan {
        &self.plan
    }

    /// A handle to observe and stop the job from another thread (a progress display, a signal
    /// handler).
    pub fn monitor(&self) -> JobMonitor {
        JobMonitor { control: self.control.clone(), registry: self.registry.clone() }
    }

    /// Time since the job started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Whether every task has ended.
    pub fn is_finished(&self) -> bool {
        self.supervisor.as_ref().is_none_or(|s| s.is_finished())
    }

    /// Waits for the job to end.
    pub fn wait(mut self) -> Result<JobResult> {
        let supervisor = self.supervisor.take().expect("waited once");
        supervisor.join().unwrap_or_else(|_| Err(Error::Graph("the job supervisor panicked".into())))
    }
}

impl Drop for JobHandle {
    fn drop(&mut self) {
        if let Some(supervisor) = self.supervisor.take() {
            // A handle dropped without waiting cancels its job rather than leaving threads behind.
            self.control.cancel();
            let _ = supervisor.join();
        }
    }
}

/// Observes and stops a running job; cheap to clone and to send to other threads.
#[derive(Clone, Debug)]
pub struct JobMonitor {
    control: Arc<JobControl>,
    registry: Arc<MetricsRegistry>,
}

impl JobMonitor {
    /// Current value of every metric.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.registry.snapshot()
    }

    /// Asks the sources to end their input (see [`JobHandle::stop`]).
    pub fn stop(&self) {
        self.control.stop();
    }

    /// Cancels the job (see [`JobHandle::cancel`]).
    pub fn cancel(&self) {
        self.control.cancel();
    }

    /// Whether a stop was requested.
    pub fn is_stopping(&self) -> bool {
        self.control.is_stop_requested()
    }
}

/// What a finished job reports.
#[derive(Clone, Debug)]
pub struct JobResult {
    /// Name of the job.
    pub job_name: String,
    /// Wall-clock run time.
    pub duration: Duration,
    /// Final value of every metric.
    pub metrics: MetricsSnapshot,
}

impl JobResult {
    /// Records emitted by the operator `name` (all subtasks); 0 if there is no such operator.
    pub fn records_out(&self, name: &str) -> u64 {
        self.metrics.operator_total(name).map_or(0, |o| o.records_out)
    }

    /// Records received by the operator `name` (all subtasks); 0 if there is no such operator.
    pub fn records_in(&self, name: &str) -> u64 {
        self.metrics.operator_total(name).map_or(0, |o| o.records_in)
    }

    /// Records that sources could not decode, over all sources.
    pub fn bad_records(&self) -> u64 {
        self.metrics.operators.iter().map(|o| o.bad_records).sum()
    }
}

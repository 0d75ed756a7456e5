//! What the caller holds of a running job: its handle (stop, cancel, savepoints, wait), a
//! monitor to share with observers (the web UI, the REST API), its overview and its result.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossbeam_channel::Sender;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::checkpoint::coordinator::{CheckpointStats, SavepointRequest};
use crate::error::{Error, Result};
use crate::metrics::{MetricsRegistry, MetricsSnapshot};
use crate::record::Timestamp;
use crate::runtime::{JobControl, JobPlan};

/// Where a job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobStatus {
    /// Its tasks run (also while it drains after a stop).
    Running,
    /// A task failed; the job waits to start again from its latest checkpoint.
    Restarting,
    /// Every task finished: the input ended or the job was stopped.
    Finished,
    /// It failed and will not restart.
    Failed,
    /// It was cancelled.
    Cancelled,
}

/// The mutable part of a job's overview, updated by its supervisor.
#[derive(Debug)]
pub(super) struct Life {
    pub(super) status: JobStatus,
    pub(super) restarts: u32,
    pub(super) last_failure: Option<String>,
}

/// A job's identity and status: what `riffle jobs` and the REST API show about it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct JobOverview {
    /// Unique per job started (8 hex digits).
    pub id: String,
    /// The job's name (`EnvConfig::job_name`).
    pub name: String,
    /// Where it is in its life.
    pub status: JobStatus,
    /// A stop (or stop with savepoint) was requested; the job drains.
    pub stopping: bool,
    /// Wall-clock start, epoch milliseconds.
    pub started_at: Timestamp,
    /// Milliseconds since the start.
    pub uptime_ms: u64,
    /// Restarts after failures so far.
    pub restarts: u32,
    /// The failure that caused the latest restart (or ended the job).
    pub last_failure: Option<String>,
    /// Checkpoint interval, when checkpoints are on.
    pub checkpoint_interval_ms: Option<u64>,
    /// The job's default parallelism.
    pub parallelism: usize,
}

/// What never changes while a job runs.
#[derive(Debug)]
pub(super) struct Identity {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) started_at: Timestamp,
    pub(super) started: Instant,
    pub(super) checkpoint_interval: Option<Duration>,
    pub(super) parallelism: usize,
    pub(super) plan: JobPlan,
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
    pub(super) monitor: JobMonitor,
    pub(super) supervisor: Option<JoinHandle<Result<JobResult>>>,
}

impl JobHandle {
    /// Asks the sources to end their input; the pipeline drains what is in flight and finishes.
    /// [`wait`](JobHandle::wait) then returns `Ok` with the final metrics.
    pub fn stop(&self) {
        self.monitor.stop();
    }

    /// Stops every task as soon as possible; [`wait`](JobHandle::wait) returns [`Error::Cancelled`].
    pub fn cancel(&self) {
        self.monitor.cancel();
    }

    /// Takes a savepoint at `location` (a directory or `s3://` location) and waits for it; returns
    /// the location. Restore it with `RestoreFrom::Savepoint`.
    pub fn savepoint(&self, location: &str) -> Result<String> {
        self.monitor.savepoint(location)
    }

    /// Takes a savepoint and stops the job right after it: sources end their input at its
    /// barrier, so nothing is processed twice when a new job starts from it.
    pub fn stop_with_savepoint(&self, location: &str) -> Result<String> {
        self.monitor.stop_with_savepoint(location)
    }

    /// Current value of every metric (of the current run, after a restart).
    pub fn metrics(&self) -> MetricsSnapshot {
        self.monitor.metrics()
    }

    /// Every checkpoint and savepoint so far.
    pub fn checkpoints(&self) -> Vec<CheckpointStats> {
        self.monitor.checkpoints()
    }

    /// The physical plan: tasks (chains), parallelism and edges.
    pub fn plan(&self) -> &JobPlan {
        self.monitor.plan()
    }

    /// The job's id, name and status.
    pub fn overview(&self) -> JobOverview {
        self.monitor.overview()
    }

    /// A handle to observe and stop the job from another thread (a progress display, a signal
    /// handler, the REST API).
    pub fn monitor(&self) -> JobMonitor {
        self.monitor.clone()
    }

    /// Time since the job started.
    pub fn elapsed(&self) -> Duration {
        self.monitor.identity.started.elapsed()
    }

    /// Whether the job has ended.
    pub fn is_finished(&self) -> bool {
        self.supervisor.as_ref().is_none_or(|s| s.is_finished())
    }

    /// Waits for the job to end.
    pub fn wait(mut self) -> Result<JobResult> {
        let supervisor = self.supervisor.take().expect("waited once");
        supervisor
            .join()
            .unwrap_or_else(|_| Err(Error::Graph("the job supervisor panicked".into())))
    }
}

impl Drop for JobHandle {
    fn drop(&mut self) {
        if let Some(supervisor) = self.supervisor.take() {
            // A handle dropped without waiting cancels its job rather than leaving threads behind.
            self.monitor.cancel();
            let _ = supervisor.join();
        }
    }
}

/// Observes and controls a running job; cheap to clone and to send to other threads.
///
/// ```
/// use riffle::runtime::JobStatus;
/// use riffle::{StreamEnv, sink::CollectSink};
/// let env = StreamEnv::new();
/// let (sink, _) = CollectSink::new();
/// env.from_iter(vec![1u64, 2, 3]).sink(sink);
/// let job = env.execute_async().unwrap();
/// let monitor = job.monitor();
/// job.wait().unwrap();
/// assert_eq!(monitor.overview().status, JobStatus::Finished);
/// assert_eq!(monitor.plan().vertices.len(), 1);
/// ```
#[derive(Clone)]
pub struct JobMonitor {
    pub(super) control: Arc<JobControl>,
    pub(super) registry: Arc<MetricsRegistry>,
    pub(super) stats: Arc<Mutex<Vec<CheckpointStats>>>,
    pub(super) savepoints: Sender<SavepointRequest>,
    pub(super) life: Arc<Mutex<Life>>,
    pub(super) identity: Arc<Identity>,
}

impl JobMonitor {
    /// Current value of every metric.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.registry.snapshot()
    }

    /// Every checkpoint and savepoint so far.
    pub fn checkpoints(&self) -> Vec<CheckpointStats> {
        self.stats.lock().expect("stats lock").clone()
    }

    /// The physical plan: tasks (chains), parallelism and edges.
    pub fn plan(&self) -> &JobPlan {
        &self.identity.plan
    }

    /// The job's id, name and status.
    pub fn overview(&self) -> JobOverview {
        let life = self.life.lock().expect("life lock");
        let identity = &self.identity;
        JobOverview {
            id: identity.id.clone(),
            name: identity.name.clone(),
            status: life.status,
            stopping: life.status == JobStatus::Running && self.control.is_stop_requested(),
            started_at: identity.started_at,
            uptime_ms: identity.started.elapsed().as_millis() as u64,
            restarts: life.restarts,
            last_failure: life.last_failure.clone(),
            checkpoint_interval_ms: identity.checkpoint_interval.map(|i| i.as_millis() as u64),
            parallelism: identity.parallelism,
        }
    }

    /// Whether the job has ended (finished, failed or cancelled).
    pub fn is_ended(&self) -> bool {
        matches!(
            self.life.lock().expect("life lock").status,
            JobStatus::Finished | JobStatus::Failed | JobStatus::Cancelled
        )
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

    /// Takes a savepoint (see [`JobHandle::savepoint`]).
    pub fn savepoint(&self, location: &str) -> Result<String> {
        self.request_savepoint(location, false)
    }

    /// Takes a savepoint and stops the job after it (see [`JobHandle::stop_with_savepoint`]).
    pub fn stop_with_savepoint(&self, location: &str) -> Result<String> {
        self.request_savepoint(location, true)
    }

    fn request_savepoint(&self, location: &str, stop: bool) -> Result<String> {
        let (reply, answer) = crossbeam_channel::bounded(1);
        self.savepoints
            .send(SavepointRequest {
                location: location.to_string(),
                stop,
                reply,
            })
            .map_err(|_| Error::Checkpoint("the job has ended".into()))?;
        answer
            .recv()
            .map_err(|_| Error::Checkpoint("the job ended before the savepoint".into()))?
    }
}

/// What a finished job reports.
#[derive(Clone, Debug)]
pub struct JobResult {
    /// Name of the job.
    pub job_name: String,
    /// Wall-clock run time.
    pub duration: Duration,
    /// Final value of every metric (of the last run, after restarts).
    pub metrics: MetricsSnapshot,
    /// How many times the job restarted after a failure.
    pub restarts: u32,
    /// Every checkpoint and savepoint taken.
    pub checkpoints: Vec<CheckpointStats>,
    /// The checkpoint or savepoint the job started from.
    pub restored_from: Option<String>,
    /// For each restart, the checkpoint it restored (0: none had completed, a fresh start).
    pub restores: Vec<u64>,
    /// The job had already finished: it restored its final checkpoint (this id), read no input
    /// and wrote nothing new.
    pub already_finished: Option<u64>,
}

impl JobResult {
    /// Records emitted by the operator `name` (all subtasks); 0 if there is no such operator.
    pub fn records_out(&self, name: &str) -> u64 {
        self.metrics
            .operator_total(name)
            .map_or(0, |o| o.records_out)
    }

    /// Records received by the operator `name` (all subtasks); 0 if there is no such operator.
    pub fn records_in(&self, name: &str) -> u64 {
        self.metrics
            .operator_total(name)
            .map_or(0, |o| o.records_in)
    }

    /// Records that sources could not decode, over all sources.
    pub fn bad_records(&self) -> u64 {
        self.metrics.operators.iter().map(|o| o.bad_records).sum()
    }

    /// Records that jumped too far ahead of their split's watermark, over all sources (see
    /// [`WatermarkStrategy::with_max_watermark_jump`](crate::time::WatermarkStrategy::with_max_watermark_jump)).
    pub fn watermark_outliers(&self) -> u64 {
        self.metrics
            .operators
            .iter()
            .map(|o| o.watermark_outliers)
            .sum()
    }

    /// Checkpoints that completed.
    pub fn completed_checkpoints(&self) -> usize {
        self.checkpoints.iter().filter(|c| c.completed()).count()
    }
}

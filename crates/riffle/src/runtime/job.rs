//! A running job: one thread per task, a supervisor that runs the job's attempts, and the handle
//! through which the caller stops, cancels, observes and waits for the job.
//!
//! The first task that fails cancels the others; the job's error is that first failure (the
//! secondary "cancelled" errors of the other tasks are not reported). With a restart strategy,
//! the supervisor then starts a new run of the job from this job's newest completed checkpoint
//! (never an older run's), else from the snapshot the job started from (a savepoint or a
//! checkpoint given with `restore`), else from nothing: sources seek back to their positions,
//! operators get their state back, sinks commit what that checkpoint covers and abort the rest.
//!
//! A job that takes checkpoints ends with a final checkpoint (see the coordinator): only once it
//! completed do the sinks commit their last output, and the job ends.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use crate::checkpoint::coordinator::{self, CheckpointStats, SavepointRequest};
use crate::checkpoint::restore::RestoreAssignment;
use crate::checkpoint::storage::CHECKPOINT_PREFIX;
use crate::checkpoint::{CheckpointStorage, RestartStrategy, RestoreFrom};
use crate::checkpoint::{Ending, Finalizers};
use crate::config::EnvConfig;
use crate::error::{Error, Result, panic_message};
use crate::metrics::{MetricsRegistry, MetricsSnapshot, TaskMetrics};
use crate::record::Timestamp;
use crate::runtime::{JobControl, TaskDriver};
use crate::runtime::{JobPlan, Planner, RunContext};
use serde::Serialize;

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
fn run_tasks(tasks: Vec<TaskSpec>, control: &Arc<JobControl>) -> Result<Option<Error>> {
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
    let mut failure: Option<Error> = None;
    for result in done_rx.iter() {
        if let Err(error) = result {
            if !error.is_cancelled() && failure.is_none() {
                if error.connector_kind() == Some(crate::error::ConnectorErrorKind::Reassigned) {
                    // An ordinary rebalance of a process group: the run ends on purpose.
                    tracing::info!(reason = %error, "a task ended its run; stopping the other tasks");
                } else {
                    tracing::error!(%error, "task failed; cancelling the other tasks");
                }
                failure = Some(error);
            }
            control.fail_attempt();
        }
    }
    for thread in threads {
        let _ = thread.join();
    }
    Ok(failure)
}

/// What the supervisor owns.
struct Supervisor {
    planner: Box<dyn Planner>,
    config: EnvConfig,
    control: Arc<JobControl>,
    registry: Arc<MetricsRegistry>,
    stats: Arc<Mutex<Vec<CheckpointStats>>>,
    storage: Option<Arc<CheckpointStorage>>,
    savepoints: crossbeam_channel::Receiver<SavepointRequest>,
    nonce: String,
    life: Arc<Mutex<Life>>,
}

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
struct Life {
    status: JobStatus,
    restarts: u32,
    last_failure: Option<String>,
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
struct Identity {
    id: String,
    name: String,
    started_at: Timestamp,
    started: Instant,
    checkpoint_interval: Option<Duration>,
    parallelism: usize,
    plan: JobPlan,
}

/// Where the first run starts from.
fn initial_restore(
    config: &EnvConfig,
    storage: Option<&Arc<CheckpointStorage>>,
) -> Result<Option<RestoreAssignment>> {
    let Some(from) = &config.checkpoints.restore else {
        return Ok(None);
    };
    let restore = match from {
        RestoreFrom::Latest => {
            let storage = storage
                .ok_or_else(|| Error::config("restore", "`latest` needs checkpoint storage"))?;
            RestoreAssignment::latest(storage)?
        }
        RestoreFrom::Checkpoint(id) => {
            let storage = storage.ok_or_else(|| {
                Error::config("restore", "a checkpoint id needs checkpoint storage")
            })?;
            Some(RestoreAssignment::load(
                storage,
                &format!("{CHECKPOINT_PREFIX}{id}"),
            )?)
        }
        RestoreFrom::Savepoint(location) => {
            let storage = CheckpointStorage::open(
                location,
                &config.checkpoints.storage_options,
                "",
                "savepoint location",
            )?;
            Some(RestoreAssignment::load(&Arc::new(storage), "")?)
        }
        RestoreFrom::Manifest { location, dir } => {
            let storage = CheckpointStorage::open(
                location,
                &config.checkpoints.storage_options,
                "",
                "restore location",
            )?
            .with_warm_files(config.checkpoints.warm_files.clone());
            Some(RestoreAssignment::load(&Arc::new(storage), dir)?)
        }
    };
    if let Some(restore) = &restore {
        restore.check_max_parallelism(config.max_parallelism)?;
        tracing::info!(from = %restore.description, "restoring");
    }
    Ok(restore)
}

impl Supervisor {
    /// Where a restart starts from: this job's newest completed checkpoint that reads back
    /// whole, else the snapshot the job started from (`None`: a fresh start).
    fn restart_point(
        &self,
        started_from: Option<Arc<RestoreAssignment>>,
    ) -> Result<Option<Arc<RestoreAssignment>>> {
        let mine: Vec<u64> = {
            let stats = self.stats.lock().expect("stats lock");
            let mut ids: Vec<u64> = stats
                .iter()
                .filter(|c| c.completed() && c.kind == crate::checkpoint::SnapshotKind::Checkpoint)
                .map(|c| c.id)
                .collect();
            ids.sort_unstable();
            ids
        };
        if let Some(storage) = &self.storage {
            for id in mine.into_iter().rev() {
                match RestoreAssignment::load(storage, &format!("{CHECKPOINT_PREFIX}{id}")) {
                    Ok(assignment) => return Ok(Some(Arc::new(assignment))),
                    Err(error) => {
                        tracing::warn!(id, %error, "checkpoint unusable; trying the one before")
                    }
                }
            }
        }
        Ok(started_from)
    }

    fn set_status(&self, status: JobStatus, failure: Option<String>) {
        let mut life = self.life.lock().expect("life lock");
        life.status = status;
        if failure.is_some() {
            life.last_failure = failure;
        }
    }

    /// Plans and runs one attempt; `Ok(None)` when it succeeded.
    fn attempt(
        &self,
        attempt: u32,
        restore: Option<&RestoreAssignment>,
        first: &mut Option<Sender<Result<JobPlan>>>,
    ) -> Result<Option<Error>> {
        let tasks_total = self.planner.task_count(&self.config)?;
        let first_id = match (restore, &self.storage) {
            (_, Some(storage)) => {
                storage
                    .checkpoint_directories()?
                    .into_iter()
                    .max()
                    .unwrap_or(0)
                    + 1
            }
            (Some(restore), None) => restore.checkpoint_id() + 1,
            (None, None) => 1,
        }
        .max(restore.map_or(0, |r| r.checkpoint_id() + 1));
        let finalizers = Finalizers::default();
        let coordinator = coordinator::start(
            self.storage.clone(),
            self.config.checkpoints.clone(),
            self.config.job_name.clone(),
            self.config.max_parallelism,
            tasks_total,
            first_id,
            self.control.clone(),
            self.config.clock.clone(),
            self.savepoints.clone(),
            self.stats.clone(),
            finalizers.clone(),
        )?;
        let run = RunContext {
            config: &self.config,
            registry: &self.registry,
            control: &self.control,
            checkpoints: Some(coordinator.hub.clone()),
            restore,
            run_id: format!("{}r{attempt}", self.nonce),
            finalizers: finalizers.clone(),
        };
        let planned = self.planner.plan(&run);
        let tasks = match (planned, first.take()) {
            (Ok((tasks, plan)), Some(reply)) => {
                let _ = reply.send(Ok(plan));
                tasks
            }
            (Ok((tasks, _)), None) => tasks,
            (Err(error), Some(reply)) => {
                let _ = reply.send(Err(error));
                return Err(Error::Cancelled);
            }
            (Err(error), None) => return Err(error),
        };
        let done = Arc::new(AtomicBool::new(false));
        let coordinator_done = done.clone();
        let coordinator_thread = std::thread::Builder::new()
            .name("riffle-coordinator".into())
            .spawn(move || coordinator.run(coordinator_done))
            .map_err(|e| Error::io("cannot start the checkpoint coordinator", e))?;
        let failure = run_tasks(tasks, &self.control);
        done.store(true, Ordering::Release);
        let outcome = coordinator_thread
            .join()
            .map_err(|_| Error::Checkpoint("the checkpoint coordinator panicked".into()))?;
        let failure = failure?;
        if let Some(error) = outcome.error {
            return Ok(Some(failure.unwrap_or(error)));
        }
        if failure.is_none() && !self.control.is_cancelled() {
            // Every task finished: commit what sinks left for the end (after a stop with a
            // savepoint, only what its barrier or an earlier committed checkpoint pre-committed).
            let ending = if self.control.is_stopped_at_savepoint() {
                Ending::Stopped {
                    up_to: outcome.committed,
                }
            } else if self.storage.is_some() && self.config.checkpoints.enabled() {
                // The job's end must be recorded before its last output becomes visible: a
                // restore after a crash then finds it and writes nothing again.
                match outcome.final_checkpoint {
                    Some(id) => {
                        tracing::info!(id, "final checkpoint completed");
                        Ending::Drained
                    }
                    None => {
                        return Ok(Some(Error::Checkpoint(
                            "the job's final checkpoint failed: its last output is not committed"
                                .into(),
                        )));
                    }
                }
            } else {
                Ending::Drained
            };
            for finalize in finalizers.take() {
                finalize(ending)?;
            }
        }
        Ok(failure)
    }

    fn run(self, first: Sender<Result<JobPlan>>) -> Result<JobResult> {
        let started = Instant::now();
        let mut first = Some(first);
        let mut restore =
            initial_restore(&self.config, self.storage.as_ref()).map(|r| r.map(Arc::new));
        let restored_from = restore
            .as_ref()
            .ok()
            .and_then(|r| r.as_ref().map(|r| r.description.clone()));
        let already_finished = restore.as_ref().ok().and_then(|r| {
            r.as_ref()
                .filter(|r| r.finished())
                .map(|r| r.checkpoint_id())
        });
        if let Some(id) = already_finished {
            tracing::info!(
                id,
                "the job already finished: its final checkpoint is restored, no input is read"
            );
        }
        // What a restart falls back to while this job has no completed checkpoint of its own.
        let started_from = restore.as_ref().ok().cloned().flatten();
        let mut attempt = 0u32;
        let mut backoff = None;
        let mut restores = Vec::new();
        loop {
            let attempt_started = Instant::now();
            let current = match restore {
                Ok(r) => r,
                Err(error) => {
                    if let Some(reply) = first.take() {
                        let _ = reply.send(Err(error));
                        return Err(Error::Cancelled);
                    }
                    return Err(error);
                }
            };
            self.set_status(JobStatus::Running, None);
            let failure = match self.attempt(attempt, current.as_deref(), &mut first) {
                Ok(None) if self.control.is_user_cancelled() => return Err(Error::Cancelled),
                Ok(None) => {
                    return Ok(JobResult {
                        job_name: self.config.job_name.clone(),
                        duration: started.elapsed(),
                        metrics: self.registry.snapshot(),
                        restarts: attempt,
                        checkpoints: self.stats.lock().expect("stats lock").clone(),
                        restored_from,
                        restores,
                        already_finished,
                    });
                }
                Ok(Some(failure)) => failure,
                Err(error) => return Err(error),
            };
            if self.control.is_user_cancelled() {
                return Err(Error::Cancelled);
            }
            // Without checkpoints a restart would replay everything: the job fails (as in Flink).
            let strategy = if self.config.checkpoints.enabled() {
                self.config.checkpoints.restart
            } else {
                RestartStrategy::None
            };
            let Some(delay) =
                strategy.next_delay(attempt + 1, attempt_started.elapsed(), &mut backoff)
            else {
                return Err(failure);
            };
            attempt += 1;
            self.set_status(JobStatus::Restarting, Some(failure.to_string()));
            self.life.lock().expect("life lock").restarts = attempt;
            tracing::warn!(%failure, attempt, delay_ms = delay.as_millis() as u64, "restarting the job from its latest checkpoint");
            let wake = Instant::now() + delay;
            while Instant::now() < wake {
                if self.control.is_user_cancelled() {
                    return Err(Error::Cancelled);
                }
                std::thread::sleep(
                    Duration::from_millis(5).min(wake.saturating_duration_since(Instant::now())),
                );
            }
            self.control.new_attempt();
            self.registry.reset();
            restore = self.restart_point(started_from.clone());
            match &restore {
                Ok(Some(r)) => {
                    tracing::info!(from = %r.description, "restoring");
                    restores.push(r.checkpoint_id());
                }
                _ => restores.push(0),
            }
        }
    }
}

/// Validates the job, opens its checkpoint storage, and starts its supervisor.
pub(crate) fn start(planner: Box<dyn Planner>, config: EnvConfig) -> Result<JobHandle> {
    planner.validate(&config)?;
    let storage = if config.checkpoints.enabled()
        || matches!(
            config.checkpoints.restore,
            Some(RestoreFrom::Latest | RestoreFrom::Checkpoint(_))
        ) {
        let storage = match &config.checkpoints.object_store {
            Some(store) => CheckpointStorage::from_store(
                store.clone(),
                object_store::path::Path::from(config.job_name.as_str()),
                "a custom object store".into(),
            )?,
            None => CheckpointStorage::open(
                &config.checkpoints.storage,
                &config.checkpoints.storage_options,
                &config.job_name,
                "checkpoint storage",
            )?,
        }
        .with_warm_files(config.checkpoints.warm_files.clone());
        Some(Arc::new(storage))
    } else {
        None
    };
    let control = Arc::new(JobControl::default());
    let registry = Arc::new(MetricsRegistry::default());
    let stats: Arc<Mutex<Vec<CheckpointStats>>> = Arc::default();
    let (savepoint_tx, savepoint_rx) = crossbeam_channel::unbounded();
    let nonce = format!(
        "{:08x}",
        xxhash_rust::xxh3::xxh3_64(
            format!("{:?}{}", std::time::SystemTime::now(), std::process::id()).as_bytes()
        ) as u32
    );
    let life = Arc::new(Mutex::new(Life {
        status: JobStatus::Running,
        restarts: 0,
        last_failure: None,
    }));
    let started_at = config.clock.now();
    let (name, checkpoint_interval, parallelism) = (
        config.job_name.clone(),
        config.checkpoints.interval,
        config.parallelism,
    );
    let supervisor = Supervisor {
        planner,
        config,
        control: control.clone(),
        registry: registry.clone(),
        stats: stats.clone(),
        storage,
        savepoints: savepoint_rx,
        nonce: nonce.clone(),
        life: life.clone(),
    };
    let (first_tx, first_rx) = crossbeam_channel::bounded(1);
    let ended = life.clone();
    let handle = std::thread::Builder::new()
        .name("riffle-supervisor".into())
        .spawn(move || {
            let result = supervisor.run(first_tx);
            let mut life = ended.lock().expect("life lock");
            life.status = match &result {
                Ok(_) => JobStatus::Finished,
                Err(Error::Cancelled) => JobStatus::Cancelled,
                Err(error) => {
                    life.last_failure = Some(error.to_string());
                    JobStatus::Failed
                }
            };
            result
        })
        .map_err(|e| Error::io("cannot start the job supervisor", e))?;
    let plan = match first_rx.recv() {
        Ok(Ok(plan)) => plan,
        Ok(Err(error)) => {
            let _ = handle.join();
            return Err(error);
        }
        Err(_) => {
            // The supervisor ended before planning: its result says why.
            return Err(handle
                .join()
                .unwrap_or_else(|_| Err(Error::Graph("the job supervisor panicked".into())))
                .err()
                .unwrap_or(Error::Cancelled));
        }
    };
    Ok(JobHandle {
        monitor: JobMonitor {
            control,
            registry,
            stats,
            savepoints: savepoint_tx,
            life,
            identity: Arc::new(Identity {
                id: nonce,
                name,
                started_at,
                started: Instant::now(),
                checkpoint_interval,
                parallelism,
                plan,
            }),
        },
        supervisor: Some(handle),
    })
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
    monitor: JobMonitor,
    supervisor: Option<JoinHandle<Result<JobResult>>>,
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
    control: Arc<JobControl>,
    registry: Arc<MetricsRegistry>,
    stats: Arc<Mutex<Vec<CheckpointStats>>>,
    savepoints: Sender<SavepointRequest>,
    life: Arc<Mutex<Life>>,
    identity: Arc<Identity>,
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

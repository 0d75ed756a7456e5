//! The supervisor: runs a job's attempts one after another (each a coordinator and the task
//! threads), restores each restart from the newest checkpoint that reads back, and ends the job
//! as [`decide`](super::decide) says.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use super::decide::{self, AfterFailure, AttemptEnd};
use super::handle::{JobResult, JobStatus, Life};
use super::tasks::run_tasks;
use crate::checkpoint::coordinator::{self, CheckpointStats, SavepointRequest};
use crate::checkpoint::restore::RestoreAssignment;
use crate::checkpoint::storage::CHECKPOINT_PREFIX;
use crate::checkpoint::{CheckpointStorage, Finalizers, RestoreFrom};
use crate::config::EnvConfig;
use crate::error::{Error, Result};
use crate::metrics::MetricsRegistry;
use crate::runtime::JobControl;
use crate::runtime::{JobPlan, Planner, RunContext};

/// What the supervisor owns.
pub(super) struct Supervisor {
    pub(super) planner: Box<dyn Planner>,
    pub(super) config: EnvConfig,
    pub(super) control: Arc<JobControl>,
    pub(super) registry: Arc<MetricsRegistry>,
    pub(super) stats: Arc<Mutex<Vec<CheckpointStats>>>,
    pub(super) storage: Option<Arc<CheckpointStorage>>,
    pub(super) savepoints: crossbeam_channel::Receiver<SavepointRequest>,
    pub(super) nonce: String,
    pub(super) life: Arc<Mutex<Life>>,
}

/// Where the first run starts from.
pub(super) fn initial_restore(
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
        restore.check_state_backend(config.state_backend.as_ref())?;
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
        let mine = decide::restart_candidates(&self.stats.lock().expect("stats lock"));
        if let Some(storage) = &self.storage {
            for id in mine {
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
        let newest_stored = match &self.storage {
            Some(storage) => storage.checkpoint_directories()?.into_iter().max(),
            None => None,
        };
        let first_id =
            decide::first_checkpoint_id(newest_stored, restore.map(|r| r.checkpoint_id()));
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
            let takes_checkpoints = self.storage.is_some() && self.config.checkpoints.enabled();
            let ending = match decide::attempt_end(
                self.control.is_stopped_at_savepoint(),
                takes_checkpoints,
                outcome.committed,
                outcome.final_checkpoint,
            ) {
                AttemptEnd::Commit(ending) => ending,
                AttemptEnd::FinalCheckpointFailed => {
                    return Ok(Some(Error::Checkpoint(
                        "the job's final checkpoint failed: its last output is not committed"
                            .into(),
                    )));
                }
            };
            if let Some(id) = outcome.final_checkpoint.filter(|_| takes_checkpoints) {
                tracing::info!(id, "final checkpoint completed");
            }
            for finalize in finalizers.take() {
                finalize(ending)?;
            }
        }
        Ok(failure)
    }

    pub(super) fn run(self, first: Sender<Result<JobPlan>>) -> Result<JobResult> {
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
            let outcome = self.attempt(attempt, current.as_deref(), &mut first);
            if matches!(outcome, Ok(None)) && !self.control.is_user_cancelled() {
                self.control.leave_retired();
            } else {
                self.control.free_retired();
            }
            let failure = match outcome {
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
                // A state this version of the job cannot read: a restart reads it again.
                Ok(Some(failure)) if failure.is_incompatible_state() => return Err(failure),
                Ok(Some(failure)) => failure,
                Err(error) => return Err(error),
            };
            let (next, delay) = match decide::after_failure(
                self.control.is_user_cancelled(),
                self.config.checkpoints.enabled(),
                self.config.checkpoints.restart,
                attempt,
                attempt_started.elapsed(),
                &mut backoff,
            ) {
                AfterFailure::Cancelled => return Err(Error::Cancelled),
                AfterFailure::Fail => return Err(failure),
                AfterFailure::Restart { attempt, delay } => (attempt, delay),
            };
            attempt = next;
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

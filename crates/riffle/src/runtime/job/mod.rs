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

mod decide;
mod handle;
mod supervisor;
mod tasks;

use std::sync::{Arc, Mutex};
use std::time::Instant;

pub use handle::{JobHandle, JobMonitor, JobOverview, JobResult, JobStatus};
pub(crate) use tasks::TaskSpec;

use crate::checkpoint::coordinator::CheckpointStats;
use crate::checkpoint::{CheckpointStorage, RestoreFrom};
use crate::config::EnvConfig;
use crate::error::{Error, Result};
use crate::metrics::MetricsRegistry;
use crate::runtime::{JobControl, Planner};
use handle::{Identity, Life};
use supervisor::Supervisor;

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
    control.leave_state_at_end(!config.free_state_at_end);
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

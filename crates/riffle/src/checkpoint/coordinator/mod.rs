//! The checkpoint coordinator and its helpers.
//!
//! The coordinator triggers checkpoint N by publishing barrier N in the [`CheckpointHub`]; each
//! source task sees it in its loop, writes its positions and sends the barrier down its chain;
//! tasks with several inputs align it. Each task writes its operators' state synchronously and
//! hands it to the uploader thread, which writes one file per operator subtask and acknowledges.
//! When every task acknowledged, the coordinator writes the manifest (the checkpoint is then
//! complete), publishes the completion (tasks call `notify_checkpoint_complete`), and removes
//! old checkpoints. A failed or timed-out checkpoint is reported and the job goes on.
//!
//! **Finished tasks** (Flink's FLIP-147). A task that finishes (its input ended, its operators
//! closed) hands the coordinator a *final snapshot*: its sources' positions at the end of their
//! splits, its sinks' committables for everything they wrote. Checkpoints go on while any task
//! runs: the final snapshot stands for the finished task in every later checkpoint, and
//! downstream input gates count a finished channel as aligned. When a checkpoint that holds a
//! task's final snapshot completes, that task's sinks commit their last output (their
//! finalizers run). When every task finished, the coordinator takes the job's *final
//! checkpoint*; its manifest is marked `finished` when every source read its input to the end,
//! and only after it completed does the job commit and end. A restore from it reads nothing.
//!
//! **Savepoints** (Flink 1.15+ semantics). The completion of a savepoint is not published: an
//! intermediate savepoint commits no side effects (its pre-committed output is committed by the
//! next checkpoint). A stop-with-savepoint is published: it commits, and the job ends.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use serde::Serialize;

mod schedule;
mod upload;

use self::schedule::{FinishedTask, Moment, PendingSnapshot, Schedule, ScheduleConfig, Trigger};
use self::upload::{OperatorAck, TaskAck};
use crate::checkpoint::manifest::{
    MANIFEST_VERSION, Manifest, OperatorState, SnapshotKind, StoreState,
};
use crate::checkpoint::{
    CheckpointConfig, CheckpointStorage, FINAL_SNAPSHOT, TaskSnapshot, is_in_flight,
};
use crate::checkpoint::{Ending, Finalizers, RetentionFloor};
use crate::control::JobControl;
use crate::error::{Error, Result};
use crate::record::{CheckpointBarrier, Timestamp};
use crate::time::Clock;

/// Outcome of a checkpoint or savepoint.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CheckpointStats {
    /// Checkpoint id.
    pub id: u64,
    /// Checkpoint or savepoint.
    pub kind: SnapshotKind,
    /// `completed`, or why it failed.
    pub status: String,
    /// When it was triggered (epoch ms).
    pub triggered_at: Timestamp,
    /// From trigger to completion.
    pub duration_ms: u64,
    /// Longest barrier alignment of a task.
    pub alignment_ms: u64,
    /// Bytes this checkpoint wrote to storage (store files uploaded by an earlier checkpoint
    /// are referenced, not written again: incremental).
    pub size_bytes: u64,
    /// Bytes of the whole state the checkpoint holds (written now or referenced).
    pub state_size_bytes: u64,
    /// Operator subtasks that wrote state.
    pub subtasks_with_state: usize,
    /// Whether it was an unaligned checkpoint (its barriers overtook queued records).
    pub unaligned: bool,
    /// Bytes of the records in flight it holds (unaligned checkpoints; part of
    /// `state_size_bytes`).
    pub in_flight_bytes: u64,
}

impl CheckpointStats {
    /// Whether the checkpoint completed.
    pub fn completed(&self) -> bool {
        self.status == "completed"
    }
}

/// Where a triggered checkpoint or savepoint writes.
#[derive(Clone)]
struct Target {
    storage: Arc<CheckpointStorage>,
    dir: String,
    /// Whether immutable store files go to the storage's shared directory and are referenced by
    /// later snapshots (checkpoints); a savepoint holds all its files itself.
    shared: bool,
}

/// A task's share of a checkpoint, on its way to the coordinator.
pub(crate) enum CoordinatorEvent {
    Ack {
        id: u64,
        task: usize,
        states: Vec<OperatorAck>,
        store: Option<StoreState>,
        alignment: Duration,
        /// Bytes the upload wrote.
        written: u64,
    },
    Decline {
        id: u64,
        reason: String,
    },
    /// A task's final snapshot (sent just before its `TaskFinished`).
    FinalSnapshot {
        task: usize,
        snapshot: TaskSnapshot,
    },
    /// A task ended after taking part in checkpoint `last` (0: none).
    TaskFinished {
        task: usize,
        last: u64,
    },
}

struct UploadJob {
    task: usize,
    snapshot: TaskSnapshot,
    alignment: Duration,
    /// A finished task's final snapshot, uploaded again for each checkpoint.
    final_snapshot: bool,
}

/// What the coordinator and the tasks share.
pub(crate) struct CheckpointHub {
    requested: Mutex<Option<(CheckpointBarrier, Target)>>,
    requested_id: AtomicU64,
    completed: AtomicU64,
    events: Sender<CoordinatorEvent>,
    uploads: Sender<UploadJob>,
    finished_tasks: AtomicUsize,
    /// The job takes checkpoints into storage (finished tasks then leave final snapshots).
    enabled: bool,
}

/// What a run's coordinator reports when it ends.
#[derive(Debug, Default)]
pub(crate) struct CoordinatorOutcome {
    /// The job's final checkpoint, when it was taken and completed.
    pub(crate) final_checkpoint: Option<u64>,
    /// The newest checkpoint whose completion was published (what sinks may commit up to).
    pub(crate) committed: u64,
    /// A sink's commit failed when a checkpoint with its final snapshot completed.
    pub(crate) error: Option<Error>,
}

impl CheckpointHub {
    /// The barrier a source that injected `last` must inject now, if any.
    pub(crate) fn barrier_after(&self, last: u64) -> Option<CheckpointBarrier> {
        if self.requested_id.load(Ordering::Acquire) <= last {
            return None;
        }
        self.requested
            .lock()
            .expect("hub lock")
            .as_ref()
            .map(|(barrier, _)| *barrier)
    }

    /// Hands a task's snapshot to the uploader (a final snapshot to the coordinator).
    pub(crate) fn submit(&self, task: usize, snapshot: TaskSnapshot, alignment: Duration) {
        if snapshot.checkpoint_id == FINAL_SNAPSHOT {
            let _ = self
                .events
                .send(CoordinatorEvent::FinalSnapshot { task, snapshot });
            return;
        }
        let _ = self.uploads.send(UploadJob {
            task,
            snapshot,
            alignment,
            final_snapshot: false,
        });
    }

    /// Whether the job takes checkpoints into storage: a task that finishes then leaves a final
    /// snapshot.
    pub(crate) fn takes_checkpoints(&self) -> bool {
        self.enabled
    }

    /// The latest completed checkpoint (0: none yet).
    pub(crate) fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    /// Task `task` ended after taking part in checkpoint `last`: its final snapshot (sent
    /// before) stands for it in later checkpoints.
    pub(crate) fn task_finished(&self, task: usize, last: u64) {
        self.finished_tasks.fetch_add(1, Ordering::AcqRel);
        let _ = self
            .events
            .send(CoordinatorEvent::TaskFinished { task, last });
    }

    fn target(&self, id: u64) -> Option<Target> {
        match self.requested.lock().expect("hub lock").as_ref() {
            Some((barrier, target)) if barrier.id == id => Some(target.clone()),
            _ => None,
        }
    }
}

/// A request for a savepoint, from the job's handle.
pub(crate) struct SavepointRequest {
    pub(crate) location: String,
    pub(crate) stop: bool,
    pub(crate) reply: Sender<Result<String>>,
}

struct Pending {
    id: u64,
    kind: SnapshotKind,
    target: Target,
    triggered: Instant,
    triggered_at: Timestamp,
    acks: HashMap<usize, TaskAck>,
    savepoint: Option<SavepointRequest>,
    /// Bytes the acknowledged uploads wrote.
    written: u64,
    /// The finished tasks whose final snapshot stands for them in this checkpoint.
    finals: Vec<usize>,
    /// The job's final checkpoint (every task finished).
    last: bool,
}

impl Pending {
    /// What the schedule's decisions need of it.
    fn view(&self) -> PendingSnapshot {
        PendingSnapshot {
            id: self.id,
            kind: self.kind,
            triggered: self.triggered,
            stop: self.savepoint.as_ref().is_some_and(|s| s.stop),
            last: self.last,
        }
    }
}

/// Everything the coordinator needs.
pub(crate) struct Coordinator {
    pub(crate) hub: Arc<CheckpointHub>,
    events: Receiver<CoordinatorEvent>,
    savepoints: Receiver<SavepointRequest>,
    storage: Option<Arc<CheckpointStorage>>,
    config: CheckpointConfig,
    job: String,
    max_parallelism: usize,
    tasks: usize,
    next_id: u64,
    control: Arc<JobControl>,
    clock: Arc<dyn Clock>,
    pub(crate) stats: Arc<Mutex<Vec<CheckpointStats>>>,
    /// The sinks' commits of their last output, by operator id and subtask.
    finalizers: Finalizers,
    /// Final snapshots of the tasks, by task index.
    finals: HashMap<usize, TaskSnapshot>,
    /// The decisions: when to trigger what, and what each event changes.
    schedule: Schedule,
    outcome: CoordinatorOutcome,
}

/// Creates the hub, the uploader thread, and the coordinator (run with [`Coordinator::run`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn start(
    storage: Option<Arc<CheckpointStorage>>,
    config: CheckpointConfig,
    job: String,
    max_parallelism: usize,
    tasks: usize,
    first_id: u64,
    control: Arc<JobControl>,
    clock: Arc<dyn Clock>,
    savepoints: Receiver<SavepointRequest>,
    stats: Arc<Mutex<Vec<CheckpointStats>>>,
    finalizers: Finalizers,
) -> Result<Coordinator> {
    let (events_tx, events) = crossbeam_channel::unbounded();
    let (uploads_tx, uploads) = crossbeam_channel::unbounded();
    let takes_checkpoints = storage.is_some() && config.enabled();
    let hub = Arc::new(CheckpointHub {
        requested: Mutex::new(None),
        requested_id: AtomicU64::new(first_id.saturating_sub(1)),
        completed: AtomicU64::new(first_id.saturating_sub(1)),
        events: events_tx,
        uploads: uploads_tx,
        finished_tasks: AtomicUsize::new(0),
        enabled: takes_checkpoints,
    });
    let uploader_hub = hub.clone();
    std::thread::Builder::new()
        .name("riffle-uploader".into())
        .spawn(move || upload::run_uploader(uploader_hub, uploads))
        .map_err(|e| Error::io("cannot start the checkpoint uploader", e))?;
    let schedule = Schedule::new(
        ScheduleConfig {
            tasks,
            interval: config.interval,
            min_pause: config.min_pause,
            timeout: config.timeout,
            tolerable_failures: config.tolerable_failed_checkpoints,
            takes_checkpoints,
        },
        Instant::now(),
    );
    Ok(Coordinator {
        hub,
        events,
        savepoints,
        storage,
        config,
        job,
        max_parallelism,
        tasks,
        next_id: first_id,
        control,
        clock,
        stats,
        finalizers,
        finals: HashMap::new(),
        schedule,
        outcome: CoordinatorOutcome {
            committed: first_id.saturating_sub(1),
            ..CoordinatorOutcome::default()
        },
    })
}

impl Coordinator {
    fn trigger(
        &mut self,
        trigger: Trigger,
        target: Target,
        savepoint: Option<SavepointRequest>,
    ) -> Pending {
        let kind = match trigger {
            Trigger::Savepoint => SnapshotKind::Savepoint,
            Trigger::Checkpoint | Trigger::FinalCheckpoint => SnapshotKind::Checkpoint,
        };
        let id = self.next_id;
        self.next_id += 1;
        let triggered_at = self.clock.now();
        let terminate = savepoint.as_ref().is_some_and(|s| s.stop);
        let barrier = CheckpointBarrier {
            id,
            timestamp: triggered_at,
            terminate,
            // Savepoints are always aligned: they hold no in-flight records and restore at any
            // parallelism.
            unaligned: self.config.unaligned && kind == SnapshotKind::Checkpoint,
        };
        let last = self.schedule.triggered(trigger, terminate);
        *self.hub.requested.lock().expect("hub lock") = Some((barrier, target.clone()));
        self.hub.requested_id.store(id, Ordering::Release);
        tracing::debug!(id, ?kind, "checkpoint triggered");
        let mut pending = Pending {
            id,
            kind,
            target,
            triggered: Instant::now(),
            triggered_at,
            acks: HashMap::new(),
            written: 0,
            savepoint,
            finals: Vec::new(),
            last,
        };
        for task in self.schedule.finished_tasks() {
            self.submit_final(&mut pending, task);
        }
        pending
    }

    /// The final snapshot of finished task `task` stands for it in `pending`.
    fn submit_final(&mut self, pending: &mut Pending, task: usize) -> bool {
        let Some(snapshot) = self.finals.get(&task) else {
            return false;
        };
        let mut snapshot = snapshot.clone();
        snapshot.checkpoint_id = pending.id;
        pending.finals.push(task);
        let _ = self.hub.uploads.send(UploadJob {
            task,
            snapshot,
            alignment: Duration::ZERO,
            final_snapshot: true,
        });
        true
    }

    /// A checkpoint holding the final snapshots of `tasks` completed: their sinks commit their
    /// last output.
    fn commit_finished(&mut self, tasks: &[usize]) {
        for task in tasks {
            let Some(snapshot) = self.finals.get(task) else {
                continue;
            };
            for operator in &snapshot.operators {
                for finalize in self.finalizers.take_for(&operator.id, operator.subtask) {
                    if let Err(error) = finalize(Ending::Drained) {
                        tracing::error!(%error, operator = %operator.name, "the commit of a finished sink failed");
                        self.control.fail_attempt();
                        self.schedule.job_failed();
                        if self.outcome.error.is_none() {
                            self.outcome.error = Some(error);
                        }
                    }
                }
            }
        }
    }

    /// Records the statistics of `pending`'s outcome and logs it.
    fn record(&self, pending: &Pending, outcome: &std::result::Result<Manifest, String>) {
        let alignment = pending
            .acks
            .values()
            .map(|(_, _, a)| *a)
            .max()
            .unwrap_or_default();
        let (status, state_size, subtasks, in_flight) = match outcome {
            Ok(manifest) => (
                "completed".to_string(),
                manifest.size(),
                manifest.files().count(),
                manifest
                    .operators
                    .iter()
                    .filter(|(id, _)| is_in_flight(id))
                    .flat_map(|(_, op)| &op.subtasks)
                    .filter_map(|s| s.file.as_ref())
                    .map(|f| f.size)
                    .sum(),
            ),
            Err(reason) => (reason.clone(), 0, 0, 0),
        };
        let stats = CheckpointStats {
            id: pending.id,
            kind: pending.kind,
            status,
            triggered_at: pending.triggered_at,
            duration_ms: pending.triggered.elapsed().as_millis() as u64,
            alignment_ms: alignment.as_millis() as u64,
            size_bytes: pending.written,
            state_size_bytes: state_size,
            subtasks_with_state: subtasks,
            unaligned: self.config.unaligned && pending.kind == SnapshotKind::Checkpoint,
            in_flight_bytes: in_flight,
        };
        match outcome {
            Ok(_) => {
                tracing::info!(id = stats.id, kind = ?stats.kind, duration_ms = stats.duration_ms, size = stats.size_bytes, state_size = stats.state_size_bytes, in_flight = stats.in_flight_bytes, "checkpoint completed")
            }
            Err(reason) => {
                tracing::warn!(id = stats.id, reason, "checkpoint failed; the job goes on")
            }
        }
        self.stats.lock().expect("stats lock").push(stats);
    }

    /// Carries out what the schedule decides for `pending`'s outcome.
    fn finish(&mut self, pending: Pending, outcome: std::result::Result<Manifest, String>) {
        self.record(&pending, &outcome);
        let view = pending.view();
        match outcome {
            Ok(_) => {
                let steps = self.schedule.completed(view, Instant::now());
                if steps.publish {
                    self.hub.completed.store(pending.id, Ordering::Release);
                    self.outcome.committed = pending.id;
                }
                if steps.commit_finished {
                    self.commit_finished(&pending.finals);
                }
                if steps.final_checkpoint {
                    self.outcome.final_checkpoint = Some(pending.id);
                }
                if steps.retain
                    && let Some(storage) = &self.storage
                    && let Err(error) = storage.retain_from(
                        self.config.retained,
                        self.config
                            .retention_floor
                            .as_ref()
                            .map_or(u64::MAX, RetentionFloor::get),
                    )
                {
                    tracing::warn!(%error, "cannot remove old checkpoints");
                }
                if let Some(request) = pending.savepoint {
                    let _ = request.reply.send(Ok(request.location.clone()));
                }
                if steps.stop_job {
                    self.control.stop();
                }
            }
            Err(reason) => {
                let steps = self.schedule.failed(view, Instant::now());
                if steps.remove {
                    let _ = pending.target.storage.delete_dir(&pending.target.dir);
                }
                if let Some((failed, tolerated)) = steps.fail_job
                    && self.outcome.error.is_none()
                {
                    tracing::error!(
                        failed,
                        tolerated,
                        reason,
                        "too many checkpoints failed in a row; the job fails"
                    );
                    self.outcome.error = Some(Error::TooManyFailedCheckpoints {
                        failed,
                        tolerated,
                        last: reason.clone(),
                    });
                    self.control.fail_attempt();
                }
                if let Some(request) = pending.savepoint {
                    let _ = request.reply.send(Err(Error::Checkpoint(format!(
                        "savepoint {} failed: {reason}",
                        pending.id
                    ))));
                }
            }
        }
    }

    fn manifest(&self, pending: &Pending) -> Manifest {
        let mut operators: BTreeMap<String, OperatorState> = BTreeMap::new();
        let stores = pending
            .acks
            .values()
            .filter_map(|(_, store, _)| store.clone())
            .collect();
        for (states, _, _) in pending.acks.values() {
            for ack in states {
                let entry = operators
                    .entry(ack.id.clone())
                    .or_insert_with(|| OperatorState {
                        name: ack.name.clone(),
                        parallelism: ack.parallelism,
                        keyed: false,
                        subtasks: Vec::new(),
                    });
                entry.keyed |= ack.keyed;
                entry.subtasks.push(ack.state.clone());
            }
        }
        for operator in operators.values_mut() {
            operator.subtasks.sort_by_key(|s| s.subtask);
        }
        Manifest {
            version: MANIFEST_VERSION,
            job: self.job.clone(),
            checkpoint_id: pending.id,
            kind: pending.kind,
            timestamp: pending.triggered_at,
            max_parallelism: self.max_parallelism,
            key_hash_version: crate::keys::KEY_HASH_VERSION,
            operators,
            stores,
            finished: pending.last
                && pending.kind == SnapshotKind::Checkpoint
                && !self.control.is_stop_requested()
                && !self.control.is_stopped_at_savepoint(),
        }
    }

    fn complete(&mut self, pending: Pending) {
        let manifest = self.manifest(&pending);
        let outcome = pending
            .target
            .storage
            .write_manifest(&pending.target.dir, &manifest)
            .map(|()| manifest);
        self.finish(pending, outcome.map_err(|e| e.to_string()));
    }

    fn savepoint_target(&self, location: &str) -> Result<Target> {
        let storage = CheckpointStorage::open(
            location,
            &self.config.storage_options,
            "",
            "savepoint location",
        )?;
        Ok(Target {
            storage: Arc::new(storage),
            dir: String::new(),
            shared: false,
        })
    }

    fn checkpoint_target(&self) -> Option<Target> {
        let storage = self.storage.clone()?;
        let dir = format!(
            "{}{}",
            crate::checkpoint::storage::CHECKPOINT_PREFIX,
            self.next_id
        );
        Some(Target {
            storage,
            dir,
            shared: true,
        })
    }

    fn moment(&self, done: &std::sync::atomic::AtomicBool) -> Moment {
        Moment {
            now: Instant::now(),
            done: done.load(Ordering::Acquire),
            stopped_at_savepoint: self.control.is_stopped_at_savepoint(),
        }
    }

    /// Handles one event of the tasks or the uploader.
    fn on_event(&mut self, event: CoordinatorEvent, pending: &mut Option<Pending>) {
        match event {
            CoordinatorEvent::Ack {
                id,
                task,
                states,
                store,
                alignment,
                written,
            } => {
                if let Some(p) = pending.as_mut().filter(|p| p.id == id) {
                    p.acks.insert(task, (states, store, alignment));
                    p.written += written;
                    if p.acks.len() == self.tasks {
                        let p = pending.take().expect("pending");
                        self.complete(p);
                    }
                }
            }
            CoordinatorEvent::Decline { id, reason } => {
                if pending.as_ref().is_some_and(|p| p.id == id) {
                    let p = pending.take().expect("pending");
                    self.finish(p, Err(reason));
                }
            }
            CoordinatorEvent::FinalSnapshot { task, snapshot } => {
                self.finals.insert(task, snapshot);
            }
            CoordinatorEvent::TaskFinished { task, last } => {
                let view = pending.as_ref().map(Pending::view);
                let acked = pending.as_ref().is_some_and(|p| p.acks.contains_key(&task));
                let has_final = self.finals.contains_key(&task);
                match self
                    .schedule
                    .task_finished(task, last, view, acked, has_final)
                {
                    FinishedTask::Nothing => {}
                    // A checkpoint the task did not take part in: its final snapshot stands
                    // for it (downstream gates count its ended channels as aligned).
                    FinishedTask::StandIn => {
                        let mut p = pending.take().expect("pending");
                        self.submit_final(&mut p, task);
                        *pending = Some(p);
                    }
                    FinishedTask::Fail => {
                        let p = pending.take().expect("pending");
                        self.finish(p, Err("a task finished before it took part".into()));
                    }
                }
            }
        }
    }

    /// Runs until the job's tasks are done (`done` set) and its final checkpoint is taken, or
    /// the job is cancelled.
    pub(crate) fn run(mut self, done: Arc<std::sync::atomic::AtomicBool>) -> CoordinatorOutcome {
        let mut pending: Option<Pending> = None;
        let mut queued: Vec<SavepointRequest> = Vec::new();
        loop {
            if self.control.is_cancelled() {
                break;
            }
            // When the tasks are done, the acknowledgements of what they submitted may still be
            // on their way from the uploader: a pending checkpoint gets to complete, and the
            // final checkpoint is taken.
            if self.schedule.may_end(
                self.moment(&done),
                pending.is_some(),
                !self.events.is_empty(),
            ) {
                break;
            }
            crossbeam_channel::select! {
                recv(self.events) -> event => match event {
                    Ok(event) => self.on_event(event, &mut pending),
                    Err(_) => break,
                },
                recv(self.savepoints) -> request => if let Ok(request) = request { queued.push(request) },
                default(Duration::from_millis(20)) => {}
            }
            let steps = self.schedule.step(
                self.moment(&done),
                pending.as_ref().map(Pending::view),
                !queued.is_empty(),
            );
            if steps.time_out {
                let p = pending.take().expect("pending");
                let reason = format!("timed out after {} ms", self.config.timeout.as_millis());
                self.finish(p, Err(reason));
            }
            if steps.refuse_savepoints {
                for request in queued.drain(..) {
                    let _ = request.reply.send(Err(Error::Checkpoint(
                        "the job's input has ended: no savepoint".into(),
                    )));
                }
            }
            match steps.trigger {
                None => {}
                Some(Trigger::Savepoint) => {
                    let request = queued.pop().expect("a savepoint asked for");
                    match self.savepoint_target(&request.location) {
                        Ok(target) => {
                            pending = Some(self.trigger(Trigger::Savepoint, target, Some(request)))
                        }
                        Err(error) => {
                            let _ = request.reply.send(Err(error));
                        }
                    }
                }
                Some(trigger) => {
                    if let Some(target) = self.checkpoint_target() {
                        pending = Some(self.trigger(trigger, target, None));
                    }
                }
            }
        }
        for request in queued {
            let _ = request.reply.send(Err(Error::Checkpoint(
                "the job ended before the savepoint".into(),
            )));
        }
        if let Some(p) = pending.take()
            && let Some(request) = p.savepoint
        {
            let _ = request.reply.send(Err(Error::Checkpoint(
                "the job ended before the savepoint completed".into(),
            )));
        }
        self.outcome
    }
}

//! The checkpoint coordinator and its helpers.
//!
//! The coordinator triggers checkpoint N by publishing barrier N in the [`CheckpointHub`]; each
//! source task sees it in its loop, writes its positions and sends the barrier down its chain;
//! tasks with several inputs align it. Each task writes its operators' state synchronously and
//! hands it to the uploader thread, which writes one file per operator subtask and acknowledges.
//! When every task acknowledged, the coordinator writes the manifest (the checkpoint is then
//! complete), publishes the completion (tasks call `notify_checkpoint_complete`), and removes
//! old checkpoints. A failed or timed-out checkpoint is reported and the job goes on.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use serde::Serialize;

use crate::checkpoint::manifest::{
    Extent, FileRef, MANIFEST_VERSION, Manifest, OperatorState, SnapshotKind, StoreState,
    SubtaskState,
};
use crate::checkpoint::storage::SHARED_DIR;
use crate::checkpoint::{CheckpointConfig, CheckpointStorage, StoreSnapshot, TaskSnapshot};
use crate::error::{Error, Result};
use crate::record::{CheckpointBarrier, Timestamp};
use crate::runtime::JobControl;
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
        states: Vec<(String, String, usize, SubtaskState)>,
        store: Option<StoreState>,
        alignment: Duration,
        /// Bytes the upload wrote.
        written: u64,
    },
    Decline {
        id: u64,
        reason: String,
    },
    /// A task ended after taking part in checkpoint `last` (0: none).
    TaskFinished {
        last: u64,
    },
}

struct UploadJob {
    task: usize,
    snapshot: TaskSnapshot,
    alignment: Duration,
}

/// What the coordinator and the tasks share.
pub(crate) struct CheckpointHub {
    requested: Mutex<Option<(CheckpointBarrier, Target)>>,
    requested_id: AtomicU64,
    completed: AtomicU64,
    events: Sender<CoordinatorEvent>,
    uploads: Sender<UploadJob>,
    finished_tasks: AtomicUsize,
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

    /// Hands a task's snapshot to the uploader.
    pub(crate) fn submit(&self, task: usize, snapshot: TaskSnapshot, alignment: Duration) {
        let _ = self.uploads.send(UploadJob {
            task,
            snapshot,
            alignment,
        });
    }

    /// The latest completed checkpoint (0: none yet).
    pub(crate) fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    /// A task ended after taking part in checkpoint `last`: checkpoints stop (a finished task
    /// cannot take part in later ones).
    pub(crate) fn task_finished(&self, last: u64) {
        self.finished_tasks.fetch_add(1, Ordering::AcqRel);
        let _ = self.events.send(CoordinatorEvent::TaskFinished { last });
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

/// A readable name for an operator id in a file path.
fn file_name_of(operator_id: &str) -> String {
    let clean: String = operator_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!(
        "{clean}-{:08x}",
        crate::keys::stable_hash(operator_id) as u32
    )
}

/// Store files already uploaded, by store and file name: immutable files are referenced again,
/// not uploaded again (incremental checkpoints).
type Uploaded = HashMap<(String, String), FileRef>;

/// Uploads a store checkpoint: new immutable files to `shared/`, the others with the checkpoint.
fn upload_store(
    snapshot: &StoreSnapshot,
    target: &Target,
    uploaded: &mut Uploaded,
) -> Result<(StoreState, u64)> {
    let mut files = Vec::new();
    let mut written = 0;
    for path in &snapshot.files {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let immutable = target.shared && name.ends_with(".sst");
        let key = (snapshot.store_id.clone(), name.clone());
        let file = match uploaded.get(&key) {
            Some(file) if immutable => file.clone(),
            _ => {
                let bytes = std::fs::read(path)
                    .map_err(|e| Error::io(format!("cannot read `{}`", path.display()), e))?;
                let stored = if immutable {
                    format!("{SHARED_DIR}/{}/{name}", snapshot.store_id)
                } else {
                    format!("{}/store-{}/{name}", target.dir, snapshot.store_id)
                };
                let file = target
                    .storage
                    .write(stored.trim_start_matches('/'), bytes)?;
                written += file.size;
                if immutable {
                    uploaded.insert(key, file.clone());
                }
                file
            }
        };
        files.push((name, file));
    }
    let _ = std::fs::remove_dir_all(&snapshot.dir);
    // The store's directory too, if its store has closed and this was its last checkpoint.
    if let Some(parent) = snapshot.dir.parent() {
        let _ = std::fs::remove_dir(parent);
    }
    let state = StoreState {
        store_id: snapshot.store_id.clone(),
        key_groups: (snapshot.key_groups.start, snapshot.key_groups.end),
        files,
    };
    Ok((state, written))
}

/// Writes the task's operator states, one file per operator subtask.
fn upload(job: UploadJob, target: &Target) -> Result<Vec<(String, String, usize, SubtaskState)>> {
    let mut states = Vec::new();
    for operator in job.snapshot.operators {
        if operator.writer.is_empty() {
            // No state, but the watermark: lateness after a restore is judged as before.
            if let Some(watermark) = operator.writer.watermark {
                let state = SubtaskState {
                    subtask: operator.subtask,
                    file: None,
                    keyed: Vec::new(),
                    operator: None,
                    watermark: Some(watermark),
                };
                states.push((operator.id, operator.name, operator.parallelism, state));
            }
            continue;
        }
        let mut bytes = Vec::with_capacity(operator.writer.size());
        let mut keyed = Vec::with_capacity(operator.writer.keyed.len());
        for (key_group, blob) in &operator.writer.keyed {
            keyed.push((
                *key_group,
                Extent {
                    offset: bytes.len() as u64,
                    len: blob.len() as u64,
                },
            ));
            bytes.extend_from_slice(blob);
        }
        let operator_state = operator.writer.operator.as_ref().map(|(mode, blob)| {
            let extent = Extent {
                offset: bytes.len() as u64,
                len: blob.len() as u64,
            };
            bytes.extend_from_slice(blob);
            (*mode, extent)
        });
        let path = format!(
            "{}/{}/{}.state",
            target.dir,
            file_name_of(&operator.id),
            operator.subtask
        );
        let file = target.storage.write(path.trim_start_matches('/'), bytes)?;
        states.push((
            operator.id,
            operator.name,
            operator.parallelism,
            SubtaskState {
                subtask: operator.subtask,
                file: Some(file),
                keyed,
                operator: operator_state,
                watermark: operator.writer.watermark,
            },
        ));
    }
    Ok(states)
}

/// The uploader: writes snapshots in the background and acknowledges them.
fn run_uploader(hub: Arc<CheckpointHub>, jobs: Receiver<UploadJob>) {
    let mut uploaded = Uploaded::new();
    for mut job in jobs.iter() {
        let id = job.snapshot.checkpoint_id;
        let store = job.snapshot.store.take();
        let Some(target) = hub.target(id) else {
            if let Some(store) = store {
                let _ = std::fs::remove_dir_all(&store.dir);
            }
            continue; // aborted meanwhile
        };
        let (task, alignment) = (job.task, job.alignment);
        let store = store
            .map(|s| upload_store(&s, &target, &mut uploaded))
            .transpose();
        let event = match store.and_then(|store| upload(job, &target).map(|states| (states, store)))
        {
            Ok((states, store)) => {
                let (store, store_written) = store.unzip();
                let written = store_written.unwrap_or(0)
                    + states
                        .iter()
                        .filter_map(|(.., s)| s.file.as_ref())
                        .map(|f| f.size)
                        .sum::<u64>();
                CoordinatorEvent::Ack {
                    id,
                    task,
                    states,
                    store,
                    alignment,
                    written,
                }
            }
            Err(error) => CoordinatorEvent::Decline {
                id,
                reason: error.to_string(),
            },
        };
        let _ = hub.events.send(event);
    }
}

struct Pending {
    id: u64,
    kind: SnapshotKind,
    target: Target,
    triggered: Instant,
    triggered_at: Timestamp,
    acks: HashMap<
        usize,
        (
            Vec<(String, String, usize, SubtaskState)>,
            Option<StoreState>,
            Duration,
        ),
    >,
    savepoint: Option<SavepointRequest>,
    /// Bytes the acknowledged uploads wrote.
    written: u64,
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
) -> Result<Coordinator> {
    let (events_tx, events) = crossbeam_channel::unbounded();
    let (uploads_tx, uploads) = crossbeam_channel::unbounded();
    let hub = Arc::new(CheckpointHub {
        requested: Mutex::new(None),
        requested_id: AtomicU64::new(first_id.saturating_sub(1)),
        completed: AtomicU64::new(first_id.saturating_sub(1)),
        events: events_tx,
        uploads: uploads_tx,
        finished_tasks: AtomicUsize::new(0),
    });
    let uploader_hub = hub.clone();
    std::thread::Builder::new()
        .name("riffle-uploader".into())
        .spawn(move || run_uploader(uploader_hub, uploads))
        .map_err(|e| Error::io("cannot start the checkpoint uploader", e))?;
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
    })
}

impl Coordinator {
    fn trigger(
        &mut self,
        kind: SnapshotKind,
        target: Target,
        savepoint: Option<SavepointRequest>,
    ) -> Pending {
        let id = self.next_id;
        self.next_id += 1;
        let triggered_at = self.clock.now();
        let terminate = savepoint.as_ref().is_some_and(|s| s.stop);
        let barrier = CheckpointBarrier {
            id,
            timestamp: triggered_at,
            terminate,
        };
        *self.hub.requested.lock().expect("hub lock") = Some((barrier, target.clone()));
        self.hub.requested_id.store(id, Ordering::Release);
        tracing::debug!(id, ?kind, "checkpoint triggered");
        Pending {
            id,
            kind,
            target,
            triggered: Instant::now(),
            triggered_at,
            acks: HashMap::new(),
            written: 0,
            savepoint,
        }
    }

    fn finish(&mut self, pending: Pending, outcome: std::result::Result<Manifest, String>) {
        let alignment = pending
            .acks
            .values()
            .map(|(_, _, a)| *a)
            .max()
            .unwrap_or_default();
        let (status, state_size, subtasks) = match &outcome {
            Ok(manifest) => (
                "completed".to_string(),
                manifest.size(),
                manifest.files().count(),
            ),
            Err(reason) => (reason.clone(), 0, 0),
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
        };
        match &outcome {
            Ok(_) => {
                tracing::info!(id = stats.id, kind = ?stats.kind, duration_ms = stats.duration_ms, size = stats.size_bytes, state_size = stats.state_size_bytes, "checkpoint completed")
            }
            Err(reason) => {
                tracing::warn!(id = stats.id, reason, "checkpoint failed; the job goes on")
            }
        }
        self.stats.lock().expect("stats lock").push(stats);
        match outcome {
            Ok(_) => {
                self.hub.completed.store(pending.id, Ordering::Release);
                if pending.kind == SnapshotKind::Checkpoint
                    && let Some(storage) = &self.storage
                    && let Err(error) = storage.retain(self.config.retained)
                {
                    tracing::warn!(%error, "cannot remove old checkpoints");
                }
                if let Some(request) = pending.savepoint {
                    let _ = request.reply.send(Ok(request.location.clone()));
                    if request.stop {
                        self.control.stop();
                    }
                }
            }
            Err(reason) => {
                if pending.kind == SnapshotKind::Checkpoint {
                    let _ = pending.target.storage.delete_dir(&pending.target.dir);
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
            for (id, name, parallelism, state) in states {
                let entry = operators
                    .entry(id.clone())
                    .or_insert_with(|| OperatorState {
                        name: name.clone(),
                        parallelism: *parallelism,
                        subtasks: Vec::new(),
                    });
                entry.subtasks.push(state.clone());
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

    /// Runs until the job's tasks are done (`done` set) or the job is cancelled.
    pub(crate) fn run(mut self, done: Arc<std::sync::atomic::AtomicBool>) {
        let interval = self.config.interval;
        let mut pending: Option<Pending> = None;
        let mut queued: Vec<SavepointRequest> = Vec::new();
        let mut next_trigger = interval.map(|i| Instant::now() + i);
        let mut finished = false;
        // When the tasks are done, the acknowledgements of what they submitted may still be on
        // their way from the uploader: a pending checkpoint gets to complete.
        while !(done.load(Ordering::Acquire) && pending.is_none()) && !self.control.is_cancelled() {
            crossbeam_channel::select! {
                recv(self.events) -> event => match event {
                    Ok(CoordinatorEvent::Ack { id, task, states, store, alignment, written }) => {
                        if let Some(p) = pending.as_mut().filter(|p| p.id == id) {
                            p.acks.insert(task, (states, store, alignment));
                            p.written += written;
                            if p.acks.len() == self.tasks {
                                let p = pending.take().expect("pending");
                                self.complete(p);
                                next_trigger = interval.map(|i| Instant::now() + self.config.min_pause.max(i));
                            }
                        }
                    }
                    Ok(CoordinatorEvent::Decline { id, reason }) => {
                        if pending.as_ref().is_some_and(|p| p.id == id) {
                            let p = pending.take().expect("pending");
                            self.finish(p, Err(reason));
                            next_trigger = interval.map(|i| Instant::now() + self.config.min_pause.max(i));
                        }
                    }
                    Ok(CoordinatorEvent::TaskFinished { last }) => {
                        finished = true;
                        if pending.as_ref().is_some_and(|p| p.id > last) {
                            let p = pending.take().expect("pending");
                            self.finish(p, Err("a task finished before it took part".into()));
                        }
                    }
                    Err(_) => break,
                },
                recv(self.savepoints) -> request => if let Ok(request) = request { queued.push(request) },
                default(Duration::from_millis(20)) => {}
            }
            if let Some(p) = &pending
                && p.triggered.elapsed() > self.config.timeout
            {
                let p = pending.take().expect("pending");
                let reason = format!("timed out after {} ms", self.config.timeout.as_millis());
                self.finish(p, Err(reason));
                next_trigger = interval.map(|i| Instant::now() + self.config.min_pause.max(i));
            }
            if pending.is_some() {
                continue;
            }
            if finished || done.load(Ordering::Acquire) {
                for request in queued.drain(..) {
                    let _ = request.reply.send(Err(Error::Checkpoint(
                        "the job's input has ended: no savepoint".into(),
                    )));
                }
                continue;
            }
            if let Some(request) = queued.pop() {
                match self.savepoint_target(&request.location) {
                    Ok(target) => {
                        pending = Some(self.trigger(SnapshotKind::Savepoint, target, Some(request)))
                    }
                    Err(error) => {
                        let _ = request.reply.send(Err(error));
                    }
                }
            } else if next_trigger.is_some_and(|t| Instant::now() >= t)
                && let Some(storage) = self.storage.clone()
            {
                let dir = format!(
                    "{}{}",
                    crate::checkpoint::storage::CHECKPOINT_PREFIX,
                    self.next_id
                );
                pending = Some(self.trigger(
                    SnapshotKind::Checkpoint,
                    Target {
                        storage,
                        dir,
                        shared: true,
                    },
                    None,
                ));
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
    }
}

//! The checkpoint uploader: a thread that writes each task's snapshot to storage (one file per
//! operator subtask; a key-value store's new immutable files once, into `shared/`) while the
//! tasks go on processing, and acknowledges it to the coordinator.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Receiver;

use super::{CheckpointHub, CoordinatorEvent, Target, UploadJob};
use crate::checkpoint::StoreSnapshot;
use crate::checkpoint::manifest::{Extent, FileRef, StoreState, SubtaskState};
use crate::checkpoint::storage::SHARED_DIR;
use crate::error::{Error, Result};

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
    final_snapshot: bool,
) -> Result<(StoreState, u64)> {
    let all_shared = final_snapshot && target.shared;
    let mut files = Vec::new();
    let mut written = 0;
    for path in &snapshot.files {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // A finished task's store never changes again: all its files are shared, so that every
        // later checkpoint references them.
        let immutable = target.shared && (all_shared || name.ends_with(".sst"));
        let key = (snapshot.store_id.clone(), name.clone());
        let file = match uploaded.get(&key) {
            Some(file) if immutable => file.clone(),
            _ => {
                let bytes = std::fs::read(path)
                    .map_err(|e| Error::io(format!("cannot read `{}`", path.display()), e))?;
                let stored = if immutable && all_shared && !name.ends_with(".sst") {
                    format!("{SHARED_DIR}/{}/final-{name}", snapshot.store_id)
                } else if immutable {
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
    if final_snapshot && !target.shared {
        // Kept for the checkpoints that follow (they upload it once, into shared files).
        return Ok((
            StoreState {
                store_id: snapshot.store_id.clone(),
                key_groups: (snapshot.key_groups.start, snapshot.key_groups.end),
                files,
            },
            written,
        ));
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
fn upload(job: UploadJob, target: &Target) -> Result<Vec<OperatorAck>> {
    let mut states = Vec::new();
    for operator in job.snapshot.operators {
        if operator.writer.is_empty() {
            // No state in a file, but the watermark (lateness after a restore is judged as
            // before) or the schemas of state in the task's store.
            if operator.writer.watermark.is_some() || !operator.writer.states.is_empty() {
                let state = SubtaskState {
                    subtask: operator.subtask,
                    file: None,
                    keyed: Vec::new(),
                    operator: None,
                    watermark: operator.writer.watermark,
                    states: operator.writer.states,
                };
                states.push(OperatorAck {
                    id: operator.id,
                    name: operator.name,
                    parallelism: operator.parallelism,
                    keyed: operator.writer.keyed_operator,
                    state,
                });
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
        states.push(OperatorAck {
            id: operator.id,
            name: operator.name,
            parallelism: operator.parallelism,
            keyed: operator.writer.keyed_operator,
            state: SubtaskState {
                subtask: operator.subtask,
                file: Some(file),
                keyed,
                operator: operator_state,
                watermark: operator.writer.watermark,
                states: operator.writer.states,
            },
        });
    }
    Ok(states)
}

/// The uploader: writes snapshots in the background and acknowledges them.
pub(super) fn run_uploader(hub: Arc<CheckpointHub>, jobs: Receiver<UploadJob>) {
    let mut uploaded = Uploaded::new();
    // The store state of each finished task, uploaded once into shared files.
    let mut final_stores: HashMap<usize, StoreState> = HashMap::new();
    for mut job in jobs.iter() {
        let id = job.snapshot.checkpoint_id;
        let store = job.snapshot.store.take();
        let Some(target) = hub.target(id) else {
            if let Some(store) = store
                && !job.final_snapshot
            {
                let _ = std::fs::remove_dir_all(&store.dir);
            }
            continue; // aborted meanwhile
        };
        let (task, alignment) = (job.task, job.alignment);
        let store = match store {
            Some(_) if job.final_snapshot && target.shared && final_stores.contains_key(&task) => {
                Ok(Some((final_stores[&task].clone(), 0)))
            }
            Some(s) if job.final_snapshot => {
                let result = upload_store(&s, &target, &mut uploaded, true);
                if let (Ok((state, _)), true) = (&result, target.shared) {
                    final_stores.insert(task, state.clone());
                }
                result.map(Some)
            }
            Some(s) => upload_store(&s, &target, &mut uploaded, false).map(Some),
            None => Ok(None),
        };
        let event = match store.and_then(|store| upload(job, &target).map(|states| (states, store)))
        {
            Ok((states, store)) => {
                let (store, store_written) = store.unzip();
                let written = store_written.unwrap_or(0)
                    + states
                        .iter()
                        .filter_map(|ack| ack.state.file.as_ref())
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

/// One task's acknowledgement: its operator states, its store, and how long it aligned.
pub(super) type TaskAck = (Vec<OperatorAck>, Option<StoreState>, Duration);

/// One operator subtask's share of a checkpoint.
pub(crate) struct OperatorAck {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) parallelism: usize,
    /// A keyed operator (its keyed state may lie in the task's store).
    pub(super) keyed: bool,
    pub(super) state: SubtaskState,
}

//! The manifest of a checkpoint or savepoint: which files hold which operator's state, with a
//! checksum per file. Written last: a checkpoint without a manifest never completed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::checkpoint::Redistribution;
use crate::keys::KeyGroup;
use crate::record::Timestamp;

/// Version of the manifest format.
pub const MANIFEST_VERSION: u32 = 1;

/// Name of the manifest file in a checkpoint's directory.
pub const MANIFEST_FILE: &str = "_manifest.json";

/// A checkpoint (taken and retained by the job) or a savepoint (taken on request, owned by the user).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotKind {
    /// Periodic, for recovery; old ones are removed.
    Checkpoint,
    /// On request; never removed by the job.
    Savepoint,
}

/// A stored file: where, how big, and its checksum (xxh3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    /// Path relative to the storage root of the job.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// xxh3-64 of the content.
    pub checksum: u64,
}

/// Where one part of a subtask's state lies in its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extent {
    /// Byte offset.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// The state of one operator subtask.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskState {
    /// Index of the subtask when the snapshot was taken.
    pub subtask: usize,
    /// The file holding its state (`None`: the operator had only its watermark).
    pub file: Option<FileRef>,
    /// Keyed state, per key group.
    pub keyed: Vec<(KeyGroup, Extent)>,
    /// Non-keyed operator state.
    pub operator: Option<(Redistribution, Extent)>,
    /// The operator's watermark at the barrier.
    #[serde(default)]
    pub watermark: Option<Timestamp>,
}

/// The state of one operator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorState {
    /// Operator name when the snapshot was taken.
    pub name: String,
    /// Parallelism when the snapshot was taken.
    pub parallelism: usize,
    /// The subtasks that had state.
    pub subtasks: Vec<SubtaskState>,
}

/// A checkpoint of one task's key-value store (RocksDB): its files, by their name in the store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreState {
    /// Identifies the store (its immutable files are shared between checkpoints).
    pub store_id: String,
    /// The key groups it holds.
    pub key_groups: (KeyGroup, KeyGroup),
    /// Its files: name in the store's directory, and where it is stored.
    pub files: Vec<(String, FileRef)>,
}

/// Everything a completed checkpoint or savepoint holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version.
    pub version: u32,
    /// Name of the job.
    pub job: String,
    /// Checkpoint id.
    pub checkpoint_id: u64,
    /// Checkpoint or savepoint.
    pub kind: SnapshotKind,
    /// When it was triggered (epoch ms).
    pub timestamp: Timestamp,
    /// Number of key groups of the job.
    pub max_parallelism: usize,
    /// The scheme that put keys into key groups ([`KEY_HASH_VERSION`](crate::keys::KEY_HASH_VERSION)
    /// when written by this release); 0 for manifests written before it was recorded.
    #[serde(default)]
    pub key_hash_version: u32,
    /// State by operator id.
    pub operators: BTreeMap<String, OperatorState>,
    /// Checkpoints of the tasks' key-value stores.
    #[serde(default)]
    pub stores: Vec<StoreState>,
}

impl Manifest {
    /// Total bytes of the checkpoint's files (store files included, shared ones too).
    pub fn size(&self) -> u64 {
        self.files().map(|f| f.size).sum::<u64>() + self.store_files().map(|f| f.size).sum::<u64>()
    }

    /// The operators' state files.
    pub fn files(&self) -> impl Iterator<Item = &FileRef> {
        self.operators
            .values()
            .flat_map(|op| op.subtasks.iter().filter_map(|s| s.file.as_ref()))
    }

    /// The store files (some shared with other checkpoints).
    pub fn store_files(&self) -> impl Iterator<Item = &FileRef> {
        self.stores
            .iter()
            .flat_map(|s| s.files.iter().map(|(_, f)| f))
    }
}

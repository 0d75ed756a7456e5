//! Fault tolerance: barrier checkpoints of every operator's state, their storage, and the restore
//! of a job from one (Flink's asynchronous barrier snapshots).

mod config;
pub(crate) mod coordinator;
mod finalize;
mod manifest;
pub(crate) mod restore;
mod snapshot;
pub(crate) mod storage;

pub use config::{
    CheckpointConfig, RestartStrategy, RestoreFrom, RetentionFloor, SHORT_INTERVAL_WARNING,
};
pub use coordinator::CheckpointStats;
pub(crate) use finalize::Finalizers;
pub use finalize::{Ending, Finalizer};
pub use manifest::{
    Extent, FileRef, MANIFEST_FILE, MANIFEST_VERSION, Manifest, ManifestPart, OperatorState,
    SnapshotKind, StoreState, SubtaskState,
};
pub use snapshot::{
    FINAL_SNAPSHOT, OperatorSnapshot, Redistribution, RestoreState, SnapshotWriter, StoreSnapshot,
    TaskSnapshot, decode, encode, encode_into,
};
pub use storage::{CheckpointStorage, WarmFiles, checkpoint_dir};

/// What the ids of in-flight records in a checkpoint contain (unaligned checkpoints:
/// `<operator uid>#in-flight-input`, `<producer uid>#in-flight-output-><consumer uid>#<input>`).
pub const IN_FLIGHT_MARKER: &str = "#in-flight-";

/// Whether operator state `id` holds records in flight of an unaligned checkpoint.
///
/// ```
/// assert!(riffle::checkpoint::is_in_flight("window#in-flight-input"));
/// assert!(!riffle::checkpoint::is_in_flight("window"));
/// ```
pub fn is_in_flight(id: &str) -> bool {
    id.contains(IN_FLIGHT_MARKER)
}

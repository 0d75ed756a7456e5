//! What an operator writes at a checkpoint and gets back on restore.
//!
//! Keyed state is written per key group, so that a restore at another parallelism hands each
//! new subtask exactly the key groups it owns. Non-keyed operator state (a source's positions, a
//! sink's pending files) is a blob per subtask, redistributed on restore either whole to every
//! subtask (union: each source subtask picks the positions of the splits it reads), round robin
//! (each pending transaction to exactly one new subtask), or broadcast (every subtask holds an
//! equal copy, as Flink's broadcast state: each new subtask gets exactly one copy).

use std::collections::BTreeMap;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Result;
use crate::keys::KeyGroup;
use crate::record::Timestamp;
use crate::state::StateSchema;

/// How non-keyed operator state is handed out on restore.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Redistribution {
    /// Every new subtask gets the state of every old subtask.
    Union,
    /// The state of old subtask `i` goes to new subtask `i % parallelism`.
    RoundRobin,
    /// Every old subtask wrote an equal copy (broadcast state): new subtask `i` gets exactly one,
    /// the copy of old subtask `i % old parallelism` (its own copy when the parallelism did not
    /// change), or the first copy written if that subtask wrote none. So a restore at any
    /// parallelism, more or fewer subtasks, gives every subtask the whole state once.
    Broadcast,
}

pub use crate::codec::{decode, encode, encode_into};

/// What one operator instance writes at a checkpoint.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SnapshotWriter {
    pub(crate) keyed: BTreeMap<KeyGroup, Vec<u8>>,
    pub(crate) operator: Option<(Redistribution, Vec<u8>)>,
    /// The operator's watermark at the barrier (set by the runtime).
    pub(crate) watermark: Option<Timestamp>,
    /// Whether the operator is keyed (set by the runtime).
    pub(crate) keyed_operator: bool,
    /// The schemas of its declared keyed state.
    pub(crate) states: Vec<StateSchema>,
}

impl SnapshotWriter {
    /// Writes the state of key group `key_group` (one blob per key group; a second call replaces
    /// the first).
    pub fn write_keyed<T: Serialize + ?Sized>(
        &mut self,
        key_group: KeyGroup,
        value: &T,
    ) -> Result<()> {
        self.keyed.insert(key_group, encode(value)?);
        Ok(())
    }

    /// Writes the operator's non-keyed state.
    pub fn write_operator<T: Serialize + ?Sized>(
        &mut self,
        redistribution: Redistribution,
        value: &T,
    ) -> Result<()> {
        self.operator = Some((redistribution, encode(value)?));
        Ok(())
    }

    /// Whether nothing was written (a watermark alone is not state worth a file).
    pub fn is_empty(&self) -> bool {
        self.keyed.is_empty() && self.operator.is_none()
    }

    /// Records the schemas of the operator's declared keyed state (see
    /// [`StateSchema`]): a restore by a later version of the job reads older values with them.
    pub fn record_state_schemas(&mut self, schemas: Vec<StateSchema>) {
        self.states = schemas;
    }

    /// Bytes written.
    pub fn size(&self) -> usize {
        self.keyed.values().map(Vec::len).sum::<usize>()
            + self.operator.as_ref().map_or(0, |(_, b)| b.len())
    }
}

/// What one operator instance wrote at a barrier, and who it is.
#[derive(Debug, Clone)]
pub struct OperatorSnapshot {
    /// Stable operator id.
    pub id: String,
    /// Operator name.
    pub name: String,
    /// Subtask index.
    pub subtask: usize,
    /// Parallelism of the operator.
    pub parallelism: usize,
    /// What it wrote.
    pub writer: SnapshotWriter,
}

/// A checkpoint of a task's key-value store, on local disk until uploaded.
#[derive(Debug, Clone)]
pub struct StoreSnapshot {
    /// Identifies the store across checkpoints (its immutable files keep their names).
    pub store_id: String,
    /// The key groups the store holds.
    pub key_groups: crate::keys::KeyGroupRange,
    /// The checkpoint's directory.
    pub dir: std::path::PathBuf,
    /// Its files.
    pub files: Vec<std::path::PathBuf>,
}

/// The checkpoint id of a task's *final snapshot*: taken when the task finished (its operators
/// closed), it stands for the task in every later checkpoint (Flink's FLIP-147).
pub const FINAL_SNAPSHOT: u64 = u64::MAX;

/// The snapshots of one task's operators at one barrier.
#[derive(Debug, Default, Clone)]
pub struct TaskSnapshot {
    /// The checkpoint.
    pub checkpoint_id: u64,
    /// One entry per operator of the chain.
    pub operators: Vec<OperatorSnapshot>,
    /// The task's key-value store, when the state backend has one.
    pub store: Option<StoreSnapshot>,
}

impl TaskSnapshot {
    /// An empty snapshot for `checkpoint_id`.
    pub fn new(checkpoint_id: u64) -> Self {
        TaskSnapshot {
            checkpoint_id,
            operators: Vec::new(),
            store: None,
        }
    }
}

/// What one operator instance restores: the key groups it owns now, and the operator state the
/// redistribution gave it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RestoreState {
    pub(crate) keyed: Vec<(KeyGroup, Vec<u8>)>,
    pub(crate) operator: Vec<Vec<u8>>,
    pub(crate) watermark: Option<Timestamp>,
    pub(crate) states: Vec<StateSchema>,
}

impl RestoreState {
    /// The keyed state of every key group this instance owns (written by any old subtask).
    pub fn keyed<T: DeserializeOwned>(&self) -> impl Iterator<Item = Result<(KeyGroup, T)>> + '_ {
        self.keyed
            .iter()
            .map(|(kg, bytes)| decode(bytes).map(|value| (*kg, value)))
    }

    /// The operator states handed to this instance.
    pub fn operator<T: DeserializeOwned>(&self) -> impl Iterator<Item = Result<T>> + '_ {
        self.operator.iter().map(|bytes| decode(bytes))
    }

    /// Whether there is nothing to restore.
    pub fn is_empty(&self) -> bool {
        self.keyed.is_empty()
            && self.operator.is_empty()
            && self.watermark.is_none()
            && self.states.is_empty()
    }

    /// The schemas the snapshot recorded of the operator's declared keyed state, from every
    /// old subtask.
    pub fn state_schemas(&self) -> &[StateSchema] {
        &self.states
    }

    /// The operator's watermark when the snapshot was taken (the lowest of its old subtasks):
    /// lateness is judged after a restore as it would have been without the failure.
    pub fn watermark(&self) -> Option<Timestamp> {
        self.watermark
    }

    /// What a restore of `snapshot` by the same instance gets (same key groups, its own
    /// operator state): for harnesses and tests.
    pub fn from_snapshot(snapshot: &SnapshotWriter) -> Self {
        RestoreState {
            keyed: snapshot
                .keyed
                .iter()
                .map(|(kg, b)| (*kg, b.clone()))
                .collect(),
            operator: snapshot.operator.iter().map(|(_, b)| b.clone()).collect(),
            watermark: snapshot.watermark,
            states: snapshot.states.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_round_trip() {
        let mut writer = SnapshotWriter::default();
        writer
            .write_keyed(3, &vec![(7u64, "a".to_string())])
            .unwrap();
        writer
            .write_operator(Redistribution::Union, &42u32)
            .unwrap();
        assert!(writer.size() > 0);
        let restore = RestoreState::from_snapshot(&writer);
        let keyed: Vec<(KeyGroup, Vec<(u64, String)>)> =
            restore.keyed().collect::<Result<_>>().unwrap();
        assert_eq!(keyed, vec![(3, vec![(7, "a".to_string())])]);
        assert_eq!(
            restore
                .operator::<u32>()
                .collect::<Result<Vec<_>>>()
                .unwrap(),
            vec![42]
        );
        assert!(decode::<u64>(&[0xff; 20]).is_err());
    }
}

//! [`KeyedTable`]: a keyed state table an operator declares by name — a window operator's
//! windows or sessions, a rolling aggregate's accumulators — and the one place that writes it
//! into a checkpoint and reads it back.
//!
//! An operator declares the table once, when it is built ([`KeyedTable::declare`]), and uses it
//! as a [`StateTable`] (on the heap, or in the task's store with RocksDB). At a barrier,
//! [`KeyedTable::snapshot`] writes the heap's entries per key group, with what else the key
//! group carries (a window function's own keyed state: [`GroupState`]), and records the
//! schemas of both; a store checkpoints its own entries. [`KeyedTable::restore`] reads the key
//! groups the subtask owns (at any parallelism), converting values that an older format of
//! their type wrote (`state::versioned`), and converts a store's entries the same way.
//!
//! A key group is written as its entries `(namespace, key, value)` alone, or as the pair
//! `(entries, group state)` when it has group state: the format window operators have always
//! written (a `()` namespace takes no bytes, so a rolling aggregate's `(key, value)` entries
//! are the same bytes).

use std::hash::Hash;
use std::ops::{Deref, DerefMut};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::checkpoint::{RestoreState, SnapshotWriter};
use crate::error::Result;
use crate::keys::{KeyGroup, KeyGroupRange};
use crate::operators::OperatorContext;
use crate::record::Data;
use crate::state::StateTable;
use crate::state::evolution::StateSchema;
use crate::state::versioned::TableState;

/// What a key group carries beside a [`KeyedTable`]'s entries: a window function's keyed state.
pub(crate) trait GroupState {
    /// The state of `key_group` for a checkpoint (`None`: none).
    fn snapshot_group(&self, key_group: KeyGroup) -> Result<Option<Vec<u8>>>;
    /// Restores what [`snapshot_group`](GroupState::snapshot_group) wrote.
    fn restore_group(&mut self, key_group: KeyGroup, bytes: &[u8]) -> Result<()>;
    /// The schemas of its states, for a checkpoint.
    fn schemas(&self) -> Vec<StateSchema>;
    /// Takes the schemas a restored checkpoint recorded (before its key groups).
    fn restore_schemas(&mut self, schemas: &[StateSchema]);
}

/// No state beside the table's entries.
pub(crate) struct NoGroupState;

impl GroupState for NoGroupState {
    fn snapshot_group(&self, _: KeyGroup) -> Result<Option<Vec<u8>>> {
        Ok(None)
    }
    fn restore_group(&mut self, _: KeyGroup, _: &[u8]) -> Result<()> {
        Ok(())
    }
    fn schemas(&self) -> Vec<StateSchema> {
        Vec::new()
    }
    fn restore_schemas(&mut self, _: &[StateSchema]) {}
}

/// A keyed state table of an operator, declared by name (see the module's documentation).
pub(crate) struct KeyedTable<K, N, V> {
    table: StateTable<K, N, V>,
    state: TableState<V>,
    range: KeyGroupRange,
    operator: String,
}

impl<K, N, V> KeyedTable<K, N, V>
where
    K: Data + Hash + Eq,
    N: Hash + Eq + Clone + Serialize + DeserializeOwned + 'static,
    V: Data,
{
    /// The table `name` of the operator of `ctx`, in its task's backend.
    pub(crate) fn declare(ctx: &OperatorContext, name: &str) -> Self {
        KeyedTable {
            table: ctx.state_table(name),
            state: TableState::new(name),
            range: ctx.key_groups,
            operator: ctx.id.clone(),
        }
    }

    /// Writes the heap's entries of every key group with any, and `group`'s state, with the
    /// schemas of both.
    pub(crate) fn snapshot(
        &self,
        writer: &mut SnapshotWriter,
        group: &dyn GroupState,
    ) -> Result<()> {
        let heap = self.table.heap();
        for key_group in self.range.start..=self.range.end {
            let entries = heap.map(|t| t.group_entries(key_group)).unwrap_or_default();
            match group.snapshot_group(key_group)? {
                Some(state) => writer.write_keyed(key_group, &(entries, state))?,
                None if entries.is_empty() => {}
                None => writer.write_keyed(key_group, &entries)?,
            }
        }
        let mut schemas = vec![self.state.schema()];
        schemas.extend(group.schemas());
        writer.record_state_schemas(schemas);
        Ok(())
    }

    /// Restores what [`snapshot`](KeyedTable::snapshot) wrote (the key groups this subtask
    /// owns), and `group`'s state; converts the values an older format of their type wrote,
    /// in the checkpoint's entries and in the task's store. Fails with
    /// [`Error::IncompatibleState`](crate::Error::IncompatibleState) naming the operator and the
    /// state when they cannot be read.
    pub(crate) fn restore(
        &mut self,
        restored: &RestoreState,
        group: &mut dyn GroupState,
    ) -> Result<()> {
        let values = self
            .state
            .reader(&self.operator, restored.state_schemas())?;
        group.restore_schemas(restored.state_schemas());
        for (key_group, bytes) in &restored.keyed {
            let mut input = bytes.as_slice();
            for ((namespace, key), value) in values.read_entries::<(N, K)>(&mut input)? {
                self.table.put(*key_group, key, namespace, value)?;
            }
            if !input.is_empty() {
                let state: Vec<u8> = crate::codec::decode(input)?;
                group.restore_group(*key_group, &state)?;
            }
        }
        values.rewrite_store(&mut self.table)?;
        Ok(())
    }
}

impl<K, N, V> Deref for KeyedTable<K, N, V> {
    type Target = StateTable<K, N, V>;
    fn deref(&self) -> &StateTable<K, N, V> {
        &self.table
    }
}

impl<K, N, V> DerefMut for KeyedTable<K, N, V> {
    fn deref_mut(&mut self) -> &mut StateTable<K, N, V> {
        &mut self.table
    }
}

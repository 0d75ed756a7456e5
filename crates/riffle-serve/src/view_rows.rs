//! Where a materialized view keeps its rows: hash maps on the heap, or, when the view's job
//! keeps its state in a key-value store (`--state-backend rocksdb`), that store.
//!
//! In the store, a row lies under `[key group: 2][state id: 4][0: 2][the key, canonically
//! encoded]` (big endian; the layout of [`riffle::state::KvTable`]'s keys, without a
//! namespace): the key group first, so the job's checkpoints take the rows with the store's
//! other state, incrementally, and a restore copies them back. A view with a key keeps its row
//! there; one without keeps each distinct row under itself, after its count (8 bytes, little
//! endian).

use std::collections::HashMap;
use std::sync::Arc;

use riffle::checkpoint::{decode, encode_into};
use riffle::keys::{KeyGroup, encode_key, key_group_of};
use riffle::state::KvStore;
use riffle::{Error, Result};
use riffle_sql::Row;

/// The task's store a view keeps its rows in, and where in it.
#[derive(Clone)]
pub(crate) struct RowStore {
    store: Arc<dyn KvStore>,
    /// The rows' state id in the store.
    state: u32,
    /// The job's key groups.
    max_parallelism: usize,
}

impl RowStore {
    /// The rows of the view operator `operator_id` in `store`.
    pub(crate) fn new(store: Arc<dyn KvStore>, operator_id: &str, max_parallelism: usize) -> Self {
        RowStore {
            store,
            state: riffle::state::state_id(operator_id, "view-rows"),
            max_parallelism,
        }
    }

    fn key(&self, key: &Row) -> Result<Vec<u8>> {
        let group: KeyGroup = key_group_of(key, self.max_parallelism);
        let mut bytes = Vec::with_capacity(32);
        bytes.extend_from_slice(&group.to_be_bytes());
        bytes.extend_from_slice(&self.state.to_be_bytes());
        bytes.extend_from_slice(&[0, 0]);
        encode_key(key, &mut bytes)
            .map_err(|e| Error::user(format!("a view's key does not encode: {e}")))?;
        Ok(bytes)
    }

    /// Calls `visit` with every stored value of the view's rows.
    fn scan(&self, visit: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        let prefixes: Vec<Vec<u8>> = (0..self.max_parallelism as KeyGroup)
            .map(|group| {
                let mut prefix = group.to_be_bytes().to_vec();
                prefix.extend_from_slice(&self.state.to_be_bytes());
                prefix
            })
            .collect();
        self.store.scan(&prefixes, &mut |_, value| {
            visit(value)?;
            Ok(true)
        })
    }
}

/// A view's rows.
pub(crate) enum Rows {
    /// By key, on the heap.
    Keyed(HashMap<Row, Row>),
    /// Each distinct row with its count, on the heap (a view without a key).
    Counted(HashMap<Row, u64>),
    /// In the task's store.
    Stored {
        store: RowStore,
        /// By key (`false`: counted).
        keyed: bool,
        /// How many rows (equal rows counted).
        len: u64,
    },
}

/// The count of a stored row of a view without a key.
fn count_of(value: &[u8]) -> Result<u64> {
    value
        .get(..8)
        .map(|n| u64::from_le_bytes(n.try_into().expect("8 bytes")))
        .ok_or_else(|| Error::Checkpoint("a view's stored row has no count".into()))
}

impl Rows {
    /// No rows: kept by key or counted, on the heap or in `store`.
    pub(crate) fn empty(keyed: bool, store: Option<RowStore>) -> Rows {
        match (store, keyed) {
            (Some(store), keyed) => Rows::Stored {
                store,
                keyed,
                len: 0,
            },
            (None, true) => Rows::Keyed(HashMap::new()),
            (None, false) => Rows::Counted(HashMap::new()),
        }
    }

    /// The rows a checkpoint holds: `rows` (each with its count) from the checkpoint's own
    /// file, and, in a store, what the store was restored with.
    pub(crate) fn restored(
        keyed: bool,
        store: Option<RowStore>,
        rows: Vec<(Row, u64)>,
        key_of: impl Fn(&Row) -> Row,
    ) -> Result<Rows> {
        let mut restored = match (store, keyed) {
            (Some(store), keyed) => {
                let mut len = 0;
                store.scan(&mut |value| {
                    len += if keyed { 1 } else { count_of(value)? };
                    Ok(())
                })?;
                Rows::Stored { store, keyed, len }
            }
            (None, true) => Rows::Keyed(HashMap::with_capacity(rows.len())),
            (None, false) => Rows::Counted(HashMap::with_capacity(rows.len())),
        };
        // Rows in the checkpoint's file: taken on the heap (a store's rows are in its files).
        for (row, n) in rows {
            let key = key_of(&row);
            match &mut restored {
                Rows::Keyed(rows) => {
                    rows.insert(key, row);
                }
                Rows::Counted(rows) => *rows.entry(key).or_insert(0) += n,
                Rows::Stored { .. } => {
                    for _ in 0..n {
                        restored.add(key.clone(), &row)?;
                    }
                }
            }
        }
        Ok(restored)
    }

    /// Adds `row` under `key` (a view without a key: the row itself).
    pub(crate) fn add(&mut self, key: Row, row: &Row) -> Result<()> {
        match self {
            Rows::Keyed(rows) => {
                rows.insert(key, row.clone());
            }
            Rows::Counted(rows) => *rows.entry(key).or_insert(0) += 1,
            Rows::Stored { store, keyed, len } => {
                let mut existed = false;
                store.store.update(&store.key(&key)?, &mut |old, new| {
                    existed = old.is_some();
                    if *keyed {
                        return encode_into(row, new);
                    }
                    let n = old.map(count_of).transpose()?.unwrap_or(0) + 1;
                    new.extend_from_slice(&n.to_le_bytes());
                    match old {
                        Some(old) => new.extend_from_slice(&old[8..]),
                        None => encode_into(row, new)?,
                    }
                    Ok(())
                })?;
                if !*keyed || !existed {
                    *len += 1;
                }
            }
        }
        Ok(())
    }

    /// Removes the row under `key` (a view without a key: one of the rows equal to `key`).
    pub(crate) fn remove(&mut self, key: Row) -> Result<()> {
        match self {
            Rows::Keyed(rows) => {
                rows.remove(&key);
            }
            Rows::Counted(rows) => {
                if let Some(n) = rows.get_mut(&key) {
                    *n -= 1;
                    if *n == 0 {
                        rows.remove(&key);
                    }
                }
            }
            Rows::Stored { store, keyed, len } => {
                let key = store.key(&key)?;
                let Some(old) = store.store.get(&key)? else {
                    return Ok(());
                };
                let n = if *keyed { 1 } else { count_of(&old)? };
                if n <= 1 {
                    store.store.delete(&key)?;
                } else {
                    let mut new = old;
                    new[..8].copy_from_slice(&(n - 1).to_le_bytes());
                    store.store.put(&key, &new)?;
                }
                *len = len.saturating_sub(1);
            }
        }
        Ok(())
    }

    /// Every row (equal rows of a view without a key as many times as it holds them).
    pub(crate) fn all(&self) -> Result<Vec<Row>> {
        match self {
            Rows::Keyed(rows) => Ok(rows.values().cloned().collect()),
            Rows::Counted(rows) => Ok(rows
                .iter()
                .flat_map(|(row, n)| std::iter::repeat_n(row, *n as usize).cloned())
                .collect()),
            Rows::Stored { store, keyed, len } => {
                let mut all = Vec::with_capacity(*len as usize);
                store.scan(&mut |value| {
                    if *keyed {
                        all.push(decode(value)?);
                    } else {
                        let row: Row = decode(&value[8..])?;
                        all.extend(std::iter::repeat_n(row, count_of(value)? as usize));
                    }
                    Ok(())
                })?;
                Ok(all)
            }
        }
    }

    /// The row under `key` (none or one); `None` for a view without a key.
    pub(crate) fn get(&self, key: &Row) -> Result<Option<Vec<Row>>> {
        match self {
            Rows::Keyed(rows) => Ok(Some(rows.get(key).cloned().into_iter().collect())),
            Rows::Counted(_) | Rows::Stored { keyed: false, .. } => Ok(None),
            Rows::Stored { store, .. } => {
                let found = store.store.get(&store.key(key)?)?;
                Ok(Some(
                    found.map(|v| decode(&v)).transpose()?.into_iter().collect(),
                ))
            }
        }
    }

    /// Whether the rows are in a store.
    pub(crate) fn is_stored(&self) -> bool {
        matches!(self, Rows::Stored { .. })
    }

    /// How many rows (equal rows counted).
    pub(crate) fn len(&self) -> usize {
        match self {
            Rows::Keyed(rows) => rows.len(),
            Rows::Counted(rows) => rows.values().map(|n| *n as usize).sum(),
            Rows::Stored { len, .. } => *len as usize,
        }
    }

    /// The rows a checkpoint's own file holds, each with its count: none for rows in a store
    /// (the checkpoint takes the store's files).
    pub(crate) fn to_checkpoint(&self) -> Vec<(Row, u64)> {
        match self {
            Rows::Keyed(rows) => rows.values().map(|r| (r.clone(), 1)).collect(),
            Rows::Counted(rows) => rows.iter().map(|(r, n)| (r.clone(), *n)).collect(),
            Rows::Stored { .. } => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use riffle::keys::KeyGroupRange;
    use riffle::state::{StateBackend, TaskStore};
    use riffle_rocksdb::RocksDbBackend;
    use riffle_sql::Value;

    fn row(user: i64, n: i64) -> Row {
        Row(vec![Value::Int(user), Value::Int(n)])
    }

    fn user(row: &Row) -> Row {
        Row(vec![row.get(0).clone()])
    }

    /// A RocksDB store of a task owning every key group, in `dir`; with the state cache or
    /// without it (every access reaches RocksDB).
    fn open(dir: &std::path::Path, cache: usize) -> RowStore {
        let store = RocksDbBackend::new()
            .memory(8 << 20)
            .write_buffer(1 << 20)
            .state_cache(cache)
            .open_store(&TaskStore {
                job: "view".into(),
                task: 0,
                run_id: dir.display().to_string(),
                key_groups: KeyGroupRange::for_subtask(0, 1, 128),
                local_dir: dir.to_path_buf(),
            })
            .unwrap()
            .expect("RocksDB has stores");
        RowStore::new(store, "materialize", 128)
    }

    fn sorted(rows: &Rows) -> Vec<Row> {
        let mut all = rows.all().unwrap();
        all.sort();
        all
    }

    /// The same changes to rows on the heap and in a store leave the same rows.
    fn apply(rows: &mut Rows, keyed: bool) {
        let key = |r: &Row| if keyed { user(r) } else { r.clone() };
        for r in [row(1, 1), row(2, 1), row(2, 1), row(3, 7)] {
            rows.add(key(&r), &r).unwrap();
        }
        rows.remove(key(&row(2, 1))).unwrap();
        rows.add(key(&row(1, 2)), &row(1, 2)).unwrap();
        // Removing what is not there changes nothing.
        rows.remove(key(&row(9, 9))).unwrap();
    }

    #[test]
    fn rows_in_rocksdb_are_the_rows_on_the_heap() {
        let tmp = tempfile::tempdir().unwrap();
        for (cache, keyed) in [(64 << 20, true), (0, true), (64 << 20, false), (0, false)] {
            let mut heap = Rows::empty(keyed, None);
            let dir = tmp.path().join(format!("{cache}-{keyed}"));
            let mut stored = Rows::empty(keyed, Some(open(&dir, cache)));
            apply(&mut heap, keyed);
            apply(&mut stored, keyed);
            assert_eq!(
                sorted(&stored),
                sorted(&heap),
                "cache {cache}, keyed {keyed}"
            );
            assert_eq!(stored.len(), heap.len());
            assert!(
                stored.to_checkpoint().is_empty(),
                "the store's files hold them"
            );
            for u in [1, 2, 3, 9] {
                let key = Row(vec![Value::Int(u)]);
                assert_eq!(stored.get(&key).unwrap(), heap.get(&key).unwrap());
            }
        }
        // Keyed: user 2 was deleted, user 1 updated; counted: one (2, 1) left, (1, 1) and (1, 2).
        let mut keyed = Rows::empty(true, None);
        apply(&mut keyed, true);
        assert_eq!(sorted(&keyed), [row(1, 2), row(3, 7)]);
    }

    #[test]
    fn a_checkpoint_of_the_store_restores_the_rows_and_heap_rows_move_in() {
        let tmp = tempfile::tempdir().unwrap();
        for keyed in [true, false] {
            let first = open(&tmp.path().join(format!("first-{keyed}")), 64 << 20);
            let mut rows = Rows::empty(keyed, Some(first.clone()));
            apply(&mut rows, keyed);
            let checkpoint = tmp.path().join(format!("chk-{keyed}"));
            first.store.checkpoint(&checkpoint).unwrap();
            // Changes after the checkpoint are not in it.
            rows.add(row(5, 5), &row(5, 5)).unwrap();

            let second = open(&tmp.path().join(format!("second-{keyed}")), 64 << 20);
            second
                .store
                .restore_from(&checkpoint, KeyGroupRange::for_subtask(0, 1, 128))
                .unwrap();
            let key = |r: &Row| if keyed { user(r) } else { r.clone() };
            let restored = Rows::restored(keyed, Some(second), Vec::new(), key).unwrap();
            let mut expected = Rows::empty(keyed, None);
            apply(&mut expected, keyed);
            assert_eq!(sorted(&restored), sorted(&expected));
            assert_eq!(restored.len(), expected.len());

            // A checkpoint taken on the heap restores into a store.
            let third = open(&tmp.path().join(format!("third-{keyed}")), 0);
            let moved = Rows::restored(keyed, Some(third), expected.to_checkpoint(), key).unwrap();
            assert_eq!(sorted(&moved), sorted(&expected));
            assert_eq!(moved.len(), expected.len());
        }
    }
}

//! State backends: where keyed state lives. The heap backend keeps typed hash tables in memory;
//! an embedded key-value store (RocksDB, in the `riffle-rocksdb` crate) implements [`KvStore`]
//! and keeps state on disk, one store per task, keys prefixed by key group.

use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Result;
use crate::keys::KeyGroupRange;

/// Where the keyed state of a job lives (the seed's ADR-003: heap or RocksDB).
pub trait StateBackend: Send + Sync + Debug {
    /// A short name for logs and metrics (`heap`, `rocksdb`).
    fn name(&self) -> &str;

    /// The store of one task, shared by the task's operators; `None` keeps state in typed heap
    /// tables.
    fn open_store(&self, task: &TaskStore) -> Result<Option<Arc<dyn KvStore>>>;

    /// Whether its stores keep files in [`TaskStore::local_dir`] (default: yes). A backend
    /// without stores answers no, and its jobs create no local directory.
    fn keeps_local_files(&self) -> bool {
        true
    }
}

/// Which task a store is opened for.
#[derive(Clone, Debug)]
pub struct TaskStore {
    /// Name of the job.
    pub job: String,
    /// Index of the task in the job.
    pub task: usize,
    /// Unique per run of the job.
    pub run_id: String,
    /// Key groups the task's keyed operators own.
    pub key_groups: KeyGroupRange,
    /// A directory of the task's own (does not exist yet) for the store's files.
    pub local_dir: PathBuf,
}

/// Keyed state in typed hash tables on the heap: the fastest access (no serialization), bounded
/// by memory. Right for state up to a few GB per process (the seed's ADR-003).
#[derive(Clone, Copy, Debug, Default)]
pub struct HeapBackend;

impl StateBackend for HeapBackend {
    fn name(&self) -> &str {
        "heap"
    }

    fn open_store(&self, _task: &TaskStore) -> Result<Option<Arc<dyn KvStore>>> {
        Ok(None)
    }

    fn keeps_local_files(&self) -> bool {
        false
    }
}

/// Rewrites a value: gets the current one (if any) and writes the new one into the buffer.
pub type ChangeValue<'a> = dyn FnMut(Option<&[u8]>, &mut Vec<u8>) -> Result<()> + 'a;
/// Changes a value where it lies: gets it (empty when there is none) and whether there is one,
/// and changes it in place. When it fails, it must leave the value as it was.
pub type ChangeInPlace<'a> = dyn FnMut(&mut Vec<u8>, bool) -> Result<()> + 'a;
/// Reads a value where it lies (`None`: there is none).
pub type ReadInPlace<'a> = dyn FnMut(Option<&[u8]>) -> Result<()> + 'a;
/// Visits an entry (key, value); returns whether to go on.
pub type VisitWhile<'a> = dyn FnMut(&[u8], &[u8]) -> Result<bool> + 'a;
/// Visits an entry (key, value).
pub type VisitEntry<'a> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'a;

/// An ordered key-value store holding the keyed state of one task.
///
/// Keys start with the key group (2 bytes, big endian), so the state of a key-group range is a
/// contiguous key range that can be copied into another task's store on a rescaling restore.
pub trait KvStore: Send + Sync + Debug {
    /// The value of `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Sets the value of `key`.
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Removes `key`.
    fn delete(&self, key: &[u8]) -> Result<()>;
    /// Reads and rewrites `key` in one step: `change` gets the current value and writes the new
    /// one into the (empty) buffer. The default is a [`get`](KvStore::get) and a
    /// [`put`](KvStore::put); a store with a cache changes the value in place.
    fn update(&self, key: &[u8], change: &mut ChangeValue<'_>) -> Result<()> {
        let old = self.get(key)?;
        let mut new = Vec::new();
        change(old.as_deref(), &mut new)?;
        self.put(key, &new)
    }
    /// Changes `key`'s value in place: an item appended to a long list costs the item, not a
    /// copy of the list. The default is a [`get`](KvStore::get) and a [`put`](KvStore::put); a
    /// store with a cache changes the value it holds.
    fn change_in_place(&self, key: &[u8], change: &mut ChangeInPlace<'_>) -> Result<()> {
        let old = self.get(key)?;
        let present = old.is_some();
        let mut value = old.unwrap_or_default();
        change(&mut value, present)?;
        self.put(key, &value)
    }
    /// Calls `read` with `key`'s value (`None`: absent) where it lies, so that reading the start
    /// of a long list does not copy the list. The default is a [`get`](KvStore::get); a store
    /// with a cache lends the value it holds.
    fn read_in_place(&self, key: &[u8], read: &mut ReadInPlace<'_>) -> Result<()> {
        let value = self.get(key)?;
        read(value.as_deref())
    }
    /// Calls `visit` with every entry whose key starts with one of `prefixes` (prefix after
    /// prefix, in key order within each), until it returns `false`. One call for many prefixes
    /// (a window's namespace in every key group) lets a store with a cache look through it once.
    fn scan(&self, prefixes: &[Vec<u8>], visit: &mut VisitWhile<'_>) -> Result<()>;
    /// Removes every entry whose key starts with one of `prefixes`, calling `visit` with each
    /// (as [`scan`](KvStore::scan) would). The default scans and deletes key by key; a store
    /// may drop whole ranges.
    fn drain(&self, prefixes: &[Vec<u8>], visit: &mut VisitEntry<'_>) -> Result<()> {
        let mut keys = Vec::new();
        self.scan(prefixes, &mut |key, value| {
            visit(key, value)?;
            keys.push(key.to_vec());
            Ok(true)
        })?;
        keys.iter().try_for_each(|key| self.delete(key))
    }
    /// Estimated number of entries and bytes on disk and in memory.
    fn estimate(&self) -> (u64, u64);
    /// Writes a consistent checkpoint of the store into the new directory `dir` (under the
    /// task's `local_dir`); returns its
    /// files. Immutable files (`*.sst`) keep their names from one checkpoint to the next, so
    /// files uploaded before need not be uploaded again.
    fn checkpoint(&self, dir: &Path) -> Result<Vec<PathBuf>>;
    /// Copies the entries of key groups in `range` from a checkpoint of a store (its files in
    /// `dir`) into this store.
    fn restore_from(&self, dir: &Path, range: KeyGroupRange) -> Result<()>;
}

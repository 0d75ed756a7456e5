//! RocksDB state backend for Riffle: keyed state on local disk, bounded memory, incremental
//! checkpoints.
//!
//! Each task that keeps keyed state gets its own RocksDB instance under the job's
//! [`local_state_dir`](riffle::EnvConfig::local_state_dir). Keys start with the key group, so a
//! rescaling restore copies a contiguous key range. Writes skip RocksDB's write-ahead log: the
//! job's checkpoints are what make state durable, and a restart restores from them.
//!
//! A checkpoint flushes the memtables and hard-links the store's files into a directory
//! (RocksDB's own checkpoint); SST files never change once written, so the uploader sends only
//! the ones the previous checkpoint did not have: an incremental checkpoint.
//!
//! Reads and writes go through a [state cache](cache) of each store (`state_cache` bytes, 64 MB
//! by default): the entries a task works on stay decoded-free in a hash table and only their
//! last values reach RocksDB, in sorted batches, when the cache fills, before a scan and at a
//! checkpoint.
//!
//! Memory: all stores of a backend share one block cache of `memory` bytes; each store has at
//! most two memtables of `write_buffer` bytes and a state cache. The backend holds at most
//! `memory + (2 × write_buffer + state_cache) × stores`.
//!
//! ```no_run
//! use std::sync::Arc;
//! use riffle::{EnvConfig, StreamEnv};
//! use riffle_rocksdb::RocksDbBackend;
//!
//! let config = EnvConfig::default().with_state_backend(Arc::new(RocksDbBackend::new().memory(256 << 20)));
//! let env = StreamEnv::with_config(config);
//! ```

mod cache;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use cache::{Cached, StateCache};

use riffle::keys::KeyGroupRange;
use riffle::state::{KvStore, StateBackend, TaskStore};
use riffle::{Error, Result};
use rocksdb::{
    BlockBasedIndexType, BlockBasedOptions, Cache, DB, DBCompressionType, Direction,
    IngestExternalFileOptions, IteratorMode, Options, ReadOptions, SstFileWriter, WriteBatch,
    WriteOptions,
};

/// Default memory of a backend: the block cache all its stores share.
pub const DEFAULT_MEMORY: usize = 128 << 20;

/// Cache flushes of at least this many changes go to RocksDB as an ingested SST file.
const INGEST_FROM: usize = 50_000;

/// Default size of each store's state cache.
pub const DEFAULT_STATE_CACHE: usize = 64 << 20;

/// Keyed state in RocksDB (the seed's ADR-003: state larger than memory, incremental
/// checkpoints). See the [crate documentation](crate).
#[derive(Clone)]
pub struct RocksDbBackend {
    memory: usize,
    write_buffer: usize,
    state_cache: usize,
    cache: Arc<std::sync::OnceLock<Cache>>,
}

impl std::fmt::Debug for RocksDbBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksDbBackend")
            .field("memory", &self.memory)
            .field("write_buffer", &self.write_buffer)
            .field("state_cache", &self.state_cache)
            .finish()
    }
}

impl Default for RocksDbBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl RocksDbBackend {
    /// A backend with [`DEFAULT_MEMORY`], 16 MB memtables and a [`DEFAULT_STATE_CACHE`].
    pub fn new() -> Self {
        RocksDbBackend {
            memory: DEFAULT_MEMORY,
            write_buffer: 16 << 20,
            state_cache: DEFAULT_STATE_CACHE,
            cache: Arc::default(),
        }
    }

    /// Size of the block cache all stores share (at least 8 MB).
    pub fn memory(mut self, bytes: usize) -> Self {
        self.memory = bytes;
        self
    }

    /// Size of one memtable of one store (default 16 MB): larger buffers mean fewer, larger
    /// SST files.
    pub fn write_buffer(mut self, bytes: usize) -> Self {
        self.write_buffer = bytes;
        self
    }

    /// Size of each store's [state cache](cache) (default 64 MB; 0 turns it off). Entries cost
    /// their key and value plus about 64 bytes: a cache that holds the keys a task updates
    /// between checkpoints writes each of them once.
    pub fn state_cache(mut self, bytes: usize) -> Self {
        self.state_cache = bytes;
        self
    }

    fn check(&self) -> Result<()> {
        if self.memory < 8 << 20 {
            return Err(Error::config(
                "rocksdb memory",
                format!("is {} bytes; give it at least 8 MB", self.memory),
            ));
        }
        if self.write_buffer < 1 << 20 || self.write_buffer > self.memory / 2 {
            return Err(Error::config(
                "rocksdb write_buffer",
                format!(
                    "is {} bytes; it must be at least 1 MB and at most half the memory ({})",
                    self.write_buffer, self.memory
                ),
            ));
        }
        Ok(())
    }

    /// The block cache all stores of this backend share.
    fn cache(&self) -> Result<&Cache> {
        if let Some(cache) = self.cache.get() {
            return Ok(cache);
        }
        let cache = Cache::new_lru_cache(self.memory).map_err(|e| failed("block cache", e))?;
        Ok(self.cache.get_or_init(|| cache))
    }

    fn options(&self) -> Result<Options> {
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(self.cache()?);
        table.set_bloom_filter(10.0, false);
        table.set_cache_index_and_filter_blocks(true);
        // Filters and indexes in partitions of a few KB, their top levels pinned: a whole
        // file's filter (megabytes for a file of millions of small entries, a map state's) is
        // larger than a shard of the block cache, is never kept in it, and was read from the
        // file again by every lookup of a key the file does not hold.
        table.set_index_type(BlockBasedIndexType::TwoLevelIndexSearch);
        table.set_partition_filters(true);
        table.set_metadata_block_size(4 << 10);
        table.set_pin_top_level_index_and_filter(true);
        table.set_pin_l0_filter_and_index_blocks_in_cache(true);
        table.set_block_size(16 << 10);
        let mut options = Options::default();
        options.create_if_missing(true);
        options.set_block_based_table_factory(&table);
        options.set_write_buffer_size(self.write_buffer);
        options.set_max_write_buffer_number(2);
        options.set_compression_type(DBCompressionType::Lz4);
        options.set_max_background_jobs(2);
        options.set_max_open_files(256);
        Ok(options)
    }
}

impl StateBackend for RocksDbBackend {
    fn name(&self) -> &str {
        "rocksdb"
    }

    fn open_store(&self, task: &TaskStore) -> Result<Option<Arc<dyn KvStore>>> {
        self.check()?;
        let store = RocksDbStore::open(&task.local_dir, &self.options()?, self.state_cache)?;
        tracing::debug!(task = task.task, dir = %task.local_dir.display(), "opened a RocksDB store");
        Ok(Some(Arc::new(store)))
    }
}

/// Removes a store's database when the store closes, and its directory once no checkpoint
/// waiting for upload is left in it (the uploader removes those).
struct LocalDir(PathBuf);

impl Drop for LocalDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0.join("db"));
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// The RocksDB instance of one task.
pub struct RocksDbStore {
    db: DB,
    write: WriteOptions,
    /// The database's options (SST files for ingestion are written with them).
    options: Options,
    cache: Mutex<StateCache>,
    // Dropped after `db`: the directory goes once the database is closed.
    _dir: LocalDir,
}

impl std::fmt::Debug for RocksDbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksDbStore")
            .field("dir", &self._dir.0)
            .finish()
    }
}

fn failed(what: &str, error: rocksdb::Error) -> Error {
    Error::State(format!("RocksDB {what}: {error}"))
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::io(context, e)
}

/// Visits the cached entries under `prefix` that sort before `before` (all with `None`),
/// skipping removals; returns whether to go on.
fn visit_cached(
    cached: &mut std::iter::Peekable<std::vec::IntoIter<cache::Write>>,
    prefix: &[u8],
    before: Option<&[u8]>,
    visit: &mut riffle::state::VisitWhile<'_>,
) -> Result<bool> {
    while let Some((key, _)) = cached.peek() {
        if !key.starts_with(prefix) || before.is_some_and(|b| key.as_ref() >= b) {
            break;
        }
        let (key, value) = cached.next().expect("peeked");
        if let Some(value) = value
            && !visit(&key, &value)?
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The smallest key after every key starting with `prefix` (`None`: no bound).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

impl RocksDbStore {
    /// Opens a new, empty store in `dir` (removed when the store is dropped).
    fn open(dir: &Path, options: &Options, cache: usize) -> Result<Self> {
        // A directory left by a crashed run of the same task id holds nothing we need.
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(io(format!(
            "cannot create the state directory `{}`",
            dir.display()
        )))?;
        let guard = LocalDir(dir.to_path_buf());
        let db = DB::open(options, dir.join("db")).map_err(|e| failed("open", e))?;
        let mut write = WriteOptions::default();
        write.disable_wal(true);
        Ok(RocksDbStore {
            db,
            write,
            options: options.clone(),
            cache: Mutex::new(StateCache::new(cache)),
            _dir: guard,
        })
    }

    fn cache(&self) -> MutexGuard<'_, StateCache> {
        // A panic while the lock was held left the cache as it was: still usable.
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the cache's changes to RocksDB; keeps its entries (clean) or empties it.
    fn flush(&self, cache: &mut StateCache, keep: bool) -> Result<()> {
        let writes = cache.take_writes(keep);
        if writes.is_empty() {
            return Ok(());
        }
        if writes.len() >= INGEST_FROM {
            return self.ingest(writes);
        }
        let mut batch = WriteBatch::default();
        for (key, value) in writes {
            match value {
                Some(value) => batch.put(key, value),
                None => batch.delete(key),
            }
        }
        self.db
            .write_opt(batch, &self.write)
            .map_err(|e| failed("write", e))
    }

    /// Writes many sorted changes as one SST file that RocksDB takes in whole, instead of
    /// through the memtables (which would fill, flush and stall the task at a checkpoint).
    fn ingest(&self, writes: Vec<cache::Write>) -> Result<()> {
        static FILES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = FILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = self._dir.0.join(format!("ingest-{n}.sst"));
        let mut writer = SstFileWriter::create(&self.options);
        writer.open(&path).map_err(|e| failed("ingest", e))?;
        for (key, value) in &writes {
            match value {
                Some(value) => writer.put(key, value),
                None => writer.delete(key),
            }
            .map_err(|e| failed("ingest", e))?;
        }
        writer.finish().map_err(|e| failed("ingest", e))?;
        let mut options = IngestExternalFileOptions::default();
        options.set_move_files(true);
        let result = self
            .db
            .ingest_external_file_opts(&options, vec![&path])
            .map_err(|e| failed("ingest", e));
        let _ = std::fs::remove_file(&path);
        result
    }

    /// Visits, prefix after prefix in key order, RocksDB's entries under `prefixes` merged with
    /// `cached` (sorted; its values stand for RocksDB's, its removals hide them) until `visit`
    /// returns `false`. Returns the prefixes under which RocksDB holds entries.
    fn merged<'p>(
        &self,
        cached: Vec<cache::Write>,
        prefixes: &'p [Vec<u8>],
        visit: &mut riffle::state::VisitWhile<'_>,
    ) -> Result<Vec<&'p Vec<u8>>> {
        let mut cached = cached.into_iter().peekable();
        let mut prefixes: Vec<&Vec<u8>> = prefixes.iter().collect();
        prefixes.sort();
        prefixes.dedup();
        let mut stored = Vec::new();
        for prefix in prefixes {
            let (mut go_on, mut any) = (true, false);
            Self::range(&self.db, prefix, prefix_end(prefix), &mut |key, value| {
                any = true;
                go_on = visit_cached(&mut cached, prefix, Some(key), visit)?;
                if go_on {
                    if cached.peek().is_some_and(|(k, _)| k.as_ref() == key) {
                        let (k, v) = cached.next().expect("peeked");
                        go_on = match v {
                            Some(v) => visit(&k, &v)?,
                            None => true,
                        };
                    } else {
                        go_on = visit(key, value)?;
                    }
                }
                Ok(go_on)
            })?;
            if any {
                stored.push(prefix);
            }
            if !go_on || !visit_cached(&mut cached, prefix, None, visit)? {
                break;
            }
        }
        Ok(stored)
    }

    /// Changes `key` in the cache with `change` (which answers `None` when the cache does not
    /// know the key: it is loaded from RocksDB and `change` runs again), then flushes the cache
    /// if it is over its capacity.
    fn change_cached(
        &self,
        cache: &mut StateCache,
        key: &[u8],
        mut change: impl FnMut(&mut StateCache) -> Result<Option<bool>>,
    ) -> Result<()> {
        let full = match change(cache)? {
            Some(full) => full,
            None => {
                let old = self.db.get_pinned(key).map_err(|e| failed("get", e))?;
                cache.loaded(key, old.as_deref());
                change(cache)?.expect("just loaded")
            }
        };
        if full {
            self.flush(cache, false)?;
        }
        Ok(())
    }

    /// Sets or removes (`None`) `key`, through the cache when there is one.
    fn write(&self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        let mut cache = self.cache();
        if cache.disabled() {
            return match value {
                Some(value) => self.db.put_opt(key, value, &self.write),
                None => self.db.delete_opt(key, &self.write),
            }
            .map_err(|e| failed("write", e));
        }
        if cache.write(key, value) {
            self.flush(&mut cache, false)?;
        }
        Ok(())
    }

    /// Calls `visit` for every entry with `start <= key < end` (no end: to the last key).
    fn range(
        db: &DB,
        start: &[u8],
        end: Option<Vec<u8>>,
        visit: &mut riffle::state::VisitWhile<'_>,
    ) -> Result<()> {
        let mut read = ReadOptions::default();
        if let Some(end) = end {
            read.set_iterate_upper_bound(end);
        }
        read.fill_cache(false);
        for entry in db.iterator_opt(IteratorMode::From(start, Direction::Forward), read) {
            let (key, value) = entry.map_err(|e| failed("scan", e))?;
            if !visit(&key, &value)? {
                break;
            }
        }
        Ok(())
    }
}

impl KvStore for RocksDbStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut value = None;
        self.read_in_place(key, &mut |lent| {
            value = lent.map(<[u8]>::to_vec);
            Ok(())
        })?;
        Ok(value)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.write(key, Some(value))
    }

    fn read_in_place(&self, key: &[u8], read: &mut riffle::state::ReadInPlace<'_>) -> Result<()> {
        let mut cache = self.cache();
        if let Cached::Known(value) = cache.get(key) {
            return read(value);
        }
        let value = self.db.get_pinned(key).map_err(|e| failed("get", e))?;
        read(value.as_deref())?;
        if !cache.disabled() && cache.loaded(key, value.as_deref()) {
            self.flush(&mut cache, false)?;
        }
        Ok(())
    }

    fn update(&self, key: &[u8], change: &mut riffle::state::ChangeValue<'_>) -> Result<()> {
        let mut cache = self.cache();
        if cache.disabled() {
            let old = self.db.get_pinned(key).map_err(|e| failed("get", e))?;
            let mut new = Vec::new();
            change(old.as_deref(), &mut new)?;
            return self
                .db
                .put_opt(key, &new, &self.write)
                .map_err(|e| failed("put", e));
        }
        self.change_cached(&mut cache, key, |cache| cache.update(key, change))
    }

    fn change_in_place(
        &self,
        key: &[u8],
        change: &mut riffle::state::ChangeInPlace<'_>,
    ) -> Result<()> {
        let mut cache = self.cache();
        if cache.disabled() {
            let old = self.db.get(key).map_err(|e| failed("get", e))?;
            let present = old.is_some();
            let mut value = old.unwrap_or_default();
            change(&mut value, present)?;
            return self
                .db
                .put_opt(key, &value, &self.write)
                .map_err(|e| failed("put", e));
        }
        self.change_cached(&mut cache, key, |cache| cache.change_in_place(key, change))
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.write(key, None)
    }

    fn scan(&self, prefixes: &[Vec<u8>], visit: &mut riffle::state::VisitWhile<'_>) -> Result<()> {
        // The cached entries are copied first, so `visit` may write.
        let cached = self.cache().matching(prefixes);
        self.merged(cached, prefixes, visit).map(drop)
    }

    fn drain(&self, prefixes: &[Vec<u8>], visit: &mut riffle::state::VisitEntry<'_>) -> Result<()> {
        let cached = self.cache().extract(prefixes);
        let stored = self.merged(cached, prefixes, &mut |key, value| {
            visit(key, value)?;
            Ok(true)
        })?;
        // What RocksDB holds goes as one range deletion per prefix.
        let mut batch = WriteBatch::default();
        for prefix in stored {
            match prefix_end(prefix) {
                Some(end) => batch.delete_range(prefix.as_slice(), end.as_slice()),
                None => Self::range(&self.db, prefix, None, &mut |key, _| {
                    batch.delete(key);
                    Ok(true)
                })?,
            }
        }
        self.db
            .write_opt(batch, &self.write)
            .map_err(|e| failed("drain", e))
    }

    fn estimate(&self) -> (u64, u64) {
        let property = |name: &str| self.db.property_int_value(name).ok().flatten().unwrap_or(0);
        let cache = self.cache();
        // The cached keys are partly in RocksDB too: the larger count is the better guess
        // (counting the cache's new keys exactly would walk it, and this runs every second).
        let entries = property("rocksdb.estimate-num-keys").max(cache.len() as u64);
        let bytes = property("rocksdb.total-sst-files-size")
            + property("rocksdb.cur-size-all-mem-tables")
            + cache.bytes() as u64;
        (entries, bytes)
    }

    fn checkpoint(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent)
                .map_err(io(format!("cannot create `{}`", parent.display())))?;
        }
        // Writes the cached changes, flushes the memtables (the write-ahead log is off) and
        // hard-links the files.
        self.flush(&mut self.cache(), true)?;
        rocksdb::checkpoint::Checkpoint::new(&self.db)
            .and_then(|c| c.create_checkpoint(dir))
            .map_err(|e| failed("checkpoint", e))?;
        let mut files = Vec::new();
        for entry in
            std::fs::read_dir(dir).map_err(io(format!("cannot list `{}`", dir.display())))?
        {
            let entry = entry.map_err(io(format!("cannot list `{}`", dir.display())))?;
            if entry.file_type().map(|t| t.is_file()).unwrap_or(false) {
                files.push(entry.path());
            }
        }
        files.sort();
        Ok(files)
    }

    fn restore_from(&self, dir: &Path, range: KeyGroupRange) -> Result<()> {
        // Restored entries go straight to RocksDB: nothing cached may shadow them.
        self.flush(&mut self.cache(), false)?;
        let old = DB::open_for_read_only(&Options::default(), dir, false)
            .map_err(|e| failed("open a checkpoint", e))?;
        let start = range.start.to_be_bytes();
        let end = (range.end < u16::MAX).then(|| (range.end + 1).to_be_bytes().to_vec());
        let mut batch = WriteBatch::default();
        Self::range(&old, &start, end, &mut |key, value| {
            batch.put(key, value);
            if batch.size_in_bytes() >= 4 << 20 {
                self.db
                    .write_opt(std::mem::take(&mut batch), &self.write)
                    .map_err(|e| failed("restore", e))?;
            }
            Ok(true)
        })?;
        self.db
            .write_opt(batch, &self.write)
            .map_err(|e| failed("restore", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(dir: &Path) -> Arc<dyn KvStore> {
        store_with(dir, RocksDbBackend::new())
    }

    fn store_with(dir: &Path, backend: RocksDbBackend) -> Arc<dyn KvStore> {
        let task = TaskStore {
            job: "test".into(),
            task: 0,
            run_id: "r".into(),
            key_groups: KeyGroupRange { start: 0, end: 127 },
            local_dir: dir.to_path_buf(),
        };
        backend
            .memory(16 << 20)
            .write_buffer(1 << 20)
            .open_store(&task)
            .unwrap()
            .unwrap()
    }

    #[test]
    fn a_scan_merges_the_cache_over_rocksdb() {
        let tmp = tempfile::tempdir().unwrap();
        let store = store(&tmp.path().join("s"));
        for kg in [1u16, 2, 3] {
            for k in [b"a", b"c", b"e"] {
                store.put(&key(kg, k), b"old").unwrap();
            }
        }
        store.checkpoint(&tmp.path().join("chk-1")).unwrap(); // now in RocksDB
        store.put(&key(1, b"c"), b"new").unwrap();
        store.delete(&key(1, b"e")).unwrap();
        store.put(&key(1, b"b"), b"new").unwrap();
        store.put(&key(3, b"f"), b"new").unwrap();
        store.delete(&key(3, b"a")).unwrap();
        let mut seen = Vec::new();
        store
            .scan(&[key(3, b""), key(1, b"")], &mut |k, v| {
                seen.push(format!(
                    "{}{} {}",
                    k[1],
                    k[2] as char,
                    String::from_utf8_lossy(v)
                ));
                Ok(true)
            })
            .unwrap();
        assert_eq!(
            seen,
            ["1a old", "1b new", "1c new", "3c old", "3e old", "3f new"]
        );
        let mut first = Vec::new();
        store
            .scan(&[key(1, b"")], &mut |k, _| {
                first.push(k[2]);
                Ok(first.len() < 2)
            })
            .unwrap();
        assert_eq!(first, b"ab", "stops when asked");

        let mut drained = Vec::new();
        store
            .drain(&[key(1, b"")], &mut |k, v| {
                drained.push(format!(
                    "{}{} {}",
                    k[1],
                    k[2] as char,
                    String::from_utf8_lossy(v)
                ));
                Ok(())
            })
            .unwrap();
        assert_eq!(drained, ["1a old", "1b new", "1c new"]);
        assert!(
            scan(store.as_ref(), &key(1, b"")).is_empty(),
            "drained from cache and RocksDB"
        );
        assert_eq!(
            scan(store.as_ref(), &key(2, b"")).len(),
            3,
            "other prefixes stay"
        );
        store.checkpoint(&tmp.path().join("chk-2")).unwrap();
        assert!(
            scan(store.as_ref(), &key(1, b"")).is_empty(),
            "and stay drained once written"
        );
    }

    #[test]
    fn large_flushes_are_ingested_as_sst_files_with_their_removals() {
        let tmp = tempfile::tempdir().unwrap();
        let store = store(&tmp.path().join("s"));
        let n = INGEST_FROM as u32 + 10_000;
        for i in 0..n {
            store.put(&key(0, &i.to_be_bytes()), b"first").unwrap();
        }
        store.checkpoint(&tmp.path().join("chk-1")).unwrap();
        for i in 0..n {
            if i % 2 == 0 {
                store.delete(&key(0, &i.to_be_bytes())).unwrap();
            } else {
                store.put(&key(0, &i.to_be_bytes()), b"second").unwrap();
            }
        }
        store.checkpoint(&tmp.path().join("chk-2")).unwrap();
        let restored = store_with(&tmp.path().join("r"), RocksDbBackend::new().state_cache(0));
        restored
            .restore_from(
                &tmp.path().join("chk-2"),
                KeyGroupRange { start: 0, end: 0 },
            )
            .unwrap();
        let entries = scan(restored.as_ref(), &key(0, b""));
        assert_eq!(entries.len(), n as usize / 2);
        assert!(entries.iter().all(|(_, v)| v == b"second"));
        assert_eq!(restored.get(&key(0, &2u32.to_be_bytes())).unwrap(), None);
        let left: Vec<_> = std::fs::read_dir(tmp.path().join("s"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(
            left.iter()
                .all(|f| !f.to_string_lossy().starts_with("ingest-")),
            "{left:?}"
        );
    }

    #[test]
    fn a_small_state_cache_spills_to_rocksdb_and_loses_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        for cache in [0, 4 << 10] {
            let store = store_with(
                &tmp.path().join(format!("s{cache}")),
                RocksDbBackend::new().state_cache(cache),
            );
            for round in 0..3u32 {
                for i in 0..2000u32 {
                    if round == 2 && i % 2 == 0 {
                        store.delete(&key(0, &i.to_be_bytes())).unwrap();
                    } else {
                        store
                            .put(&key(0, &i.to_be_bytes()), &(i + round).to_be_bytes())
                            .unwrap();
                    }
                }
            }
            for i in 0..2000u32 {
                let expected = (i % 2 == 1).then(|| (i + 2).to_be_bytes().to_vec());
                assert_eq!(
                    store.get(&key(0, &i.to_be_bytes())).unwrap(),
                    expected,
                    "cache {cache}, key {i}"
                );
            }
            assert_eq!(
                scan(store.as_ref(), &key(0, b"")).len(),
                1000,
                "cache {cache}"
            );
        }
    }

    #[test]
    fn values_changed_in_place_spill_reload_and_survive_a_failed_change() {
        let tmp = tempfile::tempdir().unwrap();
        for cache in [0, 4 << 10, 64 << 20] {
            let store = store_with(
                &tmp.path().join(format!("p{cache}")),
                RocksDbBackend::new().state_cache(cache),
            );
            // Two growing values (past the cache's capacity) and many small ones between.
            for i in 0..3000u32 {
                let target = match i % 3 {
                    0 => key(0, b"long-a"),
                    1 => key(0, b"long-b"),
                    _ => key(0, &i.to_be_bytes()),
                };
                store
                    .change_in_place(&target, &mut |value, present| {
                        assert_eq!(present, !value.is_empty());
                        value.extend_from_slice(&i.to_be_bytes());
                        Ok(())
                    })
                    .unwrap();
                if i == 1500 {
                    store
                        .checkpoint(&tmp.path().join(format!("c{cache}")))
                        .unwrap();
                }
            }
            // A change that fails leaves the value as it was.
            let failed = store.change_in_place(&key(0, b"long-a"), &mut |_, _| {
                Err(riffle::Error::user("no"))
            });
            assert!(failed.is_err());
            let expected = |rem: u32| -> Vec<u8> {
                (0..3000u32)
                    .filter(|i| i % 3 == rem)
                    .flat_map(|i| i.to_be_bytes())
                    .collect()
            };
            assert_eq!(
                store.get(&key(0, b"long-a")).unwrap(),
                Some(expected(0)),
                "cache {cache}"
            );
            assert_eq!(
                store.get(&key(0, b"long-b")).unwrap(),
                Some(expected(1)),
                "cache {cache}"
            );
            assert_eq!(
                store.get(&key(0, &2u32.to_be_bytes())).unwrap(),
                Some(2u32.to_be_bytes().to_vec())
            );
            assert_eq!(
                scan(store.as_ref(), &key(0, b"")).len(),
                1002,
                "cache {cache}"
            );
            // Read where they lie: what `get` gives, for values cached, spilled or absent.
            for target in [
                key(0, b"long-a"),
                key(0, &2u32.to_be_bytes()),
                key(0, b"none"),
            ] {
                let mut lent = None;
                store
                    .read_in_place(&target, &mut |value| {
                        lent = Some(value.map(<[u8]>::to_vec));
                        Ok(())
                    })
                    .unwrap();
                assert_eq!(lent, Some(store.get(&target).unwrap()), "cache {cache}");
            }
        }
    }

    fn key(kg: u16, rest: &[u8]) -> Vec<u8> {
        let mut key = kg.to_be_bytes().to_vec();
        key.extend_from_slice(rest);
        key
    }

    fn scan(store: &dyn KvStore, prefix: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        store
            .scan(&[prefix.to_vec()], &mut |k, v| {
                out.push((k.to_vec(), v.to_vec()));
                Ok(true)
            })
            .unwrap();
        out
    }

    #[test]
    fn get_put_delete_and_prefix_scan() {
        let tmp = tempfile::tempdir().unwrap();
        let store = store(&tmp.path().join("s"));
        store.put(&key(1, b"a"), b"1").unwrap();
        store.put(&key(1, b"b"), b"2").unwrap();
        store.put(&key(2, b"a"), b"3").unwrap();
        store.put(&[0x01, 0xff, 0xff], b"edge").unwrap();
        assert_eq!(store.get(&key(1, b"a")).unwrap(), Some(b"1".to_vec()));
        store.delete(&key(1, b"a")).unwrap();
        assert_eq!(store.get(&key(1, b"a")).unwrap(), None);
        assert_eq!(
            scan(store.as_ref(), &key(1, b"")),
            vec![(key(1, b"b"), b"2".to_vec())]
        );
        assert_eq!(
            scan(store.as_ref(), &[0x01, 0xff]),
            vec![(vec![0x01, 0xff, 0xff], b"edge".to_vec())]
        );
        assert_eq!(scan(store.as_ref(), &[]).len(), 3);
    }

    #[test]
    fn checkpoints_keep_unflushed_writes_and_restore_a_key_group_range() {
        let tmp = tempfile::tempdir().unwrap();
        let first = store(&tmp.path().join("first"));
        for kg in 0..8u16 {
            for i in 0..100u32 {
                first
                    .put(&key(kg, &i.to_be_bytes()), &[kg as u8; 10])
                    .unwrap();
            }
        }
        // Written without a write-ahead log and never flushed: the checkpoint must flush.
        let files = first.checkpoint(&tmp.path().join("chk-1")).unwrap();
        assert!(
            files
                .iter()
                .any(|f| f.extension().is_some_and(|e| e == "sst")),
            "{files:?}"
        );

        let second = store(&tmp.path().join("second"));
        second
            .restore_from(
                &tmp.path().join("chk-1"),
                KeyGroupRange { start: 2, end: 4 },
            )
            .unwrap();
        assert_eq!(scan(second.as_ref(), &[]).len(), 300);
        assert_eq!(
            second.get(&key(3, &7u32.to_be_bytes())).unwrap(),
            Some(vec![3; 10])
        );
        assert_eq!(second.get(&key(5, &7u32.to_be_bytes())).unwrap(), None);
    }

    #[test]
    fn later_checkpoints_reuse_unchanged_sst_files() {
        let tmp = tempfile::tempdir().unwrap();
        let store = store(&tmp.path().join("s"));
        for i in 0..1000u32 {
            store.put(&key(0, &i.to_be_bytes()), b"v").unwrap();
        }
        let sst = |files: Vec<PathBuf>| -> Vec<String> {
            files
                .iter()
                .filter(|f| f.extension().is_some_and(|e| e == "sst"))
                .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        let first = sst(store.checkpoint(&tmp.path().join("chk-1")).unwrap());
        store.put(&key(0, b"new"), b"v").unwrap();
        let second = sst(store.checkpoint(&tmp.path().join("chk-2")).unwrap());
        assert!(
            first.iter().all(|f| second.contains(f)),
            "{first:?} vs {second:?}"
        );
        assert_eq!(second.len(), first.len() + 1);
    }

    #[test]
    fn the_directory_goes_with_the_store() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("s");
        let store = store(&dir);
        store.put(b"\0\0k", b"v").unwrap();
        assert!(dir.exists());
        drop(store);
        assert!(!dir.exists());
    }

    #[test]
    fn too_little_memory_is_a_configuration_error() {
        let tmp = tempfile::tempdir().unwrap();
        let task = TaskStore {
            job: "test".into(),
            task: 0,
            run_id: "r".into(),
            key_groups: KeyGroupRange { start: 0, end: 127 },
            local_dir: tmp.path().join("s"),
        };
        let error = RocksDbBackend::new()
            .memory(1 << 20)
            .open_store(&task)
            .err()
            .unwrap();
        assert!(error.to_string().contains("rocksdb memory"), "{error}");
    }
}

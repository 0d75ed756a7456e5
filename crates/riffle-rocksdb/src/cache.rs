//! The state cache in front of a task's RocksDB instance.
//!
//! Keyed state is read and written once per record (a window count reads its accumulator and
//! writes it back), and a RocksDB point lookup walks the memtable skip list and the block
//! cache: microseconds where a hash lookup takes tens of nanoseconds. The cache keeps the
//! entries a task touched, with their latest value, and writes the changed ones to RocksDB in
//! one sorted batch when it fills up and before a checkpoint — so a key updated a thousand
//! times between checkpoints is written once (what Kafka Streams' record cache does in front of
//! its RocksDB stores). A scan merges what the cache holds with what RocksDB holds.
//!
//! It also remembers which keys RocksDB does not have: an entry created and removed between two
//! flushes (a window that fired) never reaches RocksDB, not even as a tombstone.

use std::collections::HashMap;

use riffle::Result;

/// What one cached key holds.
struct Slot {
    /// The current value (`None`: absent or removed).
    value: Option<Bytes>,
    /// Changed since it was read from (or last written to) RocksDB.
    dirty: bool,
    /// RocksDB may hold a value for the key (so removing it needs a tombstone).
    in_db: bool,
}

/// Bytes an entry costs beyond its key and value: the table slot and two allocations.
const ENTRY_OVERHEAD: usize = 64;

/// Keys and values: up to 24 bytes (a window count's key and accumulator) inline in the table,
/// saving two pointer chases per lookup; longer ones on the heap.
pub(crate) type Bytes = smallvec::SmallVec<[u8; 24]>;

/// One write that a flush sends to RocksDB: a put, or a delete (`None`).
pub(crate) type Write = (Bytes, Option<Bytes>);

/// A bounded cache of a store's entries; see the [module documentation](self).
pub(crate) struct StateCache {
    slots: HashMap<Bytes, Slot, foldhash::fast::FixedState>,
    bytes: usize,
    capacity: usize,
    /// Slots changed since the last flush.
    dirty: usize,
    /// The new value of an update, before it is copied into its slot.
    scratch: Vec<u8>,
}

/// The answer of [`StateCache::get`].
pub(crate) enum Cached<'a> {
    /// The cache knows the value (`None`: the key has none).
    Known(Option<&'a [u8]>),
    /// Ask RocksDB, then [`StateCache::loaded`].
    Unknown,
}

impl StateCache {
    /// A cache of at most `capacity` bytes (0: every access goes to RocksDB).
    pub(crate) fn new(capacity: usize) -> Self {
        StateCache {
            slots: HashMap::default(),
            bytes: 0,
            capacity,
            dirty: 0,
            scratch: Vec::new(),
        }
    }

    /// Whether the cache is off.
    pub(crate) fn disabled(&self) -> bool {
        self.capacity == 0
    }

    /// Bytes the cache holds (estimated).
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Keys the cache holds (with a value or a removal).
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    fn cost(key: &[u8], value: &Option<Bytes>) -> usize {
        key.len() + value.as_ref().map_or(0, |v| v.len()) + ENTRY_OVERHEAD
    }

    /// The cached value of `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Cached<'_> {
        match self.slots.get(key) {
            Some(slot) => Cached::Known(slot.value.as_deref()),
            None => Cached::Unknown,
        }
    }

    /// Remembers what RocksDB returned for `key` (after [`Cached::Unknown`]). Returns whether
    /// the cache is now over its capacity.
    pub(crate) fn loaded(&mut self, key: &[u8], value: Option<&[u8]>) -> bool {
        let value: Option<Bytes> = value.map(Bytes::from_slice);
        self.bytes += Self::cost(key, &value);
        let in_db = value.is_some();
        self.slots.insert(
            Bytes::from_slice(key),
            Slot {
                value,
                dirty: false,
                in_db,
            },
        );
        self.bytes > self.capacity
    }

    /// Sets `key` to `value` (`None`: removes it). Returns whether the cache is now over its
    /// capacity.
    pub(crate) fn write(&mut self, key: &[u8], value: Option<&[u8]>) -> bool {
        match self.slots.get_mut(key) {
            Some(slot) => {
                self.bytes -= Self::cost(key, &slot.value);
                if value.is_none() && !slot.in_db {
                    // Never written to RocksDB: forget it (a lookup there finds nothing too).
                    if slot.dirty {
                        self.dirty -= 1;
                    }
                    self.slots.remove(key);
                    return false;
                }
                if !slot.dirty {
                    self.dirty += 1;
                }
                match (&mut slot.value, value) {
                    // Same length: reuse the allocation (a counter going up).
                    (Some(old), Some(new)) if old.len() == new.len() => old.copy_from_slice(new),
                    (old, new) => *old = new.map(Bytes::from_slice),
                }
                slot.dirty = true;
                self.bytes += Self::cost(key, &slot.value);
            }
            None => {
                // Unknown to the cache: RocksDB may have it.
                let value: Option<Bytes> = value.map(Bytes::from_slice);
                self.bytes += Self::cost(key, &value);
                self.dirty += 1;
                self.slots.insert(
                    Bytes::from_slice(key),
                    Slot {
                        value,
                        dirty: true,
                        in_db: true,
                    },
                );
            }
        }
        self.bytes > self.capacity
    }

    /// Rewrites the cached `key` with `change` (see `KvStore::update`), in place. Returns
    /// `None` when the cache does not know the key (load it first), else whether the cache is
    /// now over its capacity.
    pub(crate) fn update(
        &mut self,
        key: &[u8],
        change: &mut riffle::state::ChangeValue<'_>,
    ) -> Result<Option<bool>> {
        let Some(slot) = self.slots.get_mut(key) else {
            return Ok(None);
        };
        let mut new = std::mem::take(&mut self.scratch);
        new.clear();
        let result = change(slot.value.as_deref(), &mut new);
        if result.is_ok() {
            self.bytes -= Self::cost(key, &slot.value);
            match &mut slot.value {
                Some(old) if old.len() == new.len() => old.copy_from_slice(&new),
                old => *old = Some(Bytes::from_slice(&new)),
            }
            self.bytes += Self::cost(key, &slot.value);
            if !slot.dirty {
                slot.dirty = true;
                self.dirty += 1;
            }
        }
        self.scratch = new;
        result.map(|()| Some(self.bytes > self.capacity))
    }

    /// Changes the cached value of `key` where it lies (an append to a list costs the item);
    /// `None` if the cache does not know the key (load it first). Returns whether the cache is
    /// now over its capacity.
    pub(crate) fn change_in_place(
        &mut self,
        key: &[u8],
        change: &mut riffle::state::ChangeInPlace<'_>,
    ) -> Result<Option<bool>> {
        let Some(slot) = self.slots.get_mut(key) else {
            return Ok(None);
        };
        let present = slot.value.is_some();
        self.bytes -= Self::cost(key, &slot.value);
        // A value on the heap moves into the vector and back without a copy.
        let mut value = slot.value.take().map(Bytes::into_vec).unwrap_or_default();
        let result = change(&mut value, present);
        // A failed change left the value as it was.
        if result.is_ok() || present {
            slot.value = Some(Bytes::from_vec(value));
        }
        self.bytes += Self::cost(key, &slot.value);
        if result.is_ok() && !slot.dirty {
            slot.dirty = true;
            self.dirty += 1;
        }
        result.map(|()| Some(self.bytes > self.capacity))
    }

    /// The changes RocksDB does not have yet, sorted by key; the cache keeps what it holds,
    /// now clean (`keep`), or is emptied.
    pub(crate) fn take_writes(&mut self, keep: bool) -> Vec<Write> {
        let mut writes = Vec::new();
        if self.dirty == 0 && keep {
            return writes;
        }
        self.dirty = 0;
        if keep {
            let mut gone = Vec::new();
            for (key, slot) in self.slots.iter_mut().filter(|(_, s)| s.dirty) {
                writes.push((key.clone(), slot.value.clone()));
                slot.dirty = false;
                slot.in_db = slot.value.is_some();
                if slot.value.is_none() {
                    gone.push(key.clone());
                }
            }
            for key in gone {
                let slot = self.slots.remove(&key).expect("listed above");
                self.bytes -= Self::cost(&key, &slot.value);
            }
        } else {
            writes.extend(
                self.slots
                    .drain()
                    .filter(|(_, s)| s.dirty)
                    .map(|(key, slot)| (key, slot.value)),
            );
            self.bytes = 0;
        }
        writes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        writes
    }
}

/// Whether a key starts with one of a set of prefixes: one hash lookup per prefix length.
struct PrefixSet<'a> {
    lengths: Vec<usize>,
    prefixes: std::collections::HashSet<&'a [u8], foldhash::fast::FixedState>,
}

impl<'a> PrefixSet<'a> {
    fn new(prefixes: &'a [Vec<u8>]) -> Self {
        let mut lengths: Vec<usize> = prefixes.iter().map(Vec::len).collect();
        lengths.sort_unstable();
        lengths.dedup();
        PrefixSet {
            lengths,
            prefixes: prefixes.iter().map(Vec::as_slice).collect(),
        }
    }

    fn contains(&self, key: &[u8]) -> bool {
        self.lengths
            .iter()
            .any(|&n| key.len() >= n && self.prefixes.contains(&key[..n]))
    }
}

impl StateCache {
    /// The cached entries (values or removals) whose key starts with one of `prefixes`, sorted.
    pub(crate) fn matching(&self, prefixes: &[Vec<u8>]) -> Vec<Write> {
        if self.slots.is_empty() || prefixes.is_empty() {
            return Vec::new();
        }
        let set = PrefixSet::new(prefixes);
        let mut found: Vec<Write> = self
            .slots
            .iter()
            .filter(|(key, _)| set.contains(key))
            .map(|(key, slot)| (key.clone(), slot.value.clone()))
            .collect();
        found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        found
    }

    /// Takes the cached entries whose key starts with one of `prefixes` out of the cache,
    /// sorted (what RocksDB has of them is the caller's to remove).
    pub(crate) fn extract(&mut self, prefixes: &[Vec<u8>]) -> Vec<Write> {
        if self.slots.is_empty() || prefixes.is_empty() {
            return Vec::new();
        }
        let set = PrefixSet::new(prefixes);
        let (mut bytes, mut dirty) = (0, 0);
        let mut found: Vec<Write> = self
            .slots
            .extract_if(|key, _| set.contains(key))
            .map(|(key, slot)| {
                bytes += Self::cost(&key, &slot.value);
                dirty += usize::from(slot.dirty);
                (key, slot.value)
            })
            .collect();
        self.bytes -= bytes;
        self.dirty -= dirty;
        found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(cache: &StateCache, key: &[u8]) -> Option<Option<Vec<u8>>> {
        match cache.get(key) {
            Cached::Known(v) => Some(v.map(<[u8]>::to_vec)),
            Cached::Unknown => None,
        }
    }

    #[test]
    fn writes_are_coalesced_and_sorted() {
        let mut cache = StateCache::new(1 << 20);
        for i in 0..100u8 {
            cache.write(b"b", Some(&[i]));
        }
        cache.write(b"a", Some(b"x"));
        assert_eq!(value(&cache, b"b"), Some(Some(vec![99])));
        let writes = cache.take_writes(true);
        assert_eq!(
            writes,
            vec![
                (Bytes::from_slice(b"a"), Some(Bytes::from_slice(b"x"))),
                (Bytes::from_slice(b"b"), Some(Bytes::from_slice(&[99u8])))
            ]
        );
        assert!(cache.take_writes(true).is_empty(), "clean after a flush");
        assert_eq!(
            value(&cache, b"a"),
            Some(Some(b"x".to_vec())),
            "kept, clean"
        );
    }

    #[test]
    fn an_entry_rocksdb_never_had_leaves_no_tombstone() {
        let mut cache = StateCache::new(1 << 20);
        assert!(value(&cache, b"k").is_none());
        cache.loaded(b"k", None);
        assert_eq!(value(&cache, b"k"), Some(None));
        cache.write(b"k", Some(b"1"));
        cache.write(b"k", None);
        assert!(cache.take_writes(false).is_empty());
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn removing_what_rocksdb_may_have_writes_a_tombstone() {
        let mut cache = StateCache::new(1 << 20);
        cache.loaded(b"k", Some(b"1"));
        cache.write(b"k", None);
        cache.write(b"j", None); // never read: RocksDB may have it
        let writes = cache.take_writes(true);
        assert_eq!(
            writes,
            vec![
                (Bytes::from_slice(b"j"), None),
                (Bytes::from_slice(b"k"), None)
            ]
        );
        assert!(
            value(&cache, b"k").is_none(),
            "removed entries leave the cache"
        );
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn finds_the_entries_under_prefixes_in_key_order() {
        let mut cache = StateCache::new(1 << 20);
        for key in [&b"b2"[..], b"a1", b"c1", b"a2", b"abc"] {
            cache.write(key, Some(b"v"));
        }
        cache.write(b"b1", None);
        let keys: Vec<Vec<u8>> = cache
            .matching(&[b"b".to_vec(), b"a".to_vec(), b"ab".to_vec()])
            .into_iter()
            .map(|(k, _)| k.to_vec())
            .collect();
        assert_eq!(
            keys,
            vec![
                b"a1".to_vec(),
                b"a2".to_vec(),
                b"abc".to_vec(),
                b"b1".to_vec(),
                b"b2".to_vec()
            ]
        );
    }

    #[test]
    fn updates_in_place_what_it_knows() {
        let mut cache = StateCache::new(1 << 20);
        let mut add_one = |old: Option<&[u8]>, new: &mut Vec<u8>| {
            new.push(old.map_or(0, |v| v[0]) + 1);
            Ok(())
        };
        assert_eq!(
            cache.update(b"k", &mut add_one).unwrap(),
            None,
            "unknown: load it first"
        );
        cache.loaded(b"k", Some(&[41]));
        assert_eq!(cache.update(b"k", &mut add_one).unwrap(), Some(false));
        assert_eq!(value(&cache, b"k"), Some(Some(vec![42])));
        assert_eq!(
            cache.take_writes(true),
            vec![(Bytes::from_slice(b"k"), Some(Bytes::from_slice(&[42u8])))]
        );
    }

    #[test]
    fn extracts_the_entries_under_prefixes() {
        let mut cache = StateCache::new(1 << 20);
        cache.write(b"a1", Some(b"v"));
        cache.write(b"b1", Some(b"v"));
        cache.loaded(b"a2", Some(b"v"));
        let keys: Vec<Vec<u8>> = cache
            .extract(&[b"a".to_vec()])
            .into_iter()
            .map(|(k, _)| k.to_vec())
            .collect();
        assert_eq!(keys, vec![b"a1".to_vec(), b"a2".to_vec()]);
        assert!(value(&cache, b"a1").is_none());
        assert_eq!(cache.take_writes(false).len(), 1, "b1 is left");
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn reports_when_full() {
        let mut cache = StateCache::new(200);
        assert!(!cache.write(b"a", Some(&[0; 10])));
        assert!(!cache.write(b"b", Some(&[0; 10])));
        assert!(cache.write(b"c", Some(&[0; 10])));
        assert_eq!(cache.take_writes(false).len(), 3);
        assert_eq!(cache.bytes(), 0);
        assert!(value(&cache, b"a").is_none());
    }
}

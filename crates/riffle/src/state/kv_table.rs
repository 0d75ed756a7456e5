//! [`StateTable`]: one declared state of an operator, in the job's backend: a typed heap
//! [`Table`], or a [`KvTable`] encoding keys and values into the task's [`KvStore`].
//!
//! A key in the store is `[key group: 2][state id: 4][namespace length: 2][namespace][key]`
//! (big endian), values and namespaces and keys encoded with the state codec. The key group
//! first makes a key-group range a contiguous key range; the namespace next makes "every key of
//! a window" a prefix scan.

use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::codec::{decode, encode, encode_into};
use crate::error::Result;
use crate::keys::{KeyGroup, KeyGroupRange, stable_hash};
use crate::state::backend::KvStore;
use crate::state::table::Table;

/// The id of a state of an operator in the task's store.
pub fn state_id(operator_id: &str, state: &str) -> u32 {
    stable_hash(&(operator_id, state)) as u32
}

/// A state's entries in a key-value store.
pub struct KvTable<K, N, V> {
    store: Arc<dyn KvStore>,
    state: u32,
    range: KeyGroupRange,
    key: Vec<u8>,
    value: Vec<u8>,
    /// The store's last size estimate and when it was taken: operators report their size after
    /// every batch, and asking the store (RocksDB properties) each time would cost on that path.
    estimate: std::cell::Cell<Option<(std::time::Instant, (usize, usize))>>,
    _types: PhantomData<fn(K, N) -> V>,
}

impl<K, N, V> KvTable<K, N, V>
where
    K: Serialize + DeserializeOwned,
    N: Serialize + DeserializeOwned,
    V: Serialize + DeserializeOwned,
{
    /// The state `state` (see [`state_id`]) in `store`, for the key groups of `range`.
    pub fn new(store: Arc<dyn KvStore>, state: u32, range: KeyGroupRange) -> Self {
        KvTable {
            store,
            state,
            range,
            key: Vec::with_capacity(64),
            value: Vec::with_capacity(64),
            estimate: Default::default(),
            _types: PhantomData,
        }
    }

    fn namespace_prefix(&self, key_group: KeyGroup, namespace: &N) -> Result<Vec<u8>> {
        let ns = encode(namespace)?;
        let mut prefix = Vec::with_capacity(8 + ns.len());
        prefix.extend_from_slice(&key_group.to_be_bytes());
        prefix.extend_from_slice(&self.state.to_be_bytes());
        prefix.extend_from_slice(&(ns.len() as u16).to_be_bytes());
        prefix.extend_from_slice(&ns);
        Ok(prefix)
    }

    /// Encodes `key` in `namespace` into `self.key`.
    fn encode_key(&mut self, key_group: KeyGroup, key: &K, namespace: &N) -> Result<()> {
        self.key.clear();
        self.key.extend_from_slice(&key_group.to_be_bytes());
        self.key.extend_from_slice(&self.state.to_be_bytes());
        self.key.extend_from_slice(&[0, 0]);
        encode_into(namespace, &mut self.key)?;
        let ns = (self.key.len() - 8) as u16;
        self.key[6..8].copy_from_slice(&ns.to_be_bytes());
        encode_into(key, &mut self.key)
    }

    /// The store's key of `key` in `namespace`, in a buffer a caller may append to (a map
    /// state's entries follow their key's own key: `[..][key][user key]`).
    pub(crate) fn key_of(
        &mut self,
        key_group: KeyGroup,
        key: &K,
        namespace: &N,
    ) -> Result<&mut Vec<u8>> {
        self.encode_key(key_group, key, namespace)?;
        Ok(&mut self.key)
    }

    /// The task's store.
    pub(crate) fn store(&self) -> &Arc<dyn KvStore> {
        &self.store
    }

    /// The prefix of this state in each key group of `groups` that the table holds.
    pub(crate) fn state_prefixes(&self, groups: KeyGroupRange) -> Vec<Vec<u8>> {
        (groups.start.max(self.range.start)..=groups.end.min(self.range.end))
            .map(|kg| self.state_prefix(kg).to_vec())
            .collect()
    }

    /// The key groups the table holds.
    pub(crate) fn range(&self) -> KeyGroupRange {
        self.range
    }

    fn state_prefix(&self, key_group: KeyGroup) -> [u8; 6] {
        let mut prefix = [0u8; 6];
        prefix[..2].copy_from_slice(&key_group.to_be_bytes());
        prefix[2..].copy_from_slice(&self.state.to_be_bytes());
        prefix
    }

    /// Splits a stored key into (namespace, key).
    fn decode_key(stored: &[u8]) -> Result<(N, K)> {
        let len = u16::from_be_bytes([stored[6], stored[7]]) as usize;
        Ok((decode(&stored[8..8 + len])?, decode(&stored[8 + len..])?))
    }

    fn get(&mut self, key_group: KeyGroup, key: &K, namespace: &N) -> Result<Option<V>> {
        self.encode_key(key_group, key, namespace)?;
        self.store
            .get(&self.key)?
            .map(|bytes| decode(&bytes))
            .transpose()
    }

    fn put(&mut self, key_group: KeyGroup, key: &K, namespace: &N, value: &V) -> Result<()> {
        self.encode_key(key_group, key, namespace)?;
        self.value.clear();
        encode_into(value, &mut self.value)?;
        self.store.put(&self.key, &self.value)
    }

    fn delete(&mut self, key_group: KeyGroup, key: &K, namespace: &N) -> Result<()> {
        self.encode_key(key_group, key, namespace)?;
        self.store.delete(&self.key)
    }

    /// Changes the encoded value of (`key`, `namespace`) in place (see
    /// [`KvStore::change_in_place`](crate::state::KvStore::change_in_place)).
    pub(crate) fn change_encoded_in_place(
        &mut self,
        key_group: KeyGroup,
        key: &K,
        namespace: &N,
        change: &mut crate::state::ChangeInPlace<'_>,
    ) -> Result<()> {
        self.encode_key(key_group, key, namespace)?;
        self.store.change_in_place(&self.key, change)
    }

    /// Calls `read` with the encoded value of (`key`, `namespace`) where it lies (see
    /// [`KvStore::read_in_place`](crate::state::KvStore::read_in_place)).
    pub(crate) fn read_encoded_in_place(
        &mut self,
        key_group: KeyGroup,
        key: &K,
        namespace: &N,
        read: &mut crate::state::ReadInPlace<'_>,
    ) -> Result<()> {
        self.encode_key(key_group, key, namespace)?;
        self.store.read_in_place(&self.key, read)
    }

    /// Every entry under `prefix` in every key group, with its key group.
    fn collect(
        &self,
        prefix: impl Fn(KeyGroup) -> Result<Vec<u8>>,
    ) -> Result<Vec<(KeyGroup, Vec<u8>, V)>> {
        let prefixes = (self.range.start..=self.range.end)
            .map(prefix)
            .collect::<Result<Vec<_>>>()?;
        let mut entries = Vec::new();
        self.store.scan(&prefixes, &mut |key, value| {
            entries.push((
                u16::from_be_bytes([key[0], key[1]]),
                key.to_vec(),
                decode(value)?,
            ));
            Ok(true)
        })?;
        Ok(entries)
    }
}

impl<K, N, V> KvTable<K, N, V> {
    /// Rewrites every stored value of this state in its key groups with `rewrite` (the old
    /// encoding in, the new one out); returns how many. For a restore that reads an older
    /// version of the state's type.
    pub(crate) fn rewrite_values(
        &mut self,
        mut rewrite: impl FnMut(&[u8]) -> Result<Vec<u8>>,
    ) -> Result<usize> {
        let prefixes: Vec<Vec<u8>> = (self.range.start..=self.range.end)
            .map(|kg| {
                let mut prefix = kg.to_be_bytes().to_vec();
                prefix.extend_from_slice(&self.state.to_be_bytes());
                prefix
            })
            .collect();
        let mut rewritten = Vec::new();
        self.store.scan(&prefixes, &mut |key, value| {
            rewritten.push((key.to_vec(), rewrite(value)?));
            Ok(true)
        })?;
        for (key, value) in &rewritten {
            self.store.put(key, value)?;
        }
        Ok(rewritten.len())
    }
}

/// What a change given to [`StateTable::update_if`] did to the value it was lent.
pub(crate) enum Outcome<V> {
    /// Left it as it was: nothing is written.
    Unchanged,
    /// Changed it in place.
    Changed,
    /// Sets this value (where there was none, or in place of the one lent).
    Insert(V),
}

/// One declared state of an operator, in the heap or in the task's key-value store.
pub enum StateTable<K, N, V> {
    /// Typed hash tables.
    Heap(Table<K, N, V>),
    /// Encoded entries in the task's store.
    Kv(KvTable<K, N, V>),
}

impl<K, N, V> StateTable<K, N, V>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    N: Hash + Eq + Clone + Serialize + DeserializeOwned,
    V: Clone + Serialize + DeserializeOwned,
{
    /// The state `name` of operator `operator_id`: in `store` if the task has one, else on the heap.
    pub fn new(
        store: Option<&Arc<dyn KvStore>>,
        operator_id: &str,
        name: &str,
        range: KeyGroupRange,
    ) -> Self {
        match store {
            Some(store) => StateTable::Kv(KvTable::new(
                store.clone(),
                state_id(operator_id, name),
                range,
            )),
            None => StateTable::Heap(Table::new(range)),
        }
    }

    /// The state in the task's store, if it is there.
    pub(crate) fn kv_mut(&mut self) -> Option<&mut KvTable<K, N, V>> {
        match self {
            StateTable::Heap(_) => None,
            StateTable::Kv(table) => Some(table),
        }
    }

    /// Whether the state is on the heap (and so in the operator's own snapshot).
    pub fn heap(&self) -> Option<&Table<K, N, V>> {
        match self {
            StateTable::Heap(table) => Some(table),
            StateTable::Kv(_) => None,
        }
    }

    /// Changes the value of `key` in `namespace` in place (creating it with `create`).
    pub fn update<R>(
        &mut self,
        key_group: KeyGroup,
        key: &K,
        namespace: &N,
        create: impl FnOnce() -> V,
        change: impl FnOnce(&mut V) -> Result<R>,
    ) -> Result<R> {
        match self {
            StateTable::Heap(table) => {
                if let Some(value) = table.get_mut(key_group, key, namespace) {
                    return change(value);
                }
                change(
                    table
                        .entry(key_group, key.clone(), namespace.clone())
                        .or_insert_with(create),
                )
            }
            StateTable::Kv(table) => {
                table.encode_key(key_group, key, namespace)?;
                let (mut create, mut change, mut result) = (Some(create), Some(change), None);
                table.store.update(&table.key, &mut |old, new| {
                    let mut value = match old {
                        Some(bytes) => decode(bytes)?,
                        None => create.take().expect("called once")(),
                    };
                    result = Some(change.take().expect("called once")(&mut value)?);
                    encode_into(&value, new)
                })?;
                Ok(result.expect("the store called `change`"))
            }
        }
    }

    /// Calls `change` with the value of `key` in `namespace` (`None`: absent), and keeps what
    /// it says it did ([`Outcome`]): one lookup on the heap; in a store one read, and a write
    /// only if the value changed or was created.
    pub(crate) fn update_if<R>(
        &mut self,
        key_group: KeyGroup,
        key: &K,
        namespace: &N,
        change: impl FnOnce(Option<&mut V>) -> Result<(R, Outcome<V>)>,
    ) -> Result<R> {
        match self {
            StateTable::Heap(table) => {
                let (result, outcome) = match table.get_mut(key_group, key, namespace) {
                    Some(value) => {
                        let (result, outcome) = change(Some(&mut *value))?;
                        if let Outcome::Insert(new) = outcome {
                            *value = new;
                        }
                        return Ok(result);
                    }
                    None => change(None)?,
                };
                if let Outcome::Insert(new) = outcome {
                    table.insert(key_group, key.clone(), namespace.clone(), new);
                }
                Ok(result)
            }
            StateTable::Kv(table) => {
                let mut old = table.get(key_group, key, namespace)?;
                let (result, outcome) = change(old.as_mut())?;
                match (outcome, old) {
                    (Outcome::Unchanged, _) | (Outcome::Changed, None) => {}
                    (Outcome::Changed, Some(value)) | (Outcome::Insert(value), _) => {
                        table.put(key_group, key, namespace, &value)?
                    }
                }
                Ok(result)
            }
        }
    }

    /// Calls `read` with the value of `key` in `namespace`: borrowed on the heap (no clone),
    /// decoded from the store.
    pub fn read_with<R>(
        &mut self,
        key_group: KeyGroup,
        key: &K,
        namespace: &N,
        read: impl FnOnce(&V) -> R,
    ) -> Result<Option<R>> {
        match self {
            StateTable::Heap(table) => Ok(table.get(key_group, key, namespace).map(read)),
            StateTable::Kv(table) => Ok(table.get(key_group, key, namespace)?.as_ref().map(read)),
        }
    }

    /// The value of `key` in `namespace`.
    pub fn get(&mut self, key_group: KeyGroup, key: &K, namespace: &N) -> Result<Option<V>> {
        match self {
            StateTable::Heap(table) => Ok(table.get(key_group, key, namespace).cloned()),
            StateTable::Kv(table) => table.get(key_group, key, namespace),
        }
    }

    /// Sets the value of `key` in `namespace`.
    pub fn put(&mut self, key_group: KeyGroup, key: K, namespace: N, value: V) -> Result<()> {
        match self {
            StateTable::Heap(table) => {
                table.insert(key_group, key, namespace, value);
                Ok(())
            }
            StateTable::Kv(table) => table.put(key_group, &key, &namespace, &value),
        }
    }

    /// Removes the value of `key` in `namespace`.
    pub fn remove(&mut self, key_group: KeyGroup, key: &K, namespace: &N) -> Result<()> {
        match self {
            StateTable::Heap(table) => {
                table.remove(key_group, key, namespace);
                Ok(())
            }
            StateTable::Kv(table) => table.delete(key_group, key, namespace),
        }
    }

    /// Calls `visit` with every key and value of `namespace`; changes are kept.
    pub fn for_each_in_namespace(
        &mut self,
        namespace: &N,
        mut visit: impl FnMut(&K, &mut V) -> Result<()>,
    ) -> Result<()> {
        match self {
            StateTable::Heap(table) => {
                for (key, value) in table.namespace_mut(namespace) {
                    visit(key, value)?;
                }
                Ok(())
            }
            StateTable::Kv(table) => {
                for (_, stored, mut value) in
                    table.collect(|kg| table.namespace_prefix(kg, namespace))?
                {
                    let (_, key): (N, K) = KvTable::<K, N, V>::decode_key(&stored)?;
                    visit(&key, &mut value)?;
                    table.store.put(&stored, &encode(&value)?)?;
                }
                Ok(())
            }
        }
    }

    /// Removes and returns every value of `namespace`, with key group and key.
    pub fn drain_namespace(&mut self, namespace: &N) -> Result<Vec<(KeyGroup, K, V)>> {
        match self {
            StateTable::Heap(table) => Ok(table.drain_namespace(namespace)),
            StateTable::Kv(table) => {
                let prefixes = (table.range.start..=table.range.end)
                    .map(|kg| table.namespace_prefix(kg, namespace))
                    .collect::<Result<Vec<_>>>()?;
                let mut drained = Vec::new();
                table.store.drain(&prefixes, &mut |stored, value| {
                    let (_, key): (N, K) = KvTable::<K, N, V>::decode_key(stored)?;
                    drained.push((
                        u16::from_be_bytes([stored[0], stored[1]]),
                        key,
                        decode(value)?,
                    ));
                    Ok(())
                })?;
                Ok(drained)
            }
        }
    }

    /// Removes every value of `namespace` and hands each to `each` with its key group and key
    /// (on the heap without collecting them first).
    pub fn drain_namespace_each(
        &mut self,
        namespace: &N,
        mut each: impl FnMut(KeyGroup, K, V) -> Result<()>,
    ) -> Result<()> {
        match self {
            StateTable::Heap(table) => table.drain_namespace_each(namespace, each),
            StateTable::Kv(_) => {
                for (key_group, key, value) in self.drain_namespace(namespace)? {
                    each(key_group, key, value)?;
                }
                Ok(())
            }
        }
    }

    /// Calls `visit` with every entry.
    pub fn for_each(
        &mut self,
        mut visit: impl FnMut(KeyGroup, &N, &K, &V) -> Result<()>,
    ) -> Result<()> {
        match self {
            StateTable::Heap(table) => {
                for (key_group, ns, key, value) in table.iter() {
                    visit(key_group, ns, key, value)?;
                }
                Ok(())
            }
            StateTable::Kv(table) => {
                for (key_group, stored, value) in
                    table.collect(|kg| Ok(table.state_prefix(kg).to_vec()))?
                {
                    let (ns, key): (N, K) = KvTable::<K, N, V>::decode_key(&stored)?;
                    visit(key_group, &ns, &key, &value)?;
                }
                Ok(())
            }
        }
    }

    /// Keeps the entries for which `keep` is true (it may change them); returns how many went.
    pub fn retain(&mut self, mut keep: impl FnMut(&N, &K, &mut V) -> bool) -> Result<usize> {
        match self {
            StateTable::Heap(table) => Ok(table.retain(keep)),
            StateTable::Kv(table) => {
                let mut removed = 0;
                for (_, stored, mut value) in
                    table.collect(|kg| Ok(table.state_prefix(kg).to_vec()))?
                {
                    let (ns, key): (N, K) = KvTable::<K, N, V>::decode_key(&stored)?;
                    if keep(&ns, &key, &mut value) {
                        table.store.put(&stored, &encode(&value)?)?;
                    } else {
                        table.store.delete(&stored)?;
                        removed += 1;
                    }
                }
                Ok(removed)
            }
        }
    }

    /// Removes the entries of key groups `groups` (all of them on the heap) for which `expired`
    /// is true, without rewriting the others; returns how many went. In a store, only those
    /// key groups are scanned: a caller sweeping a large state a slice at a time (the TTL
    /// sweep) reads and writes no more than that slice.
    pub fn remove_where(
        &mut self,
        groups: KeyGroupRange,
        mut expired: impl FnMut(&N, &K, &V) -> bool,
    ) -> Result<usize> {
        match self {
            StateTable::Heap(table) => Ok(table.retain(|ns, key, value| !expired(ns, key, value))),
            StateTable::Kv(table) => {
                let prefixes: Vec<Vec<u8>> = (groups.start.max(table.range.start)
                    ..=groups.end.min(table.range.end))
                    .map(|kg| table.state_prefix(kg).to_vec())
                    .collect();
                let mut gone = Vec::new();
                table.store.scan(&prefixes, &mut |stored, bytes| {
                    let (ns, key): (N, K) = KvTable::<K, N, V>::decode_key(stored)?;
                    if expired(&ns, &key, &decode(bytes)?) {
                        gone.push(stored.to_vec());
                    }
                    Ok(true)
                })?;
                for stored in &gone {
                    table.store.delete(stored)?;
                }
                Ok(gone.len())
            }
        }
    }

    /// Entries and bytes (for the store: its estimate, shared by the task's states).
    pub fn size(&self) -> (usize, usize) {
        match self {
            StateTable::Heap(table) => (table.len(), table.heap_bytes()),
            StateTable::Kv(table) => {
                let now = std::time::Instant::now();
                match table.estimate.get() {
                    Some((at, size))
                        if now.duration_since(at) < std::time::Duration::from_secs(1) =>
                    {
                        size
                    }
                    _ => {
                        let (entries, bytes) = table.store.estimate();
                        let size = (entries as usize, bytes as usize);
                        table.estimate.set(Some((now, size)));
                        size
                    }
                }
            }
        }
    }
}

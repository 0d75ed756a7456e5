//! A map state in a store (RocksDB): one store entry per map entry, as Flink keeps a
//! `MapState` in RocksDB, so that reading or writing one entry of a large map is a point read or
//! write, not a decode and an encode of the whole map. On the heap a map state stays one hash
//! map per key, changed in place ([`KeyedState`](super::KeyedState)).
//!
//! In the store, under the state id of `"<name>#entries"` ([`state_id`]):
//! - `[key group][state id][0 0][key]` → the processing time of the map's last write (its
//!   header), written only when the state has a time-to-live: the map expires whole, as on the
//!   heap;
//! - `[key group][state id][0 0][key][user key]` → the entry's value.
//!
//! The state codec is prefix-free, so the entries of one key are exactly the store keys under
//! its own key. A map without a header (written while the state had no time-to-live) starts
//! its clock at its next write.
//!
//! A store restored from an older version of Riffle, which kept each key's map as one value
//! under the state id of `name`, is converted when the state is declared; so is a heap
//! savepoint restored into a store.

use std::collections::HashMap;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::codec::{decode, encode, encode_into};
use crate::error::Result;
use crate::keys::{KeyGroup, KeyGroupRange};
use crate::record::{Data, Timestamp};
use crate::state::descriptors::{StateTtl, TtlUpdate};
use crate::state::evolution::{self, Layout, Reader, StateSchema, ValueFormat};
use crate::state::table::FastMap;
use crate::state::{KvStore, KvTable, StateTable, VisitWhile, state_id};

/// Reads a whole map from the front of its encoding (an older layout's value).
type ReadMap<'a, UK, UV> = dyn FnMut(&mut &[u8]) -> Result<FastMap<UK, UV>> + 'a;

/// The name under which a map state's entries are stored.
pub(crate) fn entries_name(name: &str) -> String {
    format!("{name}#entries")
}

/// The entries of one map state in a store.
pub(crate) struct MapEntries<K, UK, UV> {
    /// The headers' table: its keys are the maps' own keys; entries extend them.
    table: StateTable<K, (), Timestamp>,
    ttl: Option<StateTtl>,
    _types: PhantomData<fn(UK) -> UV>,
}

/// The key codec's encoding of a stored key's own key and what follows it.
fn split_key<K: Data>(stored: &[u8]) -> Result<(K, &[u8])> {
    postcard::take_from_bytes::<K>(&stored[8..])
        .map_err(|e| crate::Error::user(format!("cannot decode state: {e}")))
}

impl<K, UK, UV> MapEntries<K, UK, UV>
where
    K: Data + Hash + Eq,
    UK: Data + Hash + Eq,
    UV: Data,
{
    /// The map state `name` of operator `operator_id` in `store`.
    pub(crate) fn new(
        store: &Arc<dyn KvStore>,
        operator_id: &str,
        name: &str,
        range: KeyGroupRange,
        ttl: Option<StateTtl>,
    ) -> Self {
        MapEntries {
            table: StateTable::Kv(KvTable::new(
                store.clone(),
                state_id(operator_id, &entries_name(name)),
                range,
            )),
            ttl,
            _types: PhantomData,
        }
    }

    fn kv(&mut self) -> &mut KvTable<K, (), Timestamp> {
        self.table.kv_mut().expect("map entries live in a store")
    }

    /// The store key of `key`'s map (its header).
    fn map_key(&mut self, key_group: KeyGroup, key: &K) -> Result<Vec<u8>> {
        Ok(self.kv().key_of(key_group, key, &())?.clone())
    }

    /// The store key of one entry.
    fn entry_key(&mut self, key_group: KeyGroup, key: &K, user_key: &UK) -> Result<Vec<u8>> {
        let mut stored = self.map_key(key_group, key)?;
        encode_into(user_key, &mut stored)?;
        Ok(stored)
    }

    /// Whether `key`'s map is live at `now` (it has not expired): an expired map is removed; a
    /// read of a map whose time-to-live counts reads refreshes it.
    fn live(&mut self, key_group: KeyGroup, key: &K, now: Timestamp, read: bool) -> Result<bool> {
        let Some(ttl) = self.ttl else {
            return Ok(true);
        };
        let header = self.map_key(key_group, key)?;
        let store = self.kv().store().clone();
        let Some(touched) = store.get(&header)? else {
            return Ok(true);
        };
        if now - decode::<Timestamp>(&touched)? >= ttl.ttl.as_millis() as i64 {
            store.drain(&[header], &mut |_, _| Ok(()))?;
            return Ok(false);
        }
        if read && ttl.update == TtlUpdate::OnReadAndWrite {
            store.put(&header, &encode(&now)?)?;
        }
        Ok(true)
    }

    /// Marks `key`'s map written at `now` (when the state has a time-to-live), after removing
    /// it if it had expired: an expired map starts again.
    fn written(&mut self, key_group: KeyGroup, key: &K, now: Timestamp) -> Result<()> {
        if self.ttl.is_none() {
            return Ok(());
        }
        self.live(key_group, key, now, false)?;
        let header = self.map_key(key_group, key)?;
        self.kv().store().put(&header, &encode(&now)?)
    }

    pub(crate) fn get(
        &mut self,
        key_group: KeyGroup,
        key: &K,
        user_key: &UK,
        now: Timestamp,
    ) -> Result<Option<UV>> {
        if !self.live(key_group, key, now, true)? {
            return Ok(None);
        }
        let stored = self.entry_key(key_group, key, user_key)?;
        let value = self.kv().store().get(&stored)?;
        value.map(|bytes| decode(&bytes)).transpose()
    }

    pub(crate) fn put(
        &mut self,
        key_group: KeyGroup,
        key: &K,
        user_key: &UK,
        value: &UV,
        now: Timestamp,
    ) -> Result<()> {
        self.written(key_group, key, now)?;
        let stored = self.entry_key(key_group, key, user_key)?;
        self.kv().store().put(&stored, &encode(value)?)
    }

    /// Changes one entry in place (see [`MapState::modify`](super::MapState::modify)): read,
    /// changed, and written back only if its encoding changed.
    pub(crate) fn modify<R>(
        &mut self,
        key_group: KeyGroup,
        key: &K,
        user_key: &UK,
        now: Timestamp,
        create: impl FnOnce() -> UV,
        change: impl FnOnce(&mut UV) -> R,
    ) -> Result<R> {
        self.written(key_group, key, now)?;
        let stored = self.entry_key(key_group, key, user_key)?;
        let store = self.kv().store().clone();
        let old = store.get(&stored)?;
        let mut value = match &old {
            Some(bytes) => decode(bytes)?,
            None => create(),
        };
        let result = change(&mut value);
        let new = encode(&value)?;
        if old.as_deref() != Some(new.as_slice()) {
            store.put(&stored, &new)?;
        }
        Ok(result)
    }

    pub(crate) fn remove(
        &mut self,
        key_group: KeyGroup,
        key: &K,
        user_key: &UK,
        now: Timestamp,
    ) -> Result<Option<UV>> {
        let Some(value) = self.get(key_group, key, user_key, now)? else {
            return Ok(None);
        };
        let stored = self.entry_key(key_group, key, user_key)?;
        self.kv().store().delete(&stored)?;
        if self.ttl.is_some() {
            // The last entry gone, the map is gone (its header with it), as on the heap.
            if self.count(key_group, key, Some(1))? == 0 {
                self.clear(key_group, key)?;
            } else {
                self.written(key_group, key, now)?;
            }
        }
        Ok(Some(value))
    }

    /// Calls `visit` with each entry's user key and value bytes, in the store's order, until
    /// it returns `false`.
    fn scan(&mut self, key_group: KeyGroup, key: &K, visit: &mut VisitWhile<'_>) -> Result<()> {
        let prefix = self.map_key(key_group, key)?;
        let len = prefix.len();
        self.kv()
            .store()
            .clone()
            .scan(&[prefix], &mut |stored, value| {
                if stored.len() == len {
                    return Ok(true); // the header
                }
                visit(&stored[len..], value)
            })
    }

    /// How many entries `key`'s map has (counting no further than `limit`).
    fn count(&mut self, key_group: KeyGroup, key: &K, limit: Option<usize>) -> Result<usize> {
        let mut n = 0;
        self.scan(key_group, key, &mut |_, _| {
            n += 1;
            Ok(limit.is_none_or(|limit| n < limit))
        })?;
        Ok(n)
    }

    pub(crate) fn entries(
        &mut self,
        key_group: KeyGroup,
        key: &K,
        now: Timestamp,
    ) -> Result<Vec<(UK, UV)>> {
        if !self.live(key_group, key, now, true)? {
            return Ok(Vec::new());
        }
        let mut entries = Vec::new();
        self.scan(key_group, key, &mut |user_key, value| {
            entries.push((decode(user_key)?, decode(value)?));
            Ok(true)
        })?;
        Ok(entries)
    }

    pub(crate) fn len(&mut self, key_group: KeyGroup, key: &K, now: Timestamp) -> Result<usize> {
        if !self.live(key_group, key, now, true)? {
            return Ok(0);
        }
        self.count(key_group, key, None)
    }

    pub(crate) fn clear(&mut self, key_group: KeyGroup, key: &K) -> Result<()> {
        let prefix = self.map_key(key_group, key)?;
        self.kv().store().drain(&[prefix], &mut |_, _| Ok(()))
    }

    /// Writes `key`'s whole map, last written at `touched` (a restore).
    pub(crate) fn put_map(
        &mut self,
        key_group: KeyGroup,
        key: &K,
        map: FastMap<UK, UV>,
        touched: Timestamp,
    ) -> Result<()> {
        if self.ttl.is_some() {
            let header = self.map_key(key_group, key)?;
            self.kv().store().put(&header, &encode(&touched)?)?;
        }
        for (user_key, value) in map {
            let stored = self.entry_key(key_group, key, &user_key)?;
            self.kv().store().put(&stored, &encode(&value)?)?;
        }
        Ok(())
    }

    /// Converts what a store restored from an older version holds: maps kept whole, one value
    /// per key under the state id of `name` (each read by `read`, which gives the map and the
    /// rest of the value: the time of its last write), become entries. Returns how many maps.
    pub(crate) fn convert_whole_maps(
        &mut self,
        operator_id: &str,
        name: &str,
        read: &mut ReadMap<'_, UK, UV>,
    ) -> Result<usize> {
        let (store, range) = (self.kv().store().clone(), self.kv().range());
        let old: KvTable<K, (), ()> =
            KvTable::new(store.clone(), state_id(operator_id, name), range);
        let mut whole = Vec::new();
        store.scan(&old.state_prefixes(range), &mut |stored, value| {
            whole.push((stored.to_vec(), value.to_vec()));
            Ok(true)
        })?;
        for (stored, value) in &whole {
            let key_group = u16::from_be_bytes([stored[0], stored[1]]);
            let (key, _) = split_key::<K>(stored)?;
            let mut input = value.as_slice();
            let map = read(&mut input)?;
            let touched: Timestamp = decode(input)?;
            self.put_map(key_group, &key, map, touched)?;
            store.delete(stored)?;
        }
        Ok(whole.len())
    }

    /// Rewrites every entry as an older version of the map's types wrote it (`old`'s recorded
    /// format, a map) into the declared types: `convert` turns an old user key and value into
    /// new ones. Returns how many entries.
    pub(crate) fn evolve(
        &mut self,
        old: &StateSchema,
        convert: &mut dyn FnMut(evolution::StateValue, evolution::StateValue) -> Result<(UK, UV)>,
    ) -> Result<usize> {
        let format = old
            .format
            .as_ref()
            .ok_or_else(|| crate::Error::user("the savepoint recorded no format"))?;
        let Layout::Map { key, value } = &format.root else {
            return Err(crate::Error::user(format!(
                "the savepoint recorded a {} for a map state",
                format.describe()
            )));
        };
        let part = |root: &Layout| ValueFormat {
            root: root.clone(),
            containers: format.containers.clone(),
        };
        let (key_format, value_format) = (part(key), part(value));
        let (store, range) = (self.kv().store().clone(), self.kv().range());
        let mut entries = Vec::new();
        store.scan(&self.kv().state_prefixes(range), &mut |stored, bytes| {
            entries.push((stored.to_vec(), bytes.to_vec()));
            Ok(true)
        })?;
        let cannot = |e| crate::Error::user(format!("cannot read an old map entry: {e}"));
        let mut rewritten = HashMap::new();
        for (stored, bytes) in &entries {
            let key_group = u16::from_be_bytes([stored[0], stored[1]]);
            let (key, mut user_key) = split_key::<K>(stored)?;
            if user_key.is_empty() {
                continue; // a header
            }
            let old_key = Reader::new(&key_format)
                .read_value(&mut user_key)
                .map_err(cannot)?;
            let old_value = Reader::new(&value_format)
                .read_value(&mut bytes.as_slice())
                .map_err(cannot)?;
            let (user_key, value) = convert(old_key, old_value)?;
            store.delete(stored)?;
            rewritten.insert(self.entry_key(key_group, &key, &user_key)?, encode(&value)?);
        }
        for (stored, value) in &rewritten {
            store.put(stored, value)?;
        }
        Ok(rewritten.len())
    }

    /// Removes the maps of `groups` that expired (`ttl` ms after their last write); returns
    /// how many.
    pub(crate) fn expire(
        &mut self,
        now: Timestamp,
        ttl: i64,
        groups: KeyGroupRange,
    ) -> Result<usize> {
        let store = self.kv().store().clone();
        let mut gone = Vec::new();
        store.scan(&self.kv().state_prefixes(groups), &mut |stored, value| {
            let (_, rest) = split_key::<K>(stored)?;
            if rest.is_empty() && now - decode::<Timestamp>(value)? >= ttl {
                gone.push(stored.to_vec());
            }
            Ok(true)
        })?;
        for map in &gone {
            store.drain(std::slice::from_ref(map), &mut |_, _| Ok(()))?;
        }
        Ok(gone.len())
    }

    /// Entries and bytes (the store's estimate).
    pub(crate) fn size(&self) -> (usize, usize) {
        self.table.size()
    }
}

//! [`KeyedState`]: the keyed state of one operator instance, and the handles through which a
//! keyed function reads and writes the state of its current key.
//!
//! Every entry remembers when it was last updated (processing time), which is what time-to-live
//! needs; an expired entry reads as absent and is removed, and a periodic sweep removes the ones
//! nobody reads any more.

use std::any::Any;
use std::collections::BTreeMap;
use std::hash::Hash;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::aggregate::AggregateFunction;
use crate::codec::{decode, encode, encode_into};
use crate::error::{Error, Result};
use crate::keys::{KeyGroup, KeyGroupRange};
use crate::record::{Data, Timestamp};
use crate::state::descriptors::{
    AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor,
    StateTtl, TtlUpdate, ValueStateDescriptor,
};
use crate::state::evolution::{self, Reader, Restore, StateSchema, ValueFormat};
use crate::state::kv_table::Outcome;
use crate::state::map_entries::MapEntries;
use crate::state::table::FastMap;
use crate::state::{KvStore, StateTable};
use crate::time::Clock;

/// A state value and the processing time of its last update.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Timed<X> {
    pub(crate) value: X,
    pub(crate) touched: Timestamp,
}

type StoredTable<K, X> = StateTable<K, (), Timed<X>>;

/// One declared state of the operator.
struct Slot<K> {
    name: &'static str,
    type_name: &'static str,
    /// What a checkpoint records of it.
    schema: StateSchema,
    table: Box<dyn ErasedTable<K>>,
    ttl: Option<StateTtl>,
}

/// A declared state's table with its value type erased. What the operator does to every state
/// at once (expire, size, snapshot, restore, remove a key) goes through the compiler's vtable of
/// the table's own type, so no call can reach a table as another type; the one typed access,
/// [`KeyedState::table`], is a checked downcast whose mismatch is an error.
trait ErasedTable<K>: Send {
    /// Removes the entries of `groups` that expired (`ttl` ms after their last update).
    fn expire(&mut self, now: Timestamp, ttl: i64, groups: KeyGroupRange) -> Result<usize>;
    /// Entries and bytes.
    fn entries(&self) -> (usize, usize);
    /// The entries of one key group of a heap state (`None`: nothing in it, or the state is in
    /// a store, whose checkpoint holds it).
    fn snapshot_group(&self, key_group: KeyGroup) -> Result<Option<Vec<u8>>>;
    /// Puts back what [`snapshot_group`](ErasedTable::snapshot_group) wrote.
    fn restore_group(&mut self, key_group: KeyGroup, bytes: &[u8]) -> Result<()>;
    /// Removes one key's entry.
    fn remove(&mut self, key_group: KeyGroup, key: &K) -> Result<()>;
    /// The table itself, for the typed access.
    fn as_any_mut(&mut self) -> &mut (dyn Any + Send);
}

impl<K: Data + Hash + Eq, X: Data> ErasedTable<K> for StoredTable<K, X> {
    fn expire(&mut self, now: Timestamp, ttl: i64, groups: KeyGroupRange) -> Result<usize> {
        self.remove_where(groups, |_, _, v| now - v.touched >= ttl)
    }

    fn entries(&self) -> (usize, usize) {
        self.size()
    }

    fn snapshot_group(&self, key_group: KeyGroup) -> Result<Option<Vec<u8>>> {
        let Some(table) = self.heap() else {
            return Ok(None);
        };
        let entries: Vec<(&K, &Timed<X>)> = table
            .group_entries(key_group)
            .into_iter()
            .map(|(_, k, v)| (k, v))
            .collect();
        if entries.is_empty() {
            Ok(None)
        } else {
            encode(&entries).map(Some)
        }
    }

    fn restore_group(&mut self, key_group: KeyGroup, bytes: &[u8]) -> Result<()> {
        for (key, value) in decode::<Vec<(K, Timed<X>)>>(bytes)? {
            self.put(key_group, key, (), value)?;
        }
        Ok(())
    }

    fn remove(&mut self, key_group: KeyGroup, key: &K) -> Result<()> {
        StateTable::remove(self, key_group, key, &())
    }

    fn as_any_mut(&mut self) -> &mut (dyn Any + Send) {
        self
    }
}

impl<K, UK, UV> ErasedTable<K> for MapEntries<K, UK, UV>
where
    K: Data + Hash + Eq,
    UK: Data + Hash + Eq,
    UV: Data,
{
    fn expire(&mut self, now: Timestamp, ttl: i64, groups: KeyGroupRange) -> Result<usize> {
        MapEntries::expire(self, now, ttl, groups)
    }

    fn entries(&self) -> (usize, usize) {
        self.size()
    }

    fn snapshot_group(&self, _key_group: KeyGroup) -> Result<Option<Vec<u8>>> {
        Ok(None) // the store's checkpoint holds it
    }

    /// A heap savepoint's maps, restored into a store.
    fn restore_group(&mut self, key_group: KeyGroup, bytes: &[u8]) -> Result<()> {
        for (key, map) in decode::<Vec<(K, Timed<FastMap<UK, UV>>)>>(bytes)? {
            self.put_map(key_group, &key, map.value, map.touched)?;
        }
        Ok(())
    }

    fn remove(&mut self, key_group: KeyGroup, key: &K) -> Result<()> {
        self.clear(key_group, key)
    }

    fn as_any_mut(&mut self) -> &mut (dyn Any + Send) {
        self
    }
}

/// Reads one key group of a heap state written by an older version of its type: the
/// entries as [`snapshot_group`](ErasedTable::snapshot_group) wrote them, each value read by
/// `read_old`, handed to `put` with its key and the time of its last write.
fn read_old_group<K: Data, X>(
    bytes: &[u8],
    read_old: &dyn Fn(&mut &[u8]) -> Result<X, SlotError>,
    put: &mut dyn FnMut(K, Timed<X>) -> Result<()>,
) -> Result<(), SlotError> {
    let cut = |e: postcard::Error| SlotError::Mismatch(format!("cannot decode state: {e}"));
    let (len, mut input) = postcard::take_from_bytes::<u64>(bytes).map_err(cut)?;
    for _ in 0..len {
        let (key, rest) = postcard::take_from_bytes::<K>(input).map_err(cut)?;
        input = rest;
        let value = read_old(&mut input)?;
        let (touched, rest) = postcard::take_from_bytes::<Timestamp>(input).map_err(cut)?;
        input = rest;
        put(key, Timed { value, touched }).map_err(|e| SlotError::Mismatch(e.to_string()))?;
    }
    Ok(())
}

/// Why a declared state cannot be reached.
#[derive(Clone, Debug)]
enum SlotError {
    /// The state is used with another type than it was declared with in this run.
    Mismatch(String),
    /// What was restored of it cannot be read by its type.
    Incompatible {
        operator: String,
        state: String,
        message: String,
    },
}

impl SlotError {
    fn to_error(&self) -> Error {
        match self {
            SlotError::Mismatch(message) => Error::Graph(message.clone()),
            SlotError::Incompatible {
                operator,
                state,
                message,
            } => Error::IncompatibleState {
                operator: operator.clone(),
                state: state.clone(),
                message: message.clone(),
            },
        }
    }
}

impl std::fmt::Display for SlotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.to_error())
    }
}

/// State `name` of operator `operator` cannot be restored, for `message`.
fn incompatible(operator: &str, name: &str, message: String) -> SlotError {
    SlotError::Incompatible {
        operator: operator.to_string(),
        state: name.to_string(),
        message,
    }
}

/// What a state's descriptor tells a restore: the version and format of its values, and how a
/// value written by an older version is read.
trait Declared<X> {
    fn version(&self) -> u32;
    /// The format recorded for the state (for a list, that of one value).
    fn format(&self) -> Option<Arc<ValueFormat>>;
    fn type_name(&self) -> String;
    /// Reads one value as `old` encoded it from the front of `input`, converted to `X`.
    fn read_old(&self, old: &StateSchema, input: &mut &[u8]) -> Result<X, String>;
}

/// A descriptor of one value per key, with its migration: value and reducing states.
macro_rules! declared_plain {
    ($($descriptor:ident),*) => {$(
        impl<V: Data> Declared<V> for $descriptor<V> {
            fn version(&self) -> u32 {
                self.version
            }
            fn format(&self) -> Option<Arc<ValueFormat>> {
                evolution::format_of::<V>()
            }
            fn type_name(&self) -> String {
                std::any::type_name::<V>().to_string()
            }
            fn read_old(&self, old: &StateSchema, input: &mut &[u8]) -> Result<V, String> {
                evolution::read_old_value(old, input, self.version, self.migrate)
            }
        }
    )*};
}

declared_plain!(ValueStateDescriptor, ReducingStateDescriptor);

impl<In, A: AggregateFunction<In>> Declared<A::Acc> for AggregatingStateDescriptor<In, A> {
    fn version(&self) -> u32 {
        self.version
    }
    fn format(&self) -> Option<Arc<ValueFormat>> {
        evolution::format_of::<A::Acc>()
    }
    fn type_name(&self) -> String {
        std::any::type_name::<A::Acc>().to_string()
    }
    fn read_old(&self, old: &StateSchema, input: &mut &[u8]) -> Result<A::Acc, String> {
        evolution::read_old_value(old, input, self.version, None)
    }
}

impl<V: Data> Declared<ListValue<V>> for ListStateDescriptor<V> {
    fn version(&self) -> u32 {
        self.version
    }
    fn format(&self) -> Option<Arc<ValueFormat>> {
        evolution::format_of::<V>()
    }
    fn type_name(&self) -> String {
        std::any::type_name::<V>().to_string()
    }
    /// A list is its values' encodings one after the other, as bytes (see [`ListValue`]).
    fn read_old(&self, old: &StateSchema, input: &mut &[u8]) -> Result<ListValue<V>, String> {
        let (len, rest) = postcard::take_from_bytes::<u64>(input)
            .map_err(|e| format!("cannot read an old list: {e}"))?;
        if (len as usize) > rest.len() {
            return Err("cannot read an old list: it is cut short".into());
        }
        let (mut items, rest) = rest.split_at(len as usize);
        *input = rest;
        let mut values = Vec::new();
        while !items.is_empty() {
            values.push(evolution::read_old_value(
                old,
                &mut items,
                self.version,
                self.migrate,
            )?);
        }
        Ok(ListValue(values))
    }
}

impl<UK: Data + Hash + Eq, UV: Data> Declared<FastMap<UK, UV>> for MapStateDescriptor<UK, UV> {
    fn version(&self) -> u32 {
        self.version
    }
    fn format(&self) -> Option<Arc<ValueFormat>> {
        evolution::format_of::<FastMap<UK, UV>>()
    }
    fn type_name(&self) -> String {
        format!(
            "map {} -> {}",
            std::any::type_name::<UK>(),
            std::any::type_name::<UV>()
        )
    }
    fn read_old(&self, old: &StateSchema, input: &mut &[u8]) -> Result<FastMap<UK, UV>, String> {
        let format = old
            .format
            .as_ref()
            .ok_or("the savepoint recorded no format")?;
        let entries = Reader::new(format)
            .read_map(input)
            .map_err(|e| format!("cannot read an old map: {e}"))?;
        let mut map = FastMap::default();
        for (key, value) in entries {
            let key: UK = key
                .deserialize()
                .map_err(|e| format!("an old map key cannot be read as the new type: {e}"))?;
            map.insert(
                key,
                evolution::convert(value, old.version, self.version, self.migrate)?,
            );
        }
        Ok(map)
    }
}

/// The keyed state of one key group in a checkpoint: each declared state's entries, by name.
pub(crate) type StateGroupSnapshot = Vec<(String, Vec<u8>)>;

/// The keyed state of one operator instance, by declared name.
pub struct KeyedState<K> {
    slots: Vec<Slot<K>>,
    /// The task's store (state goes there when the backend has one) and the operator's id.
    store: Option<Arc<dyn KvStore>>,
    operator_id: String,
    /// Restored entries of states the function has not declared yet (declared lazily, on first
    /// access), by state name and key group.
    pending: Vec<(String, KeyGroup, Vec<u8>)>,
    /// The schemas the restored checkpoint recorded, by state name.
    restored: BTreeMap<String, StateSchema>,
    range: KeyGroupRange,
    clock: Arc<dyn Clock>,
    last_sweep: Timestamp,
    /// The first key group of the next sweep of store-backed state.
    sweep_next: KeyGroup,
    _key: std::marker::PhantomData<fn(K)>,
}

/// How often expired entries are swept at most.
const SWEEP_INTERVAL_MS: i64 = 1_000;

/// A sweep of state in a store covers this share of the key groups, the next sweep the next
/// share: a full pass takes `SWEEP_SLICES` sweeps, and no sweep reads the whole state.
const SWEEP_SLICES: usize = 8;

impl<K: Data + Hash + Eq> KeyedState<K> {
    /// Empty state on the heap for the key groups of `range`.
    pub fn new(range: KeyGroupRange, clock: Arc<dyn Clock>) -> Self {
        let now = clock.now();
        KeyedState {
            slots: Vec::new(),
            store: None,
            operator_id: String::new(),
            pending: Vec::new(),
            restored: BTreeMap::new(),
            range,
            clock,
            last_sweep: now,
            sweep_next: range.start,
            _key: std::marker::PhantomData,
        }
    }

    /// Empty state of operator `operator_id` in `store` (the heap if `None`).
    pub fn in_store(
        range: KeyGroupRange,
        clock: Arc<dyn Clock>,
        store: Option<Arc<dyn KvStore>>,
        operator_id: &str,
    ) -> Self {
        KeyedState {
            store,
            operator_id: operator_id.to_string(),
            ..KeyedState::new(range, clock)
        }
    }

    /// Whether the state lives in a store (RocksDB) rather than in heap tables.
    pub fn has_store(&self) -> bool {
        self.store.is_some()
    }

    /// The processing time now.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn table<X: Data>(
        &mut self,
        name: &'static str,
        ttl: Option<StateTtl>,
        declared: &dyn Declared<X>,
    ) -> Result<&mut StoredTable<K, X>, SlotError> {
        let index = match self.slots.iter().position(|s| s.name == name) {
            Some(index) => index,
            None => self.declare(name, ttl, declared)?,
        };
        let slot = &mut self.slots[index];
        let type_name = slot.type_name;
        slot.table
            .as_any_mut()
            .downcast_mut::<StoredTable<K, X>>()
            .ok_or_else(|| {
                SlotError::Mismatch(format!(
                    "state `{name}` is used as {} here but was declared as {type_name}",
                    std::any::type_name::<X>()
                ))
            })
    }

    /// What a checkpoint will record of state `name`, what the restored one recorded (if
    /// any), and how its values are restored.
    fn restore_plan<X>(
        &self,
        name: &str,
        declared: &dyn Declared<X>,
    ) -> Result<(StateSchema, Option<StateSchema>, Restore), SlotError> {
        let schema = StateSchema {
            name: name.to_string(),
            version: declared.version(),
            type_name: declared.type_name(),
            format: declared.format().map(|f| (*f).clone()),
        };
        let old = self.restored.get(name).cloned();
        let plan = evolution::restore_plan(old.as_ref(), &schema)
            .map_err(|message| incompatible(&self.operator_id, name, message))?;
        Ok((schema, old, plan))
    }

    /// Declares state `name`: its table, with what was restored of it (read with the format
    /// that wrote it when its type changed since).
    fn declare<X: Data>(
        &mut self,
        name: &'static str,
        ttl: Option<StateTtl>,
        declared: &dyn Declared<X>,
    ) -> Result<usize, SlotError> {
        let (schema, old, plan) = self.restore_plan(name, declared)?;
        let operator = self.operator_id.clone();
        let incompatible = |message: String| incompatible(&operator, name, message);
        let mut table =
            StoredTable::<K, X>::new(self.store.as_ref(), &self.operator_id, name, self.range);
        let (restored, pending): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(n, _, _)| n == name);
        self.pending = pending;
        match (plan, &old) {
            (Restore::Evolve, Some(old)) => {
                let versions = format!(
                    "the savepoint holds version {} of it ({}), this job declares version {} ({})",
                    old.version, old.type_name, schema.version, schema.type_name
                );
                let read_old = |input: &mut &[u8]| {
                    declared
                        .read_old(old, input)
                        .map_err(|e| incompatible(format!("{versions}; {e}")))
                };
                for (_, key_group, bytes) in restored {
                    read_old_group(&bytes, &read_old, &mut |key, value| {
                        table.put(key_group, key, (), value)
                    })?;
                }
                if let Some(kv) = table.kv_mut() {
                    let mut failed = None;
                    let rewritten = kv.rewrite_values(|bytes| {
                        let mut input = bytes;
                        let value = read_old(&mut input).map_err(|e| {
                            let message = e.to_string();
                            failed = Some(e);
                            Error::State(message)
                        })?;
                        let touched: Timestamp = decode(input)?;
                        encode(&Timed { value, touched })
                    });
                    if let Some(error) = failed {
                        return Err(error);
                    }
                    rewritten.map_err(|e| incompatible(format!("{versions}; {e}")))?;
                }
                tracing::info!(
                    operator = %self.operator_id, state = name, from = old.version,
                    to = schema.version, "state restored from an older version of its type"
                );
            }
            _ => {
                for (_, key_group, bytes) in restored {
                    table.restore_group(key_group, &bytes).map_err(|e| {
                        incompatible(format!(
                            "{e} (its type, {}, cannot read what the savepoint holds{})",
                            schema.type_name,
                            old.as_ref()
                                .map(|o| format!(
                                    ", written as {} version {}",
                                    o.type_name, o.version
                                ))
                                .unwrap_or_default()
                        ))
                    })?;
                }
            }
        }
        self.slots.push(Slot {
            name,
            type_name: std::any::type_name::<X>(),
            schema,
            table: Box::new(table),
            ttl,
        });
        Ok(self.slots.len() - 1)
    }

    /// The entries of map state `d` in the task's store, declared on first use.
    fn map_entries<UK, UV>(
        &mut self,
        d: &MapStateDescriptor<UK, UV>,
    ) -> Result<&mut MapEntries<K, UK, UV>, SlotError>
    where
        UK: Data + Hash + Eq,
        UV: Data,
    {
        let index = match self.slots.iter().position(|s| s.name == d.name) {
            Some(index) => index,
            None => self.declare_map_entries(d)?,
        };
        let slot = &mut self.slots[index];
        let type_name = slot.type_name;
        slot.table
            .as_any_mut()
            .downcast_mut::<MapEntries<K, UK, UV>>()
            .ok_or_else(|| {
                SlotError::Mismatch(format!(
                    "state `{}` is used as {} here but was declared as {type_name}",
                    d.name,
                    std::any::type_name::<FastMap<UK, UV>>()
                ))
            })
    }

    /// Declares map state `d` in the task's store, one store entry per map entry: with what
    /// the store was restored with (entries written by an older version of the map's types
    /// converted; maps an older Riffle kept whole split into entries) and what a heap
    /// savepoint holds of it.
    fn declare_map_entries<UK, UV>(
        &mut self,
        d: &MapStateDescriptor<UK, UV>,
    ) -> Result<usize, SlotError>
    where
        UK: Data + Hash + Eq,
        UV: Data,
    {
        let name = d.name;
        let (schema, old, plan) = self.restore_plan(name, d)?;
        let operator = self.operator_id.clone();
        let incompatible = |message: String| incompatible(&operator, name, message);
        let evolving = match (plan, &old) {
            (Restore::Evolve, Some(old)) => Some(old),
            _ => None,
        };
        let versions = evolving.map(|old| {
            format!(
                "the savepoint holds version {} of it ({}), this job declares version {} ({})",
                old.version, old.type_name, schema.version, schema.type_name
            )
        });
        let store = self.store.clone().expect("map entries live in a store");
        let mut table =
            MapEntries::<K, UK, UV>::new(&store, &self.operator_id, name, self.range, d.ttl);
        // A whole map as the savepoint wrote it.
        let read_map = |input: &mut &[u8]| -> Result<FastMap<UK, UV>, SlotError> {
            match evolving {
                Some(old) => d.read_old(old, input).map_err(|e| {
                    incompatible(format!("{}; {e}", versions.as_deref().unwrap_or_default()))
                }),
                None => {
                    let (map, rest) = postcard::take_from_bytes(input).map_err(|e| {
                        incompatible(format!(
                            "cannot decode state: {e} (its type, {}, cannot read what the \
                             savepoint holds)",
                            schema.type_name
                        ))
                    })?;
                    *input = rest;
                    Ok(map)
                }
            }
        };
        let failed = std::cell::RefCell::new(None);
        let keep = |e: SlotError| {
            let message = e.to_string();
            *failed.borrow_mut() = Some(e);
            Error::State(message)
        };
        let mut restore = || -> Result<()> {
            if let Some(old) = evolving {
                table.evolve(old, &mut |user_key, value| {
                    let user_key = user_key.deserialize().map_err(|e| {
                        keep(incompatible(format!(
                            "{}; an old map key cannot be read as the new type: {e}",
                            versions.as_deref().unwrap_or_default()
                        )))
                    })?;
                    let value = evolution::convert(value, old.version, d.version, d.migrate)
                        .map_err(|e| {
                            keep(incompatible(format!(
                                "{}; {e}",
                                versions.as_deref().unwrap_or_default()
                            )))
                        })?;
                    Ok((user_key, value))
                })?;
            }
            table.convert_whole_maps(&self.operator_id, name, &mut |input| {
                read_map(input).map_err(keep)
            })?;
            Ok(())
        };
        if let Err(e) = restore() {
            return Err(failed
                .into_inner()
                .unwrap_or_else(|| incompatible(e.to_string())));
        }
        let (restored, pending): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(n, _, _)| n == name);
        self.pending = pending;
        for (_, key_group, bytes) in restored {
            read_old_group(&bytes, &read_map, &mut |key: K, map| {
                table.put_map(key_group, &key, map.value, map.touched)
            })?;
        }
        self.slots.push(Slot {
            name,
            type_name: std::any::type_name::<FastMap<UK, UV>>(),
            schema,
            table: Box::new(table),
            ttl: d.ttl,
        });
        Ok(self.slots.len() - 1)
    }

    /// The schemas of the declared states and of those restored but not declared since, for a
    /// checkpoint.
    pub(crate) fn schemas(&self) -> Vec<StateSchema> {
        let mut schemas: Vec<StateSchema> = self.slots.iter().map(|s| s.schema.clone()).collect();
        for (name, schema) in &self.restored {
            if !self.slots.iter().any(|s| s.name == name) {
                schemas.push(schema.clone());
            }
        }
        schemas
    }

    /// Takes the schemas a restored checkpoint recorded (before its key groups are restored).
    pub(crate) fn restore_schemas(&mut self, schemas: &[StateSchema]) {
        self.restored = evolution::by_name(schemas);
    }

    fn access<'a, X: Data>(
        &'a mut self,
        name: &'static str,
        ttl: Option<StateTtl>,
        declared: &dyn Declared<X>,
        key_group: KeyGroup,
        key: &'a K,
    ) -> Access<'a, K, X> {
        let now = if ttl.is_some() { self.clock.now() } else { 0 };
        Access {
            table: self.table(name, ttl, declared),
            key_group,
            key,
            now,
            ttl,
        }
    }

    /// The value state `descriptor` of `key`.
    pub fn value<'a, V: Data>(
        &'a mut self,
        d: &ValueStateDescriptor<V>,
        key_group: KeyGroup,
        key: &'a K,
    ) -> ValueState<'a, K, V> {
        ValueState(self.access(d.name, d.ttl, d, key_group, key))
    }

    /// The list state `descriptor` of `key`.
    pub fn list<'a, V: Data>(
        &'a mut self,
        d: &ListStateDescriptor<V>,
        key_group: KeyGroup,
        key: &'a K,
    ) -> ListState<'a, K, V> {
        ListState(self.access(d.name, d.ttl, d, key_group, key))
    }

    /// The map state `descriptor` of `key`.
    pub fn map<'a, UK, UV>(
        &'a mut self,
        d: &MapStateDescriptor<UK, UV>,
        key_group: KeyGroup,
        key: &'a K,
    ) -> MapState<'a, K, UK, UV>
    where
        UK: Data + Hash + Eq,
        UV: Data,
    {
        if self.store.is_some() {
            let now = self.clock.now();
            return MapState(MapAccess::Entries {
                table: self.map_entries(d),
                key_group,
                key,
                now,
            });
        }
        MapState(MapAccess::Heap(
            self.access(d.name, d.ttl, d, key_group, key),
        ))
    }

    /// The reducing state `descriptor` of `key`.
    pub fn reducing<'a, V: Data>(
        &'a mut self,
        d: &ReducingStateDescriptor<V>,
        key_group: KeyGroup,
        key: &'a K,
    ) -> ReducingState<'a, K, V> {
        ReducingState {
            access: self.access(d.name, d.ttl, d, key_group, key),
            reduce: d.reduce,
        }
    }

    /// The aggregating state `descriptor` of `key`.
    pub fn aggregating<'a, In, A: AggregateFunction<In>>(
        &'a mut self,
        d: &'a AggregatingStateDescriptor<In, A>,
        key_group: KeyGroup,
        key: &'a K,
    ) -> AggregatingState<'a, K, In, A> {
        AggregatingState {
            access: self.access(d.name, d.ttl, d, key_group, key),
            aggregate: &d.aggregate,
            _in: std::marker::PhantomData,
        }
    }

    /// Removes expired entries (at most once a second); returns how many. On the heap every
    /// entry is looked at; in a store (RocksDB) one slice of the key groups per sweep (an
    /// eighth: a full pass takes 8 sweeps), so a sweep never reads or rewrites the whole
    /// state. Expired entries read as absent until they are swept either way.
    pub fn sweep_expired(&mut self) -> usize {
        let now = self.clock.now();
        if now - self.last_sweep < SWEEP_INTERVAL_MS {
            return 0;
        }
        self.last_sweep = now;
        let groups = if self.store.is_some() {
            let len = (self.range.end - self.range.start) as usize + 1;
            let slice = len.div_ceil(SWEEP_SLICES) as KeyGroup;
            let start = self.sweep_next.clamp(self.range.start, self.range.end);
            let end = start.saturating_add(slice - 1).min(self.range.end);
            self.sweep_next = if end >= self.range.end {
                self.range.start
            } else {
                end + 1
            };
            KeyGroupRange { start, end }
        } else {
            self.range
        };
        self.slots
            .iter_mut()
            .filter_map(|slot| {
                slot.ttl
                    .map(|ttl| slot.table.expire(now, ttl.ttl.as_millis() as i64, groups))
            })
            .map(|removed| removed.unwrap_or(0))
            .sum()
    }

    /// The state of `key_group`, for a checkpoint.
    pub(crate) fn snapshot_group(&self, key_group: KeyGroup) -> Result<StateGroupSnapshot> {
        let mut states = Vec::new();
        for slot in &self.slots {
            if let Some(bytes) = slot.table.snapshot_group(key_group)? {
                states.push((slot.name.to_string(), bytes));
            }
        }
        for (name, kg, bytes) in &self.pending {
            if *kg == key_group {
                states.push((name.clone(), bytes.clone()));
            }
        }
        Ok(states)
    }

    /// Restores the state of `key_group` from a checkpoint.
    pub(crate) fn restore_group(
        &mut self,
        key_group: KeyGroup,
        states: StateGroupSnapshot,
    ) -> Result<()> {
        for (name, bytes) in states {
            match self.slots.iter_mut().find(|s| s.name == name) {
                Some(slot) => slot.table.restore_group(key_group, &bytes)?,
                None => self.pending.push((name, key_group, bytes)),
            }
        }
        Ok(())
    }

    /// Removes every declared state of `key` (a window's state when the window is purged).
    /// States restored but not declared since keep theirs until declared.
    pub(crate) fn clear_key(&mut self, key_group: KeyGroup, key: &K) -> Result<()> {
        for slot in &mut self.slots {
            slot.table.remove(key_group, key)?;
        }
        Ok(())
    }

    /// Whether any state was declared in this run.
    pub(crate) fn has_states(&self) -> bool {
        !self.slots.is_empty()
    }

    /// Number of entries and bytes of table slots over every declared state.
    pub fn size(&self) -> (usize, usize) {
        self.slots
            .iter()
            .map(|slot| slot.table.entries())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    }
}

/// Whether a value last written (or read, by the TTL's update kind) at `touched` has expired
/// at `now`.
fn expired(ttl: Option<StateTtl>, now: Timestamp, touched: Timestamp) -> bool {
    ttl.is_some_and(|ttl| now - touched >= ttl.ttl.as_millis() as i64)
}

/// Read-modify-write access to one entry, with time-to-live applied.
struct Access<'a, K, X> {
    table: Result<&'a mut StoredTable<K, X>, SlotError>,
    key_group: KeyGroup,
    key: &'a K,
    now: Timestamp,
    ttl: Option<StateTtl>,
}

impl<K: Data + Hash + Eq, X: Data> Access<'_, K, X> {
    fn table(&mut self) -> Result<&mut StoredTable<K, X>> {
        self.table.as_deref_mut().map_err(|e| e.to_error())
    }

    /// The live value, if any: an expired one is removed; a read refreshes it if the TTL says so.
    fn read(&mut self) -> Result<Option<X>> {
        let (key_group, now, ttl, key) = (self.key_group, self.now, self.ttl, self.key);
        let table = self.table()?;
        let Some(mut entry) = table.get(key_group, key, &())? else {
            return Ok(None);
        };
        if expired(ttl, now, entry.touched) {
            table.remove(key_group, key, &())?;
            return Ok(None);
        }
        if ttl.is_some_and(|ttl| ttl.update == TtlUpdate::OnReadAndWrite) {
            entry.touched = now;
            table.put(key_group, key.clone(), (), entry.clone())?;
        }
        Ok(Some(entry.value))
    }

    fn write(&mut self, value: X) -> Result<()> {
        let (key_group, now) = (self.key_group, self.now);
        let key = self.key.clone();
        self.table()?.put(
            key_group,
            key,
            (),
            Timed {
                value,
                touched: now,
            },
        )
    }

    /// Calls `look` with the live value, if any, without copying it on the heap; like
    /// [`read`](Self::read), an expired value is removed and a read refreshes it if the TTL
    /// says so.
    fn peek<R>(&mut self, look: impl FnOnce(&X) -> R) -> Result<Option<R>> {
        let (key_group, now, ttl, key) = (self.key_group, self.now, self.ttl, self.key);
        let table = self.table()?;
        let Some((touched, result)) = table.read_with(key_group, key, &(), |entry| {
            (entry.touched, look(&entry.value))
        })?
        else {
            return Ok(None);
        };
        if expired(ttl, now, touched) {
            table.remove(key_group, key, &())?;
            return Ok(None);
        }
        if ttl.is_some_and(|ttl| ttl.update == TtlUpdate::OnReadAndWrite) {
            table.update(
                key_group,
                key,
                &(),
                || unreachable!("read above"),
                |entry| {
                    entry.touched = now;
                    Ok(())
                },
            )?;
        }
        Ok(Some(result))
    }

    /// Changes the value in place (creating it with `create` if absent or expired) and marks
    /// it written. On the heap the value is changed where it lies (appending to a list is not a
    /// copy of the list); in a store it is decoded and encoded once.
    fn modify<R>(
        &mut self,
        create: impl FnOnce() -> X,
        change: impl FnOnce(&mut X) -> R,
    ) -> Result<R> {
        let (key_group, now, key, ttl) = (self.key_group, self.now, self.key, self.ttl);
        let create = std::cell::Cell::new(Some(create));
        let created = std::cell::Cell::new(false);
        let fresh = || create.take().expect("a value is created once")();
        self.table()?.update(
            key_group,
            key,
            &(),
            || {
                created.set(true);
                Timed {
                    value: fresh(),
                    touched: now,
                }
            },
            |entry| {
                if !created.get() && expired(ttl, now, entry.touched) {
                    entry.value = fresh();
                }
                entry.touched = now;
                Ok(change(&mut entry.value))
            },
        )
    }

    /// [`modify`](Self::modify) where `change` may decline (`None`) having left the value as it
    /// was: then nothing is written (a value `create` made is not kept, a TTL after write is not
    /// refreshed; a read refreshes it if the TTL says so, as [`peek`](Self::peek)).
    fn modify_if<R>(
        &mut self,
        create: impl FnOnce() -> X,
        change: impl FnOnce(&mut X) -> Option<R>,
    ) -> Result<Option<R>> {
        let (key_group, now, key, ttl) = (self.key_group, self.now, self.key, self.ttl);
        self.table()?
            .update_if(key_group, key, &(), |entry| match entry {
                Some(entry) if !expired(ttl, now, entry.touched) => {
                    Ok(match change(&mut entry.value) {
                        Some(result) => {
                            entry.touched = now;
                            (Some(result), Outcome::Changed)
                        }
                        None if ttl.is_some_and(|ttl| ttl.update == TtlUpdate::OnReadAndWrite) => {
                            entry.touched = now;
                            (None, Outcome::Changed)
                        }
                        None => (None, Outcome::Unchanged),
                    })
                }
                // Absent, or expired (as absent; if declined, left for a read to drop).
                _ => {
                    let mut value = create();
                    Ok(match change(&mut value) {
                        Some(result) => (
                            Some(result),
                            Outcome::Insert(Timed {
                                value,
                                touched: now,
                            }),
                        ),
                        None => (None, Outcome::Unchanged),
                    })
                }
            })
    }

    fn clear(&mut self) -> Result<()> {
        let (key_group, key) = (self.key_group, self.key);
        self.table()?.remove(key_group, key, &())
    }
}

/// One value for the current key.
pub struct ValueState<'a, K, V>(Access<'a, K, V>);

impl<K: Data + Hash + Eq, V: Data> ValueState<'_, K, V> {
    /// The value, if set (and not expired).
    pub fn get(&mut self) -> Result<Option<V>> {
        self.0.read()
    }

    /// Sets the value.
    pub fn set(&mut self, value: V) -> Result<()> {
        self.0.write(value)
    }

    /// Removes the value.
    pub fn clear(&mut self) -> Result<()> {
        self.0.clear()
    }

    /// Changes the value in place, creating it with `create` if absent: on the heap without a
    /// copy, in a store decoded and encoded once.
    ///
    /// ```
    /// # use riffle::state::ValueStateDescriptor;
    /// # fn count(state: &mut riffle::state::ValueState<'_, String, u64>) -> riffle::Result<u64> {
    /// state.modify(|| 0, |n| {
    ///     *n += 1;
    ///     *n
    /// })
    /// # }
    /// ```
    pub fn modify<R>(
        &mut self,
        create: impl FnOnce() -> V,
        change: impl FnOnce(&mut V) -> R,
    ) -> Result<R> {
        self.0.modify(create, change)
    }

    /// What `look` says of the value, if set (and not expired), without copying it on the heap.
    pub fn peek<R>(&mut self, look: impl FnOnce(&V) -> R) -> Result<Option<R>> {
        self.0.peek(look)
    }

    /// Changes the value in place if `change` says so: `Some` keeps what it did, `None` says it
    /// left the value as it was, and then nothing is written (a value `create` made is not
    /// kept; a TTL after write is not refreshed). One lookup on the heap; in a store, one read
    /// and a write only if the value changed. For a change most records decline (a Top-N's
    /// rows that do not get in): no [`peek`](Self::peek) before it.
    ///
    /// ```
    /// # fn keep_max(state: &mut riffle::state::ValueState<'_, String, i64>, x: i64) -> riffle::Result<()> {
    /// // `Some(())` only where the value changed: a smaller `x` writes nothing.
    /// state.modify_if(|| i64::MIN, |max| (x > *max).then(|| *max = x))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn modify_if<R>(
        &mut self,
        create: impl FnOnce() -> V,
        change: impl FnOnce(&mut V) -> Option<R>,
    ) -> Result<Option<R>> {
        self.0.modify_if(create, change)
    }
}

/// The values of a list state. Encoded as one byte string, the values' encodings one after the
/// other, so that a store appends a value to the encoded list without decoding the list
/// ([`ListState::add`]).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ListValue<V>(Vec<V>);

impl<V: Serialize> Serialize for ListValue<V> {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        let mut bytes = Vec::new();
        for value in &self.0 {
            encode_into(value, &mut bytes).map_err(serde::ser::Error::custom)?;
        }
        serializer.serialize_bytes(&bytes)
    }
}

impl<'de, V: serde::de::DeserializeOwned> Deserialize<'de> for ListValue<V> {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        struct Values<V>(std::marker::PhantomData<V>);
        impl<V: serde::de::DeserializeOwned> serde::de::Visitor<'_> for Values<V> {
            type Value = ListValue<V>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("the encoded values of a list state")
            }
            fn visit_bytes<E: serde::de::Error>(
                self,
                mut bytes: &[u8],
            ) -> std::result::Result<ListValue<V>, E> {
                let mut values = Vec::new();
                while !bytes.is_empty() {
                    let (value, rest) = postcard::take_from_bytes(bytes).map_err(E::custom)?;
                    values.push(value);
                    bytes = rest;
                }
                Ok(ListValue(values))
            }
        }
        deserializer.deserialize_bytes(Values(std::marker::PhantomData))
    }
}

/// The parts of an encoded `Timed<ListValue<_>>`: the length of its items' length prefix, the
/// items' length in bytes (they follow the prefix), and when the list was touched (after them).
fn list_parts(list: &[u8]) -> Result<(usize, usize, Timestamp)> {
    let (len, rest) = postcard::take_from_bytes::<u64>(list)
        .map_err(|e| Error::user(format!("cannot decode state: {e}")))?;
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    if len > rest.len() {
        return Err(Error::user("cannot decode state: a list is cut short"));
    }
    let touched: Timestamp = decode(&rest[len..])?;
    Ok((list.len() - rest.len(), len, touched))
}

/// Appends the encoding of a value, `item`, to an encoded `Timed<ListValue<_>>` where it lies
/// (`list`, empty when `present` is false: no list yet), touched at `now`; an expired list
/// (`ttl` ms) starts again. The items already there are neither decoded nor copied. Leaves
/// `list` as it was when it cannot be decoded.
fn append_in_place(
    list: &mut Vec<u8>,
    present: bool,
    item: &[u8],
    now: Timestamp,
    ttl: Option<i64>,
) -> Result<()> {
    if present {
        let (prefix, len, touched) = list_parts(list)?;
        if ttl.is_none_or(|ttl| now - touched < ttl) {
            list.truncate(prefix + len);
            list.extend_from_slice(item);
            encode_into(&now, list)?;
            let mut length = Vec::with_capacity(10);
            encode_into(&((len + item.len()) as u64), &mut length)?;
            if length.len() == prefix {
                list[..prefix].copy_from_slice(&length);
            } else {
                // The length's encoding grew a byte (rare: its size is logarithmic).
                list.splice(..prefix, length);
            }
            return Ok(());
        }
    }
    list.clear();
    encode_into(&(item.len() as u64), list)?;
    list.extend_from_slice(item);
    encode_into(&now, list)
}

/// A list of values for the current key.
pub struct ListState<'a, K, V>(Access<'a, K, ListValue<V>>);

impl<K: Data + Hash + Eq, V: Data> ListState<'_, K, V> {
    /// The values, in the order they were added.
    pub fn get(&mut self) -> Result<Vec<V>> {
        Ok(self.0.read()?.map(|list| list.0).unwrap_or_default())
    }

    /// Appends a value: on the heap a push onto the list; in a store (RocksDB) the value's
    /// encoding is appended to the list's where it lies (in the store's cache), neither decoded
    /// nor copied: a key's n-th value costs one value, not n.
    pub fn add(&mut self, value: V) -> Result<()> {
        let access = &mut self.0;
        let (key_group, now, key) = (access.key_group, access.now, access.key);
        let ttl = access.ttl.map(|ttl| ttl.ttl.as_millis() as i64);
        match access.table()? {
            StateTable::Heap(_) => {
                access.modify(|| ListValue(Vec::new()), |list| list.0.push(value))
            }
            StateTable::Kv(table) => {
                let item = encode(&value)?;
                table.change_encoded_in_place(key_group, key, &(), &mut |list, present| {
                    append_in_place(list, present, &item, now, ttl)
                })
            }
        }
    }

    /// What `look` says of the values, if there are any (and they did not expire), without
    /// copying them on the heap (a store decodes them).
    ///
    /// ```
    /// # fn total(state: &mut riffle::state::ListState<'_, String, u64>) -> riffle::Result<u64> {
    /// Ok(state.peek(|values| values.iter().sum())?.unwrap_or(0))
    /// # }
    /// ```
    pub fn peek<R>(&mut self, look: impl FnOnce(&[V]) -> R) -> Result<Option<R>> {
        self.0.peek(|list| look(&list.0))
    }

    /// What `look` says of the first value (the oldest added), if there is one (and the list
    /// did not expire), without reading the others: in a store (RocksDB) only the first value's
    /// bytes are decoded, where they lie.
    ///
    /// ```
    /// # fn oldest(state: &mut riffle::state::ListState<'_, String, u64>) -> riffle::Result<Option<u64>> {
    /// state.peek_first(|first| *first)
    /// # }
    /// ```
    pub fn peek_first<R>(&mut self, look: impl FnOnce(&V) -> R) -> Result<Option<R>> {
        let access = &mut self.0;
        let (key_group, now, key) = (access.key_group, access.now, access.key);
        let ttl = access.ttl;
        // A read that refreshes the list's time writes it: the whole list, as `peek` does.
        let refreshes = ttl.is_some_and(|ttl| ttl.update == TtlUpdate::OnReadAndWrite);
        match access.table()? {
            StateTable::Kv(table) if !refreshes => {
                let mut look = Some(look);
                let mut result = None;
                table.read_encoded_in_place(key_group, key, &(), &mut |list| {
                    let Some(list) = list else { return Ok(()) };
                    let (prefix, len, touched) = list_parts(list)?;
                    if expired(ttl, now, touched) {
                        return Ok(());
                    }
                    if len > 0 {
                        let items = &list[prefix..prefix + len];
                        let (first, _) = postcard::take_from_bytes::<V>(items)
                            .map_err(|e| Error::user(format!("cannot decode state: {e}")))?;
                        result = look.take().map(|look| look(&first));
                    }
                    Ok(())
                })?;
                Ok(result)
            }
            _ => Ok(self.0.peek(|list| list.0.first().map(look))?.flatten()),
        }
    }

    /// Changes the values in place (an empty list if there are none): on the heap without a
    /// copy, in a store decoded and encoded once.
    ///
    /// ```
    /// # fn keep_small(state: &mut riffle::state::ListState<'_, String, u64>) -> riffle::Result<()> {
    /// state.modify(|values| values.retain(|value| *value < 100))
    /// # }
    /// ```
    pub fn modify<R>(&mut self, change: impl FnOnce(&mut Vec<V>) -> R) -> Result<R> {
        self.0
            .modify(|| ListValue(Vec::new()), |list| change(&mut list.0))
    }

    /// Replaces the values.
    pub fn update(&mut self, values: Vec<V>) -> Result<()> {
        self.0.write(ListValue(values))
    }

    /// Removes every value.
    pub fn clear(&mut self) -> Result<()> {
        self.0.clear()
    }
}

/// A map for the current key.
///
/// On the heap the map is one hash map per key, changed in place. In a store (RocksDB) each
/// entry is a store entry of its own, as in Flink: [`get`](Self::get), [`put`](Self::put),
/// [`remove`](Self::remove) and [`contains`](Self::contains) read or write that entry alone,
/// however large the map; [`entries`](Self::entries) and [`len`](Self::len) scan the key's
/// entries. With a time-to-live the map expires whole, on either backend.
///
/// ```
/// # use riffle::state::MapStateDescriptor;
/// static PAGES: MapStateDescriptor<String, u64> = MapStateDescriptor::new("pages");
/// # fn visit(state: &mut riffle::state::MapState<'_, u64, String, u64>) -> riffle::Result<()> {
/// let seen = state.get(&"/home".to_string())?.unwrap_or(0);
/// state.put("/home".to_string(), seen + 1)?;
/// # Ok(())
/// # }
/// ```
pub struct MapState<'a, K, UK, UV>(MapAccess<'a, K, UK, UV>);

/// Where a map state's entries are.
enum MapAccess<'a, K, UK, UV> {
    /// One hash map per key.
    Heap(Access<'a, K, FastMap<UK, UV>>),
    /// One store entry per map entry.
    Entries {
        table: Result<&'a mut MapEntries<K, UK, UV>, SlotError>,
        key_group: KeyGroup,
        key: &'a K,
        now: Timestamp,
    },
}

impl<K: Data + Hash + Eq, UK: Data + Hash + Eq, UV: Data> MapState<'_, K, UK, UV> {
    /// The value of `user_key`.
    pub fn get(&mut self, user_key: &UK) -> Result<Option<UV>> {
        match &mut self.0 {
            MapAccess::Heap(access) => Ok(access.peek(|map| map.get(user_key).cloned())?.flatten()),
            MapAccess::Entries {
                table,
                key_group,
                key,
                now,
            } => entries(table)?.get(*key_group, key, user_key, *now),
        }
    }

    /// Sets the value of `user_key`.
    pub fn put(&mut self, user_key: UK, value: UV) -> Result<()> {
        match &mut self.0 {
            MapAccess::Heap(access) => access.modify(FastMap::default, |map| {
                map.insert(user_key, value);
            }),
            MapAccess::Entries {
                table,
                key_group,
                key,
                now,
            } => entries(table)?.put(*key_group, key, &user_key, &value, *now),
        }
    }

    /// Changes the value of `user_key` in place, creating it with `create` if absent, and
    /// marks the map written: on the heap without a copy; in a store the one entry is read,
    /// and written back only if it changed.
    ///
    /// ```
    /// # fn see(state: &mut riffle::state::MapState<'_, u64, String, u64>) -> riffle::Result<bool> {
    /// // Whether this is the first visit of the page.
    /// state.modify("/home".to_string(), || 0, |visits| {
    ///     *visits += 1;
    ///     *visits == 1
    /// })
    /// # }
    /// ```
    pub fn modify<R>(
        &mut self,
        user_key: UK,
        create: impl FnOnce() -> UV,
        change: impl FnOnce(&mut UV) -> R,
    ) -> Result<R> {
        match &mut self.0 {
            MapAccess::Heap(access) => access.modify(FastMap::default, |map| {
                change(map.entry(user_key).or_insert_with(create))
            }),
            MapAccess::Entries {
                table,
                key_group,
                key,
                now,
            } => entries(table)?.modify(*key_group, key, &user_key, *now, create, change),
        }
    }

    /// Removes `user_key`; returns its value.
    pub fn remove(&mut self, user_key: &UK) -> Result<Option<UV>> {
        let access = match &mut self.0 {
            MapAccess::Heap(access) => access,
            MapAccess::Entries {
                table,
                key_group,
                key,
                now,
            } => return entries(table)?.remove(*key_group, key, user_key, *now),
        };
        if access.peek(|map| map.contains_key(user_key))? != Some(true) {
            return Ok(None);
        }
        let (removed, empty) = access.modify(FastMap::default, |map| {
            (map.remove(user_key), map.is_empty())
        })?;
        if empty {
            access.clear()?;
        }
        Ok(removed)
    }

    /// Whether `user_key` has a value.
    pub fn contains(&mut self, user_key: &UK) -> Result<bool> {
        match &mut self.0 {
            MapAccess::Heap(access) => {
                Ok(access.peek(|map| map.contains_key(user_key))? == Some(true))
            }
            MapAccess::Entries { .. } => Ok(self.get(user_key)?.is_some()),
        }
    }

    /// Every entry (in no particular order).
    pub fn entries(&mut self) -> Result<Vec<(UK, UV)>> {
        match &mut self.0 {
            MapAccess::Heap(access) => Ok(access
                .read()?
                .map(|map| map.into_iter().collect())
                .unwrap_or_default()),
            MapAccess::Entries {
                table,
                key_group,
                key,
                now,
            } => entries(table)?.entries(*key_group, key, *now),
        }
    }

    /// Number of entries.
    pub fn len(&mut self) -> Result<usize> {
        match &mut self.0 {
            MapAccess::Heap(access) => Ok(access.peek(|map| map.len())?.unwrap_or(0)),
            MapAccess::Entries {
                table,
                key_group,
                key,
                now,
            } => entries(table)?.len(*key_group, key, *now),
        }
    }

    /// Whether the map is empty.
    pub fn is_empty(&mut self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Removes every entry.
    pub fn clear(&mut self) -> Result<()> {
        match &mut self.0 {
            MapAccess::Heap(access) => access.clear(),
            MapAccess::Entries {
                table,
                key_group,
                key,
                ..
            } => entries(table)?.clear(*key_group, key),
        }
    }
}

/// The entries table of a map state, or why it cannot be reached.
fn entries<'t, K, UK, UV>(
    table: &'t mut Result<&mut MapEntries<K, UK, UV>, SlotError>,
) -> Result<&'t mut MapEntries<K, UK, UV>> {
    table.as_deref_mut().map_err(|e| e.to_error())
}

/// A value for the current key that each new value is reduced into.
pub struct ReducingState<'a, K, V> {
    access: Access<'a, K, V>,
    reduce: fn(V, V) -> V,
}

impl<K: Data + Hash + Eq, V: Data> ReducingState<'_, K, V> {
    /// The reduced value, if any.
    pub fn get(&mut self) -> Result<Option<V>> {
        self.access.read()
    }

    /// Reduces `value` into the state.
    pub fn add(&mut self, value: V) -> Result<()> {
        let next = match self.access.read()? {
            Some(current) => (self.reduce)(current, value),
            None => value,
        };
        self.access.write(next)
    }

    /// Removes the value.
    pub fn clear(&mut self) -> Result<()> {
        self.access.clear()
    }
}

/// An accumulator for the current key, fed record by record.
pub struct AggregatingState<'a, K, In, A: AggregateFunction<In>> {
    access: Access<'a, K, A::Acc>,
    aggregate: &'a A,
    _in: std::marker::PhantomData<fn(&In)>,
}

impl<K: Data + Hash + Eq, In, A: AggregateFunction<In>> AggregatingState<'_, K, In, A> {
    /// The aggregate so far, if anything was added.
    pub fn get(&mut self) -> Result<Option<A::Out>> {
        let aggregate = self.aggregate;
        self.access.peek(|acc| aggregate.result(acc))
    }

    /// Adds a record.
    pub fn add(&mut self, value: &In) -> Result<()> {
        let aggregate = self.aggregate;
        self.access
            .modify(|| aggregate.create(), |acc| aggregate.add(acc, value))
    }

    /// Adds a record and gives the aggregate before it (`None`: nothing was added yet) and
    /// after it, in one access of the state: what an updating aggregate emits as `-U` and `+U`
    /// (`get`, `add` and `get` again look the key up three times).
    ///
    /// ```
    /// # use riffle::aggregate::Count;
    /// # fn count(
    /// #     state: &mut riffle::state::AggregatingState<'_, String, u64, Count>,
    /// # ) -> riffle::Result<()> {
    /// let (before, after) = state.add_and_get(&7)?;
    /// assert_eq!(after, before.unwrap_or(0) + 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn add_and_get(&mut self, value: &In) -> Result<(Option<A::Out>, A::Out)> {
        let aggregate = self.aggregate;
        let created = std::cell::Cell::new(false);
        self.access.modify(
            || {
                created.set(true);
                aggregate.create()
            },
            |acc| {
                let before = (!created.get()).then(|| aggregate.result(acc));
                aggregate.add(acc, value);
                (before, aggregate.result(acc))
            },
        )
    }

    /// Removes the accumulator.
    pub fn clear(&mut self) -> Result<()> {
        self.access.clear()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::{Avg, Count};
    use crate::state::state_id;
    use crate::time::ManualClock;
    use std::time::Duration;

    /// The append of an item by copying the list (how lists in a store were appended before
    /// `append_in_place`): the reference it is checked against.
    fn append_encoded(
        old: Option<&[u8]>,
        item: &[u8],
        now: Timestamp,
        ttl: Option<i64>,
        new: &mut Vec<u8>,
    ) -> Result<()> {
        let mut items: &[u8] = &[];
        if let Some(old) = old {
            let (len, rest) = postcard::take_from_bytes::<u64>(old)
                .map_err(|e| Error::user(format!("cannot decode state: {e}")))?;
            if len as usize > rest.len() {
                return Err(Error::user("cannot decode state: a list is cut short"));
            }
            let (values, touched) = rest.split_at(len as usize);
            let touched: Timestamp = decode(touched)?;
            if ttl.is_none_or(|ttl| now - touched < ttl) {
                items = values;
            }
        }
        encode_into(&((items.len() + item.len()) as u64), new)?;
        new.extend_from_slice(items);
        new.extend_from_slice(item);
        encode_into(&now, new)
    }

    proptest::proptest! {
        /// Appending in place gives the bytes copying the list gave, for any items, times and
        /// time-to-live (expired lists start again); a list cut short is an error and is left
        /// as it was.
        #[test]
        fn a_list_appended_in_place_is_the_list_appended_by_copy(
            steps in proptest::collection::vec(
                (proptest::collection::vec(proptest::num::u8::ANY, 0..300), 0i64..50),
                1..40,
            ),
            ttl in proptest::option::of(1i64..30),
        ) {
            let (mut copied, mut in_place): (Option<Vec<u8>>, Vec<u8>) = (None, Vec::new());
            let mut now = 0;
            for (item, step) in steps {
                now += step;
                let mut new = Vec::new();
                append_encoded(copied.as_deref(), &item, now, ttl, &mut new).unwrap();
                let present = copied.is_some();
                copied = Some(new);
                append_in_place(&mut in_place, present, &item, now, ttl).unwrap();
                proptest::prop_assert_eq!(copied.as_ref().unwrap(), &in_place);
            }
            let mut cut = in_place.clone();
            cut.truncate(cut.len().saturating_sub(2).max(1));
            let before = cut.clone();
            if append_in_place(&mut cut, true, b"x", now, ttl).is_err() {
                proptest::prop_assert_eq!(cut, before);
            }
        }
    }

    const RANGE: KeyGroupRange = KeyGroupRange { start: 0, end: 3 };

    static COUNT: ValueStateDescriptor<u64> = ValueStateDescriptor::new("count");
    static SEEN: ListStateDescriptor<String> = ListStateDescriptor::new("seen");
    static PAGES: MapStateDescriptor<String, u32> = MapStateDescriptor::new("pages");
    static LONGEST: ReducingStateDescriptor<String> =
        ReducingStateDescriptor::new("longest", |a, b| if b.len() > a.len() { b } else { a });
    static SESSION: ValueStateDescriptor<u64> = ValueStateDescriptor::new("session")
        .with_ttl(StateTtl::after_write(Duration::from_secs(10)));
    static RECENT: ValueStateDescriptor<u64> = ValueStateDescriptor::new("recent")
        .with_ttl(StateTtl::after_access(Duration::from_secs(10)));

    fn state() -> (KeyedState<u64>, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(1_000_000));
        (KeyedState::new(RANGE, clock.clone()), clock)
    }

    /// The same state twice: on the heap, and in a key-value store (in memory), each with its
    /// clock.
    fn on_the_heap_and_in_a_store() -> [(KeyedState<u64>, Arc<ManualClock>); 2] {
        let clock = Arc::new(ManualClock::new(1_000_000));
        let store = Arc::new(crate::testing::MemoryKvStore::default());
        let in_store = (
            KeyedState::in_store(RANGE, clock.clone(), Some(store), "op"),
            clock,
        );
        [state(), in_store]
    }

    #[test]
    fn each_kind_of_state_is_scoped_to_its_key() -> Result<()> {
        let (mut s, _) = state();
        s.value(&COUNT, 1, &10).set(5)?;
        assert_eq!(s.value(&COUNT, 1, &10).get()?, Some(5));
        assert_eq!(s.value(&COUNT, 2, &11).get()?, None);

        s.list(&SEEN, 1, &10).add("a".into())?;
        s.list(&SEEN, 1, &10).add("b".into())?;
        assert_eq!(s.list(&SEEN, 1, &10).get()?, vec!["a", "b"]);

        s.map(&PAGES, 1, &10).put("/x".into(), 1)?;
        s.map(&PAGES, 1, &10).put("/y".into(), 2)?;
        assert_eq!(s.map(&PAGES, 1, &10).remove(&"/x".to_string())?, Some(1));
        assert_eq!(
            s.map(&PAGES, 1, &10).entries()?,
            vec![("/y".to_string(), 2)]
        );
        assert!(s.map(&PAGES, 2, &11).is_empty()?);

        s.reducing(&LONGEST, 1, &10).add("ab".into())?;
        s.reducing(&LONGEST, 1, &10).add("abcd".into())?;
        s.reducing(&LONGEST, 1, &10).add("abc".into())?;
        assert_eq!(
            s.reducing(&LONGEST, 1, &10).get()?,
            Some("abcd".to_string())
        );

        let avg = AggregatingStateDescriptor::new("avg", Avg::of(|v: &u64| *v));
        for v in [2, 4, 9] {
            s.aggregating(&avg, 3, &12).add(&v)?;
        }
        assert_eq!(s.aggregating(&avg, 3, &12).get()?, Some(Some(5.0)));
        let count = AggregatingStateDescriptor::new("count-agg", Count);
        s.aggregating(&count, 3, &12).add(&"x")?;
        assert_eq!(s.aggregating(&count, 3, &12).get()?, Some(1));

        s.value(&COUNT, 1, &10).clear()?;
        assert_eq!(s.value(&COUNT, 1, &10).get()?, None);
        Ok(())
    }

    #[test]
    fn the_first_of_a_list_is_read_alone_and_expires_with_the_list() -> Result<()> {
        static RECENT_LIST: ListStateDescriptor<String> = ListStateDescriptor::new("recent-list")
            .with_ttl(StateTtl::after_write(Duration::from_secs(10)));
        for (mut s, clock) in on_the_heap_and_in_a_store() {
            let first = |s: &mut KeyedState<u64>| {
                s.list(&RECENT_LIST, 1, &10)
                    .peek_first(|first| first.clone())
            };
            assert_eq!(first(&mut s)?, None);
            s.list(&RECENT_LIST, 1, &10).add("a".into())?;
            s.list(&RECENT_LIST, 1, &10).add("bb".into())?;
            assert_eq!(first(&mut s)?, Some("a".to_string()));
            // A write keeps the list (and its first value) alive.
            clock.advance(Duration::from_secs(8));
            s.list(&RECENT_LIST, 1, &10).add("c".into())?;
            clock.advance(Duration::from_secs(8));
            assert_eq!(first(&mut s)?, Some("a".to_string()));
            assert_eq!(s.list(&SEEN, 1, &10).peek_first(|f| f.clone())?, None);
            clock.advance(Duration::from_secs(2));
            assert_eq!(first(&mut s)?, None, "expired with the list");
            s.list(&RECENT_LIST, 1, &10).update(Vec::new())?;
            assert_eq!(first(&mut s)?, None, "empty");
        }
        Ok(())
    }

    #[test]
    fn a_declined_change_writes_nothing_and_refreshes_only_on_access() -> Result<()> {
        // Keeps the larger of the value and `x`: `Some` only where it changed.
        let keep_max = |s: &mut KeyedState<u64>, state: &ValueStateDescriptor<u64>, x: u64| {
            s.value(state, 1, &10)
                .modify_if(|| 0, |max| (x > *max).then(|| std::mem::replace(max, x)))
        };
        for (mut s, clock) in on_the_heap_and_in_a_store() {
            assert_eq!(
                keep_max(&mut s, &COUNT, 0)?,
                None,
                "declined on a new value"
            );
            assert_eq!(s.value(&COUNT, 1, &10).get()?, None, "which is not kept");
            assert_eq!(keep_max(&mut s, &COUNT, 5)?, Some(0));
            assert_eq!(keep_max(&mut s, &COUNT, 3)?, None);
            assert_eq!(keep_max(&mut s, &COUNT, 7)?, Some(5));
            assert_eq!(s.value(&COUNT, 1, &10).get()?, Some(7));

            // After write: a declined change does not keep the value alive.
            assert_eq!(keep_max(&mut s, &SESSION, 4)?, Some(0));
            clock.advance(Duration::from_secs(6));
            assert_eq!(keep_max(&mut s, &SESSION, 2)?, None);
            clock.advance(Duration::from_secs(6));
            assert_eq!(
                s.value(&SESSION, 1, &10).get()?,
                None,
                "12 s after its write"
            );
            // An expired value is as absent: the change starts from a new one.
            assert_eq!(keep_max(&mut s, &SESSION, 2)?, Some(0));
            assert_eq!(s.value(&SESSION, 1, &10).get()?, Some(2));

            // After access: a declined change reads the value, and so refreshes it.
            assert_eq!(keep_max(&mut s, &RECENT, 4)?, Some(0));
            clock.advance(Duration::from_secs(6));
            assert_eq!(keep_max(&mut s, &RECENT, 2)?, None);
            clock.advance(Duration::from_secs(6));
            assert_eq!(
                s.value(&RECENT, 1, &10).get()?,
                Some(4),
                "6 s after its last read"
            );
        }
        Ok(())
    }

    #[test]
    fn ttl_expires_entries_after_write_or_access() -> Result<()> {
        let (mut s, clock) = state();
        s.value(&SESSION, 0, &1).set(1)?;
        s.value(&RECENT, 0, &1).set(1)?;
        clock.advance(Duration::from_secs(8));
        assert_eq!(s.value(&SESSION, 0, &1).get()?, Some(1));
        assert_eq!(
            s.value(&RECENT, 0, &1).get()?,
            Some(1),
            "a read refreshes `recent`"
        );
        clock.advance(Duration::from_secs(3));
        assert_eq!(
            s.value(&SESSION, 0, &1).get()?,
            None,
            "11 s after its write"
        );
        assert_eq!(
            s.value(&RECENT, 0, &1).get()?,
            Some(1),
            "3 s after its last read"
        );
        Ok(())
    }

    #[test]
    fn lists_and_maps_change_in_place_and_restart_after_they_expire() -> Result<()> {
        static RECENT_PAGES: ListStateDescriptor<u32> = ListStateDescriptor::new("recent-pages")
            .with_ttl(StateTtl::after_write(Duration::from_secs(10)));
        static VISITS: MapStateDescriptor<u32, u32> = MapStateDescriptor::new("visits")
            .with_ttl(StateTtl::after_access(Duration::from_secs(10)));
        for (mut s, clock) in on_the_heap_and_in_a_store() {
            for page in 0..1_000 {
                s.list(&RECENT_PAGES, 2, &7).add(page)?;
                s.map(&VISITS, 2, &7).put(page % 10, page)?;
            }
            assert_eq!(s.list(&RECENT_PAGES, 2, &7).get()?.len(), 1_000);
            assert_eq!(s.map(&VISITS, 2, &7).get(&3)?, Some(993));
            clock.advance(Duration::from_secs(9));
            assert!(s.map(&VISITS, 2, &7).contains(&4)?, "a read refreshes");
            clock.advance(Duration::from_secs(2));
            s.list(&RECENT_PAGES, 2, &7).add(5_000)?;
            assert_eq!(
                s.list(&RECENT_PAGES, 2, &7).get()?,
                vec![5_000],
                "an expired list starts again"
            );
            assert_eq!(s.map(&VISITS, 2, &7).len()?, 10, "refreshed 2 s ago");
            assert_eq!(s.map(&VISITS, 2, &7).remove(&4)?, Some(994));
            assert_eq!(s.map(&VISITS, 2, &7).remove(&4)?, None);
            clock.advance(Duration::from_secs(11));
            assert!(s.map(&VISITS, 2, &7).is_empty()?, "expired");
            assert_eq!(s.map(&VISITS, 2, &7).get(&3)?, None);
        }
        Ok(())
    }

    /// How many entries of `store` are under operator `op`'s state id of `name`, in key group
    /// `key_group`.
    fn stored_under(store: &dyn KvStore, name: &str, key_group: KeyGroup) -> usize {
        let mut prefix = key_group.to_be_bytes().to_vec();
        prefix.extend_from_slice(&state_id("op", name).to_be_bytes());
        let mut n = 0;
        store
            .scan(&[prefix], &mut |_, _| {
                n += 1;
                Ok(true)
            })
            .unwrap();
        n
    }

    #[test]
    fn a_map_in_a_store_keeps_each_entry_apart_and_scoped_to_its_key() -> Result<()> {
        let store = Arc::new(crate::testing::MemoryKvStore::default());
        let clock = Arc::new(ManualClock::new(0));
        let mut s = KeyedState::in_store(RANGE, clock.clone(), Some(store.clone()), "op");
        let mut heap = KeyedState::new(RANGE, clock);
        // Keys whose encodings are close (1, 128, 129: one and two bytes) in one key group.
        for state in [&mut s, &mut heap] {
            for key in [1u64, 128, 129] {
                for page in 0..300u32 {
                    state
                        .map(&PAGES, 2, &key)
                        .put(format!("/{page}"), page + key as u32)?;
                }
            }
            assert_eq!(state.map(&PAGES, 2, &128).get(&"/7".into())?, Some(135));
            assert_eq!(state.map(&PAGES, 2, &128).remove(&"/7".into())?, Some(135));
            assert_eq!(state.map(&PAGES, 2, &128).remove(&"/7".into())?, None);
            assert!(!state.map(&PAGES, 2, &128).contains(&"/7".into())?);
            assert!(state.map(&PAGES, 2, &129).contains(&"/7".into())?);
            assert_eq!(state.map(&PAGES, 2, &128).len()?, 299);
            for first in [true, false] {
                let seen = state.map(&PAGES, 2, &129).modify(
                    "/new".into(),
                    || 0,
                    |n| {
                        *n += 1;
                        *n == 1
                    },
                )?;
                assert_eq!(seen, first);
            }
            assert_eq!(state.map(&PAGES, 2, &129).get(&"/new".into())?, Some(2));
            assert_eq!(state.map(&PAGES, 2, &129).remove(&"/new".into())?, Some(2));
            state.map(&PAGES, 2, &1).clear()?;
            assert!(state.map(&PAGES, 2, &1).is_empty()?);
            assert_eq!(state.map(&PAGES, 2, &1).get(&"/3".into())?, None);
            assert_eq!(state.map(&PAGES, 3, &1).len()?, 0, "another key group");
        }
        for key in [1u64, 128, 129] {
            let mut stored = s.map(&PAGES, 2, &key).entries()?;
            let mut held = heap.map(&PAGES, 2, &key).entries()?;
            stored.sort();
            held.sort();
            assert_eq!(stored, held, "key {key}");
        }
        // One store entry per map entry, none of them a whole map.
        assert_eq!(stored_under(&*store, "pages#entries", 2), 299 + 300);
        assert_eq!(stored_under(&*store, "pages", 2), 0);
        s.clear_key(2, &129)?;
        assert_eq!(stored_under(&*store, "pages#entries", 2), 299);
        assert_eq!(s.map(&PAGES, 2, &128).len()?, 299);
        Ok(())
    }

    #[test]
    fn a_map_an_older_version_kept_whole_in_a_store_is_split_into_entries() -> Result<()> {
        let store: Arc<dyn KvStore> = Arc::new(crate::testing::MemoryKvStore::default());
        // As an older Riffle wrote it: one value per key, the whole map and its last write.
        let mut whole: StoredTable<u64, FastMap<String, u32>> =
            StateTable::new(Some(&store), "op", "pages", RANGE);
        let map: FastMap<String, u32> = (0..50).map(|i| (format!("/{i}"), i)).collect();
        whole.put(
            1,
            10,
            (),
            Timed {
                value: map.clone(),
                touched: 5,
            },
        )?;
        whole.put(
            3,
            11,
            (),
            Timed {
                value: map,
                touched: 5,
            },
        )?;
        let schema = StateSchema {
            name: "pages".into(),
            version: 1,
            type_name: Declared::type_name(&PAGES),
            format: Declared::format(&PAGES).map(|f| (*f).clone()),
        };
        let mut s = KeyedState::in_store(
            RANGE,
            Arc::new(ManualClock::new(0)),
            Some(store.clone()),
            "op",
        );
        s.restore_schemas(&[schema]);
        assert_eq!(s.map(&PAGES, 1, &10u64).len()?, 50);
        assert_eq!(s.map(&PAGES, 3, &11).get(&"/49".into())?, Some(49));
        assert_eq!(
            stored_under(&*store, "pages", 1) + stored_under(&*store, "pages", 3),
            0,
            "the whole maps are gone"
        );
        assert_eq!(stored_under(&*store, "pages#entries", 3), 50);
        Ok(())
    }

    #[test]
    fn a_heap_savepoint_of_a_map_restores_into_a_store_and_its_expiry_goes_on() -> Result<()> {
        static VISITS: MapStateDescriptor<u32, u32> = MapStateDescriptor::new("visits")
            .with_ttl(StateTtl::after_write(Duration::from_secs(10)));
        let clock = Arc::new(ManualClock::new(0));
        let mut heap = KeyedState::new(RANGE, clock.clone());
        for page in 0..20 {
            heap.map(&VISITS, 0, &4).put(page, page * 2)?;
        }
        clock.advance(Duration::from_secs(6));
        heap.map(&VISITS, 0, &5).put(1, 1)?;
        let snapshot = heap.snapshot_group(0)?;
        let store = Arc::new(crate::testing::MemoryKvStore::default());
        let mut s = KeyedState::in_store(RANGE, clock.clone(), Some(store), "op");
        s.restore_schemas(&heap.schemas());
        s.restore_group(0, snapshot)?;
        assert_eq!(s.map(&VISITS, 0, &4).get(&7)?, Some(14));
        assert_eq!(s.map(&VISITS, 0, &4).len()?, 20);
        clock.advance(Duration::from_secs(5));
        assert!(s.map(&VISITS, 0, &4).is_empty()?, "written 11 s ago");
        assert_eq!(s.map(&VISITS, 0, &5).len()?, 1, "written 5 s ago");
        clock.advance(Duration::from_secs(6));
        assert_eq!(s.sweep_expired(), 1, "the sweep removes a map whole");
        assert_eq!(s.map(&VISITS, 0, &5).len()?, 0);
        Ok(())
    }

    #[test]
    fn an_aggregate_gives_before_and_after_in_one_access_and_starts_again_once_expired()
    -> Result<()> {
        static SUMS: AggregatingStateDescriptor<u64, Count> =
            AggregatingStateDescriptor::new("sums", Count)
                .with_ttl(StateTtl::after_write(Duration::from_secs(10)));
        for (mut s, clock) in on_the_heap_and_in_a_store() {
            assert_eq!(s.aggregating(&SUMS, 1, &4).add_and_get(&9)?, (None, 1));
            assert_eq!(s.aggregating(&SUMS, 1, &4).add_and_get(&9)?, (Some(1), 2));
            assert_eq!(s.aggregating(&SUMS, 1, &5).add_and_get(&9)?, (None, 1));
            assert_eq!(s.aggregating(&SUMS, 1, &4).get()?, Some(2));
            clock.advance(Duration::from_secs(11));
            assert_eq!(
                s.aggregating(&SUMS, 1, &4).add_and_get(&9)?,
                (None, 1),
                "an expired accumulator starts again"
            );
        }
        Ok(())
    }

    #[test]
    fn a_value_appended_to_an_encoded_list_decodes_as_the_list_with_the_value() -> Result<()> {
        let list = |values: &[&str], touched| Timed {
            value: ListValue(values.iter().map(|v| v.to_string()).collect::<Vec<_>>()),
            touched,
        };
        let mut new = Vec::new();
        append_encoded(None, &encode(&"a")?, 5, None, &mut new)?;
        assert_eq!(new, encode(&list(&["a"], 5))?);
        let old = encode(&list(&["a", "bé", ""], 1_000))?;
        new.clear();
        append_encoded(
            Some(&old),
            &encode(&"c".repeat(300))?,
            2_000,
            None,
            &mut new,
        )?;
        let long = "c".repeat(300);
        assert_eq!(
            decode::<Timed<ListValue<String>>>(&new)?,
            list(&["a", "bé", "", &long], 2_000)
        );
        new.clear();
        append_encoded(Some(&old), &encode(&"d")?, 2_000, Some(1_000), &mut new)?;
        assert_eq!(new, encode(&list(&["d"], 2_000))?, "expired: starts again");
        new.clear();
        assert!(append_encoded(Some(&old[..3]), b"x", 0, None, &mut new).is_err());
        Ok(())
    }

    #[test]
    fn the_sweep_removes_expired_entries_nobody_reads() -> Result<()> {
        let (mut s, clock) = state();
        for key in 0..100u64 {
            s.value(&SESSION, (key % 4) as KeyGroup, &key).set(key)?;
        }
        s.value(&COUNT, 0, &0).set(1)?;
        assert_eq!(s.size().0, 101);
        clock.advance(Duration::from_secs(11));
        assert_eq!(s.sweep_expired(), 100);
        assert_eq!(s.size().0, 1, "state without TTL stays");
        Ok(())
    }

    #[test]
    fn a_store_is_swept_a_slice_of_key_groups_at_a_time_and_kept_entries_are_not_rewritten()
    -> Result<()> {
        use crate::keys::key_group_of;
        #[derive(Debug, Default)]
        struct CountingStore {
            inner: crate::testing::MemoryKvStore,
            puts: std::sync::atomic::AtomicUsize,
        }
        impl KvStore for CountingStore {
            fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
                self.inner.get(key)
            }
            fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
                self.puts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.inner.put(key, value)
            }
            fn delete(&self, key: &[u8]) -> Result<()> {
                self.inner.delete(key)
            }
            fn scan(
                &self,
                prefixes: &[Vec<u8>],
                visit: &mut crate::state::VisitWhile<'_>,
            ) -> Result<()> {
                self.inner.scan(prefixes, visit)
            }
            fn estimate(&self) -> (u64, u64) {
                self.inner.estimate()
            }
            fn checkpoint(&self, dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
                self.inner.checkpoint(dir)
            }
            fn restore_from(&self, dir: &std::path::Path, range: KeyGroupRange) -> Result<()> {
                self.inner.restore_from(dir, range)
            }
        }
        let range = KeyGroupRange { start: 0, end: 127 };
        let clock = Arc::new(ManualClock::new(1_000_000));
        let store = Arc::new(CountingStore::default());
        let mut s = KeyedState::in_store(range, clock.clone(), Some(store.clone()), "op");
        for key in 0..1_000u64 {
            s.value(&SESSION, key_group_of(&key, 128), &key).set(key)?;
        }
        clock.advance(Duration::from_secs(9));
        for key in 1_000..1_100u64 {
            s.value(&SESSION, key_group_of(&key, 128), &key).set(key)?;
        }
        // The first 1 000 expired; the last 100 live through the 8 sweeps (until 19 s).
        clock.advance(Duration::from_secs(2));
        let puts = store.puts.load(std::sync::atomic::Ordering::Relaxed);
        let mut swept = Vec::new();
        for sweep in 0..8 {
            if sweep > 0 {
                clock.advance(Duration::from_secs(1));
            }
            swept.push(s.sweep_expired());
        }
        assert!(
            swept.iter().all(|&n| n > 50 && n < 250),
            "each sweep takes one slice: {swept:?}"
        );
        assert_eq!(swept.iter().sum::<usize>(), 1_000);
        assert_eq!(
            store.puts.load(std::sync::atomic::Ordering::Relaxed),
            puts,
            "live entries are not rewritten"
        );
        for key in [0u64, 999] {
            assert_eq!(
                s.value(&SESSION, key_group_of(&key, 128), &key).get()?,
                None
            );
        }
        assert_eq!(
            s.value(&SESSION, key_group_of(&1_050u64, 128), &1_050)
                .get()?,
            Some(1_050)
        );
        Ok(())
    }

    #[test]
    fn one_name_with_two_types_is_an_error() {
        let (mut s, _) = state();
        static AS_STRING: ValueStateDescriptor<String> = ValueStateDescriptor::new("count");
        s.value(&COUNT, 0, &1).set(1).unwrap();
        let err = s.value(&AS_STRING, 0, &1).get().unwrap_err();
        assert!(
            err.to_string()
                .contains("state `count` is used as alloc::string::String"),
            "{err}"
        );
    }
}

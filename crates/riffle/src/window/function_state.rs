//! Keyed state of a window function (Flink's `ProcessWindowFunction.Context.windowState()` and
//! `globalState()`): per-window state of the current key, dropped when its window is purged,
//! and global state of the current key, kept across its windows.
//!
//! Both live in the job's state backend, as the operator's own keyed state does: on the heap
//! they travel in the window operator's checkpoints with the windows of their key group; with
//! a store (RocksDB) they are entries of the task's store under their own state ids (the
//! operator's id with `#window-fn-global` / `#window-fn-window`), checkpointed and re-partitioned
//! with it. A window function writes them while the operator reads its windows from the same
//! store: the stores allow writes during a scan (they copy what they cache before visiting).
//! Keys are held by their canonical encoding ([`encode_key`](crate::keys::encode_key)), so the
//! function's context needs no key type. Merging (session) windows have no per-window state, as
//! in Flink: a merged session's state could not be told apart.

use std::hash::Hash;

use crate::aggregate::AggregateFunction;
use crate::codec::{decode, encode};
use crate::error::{Error, Result};
use crate::keys::{KeyGroup, encode_key, key_group_of};
use crate::operators::OperatorContext;
use crate::record::Data;
use crate::state::{
    AggregatingState, AggregatingStateDescriptor, KeyedState, ListState, ListStateDescriptor,
    MapState, MapStateDescriptor, ReducingState, ReducingStateDescriptor, StateSchema, ValueState,
    ValueStateDescriptor,
};
use crate::window::TimeWindow;

/// The encoded key of a window function's state.
pub(crate) type KeyBytes = Vec<u8>;

/// The prefixes of the function's global and per-window states' names among the operator's.
const GLOBAL: &str = "window-fn-global/";
const WINDOW: &str = "window-fn-window/";

/// `schemas` with their names prefixed by `scope`.
fn scoped(scope: &str, schemas: Vec<StateSchema>) -> Vec<StateSchema> {
    schemas
        .into_iter()
        .map(|s| StateSchema {
            name: format!("{scope}{}", s.name),
            ..s
        })
        .collect()
}

/// Per-window and global state of one window operator instance.
pub(crate) struct FunctionState {
    global: KeyedState<KeyBytes>,
    windows: KeyedState<(KeyBytes, TimeWindow)>,
    max_parallelism: usize,
    merging: bool,
}

/// What a checkpoint holds of one key group's function state: (global, per-window) states.
pub(crate) type FunctionStateGroup = (Vec<(String, Vec<u8>)>, Vec<(String, Vec<u8>)>);

impl FunctionState {
    /// The state of the operator of `ctx`, in its backend (merging windows have no per-window
    /// state).
    pub(crate) fn open(ctx: &OperatorContext, merging: bool) -> Self {
        let id = |scope: &str| format!("{}#window-fn-{scope}", ctx.id);
        let (range, clock, store) = (ctx.key_groups, &ctx.clock, &ctx.store);
        FunctionState {
            global: KeyedState::in_store(range, clock.clone(), store.clone(), &id("global")),
            windows: KeyedState::in_store(range, clock.clone(), store.clone(), &id("window")),
            max_parallelism: ctx.max_parallelism,
            merging,
        }
    }

    /// The encoded key and key group of `key`.
    pub(crate) fn key_of<K: serde::Serialize>(&self, key: &K) -> Result<(KeyBytes, KeyGroup)> {
        let mut bytes = Vec::new();
        encode_key(key, &mut bytes).map_err(|e| Error::State(format!("window key: {e}")))?;
        Ok((bytes, key_group_of(key, self.max_parallelism)))
    }

    /// Drops the per-window state of `key` in `window`.
    pub(crate) fn purge<K: serde::Serialize>(&mut self, key: &K, window: TimeWindow) -> Result<()> {
        // Nothing declared (an aggregating window, or a function without per-window state):
        // no key to encode per purged window.
        if self.merging || !self.windows.has_states() {
            return Ok(());
        }
        let (bytes, key_group) = self.key_of(key)?;
        self.windows.clear_key(key_group, &(bytes, window))
    }

    /// Entries and bytes held.
    pub(crate) fn size(&self) -> (usize, usize) {
        let (a, b) = (self.global.size(), self.windows.size());
        (a.0 + b.0, a.1 + b.1)
    }

    /// The access of a window function fired for `key` in `window`.
    pub(crate) fn firing(
        &mut self,
        key: KeyBytes,
        key_group: KeyGroup,
        window: TimeWindow,
    ) -> Firing<'_> {
        Firing {
            state: self,
            key,
            key_group,
            window,
        }
    }
}

impl crate::operators::GroupState for FunctionState {
    /// The state of `key_group`, `None` when there is none.
    fn snapshot_group(&self, key_group: KeyGroup) -> Result<Option<Vec<u8>>> {
        let group: FunctionStateGroup = (
            self.global.snapshot_group(key_group)?,
            self.windows.snapshot_group(key_group)?,
        );
        if group.0.is_empty() && group.1.is_empty() {
            return Ok(None);
        }
        encode(&group).map(Some)
    }

    /// Restores what [`snapshot_group`](FunctionState::snapshot_group) wrote.
    fn restore_group(&mut self, key_group: KeyGroup, bytes: &[u8]) -> Result<()> {
        let (global, windows): FunctionStateGroup = decode(bytes)?;
        self.global.restore_group(key_group, global)?;
        self.windows.restore_group(key_group, windows)
    }

    /// The schemas of the function's states, for a checkpoint: global ones named
    /// `window-fn-global/<name>`, per-window ones `window-fn-window/<name>`.
    fn schemas(&self) -> Vec<StateSchema> {
        let mut schemas = scoped(GLOBAL, self.global.schemas());
        schemas.extend(scoped(WINDOW, self.windows.schemas()));
        schemas
    }

    /// Takes the schemas a restored checkpoint recorded (see [`schemas`](FunctionState::schemas)).
    fn restore_schemas(&mut self, schemas: &[StateSchema]) {
        let unscoped = |scope: &str| -> Vec<StateSchema> {
            schemas
                .iter()
                .filter_map(|s| {
                    s.name.strip_prefix(scope).map(|name| StateSchema {
                        name: name.to_string(),
                        ..s.clone()
                    })
                })
                .collect()
        };
        self.global.restore_schemas(&unscoped(GLOBAL));
        self.windows.restore_schemas(&unscoped(WINDOW));
    }
}

/// The state a window function sees while it fires for one key and window.
pub(crate) struct Firing<'a> {
    state: &'a mut FunctionState,
    key: KeyBytes,
    key_group: KeyGroup,
    window: TimeWindow,
}

impl Firing<'_> {
    pub(crate) fn window_state(&mut self) -> Result<StateScope<'_, (KeyBytes, TimeWindow)>> {
        if self.state.merging {
            return Err(Error::State(
                "per-window state is not available in merging (session) windows: a merged \
                 session's state could not be told apart; use global_state()"
                    .into(),
            ));
        }
        Ok(StateScope {
            state: &mut self.state.windows,
            key_group: self.key_group,
            key: (self.key.clone(), self.window),
        })
    }

    pub(crate) fn global_state(&mut self) -> StateScope<'_, KeyBytes> {
        StateScope {
            state: &mut self.state.global,
            key_group: self.key_group,
            key: self.key.clone(),
        }
    }
}

/// Keyed state scoped to the key (and window) a window function fires for; see
/// [`WindowCollector::window_state`](crate::window::WindowCollector::window_state) and
/// [`WindowCollector::global_state`](crate::window::WindowCollector::global_state).
pub struct StateScope<'a, K> {
    state: &'a mut KeyedState<K>,
    key_group: KeyGroup,
    key: K,
}

impl<K: Data + Hash + Eq> StateScope<'_, K> {
    /// A value state.
    pub fn value<V: Data>(&mut self, descriptor: &ValueStateDescriptor<V>) -> ValueState<'_, K, V> {
        self.state.value(descriptor, self.key_group, &self.key)
    }

    /// A list state.
    pub fn list<V: Data>(&mut self, descriptor: &ListStateDescriptor<V>) -> ListState<'_, K, V> {
        self.state.list(descriptor, self.key_group, &self.key)
    }

    /// A map state.
    pub fn map<UK: Data + Hash + Eq, UV: Data>(
        &mut self,
        descriptor: &MapStateDescriptor<UK, UV>,
    ) -> MapState<'_, K, UK, UV> {
        self.state.map(descriptor, self.key_group, &self.key)
    }

    /// A reducing state.
    pub fn reducing<V: Data>(
        &mut self,
        descriptor: &ReducingStateDescriptor<V>,
    ) -> ReducingState<'_, K, V> {
        self.state.reducing(descriptor, self.key_group, &self.key)
    }

    /// An aggregating state.
    pub fn aggregating<'d, In, A: AggregateFunction<In>>(
        &'d mut self,
        descriptor: &'d AggregatingStateDescriptor<In, A>,
    ) -> AggregatingState<'d, K, In, A> {
        self.state
            .aggregating(descriptor, self.key_group, &self.key)
    }
}

//! The operator of session windows: per key, records closer than the gap form a session; a record
//! that bridges two sessions merges them (their accumulators merge too). A session fires when the
//! watermark (or the clock) passes its end, through a timer per key; its state stays for the
//! allowed lateness, in which a late record merging into it fires an update at once.

use std::hash::Hash;

use serde::{Deserialize, Serialize};

use crate::checkpoint::{RestoreState, SnapshotWriter};
use crate::error::Result;
use crate::keys::KeyFn;
use crate::keys::KeyGroup;
use crate::operators::KeyedTable;
use crate::operators::{Collector, Operator, OperatorContext};
use crate::record::{Data, Record, Timestamp};
use crate::state::TimerService;
use crate::window::function_state::FunctionState;
use crate::window::operator::{Firing, WindowCore, dead_letter_payload};
use crate::window::{TimeDomain, TimeWindow, Unplaceable, WindowFn, WindowSettings, Windows};

/// One session of one key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct SessionSlot<A> {
    window: TimeWindow,
    acc: A,
    emitted: bool,
    fired: bool,
    dirty: bool,
}

/// The sessions of every key, oldest first.
type Sessions<K, Acc> = KeyedTable<K, (), Vec<SessionSlot<Acc>>>;

/// Session windows.
pub(crate) struct SessionWindowOperator<K, T, F: WindowFn<K, T>> {
    key: KeyFn<K, T>,
    function: F,
    core: WindowCore<F::Late>,
    gap: i64,
    sessions: Sessions<K, F::Acc>,
    /// The window function's own keyed state (global only: sessions merge).
    function_state: FunctionState,
    timers: TimerService<K>,
}

impl<K, T, F> SessionWindowOperator<K, T, F>
where
    K: Data + Hash + Eq,
    T: Data,
    F: WindowFn<K, T>,
{
    /// The operator of subtask `ctx`: its sessions in the task's backend.
    pub(crate) fn new(
        key: KeyFn<K, T>,
        settings: WindowSettings<F::Late>,
        function: F,
        ctx: &OperatorContext,
    ) -> Self {
        let Windows::Session { gap, .. } = settings.windows else {
            unreachable!("session operator built for session windows");
        };
        SessionWindowOperator {
            key,
            function,
            core: WindowCore::new(settings, ctx),
            gap,
            sessions: KeyedTable::declare(ctx, "sessions"),
            function_state: FunctionState::open(ctx, true),
            timers: TimerService::new(),
        }
    }

    fn domain(&self) -> TimeDomain {
        self.core.settings.windows.time()
    }

    fn lateness(&self) -> i64 {
        if self.core.event_time() {
            self.core.settings.lateness
        } else {
            0
        }
    }

    /// Adds one record to its key's sessions, merging those it bridges.
    fn add(
        &mut self,
        record: Record<T>,
        time: Timestamp,
        out: &mut Collector<'_, F::Out>,
    ) -> Result<()> {
        let Some(end) = time.checked_add(self.gap) else {
            let reason = Unplaceable {
                timestamp: time,
                start: i128::from(time),
                end: i128::from(time) + i128::from(self.gap),
            };
            let payload = dead_letter_payload(&self.function, record.value);
            return self.core.unplaceable(payload, reason, out);
        };
        let key = (self.key)(&record.value);
        let key_group = self.core.key_group(&key)?;
        let fresh = TimeWindow::new(time, end);
        let domain = self.domain();
        let lateness = self.lateness();
        let sessions = &mut self.sessions;
        let mut list = sessions.get(key_group, &key, &())?.unwrap_or_default();
        let merged = list
            .iter()
            .filter(|s| s.window.intersects(&fresh))
            .fold(fresh, |w, s| w.cover(&s.window));
        if self.core.is_expired(&merged) {
            return self.core.late_record(&self.function, record, time, out);
        }
        let mut acc = self.function.create();
        self.function.add(&mut acc, &record.value);
        let mut emitted = false;
        let mut index = 0;
        while index < list.len() {
            if list[index].window.intersects(&merged) {
                let old = list.swap_remove(index);
                self.timers.delete(domain, old.window.max_timestamp(), &key);
                self.timers.delete(
                    domain,
                    old.window.max_timestamp().saturating_add(lateness),
                    &key,
                );
                self.function.merge(&mut acc, old.acc);
                emitted |= old.emitted;
            } else {
                index += 1;
            }
        }
        let mut slot = SessionSlot {
            window: merged,
            acc,
            emitted,
            fired: false,
            dirty: true,
        };
        if self.core.event_time() && merged.max_timestamp() <= self.core.watermark {
            // Late within the allowed lateness: the merged session's result is updated now.
            let state = &mut self.function_state;
            self.function
                .fire(&key, merged, &slot.acc, slot.emitted, state, out)?;
            slot.emitted = true;
            slot.fired = true;
            slot.dirty = false;
            self.timers.register(
                domain,
                merged.max_timestamp().saturating_add(lateness),
                key.clone(),
            );
        } else {
            self.timers
                .register(domain, merged.max_timestamp(), key.clone());
        }
        list.push(slot);
        self.sessions.put(key_group, key, (), list)
    }

    /// Registers each session's timer: its firing, or once fired, its cleanup.
    fn register_timers(&mut self, key: &K, list: &[SessionSlot<F::Acc>]) {
        let (domain, lateness) = (self.domain(), self.lateness());
        for slot in list {
            let at = if slot.fired {
                slot.window.max_timestamp().saturating_add(lateness)
            } else {
                slot.window.max_timestamp()
            };
            self.timers.register(domain, at, key.clone());
        }
    }
}

impl<K, T, F> Firing for SessionWindowOperator<K, T, F>
where
    K: Data + Hash + Eq,
    T: Data,
    F: WindowFn<K, T>,
{
    type Late = F::Late;
    type Out = F::Out;

    fn core(&mut self) -> &mut WindowCore<F::Late> {
        &mut self.core
    }

    /// Fires the sessions whose timers are due at `time` and drops those past the lateness.
    fn advance(&mut self, time: Timestamp, out: &mut Collector<'_, F::Out>) -> Result<()> {
        let domain = self.domain();
        let lateness = self.lateness();
        // Firing registers only clean-up timers after `time`: one pass takes every due key.
        let mut due = Vec::new();
        while let Some((_, keys)) = self.timers.pop_earliest_due(domain, time) {
            due.extend(keys);
        }
        for key in due {
            let key_group = self.core.key_group(&key)?;
            let sessions = &mut self.sessions;
            let Some(mut list) = sessions.get(key_group, &key, &())? else {
                continue;
            };
            for slot in list.iter_mut() {
                if !slot.fired && slot.window.max_timestamp() <= time {
                    let state = &mut self.function_state;
                    self.function
                        .fire(&key, slot.window, &slot.acc, slot.emitted, state, out)?;
                    slot.emitted = true;
                    slot.fired = true;
                    slot.dirty = false;
                    // Its clean-up timer, unless the clean-up is due now (below).
                    let cleanup = slot.window.max_timestamp().saturating_add(lateness);
                    if lateness > 0 && cleanup > time {
                        self.timers.register(domain, cleanup, key.clone());
                    }
                }
            }
            list.retain(|s| {
                !(s.fired && s.window.max_timestamp().saturating_add(lateness) <= time)
            });
            if list.is_empty() {
                sessions.remove(key_group, &key, &())?;
            } else {
                sessions.put(key_group, key, (), list)?;
            }
        }
        Ok(())
    }

    fn fire_early(&mut self, out: &mut Collector<'_, F::Out>) -> Result<()> {
        let sessions = &mut self.sessions;
        let mut dirty: Vec<(KeyGroup, K)> = Vec::new();
        sessions.for_each(|key_group, _, key, list| {
            if list.iter().any(|slot| slot.dirty && !slot.fired) {
                dirty.push((key_group, key.clone()));
            }
            Ok(())
        })?;
        for (key_group, key) in dirty {
            let function = &mut self.function;
            // Read, fire, write back: the function may use its state in the same store, which
            // must not be entered from inside an update.
            let Some(mut list) = sessions.get(key_group, &key, &())? else {
                continue;
            };
            for slot in list.iter_mut().filter(|s| s.dirty && !s.fired) {
                function.fire(
                    &key,
                    slot.window,
                    &slot.acc,
                    slot.emitted,
                    &mut self.function_state,
                    out,
                )?;
                slot.emitted = true;
                slot.dirty = false;
            }
            sessions.put(key_group, key, (), list)?;
        }
        Ok(())
    }

    fn report_size(&self) {
        let (entries, bytes) = self.function_state.size();
        self.core
            .report_size(&self.sessions, (self.timers.len() + entries, bytes));
    }
}

impl<K, T, F> Operator for SessionWindowOperator<K, T, F>
where
    K: Data + Hash + Eq,
    T: Data,
    F: WindowFn<K, T>,
{
    type In = T;
    type Out = F::Out;

    fn process(
        &mut self,
        batch: &mut Vec<Record<T>>,
        out: &mut Collector<'_, F::Out>,
    ) -> Result<()> {
        let now = self.core.batch_time();
        for record in batch.drain(..) {
            let time = self.core.time_of(&record, now)?;
            self.add(record, time, out)?;
        }
        self.report_size();
        Ok(())
    }

    fn on_watermark(
        &mut self,
        watermark: Timestamp,
        out: &mut Collector<'_, F::Out>,
    ) -> Result<()> {
        self.watermark_reached(watermark, out)
    }

    fn on_tick(&mut self, out: &mut Collector<'_, F::Out>) -> Result<()> {
        self.ticked(out)
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64, snapshot: &mut SnapshotWriter) -> Result<()> {
        // The sessions and the function's state are here when on the heap, in the store otherwise.
        self.sessions.snapshot(snapshot, &self.function_state)
    }

    fn restore_state(&mut self, state: &RestoreState) -> Result<()> {
        self.core.watermark = state.watermark().unwrap_or(self.core.watermark);
        self.sessions.restore(state, &mut self.function_state)?;
        // Every restored session's timers, from the checkpoint or the task's store.
        let mut restored: Vec<(K, Vec<SessionSlot<F::Acc>>)> = Vec::new();
        self.sessions.for_each(|_, _, key, list| {
            restored.push((key.clone(), list.clone()));
            Ok(())
        })?;
        for (key, list) in restored {
            self.register_timers(&key, &list);
        }
        Ok(())
    }

    fn close(&mut self, out: &mut Collector<'_, F::Out>) -> Result<()> {
        if !self.core.event_time() {
            self.advance(Timestamp::MAX, out)?;
        }
        self.report_size();
        Ok(())
    }
}

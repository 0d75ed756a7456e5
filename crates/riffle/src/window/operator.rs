//! The operator of tumbling and sliding windows (windows that never merge).
//!
//! State is one table: key group -> window -> key -> accumulator, plus the set of windows that
//! hold state and whether each has fired. A window fires for all its keys at once when the
//! watermark (or, in processing time, the clock) reaches its last millisecond; its state is then
//! kept for the allowed lateness, during which a late record updates its key's result right away.
//! A record whose every window is past the lateness is late: it goes to the late side output, or
//! is counted and logged.

use std::collections::BTreeMap;
use std::hash::Hash;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::api::KeyFn;
use crate::error::{Error, Result};
use crate::keys::{KeyGroup, key_group_of};
use crate::operators::{Collector, Operator, OperatorContext};
use crate::record::{Data, MIN_WATERMARK, NO_TIMESTAMP, Record, Timestamp};
use crate::state::Table;
use crate::util::RateLimitedLog;
use crate::window::{TimeDomain, TimeWindow, WindowFn, WindowSettings};

/// One key's accumulator in one window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Slot<A> {
    pub(crate) acc: A,
    /// A result for this key and window was emitted already.
    pub(crate) emitted: bool,
    /// Changed since the last emission (early firings emit only what changed).
    pub(crate) dirty: bool,
}

/// What both window operators share: where they run, the watermark, late records.
pub(crate) struct WindowCore<T> {
    pub(crate) ctx: Option<OperatorContext>,
    pub(crate) watermark: Timestamp,
    pub(crate) next_early: Option<Timestamp>,
    late_log: RateLimitedLog,
    pub(crate) settings: WindowSettings<T>,
}

impl<T: Data> WindowCore<T> {
    pub(crate) fn new(settings: WindowSettings<T>) -> Self {
        WindowCore {
            ctx: None,
            watermark: MIN_WATERMARK,
            next_early: None,
            late_log: RateLimitedLog::new(Duration::from_secs(10)),
            settings,
        }
    }

    pub(crate) fn open(&mut self, ctx: &OperatorContext) {
        self.next_early = self.settings.early_every.map(|every| ctx.clock.now() + every);
        self.ctx = Some(ctx.clone());
    }

    pub(crate) fn ctx(&self) -> &OperatorContext {
        self.ctx.as_ref().expect("opened")
    }

    pub(crate) fn event_time(&self) -> bool {
        self.settings.windows.time() == TimeDomain::EventTime
    }

    /// The time a record is windowed by: its event time, or the processing time now.
    pub(crate) fn time_of<I>(&self, record: &Record<I>, now: Timestamp) -> Result<Timestamp> {
        if !self.event_time() {
            return Ok(now);
        }
        if record.timestamp == NO_TIMESTAMP {
            return Err(Error::user(
                "an event-time window received a record without a timestamp: give the source a \
                 WatermarkStrategy with timestamps (or use processing-time windows)",
            ));
        }
        Ok(record.timestamp)
    }

    /// The key group of `key`, checked against the ones this instance owns.
    pub(crate) fn key_group<K: Hash>(&self, key: &K) -> Result<KeyGroup> {
        let ctx = self.ctx();
        let key_group = key_group_of(key, ctx.max_parallelism);
        if !ctx.key_groups.contains(key_group) {
            return Err(Error::Graph(format!(
                "a record of key group {key_group} reached subtask {} of `{}`, which owns {:?}",
                ctx.subtask, ctx.name, ctx.key_groups
            )));
        }
        Ok(key_group)
    }

    /// Whether a window's state is gone (event time: the watermark passed it plus the lateness).
    pub(crate) fn is_expired(&self, window: &TimeWindow) -> bool {
        self.event_time() && window.max_timestamp().saturating_add(self.settings.lateness) <= self.watermark
    }

    /// A record too late for every window it belongs to: side output, or counted and logged.
    /// `record` is `None` for a late input that is no record (a partial aggregate).
    pub(crate) fn late<Out: Data>(&mut self, record: Option<Record<T>>, timestamp: Timestamp, out: &mut Collector<'_, Out>) -> Result<()> {
        let metrics = &self.ctx.as_ref().expect("opened").metrics;
        if let (Some(tag), Some(record)) = (&self.settings.late_tag, record)
            && out.side_output(tag, record)?
        {
            metrics.add_late_side_output(1);
            return Ok(());
        }
        metrics.add_late_dropped(1);
        if let Some(suppressed) = self.late_log.should_log() {
            tracing::warn!(
                operator = %self.ctx().name,
                timestamp,
                watermark = self.watermark,
                suppressed,
                "late record dropped (counted in late_records_dropped); declare side_output_late to keep late records"
            );
        }
        Ok(())
    }

    /// Whether an early firing is due now; schedules the next one.
    pub(crate) fn early_firing_due(&mut self, now: Timestamp) -> bool {
        match (self.next_early, self.settings.early_every) {
            (Some(at), Some(every)) if now >= at => {
                self.next_early = Some(now + every);
                true
            }
            _ => false,
        }
    }
}

/// Tumbling and sliding windows.
pub(crate) struct WindowOperator<K, T, F: WindowFn<K, T>> {
    key: KeyFn<K, T>,
    function: F,
    core: WindowCore<F::Late>,
    /// Windows holding state, and whether each has fired.
    panes: BTreeMap<TimeWindow, bool>,
    table: Option<Table<K, TimeWindow, Slot<F::Acc>>>,
    assigned: Vec<TimeWindow>,
}

impl<K, T, F> WindowOperator<K, T, F>
where
    K: Data + Hash + Eq,
    T: Data,
    F: WindowFn<K, T>,
{
    pub(crate) fn new(key: KeyFn<K, T>, settings: WindowSettings<F::Late>, function: F) -> Self {
        WindowOperator { key, function, core: WindowCore::new(settings), panes: BTreeMap::new(), table: None, assigned: Vec::new() }
    }

    /// Fires `window` for all its keys; purges its state if `purge`.
    fn fire_window(&mut self, window: TimeWindow, purge: bool, out: &mut Collector<'_, F::Out>) -> Result<()> {
        let table = self.table.as_mut().expect("opened");
        if purge {
            for (_, key, slot) in table.drain_namespace(&window) {
                self.function.fire(&key, window, &slot.acc, slot.emitted, out)?;
            }
            self.panes.remove(&window);
        } else {
            for (key, slot) in table.namespace_mut(&window) {
                self.function.fire(key, window, &slot.acc, slot.emitted, out)?;
                slot.emitted = true;
                slot.dirty = false;
            }
            self.panes.insert(window, true);
        }
        Ok(())
    }

    /// Fires every window that ended by `time` and drops the state of windows past the lateness.
    fn advance(&mut self, time: Timestamp, out: &mut Collector<'_, F::Out>) -> Result<()> {
        let lateness = if self.core.event_time() { self.core.settings.lateness } else { 0 };
        let due: Vec<(TimeWindow, bool)> =
            self.panes.iter().take_while(|(w, _)| w.max_timestamp() <= time).map(|(w, fired)| (*w, *fired)).collect();
        for (window, fired) in due {
            let purge = window.max_timestamp().saturating_add(lateness) <= time;
            if !fired {
                self.fire_window(window, purge, out)?;
            } else if purge {
                self.table.as_mut().expect("opened").drain_namespace(&window);
                self.panes.remove(&window);
            }
        }
        Ok(())
    }

    /// Emits the changed results of windows that have not fired yet.
    fn fire_early(&mut self, out: &mut Collector<'_, F::Out>) -> Result<()> {
        let table = self.table.as_mut().expect("opened");
        for (window, _) in self.panes.iter().filter(|(_, fired)| !**fired) {
            for (key, slot) in table.namespace_mut(window) {
                if slot.dirty {
                    self.function.fire(key, *window, &slot.acc, slot.emitted, out)?;
                    slot.emitted = true;
                    slot.dirty = false;
                }
            }
        }
        Ok(())
    }

    fn report_size(&self) {
        let table = self.table.as_ref().expect("opened");
        self.core.ctx().metrics.set_state(table.len() as u64, table.heap_bytes() as u64);
    }
}

impl<K, T, F> Operator for WindowOperator<K, T, F>
where
    K: Data + Hash + Eq,
    T: Data,
    F: WindowFn<K, T>,
{
    type In = T;
    type Out = F::Out;

    fn open(&mut self, ctx: &OperatorContext) -> Result<()> {
        self.core.open(ctx);
        self.table = Some(Table::new(ctx.key_groups));
        Ok(())
    }

    fn process(&mut self, batch: &mut Vec<Record<T>>, out: &mut Collector<'_, F::Out>) -> Result<()> {
        let now = if self.core.event_time() { 0 } else { self.core.ctx().clock.now() };
        for record in batch.drain(..) {
            let time = self.core.time_of(&record, now)?;
            let key = (self.key)(&record.value);
            let key_group = self.core.key_group(&key)?;
            match self.function.fixed_window(&record.value) {
                Some(window) => {
                    self.assigned.clear();
                    self.assigned.push(window);
                }
                None => self.core.settings.windows.assign(time, &mut self.assigned),
            }
            if let [window] = self.assigned[..] {
                // One window (tumbling, or a partial aggregate): the record moves in, no copy.
                if self.core.is_expired(&window) {
                    let Record { value, timestamp } = record;
                    let late = self.function.late(value).map(|value| Record { value, timestamp });
                    self.core.late(late, timestamp, out)?;
                    continue;
                }
                let fired = *self.panes.entry(window).or_insert(false);
                let function = &mut self.function;
                let slot = self.table.as_mut().expect("opened").entry(key_group, key.clone(), window).or_insert_with(|| Slot {
                    acc: function.create(),
                    emitted: false,
                    dirty: false,
                });
                function.add_owned(&mut slot.acc, record.value);
                slot.dirty = true;
                if fired {
                    function.fire(&key, window, &slot.acc, slot.emitted, out)?;
                    slot.emitted = true;
                    slot.dirty = false;
                }
                continue;
            }
            let mut counted = false;
            for &window in &self.assigned {
                if self.core.is_expired(&window) {
                    continue;
                }
                counted = true;
                let fired = *self.panes.entry(window).or_insert(false);
                let function = &mut self.function;
                let slot = self.table.as_mut().expect("opened").entry(key_group, key.clone(), window).or_insert_with(|| Slot {
                    acc: function.create(),
                    emitted: false,
                    dirty: false,
                });
                function.add(&mut slot.acc, &record.value);
                slot.dirty = true;
                if fired {
                    // Late but within the allowed lateness: the key's result is updated now.
                    function.fire(&key, window, &slot.acc, slot.emitted, out)?;
                    slot.emitted = true;
                    slot.dirty = false;
                }
            }
            if !counted {
                let Record { value, timestamp } = record;
                let late = self.function.late(value).map(|value| Record { value, timestamp });
                self.core.late(late, timestamp, out)?;
            }
        }
        self.report_size();
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Collector<'_, F::Out>) -> Result<()> {
        self.core.watermark = watermark;
        if self.core.event_time() {
            self.advance(watermark, out)?;
        }
        self.report_size();
        Ok(())
    }

    fn on_tick(&mut self, out: &mut Collector<'_, F::Out>) -> Result<()> {
        let now = self.core.ctx().clock.now();
        if !self.core.event_time() {
            self.advance(now, out)?;
        }
        if self.core.early_firing_due(now) {
            self.fire_early(out)?;
        }
        self.report_size();
        Ok(())
    }

    fn close(&mut self, out: &mut Collector<'_, F::Out>) -> Result<()> {
        if !self.core.event_time() {
            // A bounded input ended: its processing-time windows are complete.
            self.advance(Timestamp::MAX, out)?;
        }
        self.report_size();
        Ok(())
    }
}

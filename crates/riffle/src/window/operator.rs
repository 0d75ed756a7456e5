//! The operator of tumbling and sliding windows (windows that never merge).
//!
//! State is one table: key group -> window -> key -> accumulator, plus the set of windows that
//! hold state and whether each has fired. A window fires for all its keys at once when the
//! watermark reaches its last millisecond (in processing time, when the clock reaches its end:
//! at its last millisecond records still fall in it); its state is then kept for the allowed
//! lateness, during which a late record updates its key's result right away.
//! A record whose every window is past the lateness is late: it goes to the late side output, or
//! is counted and logged.
//!
//! Sliding windows may be kept as slices instead ([`WindowSettings::slicing`]): the table's
//! namespaces are then slices `[s, s + slide)`, a record is added to its slice only, and when
//! a window's end is reached its result is the merge of the accumulators of its slices (a
//! slice is dropped once its last window fired).

use std::collections::BTreeSet;
use std::hash::Hash;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::bad_records::{
    BadInput, BadRecordHandler, BadRecordPolicy, DEAD_LETTER_TAG, DeadLetter,
};
use crate::checkpoint::{Redistribution, RestoreState, SnapshotWriter};
use crate::error::{Error, Result};
use crate::keys::KeyFn;
use crate::keys::{KeyGroup, key_group_of};
use crate::operators::OutputTag;
use crate::operators::{Collector, KeyedTable, Operator, OperatorContext};
use crate::record::{Data, MIN_WATERMARK, Record, Timestamp};
use crate::state::StateTable;
use crate::util::RateLimitedLog;
use crate::window::function_state::FunctionState;
use crate::window::{TimeDomain, TimeWindow, TriggerResult, Unplaceable, WindowFn, WindowSettings};

/// One key's accumulator in one window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Slot<A> {
    pub(crate) acc: A,
    /// A result for this key and window was emitted already (early or on time).
    pub(crate) emitted: bool,
    /// The window fired for this key (on time); later changes are updates.
    pub(crate) fired: bool,
    /// Changed since the last emission.
    pub(crate) dirty: bool,
}

/// What both window operators share: where they run, the watermark, late records.
pub(crate) struct WindowCore<T> {
    pub(crate) ctx: OperatorContext,
    pub(crate) watermark: Timestamp,
    /// The latest processing time read: the clock as this operator sees it never goes back (the
    /// wall clock may), so no record is windowed into a processing-time window that fired.
    processing_time: Timestamp,
    pub(crate) next_early: Option<Timestamp>,
    late_log: RateLimitedLog,
    /// Records whose windows do not fit in the timestamp range become dead letters.
    unplaceable: BadRecordHandler,
    dead_letters: OutputTag<DeadLetter>,
    pub(crate) settings: WindowSettings<T>,
}

impl<T: Data> WindowCore<T> {
    pub(crate) fn new(settings: WindowSettings<T>, ctx: &OperatorContext) -> Self {
        WindowCore {
            next_early: settings
                .early_every
                .map(|every| ctx.clock.now().saturating_add(every)),
            unplaceable: BadRecordHandler::new(BadRecordPolicy::DeadLetter, &ctx.name),
            ctx: ctx.clone(),
            watermark: MIN_WATERMARK,
            processing_time: MIN_WATERMARK,
            late_log: RateLimitedLog::new(Duration::from_secs(10)),
            dead_letters: OutputTag::new(DEAD_LETTER_TAG),
            settings,
        }
    }

    pub(crate) fn ctx(&self) -> &OperatorContext {
        &self.ctx
    }

    pub(crate) fn event_time(&self) -> bool {
        self.settings.windows.time() == TimeDomain::EventTime
    }

    /// The processing time now: the clock, never before an earlier reading.
    pub(crate) fn now(&mut self) -> Timestamp {
        self.processing_time = self.processing_time.max(self.ctx.clock.now());
        self.processing_time
    }

    /// The processing time a batch is windowed at (event time: unused, 0).
    pub(crate) fn batch_time(&mut self) -> Timestamp {
        if self.event_time() { 0 } else { self.now() }
    }

    /// The time up to which windows are due (their last millisecond at or before it) when
    /// processing time is `now`: the watermark, or in processing time the millisecond before
    /// `now`. A processing-time window takes records until the clock reaches its end, so it
    /// fires then, once, and the records of its last millisecond are in its result.
    pub(crate) fn due_by(&self, now: Timestamp) -> Timestamp {
        if self.event_time() {
            self.watermark
        } else {
            now.saturating_sub(1)
        }
    }

    /// Publishes the operator's state size: a table's entries plus `extra` (timers).
    pub(crate) fn report_size<K, N, V>(
        &self,
        table: &StateTable<K, N, V>,
        (extra, extra_bytes): (usize, usize),
    ) where
        K: Hash + Eq + Clone + Serialize + serde::de::DeserializeOwned,
        N: Hash + Eq + Clone + Serialize + serde::de::DeserializeOwned,
        V: Clone + Serialize + serde::de::DeserializeOwned,
    {
        let (entries, bytes) = table.size();
        self.ctx()
            .metrics
            .set_state((entries + extra) as u64, (bytes + extra_bytes) as u64);
    }

    /// The time a record is windowed by: its event time, or the processing time now.
    pub(crate) fn time_of<I>(&self, record: &Record<I>, now: Timestamp) -> Result<Timestamp> {
        if !self.event_time() {
            return Ok(now);
        }
        match record.timestamp {
            Some(time) => Ok(time.millis()),
            None => Err(Error::user(
                "an event-time window received a record without a timestamp: give the source a \
                 WatermarkStrategy with timestamps (or use processing-time windows)",
            )),
        }
    }

    /// A record that no window can hold (`reason`): counted as a bad record of this operator and
    /// sent to its dead letters (`payload`: the record as JSON). The job goes on.
    pub(crate) fn unplaceable<Out: Data>(
        &mut self,
        payload: String,
        reason: Unplaceable,
        out: &mut Collector<'_, Out>,
    ) -> Result<()> {
        let ctx = &self.ctx;
        let bad = BadInput {
            position: format!("event time {}", reason.timestamp),
            error: reason.to_string(),
            payload,
        };
        let split = format!("subtask {}", ctx.subtask);
        let tag = &self.dead_letters;
        self.unplaceable
            .handle(std::iter::once(bad), &split, &ctx.metrics, |letter| {
                out.side_output(tag, letter).map(|_| ())
            })
    }

    /// The key group of `key`, checked against the ones this instance owns.
    pub(crate) fn key_group<K: Serialize>(&self, key: &K) -> Result<KeyGroup> {
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
        self.event_time()
            && window
                .max_timestamp()
                .saturating_add(self.settings.lateness)
                <= self.watermark
    }

    /// A record too late for every window it belongs to: side output, or counted and logged.
    /// `record` is `None` for a late input that is no record (a partial aggregate).
    pub(crate) fn late<Out: Data>(
        &mut self,
        record: Option<Record<T>>,
        timestamp: Timestamp,
        out: &mut Collector<'_, Out>,
    ) -> Result<()> {
        let metrics = &self.ctx.metrics;
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

    /// A record too late for every window it belongs to, as `function` sends late records (its
    /// late form, if any) to [`late`](WindowCore::late).
    pub(crate) fn late_record<K, I: Data, F: WindowFn<K, I, Late = T>, Out: Data>(
        &mut self,
        function: &F,
        record: Record<I>,
        time: Timestamp,
        out: &mut Collector<'_, Out>,
    ) -> Result<()> {
        let Record { value, timestamp } = record;
        let late = function
            .late(value)
            .map(|value| Record { value, timestamp });
        self.late(late, time, out)
    }

    /// Whether an early firing is due now; schedules the next one.
    pub(crate) fn early_firing_due(&mut self, now: Timestamp) -> bool {
        match (self.next_early, self.settings.early_every) {
            (Some(at), Some(every)) if now >= at => {
                self.next_early = Some(now.saturating_add(every));
                true
            }
            _ => false,
        }
    }
}

/// A record as dead-letter payload: the input record as JSON (for a pre-aggregated input, the
/// record it wraps).
pub(crate) fn dead_letter_payload<K, T: Data, F: WindowFn<K, T>>(function: &F, value: T) -> String {
    let json = match function.late(value.clone()) {
        Some(late) => serde_json::to_string(&late),
        None => serde_json::to_string(&value),
    };
    json.unwrap_or_else(|e| format!("(not serializable: {e})"))
}

/// How a window operator fires, and what both do with it on a watermark and on a tick.
pub(crate) trait Firing {
    /// What goes to the late side output.
    type Late: Data;
    /// The operator's output.
    type Out: Data;
    fn core(&mut self) -> &mut WindowCore<Self::Late>;
    /// Fires what is due by `time` and drops the state past the lateness.
    fn advance(&mut self, time: Timestamp, out: &mut Collector<'_, Self::Out>) -> Result<()>;
    /// Emits the changed results of windows not due yet.
    fn fire_early(&mut self, out: &mut Collector<'_, Self::Out>) -> Result<()>;
    /// Publishes the state size.
    fn report_size(&self);

    /// An event-time watermark: fires what it makes due.
    fn watermark_reached(
        &mut self,
        watermark: Timestamp,
        out: &mut Collector<'_, Self::Out>,
    ) -> Result<()> {
        self.core().watermark = watermark;
        if self.core().event_time() {
            self.advance(watermark, out)?;
        }
        self.report_size();
        Ok(())
    }

    /// Processing time moved: fires processing-time windows and early results when due.
    fn ticked(&mut self, out: &mut Collector<'_, Self::Out>) -> Result<()> {
        let now = self.core().now();
        if !self.core().event_time() {
            let due_by = self.core().due_by(now);
            self.advance(due_by, out)?;
        }
        if self.core().early_firing_due(now) {
            self.fire_early(out)?;
        }
        self.report_size();
        Ok(())
    }
}

/// Tumbling and sliding windows.
pub(crate) struct WindowOperator<K, T, F: WindowFn<K, T>> {
    key: KeyFn<K, T>,
    function: F,
    core: WindowCore<F::Late>,
    /// Windows holding state, in firing order.
    panes: BTreeSet<TimeWindow>,
    /// The window of the last record added, known to be in `panes` (most records fall in the
    /// window of the one before: no search of the set for them).
    last_pane: Option<TimeWindow>,
    /// Windows ending at or before this time have fired (every slot of theirs).
    fired_up_to: Timestamp,
    table: KeyedTable<K, TimeWindow, Slot<F::Acc>>,
    /// The window function's own keyed state (per window and global).
    function_state: FunctionState,
    assigned: Vec<TimeWindow>,
    /// `(size, slide)` when sliding windows are kept as slices ([`WindowSettings::slicing`]):
    /// `panes` and the table then hold slices, `[s, s + slide)`, each key's records of one
    /// slide added once, and a window's result is the merge of its slices' accumulators when
    /// it fires. (Whole windows an older version of the job kept, restored, are merged in.)
    slicing: Option<(i64, i64)>,
}

impl<K, T, F> WindowOperator<K, T, F>
where
    K: Data + Hash + Eq,
    T: Data,
    F: WindowFn<K, T>,
{
    /// The operator of subtask `ctx`: its windows' state in the task's backend.
    pub(crate) fn new(
        key: KeyFn<K, T>,
        settings: WindowSettings<F::Late>,
        function: F,
        ctx: &OperatorContext,
    ) -> Self {
        WindowOperator {
            key,
            function,
            slicing: settings.slicing(),
            core: WindowCore::new(settings, ctx),
            panes: BTreeSet::new(),
            last_pane: None,
            fired_up_to: MIN_WATERMARK,
            table: KeyedTable::declare(ctx, "windows"),
            function_state: FunctionState::open(ctx, false),
            assigned: Vec::new(),
        }
    }

    /// Emits a slot's result if it has not fired, or changed since.
    fn fire_slot(
        function: &mut F,
        state: &mut FunctionState,
        key: &K,
        window: TimeWindow,
        slot: &mut Slot<F::Acc>,
        out: &mut Collector<'_, F::Out>,
    ) -> Result<()> {
        match Self::fire_at_end(function.fires_at_end(), slot) {
            Some(update) => function.fire(key, window, &slot.acc, update, state, out),
            None => Ok(()),
        }
    }

    /// Marks a slot whose window's end was reached as fired, if it has not fired or changed
    /// since; `Some(update)`: its result is to be emitted (as an update if one was before).
    /// `fires_at_end` false: a custom trigger fires the window, never its end.
    fn fire_at_end(fires_at_end: bool, slot: &mut Slot<F::Acc>) -> Option<bool> {
        if !fires_at_end || (slot.fired && !slot.dirty) {
            return None;
        }
        let update = slot.emitted;
        slot.fired = true;
        slot.emitted = true;
        slot.dirty = false;
        Some(update)
    }

    /// Adds a record to one window of its key; fires the key's result at once if the window is
    /// already due by `due_by` (a late record within the lateness; never in processing time,
    /// where the batch's windows hold its time, which `due_by` is before).
    fn add(
        &mut self,
        key_group: KeyGroup,
        key: &K,
        window: TimeWindow,
        value: std::result::Result<T, &T>,
        due_by: Timestamp,
        out: &mut Collector<'_, F::Out>,
    ) -> Result<()> {
        let due = window.max_timestamp() <= due_by;
        if self.last_pane != Some(window) {
            self.panes.insert(window);
            self.last_pane = Some(window);
        }
        let function = &self.function;
        // Made only for a window the key has no slot for yet (an accumulator may allocate:
        // a SQL row of aggregates does).
        let create = || Slot {
            acc: function.create(),
            emitted: false,
            fired: false,
            dirty: false,
        };
        // The results to emit are taken out of the update and emitted after it: the function
        // may use its own state, in the same store, which must not be entered from inside an
        // update. (Firing on a record is rare: a trigger's decision, or a late record.)
        let fires_at_end = function.fires_at_end();
        let firings = self.table.update(key_group, key, &window, create, |slot| {
            let decision = match &value {
                Ok(owned) => function.on_element(&slot.acc, owned, window),
                Err(borrowed) => function.on_element(&slot.acc, borrowed, window),
            };
            match value {
                Ok(owned) => function.add_owned(&mut slot.acc, owned),
                Err(borrowed) => function.add(&mut slot.acc, borrowed),
            }
            slot.dirty = true;
            let mut firings: Vec<(F::Acc, bool)> = Vec::new();
            if decision != TriggerResult::Continue {
                firings.push((slot.acc.clone(), slot.emitted));
                slot.emitted = true;
                slot.dirty = false;
                if decision == TriggerResult::FireAndPurge {
                    slot.acc = function.create();
                }
            }
            if due && let Some(update) = Self::fire_at_end(fires_at_end, slot) {
                firings.push((slot.acc.clone(), update));
            }
            Ok(firings)
        })?;
        for (acc, update) in firings {
            self.function
                .fire(key, window, &acc, update, &mut self.function_state, out)?;
        }
        Ok(())
    }
}

impl<K, T, F> WindowOperator<K, T, F>
where
    K: Data + Hash + Eq,
    T: Data,
    F: WindowFn<K, T>,
{
    /// Adds a record (or a partial of one slice) to its slice, once, whatever the number of
    /// windows the slice is in. `self.assigned` holds the record's windows (the latest start
    /// first); the record is late when the last of them is past the watermark.
    #[allow(clippy::too_many_arguments)]
    fn add_to_slice(
        &mut self,
        size: i64,
        slide: i64,
        key_group: KeyGroup,
        key: &K,
        record: Record<T>,
        time: Timestamp,
        out: &mut Collector<'_, F::Out>,
    ) -> Result<()> {
        let slice = match self.function.fixed_window(&record.value) {
            // A partial aggregate, folded into one slice before the shuffle.
            Some(slice) => slice,
            None => {
                let start = self.assigned.first().map_or(time, |w| w.start);
                TimeWindow::new(start, start.saturating_add(slide))
            }
        };
        let last_window = TimeWindow::new(slice.start, slice.start.saturating_add(size));
        if self.core.is_expired(&last_window) {
            return self.core.late_record(&self.function, record, time, out);
        }
        // Never due on arrival: without lateness, a window past the watermark does not fire
        // again, and the slice's later windows fire when the watermark reaches them.
        self.add(key_group, key, slice, Ok(record.value), MIN_WATERMARK, out)
    }

    /// [`Firing::advance`] over slices: fires each window that ended by `time` (and after the
    /// last firing) with the merge of its slices, then drops the slices whose last window fired.
    fn advance_slices(
        &mut self,
        size: i64,
        slide: i64,
        time: Timestamp,
        out: &mut Collector<'_, F::Out>,
    ) -> Result<()> {
        let is_slice = |pane: &TimeWindow| pane.end.checked_sub(pane.start) == Some(slide);
        // The ends of the windows due: after the last firing, by `time`. A slice is in the
        // `size / slide` windows ending at its end and every slide after; a restored whole
        // window ends at its own end. Only the panes ending by `time` have one (the set is in
        // end order), and of each only the ends in range are visited: a day of one-second
        // slides is not walked per watermark.
        let (after, by) = (i128::from(self.fired_up_to) + 1, i128::from(time) + 1);
        let mut ends = BTreeSet::new();
        for pane in self.panes.iter().take_while(|p| i128::from(p.end) <= by) {
            let first = i128::from(pane.end);
            let last = if is_slice(pane) {
                i128::from(pane.start) + i128::from(size)
            } else {
                first
            };
            let step = i128::from(slide);
            // The first end after `after`, on the pane's grid, and the last by `by`.
            let mut end = if first > after {
                first
            } else {
                first + ((after - first) / step + 1) * step
            };
            while end <= last.min(by) {
                ends.insert(end as i64);
                end += step;
            }
        }
        let table = &mut self.table;
        let function = &mut self.function;
        let state = &mut self.function_state;
        let mut merged: crate::state::table::FastMap<K, F::Acc> = Default::default();
        for end in ends {
            let window = TimeWindow::new(end.saturating_sub(size), end);
            // Its slices (and a restored whole window): panes ending in it that start in it
            // (the set is ordered by end, then start).
            let from = TimeWindow::new(i64::MIN, window.start.saturating_add(1));
            let to = TimeWindow::new(i64::MAX, end);
            let inside: Vec<TimeWindow> = self
                .panes
                .range(from..=to)
                .filter(|p| window.start <= p.start)
                .copied()
                .collect();
            if let [only] = inside[..] {
                // One slice (or window) holds the window's every key: no merge.
                table.for_each_in_namespace(&only, |key, slot| {
                    function.fire(key, window, &slot.acc, false, state, out)
                })?;
                continue;
            }
            for pane in &inside {
                table.for_each_in_namespace(pane, |key, slot| {
                    match merged.get_mut(key) {
                        Some(acc) => function.merge(acc, slot.acc.clone()),
                        None => {
                            merged.insert(key.clone(), slot.acc.clone());
                        }
                    }
                    Ok(())
                })?;
            }
            for (key, acc) in merged.drain() {
                function.fire(&key, window, &acc, false, state, out)?;
            }
        }
        // A slice's last window starts at its start; a whole window is its own last.
        let spent: Vec<TimeWindow> = self
            .panes
            .iter()
            .take_while(|p| p.end.saturating_sub(1) <= time)
            .filter(|p| {
                let last_end = if is_slice(p) {
                    p.start.saturating_add(size)
                } else {
                    p.end
                };
                last_end.saturating_sub(1) <= time
            })
            .copied()
            .collect();
        for pane in spent {
            table.drain_namespace_each(&pane, |_, key, _| state.purge(&key, pane))?;
            self.panes.remove(&pane);
            if self.last_pane == Some(pane) {
                self.last_pane = None;
            }
        }
        self.fired_up_to = self.fired_up_to.max(time);
        Ok(())
    }
}

impl<K, T, F> Firing for WindowOperator<K, T, F>
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

    /// Fires every window that ended by `time` and drops the state of windows past the lateness.
    fn advance(&mut self, time: Timestamp, out: &mut Collector<'_, F::Out>) -> Result<()> {
        if let Some((size, slide)) = self.slicing {
            return self.advance_slices(size, slide, time, out);
        }
        let lateness = if self.core.event_time() {
            self.core.settings.lateness
        } else {
            0
        };
        let due: Vec<TimeWindow> = self
            .panes
            .iter()
            .take_while(|w| w.max_timestamp() <= time)
            .filter(|w| {
                w.max_timestamp() > self.fired_up_to
                    || w.max_timestamp().saturating_add(lateness) <= time
            })
            .copied()
            .collect();
        let table = &mut self.table;
        let function = &mut self.function;
        let state = &mut self.function_state;
        for window in due {
            let purge = window.max_timestamp().saturating_add(lateness) <= time;
            if purge {
                table.drain_namespace_each(&window, |_, key, mut slot| {
                    Self::fire_slot(function, state, &key, window, &mut slot, out)?;
                    state.purge(&key, window)
                })?;
                self.panes.remove(&window);
                if self.last_pane == Some(window) {
                    self.last_pane = None;
                }
            } else {
                table.for_each_in_namespace(&window, |key, slot| {
                    Self::fire_slot(function, state, key, window, slot, out)
                })?;
            }
        }
        self.fired_up_to = self.fired_up_to.max(time);
        Ok(())
    }

    /// Emits the changed results of windows that are not due yet.
    fn fire_early(&mut self, out: &mut Collector<'_, F::Out>) -> Result<()> {
        let table = &mut self.table;
        let function = &mut self.function;
        let state = &mut self.function_state;
        for &window in &self.panes {
            table.for_each_in_namespace(&window, |key, slot| {
                if slot.dirty && !slot.fired {
                    function.fire(key, window, &slot.acc, slot.emitted, state, out)?;
                    slot.emitted = true;
                    slot.dirty = false;
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    fn report_size(&self) {
        self.core
            .report_size(&self.table, self.function_state.size());
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

    fn process(
        &mut self,
        batch: &mut Vec<Record<T>>,
        out: &mut Collector<'_, F::Out>,
    ) -> Result<()> {
        // One time for the whole batch: the windows its records fall in and which are due.
        let now = self.core.batch_time();
        let due_by = self.core.due_by(now);
        for record in batch.drain(..) {
            let time = self.core.time_of(&record, now)?;
            let key = (self.key)(&record.value);
            let key_group = self.core.key_group(&key)?;
            match self.function.fixed_window(&record.value) {
                Some(window) => {
                    self.assigned.clear();
                    self.assigned.push(window);
                }
                None => {
                    if let Err(reason) = self.core.settings.windows.assign(time, &mut self.assigned)
                    {
                        let payload = dead_letter_payload(&self.function, record.value);
                        self.core.unplaceable(payload, reason, out)?;
                        continue;
                    }
                }
            }
            if let Some((size, slide)) = self.slicing {
                self.add_to_slice(size, slide, key_group, &key, record, time, out)?;
                continue;
            }
            let core = &self.core;
            self.assigned.retain(|w| !core.is_expired(w));
            match self.assigned.len() {
                0 => self.core.late_record(&self.function, record, time, out)?,
                // One window (tumbling, or a partial aggregate): the record moves in, no copy.
                1 => {
                    let window = self.assigned[0];
                    self.add(key_group, &key, window, Ok(record.value), due_by, out)?;
                }
                n => {
                    for i in 0..n {
                        let window = self.assigned[i];
                        self.add(key_group, &key, window, Err(&record.value), due_by, out)?;
                    }
                }
            }
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
        // The windows that hold state (every old subtask's, on restore); the slots and the
        // function's state are here when on the heap, in the task's store otherwise.
        snapshot.write_operator(Redistribution::Union, &self.panes)?;
        self.table.snapshot(snapshot, &self.function_state)
    }

    fn restore_state(&mut self, state: &RestoreState) -> Result<()> {
        for panes in state.operator::<BTreeSet<TimeWindow>>() {
            self.panes.extend(panes?);
        }
        self.table.restore(state, &mut self.function_state)?;
        if let Some(heap) = self.table.heap() {
            self.panes.extend(heap.namespaces());
        }
        // Late records are judged against the watermark the snapshot had; windows due by the
        // next watermark fire the slots that had not fired, or changed, and only those.
        self.core.watermark = state.watermark().unwrap_or(MIN_WATERMARK);
        self.fired_up_to = MIN_WATERMARK;
        if self.slicing.is_some() {
            // Slices outlive the windows that fired: those the watermark passed fired before
            // the snapshot (every subtask of a keyed exchange had the same watermark at the
            // barrier), and do not fire again.
            self.fired_up_to = self.core.watermark;
        }
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

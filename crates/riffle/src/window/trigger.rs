//! Custom triggers and evictors of tumbling and sliding windows (Flink's `Trigger` and
//! `Evictor`).
//!
//! By default a window fires when the watermark (or, in processing time, the clock) reaches its
//! end. A [`Trigger`] also sees every record added to a key's window and may fire the window at
//! once, and purge it (start it again empty); it can also turn the firing at the window's end
//! off (Flink's `CountTrigger` replaces the event-time trigger that way). An [`Evictor`] removes
//! records from what a full-window function sees when the window fires (the window's state keeps
//! them until it is purged or expires).
//!
//! Windows with a trigger are not pre-aggregated before the shuffle: the trigger sees each record.

use std::sync::Arc;

use crate::error::Result;
use crate::operators::Collector;
use crate::record::{Data, Timestamp};
use crate::window::function_state::FunctionState;
use crate::window::{TimeWindow, WindowFn};

/// What a trigger decides for a window after a record was added.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TriggerResult {
    /// Nothing now.
    Continue,
    /// Emit the window's current result (an update if it was emitted before).
    Fire,
    /// Emit the window's current result, then start the window again empty.
    FireAndPurge,
}

/// Decides when a window of a key fires, besides (or instead of) the window's end.
///
/// ```
/// use std::time::Duration;
/// use riffle::{EnvConfig, StreamEnv, aggregate::Count, sink::CollectSink, time::WatermarkStrategy};
/// use riffle::window::{CountTrigger, Tumbling};
///
/// // Per user and minute, a count every 2 clicks, and none at the window's end.
/// let env = StreamEnv::with_config(EnvConfig::deterministic());
/// let (sink, out) = CollectSink::new();
/// env.from_iter_with_watermarks(
///     vec![(1u64, 1_000i64), (1, 2_000), (1, 3_000), (1, 4_000), (1, 5_000)],
///     WatermarkStrategy::monotonous().with_timestamps(|c: &(u64, i64)| c.1),
/// )
/// .key_by(|c| c.0)
/// .window(Tumbling::of(Duration::from_secs(60)))
/// .trigger(CountTrigger::of(2))
/// .aggregate(Count)
/// .map(|r| r.value)
/// .sink(sink);
/// env.execute().unwrap();
/// assert_eq!(out.values(), vec![2, 4]);
/// ```
pub trait Trigger<T>: Send + Sync + 'static {
    /// `record` was added to `window` of its key, which now holds `count` records since it
    /// last fired and purged (or since it opened).
    fn on_element(&self, record: &T, window: TimeWindow, count: u64) -> TriggerResult;

    /// Whether the window also fires when time reaches its end (default: yes).
    fn fires_at_end(&self) -> bool {
        true
    }
}

/// Fires a key's window every `n` records (Flink's `CountTrigger`): not at the window's end.
/// Wrap it in [`Purging`] to start the window again after each firing.
#[derive(Clone, Copy, Debug)]
pub struct CountTrigger {
    every: u64,
}

impl CountTrigger {
    /// Fires every `n` records (at least 1).
    pub fn of(n: u64) -> Self {
        CountTrigger { every: n.max(1) }
    }
}

impl<T> Trigger<T> for CountTrigger {
    fn on_element(&self, _record: &T, _window: TimeWindow, count: u64) -> TriggerResult {
        if count.is_multiple_of(self.every) {
            TriggerResult::Fire
        } else {
            TriggerResult::Continue
        }
    }

    fn fires_at_end(&self) -> bool {
        false
    }
}

/// Turns every firing of a trigger into fire-and-purge (Flink's `PurgingTrigger`).
#[derive(Clone, Copy, Debug)]
pub struct Purging<Tr>(pub Tr);

impl<T, Tr: Trigger<T>> Trigger<T> for Purging<Tr> {
    fn on_element(&self, record: &T, window: TimeWindow, count: u64) -> TriggerResult {
        match self.0.on_element(record, window, count) {
            TriggerResult::Continue => TriggerResult::Continue,
            _ => TriggerResult::FireAndPurge,
        }
    }

    fn fires_at_end(&self) -> bool {
        self.0.fires_at_end()
    }
}

/// Removes records from what a full-window function sees when its window fires.
pub trait Evictor<T>: Send + Sync + 'static {
    /// Removes records from `records` (in arrival order) before the function is called.
    fn evict_before(&self, window: TimeWindow, records: &mut Vec<T>);
}

/// Keeps the last `n` records of a window (Flink's `CountEvictor`).
#[derive(Clone, Copy, Debug)]
pub struct CountEvictor {
    keep: usize,
}

impl CountEvictor {
    /// Keeps the last `n` records.
    pub fn of(n: usize) -> Self {
        CountEvictor { keep: n }
    }
}

impl<T> Evictor<T> for CountEvictor {
    fn evict_before(&self, _window: TimeWindow, records: &mut Vec<T>) {
        let excess = records.len().saturating_sub(self.keep);
        records.drain(..excess);
    }
}

/// Keeps the records within `keep` milliseconds of the window's newest one (Flink's
/// `TimeEvictor`), by the event time `timestamp` reads from each record.
pub struct TimeEvictor<T> {
    keep: Timestamp,
    timestamp: Arc<dyn Fn(&T) -> Timestamp + Send + Sync>,
}

impl<T> TimeEvictor<T> {
    /// Keeps the records less than `keep` older than the newest.
    pub fn of(
        keep: std::time::Duration,
        timestamp: impl Fn(&T) -> Timestamp + Send + Sync + 'static,
    ) -> Self {
        TimeEvictor {
            keep: keep.as_millis().min(Timestamp::MAX as u128) as Timestamp,
            timestamp: Arc::new(timestamp),
        }
    }
}

impl<T: 'static> Evictor<T> for TimeEvictor<T> {
    fn evict_before(&self, _window: TimeWindow, records: &mut Vec<T>) {
        let Some(newest) = records.iter().map(|r| (self.timestamp)(r)).max() else {
            return;
        };
        let oldest = newest.saturating_sub(self.keep);
        records.retain(|r| (self.timestamp)(r) > oldest);
    }
}

/// A window function whose windows a [`Trigger`] fires too: it counts the records of each
/// window since it last fired and purged.
pub(crate) struct Triggered<F> {
    pub(crate) function: F,
    pub(crate) trigger: Arc<dyn TriggerAny>,
}

/// A trigger with its record type hidden behind `Any`, so that window settings stay one type.
pub(crate) trait TriggerAny: Send + Sync {
    fn on_element(
        &self,
        record: &dyn std::any::Any,
        window: TimeWindow,
        count: u64,
    ) -> TriggerResult;
    fn fires_at_end(&self) -> bool;
}

/// A typed trigger behind [`TriggerAny`].
pub(crate) struct Typed<T, Tr>(pub(crate) Tr, pub(crate) std::marker::PhantomData<fn(&T)>);

impl<T: 'static, Tr: Trigger<T>> TriggerAny for Typed<T, Tr> {
    fn on_element(
        &self,
        record: &dyn std::any::Any,
        window: TimeWindow,
        count: u64,
    ) -> TriggerResult {
        match record.downcast_ref::<T>() {
            Some(record) => self.0.on_element(record, window, count),
            None => TriggerResult::Continue,
        }
    }

    fn fires_at_end(&self) -> bool {
        self.0.fires_at_end()
    }
}

impl<K, T, F> WindowFn<K, T> for Triggered<F>
where
    K: 'static,
    T: Data,
    F: WindowFn<K, T>,
{
    type Acc = (F::Acc, u64);
    type Out = F::Out;
    type Late = F::Late;

    fn create(&self) -> Self::Acc {
        (self.function.create(), 0)
    }
    fn add(&self, acc: &mut Self::Acc, value: &T) {
        self.function.add(&mut acc.0, value);
        acc.1 += 1;
    }
    fn add_owned(&self, acc: &mut Self::Acc, value: T) {
        self.function.add_owned(&mut acc.0, value);
        acc.1 += 1;
    }
    fn fixed_window(&self, value: &T) -> Option<TimeWindow> {
        self.function.fixed_window(value)
    }
    fn late(&self, value: T) -> Option<Self::Late> {
        self.function.late(value)
    }
    fn merge(&self, acc: &mut Self::Acc, other: Self::Acc) {
        self.function.merge(&mut acc.0, other.0);
        acc.1 += other.1;
    }
    fn fire(
        &mut self,
        key: &K,
        window: TimeWindow,
        acc: &Self::Acc,
        update: bool,
        state: &mut FunctionState,
        out: &mut Collector<'_, Self::Out>,
    ) -> Result<()> {
        self.function.fire(key, window, &acc.0, update, state, out)
    }
    fn on_element(&self, acc: &Self::Acc, value: &T, window: TimeWindow) -> TriggerResult {
        self.trigger.on_element(value, window, acc.1 + 1)
    }
    fn fires_at_end(&self) -> bool {
        self.trigger.fires_at_end()
    }
}

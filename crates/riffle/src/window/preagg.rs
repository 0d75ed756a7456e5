//! Two-phase aggregation against skewed keys: before the shuffle, each upstream subtask folds the
//! records of every batch into one partial accumulator per key and window; the window operator
//! after the shuffle merges partials instead of adding records. One hot key (80% of the events,
//! the seed's anti-pattern) then costs the subtask that owns it one partial per batch, not 80%
//! of the stream.
//!
//! Pre-aggregation adapts: when the partials of a batch are not fewer than half its records
//! (keys spread evenly, nothing to fold), the operator passes records through unchanged for the
//! next batches and looks again later, so uniform keys do not pay for it.
//!
//! Correctness: a record whose windows the upstream watermark may already have closed is sent
//! as it is, so the window operator judges its lateness exactly as without pre-aggregation (and
//! late records reach the late side output unchanged). Partials are flushed at the end of every
//! batch, before any watermark is forwarded, so they are never late downstream.

use std::hash::Hash;
use std::marker::PhantomData;

use serde::{Deserialize, Serialize};

use crate::aggregate::AggregateFunction;
use crate::error::{Error, Result};
use crate::keys::KeyFn;
use crate::operators::adaptive::AdaptiveFold;
use crate::operators::{Collector, Operator};
use crate::record::{Data, MIN_WATERMARK, Record, Timestamp};
use crate::state::table::FastMap;
use crate::window::{AggregateWindow, TimeWindow, WindowFn, Windows};

/// What crosses the shuffle of a pre-aggregated window: a record, or a partial aggregate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PreAggregated<K, T, A> {
    /// A record to window after the shuffle.
    Record(T),
    /// The accumulator of some records of one key in one window.
    Partial {
        /// The key.
        key: K,
        /// The window.
        window: TimeWindow,
        /// The partial accumulator.
        acc: A,
    },
}

/// The upstream half: folds records into partials per batch.
pub(crate) struct PreAggregate<K, T, A: AggregateFunction<T>> {
    key: KeyFn<K, T>,
    windows: Windows,
    lateness: i64,
    /// The slide, when the window operator keeps slices ([`crate::window::WindowSettings::slicing`]):
    /// a record's partial is then of its slice, not of each of its windows.
    slide: Option<i64>,
    aggregate: A,
    partials: FastMap<(K, TimeWindow), A::Acc>,
    assigned: Vec<TimeWindow>,
    watermark: Timestamp,
    adaptive: AdaptiveFold,
}

impl<K, T, A: AggregateFunction<T>> PreAggregate<K, T, A> {
    pub(crate) fn new(key: KeyFn<K, T>, windows: Windows, lateness: i64, aggregate: A) -> Self {
        PreAggregate {
            key,
            windows,
            lateness,
            slide: None,
            aggregate,
            partials: FastMap::default(),
            assigned: Vec::new(),
            watermark: MIN_WATERMARK,
            adaptive: AdaptiveFold::default(),
        }
    }

    /// Folds each record into the partial of its slice (`[s, s + slide)`, `s` its latest
    /// window's start), for a window operator that keeps slices.
    pub(crate) fn sliced(mut self, slide: Option<i64>) -> Self {
        self.slide = slide;
        self
    }
}

impl<K, T, A> Operator for PreAggregate<K, T, A>
where
    K: Data + Hash + Eq,
    T: Data,
    A: AggregateFunction<T>,
{
    type In = T;
    type Out = PreAggregated<K, T, A::Acc>;

    fn process(
        &mut self,
        batch: &mut Vec<Record<T>>,
        out: &mut Collector<'_, Self::Out>,
    ) -> Result<()> {
        if self
            .adaptive
            .pass_through(batch, out, PreAggregated::Record)?
        {
            return Ok(());
        }
        let records = batch.len();
        for record in batch.drain(..) {
            let Some(time) = record.timestamp() else {
                return Err(Error::user(
                    "an event-time window received a record without a timestamp: give the source a \
                     WatermarkStrategy with timestamps (or use processing-time windows)",
                ));
            };
            // A record no window can hold passes as it is: the window operator dead-letters it.
            let placed = self.windows.assign(time, &mut self.assigned).is_ok();
            let closing = self
                .assigned
                .iter()
                .any(|w| w.max_timestamp().saturating_add(self.lateness) <= self.watermark);
            if closing || !placed {
                out.emit(Record {
                    timestamp: record.timestamp,
                    value: PreAggregated::Record(record.value),
                })?;
                continue;
            }
            let key = (self.key)(&record.value);
            if let (Some(slide), Some(latest)) = (self.slide, self.assigned.first()) {
                let slice = TimeWindow::new(latest.start, latest.start.saturating_add(slide));
                self.assigned.clear();
                self.assigned.push(slice);
            }
            for &window in &self.assigned {
                let acc = self
                    .partials
                    .entry((key.clone(), window))
                    .or_insert_with(|| self.aggregate.create());
                self.aggregate.add(acc, &record.value);
            }
        }
        self.adaptive.folded(records, self.partials.len());
        for ((key, window), acc) in self.partials.drain() {
            out.emit(Record::timed(
                PreAggregated::Partial { key, window, acc },
                window.result_time(),
            ))?;
        }
        Ok(())
    }

    fn on_watermark(
        &mut self,
        watermark: Timestamp,
        _out: &mut Collector<'_, Self::Out>,
    ) -> Result<()> {
        self.watermark = watermark;
        Ok(())
    }

    fn restore_state(&mut self, state: &crate::checkpoint::RestoreState) -> Result<()> {
        // Which records may be late is judged as before the failure.
        self.watermark = state.watermark().unwrap_or(self.watermark);
        Ok(())
    }
}

/// The downstream half: a window function over records and partials.
pub(crate) struct MergePartials<A, T>(pub(crate) AggregateWindow<A>, pub(crate) PhantomData<fn(T)>);

impl<K, T, A> WindowFn<K, PreAggregated<K, T, A::Acc>> for MergePartials<A, T>
where
    K: Data + Hash + Eq,
    T: Data,
    A: AggregateFunction<T>,
{
    type Acc = A::Acc;
    type Out = <AggregateWindow<A> as WindowFn<K, T>>::Out;
    type Late = T;

    fn create(&self) -> A::Acc {
        self.0.0.create()
    }

    fn add(&self, acc: &mut A::Acc, value: &PreAggregated<K, T, A::Acc>) {
        match value {
            PreAggregated::Record(record) => self.0.0.add(acc, record),
            PreAggregated::Partial { acc: partial, .. } => self.0.0.merge(acc, partial.clone()),
        }
    }

    fn add_owned(&self, acc: &mut A::Acc, value: PreAggregated<K, T, A::Acc>) {
        match value {
            PreAggregated::Record(record) => self.0.0.add(acc, &record),
            PreAggregated::Partial { acc: partial, .. } => self.0.0.merge(acc, partial),
        }
    }

    fn merge(&self, acc: &mut A::Acc, other: A::Acc) {
        self.0.0.merge(acc, other)
    }

    fn fixed_window(&self, value: &PreAggregated<K, T, A::Acc>) -> Option<TimeWindow> {
        match value {
            PreAggregated::Record(_) => None,
            PreAggregated::Partial { window, .. } => Some(*window),
        }
    }

    fn late(&self, value: PreAggregated<K, T, A::Acc>) -> Option<T> {
        match value {
            PreAggregated::Record(record) => Some(record),
            PreAggregated::Partial { .. } => None,
        }
    }

    fn fire(
        &mut self,
        key: &K,
        window: TimeWindow,
        acc: &A::Acc,
        update: bool,
        state: &mut super::function_state::FunctionState,
        out: &mut Collector<'_, Self::Out>,
    ) -> Result<()> {
        <AggregateWindow<A> as WindowFn<K, T>>::fire(
            &mut self.0,
            key,
            window,
            acc,
            update,
            state,
            out,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::Count;
    use crate::testing::OperatorHarness;
    use crate::window::Tumbling;
    use std::sync::Arc;
    use std::time::Duration;

    type Element = PreAggregated<u64, (u64, i64), u64>;

    fn harness() -> OperatorHarness<(u64, i64), Element> {
        let op = PreAggregate::new(
            Arc::new(|r: &(u64, i64)| r.0),
            Tumbling::of(Duration::from_secs(60)),
            0,
            Count,
        );
        OperatorHarness::builder(op).build().unwrap()
    }

    fn batch(records: impl IntoIterator<Item = (u64, i64)>) -> Vec<Record<(u64, i64)>> {
        records.into_iter().map(|r| Record::new(r, r.1)).collect()
    }

    #[test]
    fn a_skewed_batch_folds_into_one_partial_per_key_and_window() {
        let mut h = harness();
        let records: Vec<(u64, i64)> = (0..100)
            .map(|i| (if i % 10 == 0 { i } else { 7 }, 1_000 + i as i64))
            .collect();
        h.process_records(batch(records)).unwrap();
        let mut out = h.take_values();
        out.sort_by_key(|e| match e {
            PreAggregated::Partial { key, .. } => *key,
            PreAggregated::Record(_) => u64::MAX,
        });
        assert_eq!(out.len(), 11, "key 7 and ten others");
        assert!(out.contains(&PreAggregated::Partial {
            key: 7,
            window: TimeWindow::new(0, 60_000),
            acc: 90
        }));
    }

    #[test]
    fn uniform_batches_pass_through_for_a_while() {
        let mut h = harness();
        h.process_records(batch((0..100).map(|i| (i, 1_000))))
            .unwrap();
        assert_eq!(
            h.take_values().len(),
            100,
            "one partial per key: nothing folded"
        );
        h.process_records(batch((0..100).map(|_| (5, 1_000))))
            .unwrap();
        let out = h.take_values();
        assert_eq!(out.len(), 100, "the next batches pass through");
        assert!(
            out.iter()
                .all(|e| matches!(e, PreAggregated::Record((5, 1_000))))
        );
    }

    #[test]
    fn records_of_windows_the_watermark_may_have_closed_go_unfolded() {
        let mut h = harness();
        h.watermark(70_000).unwrap();
        h.process_records(batch([(1, 1_000), (1, 61_000)])).unwrap();
        assert_eq!(
            h.take_values(),
            vec![
                PreAggregated::Record((1, 1_000)),
                PreAggregated::Partial {
                    key: 1,
                    window: TimeWindow::new(60_000, 120_000),
                    acc: 1
                }
            ]
        );
    }
}

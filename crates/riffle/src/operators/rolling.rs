//! Rolling keyed aggregates (Flink's `keyBy(..).sum(..)`): one accumulator per key, and the
//! updated result emitted as records arrive.
//!
//! Two phases, as for windows: before the shuffle each upstream subtask folds a batch into one
//! partial per key (stepping aside when batches do not shrink); after it, the keyed operator
//! merges partials into its state and emits the key's new result once per partial. The results
//! seen for a key are then fewer (intermediate values inside a batch are skipped), the final
//! value per key is the same.

use std::hash::Hash;
use std::marker::PhantomData;

use serde::{Deserialize, Serialize};

use crate::aggregate::AggregateFunction;
use crate::checkpoint::{RestoreState, SnapshotWriter};
use crate::error::Result;
use crate::keys::KeyFn;
use crate::keys::KeyGroup;
use crate::operators::adaptive::AdaptiveFold;
use crate::operators::keyed::KeyedRuntime;
use crate::operators::{
    BuildOperator, Collector, KeyedTable, NoGroupState, Operator, OperatorContext,
};
use crate::record::{Data, Record};
use crate::state::table::FastMap;

/// What crosses the shuffle of a rolling aggregate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Rolling<K, T, A> {
    /// A record, not folded.
    Record(T),
    /// Records of one key folded into an accumulator.
    Partial {
        /// The key.
        key: K,
        /// The partial accumulator.
        acc: A,
    },
}

/// The upstream half: folds each batch into one partial per key.
pub(crate) struct RollingCombine<K, T, A: AggregateFunction<T>> {
    key: KeyFn<K, T>,
    aggregate: A,
    partials: FastMap<K, (A::Acc, Option<crate::record::EventTime>)>,
    adaptive: AdaptiveFold,
}

impl<K, T, A: AggregateFunction<T>> RollingCombine<K, T, A> {
    pub(crate) fn new(key: KeyFn<K, T>, aggregate: A) -> Self {
        RollingCombine {
            key,
            aggregate,
            partials: FastMap::default(),
            adaptive: AdaptiveFold::default(),
        }
    }
}

impl<K: Data + Hash + Eq, T: Data, A: AggregateFunction<T>> Operator for RollingCombine<K, T, A> {
    type In = T;
    type Out = Rolling<K, T, A::Acc>;

    fn process(
        &mut self,
        batch: &mut Vec<Record<T>>,
        out: &mut Collector<'_, Self::Out>,
    ) -> Result<()> {
        if self.adaptive.pass_through(batch, out, Rolling::Record)? {
            return Ok(());
        }
        let records = batch.len();
        for record in batch.drain(..) {
            let key = (self.key)(&record.value);
            let (acc, timestamp) = self
                .partials
                .entry(key)
                .or_insert_with(|| (self.aggregate.create(), record.timestamp));
            self.aggregate.add(acc, &record.value);
            *timestamp = (*timestamp).max(record.timestamp);
        }
        self.adaptive.folded(records, self.partials.len());
        for (key, (acc, timestamp)) in self.partials.drain() {
            out.emit(Record {
                value: Rolling::Partial { key, acc },
                timestamp,
            })?;
        }
        Ok(())
    }
}

/// The downstream half as the job declares it: built on each subtask into a
/// [`OpenRollingAggregate`] with the subtask's keyed state.
pub(crate) struct RollingAggregate<K, T, A: AggregateFunction<T>> {
    key: KeyFn<K, Rolling<K, T, A::Acc>>,
    aggregate: A,
}

impl<K, T, A: AggregateFunction<T>> RollingAggregate<K, T, A> {
    pub(crate) fn new(key: KeyFn<K, Rolling<K, T, A::Acc>>, aggregate: A) -> Self {
        RollingAggregate { key, aggregate }
    }
}

impl<K: Data + Hash + Eq, T: Data, A: AggregateFunction<T>> BuildOperator
    for RollingAggregate<K, T, A>
{
    type Operator = OpenRollingAggregate<K, T, A>;

    fn build(self, ctx: &OperatorContext) -> Result<Self::Operator> {
        Ok(OpenRollingAggregate {
            key: self.key,
            aggregate: self.aggregate,
            runtime: KeyedRuntime::new(ctx),
            table: KeyedTable::declare(ctx, "rolling"),
            _type: PhantomData,
        })
    }
}

/// The downstream half: the keyed state and the emitted results.
pub(crate) struct OpenRollingAggregate<K, T, A: AggregateFunction<T>> {
    key: KeyFn<K, Rolling<K, T, A::Acc>>,
    aggregate: A,
    runtime: KeyedRuntime<K>,
    /// The accumulator per key.
    table: KeyedTable<K, (), A::Acc>,
    _type: PhantomData<fn(T)>,
}

impl<K: Data + Hash + Eq, T: Data, A: AggregateFunction<T>> Operator
    for OpenRollingAggregate<K, T, A>
{
    type In = Rolling<K, T, A::Acc>;
    type Out = (K, A::Out);

    fn process(
        &mut self,
        batch: &mut Vec<Record<Self::In>>,
        out: &mut Collector<'_, Self::Out>,
    ) -> Result<()> {
        let (runtime, table) = (&self.runtime, &mut self.table);
        for record in batch.drain(..) {
            let key = (self.key)(&record.value);
            let key_group: KeyGroup = runtime.key_group(&key)?;
            let aggregate = &self.aggregate;
            let result = table.update(
                key_group,
                &key,
                &(),
                || aggregate.create(),
                |acc| {
                    match record.value {
                        Rolling::Record(value) => aggregate.add(acc, &value),
                        Rolling::Partial { acc: partial, .. } => aggregate.merge(acc, partial),
                    }
                    Ok(aggregate.result(acc))
                },
            )?;
            out.emit(Record {
                value: (key, result),
                timestamp: record.timestamp,
            })?;
        }
        let (entries, bytes) = table.size();
        runtime.report_size(entries, bytes);
        Ok(())
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64, snapshot: &mut SnapshotWriter) -> Result<()> {
        self.table.snapshot(snapshot, &NoGroupState)
    }

    fn restore_state(&mut self, state: &RestoreState) -> Result<()> {
        self.table.restore(state, &mut NoGroupState)
    }
}

#[cfg(test)]
mod tests {
    use crate::aggregate::Sum;
    use crate::sink::CollectSink;
    use crate::{EnvConfig, StreamEnv};
    use std::collections::BTreeMap;

    #[test]
    fn the_last_result_per_key_is_the_total_with_any_skew_and_parallelism() {
        for parallelism in [1, 3] {
            let env = StreamEnv::with_config(EnvConfig {
                parallelism,
                buffer_size: 128,
                ..EnvConfig::default()
            });
            let (sink, out) = CollectSink::new();
            let values: Vec<(u64, u64)> = (0..20_000u64)
                .map(|i| (if i % 5 == 0 { i % 100 } else { 7 }, i))
                .collect();
            env.from_iter(values.clone())
                .key_by(|v| v.0)
                .aggregate(Sum::of(|v: &(u64, u64)| v.1))
                .sink(sink);
            env.execute().unwrap();
            let mut last = BTreeMap::new();
            let by_subtask = out.records_by_subtask();
            for (_, record) in by_subtask {
                let (key, total): (u64, u64) = record.value;
                // Results of a key come from one subtask, in order: running totals only grow.
                assert!(last.get(&key).is_none_or(|previous| *previous <= total));
                last.insert(key, total);
            }
            let mut truth = BTreeMap::new();
            for (key, value) in values {
                *truth.entry(key).or_insert(0) += value;
            }
            assert_eq!(last, truth, "parallelism {parallelism}");
            assert!(
                out.len() < 20_000,
                "the hot key's updates were folded: {}",
                out.len()
            );
        }
    }
}

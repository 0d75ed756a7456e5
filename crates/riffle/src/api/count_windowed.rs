//! [`CountWindowedStream`]: a keyed stream cut into windows of a number of records per key
//! (Flink's `countWindow`), and the functions over them.
//!
//! A tumbling count window fires when its key has `size` records and then starts empty; a
//! sliding one fires every `slide` records over the key's last `size` records (fewer at the
//! start). Windows are kept in keyed state, so they are part of checkpoints and rescale with
//! their key groups. As in Flink, a window that is not full when the input ends is not emitted.
//! Which records share a window depends on their arrival order per key: with several upstream
//! subtasks that order varies from run to run (time windows do not have this property).

use std::hash::Hash;

use crate::aggregate::AggregateFunction;
use crate::api::KeyedStream;
use crate::api::stream::DataStream;
use crate::error::Result;
use crate::operators::KeyedContext;
use crate::record::Data;
use crate::window::CountWindow;

/// A keyed stream cut into count windows; finish it with [`process`](CountWindowedStream::process),
/// [`aggregate`](CountWindowedStream::aggregate) or [`reduce`](CountWindowedStream::reduce).
///
/// ```
/// use riffle::{EnvConfig, StreamEnv, aggregate::Sum, sink::CollectSink};
/// // One source subtask: each key's records arrive in input order.
/// let env = StreamEnv::with_config(EnvConfig::deterministic());
/// let (sink, out) = CollectSink::new();
/// // (sensor, reading): the sum of every 3 readings of a sensor.
/// env.from_iter(vec![(1u32, 1u64), (1, 2), (2, 10), (1, 3), (1, 4), (2, 20)])
///     .key_by(|r| r.0)
///     .count_window(3)
///     .aggregate(Sum::of(|r: &(u32, u64)| r.1))
///     .sink(sink);
/// env.execute().unwrap();
/// // Sensor 1's fourth reading and sensor 2's two wait for a full window: not emitted.
/// assert_eq!(out.values(), vec![(1, 6)]);
/// ```
pub struct CountWindowedStream<K, T> {
    keyed: KeyedStream<K, T>,
    size: u64,
    slide: u64,
}

impl<K, T> CountWindowedStream<K, T>
where
    K: Data + Hash + Eq,
    T: Data + Sync,
{
    pub(crate) fn new(keyed: KeyedStream<K, T>, size: u64, slide: u64) -> Self {
        if size == 0 || slide == 0 {
            keyed.input().env.defer_error(format!(
                "count windows need a size and a slide of at least one record, got size {size}, slide {slide}"
            ));
        }
        CountWindowedStream { keyed, size, slide }
    }

    /// Calls the closure `function(key, records, ctx)` with the records of each full window of
    /// a key, oldest first; `ctx` emits (with the last record's timestamp), reaches keyed state
    /// and side outputs.
    ///
    /// ```
    /// use riffle::{EnvConfig, StreamEnv, sink::CollectSink};
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, out) = CollectSink::new();
    /// // Every 2 clicks of a user, over their last 3 clicks.
    /// env.from_iter(vec![(7u64, 'a'), (7, 'b'), (7, 'c'), (7, 'd'), (7, 'e')])
    ///     .key_by(|c| c.0)
    ///     .count_window_sliding(3, 2)
    ///     .process(|user, clicks, ctx| {
    ///         ctx.emit(format!("{user}: {}", clicks.iter().map(|c| c.1).collect::<String>()))
    ///     })
    ///     .sink(sink);
    /// env.execute().unwrap();
    /// assert_eq!(out.values(), vec!["7: ab", "7: bcd"]);
    /// ```
    pub fn process<Out, F>(self, function: F) -> DataStream<Out>
    where
        Out: Data,
        F: FnMut(&K, &[T], &mut KeyedContext<'_, '_, K, Out>) -> Result<()>
            + Clone
            + Send
            + Sync
            + 'static,
    {
        self.keyed
            .process_function(CountWindow::new(self.size, self.slide, function))
    }

    /// Aggregates each full window: `(key, result)` per window.
    pub fn aggregate<A>(self, aggregate: A) -> DataStream<(K, A::Out)>
    where
        A: AggregateFunction<T> + Clone,
    {
        self.process(move |key, records, ctx| {
            let mut acc = aggregate.create();
            for record in records {
                aggregate.add(&mut acc, record);
            }
            ctx.emit((key.clone(), aggregate.result(&acc)))
        })
    }

    /// Combines the records of each full window pairwise, `combine(accumulated, next)`.
    pub fn reduce(
        self,
        combine: impl Fn(T, T) -> T + Clone + Send + Sync + 'static,
    ) -> DataStream<T> {
        self.process(move |_, records, ctx| {
            let mut records = records.iter().cloned();
            match records.next() {
                Some(first) => ctx.emit(records.fold(first, &combine)),
                None => Ok(()),
            }
        })
    }
}

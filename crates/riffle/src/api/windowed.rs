//! [`WindowedStream`]: a keyed stream cut into windows, and the aggregations over them.

use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::aggregate::{AggregateFunction, Max, MaxBy, Min, MinBy, Number, Reduce, Sum};
use crate::api::KeyedStream;
use crate::api::stream::DataStream;
use crate::error::Result;
use crate::operators::OutputTag;
use crate::record::Data;
use crate::window::{
    AggregateWindow, Evictor, MergePartials, PreAggregate, PreAggregated, ProcessWindow,
    ProcessWindowFunction, TimeWindow, Trigger, TriggerAny, Triggered, Typed, WindowCollector,
    WindowFn, WindowResult, WindowSettings, Windows, window_operator,
};

/// A keyed stream cut into windows. Finish it with [`aggregate`](WindowedStream::aggregate) or
/// [`process`](WindowedStream::process).
///
/// ```
/// use std::time::Duration;
/// use riffle::{StreamEnv, OutputTag, aggregate::Count, window::Tumbling};
/// use riffle_clicks::{Click, ClicksConfig};
/// use riffle::time::WatermarkStrategy;
///
/// let env = StreamEnv::new();
/// let late = OutputTag::<Click>::new("late-clicks");
/// let counts = env
///     .from_source_with_watermarks(
///         riffle_clicks::source(ClicksConfig::default()).count(10_000),
///         WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(5)).with_timestamps(|c: &Click| c.event_time),
///     )
///     .key_by(|click| click.user_id)
///     .window(Tumbling::of(Duration::from_secs(60)))
///     .allowed_lateness(Duration::from_secs(30))
///     .side_output_late(&late)
///     .aggregate(Count);
/// let late_clicks = counts.get_side_output(&late);
/// ```
pub struct WindowedStream<K, T> {
    keyed: KeyedStream<K, T>,
    settings: WindowSettings<T>,
    pre_aggregate: bool,
    trigger: Option<Arc<dyn TriggerAny>>,
    evictor: Option<Arc<dyn Evictor<T>>>,
}

impl<K, T> WindowedStream<K, T>
where
    K: Data + Hash + Eq,
    T: Data,
{
    pub(crate) fn new(keyed: KeyedStream<K, T>, windows: Windows) -> Self {
        WindowedStream {
            keyed,
            settings: WindowSettings::new(windows),
            pre_aggregate: true,
            trigger: None,
            evictor: None,
        }
    }

    /// Keeps each window's state for `lateness` after it fired: a late record within it updates
    /// the window's result (marked as an update). Event time only.
    pub fn allowed_lateness(mut self, lateness: Duration) -> Self {
        self.settings.allowed_lateness(lateness);
        self
    }

    /// Sends records too late for every window they belong to to the side output `tag` (read it
    /// with `get_side_output(&tag)` on the result). Without it they are counted in
    /// `late_records_dropped` and logged.
    pub fn side_output_late(mut self, tag: &OutputTag<T>) -> Self {
        self.settings.side_output_late(tag);
        self
    }

    /// Also emits the current results of open windows every `every` of processing time (only
    /// those that changed); the final result follows when the window ends, marked as an update.
    pub fn early_firing(mut self, every: Duration) -> Self {
        self.settings.early_firing(every);
        self
    }

    /// Fires windows with a custom [`Trigger`] too (tumbling and sliding windows): it sees each
    /// record added to a key's window and may fire it, and purge it, at once; and it says
    /// whether the window still fires at its end (see [`CountTrigger`](crate::window::CountTrigger),
    /// [`Purging`](crate::window::Purging)). Windows with a trigger are not pre-aggregated.
    pub fn trigger<Tr: Trigger<T>>(mut self, trigger: Tr) -> Self {
        if self.settings.windows.is_merging() {
            self.keyed.input().env.defer_error(
                "custom triggers apply to tumbling and sliding windows, not to session windows"
                    .to_string(),
            );
        }
        self.trigger = Some(Arc::new(Typed(trigger, PhantomData)));
        self
    }

    /// Removes records from what [`process`](WindowedStream::process) sees when a window fires
    /// (see [`CountEvictor`](crate::window::CountEvictor) and
    /// [`TimeEvictor`](crate::window::TimeEvictor)); the window's state keeps them until it is
    /// purged. Full-window functions only.
    ///
    /// ```
    /// use std::time::Duration;
    /// use riffle::{EnvConfig, StreamEnv, sink::CollectSink, time::WatermarkStrategy};
    /// use riffle::window::{CountEvictor, Tumbling};
    ///
    /// // The last 2 clicks of each user and minute.
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, out) = CollectSink::new();
    /// env.from_iter_with_watermarks(
    ///     vec![(1u64, 1_000i64), (1, 2_000), (1, 3_000)],
    ///     WatermarkStrategy::monotonous().with_timestamps(|c: &(u64, i64)| c.1),
    /// )
    /// .key_by(|c| c.0)
    /// .window(Tumbling::of(Duration::from_secs(60)))
    /// .evictor(CountEvictor::of(2))
    /// .process(|_, _, clicks, out| out.emit(clicks.iter().map(|c| c.1).collect::<Vec<_>>()))
    /// .sink(sink);
    /// env.execute().unwrap();
    /// assert_eq!(out.values(), vec![vec![2_000, 3_000]]);
    /// ```
    pub fn evictor<E: Evictor<T>>(mut self, evictor: E) -> Self {
        self.evictor = Some(Arc::new(evictor));
        self
    }

    /// Whether [`aggregate`](WindowedStream::aggregate) pre-aggregates before the shuffle (on
    /// by default for event-time tumbling and sliding windows): each upstream subtask folds
    /// every batch into one partial per key and window, so a hot key does not overload the
    /// subtask that owns it. Results are the same either way.
    pub fn pre_aggregate(mut self, enabled: bool) -> Self {
        self.pre_aggregate = enabled;
        self
    }

    /// Keeps sliding windows as slices, as Flink SQL does for `HOP`: each key's records of one
    /// slide are aggregated once, into the accumulator of their slice, instead of once per
    /// window they are in (`size / slide` times), and a window's result is the merge of its
    /// slices' accumulators when it fires. Results are the same when the aggregate's `merge`
    /// gives what adding the records one by one gives, in any grouping (counts, sums of
    /// integers, minimums, maximums; not a sum of floats to the last bit, nor a first-or-last
    /// record on a tie).
    ///
    /// Applies to [`aggregate`](WindowedStream::aggregate) over event-time sliding windows
    /// whose size is a multiple of their slide, without allowed lateness, early firing or a
    /// custom trigger; otherwise windows are kept whole, as without it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use riffle::{EnvConfig, StreamEnv, aggregate::Count, sink::CollectSink};
    /// use riffle::{time::WatermarkStrategy, window::Sliding};
    ///
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, out) = CollectSink::new();
    /// env.from_iter_with_watermarks(
    ///     vec![(1u64, 1_000i64), (1, 2_500), (1, 4_000)],
    ///     WatermarkStrategy::monotonous().with_timestamps(|r: &(u64, i64)| r.1),
    /// )
    /// .key_by(|r| r.0)
    /// .window(Sliding::of(Duration::from_secs(4), Duration::from_secs(2)))
    /// .sliced()
    /// .aggregate(Count)
    /// .map(|r| (r.window_start, r.value))
    /// .sink(sink);
    /// env.execute().unwrap();
    /// assert_eq!(out.values(), vec![(-2_000, 1), (0, 2), (2_000, 2), (4_000, 1)]);
    /// ```
    pub fn sliced(mut self) -> Self {
        self.settings.sliced = true;
        self
    }

    /// Aggregates each window incrementally: one accumulator per key and window (per key and
    /// slice when [`sliced`](WindowedStream::sliced)).
    pub fn aggregate<A: AggregateFunction<T> + Clone>(
        mut self,
        aggregate: A,
    ) -> DataStream<WindowResult<K, A::Out>> {
        if self.evictor.is_some() {
            self.keyed.input().env.defer_error(
                "an evictor applies to full-window functions (process), not to aggregate"
                    .to_string(),
            );
        }
        if let Some(trigger) = self.trigger.clone() {
            // A trigger sees each record added to each window: windows are kept whole.
            self.settings.sliced = false;
            return self.build("Window", move || Triggered {
                function: AggregateWindow(aggregate.clone()),
                trigger: trigger.clone(),
            });
        }
        let windows = self.settings.windows;
        if !(self.pre_aggregate
            && !windows.is_merging()
            && windows.time() == crate::window::TimeDomain::EventTime)
        {
            return self.build("Window", move || AggregateWindow(aggregate.clone()));
        }
        if let Err(error) = windows.validate() {
            self.keyed.input().env.defer_error(error.to_string());
        }
        // Phase one, chained before the shuffle; phase two, the window operator, merges partials.
        let key = self.keyed.key_selector();
        let (for_partials, lateness, first) =
            (key.clone(), self.settings.lateness, aggregate.clone());
        let slide = self.settings.slicing().map(|(_, slide)| slide);
        let partials = self
            .keyed
            .input()
            .forward()
            .transform("Pre-aggregate", move || {
                PreAggregate::new(for_partials.clone(), windows, lateness, first.clone())
                    .sliced(slide)
            });
        let described = self.described();
        let settings = self.settings;
        let keyed = partials.key_by(move |element: &PreAggregated<K, T, A::Acc>| match element {
            PreAggregated::Record(record) => key(record),
            PreAggregated::Partial { key, .. } => key.clone(),
        });
        let key_of = keyed.key_selector();
        declared(
            with_dead_letters(keyed.add_keyed("Window", move || {
                window_operator(
                    key_of.clone(),
                    settings.clone(),
                    MergePartials(AggregateWindow(aggregate.clone()), PhantomData),
                )
            })),
            described,
        )
    }

    /// Combines the records of each window pairwise, `combine(accumulated, next)`: one
    /// [`WindowResult`] with the reduced record per key and window.
    pub fn reduce(
        self,
        combine: impl Fn(T, T) -> T + Send + Sync + 'static,
    ) -> DataStream<WindowResult<K, T>>
    where
        T: Sync,
    {
        self.aggregate(Reduce::new(combine))
    }

    /// The sum of a numeric field per key and window.
    pub fn sum<N: Number>(
        self,
        field: impl Fn(&T) -> N + Send + Sync + 'static,
    ) -> DataStream<WindowResult<K, N>> {
        self.aggregate(Sum::of(field))
    }

    /// The smallest value of a numeric field per key and window.
    pub fn min<N: Number>(
        self,
        field: impl Fn(&T) -> N + Send + Sync + 'static,
    ) -> DataStream<WindowResult<K, N>> {
        self.aggregate(Min::of(field))
            .flat_map(|r| r.value.map(|value| r.with_value(value)))
    }

    /// The largest value of a numeric field per key and window.
    pub fn max<N: Number>(
        self,
        field: impl Fn(&T) -> N + Send + Sync + 'static,
    ) -> DataStream<WindowResult<K, N>> {
        self.aggregate(Max::of(field))
            .flat_map(|r| r.value.map(|value| r.with_value(value)))
    }

    /// The record with the smallest value of a numeric field per key and window (the first on
    /// a tie).
    ///
    /// ```
    /// use std::time::Duration;
    /// use riffle::{EnvConfig, StreamEnv, sink::CollectSink, time::WatermarkStrategy, window::Tumbling};
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, out) = CollectSink::new();
    /// // (sensor, temperature, time): the coldest reading per sensor and minute.
    /// env.from_iter_with_watermarks(
    ///     vec![(1u32, 20.5, 1_000i64), (1, 18.0, 2_000), (2, 30.0, 3_000), (1, 19.0, 61_000)],
    ///     WatermarkStrategy::monotonous().with_timestamps(|r: &(u32, f64, i64)| r.2),
    /// )
    /// .key_by(|r| r.0)
    /// .window(Tumbling::of(Duration::from_secs(60)))
    /// .min_by(|r| r.1)
    /// .map(|r| r.value)
    /// .sink(sink);
    /// env.execute().unwrap();
    /// let mut coldest = out.values();
    /// coldest.sort_by(|a, b| a.partial_cmp(b).unwrap());
    /// assert_eq!(coldest, vec![(1, 18.0, 2_000), (1, 19.0, 61_000), (2, 30.0, 3_000)]);
    /// ```
    pub fn min_by<N: Number>(
        self,
        field: impl Fn(&T) -> N + Send + Sync + 'static,
    ) -> DataStream<WindowResult<K, T>>
    where
        T: Sync,
    {
        self.aggregate(MinBy::of(field))
    }

    /// The record with the largest value of a numeric field per key and window (the first on
    /// a tie).
    pub fn max_by<N: Number>(
        self,
        field: impl Fn(&T) -> N + Send + Sync + 'static,
    ) -> DataStream<WindowResult<K, T>>
    where
        T: Sync,
    {
        self.aggregate(MaxBy::of(field))
    }

    /// Calls the closure `function(key, window, records, out)` with all the records of each
    /// window of each key, when the window fires (again, with every record, when a late record
    /// within the allowed lateness updates it). Its parameter types are inferred.
    ///
    /// ```
    /// use std::time::Duration;
    /// use riffle::{EnvConfig, StreamEnv, sink::CollectSink, time::WatermarkStrategy, window::Tumbling};
    ///
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, output) = CollectSink::new();
    /// env.from_iter_with_watermarks(
    ///     vec![(1u64, 'a', 1_000i64), (1, 'b', 2_000), (2, 'a', 3_000), (1, 'c', 61_000)],
    ///     WatermarkStrategy::monotonous().with_timestamps(|c: &(u64, char, i64)| c.2),
    /// )
    /// .key_by(|click| click.0)
    /// .window(Tumbling::of(Duration::from_secs(60)))
    /// .process(|user, window, clicks, out| {
    ///     let pages: String = clicks.iter().map(|c| c.1).collect();
    ///     out.emit(format!("user {user} from {}: {pages}", window.start))
    /// })
    /// .sink(sink);
    /// env.execute().unwrap();
    /// assert_eq!(
    ///     output.sorted(),
    ///     vec!["user 1 from 0: ab", "user 1 from 60000: c", "user 2 from 0: a"]
    /// );
    /// ```
    pub fn process<Out, F>(self, function: F) -> DataStream<Out>
    where
        Out: Data,
        F: FnMut(&K, TimeWindow, &[T], &mut WindowCollector<'_, '_, Out>) -> Result<()>
            + Clone
            + Send
            + Sync
            + 'static,
    {
        self.process_function(function)
    }

    /// Calls a [`ProcessWindowFunction`] (a struct) with all the records of each window, as
    /// Flink's `process(ProcessWindowFunction)`.
    pub fn process_function<Out, P>(mut self, function: P) -> DataStream<Out>
    where
        Out: Data,
        P: ProcessWindowFunction<K, T, Out> + Clone + Sync,
    {
        // A full-window function sees its window's records in order: windows are kept whole.
        self.settings.sliced = false;
        let evictor = self.evictor.clone();
        let make = move || ProcessWindow::new(function.clone(), evictor.clone());
        match self.trigger.clone() {
            Some(trigger) => self.build("Window", move || Triggered {
                function: make(),
                trigger: trigger.clone(),
            }),
            None => self.build("Window", make),
        }
    }

    fn build<F, M>(self, name: &str, make: M) -> DataStream<F::Out>
    where
        F: WindowFn<K, T, Late = T>,
        M: Fn() -> F + Send + Sync + 'static,
    {
        let described = self.described();
        let settings = self.settings;
        if let Err(error) = settings.windows.validate() {
            self.keyed.input().env.defer_error(error.to_string());
        }
        let key = self.keyed.key_selector();
        declared(
            with_dead_letters(self.keyed.add_keyed(name, move || {
                window_operator(key.clone(), settings.clone(), make())
            })),
            described,
        )
    }

    /// The window's settings that change its state or results, for the job's fingerprint.
    fn described(&self) -> Vec<(String, String)> {
        let settings = &self.settings;
        let mut described = vec![
            ("window".to_string(), settings.windows.describe()),
            (
                "allowed lateness".to_string(),
                crate::util::millis_text(settings.lateness),
            ),
        ];
        if let Some(every) = settings.early_every {
            described.push(("early firing".to_string(), crate::util::millis_text(every)));
        }
        if self.trigger.is_some() {
            described.push(("trigger".to_string(), "custom".to_string()));
        }
        if self.evictor.is_some() {
            described.push(("evictor".to_string(), "custom".to_string()));
        }
        // Slices are another layout of the window's state.
        if let Some((_, slide)) = settings.slicing() {
            described.push((
                "window state".to_string(),
                format!("slices of {}", crate::util::millis_text(slide)),
            ));
        }
        described
    }
}

/// `stream`'s operator with its `settings` declared (for the job's fingerprint).
fn declared<T>(stream: DataStream<T>, settings: Vec<(String, String)>) -> DataStream<T> {
    stream.env.nodes.borrow_mut()[stream.node]
        .settings
        .extend(settings);
    stream
}

/// A window operator sends the records no window can hold (their windows would reach beyond the
/// `i64` millisecond range) to its dead letters: [`DataStream::dead_letters`] of the window's
/// stream, or else files under the job's `dead_letter_dir`.
fn with_dead_letters<T>(stream: DataStream<T>) -> DataStream<T> {
    stream.env.nodes.borrow_mut()[stream.node].bad_records =
        Some(crate::bad_records::BadRecordPolicy::DeadLetter);
    stream
}

//! Windows on keyed streams: tumbling, sliding and session windows, in event time or processing
//! time, with incremental aggregation or a full-window function, allowed lateness (late records
//! within it update the result, later ones go to a side output or are counted), early firings,
//! and pre-aggregation before the shuffle against skewed keys.
//!
//! ```
//! use std::time::Duration;
//! use riffle::{StreamEnv, sink::CollectSink, time::WatermarkStrategy, window::Tumbling, aggregate::Count};
//!
//! let env = StreamEnv::new();
//! let (sink, out) = CollectSink::new();
//! // (user, event time in ms)
//! let clicks = vec![(1u64, 1_000i64), (1, 59_000), (2, 30_000), (1, 61_000)];
//! env.from_source_with_watermarks(
//!         riffle::source::collection::CollectionSource::new(clicks),
//!         WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(5)).with_timestamps(|c: &(u64, i64)| c.1),
//!     )
//!     .key_by(|c| c.0)
//!     .window(Tumbling::of(Duration::from_secs(60)))
//!     .aggregate(Count)
//!     .map(|r| (r.key, r.window_start, r.value))
//!     .sink(sink);
//! env.execute().unwrap();
//! assert_eq!(out.sorted(), vec![(1, 0, 2), (1, 60_000, 1), (2, 0, 1)]);
//! ```

mod count;
pub(crate) mod function_state;
mod operator;
mod preagg;
mod session;
mod trigger;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::operators::Collector;
use crate::record::{Data, Record, Timestamp};
pub use crate::state::TimeDomain;

pub(crate) use count::CountWindow;
pub use function_state::StateScope;
use operator::WindowOperator;
pub use preagg::PreAggregated;
pub(crate) use preagg::{MergePartials, PreAggregate};
use session::SessionWindowOperator;
pub use trigger::{
    CountEvictor, CountTrigger, Evictor, Purging, TimeEvictor, Trigger, TriggerResult,
};
pub(crate) use trigger::{TriggerAny, Triggered, Typed};

/// A time window `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TimeWindow {
    /// First millisecond of the window.
    pub start: Timestamp,
    /// First millisecond after the window.
    pub end: Timestamp,
}

impl TimeWindow {
    /// The window `[start, end)`.
    pub fn new(start: Timestamp, end: Timestamp) -> Self {
        TimeWindow { start, end }
    }

    /// The last millisecond in the window: results carry it as their timestamp, and the window
    /// fires when the watermark reaches it.
    pub fn max_timestamp(&self) -> Timestamp {
        self.end.saturating_sub(1)
    }

    /// The event time of the window's results: its last millisecond.
    pub(crate) fn result_time(&self) -> Option<crate::record::EventTime> {
        crate::record::EventTime::new(self.max_timestamp())
    }

    /// Whether the two windows overlap or touch (sessions that do are merged).
    pub fn intersects(&self, other: &TimeWindow) -> bool {
        self.start <= other.end && self.end >= other.start
    }

    /// The smallest window covering both.
    pub fn cover(&self, other: &TimeWindow) -> TimeWindow {
        TimeWindow {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }
}

impl PartialOrd for TimeWindow {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Windows are ordered by their end: the order in which they fire.
impl Ord for TimeWindow {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.end, self.start).cmp(&(other.end, other.start))
    }
}

/// Which windows a keyed stream is cut into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Windows {
    /// Fixed-size, non-overlapping windows.
    Tumbling {
        /// Window length in ms.
        size: i64,
        /// Shift of the window boundaries from the epoch, in ms.
        offset: i64,
        /// Event or processing time.
        time: TimeDomain,
    },
    /// Fixed-size windows starting every `slide` ms (a record is in `size / slide` windows).
    Sliding {
        /// Window length in ms.
        size: i64,
        /// Distance between window starts in ms.
        slide: i64,
        /// Shift of the window boundaries from the epoch, in ms.
        offset: i64,
        /// Event or processing time.
        time: TimeDomain,
    },
    /// Windows that grow by `step` ms from a common start up to `max_size` ms, then start over
    /// (Flink SQL's `CUMULATE`): `[s, s + step)`, `[s, s + 2 step)`, .. `[s, s + max_size)`, the
    /// starts `s` aligned to `max_size`. A record is in every window of its cycle that ends after
    /// it; each fires when the watermark passes its end, so a day's running total is out every
    /// `step`.
    Cumulating {
        /// The largest window, in ms (a multiple of `step`).
        max_size: i64,
        /// How much each window of a cycle is longer than the one before, in ms.
        step: i64,
        /// Shift of the cycles' starts from the epoch, in ms.
        offset: i64,
        /// Event or processing time.
        time: TimeDomain,
    },
    /// Per key, records closer than `gap` ms belong to one session; sessions grow and merge.
    Session {
        /// Inactivity that ends a session, in ms.
        gap: i64,
        /// Event or processing time.
        time: TimeDomain,
    },
}

/// Milliseconds of `duration`, saturating at `i64::MAX` (a longer duration is no valid size).
fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// A record whose windows do not fit in the `i64` millisecond range: a window would start before
/// `i64::MIN` or end after `i64::MAX`. The window operator sends such a record to its dead
/// letters with this reason; nothing wraps around.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unplaceable {
    /// The record's event (or processing) time.
    pub timestamp: Timestamp,
    /// Start of the window that does not fit.
    pub start: i128,
    /// End (exclusive) of the window that does not fit.
    pub end: i128,
}

impl std::fmt::Display for Unplaceable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "time {} ms cannot be placed in a window: its window [{}, {}) reaches beyond the \
             timestamp range {}..={} ms",
            self.timestamp,
            self.start,
            self.end,
            i64::MIN,
            i64::MAX
        )
    }
}

impl std::error::Error for Unplaceable {}

/// The start of the window of `period` (a size or a slide), shifted by `offset`, that holds
/// `timestamp`: in `i64` when nothing overflows (every time but those within a period of the
/// ends of the range; an `i128` remainder is a library call, several times slower), exactly in
/// `i128` otherwise.
#[inline]
fn aligned_start(timestamp: Timestamp, offset: i64, period: i64) -> i128 {
    let fast = timestamp
        .checked_sub(offset)
        .and_then(|shifted| timestamp.checked_sub(shifted.rem_euclid(period)));
    match fast {
        Some(start) => i128::from(start),
        None => {
            let ts = i128::from(timestamp);
            ts - (ts - i128::from(offset)).rem_euclid(i128::from(period))
        }
    }
}

/// The window `[start, end)` if both bounds fit in an `i64`.
fn window_at(timestamp: Timestamp, start: i128, end: i128) -> Result<TimeWindow, Unplaceable> {
    match (i64::try_from(start), i64::try_from(end)) {
        (Ok(s), Ok(e)) => Ok(TimeWindow::new(s, e)),
        _ => Err(Unplaceable {
            timestamp,
            start,
            end,
        }),
    }
}

/// Tumbling windows.
///
/// ```
/// use std::time::Duration;
/// use riffle::window::{Tumbling, Windows, TimeDomain};
/// assert_eq!(Tumbling::of(Duration::from_secs(60)), Windows::Tumbling { size: 60_000, offset: 0, time: TimeDomain::EventTime });
/// ```
pub struct Tumbling;

impl Tumbling {
    /// Event-time tumbling windows of `size`.
    pub fn of(size: Duration) -> Windows {
        Windows::Tumbling {
            size: millis(size),
            offset: 0,
            time: TimeDomain::EventTime,
        }
    }

    /// Processing-time tumbling windows of `size`.
    pub fn processing_time(size: Duration) -> Windows {
        Windows::Tumbling {
            size: millis(size),
            offset: 0,
            time: TimeDomain::ProcessingTime,
        }
    }
}

/// Sliding (hopping) windows.
pub struct Sliding;

impl Sliding {
    /// Event-time windows of `size` starting every `slide`.
    pub fn of(size: Duration, slide: Duration) -> Windows {
        Windows::Sliding {
            size: millis(size),
            slide: millis(slide),
            offset: 0,
            time: TimeDomain::EventTime,
        }
    }

    /// Processing-time windows of `size` starting every `slide`.
    pub fn processing_time(size: Duration, slide: Duration) -> Windows {
        Windows::Sliding {
            size: millis(size),
            slide: millis(slide),
            offset: 0,
            time: TimeDomain::ProcessingTime,
        }
    }
}

/// Cumulating windows (Flink SQL's `CUMULATE`): windows growing by a step from a common start
/// up to a largest size, e.g. an hourly running count of the day.
///
/// ```
/// use std::time::Duration;
/// use riffle::window::{Cumulating, TimeWindow};
/// let hour = Duration::from_secs(3600);
/// let mut out = Vec::new();
/// // 02:30 is in the day's windows that end at 03:00, 04:00, .. 24:00.
/// Cumulating::of(24 * hour, hour).assign(9_000_000, &mut out).unwrap();
/// assert_eq!(out.len(), 22);
/// assert_eq!(out[0], TimeWindow::new(0, 10_800_000));
/// assert_eq!(out[21], TimeWindow::new(0, 86_400_000));
/// ```
pub struct Cumulating;

impl Cumulating {
    /// Event-time windows growing by `step` up to `max_size` (a multiple of `step`).
    pub fn of(max_size: Duration, step: Duration) -> Windows {
        Windows::Cumulating {
            max_size: millis(max_size),
            step: millis(step),
            offset: 0,
            time: TimeDomain::EventTime,
        }
    }

    /// Processing-time windows growing by `step` up to `max_size`.
    pub fn processing_time(max_size: Duration, step: Duration) -> Windows {
        Windows::Cumulating {
            max_size: millis(max_size),
            step: millis(step),
            offset: 0,
            time: TimeDomain::ProcessingTime,
        }
    }
}

/// Session windows.
pub struct Session;

impl Session {
    /// Event-time sessions closed by `gap` of inactivity.
    pub fn with_gap(gap: Duration) -> Windows {
        Windows::Session {
            gap: millis(gap),
            time: TimeDomain::EventTime,
        }
    }

    /// Processing-time sessions closed by `gap` of inactivity.
    pub fn processing_time(gap: Duration) -> Windows {
        Windows::Session {
            gap: millis(gap),
            time: TimeDomain::ProcessingTime,
        }
    }
}

impl Windows {
    /// Shifts the window boundaries by `offset` (e.g. to align days to a time zone).
    pub fn with_offset(self, offset: Duration) -> Windows {
        match self {
            Windows::Tumbling { size, time, .. } => Windows::Tumbling {
                size,
                offset: millis(offset),
                time,
            },
            Windows::Sliding {
                size, slide, time, ..
            } => Windows::Sliding {
                size,
                slide,
                offset: millis(offset),
                time,
            },
            Windows::Cumulating {
                max_size,
                step,
                time,
                ..
            } => Windows::Cumulating {
                max_size,
                step,
                offset: millis(offset),
                time,
            },
            session => session,
        }
    }

    /// Event or processing time.
    pub fn time(&self) -> TimeDomain {
        match *self {
            Windows::Tumbling { time, .. }
            | Windows::Sliding { time, .. }
            | Windows::Cumulating { time, .. }
            | Windows::Session { time, .. } => time,
        }
    }

    /// Whether windows merge (sessions).
    pub fn is_merging(&self) -> bool {
        matches!(self, Windows::Session { .. })
    }

    /// The windows as a user declared them (`tumbling 60 s, event time`), for the job's
    /// fingerprint.
    pub(crate) fn describe(&self) -> String {
        use crate::util::millis_text;
        let time = match self.time() {
            TimeDomain::EventTime => "event time",
            TimeDomain::ProcessingTime => "processing time",
        };
        let offset = |offset: i64| match offset {
            0 => String::new(),
            offset => format!(", offset {}", millis_text(offset)),
        };
        match *self {
            Windows::Tumbling {
                size, offset: at, ..
            } => format!("tumbling {}{}, {time}", millis_text(size), offset(at)),
            Windows::Sliding {
                size,
                slide,
                offset: at,
                ..
            } => format!(
                "sliding {} every {}{}, {time}",
                millis_text(size),
                millis_text(slide),
                offset(at)
            ),
            Windows::Cumulating {
                max_size,
                step,
                offset: at,
                ..
            } => format!(
                "cumulating to {} by {}{}, {time}",
                millis_text(max_size),
                millis_text(step),
                offset(at)
            ),
            Windows::Session { gap, .. } => format!("session gap {}, {time}", millis_text(gap)),
        }
    }

    /// Checks the sizes; the error names the setting.
    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |setting: &str, message: String| Err(crate::Error::config(setting, message));
        match *self {
            Windows::Tumbling { size, .. } if size <= 0 => {
                bad("window size", format!("must be positive, got {size} ms"))
            }
            Windows::Sliding { size, slide, .. } if size <= 0 || slide <= 0 => bad(
                "window size",
                format!("size and slide must be positive, got {size} and {slide} ms"),
            ),
            Windows::Sliding { size, slide, .. } if slide > size => bad(
                "window slide",
                format!("({slide} ms) must not exceed the size ({size} ms)"),
            ),
            Windows::Cumulating { max_size, step, .. } if max_size <= 0 || step <= 0 => bad(
                "window size",
                format!("max size and step must be positive, got {max_size} and {step} ms"),
            ),
            Windows::Cumulating { max_size, step, .. } if max_size % step != 0 => bad(
                "window step",
                format!("the max size ({max_size} ms) must be a multiple of the step ({step} ms)"),
            ),
            Windows::Session { gap, .. } if gap <= 0 => {
                bad("session gap", format!("must be positive, got {gap} ms"))
            }
            _ => Ok(()),
        }
    }

    /// The windows a record at `timestamp` belongs to (for sessions: its own session, before
    /// merging). The arithmetic is exact (in `i128`); a record with a window that does not fit in
    /// the `i64` range gets none (`windows` is left empty) and the reason.
    ///
    /// ```
    /// use std::time::Duration;
    /// use riffle::window::{TimeWindow, Tumbling};
    /// let mut out = Vec::new();
    /// Tumbling::of(Duration::from_secs(60)).assign(-1, &mut out).unwrap();
    /// assert_eq!(out, vec![TimeWindow::new(-60_000, 0)]);
    /// assert!(Tumbling::of(Duration::from_secs(60)).assign(i64::MAX, &mut out).is_err());
    /// assert!(out.is_empty());
    /// ```
    pub fn assign(
        &self,
        timestamp: Timestamp,
        windows: &mut Vec<TimeWindow>,
    ) -> Result<(), Unplaceable> {
        windows.clear();
        let ts = i128::from(timestamp);
        let placed = match *self {
            Windows::Tumbling { size, offset, .. } => {
                let start = aligned_start(timestamp, offset, size);
                window_at(timestamp, start, start + i128::from(size)).map(|w| windows.push(w))
            }
            Windows::Sliding {
                size,
                slide,
                offset,
                ..
            } => {
                let mut start = aligned_start(timestamp, offset, slide);
                let (size, slide) = (i128::from(size), i128::from(slide));
                let mut placed = Ok(());
                while start > ts - size {
                    match window_at(timestamp, start, start + size) {
                        Ok(w) => windows.push(w),
                        Err(e) => {
                            placed = Err(e);
                            break;
                        }
                    }
                    start -= slide;
                }
                placed
            }
            Windows::Cumulating {
                max_size,
                step,
                offset,
                ..
            } => {
                let start = aligned_start(timestamp, offset, max_size);
                // The first window of the cycle that ends after the record, then the longer ones.
                let first = (ts - start) / i128::from(step) + 1;
                let mut placed = Ok(());
                for k in first..=i128::from(max_size / step) {
                    match window_at(timestamp, start, start + k * i128::from(step)) {
                        Ok(w) => windows.push(w),
                        Err(e) => {
                            placed = Err(e);
                            break;
                        }
                    }
                }
                placed
            }
            Windows::Session { gap, .. } => {
                window_at(timestamp, ts, ts + i128::from(gap)).map(|w| windows.push(w))
            }
        };
        if placed.is_err() {
            // All or nothing: a record is never counted in some of its windows only.
            windows.clear();
        }
        placed
    }
}

/// The result of an aggregation over one window of one key.
///
/// Serialized as `{"key":..,"window_start":..,"window_end":..,"value":..}`, with `"update":true`
/// added when the result replaces one emitted earlier for the same key and window (a late record
/// within the allowed lateness, or an early firing): the last line for a key and window is its
/// final value.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WindowResult<K, R> {
    /// The key.
    pub key: K,
    /// First millisecond of the window.
    pub window_start: Timestamp,
    /// First millisecond after the window.
    pub window_end: Timestamp,
    /// The aggregate.
    pub value: R,
    /// Whether this result replaces an earlier one for the same key and window.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub update: bool,
}

impl<K, R> WindowResult<K, R> {
    /// The same key and window with another value.
    pub fn with_value<V>(self, value: V) -> WindowResult<K, V> {
        WindowResult {
            key: self.key,
            window_start: self.window_start,
            window_end: self.window_end,
            value,
            update: self.update,
        }
    }
}

/// A function over all the records of one window of one key, as Flink's `ProcessWindowFunction`.
///
/// Closures `FnMut(&K, TimeWindow, &[T], &mut WindowCollector<Out>) -> Result<()>` implement it.
pub trait ProcessWindowFunction<K, T, Out>: Send + 'static {
    /// Called when the window fires (again, with every record, when a late record updates it).
    fn process(
        &mut self,
        key: &K,
        window: TimeWindow,
        records: &[T],
        out: &mut WindowCollector<Out>,
    ) -> Result<()>;
}

impl<K, T, Out, F> ProcessWindowFunction<K, T, Out> for F
where
    F: FnMut(&K, TimeWindow, &[T], &mut WindowCollector<Out>) -> Result<()> + Send + 'static,
{
    fn process(
        &mut self,
        key: &K,
        window: TimeWindow,
        records: &[T],
        out: &mut WindowCollector<Out>,
    ) -> Result<()> {
        self(key, window, records, out)
    }
}

/// Where a window function emits; results carry the window's last millisecond as timestamp.
/// It also holds the function's keyed state: [`window_state`](WindowCollector::window_state)
/// and [`global_state`](WindowCollector::global_state).
pub struct WindowCollector<'c, 'o, Out> {
    out: &'c mut Collector<'o, Out>,
    window: TimeWindow,
    update: bool,
    state: Option<function_state::Firing<'c>>,
}

impl<'c, Out: Data> WindowCollector<'c, '_, Out> {
    /// Emits a result of the window.
    pub fn emit(&mut self, value: Out) -> Result<()> {
        self.out
            .emit(Record::timed(value, self.window.result_time()))
    }

    /// Whether the window was emitted before (this firing is an update).
    pub fn is_update(&self) -> bool {
        self.update
    }

    /// The window being fired.
    pub fn window(&self) -> TimeWindow {
        self.window
    }

    /// The operator's current event-time watermark.
    pub fn current_watermark(&self) -> Timestamp {
        self.out.current_watermark()
    }

    /// State of the current key in the window being fired (Flink's `windowState()`): kept while
    /// the window is (until its end plus the allowed lateness), dropped when it is purged. Counts
    /// firings of a window with late updates, for instance. Not available in session windows.
    ///
    /// ```
    /// use std::time::Duration;
    /// use riffle::{EnvConfig, Result, StreamEnv, sink::CollectSink, time::WatermarkStrategy};
    /// use riffle::state::ValueStateDescriptor;
    /// use riffle::window::{TimeWindow, Tumbling, WindowCollector};
    ///
    /// const FIRINGS: ValueStateDescriptor<u32> = ValueStateDescriptor::new("firings");
    /// const WINDOWS: ValueStateDescriptor<u32> = ValueStateDescriptor::new("windows");
    ///
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, out) = CollectSink::new();
    /// env.from_iter_with_watermarks(
    ///     vec![(1u64, 1_000i64), (1, 11_000), (1, 2_000)], // the last one is late
    ///     WatermarkStrategy::monotonous().with_timestamps(|r: &(u64, i64)| r.1),
    /// )
    /// .key_by(|r| r.0)
    /// .window(Tumbling::of(Duration::from_secs(10)))
    /// .allowed_lateness(Duration::from_secs(60))
    /// .process(|_, window: TimeWindow, records: &[(u64, i64)], out: &mut WindowCollector<String>| -> Result<()> {
    ///     let firing = out.window_state()?.value(&FIRINGS).get()?.unwrap_or(0) + 1;
    ///     out.window_state()?.value(&FIRINGS).set(firing)?;
    ///     let mut global = out.global_state()?;
    ///     let windows = global.value(&WINDOWS).get()?.unwrap_or(0) + u32::from(firing == 1);
    ///     global.value(&WINDOWS).set(windows)?;
    ///     out.emit(format!("{}: {} records, firing {firing}, window {windows}", window.start, records.len()))
    /// })
    /// .sink(sink);
    /// env.execute().unwrap();
    /// assert_eq!(out.values(), vec![
    ///     "0: 1 records, firing 1, window 1",
    ///     "0: 2 records, firing 2, window 1",
    ///     "10000: 1 records, firing 1, window 2",
    /// ]);
    /// ```
    pub fn window_state(
        &mut self,
    ) -> Result<function_state::StateScope<'_, (Vec<u8>, TimeWindow)>> {
        self.firing()?.window_state()
    }

    /// State of the current key across all its windows (Flink's `globalState()`).
    pub fn global_state(&mut self) -> Result<function_state::StateScope<'_, Vec<u8>>> {
        Ok(self.firing()?.global_state())
    }

    fn firing(&mut self) -> Result<&mut function_state::Firing<'c>> {
        self.state.as_mut().ok_or_else(|| {
            crate::Error::State(
                "this window function has no keyed state (it runs outside a window operator)"
                    .into(),
            )
        })
    }

    /// Sends a value to a side output, timestamped with the window's last millisecond; `false`
    /// if nothing in the job consumes that side output (then counted and dropped).
    pub fn side_output<S: Data>(&mut self, tag: &crate::OutputTag<S>, value: S) -> Result<bool> {
        self.out
            .side_output(tag, Record::timed(value, self.window.result_time()))
    }
}

/// What a window operator does with a window's accumulated records: aggregate them
/// incrementally or keep them for a full-window function.
pub(crate) trait WindowFn<K, T>: Send + 'static {
    type Acc: Data;
    type Out: Data;
    /// What the late side output receives.
    type Late: Data;
    fn create(&self) -> Self::Acc;
    fn add(&self, acc: &mut Self::Acc, value: &T);
    /// Adds a value that goes to one window only (no copy needed).
    fn add_owned(&self, acc: &mut Self::Acc, value: T) {
        self.add(acc, &value)
    }
    /// The window of an input that already knows it (a pre-aggregated partial).
    fn fixed_window(&self, _value: &T) -> Option<TimeWindow> {
        None
    }
    /// The late record to side-output for a late input (`None`: nothing to output).
    fn late(&self, value: T) -> Option<Self::Late>;
    fn merge(&self, acc: &mut Self::Acc, other: Self::Acc);
    /// Emits the result of `key` in `window` (`update`: it replaces an earlier one). `state` is
    /// the window function's keyed state, which the operator holds and checkpoints.
    fn fire(
        &mut self,
        key: &K,
        window: TimeWindow,
        acc: &Self::Acc,
        update: bool,
        state: &mut function_state::FunctionState,
        out: &mut Collector<'_, Self::Out>,
    ) -> Result<()>;
    /// A custom trigger's decision for `value`, about to be added to `window` whose
    /// accumulator is `acc` (default: none, the window fires at its end).
    fn on_element(&self, _acc: &Self::Acc, _value: &T, _window: TimeWindow) -> TriggerResult {
        TriggerResult::Continue
    }
    /// Whether windows fire when time reaches their end.
    fn fires_at_end(&self) -> bool {
        true
    }
}

/// Incremental aggregation: emits [`WindowResult`]s.
pub(crate) struct AggregateWindow<A>(pub(crate) A);

impl<K: Data, T: Data, A: crate::aggregate::AggregateFunction<T>> WindowFn<K, T>
    for AggregateWindow<A>
{
    type Acc = A::Acc;
    type Out = WindowResult<K, A::Out>;
    type Late = T;
    fn late(&self, value: T) -> Option<T> {
        Some(value)
    }
    fn create(&self) -> A::Acc {
        self.0.create()
    }
    fn add(&self, acc: &mut A::Acc, value: &T) {
        self.0.add(acc, value)
    }
    fn merge(&self, acc: &mut A::Acc, other: A::Acc) {
        self.0.merge(acc, other)
    }
    fn fire(
        &mut self,
        key: &K,
        window: TimeWindow,
        acc: &A::Acc,
        update: bool,
        _state: &mut function_state::FunctionState,
        out: &mut Collector<'_, Self::Out>,
    ) -> Result<()> {
        let value = WindowResult {
            key: key.clone(),
            window_start: window.start,
            window_end: window.end,
            value: self.0.result(acc),
            update,
        };
        out.emit(Record::timed(value, window.result_time()))
    }
}

/// A full-window function: keeps the records, calls the function when the window fires.
pub(crate) struct ProcessWindow<P, T, Out> {
    pub(crate) function: P,
    /// Removes records from what the function sees.
    pub(crate) evictor: Option<std::sync::Arc<dyn Evictor<T>>>,
    pub(crate) _types: std::marker::PhantomData<fn(T) -> Out>,
}

impl<P, T, Out> ProcessWindow<P, T, Out> {
    /// The window function `function`, with `evictor`.
    pub(crate) fn new(function: P, evictor: Option<std::sync::Arc<dyn Evictor<T>>>) -> Self {
        ProcessWindow {
            function,
            evictor,
            _types: std::marker::PhantomData,
        }
    }
}

impl<K, T, Out, P> WindowFn<K, T> for ProcessWindow<P, T, Out>
where
    K: Serialize + 'static,
    T: Data,
    Out: Data,
    P: ProcessWindowFunction<K, T, Out>,
{
    type Acc = Vec<T>;
    type Out = Out;
    type Late = T;
    fn late(&self, value: T) -> Option<T> {
        Some(value)
    }
    fn create(&self) -> Vec<T> {
        Vec::new()
    }
    fn add(&self, acc: &mut Vec<T>, value: &T) {
        acc.push(value.clone());
    }
    fn add_owned(&self, acc: &mut Vec<T>, value: T) {
        acc.push(value);
    }
    fn merge(&self, acc: &mut Vec<T>, other: Vec<T>) {
        acc.extend(other);
    }
    fn fire(
        &mut self,
        key: &K,
        window: TimeWindow,
        acc: &Vec<T>,
        update: bool,
        state: &mut function_state::FunctionState,
        out: &mut Collector<'_, Out>,
    ) -> Result<()> {
        let (bytes, key_group) = state.key_of(key)?;
        let state = Some(state.firing(bytes, key_group, window));
        let mut collector = WindowCollector {
            out,
            window,
            update,
            state,
        };
        match &self.evictor {
            None => self.function.process(key, window, acc, &mut collector),
            Some(evictor) => {
                let mut records = acc.clone();
                evictor.evict_before(window, &mut records);
                self.function.process(key, window, &records, &mut collector)
            }
        }
    }
}

/// The window operator for `settings`: aligned windows or sessions, built on each subtask.
pub(crate) fn window_operator<K, T, F>(
    key: crate::keys::KeyFn<K, T>,
    settings: WindowSettings<F::Late>,
    function: F,
) -> Windowing<K, T, F>
where
    K: Data + std::hash::Hash + Eq,
    T: Data,
    F: WindowFn<K, T>,
{
    Windowing {
        key,
        settings,
        function,
    }
}

/// A window operator as the job declares it: built on each subtask into an
/// [`AnyWindowOperator`] with the subtask's window state.
pub(crate) struct Windowing<K, T, F: WindowFn<K, T>> {
    key: crate::keys::KeyFn<K, T>,
    settings: WindowSettings<F::Late>,
    function: F,
}

impl<K, T, F> crate::operators::BuildOperator for Windowing<K, T, F>
where
    K: Data + std::hash::Hash + Eq,
    T: Data,
    F: WindowFn<K, T>,
{
    type Operator = AnyWindowOperator<K, T, F>;

    fn build(self, ctx: &crate::operators::OperatorContext) -> Result<Self::Operator> {
        let Windowing {
            key,
            settings,
            function,
        } = self;
        Ok(if settings.windows.is_merging() {
            AnyWindowOperator::Session(SessionWindowOperator::new(key, settings, function, ctx))
        } else {
            AnyWindowOperator::Aligned(WindowOperator::new(key, settings, function, ctx))
        })
    }
}

/// Either window operator.
pub(crate) enum AnyWindowOperator<K, T, F: WindowFn<K, T>> {
    Aligned(WindowOperator<K, T, F>),
    Session(SessionWindowOperator<K, T, F>),
}

macro_rules! delegate {
    ($self:ident, $op:ident => $call:expr) => {
        match $self {
            AnyWindowOperator::Aligned($op) => $call,
            AnyWindowOperator::Session($op) => $call,
        }
    };
}

impl<K, T, F> crate::operators::Operator for AnyWindowOperator<K, T, F>
where
    K: Data + std::hash::Hash + Eq,
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
        delegate!(self, op => op.process(batch, out))
    }

    fn on_watermark(
        &mut self,
        watermark: Timestamp,
        out: &mut Collector<'_, F::Out>,
    ) -> Result<()> {
        delegate!(self, op => op.on_watermark(watermark, out))
    }

    fn on_tick(&mut self, out: &mut Collector<'_, F::Out>) -> Result<()> {
        delegate!(self, op => op.on_tick(out))
    }

    fn close(&mut self, out: &mut Collector<'_, F::Out>) -> Result<()> {
        delegate!(self, op => op.close(out))
    }

    fn snapshot_state(
        &mut self,
        checkpoint_id: u64,
        snapshot: &mut crate::checkpoint::SnapshotWriter,
    ) -> Result<()> {
        delegate!(self, op => op.snapshot_state(checkpoint_id, snapshot))
    }

    fn restore_state(&mut self, state: &crate::checkpoint::RestoreState) -> Result<()> {
        delegate!(self, op => op.restore_state(state))
    }
}

/// How a window operator treats late records and when it fires; shared by both window operators.
#[derive(Clone, Debug)]
pub(crate) struct WindowSettings<T> {
    pub(crate) windows: Windows,
    /// Milliseconds a window's state is kept after it fired, for late records to update it.
    pub(crate) lateness: i64,
    /// Where late records go; counted and dropped when `None`.
    pub(crate) late_tag: Option<crate::OutputTag<T>>,
    /// Processing-time interval of early firings.
    pub(crate) early_every: Option<i64>,
    /// Sliding windows kept as slices (see [`WindowSettings::slicing`]).
    pub(crate) sliced: bool,
}

impl<T> WindowSettings<T> {
    /// `windows` with no lateness, late records counted, no early firings.
    pub(crate) fn new(windows: Windows) -> Self {
        WindowSettings {
            windows,
            lateness: 0,
            late_tag: None,
            early_every: None,
            sliced: false,
        }
    }

    /// `(size, slide)` of the windows when they are kept as slices: asked for, event-time
    /// sliding windows whose size is a multiple of their slide, no lateness, no early firing.
    pub(crate) fn slicing(&self) -> Option<(i64, i64)> {
        match self.windows {
            Windows::Sliding {
                size,
                slide,
                time: TimeDomain::EventTime,
                ..
            } if self.sliced
                && slide > 0
                && size > slide
                && size % slide == 0
                && self.lateness == 0
                && self.early_every.is_none() =>
            {
                Some((size, slide))
            }
            _ => None,
        }
    }

    pub(crate) fn allowed_lateness(&mut self, lateness: std::time::Duration) {
        self.lateness = millis(lateness);
    }

    pub(crate) fn side_output_late(&mut self, tag: &crate::OutputTag<T>) {
        self.late_tag = Some(tag.clone());
    }

    pub(crate) fn early_firing(&mut self, every: std::time::Duration) {
        self.early_every = Some(millis(every).max(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assign(windows: Windows, timestamp: Timestamp) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        windows.assign(timestamp, &mut out).unwrap();
        out.into_iter().map(|w| (w.start, w.end)).collect()
    }

    #[test]
    fn assigners_cut_time_like_flink() {
        let minute = Duration::from_secs(60);
        assert_eq!(
            assign(Tumbling::of(minute), 61_000),
            vec![(60_000, 120_000)]
        );
        assert_eq!(assign(Tumbling::of(minute), -1), vec![(-60_000, 0)]);
        assert_eq!(
            assign(
                Tumbling::of(minute).with_offset(Duration::from_secs(15)),
                10_000
            ),
            vec![(-45_000, 15_000)]
        );
        assert_eq!(
            assign(Sliding::of(minute, Duration::from_secs(20)), 61_000),
            vec![(60_000, 120_000), (40_000, 100_000), (20_000, 80_000)]
        );
        assert_eq!(
            assign(Session::with_gap(Duration::from_secs(5)), 7),
            vec![(7, 5_007)]
        );
        // Flink's CUMULATE(.., step 20 s, size 60 s): the record at 61 s in [60, 80), [60, 100),
        // [60, 120); at 119.999 s only in the largest.
        let step = Duration::from_secs(20);
        assert_eq!(
            assign(Cumulating::of(minute, step), 61_000),
            vec![(60_000, 80_000), (60_000, 100_000), (60_000, 120_000)]
        );
        assert_eq!(
            assign(Cumulating::of(minute, step), 119_999),
            vec![(60_000, 120_000)]
        );
        assert_eq!(assign(Cumulating::of(minute, step), -1), vec![(-60_000, 0)]);
        assert!(
            Cumulating::of(minute, Duration::from_secs(25))
                .validate()
                .is_err()
        );
    }

    #[test]
    fn windows_order_by_end_and_merge_when_they_touch() {
        let a = TimeWindow::new(0, 10);
        let b = TimeWindow::new(10, 20);
        let c = TimeWindow::new(21, 30);
        assert!(a < b && b < c);
        assert!(a.intersects(&b) && !b.intersects(&c));
        assert_eq!(a.cover(&c), TimeWindow::new(0, 30));
        assert_eq!(a.max_timestamp(), 9);
    }

    #[test]
    fn bad_sizes_name_their_setting() {
        let err = Sliding::of(Duration::from_secs(1), Duration::from_secs(2))
            .validate()
            .unwrap_err();
        assert!(
            matches!(err, crate::Error::Config { ref setting, .. } if setting == "window slide")
        );
        assert!(Session::with_gap(Duration::ZERO).validate().is_err());
    }

    #[test]
    fn updates_are_marked_only_when_they_are_updates() {
        let result = WindowResult {
            key: 7u64,
            window_start: 0,
            window_end: 60_000,
            value: 3u64,
            update: false,
        };
        assert_eq!(
            serde_json::to_string(&result).unwrap(),
            r#"{"key":7,"window_start":0,"window_end":60000,"value":3}"#
        );
        let update = WindowResult {
            update: true,
            ..result
        };
        assert!(
            serde_json::to_string(&update)
                .unwrap()
                .ends_with(r#""value":3,"update":true}"#)
        );
    }

    #[test]
    fn windows_at_the_edges_of_i64_are_exact_or_refused() {
        let minute = Duration::from_secs(60);
        let tumbling = Tumbling::of(minute);
        let mut out = Vec::new();
        // i64::MIN + 1 lies in a minute that starts before i64::MIN: refused, not wrapped.
        let err = tumbling.assign(i64::MIN + 1, &mut out).unwrap_err();
        assert_eq!(err.timestamp, i64::MIN + 1);
        assert_eq!(err.start, -9_223_372_036_854_780_000);
        assert_eq!(err.end, -9_223_372_036_854_720_000);
        assert!(out.is_empty());
        assert_eq!(
            err.to_string(),
            "time -9223372036854775807 ms cannot be placed in a window: its window \
             [-9223372036854780000, -9223372036854720000) reaches beyond the timestamp range \
             -9223372036854775808..=9223372036854775807 ms"
        );
        // The first whole minute of the range is fine.
        assert_eq!(
            assign(tumbling, -9_223_372_036_854_720_000),
            vec![(-9_223_372_036_854_720_000, -9_223_372_036_854_660_000)]
        );
        for ts in [i64::MAX, i64::MAX - 1] {
            let err = tumbling.assign(ts, &mut out).unwrap_err();
            assert_eq!(
                (err.start, err.end),
                (9_223_372_036_854_720_000, 9_223_372_036_854_780_000)
            );
        }
        assert_eq!(
            assign(tumbling, 9_223_372_036_854_719_999),
            vec![(9_223_372_036_854_660_000, 9_223_372_036_854_720_000)]
        );
        // Sliding: all windows or none, never some of them.
        let sliding = Sliding::of(minute, Duration::from_secs(20));
        assert!(sliding.assign(i64::MAX - 30_000, &mut out).is_err());
        assert!(out.is_empty());
        // Sessions: the gap must fit after the record.
        let session = Session::with_gap(Duration::from_secs(5));
        assert!(session.assign(i64::MAX - 4_999, &mut out).is_err());
        assert_eq!(
            assign(session, i64::MAX - 5_000),
            vec![(i64::MAX - 5_000, i64::MAX)]
        );
        // An offset does not overflow either.
        let shifted = Tumbling::of(minute).with_offset(Duration::from_secs(30));
        assert!(shifted.assign(i64::MIN + 1, &mut out).is_err());
        assert_eq!(assign(shifted, 0), vec![(-30_000, 30_000)]);
    }

    #[test]
    fn absurd_durations_saturate_instead_of_wrapping() {
        let huge = Duration::from_secs(u64::MAX);
        assert_eq!(
            Tumbling::of(huge),
            Windows::Tumbling {
                size: i64::MAX,
                offset: 0,
                time: TimeDomain::EventTime
            }
        );
        let mut out = Vec::new();
        assert_eq!(
            Tumbling::of(huge).assign(5, &mut out),
            Ok(()),
            "one window [0, i64::MAX) holds it"
        );
        assert_eq!(out, vec![TimeWindow::new(0, i64::MAX)]);
    }

    fn any_windows() -> impl proptest::strategy::Strategy<Value = Windows> {
        use proptest::prelude::*;
        let size = prop_oneof![1i64..=10, 1i64..=100_000, Just(i64::MAX), 1i64..=i64::MAX];
        let offset = prop_oneof![Just(0i64), -100_000i64..=100_000, proptest::num::i64::ANY];
        prop_oneof![
            (size.clone(), offset.clone()).prop_map(|(size, offset)| Windows::Tumbling {
                size,
                offset,
                time: TimeDomain::EventTime
            }),
            // Few windows per record (size / slide <= 8), so the test stays fast.
            (1i64..=1_000, 1i64..=8, offset.clone()).prop_map(|(slide, n, offset)| {
                Windows::Sliding {
                    size: slide * n,
                    slide,
                    offset,
                    time: TimeDomain::EventTime,
                }
            }),
            (1i64..=1_000, 1i64..=8, offset).prop_map(|(step, n, offset)| {
                Windows::Cumulating {
                    max_size: step * n,
                    step,
                    offset,
                    time: TimeDomain::EventTime,
                }
            }),
            size.prop_map(|gap| Windows::Session {
                gap,
                time: TimeDomain::EventTime
            }),
        ]
    }

    fn near_the_edges() -> impl proptest::strategy::Strategy<Value = i64> {
        use proptest::prelude::*;
        prop_oneof![
            (0i64..200_000).prop_map(|d| i64::MIN + d),
            (0i64..200_000).prop_map(|d| i64::MAX - d),
            -200_000i64..200_000,
            proptest::num::i64::ANY,
        ]
    }

    proptest::proptest! {
        #![proptest_config(crate::util::fuzz_config(512))]

        /// Near i64::MIN, 0 and i64::MAX: no panic, no wrap. A record gets windows that
        /// contain it, each of the configured size, or none and a reason naming its window.
        #[test]
        fn window_assignment_never_wraps(windows in any_windows(), ts in near_the_edges()) {
            let mut out = Vec::new();
            match windows.assign(ts, &mut out) {
                Ok(()) => {
                    proptest::prop_assert!(!out.is_empty());
                    let length = match windows {
                        Windows::Tumbling { size, .. } | Windows::Sliding { size, .. } => size,
                        Windows::Session { gap, .. } => gap,
                        Windows::Cumulating { max_size, .. } => max_size,
                    };
                    for w in &out {
                        proptest::prop_assert!(w.start <= ts && ts < w.end, "{:?} holds {}", w, ts);
                        proptest::prop_assert_eq!(w.max_timestamp(), w.end - 1);
                        let span = i128::from(w.end) - i128::from(w.start);
                        match windows {
                            // One start; lengths the multiples of the step that end after the
                            // record, the last the largest.
                            Windows::Cumulating { step, .. } => {
                                proptest::prop_assert_eq!(w.start, out[0].start);
                                proptest::prop_assert_eq!(span % i128::from(step), 0);
                                proptest::prop_assert!(span <= i128::from(length));
                            }
                            _ => proptest::prop_assert_eq!(span, i128::from(length)),
                        }
                    }
                    if let Windows::Cumulating { step, .. } = windows {
                        let last = out[out.len() - 1];
                        proptest::prop_assert_eq!(i128::from(last.end) - i128::from(last.start), i128::from(length));
                        // The first is the shortest window that holds the record, each next
                        // one a step longer.
                        proptest::prop_assert!(i128::from(out[0].end) - i128::from(step) <= i128::from(ts));
                        for pair in out.windows(2) {
                            proptest::prop_assert_eq!(i128::from(pair[1].end) - i128::from(pair[0].end), i128::from(step));
                        }
                    }
                }
                Err(reason) => {
                    proptest::prop_assert!(out.is_empty());
                    proptest::prop_assert_eq!(reason.timestamp, ts);
                    proptest::prop_assert!(reason.start <= i128::from(ts) && i128::from(ts) < reason.end);
                    proptest::prop_assert!(
                        reason.start < i128::from(i64::MIN) || reason.end > i128::from(i64::MAX)
                    );
                }
            }
        }

        /// The `i64` fast path of a window's start is the exact `i128` one wherever it is taken.
        #[test]
        fn a_window_start_is_exact(
            ts in near_the_edges(),
            offset in proptest::prop_oneof![proptest::strategy::Just(0i64), -100_000i64..=100_000, proptest::num::i64::ANY],
            period in proptest::prop_oneof![1i64..=1_000, 1i64..=100_000_000, 1i64..=i64::MAX],
        ) {
            let exact = {
                let ts = i128::from(ts);
                ts - (ts - i128::from(offset)).rem_euclid(i128::from(period))
            };
            proptest::prop_assert_eq!(super::aligned_start(ts, offset, period), exact);
        }
    }
}

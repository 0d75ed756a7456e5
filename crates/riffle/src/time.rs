//! Time: the processing-time clock (replaceable, so tests control it) and watermark strategies,
//! which tell how far event time has progressed.
//!
//! A [`WatermarkStrategy`] is applied inside a source, per split (per Kafka partition), so a fast
//! split cannot make a slow one's records late; the source's watermark is the minimum over its
//! splits that are not idle.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use crate::record::{MIN_WATERMARK, Timestamp};

/// The source of processing time, in epoch milliseconds.
pub trait Clock: Send + Sync + Debug {
    /// The current processing time.
    fn now(&self) -> Timestamp;
}

/// The wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as Timestamp)
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to: processing-time tests.
///
/// ```
/// use riffle::time::{Clock, ManualClock};
/// let clock = ManualClock::new(1_000);
/// clock.advance(std::time::Duration::from_millis(500));
/// assert_eq!(clock.now(), 1_500);
/// ```
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock showing `now`.
    pub fn new(now: Timestamp) -> Self {
        ManualClock(AtomicI64::new(now))
    }

    /// Sets the time.
    pub fn set(&self, now: Timestamp) {
        self.0.store(now, Ordering::SeqCst);
    }

    /// Moves the time forward.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_millis() as i64, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        self.0.load(Ordering::SeqCst)
    }
}

/// Tracks the event time seen by one split and derives its watermark.
pub trait WatermarkGenerator: Send {
    /// A record with event time `timestamp` was read.
    fn on_event(&mut self, timestamp: Timestamp);
    /// The watermark now: no record with a smaller timestamp is expected.
    fn current_watermark(&self) -> Timestamp;
}

/// Watermark = largest timestamp seen - bound - 1 ms (Flink's bounded out-of-orderness).
#[derive(Clone, Debug)]
pub struct BoundedOutOfOrderness {
    max_timestamp: Timestamp,
    bound: Timestamp,
}

impl BoundedOutOfOrderness {
    /// Records may arrive up to `bound` out of order.
    pub fn new(bound: Duration) -> Self {
        BoundedOutOfOrderness {
            max_timestamp: MIN_WATERMARK,
            bound: Timestamp::try_from(bound.as_millis()).unwrap_or(Timestamp::MAX),
        }
    }
}

impl WatermarkGenerator for BoundedOutOfOrderness {
    fn on_event(&mut self, timestamp: Timestamp) {
        self.max_timestamp = self.max_timestamp.max(timestamp);
    }

    fn current_watermark(&self) -> Timestamp {
        if self.max_timestamp == MIN_WATERMARK {
            MIN_WATERMARK
        } else {
            self.max_timestamp
                .saturating_sub(self.bound)
                .saturating_sub(1)
        }
    }
}

/// Extracts a record's event time.
pub type TimestampFn<T> = Arc<dyn Fn(&T) -> Timestamp + Send + Sync>;
type GeneratorFactory = Arc<dyn Fn() -> Box<dyn WatermarkGenerator> + Send + Sync>;

/// How a source assigns event timestamps and generates watermarks.
///
/// ```
/// use std::time::Duration;
/// use riffle::time::WatermarkStrategy;
/// use riffle_clicks::Click;
///
/// let strategy = WatermarkStrategy::<Click>::bounded_out_of_orderness(Duration::from_secs(5))
///     .with_timestamps(|click| click.event_time)
///     .with_idleness(Duration::from_secs(30));
/// ```
pub struct WatermarkStrategy<T> {
    pub(crate) timestamps: Option<TimestampFn<T>>,
    pub(crate) generator: Option<GeneratorFactory>,
    pub(crate) idleness: Option<Duration>,
    pub(crate) max_future_skew: Option<Duration>,
    pub(crate) max_watermark_jump: Option<Duration>,
    pub(crate) outlier_corroboration: usize,
    pub(crate) every_batch: bool,
    /// The generator as declared (`bounded out-of-orderness 5 s`), for the job's fingerprint.
    pub(crate) generator_text: String,
}

impl<T> Clone for WatermarkStrategy<T> {
    fn clone(&self) -> Self {
        WatermarkStrategy {
            timestamps: self.timestamps.clone(),
            generator: self.generator.clone(),
            idleness: self.idleness,
            max_future_skew: self.max_future_skew,
            max_watermark_jump: self.max_watermark_jump,
            outlier_corroboration: self.outlier_corroboration,
            every_batch: self.every_batch,
            generator_text: self.generator_text.clone(),
        }
    }
}

/// Default bound on how far ahead of the wall clock an event time may be: one hour.
pub const DEFAULT_MAX_FUTURE_SKEW: Duration = Duration::from_secs(3600);

/// Default bound on how far a record may jump ahead of its split's watermark before it is a
/// watermark outlier: one hour.
pub const DEFAULT_MAX_WATERMARK_JUMP: Duration = Duration::from_secs(3600);

/// Default number of outliers in a row, near each other, that move the watermark: three.
pub const DEFAULT_OUTLIER_CORROBORATION: usize = 3;

impl<T> WatermarkStrategy<T> {
    /// No watermarks (a bounded source still ends with the final one).
    pub fn no_watermarks() -> Self {
        WatermarkStrategy {
            timestamps: None,
            generator: None,
            idleness: None,
            max_future_skew: None,
            max_watermark_jump: None,
            outlier_corroboration: DEFAULT_OUTLIER_CORROBORATION,
            every_batch: false,
            generator_text: "none".to_string(),
        }
    }

    /// Records arrive at most `bound` out of order: the default for business jobs.
    pub fn bounded_out_of_orderness(bound: Duration) -> Self {
        let mut strategy = WatermarkStrategy::custom(move || BoundedOutOfOrderness::new(bound));
        strategy.generator_text = format!(
            "bounded out-of-orderness {}",
            crate::util::millis_text(bound.as_millis().min(i64::MAX as u128) as i64)
        );
        strategy
    }

    /// Timestamps only increase (out-of-orderness 0).
    pub fn monotonous() -> Self {
        WatermarkStrategy::bounded_out_of_orderness(Duration::ZERO)
    }

    /// A watermark generator of your own, one instance per split.
    pub fn custom<G: WatermarkGenerator + 'static>(
        factory: impl Fn() -> G + Send + Sync + 'static,
    ) -> Self {
        WatermarkStrategy {
            timestamps: None,
            generator: Some(Arc::new(move || Box::new(factory()))),
            idleness: None,
            max_future_skew: Some(DEFAULT_MAX_FUTURE_SKEW),
            max_watermark_jump: Some(DEFAULT_MAX_WATERMARK_JUMP),
            outlier_corroboration: DEFAULT_OUTLIER_CORROBORATION,
            every_batch: false,
            generator_text: "custom".to_string(),
        }
    }

    /// What of the strategy changes a job's results (`bounded out-of-orderness 5 s, idle
    /// after 2 s`), for the job's fingerprint.
    pub(crate) fn describe(&self) -> String {
        let mut text = self.generator_text.clone();
        if let Some(idleness) = self.idleness {
            text.push_str(&format!(
                ", idle after {}",
                crate::util::millis_text(idleness.as_millis().min(i64::MAX as u128) as i64)
            ));
        }
        text
    }

    /// Takes event time from the record (otherwise the timestamp the source gave it is used).
    pub fn with_timestamps(
        mut self,
        extract: impl Fn(&T) -> Timestamp + Send + Sync + 'static,
    ) -> Self {
        self.timestamps = Some(Arc::new(extract));
        self
    }

    /// A split without records for this long stops holding the watermark back until it has
    /// records again.
    pub fn with_idleness(mut self, timeout: Duration) -> Self {
        self.idleness = Some(timeout);
        self
    }

    /// Records whose event time is more than `skew` ahead of the wall clock are quarantined as
    /// bad input instead of dragging the watermark forward (`None`: never; default one hour).
    pub fn with_max_future_skew(mut self, skew: Option<Duration>) -> Self {
        self.max_future_skew = skew;
        self
    }

    /// A record whose event time is more than `jump` ahead of its split's current watermark is a
    /// *watermark outlier* (a device with a wrong clock): it is processed as usual and counted
    /// (`watermark_outliers`), but it does not move the watermark unless it is corroborated by
    /// further outliers in a row near it (see [`with_outlier_corroboration`]), as when the
    /// stream really jumps (a gap in replayed history). `None` turns the rule off. Default: one
    /// hour. The rule compares event times with each other, never with the wall clock, so
    /// replaying old data is unaffected; before a split has a watermark nothing is an outlier.
    ///
    /// ```
    /// use std::time::Duration;
    /// use riffle::time::WatermarkStrategy;
    /// let strategy = WatermarkStrategy::<(u64, i64)>::bounded_out_of_orderness(Duration::from_secs(5))
    ///     .with_timestamps(|r| r.1)
    ///     .with_max_watermark_jump(Some(Duration::from_secs(600)))
    ///     .with_outlier_corroboration(5);
    /// ```
    ///
    /// [`with_outlier_corroboration`]: WatermarkStrategy::with_outlier_corroboration
    pub fn with_max_watermark_jump(mut self, jump: Option<Duration>) -> Self {
        self.max_watermark_jump = jump;
        self
    }

    /// How many outliers in a row (each within the maximum jump of the first) move the
    /// watermark: they then count as the stream's new event time (default three; one makes
    /// every record count at once, as without the rule).
    pub fn with_outlier_corroboration(mut self, records: usize) -> Self {
        self.outlier_corroboration = records.max(1);
        self
    }

    /// Emits the watermark after every batch a split reads, not only every watermark interval:
    /// with a batch size of one, each record is followed by its watermark, which makes a run
    /// independent of timing (for demos and tests; it costs throughput).
    pub fn with_watermark_after_every_batch(mut self) -> Self {
        self.every_batch = true;
        self
    }

    pub(crate) fn after_every_batch_if(mut self, every_batch: bool) -> Self {
        self.every_batch |= every_batch;
        self
    }

    /// Whether the strategy generates watermarks.
    pub fn generates_watermarks(&self) -> bool {
        self.generator.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_out_of_orderness_lags_the_largest_timestamp() {
        let mut g = BoundedOutOfOrderness::new(Duration::from_secs(5));
        assert_eq!(g.current_watermark(), MIN_WATERMARK);
        g.on_event(10_000);
        g.on_event(8_000);
        assert_eq!(g.current_watermark(), 4_999);
        g.on_event(20_000);
        assert_eq!(g.current_watermark(), 14_999);
    }

    #[test]
    fn the_system_clock_is_now() {
        let now = SystemClock.now();
        assert!(now > 1_700_000_000_000);
    }
}

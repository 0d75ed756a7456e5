//! What flows through a job: records with their event timestamps, in batches, with control events
//! (watermarks, checkpoint barriers, end of input) in band between the batches.

use serde::Serialize;
use serde::de::DeserializeOwned;

use std::num::NonZeroU64;

/// Event time or processing time in milliseconds since the Unix epoch (watermarks, window
/// bounds, clocks). A record's own event time is an [`EventTime`], which has no "none" value.
pub type Timestamp = i64;

/// The smallest watermark: nothing is known about event time yet.
pub const MIN_WATERMARK: Timestamp = i64::MIN;

/// The final watermark of a bounded input: every window can fire.
pub const MAX_WATERMARK: Timestamp = i64::MAX;

/// The event time of a record, in epoch milliseconds: any `i64` from `i64::MIN + 1` to
/// `i64::MAX`.
///
/// Whether a record has an event time is explicit (`Option<EventTime>`), never an in-band
/// value: `Option<EventTime>` takes 8 bytes, like an `i64`, because `i64::MIN` (the
/// [`MIN_WATERMARK`], below every event time) is outside the range. A timestamp assigner that
/// returns `i64::MIN` makes a bad record (dead letter with the reason), not a record "without
/// timestamp".
///
/// ```
/// use riffle::record::EventTime;
/// assert_eq!(EventTime::new(-5).map(EventTime::millis), Some(-5));
/// assert_eq!(EventTime::new(i64::MIN), None);
/// assert_eq!(EventTime::MIN.millis(), i64::MIN + 1);
/// assert!(EventTime::new(1).unwrap() < EventTime::new(2).unwrap());
/// assert_eq!(std::mem::size_of::<Option<EventTime>>(), 8);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventTime(NonZeroU64);

/// Flipping the sign bit maps `i64` onto `u64` in order; `i64::MIN` becomes 0, the niche.
const SIGN: u64 = 1 << 63;

impl EventTime {
    /// The earliest event time, `i64::MIN + 1`.
    pub const MIN: EventTime = match EventTime::new(i64::MIN + 1) {
        Some(t) => t,
        None => unreachable!(),
    };
    /// The latest event time, `i64::MAX`.
    pub const MAX: EventTime = match EventTime::new(i64::MAX) {
        Some(t) => t,
        None => unreachable!(),
    };

    /// The event time `millis`; `None` for `i64::MIN`, which is no event time.
    pub const fn new(millis: Timestamp) -> Option<EventTime> {
        match NonZeroU64::new(millis as u64 ^ SIGN) {
            Some(bits) => Some(EventTime(bits)),
            None => None,
        }
    }

    /// The event time in epoch milliseconds.
    pub const fn millis(self) -> Timestamp {
        (self.0.get() ^ SIGN) as i64
    }
}

impl std::fmt::Debug for EventTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.millis().fmt(f)
    }
}

impl std::fmt::Display for EventTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.millis().fmt(f)
    }
}

impl From<EventTime> for Timestamp {
    fn from(time: EventTime) -> Timestamp {
        time.millis()
    }
}

/// `i64::MIN` is no event time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfRange(pub Timestamp);

impl std::fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "event time {} ms is outside the supported range {}..={} ms",
            self.0,
            EventTime::MIN.millis(),
            EventTime::MAX.millis()
        )
    }
}

impl std::error::Error for OutOfRange {}

impl TryFrom<Timestamp> for EventTime {
    type Error = OutOfRange;
    fn try_from(millis: Timestamp) -> Result<EventTime, OutOfRange> {
        EventTime::new(millis).ok_or(OutOfRange(millis))
    }
}

/// The bound on any record type of a stream.
///
/// Records move between tasks of one process without serialization; the serde bounds are there
/// for state, checkpoints and connectors. Implemented for every type that satisfies them.
pub trait Data: Clone + Send + Serialize + DeserializeOwned + 'static {}
impl<T: Clone + Send + Serialize + DeserializeOwned + 'static> Data for T {}

/// A record and its event time, if it has one.
///
/// Operators that transform a record keep its timestamp, as in Flink: a map of a click keeps the
/// click's event time, a window result carries the window's last millisecond.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<T> {
    /// The record itself.
    pub value: T,
    /// Event time, or `None` when the record has none (no timestamp assigner was given).
    pub timestamp: Option<EventTime>,
}

impl<T> Record<T> {
    /// A record with an event timestamp in epoch milliseconds.
    ///
    /// # Panics
    ///
    /// If `timestamp` is `i64::MIN`, which is no [`EventTime`]; use [`Record::timed`] with
    /// [`EventTime::new`] for timestamps that come from input.
    ///
    /// ```
    /// use riffle::record::Record;
    /// assert_eq!(Record::new("a", -3).timestamp(), Some(-3));
    /// ```
    pub fn new(value: T, timestamp: Timestamp) -> Self {
        match EventTime::new(timestamp) {
            Some(time) => Record::timed(value, Some(time)),
            None => panic!("{}", OutOfRange(timestamp)),
        }
    }

    /// A record with the event time `timestamp` (none if `None`).
    pub fn timed(value: T, timestamp: Option<EventTime>) -> Self {
        Record { value, timestamp }
    }

    /// A record without a timestamp.
    pub fn untimed(value: T) -> Self {
        Record {
            value,
            timestamp: None,
        }
    }

    /// The event timestamp in epoch milliseconds, if the record has one.
    pub fn timestamp(&self) -> Option<Timestamp> {
        self.timestamp.map(EventTime::millis)
    }

    /// The same timestamp on another value.
    pub fn with_value<U>(&self, value: U) -> Record<U> {
        Record {
            value,
            timestamp: self.timestamp,
        }
    }
}

/// A checkpoint barrier: everything before it belongs to checkpoint `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointBarrier {
    /// Checkpoint id, increasing from 1.
    pub id: u64,
    /// Wall-clock time (epoch ms) at which the coordinator triggered the checkpoint.
    pub timestamp: Timestamp,
    /// The savepoint of a stop: sources end their input right after this barrier.
    pub terminate: bool,
}

/// When a source sent a latency marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencyMarker {
    /// The instant the source emitted it.
    pub created: std::time::Instant,
}

/// A record of one of two streams: what a two-input operator reads (Flink's `connect`, a
/// typed union of two streams). `Left` comes from the first input, `Right` from the second.
///
/// ```
/// use riffle::{EnvConfig, Either, StreamEnv, sink::CollectSink};
///
/// let env = StreamEnv::with_config(EnvConfig::deterministic());
/// let (sink, out) = CollectSink::new();
/// let numbers = env.from_iter(vec![1u64, 2]);
/// let words = env.from_iter(vec!["a".to_string()]);
/// numbers.connect(&words).map(|n| Either::Left(n), |w| Either::Right(w)).sink(sink);
/// env.execute().unwrap();
/// assert_eq!(out.len(), 3);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize)]
pub enum Either<A, B> {
    /// A record of the first input.
    Left(A),
    /// A record of the second input.
    Right(B),
}

impl<A, B> Either<A, B> {
    /// The first input's record, if this is one.
    pub fn left(&self) -> Option<&A> {
        match self {
            Either::Left(a) => Some(a),
            Either::Right(_) => None,
        }
    }

    /// The second input's record, if this is one.
    pub fn right(&self) -> Option<&B> {
        match self {
            Either::Left(_) => None,
            Either::Right(b) => Some(b),
        }
    }
}

/// One element on a channel between two tasks.
#[derive(Debug)]
pub enum StreamElement<T> {
    /// A batch of records.
    Records(Vec<Record<T>>),
    /// No record with a smaller timestamp follows on this channel.
    Watermark(Timestamp),
    /// The sender has no data for now and must not hold back the watermark (`true`), or has
    /// data again (`false`).
    Idle(bool),
    /// A checkpoint barrier.
    Barrier(CheckpointBarrier),
    /// A latency marker: sent by a source now and then, it travels the channels behind the
    /// records, and each operator it reaches records how long it took (Flink's latency tracking).
    LatencyMarker(LatencyMarker),
    /// The sender has finished; nothing follows.
    EndOfInput,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_optional() {
        assert_eq!(Record::new(1, 5).timestamp(), Some(5));
        assert_eq!(Record::untimed(1).timestamp(), None);
        assert_eq!(Record::new(1, 5).with_value("a"), Record::new("a", 5));
    }

    #[test]
    fn every_i64_but_min_is_an_event_time_in_order() {
        for ms in [i64::MIN + 1, i64::MIN + 2, -1, 0, 1, i64::MAX - 1, i64::MAX] {
            assert_eq!(EventTime::new(ms).map(EventTime::millis), Some(ms));
            assert_eq!(Record::new((), ms).timestamp(), Some(ms));
        }
        assert_eq!(EventTime::new(i64::MIN), None);
        assert_eq!(
            EventTime::try_from(i64::MIN).unwrap_err().to_string(),
            "event time -9223372036854775808 ms is outside the supported range \
             -9223372036854775807..=9223372036854775807 ms"
        );
        let ordered: Vec<_> = [i64::MIN + 1, -1, 0, 1, i64::MAX]
            .map(|ms| EventTime::new(ms).unwrap())
            .into();
        assert!(ordered.windows(2).all(|w| w[0] < w[1]));
        // No timestamp sorts first, below every event time.
        assert!(None < Some(EventTime::MIN));
    }

    #[test]
    fn a_timestamp_costs_no_more_than_an_i64() {
        assert_eq!(std::mem::size_of::<Option<EventTime>>(), 8);
        assert_eq!(
            std::mem::size_of::<Record<u64>>(),
            16,
            "value + 8 bytes of optional event time"
        );
        // The seed's click: 88 bytes, 96 with its event time, as with the i64 before.
        assert_eq!(std::mem::size_of::<Record<riffle_clicks::Click>>(), 96);
    }

    proptest::proptest! {
        #[test]
        fn event_time_round_trips_and_keeps_order(a in proptest::num::i64::ANY, b in proptest::num::i64::ANY) {
            let (ea, eb) = (EventTime::new(a), EventTime::new(b));
            proptest::prop_assert_eq!(ea.is_none(), a == i64::MIN);
            if let (Some(ea), Some(eb)) = (ea, eb) {
                proptest::prop_assert_eq!(ea.millis(), a);
                proptest::prop_assert_eq!(ea.cmp(&eb), a.cmp(&b));
            }
        }
    }
}

//! What flows through a job: records with their event timestamps, in batches, with control events
//! (watermarks, checkpoint barriers, end of input) in band between the batches.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Event time or processing time in milliseconds since the Unix epoch.
pub type Timestamp = i64;

/// The timestamp of a record that has none (no timestamp assigner was given).
pub const NO_TIMESTAMP: Timestamp = i64::MIN;

/// The smallest watermark: nothing is known about event time yet.
pub const MIN_WATERMARK: Timestamp = i64::MIN;

/// The final watermark of a bounded input: every window can fire.
pub const MAX_WATERMARK: Timestamp = i64::MAX;

/// The bound on any record type of a stream.
///
/// Records move between tasks of one process without serialization; the serde bounds are there
/// for state, checkpoints and connectors. Implemented for every type that satisfies them.
pub trait Data: Clone + Send + Serialize + DeserializeOwned + 'static {}
impl<T: Clone + Send + Serialize + DeserializeOwned + 'static> Data for T {}

/// A record and its event timestamp ([`NO_TIMESTAMP`] if it has none).
///
/// Operators that transform a record keep its timestamp, as in Flink: a map of a click keeps the
/// click's event time, a window result carries the window's last millisecond.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<T> {
    /// The record itself.
    pub value: T,
    /// Event time in epoch milliseconds, or [`NO_TIMESTAMP`].
    pub timestamp: Timestamp,
}

impl<T> Record<T> {
    /// A record with an event timestamp.
    pub fn new(value: T, timestamp: Timestamp) -> Self {
        Record { value, timestamp }
    }

    /// A record without a timestamp.
    pub fn untimed(value: T) -> Self {
        Record {
            value,
            timestamp: NO_TIMESTAMP,
        }
    }

    /// The event timestamp, if the record has one.
    pub fn timestamp(&self) -> Option<Timestamp> {
        (self.timestamp != NO_TIMESTAMP).then_some(self.timestamp)
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
}

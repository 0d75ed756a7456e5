//! In-flight data of unaligned checkpoints (Flink's channel state, FLIP-76).
//!
//! An unaligned barrier overtakes records, so a checkpoint must hold the records it overtook:
//!
//! - **in-flight output**: what a task's network writer had queued towards the next task when it
//!   forwarded the barrier (the elements still in the channel, taken back and sent again after
//!   the barrier, and its partial batches). They reach the consumer after the barrier, so they
//!   are in no snapshot of the consumer; the producer's snapshot holds them, and the writer
//!   sends them again, before anything else, after a restore.
//! - **in-flight input**: what a task read, after its snapshot, from the channels that had not
//!   delivered the barrier yet. It was sent before the producer's snapshot and processed after
//!   the consumer's; the consumer's snapshot holds it, and the input gate reads it again,
//!   before the channel itself, after a restore.
//!
//! Every record a producer sent before its snapshot is then in exactly one place: the
//! consumer's state, the consumer's in-flight input, or the producer's in-flight output.
//!
//! Both go through the ordinary checkpoint format: an [`OperatorSnapshot`] with a derived id
//! (`<operator id>#in-flight-input`, `<producer id>#in-flight-output-><consumer id>#<input>`)
//! whose operator state is the log below, one list of elements (record batches, watermarks,
//! idleness) per channel. Latency markers and older barriers are not kept. A log is written only
//! when it holds records, so a checkpoint taken with empty queues restores at any parallelism;
//! one with records in flight restores only at the parallelism (and channel count) it was
//! taken at, since records in a channel belong to the subtask at its end.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize, Serializer};

use crate::checkpoint::{
    IN_FLIGHT_MARKER, OperatorSnapshot, Redistribution, SnapshotWriter, decode, encode,
};
use crate::error::{Error, Result};
use crate::record::{Data, EventTime, Record, StreamElement, Timestamp};

/// Version of the encoding of an in-flight log.
const VERSION: u32 = 1;

/// Who in-flight data belongs to in a checkpoint, and whether the job takes unaligned
/// checkpoints.
#[derive(Clone, Debug)]
pub(crate) struct InFlightSetup {
    /// Id of the state in the checkpoint.
    pub(crate) id: String,
    /// Name shown for it (`<operator> (in-flight input)`).
    pub(crate) name: String,
    pub(crate) subtask: usize,
    pub(crate) parallelism: usize,
    /// The log restored for this subtask (encoded), if the checkpoint had one.
    pub(crate) restored: Option<Vec<u8>>,
    /// The job takes unaligned checkpoints: a writer keeps a way to take back what it queued.
    pub(crate) unaligned: bool,
}

impl InFlightSetup {
    /// The id of the in-flight input of a task whose head operator has id `head`.
    pub(crate) fn input_id(head: &str) -> String {
        format!("{head}{IN_FLIGHT_MARKER}input")
    }

    /// The id of the in-flight output of `producer` on its edge to input `input` of `consumer`.
    pub(crate) fn output_id(producer: &str, consumer: &str, input: usize) -> String {
        format!("{producer}{IN_FLIGHT_MARKER}output->{consumer}#{input}")
    }

    /// A setup for unit tests: nothing restored.
    #[cfg(test)]
    pub(crate) fn detached(unaligned: bool) -> Self {
        InFlightSetup {
            id: "test#in-flight".into(),
            name: "test (in flight)".into(),
            subtask: 0,
            parallelism: 1,
            restored: None,
            unaligned,
        }
    }

    /// `log` as the snapshot of this subtask's in-flight data; `None` when it holds no record.
    pub(crate) fn snapshot<T: Data>(
        &self,
        log: &InFlightLog<T>,
    ) -> Result<Option<OperatorSnapshot>> {
        if log.records() == 0 {
            return Ok(None);
        }
        let writer = SnapshotWriter {
            operator: Some((Redistribution::RoundRobin, log.encode()?)),
            ..SnapshotWriter::default()
        };
        Ok(Some(OperatorSnapshot {
            id: self.id.clone(),
            name: self.name.clone(),
            subtask: self.subtask,
            parallelism: self.parallelism,
            writer,
        }))
    }

    /// The restored log, checked against the `channels` this subtask has now.
    pub(crate) fn restored_log<T: Data>(&self, channels: usize) -> Result<Option<InFlightLog<T>>> {
        let Some(bytes) = &self.restored else {
            return Ok(None);
        };
        let log = InFlightLog::decode(bytes).map_err(|e| {
            Error::Checkpoint(format!(
                "the in-flight records of `{}` are damaged: {e}",
                self.name
            ))
        })?;
        if log.channels.len() != channels {
            return Err(Error::Checkpoint(format!(
                "`{}` had records in flight on {} channels at an unaligned checkpoint and has \
                 {channels} now (the parallelism next to it changed): an unaligned checkpoint \
                 restores only at the parallelism it was taken at; change the parallelism from a \
                 savepoint (always aligned) or an aligned checkpoint",
                self.name,
                log.channels.len()
            )));
        }
        Ok(Some(log))
    }
}

/// The elements in flight on each channel of a gate or writer, in channel order.
#[derive(Debug)]
pub(crate) struct InFlightLog<T> {
    pub(crate) channels: Vec<Vec<StreamElement<T>>>,
}

/// One element of the encoding, borrowed.
#[derive(Serialize)]
#[serde(bound = "T: Serialize")]
enum ElementRef<'a, T> {
    Records(#[serde(serialize_with = "records_ref")] &'a [Record<T>]),
    Watermark(Timestamp),
    Idle(bool),
}

fn records_ref<T: Serialize, S: Serializer>(
    records: &&[Record<T>],
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    serializer.collect_seq(records.iter().map(|r| (&r.value, r.timestamp())))
}

/// One element of the encoding, read back.
#[derive(Deserialize)]
#[serde(bound = "T: DeserializeOwned")]
enum ElementOwned<T> {
    Records(Vec<(T, Option<Timestamp>)>),
    Watermark(Timestamp),
    Idle(bool),
}

impl<T> InFlightLog<T> {
    /// An empty log over `channels` channels.
    pub(crate) fn new(channels: usize) -> Self {
        InFlightLog {
            channels: (0..channels).map(|_| Vec::new()).collect(),
        }
    }

    /// Records in the log.
    pub(crate) fn records(&self) -> usize {
        self.channels
            .iter()
            .flatten()
            .map(|e| match e {
                StreamElement::Records(batch) => batch.len(),
                _ => 0,
            })
            .sum()
    }

    /// Empties the log.
    pub(crate) fn clear(&mut self) {
        self.channels.iter_mut().for_each(Vec::clear);
    }
}

impl<T: Clone> InFlightLog<T> {
    /// Keeps a copy of `element` of `channel` if it is data (records, a watermark, idleness).
    pub(crate) fn record(&mut self, channel: usize, element: &StreamElement<T>) {
        let copy = match element {
            StreamElement::Records(batch) => StreamElement::Records(batch.clone()),
            StreamElement::Watermark(w) => StreamElement::Watermark(*w),
            StreamElement::Idle(i) => StreamElement::Idle(*i),
            _ => return,
        };
        self.channels[channel].push(copy);
    }
}

impl<T: Data> InFlightLog<T> {
    /// The log's encoding (the state codec; records as value and event time).
    pub(crate) fn encode(&self) -> Result<Vec<u8>> {
        let channels: Vec<Vec<ElementRef<'_, T>>> = self
            .channels
            .iter()
            .map(|elements| {
                elements
                    .iter()
                    .filter_map(|e| match e {
                        StreamElement::Records(batch) => Some(ElementRef::Records(batch)),
                        StreamElement::Watermark(w) => Some(ElementRef::Watermark(*w)),
                        StreamElement::Idle(i) => Some(ElementRef::Idle(*i)),
                        _ => None,
                    })
                    .collect()
            })
            .collect();
        encode(&(VERSION, channels))
    }

    /// Reads a log written by [`InFlightLog::encode`].
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self> {
        let (version, channels): (u32, Vec<Vec<ElementOwned<T>>>) = decode(bytes)?;
        if version != VERSION {
            return Err(Error::Checkpoint(format!(
                "in-flight log version {version} is not supported (this Riffle reads {VERSION})"
            )));
        }
        let channels = channels
            .into_iter()
            .map(|elements| {
                elements
                    .into_iter()
                    .map(|e| {
                        Ok(match e {
                            ElementOwned::Records(records) => StreamElement::Records(
                                records
                                    .into_iter()
                                    .map(|(value, ts)| {
                                        let timestamp = match ts {
                                            None => None,
                                            Some(ms) => {
                                                Some(EventTime::try_from(ms).map_err(|e| {
                                                    Error::Checkpoint(e.to_string())
                                                })?)
                                            }
                                        };
                                        Ok(Record::timed(value, timestamp))
                                    })
                                    .collect::<Result<_>>()?,
                            ),
                            ElementOwned::Watermark(w) => StreamElement::Watermark(w),
                            ElementOwned::Idle(i) => StreamElement::Idle(i),
                        })
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(InFlightLog { channels })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{CheckpointBarrier, LatencyMarker};

    fn text(log: &InFlightLog<String>) -> Vec<Vec<String>> {
        log.channels
            .iter()
            .map(|elements| {
                elements
                    .iter()
                    .map(|e| match e {
                        StreamElement::Records(b) => format!(
                            "{:?}",
                            b.iter()
                                .map(|r| (r.value.clone(), r.timestamp()))
                                .collect::<Vec<_>>()
                        ),
                        StreamElement::Watermark(w) => format!("wm:{w}"),
                        StreamElement::Idle(i) => format!("idle:{i}"),
                        other => format!("{other:?}"),
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_log_round_trips_with_timestamps_and_keeps_only_data() {
        let mut log = InFlightLog::<String>::new(3);
        log.record(0, &StreamElement::Records(vec![Record::new("a".into(), 5)]));
        log.record(0, &StreamElement::Watermark(4));
        log.record(
            0,
            &StreamElement::LatencyMarker(LatencyMarker {
                created: std::time::Instant::now(),
            }),
        );
        log.record(
            2,
            &StreamElement::Barrier(CheckpointBarrier {
                id: 1,
                timestamp: 0,
                terminate: false,
                unaligned: true,
            }),
        );
        log.record(2, &StreamElement::Idle(true));
        log.record(
            2,
            &StreamElement::Records(vec![
                Record::untimed("b".into()),
                Record::new("c".into(), -7),
            ]),
        );
        assert_eq!(log.records(), 3);
        let back = InFlightLog::<String>::decode(&log.encode().unwrap()).unwrap();
        assert_eq!(
            text(&back),
            vec![
                vec![r#"[("a", Some(5))]"#.to_string(), "wm:4".into()],
                vec![],
                vec![
                    "idle:true".into(),
                    r#"[("b", None), ("c", Some(-7))]"#.into()
                ],
            ]
        );
        log.clear();
        assert_eq!(log.records(), 0);
    }

    #[test]
    fn only_logs_with_records_are_snapshotted_and_restores_check_the_channels() {
        let setup = InFlightSetup::detached(true);
        let mut log = InFlightLog::<String>::new(2);
        log.record(1, &StreamElement::Watermark(3));
        assert!(
            setup.snapshot(&log).unwrap().is_none(),
            "a watermark alone is not kept"
        );
        log.record(
            1,
            &StreamElement::Records(vec![Record::untimed("x".into())]),
        );
        let snapshot = setup.snapshot(&log).unwrap().unwrap();
        let (mode, bytes) = snapshot.writer.operator.clone().unwrap();
        assert_eq!(mode, Redistribution::RoundRobin);
        let restored = InFlightSetup {
            restored: Some(bytes),
            ..setup
        };
        assert_eq!(
            text(&restored.restored_log::<String>(2).unwrap().unwrap())[1].len(),
            2
        );
        let err = restored.restored_log::<String>(3).unwrap_err().to_string();
        assert!(
            err.contains("had records in flight on 2 channels") && err.contains("has 3 now"),
            "{err}"
        );
        let damaged = InFlightSetup {
            restored: Some(vec![1, 2, 3]),
            ..restored
        };
        assert!(
            damaged
                .restored_log::<String>(2)
                .unwrap_err()
                .to_string()
                .contains("damaged")
        );
    }
}

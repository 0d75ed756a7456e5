//! The Kafka source: every partition of the subscribed topics is a split, read by one source
//! subtask with its own consumer (manually assigned, no group rebalancing: the job decides who
//! reads what, as in Flink). A split's position is the next offset to read; it is stored in every
//! checkpoint, sought to on restore, and committed to the consumer group when the checkpoint
//! completes (so `kafka-consumer-groups.sh` shows the job's lag). The partition's lag behind its
//! last stable offset comes from librdkafka's statistics, published as the split's lag metric.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use riffle::record::Data;
use riffle::source::{
    BadRecordPolicy, Boundedness, ReadStatus, Source, SourceOutput, SplitReader, SplitWatermark,
};
use serde::de::DeserializeOwned;

use crate::partition::{ConsumerSettings, LOOKUP_TIMEOUT, PartitionReader};
use crate::{KafkaConnection, KafkaGroup, kafka_error, kafka_failure};

/// How soon to look again when a partition had nothing to read.
const EMPTY_POLL_BACKOFF: Duration = Duration::from_millis(2);

/// Where a partition is read from when the job does not restore a position for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartFrom {
    /// The oldest record the partition still has.
    Earliest,
    /// Only records written after the job started.
    Latest,
    /// The offset committed by the consumer group; `Earliest` where it has none.
    GroupOffsets,
    /// The first record whose timestamp is at or after this instant (ms since the epoch).
    Timestamp(i64),
}

/// Where a bounded read stops in each partition (Flink's `scan.bounded.mode`), looked up when the
/// job starts: the partition is read up to (not including) that offset, then the source ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopAt {
    /// The partition's latest offset (its last stable offset: committed transactions only).
    Latest,
    /// The offset the consumer group has committed; a partition without one fails the start.
    GroupOffsets,
    /// The first record whose timestamp is at or after this instant (ms since the epoch): what
    /// was written before it; the latest offset when no record is that late.
    Timestamp(i64),
    /// Offsets by partition number; a partition not named stops at its latest offset.
    Offsets(std::collections::BTreeMap<i32, i64>),
}

/// One partition of one topic: a split of a [`KafkaSource`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KafkaPartition {
    /// Topic name.
    pub topic: String,
    /// Partition number.
    pub partition: i32,
}

/// Decodes a record from its key and its value (`None`: a tombstone).
type Decoder<T> = Arc<dyn Fn(Option<&[u8]>, Option<&[u8]>) -> Result<T, String> + Send + Sync>;

/// Reads Kafka topics in parallel, partition by partition.
///
/// Records carry the Kafka record timestamp as their event time (a watermark strategy with
/// `with_timestamps` overrides it). Values that cannot be decoded follow the
/// [`BadRecordPolicy`] (dead letters by default, with the partition and offset).
///
/// ```no_run
/// use std::time::Duration;
/// use riffle_kafka::{KafkaConnection, KafkaSource, StartFrom};
/// let source = KafkaSource::<serde_json::Value>::json(KafkaConnection::new("127.0.0.1:9092"), ["clicks"])
///     .group_id("clicks-job")
///     .start_from(StartFrom::GroupOffsets)
///     .partition_discovery(Some(Duration::from_secs(30)));
/// ```
pub struct KafkaSource<T> {
    kafka: KafkaConnection,
    topics: Vec<String>,
    group_id: Option<String>,
    start: StartFrom,
    decode: Decoder<T>,
    policy: BadRecordPolicy,
    discovery: Option<Duration>,
    /// A client for metadata (partition lists), created on first use.
    metadata: Mutex<Option<BaseConsumer>>,
    /// The process group whose assignment says which partitions this process reads.
    in_group: Option<KafkaGroup>,
    /// Where each partition's read stops (looked up at the job's start), then the source ends.
    stop: Option<StopAt>,
}

impl<T: Data + DeserializeOwned> KafkaSource<T> {
    /// Reads JSON values of type `T`.
    pub fn json<S: Into<String>>(
        kafka: KafkaConnection,
        topics: impl IntoIterator<Item = S>,
    ) -> Self {
        Self::with_decoder(kafka, topics, |bytes| {
            serde_json::from_slice(bytes).map_err(|e| format!("invalid JSON: {e}"))
        })
    }
}

impl KafkaSource<Vec<u8>> {
    /// Reads the raw bytes of the values.
    pub fn raw<S: Into<String>>(
        kafka: KafkaConnection,
        topics: impl IntoIterator<Item = S>,
    ) -> Self {
        Self::with_decoder(kafka, topics, |bytes| Ok(bytes.to_vec()))
    }
}

impl<T: Data> KafkaSource<T> {
    /// Reads values decoded by `decode`; an `Err` makes the record a bad record with that reason.
    pub fn with_decoder<S: Into<String>>(
        kafka: KafkaConnection,
        topics: impl IntoIterator<Item = S>,
        decode: impl Fn(&[u8]) -> Result<T, String> + Send + Sync + 'static,
    ) -> Self {
        Self::with_record_decoder(kafka, topics, move |_key, value| match value {
            Some(bytes) => decode(bytes),
            None => Err("the record has no value".to_string()),
        })
    }

    /// Reads records decoded by `decode` from their key and their value (`None` for a record
    /// without one, a tombstone of a compacted topic): for upsert topics, where the key names
    /// the row and a tombstone deletes it. An `Err` makes the record a bad record.
    ///
    /// ```no_run
    /// use riffle_kafka::{KafkaConnection, KafkaSource};
    /// // (key, Some(value)) for an upsert, (key, None) for a delete.
    /// let source = KafkaSource::with_record_decoder(
    ///     KafkaConnection::new("127.0.0.1:9092"),
    ///     ["users"],
    ///     |key, value| {
    ///         let key = String::from_utf8_lossy(key.ok_or("no key")?).into_owned();
    ///         Ok((key, value.map(|v| String::from_utf8_lossy(v).into_owned())))
    ///     },
    /// );
    /// ```
    pub fn with_record_decoder<S: Into<String>>(
        kafka: KafkaConnection,
        topics: impl IntoIterator<Item = S>,
        decode: impl Fn(Option<&[u8]>, Option<&[u8]>) -> Result<T, String> + Send + Sync + 'static,
    ) -> Self {
        KafkaSource {
            kafka,
            topics: topics.into_iter().map(Into::into).collect(),
            group_id: None,
            start: StartFrom::GroupOffsets,
            decode: Arc::new(decode),
            policy: BadRecordPolicy::DeadLetter,
            discovery: Some(Duration::from_secs(30)),
            metadata: Mutex::new(None),
            in_group: None,
            stop: None,
        }
    }

    /// The consumer group the offsets are committed to (default `riffle-<topics>`).
    pub fn group_id(mut self, group: impl Into<String>) -> Self {
        self.group_id = Some(group.into());
        self
    }

    /// Where to start reading partitions without a restored position (default: the group's
    /// committed offsets, else the earliest).
    pub fn start_from(mut self, start: StartFrom) -> Self {
        self.start = start;
        self
    }

    /// What to do with values that cannot be decoded (default: dead letters).
    pub fn bad_records(mut self, policy: BadRecordPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// How often to look for partitions added while the job runs (default 30 s; `None` reads
    /// the partitions found at start only). New partitions are read from their beginning.
    pub fn partition_discovery(mut self, interval: Option<Duration>) -> Self {
        self.discovery = interval;
        self
    }

    /// Reads the partitions that `group` assigns to this process, from the group's committed
    /// offsets (`docs/scale-out.md`, [`KafkaGroup`]). The offsets at each checkpoint commit in
    /// the group's transaction, with the outputs of the process's sinks in the group; a change of
    /// assignment ends the run ([`run_in_group`](crate::run_in_group) starts the next one).
    pub fn in_group(mut self, group: &KafkaGroup) -> Self {
        self.group_id = Some(group.name().to_string());
        self.start = StartFrom::GroupOffsets;
        self.discovery = None;
        self.in_group = Some(group.clone());
        self
    }

    /// Reads each partition up to its latest offset when the job starts (its last stable
    /// offset: committed transactions only), then ends, as Flink's `scan.bounded.mode =
    /// latest-offset`: the source is bounded, and a job reading only bounded sources finishes.
    /// A run restored from a checkpoint stops where the first run would have. Partitions added
    /// later are not read.
    ///
    /// ```no_run
    /// use riffle_kafka::{KafkaConnection, KafkaSource, StartFrom};
    /// // What the topic holds now, from its beginning.
    /// let source = KafkaSource::<serde_json::Value>::json(KafkaConnection::new("127.0.0.1:9092"), ["clicks"])
    ///     .start_from(StartFrom::Earliest)
    ///     .until_latest();
    /// ```
    pub fn until_latest(self) -> Self {
        self.until(StopAt::Latest)
    }

    /// Reads each partition up to where `stop` says when the job starts, then ends (Flink's
    /// `scan.bounded.mode`); [`until_latest`](Self::until_latest) is `until(StopAt::Latest)`.
    /// A run restored from a checkpoint stops where the first run would have. Partitions added
    /// later are not read.
    ///
    /// ```no_run
    /// use riffle_kafka::{KafkaConnection, KafkaSource, StartFrom, StopAt};
    /// // What was written before midnight, from the beginning.
    /// let source = KafkaSource::<serde_json::Value>::json(KafkaConnection::new("127.0.0.1:9092"), ["clicks"])
    ///     .start_from(StartFrom::Earliest)
    ///     .until(StopAt::Timestamp(1_796_428_800_000));
    /// ```
    pub fn until(mut self, stop: StopAt) -> Self {
        self.stop = Some(stop);
        self.discovery = None;
        self
    }

    fn group(&self) -> String {
        self.group_id
            .clone()
            .unwrap_or_else(|| format!("riffle-{}", self.topics.join("-")))
    }

    fn partitions(&self) -> riffle::Result<Vec<KafkaPartition>> {
        let mut metadata = self.metadata.lock().expect("metadata lock");
        if metadata.is_none() {
            *metadata = Some(
                self.kafka
                    .client_config()
                    .create()
                    .map_err(|e| kafka_error("cannot create a metadata client", e))?,
            );
        }
        let client = metadata.as_ref().expect("created above");
        let mut splits = Vec::new();
        for topic in &self.topics {
            let found = client
                .fetch_metadata(Some(topic), LOOKUP_TIMEOUT)
                .map_err(|e| kafka_error(format!("cannot read the partitions of `{topic}`"), e))?;
            let partitions = found
                .topics()
                .iter()
                .find(|t| t.name() == topic)
                .filter(|t| t.error().is_none())
                .map(|t| t.partitions().len())
                .unwrap_or(0);
            if partitions == 0 {
                return Err(kafka_failure(
                    riffle::ConnectorErrorKind::Fatal,
                    format!("topic `{topic}`"),
                    format!(
                        "does not exist (or has no partitions) at {}",
                        self.kafka.bootstrap()
                    ),
                ));
            }
            splits.extend((0..partitions as i32).map(|partition| KafkaPartition {
                topic: topic.clone(),
                partition,
            }));
        }
        Ok(splits)
    }
}

impl<T: Data> Source<T> for KafkaSource<T> {
    type Split = KafkaPartition;

    fn name(&self) -> String {
        format!("kafka {}", self.topics.join(","))
    }

    fn boundedness(&self) -> Boundedness {
        if self.stop.is_some() {
            Boundedness::Bounded
        } else {
            Boundedness::Unbounded
        }
    }

    fn validate(&self) -> riffle::Result<()> {
        if self.topics.is_empty() || self.topics.iter().any(|t| t.trim().is_empty()) {
            return Err(riffle::Error::config(
                "topics",
                "a Kafka source needs at least one topic name",
            ));
        }
        if let Some(group) = &self.in_group
            && let Some(topic) = self.topics.iter().find(|t| !group.topics().contains(t))
        {
            return Err(riffle::Error::config(
                "in_group",
                format!(
                    "topic `{topic}` is not one of the topics of group `{}` ({})",
                    group.name(),
                    group.topics().join(", ")
                ),
            ));
        }
        if self.stop.is_some() && self.in_group.is_some() {
            return Err(riffle::Error::config(
                "until",
                "a process group reads its topics as they grow: a bounded read cannot be in one",
            ));
        }
        if self.discovery.is_some_and(|d| d.is_zero()) {
            return Err(riffle::Error::config(
                "partition_discovery",
                "must be a positive interval",
            ));
        }
        self.kafka.validate("kafka")
    }

    fn splits(&self, _parallelism: usize) -> riffle::Result<Vec<KafkaPartition>> {
        match &self.in_group {
            Some(group) => Ok(group
                .assignment()
                .into_iter()
                .filter(|(topic, _)| self.topics.contains(topic))
                .map(|(topic, partition)| KafkaPartition { topic, partition })
                .collect()),
            None => self.partitions(),
        }
    }

    /// A topic's partitions go round-robin from a subtask given by the topic's name, so that a
    /// partition keeps its subtask when partitions are added.
    fn owner(&self, split: &KafkaPartition, _index: usize, parallelism: usize) -> usize {
        partition_owner(split, parallelism)
    }

    fn discovery_interval(&self) -> Option<Duration> {
        self.discovery
    }

    fn reader(&self, split: KafkaPartition) -> riffle::Result<Box<dyn SplitReader<T>>> {
        let partition = PartitionReader::open(
            &self.kafka,
            split,
            ConsumerSettings {
                defaults: &[
                    ("isolation.level", "read_committed"),
                    ("auto.offset.reset", "earliest"),
                ],
                forced: &[],
                group_id: self.group(),
                start: self.start,
                what: "a consumer",
            },
            self.in_group.clone(),
        )?;
        let mut partition = partition;
        if let Some(stop) = &self.stop {
            partition.stop_at(stop)?;
        }
        Ok(Box::new(KafkaReader {
            partition,
            decode: self.decode.clone(),
        }))
    }

    fn bad_record_policy(&self) -> BadRecordPolicy {
        self.policy
    }
}

/// The source subtask (of `parallelism`) that reads `split`: a topic's partitions go round-robin
/// from a subtask given by the topic's name.
pub(crate) fn partition_owner(split: &KafkaPartition, parallelism: usize) -> usize {
    let topic_start = split
        .topic
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32))
        as usize;
    (topic_start % parallelism + split.partition as usize) % parallelism
}

/// Reads one partition: decodes each record's value.
struct KafkaReader<T> {
    partition: PartitionReader,
    decode: Decoder<T>,
}

impl<T: Data> SplitReader<T> for KafkaReader<T> {
    fn split_id(&self) -> String {
        self.partition.split_id().to_string()
    }

    fn read(&mut self, out: &mut SourceOutput<T>, max: usize) -> riffle::Result<ReadStatus> {
        if self.partition.reached_stop() {
            return Ok(ReadStatus::Finished);
        }
        let decode = &self.decode;
        let read = self.partition.read(max, |offset, message| {
            let timestamp = message.timestamp().to_millis();
            let payload = message.payload();
            match decode(message.key(), payload) {
                Ok(value) => out.emit_with_timestamp(value, timestamp),
                Err(error) => out.bad_record(
                    format!("offset {offset}"),
                    error,
                    payload.unwrap_or_default(),
                ),
            }
        })?;
        Ok(match read {
            Err(status) => status,
            Ok(0) => ReadStatus::Pending(Some(Instant::now() + EMPTY_POLL_BACKOFF)),
            Ok(_) => ReadStatus::Ready,
        })
    }

    fn position(&self) -> serde_json::Value {
        match self.partition.stop() {
            Some(stop) => {
                serde_json::json!({ "offset": self.partition.next_offset(), "stop": stop })
            }
            None => serde_json::json!({ "offset": self.partition.next_offset() }),
        }
    }

    fn checkpoint_started(&mut self, checkpoint_id: u64, event_time: SplitWatermark) {
        self.partition.record_offset(
            checkpoint_id,
            Some(serde_json::json!({ "event_time": event_time })),
        );
    }

    fn resume_event_time(&mut self) -> Option<SplitWatermark> {
        let group = self.partition.group()?;
        let split = self.partition.split();
        let recorded = group.restored_reader(&split.topic, split.partition)?;
        serde_json::from_value(recorded.get("event_time")?.clone()).ok()
    }

    fn seek(&mut self, position: &serde_json::Value) -> riffle::Result<()> {
        let offset = position
            .get("offset")
            .and_then(|o| o.as_i64())
            .ok_or_else(|| {
                riffle::Error::Checkpoint(format!(
                    "bad Kafka position for {}: {position}",
                    self.partition.split_id()
                ))
            })?;
        if self.partition.stop().is_some()
            && let Some(stop) = position.get("stop").and_then(|s| s.as_i64())
        {
            self.partition.set_stop(stop);
        }
        self.partition.seek(offset)
    }

    fn start_at_beginning(&mut self) -> riffle::Result<()> {
        self.partition.start_at_beginning()
    }

    fn checkpoint_complete(&mut self, position: &serde_json::Value) -> riffle::Result<()> {
        self.partition.checkpoint_complete(position);
        Ok(())
    }

    fn lag(&self) -> Option<i64> {
        self.partition.lag()
    }
}

//! A `key_by` through Kafka: a repartition topic between the producer tasks of a keyed stream
//! and the tasks that read it by key, with event time carried in the topic (as Flink's
//! KafkaShuffle did) and exactly-once by Kafka transactions. It is the building block for a job
//! spread over several processes (each reads the partitions it owns); inside one process it
//! works the same way and is tested that way.
//!
//! **Topic.** `<group>-<uid>-repartition`, created when the job starts with the configured
//! number of *shuffle partitions* (and `retention.ms=-1`: records keep their event time as
//! Kafka timestamp, which may be older than any retention). A key goes to the partition of its
//! key group (`key_group * partitions / max_parallelism`, the way key groups map onto subtasks),
//! so a task that reads partition `P` sees exactly the key groups of `P`.
//!
//! **Records.** Each record is written to its partition with the key's canonical bytes as Kafka
//! key, its event time as Kafka timestamp (a header carries it where Kafka cannot: no event
//! time, or one at or before the epoch), its value encoded with postcard (compact and fast; the
//! job's own records, never read by others; [`KafkaShuffle::json`] switches to JSON for types
//! postcard cannot decode, such as `serde_json::Value`), and two headers: `riffle.p`, the
//! producer task's index, and `riffle.n`, the producer count.
//!
//! **Event time.** Every producer task writes control records (header `riffle.c`) into *every*
//! partition: its watermark (`w`, 8 bytes big-endian) when it advanced, at most once per
//! [`watermark_interval`](KafkaShuffle::watermark_interval) of processing time and always
//! before a checkpoint barrier's pre-commit, at an idleness change and at the end; an idle
//! marker (`i`) when its input goes idle; an end marker (`e`) when its input ends. The reader of
//! a partition keeps the latest watermark of each producer (the count from the headers; a
//! producer not heard from yet holds the partition at the minimum; an idle or ended producer is
//! left out until it writes again) and the partition's watermark is the minimum over the
//! others; it feeds the source's per-split watermark machinery
//! ([`Source::supplies_watermarks`]), so windows
//! downstream fire as they would in one process. A partition whose producers all ended is
//! finished (a bounded job ends).
//!
//! **Exactly-once** (the default; needs checkpoints): the producer writes the records and
//! control records between two barriers in one Kafka transaction, with the exactly-once
//! [`KafkaSink`](crate::KafkaSink)'s machinery (pre-commit at the barrier, commit when the
//! checkpoint completes, fencing and repair on restore); the reader is `read_committed` and
//! its offsets, with its producers' watermarks, are in the checkpoint. Records reach the
//! reading side when the checkpoint that covers them completes: the checkpoint interval is the
//! shuffle's latency. [`KafkaShuffle::at_least_once`] flushes instead (records visible within
//! the buffer timeout; after a failure, replayed records are in the topic twice).
//!
//! ```no_run
//! use std::time::Duration;
//! use riffle::{StreamEnv, aggregate::Count, window::Tumbling};
//! use riffle_kafka::{KafkaConnection, KafkaShuffle, KafkaShuffleExt};
//! # fn clicks(env: &StreamEnv) -> riffle::DataStream<riffle_clicks::Click> { unimplemented!() }
//! let env = StreamEnv::new();
//! let kafka = KafkaConnection::new("127.0.0.1:9092");
//! clicks(&env)
//!     .key_by(|c| c.user_id)
//!     .through_kafka(KafkaShuffle::new(kafka, "clicks-job", "by-user").partitions(8))
//!     .window(Tumbling::of(Duration::from_secs(60)))
//!     .aggregate(Count)
//!     .print();
//! ```

use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::Message;
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::BaseRecord;
use riffle::keys::{KeyGroup, encode_key, key_group_of, subtask_for_key_group};
use riffle::operators::OperatorContext;
use riffle::record::{Data, MIN_WATERMARK, Record, Timestamp};
use riffle::sink::{Finalizer, Guarantee, Sink, SinkWriter};
use riffle::source::{
    BadRecordPolicy, Boundedness, ReadStatus, Source, SourceOutput, SplitReader, SplitWatermark,
};
use riffle::{DataStream, KeyedStream};
use serde::{Deserialize, Serialize};

use crate::admin::ensure_topic_with;
use crate::partition::{ConsumerSettings, PartitionReader};
use crate::sink::{GroupOutput, KafkaProducer, Target, Transactions};
use crate::{KafkaConnection, KafkaGroup, KafkaPartition, StartFrom};

/// Header: the index of the producer task that wrote the record (u32, big-endian).
const PRODUCER_HEADER: &str = "riffle.p";
/// Header: the number of producer tasks (u32, big-endian).
const COUNT_HEADER: &str = "riffle.n";
/// Header of control records: `w` (watermark in the value), `i` (idle), `e` (end).
const CONTROL_HEADER: &str = "riffle.c";
/// Header: the event time where the Kafka timestamp cannot hold it (i64 big-endian; empty for
/// a record without event time).
const TIME_HEADER: &str = "riffle.t";

/// How shuffled values are encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Codec {
    Postcard,
    Json,
}

/// A Kafka repartition topic for a `key_by`: see the [module docs](self) and
/// [`KafkaShuffleExt::through_kafka`].
#[derive(Clone, Debug)]
pub struct KafkaShuffle {
    kafka: KafkaConnection,
    group: String,
    uid: String,
    partitions: usize,
    guarantee: Guarantee,
    codec: Codec,
    pool: usize,
    timeout: Duration,
    watermark_interval: Duration,
    replication: i32,
    /// Whether the job takes checkpoints (read from the environment when the shuffle is added).
    checkpointing: bool,
    /// The process group whose members write and read the topic (`in_group`).
    in_group: Option<KafkaGroup>,
}

impl KafkaShuffle {
    /// A shuffle of the job (or group of processes) `group` through the topic
    /// `<group>-<uid>-repartition`: keep `group` and `uid` across restarts of the job (the topic,
    /// the transactional ids and the checkpointed state are found by them). Defaults: 8
    /// partitions, exactly-once, postcard values, watermarks at most every 200 ms.
    pub fn new(kafka: KafkaConnection, group: impl Into<String>, uid: impl Into<String>) -> Self {
        KafkaShuffle {
            kafka,
            group: group.into(),
            uid: uid.into(),
            partitions: 8,
            guarantee: Guarantee::ExactlyOnce,
            codec: Codec::Postcard,
            pool: 4,
            timeout: Duration::from_secs(60),
            watermark_interval: Duration::from_millis(200),
            replication: 1,
            checkpointing: false,
            in_group: None,
        }
    }

    /// A shuffle between the processes of `group` (`docs/scale-out.md`): each process reads the
    /// repartition partitions the group assigns to it, from the group's committed offsets, and
    /// writes in the group's transactions, so that its input offsets, its records in the topic
    /// and its sinks' outputs commit together. The topic must be one of the group's topics
    /// (create it with [`create_topic`](Self::create_topic) before [`KafkaGroup::join`]); its
    /// partitions carry the keyed state after the shuffle, which moves with them. The stream
    /// written must come straight from the group's Kafka source (same parallelism, no
    /// repartition in between): its producers are the source topics' partitions, whose
    /// watermarks the topic carries.
    ///
    /// ```no_run
    /// use riffle::{StreamEnv, aggregate::Count, window::Tumbling};
    /// use riffle_kafka::{KafkaConnection, KafkaGroup, KafkaShuffle, KafkaShuffleExt, KafkaSink, KafkaSource, run_in_group};
    /// # use std::time::Duration;
    /// let kafka = KafkaConnection::new("127.0.0.1:9092");
    /// let shuffle = KafkaShuffle::new(kafka.clone(), "clicks-job", "by-user").partitions(8);
    /// shuffle.create_topic().unwrap();
    /// let group = KafkaGroup::join(kafka.clone(), "clicks-job", ["clicks".to_string(), shuffle.topic()]).unwrap();
    /// run_in_group(&group, |group| {
    ///     let env = StreamEnv::new(); // with a checkpoint interval
    ///     env.from_source(KafkaSource::<serde_json::Value>::json(kafka.clone(), ["clicks"]).in_group(group))
    ///         .key_by(|click| click["user_id"].as_u64())
    ///         .through_kafka(shuffle.clone().json().in_group(group))
    ///         .window(Tumbling::of(Duration::from_secs(60)))
    ///         .aggregate(Count)
    ///         .map(|r| serde_json::json!({ "user_id": r.key, "start": r.window_start, "count": r.value }))
    ///         .sink(KafkaSink::json(kafka.clone(), "agg-clicks").in_group(group));
    ///     Ok(env)
    /// })
    /// .unwrap();
    /// ```
    pub fn in_group(mut self, group: &KafkaGroup) -> Self {
        self.in_group = Some(group.clone());
        self.guarantee = Guarantee::ExactlyOnce;
        self
    }

    /// Creates the repartition topic with the configured partitions when it does not exist (a
    /// topic with another partition count is an error naming `partitions`). A job creates it
    /// when it starts; a process group needs it before it joins, since it reads it.
    pub fn create_topic(&self) -> riffle::Result<()> {
        self.kafka.validate("kafka")?;
        ensure_topic_with(
            &self.kafka,
            &self.topic(),
            self.partitions as i32,
            self.replication,
            &[("retention.ms", "-1")],
            "partitions",
        )
    }

    /// The number of shuffle partitions (the topic's partitions; at most the job's
    /// `max_parallelism`, since key groups map onto them). Fixed for the life of the topic.
    pub fn partitions(mut self, partitions: usize) -> Self {
        self.partitions = partitions;
        self
    }

    /// Kafka transactions per checkpoint, `read_committed` reads (default; the job must take
    /// checkpoints).
    pub fn exactly_once(mut self) -> Self {
        self.guarantee = Guarantee::ExactlyOnce;
        self
    }

    /// Records flushed every buffer timeout and at every barrier: visible at once, but
    /// written again when the job replays after a failure.
    pub fn at_least_once(mut self) -> Self {
        self.guarantee = Guarantee::AtLeastOnce;
        self
    }

    /// Values as JSON instead of postcard: for types whose `Deserialize` needs a
    /// self-describing format (`serde_json::Value`, untagged enums); larger and slower.
    pub fn json(mut self) -> Self {
        self.codec = Codec::Json;
        self
    }

    /// Producers per task in exactly-once mode (default 4; see
    /// [`KafkaSink::transaction_pool`](crate::KafkaSink::transaction_pool)).
    pub fn transaction_pool(mut self, producers: usize) -> Self {
        self.pool = producers;
        self
    }

    /// How long flushes, commits and recovery reads wait for the brokers (default 60 s).
    pub fn broker_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The least processing time between two watermark records of a producer task (default
    /// 200 ms; a changed watermark is also written at each checkpoint barrier, at idleness and
    /// at the end). Each one is a record in every partition.
    pub fn watermark_interval(mut self, interval: Duration) -> Self {
        self.watermark_interval = interval;
        self
    }

    /// The replication factor of the topic when the job creates it (default 1).
    pub fn replication(mut self, replication: i32) -> Self {
        self.replication = replication;
        self
    }

    /// The repartition topic: `<group>-<uid>-repartition`.
    pub fn topic(&self) -> String {
        format!("{}-{}-repartition", self.group, self.uid)
    }

    fn validate(&self) -> riffle::Result<()> {
        if self.group.trim().is_empty() || self.uid.trim().is_empty() {
            return Err(riffle::Error::config(
                "KafkaShuffle::new",
                "needs a group and a uid (they name the topic)",
            ));
        }
        if self.partitions == 0 || self.partitions > i32::MAX as usize {
            return Err(riffle::Error::config("partitions", "must be at least 1"));
        }
        if self.timeout.is_zero() {
            return Err(riffle::Error::config("broker_timeout", "must be positive"));
        }
        if self.guarantee == Guarantee::ExactlyOnce {
            if self.pool < 2 {
                return Err(riffle::Error::config(
                    "transaction_pool",
                    "needs at least 2 producers",
                ));
            }
            if !self.checkpointing {
                return Err(riffle::Error::config(
                    "exactly_once",
                    "a Kafka shuffle commits its records with the job's checkpoints: configure \
                     a checkpoint interval before adding the shuffle, or use at_least_once()",
                ));
            }
        }
        if let Some(group) = &self.in_group
            && !group.topics().contains(&self.topic())
        {
            return Err(riffle::Error::config(
                "in_group",
                format!(
                    "the repartition topic `{}` is not one of the topics of group `{}` ({}): \
                     join the group with it",
                    self.topic(),
                    group.name(),
                    group.topics().join(", ")
                ),
            ));
        }
        self.create_topic()
    }

    /// The shuffle partition of `key_group`.
    fn partition_of(key_group: KeyGroup, max_parallelism: usize, partitions: usize) -> i32 {
        subtask_for_key_group(key_group, max_parallelism, partitions) as i32
    }
}

/// Puts a Kafka shuffle into a job: `stream.key_by(f).through_kafka(shuffle)`.
pub trait KafkaShuffleExt<K, T> {
    /// Writes this keyed stream's records to the shuffle's repartition topic and returns the
    /// same records read back from it, keyed by the same key: the keyed operators that follow
    /// (windows, `process`, joins) read from the topic. The reading source runs with the job's
    /// parallelism, at most one task per shuffle partition; its operators get the uids
    /// `<uid>-shuffle-write` and `<uid>-shuffle-read`.
    fn through_kafka(&self, shuffle: KafkaShuffle) -> KeyedStream<K, T>;
}

impl<K, T> KafkaShuffleExt<K, T> for KeyedStream<K, T>
where
    K: Data + Hash + Eq,
    T: Data,
{
    fn through_kafka(&self, mut shuffle: KafkaShuffle) -> KeyedStream<K, T> {
        let stream: DataStream<T> = self.unkeyed();
        let env = stream.env();
        let config = env.config();
        shuffle.checkpointing = config.checkpoints.enabled();
        let topic = shuffle.topic();
        if let Some(group) = &shuffle.in_group {
            group.carries_keyed_state(&topic);
        }
        let key = self.key_selector();
        stream
            .sink(ShuffleSink {
                shuffle: shuffle.clone(),
                key: key.clone(),
            })
            .name(&format!("Shuffle: write {topic}"))
            .uid(&format!("{}-shuffle-write", shuffle.uid));
        let readers = config.parallelism.clamp(1, shuffle.partitions.max(1));
        let uid = format!("{}-shuffle-read", shuffle.uid);
        env.from_source(ShuffleSource::<T> {
            shuffle,
            _type: std::marker::PhantomData,
        })
        .name(&format!("Shuffle: read {topic}"))
        .uid(&uid)
        .set_parallelism(readers)
        .key_by(move |value: &T| key(value))
    }
}

// ---------------------------------------------------------------------------------------------
// The producer side.

/// The producer side: a sink writing keyed, timestamped records and control records.
struct ShuffleSink<K, T> {
    shuffle: KafkaShuffle,
    key: Arc<dyn Fn(&T) -> K + Send + Sync>,
}

impl<K: Data + Hash + Eq, T: Data> Sink<T> for ShuffleSink<K, T> {
    fn name(&self) -> String {
        format!("kafka shuffle {}", self.shuffle.topic())
    }

    fn validate(&self) -> riffle::Result<()> {
        self.shuffle.validate()
    }

    fn guarantee(&self) -> Guarantee {
        self.shuffle.guarantee
    }

    fn writer(&self, ctx: &OperatorContext) -> riffle::Result<Box<dyn SinkWriter<T>>> {
        let shuffle = &self.shuffle;
        if shuffle.partitions > ctx.max_parallelism {
            return Err(riffle::Error::config(
                "partitions",
                format!(
                    "is {}, more than the job's max_parallelism ({}): key groups map onto \
                     shuffle partitions",
                    shuffle.partitions, ctx.max_parallelism
                ),
            ));
        }
        let target = Target {
            kafka: shuffle.kafka.clone(),
            topic: shuffle.topic(),
            timeout: shuffle.timeout,
        };
        let (output, producers, count) = match (&shuffle.in_group, shuffle.guarantee) {
            (Some(group), _) => {
                let (producers, count) = group.producers(ctx.subtask, ctx.parallelism)?;
                let output = Output::Group(GroupOutput::new(group, &target.topic, target.timeout));
                (output, producers, count)
            }
            (None, guarantee) => {
                let output = Self::output(shuffle, guarantee, target, ctx)?;
                (output, vec![ctx.subtask as u32], ctx.parallelism as u32)
            }
        };
        Ok(Box::new(ShuffleWriter {
            output,
            topic: shuffle.topic(),
            key: self.key.clone(),
            codec: shuffle.codec,
            partitions: shuffle.partitions,
            max_parallelism: ctx.max_parallelism,
            producers: producers.iter().map(|p| p.to_be_bytes()).collect(),
            count: count.to_be_bytes(),
            key_bytes: Vec::new(),
            value: Vec::new(),
            interval: shuffle.watermark_interval,
            watermark: MIN_WATERMARK,
            sent: MIN_WATERMARK,
            sent_at: None,
            idle: false,
        }))
    }
}

impl<K, T> ShuffleSink<K, T> {
    /// Where a producer task of a job in one process writes.
    fn output(
        shuffle: &KafkaShuffle,
        guarantee: Guarantee,
        target: Target,
        ctx: &OperatorContext,
    ) -> riffle::Result<Output> {
        Ok(match guarantee {
            Guarantee::AtLeastOnce => Output::AtLeastOnce(target.producer(None)?),
            Guarantee::ExactlyOnce => {
                let prefix = format!("riffle-{}-{}", shuffle.topic(), ctx.job_name);
                Output::ExactlyOnce(Box::new(Transactions::new(
                    target,
                    prefix,
                    ctx,
                    shuffle.pool,
                )))
            }
        })
    }
}

/// Where a producer task writes: a plain producer, the open transaction, or the process
/// group's transaction.
enum Output {
    AtLeastOnce(KafkaProducer),
    ExactlyOnce(Box<Transactions>),
    Group(GroupOutput),
}

impl Output {
    fn producer(&mut self) -> riffle::Result<&KafkaProducer> {
        match self {
            Output::AtLeastOnce(producer) => Ok(producer),
            Output::ExactlyOnce(txns) => txns.producer(),
            Output::Group(output) => output.producer(),
        }
    }
}

struct ShuffleWriter<K, T> {
    output: Output,
    topic: String,
    key: Arc<dyn Fn(&T) -> K + Send + Sync>,
    codec: Codec,
    partitions: usize,
    max_parallelism: usize,
    /// The producer indices this task writes for: its subtask index in one process; in a
    /// process group, the source partitions it reads (none: it reads nothing).
    producers: Vec<[u8; 4]>,
    count: [u8; 4],
    key_bytes: Vec<u8>,
    value: Vec<u8>,
    interval: Duration,
    /// The input's watermark.
    watermark: Timestamp,
    /// The last watermark written to the partitions.
    sent: Timestamp,
    sent_at: Option<Instant>,
    /// Whether the input is idle (an idle marker was written).
    idle: bool,
}

impl<K: Data, T: Data> ShuffleWriter<K, T> {
    fn headers(
        &self,
        producer: &[u8; 4],
        control: Option<&[u8]>,
        time: Option<&[u8]>,
    ) -> OwnedHeaders {
        let mut headers = OwnedHeaders::new_with_capacity(3)
            .insert(Header {
                key: PRODUCER_HEADER,
                value: Some(&producer[..]),
            })
            .insert(Header {
                key: COUNT_HEADER,
                value: Some(&self.count[..]),
            });
        if let Some(control) = control {
            headers = headers.insert(Header {
                key: CONTROL_HEADER,
                value: Some(control),
            });
        }
        if let Some(time) = time {
            headers = headers.insert(Header {
                key: TIME_HEADER,
                value: Some(time),
            });
        }
        headers
    }

    /// Writes a control record into every partition, for each producer this task writes for.
    fn control(&mut self, kind: &[u8], payload: &[u8]) -> riffle::Result<()> {
        if self.producers.is_empty() {
            return Ok(());
        }
        let headers: Vec<OwnedHeaders> = self
            .producers
            .iter()
            .map(|producer| self.headers(producer, Some(kind), None))
            .collect();
        let producer = self.output.producer()?;
        for headers in headers {
            for partition in 0..self.partitions as i32 {
                producer.enqueue(
                    BaseRecord::to(&self.topic)
                        .partition(partition)
                        .payload(payload)
                        .headers(headers.clone()),
                )?;
            }
        }
        Ok(())
    }

    /// Writes the watermark if it advanced since the last one written and `force` or the
    /// interval passed.
    fn send_watermark(&mut self, force: bool) -> riffle::Result<()> {
        if self.watermark <= self.sent
            || (!force && self.sent_at.is_some_and(|at| at.elapsed() < self.interval))
        {
            return Ok(());
        }
        let watermark = self.watermark;
        tracing::trace!(
            watermark,
            producers = self.producers.len(),
            "shuffle: watermark"
        );
        self.control(b"w", &watermark.to_be_bytes())?;
        self.sent = watermark;
        self.sent_at = Some(Instant::now());
        Ok(())
    }

    fn encode(&mut self, value: &T) -> riffle::Result<()> {
        self.value.clear();
        match self.codec {
            Codec::Postcard => riffle::checkpoint::encode_into(value, &mut self.value),
            Codec::Json => {
                serde_json::to_writer(&mut self.value, value).map_err(riffle::Error::user)
            }
        }
    }
}

impl<K: Data, T: Data> SinkWriter<T> for ShuffleWriter<K, T> {
    fn write(&mut self, batch: &mut Vec<Record<T>>) -> riffle::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.idle = false;
        let Some(&producer) = self.producers.first() else {
            return Err(riffle::Error::config(
                "in_group",
                "records reach a Kafka shuffle writer whose subtask reads no partition of the \
                 group's source topics: the stream into a group's shuffle must come straight \
                 from its Kafka source, at the same parallelism",
            ));
        };
        let plain = self.headers(&producer, None, None);
        tracing::trace!(records = batch.len(), topic = %self.topic, "shuffle: write");
        for record in batch.drain(..) {
            let key = (self.key)(&record.value);
            self.key_bytes.clear();
            encode_key(&key, &mut self.key_bytes).map_err(riffle::Error::user)?;
            let partition = KafkaShuffle::partition_of(
                key_group_of(&key, self.max_parallelism),
                self.max_parallelism,
                self.partitions,
            );
            self.encode(&record.value)?;
            let timestamp = record.timestamp();
            let (headers, kafka_time) = match timestamp {
                Some(t) if t > 0 => (plain.clone(), Some(t)),
                Some(t) => (self.headers(&producer, None, Some(&t.to_be_bytes())), None),
                None => (self.headers(&producer, None, Some(&[])), None),
            };
            let mut out = BaseRecord::to(&self.topic)
                .partition(partition)
                .key(self.key_bytes.as_slice())
                .payload(self.value.as_slice())
                .headers(headers);
            if let Some(t) = kafka_time {
                out = out.timestamp(t);
            }
            self.output.producer()?.enqueue(out)?;
        }
        self.output.producer()?.serve()
    }

    fn on_watermark(&mut self, watermark: Timestamp) -> riffle::Result<()> {
        self.watermark = self.watermark.max(watermark);
        self.idle = false;
        self.send_watermark(false)
    }

    fn on_idle(&mut self, idle: bool) -> riffle::Result<()> {
        if idle && !self.idle {
            self.send_watermark(true)?;
            self.control(b"i", &[])?;
        }
        self.idle = idle;
        Ok(())
    }

    fn flush(&mut self) -> riffle::Result<()> {
        self.send_watermark(false)?;
        match &mut self.output {
            Output::AtLeastOnce(producer) => producer.serve(),
            Output::ExactlyOnce(txns) => txns.serve(),
            Output::Group(output) => output.serve(),
        }
    }

    fn pre_commit(&mut self, checkpoint_id: u64) -> riffle::Result<Option<Vec<u8>>> {
        self.send_watermark(true)?;
        match &mut self.output {
            Output::AtLeastOnce(producer) => producer.flush().map(|()| None),
            Output::ExactlyOnce(txns) => txns.pre_commit(checkpoint_id).map(Some),
            Output::Group(output) => output.pre_commit(checkpoint_id).map(|()| None),
        }
    }

    fn commit(&mut self, checkpoint_id: u64) -> riffle::Result<()> {
        match &mut self.output {
            Output::AtLeastOnce(_) => Ok(()),
            Output::ExactlyOnce(txns) => txns.commit(checkpoint_id),
            Output::Group(output) => output.commit(checkpoint_id),
        }
    }

    fn recover(&mut self, committables: Vec<Vec<u8>>) -> riffle::Result<()> {
        match &mut self.output {
            Output::ExactlyOnce(txns) => txns.recover(committables),
            Output::AtLeastOnce(_) | Output::Group(_) => Ok(()),
        }
    }

    fn close(&mut self) -> riffle::Result<Option<Finalizer>> {
        if let Output::Group(_) = self.output {
            // A group's run ends when partitions move, and its open transaction is aborted:
            // the producers did not end, other processes go on for them.
            return Ok(None);
        }
        self.send_watermark(true)?;
        self.control(b"e", &[])?;
        match &mut self.output {
            Output::AtLeastOnce(producer) => producer.flush().map(|()| None),
            Output::ExactlyOnce(txns) => txns.close().map(Some),
            Output::Group(_) => unreachable!("returned above"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Event time of a partition: the minimum over its producers.

/// What one producer task said last in a partition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct ProducerClock {
    /// Its latest watermark (`None`: none yet).
    watermark: Option<Timestamp>,
    /// It said it is idle, and wrote nothing since.
    idle: bool,
    /// Its input ended.
    ended: bool,
}

/// The event time of one shuffle partition, from its producers' control records.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PartitionClock {
    /// The producers, by index; empty until a record told their count.
    producers: Vec<ProducerClock>,
}

/// Where a partition's event time stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PartitionTime {
    /// The minimum over the producers neither idle nor ended (the minimum watermark while one
    /// of them, or the producer count, is not known yet).
    Watermark(Timestamp),
    /// Every producer is idle or ended, not all ended.
    Idle,
    /// Every producer ended.
    Finished,
}

impl PartitionClock {
    /// The producer `index` of `count`; a count other than the known one replaces it (the job
    /// was restarted with another parallelism): producers beyond it are forgotten, new ones
    /// are not heard from yet.
    fn producer(&mut self, index: u32, count: u32) -> Result<&mut ProducerClock, String> {
        if count == 0 || index >= count {
            return Err(format!(
                "producer index {index} out of range for a producer count of {count}"
            ));
        }
        if self.producers.len() != count as usize {
            if !self.producers.is_empty() {
                tracing::info!(
                    before = self.producers.len(),
                    now = count,
                    "the producer count of a shuffle partition changed"
                );
            }
            self.producers
                .resize(count as usize, ProducerClock::default());
        }
        Ok(&mut self.producers[index as usize])
    }

    /// A data record of producer `index`: it is active.
    pub(crate) fn on_data(&mut self, index: u32, count: u32) -> Result<(), String> {
        let producer = self.producer(index, count)?;
        producer.idle = false;
        producer.ended = false;
        Ok(())
    }

    /// A watermark of producer `index` (never moves its watermark back).
    pub(crate) fn on_watermark(
        &mut self,
        index: u32,
        count: u32,
        watermark: Timestamp,
    ) -> Result<(), String> {
        let producer = self.producer(index, count)?;
        producer.watermark = Some(producer.watermark.map_or(watermark, |w| w.max(watermark)));
        producer.idle = false;
        producer.ended = false;
        Ok(())
    }

    /// Producer `index` went idle.
    pub(crate) fn on_idle(&mut self, index: u32, count: u32) -> Result<(), String> {
        self.producer(index, count)?.idle = true;
        Ok(())
    }

    /// Producer `index` ended.
    pub(crate) fn on_end(&mut self, index: u32, count: u32) -> Result<(), String> {
        self.producer(index, count)?.ended = true;
        Ok(())
    }

    /// The partition's event time now.
    pub(crate) fn time(&self) -> PartitionTime {
        if self.producers.is_empty() {
            return PartitionTime::Watermark(MIN_WATERMARK);
        }
        if self.producers.iter().all(|p| p.ended) {
            return PartitionTime::Finished;
        }
        self.producers
            .iter()
            .filter(|p| !p.idle && !p.ended)
            .map(|p| p.watermark.unwrap_or(MIN_WATERMARK))
            .min()
            .map_or(PartitionTime::Idle, PartitionTime::Watermark)
    }
}

// ---------------------------------------------------------------------------------------------
// The consumer side.

/// The consumer side: one split per shuffle partition.
struct ShuffleSource<T> {
    shuffle: KafkaShuffle,
    _type: std::marker::PhantomData<fn() -> T>,
}

impl<T: Data> Source<T> for ShuffleSource<T> {
    type Split = KafkaPartition;

    fn name(&self) -> String {
        format!("kafka shuffle {}", self.shuffle.topic())
    }

    fn boundedness(&self) -> Boundedness {
        Boundedness::Unbounded
    }

    fn validate(&self) -> riffle::Result<()> {
        self.shuffle.validate()
    }

    fn splits(&self, _parallelism: usize) -> riffle::Result<Vec<KafkaPartition>> {
        let topic = self.shuffle.topic();
        let partitions: Vec<i32> = match &self.shuffle.in_group {
            // The partitions the group assigns to this process.
            Some(group) => group
                .assignment()
                .into_iter()
                .filter(|(t, _)| *t == topic)
                .map(|(_, partition)| partition)
                .collect(),
            None => (0..self.shuffle.partitions as i32).collect(),
        };
        Ok(partitions
            .into_iter()
            .map(|partition| KafkaPartition {
                topic: topic.clone(),
                partition,
            })
            .collect())
    }

    /// Partition `P` of `n` goes to task `P * parallelism / n`: with as many tasks as
    /// partitions (or a divisor of it), a task reads the partitions of the key groups a keyed
    /// operator of the same parallelism owns.
    fn owner(&self, split: &KafkaPartition, _index: usize, parallelism: usize) -> usize {
        split.partition as usize * parallelism / self.shuffle.partitions
    }

    fn supplies_watermarks(&self) -> bool {
        true
    }

    fn bad_record_policy(&self) -> BadRecordPolicy {
        // A record of the job's own topic that cannot be read is a bug or a foreign writer.
        BadRecordPolicy::Fail
    }

    fn reader(&self, split: KafkaPartition) -> riffle::Result<Box<dyn SplitReader<T>>> {
        // In a process group, the offsets are the group's (committed in its transactions).
        let group_id = match &self.shuffle.in_group {
            Some(group) => group.name().to_string(),
            None => self.shuffle.topic(),
        };
        let isolation = match self.shuffle.guarantee {
            Guarantee::ExactlyOnce => "read_committed",
            Guarantee::AtLeastOnce => "read_uncommitted",
        };
        // A group's run starts at the committed offset, with the producer clocks recorded there.
        let clock = match &self.shuffle.in_group {
            Some(group) => match group.restored_reader(&split.topic, split.partition) {
                Some(clock) => serde_json::from_value(clock).map_err(|e| {
                    riffle::Error::Checkpoint(format!(
                        "bad producer clocks for {}-{} in the group's marker: {e}",
                        split.topic, split.partition
                    ))
                })?,
                None => PartitionClock::default(),
            },
            None => PartitionClock::default(),
        };
        let partition = PartitionReader::open(
            &self.shuffle.kafka,
            split,
            ConsumerSettings {
                defaults: &[
                    ("auto.offset.reset", "earliest"),
                    ("fetch.wait.max.ms", "50"),
                ],
                forced: &[("isolation.level", isolation)],
                group_id,
                start: StartFrom::GroupOffsets,
                what: "a shuffle consumer",
            },
            self.shuffle.in_group.clone(),
        )?;
        Ok(Box::new(ShuffleReader {
            partition,
            codec: self.shuffle.codec,
            clock,
            told: None,
            _type: std::marker::PhantomData,
        }))
    }
}

/// Reads one shuffle partition: values to emit, and the producers' control records that make
/// the partition's event time.
struct ShuffleReader<T> {
    partition: PartitionReader,
    codec: Codec,
    clock: PartitionClock,
    /// The partition's event time as last told to the source.
    told: Option<PartitionTime>,
    _type: std::marker::PhantomData<fn() -> T>,
}

/// A u32 header value.
fn header_u32(message: &impl Message, key: &str) -> Option<u32> {
    let headers = message.headers()?;
    let value = headers.iter().find(|h| h.key == key)?.value?;
    Some(u32::from_be_bytes(value.try_into().ok()?))
}

fn header<'a>(message: &'a impl Message, key: &str) -> Option<Option<&'a [u8]>> {
    let headers = message.headers()?;
    headers.iter().find(|h| h.key == key).map(|h| h.value)
}

fn decode<T: Data>(codec: Codec, bytes: &[u8]) -> Result<T, String> {
    match codec {
        Codec::Postcard => riffle::checkpoint::decode(bytes).map_err(|e| e.to_string()),
        Codec::Json => serde_json::from_slice(bytes).map_err(|e| format!("invalid JSON: {e}")),
    }
}

/// Takes one record of the topic: a value to emit, or a control record for the clock.
fn take<T: Data>(
    clock: &mut PartitionClock,
    codec: Codec,
    message: &rdkafka::message::BorrowedMessage<'_>,
    out: &mut SourceOutput<T>,
) -> Result<(), String> {
    let (Some(index), Some(count)) = (
        header_u32(message, PRODUCER_HEADER),
        header_u32(message, COUNT_HEADER),
    ) else {
        return Err(format!(
            "not a shuffle record: no `{PRODUCER_HEADER}`/`{COUNT_HEADER}` headers"
        ));
    };
    let payload = message.payload().unwrap_or_default();
    match header(message, CONTROL_HEADER) {
        None => {
            let value = decode(codec, payload)?;
            clock.on_data(index, count)?;
            let timestamp = match header(message, TIME_HEADER) {
                None => message.timestamp().to_millis(),
                Some(Some(bytes)) if bytes.len() == 8 => {
                    Some(i64::from_be_bytes(bytes.try_into().expect("8 bytes")))
                }
                Some(_) => None,
            };
            out.emit_with_timestamp(value, timestamp);
            Ok(())
        }
        Some(Some(b"w")) => {
            let watermark: [u8; 8] = payload
                .try_into()
                .map_err(|_| "a watermark record without its 8 bytes".to_string())?;
            clock.on_watermark(index, count, i64::from_be_bytes(watermark))
        }
        Some(Some(b"i")) => clock.on_idle(index, count),
        Some(Some(b"e")) => clock.on_end(index, count),
        Some(other) => Err(format!("unknown shuffle control record {other:?}")),
    }
}

impl<T: Data> SplitReader<T> for ShuffleReader<T> {
    fn split_id(&self) -> String {
        self.partition.split_id().to_string()
    }

    fn read(&mut self, out: &mut SourceOutput<T>, max: usize) -> riffle::Result<ReadStatus> {
        let (clock, codec) = (&mut self.clock, self.codec);
        let read = match self.partition.read(max, |offset, message| {
            if let Err(error) = take(clock, codec, message, out) {
                out.bad_record(
                    format!("offset {offset}"),
                    error,
                    message.payload().unwrap_or_default(),
                );
            }
        })? {
            Ok(read) => read,
            Err(status) => return Ok(status),
        };
        let time = self.clock.time();
        if self.told != Some(time) {
            match time {
                PartitionTime::Watermark(watermark) => {
                    out.split_idle(false);
                    out.split_watermark(watermark);
                }
                PartitionTime::Idle => out.split_idle(true),
                PartitionTime::Finished => {}
            }
            self.told = Some(time);
        }
        Ok(if time == PartitionTime::Finished {
            ReadStatus::Finished
        } else if read == 0 {
            ReadStatus::Pending(Some(Instant::now() + Duration::from_millis(2)))
        } else {
            ReadStatus::Ready
        })
    }

    fn position(&self) -> serde_json::Value {
        serde_json::json!({ "offset": self.partition.next_offset(), "producers": self.clock })
    }

    fn checkpoint_started(&mut self, checkpoint_id: u64, _event_time: SplitWatermark) {
        if self.partition.group().is_some() {
            self.partition
                .record_offset(checkpoint_id, serde_json::to_value(&self.clock).ok());
        }
    }

    fn seek(&mut self, position: &serde_json::Value) -> riffle::Result<()> {
        let bad = || {
            riffle::Error::Checkpoint(format!(
                "bad shuffle position for {}: {position}",
                self.partition.split_id()
            ))
        };
        let offset = position
            .get("offset")
            .and_then(|o| o.as_i64())
            .ok_or_else(bad)?;
        self.clock = match position.get("producers") {
            Some(clock) => serde_json::from_value(clock.clone()).map_err(|_| bad())?,
            None => PartitionClock::default(),
        };
        self.told = None;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partition_watermark_is_the_minimum_over_its_producers() {
        let mut clock = PartitionClock::default();
        assert_eq!(clock.time(), PartitionTime::Watermark(MIN_WATERMARK));
        clock.on_watermark(0, 3, 5_000).unwrap();
        // Producers 1 and 2 not heard from yet: held at the minimum.
        assert_eq!(clock.time(), PartitionTime::Watermark(MIN_WATERMARK));
        clock.on_watermark(2, 3, 7_000).unwrap();
        assert_eq!(clock.time(), PartitionTime::Watermark(MIN_WATERMARK));
        // A producer that wrote data but no watermark yet still holds it back.
        clock.on_data(1, 3).unwrap();
        assert_eq!(clock.time(), PartitionTime::Watermark(MIN_WATERMARK));
        clock.on_watermark(1, 3, 4_000).unwrap();
        assert_eq!(clock.time(), PartitionTime::Watermark(4_000));
        clock.on_watermark(1, 3, 9_000).unwrap();
        assert_eq!(clock.time(), PartitionTime::Watermark(5_000));
        // A producer's watermark never goes back.
        clock.on_watermark(0, 3, 1_000).unwrap();
        assert_eq!(clock.time(), PartitionTime::Watermark(5_000));
        clock.on_watermark(0, 3, 8_000).unwrap();
        assert_eq!(clock.time(), PartitionTime::Watermark(7_000));
    }

    #[test]
    fn an_idle_producer_is_left_out_until_it_writes_again() {
        let mut clock = PartitionClock::default();
        clock.on_watermark(0, 2, 5_000).unwrap();
        clock.on_watermark(1, 2, 1_000).unwrap();
        assert_eq!(clock.time(), PartitionTime::Watermark(1_000));
        clock.on_idle(1, 2).unwrap();
        assert_eq!(clock.time(), PartitionTime::Watermark(5_000));
        clock.on_idle(0, 2).unwrap();
        assert_eq!(clock.time(), PartitionTime::Idle);
        // Data from producer 1 brings it back, with its last watermark.
        clock.on_data(1, 2).unwrap();
        assert_eq!(clock.time(), PartitionTime::Watermark(1_000));
        clock.on_watermark(0, 2, 6_000).unwrap();
        clock.on_watermark(1, 2, 12_000).unwrap();
        assert_eq!(clock.time(), PartitionTime::Watermark(6_000));
        // An idle producer that was never heard from before does not hold it back either.
        let mut clock = PartitionClock::default();
        clock.on_idle(0, 2).unwrap();
        clock.on_watermark(1, 2, 3_000).unwrap();
        assert_eq!(clock.time(), PartitionTime::Watermark(3_000));
    }

    #[test]
    fn ended_producers_are_left_out_and_all_ended_finish_the_partition() {
        let mut clock = PartitionClock::default();
        clock.on_watermark(0, 2, 2_000).unwrap();
        clock.on_watermark(1, 2, 9_000).unwrap();
        clock.on_watermark(0, 2, i64::MAX).unwrap();
        clock.on_end(0, 2).unwrap();
        assert_eq!(clock.time(), PartitionTime::Watermark(9_000));
        clock.on_idle(1, 2).unwrap();
        assert_eq!(clock.time(), PartitionTime::Idle);
        clock.on_end(1, 2).unwrap();
        assert_eq!(clock.time(), PartitionTime::Finished);
    }

    #[test]
    fn a_producer_count_that_changes_replaces_the_known_one() {
        let mut clock = PartitionClock::default();
        clock.on_watermark(0, 2, 5_000).unwrap();
        clock.on_watermark(1, 2, 6_000).unwrap();
        assert_eq!(clock.time(), PartitionTime::Watermark(5_000));
        // The job restarted with three producers: the third holds the partition back until
        // it is heard from; the first two keep what they said.
        clock.on_watermark(0, 3, 7_000).unwrap();
        assert_eq!(clock.time(), PartitionTime::Watermark(MIN_WATERMARK));
        clock.on_watermark(2, 3, 8_000).unwrap();
        assert_eq!(clock.time(), PartitionTime::Watermark(6_000));
        // Down to one producer: the others are forgotten.
        clock.on_data(0, 1).unwrap();
        assert_eq!(clock.time(), PartitionTime::Watermark(7_000));
        // An index beyond its own count is an error (a bad record), and changes nothing.
        assert!(
            clock
                .on_watermark(3, 2, 1)
                .unwrap_err()
                .contains("out of range")
        );
        assert!(clock.on_data(0, 0).is_err());
        assert_eq!(clock.time(), PartitionTime::Watermark(7_000));
    }

    #[test]
    fn the_clock_survives_a_checkpoint_as_json() {
        let mut clock = PartitionClock::default();
        clock.on_watermark(0, 2, 5_000).unwrap();
        clock.on_idle(1, 2).unwrap();
        let position = serde_json::json!({ "offset": 7, "producers": clock });
        let back: PartitionClock = serde_json::from_value(position["producers"].clone()).unwrap();
        assert_eq!(back, clock);
        assert_eq!(back.time(), PartitionTime::Watermark(5_000));
    }

    #[test]
    fn key_groups_map_onto_partitions_as_onto_subtasks() {
        // Partition P holds exactly the key groups a subtask P of `partitions` owns.
        for (partitions, max) in [(2, 128), (3, 128), (8, 128), (5, 7)] {
            for subtask in 0..partitions {
                let range = riffle::keys::KeyGroupRange::for_subtask(subtask, partitions, max);
                for kg in 0..max as u16 {
                    assert_eq!(
                        KafkaShuffle::partition_of(kg, max, partitions) == subtask as i32,
                        range.contains(kg),
                    );
                }
            }
        }
    }
}

//! The Kafka sink: JSON values (key from a field or a function) written with librdkafka's
//! producer, at-least-once or exactly-once.
//!
//! **At-least-once**: the producer is idempotent (`acks=all`); at every checkpoint barrier it is
//! flushed and every delivery checked, so what a completed checkpoint covers is in Kafka. After a
//! failure, records replayed from the checkpoint are written again.
//!
//! **Exactly-once**: the records between two barriers are written in one Kafka transaction. At
//! barrier N the transaction is flushed (pre-committed, its partitions and offset ranges stored in
//! checkpoint N) and the next records go to the next transaction, on another producer of a small
//! pool; when checkpoint N completes, its transaction is committed. Transactional ids are
//! `<prefix>-<job>-<subtask>-<slot>` (the prefix defaults to `riffle-<topic>-<operator id>`; the
//! job's name keeps two jobs writing the same topic from fencing each other), so a restarted job
//! re-initialises the same ids: Kafka fences the old producers and aborts what they left open.
//! A restore also initialises the ids the restored checkpoint used and the job no longer does (a
//! smaller `transaction_pool`, fewer subtasks), so no transaction of theirs stays open to hold
//! `read_committed` readers back. A failure between the completion of checkpoint N and the commit of its transaction
//! is repaired on restore: the transaction's records are still in the log (aborted records are
//! kept) at the offsets the delivery reports gave (stored as runs of consecutive offsets per
//! partition), and are written again in a new transaction — unless a `read_committed` read shows
//! the commit happened. The copies carry a `riffle.txn` header naming the transaction, so that a
//! later recovery from the same checkpoint sees them and does not write them twice; records
//! written normally carry nothing extra. Readers of the topic must use
//! `isolation.level=read_committed`.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Header, Headers, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};
use riffle::operators::OperatorContext;
use riffle::record::{Data, Record};
use riffle::sink::{Ending, Finalizer, Guarantee, Sink, SinkWriter};
use serde::{Deserialize, Serialize};

use crate::{KafkaConnection, KafkaGroup, kafka_error, kafka_failure};
use riffle::ConnectorErrorKind;

/// The header naming the transaction a recovery's copy of a record belongs to.
const TXN_HEADER: &str = "riffle.txn";
/// Time allowed to flushes, transaction commits and recovery reads, unless set with
/// [`KafkaSink::broker_timeout`].
const TIMEOUT: Duration = Duration::from_secs(60);

/// Appends a value's key to the buffer; `false` for no key.
type KeyFn<T> = Arc<dyn Fn(&T, &mut Vec<u8>) -> bool + Send + Sync>;
type SerializeFn<T> = Arc<dyn Fn(&T, &mut Vec<u8>) -> riffle::Result<()> + Send + Sync>;

/// Writes a stream to a Kafka topic as JSON.
///
/// ```no_run
/// use riffle_kafka::{KafkaConnection, KafkaSink};
/// #[derive(Clone, serde::Serialize, serde::Deserialize)]
/// struct Count { user_id: String, count: u64 }
/// let sink = KafkaSink::<Count>::json(KafkaConnection::new("127.0.0.1:9092"), "agg-clicks")
///     .key_field("user_id")
///     .exactly_once()
///     .transactional_id_prefix("clicks-job");
/// ```
pub struct KafkaSink<T> {
    kafka: KafkaConnection,
    topic: String,
    guarantee: Guarantee,
    key: Option<KeyFn<T>>,
    key_field: Option<String>,
    serialize: SerializeFn<T>,
    /// Whether `serialize` writes JSON (a key field can be read from the value).
    json: bool,
    prefix: Option<String>,
    pool: usize,
    timeout: Duration,
    group: Option<KafkaGroup>,
    _type: PhantomData<fn(T)>,
}

impl KafkaSink<String> {
    /// A sink writing each string as it is (already encoded records, such as JSON lines).
    pub fn raw(kafka: KafkaConnection, topic: impl Into<String>) -> Self {
        Self::with_serializer(kafka, topic, |value: &String, out| {
            out.extend_from_slice(value.as_bytes());
            Ok(())
        })
    }
}

impl<T: Data> KafkaSink<T> {
    /// A sink writing JSON values to `topic`, at-least-once, without keys.
    pub fn json(kafka: KafkaConnection, topic: impl Into<String>) -> Self {
        let mut sink = Self::with_serializer(kafka, topic, |value, out| {
            serde_json::to_writer(out, value).map_err(riffle::Error::user)
        });
        sink.json = true;
        sink
    }

    /// A sink writing values serialized by `serialize` (appending to the buffer it is given).
    pub fn with_serializer(
        kafka: KafkaConnection,
        topic: impl Into<String>,
        serialize: impl Fn(&T, &mut Vec<u8>) -> riffle::Result<()> + Send + Sync + 'static,
    ) -> Self {
        KafkaSink {
            kafka,
            topic: topic.into(),
            guarantee: Guarantee::AtLeastOnce,
            key: None,
            key_field: None,
            serialize: Arc::new(serialize),
            json: false,
            prefix: None,
            pool: 4,
            timeout: TIMEOUT,
            group: None,
            _type: PhantomData,
        }
    }

    /// The record key is this function of the value (Kafka partitions by key).
    pub fn key<K: AsRef<[u8]>>(mut self, key: impl Fn(&T) -> K + Send + Sync + 'static) -> Self {
        self.key = Some(Arc::new(move |value, out: &mut Vec<u8>| {
            out.extend_from_slice(key(value).as_ref());
            true
        }));
        self
    }

    /// The record key is this field of the JSON value (a string as is, anything else as JSON);
    /// JSON sinks only.
    pub fn key_field(mut self, field: impl Into<String>) -> Self {
        self.key_field = Some(field.into());
        self
    }

    /// A Kafka transaction per checkpoint: records are visible to `read_committed` readers once
    /// the checkpoint that covers them completed, none twice, none lost.
    pub fn exactly_once(mut self) -> Self {
        self.guarantee = Guarantee::ExactlyOnce;
        self
    }

    /// Flush at every checkpoint; records replayed after a failure are written again (default).
    pub fn at_least_once(mut self) -> Self {
        self.guarantee = Guarantee::AtLeastOnce;
        self
    }

    /// The prefix of the transactional ids (default `riffle-<topic>-<operator id>`); the ids are
    /// `<prefix>-<job name>-<subtask>-<slot>`. The job name (`EnvConfig::job_name`) keeps jobs
    /// with the same prefix apart: give every job its own name, and keep name and prefix across
    /// restarts of a job (a restarted job fences its predecessor's producers by their ids). The
    /// ids begin with the prefix, for Kafka's prefixed ACLs on transactional ids.
    pub fn transactional_id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Producers per subtask in exactly-once mode (default 4): one for the open transaction, the
    /// others for transactions waiting for their checkpoint to complete. More checkpoints failing
    /// in a row than this fail the job (which restores and carries on).
    pub fn transaction_pool(mut self, producers: usize) -> Self {
        self.pool = producers;
        self
    }

    /// How long a flush at a barrier, a transaction commit, the initialisation of transactions or
    /// a read of the recovery scan on restore waits for the brokers before the job fails and
    /// restores from its last checkpoint (default 60 s; librdkafka retries within it, so shorter
    /// broker outages go unnoticed).
    pub fn broker_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Writes in the transactions of a process group (implies exactly-once): the records of
    /// every sink of the process commit in one transaction with the source offsets of the
    /// checkpoint that completed (`docs/scale-out.md`, [`KafkaGroup`]).
    pub fn in_group(mut self, group: &KafkaGroup) -> Self {
        self.group = Some(group.clone());
        self.guarantee = Guarantee::ExactlyOnce;
        self
    }

    fn encoder(&self) -> Encoder<T> {
        Encoder {
            key: self.key.clone(),
            key_field: self.key_field.clone(),
            serialize: self.serialize.clone(),
            value: Vec::with_capacity(256),
            key_bytes: Vec::new(),
        }
    }
}

impl<T: Data> Sink<T> for KafkaSink<T> {
    fn name(&self) -> String {
        let guarantee = match self.guarantee {
            Guarantee::AtLeastOnce => "at-least-once",
            Guarantee::ExactlyOnce => "exactly-once",
        };
        format!("kafka {} ({guarantee})", self.topic)
    }

    fn validate(&self) -> riffle::Result<()> {
        if self.topic.trim().is_empty() {
            return Err(riffle::Error::config(
                "topic",
                "a Kafka sink needs a topic name",
            ));
        }
        if self.key_field.is_some() && !self.json {
            return Err(riffle::Error::config(
                "key_field",
                "reads the key from a JSON value: use KafkaSink::json, or key(..) with other formats",
            ));
        }
        if self.timeout.is_zero() {
            return Err(riffle::Error::config("broker_timeout", "must be positive"));
        }
        if self.group.is_some() && self.guarantee != Guarantee::ExactlyOnce {
            return Err(riffle::Error::config(
                "in_group",
                "a sink in a process group writes in the group's transactions: it is exactly-once",
            ));
        }
        if self.guarantee == Guarantee::ExactlyOnce && self.pool < 2 {
            return Err(riffle::Error::config(
                "transaction_pool",
                "needs at least 2 producers",
            ));
        }
        self.kafka.validate("kafka")
    }

    fn guarantee(&self) -> Guarantee {
        self.guarantee
    }

    fn exclusive_resource(&self) -> Option<String> {
        // The default prefix holds the operator's id: only a prefix given twice can collide.
        let prefix = self.prefix.as_ref()?;
        (self.guarantee == Guarantee::ExactlyOnce && self.group.is_none()).then(|| {
            format!("the Kafka transactional ids of prefix `{prefix}` (transactional_id_prefix)")
        })
    }

    fn writer(&self, ctx: &OperatorContext) -> riffle::Result<Box<dyn SinkWriter<T>>> {
        let target = Target {
            kafka: self.kafka.clone(),
            topic: self.topic.clone(),
            timeout: self.timeout,
        };
        if let Some(group) = &self.group {
            return Ok(Box::new(GroupWriter {
                output: GroupOutput::new(group, &self.topic, self.timeout),
                encoder: self.encoder(),
            }));
        }
        Ok(match self.guarantee {
            Guarantee::AtLeastOnce => Box::new(AtLeastOnceWriter {
                producer: target.producer(None)?,
                encoder: self.encoder(),
            }),
            Guarantee::ExactlyOnce => {
                let prefix = format!(
                    "{}-{}",
                    self.prefix
                        .clone()
                        .unwrap_or_else(|| format!("riffle-{}-{}", self.topic, ctx.id)),
                    ctx.job_name
                );
                Box::new(TransactionalWriter {
                    txns: Transactions::new(target, prefix, ctx, self.pool),
                    encoder: self.encoder(),
                })
            }
        })
    }
}

/// Turns values into record keys and JSON payloads.
struct Encoder<T> {
    key: Option<KeyFn<T>>,
    key_field: Option<String>,
    serialize: SerializeFn<T>,
    value: Vec<u8>,
    key_bytes: Vec<u8>,
}

impl<T: Data> Encoder<T> {
    /// Encodes `value`; returns whether it has a key (in `self.key_bytes`).
    fn encode(&mut self, value: &T) -> riffle::Result<bool> {
        self.value.clear();
        if let Some(field) = &self.key_field {
            let json = serde_json::to_value(value).map_err(riffle::Error::user)?;
            self.key_bytes.clear();
            let has_key = match json.get(field) {
                None | Some(serde_json::Value::Null) => false,
                Some(serde_json::Value::String(s)) => {
                    self.key_bytes.extend_from_slice(s.as_bytes());
                    true
                }
                Some(other) => {
                    serde_json::to_writer(&mut self.key_bytes, other)
                        .map_err(riffle::Error::user)?;
                    true
                }
            };
            serde_json::to_writer(&mut self.value, &json).map_err(riffle::Error::user)?;
            return Ok(has_key);
        }
        (self.serialize)(value, &mut self.value)?;
        self.key_bytes.clear();
        Ok(self
            .key
            .as_ref()
            .is_some_and(|key| key(value, &mut self.key_bytes)))
    }
}

/// Collects delivery reports: the first failure, and for a transactional producer the offset
/// range written in each partition.
#[derive(Default)]
pub(crate) struct Deliveries {
    /// Whether a delivery failed (checked after every batch; the message is in `failure`).
    failed: AtomicBool,
    failure: Mutex<Option<KafkaError>>,
    /// Offsets written are tracked (exactly-once only).
    track_ranges: bool,
    /// By partition, the runs of consecutive offsets written (first, last).
    ranges: Mutex<BTreeMap<i32, Vec<(i64, i64)>>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) if !self.track_ranges => {}
            Ok(message) => {
                let (partition, offset) = (message.partition(), message.offset());
                let mut ranges = self.ranges.lock().expect("ranges lock");
                let runs = ranges.entry(partition).or_default();
                match runs.last_mut() {
                    Some(run) if run.1 + 1 == offset => run.1 = offset,
                    _ => runs.push((offset, offset)),
                }
            }
            Err((error, _)) => {
                let mut failure = self.failure.lock().expect("failure lock");
                if failure.is_none() {
                    *failure = Some(error.clone());
                }
                self.failed.store(true, Ordering::Release);
            }
        }
    }
}

impl Deliveries {
    /// Forgets the failures and offsets seen: the transaction they belonged to was aborted.
    pub(crate) fn clear(&self) {
        *self.failure.lock().expect("failure lock") = None;
        self.failed.store(false, Ordering::Release);
        self.ranges.lock().expect("ranges lock").clear();
    }
}

/// Fails if a delivery of a producer with these `deliveries` failed (`to` names where it wrote).
pub(crate) fn delivery_failure(deliveries: &Deliveries, to: &str) -> riffle::Result<()> {
    if !deliveries.failed.load(Ordering::Acquire) {
        return Ok(());
    }
    match deliveries.failure.lock().expect("failed lock").as_ref() {
        Some(error) => Err(kafka_error(
            format!("a record could not be written to `{to}`"),
            error.clone(),
        )),
        None => Ok(()),
    }
}

/// Where a sink (or a shuffle's producer) writes.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) kafka: KafkaConnection,
    pub(crate) topic: String,
    /// See [`KafkaSink::broker_timeout`].
    pub(crate) timeout: Duration,
}

impl Target {
    /// A producer, transactional when `transactional_id` is given (its transactions initialised:
    /// whatever an earlier producer with the same id left open is aborted).
    pub(crate) fn producer(&self, transactional_id: Option<&str>) -> riffle::Result<KafkaProducer> {
        let mut config = self.kafka.client_config_with(&[
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("linger.ms", "5"),
            ("transaction.timeout.ms", "900000"),
        ]);
        if let Some(id) = transactional_id {
            config.set("transactional.id", id);
        }
        let producer: BaseProducer<Deliveries> = config
            .create_with_context(Deliveries {
                track_ranges: transactional_id.is_some(),
                ..Deliveries::default()
            })
            .map_err(|e| kafka_error("cannot create a producer", e))?;
        if let Some(id) = transactional_id {
            producer
                .init_transactions(self.timeout)
                .map_err(|e| kafka_error(format!("cannot initialise transactions of `{id}`"), e))?;
        }
        Ok(KafkaProducer {
            producer: Arc::new(producer),
            topic: self.topic.clone(),
            timeout: self.timeout,
        })
    }

    /// A consumer of the topic for the recovery of an interrupted commit.
    fn consumer(&self, isolation: &str) -> riffle::Result<BaseConsumer> {
        self.kafka
            .client_config()
            .set("group.id", "riffle-sink-recovery")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            .set("isolation.level", isolation)
            .create()
            .map_err(|e| kafka_error("cannot create a consumer", e))
    }
}

pub(crate) struct KafkaProducer {
    producer: Arc<BaseProducer<Deliveries>>,
    topic: String,
    timeout: Duration,
}

impl KafkaProducer {
    /// Queues one record, waiting for room in the producer's queue (back-pressure).
    fn send(&self, key: Option<&[u8]>, payload: &[u8]) -> riffle::Result<()> {
        let mut record = BaseRecord::to(&self.topic).payload(payload);
        if let Some(key) = key {
            record = record.key(key);
        }
        self.enqueue(record)
    }

    /// Queues `record`, waiting for room in the producer's queue.
    pub(crate) fn enqueue(&self, mut record: BaseRecord<'_, [u8], [u8]>) -> riffle::Result<()> {
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    self.producer.poll(Duration::from_millis(5));
                    self.check()?;
                }
                Err((e, _)) => {
                    return Err(kafka_error(format!("cannot write to `{}`", self.topic), e));
                }
            }
        }
    }

    /// Fails if a delivery failed.
    fn check(&self) -> riffle::Result<()> {
        delivery_failure(self.producer.context(), &self.topic)
    }

    /// Waits until every queued record is delivered.
    pub(crate) fn flush(&self) -> riffle::Result<()> {
        self.producer
            .flush(self.timeout)
            .map_err(|e| kafka_error(format!("cannot flush to `{}`", self.topic), e))?;
        self.check()
    }

    /// Encodes and queues every record of `batch` (emptied), then serves delivery reports.
    fn send_batch<T: Data>(
        &self,
        encoder: &mut Encoder<T>,
        batch: &mut Vec<Record<T>>,
    ) -> riffle::Result<()> {
        for record in batch.drain(..) {
            let has_key = encoder.encode(&record.value)?;
            let key = has_key.then_some(encoder.key_bytes.as_slice());
            self.send(key, &encoder.value)?;
        }
        self.serve()
    }

    /// Serves delivery reports without waiting.
    pub(crate) fn serve(&self) -> riffle::Result<()> {
        self.producer.poll(Duration::ZERO);
        self.check()
    }
}

struct AtLeastOnceWriter<T> {
    producer: KafkaProducer,
    encoder: Encoder<T>,
}

impl<T: Data> SinkWriter<T> for AtLeastOnceWriter<T> {
    fn write(&mut self, batch: &mut Vec<Record<T>>) -> riffle::Result<()> {
        self.producer.send_batch(&mut self.encoder, batch)
    }

    fn flush(&mut self) -> riffle::Result<()> {
        self.producer.serve()
    }

    fn pre_commit(&mut self, _checkpoint_id: u64) -> riffle::Result<Option<Vec<u8>>> {
        self.producer.flush().map(|()| None)
    }

    fn close(&mut self) -> riffle::Result<Option<Finalizer>> {
        self.producer.flush().map(|()| None)
    }
}

/// Where a writer subtask of a process group writes: the records after barrier `epoch` go to the
/// group's transaction for that epoch, which the group commits with the offsets of the next
/// checkpoint that completes. Shared by the group's sinks and Kafka shuffles.
pub(crate) struct GroupOutput {
    group: KafkaGroup,
    topic: String,
    timeout: Duration,
    /// The last barrier this subtask saw (0: none yet).
    epoch: u64,
    /// The producer of the epoch's transaction, once something was written in it.
    producer: Option<KafkaProducer>,
}

impl GroupOutput {
    pub(crate) fn new(group: &KafkaGroup, topic: &str, timeout: Duration) -> GroupOutput {
        GroupOutput {
            group: group.clone(),
            topic: topic.to_string(),
            timeout,
            epoch: 0,
            producer: None,
        }
    }

    /// The producer of the epoch's transaction (begun on first use); fails once the group
    /// moved partitions, so that nothing more is written in this run.
    pub(crate) fn producer(&mut self) -> riffle::Result<&KafkaProducer> {
        if self.group.rebalanced() {
            return Err(self.group.rebalanced_error());
        }
        if self.producer.is_none() {
            self.producer = Some(KafkaProducer {
                producer: self.group.producer(self.epoch)?,
                topic: self.topic.clone(),
                timeout: self.timeout,
            });
        }
        Ok(self.producer.as_ref().expect("set above"))
    }

    pub(crate) fn serve(&self) -> riffle::Result<()> {
        match &self.producer {
            Some(producer) => producer.serve(),
            None => Ok(()),
        }
    }

    /// Barrier `checkpoint_id`: what follows goes to the next transaction.
    pub(crate) fn pre_commit(&mut self, checkpoint_id: u64) -> riffle::Result<()> {
        if let Some(producer) = self.producer.take() {
            producer.flush()?;
        }
        self.epoch = checkpoint_id;
        Ok(())
    }

    pub(crate) fn commit(&self, checkpoint_id: u64) -> riffle::Result<()> {
        self.group.commit(checkpoint_id)
    }
}

/// A sink subtask of a process group.
struct GroupWriter<T> {
    output: GroupOutput,
    encoder: Encoder<T>,
}

impl<T: Data> SinkWriter<T> for GroupWriter<T> {
    fn write(&mut self, batch: &mut Vec<Record<T>>) -> riffle::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.output.producer()?.send_batch(&mut self.encoder, batch)
    }

    fn flush(&mut self) -> riffle::Result<()> {
        self.output.serve()
    }

    fn pre_commit(&mut self, checkpoint_id: u64) -> riffle::Result<Option<Vec<u8>>> {
        self.output.pre_commit(checkpoint_id).map(|()| None)
    }

    fn commit(&mut self, checkpoint_id: u64) -> riffle::Result<()> {
        self.output.commit(checkpoint_id)
    }

    fn close(&mut self) -> riffle::Result<Option<Finalizer>> {
        // What was not committed is aborted by the group's run (`run_in_group`).
        Ok(None)
    }
}

/// A transaction as a checkpoint stores it.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct TransactionInfo {
    transactional_id: String,
    /// Names the transaction in the `riffle.txn` header of a recovery's copies (12 bytes, see
    /// [`label`]).
    label: Vec<u8>,
    /// The offsets written, as runs of consecutive offsets: partition, first, last.
    ranges: Vec<(i32, i64, i64)>,
}

/// What a checkpoint stores for one sink subtask.
#[derive(Debug, Serialize, Deserialize)]
struct Committable {
    subtask: usize,
    parallelism: usize,
    pool_size: usize,
    pending: Vec<TransactionInfo>,
}

/// A producer of the pool with its transactional id.
struct Slot {
    transactional_id: String,
    producer: KafkaProducer,
}

struct OpenTransaction {
    slot: Slot,
    label: Vec<u8>,
}

struct PendingTransaction {
    slot: Slot,
    info: TransactionInfo,
}

/// The transactions of one writing subtask: a pool of transactional producers, the open
/// transaction, the pre-committed ones waiting for their checkpoints; shared by the exactly-once
/// sink and the producer of a Kafka shuffle (which writes its own records into the open one).
pub(crate) struct Transactions {
    target: Target,
    prefix: String,
    subtask: usize,
    parallelism: usize,
    run: String,
    pool_size: usize,
    /// Producers without a transaction.
    free: Vec<Slot>,
    /// Whether the pool was initialised (fencing earlier producers with the same ids).
    ready: bool,
    open: Option<OpenTransaction>,
    /// Pre-committed transactions by checkpoint, waiting for it to complete.
    pending: BTreeMap<u64, PendingTransaction>,
    sequence: u64,
}

/// The exactly-once sink's writer: encodes records into the open transaction.
struct TransactionalWriter<T> {
    txns: Transactions,
    encoder: Encoder<T>,
}

/// The label of a subtask's `sequence`-th transaction in run `run`: 8 bytes naming the run and
/// subtask, 4 the sequence.
fn label(run: &str, subtask: usize, sequence: u64) -> Vec<u8> {
    let mut label = riffle::keys::stable_hash(&(run, subtask as u64))
        .to_be_bytes()
        .to_vec();
    label.extend_from_slice(&(sequence as u32).to_be_bytes());
    label
}

/// The headers of a record written in the transaction labelled `label`: its own (a shuffle's
/// records carry some) and `riffle.txn`.
fn txn_header(headers: Option<OwnedHeaders>, label: &[u8]) -> OwnedHeaders {
    headers
        .unwrap_or_else(|| OwnedHeaders::new_with_capacity(1))
        .insert(Header {
            key: TXN_HEADER,
            value: Some(label),
        })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn transactional_id(prefix: &str, subtask: usize, slot: usize) -> String {
    format!("{prefix}-{subtask}-{slot}")
}

impl Transactions {
    /// The transactions of subtask `ctx.subtask`, with ids `<prefix>-<subtask>-<slot>`.
    pub(crate) fn new(
        target: Target,
        prefix: String,
        ctx: &OperatorContext,
        pool_size: usize,
    ) -> Self {
        Transactions {
            target,
            prefix,
            subtask: ctx.subtask,
            parallelism: ctx.parallelism,
            run: ctx.run_id.clone(),
            pool_size,
            free: Vec::new(),
            ready: false,
            open: None,
            pending: BTreeMap::new(),
            sequence: 0,
        }
    }

    /// The producer of the open transaction (one begins if none is open).
    pub(crate) fn producer(&mut self) -> riffle::Result<&KafkaProducer> {
        Ok(&self.open()?.slot.producer)
    }

    /// The slots of the checkpointed subtask `old` that this subtask fences on restore, since no
    /// producer of the job uses their ids any more: those beyond a pool that shrank, and all of a
    /// subtask that no longer exists and maps onto this one.
    fn stale_slots(&self, old: &Committable) -> std::ops::Range<usize> {
        if old.subtask == self.subtask {
            self.pool_size.min(old.pool_size)..old.pool_size
        } else if old.subtask >= self.parallelism && old.subtask % self.parallelism == self.subtask
        {
            0..old.pool_size
        } else {
            0..0
        }
    }

    /// Creates the pool's producers; initialising their ids aborts what earlier runs left open.
    fn init_pool(&mut self) -> riffle::Result<()> {
        if self.ready {
            return Ok(());
        }
        for slot in 0..self.pool_size {
            let id = transactional_id(&self.prefix, self.subtask, slot);
            let producer = self.target.producer(Some(&id))?;
            self.free.push(Slot {
                transactional_id: id,
                producer,
            });
        }
        self.free.reverse();
        self.ready = true;
        Ok(())
    }

    /// The open transaction, beginning one on a free producer if there is none.
    fn open(&mut self) -> riffle::Result<&mut OpenTransaction> {
        self.init_pool()?;
        if self.open.is_none() {
            let slot = self.free.pop().ok_or_else(|| {
                kafka_failure(
                    ConnectorErrorKind::Retriable,
                    format!("no free producer for `{}`", self.target.topic),
                    format!(
                        "{} transactions wait for their checkpoints to complete (checkpoints keep \
                         failing?); raise transaction_pool or fix the checkpoints",
                        self.pending.len()
                    ),
                )
            })?;
            slot.producer.producer.begin_transaction().map_err(|e| {
                kafka_error(
                    format!("cannot begin a transaction on `{}`", slot.transactional_id),
                    e,
                )
            })?;
            slot.producer
                .producer
                .context()
                .ranges
                .lock()
                .expect("ranges lock")
                .clear();
            let label = label(&self.run, self.subtask, self.sequence);
            self.sequence += 1;
            self.open = Some(OpenTransaction { slot, label });
        }
        Ok(self.open.as_mut().expect("opened above"))
    }

    /// Flushes the open transaction and turns it into a pending one.
    fn pre_commit_open(&mut self) -> riffle::Result<Option<PendingTransaction>> {
        let Some(open) = self.open.take() else {
            return Ok(None);
        };
        open.slot.producer.flush()?;
        let ranges = open
            .slot
            .producer
            .producer
            .context()
            .ranges
            .lock()
            .expect("ranges lock")
            .iter()
            .flat_map(|(&partition, runs)| {
                runs.iter()
                    .map(move |&(first, last)| (partition, first, last))
            })
            .collect();
        Ok(Some(PendingTransaction {
            info: TransactionInfo {
                transactional_id: open.slot.transactional_id.clone(),
                label: open.label,
                ranges,
            },
            slot: open.slot,
        }))
    }
}

fn commit(slot: &Slot) -> riffle::Result<()> {
    slot.producer
        .producer
        .commit_transaction(slot.producer.timeout)
        .map_err(|e| {
            kafka_error(
                format!(
                    "cannot commit the transaction of `{}`",
                    slot.transactional_id
                ),
                e,
            )
        })
}

impl<T: Data> SinkWriter<T> for TransactionalWriter<T> {
    fn write(&mut self, batch: &mut Vec<Record<T>>) -> riffle::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let producer = self.txns.producer()?;
        producer.send_batch(&mut self.encoder, batch)
    }

    fn flush(&mut self) -> riffle::Result<()> {
        self.txns.serve()
    }

    fn pre_commit(&mut self, checkpoint_id: u64) -> riffle::Result<Option<Vec<u8>>> {
        self.txns.pre_commit(checkpoint_id).map(Some)
    }

    fn commit(&mut self, checkpoint_id: u64) -> riffle::Result<()> {
        self.txns.commit(checkpoint_id)
    }

    fn recover(&mut self, committables: Vec<Vec<u8>>) -> riffle::Result<()> {
        self.txns.recover(committables)
    }

    fn close(&mut self) -> riffle::Result<Option<Finalizer>> {
        self.txns.close().map(Some)
    }
}

impl Transactions {
    /// Serves the open transaction's delivery reports; fails if a delivery failed.
    pub(crate) fn serve(&mut self) -> riffle::Result<()> {
        match &self.open {
            Some(open) => open.slot.producer.serve(),
            None => Ok(()),
        }
    }

    /// At the barrier of `checkpoint_id`: flushes the open transaction, keeps it until the
    /// checkpoint completes; returns what the checkpoint stores.
    pub(crate) fn pre_commit(&mut self, checkpoint_id: u64) -> riffle::Result<Vec<u8>> {
        self.init_pool()?;
        if let Some(pending) = self.pre_commit_open()? {
            self.pending.insert(checkpoint_id, pending);
        }
        riffle::checkpoint::encode(&Committable {
            subtask: self.subtask,
            parallelism: self.parallelism,
            pool_size: self.pool_size,
            pending: self.pending.values().map(|p| p.info.clone()).collect(),
        })
    }

    /// Checkpoint `checkpoint_id` completed: commits the transactions it covers.
    pub(crate) fn commit(&mut self, checkpoint_id: u64) -> riffle::Result<()> {
        let later = self.pending.split_off(&(checkpoint_id + 1));
        let due = std::mem::replace(&mut self.pending, later);
        for (_, pending) in due {
            commit(&pending.slot)?;
            self.free.push(pending.slot);
        }
        Ok(())
    }

    /// On restore: fences the ids of earlier runs and finishes the commits of the restored
    /// checkpoint that a failure interrupted.
    pub(crate) fn recover(&mut self, committables: Vec<Vec<u8>>) -> riffle::Result<()> {
        let committables = committables
            .iter()
            .map(|bytes| riffle::checkpoint::decode::<Committable>(bytes))
            .collect::<riffle::Result<Vec<_>>>()?;
        // First fence: our own ids, then the other ids of the restored checkpoint that are ours
        // to clean up and that no producer of this job uses any more.
        self.init_pool()?;
        for old in &committables {
            for slot in self.stale_slots(old) {
                let id = transactional_id(&self.prefix, old.subtask, slot);
                drop(self.target.producer(Some(&id))?);
                tracing::info!(transactional_id = %id, "fenced a transactional id the job no longer uses");
            }
        }
        // Then make sure every transaction the restored checkpoint pre-committed is committed.
        let recovery = self.free.last().expect("pool initialised");
        for old in committables
            .iter()
            .filter(|c| c.subtask % self.parallelism == self.subtask)
        {
            for txn in &old.pending {
                if !txn.ranges.is_empty() && !is_committed(&self.target, txn)? {
                    rewrite(&self.target, txn, recovery)?;
                }
            }
        }
        Ok(())
    }

    /// The input ended: pre-commits the open transaction; the finalizer commits what is due.
    pub(crate) fn close(&mut self) -> riffle::Result<Finalizer> {
        let last = self.pre_commit_open()?;
        let pending = std::mem::take(&mut self.pending);
        Ok(Box::new(move |ending| {
            for (checkpoint, txn) in pending {
                if matches!(ending, Ending::Stopped { up_to } if checkpoint > up_to) {
                    // After the savepoint: not to be visible; the restored job aborts it.
                    continue;
                }
                commit(&txn.slot)?;
            }
            if let (Some(txn), Ending::Drained) = (last, ending) {
                commit(&txn.slot)?;
            }
            Ok(())
        }))
    }
}

/// Reads `partition` from `from` with `consumer` until `until` returns `true` for a message or the
/// end of the partition (`None`), or the timeout passes.
fn read_partition(
    consumer: &BaseConsumer,
    topic: &str,
    partition: i32,
    from: i64,
    timeout: Duration,
    mut until: impl FnMut(Option<&rdkafka::message::BorrowedMessage<'_>>, i64) -> riffle::Result<bool>,
) -> riffle::Result<()> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(from))
        .and_then(|()| consumer.assign(&tpl))
        .map_err(|e| kafka_error("cannot assign a partition for recovery", e))?;
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(message)) => {
                let offset = message.offset();
                if until(Some(&message), offset)? {
                    return Ok(());
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) => {
                let position = consumer
                    .position()
                    .ok()
                    .and_then(|p| p.find_partition(topic, partition).map(|p| p.offset()));
                let end = match position {
                    Some(Offset::Offset(end)) => end,
                    _ => from,
                };
                if until(None, end)? {
                    return Ok(());
                }
            }
            Some(Err(e)) => tracing::warn!(error = %e, "Kafka consumer error during sink recovery"),
        }
    }
    Err(kafka_failure(
        ConnectorErrorKind::Retriable,
        format!("sink recovery could not read {topic}-{partition} from offset {from}"),
        format!(
            "nothing readable within the broker timeout ({timeout:?}): an open transaction of \
             another producer holds read_committed readers back, or the broker is unreachable"
        ),
    ))
}

/// Whether the records of `txn` are visible to `read_committed` readers (it is resolved: the
/// producers that could have it open were fenced). They are if its first record is (the
/// transaction committed), or if a later committed record carries its label (a copy an earlier
/// recovery wrote).
fn is_committed(target: &Target, txn: &TransactionInfo) -> riffle::Result<bool> {
    let consumer = target.consumer("read_committed")?;
    let (partition, first, _) = txn.ranges[0];
    let mut committed = false;
    read_partition(
        &consumer,
        &target.topic,
        partition,
        first,
        target.timeout,
        |message, end| {
            match message {
                Some(message) => {
                    committed = message.offset() == first || has_label(message, &txn.label);
                    Ok(committed)
                }
                // At the end of what is readable: decided once the end is past the first record.
                None => Ok(end > first),
            }
        },
    )?;
    tracing::info!(transaction = %hex(&txn.label), committed, "checked a transaction the restored checkpoint pre-committed");
    Ok(committed)
}

fn has_label(message: &rdkafka::message::BorrowedMessage<'_>, label: &[u8]) -> bool {
    message.headers().is_some_and(|headers| {
        headers
            .iter()
            .any(|h| h.key == TXN_HEADER && h.value == Some(label))
    })
}

/// Writes the records of the aborted transaction `txn` again (read back from the log, where
/// aborted records stay, at the offsets its producer wrote) in a new transaction on `slot`, each
/// with a header naming `txn`, so that a later recovery sees the copy.
fn rewrite(target: &Target, txn: &TransactionInfo, slot: &Slot) -> riffle::Result<()> {
    struct Copy {
        partition: i32,
        key: Option<Vec<u8>>,
        payload: Vec<u8>,
        timestamp: Option<i64>,
        headers: Option<OwnedHeaders>,
    }
    let consumer = target.consumer("read_uncommitted")?;
    let mut records = Vec::new();
    for &(partition, first, last) in &txn.ranges {
        read_partition(
            &consumer,
            &target.topic,
            partition,
            first,
            target.timeout,
            |message, end| {
                let Some(message) = message else {
                    return Ok(end > last);
                };
                if (first..=last).contains(&message.offset()) {
                    records.push(Copy {
                        partition,
                        key: message.key().map(<[u8]>::to_vec),
                        payload: message.payload().unwrap_or_default().to_vec(),
                        timestamp: message.timestamp().to_millis(),
                        headers: message.headers().map(|h| h.detach()),
                    });
                }
                Ok(message.offset() >= last)
            },
        )?;
    }
    let producer = &slot.producer;
    producer
        .producer
        .begin_transaction()
        .map_err(|e| kafka_error("cannot begin a recovery transaction", e))?;
    for copy in &records {
        let mut record = BaseRecord::to(&producer.topic)
            .partition(copy.partition)
            .payload(copy.payload.as_slice())
            .headers(txn_header(copy.headers.clone(), &txn.label));
        if let Some(key) = &copy.key {
            record = record.key(key.as_slice());
        }
        if let Some(timestamp) = copy.timestamp {
            record = record.timestamp(timestamp);
        }
        producer.enqueue(record)?;
    }
    producer.flush()?;
    commit(slot)?;
    tracing::warn!(
        transaction = %hex(&txn.label), records = records.len(),
        "rewrote a pre-committed transaction whose commit a failure interrupted"
    );
    Ok(())
}

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

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use riffle::operators::OperatorContext;
use riffle::record::Data;
use riffle::sink::{Guarantee, Sink, SinkWriter};

mod at_least_once;
mod exactly_once;
mod in_group;
mod producer;
mod recovery;

use at_least_once::AtLeastOnceWriter;
use exactly_once::TransactionalWriter;
pub(crate) use exactly_once::Transactions;
pub(crate) use in_group::GroupOutput;
use in_group::GroupWriter;
pub(crate) use producer::{Deliveries, KafkaProducer, Target, delivery_failure};

use crate::{KafkaConnection, KafkaGroup};

/// The header naming the transaction a recovery's copy of a record belongs to.
const TXN_HEADER: &str = "riffle.txn";
/// Time allowed to flushes, transaction commits and recovery reads, unless set with
/// [`KafkaSink::broker_timeout`].
const TIMEOUT: Duration = Duration::from_secs(60);

/// Appends a value's key to the buffer; `false` for no key.
type KeyFn<T> = Arc<dyn Fn(&T, &mut Vec<u8>) -> bool + Send + Sync>;
type SerializeFn<T> = Arc<dyn Fn(&T, &mut Vec<u8>) -> riffle::Result<()> + Send + Sync>;
type TombstoneFn<T> = Arc<dyn Fn(&T) -> bool + Send + Sync>;

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
    tombstone: Option<TombstoneFn<T>>,
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
        Self::with_encoder(kafka, topic, |value: &String, out| {
            out.extend_from_slice(value.as_bytes());
            Ok(())
        })
    }
}

impl<T: Data> KafkaSink<T> {
    /// A sink writing JSON values to `topic`, at-least-once, without keys.
    pub fn json(kafka: KafkaConnection, topic: impl Into<String>) -> Self {
        let mut sink = Self::with_encoder(kafka, topic, |value, out| {
            serde_json::to_writer(out, value).map_err(riffle::Error::user)
        });
        sink.json = true;
        sink
    }

    /// Renamed [`with_encoder`](Self::with_encoder).
    #[deprecated(
        since = "0.2.0",
        note = "renamed `with_encoder`, one name for a custom encoder everywhere"
    )]
    pub fn with_serializer(
        kafka: KafkaConnection,
        topic: impl Into<String>,
        serialize: impl Fn(&T, &mut Vec<u8>) -> riffle::Result<()> + Send + Sync + 'static,
    ) -> Self {
        Self::with_encoder(kafka, topic, serialize)
    }

    /// A sink writing values serialized by `serialize` (appending to the buffer it is given).
    pub fn with_encoder(
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
            tombstone: None,
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

    /// A value for which `is_delete` is true is written as a tombstone: its key and no value
    /// (what a compacted topic reads as the deletion of the key), e.g. the deletions of an
    /// upsert changelog.
    ///
    /// ```no_run
    /// use riffle::Change;
    /// use riffle_kafka::{KafkaConnection, KafkaSink};
    /// let sink = KafkaSink::<Change<(String, u64)>>::json(KafkaConnection::new("127.0.0.1:9092"), "totals")
    ///     .key(|change: &Change<(String, u64)>| change.row.0.clone())
    ///     .tombstone_if(|change: &Change<(String, u64)>| change.op.is_retract());
    /// ```
    pub fn tombstone_if(mut self, is_delete: impl Fn(&T) -> bool + Send + Sync + 'static) -> Self {
        self.tombstone = Some(Arc::new(is_delete));
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
            tombstone: self.tombstone.clone(),
            value: Vec::with_capacity(256),
            key_bytes: Vec::new(),
            is_tombstone: false,
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
        target.check_topic()?;
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
    tombstone: Option<TombstoneFn<T>>,
    value: Vec<u8>,
    key_bytes: Vec<u8>,
    /// Whether the last value encoded is a tombstone (written without a value).
    is_tombstone: bool,
}

impl<T: Data> Encoder<T> {
    /// The payload of the last value encoded: `None` for a tombstone.
    fn payload(&self) -> Option<&[u8]> {
        (!self.is_tombstone).then_some(self.value.as_slice())
    }

    /// Encodes `value`; returns whether it has a key (in `self.key_bytes`).
    fn encode(&mut self, value: &T) -> riffle::Result<bool> {
        self.value.clear();
        self.is_tombstone = self.tombstone.as_ref().is_some_and(|t| t(value));
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

//! The producer a Kafka sink writes with: delivery reports gathered per producer (the first
//! failure fails the next flush), the topic a sink writes (`Target`), and flushes that wait for
//! every delivery.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::consumer::BaseConsumer;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientContext, Message};
use riffle::record::{Data, Record};

use super::Encoder;
use crate::{KafkaConnection, kafka_error};

/// Collects delivery reports: the first failure, and for a transactional producer the offset
/// range written in each partition.
#[derive(Default)]
pub(crate) struct Deliveries {
    /// Whether a delivery failed (checked after every batch; the message is in `failure`).
    pub(super) failed: AtomicBool,
    pub(super) failure: Mutex<Option<KafkaError>>,
    /// Offsets written are tracked (exactly-once only).
    pub(super) track_ranges: bool,
    /// By partition, the runs of consecutive offsets written (first, last).
    pub(super) ranges: Mutex<BTreeMap<i32, Vec<(i64, i64)>>>,
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
    /// Fails, naming the topic, when it does not exist at the brokers, before anything is
    /// written (a record to a missing topic would wait for the producer's message timeout). A
    /// broker that creates topics on use creates it here, as a producer's first write would.
    pub(crate) fn check_topic(&self) -> riffle::Result<()> {
        let client: BaseProducer = self
            .kafka
            .client_config()
            .create()
            .map_err(|e| kafka_error("cannot create a metadata client", e))?;
        let deadline = std::time::Instant::now() + self.timeout.min(Duration::from_secs(10));
        loop {
            // Only a broker's answer that the topic is unknown fails the start: a broker that
            // cannot be reached, or a topic without a leader for a moment, is left to the
            // producer, which waits for it (a restore during an outage goes on as before).
            let Ok(metadata) = client
                .client()
                .fetch_metadata(Some(&self.topic), self.timeout)
            else {
                return Ok(());
            };
            let unknown = match metadata.topics().iter().find(|t| t.name() == self.topic) {
                None => true,
                Some(topic) => match topic.error() {
                    None => topic.partitions().is_empty(),
                    Some(error) => {
                        RDKafkaErrorCode::from(error) == RDKafkaErrorCode::UnknownTopicOrPartition
                    }
                },
            };
            if !unknown {
                return Ok(());
            }
            // A topic being created shows no partitions for a moment.
            if std::time::Instant::now() >= deadline {
                return Err(riffle::Error::config(
                    "topic",
                    format!(
                        "`{}` does not exist at {}: create it first (a Kafka sink does not create its topic)",
                        self.topic,
                        self.kafka.bootstrap()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

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
    pub(super) fn consumer(&self, isolation: &str) -> riffle::Result<BaseConsumer> {
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
    pub(super) producer: Arc<BaseProducer<Deliveries>>,
    pub(super) topic: String,
    pub(super) timeout: Duration,
}

impl KafkaProducer {
    /// Queues one record, waiting for room in the producer's queue (back-pressure).
    pub(super) fn send(&self, key: Option<&[u8]>, payload: Option<&[u8]>) -> riffle::Result<()> {
        let mut record = BaseRecord::to(&self.topic);
        if let Some(payload) = payload {
            record = record.payload(payload);
        }
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
    pub(super) fn check(&self) -> riffle::Result<()> {
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
    pub(super) fn send_batch<T: Data>(
        &self,
        encoder: &mut Encoder<T>,
        batch: &mut Vec<Record<T>>,
    ) -> riffle::Result<()> {
        for record in batch.drain(..) {
            let has_key = encoder.encode(&record.value)?;
            let key = has_key.then_some(encoder.key_bytes.as_slice());
            self.send(key, encoder.payload())?;
        }
        self.serve()
    }

    /// Serves delivery reports without waiting.
    pub(crate) fn serve(&self) -> riffle::Result<()> {
        self.producer.poll(Duration::ZERO);
        self.check()
    }
}

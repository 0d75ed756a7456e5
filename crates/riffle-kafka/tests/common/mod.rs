//! What the Kafka tests share: the broker `scripts/test.sh` starts, unique topics, a producer and
//! a `read_committed` reader.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use riffle_kafka::{KafkaConnection, ensure_topics};

/// The broker started by `scripts/test.sh` (`scripts/kafka.sh start`); no test runs without it.
pub fn bootstrap() -> String {
    std::env::var("RIFFLE_KAFKA_BOOTSTRAP").expect(
        "RIFFLE_KAFKA_BOOTSTRAP is not set: run the tests with ./scripts/test.sh, which starts the \
         Kafka broker (or `scripts/kafka.sh start && eval \"$(scripts/kafka.sh env)\"`)",
    )
}

pub fn kafka() -> KafkaConnection {
    KafkaConnection::new(bootstrap())
}

/// A topic name no other test (or earlier run) uses, created with `partitions` partitions.
pub fn topic(name: &str, partitions: i32) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let topic = format!(
        "{name}-{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    ensure_topics(&kafka(), &[(&topic, partitions)], 1).expect("create topic");
    topic
}

/// A plain producer for the tests' input.
pub struct TestProducer(BaseProducer);

impl TestProducer {
    pub fn new() -> Self {
        TestProducer(
            ClientConfig::new()
                .set("bootstrap.servers", bootstrap())
                .set("linger.ms", "0")
                .create()
                .unwrap(),
        )
    }

    /// Writes `(partition, key, value)` records and waits until they are acknowledged.
    pub fn send(&self, topic: &str, records: &[(i32, String, String)]) {
        for (partition, key, value) in records {
            let mut record = BaseRecord::to(topic)
                .partition(*partition)
                .key(key)
                .payload(value);
            loop {
                match self.0.send(record) {
                    Ok(()) => break,
                    Err((_, back)) => {
                        record = back;
                        self.0.poll(Duration::from_millis(10));
                    }
                }
            }
        }
        self.0.flush(Duration::from_secs(30)).unwrap();
    }
}

/// Writes `(partition, key, value)` records and waits until they are acknowledged.
pub fn produce(topic: &str, records: &[(i32, String, String)]) {
    TestProducer::new().send(topic, records);
}

/// Reads every committed record of `topic` (all partitions) until `done` says enough or `wait`
/// passes; returns (partition, offset, key, value) in partition and offset order.
pub fn read_committed(
    topic: &str,
    wait: Duration,
    mut done: impl FnMut(usize) -> bool,
) -> Vec<(i32, i64, String, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", "riffle-test-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    let partitions = metadata.topics()[0].partitions().len() as i32;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline && !done(out.len()) {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            out.push((
                m.partition(),
                m.offset(),
                String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned(),
                String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
            ));
        }
    }
    out.sort();
    out
}

/// The offsets `group` committed for `topic`, by partition.
pub fn committed_offsets(group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", group)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .unwrap()
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect()
}

/// Polls `condition` every 50 ms until it holds or `wait` passes.
pub fn eventually(wait: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    condition()
}

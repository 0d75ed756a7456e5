//! What the Kafka tests share, on top of `riffle_kafka::testing`: unique topics, writing
//! `(partition, key, value)` records, the committed offsets of a group.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};

use rdkafka::consumer::BaseConsumer;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
pub use riffle_kafka::testing::{TestProducer, bootstrap, read_committed};
use riffle_kafka::{KafkaConnection, ensure_topics};

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

/// Writes `(partition, key, value)` records with `producer` and waits until they are acknowledged.
pub fn send(producer: &TestProducer, topic: &str, records: &[(i32, String, String)]) {
    for (partition, key, value) in records {
        producer.send(topic, *partition, Some(key.as_bytes()), value.as_bytes());
    }
    producer.flush();
}

/// Writes `(partition, key, value)` records and waits until they are acknowledged.
pub fn produce(topic: &str, records: &[(i32, String, String)]) {
    send(&TestProducer::new(&[("linger.ms", "0")]), topic, records);
}

/// The offsets `group` committed for `topic`, by partition.
pub fn committed_offsets(group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    committed_notes(group, topic, partitions)
        .into_iter()
        .map(|(p, (offset, _))| (p, offset))
        .collect()
}

/// The offsets `group` committed for `topic`, by partition, each with its metadata (the note
/// naming the committing member and the snapshot of the partition's state; `null` when it is
/// not JSON). A broker that cannot answer yet (its group coordinator moving: `NotCoordinator`,
/// `CoordinatorLoadInProgress`, a timeout) is asked again, for up to two minutes.
pub fn committed_notes(
    group: &str,
    topic: &str,
    partitions: i32,
) -> BTreeMap<i32, (i64, serde_json::Value)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", group)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let committed = riffle_kafka::testing::committed_offsets_of(&consumer, &tpl);
    committed
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((
                e.partition(),
                (
                    o,
                    serde_json::from_str(e.metadata()).unwrap_or(serde_json::Value::Null),
                ),
            )),
            _ => None,
        })
        .collect()
}

#[allow(unused_imports)]
pub use riffle_testing::eventually;

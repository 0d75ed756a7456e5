//! Helpers for tests and benchmarks against a real broker: the bootstrap address the test
//! scripts export, a producer of input records, and a `read_committed` reader of a whole topic.
//!
//! Behind the `testing` feature, which only tests, benches and dev-dependencies enable
//! (`riffle-kafka = { .., features = ["testing"] }` under `[dev-dependencies]`): not part of a
//! job's build. A helper that finds no broker fails the test, naming what to run; it never skips.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

/// The environment variable that names the test broker (`host:port`), as `scripts/kafka.sh env`
/// prints it.
pub const BOOTSTRAP_VAR: &str = "RIFFLE_KAFKA_BOOTSTRAP";

/// No test broker is configured: [`BOOTSTRAP_VAR`] is unset or empty. Its message says how to
/// start one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoBroker;

impl std::fmt::Display for NoBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{BOOTSTRAP_VAR} is not set: this test needs a Kafka broker. Start one and set the \
             variable with `scripts/kafka.sh start && eval \"$(scripts/kafka.sh env)\"` \
             (./scripts/test.sh does both; scripts/kafka.sh finds a broker already running)"
        )
    }
}

impl std::error::Error for NoBroker {}

/// How long a helper asks a slow broker again before the test fails: a broker on a loaded
/// machine, or whose group coordinator is moving, may time out one request.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// `consumer`'s group's committed offsets of the partitions of `partitions`, asked again while
/// the broker cannot answer (a timeout, a moving coordinator), for up to [`PATIENCE`].
pub fn committed_offsets_of(
    consumer: &BaseConsumer,
    partitions: &TopicPartitionList,
) -> TopicPartitionList {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match consumer.committed_offsets(partitions.clone(), Duration::from_secs(10)) {
            Ok(committed) => return committed,
            Err(e) if Instant::now() < deadline => {
                eprintln!("committed offsets: {e}; asking again");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("committed offsets, for {PATIENCE:?}: {e}"),
        }
    }
}

/// The metadata of `topic`, asked again while the broker cannot answer, for up to
/// [`PATIENCE`].
pub fn topic_metadata(consumer: &BaseConsumer, topic: &str) -> rdkafka::metadata::Metadata {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match consumer.fetch_metadata(Some(topic), Duration::from_secs(10)) {
            Ok(metadata) => return metadata,
            Err(e) if Instant::now() < deadline => {
                eprintln!("metadata of `{topic}`: {e}; asking again");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("metadata of `{topic}`, for {PATIENCE:?}: {e}"),
        }
    }
}

/// The test broker's bootstrap address, from [`BOOTSTRAP_VAR`].
pub fn try_bootstrap() -> Result<String, NoBroker> {
    bootstrap_from(std::env::var(BOOTSTRAP_VAR).ok())
}

fn bootstrap_from(value: Option<String>) -> Result<String, NoBroker> {
    value.filter(|a| !a.trim().is_empty()).ok_or(NoBroker)
}

/// The test broker's bootstrap address, from [`BOOTSTRAP_VAR`].
///
/// # Panics
///
/// When the variable is unset or empty, with [`NoBroker`]'s message (what to set, and
/// `scripts/kafka.sh`, which starts the broker): a test without its broker fails, it never skips.
#[track_caller]
pub fn bootstrap() -> String {
    match try_bootstrap() {
        Ok(address) => address,
        Err(e) => panic!("{e}"),
    }
}

/// A plain producer of test input.
///
/// ```no_run
/// let producer = riffle_kafka::testing::TestProducer::new(&[("linger.ms", "0")]);
/// producer.send("clicks", 0, None, br#"{"user_id":7}"#);
/// producer.flush();
/// ```
pub struct TestProducer(BaseProducer);

impl TestProducer {
    /// A producer to the test broker with these client settings.
    ///
    /// # Panics
    ///
    /// Without a test broker, as [`bootstrap`].
    #[track_caller]
    pub fn new(settings: &[(&str, &str)]) -> Self {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", bootstrap());
        for (key, value) in settings {
            config.set(*key, *value);
        }
        TestProducer(config.create().expect("a producer"))
    }

    /// Queues a record, waiting for room in the queue.
    pub fn send(&self, topic: &str, partition: i32, key: Option<&[u8]>, value: &[u8]) {
        let mut record = BaseRecord::<[u8], [u8]>::to(topic)
            .partition(partition)
            .payload(value);
        if let Some(key) = key {
            record = record.key(key);
        }
        self.enqueue(record);
    }

    /// Queues a record with its timestamp (ms since the epoch), waiting for room in the queue.
    pub fn send_at(&self, topic: &str, partition: i32, value: &[u8], timestamp: i64) {
        let record = BaseRecord::<[u8], [u8]>::to(topic)
            .partition(partition)
            .payload(value)
            .timestamp(timestamp);
        self.enqueue(record);
    }

    /// Queues a tombstone: a record with `key` and no value (the deletion of the key in a
    /// compacted topic).
    pub fn send_tombstone(&self, topic: &str, partition: i32, key: &[u8]) {
        self.enqueue(
            BaseRecord::<[u8], [u8]>::to(topic)
                .partition(partition)
                .key(key),
        );
    }

    /// Queues `record`, waiting for room in the queue.
    fn enqueue(&self, mut record: BaseRecord<'_, [u8], [u8]>) {
        loop {
            match self.0.send(record) {
                Ok(()) => return,
                Err((_, back)) => {
                    record = back;
                    self.0.poll(Duration::from_millis(5));
                }
            }
        }
    }

    /// Serves delivery reports without waiting (call it now and then when producing steadily).
    pub fn poll(&self) {
        self.0.poll(Duration::ZERO);
    }

    /// Waits until every queued record is acknowledged.
    pub fn flush(&self) {
        self.0
            .flush(Duration::from_secs(60))
            .expect("records acknowledged");
    }
}

/// A record a reader got.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Consumed {
    /// Partition.
    pub partition: i32,
    /// Offset in the partition.
    pub offset: i64,
    /// The key (invalid UTF-8 replaced), empty without one.
    pub key: String,
    /// The value (invalid UTF-8 replaced), empty without one.
    pub value: String,
    /// Whether the record has no value (a tombstone).
    pub tombstone: bool,
    /// The value's bytes as they are (binary formats such as Avro), empty without one.
    pub bytes: Vec<u8>,
}

/// Reads `topic` from the beginning of every partition as a `read_committed` consumer until
/// `done(records so far, time since the last record)` says so or `wait` passes; the records in
/// partition and offset order.
///
/// # Panics
///
/// Without a test broker, as [`bootstrap`].
#[track_caller]
pub fn read_committed(
    topic: &str,
    wait: Duration,
    mut done: impl FnMut(usize, Duration) -> bool,
) -> Vec<Consumed> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", "riffle-test-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .expect("a consumer");
    let metadata = topic_metadata(&consumer, topic);
    let mut tpl = TopicPartitionList::new();
    for partition in 0..metadata.topics()[0].partitions().len() as i32 {
        tpl.add_partition_offset(topic, partition, Offset::Beginning)
            .expect("a partition");
    }
    consumer.assign(&tpl).expect("assigned");
    let (start, mut last) = (Instant::now(), Instant::now());
    let mut out = Vec::new();
    while start.elapsed() < wait && !done(out.len(), last.elapsed()) {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            out.push(Consumed {
                partition: m.partition(),
                offset: m.offset(),
                key: String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned(),
                value: String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
                tombstone: m.payload().is_none(),
                bytes: m.payload().unwrap_or_default().to_vec(),
            });
            last = Instant::now();
        }
    }
    out.sort();
    out
}

/// The CPU time (user + system) process `pid` used so far, from `/proc` (Linux; zero elsewhere):
/// what the measurements of member processes report.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: u64 = fields
        .get(11..13)
        .map(|f| f.iter().map(|t| t.parse::<u64>().unwrap_or(0)).sum())
        .unwrap_or(0);
    Duration::from_millis(ticks * 10) // USER_HZ is 100 on Linux
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_broker_the_error_says_what_to_set_and_what_starts_it() {
        assert_eq!(bootstrap_from(None), Err(NoBroker));
        assert_eq!(bootstrap_from(Some(" ".into())), Err(NoBroker));
        assert_eq!(
            bootstrap_from(Some("127.0.0.1:9092".into())),
            Ok("127.0.0.1:9092".into())
        );
        let message = NoBroker.to_string();
        for needed in [
            BOOTSTRAP_VAR,
            "scripts/kafka.sh start",
            "scripts/kafka.sh env",
        ] {
            assert!(message.contains(needed), "{message} lacks {needed}");
        }
    }
}

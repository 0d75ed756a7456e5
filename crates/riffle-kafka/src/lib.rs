//! Kafka connectors for Riffle, on librdkafka (through the `rdkafka` crate).
//!
//! - [`KafkaSource`]: reads one or more topics; each partition is a split read by one source
//!   subtask, with its own watermark (and idleness); the offsets are part of every checkpoint and
//!   are committed to the consumer group when the checkpoint completes; partitions added while
//!   the job runs are picked up; records that cannot be decoded follow the bad-record policy.
//! - [`KafkaSink`]: writes JSON records, at-least-once (everything written is flushed at each
//!   checkpoint barrier) or exactly-once (a Kafka transaction per checkpoint, committed when the
//!   checkpoint completes; a restarted job fences what its predecessor left open and finishes the
//!   commits the failure interrupted).
//! - [`KafkaConnection`]: the bootstrap servers and any librdkafka client setting (SASL and SSL
//!   included), passed through; secrets never appear in logs or `Debug` output.
//!
//! ```no_run
//! use riffle::StreamEnv;
//! use riffle_kafka::{KafkaConnection, KafkaSink, KafkaSource, StartFrom};
//! #[derive(Clone, serde::Serialize, serde::Deserialize)]
//! struct Click { user_id: String, ts: i64 }
//!
//! let kafka = KafkaConnection::new("127.0.0.1:9092").set("security.protocol", "plaintext");
//! let env = StreamEnv::new();
//! env.from_source(KafkaSource::<Click>::json(kafka.clone(), ["clicks"]).start_from(StartFrom::Earliest))
//!     .sink(KafkaSink::json(kafka, "clicks-copy").key(|c: &Click| c.user_id.clone()).exactly_once());
//! ```

mod admin;
mod connection;
mod sink;
mod source;
pub mod testing;

pub use admin::{create_partitions, delete_topics, ensure_topics};
pub use connection::KafkaConnection;
pub use sink::KafkaSink;
pub use source::{KafkaPartition, KafkaSource, StartFrom};

/// Turns an rdkafka error into a Riffle error that says what was being done.
pub(crate) fn kafka_error(
    context: impl std::fmt::Display,
    e: rdkafka::error::KafkaError,
) -> riffle::Error {
    riffle::Error::user(format!("kafka: {context}: {e}"))
}

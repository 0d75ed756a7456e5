//! Formats for Riffle's connectors, with a schema registry: Avro records in the Confluent
//! schema-registry wire format (what Kafka's Avro serializers of Confluent, Apicurio and
//! Redpanda write), and plain Avro datums.
//!
//! The wire format is a zero byte, the writer schema's id in the registry (4 bytes, big-endian),
//! then the record as an Avro datum of that schema. An [`AvroDecoder`] fetches (and caches) the
//! writer schema of each id and, when given the job's *reader schema*, resolves every record to
//! it by Avro's rules of schema evolution: a field the writer did not have takes the reader's
//! default, a field the reader does not have is dropped, `int` widens to `long`, and so on. An
//! [`AvroEncoder`] registers its schema under a subject (or looks it up) once, when it is built,
//! and frames every record with the id.
//!
//! With `riffle-kafka`, a decoder and an encoder are a source's and a sink's codec:
//!
//! ```no_run
//! use riffle_formats::{AvroDecoder, AvroEncoder, AvroSchema, SchemaRegistry, SubjectNameStrategy};
//! use riffle_kafka::{KafkaConnection, KafkaSink, KafkaSource};
//!
//! #[derive(Clone, Debug, serde::Serialize, serde::Deserialize, AvroSchema)]
//! struct Click { user_id: String, ts: i64 }
//!
//! let registry = SchemaRegistry::new("http://127.0.0.1:8081")?;
//! let kafka = KafkaConnection::new("127.0.0.1:9092");
//! let decoder = AvroDecoder::confluent(&registry).reader_schema(Click::get_schema());
//! let clicks = KafkaSource::with_decoder(kafka.clone(), ["clicks"], decoder.into_fn::<Click>());
//! let subject = SubjectNameStrategy::TopicName.subject("clicks-copy", false, &Click::get_schema())?;
//! let encoder = AvroEncoder::confluent(&registry, &subject, Click::get_schema())?;
//! let sink = KafkaSink::with_encoder(kafka, "clicks-copy", encoder.into_fn::<Click>()).exactly_once();
//! # Ok::<(), riffle_formats::FormatError>(())
//! ```
//!
//! What a record cannot be decoded for — bytes not in the wire format, an id the registry does
//! not know, a datum that does not match its schema or cannot be resolved to the reader's — is
//! an error naming the cause, which a source's bad-record policy turns into a dead letter. An
//! unreachable registry is not the record's fault: decoding waits for it (logging), and the job
//! is back-pressured meanwhile rather than losing records.
//!
//! Debezium's change events in Avro (its `before`/`after`/`op` envelope) are read as a
//! changelog by [`debezium::decode`].

mod codec;
pub mod debezium;
pub mod json_schema;
pub mod protobuf;
mod registry;

use std::collections::HashMap;
use std::sync::Mutex;

pub use apache_avro;
pub use apache_avro::{AvroSchema, Schema, types::Value};
pub use codec::{AvroDecoder, AvroEncoder, SubjectNameStrategy};
pub use registry::{RegisteredSchema, SchemaKind, SchemaReference, SchemaRegistry};

/// What went wrong with a format: the reason a record is bad, or a setup that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The bytes are not in the registry's wire format.
    #[error("not in the schema registry's wire format: {0}")]
    Framing(String),
    /// The registry has no schema of this id.
    #[error("the schema registry has no schema of id {0}")]
    UnknownSchema(u32),
    /// A schema that cannot be used (not Avro, not valid, not resolvable to the reader's).
    #[error("{0}")]
    Schema(String),
    /// The record does not match its schema.
    #[error("the record does not read: {0}")]
    Decode(String),
    /// A value that does not match the schema it is written with.
    #[error("a value does not match its Avro schema: {0}")]
    Encode(String),
    /// The subject's compatibility rule refuses the schema.
    #[error("the schema registry refuses the schema under `{subject}` as incompatible: {message}")]
    Incompatible {
        /// The subject.
        subject: String,
        /// The registry's reason.
        message: String,
    },
    /// A lookup found the schema not registered under the subject.
    #[error("the schema is not registered under `{subject}`: {message}")]
    NotRegistered {
        /// The subject.
        subject: String,
        /// The registry's answer.
        message: String,
    },
    /// The registry answered with an error.
    #[error("schema registry: {0}")]
    Registry(String),
    /// The registry could not be reached in time.
    #[error("schema registry: {0}")]
    Unreachable(String),
    /// A setting that cannot work.
    #[error("{0}")]
    Config(String),
}

impl From<FormatError> for riffle::Error {
    fn from(e: FormatError) -> Self {
        match e {
            FormatError::Config(message) => riffle::Error::config("avro", message),
            other => riffle::Error::user(other),
        }
    }
}

/// One copy of each schema for the life of the process: decoders cache a reader per writer
/// schema, which borrows it. Schemas are few (a topic's versions), and a schema seen again (the
/// same JSON, defaults and all) is not kept twice.
pub(crate) fn intern(schema: Schema) -> &'static Schema {
    static SCHEMAS: Mutex<Option<HashMap<String, &'static Schema>>> = Mutex::new(None);
    let key = serde_json::to_string(&schema).unwrap_or_else(|_| schema.canonical_form());
    let mut schemas = SCHEMAS.lock().expect("not poisoned");
    let schemas = schemas.get_or_insert_with(HashMap::new);
    schemas
        .entry(key)
        .or_insert_with(|| Box::leak(Box::new(schema)))
}

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
//! - [`KafkaShuffle`]: a `key_by` through a Kafka repartition topic
//!   (`stream.key_by(f).through_kafka(shuffle)`, see [`KafkaShuffleExt`]), with the producers'
//!   watermarks carried in the topic and exactly-once by transactions: the way a job's shuffle
//!   crosses processes.
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
mod group;
mod partition;
pub mod shuffle;
mod sink;
mod source;
#[cfg(feature = "testing")]
pub mod testing;

pub use admin::{create_partitions, delete_topics, ensure_topics};
pub use connection::KafkaConnection;
pub use group::{
    GroupProtocol, GroupReport, KafkaGroup, MissingState, PartitionReport, accept_state_loss,
    reported_missing_state, run_in_group, run_in_group_with,
};
pub use shuffle::{KafkaShuffle, KafkaShuffleExt};
pub use sink::KafkaSink;
pub use source::{KafkaPartition, KafkaSource, StartFrom, StopAt};

/// The kind of a connector failure ([`error_kind`] sorts Kafka's errors into these).
pub use riffle::ConnectorErrorKind;

/// Turns an rdkafka error into a Riffle error that says what was being done and whether retrying
/// can help ([`riffle::Error::Connector`], see [`error_kind`]).
pub(crate) fn kafka_error(
    context: impl std::fmt::Display,
    e: rdkafka::error::KafkaError,
) -> riffle::Error {
    riffle::Error::connector("kafka", error_kind(&e), context.to_string(), e)
}

/// How long a lookup that meets a transient broker condition (no leader yet, a coordinator
/// moving) keeps asking before it fails.
pub(crate) const TRANSIENT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// Runs `f` until it succeeds, fails with an error that is not retriable, or
/// [`TRANSIENT_DEADLINE`] passed (then with its last error); waits 50 ms to 1 s between tries.
pub(crate) fn retry_transient<T>(mut f: impl FnMut() -> riffle::Result<T>) -> riffle::Result<T> {
    let deadline = std::time::Instant::now() + TRANSIENT_DEADLINE;
    let mut wait = std::time::Duration::from_millis(50);
    loop {
        match f() {
            Err(e)
                if e.connector_kind() == Some(riffle::ConnectorErrorKind::Retriable)
                    && std::time::Instant::now() + wait < deadline =>
            {
                tracing::debug!(error = %e, "kafka: a transient failure; asking again");
                std::thread::sleep(wait);
                wait = (wait * 2).min(std::time::Duration::from_secs(1));
            }
            result => return result,
        }
    }
}

/// A Kafka failure that is no rdkafka error (a topic missing, a recovery read that timed out).
pub(crate) fn kafka_failure(
    kind: riffle::ConnectorErrorKind,
    context: impl std::fmt::Display,
    message: impl Into<String>,
) -> riffle::Error {
    riffle::Error::connector("kafka", kind, context.to_string(), message.into())
}

/// What an rdkafka error means: fenced (another producer took over the transactional id),
/// retriable (transient: the broker, the network, a timeout, an abortable transaction), or fatal
/// (configuration, permissions, a missing topic, a record too large, a client in a fatal state).
pub fn error_kind(e: &rdkafka::error::KafkaError) -> riffle::ConnectorErrorKind {
    use rdkafka::error::KafkaError;
    use riffle::ConnectorErrorKind::{Fatal, Fenced, Retriable};
    match e {
        KafkaError::Transaction(error) => {
            if code_kind(error.code()) == Fenced {
                Fenced
            } else if error.is_fatal() {
                Fatal
            } else if error.is_retriable() || error.txn_requires_abort() {
                Retriable
            } else {
                code_kind(error.code())
            }
        }
        KafkaError::ClientConfig(..) | KafkaError::ClientCreation(_) | KafkaError::Nul(_) => Fatal,
        KafkaError::Canceled | KafkaError::PartitionEOF(_) => Retriable,
        KafkaError::AdminOp(code) => code_kind(*code),
        other => other.rdkafka_error_code().map_or(Fatal, code_kind),
    }
}

/// Fenced for the codes of a producer another one replaced, retriable for the codes of
/// transient conditions, fatal for the others.
pub(crate) fn code_kind(code: rdkafka::error::RDKafkaErrorCode) -> riffle::ConnectorErrorKind {
    use rdkafka::error::RDKafkaErrorCode as Code;
    match code {
        Code::Fenced
        | Code::ProducerFenced
        | Code::InvalidProducerEpoch
        | Code::TransactionCoordinatorFenced => riffle::ConnectorErrorKind::Fenced,
        Code::BrokerTransportFailure
        | Code::AllBrokersDown
        | Code::MessageTimedOut
        | Code::OperationTimedOut
        | Code::QueueFull
        | Code::Resolve
        | Code::BrokerDestroy
        | Code::WaitingForCoordinator
        | Code::TimedOutQueue
        | Code::Retry
        | Code::ISRInsufficient
        | Code::InProgress
        | Code::RequestTimedOut
        | Code::NotEnoughReplicas
        | Code::NotEnoughReplicasAfterAppend
        | Code::LeaderNotAvailable
        | Code::NotLeaderForPartition
        | Code::BrokerNotAvailable
        | Code::NetworkException
        | Code::CoordinatorLoadInProgress
        | Code::CoordinatorNotAvailable
        | Code::NotCoordinator
        | Code::ConcurrentTransactions
        | Code::UnknownProducerId
        | Code::KafkaStorageError
        | Code::PreferredLeaderNotAvailable
        | Code::OutOfOrderSequenceNumber
        | Code::ThrottlingQuotaExceeded => riffle::ConnectorErrorKind::Retriable,
        _ => riffle::ConnectorErrorKind::Fatal,
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode as Code};
    use riffle::ConnectorErrorKind::{Fatal, Fenced, Retriable};

    use super::*;

    #[test]
    fn kafka_errors_are_typed_fenced_retriable_or_fatal() {
        let cases = [
            (KafkaError::MessageProduction(Code::ProducerFenced), Fenced),
            (
                KafkaError::MessageProduction(Code::InvalidProducerEpoch),
                Fenced,
            ),
            (KafkaError::Flush(Code::Fenced), Fenced),
            (KafkaError::Flush(Code::OperationTimedOut), Retriable),
            (
                KafkaError::MessageProduction(Code::AllBrokersDown),
                Retriable,
            ),
            (
                KafkaError::MessageProduction(Code::NotEnoughReplicas),
                Retriable,
            ),
            (
                KafkaError::MetadataFetch(Code::BrokerTransportFailure),
                Retriable,
            ),
            (
                KafkaError::MessageProduction(Code::MessageSizeTooLarge),
                Fatal,
            ),
            (
                KafkaError::MessageProduction(Code::TopicAuthorizationFailed),
                Fatal,
            ),
            (
                KafkaError::MessageProduction(Code::TransactionalIdAuthorizationFailed),
                Fatal,
            ),
            (KafkaError::ClientCreation("bad".into()), Fatal),
        ];
        for (error, kind) in cases {
            assert_eq!(error_kind(&error), kind, "{error}");
        }
        let err = kafka_error(
            "cannot flush to `out`",
            KafkaError::Flush(Code::OperationTimedOut),
        );
        assert_eq!(err.connector_kind(), Some(Retriable));
        assert_eq!(
            err.to_string(),
            "kafka: cannot flush to `out`: Flush error: OperationTimedOut (Local: Timed out)"
        );
        match err {
            riffle::Error::Connector { system, source, .. } => {
                assert_eq!(system, "kafka");
                // The rdkafka error itself, for callers that need its code.
                assert_eq!(
                    source.downcast_ref::<KafkaError>(),
                    Some(&KafkaError::Flush(Code::OperationTimedOut))
                );
            }
            other => panic!("expected a connector error, got {other:?}"),
        }
    }
}

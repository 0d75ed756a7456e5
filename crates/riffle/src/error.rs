//! Errors of the Riffle library.
//!
//! Every failure of a job names where it happened: the setting for a configuration error, the
//! operator and subtask for a failing user function, the source and position for a bad record.

/// A boxed error from user code (a map function, a source, a sink).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with Riffle's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong in building or running a job.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting has a value the job cannot run with; detected before the job starts.
    #[error("invalid configuration: `{setting}` {message}")]
    Config {
        /// The name of the setting, as the user wrote it (`parallelism`, `input`, ...).
        setting: String,
        /// What is wrong with its value.
        message: String,
    },
    /// The job graph cannot be executed as declared (for example a cycle or a type mix-up).
    #[error("invalid job graph: {0}")]
    Graph(String),
    /// A user function or an operator returned an error.
    #[error("operator `{operator}` (subtask {subtask}) failed: {source}")]
    Operator {
        /// Name of the operator, as given with `.name(..)` or derived from its kind.
        operator: String,
        /// Index of the parallel subtask that failed.
        subtask: usize,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
    /// A user function or an operator panicked.
    #[error("operator `{operator}` (subtask {subtask}) panicked: {message}")]
    Panic {
        /// Name of the operator that panicked.
        operator: String,
        /// Index of the parallel subtask that panicked.
        subtask: usize,
        /// The panic message.
        message: String,
    },
    /// A record could not be decoded and the source's policy is to fail the job.
    #[error("bad record in source `{source_name}` at {position}: {message}")]
    BadRecord {
        /// Name of the source.
        source_name: String,
        /// Where the record was (file and line, partition and offset, ...).
        position: String,
        /// Why it could not be decoded.
        message: String,
    },
    /// The run completed, but sources dead-lettered records and the job was configured to fail
    /// then (`EnvConfig::fail_on_dead_letters`): for tests and CI.
    #[error(
        "{count} record(s) could not be decoded and went to {location} (fail_on_dead_letters is set)"
    )]
    DeadLettered {
        /// How many records were dead-lettered.
        count: u64,
        /// Where they went.
        location: String,
    },
    /// An I/O operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, including the path if there is one.
        context: String,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// An error raised by user code, not yet attributed to an operator; the runtime wraps it
    /// into [`Error::Operator`] with the operator's name.
    #[error(transparent)]
    User(BoxError),
    /// A checkpoint or savepoint could not be written or read.
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    /// More checkpoints failed in a row than
    /// [`CheckpointConfig::tolerable_failed_checkpoints`](crate::checkpoint::CheckpointConfig::tolerable_failed_checkpoints)
    /// allows: the job fails (its restart strategy applies; a process group's member gives its
    /// partitions up).
    #[error(
        "checkpoint: {failed} checkpoints failed in a row, more than `tolerable_failed_checkpoints` ({tolerated}) allows; the last: {last}"
    )]
    TooManyFailedCheckpoints {
        /// Checkpoints failed in a row.
        failed: u32,
        /// What the setting allows.
        tolerated: u32,
        /// Why the last one failed (a storage error names the storage).
        last: String,
    },
    /// The state backend (an embedded store such as RocksDB) failed to read or write state.
    #[error("state backend: {0}")]
    State(String),
    /// A state restored from a checkpoint or savepoint cannot be read by this version of the job:
    /// its type changed in a way serde cannot read and no migration is declared, or the
    /// savepoint holds a newer version of it. A restart cannot help: the job fails.
    #[error("operator `{operator}`: state `{state}` cannot be restored: {message}")]
    IncompatibleState {
        /// The operator's uid.
        operator: String,
        /// The state's name.
        state: String,
        /// The versions and why the old values cannot be read.
        message: String,
    },
    /// The job was cancelled, or a task stopped because another one failed.
    #[error("job cancelled")]
    Cancelled,
    /// An external system a connector talks to (a Kafka broker, ...) failed an operation; `kind`
    /// says whether retrying can help. The runtime attributes it to the operator
    /// ([`Error::Operator`]); [`Error::connector_kind`] finds it there.
    #[error("{system}: {context}: {source}")]
    Connector {
        /// The system, in lower case (`kafka`).
        system: String,
        /// What the failure means for the caller.
        kind: ConnectorErrorKind,
        /// What was being done (`cannot commit the transaction of ...`).
        context: String,
        /// The client library's error.
        #[source]
        source: BoxError,
    },
}

/// What a connector's failure means for whoever handles it.
///
/// ```
/// use riffle::{ConnectorErrorKind, Error};
/// let err = Error::connector("kafka", ConnectorErrorKind::Fenced, "cannot commit", "fenced");
/// assert_eq!(err.to_string(), "kafka: cannot commit: fenced");
/// assert_eq!(err.connector_kind(), Some(ConnectorErrorKind::Fenced));
/// // Still found once wrapped (the runtime wraps it into `Error::Operator`).
/// assert_eq!(Error::user(err).connector_kind(), Some(ConnectorErrorKind::Fenced));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectorErrorKind {
    /// Another client took over the identity this one used (a Kafka producer with the same
    /// transactional id started): this client is a zombie and must stop writing; retrying with
    /// it cannot succeed. When a job sees it, another instance of the job (or another job with the
    /// same transactional ids) runs.
    Fenced,
    /// A transient failure (broker unreachable, timeout, leader election, an aborted
    /// transaction): the operation, or a restart of the job from its last checkpoint, can
    /// succeed.
    Retriable,
    /// Retrying cannot help until something changes: the configuration, permissions, a missing
    /// topic, a record too large, or a client in a fatal state.
    Fatal,
    /// Not a failure: the connector's work moved (a consumer group rebalanced and handed its
    /// partitions to other members), so the run ends on purpose and starts again on the new
    /// assignment. Logged at INFO, not as an error.
    Reassigned,
}

impl Error {
    /// A configuration error naming `setting`.
    pub fn config(setting: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Config {
            setting: setting.into(),
            message: message.into(),
        }
    }

    /// An I/O error with context (what was done, on which path).
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// An error of `system` (a connector's external system) with what was being done.
    pub fn connector(
        system: impl Into<String>,
        kind: ConnectorErrorKind,
        context: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        Error::Connector {
            system: system.into(),
            kind,
            context: context.into(),
            source: source.into(),
        }
    }

    /// The kind of the connector failure this error is or wraps (through [`Error::Operator`] and
    /// [`Error::User`]); `None` when it is no connector's failure.
    pub fn connector_kind(&self) -> Option<ConnectorErrorKind> {
        match self {
            Error::Connector { kind, .. } => Some(*kind),
            Error::Operator { source, .. } | Error::User(source) => source
                .downcast_ref::<Error>()
                .and_then(Error::connector_kind),
            _ => None,
        }
    }

    /// Whether this error (or the one an operator failed with) is an [`Error::IncompatibleState`].
    pub fn is_incompatible_state(&self) -> bool {
        match self {
            Error::IncompatibleState { .. } => true,
            Error::Operator { source, .. } | Error::User(source) => source
                .downcast_ref::<Error>()
                .is_some_and(Error::is_incompatible_state),
            _ => false,
        }
    }

    /// A user error, attributed to an operator by the runtime.
    pub fn user(err: impl Into<BoxError>) -> Self {
        Error::User(err.into())
    }

    /// Attributes this error to `operator`/`subtask`, unless it already names one.
    pub(crate) fn in_operator(self, operator: &str, subtask: usize) -> Self {
        match self {
            Error::User(source) => Error::Operator {
                operator: operator.to_string(),
                subtask,
                source,
            },
            Error::Io { .. } | Error::Connector { .. } => Error::Operator {
                operator: operator.to_string(),
                subtask,
                source: Box::new(self),
            },
            other => other,
        }
    }

    /// True for the secondary errors of tasks that stopped because the job was cancelled.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Error::Cancelled)
    }
}

/// Turns a panic payload into a message.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_errors_are_attributed_to_the_operator() {
        let err = Error::user("boom").in_operator("parse", 3);
        assert_eq!(err.to_string(), "operator `parse` (subtask 3) failed: boom");
    }

    #[test]
    fn config_errors_name_the_setting() {
        let err = Error::config("parallelism", "must be at least 1, got 0");
        assert_eq!(
            err.to_string(),
            "invalid configuration: `parallelism` must be at least 1, got 0"
        );
    }

    #[test]
    fn connector_errors_keep_their_kind_when_attributed_to_an_operator() {
        let err = Error::connector(
            "kafka",
            ConnectorErrorKind::Retriable,
            "cannot flush to `out`",
            "Local: Timed out",
        );
        assert_eq!(err.connector_kind(), Some(ConnectorErrorKind::Retriable));
        let err = err.in_operator("Sink: kafka out", 1);
        assert_eq!(
            err.to_string(),
            "operator `Sink: kafka out` (subtask 1) failed: kafka: cannot flush to `out`: Local: \
             Timed out"
        );
        assert_eq!(err.connector_kind(), Some(ConnectorErrorKind::Retriable));
        assert_eq!(Error::user("boom").connector_kind(), None);
        assert_eq!(
            Error::user(Error::connector(
                "kafka",
                ConnectorErrorKind::Fatal,
                "x",
                "y"
            ))
            .connector_kind(),
            Some(ConnectorErrorKind::Fatal)
        );
    }

    #[test]
    fn cancellation_is_not_reattributed() {
        assert!(Error::Cancelled.in_operator("x", 0).is_cancelled());
    }
}

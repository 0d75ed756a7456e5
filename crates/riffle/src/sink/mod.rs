//! Sinks: where a job's records go.
//!
//! A [`Sink`] creates one [`SinkWriter`] per parallel subtask. Built in: JSON-lines files
//! ([`FileSink`]), standard output ([`StdoutSink`]), a blackhole for benchmarks
//! ([`BlackholeSink`]), an in-memory collector for tests ([`CollectSink`]), and a throttle that
//! makes any sink slow ([`ThrottledSink`], the seed's back-pressure scenario).
//! Changelog streams ([`Change`](crate::change::Change)) go to any sink as appends (a JSON line
//! with an `op` field), or are applied into a table by [`UpsertSink`] (by key) and
//! [`RetractSink`] (as a multiset).
//!
//! These sinks give at-least-once delivery: what they wrote before a failure stays written, and
//! what the job replays after a restore is written again. [`ExactlyOnceFileSink`] commits in
//! two phases with the job's checkpoints: nothing is visible twice, nothing is lost.

mod collect;
pub mod csv;
mod exactly_once;
mod file;
mod function;
pub mod json;
mod operator;
pub mod part_files;
pub mod partitioned;
mod simple;
mod upsert;

pub use collect::{CollectSink, Collected};
pub use exactly_once::ExactlyOnceFileSink;
pub use file::FileSink;
pub use function::FnSink;
pub use operator::{OpenSinkOperator, SinkOperator};
pub use simple::{BlackholeSink, StdoutSink, ThrottledSink};
pub use upsert::{Materialized, RetractSink, UpsertSink};

use crate::error::Result;
use crate::operators::OperatorContext;
use crate::record::{Data, Record};

/// A destination for a stream; creates the writer of each subtask.
pub trait Sink<T: Data>: Send + Sync + 'static {
    /// The default name of the sink's operator (`Sink: <name>`).
    fn name(&self) -> String;

    /// Checks the sink's configuration (a writable path) before the job starts.
    fn validate(&self) -> Result<()> {
        Ok(())
    }

    /// The writer of one subtask.
    fn writer(&self, ctx: &OperatorContext) -> Result<Box<dyn SinkWriter<T>>>;

    /// What the sink guarantees when the job takes checkpoints.
    fn guarantee(&self) -> Guarantee {
        Guarantee::AtLeastOnce
    }

    /// Something no other sink of the job may use too, described with the setting that names
    /// it (Kafka transactional ids of one prefix: two sinks with them would fence each other's
    /// producers). A job whose sinks name the same one fails at start. Default: none.
    fn exclusive_resource(&self) -> Option<String> {
        None
    }
}

pub use crate::checkpoint::{Ending, Finalizer};

/// Delivery guarantee of a sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Guarantee {
    /// After a failure, records replayed from the last checkpoint are written again.
    AtLeastOnce,
    /// Records become visible only with the checkpoint that covers them: none twice, none lost.
    ExactlyOnce,
}

/// Writes the records of one sink subtask.
///
/// A sink that commits in two phases with checkpoints implements
/// [`pre_commit`](SinkWriter::pre_commit), [`commit`](SinkWriter::commit) and
/// [`recover`](SinkWriter::recover); the others only [`write`](SinkWriter::write).
pub trait SinkWriter<T>: Send {
    /// Writes the records of `batch` (taking them out of it).
    fn write(&mut self, batch: &mut Vec<Record<T>>) -> Result<()>;

    /// Makes what was written so far visible or durable (called every buffer timeout).
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }

    /// The watermark of the sink's input advanced (most sinks ignore it; a Kafka shuffle's
    /// producer writes it into its topic for the consumers).
    fn on_watermark(&mut self, _watermark: crate::record::Timestamp) -> Result<()> {
        Ok(())
    }

    /// The sink's input went idle or became active again (see [`Operator::on_idle`]).
    ///
    /// [`Operator::on_idle`]: crate::operators::Operator::on_idle
    fn on_idle(&mut self, _idle: bool) -> Result<()> {
        Ok(())
    }

    /// At the barrier of `checkpoint_id`: makes what was written since the last barrier durable
    /// and returns what is to be committed when the checkpoint completes (it is stored in the
    /// checkpoint). At-least-once sinks flush and return nothing.
    fn pre_commit(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<u8>>> {
        self.flush().map(|()| None)
    }

    /// Checkpoint `checkpoint_id` completed: makes what was pre-committed up to it visible.
    fn commit(&mut self, _checkpoint_id: u64) -> Result<()> {
        Ok(())
    }

    /// Called once before anything else: `committables` are what `pre_commit` returned in the
    /// checkpoint the job restored (commit them: it completed); whatever earlier runs left
    /// uncommitted is aborted.
    fn recover(&mut self, _committables: Vec<Vec<u8>>) -> Result<()> {
        Ok(())
    }

    /// The stream ended: flush; returns what commits the rest once the whole job succeeded.
    fn close(&mut self) -> Result<Option<Finalizer>> {
        self.flush().map(|()| None)
    }
}

//! # Riffle
//!
//! A stateful stream processor you embed in your program: Flink's semantics (event time,
//! watermarks, windows, keyed state, barrier checkpoints, exactly-once) with the ease of Kafka
//! Streams (a library, one process, no cluster) at the speed Rust allows.
//!
//! A job is declared on a [`StreamEnv`] with the DataStream API and run with
//! [`StreamEnv::execute`]:
//!
//! ```
//! use riffle::{StreamEnv, sink::CollectSink};
//!
//! /// A click: (user id, user agent).
//! type Click = (u64, String);
//!
//! let env = StreamEnv::new();
//! let (sink, output) = CollectSink::new();
//! env.from_fn(10_000, |i| -> Click { (i % 100, if i % 3 == 0 { "Googlebot" } else { "Firefox" }.into()) })
//!     .filter(|click| !click.1.contains("bot"))
//!     .map(|click| click.0)
//!     .sink(sink);
//! let result = env.execute().unwrap();
//! assert_eq!(result.records_in("Filter"), 10_000);
//! assert_eq!(output.len() as u64, result.records_out("Filter"));
//! ```
//!
//! How it runs: the job graph is planned into tasks, one per chain of operators and parallel
//! subtask, each on its own thread. Operators joined by forward edges of equal parallelism are
//! chained and call each other directly; the other edges (rebalance, hash by key group,
//! broadcast) are bounded channels carrying batches of records with watermarks, checkpoint
//! barriers and the end of input in band. A full channel blocks its producer, back to the
//! sources, so memory stays bounded whatever the input rate; each task reports the time it is
//! busy, back-pressured and idle.

#![forbid(unsafe_code)]

pub mod aggregate;
pub mod api;
pub(crate) mod bad_records;
pub mod cep;
pub mod change;
pub mod checkpoint;
pub(crate) mod codec;
pub mod config;
mod control;
pub mod error;
pub(crate) mod graph;
pub mod join;
pub mod keys;
pub mod metrics;
pub mod operators;
pub mod record;
pub mod runtime;
pub mod sink;
pub mod source;
pub mod state;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod time;
mod util;
pub mod window;

pub use api::{DataStream, DataStreamSink, KeyedStream, StreamEnv, WindowedStream};
pub use change::{Change, RowKind};
pub use config::EnvConfig;
pub use error::{BoxError, ConnectorErrorKind, Error, Result};
pub use graph::{FingerprintDifference, JobFingerprint, JobPlan, PlanEdge, PlanVertex};
pub use operators::OutputTag;
pub use record::{Data, Either, Record, Timestamp};
pub use runtime::{JobHandle, JobMonitor, JobResult};

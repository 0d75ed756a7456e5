//! PostgreSQL connectors for Riffle.
//!
//! [`PostgresCdcSource`] captures the changes of tables (a consistent snapshot, then logical
//! replication through a slot, the position in the job's checkpoints) as a changelog
//! normalized by primary key; see its module's documentation for the protocol.
//!
//! [`PostgresSink`] writes a stream into a table of a PostgreSQL database:
//!
//! - **append** ([`PostgresSink::append`]): every record is a new row (`INSERT`);
//! - **upsert** ([`PostgresSink::upsert`]): every record replaces the row of its key
//!   (`INSERT .. ON CONFLICT (key) DO UPDATE`);
//! - **changelog** ([`PostgresSink::changelog`]): a [`Change`](riffle::Change) stream applied by
//!   key: `+I`/`+U` upsert the row, `-D` deletes it, `-U` is skipped (its `+U` follows).
//!
//! Rows are the records serialized with serde into JSON objects, one field per column (matched
//! by name, exactly or else ignoring case); PostgreSQL converts each value to its column's
//! type (`json_populate_recordset`), so a timestamp column takes a string such as
//! `2026-01-15 00:18:00.400`, a `jsonb` column a nested object.
//!
//! Delivery:
//!
//! - **at-least-once** (the default): rows are written in batches (of
//!   [`batch_rows`](PostgresSink::batch_rows), or every
//!   [`flush_interval`](PostgresSink::flush_interval)), each batch one transaction, and all
//!   of them at every checkpoint's barrier. After a failure the job replays from its last
//!   checkpoint and writes those rows again: harmless for upserts, duplicates for appends.
//! - **exactly-once** ([`PostgresSink::exactly_once`]): the rows of each checkpoint interval are
//!   kept (and stored in the checkpoint) until the checkpoint completes, then written in one
//!   transaction that also records, in the table `riffle_sink_commits`, the writer and the
//!   checkpoint. A commit replayed after a restore finds its checkpoint recorded and is
//!   skipped: no row is lost, none is written twice. Rows become visible one checkpoint
//!   interval late, and a subtask holds one interval's rows in memory (upserts: one row per
//!   key).
//!
//! Writes block the sink's task: a slow database slows the job down (back-pressure), it does
//! not grow a queue. A lost connection is retried ([`max_retries`](PostgresSink::max_retries)
//! times, with back-off), then the job fails and restores from its last checkpoint; an error
//! of the database about the data (a value that does not fit its column) fails the job at
//! once, with the database's message.
//!
//! ```no_run
//! use std::time::Duration;
//! use riffle::StreamEnv;
//! use riffle_postgres::PostgresSink;
//! #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
//! struct Profile { user_id: u64, city: String }
//! let env = StreamEnv::new();
//! // The last profile of each user: a changelog (`+I`, then `-U`/`+U` on every change).
//! env.from_iter(vec![Profile { user_id: 1, city: "Oslo".into() }])
//!     .key_by(|p: &Profile| p.user_id)
//!     .deduplicate_keep_last(Duration::from_secs(86_400))
//!     .sink(
//!         PostgresSink::changelog("postgresql://riffle@127.0.0.1:5432/riffle", "profiles", ["user_id"])
//!             .exactly_once(),
//!     );
//! env.execute().unwrap();
//! ```

mod cdc;
mod sink;

pub use cdc::{CdcRecord, CdcRow, CdcValue, PostgresCdcSource};
pub use sink::{PostgresSink, RowChange};

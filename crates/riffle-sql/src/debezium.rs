//! Reading Debezium's JSON change events (`'format' = 'debezium-json'`), as Flink's format:
//! the envelope's `before`, `after` and `op` become a changelog of the table's rows.
//!
//! | `op` | changes |
//! |---|---|
//! | `c` (create), `r` (a snapshot's read) | `+I` of `after` |
//! | `u` (update) | `-U` of `before`, `+U` of `after` |
//! | `d` (delete) | `-D` of `before` |
//!
//! An event wrapped with its schema (`{"schema": .., "payload": {..}}`, Kafka Connect's
//! `schemas.enable`) is read from its `payload`. A tombstone (Kafka's message without a value,
//! which Debezium sends after a delete for compaction) and an empty line change nothing. An
//! update or delete without `before` (a PostgreSQL table without `REPLICA IDENTITY FULL`),
//! an unknown `op`, or a row that does not fit the table is a bad record, with the reason.

use riffle::Change;

use crate::types::{Row, Schema};

/// The changes of one event (`None`: a tombstone), its rows read as rows of `schema`
/// (`riffle::change::debezium`).
pub(crate) fn read_changes(
    event: Option<&str>,
    schema: &Schema,
) -> std::result::Result<Vec<Change<Row>>, String> {
    match event {
        None => Ok(Vec::new()),
        Some(text) => {
            riffle::change::debezium::read(text, |json| crate::json::read_row(json, schema))
        }
    }
}

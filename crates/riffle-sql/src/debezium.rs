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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{DataType, Field, Value};
    use riffle::RowKind;

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("id", DataType::BigInt),
            Field::new("name", DataType::Varchar),
        ])
    }

    fn read(text: &str) -> std::result::Result<Vec<(RowKind, Vec<Value>)>, String> {
        read_changes(Some(text), &schema())
            .map(|changes| changes.into_iter().map(|c| (c.op, c.row.0)).collect())
    }

    #[test]
    fn each_op_gives_its_changes() {
        let ann = vec![Value::Int(1), Value::string("ann")];
        let anna = vec![Value::Int(1), Value::string("anna")];
        assert_eq!(
            read(r#"{"before":null,"after":{"id":1,"name":"ann"},"op":"c","ts_ms":1}"#),
            Ok(vec![(RowKind::Insert, ann.clone())])
        );
        assert_eq!(
            read(r#"{"after":{"id":1,"name":"ann"},"op":"r"}"#),
            Ok(vec![(RowKind::Insert, ann.clone())])
        );
        assert_eq!(
            read(
                r#"{"before":{"id":1,"name":"ann"},"after":{"id":1,"name":"anna"},"op":"u","source":{"db":"x"}}"#
            ),
            Ok(vec![
                (RowKind::UpdateBefore, ann.clone()),
                (RowKind::UpdateAfter, anna.clone())
            ])
        );
        assert_eq!(
            read(r#"{"before":{"id":1,"name":"anna"},"after":null,"op":"d"}"#),
            Ok(vec![(RowKind::Delete, anna.clone())])
        );
        // Kafka Connect's envelope with its schema.
        assert_eq!(
            read(
                r#"{"schema":{"type":"struct"},"payload":{"before":null,"after":{"id":1,"name":"ann"},"op":"c"}}"#
            ),
            Ok(vec![(RowKind::Insert, ann)])
        );
        // Tombstones and blank lines change nothing.
        assert_eq!(read_changes(None, &schema()), Ok(vec![]));
        assert_eq!(read(""), Ok(vec![]));
    }

    #[test]
    fn what_cannot_be_read_says_why() {
        let err = read(r#"{"before":null,"after":{"id":1,"name":"a"},"op":"u"}"#).unwrap_err();
        assert!(
            err.contains("no `before`") && err.contains("REPLICA IDENTITY FULL"),
            "{err}"
        );
        let err = read(r#"{"after":{"id":1},"op":"x"}"#).unwrap_err();
        assert!(err.contains("\"x\""), "{err}");
        let err = read(r#"{"after":{"id":"one"},"op":"c"}"#).unwrap_err();
        assert!(err.contains("`after`") && err.contains("id"), "{err}");
        let err = read(r#"{"after":{"id":1}}"#).unwrap_err();
        assert!(err.contains("`op`"), "{err}");
        let err = read("not json").unwrap_err();
        assert!(err.contains("not a Debezium JSON event"), "{err}");
    }
}

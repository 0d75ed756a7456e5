//! Debezium's JSON change events read as changes (`'format' = 'debezium-json'` in SQL; Flink's
//! `debezium-json` format's rules).
//!
//! | `op` | changes |
//! |---|---|
//! | `c` (create), `r` (a snapshot's read) | `+I` of `after` |
//! | `u` (update) | `-U` of `before`, `+U` of `after` |
//! | `d` (delete) | `-D` of `before` |
//!
//! An event wrapped with its schema (`{"schema": .., "payload": {..}}`, Kafka Connect's
//! `schemas.enable`) is read from its `payload`. A tombstone (Kafka's message without a value,
//! which Debezium sends after a delete for compaction) and a blank event change nothing. An
//! update or delete without `before` (a PostgreSQL table without `REPLICA IDENTITY FULL`), an
//! unknown `op`, or a row that does not read is an error saying why: a bad record of the source.
//!
//! A Kafka topic of Debezium events as a changelog of a serde type, with `riffle-kafka`:
//!
//! ```ignore
//! let events = KafkaSource::with_record_decoder(kafka, ["shop.public.users"], |_key, value| {
//!     riffle::change::debezium::decode::<User>(value)
//! });
//! let users: DataStream<Change<User>> = env.from_source(events).flat_map(|changes| changes);
//! ```
//!
//! ```
//! use riffle::change::debezium::decode;
//! use riffle::{Change, RowKind};
//! #[derive(Debug, PartialEq, serde::Deserialize)]
//! struct User { id: u64, city: String }
//! let event = br#"{"before":{"id":1,"city":"paris"},"after":{"id":1,"city":"rome"},"op":"u"}"#;
//! let changes: Vec<Change<User>> = decode(Some(event)).unwrap();
//! assert_eq!(changes[0].op, RowKind::UpdateBefore);
//! assert_eq!(changes[1].row, User { id: 1, city: "rome".into() });
//! assert!(decode::<User>(None).unwrap().is_empty(), "a tombstone");
//! ```

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::change::Change;

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    before: Option<&'a RawValue>,
    #[serde(borrow, default)]
    after: Option<&'a RawValue>,
    #[serde(default)]
    op: Option<String>,
    #[serde(borrow, default)]
    payload: Option<&'a RawValue>,
}

/// The changes of one event (`None`: a tombstone), each row deserialized as a `T`.
pub fn decode<T: DeserializeOwned>(event: Option<&[u8]>) -> Result<Vec<Change<T>>, String> {
    let Some(bytes) = event else {
        return Ok(Vec::new());
    };
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    read(text, |json| {
        serde_json::from_str(json).map_err(|e| e.to_string())
    })
}

/// The changes of one event's text, each row (its JSON text) read by `row`: for rows that
/// are not serde types (SQL's rows of a table's schema).
pub fn read<R>(
    event: &str,
    mut row: impl FnMut(&str) -> Result<R, String>,
) -> Result<Vec<Change<R>>, String> {
    if event.trim().is_empty() {
        return Ok(Vec::new());
    }
    let mut envelope: Envelope<'_> =
        serde_json::from_str(event).map_err(|e| format!("not a Debezium JSON event: {e}"))?;
    if envelope.op.is_none()
        && let Some(payload) = envelope.payload
    {
        envelope = serde_json::from_str(payload.get())
            .map_err(|e| format!("not a Debezium JSON event's payload: {e}"))?;
    }
    let op = envelope
        .op
        .clone()
        .ok_or("a Debezium JSON event needs an `op` field")?;
    changes(&op, |name| {
        let field = if name == "before" {
            envelope.before
        } else {
            envelope.after
        };
        match field {
            Some(raw) if raw.get() != "null" => row(raw.get()).map(Some),
            _ => Ok(None),
        }
    })
}

/// The changes of one Debezium event of operation `op` (the table above), whatever its
/// encoding: `image` reads the event's `"before"` or `"after"` row (`None` when the event has
/// none). A row the operation needs and the event lacks, or an unknown `op`, is an error.
///
/// ```
/// use riffle::change::debezium::changes;
/// use riffle::RowKind;
/// let update = changes("u", |image| Ok(Some(format!("{image} row")))).unwrap();
/// assert_eq!(update[0].op, RowKind::UpdateBefore);
/// assert_eq!(update[1].row, "after row");
/// assert!(changes::<String>("d", |_| Ok(None)).is_err());
/// ```
pub fn changes<R>(
    op: &str,
    mut image: impl FnMut(&str) -> Result<Option<R>, String>,
) -> Result<Vec<Change<R>>, String> {
    let mut image = |name: &str| match image(name) {
        Ok(Some(row)) => Ok(row),
        Ok(None) => Err(format!(
            "a Debezium event with \"op\": \"{op}\" has no `{name}`{}",
            if name == "before" {
                " (a PostgreSQL table needs REPLICA IDENTITY FULL for the old row of updates and deletes)"
            } else {
                ""
            }
        )),
        Err(e) => Err(format!("`{name}`: {e}")),
    };
    Ok(match op {
        "c" | "r" => vec![Change::insert(image("after")?)],
        "u" => vec![
            Change::update_before(image("before")?),
            Change::update_after(image("after")?),
        ],
        "d" => vec![Change::delete(image("before")?)],
        other => {
            return Err(format!(
                "a Debezium event's \"op\" is \"{other}\" (expected c, r, u or d)"
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RowKind;

    #[derive(Debug, PartialEq, Deserialize)]
    struct User {
        id: i64,
        name: String,
    }

    fn ops(text: &str) -> Result<Vec<(RowKind, i64, String)>, String> {
        decode::<User>(Some(text.as_bytes())).map(|changes| {
            changes
                .into_iter()
                .map(|c| (c.op, c.row.id, c.row.name))
                .collect()
        })
    }

    #[test]
    fn each_op_gives_its_changes() {
        let ann = |op| (op, 1, "ann".to_string());
        assert_eq!(
            ops(r#"{"before":null,"after":{"id":1,"name":"ann"},"op":"c","ts_ms":1}"#),
            Ok(vec![ann(RowKind::Insert)])
        );
        assert_eq!(
            ops(r#"{"after":{"id":1,"name":"ann"},"op":"r"}"#),
            Ok(vec![ann(RowKind::Insert)])
        );
        assert_eq!(
            ops(
                r#"{"before":{"id":1,"name":"ann"},"after":{"id":1,"name":"anna"},"op":"u","source":{"db":"x"}}"#
            ),
            Ok(vec![
                ann(RowKind::UpdateBefore),
                (RowKind::UpdateAfter, 1, "anna".into())
            ])
        );
        assert_eq!(
            ops(r#"{"before":{"id":1,"name":"ann"},"after":null,"op":"d"}"#),
            Ok(vec![ann(RowKind::Delete)])
        );
        assert_eq!(
            ops(
                r#"{"schema":{"type":"struct"},"payload":{"before":null,"after":{"id":1,"name":"ann"},"op":"c"}}"#
            ),
            Ok(vec![ann(RowKind::Insert)])
        );
        assert_eq!(decode::<User>(None), Ok(vec![]));
        assert_eq!(ops(""), Ok(vec![]));
    }

    #[test]
    fn what_cannot_be_read_says_why() {
        let err = ops(r#"{"before":null,"after":{"id":1,"name":"a"},"op":"u"}"#).unwrap_err();
        assert!(
            err.contains("no `before`") && err.contains("REPLICA IDENTITY FULL"),
            "{err}"
        );
        assert!(
            ops(r#"{"after":{"id":1,"name":"a"},"op":"x"}"#)
                .unwrap_err()
                .contains("\"x\"")
        );
        let err = ops(r#"{"after":{"id":"one","name":"a"},"op":"c"}"#).unwrap_err();
        assert!(err.contains("`after`"), "{err}");
        assert!(
            ops(r#"{"after":{"id":1,"name":"a"}}"#)
                .unwrap_err()
                .contains("`op`")
        );
        assert!(
            ops("not json")
                .unwrap_err()
                .contains("not a Debezium JSON event")
        );
        assert!(
            decode::<User>(Some(&[0xff, 0xfe]))
                .unwrap_err()
                .contains("UTF-8")
        );
    }
}

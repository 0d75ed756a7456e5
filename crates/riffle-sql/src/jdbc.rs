//! The `jdbc` connector's sink, for PostgreSQL (the `postgres` feature): Flink's JDBC
//! connector options, written by [`riffle_postgres::PostgresSink`].
//!
//! | option | meaning |
//! |---|---|
//! | `url` | `jdbc:postgresql://host:port/database` (or a `postgresql://` URL); required |
//! | `table-name` | the table written (it must exist); required |
//! | `username`, `password` | the credentials, when the URL does not carry them |
//! | `sink.buffer-flush.max-rows` | at-least-once: rows per batch (5000) |
//! | `sink.buffer-flush.interval` | at-least-once: the longest a row waits for its batch (`1s`) |
//! | `sink.max-retries` | retries of a write that lost its connection (3) |
//! | `sink.delivery-guarantee` | `at-least-once` (the default, as Flink) or `exactly-once` (each checkpoint's rows in one transaction when it completes) |
//!
//! With a `PRIMARY KEY`, the query's changelog is applied by key (upserts, deletions), as
//! Flink's upsert mode; without one the query must be append-only and its rows are inserted.

use std::time::Duration;

use riffle::{Change, RowKind};
use riffle_postgres::{PostgresSink, RowChange};
use serde_json::{Map, Value};

use crate::connectors::json_text;
use crate::error::{Result, SqlError};
use crate::lower::Rows;
use crate::parse::TableDef;
use crate::plan::parse_duration_ms;
use crate::types::{Row, Schema};

/// The options the connector reads.
const OPTIONS: &[&str] = &[
    "connector",
    "url",
    "table-name",
    "username",
    "password",
    "sink.buffer-flush.max-rows",
    "sink.buffer-flush.interval",
    "sink.max-retries",
    "sink.delivery-guarantee",
];

fn bad_option(table: &TableDef, key: &str, value: &str, what: &str) -> SqlError {
    SqlError::plan(format!(
        "table `{}` ('connector' = 'jdbc'): '{key}' = '{value}': {what}",
        table.name
    ))
}

fn required<'a>(table: &'a TableDef, key: &str) -> Result<&'a str> {
    table.options.get(key).map(String::as_str).ok_or_else(|| {
        SqlError::plan(format!(
            "table `{}` ('connector' = 'jdbc') needs the option '{key}'",
            table.name
        ))
    })
}

/// The row as a JSON object of the table's columns.
fn object(row: &Row, schema: &Schema) -> std::result::Result<Map<String, Value>, String> {
    match serde_json::from_str(&json_text(row, schema)) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err("a row is not a JSON object".into()),
        Err(e) => Err(format!("a row cannot be written as JSON: {e}")),
    }
}

/// The connection URL with `username`/`password` added.
fn url(table: &TableDef) -> Result<String> {
    let url = required(table, "url")?;
    let url = url.strip_prefix("jdbc:").unwrap_or(url);
    if !url.starts_with("postgresql://") && !url.starts_with("postgres://") {
        return Err(bad_option(
            table,
            "url",
            url,
            "only PostgreSQL is supported (jdbc:postgresql://host:port/database)",
        ));
    }
    let mut params = Vec::new();
    for (option, param) in [("username", "user"), ("password", "password")] {
        if let Some(value) = table.options.get(option) {
            params.push(format!("{param}={}", percent(value)));
        }
    }
    if params.is_empty() {
        return Ok(url.to_string());
    }
    let separator = if url.contains('?') { '&' } else { '?' };
    Ok(format!("{url}{separator}{}", params.join("&")))
}

/// `value` escaped for a URL's query.
pub(crate) fn percent(value: &str) -> String {
    let mut out = String::new();
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn number(table: &TableDef, key: &str, default: u64) -> Result<u64> {
    match table.options.get(key) {
        None => Ok(default),
        Some(value) => value
            .trim()
            .parse()
            .map_err(|_| bad_option(table, key, value, "not a whole number")),
    }
}

/// Writes `rows` into the `jdbc` table `table` (of the physical columns `schema`).
pub(crate) fn sink(rows: Rows, table: &TableDef, schema: &Schema) -> Result<()> {
    if let Some(key) = table
        .options
        .keys()
        .find(|k| !OPTIONS.contains(&k.as_str()))
    {
        return Err(SqlError::plan(format!(
            "table `{}`: the jdbc connector has no option '{key}' (options: {})",
            table.name,
            OPTIONS.join(", ")
        )));
    }
    let url = url(table)?;
    let target = required(table, "table-name")?.to_string();
    let rows_per_batch = number(table, "sink.buffer-flush.max-rows", 5_000)?;
    let interval = match table.options.get("sink.buffer-flush.interval") {
        None => Duration::from_secs(1),
        Some(value) => Duration::from_millis(parse_duration_ms(value).ok_or_else(|| {
            bad_option(table, "sink.buffer-flush.interval", value, "not a duration")
        })?),
    };
    let retries = number(table, "sink.max-retries", 3)?;
    let exactly_once = crate::connectors::exactly_once(table)?;
    let name = format!("Sink: {}", table.name);
    let schema = schema.clone();
    let key = table.primary_key.clone();
    let keyed = !key.is_empty();
    let sink = PostgresSink::<Change<Row>>::with_encoder(url, target, key, move |change| {
        match change.op {
            RowKind::Insert | RowKind::UpdateAfter => {
                object(&change.row, &schema).map(|row| Some(RowChange::Put(row)))
            }
            // A `-U` deletes: its `+U`, when one follows (a filter after an aggregation
            // may drop it), puts the row back, in the same batch.
            RowKind::Delete | RowKind::UpdateBefore => {
                object(&change.row, &schema).map(|row| Some(RowChange::Delete(row)))
            }
        }
    })
    .batch_rows(usize::try_from(rows_per_batch).unwrap_or(usize::MAX))
    .flush_interval(interval)
    .max_retries(u32::try_from(retries).unwrap_or(u32::MAX))
    .setting_names("url", "table-name", "PRIMARY KEY");
    let sink = if exactly_once {
        sink.exactly_once()
    } else {
        sink
    };
    let changes = if keyed {
        rows.into_changelog()
    } else {
        rows.into_append(&format!(
            "table `{}` ('connector' = 'jdbc' without a PRIMARY KEY)",
            table.name
        ))?
        .map(Change::insert)
        .name("Changelog")
    };
    changes.sink(sink).name(&name);
    Ok(())
}

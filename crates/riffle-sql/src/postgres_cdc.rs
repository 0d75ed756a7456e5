//! The `postgres-cdc` connector (the `postgres` feature), with Flink CDC's options: a
//! PostgreSQL table's snapshot and changes ([`riffle_postgres::PostgresCdcSource`]) as the
//! table's changelog, normalized by its primary key.
//!
//! | option | meaning |
//! |---|---|
//! | `hostname`, `port` (5432) | the server |
//! | `username`, `password` | the user (who can create publications and replication slots) |
//! | `database-name`, `schema-name` (`public`), `table-name` | the captured table |
//! | `slot.name` | the replication slot (created when absent): one per table read, per job |
//! | `publication.name` (or `debezium.publication.name`) | the publication (`riffle_<slot>` by default; created when absent) |
//! | `decoding.plugin.name` | `pgoutput` (the only one) |
//! | `scan.startup.mode` | `initial` (a snapshot, then the changes; the only one) |
//!
//! The table's columns are read by name from the database's row (PostgreSQL's text output,
//! cast to each column's type); `PRIMARY KEY (..) NOT ENFORCED` is required, as in Flink CDC.

use riffle::{Change, DataStream, StreamEnv};
use riffle_postgres::{CdcRow, PostgresCdcSource};

use crate::error::{Result, SqlError};
use crate::parse::TableDef;
use crate::types::{DataType, Row, Schema, Value};

const OPTIONS: &[&str] = &[
    "connector",
    "hostname",
    "port",
    "username",
    "password",
    "database-name",
    "schema-name",
    "table-name",
    "slot.name",
    "publication.name",
    "debezium.publication.name",
    "decoding.plugin.name",
    "scan.startup.mode",
];

fn required<'a>(table: &'a TableDef, key: &str) -> Result<&'a str> {
    table.options.get(key).map(String::as_str).ok_or_else(|| {
        SqlError::plan(format!(
            "table `{}` ('connector' = 'postgres-cdc') needs the option '{key}'",
            table.name
        ))
    })
}

/// `text` as a value of `ty`: PostgreSQL's booleans (`t`, `f`), else as `CAST` from a string.
fn value(text: &str, ty: &DataType) -> std::result::Result<Value, String> {
    match (ty, text) {
        (DataType::Boolean, "t") => Ok(Value::Bool(true)),
        (DataType::Boolean, "f") => Ok(Value::Bool(false)),
        _ => crate::expr::cast_value(Value::string(text), &DataType::Varchar, ty)
            .map_err(|e| e.to_string()),
    }
}

/// The changelog of the `postgres-cdc` table `table` as rows of `read` (its physical
/// columns), each completed by `complete` (computed columns).
pub(crate) fn scan(
    env: &StreamEnv,
    table: &TableDef,
    read: &Schema,
    complete: impl Fn(Row) -> std::result::Result<Row, String> + Send + Sync + 'static,
) -> Result<DataStream<Change<Row>>> {
    if let Some(key) = table
        .options
        .keys()
        .find(|k| !OPTIONS.contains(&k.as_str()))
    {
        return Err(SqlError::plan(format!(
            "table `{}`: the postgres-cdc connector has no option '{key}' (options: {})",
            table.name,
            OPTIONS.join(", ")
        )));
    }
    if table.primary_key.is_empty() {
        return Err(SqlError::plan(format!(
            "table `{}` ('connector' = 'postgres-cdc') needs a PRIMARY KEY (..) NOT ENFORCED: its changes are normalized by it",
            table.name
        )));
    }
    for (option, only) in [
        ("decoding.plugin.name", "pgoutput"),
        ("scan.startup.mode", "initial"),
    ] {
        if let Some(value) = table.options.get(option)
            && value != only
        {
            return Err(SqlError::plan(format!(
                "table `{}`: '{option}' = '{value}': only '{only}' is supported",
                table.name
            )));
        }
    }
    let host = required(table, "hostname")?;
    let port = table.options.get("port").map_or("5432", String::as_str);
    let database = required(table, "database-name")?;
    let mut url = format!(
        "postgresql://{host}:{port}/{database}?user={}",
        crate::jdbc::percent(required(table, "username")?)
    );
    if let Some(password) = table.options.get("password") {
        url.push_str(&format!("&password={}", crate::jdbc::percent(password)));
    }
    let schema_name = table
        .options
        .get("schema-name")
        .map_or("public", String::as_str);
    let captured = format!("{schema_name}.{}", required(table, "table-name")?);
    let slot = required(table, "slot.name")?.to_string();
    let publication = table
        .options
        .get("publication.name")
        .or_else(|| table.options.get("debezium.publication.name"))
        .cloned()
        .unwrap_or_else(|| format!("riffle_{slot}"));
    let schema = read.clone();
    let name = table.name.clone();
    let convert = move |row: &CdcRow| -> std::result::Result<Row, String> {
        let mut values = Vec::with_capacity(schema.len());
        for field in &schema.fields {
            let at = row
                .columns
                .iter()
                .position(|c| c == &field.name)
                .or_else(|| {
                    row.columns
                        .iter()
                        .position(|c| c.eq_ignore_ascii_case(&field.name))
                })
                .ok_or_else(|| {
                    format!(
                        "table `{name}`: the column `{}` is not in `{}` (its columns: {})",
                        field.name,
                        row.table,
                        row.columns.join(", ")
                    )
                })?;
            values.push(match &row.values[at] {
                None => Value::Null,
                Some(text) => value(text, &field.ty)
                    .map_err(|e| format!("table `{name}`, column `{}`: {e}", field.name))?,
            });
        }
        complete(Row(values))
    };
    Ok(PostgresCdcSource::new(url, [captured])
        .slot(slot)
        .publication(publication)
        .changelog(env)
        .flat_map(move |change: Change<CdcRow>| {
            // A row that does not fit its table fails the job: the DDL and the database
            // disagree, which no retry mends.
            match convert(&change.row) {
                Ok(row) => Some(Change::new(change.op, row)),
                Err(e) => panic!("{e}"),
            }
        })
        .name("Rows"))
}

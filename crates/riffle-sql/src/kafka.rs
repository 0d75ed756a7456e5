//! The `kafka` connector (with the crate's `kafka` feature), with Flink's options:
//!
//! | option | reads | writes | meaning |
//! |---|---|---|---|
//! | `topic` | yes | yes | the topic (reading: several separated by `;`) |
//! | `properties.bootstrap.servers` | yes | yes | the brokers, `host:port[,..]` (required) |
//! | `properties.group.id` | yes | | the consumer group its offsets are committed to (default `riffle-<topics>`) |
//! | `properties.*` | yes | yes | any other librdkafka client setting (`properties.security.protocol`, ...) |
//! | `scan.startup.mode` | yes | | `group-offsets` (default, as Flink: the group's committed offsets, the earliest without), `earliest-offset`, `latest-offset`, `timestamp` |
//! | `scan.startup.timestamp-millis` | yes | | where `timestamp` starts (epoch ms) |
//! | `scan.topic-partition-discovery.interval` | yes | | how often new partitions are looked for (`30 s` by default; `0` never) |
//! | `scan.bounded.mode` | yes | | `unbounded` (default); `latest-offset`: each partition is read up to its latest offset when the job starts, then the table ends (a job reading only bounded tables finishes; a restore stops where the first run would have); `group-offsets`: up to the offsets the group (`properties.group.id`) has committed (a partition without one fails the start); `timestamp`: up to the first record at or after `scan.bounded.timestamp-millis`; `specific-offsets`: up to `scan.bounded.specific-offsets` (`'partition:0,offset:42;partition:1,offset:300'`; a partition not named: its latest offset) |
//! | `format` / `value.format` | yes | yes | `json` (reading and writing), `debezium-json` (a changelog, reading and writing), `avro-confluent` (Avro through a schema registry, reading and writing; see the `avro` module for its options), `debezium-avro-confluent` (Debezium's Avro events, reading), `proto-registry` and `json-registry` (Protobuf and JSON Schema through a registry, reading) |
//! | `key.fields` | | yes | columns whose values, as a JSON object, are each message's key (`a;b`); a `debezium-json` changelog without it is keyed by each change's row, so that a row's retraction follows its insertion in one partition |
//! | `sink.delivery-guarantee` | | yes | `at-least-once` (default, as Flink), `exactly-once` (a Kafka transaction per checkpoint: readers with `isolation.level=read_committed` see each row once), `none` |
//! | `sink.transactional-id-prefix` | | yes | the prefix of the sink's transactional ids (default: the job's name and the sink) |
//!
//! `upsert-kafka` (Flink's) takes the same options but `format` and `key.fields`, and needs a
//! `PRIMARY KEY (..) NOT ENFORCED`, `key.format` and `value.format` (`json`); optionally
//! `value.fields-include` (`ALL`, the default, or `EXCEPT_KEY`). Read: each message upserts the
//! row of its key, a tombstone deletes it (see `upsert_source`). Written: an updating query's
//! changes by key, a deletion as a tombstone (see `upsert_sink`).
//!
//! A source's positions (offsets) are in the job's checkpoints; the table's watermark is kept
//! per partition. A value that is not a JSON object of the table's columns is a bad record of
//! the source (a dead letter by default, never lost silently).

use std::time::Duration;

use riffle::Change;
use riffle::change::RowKind;
use riffle::source::Source;
use riffle_kafka::{KafkaConnection, KafkaSink, KafkaSource, StartFrom, StopAt};

use crate::connectors::{debezium_json_text, json_text};
use crate::error::{Result, SqlError};
use crate::lower::Rows;
use crate::parse::TableDef;
use crate::placement::Placement;
use crate::types::{Row, Schema};

/// The connection of a table's `properties.*` options.
fn connection(table: &TableDef) -> Result<KafkaConnection> {
    let bootstrap = required(table, "properties.bootstrap.servers")?;
    let mut kafka = KafkaConnection::new(bootstrap);
    for (key, value) in &table.options {
        if let Some(setting) = key.strip_prefix("properties.")
            && !matches!(setting, "bootstrap.servers" | "group.id")
        {
            kafka = kafka.set(setting, value);
        }
    }
    Ok(kafka)
}

fn required<'a>(table: &'a TableDef, key: &str) -> Result<&'a str> {
    table.options.get(key).map(String::as_str).ok_or_else(|| {
        SqlError::plan(format!(
            "table `{}` ('connector' = '{}') needs the option '{key}'",
            table.name,
            connector(table)
        ))
    })
}

/// The table's connector: `kafka` or `upsert-kafka`.
fn connector(table: &TableDef) -> &str {
    table
        .options
        .get("connector")
        .map_or("kafka", String::as_str)
}

fn bad_option(table: &TableDef, key: &str, value: &str, what: &str) -> SqlError {
    SqlError::plan(format!(
        "table `{}`: '{key}' = '{value}': {what}",
        table.name
    ))
}

/// The table's value format: `format` or `value.format`, `json` by default.
fn format(table: &TableDef) -> &str {
    table
        .options
        .get("value.format")
        .or_else(|| table.options.get("format"))
        .map_or("json", String::as_str)
}

/// The source of a `kafka` table: each value, a record of the table's physical columns (`read`,
/// those the job reads) in its format (a JSON object, or Avro through a schema registry),
/// completed by `complete` (the table's computed columns and time check).
pub(crate) fn source(
    placement: &Placement,
    table: &TableDef,
    read: &Schema,
    complete: impl Fn(Row) -> std::result::Result<Row, String> + Send + Sync + 'static,
) -> Result<impl Source<Row>> {
    let decode = row_decoder(table, read)?;
    configured(
        placement,
        table,
        KafkaSource::with_decoder(connection(table)?, topics(table)?, move |bytes: &[u8]| {
            complete(decode(bytes)?)
        }),
    )
}

/// Decodes a value of the table's format into a row of `schema`.
type RowDecoder = Box<dyn Fn(&[u8]) -> std::result::Result<Row, String> + Send + Sync>;

fn row_decoder(table: &TableDef, schema: &Schema) -> Result<RowDecoder> {
    let schema = schema.clone();
    match format(table) {
        "json" => {
            let reader = crate::json::JsonReader::new(&schema);
            Ok(Box::new(move |bytes: &[u8]| {
                let line = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
                reader.read(line, 0)
            }))
        }
        #[cfg(feature = "avro")]
        "avro-confluent" => Ok(Box::new(crate::avro::row_decoder(
            table,
            "avro-confluent",
            &schema,
        )?)),
        #[cfg(feature = "avro")]
        format @ ("proto-registry" | "json-registry") => Ok(Box::new(
            crate::avro::json_row_decoder(table, format, &schema)?,
        )),
        other => Err(bad_option(table, "format", other, READ_FORMATS)),
    }
}

/// The formats a `kafka` table is read in.
const READ_FORMATS: &str = if cfg!(feature = "avro") {
    "a kafka table is read as 'json', 'avro-confluent', 'proto-registry', 'json-registry', 'debezium-json' or 'debezium-avro-confluent'"
} else {
    "a kafka table is read as 'json' or 'debezium-json' (Avro needs riffle-sql's `avro` feature)"
};

/// The source of an `upsert-kafka` table, as Flink's connector: each message an upsert of the
/// row of its key (`key`, the primary key's columns from the message key, a JSON object, over
/// those of the value) or, without a value (a tombstone), the deletion of the key's row (`-D`
/// of a row of only its key). `convert` completes a row (computed columns, time); the job
/// normalizes the upserts into a changelog (see `connectors::upsert_scan`).
pub(crate) fn upsert_source(
    placement: &Placement,
    table: &TableDef,
    schema: &Schema,
    convert: impl Fn(Row, bool) -> std::result::Result<Row, String> + Send + Sync + 'static,
) -> Result<impl Source<Change<Row>>> {
    let (key, key_schema) = primary_key(table, schema)?;
    upsert_formats(table, "read")?;
    let schema = schema.clone();
    let (keys, values) = (
        crate::json::JsonReader::new(&key_schema),
        crate::json::JsonReader::new(&schema),
    );
    let decode = move |k: Option<&[u8]>, v: Option<&[u8]>| -> std::result::Result<_, String> {
        fn text<'a>(bytes: &'a [u8], what: &str) -> std::result::Result<&'a str, String> {
            std::str::from_utf8(bytes).map_err(|e| format!("the {what} is not UTF-8: {e}"))
        }
        let k = k.ok_or("an upsert-kafka message needs a key (its row's primary key)")?;
        let key_row = keys
            .read(text(k, "key")?, 0)
            .map_err(|e| format!("the key: {e}"))?;
        if key_row.0.iter().any(crate::types::Value::is_null) {
            return Err("a column of the key is NULL".to_string());
        }
        let (mut row, delete) = match v {
            Some(v) => (values.read(text(v, "value")?, 0)?, false),
            None => (Row(vec![crate::types::Value::Null; schema.len()]), true),
        };
        for (&column, value) in key.iter().zip(key_row.0) {
            row.0[column] = value;
        }
        let row = convert(row, !delete)?;
        Ok(match delete {
            true => Change::delete(row),
            false => Change::insert(row),
        })
    };
    configured(
        placement,
        table,
        KafkaSource::with_record_decoder(connection(table)?, topics(table)?, decode),
    )
}

/// The source of a `kafka` table of Debezium events (`debezium-json`, or
/// `debezium-avro-confluent`): each message's value decoded into its changes of rows of
/// `schema` (none for a tombstone), completed by `complete`.
pub(crate) fn debezium_source(
    placement: &Placement,
    table: &TableDef,
    schema: &Schema,
    complete: impl Fn(Vec<Change<Row>>) -> std::result::Result<Vec<Change<Row>>, String>
    + Send
    + Sync
    + 'static,
) -> Result<impl Source<Vec<Change<Row>>>> {
    type Decode =
        Box<dyn Fn(Option<&[u8]>) -> std::result::Result<Vec<Change<Row>>, String> + Send + Sync>;
    let decode: Decode = match format(table) {
        "debezium-json" => {
            let schema = schema.clone();
            Box::new(move |value: Option<&[u8]>| match value {
                None => Ok(Vec::new()),
                Some(bytes) => crate::debezium::read_changes(
                    Some(std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?),
                    &schema,
                ),
            })
        }
        #[cfg(feature = "avro")]
        "debezium-avro-confluent" => crate::avro::debezium_decoder(table, schema)?,
        other => return Err(bad_option(table, "format", other, READ_FORMATS)),
    };
    configured(
        placement,
        table,
        KafkaSource::with_record_decoder(
            connection(table)?,
            topics(table)?,
            move |_key: Option<&[u8]>, value: Option<&[u8]>| complete(decode(value)?),
        ),
    )
}

/// The topics of the table's `topic` option (`a;b`).
fn topics(table: &TableDef) -> Result<Vec<String>> {
    Ok(required(table, "topic")?
        .split(';')
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect())
}

/// `source` set up by the table's `scan.*` and `properties.group.id` options.
fn configured<T: riffle::Data>(
    placement: &Placement,
    table: &TableDef,
    source: KafkaSource<T>,
) -> Result<KafkaSource<T>> {
    let start = match table
        .options
        .get("scan.startup.mode")
        .map_or("group-offsets", String::as_str)
    {
        "group-offsets" => StartFrom::GroupOffsets,
        "earliest-offset" => StartFrom::Earliest,
        "latest-offset" => StartFrom::Latest,
        "timestamp" => {
            let key = "scan.startup.timestamp-millis";
            let ms = required(table, key)?;
            StartFrom::Timestamp(
                ms.trim()
                    .parse()
                    .map_err(|_| bad_option(table, key, ms, "not epoch milliseconds"))?,
            )
        }
        other => {
            return Err(bad_option(
                table,
                "scan.startup.mode",
                other,
                "one of group-offsets, earliest-offset, latest-offset, timestamp",
            ));
        }
    };
    let discovery = match table.options.get("scan.topic-partition-discovery.interval") {
        None => Some(Duration::from_secs(30)),
        Some(text) => match crate::plan::parse_duration_ms(text) {
            Some(0) => None,
            Some(ms) => Some(Duration::from_millis(ms)),
            None => {
                return Err(bad_option(
                    table,
                    "scan.topic-partition-discovery.interval",
                    text,
                    "not a duration",
                ));
            }
        },
    };
    let mut source = source.start_from(start).partition_discovery(discovery);
    match table
        .options
        .get("scan.bounded.mode")
        .map_or("unbounded", String::as_str)
    {
        "unbounded" => {}
        "latest-offset" => source = source.until(StopAt::Latest),
        "group-offsets" => source = source.until(StopAt::GroupOffsets),
        "timestamp" => {
            let key = "scan.bounded.timestamp-millis";
            let ms = required(table, key)?;
            let ms = ms
                .trim()
                .parse()
                .map_err(|_| bad_option(table, key, ms, "not epoch milliseconds"))?;
            source = source.until(StopAt::Timestamp(ms));
        }
        "specific-offsets" => {
            let key = "scan.bounded.specific-offsets";
            let text = required(table, key)?;
            let offsets = specific_offsets(text).ok_or_else(|| {
                bad_option(
                    table,
                    key,
                    text,
                    "not 'partition:0,offset:42;partition:1,offset:300' (whole numbers, each partition once)",
                )
            })?;
            source = source.until(StopAt::Offsets(offsets));
        }
        other => {
            return Err(bad_option(
                table,
                "scan.bounded.mode",
                other,
                "one of unbounded, latest-offset, group-offsets, timestamp, specific-offsets",
            ));
        }
    }
    if let Some(group) = table.options.get("properties.group.id") {
        source = source.group_id(group.clone());
    }
    placement.kafka_source(table, &connection(table)?, &topics(table)?, source)
}

/// Writes `rows` to a `kafka` or `upsert-kafka` table.
pub(crate) fn sink(
    placement: &Placement,
    rows: Rows,
    table: &TableDef,
    schema: &Schema,
) -> Result<()> {
    placement.kafka_sink(table, &connection(table)?)?;
    if connector(table) == "upsert-kafka" {
        return upsert_sink(placement, rows, table, schema);
    }
    let kafka = connection(table)?;
    let topic = required(table, "topic")?.to_string();
    let name = format!("Sink: {}", table.name);
    let finish = delivery(placement, table)?;
    let key = key_columns(table, schema)?;
    let finish = |sink: KafkaSink<Change<Row>>| {
        let sink = finish(sink);
        match key {
            // The key columns as a JSON object, as Flink's `key.format` 'json' writes them.
            Some((columns, key_schema)) => sink.key(move |change: &Change<Row>| {
                let values = columns.iter().map(|&c| change.row.get(c).clone()).collect();
                json_text(&Row(values), &key_schema)
            }),
            None => sink,
        }
    };
    append_or_changelog_sink(rows, table, schema, kafka, topic, name, finish)
}

/// How a sink of `table` delivers (`sink.delivery-guarantee`, `sink.transactional-id-prefix`;
/// in a group of processes, in the group's transactions).
fn delivery<'a>(
    placement: &'a Placement,
    table: &TableDef,
) -> Result<impl FnOnce(KafkaSink<Change<Row>>) -> KafkaSink<Change<Row>> + 'a> {
    let exactly_once = crate::connectors::exactly_once(table)?;
    let prefix = table.options.get("sink.transactional-id-prefix").cloned();
    Ok(move |sink: KafkaSink<Change<Row>>| {
        let sink = match (exactly_once, prefix) {
            (true, Some(prefix)) => sink.exactly_once().transactional_id_prefix(prefix),
            (true, None) => sink.exactly_once(),
            (false, _) => sink.at_least_once(),
        };
        placement.place_sink(sink)
    })
}

/// Writes an updating query's changes to an `upsert-kafka` table, as Flink's connector: a row
/// inserted or updated is a message keyed by its primary key (a JSON object of the key's
/// columns) with the row as its value; a row deleted is a tombstone (its key, no value), which
/// a compacted topic keeps as the key's deletion; `-U` is not written (the `+U` after it
/// replaces the key's value). Appended rows are upserts by their key.
fn upsert_sink(placement: &Placement, rows: Rows, table: &TableDef, schema: &Schema) -> Result<()> {
    let kafka = connection(table)?;
    let topic = required(table, "topic")?.to_string();
    let name = format!("Sink: {}", table.name);
    let (key, key_schema) = primary_key(table, schema)?;
    let key_of_pairs = key.clone();
    upsert_formats(table, "written")?;
    if let Some(prefix) = table.options.get("key.fields-prefix") {
        return Err(bad_option(
            table,
            "key.fields-prefix",
            prefix,
            "not supported yet: name the key columns as the value's",
        ));
    }
    let value_columns: Vec<usize> = match table
        .options
        .get("value.fields-include")
        .map_or("ALL", String::as_str)
    {
        "ALL" => (0..schema.len()).collect(),
        "EXCEPT_KEY" => (0..schema.len()).filter(|c| !key.contains(c)).collect(),
        other => {
            return Err(bad_option(
                table,
                "value.fields-include",
                other,
                "one of ALL, EXCEPT_KEY",
            ));
        }
    };
    let value_schema = Schema::new(
        value_columns
            .iter()
            .map(|&c| schema.fields[c].clone())
            .collect(),
    );
    let finish = delivery(placement, table)?;
    let sink = KafkaSink::<Change<Row>>::with_encoder(kafka, topic, move |change, out| {
        let values = value_columns
            .iter()
            .map(|&c| change.row.get(c).clone())
            .collect();
        out.extend_from_slice(json_text(&Row(values), &value_schema).as_bytes());
        Ok(())
    })
    .key(move |change: &Change<Row>| {
        let values = key.iter().map(|&c| change.row.get(c).clone()).collect();
        json_text(&Row(values), &key_schema)
    })
    .tombstone_if(|change: &Change<Row>| change.op == RowKind::Delete);
    let pairs = key_of_pairs.clone();
    rows.into_changelog()
        .transform("Upserts", move || Upserts { key: pairs.clone() })
        .sink(finish(sink))
        .name(&name);
    Ok(())
}

/// A changelog as upserts by key: a `-U` followed by the `+U` of the same key is dropped (the
/// `+U` replaces the row), a `-U` without one (a filter after an aggregation dropped the new
/// row) becomes a `-D`: the key's row must go.
struct Upserts {
    key: Vec<usize>,
}

impl riffle::operators::Operator for Upserts {
    type In = Change<Row>;
    type Out = Change<Row>;

    fn process(
        &mut self,
        batch: &mut Vec<riffle::Record<Change<Row>>>,
        out: &mut riffle::operators::Collector<'_, Change<Row>>,
    ) -> riffle::Result<()> {
        let mut records = batch.drain(..).peekable();
        while let Some(mut record) = records.next() {
            if record.value.op == RowKind::UpdateBefore {
                let same_key = |next: &riffle::Record<Change<Row>>| {
                    next.value.op == RowKind::UpdateAfter
                        && self
                            .key
                            .iter()
                            .all(|&c| next.value.row.get(c) == record.value.row.get(c))
                };
                if records.peek().is_some_and(same_key) {
                    continue;
                }
                // Its `+U` may also be in the next batch (the producer's batch filled between
                // the two): then the key is deleted and put back, which ends the same.
                record.value.op = RowKind::Delete;
            }
            out.emit(record)?;
        }
        Ok(())
    }
}

/// Checks an `upsert-kafka` table's `key.format` and `value.format`: both given, `json`.
fn upsert_formats(table: &TableDef, verb: &str) -> Result<()> {
    for option in ["key.format", "value.format"] {
        match required(table, option)? {
            "json" => {}
            other => {
                return Err(bad_option(
                    table,
                    option,
                    other,
                    &format!(
                        "an upsert-kafka table is {verb} as 'json' (Avro comes with issue 31)"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The columns of the table's primary key, by position in `schema`, and their schema: an
/// `upsert-kafka` table's message key.
fn primary_key(table: &TableDef, schema: &Schema) -> Result<(Vec<usize>, Schema)> {
    if table.primary_key.is_empty() {
        return Err(SqlError::plan(format!(
            "table `{}` ('connector' = 'upsert-kafka') needs a PRIMARY KEY (..) NOT ENFORCED: its columns are each message's key",
            table.name
        )));
    }
    let mut columns = Vec::new();
    for name in &table.primary_key {
        columns.push(schema.index_of(name).ok_or_else(|| {
            SqlError::plan(format!(
                "table `{}`: the primary key names no column `{name}`",
                table.name
            ))
        })?);
    }
    let key_schema = Schema::new(columns.iter().map(|&c| schema.fields[c].clone()).collect());
    Ok((columns, key_schema))
}

/// Writes `rows` to a `kafka` table (its value format `json` or `debezium-json`).
fn append_or_changelog_sink(
    rows: Rows,
    table: &TableDef,
    schema: &Schema,
    kafka: KafkaConnection,
    topic: String,
    name: String,
    finish: impl FnOnce(KafkaSink<Change<Row>>) -> KafkaSink<Change<Row>>,
) -> Result<()> {
    let schema = schema.clone();
    match format(table) {
        "json" => {
            let changes = rows.into_append(&format!(
                "table `{}` ('connector' = 'kafka', 'format' = 'json')",
                table.name
            ))?;
            let sink = KafkaSink::<Change<Row>>::with_encoder(kafka, topic, move |change, out| {
                out.extend_from_slice(json_text(&change.row, &schema).as_bytes());
                Ok(())
            });
            changes
                .map(Change::insert)
                .name("Changelog")
                .sink(finish(sink))
                .name(&name);
        }
        #[cfg(feature = "avro")]
        "avro-confluent" => {
            let changes = rows.into_append(&format!(
                "table `{}` ('connector' = 'kafka', 'format' = 'avro-confluent')",
                table.name
            ))?;
            let encode = crate::avro::row_encoder(table, &topic, &schema)?;
            let sink = KafkaSink::<Change<Row>>::with_encoder(kafka, topic, move |change, out| {
                encode(&change.row, out)
            });
            changes
                .map(Change::insert)
                .name("Changelog")
                .sink(finish(sink))
                .name(&name);
        }
        "debezium-json" => {
            let row_schema = schema.clone();
            let sink = KafkaSink::<Change<Row>>::with_encoder(kafka, topic, move |change, out| {
                out.extend_from_slice(debezium_json_text(change, &schema).as_bytes());
                Ok(())
            });
            let sink = finish(sink);
            // Without `key.fields`, a change is keyed by its row: a row's retraction lands in
            // the partition of its insertion, after it, whatever the topic's partitions.
            let sink = match table.options.contains_key("key.fields") {
                true => sink,
                false => sink.key(move |change: &Change<Row>| json_text(&change.row, &row_schema)),
            };
            rows.into_changelog().sink(sink).name(&name);
        }
        other => {
            return Err(bad_option(
                table,
                "format",
                other,
                if cfg!(feature = "avro") {
                    "a kafka table is written as 'json', 'avro-confluent' or 'debezium-json'"
                } else {
                    "a kafka table is written as 'json' or 'debezium-json' (Avro needs riffle-sql's `avro` feature)"
                },
            ));
        }
    }
    Ok(())
}

/// The columns of `key.fields` (`a;b`), by position in `schema`, and their schema.
fn key_columns(table: &TableDef, schema: &Schema) -> Result<Option<(Vec<usize>, Schema)>> {
    let Some(fields) = table.options.get("key.fields") else {
        return Ok(None);
    };
    let mut columns = Vec::new();
    for name in fields.split(';').map(str::trim).filter(|n| !n.is_empty()) {
        let column = schema.index_of(name).ok_or_else(|| {
            bad_option(table, "key.fields", fields, &format!("no column `{name}`"))
        })?;
        columns.push(column);
    }
    let key_schema = Schema::new(columns.iter().map(|&c| schema.fields[c].clone()).collect());
    Ok(Some((columns, key_schema)))
}

/// Flink's `'partition:0,offset:42;partition:1,offset:300'`: offsets by partition number; `None`
/// when it is not that (a negative number, a partition named twice).
fn specific_offsets(text: &str) -> Option<std::collections::BTreeMap<i32, i64>> {
    let mut offsets = std::collections::BTreeMap::new();
    for entry in text.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (partition, offset) = entry.split_once(',')?;
        let partition: i32 = partition
            .trim()
            .strip_prefix("partition:")?
            .trim()
            .parse()
            .ok()?;
        let offset: i64 = offset.trim().strip_prefix("offset:")?.trim().parse().ok()?;
        if partition < 0 || offset < 0 || offsets.insert(partition, offset).is_some() {
            return None;
        }
    }
    (!offsets.is_empty()).then_some(offsets)
}

#[cfg(test)]
mod bounded_tests {
    use super::specific_offsets;

    #[test]
    fn specific_offsets_are_read_as_flink_writes_them() {
        let offsets = specific_offsets("partition:0,offset:42;partition:1,offset:300").unwrap();
        assert_eq!(offsets.into_iter().collect::<Vec<_>>(), [(0, 42), (1, 300)]);
        assert_eq!(
            specific_offsets(" partition: 2 , offset: 0 ;")
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            [(2, 0)]
        );
        for bad in [
            "",
            "partition:0",
            "partition:0,offset:-1",
            "partition:-1,offset:1",
            "partition:0,offset:1;partition:0,offset:2",
            "0:42",
            "partition:x,offset:1",
        ] {
            assert!(specific_offsets(bad).is_none(), "{bad}");
        }
    }
}

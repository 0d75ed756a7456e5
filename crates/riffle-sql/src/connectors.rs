//! Connectors, by the `'connector'` option of `CREATE TABLE ... WITH (..)`:
//!
//! | connector | reads | writes | options |
//! |---|---|---|---|
//! | `nexmark` | the Nexmark generator (`riffle-nexmark`) | | `events.num`, `first-event.rate` / `next-event.rate` (events per second of event time) |
//! | `filesystem` | JSON lines (`'format' = 'json'`); Debezium's change events as a changelog (`'format' = 'debezium-json'`) | JSON lines; a changelog as Debezium's JSON envelope (`'format' = 'debezium-json'`) | `path`, `format` |
//! | `print` | | `+I[...]` lines on standard output (`-U[...]`, `+U[...]`, `-D[...]` for changes) | |
//! | `blackhole` | | nothing | |
//! | `kafka` (the `kafka` feature) | JSON values; Debezium's change events as a changelog | JSON values, or a changelog as `debezium-json`; at-least-once or exactly-once | Flink's: `topic`, `properties.bootstrap.servers`, `scan.startup.mode`, `sink.delivery-guarantee`, ... ([`crate::kafka`]) |
//! | `jdbc` (the `postgres` feature) | | rows into a PostgreSQL table: appended, or by `PRIMARY KEY` a changelog's upserts and deletions; at-least-once or exactly-once | Flink's: `url`, `table-name`, `username`, `password`, `sink.buffer-flush.*`, `sink.max-retries`, and `sink.delivery-guarantee` ([`crate::jdbc`]) |
//! | `postgres-cdc` (the `postgres` feature) | a PostgreSQL table's snapshot and changes (logical replication), normalized by primary key | | Flink CDC's: `hostname`, `port`, `username`, `password`, `database-name`, `schema-name`, `table-name`, `slot.name` ([`crate::postgres_cdc`]) |
//! | `upsert-kafka` (the `kafka` feature) | a compacted topic: upserts by key, tombstones, normalized into a changelog | a changelog by `PRIMARY KEY`: upserts, deletions as tombstones | `key.format`, `value.format` (`json`), `value.fields-include`, and `kafka`'s |
//!
//! A source's rows get the table's computed columns and, with a `WATERMARK`, event time from
//! its time attribute; a row that cannot be read (a JSON line that does not fit the table, a
//! `NULL` time) is a bad record of the source: a dead letter, counted, never silently dropped.

use std::sync::Arc;
use std::time::Duration;

use riffle::sink::ExactlyOnceFileSink;
use riffle::sink::partitioned::PartitionedFileSink;
use riffle::source::datagen::DatagenSource;
use riffle::source::file::FileSource;
use riffle::source::mapped::SourceExt;
use riffle::time::WatermarkStrategy;
use riffle::{Change, DataStream, RowKind, StreamEnv};
use riffle_nexmark::{Event, NexmarkConfig, NexmarkSource};

use crate::error::{Result, SqlError};
use crate::expr::Typed;
use crate::lower::Rows;
use crate::parse::TableDef;
use crate::placement::Placement;
use crate::plan::TimeAttribute;
use crate::types::{DataType, Field, Row, Schema, Value};

/// The rows of table `table`: its connector's physical columns, then `computed`.
pub fn scan(
    env: &StreamEnv,
    table: &TableDef,
    physical: &Schema,
    read: &Schema,
    computed: Vec<Typed>,
    time: Option<TimeAttribute>,
) -> Result<DataStream<Row>> {
    let placement = Placement::default();
    scan_in(&placement, env, table, physical, read, computed, time)
}

/// [`scan`], read where `placement` runs the job (in a group: [`crate::placement`]).
pub(crate) fn scan_in(
    placement: &Placement,
    env: &StreamEnv,
    table: &TableDef,
    physical: &Schema,
    read: &Schema,
    computed: Vec<Typed>,
    time: Option<TimeAttribute>,
) -> Result<DataStream<Row>> {
    if let Some(changes) = &table.changes {
        return program_appends(env, table, changes, computed, time);
    }
    placement.check(table, "read")?;
    if let Some(rows) = &table.rows {
        let rows: Vec<Row> = rows.as_ref().clone();
        return Ok(env.from_iter(rows).name(&format!("Source: {}", table.name)));
    }
    let connector = option(table, "connector")?;
    // A shared source reads every column: the jobs sharing it read different ones.
    let read = if table.shared.is_some() {
        physical
    } else {
        read
    };
    let computed_count = computed.len();
    let complete = {
        let complete = completer(table, &computed, time.as_ref());
        move |row: Row| complete(row, true)
    };
    let strategy = |synthetic: bool| {
        let t = time.clone().expect("asked only with a time attribute");
        let column = t.column;
        let strategy = WatermarkStrategy::bounded_out_of_orderness(Duration::from_millis(
            t.out_of_orderness_ms as u64,
        ))
        .with_timestamps(move |row: &Row| event_time(row, column));
        if synthetic {
            // Generated times are synthetic: not compared with the wall clock.
            strategy
                .with_max_future_skew(None)
                .with_max_watermark_jump(None)
        } else {
            strategy
        }
    };
    let stream = match connector {
        "nexmark" => {
            let config = nexmark_config(table)?;
            nexmark_row(physical, 0)?;
            // Each row is made with room for the columns the table computes.
            let convert = nexmark_row(read, computed_count)?;
            let source = NexmarkSource::new(config)
                .map_records(move |event: &Event| complete(convert(event)));
            timed_table(env, table, source, time.as_ref().map(|_| strategy(true)))
        }
        "datagen" => {
            let settings = crate::datagen::settings(table, physical)?;
            let source = DatagenSource::new(settings.generator)
                .limit(settings.rows)
                .rate(settings.rows_per_second)
                .splits(1)
                .map_records(move |row: &Row| {
                    let mut values = Vec::with_capacity(row.0.len() + computed_count);
                    values.extend_from_slice(&row.0);
                    complete(Row(values))
                });
            timed_table(env, table, source, time.as_ref().map(|_| strategy(false)))
        }
        "filesystem" => {
            let path = file_path(option(table, "path")?);
            // JSON skips the fields no one reads; CSV reads every field of a line as ever.
            let schema = match table.options.get("format").map_or("json", |f| f.as_str()) {
                "json" => read,
                _ => physical,
            };
            let parse = line_parser(table, schema)?;
            // Each row is made with room for the columns the table computes.
            let source = FileSource::lines_with(path, move |line: &str| {
                let row = parse(line, computed_count)?;
                complete(row)
            });
            timed_table(env, table, source, time.as_ref().map(|_| strategy(false)))
        }
        "kafka" => {
            let source = kafka_source(placement, table, read, complete)?;
            timed_table(env, table, source, time.as_ref().map(|_| strategy(false)))
        }
        other => {
            return Err(SqlError::plan(format!(
                "table `{}`: the connector '{other}' cannot be read (sources: datagen, nexmark, filesystem, kafka)",
                table.name
            )));
        }
    };
    Ok(stream.name(&format!("Source: {}", table.name)))
}

/// The rows of a table whose changelog of inserts the program gives
/// ([`crate::parse::ProgramChangelog::appends`]): event time and watermarks by its `WATERMARK`.
fn program_appends(
    env: &StreamEnv,
    table: &TableDef,
    changes: &crate::parse::ProgramChangelog,
    computed: Vec<Typed>,
    time: Option<TimeAttribute>,
) -> Result<DataStream<Row>> {
    if !computed.is_empty() {
        return Err(SqlError::plan(format!(
            "table `{}`: a changelog the program gives has no computed columns",
            table.name
        )));
    }
    let watermarks = time.map(|t| {
        let column = t.column;
        WatermarkStrategy::bounded_out_of_orderness(Duration::from_millis(
            t.out_of_orderness_ms as u64,
        ))
        .with_timestamps(move |change: &Change<Row>| event_time(&change.row, column))
    });
    let name = table.name.clone();
    Ok(changes
        .build_with(env, watermarks)
        .name(&format!("Source: {}", table.name))
        .try_map(move |change: Change<Row>| match change.op {
            riffle::RowKind::Insert => Ok(change.row),
            op => Err(riffle::Error::config(
                "query",
                format!("table `{name}` was to hold inserts only, and a {op:?} came"),
            )),
        })
        .name(&format!("Rows of {}", table.name)))
}

/// The stream of `table`'s `source` ([`timed`]), read through the table's shared source when
/// it has one ([`TableDef::shared`]).
fn timed_table<S: riffle::source::Source<Row>>(
    env: &StreamEnv,
    table: &TableDef,
    source: S,
    strategy: Option<WatermarkStrategy<Row>>,
) -> DataStream<Row> {
    match &table.shared {
        Some(hub) => timed(env, hub.share(source), strategy),
        None => timed(env, source, strategy),
    }
}

/// The stream of `source`: with event time and watermarks by `strategy` when the table has a
/// time attribute.
fn timed<T: riffle::Data, S: riffle::source::Source<T>>(
    env: &StreamEnv,
    source: S,
    strategy: Option<WatermarkStrategy<T>>,
) -> DataStream<T> {
    match strategy {
        Some(strategy) => env.from_source_with_watermarks(source, strategy),
        None => env.from_source(source),
    }
}

/// The event time of a row: its time attribute's value; a row without one (a tombstone of
/// an upsert table) gets the earliest time, which moves no watermark.
fn event_time(row: &Row, column: usize) -> i64 {
    match row.get(column) {
        Value::Timestamp(ms) => *ms,
        _ => i64::MIN + 1,
    }
}

/// Completes a row of a table's physical columns (see [`completer`]).
type Completer = Arc<dyn Fn(Row, bool) -> std::result::Result<Row, String> + Send + Sync>;

/// What completes a row of `table`'s physical columns: its computed columns after them, and,
/// when asked (`true`), the check that its time attribute is not `NULL`.
fn completer(table: &TableDef, computed: &[Typed], time: Option<&TimeAttribute>) -> Completer {
    let time_column = time.map(|t| t.column);
    let computed: Vec<_> = computed.iter().map(|c| c.eval.clone()).collect();
    let name = table.name.clone();
    let time_name = time.map(|t| t.name.clone());
    Arc::new(move |mut row: Row, check_time| {
        for eval in &computed {
            let value = eval(&row).map_err(|e| e.to_string())?;
            row.0.push(value);
        }
        if check_time
            && let Some(column) = time_column
            && !matches!(row.get(column), Value::Timestamp(_))
        {
            return Err(format!(
                "the time attribute `{}` of `{name}` is NULL",
                time_name.as_deref().unwrap_or("?")
            ));
        }
        Ok(row)
    })
}

/// Whether `table` is read as a changelog: of upserts and deletions by key (`upsert-kafka`),
/// or of Debezium's change events (`'format' = 'debezium-json'`).
pub fn is_changelog(table: &TableDef) -> bool {
    table.changes.as_ref().is_some_and(|c| !c.is_append_only())
        || table.changes.is_none()
            && table.rows.is_none()
            && (matches!(
                table.options.get("connector").map(String::as_str),
                Some("upsert-kafka" | "postgres-cdc")
            ) || is_debezium(table))
}

/// Whether `table` is a `kafka` or `filesystem` table of Debezium events (JSON, or Avro
/// through a schema registry).
fn is_debezium(table: &TableDef) -> bool {
    matches!(
        table.options.get("connector").map(String::as_str),
        Some("kafka" | "filesystem")
    ) && matches!(
        table
            .options
            .get("value.format")
            .or_else(|| table.options.get("format"))
            .map(String::as_str),
        Some("debezium-json" | "debezium-avro-confluent")
    )
}

/// The changelog of a table read as one ([`is_changelog`]): an `upsert-kafka` table's
/// ([`upsert_scan`]), a `debezium-json` table's ([`debezium_scan`]) or a `postgres-cdc`
/// table's (the `postgres_cdc` module).
pub fn changelog_scan(
    env: &StreamEnv,
    table: &TableDef,
    read: &Schema,
    computed: Vec<Typed>,
    time: Option<TimeAttribute>,
) -> Result<DataStream<Change<Row>>> {
    let placement = Placement::default();
    changelog_scan_in(&placement, env, table, read, computed, time)
}

/// [`changelog_scan`], read where `placement` runs the job (in a group:
/// [`crate::placement`]).
pub(crate) fn changelog_scan_in(
    placement: &Placement,
    env: &StreamEnv,
    table: &TableDef,
    read: &Schema,
    computed: Vec<Typed>,
    time: Option<TimeAttribute>,
) -> Result<DataStream<Change<Row>>> {
    if table.changes.is_none() {
        placement.check(table, "read")?;
    }
    if let Some(changes) = &table.changes {
        if time.is_some() || !computed.is_empty() {
            return Err(SqlError::plan(format!(
                "table `{}`: a changelog the program gives has no WATERMARK and no computed columns",
                table.name
            )));
        }
        return Ok(changes.build(env).name(&format!("Source: {}", table.name)));
    }
    if is_debezium(table) {
        debezium_scan_in(placement, env, table, read, computed, time)
    } else if table.options.get("connector").map(String::as_str) == Some("postgres-cdc") {
        if time.is_some() {
            return Err(SqlError::plan(format!(
                "table `{}`: a postgres-cdc table has no WATERMARK yet (an updating table's rows come as the database commits them)",
                table.name
            )));
        }
        let complete = completer(table, &computed, None);
        cdc_scan(env, table, read, move |row| complete(row, false))
    } else {
        let complete = completer(table, &computed, time.as_ref());
        upsert_source(placement, env, table, read, complete, time)
    }
}

/// The changelog of a `postgres-cdc` table (the `postgres_cdc` module).
#[cfg(feature = "postgres")]
fn cdc_scan(
    env: &StreamEnv,
    table: &TableDef,
    read: &Schema,
    complete: impl Fn(Row) -> std::result::Result<Row, String> + Send + Sync + 'static,
) -> Result<DataStream<Change<Row>>> {
    crate::postgres_cdc::scan(env, table, read, complete)
}

#[cfg(not(feature = "postgres"))]
fn cdc_scan(
    _env: &StreamEnv,
    table: &TableDef,
    _read: &Schema,
    _complete: impl Fn(Row) -> std::result::Result<Row, String> + Send + Sync + 'static,
) -> Result<DataStream<Change<Row>>> {
    Err(SqlError::plan(format!(
        "table `{}`: this build has no postgres-cdc connector (build riffle-sql with its `postgres` feature)",
        table.name
    )))
}

/// The changelog of a `debezium-json` table (`kafka` or `filesystem`): each event's changes
/// (the `debezium` module), with the table's computed columns; event time and watermarks from
/// the time attribute of the rows each event adds (of the rows it retracts for a delete).
pub fn debezium_scan(
    env: &StreamEnv,
    table: &TableDef,
    read: &Schema,
    computed: Vec<Typed>,
    time: Option<TimeAttribute>,
) -> Result<DataStream<Change<Row>>> {
    debezium_scan_in(&Placement::default(), env, table, read, computed, time)
}

/// [`debezium_scan`], read where `placement` runs the job.
fn debezium_scan_in(
    placement: &Placement,
    env: &StreamEnv,
    table: &TableDef,
    read: &Schema,
    computed: Vec<Typed>,
    time: Option<TimeAttribute>,
) -> Result<DataStream<Change<Row>>> {
    let complete = completer(table, &computed, time.as_ref());
    let complete = move |mut changes: Vec<Change<Row>>| {
        for change in &mut changes {
            let row = std::mem::take(&mut change.row);
            change.row = complete(row, change.op.is_accumulate())?;
        }
        Ok(changes)
    };
    let strategy = time.as_ref().map(|t| {
        let column = t.column;
        WatermarkStrategy::bounded_out_of_orderness(Duration::from_millis(
            t.out_of_orderness_ms as u64,
        ))
        .with_timestamps(move |changes: &Vec<Change<Row>>| {
            changes
                .iter()
                .map(|c| event_time(&c.row, column))
                .max()
                .unwrap_or(i64::MIN + 1)
        })
    });
    let events = match option(table, "connector")? {
        "filesystem" => {
            let format = table.options.get("format").map_or("json", String::as_str);
            if format != "debezium-json" {
                return Err(SqlError::plan(format!(
                    "table `{}`: 'format' = '{format}': a filesystem table of Debezium events is read as 'debezium-json'",
                    table.name
                )));
            }
            let schema = read.clone();
            let source = FileSource::lines(file_path(option(table, "path")?)).map_records(
                move |line: &String| complete(crate::debezium::read_changes(Some(line), &schema)?),
            );
            timed(env, source, strategy)
        }
        _ => {
            let source = debezium_kafka_source(placement, table, read, complete)?;
            timed(env, source, strategy)
        }
    };
    Ok(events
        .name(&format!("Source: {}", table.name))
        .flat_map(|changes: Vec<Change<Row>>| changes)
        .name("Debezium changes"))
}

/// The Debezium events of a `kafka` table ([`crate::kafka::debezium_source`]).
#[cfg(feature = "kafka")]
fn debezium_kafka_source(
    placement: &Placement,
    table: &TableDef,
    read: &Schema,
    complete: impl Fn(Vec<Change<Row>>) -> std::result::Result<Vec<Change<Row>>, String>
    + Send
    + Sync
    + 'static,
) -> Result<impl riffle::source::Source<Vec<Change<Row>>>> {
    crate::kafka::debezium_source(placement, table, read, complete)
}

#[cfg(not(feature = "kafka"))]
fn debezium_kafka_source(
    _placement: &Placement,
    table: &TableDef,
    _read: &Schema,
    _complete: impl Fn(Vec<Change<Row>>) -> std::result::Result<Vec<Change<Row>>, String>
    + Send
    + Sync
    + 'static,
) -> Result<riffle::source::collection::CollectionSource<Vec<Change<Row>>>> {
    Err(no_kafka(table))
}

/// The changelog of an `upsert-kafka` table: its messages (upserts and tombstones by key, see
/// `kafka::upsert_source`) normalized as Flink's `ChangelogNormalize` does, keyed by
/// the primary key with the key's last row in keyed state: an upsert of a new key is `+I`, of
/// a key with a row `-U` the old row and `+U` the new (nothing when they are equal), a
/// tombstone `-D` the key's row (nothing for a key without one). The table's watermark follows
/// the upserts' time attribute (a tombstone carries none).
pub fn upsert_scan(
    env: &StreamEnv,
    table: &TableDef,
    read: &Schema,
    computed: Vec<Typed>,
    time: Option<TimeAttribute>,
) -> Result<DataStream<Change<Row>>> {
    upsert_source(
        &Placement::default(),
        env,
        table,
        read,
        completer(table, &computed, time.as_ref()),
        time,
    )
}

#[cfg(feature = "kafka")]
fn upsert_source(
    placement: &Placement,
    env: &StreamEnv,
    table: &TableDef,
    read: &Schema,
    complete: Completer,
    time: Option<TimeAttribute>,
) -> Result<DataStream<Change<Row>>> {
    use riffle::state::ValueStateDescriptor;
    let source = crate::kafka::upsert_source(placement, table, read, move |row, upsert| {
        complete(row, upsert)
    })?;
    let upserts = match &time {
        Some(t) => {
            let (column, bound) = (t.column, t.out_of_orderness_ms as u64);
            let strategy =
                WatermarkStrategy::bounded_out_of_orderness(Duration::from_millis(bound))
                    .with_timestamps(move |change: &Change<Row>| event_time(&change.row, column));
            env.from_source_with_watermarks(source, strategy)
        }
        None => env.from_source(source),
    }
    .name(&format!("Source: {}", table.name));
    let key: Vec<usize> = table
        .primary_key
        .iter()
        .filter_map(|name| read.index_of(name))
        .collect();
    let last = Arc::new(ValueStateDescriptor::<Row>::new("upsert-last-row"));
    let keyed = upserts.key_by(move |change: &Change<Row>| {
        Row(key.iter().map(|&c| change.row.get(c).clone()).collect())
    });
    Ok(placement
        .exchange(keyed, "upserts")
        .process(move |_: &Row, change: Change<Row>, ctx| {
            let mut state = ctx.value(&last);
            let before = state.get()?;
            match (change.op.is_retract(), before) {
                (true, None) => Ok(()),
                (true, Some(row)) => {
                    state.clear()?;
                    drop(state);
                    ctx.emit(Change::delete(row))
                }
                (false, None) => {
                    state.set(change.row.clone())?;
                    drop(state);
                    ctx.emit(Change::insert(change.row))
                }
                (false, Some(row)) if row == change.row => Ok(()),
                (false, Some(row)) => {
                    state.set(change.row.clone())?;
                    drop(state);
                    ctx.emit(Change::update_before(row))?;
                    ctx.emit(Change::update_after(change.row))
                }
            }
        })
        .name("ChangelogNormalize"))
}

#[cfg(not(feature = "kafka"))]
fn upsert_source(
    _placement: &Placement,
    _env: &StreamEnv,
    table: &TableDef,
    _read: &Schema,
    _complete: Completer,
    _time: Option<TimeAttribute>,
) -> Result<DataStream<Change<Row>>> {
    Err(no_kafka(table))
}

/// Writes `rows` (of the table's physical columns `schema`) with the table's connector.
pub fn sink(rows: Rows, table: &TableDef, schema: &Schema) -> Result<()> {
    sink_in(&Placement::default(), rows, table, schema)
}

/// [`sink`], written where `placement` runs the job (in a group: [`crate::placement`]).
pub(crate) fn sink_in(
    placement: &Placement,
    rows: Rows,
    table: &TableDef,
    schema: &Schema,
) -> Result<()> {
    placement.check(table, "written")?;
    let name = format!("Sink: {}", table.name);
    match option(table, "connector")? {
        "blackhole" => match rows {
            Rows::Append(rows) => {
                rows.sink_fn(|_row: Row| Ok(())).name(&name);
            }
            Rows::Changelog(changes) => {
                changes.sink_fn(|_change: Change<Row>| Ok(())).name(&name);
            }
        },
        "print" => {
            let schema = schema.clone();
            rows.into_changelog()
                .sink_fn(move |change: Change<Row>| {
                    println!("{}", change_text(&change, &schema));
                    Ok(())
                })
                .name(&name);
        }
        // Parquet is a bulk format: files roll at each checkpoint, partitioned or not.
        "filesystem"
            if !table.partition_keys.is_empty()
                || table.options.get("format").is_some_and(|f| f == "parquet") =>
        {
            partitioned_sink(rows, table, schema)?
        }
        "filesystem" => {
            let path = file_path(option(table, "path")?);
            let format = table.options.get("format").map_or("json", |f| f.as_str());
            let schema = schema.clone();
            let lines = match format {
                "csv" => rows
                    .into_append(&format!(
                        "table `{}` ('connector' = 'filesystem', 'format' = 'csv')",
                        table.name
                    ))?
                    .map(move |row: Row| csv_text(&row, &schema))
                    .name("CSV"),
                "json" => rows
                    .into_append(&format!(
                        "table `{}` ('connector' = 'filesystem', 'format' = 'json')",
                        table.name
                    ))?
                    .map(move |row: Row| json_text(&row, &schema))
                    .name("JSON"),
                "debezium-json" => rows
                    .into_changelog()
                    .map(move |change: Change<Row>| debezium_json_text(&change, &schema))
                    .name("Debezium JSON"),
                other => {
                    return Err(SqlError::plan(format!(
                        "table `{}`: filesystem writes 'format' = 'json', 'csv', 'parquet' or 'debezium-json' (got '{other}')",
                        table.name
                    )));
                }
            };
            // Exactly-once, as Flink's file system sink: part files committed with the job's
            // checkpoints (and at its end).
            lines
                .sink(
                    ExactlyOnceFileSink::<String>::new(path)
                        .setting_name("path")
                        .extension(if format == "csv" { "csv" } else { "jsonl" })
                        .with_encoder(|line, out| out.extend_from_slice(line.as_bytes())),
                )
                .name(&name);
        }
        "kafka" | "upsert-kafka" => kafka_sink(placement, rows, table, schema)?,
        "jdbc" => jdbc_sink(rows, table, schema)?,
        "delta" => delta_sink(rows, table, schema)?,
        other => {
            return Err(SqlError::plan(format!(
                "table `{}`: the connector '{other}' cannot be written (sinks: blackhole, print, filesystem, kafka, upsert-kafka, jdbc, delta)",
                table.name
            )));
        }
    }
    Ok(())
}

/// How a `filesystem` table's lines read as rows of a schema: `'format' = 'json'` (the
/// default) or `'csv'`; the row made with room for the given number of computed columns.
type LineParser = Box<dyn Fn(&str, usize) -> std::result::Result<Row, String> + Send + Sync>;

fn line_parser(table: &TableDef, schema: &Schema) -> Result<LineParser> {
    match table.options.get("format").map_or("json", |f| f.as_str()) {
        "json" => {
            let reader = crate::json::JsonReader::new(schema);
            Ok(Box::new(move |line, spare| reader.read(line, spare)))
        }
        "csv" => {
            let schema = schema.clone();
            Ok(Box::new(move |line, _| csv_row(line, &schema)))
        }
        other => Err(SqlError::plan(format!(
            "table `{}`: filesystem reads 'format' = 'json' or 'csv' (got '{other}')",
            table.name
        ))),
    }
}

/// A line of Flink's `csv` format as a row of `schema`: its fields in order (RFC 4180 quoting),
/// each read as its column's type (as `CAST` from a string would); an empty field is `NULL`.
fn csv_row(line: &str, schema: &Schema) -> std::result::Result<Row, String> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(line.as_bytes());
    let record = match reader.records().next() {
        Some(record) => record.map_err(|e| format!("not a CSV line: {e}"))?,
        None => return Err("an empty line".into()),
    };
    if record.len() != schema.len() {
        return Err(format!(
            "{} fields where the table has {} columns",
            record.len(),
            schema.len()
        ));
    }
    let mut values = Vec::with_capacity(schema.len());
    for (text, field) in record.iter().zip(&schema.fields) {
        values.push(match text {
            "" => Value::Null,
            text => crate::expr::cast_value(Value::string(text), &DataType::Varchar, &field.ty)
                .map_err(|e| format!("column `{}`: {e}", field.name))?,
        });
    }
    Ok(Row(values))
}

/// Every row of the bounded `filesystem` table `table` (a file, or a directory of files), read
/// now: a lookup join's table. A line that does not read is an error naming the file and line.
pub fn read_bounded(table: &TableDef, schema: &Schema) -> Result<Vec<Row>> {
    let path = std::path::PathBuf::from(file_path(option(table, "path")?));
    let parse = line_parser(table, schema)?;
    let mut files = Vec::new();
    let mut dirs = vec![path.clone()];
    while let Some(dir) = dirs.pop() {
        if dir.is_file() {
            files.push(dir);
            continue;
        }
        let entries = std::fs::read_dir(&dir).map_err(|e| {
            SqlError::plan(format!(
                "table `{}`: 'path' = '{}' cannot be read: {e}",
                table.name,
                path.display()
            ))
        })?;
        for entry in entries.flatten() {
            let name = entry.file_name();
            if !name.to_string_lossy().starts_with('.') {
                dirs.push(entry.path());
            }
        }
    }
    files.sort();
    let mut rows = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|e| {
            SqlError::plan(format!(
                "table `{}`: `{}` cannot be read: {e}",
                table.name,
                file.display()
            ))
        })?;
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            rows.push(parse(line, 0).map_err(|e| {
                SqlError::plan(format!(
                    "table `{}`: `{}` line {}: {e}",
                    table.name,
                    file.display(),
                    n + 1
                ))
            })?);
        }
    }
    Ok(rows)
}

/// A `filesystem` path as Flink's options give it: `file:///tmp/x` is `/tmp/x`.
fn file_path(path: &str) -> String {
    path.strip_prefix("file://").unwrap_or(path).to_string()
}

/// The sink of a `PARTITIONED BY (..)` `filesystem` table, or of any `'format' = 'parquet'`
/// one: each row (without its partition columns, as Flink writes them) in the directory of its
/// partition, `<path>/a=1/b=x/` (values escaped as Flink escapes them; `NULL` or empty:
/// `__DEFAULT_PARTITION__`; `<path>` itself without `PARTITIONED BY`), exactly-once
/// ([`PartitionedFileSink`]). Files are committed at each checkpoint and at the end of the
/// input; Flink's `sink.partition-commit.*` and `sink.rolling-policy.*` options are accepted,
/// and files also roll at 128 MB.
fn partitioned_sink(rows: Rows, table: &TableDef, schema: &Schema) -> Result<()> {
    let path = file_path(option(table, "path")?);
    let format = table.options.get("format").map_or("json", |f| f.as_str());
    let mut partition = Vec::new();
    for key in &table.partition_keys {
        partition.push(schema.index_of(key).ok_or_else(|| {
            SqlError::plan(format!(
                "table `{}`: PARTITIONED BY names `{key}`, which is not one of its columns",
                table.name
            ))
        })?);
    }
    let kept: Vec<usize> = (0..schema.len())
        .filter(|i| !partition.contains(i))
        .collect();
    let kept_schema = Schema::new(kept.iter().map(|i| schema.fields[*i].clone()).collect());
    let keys: Vec<(String, usize, DataType)> = table
        .partition_keys
        .iter()
        .zip(&partition)
        .map(|(name, i)| (name.clone(), *i, schema.fields[*i].ty.clone()))
        .collect();
    let directory = move |row: &Row| -> String {
        let parts: Vec<String> = keys
            .iter()
            .map(|(name, i, ty)| {
                let value = match row.get(*i) {
                    Value::Null => String::new(),
                    value => crate::format::display(value, ty),
                };
                let value = match value.is_empty() {
                    true => "__DEFAULT_PARTITION__".to_string(),
                    false => riffle::sink::partitioned::escape_partition_value(&value),
                };
                format!("{name}={value}")
            })
            .collect();
        parts.join("/")
    };
    let line: Arc<dyn Fn(&Row) -> String + Send + Sync> = match format {
        "csv" => Arc::new(move |row: &Row| csv_text(row, &kept_schema)),
        "json" => Arc::new(move |row: &Row| json_text(row, &kept_schema)),
        "parquet" => return parquet_sink(rows, table, path, directory, &kept_schema, kept),
        other => {
            return Err(SqlError::plan(format!(
                "table `{}`: a partitioned filesystem table writes 'format' = 'json', 'csv' or 'parquet' (got '{other}')",
                table.name
            )));
        }
    };
    let sink = PartitionedFileSink::new(path, directory, move |row: &Row, out| {
        let kept_row = Row(kept.iter().map(|i| row.get(*i).clone()).collect());
        out.extend_from_slice(line(&kept_row).as_bytes());
        Ok(())
    })
    .extension(format)
    .setting_name("path");
    rows.into_append(&format!(
        "table `{}` ('connector' = 'filesystem', PARTITIONED BY)",
        table.name
    ))?
    .sink(sink)
    .name(&format!("Sink: {}", table.name));
    Ok(())
}

/// Writes `rows` as Parquet part files into `path`, each into its `directory`.
#[cfg(feature = "parquet")]
fn parquet_sink(
    rows: Rows,
    table: &TableDef,
    path: String,
    directory: impl Fn(&Row) -> String + Send + Sync + 'static,
    schema: &Schema,
    kept: Vec<usize>,
) -> Result<()> {
    let sink = parquet_format(table, schema, kept, false)?
        .sink(path, directory)
        .setting_name("path");
    rows.into_append(&format!(
        "table `{}` ('connector' = 'filesystem', 'format' = 'parquet')",
        table.name
    ))?
    .sink(sink)
    .name(&format!("Sink: {}", table.name));
    Ok(())
}

/// Without the `parquet` feature, `'format' = 'parquet'` is refused, saying how to get it.
#[cfg(not(feature = "parquet"))]
fn parquet_sink(
    _rows: Rows,
    table: &TableDef,
    _path: String,
    _directory: impl Fn(&Row) -> String + Send + Sync + 'static,
    _schema: &Schema,
    _kept: Vec<usize>,
) -> Result<()> {
    Err(SqlError::plan(format!(
        "table `{}`: 'format' = 'parquet' needs riffle-sql's `parquet` feature (on in the `riffle` command)",
        table.name
    )))
}

/// The Parquet layout of a `filesystem` table's columns `kept` (of the row), typed as
/// `schema` says: Flink's mapping of SQL types onto Parquet's (`TIMESTAMP(3)` as
/// `TIMESTAMP(MILLIS)`, `TIMESTAMP_LTZ(3)` adjusted to UTC, `DECIMAL(p, s)` exact, `NOT NULL`
/// columns `REQUIRED`); `'parquet.compression'` is `snappy` (the default), `zstd` or
/// `uncompressed`. Nested and interval columns are refused, naming the column. For a Delta
/// table (`delta`), every timestamp is Delta's `timestamp`: microseconds, adjusted to UTC.
#[cfg(feature = "parquet")]
fn parquet_format(
    table: &TableDef,
    schema: &Schema,
    kept: Vec<usize>,
    delta: bool,
) -> Result<riffle_parquet::ParquetFormat<Row>> {
    use riffle_parquet::{Cell, Column, ColumnType, Compression, ParquetFormat};
    let mut columns = Vec::with_capacity(schema.len());
    for field in &schema.fields {
        let ty = match &field.ty {
            DataType::Boolean => ColumnType::Boolean,
            DataType::TinyInt => ColumnType::Int8,
            DataType::SmallInt => ColumnType::Int16,
            DataType::Int => ColumnType::Int32,
            DataType::BigInt => ColumnType::Int64,
            DataType::Float => ColumnType::Float,
            DataType::Double => ColumnType::Double,
            DataType::Decimal { precision, scale } => ColumnType::Decimal {
                precision: *precision,
                scale: *scale,
            },
            DataType::Varchar => ColumnType::String,
            DataType::Date => ColumnType::Date,
            DataType::Timestamp { .. } | DataType::TimestampLtz { .. } if delta => {
                ColumnType::TimestampMicros { utc: true }
            }
            DataType::Timestamp { .. } => ColumnType::TimestampMillis { utc: false },
            DataType::TimestampLtz { .. } => ColumnType::TimestampMillis { utc: true },
            other => {
                return Err(SqlError::plan(format!(
                    "table `{}`: column `{}` is {other}; 'format' = 'parquet' writes flat columns of scalar types (BOOLEAN, integers, FLOAT, DOUBLE, DECIMAL, STRING, DATE, TIMESTAMP, TIMESTAMP_LTZ)",
                    table.name, field.name
                )));
            }
        };
        let column = Column::new(field.name.clone(), ty);
        columns.push(match field.nullable {
            true => column,
            false => column.required(),
        });
    }
    let compression: Compression = match table.options.get("parquet.compression") {
        None => Compression::default(),
        Some(name) => name.parse().map_err(|e| {
            SqlError::plan(format!(
                "table `{}`: 'parquet.compression': {e}",
                table.name
            ))
        })?,
    };
    let scales: Vec<Option<u8>> = schema
        .fields
        .iter()
        .map(|f| match f.ty {
            DataType::Decimal { scale, .. } => Some(scale),
            _ => None,
        })
        .collect();
    let format = ParquetFormat::new(columns, move |row: &Row, out| {
        for (i, scale) in kept.iter().zip(&scales) {
            let cell = match row.get(*i) {
                Value::Null => Cell::Null,
                Value::Bool(b) => Cell::Bool(*b),
                Value::Int(n) => Cell::Int(*n),
                Value::Date(days) => Cell::Int((*days).into()),
                Value::Timestamp(ms) if delta => {
                    Cell::Int(ms.checked_mul(1000).ok_or_else(|| {
                        riffle::Error::user(format!(
                            "the timestamp {ms} ms is out of Delta's range"
                        ))
                    })?)
                }
                Value::Timestamp(ms) => Cell::Int(*ms),
                Value::Double(d) => Cell::Float(*d),
                Value::String(s) => Cell::Str(s),
                Value::Decimal(d) => {
                    let scale = scale.unwrap_or(d.scale);
                    let d = d.rescale(scale).ok_or_else(|| {
                        riffle::Error::user(format!("{d:?} does not fit at scale {scale}"))
                    })?;
                    Cell::Decimal(d.unscaled)
                }
                other => {
                    return Err(riffle::Error::user(format!(
                        "{other:?} is not a value 'format' = 'parquet' writes"
                    )));
                }
            };
            out.push(cell)?;
        }
        Ok(())
    })
    .map_err(|e| SqlError::plan(format!("table `{}`: {e}", table.name)))?;
    Ok(format.compression(compression))
}

/// Writes `rows` into the Delta Lake table of `table` (`'connector' = 'delta'`, the Flink Delta
/// connector's names: `'table-path'`, `PARTITIONED BY`): Parquet part files committed to the
/// table's log once per checkpoint, exactly-once ([`riffle_delta::DeltaSink`], at
/// parallelism 1). The table is created when the job starts if there is none.
#[cfg(feature = "delta")]
fn delta_sink(rows: Rows, table: &TableDef, schema: &Schema) -> Result<()> {
    use riffle_parquet::{Column, ColumnType};
    let path = file_path(option(table, "table-path")?);
    let mut partition = Vec::new();
    let mut columns = Vec::new();
    for key in &table.partition_keys {
        let i = schema.index_of(key).ok_or_else(|| {
            SqlError::plan(format!(
                "table `{}`: PARTITIONED BY names `{key}`, which is not one of its columns",
                table.name
            ))
        })?;
        let field = &schema.fields[i];
        let ty = match field.ty {
            DataType::Varchar => ColumnType::String,
            DataType::TinyInt => ColumnType::Int8,
            DataType::SmallInt => ColumnType::Int16,
            DataType::Int => ColumnType::Int32,
            DataType::BigInt => ColumnType::Int64,
            DataType::Boolean => ColumnType::Boolean,
            DataType::Date => ColumnType::Date,
            ref other => {
                return Err(SqlError::plan(format!(
                    "table `{}`: the partition column `{key}` is {other}; a Delta table is partitioned here by strings, integers, booleans or dates",
                    table.name
                )));
            }
        };
        partition.push((i, field.ty.clone()));
        columns.push(Column::new(key.clone(), ty));
    }
    let kept: Vec<usize> = (0..schema.len())
        .filter(|i| !partition.iter().any(|(p, _)| p == i))
        .collect();
    let kept_schema = Schema::new(kept.iter().map(|i| schema.fields[*i].clone()).collect());
    let format = parquet_format(table, &kept_schema, kept, true)?;
    let sink = riffle_delta::DeltaSink::new(path, format)
        .partitioned_by(columns, move |row: &Row| {
            partition
                .iter()
                .map(|(i, ty)| match row.get(*i) {
                    Value::Null => None,
                    value => Some(crate::format::display(value, ty)),
                })
                .collect()
        })
        .setting_name("table-path");
    rows.into_append(&format!("table `{}` ('connector' = 'delta')", table.name))?
        .sink(sink)
        .name(&format!("Sink: {}", table.name))
        .set_parallelism(1);
    Ok(())
}

#[cfg(not(feature = "delta"))]
fn delta_sink(_rows: Rows, table: &TableDef, _schema: &Schema) -> Result<()> {
    Err(SqlError::plan(format!(
        "table `{}`: 'connector' = 'delta' needs riffle-sql's `delta` feature (on in the `riffle` command)",
        table.name
    )))
}

/// A row as one line of Flink's `csv` format: numbers as they are, strings and times (the
/// shortest fraction, `2026-01-15 00:18:00.4`) quoted as Flink's encoder quotes them
/// ([`riffle::sink::csv::write_field`]), `NULL` as nothing.
pub fn csv_text(row: &Row, schema: &Schema) -> String {
    let mut line = Vec::new();
    for (i, (value, field)) in row.0.iter().zip(&schema.fields).enumerate() {
        if i > 0 {
            line.push(b',');
        }
        match value {
            Value::Null => {}
            Value::String(s) => riffle::sink::csv::write_field(s, &mut line),
            Value::Timestamp(ms) => riffle::sink::csv::write_field(
                &riffle_nexmark::queries::sql_timestamp(*ms),
                &mut line,
            ),
            Value::Bool(b) => line.extend_from_slice(if *b { b"true" } else { b"false" }),
            other => {
                riffle::sink::csv::write_field(&crate::format::display(other, &field.ty), &mut line)
            }
        }
    }
    String::from_utf8(line).expect("UTF-8 in, UTF-8 out")
}

/// The source of a `kafka` table ([`crate::kafka`]).
#[cfg(feature = "kafka")]
fn kafka_source(
    placement: &Placement,
    table: &TableDef,
    read: &Schema,
    complete: impl Fn(Row) -> std::result::Result<Row, String> + Send + Sync + 'static,
) -> Result<impl riffle::source::Source<Row>> {
    crate::kafka::source(placement, table, read, complete)
}

/// Without the `kafka` feature, a `kafka` table is refused, saying how to get one.
#[cfg(not(feature = "kafka"))]
fn kafka_source(
    _placement: &Placement,
    table: &TableDef,
    _read: &Schema,
    _complete: impl Fn(Row) -> std::result::Result<Row, String> + Send + Sync + 'static,
) -> Result<riffle::source::collection::CollectionSource<Row>> {
    Err(no_kafka(table))
}

/// Writes `rows` to a `kafka` table ([`crate::kafka`]).
#[cfg(feature = "kafka")]
fn kafka_sink(placement: &Placement, rows: Rows, table: &TableDef, schema: &Schema) -> Result<()> {
    crate::kafka::sink(placement, rows, table, schema)
}

#[cfg(not(feature = "kafka"))]
fn kafka_sink(_: &Placement, _rows: Rows, table: &TableDef, _schema: &Schema) -> Result<()> {
    Err(no_kafka(table))
}

/// Whether a sink of `table` is exactly-once (`'sink.delivery-guarantee' = 'exactly-once'`) or
/// at-least-once (`at-least-once`, the default, as Flink; `none` too: Riffle's sinks always wait
/// for their system's acknowledgement).
#[cfg_attr(not(any(feature = "kafka", feature = "postgres")), allow(dead_code))]
pub(crate) fn exactly_once(table: &TableDef) -> Result<bool> {
    match table
        .options
        .get("sink.delivery-guarantee")
        .map_or("at-least-once", String::as_str)
    {
        "exactly-once" => Ok(true),
        "at-least-once" | "none" => Ok(false),
        other => Err(SqlError::plan(format!(
            "table `{}`: 'sink.delivery-guarantee' = '{other}': one of at-least-once, exactly-once, none",
            table.name
        ))),
    }
}

/// Writes `rows` to a `jdbc` table ([`crate::jdbc`]).
#[cfg(feature = "postgres")]
fn jdbc_sink(rows: Rows, table: &TableDef, schema: &Schema) -> Result<()> {
    crate::jdbc::sink(rows, table, schema)
}

#[cfg(not(feature = "postgres"))]
fn jdbc_sink(_rows: Rows, table: &TableDef, _schema: &Schema) -> Result<()> {
    Err(SqlError::plan(format!(
        "table `{}`: this build has no jdbc connector (build riffle-sql with its `postgres` feature)",
        table.name
    )))
}

#[cfg(not(feature = "kafka"))]
fn no_kafka(table: &TableDef) -> SqlError {
    SqlError::plan(format!(
        "table `{}`: this build has no Kafka connector (build riffle with `--features kafka`, or riffle-sql with its `kafka` feature)",
        table.name
    ))
}

/// A change as Flink's print connector and SQL client show it: `+I[a, b]`, `-U[..]`, `+U[..]`,
/// `-D[..]`.
pub fn change_text(change: &Change<Row>, schema: &Schema) -> String {
    format!(
        "{}[{}]",
        change.op.short_string(),
        row_text(&change.row, schema)
    )
}

/// A change in Debezium's JSON envelope, as Flink's `debezium-json` format writes one: an added
/// row (`+I`, `+U`) is `{"before":null,"after":{..},"op":"c"}`, a removed one (`-U`, `-D`)
/// `{"before":{..},"after":null,"op":"d"}`.
pub fn debezium_json_text(change: &Change<Row>, schema: &Schema) -> String {
    let row = json_text(&change.row, schema);
    match change.op {
        RowKind::Insert | RowKind::UpdateAfter => {
            format!(r#"{{"before":null,"after":{row},"op":"c"}}"#)
        }
        RowKind::UpdateBefore | RowKind::Delete => {
            format!(r#"{{"before":{row},"after":null,"op":"d"}}"#)
        }
    }
}

fn option<'a>(table: &'a TableDef, key: &str) -> Result<&'a str> {
    table.options.get(key).map(String::as_str).ok_or_else(|| {
        SqlError::plan(format!(
            "table `{}` needs the option '{key}' in WITH (...)",
            table.name
        ))
    })
}

/// The generator's settings from the `nexmark` connector's options (those of the nexmark
/// project's Flink connector).
fn nexmark_config(table: &TableDef) -> Result<NexmarkConfig> {
    let mut config = NexmarkConfig::default();
    let number = |key: &str| -> Result<Option<f64>> {
        table
            .options
            .get(key)
            .map(|v| {
                v.trim().parse::<f64>().map_err(|_| {
                    SqlError::plan(format!(
                        "table `{}`: '{key}' = '{v}' is not a number",
                        table.name
                    ))
                })
            })
            .transpose()
    };
    if let Some(events) = number("events.num")? {
        if events < 0.0 {
            return Err(SqlError::plan(format!(
                "table `{}`: 'events.num' must not be negative",
                table.name
            )));
        }
        // 0 or less in the nexmark project: unbounded.
        config.events = (events > 0.0).then_some(events as u64);
    }
    // Riffle's: a wall-clock throttle, as Flink's `datagen` connector names it (the nexmark
    // project's rates are of event time here).
    if let Some(rate) = number("rows-per-second")? {
        if rate <= 0.0 {
            return Err(SqlError::plan(format!(
                "table `{}`: 'rows-per-second' must be positive",
                table.name
            )));
        }
        config.rate = Some(rate);
    }
    let first = number("first-event.rate")?;
    let next = number("next-event.rate")?;
    match (first, next) {
        (Some(a), Some(b)) if a != b => {
            return Err(SqlError::plan(format!(
                "table `{}`: 'first-event.rate' and 'next-event.rate' differ ({a}, {b}): Riffle's generator has one rate",
                table.name
            )));
        }
        (Some(rate), _) | (None, Some(rate)) => config.events_per_second = rate,
        (None, None) => {}
    }
    for (key, default) in [
        ("person.proportion", 1.0),
        ("auction.proportion", 3.0),
        ("bid.proportion", 46.0),
    ] {
        if let Some(value) = number(key)?
            && value != default
        {
            return Err(SqlError::plan(format!(
                "table `{}`: '{key}' = '{value}': Riffle's generator has the nexmark project's default proportions (1, 3, 46)",
                table.name
            )));
        }
    }
    for key in table.options.keys() {
        let known = [
            "connector",
            "events.num",
            "first-event.rate",
            "next-event.rate",
            "person.proportion",
            "auction.proportion",
            "bid.proportion",
            "rows-per-second",
        ];
        if !known.contains(&key.as_str()) {
            return Err(SqlError::plan(format!(
                "table `{}`: the nexmark connector has no option '{key}' (options: {})",
                table.name,
                known[1..].join(", ")
            )));
        }
    }
    config
        .validate()
        .map_err(|e| SqlError::plan(format!("table `{}`: {e}", table.name)))?;
    Ok(config)
}

/// A field of a Nexmark entity.
type Getter<T> = fn(&T) -> Value;

fn person_field(name: &str) -> Option<Getter<riffle_nexmark::Person>> {
    Some(match name {
        "id" => |p| Value::Int(p.id),
        "name" => |p| Value::string(&p.name),
        "emailAddress" => |p| Value::string(&p.email_address),
        "creditCard" => |p| Value::string(&p.credit_card),
        "city" => |p| Value::string(&p.city),
        "state" => |p| Value::string(&p.state),
        "dateTime" => |p| Value::Timestamp(p.date_time),
        "extra" => |p| Value::string(&p.extra),
        _ => return None,
    })
}

fn auction_field(name: &str) -> Option<Getter<riffle_nexmark::Auction>> {
    Some(match name {
        "id" => |a| Value::Int(a.id),
        "itemName" => |a| Value::string(&a.item_name),
        "description" => |a| Value::string(&a.description),
        "initialBid" => |a| Value::Int(a.initial_bid),
        "reserve" => |a| Value::Int(a.reserve),
        "dateTime" => |a| Value::Timestamp(a.date_time),
        "expires" => |a| Value::Timestamp(a.expires),
        "seller" => |a| Value::Int(a.seller),
        "category" => |a| Value::Int(a.category),
        "extra" => |a| Value::string(&a.extra),
        _ => return None,
    })
}

fn bid_field(name: &str) -> Option<Getter<riffle_nexmark::Bid>> {
    Some(match name {
        "auction" => |b| Value::Int(b.auction),
        "bidder" => |b| Value::Int(b.bidder),
        "price" => |b| Value::Int(b.price),
        "channel" => |b| Value::string(&b.channel),
        "url" => |b| Value::string(&b.url),
        "dateTime" => |b| Value::Timestamp(b.date_time),
        "extra" => |b| Value::string(&b.extra),
        _ => return None,
    })
}

/// Whether a generated value of `field` (by its name) can be held by `ty`.
fn fits(name: &str, ty: &DataType) -> bool {
    match name {
        "dateTime" | "expires" => ty.is_timestamp(),
        "id" | "initialBid" | "reserve" | "seller" | "category" | "auction" | "bidder"
        | "price" => ty.is_integer() || matches!(ty, DataType::Decimal { .. }),
        _ => *ty == DataType::Varchar,
    }
}

/// The getters of a `ROW` column's declared fields, or why one cannot be filled.
fn getters<T>(
    column: &Field,
    lookup: fn(&str) -> Option<Getter<T>>,
    entity: &str,
) -> Result<Vec<Getter<T>>> {
    let DataType::Row(fields) = &column.ty else {
        return Err(SqlError::plan(format!(
            "nexmark column `{}` must be a ROW<...> of the {entity}'s fields, not {}",
            column.name, column.ty
        )));
    };
    fields
        .iter()
        .map(|field| {
            if crate::lower::unread_name(&field.name).is_some() {
                return Ok((|_| Value::Null) as Getter<T>);
            }
            let getter = lookup(&field.name).ok_or_else(|| {
                SqlError::plan(format!(
                    "nexmark: a {entity} has no field `{}` (column `{}`)",
                    field.name, column.name
                ))
            })?;
            if !fits(&field.name, &field.ty) {
                return Err(SqlError::plan(format!(
                    "nexmark: `{}.{}` cannot be {}",
                    column.name, field.name, field.ty
                )));
            }
            Ok(getter)
        })
        .collect()
}

type EventToRow = Arc<dyn Fn(&Event) -> Row + Send + Sync>;

/// How a Nexmark event becomes a row of `schema` (the nexmark project's `datagen` table:
/// `event_type INT`, `person ROW<..>`, `auction ROW<..>`, `bid ROW<..>`, any subset, any order),
/// with room for `room` more columns (those the table computes).
fn nexmark_row(schema: &Schema, room: usize) -> Result<EventToRow> {
    type Column = Box<dyn Fn(&Event) -> Value + Send + Sync>;
    let mut columns: Vec<Column> = Vec::new();
    for field in &schema.fields {
        let column: Column = match field.name.as_str() {
            name if crate::lower::unread_name(name).is_some() => Box::new(|_: &Event| Value::Null),
            "event_type" => Box::new(|e: &Event| {
                Value::Int(match e {
                    Event::Person(_) => 0,
                    Event::Auction(_) => 1,
                    Event::Bid(_) => 2,
                })
            }),
            "person" => {
                let g = getters(field, person_field, "person")?;
                Box::new(move |e: &Event| match e {
                    Event::Person(p) => Value::Row(g.iter().map(|f| f(p)).collect()),
                    _ => Value::Null,
                })
            }
            "auction" => {
                let g = getters(field, auction_field, "auction")?;
                Box::new(move |e: &Event| match e {
                    Event::Auction(a) => Value::Row(g.iter().map(|f| f(a)).collect()),
                    _ => Value::Null,
                })
            }
            "bid" => {
                let g = getters(field, bid_field, "bid")?;
                Box::new(move |e: &Event| match e {
                    Event::Bid(b) => Value::Row(g.iter().map(|f| f(b)).collect()),
                    _ => Value::Null,
                })
            }
            other => {
                return Err(SqlError::plan(format!(
                    "the nexmark connector fills `event_type`, `person`, `auction` and `bid`, not `{other}`"
                )));
            }
        };
        columns.push(column);
    }
    Ok(Arc::new(move |event| {
        let mut values = Vec::with_capacity(columns.len() + room);
        values.extend(columns.iter().map(|c| c(event)));
        Row(values)
    }))
}

/// A row as Flink's `print` connector shows it: `1000, 2001, 2026-01-15 00:18:00.400`.
pub fn row_text(row: &Row, schema: &Schema) -> String {
    row.0
        .iter()
        .zip(&schema.fields)
        .map(|(v, f)| crate::format::display(v, &f.ty))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A row as one line of JSON, its fields named by `schema`, as Flink's `json` format writes
/// it: times as `2026-01-15 00:18:00.4` (the shortest fraction), decimals as exact numbers.
pub fn json_text(row: &Row, schema: &Schema) -> String {
    let mut out = String::from("{");
    for (i, (value, field)) in row.0.iter().zip(&schema.fields).enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(&field.name).unwrap_or_default());
        out.push(':');
        push_json(&mut out, value, &field.ty);
    }
    out.push('}');
    out
}

fn push_json(out: &mut String, value: &Value, ty: &DataType) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::Double(d) if d.is_finite() => out.push_str(&d.to_string()),
        Value::Double(_) => out.push_str("null"),
        Value::Decimal(_) => out.push_str(&crate::format::display(value, ty)),
        Value::String(s) => out.push_str(&serde_json::to_string(s.as_str()).unwrap_or_default()),
        Value::Timestamp(ms) => {
            out.push('"');
            out.push_str(&riffle_nexmark::queries::sql_timestamp(*ms));
            out.push('"');
        }
        Value::Row(values) => {
            let fields = match ty {
                DataType::Row(fields) => fields.clone(),
                _ => Vec::new(),
            };
            out.push('{');
            for (i, v) in values.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let (name, ty) = fields
                    .get(i)
                    .map_or((format!("f{i}"), DataType::Null), |f| {
                        (f.name.clone(), f.ty.clone())
                    });
                out.push_str(&serde_json::to_string(&name).unwrap_or_default());
                out.push(':');
                push_json(out, v, &ty);
            }
            out.push('}');
        }
        Value::Array(values) => {
            let element = match ty {
                DataType::Array(e) => e.as_ref().clone(),
                _ => DataType::Null,
            };
            out.push('[');
            for (i, v) in values.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_json(out, v, &element);
            }
            out.push(']');
        }
        other => {
            let text = crate::format::display(other, ty);
            out.push_str(&serde_json::to_string(&text).unwrap_or_default());
        }
    }
}

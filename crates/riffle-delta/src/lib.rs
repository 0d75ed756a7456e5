//! A Delta Lake table sink: Riffle's exactly-once Parquet part files, committed to the table's
//! log (`_delta_log/`) when the checkpoint that covers them completes.
//!
//! Each sink subtask writes Parquet part files ([`riffle_parquet`]) into the table's directory
//! (partition directories `a=1/b=x/` below it), closes them at each checkpoint barrier and,
//! when the checkpoint completes, makes them visible: renamed out of their in-progress
//! directory, then added to the table in one Delta commit (`add` actions, a `txn` action of
//! application `riffle-<job>` at the checkpoint's id, and `riffle.checkpoint-id` in the
//! commit's information). A Delta reader only reads the files the log names, so it sees whole
//! checkpoints.
//!
//! Exactly-once across restarts: a job restored from a checkpoint commits that checkpoint's
//! files again if the failure came before their commit; files already in the table (by name:
//! part-file names are unique to a job, subtask, run and sequence) are not added twice, and
//! what the failed run wrote after the checkpoint is never committed. Run the sink at
//! parallelism 1 for one table commit per checkpoint (each subtask commits its own files).
//!
//! Delta's types: timestamps are microseconds (`ColumnType::TimestampMicros`, `utc` for
//! Delta's `timestamp`, not for `timestamp_ntz`); the rest as [`ColumnType`] says.
//!
//! ```no_run
//! use riffle::StreamEnv;
//! use riffle_delta::DeltaSink;
//! use riffle_parquet::{Cell, Column, ColumnType, ParquetFormat};
//!
//! # fn main() -> riffle::Result<()> {
//! let env = StreamEnv::new();
//! let counts = env.from_iter(vec![("alice".to_string(), "2026-01-15".to_string(), 3i64)]);
//! let format = ParquetFormat::new(
//!     vec![Column::new("user", ColumnType::String), Column::new("clicks", ColumnType::Int64)],
//!     |(user, _, clicks): &(String, String, i64), row| {
//!         row.push(Cell::Str(user))?;
//!         row.push(Cell::Int(*clicks))
//!     },
//! )?;
//! let sink = DeltaSink::new("/lake/clicks", format).partitioned_by(
//!     vec![Column::new("dt", ColumnType::String)],
//!     |(_, day, _): &(String, String, i64)| vec![Some(day.clone())],
//! );
//! counts.sink(sink).set_parallelism(1);
//! env.execute()?;
//! # Ok(())
//! # }
//! ```

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use deltalake_core::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake_core::kernel::{
    Action, Add, DataType, DecimalType, PrimitiveType, StructField, Transaction,
};
use deltalake_core::operations::create::CreateBuilder;
use deltalake_core::protocol::{DeltaOperation, SaveMode};
use deltalake_core::{DeltaTable, DeltaTableError, ensure_table_uri, open_table};
use riffle::operators::OperatorContext;
use riffle::sink::partitioned::{
    CommittedFiles, PartitionedFileSink, escape_partition_value, unescape_partition_value,
};
use riffle::sink::{Guarantee, Sink, SinkWriter};
use riffle::{Data, Error, Result};
use riffle_parquet::{Column, ColumnType, ParquetFormat};

/// The directory name of a null (or empty) partition value, as Hive and Flink write it.
const DEFAULT_PARTITION: &str = "__DEFAULT_PARTITION__";

type PartitionValues<T> = Arc<dyn Fn(&T) -> Vec<Option<String>> + Send + Sync>;

/// An exactly-once sink into a Delta Lake table; see the [crate documentation](crate).
pub struct DeltaSink<T> {
    path: PathBuf,
    format: ParquetFormat<T>,
    partition_columns: Vec<Column>,
    partition: Option<PartitionValues<T>>,
    setting: String,
    roll_size: u64,
}

impl<T: Data> DeltaSink<T> {
    /// A sink into the Delta table at `path` (a local directory; the table is created there,
    /// with the format's columns, when the job starts if there is none), its rows written as
    /// `format` says.
    pub fn new(path: impl Into<PathBuf>, format: ParquetFormat<T>) -> Self {
        DeltaSink {
            path: path.into(),
            format,
            partition_columns: Vec::new(),
            partition: None,
            setting: "table-path".into(),
            roll_size: 128 << 20,
        }
    }

    /// Partitions the table by `columns` (not in the files: in their directories and the
    /// log, as Delta and Hive keep them), `values(record)` giving each one's value as text
    /// (`None`: null).
    pub fn partitioned_by(
        mut self,
        columns: Vec<Column>,
        values: impl Fn(&T) -> Vec<Option<String>> + Send + Sync + 'static,
    ) -> Self {
        self.partition_columns = columns;
        self.partition = Some(Arc::new(values));
        self
    }

    /// The name of the setting the path came from, used in configuration errors
    /// (`table-path` unless set).
    pub fn setting_name(mut self, setting: &str) -> Self {
        self.setting = setting.to_string();
        self
    }

    /// Starts a new part file once the current one holds this many bytes (128 MB unless
    /// set); files also roll at every checkpoint.
    pub fn roll_size(mut self, bytes: u64) -> Self {
        self.roll_size = bytes;
        self
    }

    /// The table's columns: the files' and then the partition columns.
    fn schema(&self) -> Result<Vec<StructField>> {
        let mut fields = Vec::new();
        for column in self.format.columns().iter().chain(&self.partition_columns) {
            let ty = delta_type(column.ty()).map_err(|why| {
                Error::config(&self.setting, format!("column `{}`: {why}", column.name()))
            })?;
            fields.push(StructField::new(
                column.name(),
                DataType::Primitive(ty),
                column.is_nullable(),
            ));
        }
        Ok(fields)
    }

    /// The part-file sink: Parquet into the partition directories, each commit added to the
    /// table's log.
    fn files(&self) -> PartitionedFileSink<T> {
        let names: Vec<String> = self
            .partition_columns
            .iter()
            .map(|c| c.name().to_string())
            .collect();
        let partition = self.partition.clone();
        let directory = move |record: &T| -> String {
            let Some(values) = &partition else {
                return String::new();
            };
            let parts: Vec<String> = names
                .iter()
                .zip(values(record))
                .map(|(name, value)| match value.as_deref() {
                    None | Some("") => format!("{name}={DEFAULT_PARTITION}"),
                    Some(value) => format!("{name}={}", escape_partition_value(value)),
                })
                .collect();
            parts.join("/")
        };
        let table = self.path.clone();
        self.format
            .clone()
            .sink(&self.path, directory)
            .roll_size(self.roll_size)
            .setting_name(&self.setting)
            .on_commit(move |committed| commit(&table, committed))
    }
}

/// Delta's type of a column, or why it has none.
fn delta_type(ty: ColumnType) -> std::result::Result<PrimitiveType, String> {
    Ok(match ty {
        ColumnType::Boolean => PrimitiveType::Boolean,
        ColumnType::Int8 => PrimitiveType::Byte,
        ColumnType::Int16 => PrimitiveType::Short,
        ColumnType::Int32 => PrimitiveType::Integer,
        ColumnType::Int64 => PrimitiveType::Long,
        ColumnType::Float => PrimitiveType::Float,
        ColumnType::Double => PrimitiveType::Double,
        ColumnType::String => PrimitiveType::String,
        ColumnType::Binary => PrimitiveType::Binary,
        ColumnType::Date => PrimitiveType::Date,
        ColumnType::TimestampMicros { utc: true } => PrimitiveType::Timestamp,
        ColumnType::TimestampMicros { utc: false } => PrimitiveType::TimestampNtz,
        ColumnType::TimestampMillis { .. } => {
            return Err(
                "Delta's timestamps are microseconds: write it as ColumnType::TimestampMicros"
                    .into(),
            );
        }
        ColumnType::Decimal { precision, scale } => PrimitiveType::Decimal(
            DecimalType::try_new(precision, scale).map_err(|e| e.to_string())?,
        ),
    })
}

/// Runs `work` on a runtime of its own (the sink's calls are synchronous, one at a time).
fn block_on<F: std::future::Future>(work: F) -> Result<F::Output> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the Delta client's runtime", e))?;
    Ok(runtime.block_on(work))
}

/// The table's location as the Delta client takes it (an absolute path).
fn table_location(path: &Path) -> String {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    path.display().to_string()
}

fn delta_error(context: &str, e: DeltaTableError) -> Error {
    Error::user(format!("{context}: {e}"))
}

/// The table at `path` created with `fields` (partitioned by `partition_columns`) if there is
/// none, or checked to have them.
fn create_or_check(
    path: &Path,
    fields: Vec<StructField>,
    partition_columns: Vec<String>,
    setting: &str,
) -> Result<()> {
    std::fs::create_dir_all(path)
        .map_err(|e| Error::config(setting, format!("cannot create `{}`: {e}", path.display())))?;
    let bad = |e: DeltaTableError| {
        Error::config(
            setting,
            format!(
                "`{}` is not a Delta table Riffle can write: {e}",
                path.display()
            ),
        )
    };
    block_on(async {
        let uri = ensure_table_uri(table_location(path)).map_err(bad)?;
        let table = CreateBuilder::new()
            .with_location(uri.to_string())
            .with_columns(fields.clone())
            .with_partition_columns(partition_columns.clone())
            .with_save_mode(SaveMode::Ignore)
            .await
            .map_err(bad)?;
        let snapshot = table.snapshot().map_err(bad)?;
        let schema = snapshot.schema();
        let have: Vec<(String, String, bool)> = schema
            .fields()
            .map(|f| (f.name().clone(), f.data_type().to_string(), f.is_nullable()))
            .collect();
        let want: Vec<(String, String, bool)> = fields
            .iter()
            .map(|f| (f.name().clone(), f.data_type().to_string(), f.is_nullable()))
            .collect();
        let table_partitions = snapshot.metadata().partition_columns().to_vec();
        if have != want || table_partitions != partition_columns {
            return Err(Error::config(
                setting,
                format!(
                    "the Delta table at `{}` has columns {have:?} partitioned by {table_partitions:?}; the sink writes {want:?} partitioned by {partition_columns:?}",
                    path.display()
                ),
            ));
        }
        Ok(())
    })?
}

/// A relative path as a Delta log's `add.path` holds it: a URI path, each byte but the
/// unreserved ones, `/` and `=` percent-encoded (a partition directory `hm=00%3A00` is
/// `hm=00%253A00`).
fn uri_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for byte in path.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' | b'=' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// The partition values a directory such as `dt=2026-01-15/hm=00%3A00` stands for.
fn partition_values(partition: &str) -> HashMap<String, Option<String>> {
    partition
        .split('/')
        .filter(|part| !part.is_empty())
        .filter_map(|part| part.split_once('='))
        .map(|(name, value)| {
            let value = (value != DEFAULT_PARTITION).then(|| unescape_partition_value(value));
            (name.to_string(), value)
        })
        .collect()
}

/// The job a part file's name belongs to (`part-<job>-<subtask>-<run>-<n>.parquet`).
fn job_of(name: &str) -> Option<&str> {
    name.strip_prefix("part-")?.split('-').next()
}

/// Adds the `committed` files that are not in the table at `path` yet, in one commit.
fn commit(path: &Path, committed: &CommittedFiles<'_>) -> Result<()> {
    let context = format!("cannot commit to the Delta table at `{}`", path.display());
    block_on(async {
        let uri = ensure_table_uri(table_location(path)).map_err(|e| delta_error(&context, e))?;
        let table: DeltaTable = open_table(uri)
            .await
            .map_err(|e| delta_error(&context, e))?;
        let present: HashSet<String> = table
            .get_file_uris()
            .map_err(|e| delta_error(&context, e))?
            .filter_map(|uri| uri.rsplit('/').next().map(str::to_string))
            .collect();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut actions = Vec::new();
        let mut app = None;
        for (partition, name) in committed.files {
            if present.contains(name) {
                continue;
            }
            let relative = match partition.is_empty() {
                true => name.clone(),
                false => format!("{partition}/{name}"),
            };
            let file = committed.dir.join(&relative);
            let size = std::fs::metadata(&file)
                .map_err(|e| Error::io(format!("{context}: `{}`", file.display()), e))?
                .len();
            app = app.or_else(|| job_of(name).map(|job| format!("riffle-{job}")));
            actions.push(Action::Add(Add {
                path: uri_path(&relative),
                size: size as i64,
                partition_values: partition_values(partition),
                modification_time: now,
                data_change: true,
                stats: None,
                tags: None,
                deletion_vector: None,
                base_row_id: None,
                default_row_commit_version: None,
                clustering_provider: None,
            }));
        }
        if actions.is_empty() {
            return Ok(());
        }
        let mut properties = CommitProperties::default();
        if let Some(id) = committed.checkpoint_id {
            properties = properties.with_metadata([(
                "riffle.checkpoint-id".to_string(),
                serde_json::Value::from(id),
            )]);
            if let Some(app) = app {
                properties =
                    properties.with_application_transaction(Transaction::new(app, id as i64));
            }
        }
        let snapshot = table.snapshot().map_err(|e| delta_error(&context, e))?;
        CommitBuilder::from(properties)
            .with_actions(actions)
            .build(
                Some(snapshot),
                table.log_store(),
                DeltaOperation::Write {
                    mode: SaveMode::Append,
                    partition_by: None,
                    predicate: None,
                },
            )
            .await
            .map_err(|e| delta_error(&context, e))?;
        Ok(())
    })?
}

impl<T: Data> Sink<T> for DeltaSink<T> {
    fn name(&self) -> String {
        format!("Delta table {} (exactly-once)", self.path.display())
    }

    fn validate(&self) -> Result<()> {
        self.files().validate()?;
        create_or_check(
            &self.path,
            self.schema()?,
            self.partition_columns
                .iter()
                .map(|c| c.name().to_string())
                .collect(),
            &self.setting,
        )
    }

    fn guarantee(&self) -> Guarantee {
        Guarantee::ExactlyOnce
    }

    fn writer(&self, ctx: &OperatorContext) -> Result<Box<dyn SinkWriter<T>>> {
        self.files().writer(ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_directories_give_their_values() {
        let values = partition_values("dt=2026-01-15/hm=00%3A00/k=__DEFAULT_PARTITION__");
        assert_eq!(values["dt"].as_deref(), Some("2026-01-15"));
        assert_eq!(values["hm"].as_deref(), Some("00:00"));
        assert_eq!(values["k"], None);
        assert!(partition_values("").is_empty());
    }

    #[test]
    fn log_paths_are_percent_encoded() {
        assert_eq!(
            uri_path("hm=00%3A00/part-a-0-r-0.parquet"),
            "hm=00%253A00/part-a-0-r-0.parquet"
        );
        assert_eq!(uri_path("c=a b/x"), "c=a%20b/x");
    }

    #[test]
    fn part_files_name_their_job() {
        assert_eq!(job_of("part-1f2e-0-abc-3.parquet"), Some("1f2e"));
        assert_eq!(job_of("other.parquet"), None);
    }
}

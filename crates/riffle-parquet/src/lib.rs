//! Parquet part files for Riffle's exactly-once [`PartitionedFileSink`].
//!
//! A [`ParquetFormat`] names the file's columns and how a record fills one row; the sink opens
//! a [`PartWriter`] per part file, which buffers rows column by column, writes a row group when
//! the buffered values pass [`ParquetFormat::row_group_bytes`], and writes the last row group
//! and the footer when the file closes. The sink closes every open file at each checkpoint
//! barrier (a bulk format cannot be resumed half-written, as in Flink's bulk-encoded file
//! sink) and makes it visible when the checkpoint completes: a reader sees whole files of
//! committed rows only, and a restored job rewrites what the failed one had not committed.
//!
//! Columns are flat and of the scalar types a lake table holds ([`ColumnType`]): the logical
//! types any Parquet reader (DuckDB, Spark, pyarrow, Trino) reads back as the same SQL types.
//!
//! ```no_run
//! use riffle::StreamEnv;
//! use riffle_parquet::{Cell, Column, ColumnType, ParquetFormat};
//!
//! # fn main() -> riffle::Result<()> {
//! let env = StreamEnv::new();
//! let counts = env.from_iter(vec![("alice".to_string(), 3i64), ("bob".to_string(), 5)]);
//! let format = ParquetFormat::new(
//!     vec![
//!         Column::new("user", ColumnType::String),
//!         Column::new("clicks", ColumnType::Int64).required(),
//!     ],
//!     |(user, clicks): &(String, i64), row| {
//!         row.push(Cell::Str(user))?;
//!         row.push(Cell::Int(*clicks))
//!     },
//! )?;
//! counts.sink(format.sink("/tmp/counts", |_| String::new()));
//! env.execute()?;
//! # Ok(())
//! # }
//! ```

use std::fs::File;
use std::sync::Arc;

use parquet::basic::{LogicalType, Repetition, TimeUnit, Type as PhysicalType};
use parquet::column::writer::ColumnWriter;
use parquet::data_type::{ByteArray, FixedLenByteArray};
use parquet::file::properties::{WriterProperties, WriterPropertiesPtr};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::{Type, TypePtr};
use riffle::sink::partitioned::{PartWriter, PartitionedFileSink};
use riffle::{Error, Result};

/// The type of a column, as Parquet's logical type on its physical one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// `BOOLEAN`.
    Boolean,
    /// 8-bit signed integer (`INT32` annotated `INT(8, true)`).
    Int8,
    /// 16-bit signed integer (`INT32` annotated `INT(16, true)`).
    Int16,
    /// 32-bit signed integer.
    Int32,
    /// 64-bit signed integer.
    Int64,
    /// 32-bit float.
    Float,
    /// 64-bit float.
    Double,
    /// UTF-8 text (`BYTE_ARRAY` annotated `STRING`).
    String,
    /// Bytes.
    Binary,
    /// Days since 1970-01-01 (`INT32` annotated `DATE`).
    Date,
    /// Milliseconds since the epoch (`INT64` annotated `TIMESTAMP(MILLIS, utc)`): `utc` for an
    /// instant (Flink's `TIMESTAMP_LTZ`), not for a local date and time (`TIMESTAMP`).
    TimestampMillis {
        /// Whether the value is an instant (adjusted to UTC).
        utc: bool,
    },
    /// Microseconds since the epoch (`INT64` annotated `TIMESTAMP(MICROS, utc)`): Delta Lake's
    /// and Spark's timestamps.
    TimestampMicros {
        /// Whether the value is an instant (adjusted to UTC).
        utc: bool,
    },
    /// An exact decimal of `precision` digits, `scale` after the point, given as its unscaled
    /// integer (`INT32` up to 9 digits, `INT64` up to 18, a 16-byte `FIXED_LEN_BYTE_ARRAY` up
    /// to 38).
    Decimal {
        /// Total digits, 1 to 38.
        precision: u8,
        /// Digits after the point, at most `precision`.
        scale: u8,
    },
}

/// One column of a Parquet file: a name, a type, and whether it may hold nulls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    name: String,
    ty: ColumnType,
    nullable: bool,
}

impl Column {
    /// A nullable column (Parquet's `OPTIONAL`).
    pub fn new(name: impl Into<String>, ty: ColumnType) -> Self {
        Column {
            name: name.into(),
            ty,
            nullable: true,
        }
    }

    /// The column never holds nulls (Parquet's `REQUIRED`): a null is an error naming it.
    pub fn required(mut self) -> Self {
        self.nullable = false;
        self
    }

    /// The column's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The column's type.
    pub fn ty(&self) -> ColumnType {
        self.ty
    }

    /// Whether the column may hold nulls.
    pub fn is_nullable(&self) -> bool {
        self.nullable
    }

    fn parquet_type(&self) -> Result<TypePtr> {
        let repetition = match self.nullable {
            true => Repetition::OPTIONAL,
            false => Repetition::REQUIRED,
        };
        let (physical, logical) = match self.ty {
            ColumnType::Boolean => (PhysicalType::BOOLEAN, None),
            ColumnType::Int8 => (PhysicalType::INT32, Some(LogicalType::integer(8, true))),
            ColumnType::Int16 => (PhysicalType::INT32, Some(LogicalType::integer(16, true))),
            ColumnType::Int32 => (PhysicalType::INT32, None),
            ColumnType::Int64 => (PhysicalType::INT64, None),
            ColumnType::Float => (PhysicalType::FLOAT, None),
            ColumnType::Double => (PhysicalType::DOUBLE, None),
            ColumnType::String => (PhysicalType::BYTE_ARRAY, Some(LogicalType::String)),
            ColumnType::Binary => (PhysicalType::BYTE_ARRAY, None),
            ColumnType::Date => (PhysicalType::INT32, Some(LogicalType::Date)),
            ColumnType::TimestampMillis { utc } => (
                PhysicalType::INT64,
                Some(LogicalType::timestamp(utc, TimeUnit::MILLIS)),
            ),
            ColumnType::TimestampMicros { utc } => (
                PhysicalType::INT64,
                Some(LogicalType::timestamp(utc, TimeUnit::MICROS)),
            ),
            ColumnType::Decimal { precision, scale } => {
                if precision == 0 || precision > 38 || scale > precision {
                    return Err(Error::config(
                        "columns",
                        format!(
                            "column `{}`: DECIMAL({precision}, {scale}) is not a decimal Parquet holds (precision 1 to 38, scale at most the precision)",
                            self.name
                        ),
                    ));
                }
                let physical = decimal_physical(precision);
                let mut builder = Type::primitive_type_builder(&self.name, physical)
                    .with_repetition(repetition)
                    .with_logical_type(Some(LogicalType::decimal(scale.into(), precision.into())))
                    .with_precision(precision.into())
                    .with_scale(scale.into());
                if physical == PhysicalType::FIXED_LEN_BYTE_ARRAY {
                    builder = builder.with_length(16);
                }
                return builder
                    .build()
                    .map(Arc::new)
                    .map_err(|e| schema_error(self, e));
            }
        };
        Type::primitive_type_builder(&self.name, physical)
            .with_repetition(repetition)
            .with_logical_type(logical)
            .build()
            .map(Arc::new)
            .map_err(|e| schema_error(self, e))
    }
}

fn schema_error(column: &Column, e: parquet::errors::ParquetError) -> Error {
    Error::config(
        "columns",
        format!("column `{}` is not a Parquet column: {e}", column.name),
    )
}

fn decimal_physical(precision: u8) -> PhysicalType {
    match precision {
        0..=9 => PhysicalType::INT32,
        10..=18 => PhysicalType::INT64,
        _ => PhysicalType::FIXED_LEN_BYTE_ARRAY,
    }
}

/// A value for the next column of a row ([`RowWriter::push`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cell<'a> {
    /// No value (the column must be nullable).
    Null,
    /// A `BOOLEAN`.
    Bool(bool),
    /// An integer column, a `DATE` (days) or a timestamp (in the column's unit); checked against the
    /// column's range. A float column takes it too (a decimal column does not: give it
    /// [`Cell::Decimal`]).
    Int(i64),
    /// A `FLOAT` or `DOUBLE`.
    Float(f64),
    /// A `STRING` (or `BINARY`) column.
    Str(&'a str),
    /// A `BINARY` column.
    Bytes(&'a [u8]),
    /// A `DECIMAL`, as its unscaled integer at the column's scale.
    Decimal(i128),
}

/// How a record fills a row: a [`Cell`] for each column, in order.
pub type RowFn<T> = Arc<dyn Fn(&T, &mut RowWriter<'_>) -> Result<()> + Send + Sync>;

/// Compression of the column chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// None.
    Uncompressed,
    /// Snappy (the default, as Flink's and Spark's Parquet writers).
    #[default]
    Snappy,
    /// Zstandard at its default level.
    Zstd,
}

impl std::str::FromStr for Compression {
    type Err = String;

    /// `uncompressed` (or `none`), `snappy`, `zstd`, in any case.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "uncompressed" | "none" => Ok(Compression::Uncompressed),
            "snappy" => Ok(Compression::Snappy),
            "zstd" => Ok(Compression::Zstd),
            _ => Err(format!(
                "'{s}' is not a Parquet compression Riffle writes (uncompressed, snappy, zstd)"
            )),
        }
    }
}

/// A Parquet file layout for records of type `T`: its columns and how a record fills a row.
/// [`sink`](Self::sink) makes an exactly-once partitioned file sink of it; see the
/// [crate documentation](crate).
pub struct ParquetFormat<T> {
    columns: Arc<[Column]>,
    schema: TypePtr,
    row: RowFn<T>,
    compression: Compression,
    row_group_bytes: usize,
}

impl<T> Clone for ParquetFormat<T> {
    fn clone(&self) -> Self {
        ParquetFormat {
            columns: self.columns.clone(),
            schema: self.schema.clone(),
            row: self.row.clone(),
            compression: self.compression,
            row_group_bytes: self.row_group_bytes,
        }
    }
}

impl<T: 'static> ParquetFormat<T> {
    /// A layout of `columns` (distinct, non-empty names; decimals of 1 to 38 digits), each
    /// record's row written by `row`, which pushes one [`Cell`] per column in order.
    pub fn new(
        columns: Vec<Column>,
        row: impl Fn(&T, &mut RowWriter<'_>) -> Result<()> + Send + Sync + 'static,
    ) -> Result<Self> {
        if columns.is_empty() {
            return Err(Error::config("columns", "a Parquet file needs a column"));
        }
        let mut fields = Vec::with_capacity(columns.len());
        for (i, column) in columns.iter().enumerate() {
            if column.name.is_empty() {
                return Err(Error::config(
                    "columns",
                    format!("column {} has no name", i + 1),
                ));
            }
            if columns[..i].iter().any(|c| c.name == column.name) {
                return Err(Error::config(
                    "columns",
                    format!("two columns are named `{}`", column.name),
                ));
            }
            fields.push(column.parquet_type()?);
        }
        let schema = Type::group_type_builder("riffle")
            .with_fields(fields)
            .build()
            .map_err(|e| Error::config("columns", format!("not a Parquet schema: {e}")))?;
        Ok(ParquetFormat {
            columns: columns.into(),
            schema: Arc::new(schema),
            row: Arc::new(row),
            compression: Compression::default(),
            row_group_bytes: 64 << 20,
        })
    }

    /// The compression of column chunks (Snappy unless set).
    pub fn compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    /// Buffered values past this many bytes (64 MiB unless set) are written as a row group.
    /// A part file's memory while it is open is about this much.
    pub fn row_group_bytes(mut self, bytes: usize) -> Self {
        self.row_group_bytes = bytes.max(1);
        self
    }

    /// The columns.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// Opens a writer of this layout over `file` (a new, empty part file).
    pub fn writer(&self, file: File) -> Result<ParquetPartWriter<T>> {
        let compression = match self.compression {
            Compression::Uncompressed => parquet::basic::Compression::UNCOMPRESSED,
            Compression::Snappy => parquet::basic::Compression::SNAPPY,
            Compression::Zstd => parquet::basic::Compression::ZSTD(Default::default()),
        };
        let properties: WriterPropertiesPtr = Arc::new(
            WriterProperties::builder()
                .set_compression(compression)
                .set_created_by(format!("riffle version {}", env!("CARGO_PKG_VERSION")))
                .build(),
        );
        let writer = SerializedFileWriter::new(file, self.schema.clone(), properties)
            .map_err(|e| parquet_error("cannot start a Parquet file", e))?;
        Ok(ParquetPartWriter {
            writer,
            columns: self.columns.clone(),
            buffers: self.columns.iter().map(|c| Buffer::new(c.ty)).collect(),
            marks: vec![(0, 0); self.columns.len()],
            row: self.row.clone(),
            rows: 0,
            buffered_bytes: 0,
            row_group_bytes: self.row_group_bytes,
        })
    }

    /// An exactly-once sink writing Parquet part files (`.parquet`) into `dir`, each record
    /// into the directory `partition(record)` names below it (`""`: `dir` itself); see
    /// [`PartitionedFileSink`] for when files roll and become visible.
    pub fn sink(
        self,
        dir: impl Into<std::path::PathBuf>,
        partition: impl Fn(&T) -> String + Send + Sync + 'static,
    ) -> PartitionedFileSink<T> {
        PartitionedFileSink::with_format(dir, partition, move |file| {
            Ok(Box::new(self.writer(file)?) as Box<dyn PartWriter<T>>)
        })
        .extension("parquet")
    }
}

fn parquet_error(context: &str, e: parquet::errors::ParquetError) -> Error {
    match e {
        parquet::errors::ParquetError::External(e) => match e.downcast::<std::io::Error>() {
            Ok(io) => Error::io(context, *io),
            Err(e) => Error::user(format!("{context}: {e}")),
        },
        e => Error::user(format!("{context}: {e}")),
    }
}

/// One column's buffered values of the row group being filled, and its definition levels
/// (1: a value, 0: null) when the column is nullable.
struct Buffer {
    values: Values,
    defs: Vec<i16>,
}

enum Values {
    Bool(Vec<bool>),
    Int32(Vec<i32>),
    Int64(Vec<i64>),
    Float(Vec<f32>),
    Double(Vec<f64>),
    /// Every value's bytes one after another, and where each ends: one allocation per row
    /// group, sliced into the writer's values when it is written.
    Bytes {
        data: Vec<u8>,
        ends: Vec<usize>,
    },
    Fixed(Vec<FixedLenByteArray>),
}

impl Values {
    fn len(&self) -> usize {
        match self {
            Values::Bool(v) => v.len(),
            Values::Int32(v) => v.len(),
            Values::Int64(v) => v.len(),
            Values::Float(v) => v.len(),
            Values::Double(v) => v.len(),
            Values::Bytes { ends, .. } => ends.len(),
            Values::Fixed(v) => v.len(),
        }
    }

    fn truncate(&mut self, len: usize) {
        match self {
            Values::Bool(v) => v.truncate(len),
            Values::Int32(v) => v.truncate(len),
            Values::Int64(v) => v.truncate(len),
            Values::Float(v) => v.truncate(len),
            Values::Double(v) => v.truncate(len),
            Values::Bytes { data, ends } => {
                ends.truncate(len);
                data.truncate(ends.last().copied().unwrap_or(0));
            }
            Values::Fixed(v) => v.truncate(len),
        }
    }

    fn clear(&mut self) {
        self.truncate(0);
    }
}

impl Buffer {
    fn new(ty: ColumnType) -> Self {
        let values = match ty {
            ColumnType::Boolean => Values::Bool(Vec::new()),
            ColumnType::Int8 | ColumnType::Int16 | ColumnType::Int32 | ColumnType::Date => {
                Values::Int32(Vec::new())
            }
            ColumnType::Int64
            | ColumnType::TimestampMillis { .. }
            | ColumnType::TimestampMicros { .. } => Values::Int64(Vec::new()),
            ColumnType::Float => Values::Float(Vec::new()),
            ColumnType::Double => Values::Double(Vec::new()),
            ColumnType::String | ColumnType::Binary => Values::Bytes {
                data: Vec::new(),
                ends: Vec::new(),
            },
            ColumnType::Decimal { precision, .. } => match decimal_physical(precision) {
                PhysicalType::INT32 => Values::Int32(Vec::new()),
                PhysicalType::INT64 => Values::Int64(Vec::new()),
                _ => Values::Fixed(Vec::new()),
            },
        };
        Buffer {
            values,
            defs: Vec::new(),
        }
    }
}

/// The row a record fills: [`push`](Self::push) a [`Cell`] for each column, in order.
pub struct RowWriter<'a> {
    columns: &'a [Column],
    buffers: &'a mut [Buffer],
    next: usize,
    bytes: usize,
}

impl RowWriter<'_> {
    /// Adds the next column's value: an error (naming the column) when it is not of the
    /// column's type, out of its range, null in a required column, or past the last column.
    pub fn push(&mut self, cell: Cell<'_>) -> Result<()> {
        let Some(column) = self.columns.get(self.next) else {
            return Err(Error::user(format!(
                "a Parquet row has {} columns; a value was pushed past the last",
                self.columns.len()
            )));
        };
        let buffer = &mut self.buffers[self.next];
        let mismatch = || {
            Error::user(format!(
                "column `{}` ({:?}) cannot hold {cell:?}",
                column.name, column.ty
            ))
        };
        if let Cell::Null = cell {
            if !column.nullable {
                return Err(Error::user(format!(
                    "column `{}` is required (not null) but the row has no value for it",
                    column.name
                )));
            }
            buffer.defs.push(0);
            self.next += 1;
            self.bytes += 2;
            return Ok(());
        }
        let bytes = match (&mut buffer.values, column.ty, cell) {
            (Values::Bool(v), ColumnType::Boolean, Cell::Bool(b)) => {
                v.push(b);
                1
            }
            (Values::Int32(v), ColumnType::Decimal { precision, .. }, Cell::Decimal(_))
                if fits_decimal(cell, precision) =>
            {
                v.push(decimal_unscaled(cell) as i32);
                4
            }
            (Values::Int64(v), ColumnType::Decimal { precision, .. }, Cell::Decimal(_))
                if fits_decimal(cell, precision) =>
            {
                v.push(decimal_unscaled(cell) as i64);
                8
            }
            (Values::Fixed(v), ColumnType::Decimal { precision, .. }, Cell::Decimal(_))
                if fits_decimal(cell, precision) =>
            {
                let bytes = decimal_unscaled(cell).to_be_bytes().to_vec();
                v.push(FixedLenByteArray::from(ByteArray::from(bytes)));
                16
            }
            (Values::Int32(v), ty, Cell::Int(i)) if !matches!(ty, ColumnType::Decimal { .. }) => {
                let (min, max) = match ty {
                    ColumnType::Int8 => (i8::MIN as i64, i8::MAX as i64),
                    ColumnType::Int16 => (i16::MIN as i64, i16::MAX as i64),
                    _ => (i32::MIN as i64, i32::MAX as i64),
                };
                if i < min || i > max {
                    return Err(Error::user(format!(
                        "column `{}` ({ty:?}) cannot hold {i}: out of its range",
                        column.name
                    )));
                }
                v.push(i as i32);
                4
            }
            (Values::Int64(v), ty, Cell::Int(i)) if !matches!(ty, ColumnType::Decimal { .. }) => {
                v.push(i);
                8
            }
            (Values::Float(v), _, Cell::Float(f)) => {
                v.push(f as f32);
                4
            }
            (Values::Float(v), _, Cell::Int(i)) => {
                v.push(i as f32);
                4
            }
            (Values::Double(v), _, Cell::Float(f)) => {
                v.push(f);
                8
            }
            (Values::Double(v), _, Cell::Int(i)) => {
                v.push(i as f64);
                8
            }
            (
                Values::Bytes { data, ends },
                ColumnType::String | ColumnType::Binary,
                Cell::Str(s),
            ) => {
                data.extend_from_slice(s.as_bytes());
                ends.push(data.len());
                s.len() + 4
            }
            (Values::Bytes { data, ends }, ColumnType::Binary, Cell::Bytes(b)) => {
                data.extend_from_slice(b);
                ends.push(data.len());
                b.len() + 4
            }
            (_, ColumnType::Decimal { precision, scale }, Cell::Decimal(_)) => {
                return Err(Error::user(format!(
                    "column `{}` (DECIMAL({precision}, {scale})) cannot hold the unscaled value {}: more than {precision} digits",
                    column.name,
                    decimal_unscaled(cell)
                )));
            }
            _ => return Err(mismatch()),
        };
        if column.nullable {
            buffer.defs.push(1);
        }
        self.next += 1;
        self.bytes += bytes;
        Ok(())
    }
}

fn decimal_unscaled(cell: Cell<'_>) -> i128 {
    match cell {
        Cell::Decimal(d) => d,
        _ => 0,
    }
}

/// Whether the unscaled `cell` has at most `precision` digits.
fn fits_decimal(cell: Cell<'_>, precision: u8) -> bool {
    decimal_unscaled(cell).unsigned_abs() < 10u128.pow(precision.into())
}

/// The [`PartWriter`] of one Parquet part file: rows buffered column by column, a row group
/// written past [`ParquetFormat::row_group_bytes`], the rest and the footer at
/// [`finish`](PartWriter::finish).
pub struct ParquetPartWriter<T> {
    writer: SerializedFileWriter<File>,
    columns: Arc<[Column]>,
    buffers: Vec<Buffer>,
    /// Each buffer's value and level counts before the row being written (to take back a row
    /// that failed half-way).
    marks: Vec<(usize, usize)>,
    row: RowFn<T>,
    rows: usize,
    buffered_bytes: usize,
    row_group_bytes: usize,
}

impl<T> ParquetPartWriter<T> {
    /// Writes the buffered rows as a row group.
    fn flush_row_group(&mut self) -> Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let context = "cannot write a Parquet row group";
        let mut group = self
            .writer
            .next_row_group()
            .map_err(|e| parquet_error(context, e))?;
        for (buffer, column) in self.buffers.iter_mut().zip(self.columns.iter()) {
            let mut writer = group
                .next_column()
                .map_err(|e| parquet_error(context, e))?
                .expect("a column writer for each column of the schema");
            let defs = column.nullable.then_some(buffer.defs.as_slice());
            let written = match (writer.untyped(), &mut buffer.values) {
                (ColumnWriter::BoolColumnWriter(w), Values::Bool(v)) => {
                    w.write_batch(v, defs, None)
                }
                (ColumnWriter::Int32ColumnWriter(w), Values::Int32(v)) => {
                    w.write_batch(v, defs, None)
                }
                (ColumnWriter::Int64ColumnWriter(w), Values::Int64(v)) => {
                    w.write_batch(v, defs, None)
                }
                (ColumnWriter::FloatColumnWriter(w), Values::Float(v)) => {
                    w.write_batch(v, defs, None)
                }
                (ColumnWriter::DoubleColumnWriter(w), Values::Double(v)) => {
                    w.write_batch(v, defs, None)
                }
                (ColumnWriter::ByteArrayColumnWriter(w), Values::Bytes { data, ends }) => {
                    let data = bytes::Bytes::from(std::mem::take(data));
                    let mut start = 0;
                    let values: Vec<ByteArray> = ends
                        .iter()
                        .map(|&end| {
                            let value = ByteArray::from(data.slice(start..end));
                            start = end;
                            value
                        })
                        .collect();
                    w.write_batch(&values, defs, None)
                }
                (ColumnWriter::FixedLenByteArrayColumnWriter(w), Values::Fixed(v)) => {
                    w.write_batch(v, defs, None)
                }
                _ => unreachable!("each column's buffer is of its physical type"),
            };
            written.map_err(|e| parquet_error(context, e))?;
            writer.close().map_err(|e| parquet_error(context, e))?;
            buffer.values.clear();
            buffer.defs.clear();
        }
        group.close().map_err(|e| parquet_error(context, e))?;
        self.rows = 0;
        self.buffered_bytes = 0;
        Ok(())
    }
}

impl<T: 'static> PartWriter<T> for ParquetPartWriter<T> {
    fn write(&mut self, value: &T) -> Result<()> {
        for (mark, buffer) in self.marks.iter_mut().zip(&self.buffers) {
            *mark = (buffer.values.len(), buffer.defs.len());
        }
        let mut row = RowWriter {
            columns: &self.columns,
            buffers: &mut self.buffers,
            next: 0,
            bytes: 0,
        };
        let result = (self.row)(value, &mut row).and_then(|()| match row.next {
            n if n == self.columns.len() => Ok(row.bytes),
            n => Err(Error::user(format!(
                "a Parquet row has {} columns; the record gave {n} values",
                self.columns.len()
            ))),
        });
        match result {
            Ok(bytes) => {
                self.rows += 1;
                self.buffered_bytes += bytes;
                if self.buffered_bytes >= self.row_group_bytes {
                    self.flush_row_group()?;
                }
                Ok(())
            }
            Err(e) => {
                // The row is not written at all: take back its first columns.
                for ((values, defs), buffer) in self.marks.iter().zip(&mut self.buffers) {
                    buffer.values.truncate(*values);
                    buffer.defs.truncate(*defs);
                }
                Err(e)
            }
        }
    }

    fn bytes(&self) -> u64 {
        (self.writer.bytes_written() + self.buffered_bytes) as u64
    }

    fn finish(mut self: Box<Self>) -> Result<File> {
        self.flush_row_group()?;
        self.writer
            .into_inner()
            .map_err(|e| parquet_error("cannot write a Parquet footer", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_checked_against_their_precision() {
        assert!(fits_decimal(Cell::Decimal(99_999), 5));
        assert!(!fits_decimal(Cell::Decimal(100_000), 5));
        assert!(fits_decimal(Cell::Decimal(-99_999), 5));
        assert!(fits_decimal(Cell::Decimal(i128::MAX / 10), 38));
        assert!(!fits_decimal(Cell::Decimal(i128::MIN), 38));
    }

    #[test]
    fn bad_layouts_fail_naming_the_column() {
        let bad = |columns| match ParquetFormat::<i64>::new(columns, |_, _| Ok(())) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted"),
        };
        assert!(bad(vec![]).contains("needs a column"));
        let e = bad(vec![
            Column::new("a", ColumnType::Int64),
            Column::new("a", ColumnType::String),
        ]);
        assert!(e.contains("two columns are named `a`"), "{e}");
        let e = bad(vec![Column::new(
            "price",
            ColumnType::Decimal {
                precision: 39,
                scale: 2,
            },
        )]);
        assert!(
            e.contains("column `price`") && e.contains("DECIMAL(39, 2)"),
            "{e}"
        );
    }

    #[test]
    fn compression_names_parse() {
        assert_eq!("ZSTD".parse(), Ok(Compression::Zstd));
        assert_eq!("none".parse(), Ok(Compression::Uncompressed));
        assert!("lzo".parse::<Compression>().unwrap_err().contains("lzo"));
    }
}

//! The `datagen` connector, as Flink's (https://nightlies.apache.org/flink/flink-docs-stable/docs/connectors/table/datagen/):
//! rows of random or sequential values by the table's columns, for trying a query without data.
//!
//! ```sql
//! CREATE TABLE orders (
//!     id BIGINT, user_id INT, amount DECIMAL(10, 2), note STRING, ts TIMESTAMP(3),
//!     WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
//! ) WITH (
//!     'connector' = 'datagen',
//!     'rows-per-second' = '100',                    -- default 10000
//!     'number-of-rows' = '1000',                    -- default: unbounded
//!     'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '1000',
//!     'fields.user_id.min' = '1', 'fields.user_id.max' = '50',
//!     'fields.note.length' = '8', 'fields.note.null-rate' = '0.1',
//!     'fields.ts.max-past' = '5000'
//! );
//! ```
//!
//! - `random` (the default kind): numbers uniform in `[min, max]` (default: the type's range;
//!   a `DECIMAL`'s digits), strings of `length` hexadecimal characters (default 100), booleans,
//!   times up to `max-past` milliseconds before now (default 0: now), dates likewise, arrays of
//!   `length` random elements (default 3), nested rows of random fields; `null-rate` of them
//!   `NULL` (default 0).
//! - `sequence`: `start`, `start + 1`, ... `end` (numbers, and strings of those numbers); the
//!   source ends when a sequence does (or at `number-of-rows`, whichever is first).
//!
//! Values are a function of the row's number (reproducible run to run), times of the clock.
//! An option Riffle does not know, or a value it cannot read, fails at `CREATE TABLE`'s first
//! use naming the option.

use std::collections::BTreeMap;

use riffle::source::datagen::{Generator, mix, unit};

use crate::error::{Result, SqlError};
use crate::parse::TableDef;
use crate::types::{DataType, Field, Row, Schema, Value};

/// Rows per second when the table does not say (Flink's default).
const DEFAULT_ROWS_PER_SECOND: f64 = 10_000.0;

/// A table's `datagen` settings: the generator, how many rows, how fast.
pub(crate) struct Datagen {
    pub(crate) generator: RowGenerator,
    pub(crate) rows: Option<u64>,
    pub(crate) rows_per_second: f64,
}

/// Makes the rows of a `datagen` table.
pub(crate) struct RowGenerator {
    name: String,
    fields: Vec<FieldGen>,
}

/// How one column's values are made.
enum FieldGen {
    Random {
        ty: DataType,
        min: Option<f64>,
        max: Option<f64>,
        length: Option<usize>,
        max_past: i64,
        null_rate: f64,
    },
    Sequence {
        ty: DataType,
        start: i64,
        end: i64,
    },
}

/// The settings of `table` for the columns of `schema`.
pub(crate) fn settings(table: &TableDef, schema: &Schema) -> Result<Datagen> {
    let fail = |message: String| SqlError::plan(format!("table `{}`: {message}", table.name));
    let mut per_field: BTreeMap<&str, BTreeMap<&str, &str>> = BTreeMap::new();
    let mut rows = None;
    let mut rows_per_second = DEFAULT_ROWS_PER_SECOND;
    for (key, value) in &table.options {
        let value = value.as_str();
        match key.as_str() {
            "connector" => {}
            "rows-per-second" => {
                rows_per_second = value
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|r| *r > 0.0 && r.is_finite())
                    .ok_or_else(|| {
                        fail(format!(
                            "'rows-per-second' = '{value}' is not a positive number"
                        ))
                    })?;
            }
            "number-of-rows" => {
                rows = Some(value.trim().parse::<u64>().map_err(|_| {
                    fail(format!(
                        "'number-of-rows' = '{value}' is not a count of rows"
                    ))
                })?);
            }
            other => {
                let Some(rest) = other.strip_prefix("fields.") else {
                    return Err(fail(format!(
                        "the datagen connector has no option '{other}' (options: rows-per-second, number-of-rows, fields.<column>.<kind|min|max|length|max-past|null-rate|start|end>)"
                    )));
                };
                let Some((column, option)) = rest.rsplit_once('.') else {
                    return Err(fail(format!("'{other}': fields.<column>.<option>")));
                };
                if !schema.fields.iter().any(|f| f.name == column) {
                    return Err(fail(format!(
                        "'{other}': the table has no column `{column}`"
                    )));
                }
                per_field.entry(column).or_default().insert(option, value);
            }
        }
    }
    let mut fields = Vec::new();
    for field in &schema.fields {
        let options = per_field.remove(field.name.as_str()).unwrap_or_default();
        let generator = field_gen(field, &options)
            .map_err(|m| fail(format!("column `{}`: {m}", field.name)))?;
        if let FieldGen::Sequence { start, end, .. } = &generator {
            let length = (i128::from(*end) - i128::from(*start) + 1).min(u64::MAX.into()) as u64;
            rows = Some(rows.map_or(length, |r: u64| r.min(length)));
        }
        fields.push(generator);
    }
    Ok(Datagen {
        generator: RowGenerator {
            name: table.name.clone(),
            fields,
        },
        rows,
        rows_per_second,
    })
}

fn number(options: &BTreeMap<&str, &str>, key: &str) -> std::result::Result<Option<f64>, String> {
    options
        .get(key)
        .map(|v| {
            v.trim()
                .parse::<f64>()
                .ok()
                .filter(|n| n.is_finite())
                .ok_or_else(|| format!("'{key}' = '{v}' is not a number"))
        })
        .transpose()
}

fn field_gen(
    field: &Field,
    options: &BTreeMap<&str, &str>,
) -> std::result::Result<FieldGen, String> {
    let known = [
        "kind",
        "min",
        "max",
        "length",
        "max-past",
        "null-rate",
        "start",
        "end",
    ];
    if let Some(unknown) = options.keys().find(|k| !known.contains(k)) {
        return Err(format!(
            "no option '{unknown}' (options: {})",
            known.join(", ")
        ));
    }
    let ty = field.ty.clone();
    match options.get("kind").copied().unwrap_or("random") {
        "sequence" => {
            let whole = |key: &str| -> std::result::Result<Option<i64>, String> {
                options
                    .get(key)
                    .map(|v| {
                        v.trim()
                            .parse::<i64>()
                            .map_err(|_| format!("'{key}' = '{v}' is not a whole number"))
                    })
                    .transpose()
            };
            let (Some(start), Some(end)) = (whole("start")?, whole("end")?) else {
                return Err("a sequence needs 'start' and 'end'".into());
            };
            if !(ty.is_integer() || matches!(ty, DataType::Varchar | DataType::Decimal { .. })) {
                return Err(format!(
                    "a sequence of {ty} values is not supported (numbers and strings)"
                ));
            }
            if end < start {
                return Err(format!("a sequence from {start} to {end}: start <= end"));
            }
            Ok(FieldGen::Sequence { ty, start, end })
        }
        "random" => {
            let (min, max) = (number(options, "min")?, number(options, "max")?);
            if let (Some(a), Some(b)) = (min, max)
                && a > b
            {
                return Err(format!("'min' = {a} is above 'max' = {b}"));
            }
            let length = number(options, "length")?
                .map(|l| {
                    (l >= 0.0 && l.fract() == 0.0)
                        .then_some(l as usize)
                        .ok_or_else(|| format!("'length' = {l} is not a length"))
                })
                .transpose()?;
            let max_past = number(options, "max-past")?.unwrap_or(0.0);
            if max_past < 0.0 {
                return Err("'max-past' must not be negative".into());
            }
            let null_rate = number(options, "null-rate")?.unwrap_or(0.0);
            if !(0.0..=1.0).contains(&null_rate) {
                return Err(format!("'null-rate' = {null_rate} is not between 0 and 1"));
            }
            if matches!(ty, DataType::Map { .. } | DataType::Interval) {
                return Err(format!("random {ty} values are not supported"));
            }
            Ok(FieldGen::Random {
                ty,
                min,
                max,
                length,
                max_past: max_past as i64,
                null_rate,
            })
        }
        other => Err(format!("'kind' = '{other}': random or sequence")),
    }
}

impl Generator for RowGenerator {
    type Item = Row;

    fn generate(&self, index: u64) -> Row {
        let now = riffle::time::Clock::now(&riffle::time::SystemClock);
        Row(self
            .fields
            .iter()
            .enumerate()
            .map(|(i, field)| field.value(index, i as u64 + 1, now))
            .collect())
    }

    fn name(&self) -> String {
        self.name.clone()
    }
}

/// The seed of the generator's random streams.
const SEED: u64 = 0x5eed_da7a;

impl FieldGen {
    fn value(&self, index: u64, stream: u64, now: i64) -> Value {
        match self {
            FieldGen::Sequence { ty, start, .. } => {
                // In range: the source ends after `end - start + 1` rows.
                let n = start.wrapping_add(index as i64);
                match ty {
                    DataType::Varchar => Value::string(n.to_string()),
                    DataType::Decimal { scale, .. } => crate::expr::parse_decimal(&n.to_string())
                        .and_then(|d| d.rescale(*scale))
                        .map_or(Value::Null, Value::Decimal),
                    _ => Value::Int(n),
                }
            }
            FieldGen::Random {
                ty,
                min,
                max,
                length,
                max_past,
                null_rate,
            } => {
                if *null_rate > 0.0 && unit(mix(SEED, index, stream << 8)) < *null_rate {
                    return Value::Null;
                }
                let settings = Settings {
                    min: *min,
                    max: *max,
                    length: *length,
                    max_past: *max_past,
                    now,
                };
                random(ty, &settings, index, stream)
            }
        }
    }
}

/// What a random value draws from.
struct Settings {
    min: Option<f64>,
    max: Option<f64>,
    length: Option<usize>,
    max_past: i64,
    now: i64,
}

/// The range of an integer type.
fn integer_range(ty: &DataType) -> (i64, i64) {
    match ty {
        DataType::TinyInt => (i8::MIN.into(), i8::MAX.into()),
        DataType::SmallInt => (i16::MIN.into(), i16::MAX.into()),
        DataType::Int => (i32::MIN.into(), i32::MAX.into()),
        _ => (i64::MIN, i64::MAX),
    }
}

fn random(ty: &DataType, s: &Settings, index: u64, stream: u64) -> Value {
    let bits = mix(SEED, index, stream);
    match ty {
        DataType::Boolean => Value::Bool(bits & 1 == 1),
        t if t.is_integer() => {
            let (low, high) = integer_range(t);
            // Bounds outside the type's range are the range's ends.
            let clamp = |m: f64| m.clamp(low as f64, high as f64) as i64;
            let lo = s.min.map_or(low, |m| clamp(m.ceil()));
            let hi = s.max.map_or(high, |m| clamp(m.floor()));
            if lo >= hi {
                return Value::Int(lo);
            }
            let span = (hi as i128 - lo as i128 + 1) as u128;
            Value::Int((lo as i128 + (u128::from(bits) % span) as i128) as i64)
        }
        DataType::Double | DataType::Float => {
            let (lo, hi) = (
                s.min.unwrap_or(f64::from(f32::MIN)),
                s.max.unwrap_or(f64::from(f32::MAX)),
            );
            Value::Double(lo + unit(bits) * (hi - lo))
        }
        DataType::Decimal { precision, scale } => {
            let limit = 10f64.powi(i32::from(*precision) - i32::from(*scale))
                - 10f64.powi(-i32::from(*scale));
            let (lo, hi) = (s.min.unwrap_or(-limit), s.max.unwrap_or(limit));
            let value = lo + unit(bits) * (hi - lo);
            crate::expr::parse_decimal(&format!("{value:.*}", usize::from(*scale)))
                .and_then(|d| d.rescale(*scale))
                .map_or(Value::Null, Value::Decimal)
        }
        DataType::Varchar => {
            let length = s.length.unwrap_or(100);
            let mut text = String::with_capacity(length);
            for chunk in 0..length.div_ceil(16) {
                let word = mix(SEED, index, (stream << 16) + chunk as u64);
                text.push_str(&format!("{word:016x}"));
            }
            text.truncate(length);
            Value::string(text)
        }
        t if t.is_timestamp() => Value::Timestamp(s.now - past(bits, s.max_past)),
        DataType::Date => {
            Value::Date(((s.now - past(bits, s.max_past)).div_euclid(86_400_000)) as i32)
        }
        DataType::Array(element) => Value::Array(
            (0..s.length.unwrap_or(3))
                .map(|i| {
                    let inner = Settings { length: None, ..*s };
                    random(element, &inner, index, (stream << 8) + i as u64 + 1)
                })
                .collect(),
        ),
        DataType::Row(fields) => Value::Row(
            fields
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let inner = Settings {
                        min: None,
                        max: None,
                        length: None,
                        ..*s
                    };
                    random(&f.ty, &inner, index, (stream << 8) + i as u64 + 1)
                })
                .collect(),
        ),
        _ => Value::Null,
    }
}

/// Up to `max_past` milliseconds.
fn past(bits: u64, max_past: i64) -> i64 {
    if max_past <= 0 {
        0
    } else {
        (bits % (max_past as u64 + 1)) as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(columns: &str, options: &str) -> (TableDef, Schema) {
        let sql = format!("CREATE TABLE t ({columns}) WITH ('connector' = 'datagen'{options})");
        let crate::parse::Statement::CreateTable(table) =
            crate::parse::parse_statement(&sql).unwrap()
        else {
            panic!("a table");
        };
        let fields = table
            .columns
            .iter()
            .filter_map(|c| match c {
                crate::parse::ColumnDef::Physical(field) => Some(field.clone()),
                crate::parse::ColumnDef::Computed { .. } => None,
            })
            .collect();
        (*table, Schema::new(fields))
    }

    fn now() -> i64 {
        riffle::time::Clock::now(&riffle::time::SystemClock)
    }

    #[test]
    fn sequences_count_and_bound_the_rows_and_random_values_stay_in_their_ranges() {
        let (t, schema) = table(
            "id BIGINT, u INT, name STRING, price DECIMAL(6, 2), ok BOOLEAN",
            ", 'fields.id.kind' = 'sequence', 'fields.id.start' = '10', 'fields.id.end' = '19',
               'fields.u.min' = '1', 'fields.u.max' = '3', 'fields.name.length' = '5',
               'fields.price.min' = '0', 'fields.price.max' = '9.99'",
        );
        let d = settings(&t, &schema).unwrap();
        assert_eq!(d.rows, Some(10));
        assert_eq!(d.rows_per_second, DEFAULT_ROWS_PER_SECOND);
        let rows: Vec<Row> = (0..10).map(|i| d.generator.generate(i)).collect();
        for (i, row) in rows.iter().enumerate() {
            assert_eq!(row.0[0], Value::Int(10 + i as i64));
            let Value::Int(u) = row.0[1] else { panic!() };
            assert!((1..=3).contains(&u), "{u}");
            let Value::String(name) = &row.0[2] else {
                panic!()
            };
            assert_eq!(name.len(), 5);
            let Value::Decimal(price) = &row.0[3] else {
                panic!()
            };
            let text = price.to_string();
            let value: f64 = text.parse().unwrap();
            assert!(
                (0.0..=9.99).contains(&value) && text.split('.').nth(1).unwrap().len() == 2,
                "{text}"
            );
            assert!(matches!(row.0[4], Value::Bool(_)));
        }
        // The same rows every time.
        assert_eq!(d.generator.generate(3), rows[3]);
    }

    #[test]
    fn null_rates_number_of_rows_and_times_in_the_past() {
        let (t, schema) = table(
            "a INT, ts TIMESTAMP(3)",
            ", 'number-of-rows' = '500', 'rows-per-second' = '50', 'fields.a.null-rate' = '0.5',
               'fields.ts.max-past' = '1000'",
        );
        let d = settings(&t, &schema).unwrap();
        assert_eq!((d.rows, d.rows_per_second), (Some(500), 50.0));
        let started = now();
        let rows: Vec<Row> = (0..500).map(|i| d.generator.generate(i)).collect();
        let nulls = rows.iter().filter(|r| r.0[0].is_null()).count();
        assert!(
            (150..350).contains(&nulls),
            "{nulls} of 500 NULL at a rate of 0.5"
        );
        for row in &rows {
            let Value::Timestamp(ts) = row.0[1] else {
                panic!()
            };
            assert!(ts <= now() && ts >= started - 1_000 - 60_000, "{ts}");
        }
    }

    #[test]
    fn values_stay_in_their_types_at_the_edges() {
        let (t, schema) = table(
            "a INT, b TINYINT, id BIGINT",
            ", 'fields.a.min' = '1e20', 'fields.b.max' = '-1e30',
               'fields.id.kind' = 'sequence', 'fields.id.start' = '9223372036854775806',
               'fields.id.end' = '9223372036854775807'",
        );
        let d = settings(&t, &schema).unwrap();
        assert_eq!(d.rows, Some(2));
        for i in 0..2 {
            let row = d.generator.generate(i);
            assert_eq!(row.0[0], Value::Int(i64::from(i32::MAX)));
            assert_eq!(row.0[1], Value::Int(i64::from(i8::MIN)));
            assert_eq!(row.0[2], Value::Int(i64::MAX - 1 + i as i64));
        }
        let (t, schema) = table(
            "id BIGINT",
            ", 'fields.id.kind' = 'sequence', 'fields.id.start' = '-9223372036854775808',
               'fields.id.end' = '9223372036854775807'",
        );
        assert_eq!(settings(&t, &schema).unwrap().rows, Some(u64::MAX));
    }

    #[test]
    fn bad_options_name_themselves() {
        for (columns, options, want) in [
            ("a INT", ", 'rows-per-second' = '-1'", "'rows-per-second'"),
            ("a INT", ", 'number-of-rows' = 'many'", "'number-of-rows'"),
            ("a INT", ", 'speed' = '3'", "no option 'speed'"),
            ("a INT", ", 'fields.b.min' = '3'", "no column `b`"),
            (
                "a INT",
                ", 'fields.a.kind' = 'sequence'",
                "'start' and 'end'",
            ),
            (
                "a INT",
                ", 'fields.a.kind' = 'gaussian'",
                "'kind' = 'gaussian'",
            ),
            (
                "a INT",
                ", 'fields.a.min' = '5', 'fields.a.max' = '1'",
                "above 'max'",
            ),
            ("a INT", ", 'fields.a.null-rate' = '2'", "'null-rate'"),
            ("a INT", ", 'fields.a.colour' = 'red'", "no option 'colour'"),
            (
                "a BOOLEAN",
                ", 'fields.a.kind' = 'sequence', 'fields.a.start' = '1', 'fields.a.end' = '2'",
                "sequence of BOOLEAN",
            ),
        ] {
            let (t, schema) = table(columns, options);
            let error = match settings(&t, &schema) {
                Ok(_) => panic!("{options}: accepted"),
                Err(e) => e.to_string(),
            };
            assert!(
                error.contains(want) && error.contains("table `t`"),
                "{options}: {error}"
            );
        }
    }
}

//! The formats behind a schema registry (with the crate's `avro` feature): `avro-confluent`,
//! as Flink's, rows as Avro records in the registry's wire format; `debezium-avro-confluent`,
//! Debezium's change events in it; and, read only, `proto-registry` and `json-registry` (the
//! names of Confluent's Flink), Protobuf messages and JSON Schema-checked documents in that
//! wire format, their fields matched to columns by name as JSON's are.
//!
//! | option | reads | writes | meaning |
//! |---|---|---|---|
//! | `avro-confluent.url` (or `value.avro-confluent.url`, Flink's older `avro-confluent.schema-registry.url`) | yes | yes | the registry's base URL (required) |
//! | `avro-confluent.subject` | | yes | the subject the table's schema is registered under (default `<topic>-value`) |
//! | `avro-confluent.basic-auth.user-info` | yes | yes | `user:password` for the registry |
//! | `debezium-avro-confluent.url` | yes | | the registry of a `debezium-avro-confluent` table |
//! | `proto-registry.url`, `json-registry.url` | yes | | the registry of a `proto-registry` or `json-registry` table |
//!
//! Read: each record is decoded with its writer schema (fetched by id, cached) and its fields
//! are matched to the table's columns by name: a column the record lacks is `NULL` (an older
//! or newer version of the schema reads), a field no column names is skipped. Written: the
//! table's schema as Avro (Flink's mapping: a record `record` of namespace
//! `org.apache.flink.avro.generated`, a nullable column a union with `null` first and a `null`
//! default, `TIMESTAMP(3)` a `long` of logical type `timestamp-millis`, `DATE` an `int`
//! `date`, `DECIMAL(p, s)` `bytes` `decimal`) is registered under the subject when the job
//! is planned, so that the registry's compatibility rule refuses a breaking change at once.

use std::collections::HashMap;

use compact_str::CompactString;
use riffle_formats::apache_avro::Decimal as AvroDecimal;
use riffle_formats::{AvroDecoder, AvroEncoder, SchemaRegistry, Value as Avro};

use crate::error::{Result, SqlError};
use crate::parse::TableDef;
use crate::types::{DataType, Decimal, Field, Row, Schema, Value};

/// The registry of a table in format `format` (`avro-confluent` or
/// `debezium-avro-confluent`), checked to answer.
fn registry(table: &TableDef, format: &str) -> Result<SchemaRegistry> {
    let keys = [
        format!("{format}.url"),
        format!("value.{format}.url"),
        format!("{format}.schema-registry.url"),
    ];
    let Some(url) = keys.iter().find_map(|k| table.options.get(k)) else {
        return Err(SqlError::plan(format!(
            "table `{}` ('format' = '{format}') needs the option '{format}.url' (the schema registry)",
            table.name
        )));
    };
    let bad = |e: riffle_formats::FormatError| {
        SqlError::plan(format!("table `{}`: '{}.url': {e}", table.name, format))
    };
    let mut registry = SchemaRegistry::new(url).map_err(bad)?;
    if let Some(user_info) = table.options.get(&format!("{format}.basic-auth.user-info")) {
        let (user, password) = user_info.split_once(':').unwrap_or((user_info, ""));
        registry = registry.basic_auth(user, password);
    }
    registry.check().map_err(bad)?;
    Ok(registry)
}

/// A decoder of `table`'s records into rows of `schema` (the columns read).
pub(crate) fn row_decoder(
    table: &TableDef,
    format: &str,
    schema: &Schema,
) -> Result<impl Fn(&[u8]) -> std::result::Result<Row, String> + Send + Sync + 'static> {
    let decoder = AvroDecoder::confluent(&registry(table, format)?);
    let schema = schema.clone();
    Ok(move |bytes: &[u8]| {
        let value = decoder.decode_value(bytes).map_err(|e| e.to_string())?;
        row_of(value, &schema.fields)
    })
}

/// Decodes an event (`None`: a tombstone) into its changes.
pub(crate) type ChangesDecoder = Box<
    dyn Fn(Option<&[u8]>) -> std::result::Result<Vec<riffle::Change<Row>>, String> + Send + Sync,
>;

/// A record's bytes as a JSON value.
type ToJson = Box<dyn Fn(&[u8]) -> std::result::Result<serde_json::Value, String> + Send + Sync>;

/// A decoder of `table`'s Protobuf (`proto-registry`) or JSON Schema (`json-registry`) records
/// into rows of `schema`: each record as JSON (Protobuf's JSON mapping with the fields' own
/// names), read as a `json` table's.
pub(crate) fn json_row_decoder(
    table: &TableDef,
    format: &str,
    schema: &Schema,
) -> Result<impl Fn(&[u8]) -> std::result::Result<Row, String> + Send + Sync + 'static> {
    let registry = registry(table, format)?;
    let to_json: ToJson = if format == "proto-registry" {
        let decoder = riffle_formats::protobuf::ProtobufDecoder::confluent(&registry);
        Box::new(move |bytes| decoder.decode_json(bytes).map_err(|e| e.to_string()))
    } else {
        let decoder = riffle_formats::json_schema::JsonSchemaDecoder::confluent(&registry);
        Box::new(move |bytes| decoder.decode_json(bytes).map_err(|e| e.to_string()))
    };
    let schema = schema.clone();
    Ok(move |bytes: &[u8]| crate::json::read_row(&to_json(bytes)?.to_string(), &schema))
}

/// The decoder of a `debezium-avro-confluent` table's events into changes of rows of `schema`.
pub(crate) fn debezium_decoder(table: &TableDef, schema: &Schema) -> Result<ChangesDecoder> {
    let decoder = AvroDecoder::confluent(&registry(table, "debezium-avro-confluent")?);
    let schema = schema.clone();
    Ok(Box::new(move |event: Option<&[u8]>| {
        riffle_formats::debezium::decode_values(&decoder, event, |row| row_of(row, &schema.fields))
    }))
}

/// An encoder of rows of `schema` for `topic`: the table's Avro schema registered under its
/// subject now.
pub(crate) fn row_encoder(
    table: &TableDef,
    topic: &str,
    schema: &Schema,
) -> Result<impl Fn(&Row, &mut Vec<u8>) -> riffle::Result<()> + Send + Sync + 'static> {
    let registry = registry(table, "avro-confluent")?;
    let avro_schema = riffle_formats::Schema::parse_str(&schema_json(&schema.fields).to_string())
        .map_err(|e| {
        SqlError::plan(format!(
            "table `{}`: its columns as an Avro schema: {e}",
            table.name
        ))
    })?;
    let subject = table
        .options
        .get("avro-confluent.subject")
        .cloned()
        .unwrap_or_else(|| format!("{topic}-value"));
    let encoder = AvroEncoder::confluent(&registry, &subject, avro_schema).map_err(|e| {
        SqlError::plan(format!(
            "table `{}`: registering its schema under `{subject}`: {e}",
            table.name
        ))
    })?;
    let schema = schema.clone();
    Ok(move |row: &Row, out: &mut Vec<u8>| {
        let value = record_of(&row.0, &schema.fields);
        encoder
            .encode_value(&value, out)
            .map_err(riffle::Error::user)
    })
}

/// The Avro schema (as JSON) of a record of `fields`, by Flink's mapping.
fn schema_json(fields: &[Field]) -> serde_json::Value {
    record_json("record", Some("org.apache.flink.avro.generated"), fields)
}

fn record_json(name: &str, namespace: Option<&str>, fields: &[Field]) -> serde_json::Value {
    let fields: Vec<serde_json::Value> = fields
        .iter()
        .map(|f| {
            let ty = type_json(&f.ty, &f.name);
            if f.nullable {
                serde_json::json!({ "name": f.name, "type": ["null", ty], "default": null })
            } else {
                serde_json::json!({ "name": f.name, "type": ty })
            }
        })
        .collect();
    let mut record = serde_json::json!({ "type": "record", "name": name, "fields": fields });
    if let Some(namespace) = namespace {
        record["namespace"] = namespace.into();
    }
    record
}

fn type_json(ty: &DataType, name: &str) -> serde_json::Value {
    use serde_json::json;
    match ty {
        // The type of a bare `NULL` literal: only ever null.
        DataType::Null => json!("null"),
        DataType::Boolean => json!("boolean"),
        DataType::TinyInt | DataType::SmallInt | DataType::Int => json!("int"),
        DataType::BigInt | DataType::Interval => json!("long"),
        DataType::Float => json!("float"),
        DataType::Double => json!("double"),
        DataType::Decimal { precision, scale } => {
            json!({ "type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale })
        }
        DataType::Varchar => json!("string"),
        DataType::Date => json!({ "type": "int", "logicalType": "date" }),
        DataType::Timestamp { .. } | DataType::TimestampLtz { .. } => {
            json!({ "type": "long", "logicalType": "timestamp-millis" })
        }
        DataType::Row(fields) => record_json(name, None, fields),
        DataType::Array(element) => {
            json!({ "type": "array", "items": nullable_json(element, name) })
        }
        DataType::Map(_, value) => json!({ "type": "map", "values": nullable_json(value, name) }),
    }
}

fn nullable_json(ty: &DataType, name: &str) -> serde_json::Value {
    serde_json::json!(["null", type_json(ty, name)])
}

/// A row of `values` as an Avro record of `fields` (the schema of [`schema_json`]).
fn record_of(values: &[Value], fields: &[Field]) -> Avro {
    Avro::Record(
        fields
            .iter()
            .zip(values)
            .map(|(field, value)| {
                let avro = avro_of(value, &field.ty);
                let avro = match (field.nullable, value.is_null()) {
                    (false, _) => avro,
                    (true, true) => Avro::Union(0, Box::new(Avro::Null)),
                    (true, false) => Avro::Union(1, Box::new(avro)),
                };
                (field.name.clone(), avro)
            })
            .collect(),
    )
}

fn avro_of(value: &Value, ty: &DataType) -> Avro {
    let nullable = |value: &Value, ty: &DataType| match value {
        Value::Null => Avro::Union(0, Box::new(Avro::Null)),
        other => Avro::Union(1, Box::new(avro_of(other, ty))),
    };
    match (value, ty) {
        (Value::Null, _) => Avro::Null,
        (Value::Bool(b), _) => Avro::Boolean(*b),
        (Value::Int(i), DataType::TinyInt | DataType::SmallInt | DataType::Int) => {
            Avro::Int(*i as i32)
        }
        (Value::Int(i), _) | (Value::Interval(i), _) => Avro::Long(*i),
        (Value::Double(d), DataType::Float) => Avro::Float(*d as f32),
        (Value::Double(d), _) => Avro::Double(*d),
        (Value::Decimal(d), DataType::Decimal { scale, .. }) => {
            let unscaled = d.unscaled * crate::types::pow10(scale.saturating_sub(d.scale))
                / crate::types::pow10(d.scale.saturating_sub(*scale));
            Avro::Decimal(AvroDecimal::from(minimal_bytes(unscaled)))
        }
        (Value::Decimal(d), _) => Avro::String(d.to_string()),
        (Value::String(s), _) => Avro::String(s.to_string()),
        (Value::Date(days), _) => Avro::Date(*days),
        (Value::Timestamp(ms), _) => Avro::TimestampMillis(*ms),
        (Value::Row(values), DataType::Row(fields)) => record_of(values, fields),
        (Value::Array(items), DataType::Array(element)) => {
            Avro::Array(items.iter().map(|v| nullable(v, element)).collect())
        }
        (Value::Map(entries), DataType::Map(_, value)) => Avro::Map(
            entries
                .iter()
                .map(|(k, v)| {
                    (
                        crate::format::display(k, &DataType::Varchar),
                        nullable(v, value),
                    )
                })
                .collect::<HashMap<_, _>>(),
        ),
        (other, _) => Avro::String(crate::format::display(other, ty)),
    }
}

/// The shortest big-endian two's complement bytes of `n` (Avro's decimal).
fn minimal_bytes(n: i128) -> Vec<u8> {
    let bytes = n.to_be_bytes();
    let sign = if n < 0 { 0xff } else { 0 };
    let mut start = 0;
    while start < 15 && bytes[start] == sign && (bytes[start + 1] & 0x80) == (sign & 0x80) {
        start += 1;
    }
    bytes[start..].to_vec()
}

/// A decoded record as a row of `fields`, matched by name (exactly, else ignoring case).
fn row_of(value: Avro, fields: &[Field]) -> std::result::Result<Row, String> {
    let Avro::Record(mut record) = unwrap(value) else {
        return Err("the Avro record is not a record".to_string());
    };
    let mut row = Vec::with_capacity(fields.len());
    for field in fields {
        let at = record
            .iter()
            .position(|(name, _)| *name == field.name)
            .or_else(|| {
                record
                    .iter()
                    .position(|(name, _)| name.eq_ignore_ascii_case(&field.name))
            });
        let value = match at {
            Some(at) => std::mem::replace(&mut record[at].1, Avro::Null),
            None => Avro::Null,
        };
        let value = sql_of(value, &field.ty).map_err(|e| format!("`{}`: {e}", field.name))?;
        if value.is_null() && !field.nullable {
            return Err(format!(
                "`{}` is NOT NULL but the record has none",
                field.name
            ));
        }
        row.push(value);
    }
    Ok(Row(row))
}

fn unwrap(value: Avro) -> Avro {
    match value {
        Avro::Union(_, inner) => unwrap(*inner),
        other => other,
    }
}

/// An Avro value as a SQL value of type `ty`.
fn sql_of(value: Avro, ty: &DataType) -> std::result::Result<Value, String> {
    let mismatch = |value: &Avro| Err(format!("an Avro {value:?} is not a {ty}"));
    Ok(match (unwrap(value), ty) {
        (Avro::Null, _) => Value::Null,
        (Avro::Boolean(b), DataType::Boolean) => Value::Bool(b),
        (
            Avro::Int(i) | Avro::Date(i) | Avro::TimeMillis(i),
            DataType::TinyInt | DataType::SmallInt | DataType::Int | DataType::BigInt,
        ) => Value::Int(i as i64),
        (
            Avro::Long(i),
            DataType::TinyInt | DataType::SmallInt | DataType::Int | DataType::BigInt,
        ) => Value::Int(i),
        (Avro::Int(i), DataType::Float | DataType::Double) => Value::Double(i as f64),
        (Avro::Long(i), DataType::Float | DataType::Double) => Value::Double(i as f64),
        (Avro::Float(f), DataType::Float | DataType::Double) => Value::Double(f as f64),
        (Avro::Double(f), DataType::Float | DataType::Double) => Value::Double(f),
        (Avro::Decimal(d), DataType::Decimal { scale, .. }) => {
            let bytes: Vec<u8> = Vec::try_from(&d).map_err(|e| e.to_string())?;
            if bytes.len() > 16 {
                return Err(format!("a decimal of {} bytes does not fit", bytes.len()));
            }
            let fill = if bytes.first().is_some_and(|b| b & 0x80 != 0) {
                0xff
            } else {
                0
            };
            let mut wide = [fill; 16];
            wide[16 - bytes.len()..].copy_from_slice(&bytes);
            Value::Decimal(Decimal {
                unscaled: i128::from_be_bytes(wide),
                scale: *scale,
            })
        }
        (Avro::Int(i), DataType::Decimal { scale, .. }) => Value::Decimal(Decimal {
            unscaled: i as i128 * crate::types::pow10(*scale),
            scale: *scale,
        }),
        (Avro::Long(i), DataType::Decimal { scale, .. }) => Value::Decimal(Decimal {
            unscaled: i as i128 * crate::types::pow10(*scale),
            scale: *scale,
        }),
        (Avro::String(s) | Avro::Enum(_, s), DataType::Varchar) => {
            Value::String(CompactString::from(s))
        }
        (Avro::Uuid(u), DataType::Varchar) => Value::String(u.to_string().into()),
        (Avro::Bytes(b) | Avro::Fixed(_, b), DataType::Varchar) => {
            Value::String(String::from_utf8_lossy(&b).as_ref().into())
        }
        (Avro::Date(d) | Avro::Int(d), DataType::Date) => Value::Date(d),
        (
            Avro::TimestampMillis(ms) | Avro::LocalTimestampMillis(ms) | Avro::Long(ms),
            DataType::Timestamp { .. } | DataType::TimestampLtz { .. },
        ) => Value::Timestamp(ms),
        (
            Avro::TimestampMicros(us) | Avro::LocalTimestampMicros(us),
            DataType::Timestamp { .. } | DataType::TimestampLtz { .. },
        ) => Value::Timestamp(us.div_euclid(1_000)),
        (
            Avro::TimestampNanos(ns) | Avro::LocalTimestampNanos(ns),
            DataType::Timestamp { .. } | DataType::TimestampLtz { .. },
        ) => Value::Timestamp(ns.div_euclid(1_000_000)),
        (Avro::Long(ms) | Avro::TimestampMillis(ms), DataType::Interval) => Value::Interval(ms),
        (record @ Avro::Record(_), DataType::Row(fields)) => Value::Row(row_of(record, fields)?.0),
        (Avro::Array(items), DataType::Array(element)) => Value::Array(
            items
                .into_iter()
                .map(|item| sql_of(item, element))
                .collect::<std::result::Result<_, _>>()?,
        ),
        (Avro::Map(entries), DataType::Map(key, value)) => {
            let mut entries: Vec<(String, Avro)> = entries.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Map(
                entries
                    .into_iter()
                    .map(|(k, v)| Ok((sql_of(Avro::String(k), key)?, sql_of(v, value)?)))
                    .collect::<std::result::Result<_, String>>()?,
            )
        }
        (other, _) => return mismatch(&other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_take_the_fewest_bytes_and_read_back() {
        for n in [
            0i128,
            1,
            -1,
            127,
            128,
            -128,
            -129,
            255,
            65_535,
            i64::MAX as i128,
            -(10i128.pow(37)),
        ] {
            let bytes = minimal_bytes(n);
            let value = sql_of(
                Avro::Decimal(AvroDecimal::from(bytes.clone())),
                &DataType::Decimal {
                    precision: 38,
                    scale: 2,
                },
            )
            .unwrap();
            assert_eq!(
                value,
                Value::Decimal(Decimal {
                    unscaled: n,
                    scale: 2
                }),
                "{n}: {bytes:?}"
            );
        }
        assert_eq!(minimal_bytes(128), [0, 128]);
        assert_eq!(minimal_bytes(-128), [128]);
    }

    #[test]
    fn a_row_reads_back_through_the_table_schema() {
        let fields = vec![
            Field::new("user_id", DataType::Varchar),
            Field::new("ts", DataType::Timestamp { precision: 3 }),
            Field::new(
                "price",
                DataType::Decimal {
                    precision: 10,
                    scale: 2,
                },
            ),
            Field::new("tags", DataType::Array(Box::new(DataType::Varchar))),
            Field::new(
                "where",
                DataType::Row(vec![Field::new("city", DataType::Varchar)]),
            ),
            Field::new("n", DataType::Int),
        ];
        let schema = riffle_formats::Schema::parse_str(&schema_json(&fields).to_string()).unwrap();
        let row = vec![
            Value::String("u1".into()),
            Value::Timestamp(1_700_000_000_123),
            Value::Decimal(Decimal {
                unscaled: -1234,
                scale: 2,
            }),
            Value::Array(vec![Value::String("a".into()), Value::Null]),
            Value::Row(vec![Value::String("paris".into())]),
            Value::Null,
        ];
        let record = record_of(&row, &fields);
        assert!(record.validate(&schema), "{record:?}");
        assert_eq!(row_of(record, &fields).unwrap().0, row);
    }
}

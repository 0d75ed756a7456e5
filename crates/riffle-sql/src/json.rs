//! Reading a line of JSON as a row of a table's schema, in one pass over the text.
//!
//! The line is decoded straight into the row's values (serde's `DeserializeSeed`, guided by the
//! schema): a field the schema names becomes its typed [`Value`] as it is read, a field it does
//! not name is skipped without being built, and no intermediate JSON tree is made. The rules are
//! Flink's `json` format's, as Riffle's files write values:
//!
//! - a field that is absent or `null` is `NULL`; fields are found by name, in any order;
//! - integers fill integer columns (a fraction or a number outside `BIGINT` is an error),
//!   numbers fill `FLOAT`/`DOUBLE`, numbers and strings fill `DECIMAL` (rescaled);
//! - times are strings (`2026-01-15 00:18:00.4`, ISO-8601) or epoch milliseconds; dates
//!   strings;
//! - a `VARCHAR` column takes a string as is, and any other JSON value as its JSON text;
//! - a nested object fills a `ROW` (its fields by name), an array an `ARRAY`.
//!
//! Lines in the plain form programs write (no escapes, integers where the schema has them) are
//! read by a reader of their bytes of its own (`fast`), which hands anything else to serde.
//!
//! A line that does not fit is an error naming the column and why (for the source's bad-record
//! policy), e.g. "`price`: the string \"abc\" is not a BIGINT".

mod fast;

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::types::{DataType, Field, Row, Schema, Value};

/// A JSON object as a row of `schema` (fields by name; absent ones `NULL`). A reader of many
/// lines of one schema is a [`JsonReader`], which prepares the schema once.
pub(crate) fn read_row(line: &str, schema: &Schema) -> std::result::Result<Row, String> {
    JsonReader::new(schema).read(line, 0)
}

/// Reads lines of JSON as rows of one schema, whose keys it prepared to be matched in place.
pub(crate) struct JsonReader {
    schema: Schema,
    layout: fast::Layout,
}

impl JsonReader {
    /// A reader of rows of `schema`.
    pub(crate) fn new(schema: &Schema) -> JsonReader {
        JsonReader {
            schema: schema.clone(),
            layout: fast::Layout::new(&schema.fields),
        }
    }

    /// The row of `line` (see [`read_row`]), made with room for `spare` values more (the
    /// columns its table computes after the ones it reads), so that adding them does not move it.
    pub(crate) fn read(&self, line: &str, spare: usize) -> std::result::Result<Row, String> {
        // The usual form in one pass; anything else (and every error) through serde.
        if let Some(values) = fast::read_row(line, &self.layout, spare) {
            return Ok(Row(values));
        }
        read_row_through_serde(line, &self.schema, spare)
    }
}

/// [`JsonReader::read`] by serde alone: any line, and the errors users see.
fn read_row_through_serde(
    line: &str,
    schema: &Schema,
    spare: usize,
) -> std::result::Result<Row, String> {
    let mut deserializer = serde_json::Deserializer::from_str(line);
    let values = RowSeed {
        fields: &schema.fields,
        spare,
        top: true,
    }
    .deserialize(&mut deserializer)
    .map_err(|e| message(&e))?;
    deserializer.end().map_err(|e| format!("not JSON: {e}"))?;
    Ok(Row(values))
}

/// The text of an error: a column's own message as it was made, serde_json's with "not JSON".
fn message(error: &serde_json::Error) -> String {
    let text = error.to_string();
    if error.is_data() {
        // Our own messages carry serde_json's " at line L column C" suffix: drop it.
        match text.rfind(" at line ") {
            Some(at) => text[..at].to_string(),
            None => text,
        }
    } else {
        format!("not JSON: {text}")
    }
}

/// Reads an object into the values of `fields`, in their order.
struct RowSeed<'s> {
    fields: &'s [Field],
    /// Room for this many values more (the computed columns pushed after the line's).
    spare: usize,
    /// The line itself (a nested row's errors are reported as its column's).
    top: bool,
}

impl<'de> DeserializeSeed<'de> for RowSeed<'_> {
    type Value = Vec<Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Vec<Value>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for RowSeed<'_> {
    type Value = Vec<Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<Value>, A::Error> {
        // `NULL`s written in place (`vec![Value::Null; n]` clones one through `Value::clone`,
        // a tenth of reading a line), with room for the columns a table computes after them.
        let mut values = Vec::with_capacity(self.fields.len() + self.spare);
        values.resize_with(self.fields.len(), || Value::Null);
        while let Some(key) = map.next_key::<KeyName<'de>>()? {
            let name: &str = key.as_str();
            match self.fields.iter().position(|f| f.name == name) {
                Some(i) => {
                    let field = &self.fields[i];
                    values[i] = map
                        .next_value_seed(ValueSeed { ty: &field.ty })
                        .map_err(|e| {
                            if self.top {
                                de::Error::custom(format!("`{}`: {}", field.name, strip(&e)))
                            } else {
                                e
                            }
                        })?;
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(values)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Vec<Value>, A::Error> {
        Err(de::Error::custom("not a JSON object"))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Vec<Value>, E> {
        Err(de::Error::custom("not a JSON object"))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Vec<Value>, E> {
        Err(de::Error::custom("not a JSON object"))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Vec<Value>, E> {
        Err(de::Error::custom("not a JSON object"))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Vec<Value>, E> {
        Err(de::Error::custom("not a JSON object"))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Vec<Value>, E> {
        Err(de::Error::custom("not a JSON object"))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Vec<Value>, E> {
        Err(de::Error::custom("not a JSON object"))
    }
}

/// The message of a nested error without serde_json's position suffix.
fn strip(error: &impl fmt::Display) -> String {
    let text = error.to_string();
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// A key of an object: borrowed from the line when it has no escapes.
enum KeyName<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl KeyName<'_> {
    fn as_str(&self) -> &str {
        match self {
            KeyName::Borrowed(s) => s,
            KeyName::Owned(s) => s,
        }
    }
}

impl<'de> de::Deserialize<'de> for KeyName<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Key;
        impl<'de> Visitor<'de> for Key {
            type Value = KeyName<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<KeyName<'de>, E> {
                Ok(KeyName::Borrowed(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyName<'de>, E> {
                Ok(KeyName::Owned(v.to_string()))
            }
        }
        deserializer.deserialize_str(Key)
    }
}

/// Reads one JSON value as a value of type `ty`.
struct ValueSeed<'s> {
    ty: &'s DataType,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'s> ValueSeed<'s> {
    fn mismatch<E: de::Error>(&self, what: impl fmt::Display) -> E {
        E::custom(format!("{what} is not a {}", self.ty))
    }

    /// A JSON number as a value of the column's type. Its text is made only where it is
    /// needed (a `DECIMAL` or `VARCHAR` column, an error), never for an integer or a double.
    fn number<E: de::Error>(&self, number: Number) -> Result<Value, E> {
        let ty = self.ty;
        let int = match number {
            Number::Signed(i) => Some(i),
            Number::Unsigned(u) => i64::try_from(u).ok(),
            Number::Float(_) => None,
        };
        Ok(match ty {
            t if t.is_integer() => match int {
                Some(i) => Value::Int(i),
                None => return Err(self.mismatch(format!("the number {}", number.text()))),
            },
            DataType::Double | DataType::Float => Value::Double(number.as_f64()),
            DataType::Decimal { scale, .. } => {
                let text = number.text();
                Value::Decimal(
                    crate::expr::parse_decimal(&text)
                        .and_then(|d| d.rescale(*scale))
                        .ok_or_else(|| self.mismatch(format!("the number {text}")))?,
                )
            }
            DataType::Varchar => Value::string(number.text()),
            // Epoch milliseconds, as Riffle's own JSON files write times.
            t if t.is_timestamp() => match int {
                Some(i) => Value::Timestamp(i),
                None => return Err(self.mismatch(format!("the number {}", number.text()))),
            },
            _ => return Err(self.mismatch(format!("the number {}", number.text()))),
        })
    }
}

/// A number as serde_json read it.
#[derive(Clone, Copy)]
enum Number {
    Signed(i64),
    Unsigned(u64),
    Float(f64),
}

impl Number {
    fn as_f64(self) -> f64 {
        match self {
            Number::Signed(i) => i as f64,
            Number::Unsigned(u) => u as f64,
            Number::Float(f) => f,
        }
    }

    /// Its text as serde_json writes it (a float: the shortest that reads back).
    fn text(self) -> String {
        match self {
            Number::Signed(i) => i.to_string(),
            Number::Unsigned(u) => u.to_string(),
            Number::Float(f) => {
                serde_json::Number::from_f64(f).map_or_else(|| f.to_string(), |n| n.to_string())
            }
        }
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a {}", self.ty)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        match self.ty {
            DataType::Boolean => Ok(Value::Bool(v)),
            DataType::Varchar => Ok(Value::string(if v { "true" } else { "false" })),
            _ => Err(self.mismatch(format!("the boolean {v}"))),
        }
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.number(Number::Signed(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.number(Number::Unsigned(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.number(Number::Float(v))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Value, E> {
        let ty = self.ty;
        let parsed = match ty {
            DataType::Varchar => Some(Value::string(s)),
            DataType::Decimal { scale, .. } => crate::expr::parse_decimal(s)
                .and_then(|d| d.rescale(*scale))
                .map(Value::Decimal),
            t if t.is_timestamp() => crate::format::parse_timestamp(s).map(Value::Timestamp),
            DataType::Date => crate::format::parse_date(s).map(Value::Date),
            _ => None,
        };
        parsed.ok_or_else(|| self.mismatch(format!("the string {:?}", s)))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
        match self.ty {
            DataType::Row(fields) => RowSeed {
                fields,
                spare: 0,
                top: false,
            }
            .visit_map(map)
            .map(Value::Row),
            DataType::Varchar => {
                let value: serde_json::Value =
                    de::Deserialize::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(Value::string(value.to_string()))
            }
            _ => Err(self.mismatch("an object")),
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        match self.ty {
            DataType::Array(element) => {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element_seed(ValueSeed { ty: element })? {
                    items.push(item);
                }
                Ok(Value::Array(items))
            }
            DataType::Varchar => {
                let value: serde_json::Value =
                    de::Deserialize::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
                Ok(Value::string(value.to_string()))
            }
            _ => Err(self.mismatch("an array")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(sql: &[(&str, DataType)]) -> Schema {
        Schema {
            fields: sql
                .iter()
                .map(|(name, ty)| Field {
                    name: name.to_string(),
                    ty: ty.clone(),
                    nullable: true,
                })
                .collect(),
        }
    }

    #[test]
    fn fields_are_found_by_name_and_unknown_ones_skipped() {
        let s = schema(&[
            ("id", DataType::BigInt),
            ("name", DataType::Varchar),
            (
                "price",
                DataType::Decimal {
                    precision: 10,
                    scale: 2,
                },
            ),
            ("at", DataType::Timestamp { precision: 3 }),
        ]);
        let row = read_row(
            r#"{"extra": {"deep": [1, 2, {"x": null}]}, "price": 12.5, "name": "a\"b", "id": 7, "at": 1000}"#,
            &s,
        )
        .unwrap();
        assert_eq!(row.0[0], Value::Int(7));
        assert_eq!(row.0[1], Value::string("a\"b"));
        assert_eq!(
            row.0[2],
            Value::Decimal(crate::expr::parse_decimal("12.50").unwrap())
        );
        assert_eq!(row.0[3], Value::Timestamp(1000));
        let row = read_row(r#"{"id": null}"#, &s).unwrap();
        assert!(row.0.iter().all(Value::is_null));
        // An escaped key is the same name; a repeated one keeps its last value.
        let row = read_row(r#"{"n\u0061me": "x", "id": 1, "id": 2}"#, &s).unwrap();
        assert_eq!(
            (&row.0[0], &row.0[1]),
            (&Value::Int(2), &Value::string("x"))
        );
    }

    #[test]
    fn nested_rows_arrays_and_json_text_in_strings() {
        let inner = DataType::Row(vec![
            Field {
                name: "a".into(),
                ty: DataType::Int,
                nullable: true,
            },
            Field {
                name: "b".into(),
                ty: DataType::Varchar,
                nullable: true,
            },
        ]);
        let s = schema(&[
            ("r", inner),
            ("xs", DataType::Array(Box::new(DataType::Double))),
            ("raw", DataType::Varchar),
            ("flag", DataType::Varchar),
        ]);
        let row = read_row(
            r#"{"r": {"b": "x", "a": 3}, "xs": [1, 2.5], "raw": {"k": [1]}, "flag": true}"#,
            &s,
        )
        .unwrap();
        assert_eq!(
            row.0[0],
            Value::Row(vec![Value::Int(3), Value::string("x")])
        );
        assert_eq!(
            row.0[1],
            Value::Array(vec![Value::Double(1.0), Value::Double(2.5)])
        );
        assert_eq!(row.0[2], Value::string(r#"{"k":[1]}"#));
        assert_eq!(row.0[3], Value::string("true"));
    }

    #[test]
    fn a_value_that_does_not_fit_names_its_column() {
        let s = schema(&[("id", DataType::BigInt), ("d", DataType::Date)]);
        for (line, want) in [
            (
                r#"{"id": "abc"}"#,
                r#"`id`: the string "abc" is not a BIGINT"#,
            ),
            (r#"{"id": 1.5}"#, "`id`: the number 1.5 is not a BIGINT"),
            (
                r#"{"id": 18446744073709551615}"#,
                "`id`: the number 18446744073709551615 is not a BIGINT",
            ),
            (
                r#"{"d": "yesterday"}"#,
                r#"`d`: the string "yesterday" is not a DATE"#,
            ),
            (r#"[1, 2]"#, "not a JSON object"),
            (r#"{"id": 1"#, "not JSON"),
            (r#"{"id": 1} tail"#, "not JSON"),
        ] {
            let error = read_row(line, &s).unwrap_err();
            assert!(error.starts_with(want), "{line}: {error}");
        }
    }
}

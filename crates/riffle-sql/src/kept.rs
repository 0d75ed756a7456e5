//! The rows a regular join keeps, packed as bytes.
//!
//! A regular join of two append-only inputs keeps every row of both for as long as the job
//! runs (Nexmark's q4, q9 and q20 keep every bid). As [`Value`]s, a kept row costs 32 bytes a
//! column (a column the query does not read too: it is `NULL`), plus an allocation per string
//! longer than 24 bytes and its join key again. Packed, a row is its values and key encoded in
//! one allocation: a `NULL` is one byte, an integer a tag and its varint, a string a tag, its
//! length and its bytes. The join decodes a kept row only when it matches, straight into the
//! output row.
//!
//! The packed form lives only in memory. A [`JoinRow`] is written to checkpoints as the
//! `(key, row)` pair of [`Row`]s that the join kept before rows were packed, so that savepoints
//! of either release restore in the other.

use compact_str::CompactString;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::types::{Decimal, Row, Value};

/// A row of one input of a regular join, with its join key.
#[derive(Clone, Debug)]
pub(crate) enum JoinRow {
    /// As it arrived: its join key and its row.
    Fresh(Row, Row),
    /// As the join keeps it: the row's values, then the key's (see [`pack`]).
    Packed(Box<[u8]>),
}

impl JoinRow {
    /// The row as the join keeps it: packed.
    pub(crate) fn packed(self) -> JoinRow {
        let JoinRow::Fresh(key, row) = self else {
            return self;
        };
        thread_local! {
            /// Where rows are encoded, then copied into an allocation of their size (encoding
            /// into a growing vector of their own cost an allocation per doubling).
            static BUFFER: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
        }
        BUFFER.with(|buffer| {
            let mut bytes = buffer.take();
            bytes.clear();
            pack(&row.0, &mut bytes);
            pack(&key.0, &mut bytes);
            let packed = JoinRow::Packed(Box::from(&bytes[..]));
            buffer.set(bytes);
            packed
        })
    }

    /// The join key.
    pub(crate) fn key(&self) -> Row {
        match self {
            JoinRow::Fresh(key, _) => key.clone(),
            JoinRow::Packed(bytes) => unpack(bytes).0,
        }
    }

    /// Appends the row's values to `values`.
    pub(crate) fn extend_into(&self, values: &mut Vec<Value>) {
        match self {
            JoinRow::Fresh(_, row) => values.extend(row.0.iter().cloned()),
            JoinRow::Packed(bytes) => {
                Reader(bytes).values_into(values);
            }
        }
    }
}

/// The key and the row of packed bytes.
fn unpack(bytes: &[u8]) -> (Row, Row) {
    let mut reader = Reader(bytes);
    let mut row = Vec::new();
    reader.values_into(&mut row);
    let mut key = Vec::new();
    reader.values_into(&mut key);
    (Row(key), Row(row))
}

impl Serialize for JoinRow {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            JoinRow::Fresh(key, row) => (key, row).serialize(serializer),
            JoinRow::Packed(bytes) => unpack(bytes).serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for JoinRow {
    /// Reads a `(key, row)` pair and packs it (restored rows are kept packed).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (key, row) = <(Row, Row)>::deserialize(deserializer)?;
        Ok(JoinRow::Fresh(key, row).packed())
    }
}

// The packed encoding: a list is its length, then its values; a value is a tag, then its
// content (integers as zigzag varints).
const NULL: u8 = 0;
const FALSE: u8 = 1;
const TRUE: u8 = 2;
const INT: u8 = 3;
const DOUBLE: u8 = 4;
const DECIMAL: u8 = 5;
const STRING: u8 = 6;
const DATE: u8 = 7;
const TIMESTAMP: u8 = 8;
const INTERVAL: u8 = 9;
const ROW: u8 = 10;
const ARRAY: u8 = 11;
const MAP: u8 = 12;

/// Appends a list of values, encoded, to `out`.
fn pack(values: &[Value], out: &mut Vec<u8>) {
    varint(values.len() as u64, out);
    for value in values {
        pack_value(value, out);
    }
}

fn varint(mut n: u64, out: &mut Vec<u8>) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn tagged_int(tag: u8, n: i64, out: &mut Vec<u8>) {
    out.push(tag);
    varint(((n << 1) ^ (n >> 63)) as u64, out);
}

fn pack_value(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.push(NULL),
        Value::Bool(false) => out.push(FALSE),
        Value::Bool(true) => out.push(TRUE),
        Value::Int(n) => tagged_int(INT, *n, out),
        Value::Double(x) => {
            out.push(DOUBLE);
            out.extend_from_slice(&x.to_bits().to_le_bytes());
        }
        Value::Decimal(d) => {
            let (unscaled, scale) = (d.unscaled, d.scale);
            out.push(DECIMAL);
            out.extend_from_slice(&unscaled.to_le_bytes());
            out.push(scale);
        }
        Value::String(s) => {
            out.push(STRING);
            varint(s.len() as u64, out);
            out.extend_from_slice(s.as_bytes());
        }
        Value::Date(days) => tagged_int(DATE, *days as i64, out),
        Value::Timestamp(ms) => tagged_int(TIMESTAMP, *ms, out),
        Value::Interval(ms) => tagged_int(INTERVAL, *ms, out),
        Value::Row(values) => {
            out.push(ROW);
            pack(values, out);
        }
        Value::Array(values) => {
            out.push(ARRAY);
            pack(values, out);
        }
        Value::Map(entries) => {
            out.push(MAP);
            varint(entries.len() as u64, out);
            for (key, value) in entries {
                pack_value(key, out);
                pack_value(value, out);
            }
        }
    }
}

/// Reads packed bytes. They were packed by this process from valid values: they decode (a
/// failure is a bug, and panics).
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        taken
    }

    fn byte(&mut self) -> u8 {
        self.take(1)[0]
    }

    fn varint(&mut self) -> u64 {
        let (mut n, mut shift) = (0u64, 0);
        loop {
            let byte = self.byte();
            n |= ((byte & 0x7f) as u64) << shift;
            if byte < 0x80 {
                return n;
            }
            shift += 7;
        }
    }

    fn int(&mut self) -> i64 {
        let n = self.varint();
        ((n >> 1) as i64) ^ -((n & 1) as i64)
    }

    fn values_into(&mut self, values: &mut Vec<Value>) {
        let len = self.varint() as usize;
        values.reserve(len);
        for _ in 0..len {
            let value = self.value();
            values.push(value);
        }
    }

    fn value(&mut self) -> Value {
        match self.byte() {
            NULL => Value::Null,
            FALSE => Value::Bool(false),
            TRUE => Value::Bool(true),
            INT => Value::Int(self.int()),
            DOUBLE => {
                let bits = self.take(8).try_into().expect("8 bytes");
                Value::Double(f64::from_bits(u64::from_le_bytes(bits)))
            }
            DECIMAL => {
                let unscaled = i128::from_le_bytes(self.take(16).try_into().expect("16 bytes"));
                Value::Decimal(Decimal::new(unscaled, self.byte()))
            }
            STRING => {
                let len = self.varint() as usize;
                let text = std::str::from_utf8(self.take(len)).expect("packed from a string");
                Value::String(CompactString::new(text))
            }
            DATE => Value::Date(self.int() as i32),
            TIMESTAMP => Value::Timestamp(self.int()),
            INTERVAL => Value::Interval(self.int()),
            ROW => {
                let mut values = Vec::new();
                self.values_into(&mut values);
                Value::Row(values)
            }
            ARRAY => {
                let mut values = Vec::new();
                self.values_into(&mut values);
                Value::Array(values)
            }
            MAP => {
                let len = self.varint() as usize;
                let entries = (0..len).map(|_| (self.value(), self.value())).collect();
                Value::Map(entries)
            }
            tag => unreachable!("no value is packed with tag {tag}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Row, Row) {
        let key = Row(vec![Value::Int(-7), Value::string("k")]);
        let row = Row(vec![
            Value::Int(i64::MIN),
            Value::Int(i64::MAX),
            Value::Int(0),
            Value::Null,
            Value::Bool(true),
            Value::Bool(false),
            Value::string("a string longer than twenty-four bytes, with ü"),
            Value::string(""),
            Value::Double(-0.0),
            Value::Double(f64::INFINITY),
            Value::Decimal(Decimal::new(-123_456_789_012_345_678_901_234_567, 38)),
            Value::Date(i32::MIN),
            Value::Timestamp(1_700_000_000_123),
            Value::Interval(-1),
            Value::Row(vec![Value::Bool(true), Value::Null]),
            Value::Array(vec![Value::Int(1), Value::Array(vec![])]),
            Value::Map(vec![(Value::string("a"), Value::Double(0.5))]),
        ]);
        (key, row)
    }

    fn encoded<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
        postcard::to_allocvec(value).unwrap()
    }

    #[test]
    fn a_packed_row_gives_back_its_key_and_values() {
        let (key, row) = sample();
        let packed = JoinRow::Fresh(key.clone(), row.clone()).packed();
        assert!(matches!(packed, JoinRow::Packed(_)));
        assert_eq!(packed.key(), key);
        let mut values = vec![Value::Int(1)];
        packed.extend_into(&mut values);
        assert_eq!(values[0], Value::Int(1));
        // -0.0 equals 0.0 and a NaN nothing: compare the encodings.
        assert_eq!(encoded(&values[1..]), encoded(&row.0));
        // NaN's bits come back.
        let nan = JoinRow::Fresh(Row(vec![]), Row(vec![Value::Double(f64::NAN)])).packed();
        let mut values = vec![];
        nan.extend_into(&mut values);
        assert!(matches!(values[..], [Value::Double(x)] if x.is_nan()));
    }

    #[test]
    fn packed_and_fresh_rows_are_written_as_the_pair_of_before() {
        let (key, row) = sample();
        let before = encoded(&(key.clone(), row.clone()));
        let fresh = JoinRow::Fresh(key.clone(), row.clone());
        assert_eq!(encoded(&fresh), before);
        assert_eq!(encoded(&fresh.packed()), before);
        // The traced format that a restore compares is the pair's: savepoints read as written.
        assert_eq!(
            riffle::state::evolution::format_of::<JoinRow>(),
            riffle::state::evolution::format_of::<(Row, Row)>()
        );
        let restored: JoinRow = postcard::from_bytes(&before).unwrap();
        assert!(matches!(restored, JoinRow::Packed(_)));
        assert_eq!(restored.key(), key);
        assert_eq!(encoded(&restored), before);
    }
}

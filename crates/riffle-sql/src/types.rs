//! SQL's types and values: the schema-typed dynamic [`Row`] every SQL operator reads and writes.
//!
//! A row is a vector of [`Value`]s whose meaning its [`Schema`] gives. Values compare, hash and
//! serialize canonically (a `DOUBLE` by its bits, a `DECIMAL` by its value whatever its scale),
//! so rows and their columns can be keys: key groups, rescaling, savepoints and process groups
//! work for SQL jobs as for typed ones.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

use compact_str::CompactString;
use serde::{Deserialize, Serialize};

/// A SQL data type (Flink's logical types, the ones Riffle runs).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DataType {
    /// `BOOLEAN`.
    Boolean,
    /// `TINYINT`, 8-bit.
    TinyInt,
    /// `SMALLINT`, 16-bit.
    SmallInt,
    /// `INT` / `INTEGER`, 32-bit.
    Int,
    /// `BIGINT`, 64-bit.
    BigInt,
    /// `FLOAT` / `REAL`, 32-bit (held as a double).
    Float,
    /// `DOUBLE`.
    Double,
    /// `DECIMAL(p, s)`: exact, up to 38 digits, `s` of them after the point.
    Decimal {
        /// Total digits.
        precision: u8,
        /// Digits after the point.
        scale: u8,
    },
    /// `VARCHAR`, `STRING`, `CHAR`.
    Varchar,
    /// `DATE` (days since 1970-01-01).
    Date,
    /// `TIMESTAMP(p)`: a date and time without a time zone, in epoch milliseconds of UTC.
    Timestamp {
        /// Digits of the second's fraction (Riffle keeps milliseconds).
        precision: u8,
    },
    /// `TIMESTAMP_LTZ(p)`: an instant, in epoch milliseconds.
    TimestampLtz {
        /// Digits of the second's fraction (Riffle keeps milliseconds).
        precision: u8,
    },
    /// `INTERVAL ... SECOND` and the other day-time intervals, in milliseconds.
    Interval,
    /// `ROW<name type, ...>`: a nested record.
    Row(Vec<Field>),
    /// `ARRAY<type>`.
    Array(Box<DataType>),
    /// `MAP<key, value>`.
    Map(Box<DataType>, Box<DataType>),
    /// The type of `NULL` before it meets another type.
    Null,
}

impl DataType {
    /// Whether values of this type are numbers.
    pub fn is_numeric(&self) -> bool {
        matches!(
            self,
            DataType::TinyInt
                | DataType::SmallInt
                | DataType::Int
                | DataType::BigInt
                | DataType::Float
                | DataType::Double
                | DataType::Decimal { .. }
        )
    }

    /// Whether values of this type are integers.
    pub fn is_integer(&self) -> bool {
        matches!(
            self,
            DataType::TinyInt | DataType::SmallInt | DataType::Int | DataType::BigInt
        )
    }

    /// Whether values of this type are points in time.
    pub fn is_timestamp(&self) -> bool {
        matches!(
            self,
            DataType::Timestamp { .. } | DataType::TimestampLtz { .. }
        )
    }

    /// This integer type as the `DECIMAL` that holds all of its values (Flink's rule).
    pub fn as_decimal(&self) -> Option<(u8, u8)> {
        match self {
            DataType::TinyInt => Some((3, 0)),
            DataType::SmallInt => Some((5, 0)),
            DataType::Int => Some((10, 0)),
            DataType::BigInt => Some((19, 0)),
            DataType::Decimal { precision, scale } => Some((*precision, *scale)),
            _ => None,
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataType::Boolean => f.write_str("BOOLEAN"),
            DataType::TinyInt => f.write_str("TINYINT"),
            DataType::SmallInt => f.write_str("SMALLINT"),
            DataType::Int => f.write_str("INT"),
            DataType::BigInt => f.write_str("BIGINT"),
            DataType::Float => f.write_str("FLOAT"),
            DataType::Double => f.write_str("DOUBLE"),
            DataType::Decimal { precision, scale } => write!(f, "DECIMAL({precision}, {scale})"),
            DataType::Varchar => f.write_str("VARCHAR"),
            DataType::Date => f.write_str("DATE"),
            DataType::Timestamp { precision } => write!(f, "TIMESTAMP({precision})"),
            DataType::TimestampLtz { precision } => write!(f, "TIMESTAMP_LTZ({precision})"),
            DataType::Interval => f.write_str("INTERVAL"),
            DataType::Row(fields) => {
                f.write_str("ROW<")?;
                for (i, field) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "`{}` {}", field.name, field.ty)?;
                }
                f.write_str(">")
            }
            DataType::Array(element) => write!(f, "ARRAY<{element}>"),
            DataType::Map(key, value) => write!(f, "MAP<{key}, {value}>"),
            DataType::Null => f.write_str("NULL"),
        }
    }
}

/// A named, typed column.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Field {
    /// Its name, as declared (names are case-sensitive, as in Flink).
    pub name: String,
    /// Its type.
    pub ty: DataType,
    /// Whether it may be `NULL`.
    pub nullable: bool,
}

impl Field {
    /// A nullable column.
    pub fn new(name: impl Into<String>, ty: DataType) -> Field {
        Field {
            name: name.into(),
            ty,
            nullable: true,
        }
    }
}

/// The columns of a table or of a query's result, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schema {
    /// The columns.
    pub fields: Vec<Field>,
}

impl Schema {
    /// A schema of `fields`.
    pub fn new(fields: Vec<Field>) -> Schema {
        Schema { fields }
    }

    /// The index of the column `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }

    /// The columns' names.
    pub fn names(&self) -> Vec<&str> {
        self.fields.iter().map(|f| f.name.as_str()).collect()
    }

    /// The number of columns.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether there are no columns.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }
}

impl fmt::Display for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(")?;
        for (i, field) in self.fields.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "`{}` {}", field.name, field.ty)?;
            if !field.nullable {
                f.write_str(" NOT NULL")?;
            }
        }
        f.write_str(")")
    }
}

/// An exact decimal: `unscaled / 10^scale`.
///
/// Aligned to 8 bytes rather than `i128`'s 16, so that a [`Value`] is 32 bytes rather than 48:
/// every row of every SQL job is a third smaller for a type few of them use. (Its fields are
/// read by value: `d.unscaled`, not `&d.unscaled`.)
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[repr(Rust, packed(8))]
pub struct Decimal {
    /// The digits, as an integer.
    pub unscaled: i128,
    /// How many of them are after the point.
    pub scale: u8,
}

/// 10^n for n up to 38.
pub(crate) fn pow10(n: u8) -> i128 {
    10i128.pow(n as u32)
}

impl Decimal {
    /// `unscaled / 10^scale`.
    pub fn new(unscaled: i128, scale: u8) -> Decimal {
        Decimal { unscaled, scale }
    }

    /// This value with `scale` digits after the point, rounded half up as Flink rounds
    /// (`None` when it does not fit in 38 digits).
    pub fn rescale(self, scale: u8) -> Option<Decimal> {
        match scale.cmp(&self.scale) {
            Ordering::Equal => Some(self),
            Ordering::Greater => self
                .unscaled
                .checked_mul(pow10(scale - self.scale))
                .map(|u| Decimal::new(u, scale)),
            Ordering::Less => {
                let divisor = pow10(self.scale - scale);
                let (quotient, remainder) = (self.unscaled / divisor, self.unscaled % divisor);
                let half_up = remainder.abs() * 2 >= divisor;
                let rounded = if half_up {
                    quotient + self.unscaled.signum()
                } else {
                    quotient
                };
                Some(Decimal::new(rounded, scale))
            }
        }
    }

    /// Whether the value has at most `precision` digits at its scale.
    pub fn fits(&self, precision: u8) -> bool {
        self.unscaled.unsigned_abs() < pow10(precision.min(38)) as u128
    }

    /// The value as a double.
    pub fn to_f64(self) -> f64 {
        self.unscaled as f64 / pow10(self.scale) as f64
    }

    /// Both values at the larger scale (`None` on overflow).
    fn aligned(self, other: Decimal) -> Option<(i128, i128, u8)> {
        let scale = self.scale.max(other.scale);
        Some((
            self.rescale(scale)?.unscaled,
            other.rescale(scale)?.unscaled,
            scale,
        ))
    }
}

impl PartialEq for Decimal {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Decimal {}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> Ordering {
        match self.aligned(*other) {
            Some((a, b, _)) => a.cmp(&b),
            // Too many digits to align: compare as doubles (only values beyond 38 digits).
            None => self.to_f64().total_cmp(&other.to_f64()),
        }
    }
}

impl Hash for Decimal {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Equal values hash alike whatever their scale: hash the value without trailing zeros.
        let (mut unscaled, mut scale) = (self.unscaled, self.scale);
        while scale > 0 && unscaled % 10 == 0 {
            unscaled /= 10;
            scale -= 1;
        }
        // An integer (the usual key) as one word, as `Value::Int` hashes.
        match i64::try_from(unscaled) {
            Ok(integer) if scale == 0 => integer.hash(state),
            _ => {
                unscaled.hash(state);
                scale.hash(state);
            }
        }
    }
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.scale == 0 {
            return write!(f, "{}", { self.unscaled });
        }
        let divisor = pow10(self.scale) as u128;
        let magnitude = self.unscaled.unsigned_abs();
        let sign = if self.unscaled < 0 { "-" } else { "" };
        write!(
            f,
            "{sign}{}.{:0width$}",
            magnitude / divisor,
            magnitude % divisor,
            width = self.scale as usize
        )
    }
}

/// One value of a row.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub enum Value {
    /// `NULL`.
    #[default]
    Null,
    /// A `BOOLEAN`.
    Bool(bool),
    /// Any integer type.
    Int(i64),
    /// `FLOAT` or `DOUBLE`.
    Double(f64),
    /// A `DECIMAL`.
    Decimal(Decimal),
    /// A string.
    String(CompactString),
    /// A `DATE`, days since 1970-01-01.
    Date(i32),
    /// A `TIMESTAMP` or `TIMESTAMP_LTZ`, epoch milliseconds.
    Timestamp(i64),
    /// A day-time interval, milliseconds.
    Interval(i64),
    /// A nested `ROW`.
    Row(Vec<Value>),
    /// An `ARRAY`.
    Array(Vec<Value>),
    /// A `MAP`, as its entries.
    Map(Vec<(Value, Value)>),
}

impl Value {
    /// Whether this is `NULL`.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// A string value.
    pub fn string(s: impl AsRef<str>) -> Value {
        Value::String(CompactString::new(s.as_ref()))
    }

    /// The kind's rank, for ordering values of different kinds.
    fn rank(&self) -> u8 {
        match self {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Int(_) | Value::Double(_) | Value::Decimal(_) => 2,
            Value::String(_) => 3,
            Value::Date(_) => 4,
            Value::Timestamp(_) => 5,
            Value::Interval(_) => 6,
            Value::Row(_) => 7,
            Value::Array(_) => 8,
            Value::Map(_) => 9,
        }
    }
}

/// Compares two numbers of any numeric kind.
fn compare_numbers(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => x.cmp(y),
        (Value::Double(x), Value::Double(y)) => x.total_cmp(y),
        (Value::Decimal(x), Value::Decimal(y)) => x.cmp(y),
        (Value::Int(x), Value::Decimal(y)) => Decimal::new(*x as i128, 0).cmp(y),
        (Value::Decimal(x), Value::Int(y)) => x.cmp(&Decimal::new(*y as i128, 0)),
        (Value::Int(x), Value::Double(y)) => (*x as f64).total_cmp(y),
        (Value::Double(x), Value::Int(y)) => x.total_cmp(&(*y as f64)),
        (Value::Decimal(x), Value::Double(y)) => x.to_f64().total_cmp(y),
        (Value::Double(x), Value::Decimal(y)) => x.total_cmp(&y.to_f64()),
        _ => Ordering::Equal,
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Value {}

impl PartialOrd for Value {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Value {
    /// A total order: `NULL` first, numbers by value across kinds, doubles by `total_cmp`.
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            // The most common pair first, without the general comparison of numbers.
            (Value::Int(a), Value::Int(b)) => a.cmp(b),
            (Value::Null, Value::Null) => Ordering::Equal,
            (Value::Bool(a), Value::Bool(b)) => a.cmp(b),
            (Value::String(a), Value::String(b)) => a.cmp(b),
            (Value::Date(a), Value::Date(b)) => a.cmp(b),
            (Value::Timestamp(a), Value::Timestamp(b)) => a.cmp(b),
            (Value::Interval(a), Value::Interval(b)) => a.cmp(b),
            (Value::Row(a), Value::Row(b)) | (Value::Array(a), Value::Array(b)) => a.cmp(b),
            (Value::Map(a), Value::Map(b)) => a.cmp(b),
            (a, b) if a.rank() == 2 && b.rank() == 2 => compare_numbers(a, b),
            (a, b) => a.rank().cmp(&b.rank()),
        }
    }
}

impl Hash for Value {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.rank().hash(state);
        match self {
            Value::Null => {}
            Value::Bool(b) => b.hash(state),
            // Numbers equal across kinds must hash alike: integers and integral decimals (of an
            // integer's range) as integers, other decimals without trailing zeros, doubles by their bits (a double equals an integer only by value, which
            // keys of one column's type never mix).
            Value::Int(i) => i.hash(state),
            Value::Decimal(d) => d.hash(state),
            Value::Double(d) => d.to_bits().hash(state),
            Value::String(s) => s.hash(state),
            Value::Date(d) => d.hash(state),
            Value::Timestamp(t) | Value::Interval(t) => t.hash(state),
            Value::Row(values) | Value::Array(values) => values.hash(state),
            Value::Map(entries) => entries.hash(state),
        }
    }
}

/// A row: one value per column of its schema.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Row(pub Vec<Value>);

impl Row {
    /// The value of column `index` (`NULL` past the end).
    pub fn get(&self, index: usize) -> &Value {
        static NULL: Value = Value::Null;
        self.0.get(index).unwrap_or(&NULL)
    }

    /// The values of `columns`, as a row (a key).
    pub fn project(&self, columns: &[usize]) -> Row {
        Row(columns.iter().map(|i| self.get(*i).clone()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    fn hash(value: &Value) -> u64 {
        let mut h = DefaultHasher::new();
        value.hash(&mut h);
        h.finish()
    }

    #[test]
    fn a_value_is_four_words() {
        // The size of every row's columns: a decimal's `i128` must not align it to 16 bytes.
        assert_eq!(std::mem::size_of::<Value>(), 32);
    }

    #[test]
    fn decimals_compare_hash_and_print_by_value() {
        let a = Value::Decimal(Decimal::new(1230, 3)); // 1.230
        let b = Value::Decimal(Decimal::new(123, 2)); // 1.23
        assert_eq!(a, b);
        assert_eq!(hash(&a), hash(&b));
        assert_eq!(Value::Int(5), Value::Decimal(Decimal::new(500, 2)));
        assert_eq!(
            hash(&Value::Int(5)),
            hash(&Value::Decimal(Decimal::new(500, 2)))
        );
        // At the edges of an integer's range, and past it.
        for i in [i64::MIN, -1, 0, i64::MAX] {
            let decimal = Value::Decimal(Decimal::new(i as i128 * 100, 2));
            assert_eq!(Value::Int(i), decimal);
            assert_eq!(hash(&Value::Int(i)), hash(&decimal), "{i}");
        }
        let past =
            |scale: u8| Decimal::new((i64::MAX as i128 + 1) * 10i128.pow(scale as u32), scale);
        assert_eq!(
            hash(&Value::Decimal(past(0))),
            hash(&Value::Decimal(past(3)))
        );
        assert_eq!(Decimal::new(1230, 3).to_string(), "1.230");
        assert_eq!(Decimal::new(-5, 3).to_string(), "-0.005");
        assert_eq!(Decimal::new(42, 0).to_string(), "42");
        // Half up, away from zero.
        assert_eq!(Decimal::new(1235, 3).rescale(2), Some(Decimal::new(124, 2)));
        assert_eq!(
            Decimal::new(-1235, 3).rescale(2),
            Some(Decimal::new(-124, 2))
        );
        assert_eq!({ Decimal::new(1234, 3).rescale(2).unwrap().unscaled }, 123);
        assert!(Decimal::new(99_999, 2).fits(5) && !Decimal::new(100_000, 2).fits(5));
    }

    #[test]
    fn values_have_a_total_order_with_null_first() {
        let mut values = vec![
            Value::string("b"),
            Value::Int(3),
            Value::Null,
            Value::Double(2.5),
            Value::string("a"),
        ];
        values.sort();
        assert_eq!(
            values,
            vec![
                Value::Null,
                Value::Double(2.5),
                Value::Int(3),
                Value::string("a"),
                Value::string("b")
            ]
        );
        assert_eq!(Value::Double(f64::NAN), Value::Double(f64::NAN));
    }

    #[test]
    fn types_print_as_flink_spells_them() {
        let row = DataType::Row(vec![
            Field::new("id", DataType::BigInt),
            Field::new("dateTime", DataType::Timestamp { precision: 3 }),
        ]);
        assert_eq!(row.to_string(), "ROW<`id` BIGINT, `dateTime` TIMESTAMP(3)>");
        assert_eq!(
            DataType::Decimal {
                precision: 23,
                scale: 3
            }
            .to_string(),
            "DECIMAL(23, 3)"
        );
    }
}

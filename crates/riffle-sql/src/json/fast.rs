//! The usual form of a JSON line read in one pass over its bytes, without serde.
//!
//! Files and topics written by programs hold JSON in a plain form: no escapes in keys, strings
//! without escapes, integers where the schema has integers. [`read_row`] reads that form
//! straight into the row's values, looking for a string's end with a vector search. Whatever
//! it is not sure of (an escape, a fraction in a `DOUBLE` or `DECIMAL` column, a value of the
//! wrong type, broken JSON, nesting deeper than serde_json allows) makes it give up with `None`,
//! and the line goes to the serde reader of the parent module, which makes the same row or the
//! error the user sees. So this is only ever a faster way to the serde reader's answer: a
//! property test checks that for any row and any damage to its text.

use crate::types::{DataType, Field, Value};

/// How deep arrays and objects may nest in a skipped value (serde_json's own limit is 128).
const MAX_DEPTH: usize = 100;

/// The columns of a schema as the reader matches them, made once per schema: each key's bytes
/// in the input with its closing quote, and, for a key of up to 16 such bytes, those bytes as
/// two words to compare with the line's in two instructions (byte by byte, the keys' compares
/// were a tenth of a scan).
pub(crate) struct Layout {
    keys: Vec<Key>,
}

struct Key {
    /// The key in the input (a column no one reads: its name behind the unread prefix).
    name: Box<str>,
    /// `name` and its closing quote, when no byte of it would have to be escaped in JSON (an
    /// escaped key is only ever matched by the serde reader).
    quoted: Option<Box<[u8]>>,
    /// The first 16 bytes of `quoted` as two little-endian words, and the masks of the bytes
    /// it fills (`None`: longer).
    words: Option<([u64; 2], [u64; 2])>,
    /// Whether a column reads the value (else it is skipped and left `NULL`).
    read: bool,
    value: Shape,
}

/// A value's type, with the layouts of the rows in it.
struct Shape {
    ty: DataType,
    /// The layout of a `ROW`'s fields.
    row: Option<Layout>,
    /// The shape of an `ARRAY`'s items.
    element: Option<Box<Shape>>,
}

impl Layout {
    /// The layout of `fields`.
    pub(crate) fn new(fields: &[Field]) -> Layout {
        Layout {
            keys: fields.iter().map(Key::new).collect(),
        }
    }
}

impl Key {
    fn new(field: &Field) -> Key {
        let unread = crate::lower::unread_name(&field.name);
        let name = unread.unwrap_or(&field.name);
        let plain = name.bytes().all(|b| b != b'"' && b != b'\\' && b >= b' ');
        let quoted: Option<Box<[u8]>> =
            plain.then(|| [name.as_bytes(), b"\""].concat().into_boxed_slice());
        let words = quoted.as_deref().filter(|q| q.len() <= 16).map(|q| {
            let mut bytes = [0u8; 16];
            bytes[..q.len()].copy_from_slice(q);
            let mut mask = [0u8; 16];
            mask[..q.len()].fill(0xff);
            let word = |b: &[u8; 16], i: usize| {
                u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
            };
            (
                [word(&bytes, 0), word(&bytes, 1)],
                [word(&mask, 0), word(&mask, 1)],
            )
        });
        Key {
            name: name.into(),
            quoted,
            words,
            read: unread.is_none(),
            value: Shape::new(&field.ty),
        }
    }
}

impl Shape {
    fn new(ty: &DataType) -> Shape {
        Shape {
            ty: ty.clone(),
            row: match ty {
                DataType::Row(fields) => Some(Layout::new(fields)),
                _ => None,
            },
            element: match ty {
                DataType::Array(element) => Some(Box::new(Shape::new(element))),
                _ => None,
            },
        }
    }
}

/// The row `line` holds, in the order of `layout`'s columns, with room for `spare` values more;
/// `None` if the line is not in the usual form (then the serde reader decides).
pub(super) fn read_row(line: &str, layout: &Layout, spare: usize) -> Option<Vec<Value>> {
    let mut cursor = Cursor {
        bytes: line.as_bytes(),
        text: line,
        at: 0,
    };
    cursor.space();
    let values = cursor.object(layout, spare)?;
    cursor.space();
    (cursor.at == cursor.bytes.len()).then_some(values)
}

struct Cursor<'a> {
    bytes: &'a [u8],
    /// The same bytes as text (for borrowing strings without checking them again).
    text: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// Skips JSON's whitespace.
    fn space(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
        }
    }

    /// Consumes `byte` (after whitespace), or gives up.
    fn expect(&mut self, byte: u8) -> Option<()> {
        self.space();
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// An object at the cursor as the values of `fields` (absent ones `NULL`).
    fn object(&mut self, layout: &Layout, spare: usize) -> Option<Vec<Value>> {
        self.expect(b'{')?;
        let keys = &layout.keys;
        let mut values = Vec::with_capacity(keys.len() + spare);
        values.resize_with(keys.len(), || Value::Null);
        self.space();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(values);
        }
        // Lines of a file or topic list their keys in one order: the column after the last
        // one found is tried first, by comparing its name in place. A column no one reads
        // keeps its name (behind a prefix) to be found so too, and its value is skipped.
        let mut next = 0;
        loop {
            self.expect(b'"')?;
            let found = match keys.get(next) {
                Some(k) if self.key_is(k) => Some(next),
                _ => {
                    let key = self.string_body()?;
                    keys.iter().position(|k| &*k.name == key)
                }
            };
            self.expect(b':')?;
            self.space();
            match found {
                // A repeated key keeps its last value, as the serde reader does.
                Some(i) => {
                    next = i + 1;
                    if keys[i].read {
                        self.value(&keys[i].value, &mut values[i])?;
                    } else {
                        // Left `NULL`, as the serde reader leaves it.
                        self.skip(0)?;
                    }
                }
                None => self.skip(0)?,
            }
            self.space();
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(values);
                }
                _ => return None,
            }
        }
    }

    /// Whether the key at the cursor (its opening quote consumed) is `key`, with no escape;
    /// if it is, the cursor is left after its closing quote.
    #[inline]
    fn key_is(&mut self, key: &Key) -> bool {
        let Some(quoted) = key.quoted.as_deref() else {
            return false;
        };
        let rest = &self.bytes[self.at..];
        let equal = match (key.words, rest.get(..16)) {
            (Some(([w0, w1], [m0, m1])), Some(chunk)) => {
                let word = |i: usize| {
                    u64::from_le_bytes(chunk[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
                };
                (word(0) & m0) == w0 && (word(1) & m1) == w1
            }
            _ => rest.starts_with(quoted),
        };
        if equal {
            self.at += quoted.len();
        }
        equal
    }

    /// The text of a string whose opening quote was just consumed, the cursor left after its
    /// closing quote; `None` if it has an escape or a raw control character (or no end).
    fn string_body(&mut self) -> Option<&'a str> {
        let start = self.at;
        let end = special(&self.bytes[start..])?;
        if self.bytes[start + end] != b'"' {
            return None;
        }
        self.at = start + end + 1;
        // Both ends are ASCII quotes, so char boundaries.
        self.text.get(start..start + end)
    }

    /// Skips a JSON number at the cursor, checking it against JSON's grammar.
    fn skip_number(&mut self) -> Option<()> {
        let bytes = self.bytes;
        let mut at = self.at;
        if bytes.get(at) == Some(&b'-') {
            at += 1;
        }
        let digits = |mut at: usize| {
            while bytes.get(at).is_some_and(u8::is_ascii_digit) {
                at += 1;
            }
            at
        };
        match bytes.get(at)? {
            b'0' => at += 1,
            b'1'..=b'9' => at = digits(at),
            _ => return None,
        }
        if bytes.get(at) == Some(&b'.') {
            let end = digits(at + 1);
            if end == at + 1 {
                return None;
            }
            at = end;
        }
        if let Some(b'e' | b'E') = bytes.get(at) {
            at += 1;
            if let Some(b'+' | b'-') = bytes.get(at) {
                at += 1;
            }
            let end = digits(at);
            if end == at {
                return None;
            }
            at = end;
        }
        self.at = at;
        Some(())
    }

    /// An integer at the cursor that `i64` holds (`-0` is not one: serde_json reads it as a
    /// float), read in one pass over its digits.
    fn integer(&mut self) -> Option<i64> {
        let bytes = self.bytes;
        let negative = bytes.get(self.at) == Some(&b'-');
        let first = self.at + usize::from(negative);
        let mut at = first;
        let mut magnitude: u64 = 0;
        while let Some(&b) = bytes.get(at) {
            if !b.is_ascii_digit() {
                break;
            }
            magnitude = magnitude
                .checked_mul(10)?
                .checked_add(u64::from(b - b'0'))?;
            at += 1;
        }
        let count = at - first;
        // No digits, a leading zero, a fraction or an exponent: not an integer of JSON.
        if count == 0 || (count > 1 && bytes[first] == b'0') {
            return None;
        }
        if let Some(b'.' | b'e' | b'E') = bytes.get(at) {
            return None;
        }
        let value = if negative {
            if magnitude == 0 || magnitude > i64::MIN.unsigned_abs() {
                return None;
            }
            (magnitude as i64).wrapping_neg()
        } else {
            i64::try_from(magnitude).ok()?
        };
        self.at = at;
        Some(value)
    }

    /// Consumes the literal `word` (its first byte already seen), comparing in place (a call
    /// to `memcmp` for four bytes cost more than the compare).
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let found = self.bytes.get(self.at..self.at + word.len())?;
        found
            .iter()
            .zip(word)
            .all(|(a, b)| a == b)
            .then(|| self.at += word.len())
    }

    /// Reads a value of type `ty` at the cursor into `out` (which holds `NULL`); `None` where
    /// the serde reader is to decide. Written in place: a value returned by the call and then
    /// moved into the row was read back from memory still being written (a stalled load, a
    /// twentieth of a scan).
    fn value(&mut self, shape: &Shape, out: &mut Value) -> Option<()> {
        let ty = &shape.ty;
        *out = match self.peek()? {
            b'n' => {
                self.literal(b"null")?;
                return Some(());
            }
            b'"' => {
                self.at += 1;
                let s = self.string_body()?;
                match ty {
                    DataType::Varchar => {
                        // Built in the row's own slot: a string made elsewhere and moved in
                        // was read back while its bytes were still being written.
                        *out = Value::String(compact_str::CompactString::const_new(""));
                        if let Value::String(text) = out {
                            text.push_str(s);
                        }
                        return Some(());
                    }
                    t if t.is_timestamp() => Value::Timestamp(crate::format::parse_timestamp(s)?),
                    DataType::Date => Value::Date(crate::format::parse_date(s)?),
                    DataType::Decimal { scale, .. } => {
                        Value::Decimal(crate::expr::parse_decimal(s)?.rescale(*scale)?)
                    }
                    _ => return None,
                }
            }
            b'-' | b'0'..=b'9' => match ty {
                t if t.is_integer() => Value::Int(self.integer()?),
                t if t.is_timestamp() => Value::Timestamp(self.integer()?),
                // An integer's `f64` is what serde_json gives; a fraction is left to its own
                // rounding.
                DataType::Double | DataType::Float => Value::Double(self.integer()? as f64),
                _ => return None,
            },
            b't' if *ty == DataType::Boolean => {
                self.literal(b"true")?;
                Value::Bool(true)
            }
            b'f' if *ty == DataType::Boolean => {
                self.literal(b"false")?;
                Value::Bool(false)
            }
            b'{' => Value::Row(self.object(shape.row.as_ref()?, 0)?),
            b'[' => Value::Array(self.array(shape.element.as_deref()?)?),
            _ => return None,
        };
        Some(())
    }

    /// The items of an array of `element`s at the cursor.
    fn array(&mut self, element: &Shape) -> Option<Vec<Value>> {
        self.at += 1;
        let mut items = Vec::new();
        self.space();
        if self.peek()? == b']' {
            self.at += 1;
            return Some(items);
        }
        loop {
            self.space();
            let mut item = Value::Null;
            self.value(element, &mut item)?;
            items.push(item);
            self.space();
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(items);
                }
                _ => return None,
            }
        }
    }

    /// Skips a value no column reads, checking that it is JSON.
    fn skip(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'"' => {
                self.at += 1;
                self.string_body().map(drop)
            }
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'-' | b'0'..=b'9' => self.skip_number(),
            open @ (b'{' | b'[') => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                let close = if open == b'{' { b'}' } else { b']' };
                self.at += 1;
                self.space();
                if self.peek()? == close {
                    self.at += 1;
                    return Some(());
                }
                loop {
                    self.space();
                    if open == b'{' {
                        self.expect(b'"')?;
                        self.string_body()?;
                        self.expect(b':')?;
                        self.space();
                    }
                    self.skip(depth + 1)?;
                    self.space();
                    match self.peek()? {
                        b',' => self.at += 1,
                        b if b == close => {
                            self.at += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            _ => None,
        }
    }
}

/// The index of the first byte of `bytes` that ends a plain string: a quote, a backslash or a
/// control character. Eight bytes at a time: each test sets the high bit of a byte that passes
/// it (bits above the first such byte may be wrong, so only the lowest is read).
fn special(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let mut chunks = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in chunks.by_ref() {
        let x = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        let found = zero(x ^ (ONES * u64::from(b'"'))) | zero(x ^ (ONES * u64::from(b'\\'))) | {
            // Bytes below 0x20.
            x.wrapping_sub(ONES * 0x20) & !x & HIGH
        };
        if found != 0 {
            return Some(at + (found.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < b' ')
        .map(|i| at + i)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::types::{Row, Schema};

    fn field(name: &str, ty: DataType) -> Field {
        Field {
            name: name.into(),
            ty,
            nullable: true,
        }
    }

    /// Columns of every kind the reader knows, a nested row and an array among them.
    fn schema() -> Schema {
        Schema {
            fields: vec![
                field("id", DataType::BigInt),
                field("name", DataType::Varchar),
                field("price", DataType::Double),
                field("at", DataType::Timestamp { precision: 3 }),
                field("d", DataType::Date),
                field(
                    "amount",
                    DataType::Decimal {
                        precision: 10,
                        scale: 2,
                    },
                ),
                field("ok", DataType::Boolean),
                field(
                    "r",
                    DataType::Row(vec![
                        field("a", DataType::Int),
                        field("b", DataType::Varchar),
                    ]),
                ),
                field("xs", DataType::Array(Box::new(DataType::BigInt))),
            ],
        }
    }

    /// [`schema`] as a scan that reads neither `name` nor `r.b` decodes it (their names behind
    /// the unread prefix).
    fn pruned_schema() -> Schema {
        let mut schema = schema();
        let unread = |f: &mut Field| f.name = format!("{}{}", crate::lower::UNREAD, f.name);
        for field in &mut schema.fields {
            match field.name.as_str() {
                "name" => unread(field),
                "r" => {
                    if let DataType::Row(inner) = &mut field.ty {
                        unread(&mut inner[1]);
                    }
                }
                _ => {}
            }
        }
        schema
    }

    /// What the serde reader makes of `line`.
    fn serde(line: &str, schema: &Schema) -> Result<Row, String> {
        super::super::read_row_through_serde(line, schema, 1)
    }

    #[test]
    fn a_nexmark_line_is_read_in_the_usual_form() {
        let bid = DataType::Row(vec![
            field("auction", DataType::BigInt),
            field("price", DataType::BigInt),
            field("dateTime", DataType::Timestamp { precision: 3 }),
            field("extra", DataType::Varchar),
        ]);
        let schema = Schema {
            fields: vec![field("event_type", DataType::Int), field("bid", bid)],
        };
        let line = r#"{"event_type":2,"person":null,"auction":null,"bid":{"auction":1007,"bidder":2001,"price":1811,"channel":"Google","url":"https://www.nexmark.com/a/b/c/item.htm?query=1","dateTime":"2026-01-15 00:00:00.004","extra":"qzkxv\u00e9"}}"#;
        // An escape in a value read: the serde reader's.
        assert_eq!(read_row(line, &Layout::new(&schema.fields), 1), None);
        let line = line.replace("\\u00e9", "é");
        let row = read_row(&line, &Layout::new(&schema.fields), 1).expect("the usual form");
        assert_eq!(Ok(Row(row.clone())), serde(&line, &schema));
        assert_eq!(row[0], Value::Int(2));
        let Value::Row(bid) = &row[1] else {
            panic!("{row:?}")
        };
        assert_eq!(bid[0], Value::Int(1007));
        assert_eq!(bid[3], Value::string("qzkxvé"));
        assert!(row.capacity() >= 3);
    }

    #[test]
    fn edges_of_numbers_and_literals_go_to_serde() {
        let s = schema();
        for line in [
            r#"{"id":-0}"#,
            r#"{"id":9223372036854775808}"#,
            r#"{"id":-9223372036854775809}"#,
            r#"{"id":1e3}"#,
            r#"{"id":07}"#,
            r#"{"price":0.1}"#,
            r#"{"price":18446744073709551615}"#,
            r#"{"amount":12.5}"#,
            r#"{"name":7}"#,
            r#"{"name":true}"#,
            r#"{"name":"a\"b"}"#,
            r#"{"n\u0061me":"x"}"#,
            r#"{"id":1,}"#,
            r#"{"id":1} x"#,
            r#"[1]"#,
            "{\"name\":\"a\u{1}\"}",
        ] {
            assert_eq!(read_row(line, &Layout::new(&s.fields), 0), None, "{line}");
        }
        for line in [
            r#"{"id":-9223372036854775808,"price":-3,"amount":"12.5","ok":false}"#,
            r#" { "id" : 1 , "xs" : [ 1 , -2 ] , "r" : { "b" : "é" } , "u" : [{"v":[1.5e-3,null,true]}] } "#,
        ] {
            let fast = read_row(line, &Layout::new(&s.fields), 1).expect(line);
            assert_eq!(Ok(Row(fast)), serde(line, &s), "{line}");
        }
    }

    /// Any JSON value, strings with escapes and control characters among them.
    fn any_json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i64>().prop_map(|i| json!(i)),
            any::<u64>().prop_map(|u| json!(u)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            "\\PC{0,20}".prop_map(serde_json::Value::String),
            "[\\x00-\\x7f]{0,5}".prop_map(serde_json::Value::String),
            Just(json!("2026-01-15 00:00:00.004")),
            Just(json!("2026-01-15")),
            Just(json!("12.345")),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
                proptest::collection::btree_map("[a-z]{1,2}|id|b", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// An object of the schema's columns, each absent, `NULL`, of its own kind or anything
    /// else, with unknown keys among them.
    fn any_line() -> impl Strategy<Value = String> {
        let names = [
            "id", "name", "price", "at", "d", "amount", "ok", "r", "xs", "other",
        ];
        let value = prop_oneof![
            3 => any_json(),
            1 => any::<i64>().prop_map(|i| json!(i)),
            1 => "[a-z é]{0,30}".prop_map(serde_json::Value::String),
            1 => (any::<i32>(), "[a-z]{0,5}").prop_map(|(a, b)| json!({"a": a, "b": b, "z": [1]})),
            1 => proptest::collection::vec(any::<i64>(), 0..4).prop_map(|xs| json!(xs)),
        ];
        (
            proptest::collection::vec((proptest::sample::select(names.to_vec()), value), 0..8),
            any::<bool>(),
        )
            .prop_map(|(entries, pretty)| {
                let object: serde_json::Map<String, serde_json::Value> = entries
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect();
                let object = serde_json::Value::Object(object);
                if pretty {
                    serde_json::to_string_pretty(&object).unwrap()
                } else {
                    object.to_string()
                }
            })
    }

    proptest! {
        /// Eight bytes at a time finds what a byte-by-byte search finds.
        #[test]
        fn the_end_of_a_string_is_found_as_byte_by_byte(
            bytes in proptest::collection::vec(
                prop_oneof![any::<u8>(), proptest::sample::select(&b"\"\\\x1f\x20a"[..])],
                0..40,
            ),
        ) {
            let naive = bytes.iter().position(|&b| b == b'"' || b == b'\\' || b < b' ');
            prop_assert_eq!(special(&bytes), naive);
        }

        /// Whatever the fast reader reads, the serde reader reads the same; a clean line is
        /// read by it; damage to a line never makes the two disagree.
        #[test]
        fn the_fast_reader_agrees_with_serde(
            line in any_line(),
            damage in proptest::collection::vec(
                (any::<usize>(), proptest::sample::select(&b"{}[]\":,\\ 0-9aeflnrtu.\x01"[..])),
                0..3,
            ),
        ) {
            let s = schema();
            if let Some(values) = read_row(&line, &Layout::new(&s.fields), 1) {
                prop_assert_eq!(Ok(Row(values)), serde(&line, &s), "{}", line);
            }
            // Unread columns: matched by name, skipped, left NULL, as serde leaves them.
            let pruned = pruned_schema();
            if let Some(values) = read_row(&line, &Layout::new(&pruned.fields), 1) {
                prop_assert_eq!(Ok(Row(values)), serde(&line, &pruned), "{}", line);
            }
            let mut bytes = line.into_bytes();
            for (at, byte) in damage {
                if !bytes.is_empty() {
                    let at = at % bytes.len();
                    bytes[at] = byte;
                }
            }
            let damaged = String::from_utf8_lossy(&bytes).into_owned();
            if let Some(values) = read_row(&damaged, &Layout::new(&s.fields), 1) {
                prop_assert_eq!(Ok(Row(values)), serde(&damaged, &s), "{}", damaged);
            }
        }
    }
}

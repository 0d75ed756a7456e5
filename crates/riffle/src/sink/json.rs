//! JSON written by hand, straight into a sink's output buffer, byte for byte what `serde_json`
//! writes: for a [`JsonEncoder`] of a record type a job writes a lot of
//! ([`FileSink::encoder`](crate::sink::FileSink::encoder),
//! [`ExactlyOnceFileSink::encoder`](crate::sink::ExactlyOnceFileSink::encoder)).
//!
//! By default the file sinks encode each record with its derived `Serialize` through
//! `serde_json`, which looks at every byte of every string (field names included) for characters
//! to escape. An encoder writes the field names as constants and checks a string for escapes in
//! one pass over its bytes, copying it whole when there are none (nearly always).
//!
//! ```
//! use riffle::sink::json;
//! struct Visit { user: u64, page: String }
//! fn encode(visit: &Visit, out: &mut Vec<u8>) {
//!     out.extend_from_slice(b"{\"user\":");
//!     json::push_u64(out, visit.user);
//!     out.extend_from_slice(b",\"page\":");
//!     json::push_str(out, &visit.page);
//!     out.push(b'}');
//! }
//! let mut out = Vec::new();
//! encode(&Visit { user: 7, page: "/a \"b\"".into() }, &mut out);
//! assert_eq!(out, br#"{"user":7,"page":"/a \"b\""}"#);
//! ```

/// Appends one record as one JSON document (no line break) to the buffer.
pub type JsonEncoder<T> = fn(&T, &mut Vec<u8>);

/// Whether `byte` is written escaped in a JSON string: `"`, `\` and the control characters.
#[inline(always)]
fn escaped(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// Whether any of the 8 bytes in `word` is escaped in a JSON string (bit tricks on the whole
/// word: a byte below 0x20, or equal to `"` or `\`; exact, no false answers either way).
#[inline(always)]
fn word_has_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word;
    let quote = word ^ (ONES * u64::from(b'"'));
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let zero_in = |w: u64| w.wrapping_sub(ONES) & !w;
    (below_space | zero_in(quote) | zero_in(backslash)) & HIGHS != 0
}

/// Whether anything in `bytes` is escaped in a JSON string, 8 bytes at a time.
#[inline]
fn has_escape(bytes: &[u8]) -> bool {
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        if word_has_escape(u64::from_le_bytes(word.try_into().expect("8 bytes"))) {
            return true;
        }
    }
    words.remainder().iter().any(|&b| escaped(b))
}

/// Appends `value` as a JSON string (quoted), escaped as `serde_json` escapes it: `\"`, `\\`,
/// `\b \f \n \r \t`, other control characters as `\u00xx`; everything else as it is.
#[inline]
pub fn push_str(out: &mut Vec<u8>, value: &str) {
    let bytes = value.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    if has_escape(bytes) {
        push_escaped(out, bytes);
    } else {
        out.extend_from_slice(bytes);
    }
    out.push(b'"');
}

/// The slow path of [`push_str`]: a string with something to escape.
#[cold]
fn push_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut run = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        if !escaped(byte) {
            continue;
        }
        out.extend_from_slice(&bytes[run..i]);
        run = i + 1;
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(byte >> 4) as usize],
                HEX[(byte & 0xf) as usize],
            ]),
        }
    }
    out.extend_from_slice(&bytes[run..]);
}

/// Appends an unsigned integer.
#[inline]
pub fn push_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// Appends a signed integer.
#[inline]
pub fn push_i64(out: &mut Vec<u8>, value: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// Appends `true` or `false`.
#[inline]
pub fn push_bool(out: &mut Vec<u8>, value: bool) {
    out.extend_from_slice(if value { b"true" } else { b"false" });
}

/// Encodes `batch`'s records as JSON lines into `lines` (emptied first), draining the batch.
/// Stops at the first record that cannot be encoded and returns its error; the lines before it
/// stay in `lines`, to be written.
pub(crate) fn encode_lines<T: serde::Serialize>(
    batch: &mut Vec<crate::record::Record<T>>,
    encoder: Option<JsonEncoder<T>>,
    lines: &mut Vec<u8>,
) -> Option<serde_json::Error> {
    lines.clear();
    for record in batch.drain(..) {
        if let Err(e) = encode_into(&record.value, encoder, lines) {
            return Some(e);
        }
        lines.push(b'\n');
    }
    None
}

/// Encodes `value` with `encoder` if there is one, else with its `Serialize` through
/// `serde_json`; appends to `out`. On an error nothing is appended.
pub(crate) fn encode_into<T: serde::Serialize>(
    value: &T,
    encoder: Option<JsonEncoder<T>>,
    out: &mut Vec<u8>,
) -> serde_json::Result<()> {
    match encoder {
        Some(encode) => {
            encode(value, out);
            Ok(())
        }
        None => {
            let start = out.len();
            serde_json::to_writer(&mut *out, value).inspect_err(|_| out.truncate(start))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ours(value: &str) -> String {
        let mut out = Vec::new();
        push_str(&mut out, value);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_character_below_128_is_escaped_as_serde_json_escapes_it() {
        for byte in 0u8..128 {
            let value = format!("a{}b", byte as char);
            assert_eq!(
                ours(&value),
                serde_json::to_string(&value).unwrap(),
                "{byte}"
            );
        }
        for value in [
            "",
            "plain",
            "\"",
            "\\",
            "é ü 日本 \u{7f} \u{2028}",
            "x\ny\"z\\",
        ] {
            assert_eq!(ours(value), serde_json::to_string(value).unwrap());
        }
    }

    #[test]
    fn integers_and_booleans_are_written_as_serde_json_writes_them() {
        for value in [0u64, 1, 9, 10, 12345678901234, u64::MAX] {
            let mut out = Vec::new();
            push_u64(&mut out, value);
            assert_eq!(out, serde_json::to_vec(&value).unwrap());
        }
        for value in [0i64, -1, 42, i64::MIN, i64::MAX] {
            let mut out = Vec::new();
            push_i64(&mut out, value);
            assert_eq!(out, serde_json::to_vec(&value).unwrap());
        }
        for value in [true, false] {
            let mut out = Vec::new();
            push_bool(&mut out, value);
            assert_eq!(out, serde_json::to_vec(&value).unwrap());
        }
    }

    #[test]
    fn a_failed_encoding_appends_nothing() {
        let mut map = std::collections::HashMap::new();
        map.insert(vec![1u8], 2u8); // a map key that is not a string: serde_json refuses it
        let mut out = b"kept".to_vec();
        assert!(encode_into(&map, None, &mut out).is_err());
        assert_eq!(out, b"kept");
    }

    #[test]
    fn the_word_test_finds_an_escape_at_every_position_and_nothing_else() {
        for position in 0..8 {
            for byte in 0u8..=255 {
                let mut word = *b"abcdefgh";
                word[position] = byte;
                assert_eq!(
                    word_has_escape(u64::from_le_bytes(word)),
                    escaped(byte),
                    "byte {byte} at {position}"
                );
            }
        }
        // Bytes around the escaped ones, next to each other (borrows between bytes).
        for a in [
            0u8, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x5b, 0x5c, 0x5d, 0x7f, 0x80, 0xff,
        ] {
            for b in [
                0u8, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x5b, 0x5c, 0x5d, 0x7f, 0x80, 0xff,
            ] {
                let word = [a, b, 0x41, 0x41, b, a, 0x41, 0x41];
                assert_eq!(
                    word_has_escape(u64::from_le_bytes(word)),
                    escaped(a) || escaped(b),
                    "{a:#x} {b:#x}"
                );
            }
        }
    }

    proptest! {
        #[test]
        fn any_string_is_written_as_serde_json_writes_it(value in any::<String>()) {
            prop_assert_eq!(ours(&value), serde_json::to_string(&value).unwrap());
        }
    }
}

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

/// Appends `value` as a JSON string (quoted), escaped as `serde_json` escapes it: `\"`, `\\`,
/// `\b \f \n \r \t`, other control characters as `\u00xx`; everything else as it is.
#[inline]
pub fn push_str(out: &mut Vec<u8>, value: &str) {
    let bytes = value.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    // One pass that the compiler vectorizes: does anything need escaping at all?
    if !bytes.iter().fold(false, |any, &b| any | escaped(b)) {
        out.extend_from_slice(bytes);
    } else {
        push_escaped(out, bytes);
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

    proptest! {
        #[test]
        fn any_string_is_written_as_serde_json_writes_it(value in any::<String>()) {
            prop_assert_eq!(ours(&value), serde_json::to_string(&value).unwrap());
        }
    }
}

//! A decoder of a click's JSON text that knows its five fields.
//!
//! The form every producer of clicks writes (one object, no whitespace, no escapes, integers
//! without fraction or exponent) is read in one pass over the bytes: no tokenizer, no visitor,
//! and no allocation for text of up to 24 bytes (see [`CompactString`]). Anything else (spaces,
//! escapes, unknown or repeated fields, a field of the wrong type, broken JSON) is handed to
//! `serde_json`, so the result, and the error of a bad record, is exactly what
//! `serde_json::from_slice::<Click>` gives.

use compact_str::CompactString;

use crate::Click;

impl Click {
    /// Decodes a click from one JSON object: exactly what `serde_json::from_slice::<Click>`
    /// returns, its errors included, in a fraction of its time for the usual form.
    ///
    /// ```
    /// use riffle_clicks::Click;
    /// let click = Click::from_json(
    ///     br#"{"user_id":7,"url":"/cart","user_agent":"curl/8.11.0","ip":"1.2.3.4","event_time":5}"#,
    /// )
    /// .unwrap();
    /// assert_eq!((click.user_id, click.url.as_str(), click.event_time), (7, "/cart", 5));
    /// let error = Click::from_json(br#"{"user_id":"7"}"#).unwrap_err();
    /// assert!(error.to_string().starts_with("invalid type: string \"7\", expected u64"));
    /// ```
    pub fn from_json(json: &[u8]) -> serde_json::Result<Click> {
        match std::str::from_utf8(json) {
            Ok(text) => Click::from_json_str(text),
            Err(_) => serde_json::from_slice(json),
        }
    }

    /// As [`from_json`](Click::from_json), for text already known to be UTF-8.
    pub fn from_json_str(json: &str) -> serde_json::Result<Click> {
        match read_click(json) {
            Some(click) => Ok(click),
            None => serde_json::from_str(json),
        }
    }
}

/// The click in `json` if it has the usual form; `None` leaves it to `serde_json`.
fn read_click(json: &str) -> Option<Click> {
    let bytes = json.as_bytes();
    if bytes.first() != Some(&b'{') {
        return None;
    }
    let mut at = 1;
    let mut user_id = None;
    let mut url = None;
    let mut user_agent = None;
    let mut ip = None;
    let mut event_time = None;
    loop {
        // The key, with its quotes and the colon: no need to look for its end.
        let key = bytes.get(at..)?;
        // A repeated field is an error serde_json words: leave it to it.
        if key.starts_with(b"\"user_id\":") && user_id.is_none() {
            let (value, next) = unsigned(bytes, at + 10)?;
            user_id = Some(value);
            at = next;
        } else if key.starts_with(b"\"url\":") && url.is_none() {
            let (value, next) = text(json, at + 6)?;
            url = Some(value);
            at = next;
        } else if key.starts_with(b"\"user_agent\":") && user_agent.is_none() {
            let (value, next) = text(json, at + 13)?;
            user_agent = Some(value);
            at = next;
        } else if key.starts_with(b"\"ip\":") && ip.is_none() {
            let (value, next) = text(json, at + 5)?;
            ip = Some(value);
            at = next;
        } else if key.starts_with(b"\"event_time\":") && event_time.is_none() {
            let (value, next) = signed(bytes, at + 13)?;
            event_time = Some(value);
            at = next;
        } else {
            return None;
        }
        match bytes.get(at)? {
            b',' => at += 1,
            b'}' => break,
            _ => return None,
        }
    }
    if at + 1 != bytes.len() {
        return None;
    }
    Some(Click {
        user_id: user_id?,
        url: url?,
        user_agent: user_agent?,
        ip: ip?,
        event_time: event_time?,
    })
}

/// The end of the string whose first byte is at `start` (after its opening quote): the index
/// of its closing quote; `None` if it has an escape or a control character (or no end).
fn string_end(json: &[u8], start: usize) -> Option<usize> {
    let rest = json.get(start..)?;
    // Short strings (most values) are scanned byte by byte; the rest by the vector search.
    let short = rest.len().min(16);
    let end = match rest[..short]
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < b' ')
    {
        Some(end) => end,
        None => short + memchr::memchr2(b'"', b'\\', &rest[short..])?,
    };
    if rest[end] != b'"' {
        return None;
    }
    // JSON forbids raw control characters in strings: serde_json words that error. (A fold
    // without an early exit, which the compiler turns into vector instructions.)
    let control = rest[short.min(end)..end]
        .iter()
        .fold(false, |found, &b| found | (b < b' '));
    (!control).then_some(start + end)
}

/// A string value at `at` (its opening quote), as text, and the index after it.
fn text(json: &str, at: usize) -> Option<(CompactString, usize)> {
    if json.as_bytes().get(at) != Some(&b'"') {
        return None;
    }
    let end = string_end(json.as_bytes(), at + 1)?;
    // Both ends are ASCII quotes, so char boundaries.
    Some((CompactString::new(json.get(at + 1..end)?), end + 1))
}

/// The digits of an unsigned JSON integer at `at`: its value and the index after it. `None`
/// for no digits, a leading zero, or more than `u64` holds.
fn digits(json: &[u8], at: usize) -> Option<(u64, usize)> {
    let mut value: u64 = 0;
    let mut end = at;
    while let Some(&b) = json.get(end) {
        if !b.is_ascii_digit() {
            break;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
        end += 1;
    }
    let count = end - at;
    if count == 0 || (count > 1 && json[at] == b'0') {
        return None;
    }
    // A fraction or an exponent makes it a float: serde_json's type error.
    if matches!(json.get(end), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    Some((value, end))
}

fn unsigned(json: &[u8], at: usize) -> Option<(u64, usize)> {
    digits(json, at)
}

fn signed(json: &[u8], at: usize) -> Option<(i64, usize)> {
    if json.get(at) == Some(&b'-') {
        let (magnitude, next) = digits(json, at + 1)?;
        // serde_json reads `-0` as a float (-0.0), a type error for an i64.
        if magnitude == 0 || magnitude > i64::MIN.unsigned_abs() {
            return None;
        }
        Some(((magnitude as i64).wrapping_neg(), next))
    } else {
        let (value, next) = digits(json, at)?;
        Some((i64::try_from(value).ok()?, next))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn click() -> Click {
        Click {
            user_id: 61033,
            url: "/p/232".into(),
            user_agent: "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X)".into(),
            ip: "48.243.95.25".into(),
            event_time: 1764400601148,
        }
    }

    /// What serde_json makes of `json`: the click, or its error message.
    fn serde(json: &[u8]) -> Result<Click, String> {
        serde_json::from_slice(json).map_err(|e| e.to_string())
    }

    fn ours(json: &[u8]) -> Result<Click, String> {
        Click::from_json(json).map_err(|e| e.to_string())
    }

    #[test]
    fn the_usual_form_is_read_without_serde_json() {
        let json = serde_json::to_string(&click()).unwrap();
        assert_eq!(read_click(&json), Some(click()));
        // Fields in any order.
        let json = r#"{"ip":"48.243.95.25","event_time":1764400601148,"url":"/p/232","user_id":61033,"user_agent":"Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X)"}"#;
        assert_eq!(read_click(json), Some(click()));
    }

    #[test]
    fn every_unusual_form_gives_what_serde_json_gives() {
        let cases: &[&[u8]] = &[
            br#"{"user_id":"7","url":"/","user_agent":"a","ip":"1.2.3.4","event_time":5}"#,
            br#"{"user_id":7,"url":5,"user_agent":"a","ip":"1.2.3.4","event_time":5}"#,
            br#"{"user_id":7,"url":"/","user_agent":"a","ip":"1.2.3.4","event_time":5.0}"#,
            br#"{"user_id":7,"url":"/","user_agent":"a","ip":"1.2.3.4","event_time":5e3}"#,
            br#"{"user_id":-7,"url":"/","user_agent":"a","ip":"1.2.3.4","event_time":5}"#,
            br#"{"user_id":07,"url":"/","user_agent":"a","ip":"1.2.3.4","event_time":5}"#,
            br#"{"user_id":18446744073709551616,"url":"/","user_agent":"a","ip":"1.2.3.4","event_time":5}"#,
            br#"{"user_id":7,"url":"/","user_agent":"a","ip":"1.2.3.4","event_time":9223372036854775808}"#,
            br#"{"user_id":7,"url":"/","user_agent":"a","ip":"1.2.3.4","event_time":-9223372036854775808}"#,
            br#"{"user_id":7,"url":"/","user_agent":"a","ip":"1.2.3.4","event_time":-9223372036854775809}"#,
            br#"{"user_id":7,"url":"/","user_agent":"a","ip":"1.2.3.4","event_time":-0}"#,
            br#"{"user_id":7,"url":"/","user_agent":"a","ip":"1.2.3.4"}"#,
            br#"{"user_id":7,"user_id":8,"url":"/","user_agent":"a","ip":"1.2.3.4","event_time":5}"#,
            br#"{"user_id":7,"url":"/a\"b","user_agent":"a\\b","ip":"1.2.3.4","event_time":5}"#,
            br#"{"user_id":7,"url":"/\u00e9","user_agent":"a","ip":"1.2.3.4","event_time":5}"#,
            "{\"user_id\":7,\"url\":\"/\u{e9}\",\"user_agent\":\"a\",\"ip\":\"1.2.3.4\",\"event_time\":5}".as_bytes(),
            b"{\"user_id\":7,\"url\":\"/\x01\",\"user_agent\":\"a\",\"ip\":\"1.2.3.4\",\"event_time\":5}",
            b"{\"user_id\":7,\"url\":\"/\xff\",\"user_agent\":\"a\",\"ip\":\"1.2.3.4\",\"event_time\":5}",
            br#"{"user_id":7,"url":"/","user_agent":"a","ip":"1.2.3.4","event_time":5,"extra":[1]}"#,
            br#"{ "user_id": 7, "url": "/", "user_agent": "a", "ip": "1.2.3.4", "event_time": 5 }"#,
            br#"{"user_id":7,"url":"/","user_agent":"a","ip":"1.2.3.4","event_time":5} "#,
            br#"{"user_id":7,"url":"/","user_agent":"a","ip":"1.2.3.4","event_time":5}x"#,
            br#"{"user_id":7,"url":"/","user_agent":"a","ip":"1.2.3.4","event_time":5"#,
            br#"{"user_id":7,"url":"/","user_agent":"a","ip":"1.2.3.4","event_time":}"#,
            br#"{"user_id":7,"url":null,"user_agent":"a","ip":"1.2.3.4","event_time":5}"#,
            br#"{"user_id":7,"url":"/","user_agent":"a","ip":"1.2.3.4","event_time":5,}"#,
            br#"{"user_id":7,"url":"/","user_agent":"a","ip":"1.2.3.4","event_time":-}"#,
            br#"{"user_id":7,"url":"/","user_agent":"a","ip":"1.2.3.4","event_time":-5}"#,
            br#"{"user_id":0,"url":"","user_agent":"","ip":"","event_time":0}"#,
            br#"{}"#,
            br#"{"#,
            b"",
            br#"[7,"/","a","1.2.3.4",5]"#,
            br#"{"user_id":7,"url":"/","user_agent":"a","ip":"1.2.3.4","event_time":5}{}"#,
        ];
        for json in cases {
            assert_eq!(ours(json), serde(json), "{}", String::from_utf8_lossy(json));
        }
    }

    fn any_click() -> impl Strategy<Value = Click> {
        (
            any::<u64>(),
            ".{0,30}",
            ".{0,40}",
            "[0-9.]{0,15}",
            any::<i64>(),
        )
            .prop_map(|(user_id, url, user_agent, ip, event_time)| Click {
                user_id,
                url: url.into(),
                user_agent: user_agent.into(),
                ip: ip.into(),
                event_time,
            })
    }

    proptest! {
        /// Any click round-trips; any damage to its JSON gives what serde_json gives.
        #[test]
        fn the_decoder_agrees_with_serde_json(
            click in any_click(),
            damage in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..3),
        ) {
            let mut json = serde_json::to_vec(&click).unwrap();
            prop_assert_eq!(ours(&json), Ok(click));
            for (at, byte) in damage {
                let at = at % json.len();
                json[at] = byte;
            }
            prop_assert_eq!(ours(&json), serde(&json));
        }
    }
}

//! Flink's CSV format, as its `csv` format writes a field (Nexmark q10's files, SQL's
//! `filesystem` tables with `'format' = 'csv'`), so that files written by Riffle and by Flink
//! compare equal line for line.

/// One string column (`VARCHAR`, and a `TIMESTAMP` written as text) as Flink's CSV format writes
/// it: Jackson's `CsvEncoder` with Flink's defaults (separator `,`, quote `"`, no escape
/// character, line separator `\n`, no `STRICT_CHECK_FOR_QUOTING`) quotes a value longer than 24
/// characters (UTF-16 units) without looking at it, and a shorter one that holds a character
/// below `-` (U+002D: control characters, space, ``!"#$%&'()*+,``, below the highest of `,`, `"`
/// and `\n`); inside the quotes a `"` is doubled. An empty string is written as nothing. So
/// every `dateTime` is quoted (it holds a space), and so is a generated bid's `extra` (54 to 81
/// letters), as in Flink's files.
///
/// ```
/// let mut line = Vec::new();
/// riffle::sink::csv::write_field("00:18", &mut line);
/// line.push(b',');
/// riffle::sink::csv::write_field("2026-01-15 00:18:00.4", &mut line);
/// assert_eq!(line, b"00:18,\"2026-01-15 00:18:00.4\"");
/// ```
pub fn write_field(field: &str, line: &mut Vec<u8>) {
    // Bytes below `-` are ASCII: in UTF-8 every byte of a longer character is 0x80 or above.
    let long = field.len() > 24 && field.encode_utf16().count() > 24;
    if long || field.bytes().any(|b| b < b'-') {
        line.push(b'"');
        for part in field.split_inclusive('"') {
            line.extend_from_slice(part.as_bytes());
            if part.ends_with('"') {
                line.push(b'"');
            }
        }
        line.push(b'"');
    } else {
        line.extend_from_slice(field.as_bytes());
    }
}

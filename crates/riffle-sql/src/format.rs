//! Values as text, and text as values: how SQL shows a row (Flink's SQL client and `print`
//! connector), and how dates and times are read and written (`DATE_FORMAT`, casts from strings).
//! Times are UTC: a `TIMESTAMP` is a wall-clock time of no zone, held in epoch milliseconds.

use crate::types::{DataType, Value};

/// The civil date (year, month 1-12, day 1-31) of `days` since 1970-01-01 (the proleptic
/// Gregorian calendar).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Days since 1970-01-01 of a civil date.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = year - i64::from(month <= 2);
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let mp = (month as i64 + 9) % 12;
    let day_of_year = (153 * mp + 2) / 5 + day as i64 - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The parts of a time in epoch milliseconds: (year, month, day, hour, minute, second, ms).
pub fn parts(ms: i64) -> (i64, u32, u32, u32, u32, u32, u32) {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    (
        year,
        month,
        day,
        (in_day / 3_600_000) as u32,
        (in_day / 60_000 % 60) as u32,
        (in_day / 1_000 % 60) as u32,
        (in_day % 1_000) as u32,
    )
}

/// `2026-01-15 00:18:00.400`: a `TIMESTAMP(3)` as the SQL client shows it.
pub fn timestamp_text(ms: i64) -> String {
    let (y, mo, d, h, mi, s, milli) = parts(ms);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}.{milli:03}")
}

/// `'2026-01-15 00:18:00[.4]'` or `'2026-01-15T00:18:00Z'` as epoch milliseconds.
pub fn parse_timestamp(text: &str) -> Option<i64> {
    parse_timestamp_exact(text.as_bytes()).or_else(|| parse_timestamp_fields(text))
}

/// [`parse_timestamp`] field by field: any form it takes.
fn parse_timestamp_fields(text: &str) -> Option<i64> {
    let text = text.trim().trim_end_matches('Z');
    let (date, time) = match text.split_once([' ', 'T']) {
        Some((date, time)) => (date, time),
        None => (text, "00:00:00"),
    };
    let days = parse_date(date)? as i64;
    let (hms, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut fields = hms.split(':');
    let hour: i64 = fields.next()?.parse().ok()?;
    let minute: i64 = fields.next().unwrap_or("0").parse().ok()?;
    let second: i64 = fields.next().unwrap_or("0").parse().ok()?;
    if fields.next().is_some() || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    // The first three digits of the fraction, as milliseconds (`.4` is 400; digits past the
    // third are not read).
    let mut milli: i64 = 0;
    let mut digits = fraction.chars();
    for scale in [100, 10, 1] {
        if let Some(c) = digits.next() {
            milli += c.to_digit(10)? as i64 * scale;
        }
    }
    Some(days * 86_400_000 + hour * 3_600_000 + minute * 60_000 + second * 1_000 + milli)
}

/// `2026-01-15 00:18:00.400` (or with `T`, or without the fraction) read digit by digit: the
/// form every time written by Flink's and Riffle's JSON takes, read without splitting; `None`
/// for any other text (which [`parse_timestamp`] then reads field by field).
fn parse_timestamp_exact(b: &[u8]) -> Option<i64> {
    if !(b.len() == 19 || b.len() == 23 && b[19] == b'.')
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b' ' | b'T')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    // Every digit's value, and one test for all of them (a branch per digit cost more than
    // the arithmetic).
    let digit = |i: usize| i64::from(b[i].wrapping_sub(b'0'));
    let fraction = b.len() == 23;
    let not_digit = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]
        .iter()
        .fold(false, |bad, &i| bad | (b[i].wrapping_sub(b'0') > 9))
        | (fraction && b[20..23].iter().any(|d| !d.is_ascii_digit()));
    if not_digit {
        return None;
    }
    let two = |i: usize| digit(i) * 10 + digit(i + 1);
    let (year, month, day) = (two(0) * 100 + two(2), two(5), two(8));
    let (hour, minute, second) = (two(11), two(14), two(17));
    let milli = if fraction {
        digit(20) * 100 + two(21)
    } else {
        0
    };
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let days = days_from_civil(year, month as u32, day as u32);
    Some(days * 86_400_000 + hour * 3_600_000 + minute * 60_000 + second * 1_000 + milli)
}

/// `'2026-01-15'` as days since 1970-01-01.
pub fn parse_date(text: &str) -> Option<i32> {
    let mut fields = text.trim().split('-');
    let year: i64 = fields.next()?.parse().ok()?;
    let month: u32 = fields.next()?.parse().ok()?;
    let day: u32 = fields.next()?.parse().ok()?;
    if fields.next().is_some() || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    i32::try_from(days_from_civil(year, month, day)).ok()
}

/// A time formatted with a Java `SimpleDateFormat` pattern (`yyyy-MM-dd HH:mm:ss.SSS`), as
/// `DATE_FORMAT` does; text in single quotes is copied.
pub fn format_with_pattern(ms: i64, pattern: &str) -> String {
    DatePattern::new(pattern).format(ms).into()
}

/// A `SimpleDateFormat` pattern read once (its fields and quoted text), for formatting many
/// times: `DATE_FORMAT` with a constant pattern.
#[derive(Clone, Debug)]
pub struct DatePattern {
    pieces: Vec<Piece>,
}

#[derive(Clone, Debug)]
enum Piece {
    /// Text copied as it is (quoted, or characters that are not fields).
    Text(String),
    /// A field letter repeated `n` times.
    Field(char, usize),
}

impl DatePattern {
    /// The pattern's pieces.
    pub fn new(pattern: &str) -> DatePattern {
        let chars: Vec<char> = pattern.chars().collect();
        let mut pieces = Vec::new();
        let mut text = String::new();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == '\'' {
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    text.push(chars[i]);
                    i += 1;
                }
                i += 1;
                continue;
            }
            let mut n = 1;
            while i + n < chars.len() && chars[i + n] == c {
                n += 1;
            }
            if matches!(c, 'y' | 'M' | 'd' | 'H' | 'm' | 's' | 'S') {
                if !text.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut text)));
                }
                pieces.push(Piece::Field(c, n));
            } else {
                text.extend(std::iter::repeat_n(c, n));
            }
            i += n;
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        DatePattern { pieces }
    }

    /// The span of time, in ms, over which the formatted text cannot change: a day for a
    /// pattern of dates only, a second without milliseconds, else 1.
    pub fn granularity_ms(&self) -> i64 {
        let has = |f: &[char]| {
            self.pieces
                .iter()
                .any(|p| matches!(p, Piece::Field(c, _) if f.contains(c)))
        };
        if has(&['S']) {
            1
        } else if has(&['H', 'm', 's']) {
            1_000
        } else {
            86_400_000
        }
    }

    /// `ms` (epoch milliseconds, UTC) formatted.
    pub fn format(&self, ms: i64) -> compact_str::CompactString {
        use std::fmt::Write;
        let (y, mo, d, h, mi, s, milli) = parts(ms);
        let mut out = compact_str::CompactString::default();
        for piece in &self.pieces {
            // Writing into a string cannot fail.
            let _ = match *piece {
                Piece::Text(ref text) => out.write_str(text),
                Piece::Field('y', 2) => write!(out, "{:02}", y.rem_euclid(100)),
                Piece::Field('y', n) => write!(out, "{:0w$}", y, w = n.max(4)),
                Piece::Field('M', n) => write!(out, "{:0n$}", mo),
                Piece::Field('d', n) => write!(out, "{:0n$}", d),
                Piece::Field('H', n) => write!(out, "{:0n$}", h),
                Piece::Field('m', n) => write!(out, "{:0n$}", mi),
                Piece::Field('s', n) => write!(out, "{:0n$}", s),
                // Milliseconds: their first `n` digits of three.
                Piece::Field(_, 1) => write!(out, "{}", milli / 100),
                Piece::Field(_, 2) => write!(out, "{:02}", milli / 10),
                Piece::Field(_, _) => write!(out, "{:03}", milli),
            };
        }
        out
    }
}

/// A value as SQL shows it: `NULL`, numbers, `2026-01-15 00:18:00.400`, `(a, b)` for a row.
pub fn display(value: &Value, ty: &DataType) -> String {
    match value {
        Value::Null => "NULL".to_string(),
        Value::Bool(b) => if *b { "TRUE" } else { "FALSE" }.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Double(d) => {
            if d.fract() == 0.0 && d.is_finite() && d.abs() < 1e15 {
                format!("{d:.1}")
            } else {
                d.to_string()
            }
        }
        Value::Decimal(d) => match ty {
            DataType::Decimal { scale, .. } => d.rescale(*scale).unwrap_or(*d).to_string(),
            _ => d.to_string(),
        },
        Value::String(s) => s.to_string(),
        Value::Date(days) => {
            let (y, m, d) = civil_from_days(*days as i64);
            format!("{y:04}-{m:02}-{d:02}")
        }
        Value::Timestamp(ms) => timestamp_text(*ms),
        Value::Interval(ms) => format!("{} s", *ms as f64 / 1000.0),
        Value::Row(values) => {
            let fields: Vec<&DataType> = match ty {
                DataType::Row(fields) => fields.iter().map(|f| &f.ty).collect(),
                _ => Vec::new(),
            };
            let inner: Vec<String> = values
                .iter()
                .enumerate()
                .map(|(i, v)| display(v, fields.get(i).copied().unwrap_or(&DataType::Null)))
                .collect();
            format!("({})", inner.join(", "))
        }
        Value::Array(values) => {
            let element = match ty {
                DataType::Array(element) => element.as_ref(),
                _ => &DataType::Null,
            };
            let inner: Vec<String> = values.iter().map(|v| display(v, element)).collect();
            format!("[{}]", inner.join(", "))
        }
        Value::Map(entries) => {
            let inner: Vec<String> = entries
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{}={}",
                        display(k, &DataType::Null),
                        display(v, &DataType::Null)
                    )
                })
                .collect();
            format!("{{{}}}", inner.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip_through_the_civil_calendar() {
        for days in [-719_468, -1, 0, 1, 59, 365, 10_957, 20_468, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        assert_eq!(civil_from_days(20_468), (2026, 1, 15));
        assert_eq!(timestamp_text(1_768_436_280_400), "2026-01-15 00:18:00.400");
        assert_eq!(
            parse_timestamp("2026-01-15 00:18:00.4"),
            Some(1_768_436_280_400)
        );
        assert_eq!(
            parse_timestamp("2026-01-15T00:18:00Z"),
            Some(1_768_436_280_000)
        );
        assert_eq!(parse_timestamp("2026-13-15 00:00:00"), None);
        assert_eq!(parse_date("1970-01-02"), Some(1));
        assert_eq!(parse_timestamp("2026-01-15 00:18:00.4x"), None);
        assert_eq!(parse_timestamp("2026-01-15 24:18:00.400"), None);
        assert_eq!(
            parse_timestamp(" 2026-01-15 00:18:00.400"),
            Some(1_768_436_280_400)
        );
    }

    proptest::proptest! {
        /// Read digit by digit or field by field, a time is the same time (or refused by both).
        #[test]
        fn a_timestamp_read_either_way_is_the_same(
            text in "[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9x]{3})?",
            ms in 0i64..4_102_444_800_000,
        ) {
            let exact = parse_timestamp_exact(text.as_bytes());
            proptest::prop_assert_eq!(exact.or_else(|| parse_timestamp_fields(&text)), parse_timestamp_fields(&text));
            let shown = timestamp_text(ms);
            proptest::prop_assert_eq!(parse_timestamp_exact(shown.as_bytes()), Some(ms));
            proptest::prop_assert_eq!(parse_timestamp_fields(&shown), Some(ms));
        }
    }

    #[test]
    fn date_format_follows_java_patterns() {
        let ms = 1_768_436_280_400; // 2026-01-15 00:18:00.400
        assert_eq!(format_with_pattern(ms, "yyyy-MM-dd"), "2026-01-15");
        assert_eq!(format_with_pattern(ms, "HH:mm"), "00:18");
        assert_eq!(
            format_with_pattern(ms, "yyyy-MM-dd'T'HH:mm:ss.SSS"),
            "2026-01-15T00:18:00.400"
        );
        assert_eq!(format_with_pattern(ms, "yy"), "26");
        assert_eq!(
            format_with_pattern(ms, "dd.MM.yyyy 'at' H"),
            "15.01.2026 at 0"
        );
        assert_eq!(format_with_pattern(ms, "SS EEE"), "40 EEE");
        assert_eq!(
            format_with_pattern(-1, "yyyy-MM-dd HH:mm:ss.S"),
            "1969-12-31 23:59:59.9"
        );
        assert_eq!(DatePattern::new("yyyy-MM-dd").granularity_ms(), 86_400_000);
        assert_eq!(DatePattern::new("yyyy-MM-dd HH:mm").granularity_ms(), 1_000);
        assert_eq!(DatePattern::new("ss.SSS").granularity_ms(), 1);
        assert_eq!(
            DatePattern::new("'HH:mm' yyyy").granularity_ms(),
            86_400_000
        );
    }
}

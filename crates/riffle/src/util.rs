//! Small helpers shared by the runtime's parts.

use std::time::{Duration, Instant};

/// One `with_<field>` setter per field of a settings struct (`setter => field: type;`, each
/// with its doc), for settings built as `Settings::default().with_a(..).with_b(..)`.
macro_rules! setters {
    ($($(#[$doc:meta])* $setter:ident => $field:ident: $ty:ty;)*) => {
        $(
            $(#[$doc])*
            #[must_use]
            pub fn $setter(mut self, $field: $ty) -> Self {
                self.$field = $field;
                self
            }
        )*
    };
}
pub(crate) use setters;

/// The proptest configuration of the fuzz-style property tests: `default` cases, or as many as
/// the environment variable `RIFFLE_FUZZ_CASES` says (`scripts/fuzz.sh` sets it for long runs).
#[cfg(test)]
pub(crate) fn fuzz_config(default: u32) -> proptest::test_runner::Config {
    let cases = std::env::var("RIFFLE_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default);
    proptest::test_runner::Config {
        cases,
        // Failures found are kept as regression cases next to the test's source file.
        ..proptest::test_runner::Config::default()
    }
}

/// A duration in ms as a user writes it: `60 s`, `1500 ms`.
pub(crate) fn millis_text(ms: i64) -> String {
    match ms {
        ms if ms != 0 && ms % 1_000 == 0 => format!("{} s", ms / 1_000),
        ms => format!("{ms} ms"),
    }
}

/// Lets a message through at most once per interval and counts the ones held back, so a flood
/// of bad or late records cannot flood the log while every one of them is still counted.
#[derive(Debug)]
pub(crate) struct RateLimitedLog {
    interval: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimitedLog {
    pub(crate) fn new(interval: Duration) -> Self {
        RateLimitedLog {
            interval,
            last: None,
            suppressed: 0,
        }
    }

    /// `Some(n)` if this occurrence should be logged, `n` being how many were held back since
    /// the last one logged; `None` if it should not.
    pub(crate) fn should_log(&mut self) -> Option<u64> {
        let now = Instant::now();
        match self.last {
            Some(last) if now.duration_since(last) < self.interval => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_once_per_interval_and_counts_the_rest() {
        let mut log = RateLimitedLog::new(Duration::from_secs(3600));
        assert_eq!(log.should_log(), Some(0));
        assert_eq!(log.should_log(), None);
        assert_eq!(log.should_log(), None);
        log.last = Some(Instant::now() - Duration::from_secs(7200));
        assert_eq!(log.should_log(), Some(2));
    }
}

#[cfg(test)]
mod millis_tests {
    use super::millis_text;

    #[test]
    fn durations_read_as_written() {
        assert_eq!(millis_text(60_000), "60 s");
        assert_eq!(millis_text(30_000), "30 s");
        assert_eq!(millis_text(1_500), "1500 ms");
        assert_eq!(millis_text(0), "0 ms");
    }
}

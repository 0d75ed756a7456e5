//! Bad input: what to do with a record that cannot be decoded (fail, skip and count, or send it
//! to a dead-letter output), and the policy in action, shared by sources, decoding operators and
//! window operators. A bad record never crashes the process and is never lost without a count.
//! (The public names are also at their old place, [`crate::source`].)

use serde::{Deserialize, Serialize};

/// Name of the side output where a source (or a parser, or a window operator) sends records
/// it could not decode or place.
pub const DEAD_LETTER_TAG: &str = "dead-letter";

/// What to do with a record that cannot be decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BadRecordPolicy {
    /// Fail the job with an error that names the source and the record's position.
    Fail,
    /// Skip it, count it in `bad_records` and log it (rate-limited).
    Skip,
    /// Count it and send it to the source's dead-letter output (see
    /// [`DataStream::dead_letters`](crate::DataStream::dead_letters)); when the job does not consume
    /// that output, it is written to a file under the job's `dead_letter_dir`.
    #[default]
    DeadLetter,
}

impl std::str::FromStr for BadRecordPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fail" => Ok(BadRecordPolicy::Fail),
            "skip" => Ok(BadRecordPolicy::Skip),
            "dead-letter" => Ok(BadRecordPolicy::DeadLetter),
            other => Err(format!(
                "unknown bad-record policy `{other}` (expected fail, skip or dead-letter)"
            )),
        }
    }
}

/// A record that could not be decoded, with where it came from and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Name of the source.
    pub source: String,
    /// Split the record came from (a file path, a partition).
    pub split: String,
    /// Position inside the split (line number, offset).
    pub position: String,
    /// Why decoding failed.
    pub error: String,
    /// The raw record (invalid UTF-8 replaced).
    pub payload: String,
}

/// A record a reader could not decode.
#[derive(Debug, Clone)]
pub(crate) struct BadInput {
    pub(crate) position: String,
    pub(crate) error: String,
    pub(crate) payload: String,
}

use std::time::Duration;

use crate::error::{Error, Result};
use crate::metrics::OperatorMetrics;
use crate::record::Record;
use crate::util::RateLimitedLog;

/// Applies one operator's [`BadRecordPolicy`].
#[derive(Debug)]
pub(crate) struct BadRecordHandler {
    policy: BadRecordPolicy,
    operator: String,
    log: RateLimitedLog,
}

impl BadRecordHandler {
    pub(crate) fn new(policy: BadRecordPolicy, operator: &str) -> Self {
        BadRecordHandler {
            policy,
            operator: operator.to_string(),
            log: RateLimitedLog::new(Duration::from_secs(10)),
        }
    }

    /// Handles the bad records of `split`; `dead_letter` receives the dead letters.
    pub(crate) fn handle(
        &mut self,
        bad: impl ExactSizeIterator<Item = BadInput>,
        split: &str,
        metrics: &OperatorMetrics,
        mut dead_letter: impl FnMut(Record<DeadLetter>) -> Result<()>,
    ) -> Result<()> {
        metrics.add_bad(bad.len() as u64);
        for bad in bad {
            match self.policy {
                BadRecordPolicy::Fail => {
                    return Err(Error::BadRecord {
                        source_name: self.operator.clone(),
                        position: format!("{split} {}", bad.position),
                        message: bad.error,
                    });
                }
                BadRecordPolicy::Skip => {
                    if let Some(suppressed) = self.log.should_log() {
                        tracing::warn!(
                            operator = %self.operator, split, position = %bad.position, error = %bad.error,
                            suppressed, "skipping a record that cannot be decoded"
                        );
                    }
                }
                BadRecordPolicy::DeadLetter => dead_letter(Record::untimed(DeadLetter {
                    source: self.operator.clone(),
                    split: split.to_string(),
                    position: bad.position,
                    error: bad.error,
                    payload: bad.payload,
                }))?,
            }
        }
        Ok(())
    }
}

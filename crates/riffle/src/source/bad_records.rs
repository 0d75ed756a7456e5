//! The bad-record policy in action, shared by sources and decoding operators: count every bad
//! record, then fail the job, log it (rate-limited) or turn it into a dead letter.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::metrics::OperatorMetrics;
use crate::record::Record;
use crate::source::{BadInput, BadRecordPolicy, DeadLetter};
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

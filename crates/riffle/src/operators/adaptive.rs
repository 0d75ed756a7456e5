//! The adaptive switch of the pre-aggregations before a shuffle (rolling aggregates and
//! windows): folding a batch pays when its records share keys (a hot key); on uniform keys it
//! only costs. After a batch of at least 64 records that did not shrink by half, the next 64
//! batches pass through unchanged, then the next one is sampled again.

use crate::error::Result;
use crate::operators::Collector;
use crate::record::{Data, Record};

/// Batches passed through after a batch that did not fold.
const BYPASS_BATCHES: u32 = 64;

/// Whether a pre-aggregation folds the current batch; see the [module documentation](self).
#[derive(Debug, Default)]
pub(crate) struct AdaptiveFold {
    /// Batches left to pass through before sampling again.
    bypass: u32,
}

impl AdaptiveFold {
    /// Passes `batch` through as `wrap(record)` if the fold is stepping aside (returns `true`);
    /// otherwise leaves it to be folded.
    pub(crate) fn pass_through<T, O: Data>(
        &mut self,
        batch: &mut Vec<Record<T>>,
        out: &mut Collector<'_, O>,
        wrap: impl Fn(T) -> O,
    ) -> Result<bool> {
        if self.bypass == 0 {
            return Ok(false);
        }
        self.bypass -= 1;
        for record in batch.drain(..) {
            out.emit(Record {
                timestamp: record.timestamp,
                value: wrap(record.value),
            })?;
        }
        Ok(true)
    }

    /// A batch of `records` folded into `partials`: steps aside if that did not shrink it by half.
    pub(crate) fn folded(&mut self, records: usize, partials: usize) {
        if partials * 2 >= records && records >= 64 {
            self.bypass = BYPASS_BATCHES;
        }
    }
}

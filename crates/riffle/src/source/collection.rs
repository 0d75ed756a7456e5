//! A bounded source over an in-memory vector, for tests and examples.

use std::sync::Arc;

use crate::error::Result;
use crate::record::Data;
use crate::source::{Boundedness, ReadStatus, Source, SourceOutput, SplitReader};

/// Emits the values of a vector, split into one contiguous chunk per subtask.
pub struct CollectionSource<T> {
    values: Arc<Vec<T>>,
}

impl<T> CollectionSource<T> {
    /// A source emitting `values`.
    pub fn new(values: Vec<T>) -> Self {
        CollectionSource {
            values: Arc::new(values),
        }
    }
}

impl<T: Data + Sync> Source<T> for CollectionSource<T> {
    type Split = (usize, usize);

    fn name(&self) -> String {
        "collection".into()
    }

    fn boundedness(&self) -> Boundedness {
        Boundedness::Bounded
    }

    fn splits(&self, parallelism: usize) -> Result<Vec<(usize, usize)>> {
        let n = self.values.len();
        Ok((0..parallelism)
            .map(|i| (i * n / parallelism, (i + 1) * n / parallelism))
            .collect())
    }

    fn bad_record_policy(&self) -> crate::source::BadRecordPolicy {
        // Values in memory are never undecodable.
        crate::source::BadRecordPolicy::Fail
    }

    fn reader(&self, (start, end): (usize, usize)) -> Result<Box<dyn SplitReader<T>>> {
        Ok(Box::new(CollectionReader {
            values: self.values.clone(),
            start,
            next: start,
            end,
        }))
    }
}

struct CollectionReader<T> {
    values: Arc<Vec<T>>,
    start: usize,
    next: usize,
    end: usize,
}

impl<T: Data + Sync> SplitReader<T> for CollectionReader<T> {
    fn split_id(&self) -> String {
        format!("{}..{}", self.start, self.end)
    }

    fn read(&mut self, out: &mut SourceOutput<T>, max: usize) -> Result<ReadStatus> {
        let stop = self.end.min(self.next + max);
        for value in &self.values[self.next..stop] {
            out.emit(value.clone());
        }
        self.next = stop;
        Ok(if self.next == self.end {
            ReadStatus::Finished
        } else {
            ReadStatus::Ready
        })
    }

    fn position(&self) -> serde_json::Value {
        serde_json::json!(self.next)
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<()> {
        let next = position
            .as_u64()
            .ok_or_else(|| crate::Error::user(format!("bad position {position}")))?;
        self.next = (next as usize).clamp(self.start, self.end);
        Ok(())
    }
}

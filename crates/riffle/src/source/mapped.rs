//! A source whose records are converted as they are read: [`MappedSource`], made by
//! [`SourceExt::map_records`]. The conversion runs in the source's reader, before event time is
//! assigned, so a job's watermark strategy sees the converted records (a SQL table's rows, whose
//! time attribute is one of their columns). A record the conversion refuses is a bad record of
//! the source: it follows the source's [`BadRecordPolicy`] (a dead letter by default, with the
//! refused record as JSON), never dropped without a count.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::bad_records::BadRecordPolicy;
use crate::error::Result;
use crate::record::Data;
use crate::source::{Boundedness, ReadStatus, Source, SourceOutput, SplitReader, SplitWatermark};

/// The conversion of a [`MappedSource`]: a record, or why it cannot be converted. It borrows
/// the record, so that a refused one is still there to be dead-lettered (serialized only then).
pub type RecordMap<T, U> = Arc<dyn Fn(&T) -> std::result::Result<U, String> + Send + Sync>;

/// `source` with every record converted by a function ([`SourceExt::map_records`]).
pub struct MappedSource<S, T, U> {
    source: S,
    map: RecordMap<T, U>,
    _types: PhantomData<fn(T) -> U>,
}

/// Converting the records of any source as they are read.
pub trait SourceExt<T: Data>: Source<T> + Sized {
    /// This source with its records converted by `map` in its readers: `Err(why)` makes the
    /// record a bad record of the source (its policy applies).
    ///
    /// ```
    /// use riffle::StreamEnv;
    /// use riffle::sink::CollectSink;
    /// use riffle::source::collection::CollectionSource;
    /// use riffle::source::mapped::SourceExt;
    /// let env = StreamEnv::new();
    /// let (sink, out) = CollectSink::new();
    /// let lengths = CollectionSource::new(vec!["a".to_string(), "bcd".to_string()])
    ///     .map_records(|s: &String| Ok::<_, String>(s.len()));
    /// env.from_source(lengths).sink(sink);
    /// env.execute().unwrap();
    /// let mut lengths = out.values();
    /// lengths.sort(); // several subtasks may read
    /// assert_eq!(lengths, vec![1, 3]);
    /// ```
    fn map_records<U: Data>(
        self,
        map: impl Fn(&T) -> std::result::Result<U, String> + Send + Sync + 'static,
    ) -> MappedSource<Self, T, U> {
        MappedSource {
            source: self,
            map: Arc::new(map),
            _types: PhantomData,
        }
    }
}

impl<T: Data, S: Source<T>> SourceExt<T> for S {}

impl<T: Data, U: Data, S: Source<T>> Source<U> for MappedSource<S, T, U> {
    type Split = S::Split;

    fn name(&self) -> String {
        self.source.name()
    }

    fn boundedness(&self) -> Boundedness {
        self.source.boundedness()
    }

    fn validate(&self) -> Result<()> {
        self.source.validate()
    }

    fn splits(&self, parallelism: usize) -> Result<Vec<Self::Split>> {
        self.source.splits(parallelism)
    }

    fn reader(&self, split: Self::Split) -> Result<Box<dyn SplitReader<U>>> {
        Ok(Box::new(MappedReader {
            inner: self.source.reader(split)?,
            map: self.map.clone(),
            buffer: SourceOutput::with_capacity(0),
        }))
    }

    fn bad_record_policy(&self) -> BadRecordPolicy {
        self.source.bad_record_policy()
    }

    fn owner(&self, split: &Self::Split, index: usize, parallelism: usize) -> usize {
        self.source.owner(split, index, parallelism)
    }

    fn discovery_interval(&self) -> Option<std::time::Duration> {
        self.source.discovery_interval()
    }

    fn supplies_watermarks(&self) -> bool {
        self.source.supplies_watermarks()
    }
}

/// Reads the inner split and converts what it read.
struct MappedReader<T, U> {
    inner: Box<dyn SplitReader<T>>,
    map: RecordMap<T, U>,
    /// What the inner reader wrote in the current read.
    buffer: SourceOutput<T>,
}

impl<T: Data, U: Data> SplitReader<U> for MappedReader<T, U> {
    fn split_id(&self) -> String {
        self.inner.split_id()
    }

    fn stream(&self) -> Option<String> {
        self.inner.stream()
    }

    fn former_split_id(&self) -> Option<String> {
        self.inner.former_split_id()
    }

    fn read(&mut self, out: &mut SourceOutput<U>, max: usize) -> Result<ReadStatus> {
        let status = self.inner.read(&mut self.buffer, max)?;
        for record in self.buffer.records.drain(..) {
            let timestamp = record.timestamp;
            match (self.map)(&record.value) {
                Ok(converted) => out.records.push(crate::record::Record {
                    value: converted,
                    timestamp,
                }),
                Err(why) => {
                    let payload = serde_json::to_vec(&record.value).unwrap_or_default();
                    out.bad_record("a record of the last read", why, &payload);
                }
            }
        }
        out.bad.append(&mut self.buffer.bad);
        if let Some(watermark) = self.buffer.watermark.take() {
            out.split_watermark(watermark);
        }
        if let Some(idle) = self.buffer.idle.take() {
            out.split_idle(idle);
        }
        Ok(status)
    }

    fn position(&self) -> serde_json::Value {
        self.inner.position()
    }

    fn checkpoint_started(&mut self, checkpoint_id: u64, event_time: SplitWatermark) {
        self.inner.checkpoint_started(checkpoint_id, event_time);
    }

    fn resume_event_time(&mut self) -> Option<SplitWatermark> {
        self.inner.resume_event_time()
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<()> {
        self.inner.seek(position)
    }

    fn start_at_beginning(&mut self) -> Result<()> {
        self.inner.start_at_beginning()
    }

    fn checkpoint_complete(&mut self, position: &serde_json::Value) -> Result<()> {
        self.inner.checkpoint_complete(position)
    }

    fn lag(&self) -> Option<i64> {
        self.inner.lag()
    }
}

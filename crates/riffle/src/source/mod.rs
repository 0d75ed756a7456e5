//! Sources: where a job's records come from.
//!
//! A [`Source`] is a set of splits (files, Kafka partitions, datagen streams) that parallel
//! subtasks read with [`SplitReader`]s. A reader reports a position that can be stored in a
//! checkpoint and sought to on recovery, so a replayable source can be rewound. Records that cannot
//! be decoded follow the source's [`BadRecordPolicy`]: fail the job, skip and count, or go to the
//! dead-letter output (the default), never lost without a count.

pub mod collection;
pub mod datagen;
pub mod file;
pub mod function;
pub mod mapped;
pub mod shared;
pub(crate) mod watermarks;

pub use watermarks::SplitWatermark;

use std::time::Instant;

pub(crate) use crate::bad_records::{BadInput, BadRecordHandler};
pub use crate::bad_records::{BadRecordPolicy, DEAD_LETTER_TAG, DeadLetter};

use crate::error::Result;
use crate::record::{Data, EventTime, Record, Timestamp};

/// Whether a source ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Boundedness {
    /// The source ends (a file, a datagen with a count): the job finishes when it is read.
    Bounded,
    /// The source runs until the job is stopped (Kafka, a datagen without a count).
    Unbounded,
}

/// A set of splits read in parallel.
///
/// Implement this for a new connector; the built-in ones are [`datagen::DatagenSource`] and
/// [`file::FileSource`].
pub trait Source<T: Data>: Send + Sync + 'static {
    /// A unit of parallel reading: a file, a partition, a generator stream.
    type Split: Clone + Send + std::fmt::Debug + 'static;

    /// The default name of the source's operator.
    fn name(&self) -> String;

    /// Whether the source ends.
    fn boundedness(&self) -> Boundedness;

    /// Checks the source's configuration (paths exist, values in range) before the job starts.
    fn validate(&self) -> Result<()> {
        Ok(())
    }

    /// The splits to read. Split `i` is read by subtask `i % parallelism`.
    fn splits(&self, parallelism: usize) -> Result<Vec<Self::Split>>;

    /// A reader for one split. A subtask that starts with several splits opens their readers
    /// at once, each on a thread of its own; the reader is then used on the subtask's thread.
    fn reader(&self, split: Self::Split) -> Result<Box<dyn SplitReader<T>>>;

    /// What to do with records that cannot be decoded.
    fn bad_record_policy(&self) -> BadRecordPolicy {
        BadRecordPolicy::DeadLetter
    }

    /// The subtask that reads `split`, the `index`-th of [`splits`](Source::splits). Override it
    /// when splits can appear while the job runs, so that an old split keeps its subtask
    /// whatever is added (Kafka partitions hash their topic and number).
    fn owner(&self, _split: &Self::Split, index: usize, parallelism: usize) -> usize {
        index % parallelism
    }

    /// How often to ask [`splits`](Source::splits) again for splits that appeared while the job
    /// runs (new Kafka partitions); `None` (the default) enumerates them once.
    fn discovery_interval(&self) -> Option<std::time::Duration> {
        None
    }

    /// Whether the split readers tell their splits' watermarks and idleness themselves (with
    /// [`SourceOutput::split_watermark`] and [`SourceOutput::split_idle`]), as the consumer of a
    /// Kafka shuffle does from its producers' watermark records. Such a split's watermark is
    /// what its reader said last (the minimum until it said anything; never below a restored
    /// one), and it is idle when its reader says so: the job's watermark strategy generates
    /// nothing for it. Default `false`.
    fn supplies_watermarks(&self) -> bool {
        false
    }
}

/// Reads one split.
pub trait SplitReader<T>: Send {
    /// A name for the split (file path, partition), used in dead letters and errors.
    fn split_id(&self) -> String;

    /// The stream this split is a part of, when several splits are parts of one ordered stream
    /// (the byte ranges of one file). A subtask reads the parts of a stream that it owns one
    /// after the other, in the order of [`Source::splits`], and tracks their event time with one
    /// watermark generator, as if it read the stream itself with the other subtasks' parts left
    /// out. `None` (the default): the split is read alongside the subtask's other splits, with
    /// its own watermark.
    fn stream(&self) -> Option<String> {
        None
    }

    /// The id the split's data had before it was cut into parts (a file's path, for a byte
    /// range of it): a checkpoint with no entry for [`split_id`](SplitReader::split_id) but one
    /// for this id (taken when the file was one split) resumes the part from that position,
    /// which [`seek`](SplitReader::seek) then maps onto the part. `None` (the default): none.
    fn former_split_id(&self) -> Option<String> {
        None
    }

    /// Reads up to `max` records into `out`.
    fn read(&mut self, out: &mut SourceOutput<T>, max: usize) -> Result<ReadStatus>;

    /// The position after the last record read, to store in a checkpoint.
    fn position(&self) -> serde_json::Value;

    /// Checkpoint `checkpoint_id` is taken now, with the split's event time at `event_time`:
    /// [`position`](SplitReader::position) is called next for it. A Kafka reader in a process
    /// group records its offset (and the event time) under the checkpoint's id, to commit it in
    /// the same Kafka transaction as the outputs.
    fn checkpoint_started(&mut self, _checkpoint_id: u64, _event_time: SplitWatermark) {}

    /// Where the split's event time resumes when the reader starts without a position from a
    /// checkpoint: a Kafka reader of a process group resumes at the group's committed offset,
    /// with the event time recorded there (so that a partition with nothing new after the
    /// offset does not hold the watermark back). `None` (the default): from nothing.
    fn resume_event_time(&mut self) -> Option<SplitWatermark> {
        None
    }

    /// Continues reading after `position` (a value returned by [`position`](SplitReader::position)).
    fn seek(&mut self, position: &serde_json::Value) -> Result<()>;

    /// The split appeared after the job first started (found by split discovery, or absent from
    /// the checkpoint being restored): read it from its beginning, whatever start position the
    /// source was configured with, so that nothing written to it before it was seen is skipped.
    /// Readers that always start at the beginning keep the default, which does nothing.
    fn start_at_beginning(&mut self) -> Result<()> {
        Ok(())
    }

    /// The checkpoint that stored `position` for this split completed (a Kafka reader commits
    /// the offset to its consumer group, so that lag tools see the job's progress).
    fn checkpoint_complete(&mut self, _position: &serde_json::Value) -> Result<()> {
        Ok(())
    }

    /// How many records the split is behind its end, when the reader knows (Kafka consumer lag).
    fn lag(&self) -> Option<i64> {
        None
    }
}

/// What a [`SplitReader::read`] call found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadStatus {
    /// Records may be available right away.
    Ready,
    /// Nothing to read now; try again at the given instant (or soon, if `None`).
    Pending(Option<Instant>),
    /// The split is exhausted.
    Finished,
}

/// Where a [`SplitReader`] puts what it read.
#[derive(Debug)]
pub struct SourceOutput<T> {
    pub(crate) records: Vec<Record<T>>,
    pub(crate) bad: Vec<BadInput>,
    /// The split's watermark, as its reader knows it (see [`Source::supplies_watermarks`]).
    pub(crate) watermark: Option<Timestamp>,
    /// The split's idleness, as its reader knows it.
    pub(crate) idle: Option<bool>,
}

impl<T> SourceOutput<T> {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        SourceOutput {
            records: Vec::with_capacity(capacity),
            bad: Vec::new(),
            watermark: None,
            idle: None,
        }
    }

    /// The split's watermark is now `watermark` (it never moves back): for sources whose
    /// readers know their splits' event time ([`Source::supplies_watermarks`]); ignored for
    /// the others. Records emitted in the same read are sent before it.
    pub fn split_watermark(&mut self, watermark: Timestamp) {
        self.watermark = Some(self.watermark.map_or(watermark, |w| w.max(watermark)));
    }

    /// The split is idle (`true`: it does not hold the subtask's watermark back) or active
    /// again; for sources whose readers know their splits' event time.
    pub fn split_idle(&mut self, idle: bool) {
        self.idle = Some(idle);
    }

    /// Emits a record without an event timestamp (the job's watermark strategy assigns one).
    pub fn emit(&mut self, value: T) {
        self.records.push(Record::untimed(value));
    }

    /// Emits a record with the timestamp the source knows (a Kafka record's timestamp);
    /// `None` when it knows none. `i64::MIN` is no event time: the record is emitted without
    /// one, as a record whose source knows no time (a timestamp assigner may still give it one).
    pub fn emit_with_timestamp(&mut self, value: T, timestamp: impl Into<Option<Timestamp>>) {
        let timestamp = timestamp.into().and_then(EventTime::new);
        self.records.push(Record::timed(value, timestamp));
    }

    /// Reports a record that could not be decoded at `position`.
    pub fn bad_record(
        &mut self,
        position: impl Into<String>,
        error: impl std::fmt::Display,
        payload: &[u8],
    ) {
        self.bad.push(BadInput {
            position: position.into(),
            error: error.to_string(),
            payload: String::from_utf8_lossy(payload).into_owned(),
        });
    }

    /// Records emitted since the last time the runtime took them.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether nothing was emitted since the last time the runtime took the records.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

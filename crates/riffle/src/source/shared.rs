//! One source read once by several jobs of a process: [`SourceHub`] and [`SharedSource`].
//!
//! `riffle serve` runs each materialized view as a job of its own; several views over one Kafka
//! topic would each fetch and decode every record. A [`SourceHub`] reads each split once and
//! hands the batches it read to every job whose reader is at the same place (its readers are
//! *attached*); the jobs still checkpoint their own positions, exactly as if each read the split
//! itself, so restores, savepoints and exactly-once are unchanged.
//!
//! How readers meet (RisingWave's shared sources and backfill work the same way):
//! - A reader is attached when its position equals one of the split's batch boundaries still
//!   held (the position after a batch, as the split's own reader reported it). It then takes
//!   whole batches, so its position is always one the split's reader reported.
//! - An attached reader that needs more than is held reads the split for everyone (it *drives*
//!   it). At most [`SourceHub::with_capacity`] records are held: a job whose reader is that far
//!   behind the driver holds the others back (back-pressure, as several sinks of one Flink
//!   source have), and a job that stops or fails lets them go. A job held back reads nothing
//!   meanwhile: give a watermark strategy's idleness timeout more time than that takes, or
//!   its split counts as idle while records wait for it.
//! - A reader restored elsewhere reads the split with a reader of its own (*private*) until its
//!   position meets a boundary. When the positions are ordered (a number, or an object with a
//!   numeric `offset`: Kafka, files, generators), the private reader reads exactly up to the
//!   next boundary and the split waits for a reader that is close behind; one that is ahead
//!   reads the split forward up to itself. Positions without an order meet only by chance:
//!   such a reader stays private, which is correct, only not shared.
//! - A split is deterministic: the same position is followed by the same records (a Kafka
//!   partition, a file, a generator), which is what makes a batch read for one job right for
//!   another.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::bad_records::{BadInput, BadRecordPolicy};
use crate::error::Result;
use crate::record::{Data, Record, Timestamp};
use crate::source::{Boundedness, ReadStatus, Source, SourceOutput, SplitReader, SplitWatermark};

/// How many records a hub holds for attached readers behind the one that drives it, by default.
pub const DEFAULT_HUB_CAPACITY: usize = 200_000;

/// How long a reader that must wait (the hub is full, or a reader catches up) waits.
const WAIT: Duration = Duration::from_millis(1);

/// The splits of a source shared by the jobs of a process: each read once, its batches handed
/// to every job reading it at the same place. Make one per source (per table), and give each
/// job [`share`](SourceHub::share) of its own instance of that source.
///
/// ```
/// use riffle::StreamEnv;
/// use riffle::sink::CollectSink;
/// use riffle::source::collection::CollectionSource;
/// use riffle::source::shared::SourceHub;
///
/// let hub = SourceHub::new();
/// let mut outputs = Vec::new();
/// let mut jobs = Vec::new();
/// for _ in 0..2 {
///     let env = StreamEnv::new();
///     let (sink, out) = CollectSink::new();
///     env.from_source(hub.share(CollectionSource::new((0..1000u64).collect::<Vec<_>>())))
///         .set_parallelism(1)
///         .sink(sink);
///     jobs.push(env.execute_async().unwrap());
///     outputs.push(out);
/// }
/// for job in jobs {
///     job.wait().unwrap();
/// }
/// for out in outputs {
///     assert_eq!(out.values().len(), 1000);
/// }
/// ```
pub struct SourceHub<T> {
    splits: Mutex<HashMap<String, Arc<Mutex<SplitHub<T>>>>>,
    capacity: usize,
    next_reader: AtomicU64,
    /// Records read from the source itself: by the splits' shared readers and by private ones.
    read: AtomicU64,
}

impl<T: Data> SourceHub<T> {
    /// A hub holding up to [`DEFAULT_HUB_CAPACITY`] records per split.
    pub fn new() -> Arc<SourceHub<T>> {
        SourceHub::with_capacity(DEFAULT_HUB_CAPACITY)
    }

    /// A hub holding up to `records` records per split for attached readers behind the one
    /// that reads the split (at least one batch).
    pub fn with_capacity(records: usize) -> Arc<SourceHub<T>> {
        Arc::new(SourceHub {
            splits: Mutex::new(HashMap::new()),
            capacity: records.max(1),
            next_reader: AtomicU64::new(0),
            read: AtomicU64::new(0),
        })
    }

    /// `source` read through this hub: one job's instance of the shared source (every job
    /// sharing it must give the same source, with the same configuration).
    pub fn share<S: Source<T>>(self: &Arc<Self>, source: S) -> SharedSource<S, T> {
        SharedSource {
            source: Arc::new(source),
            hub: self.clone(),
        }
    }

    /// How many records were read from the source itself, by every reader of every job: the
    /// records of a source read once by N jobs are counted once (more while a job catches up).
    pub fn records_read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    fn split(&self, key: &str) -> Option<Arc<Mutex<SplitHub<T>>>> {
        lock(&self.splits).get(key).cloned()
    }
}

impl<T> std::fmt::Debug for SourceHub<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceHub")
            .field("capacity", &self.capacity)
            .field("records_read", &self.read.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// One job's instance of a source read through a [`SourceHub`].
pub struct SharedSource<S, T> {
    source: Arc<S>,
    hub: Arc<SourceHub<T>>,
}

impl<T: Data, S: Source<T>> Source<T> for SharedSource<S, T> {
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

    fn reader(&self, split: Self::Split) -> Result<Box<dyn SplitReader<T>>> {
        let key = format!("{split:?}");
        let shared = match self.hub.split(&key) {
            Some(shared) => shared,
            None => {
                // Opened outside the hub's lock (a Kafka consumer connects): another job may
                // have made the split meanwhile, and then this reader is left unused.
                let reader = self.source.reader(split.clone())?;
                let made = Arc::new(Mutex::new(SplitHub::new(reader)));
                lock(&self.hub.splits).entry(key).or_insert(made).clone()
            }
        };
        let (split_id, stream, former) = {
            let hub = lock(&shared);
            (
                hub.split_id.clone(),
                hub.stream.clone(),
                hub.former_split_id.clone(),
            )
        };
        let id = self.hub.next_reader.fetch_add(1, Ordering::Relaxed);
        {
            // A reader that will start where new readers start keeps the split's batches from
            // there until it reads (other jobs may read first); one that seeks lets them go.
            let mut hub = lock(&shared);
            if hub.untouched || hub.fresh.as_ref() == Some(&hub.start) {
                let first = hub.first;
                hub.cursors.insert(id, first);
            }
        }
        Ok(Box::new(SharedReader {
            source: self.source.clone(),
            split,
            hub: self.hub.clone(),
            shared,
            id,
            split_id,
            stream,
            former,
            mode: Mode::Unplaced(Start::Fresh),
        }))
    }

    fn bad_record_policy(&self) -> BadRecordPolicy {
        self.source.bad_record_policy()
    }

    fn owner(&self, split: &Self::Split, index: usize, parallelism: usize) -> usize {
        self.source.owner(split, index, parallelism)
    }

    fn discovery_interval(&self) -> Option<Duration> {
        self.source.discovery_interval()
    }

    fn supplies_watermarks(&self) -> bool {
        self.source.supplies_watermarks()
    }
}

/// What one read of the split's shared reader gave.
struct Batch<T> {
    records: Vec<Record<T>>,
    bad: Vec<BadInput>,
    watermark: Option<Timestamp>,
    idle: Option<bool>,
    /// The split's position after it.
    after: serde_json::Value,
}

/// A split of a shared source: its reader, and the batches it read that an attached reader
/// has not taken yet.
struct SplitHub<T> {
    reader: Box<dyn SplitReader<T>>,
    split_id: String,
    stream: Option<String>,
    former_split_id: Option<String>,
    /// Nothing was read and no reader placed: the first reader to start places the split's
    /// reader where it starts.
    untouched: bool,
    /// Where the split's reader started, when it started where new readers start.
    fresh: Option<serde_json::Value>,
    /// The position of a new reader of the split (where a reader that has not started is).
    initial: serde_json::Value,
    /// The sequence number of the first batch held.
    first: u64,
    /// The position before the first batch held.
    start: serde_json::Value,
    batches: VecDeque<Batch<T>>,
    /// Records in `batches`.
    held: usize,
    /// The position after the last batch (the split's reader's position).
    head: serde_json::Value,
    finished: bool,
    /// The attached readers: the sequence number of the next batch each takes.
    cursors: HashMap<u64, u64>,
    /// Private readers close behind, catching up: the split waits for them.
    waiting_for: HashSet<u64>,
}

impl<T: Data> SplitHub<T> {
    fn new(reader: Box<dyn SplitReader<T>>) -> SplitHub<T> {
        let head = reader.position();
        SplitHub {
            split_id: reader.split_id(),
            stream: reader.stream(),
            former_split_id: reader.former_split_id(),
            reader,
            untouched: true,
            fresh: None,
            initial: head.clone(),
            first: 0,
            start: head.clone(),
            batches: VecDeque::new(),
            held: 0,
            head,
            finished: false,
            cursors: HashMap::new(),
            waiting_for: HashSet::new(),
        }
    }

    fn end(&self) -> u64 {
        self.first + self.batches.len() as u64
    }

    /// The sequence number of the batch that follows `position`, if it is a boundary held.
    fn after(&self, position: &serde_json::Value) -> Option<u64> {
        if *position == self.head {
            return Some(self.end());
        }
        if *position == self.start {
            return Some(self.first);
        }
        self.batches
            .iter()
            .position(|b| b.after == *position)
            .map(|i| self.first + i as u64 + 1)
    }

    /// The boundaries held, as offsets, in order.
    fn offsets(&self) -> impl Iterator<Item = Option<u64>> + '_ {
        std::iter::once(offset(&self.start)).chain(self.batches.iter().map(|b| offset(&b.after)))
    }

    /// Drops the batches every attached reader took.
    fn trim(&mut self) {
        let keep = self.cursors.values().min().copied().unwrap_or(self.end());
        while self.first < keep {
            let Some(batch) = self.batches.pop_front() else {
                break;
            };
            self.held -= batch.records.len();
            self.start = batch.after.clone();
            self.first += 1;
        }
    }

    /// Reads the split once more (up to `max` records), holding what it read as a batch.
    fn read(&mut self, max: usize, read: &AtomicU64) -> Result<ReadStatus> {
        let mut out = SourceOutput::with_capacity(max);
        let status = self.reader.read(&mut out, max)?;
        let after = self.reader.position();
        if !out.records.is_empty()
            || !out.bad.is_empty()
            || out.watermark.is_some()
            || out.idle.is_some()
            || after != self.head
        {
            read.fetch_add(out.records.len() as u64, Ordering::Relaxed);
            self.held += out.records.len();
            self.head = after.clone();
            self.batches.push_back(Batch {
                records: out.records,
                bad: out.bad,
                watermark: out.watermark,
                idle: out.idle,
                after,
            });
        }
        if status == ReadStatus::Finished {
            self.finished = true;
        }
        Ok(status)
    }

    /// Places the untouched split's reader where the first reader starts.
    fn place(&mut self, start: &Start) -> Result<()> {
        match start {
            Start::Fresh => {}
            Start::At(position) => self.reader.seek(position)?,
            Start::Beginning => self.reader.start_at_beginning()?,
        }
        self.untouched = false;
        self.head = self.reader.position();
        self.start = self.head.clone();
        if let Start::Fresh = start {
            self.fresh = Some(self.head.clone());
        }
        Ok(())
    }

    /// Moves the split's reader to `position` when no reader is attached (no one needs what
    /// it holds).
    fn reseat(&mut self, position: &serde_json::Value) -> Result<()> {
        self.reader.seek(position)?;
        self.first = self.end();
        self.batches.clear();
        self.held = 0;
        self.finished = false;
        self.head = self.reader.position();
        self.start = self.head.clone();
        Ok(())
    }
}

/// The order of a position, where it has one: a number, or an object's numeric `offset`
/// (Kafka's next offset, a file's byte offset, a generator's count). Each record moves it on
/// by at least one, which lets a reader read exactly up to a position.
fn offset(position: &serde_json::Value) -> Option<u64> {
    position
        .as_u64()
        .or_else(|| position.get("offset").and_then(serde_json::Value::as_u64))
}

/// Where a reader starts.
enum Start {
    /// Where a new reader of the source starts (its configured start).
    Fresh,
    /// After a position from a checkpoint.
    At(serde_json::Value),
    /// At the split's beginning (a split that appeared while the job ran).
    Beginning,
}

enum Mode<T> {
    /// Not reading yet.
    Unplaced(Start),
    /// Taking the split's batches: the next one's sequence number, and the position so far.
    Attached {
        next: u64,
        position: serde_json::Value,
    },
    /// Reading with a reader of its own until it meets the split's batches.
    Private(Box<dyn SplitReader<T>>),
}

/// A job's reader of a shared split.
struct SharedReader<S: Source<T>, T: Data> {
    source: Arc<S>,
    split: S::Split,
    hub: Arc<SourceHub<T>>,
    shared: Arc<Mutex<SplitHub<T>>>,
    id: u64,
    split_id: String,
    stream: Option<String>,
    former: Option<String>,
    mode: Mode<T>,
}

impl<T: Data, S: Source<T>> SharedReader<S, T> {
    /// A read of the split's reader failed: the job reading gets the error (and fails, as it
    /// would reading alone), and the split gets a new reader at its head (the position after
    /// the last batch read), so that the jobs that read it next, this one restarted included,
    /// do not read through a broken one.
    fn renew_on_error(
        source: &S,
        split: &S::Split,
        hub: &mut SplitHub<T>,
        status: Result<ReadStatus>,
    ) -> Result<ReadStatus> {
        if status.is_err() {
            let mut reader = source.reader(split.clone())?;
            // (A split still at its fresh start is where a new reader is.)
            if hub.fresh.as_ref() != Some(&hub.head) {
                reader.seek(&hub.head)?;
            }
            hub.reader = reader;
        }
        status
    }

    /// Places a reader that has not started: on the untouched split, at a boundary held, or
    /// on a reader of its own.
    fn place(&mut self) -> Result<()> {
        let Mode::Unplaced(start) = &self.mode else {
            return Ok(());
        };
        let mut hub = lock(&self.shared);
        if hub.untouched {
            hub.place(start)?;
            let next = hub.first;
            let position = hub.head.clone();
            hub.cursors.insert(self.id, next);
            drop(hub);
            self.mode = Mode::Attached { next, position };
            return Ok(());
        }
        if let (Start::Fresh, Some(fresh), Some(&next)) =
            (start, hub.fresh.clone(), hub.cursors.get(&self.id))
        {
            self.mode = Mode::Attached {
                next,
                position: fresh,
            };
            return Ok(());
        }
        hub.cursors.remove(&self.id);
        hub.trim();
        drop(hub);
        let mut own = self.source.reader(self.split.clone())?;
        match start {
            Start::Fresh => {}
            Start::At(position) => own.seek(position)?,
            Start::Beginning => own.start_at_beginning()?,
        }
        self.mode = Mode::Private(own);
        let shared = self.shared.clone();
        self.meet(&mut lock(&shared));
        Ok(())
    }

    /// A private reader whose position is a boundary held attaches there.
    fn meet(&mut self, hub: &mut SplitHub<T>) -> bool {
        let Mode::Private(own) = &self.mode else {
            return false;
        };
        let position = own.position();
        let Some(next) = hub.after(&position) else {
            return false;
        };
        hub.cursors.insert(self.id, next);
        hub.waiting_for.remove(&self.id);
        self.mode = Mode::Attached { next, position };
        true
    }

    fn read_attached(&mut self, out: &mut SourceOutput<T>, max: usize) -> Result<ReadStatus> {
        let Mode::Attached { next, position } = &mut self.mode else {
            unreachable!("attached")
        };
        let mut hub = lock(&self.shared);
        if *next == hub.end() {
            if hub.finished {
                return Ok(ReadStatus::Finished);
            }
            if !hub.waiting_for.is_empty() || hub.held >= self.hub.capacity {
                return Ok(ReadStatus::Pending(Some(Instant::now() + WAIT)));
            }
            if hub.cursors.len() == 1 {
                // Alone on the split: read into `out` itself, holding nothing.
                let before = out.records.len();
                let status = hub.reader.read(out, max);
                let status = Self::renew_on_error(&self.source, &self.split, &mut hub, status)?;
                let read = out.records.len() - before;
                self.hub.read.fetch_add(read as u64, Ordering::Relaxed);
                hub.head = hub.reader.position();
                hub.start = hub.head.clone();
                hub.finished |= status == ReadStatus::Finished;
                *position = hub.head.clone();
                return Ok(status);
            }
            let status = hub.read(max, &self.hub.read);
            let status = Self::renew_on_error(&self.source, &self.split, &mut hub, status)?;
            if *next == hub.end() {
                return Ok(status);
            }
        }
        let seq = *next;
        let id = self.id;
        let last = seq == hub.first && hub.cursors.iter().all(|(r, n)| *r == id || *n > seq);
        let (watermark, idle) = if last {
            // No one else needs it: its records move, uncopied (a view alone on its source).
            let batch = hub.batches.pop_front().expect("held");
            hub.held -= batch.records.len();
            hub.first += 1;
            hub.start = batch.after.clone();
            out.records.extend(batch.records);
            out.bad.extend(batch.bad);
            *position = batch.after;
            (batch.watermark, batch.idle)
        } else {
            let batch = &hub.batches[(seq - hub.first) as usize];
            out.records.extend(batch.records.iter().cloned());
            out.bad.extend(batch.bad.iter().cloned());
            *position = batch.after.clone();
            (batch.watermark, batch.idle)
        };
        if let Some(watermark) = watermark {
            out.split_watermark(watermark);
        }
        if let Some(idle) = idle {
            out.split_idle(idle);
        }
        *next = seq + 1;
        hub.cursors.insert(id, seq + 1);
        hub.trim();
        Ok(ReadStatus::Ready)
    }

    /// Reads privately, up to the split's next boundary when the positions are ordered; a
    /// reader ahead of the split moves the split up to itself instead.
    fn read_private(&mut self, out: &mut SourceOutput<T>, max: usize) -> Result<ReadStatus> {
        let mut step = max;
        {
            let shared = self.shared.clone();
            let mut hub = lock(&shared);
            if self.meet(&mut hub) {
                drop(hub);
                return self.read_attached(out, max);
            }
            let Mode::Private(own) = &self.mode else {
                unreachable!("private")
            };
            let here = offset(&own.position());
            let head = offset(&hub.head);
            if let (Some(here), Some(head)) = (here, head) {
                if here > head && !hub.finished {
                    // Ahead: the split comes up to this reader.
                    hub.waiting_for.remove(&self.id);
                    let position = own.position();
                    if hub.cursors.is_empty() {
                        hub.reseat(&position)?;
                    } else if hub.held < self.hub.capacity && hub.waiting_for.is_empty() {
                        let status = hub.read(((here - head) as usize).min(max), &self.hub.read);
                        Self::renew_on_error(&self.source, &self.split, &mut hub, status)?;
                        hub.trim();
                    }
                    if !self.meet(&mut hub) {
                        return Ok(ReadStatus::Pending(Some(Instant::now() + WAIT)));
                    }
                    drop(hub);
                    return self.read_attached(out, max);
                }
                // Behind: read up to the next boundary held, and hold the split when close.
                if let Some(target) = hub.offsets().flatten().find(|o| *o > here) {
                    step = ((target - here) as usize).clamp(1, max);
                }
                if head.saturating_sub(here) <= self.hub.capacity as u64 {
                    hub.waiting_for.insert(self.id);
                } else {
                    hub.waiting_for.remove(&self.id);
                }
            }
        }
        let Mode::Private(own) = &mut self.mode else {
            unreachable!("private")
        };
        let before = out.records.len();
        let status = own.read(out, step)?;
        self.hub
            .read
            .fetch_add((out.records.len() - before) as u64, Ordering::Relaxed);
        if status == ReadStatus::Finished {
            lock(&self.shared).waiting_for.remove(&self.id);
        }
        Ok(status)
    }
}

impl<T: Data, S: Source<T>> SplitReader<T> for SharedReader<S, T> {
    fn split_id(&self) -> String {
        self.split_id.clone()
    }

    fn stream(&self) -> Option<String> {
        self.stream.clone()
    }

    fn former_split_id(&self) -> Option<String> {
        self.former.clone()
    }

    fn read(&mut self, out: &mut SourceOutput<T>, max: usize) -> Result<ReadStatus> {
        self.place()?;
        match self.mode {
            Mode::Attached { .. } => self.read_attached(out, max),
            _ => self.read_private(out, max),
        }
    }

    fn position(&self) -> serde_json::Value {
        match &self.mode {
            Mode::Unplaced(Start::At(position)) => position.clone(),
            // Where it will start: the split's fresh start, while it holds the batches from
            // there for it; else where any new reader of the split is.
            Mode::Unplaced(_) => {
                let hub = lock(&self.shared);
                match (&hub.fresh, hub.cursors.contains_key(&self.id)) {
                    (Some(fresh), true) => fresh.clone(),
                    _ => hub.initial.clone(),
                }
            }
            Mode::Attached { position, .. } => position.clone(),
            Mode::Private(own) => own.position(),
        }
    }

    fn checkpoint_started(&mut self, checkpoint_id: u64, event_time: SplitWatermark) {
        if let Mode::Private(own) = &mut self.mode {
            own.checkpoint_started(checkpoint_id, event_time);
        }
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<()> {
        self.leave();
        self.mode = Mode::Unplaced(Start::At(position.clone()));
        Ok(())
    }

    fn start_at_beginning(&mut self) -> Result<()> {
        self.leave();
        // Placed now: where it is before its first read is the beginning's position, which
        // only a reader placed there knows.
        self.mode = Mode::Unplaced(Start::Beginning);
        self.place()
    }

    fn checkpoint_complete(&mut self, position: &serde_json::Value) -> Result<()> {
        match &mut self.mode {
            Mode::Private(own) => own.checkpoint_complete(position),
            _ => Ok(()),
        }
    }

    fn lag(&self) -> Option<i64> {
        match &self.mode {
            Mode::Private(own) => own.lag(),
            Mode::Attached { next, .. } => {
                let hub = lock(&self.shared);
                let held: usize = hub
                    .batches
                    .iter()
                    .skip((*next).saturating_sub(hub.first) as usize)
                    .map(|b| b.records.len())
                    .sum();
                hub.reader.lag().map(|lag| lag + held as i64)
            }
            Mode::Unplaced(_) => None,
        }
    }
}

impl<T: Data, S: Source<T>> SharedReader<S, T> {
    /// Stops holding the split's batches, or holding the split back.
    fn leave(&mut self) {
        let mut hub = lock(&self.shared);
        hub.cursors.remove(&self.id);
        hub.waiting_for.remove(&self.id);
        hub.trim();
    }
}

impl<T: Data, S: Source<T>> Drop for SharedReader<S, T> {
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Numbers `0..len`, one split, its position the count read (as a number, or, when
    /// `ordered` is false, as a string, which has no order).
    struct Numbers {
        len: u64,
        ordered: bool,
        /// A read that reaches this number fails, once.
        fail_at: Arc<AtomicU64>,
    }

    struct NumbersReader {
        len: u64,
        ordered: bool,
        next: u64,
        fail_at: Arc<AtomicU64>,
    }

    impl Source<u64> for Numbers {
        type Split = ();
        fn name(&self) -> String {
            "numbers".into()
        }
        fn boundedness(&self) -> Boundedness {
            Boundedness::Bounded
        }
        fn splits(&self, _: usize) -> Result<Vec<()>> {
            Ok(vec![()])
        }
        fn reader(&self, _: ()) -> Result<Box<dyn SplitReader<u64>>> {
            Ok(Box::new(NumbersReader {
                len: self.len,
                ordered: self.ordered,
                next: 0,
                fail_at: self.fail_at.clone(),
            }))
        }
    }

    impl SplitReader<u64> for NumbersReader {
        fn split_id(&self) -> String {
            "numbers".into()
        }
        fn read(&mut self, out: &mut SourceOutput<u64>, max: usize) -> Result<ReadStatus> {
            if self.next == self.len {
                return Ok(ReadStatus::Finished);
            }
            let end = (self.next + max as u64).min(self.len);
            let fail_at = self.fail_at.load(Ordering::Relaxed);
            if (self.next..end).contains(&fail_at) {
                self.fail_at.store(u64::MAX, Ordering::Relaxed);
                // A broken reader: it stays broken.
                self.len = 0;
                return Err(crate::Error::user("the broker went away"));
            }
            for n in self.next..end {
                out.emit(n);
            }
            self.next = end;
            Ok(ReadStatus::Ready)
        }
        fn position(&self) -> serde_json::Value {
            if self.ordered {
                serde_json::json!(self.next)
            } else {
                serde_json::json!(self.next.to_string())
            }
        }
        fn seek(&mut self, position: &serde_json::Value) -> Result<()> {
            self.next = position
                .as_u64()
                .or_else(|| position.as_str().and_then(|s| s.parse().ok()))
                .expect("a position of ours");
            Ok(())
        }
    }

    fn reader(hub: &Arc<SourceHub<u64>>, len: u64, ordered: bool) -> Box<dyn SplitReader<u64>> {
        failing_reader(hub, len, ordered, u64::MAX)
    }

    fn failing_reader(
        hub: &Arc<SourceHub<u64>>,
        len: u64,
        ordered: bool,
        fail_at: u64,
    ) -> Box<dyn SplitReader<u64>> {
        let fail_at = Arc::new(AtomicU64::new(fail_at));
        hub.share(Numbers {
            len,
            ordered,
            fail_at,
        })
        .reader(())
        .unwrap()
    }

    /// One read: the numbers it gave, or `None` when it gave none (pending or finished).
    fn read(reader: &mut dyn SplitReader<u64>, max: usize) -> (Vec<u64>, ReadStatus) {
        let mut out = SourceOutput::with_capacity(max);
        let status = reader.read(&mut out, max).unwrap();
        (out.records.into_iter().map(|r| r.value).collect(), status)
    }

    /// A reader, and what it read.
    type Reading = (Box<dyn SplitReader<u64>>, Vec<u64>);

    /// Reads until every reader finished, taking turns (what each read goes to its vector).
    fn read_all(readers: &mut [Reading], max: usize) {
        let mut finished = vec![false; readers.len()];
        for _ in 0..100_000 {
            for (i, (reader, got)) in readers.iter_mut().enumerate() {
                if finished[i] {
                    continue;
                }
                let (numbers, status) = read(reader.as_mut(), max);
                got.extend(numbers);
                finished[i] = status == ReadStatus::Finished;
            }
            if finished.iter().all(|f| *f) {
                return;
            }
        }
        panic!("the readers never finished");
    }

    #[test]
    fn readers_that_start_together_read_the_split_once() {
        let hub = SourceHub::new();
        let mut readers: Vec<_> = (0..3)
            .map(|_| (reader(&hub, 10_000, true), vec![]))
            .collect();
        read_all(&mut readers, 64);
        for (_, got) in &readers {
            assert_eq!(*got, (0..10_000).collect::<Vec<_>>());
        }
        assert_eq!(hub.records_read(), 10_000);
    }

    #[test]
    fn a_reader_restored_behind_catches_up_and_joins() {
        let hub = SourceHub::new();
        let mut a = reader(&hub, 10_000, true);
        let mut got_a = Vec::new();
        while got_a.len() < 3_000 {
            got_a.extend(read(a.as_mut(), 100).0);
        }
        // `b` resumes at 1234, behind `a` and not on one of its batches' boundaries.
        let mut b = reader(&hub, 10_000, true);
        b.seek(&serde_json::json!(1234)).unwrap();
        let mut readers = vec![(a, got_a), (b, vec![])];
        read_all(&mut readers, 100);
        assert_eq!(readers[0].1, (0..10_000).collect::<Vec<_>>());
        assert_eq!(readers[1].1, (1234..10_000).collect::<Vec<_>>());
        // `b` read privately only up to where `a` was, and then took `a`'s batches.
        let read = hub.records_read();
        assert!(read < 10_000 + 3_000, "{read} records read");
    }

    #[test]
    fn a_reader_restored_ahead_brings_the_split_to_itself() {
        let hub = SourceHub::new();
        let mut a = reader(&hub, 10_000, true);
        a.seek(&serde_json::json!(500)).unwrap();
        let (first, _) = read(a.as_mut(), 100);
        assert_eq!(first, (500..600).collect::<Vec<_>>());
        let mut b = reader(&hub, 10_000, true);
        b.seek(&serde_json::json!(5_555)).unwrap();
        let mut readers = vec![(a, first), (b, vec![])];
        read_all(&mut readers, 100);
        assert_eq!(readers[0].1, (500..10_000).collect::<Vec<_>>());
        assert_eq!(readers[1].1, (5_555..10_000).collect::<Vec<_>>());
        assert_eq!(hub.records_read(), 9_500, "each record read once");
    }

    #[test]
    fn a_reader_far_behind_holds_the_others_back_and_one_that_leaves_lets_them_go() {
        let hub = SourceHub::with_capacity(1_000);
        let mut a = reader(&hub, 100_000, true);
        let b = reader(&hub, 100_000, true);
        let mut got = Vec::new();
        let mut status = ReadStatus::Ready;
        for _ in 0..100 {
            let (numbers, s) = read(a.as_mut(), 100);
            got.extend(numbers);
            status = s;
        }
        // `b` never read: `a` is at most the hub's capacity (and a batch) ahead.
        assert!(matches!(status, ReadStatus::Pending(_)), "{status:?}");
        assert_eq!(got, (0..1_000).collect::<Vec<_>>());
        drop(b);
        let (numbers, _) = read(a.as_mut(), 100);
        assert_eq!(numbers, (1_000..1_100).collect::<Vec<_>>());
    }

    #[test]
    fn positions_without_an_order_read_privately_and_right() {
        let hub = SourceHub::new();
        let mut a = reader(&hub, 5_000, false);
        let mut got_a = Vec::new();
        while got_a.len() < 1_000 {
            got_a.extend(read(a.as_mut(), 64).0);
        }
        let mut b = reader(&hub, 5_000, false);
        b.seek(&serde_json::json!("77")).unwrap();
        let mut readers = vec![(a, got_a), (b, vec![])];
        read_all(&mut readers, 64);
        assert_eq!(readers[0].1, (0..5_000).collect::<Vec<_>>());
        assert_eq!(readers[1].1, (77..5_000).collect::<Vec<_>>());
    }

    #[test]
    fn a_reader_at_a_boundary_joins_at_once_and_reports_the_positions_of_the_split() {
        let hub = SourceHub::new();
        let mut a = reader(&hub, 1_000, true);
        // `c` has not read yet: the batches from the start are held for it.
        let mut c = reader(&hub, 1_000, true);
        let mut b = reader(&hub, 1_000, true);
        assert_eq!(read(a.as_mut(), 100).0.len(), 100);
        assert_eq!(read(a.as_mut(), 100).0.len(), 100);
        b.seek(&serde_json::json!(100)).unwrap();
        let (numbers, _) = read(b.as_mut(), 100);
        assert_eq!(numbers, (100..200).collect::<Vec<_>>());
        assert_eq!(b.position(), serde_json::json!(200));
        assert_eq!(read(c.as_mut(), 100).0, (0..100).collect::<Vec<_>>());
        assert_eq!(hub.records_read(), 200);
    }

    #[test]
    fn a_failed_read_fails_the_job_reading_and_the_split_reads_on_with_a_new_reader() {
        let hub = SourceHub::new();
        let mut a = failing_reader(&hub, 1_000, true, 450);
        let mut b = reader(&hub, 1_000, true);
        let mut got_b = Vec::new();
        for _ in 0..4 {
            got_b.extend(read(b.as_mut(), 100).0);
            assert_eq!(read(a.as_mut(), 100).0.len(), 100);
        }
        // `b` reads the batch with 450 for both: the read fails, `b`'s job with it.
        let mut out = SourceOutput::with_capacity(100);
        assert!(b.read(&mut out, 100).is_err());
        let restored = b.position();
        drop(b);
        // `b`'s job restarts from its position; `a` reads on: both get every number once.
        let mut b = reader(&hub, 1_000, true);
        b.seek(&restored).unwrap();
        let mut readers = vec![(a, (0..400).collect()), (b, got_b)];
        read_all(&mut readers, 100);
        for (_, got) in &readers {
            assert_eq!(*got, (0..1_000).collect::<Vec<_>>());
        }
    }

    /// Two jobs reading a file of nine ranges through one hub, as two subtasks each (a subtask
    /// reads its ranges one after the other, their readers opened at once), the second job
    /// made later, both "killed" and restored from their positions: each reads every line once.
    #[test]
    fn jobs_reading_a_file_in_ranges_read_every_line_once_through_a_restore() {
        use crate::source::file::FileSource;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lines.txt");
        let lines: Vec<String> = (0..30_000).map(|i| format!("line {i}")).collect();
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        let size = std::fs::metadata(&path).unwrap().len();
        let source = || FileSource::lines(&path).split_size(size / 9 + 1);
        let splits = source().splits(2).unwrap();
        assert_eq!(splits.len(), 9);
        /// A job: each subtask's readers (ranges `i % 2 == subtask`), and which it is on.
        struct Job {
            readers: Vec<Vec<Box<dyn SplitReader<String>>>>,
            on: [usize; 2],
            got: Vec<String>,
        }
        impl Job {
            /// One read of `subtask`'s current range; whether the subtask is done.
            fn step(&mut self, subtask: usize, max: usize) -> bool {
                let Some(reader) = self.readers[subtask].get_mut(self.on[subtask]) else {
                    return true;
                };
                let mut out = SourceOutput::with_capacity(max);
                let status = reader.read(&mut out, max).unwrap();
                self.got.extend(out.records.into_iter().map(|r| r.value));
                if status == ReadStatus::Finished {
                    self.on[subtask] += 1;
                }
                false
            }
            fn positions(&self) -> Vec<Vec<serde_json::Value>> {
                let at = |rs: &Vec<Box<dyn SplitReader<String>>>| {
                    rs.iter().map(|r| r.position()).collect()
                };
                self.readers.iter().map(at).collect()
            }
        }
        for schedule in 0..8u64 {
            let open = |hub: &Arc<SourceHub<String>>,
                        at: Option<&Vec<Vec<serde_json::Value>>>,
                        got: Vec<String>| {
                let mut readers: Vec<Vec<Box<dyn SplitReader<String>>>> =
                    vec![Vec::new(), Vec::new()];
                for (i, split) in splits.iter().enumerate() {
                    let mut r = hub.share(source()).reader(split.clone()).unwrap();
                    if let Some(at) = at {
                        r.seek(&at[i % 2][i / 2]).unwrap();
                    }
                    readers[i % 2].push(r);
                }
                Job {
                    readers,
                    on: [0, 0],
                    got,
                }
            };
            let hub = SourceHub::new();
            let mut first = open(&hub, None, Vec::new());
            for turn in 0..(20 + schedule * 9) {
                first.step((turn % 2) as usize, 100 + schedule as usize * 37);
            }
            let mut second = open(&hub, None, Vec::new());
            for turn in 0..(40 + schedule * 13) {
                second.step((turn % 2) as usize, 50 + schedule as usize * 13);
                if turn % 3 != 0 {
                    first.step((turn % 2) as usize, 100);
                }
            }
            // The kill: each job's checkpoint is its readers' positions and what it emitted.
            let at = [first.positions(), second.positions()];
            let got = [
                std::mem::take(&mut first.got),
                std::mem::take(&mut second.got),
            ];
            drop((first, second));
            let hub = SourceHub::new();
            let [got0, got1] = got;
            let mut jobs = [
                open(&hub, Some(&at[0]), got0),
                open(&hub, Some(&at[1]), got1),
            ];
            for _ in 0..100_000 {
                let mut done = true;
                for job in jobs.iter_mut() {
                    for subtask in 0..2 {
                        done &= job.step(subtask, 100);
                    }
                }
                if done {
                    break;
                }
            }
            for (j, job) in jobs.iter().enumerate() {
                let mut got = job.got.clone();
                got.sort();
                let mut want = lines.clone();
                want.sort();
                assert_eq!(got.len(), want.len(), "job {j}, schedule {schedule}");
                assert_eq!(got, want, "job {j}, schedule {schedule}");
            }
        }
    }

    proptest::proptest! {
        /// Whatever the readers' starts, the order they read in and how much each asks for,
        /// every reader reads exactly its split from its start, and a hub of any capacity
        /// never stops them all.
        #[test]
        fn every_reader_reads_its_split_from_its_start(
            starts in proptest::collection::vec(
                (proptest::option::of(0u64..2_000), 0usize..200), 1..5),
            turns in proptest::collection::vec((0usize..5, 1usize..300), 1..400),
            kill_at in proptest::option::of(0usize..400),
            capacity in 1usize..3_000,
            ordered: bool,
        ) {
            let len = 2_000;
            let mut hub = SourceHub::with_capacity(capacity);
            let position = |p: u64| if ordered { serde_json::json!(p) } else { serde_json::json!(p.to_string()) };
            // Reader `i` is made (and seeks) at turn `starts[i].1`: some only once others read.
            let make = |hub: &Arc<SourceHub<u64>>, at: Option<serde_json::Value>| {
                let mut r = reader(hub, len, ordered);
                if let Some(p) = at {
                    r.seek(&p).unwrap();
                }
                r
            };
            let mut readers: Vec<Option<Reading>> = starts.iter().map(|_| None).collect();
            for (turn, (who, max)) in turns.into_iter().enumerate() {
                for (i, (start, at)) in starts.iter().enumerate() {
                    if *at == turn {
                        readers[i] = Some((make(&hub, start.map(position)), Vec::new()));
                    }
                }
                if kill_at == Some(turn) {
                    // Every job restarts from its reader's position, on a new hub.
                    hub = SourceHub::with_capacity(capacity);
                    for reading in readers.iter_mut().flatten() {
                        let at = reading.0.position();
                        reading.0 = make(&hub, Some(at));
                    }
                }
                if let Some(Some((r, got))) = readers.get_mut(who) {
                    got.extend(read(r.as_mut(), max).0);
                }
            }
            let mut readers: Vec<Reading> = readers
                .into_iter()
                .zip(&starts)
                .map(|(r, (start, _))| r.unwrap_or_else(|| (make(&hub, start.map(position)), Vec::new())))
                .collect();
            read_all(&mut readers, 97);
            for ((start, _), (_, got)) in starts.iter().zip(&readers) {
                proptest::prop_assert_eq!(got.clone(), (start.unwrap_or(0)..len).collect::<Vec<_>>());
            }
        }
    }
}

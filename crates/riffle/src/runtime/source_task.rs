//! The task loop of a source subtask: reads its splits in turn, assigns event time and applies the
//! bad-record policy, pushes batches into the chain, emits watermarks (per split, merged) at the
//! watermark interval, sleeps when there is nothing to read, and ends the input when the splits
//! are exhausted (with the final watermark) or when the job is stopped. The parts of one stream
//! (the byte ranges of a file, [`SplitReader::stream`]) that a subtask owns are one slot: read
//! one after the other, in order, with one watermark.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::checkpoint::{
    OperatorSnapshot, Redistribution, RestoreState, SnapshotWriter, TaskSnapshot,
};
use crate::error::{Error, Result};
use crate::metrics::OperatorMetrics;
use crate::record::{CheckpointBarrier, Data, LatencyMarker, MAX_WATERMARK};
use crate::runtime::{CANCEL_POLL, Output, TaskContext, TaskDriver};
use crate::source::watermarks::{SourceWatermarks, SplitWatermark, WatermarkUpdate};
use crate::source::{
    BadRecordHandler, Boundedness, DeadLetter, ReadStatus, Source, SourceOutput, SplitReader,
};
use crate::time::{Clock, WatermarkStrategy};

/// A source in the job graph, with its type hidden from the graph.
pub(crate) trait ErasedSource: Send + Sync {
    fn validate(&self) -> Result<()>;
    /// Builds the driver of one subtask.
    fn task(&self, setup: SourceTaskSetup) -> Result<Box<dyn TaskDriver>>;
}

/// What the graph gives a source subtask.
pub(crate) struct SourceTaskSetup {
    pub(crate) name: String,
    pub(crate) operator_id: String,
    pub(crate) restore: Option<RestoreState>,
    pub(crate) subtask: usize,
    pub(crate) parallelism: usize,
    /// A `Box<dyn Output<T>>`.
    pub(crate) output: Box<dyn std::any::Any + Send>,
    pub(crate) dead_letter: Box<dyn Output<DeadLetter>>,
    pub(crate) metrics: Arc<OperatorMetrics>,
    pub(crate) ctx: TaskContext,
    pub(crate) batch_size: usize,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) watermark_interval: Duration,
    /// Emit the watermark after every batch, whatever the strategy says.
    pub(crate) watermark_after_every_batch: bool,
    /// How often to send a latency marker (`None`: never).
    pub(crate) latency_interval: Option<Duration>,
}

/// A typed [`Source`] with its watermark strategy, as the job graph holds it; enumerates the
/// splits once per run of the job.
pub(crate) struct SourceSpec<T: Data, S: Source<T>> {
    source: Arc<S>,
    strategy: WatermarkStrategy<T>,
    splits: Mutex<Option<Vec<S::Split>>>,
}

impl<T: Data, S: Source<T>> SourceSpec<T, S> {
    pub(crate) fn new(source: S, strategy: WatermarkStrategy<T>) -> Self {
        SourceSpec {
            source: Arc::new(source),
            strategy,
            splits: Mutex::new(None),
        }
    }
}

impl<T: Data, S: Source<T>> ErasedSource for SourceSpec<T, S> {
    fn validate(&self) -> Result<()> {
        // A new run enumerates the splits again.
        *self.splits.lock().expect("splits lock") = None;
        self.source.validate()
    }

    fn task(&self, setup: SourceTaskSetup) -> Result<Box<dyn TaskDriver>> {
        let in_operator = |e: Error| e.in_operator(&setup.name, setup.subtask);
        let mut splits = self.splits.lock().expect("splits lock");
        if splits.is_none() {
            *splits = Some(self.source.splits(setup.parallelism)?);
        }
        let mut discovery = Discovery {
            source: self.source.clone(),
            subtask: setup.subtask,
            parallelism: setup.parallelism,
            known: HashSet::new(),
            interval: Duration::ZERO,
            next: Instant::now(),
            _records: std::marker::PhantomData,
        };
        let readers = discovery
            .readers_for(splits.as_ref().expect("splits enumerated"))
            .map_err(in_operator)?;
        let discovery = self.source.discovery_interval().map(|interval| {
            discovery.interval = interval;
            discovery.next = Instant::now() + interval;
            Box::new(discovery) as Box<dyn DiscoverSplits<T>>
        });
        // Every old subtask's splits reach every new one: each resumes the splits it reads.
        let mut restored = HashMap::new();
        if let Some(restore) = &setup.restore {
            for bytes in &restore.operator {
                for split in SplitCheckpoint::decode_all(bytes).map_err(in_operator)? {
                    restored.insert(split.split.clone(), split);
                }
            }
        }
        let output = *setup.output.downcast::<Box<dyn Output<T>>>().map_err(|_| {
            Error::Graph(format!("source `{}`: output of another type", setup.name))
        })?;
        let mut task = SourceTask {
            operator_id: setup.operator_id,
            parallelism: setup.parallelism,
            last_barrier: 0,
            watermarks: {
                let watermarks = SourceWatermarks::new(
                    self.strategy
                        .clone()
                        .after_every_batch_if(setup.watermark_after_every_batch),
                    0,
                    setup.clock,
                );
                if self.source.supplies_watermarks() {
                    watermarks.supplied_by_readers()
                } else {
                    watermarks
                }
            },
            watermark_interval: setup.watermark_interval,
            latency_interval: setup.latency_interval,
            splits: Vec::new(),
            restored,
            discovery,
            positions_in_flight: VecDeque::new(),
            chain: output,
            dead_letter: setup.dead_letter,
            bad_records: BadRecordHandler::new(self.source.bad_record_policy(), &setup.name),
            bounded: self.source.boundedness() == Boundedness::Bounded,
            name: setup.name,
            subtask: setup.subtask,
            metrics: setup.metrics,
            ctx: setup.ctx,
            batch_size: setup.batch_size,
        };
        // Restoring, a split the checkpoint does not know appeared after it was taken.
        let restoring = setup.restore.is_some();
        task.add_splits(readers, restoring)?;
        Ok(Box::new(task))
    }
}

/// How many split readers a source subtask opens at once.
const OPEN_AT_ONCE: usize = 8;

/// Asks a source for its splits again and opens readers for the new ones this subtask owns.
struct Discovery<T: Data, S: Source<T>> {
    source: Arc<S>,
    subtask: usize,
    parallelism: usize,
    /// The splits already read, by their debug form.
    known: HashSet<String>,
    interval: Duration,
    next: Instant,
    _records: std::marker::PhantomData<fn() -> T>,
}

impl<T: Data, S: Source<T>> Discovery<T, S> {
    /// Readers of the splits of `splits` this subtask owns and has not read yet, in their order.
    /// Opening a reader may wait on the network (a Kafka consumer looks up its committed
    /// offset), so several are opened at once, up to [`OPEN_AT_ONCE`]: that is a restore's or a
    /// fail-over's time to first record.
    fn readers_for(&mut self, splits: &[S::Split]) -> Result<Vec<Box<dyn SplitReader<T>>>> {
        let mut mine = Vec::new();
        for (index, split) in splits.iter().enumerate() {
            if self.source.owner(split, index, self.parallelism) % self.parallelism != self.subtask
            {
                continue;
            }
            if self.known.insert(format!("{split:?}")) {
                mine.push(split.clone());
            }
        }
        if mine.len() < 2 {
            return mine
                .into_iter()
                .map(|split| self.source.reader(split))
                .collect();
        }
        let source = &self.source;
        let mut readers = Vec::with_capacity(mine.len());
        for chunk in mine.chunks(OPEN_AT_ONCE) {
            std::thread::scope(|scope| {
                let opening: Vec<_> = chunk
                    .iter()
                    .map(|split| {
                        let split = split.clone();
                        std::thread::Builder::new()
                            .name("riffle-open-split".into())
                            .spawn_scoped(scope, move || source.reader(split))
                    })
                    .collect();
                for open in opening {
                    let reader = match open {
                        Ok(thread) => thread.join().unwrap_or_else(|_| {
                            Err(Error::Graph("opening a split's reader panicked".into()))
                        }),
                        Err(e) => Err(Error::io("cannot start a thread to open a split", e)),
                    };
                    readers.push(reader);
                }
            });
        }
        readers.into_iter().collect()
    }
}

/// Split discovery with the source's type hidden from the task.
trait DiscoverSplits<T>: Send {
    /// Readers of the splits that appeared since the last call, once the interval elapsed.
    fn poll(&mut self, now: Instant) -> Result<Vec<Box<dyn SplitReader<T>>>>;
}

impl<T: Data, S: Source<T>> DiscoverSplits<T> for Discovery<T, S> {
    fn poll(&mut self, now: Instant) -> Result<Vec<Box<dyn SplitReader<T>>>> {
        if now < self.next {
            return Ok(Vec::new());
        }
        self.next = now + self.interval;
        let splits = self.source.splits(self.parallelism)?;
        self.readers_for(&splits)
    }
}

/// What the task reads as one input with one watermark: a split, or the parts of one stream
/// (the byte ranges of one file) that the subtask owns, read one after the other.
struct SplitSlot<T> {
    /// The splits, in the order of [`Source::splits`].
    parts: Vec<Box<dyn SplitReader<T>>>,
    /// The part being read: every part before it is exhausted.
    current: usize,
    finished: bool,
    retry_at: Option<Instant>,
}

/// What a source's checkpoint holds for one split: where to resume reading, and its event time.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct SplitCheckpoint {
    /// [`SplitReader::split_id`].
    split: String,
    /// [`SplitReader::position`], as JSON text.
    position: String,
    /// The split's watermark and idleness.
    event_time: SplitWatermark,
}

/// Tags the source state's format (checkpoints written before the split's event time was part
/// of them hold a bare list of `(split, position)`).
const SOURCE_STATE_FORMAT: &str = "riffle.source.splits.v2";

impl SplitCheckpoint {
    fn encode_all(splits: &[SplitCheckpoint], writer: &mut SnapshotWriter) -> Result<()> {
        writer.write_operator(Redistribution::Union, &(SOURCE_STATE_FORMAT, splits))
    }

    /// The splits of one old subtask's state, in the current format or the earlier one.
    fn decode_all(bytes: &[u8]) -> Result<Vec<SplitCheckpoint>> {
        if let Ok((format, splits)) = crate::codec::decode::<(String, Vec<SplitCheckpoint>)>(bytes)
            && format == SOURCE_STATE_FORMAT
        {
            return Ok(splits);
        }
        let positions: Vec<(String, String)> = crate::codec::decode(bytes)?;
        Ok(positions
            .into_iter()
            .map(|(split, position)| SplitCheckpoint {
                split,
                position,
                event_time: SplitWatermark::default(),
            })
            .collect())
    }
}

/// The driver of one source subtask.
pub(crate) struct SourceTask<T> {
    name: String,
    operator_id: String,
    subtask: usize,
    parallelism: usize,
    /// The last checkpoint barrier injected.
    last_barrier: u64,
    splits: Vec<SplitSlot<T>>,
    /// Splits of the restored checkpoint, by split id.
    restored: HashMap<String, SplitCheckpoint>,
    /// Looks for new splits while the job runs, when the source asks for it.
    discovery: Option<Box<dyn DiscoverSplits<T>>>,
    /// The positions each checkpoint stored (one per split, in slot and part order), until it
    /// completes.
    positions_in_flight: VecDeque<(u64, Vec<serde_json::Value>)>,
    watermarks: SourceWatermarks<T>,
    watermark_interval: Duration,
    latency_interval: Option<Duration>,
    chain: Box<dyn Output<T>>,
    dead_letter: Box<dyn Output<DeadLetter>>,
    bad_records: BadRecordHandler,
    bounded: bool,
    metrics: Arc<OperatorMetrics>,
    ctx: TaskContext,
    batch_size: usize,
}

impl<T: Data> SourceTask<T> {
    /// Starts reading splits (in the order of [`Source::splits`]): the parts of one stream
    /// ([`SplitReader::stream`]) make one slot, read one after the other; any other split is a
    /// slot of its own.
    fn add_splits(&mut self, readers: Vec<Box<dyn SplitReader<T>>>, new: bool) -> Result<()> {
        let mut slots: Vec<Vec<Box<dyn SplitReader<T>>>> = Vec::new();
        let mut by_stream: HashMap<String, usize> = HashMap::new();
        for reader in readers {
            let Some(stream) = reader.stream() else {
                slots.push(vec![reader]);
                continue;
            };
            match by_stream.get(&stream) {
                Some(&slot) => slots[slot].push(reader),
                None => {
                    by_stream.insert(stream, slots.len());
                    slots.push(vec![reader]);
                }
            }
        }
        for parts in slots {
            self.add_slot(parts, new)?;
        }
        Ok(())
    }

    /// Starts reading a slot's splits: each from its restored position if the checkpoint has
    /// it, else from its beginning if it is `new` (appeared after the job first started), else
    /// from the source's configured start. The slot's watermark resumes at the lowest of its
    /// parts' restored watermarks (their slots at the old parallelism may have been apart).
    fn add_slot(&mut self, mut parts: Vec<Box<dyn SplitReader<T>>>, new: bool) -> Result<()> {
        self.watermarks.add_split();
        let mut event_time: Option<SplitWatermark> = None;
        let mut all_restored = true;
        for reader in &mut parts {
            let restored = self.restored.get(&reader.split_id()).or_else(|| {
                let former = reader.former_split_id()?;
                self.restored.get(&former)
            });
            let part = match restored {
                Some(restored) => {
                    let position: serde_json::Value =
                        serde_json::from_str(&restored.position).map_err(Error::user)?;
                    reader.seek(&position)?;
                    restored.event_time
                }
                None => {
                    if new {
                        reader.start_at_beginning()?;
                    }
                    match reader.resume_event_time() {
                        Some(resumed) => resumed,
                        None => {
                            all_restored = false;
                            continue;
                        }
                    }
                }
            };
            event_time = Some(event_time.map_or(part, |slot| SplitWatermark {
                watermark: slot.watermark.zip(part.watermark).map(|(a, b)| a.min(b)),
                idle: slot.idle && part.idle,
            }));
        }
        if all_restored && let Some(event_time) = event_time {
            self.watermarks.restore_split(self.splits.len(), event_time);
        }
        self.splits.push(SplitSlot {
            parts,
            current: 0,
            finished: false,
            retry_at: None,
        });
        Ok(())
    }

    /// Picks up the splits that appeared since the last look (new Kafka partitions).
    fn discover(&mut self, now: Instant) -> Result<()> {
        let Some(discovery) = &mut self.discovery else {
            return Ok(());
        };
        let readers = discovery.poll(now)?;
        for reader in &readers {
            tracing::info!(operator = %self.name, subtask = self.subtask, split = %reader.split_id(), "reading a new split");
        }
        self.add_splits(readers, true)
    }

    /// A checkpoint completed: tells each reader the position it stored (the latest completed).
    fn checkpoint_complete(&mut self, completed: u64) -> Result<()> {
        let mut latest = None;
        while self
            .positions_in_flight
            .front()
            .is_some_and(|(id, _)| *id <= completed)
        {
            latest = self.positions_in_flight.pop_front();
        }
        if let Some((_, positions)) = latest {
            let readers = self.splits.iter_mut().flat_map(|s| s.parts.iter_mut());
            for (reader, position) in readers.zip(&positions) {
                reader.checkpoint_complete(position)?;
            }
        }
        Ok(())
    }

    /// Publishes each split's lag behind its end, for the readers that know it.
    fn report_lag(&self) {
        for reader in self.splits.iter().flat_map(|s| &s.parts) {
            if let Some(lag) = reader.lag() {
                self.metrics.set_split_lag(&reader.split_id(), lag);
            }
        }
    }
    /// One pass over the splits that can be read now. Returns whether anything was read and the
    /// earliest instant a pending split wants to be asked again.
    fn read_round(&mut self, out: &mut SourceOutput<T>) -> Result<(bool, Option<Instant>)> {
        let now = Instant::now();
        let mut progressed = false;
        let mut earliest: Option<Instant> = None;
        for index in 0..self.splits.len() {
            let slot = &mut self.splits[index];
            if slot.finished {
                continue;
            }
            if let Some(at) = slot.retry_at
                && at > now
            {
                earliest = Some(earliest.map_or(at, |e| e.min(at)));
                continue;
            }
            let part = slot.current;
            let status = slot.parts[part].read(out, self.batch_size)?;
            slot.retry_at = None;
            match status {
                ReadStatus::Ready => {}
                ReadStatus::Finished => {
                    slot.current += 1;
                    if slot.current == slot.parts.len() {
                        slot.finished = true;
                        self.watermarks.split_finished(index);
                    } else {
                        // The next part is read right away.
                        progressed = true;
                    }
                }
                ReadStatus::Pending(at) => {
                    let at = at.unwrap_or(now + Duration::from_millis(1));
                    slot.retry_at = Some(at);
                    earliest = Some(earliest.map_or(at, |e| e.min(at)));
                }
            }
            self.watermarks
                .on_supplied(index, out.watermark.take(), out.idle.take());
            let outliers = self
                .watermarks
                .on_records(index, &mut out.records, &mut out.bad);
            if outliers > 0 {
                self.metrics.add_watermark_outliers(outliers);
            }
            if let Some(newest) = self.watermarks.newest() {
                self.metrics
                    .set_newest_event(newest.event_time, newest.read_at);
            }
            if !out.bad.is_empty() {
                let split = self.splits[index].parts[part].split_id();
                let dead_letter = &mut self.dead_letter;
                self.bad_records
                    .handle(out.bad.drain(..), &split, &self.metrics, |letter| {
                        dead_letter.records(&mut vec![letter])
                    })?;
            }
            if !out.records.is_empty() {
                progressed = true;
                self.metrics.add_out(out.records.len() as u64);
                self.chain.records(&mut out.records)?;
                out.records.clear();
                if self.watermarks.every_batch() {
                    self.emit_watermarks()?;
                }
            }
        }
        Ok((progressed, earliest))
    }

    fn emit_watermarks(&mut self) -> Result<()> {
        for update in self.watermarks.poll() {
            match update {
                WatermarkUpdate::Idle(idle) => self.chain.idle(idle)?,
                WatermarkUpdate::Watermark(watermark) => {
                    self.metrics.set_watermark(watermark);
                    self.chain.watermark(watermark)?
                }
            }
        }
        Ok(())
    }

    /// Writes the splits' positions and watermarks, sends the barrier down the chain, hands the
    /// snapshot over.
    fn inject(&mut self, barrier: CheckpointBarrier) -> Result<()> {
        let mut values: Vec<serde_json::Value> = Vec::new();
        let mut splits: Vec<SplitCheckpoint> = Vec::new();
        for (index, slot) in self.splits.iter_mut().enumerate() {
            // Every part of a slot carries the slot's event time.
            let event_time = self.watermarks.snapshot_split(index);
            for reader in &mut slot.parts {
                reader.checkpoint_started(barrier.id, event_time);
                let position = reader.position();
                splits.push(SplitCheckpoint {
                    split: reader.split_id(),
                    position: position.to_string(),
                    event_time,
                });
                values.push(position);
            }
        }
        self.positions_in_flight.push_back((barrier.id, values));
        let mut writer = SnapshotWriter::default();
        SplitCheckpoint::encode_all(&splits, &mut writer)?;
        let mut snapshot = TaskSnapshot::new(barrier.id);
        snapshot.operators.push(OperatorSnapshot {
            id: self.operator_id.clone(),
            name: self.name.clone(),
            subtask: self.subtask,
            parallelism: self.parallelism,
            writer,
        });
        self.chain.barrier(barrier, &mut snapshot)?;
        self.dead_letter.barrier(barrier, &mut snapshot)?;
        self.ctx.submit(snapshot, Duration::ZERO)?;
        self.last_barrier = barrier.id;
        Ok(())
    }

    /// Reads until the splits are exhausted (`true`) or the job is stopped (`false`).
    fn run_loop(&mut self) -> Result<bool> {
        let mut out = SourceOutput::with_capacity(self.batch_size);
        let mut next_tick = Instant::now() + self.ctx.buffer_timeout;
        let mut next_watermark = Instant::now();
        let mut next_marker = Instant::now();
        let mut notified = 0;
        loop {
            if self.ctx.control.is_cancelled() {
                return Err(Error::Cancelled);
            }
            if let Some(barrier) = self
                .ctx
                .checkpoints
                .as_ref()
                .and_then(|hub| hub.barrier_after(self.last_barrier))
            {
                self.inject(barrier)?;
                if barrier.terminate {
                    // Stop with a savepoint: nothing after its barrier.
                    self.ctx.control.stopped_at_savepoint();
                    return Ok(false);
                }
            }
            if self.ctx.control.is_stop_requested() {
                return Ok(false);
            }
            if self.splits.iter().all(|s| s.finished) && (self.bounded || !self.splits.is_empty()) {
                return Ok(true);
            }
            let (progressed, earliest) = self.read_round(&mut out)?;
            let now = Instant::now();
            if now >= next_watermark {
                self.emit_watermarks()?;
                self.report_lag();
                self.discover(now)?;
                next_watermark = now + self.watermark_interval;
            }
            if now >= next_tick {
                if let Some(completed) = self.ctx.completed_checkpoint(&mut notified) {
                    self.checkpoint_complete(completed)?;
                    self.chain.notify_complete(completed)?;
                    self.dead_letter.notify_complete(completed)?;
                }
                self.chain.tick()?;
                self.dead_letter.tick()?;
                next_tick = now + self.ctx.buffer_timeout;
            }
            if let Some(interval) = self.latency_interval
                && now >= next_marker
            {
                let created = Instant::now();
                self.chain.latency_marker(LatencyMarker { created })?;
                next_marker = now + interval;
            }
            if !progressed {
                let wake = earliest
                    .unwrap_or(next_tick)
                    .min(next_tick)
                    .min(next_watermark);
                let sleep = wake.saturating_duration_since(now).min(CANCEL_POLL);
                if !sleep.is_zero() {
                    std::thread::sleep(sleep);
                    self.ctx.metrics.add_idle(sleep);
                }
            }
        }
    }
}

impl<T: Data> TaskDriver for SourceTask<T> {
    fn run(mut self: Box<Self>) -> Result<()> {
        self.chain.open()?;
        self.dead_letter.open()?;
        let exhausted = self
            .run_loop()
            .map_err(|e| e.in_operator(&self.name, self.subtask))?;
        if exhausted {
            // A bounded input is complete: every window can fire (batch is a special case of streaming).
            self.metrics.set_watermark(MAX_WATERMARK);
            self.chain.watermark(MAX_WATERMARK)?;
            self.dead_letter.watermark(MAX_WATERMARK)?;
        }
        self.chain.finish()?;
        self.dead_letter.finish()?;
        let last = self.last_barrier;
        if self.ctx.takes_checkpoints() {
            // The final snapshot (FLIP-147): the splits' positions at their end and what the
            // chain's sinks wrote; it stands for this task in every later checkpoint.
            self.inject(CheckpointBarrier {
                id: crate::checkpoint::FINAL_SNAPSHOT,
                timestamp: 0,
                terminate: false,
                unaligned: false,
            })
            .map_err(|e| e.in_operator(&self.name, self.subtask))?;
        }
        self.ctx.finished(last);
        Ok(())
    }
}

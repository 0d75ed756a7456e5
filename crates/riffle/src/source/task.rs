//! The task loop of a source subtask: reads its splits in turn, assigns event time and applies the
//! bad-record policy, pushes batches into the chain, emits watermarks (per split, merged) at the
//! watermark interval, sleeps when there is nothing to read, and ends the input when the splits
//! are exhausted (with the final watermark) or when the job is stopped.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::checkpoint::{
    OperatorSnapshot, Redistribution, RestoreState, SnapshotWriter, TaskSnapshot,
};
use crate::error::{Error, Result};
use crate::metrics::OperatorMetrics;
use crate::record::{CheckpointBarrier, Data, MAX_WATERMARK};
use crate::runtime::{CANCEL_POLL, Output, TaskContext, TaskDriver};
use crate::source::watermarks::{SourceWatermarks, WatermarkUpdate};
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
}

/// A typed [`Source`] with its watermark strategy, as the job graph holds it; enumerates the
/// splits once per run of the job.
pub(crate) struct SourceSpec<T: Data, S: Source<T>> {
    source: S,
    strategy: WatermarkStrategy<T>,
    splits: Mutex<Option<Vec<S::Split>>>,
}

impl<T: Data, S: Source<T>> SourceSpec<T, S> {
    pub(crate) fn new(source: S, strategy: WatermarkStrategy<T>) -> Self {
        SourceSpec {
            source,
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
        let mut splits = self.splits.lock().expect("splits lock");
        if splits.is_none() {
            *splits = Some(self.source.splits(setup.parallelism)?);
        }
        let readers = splits
            .as_ref()
            .expect("splits enumerated")
            .iter()
            .enumerate()
            .filter(|(i, _)| i % setup.parallelism == setup.subtask)
            .map(|(_, split)| self.source.reader(split.clone()))
            .collect::<Result<Vec<_>>>()
            .map_err(|e| e.in_operator(&setup.name, setup.subtask))?;
        let mut readers = readers;
        if let Some(restore) = &setup.restore {
            // Every old subtask's positions reach every new one: each seeks the splits it reads.
            let mut positions = std::collections::HashMap::new();
            for state in restore.operator::<Vec<(String, String)>>() {
                positions.extend(state.map_err(|e| e.in_operator(&setup.name, setup.subtask))?);
            }
            for reader in &mut readers {
                if let Some(position) = positions.get(&reader.split_id()) {
                    let position: serde_json::Value =
                        serde_json::from_str(position).map_err(Error::user)?;
                    reader
                        .seek(&position)
                        .map_err(|e| e.in_operator(&setup.name, setup.subtask))?;
                }
            }
        }
        let output = *setup.output.downcast::<Box<dyn Output<T>>>().map_err(|_| {
            Error::Graph(format!("source `{}`: output of another type", setup.name))
        })?;
        Ok(Box::new(SourceTask {
            operator_id: setup.operator_id,
            parallelism: setup.parallelism,
            last_barrier: 0,
            watermarks: SourceWatermarks::new(self.strategy.clone(), readers.len(), setup.clock),
            watermark_interval: setup.watermark_interval,
            splits: readers
                .into_iter()
                .map(|reader| SplitSlot {
                    reader,
                    finished: false,
                    retry_at: None,
                })
                .collect(),
            chain: output,
            dead_letter: setup.dead_letter,
            bad_records: BadRecordHandler::new(self.source.bad_record_policy(), &setup.name),
            bounded: self.source.boundedness() == Boundedness::Bounded,
            name: setup.name,
            subtask: setup.subtask,
            metrics: setup.metrics,
            ctx: setup.ctx,
            batch_size: setup.batch_size,
        }))
    }
}

struct SplitSlot<T> {
    reader: Box<dyn SplitReader<T>>,
    finished: bool,
    retry_at: Option<Instant>,
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
    watermarks: SourceWatermarks<T>,
    watermark_interval: Duration,
    chain: Box<dyn Output<T>>,
    dead_letter: Box<dyn Output<DeadLetter>>,
    bad_records: BadRecordHandler,
    bounded: bool,
    metrics: Arc<OperatorMetrics>,
    ctx: TaskContext,
    batch_size: usize,
}

impl<T: Data> SourceTask<T> {
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
            let status = slot.reader.read(out, self.batch_size)?;
            slot.retry_at = None;
            match status {
                ReadStatus::Ready => {}
                ReadStatus::Finished => {
                    slot.finished = true;
                    self.watermarks.split_finished(index);
                }
                ReadStatus::Pending(at) => {
                    let at = at.unwrap_or(now + Duration::from_millis(1));
                    slot.retry_at = Some(at);
                    earliest = Some(earliest.map_or(at, |e| e.min(at)));
                }
            }
            self.watermarks
                .on_records(index, &mut out.records, &mut out.bad);
            if !out.bad.is_empty() {
                let split = self.splits[index].reader.split_id();
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

    /// Writes the split positions, sends the barrier down the chain, hands the snapshot over.
    fn inject(&mut self, barrier: CheckpointBarrier) -> Result<()> {
        let positions: Vec<(String, String)> = self
            .splits
            .iter()
            .map(|s| (s.reader.split_id(), s.reader.position().to_string()))
            .collect();
        let mut writer = SnapshotWriter::default();
        writer.write_operator(Redistribution::Union, &positions)?;
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
                next_watermark = now + self.watermark_interval;
            }
            if now >= next_tick {
                if let Some(completed) = self.ctx.completed_checkpoint(&mut notified) {
                    self.chain.notify_complete(completed)?;
                    self.dead_letter.notify_complete(completed)?;
                }
                self.chain.tick()?;
                self.dead_letter.tick()?;
                next_tick = now + self.ctx.buffer_timeout;
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
        self.ctx.finished(self.last_barrier);
        if exhausted {
            // A bounded input is complete: every window can fire (batch is a special case of streaming).
            self.metrics.set_watermark(MAX_WATERMARK);
            self.chain.watermark(MAX_WATERMARK)?;
            self.dead_letter.watermark(MAX_WATERMARK)?;
        }
        self.chain.finish()?;
        self.dead_letter.finish()
    }
}

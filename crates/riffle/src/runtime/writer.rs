//! The network output of a chain: partitions records over the channels of the next task,
//! collects them into batches, and sends a batch when it is full or when the buffer timeout ticks.
//! Control events are broadcast to every channel after the pending batches, so they stay in order.
//!
//! The barrier of an **unaligned** checkpoint is the exception: it overtakes what is queued.
//! Channels are multi-consumer, so a writer of a job with unaligned checkpoints keeps a receiver
//! of each of its channels; at the barrier it takes back what the consumer has not read yet,
//! sends the barrier, and keeps what it took back (with its partial batches) as *overflow*: it is
//! sent on that channel before anything else, and it is the writer's in-flight output in the
//! snapshot ([`in_flight`](super::in_flight)). After a restore the overflow starts as the
//! in-flight output of the checkpoint.

use std::collections::VecDeque;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use crate::checkpoint::TaskSnapshot;
use crate::error::Result;
use crate::keys::{KeyGroup, subtask_for_key_group};
use crate::record::{CheckpointBarrier, Data, LatencyMarker, Record, StreamElement, Timestamp};
use crate::runtime::in_flight::{InFlightLog, InFlightSetup};
use crate::runtime::{Output, TaskContext};

/// Computes the key group of a record (the key selector followed by the stable key hash).
pub(crate) type KeyGroupFn<T> = Arc<dyn Fn(&T) -> KeyGroup + Send + Sync>;

/// How records of an edge are spread over the consumer's subtasks.
pub(crate) enum ShipStrategy<T> {
    /// Subtask `i` to subtask `i` (equal parallelism).
    Forward,
    /// Round robin, record by record.
    Rebalance,
    /// Every record to every subtask.
    Broadcast,
    /// By key group: every record of a key reaches the same subtask.
    Hash(KeyGroupFn<T>),
}

enum Partitioner<T> {
    Single,
    RoundRobin {
        next: usize,
    },
    Broadcast,
    KeyGroups {
        key_group: KeyGroupFn<T>,
        channel_of: Vec<u32>,
    },
}

/// Writes a stream to the channels of its consumer task.
pub(crate) struct RecordWriter<T> {
    channels: Vec<Sender<StreamElement<T>>>,
    /// What goes on each channel before anything else: taken back at an unaligned barrier, or
    /// restored from a checkpoint's in-flight output.
    overflow: Vec<VecDeque<StreamElement<T>>>,
    /// Receivers of the channels, to take back what is queued at an unaligned barrier (empty
    /// unless the job takes unaligned checkpoints).
    take_back: Vec<Receiver<StreamElement<T>>>,
    /// Where the in-flight output goes in a snapshot.
    in_flight: Option<InFlightSetup>,
    buffers: Vec<Vec<Record<T>>>,
    partitioner: Partitioner<T>,
    batch_size: usize,
    ctx: TaskContext,
    /// The channel the next latency marker goes to (they take turns).
    next_marker: usize,
    /// `EndOfInput` was sent: the task's final snapshot sends no barrier after it.
    ended: bool,
}

/// Sends `element` on `tx` after what `overflow` holds for that channel.
fn send_on<T>(
    ctx: &TaskContext,
    tx: &Sender<StreamElement<T>>,
    overflow: &mut VecDeque<StreamElement<T>>,
    element: StreamElement<T>,
) -> Result<()> {
    while let Some(first) = overflow.pop_front() {
        ctx.send(tx, first)?;
    }
    ctx.send(tx, element)
}

impl<T: Data> RecordWriter<T> {
    /// A writer over `channels`, one per consumer subtask it may send to (a forward edge gives one).
    pub(crate) fn new(
        channels: Vec<Sender<StreamElement<T>>>,
        strategy: ShipStrategy<T>,
        max_parallelism: usize,
        batch_size: usize,
        ctx: TaskContext,
    ) -> Self {
        let n = channels.len();
        let partitioner = match strategy {
            _ if n == 1 => Partitioner::Single,
            ShipStrategy::Forward | ShipStrategy::Rebalance => Partitioner::RoundRobin { next: 0 },
            ShipStrategy::Broadcast => Partitioner::Broadcast,
            ShipStrategy::Hash(key_group) => Partitioner::KeyGroups {
                key_group,
                channel_of: (0..max_parallelism)
                    .map(|kg| subtask_for_key_group(kg as KeyGroup, max_parallelism, n) as u32)
                    .collect(),
            },
        };
        RecordWriter {
            buffers: (0..n).map(|_| Vec::with_capacity(batch_size)).collect(),
            overflow: (0..n).map(|_| VecDeque::new()).collect(),
            take_back: Vec::new(),
            in_flight: None,
            channels,
            partitioner,
            batch_size,
            ctx,
            next_marker: 0,
            ended: false,
        }
    }

    /// This writer's in-flight output goes into snapshots as `setup` says; `receivers` (of
    /// the same channels) let it take back what is queued at an unaligned barrier. The
    /// in-flight output restored, if any, is sent before anything else.
    pub(crate) fn with_in_flight(
        mut self,
        setup: InFlightSetup,
        receivers: Vec<Receiver<StreamElement<T>>>,
    ) -> Result<Self> {
        if let Some(log) = setup.restored_log::<T>(self.channels.len())? {
            for (overflow, elements) in self.overflow.iter_mut().zip(log.channels) {
                overflow.extend(elements);
            }
        }
        if setup.unaligned {
            self.take_back = receivers;
        }
        self.in_flight = Some(setup);
        Ok(self)
    }

    fn send(&mut self, channel: usize, element: StreamElement<T>) -> Result<()> {
        send_on(
            &self.ctx,
            &self.channels[channel],
            &mut self.overflow[channel],
            element,
        )
    }

    fn send_buffer(&mut self, channel: usize) -> Result<()> {
        let full = std::mem::replace(
            &mut self.buffers[channel],
            Vec::with_capacity(self.batch_size),
        );
        self.send(channel, StreamElement::Records(full))
    }

    fn flush_all(&mut self) -> Result<()> {
        for channel in 0..self.channels.len() {
            while let Some(first) = self.overflow[channel].pop_front() {
                self.ctx.send(&self.channels[channel], first)?;
            }
            if !self.buffers[channel].is_empty() {
                self.send_buffer(channel)?;
            }
        }
        Ok(())
    }

    fn broadcast_control(&mut self, element: impl Fn() -> StreamElement<T>) -> Result<()> {
        self.flush_all()?;
        for channel in &self.channels {
            self.ctx.send(channel, element())?;
        }
        Ok(())
    }

    /// The barrier of an unaligned checkpoint: ahead of everything queued on each channel;
    /// what it overtook is the in-flight output of `snapshot`.
    fn overtake(&mut self, barrier: CheckpointBarrier, snapshot: &mut TaskSnapshot) -> Result<()> {
        let mut log = InFlightLog::new(self.channels.len());
        for channel in 0..self.channels.len() {
            let queued = &mut log.channels[channel];
            // Only this writer sends on the channel: once taken back, it has room for the barrier.
            while let Ok(element) = self.take_back[channel].try_recv() {
                match element {
                    // An older barrier still queued: its checkpoint was abandoned.
                    StreamElement::Barrier(_) => {}
                    element => queued.push(element),
                }
            }
            queued.extend(self.overflow[channel].drain(..));
            if !self.buffers[channel].is_empty() {
                let partial = std::mem::replace(
                    &mut self.buffers[channel],
                    Vec::with_capacity(self.batch_size),
                );
                queued.push(StreamElement::Records(partial));
            }
            self.ctx
                .send(&self.channels[channel], StreamElement::Barrier(barrier))?;
        }
        if let Some(setup) = &self.in_flight
            && let Some(in_flight) = setup.snapshot(&log)?
        {
            snapshot.operators.push(in_flight);
        }
        for (overflow, queued) in self.overflow.iter_mut().zip(log.channels) {
            overflow.extend(queued);
        }
        Ok(())
    }
}

impl<T: Data> Output<T> for RecordWriter<T> {
    fn records(&mut self, batch: &mut Vec<Record<T>>) -> Result<()> {
        match &mut self.partitioner {
            Partitioner::Single => {
                if self.buffers[0].is_empty() && batch.len() >= self.batch_size {
                    let full = std::mem::replace(batch, Vec::with_capacity(self.batch_size));
                    return self.send(0, StreamElement::Records(full));
                }
                self.buffers[0].append(batch);
                if self.buffers[0].len() >= self.batch_size {
                    self.send_buffer(0)?;
                }
            }
            Partitioner::RoundRobin { next } => {
                let n = self.channels.len();
                let mut channel = *next;
                for record in batch.drain(..) {
                    self.buffers[channel].push(record);
                    if self.buffers[channel].len() >= self.batch_size {
                        let full = std::mem::replace(
                            &mut self.buffers[channel],
                            Vec::with_capacity(self.batch_size),
                        );
                        send_on(
                            &self.ctx,
                            &self.channels[channel],
                            &mut self.overflow[channel],
                            StreamElement::Records(full),
                        )?;
                    }
                    channel = if channel + 1 == n { 0 } else { channel + 1 };
                }
                if let Partitioner::RoundRobin { next } = &mut self.partitioner {
                    *next = channel;
                }
            }
            Partitioner::KeyGroups {
                key_group,
                channel_of,
            } => {
                for record in batch.drain(..) {
                    let channel = channel_of[key_group(&record.value) as usize] as usize;
                    let buffer = &mut self.buffers[channel];
                    buffer.push(record);
                    if buffer.len() >= self.batch_size {
                        let full = std::mem::replace(buffer, Vec::with_capacity(self.batch_size));
                        send_on(
                            &self.ctx,
                            &self.channels[channel],
                            &mut self.overflow[channel],
                            StreamElement::Records(full),
                        )?;
                    }
                }
            }
            Partitioner::Broadcast => {
                for channel in 0..self.channels.len() {
                    self.buffers[channel].extend(batch.iter().cloned());
                    if self.buffers[channel].len() >= self.batch_size {
                        self.send_buffer(channel)?;
                    }
                }
                batch.clear();
            }
        }
        Ok(())
    }

    fn watermark(&mut self, watermark: Timestamp) -> Result<()> {
        self.broadcast_control(|| StreamElement::Watermark(watermark))
    }

    fn idle(&mut self, idle: bool) -> Result<()> {
        self.broadcast_control(|| StreamElement::Idle(idle))
    }

    fn barrier(&mut self, barrier: CheckpointBarrier, snapshot: &mut TaskSnapshot) -> Result<()> {
        if self.ended {
            return Ok(());
        }
        if barrier.unaligned && !self.take_back.is_empty() {
            return self.overtake(barrier, snapshot);
        }
        self.broadcast_control(|| StreamElement::Barrier(barrier))
    }

    fn latency_marker(&mut self, marker: LatencyMarker) -> Result<()> {
        // One channel, in turn: behind that channel's pending records, like a record.
        let channel = self.next_marker % self.channels.len();
        self.next_marker = channel + 1;
        if !self.buffers[channel].is_empty() {
            self.send_buffer(channel)?;
        }
        self.send(channel, StreamElement::LatencyMarker(marker))
    }

    fn tick(&mut self) -> Result<()> {
        self.flush_all()
    }

    fn finish(&mut self) -> Result<()> {
        self.ended = true;
        self.broadcast_control(|| StreamElement::EndOfInput)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::key_group_of;
    use crossbeam_channel::{Receiver, bounded};
    use std::time::Duration;

    fn ctx() -> TaskContext {
        TaskContext::detached("test")
    }

    /// The sending and receiving ends of test channels.
    type Channels = (
        Vec<Sender<StreamElement<u64>>>,
        Vec<Receiver<StreamElement<u64>>>,
    );

    fn channels(n: usize) -> Channels {
        (0..n).map(|_| bounded(64)).unzip()
    }

    fn drain(rx: &Receiver<StreamElement<u64>>) -> (Vec<u64>, Vec<String>) {
        let mut values = Vec::new();
        let mut control = Vec::new();
        while let Ok(element) = rx.try_recv() {
            match element {
                StreamElement::Records(batch) => values.extend(batch.into_iter().map(|r| r.value)),
                StreamElement::Watermark(w) => control.push(format!("wm:{w}")),
                StreamElement::EndOfInput => control.push("end".into()),
                other => control.push(format!("{other:?}")),
            }
        }
        (values, control)
    }

    fn write(writer: &mut RecordWriter<u64>, values: impl IntoIterator<Item = u64>) {
        let mut batch: Vec<Record<u64>> = values.into_iter().map(Record::untimed).collect();
        writer.records(&mut batch).unwrap();
        assert!(batch.is_empty());
    }

    #[test]
    fn hash_sends_each_key_to_its_key_group_owner() {
        let (tx, rx) = channels(3);
        let key_group: KeyGroupFn<u64> = Arc::new(|v: &u64| key_group_of(&(v % 10), 128));
        let mut writer = RecordWriter::new(tx, ShipStrategy::Hash(key_group), 128, 4, ctx());
        write(&mut writer, 0..100);
        writer.finish().unwrap();
        let mut seen = 0;
        for (subtask, rx) in rx.iter().enumerate() {
            let (values, control) = drain(rx);
            assert_eq!(control, vec!["end"]);
            for v in &values {
                assert_eq!(
                    subtask_for_key_group(key_group_of(&(v % 10), 128), 128, 3),
                    subtask
                );
            }
            // Order within a channel is preserved.
            assert!(values.windows(2).all(|w| w[0] < w[1]));
            seen += values.len();
        }
        assert_eq!(seen, 100);
    }

    #[test]
    fn rebalance_is_round_robin_and_broadcast_copies() {
        let (tx, rx) = channels(2);
        let mut writer = RecordWriter::new(tx, ShipStrategy::Rebalance, 128, 100, ctx());
        write(&mut writer, 0..6);
        writer.tick().unwrap();
        assert_eq!(drain(&rx[0]).0, vec![0, 2, 4]);
        assert_eq!(drain(&rx[1]).0, vec![1, 3, 5]);

        let (tx, rx) = channels(2);
        let mut writer = RecordWriter::new(tx, ShipStrategy::Broadcast, 128, 100, ctx());
        write(&mut writer, 0..3);
        writer.watermark(7).unwrap();
        for rx in &rx {
            assert_eq!(drain(rx), (vec![0, 1, 2], vec!["wm:7".to_string()]));
        }
    }

    #[test]
    fn latency_markers_take_turns_over_the_channels_behind_their_records() {
        let (tx, rx) = channels(2);
        let mut writer = RecordWriter::new(tx, ShipStrategy::Rebalance, 128, 100, ctx());
        write(&mut writer, 0..4);
        let marker = LatencyMarker {
            created: std::time::Instant::now(),
        };
        for _ in 0..3 {
            writer.latency_marker(marker).unwrap();
        }
        let (values, control) = drain(&rx[0]);
        assert_eq!(
            values,
            vec![0, 2],
            "the channel's pending records went first"
        );
        assert_eq!(control.len(), 2, "{control:?}");
        assert!(control.iter().all(|c| c.starts_with("LatencyMarker")));
        let (values, control) = drain(&rx[1]);
        assert_eq!(values, vec![1, 3]);
        assert_eq!(control.len(), 1);
    }

    #[test]
    fn batches_wait_for_the_timeout_or_a_full_buffer() {
        let (tx, rx) = channels(1);
        let mut writer = RecordWriter::new(tx, ShipStrategy::Forward, 128, 4, ctx());
        write(&mut writer, 0..3);
        assert!(rx[0].is_empty(), "a partial batch waits");
        write(&mut writer, 3..5);
        assert_eq!(drain(&rx[0]).0, vec![0, 1, 2, 3, 4]);
        write(&mut writer, 5..6);
        writer.tick().unwrap();
        assert_eq!(drain(&rx[0]).0, vec![5]);
    }

    fn unaligned(id: u64) -> CheckpointBarrier {
        CheckpointBarrier {
            id,
            timestamp: 0,
            terminate: false,
            unaligned: true,
        }
    }

    /// A writer over two channels that can take back what is queued, and the channels' receivers.
    fn overtaking(batch_size: usize) -> (RecordWriter<u64>, Vec<Receiver<StreamElement<u64>>>) {
        let (tx, rx) = channels(2);
        let writer = RecordWriter::new(tx, ShipStrategy::Rebalance, 128, batch_size, ctx())
            .with_in_flight(InFlightSetup::detached(true), rx.clone())
            .unwrap();
        (writer, rx)
    }

    #[test]
    fn an_unaligned_barrier_overtakes_what_is_queued_which_is_the_in_flight_output() {
        let (mut writer, rx) = overtaking(2);
        write(&mut writer, 0..5); // [0, 2] and [1, 3] sent, [4] pending
        writer.watermark(9).unwrap();
        let mut snapshot = TaskSnapshot::new(1);
        writer.barrier(unaligned(1), &mut snapshot).unwrap();
        // The barrier is first on each channel, before what was queued.
        for rx in &rx {
            assert!(matches!(rx.try_recv(), Ok(StreamElement::Barrier(b)) if b.id == 1));
            assert!(rx.is_empty());
        }
        let [in_flight] = snapshot.operators.as_slice() else {
            panic!("{snapshot:?}")
        };
        let (_, bytes) = in_flight.writer.operator.clone().unwrap();
        let log = InFlightLog::<u64>::decode(&bytes).unwrap();
        assert_eq!(log.records(), 5);
        // What was taken back goes out after the barrier, in order, before anything new.
        write(&mut writer, [5]);
        writer.tick().unwrap();
        assert_eq!(
            drain(&rx[0]),
            (vec![0, 2, 4], vec!["wm:9".to_string()]),
            "records 0, 2, watermark 9, the partial batch [4]"
        );
        assert_eq!(drain(&rx[1]), (vec![1, 3, 5], vec!["wm:9".to_string()]));
    }

    #[test]
    fn an_aligned_barrier_or_one_with_nothing_queued_leaves_no_in_flight_output() {
        let (mut writer, rx) = overtaking(10);
        let mut snapshot = TaskSnapshot::new(1);
        writer.barrier(unaligned(1), &mut snapshot).unwrap();
        assert!(snapshot.operators.is_empty());
        write(&mut writer, 0..2);
        writer
            .barrier(
                CheckpointBarrier {
                    unaligned: false,
                    ..unaligned(2)
                },
                &mut snapshot,
            )
            .unwrap();
        assert!(snapshot.operators.is_empty());
        let (values, control) = drain(&rx[0]);
        assert_eq!(values, vec![0]);
        assert_eq!(control.len(), 2, "{control:?}");
        assert!(
            control[1].contains("id: 2"),
            "the aligned barrier after the records"
        );
    }

    #[test]
    fn the_restored_in_flight_output_goes_first() {
        let mut log = InFlightLog::<u64>::new(1);
        log.record(0, &StreamElement::Records(vec![Record::untimed(7)]));
        log.record(0, &StreamElement::Watermark(3));
        let setup = InFlightSetup {
            restored: Some(log.encode().unwrap()),
            ..InFlightSetup::detached(false)
        };
        let (tx, rx) = channels(1);
        let mut writer = RecordWriter::new(tx, ShipStrategy::Forward, 128, 1, ctx())
            .with_in_flight(setup.clone(), rx.clone())
            .unwrap();
        write(&mut writer, [8]);
        assert_eq!(drain(&rx[0]), (vec![7, 8], vec!["wm:3".to_string()]));
        let (tx, _) = channels(2);
        let err = RecordWriter::<u64>::new(tx, ShipStrategy::Rebalance, 128, 1, ctx())
            .with_in_flight(setup, Vec::new())
            .err()
            .unwrap();
        assert!(
            err.to_string()
                .contains("unaligned checkpoint restores only"),
            "{err}"
        );
    }

    #[test]
    fn a_full_channel_blocks_and_counts_backpressure_until_cancelled() {
        let (tx, _rx) = channels(1);
        let ctx = ctx();
        let mut writer = RecordWriter::new(tx, ShipStrategy::Forward, 128, 1, ctx.clone());
        for i in 0..64 {
            write(&mut writer, [i]); // one batch each: fills the channel
        }
        let control = ctx.control.clone();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(120));
            control.cancel();
        });
        let mut batch = vec![Record::untimed(99)];
        assert!(writer.records(&mut batch).unwrap_err().is_cancelled());
        canceller.join().unwrap();
        assert!(ctx.metrics.snapshot_backpressured_ns() >= 100_000_000);
    }
}

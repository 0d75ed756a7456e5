//! The input side of a task: an input gate over the channels from every upstream subtask, and the
//! task loop that feeds what the gate yields into the task's chain.
//!
//! The gate merges watermarks (the minimum over channels that are not idle; it never moves
//! backwards; a finished channel holds its last watermark — +infinity after a drained input, but
//! a source stopped with a savepoint ends where it stopped, so nothing fires after the barrier),
//! tracks idleness, aligns checkpoint barriers ([`alignment`](super::alignment)), tells a
//! multi-input task when one of its inputs ended, and measures the time spent waiting for input.
//! A two-input task has one gate over the channels of both inputs: its watermark is the minimum
//! over both, and a barrier is aligned across both.
//!
//! For an unaligned checkpoint the gate records what the channels still before their barrier
//! deliver after the snapshot (the in-flight input, see [`in_flight`](super::in_flight)), and
//! hands it over when the last barrier arrived. After a restore, each channel first yields the
//! in-flight input the checkpoint recorded for it, then what its producer sends.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, TryRecvError};

use crate::checkpoint::{FINAL_SNAPSHOT, TaskSnapshot};
use crate::error::{Error, Result};
use crate::record::{
    CheckpointBarrier, Data, LatencyMarker, MIN_WATERMARK, Record, StreamElement, Timestamp,
};
use crate::runtime::alignment::{Aligned, BarrierAligner, Steps};
use crate::runtime::in_flight::{InFlightLog, InFlightSetup};
use crate::runtime::{CANCEL_POLL, Output, TaskContext, TaskDriver};

struct InputChannel<T> {
    rx: Receiver<StreamElement<T>>,
    /// Which input of the task the channel belongs to (0 but for multi-input operators).
    input: usize,
    watermark: Timestamp,
    idle: bool,
    /// False while the channel's watermark is behind the gate's after it came back from idle.
    aligned: bool,
    ended: bool,
}

impl<T> InputChannel<T> {
    fn counts_for_watermark(&self) -> bool {
        !self.idle && self.aligned
    }
}

/// What the gate yields next.
#[derive(Debug)]
pub(crate) enum GateEvent<T> {
    Records(Vec<Record<T>>),
    Watermark(Timestamp),
    Idle(bool),
    /// Take the task's snapshot for this barrier and forward it (aligned: every channel
    /// delivered it; unaligned: the first did).
    Snapshot(CheckpointBarrier),
    /// The snapshot of the barrier is complete: every channel delivered it or ended. With how
    /// long the gate held channels back, and the in-flight input of an unaligned barrier.
    Complete(Aligned, Option<InFlightLog<T>>),
    /// The unaligned snapshot taken for this checkpoint will not complete: a newer one began.
    Abandon(u64),
    LatencyMarker(LatencyMarker),
    /// Every channel of one input of a multi-input task ended (Flink's `endInput(inputId)`).
    EndOfInput(usize),
    End,
    Timeout,
}

/// Merges the channels from all upstream subtasks of a task (of all its inputs).
pub(crate) struct InputGate<T> {
    channels: Vec<InputChannel<T>>,
    inputs: usize,
    next: usize,
    watermark: Timestamp,
    idle: bool,
    aligner: BarrierAligner,
    /// The in-flight input of the unaligned snapshot in progress.
    log: InFlightLog<T>,
    /// Per channel, what it yields before its receiver: the in-flight input restored.
    replay: Vec<VecDeque<StreamElement<T>>>,
    pending: VecDeque<GateEvent<T>>,
    ctx: TaskContext,
}

impl<T: Clone> InputGate<T> {
    /// A gate over `receivers`, each with the input it belongs to.
    pub(crate) fn new(
        receivers: Vec<(usize, Receiver<StreamElement<T>>)>,
        ctx: TaskContext,
    ) -> Self {
        let inputs = receivers
            .iter()
            .map(|(input, _)| input + 1)
            .max()
            .unwrap_or(1);
        InputGate {
            aligner: BarrierAligner::new(receivers.len()),
            log: InFlightLog::new(receivers.len()),
            replay: (0..receivers.len()).map(|_| VecDeque::new()).collect(),
            channels: receivers
                .into_iter()
                .map(|(input, rx)| InputChannel {
                    rx,
                    input,
                    watermark: MIN_WATERMARK,
                    idle: false,
                    aligned: true,
                    ended: false,
                })
                .collect(),
            inputs,
            next: 0,
            watermark: MIN_WATERMARK,
            idle: false,
            pending: VecDeque::new(),
            ctx,
        }
    }

    /// Each channel yields the elements of `log` for it first (the in-flight input restored).
    pub(crate) fn replay_first(&mut self, log: InFlightLog<T>) {
        for (replay, elements) in self.replay.iter_mut().zip(log.channels) {
            replay.extend(elements);
        }
    }

    /// The next event, or [`GateEvent::Timeout`] once `deadline` passes with nothing to yield.
    pub(crate) fn next(&mut self, deadline: Instant) -> Result<GateEvent<T>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(event);
            }
            if self.channels.iter().all(|c| c.ended) {
                return Ok(GateEvent::End);
            }
            let (index, element) = match self.try_receive()? {
                Some(received) => received,
                None => match self.wait(deadline)? {
                    Some(received) => received,
                    None if Instant::now() >= deadline => return Ok(GateEvent::Timeout),
                    None => continue,
                },
            };
            self.handle(index, element);
        }
    }

    fn readable(&self, index: usize) -> bool {
        !self.channels[index].ended && !self.aligner.is_blocked(index)
    }

    /// Takes an element from the first readable channel that has one, round robin.
    fn try_receive(&mut self) -> Result<Option<(usize, StreamElement<T>)>> {
        let n = self.channels.len();
        for k in 0..n {
            let index = (self.next + k) % n;
            if !self.readable(index) {
                continue;
            }
            if let Some(element) = self.replay[index].pop_front() {
                self.next = (index + 1) % n;
                return Ok(Some((index, element)));
            }
            match self.channels[index].rx.try_recv() {
                Ok(element) => {
                    self.next = (index + 1) % n;
                    return Ok(Some((index, element)));
                }
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => return Err(Error::Cancelled),
            }
        }
        Ok(None)
    }

    /// Blocks until a readable channel has an element, the deadline passes or the job is cancelled.
    fn wait(&mut self, deadline: Instant) -> Result<Option<(usize, StreamElement<T>)>> {
        if self.ctx.control.is_cancelled() {
            return Err(Error::Cancelled);
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        let mut select = Select::new();
        let mut indices = Vec::with_capacity(self.channels.len());
        for (index, channel) in self.channels.iter().enumerate() {
            if self.readable(index) {
                select.recv(&channel.rx);
                indices.push(index);
            }
        }
        let started = Instant::now();
        let ready = select.select_timeout((deadline - now).min(CANCEL_POLL));
        let received = match ready {
            Ok(operation) => {
                let index = indices[operation.index()];
                let element = operation
                    .recv(&self.channels[index].rx)
                    .map_err(|_| Error::Cancelled)?;
                Some((index, element))
            }
            Err(_) => None,
        };
        self.ctx.metrics.add_idle(started.elapsed());
        Ok(received)
    }

    /// Queues what `element` of channel `index` yields.
    fn handle(&mut self, index: usize, element: StreamElement<T>) {
        if self.aligner.is_recording(index) {
            self.log.record(index, &element);
        }
        match element {
            StreamElement::Records(batch) => self.pending.push_back(GateEvent::Records(batch)),
            StreamElement::Watermark(watermark) => {
                let gate_watermark = self.watermark;
                let channel = &mut self.channels[index];
                if channel.idle {
                    // A watermark says the channel speaks about event time again (as Flink's
                    // source output marks itself active before one): an upstream that went idle
                    // and then ended with the final watermark must still fire every window.
                    channel.idle = false;
                    if watermark < gate_watermark {
                        channel.aligned = false;
                    }
                }
                channel.watermark = channel.watermark.max(watermark);
                if !channel.aligned && channel.watermark >= self.watermark {
                    channel.aligned = true;
                }
                self.status_and_watermark();
            }
            StreamElement::Idle(idle) => {
                let gate_watermark = self.watermark;
                let channel = &mut self.channels[index];
                channel.idle = idle;
                if !idle && channel.watermark < gate_watermark {
                    channel.aligned = false;
                }
                self.status_and_watermark();
            }
            StreamElement::Barrier(barrier) => {
                let steps = self.aligner.on_barrier(index, barrier);
                self.apply(steps);
            }
            StreamElement::LatencyMarker(marker) => {
                self.pending.push_back(GateEvent::LatencyMarker(marker))
            }
            StreamElement::EndOfInput => {
                self.channels[index].ended = true;
                let steps = self.aligner.on_end(index);
                self.apply(steps);
                let input = self.channels[index].input;
                if self.inputs > 1
                    && self
                        .channels
                        .iter()
                        .filter(|c| c.input == input)
                        .all(|c| c.ended)
                {
                    self.pending.push_back(GateEvent::EndOfInput(input));
                }
                self.status_and_watermark();
            }
        }
    }

    /// Queues the steps of barrier alignment.
    fn apply(&mut self, steps: Steps) {
        if let Some(id) = steps.abandon {
            self.log.clear();
            self.pending.push_back(GateEvent::Abandon(id));
        }
        if let Some(barrier) = steps.snapshot {
            self.log.clear();
            self.pending.push_back(GateEvent::Snapshot(barrier));
        }
        if let Some(aligned) = steps.complete {
            let in_flight = aligned.barrier.unaligned.then(|| {
                let channels = self.log.channels.len();
                std::mem::replace(&mut self.log, InFlightLog::new(channels))
            });
            self.pending
                .push_back(GateEvent::Complete(aligned, in_flight));
        }
    }

    /// Recomputes the gate's idleness and watermark after a channel changed, queueing changes.
    fn status_and_watermark(&mut self) {
        let live = self.channels.iter().any(|c| !c.ended);
        let all_idle = live && self.channels.iter().filter(|c| !c.ended).all(|c| c.idle);
        if all_idle != self.idle {
            self.idle = all_idle;
            self.pending.push_back(GateEvent::Idle(all_idle));
        }
        let min = self
            .channels
            .iter()
            .filter(|c| c.counts_for_watermark())
            .map(|c| c.watermark)
            .min();
        if let Some(min) = min
            && min > self.watermark
        {
            self.watermark = min;
            self.pending.push_back(GateEvent::Watermark(min));
        }
    }
}

/// A task whose chain starts at an input gate (every task but the sources).
pub(crate) struct InputTask<T> {
    gate: InputGate<T>,
    chain: Box<dyn Output<T>>,
    ctx: TaskContext,
    in_flight: InFlightSetup,
}

impl<T: Data> InputTask<T> {
    /// The task reading `receivers` into `chain`; the gate first yields the in-flight input
    /// that `in_flight` restores, if any.
    pub(crate) fn new(
        receivers: Vec<(usize, Receiver<StreamElement<T>>)>,
        chain: Box<dyn Output<T>>,
        ctx: TaskContext,
        in_flight: InFlightSetup,
    ) -> Result<Self> {
        let channels = receivers.len();
        let mut gate = InputGate::new(receivers, ctx.clone());
        if let Some(log) = in_flight.restored_log::<T>(channels)? {
            gate.replay_first(log);
        }
        Ok(InputTask {
            gate,
            chain,
            ctx,
            in_flight,
        })
    }
}

impl<T: Data> TaskDriver for InputTask<T> {
    fn run(self: Box<Self>) -> Result<()> {
        let InputTask {
            mut gate,
            mut chain,
            ctx,
            in_flight,
        } = *self;
        chain.open()?;
        let mut next_tick = Instant::now() + ctx.buffer_timeout;
        let mut notified = 0;
        let mut last_barrier = 0;
        // The snapshot taken, until its barrier is complete.
        let mut taken: Option<TaskSnapshot> = None;
        loop {
            match gate.next(next_tick)? {
                GateEvent::Records(mut batch) => chain.records(&mut batch)?,
                GateEvent::Watermark(watermark) => chain.watermark(watermark)?,
                GateEvent::Idle(idle) => chain.idle(idle)?,
                GateEvent::LatencyMarker(marker) => chain.latency_marker(marker)?,
                GateEvent::EndOfInput(input) => chain.end_input(input)?,
                GateEvent::Snapshot(barrier) => {
                    let mut snapshot = TaskSnapshot::new(barrier.id);
                    chain.barrier(barrier, &mut snapshot)?;
                    ctx.snapshot_store(&mut snapshot)?;
                    if let Some(older) = taken.replace(snapshot) {
                        ctx.discard(older);
                    }
                }
                GateEvent::Complete(Aligned { barrier, alignment }, log) => {
                    // Always the snapshot of this barrier (the gate abandons older ones first).
                    if let Some(mut snapshot) = taken.take_if(|s| s.checkpoint_id == barrier.id) {
                        if let Some(log) = log
                            && let Some(input) = in_flight.snapshot(&log)?
                        {
                            snapshot.operators.push(input);
                        }
                        ctx.submit(snapshot, alignment)?;
                        last_barrier = barrier.id;
                    }
                }
                GateEvent::Abandon(id) => {
                    if let Some(snapshot) = taken.take_if(|s| s.checkpoint_id == id) {
                        ctx.discard(snapshot);
                    }
                }
                GateEvent::End => break,
                GateEvent::Timeout => {}
            }
            let now = Instant::now();
            if now >= next_tick {
                if let Some(completed) = ctx.completed_checkpoint(&mut notified) {
                    chain.notify_complete(completed)?;
                }
                chain.tick()?;
                next_tick = now + ctx.buffer_timeout;
            }
        }
        chain.finish()?;
        if ctx.takes_checkpoints() {
            // The final snapshot, after the operators closed: it stands for this task in the
            // checkpoints taken while other tasks still run, and in the job's final checkpoint.
            let barrier = CheckpointBarrier {
                id: FINAL_SNAPSHOT,
                timestamp: 0,
                terminate: false,
                unaligned: false,
            };
            let mut snapshot = TaskSnapshot::new(FINAL_SNAPSHOT);
            chain.barrier(barrier, &mut snapshot)?;
            ctx.submit(snapshot, Duration::ZERO)?;
        }
        ctx.finished(last_barrier);
        if ctx.store.is_none() {
            // Heap state (a store closes its files when dropped, so it is dropped here).
            ctx.control.retire(Box::new(chain));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::MAX_WATERMARK;
    use crossbeam_channel::{Sender, bounded};

    fn gate(n: usize) -> (Vec<Sender<StreamElement<u32>>>, InputGate<u32>) {
        let (tx, rx): (Vec<_>, Vec<_>) = (0..n).map(|_| bounded(16)).unzip();
        let ctx = TaskContext::detached("t");
        (
            tx,
            InputGate::new(rx.into_iter().map(|rx| (0, rx)).collect(), ctx),
        )
    }

    /// Everything the gate yields until it times out, as text.
    fn events(gate: &mut InputGate<u32>) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            match gate
                .next(Instant::now() + Duration::from_millis(5))
                .unwrap()
            {
                GateEvent::Timeout => return out,
                GateEvent::End => {
                    out.push("end".into());
                    return out;
                }
                GateEvent::Records(b) => out.push(format!(
                    "{:?}",
                    b.iter().map(|r| r.value).collect::<Vec<_>>()
                )),
                GateEvent::Watermark(w) => out.push(format!("wm:{w}")),
                GateEvent::Idle(i) => out.push(format!("idle:{i}")),
                GateEvent::LatencyMarker(_) => out.push("latency".into()),
                GateEvent::Snapshot(b) => out.push(format!("barrier:{}", b.id)),
                GateEvent::Complete(a, None) => assert!(!a.barrier.unaligned),
                GateEvent::Complete(a, Some(log)) => out.push(format!(
                    "complete:{} in flight {:?}",
                    a.barrier.id,
                    log.channels
                        .iter()
                        .map(|elements| elements
                            .iter()
                            .map(|e| match e {
                                StreamElement::Records(b) => {
                                    format!("{:?}", b.iter().map(|r| r.value).collect::<Vec<_>>())
                                }
                                StreamElement::Watermark(w) => format!("wm:{w}"),
                                other => format!("{other:?}"),
                            })
                            .collect::<Vec<_>>())
                        .collect::<Vec<_>>()
                )),
                GateEvent::Abandon(id) => out.push(format!("abandon:{id}")),
                GateEvent::EndOfInput(i) => out.push(format!("end-input:{i}")),
            }
        }
    }

    fn send(tx: &Sender<StreamElement<u32>>, element: StreamElement<u32>) {
        tx.send(element).unwrap();
    }

    #[test]
    fn watermark_is_the_minimum_over_channels_and_never_goes_back() {
        let (tx, mut gate) = gate(2);
        send(&tx[0], StreamElement::Watermark(10));
        assert_eq!(events(&mut gate), Vec::<String>::new());
        send(&tx[1], StreamElement::Watermark(5));
        assert_eq!(events(&mut gate), vec!["wm:5"]);
        send(&tx[1], StreamElement::Watermark(20));
        assert_eq!(events(&mut gate), vec!["wm:10"]);
        send(&tx[0], StreamElement::Watermark(3));
        assert_eq!(events(&mut gate), Vec::<String>::new());
    }

    #[test]
    fn an_idle_channel_does_not_hold_back_the_watermark() {
        let (tx, mut gate) = gate(2);
        send(&tx[0], StreamElement::Watermark(10));
        send(&tx[1], StreamElement::Idle(true));
        assert_eq!(events(&mut gate), vec!["wm:10"]);
        send(&tx[0], StreamElement::Idle(true));
        assert_eq!(events(&mut gate), vec!["idle:true"]);
        // The channel that comes back behind the gate's watermark does not pull it back...
        send(&tx[1], StreamElement::Idle(false));
        send(&tx[1], StreamElement::Watermark(4));
        assert_eq!(events(&mut gate), vec!["idle:false"]);
        // ...and counts again once it caught up.
        send(&tx[1], StreamElement::Watermark(12));
        send(&tx[0], StreamElement::Idle(false));
        send(&tx[0], StreamElement::Watermark(15));
        assert_eq!(events(&mut gate), vec!["wm:12"]);
    }

    #[test]
    fn a_drained_channel_stops_counting_and_the_gate_ends_with_the_last() {
        let (tx, mut gate) = gate(2);
        send(&tx[0], StreamElement::Watermark(10));
        send(&tx[1], StreamElement::Records(vec![Record::untimed(1)]));
        send(&tx[1], StreamElement::Watermark(MAX_WATERMARK));
        send(&tx[1], StreamElement::EndOfInput);
        assert_eq!(events(&mut gate), vec!["[1]", "wm:10"]);
        send(&tx[0], StreamElement::EndOfInput);
        assert_eq!(events(&mut gate), vec!["end"]);
    }

    #[test]
    fn a_watermark_from_an_idle_channel_counts_and_the_final_one_fires_everything() {
        let (tx, mut gate) = gate(2);
        send(&tx[0], StreamElement::Watermark(10));
        send(&tx[1], StreamElement::Watermark(10));
        assert_eq!(events(&mut gate), vec!["wm:10"]);
        send(&tx[0], StreamElement::Idle(true));
        send(&tx[1], StreamElement::Idle(true));
        assert_eq!(events(&mut gate), vec!["idle:true"]);
        // Behind the gate: active again, but it does not hold the gate back until it catches up.
        send(&tx[0], StreamElement::Watermark(5));
        assert_eq!(events(&mut gate), vec!["idle:false"]);
        send(&tx[0], StreamElement::Idle(true));
        assert_eq!(events(&mut gate), vec!["idle:true"]);
        // Both idle, then both end with the final watermark (no `Idle(false)` before it).
        for tx in &tx {
            send(tx, StreamElement::Watermark(MAX_WATERMARK));
            send(tx, StreamElement::EndOfInput);
        }
        assert_eq!(
            events(&mut gate),
            vec!["idle:false", format!("wm:{MAX_WATERMARK}").as_str(), "end"]
        );
    }

    #[test]
    fn a_channel_stopped_with_a_savepoint_holds_the_watermark_where_it_stopped() {
        let (tx, mut gate) = gate(2);
        let barrier = CheckpointBarrier {
            id: 1,
            timestamp: 0,
            terminate: true,
            unaligned: false,
        };
        send(&tx[0], StreamElement::Watermark(5));
        send(&tx[1], StreamElement::Watermark(20));
        assert_eq!(events(&mut gate), vec!["wm:5"]);
        send(&tx[0], StreamElement::Barrier(barrier));
        send(&tx[0], StreamElement::EndOfInput);
        send(&tx[1], StreamElement::Barrier(barrier));
        send(&tx[1], StreamElement::EndOfInput);
        // Nothing moves after the savepoint's barrier: its windows would fire into output no
        // checkpoint covers.
        assert_eq!(events(&mut gate), vec!["barrier:1", "end"]);
    }

    #[test]
    fn barriers_are_aligned_across_channels() {
        let (tx, mut gate) = gate(2);
        let barrier = CheckpointBarrier {
            id: 1,
            timestamp: 0,
            terminate: false,
            unaligned: false,
        };
        send(&tx[0], StreamElement::Barrier(barrier));
        send(&tx[0], StreamElement::Records(vec![Record::untimed(2)])); // after the barrier: held back
        send(&tx[1], StreamElement::Records(vec![Record::untimed(1)]));
        assert_eq!(events(&mut gate), vec!["[1]"]);
        send(&tx[1], StreamElement::Barrier(barrier));
        assert_eq!(events(&mut gate), vec!["barrier:1", "[2]"]);
    }

    #[test]
    fn two_inputs_merge_watermarks_align_barriers_and_end_one_by_one() {
        let (tx, rx): (Vec<_>, Vec<_>) = (0..3).map(|_| bounded(16)).unzip();
        // Channels 0 and 1 are the first input's, channel 2 the second's.
        let receivers = rx
            .into_iter()
            .zip([0, 0, 1])
            .map(|(rx, i)| (i, rx))
            .collect();
        let mut gate = InputGate::new(receivers, TaskContext::detached("t"));
        send(&tx[0], StreamElement::Watermark(10));
        send(&tx[1], StreamElement::Watermark(12));
        assert_eq!(events(&mut gate), Vec::<String>::new()); // the second input holds it back
        send(&tx[2], StreamElement::Watermark(7));
        assert_eq!(events(&mut gate), vec!["wm:7"]);
        let barrier = CheckpointBarrier {
            id: 3,
            timestamp: 0,
            terminate: false,
            unaligned: false,
        };
        send(&tx[2], StreamElement::Barrier(barrier));
        send(&tx[2], StreamElement::Records(vec![Record::untimed(9)])); // held back
        send(&tx[0], StreamElement::Barrier(barrier));
        send(&tx[1], StreamElement::Records(vec![Record::untimed(1)]));
        assert_eq!(events(&mut gate), vec!["[1]"]);
        send(&tx[1], StreamElement::Barrier(barrier));
        assert_eq!(events(&mut gate), vec!["barrier:3", "[9]"]);
        send(&tx[2], StreamElement::Watermark(MAX_WATERMARK));
        send(&tx[2], StreamElement::EndOfInput);
        assert_eq!(events(&mut gate), vec!["wm:10", "end-input:1"]);
        send(&tx[0], StreamElement::EndOfInput);
        send(&tx[1], StreamElement::EndOfInput);
        assert_eq!(events(&mut gate), vec!["end-input:0", "end"]);
    }

    fn unaligned(id: u64) -> StreamElement<u32> {
        StreamElement::Barrier(CheckpointBarrier {
            id,
            timestamp: 0,
            terminate: false,
            unaligned: true,
        })
    }

    #[test]
    fn an_unaligned_barrier_snapshots_at_once_and_records_the_other_channels_until_theirs() {
        let (tx, mut gate) = gate(3);
        send(&tx[1], StreamElement::Records(vec![Record::untimed(1)]));
        assert_eq!(events(&mut gate), vec!["[1]"]);
        send(&tx[0], unaligned(1));
        send(&tx[0], StreamElement::Records(vec![Record::untimed(2)])); // after its barrier
        assert_eq!(
            events(&mut gate),
            vec!["barrier:1", "[2]"],
            "nothing held back"
        );
        // Channels 1 and 2 have not delivered the barrier: what they deliver is processed
        // and recorded; channel 0's records are not (they are after its barrier).
        send(&tx[1], StreamElement::Records(vec![Record::untimed(3)]));
        send(&tx[1], StreamElement::Watermark(7));
        send(&tx[1], unaligned(1));
        send(&tx[1], StreamElement::Records(vec![Record::untimed(4)]));
        send(&tx[0], StreamElement::Records(vec![Record::untimed(5)]));
        assert_eq!(events(&mut gate), vec!["[3]", "[5]", "[4]"]);
        send(&tx[2], StreamElement::Records(vec![Record::untimed(6)]));
        send(&tx[2], StreamElement::EndOfInput);
        assert_eq!(
            events(&mut gate),
            vec![
                r#"[6]"#,
                r#"complete:1 in flight [[], ["[3]", "wm:7"], ["[6]"]]"#
            ]
        );
    }

    #[test]
    fn a_newer_unaligned_barrier_abandons_the_snapshot_and_starts_recording_again() {
        let (tx, mut gate) = gate(2);
        send(&tx[0], unaligned(1));
        send(&tx[1], StreamElement::Records(vec![Record::untimed(1)]));
        send(&tx[1], unaligned(2));
        assert_eq!(
            events(&mut gate),
            vec!["barrier:1", "[1]", "abandon:1", "barrier:2"]
        );
        send(&tx[0], StreamElement::Records(vec![Record::untimed(2)]));
        send(&tx[0], unaligned(2));
        assert_eq!(
            events(&mut gate),
            vec!["[2]", r#"complete:2 in flight [["[2]"], []]"#]
        );
    }

    #[test]
    fn the_restored_in_flight_input_comes_before_the_channel() {
        let (tx, mut gate) = gate(2);
        let mut log = InFlightLog::new(2);
        log.record(1, &StreamElement::Records(vec![Record::untimed(10)]));
        log.record(1, &StreamElement::Watermark(5));
        gate.replay_first(log);
        send(&tx[1], StreamElement::Records(vec![Record::untimed(11)]));
        send(&tx[0], StreamElement::Watermark(8));
        send(&tx[1], StreamElement::Watermark(9));
        assert_eq!(events(&mut gate), vec!["[10]", "wm:5", "[11]", "wm:8"]);
    }

    #[test]
    fn a_vanished_upstream_cancels_the_task() {
        let (tx, mut gate) = gate(1);
        drop(tx);
        assert!(
            gate.next(Instant::now() + Duration::from_millis(5))
                .unwrap_err()
                .is_cancelled()
        );
    }
}

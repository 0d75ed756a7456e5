//! Barrier alignment: the state machine that decides when a task with several input channels
//! takes its part of a checkpoint, aligned (Flink's default) or unaligned (Flink's FLIP-76).
//!
//! **Aligned** barriers: a channel that delivered the barrier of checkpoint N is blocked (its
//! later records belong after the snapshot) until every other channel delivered it too or
//! ended; then the task takes its snapshot, the barrier goes on, and every channel reads again.
//! Under back-pressure the barrier waits behind every record queued ahead of it, on every
//! channel, and the blocked channels wait with it.
//!
//! **Unaligned** barriers (`CheckpointBarrier::unaligned`): the task takes its snapshot at the
//! *first* barrier of N and forwards it at once (the network writer lets it overtake queued
//! output, see [`writer`](super::writer)). No channel is blocked: the channels that have not
//! delivered N yet are read on, and what they deliver until their barrier is *recorded*: it is
//! processed as usual and also becomes the snapshot's in-flight input. The snapshot is complete
//! when the last channel delivered N (or ended).
//!
//! In both modes a newer barrier while one is in progress means the older checkpoint was
//! abandoned upstream: its alignment (and, unaligned, its snapshot) is dropped and the newer one
//! starts. An older barrier, or one not newer than the last completed, is stale and ignored.
//! The same machine serves one- and multi-input tasks: a two-input task's gate reads the
//! channels of both inputs.

use std::time::{Duration, Instant};

use crate::record::CheckpointBarrier;

/// Where the checkpoint in progress stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// No checkpoint in progress.
    Idle,
    /// Aligned: the channels that delivered the barrier are held back until every channel has.
    Aligning,
    /// Unaligned: the snapshot was taken at the first barrier; the channels that have not
    /// delivered it yet are read and recorded.
    Recording,
}

/// Alignment of checkpoint barriers over `n` input channels.
#[derive(Debug)]
pub(crate) struct BarrierAligner {
    delivered: Vec<bool>,
    ended: Vec<bool>,
    phase: Phase,
    current: Option<CheckpointBarrier>,
    started: Option<Instant>,
    /// The last checkpoint completed here: barriers up to it are stale.
    last: u64,
}

/// A barrier every channel delivered (or ended before), with how long channels were held back
/// (zero for an unaligned barrier: nothing was held back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Aligned {
    pub(crate) barrier: CheckpointBarrier,
    pub(crate) alignment: Duration,
}

/// What the task does after a barrier or the end of a channel, in field order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Steps {
    /// An unaligned checkpoint whose snapshot was taken was abandoned for a newer one: drop
    /// the snapshot.
    pub(crate) abandon: Option<u64>,
    /// Take the task's snapshot now and forward the barrier (aligned: once every channel
    /// delivered it; unaligned: at the first).
    pub(crate) snapshot: Option<CheckpointBarrier>,
    /// Every channel delivered the barrier or ended: the snapshot (with the in-flight input
    /// recorded, unaligned) goes to the coordinator.
    pub(crate) complete: Option<Aligned>,
}

impl BarrierAligner {
    /// Alignment over `channels` channels, none blocked or ended.
    pub(crate) fn new(channels: usize) -> Self {
        BarrierAligner {
            delivered: vec![false; channels],
            ended: vec![false; channels],
            phase: Phase::Idle,
            current: None,
            started: None,
            last: 0,
        }
    }

    /// Whether `channel` must not be read: it delivered the aligned barrier in progress.
    pub(crate) fn is_blocked(&self, channel: usize) -> bool {
        self.phase == Phase::Aligning && self.delivered[channel]
    }

    /// Whether what `channel` delivers now is in-flight input of the unaligned snapshot taken:
    /// it has neither delivered the barrier nor ended.
    pub(crate) fn is_recording(&self, channel: usize) -> bool {
        self.phase == Phase::Recording && !self.delivered[channel] && !self.ended[channel]
    }

    /// Where the checkpoint in progress stands.
    #[cfg(test)]
    pub(crate) fn phase(&self) -> Phase {
        self.phase
    }

    /// The checkpoint in progress, if any.
    #[cfg(test)]
    pub(crate) fn aligning(&self) -> Option<u64> {
        self.current.map(|b| b.id)
    }

    /// `channel` delivered `barrier`.
    pub(crate) fn on_barrier(&mut self, channel: usize, barrier: CheckpointBarrier) -> Steps {
        let mut steps = Steps::default();
        if barrier.id <= self.last {
            return steps; // stale
        }
        match self.current {
            Some(current) if barrier.id < current.id => return steps, // stale
            Some(current) if barrier.id > current.id => {
                // The older checkpoint was abandoned upstream: take the newer one.
                if self.phase == Phase::Recording {
                    steps.abandon = Some(current.id);
                }
                self.start(barrier, &mut steps);
            }
            Some(_) => {}
            None => self.start(barrier, &mut steps),
        }
        self.delivered[channel] = true;
        steps.complete = self.complete_if_done(&mut steps);
        steps
    }

    /// `channel` ended: it no longer holds back the barrier in progress.
    pub(crate) fn on_end(&mut self, channel: usize) -> Steps {
        self.ended[channel] = true;
        let mut steps = Steps::default();
        if self.current.is_some() {
            steps.complete = self.complete_if_done(&mut steps);
        }
        steps
    }

    fn start(&mut self, barrier: CheckpointBarrier, steps: &mut Steps) {
        self.delivered.iter_mut().for_each(|d| *d = false);
        self.current = Some(barrier);
        self.started = Some(Instant::now());
        self.phase = if barrier.unaligned {
            steps.snapshot = Some(barrier);
            Phase::Recording
        } else {
            Phase::Aligning
        };
    }

    fn complete_if_done(&mut self, steps: &mut Steps) -> Option<Aligned> {
        let barrier = self.current?;
        let done = self
            .delivered
            .iter()
            .zip(&self.ended)
            .all(|(&delivered, &ended)| delivered || ended);
        if !done {
            return None;
        }
        let alignment = match self.phase {
            Phase::Aligning => {
                steps.snapshot = Some(barrier);
                self.started.map(|t| t.elapsed()).unwrap_or_default()
            }
            _ => Duration::ZERO,
        };
        self.delivered.iter_mut().for_each(|d| *d = false);
        self.current = None;
        self.started = None;
        self.phase = Phase::Idle;
        self.last = barrier.id;
        Some(Aligned { barrier, alignment })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn barrier(id: u64) -> CheckpointBarrier {
        CheckpointBarrier {
            id,
            timestamp: 0,
            terminate: false,
            unaligned: false,
        }
    }

    fn unaligned(id: u64) -> CheckpointBarrier {
        CheckpointBarrier {
            unaligned: true,
            ..barrier(id)
        }
    }

    /// The steps as text: `a` abandon, `s` snapshot, `c` complete, with the checkpoint id.
    fn steps(steps: Steps) -> String {
        let mut out = Vec::new();
        if let Some(id) = steps.abandon {
            out.push(format!("a{id}"));
        }
        if let Some(b) = steps.snapshot {
            out.push(format!("s{}", b.id));
        }
        if let Some(a) = steps.complete {
            out.push(format!("c{}", a.barrier.id));
        }
        out.join(" ")
    }

    #[test]
    fn one_channel_snapshots_and_completes_at_once() {
        let mut a = BarrierAligner::new(1);
        assert_eq!(steps(a.on_barrier(0, barrier(1))), "s1 c1");
        assert!(!a.is_blocked(0));
        assert_eq!(a.aligning(), None);
        assert_eq!(steps(a.on_barrier(0, unaligned(2))), "s2 c2");
        assert_eq!(a.phase(), Phase::Idle);
    }

    #[test]
    fn a_channel_is_blocked_until_every_channel_delivered_the_barrier() {
        let mut a = BarrierAligner::new(3);
        assert_eq!(steps(a.on_barrier(1, barrier(1))), "");
        assert!(a.is_blocked(1) && !a.is_blocked(0) && !a.is_blocked(2));
        assert!(
            (0..3).all(|c| !a.is_recording(c)),
            "aligned records nothing"
        );
        assert_eq!(steps(a.on_barrier(0, barrier(1))), "");
        assert_eq!(steps(a.on_barrier(2, barrier(1))), "s1 c1");
        assert!((0..3).all(|c| !a.is_blocked(c)));
    }

    #[test]
    fn an_ended_channel_does_not_hold_alignment_back() {
        let mut a = BarrierAligner::new(2);
        assert_eq!(steps(a.on_end(1)), ""); // nothing being aligned
        assert_eq!(steps(a.on_barrier(0, barrier(4))), "s4 c4");
        let mut a = BarrierAligner::new(2);
        assert_eq!(steps(a.on_barrier(0, barrier(4))), "");
        assert_eq!(steps(a.on_end(1)), "s4 c4");
    }

    #[test]
    fn a_newer_barrier_abandons_the_older_alignment_and_stale_ones_are_ignored() {
        let mut a = BarrierAligner::new(2);
        assert_eq!(steps(a.on_barrier(0, barrier(1))), "");
        assert_eq!(steps(a.on_barrier(1, barrier(2))), "");
        assert!(!a.is_blocked(0) && a.is_blocked(1));
        assert_eq!(a.aligning(), Some(2));
        assert_eq!(steps(a.on_barrier(0, barrier(1))), ""); // stale
        assert!(!a.is_blocked(0));
        assert_eq!(steps(a.on_barrier(0, barrier(2))), "s2 c2");
        // Completed: a late copy of it, or an older one, starts nothing.
        assert_eq!(steps(a.on_barrier(1, barrier(2))), "");
        assert_eq!(steps(a.on_barrier(1, barrier(1))), "");
        assert_eq!(a.aligning(), None);
    }

    #[test]
    fn alignment_time_is_measured_from_the_first_barrier() {
        let mut a = BarrierAligner::new(2);
        a.on_barrier(0, barrier(1));
        std::thread::sleep(Duration::from_millis(5));
        let aligned = a.on_barrier(1, barrier(1)).complete.unwrap();
        assert!(aligned.alignment >= Duration::from_millis(5));
    }

    #[test]
    fn unaligned_snapshots_at_the_first_barrier_and_records_the_others_until_theirs() {
        let mut a = BarrierAligner::new(3);
        assert_eq!(steps(a.on_barrier(1, unaligned(1))), "s1");
        assert_eq!(a.phase(), Phase::Recording);
        // Nothing is blocked; the channels still before their barrier are recorded.
        assert!((0..3).all(|c| !a.is_blocked(c)));
        assert_eq!(
            (0..3).map(|c| a.is_recording(c)).collect::<Vec<_>>(),
            [true, false, true]
        );
        assert_eq!(steps(a.on_barrier(2, unaligned(1))), "");
        assert!(a.is_recording(0) && !a.is_recording(2));
        assert_eq!(steps(a.on_end(0)), "c1");
        assert_eq!(a.phase(), Phase::Idle);
        assert!((0..3).all(|c| !a.is_recording(c)));
    }

    #[test]
    fn unaligned_completes_with_the_last_barrier_and_holds_nothing_back() {
        let mut a = BarrierAligner::new(2);
        assert_eq!(steps(a.on_barrier(0, unaligned(7))), "s7");
        std::thread::sleep(Duration::from_millis(2));
        let last = a.on_barrier(1, unaligned(7));
        assert_eq!(steps(last), "c7");
        assert_eq!(last.complete.unwrap().alignment, Duration::ZERO);
    }

    #[test]
    fn a_newer_barrier_abandons_an_unaligned_snapshot_in_progress() {
        let mut a = BarrierAligner::new(2);
        assert_eq!(steps(a.on_barrier(0, unaligned(1))), "s1");
        // Checkpoint 1 timed out upstream; channel 1 never delivers it.
        assert_eq!(steps(a.on_barrier(1, unaligned(2))), "a1 s2");
        assert!(a.is_recording(0) && !a.is_recording(1));
        assert_eq!(steps(a.on_barrier(0, unaligned(1))), ""); // stale
        assert_eq!(steps(a.on_barrier(0, unaligned(2))), "c2");
        // An aligned barrier (a savepoint) after an abandoned unaligned one: nothing to drop.
        assert_eq!(steps(a.on_barrier(0, unaligned(3))), "s3");
        assert_eq!(steps(a.on_barrier(1, barrier(4))), "a3");
        assert_eq!(a.phase(), Phase::Aligning);
        assert!(a.is_blocked(1) && !a.is_recording(0));
        assert_eq!(steps(a.on_barrier(0, barrier(4))), "s4 c4");
        // And an unaligned one after an aligned alignment in progress: nothing was taken.
        assert_eq!(steps(a.on_barrier(0, barrier(5))), "");
        assert_eq!(steps(a.on_barrier(1, unaligned(6))), "s6");
        assert!(!a.is_blocked(0) && a.is_recording(0));
    }
}

//! Barrier alignment: the state machine that decides when a task with several input channels
//! takes its part of a checkpoint (Flink's aligned checkpoints).
//!
//! A channel that delivered the barrier of checkpoint N is blocked (its later records belong
//! after the snapshot) until every other channel delivered it too or ended; then the barrier is
//! released and every channel reads again. A newer barrier while aligning means the older
//! checkpoint was abandoned upstream: alignment starts over with the newer one. An older barrier
//! is stale and ignored. The same machine serves one- and two-input tasks: a two-input task's
//! gate reads the channels of both inputs.

use std::time::{Duration, Instant};

use crate::record::CheckpointBarrier;

/// Alignment of checkpoint barriers over `n` input channels.
#[derive(Debug)]
pub(crate) struct BarrierAligner {
    blocked: Vec<bool>,
    ended: Vec<bool>,
    current: Option<CheckpointBarrier>,
    started: Option<Instant>,
}

/// A barrier every channel delivered (or ended before), with how long channels were held back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Aligned {
    pub(crate) barrier: CheckpointBarrier,
    pub(crate) alignment: Duration,
}

impl BarrierAligner {
    /// Alignment over `channels` channels, none blocked or ended.
    pub(crate) fn new(channels: usize) -> Self {
        BarrierAligner {
            blocked: vec![false; channels],
            ended: vec![false; channels],
            current: None,
            started: None,
        }
    }

    /// Whether `channel` must not be read: it delivered the barrier being aligned.
    pub(crate) fn is_blocked(&self, channel: usize) -> bool {
        self.blocked[channel]
    }

    /// The checkpoint being aligned, if any.
    #[cfg(test)]
    pub(crate) fn aligning(&self) -> Option<u64> {
        self.current.map(|b| b.id)
    }

    /// `channel` delivered `barrier`; returns the barrier once it is aligned.
    pub(crate) fn on_barrier(
        &mut self,
        channel: usize,
        barrier: CheckpointBarrier,
    ) -> Option<Aligned> {
        match self.current {
            Some(current) if barrier.id < current.id => return None, // stale
            Some(current) if barrier.id > current.id => {
                // The older checkpoint was abandoned upstream: align the newer one.
                self.blocked.iter_mut().for_each(|b| *b = false);
                self.current = Some(barrier);
                self.started = Some(Instant::now());
            }
            Some(_) => {}
            None => {
                self.current = Some(barrier);
                self.started = Some(Instant::now());
            }
        }
        self.blocked[channel] = true;
        self.release_if_complete()
    }

    /// `channel` ended; returns the barrier being aligned if it no longer waits for anything.
    pub(crate) fn on_end(&mut self, channel: usize) -> Option<Aligned> {
        self.ended[channel] = true;
        self.current.and(self.release_if_complete())
    }

    fn release_if_complete(&mut self) -> Option<Aligned> {
        let barrier = self.current?;
        let complete = self
            .blocked
            .iter()
            .zip(&self.ended)
            .all(|(&blocked, &ended)| blocked || ended);
        if !complete {
            return None;
        }
        self.blocked.iter_mut().for_each(|b| *b = false);
        self.current = None;
        let alignment = self.started.take().map(|t| t.elapsed()).unwrap_or_default();
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
        }
    }

    fn released(aligned: Option<Aligned>) -> Option<u64> {
        aligned.map(|a| a.barrier.id)
    }

    #[test]
    fn one_channel_releases_at_once() {
        let mut a = BarrierAligner::new(1);
        assert_eq!(released(a.on_barrier(0, barrier(1))), Some(1));
        assert!(!a.is_blocked(0));
        assert_eq!(a.aligning(), None);
    }

    #[test]
    fn a_channel_is_blocked_until_every_channel_delivered_the_barrier() {
        let mut a = BarrierAligner::new(3);
        assert_eq!(released(a.on_barrier(1, barrier(1))), None);
        assert!(a.is_blocked(1) && !a.is_blocked(0) && !a.is_blocked(2));
        assert_eq!(released(a.on_barrier(0, barrier(1))), None);
        assert_eq!(released(a.on_barrier(2, barrier(1))), Some(1));
        assert!((0..3).all(|c| !a.is_blocked(c)));
    }

    #[test]
    fn an_ended_channel_does_not_hold_alignment_back() {
        let mut a = BarrierAligner::new(2);
        assert_eq!(a.on_end(1), None); // nothing being aligned
        assert_eq!(released(a.on_barrier(0, barrier(4))), Some(4));
        let mut a = BarrierAligner::new(2);
        assert_eq!(released(a.on_barrier(0, barrier(4))), None);
        assert_eq!(released(a.on_end(1)), Some(4));
    }

    #[test]
    fn a_newer_barrier_abandons_the_older_alignment_and_stale_ones_are_ignored() {
        let mut a = BarrierAligner::new(2);
        assert_eq!(released(a.on_barrier(0, barrier(1))), None);
        assert_eq!(released(a.on_barrier(1, barrier(2))), None);
        assert!(!a.is_blocked(0) && a.is_blocked(1));
        assert_eq!(a.aligning(), Some(2));
        assert_eq!(released(a.on_barrier(0, barrier(1))), None); // stale
        assert!(!a.is_blocked(0));
        assert_eq!(released(a.on_barrier(0, barrier(2))), Some(2));
    }

    #[test]
    fn alignment_time_is_measured_from_the_first_barrier() {
        let mut a = BarrierAligner::new(2);
        a.on_barrier(0, barrier(1));
        std::thread::sleep(Duration::from_millis(5));
        let aligned = a.on_barrier(1, barrier(1)).unwrap();
        assert!(aligned.alignment >= Duration::from_millis(5));
    }
}

//! The checkpoint coordinator's decisions, as a pure state machine: when to trigger which
//! snapshot, what a finished task means for the pending one, what an outcome changes, and when
//! the coordinator may end. It holds no channel, storage or thread; the coordinator's loop
//! ([`Coordinator::run`](super::Coordinator::run)) feeds it what happened and carries out the
//! steps it returns, so every rule here is unit-tested without threads (like
//! [`BarrierAligner`](crate::runtime::alignment)).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::checkpoint::manifest::SnapshotKind;

/// How often the job's final checkpoint is tried before the run fails.
pub(crate) const FINAL_CHECKPOINT_ATTEMPTS: u32 = 3;

/// The settings the decisions depend on.
#[derive(Clone, Debug)]
pub(crate) struct ScheduleConfig {
    /// Number of tasks of the job (every one acknowledges a checkpoint).
    pub(crate) tasks: usize,
    /// Periodic checkpoints (`None`: only savepoints and the final checkpoint).
    pub(crate) interval: Option<Duration>,
    /// The least time between the end of one checkpoint and the start of the next.
    pub(crate) min_pause: Duration,
    /// A pending snapshot older than this fails.
    pub(crate) timeout: Duration,
    /// Checkpoints that may fail in a row before the job fails (`None`: any number).
    pub(crate) tolerable_failures: Option<u32>,
    /// The job takes checkpoints into storage (storage configured and checkpointing enabled).
    pub(crate) takes_checkpoints: bool,
}

/// What the loop knows of the world outside the coordinator at one moment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Moment {
    pub(crate) now: Instant,
    /// Every task's thread has ended.
    pub(crate) done: bool,
    /// The job was stopped with a savepoint (no final checkpoint follows it).
    pub(crate) stopped_at_savepoint: bool,
}

/// The snapshot in progress, as far as the decisions need it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PendingSnapshot {
    pub(crate) id: u64,
    pub(crate) kind: SnapshotKind,
    pub(crate) triggered: Instant,
    /// A stop-with-savepoint.
    pub(crate) stop: bool,
    /// Every task had finished when it was triggered (the job's final checkpoint).
    pub(crate) last: bool,
}

/// What to trigger now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// The job's final checkpoint (every task finished).
    FinalCheckpoint,
    /// The savepoint asked for first.
    Savepoint,
    /// The next periodic checkpoint.
    Checkpoint,
}

/// The steps of one pass of the loop, in order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Steps {
    /// The pending snapshot timed out: fail it.
    pub(crate) time_out: bool,
    /// Refuse the savepoints asked for: the job's input has ended (or it is stopping).
    pub(crate) refuse_savepoints: bool,
    /// Trigger a snapshot.
    pub(crate) trigger: Option<Trigger>,
}

/// What a task that finished means for the pending snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FinishedTask {
    /// Nothing: no snapshot pending, or the task took part in it.
    Nothing,
    /// Its final snapshot stands for it in the pending one.
    StandIn,
    /// It finished before it took part and left no final snapshot: the pending one fails.
    Fail,
}

/// What a snapshot that completed changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Completed {
    /// Publish the completion: sinks commit what it covers (checkpoints and a
    /// stop-with-savepoint; an intermediate savepoint commits nothing, as in Flink 1.15+).
    pub(crate) publish: bool,
    /// The finished tasks whose final snapshot it holds commit their sinks' last output.
    pub(crate) commit_finished: bool,
    /// It is the job's final checkpoint.
    pub(crate) final_checkpoint: bool,
    /// Remove the checkpoints older than the retained ones.
    pub(crate) retain: bool,
    /// Stop the job (a stop-with-savepoint completed).
    pub(crate) stop_job: bool,
}

/// What a snapshot that failed changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Failed {
    /// Remove the checkpoint's directory (a savepoint's location is the user's).
    pub(crate) remove: bool,
    /// More checkpoints failed in a row than tolerated: fail the job, with how many failed.
    pub(crate) fail_job: Option<(u32, u32)>,
}

/// The coordinator's decision state.
#[derive(Debug)]
pub(crate) struct Schedule {
    config: ScheduleConfig,
    /// When the next periodic checkpoint is due.
    next_trigger: Option<Instant>,
    /// Finished tasks, with the last checkpoint each took part in.
    finished: HashMap<usize, u64>,
    /// A stop-with-savepoint was triggered: no checkpoint after it (unless it fails).
    terminating: bool,
    /// Checkpoints failed since the last one completed.
    failed_in_a_row: u32,
    /// Final checkpoints triggered.
    final_attempts: u32,
    /// The job's final checkpoint completed.
    final_done: bool,
    /// The job already failed for too many failed checkpoints.
    failed_job: bool,
}

impl Schedule {
    pub(crate) fn new(config: ScheduleConfig, now: Instant) -> Self {
        let next_trigger = config.interval.map(|i| now + i);
        Schedule {
            config,
            next_trigger,
            finished: HashMap::new(),
            terminating: false,
            failed_in_a_row: 0,
            final_attempts: 0,
            final_done: false,
            failed_job: false,
        }
    }

    /// Every task finished.
    pub(crate) fn all_finished(&self) -> bool {
        self.finished.len() == self.config.tasks
    }

    /// The finished tasks.
    pub(crate) fn finished_tasks(&self) -> Vec<usize> {
        let mut tasks: Vec<usize> = self.finished.keys().copied().collect();
        tasks.sort_unstable();
        tasks
    }

    /// A snapshot was triggered: whether it is the job's final checkpoint (every task finished).
    pub(crate) fn triggered(&mut self, trigger: Trigger, stop: bool) -> bool {
        if stop {
            self.terminating = true;
        }
        if trigger == Trigger::FinalCheckpoint {
            self.final_attempts += 1;
        }
        self.all_finished()
    }

    /// Whether the job's final checkpoint is still to be taken: every task finished, the job
    /// takes checkpoints, it was not stopped with a savepoint, and attempts are left.
    pub(crate) fn final_checkpoint_due(&self, stopped_at_savepoint: bool) -> bool {
        self.config.takes_checkpoints
            && self.all_finished()
            && !self.final_done
            && !self.terminating
            && !stopped_at_savepoint
            && self.final_attempts < FINAL_CHECKPOINT_ATTEMPTS
    }

    /// Whether the loop may end: the tasks are done, nothing is pending or on its way, and no
    /// final checkpoint is due.
    pub(crate) fn may_end(&self, at: Moment, pending: bool, events_waiting: bool) -> bool {
        at.done
            && !pending
            && !events_waiting
            && !self.final_checkpoint_due(at.stopped_at_savepoint)
    }

    /// Task `task` finished after taking part in checkpoint `last`. `acked`: it acknowledged
    /// the pending snapshot; `has_final`: its final snapshot has arrived.
    pub(crate) fn task_finished(
        &mut self,
        task: usize,
        last: u64,
        pending: Option<PendingSnapshot>,
        acked: bool,
        has_final: bool,
    ) -> FinishedTask {
        self.finished.insert(task, last);
        match pending {
            Some(p) if p.id > last && !acked => {
                if has_final {
                    FinishedTask::StandIn
                } else {
                    FinishedTask::Fail
                }
            }
            _ => FinishedTask::Nothing,
        }
    }

    /// One pass of the loop after the events were handled.
    pub(crate) fn step(
        &mut self,
        at: Moment,
        pending: Option<PendingSnapshot>,
        savepoint_asked: bool,
    ) -> Steps {
        let mut steps = Steps::default();
        if let Some(p) = pending {
            // One pending at a time; one that timed out fails, and the next pass goes on.
            steps.time_out = at.now.saturating_duration_since(p.triggered) > self.config.timeout;
            return steps;
        }
        let ending = self.all_finished() || self.terminating || at.done;
        steps.refuse_savepoints = ending && savepoint_asked;
        if self.final_checkpoint_due(at.stopped_at_savepoint) {
            steps.trigger = Some(Trigger::FinalCheckpoint);
            return steps;
        }
        if ending {
            return steps;
        }
        if savepoint_asked {
            steps.trigger = Some(Trigger::Savepoint);
        } else if self.next_trigger.is_some_and(|t| at.now >= t) && self.config.takes_checkpoints {
            steps.trigger = Some(Trigger::Checkpoint);
        }
        steps
    }

    /// The pending snapshot ended (completed, failed or timed out) at `now`: the next periodic
    /// checkpoint is due an interval (at least the minimum pause) later.
    fn ended(&mut self, now: Instant) {
        self.next_trigger = self
            .config
            .interval
            .map(|i| now + self.config.min_pause.max(i));
    }

    /// `pending` completed at `now`.
    pub(crate) fn completed(&mut self, pending: PendingSnapshot, now: Instant) -> Completed {
        self.ended(now);
        let checkpoint = pending.kind == SnapshotKind::Checkpoint;
        if checkpoint {
            self.failed_in_a_row = 0;
            if pending.last {
                self.final_done = true;
            }
        }
        Completed {
            publish: checkpoint || pending.stop,
            commit_finished: checkpoint,
            final_checkpoint: checkpoint && pending.last,
            retain: checkpoint,
            stop_job: pending.kind == SnapshotKind::Savepoint && pending.stop,
        }
    }

    /// `pending` failed at `now` (declined, timed out, or its manifest could not be written).
    pub(crate) fn failed(&mut self, pending: PendingSnapshot, now: Instant) -> Failed {
        self.ended(now);
        if pending.stop {
            // The job goes on: checkpoints resume.
            self.terminating = false;
        }
        if pending.kind != SnapshotKind::Checkpoint {
            return Failed::default();
        }
        self.failed_in_a_row += 1;
        let fail_job = match self.config.tolerable_failures {
            Some(tolerated) if self.failed_in_a_row > tolerated && !self.failed_job => {
                self.failed_job = true;
                Some((self.failed_in_a_row, tolerated))
            }
            _ => None,
        };
        Failed {
            remove: true,
            fail_job,
        }
    }

    /// The job already failed for a reason of its own (a sink's commit): no second failure for
    /// failed checkpoints.
    pub(crate) fn job_failed(&mut self) {
        self.failed_job = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn config(tasks: usize) -> ScheduleConfig {
        ScheduleConfig {
            tasks,
            interval: Some(10 * SECOND),
            min_pause: 2 * SECOND,
            timeout: 60 * SECOND,
            tolerable_failures: Some(2),
            takes_checkpoints: true,
        }
    }

    fn at(start: Instant, secs: u64) -> Moment {
        Moment {
            now: start + Duration::from_secs(secs),
            done: false,
            stopped_at_savepoint: false,
        }
    }

    fn pending(id: u64, kind: SnapshotKind, triggered: Instant) -> PendingSnapshot {
        PendingSnapshot {
            id,
            kind,
            triggered,
            stop: false,
            last: false,
        }
    }

    #[test]
    fn periodic_checkpoints_wait_for_the_interval_then_the_pause_after_each_end() {
        let start = Instant::now();
        let mut s = Schedule::new(config(2), start);
        assert_eq!(s.step(at(start, 9), None, false), Steps::default());
        assert_eq!(
            s.step(at(start, 10), None, false).trigger,
            Some(Trigger::Checkpoint)
        );
        let p = pending(1, SnapshotKind::Checkpoint, start + 10 * SECOND);
        // Nothing while one is pending.
        assert_eq!(s.step(at(start, 30), Some(p), false), Steps::default());
        let done = s.completed(p, start + 31 * SECOND);
        assert!(done.publish && done.commit_finished && done.retain && !done.final_checkpoint);
        assert_eq!(s.step(at(start, 40), None, false).trigger, None);
        assert_eq!(
            s.step(at(start, 41), None, false).trigger,
            Some(Trigger::Checkpoint)
        );
    }

    #[test]
    fn the_minimum_pause_wins_over_a_shorter_interval() {
        let start = Instant::now();
        let mut s = Schedule::new(
            ScheduleConfig {
                min_pause: 30 * SECOND,
                ..config(1)
            },
            start,
        );
        let p = pending(1, SnapshotKind::Checkpoint, start);
        s.completed(p, start + SECOND);
        assert_eq!(s.step(at(start, 20), None, false).trigger, None);
        assert_eq!(
            s.step(at(start, 31), None, false).trigger,
            Some(Trigger::Checkpoint)
        );
    }

    #[test]
    fn a_savepoint_asked_for_goes_before_the_next_checkpoint() {
        let start = Instant::now();
        let mut s = Schedule::new(config(1), start);
        assert_eq!(
            s.step(at(start, 1), None, true).trigger,
            Some(Trigger::Savepoint)
        );
        // An intermediate savepoint commits nothing and does not count as a checkpoint.
        let p = pending(1, SnapshotKind::Savepoint, start + SECOND);
        assert_eq!(s.completed(p, start + 2 * SECOND), Completed::default());
    }

    #[test]
    fn a_stop_with_savepoint_publishes_stops_and_holds_checkpoints_back_unless_it_fails() {
        let start = Instant::now();
        let mut s = Schedule::new(config(1), start);
        s.triggered(Trigger::Savepoint, true);
        let stop = PendingSnapshot {
            stop: true,
            ..pending(1, SnapshotKind::Savepoint, start)
        };
        // While it is pending, and after it failed, no checkpoint is held back for ever.
        assert_eq!(s.step(at(start, 20), Some(stop), false).trigger, None);
        let failed = s.failed(stop, start + 21 * SECOND);
        assert_eq!(
            failed,
            Failed::default(),
            "a savepoint's location is the user's"
        );
        assert_eq!(
            s.step(at(start, 40), None, false).trigger,
            Some(Trigger::Checkpoint)
        );
        // Triggered again, it completes: published, and the job stops.
        s.triggered(Trigger::Savepoint, true);
        let done = s.completed(stop, start + 50 * SECOND);
        assert!(done.publish && done.stop_job && !done.retain && !done.commit_finished);
        assert_eq!(s.step(at(start, 100), None, true).trigger, None);
        assert!(s.step(at(start, 100), None, true).refuse_savepoints);
    }

    #[test]
    fn a_timed_out_snapshot_fails_and_savepoints_are_refused_once_the_input_ended() {
        let start = Instant::now();
        let mut s = Schedule::new(config(1), start);
        let p = pending(1, SnapshotKind::Checkpoint, start);
        assert!(!s.step(at(start, 60), Some(p), false).time_out);
        let ended = Moment {
            done: true,
            ..at(start, 61)
        };
        let steps = s.step(ended, Some(p), true);
        assert_eq!(
            steps,
            Steps {
                time_out: true,
                ..Steps::default()
            }
        );
        s.failed(p, ended.now);
        let steps = s.step(ended, None, true);
        assert!(steps.refuse_savepoints);
        assert_eq!(steps.trigger, None);
    }

    #[test]
    fn too_many_failed_checkpoints_in_a_row_fail_the_job_once_and_a_completion_resets_the_count() {
        let start = Instant::now();
        let mut s = Schedule::new(config(1), start);
        let p = pending(1, SnapshotKind::Checkpoint, start);
        assert_eq!(s.failed(p, start).fail_job, None);
        assert_eq!(s.failed(p, start).fail_job, None);
        s.completed(p, start);
        assert_eq!(s.failed(p, start).fail_job, None);
        assert_eq!(s.failed(p, start).fail_job, None);
        assert_eq!(s.failed(p, start).fail_job, Some((3, 2)));
        assert_eq!(s.failed(p, start).fail_job, None, "once");
        assert!(s.failed(p, start).remove);
        // Without a bound the job goes on.
        let mut unbounded = Schedule::new(
            ScheduleConfig {
                tolerable_failures: None,
                ..config(1)
            },
            start,
        );
        for _ in 0..100 {
            assert_eq!(unbounded.failed(p, start).fail_job, None);
        }
        // A job that failed for another reason does not fail again for its checkpoints.
        let mut other = Schedule::new(config(1), start);
        other.job_failed();
        for _ in 0..5 {
            assert_eq!(other.failed(p, start).fail_job, None);
        }
    }

    #[test]
    fn a_task_that_finishes_before_taking_part_stands_in_with_its_final_snapshot_or_fails_it() {
        let start = Instant::now();
        let mut s = Schedule::new(config(3), start);
        let p = pending(5, SnapshotKind::Checkpoint, start);
        assert_eq!(
            s.task_finished(0, 5, Some(p), false, true),
            FinishedTask::Nothing,
            "it took part in 5"
        );
        assert_eq!(
            s.task_finished(1, 4, Some(p), true, false),
            FinishedTask::Nothing,
            "it acknowledged 5"
        );
        assert_eq!(
            s.task_finished(2, 4, Some(p), false, true),
            FinishedTask::StandIn
        );
        let mut t = Schedule::new(config(2), start);
        assert_eq!(
            t.task_finished(0, 4, Some(p), false, false),
            FinishedTask::Fail
        );
        assert_eq!(
            t.task_finished(1, 0, None, false, false),
            FinishedTask::Nothing
        );
        assert_eq!(t.finished_tasks(), vec![0, 1]);
    }

    #[test]
    fn the_final_checkpoint_is_taken_once_every_task_finished_and_tried_three_times() {
        let start = Instant::now();
        let mut s = Schedule::new(config(2), start);
        let done = Moment {
            done: true,
            ..at(start, 1)
        };
        s.task_finished(0, 0, None, false, true);
        assert!(!s.final_checkpoint_due(false));
        // The input of one task ended: savepoints are still taken, checkpoints go on.
        assert_eq!(
            s.step(at(start, 1), None, true).trigger,
            Some(Trigger::Savepoint)
        );
        s.task_finished(1, 0, None, false, true);
        assert!(!s.may_end(done, false, false));
        let steps = s.step(done, None, true);
        assert_eq!(steps.trigger, Some(Trigger::FinalCheckpoint));
        assert!(steps.refuse_savepoints);
        for attempt in 1..=FINAL_CHECKPOINT_ATTEMPTS {
            assert!(s.triggered(Trigger::FinalCheckpoint, false), "last");
            let p = PendingSnapshot {
                last: true,
                ..pending(u64::from(attempt), SnapshotKind::Checkpoint, start)
            };
            s.failed(p, start);
        }
        assert!(!s.final_checkpoint_due(false), "three attempts");
        assert!(s.may_end(done, false, false));
        assert!(!s.may_end(done, true, false), "one pending");
        assert!(!s.may_end(done, false, true), "events on their way");
    }

    #[test]
    fn a_completed_final_checkpoint_ends_the_schedule_and_none_follows_a_stop() {
        let start = Instant::now();
        let mut s = Schedule::new(config(1), start);
        s.task_finished(0, 0, None, false, true);
        assert!(s.triggered(Trigger::FinalCheckpoint, false));
        let p = PendingSnapshot {
            last: true,
            ..pending(1, SnapshotKind::Checkpoint, start)
        };
        let done = s.completed(p, start);
        assert!(done.final_checkpoint && done.commit_finished && done.publish);
        assert!(!s.final_checkpoint_due(false));
        // Stopped with a savepoint, or without storage: no final checkpoint.
        let mut stopped = Schedule::new(config(1), start);
        stopped.task_finished(0, 0, None, false, true);
        assert!(!stopped.final_checkpoint_due(true));
        let mut no_storage = Schedule::new(
            ScheduleConfig {
                takes_checkpoints: false,
                ..config(1)
            },
            start,
        );
        no_storage.task_finished(0, 0, None, false, true);
        assert!(!no_storage.final_checkpoint_due(false));
        assert_eq!(
            no_storage.step(at(start, 100), None, false),
            Steps::default()
        );
    }
}

//! The supervisor's decisions, as pure functions of what happened: which task failure is the
//! job's, where an attempt's checkpoint ids start, what the end of an attempt commits, whether a
//! failed attempt restarts (and after which delay), and which checkpoints a restart tries. The
//! supervisor ([`super::supervisor`]) and the task threads ([`super::tasks`]) carry them out;
//! every rule here is unit-tested without threads.

use std::time::Duration;

use crate::checkpoint::coordinator::CheckpointStats;
use crate::checkpoint::{Ending, RestartStrategy, SnapshotKind};
use crate::error::{ConnectorErrorKind, Error};

/// The tasks' failures of one attempt, in the order they arrive: the job's failure is the first
/// one that is not a cancellation (the other tasks' "cancelled" errors follow from it).
#[derive(Debug, Default)]
pub(super) struct FirstFailure {
    failure: Option<Error>,
}

/// What one task's failure is to the attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TaskFailure {
    /// The attempt's failure, a real one: log it as an error.
    First,
    /// The attempt's failure, but an ordinary end of a process group's run (its partitions
    /// were reassigned): log it as information.
    FirstReassigned,
    /// A cancellation, or a failure after the first: not reported.
    Secondary,
}

impl FirstFailure {
    /// Records a task's failure. Every failure (the secondary ones too) cancels the attempt.
    pub(super) fn record(&mut self, error: Error) -> TaskFailure {
        if error.is_cancelled() || self.failure.is_some() {
            return TaskFailure::Secondary;
        }
        let reassigned = error.connector_kind() == Some(ConnectorErrorKind::Reassigned);
        self.failure = Some(error);
        if reassigned {
            TaskFailure::FirstReassigned
        } else {
            TaskFailure::First
        }
    }

    /// The attempt's failure, if one was not a cancellation.
    pub(super) fn into_failure(self) -> Option<Error> {
        self.failure
    }
}

/// The first checkpoint id of an attempt: after every checkpoint directory storage holds (an
/// earlier run's included, so that no id is written twice) and after the checkpoint restored.
pub(super) fn first_checkpoint_id(newest_stored: Option<u64>, restored: Option<u64>) -> u64 {
    let after_stored = newest_stored.map_or(1, |id| id + 1);
    after_stored.max(restored.map_or(0, |id| id + 1))
}

/// What the end of an attempt whose every task finished leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AttemptEnd {
    /// Run the sinks' finalizers with this ending, and the job ends.
    Commit(Ending),
    /// The job's final checkpoint failed: its last output is not committed, the attempt fails.
    FinalCheckpointFailed,
}

/// What the end of an attempt in which no task failed commits: after a stop with a savepoint
/// only what was pre-committed up to the last completed checkpoint or savepoint (`committed`);
/// with checkpoints, everything, but only once the final checkpoint completed (a restore after a
/// crash then finds the job's end and writes nothing again); without, everything.
pub(super) fn attempt_end(
    stopped_at_savepoint: bool,
    takes_checkpoints: bool,
    committed: u64,
    final_checkpoint: Option<u64>,
) -> AttemptEnd {
    if stopped_at_savepoint {
        AttemptEnd::Commit(Ending::Stopped { up_to: committed })
    } else if takes_checkpoints && final_checkpoint.is_none() {
        AttemptEnd::FinalCheckpointFailed
    } else {
        AttemptEnd::Commit(Ending::Drained)
    }
}

/// What follows a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AfterFailure {
    /// The user cancelled the job: it ends cancelled, whatever failed.
    Cancelled,
    /// No restart is left (or checkpoints are off): the job fails with the attempt's failure.
    Fail,
    /// Start restart number `attempt` after `delay`.
    Restart {
        /// The restart's number (1 for the first).
        attempt: u32,
        /// The wait before it.
        delay: Duration,
    },
}

/// Whether attempt number `attempt` (0 for the first run), which failed after `ran`, is followed
/// by a restart. Without checkpoints a restart would replay everything: the job fails (as in
/// Flink). `backoff` carries the exponential strategy's current delay across attempts.
pub(super) fn after_failure(
    user_cancelled: bool,
    checkpoints_enabled: bool,
    strategy: RestartStrategy,
    attempt: u32,
    ran: Duration,
    backoff: &mut Option<Duration>,
) -> AfterFailure {
    if user_cancelled {
        return AfterFailure::Cancelled;
    }
    let strategy = if checkpoints_enabled {
        strategy
    } else {
        RestartStrategy::None
    };
    match strategy.next_delay(attempt + 1, ran, backoff) {
        Some(delay) => AfterFailure::Restart {
            attempt: attempt + 1,
            delay,
        },
        None => AfterFailure::Fail,
    }
}

/// The checkpoints a restart tries, in order: this job's completed checkpoints, newest first
/// (never a savepoint, never an older run's checkpoint). When none reads back whole, the restart
/// starts from the snapshot the job started from.
pub(super) fn restart_candidates(stats: &[CheckpointStats]) -> Vec<u64> {
    let mut ids: Vec<u64> = stats
        .iter()
        .filter(|c| c.completed() && c.kind == SnapshotKind::Checkpoint)
        .map(|c| c.id)
        .collect();
    ids.sort_unstable_by(|a, b| b.cmp(a));
    ids.dedup();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reassigned() -> Error {
        Error::connector(
            "kafka",
            ConnectorErrorKind::Reassigned,
            "the group's partitions were reassigned",
            "rebalance",
        )
    }

    #[test]
    fn the_first_failure_that_is_not_a_cancellation_is_the_jobs() {
        let mut failures = FirstFailure::default();
        assert_eq!(failures.record(Error::Cancelled), TaskFailure::Secondary);
        assert_eq!(
            failures.record(Error::Checkpoint("disk full".into())),
            TaskFailure::First
        );
        assert_eq!(
            failures.record(Error::Checkpoint("second".into())),
            TaskFailure::Secondary
        );
        assert_eq!(failures.record(Error::Cancelled), TaskFailure::Secondary);
        let failure = failures.into_failure().expect("a failure");
        assert!(failure.to_string().contains("disk full"), "{failure}");
    }

    #[test]
    fn only_cancellations_make_no_failure() {
        let mut failures = FirstFailure::default();
        failures.record(Error::Cancelled);
        failures.record(Error::Cancelled);
        assert!(failures.into_failure().is_none());
    }

    #[test]
    fn a_reassignment_is_the_failure_but_an_ordinary_one() {
        let mut failures = FirstFailure::default();
        assert_eq!(failures.record(reassigned()), TaskFailure::FirstReassigned);
        assert_eq!(
            failures.record(Error::Checkpoint("later".into())),
            TaskFailure::Secondary
        );
        let failure = failures.into_failure().expect("a failure");
        assert_eq!(
            failure.connector_kind(),
            Some(ConnectorErrorKind::Reassigned)
        );
    }

    #[test]
    fn checkpoint_ids_continue_after_storage_and_after_the_restored_one() {
        assert_eq!(first_checkpoint_id(None, None), 1);
        assert_eq!(first_checkpoint_id(Some(7), None), 8);
        // A savepoint elsewhere with a higher id: ids continue after it.
        assert_eq!(first_checkpoint_id(Some(7), Some(12)), 13);
        assert_eq!(first_checkpoint_id(Some(12), Some(7)), 13);
        assert_eq!(first_checkpoint_id(None, Some(3)), 4);
    }

    #[test]
    fn the_end_of_an_attempt_commits_only_what_its_checkpoints_allow() {
        assert_eq!(
            attempt_end(true, true, 9, None),
            AttemptEnd::Commit(Ending::Stopped { up_to: 9 })
        );
        assert_eq!(
            attempt_end(true, false, 0, None),
            AttemptEnd::Commit(Ending::Stopped { up_to: 0 })
        );
        assert_eq!(
            attempt_end(false, true, 9, Some(10)),
            AttemptEnd::Commit(Ending::Drained)
        );
        assert_eq!(
            attempt_end(false, true, 9, None),
            AttemptEnd::FinalCheckpointFailed
        );
        assert_eq!(
            attempt_end(false, false, 0, None),
            AttemptEnd::Commit(Ending::Drained)
        );
    }

    #[test]
    fn a_cancelled_job_never_restarts() {
        let strategy = RestartStrategy::FixedDelay {
            attempts: 5,
            delay: Duration::ZERO,
        };
        let mut backoff = None;
        assert_eq!(
            after_failure(true, true, strategy, 0, Duration::ZERO, &mut backoff),
            AfterFailure::Cancelled
        );
    }

    #[test]
    fn without_checkpoints_a_failure_fails_the_job() {
        let strategy = RestartStrategy::FixedDelay {
            attempts: 5,
            delay: Duration::ZERO,
        };
        let mut backoff = None;
        assert_eq!(
            after_failure(false, false, strategy, 0, Duration::ZERO, &mut backoff),
            AfterFailure::Fail
        );
    }

    #[test]
    fn fixed_delay_restarts_count_from_one_and_run_out() {
        let delay = Duration::from_millis(250);
        let strategy = RestartStrategy::FixedDelay { attempts: 2, delay };
        let mut backoff = None;
        let decide = |attempt, backoff: &mut Option<Duration>| {
            after_failure(false, true, strategy, attempt, Duration::ZERO, backoff)
        };
        assert_eq!(
            decide(0, &mut backoff),
            AfterFailure::Restart { attempt: 1, delay }
        );
        assert_eq!(
            decide(1, &mut backoff),
            AfterFailure::Restart { attempt: 2, delay }
        );
        assert_eq!(decide(2, &mut backoff), AfterFailure::Fail);
    }

    #[test]
    fn exponential_backoff_grows_and_resets_after_a_long_run() {
        let strategy = RestartStrategy::ExponentialBackoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(300),
            multiplier: 2.0,
            reset_after: Duration::from_secs(60),
        };
        let mut backoff = None;
        let mut delays = Vec::new();
        for (attempt, ran) in [(0, 1), (1, 1), (2, 1), (3, 61), (4, 1)] {
            match after_failure(
                false,
                true,
                strategy,
                attempt,
                Duration::from_secs(ran),
                &mut backoff,
            ) {
                AfterFailure::Restart { delay, .. } => delays.push(delay.as_millis()),
                other => panic!("expected a restart, got {other:?}"),
            }
        }
        assert_eq!(delays, vec![100, 200, 300, 100, 200]);
    }

    fn stats(id: u64, kind: SnapshotKind, status: &str) -> CheckpointStats {
        CheckpointStats {
            id,
            kind,
            status: status.into(),
            triggered_at: 0,
            duration_ms: 0,
            alignment_ms: 0,
            size_bytes: 0,
            state_size_bytes: 0,
            subtasks_with_state: 0,
            unaligned: false,
            in_flight_bytes: 0,
        }
    }

    #[test]
    fn a_restart_tries_completed_checkpoints_newest_first_never_a_savepoint() {
        let taken = vec![
            stats(3, SnapshotKind::Checkpoint, "completed"),
            stats(5, SnapshotKind::Savepoint, "completed"),
            stats(4, SnapshotKind::Checkpoint, "failed: timed out"),
            stats(6, SnapshotKind::Checkpoint, "completed"),
            stats(2, SnapshotKind::Checkpoint, "completed"),
        ];
        assert_eq!(restart_candidates(&taken), vec![6, 3, 2]);
        assert!(restart_candidates(&[]).is_empty());
    }
}

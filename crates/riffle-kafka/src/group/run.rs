//! The member's loop: wait for an assignment, build the job, check it is the group's, restore
//! what the committed offsets name, run, and when the group moves partitions, abort what the
//! run left and start again on the new assignment. What to do once a run ended is decided by
//! [`after_run`], a pure function of how it ended.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use riffle::checkpoint::{CheckpointStorage, RetentionFloor};
use riffle::{ConnectorErrorKind, StreamEnv};

use super::{
    KafkaGroup, MISSING_STATE_RETRY, RunState, SETTLE, TOLERABLE_FAILED_CHECKPOINTS, restore,
};

/// Runs a job as one member of `group`, until it ends: waits for an assignment, builds the job
/// with `build` (its Kafka sources and sinks in the group: [`KafkaSource::in_group`],
/// [`KafkaSink::in_group`]), runs it, and when the group moves partitions, aborts what the run
/// left uncommitted and runs it again on the new assignment, from the committed offsets.
///
/// A run never restores from the job's checkpoints: after a failure, the job's restart strategy
/// (`EnvConfig::checkpoints.restart`) applies here, and the next run starts from the committed
/// offsets, since the checkpoints after them did not commit. The job needs a checkpoint interval
/// (commits happen at checkpoints), and no restore setting; both are checked at start.
///
/// [`KafkaSource::in_group`]: crate::KafkaSource::in_group
/// [`KafkaSink::in_group`]: crate::KafkaSink::in_group
pub fn run_in_group(
    group: &KafkaGroup,
    build: impl FnMut(&KafkaGroup) -> riffle::Result<StreamEnv>,
) -> riffle::Result<riffle::JobResult> {
    run_in_group_with(group, build, StreamEnv::execute)
}

/// [`run_in_group`], with each run executed by `execute` (which runs the environment to its
/// end: `StreamEnv::execute`, or a loop over `execute_async` that shows progress and stops the
/// job on Ctrl-C). A run that `execute` ends with `Ok` ends the group's job.
pub fn run_in_group_with(
    group: &KafkaGroup,
    mut build: impl FnMut(&KafkaGroup) -> riffle::Result<StreamEnv>,
    mut execute: impl FnMut(&StreamEnv) -> riffle::Result<riffle::JobResult>,
) -> riffle::Result<riffle::JobResult> {
    let (mut failures, mut backoff): (u32, Option<Duration>) = (0, None);
    group.rejoin()?;
    loop {
        let generation = group.wait_for_assignment();
        group.begin_run(generation, None);
        tracing::info!(group = group.name(), generation, partitions = ?group.assignment(), "group: run starts");
        let env = build(group)?;
        let config = env.config();
        if config.checkpoints.interval.is_none() {
            return Err(riffle::Error::config(
                "checkpoints.interval",
                "a job in a process group commits at checkpoints: it needs a checkpoint interval",
            ));
        }
        if config.checkpoints.restore.is_some() {
            return Err(riffle::Error::config(
                "checkpoints.restore",
                "a job in a process group resumes from its group's committed offsets, not from a checkpoint",
            ));
        }
        let restart = config.checkpoints.restart;
        let location = config.checkpoints.storage.clone();
        let open = || {
            CheckpointStorage::open(
                &location,
                &config.checkpoints.storage_options,
                "",
                "checkpoints.storage",
            )
            .map(|storage| storage.with_warm_files(group.warm_files()))
        };
        let storage = open()?;
        // One group, one job: a member with another job is refused before it restores anything.
        let fingerprint = group.job_fingerprint(&env)?;
        group.check_job(&storage, &fingerprint)?;
        // Each run's snapshots in their own directory of the shared storage (checkpoint ids
        // start again at 1 in every run, and commits name snapshots by directory and id).
        let seq = group.inner.runs.fetch_add(1, Ordering::AcqRel) + 1;
        let job = format!(
            "{}-{}-{generation}-{seq}",
            config.job_name, group.inner.instance
        );
        let restore =
            match group.compose_restore(&storage, &location, &job, config.max_parallelism)? {
                restore::Composed::Ready(restore) => restore,
                restore::Composed::Missing(missing) => {
                    // Never exit (a replacement would fail the same way): wait for the state,
                    // a new assignment, or an operator's acceptance of the loss.
                    group.report_missing(&storage, &missing);
                    group.wait_for_change(generation, MISSING_STATE_RETRY);
                    continue;
                }
            };
        group.clean_up_in_background(open()?, job.clone(), seq);
        let every = config
            .checkpoints
            .interval
            .unwrap_or(Duration::from_secs(1));
        group.start_standby(open()?, config.max_parallelism, every);
        let warm_files = group.warm_files();
        let floor = RetentionFloor::new();
        let tolerable = config
            .checkpoints
            .tolerable_failed_checkpoints
            .unwrap_or(TOLERABLE_FAILED_CHECKPOINTS);
        env.configure(|c| {
            c.checkpoints.warm_files = warm_files;
            c.job_name = job.clone();
            c.checkpoints.restart = riffle::checkpoint::RestartStrategy::None;
            c.checkpoints.restore = restore;
            c.checkpoints.retention_floor = Some(floor.clone());
            c.checkpoints.tolerable_failed_checkpoints = Some(tolerable);
        });
        group.begin_run(
            generation,
            Some(RunState {
                storage,
                job,
                fingerprint,
                checked: false,
                floor,
            }),
        );
        let started = Instant::now();
        let result = execute(&env);
        let rebalanced = group.generation() != generation;
        group.abort_run();
        let ended = Ended::of(&result, rebalanced);
        let decision = after_run(
            ended,
            restart,
            &mut failures,
            started.elapsed(),
            &mut backoff,
        );
        match (decision, result) {
            (AfterRun::Again { settle }, _) => {
                tracing::info!(
                    group = group.name(),
                    "group: the assignment changed; the run starts again"
                );
                if settle {
                    // The coordinator said so first: its callback is on its way.
                    group.wait_for_change(generation, SETTLE);
                }
            }
            (AfterRun::Restart(delay), Err(e)) => {
                tracing::warn!(group = group.name(), error = %e, attempt = failures, "group: the run failed; it starts again from the committed offsets");
                std::thread::sleep(delay);
            }
            (AfterRun::Leave, Err(e)) => {
                // Its partitions must move to members that can commit them.
                tracing::error!(group = group.name(), error = %e, "group: this member cannot checkpoint; it leaves the group, so that its partitions move");
                group.leave();
                return Err(e);
            }
            // Restart and Leave follow failed runs only.
            (AfterRun::End | AfterRun::Restart(_) | AfterRun::Leave, result) => return result,
        }
    }
}

/// How a run of a member's job ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    /// The job ended by itself (its input ended, or it was stopped).
    Finished,
    /// The group moved partitions: seen by this member (`rebalanced`), or said first by the
    /// coordinator (a commit of an old generation refused: `ConnectorErrorKind::Reassigned`).
    Reassigned { seen: bool },
    /// A setting no restart can fix (another job than the group's, a bad configuration).
    Misconfigured,
    /// More checkpoints failed in a row than tolerated: this member cannot commit.
    CannotCheckpoint,
    /// Any other failure.
    Failed,
}

impl Ended {
    fn of<T>(result: &riffle::Result<T>, rebalanced: bool) -> Ended {
        if rebalanced {
            return Ended::Reassigned { seen: true };
        }
        match result {
            Ok(_) => Ended::Finished,
            Err(e) if e.connector_kind() == Some(ConnectorErrorKind::Reassigned) => {
                Ended::Reassigned { seen: false }
            }
            Err(riffle::Error::Config { .. }) => Ended::Misconfigured,
            Err(riffle::Error::TooManyFailedCheckpoints { .. }) => Ended::CannotCheckpoint,
            Err(_) => Ended::Failed,
        }
    }
}

/// What the member does after a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AfterRun {
    /// Runs again on the new assignment (`settle`: after waiting for the assignment to change).
    Again { settle: bool },
    /// Runs again after this delay (the job's restart strategy).
    Restart(Duration),
    /// Leaves the group and returns the run's error (its partitions move at once).
    Leave,
    /// Returns the run's result.
    End,
}

/// The decision after a run that ended as `ended`; `failures` counts the failed runs so far
/// (and is counted up here), `ran` is how long the run lasted, `backoff` the restart
/// strategy's memory.
fn after_run(
    ended: Ended,
    restart: riffle::checkpoint::RestartStrategy,
    failures: &mut u32,
    ran: Duration,
    backoff: &mut Option<Duration>,
) -> AfterRun {
    match ended {
        Ended::Reassigned { seen } => AfterRun::Again { settle: !seen },
        Ended::Finished | Ended::Misconfigured => AfterRun::End,
        Ended::CannotCheckpoint => AfterRun::Leave,
        Ended::Failed => {
            *failures += 1;
            match restart.next_delay(*failures, ran, backoff) {
                Some(delay) => AfterRun::Restart(delay),
                None => AfterRun::End,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use riffle::checkpoint::RestartStrategy;

    #[test]
    fn a_rebalance_runs_again_and_only_failures_count_against_the_restarts() {
        let fixed = RestartStrategy::FixedDelay {
            attempts: 2,
            delay: Duration::from_millis(10),
        };
        let (mut failures, mut backoff) = (0, None);
        let mut decide =
            |ended| after_run(ended, fixed, &mut failures, Duration::ZERO, &mut backoff);
        assert_eq!(
            decide(Ended::Reassigned { seen: true }),
            AfterRun::Again { settle: false }
        );
        assert_eq!(
            decide(Ended::Reassigned { seen: false }),
            AfterRun::Again { settle: true }
        );
        assert_eq!(
            decide(Ended::Failed),
            AfterRun::Restart(Duration::from_millis(10))
        );
        assert_eq!(
            decide(Ended::Failed),
            AfterRun::Restart(Duration::from_millis(10))
        );
        // A rebalance in between does not use up an attempt, a third failure ends the member.
        assert_eq!(
            decide(Ended::Reassigned { seen: true }),
            AfterRun::Again { settle: false }
        );
        assert_eq!(decide(Ended::Failed), AfterRun::End);
        assert_eq!(failures, 3);
    }

    #[test]
    fn a_member_that_cannot_checkpoint_leaves_and_a_misconfigured_one_ends_at_once() {
        let (mut failures, mut backoff) = (0, None);
        let restart = RestartStrategy::FixedDelay {
            attempts: 10,
            delay: Duration::ZERO,
        };
        assert_eq!(
            after_run(
                Ended::CannotCheckpoint,
                restart,
                &mut failures,
                Duration::ZERO,
                &mut backoff
            ),
            AfterRun::Leave
        );
        assert_eq!(
            after_run(
                Ended::Misconfigured,
                restart,
                &mut failures,
                Duration::ZERO,
                &mut backoff
            ),
            AfterRun::End
        );
        assert_eq!(failures, 0, "neither is retried");
    }

    #[test]
    fn how_a_run_ended_is_read_from_its_result() {
        let reassigned: riffle::Result<()> = Err(riffle::Error::connector(
            "kafka",
            ConnectorErrorKind::Reassigned,
            "commit",
            "rebalanced",
        ));
        assert_eq!(
            Ended::of(&reassigned, false),
            Ended::Reassigned { seen: false }
        );
        assert_eq!(
            Ended::of(&reassigned, true),
            Ended::Reassigned { seen: true }
        );
        assert_eq!(Ended::of(&Ok(()), false), Ended::Finished);
        // A rebalance seen wins over how the run ended (its error is the rebalance's doing).
        assert_eq!(Ended::of(&Ok(()), true), Ended::Reassigned { seen: true });
        let config: riffle::Result<()> = Err(riffle::Error::config("job", "differs"));
        assert_eq!(Ended::of(&config, false), Ended::Misconfigured);
        let checkpoints: riffle::Result<()> = Err(riffle::Error::TooManyFailedCheckpoints {
            failed: 6,
            tolerated: 5,
            last: "storage".into(),
        });
        assert_eq!(Ended::of(&checkpoints, false), Ended::CannotCheckpoint);
        let other: riffle::Result<()> = Err(riffle::Error::Cancelled);
        assert_eq!(Ended::of(&other, false), Ended::Failed);
    }
}
